package audit

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// spoolFrame is a payload as the spool frames it on disk.
func spoolFrame(p []byte) []byte {
	h := make([]byte, spoolHeaderSize, spoolHeaderSize+len(p))
	binary.BigEndian.PutUint32(h[:4], uint32(len(p)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(p, crcTable))
	return append(h, p...)
}

func fullEvent() Event {
	retry, deg, dry := int64(1500), true, false
	lu := time.Date(2026, 11, 30, 6, 0, 0, 123e6, time.UTC)
	return Event{
		ID: "01JDXR8Q7Y0000000000000000", At: time.Date(2026, 11, 30, 5, 30, 43, 123e6, time.UTC),
		Kind: KindCheck, Action: "login", Decision: "deny", Reason: "locked_out", User: "alice@example.com",
		IP: "203.0.113.7", Device: "dev-1", Rule: "login/user", RetryAfterMs: &retry, LockoutUntil: &lu,
		Degraded: &deg, DryRun: &dry, APIKey: "auth-service", DecisionID: "01JDXR8Q7Y0000000000000000",
		Instance: "guard-1", Note: "n",
	}
}

// TestSpoolReplaysVersion0 feeds a spool written before records were
// versioned (the API JSON of that time, byte for byte) to today's reader,
// followed by a record of today's version and one of a version from the
// future: the old and the new replay, the unknown one is skipped.
func TestSpoolReplaysVersion0(t *testing.T) {
	dir := t.TempDir()
	v0 := []byte(`{"id":"01JDXR8Q7Y0000000000000000","at":"2026-11-30T05:30:43.123Z","kind":"check","action":"login","decision":"deny","reason":"locked_out","outcome":null,"user":"alice@example.com","ip":"203.0.113.7","device":"dev-1","rule":"login/user","retry_after_ms":1500,"lockout_until":"2026-11-30T06:00:00.123Z","degraded":true,"dry_run":false,"api_key":"auth-service","decision_id":"01JDXR8Q7Y0000000000000000","instance":"guard-1","note":"n"}`)
	v0report := []byte(`{"id":"r-1","at":"2026-11-30T05:31:00.000Z","kind":"report","action":"login","decision":null,"reason":null,"outcome":"failure","user":"bob@example.com","ip":null,"device":null,"rule":null,"retry_after_ms":null,"lockout_until":null,"degraded":null,"dry_run":null,"api_key":"auth-service","decision_id":null,"instance":"guard-1","note":null}`)
	current := fullEvent()
	current.ID = "v1-event"
	v1, err := encodeSpoolRecord(current)
	if err != nil {
		t.Fatal(err)
	}
	future := append([]byte{0x7f}, `{"id":"x"}`...)
	var file []byte
	for _, p := range [][]byte{v0, v0report, v1, future} {
		file = append(file, spoolFrame(p)...)
	}
	if err := os.WriteFile(filepath.Join(dir, spoolFileName), file, 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := openSpool(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	events, _, records, err := sp.read(10)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got, want := records, 4; got != want {
		t.Errorf("records read = %d, want %d", got, want)
	}
	want := []Event{fullEvent(), {
		ID: "r-1", At: time.Date(2026, 11, 30, 5, 31, 0, 0, time.UTC), Kind: KindReport, Action: "login",
		Outcome: "failure", User: "bob@example.com", APIKey: "auth-service", Instance: "guard-1",
	}, current}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("replayed\n%+v\nwant\n%+v", events, want)
	}
}

// TestSpoolRecordIsNotTheAPIJSON pins the current version's bytes: a
// change to the API's JSON must not change them, and a change to them
// needs a new version (and this test's update).
func TestSpoolRecordIsNotTheAPIJSON(t *testing.T) {
	e := fullEvent()
	e.Phone = "+447400123456"
	p, err := encodeSpoolRecord(e)
	if err != nil {
		t.Fatal(err)
	}
	want := "\x02" + `{"id":"01JDXR8Q7Y0000000000000000","at":1796016643123,"k":"check","a":"login","d":"deny","r":"locked_out","u":"alice@example.com","ip":"203.0.113.7","dev":"dev-1","rule":"login/user","retry":1500,"lock":1796018400123,"deg":true,"dry":false,"key":"auth-service","did":"01JDXR8Q7Y0000000000000000","inst":"guard-1","note":"n","ph":"+447400123456"}`
	if string(p) != want {
		t.Errorf("record =\n%s\nwant\n%s", p, want)
	}
	api, _ := e.MarshalJSON()
	if string(p[1:]) == string(api) {
		t.Errorf("the spool record is the API's JSON")
	}
	got, err := decodeSpoolRecord(p)
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("decode = %+v, %v; want %+v", got, err, e)
	}
}

// TestSpoolReadsVersion1 holds the reader to records of version 1 (before
// phone numbers), byte for byte as Guard wrote them.
func TestSpoolReadsVersion1(t *testing.T) {
	v1 := "\x01" + `{"id":"01JDXR8Q7Y0000000000000000","at":1796016643123,"k":"check","a":"login","d":"deny","r":"locked_out","u":"alice@example.com","ip":"203.0.113.7","dev":"dev-1","rule":"login/user","retry":1500,"lock":1796018400123,"deg":true,"dry":false,"key":"auth-service","did":"01JDXR8Q7Y0000000000000000","inst":"guard-1","note":"n"}`
	got, err := decodeSpoolRecord([]byte(v1))
	if want := fullEvent(); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decode v1 = %+v, %v; want %+v", got, err, want)
	}
}
