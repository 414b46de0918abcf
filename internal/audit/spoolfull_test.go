package audit

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fullStates records OnSpoolFull calls.
type fullStates struct {
	mu  sync.Mutex
	got []bool
}

func (f *fullStates) hook(full bool) {
	f.mu.Lock()
	f.got = append(f.got, full)
	f.mu.Unlock()
}

func (f *fullStates) states() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// enospcFile fails writes with ENOSPC, as the kernel does, while fail is
// set (writing nothing).
type enospcFile struct {
	f    *os.File
	fail atomic.Bool
}

func (ff *enospcFile) Write(p []byte) (int, error) {
	if ff.fail.Load() {
		return 0, &os.PathError{Op: "write", Path: ff.f.Name(), Err: syscall.ENOSPC}
	}
	return ff.f.Write(p)
}

// A spool whose disk is full alerts spool_full (OnSpoolFull(true)), not
// only one at SpoolMaxBytes; a write that reaches the disk again clears it.
func TestWriterSpoolDiskFullAlerts(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	var fs fullStates
	w := newTestWriter(t, WriterConfig{BatchSize: 5, FlushInterval: 5 * time.Millisecond,
		RetryInterval: time.Hour, SpoolDir: t.TempDir()}, s, WriterHooks{OnSpoolFull: fs.hook})
	ff := &enospcFile{f: w.spool.f}
	w.spool.mu.Lock()
	w.spool.out = ff
	w.spool.bw.Reset(ff)
	w.spool.mu.Unlock()
	evs := genEvents("df", 30, time.Now(), time.Millisecond)
	for _, e := range evs[:10] {
		w.Record(e)
	}
	waitFor(t, "first events spooled and synced", func() bool {
		w.spool.mu.Lock()
		defer w.spool.mu.Unlock()
		return w.spool.pending == 10 && !w.spool.dirty
	})
	if got := fs.states(); len(got) != 0 {
		t.Fatalf("spool full states %v before the disk filled, want none", got)
	}
	ff.fail.Store(true)
	for _, e := range evs[10:20] {
		w.Record(e)
	}
	waitFor(t, "the lost records dropped", func() bool { return w.Stats().Dropped == 10 })
	waitFor(t, "spool_full", func() bool { return slices.Equal(fs.states(), []bool{true}) })
	if !w.Stats().SpoolFull {
		t.Error("Stats().SpoolFull = false on a full disk")
	}
	ff.fail.Store(false)
	for _, e := range evs[20:] {
		w.Record(e)
	}
	waitFor(t, "room again", func() bool { return slices.Equal(fs.states(), []bool{true, false}) })
	waitFor(t, "later events spooled", func() bool { return w.Stats().SpoolEvents == 20 })
	if got := w.Stats().Dropped; got != 10 {
		t.Errorf("got %d dropped, want the 10 recorded while the disk was full", got)
	}
}

// The same on a real full file system: a 64 KiB tmpfs (needs root to
// mount; skipped otherwise). Events beyond it are dropped and counted,
// spool_full is raised, and the replay after the store returns empties
// the spool and clears it.
func TestWriterSpoolOnFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	s := newFlakyStore()
	s.down.Store(true)
	var fs fullStates
	var dropped atomic.Int64
	w, err := NewWriter(discardLogger(), WriterConfig{BatchSize: 50, FlushInterval: 5 * time.Millisecond,
		RetryInterval: 10 * time.Millisecond, SpoolDir: dir}, s,
		WriterHooks{OnSpoolFull: fs.hook, OnDropped: func(n int) { dropped.Add(int64(n)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(t.Context())
	// About 300 bytes a record: 2000 of them need ~600 KiB, ten times the
	// file system.
	evs := genEvents("tf", 2000, time.Now(), time.Millisecond)
	for i, e := range evs {
		w.Record(e)
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond) // let the writer spool and sync
		}
	}
	waitFor(t, "every event spooled or dropped", func() bool {
		st := w.Stats()
		return st.Queued == 0 && st.SpoolEvents+int(st.Dropped) == len(evs)
	})
	if dropped.Load() == 0 {
		t.Fatal("nothing dropped on a full 64 KiB file system")
	}
	waitFor(t, "spool_full raised", func() bool { return slices.Contains(fs.states(), true) })
	spooled := w.Stats().SpoolEvents
	s.down.Store(false)
	waitFor(t, "spool replayed", func() bool { return w.Backlog() == 0 && s.Len() == spooled })
	waitFor(t, "spool_full cleared", func() bool {
		st := fs.states()
		return len(st) > 0 && !st[len(st)-1]
	})
	if w.Stats().SpoolFull {
		t.Error("Stats().SpoolFull still set after the replay")
	}
}
