package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

// Keys of the test server.
const (
	keyCheck = "k-check-123"
	keyAudit = "k-audit-456"
	keyAdmin = "k-admin-789"
)

func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// mustPrefixes parses addresses or CIDRs as the config file gives them.
func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		p, err := prefixOf(s)
		if err != nil {
			panic(err)
		}
		out[i] = p
	}
	return out
}

func testConfig() Config {
	return Config{Keys: []Key{
		{Name: "auth-service", Scopes: []string{ScopeCheck}, Key: keyCheck},
		{Name: "secteam", Scopes: []string{ScopeAuditRead}, SHA256: sha256.Sum256([]byte(keyAudit))},
		{Name: "ops", Scopes: []string{ScopeAdmin}, Key: keyAdmin},
	}}
}

// fakeGuard is a hand-written Guard whose methods are func fields; a nil
// field answers a fixed, harmless value.
type fakeGuard struct {
	check    func(context.Context, abuse.CheckInput) (abuse.Decision, error)
	report   func(context.Context, abuse.ReportInput) (abuse.ReportOutcome, error)
	lockouts func(context.Context, abuse.LockoutFilter) (abuse.LockoutPage, error)
	unlock   func(context.Context, abuse.UnlockInput) error
	lock     func(context.Context, abuse.LockInput) ([]abuse.ActiveLockout, error)
	policy   abuse.Policy
}

func (g *fakeGuard) Check(ctx context.Context, in abuse.CheckInput) (abuse.Decision, error) {
	if g.check == nil {
		return abuse.Decision{ID: "01TEST", Action: in.Action, Allowed: true, Reason: abuse.ReasonOK}, nil
	}
	return g.check(ctx, in)
}

func (g *fakeGuard) Report(ctx context.Context, in abuse.ReportInput) (abuse.ReportOutcome, error) {
	if g.report == nil {
		return abuse.ReportOutcome{}, nil
	}
	return g.report(ctx, in)
}

func (g *fakeGuard) Lockouts(ctx context.Context, f abuse.LockoutFilter) (abuse.LockoutPage, error) {
	if g.lockouts == nil {
		return abuse.LockoutPage{}, nil
	}
	return g.lockouts(ctx, f)
}

func (g *fakeGuard) Lock(ctx context.Context, in abuse.LockInput) ([]abuse.ActiveLockout, error) {
	if g.lock == nil {
		return nil, errors.New("fakeGuard: no lock")
	}
	return g.lock(ctx, in)
}

func (g *fakeGuard) Unlock(ctx context.Context, in abuse.UnlockInput) error {
	if g.unlock == nil {
		return abuse.ErrNotFound
	}
	return g.unlock(ctx, in)
}

func (g *fakeGuard) Policy() abuse.Policy { return g.policy }

// fakeAudit is a hand-written AuditReader.
type fakeAudit struct {
	query  func(context.Context, audit.Filter) (audit.Page, error)
	stream func(context.Context, audit.Filter, func(audit.Event) error) error
}

func (a *fakeAudit) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	if a.query == nil {
		return audit.Page{}, nil
	}
	return a.query(ctx, f)
}

func (a *fakeAudit) Stream(ctx context.Context, f audit.Filter, fn func(audit.Event) error) error {
	if a.stream == nil {
		return nil
	}
	return a.stream(ctx, f, fn)
}

// fakeObserver records observations.
type fakeObserver struct{ got []string }

func (o *fakeObserver) ObserveDecision(action, decision, reason string, degraded bool, d time.Duration) {
	o.got = append(o.got, strings.Join([]string{action, decision, reason}, "/"))
}

var testCursors = audit.NewCursorCodec([]byte("test-cursor-secret"))

// newTestHandler builds the handler with the fakes; nil deps get fresh
// fakes.
func newTestHandler(t testing.TB, cfg Config, deps Deps) http.Handler {
	t.Helper()
	if deps.Guard == nil {
		deps.Guard = &fakeGuard{}
	}
	if deps.Audit == nil {
		deps.Audit = &fakeAudit{}
	}
	if deps.Cursors == nil {
		deps.Cursors = testCursors
	}
	h, err := New(slog.New(slog.DiscardHandler), cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

// call sends one request; body is sent as application/json unless headers
// say otherwise. key "" sends no Authorization.
func call(h http.Handler, method, target, key, body string, headers ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// errorOf decodes an error body strictly: exactly {"error": {code,
// message[, field], request_id}}, request_id the X-Request-Id header.
func errorOf(t *testing.T, w *httptest.ResponseRecorder) (code, field string) {
	t.Helper()
	var body map[string]map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", w.Body.String(), err)
	}
	if len(body) != 1 || body["error"] == nil {
		t.Fatalf("error body %q: want exactly one key \"error\"", w.Body.String())
	}
	e := body["error"]
	for k := range e {
		if k != "code" && k != "message" && k != "field" && k != "request_id" {
			t.Errorf("error body has unexpected key %q", k)
		}
	}
	if id, _ := e["request_id"].(string); id == "" || id != w.Header().Get("X-Request-Id") {
		t.Errorf("error body request_id = %q, want the X-Request-Id header %q", id, w.Header().Get("X-Request-Id"))
	}
	if f, ok := e["field"]; ok && f == "" {
		t.Errorf("error body carries an empty field; want it omitted")
	}
	if m, _ := e["message"].(string); m == "" {
		t.Errorf("error body %q has no message", w.Body.String())
	}
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	return code, field
}

func newRequest(method, target string, body io.Reader) *http.Request {
	return httptest.NewRequest(method, target, body)
}

func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}
