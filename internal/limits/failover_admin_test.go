package limits_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// TestFailoverAdminCallsOutlastBudget: a Redis that answers an admin call
// (a listing, a manual lock, an unlock) after the decision budget but
// within the admin timeout is up, on the client cmd/guard builds
// (NewRedisClient): its socket timeouts must not cut the call short at the
// budget, which answered 503 to listings of a Redis slow by 100ms.
func TestFailoverAdminCallsOutlastBudget(t *testing.T) {
	srv, client := pausableClient(t)
	const budget = pausableBudget
	// No probes: only the calls below reach Redis.
	fo := limits.NewFailover(nil, limits.FailoverConfig{Budget: budget, ProbeInterval: time.Hour},
		limits.NewRedis(client, limits.RedisStoreConfig{}), limits.NewMemory(limits.MemoryConfig{}), limits.FailoverEvents{})
	defer fo.Close()
	ctx := context.Background()
	prefix := "guardadmin:" + rand.Text()[:10] + ":"
	lock := &limits.LockRequest{Duration: time.Minute, Locks: []limits.ManualLock{{Key: prefix + "lock", Info: "x"}}}

	// stall pauses Redis for 4 budgets: long for a decision, short for
	// the admin timeout.
	stall := func() {
		srv.Pause()
		time.AfterFunc(4*budget, srv.Resume)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"lock", func() error { _, err := fo.Lock(ctx, lock); return err }},
		{"list by pattern", func() error {
			page, err := fo.Lockouts(ctx, &limits.LockQuery{Pattern: prefix + "*", Limit: 10})
			if err == nil && len(page.Locks) != 1 {
				t.Errorf("listing holds %d lockouts; want 1", len(page.Locks))
			}
			return err
		}},
		{"unlock", func() error {
			active, err := fo.Unlock(ctx, &limits.UnlockRequest{Locks: []string{prefix + "lock"}})
			if err == nil && !active {
				t.Errorf("unlock found nothing locked; want the lock")
			}
			return err
		}},
	}
	for _, c := range calls {
		stall()
		if err := c.call(); err != nil {
			t.Errorf("%s while Redis answers after %v: %v; want it answered", c.name, 4*budget, err)
		}
		time.Sleep(5 * budget) // resumed
	}
	if fo.Degraded() {
		t.Errorf("Degraded() = true; admin calls never open the breaker")
	}
}

// TestFailoverUnlockTimeoutKeepsMirroredLock: an unlock that Redis does not
// answer in time (paused) fails (ErrUnavailable, 503) and must lift nothing
// in the fallback either: a manual lock that Lock copied there goes on
// denying through the outage, as docs/api.md says ("while degraded, an
// unlock of its key is 503 unavailable and lifts nothing, since it would
// come back with Redis"). The unlock used to lift the fallback's copy before
// it asked Redis, so a timed-out unlock let the key in during the outage.
func TestFailoverUnlockTimeoutKeepsMirroredLock(t *testing.T) {
	srv, client := pausableClient(t)
	const budget = pausableBudget
	fallback := limits.NewMemory(limits.MemoryConfig{})
	// No probes: the breaker stays closed, as at the start of an outage.
	fo := limits.NewFailover(nil, limits.FailoverConfig{Budget: budget, AdminTimeout: 300 * time.Millisecond, ProbeInterval: time.Hour},
		limits.NewRedis(client, limits.RedisStoreConfig{}), fallback, limits.FailoverEvents{})
	defer fo.Close()
	ctx := context.Background()
	prefix := "guardunlock:" + rand.Text()[:10] + ":"
	key := prefix + "lock"
	if _, err := fo.Lock(ctx, &limits.LockRequest{Duration: time.Minute, Locks: []limits.ManualLock{{Key: key, Info: "x"}}}); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	_, err := fo.Unlock(ctx, &limits.UnlockRequest{Locks: []string{key}})
	srv.Resume()
	if !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("unlock while Redis is paused = %v; want ErrUnavailable", err)
	}
	page, err := fallback.Lockouts(ctx, &limits.LockQuery{Pattern: prefix + "*", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Locks) != 1 || page.Locks[0].Key != key {
		t.Errorf("fallback lockouts after the failed unlock = %+v; want the manual lock still there", page.Locks)
	}

	// Once Redis answers the unlock, the fallback's copy goes too.
	if _, err := fo.Unlock(ctx, &limits.UnlockRequest{Locks: []string{key}}); err != nil {
		t.Fatalf("unlock with Redis back: %v", err)
	}
	if page, err = fallback.Lockouts(ctx, &limits.LockQuery{Pattern: prefix + "*", Limit: 10}); err != nil || len(page.Locks) != 0 {
		t.Errorf("fallback lockouts after the unlock = %+v, %v; want none", page.Locks, err)
	}
}

// pausableBudget is the decision budget of pausableClient's client.
const pausableBudget = 50 * time.Millisecond

// pausableClient is a private redis-server that the test may pause, and
// the client cmd/guard builds (NewRedisClient) for it with a decision
// budget of pausableBudget.
func pausableClient(t *testing.T) (*testenv.RedisServer, redis.UniversalClient) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts and pauses a private redis-server; skipped with -short")
	}
	srv := testenv.PrivateRedis(t)
	client, err := limits.NewRedisClient(limits.RedisConfig{URL: srv.URL()}, pausableBudget)
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}
