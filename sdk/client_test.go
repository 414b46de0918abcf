package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"42", 42 * time.Second, true},
		{" 1 ", time.Second, true},
		{"0", 0, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		got, ok := sdk.ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/check":
			if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"guard cannot answer right now"}}`))
		case "/v1/policy":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`<html>bad gateway</html>`))
		}
	}))
	defer srv.Close()
	c := sdk.New(srv.URL+"/", "k")
	_, err := c.Check(context.Background(), sdk.CheckRequest{Action: "login"})
	var e *sdk.Error
	if !errors.As(err, &e) || e.Status != 503 || e.Code != "unavailable" || e.RetryAfter != 7*time.Second || e.Field != "" {
		t.Errorf("Check error = %#v", err)
	}
	_, err = c.Policy(context.Background())
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "" || e.Message != "Bad Gateway" {
		t.Errorf("Policy error = %#v", err)
	}
	if err := c.ExportAudit(context.Background(), sdk.AuditFilter{}, "xml", nil); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("ExportAudit(xml) = %v, want a format error", err)
	}
	if _, err := sdk.New("::not a url", "k").Ready(context.Background()); err == nil {
		t.Errorf("bad base URL: no error")
	}
}

func TestAuditFilterValues(t *testing.T) {
	f := sdk.AuditFilter{User: "alice", IP: "10.0.0.0/8", Kind: "check",
		Since: time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600)), Limit: 5, Cursor: "abc"}
	got := f.Values().Encode()
	want := "cursor=abc&ip=10.0.0.0%2F8&kind=check&limit=5&since=2026-03-01T11%3A00%3A00Z&user=alice"
	if got != want {
		t.Errorf("Values = %s, want %s", got, want)
	}
}

// TestWireTimes: times in the wire format decode to the instant they
// name, in UTC.
func TestWireTimes(t *testing.T) {
	b := []byte(`{"decision":"deny","reason":"locked_out","retry_after_ms":1,"decision_id":"x","degraded":false,"limits":[],` +
		`"lockout":{"dimension":"user","until":"2026-03-01T10:01:30.123Z","level":2}}`)
	var r sdk.CheckResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 1, 10, 1, 30, 123e6, time.UTC)
	if !r.Lockout.Until.Equal(want) || r.Lockout.Level != 2 {
		t.Errorf("lockout = %+v; want until %v", r.Lockout, want)
	}
	if got := sdk.FormatTime(want.In(time.FixedZone("x", 7200))); got != "2026-03-01T10:01:30.123Z" {
		t.Errorf("FormatTime = %s", got)
	}
}

// TestExportAuditRefusesAnotherServersAnswer: a proxy's sign-in page (or
// any server at the URL) answers 200 too; the export writes nothing of it
// and says what came back.
func TestExportAuditRefusesAnotherServersAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html>sign in</html>")
	}))
	defer srv.Close()
	var out strings.Builder
	err := sdk.New(srv.URL, "k").ExportAudit(context.Background(), sdk.AuditFilter{}, sdk.FormatCSV, &out)
	if err == nil || !strings.Contains(err.Error(), `"text/html; charset=utf-8", not text/csv`) {
		t.Errorf("ExportAudit from an HTML page = %v; want an error naming the content type", err)
	}
	if out.Len() != 0 {
		t.Errorf("ExportAudit wrote %q; want nothing", out.String())
	}
}

// TestConfigurationIsNoOutage: a client that cannot even build a valid
// request (an API key or user agent with a control character, a base URL
// that is not http or https) fails every call with that error under every
// failure policy. Go's transport refuses such a request before sending
// it; reported as "unavailable", FailOpen (the Middleware's default)
// would let every attempt through unchecked, a misconfiguration passing
// for an outage. Surrounding white space, which no HTTP header value can
// carry (a key read from a file with its newline), is trimmed.
func TestConfigurationIsNoOutage(t *testing.T) {
	var calls atomic.Int32
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	bad := []struct {
		name string
		c    *sdk.Client
		want string // in the error, which never holds the key
	}{
		{"newline inside the key", sdk.New(srv.URL, "k-\nsecret"), "API key"},
		{"NUL in the key", sdk.New(srv.URL, "k-\x00secret"), "API key"},
		{"control character in the user agent", sdk.New(srv.URL, "k", sdk.WithUserAgent("app\r\nX-Evil: 1")), "user agent"},
		{"ftp base URL", sdk.New(strings.Replace(srv.URL, "http:", "ftp:", 1), "k"), "base URL"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range []sdk.FailurePolicy{sdk.FailOpen, sdk.FailClosed} {
				res, err := tt.c.Check(ctx, login, p)
				if err == nil || sdk.IsUnavailable(err) {
					t.Fatalf("Check (%v) = %+v, %v; want a configuration error, not an outage", p, res, err)
				}
				if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
					t.Errorf("Check error = %q; want one naming the %s, without the key", err, tt.want)
				}
			}
			if err := tt.c.Unlock(ctx, sdk.UnlockRequest{Dimension: "ip", IP: sdk.String("192.0.2.1")}); err == nil || sdk.IsUnavailable(err) {
				t.Errorf("Unlock = %v; want a configuration error", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the server; want none", n)
	}
	res, err := sdk.New(srv.URL, " k-check\r\n").Check(ctx, login, sdk.FailClosed)
	if err != nil || res.Bypassed || !res.Allowed() {
		t.Fatalf("Check with a key read with its newline = %+v, %v", res, err)
	}
	if got := auth.Load(); got != "Bearer k-check" {
		t.Errorf("Authorization = %q; want the trimmed key", got)
	}
}

// TestHealth: GET /healthz is a liveness check, retried like the other
// GET calls; a 200 that is not Guard's {"status": "ok"} (another server
// at the URL) is an error, not a healthy Guard.
func TestHealth(t *testing.T) {
	ctx := context.Background()
	url, calls := dropping(t)
	if err := sdk.New(url, "k").Health(ctx); !sdk.IsUnavailable(err) {
		t.Errorf("Health of a server that drops connections = %v; want unavailable", err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("calls = %d; want 3 (a GET is retried)", got)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"healthy":true}`))
	}))
	defer other.Close()
	if err := sdk.New(other.URL, "k").Health(ctx); err == nil {
		t.Error("Health of another server's 200 = nil; want an error")
	}
}

// TestExportAuditBrokenTransfer: Guard cuts an export whose store fails
// mid-way (api.md: "a client sees a broken transfer"); that is Guard
// breaking off its answer, an error IsUnavailable reports, while a writer
// of the caller's that fails is not.
func TestExportAuditBrokenTransfer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"id":"01J"}`+"\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is cut without the last chunk
	}))
	defer srv.Close()
	var out strings.Builder
	err := sdk.New(srv.URL, "k").ExportAudit(context.Background(), sdk.AuditFilter{}, sdk.FormatNDJSON, &out)
	if err == nil || !sdk.IsUnavailable(err) {
		t.Errorf("ExportAudit cut mid-way = %v; want an error IsUnavailable reports", err)
	}
	err = sdk.New(srv.URL, "k").ExportAudit(context.Background(), sdk.AuditFilter{}, sdk.FormatNDJSON, failingWriter{})
	if err == nil || sdk.IsUnavailable(err) || !errors.Is(err, errDiskFull) {
		t.Errorf("ExportAudit into a failing writer = %v; want the writer's error, not unavailable", err)
	}
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }
