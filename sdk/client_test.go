package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
