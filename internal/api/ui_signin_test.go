package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// signInFrom posts the sign-in form with key from the peer address peer
// (host:port), with X-Forwarded-For xff when set.
func signInFrom(h http.Handler, peer, xff, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://localhost/ui/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.RemoteAddr = peer
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestUISignInLimit: a client address gets signInFailures refused sign-ins
// a minute; then 429 with Retry-After, its key unchecked, while other
// addresses sign in as before. Behind a trusted proxy the client is the
// X-Forwarded-For one, and the log names peer and client.
func TestUISignInLimit(t *testing.T) {
	clock := &fakeClock{t: t0}
	cfg := testConfig()
	cfg.ForwardAuth.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	var logs bytes.Buffer
	h, err := New(slog.New(slog.NewTextHandler(&logs, nil)), cfg, Deps{Guard: &fakeGuard{}, Audit: &fakeAudit{}, Cursors: testCursors, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const attacker, other = "198.51.100.7:4000", "198.51.100.8:4000"
	for i := range signInFailures {
		if w := signInFrom(h, attacker, "", "guess"); w.Code != 401 {
			t.Fatalf("refusal %d: %d; want 401", i+1, w.Code)
		}
	}
	if !strings.Contains(logs.String(), "peer=198.51.100.7") {
		t.Errorf("refusals logged without the peer address:\n%s", logs.String())
	}
	clock.Set(t0.Add(20 * time.Second))
	w := signInFrom(h, attacker, "", keyAudit)
	if w.Code != 429 || w.Header().Get("Retry-After") != "40" || len(w.Result().Cookies()) != 0 {
		t.Errorf("the right key after %d refusals: %d, Retry-After %q, cookies %v; want 429, 40, none",
			signInFailures, w.Code, w.Header().Get("Retry-After"), w.Result().Cookies())
	}
	if w := signInFrom(h, other, "", keyAudit); w.Code != 303 {
		t.Errorf("another address: %d; want 303", w.Code)
	}
	clock.Set(t0.Add(signInWindow))
	if w := signInFrom(h, attacker, "", keyAudit); w.Code != 303 {
		t.Errorf("a window later: %d; want 303", w.Code)
	}

	// Behind a trusted proxy each forwarded client has its own count.
	logs.Reset()
	const proxy = "10.0.0.1:5000"
	for range signInFailures {
		signInFrom(h, proxy, "203.0.113.9", "guess")
	}
	if !strings.Contains(logs.String(), "peer=10.0.0.1 client=203.0.113.9") {
		t.Errorf("refusals through the proxy logged without peer and client:\n%s", logs.String())
	}
	if w := signInFrom(h, proxy, "203.0.113.9", keyAudit); w.Code != 429 {
		t.Errorf("forwarded client after its refusals: %d; want 429", w.Code)
	}
	if w := signInFrom(h, proxy, "203.0.113.10", keyAudit); w.Code != 303 {
		t.Errorf("another client through the same proxy: %d; want 303", w.Code)
	}
	// An untrusted peer's X-Forwarded-For is not believed.
	for range signInFailures {
		signInFrom(h, "192.0.2.50:1", "203.0.113.99", "guess")
	}
	if w := signInFrom(h, "192.0.2.50:1", "203.0.113.100", keyAudit); w.Code != 429 {
		t.Errorf("untrusted peer with a new X-Forwarded-For: %d; want 429", w.Code)
	}
}

// TestSignInLimiterBounded: the table never tracks more than signInClients
// addresses; past that the others share one window, still limited.
func TestSignInLimiterBounded(t *testing.T) {
	clock := &fakeClock{t: t0}
	l := newSignInLimiter(clock.Now)
	for i := range signInClients + 500 {
		l.refused(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String())
	}
	if n := len(l.windows); n > signInClients+1 {
		t.Errorf("tracked %d windows; want at most %d", n, signInClients+1)
	}
	for range signInFailures {
		l.refused("192.0.2.1")
	}
	if _, blocked := l.blocked("192.0.2.1"); !blocked {
		t.Error("an address past the table's bound is not limited")
	}
	// Once the windows expire, they are pruned for new clients.
	clock.Set(t0.Add(signInWindow))
	l.refused("192.0.2.2")
	if n := len(l.windows); n != 1 {
		t.Errorf("after expiry: %d windows; want 1", n)
	}
	if _, blocked := l.blocked("192.0.2.1"); blocked {
		t.Error("still blocked a window later")
	}
}

func TestSignInClient(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"198.51.100.7", "198.51.100.7"},
		{"::ffff:198.51.100.7", "198.51.100.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"not an address", ""},
	} {
		if got := signInClient(tc.in); got != tc.want {
			t.Errorf("signInClient(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
