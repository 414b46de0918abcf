package api_test

import (
	"encoding/json"
	"strings"
	"testing"
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
