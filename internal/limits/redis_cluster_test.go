package limits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// newClusterTestStore is a store on a client of its own over the private
// cluster's seed nodes.
func newClusterTestStore(t *testing.T, addrs []string) *RedisStore {
	t.Helper()
	c, err := NewRedisClient(RedisConfig{Cluster: addrs}, 0)
	if err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	s := NewRedis(c, RedisStoreConfig{})
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRedisClusterConformance runs the whole conformance suite on a real
// three-master Redis Cluster. Each log has a slot of its own while locks,
// failure logs and trust records share the test's (SlotTags), so every
// multi-rule case spans slots and exercises the per-slot scripts and the
// rollback, concurrency cases included.
func TestRedisClusterConformance(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	confSkew = 50 * time.Millisecond
	t.Cleanup(func() { confSkew = 0 })
	runConformance(t, storeHarness{
		New: func(t *testing.T) (Store, Store, string) {
			prefix := "guardtest:" + time.Now().Format("150405.000000") + ":"
			return newClusterTestStore(t, addrs), newClusterTestStore(t, addrs), prefix
		},
		Advance:   func(t *testing.T, d time.Duration) { time.Sleep(d) },
		FakeClock: false,
		SlotTags:  true,
	})
}

// TestRedisClusterSpansSlots: a decision whose keys lie in three slots
// (on different masters) is one decision — all or nothing.
func TestRedisClusterSpansSlots(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	s := newClusterTestStore(t, addrs)
	ctx := context.Background()
	keys := []string{"{a}l:one", "{b}l:two", "{c}l:three"}
	slots := map[int]bool{}
	for _, k := range keys {
		slots[keySlot(k)] = true
	}
	if len(slots) != 3 {
		t.Fatalf("test keys share slots: %v", slots)
	}
	cc := s.client.(*redis.ClusterClient)
	for _, k := range append(keys, "guard:v2:{abc}k:auth:user", "no-tag") {
		if got, err := cc.ClusterKeySlot(ctx, k).Result(); err != nil || int(got) != keySlot(k) {
			t.Errorf("CLUSTER KEYSLOT %s = %d, %v; keySlot says %d", k, got, err, keySlot(k))
		}
	}
	rules := []Rule{
		{Key: keys[0], Limit: 5, Window: time.Minute},
		{Key: keys[1], Limit: 2, Window: time.Minute},
		{Key: keys[2], Limit: 5, Window: time.Minute},
	}
	for i := range 4 {
		res, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1})
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if want := i < 2; res.Allowed != want {
			t.Fatalf("check %d: allowed %v, want %v", i, res.Allowed, want)
		}
		if !res.Allowed && (res.Rules[0].Count != 2 || res.Rules[2].Count != 2 || res.Rules[1].RetryAfter <= 0) {
			t.Errorf("denied check %d: rules %+v; want counts 2 and a retry-after on the full rule", i, res.Rules)
		}
	}
	// The denials took their entries back from the slots that allowed.
	for _, k := range []string{keys[0], keys[2]} {
		n, err := cc.StrLen(ctx, k).Result()
		if err != nil || n != 2*redisStampBytes {
			t.Errorf("%s: %d bytes, %v; want 2 entries after 2 allowed and 2 denied checks", k, n, err)
		}
	}
}

// TestRedisClusterReloadsWithAMasterDown: a master that lost the function
// library (restart, FUNCTION FLUSH) gets it again while another master is
// unreachable: the reload after "Function not found" loads wherever it
// can instead of failing on the first unreachable node.
func TestRedisClusterReloadsWithAMasterDown(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	s := newClusterTestStore(t, addrs)
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	key := "{a}l:reload"
	rule := []Rule{{Key: key, Limit: 10, Window: time.Minute}}
	if _, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1}); err != nil {
		t.Fatalf("first check: %v", err)
	}
	cc := s.client.(*redis.ClusterClient)
	own, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("master for %s: %v", key, err)
	}
	// The healthy masters keep serving their slots however long the
	// stopped one stays away (no timing in this test).
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		if err := n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatalf("%s: config set: %v", a, err)
		}
		n.Close()
	}
	if err := own.FunctionFlush(ctx).Err(); err != nil {
		t.Fatalf("function flush: %v", err)
	}
	for _, a := range addrs {
		if a == own.Options().Addr {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: a})
		_ = n.ShutdownNoSave(ctx).Err() // the connection drops: no reply
		n.Close()
		break
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.Check(cctx, &CheckRequest{Rules: rule, Cost: 1})
	if err != nil {
		t.Fatalf("check on a healthy master after its FUNCTION FLUSH, another master down: %v", err)
	}
	if !res.Allowed || res.Rules[0].Count != 2 {
		t.Errorf("check: allowed %v count %d, want allowed count 2", res.Allowed, res.Rules[0].Count)
	}
}

// TestRedisClusterPingSeesClusterDown: while a master's cluster state is
// fail, it refuses every decision on its slots (CLUSTERDOWN) but still
// runs a call without keys, so a probe of only the empty check reported
// up a Redis that refuses every decision: after a master's restart the
// breaker closed, "recovered" and /readyz "ok", and reopened on the next
// decision, once a second until the cluster was whole again.
func TestRedisClusterPingSeesClusterDown(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	s := newClusterTestStore(t, addrs)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping of a healthy cluster: %v", err)
	}
	key := "{a}l:down"
	rule := []Rule{{Key: key, Limit: 10, Window: time.Minute}}
	own, err := s.client.(*redis.ClusterClient).MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("master for %s: %v", key, err)
	}
	// A slot of that master left unassigned: its cluster state is fail
	// (cluster-require-full-coverage), and it stays reachable.
	var free int
	for free = 0; free < 16384; free++ {
		if free != keySlot(key) {
			if n, err := own.ClusterCountKeysInSlot(ctx, free).Result(); err == nil && n == 0 {
				if err := own.ClusterDelSlots(ctx, free).Err(); err == nil {
					break
				}
			}
		}
	}
	if free == 16384 {
		t.Fatal("no slot of the key's master could be unassigned")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Check(ctx, &CheckRequest{Rules: rule, Cost: 1})
		if err != nil && errors.Is(err, ErrUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("check on a master in cluster state fail: %v, want unavailable", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Ping(ctx); err == nil || !errors.Is(err, ErrUnavailable) {
		t.Errorf("ping while a master refuses every decision (CLUSTERDOWN): %v, want unavailable", err)
	}
}
