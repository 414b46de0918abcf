package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthCommand(t *testing.T) {
	var readyStatus = http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.Write([]byte(`{"status":"ok"}`))
		case "/readyz":
			w.WriteHeader(readyStatus)
			w.Write([]byte(`{"mode":"degraded"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		ready      int
		wantErr    bool
		wantStdout string
		wantErr2   string // the whole error when set, SRV standing for srv.URL
	}{
		{"alive by --url", []string{"--url", srv.URL}, nil, 200, false, "200 {\"status\":\"ok\"}", ""},
		{"ready by GUARD_URL", []string{"--ready"}, map[string]string{"GUARD_URL": srv.URL + "/"}, 200, false, "200 {\"mode\":\"degraded\"}", ""},
		{"not ready fails", []string{"--ready", "--url", srv.URL}, nil, 503, true, "503", "health: SRV/readyz answered 503"},
		{"a URL with a path is a base", []string{"--url", srv.URL + "/v1/check"}, nil, 200, true, "404", "health: SRV/v1/check/healthz answered 404"},
		{"a password is not repeated", []string{"--url", strings.Replace(srv.URL, "//", "//u:s3cret@", 1) + "/x/"}, nil, 200, true, "404", "health: http://u:xxxxx@" + addr + "/x/healthz answered 404"},
		{"address from GUARD_LISTEN", nil, map[string]string{"GUARD_LISTEN": addr}, 200, false, "200", ""},
		{"nothing listening fails", []string{"--url", "http://127.0.0.1:1"}, nil, 200, true, "", ""},
		{"stray argument", []string{"extra"}, nil, 200, true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readyStatus = tt.ready
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return tt.env[k] }
			err := run(context.Background(), append([]string{"guard", "health"}, tt.args...), getenv, &stdout, &stderr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v; want error %v", err, tt.wantErr)
			}
			if want := strings.ReplaceAll(tt.wantErr2, "SRV", srv.URL); want != "" && err.Error() != want {
				t.Errorf("err = %q, want %q", err, want)
			}
			if !strings.HasPrefix(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout = %q; want it to start with %q", stdout.String(), tt.wantStdout)
			}
		})
	}
}
