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

// TestRedisMatchesMemory runs the same random sequences of Check, Report and
// Unlock against a RedisStore and a MemoryStore and requires the same
// answers. The sequences draw from a few keys so that they collide the way
// the conformance cases rarely do: rules of one request on one log, a rule
// key that is also a failure log, two failure rules striking one lock,
// shadow rules, dry runs, denial failures, trust, decay 0, ladders shorter
// than the level. Windows and ladder steps are long, so the two clocks
// (Redis TIME and the local one) only shift Reset and RetryAfter, which are
// compared within a tolerance.
func TestRedisMatchesMemory(t *testing.T) {
	runDifferential(t, 1, 100, false)
}

// TestRedisMatchesMemoryReservations is TestRedisMatchesMemory with
// reservations (reserve_failures: checks that reserve, reports that settle
// one of the sequence's records, some twice, some never) and challenge
// rules, passed or not.
func TestRedisMatchesMemoryReservations(t *testing.T) {
	runDifferential(t, 7, 200, true)
}

// runDifferential runs sequences random sequences (PCG stream stream) of
// Check, Report and Unlock against a RedisStore and a fresh MemoryStore
// each and fails at the first answer they disagree on; reserve adds
// reservations and challenge rules to the requests.
func runDifferential(t *testing.T, stream uint64, sequences int, reserve bool) {
	const (
		steps     = 40
		tolerance = time.Second
	)
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	rs, _, _ := newRedisTestStore(t, redisURL, prefix)
	for seq := range uint64(sequences) {
		p := fmt.Sprintf("%s%d:", prefix, seq)
		ms := NewMemory(MemoryConfig{})
		t.Cleanup(func() { ms.Close() })
		g := diffGen{r: rand.New(rand.NewPCG(seq, stream)), prefix: p, distinct: reserve}
		var history []string
		records := 0
		for step := range steps {
			nonce := fmt.Sprintf("s%d", step)
			var got, want string
			switch op := g.r.IntN(10); {
			case op < 6:
				req := g.check(nonce)
				if reserve {
					records = g.reserve(&req, records)
				}
				history = append(history, fmt.Sprintf("check %+v reserve %+v", req, req.Reserve))
				r1, e1 := rs.Check(ctx, &req)
				r2, e2 := ms.Check(ctx, &req)
				got = diffCheck(r1, e1, nil, tolerance)
				want = diffCheck(r2, e2, r1.Rules, tolerance)
				if req.Reserve != nil {
					// A settling success takes its entries back by their
					// stamps: an entry a later call makes in the same
					// millisecond of one store's clock (after a clear or
					// a strike) would be taken for it there and not in
					// the other store. Past this millisecond on both
					// clocks, every later stamp is newer.
					time.Sleep(1500 * time.Microsecond)
				}
			case op < 9:
				req := g.report(nonce)
				if reserve && records > 0 && g.r.IntN(2) == 0 {
					req.Records = []string{g.record(1 + g.r.IntN(records))}
				}
				history = append(history, fmt.Sprintf("report %+v", req))
				r1, e1 := rs.Report(ctx, &req)
				r2, e2 := ms.Report(ctx, &req)
				got = fmt.Sprintf("err %v locked %s struck %s", e1 != nil, diffLock(r1.Locked), diffStruck(r1.Struck))
				want = fmt.Sprintf("err %v locked %s struck %s", e2 != nil, diffLock(r2.Locked), diffStruck(r2.Struck))
			default:
				req := UnlockRequest{Locks: []string{g.lock()}, Failures: []string{g.key()}}
				if g.distinct && g.r.IntN(2) == 0 {
					req.Failures = append(req.Failures, p+"d", p+"q")
				}
				history = append(history, fmt.Sprintf("unlock %+v", req))
				a1, e1 := rs.Unlock(ctx, &req)
				a2, e2 := ms.Unlock(ctx, &req)
				got = fmt.Sprintf("err %v active %v", e1 != nil, a1)
				want = fmt.Sprintf("err %v active %v", e2 != nil, a2)
			}
			if got != want {
				t.Fatalf("sequence %d step %d: Redis and memory disagree\nredis:  %s\nmemory: %s\nrequests:\n%s",
					seq, step, got, want, strings.Join(history, "\n"))
			}
		}
	}
}

// reserve makes some of req's rules challenge rules (some passed) and, one
// time in two, has a check that is no dry run reserve under a new record;
// it returns the number of records made so far.
func (g *diffGen) reserve(req *CheckRequest, records int) int {
	for i := range req.Rules {
		req.Rules[i].Challenge = g.r.IntN(3) == 0
		req.Rules[i].Passed = req.Rules[i].Challenge && g.r.IntN(2) == 0
	}
	if g.r.IntN(2) == 0 && !req.DryRun {
		records++
		req.Reserve = &Reservation{Escalation: g.escalation(), Records: []string{g.record(records)}, TTL: time.Hour}
	}
	return records
}

func (g *diffGen) record(i int) string { return g.prefix + fmt.Sprintf("rec%d", i) }

// diffGen draws requests over a small set of keys under prefix.
type diffGen struct {
	r      *rand.Rand
	prefix string
	// distinct adds a distinct failure rule with a pending set to some
	// escalations (reserved values and their settlement).
	distinct bool
}

func (g *diffGen) key() string  { return g.prefix + fmt.Sprintf("k%d", g.r.IntN(3)) }
func (g *diffGen) lock() string { return g.prefix + fmt.Sprintf("l%d", g.r.IntN(2)) }
func (g *diffGen) hours(n int) time.Duration {
	return time.Duration(1+g.r.IntN(n)) * time.Hour
}

func (g *diffGen) escalation() Escalation {
	e := Escalation{Decay: time.Duration(g.r.IntN(3)) * time.Hour}
	// Each failure rule has a log of its own (validateEscalation).
	keys := g.r.Perm(3)
	for i := range 1 + g.r.IntN(2) {
		e.Failures = append(e.Failures, FailureRule{
			Key: g.prefix + fmt.Sprintf("k%d", keys[i]), Limit: 1 + g.r.IntN(3), Window: g.hours(3), LockKey: g.lock(), Info: "i",
		})
	}
	if g.distinct && g.r.IntN(2) == 0 {
		e.Failures = append(e.Failures, FailureRule{
			Key: g.prefix + "d", Pending: g.prefix + "q", Distinct: fmt.Sprintf("v%07d", g.r.IntN(3)),
			Limit: 1 + g.r.IntN(4), Window: g.hours(3), LockKey: g.lock(), Info: "d",
		})
	}
	// Steps in minutes over a wide range: two lockouts struck by separate
	// calls never end within the clocks' few milliseconds of each other.
	for range 1 + g.r.IntN(3) {
		e.Ladder = append(e.Ladder, time.Duration(1+g.r.IntN(100000))*time.Minute)
	}
	return e
}

func (g *diffGen) locks() []LockRef {
	var out []LockRef
	for i := range 2 {
		if g.r.IntN(2) == 0 {
			out = append(out, LockRef{Key: g.prefix + fmt.Sprintf("l%d", i), SpareIfTrusted: g.r.IntN(2) == 0})
		}
	}
	return out
}

func (g *diffGen) check(nonce string) CheckRequest {
	req := CheckRequest{Cost: 1 + g.r.IntN(3), DryRun: g.r.IntN(5) == 0, Locks: g.locks(), Nonce: nonce}
	for range 1 + g.r.IntN(3) {
		req.Rules = append(req.Rules, Rule{Key: g.key(), Limit: 1 + g.r.IntN(4), Window: g.hours(3), Shadow: g.r.IntN(4) == 0})
	}
	if g.r.IntN(2) == 0 {
		req.TrustKey = g.prefix + "trust"
	}
	if g.r.IntN(2) == 0 {
		e := g.escalation()
		req.DenialFailures = &e
	}
	return req
}

func (g *diffGen) report(nonce string) ReportRequest {
	req := ReportRequest{Failure: g.r.IntN(4) != 0, Escalation: g.escalation(), Locks: g.locks(), Nonce: nonce}
	if g.r.IntN(2) == 0 {
		req.TrustKey, req.TrustTTL = g.prefix+"trust", time.Hour
	}
	if g.r.IntN(2) == 0 {
		req.Clear = []string{g.key()}
	}
	return req
}

// diffCheck renders a check answer. With other set, Reset and RetryAfter
// are written as other's where they are within tol of them, so two answers
// compare equal exactly when they agree up to the clocks' offset.
func diffCheck(res CheckResult, err error, other []RuleResult, tol time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "err %v allowed %v challenge %v locked %s struck %s rules", err != nil, res.Allowed, res.Challenge, diffLock(res.Locked), diffStruck(res.Struck))
	for i, rr := range res.Rules {
		if i < len(other) {
			if d := rr.Reset - other[i].Reset; -tol <= d && d <= tol {
				rr.Reset = other[i].Reset
			}
			if d := rr.RetryAfter - other[i].RetryAfter; -tol <= d && d <= tol {
				rr.RetryAfter = other[i].RetryAfter
			}
		}
		fmt.Fprintf(&b, " %+v", rr)
	}
	return b.String()
}

func diffLock(l *LockState) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d", l.Key[strings.LastIndex(l.Key, ":")+1:], l.Level)
}

func diffStruck(ls []LockState) string {
	var parts []string
	for i := range ls {
		parts = append(parts, diffLock(&ls[i]))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
