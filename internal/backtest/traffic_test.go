package backtest

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// A day of synthetic traffic, recorded by a real Guard running the
// baseline policy (the "before" of every backtest):
//
//   - 100 users log in once an hour from their own addresses and succeed;
//     user 7 is the victim.
//   - 03:00-03:10 credential stuffing: attacker A (203.0.113.66) tries one
//     new account a second, 600 in all, each failing.
//   - 05:00 brute force: attacker B (198.51.100.99, device d-attacker)
//     tries the victim's password every 10 s, 100 times, each failing.
//   - 12:00 ten signups from one address.
//
// Callers report only attempts they were allowed to make, naming the
// check's decision_id, as the SDKs do.
var day = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const (
	victim    = "user7@example.com"
	attackerA = "203.0.113.66"
	attackerB = "198.51.100.99"
)

// baseline is the recorded policy: loose ip limits, and a failure limit
// per user and address that strikes the brute force once (1 minute).
func baseline() abuse.Policy {
	return abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimIP, Limit: 1000, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUserIP, Limit: 50, Window: time.Hour}},
			Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute}},
		},
		"signup": {Limits: []abuse.Rule{{Dimension: abuse.DimIP, Limit: 100, Window: time.Hour}}},
	}}
}

// attempt is one scripted login or signup.
type attempt struct {
	at               time.Time
	action           string
	user, ip, device string
	outcome          string // reported when allowed
	reportAfter      time.Duration
}

func script() []attempt {
	var s []attempt
	for h := range 24 {
		for u := 1; u <= 100; u++ {
			at := day.Add(time.Duration(h)*time.Hour + time.Duration(u%60)*time.Minute + time.Duration(u/60)*30*time.Second)
			s = append(s, attempt{at: at, action: "login", user: fmt.Sprintf("user%d@example.com", u),
				ip: fmt.Sprintf("10.1.0.%d", u), outcome: "success", reportAfter: time.Second})
		}
	}
	for k := range 600 {
		s = append(s, attempt{at: day.Add(3*time.Hour + time.Duration(k)*time.Second), action: "login",
			user: fmt.Sprintf("stuffed%d@example.com", k), ip: attackerA, outcome: "failure", reportAfter: 100 * time.Millisecond})
	}
	for i := range 100 {
		s = append(s, attempt{at: day.Add(5*time.Hour + time.Duration(i)*10*time.Second), action: "login",
			user: victim, ip: attackerB, device: "d-attacker", outcome: "failure", reportAfter: time.Second})
	}
	for i := range 10 {
		s = append(s, attempt{at: day.Add(12*time.Hour + time.Duration(i)*time.Second), action: "signup", ip: "192.0.2.10"})
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].at.Before(s[j].at) })
	return s
}

// events is a recorder keeping what a Guard records.
type events []audit.Event

func (e *events) Record(ev audit.Event) { *e = append(*e, ev) }

// record runs the script (with pseudonymized audit events, if asked) through a Guard with the baseline policy on a
// simulated clock and returns the audit trail it writes.
func record(t testing.TB, pseudonymize bool) []audit.Event {
	t.Helper()
	var clock atomic.Int64
	now := func() time.Time { return time.UnixMilli(clock.Load()).UTC() }
	store := limits.NewMemory(limits.MemoryConfig{Now: now})
	defer store.Close()
	var trail events
	g, err := abuse.New(nil, abuse.Config{Policy: baseline(), KeySecret: []byte("recorded-secret"), Now: now, Pseudonymize: pseudonymize}, store, &trail, nil)
	if err != nil {
		t.Fatal(err)
	}
	type pending struct {
		at time.Time
		in abuse.ReportInput
	}
	var reports []pending
	flush := func(until time.Time) {
		for len(reports) > 0 && !reports[0].at.After(until) {
			clock.Store(reports[0].at.UnixMilli())
			if _, err := g.Report(context.Background(), reports[0].in); err != nil {
				t.Fatal(err)
			}
			reports = reports[1:]
		}
	}
	ctx := context.Background()
	for _, a := range script() {
		flush(a.at)
		clock.Store(a.at.UnixMilli())
		subj := abuse.Subject{User: opt(a.user), IP: opt(a.ip), Device: opt(a.device)}
		d, err := g.Check(ctx, abuse.CheckInput{Action: a.action, Subject: subj, APIKey: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed && a.outcome != "" {
			reports = append(reports, pending{a.at.Add(a.reportAfter),
				abuse.ReportInput{Action: a.action, Subject: subj, Outcome: a.outcome, DecisionID: d.ID, APIKey: "auth"}})
			sort.SliceStable(reports, func(i, j int) bool { return reports[i].at.Before(reports[j].at) })
		}
	}
	flush(day.Add(48 * time.Hour))
	return trail
}

// tighter limits each address to 10 logins a minute and locks a user for
// an hour after 5 failures: it stops most of the stuffing, locks the
// victim out after the brute force's 5th failure (also from the victim's
// own login at 05:07), and drops the reports of the attempts it denies.
func tighter() abuse.Policy {
	return abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimIP, Limit: 10, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUser, Limit: 5, Window: time.Hour}},
			Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Hour}},
		},
		"signup": {Limits: []abuse.Rule{{Dimension: abuse.DimIP, Limit: 100, Window: time.Hour}}},
	}}
}

// looser lets a user and address fail 100 times: the brute force never
// strikes, so the 6 checks the baseline's lockout denied are allowed.
func looser() abuse.Policy {
	return abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimIP, Limit: 1000, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUserIP, Limit: 100, Window: time.Hour}},
			Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute}},
		},
		"signup": {Limits: []abuse.Rule{{Dimension: abuse.DimIP, Limit: 100, Window: time.Hour}}},
	}}
}
