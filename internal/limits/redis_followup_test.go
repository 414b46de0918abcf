package limits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisFollowUpsKeepTheBudget: the writes that follow a decision's
// answer (Cluster: lockout index entries in other slots, the rollback and
// the denial's failure) run without the caller's cancel but no longer
// than the decision itself could: on the client cmd/guard builds
// (NewRedisClient) the socket timeouts are the admin timeout's, so a
// follow-up bounded by followUpTimeout alone held a decision against a
// hung Redis five budgets past its answer, where the budget's socket
// timeouts had cut it at one.
func TestRedisFollowUpsKeepTheBudget(t *testing.T) {
	srv, s := pausableStore(t)
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries := []strikeIndex{{index: "guardfollowup:idx", lock: LockState{Key: "guardfollowup:lock", Until: time.Now().Add(time.Minute)}}}
	srv.Pause()
	defer srv.Resume()

	ctx, cancel := context.WithTimeout(context.Background(), pauseBudget)
	defer cancel()
	start := time.Now()
	s.writeIndexes(ctx, followUpAllowance(ctx), entries)
	if took := time.Since(start); took > 3*pauseBudget {
		t.Errorf("index write against a hung Redis took %v after a decision of budget %v; want at most about the budget", took, pauseBudget)
	}

	ctx, cancel = context.WithTimeout(context.Background(), pauseBudget)
	defer cancel()
	allow := followUpAllowance(ctx)
	start = time.Now()
	fctx, fcancel := followUp(ctx, allow)
	defer fcancel()
	call := &pending{keys: []string{"guardfollowup:k"}, args: pingArgs}
	if err := s.batch.run(fctx, []*pending{call}); err == nil && call.err == nil {
		t.Errorf("a call to a hung Redis answered")
	}
	if took := time.Since(start); took > 3*pauseBudget {
		t.Errorf("follow-up call against a hung Redis took %v after a decision of budget %v; want at most about the budget", took, pauseBudget)
	}
}

// TestRedisTimedOutCallIsNotRunLater: a decision that a hung Redis
// (SIGSTOP) did not answer within its budget was answered from the fallback
// (degraded), so Redis must not run it once it wakes: a late run counts an
// attempt twice and, with reserve_failures or count_denials, can strike a
// lockout that no answer, audit event or notification ever names. The
// client cmd/guard builds (NewRedisClient) closes a connection that timed
// out; closed gracefully, the call it had sent stayed in Redis's socket
// buffer and ran when Redis resumed.
func TestRedisTimedOutCallIsNotRunLater(t *testing.T) {
	srv, s := pausableStore(t)
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	key := "guardlate:{a}l:rule"
	req := &CheckRequest{Rules: []Rule{{Key: key, Limit: 10, Window: time.Minute}}, Cost: 1}
	// Redis has been answering (the failover store's probes, decisions).
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	cctx, cancel := context.WithTimeout(ctx, pauseBudget)
	_, err := s.Check(cctx, req)
	cancel()
	time.Sleep(2 * pauseBudget) // the client gives the connection up
	srv.Resume()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("check on a paused Redis = %v; want ErrUnavailable", err)
	}
	res, err := s.Check(ctx, &CheckRequest{Rules: req.Rules, Cost: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rules[0].Count; got != 1 {
		t.Errorf("after the timed-out check and a dry run the log counts %d; want 1 (the dry run's): Redis ran the timed-out check when it resumed", got)
	}
}

// TestRedisLateRefusalRetried: a call whose deadline the estimate of
// Redis's clock put too early (a failover to a node whose clock is ahead,
// a clock step) is refused as LATE, raises the estimate and is sent again
// while its caller waits, so it is answered rather than failed over.
func TestRedisLateRefusalRetried(t *testing.T) {
	_, s := pausableStore(t)
	ctx := context.Background()
	good := pingedOffset(t, s)
	skew := func() {
		s.clock.cur.Store(good - 10_000)
		s.clock.prev.Store(noOffset)
	}

	skew()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	res, err := s.Check(cctx, &CheckRequest{Rules: []Rule{{Key: "guardlate:{b}l:rule", Limit: 10, Window: time.Minute}}, Cost: 1})
	if err != nil || !res.Allowed || res.Rules[0].Count != 1 {
		t.Fatalf("check with an estimate 10s short = %+v, %v; want it allowed and logged once", res, err)
	}
	if o, _ := s.clock.offset(); o < good-5 {
		t.Errorf("estimate after the refusal = %d; want it back at about %d", o, good)
	}

	skew()
	states, err := s.Lock(cctx, &LockRequest{Duration: time.Minute, Locks: []ManualLock{{Key: "guardlate:{c}k:manual", Info: "x"}}})
	if err != nil || len(states) != 1 {
		t.Fatalf("lock with an estimate 10s short = %+v, %v; want it set", states, err)
	}
}

// pauseBudget is the decision budget of the stores pausableStore makes.
const pauseBudget = 50 * time.Millisecond

// pausableStore is a Redis store on a private redis-server that the test
// may pause, over the client cmd/guard builds (NewRedisClient) for a
// decision budget of pauseBudget; closed when the test ends.
func pausableStore(t *testing.T) (*testenv.RedisServer, *RedisStore) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts and pauses a private redis-server; skipped with -short")
	}
	srv := testenv.PrivateRedis(t)
	client, err := NewRedisClient(RedisConfig{URL: srv.URL()}, pauseBudget)
	if err != nil {
		t.Fatal(err)
	}
	s := NewRedis(client, RedisStoreConfig{})
	t.Cleanup(func() { s.Close() })
	return srv, s
}

// TestRedisSlowLateRefusalRetried: a refusal as LATE while the caller
// still waits proves the estimate of Redis's clock too low, so it raises
// the estimate however long its round trip took (at most what the caller
// had left). Ignored as a slow reply, it left the estimate as it was and
// the one retry, sent with the same deadline, was certain to be refused
// again: after a failover to a node whose clock is ahead, a Redis that
// answered in 150ms failed every call begun in time.
func TestRedisSlowLateRefusalRetried(t *testing.T) {
	srv, s := pausableStore(t)
	ctx := context.Background()
	good := pingedOffset(t, s)
	s.clock.cur.Store(good - 10_000)
	s.clock.prev.Store(noOffset)

	srv.Pause()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(3 * lateSampleRTT / 2)
		srv.Resume()
	}()
	defer func() { <-resumed }()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := s.Check(cctx, &CheckRequest{Rules: []Rule{{Key: "guardlate:{d}l:rule", Limit: 10, Window: time.Minute}}, Cost: 1})
	if err != nil || !res.Allowed || res.Rules[0].Count != 1 {
		t.Fatalf("check with an estimate 10s short, answered in %v = %+v, %v; want it allowed and logged once", 3*lateSampleRTT/2, res, err)
	}
	if o, _ := s.clock.offset(); o < good-5 {
		t.Errorf("estimate after the refusal = %d; want it at least about %d", o, good)
	}
}

// pingedOffset pings s and returns its estimate of Redis's clock offset,
// which the ping's reply gave it.
func pingedOffset(t *testing.T, s *RedisStore) int64 {
	t.Helper()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	o, ok := s.clock.offset()
	if !ok {
		t.Fatal("no estimate of Redis's clock after a ping")
	}
	return o
}
