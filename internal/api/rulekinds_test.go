package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

// kindsPolicy has a rule of every kind of contract v1.1: a distinct-count
// rule in limits and in failures, a counter and a bucket.
func kindsPolicy(cfg *abuse.Config) {
	cfg.Policy = abuse.Policy{Actions: map[string]abuse.Action{"login": {
		Limits: []abuse.Rule{
			{Dimension: abuse.DimIP, Distinct: abuse.DimUser, Limit: 2, Window: time.Hour},
			{Dimension: abuse.DimUser, Algorithm: abuse.AlgCounter, Limit: 5, Window: time.Hour},
			{Dimension: abuse.DimDevice, Algorithm: abuse.AlgBucket, Limit: 3, Window: time.Hour},
		},
		Failures: []abuse.Rule{{Dimension: abuse.DimIP, Distinct: abuse.DimUser, Limit: 20, Window: time.Hour}},
		Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute}},
	}}}
}

func TestRuleKindsOnTheWire(t *testing.T) {
	st := newStack(t, kindsPolicy) // its clock starts on the hour
	check := func(user string) (map[string]json.RawMessage, string) {
		t.Helper()
		w := st.do(t, "POST", "/v1/check", "k-check", `{"action":"login","user":"`+user+`","ip":"203.0.113.5","device":"d1"}`)
		if w.Code != 200 {
			t.Fatalf("check: status %d (%s)", w.Code, w.Body)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		return body, w.Header().Get("RateLimit")
	}
	body, rl := check("alice")
	// Most restrictive first: 1 distinct user left, then 2 tokens (full
	// again in 20 minutes), then 4 by the counter (its count weighs until
	// the end of the next hour).
	want := `[{"rule":"login/ip/distinct-user","dimension":"ip","limit":2,"window_ms":3600000,"remaining":1,"reset_ms":3600000,"algorithm":"log","distinct":"user"},` +
		`{"rule":"login/device","dimension":"device","limit":3,"window_ms":3600000,"remaining":2,"reset_ms":1200000,"algorithm":"bucket"},` +
		`{"rule":"login/user","dimension":"user","limit":5,"window_ms":3600000,"remaining":4,"reset_ms":7200000,"algorithm":"counter"}]`
	if got := string(body["limits"]); got != want {
		t.Errorf("limits =\n%s\nwant\n%s", got, want)
	}
	if want := `"login/ip/distinct-user";r=1;t=3600, "login/device";r=2;t=1200, "login/user";r=4;t=7200`; rl != want {
		t.Errorf("RateLimit = %q, want %q", rl, want)
	}

	st.clock.Advance(time.Minute)
	check("bob")
	st.clock.Advance(time.Minute)
	body, _ = check("carol") // a third distinct user from one IP
	if got, want := string(body["decision"]), `"deny"`; got != want {
		t.Errorf("third distinct user: decision %s, want %s", got, want)
	}
	// alice's sighting leaves the window 58 minutes from now.
	if got, want := string(body["retry_after_ms"]), "3480000"; got != want {
		t.Errorf("third distinct user: retry_after_ms %s, want %s", got, want)
	}
	body, _ = check("alice") // already seen: allowed
	if got, want := string(body["decision"]), `"allow"`; got != want {
		t.Errorf("a user already seen: decision %s, want %s", got, want)
	}

	w := st.do(t, "GET", "/v1/policy", "k-admin", "")
	var pol struct {
		Actions map[string]struct {
			Limits, Failures []map[string]any
		} `json:"actions"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &pol); err != nil {
		t.Fatalf("policy: %v (%s)", err, w.Body)
	}
	login := pol.Actions["login"]
	got := []any{
		login.Limits[0]["name"], login.Limits[0]["distinct"], login.Limits[0]["algorithm"],
		login.Limits[1]["algorithm"], login.Limits[2]["algorithm"], login.Limits[1]["distinct"],
		login.Failures[0]["name"], login.Failures[0]["distinct"], login.Failures[0]["algorithm"],
	}
	wantPol := []any{
		"login/ip/distinct-user", "user", "log",
		"counter", "bucket", nil,
		"login/ip/distinct-user/failures", "user", "log",
	}
	for i := range wantPol {
		if got[i] != wantPol[i] {
			t.Errorf("policy field %d: got %v, want %v (%s)", i, got[i], wantPol[i], w.Body)
		}
	}
}

// TestRetryAfterOnlyFromRulesInTheWay: Retry-After is retry_after_ms
// rounded up. The far t of a rule that does not stand in the way of the
// attempt raises nothing: a distinct rule with room (cost does not apply
// to it), a full distinct set that already holds the attempt's user, a
// challenge rule the caller passed.
func TestRetryAfterOnlyFromRulesInTheWay(t *testing.T) {
	st := newStack(t, func(cfg *abuse.Config) {
		cfg.Policy = abuse.Policy{Actions: map[string]abuse.Action{
			"d3": {Limits: []abuse.Rule{
				{Dimension: abuse.DimIP, Distinct: abuse.DimUser, Limit: 2, Window: time.Minute},
				{Dimension: abuse.DimIP, Limit: 3, Window: 3 * time.Second},
			}},
			"d2": {Limits: []abuse.Rule{
				{Dimension: abuse.DimIP, Distinct: abuse.DimUser, Limit: 1, Window: time.Minute},
				{Dimension: abuse.DimUser, Limit: 1, Window: 3 * time.Second},
			}},
			"cp": {Limits: []abuse.Rule{
				{Dimension: abuse.DimIP, Limit: 1, Window: time.Minute, OnLimit: abuse.OnLimitChallenge},
				{Dimension: abuse.DimUser, Limit: 1, Window: 3 * time.Second},
			}},
		}}
	})
	check := func(body string) (decision, retryMs, retryAfter string) {
		t.Helper()
		w := st.do(t, "POST", "/v1/check", "k-check", body)
		if w.Code != 200 {
			t.Fatalf("check %s: status %d (%s)", body, w.Code, w.Body)
		}
		var res map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		return string(res["decision"]), string(res["retry_after_ms"]), w.Header().Get("Retry-After")
	}
	tests := []struct {
		name  string
		first []string
		last  string
	}{
		{"a distinct rule with room, cost 3", []string{`{"action":"d3","ip":"192.0.2.1","user":"v1"}`},
			`{"action":"d3","ip":"192.0.2.1","user":"v1","cost":3}`},
		{"a full distinct set holding the user", []string{`{"action":"d2","ip":"192.0.2.2","user":"u1"}`},
			`{"action":"d2","ip":"192.0.2.2","user":"u1"}`},
		{"a passed challenge rule", []string{`{"action":"cp","ip":"192.0.2.3","user":"p1"}`, `{"action":"cp","ip":"192.0.2.3","user":"p1","challenge_passed":true}`},
			`{"action":"cp","ip":"192.0.2.3","user":"p1","challenge_passed":true}`},
	}
	for _, tt := range tests {
		for _, b := range tt.first {
			check(b)
		}
		st.clock.Advance(10 * time.Millisecond)
		decision, ms, ra := check(tt.last)
		if decision != `"deny"` || ms != "2990" || ra != "3" {
			t.Errorf("%s: decision %s, retry_after_ms %s, Retry-After %q; want deny, 2990, 3 (the 3 s rule's wait)", tt.name, decision, ms, ra)
		}
	}
}
