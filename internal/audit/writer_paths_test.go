package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Newly recorded events reach Postgres through the plain COPY, never the
// staging table.
func TestWriterFreshBatchesTakeDirectCopy(t *testing.T) {
	s := testPGStore(t, PGConfig{})
	w := newTestWriter(t, WriterConfig{BatchSize: 100, FlushInterval: 10 * time.Millisecond,
		SpoolDir: t.TempDir()}, s, WriterHooks{})
	evs := genEvents("d", 1050, time.Now().UTC().Add(-time.Minute), time.Millisecond)
	for _, e := range evs {
		w.Record(e)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	got := s.pathCounts()
	if got.direct < 11 || got.dedup != 0 || got.conflicts != 0 {
		t.Errorf("got paths %+v, want at least 11 direct batches and no dedup", got)
	}
	if st := w.Stats(); st.Written != uint64(len(evs)) || st.Dropped != 0 {
		t.Errorf("got written %d dropped %d, want %d and 0", st.Written, st.Dropped, len(evs))
	}
	assertExactlyOnce(t, s.pool, evs)
}

// An event recorded again after it was stored makes its batch's COPY fail
// with a unique violation; the batch is written through dedup, and every
// event is stored once.
func TestWriterRecordedTwiceFallsBackToDedup(t *testing.T) {
	s := testPGStore(t, PGConfig{})
	w := newTestWriter(t, WriterConfig{BatchSize: 10, FlushInterval: 10 * time.Millisecond}, s, WriterHooks{})
	evs := genEvents("t", 30, time.Now().UTC().Add(-time.Minute), time.Millisecond)
	for _, e := range evs[:10] {
		w.Record(e)
	}
	waitFor(t, "first batch written", func() bool { return w.Stats().Written == 10 })
	for _, e := range evs[10:20] {
		w.Record(e)
	}
	w.Record(evs[4]) // again, in the next batch
	for _, e := range evs[20:] {
		w.Record(e)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := s.pathCounts(); got.conflicts != 1 || got.dedup != 1 {
		t.Errorf("got paths %+v, want one conflict written through dedup", got)
	}
	assertExactlyOnce(t, s.pool, evs)
}

// faultyPG is the real PGStore with injected faults: while down, writes
// and pings fail without reaching Postgres; loseAcks makes the next fast
// writes succeed in Postgres and then report an error, as when the
// connection drops between the commit and its acknowledgement. It records
// which path offered each event.
type faultyPG struct {
	*PGStore
	down     atomic.Bool
	loseAcks atomic.Int32

	mu     sync.Mutex
	fresh  map[string]int  // InsertFresh calls that held the id, successful or not
	dedup  map[string]int  // Insert calls that held the id
	failed map[string]bool // ids of writes that returned an error
	lost   map[string]bool // ids of writes that stored them and returned an error
}

func newFaultyPG(s *PGStore) *faultyPG {
	return &faultyPG{PGStore: s, fresh: map[string]int{}, dedup: map[string]int{},
		failed: map[string]bool{}, lost: map[string]bool{}}
}

var errLostAck = errors.New("connection lost after commit (test fault)")

func (f *faultyPG) note(m map[string]int, events []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range events {
		m[e.ID]++
	}
}

func (f *faultyPG) mark(m map[string]bool, events []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range events {
		m[e.ID] = true
	}
}

func (f *faultyPG) Insert(ctx context.Context, events []Event) error {
	if f.down.Load() {
		f.mark(f.failed, events)
		return errOutage
	}
	f.note(f.dedup, events)
	return f.PGStore.Insert(ctx, events)
}

func (f *faultyPG) InsertFresh(ctx context.Context, events []Event) error {
	if f.down.Load() {
		f.mark(f.failed, events)
		return errOutage
	}
	f.note(f.fresh, events)
	if err := f.PGStore.InsertFresh(ctx, events); err != nil {
		return err
	}
	if f.loseAcks.Add(-1) >= 0 {
		f.mark(f.failed, events)
		f.mark(f.lost, events)
		return errLostAck
	}
	return nil
}

func (f *faultyPG) Ping(ctx context.Context) error {
	if f.down.Load() {
		return errOutage
	}
	return f.PGStore.Ping(ctx)
}

// A write whose outcome is unknown may have stored its events: every later
// write of them must deduplicate. Exactly once either way; and no fast
// COPY ever meets an event already stored (no conflict), which is what
// shows the writer chose the dedup path by itself. Events never in a
// failed write still take the fast path, replayed from the spool or not.
func TestWriterExactlyOnceAfterUnknownOutcome(t *testing.T) {
	tests := []struct {
		name  string
		spool bool
		// outage spools the events first, so the lost write is a replay.
		outage bool
	}{
		{"live batch retried without spool", false, false},
		{"live batch spooled and replayed", true, false},
		{"spool replay whose write was lost", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := testPGStore(t, PGConfig{})
			s := newFaultyPG(pg)
			cfg := WriterConfig{BatchSize: 10, FlushInterval: 10 * time.Millisecond, RetryInterval: 30 * time.Millisecond}
			if tt.spool {
				cfg.SpoolDir = t.TempDir()
			}
			if tt.outage {
				s.down.Store(true)
			} else {
				s.loseAcks.Store(1)
			}
			w := newTestWriter(t, cfg, s, WriterHooks{})
			evs := genEvents("u", 60, time.Now().UTC().Add(-time.Minute), time.Millisecond)
			for _, e := range evs {
				w.Record(e)
			}
			if tt.outage {
				waitFor(t, "events spooled", func() bool { return w.Stats().SpoolEvents == len(evs) })
				s.loseAcks.Store(1)
				s.down.Store(false)
			}
			waitFor(t, "everything written", func() bool { return w.Backlog() == 0 && w.PostgresUp() })
			if err := w.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			assertExactlyOnce(t, pg.pool, evs)
			if got := pg.pathCounts(); got.conflicts != 0 {
				t.Errorf("got %d fast writes meeting stored events, want 0 (retries must deduplicate)", got.conflicts)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.lost) == 0 {
				t.Fatalf("no write was lost; the test did not inject its fault")
			}
			for id := range s.lost {
				if s.dedup[id] == 0 {
					t.Errorf("event %s: written again %d times through dedup, want at least once", id, s.dedup[id])
				}
			}
			for _, e := range evs {
				if !s.failed[e.ID] && s.fresh[e.ID] == 0 {
					t.Errorf("event %s never offered to the fast path, want it fresh", e.ID)
				}
			}
		})
	}
}

// Which spooled records may already be stored: what a previous run left,
// what was spooled after a write with an unknown outcome, and a replayed
// range whose write failed. Everything else replays fresh.
func TestSpoolFreshness(t *testing.T) {
	evs := genEvents("s", 4, time.Now().UTC(), time.Millisecond)
	tests := []struct {
		name string
		// setup acts on a spool opened on an empty dir; reopen reopens it
		// before reading, as a new process would.
		setup  func(t *testing.T, sp *spool)
		reopen bool
		want   []bool // fresh, per batch of 2 read from the front
	}{
		{"spooled by this run", func(t *testing.T, sp *spool) { sp.append(evs) }, false, []bool{true, true}},
		{"left by a previous run", func(t *testing.T, sp *spool) { sp.append(evs) }, true, []bool{false, false}},
		{"after an unknown outcome", func(t *testing.T, sp *spool) {
			sp.appendMaybeStored(evs[:2])
			sp.append(evs[2:])
		}, false, []bool{false, true}},
		{"a failed replay", func(t *testing.T, sp *spool) {
			sp.append(evs)
			b, err := sp.readAt(sp.front(), 2)
			if err != nil {
				t.Fatal(err)
			}
			sp.maybeStored(b.next)
		}, false, []bool{false, true}},
		{"fresh again once emptied", func(t *testing.T, sp *spool) {
			sp.appendMaybeStored(evs[:2])
			b, err := sp.readAt(sp.front(), 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sp.commit(b.next, b.records); err != nil {
				t.Fatal(err)
			}
			sp.append(evs)
		}, false, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sp, err := openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			tt.setup(t, sp)
			if tt.reopen {
				if err := sp.close(); err != nil {
					t.Fatal(err)
				}
				if sp, err = openSpool(dir, 1<<20); err != nil {
					t.Fatal(err)
				}
			}
			defer sp.close()
			var got []bool
			for off := sp.front(); ; {
				b, err := sp.readAt(off, 2)
				if err != nil {
					t.Fatal(err)
				}
				if b.records == 0 {
					break
				}
				got = append(got, b.fresh)
				off = b.next
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got fresh %v, want %v", got, tt.want)
			}
		})
	}
}

// Two batches in flight fail in one outage; once the first one's retry
// succeeds, the second one's old failure must not report the store down
// again (an alert flapping), and its retry need not wait.
func TestWriterStaleFailureDoesNotFlap(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	var states storeStates
	w := newTestWriter(t, WriterConfig{BatchSize: 10, FlushInterval: time.Hour, RetryInterval: 50 * time.Millisecond},
		s, WriterHooks{OnStoreState: states.hook})
	evs := genEvents("st", 20, time.Now(), time.Millisecond)
	for _, e := range evs {
		w.Record(e)
	}
	waitFor(t, "both batches failed", func() bool { return s.fails.Load() >= 2 })
	s.down.Store(false)
	waitFor(t, "both batches written", func() bool { return s.Len() == len(evs) && w.Backlog() == 0 })
	if want := []bool{false, true}; !slices.Equal(states.get(), want) {
		t.Errorf("got store states %v, want %v", states.get(), want)
	}
}

// firstFails is a MemoryStore whose first write of the event failID fails
// slowly (a dead pooled connection timing out) while every other write
// succeeds at once.
type firstFails struct {
	*MemoryStore
	failID string
	failed atomic.Bool
}

func (s *firstFails) Insert(ctx context.Context, events []Event) error {
	if slices.ContainsFunc(events, func(e Event) bool { return e.ID == s.failID }) && !s.failed.Swap(true) {
		time.Sleep(50 * time.Millisecond)
		return errOutage
	}
	return s.MemoryStore.Insert(ctx, events)
}

// Two batches in flight: the first one's write fails, the second one,
// started later, succeeds. The store is evidently up, so no outage is
// reported (a postgres_down alert followed at once by postgres_recovered),
// and the failed batch is still written exactly once.
func TestWriterOneFailedWriteAmongSuccessesIsNotAnOutage(t *testing.T) {
	for _, withSpool := range []bool{true, false} {
		t.Run(map[bool]string{true: "spool", false: "no spool"}[withSpool], func(t *testing.T) {
			s := &firstFails{MemoryStore: NewMemoryStore(0), failID: "ff000000"}
			var states storeStates
			cfg := WriterConfig{BatchSize: 5, FlushInterval: time.Hour, RetryInterval: 10 * time.Millisecond}
			if withSpool {
				cfg.SpoolDir = t.TempDir()
			}
			w := newTestWriter(t, cfg, s, WriterHooks{OnStoreState: states.hook})
			evs := genEvents("ff", 10, time.Now(), time.Millisecond)
			for _, e := range evs {
				w.Record(e)
			}
			if err := w.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := s.Len(); got != len(evs) {
				t.Errorf("got %d stored, want %d", got, len(evs))
			}
			if st := w.Stats(); st.Written != uint64(len(evs)) || st.Dropped != 0 {
				t.Errorf("got written %d dropped %d, want %d and 0", st.Written, st.Dropped, len(evs))
			}
			if got := states.get(); len(got) != 0 {
				t.Errorf("got store states %v, want none", got)
			}
		})
	}
}

// hangingStore is a MemoryStore that, while hang is set, answers nothing:
// writes and pings wait until their deadline (a Postgres behind a network
// partition rather than one refusing connections). It counts writes.
type hangingStore struct {
	*MemoryStore
	hang   atomic.Bool
	writes atomic.Int32
}

func (s *hangingStore) Insert(ctx context.Context, events []Event) error {
	s.writes.Add(1)
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.MemoryStore.Insert(ctx, events)
}

func (s *hangingStore) Ping(ctx context.Context) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// While the store does not answer, it is probed with a ping on the side,
// not with a spool replay on the writer goroutine: each such write would
// hold the writer for InsertTimeout, during which new events wait in
// memory unspooled and the spool goes without fsync, stretching the crash
// loss bound from one FlushInterval to InsertTimeout.
func TestWriterProbesHangingStoreWithoutWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &hangingStore{MemoryStore: NewMemoryStore(0)}
		s.hang.Store(true)
		const flush, retry, timeout = 5 * time.Millisecond, 20 * time.Millisecond, 150 * time.Millisecond
		w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: flush,
			RetryInterval: retry, InsertTimeout: timeout, SpoolDir: t.TempDir()}, s, WriterHooks{})
		evs := genEvents("hg", 60, time.Now(), time.Millisecond)
		for _, e := range evs[:5] {
			w.Record(e)
		}
		// The full batch's write hangs until InsertTimeout: then the
		// outage is noticed and the batch spooled.
		time.Sleep(timeout)
		synctest.Wait()
		if w.PostgresUp() || w.Stats().SpoolEvents != 5 {
			t.Fatalf("after InsertTimeout: up %v, %d spooled; want down and 5", w.PostgresUp(), w.Stats().SpoolEvents)
		}
		before := s.writes.Load()
		for _, e := range evs[5:] {
			w.Record(e)
			time.Sleep(flush) // several retry intervals and timeouts
		}
		synctest.Wait()
		if got := w.Stats().SpoolEvents; got != len(evs) {
			t.Fatalf("got %d events spooled, want %d", got, len(evs))
		}
		if got := s.writes.Load() - before; got != 0 {
			t.Errorf("got %d writes to a store that does not answer, want 0 (probes are pings)", got)
		}
		s.hang.Store(false)
		// A probe in flight when the store heals still times out; the next
		// one succeeds and the replay follows.
		time.Sleep(timeout + retry)
		synctest.Wait()
		if !w.PostgresUp() || w.Backlog() != 0 || s.Len() != len(evs) {
			t.Errorf("after the store healed: up %v, backlog %d, %d stored; want up, 0, %d",
				w.PostgresUp(), w.Backlog(), s.Len(), len(evs))
		}
	})
}

// spooledOnDisk counts the records in the spool file as a process started
// after a crash would find them: what the writer has written to the file,
// not what its buffer holds.
func spooledOnDisk(t *testing.T, dir string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, spoolFileName))
	if err != nil {
		t.Fatalf("open spool: %v", err)
	}
	defer f.Close()
	res, err := scanSpool(f, nil)
	if err != nil {
		t.Fatalf("scan spool: %v", err)
	}
	return res.records
}

// A write that does not answer keeps neither its batch nor the queue behind
// it in memory only: once it has been in flight for two FlushIntervals its
// batch is copied to the spool, new events follow it there, and a crash
// from then on loses at most the last FlushInterval, as with the store
// down, rather than everything recorded until InsertTimeout ends the write.
// Whether the write failed in the end or stored its batch after all, the
// replay leaves every event stored once and counted once.
func TestWriterSpoolsWritesThatDoNotAnswer(t *testing.T) {
	const flush, timeout = 10 * time.Millisecond, 5 * time.Second
	for _, tt := range []struct {
		name  string
		store func(*MemoryStore) Store
		heal  func(Store)
	}{
		{"hanging until timeout", func(m *MemoryStore) Store {
			s := &hangingStore{MemoryStore: m}
			s.hang.Store(true)
			return s
		}, func(s Store) { s.(*hangingStore).hang.Store(false) }},
		{"slow, then stored", func(m *MemoryStore) Store {
			f := newFlakyStore()
			f.MemoryStore = m
			s := &slowStore{flakyStore: f, delay: time.Second}
			s.slow.Store(true)
			return s
		}, func(s Store) { s.(*slowStore).slow.Store(false) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := NewMemoryStore(0)
				s := tt.store(mem)
				dir := t.TempDir()
				var written atomic.Int64
				w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: flush, MaxInFlight: 2,
					RetryInterval: 20 * time.Millisecond, InsertTimeout: timeout, SpoolDir: dir}, s,
					WriterHooks{OnWritten: func(n int) { written.Add(int64(n)) }})
				evs := genEvents("sl", 40, time.Now(), time.Millisecond)
				for _, e := range evs[:10] { // two batches, both in flight
					w.Record(e)
				}
				time.Sleep(3 * flush)
				synctest.Wait()
				if got := spooledOnDisk(t, dir); got != 10 {
					t.Fatalf("after 3 flush intervals of writes in flight: %d events spooled on disk, want 10", got)
				}
				for _, e := range evs[10:] {
					w.Record(e)
					time.Sleep(flush / 5)
				}
				time.Sleep(2 * flush)
				synctest.Wait()
				if got, st := spooledOnDisk(t, dir), w.Stats(); got != len(evs) || st.Queued != 0 {
					t.Fatalf("later events: %d spooled on disk, %d queued; want %d and 0", got, st.Queued, len(evs))
				}
				if got := w.Backlog(); got != len(evs) {
					t.Errorf("backlog %d, want %d (each event counted once)", got, len(evs))
				}
				tt.heal(s)
				time.Sleep(timeout + time.Second)
				synctest.Wait()
				if !w.PostgresUp() || w.Backlog() != 0 {
					t.Fatalf("after the writes ended: up %v, backlog %d; want up and 0", w.PostgresUp(), w.Backlog())
				}
				if got := mem.Len(); got != len(evs) {
					t.Errorf("stored %d events, want %d, each once", got, len(evs))
				}
				if got := written.Load(); got != int64(len(evs)) {
					t.Errorf("OnWritten counted %d events, want %d", got, len(evs))
				}
			})
		})
	}
}
