package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
)

// A report's decision_id is at most 64 bytes of [A-Za-z0-9_-].
func TestReportDecisionIDRejected(t *testing.T) {
	st := newStack(t)
	for _, tc := range []struct {
		id   string
		want int
	}{
		{"01JDXYZABCDEFGHJKMNPQRSTVW", 200},
		{"", 200}, // absent
		{strings.Repeat("a", 64), 200},
		{"my_id-1", 200},
		{strings.Repeat("a", 65), 400},
		{strings.Repeat("a", 8000), 400},
		{"has space", 400},
		{"dot.ted", 400},
		{`nul\u0000`, 400},
		{"é", 400},
	} {
		body := `{"action":"login","user":"a","outcome":"failure","decision_id":"` + tc.id + `"}`
		w := st.do(t, "POST", "/v1/report", "k-check", body)
		if w.Code != tc.want {
			t.Errorf("decision_id %.20q: status %d, want %d (%s)", tc.id, w.Code, tc.want, w.Body)
			continue
		}
		if tc.want == 400 {
			var body struct {
				Error struct{ Code, Field string } `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Field != "decision_id" {
				t.Errorf("decision_id %.20q: body %s, want field decision_id", tc.id, w.Body)
			}
		}
	}
}

// Against the real Postgres store, audit filters Postgres cannot search are
// 400 with the field (they were 503: SQLSTATE 22021), and a searchable
// filter still works.
func TestAuditFilterUnstorableTextOnPostgres(t *testing.T) {
	pg := api.OpenTestPG(t, "guard_api_filters_")
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{Keys: []api.Key{
		{Name: "secteam", Scopes: []string{api.ScopeAuditRead}, Key: "k-audit"},
	}}, api.Deps{Guard: newStack(t).guard, Audit: pg, Cursors: audit.NewCursorCodec([]byte("cursor-secret"))})
	if err != nil {
		t.Fatal(err)
	}
	get := func(target string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", "Bearer k-audit")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for _, tc := range []struct{ query, field string }{
		{"reason=%00", "reason"},
		{"action=%ff", "action"},
		{"reason=%ed%a0%80", "reason"},
		{"decision=%00", "decision"},
	} {
		for _, path := range []string{"/v1/audit", "/ui/events"} {
			w := get(path + "?" + tc.query)
			if w.Code != http.StatusBadRequest {
				t.Errorf("%s?%s: status %d, want 400 (%s)", path, tc.query, w.Code, w.Body)
				continue
			}
			if path == "/v1/audit" {
				var body struct{ Error struct{ Field string } }
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Field != tc.field {
					t.Errorf("%s?%s: body %s, want field %s", path, tc.query, w.Body, tc.field)
				}
			}
		}
	}
	if w := get("/v1/audit?reason=ok&action=login"); w.Code != 200 {
		t.Errorf("a searchable filter: status %d (%s)", w.Code, w.Body)
	}
}
