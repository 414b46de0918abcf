package abuse

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// signupPolicy has a challenge rule on the device and a deny rule on the
// IP, and counts denials as failures (which a challenge must not record).
func signupPolicy(shadow bool) Policy {
	return Policy{Actions: map[string]Action{
		"signup": {
			Limits: []Rule{
				{Dimension: DimDevice, Limit: 2, Window: time.Hour, OnLimit: OnLimitChallenge, Shadow: shadow},
				{Dimension: DimIP, Limit: 4, Window: time.Hour},
			},
			Failures: []Rule{{Dimension: DimIP, Limit: 1, Window: time.Hour}},
			Lockout:  Lockout{Ladder: []time.Duration{time.Minute}, CountDenials: true},
		},
	}}
}

func TestChallenge(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, signupPolicy(false))
		in := CheckInput{Action: "signup", Subject: subj("", "203.0.113.7", "d-1")}
		for range 2 {
			wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		}
		d := mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonChallenge)
		if got, want := d.Verdict(), sdk.DecisionChallenge; got != want || !d.Challenge {
			t.Fatalf("verdict = %q, want %q", got, want)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > time.Hour || d.Lockout != nil {
			t.Errorf("challenge: retry %v lockout %+v; want the wait without a challenge, in (0, 1h], no lockout", d.RetryAfter, d.Lockout)
		}
		if len(d.Limits) != 2 || d.Limits[0].Rule != "signup/device" || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 2 {
			t.Errorf("challenge limits = %+v; want signup/device remaining 0, then signup/ip remaining 2 (nothing logged)", d.Limits)
		}
		if got := rec.last(t); got.Decision != sdk.DecisionChallenge || got.Reason != ReasonChallenge || got.LockoutUntil != nil {
			t.Errorf("audit event: decision %q reason %q lockout_until %v; want challenge, challenge_required, none", got.Decision, got.Reason, got.LockoutUntil)
		}
		// Passed: allowed with reason ok, and logged (the ip rule counts it).
		in.ChallengePassed = true
		d = mustCheck(t, g, in)
		wantDecision(t, d, true, ReasonOK)
		if d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 1 {
			t.Errorf("passed limits = %+v; want device 0, ip 1", d.Limits)
		}
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		// The ip deny rule is full now: passing the challenge does not lift
		// it, and the denial is counted (count_denials: one failure strikes).
		d = mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonRateLimited)
		wantDecision(t, mustCheck(t, g, in), false, ReasonLockedOut)
		// No challenge was ever a failure: the first strike came with the
		// first rate-limit denial.
		if got := rec.all(); got[len(got)-2].LockoutUntil == nil {
			t.Errorf("the rate-limit denial struck nothing; want the count_denials strike")
		}
	})
}

func TestShadowChallengeRule(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, signupPolicy(true))
		in := CheckInput{Action: "signup", Subject: subj("", "203.0.113.7", "d-1")}
		for range 2 {
			wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		}
		wantDecision(t, mustCheck(t, g, in), true, ReasonShadow)
		in.ChallengePassed = true
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
	})
}

// otpPolicy reserves failures: 3 failed checks of one user strike.
func otpPolicy() Policy {
	return Policy{Actions: map[string]Action{
		"otp_verify": {
			Limits:          []Rule{{Dimension: DimIP, Limit: 100, Window: time.Minute}},
			Failures:        []Rule{{Dimension: DimUser, Limit: 3, Window: 10 * time.Minute}},
			Lockout:         Lockout{Ladder: []time.Duration{time.Minute, 5 * time.Minute}},
			ReserveFailures: true,
		},
	}}
}

func TestReserveFailuresParallelGuesses(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, otpPolicy())
		const n = 10
		allowed, locked := parallelChecks(t, g, n, func(i int) CheckInput {
			return CheckInput{Action: "otp_verify", Subject: subj("alice", "203.0.113.7", "")}
		})
		if allowed != 3 || locked != n-3 {
			t.Errorf("%d parallel guesses, failure limit 3: %d allowed, %d locked out; want 3, %d", n, allowed, locked, n-3)
		}
	})
}

// parallelChecks runs n checks at once, check i of in(i), and counts the
// allowed and the locked out.
func parallelChecks(t *testing.T, g *Guard, n int, in func(i int) CheckInput) (allowed, locked int) {
	t.Helper()
	var wg sync.WaitGroup
	results := make(chan Decision, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := g.Check(context.Background(), in(i))
			if err != nil {
				t.Errorf("check %d: %v", i, err)
			}
			results <- d
		}()
	}
	wg.Wait()
	close(results)
	for d := range results {
		switch d.Reason {
		case ReasonOK:
			allowed++
		case ReasonLockedOut:
			locked++
		}
	}
	return allowed, locked
}

func TestReserveFailuresSettle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, otpPolicy())
		in := CheckInput{Action: "otp_verify", Subject: subj("alice", "203.0.113.7", "")}
		report := func(outcome, id string) ReportOutcome {
			return mustReport(t, g, ReportInput{Action: "otp_verify", Subject: in.Subject, Outcome: outcome, DecisionID: id})
		}
		// A success takes its check's provisional failure back.
		d := mustCheck(t, g, in)
		wantDecision(t, d, true, ReasonOK)
		report(OutcomeSuccess, d.ID)
		report(OutcomeFailure, d.ID) // settled: changes nothing
		// Failures settle once: the same id reported twice is one failure.
		d1 := mustCheck(t, g, in)
		report(OutcomeFailure, d1.ID)
		report(OutcomeFailure, d1.ID)
		d2 := mustCheck(t, g, in)
		wantDecision(t, d2, true, ReasonOK)
		if out := report(OutcomeFailure, d2.ID); out.Lockout != nil {
			t.Fatalf("2 failures of 3: got lockout %+v, want none", out.Lockout)
		}
		// The third check's provisional failure strikes: it is allowed, the
		// next is locked out, and the audit trail shows the strike.
		d3 := mustCheck(t, g, in)
		wantDecision(t, d3, true, ReasonOK)
		if got := rec.last(t); got.LockoutUntil == nil {
			t.Errorf("striking check: audit event has no lockout_until")
		}
		wantDecision(t, mustCheck(t, g, in), false, ReasonLockedOut)
		// A report without a decision_id, or with one never reserved, is v1.
		other := CheckInput{Action: "otp_verify", Subject: subj("bob", "203.0.113.8", "")}
		for i, id := range []string{"", "never-reserved", ""} {
			out := mustReport(t, g, ReportInput{Action: "otp_verify", Subject: other.Subject, Outcome: OutcomeFailure, DecisionID: id})
			if (out.Lockout != nil) != (i == 2) {
				t.Errorf("v1 failure %d: lockout %+v; want one only at the third", i+1, out.Lockout)
			}
		}
	})
}

// TestReserveWithCountDenials: one check script carries both escalations
// (the reservation on an allowance, the denial's failure on a denial), and
// both count in the same failure log.
func TestReserveWithCountDenials(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := otpPolicy()
		a := pol.Actions["otp_verify"]
		a.Limits = []Rule{{Dimension: DimUser, Limit: 1, Window: time.Minute}}
		a.Lockout.CountDenials = true
		pol.Actions["otp_verify"] = a
		g, rec := newGuard(t, b, pol)
		in := CheckInput{Action: "otp_verify", Subject: subj("carol", "203.0.113.9", "")}
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)           // reserved: 1 of 3
		wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited) // denial: 2 of 3
		wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited) // denial: 3 of 3, strikes
		if got := rec.last(t); got.LockoutUntil == nil {
			t.Errorf("third check struck nothing; want the strike (1 reserved + 2 denials)")
		}
		wantDecision(t, mustCheck(t, g, in), false, ReasonLockedOut)
	})
}

// TestChallengeRuleKinds: a challenge rule of every kind challenges when
// full, admits a passed challenge, and challenges the next attempt that
// did not pass.
func TestChallengeRuleKinds(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		in   func(i int) CheckInput
	}{
		{"counter", Rule{Dimension: DimIP, Algorithm: AlgCounter, Limit: 2, Window: time.Hour, OnLimit: OnLimitChallenge},
			func(int) CheckInput { return CheckInput{Action: "signup", Subject: subj("", "203.0.113.7", "")} }},
		{"bucket", Rule{Dimension: DimIP, Algorithm: AlgBucket, Limit: 2, Window: time.Hour, OnLimit: OnLimitChallenge},
			func(int) CheckInput { return CheckInput{Action: "signup", Subject: subj("", "203.0.113.7", "")} }},
		{"distinct", Rule{Dimension: DimIP, Distinct: DimUser, Limit: 2, Window: time.Hour, OnLimit: OnLimitChallenge},
			func(i int) CheckInput {
				return CheckInput{Action: "signup", Subject: subj(fmt.Sprint("user-", i), "203.0.113.7", "")}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				g, _ := newGuard(t, b, Policy{Actions: map[string]Action{"signup": {Limits: []Rule{tt.rule}}}})
				for i := range 2 {
					wantDecision(t, mustCheck(t, g, tt.in(i)), true, ReasonOK)
				}
				wantDecision(t, mustCheck(t, g, tt.in(2)), false, ReasonChallenge)
				passed := tt.in(2)
				passed.ChallengePassed = true
				wantDecision(t, mustCheck(t, g, passed), true, ReasonOK)
				wantDecision(t, mustCheck(t, g, tt.in(3)), false, ReasonChallenge)
			})
		})
	}
}

// A distinct failure rule holds each reserved check's user until its
// report: successes of distinct users behind one address never lock it;
// two attackers' guesses checked before either is reported strike at the
// second check (allowed), and the settling failures strike nothing more.
func TestReserveDistinctStrikesOncePerCrossing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"login": {
			Limits:          []Rule{{Dimension: DimIP, Limit: 100, Window: time.Hour}},
			Failures:        []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 2, Window: time.Hour}},
			Lockout:         Lockout{Ladder: []time.Duration{time.Minute, time.Hour}},
			ReserveFailures: true,
		}}}
		g, rec := newGuard(t, b, pol)
		const ip = "198.51.100.20"
		for i := range 4 { // honest users behind one NAT, each signing in
			user := fmt.Sprintf("u%d", i)
			d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj(user, ip, "")})
			wantDecision(t, d, true, ReasonOK)
			in := success("login", user, ip, "")
			in.DecisionID = d.ID
			mustReport(t, g, in)
		}
		// Two attackers' guesses, both checked before either is reported.
		var ids []string
		for i, user := range []string{"x0", "x1"} {
			d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj(user, ip, "")})
			wantDecision(t, d, true, ReasonOK)
			if got := rec.last(t); (got.LockoutUntil != nil) != (i == 1) {
				t.Errorf("check %d of the attackers: lockout_until %v; want the strike at the second only", i+1, got.LockoutUntil)
			}
			ids = append(ids, d.ID)
		}
		var levels []int
		for i, user := range []string{"x0", "x1"} {
			in := failure("login", user, ip, "")
			in.DecisionID = ids[i]
			if out := mustReport(t, g, in); out.Lockout != nil {
				levels = append(levels, out.Lockout.Level)
			}
		}
		if g, w := fmt.Sprint(levels), "[1 1]"; g != w {
			t.Errorf("lockout levels seen by the settling reports = %s, want %s (the check's one strike)", g, w)
		}
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("x2", ip, "")}), false, ReasonLockedOut)
	})
}

// A cost that does not fit in what a challenge rule has left is a
// challenge that names the rule with remaining 0, as the contract says.
func TestChallengeWithCostShowsRemainingZero(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"signup": {Limits: []Rule{
			{Dimension: DimDevice, Limit: 5, Window: time.Hour, OnLimit: OnLimitChallenge},
			{Dimension: DimIP, Limit: 50, Window: time.Hour},
		}}}}
		g, _ := newGuard(t, b, pol)
		in := CheckInput{Action: "signup", Subject: subj("", "203.0.113.7", "d-1"), Cost: 4}
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		in.Cost = 2 // 4 used of 5: 2 does not fit
		d := mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonChallenge)
		if d.Limits[0].Rule != "signup/device" || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 46 {
			t.Errorf("limits = %+v; want signup/device remaining 0, signup/ip 46", d.Limits)
		}
	})
}

// sprayOTPPolicy reserves failures in a distinct failure rule: 3 users
// failing from one address strike the address.
func sprayOTPPolicy() Policy {
	return Policy{Actions: map[string]Action{
		"otp_verify": {
			Limits:          []Rule{{Dimension: DimIP, Limit: 100, Window: time.Minute}},
			Failures:        []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 3, Window: time.Hour}},
			Lockout:         Lockout{Ladder: []time.Duration{time.Minute, 5 * time.Minute}},
			ReserveFailures: true,
		},
	}}
}

// TestReserveFailuresDistinct: every allowed check holds its user in the
// distinct failure rule (API.md: "to every failure rule that applies"), so
// parallel checks of many users from one address strike at the limit; a
// success takes back its own check's hold only.
func TestReserveFailuresDistinct(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, sprayOTPPolicy())
		const n = 10
		allowed, locked := parallelChecks(t, g, n, func(i int) CheckInput {
			return CheckInput{Action: "otp_verify", Subject: subj(fmt.Sprintf("user%d", i), "203.0.113.20", "")}
		})
		if allowed != 3 || locked != n-3 {
			t.Errorf("%d parallel checks of distinct users from one address, limit 3: %d allowed, %d locked out; want 3, %d", n, allowed, locked, n-3)
		}

		// One user checked twice holds one value twice: the first success
		// leaves it counted, the second takes it back.
		check := func(user, ip string) Decision {
			d := mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: subj(user, ip, "")})
			wantDecision(t, d, true, ReasonOK)
			return d
		}
		struck := func() bool { return rec.last(t).LockoutUntil != nil }
		report := func(user, ip, outcome, id string) ReportOutcome {
			return mustReport(t, g, ReportInput{Action: "otp_verify", Subject: subj(user, ip, ""), Outcome: outcome, DecisionID: id})
		}
		ip := "203.0.113.21"
		a1, _ := check("alice", ip), check("alice", ip)
		report("alice", ip, OutcomeSuccess, a1.ID)
		check("bob", ip) // alice (held by her second check), bob: 2 of 3
		if struck() {
			t.Fatalf("bob's check struck: want alice, bob: 2 of 3")
		}
		check("carol", ip)
		if !struck() {
			t.Errorf("carol's check struck nothing: want the strike (alice, still held by her second check, bob, carol)")
		}

		ip = "203.0.113.22"
		a1, a2 := check("alice", ip), check("alice", ip)
		report("alice", ip, OutcomeSuccess, a1.ID)
		b1 := check("bob", ip) // alice (a2), bob: 2 of 3
		report("bob", ip, OutcomeSuccess, b1.ID)
		report("alice", ip, OutcomeSuccess, a2.ID) // nothing held now
		c1 := check("carol", ip)
		report("carol", ip, OutcomeFailure, c1.ID) // carol: 1 of 3
		check("dave", ip)                          // never reported: 2 of 3
		if struck() {
			t.Fatalf("dave's check struck: want carol, dave: 2 of 3")
		}
		check("erin", ip) // strikes: allowed
		if !struck() {
			t.Errorf("erin's check struck nothing: want the strike (carol, dave, erin)")
		}
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_verify", Subject: subj("frank", ip, "")}), false, ReasonLockedOut)
	})
}

// TestReserveSettledOnlyByItsAction: a report to another action that
// carries a reserved check's decision_id is a v1 report of that action
// (API.md: "with one that Guard never reserved, behaves as in v1"); it
// must not settle the check's reservation, which the check's own report
// still settles (a success takes its provisional failure back).
func TestReserveSettledOnlyByItsAction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := otpPolicy()
		a := pol.Actions["otp_verify"]
		a.Failures = []Rule{{Dimension: DimUser, Limit: 2, Window: 10 * time.Minute}}
		pol.Actions["otp_verify"] = a
		// Another reserving action whose failure logs share the user's
		// hash tag (user+ip is tagged by the user).
		pol.Actions["step_up"] = Action{
			Limits:          []Rule{{Dimension: DimIP, Limit: 100, Window: time.Minute}},
			Failures:        []Rule{{Dimension: DimUserIP, Limit: 5, Window: 10 * time.Minute}},
			Lockout:         Lockout{Ladder: []time.Duration{time.Minute}},
			ReserveFailures: true,
		}
		g, _ := newGuard(t, b, pol)
		in := CheckInput{Action: "otp_verify", Subject: subj("alice", "203.0.113.7", "")}
		d := mustCheck(t, g, in) // provisional failure: 1 of 2
		wantDecision(t, d, true, ReasonOK)
		// The wrong action's report: v1 for step_up, nothing for otp_verify.
		mustReport(t, g, ReportInput{Action: "step_up", Subject: in.Subject, Outcome: OutcomeSuccess, DecisionID: d.ID})
		// The check's own success settles it: 0 of 2.
		mustReport(t, g, ReportInput{Action: "otp_verify", Subject: in.Subject, Outcome: OutcomeSuccess, DecisionID: d.ID})
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK) // 1 of 2
		if d := mustCheck(t, g, in); d.Reason != ReasonOK {  // 2 of 2: strikes, allowed
			t.Fatalf("second check after the settled success: %s; want ok (the success took its failure back)", d.Reason)
		}
		if d := mustCheck(t, g, in); d.Reason != ReasonLockedOut {
			t.Errorf("third check: %s; want locked_out", d.Reason)
		}
	})
}
