package api

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/guardhq/guard/internal/audit"
)

// While the writer is stuck, the first read waits out auditSyncWait and
// the reads right after it do not wait again (a page of three reads waits
// once); the store answers every read; a read whose own caller gave up
// does not mark the writer stuck.
func TestSyncedReaderWaitsOncePerStall(t *testing.T) {
	var calls atomic.Int64
	stuck := func(ctx context.Context) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	st := audit.NewMemoryStore(0)
	r := syncAudit(st, stuck)
	if _, ok := r.(auditReview); !ok {
		t.Fatal("the synced reader of a MemoryStore lost its review methods")
	}
	ctx := context.Background()
	for i := range 3 {
		if _, err := r.Query(ctx, audit.Filter{Limit: 10}); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("sync called %d times for three reads of a stuck writer, want 1", got)
	}

	calls.Store(0)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	r = syncAudit(st, stuck)
	_, _ = r.Query(gone, audit.Filter{Limit: 10})
	_, _ = r.Query(gone, audit.Filter{Limit: 10})
	if got := calls.Load(); got != 2 {
		t.Errorf("sync called %d times for two reads whose callers gave up, want 2 (not marked stuck)", got)
	}
}
