package api_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/guardhq/guard/internal/abuse"
)

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
