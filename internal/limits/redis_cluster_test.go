package limits

import (
	"context"
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
