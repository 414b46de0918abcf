package backtest

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// Replaying a trail through the policy that wrote it must change nothing:
// these tests record a trail with a real Guard on a memory store and a
// simulated clock, then replay it through the same policy.

// live is a Guard recording a trail on a simulated clock.
type live struct {
	t     *testing.T
	clock atomic.Int64
	g     *abuse.Guard
	trail events
}

func newLive(t *testing.T, pol abuse.Policy) *live {
	t.Helper()
	l := &live{t: t}
	l.clock.Store(day.UnixMilli())
	now := func() time.Time { return time.UnixMilli(l.clock.Load()).UTC() }
	store := limits.NewMemory(limits.MemoryConfig{Now: now})
	t.Cleanup(func() { store.Close() })
	g, err := abuse.New(nil, abuse.Config{Policy: pol, KeySecret: []byte("recorded-secret"), Now: now, TrustTTL: time.Hour}, store, &l.trail, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.g = g
	return l
}

func (l *live) wait(d time.Duration) { l.clock.Add(d.Milliseconds()) }

func (l *live) check(action string, s abuse.Subject) abuse.Decision {
	l.t.Helper()
	l.wait(time.Second)
	d, err := l.g.Check(context.Background(), abuse.CheckInput{Action: action, Subject: s, APIKey: "auth"})
	if err != nil {
		l.t.Fatal(err)
	}
	return d
}

func (l *live) report(action string, s abuse.Subject, outcome, decisionID string) {
	l.t.Helper()
	l.wait(100 * time.Millisecond)
	if _, err := l.g.Report(context.Background(), abuse.ReportInput{Action: action, Subject: s, Outcome: outcome, DecisionID: decisionID, APIKey: "auth"}); err != nil {
		l.t.Fatal(err)
	}
}

// unchanged fails unless the report of action shows no changed decision
// and as many lockouts after as before (want of them).
func unchanged(t *testing.T, rep Report, action string, replayed, lockouts int64) {
	t.Helper()
	a := rep.Actions[action]
	if !maps.Equal(a.Changed, changes()) || a.Lockouts != (Lockouts{Before: lockouts, After: lockouts}) || a.Replayed != replayed || a.DroppedReports != 0 {
		t.Errorf("%s: replayed %d dropped %d changed %v lockouts %+v; want %d replayed, none dropped or changed, lockouts %d before and after",
			action, a.Replayed, a.DroppedReports, a.Changed, a.Lockouts, replayed, lockouts)
	}
}

// TestBacktestActionReplaysSharedState: --action A reports A alone, but
// A's decisions depend on the other actions' events too: a ledger they
// share (otp_verify's failures lock the user out of login) and trusted
// devices (an otp_verify success trusts the device, which then escapes
// the user's login lockout). A replay of login alone through the same
// policy found 2 changed decisions.
func TestBacktestActionReplaysSharedState(t *testing.T) {
	ladder := abuse.Lockout{Ladder: []time.Duration{time.Minute}, Ledger: "auth"}
	pol := abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimIP, Limit: 100, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUser, Limit: 3, Window: 10 * time.Minute}},
			Lockout:  ladder,
		},
		"otp_verify": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimUser, Limit: 100, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUser, Limit: 3, Window: 10 * time.Minute}},
			Lockout:  ladder,
		},
	}}
	l := newLive(t, pol)
	alice := abuse.Subject{User: opt("alice@example.com"), IP: opt("192.0.2.1")}
	attackA := abuse.Subject{User: opt("alice@example.com"), IP: opt("203.0.113.9")}
	bob := abuse.Subject{User: opt("bob@example.com"), IP: opt("192.0.2.2"), Device: opt("d-bob")}
	attackB := abuse.Subject{User: opt("bob@example.com"), IP: opt("203.0.113.9")}

	// otp_verify failures lock alice out of login (ledger auth).
	for range 3 {
		d := l.check("otp_verify", attackA)
		l.report("otp_verify", attackA, abuse.OutcomeFailure, d.ID)
	}
	if d := l.check("login", alice); d.Reason != abuse.ReasonLockedOut {
		t.Fatalf("alice's login: %s, want locked_out by the otp_verify strike", d.Reason)
	}
	// bob's otp_verify success trusts d-bob; login failures then lock bob,
	// but not on d-bob.
	d := l.check("otp_verify", bob)
	l.report("otp_verify", bob, abuse.OutcomeSuccess, d.ID)
	l.wait(2 * time.Minute)
	for range 3 {
		d := l.check("login", attackB)
		l.report("login", attackB, abuse.OutcomeFailure, d.ID)
	}
	if d := l.check("login", bob); !d.Allowed {
		t.Fatalf("bob's login on his trusted device: %s, want allowed", d.Reason)
	}

	for _, action := range []string{"", "login"} {
		rep, err := Run(context.Background(), sliceSource(l.trail), audit.ReplayFilter{Action: action}, Config{Guard: abuse.Config{Policy: pol, TrustTTL: time.Hour}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if action != "" && len(rep.Actions) != 1 {
			t.Errorf("--action %s: report of %d actions, want that one", action, len(rep.Actions))
		}
		// login: alice's check, bob's 3 attacks and reports, his check.
		unchanged(t, rep, "login", 8, 1)
	}
}

// TestBacktestLateReportSettlesReservation: a report that names its
// check's decision_id settles that check's provisional failure
// (reserve_failures) for as long as the reservation lives (the longest
// failure window), also when it comes more than ReportHorizon after the
// check. The replay forgot the check after ReportHorizon, replayed the
// report without a decision_id, and so counted each failure twice and
// never took back a success's provisional failure: a lockout that the
// policy never made, and a check it denied.
func TestBacktestLateReportSettlesReservation(t *testing.T) {
	pol := abuse.Policy{Actions: map[string]abuse.Action{"otp_verify": {
		Limits:          []abuse.Rule{{Dimension: abuse.DimUser, Limit: 100, Window: time.Minute}},
		Failures:        []abuse.Rule{{Dimension: abuse.DimUser, Limit: 3, Window: time.Hour}},
		Lockout:         abuse.Lockout{Ladder: []time.Duration{time.Minute}},
		ReserveFailures: true,
	}}}
	l := newLive(t, pol)
	s := abuse.Subject{User: opt("carol@example.com"), IP: opt("192.0.2.3")}
	// Each code is verified 3 minutes after its check: four successes,
	// then two failures.
	for _, outcome := range []string{"success", "success", "success", "success", "failure", "failure"} {
		d := l.check("otp_verify", s)
		if !d.Allowed {
			t.Fatalf("check: %s, want allowed (no lockout while recording)", d.Reason)
		}
		l.wait(3 * time.Minute)
		l.report("otp_verify", s, outcome, d.ID)
	}
	// The third failure held: this check's provisional one strikes.
	if d := l.check("otp_verify", s); !d.Allowed {
		t.Fatalf("last check: %s, want allowed (its provisional failure strikes)", d.Reason)
	}
	if d := l.check("otp_verify", s); d.Reason != abuse.ReasonLockedOut {
		t.Fatalf("check after the strike: %s, want locked_out", d.Reason)
	}
	rep, err := Run(context.Background(), sliceSource(l.trail), audit.ReplayFilter{}, Config{Guard: abuse.Config{Policy: pol}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, rep, "otp_verify", 14, 1)
}
