package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// TestAppendCheckResponseMatchesEncodingJSON: the hand-written check
// answer is byte for byte what json.Marshal writes of the SDK type, for the
// shapes the API produces and for strings that need every kind of
// escaping; a lockout's time is in sdk.TimeFormat (wantCheckJSON).
func TestAppendCheckResponseMatchesEncodingJSON(t *testing.T) {
	until := time.Date(2026, 11, 30, 6, 0, 1, 234567891, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		r    sdk.CheckResponse
	}{
		{"zero value", sdk.CheckResponse{}},
		{"empty limits", sdk.CheckResponse{Decision: "allow", Reason: "ok", DecisionID: "01JDXYZ", Limits: []sdk.Limit{}}},
		{"allowed with two limits", sdk.CheckResponse{Decision: "allow", Reason: "ok", DecisionID: "01JDXYZABCDEF",
			Limits: []sdk.Limit{
				{Rule: "login/ip", Dimension: "ip", Limit: 20, WindowMs: 60000, Remaining: 19, ResetMs: 59999},
				{Rule: "login/user", Dimension: "user", Limit: 1000000, WindowMs: 900000, Remaining: 0, ResetMs: 0},
			}}},
		{"rule kinds", sdk.CheckResponse{Decision: "deny", Reason: "rate_limited", DecisionID: "01JD",
			Limits: []sdk.Limit{
				{Rule: "login/ip/distinct-user", Dimension: "ip", Limit: 20, WindowMs: 3600000, Remaining: 0, ResetMs: 5, Algorithm: "log", Distinct: "user"},
				{Rule: "c", Dimension: "user", Limit: 1000, WindowMs: 1, Remaining: 3, ResetMs: 2, Algorithm: "counter"},
			}}},
		{"denied locked out", sdk.CheckResponse{Decision: "deny", Reason: "locked_out", RetryAfterMs: 899001, DecisionID: "01J",
			Degraded: true, Limits: []sdk.Limit{{Rule: "r", Dimension: "user", Limit: -1, WindowMs: -5, Remaining: -3, ResetMs: 1 << 62}},
			Lockout: &sdk.Lockout{Dimension: "user", Until: until, Level: 3}}},
		{"zero lockout time", sdk.CheckResponse{Lockout: &sdk.Lockout{}}},
		{"escapes", sdk.CheckResponse{Decision: "a\"b\\c/d", Reason: "<script>&amp;</script>",
			DecisionID: "\b\f\n\r\t\x00\x01\x1f\x7f", Limits: []sdk.Limit{{Rule: "\u2028\u2029é😀", Dimension: "\xff\xfe\xc3"}},
			Lockout: &sdk.Lockout{Dimension: "ip\u2028<>&"}}},
		{"invalid utf8 tails", sdk.CheckResponse{Decision: "\xe2\x80", Reason: "ok\xf0\x9f\x98", DecisionID: "\xed\xa0\x80"}},
		{"long string", sdk.CheckResponse{Decision: strings.Repeat("ß<", 500)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := wantCheckJSON(t, tt.r)
			if got := appendCheckResponse(nil, &tt.r); !bytes.Equal(got, want) {
				t.Errorf("appendCheckResponse =\n%s\nwant (encoding/json)\n%s", got, want)
			}
		})
	}
}

// wantCheckJSON is json.Marshal(r) with the lockout as the server writes
// it (encodeLockout: the until time in sdk.TimeFormat).
func wantCheckJSON(t *testing.T, r sdk.CheckResponse) []byte {
	t.Helper()
	type answer struct {
		sdk.CheckResponse
		Lockout *lockoutJSON `json:"lockout"` // shadows the embedded field
	}
	want, err := json.Marshal(answer{r, encodeLockout(r.Lockout)})
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// TestAppendCheckResponseFromDecisions runs real decisions through
// checkResponse and both encoders.
func TestAppendCheckResponseFromDecisions(t *testing.T) {
	lock := &abuse.LockoutInfo{Dimension: "user", Until: time.Unix(1700000000, 999999999), Level: 2}
	limits := []abuse.LimitState{
		{Rule: "login/ip", Dimension: "ip", Limit: 5, Window: time.Minute, Remaining: 0, Reset: 1500 * time.Microsecond},
		{Rule: "login/user", Dimension: "user", Limit: 10, Window: 15 * time.Minute, Remaining: -2, Reset: time.Hour},
	}
	tests := []struct {
		name string
		d    abuse.Decision
	}{
		{"allowed", abuse.Decision{ID: "01A", Allowed: true, Reason: abuse.ReasonOK, Limits: limits}},
		{"rate limited", abuse.Decision{ID: "01B", Reason: abuse.ReasonRateLimited, RetryAfter: 1234567 * time.Microsecond, Limits: limits}},
		{"locked out", abuse.Decision{ID: "01C", Reason: abuse.ReasonLockedOut, RetryAfter: time.Hour, Lockout: lock}},
		{"store unavailable", abuse.Decision{ID: "01D", Reason: abuse.ReasonStoreUnavailable, Degraded: true}},
		{"no limits", abuse.Decision{ID: "01E", Allowed: true, Reason: abuse.ReasonAllowlisted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkResponse(tt.d)
			want := wantCheckJSON(t, r)
			if got := appendCheckResponse([]byte("prefix"), &r); !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("appendCheckResponse =\n%s\nwant prefix+\n%s", got, want)
			}
		})
	}
}

// TestCheckAnswerWire: POST /v1/check answers with gin's JSON
// Content-Type and a body equal to encoding/json's, and every header name
// is canonical (set directly, not through Header.Set).
func TestCheckAnswerWire(t *testing.T) {
	d := abuse.Decision{ID: "01F", Reason: abuse.ReasonRateLimited, RetryAfter: 2500 * time.Millisecond,
		Limits: []abuse.LimitState{{Rule: `lo"gin`, Dimension: "ip", Limit: 5, Window: time.Minute, Remaining: 0, Reset: 2 * time.Second}}}
	h := newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) {
		return d, nil
	}}})
	w := call(h, "POST", "/v1/check", keyCheck, `{"action":"login","ip":"192.0.2.1"}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d; want 200 (%s)", w.Code, w.Body)
	}
	if got, want := w.Header().Get("Content-Type"), "application/json; charset=utf-8"; got != want {
		t.Errorf("Content-Type = %q; want %q", got, want)
	}
	want := wantCheckJSON(t, checkResponse(d))
	if got, _ := io.ReadAll(w.Body); !bytes.Equal(got, want) {
		t.Errorf("body =\n%s\nwant\n%s", got, want)
	}
	for k := range w.Header() {
		if k != textproto.CanonicalMIMEHeaderKey(k) {
			t.Errorf("header %q is not in canonical form", k)
		}
	}
	for k, want := range map[string]string{
		"RateLimit-Policy": `"lo\"gin";q=5;w=60`,
		"RateLimit":        `"lo\"gin";r=0;t=2`,
		"Retry-After":      "3",
	} {
		if got := w.Header().Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q; want [%q]", k, got, want)
		}
	}
}
