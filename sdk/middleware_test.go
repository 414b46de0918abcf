package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

func TestClientIP(t *testing.T) {
	x, err := sdk.TrustProxies("10.0.0.0/8", "::1", "::ffff:192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, peer string
		xff        []string
		realIP     string
		want       string
	}{
		{"untrusted peer, headers ignored", "203.0.113.9:1234", []string{"198.51.100.1"}, "198.51.100.2", "203.0.113.9"},
		{"trusted peer, no headers", "10.0.0.1:80", nil, "", "10.0.0.1"},
		{"rightmost untrusted", "10.0.0.1:80", []string{"1.1.1.1, 198.51.100.1, 10.0.0.2"}, "", "198.51.100.1"},
		{"several headers joined", "10.0.0.1:80", []string{"1.1.1.1", "198.51.100.1", "10.0.0.2"}, "", "198.51.100.1"},
		{"port on IPv4", "10.0.0.1:80", []string{"203.0.113.5:1234"}, "", "203.0.113.5"},
		{"port on IPv6", "10.0.0.1:80", []string{"[2001:db8::5]:443"}, "", "2001:db8::5"},
		{"bracketed IPv6", "10.0.0.1:80", []string{"[2001:db8::6]"}, "", "2001:db8::6"},
		{"unknown and empty skipped", "10.0.0.1:80", []string{"198.51.100.7, unknown, , 10.0.0.3"}, "", "198.51.100.7"},
		{"garbage skipped", "10.0.0.1:80", []string{"198.51.100.7, not-an-ip"}, "", "198.51.100.7"},
		{"bad ports skipped", "10.0.0.1:80", []string{"198.51.100.7, 203.0.113.5:abc, [2001:db8::5]:, 203.0.113.6:99999"}, "", "198.51.100.7"},
		{"nothing usable: X-Real-IP", "10.0.0.1:80", []string{"unknown"}, "198.51.100.8", "198.51.100.8"},
		{"nothing usable: peer", "10.0.0.1:80", []string{"unknown"}, "nonsense", "10.0.0.1"},
		{"all trusted: leftmost", "10.0.0.1:80", []string{"10.0.0.9, 10.0.0.2"}, "", "10.0.0.9"},
		{"IPv6 loopback proxy", "[::1]:80", []string{"198.51.100.3"}, "", "198.51.100.3"},
		{"mapped peer matches IPv4 prefix", "[::ffff:10.0.0.1]:80", []string{"198.51.100.4"}, "", "198.51.100.4"},
		{"mapped client reads as IPv4", "10.0.0.1:80", []string{"::ffff:198.51.100.5"}, "", "198.51.100.5"},
		{"mapped trusted proxy entry", "192.0.2.1:80", []string{"198.51.100.6"}, "", "198.51.100.6"},
		{"no peer", "", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			if got := x.ClientIP(r); got != tt.want {
				t.Errorf("ClientIP = %q; want %q", got, tt.want)
			}
		})
	}
	t.Run("repeated X-Real-IP: the last, the proxy's", func(t *testing.T) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:80"
		r.Header.Add("X-Real-IP", "203.0.113.66")
		r.Header.Add("X-Real-IP", "198.51.100.8")
		if got := x.ClientIP(r); got != "198.51.100.8" {
			t.Errorf("ClientIP = %q; want 198.51.100.8", got)
		}
	})
	var none *sdk.IPExtractor
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	if got := none.ClientIP(r); got != "10.0.0.1" {
		t.Errorf("nil extractor = %q; want the peer", got)
	}
	if _, err := sdk.TrustProxies("10.0.0.0/33"); err == nil {
		t.Error("bad prefix accepted")
	}
}

// protected serves a login handler behind m that records the attempt it
// saw and reports the outcome in the "ok" form field.
func protected(t *testing.T, m *sdk.Middleware) (*httptest.Server, chan *sdk.Attempt) {
	seen := make(chan *sdk.Attempt, 100)
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := sdk.AttemptFrom(r.Context())
		seen <- a
		outcome := sdk.OutcomeFailure
		if r.PostFormValue("ok") == "1" {
			outcome = sdk.OutcomeSuccess
		}
		a.Report(r.Context(), outcome)
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(srv.Close)
	return srv, seen
}

func post(t *testing.T, url string, form string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestMiddlewareAgainstGuard(t *testing.T) {
	guard := startTestGuard(t, "")
	client := testClient(guard, keyCheck)
	proxy, err := sdk.TrustProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	m := &sdk.Middleware{
		Client: client, Action: "login", IP: proxy, DeviceCookie: "dev", DeviceHeader: "X-Device",
		User: func(r *http.Request) string { return r.PostFormValue("email") },
	}
	app, seen := protected(t, m)

	resp := post(t, app.URL, "email=Frank@Example.com", "X-Forwarded-For", "198.51.100.60", "Cookie", "dev=d-cookie", "X-Device", "d-header")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("first attempt: %d", resp.StatusCode)
	}
	a := <-seen
	if a.Subject != (sdk.Subject{User: "Frank@Example.com", IP: "198.51.100.60", Device: "d-cookie"}) || !a.Result.Allowed() || a.Result.DecisionID == "" {
		t.Errorf("attempt = %+v, result %+v", a.Subject, a.Result)
	}
	resp = post(t, app.URL, "email=frank@example.com", "X-Forwarded-For", "198.51.100.60", "X-Device", "d-header")
	<-seen
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("second attempt: %d", resp.StatusCode)
	}
	// Ten failures in all from that address lock frank there (the
	// default login policy); the handler does not run for the 11th.
	for range 8 {
		if err := client.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		post(t, app.URL, "email=frank@example.com", "X-Forwarded-For", "198.51.100.60")
		<-seen
	}
	if err := client.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp = post(t, app.URL, "email=frank@example.com", "X-Forwarded-For", "198.51.100.60")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after ten failures: %d; want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q; want 60", got)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("RateLimit headers not relayed: %v", resp.Header)
	}
	var body struct {
		Error map[string]string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"code": "too_many_attempts", "message": "Too many attempts. Try again in 1 minute."}
	if len(body.Error) != 2 || body.Error["code"] != want["code"] || body.Error["message"] != want["message"] {
		t.Errorf("denial body = %v; want %v (nothing about the account or the rule)", body.Error, want)
	}
	select {
	case a := <-seen:
		t.Errorf("the handler ran for a denied attempt: %+v", a)
	default:
	}
	// From another address frank is not locked; an address sent by an
	// untrusted peer (no proxy) would not be believed.
	if resp := post(t, app.URL, "email=frank@example.com&ok=1", "X-Forwarded-For", "198.51.100.61"); resp.StatusCode != http.StatusNoContent {
		t.Errorf("other address: %d", resp.StatusCode)
	}
	<-seen

	// Input Guard refuses that came from the end client is a 400, not a
	// 5xx.
	if resp := post(t, app.URL, "email="+strings.Repeat("x", 300)); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a 300-byte user: %d; want 400", resp.StatusCode)
	}
	// So is one that makes the check's body larger than Guard takes (413
	// too_large, 8 KiB): the end client chose its size.
	if resp := post(t, app.URL, "email="+strings.Repeat("x", 9000)); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a 9000-byte user: %d; want 400", resp.StatusCode)
	}
	// A wrong key is this service's bug: 500, never a silent bypass.
	wrong := &sdk.Middleware{Client: sdk.New(guard, "wrong"), Action: "login"}
	app2, _ := protected(t, wrong)
	if resp := post(t, app2.URL, ""); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("wrong key: %d; want 500", resp.StatusCode)
	}
}

func TestMiddlewareFailurePolicies(t *testing.T) {
	srv, _ := hanging(t)
	client := sdk.New(srv.URL, "k", sdk.WithTimeout(20*time.Millisecond))
	open, seen := protected(t, &sdk.Middleware{Client: client, Action: "login"})
	if resp := post(t, open.URL, ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("fail open (default): %d", resp.StatusCode)
	}
	if a := <-seen; !a.Result.Bypassed || !a.Result.Allowed() {
		t.Errorf("attempt result = %+v; want allowed and bypassed", a.Result)
	}
	closed, _ := protected(t, &sdk.Middleware{Client: client, Action: "login", FailurePolicy: sdk.FailClosed})
	resp := post(t, closed.URL, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "" {
		t.Errorf("fail closed: %d, Retry-After %q; want 503 without", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	var onDeny *sdk.CheckResponse
	custom, _ := protected(t, &sdk.Middleware{Client: client, Action: "login", FailurePolicy: sdk.FailClosed,
		OnDeny: func(w http.ResponseWriter, r *http.Request, res *sdk.CheckResponse) {
			onDeny = res
			w.WriteHeader(http.StatusTeapot)
		}})
	if resp := post(t, custom.URL, ""); resp.StatusCode != http.StatusTeapot || onDeny == nil || !onDeny.Bypassed {
		t.Errorf("OnDeny: %d, %+v", resp.StatusCode, onDeny)
	}
}

// An end client that hangs up while Guard is slow: the protected handler
// does not run (FailOpen does not let the attempt through), nothing is
// answered and no error is logged.
func TestMiddlewareClientGone(t *testing.T) {
	srv, _ := hanging(t)
	var logs bytes.Buffer
	m := &sdk.Middleware{Client: sdk.New(srv.URL, "k", sdk.WithTimeout(5*time.Second)), Action: "login",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ran := false
	h := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil).WithContext(ctx))
	if ran || w.Body.Len() != 0 || logs.Len() != 0 {
		t.Errorf("client gone: handler ran %v, answered %d %q, logged %q; want none of it", ran, w.Code, w.Body.String(), logs.String())
	}
}

func TestDenialMessage(t *testing.T) {
	tests := []struct {
		ms   int64
		want string
	}{
		{0, "Too many attempts. Try again later."},
		{1, "Too many attempts. Try again in 1 second."},
		{41250, "Too many attempts. Try again in 42 seconds."},
		{60000, "Too many attempts. Try again in 1 minute."},
		{60001, "Too many attempts. Try again in 2 minutes."},
		{3600000, "Too many attempts. Try again in 60 minutes."},
		{3600001, "Too many attempts. Try again in 2 hours."},
	}
	for _, tt := range tests {
		if got := sdk.DenialMessage(&sdk.CheckResponse{Decision: sdk.DecisionDeny, RetryAfterMs: tt.ms}); got != tt.want {
			t.Errorf("DenialMessage(%d ms) = %q; want %q", tt.ms, got, tt.want)
		}
	}
}
