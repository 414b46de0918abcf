package limits

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisSentinelFailover: decisions run through the failover store on a
// Sentinel-managed master while the sentinel fails it over to the replica.
// No decision fails (some may come from the fallback, marked degraded), and
// Guard returns to Redis on its own and writes to the new master.
func TestRedisSentinelFailover(t *testing.T) {
	sen := testenv.PrivateSentinel(t)
	client, err := NewRedisClient(RedisConfig{Sentinel: &SentinelConfig{Master: sen.Master, Addrs: []string{sen.Sentinel.Addr()}}}, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("sentinel client: %v", err)
	}
	f := NewFailover(nil, FailoverConfig{Budget: 200 * time.Millisecond, ProbeInterval: 100 * time.Millisecond},
		NewRedis(client, RedisStoreConfig{}), NewMemory(MemoryConfig{}), FailoverEvents{})
	t.Cleanup(func() { f.Close() })
	ctx := context.Background()
	rule := Rule{Key: "{s}l:failover", Limit: 1_000_000, Window: time.Minute}

	var degraded, normal, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := f.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 1})
				switch {
				case err != nil || !res.Allowed:
					failed.Add(1)
				case res.Degraded:
					degraded.Add(1)
				default:
					normal.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Sentinel.Addr()})
	defer sc.Close()
	if err := sc.Failover(ctx, sen.Master).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	// The replica becomes the master.
	deadline := time.Now().Add(20 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(ctx, sen.Master).Result()
		if err == nil && len(addr) == 2 && addr[1] == itoa(sen.Replica.Port()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel did not promote the replica within 20s: %v %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Back to normal answers from Redis, on its own, written to the new
	// master. (Writes the old master took between the promotion and its
	// demotion are lost, as Sentinel's asynchronous replication allows.)
	nc := redis.NewClient(&redis.Options{Addr: sen.Replica.Addr()})
	defer nc.Close()
	for {
		n, err := nc.StrLen(ctx, rule.Key).Result()
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision reached the new master within 20s (normal %d, degraded %d, failed %d)",
				normal.Load(), degraded.Load(), failed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := normal.Load()
	for normal.Load() < before+50 {
		if time.Now().After(deadline) {
			t.Fatalf("no normal answers after the failover (degraded %d, failed %d)", degraded.Load(), failed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d decisions failed or were denied during the failover", failed.Load())
	}
	if f.Degraded() {
		t.Errorf("still degraded after the failover")
	}
	t.Logf("during the failover: %d normal, %d degraded answers", normal.Load(), degraded.Load())
}

func itoa(n int) string { return strconv.Itoa(n) }
