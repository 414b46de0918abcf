package limits

import (
	"context"
	"testing"
	"time"
)

// confChallengeCases are the shared cases of challenge rules and
// reservations (reserve_failures); runConformance runs them with the
// others.
func confChallengeCases() []confCase {
	return append([]confCase{
		{"Challenge", false, confChallenge},
		{"ChallengeWithDenyRule", false, confChallengeWithDeny},
		{"ChallengePassedCapsLog", false, confChallengePassedCaps},
		{"ChallengeKinds", false, confChallengeKindsCase},
		{"ChallengeKindsBoundedSet", false, confChallengeKindsBounded},
		{"ChallengeKindsDeniedPassRecordsNothing", false, confChallengeKindsUndo},
		{"ChallengeCounterBeyond32Bits", false, confChallengeCounterBeyond32Bits},
		{"ReserveStrikesAtThreshold", false, confReserveSequential},
		{"ReserveParallelStrikesOnce", false, confReserveParallel},
		{"ReserveSettlesOnce", false, confReserveSettleOnce},
		{"ReserveSuccessRemoves", false, confReserveSuccessRemoves},
		{"ReserveUnknownRecordIsV1", false, confReserveUnknown},
	}, confReserveDistinctCases()...)
}

// confChallenge: a full challenge rule challenges (nothing logged, no
// denial failure); passed, it admits and logs; a lockout is no challenge.
func confChallenge(t *testing.T, c *conf) {
	ch := Rule{Key: c.key("log", "ch"), Limit: 2, Window: confWindow, Challenge: true}
	deny := Rule{Key: c.key("log", "chdeny"), Limit: 10, Window: confWindow}
	esc := c.escalation("ch", 1, []time.Duration{time.Minute}, time.Hour)
	lock := []LockRef{{Key: esc.Failures[0].LockKey}}
	req := func(passed bool) CheckRequest {
		r := ch
		r.Passed = passed
		return CheckRequest{Rules: []Rule{r, deny}, Locks: lock, DenialFailures: &esc}
	}
	for i := range 2 {
		if res := c.check(t, c.store(i), req(false)); !res.Allowed || res.Challenge {
			t.Fatalf("check %d: got %+v, want allowed, no challenge", i+1, res)
		}
	}
	res := c.check(t, c.a, req(false))
	if res.Allowed || !res.Challenge || res.Locked != nil || len(res.Struck) != 0 {
		t.Fatalf("third check: got %+v, want a challenge, nothing struck", res)
	}
	confWantRule(t, "challenge rule", res.Rules[0], RuleResult{Allowed: false, Count: 2, Remaining: 0,
		Reset: res.Rules[0].Reset, RetryAfter: res.Rules[0].RetryAfter})
	confWantRule(t, "deny rule (nothing logged)", res.Rules[1], RuleResult{Allowed: true, Count: 2, Remaining: 8,
		Reset: res.Rules[1].Reset})
	for i := range 3 {
		res := c.check(t, c.store(i), req(true))
		if !res.Allowed || res.Challenge || len(res.Struck) != 0 {
			t.Fatalf("passed check %d: got %+v, want allowed", i+1, res)
		}
		// The log keeps every entry (up to PassedKeep): 2, 3, 4 before.
		if got, want := res.Rules[0].Count, 3+i; got != want || res.Rules[0].Remaining != 0 || !res.Rules[0].Allowed {
			t.Errorf("passed check %d: challenge rule %+v, want count %d, remaining 0, allowed", i+1, res.Rules[0], want)
		}
		if got, want := res.Rules[1].Count, 3+i; got != want {
			t.Errorf("passed check %d: deny rule count %d, want %d (passed attempts are logged)", i+1, got, want)
		}
	}
	if res := c.check(t, c.b, req(false)); !res.Challenge {
		t.Errorf("after passing: got %+v, want a challenge again", res)
	}
	// A lockout decides before any challenge.
	c.fail(t, c.a, esc)
	for _, passed := range []bool{false, true} {
		res := c.check(t, c.b, req(passed))
		if res.Allowed || res.Challenge || res.Locked == nil {
			t.Errorf("while locked (passed %v): got %+v, want a lockout denial", passed, res)
		}
	}
}

// confChallengeWithDeny: when a deny rule denies too, the denial is no
// challenge (and counts as a denial failure); passing the challenge does
// not lift a deny rule, and a denied passed attempt logs nothing.
func confChallengeWithDeny(t *testing.T, c *conf) {
	ch := Rule{Key: c.key("log", "cwd-ch"), Limit: 1, Window: confWindow, Challenge: true}
	deny := Rule{Key: c.key("log", "cwd-deny"), Limit: 1, Window: confWindow}
	esc := c.escalation("cwd", 1, []time.Duration{time.Minute}, time.Hour)
	if res := c.check(t, c.a, CheckRequest{Rules: []Rule{ch, deny}}); !res.Allowed {
		t.Fatalf("first check: got %+v, want allowed", res)
	}
	passed := ch
	passed.Passed = true
	res := c.check(t, c.b, CheckRequest{Rules: []Rule{passed, deny}})
	if res.Allowed || res.Challenge || !res.Rules[0].Allowed || res.Rules[1].Allowed {
		t.Fatalf("passed but the deny rule is full: got %+v, want a denial by the deny rule only", res)
	}
	if res.Rules[0].Count != 1 {
		t.Errorf("passed, denied: challenge rule count %d, want 1 (nothing logged)", res.Rules[0].Count)
	}
	res = c.check(t, c.a, CheckRequest{Rules: []Rule{ch, deny}, DenialFailures: &esc})
	if res.Allowed || res.Challenge || len(res.Struck) != 1 {
		t.Errorf("both full: got %+v, want a denial that records a failure (strike)", res)
	}
}

// confChallengePassedCaps: passing many challenges keeps every entry of
// the log up to PassedKeep, so its count (and its reset: the oldest
// entry's) stay exact; past it the oldest go, so it stays bounded.
func confChallengePassedCaps(t *testing.T, c *conf) {
	ch := Rule{Key: c.key("log", "caps"), Limit: 3, Window: confWindow, Challenge: true, Passed: true}
	pass := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{ch}}); !res.Allowed {
				t.Fatalf("passed check %d: got %+v, want allowed", i+1, res)
			}
		}
	}
	probe := func(after, want int) {
		t.Helper()
		r := ch
		r.Passed = false
		res := c.check(t, c.a, CheckRequest{Rules: []Rule{r}, DryRun: true})
		if !res.Challenge || res.Rules[0].Count != want {
			t.Errorf("after %d passes: got %+v, want a challenge with %d entries", after, res, want)
		}
	}
	pass(0, 20)
	probe(20, 20)
	pass(20, PassedKeep+5)
	probe(PassedKeep+5, PassedKeep)
}

// reserveReq is a check of one roomy attempt rule (its own slot under
// SlotTags, so a decision spans slots) reserving in esc under record.
func (c *conf) reserveReq(esc *Escalation, record string) CheckRequest {
	return CheckRequest{
		Rules:   []Rule{{Key: c.key("log", "rsv-"+esc.Failures[0].Key), Limit: 1000, Window: confWindow}},
		Locks:   []LockRef{{Key: esc.Failures[0].LockKey}},
		Reserve: &Reservation{Escalation: *esc, Records: []string{record}, TTL: confWindow},
	}
}

// confReserveSequential: the check whose provisional failure fills the
// log strikes and is allowed; the next is locked out; a dry run and a
// denied check reserve nothing.
func confReserveSequential(t *testing.T, c *conf) {
	esc := c.escalation("rsvseq", 2, []time.Duration{time.Minute, 5 * time.Minute}, time.Hour)
	// A lockout index in a slot of its own (under SlotTags): a strike at
	// check time indexes its lock there too.
	index := c.key("log", "rsvseq-index")
	esc.Failures[0].Indexes = []string{index}
	dry := c.reserveReq(&esc, c.key("rec", confFreshNonce()))
	dry.DryRun = true
	for i := range 3 {
		if res := c.check(t, c.store(i), dry); !res.Allowed || len(res.Struck) != 0 {
			t.Fatalf("dry run %d: got %+v, want allowed, nothing reserved", i+1, res)
		}
	}
	if res := c.check(t, c.a, c.reserveReq(&esc, c.key("rec", confFreshNonce()))); !res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("first check: got %+v, want allowed, no strike", res)
	}
	res := c.check(t, c.b, c.reserveReq(&esc, c.key("rec", confFreshNonce())))
	if !res.Allowed || len(res.Struck) != 1 {
		t.Fatalf("second check: got %+v, want allowed with one strike", res)
	}
	confWantLock(t, "strike", &res.Struck[0], confStruckState(esc, 1, res.Now))
	page, err := c.b.Lockouts(context.Background(), &LockQuery{Index: index, Limit: 10})
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != esc.Failures[0].LockKey {
		t.Errorf("lockouts by the strike's index: got %+v, %v; want the struck lock", page.Locks, err)
	}
	next := c.check(t, c.a, c.reserveReq(&esc, c.key("rec", confFreshNonce())))
	if next.Allowed || next.Locked == nil || len(next.Struck) != 0 {
		t.Errorf("third check: got %+v, want locked out, nothing struck", next)
	}
}

// confReserveParallel: N parallel reserved checks at a threshold of L
// strike exactly once: L are allowed (the L-th strikes), the rest meet
// the lockout (Keycloak #31726, Cacti #6996).
func confReserveParallel(t *testing.T, c *conf) {
	const workers, limit = 12, 4
	esc := c.escalation("rsvpar", limit, []time.Duration{time.Minute, 5 * time.Minute}, time.Hour)
	allowed, locked, struck := c.parallelReserved(t, workers, func(int) CheckRequest {
		return c.reserveReq(&esc, c.key("rec", confFreshNonce()))
	})
	if allowed != limit || locked != workers-limit || struck != 1 {
		t.Errorf("%d parallel reserved checks, failure limit %d: got %d allowed, %d locked out, %d strikes; want %d, %d, 1",
			workers, limit, allowed, locked, struck, limit, workers-limit)
	}
}

// parallelReserved runs workers checks at once, worker w's request
// req(w) on store w, and counts the allowed, the locked out and the
// strikes.
func (c *conf) parallelReserved(t *testing.T, workers int, req func(w int) CheckRequest) (allowed, locked, struck int) {
	t.Helper()
	type outcome struct {
		allowed, locked bool
		struck          int
		err             error
	}
	out := make(chan outcome, workers)
	start := make(chan struct{})
	for w := range workers {
		r := req(w)
		r.Cost, r.Nonce = 1, confFreshNonce()
		go func() {
			<-start
			res, err := c.store(w).Check(context.Background(), &r)
			out <- outcome{res.Allowed, res.Locked != nil, len(res.Struck), err}
		}()
	}
	close(start)
	for range workers {
		o := <-out
		if o.err != nil {
			t.Fatalf("Check: %v", o.err)
		}
		if o.allowed {
			allowed++
		}
		if o.locked {
			locked++
		}
		struck += o.struck
	}
	return allowed, locked, struck
}

// confReserveSettleOnce: a failure report keeps the provisional entry (no
// second one), and repeating it changes nothing.
func confReserveSettleOnce(t *testing.T, c *conf) {
	esc := c.escalation("rsvonce", 3, []time.Duration{time.Minute}, time.Hour)
	rec := c.key("rec", confFreshNonce())
	if res := c.check(t, c.a, c.reserveReq(&esc, rec)); !res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("check: got %+v, want allowed, no strike", res)
	}
	settle := ReportRequest{Failure: true, Escalation: esc, Records: []string{rec}}
	for i := range 3 {
		if res := c.report(t, c.store(i), settle); len(res.Struck) != 0 {
			t.Fatalf("settling failure %d: got struck %+v, want none (the log holds 1 of 3)", i+1, res.Struck)
		}
	}
	if res := c.fail(t, c.b, esc); len(res.Struck) != 0 {
		t.Fatalf("a v1 failure: got struck %+v, want none (2 of 3)", res.Struck)
	}
	confWantStrike(t, "the next v1 failure", c.fail(t, c.a, esc), esc, 1)
}

// confReserveSuccessRemoves: a success takes the provisional entry back
// once; a later failure report with the same record changes nothing.
func confReserveSuccessRemoves(t *testing.T, c *conf) {
	esc := c.escalation("rsvok", 2, []time.Duration{time.Minute}, time.Hour)
	rec := c.key("rec", confFreshNonce())
	if res := c.check(t, c.a, c.reserveReq(&esc, rec)); !res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("check: got %+v, want allowed, no strike", res)
	}
	c.report(t, c.b, ReportRequest{Escalation: esc, Records: []string{rec}})
	if res := c.report(t, c.a, ReportRequest{Failure: true, Escalation: esc, Records: []string{rec}}); len(res.Struck) != 0 {
		t.Fatalf("failure after the success, same record: got struck %+v, want none (changes nothing)", res.Struck)
	}
	if res := c.fail(t, c.b, esc); len(res.Struck) != 0 {
		t.Fatalf("a v1 failure: got struck %+v, want none (1 of 2: the success removed the provisional one)", res.Struck)
	}
	confWantStrike(t, "the next v1 failure", c.fail(t, c.a, esc), esc, 1)
}

// confReserveUnknown: a report naming a record that was never written
// behaves as in v1.
func confReserveUnknown(t *testing.T, c *conf) {
	esc := c.escalation("rsvunknown", 2, []time.Duration{time.Minute}, time.Hour)
	unknown := ReportRequest{Failure: true, Escalation: esc, Records: []string{c.key("rec", confFreshNonce())},
		Locks: []LockRef{{Key: esc.Failures[0].LockKey}}}
	if res := c.report(t, c.a, unknown); len(res.Struck) != 0 {
		t.Fatalf("first failure: got struck %+v, want none", res.Struck)
	}
	confWantStrike(t, "second failure, another unknown record", c.report(t, c.b, unknown), esc, 1)
}
