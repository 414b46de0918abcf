package sdk

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// An event decoded from GET /v1/audit encodes back to the same JSON:
// times keep their three fractional digits (time.Time alone would write
// "…07.63Z" and "…00Z"), every field its name and null.
func TestAuditEventEncodesAsTheWire(t *testing.T) {
	for _, wire := range []string{
		`{"id":"01A","at":"2026-12-01T21:40:07.630Z","kind":"report","action":"login","decision":null,"reason":null,"outcome":"failure",` +
			`"user":"alice@example.com","ip":"203.0.113.7","device":null,"phone":null,"rule":null,"retry_after_ms":null,` +
			`"lockout_until":"2026-12-01T21:30:00.000Z","degraded":false,"dry_run":null,"api_key":"auth","decision_id":null,"instance":"g1","note":null}`,
		`{"id":"01B","at":"2026-12-01T21:30:00.000Z","kind":"admin","action":"unlock","decision":null,"reason":null,"outcome":null,` +
			`"user":"bob","ip":null,"device":null,"phone":null,"rule":null,"retry_after_ms":null,` +
			`"lockout_until":null,"degraded":null,"dry_run":null,"api_key":"ops","decision_id":null,"instance":"g1","note":"verified"}`,
	} {
		var e AuditEvent
		if err := json.Unmarshal([]byte(wire), &e); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(AuditPage{Events: []AuditEvent{e}})
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Events []map[string]any }
		var want map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(wire), &want)
		if len(got.Events) != 1 || !reflect.DeepEqual(got.Events[0], want) {
			t.Errorf("encoded\n%s\nwant the fields of\n%s", out, wire)
		}
	}
}

// Lockouts in answers encode back with the wire's times too.
func TestLockoutsEncodeAsTheWire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("x", 3600))
	b, err := json.Marshal(CheckResponse{Lockout: &Lockout{Dimension: "user", Until: at, Level: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"lockout":{"dimension":"user","level":2,"until":"2026-01-02T02:04:05.600Z"}`) {
		t.Errorf("check answer encoded %s", b)
	}
	b, err = json.Marshal(LockoutsResponse{Lockouts: []LockoutEntry{{Ledger: "auth", Dimension: "user", User: String("bob"), Level: 1, Since: at, Until: at.Add(time.Minute)}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"since":"2026-01-02T02:04:05.600Z","until":"2026-01-02T02:05:05.600Z"`) {
		t.Errorf("lockouts encoded %s", b)
	}
}
