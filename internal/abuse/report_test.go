package abuse

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// authPolicy has login and otp_verify on the ledger "auth" and otp_send
// counting its denials; userFailures is login's user failure limit.
func authPolicy(userFailures int) Policy {
	ladder := []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}
	return Policy{Actions: map[string]Action{
		"login": {
			Limits: []Rule{{Dimension: DimIP, Limit: 100, Window: time.Minute}},
			Failures: []Rule{
				{Dimension: DimUserIP, Limit: 3, Window: 15 * time.Minute},
				{Dimension: DimUser, Limit: userFailures, Window: time.Hour},
			},
			Lockout: Lockout{Ladder: ladder, Decay: time.Hour, Ledger: "auth"},
		},
		"otp_verify": {
			Limits:   []Rule{{Dimension: DimUser, Limit: 100, Window: time.Minute}},
			Failures: []Rule{{Dimension: DimUser, Limit: 2, Window: 10 * time.Minute}},
			Lockout:  Lockout{Ladder: ladder, Decay: time.Hour, Ledger: "auth"},
		},
		"otp_send": {
			Limits:   []Rule{{Dimension: DimUser, Limit: 2, Window: time.Minute}},
			Failures: []Rule{{Dimension: DimUser, Limit: 2, Window: time.Hour}},
			Lockout:  Lockout{Ladder: ladder, CountDenials: true},
		},
	}}
}

func failure(action, user, ip, device string) ReportInput {
	return ReportInput{Action: action, Subject: subj(user, ip, device), Outcome: OutcomeFailure}
}

func success(action, user, ip, device string) ReportInput {
	return ReportInput{Action: action, Subject: subj(user, ip, device), Outcome: OutcomeSuccess}
}

func TestReportInputAndNoFailureRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, DefaultPolicy())
		// signup has no failure rules: a failure is recorded nowhere but
		// audited.
		if out := mustReport(t, g, failure("signup", "", "203.0.113.7", "d")); out.Lockout != nil || out.Degraded {
			t.Errorf("signup failure: %+v; want no lockout", out)
		}
		if e := rec.last(t); e.Outcome != OutcomeFailure || e.Action != "signup" {
			t.Errorf("event %+v; want a signup failure", e)
		}
		tests := []struct {
			name  string
			in    ReportInput
			code  string
			field string
		}{
			{"bad outcome", ReportInput{Action: "login", Subject: subj("a", "", ""), Outcome: "ok"}, CodeInvalidRequest, "outcome"},
			{"no outcome", ReportInput{Action: "login", Subject: subj("a", "", "")}, CodeInvalidRequest, "outcome"},
			{"unknown action", ReportInput{Action: "nope", Subject: subj("a", "", ""), Outcome: OutcomeFailure}, CodeUnknownAction, "action"},
			{"no identifiers", ReportInput{Action: "login", Outcome: OutcomeFailure}, CodeInvalidRequest, ""},
			{"bad ip", ReportInput{Action: "login", Subject: subj("a", "::ffff:1.2.3.04", ""), Outcome: OutcomeSuccess}, CodeInvalidRequest, "ip"},
		}
		for _, tt := range tests {
			_, err := g.Report(context.Background(), tt.in)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Code != tt.code || ie.Field != tt.field {
				t.Errorf("%s: error %v; want %s field %q", tt.name, err, tt.code, tt.field)
			}
		}
	})
}

func TestLadderClimbAndDecay(t *testing.T) {
	b := memoryBackend(t)
	g, _ := newGuard(t, b, authPolicy(50))
	check := CheckInput{Action: "login", Subject: subj("alice", "203.0.113.7", "")}
	strike := func(wantLevel int, wantStep time.Duration) {
		t.Helper()
		var out ReportOutcome
		for range 3 {
			out = mustReport(t, g, failure("login", "Alice", "203.0.113.7", ""))
		}
		l := out.Lockout
		if l == nil || l.Ledger != "auth" || l.Dimension != DimUserIP || l.Level != wantLevel ||
			!l.Since.Equal(b.clock.Now()) || l.Until.Sub(l.Since) != wantStep {
			t.Fatalf("strike: lockout %+v; want auth user+ip level %d for %v from now", l, wantLevel, wantStep)
		}
	}

	for range 2 {
		if out := mustReport(t, g, failure("login", "alice", "203.0.113.7", "")); out.Lockout != nil {
			t.Fatalf("failure below the limit answered lockout %+v", out.Lockout)
		}
	}
	wantDecision(t, mustCheck(t, g, check), true, ReasonOK)
	if out := mustReport(t, g, failure("login", "alice", "203.0.113.7", "")); out.Lockout == nil || out.Lockout.Level != 1 {
		t.Fatalf("third failure: lockout %+v; want level 1", out.Lockout)
	}
	d := mustCheck(t, g, check)
	wantDecision(t, d, false, ReasonLockedOut)
	if d.RetryAfter != time.Minute || d.Lockout == nil || d.Lockout.Dimension != DimUserIP || d.Lockout.Level != 1 {
		t.Fatalf("locked check: retry %v lockout %+v; want 1m, user+ip level 1", d.RetryAfter, d.Lockout)
	}
	// The user+ip lock does not reach the user elsewhere.
	wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", "198.51.100.1", "")}), true, ReasonOK)
	// A report on the locked key answers that lockout.
	b.advance(10 * time.Second)
	if out := mustReport(t, g, failure("login", "alice", "203.0.113.7", "")); out.Lockout == nil || out.Lockout.Level != 1 {
		t.Fatalf("report while locked: lockout %+v; want the level-1 lockout", out.Lockout)
	}
	// The lockout ends exactly at retry_after.
	b.advance(50*time.Second - time.Millisecond)
	d = mustCheck(t, g, check)
	wantDecision(t, d, false, ReasonLockedOut)
	if d.RetryAfter != time.Millisecond {
		t.Fatalf("retry after = %v; want 1ms", d.RetryAfter)
	}
	b.advance(time.Millisecond)
	wantDecision(t, mustCheck(t, g, check), true, ReasonOK)

	// One failure is already logged; two more strike level 2 (5m).
	mustReport(t, g, failure("login", "alice", "203.0.113.7", ""))
	out := mustReport(t, g, failure("login", "alice", "203.0.113.7", ""))
	if out.Lockout == nil || out.Lockout.Level != 2 || out.Lockout.Until.Sub(out.Lockout.Since) != 5*time.Minute {
		t.Fatalf("second strike: %+v; want level 2 for 5m", out.Lockout)
	}
	// A strike while locked climbs on: level 3 (15m), then capped at 3.
	strike(3, 15*time.Minute)
	strike(3, 15*time.Minute)
	// Quiet for the decay (1h from the last strike): back to level 1.
	b.advance(time.Hour)
	wantDecision(t, mustCheck(t, g, check), true, ReasonOK)
	strike(1, time.Minute)
}

func TestSuccessClearsOnlyThatPlace(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, authPolicy(7))
		const a, bIP = "203.0.113.7", "198.51.100.2"
		for _, ip := range []string{a, a, bIP, bIP} {
			mustReport(t, g, failure("login", "alice", ip, ""))
		}
		if out := mustReport(t, g, success("login", "alice", a, "")); out.Lockout != nil {
			t.Fatalf("success answered lockout %+v", out.Lockout)
		}
		// user+ip(A) was cleared: one failure there does not strike.
		if out := mustReport(t, g, failure("login", "alice", a, "")); out.Lockout != nil {
			t.Fatalf("failure after success at A struck %+v; the success should have cleared user+ip(A)", out.Lockout)
		}
		// user+ip(B) was not: its third failure strikes.
		out := mustReport(t, g, failure("login", "alice", bIP, ""))
		if out.Lockout == nil || out.Lockout.Dimension != DimUserIP {
			t.Fatalf("third failure at B: lockout %+v; want user+ip", out.Lockout)
		}
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", bIP, "")}), false, ReasonLockedOut)
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", a, "")}), true, ReasonOK)
		// The user log was not cleared either: the 7th failure overall
		// strikes the user lock, which reaches every address.
		mustReport(t, g, failure("login", "alice", a, ""))
		d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", "192.0.2.1", "")})
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout.Dimension != DimUser {
			t.Errorf("lockout dimension %s; want user", d.Lockout.Dimension)
		}
	})
}

func TestTrustedDeviceSparedFromUserLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, authPolicy(50))
		mustReport(t, g, success("login", "alice", "203.0.113.7", "phone-1"))
		// An attacker fails OTP checks for alice from elsewhere.
		mustReport(t, g, failure("otp_verify", "alice", "", "attacker"))
		if out := mustReport(t, g, failure("otp_verify", "alice", "", "attacker")); out.Lockout == nil || out.Lockout.Dimension != DimUser {
			t.Fatalf("otp_verify strike: %+v; want a user lockout", out.Lockout)
		}
		tests := []struct {
			name    string
			subject Subject
			allowed bool
		}{
			{"trusted device", subj("ALICE", "203.0.113.9", "phone-1"), true},
			{"unknown device", subj("alice", "203.0.113.9", "laptop-2"), false},
			{"no device", subj("alice", "203.0.113.9", ""), false},
			{"trusted device id, other user", subj("bob", "203.0.113.9", "phone-1"), true},
		}
		for _, tt := range tests {
			d := mustCheck(t, g, CheckInput{Action: "login", Subject: tt.subject})
			if d.Allowed != tt.allowed {
				t.Errorf("%s: allowed %v (%s); want %v", tt.name, d.Allowed, d.Reason, tt.allowed)
			}
		}
	})
}

func TestSharedLedger(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, authPolicy(50))
		for range 2 {
			mustReport(t, g, failure("otp_verify", "alice", "", ""))
		}
		d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", "203.0.113.7", "")})
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil || d.Lockout.Ledger != "auth" || d.Lockout.Dimension != DimUser || d.Lockout.Level != 1 {
			t.Fatalf("lockout = %+v; want auth/user level 1", d.Lockout)
		}
		if b.clock != nil && d.RetryAfter != time.Minute {
			t.Errorf("retry after = %v; want 1m", d.RetryAfter)
		}
		// otp_send keeps its own ledger.
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "otp_send", Subject: subj("alice", "", "")}), true, ReasonOK)
		// A login failure reports the shared lockout it met.
		if out := mustReport(t, g, failure("login", "alice", "203.0.113.7", "")); out.Lockout == nil || out.Lockout.Dimension != DimUser {
			t.Errorf("login report while auth/user locked: %+v; want that lockout", out.Lockout)
		}
	})
}

func TestCountDenials(t *testing.T) {
	for _, device := range []string{"", "d-never-trusted"} {
		t.Run("device "+device, func(t *testing.T) { testCountDenials(t, device) })
	}
}

func testCountDenials(t *testing.T, device string) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		in := CheckInput{Action: "otp_send", Subject: subj("alice", "", device)}
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited)
		if e := rec.last(t); e.LockoutUntil != nil {
			t.Errorf("first denial carries lockout_until %v; no strike yet", e.LockoutUntil)
		}
		d := mustCheck(t, g, in) // the second denial fills the failure log
		wantDecision(t, d, false, ReasonRateLimited)
		if d.Lockout != nil {
			t.Errorf("striking check has lockout %+v; a rate limit decided it", d.Lockout)
		}
		e := rec.last(t)
		if e.LockoutUntil == nil || e.Reason != ReasonRateLimited {
			t.Fatalf("striking check event: reason %s lockout_until %v; want rate_limited with lockout_until", e.Reason, e.LockoutUntil)
		}
		// Its retry_after is when the attempt is allowed again: not before
		// the lockout it started ends.
		if until := e.LockoutUntil.Sub(d.At); d.RetryAfter < until {
			t.Errorf("striking check retry_after %v, its lockout ends in %v: want at least that", d.RetryAfter, until)
		}
		d = mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil || d.Lockout.Ledger != "otp_send" || d.Lockout.Dimension != DimUser || !d.Lockout.Until.Equal(*e.LockoutUntil) {
			t.Errorf("lockout %+v; want otp_send/user until %v", d.Lockout, e.LockoutUntil)
		}
		if e := rec.last(t); e.LockoutUntil == nil || e.Reason != ReasonLockedOut {
			t.Errorf("locked check event: %+v; want locked_out with lockout_until", e)
		}
	})
}

// A locked attempt's retry_after is the later of the lockout's end and the
// moment the enforced rules admit it (what the Retry-After header says
// too): a count_denials strike locks otp_send for 1m while its user rule
// (2 per 10m here) stays full for almost 10m.
func TestLockedRetryAfterIsTheLaterOfLockAndRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ladder := []time.Duration{time.Minute}
		g, _ := newGuard(t, b, Policy{Actions: map[string]Action{
			"otp_send": {
				Limits: []Rule{
					{Dimension: DimUser, Limit: 2, Window: 10 * time.Minute},
					{Dimension: DimIP, Limit: 1, Window: time.Hour, Shadow: true, Name: "otp_send/ip-shadow"},
				},
				Failures: []Rule{{Dimension: DimUser, Limit: 1, Window: time.Hour}},
				Lockout:  Lockout{Ladder: ladder, Decay: time.Hour, CountDenials: true},
			},
		}})
		in := CheckInput{Action: "otp_send", Subject: subj("carol", "203.0.113.9", "")}
		mustCheck(t, g, in)
		mustCheck(t, g, in)
		// The third is denied by the rule and strikes (count_denials).
		wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited)
		b.advance(time.Second)
		d := mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil {
			t.Fatal("no lockout on a locked_out decision")
		}
		lockLeft := d.Lockout.Until.Sub(d.At)
		if d.RetryAfter <= lockLeft+time.Minute {
			t.Errorf("retry after %v, lockout ends in %v: want the user rule's ~10m, the later one", d.RetryAfter, lockLeft)
		}
		if b.clock != nil {
			// Exact on the fake clock: both entries were logged at t0, the
			// rule admits one more at t0+10m; now is t0+1s.
			if want := 10*time.Minute - time.Second; d.RetryAfter != want {
				t.Errorf("retry after %v, want %v", d.RetryAfter, want)
			}
			// The lockout over, the rule still denies: rate_limited, with
			// the rest of the window.
			b.advance(2 * time.Minute)
			d = mustCheck(t, g, in)
			wantDecision(t, d, false, ReasonRateLimited)
			if want := 10*time.Minute - time.Second - 2*time.Minute; d.RetryAfter != want {
				t.Errorf("after the lockout: retry after %v, want %v", d.RetryAfter, want)
			}
		}
	})
}

// A lockout that outlasts the rules keeps its own end.
func TestLockedRetryAfterLockoutLonger(t *testing.T) {
	b := memoryBackend(t)
	g, _ := newGuard(t, b, authPolicy(50))
	in := CheckInput{Action: "login", Subject: subj("dave", "203.0.113.7", "")}
	for range 3 {
		mustReport(t, g, failure("login", "dave", "203.0.113.7", ""))
	}
	d := mustCheck(t, g, in)
	wantDecision(t, d, false, ReasonLockedOut)
	if d.RetryAfter != time.Minute {
		t.Errorf("retry after %v, want the 1m lockout", d.RetryAfter)
	}
}

func TestReportDecisionID(t *testing.T) {
	b := memoryBackend(t)
	g, rec := newGuard(t, b, DefaultPolicy())
	long := string(make([]byte, MaxDecisionIDLen+1))
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"", true}, {"01JDXYZABCDEFGHJKMNPQRSTVW", true}, {"a_b-C9", true},
		{strings.Repeat("x", MaxDecisionIDLen), true},
		{strings.Repeat("x", MaxDecisionIDLen+1), false}, {long, false},
		{"a b", false}, {"a\x00", false}, {"é", false}, {"a/b", false}, {"a.b", false},
	} {
		in := failure("login", "erin", "203.0.113.7", "")
		in.DecisionID = tc.id
		_, err := g.Report(context.Background(), in)
		var ie *InputError
		switch {
		case tc.ok && err != nil:
			t.Errorf("decision_id %q: %v, want accepted", tc.id, err)
		case tc.ok && rec.last(t).DecisionID != tc.id:
			t.Errorf("decision_id %q: event carries %q", tc.id, rec.last(t).DecisionID)
		case !tc.ok && (!errors.As(err, &ie) || ie.Field != "decision_id"):
			t.Errorf("decision_id %.20q: %v, want 400 field decision_id", tc.id, err)
		}
	}
}

// TestFailuresWithoutLockout: lockout is optional (API.md); failure rules
// without one escalate on the built-in ladder, with the default decay, on
// the action's own ledger.
func TestFailuresWithoutLockout(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, Policy{Actions: map[string]Action{
			"pin": {Failures: []Rule{{Dimension: DimUser, Limit: 2, Window: time.Hour}}},
		}})
		eff := g.Policy().Actions["pin"].Lockout
		if !slices.Equal(eff.Ladder, defaultLadder) || eff.Decay != DefaultDecay || eff.Ledger != "pin" {
			t.Errorf("effective lockout = %+v; want the built-in ladder, decay %v, ledger pin", eff, DefaultDecay)
		}
		mustReport(t, g, failure("pin", "alice", "", ""))
		out := mustReport(t, g, failure("pin", "alice", "", ""))
		if out.Lockout == nil || out.Lockout.Level != 1 || out.Lockout.Until.Sub(out.Lockout.Since) != defaultLadder[0] {
			t.Fatalf("second failure: lockout %+v; want level 1 for %v", out.Lockout, defaultLadder[0])
		}
		if d := mustCheck(t, g, CheckInput{Action: "pin", Subject: subj("alice", "", "")}); d.Allowed || d.Reason != ReasonLockedOut {
			t.Errorf("check after the strike: %+v; want locked_out", d)
		}
	})
}

// TestShadowFailuresStrikeNothing: a shadow failure rule, and every failure
// rule of a shadow action, strike no lockout: a shadow rule never turns a
// decision into a denial, neither of its own action nor of another action
// on the same ledger; the enforced failure rules beside it strike as ever.
func TestShadowFailuresStrikeNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ladder := Lockout{Ladder: []time.Duration{time.Minute}, Decay: time.Hour, Ledger: "shared"}
		g, _ := newGuard(t, b, Policy{Actions: map[string]Action{
			"sf": {Failures: []Rule{
				{Dimension: DimUser, Limit: 2, Window: time.Hour, Shadow: true},
				{Dimension: DimUserIP, Limit: 4, Window: time.Hour},
			}, Lockout: ladder},
			"sa":       {Failures: []Rule{{Dimension: DimUser, Limit: 2, Window: time.Hour}}, Lockout: ladder, Shadow: true},
			"enforced": {Limits: []Rule{{Dimension: DimUser, Limit: 100, Window: time.Hour}}, Failures: []Rule{{Dimension: DimIP, Limit: 100, Window: time.Hour}}, Lockout: ladder},
		}})
		for range 3 {
			if out := mustReport(t, g, failure("sf", "gil", "198.51.100.3", "")); out.Lockout != nil {
				t.Fatalf("failure past the shadow rule's limit: lockout %+v; want none", out.Lockout)
			}
		}
		for range 3 {
			if out := mustReport(t, g, failure("sa", "hal", "198.51.100.4", "")); out.Lockout != nil {
				t.Fatalf("shadow action's failure: lockout %+v; want none", out.Lockout)
			}
		}
		for _, u := range []string{"gil", "hal"} {
			if d := mustCheck(t, g, CheckInput{Action: "enforced", Subject: subj(u, "198.51.100.9", "")}); !d.Allowed {
				t.Errorf("%s on the ledger's enforced action: %+v; want allowed (no shadow strike locks)", u, d)
			}
		}
		// The enforced user+ip rule still strikes, at its own limit.
		if out := mustReport(t, g, failure("sf", "gil", "198.51.100.3", "")); out.Lockout == nil || out.Lockout.Level != 1 {
			t.Errorf("4th failure: lockout %+v; want the enforced user+ip rule's strike", out.Lockout)
		}
	})
}

// A count_denials strike on the user from a device the user has trusted:
// the user lockout (1h) spares that device, so the striking denial's
// retry_after is the rate limit's (the device may come back then); from an
// untrusted device it is the lockout's end.
func TestCountDenialsRetryAfterTrustedDevice(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, Policy{Actions: map[string]Action{"otp_send": {
			Limits:   []Rule{{Dimension: DimUser, Limit: 2, Window: time.Minute}},
			Failures: []Rule{{Dimension: DimUser, Limit: 2, Window: time.Hour}},
			Lockout:  Lockout{Ladder: []time.Duration{time.Hour}, CountDenials: true},
		}}})
		striking := func(user, device string) Decision {
			t.Helper()
			in := CheckInput{Action: "otp_send", Subject: subj(user, "", device)}
			mustCheck(t, g, in)
			mustCheck(t, g, in)
			wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited) // failure 1
			d := mustCheck(t, g, in)                                       // failure 2: strikes
			wantDecision(t, d, false, ReasonRateLimited)
			return d
		}
		mustReport(t, g, success("otp_send", "alice", "", "d-home")) // trusts d-home
		if d := striking("alice", "d-home"); d.RetryAfter > time.Minute {
			t.Errorf("striking check from a trusted device: retry_after %v, want the rate limit's (at most 1m): the lockout spares it", d.RetryAfter)
		}
		if d := striking("bob", "d-new"); d.RetryAfter < 59*time.Minute {
			t.Errorf("striking check from an untrusted device: retry_after %v, want the lockout's end (about 1h)", d.RetryAfter)
		}
	})
}
