package limits

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisFunc: the library is named by its source's version, loads
// (twice, as every instance does at start), answers through its function,
// and a call of a library Redis does not have is "function missing" and
// unavailable (the store loads and calls again rather than failing).
func TestRedisFunc(t *testing.T) {
	fn := newRedisFunc(redisSource)
	if !regexp.MustCompile(`^guard_[0-9a-f]{16}$`).MatchString(fn.name) {
		t.Fatalf("name %q, want guard_<16 hex digits>", fn.name)
	}
	if other := newRedisFunc(redisSource + "\n"); other.name == fn.name {
		t.Errorf("a changed source kept the name %q", fn.name)
	}
	redisURL, prefix := testenv.Redis(t)
	c := newRedisTestClient(t, redisURL)
	ctx := context.Background()
	for i := range 2 {
		if err := fn.load(ctx, c); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
	// A dry check of one rule: the reply starts with Redis's time.
	res, err := c.FCall(ctx, fn.name, []string{prefix + "fn:log"}, "check 1 0 0 0 0 0 0 a ea60 60000 0 0", "1", "10").Slice()
	if err != nil || len(res) == 0 {
		t.Fatalf("fcall: %v %v", res, err)
	}
	if r, err := parseReply(res, 1, 0, false); err != nil || r.now < 1e12 {
		t.Errorf("reply: %+v %v, want Redis time in ms", r, err)
	}
	_, err = c.FCall(ctx, "guard_0000000000000000", []string{prefix + "fn:log"}, "check").Result()
	if !functionMissing(err) || !redisUnavailable(err) {
		t.Errorf("call of a missing function: got %v (missing %v, unavailable %v), want both", err, functionMissing(err), redisUnavailable(err))
	}
	if _, err := c.FCall(ctx, fn.name, nil, "nope").Result(); err == nil || functionMissing(err) || redisUnavailable(err) {
		t.Errorf("unknown op: got %v, want a plain script error", err)
	}
}

// TestRedisReserveSharesRuleLog: the store allows a reservation's failure
// log to be a rule's log too; the check's entry and the reservation's
// provisional failure both land in it, on Redis as in memory (a check
// once wrote the failure over the entry it had just appended).
func TestRedisReserveSharesRuleLog(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	rs, _, _ := newRedisTestStore(t, redisURL, prefix)
	ms := NewMemory(MemoryConfig{})
	defer ms.Close()
	for _, st := range []struct {
		name string
		s    Store
	}{{"redis", rs}, {"memory", ms}} {
		k := prefix + st.name + ":log"
		rule := []Rule{{Key: k, Limit: 5, Window: time.Hour}}
		req := CheckRequest{Cost: 1, Nonce: "n1", Rules: rule,
			Reserve: &Reservation{Escalation: Escalation{Failures: []FailureRule{{Key: k, Limit: 5, Window: time.Hour,
				LockKey: prefix + st.name + ":lock", Info: "i"}}, Ladder: []time.Duration{time.Hour}},
				Records: []string{prefix + st.name + ":rec"}, TTL: time.Hour}}
		if _, err := st.s.Check(ctx, &req); err != nil {
			t.Fatalf("%s: reserving check: %v", st.name, err)
		}
		res, err := st.s.Check(ctx, &CheckRequest{Cost: 1, DryRun: true, Nonce: "n2", Rules: rule})
		if err != nil {
			t.Fatalf("%s: dry check: %v", st.name, err)
		}
		// A dry run counts itself: the log holds Count-1 entries.
		if got := res.Rules[0].Count - 1; got != 2 {
			t.Errorf("%s: the shared log holds %d entries, want 2 (the check's and the reservation's)", st.name, got)
		}
	}
}

// TestRedisOOMIsUnavailable: at maxmemory with noeviction Redis refuses
// the FCALL before it runs; that is a Redis that cannot answer (the
// failover store answers from its fallback), not a bad request.
func TestRedisOOMIsUnavailable(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	s, c, _ := newRedisTestStore(t, srv.URL(), privateRedisPrefix)
	ctx := context.Background()
	rule := []Rule{{Key: privateRedisPrefix + "{o}l:x", Limit: 10, Window: time.Minute}}
	if _, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1}); err != nil {
		t.Fatalf("check before maxmemory: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(ctx, "maxmemory", "0")
	_, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1})
	if err == nil || !errors.Is(err, ErrUnavailable) {
		t.Errorf("check at maxmemory: got %v, want an error matching ErrUnavailable", err)
	}
}

// TestRedisRefusedCredentialsAreUnavailable: a Redis that refuses Guard's
// commands (an ACL that drops FCALL) or its credentials (a rotated
// password) cannot decide anything until an operator acts; that is an
// outage, which the failover store counts towards its breaker, alerts on
// and shows in /readyz, not a bug of one call.
func TestRedisRefusedCredentialsAreUnavailable(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	ctx := context.Background()
	admin := newRedisTestClient(t, srv.URL())
	if err := admin.Do(ctx, "ACL", "SETUSER", "guard", "on", ">first-secret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	s, _, _ := newRedisTestStore(t, "redis://guard:first-secret@"+srv.Addr()+"/0", privateRedisPrefix)
	rule := []Rule{{Key: privateRedisPrefix + "{a}l:x", Limit: 10, Window: time.Minute}}
	if _, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1}); err != nil {
		t.Fatalf("check with the credentials Redis takes: %v", err)
	}

	// NOPERM: the ACL changes under open connections.
	if err := admin.Do(ctx, "ACL", "SETUSER", "guard", "-fcall").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1})
	if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("check without permission for FCALL: got %v, want a NOPERM error matching ErrUnavailable", err)
	}
	// The breaker's probe needs what a decision needs: PING still works
	// here, a probe must not report this Redis up.
	if err := s.Ping(ctx); err == nil || !errors.Is(err, ErrUnavailable) {
		t.Errorf("probe without permission for FCALL: got %v, want an error matching ErrUnavailable", err)
	}

	// WRONGPASS: the password is rotated and the connections are dropped,
	// so the client's next connection fails to authenticate.
	if err := admin.Do(ctx, "ACL", "SETUSER", "guard", "+fcall", "resetpass", ">second-secret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "guard").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1})
	if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("check with a rotated password: got %v, want a WRONGPASS error matching ErrUnavailable", err)
	}
}

// TestRedisThatRefusesEveryCallIsUnavailable: a Redis that answers but
// refuses every command Guard sends, for a reason of its own that is no
// known outage reply (here a database index it does not have, so every
// connection's SELECT fails), cannot decide anything: the start-up
// preparation and the probe report it unavailable, so the failover store
// opens its breaker (degraded in /readyz and the metrics, the redis_down
// alert) instead of answering every decision from the fallback while it
// says normal.
func TestRedisThatRefusesEveryCallIsUnavailable(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.DB = 99 // a stock Redis has 16
	s := NewRedis(redis.NewClient(opt), RedisStoreConfig{})
	ctx := context.Background()
	if err := s.Prepare(ctx); err == nil || !errors.Is(err, ErrUnavailable) {
		t.Errorf("prepare on a database Redis does not have: got %v, want an error matching ErrUnavailable", err)
	}
	if err := s.Ping(ctx); err == nil || !errors.Is(err, ErrUnavailable) {
		t.Errorf("probe on a database Redis does not have: got %v, want an error matching ErrUnavailable", err)
	}
	f := NewFailover(nil, FailoverConfig{ProbeInterval: 5 * time.Millisecond}, s, NewMemory(MemoryConfig{}), FailoverEvents{})
	defer f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !f.Degraded() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !f.Degraded() {
		t.Error("failover store over a Redis that refuses every call: breaker still closed after 5 s of probes")
	}
}

// TestRedisPingReloadsLibrary: the probe calls the library, and after a
// FUNCTION FLUSH (a restart, a failover to a node without it) loads it
// again rather than reporting Redis down for good.
func TestRedisPingReloadsLibrary(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	s, c, _ := newRedisTestStore(t, srv.URL(), privateRedisPrefix)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("probe after FUNCTION FLUSH: %v, want the library loaded again", err)
	}
	if n, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err != nil || len(n) != 1 {
		t.Errorf("libraries after the probe: %v, %v; want Guard's", n, err)
	}
}

// TestPruneFunctionLibraries: on one Redis and on every master of a
// Cluster, prune deletes the libraries of other Guard versions and only
// those (not this version's, not another application's whose name merely
// starts with guard_), a dry run deletes nothing, and a store whose
// library was pruned (an instance of the version pruned, still running)
// loads it again on its next call.
func TestPruneFunctionLibraries(t *testing.T) {
	for _, tt := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient {
			c, err := NewRedisClient(RedisConfig{URL: testenv.PrivateRedis(t).URL()}, 0)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"cluster", func(t *testing.T) redis.UniversalClient {
			c, err := NewRedisClient(RedisConfig{Cluster: testenv.PrivateRedisCluster(t)}, 0)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.client(t)
			s := NewRedis(c, RedisStoreConfig{})
			t.Cleanup(func() { s.Close() })
			ctx := context.Background()
			if err := s.Prepare(ctx); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			const old, other = "guard_00000000000000aa", "guard_other"
			nodes := func(f func(n redis.Cmdable)) {
				if cc, ok := c.(*redis.ClusterClient); ok {
					if err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error { f(n); return nil }); err != nil {
						t.Fatal(err)
					}
					return
				}
				f(c)
			}
			libs := func(n redis.Cmdable) []string {
				got, err := n.FunctionList(ctx, redis.FunctionListQuery{}).Result()
				if err != nil {
					t.Fatalf("function list: %v", err)
				}
				var names []string
				for _, l := range got {
					names = append(names, l.Name)
				}
				slices.Sort(names)
				return names
			}
			nodes(func(n redis.Cmdable) {
				for _, name := range []string{old, other} {
					code := "#!lua name=" + name + "\nredis.register_function('" + name + "', function() return 1 end)"
					if err := n.FunctionLoad(ctx, code).Err(); err != nil {
						t.Fatalf("load %s: %v", name, err)
					}
				}
			})
			masters := 1
			if _, ok := c.(*redis.ClusterClient); ok {
				masters = 3
			}
			all := []string{old, FunctionLibrary(), other}
			slices.Sort(all)

			found, err := PruneFunctionLibraries(ctx, c, true)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if len(found) != 2*masters {
				t.Errorf("dry run found %+v, want this version's and %s on each of %d nodes", found, old, masters)
			}
			for _, l := range found {
				if l.Deleted || l.Current != (l.Library == FunctionLibrary()) {
					t.Errorf("dry run: %+v", l)
				}
			}
			nodes(func(n redis.Cmdable) {
				if got := libs(n); !slices.Equal(got, all) {
					t.Errorf("after the dry run: libraries %v, want %v", got, all)
				}
			})

			found, err = PruneFunctionLibraries(ctx, c, false)
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
			deleted := 0
			for _, l := range found {
				if l.Deleted {
					deleted++
					if l.Library != old {
						t.Errorf("deleted %+v, want only %s", l, old)
					}
				}
			}
			if deleted != masters {
				t.Errorf("deleted %d libraries, want %s on each of %d nodes: %+v", deleted, old, masters, found)
			}
			want := []string{FunctionLibrary(), other}
			slices.Sort(want)
			nodes(func(n redis.Cmdable) {
				if got := libs(n); !slices.Equal(got, want) {
					t.Errorf("after prune: libraries %v, want %v", got, want)
				}
			})

			// A newer version's prune deletes this one's library while it
			// runs: its next call loads it again.
			nodes(func(n redis.Cmdable) {
				if err := n.FunctionDelete(ctx, FunctionLibrary()).Err(); err != nil {
					t.Fatal(err)
				}
			})
			req := &CheckRequest{Rules: []Rule{{Key: "{pr}l:prune", Limit: 5, Window: time.Minute}}, Cost: 1, Nonce: "pr"}
			if _, err := s.Check(ctx, req); err != nil {
				t.Fatalf("check after this version's library was deleted: %v, want it loaded again", err)
			}
		})
	}
}
