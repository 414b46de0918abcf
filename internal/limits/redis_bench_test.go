package limits

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// Benchmarks of the Redis store against raw Redis in the same run, so the
// ratio Guard/raw means something on any machine:
//
//	go test -run '^$' -bench 'Redis' -benchtime=2s ./internal/limits/
//
// On a shared machine the load of other processes changes from one
// benchmark to the next, so BenchmarkRedisPaired also interleaves Guard and
// raw calls (serially, measuring latency) and reports the ratios directly.
//
// Every parallel benchmark runs 8 goroutines per GOMAXPROCS over one client
// (as a Guard instance serving concurrent requests would) and spreads its
// attempts over redisBenchKeys keys per rule, so the logs stay small and
// the attempts are allowed (the expensive path: trim, count and add).

const (
	redisBenchKeys        = 10000
	redisBenchParallelism = 8
)

// redisBenchSetup returns a client on the test server and a prefix whose
// keys are deleted when the benchmark ends.
func redisBenchSetup(b *testing.B) (*redis.Client, string) {
	b.Helper()
	redisURL, prefix := testenv.Redis(b)
	c := newRedisTestClient(b, redisURL)
	return c, prefix
}

// redisBenchKeyNames precomputes the key names of one rule.
func redisBenchKeyNames(prefix, rule string) []string {
	keys := make([]string, redisBenchKeys)
	for i := range keys {
		keys[i] = prefix + "log:" + rule + ":" + strconv.Itoa(i)
	}
	return keys
}

// redisBenchRun runs op in parallel and reports ops/s beside ns/op and
// allocs/op; op gets a sequence number unique across goroutines.
func redisBenchRun(b *testing.B, op func(ctx context.Context, i int64) error) {
	b.Helper()
	var seq atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(redisBenchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkRedisCheck(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			c, prefix := redisBenchSetup(b)
			s := NewRedis(c, RedisStoreConfig{})
			keys := make([][]string, n)
			for r := range keys {
				keys[r] = redisBenchKeyNames(prefix, "r"+strconv.Itoa(r))
			}
			lock := []LockRef{{Key: prefix + "lock:bench"}}
			redisBenchRun(b, func(ctx context.Context, i int64) error {
				rules := make([]Rule, n)
				for r := range rules {
					rules[r] = Rule{Key: keys[r][i%redisBenchKeys], Limit: 100, Window: time.Minute}
				}
				res, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, Locks: lock})
				if err == nil && !res.Allowed {
					b.Errorf("check %d: denied, want allowed (benchmark keys too few)", i)
				}
				return err
			})
		})
	}
}

func BenchmarkRedisReport(b *testing.B) {
	c, prefix := redisBenchSetup(b)
	s := NewRedis(c, RedisStoreConfig{})
	fails := redisBenchKeyNames(prefix, "fail")
	locks := redisBenchKeyNames(prefix, "lock")
	redisBenchRun(b, func(ctx context.Context, i int64) error {
		k := i % redisBenchKeys
		_, err := s.Report(ctx, &ReportRequest{
			Failure: true,
			Escalation: Escalation{
				// Every 10th failure of a key strikes.
				Failures: []FailureRule{{Key: fails[k], Limit: 10, Window: time.Minute, LockKey: locks[k]}},
				Ladder:   []time.Duration{time.Minute, 5 * time.Minute},
				Decay:    time.Hour,
			},
			Locks: []LockRef{{Key: locks[k]}},
		})
		return err
	})
}

// BenchmarkRedisRawPing is the floor: one round trip doing nothing.
func BenchmarkRedisRawPing(b *testing.B) {
	c, _ := redisBenchSetup(b)
	redisBenchRun(b, func(ctx context.Context, _ int64) error {
		return c.Ping(ctx).Err()
	})
}

// BenchmarkRedisRawMulti is what a hand-written sliding-window-log limiter
// without lockouts would send: MULTI ZREMRANGEBYSCORE ZCARD ZADD PEXPIRE
// EXEC per rule key, in one round trip (it adds before knowing the count,
// so it is not even strict).
func BenchmarkRedisRawMulti(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			c, prefix := redisBenchSetup(b)
			keys := make([][]string, n)
			for r := range keys {
				keys[r] = redisBenchKeyNames(prefix, "raw"+strconv.Itoa(r))
			}
			redisBenchRun(b, func(ctx context.Context, i int64) error {
				return redisRawMulti(ctx, c, keys, i)
			})
		})
	}
}

// redisRawMulti sends the raw MULTI of BenchmarkRedisRawMulti for the keys
// at index i.
func redisRawMulti(ctx context.Context, c *redis.Client, keys [][]string, i int64) error {
	now := time.Now().UnixMilli()
	member := strconv.FormatInt(now, 36) + ":" + strconv.FormatInt(i, 36)
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for r := range keys {
			k := keys[r][i%redisBenchKeys]
			p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now-60000, 10))
			p.ZCard(ctx, k)
			p.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: member})
			p.PExpire(ctx, k, time.Minute)
		}
		return nil
	})
	return err
}

// BenchmarkRedisPaired runs, one call at a time in round robin, a Guard
// Check of n rules (with one lock), a Guard Report (a failure), the raw
// MULTI on n keys and a PING, and reports each one's mean latency and the
// ratios; all four see the same load, so the ratios hold even when the
// machine is busy. ns/op is per call of any kind.
func BenchmarkRedisPaired(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			c, prefix := redisBenchSetup(b)
			s := NewRedis(c, RedisStoreConfig{})
			guardKeys := make([][]string, n)
			rawKeys := make([][]string, n)
			for r := range guardKeys {
				guardKeys[r] = redisBenchKeyNames(prefix, "g"+strconv.Itoa(r))
				rawKeys[r] = redisBenchKeyNames(prefix, "raw"+strconv.Itoa(r))
			}
			fails := redisBenchKeyNames(prefix, "fail")
			locks := redisBenchKeyNames(prefix, "lock")
			lock := []LockRef{{Key: prefix + "lock:bench"}}
			const kinds = 4 // check, report, raw multi, ping
			var total, count [kinds]int64
			ops := [kinds]func(ctx context.Context, i int64) error{
				func(ctx context.Context, i int64) error {
					rules := make([]Rule, n)
					for r := range rules {
						rules[r] = Rule{Key: guardKeys[r][i%redisBenchKeys], Limit: 100, Window: time.Minute}
					}
					_, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, Locks: lock})
					return err
				},
				func(ctx context.Context, i int64) error {
					k := i % redisBenchKeys
					_, err := s.Report(ctx, &ReportRequest{
						Failure: true,
						Escalation: Escalation{
							Failures: []FailureRule{{Key: fails[k], Limit: 10, Window: time.Minute, LockKey: locks[k]}},
							Ladder:   []time.Duration{time.Minute},
							Decay:    time.Hour,
						},
						Locks: []LockRef{{Key: locks[k]}},
					})
					return err
				},
				func(ctx context.Context, i int64) error { return redisRawMulti(ctx, c, rawKeys, i) },
				func(ctx context.Context, _ int64) error { return c.Ping(ctx).Err() },
			}
			// Serial on purpose: under parallel load every call's latency is
			// the queue in front of it, whatever the call does.
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range int64(b.N) {
				kind := i % kinds
				start := time.Now()
				if err := ops[kind](ctx, i/kinds); err != nil {
					b.Fatal(err)
				}
				total[kind] += int64(time.Since(start))
				count[kind]++
			}
			b.StopTimer()
			mean := func(k int) float64 {
				if count[k] == 0 {
					return 0
				}
				return float64(total[k]) / float64(count[k])
			}
			b.ReportMetric(mean(0), "check-ns")
			b.ReportMetric(mean(1), "report-ns")
			b.ReportMetric(mean(2), "multi-ns")
			b.ReportMetric(mean(3), "ping-ns")
			if mean(2) > 0 && mean(3) > 0 {
				b.ReportMetric(mean(0)/mean(2), "check/multi")
				b.ReportMetric(mean(0)/mean(3), "check/ping")
				b.ReportMetric(mean(1)/mean(3), "report/ping")
			}
		})
	}
}
