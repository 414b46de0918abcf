package limits

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// newRedisTestStore returns a store on its own client (with a round-trip
// counter) over url, under prefix.
func newRedisTestStore(t *testing.T, url, prefix string) (*RedisStore, *redis.Client, *redisCountHook) {
	t.Helper()
	c := newRedisTestClient(t, url)
	hook := &redisCountHook{}
	c.AddHook(hook)
	s := NewRedis(c, RedisStoreConfig{})
	return s, c, hook
}

func TestRedisConformance(t *testing.T) {
	runConformance(t, storeHarness{
		New: func(t *testing.T) (Store, Store, string) {
			redisURL, prefix := testenv.Redis(t)
			// Two clients, two pools: two Guard replicas on one Redis.
			a, _, _ := newRedisTestStore(t, redisURL, prefix)
			b, _, _ := newRedisTestStore(t, redisURL, prefix)
			return a, b, prefix
		},
		Advance:   func(t *testing.T, d time.Duration) { time.Sleep(d) },
		FakeClock: false,
	})
}

// redisTestEscalation is a one-failure-strikes policy on lock.
func redisTestEscalation(prefix, name string) Escalation {
	return Escalation{
		Failures: []FailureRule{{
			Key: prefix + "fail:" + name, Limit: 1, Window: time.Minute,
			LockKey: prefix + "lock:" + name, Info: "ledger=auth dim=user",
		}},
		Ladder: []time.Duration{time.Minute, time.Hour},
		Decay:  24 * time.Hour,
	}
}

func TestRedisOneRoundTrip(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, _, hook := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	esc := redisTestEscalation(prefix, "rt")
	rule := func(name string, limit int) Rule {
		return Rule{Key: prefix + "log:" + name, Limit: limit, Window: time.Minute}
	}
	locks := []LockRef{{Key: esc.Failures[0].LockKey, SpareIfTrusted: true}, {Key: prefix + "lock:ip"}}
	trust := prefix + "trust:u:d"

	// Load the library (the first FCALL meets "Function not found", then
	// FUNCTION LOAD and FCALL again).
	if _, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule("warm", 1)}, Cost: 1, Nonce: "warm"}); err != nil {
		t.Fatalf("warm-up Check: %v", err)
	}
	hook.reset()

	cases := []struct {
		name string
		call func() error
	}{
		{"check one rule", func() error {
			_, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule("one", 5)}, Cost: 1, Nonce: "a"})
			return err
		}},
		{"check three rules, locks, trust", func() error {
			_, err := s.Check(ctx, &CheckRequest{
				Rules: []Rule{rule("x", 5), rule("y", 5), rule("z", 5)}, Cost: 2,
				Locks: locks, TrustKey: trust, Nonce: "b",
			})
			return err
		}},
		{"check denied with denial failures that strike", func() error {
			res, err := s.Check(ctx, &CheckRequest{
				Rules: []Rule{rule("warm", 1)}, Cost: 1, Locks: locks,
				DenialFailures: &esc, Nonce: "c",
			})
			if err == nil && len(res.Struck) != 1 {
				t.Errorf("denied check: got struck %+v, want one strike", res.Struck)
			}
			return err
		}},
		{"report failure that strikes", func() error {
			res, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc, Locks: locks, Nonce: "d"})
			if err == nil && len(res.Struck) != 1 {
				t.Errorf("failure: got struck %+v, want one strike", res.Struck)
			}
			return err
		}},
		{"report success", func() error {
			_, err := s.Report(ctx, &ReportRequest{
				Locks: locks, TrustKey: trust, TrustTTL: time.Hour,
				Clear: []string{esc.Failures[0].Key}, Nonce: "e",
			})
			return err
		}},
		{"unlock", func() error {
			_, err := s.Unlock(ctx, &UnlockRequest{Locks: []string{locks[0].Key}, Failures: []string{esc.Failures[0].Key}})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatalf("call: %v", err)
			}
			got, names := hook.reset()
			if got != 1 || len(names) != 1 || names[0] != "fcall" {
				t.Errorf("round trips: got %d %v, want 1 [fcall]", got, names)
			}
		})
	}
}

func TestRedisFunctionReload(t *testing.T) {
	url := testenv.PrivateRedis(t).URL()
	prefix := privateRedisPrefix
	s, c, hook := newRedisTestStore(t, url, prefix)
	ctx := context.Background()
	rule := Rule{Key: prefix + "log:flush", Limit: 10, Window: time.Minute}
	for i := range 3 {
		if i > 0 {
			// FUNCTION FLUSH as after a restart without persistence; only
			// safe on a private server.
			if err := c.FunctionFlush(ctx).Err(); err != nil {
				t.Fatalf("function flush: %v", err)
			}
		}
		hook.reset()
		res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1, Nonce: "n" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("check %d after flush: got error %v, want a transparent reload", i, err)
		}
		if got, want := res.Rules[0].Count, i+1; !res.Allowed || got != want {
			t.Errorf("check %d: got allowed %v count %d, want allowed count %d", i, res.Allowed, got, want)
		}
		if _, names := hook.reset(); strings.Join(names, ",") != "fcall,function,fcall" {
			t.Errorf("check %d without the library: got commands %v, want [fcall function fcall]", i, names)
		}
		// Loaded again: back to one FCALL.
		if _, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1, DryRun: true, Nonce: "m"}); err != nil {
			t.Fatalf("dry check: %v", err)
		}
		if _, names := hook.reset(); strings.Join(names, ",") != "fcall" {
			t.Errorf("next check: got commands %v, want [fcall]", names)
		}
	}
}

// TestRedisLogCompact: a log is a string of 6-byte stamps; a full log of
// 100 entries stays within 1 KiB of Redis memory, key included.
func TestRedisLogCompact(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	// A key of the length Guard's own log keys have.
	rule := Rule{Key: prefix + "{" + strings.Repeat("h", 24) + "}l:login/user", Limit: 100, Window: time.Hour}
	esc := redisTestEscalation(prefix, "enc")
	esc.Failures[0].Limit = 101
	for i := range 100 {
		if _, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1}); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if i < 12 {
			if _, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc}); err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
		}
	}
	for _, tc := range []struct {
		key  string
		want int64
	}{{rule.Key, 100}, {esc.Failures[0].Key, 12}} {
		n, err := c.StrLen(ctx, tc.key).Result()
		if err != nil {
			t.Fatalf("strlen %s: %v", tc.key, err)
		}
		if n != tc.want*redisStampBytes {
			t.Errorf("%s: got %d bytes, want %d entries of %d", tc.key, n, tc.want, redisStampBytes)
		}
	}
	mem, err := c.MemoryUsage(ctx, rule.Key).Result()
	if err != nil {
		t.Fatalf("memory usage: %v", err)
	}
	if mem > 1024 {
		t.Errorf("full 100-entry log: MEMORY USAGE %d bytes, want at most 1024", mem)
	}
	t.Logf("full 100-entry log: MEMORY USAGE %d bytes (key %d bytes)", mem, len(rule.Key))
}

func TestRedisEveryKeyExpires(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	esc := redisTestEscalation(prefix, "ttl")
	esc.Failures[0].Indexes = []string{prefix + "idx:u"}
	esc.Failures = append(esc.Failures, FailureRule{
		Key: prefix + "fail:slow", Limit: 5, Window: time.Hour, LockKey: prefix + "lock:slow",
	})
	trust := prefix + "trust:u:d"
	rules := []Rule{
		{Key: prefix + "log:a", Limit: 1, Window: time.Minute},
		{Key: prefix + "log:b", Limit: 5, Window: time.Hour, Shadow: true},
	}
	calls := []func() error{
		func() error {
			_, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, Nonce: "a"})
			return err
		},
		func() error {
			_, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, DenialFailures: &esc, Nonce: "b"})
			return err
		},
		func() error {
			_, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc, Nonce: "c"})
			return err
		},
		func() error {
			_, err := s.Report(ctx, &ReportRequest{TrustKey: trust, TrustTTL: time.Hour, Nonce: "d"})
			return err
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	keys := redisTestKeys(t, c, prefix)
	want := []string{"log:a", "log:b", "fail:slow", "lock:ttl", "trust:u:d", "idx:u"}
	for _, w := range want {
		found := false
		for _, k := range keys {
			found = found || k == prefix+w
		}
		if !found {
			t.Errorf("key %s: missing after the calls (have %v)", prefix+w, keys)
		}
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("pttl %s: %v", k, err)
		}
		if ttl <= 0 {
			t.Errorf("key %s: got pttl %v, want a positive TTL (no key lives forever)", k, ttl)
		}
	}
}

// TestRedisKindKeysExpireAsMemory: a counter's key lives 2W after its
// last write (its counts then weigh nothing), a bucket's W (it is full
// again), as in the memory store (kinds.go); redis.lua doubled the
// counter's PX a second time, keeping every counter 4W.
func TestRedisKindKeysExpireAsMemory(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	const w = time.Minute
	rules := []Rule{
		{Key: prefix + "c:ttl", Limit: 5, Window: w, Algorithm: AlgCounter},
		{Key: prefix + "b:ttl", Limit: 5, Window: w, Algorithm: AlgBucket},
	}
	if res, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, Nonce: "n"}); err != nil || !res.Allowed {
		t.Fatalf("check: %+v, %v", res, err)
	}
	for i, want := range []time.Duration{2 * w, w} {
		ttl, err := c.PTTL(ctx, rules[i].Key).Result()
		if err != nil {
			t.Fatalf("pttl %s: %v", rules[i].Key, err)
		}
		if ttl > want || ttl < want-5*time.Second {
			t.Errorf("key %s: got pttl %v, want about %v", rules[i].Key, ttl, want)
		}
	}
}

func TestRedisStrictTwoClients(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	a, c, _ := newRedisTestStore(t, redisURL, prefix)
	b, _, _ := newRedisTestStore(t, redisURL, prefix)
	const (
		limit    = 50
		workers  = 16
		attempts = 10
	)
	rule := Rule{Key: prefix + "log:hammer", Limit: limit, Window: time.Minute}
	var (
		mu      sync.Mutex
		allowed int
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for w := range workers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range attempts {
				// Cost 1 or 2, so a fit at count limit-1 is tested too.
				res, err := s.Check(context.Background(), &CheckRequest{Rules: []Rule{rule}, Cost: 1 + (w+i)%2})
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if res.Allowed {
					mu.Lock()
					allowed += 1 + (w+i)%2
					mu.Unlock()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	n, err := c.StrLen(context.Background(), rule.Key).Result()
	if err != nil {
		t.Fatalf("strlen: %v", err)
	}
	n /= redisStampBytes
	if allowed > limit || int(n) != allowed || n < limit-1 {
		t.Errorf("%d attempts of cost 1-2 on limit %d: got %d entries allowed, %d logged; want equal, in [%d, %d]",
			workers*attempts, limit, allowed, n, limit-1, limit)
	}
}

func TestRedisErrors(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	url := srv.URL()
	prefix := privateRedisPrefix
	s, c, hook := newRedisTestStore(t, url, prefix)
	ctx := context.Background()
	rule := Rule{Key: prefix + "log:e", Limit: 5, Window: time.Minute}
	// Not a log: 7 bytes are no whole number of 6-byte stamps.
	if err := c.Set(ctx, prefix+"log:string", "corrupt", time.Minute).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}

	t.Run("invalid requests fail before any round trip", func(t *testing.T) {
		bad := []struct {
			name string
			req  CheckRequest
		}{
			{"cost 0", CheckRequest{Rules: []Rule{rule}}},
			{"limit 0", CheckRequest{Rules: []Rule{{Key: rule.Key, Window: time.Minute}}, Cost: 1}},
			{"sub-ms window", CheckRequest{Rules: []Rule{{Key: rule.Key, Limit: 1, Window: time.Microsecond}}, Cost: 1}},
			{"nonce with colon", CheckRequest{Rules: []Rule{rule}, Cost: 1, Nonce: "a:b"}},
			{"long nonce", CheckRequest{Rules: []Rule{rule}, Cost: 1, Nonce: strings.Repeat("n", 33)}},
			{"empty ladder", CheckRequest{Rules: []Rule{rule}, Cost: 1, DenialFailures: &Escalation{
				Failures: []FailureRule{{Key: "f", Limit: 1, Window: time.Second, LockKey: "l"}}}}},
		}
		hook.reset()
		for _, tc := range bad {
			_, err := s.Check(ctx, &tc.req)
			if err == nil || errors.Is(err, ErrUnavailable) {
				t.Errorf("%s: got error %v, want a plain validation error", tc.name, err)
			}
		}
		if n, names := hook.reset(); n != 0 {
			t.Errorf("round trips for invalid requests: got %d %v, want 0", n, names)
		}
	})

	t.Run("script error is not unavailable", func(t *testing.T) {
		_, err := s.Check(ctx, &CheckRequest{Rules: []Rule{{Key: prefix + "log:string", Limit: 1, Window: time.Minute}}, Cost: 1})
		if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "is no log of 6-byte stamps") {
			t.Errorf("check on a corrupt log: got %v, want a script error that is not ErrUnavailable", err)
		}
	})

	t.Run("ctx deadline is unavailable", func(t *testing.T) {
		// Pause the private server so the call cannot finish in its budget.
		other := newRedisTestClient(t, url)
		if err := other.Do(ctx, "CLIENT", "PAUSE", 400, "ALL").Err(); err != nil {
			t.Fatalf("client pause: %v", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := s.Check(cctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("check on a paused server: got %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
		}
		other.Do(ctx, "CLIENT", "UNPAUSE")
	})

	t.Run("server gone is unavailable", func(t *testing.T) {
		srv.Kill()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := s.Check(cctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("check: got %v, want ErrUnavailable", err)
		}
		if _, err := s.Report(cctx, &ReportRequest{Nonce: "x"}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("report: got %v, want ErrUnavailable", err)
		}
		if err := s.Ping(cctx); !errors.Is(err, ErrUnavailable) {
			t.Errorf("ping: got %v, want ErrUnavailable", err)
		}
		if _, err := s.Lockouts(cctx, &LockQuery{Pattern: "*", Limit: 1}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("lockouts: got %v, want ErrUnavailable", err)
		}
	})
}

func TestRedisStoreConfigDefaults(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	s := NewRedis(c, RedisStoreConfig{})
	if s.batch.maxBatch != 64 || cap(s.batch.calls) != 4*64 {
		t.Errorf("batcher: max batch %d, queue %d; want 64 and 256", s.batch.maxBatch, cap(s.batch.calls))
	}
	if s.cluster {
		t.Errorf("a single-node client is taken for a cluster")
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// TestRedisBatchAfterFunctionFlush: concurrent decisions that all meet
// "Function not found" (after a restart or FUNCTION FLUSH) succeed, the
// library loaded once for the batch.
func TestRedisBatchAfterFunctionFlush(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	s, c, _ := newRedisTestStore(t, srv.URL(), privateRedisPrefix)
	ctx := context.Background()
	for round := range 3 {
		if err := c.FunctionFlush(ctx).Err(); err != nil {
			t.Fatalf("function flush: %v", err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rule := Rule{Key: privateRedisPrefix + "{b" + strconv.Itoa(i) + "}l:x", Limit: 100, Window: time.Minute}
				res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1})
				if err == nil && !res.Allowed {
					err = errors.New("denied")
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: check after FUNCTION FLUSH: %v", round, err)
			}
		}
	}
}
