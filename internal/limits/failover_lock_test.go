package limits

import (
	"context"
	"errors"
	"sync/atomic"
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

	t.Run("unlock while degraded", func(t *testing.T) {
		// A manual lock is on the primary and copied into the fallback;
		// while the primary is down an unlock of it lifts nothing and is
		// unavailable (it would come back with the primary), where a lock
		// this fallback struck during the outage is lifted.
		mem := NewMemory(MemoryConfig{Now: func() time.Time { return foNow }})
		var down atomic.Bool
		primary := &foStore{
			check: func(ctx context.Context, req *CheckRequest) (CheckResult, error) {
				if down.Load() {
					return CheckResult{}, errFoDown
				}
				return mem.Check(ctx, req)
			},
			unlock: func(ctx context.Context, req *UnlockRequest) (bool, error) {
				if down.Load() {
					return false, errFoDown
				}
				return mem.Unlock(ctx, req)
			},
			lock: func(ctx context.Context, req *LockRequest) ([]LockState, error) { return mem.Lock(ctx, req) },
			ping: func(context.Context) error {
				if down.Load() {
					return errFoDown
				}
				return nil
			},
		}
		fallback := NewMemory(MemoryConfig{Now: func() time.Time { return foNow }})
		f := newTestFailover(t, FailoverConfig{FailureThreshold: 1, ProbeInterval: time.Millisecond, Now: func() time.Time { return foNow }}, primary, fallback, FailoverEvents{})
		if _, err := f.Lock(ctx, req); err != nil {
			t.Fatal(err)
		}
		down.Store(true)
		if _, err := f.Check(ctx, foCheckReq()); err != nil {
			t.Fatal(err)
		}
		if !f.Degraded() {
			t.Fatal("breaker did not open")
		}
		unlock := &UnlockRequest{Locks: []string{"l:1", "m:1"}}
		if ok, err := f.Unlock(ctx, unlock); !errors.Is(err, ErrUnavailable) || ok {
			t.Errorf("Unlock of a manual lock while degraded = %v, %v; want ErrUnavailable", ok, err)
		}
		if res, err := fallback.Check(ctx, &CheckRequest{Locks: []LockRef{{Key: "m:1"}}, Cost: 1}); err != nil || res.Locked == nil {
			t.Error("the refused unlock lifted the fallback's copy of the manual lock")
		}
		esc := Escalation{Failures: []FailureRule{{Key: "f:2", Limit: 1, Window: time.Minute, LockKey: "l:2"}},
			Ladder: []time.Duration{time.Minute}, Decay: time.Hour}
		if rep, err := f.Report(ctx, &ReportRequest{Failure: true, Escalation: esc}); err != nil || len(rep.Struck) != 1 {
			t.Fatalf("strike while degraded = %+v, %v", rep, err)
		}
		if ok, err := f.Unlock(ctx, &UnlockRequest{Locks: []string{"l:2"}}); err != nil || !ok {
			t.Errorf("Unlock of a lock the fallback struck = %v, %v; want true", ok, err)
		}
		// Back up: the unlock goes to the primary, and the copy is gone.
		down.Store(false)
		for deadline := time.Now().Add(5 * time.Second); f.Degraded() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if ok, err := f.Unlock(ctx, unlock); err != nil || !ok {
			t.Errorf("Unlock with the primary up = %v, %v; want true", ok, err)
		}
	})

	t.Run("invalid request", func(t *testing.T) {
		f := newTestFailover(t, FailoverConfig{}, &foStore{}, &foStore{}, FailoverEvents{})
		if _, err := f.Lock(ctx, &LockRequest{}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Lock(empty) = %v; want a validation error", err)
		}
	})
}
