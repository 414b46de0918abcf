package limits

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestFailoverLock: a manual lock goes to the primary and is mirrored into
// the fallback; a failing primary never opens the breaker for it, and
// neither a failing primary nor an open breaker is answered from the
// fallback alone.
func TestFailoverLock(t *testing.T) {
	req := &LockRequest{Locks: []ManualLock{{Key: "m:1", StrikeKey: "l:1", Info: "i"}}, Duration: time.Hour}
	ctx := context.Background()

	t.Run("primary up", func(t *testing.T) {
		primary := NewMemory(MemoryConfig{Now: func() time.Time { return foNow }})
		fallback := NewMemory(MemoryConfig{Now: func() time.Time { return foNow }})
		f := newTestFailover(t, FailoverConfig{}, primary, fallback, FailoverEvents{})
		got, err := f.Lock(ctx, req)
		if err != nil || len(got) != 1 || !got[0].Until.Equal(foNow.Truncate(time.Millisecond).Add(time.Hour)) {
			t.Fatalf("Lock = %+v, %v", got, err)
		}
		for name, s := range map[string]Store{"primary": primary, "fallback": fallback} {
			page, err := s.Lockouts(ctx, &LockQuery{Pattern: "*", Limit: 1000})
			if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "m:1" {
				t.Errorf("%s lockouts = %+v, %v; want the manual lock", name, page, err)
			}
		}
	})

	t.Run("admin timeout", func(t *testing.T) {
		// A lock is an admin call: FailoverConfig.AdminTimeout bounds it,
		// as it bounds listings and unlocks.
		var left time.Duration
		primary := &foStore{lock: func(ctx context.Context, _ *LockRequest) ([]LockState, error) {
			if d, ok := ctx.Deadline(); ok {
				left = time.Until(d)
			}
			return []LockState{{Key: "m:1"}}, nil
		}}
		f := newTestFailover(t, FailoverConfig{AdminTimeout: 5 * time.Second}, primary, &foStore{}, FailoverEvents{})
		if _, err := f.Lock(ctx, req); err != nil {
			t.Fatal(err)
		}
		if left <= 4*time.Second || left > 5*time.Second {
			t.Errorf("primary lock had %v left; want about the admin timeout, 5s", left)
		}
	})

	t.Run("primary failing", func(t *testing.T) {
		primary, fallback := foFailing(), &foStore{}
		f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, FailoverEvents{})
		for range 3 {
			if _, err := f.Lock(ctx, req); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Lock with the primary down = %v; want ErrUnavailable", err)
			}
		}
		if f.Degraded() {
			t.Error("manual locks opened the breaker")
		}
		if n := fallback.calls.Load(); n != 0 {
			t.Errorf("the fallback was called %d times; a lock must not live there alone", n)
		}
	})

	t.Run("breaker open", func(t *testing.T) {
		primary, fallback := foFailing(), &foStore{}
		f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, FailoverEvents{})
		if _, err := f.Check(ctx, foCheckReq()); err != nil {
			t.Fatal(err)
		}
		if !f.Degraded() {
			t.Fatal("breaker did not open")
		}
		before := primary.calls.Load()
		if _, err := f.Lock(ctx, req); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Lock while degraded = %v; want ErrUnavailable", err)
		}
		if primary.calls.Load() != before {
			t.Error("Lock while degraded waited on the dead primary")
		}
	})

	t.Run("invalid request", func(t *testing.T) {
		f := newTestFailover(t, FailoverConfig{}, &foStore{}, &foStore{}, FailoverEvents{})
		if _, err := f.Lock(ctx, &LockRequest{}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Lock(empty) = %v; want a validation error", err)
		}
	})
}
