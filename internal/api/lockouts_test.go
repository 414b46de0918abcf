package api

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

func TestLockoutsList(t *testing.T) {
	var got abuse.LockoutFilter
	g := &fakeGuard{lockouts: func(_ context.Context, f abuse.LockoutFilter) (abuse.LockoutPage, error) {
		got = f
		if f.Subject.IP != nil {
			if _, err := abuse.ParseIP(*f.Subject.IP); err != nil {
				return abuse.LockoutPage{}, err
			}
		}
		return abuse.LockoutPage{Lockouts: []abuse.ActiveLockout{
			{Ledger: "auth", Dimension: "user+ip", User: ptr("alice@example.com"), IP: ptr("203.0.113.7"),
				Level: 2, Since: t0, Until: t0.Add(5 * time.Minute)},
			{Ledger: "auth", Dimension: "device", Device: ptr("d-1"), Level: 1, Since: t0, Until: t0.Add(time.Minute + 5*time.Millisecond)},
		}, Next: "next-page"}, nil
	}}
	h := newTestHandler(t, testConfig(), Deps{Guard: g})
	w := call(h, "GET", "/v1/lockouts?user=Alice@Example.com&dimension=user%2Bip&ledger=auth", keyAdmin, "")
	if w.Code != 200 {
		t.Fatalf("status = %d: %s", w.Code, w.Body)
	}
	want := `{"lockouts":[
		{"ledger":"auth","dimension":"user+ip","user":"alice@example.com","ip":"203.0.113.7","level":2,
		 "since":"2026-03-01T12:00:00.000Z","until":"2026-03-01T12:05:00.000Z"},
		{"ledger":"auth","dimension":"device","device":"d-1","level":1,
		 "since":"2026-03-01T12:00:00.000Z","until":"2026-03-01T12:01:00.005Z"}],
		"next_cursor":"next-page"}`
	if compact(t, w.Body.String()) != compact(t, want) {
		t.Errorf("body =\n%s\nwant\n%s", compact(t, w.Body.String()), compact(t, want))
	}
	if got.Subject.User == nil || *got.Subject.User != "Alice@Example.com" || got.Subject.IP != nil ||
		got.Dimension != "user+ip" || got.Ledger != "auth" {
		t.Errorf("filter = %+v", got)
	}
	// A "+" typed unencoded arrives as a space: still user+ip.
	if w := call(h, "GET", "/v1/lockouts?dimension=user+ip", keyAdmin, ""); w.Code != 200 || got.Dimension != "user+ip" {
		t.Errorf("dimension=user+ip unencoded: %d %s, filter %+v", w.Code, w.Body, got)
	}

	for _, tt := range []struct{ name, query, field string }{
		{"bad dimension", "dimension=planet", "dimension"},
		{"bad ip", "ip=1.2.3", "ip"},
		{"unknown param", "since=x", "since"},
		{"malformed percent-encoding", "ip=%zz", "ip"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, "GET", "/v1/lockouts?"+tt.query, keyAdmin, "")
			if w.Code != 400 {
				t.Fatalf("status = %d, want 400", w.Code)
			}
			if _, field := errorOf(t, w); field != tt.field {
				t.Errorf("field = %q, want %q", field, tt.field)
			}
		})
	}

	// Empty values do not filter (as in the audit API); a value that
	// normalises to nothing is still bad input.
	for _, tt := range []struct {
		name, query string
		wantStatus  int
		wantFilter  abuse.LockoutFilter
	}{
		{"empty user", "user=", 200, abuse.LockoutFilter{}},
		{"every filter empty", "user=&ip=&device=&dimension=&ledger=", 200, abuse.LockoutFilter{}},
		{"empty ip beside a user", "user=bob&ip=", 200, abuse.LockoutFilter{Subject: abuse.Subject{User: ptr("bob")}}},
		{"blank user", "user=%20", 400, abuse.LockoutFilter{Subject: abuse.Subject{User: ptr(" ")}}},
		{"limit and cursor", "limit=5&cursor=abc", 200, abuse.LockoutFilter{Limit: 5, Cursor: "abc"}},
		{"limit 0", "limit=0", 400, abuse.LockoutFilter{Dimension: "unset"}},
		{"limit 1001", "limit=1001", 400, abuse.LockoutFilter{Dimension: "unset"}},
		{"limit not a number", "limit=ten", 400, abuse.LockoutFilter{Dimension: "unset"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got = abuse.LockoutFilter{Dimension: "unset"}
			g := &fakeGuard{lockouts: func(_ context.Context, f abuse.LockoutFilter) (abuse.LockoutPage, error) {
				got = f
				if f.Subject.User != nil {
					if _, err := abuse.NormalizeUser(*f.Subject.User); err != nil {
						return abuse.LockoutPage{}, err
					}
				}
				return abuse.LockoutPage{}, nil
			}}
			w := call(newTestHandler(t, testConfig(), Deps{Guard: g}), "GET", "/v1/lockouts?"+tt.query, keyAdmin, "")
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", w.Code, tt.wantStatus, w.Body)
			}
			if !sameFilter(got, tt.wantFilter) {
				t.Errorf("filter = %+v, want %+v", got, tt.wantFilter)
			}
		})
	}

	empty := newTestHandler(t, testConfig(), Deps{})
	if w := call(empty, "GET", "/v1/lockouts", keyAdmin, ""); compact(t, w.Body.String()) != `{"lockouts":[],"next_cursor":null}` {
		t.Errorf("no lockouts = %s, want {\"lockouts\":[]}", w.Body)
	}
}

// sameFilter compares lockout filters by value (the identifiers are
// pointers).
func sameFilter(a, b abuse.LockoutFilter) bool {
	eq := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return a.Dimension == b.Dimension && a.Ledger == b.Ledger &&
		eq(a.Subject.User, b.Subject.User) && eq(a.Subject.IP, b.Subject.IP) && eq(a.Subject.Device, b.Subject.Device)
}

func TestUnlock(t *testing.T) {
	var got abuse.UnlockInput
	g := &fakeGuard{unlock: func(_ context.Context, in abuse.UnlockInput) error {
		got = in
		if in.Subject.User != nil && *in.Subject.User == "alice" {
			return nil
		}
		return abuse.ErrNotFound
	}}
	h := newTestHandler(t, testConfig(), Deps{Guard: g})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantField  string
	}{
		{"unlocked", `{"dimension":"user","user":"alice","reason":"support ticket 7"}`, 200, "", ""},
		{"nothing locked", `{"dimension":"user","user":"bob"}`, 404, "not_found", ""},
		{"missing dimension", `{"user":"alice"}`, 400, "invalid_request", "dimension"},
		{"bad dimension", `{"dimension":"galaxy","user":"alice"}`, 400, "invalid_request", "dimension"},
		{"unknown field", `{"dimension":"user","user":"alice","force":true}`, 400, "invalid_request", "force"},
		{"empty ledger", `{"dimension":"user","user":"alice","ledger":""}`, 400, "invalid_request", "ledger"},
		{"lone surrogate in reason", `{"dimension":"user","user":"alice","reason":"\ud800"}`, 400, "invalid_request", "reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, "DELETE", "/v1/lockouts", keyAdmin, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantStatus == 200 {
				if compact(t, w.Body.String()) != `{"unlocked":true}` {
					t.Errorf("body = %s", w.Body)
				}
				if got.Dimension != "user" || got.Reason != "support ticket 7" || got.APIKey != "ops" || got.Ledger != "" {
					t.Errorf("unlock input = %+v", got)
				}
				return
			}
			if code, field := errorOf(t, w); code != tt.wantCode || field != tt.wantField {
				t.Errorf("error = %s/%q, want %s/%q", code, field, tt.wantCode, tt.wantField)
			}
		})
	}
	t.Run("needs a JSON body", func(t *testing.T) {
		w := call(h, "DELETE", "/v1/lockouts", keyAdmin, `dimension=user`, "Content-Type", "text/plain")
		if w.Code != 415 {
			t.Errorf("status = %d, want 415", w.Code)
		}
	})
}

func TestPolicy(t *testing.T) {
	p := abuse.Policy{
		Actions: map[string]abuse.Action{
			"login": {
				Limits: []abuse.Rule{{Name: "login/ip", Dimension: "ip", Limit: 60, Window: time.Minute}},
				Failures: []abuse.Rule{{Name: "login/user+ip/failures", Dimension: "user+ip", Limit: 10,
					Window: 15 * time.Minute, Shadow: true}},
				Lockout: abuse.Lockout{Ladder: []time.Duration{time.Minute, 5 * time.Minute}, Decay: 24 * time.Hour,
					Ledger: "auth", CountDenials: true},
				OnStoreFailure: "local",
			},
			// No failures, no ladder: ladder_ms is [], not null.
			"signup": {
				Limits:         []abuse.Rule{{Name: "signup/ip", Dimension: "ip", Limit: 10, Window: time.Hour}},
				Lockout:        abuse.Lockout{Decay: 72 * time.Hour, Ledger: "signup"},
				OnStoreFailure: "local",
			},
		},
		Allow: abuse.List{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		Deny:  abuse.List{Users: []string{"mallory"}},
	}
	h := newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{policy: p}})
	w := call(h, "GET", "/v1/policy", keyAdmin, "")
	want := `{"actions":{"login":{
		"limits":[{"name":"login/ip","dimension":"ip","limit":60,"window_ms":60000,"shadow":false,"algorithm":"log"}],
		"failures":[{"name":"login/user+ip/failures","dimension":"user+ip","limit":10,"window_ms":900000,"shadow":true,"algorithm":"log"}],
		"lockout":{"ladder_ms":[60000,300000],"decay_ms":86400000,"ledger":"auth","count_denials":true},
		"on_store_failure":"local","shadow":false,"reserve_failures":false},
		"signup":{
		"limits":[{"name":"signup/ip","dimension":"ip","limit":10,"window_ms":3600000,"shadow":false,"algorithm":"log"}],
		"failures":[],
		"lockout":{"ladder_ms":[],"decay_ms":259200000,"ledger":"signup","count_denials":false},
		"on_store_failure":"local","shadow":false,"reserve_failures":false}},
		"lists":{"allow":{"cidrs":["10.0.0.0/8"],"users":[],"devices":[],"countries":[]},"deny":{"cidrs":[],"users":["mallory"],"devices":[],"countries":[]}}}`
	if compact(t, w.Body.String()) != compact(t, want) {
		t.Errorf("policy =\n%s\nwant\n%s", compact(t, w.Body.String()), compact(t, want))
	}
	for _, secret := range []string{keyCheck, keyAudit, keyAdmin, sha256Hex(keyAudit)} {
		if strings.Contains(w.Body.String(), secret) {
			t.Errorf("policy leaks a key")
		}
	}

	// A shadow action's rules are shadow in the effective policy, as
	// they are enforced.
	login := p.Actions["login"]
	login.Shadow = true
	p.Actions["login"] = login
	h = newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{policy: p}})
	var got sdk.Policy
	if err := json.Unmarshal(call(h, "GET", "/v1/policy", keyAdmin, "").Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	a := got.Actions["login"]
	if !a.Shadow || len(a.Limits) != 1 || !a.Limits[0].Shadow || len(a.Failures) != 1 || !a.Failures[0].Shadow {
		t.Errorf("shadow action's policy = %+v; want the action and each of its rules shadow", a)
	}
}
