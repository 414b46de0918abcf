package audit

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// The spool is an append-only file of records, each
//
//	uint32 length | uint32 CRC-32C of payload | payload (one event)
//
// big-endian; the payload is a versioned spool record (spool_record.go),
// never the API's JSON. A crash can leave a torn last record: on open the file is
// scanned and cut after the last intact record, so appends never land
// behind garbage. Damage in the middle (a record failing its checksum with
// intact records after it: the disk, not a crash) costs only the damaged
// bytes; the file is rewritten without them. Records are replayed from the
// front in order; once every record has been written to the store the file
// is truncated to zero. Replaying a prefix twice (a crash mid-replay) is
// harmless because stores skip ids they hold.
//
// Most records were never offered to the store (spooled while it was down,
// or because the queue overflowed), so their replay may take the store's
// fast path for fresh events. Records that may already be stored sit below
// dupEnd: everything a previous run left (it may have crashed mid-replay),
// a batch whose write failed with an unknown outcome, and a replayed range
// whose write failed; their replay takes the deduplicating path.

const (
	spoolFileName   = "audit.spool"
	spoolHeaderSize = 8
	maxSpoolRecord  = 1 << 20 // an event is a few hundred bytes; larger is corruption
)

var (
	errSpoolFull = errors.New("audit spool full")
	// errRecordTooLarge refuses an event whose record would exceed
	// maxSpoolRecord: written, it could never be read back, and the file
	// would be cut there on the next open.
	errRecordTooLarge = errors.New("audit event too large for the spool")
	crcTable          = crc32.MakeTable(crc32.Castagnoli)
)

type spool struct {
	path     string
	maxBytes int64

	mu   sync.Mutex
	f    *os.File
	out  io.Writer // f; tests put a faulty writer in between
	bw   *bufio.Writer
	size int64 // file size including what bw buffers
	// disk is the file size at the last successful flush and unflushed the
	// records appended since: what a failed write (a full disk) cuts the
	// file back to, and loses.
	disk      int64
	unflushed int
	cut       bool                   // a failed write could not cut the file back yet
	lost      int                    // records lost to failed writes, not yet reported
	lostErr   error                  // the last failed write's error
	onLost    func(n int, err error) // reports them and why, outside the lock
	readOff   int64                  // offset of the first record not yet in the store
	pending   int                    // records from readOff to size
	dupEnd    int64                  // records before this offset may already be in the store
	dirty     bool                   // appended since the last fsync
	skipped   int64                  // damaged bytes dropped from the middle of the file at open
	// queued, when set, is the writer's count of events not yet written
	// or spooled: add and addWhole take the events they append off it in
	// the same critical section that counts them pending, so that
	// snapshot never counts an event twice (or not at all) on its way
	// from the queue into the spool.
	queued *atomic.Int64
}

// openSpool opens (creating) dir/audit.spool, takes an exclusive lock on it
// so two processes never share a spool, and drops a torn tail. Damage in
// the middle of the file (an unreadable record followed by intact ones)
// costs only the damaged bytes: the file is rewritten without them, and
// spool.skipped says how many there were.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool dir: %w", err)
	}
	path := filepath.Join(dir, spoolFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	if err := lockFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	res, err := scanSpool(f, nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	if res.skipped > 0 {
		nf, err := rewriteSpool(f, path)
		f.Close() // releases the old file's lock; the new one holds its own
		if err != nil {
			return nil, err
		}
		f = nf
		res.end -= res.skipped
	} else if st, err := f.Stat(); err == nil && st.Size() != res.end {
		if err := f.Truncate(res.end); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut torn spool tail: %w", err)
		}
	}
	// A previous run may have stored any of its records before it stopped.
	return &spool{path: path, maxBytes: maxBytes, f: f, out: f, bw: bufio.NewWriterSize(f, 64<<10),
		size: res.end, disk: res.end, pending: res.records, dupEnd: res.end, skipped: res.skipped}, nil
}

// unlock releases s.mu and then reports records lost to failed writes.
func (s *spool) unlock() {
	lost, err := s.lost, s.lostErr
	s.lost, s.lostErr = 0, nil
	s.mu.Unlock()
	if lost > 0 && s.onLost != nil {
		s.onLost(lost, err)
	}
}

// flushLocked writes what bw buffers to the file. When that fails, the
// buffered records are lost (the disk may hold part of them): the file is
// cut back to its last whole record and bw starts afresh, so the spool
// works again once the disk does, instead of failing every call after.
func (s *spool) flushLocked() error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.bw.Flush(); err != nil {
		err = fmt.Errorf("flush spool: %w", err)
		s.failed(err)
		return err
	}
	s.disk, s.unflushed = s.size, 0
	return nil
}

// failed handles a failed write: the records since the last flush are
// lost, and the file is cut back to what was flushed.
func (s *spool) failed(err error) {
	s.lost += s.unflushed
	s.lostErr = err
	s.pending -= s.unflushed
	s.unflushed = 0
	s.size = s.disk
	s.dupEnd = min(s.dupEnd, s.disk)
	s.bw.Reset(s.out)
	s.cut = true
	s.ready() //nolint:errcheck // retried before the next write
}

// ready cuts the file back after a failed write, if that is still to do.
func (s *spool) ready() error {
	if !s.cut {
		return nil
	}
	if err := s.f.Truncate(s.disk); err != nil {
		return fmt.Errorf("cut spool back after a failed write: %w", err)
	}
	s.cut = false
	return nil
}

func lockFile(f *os.File, path string) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("lock spool %s (another Guard process uses it?): %w", path, err)
	}
	return nil
}

// rewriteSpool copies the intact records of f into a new file that takes
// path's place (written, fsynced and locked before the rename, so no other
// process can open it unlocked) and returns it.
func rewriteSpool(f *os.File, path string) (*os.File, error) {
	tmp := path + ".tmp"
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rewrite damaged spool: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		nf.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("rewrite damaged spool: %w", err)
	}
	if err := lockFile(nf, tmp); err != nil {
		return fail(err)
	}
	bw := bufio.NewWriterSize(nf, 64<<10)
	if _, err := scanSpool(f, func(rec []byte) error {
		_, err := bw.Write(rec)
		return err
	}); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if err := nf.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // make the rename durable; the old file is still whole if not
		d.Close()
	}
	return nf, nil
}

// scanResult is what scanSpool found.
type scanResult struct {
	end     int64 // offset after the last intact record
	records int   // intact records
	skipped int64 // damaged bytes before end, between intact records
}

// scanSpool walks the records of f. A record that is short, has an
// impossible length or fails its checksum is damage: the scan moves on byte
// by byte until an intact record starts. Damage followed by no intact
// record is a torn tail, which end excludes. keep, when set, receives every
// intact record (header and payload, valid until the next call) in order.
func scanSpool(f *os.File, keep func(rec []byte) error) (scanResult, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), spoolHeaderSize+maxSpoolRecord)
	var res scanResult
	var pos int64 // bytes consumed
	for {
		rec, err := peekRecord(r)
		switch {
		case err == nil:
			if keep != nil {
				if err := keep(rec); err != nil {
					return res, err
				}
			}
			res.skipped += pos - res.end
			pos += int64(len(rec))
			res.end = pos
			res.records++
			r.Discard(len(rec))
		case errors.Is(err, io.EOF):
			return res, nil
		case errors.Is(err, errTorn):
			r.Discard(1)
			pos++
		default:
			return res, fmt.Errorf("scan spool: %w", err)
		}
	}
}

var errTorn = errors.New("torn spool record")

// peekRecord returns the record (header and payload) at the reader's
// position without consuming it: io.EOF at the end, errTorn when the bytes
// there are not an intact record.
func peekRecord(r *bufio.Reader) ([]byte, error) {
	h, err := r.Peek(spoolHeaderSize)
	if len(h) < spoolHeaderSize {
		if errors.Is(err, io.EOF) {
			if len(h) == 0 {
				return nil, io.EOF
			}
			return nil, errTorn
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h[:4]))
	if n == 0 || n > maxSpoolRecord {
		return nil, errTorn
	}
	rec, err := r.Peek(spoolHeaderSize + n)
	if len(rec) < spoolHeaderSize+n {
		if errors.Is(err, io.EOF) {
			return nil, errTorn
		}
		return nil, err
	}
	if crc32.Checksum(rec[spoolHeaderSize:], crcTable) != binary.BigEndian.Uint32(rec[4:spoolHeaderSize]) {
		return nil, errTorn
	}
	return rec, nil
}

// readRecord reads one record; io.EOF at a clean end, errTorn for a short
// or corrupt one. It returns the payload and the record's size on disk.
func readRecord(r *bufio.Reader) ([]byte, int64, error) {
	var h [spoolHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, errTorn
		}
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 || n > maxSpoolRecord {
		return nil, 0, errTorn
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, errTorn
		}
		return nil, 0, err
	}
	if crc32.Checksum(p, crcTable) != binary.BigEndian.Uint32(h[4:]) {
		return nil, 0, errTorn
	}
	return p, int64(spoolHeaderSize + n), nil
}

// append adds events in order and returns how many it added; it stops with
// errSpoolFull at the size bound. An event whose record would exceed
// maxSpoolRecord is skipped (the others are added) and reported with
// errRecordTooLarge.
// Data is buffered; sync makes it durable.
func (s *spool) append(events []Event) (int, error) {
	added, _, err := s.add(events, false)
	return added, err
}

// appendMaybeStored is append for events that may already be in the store
// (their write failed with an unknown outcome): their replay deduplicates.
func (s *spool) appendMaybeStored(events []Event) (int, error) {
	added, _, err := s.add(events, true)
	return added, err
}

// add is append; next is the index of the first event it did not get to
// (len(events) unless it stopped at the size bound or a write error).
func (s *spool) add(events []Event, maybeStored bool) (added, next int, err error) {
	s.mu.Lock()
	defer s.unlock()
	defer func() { s.dequeue(added) }()
	if maybeStored {
		defer func() { s.dupEnd = s.size }()
	}
	if err := s.ready(); err != nil {
		return 0, 0, err
	}
	var skipped error
	for i, e := range events {
		p, err := encodeSpoolRecord(e)
		if err != nil {
			return added, i, errors.Join(skipped, fmt.Errorf("encode spool record: %w", err))
		}
		if len(p) > maxSpoolRecord {
			skipped = errors.Join(skipped, fmt.Errorf("%w: event %q is %d bytes, at most %d", errRecordTooLarge, e.ID, len(p), maxSpoolRecord))
			continue
		}
		if s.size+int64(spoolHeaderSize+len(p)) > s.maxBytes {
			return added, i, errors.Join(skipped, errSpoolFull)
		}
		if err := s.writeRecord(p); err != nil {
			return added, i, errors.Join(skipped, err)
		}
		s.size += int64(spoolHeaderSize + len(p))
		s.pending++
		s.unflushed++
		s.dirty = true
		added++
	}
	return added, len(events), skipped
}

// writeRecord buffers one record (header and payload p); a failed write
// is handled as failed says and returned. s.mu is held.
func (s *spool) writeRecord(p []byte) error {
	var h [spoolHeaderSize]byte
	binary.BigEndian.PutUint32(h[:4], uint32(len(p)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(p, crcTable))
	_, err := s.bw.Write(h[:])
	if err == nil {
		_, err = s.bw.Write(p)
	}
	if err != nil {
		err = fmt.Errorf("write spool: %w", err)
		s.failed(err)
	}
	return err
}

// addWhole appends events as maybe stored, all of them or none: unlike
// add, it fails without adding any when they do not all fit
// (errSpoolFull), one of them cannot be a record (errRecordTooLarge, an
// encoding error) or the file does not take them (a full disk). It writes
// them through to the file (fsync is still sync's), so that no later
// write failure loses them. For a caller that keeps the events when this
// fails (secure: their write stays in flight): none of them may then be
// in the spool, or be lost and reported by it. It returns the offsets
// of the first record and after the last (for commit once they are known
// stored).
func (s *spool) addWhole(events []Event) (from, to int64, err error) {
	s.mu.Lock()
	defer s.unlock()
	recs := make([][]byte, len(events))
	var size int64
	for i, e := range events {
		p, err := encodeSpoolRecord(e)
		if err != nil {
			return 0, 0, fmt.Errorf("encode spool record: %w", err)
		}
		if len(p) > maxSpoolRecord {
			return 0, 0, fmt.Errorf("%w: event %q is %d bytes, at most %d", errRecordTooLarge, e.ID, len(p), maxSpoolRecord)
		}
		recs[i] = p
		size += int64(spoolHeaderSize + len(p))
	}
	if s.size+size > s.maxBytes {
		return 0, 0, errSpoolFull
	}
	// What bw holds goes first, so that a failure below cuts the file back
	// to just before these records and loses no other.
	if err := s.flushLocked(); err != nil {
		return 0, 0, err
	}
	for _, p := range recs {
		if err := s.writeRecord(p); err != nil { // s.unflushed is 0: nothing counted lost
			return 0, 0, err
		}
	}
	if err := s.bw.Flush(); err != nil {
		err = fmt.Errorf("flush spool: %w", err)
		s.failed(err)
		return 0, 0, err
	}
	from = s.size
	s.size += size
	s.disk = s.size
	s.pending += len(recs)
	s.dequeue(len(recs))
	s.dirty = true
	s.dupEnd = s.size
	return from, s.size, nil
}

// dequeue takes n events just appended off the writer's queue count;
// s.mu is held.
func (s *spool) dequeue(n int) {
	if s.queued != nil && n > 0 {
		s.queued.Add(-int64(n))
	}
}

// sync writes buffered records and fsyncs the file, and reports whether
// it wrote anything to disk. The fsync runs outside the lock so Record's
// overflow appends never wait for the disk.
func (s *spool) sync() (wrote bool, err error) {
	s.mu.Lock()
	if !s.dirty {
		s.unlock()
		return false, nil
	}
	err = s.flushLocked()
	s.dirty = false
	s.unlock()
	if err != nil {
		return false, err
	}
	if err := s.f.Sync(); err != nil {
		return false, fmt.Errorf("fsync spool: %w", err)
	}
	return true, nil
}

// diskFull reports whether err says the spool's file system has no room
// (or the user's quota is used up): the spool is full as surely as at its
// size bound, and is alerted as spool_full.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// spoolBatch is what read returns: events from the front of the
// unreplayed records.
type spoolBatch struct {
	events  []Event
	next    int64 // offset after the batch's records
	records int   // records read, undecodable ones included
	// fresh says no record of the batch can be in the store already.
	fresh bool
}

// read returns up to max events from the front of the unreplayed records,
// the offset after them and how many records that was; the records stay
// pending until commit.
func (s *spool) read(max int) ([]Event, int64, int, error) {
	b, err := s.readAt(s.front(), max)
	return b.events, b.next, b.records, err
}

// front returns the offset of the first record not yet committed.
func (s *spool) front() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readOff
}

// readAt returns up to max events from the records starting at off, a
// record boundary at or after front (so a replay can read the next batch
// while the previous one is being written).
func (s *spool) readAt(off int64, max int) (spoolBatch, error) {
	s.mu.Lock()
	// A failed flush loses only what it buffered (reported through
	// onLost): the file up to the new end is whole and is read all the same.
	s.flushLocked() //nolint:errcheck
	end := s.size
	fresh := off >= s.dupEnd
	s.unlock()
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, off, end-off), 64<<10)
	var out []Event
	records := 0
	for len(out) < max && off < end {
		p, size, err := readRecord(r)
		if err != nil {
			return spoolBatch{}, fmt.Errorf("read spool at %d: %w", off, err)
		}
		off += size
		records++
		e, err := decodeSpoolRecord(p)
		if err != nil {
			continue // intact checksum but undecodable: skip it rather than wedge replay
		}
		out = append(out, e)
	}
	return spoolBatch{events: out, next: off, records: records, fresh: fresh}, nil
}

// maybeStored marks the records before next as possibly in the store: a
// write of them failed with an unknown outcome.
func (s *spool) maybeStored(next int64) {
	s.mu.Lock()
	s.dupEnd = max(s.dupEnd, next)
	s.mu.Unlock()
}

// commit marks the records before next as stored; when that is all of
// them, the file is truncated to zero. It returns the number of records
// still pending.
func (s *spool) commit(next int64, records int) (int, error) {
	s.mu.Lock()
	defer s.unlock()
	s.readOff = next
	s.pending -= records
	if s.readOff < s.size {
		return s.pending, nil
	}
	if err := s.flushLocked(); err != nil {
		return s.pending, err
	}
	if err := s.f.Truncate(0); err != nil {
		return s.pending, fmt.Errorf("truncate spool: %w", err)
	}
	s.size, s.disk, s.readOff, s.pending, s.dupEnd = 0, 0, 0, 0, 0
	return 0, nil
}

// stats returns the pending record count and the file size in bytes (what
// counts against the bound).
func (s *spool) stats() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.size
}

// snapshot is stats with the writer's queue count (s.queued) read at the
// same moment: an event moving from the queue into the spool is in one of
// the two counts, never both or neither.
func (s *spool) snapshot() (queued int64, pending int, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queued != nil {
		queued = s.queued.Load()
	}
	return queued, s.pending, s.size
}

// close syncs and closes the file (releasing the lock).
func (s *spool) close() error {
	_, err := s.sync()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close spool: %w", cerr)
	}
	return err
}
