package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

func ptr[T any](v T) *T { return &v }

// seedAudit fills a real in-memory audit store with n check events, one
// per second from t0, alternating users and decisions.
func seedAudit(t *testing.T, n int) *audit.MemoryStore {
	t.Helper()
	st := audit.NewMemoryStore(0)
	var evs []audit.Event
	for i := range n {
		e := audit.Event{ID: "ev" + itoa(1000+i), At: t0.Add(time.Duration(i) * time.Second),
			Kind: audit.KindCheck, Action: "login", Decision: "allow", Reason: "ok",
			User: "alice@example.com", IP: "203.0.113.7", Rule: "login/ip",
			RetryAfterMs: ptr(int64(0)), Degraded: ptr(false), DryRun: ptr(false),
			APIKey: "auth-service", DecisionID: "ev" + itoa(1000+i), Instance: "guard-1"}
		if i%2 == 1 {
			e.User, e.IP, e.Decision, e.Reason = "bob", "2001:db8::7", "deny", "rate_limited"
		}
		evs = append(evs, e)
	}
	evs = append(evs, audit.Event{ID: "adm1", At: t0.Add(-time.Hour), Kind: audit.KindAdmin,
		Action: "unlock", User: "alice@example.com", APIKey: "ops", Note: `<script>alert("x")</script>`, Instance: "guard-1"})
	if err := st.Insert(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return st
}

func auditGet(t *testing.T, h http.Handler, query string, headers ...string) *sdk.AuditPage {
	t.Helper()
	w := call(h, "GET", "/v1/audit?"+query, keyAudit, "", headers...)
	if w.Code != 200 {
		t.Fatalf("GET /v1/audit?%s = %d: %s", query, w.Code, w.Body)
	}
	var p sdk.AuditPage
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode page: %v", err)
	}
	return &p
}

func TestAuditQuery(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 10)})
	tests := []struct {
		name    string
		query   string
		wantIDs string
	}{
		{"default: newest first", "", "ev1009,ev1008,ev1007,ev1006,ev1005,ev1004,ev1003,ev1002,ev1001,ev1000,adm1"},
		{"limit", "limit=3", "ev1009,ev1008,ev1007"},
		{"user normalised", "user=%20ALICE@Example.com%20&kind=check&limit=2", "ev1008,ev1006"},
		{"ip address", "ip=2001:db8::7&limit=2", "ev1009,ev1007"},
		{"ip cidr", "ip=203.0.113.0/24&limit=1", "ev1008"},
		{"ipv4-mapped as ipv4", "ip=::ffff:203.0.113.7&limit=1", "ev1008"},
		{"decision and reason", "decision=deny&reason=rate_limited&limit=1", "ev1009"},
		{"kind admin", "kind=admin", "adm1"},
		{"since inclusive, until exclusive", "since=2026-03-01T12:00:02Z&until=2026-03-01T12:00:04Z", "ev1003,ev1002"},
		{"numeric offsets", "since=2026-03-01T13:00:02%2B01:00&until=2026-03-01T07:00:04-05:00", "ev1003,ev1002"},
		{"offset + not percent-encoded", "since=2026-03-01T13:00:02+01:00&until=2026-03-01T13:00:04+01:00", "ev1003,ev1002"},
		{"offsets of 23:59", "since=2026-03-02T11:59:02%2B23:59&until=2026-02-28T12:01:04-23:59", "ev1003,ev1002"},
		{"lower-case t and z (RFC 3339 5.6)", "since=2026-03-01t12:00:02z&until=2026-03-01t12:00:04z", "ev1003,ev1002"},
		{"until the zero time: before everything", "until=0001-01-01T00:00:00Z", ""},
		{"since the zero time: everything", "since=0001-01-01T00:00:00Z&limit=1", "ev1009"},
		{"action", "action=unlock", "adm1"},
		{"empty values do not filter", "user=&ip=&limit=", "ev1009,ev1008,ev1007,ev1006,ev1005,ev1004,ev1003,ev1002,ev1001,ev1000,adm1"},
		{"nothing", "user=carol", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := auditGet(t, h, tt.query)
			var ids []string
			for _, e := range p.Events {
				ids = append(ids, e.ID)
			}
			if got := strings.Join(ids, ","); got != tt.wantIDs {
				t.Errorf("ids = %s, want %s", got, tt.wantIDs)
			}
			if p.Events == nil {
				t.Errorf("events is null, want []")
			}
		})
	}
}

func TestAuditPaging(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 5)})
	var ids []string
	query := "limit=2&kind=check"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p := auditGet(t, h, query)
		for _, e := range p.Events {
			ids = append(ids, e.ID)
		}
		if p.NextCursor == nil {
			break
		}
		query = "limit=2&kind=check&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if got, want := strings.Join(ids, ","), "ev1004,ev1003,ev1002,ev1001,ev1000"; got != want {
		t.Errorf("paged ids = %s, want %s", got, want)
	}
	// The raw body says null, not a missing key or "".
	w := call(h, "GET", "/v1/audit?user=nobody", keyAudit, "")
	if got := compact(t, w.Body.String()); got != `{"events":[],"next_cursor":null}` {
		t.Errorf("empty page = %s", got)
	}
}

func TestAuditEventJSONShape(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 1)})
	w := call(h, "GET", "/v1/audit?kind=admin", keyAudit, "")
	want := `{"events":[{"id":"adm1","at":"2026-03-01T11:00:00.000Z","kind":"admin","action":"unlock","decision":null,
		"reason":null,"outcome":null,"user":"alice@example.com","ip":null,"device":null,"phone":null,"rule":null,"retry_after_ms":null,
		"lockout_until":null,"degraded":null,"dry_run":null,"api_key":"ops","decision_id":null,"instance":"guard-1",
		"note":"\u003cscript\u003ealert(\"x\")\u003c/script\u003e"}],"next_cursor":null}`
	if got := compact(t, w.Body.String()); got != compact(t, want) {
		t.Errorf("body =\n%s\nwant\n%s", got, compact(t, want))
	}
}

func TestAuditBadParams(t *testing.T) {
	st := seedAudit(t, 3)
	h := newTestHandler(t, testConfig(), Deps{Audit: st})
	p := auditGet(t, h, "limit=1")
	good := *p.NextCursor
	tampered := []byte(good)
	if tampered[3] == 'A' {
		tampered[3] = 'B'
	} else {
		tampered[3] = 'A'
	}
	other := audit.NewCursorCodec([]byte("another-secret")).Encode(&audit.Cursor{At: t0, ID: "ev1000"})
	tests := []struct {
		name      string
		query     string
		wantField string
	}{
		{"limit zero", "limit=0", "limit"},
		{"limit too big", "limit=1001", "limit"},
		{"limit not a number", "limit=ten", "limit"},
		{"limit negative", "limit=-5", "limit"},
		{"tampered cursor", "cursor=" + url.QueryEscape(string(tampered)), "cursor"},
		{"foreign cursor", "cursor=" + url.QueryEscape(other), "cursor"},
		{"garbage cursor", "cursor=!!not-base64", "cursor"},
		{"malformed percent-encoding in a value", "cursor=%%%%", "cursor"},
		{"malformed percent-encoding beside good parameters", "kind=check&user=%zz&limit=5", "user"},
		{"truncated percent-encoding", "user=a%2", "user"},
		{"malformed percent-encoding in a name", "us%zzer=alice", ""},
		{"malformed percent-encoding in two values", "user=%zz&device=%zz", ""},
		{"semicolon separator", "user=a;device=b", ""},
		{"malformed percent-encoding without a name", "=%zz&user=%zz", ""},
		{"bad since", "since=yesterday", "since"},
		{"bad until", "until=2026-03-01", "until"},
		{"since offset hour 24", "since=2026-12-04T00:00:00%2B24:00", "since"},
		{"since offset hour 24, + not percent-encoded", "since=2026-12-04T00:00:00+24:00", "since"},
		{"until offset minute 60", "until=2026-12-04T00:00:00%2B00:60", "until"},
		{"until offset -24:00", "until=2026-12-04T00:00:00-24:00", "until"},
		{"bad ip", "ip=999.1.1.1", "ip"},
		{"ip zone", "ip=fe80::1%25eth0", "ip"},
		{"ip leading zero", "ip=010.1.1.1", "ip"},
		{"bad decision", "decision=maybe", "decision"},
		{"bad kind", "kind=login", "kind"},
		{"user NUL", "user=a%00b", "user"},
		{"user invalid UTF-8", "user=%ff", "user"},
		{"unknown param", "usr=alice", "usr"},
		{"repeated param", "user=a&user=b", "user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, "GET", "/v1/audit?"+tt.query, keyAudit, "")
			if w.Code != 400 {
				t.Fatalf("status = %d, want 400 (%s)", w.Code, w.Body)
			}
			if code, field := errorOf(t, w); code != "invalid_request" || field != tt.wantField {
				t.Errorf("error = %s/%s, want invalid_request/%s", code, field, tt.wantField)
			}
		})
	}
}

func TestAuditExport(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 4)})
	t.Run("ndjson streams everything, ignoring limit", func(t *testing.T) {
		w := call(h, "GET", "/v1/audit?kind=check&limit=1", keyAudit, "", "Accept", "application/x-ndjson")
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/x-ndjson") {
			t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
		}
		lines := strings.Split(strings.TrimSpace(w.Body.String()), "\n")
		var ids []string
		for _, l := range lines {
			var e sdk.AuditEvent
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			ids = append(ids, e.ID)
		}
		if got := strings.Join(ids, ","); got != "ev1003,ev1002,ev1001,ev1000" {
			t.Errorf("ids = %s", got)
		}
	})
	t.Run("csv has a header row", func(t *testing.T) {
		w := call(h, "GET", "/v1/audit?user=bob", keyAudit, "", "Accept", "text/csv")
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
		}
		rows, err := csv.NewReader(w.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 3 {
			t.Fatalf("rows = %d, want header + 2", len(rows))
		}
		if got := strings.Join(rows[0], ","); got != strings.Join(audit.CSVHeader, ",") {
			t.Errorf("header = %s", got)
		}
		if rows[1][0] != "ev1003" || rows[2][0] != "ev1001" {
			t.Errorf("ids = %s, %s; want ev1003, ev1001", rows[1][0], rows[2][0])
		}
	})
	t.Run("accept preferences", func(t *testing.T) {
		for accept, want := range map[string]string{
			"":                                     "",
			"application/json":                     "",
			"*/*":                                  "",
			"text/html":                            "",
			"text/csv;q=0.5, application/x-ndjson": audit.ContentTypeNDJSON,
			"application/json;q=0.1, text/csv":     audit.ContentTypeCSV,
			"text/csv;q=0":                         "",
		} {
			if got := exportType(accept); got != want {
				t.Errorf("exportType(%q) = %q, want %q", accept, got, want)
			}
		}
	})
	t.Run("accept over several field lines", func(t *testing.T) {
		// RFC 9110 5.3: several Accept lines are one comma-separated list.
		req := httptest.NewRequest("GET", "/v1/audit", nil)
		req.Header.Set("Authorization", "Bearer "+keyAudit)
		req.Header.Add("Accept", "application/json;q=0.5")
		req.Header.Add("Accept", "text/csv")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if got := w.Header().Get("Content-Type"); w.Code != 200 || !strings.HasPrefix(got, audit.ContentTypeCSV) {
			t.Errorf("status %d, Content-Type %q; want 200, %s", w.Code, got, audit.ContentTypeCSV)
		}
	})
	t.Run("store failure before any byte is a 503 error body", func(t *testing.T) {
		failing := &fakeAudit{stream: func(context.Context, audit.Filter, func(audit.Event) error) error {
			return errorString("postgres down")
		}}
		h := newTestHandler(t, testConfig(), Deps{Audit: failing})
		w := call(h, "GET", "/v1/audit", keyAudit, "", "Accept", "text/csv")
		if w.Code != 503 {
			t.Fatalf("status = %d, want 503", w.Code)
		}
		if code, _ := errorOf(t, w); code != "unavailable" {
			t.Errorf("code = %s", code)
		}
	})
}
