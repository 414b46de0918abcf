package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
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
	lim := limits.NewMemory(limits.MemoryConfig{})
	t.Cleanup(func() { _ = lim.Close() })
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

func TestUIBrowser(t *testing.T) {
	ctx := browser(t)
	s := newUIStack(t)
	s.seed(t)
	base := s.srv.URL

	// Nothing on any page may run script: count dialogs, and the XSS
	// payload would set window.__pwned.
	var dialogs atomic.Int64
	go func() {
		for _, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	t.Cleanup(func() {
		if n := dialogs.Load(); n != 0 {
			t.Errorf("%d JavaScript dialogs opened: a page ran script", n)
		}
	})

	t.Run("a wrong key is refused", func(t *testing.T) {
		if st := navigate(t, ctx, base+"/ui/events"); st != 200 || !strings.HasPrefix(location(t, ctx), "/ui/login") {
			t.Fatalf("unauthenticated /ui/events: status %d at %s; want the sign-in form", st, location(t, ctx))
		}
		if st := signIn(t, ctx, base, "not-a-key"); st != http.StatusUnauthorized {
			t.Errorf("wrong key: status %d; want 401", st)
		}
		if msg := eval[string](t, ctx, `document.querySelector('#login-error')?.textContent || ''`); !strings.Contains(msg, "not valid") {
			t.Errorf("wrong key: message %q; want it refused", msg)
		}
		if st := signIn(t, ctx, base, "k-ui-check-0123456789"); st != http.StatusForbidden {
			t.Errorf("check-only key: status %d; want 403", st)
		}
		if st := navigate(t, ctx, base+"/ui/lockouts"); st != 200 || !strings.HasPrefix(location(t, ctx), "/ui/login") {
			t.Errorf("still signed out: got %s", location(t, ctx))
		}
	})

	t.Run("sign in", func(t *testing.T) {
		if st := signIn(t, ctx, base, uiAuditKey); st != 200 {
			t.Fatalf("sign in: status %d", st)
		}
		if h1 := eval[string](t, ctx, `document.querySelector('h1').textContent`); h1 != "Overview" || location(t, ctx) != "/ui/" {
			t.Fatalf("after sign-in: %q at %s; want the overview", h1, location(t, ctx))
		}
		cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/ui/"}})
		if err != nil {
			t.Fatal(err)
		}
		var sess *network.Cookie
		for _, c := range cookies.Cookies {
			if c.Name == "guard_session" {
				sess = c
			}
		}
		if sess == nil || !sess.HTTPOnly || sess.SameSite != network.CookieSameSiteStrict || sess.Path != "/ui" {
			t.Errorf("session cookie = %+v; want HttpOnly, SameSite=Strict, Path /ui", sess)
		}
		if exp := time.Unix(int64(sess.Expires), 0); time.Until(exp) > 31*time.Minute || time.Until(exp) < 25*time.Minute {
			t.Errorf("session expires %v; want in about 30 minutes", exp)
		}
		// The overview counts what was seeded.
		if n := eval[int](t, ctx, `document.querySelectorAll('svg.chart rect').length`); n == 0 {
			t.Error("overview chart has no bars")
		}
		if top := eval[string](t, ctx, `document.querySelector('.tops .top td')?.textContent || ''`); top != "203.0.113.7" {
			t.Errorf("top denied IP = %q; want 203.0.113.7", top)
		}
		if mode := eval[string](t, ctx, `document.querySelector('#mode').textContent`); mode != "normal" {
			t.Errorf("mode = %q", mode)
		}
		if n := eval[string](t, ctx, `document.querySelector('#lockout-count').textContent`); n != "2" {
			t.Errorf("active lockouts = %q; want 2 (the victim's and the bidi name's)", n)
		}
	})

	t.Run("search by user", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/events")
		setValue(t, ctx, "#f-user", "Alice@Example.com")
		setValue(t, ctx, "#f-kind", "check")
		if st := submit(t, ctx, "#apply"); st != 200 {
			t.Fatalf("filter: status %d", st)
		}
		users := column(t, ctx, "#events", "user")
		if len(users) != 12 {
			t.Fatalf("alice's checks: %d rows %v; want 12", len(users), users)
		}
		for _, u := range users {
			if u != "alice@example.com" {
				t.Errorf("row of %q in alice's events", u)
			}
		}
		if c := eval[string](t, ctx, `document.querySelector('#count').textContent`); !strings.HasPrefix(c, "12 matching events") {
			t.Errorf("count = %q", c)
		}
		denied := 0
		for _, d := range column(t, ctx, "#events", "decision") {
			if d == "deny" {
				denied++
			}
		}
		if denied != 7 {
			t.Errorf("%d of alice's checks denied; want 7 (limit 5 per IP)", denied)
		}
	})

	t.Run("pivot by IP", func(t *testing.T) {
		if st := submit(t, ctx, `#events tbody tr:first-child td[data-label="ip"] a.pv`); st != 200 {
			t.Fatalf("pivot: status %d", st)
		}
		if loc := location(t, ctx); loc != "/ui/events?ip=203.0.113.7" {
			t.Errorf("pivot went to %s", loc)
		}
		ips := column(t, ctx, "#events", "ip")
		if len(ips) != 12 {
			t.Errorf("events of 203.0.113.7: %d; want 12", len(ips))
		}
		for _, ip := range ips {
			if ip != "203.0.113.7" {
				t.Errorf("row with ip %q", ip)
			}
		}
	})

	t.Run("page forward and back", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/events?limit=5")
		first := column(t, ctx, "#events", "time")
		ids1 := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events a.detail')).map(a => a.pathname)`)
		if len(ids1) != 5 || eval[bool](t, ctx, `!!document.querySelector('a.prev')`) {
			t.Fatalf("first page: %d rows, prev link %v", len(ids1), eval[bool](t, ctx, `!!document.querySelector('a.prev')`))
		}
		submit(t, ctx, "a.next")
		ids2 := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events a.detail')).map(a => a.pathname)`)
		submit(t, ctx, "a.next")
		ids3 := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events a.detail')).map(a => a.pathname)`)
		if len(ids2) != 5 || len(ids3) != 5 || ids2[0] == ids1[0] || ids3[0] == ids2[0] {
			t.Fatalf("pages: %v / %v / %v; want three distinct pages of 5", ids1, ids2, ids3)
		}
		submit(t, ctx, "a.prev")
		back2 := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events a.detail')).map(a => a.pathname)`)
		submit(t, ctx, "a.prev")
		back1 := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events a.detail')).map(a => a.pathname)`)
		if strings.Join(back2, ",") != strings.Join(ids2, ",") || strings.Join(back1, ",") != strings.Join(ids1, ",") {
			t.Errorf("back: %v, %v; want %v, %v", back2, back1, ids2, ids1)
		}
		if eval[bool](t, ctx, `!!document.querySelector('a.prev')`) {
			t.Error("back on the first page, yet a newer-page link")
		}
		_ = first
	})

	t.Run("a bad filter re-renders the form with the error beside the field", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/events")
		setValue(t, ctx, "#f-ip", "300.1.2.3")
		setValue(t, ctx, "#f-since", "yesterday-ish")
		if st := submit(t, ctx, "#apply"); st != 400 {
			t.Errorf("bad filter: status %d; want 400", st)
		}
		msg := eval[string](t, ctx, `document.querySelector('#err-ip')?.textContent || ''`)
		if !strings.Contains(msg, "ip must be") {
			t.Errorf("error beside ip = %q", msg)
		}
		if v := eval[string](t, ctx, `document.querySelector('#f-ip').value`); v != "300.1.2.3" {
			t.Errorf("the form lost the bad value: %q", v)
		}
		setValue(t, ctx, "#f-ip", "")
		submit(t, ctx, "#apply")
		if msg := eval[string](t, ctx, `document.querySelector('#err-since')?.textContent || ''`); !strings.Contains(msg, "duration back from now") {
			t.Errorf("error beside since = %q", msg)
		}
		setValue(t, ctx, "#f-since", "24h")
		if st := submit(t, ctx, "#apply"); st != 200 {
			t.Errorf("since=24h: status %d", st)
		}
	})

	t.Run("hostile and bidi-spoofing users are inert and visible", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/events?ip=203.0.113.66&kind=check")
		cells := column(t, ctx, "#events", "user")
		joined := strings.Join(cells, "\n")
		if strings.ContainsRune(joined, '\u202e') || strings.ContainsRune(joined, '\u202c') || strings.ContainsRune(joined, '\u200b') {
			t.Errorf("a bidi or invisible character reached the page text: %q", joined)
		}
		if !strings.Contains(joined, `admin\u202Emoc.live@\u202C`) {
			t.Errorf("bidi user not shown with visible escapes: %q", cells)
		}
		if !strings.Contains(joined, xssUser) {
			t.Errorf("markup user not shown as text: %q", cells)
		}
		if eval[bool](t, ctx, `!!window.__pwned || document.querySelectorAll('#events img').length > 0`) {
			t.Error("the markup in a user name became an element or ran")
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('#events mark.cf').length`); n != 1 {
			t.Errorf("%d confusable marks; want 1 (the Cyrillic а)", n)
		}
		if d := eval[string](t, ctx, `document.querySelector('#events td[data-label="device"] .esc')?.textContent || ''`); d != `\u200B` {
			t.Errorf("zero-width space in the device shown as %q", d)
		}
		// The 255-byte name is cut, its full value one click away.
		if n := eval[int](t, ctx, `document.querySelectorAll('#events details.long').length`); n != 1 {
			t.Errorf("%d truncated values; want 1", n)
		}
		if w := eval[int](t, ctx, `document.documentElement.scrollWidth`); w > 1280 {
			t.Errorf("page is %d px wide at 1280: a long value stretches it", w)
		}
		if err := chromedp.Do(ctx, chromedp.Click(`#events details.long summary`, chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
		if full := eval[string](t, ctx, `document.querySelector('#events details.long .full').textContent`); full != longUser {
			t.Errorf("full value = %q", full)
		}
		// The bidi name can be searched for by what it really is.
		navigate(t, ctx, base+"/ui/lockouts")
		if !strings.Contains(eval[string](t, ctx, `document.querySelector('#lockouts').textContent`), `admin\u202Emoc.live@\u202C`) {
			t.Error("the lockouts page does not show the bidi name's escapes")
		}
	})

	t.Run("phone width has no horizontal scrolling", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)) }()
		for _, p := range []string{"/ui/", "/ui/events", "/ui/events?ip=203.0.113.66", "/ui/lockouts"} {
			navigate(t, ctx, base+p)
			sw := eval[int](t, ctx, `document.documentElement.scrollWidth`)
			iw := eval[int](t, ctx, `window.innerWidth`)
			if iw != 390 || sw > iw {
				t.Errorf("%s at 390 px: scroll width %d, viewport %d", p, sw, iw)
			}
		}
		screenshot(t, ctx, "ui-events-phone.png", base+"/ui/events?ip=203.0.113.66")
		screenshot(t, ctx, "ui-overview-phone.png", base+"/ui/")
	})

	t.Run("audit:read sees no actions", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/lockouts")
		if n := eval[int](t, ctx, `document.querySelectorAll('form.unlock, #lock-form').length`); n != 0 {
			t.Errorf("%d action forms for an audit:read key", n)
		}
		// Sign out: the session ends.
		if st := submit(t, ctx, "#signout"); st != 200 || !strings.HasPrefix(location(t, ctx), "/ui/login") {
			t.Errorf("sign out: %d at %s", st, location(t, ctx))
		}
		navigate(t, ctx, base+"/ui/events")
		if !strings.HasPrefix(location(t, ctx), "/ui/login") {
			t.Errorf("after sign-out /ui/events is %s", location(t, ctx))
		}
	})

	t.Run("CSRF refused without a token", func(t *testing.T) {
		signIn(t, ctx, base, uiAdminKey)
		navigate(t, ctx, base+"/ui/lockouts?user="+victim)
		eval[bool](t, ctx, `(() => { const f = document.querySelector('form.unlock'); f.querySelector('[name=csrf]').remove(); f.querySelector('[name=reason]').value = 'forged'; return true })()`)
		if st := submit(t, ctx, `form.unlock button`); st != http.StatusForbidden {
			t.Errorf("unlock without a CSRF token: status %d; want 403", st)
		}
		if d := s.check(t, "login", victim, victimIP, ""); d.Reason != abuse.ReasonLockedOut {
			t.Errorf("victim after the forged unlock: %s; want still locked out", d.Reason)
		}
	})

	t.Run("unlock with a reason shows the admin event", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/lockouts?user="+victim)
		screenshot(t, ctx, "ui-lockouts.png", base+"/ui/lockouts")
		navigate(t, ctx, base+"/ui/lockouts?user="+victim)
		// The reason is required: the browser will not submit without it.
		if ok := eval[bool](t, ctx, `document.querySelector('form.unlock [name=reason]').required`); !ok {
			t.Error("the unlock reason is not required")
		}
		setValue(t, ctx, `form.unlock [name=reason]`, "ticket 4711: verified by phone")
		if st := submit(t, ctx, `form.unlock button`); st != 200 {
			t.Fatalf("unlock: status %d", st)
		}
		if loc := location(t, ctx); loc != "/ui/lockouts?done=unlocked" {
			t.Errorf("after unlock at %s", loc)
		}
		row := eval[string](t, ctx, `document.querySelector('#admin-events tbody tr')?.textContent || ''`)
		if !strings.Contains(row, "unlock") || !strings.Contains(row, "ops") || !strings.Contains(row, "ticket 4711") || !strings.Contains(row, victim) {
			t.Errorf("latest admin event row = %q; want ops's unlock of the victim with the reason", row)
		}
		if d := s.check(t, "login", victim, victimIP, ""); d.Reason != abuse.ReasonOK {
			t.Errorf("victim after the unlock: %s; want ok", d.Reason)
		}
		if users := column(t, ctx, "#lockouts", "user"); strings.Contains(strings.Join(users, " "), victim) {
			t.Errorf("victim still listed: %v", users)
		}
	})

	t.Run("manual lockout", func(t *testing.T) {
		navigate(t, ctx, base+"/ui/lockouts")
		setValue(t, ctx, "#m-dimension", "ip")
		setValue(t, ctx, "#m-ip", "198.51.100.77")
		setValue(t, ctx, "#m-duration", "nonsense")
		setValue(t, ctx, "#m-reason", "credential stuffing from this host")
		if st := submit(t, ctx, "#lock"); st != 400 {
			t.Errorf("bad duration: status %d; want 400", st)
		}
		if msg := eval[string](t, ctx, `document.querySelector('#merr-duration')?.textContent || ''`); !strings.Contains(msg, "duration") {
			t.Errorf("error beside duration = %q", msg)
		}
		setValue(t, ctx, "#m-duration", "6h")
		if st := submit(t, ctx, "#lock"); st != 200 || location(t, ctx) != "/ui/lockouts?done=locked" {
			t.Fatalf("lock: status %d at %s", st, location(t, ctx))
		}
		rows := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#lockouts tbody tr')).filter(r => r.textContent.includes('198.51.100.77')).map(r => r.textContent)`)
		if len(rows) != 2 || !strings.Contains(rows[0], "manual") {
			t.Errorf("lockouts of 198.51.100.77 = %q; want a manual one per ledger (auth, otp_send)", rows)
		}
		row := eval[string](t, ctx, `document.querySelector('#admin-events tbody tr')?.textContent || ''`)
		if !strings.Contains(row, "lock") || !strings.Contains(row, "credential stuffing") || !strings.Contains(row, "198.51.100.77") {
			t.Errorf("latest admin event row = %q; want the lock", row)
		}
		if d := s.check(t, "login", "someone@example.com", "198.51.100.77", ""); d.Reason != abuse.ReasonLockedOut {
			t.Errorf("a check from the locked IP: %s; want locked_out", d.Reason)
		}
	})

	t.Run("screenshots", func(t *testing.T) {
		screenshot(t, ctx, "ui-overview.png", base+"/ui/")
		screenshot(t, ctx, "ui-events.png", base+"/ui/events?limit=25")
		navigate(t, ctx, base+"/ui/events?kind=check&user=carol@example.com")
		href := eval[string](t, ctx, `document.querySelector('#events a.detail')?.href || ''`)
		if href == "" {
			t.Fatal("no check of carol")
		}
		navigate(t, ctx, href)
		if got := eval[string](t, ctx, `document.querySelector('#same-decision')?.textContent || ''`); !strings.Contains(got, "report") || !strings.Contains(got, "success") {
			t.Errorf("same decision = %q; want carol's report", got)
		}
		screenshot(t, ctx, "ui-event.png", href)
	})
}

// screenshot writes a full-page PNG of url to docs/screenshots when
// GUARD_UPDATE_SCREENSHOTS=1, so ordinary runs leave the tree alone.
func screenshot(t *testing.T, ctx context.Context, name, url string) {
	t.Helper()
	if os.Getenv("GUARD_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	navigate(t, ctx, url)
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join("..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}
