package limits

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// kindsBenchKeys is how many keys a kind's calls spread over: few, so a
// longer run adds calls but no keys, and the difference of two runs'
// instruction counts is the calls' alone (setup and clean-up cancel).
const kindsBenchKeys = 100

// BenchmarkRedisKinds runs one-rule checks of every rule kind serially
// (one call at a time, so a redis-server under callgrind counts each
// kind's instructions alone), and reports the MEMORY USAGE of a key of
// that kind in its state after the run, with Guard-sized key names:
//
//	go test -run '^$' -bench RedisKinds -benchtime 2000x ./internal/limits/
//
// "empty" is a check without rules (the function reads TIME and returns):
// the cost of FCALL itself, to subtract. docs/performance.md ("Rule
// kinds") has the method and the figures.
func BenchmarkRedisKinds(b *testing.B) {
	const tag = "{AAAAAAAAAAAAAAAAAAAAAAAA}"
	value := func(i int) string { return fmt.Sprintf("v%07d", i) }
	cases := []struct {
		name string
		// rule is the i-th call's rule; key its key.
		rule func(prefix string, i int) Rule
		// fill prepares the key before the run.
		fill int
	}{
		{"empty", nil, 0},
		{"log", func(p string, i int) Rule {
			return Rule{Key: p + tag + "l:login/ip:" + strconv.Itoa(i%kindsBenchKeys), Limit: 100, Window: time.Hour}
		}, 0},
		{"log100", func(p string, i int) Rule {
			return Rule{Key: p + tag + "l:login/ip", Limit: 100, Window: time.Hour}
		}, 100},
		{"counter", func(p string, i int) Rule {
			return Rule{Key: p + tag + "c:otp/country:" + strconv.Itoa(i%kindsBenchKeys), Limit: 1_000_000, Window: time.Hour, Algorithm: AlgCounter}
		}, 0},
		{"bucket", func(p string, i int) Rule {
			return Rule{Key: p + tag + "b:login/device:" + strconv.Itoa(i%kindsBenchKeys), Limit: 1_000_000, Window: time.Hour, Algorithm: AlgBucket}
		}, 0},
		{"distinct20", func(p string, i int) Rule {
			return Rule{Key: p + tag + "d:login/ip/distinct-user", Limit: 20, Window: time.Hour, Distinct: value(i % 20)}
		}, 20},
		{"distinct100", func(p string, i int) Rule {
			return Rule{Key: p + tag + "d:login/ip/distinct-user", Limit: 100, Window: time.Hour, Distinct: value(i % 100)}
		}, 100},
		{"distinct100deny", func(p string, i int) Rule {
			return Rule{Key: p + tag + "d:login/ip/distinct-user", Limit: 100, Window: time.Hour, Distinct: value(100 + i)}
		}, 100},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c, prefix := redisBenchSetup(b)
			s := NewRedis(c, RedisStoreConfig{})
			ctx := context.Background()
			check := func(i int) CheckResult {
				req := CheckRequest{Cost: 1, Nonce: "n"}
				if tc.rule != nil {
					req.Rules = []Rule{tc.rule(prefix, i)}
				}
				res, err := s.Check(ctx, &req)
				if err != nil {
					b.Fatal(err)
				}
				return res
			}
			for i := range tc.fill {
				if tc.name == "log100" {
					check(i)
					continue
				}
				r := tc.rule(prefix, 0)
				r.Distinct = value(i)
				if _, err := s.Check(ctx, &CheckRequest{Cost: 1, Nonce: "n", Rules: []Rule{r}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				res := check(i)
				if tc.name == "log100" || tc.name == "distinct100deny" {
					if res.Allowed {
						b.Fatal("a full rule allowed")
					}
				} else if !res.Allowed {
					b.Fatalf("call %d denied", i)
				}
			}
			b.StopTimer()
			if tc.rule != nil {
				n, err := c.MemoryUsage(ctx, tc.rule(prefix, 0).Key, 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n), "key-bytes")
			}
		})
	}
}
