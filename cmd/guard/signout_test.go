package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestReviewSignOutOnEveryInstance: two `guard serve` on one database
// (one key_secret, so each accepts the other's session cookie); signing
// out on one ends the session on the other at once.
func TestReviewSignOutOnEveryInstance(t *testing.T) {
	dbURL := testenv.Database(t, "guard_cmd_")
	env := map[string]string{"GUARD_DATABASE_URL": dbURL}
	a := startGuard(t, e2eConfig(t.TempDir()), env, "--migrate")
	b := startGuard(t, e2eConfig(t.TempDir()), env)
	client := &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, target, cookie string, form url.Values) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, target, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/html")
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.Header.Set("Cookie", "guard_session="+cookie)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		return resp, string(page)
	}

	resp, _ := send("POST", a.base+"/ui/login", "", url.Values{"key": {auditKey}})
	var session string
	for _, ck := range resp.Cookies() {
		if ck.Name == "guard_session" {
			session = ck.Value
		}
	}
	if resp.StatusCode != 303 || session == "" {
		t.Fatalf("sign-in on a: %d, cookie %q; want 303 and a session", resp.StatusCode, session)
	}
	resp, page := send("GET", b.base+"/ui/events", session, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("b with a's cookie: %d; want 200", resp.StatusCode)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token in b's page")
	}
	if resp, _ := send("POST", a.base+"/ui/logout", session, url.Values{"csrf": {m[1]}}); resp.StatusCode != 303 {
		t.Fatalf("sign-out on a: %d; want 303", resp.StatusCode)
	}
	if resp, _ := send("GET", b.base+"/ui/events", session, nil); resp.StatusCode != 303 ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("b after the sign-out on a: %d to %q; want 303 to /ui/login", resp.StatusCode, resp.Header.Get("Location"))
	}
}
