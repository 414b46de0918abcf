package api

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/guardhq/guard/internal/testenv"
)

func TestAuth(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	checkBody := `{"action":"login","user":"a"}`
	tests := []struct {
		name       string
		method     string
		path       string
		auth       string // full Authorization header; "" sends none
		body       string
		wantStatus int
	}{
		{"no header", "POST", "/v1/check", "", checkBody, 401},
		{"unknown key", "POST", "/v1/check", "Bearer nope", checkBody, 401},
		{"key prefix", "POST", "/v1/check", "Bearer " + keyCheck[:5], checkBody, 401},
		{"basic scheme", "POST", "/v1/check", "Basic " + keyCheck, checkBody, 401},
		{"empty bearer", "POST", "/v1/check", "Bearer ", checkBody, 401},
		{"lowercase scheme", "POST", "/v1/check", "bearer " + keyCheck, checkBody, 200},
		{"check key checks", "POST", "/v1/check", "Bearer " + keyCheck, checkBody, 200},
		{"check key reports", "POST", "/v1/report", "Bearer " + keyCheck, `{"action":"login","user":"a","outcome":"success"}`, 200},
		{"check key forward-auth", "GET", "/v1/forward-auth?action=login", "Bearer " + keyCheck, "", 204},
		{"check key cannot read audit", "GET", "/v1/audit", "Bearer " + keyCheck, "", 403},
		{"check key cannot list lockouts", "GET", "/v1/lockouts", "Bearer " + keyCheck, "", 403},
		{"check key cannot read policy", "GET", "/v1/policy", "Bearer " + keyCheck, "", 403},
		{"check key cannot see ui", "GET", "/ui/events", "Bearer " + keyCheck, "", 403},
		{"audit key (sha256) reads audit", "GET", "/v1/audit", "Bearer " + keyAudit, "", 200},
		{"audit key sees ui", "GET", "/ui/events", "Bearer " + keyAudit, "", 200},
		{"audit key sees ui lockouts", "GET", "/ui/lockouts", "Bearer " + keyAudit, "", 200},
		{"audit key cannot check", "POST", "/v1/check", "Bearer " + keyAudit, checkBody, 403},
		{"audit key cannot unlock", "DELETE", "/v1/lockouts", "Bearer " + keyAudit, `{"dimension":"user","user":"a"}`, 403},
		{"audit key by its digest is not a key", "GET", "/v1/audit", "Bearer " + sha256Hex(keyAudit), "", 401},
		{"admin checks", "POST", "/v1/check", "Bearer " + keyAdmin, checkBody, 200},
		{"admin reads audit", "GET", "/v1/audit", "Bearer " + keyAdmin, "", 200},
		{"admin lists lockouts", "GET", "/v1/lockouts", "Bearer " + keyAdmin, "", 200},
		{"admin reads policy", "GET", "/v1/policy", "Bearer " + keyAdmin, "", 200},
		{"ui without key", "GET", "/ui/events", "", "", 401},
		{"healthz needs no key", "GET", "/healthz", "", "", 200},
		{"readyz needs no key", "GET", "/readyz", "", "", 200},
		{"auth before body checks", "POST", "/v1/check", "", "not json", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, tt.method, tt.path, "", tt.body, "Authorization", tt.auth)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.wantStatus, w.Body)
			}
			switch tt.wantStatus {
			case 401:
				if code, _ := errorOf(t, w); code != "unauthenticated" {
					t.Errorf("code = %s, want unauthenticated", code)
				}
				if w.Header().Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			case 403:
				if code, _ := errorOf(t, w); code != "forbidden" {
					t.Errorf("code = %s, want forbidden", code)
				}
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	deps := Deps{Guard: &fakeGuard{}, Audit: &fakeAudit{}, Cursors: testCursors}
	tests := []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"no name", Config{Keys: []Key{{Scopes: []string{"check"}, Key: "k"}}}, deps, "name is required"},
		{"duplicate name", Config{Keys: []Key{{Name: "a", Scopes: []string{"check"}, Key: "k"}, {Name: "a", Scopes: []string{"check"}, Key: "j"}}}, deps, "already used"},
		{"no key", Config{Keys: []Key{{Name: "a", Scopes: []string{"check"}}}}, deps, "is required"},
		{"both keys", Config{Keys: []Key{{Name: "a", Scopes: []string{"check"}, Key: "k", SHA256: sha256.Sum256([]byte("k"))}}}, deps, "not both"},
		{"same key twice", Config{Keys: []Key{{Name: "a", Scopes: []string{"check"}, Key: "k"}, {Name: "b", Scopes: []string{"admin"}, SHA256: sha256.Sum256([]byte("k"))}}}, deps, "same key"},
		{"scope twice", Config{Keys: []Key{{Name: "a", Scopes: []string{"check", "check"}, Key: "k"}}}, deps, "listed twice"},
		{"unknown scope", Config{Keys: []Key{{Name: "a", Scopes: []string{"root"}, Key: "k"}}}, deps, "unknown scope"},
		{"no scope", Config{Keys: []Key{{Name: "a", Key: "k"}}}, deps, "scopes are required"},
		{"bad proxy", Config{ForwardAuth: ForwardAuthConfig{TrustedProxies: []netip.Prefix{{}}}}, deps, "trusted_proxies"},
		{"missing guard", Config{}, Deps{Audit: &fakeAudit{}, Cursors: testCursors}, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(slog.New(slog.DiscardHandler), tt.cfg, tt.deps)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	tests := []struct {
		method, path string
		wantStatus   int
		wantCode     string
		wantAllow    string
	}{
		{"GET", "/nope", 404, "not_found", ""},
		{"GET", "/v1/check/", 404, "not_found", ""},
		{"GET", "/V1/CHECK", 404, "not_found", ""},
		{"POST", "/v2/check", 404, "not_found", ""},
		{"GET", "/v1/check", 405, "method_not_allowed", "POST"},
		{"PUT", "/v1/report", 405, "method_not_allowed", "POST"},
		{"POST", "/v1/audit", 405, "method_not_allowed", "GET, HEAD"},
		{"PATCH", "/v1/lockouts", 405, "method_not_allowed", "POST, GET, HEAD, DELETE"},
		{"POST", "/healthz", 405, "method_not_allowed", "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			w := call(h, tt.method, tt.path, keyAdmin, "")
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", w.Code, tt.wantStatus)
			}
			if code, _ := errorOf(t, w); code != tt.wantCode {
				t.Errorf("code = %s, want %s", code, tt.wantCode)
			}
			if tt.wantAllow != "" {
				if got := w.Header().Get("Allow"); got != tt.wantAllow {
					t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
				}
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	w := call(h, "GET", "/healthz", "", "", "X-Request-ID", "abc-123")
	if got := w.Header().Get("X-Request-ID"); got != "abc-123" {
		t.Errorf("echoed X-Request-ID = %q, want abc-123", got)
	}
	w = call(h, "GET", "/nope", "", "", "X-Request-ID", "bad id\twith spaces")
	if got := w.Header().Get("X-Request-ID"); got == "" || strings.ContainsAny(got, " \t") {
		t.Errorf("generated X-Request-ID = %q, want a fresh token", got)
	}
}

func TestRequestLogCarriesRequestIDButNoKey(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	h, err := New(logger, testConfig(), Deps{Guard: &fakeGuard{}, Audit: &fakeAudit{}, Cursors: testCursors})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"action":"login","user":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyCheck)
	req.Header.Set("X-Request-ID", "req-42")
	h.ServeHTTP(httptest.NewRecorder(), req)
	out := buf.String()
	if !strings.Contains(out, `"request_id":"req-42"`) || !strings.Contains(out, `"api_key":"auth-service"`) {
		t.Errorf("log %s lacks request_id or key name", out)
	}
	if strings.Contains(out, keyCheck) {
		t.Errorf("log leaks the key: %s", out)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("guard_degraded 0\n"))
	})
	tests := []struct {
		name       string
		ready      Readiness
		wantStatus int
		wantBody   string
	}{
		{"normal", Readiness{CanDecide: true, Mode: "normal", Redis: "ok", Postgres: "ok"}, 200,
			`{"mode":"normal","redis":"ok","postgres":"ok","audit_backlog":0}`},
		{"degraded still ready", Readiness{CanDecide: true, Mode: "degraded", Redis: "down", Postgres: "down", AuditBacklog: 12}, 200,
			`{"mode":"degraded","redis":"down","postgres":"down","audit_backlog":12}`},
		{"cannot decide", Readiness{Mode: "degraded", Redis: "down", Postgres: "ok"}, 503,
			`{"mode":"degraded","redis":"down","postgres":"ok","audit_backlog":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHandler(t, testConfig(), Deps{Metrics: metrics,
				Readiness: func(context.Context) Readiness { return tt.ready }})
			w := call(h, "GET", "/readyz", "", "")
			if w.Code != tt.wantStatus || compact(t, w.Body.String()) != compact(t, tt.wantBody) {
				t.Errorf("readyz = %d %s, want %d %s", w.Code, w.Body, tt.wantStatus, tt.wantBody)
			}
			if w := call(h, "GET", "/healthz", "", ""); w.Code != 200 {
				t.Errorf("healthz = %d, want 200", w.Code)
			}
			if w := call(h, "GET", "/metrics", "", ""); w.Code != 200 || w.Body.String() != "guard_degraded 0\n" {
				t.Errorf("metrics = %d %q", w.Code, w.Body)
			}
		})
	}
}

// TestRequestLogBytes: the access log counts the body's bytes as sent:
// none for HEAD, whose body net/http discards, and 0 for an answer without
// a body.
func TestRequestLogBytes(t *testing.T) {
	var buf testenv.SyncBuffer // written by the server's goroutines
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	h, err := New(logger, testConfig(), Deps{Guard: &fakeGuard{}, Audit: &fakeAudit{}, Cursors: testCursors})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		want         string
	}{
		{"GET", "/healthz", `"bytes":15`},
		{"HEAD", "/healthz", `"bytes":0`},
		{"HEAD", "/v1/nope", `"bytes":0`},
	} {
		from := len(buf.String())
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if out := buf.String()[from:]; !strings.Contains(out, tc.want) {
			t.Errorf("%s %s: log %s; want %s", tc.method, tc.path, out, tc.want)
		}
	}
}
