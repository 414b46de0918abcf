package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// WriterConfig configures a Writer; zero fields get the documented defaults.
type WriterConfig struct {
	// BatchSize is the most events written per store call; a full batch is
	// written at once. Default 1000.
	BatchSize int
	// FlushInterval is the longest an event waits in memory before its
	// (partial) batch is written, and how often the spool is fsynced.
	// Default 200ms.
	FlushInterval time.Duration
	// QueueSize bounds the in-memory queue between Record and the writer
	// goroutine, in events. Default 65536.
	QueueSize int
	// SpoolDir is where the spool file (audit.spool) lives. "" means no
	// spool: while the store is down, the failing batch is retried and new
	// events wait in the queue; what overflows it is dropped and counted.
	SpoolDir string
	// SpoolMaxBytes bounds the spool file. Default 1 GiB. When it is full,
	// or its file system is (ENOSPC, EDQUOT), OnSpoolFull(true) fires and
	// new events are dropped and counted while the store is down; while it
	// is up (the file drains but only shrinks once empty) they are written
	// to the store directly. OnSpoolFull(false) fires once the spool has
	// been replayed to empty, or, after a full disk, once a spool write
	// reaches the disk again.
	SpoolMaxBytes int64
	// InsertTimeout bounds one store write. Default 5s.
	InsertTimeout time.Duration
	// MaxInFlight is how many batches of newly recorded events may be
	// written at once, each on its own connection: with 2, the next
	// batch's COPY overlaps the previous one's round trip and commit.
	// Spool replays write one batch at a time. Default 2.
	MaxInFlight int
	// RetryInterval is how often a down store is probed. Default 1s.
	RetryInterval time.Duration
	// Now is the clock for state-change times. Default time.Now.
	Now func() time.Time
}

// WriterHooks are optional callbacks for metrics and alerts. They run on
// the writer's goroutine (OnDropped and OnSpoolFull also on Record's
// caller) and must be quick and must not call back into the Writer.
type WriterHooks struct {
	// OnWritten receives the number of events written to the store.
	OnWritten func(n int)
	// OnDropped receives the number of events lost (queue and spool full,
	// or no spool while the store is down, or rejected by the store, or
	// spooled while one event's record would exceed 1 MiB).
	OnDropped func(n int)
	// OnStoreState fires when the store goes down (up=false, with the error)
	// or comes back (up=true), with the time of the change.
	OnStoreState func(up bool, since time.Time, err error)
	// OnSpoolFull fires when the spool reaches SpoolMaxBytes or its disk
	// is full (true) and when it has room again (false).
	OnSpoolFull func(full bool)
}

// WriterStats is a snapshot of a Writer's state for metrics and /readyz.
type WriterStats struct {
	Queued      int    // events in the in-memory queue or the batch being written
	SpoolEvents int    // events in the spool not yet in the store
	SpoolBytes  int64  // size of the spool file
	Written     uint64 // events written to the store since start
	Dropped     uint64 // events lost since start
	StoreUp     bool   // the last store write or probe succeeded
	SpoolFull   bool
}

// ErrWriterClosed is returned by a second Close.
var ErrWriterClosed = errors.New("audit writer closed")

// Writer moves events from the decision path to the Store without ever
// making the decision path wait: Record enqueues, one goroutine batches
// (BatchSize or FlushInterval, whichever first) and writes, up to
// MaxInFlight batches at once; while the store is down, batches go to the
// spool file and are replayed in order when it is back. Batches of newly
// recorded events take the store's fast path (PGStore.InsertFresh, a plain
// COPY); whatever may already be stored (a retry after a write whose
// outcome is unknown, what a previous run spooled) goes through Insert,
// which skips stored events, so no event is ever stored twice.
//
// Durability: an event is durable once it is in the store or the spool has
// been fsynced. A crash therefore loses at most what was Recorded in the
// last FlushInterval plus the batches being written (with the store up:
// up to MaxInFlight batches not yet committed, none in flight for longer
// than two FlushIntervals: a write that takes longer has its batch copied
// to the spool, and the events after it follow it there until the store
// answers; with the store down: spool records not yet fsynced, also at
// most one FlushInterval old), plus any queue backlog if the writer had
// fallen behind. Close loses nothing.
type Writer struct {
	logger *slog.Logger
	cfg    WriterConfig
	store  Store
	hooks  WriterHooks
	spool  *spool // nil without SpoolDir

	q         chan Event
	syncs     chan chan struct{} // Sync's requests
	closeMu   sync.RWMutex       // Record holds it shared so Close knows no Record is mid-enqueue
	closed    bool
	stop      chan struct{}
	done      chan struct{}
	ctx       context.Context // cancelled when Close's deadline passes
	cancel    context.CancelFunc
	closeErr  error
	queued    atomic.Int64 // accepted into the queue, not yet written, spooled or dropped
	written   atomic.Uint64
	dropped   atomic.Uint64
	up        atomic.Bool
	spoolFull atomic.Bool // capFull || diskFull, for Stats
	fullMu    sync.Mutex  // orders the full-state changes and their hooks
	capFull   bool        // the spool reached SpoolMaxBytes; fullMu
	diskFull  bool        // a spool write failed for want of disk space; fullMu
	downSince time.Time   // writer goroutine only
	lastProbe time.Time   // writer goroutine only
	probe     chan error  // a ping in flight while the store is down; writer goroutine only
	inflight  []*inflight // writes in flight, oldest first; writer goroutine only
	secured   []*inflight // writes in flight whose batches are spooled (secure); writer goroutine only
	free      [][]Event   // batch arrays to reuse; writer goroutine only
	upEpoch   uint64      // how often the store came back; writer goroutine only
	writes    uint64      // writes of new events started (inflight.seq); writer goroutine only
	okSeq     uint64      // the latest-started such write that succeeded; writer goroutine only

	// lastDownProbe is when the last probe that failed was sent: the store
	// came back after it (writer goroutine only).
	lastDownProbe time.Time
}

// NewWriter validates cfg, opens the spool (replaying what a previous run
// left there, in the background) and starts the writer goroutine. Call
// Close to stop it. It fails when the spool cannot be opened or is locked
// by another process.
func NewWriter(logger *slog.Logger, cfg WriterConfig, store Store, hooks WriterHooks) (*Writer, error) {
	if store == nil {
		return nil, errors.New("audit writer: nil store")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 65536
	}
	if cfg.SpoolMaxBytes <= 0 {
		cfg.SpoolMaxBytes = 1 << 30
	}
	if cfg.InsertTimeout <= 0 {
		cfg.InsertTimeout = 5 * time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Writer{
		logger: logger, cfg: cfg, store: store, hooks: hooks,
		q: make(chan Event, cfg.QueueSize), syncs: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.up.Store(true)
	if cfg.SpoolDir != "" {
		sp, err := openSpool(cfg.SpoolDir, cfg.SpoolMaxBytes)
		if err != nil {
			w.cancel()
			return nil, fmt.Errorf("audit writer: %w", err)
		}
		w.spool = sp
		sp.queued = &w.queued
		sp.onLost = func(n int, err error) {
			w.logger.Error("audit spool write failed; spooled events not yet on disk are lost", "events", n, "err", err)
			w.drop(n, "spool write failed")
			if diskFull(err) {
				w.setFull(fullDisk, true)
			}
		}
		if sp.skipped > 0 {
			logger.Error("audit spool was damaged: unreadable bytes skipped, the events in them are lost",
				"bytes", sp.skipped, "path", sp.path)
		}
		if n, size := sp.stats(); n > 0 {
			logger.Warn("audit spool holds events from a previous run; replaying", "events", n, "bytes", size, "path", sp.path)
		}
	}
	go w.run()
	return w, nil
}

// Record queues e for writing and returns at once; it never blocks on the
// store. When the queue is full, e goes straight to the spool, or is
// dropped and counted without one. Record after Close drops and counts.
// e.At and e.LockoutUntil are kept in UTC at millisecond precision.
func (w *Writer) Record(e Event) {
	w.closeMu.RLock()
	defer w.closeMu.RUnlock()
	if w.closed {
		w.drop(1, "writer closed")
		return
	}
	e = normalize(e)
	w.queued.Add(1) // before the send, so Backlog never misses an event in flight
	select {
	case w.q <- e:
		return
	default:
	}
	if w.spool != nil {
		// Counted queued until the spool, appending it, counts it its own.
		if n, err := w.spool.append([]Event{e}); n == 1 {
			return
		} else {
			w.spoolError(err)
		}
	}
	w.queued.Add(-1)
	w.drop(1, "audit queue full")
}

// Sync waits until every event recorded before it was called has been
// offered to the store and the store has answered: written, or spooled or
// dropped when it failed. Reads of the trail call it first, so that an
// instance's own decisions are in its audit answers at once rather than
// after the next flush (read-your-writes on one instance). While the
// spool still holds older events (being replayed after an outage or a
// restart), newer ones go behind them and Sync returns once they are
// spooled: they appear when the replay reaches them. It returns
// ctx's error when ctx ends first (the events stay on their way), nil
// once the writer is closed.
func (w *Writer) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := make(chan struct{})
	select {
	case w.syncs <- req:
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req:
		return nil
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backlog returns how many recorded events are not yet in the store:
// queued, being written, or spooled.
func (w *Writer) Backlog() int {
	s := w.Stats()
	return s.Queued + s.SpoolEvents
}

// PostgresUp reports whether the last store write or probe succeeded.
func (w *Writer) PostgresUp() bool { return w.up.Load() }

// Stats returns a snapshot of the writer's counters.
func (w *Writer) Stats() WriterStats {
	st := WriterStats{
		Queued:    int(w.queued.Load()),
		Written:   w.written.Load(),
		Dropped:   w.dropped.Load(),
		StoreUp:   w.up.Load(),
		SpoolFull: w.spoolFull.Load(),
	}
	if w.spool != nil {
		q, n, size := w.spool.snapshot()
		st.Queued, st.SpoolEvents, st.SpoolBytes = int(q), n, size
	}
	return st
}

// Close stops accepting events, writes the queue to the store (or the
// spool), then replays the spool into the store while it answers, and
// fsyncs and closes the spool; what could not be written stays in the
// spool for the next start. When ctx ends first, the write in progress is
// abandoned to the spool. It returns an error when events were dropped
// during shutdown (no spool and the store down), or ErrWriterClosed when
// called twice.
func (w *Writer) Close(ctx context.Context) error {
	w.closeMu.Lock()
	if w.closed {
		w.closeMu.Unlock()
		return ErrWriterClosed
	}
	w.closed = true
	w.closeMu.Unlock()
	close(w.stop)
	select {
	case <-w.done:
	case <-ctx.Done():
		w.cancel()
		<-w.done
	}
	w.cancel()
	return w.closeErr
}

func (w *Writer) drop(n int, why string) {
	if n <= 0 {
		return
	}
	w.dropped.Add(uint64(n))
	if w.hooks.OnDropped != nil {
		w.hooks.OnDropped(n)
	}
	w.logger.Debug("audit events dropped", "n", n, "reason", why)
}

func (w *Writer) spoolError(err error) {
	full := errors.Is(err, errSpoolFull)
	if full {
		w.setFull(fullCap, true)
	}
	if diskFull(err) {
		w.setFull(fullDisk, true)
	}
	if !full || errors.Is(err, errRecordTooLarge) {
		w.logger.Error("audit spool write failed; events dropped", "err", err)
	}
}

// Why the spool is full.
const (
	fullCap  = iota // at SpoolMaxBytes
	fullDisk        // its file system has no room
	fullAll         // for clearing: the spool has been replayed to empty
)

// setFull records that the spool is (or is no longer) full for reason,
// and fires OnSpoolFull when that changes whether it is full at all.
func (w *Writer) setFull(reason int, full bool) {
	w.fullMu.Lock()
	defer w.fullMu.Unlock()
	was := w.capFull || w.diskFull
	switch reason {
	case fullCap:
		w.capFull = full
	case fullDisk:
		w.diskFull = full
	case fullAll:
		w.capFull, w.diskFull = full, full
	}
	now := w.capFull || w.diskFull
	w.spoolFull.Store(now)
	if now == was {
		return
	}
	switch {
	case now && reason == fullDisk:
		w.logger.Error("audit spool full: its disk has no room; dropping events until it does", "dir", w.cfg.SpoolDir)
	case now:
		w.logger.Error("audit spool full: dropping events until it drains", "max_bytes", w.cfg.SpoolMaxBytes)
	default:
		w.logger.Info("audit spool has room again")
	}
	if w.hooks.OnSpoolFull != nil {
		w.hooks.OnSpoolFull(now)
	}
}

// diskFullNow reports whether the spool is full for want of disk space.
func (w *Writer) diskFullNow() bool {
	w.fullMu.Lock()
	defer w.fullMu.Unlock()
	return w.diskFull
}

func (w *Writer) markUp() {
	if w.up.Swap(true) {
		return
	}
	w.upEpoch++
	now := w.cfg.Now()
	w.logger.Info("audit store reachable again", "down_for", now.Sub(w.downSince).String())
	if w.hooks.OnStoreState != nil {
		// The earliest the store can have come back: after the last probe
		// that failed (or the failure that marked it down), not when this
		// write or probe found it, up to a RetryInterval later; an alert
		// held "until up for 10 s" then goes out at most 10 s after it.
		since := w.downSince
		if w.lastDownProbe.After(since) {
			since = w.lastDownProbe
		}
		if since.After(now) {
			since = now
		}
		w.hooks.OnStoreState(true, since, nil)
	}
}

func (w *Writer) markDown(err error) {
	if !w.up.Swap(false) {
		return
	}
	w.downSince = w.cfg.Now()
	w.lastProbe = w.downSince
	w.logger.Error("audit store unreachable; spooling events", "err", err, "spool", w.spool != nil)
	if w.hooks.OnStoreState != nil {
		w.hooks.OnStoreState(false, w.downSince, err)
	}
}
