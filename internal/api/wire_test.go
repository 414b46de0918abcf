package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// jsonTags lists the JSON tags of t's fields in order, "-" excluded.
func jsonTags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("json"); tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// TestServerWireFollowsSDK: the server's encodings carry exactly the SDK
// types' fields, in order, so the SDK stays the one list of wire fields.
func TestServerWireFollowsSDK(t *testing.T) {
	tests := []struct {
		name         string
		server, wire any
	}{
		{"lockout", lockoutJSON{}, sdk.Lockout{}},
		{"lockout entry", lockoutEntryJSON{}, sdk.LockoutEntry{}},
		{"report answer", reportJSON{}, sdk.ReportResponse{}},
		{"lockouts answer", lockoutsJSON{}, sdk.LockoutsResponse{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := jsonTags(reflect.TypeOf(tt.server)), jsonTags(reflect.TypeOf(tt.wire))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("server fields %q; SDK fields %q", got, want)
			}
		})
	}
}

// TestLockoutsRoundTrip: what the server writes, the SDK reads back as
// the value it was, times to the millisecond.
func TestLockoutsRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	in := sdk.LockoutsResponse{Lockouts: []sdk.LockoutEntry{
		{Ledger: "auth", Dimension: "user+ip", User: sdk.String("bob"), IP: sdk.String("192.0.2.1"), Level: 2,
			Since: at, Until: at.Add(5*time.Minute + 1500*time.Microsecond)},
	}, NextCursor: sdk.String("c1")}
	b, err := json.Marshal(encodeLockouts(in))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"lockouts":[{"ledger":"auth","dimension":"user+ip","user":"bob","ip":"192.0.2.1","level":2,` +
		`"since":"2026-03-01T11:00:00.000Z","until":"2026-03-01T11:05:00.001Z"}],"next_cursor":"c1"}`
	if string(b) != want {
		t.Errorf("encoded %s\nwant    %s", b, want)
	}
	var back sdk.LockoutsResponse
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	l := back.Lockouts[0]
	if back.NextCursor == nil || *back.NextCursor != "c1" {
		t.Errorf("decoded next cursor %v", back.NextCursor)
	}
	if !l.Since.Equal(at) || !l.Until.Equal(at.Add(5*time.Minute+time.Millisecond)) || *l.User != "bob" || l.Device != nil {
		t.Errorf("decoded %+v", l)
	}
	if empty, _ := json.Marshal(encodeLockouts(sdk.LockoutsResponse{})); string(empty) != `{"lockouts":[],"next_cursor":null}` {
		t.Errorf("no lockouts = %s", empty)
	}
}

// TestErrorBodyWire: every error body carries code, message, field (when
// one is at fault) and request_id (contract v1.1), the keys the SDK's
// error decoder reads into sdk.Error.
func TestErrorBodyWire(t *testing.T) {
	if got, want := jsonTags(reflect.TypeOf(errorDetail{})), []string{
		"code", "message", "field,omitempty", "request_id,omitempty",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("error detail fields %q, want %q", got, want)
	}
	b, err := json.Marshal(errorBody{Error: errorDetail{Code: sdk.CodeInvalidRequest, Message: "m", Field: "user", RequestID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"error":{"code":"invalid_request","message":"m","field":"user","request_id":"r1"}}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
}
