package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

// Every GET route answers HEAD, with GET's status and headers and no body
// (RFC 9110 §9.3.2): HAProxy's `option httpchk HEAD /healthz` among others.
func TestHeadOnEveryGetRoute(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	e, ok := h.(*gin.Engine)
	if !ok {
		t.Fatalf("handler is %T, want *gin.Engine", h)
	}
	heads := map[string]bool{}
	var gets []string
	for _, r := range e.Routes() {
		switch r.Method {
		case http.MethodHead:
			heads[r.Path] = true
		case http.MethodGet:
			gets = append(gets, r.Path)
		}
	}
	if len(gets) == 0 {
		t.Fatal("no GET routes")
	}
	for _, p := range gets {
		if !heads[p] {
			t.Errorf("GET %s has no HEAD route", p)
		}
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct{ path, key string }{
		{"/ui", keyAudit},          // a redirect
		{"/ui/events?browser", ""}, // a browser without a session: to the sign-in form
		{"/healthz", ""},
		{"/readyz", ""},
		{"/metrics", ""},
		{"/v1/audit", keyAudit},
		{"/v1/policy", keyAdmin},
		{"/v1/lockouts", keyAdmin},
		{"/ui/events", keyAudit},
		{"/ui/", keyAudit},
		{"/ui/lockouts", keyAdmin},
		{"/ui/login", ""},
		{"/ui/static/guard.css", ""},
		{"/ui/export?format=csv", keyAudit},
		{"/v1/audit?limit=0", keyAudit}, // an error answers HEAD too
		{"/v1/audit", ""},
	} {
		t.Run(tc.path+"/"+tc.key, func(t *testing.T) {
			get := do(t, srv, http.MethodGet, tc.path, tc.key)
			head := do(t, srv, http.MethodHead, tc.path, tc.key)
			if head.status != get.status {
				t.Errorf("HEAD status %d, GET %d", head.status, get.status)
			}
			if head.body != "" {
				t.Errorf("HEAD answered a body: %q", head.body)
			}
			for _, k := range []string{"Content-Type", "Cache-Control", "Www-Authenticate", "Location", "Content-Length"} {
				if k == "Content-Length" && head.header.Get(k) == "" && get.header.Get(k) == "" {
					continue
				}
				if k == "Content-Length" && strings.Contains(get.header.Get("Content-Type"), "csv") {
					continue // exports stream; HEAD does not run them
				}
				if head.header.Get(k) != get.header.Get(k) {
					t.Errorf("HEAD %s = %q, GET %q", k, head.header.Get(k), get.header.Get(k))
				}
			}
			if head.header.Get("X-Request-Id") == "" {
				t.Error("HEAD answer without X-Request-Id")
			}
		})
	}
}

// A HEAD on an export asks for its headers: the store is asked (so a
// store that cannot answer is 503 as for GET), but no more than its first
// event is read.
func TestHeadOnExportDoesNotStream(t *testing.T) {
	read := 0
	h := newTestHandler(t, testConfig(), Deps{Audit: &fakeAudit{stream: func(_ context.Context, _ audit.Filter, fn func(audit.Event) error) error {
		for range 1000 {
			read++
			if err := fn(audit.Event{ID: "01JDXYZABCDEFGHJKMNPQRSTVW", At: t0, Kind: audit.KindCheck}); err != nil {
				return err
			}
		}
		return nil
	}}})
	w := call(h, http.MethodHead, "/v1/audit", keyAudit, "", "Accept", "text/csv")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") || w.Body.Len() != 0 {
		t.Errorf("HEAD export: status %d, Content-Type %q, %d body bytes; want 200 text/csv, none", w.Code, w.Header().Get("Content-Type"), w.Body.Len())
	}
	if read != 1 {
		t.Errorf("HEAD read %d events of the export; want 1", read)
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, srv *httptest.Server, method, path, key string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if strings.HasSuffix(path, "?browser") {
		req.Header.Set("Accept", "text/html")
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// Every answer carries X-Request-Id; every error body carries the same id
// as request_id (errorOf checks it).
func TestRequestIDOnEveryAnswer(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{
		check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) {
			return abuse.Decision{}, dependency(context.DeadlineExceeded)
		},
	}})
	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
	}{
		{"ok", "GET", "/healthz", "", "", 200},
		{"not found", "GET", "/nope", "", "", 404},
		{"method", "PUT", "/v1/check", keyCheck, "", 405},
		{"unauthenticated", "GET", "/v1/audit", "", "", 401},
		{"forbidden", "GET", "/v1/audit", keyCheck, "", 403},
		{"bad input", "GET", "/v1/audit?limit=x", keyAudit, "", 400},
		{"too large", "POST", "/v1/check", keyCheck, `{"action":"` + strings.Repeat("a", 9000) + `"}`, 413},
		{"unavailable", "POST", "/v1/check", keyCheck, `{"action":"login","user":"a"}`, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := call(h, tc.method, tc.path, tc.key, tc.body)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tc.status, w.Body)
			}
			if w.Header().Get("X-Request-Id") == "" {
				t.Fatal("no X-Request-Id")
			}
			if tc.status >= 400 {
				errorOf(t, w)
			}
		})
	}
	// A sane caller-supplied id is kept, in the header and the body.
	w := call(h, "GET", "/nope", "", "", "X-Request-ID", "proxy-7f3a")
	if got := w.Header().Get("X-Request-Id"); got != "proxy-7f3a" {
		t.Errorf("X-Request-Id = %q, want the caller's", got)
	}
	errorOf(t, w)
}

// A request with both Content-Length and Transfer-Encoding is answered and
// its connection closed, so a request smuggled behind it is never served.
func TestContentLengthWithTransferEncodingClosesConnection(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) { testCLWithTE(t, proto) })
	}
}

// testCLWithTE sends, on proto, a request with both headers and a
// smuggled one behind it. On HTTP/1.0 (with keep-alive asked for) net/http
// drops Transfer-Encoding unseen and frames the body by Content-Length, so
// there the whole chunked text is the body.
func testCLWithTE(t *testing.T, proto string) {
	checks := 0
	h := newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{
		check: func(_ context.Context, in abuse.CheckInput) (abuse.Decision, error) {
			checks++
			return abuse.Decision{ID: "01TEST", Action: in.Action, Allowed: true, Reason: abuse.ReasonOK}, nil
		},
	}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"action":"login","user":"a"}`
	smuggled := "POST /v1/check " + proto + "\r\nHost: x\r\nConnection: keep-alive\r\nAuthorization: Bearer " + keyCheck +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	framed := strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	length := 4
	if proto == "HTTP/1.0" {
		framed, length = body, len(body)
	}
	raw := "POST /v1/check " + proto + "\r\nHost: x\r\nConnection: keep-alive\r\nAuthorization: Bearer " + keyCheck +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(length) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		framed + smuggled
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("first answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("first answer %d, want 200", resp.StatusCode)
	}
	if !resp.Close {
		t.Errorf("first answer does not close the connection (Connection: %q)", resp.Header.Get("Connection"))
	}
	if resp2, err := http.ReadResponse(rd, nil); err == nil {
		resp2.Body.Close()
		t.Errorf("the smuggled request was answered: %d", resp2.StatusCode)
	}
	if checks != 1 {
		t.Errorf("got %d checks, want 1", checks)
	}
}

// Audit filters Postgres cannot search (NUL, invalid UTF-8, a lone
// surrogate) are 400 with the field, on the API and the review page.
func TestAuditFilterUnstorableText(t *testing.T) {
	queried := false
	h := newTestHandler(t, testConfig(), Deps{Audit: &fakeAudit{query: func(context.Context, audit.Filter) (audit.Page, error) {
		queried = true
		return audit.Page{}, nil
	}}})
	for _, path := range []string{"/v1/audit", "/ui/events"} {
		for _, tc := range []struct{ query, field string }{
			{"reason=%00", "reason"},
			{"action=%ff", "action"},
			{"reason=%ed%a0%80", "reason"},
			{"decision=allow%00", "decision"},
			{"kind=%c0%af", "kind"},
			{"since=2026-01-01T00:00:00Z%00", "since"},
			{"cursor=%ff%fe", "cursor"},
		} {
			t.Run(path+"?"+tc.query, func(t *testing.T) {
				w := call(h, "GET", path+"?"+tc.query, keyAudit, "")
				if w.Code != http.StatusBadRequest {
					t.Fatalf("status %d, want 400 (%s)", w.Code, w.Body)
				}
				if path == "/v1/audit" {
					if _, field := errorOf(t, w); field != tc.field {
						t.Errorf("field %q, want %q", field, tc.field)
					}
				}
			})
		}
	}
	if queried {
		t.Error("an unstorable filter reached the audit store")
	}
}

// A body over the limit is answered 413 at once, on a connection then
// closed, also when the client waits for the answer before sending the
// body: net/http would otherwise wait for the body (up to its read
// timeout) to keep the connection.
func TestTooLargeAnsweredBeforeTheBody(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, framing := range []string{"Content-Length: 99999\r\n", "Transfer-Encoding: chunked\r\n"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// Closed before srv (defers run last first): a server still
		// waiting for the body would hold srv.Close.
		defer conn.Close()
		head := "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyCheck +
			"\r\nContent-Type: application/json\r\n" + framing + "\r\n"
		if framing[0] == 'T' {
			// One chunk just over the limit, then nothing more.
			chunk := strings.Repeat(" ", MaxBodyBytes+1)
			head += strconv.FormatInt(int64(len(chunk)), 16) + "\r\n" + chunk + "\r\n"
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer before the body (%v)", framing, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Errorf("%s: status %d, close %v; want 413 and the connection closed", framing, resp.StatusCode, resp.Close)
		}
	}
}
