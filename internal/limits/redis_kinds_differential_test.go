package limits

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisMatchesMemoryKinds is TestRedisMatchesMemory for the rule kinds
// of kinds.go: random sequences of checks that mix counters, buckets,
// distinct sets and logs (with costs, shadow and challenge rules, passed
// challenges, dry runs and denial failures into distinct failure sets) and
// of distinct failure reports, on
// a few keys per kind, must get the same answers from redis.lua and the
// memory store. Windows are hours, so the clocks' offset only shifts
// Reset and RetryAfter, which are compared within a tolerance.
func TestRedisMatchesMemoryKinds(t *testing.T) {
	const (
		sequences = 60
		steps     = 40
		tolerance = time.Second
	)
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	rs, _, _ := newRedisTestStore(t, redisURL, prefix)
	for seq := range uint64(sequences) {
		ms := NewMemory(MemoryConfig{})
		t.Cleanup(func() { ms.Close() })
		g := kindsGen{diffGen{r: rand.New(rand.NewPCG(seq, 2)), prefix: fmt.Sprintf("%sk%d:", prefix, seq)}}
		var history []string
		for step := range steps {
			nonce := fmt.Sprintf("s%d", step)
			var got, want string
			if g.r.IntN(4) != 0 {
				req := g.check(nonce)
				history = append(history, fmt.Sprintf("check %+v", req))
				r1, e1 := rs.Check(ctx, &req)
				r2, e2 := ms.Check(ctx, &req)
				got = diffCheck(r1, e1, nil, tolerance)
				want = diffCheck(r2, e2, r1.Rules, tolerance)
			} else {
				req := ReportRequest{Failure: true, Escalation: g.sprayEscalation(), Nonce: nonce}
				history = append(history, fmt.Sprintf("report %+v", req))
				r1, e1 := rs.Report(ctx, &req)
				r2, e2 := ms.Report(ctx, &req)
				got = fmt.Sprintf("err %v struck %s", e1 != nil, diffStruck(r1.Struck))
				want = fmt.Sprintf("err %v struck %s", e2 != nil, diffStruck(r2.Struck))
			}
			if got != want {
				t.Fatalf("sequence %d step %d: Redis and memory disagree\nredis:  %s\nmemory: %s\nrequests:\n%s",
					seq, step, got, want, strings.Join(history, "\n"))
			}
		}
	}
}

// kindsGen draws requests of every rule kind; each kind has keys of its
// own (a key holds one kind, as internal/abuse's key kinds guarantee).
type kindsGen struct{ diffGen }

func (g *kindsGen) rule() Rule {
	r := g.kind()
	// Challenge rules of every kind, passed about half the time.
	r.Challenge = g.r.IntN(3) == 0
	r.Passed = r.Challenge && g.r.IntN(2) == 0
	return r
}

func (g *kindsGen) kind() Rule {
	n := g.r.IntN(2)
	shadow := g.r.IntN(5) == 0
	switch g.r.IntN(4) {
	case 0:
		return Rule{Key: g.prefix + fmt.Sprintf("c%d", n), Limit: 2 + g.r.IntN(6), Window: 2 * time.Hour, Algorithm: AlgCounter, Shadow: shadow}
	case 1:
		return Rule{Key: g.prefix + fmt.Sprintf("b%d", n), Limit: 2 + g.r.IntN(6), Window: 2 * time.Hour, Algorithm: AlgBucket, Shadow: shadow}
	case 2:
		return Rule{Key: g.prefix + fmt.Sprintf("d%d", n), Limit: 1 + g.r.IntN(3), Window: g.hours(3), Shadow: shadow,
			Distinct: confValue(fmt.Sprint("u", g.r.IntN(5)))}
	}
	return Rule{Key: g.prefix + fmt.Sprintf("l%d", n), Limit: 2 + g.r.IntN(4), Window: g.hours(3), Shadow: shadow}
}

func (g *kindsGen) check(nonce string) CheckRequest {
	req := CheckRequest{Cost: 1 + g.r.IntN(2), DryRun: g.r.IntN(5) == 0, Nonce: nonce}
	seen := map[string]bool{}
	for range 1 + g.r.IntN(3) {
		if r := g.rule(); !seen[r.Key] {
			seen[r.Key] = true
			req.Rules = append(req.Rules, r)
		}
	}
	if g.r.IntN(3) == 0 {
		e := g.sprayEscalation()
		req.DenialFailures = &e
	}
	return req
}

func (g *kindsGen) sprayEscalation() Escalation {
	return Escalation{
		Failures: []FailureRule{{
			Key: g.prefix + "spray", Limit: 2 + g.r.IntN(3), Window: 3 * time.Hour, LockKey: g.prefix + "lock", Info: "i",
			Distinct: confValue(fmt.Sprint("u", g.r.IntN(6))),
		}},
		Ladder: []time.Duration{time.Duration(1+g.r.IntN(100000)) * time.Minute},
		Decay:  time.Hour,
	}
}
