package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// Hostile identifiers the review pages must show inert and visible.
const (
	// bidiUser displays as "admin@evil.com" when the override is obeyed.
	bidiUser   = "admin\u202emoc.live@\u202c"
	xssUser    = `<img src=x onerror="window.__pwned=1">`
	lookalike  = "p\u0430ypal@example.com" // Cyrillic а
	uiAuditKey = "k-ui-audit-0123456789"
	uiAdminKey = "k-ui-admin-0123456789"
	victim     = "victim@example.com"
	victimIP   = "198.51.100.5"
)

var longUser = strings.Repeat("averyverylongname", 15) // 255 bytes

// uiStack is the real service behind a real HTTP server: abuse.Guard over
// the in-memory limiter, the audit Writer into the in-memory audit store,
// on the wall clock (the pages compute "the last hours").
type uiStack struct {
	srv    *httptest.Server
	guard  *abuse.Guard
	writer *audit.Writer
	store  *audit.MemoryStore
}

func newUIStack(t *testing.T, mods ...func(*abuse.Config)) *uiStack {
	t.Helper()
	return newUIStackStore(t, nil, mods...)
}

// newUIStackStore is newUIStack with its limit store wrapped by wrap, when
// not nil.
func newUIStackStore(t *testing.T, wrap func(limits.Store) limits.Store, mods ...func(*abuse.Config)) *uiStack {
	t.Helper()
	var lim limits.Store = limits.NewMemory(limits.MemoryConfig{})
	t.Cleanup(func() { _ = lim.Close() })
	if wrap != nil {
		lim = wrap(lim)
	}
	st := audit.NewMemoryStore(0)
	w, err := audit.NewWriter(slog.New(slog.DiscardHandler), audit.WriterConfig{FlushInterval: 20 * time.Millisecond}, st, audit.WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	ladder := []time.Duration{10 * time.Minute, time.Hour}
	policy := abuse.Policy{Actions: map[string]abuse.Action{
		"login": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimIP, Limit: 5, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUserIP, Limit: 3, Window: 15 * time.Minute}},
			Lockout:  abuse.Lockout{Ladder: ladder, Decay: time.Hour, Ledger: "auth"},
		},
		"otp_send": {
			Limits:   []abuse.Rule{{Dimension: abuse.DimUser, Limit: 3, Window: time.Minute}},
			Failures: []abuse.Rule{{Dimension: abuse.DimUser, Limit: 5, Window: time.Hour}},
			Lockout:  abuse.Lockout{Ladder: ladder, Decay: time.Hour},
		},
	}}
	cfg := abuse.Config{Policy: policy, KeySecret: []byte("0123456789abcdef-ui-test"), Instance: "guard-ui", Now: time.Now}
	for _, m := range mods {
		m(&cfg)
	}
	g, err := abuse.New(slog.New(slog.DiscardHandler), cfg, lim, w, st)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{
		Keys: []api.Key{
			{Name: "auth-service", Scopes: []string{api.ScopeCheck}, Key: "k-ui-check-0123456789"},
			{Name: "secteam", Scopes: []string{api.ScopeAuditRead}, Key: uiAuditKey},
			{Name: "ops", Scopes: []string{api.ScopeAdmin}, Key: uiAdminKey},
		},
		SessionSecret: []byte("ui-session-secret"),
	}, api.Deps{Guard: g, Audit: st, Cursors: audit.NewCursorCodec([]byte("cursor-secret"))})
	if err != nil {
		t.Fatal(err)
	}
	s := &uiStack{srv: httptest.NewServer(h), guard: g, writer: w, store: st}
	t.Cleanup(s.srv.Close)
	return s
}

func (s *uiStack) check(t *testing.T, action, user, ip, device string) abuse.Decision {
	t.Helper()
	in := abuse.CheckInput{Action: action, Subject: subject(user, ip, device)}
	d, err := s.guard.Check(context.Background(), in)
	if err != nil {
		t.Fatalf("check %s %q %s: %v", action, user, ip, err)
	}
	return d
}

func (s *uiStack) fail(t *testing.T, user, ip string) {
	t.Helper()
	in := abuse.ReportInput{Action: "login", Subject: subject(user, ip, ""), Outcome: abuse.OutcomeFailure}
	if _, err := s.guard.Report(context.Background(), in); err != nil {
		t.Fatalf("report: %v", err)
	}
}

func subject(user, ip, device string) abuse.Subject {
	var s abuse.Subject
	if user != "" {
		s.User = &user
	}
	if ip != "" {
		s.IP = &ip
	}
	if device != "" {
		s.Device = &device
	}
	return s
}

// seed records a morning's traffic: ordinary users, a flood from one IP,
// the hostile names, and two lockouts (one of them the bidi name's).
func (s *uiStack) seed(t *testing.T) {
	t.Helper()
	s.history(t)
	for i := range 12 {
		s.check(t, "login", "alice@example.com", "203.0.113.7", "phone-1") // 5 allowed, then denied
		s.check(t, "login", fmt.Sprintf("user%02d@example.com", i), fmt.Sprintf("192.0.2.%d", 10+i), "")
	}
	for _, u := range []string{bidiUser, xssUser, lookalike, longUser} {
		s.check(t, "login", u, "203.0.113.66", "dev-\u200bhidden")
	}
	for range 3 {
		s.fail(t, victim, victimIP)
		s.fail(t, bidiUser, "203.0.113.66")
	}
	for range 5 {
		s.check(t, "otp_send", "bob@example.com", "", "") // 3 allowed, then denied
	}
	// A check and the report that names it: one decision.
	d := s.check(t, "login", "carol@example.com", "192.0.2.200", "laptop-7")
	if _, err := s.guard.Report(context.Background(), abuse.ReportInput{Action: "login",
		Subject: subject("carol@example.com", "192.0.2.200", "laptop-7"), Outcome: abuse.OutcomeSuccess, DecisionID: d.ID}); err != nil {
		t.Fatal(err)
	}
	s.settle(t)
}

// history stores three hours of earlier checks straight into the audit
// store, so the overview's chart has a shape: a quiet baseline and a burst
// of rate limiting an hour ago. No identifier of it is denied more than
// twice, so the seeded flood stays on top.
func (s *uiStack) history(t *testing.T) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Minute)
	var events []audit.Event
	for m := 180; m >= 2; m-- {
		at := now.Add(-time.Duration(m) * time.Minute)
		n := 3 + (m*7)%5
		for i := range n {
			events = append(events, audit.Event{
				ID: fmt.Sprintf("h%03d%02d", m, i), At: at.Add(time.Duration(i) * time.Second), Kind: audit.KindCheck,
				Action: "login", Decision: "allow", Reason: abuse.ReasonOK, User: fmt.Sprintf("u%d@example.com", (m+i)%40),
				IP: fmt.Sprintf("192.0.2.%d", 100+(m+i)%100), Rule: "login/ip", APIKey: "auth-service", Instance: "guard-ui",
			})
		}
		if m >= 55 && m <= 70 {
			for i := range 6 + (m % 4) {
				reason := abuse.ReasonRateLimited
				if i%3 == 0 {
					reason = abuse.ReasonLockedOut
				}
				events = append(events, audit.Event{
					ID: fmt.Sprintf("d%03d%02d", m, i), At: at.Add(time.Duration(20+i) * time.Second), Kind: audit.KindCheck,
					Action: "login", Decision: "deny", Reason: reason, User: fmt.Sprintf("target%d@example.com", (m*10+i)%60),
					IP: fmt.Sprintf("198.18.%d.%d", m, i), Rule: "login/ip", APIKey: "auth-service", Instance: "guard-ui",
				})
			}
		}
	}
	if err := s.store.Insert(context.Background(), events); err != nil {
		t.Fatal(err)
	}
}

func (s *uiStack) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.writer.Backlog() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("audit writer did not drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// browser starts headless Chromium (Debian's chromium, with the flags it
// needs as root in a container) for one test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("GUARD_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		testenv.Missing(t, "chromium not found for the browser tests (apt-get install chromium, or ./scripts/test.sh installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(func() {
		cancel()
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return ctx
}

// step bounds one browser step, so a test that goes wrong fails in
// seconds instead of waiting out the whole browser's deadline.
func step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 20*time.Second)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func navigate(t *testing.T, ctx context.Context, url string) int64 {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(url))
	if err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	return resp.Status
}

// submit clicks sel (a submit button or a link) and waits for the page it
// loads, returning its status.
func submit(t *testing.T, ctx context.Context, sel string) int64 {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(sel, chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	return resp.Status
}

func setValue(t *testing.T, ctx context.Context, sel, v string) {
	t.Helper()
	js, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	if !eval[bool](t, ctx, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; el.value = %s; return el.value === %s })()`, js, val, val)) {
		t.Fatalf("set %s to %q: no such field, or it refused the value", sel, v)
	}
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	return eval[string](t, ctx, `location.pathname + location.search`)
}

// signIn fills the sign-in form with key.
func signIn(t *testing.T, ctx context.Context, base, key string) int64 {
	t.Helper()
	navigate(t, ctx, base+"/ui/login")
	setValue(t, ctx, "#key", key)
	return submit(t, ctx, `#login button[type=submit]`)
}

func column(t *testing.T, ctx context.Context, table, label string) []string {
	t.Helper()
	return eval[[]string](t, ctx, fmt.Sprintf(
		`Array.from(document.querySelectorAll('%s tbody td[data-label="%s"]')).map(td => td.textContent.trim())`, table, label))
}
