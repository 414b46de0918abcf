package abuse

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDefaultPolicyValidates(t *testing.T) {
	p := DefaultPolicy()
	if err := p.Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
	for _, name := range []string{"login", "otp_send", "otp_verify", "signup", "password_reset"} {
		if _, ok := p.Actions[name]; !ok {
			t.Errorf("default policy lacks action %s", name)
		}
	}
	if got := p.Actions["login"].Lockout.Ledger; got != "auth" {
		t.Errorf("login ledger = %q; want auth", got)
	}
	if got := p.Actions["otp_verify"].Lockout.Ledger; got != "auth" {
		t.Errorf("otp_verify ledger = %q; want auth", got)
	}
	if got := p.Actions["signup"].Lockout.Ledger; got != "signup" {
		t.Errorf("signup ledger = %q; want signup (default)", got)
	}
	if got := p.Actions["login"].Limits[0].Name; got != "login/ip" {
		t.Errorf("login limits[0] name = %q; want login/ip", got)
	}
	if got := p.Actions["login"].Failures[0].Name; got != "login/user+ip/failures" {
		t.Errorf("login failures[0] name = %q; want login/user+ip/failures", got)
	}
	if got := p.Actions["otp_send"].OnStoreFailure; got != OnFailureLocal {
		t.Errorf("otp_send on_store_failure = %q; want local", got)
	}
	// Validating twice is harmless (cmd/guard validates, then New does).
	if err := p.Validate(); err != nil {
		t.Fatalf("second Validate() = %v", err)
	}
	// A fresh copy each call.
	q := DefaultPolicy()
	q.Actions["login"].Lockout.Ladder[0] = time.Hour
	if DefaultPolicy().Actions["login"].Lockout.Ladder[0] != time.Minute {
		t.Errorf("DefaultPolicy shares its ladder between calls")
	}
}

func TestValidateRejects(t *testing.T) {
	rule := func(dim string, limit int, window time.Duration) Rule {
		return Rule{Dimension: dim, Limit: limit, Window: window}
	}
	ladder := Lockout{Ladder: []time.Duration{time.Minute}}
	tests := []struct {
		name    string
		action  Action
		section string
		index   int
		field   string
		msg     string
	}{
		{name: "no rules", action: Action{}, msg: "needs at least one rule"},
		{name: "unknown dimension", action: Action{Limits: []Rule{rule(DimIP, 1, time.Second), rule("email", 1, time.Second)}},
			section: "limits", index: 1, field: "dimension", msg: `unknown dimension "email"`},
		{name: "limit zero", action: Action{Limits: []Rule{rule(DimIP, 0, time.Second)}},
			section: "limits", index: 0, field: "limit", msg: "between 1 and"},
		{name: "window below 1ms", action: Action{Limits: []Rule{rule(DimIP, 1, time.Microsecond)}},
			section: "limits", index: 0, field: "window"},
		{name: "window fraction of ms", action: Action{Limits: []Rule{rule(DimIP, 1, 1500*time.Microsecond)}},
			section: "limits", index: 0, field: "window"},
		{name: "window above the maximum", action: Action{Limits: []Rule{rule(DimIP, 1, MaxDuration+time.Millisecond)}},
			section: "limits", index: 0, field: "window", msg: "at most 8784h (366 days)"},
		{name: "ladder step above the maximum", action: Action{Failures: []Rule{rule(DimUser, 5, time.Minute)}, Lockout: Lockout{Ladder: []time.Duration{MaxDuration + time.Millisecond}}},
			section: "lockout", index: 0, field: "ladder", msg: "at most 8784h"},
		{name: "decay above the maximum", action: Action{Failures: []Rule{rule(DimUser, 5, time.Minute)}, Lockout: Lockout{Ladder: ladder.Ladder, Decay: MaxDuration + time.Millisecond}},
			section: "lockout", index: -1, field: "decay", msg: "at most 8784h"},
		{name: "two rules one dimension unnamed", action: Action{Limits: []Rule{rule(DimIP, 10, time.Second), rule(DimIP, 100, time.Hour)}},
			section: "limits", index: 0, field: "name", msg: "each needs its own name"},
		{name: "two rules one dimension same name", action: Action{Limits: []Rule{
			{Name: "a", Dimension: DimIP, Limit: 10, Window: time.Second}, {Name: "a", Dimension: DimIP, Limit: 100, Window: time.Hour}}},
			section: "limits", index: 1, field: "name", msg: "already used"},
		{name: "bad rule name", action: Action{Limits: []Rule{{Name: `a"b`, Dimension: DimIP, Limit: 1, Window: time.Second}}},
			section: "limits", index: 0, field: "name"},
		{name: "empty ladder", action: Action{Failures: []Rule{rule(DimUser, 5, time.Minute)}, Lockout: Lockout{Ladder: []time.Duration{}}},
			section: "lockout", index: -1, field: "ladder", msg: "needs at least one step"},
		{name: "empty ladder without failures", action: Action{Limits: []Rule{rule(DimIP, 3, time.Minute)}, Lockout: Lockout{Ladder: []time.Duration{}}},
			section: "lockout", index: -1, field: "ladder", msg: "needs at least one step"},
		{name: "limit above the maximum", action: Action{Limits: []Rule{rule(DimIP, MaxRuleLimit+1, time.Second)}},
			section: "limits", index: 0, field: "limit", msg: "between 1 and"},
		{name: "bad action name", action: Action{Limits: []Rule{rule(DimIP, 1, time.Second)}}, section: "name", index: -1},
		{name: "failure window", action: Action{Failures: []Rule{rule(DimUser, 5, 0)}, Lockout: ladder},
			section: "failures", index: 0, field: "window"},
		{name: "ladder step zero", action: Action{Failures: []Rule{rule(DimUser, 5, time.Minute)}, Lockout: Lockout{Ladder: []time.Duration{time.Minute, 0}}},
			section: "lockout", index: 1, field: "ladder"},
		{name: "negative decay", action: Action{Failures: []Rule{rule(DimUser, 5, time.Minute)}, Lockout: Lockout{Ladder: ladder.Ladder, Decay: -time.Hour}},
			section: "lockout", index: -1, field: "decay"},
		{name: "count denials without failures", action: Action{Limits: []Rule{rule(DimIP, 1, time.Second)}, Lockout: Lockout{CountDenials: true}},
			section: "lockout", index: -1, field: "count_denials"},
		{name: "bad ledger", action: Action{Limits: []Rule{rule(DimIP, 1, time.Second)}, Lockout: Lockout{Ledger: "a|b"}},
			section: "lockout", index: -1, field: "ledger"},
		{name: "unknown on_store_failure", action: Action{Limits: []Rule{rule(DimIP, 1, time.Second)}, OnStoreFailure: "open"},
			section: "on_store_failure", index: -1, msg: `not "open"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "login"
			if tt.section == "name" {
				name = "log in"
			}
			p := Policy{Actions: map[string]Action{name: tt.action}}
			err := p.Validate()
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("Validate() = %v; want a *PolicyError", err)
			}
			if pe.Action != name || pe.Section != tt.section || (tt.section != "" && pe.Index != tt.index) || pe.Field != tt.field {
				t.Errorf("error at action %q %s[%d].%s; want login %s[%d].%s", pe.Action, pe.Section, pe.Index, pe.Field, tt.section, tt.index, tt.field)
			}
			if !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), `action "`+name+`"`) {
				t.Errorf("error %q does not name the action or lacks %q", err, tt.msg)
			}
		})
	}
}

func TestValidateDefaultsAndLists(t *testing.T) {
	p := Policy{
		Actions: map[string]Action{
			"login": {
				Limits: []Rule{
					{Name: "burst", Dimension: DimIP, Limit: 10, Window: time.Second},
					{Name: "sustained", Dimension: DimIP, Limit: 100, Window: time.Hour},
					{Dimension: DimUser, Limit: 5, Window: time.Minute},
				},
				Failures: []Rule{{Dimension: DimUser, Limit: 5, Window: time.Minute}},
				Lockout:  Lockout{Ladder: []time.Duration{time.Minute}},
			},
		},
		Allow: List{CIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, Users: []string{" Admin@Example.COM "}},
		Deny:  List{Users: []string{"Straße"}, Devices: []string{"Bad-Device"}},
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	a := p.Actions["login"]
	checks := []struct{ name, got, want string }{
		{"limits[2] name", a.Limits[2].Name, "login/user"},
		{"failures[0] name", a.Failures[0].Name, "login/user/failures"},
		{"ledger", a.Lockout.Ledger, "login"},
		{"decay", a.Lockout.Decay.String(), DefaultDecay.String()},
		{"on_store_failure", a.OnStoreFailure, OnFailureLocal},
		{"allow cidr", p.Allow.CIDRs[0].String(), "10.0.0.0/8"},
		{"allow user", p.Allow.Users[0], "admin@example.com"},
		{"deny user", p.Deny.Users[0], "strasse"},
		{"deny device", p.Deny.Devices[0], "Bad-Device"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q; want %q", c.name, c.got, c.want)
		}
	}

	bad := []struct {
		name string
		list List
	}{
		{"empty user", List{Users: []string{"  "}}},
		{"long device", List{Devices: []string{strings.Repeat("d", 129)}}},
		{"invalid cidr", List{CIDRs: []netip.Prefix{{}}}},
	}
	for _, tt := range bad {
		q := Policy{Actions: map[string]Action{"x": {Limits: []Rule{{Dimension: DimIP, Limit: 1, Window: time.Second}}}}, Deny: tt.list}
		var pe *PolicyError
		if err := q.Validate(); !errors.As(err, &pe) || pe.Section != "deny" {
			t.Errorf("%s: Validate() = %v; want a PolicyError in section deny", tt.name, err)
		}
	}
	empty := Policy{}
	if err := empty.Validate(); err == nil {
		t.Errorf("Validate() of an empty policy = nil; want an error")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	p := Policy{
		Actions: map[string]Action{
			"login": {Limits: []Rule{
				{Dimension: "email", Limit: 1, Window: time.Second},
				{Dimension: DimIP, Limit: 0, Window: time.Second},
			}},
			"signup": {},
		},
		Deny: List{Users: []string{"a\x00b"}},
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want four problems")
	}
	if got, want := strings.Count(err.Error(), "\n")+1, 4; got != want {
		t.Errorf("problems = %d, want %d: %v", got, want, err)
	}
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Action != "login" || pe.Field != "dimension" {
		t.Errorf("first problem = %+v, want login's dimension", pe)
	}
}

// TestValidateNamesListEntries: a list problem names its entry as the config
// file writes it, once, without the API's error code.
func TestValidateNamesListEntries(t *testing.T) {
	p := Policy{
		Actions: map[string]Action{"x": {Limits: []Rule{{Dimension: DimIP, Limit: 1, Window: time.Second}}}},
		Allow:   List{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}}, Users: []string{"bob", "   "}},
		Deny:    List{Devices: []string{""}, Users: []string{"a\x00b"}, Countries: []string{"Narnia"}},
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want the list problems")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"lists.allow.cidrs[1]: invalid CIDR",
		"lists.allow.users[1]: user is empty after normalisation",
		"lists.deny.users[0]: user must not contain NUL",
		"lists.deny.devices[0]: must not be empty",
		`lists.deny.countries[0]: "Narnia" is not an ISO 3166 region with a numbering plan (e.g. GB, US; 001 for non-geographic numbers)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestValidateNamesLadderSteps: a ladder step is lockout.ladder[i].
func TestValidateNamesLadderSteps(t *testing.T) {
	p := Policy{Actions: map[string]Action{"login": {
		Failures: []Rule{{Dimension: DimUser, Limit: 5, Window: time.Minute}},
		Lockout:  Lockout{Ladder: []time.Duration{time.Minute, 0}},
	}}}
	err := p.Validate()
	if got, want := fmt.Sprint(err), `action "login": lockout.ladder[1]: ladder step must be at least 1ms, not 0s`; got != want {
		t.Errorf("Validate() = %q, want %q", got, want)
	}
}

// An attempt rule may not share a distinct set with a failure rule that a
// reservation reaches (it would not count the held values); on another
// dimension, or without the reservation, the name is free.
func TestValidateReservedDistinctSetNotShared(t *testing.T) {
	ladder := Lockout{Ladder: []time.Duration{time.Minute}}
	policy := func(reserve bool, attemptDim string) Policy {
		return Policy{Actions: map[string]Action{
			"login": {Limits: []Rule{{Name: "spray", Dimension: attemptDim, Distinct: DimUser, Limit: 10, Window: time.Hour}}},
			"signup": {ReserveFailures: reserve, Lockout: ladder,
				Failures: []Rule{{Name: "spray", Dimension: DimIP, Distinct: DimUser, Limit: 5, Window: time.Hour}}},
		}}
	}
	p := policy(true, DimIP)
	err := p.Validate()
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Action != "login" || pe.Section != "limits" || pe.Index != 0 || pe.Field != "name" ||
		!strings.Contains(err.Error(), `action "signup"`) {
		t.Fatalf("Validate() = %v; want login limits[0].name naming signup", err)
	}
	for _, ok := range []Policy{policy(false, DimIP), policy(true, DimDevice)} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate() = %v; want nil", err)
		}
	}
}

// TestValidateSharedCounterAndBucketState: rules of two actions with one
// name and dimension share their state (configuration.md); a log, a set
// or a counter of one window applies each rule's own limit to it, but a
// counter's sub-windows are aligned on its window and a bucket refills at
// its own rate, so sharing with another window (or, for a bucket, another
// limit) broke both models: the 7s counter's writes reset the 10s
// counter's sub-window, which then admitted 19 attempts against a limit
// of 10.
func TestValidateSharedCounterAndBucketState(t *testing.T) {
	policy := func(alg string, limitB int, windowB time.Duration, dimB string) Policy {
		return Policy{Actions: map[string]Action{
			"a": {Limits: []Rule{{Name: "shared", Dimension: DimIP, Algorithm: alg, Limit: 10, Window: 10 * time.Second}}},
			"b": {Limits: []Rule{{Name: "shared", Dimension: dimB, Algorithm: alg, Limit: limitB, Window: windowB}}},
		}}
	}
	bad := []struct {
		name  string
		p     Policy
		field string
	}{
		{"counter, other window", policy(AlgCounter, 10, 7*time.Second, DimIP), "window"},
		{"bucket, other window", policy(AlgBucket, 10, 7*time.Second, DimIP), "window"},
		{"bucket, other limit", policy(AlgBucket, 2, 10*time.Second, DimIP), "limit"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Action != "b" || pe.Section != "limits" || pe.Index != 0 || pe.Field != tt.field ||
				!strings.Contains(err.Error(), `action "a"`) {
				t.Fatalf("Validate() = %v; want b limits[0].%s naming action a", err, tt.field)
			}
		})
	}
	ok := []struct {
		name string
		p    Policy
	}{
		{"counter, same window, other limit", policy(AlgCounter, 3, 10*time.Second, DimIP)},
		{"bucket, same limit and window", policy(AlgBucket, 10, 10*time.Second, DimIP)},
		{"counter, other dimension", policy(AlgCounter, 10, 7*time.Second, DimDevice)},
		{"log, other window", policy(AlgLog, 3, 7*time.Second, DimIP)},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Errorf("Validate() = %v; want nil", err)
			}
		})
	}
}
