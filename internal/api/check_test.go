package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func decisionHandler(t *testing.T, d abuse.Decision, obs *fakeObserver) http.Handler {
	t.Helper()
	g := &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) { return d, nil }}
	deps := Deps{Guard: g}
	if obs != nil {
		deps.Observer = obs
	}
	return newTestHandler(t, testConfig(), deps)
}

func TestCheckResponseBody(t *testing.T) {
	tests := []struct {
		name string
		d    abuse.Decision
		want string
	}{
		{
			name: "rate limited",
			d: abuse.Decision{ID: "01JD", Allowed: false, Reason: abuse.ReasonRateLimited,
				RetryAfter: 41249*time.Millisecond + 300*time.Microsecond,
				Limits: []abuse.LimitState{
					{Rule: "login/ip", Dimension: "ip", Limit: 60, Window: time.Minute, Remaining: 0, Reset: 41249*time.Millisecond + 300*time.Microsecond},
				}},
			want: `{"decision":"deny","reason":"rate_limited","retry_after_ms":41250,"decision_id":"01JD","degraded":false,
				"limits":[{"rule":"login/ip","dimension":"ip","limit":60,"window_ms":60000,"remaining":0,"reset_ms":41250,"algorithm":"log"}],
				"lockout":null}`,
		},
		{
			name: "allowed without rules",
			d:    abuse.Decision{ID: "01A", Allowed: true, Reason: abuse.ReasonAllowlisted, RetryAfter: time.Second},
			want: `{"decision":"allow","reason":"allowlisted","retry_after_ms":0,"decision_id":"01A","degraded":false,"limits":[],"lockout":null}`,
		},
		{
			name: "locked out",
			d: abuse.Decision{ID: "01L", Reason: abuse.ReasonLockedOut, RetryAfter: 90 * time.Second,
				Lockout: &abuse.LockoutInfo{Ledger: "auth", Dimension: "user", Level: 2,
					Since: t0, Until: t0.Add(90*time.Second + 123456789)}},
			want: `{"decision":"deny","reason":"locked_out","retry_after_ms":90000,"decision_id":"01L","degraded":false,"limits":[],
				"lockout":{"dimension":"user","until":"2026-03-01T12:01:30.123Z","level":2}}`,
		},
		{
			name: "store unavailable deny",
			d:    abuse.Decision{ID: "01S", Reason: abuse.ReasonStoreUnavailable, Degraded: true},
			want: `{"decision":"deny","reason":"store_unavailable","retry_after_ms":1000,"decision_id":"01S","degraded":true,"limits":[],"lockout":null}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(decisionHandler(t, tt.d, nil), http.MethodPost, "/v1/check", keyCheck, `{"action":"login","ip":"192.0.2.1"}`)
			if w.Code != 200 {
				t.Fatalf("status = %d: %s", w.Code, w.Body)
			}
			if got, want := compact(t, w.Body.String()), compact(t, tt.want); got != want {
				t.Errorf("body =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDecisionHeaders(t *testing.T) {
	ipRule := abuse.LimitState{Rule: "login/ip", Dimension: "ip", Limit: 60, Window: time.Minute, Remaining: 0, Reset: 41200 * time.Millisecond}
	userRule := abuse.LimitState{Rule: "login/user", Dimension: "user", Limit: 30, Window: 15 * time.Minute, Remaining: 29, Reset: 899001 * time.Millisecond}
	tests := []struct {
		name           string
		d              abuse.Decision
		cost           int
		wantPolicy     string
		wantRateLimit  string
		wantRetryAfter string
	}{
		{
			name: "denied: both headers in the decision's order (abuse sorts it)",
			d: abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: 41200 * time.Millisecond,
				Limits: []abuse.LimitState{ipRule, userRule}},
			wantPolicy:     `"login/ip";q=60;w=60, "login/user";q=30;w=900`,
			wantRateLimit:  `"login/ip";r=0;t=42, "login/user";r=29;t=900`,
			wantRetryAfter: "42",
		},
		{
			name: "allowed: no Retry-After",
			d: abuse.Decision{Allowed: true, Reason: abuse.ReasonOK,
				Limits: []abuse.LimitState{{Rule: "otp/device", Limit: 5, Window: 1500 * time.Millisecond, Remaining: 4, Reset: 1001 * time.Millisecond}}},
			wantPolicy:    `"otp/device";q=5;w=2`,
			wantRateLimit: `"otp/device";r=4;t=2`,
		},
		{
			// retry_after_ms of a denying rule is at least its reset
			// (abuse), so rounding both up keeps Retry-After >= its t.
			name: "Retry-After is retry_after_ms rounded up",
			d: abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: 4001 * time.Millisecond,
				Limits: []abuse.LimitState{{Rule: "r", Limit: 1, Window: 10 * time.Second, Remaining: 0, Reset: 4001 * time.Millisecond}}},
			wantPolicy:     `"r";q=1;w=10`,
			wantRateLimit:  `"r";r=0;t=5`,
			wantRetryAfter: "5",
		},
		{
			name: "Retry-After ignores shadow rules",
			d: abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: 2 * time.Second,
				Limits: []abuse.LimitState{
					{Rule: "s", Limit: 1, Window: time.Hour, Remaining: 0, Reset: time.Hour, Shadow: true},
					{Rule: "e", Limit: 1, Window: time.Minute, Remaining: 0, Reset: 2 * time.Second},
				}},
			wantPolicy:     `"s";q=1;w=3600, "e";q=1;w=60`,
			wantRateLimit:  `"s";r=0;t=3600, "e";r=0;t=2`,
			wantRetryAfter: "2",
		},
		{
			// A rule that does not stand in the way (here a distinct set
			// with room, to which cost does not apply) raises nothing.
			name: "a rule's far t raises no Retry-After",
			cost: 3,
			d: abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: 1500 * time.Millisecond,
				Limits: []abuse.LimitState{
					{Rule: "d", Limit: 5, Window: time.Minute, Remaining: 2, Reset: 50 * time.Second, Distinct: "user"},
					{Rule: "r", Limit: 3, Window: 3 * time.Second, Remaining: 2, Reset: 1500 * time.Millisecond},
				}},
			wantPolicy:     `"d";q=5;w=60, "r";q=3;w=3`,
			wantRateLimit:  `"d";r=2;t=50, "r";r=2;t=2`,
			wantRetryAfter: "2",
		},
		{
			// A counter with no room that does not deny (a challenge the
			// caller passed): its t is when it forgets every attempt, days
			// away; Retry-After is the denying log rule's.
			name: "a counter or bucket raises no Retry-After",
			d: abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: 10 * time.Second,
				Limits: []abuse.LimitState{
					{Rule: "ip", Limit: 3, Window: 10 * time.Second, Remaining: 0, Reset: 10 * time.Second, Algorithm: abuse.AlgLog},
					{Rule: "user", Limit: 1, Window: 24 * time.Hour, Remaining: 0, Reset: 36 * time.Hour, Algorithm: abuse.AlgCounter},
				}},
			wantPolicy:     `"ip";q=3;w=10, "user";q=1;w=86400`,
			wantRateLimit:  `"ip";r=0;t=10, "user";r=0;t=129600`,
			wantRetryAfter: "10",
		},
		{
			name:           "lockout rounds up",
			d:              abuse.Decision{Reason: abuse.ReasonLockedOut, RetryAfter: 60001 * time.Millisecond},
			wantRetryAfter: "61",
		},
		{
			name:           "sub-second lockout still says 1",
			d:              abuse.Decision{Reason: abuse.ReasonLockedOut, RetryAfter: time.Millisecond},
			wantRetryAfter: "1",
		},
		{
			name: "denylisted: no Retry-After, no rules",
			d:    abuse.Decision{Reason: abuse.ReasonDenylisted},
		},
		{
			name:           "store unavailable denial: Retry-After 1",
			d:              abuse.Decision{Reason: abuse.ReasonStoreUnavailable, RetryAfter: time.Second, Degraded: true},
			wantRetryAfter: "1",
		},
		{
			name: "store unavailable allow: nothing",
			d:    abuse.Decision{Allowed: true, Reason: abuse.ReasonStoreUnavailable, Degraded: true},
		},
		{
			name: "shadow allow: headers but no Retry-After",
			d: abuse.Decision{Allowed: true, Reason: abuse.ReasonShadow,
				Limits: []abuse.LimitState{{Rule: "r", Limit: 1, Window: time.Minute, Remaining: 0, Reset: 30 * time.Second, Shadow: true}}},
			wantPolicy:    `"r";q=1;w=60`,
			wantRateLimit: `"r";r=0;t=30`,
		},
		{
			name: "quotes in names are escaped",
			d: abuse.Decision{Allowed: true, Reason: abuse.ReasonOK,
				Limits: []abuse.LimitState{{Rule: `we"ird\name`, Limit: 1, Window: time.Minute, Remaining: 1}}},
			wantPolicy:    `"we\"ird\\name";q=1;w=60`,
			wantRateLimit: `"we\"ird\\name";r=1;t=0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"action":"login","ip":"192.0.2.1"}`
			if tt.cost != 0 {
				body = `{"action":"login","ip":"192.0.2.1","cost":` + itoa(tt.cost) + `}`
			}
			w := call(decisionHandler(t, tt.d, nil), http.MethodPost, "/v1/check", keyCheck, body)
			if w.Code != 200 {
				t.Fatalf("status = %d: %s", w.Code, w.Body)
			}
			for _, h := range []struct{ name, want string }{
				{"RateLimit-Policy", tt.wantPolicy},
				{"RateLimit", tt.wantRateLimit},
				{"Retry-After", tt.wantRetryAfter},
			} {
				got := w.Header().Values(h.name)
				present := len(got) > 0
				if h.want == "" {
					if present {
						t.Errorf("%s = %q, want absent", h.name, got)
					}
					continue
				}
				if len(got) != 1 || got[0] != h.want {
					t.Errorf("%s = %q, want %q", h.name, got, h.want)
				}
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestCheckObservesDecisions(t *testing.T) {
	obs := &fakeObserver{}
	h := decisionHandler(t, abuse.Decision{Reason: abuse.ReasonRateLimited, RetryAfter: time.Second}, obs)
	call(h, http.MethodPost, "/v1/check", keyCheck, `{"action":"login","user":"a"}`)
	call(h, http.MethodGet, "/v1/forward-auth?action=login", keyCheck, "")
	want := "login/deny/rate_limited,login/deny/rate_limited"
	if got := strings.Join(obs.got, ","); got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
}

func TestGuardFailures(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"dependency down", context.DeadlineExceeded, 503, "unavailable"},
		{"dependency error", errorString("redis: connection refused"), 503, "unavailable"},
		{"input error", &abuse.InputError{Code: "invalid_request", Field: "device", Message: "device is longer than 128 bytes"}, 400, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) { return abuse.Decision{}, tt.err }}
			h := newTestHandler(t, testConfig(), Deps{Guard: g})
			w := call(h, http.MethodPost, "/v1/check", keyCheck, `{"action":"login","user":"a"}`)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", w.Code, tt.wantStatus)
			}
			if code, _ := errorOf(t, w); code != tt.wantCode {
				t.Errorf("code = %s, want %s", code, tt.wantCode)
			}
			if strings.Contains(w.Body.String(), "redis") {
				t.Errorf("body leaks the internal error: %s", w.Body)
			}
		})
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

func TestPanicAnswersErrorBody(t *testing.T) {
	g := &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) { panic("boom") }}
	h := newTestHandler(t, testConfig(), Deps{Guard: g})
	w := call(h, http.MethodPost, "/v1/check", keyCheck, `{"action":"login","user":"a"}`)
	if w.Code != 500 {
		t.Fatalf("status = %d, want 500", w.Code)
	}
	if code, _ := errorOf(t, w); code != "internal" {
		t.Errorf("code = %s, want internal", code)
	}
	if strings.Contains(w.Body.String(), "boom") {
		t.Errorf("body leaks the panic: %s", w.Body)
	}
}
