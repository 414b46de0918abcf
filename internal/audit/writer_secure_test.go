package audit

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A batch in flight that the spool cannot take whole (it has room for
// part of it only, one of its events is too large for a record, or the
// disk is full) stays in flight, and none of it is spooled: records of
// part of it would be replayed and counted on top of its own write, or
// lost to the full disk and counted as dropped although the write stored
// them. Once the slow write has stored the batch, every event is stored,
// written and counted once, and nothing is dropped.
func TestWriterSecuresWholeBatchesOnly(t *testing.T) {
	const flush, delay = 10 * time.Millisecond, 300 * time.Millisecond
	recSize := func(e Event) int64 {
		p, err := encodeSpoolRecord(normalize(e))
		if err != nil {
			t.Fatal(err)
		}
		return int64(spoolHeaderSize + len(p))
	}
	for _, tt := range []struct {
		name  string
		setup func(evs []Event, cfg *WriterConfig)
		fault func(w *Writer) func() // returns the repair
	}{
		{"room for part of it", func(evs []Event, cfg *WriterConfig) {
			cfg.SpoolMaxBytes = recSize(evs[0]) + recSize(evs[1]) + recSize(evs[2])/2
		}, nil},
		{"an event too large for a record", func(evs []Event, cfg *WriterConfig) {
			evs[3].Note = strings.Repeat("x", maxSpoolRecord+1)
		}, nil},
		{"its disk full", nil, func(w *Writer) func() {
			ff := &enospcFile{f: w.spool.f}
			ff.fail.Store(true)
			w.spool.mu.Lock()
			w.spool.out = ff
			w.spool.bw.Reset(ff)
			w.spool.mu.Unlock()
			return func() { ff.fail.Store(false) }
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &slowStore{flakyStore: newFlakyStore(), delay: delay}
				s.slow.Store(true)
				evs := genEvents("wh", 5, time.Now(), time.Millisecond)
				cfg := WriterConfig{BatchSize: 5, FlushInterval: flush, RetryInterval: 20 * time.Millisecond,
					InsertTimeout: 5 * time.Second, SpoolDir: t.TempDir()}
				if tt.setup != nil {
					tt.setup(evs, &cfg)
				}
				var written, dropped atomic.Int64
				w := newTestWriter(t, cfg, s, WriterHooks{
					OnWritten: func(n int) { written.Add(int64(n)) },
					OnDropped: func(n int) { dropped.Add(int64(n)) },
				})
				repair := func() {}
				if tt.fault != nil {
					repair = tt.fault(w)
				}
				for _, e := range evs {
					w.Record(e)
				}
				time.Sleep(delay + 10*flush)
				synctest.Wait()
				// The store fast and the disk repaired: whatever was spooled
				// is replayed by now.
				s.slow.Store(false)
				repair()
				time.Sleep(time.Second)
				synctest.Wait()
				st := w.Stats()
				if got := s.Len(); got != len(evs) {
					t.Errorf("stored %d events, want %d", got, len(evs))
				}
				if st.Written != uint64(len(evs)) || written.Load() != int64(len(evs)) {
					t.Errorf("written %d, OnWritten %d; want %d each (every event counted once)",
						st.Written, written.Load(), len(evs))
				}
				if st.Dropped != 0 || dropped.Load() != 0 {
					t.Errorf("dropped %d, OnDropped %d; want 0 (the write stored every event)", st.Dropped, dropped.Load())
				}
				if b := w.Backlog(); b != 0 || st.SpoolEvents != 0 {
					t.Errorf("backlog %d, %d spooled; want 0 and 0", b, st.SpoolEvents)
				}
				if !st.StoreUp || st.SpoolFull {
					t.Errorf("store up %v, spool full %v; want up and not full (nothing was dropped)", st.StoreUp, st.SpoolFull)
				}
			})
		})
	}
}

// slowFirstFailure is a MemoryStore whose first write of the event failID
// hangs for delay and then fails (a dead pooled connection timing out),
// while every other write succeeds at once.
type slowFirstFailure struct {
	*MemoryStore
	failID string
	delay  time.Duration
	failed atomic.Bool
}

func (s *slowFirstFailure) Insert(ctx context.Context, events []Event) error {
	if slices.ContainsFunc(events, func(e Event) bool { return e.ID == s.failID }) && !s.failed.Swap(true) {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
		}
		return errOutage
	}
	return s.MemoryStore.Insert(ctx, events)
}

// One write hangs and fails (a dead pooled connection, timing out) while
// the write after it succeeds at once: the store is evidently up, so no
// outage is reported (a postgres_down alert followed by
// postgres_recovered), though the hanging write was secured to the spool
// long before it failed; and every event is stored and counted once.
func TestWriterSecuredWriteFailingAmongSuccessesIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush, delay = 10 * time.Millisecond, time.Second
		s := &slowFirstFailure{MemoryStore: NewMemoryStore(0), failID: "sf000000", delay: delay}
		var states storeStates
		w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: flush, RetryInterval: 20 * time.Millisecond,
			InsertTimeout: 5 * time.Second, SpoolDir: t.TempDir()}, s,
			WriterHooks{OnStoreState: states.hook})
		evs := genEvents("sf", 10, time.Now(), time.Millisecond)
		for _, e := range evs {
			w.Record(e)
		}
		time.Sleep(10 * flush)
		synctest.Wait()
		if got := w.Stats().SpoolEvents; got != 5 {
			t.Fatalf("%d events spooled while the first write hangs, want its 5", got)
		}
		time.Sleep(delay + 10*flush)
		synctest.Wait()
		storedOnceNoOutage(t, w, s.Len(), len(evs), &states)
	})
}

// A store that is merely slow (every write takes longer than the two
// flush intervals after which a batch in flight is secured to the spool)
// is not sent those batches twice: a secured write that succeeds takes
// its records out of the spool instead of leaving them to the replay,
// which would write them again through the deduplicating path, adding
// half again to the load of a store already short of time. Every event
// is still stored and counted once.
func TestWriterSlowStoreGetsEachBatchOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush = 10 * time.Millisecond
		s := &slowStore{flakyStore: newFlakyStore(), delay: 5 * flush}
		s.slow.Store(true)
		var written atomic.Int64
		w := newTestWriter(t, WriterConfig{BatchSize: 200, FlushInterval: flush, InsertTimeout: 5 * time.Second,
			SpoolDir: t.TempDir()}, s, WriterHooks{OnWritten: func(n int) { written.Add(int64(n)) }})
		evs := genEvents("so", 2000, time.Now(), time.Millisecond)
		for i, e := range evs {
			w.Record(e)
			if i%2 == 1 {
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := s.Len(); got != len(evs) || w.Backlog() != 0 {
			t.Fatalf("stored %d, backlog %d; want %d and 0", got, w.Backlog(), len(evs))
		}
		if got := written.Load(); got != int64(len(evs)) || w.Stats().Written != uint64(len(evs)) {
			t.Errorf("OnWritten %d, Written %d; want %d", got, w.Stats().Written, len(evs))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		twice := 0
		for _, e := range evs {
			if s.inserts[e.ID] != 1 {
				twice++
			}
		}
		if twice > 0 {
			t.Errorf("%d of %d events sent to the store more than once", twice, len(evs))
		}
	})
}

// lockedStore is a MemoryStore whose table is locked while locked is set:
// writes wait until their deadline, but pings answer (they touch no
// table), as with a LOCK TABLE or a long ALTER on Postgres.
type lockedStore struct {
	*MemoryStore
	locked atomic.Bool
}

func (s *lockedStore) Insert(ctx context.Context, events []Event) error {
	if s.locked.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.MemoryStore.Insert(ctx, events)
}

// A store whose writes hang while its pings answer (a locked table) gets
// its spool replayed once a ping succeeds; that replay's write hangs as
// well. It must not hold the writer goroutine until InsertTimeout, with
// the events recorded meanwhile in memory only, over and over, each
// RetryInterval: they go on reaching the spool file within a few flush
// intervals all along. Once the lock is gone, every event is stored and
// counted once.
func TestWriterLockedStoreDoesNotHoldEventsInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush, timeout = 10 * time.Millisecond, 2 * time.Second
		s := &lockedStore{MemoryStore: NewMemoryStore(0)}
		s.locked.Store(true)
		dir := t.TempDir()
		var written atomic.Int64
		w := newTestWriter(t, WriterConfig{BatchSize: 20, FlushInterval: flush, RetryInterval: 50 * time.Millisecond,
			InsertTimeout: timeout, SpoolDir: dir}, s, WriterHooks{OnWritten: func(n int) { written.Add(int64(n)) }})
		evs := genEvents("lk", 3*int(timeout/time.Millisecond), time.Now(), time.Millisecond)
		worst := 0
		for i, e := range evs {
			w.Record(e)
			time.Sleep(time.Millisecond)
			if i%100 == 99 {
				synctest.Wait()
				// Recorded more than five flush intervals ago and not in the
				// file: what a crash now would lose beyond the bound.
				if lag := i + 1 - 5*int(flush/time.Millisecond) - spooledOnDisk(t, dir); lag > worst {
					worst = lag
				}
			}
		}
		if worst > 0 {
			t.Errorf("up to %d events recorded more than five flush intervals before were not in the spool file", worst)
		}
		s.locked.Store(false)
		time.Sleep(timeout + time.Second)
		synctest.Wait()
		if !w.PostgresUp() || w.Backlog() != 0 || s.Len() != len(evs) {
			t.Fatalf("after the lock: up %v, backlog %d, stored %d; want up, 0, %d", w.PostgresUp(), w.Backlog(), s.Len(), len(evs))
		}
		if got := written.Load(); got != int64(len(evs)) {
			t.Errorf("OnWritten counted %d, want %d", got, len(evs))
		}
	})
}

// slowAfterFailure is a MemoryStore whose first write of failID fails
// after failAfter (a pooled connection found dead) and whose other writes
// each take delay, longer than the two flush intervals after which a
// write in flight is secured: a store that is up, if slow.
type slowAfterFailure struct {
	*MemoryStore
	failID    string
	failAfter time.Duration
	delay     time.Duration
	failed    atomic.Bool
}

func (s *slowAfterFailure) Insert(ctx context.Context, events []Event) error {
	if slices.ContainsFunc(events, func(e Event) bool { return e.ID == s.failID }) && !s.failed.Swap(true) {
		time.Sleep(s.failAfter)
		return errOutage
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.MemoryStore.Insert(ctx, events)
}

// A write fails soon while the write after it is still in flight, and
// slow: whether the store is down is not known yet, and waiting for that
// write (at most secureAfter, not its InsertTimeout) does not tell it.
// That is no outage yet: the later write's own result reports one if
// there is one. Here it succeeds, so no outage is reported (not a
// postgres_down alert followed by postgres_recovered), and every event is
// stored and counted once.
func TestWriterFailureBeforeASlowWriteIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush = 10 * time.Millisecond
		// The failure comes after the second batch's write has started
		// (else there is no later write to wait for: an outage), well
		// before it has been in flight for two flush intervals.
		s := &slowAfterFailure{MemoryStore: NewMemoryStore(0), failID: "sa000000", failAfter: flush / 2, delay: 10 * flush}
		var states storeStates
		w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: flush, RetryInterval: 20 * time.Millisecond,
			InsertTimeout: 5 * time.Second, SpoolDir: t.TempDir()}, s,
			WriterHooks{OnStoreState: states.hook})
		evs := genEvents("sa", 10, time.Now(), time.Millisecond)
		for _, e := range evs {
			w.Record(e)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		storedOnceNoOutage(t, w, s.Len(), len(evs), &states)
	})
}

// storedOnceNoOutage checks that all n events were stored and counted once
// (stored is how many the store holds) and that no store state change was
// reported.
func storedOnceNoOutage(t *testing.T, w *Writer, stored, n int, states *storeStates) {
	t.Helper()
	if stored != n {
		t.Errorf("stored %d events, want %d", stored, n)
	}
	if st := w.Stats(); st.Written != uint64(n) || st.Dropped != 0 || w.Backlog() != 0 {
		t.Errorf("written %d, dropped %d, backlog %d; want %d, 0, 0", st.Written, st.Dropped, w.Backlog(), n)
	}
	if got := states.get(); len(got) != 0 {
		t.Errorf("got store states %v, want none", got)
	}
}
