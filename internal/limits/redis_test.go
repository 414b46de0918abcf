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
	s := NewRedis(c, RedisStoreConfig{Prefix: prefix})
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

	// Load the script (EVALSHA answers NOSCRIPT the first time, then EVAL).
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
			if got != 1 || len(names) != 1 || names[0] != "evalsha" {
				t.Errorf("round trips: got %d %v, want 1 [evalsha]", got, names)
			}
		})
	}
}

func TestRedisNoScriptReload(t *testing.T) {
	url := testenv.PrivateRedis(t).URL()
	prefix := privateRedisPrefix
	s, c, hook := newRedisTestStore(t, url, prefix)
	ctx := context.Background()
	rule := Rule{Key: prefix + "log:flush", Limit: 10, Window: time.Minute}
	for i := range 3 {
		if i > 0 {
			// SCRIPT FLUSH as after a restart or failover; only safe on a
			// private server.
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("script flush: %v", err)
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
		if _, names := hook.reset(); strings.Join(names, ",") != "evalsha,eval" {
			t.Errorf("check %d on an empty script cache: got commands %v, want [evalsha eval]", i, names)
		}
		// Loaded again: back to one EVALSHA.
		if _, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1, DryRun: true, Nonce: "m"}); err != nil {
			t.Fatalf("dry check: %v", err)
		}
		if _, names := hook.reset(); strings.Join(names, ",") != "evalsha" {
			t.Errorf("next check: got commands %v, want [evalsha]", names)
		}
	}
}

func TestRedisMembersAndEncoding(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	// 32-byte nonces, the maximum; a fresh one per call.
	longNonce := func(i int) string { return strings.Repeat("Zz9_-", 6) + strconv.Itoa(10+i) }
	rule := Rule{Key: prefix + "log:enc", Limit: 128, Window: time.Hour}
	esc := redisTestEscalation(prefix, "enc")
	esc.Failures[0].Limit = 100
	for i := range 12 {
		if _, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 10, Nonce: longNonce(2 * i)}); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if _, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc, Nonce: longNonce(2*i + 1)}); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	for _, tc := range []struct {
		key  string
		want int64
	}{{rule.Key, 120}, {esc.Failures[0].Key, 12}} {
		members, err := c.ZRange(ctx, tc.key, 0, -1).Result()
		if err != nil {
			t.Fatalf("zrange %s: %v", tc.key, err)
		}
		if int64(len(members)) != tc.want {
			t.Errorf("%s: got %d members, want %d (unique)", tc.key, len(members), tc.want)
		}
		for _, m := range members {
			if len(m) > 64 {
				t.Errorf("%s: member %q is %d bytes, want at most 64", tc.key, m, len(m))
			}
		}
		enc, err := c.ObjectEncoding(ctx, tc.key).Result()
		if err != nil {
			t.Fatalf("object encoding %s: %v", tc.key, err)
		}
		if enc != "listpack" && enc != "ziplist" {
			t.Errorf("%s: got encoding %q, want listpack (ziplist before Redis 7)", tc.key, enc)
		}
	}
}

func TestRedisEveryKeyExpires(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	esc := redisTestEscalation(prefix, "ttl")
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
	want := []string{"log:a", "log:b", "fail:slow", "lock:ttl", "trust:u:d", "locks"}
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
	n, err := c.ZCard(context.Background(), rule.Key).Result()
	if err != nil {
		t.Fatalf("zcard: %v", err)
	}
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
	if err := c.Set(ctx, prefix+"log:string", "x", time.Minute).Err(); err != nil {
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
		if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("check on a string key: got %v, want a WRONGTYPE error that is not ErrUnavailable", err)
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
		if _, err := s.Lockouts(cctx); !errors.Is(err, ErrUnavailable) {
			t.Errorf("lockouts: got %v, want ErrUnavailable", err)
		}
	})
}

func TestRedisConfigDefaults(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cases := []struct {
		name string
		cfg  RedisStoreConfig
		want string
	}{
		{"zero prefix", RedisStoreConfig{}, "guard:v1:locks"},
		{"own prefix", RedisStoreConfig{Prefix: "x:"}, "x:locks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewRedis(c, tc.cfg).index; got != tc.want {
				t.Errorf("lockout index: got %q, want %q", got, tc.want)
			}
		})
	}
	if err := NewRedis(c, RedisStoreConfig{}).Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
