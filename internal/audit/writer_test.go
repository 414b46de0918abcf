package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// flakyStore is a real MemoryStore whose Insert and Ping fail while down is
// set, standing in for an outage of the store the writer talks to; it also
// records the batch sizes it was given.
type flakyStore struct {
	*MemoryStore
	down    atomic.Bool
	fails   atomic.Int64 // Insert calls refused while down
	pings   atomic.Int64 // Ping calls refused while down
	mu      sync.Mutex
	batches []int
	inserts map[string]int // successful inserts per id, duplicates included
}

var errOutage = errors.New("store down (test outage)")

func newFlakyStore() *flakyStore {
	return &flakyStore{MemoryStore: NewMemoryStore(0), inserts: map[string]int{}}
}

func (s *flakyStore) Insert(ctx context.Context, events []Event) error {
	if s.down.Load() {
		s.fails.Add(1)
		return errOutage
	}
	s.mu.Lock()
	s.batches = append(s.batches, len(events))
	for _, e := range events {
		s.inserts[e.ID]++
	}
	s.mu.Unlock()
	return s.MemoryStore.Insert(ctx, events)
}

func (s *flakyStore) Ping(context.Context) error {
	if s.down.Load() {
		s.pings.Add(1)
		return errOutage
	}
	return nil
}

func (s *flakyStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// waitFor polls cond until it holds or the test's patience (10s) runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestWriter(t *testing.T, cfg WriterConfig, s Store, hooks WriterHooks) *Writer {
	t.Helper()
	w, err := NewWriter(discardLogger(), cfg, s, hooks)
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

func TestWriterBatchesBySize(t *testing.T) {
	s := newFlakyStore()
	w := newTestWriter(t, WriterConfig{BatchSize: 10, FlushInterval: time.Hour}, s, WriterHooks{})
	for _, e := range genEvents("b", 25, time.Now(), time.Millisecond) {
		w.Record(e)
	}
	waitFor(t, "two full batches", func() bool { return len(s.batchSizes()) == 2 })
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, want := s.batchSizes(), []int{10, 10, 5}; !slices.Equal(got, want) {
		t.Errorf("got batches %v, want %v", got, want)
	}
	if got := w.Stats().Written; got != 25 {
		t.Errorf("got written %d, want 25", got)
	}
}

// TestWriterFlushesByInterval runs in a synctest bubble: the writer's ticker
// follows the fake clock, and synctest.Wait returns once the writer has
// finished what the tick started (insert and counters both), so the test
// sees no half-applied write. Polling the store instead raced with the
// writer lowering Backlog after the insert returned.
func TestWriterFlushesByInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFlakyStore()
		const interval = 20 * time.Millisecond
		w := newTestWriter(t, WriterConfig{BatchSize: 1000, FlushInterval: interval}, s, WriterHooks{})
		for _, e := range genEvents("i", 3, time.Now(), time.Millisecond) {
			w.Record(e)
		}
		time.Sleep(interval - time.Millisecond)
		synctest.Wait()
		if got := s.Len(); got != 0 {
			t.Fatalf("got %d events stored before the interval ended, want 0", got)
		}
		if got := w.Backlog(); got != 3 {
			t.Errorf("got backlog %d before the flush, want 3", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, want := s.batchSizes(), []int{3}; !slices.Equal(got, want) {
			t.Errorf("got batches %v, want %v", got, want)
		}
		if got := s.Len(); got != 3 {
			t.Errorf("got %d events stored, want 3", got)
		}
		if got := w.Backlog(); got != 0 {
			t.Errorf("got backlog %d, want 0", got)
		}
		if got := w.Stats().Written; got != 3 {
			t.Errorf("got written %d, want 3", got)
		}
	})
}

func TestWriterSpoolsDuringOutage(t *testing.T) {
	s := newFlakyStore()
	var mu sync.Mutex
	var states []bool
	var upSince time.Time
	hooks := WriterHooks{OnStoreState: func(up bool, since time.Time, _ error) {
		mu.Lock()
		states = append(states, up)
		if up {
			upSince = since
		}
		mu.Unlock()
	}}
	dir := t.TempDir()
	w := newTestWriter(t, WriterConfig{BatchSize: 16, FlushInterval: 10 * time.Millisecond,
		RetryInterval: 20 * time.Millisecond, SpoolDir: dir}, s, hooks)
	evs := genEvents("s", 200, time.Now(), time.Millisecond)

	s.down.Store(true)
	for _, e := range evs[:150] {
		w.Record(e)
	}
	waitFor(t, "events spooled", func() bool { return w.Stats().SpoolEvents == 150 })
	if w.PostgresUp() {
		t.Errorf("got store up during outage, want down")
	}
	if got := w.Backlog(); got != 150 {
		t.Errorf("got backlog %d, want 150", got)
	}
	waitFor(t, "a failed probe", func() bool { return s.pings.Load() > 0 })
	back := time.Now()
	s.down.Store(false)
	for _, e := range evs[150:] {
		w.Record(e)
	}
	waitFor(t, "spool replayed", func() bool { return w.Backlog() == 0 && s.Len() == len(evs) })
	if st, err := os.Stat(filepath.Join(dir, spoolFileName)); err != nil || st.Size() != 0 {
		t.Errorf("got spool file %v (err %v), want empty", st, err)
	}
	for _, e := range evs {
		if n := s.inserts[e.ID]; n != 1 {
			t.Errorf("event %s inserted %d times, want 1", e.ID, n)
		}
	}
	// Events reach the store in the order they were recorded.
	page, _ := s.Query(context.Background(), Filter{Limit: MaxLimit})
	if got, want := len(page.Events), len(evs); got != want {
		t.Fatalf("got %d events, want %d", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{false, true}; !slices.Equal(states, want) {
		t.Errorf("got store states %v, want %v", states, want)
	}
	// Up since the earliest the store can have come back (the last failed
	// probe), never after it did: an alert held 10 s from then goes out at
	// most 10 s after the store returned.
	if upSince.IsZero() || upSince.After(back) {
		t.Errorf("up since %v, want no later than the store's return %v", upSince, back)
	}
}

func TestWriterCloseKeepsSpoolForNextStart(t *testing.T) {
	dir := t.TempDir()
	s := newFlakyStore()
	s.down.Store(true)
	w, err := NewWriter(discardLogger(), WriterConfig{SpoolDir: dir, FlushInterval: 10 * time.Millisecond}, s, WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	evs := genEvents("k", 50, time.Now(), time.Millisecond)
	for _, e := range evs {
		w.Record(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("got %d events in a down store, want 0", got)
	}

	s.down.Store(false)
	w2 := newTestWriter(t, WriterConfig{SpoolDir: dir, FlushInterval: 10 * time.Millisecond}, s, WriterHooks{})
	waitFor(t, "replay at next start", func() bool { return s.Len() == len(evs) && w2.Backlog() == 0 })
}

func TestWriterWithoutSpoolDropsAndCounts(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	var dropped atomic.Int64
	w, err := NewWriter(discardLogger(), WriterConfig{BatchSize: 5, QueueSize: 10,
		FlushInterval: 5 * time.Millisecond, RetryInterval: 5 * time.Millisecond}, s,
		WriterHooks{OnDropped: func(n int) { dropped.Add(int64(n)) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range genEvents("d", 100, time.Now(), time.Millisecond) {
		w.Record(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); err == nil {
		t.Errorf("got nil error from Close with the store down and no spool, want one")
	}
	st := w.Stats()
	if got := st.Written + st.Dropped; got != 100 {
		t.Errorf("got written %d + dropped %d = %d, want 100", st.Written, st.Dropped, got)
	}
	if got := dropped.Load(); got != int64(st.Dropped) {
		t.Errorf("got OnDropped total %d, want %d", got, st.Dropped)
	}
	w.Record(Event{ID: "late"})
	if got := w.Stats().Dropped; got != st.Dropped+1 {
		t.Errorf("got dropped %d after Record on a closed writer, want %d", got, st.Dropped+1)
	}
}

// An event on its way from the queue into the spool is counted once:
// the backlog a reader sees while the store is down never exceeds the
// events recorded (none is written or dropped meanwhile), and ends equal
// to them.
func TestWriterBacklogCountsEachEventOnce(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	w := newTestWriter(t, WriterConfig{BatchSize: 8, QueueSize: 64, FlushInterval: time.Millisecond,
		RetryInterval: time.Hour, SpoolDir: t.TempDir()}, s, WriterHooks{})
	const n = 3000
	var started atomic.Int64
	done := make(chan struct{})
	var worst atomic.Int64
	go func() {
		defer close(done)
		for started.Load() < n || w.Backlog() < n {
			b := int64(w.Backlog())
			if over := b - started.Load(); over > worst.Load() {
				worst.Store(over)
			}
		}
	}()
	for _, e := range genEvents("once", n, time.Now(), time.Millisecond) {
		started.Add(1)
		w.Record(e)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("backlog %d after 10 s, want %d", w.Backlog(), n)
	}
	if over := worst.Load(); over > 0 {
		t.Errorf("a reader saw a backlog %d events above those recorded", over)
	}
	if st := w.Stats(); st.Queued+st.SpoolEvents != n || st.Dropped != 0 {
		t.Errorf("stats %+v, want %d events queued or spooled, none dropped", st, n)
	}
}

func TestWriterQueueOverflowGoesToSpool(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	w := newTestWriter(t, WriterConfig{BatchSize: 1000, QueueSize: 4, FlushInterval: time.Hour,
		SpoolDir: t.TempDir()}, s, WriterHooks{})
	for _, e := range genEvents("o", 20, time.Now(), time.Millisecond) {
		w.Record(e)
	}
	if got := w.Stats().Dropped; got != 0 {
		t.Errorf("got %d dropped, want 0 (overflow spooled)", got)
	}
	if got := w.Backlog(); got != 20 {
		t.Errorf("got backlog %d, want 20", got)
	}
}

func TestWriterSpoolFull(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	var full atomic.Bool
	w := newTestWriter(t, WriterConfig{BatchSize: 10, FlushInterval: 5 * time.Millisecond,
		SpoolDir: t.TempDir(), SpoolMaxBytes: 4096}, s,
		WriterHooks{OnSpoolFull: func(f bool) { full.Store(f) }})
	evs := genEvents("f", 100, time.Now(), time.Millisecond)
	for _, e := range evs {
		w.Record(e)
	}
	waitFor(t, "spool full", func() bool { return full.Load() && w.Backlog() == w.Stats().SpoolEvents })
	st := w.Stats()
	if st.SpoolBytes > 4096 || st.Dropped == 0 || int(st.Dropped)+st.SpoolEvents != len(evs) {
		t.Errorf("got %+v, want spool <= 4096 bytes and spooled + dropped = %d", st, len(evs))
	}
	s.down.Store(false)
	waitFor(t, "spool drained and not full", func() bool { return w.Backlog() == 0 && !full.Load() })
	if got, want := s.Len(), st.SpoolEvents; got != want {
		t.Errorf("got %d stored, want %d", got, want)
	}
}

func TestWriterCloseTwice(t *testing.T) {
	w := newTestWriter(t, WriterConfig{}, NewMemoryStore(0), WriterHooks{})
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := w.Close(context.Background()); !errors.Is(err, ErrWriterClosed) {
		t.Errorf("got %v, want ErrWriterClosed", err)
	}
}

func TestSpoolLockedByAnotherWriter(t *testing.T) {
	dir := t.TempDir()
	newTestWriter(t, WriterConfig{SpoolDir: dir}, NewMemoryStore(0), WriterHooks{})
	if _, err := NewWriter(discardLogger(), WriterConfig{SpoolDir: dir}, NewMemoryStore(0), WriterHooks{}); err == nil {
		t.Errorf("got a second writer on one spool, want an error")
	}
}

func TestSpoolTornTail(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	evs := genEvents("t", 10, time.Now().UTC().Truncate(time.Millisecond), time.Millisecond)
	if _, err := sp.append(evs); err != nil {
		t.Fatal(err)
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, spoolFileName)
	intact, _ := os.Stat(path)
	tests := []struct {
		name string
		tail []byte
	}{
		{"half a header", []byte{0, 0}},
		{"header without payload", []byte{0, 0, 0, 40, 1, 2, 3, 4, '{'}},
		{"bad checksum", append([]byte{0, 0, 0, 2, 9, 9, 9, 9}, "{}"...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tt.tail)
			f.Close()
			sp, err := openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close()
			if n, size := sp.stats(); n != len(evs) || size != intact.Size() {
				t.Errorf("got %d records, %d bytes; want %d, %d", n, size, len(evs), intact.Size())
			}
			got, _, records, err := sp.read(100)
			if err != nil || records != len(evs) {
				t.Fatalf("read: %d records, err %v", records, err)
			}
			if !slices.Equal(ids(got), ids(evs)) {
				t.Errorf("got %v, want %v in order", ids(got), ids(evs))
			}
			if got[3].At != evs[3].At {
				t.Errorf("got at %v, want %v", got[3].At, evs[3].At)
			}
		})
	}
}

func TestWriterRecordNeverBlocks(t *testing.T) {
	// A store that hangs until the test ends: Record must still return.
	block := make(chan struct{})
	defer close(block)
	hang := &hangStore{MemoryStore: NewMemoryStore(0), block: block}
	w, err := NewWriter(discardLogger(), WriterConfig{BatchSize: 1, QueueSize: 2}, hang, WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		w.Close(ctx)
	}()
	done := make(chan struct{})
	go func() {
		for _, e := range genEvents("h", 1000, time.Now(), time.Millisecond) {
			w.Record(e)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked on a hanging store")
	}
	if got := w.Stats().Dropped; got < 990 {
		t.Errorf("got %d dropped, want the overflow (>= 990) counted", got)
	}
}

type hangStore struct {
	*MemoryStore
	block chan struct{}
}

func (s *hangStore) Insert(ctx context.Context, _ []Event) error {
	select {
	case <-s.block:
		return fmt.Errorf("released")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// An event too large for a spool record (a library caller's megabytes of
// note) must not be written to the spool: replay could not read it back,
// wedging every record behind it, and the next start would cut the file
// there, losing them all. It is dropped and counted alone.
func TestWriterSpoolRefusesOversizedEvent(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	dir := t.TempDir()
	w, err := NewWriter(discardLogger(), WriterConfig{BatchSize: 4, FlushInterval: 5 * time.Millisecond,
		RetryInterval: 5 * time.Millisecond, SpoolDir: dir}, s, WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	evs := genEvents("big", 9, time.Now(), time.Millisecond)
	huge := make([]byte, maxSpoolRecord+1)
	for i := range huge {
		huge[i] = 'x'
	}
	evs[4].Note = string(huge)
	for _, e := range evs {
		w.Record(e)
	}
	waitFor(t, "events spooled or dropped", func() bool {
		st := w.Stats()
		return st.SpoolEvents+int(st.Dropped) == len(evs)
	})
	if got := w.Stats().Dropped; got != 1 {
		t.Errorf("got %d dropped, want 1 (the oversized event)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The next start reads every spooled record back.
	s.down.Store(false)
	w2 := newTestWriter(t, WriterConfig{FlushInterval: 5 * time.Millisecond, SpoolDir: dir}, s, WriterHooks{})
	want := append(slices.Clone(evs[:4]), evs[5:]...)
	waitFor(t, "spool replayed", func() bool { return w2.Backlog() == 0 && s.Len() == len(want) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range want {
		if s.inserts[e.ID] != 1 {
			t.Errorf("event %s stored %d times, want 1", e.ID, s.inserts[e.ID])
		}
	}
}

// A record damaged in the middle of the spool (a flipped bit, a bad
// sector) costs that record only: the intact records after it are kept,
// in order, and the file is rewritten without the damage so appends and
// later opens carry on. Cutting the file there, as for a torn tail, would
// lose every record behind it.
func TestSpoolCorruptRecordInTheMiddle(t *testing.T) {
	evs := genEvents("m", 10, time.Now().UTC().Truncate(time.Millisecond), time.Millisecond)
	tests := []struct {
		name string
		// damage changes the file given the offset and size of record 3.
		damage func(b []byte, off, size int)
		want   int // records kept
	}{
		{"payload byte", func(b []byte, off, size int) { b[off+spoolHeaderSize+5] ^= 0x40 }, 9},
		{"checksum byte", func(b []byte, off, size int) { b[off+5] ^= 0x01 }, 9},
		{"length made huge", func(b []byte, off, size int) { b[off] = 0x7f }, 9},
		{"length made short", func(b []byte, off, size int) { b[off+3] -= 20 }, 9},
		{"record zeroed", func(b []byte, off, size int) { clear(b[off : off+size]) }, 9},
		{"two records zeroed", func(b []byte, off, size int) { clear(b[off : off+2*size]) }, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sp, err := openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sp.append(evs); err != nil {
				t.Fatal(err)
			}
			if err := sp.close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, spoolFileName)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// genEvents' records all have one size.
			size := len(b) / len(evs)
			tt.damage(b, 3*size, size)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			sp, err = openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if got := sp.skipped; got == 0 {
				t.Errorf("got %d damaged bytes reported, want some", got)
			}
			more := genEvents("n", 2, evs[9].At.Add(time.Millisecond), time.Millisecond)
			if _, err := sp.append(more); err != nil {
				t.Fatal(err)
			}
			if err := sp.close(); err != nil {
				t.Fatal(err)
			}
			sp, err = openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close()
			if sp.skipped != 0 {
				t.Errorf("got %d damaged bytes on the next open, want 0 (rewritten)", sp.skipped)
			}
			got, _, records, err := sp.read(100)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if want := tt.want + len(more); records != want || len(got) != want {
				t.Fatalf("got %d records (%d events), want %d: %v", records, len(got), want, ids(got))
			}
			if !slices.IsSorted(ids(got)[:tt.want]) || got[0].ID != evs[0].ID || got[tt.want-1].ID != evs[9].ID {
				t.Errorf("got %v, want the intact records of %v in order", ids(got), ids(evs))
			}
			if !slices.Equal(ids(got[tt.want:]), ids(more)) {
				t.Errorf("got %v after them, want the later appends %v", ids(got[tt.want:]), ids(more))
			}
		})
	}
}

// slowStore is a flakyStore whose writes take delay each while slow is
// set: a Postgres that is back but needs a while to take the spool.
type slowStore struct {
	*flakyStore
	slow  atomic.Bool
	delay time.Duration
}

func (s *slowStore) Insert(ctx context.Context, events []Event) error {
	if s.slow.Load() {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.flakyStore.Insert(ctx, events)
}

// After an outage that filled the spool, the store is back and the spool
// drains, but its file only shrinks once it is empty. Events recorded
// meanwhile find no room in it; with the store up they must be written
// to it directly, not dropped.
func TestWriterFullSpoolDrainingKeepsNewEvents(t *testing.T) {
	s := &slowStore{flakyStore: newFlakyStore(), delay: 40 * time.Millisecond}
	s.down.Store(true)
	w := newTestWriter(t, WriterConfig{BatchSize: 4, FlushInterval: 5 * time.Millisecond,
		RetryInterval: 5 * time.Millisecond, SpoolDir: t.TempDir(), SpoolMaxBytes: 6000}, s, WriterHooks{})
	old := genEvents("old", 60, time.Now(), time.Millisecond)
	for _, e := range old {
		w.Record(e)
	}
	waitFor(t, "spool full", func() bool {
		st := w.Stats()
		return st.SpoolFull && st.SpoolEvents+int(st.Dropped) == len(old)
	})
	lost := w.Stats().Dropped
	spooled := w.Stats().SpoolEvents

	s.slow.Store(true)
	s.down.Store(false)
	waitFor(t, "replay under way", func() bool { return w.PostgresUp() && s.Len() > 0 })
	fresh := genEvents("new", 40, time.Now().Add(time.Second), time.Millisecond)
	for _, e := range fresh {
		w.Record(e)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "everything written", func() bool { return w.Backlog() == 0 })
	if got := w.Stats().Dropped; got != lost {
		t.Errorf("got %d dropped, want %d (only those of the outage)", got, lost)
	}
	if got, want := s.Len(), spooled+len(fresh); got != want {
		t.Errorf("got %d stored, want %d", got, want)
	}
}

// Close's deadline cutting a slow write short says nothing about the
// store: the batch is kept in the spool (or counted as dropped without
// one), but no "store down" is reported, which would page someone at every
// shutdown during a slow write.
func TestWriterCloseDeadlineIsNotAnOutage(t *testing.T) {
	for _, withSpool := range []bool{true, false} {
		t.Run(fmt.Sprintf("spool %v", withSpool), func(t *testing.T) {
			block := make(chan struct{})
			defer close(block)
			hang := &hangStore{MemoryStore: NewMemoryStore(0), block: block}
			var downs atomic.Int32
			cfg := WriterConfig{BatchSize: 5, FlushInterval: 5 * time.Millisecond}
			if withSpool {
				cfg.SpoolDir = t.TempDir()
			}
			w, err := NewWriter(discardLogger(), cfg, hang, WriterHooks{OnStoreState: func(up bool, _ time.Time, _ error) {
				if !up {
					downs.Add(1)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			evs := genEvents("cd", 12, time.Now(), time.Millisecond)
			for _, e := range evs {
				w.Record(e)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err = w.Close(ctx)
			if got := downs.Load(); got != 0 {
				t.Errorf("got %d store-down reports, want 0", got)
			}
			st := w.Stats()
			if withSpool {
				if err != nil || st.SpoolEvents != len(evs) || st.Dropped != 0 {
					t.Errorf("got err %v, %d spooled, %d dropped; want nil, %d, 0", err, st.SpoolEvents, st.Dropped, len(evs))
				}
			} else if err == nil || st.Dropped != uint64(len(evs)) {
				t.Errorf("got err %v, %d dropped; want an error and %d", err, st.Dropped, len(evs))
			}
		})
	}
}

// faultyFile passes writes to the spool file until fail is set; then it
// writes half of each and fails, like a disk that filled up.
type faultyFile struct {
	f    *os.File
	fail atomic.Bool
}

var errDiskFull = errors.New("no space left on device (test fault)")

func (ff *faultyFile) Write(p []byte) (int, error) {
	if ff.fail.Load() {
		n, _ := ff.f.Write(p[:len(p)/2])
		return n, errDiskFull
	}
	return ff.f.Write(p)
}

// A spool write that fails (the disk filled up) loses the records not yet
// on disk, counted as dropped, and nothing else: the file is cut back to
// its last whole record, and once the disk has room the spool takes new
// records and replays every record it holds.
func TestSpoolRecoversFromWriteError(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: 5 * time.Millisecond,
		RetryInterval: 5 * time.Millisecond, SpoolDir: t.TempDir()}, s, WriterHooks{})
	ff := &faultyFile{f: w.spool.f}
	w.spool.mu.Lock()
	w.spool.out = ff
	w.spool.bw.Reset(ff)
	w.spool.mu.Unlock()
	evs := genEvents("wf", 30, time.Now(), time.Millisecond)
	record := func(from, to int) {
		for _, e := range evs[from:to] {
			w.Record(e)
		}
	}
	record(0, 10)
	waitFor(t, "first events spooled and synced", func() bool {
		w.spool.mu.Lock()
		defer w.spool.mu.Unlock()
		return w.spool.pending == 10 && !w.spool.dirty
	})
	ff.fail.Store(true)
	record(10, 20)
	waitFor(t, "the failed records dropped", func() bool { return w.Stats().Dropped == 10 })
	ff.fail.Store(false)
	record(20, 30)
	waitFor(t, "later events spooled", func() bool { return w.Stats().SpoolEvents == 20 })
	s.down.Store(false)
	waitFor(t, "spool replayed", func() bool { return w.Backlog() == 0 && s.Len() == 20 })
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range evs {
		want := 1
		if i >= 10 && i < 20 {
			want = 0
		}
		if got := s.inserts[e.ID]; got != want {
			t.Errorf("event %s stored %d times, want %d", e.ID, got, want)
		}
	}
}

// TestWriterSync: Sync returns once every event recorded before it is
// stored, without waiting for the flush interval; during an outage it
// returns once they are spooled; a Sync whose context ends first says so;
// after Close it returns at once.
func TestWriterSync(t *testing.T) {
	s := newFlakyStore()
	dir := t.TempDir()
	w := newTestWriter(t, WriterConfig{BatchSize: 10, FlushInterval: time.Hour, SpoolDir: dir}, s, WriterHooks{})
	events := genEvents("s", 23, time.Now(), time.Millisecond)
	for _, e := range events[:13] {
		w.Record(e)
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := s.Len(); got != 13 {
		t.Fatalf("got %d events stored after Sync, want 13", got)
	}
	if got := w.Backlog(); got != 0 {
		t.Errorf("got backlog %d after Sync, want 0", got)
	}

	s.down.Store(true)
	for _, e := range events[13:] {
		w.Record(e)
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Fatalf("sync during the outage: %v", err)
	}
	if got := w.Stats().SpoolEvents; got != 10 {
		t.Errorf("got %d events spooled after Sync during the outage, want 10", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("sync with a cancelled context = %v, want context.Canceled", err)
	}
	s.down.Store(false)
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Errorf("sync after close = %v, want nil", err)
	}
}

// Concurrent Syncs each return once every event recorded before them is
// stored, and never cost more writes than there are Syncs.
func TestWriterConcurrentSyncs(t *testing.T) {
	s := newFlakyStore()
	w := newTestWriter(t, WriterConfig{BatchSize: 1000, FlushInterval: time.Hour}, s, WriterHooks{})
	events := genEvents("c", 40, time.Now(), time.Millisecond)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Record(events[2*i])
			w.Record(events[2*i+1])
			if err := w.Sync(context.Background()); err != nil {
				t.Errorf("sync: %v", err)
			}
			s.mu.Lock()
			n := s.inserts[events[2*i].ID] + s.inserts[events[2*i+1].ID]
			s.mu.Unlock()
			if n != 2 {
				t.Errorf("after its Sync, reader %d finds %d of its 2 events stored", i, n)
			}
		}()
	}
	wg.Wait()
	if got := len(s.batchSizes()); got > 20 {
		t.Errorf("%d writes for 20 Syncs, want at most 20", got)
	}
}

// storeStates records the store states a Writer reports (OnStoreState),
// in order.
type storeStates struct {
	mu     sync.Mutex
	states []bool
}

func (s *storeStates) hook(up bool, _ time.Time, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, up)
}

func (s *storeStates) get() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.states)
}
