package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// phonePolicy is otp_send limited by number, prefix and country (small
// limits), otp_verify locking numbers that fail, and Russia denied.
func phonePolicy() abuse.Policy {
	return abuse.Policy{Actions: map[string]abuse.Action{
		"otp_send": {Limits: []abuse.Rule{
			{Dimension: abuse.DimPhone, Limit: 2, Window: 10 * time.Minute},
			{Dimension: abuse.DimPhonePrefix, Limit: 3, Window: time.Hour},
			{Dimension: abuse.DimPhoneCountry, Limit: 4, Window: time.Hour},
		}},
		"otp_verify": {
			Failures: []abuse.Rule{{Dimension: abuse.DimPhone, Limit: 2, Window: 10 * time.Minute}},
			Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute}},
		},
	}, Deny: abuse.List{Countries: []string{"RU"}}}
}

func withPhones(c *abuse.Config) {
	c.Policy = phonePolicy()
	c.Phone = abuse.PhoneConfig{DefaultRegion: "GB"}
}

func TestPhoneRulesOverHTTP(t *testing.T) {
	s := newStack(t, withPhones)
	send := func(phone string) checkAnswer {
		t.Helper()
		w := s.do(t, "POST", "/v1/check", "k-check", `{"action":"otp_send","phone":"`+phone+`"}`)
		if w.Code != 200 {
			t.Fatalf("check %s: status %d %s", phone, w.Code, w.Body)
		}
		var a checkAnswer
		decodeStrictly(t, w, &a)
		return a
	}
	tests := []struct {
		phone, decision, reason, rule string
	}{
		{"+447400123456", "allow", "ok", ""},
		{"07400 123456", "allow", "ok", ""}, // national, default region GB: the same number
		{"+44 7400 123456", "deny", "rate_limited", "otp_send/phone"},
		{"+447400999888", "allow", "ok", ""},
		{"+447400555666", "deny", "rate_limited", "otp_send/phone_prefix"},
		{"+447500123456", "allow", "ok", ""},
		{"+447800123456", "deny", "rate_limited", "otp_send/phone_country"},
		{"+33 6 12 34 56 78", "allow", "ok", ""},
		{"+7 912 345-67-89", "deny", "denylisted", ""},
	}
	for _, tt := range tests {
		a := send(tt.phone)
		if a.Decision != tt.decision || a.Reason != tt.reason {
			t.Errorf("%s: %s/%s; want %s/%s", tt.phone, a.Decision, a.Reason, tt.decision, tt.reason)
		}
		if tt.rule != "" && (len(a.Limits) == 0 || a.Limits[0].Rule != tt.rule || a.Limits[0].Remaining != 0) {
			t.Errorf("%s: limits %+v; want %s first, exhausted", tt.phone, a.Limits, tt.rule)
		}
		if tt.reason == "ok" && len(a.Limits) != 3 {
			t.Errorf("%s: %d limits; want the phone, prefix and country rules", tt.phone, len(a.Limits))
		}
	}
	dims := map[string]bool{}
	for _, l := range send("+33612345678").Limits {
		dims[l.Dimension] = true
	}
	if !dims["phone"] || !dims["phone_country"] || !dims["phone_prefix"] {
		t.Errorf("limit dimensions %v; want phone, phone_country, phone_prefix", dims)
	}

	for _, tc := range []struct{ body, field string }{
		{`{"action":"otp_send","phone":"+1 999 555 0123"}`, "phone"}, // possible, not valid
		{`{"action":"otp_send","phone":"12"}`, "phone"},
		{`{"action":"otp_send","phone":""}`, "phone"},
		{`{"action":"otp_send","phone":"\u0000"}`, "phone"},
		{`{"action":"otp_send","phone":7400123456}`, "phone"},
		{`{"action":"otp_send"}`, ""},
	} {
		w := s.do(t, "POST", "/v1/check", "k-check", tc.body)
		var e struct {
			Error struct {
				Code, Message, Field string
				RequestID            string `json:"request_id"`
			} `json:"error"`
		}
		if w.Code != 400 {
			t.Errorf("%s: status %d; want 400", tc.body, w.Code)
			continue
		}
		decodeStrictly(t, w, &e)
		if e.Error.Field != tc.field || e.Error.Code != "invalid_request" {
			t.Errorf("%s: error %+v; want invalid_request field %q", tc.body, e.Error, tc.field)
		}
	}
}

func TestPhoneLockoutsOverHTTP(t *testing.T) {
	s := newStack(t, withPhones)
	for i := range 2 {
		w := s.do(t, "POST", "/v1/report", "k-check", `{"action":"otp_verify","phone":"+447400123456","outcome":"failure"}`)
		if w.Code != 200 {
			t.Fatalf("report %d: %d %s", i, w.Code, w.Body)
		}
	}
	w := s.do(t, "POST", "/v1/check", "k-check", `{"action":"otp_verify","phone":"07400123456"}`)
	var a checkAnswer
	decodeStrictly(t, w, &a)
	if a.Reason != "locked_out" || a.Lockout == nil || a.Lockout.Dimension != "phone" {
		t.Fatalf("check of the struck number: %+v; want locked_out on phone", a)
	}
	// "+" unencoded in the query (it arrives as a space), and encoded.
	for _, q := range []string{"phone=+447400123456", "phone=%2B44%207400%20123456", "phone=07400123456"} {
		w := s.do(t, "GET", "/v1/lockouts?"+q, "k-admin", "")
		var out struct {
			Lockouts []map[string]any `json:"lockouts"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != 200 || err != nil {
			t.Fatalf("lockouts?%s: %d %s", q, w.Code, w.Body)
		}
		if len(out.Lockouts) != 1 || out.Lockouts[0]["phone"] != "+447400123456" || out.Lockouts[0]["dimension"] != "phone" {
			t.Errorf("lockouts?%s = %v; want the number's lockout", q, out.Lockouts)
		}
		if _, ok := out.Lockouts[0]["user"]; ok {
			t.Errorf("lockouts?%s: entry names a user: %v", q, out.Lockouts[0])
		}
	}
	if w := s.do(t, "GET", "/v1/lockouts?phone=12", "k-admin", ""); w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"phone"`) {
		t.Errorf("lockouts?phone=12: %d %s; want 400 field phone", w.Code, w.Body)
	}
	w = s.do(t, "POST", "/v1/lockouts", "k-admin", `{"dimension":"phone_prefix","phone":"+447400000111","duration_ms":60000,"reason":"pumping"}`)
	if w.Code != 201 || !strings.Contains(w.Body.String(), `"phone_prefix":"+447400"`) {
		t.Errorf("manual phone_prefix lock: %d %s", w.Code, w.Body)
	}
	if w := s.do(t, "POST", "/v1/lockouts", "k-admin", `{"dimension":"phone_country","duration_ms":60000}`); w.Code != 400 ||
		!strings.Contains(w.Body.String(), `"field":"phone"`) {
		t.Errorf("lock of phone_country without a phone: %d %s; want 400 field phone", w.Code, w.Body)
	}
	// A phone and a phone_country or phone_prefix that is not its own name
	// two keys: 400 with the conflicting field, in POST and DELETE.
	for _, tc := range []struct{ method, body, field string }{
		{"POST", `{"dimension":"phone_country","phone":"+447400123456","phone_country":"FR","duration_ms":60000}`, "phone_country"},
		{"POST", `{"dimension":"phone_prefix","phone":"+447400123456","phone_prefix":"+447800","duration_ms":60000}`, "phone_prefix"},
		{"DELETE", `{"dimension":"phone_country","phone":"+447400123456","phone_country":"FR"}`, "phone_country"},
		{"DELETE", `{"dimension":"phone_prefix","phone":"+447400123456","phone_prefix":"+447800"}`, "phone_prefix"},
	} {
		if w := s.do(t, tc.method, "/v1/lockouts", "k-admin", tc.body); w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"`+tc.field+`"`) {
			t.Errorf("%s %s: %d %s; want 400 field %s", tc.method, tc.body, w.Code, w.Body, tc.field)
		}
	}
	w = s.do(t, "POST", "/v1/lockouts", "k-admin", `{"dimension":"phone_prefix","phone":"+447400000111","phone_prefix":"+447400","phone_country":"gb","duration_ms":60000}`)
	if w.Code != 201 || !strings.Contains(w.Body.String(), `"phone_prefix":"+447400"`) {
		t.Errorf("manual phone_prefix lock with the phone's own prefix and country: %d %s", w.Code, w.Body)
	}
	w = s.do(t, "DELETE", "/v1/lockouts", "k-admin", `{"dimension":"phone_prefix","phone_prefix":"+447400","reason":"false alarm"}`)
	if w.Code != 200 {
		t.Errorf("unlock of the prefix by its listed value: %d %s", w.Code, w.Body)
	}
	w = s.do(t, "DELETE", "/v1/lockouts", "k-admin", `{"dimension":"phone","phone":"+44 7400 123456","reason":"verified"}`)
	if w.Code != 200 {
		t.Fatalf("unlock: %d %s", w.Code, w.Body)
	}
	s.settle(t)
	w = s.do(t, "GET", "/v1/audit?kind=admin&phone=%2B447400123456", "k-admin", "")
	if !strings.Contains(w.Body.String(), `"action":"unlock"`) || !strings.Contains(w.Body.String(), `"phone":"+447400123456"`) {
		t.Errorf("audit of the unlock: %s", w.Body)
	}
}

func TestPhoneForwardAuth(t *testing.T) {
	s := newStack(t, withPhones)
	fwd := func(phone string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/v1/forward-auth?action=otp_send", nil)
		req.RemoteAddr = "198.51.100.1:1000"
		req.Header.Set("Authorization", "Bearer k-check")
		req.Header.Set("X-Guard-Phone", phone)
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, req)
		return w
	}
	for i := range 2 {
		if w := fwd("+447400123456"); w.Code != 204 {
			t.Fatalf("send %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w := fwd("07400 123456"); w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("third send: %d Retry-After %q; want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if w := fwd("+79123456789"); w.Code != 429 || !strings.Contains(w.Body.String(), `"code":"denylisted"`) {
		t.Errorf("denied country: %d %s", w.Code, w.Body)
	}
	if w := fwd("not a number"); w.Code != 400 {
		t.Errorf("bad phone header: %d; want 400", w.Code)
	}
}

// TestPhoneAuditOnPostgres: phone events reach the real Postgres store
// through the real writer, and GET /v1/audit?phone= finds them by the
// number however it is written (normalised like a request), in JSON,
// NDJSON and CSV.
func TestPhoneAuditOnPostgres(t *testing.T) {
	ctx := context.Background()
	pg := api.OpenTestPG(t, "guard_api_phone_")
	w, err := audit.NewWriter(slog.New(slog.DiscardHandler), audit.WriterConfig{FlushInterval: time.Millisecond}, pg, audit.WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	lim := limits.NewMemory(limits.MemoryConfig{})
	defer lim.Close()
	cfg := abuse.Config{KeySecret: []byte("0123456789abcdef-test"), Instance: "guard-test"}
	withPhones(&cfg)
	g, err := abuse.New(slog.New(slog.DiscardHandler), cfg, lim, w, pg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{Keys: []api.Key{
		{Name: "auth-service", Scopes: []string{api.ScopeCheck}, Key: "k-check"},
		{Name: "secteam", Scopes: []string{api.ScopeAuditRead}, Key: "k-audit"},
	}}, api.Deps{Guard: g, Audit: pg, Cursors: audit.NewCursorCodec([]byte("cursor-secret"))})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, target, key, body, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, req)
		return rw
	}
	for _, body := range []string{
		`{"action":"otp_send","phone":"+447400123456","ip":"203.0.113.7"}`,
		`{"action":"otp_send","phone":"07400 123456"}`,
		`{"action":"otp_send","phone":"+447400999888"}`,
		`{"action":"otp_send","user":"alice"}`,
	} {
		if rw := do("POST", "/v1/check", "k-check", body, ""); rw.Code != 200 {
			t.Fatalf("check %s: %d %s", body, rw.Code, rw.Body)
		}
	}
	if rw := do("POST", "/v1/report", "k-check", `{"action":"otp_verify","phone":"+447400123456","outcome":"failure"}`, ""); rw.Code != 200 {
		t.Fatalf("report: %d %s", rw.Code, rw.Body)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query string
		want  int
	}{
		{"phone=%2B447400123456", 3},
		{"phone=+447400123456", 3},          // "+" as typed: a space on arrival
		{"phone=07400%20123456", 3},         // national, in phone.default_region
		{"phone=%2B44%20(0)7400-123456", 3}, // punctuation
		{"phone=%2B447400123456&kind=report", 1},
		{"phone=%2B447400999888", 1},
		{"phone=%2B33612345678", 0},
	}
	for _, tt := range tests {
		rw := do("GET", "/v1/audit?"+tt.query, "k-audit", "", "")
		var page struct {
			Events []struct {
				Phone *string `json:"phone"`
				Kind  string  `json:"kind"`
			} `json:"events"`
		}
		if err := json.Unmarshal(rw.Body.Bytes(), &page); rw.Code != 200 || err != nil {
			t.Fatalf("audit?%s: %d %s", tt.query, rw.Code, rw.Body)
		}
		if len(page.Events) != tt.want {
			t.Errorf("audit?%s: %d events; want %d", tt.query, len(page.Events), tt.want)
		}
		for _, e := range page.Events {
			if e.Phone == nil || !strings.HasPrefix(*e.Phone, "+44") {
				t.Errorf("audit?%s: event phone %v; want the E.164 number", tt.query, e.Phone)
			}
		}
	}
	if rw := do("GET", "/v1/audit?phone=%2B1999", "k-audit", "", ""); rw.Code != 400 || !strings.Contains(rw.Body.String(), `"field":"phone"`) {
		t.Errorf("audit?phone=+1999: %d %s; want 400 field phone", rw.Code, rw.Body)
	}
	nd := do("GET", "/v1/audit?phone=%2B447400123456", "k-audit", "", "application/x-ndjson")
	if lines := strings.Count(nd.Body.String(), "\n"); nd.Code != 200 || lines != 3 || !strings.Contains(nd.Body.String(), `"phone":"+447400123456"`) {
		t.Errorf("NDJSON export: %d, %d lines: %s", nd.Code, lines, nd.Body)
	}
	csv := do("GET", "/v1/audit?phone=%2B447400123456", "k-audit", "", "text/csv")
	rows := strings.Split(strings.TrimSpace(csv.Body.String()), "\n")
	if csv.Code != 200 || len(rows) != 4 || !strings.Contains(rows[0], ",device,phone,rule,") || !strings.Contains(rows[1], ",+447400123456,") {
		t.Errorf("CSV export: %d %q", csv.Code, rows)
	}
}

// TestPhoneInReviewPages: the events page filters by phone (normalised like
// a request), shows it in its own column, and links it as a pivot.
func TestPhoneInReviewPages(t *testing.T) {
	s := newStack(t, withPhones)
	for _, body := range []string{`{"action":"otp_send","phone":"+447400123456"}`, `{"action":"otp_send","phone":"+33612345678"}`} {
		if w := s.do(t, "POST", "/v1/check", "k-check", body); w.Code != 200 {
			t.Fatalf("check: %d %s", w.Code, w.Body)
		}
	}
	s.settle(t)
	w := s.do(t, "GET", "/ui/events?phone=07400+123456", "k-admin", "")
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, "<th>phone</th>") {
		t.Fatalf("events page: %d\n%s", w.Code, body)
	}
	if !strings.Contains(body, `href="/ui/events?phone=%2B447400123456"`) || strings.Contains(body, "+33612345678") {
		t.Errorf("events page by phone lacks the number's pivot or shows another number:\n%s", body)
	}
	if w := s.do(t, "GET", "/ui/events?phone=12", "k-admin", ""); w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"phone"`) {
		t.Errorf("events page with a bad phone: %d %s; want 400 field phone", w.Code, w.Body)
	}
	// A prefix lockout is listed with its prefix and can be lifted from
	// the page (its unlock form carries the prefix).
	if w := s.do(t, "POST", "/v1/lockouts", "k-admin", `{"dimension":"phone_prefix","phone_prefix":"+447400","duration_ms":60000}`); w.Code != 201 {
		t.Fatalf("lock: %d %s", w.Code, w.Body)
	}
	w = s.do(t, "GET", "/ui/lockouts?dimension=phone_prefix", "k-admin", "")
	body = w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `name="phone_prefix" value="&#43;447400"`) || strings.Contains(body, "identifiers unknown") {
		t.Errorf("lockouts page: %d; want the prefix lockout with its unlock form\n%s", w.Code, body)
	}
}
