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

// TestRedisMatchesMemoryReservations is TestRedisMatchesMemory with
// reservations (reserve_failures: checks that reserve, reports that settle
// one of the sequence's records, some twice, some never) and challenge
// rules, passed or not, beside the shadow rules, denial failures, trust and
// costs above 1 of the other test's requests.
func TestRedisMatchesMemoryReservations(t *testing.T) {
	const sequences, steps, tolerance = 200, 40, time.Second
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	rs, _, _ := newRedisTestStore(t, redisURL, prefix)
	for seq := range uint64(sequences) {
		p := fmt.Sprintf("%s%d:", prefix, seq)
		ms := NewMemory(MemoryConfig{})
		g := diffGen{r: rand.New(rand.NewPCG(seq, 7)), prefix: p}
		var history []string
		recs := 0
		for step := range steps {
			nonce := fmt.Sprintf("s%d", step)
			var got, want string
			if g.r.IntN(10) < 6 {
				req := g.check(nonce)
				for i := range req.Rules {
					req.Rules[i].Challenge = g.r.IntN(3) == 0
					req.Rules[i].Passed = req.Rules[i].Challenge && g.r.IntN(2) == 0
				}
				if g.r.IntN(2) == 0 && !req.DryRun {
					recs++
					req.Reserve = &Reservation{Escalation: g.escalation(), Records: []string{fmt.Sprintf("%srec%d", p, recs)}, TTL: time.Hour}
				}
				history = append(history, fmt.Sprintf("check %+v rsv %+v", req, req.Reserve))
				r1, e1 := rs.Check(ctx, &req)
				r2, e2 := ms.Check(ctx, &req)
				got = diffCheck(r1, e1, nil, tolerance)
				want = diffCheck(r2, e2, r1.Rules, tolerance)
			} else {
				req := g.report(nonce)
				if recs > 0 && g.r.IntN(2) == 0 {
					req.Records = []string{fmt.Sprintf("%srec%d", p, 1+g.r.IntN(recs))}
				}
				history = append(history, fmt.Sprintf("report %+v", req))
				r1, e1 := rs.Report(ctx, &req)
				r2, e2 := ms.Report(ctx, &req)
				got = fmt.Sprintf("err %v %v locked %s struck %s", e1 != nil, e1, diffLock(r1.Locked), diffStruck(r1.Struck))
				want = fmt.Sprintf("err %v %v locked %s struck %s", e2 != nil, e2, diffLock(r2.Locked), diffStruck(r2.Struck))
			}
			if got != want {
				t.Fatalf("sequence %d step %d: Redis and memory disagree\nredis:  %s\nmemory: %s\nrequests:\n%s",
					seq, step, got, want, strings.Join(history, "\n"))
			}
		}
		ms.Close()
	}
}
