package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

func TestForwardAuthClientIP(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		peer    string
		xff     []string
		realIP  string
		realIPs []string // added one by one
		want    string
		wantErr bool
	}{
		{name: "no proxy trusted: peer, headers ignored", peer: "198.51.100.9:4000",
			xff: []string{"203.0.113.7"}, realIP: "203.0.113.8", want: "198.51.100.9"},
		{name: "loopback not trusted by default", peer: "127.0.0.1:4000",
			xff: []string{"203.0.113.7"}, want: "127.0.0.1"},
		{name: "trusted peer: rightmost untrusted XFF hop", trusted: []string{"10.0.0.0/8"}, peer: "10.0.0.2:1",
			xff: []string{"6.6.6.6, 203.0.113.7, 10.0.0.5"}, want: "203.0.113.7"},
		{name: "several XFF headers are one list", trusted: []string{"10.0.0.0/8"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.7", "10.1.1.1"}, want: "203.0.113.7"},
		{name: "spoofed garbage left of the real hop is never read", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"not-an-ip, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "XFF preferred over X-Real-IP", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.7"}, realIP: "203.0.113.8", want: "203.0.113.7"},
		{name: "X-Real-IP without XFF", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			realIP: "2001:db8::1", want: "2001:db8::1"},
		{name: "trusted peer without headers", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1", want: "10.0.0.2"},
		{name: "all hops trusted: leftmost", trusted: []string{"10.0.0.0/8"}, peer: "10.0.0.2:1",
			xff: []string{"10.9.9.9, 10.0.0.5"}, want: "10.9.9.9"},
		{name: "IPv4-mapped hop is IPv4", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"::ffff:203.0.113.7"}, want: "203.0.113.7"},
		{name: "IPv4-mapped peer matches IPv4 proxy", trusted: []string{"10.0.0.2"}, peer: "[::ffff:10.0.0.2]:1",
			xff: []string{"203.0.113.7"}, want: "203.0.113.7"},
		{name: "IPv6 peer", peer: "[2001:db8::5]:443", want: "2001:db8::5"},
		{name: "invalid rightmost hop", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.7, 010.1.1.1"}, wantErr: true},
		{name: "zone in hop", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"fe80::1%eth0"}, wantErr: true},
		{name: "IPv4 hop with a port", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.5:1234"}, want: "203.0.113.5"},
		{name: "IPv6 hop with a port", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"[2001:db8::5]:443"}, want: "2001:db8::5"},
		{name: "bracketed IPv6 hop", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"[2001:db8::6]"}, want: "2001:db8::6"},
		{name: "trusted hop with a port is still trusted", trusted: []string{"10.0.0.0/8"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.7, 10.0.0.9:8080"}, want: "203.0.113.7"},
		{name: "unknown and empty hops skipped", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.7, unknown, , UNKNOWN"}, want: "203.0.113.7"},
		{name: "nothing usable in XFF: X-Real-IP", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"unknown, "}, realIP: "203.0.113.8:99", want: "203.0.113.8"},
		{name: "repeated X-Real-IP: the last, the proxy's", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			realIPs: []string{"203.0.113.66", "198.51.100.8"}, want: "198.51.100.8"},
		{name: "nothing usable at all: peer", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"unknown"}, realIP: "unknown", want: "10.0.0.2"},
		{name: "a port that is no port", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.5:1:2"}, wantErr: true},
		{name: "a port that is not a number", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"203.0.113.5:abc"}, wantErr: true},
		{name: "an empty port", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			xff: []string{"[2001:db8::5]:"}, wantErr: true},
		{name: "a port out of range", trusted: []string{"10.0.0.2"}, peer: "10.0.0.2:1",
			realIP: "203.0.113.5:65536", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa, err := newForwardAuth(ForwardAuthConfig{TrustedProxies: mustPrefixes(tt.trusted...)})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/v1/forward-auth", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			for _, v := range tt.realIPs {
				r.Header.Add("X-Real-IP", v)
			}
			got, err := fa.clientIP(r)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("clientIP = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("clientIP = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestForwardAuth(t *testing.T) {
	var got abuse.CheckInput
	deny := abuse.Decision{ID: "01D", Reason: abuse.ReasonRateLimited, RetryAfter: 2500 * time.Millisecond,
		Limits: []abuse.LimitState{{Rule: "login/ip", Dimension: "ip", Limit: 2, Window: time.Minute, Remaining: 0, Reset: 2500 * time.Millisecond}}}
	guard := &fakeGuard{check: func(_ context.Context, in abuse.CheckInput) (abuse.Decision, error) {
		got = in
		switch {
		case in.Action != "login":
			return abuse.Decision{}, &abuse.InputError{Code: abuse.CodeUnknownAction, Field: "action", Message: "unknown action"}
		case in.Subject.User != nil && *in.Subject.User == "mallory":
			return deny, nil
		case in.Subject.User != nil && *in.Subject.User == "banned":
			return abuse.Decision{ID: "01B", Reason: abuse.ReasonDenylisted}, nil
		}
		return abuse.Decision{ID: "01A", Allowed: true, Reason: abuse.ReasonOK,
			Limits: []abuse.LimitState{{Rule: "login/ip", Limit: 2, Window: time.Minute, Remaining: 1, Reset: time.Minute}}}, nil
	}}
	cfg := testConfig()
	cfg.ForwardAuth = ForwardAuthConfig{UserHeader: "X-Auth-User", TrustedProxies: mustPrefixes("192.0.2.0/24")}
	h := newTestHandler(t, cfg, Deps{Guard: guard})

	tests := []struct {
		name           string
		method         string
		target         string
		headers        []string
		wantStatus     int
		wantRetryAfter string
		wantRateLimit  string
		wantCode       string
	}{
		{name: "allow", method: "GET", target: "/v1/forward-auth?action=login", headers: []string{"X-Auth-User", "alice"},
			wantStatus: 204, wantRateLimit: `"login/ip";r=1;t=60`},
		{name: "any method", method: "POST", target: "/v1/forward-auth?action=login", wantStatus: 204, wantRateLimit: `"login/ip";r=1;t=60`},
		{name: "HEAD", method: "HEAD", target: "/v1/forward-auth?action=login", wantStatus: 204, wantRateLimit: `"login/ip";r=1;t=60`},
		// Beyond the nine standard methods, which gin's Any registers.
		{name: "PROPFIND", method: "PROPFIND", target: "/v1/forward-auth?action=login", wantStatus: 204, wantRateLimit: `"login/ip";r=1;t=60`},
		{name: "PURGE denied", method: "PURGE", target: "/v1/forward-auth?action=login", headers: []string{"X-Auth-User", "mallory"},
			wantStatus: 429, wantRetryAfter: "3", wantRateLimit: `"login/ip";r=0;t=3`},
		{name: "MKCOL missing action", method: "MKCOL", target: "/v1/forward-auth", wantStatus: 400, wantCode: "invalid_request"},
		{name: "deny", method: "GET", target: "/v1/forward-auth?action=login", headers: []string{"X-Auth-User", "mallory"},
			wantStatus: 429, wantRetryAfter: "3", wantRateLimit: `"login/ip";r=0;t=3`},
		{name: "denylisted: 429 without Retry-After", method: "GET", target: "/v1/forward-auth?action=login",
			headers: []string{"X-Auth-User", "banned"}, wantStatus: 429},
		{name: "empty user header is absent", method: "GET", target: "/v1/forward-auth?action=login", headers: []string{"X-Auth-User", " "},
			wantStatus: 204, wantRateLimit: `"login/ip";r=1;t=60`},
		{name: "missing action", method: "GET", target: "/v1/forward-auth", wantStatus: 400, wantCode: "invalid_request"},
		{name: "unknown action", method: "GET", target: "/v1/forward-auth?action=nope", wantStatus: 400, wantCode: "unknown_action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, tt.method, tt.target, keyCheck, "", tt.headers...)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantCode != "" {
				if code, _ := errorOf(t, w); code != tt.wantCode {
					t.Errorf("code = %s, want %s", code, tt.wantCode)
				}
				return
			}
			if g := w.Header().Get("Retry-After"); g != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", g, tt.wantRetryAfter)
			}
			if g := w.Header().Get("RateLimit"); g != tt.wantRateLimit {
				t.Errorf("RateLimit = %q, want %q", g, tt.wantRateLimit)
			}
		})
	}

	t.Run("any method, other paths and keys as ever", func(t *testing.T) {
		if w := call(h, "PROPFIND", "/v1/forward-auth?action=login", "", ""); w.Code != http.StatusUnauthorized {
			t.Errorf("PROPFIND without a key: %d, want 401", w.Code)
		}
		if w := call(h, "PROPFIND", "/v1/forward-auth?action=login", keyCheck, ""); w.Code != http.StatusNoContent || w.Header().Get("Allow") != "" {
			t.Errorf("PROPFIND: %d, Allow %q; want 204 without the Allow of a 405", w.Code, w.Header().Get("Allow"))
		}
		if w := call(h, "PROPFIND", "/v1/check", keyCheck, ""); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("PROPFIND /v1/check: %d, want 405", w.Code)
		}
	})

	t.Run("generic denial body", func(t *testing.T) {
		for user, code := range map[string]string{"mallory": "rate_limited", "banned": "denylisted"} {
			w := call(h, "GET", "/v1/forward-auth?action=login", keyCheck, "", "X-Auth-User", user)
			rid := w.Header().Get("X-Request-Id")
			if rid == "" {
				t.Fatalf("%s: no X-Request-Id", user)
			}
			want := `{"error":{"code":"` + code + `","message":"too many attempts","request_id":"` + rid + `"}}`
			if got := w.Body.String(); got != want {
				t.Errorf("%s: body = %s, want %s (no rule, limit, identifier or decision id; the request id as every error body)", user, got, want)
			}
			if w.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("%s: Cache-Control = %q", user, w.Header().Get("Cache-Control"))
			}
			if id := w.Header().Get("X-Guard-Decision-Id"); id != "" {
				t.Errorf("%s: X-Guard-Decision-Id %q on a denial (its headers reach the client too)", user, id)
			}
		}
		if w := call(h, "GET", "/v1/forward-auth?action=login", keyCheck, "", "X-Auth-User", "alice"); w.Header().Get("X-Guard-Decision-Id") != "01A" {
			t.Errorf("allow: X-Guard-Decision-Id %q, want 01A", w.Header().Get("X-Guard-Decision-Id"))
		}
	})

	t.Run("subject from headers", func(t *testing.T) {
		req := httptest.NewRequest("GET", "/v1/forward-auth?action=login", nil)
		req.RemoteAddr = "192.0.2.10:5555"
		req.Header.Set("Authorization", "Bearer "+keyCheck)
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		req.Header.Set("X-Auth-User", "alice@example.com")
		req.Header.Set("X-Guard-Device", "d-1")
		w := serve(h, req)
		if w.Code != http.StatusNoContent {
			t.Fatalf("status = %d", w.Code)
		}
		if got.Subject.IP == nil || *got.Subject.IP != "203.0.113.7" || got.Subject.User == nil ||
			*got.Subject.User != "alice@example.com" || got.Subject.Device == nil || *got.Subject.Device != "d-1" ||
			got.Cost != 1 || got.DryRun || got.APIKey != "auth-service" {
			t.Errorf("check input = %+v", got)
		}
	})
}

func TestForwardAuthAllowStatus(t *testing.T) {
	guard := &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) {
		return abuse.Decision{ID: "01A", Allowed: true, Reason: abuse.ReasonOK}, nil
	}}
	for _, tt := range []struct{ config, want int }{{0, 204}, {204, 204}, {200, 200}} {
		cfg := testConfig()
		cfg.ForwardAuth = ForwardAuthConfig{AllowStatus: tt.config}
		h := newTestHandler(t, cfg, Deps{Guard: guard})
		if w := call(h, "GET", "/v1/forward-auth?action=login", keyCheck, ""); w.Code != tt.want {
			t.Errorf("allow_status %d: status = %d, want %d", tt.config, w.Code, tt.want)
		}
	}
	if _, err := newForwardAuth(ForwardAuthConfig{AllowStatus: 201}); err == nil {
		t.Error("allow_status 201 accepted")
	}
}

func TestDenialBody(t *testing.T) {
	for reason, want := range map[string]string{
		abuse.ReasonRateLimited: "rate_limited", abuse.ReasonLockedOut: "locked_out", abuse.ReasonDenylisted: "denylisted",
		"challenge_required": "challenge_required", abuse.ReasonStoreUnavailable: "rate_limited",
	} {
		if got := denialBody(reason); got.Error.Code != want || got.Error.Message != "too many attempts" || got.Error.Field != "" {
			t.Errorf("denialBody(%s) = %+v, want code %s", reason, got, want)
		}
	}
}
