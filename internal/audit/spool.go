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
	"syscall"
)

// The spool is an append-only file of records, each
//
//	uint32 length | uint32 CRC-32C of payload | payload (one event's JSON)
//
// big-endian. A crash can leave a torn last record: on open the file is
// scanned and cut at the first record that is short or fails its checksum,
// so appends never land behind garbage. Records are replayed from the
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

	mu      sync.Mutex
	f       *os.File
	bw      *bufio.Writer
	size    int64 // file size including what bw buffers
	readOff int64 // offset of the first record not yet in the store
	pending int   // records from readOff to size
	dupEnd  int64 // records before this offset may already be in the store
	dirty   bool  // appended since the last fsync
}

// openSpool opens (creating) dir/audit.spool, takes an exclusive lock on it
// so two processes never share a spool, and drops a torn tail.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool dir: %w", err)
	}
	path := filepath.Join(dir, spoolFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock spool %s (another Guard process uses it?): %w", path, err)
	}
	end, n, err := scanSpool(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.Size() != end {
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut torn spool tail: %w", err)
		}
	}
	// A previous run may have stored any of its records before it stopped.
	return &spool{path: path, maxBytes: maxBytes, f: f, bw: bufio.NewWriterSize(f, 64<<10),
		size: end, pending: n, dupEnd: end}, nil
}

// scanSpool returns the offset after the last intact record and the number
// of intact records.
func scanSpool(f *os.File) (int64, int, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 64<<10)
	var off int64
	n := 0
	for {
		_, size, err := readRecord(r)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, errTorn) {
				return off, n, nil
			}
			return 0, 0, fmt.Errorf("scan spool: %w", err)
		}
		off += size
		n++
	}
}

var errTorn = errors.New("torn spool record")

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
	return s.add(events, false)
}

// appendMaybeStored is append for events that may already be in the store
// (their write failed with an unknown outcome): their replay deduplicates.
func (s *spool) appendMaybeStored(events []Event) (int, error) {
	return s.add(events, true)
}

func (s *spool) add(events []Event, maybeStored bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if maybeStored {
		defer func() { s.dupEnd = s.size }()
	}
	added := 0
	var skipped error
	for _, e := range events {
		// MarshalJSON directly: json.Marshal(e) would produce the same bytes
		// after validating and compacting them once more.
		p, err := e.MarshalJSON()
		if err != nil {
			return added, errors.Join(skipped, fmt.Errorf("encode spool record: %w", err))
		}
		if len(p) > maxSpoolRecord {
			skipped = errors.Join(skipped, fmt.Errorf("%w: event %q is %d bytes, at most %d", errRecordTooLarge, e.ID, len(p), maxSpoolRecord))
			continue
		}
		if s.size+int64(spoolHeaderSize+len(p)) > s.maxBytes {
			return added, errors.Join(skipped, errSpoolFull)
		}
		var h [spoolHeaderSize]byte
		binary.BigEndian.PutUint32(h[:4], uint32(len(p)))
		binary.BigEndian.PutUint32(h[4:], crc32.Checksum(p, crcTable))
		if _, err := s.bw.Write(h[:]); err != nil {
			return added, errors.Join(skipped, fmt.Errorf("write spool: %w", err))
		}
		if _, err := s.bw.Write(p); err != nil {
			return added, errors.Join(skipped, fmt.Errorf("write spool: %w", err))
		}
		s.size += int64(spoolHeaderSize + len(p))
		s.pending++
		s.dirty = true
		added++
	}
	return added, skipped
}

// sync writes buffered records and fsyncs the file. The fsync runs outside
// the lock so Record's overflow appends never wait for the disk.
func (s *spool) sync() error {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	err := s.bw.Flush()
	s.dirty = false
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("flush spool: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("fsync spool: %w", err)
	}
	return nil
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
	err := s.bw.Flush()
	end := s.size
	fresh := off >= s.dupEnd
	s.mu.Unlock()
	if err != nil {
		return spoolBatch{}, fmt.Errorf("flush spool: %w", err)
	}
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
		var e Event
		if err := e.UnmarshalJSON(p); err != nil {
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
	defer s.mu.Unlock()
	s.readOff = next
	s.pending -= records
	if s.readOff < s.size {
		return s.pending, nil
	}
	if err := s.bw.Flush(); err != nil {
		return s.pending, fmt.Errorf("flush spool: %w", err)
	}
	if err := s.f.Truncate(0); err != nil {
		return s.pending, fmt.Errorf("truncate spool: %w", err)
	}
	s.size, s.readOff, s.pending, s.dupEnd = 0, 0, 0, 0
	return 0, nil
}

// stats returns the pending record count and the file size in bytes (what
// counts against the bound).
func (s *spool) stats() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.size
}

// close syncs and closes the file (releasing the lock).
func (s *spool) close() error {
	err := s.sync()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close spool: %w", cerr)
	}
	return err
}
