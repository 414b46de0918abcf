package limits

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// Benchmarks of the failover layer against the raw Redis store in the same
// run, and of a degraded (fallback) decision:
//
//	go test -run '^$' -bench 'Failover' -benchtime=2s ./internal/limits/
//
// BenchmarkFailoverPaired interleaves a raw and a wrapped call on one
// goroutine and reports the latency ratio directly, which stays meaningful
// when other processes load the machine unevenly over time.

const failoverBenchKeys = 10000

// failoverBenchRedis returns a RedisStore on the shared test server with
// the client options cmd/guard uses, under a prefix deleted at the end.
func failoverBenchRedis(b *testing.B) *RedisStore {
	b.Helper()
	url, _ := testenv.Redis(b)
	c := testenv.RedisClient(b, url, func(opt *redis.Options) {
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		opt.DialerRetries = 1
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = 250*time.Millisecond,
			250*time.Millisecond, 250*time.Millisecond, 250*time.Millisecond
	})
	return NewRedis(c, RedisStoreConfig{})
}

// failoverBenchReq is a login-like attempt: two rules over 10,000 keys.
func failoverBenchReq(prefix string, i int64) *CheckRequest {
	k := strconv.FormatInt(i%failoverBenchKeys, 10)
	return &CheckRequest{
		Rules: []Rule{
			{Key: prefix + "log:ip:" + k, Limit: 60, Window: time.Minute},
			{Key: prefix + "log:user:" + k, Limit: 30, Window: 15 * time.Minute},
		},
		Cost:  1,
		Nonce: "b" + strconv.FormatInt(i, 36),
	}
}

func BenchmarkFailover(b *testing.B) {
	run := func(b *testing.B, s Store) {
		var seq, degraded atomic.Int64
		prefix := "guardbench:" + rand.Text()[:10] + ":"
		b.ReportAllocs()
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := s.Check(context.Background(), failoverBenchReq(prefix, seq.Add(1)))
				if err != nil {
					b.Errorf("Check: %v", err)
					return
				}
				if res.Degraded {
					degraded.Add(1)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		b.ReportMetric(100*float64(degraded.Load())/float64(b.N), "%degraded")
	}
	b.Run("redis raw", func(b *testing.B) {
		s := failoverBenchRedis(b)
		defer s.Close()
		run(b, s)
	})
	// With a 1s budget nothing times out: the wrapper's own cost. With
	// the default 50ms budget a loaded machine sends late answers to the
	// fallback; %degraded says how many.
	for _, budget := range []time.Duration{time.Second, 50 * time.Millisecond} {
		b.Run("redis via failover budget "+budget.String(), func(b *testing.B) {
			f := NewFailover(nil, FailoverConfig{Budget: budget}, failoverBenchRedis(b), NewMemory(MemoryConfig{}), FailoverEvents{})
			defer f.Close()
			run(b, f)
		})
	}
	for _, fleet := range []int{1, 4} {
		b.Run("degraded fleet "+strconv.Itoa(fleet), func(b *testing.B) {
			f := NewFailover(nil, FailoverConfig{FailureThreshold: 1, FleetSize: fleet, ProbeInterval: time.Hour},
				foFailing(), NewMemory(MemoryConfig{}), FailoverEvents{})
			defer f.Close()
			f.probe() // opens the breaker: every call goes to the fallback
			run(b, f)
		})
	}
}

// BenchmarkFailoverPaired alternates a raw RedisStore call and a call
// through a FailoverStore (separate clients, same server; 1s budget so that
// every wrapped call is a Redis call) and reports the mean latency of each
// and their ratio.
func BenchmarkFailoverPaired(b *testing.B) {
	raw := failoverBenchRedis(b)
	defer raw.Close()
	f := NewFailover(nil, FailoverConfig{Budget: time.Second}, failoverBenchRedis(b), NewMemory(MemoryConfig{}), FailoverEvents{})
	defer f.Close()
	prefix := "guardbench:" + rand.Text()[:10] + ":"
	ctx := context.Background()
	var rawT, wrapT time.Duration
	b.ResetTimer()
	for i := range int64(b.N) {
		t0 := time.Now()
		if _, err := raw.Check(ctx, failoverBenchReq(prefix+"r:", i)); err != nil {
			b.Fatalf("raw Check: %v", err)
		}
		t1 := time.Now()
		res, err := f.Check(ctx, failoverBenchReq(prefix+"f:", i))
		if err != nil || res.Degraded {
			b.Fatalf("failover Check = degraded %v, %v; want a Redis answer", res.Degraded, err)
		}
		t2 := time.Now()
		rawT += t1.Sub(t0)
		wrapT += t2.Sub(t1)
	}
	b.ReportMetric(float64(rawT.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(wrapT.Nanoseconds())/float64(b.N), "failover-ns/op")
	b.ReportMetric(float64(wrapT)/float64(rawT), "failover/raw")
}
