package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

func TestUIEvents(t *testing.T) {
	st := seedAudit(t, 3)
	lockouts := &fakeGuard{lockouts: func(context.Context, abuse.LockoutFilter) (abuse.LockoutPage, error) {
		return abuse.LockoutPage{Lockouts: []abuse.ActiveLockout{{Ledger: "auth", Dimension: "user", User: ptr(`<b>eve</b>"`), Level: 1,
			Since: t0, Until: t0.Add(time.Minute)}}}, nil
	}}
	h := newTestHandler(t, testConfig(), Deps{Audit: st, Guard: lockouts})

	t.Run("list escapes, filters and links the next page", func(t *testing.T) {
		w := call(h, "GET", "/ui/events?kind=check&limit=2&user=%3Cx%3E", keyAudit, "")
		if w.Code != 200 {
			t.Fatalf("status = %d: %s", w.Code, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("Content-Type = %q", ct)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("CSP = %q", csp)
		}
		body := w.Body.String()
		if strings.Contains(body, "<x>") || !strings.Contains(body, "&lt;x&gt;") {
			t.Errorf("filter value not escaped in the form")
		}
	})
	t.Run("next page link keeps the filters", func(t *testing.T) {
		w := call(h, "GET", "/ui/events?kind=check&limit=2", keyAudit, "")
		body := w.Body.String()
		m := regexp.MustCompile(`href="(/ui/events\?[^"]+)" class="next"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no next-page link in %s", body)
		}
		next := strings.ReplaceAll(m[1], "&amp;", "&")
		u, err := url.Parse(next)
		if err != nil {
			t.Fatal(err)
		}
		if q := u.Query(); q.Get("kind") != "check" || q.Get("limit") != "2" || q.Get("cursor") == "" {
			t.Errorf("next link %s lacks the filters or cursor", next)
		}
		w = call(h, "GET", next, keyAudit, "")
		if w.Code != 200 || !strings.Contains(w.Body.String(), "/ui/events/ev1000?") ||
			strings.Contains(w.Body.String(), "/ui/events/ev1002?") {
			t.Errorf("second page = %d, want only the oldest check event:\n%s", w.Code, w.Body)
		}
	})
	t.Run("detail page escapes everything", func(t *testing.T) {
		w := call(h, "GET", "/ui/events?kind=admin", keyAudit, "")
		m := regexp.MustCompile(`href="(/ui/events/adm1\?[^"]+)"`).FindStringSubmatch(w.Body.String())
		if m == nil {
			t.Fatalf("no detail link in %s", w.Body)
		}
		w = call(h, "GET", strings.ReplaceAll(m[1], "&amp;", "&"), keyAudit, "")
		if w.Code != 200 {
			t.Fatalf("detail = %d: %s", w.Code, w.Body)
		}
		body := w.Body.String()
		if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;") {
			t.Errorf("note not escaped:\n%s", body)
		}
	})
	t.Run("detail of a missing event is 404", func(t *testing.T) {
		w := call(h, "GET", "/ui/events/nope?at=2026-03-01T12:00:00Z", keyAudit, "")
		if w.Code != 404 {
			t.Errorf("status = %d, want 404", w.Code)
		}
		w = call(h, "GET", "/ui/events/nope", keyAudit, "")
		if w.Code != 400 {
			t.Errorf("no at, not a ULID: status = %d, want 400", w.Code)
		}
		w = call(h, "GET", "/ui/events/nope?at=2026-03-01T12:00:00%2B24:00", keyAudit, "")
		if code, field := errorOf(t, w); w.Code != 400 || code != "invalid_request" || field != "at" {
			t.Errorf("at with offset +24:00: %d %s/%s, want 400 invalid_request/at", w.Code, code, field)
		}
		w = call(h, "GET", "/ui/events/nope?at=2026-03-01T13:00:00+01:00", keyAudit, "")
		if w.Code != 404 {
			t.Errorf("at with an unencoded + offset: status = %d, want 404 (read as +01:00)", w.Code)
		}
	})
	t.Run("bad filter is 400", func(t *testing.T) {
		w := call(h, "GET", "/ui/events?limit=5000", keyAudit, "")
		if w.Code != 400 {
			t.Fatalf("status = %d, want 400", w.Code)
		}
		if _, field := errorOf(t, w); field != "limit" {
			t.Errorf("field = %q, want limit", field)
		}
	})
	t.Run("lockouts page escapes identifiers", func(t *testing.T) {
		w := call(h, "GET", "/ui/lockouts", keyAudit, "")
		body := w.Body.String()
		if w.Code != 200 || strings.Contains(body, "<b>eve") || !strings.Contains(body, "&lt;b&gt;eve&lt;/b&gt;&#34;") {
			t.Errorf("lockouts page = %d:\n%s", w.Code, body)
		}
	})
	t.Run("ui root is the overview", func(t *testing.T) {
		w := call(h, "GET", "/ui", keyAudit, "")
		if w.Code != 302 || w.Header().Get("Location") != "/ui/" {
			t.Errorf("GET /ui = %d %q", w.Code, w.Header().Get("Location"))
		}
		w = call(h, "GET", "/ui/", keyAudit, "")
		if w.Code != 200 || !strings.Contains(w.Body.String(), "<h1>Overview</h1>") {
			t.Errorf("GET /ui/ = %d:\n%s", w.Code, w.Body)
		}
	})
}

func TestULIDTime(t *testing.T) {
	got, err := ulidTime("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if err != nil || got.UnixMilli() != 1469922850259 {
		t.Errorf("ulidTime = %v, %v; want ms 1469922850259", got.UnixMilli(), err)
	}
	for _, bad := range []string{"", "short", "01ARZ3NDEKTSV4RRFFQ69G5FA!", "ZZZZZZZZZZTSV4RRFFQ69G5FAV"} {
		if _, err := ulidTime(bad); err == nil {
			t.Errorf("ulidTime(%q) succeeded, want an error", bad)
		}
	}
}

// TestUIBrowserLogin: the review pages take HTTP Basic (the key as the
// password) so a browser can open them, and ask for it on a 401; the API
// itself stays Bearer-only.
func TestUIBrowserLogin(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 1)})
	basic := func(user, pw string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
	}
	tests := []struct {
		name, target, auth string
		wantCode           int
		wantChallenge      string
	}{
		{"basic with the audit key", "/ui/events", basic("analyst", keyAudit), 200, ""},
		{"basic with an empty user name", "/ui/events", basic("", keyAudit), 200, ""},
		{"bearer still works", "/ui/events", "Bearer " + keyAudit, 200, ""},
		{"no credentials: basic challenge", "/ui/events", "", 401, "Basic"},
		{"wrong password: basic challenge", "/ui/events", basic("analyst", "nope"), 401, "Basic"},
		{"basic with a key lacking the scope", "/ui/events", basic("x", keyCheck), 403, ""},
		{"the API does not take basic", "/v1/audit", basic("analyst", keyAudit), 401, "Bearer"},
		{"the API challenges for a bearer token", "/v1/audit", "", 401, "Bearer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, "GET", tt.target, "", "", "Authorization", tt.auth)
			if w.Code != tt.wantCode {
				t.Fatalf("status = %d; want %d (%s)", w.Code, tt.wantCode, w.Body)
			}
			got, _, _ := strings.Cut(w.Header().Get("WWW-Authenticate"), " ")
			if got != tt.wantChallenge {
				t.Errorf("WWW-Authenticate scheme = %q; want %q", got, tt.wantChallenge)
			}
		})
	}
}

// /ui/events/{id} finds an event from its id alone: the ULID carries
// Guard's clock when the decision began, the stored at is Redis TIME when
// the store answered, usually a few milliseconds later (or earlier, when
// clocks drift).
func TestUIEventByIDAlone(t *testing.T) {
	st := audit.NewMemoryStore(0)
	idAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	newULID := func() string { return ulid.MustNew(ulid.Timestamp(idAt), ulid.DefaultEntropy()).String() }
	cases := []struct {
		skew time.Duration
		want int
	}{
		{0, 200},
		{3 * time.Millisecond, 200},
		{-2 * time.Millisecond, 200},
		{4 * time.Second, 200},
		{3 * time.Minute, 200},
		{-9 * time.Minute, 200},
		{20 * time.Minute, 404}, // too far: needs ?at=
	}
	ids := make([]string, len(cases))
	var evs []audit.Event
	for i, tc := range cases {
		ids[i] = newULID()
		evs = append(evs, audit.Event{ID: ids[i], At: idAt.Add(tc.skew), Kind: audit.KindCheck, Action: "login",
			Decision: "allow", Reason: "ok", User: "alice", Instance: "guard-1"})
	}
	// A crowd of other events in the same millisecond as the ULID time.
	for range 50 {
		evs = append(evs, audit.Event{ID: newULID(), At: idAt, Kind: audit.KindCheck, Action: "login", Instance: "guard-1"})
	}
	if err := st.Insert(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, testConfig(), Deps{Audit: st})
	for i, tc := range cases {
		w := call(h, "GET", "/ui/events/"+ids[i], keyAudit, "")
		if w.Code != tc.want {
			t.Errorf("event %v after its id's time: status %d, want %d", tc.skew, w.Code, tc.want)
			continue
		}
		if tc.want == 200 && !strings.Contains(w.Body.String(), ids[i]) {
			t.Errorf("event %v after its id's time: page does not show it", tc.skew)
		}
	}
	// ?at= still finds the far one exactly.
	far := len(cases) - 1
	w := call(h, "GET", "/ui/events/"+ids[far]+"?at="+idAt.Add(cases[far].skew).Format(time.RFC3339Nano), keyAudit, "")
	if w.Code != 200 {
		t.Errorf("with ?at=: status %d, want 200", w.Code)
	}
}

// TestUISessionCookieSecure: Guard serves no TLS itself, so the session
// cookie is Secure for every host but a loopback one over plain HTTP, and
// for any request a reverse proxy forwarded.
func TestUISessionCookieSecure(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	tests := []struct {
		name, host string
		hdr        []string
		want       bool
	}{
		{"localhost", "localhost", nil, false},
		{"localhost with port", "localhost:8080", nil, false},
		{"a name under localhost", "guard.localhost:8080", nil, false},
		{"127.0.0.1 with port", "127.0.0.1:8080", nil, false},
		{"elsewhere in 127/8", "127.1.2.3", nil, false},
		{"IPv6 loopback", "[::1]", nil, false},
		{"IPv6 loopback with port", "[::1]:8080", nil, false},
		{"a public name", "guard.example", nil, true},
		{"a public name with port", "guard.example:8080", nil, true},
		{"a LAN address", "10.0.0.5:8080", nil, true},
		{"localhost as a prefix", "localhost.example", nil, true},
		{"proxied with Host rewritten to loopback", "127.0.0.1:8080", []string{"X-Forwarded-Proto", "https"}, true},
		{"proxied, forwarded host", "127.0.0.1:8080", []string{"X-Forwarded-Host", "guard.example"}, true},
		{"proxied, Forwarded", "localhost", []string{"Forwarded", "proto=https;host=guard.example"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := append([]string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html"}, tt.hdr...)
			w := call(h, "POST", "http://"+tt.host+"/ui/login", "", "key="+keyAudit, hdr...)
			res := w.Result()
			ck := res.Cookies()
			if w.Code != 303 || len(ck) != 1 {
				t.Fatalf("sign-in = %d, cookies %v; want 303 and one cookie", w.Code, ck)
			}
			if got := ck[0].Secure; got != tt.want {
				t.Errorf("Secure = %v; want %v", got, tt.want)
			}
		})
	}
}

// fakeClock is a settable clock for Deps.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// sessionCall sends one review request with the session cookie v and
// returns the status and the renewed cookie's value ("" when none).
func sessionCall(h http.Handler, method, target, v string, form url.Values) (int, string) {
	body, hdr := "", []string{"Accept", "text/html", "Cookie", sessionCookie + "=" + v}
	if form != nil {
		body = form.Encode()
		hdr = append(hdr, "Content-Type", "application/x-www-form-urlencoded")
	}
	w := call(h, method, "http://localhost"+target, "", body, hdr...)
	for _, ck := range w.Result().Cookies() {
		if ck.Name == sessionCookie {
			return w.Code, ck.Value
		}
	}
	return w.Code, ""
}

func signInCookie(t *testing.T, h http.Handler) string {
	t.Helper()
	w := call(h, "POST", "http://localhost/ui/login", "", "key="+keyAudit,
		"Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html")
	for _, ck := range w.Result().Cookies() {
		if ck.Name == sessionCookie {
			return ck.Value
		}
	}
	t.Fatalf("sign-in = %d without a session cookie", w.Code)
	return ""
}

// TestUISessionRevocationOutlivesRenewedCopies: a session keeps its nonce
// when renewed, so a copy renewed before the sign-out expires after the
// cookie signed out with; the revocation must outlive it.
func TestUISessionRevocationOutlivesRenewedCopies(t *testing.T) {
	clock := &fakeClock{t: t0}
	h := newTestHandler(t, testConfig(), Deps{Now: clock.Now})
	at := func(d time.Duration) { clock.Set(t0.Add(d)) }

	victim := signInCookie(t, h)
	// 20 minutes in, the thief's copy is renewed (to t0+50m); the
	// victim, without a page view since, signs out a minute later with
	// the cookie that expires at t0+30m.
	at(20 * time.Minute)
	code, stolen := sessionCall(h, "GET", "/ui/events", victim, nil)
	if code != 200 || stolen == "" {
		t.Fatalf("copy at t0+20m: %d, renewed %v; want 200 and a renewal", code, stolen != "")
	}
	at(21 * time.Minute)
	if code := signOut(t, h, victim); code != 303 {
		t.Fatalf("sign-out: %d", code)
	}
	for _, d := range []time.Duration{22 * time.Minute, 31 * time.Minute, 49 * time.Minute} {
		at(d)
		// Another session's sign-out prunes the revocations that ended.
		signOut(t, h, signInCookie(t, h))
		if code, _ := sessionCall(h, "GET", "/ui/events", stolen, nil); code != 303 {
			t.Errorf("renewed copy at t0+%v, after the sign-out: %d; want 303 to sign in", d, code)
		}
	}
}

// TestUISessionLifetime: page views renew a session, but not past
// SessionLifetime from sign-in.
func TestUISessionLifetime(t *testing.T) {
	clock := &fakeClock{t: t0}
	h := newTestHandler(t, testConfig(), Deps{Now: clock.Now})
	v := signInCookie(t, h)
	end := t0.Add(SessionLifetime)
	for d := 20 * time.Minute; ; d += 20 * time.Minute {
		clock.Set(t0.Add(d))
		code, renewed := sessionCall(h, "GET", "/ui/events", v, nil)
		if !clock.Now().Before(end) {
			if code != 303 {
				t.Errorf("page view at sign-in + %v: %d; want 303 to sign in", d, code)
			}
			break
		}
		if code != 200 {
			t.Fatalf("page view at sign-in + %v: %d; want 200", d, code)
		}
		if renewed != "" {
			v = renewed
		}
	}
	w := call(h, "GET", "http://localhost/ui/events", "", "", "Accept", "text/html", "Cookie", sessionCookie+"="+v)
	if w.Code != 303 {
		t.Errorf("the last cookie after the lifetime: %d; want 303", w.Code)
	}
}

// signOut signs the session of cookie v out with the token of its page.
func signOut(t *testing.T, h http.Handler, v string) int {
	t.Helper()
	page := call(h, "GET", "http://localhost/ui/events", "", "", "Accept", "text/html", "Cookie", sessionCookie+"="+v).Body.String()
	const marker = `name="csrf" value="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no CSRF token in the page")
	}
	rest := page[i+len(marker):]
	code, _ := sessionCall(h, "POST", "/ui/logout", v, url.Values{"csrf": {rest[:strings.IndexByte(rest, '"')]}})
	return code
}

// TestUIMessagesEchoNoLinkText: a link is anyone's to craft, and the
// pages state their messages as Guard's; so no message repeats free text
// from the query or the path, only values of a fixed shape (a count, a
// ULID).
func TestUIMessagesEchoNoLinkText(t *testing.T) {
	const text = "Call support at 555-0100"
	q := url.QueryEscape(text)
	guard := &fakeGuard{lockouts: func(_ context.Context, f abuse.LockoutFilter) (abuse.LockoutPage, error) {
		if f.Ledger != "" {
			return abuse.LockoutPage{}, &abuse.InputError{Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", f.Ledger)}
		}
		return abuse.LockoutPage{}, nil
	}}
	h := newTestHandler(t, testConfig(), Deps{Guard: guard})
	id := "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	tests := []struct {
		name, target string
		wantCode     int
		want         string // in the page, when set
	}{
		{"unlocked count", "/ui/lockouts?done=unlocked&n=3", 200, "Unlocked 3 lockout(s)."},
		{"unlocked count with text", "/ui/lockouts?done=unlocked&n=" + q, 200, ""},
		{"unlocked count, negative", "/ui/lockouts?done=unlocked&n=-1", 200, ""},
		{"missing event with a text id", "/ui/events/" + url.PathEscape(text) + "?at=2026-03-01T12:00:00Z", 404, "No such event at 2026-03-01T12:00:00Z."},
		{"missing event with a ULID", "/ui/events/" + id + "?at=2026-03-01T12:00:00Z", 404, "No event " + id + " at 2026-03-01T12:00:00Z."},
		{"unknown parameter on the lockouts page", "/ui/lockouts?" + q + "=1", 400, "query parameter this page does not take"},
		{"unknown parameter on the events page", "/ui/events?" + q + "=1", 400, "query parameter this page does not take"},
		{"unknown parameter on an event page", "/ui/events/" + id + "?" + q + "=1", 400, "query parameter this page does not take"},
		{"unknown parameter on the overview", "/ui/?" + q + "=1", 400, "query parameter this page does not take"},
		{"unknown ledger", "/ui/lockouts?ledger=" + q, 400, "ledger is not a lockout ledger of the policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, "GET", tt.target, keyAdmin, "", "Accept", "text/html")
			body := w.Body.String()
			if w.Code != tt.wantCode {
				t.Errorf("status = %d; want %d", w.Code, tt.wantCode)
			}
			if strings.Contains(body, text) || strings.Contains(body, template.HTMLEscapeString(text)) {
				t.Errorf("the page repeats the link's text:\n%s", body)
			}
			if tt.want != "" && !strings.Contains(body, tt.want) {
				t.Errorf("the page lacks %q:\n%s", tt.want, body)
			}
			if tt.want == "" && strings.Contains(body, `id="done"`) {
				t.Errorf("the page has a success message for a bad count:\n%s", body)
			}
		})
	}
}
