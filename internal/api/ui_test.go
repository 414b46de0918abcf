package api

import (
	"context"
	"encoding/base64"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
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
