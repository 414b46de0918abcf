package limits

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The memory store has no server to compare against; its reference is
// BenchmarkMemoryBaseline, a bare mutex-guarded map increment, the least
// any in-process limiter does per decision.

// memBenchKeys returns n distinct keys shaped like the ones internal/abuse
// builds.
func memBenchKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "guard:v2:" + prefix + ":login/ip:" + strconv.FormatUint(uint64(i)*2654435761, 16) + "0123456789abcdef0123456789abcdef"
	}
	return keys
}

func BenchmarkMemoryBaseline(b *testing.B) {
	keys := memBenchKeys("log", 10000)
	var mu sync.Mutex
	m := make(map[string]int)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) * 7919)
		for pb.Next() {
			mu.Lock()
			m[keys[i%len(keys)]]++
			mu.Unlock()
			i++
		}
	})
}

func BenchmarkMemoryCheck(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name string
		keys int
		req  func(keys, locks []string, i int) *CheckRequest
	}{
		{"single key allowed", 1, func(keys, _ []string, _ int) *CheckRequest {
			return &CheckRequest{Rules: []Rule{{Key: keys[0], Limit: 1 << 30, Window: time.Second}}, Cost: 1}
		}},
		{"single key denied", 1, func(keys, _ []string, _ int) *CheckRequest {
			return &CheckRequest{Rules: []Rule{{Key: keys[0], Limit: 10, Window: time.Minute}}, Cost: 1}
		}},
		{"many keys", 10000, func(keys, _ []string, i int) *CheckRequest {
			return &CheckRequest{Rules: []Rule{{Key: keys[i%len(keys)], Limit: 100, Window: time.Second}}, Cost: 1}
		}},
		{"login decision", 10000, func(keys, locks []string, i int) *CheckRequest {
			n := len(keys)
			return &CheckRequest{
				Rules: []Rule{
					{Key: keys[i%n], Limit: 100, Window: time.Second},
					{Key: keys[(i*31+1)%n], Limit: 100, Window: time.Second},
					{Key: keys[(i*97+2)%n], Limit: 100, Window: time.Minute, Shadow: true},
				},
				Locks:    []LockRef{{Key: locks[i%n], SpareIfTrusted: true}, {Key: locks[(i*31+1)%n]}},
				TrustKey: locks[(i*7+3)%n],
				Cost:     1,
				Nonce:    "0123456789abcdef",
			}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s := NewMemory(MemoryConfig{})
			defer s.Close()
			keys := memBenchKeys("log", tc.keys)
			locks := memBenchKeys("lock", max(tc.keys, 1))
			// Prebuild requests so the benchmark measures the store.
			reqs := make([]*CheckRequest, 1024)
			for i := range reqs {
				reqs[i] = tc.req(keys, locks, i*7919)
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1) * 127)
				for pb.Next() {
					if _, err := s.Check(ctx, reqs[i%len(reqs)]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

func BenchmarkMemoryReportFailure(b *testing.B) {
	ctx := context.Background()
	s := NewMemory(MemoryConfig{})
	defer s.Close()
	keys := memBenchKeys("fail", 10000)
	locks := memBenchKeys("lock", 10000)
	reqs := make([]*ReportRequest, 1024)
	for i := range reqs {
		j := (i * 7919) % len(keys)
		reqs[i] = &ReportRequest{
			Failure: true,
			Escalation: Escalation{
				Failures: []FailureRule{{Key: keys[j], Limit: 5, Window: time.Minute, LockKey: locks[j], Info: "login|user"}},
				Ladder:   []time.Duration{time.Minute, 5 * time.Minute},
				Decay:    time.Hour,
			},
			Locks: []LockRef{{Key: locks[j]}},
		}
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) * 127)
		for pb.Next() {
			if _, err := s.Report(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
