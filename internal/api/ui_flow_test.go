package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/limits"
)

// uiClient is a cookie-keeping HTTP client that does not follow
// redirects, so tests see each answer.
func uiClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, target string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func form(v url.Values) (io.Reader, []string) {
	return strings.NewReader(v.Encode()), []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html"}
}

// csrfOf reads the CSRF token from a page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	const marker = `name="csrf" value="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no CSRF token in the page")
	}
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestUISessionAndCSRF(t *testing.T) {
	s := newUIStack(t)
	s.seed(t)
	base := s.srv.URL
	c := uiClient(t)

	// A browser without a session is sent to the sign-in form; a script
	// gets 401 with a Basic challenge.
	resp, _ := do(t, c, "GET", base+"/ui/events?user=x", nil, "Accept", "text/html")
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/login?next=%2Fui%2Fevents%3Fuser%3Dx" {
		t.Errorf("browser without session: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = do(t, c, "GET", base+"/ui/events", nil)
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("script without credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, page := do(t, c, "GET", base+"/ui/login", nil)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP = %q; want nothing but self styles", csp)
	}
	if strings.Contains(page, "<script") || strings.Contains(page, " style=") || strings.Contains(page, " on") && strings.Contains(page, "onclick") {
		t.Errorf("the sign-in page has inline script or style")
	}

	// Sign-in: a wrong key, an off-site post and a good key.
	body, h := form(url.Values{"key": {"nope"}, "next": {"/ui/lockouts"}})
	if resp, _ := do(t, c, "POST", base+"/ui/login", body, h...); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("wrong key: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	body, h = form(url.Values{"key": {uiAdminKey}})
	if resp, _ := do(t, c, "POST", base+"/ui/login", body, append(h, "Origin", "https://evil.example")...); resp.StatusCode != 403 {
		t.Errorf("sign-in posted from another site: %d; want 403", resp.StatusCode)
	}
	body, h = form(url.Values{"key": {uiAdminKey}})
	if resp, _ := do(t, c, "POST", base+"/ui/login", body, append(h, "Origin", "null")...); resp.StatusCode != 403 {
		t.Errorf("sign-in posted from an opaque origin: %d; want 403", resp.StatusCode)
	}
	// Behind a reverse proxy the public host arrives as X-Forwarded-Host.
	body, h = form(url.Values{"key": {uiAuditKey}})
	if resp, _ := do(t, uiClient(t), "POST", base+"/ui/login", body, append(h, "Origin", "https://guard.example", "X-Forwarded-Host", "guard.example")...); resp.StatusCode != 303 {
		t.Errorf("sign-in through a proxy: %d; want 303", resp.StatusCode)
	}
	body, h = form(url.Values{"key": {uiAdminKey}, "next": {"//evil.example/"}})
	resp, _ = do(t, c, "POST", base+"/ui/login", body, h...)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in: %d to %q; want 303 to /ui/ (an off-site next is ignored)", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Secure || ck[0].MaxAge != 1800 {
		t.Errorf("session cookie = %+v; want HttpOnly, SameSite=Strict, 30 min, not Secure over plain HTTP to loopback", ck)
	}

	// State changes need the session's CSRF token.
	_, page = do(t, c, "GET", base+"/ui/lockouts?user="+url.QueryEscape(victim), nil, "Accept", "text/html")
	token := csrfOf(t, page)
	// A wrong token differs in its first character (the token's own first
	// character is one of 64: "x" + token[1:] was the token itself once in
	// 64 runs, and the unlock then went through).
	wrong := "x" + token[1:]
	if token[0] == 'x' {
		wrong = "y" + token[1:]
	}
	unlock := url.Values{"dimension": {"user+ip"}, "user": {victim}, "ip": {victimIP}, "ledger": {"auth"}, "reason": {"test"}}
	for _, tc := range []struct {
		name  string
		csrf  string
		extra []string
	}{
		{"no token", "", nil},
		{"wrong token", wrong, nil},
		{"another site", token, []string{"Origin", "https://evil.example"}},
	} {
		v := url.Values{}
		for k, vs := range unlock {
			v[k] = vs
		}
		if tc.csrf != "" {
			v.Set("csrf", tc.csrf)
		}
		body, h := form(v)
		if resp, _ := do(t, c, "POST", base+"/ui/lockouts/unlock", body, append(h, tc.extra...)...); resp.StatusCode != 403 {
			t.Errorf("%s: unlock answered %d; want 403", tc.name, resp.StatusCode)
		}
	}
	if d := s.check(t, "login", victim, victimIP, ""); d.Reason != "locked_out" {
		t.Fatalf("victim after refused unlocks: %s", d.Reason)
	}
	// HTTP Basic needs the token too (a browser replays Basic credentials
	// on a forged cross-site post); a Bearer header cannot be forged.
	basic := &http.Client{CheckRedirect: c.CheckRedirect}
	body, h = form(unlock)
	req, _ := http.NewRequest("POST", base+"/ui/lockouts/unlock", body)
	req.Header.Set(h[0], h[1])
	req.SetBasicAuth("", uiAdminKey)
	if resp, err := basic.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("Basic unlock without token: %v %v; want 403", resp.StatusCode, err)
	}
	// A missing reason is refused even with the token.
	v := url.Values{"csrf": {token}}
	for k, vs := range unlock {
		v[k] = vs
	}
	v.Del("reason")
	body, h = form(v)
	if resp, page := do(t, c, "POST", base+"/ui/lockouts/unlock", body, h...); resp.StatusCode != 400 || !strings.Contains(page, "needs a reason") {
		t.Errorf("unlock without reason: %d", resp.StatusCode)
	}
	v.Set("reason", "verified")
	body, h = form(v)
	if resp, _ := do(t, c, "POST", base+"/ui/lockouts/unlock", body, h...); resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/lockouts?done=unlocked" {
		t.Errorf("unlock with token: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if d := s.check(t, "login", victim, victimIP, ""); d.Reason != "ok" {
		t.Errorf("victim after the unlock: %s", d.Reason)
	}

	// An audit:read session may look but not act.
	ro := uiClient(t)
	body, h = form(url.Values{"key": {uiAuditKey}})
	do(t, ro, "POST", base+"/ui/login", body, h...)
	_, page = do(t, ro, "GET", base+"/ui/lockouts", nil, "Accept", "text/html")
	v = url.Values{"csrf": {csrfOf(t, page)}, "dimension": {"ip"}, "ip": {"192.0.2.99"}, "duration": {"1h"}, "reason": {"x"}}
	body, h = form(v)
	if resp, _ := do(t, ro, "POST", base+"/ui/lockouts/lock", body, h...); resp.StatusCode != 403 {
		t.Errorf("audit:read lock: %d; want 403", resp.StatusCode)
	}

	// Sign-out ends the session, also for a copy of the cookie.
	u, _ := url.Parse(base + "/ui/")
	stolen := ro.Jar.Cookies(u)
	body, h = form(url.Values{"csrf": {csrfOf(t, page)}})
	if resp, _ := do(t, ro, "POST", base+"/ui/logout", body, h...); resp.StatusCode != 303 {
		t.Errorf("sign out: %d", resp.StatusCode)
	}
	replay := uiClient(t)
	replay.Jar.SetCookies(u, stolen)
	if resp, _ := do(t, replay, "GET", base+"/ui/events", nil, "Accept", "text/html"); resp.StatusCode != 303 {
		t.Errorf("signed-out cookie replayed: %d; want a redirect to sign in", resp.StatusCode)
	}
	// Signing out without a session only clears the cookie.
	body, h = form(url.Values{})
	if resp, _ := do(t, uiClient(t), "POST", base+"/ui/logout", body, h...); resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/login" {
		t.Errorf("sign out without a session: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A tampered cookie is no session.
	bad := uiClient(t)
	bad.Jar.SetCookies(u, []*http.Cookie{{Name: "guard_session", Value: strings.Replace(stolen[0].Value, "v1.", "v1.x", 1), Path: "/ui"}})
	if resp, _ := do(t, bad, "GET", base+"/ui/events", nil); resp.StatusCode != 401 {
		t.Errorf("tampered cookie: %d; want 401", resp.StatusCode)
	}
}

func TestUIExportAndTimes(t *testing.T) {
	s := newUIStack(t)
	s.seed(t)
	base := s.srv.URL
	c := uiClient(t)
	auth := []string{"Authorization", "Bearer " + uiAuditKey}
	resp, body := do(t, c, "GET", base+"/ui/export?format=csv&user=alice@example.com&since=1h", nil, auth...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" ||
		!strings.HasPrefix(resp.Header.Get("Content-Disposition"), `attachment; filename="guard-audit-`) {
		t.Fatalf("csv export: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"))
	}
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) != 13 || !strings.HasPrefix(lines[0], "id,at,kind") {
		t.Errorf("csv export: %d lines (want a header and alice's 12 checks):\n%s", len(lines), body)
	}
	resp, body = do(t, c, "GET", base+"/ui/export?format=ndjson&ip=203.0.113.66&kind=check", nil, auth...)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil || e["ip"] != "203.0.113.66" {
			t.Errorf("ndjson line %q: %v", l, err)
		}
		n++
	}
	if resp.StatusCode != 200 || n != 4 {
		t.Errorf("ndjson export: %d, %d events; want 4", resp.StatusCode, n)
	}
	for _, tc := range []struct {
		query, field string
	}{
		{"since=yesterday", "since"},
		{"until=3weeks", "until"},
		{"since=2026-01-02T10:00:00%2B24:00", "since"},
		{"until=2026-01-02T10:00:00-00:60", "until"},
		{"since=1h&since_at=2026-01-02T10:00", "since_at"},
		{"since=1h&until=2h", "until"},
		{"cursor=abc&newer=def", "newer"},
		{"format=xml", "format"},
	} {
		path := "/ui/events?"
		if strings.HasPrefix(tc.query, "format") {
			path = "/ui/export?"
		}
		resp, body := do(t, c, "GET", base+path+tc.query, nil, auth...)
		var e struct {
			Error struct{ Field string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || e.Error.Field != tc.field {
			t.Errorf("%s: %d field %q; want 400 field %s", tc.query, resp.StatusCode, e.Error.Field, tc.field)
		}
	}
	for _, q := range []string{"since=15m", "since=7d", "since=2026-01-02", "since_at=2026-01-02T10:00&until=1m", "until_at=2099-01-02T10:00:30"} {
		if resp, _ := do(t, c, "GET", base+"/ui/events?"+q, nil, auth...); resp.StatusCode != 200 {
			t.Errorf("%s: %d; want 200", q, resp.StatusCode)
		}
	}
}

func TestManualLockoutAPI(t *testing.T) {
	s := newUIStack(t)
	base := s.srv.URL
	c := uiClient(t)
	admin := []string{"Authorization", "Bearer " + uiAdminKey, "Content-Type", "application/json"}
	post := func(body string, hdr []string) (*http.Response, string) {
		return do(t, c, "POST", base+"/v1/lockouts", strings.NewReader(body), hdr...)
	}
	for _, tc := range []struct {
		body, field string
	}{
		{`{"ip": "203.0.113.9", "duration_ms": 60000}`, "dimension"},
		{`{"dimension": "email", "ip": "203.0.113.9", "duration_ms": 60000}`, "dimension"},
		{`{"dimension": "ip", "ip": "203.0.113.9"}`, "duration_ms"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 999}`, "duration_ms"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 2592000001}`, "duration_ms"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": "1h"}`, "duration_ms"},
		{`{"dimension": "ip", "duration_ms": 60000}`, "ip"},
		{`{"dimension": "ip", "ip": "203.0.113.09", "duration_ms": 60000}`, "ip"},
		{`{"dimension": "user+ip", "ip": "203.0.113.9", "duration_ms": 60000}`, "user"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 60000, "ledger": "nope"}`, "ledger"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 60000, "ledger": ""}`, "ledger"},
		{`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 60000, "until": 1}`, "until"},
	} {
		resp, body := post(tc.body, admin)
		var e struct {
			Error struct{ Field string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || e.Error.Field != tc.field {
			t.Errorf("%s: %d %s; want 400 field %s", tc.body, resp.StatusCode, body, tc.field)
		}
	}
	if resp, _ := post(`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 60000}`, []string{"Authorization", "Bearer " + uiAuditKey, "Content-Type", "application/json"}); resp.StatusCode != 403 {
		t.Errorf("audit:read key: %d; want 403", resp.StatusCode)
	}
	resp, body := post(`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 3600000, "reason": "scanner"}`, admin)
	var got struct {
		Lockouts []struct {
			Ledger, Dimension, IP string
			Level                 int
			Since, Until          string
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 201 || len(got.Lockouts) != 2 {
		t.Fatalf("manual lock: %d %s; want 201 with one entry per ledger", resp.StatusCode, body)
	}
	if strings.Contains(body, "next_cursor") {
		t.Errorf("manual lock answer %s: a listing's next_cursor in it", body)
	}
	for _, l := range got.Lockouts {
		if l.Dimension != "ip" || l.IP != "203.0.113.9" || l.Level != 0 || l.Since == "" || l.Until == "" {
			t.Errorf("entry %+v", l)
		}
	}
	if d := s.check(t, "login", "anyone", "203.0.113.9", ""); d.Reason != "locked_out" {
		t.Errorf("check from the locked IP: %s", d.Reason)
	}

	// Paging: three more locks, two per page.
	for _, ip := range []string{"203.0.113.10", "203.0.113.11", "203.0.113.12"} {
		if resp, body := post(`{"dimension": "ip", "ip": "`+ip+`", "duration_ms": 60000, "ledger": "auth"}`, admin); resp.StatusCode != 201 {
			t.Fatalf("lock %s: %d %s", ip, resp.StatusCode, body)
		}
	}
	seen := map[string]int{}
	next := base + "/v1/lockouts?limit=2"
	pages := 0
	for next != "" {
		pages++
		resp, body := do(t, c, "GET", next, nil, admin[:2]...)
		var p struct {
			Lockouts []struct{ Ledger, IP string }
			Next     *string `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("page %d: %d %s", pages, resp.StatusCode, body)
		}
		for _, l := range p.Lockouts {
			seen[l.Ledger+" "+l.IP]++
		}
		next = ""
		if p.Next != nil {
			next = base + "/v1/lockouts?limit=2&cursor=" + url.QueryEscape(*p.Next)
			if tampered, _ := do(t, c, "GET", base+"/v1/lockouts?cursor="+url.QueryEscape((*p.Next)[:len(*p.Next)-2]+"AA"), nil, admin[:2]...); tampered.StatusCode != 400 {
				t.Errorf("tampered cursor: %d; want 400", tampered.StatusCode)
			}
		}
	}
	if pages != 3 || len(seen) != 5 {
		t.Errorf("%d pages, entries %v; want 3 pages of 5 distinct entries", pages, seen)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=nope"} {
		if resp, _ := do(t, c, "GET", base+"/v1/lockouts?"+q, nil, admin[:2]...); resp.StatusCode != 400 {
			t.Errorf("%s: %d; want 400", q, resp.StatusCode)
		}
	}
	// DELETE lifts a manual lock like any other.
	resp, body = do(t, c, "DELETE", base+"/v1/lockouts", strings.NewReader(`{"dimension": "ip", "ip": "203.0.113.9", "reason": "done"}`), admin...)
	if resp.StatusCode != 200 {
		t.Errorf("unlock: %d %s", resp.StatusCode, body)
	}
	if d := s.check(t, "login", "anyone", "203.0.113.9", ""); d.Reason != "ok" {
		t.Errorf("check after the unlock: %s", d.Reason)
	}
}

// TestUISessionCookieSecureOverTLS: served over TLS, the session cookie
// is Secure.
func TestUISessionCookieSecureOverTLS(t *testing.T) {
	s := newUIStack(t)
	tlsSrv := httptest.NewTLSServer(s.srv.Config.Handler)
	defer tlsSrv.Close()
	c := tlsSrv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	body, h := form(url.Values{"key": {uiAuditKey}})
	resp, _ := do(t, c, "POST", tlsSrv.URL+"/ui/login", body, h...)
	ck := resp.Cookies()
	if resp.StatusCode != 303 || len(ck) != 1 || !ck[0].Secure || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("over TLS: %d, cookies %+v; want one Secure, HttpOnly, SameSite=Strict cookie", resp.StatusCode, ck)
	}
}

// TestUIPivotPseudonymized: with audit.pseudonymize events hold keyed
// hashes; a pivot link matches the hash as stored (hashing it again would
// find nothing), while a typed identifier is hashed as usual.
func TestUIPivotPseudonymized(t *testing.T) {
	s := newUIStack(t, func(c *abuse.Config) { c.Pseudonymize = true })
	for range 2 {
		s.check(t, "login", "alice@example.com", "203.0.113.7", "phone-1")
	}
	s.check(t, "login", "bob@example.com", "203.0.113.8", "")
	s.settle(t)
	c := uiClient(t)
	auth := []string{"Authorization", "Bearer " + uiAuditKey}
	_, page := do(t, c, "GET", s.srv.URL+"/ui/events?user=alice@example.com", nil, auth...)
	if n := strings.Count(page, `class="detail"`); n != 2 {
		t.Fatalf("typed user: %d events; want 2", n)
	}
	if strings.Contains(page, "alice@example.com</") {
		t.Error("a pseudonymised page shows the raw user")
	}
	for _, field := range []string{"user", "ip", "device"} {
		i := strings.Index(page, `href="/ui/events?`+field+`_exact=`)
		if i < 0 {
			t.Fatalf("no exact %s pivot link in the page", field)
		}
		href := page[i+len(`href="`):]
		href = strings.ReplaceAll(href[:strings.IndexByte(href, '"')], "&amp;", "&")
		_, got := do(t, c, "GET", s.srv.URL+href, nil, auth...)
		if n := strings.Count(got, `class="detail"`); n != 2 {
			t.Errorf("pivot on the stored %s (%s): %d events; want alice's 2", field, href, n)
		}
		if !strings.Contains(got, `id="exact-`+field+`"`) {
			t.Errorf("pivot on %s: the form does not show the exact value", field)
		}
	}
	if resp, _ := do(t, c, "GET", s.srv.URL+"/ui/events?user=x&user_exact=y", nil, auth...); resp.StatusCode != 400 {
		t.Errorf("user and user_exact: %d; want 400", resp.StatusCode)
	}
	// An event's page links to all events of its subject by the stored
	// value too.
	i := strings.Index(page, `href="/ui/events/`)
	if i < 0 {
		t.Fatal("no event link in the page")
	}
	href := page[i+len(`href="`):]
	href = strings.ReplaceAll(href[:strings.IndexByte(href, '"')], "&amp;", "&")
	_, event := do(t, c, "GET", s.srv.URL+href, nil, auth...)
	j := strings.Index(event, `">All events of this user`)
	if j < 0 {
		t.Fatalf("event page %s has no link to the user's events", href)
	}
	k := strings.LastIndex(event[:j], `href="`)
	all := strings.ReplaceAll(event[k+len(`href="`):j], "&amp;", "&")
	if _, got := do(t, c, "GET", s.srv.URL+all, nil, auth...); strings.Count(got, `class="detail"`) != 2 {
		t.Errorf("the event page's link to its user's events (%s) finds %d; want alice's 2", all, strings.Count(got, `class="detail"`))
	}
}

// TestUIBulkUnlock: ticked lockouts, then every lockout matching the
// filter, are lifted with one reason, each audited.
func TestUIBulkUnlock(t *testing.T) {
	s := newUIStack(t)
	ctx := context.Background()
	ips := []string{"192.0.2.41", "192.0.2.42", "192.0.2.43", "192.0.2.44"}
	for _, ip := range ips {
		if _, err := s.guard.Lock(ctx, abuse.LockInput{Dimension: "ip", Subject: subject("", ip, ""), Ledger: "auth", Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.guard.Lock(ctx, abuse.LockInput{Dimension: "ip", Subject: subject("", "192.0.2.99", ""), Ledger: "otp_send", Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c := uiClient(t)
	body, h := form(url.Values{"key": {uiAdminKey}})
	do(t, c, "POST", s.srv.URL+"/ui/login", body, h...)
	_, page := do(t, c, "GET", s.srv.URL+"/ui/lockouts?ledger=auth", nil, "Accept", "text/html")
	token := csrfOf(t, page)
	sel := func(ip string) string {
		return url.Values{"dimension": {"ip"}, "ledger": {"auth"}, "ip": {ip}}.Encode()
	}

	body, h = form(url.Values{"csrf": {token}, "sel": {sel(ips[0]), sel(ips[1])}})
	if resp, page := do(t, c, "POST", s.srv.URL+"/ui/lockouts/unlock-many", body, h...); resp.StatusCode != 400 || !strings.Contains(page, "needs a reason") {
		t.Errorf("bulk unlock without reason: %d", resp.StatusCode)
	}
	body, h = form(url.Values{"csrf": {token}, "reason": {"false positives"}})
	if resp, _ := do(t, c, "POST", s.srv.URL+"/ui/lockouts/unlock-many", body, h...); resp.StatusCode != 400 {
		t.Errorf("bulk unlock of nothing: %d; want 400", resp.StatusCode)
	}
	body, h = form(url.Values{"csrf": {token}, "reason": {"false positives"}, "sel": {sel(ips[0]), sel(ips[1])}})
	resp, _ := do(t, c, "POST", s.srv.URL+"/ui/lockouts/unlock-many", body, h...)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/lockouts?done=unlocked&n=2" {
		t.Fatalf("bulk unlock: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for i, ip := range ips {
		want := "locked_out"
		if i < 2 {
			want = "ok"
		}
		if d := s.check(t, "login", "", ip, ""); d.Reason != want {
			t.Errorf("%s after unlocking the first two: %s; want %s", ip, d.Reason, want)
		}
	}
	body, h = form(url.Values{"csrf": {token}, "reason": {"incident closed"}, "all": {"1"}, "ledger": {"auth"}})
	resp, _ = do(t, c, "POST", s.srv.URL+"/ui/lockouts/unlock-many", body, h...)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui/lockouts?done=unlocked&n=2" {
		t.Fatalf("unlock all of ledger auth: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	left, err := s.guard.Lockouts(ctx, abuse.LockoutFilter{})
	if err != nil || len(left.Lockouts) != 1 || left.Lockouts[0].Ledger != "otp_send" {
		t.Errorf("left locked: %+v, %v; want only the otp_send lock outside the filter", left, err)
	}
	_, page = do(t, c, "GET", s.srv.URL+"/ui/lockouts?done=unlocked&n=2", nil, "Accept", "text/html")
	if strings.Count(page, "incident closed") != 2 || strings.Count(page, "false positives") != 2 {
		t.Errorf("the admin events list lacks the four unlocks")
	}
}

// failingUnlocks is a store whose n-th Unlock fails as an unreachable
// Redis would.
type failingUnlocks struct {
	limits.Store
	calls, fail int
}

func (f *failingUnlocks) Unlock(ctx context.Context, req *limits.UnlockRequest) (bool, error) {
	f.calls++
	if f.calls == f.fail {
		return false, limits.ErrUnavailable
	}
	return f.Store.Unlock(ctx, req)
}

// TestUIBulkUnlockGoesOnPastAFailure: one lockout the store cannot lift
// does not keep the others from being lifted; the page says how many
// were not (503), and the one that failed is still locked.
func TestUIBulkUnlockGoesOnPastAFailure(t *testing.T) {
	s := newUIStackStore(t, func(st limits.Store) limits.Store { return &failingUnlocks{Store: st, fail: 2} })
	ctx := context.Background()
	ips := []string{"192.0.2.51", "192.0.2.52", "192.0.2.53"}
	for _, ip := range ips {
		if _, err := s.guard.Lock(ctx, abuse.LockInput{Dimension: "ip", Subject: subject("", ip, ""), Ledger: "auth", Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	c := uiClient(t)
	body, h := form(url.Values{"key": {uiAdminKey}})
	do(t, c, "POST", s.srv.URL+"/ui/login", body, h...)
	_, page := do(t, c, "GET", s.srv.URL+"/ui/lockouts?ledger=auth", nil, "Accept", "text/html")
	var sels []string
	for _, ip := range ips {
		sels = append(sels, url.Values{"dimension": {"ip"}, "ledger": {"auth"}, "ip": {ip}}.Encode())
	}
	body, h = form(url.Values{"csrf": {csrfOf(t, page)}, "reason": {"outage"}, "sel": sels})
	resp, page := do(t, c, "POST", s.srv.URL+"/ui/lockouts/unlock-many", body, h...)
	if resp.StatusCode != 503 || !strings.Contains(page, "2 lifted; 1 could not be lifted") {
		t.Errorf("bulk unlock with one failure: %d; want 503 saying 2 lifted, 1 not", resp.StatusCode)
	}
	locked := 0
	for _, ip := range ips {
		if d := s.check(t, "login", "", ip, ""); d.Reason == "locked_out" {
			locked++
		}
	}
	if locked != 1 {
		t.Errorf("%d of 3 still locked, want the one that failed", locked)
	}
}
