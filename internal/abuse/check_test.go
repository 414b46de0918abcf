package abuse

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

func loginPolicy() Policy {
	return Policy{Actions: map[string]Action{
		"login": {
			Limits: []Rule{
				{Dimension: DimIP, Limit: 3, Window: time.Minute},
				{Dimension: DimUser, Limit: 2, Window: 10 * time.Second},
				{Dimension: DimDevice, Limit: 5, Window: time.Minute},
			},
		},
	}}
}

func TestCheckRateLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, loginPolicy())
		in := CheckInput{Action: "login", Subject: subj("Alice@Example.com", "203.0.113.7", "")}

		d := mustCheck(t, g, in)
		wantDecision(t, d, true, ReasonOK)
		if d.RetryAfter != 0 || d.Lockout != nil || d.Degraded {
			t.Errorf("allowed decision: retry %v lockout %v degraded %v; want 0, nil, false", d.RetryAfter, d.Lockout, d.Degraded)
		}
		// Most restrictive first: user has 1 left, ip 2; the device rule
		// is not evaluated (no device).
		if len(d.Limits) != 2 || d.Limits[0].Rule != "login/user" || d.Limits[0].Remaining != 1 ||
			d.Limits[1].Rule != "login/ip" || d.Limits[1].Remaining != 2 {
			t.Fatalf("limits = %+v; want login/user remaining 1, login/ip remaining 2", d.Limits)
		}
		if l := d.Limits[0]; l.Dimension != DimUser || l.Limit != 2 || l.Window != 10*time.Second || l.Reset <= 0 || l.Reset > 10*time.Second {
			t.Errorf("user limit = %+v; want dimension user, limit 2, window 10s, reset in (0, 10s]", l)
		}
		if len(d.ID) != 26 {
			t.Errorf("decision id %q is not a ULID", d.ID)
		}

		b.advance(2 * time.Second)
		d = mustCheck(t, g, in)
		wantDecision(t, d, true, ReasonOK)
		d = mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonRateLimited)
		if b.clock != nil && d.RetryAfter != 8*time.Second {
			t.Errorf("retry after = %v; want exactly 8s (oldest entry + 10s - now)", d.RetryAfter)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second {
			t.Errorf("retry after = %v; want in (0, 10s]", d.RetryAfter)
		}
		// Denied attempts are not logged: the ip rule still has one left.
		if d.Limits[0].Rule != "login/user" || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 1 {
			t.Errorf("limits after denial = %+v; want user 0 then ip 1", d.Limits)
		}
		// A different user from the same address uses the ip's last slot.
		d = mustCheck(t, g, CheckInput{Action: "login", Subject: subj("bob", "203.0.113.7", "")})
		wantDecision(t, d, true, ReasonOK)
		d = mustCheck(t, g, CheckInput{Action: "login", Subject: subj("carol", "203.0.113.7", "")})
		wantDecision(t, d, false, ReasonRateLimited)
		if d.Limits[0].Rule != "login/ip" {
			t.Errorf("most restrictive rule = %s; want login/ip", d.Limits[0].Rule)
		}
		if b.clock != nil {
			b.advance(8 * time.Second)
			d = mustCheck(t, g, in)
			wantDecision(t, d, false, ReasonRateLimited) // user slot free, ip still full
			if d.RetryAfter != 50*time.Second {
				t.Errorf("retry after = %v; want 50s (ip window of the first attempt)", d.RetryAfter)
			}
		}
	})
}

func TestCheckInputErrors(t *testing.T) {
	b := memoryBackend(t)
	g, rec := newGuard(t, b, loginPolicy())
	tests := []struct {
		name  string
		in    CheckInput
		code  string
		field string
	}{
		{"unknown action", CheckInput{Action: "logon", Subject: subj("a", "", "")}, CodeUnknownAction, "action"},
		{"no identifiers", CheckInput{Action: "login"}, CodeInvalidRequest, ""},
		{"empty user", CheckInput{Action: "login", Subject: subj(" ", "", "")}, CodeInvalidRequest, "user"},
		{"bad ip", CheckInput{Action: "login", Subject: subj("", "1.2.3", "")}, CodeInvalidRequest, "ip"},
		{"zone", CheckInput{Action: "login", Subject: subj("", "fe80::1%en0", "")}, CodeInvalidRequest, "ip"},
		{"empty device", CheckInput{Action: "login", Subject: Subject{Device: sp("")}}, CodeInvalidRequest, "device"},
		{"negative cost", CheckInput{Action: "login", Subject: subj("a", "", ""), Cost: -1}, CodeInvalidRequest, "cost"},
		// The action, then the identifiers, then the cost.
		{"unknown action and negative cost", CheckInput{Action: "logon", Subject: subj("a", "", ""), Cost: -1}, CodeUnknownAction, "action"},
		{"empty user and negative cost", CheckInput{Action: "login", Subject: subj(" ", "", ""), Cost: -1}, CodeInvalidRequest, "user"},
		// The smallest limit is the user rule's 2, even for a request
		// without a user (evaluated or not).
		{"cost above smallest limit", CheckInput{Action: "login", Subject: subj("", "203.0.113.7", ""), Cost: 3}, CodeInvalidRequest, "cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := g.Check(context.Background(), tt.in)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Code != tt.code || ie.Field != tt.field {
				t.Fatalf("Check error = %v; want InputError %s field %q", err, tt.code, tt.field)
			}
		})
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("%d audit events for rejected input; want 0", n)
	}
}

func TestCheckCost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"otp_send": {Limits: []Rule{{Dimension: DimUser, Limit: 5, Window: time.Minute}}}}}
		g, _ := newGuard(t, b, pol)
		in := CheckInput{Action: "otp_send", Subject: subj("alice", "", ""), Cost: 2}
		for i, want := range []int{3, 1} {
			d := mustCheck(t, g, in)
			wantDecision(t, d, true, ReasonOK)
			if d.Limits[0].Remaining != want {
				t.Errorf("check %d: remaining %d; want %d", i, d.Limits[0].Remaining, want)
			}
			b.advance(10 * time.Second)
		}
		// 4 entries at 0s,0s,10s,10s; cost 2 fits once both 0s entries
		// left, at 60s; now is 20s.
		d := mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonRateLimited)
		if b.clock != nil && d.RetryAfter != 40*time.Second {
			t.Errorf("retry after = %v; want 40s", d.RetryAfter)
		}
		// Cost 1 still fits.
		d = mustCheck(t, g, CheckInput{Action: "otp_send", Subject: subj("alice", "", "")})
		wantDecision(t, d, true, ReasonOK)
		_, err := g.Check(context.Background(), CheckInput{Action: "otp_send", Subject: subj("alice", "", ""), Cost: 6})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "cost" {
			t.Errorf("cost 6 of limit 5: error %v; want InputError field cost", err)
		}
	})
}

// TestCheckCostWithoutCountedRules: cost does not apply to distinct rules,
// so an action whose only limits are distinct rules takes any cost up to
// the largest limit a rule may have, and a distinct rule counts the value
// once whatever the cost.
func TestCheckCostWithoutCountedRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"spray": {Limits: []Rule{
			{Dimension: DimIP, Distinct: DimUser, Limit: 2, Window: time.Hour}}}}}
		g, _ := newGuard(t, b, pol)
		d := mustCheck(t, g, CheckInput{Action: "spray", Subject: subj("alice", "203.0.113.9", ""), Cost: 5})
		wantDecision(t, d, true, ReasonOK)
		if d.Limits[0].Remaining != 1 {
			t.Errorf("remaining %d after one user at cost 5; want 1", d.Limits[0].Remaining)
		}
		_, err := g.Check(context.Background(), CheckInput{Action: "spray", Subject: subj("bob", "203.0.113.9", ""), Cost: MaxRuleLimit + 1})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "cost" {
			t.Errorf("cost above the largest limit: error %v; want InputError field cost", err)
		}
	})
}

func TestCheckMissingDimensions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{
			"login":  loginPolicy().Actions["login"],
			"signup": {Limits: []Rule{{Dimension: DimIP, Limit: 1, Window: time.Minute}}},
		}}
		g, _ := newGuard(t, b, pol)
		d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("", "", "dev-1")})
		wantDecision(t, d, true, ReasonOK)
		if len(d.Limits) != 1 || d.Limits[0].Rule != "login/device" {
			t.Errorf("limits = %+v; want only login/device", d.Limits)
		}
		d = mustCheck(t, g, CheckInput{Action: "signup", Subject: subj("alice", "", "dev-1")})
		wantDecision(t, d, true, ReasonOK)
		if d.Limits == nil || len(d.Limits) != 0 {
			t.Errorf("limits = %#v; want empty, not nil", d.Limits)
		}
	})
}

// refusingStore fails the test if Guard touches it.
type refusingStore struct {
	limits.Store
	t *testing.T
}

func (s refusingStore) Check(context.Context, *limits.CheckRequest) (limits.CheckResult, error) {
	s.t.Errorf("the store was asked although a list decided")
	return limits.CheckResult{}, errors.New("refused")
}

func TestLists(t *testing.T) {
	pol := loginPolicy()
	pol.Allow = List{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Users: []string{"Trusted@Example.com"}}
	pol.Deny = List{
		CIDRs:   []netip.Prefix{netip.MustParsePrefix("::ffff:198.51.100.0/120"), netip.MustParsePrefix("2001:db8:bad::/48")},
		Users:   []string{"MALLORY@example.com", "Straße"},
		Devices: []string{"Evil-1"},
	}
	clock := newFakeClock()
	b := &backend{name: "refusing", clock: clock, prefix: DefaultKeyPrefix}
	b.store = refusingStore{t: t}
	g, rec := newGuard(t, b, pol)
	tests := []struct {
		name    string
		subject Subject
		allowed bool
		reason  string
	}{
		{"deny cidr ipv4", subj("", "198.51.100.9", ""), false, ReasonDenylisted},
		{"deny cidr via ipv4-mapped request", subj("", "::ffff:198.51.100.9", ""), false, ReasonDenylisted},
		{"deny ipv6 cidr", subj("", "2001:db8:bad:1::5", ""), false, ReasonDenylisted},
		{"deny user normalised", subj(" mallory@EXAMPLE.com", "", ""), false, ReasonDenylisted},
		{"deny user sharp s", subj("STRASSE", "", ""), false, ReasonDenylisted},
		{"deny device exact case", subj("", "", "Evil-1"), false, ReasonDenylisted},
		{"allow cidr", subj("alice", "10.1.2.3", ""), true, ReasonAllowlisted},
		{"allow cidr ipv4-mapped", subj("", "::ffff:10.1.2.3", ""), true, ReasonAllowlisted},
		{"allow user", subj("ＴＲＵＳＴＥＤ@example.com", "", ""), true, ReasonAllowlisted},
		{"deny wins over allow", subj("trusted@example.com", "198.51.100.1", ""), false, ReasonDenylisted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustCheck(t, g, CheckInput{Action: "login", Subject: tt.subject})
			wantDecision(t, d, tt.allowed, tt.reason)
			if d.RetryAfter != 0 || d.Limits == nil || len(d.Limits) != 0 {
				t.Errorf("retry %v limits %#v; want 0 and empty", d.RetryAfter, d.Limits)
			}
			e := rec.last(t)
			if e.ID != d.ID || e.Reason != tt.reason {
				t.Errorf("audit event %+v; want id %s reason %s", e, d.ID, tt.reason)
			}
		})
	}
	// A device on the deny list is case-sensitive.
	b.store = memoryBackend(t).store
	g2, _ := newGuard(t, b, pol)
	d := mustCheck(t, g2, CheckInput{Action: "login", Subject: subj("", "", "evil-1")})
	wantDecision(t, d, true, ReasonOK)
}

func TestShadow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{
			"login": {Limits: []Rule{
				{Dimension: DimIP, Limit: 3, Window: time.Minute},
				{Dimension: DimUser, Limit: 1, Window: time.Minute, Shadow: true},
			}},
			"signup": {Limits: []Rule{{Dimension: DimIP, Limit: 1, Window: time.Minute}}, Shadow: true},
		}}
		g, _ := newGuard(t, b, pol)
		in := CheckInput{Action: "login", Subject: subj("alice", "203.0.113.7", "")}
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		d := mustCheck(t, g, in)
		wantDecision(t, d, true, ReasonShadow)
		if d.RetryAfter != 0 {
			t.Errorf("shadow retry after = %v; want 0", d.RetryAfter)
		}
		// The enforced ip rule logged both attempts; the shadow user rule
		// did not log the one it would have denied.
		for _, l := range d.Limits {
			want := map[string]int{"login/ip": 1, "login/user": 0}[l.Rule]
			if l.Remaining != want {
				t.Errorf("%s remaining %d; want %d", l.Rule, l.Remaining, want)
			}
			if l.Shadow != (l.Rule == "login/user") {
				t.Errorf("%s shadow = %v", l.Rule, l.Shadow)
			}
		}
		wantDecision(t, mustCheck(t, g, in), true, ReasonShadow)
		// The ip rule is now full: a real denial.
		wantDecision(t, mustCheck(t, g, in), false, ReasonRateLimited)

		sin := CheckInput{Action: "signup", Subject: subj("", "203.0.113.8", "")}
		wantDecision(t, mustCheck(t, g, sin), true, ReasonOK)
		d = mustCheck(t, g, sin)
		wantDecision(t, d, true, ReasonShadow)
		if !d.Limits[0].Shadow {
			t.Errorf("rule of a shadow action not marked shadow: %+v", d.Limits[0])
		}
	})
}

func TestDryRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, loginPolicy())
		in := CheckInput{Action: "login", Subject: subj("alice", "", ""), DryRun: true}
		for range 3 {
			d := mustCheck(t, g, in)
			wantDecision(t, d, true, ReasonOK)
			if !d.DryRun || d.Limits[0].Remaining != 1 {
				t.Fatalf("dry run: DryRun %v remaining %d; want true and 1 (as if recorded)", d.DryRun, d.Limits[0].Remaining)
			}
		}
		if e := rec.last(t); e.DryRun == nil || !*e.DryRun {
			t.Errorf("audit dry_run = %v; want true", e.DryRun)
		}
		in.DryRun = false
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		wantDecision(t, mustCheck(t, g, in), true, ReasonOK)
		in.DryRun = true
		d := mustCheck(t, g, in)
		wantDecision(t, d, false, ReasonRateLimited)
		if d.RetryAfter <= 0 {
			t.Errorf("dry-run denial retry after = %v; want > 0", d.RetryAfter)
		}
	})
}

func TestConcurrentChecksNeverExceedTheLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"login": {Limits: []Rule{
			{Dimension: DimUser, Limit: 10, Window: time.Minute},
			{Dimension: DimIP, Limit: 1000, Window: time.Minute},
		}}}}
		g, _ := newGuard(t, b, pol)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for w := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					d, err := g.Check(context.Background(), CheckInput{Action: "login", Subject: subj("ALICE", "203.0.113."+strconv.Itoa(w), "")})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 10 {
			t.Errorf("%d of 100 concurrent attempts allowed; want exactly 10", got)
		}
	})
}

// TestSortLimits pins the order of Decision.Limits, which the API relays in
// the body and both RateLimit headers: least remaining first, then latest
// reset, ties in config order.
func TestSortLimits(t *testing.T) {
	tests := []struct {
		name string
		in   []LimitState
		want []string
	}{
		{"least remaining first", []LimitState{
			{Rule: "user", Remaining: 29, Reset: 900 * time.Second},
			{Rule: "ip", Remaining: 0, Reset: 42 * time.Second},
		}, []string{"ip", "user"}},
		{"equal remaining: latest reset first", []LimitState{
			{Rule: "a", Remaining: 3, Reset: 10 * time.Second},
			{Rule: "b", Remaining: 3, Reset: 20 * time.Second},
		}, []string{"b", "a"}},
		{"full ties keep config order", []LimitState{
			{Rule: "first", Remaining: 5, Reset: time.Second},
			{Rule: "second", Remaining: 5, Reset: time.Second},
		}, []string{"first", "second"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sortLimits(tt.in)
			var got []string
			for _, l := range tt.in {
				got = append(got, l.Rule)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("order = %v; want %v", got, tt.want)
			}
		})
	}
}
