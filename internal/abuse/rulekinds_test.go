package abuse

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestValidateRuleKinds(t *testing.T) {
	ladder := Lockout{Ladder: []time.Duration{time.Minute}}
	tests := []struct {
		name    string
		action  Action
		section string
		field   string
		msg     string // "" when valid
	}{
		{"distinct ok", Action{Limits: []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 20, Window: time.Hour}}}, "", "", ""},
		{"distinct device on user+ip ok", Action{Limits: []Rule{{Dimension: DimUserIP, Distinct: DimDevice, Limit: 3, Window: time.Hour}}}, "", "", ""},
		{"distinct and plain rule on one dimension need no names", Action{Limits: []Rule{
			{Dimension: DimIP, Limit: 60, Window: time.Minute}, {Dimension: DimIP, Distinct: DimUser, Limit: 20, Window: time.Hour}}}, "", "", ""},
		{"distinct unknown", Action{Limits: []Rule{{Dimension: DimIP, Distinct: "email", Limit: 2, Window: time.Hour}}}, "limits", "distinct", "user or device"},
		{"distinct is the dimension", Action{Limits: []Rule{{Dimension: DimUser, Distinct: DimUser, Limit: 2, Window: time.Hour}}}, "limits", "distinct", "must differ"},
		{"distinct within the dimension", Action{Failures: []Rule{{Dimension: DimUserDevice, Distinct: DimDevice, Limit: 2, Window: time.Hour}}, Lockout: ladder}, "failures", "distinct", "must differ"},
		{"distinct limit too large", Action{Limits: []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: MaxDistinctLimit + 1, Window: time.Hour}}}, "limits", "limit", "between 1 and 10000"},
		{"counter large budget ok", Action{Limits: []Rule{{Dimension: DimIP, Algorithm: AlgCounter, Limit: 50_000_000, Window: 24 * time.Hour}}}, "", "", ""},
		{"log large budget rejected", Action{Limits: []Rule{{Dimension: DimIP, Limit: 50_000_000, Window: 24 * time.Hour}}}, "limits", "limit", "between 1 and"},
		{"unknown algorithm", Action{Limits: []Rule{{Dimension: DimIP, Algorithm: "leaky", Limit: 5, Window: time.Hour}}}, "limits", "algorithm", `unknown algorithm "leaky"`},
		{"counter on a failure rule", Action{Failures: []Rule{{Dimension: DimUser, Algorithm: AlgCounter, Limit: 5, Window: time.Hour}}, Lockout: ladder}, "failures", "algorithm", "always logs"},
		{"log on a failure rule ok", Action{Failures: []Rule{{Dimension: DimUser, Algorithm: AlgLog, Limit: 5, Window: time.Hour}}, Lockout: ladder}, "", "", ""},
		{"bucket on a distinct rule", Action{Limits: []Rule{{Dimension: DimIP, Distinct: DimUser, Algorithm: AlgBucket, Limit: 5, Window: time.Hour}}}, "limits", "algorithm", "does not apply"},
		{"challenge on a counter ok", Action{Limits: []Rule{{Dimension: DimIP, Algorithm: AlgCounter, Limit: 5, Window: time.Hour, OnLimit: OnLimitChallenge}}}, "", "", ""},
		{"challenge on a bucket ok", Action{Limits: []Rule{{Dimension: DimIP, Algorithm: AlgBucket, Limit: 5, Window: time.Hour, OnLimit: OnLimitChallenge}}}, "", "", ""},
		{"challenge on a distinct rule ok", Action{Limits: []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 5, Window: time.Hour, OnLimit: OnLimitChallenge}}}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Policy{Actions: map[string]Action{"login": tt.action}}
			err := p.Validate()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("Validate() = %v, want a *PolicyError", err)
			}
			if got, want := pe.Section+"."+pe.Field, tt.section+"."+tt.field; got != want {
				t.Errorf("error at %s, want %s (%v)", got, want, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q lacks %q", err, tt.msg)
			}
		})
	}
}

func TestRuleKindDefaults(t *testing.T) {
	p := Policy{Actions: map[string]Action{"login": {
		Limits:   []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 20, Window: time.Hour}, {Dimension: DimUser, Algorithm: AlgBucket, Limit: 5, Window: time.Minute}},
		Failures: []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 20, Window: time.Hour}},
		Lockout:  Lockout{Ladder: []time.Duration{time.Minute}},
	}}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	a := p.Actions["login"]
	got := []string{a.Limits[0].Name, a.Limits[0].Algorithm, a.Limits[1].Name, a.Failures[0].Name, a.Failures[0].Algorithm}
	want := []string{"login/ip/distinct-user", AlgLog, "login/user", "login/ip/distinct-user/failures", AlgLog}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("defaults: got %q, want %q", got, want)
	}
}

// sprayPolicy limits login attempts by distinct users per IP and strikes
// an IP that fails for 3 distinct users.
func sprayPolicy() Policy {
	return Policy{Actions: map[string]Action{"login": {
		Limits: []Rule{
			{Dimension: DimIP, Distinct: DimUser, Limit: 4, Window: time.Hour},
			{Dimension: DimIP, Algorithm: AlgCounter, Limit: 100, Window: time.Hour},
		},
		Failures: []Rule{{Dimension: DimIP, Distinct: DimUser, Limit: 3, Window: time.Hour}},
		Lockout:  Lockout{Ladder: []time.Duration{time.Minute, time.Hour}},
	}}}
}

func TestDistinctRulesThroughGuard(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, sprayPolicy())
		check := func(user string) Decision {
			return mustCheck(t, g, CheckInput{Action: "login", Subject: subj(user, "203.0.113.9", ""), Cost: 7})
		}
		d := check("u1")
		wantDecision(t, d, true, ReasonOK)
		var set *LimitState
		for i := range d.Limits {
			if d.Limits[i].Distinct == DimUser {
				set = &d.Limits[i]
			}
		}
		if set == nil || set.Rule != "login/ip/distinct-user" || set.Remaining != 3 || set.Algorithm != AlgLog {
			t.Fatalf("limits %+v: want login/ip/distinct-user with 3 distinct users left", d.Limits)
		}
		// Without a user the distinct rule is not evaluated.
		d = mustCheck(t, g, CheckInput{Action: "login", Subject: subj("", "203.0.113.9", "")})
		if len(d.Limits) != 1 || d.Limits[0].Algorithm != AlgCounter {
			t.Errorf("check without user: limits %+v, want only the counter rule", d.Limits)
		}
		// Spraying: failures for 3 distinct users strike the IP.
		for i, user := range []string{"u1", "u2", "u1", "u3"} {
			out := mustReport(t, g, failure("login", user, "203.0.113.9", ""))
			if struck := out.Lockout != nil; struck != (i == 3) {
				t.Fatalf("failure %d (%s): lockout %+v, want one only on the third distinct user", i, user, out.Lockout)
			}
		}
		d = check("u1")
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil || d.Lockout.Dimension != DimIP {
			t.Errorf("after spraying: lockout %+v, want the IP locked", d.Lockout)
		}
		// Another IP is untouched.
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("u1", "198.51.100.1", "")}), true, ReasonOK)
	})
}

func TestDefaultPolicyStrikesSprayingIP(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, DefaultPolicy())
		for i := range 20 {
			out := mustReport(t, g, failure("login", fmt.Sprintf("victim%d@example.com", i), "198.51.100.7", ""))
			if struck := out.Lockout != nil; struck != (i == 19) {
				t.Fatalf("failure %d: lockout %+v, want the IP struck at the 20th distinct user", i, out.Lockout)
			}
		}
		d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("someone@example.com", "198.51.100.7", "")})
		wantDecision(t, d, false, ReasonLockedOut)
	})
}

// TestCounterAndBucketResetOnDenial: a counter or bucket that denies
// answers as its reset when it admits the attempt (its retry), so that
// Retry-After, retry_after_ms rounded up, is never earlier than its t; an
// admitting one answers its own reset (counts forgotten, bucket full).
func TestCounterAndBucketResetOnDenial(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, Policy{Actions: map[string]Action{
			"c": {Limits: []Rule{{Dimension: DimIP, Algorithm: AlgCounter, Limit: 2, Window: 10 * time.Second}}},
			"b": {Limits: []Rule{{Dimension: DimIP, Algorithm: AlgBucket, Limit: 2, Window: 10 * time.Second}}},
		}})
		for _, action := range []string{"c", "b"} {
			in := CheckInput{Action: action, Subject: subj("", "198.51.100.77", "")}
			first := mustCheck(t, g, in)
			mustCheck(t, g, in)
			d := mustCheck(t, g, in)
			wantDecision(t, d, false, ReasonRateLimited)
			if l := d.Limits[0]; l.Reset != d.RetryAfter || d.RetryAfter <= 0 {
				t.Errorf("%s denial: reset %v, retry after %v; want the rule's reset to be its retry", action, l.Reset, d.RetryAfter)
			}
			if l := first.Limits[0]; l.Reset <= 0 {
				t.Errorf("%s allowed: reset %v; want its own (positive) reset", action, l.Reset)
			}
		}
	})
}
