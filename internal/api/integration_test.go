package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// clock is a settable test clock shared by the limiter and the Guard.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// stack is the real thing minus the network backends: abuse.Guard over the
// in-memory limiter, audit events through the real Writer into the
// in-memory audit store, served by api.New.
type stack struct {
	guard  *abuse.Guard
	h      http.Handler
	clock  *clock
	writer *audit.Writer
	store  *audit.MemoryStore
}

func newStack(t *testing.T, mods ...func(*abuse.Config)) *stack {
	t.Helper()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	lim := limits.NewMemory(limits.MemoryConfig{Now: clk.Now})
	t.Cleanup(func() { _ = lim.Close() })
	st := audit.NewMemoryStore(0)
	w, err := audit.NewWriter(slog.New(slog.DiscardHandler), audit.WriterConfig{FlushInterval: time.Millisecond}, st, audit.WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	policy := abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits: []abuse.Rule{
				{Dimension: abuse.DimIP, Limit: 3, Window: time.Minute},
				{Dimension: abuse.DimUser, Limit: 5, Window: 15 * time.Minute},
			},
			Failures: []abuse.Rule{{Dimension: abuse.DimUserIP, Limit: 2, Window: 15 * time.Minute}},
			Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute, 5 * time.Minute}, Decay: time.Hour, Ledger: "auth"},
		},
	}, Deny: abuse.List{Users: []string{"mallory"}}}
	cfg := abuse.Config{
		Policy: policy, KeySecret: []byte("0123456789abcdef-test"), Instance: "guard-test", Now: clk.Now,
	}
	for _, m := range mods {
		m(&cfg)
	}
	g, err := abuse.New(slog.New(slog.DiscardHandler), cfg, lim, w, st)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{
		Keys: []api.Key{
			{Name: "auth-service", Scopes: []string{api.ScopeCheck}, Key: "k-check"},
			{Name: "ops", Scopes: []string{api.ScopeAdmin}, Key: "k-admin"},
		},
		ForwardAuth: api.ForwardAuthConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}},
	}, api.Deps{Guard: g, Audit: st, Cursors: audit.NewCursorCodec([]byte("cursor-secret")), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &stack{guard: g, h: h, clock: clk, writer: w, store: st}
}

func (s *stack) do(t *testing.T, method, target, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, target, nil)
	} else {
		req = httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w
}

// settle waits until the audit writer has stored every recorded event.
func (s *stack) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.writer.Backlog() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("audit writer did not drain")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type checkAnswer struct {
	Decision     string `json:"decision"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	DecisionID   string `json:"decision_id"`
	Degraded     bool   `json:"degraded"`
	Limits       []struct {
		Rule      string `json:"rule"`
		Dimension string `json:"dimension"`
		Limit     int    `json:"limit"`
		WindowMs  int64  `json:"window_ms"`
		Remaining int    `json:"remaining"`
		ResetMs   int64  `json:"reset_ms"`
		Algorithm string `json:"algorithm"`
		Distinct  string `json:"distinct"`
	} `json:"limits"`
	Lockout *struct {
		Dimension string `json:"dimension"`
		Until     string `json:"until"`
		Level     int    `json:"level"`
	} `json:"lockout"`
}

func decodeStrictly(t *testing.T, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
}

func TestIntegrationCheckReportLockoutAudit(t *testing.T) {
	s := newStack(t)
	const attempt = `{"action":"login","user":"Alice@Example.COM","ip":"203.0.113.7"}`

	// Three attempts fill login/ip (3 per minute), spread over 20 s.
	for i := range 3 {
		w := s.do(t, "POST", "/v1/check", "k-check", attempt)
		var a checkAnswer
		decodeStrictly(t, w, &a)
		if w.Code != 200 || a.Decision != "allow" || a.Reason != "ok" || a.RetryAfterMs != 0 || a.DecisionID == "" {
			t.Fatalf("attempt %d: %d %+v", i, w.Code, a)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Errorf("attempt %d: Retry-After on an allowed answer", i)
		}
		s.clock.Advance(10 * time.Second)
	}
	// now = t0+30s; the oldest ip entry (t0) leaves at t0+60s.
	w := s.do(t, "POST", "/v1/check", "k-check", attempt)
	var a checkAnswer
	decodeStrictly(t, w, &a)
	if a.Decision != "deny" || a.Reason != "rate_limited" || a.RetryAfterMs != 30000 {
		t.Fatalf("fourth attempt = %+v, want deny/rate_limited after 30000 ms", a)
	}
	if got, want := w.Header().Get("RateLimit"), `"login/ip";r=0;t=30, "login/user";r=2;t=870`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"login/ip";q=3;w=60, "login/user";q=5;w=900`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got := w.Header().Get("Retry-After"); got != "30" {
		t.Errorf("Retry-After = %q, want 30", got)
	}

	// Two failures of alice from that IP strike user+ip: level 1, 1 minute.
	report := `{"action":"login","user":"alice@example.com","ip":"203.0.113.7","outcome":"failure","decision_id":"` + a.DecisionID + `"}`
	if w := s.do(t, "POST", "/v1/report", "k-check", report); w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"lockout":null}` {
		t.Fatalf("first failure = %d %s", w.Code, w.Body)
	}
	w = s.do(t, "POST", "/v1/report", "k-check", report)
	if want := `{"lockout":{"dimension":"user+ip","until":"2026-03-01T12:01:30.000Z","level":1}}`; strings.TrimSpace(w.Body.String()) != want {
		t.Fatalf("striking failure = %s, want %s", w.Body, want)
	}

	// Locked out: the answer is the lockout, Retry-After its end.
	s.clock.Advance(45 * time.Second) // t0+75s: the ip window has room again
	w = s.do(t, "POST", "/v1/check", "k-check", attempt)
	a = checkAnswer{}
	decodeStrictly(t, w, &a)
	if a.Reason != "locked_out" || a.RetryAfterMs != 15000 || a.Lockout == nil || a.Lockout.Level != 1 ||
		a.Lockout.Dimension != "user+ip" || a.Lockout.Until != "2026-03-01T12:01:30.000Z" {
		t.Fatalf("locked check = %+v", a)
	}
	if got := w.Header().Get("Retry-After"); got != "15" {
		t.Errorf("Retry-After = %q, want 15", got)
	}

	// The lockout is listed with the identifiers of its dimension only.
	w = s.do(t, "GET", "/v1/lockouts?user=ALICE@example.com", "k-admin", "")
	want := `{"lockouts":[{"ledger":"auth","dimension":"user+ip","user":"alice@example.com","ip":"203.0.113.7","level":1,"since":"2026-03-01T12:00:30.000Z","until":"2026-03-01T12:01:30.000Z"}],"next_cursor":null}`
	if got := strings.TrimSpace(w.Body.String()); got != want {
		t.Errorf("lockouts =\n%s\nwant\n%s", got, want)
	}

	// Unlock lifts it once; a second unlock finds nothing.
	unlock := `{"dimension":"user+ip","user":"alice@example.com","ip":"203.0.113.7","reason":"ticket 42"}`
	if w := s.do(t, "DELETE", "/v1/lockouts", "k-admin", unlock); w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"unlocked":true}` {
		t.Fatalf("unlock = %d %s", w.Code, w.Body)
	}
	if w := s.do(t, "DELETE", "/v1/lockouts", "k-admin", unlock); w.Code != 404 {
		t.Errorf("second unlock = %d %s, want 404", w.Code, w.Body)
	}
	a = checkAnswer{}
	decodeStrictly(t, s.do(t, "POST", "/v1/check", "k-check", attempt), &a)
	if a.Decision != "allow" {
		t.Errorf("after unlock = %+v, want allow", a)
	}

	// The audit trail has it all, newest first; the admin event names the key.
	s.settle(t)
	w = s.do(t, "GET", "/v1/audit?user=alice@example.com&kind=admin", "k-admin", "")
	var page struct {
		Events []map[string]any `json:"events"`
		Next   *string          `json:"next_cursor"`
	}
	decodeStrictly(t, w, &page)
	if len(page.Events) != 1 || page.Events[0]["api_key"] != "ops" || page.Events[0]["note"] != "ticket 42" ||
		page.Events[0]["action"] != "unlock" || page.Next != nil {
		t.Errorf("admin events = %+v", page)
	}
	w = s.do(t, "GET", "/v1/audit?user=alice@example.com&kind=check&limit=2", "k-admin", "")
	page.Events = nil
	decodeStrictly(t, w, &page)
	if len(page.Events) != 2 || page.Next == nil || page.Events[0]["reason"] != "ok" || page.Events[1]["reason"] != "locked_out" {
		t.Errorf("check events page = %+v", page)
	}
	req := httptest.NewRequest("GET", "/v1/audit?ip=203.0.113.0/24", nil)
	req.Header.Set("Authorization", "Bearer k-admin")
	req.Header.Set("Accept", "text/csv")
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	rows, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// 6 checks + 2 reports + 1 unlock, plus the header row.
	if len(rows) != 10 || rows[0][0] != "id" {
		t.Errorf("csv export has %d rows, want 10 (header first): %v", len(rows), rows)
	}
}

func TestIntegrationBadInput(t *testing.T) {
	s := newStack(t)
	tests := []struct {
		name      string
		path      string // default /v1/check
		body      string
		wantCode  string
		wantField string
	}{
		{"empty user", "", `{"action":"login","user":"  "}`, "invalid_request", "user"},
		{"user too long", "", `{"action":"login","user":"` + strings.Repeat("x", 257) + `"}`, "invalid_request", "user"},
		{"device too long", "", `{"action":"login","device":"` + strings.Repeat("x", 129) + `"}`, "invalid_request", "device"},
		{"ip zone", "", `{"action":"login","ip":"fe80::1%eth0"}`, "invalid_request", "ip"},
		{"ip leading zeros", "", `{"action":"login","ip":"203.000.113.7"}`, "invalid_request", "ip"},
		{"ip with spaces", "", `{"action":"login","ip":" 203.0.113.7"}`, "invalid_request", "ip"},
		{"unknown action", "", `{"action":"launch","ip":"203.0.113.7"}`, "unknown_action", "action"},
		{"cost above smallest limit", "", `{"action":"login","ip":"203.0.113.7","cost":4}`, "invalid_request", "cost"},
		{"escaped NUL in user", "", `{"action":"login","user":"a\u0000"}`, "invalid_request", "user"},
		{"lone surrogate in device", "", `{"action":"login","device":"\udbff"}`, "invalid_request", "device"},
		// The action is checked first: an unknown one is unknown_action
		// whatever else is missing or wrong.
		{"unknown action, no identifiers", "", `{"action":"launch"}`, "unknown_action", "action"},
		{"no identifiers", "", `{"action":"login"}`, "invalid_request", ""},
		{"missing action", "", `{"user":"a"}`, "invalid_request", "action"},
		{"report: unknown action, nothing else", "/v1/report", `{"action":"launch"}`, "unknown_action", "action"},
		{"report: unknown action, no identifiers", "/v1/report", `{"action":"launch","outcome":"failure"}`, "unknown_action", "action"},
		{"report: missing outcome", "/v1/report", `{"action":"login","user":"a"}`, "invalid_request", "outcome"},
		{"report: bad outcome", "/v1/report", `{"action":"login","user":"a","outcome":"meh"}`, "invalid_request", "outcome"},
		{"report: no identifiers", "/v1/report", `{"action":"login","outcome":"success"}`, "invalid_request", ""},
		{"report: missing action", "/v1/report", `{"user":"a","outcome":"success"}`, "invalid_request", "action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/v1/check"
			}
			w := s.do(t, "POST", path, "k-check", tt.body)
			var e struct {
				Error struct {
					Code, Message, Field string
					RequestID            string `json:"request_id"`
				} `json:"error"`
			}
			decodeStrictly(t, w, &e)
			if w.Code != 400 || e.Error.Code != tt.wantCode || e.Error.Field != tt.wantField {
				t.Errorf("= %d %+v, want 400 %s/%s", w.Code, e.Error, tt.wantCode, tt.wantField)
			}
		})
	}
	t.Run("denylisted: deny without Retry-After", func(t *testing.T) {
		w := s.do(t, "POST", "/v1/check", "k-check", `{"action":"login","user":"Mallory"}`)
		var a checkAnswer
		decodeStrictly(t, w, &a)
		if a.Decision != "deny" || a.Reason != "denylisted" || len(a.Limits) != 0 || w.Header().Get("Retry-After") != "" ||
			w.Header().Get("RateLimit") != "" {
			t.Errorf("denylisted = %+v, headers %v", a, w.Header())
		}
	})
}

func TestIntegrationForwardAuth(t *testing.T) {
	s := newStack(t)
	fwd := func(peer, xff string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/v1/forward-auth?action=login", nil)
		req.RemoteAddr = peer
		req.Header.Set("Authorization", "Bearer k-check")
		req.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, req)
		return w
	}
	// Through the trusted proxy, each client address has its own limit.
	for i := range 3 {
		if w := fwd("192.0.2.1:1000", "198.51.100.1"); w.Code != 204 {
			t.Fatalf("attempt %d = %d", i, w.Code)
		}
	}
	w := fwd("192.0.2.1:1000", "198.51.100.1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") != `"login/ip";r=0;t=60` {
		t.Errorf("fourth = %d Retry-After %q RateLimit %q", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	if w := fwd("192.0.2.1:1000", "198.51.100.2"); w.Code != 204 {
		t.Errorf("other client = %d, want 204", w.Code)
	}
	// An untrusted peer cannot pick its address with X-Forwarded-For.
	for i := range 3 {
		fwd("203.0.113.50:1", "198.51.100."+string(rune('3'+i)))
	}
	if w := fwd("203.0.113.50:1", "198.51.100.9"); w.Code != 429 {
		t.Errorf("spoofing peer = %d, want 429 (its own address is limited)", w.Code)
	}
}

// TestIntegrationPseudonymizedAuditFilters: with audit.pseudonymize events
// hold keyed hashes, and the audit filters still find them by the raw
// identifiers (normalised the same way), while a CIDR range, which no hash
// can match, is a clear 400 rather than a silently empty answer.
func TestIntegrationPseudonymizedAuditFilters(t *testing.T) {
	s := newStack(t, func(c *abuse.Config) { c.Pseudonymize = true })
	w := s.do(t, "POST", "/v1/check", "k-check", `{"action":"login","user":"Alice@Example.COM","ip":"203.0.113.7","device":"d-1"}`)
	if w.Code != 200 {
		t.Fatalf("check: status %d %s", w.Code, w.Body)
	}
	s.settle(t)
	tests := []struct {
		name      string
		query     string
		wantCode  int
		wantCount int
		wantField string
	}{
		{"address", "ip=203.0.113.7", 200, 1, ""},
		{"ipv4-mapped address", "ip=::ffff:203.0.113.7", 200, 1, ""},
		{"other address", "ip=203.0.113.8", 200, 0, ""},
		{"user normalised then hashed", "user=alice@example.com", 200, 1, ""},
		{"device hashed", "device=d-1", 200, 1, ""},
		{"all three", "user=ALICE@example.com&ip=203.0.113.7&device=d-1", 200, 1, ""},
		{"cidr range", "ip=203.0.113.0/24", 400, 0, "ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := s.do(t, "GET", "/v1/audit?"+tt.query, "k-admin", "")
			if w.Code != tt.wantCode {
				t.Fatalf("status = %d (%s); want %d", w.Code, w.Body, tt.wantCode)
			}
			if tt.wantCode != 200 {
				var e struct {
					Error struct {
						Code, Message, Field string
						RequestID            string `json:"request_id"`
					} `json:"error"`
				}
				decodeStrictly(t, w, &e)
				if e.Error.Field != tt.wantField {
					t.Errorf("field = %q; want %q", e.Error.Field, tt.wantField)
				}
				return
			}
			var page struct {
				Events []struct {
					User, IP, Device string
				} `json:"events"`
				NextCursor *string `json:"next_cursor"`
			}
			if err := json.NewDecoder(w.Body).Decode(&page); err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != tt.wantCount {
				t.Fatalf("events = %d; want %d", len(page.Events), tt.wantCount)
			}
			for _, e := range page.Events {
				if e.IP == "203.0.113.7" || strings.Contains(e.User, "alice") || e.Device == "d-1" {
					t.Errorf("event keeps a raw identifier: %+v", e)
				}
			}
		})
	}
}
