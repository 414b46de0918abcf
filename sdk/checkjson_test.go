package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// canonicalAnswers are check answers as Guard writes them.
func canonicalAnswers(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, r := range []CheckResponse{
		{Decision: DecisionAllow, Reason: ReasonOK, DecisionID: "01JDXYZABCDEFGHJKMNPQRSTVW", Limits: []Limit{}},
		{Decision: DecisionAllow, Reason: ReasonOK, DecisionID: "01J", Limits: []Limit{
			{Rule: "login/ip", Dimension: "ip", Limit: 20, WindowMs: 60000, Remaining: 19, ResetMs: 59999},
			{Rule: "login/user", Dimension: "user+ip", Limit: 1000000, WindowMs: 900000, Remaining: 0, ResetMs: 0},
		}},
		{Decision: DecisionAllow, Reason: ReasonOK, DecisionID: "01L", Limits: []Limit{
			{Rule: "login/ip/distinct-user", Dimension: "ip", Limit: 20, WindowMs: 3600000, Remaining: 19, ResetMs: 3600000, Algorithm: "log", Distinct: "user"},
			{Rule: "otp/country", Dimension: "ip", Limit: 1000, WindowMs: 3600000, Remaining: 0, ResetMs: 7, Algorithm: "counter"},
			{Rule: "b", Dimension: "device", Limit: 3, WindowMs: 1, Remaining: 2, ResetMs: 1, Algorithm: "bucket"},
		}},
		{Decision: DecisionDeny, Reason: ReasonRateLimited, RetryAfterMs: 1234, DecisionID: "01K", Degraded: true,
			Limits: []Limit{{Rule: "r", Dimension: "device", Limit: -1, WindowMs: -9223372036854775808, Remaining: -5, ResetMs: 9223372036854775807}}},
		{Decision: DecisionDeny, Reason: ReasonStoreUnavailable, RetryAfterMs: 1000, Degraded: true},
		{Decision: "maybe", Reason: "new_reason", DecisionID: "x y~!", Limits: []Limit{{Rule: "a", Dimension: "user+device"}}},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestDecodeCheckResponse: Guard's answers take the fast path and decode
// to what encoding/json reads; anything else is left to encoding/json.
func TestDecodeCheckResponse(t *testing.T) {
	for i, b := range canonicalAnswers(t) {
		t.Run(fmt.Sprintf("canonical %d", i), func(t *testing.T) {
			var want, got CheckResponse
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if !decodeCheckResponse(b, &got) {
				t.Fatalf("decodeCheckResponse(%s) = false; want the fast path", b)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decodeCheckResponse(%s) = %+v; want %+v", b, got, want)
			}
		})
	}
	base := `{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`
	for _, tt := range []struct{ name, body string }{
		{"whitespace", strings.Replace(base, ":", ": ", 1)},
		{"trailing newline", base + "\n"},
		{"escaped string", strings.Replace(base, `"01J"`, `"0\u0031J"`, 1)},
		{"non-ASCII string", strings.Replace(base, `"01J"`, `"é"`, 1)},
		{"leading zero", strings.Replace(base, `"retry_after_ms":0`, `"retry_after_ms":01`, 1)},
		{"float", strings.Replace(base, `"retry_after_ms":0`, `"retry_after_ms":1.5`, 1)},
		{"overflow", strings.Replace(base, `"retry_after_ms":0`, `"retry_after_ms":9223372036854775808`, 1)},
		{"null bool", strings.Replace(base, `"degraded":false`, `"degraded":null`, 1)},
		{"lockout", strings.Replace(base, `"lockout":null`, `"lockout":{"dimension":"user","until":"2026-01-01T00:00:00.000Z","level":1}`, 1)},
		{"keys reordered", `{"reason":"ok","decision":"allow","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`},
		{"extra key", strings.Replace(base, `}`, `,"x":1}`, 1)},
		{"truncated", base[:len(base)-1]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got CheckResponse
			if decodeCheckResponse([]byte(tt.body), &got) {
				t.Errorf("decodeCheckResponse(%s) took the fast path; want encoding/json", tt.body)
			}
			if !reflect.DeepEqual(got, CheckResponse{}) {
				t.Errorf("out written on a refused body: %+v", got)
			}
		})
	}
}

// FuzzDecodeCheckResponse: whatever the fast path accepts, encoding/json
// decodes to the same value.
func FuzzDecodeCheckResponse(f *testing.F) {
	for _, b := range canonicalAnswers(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"decision":"allow","reason":"ok","retry_after_ms":-0,"decision_id":"","degraded":true,"limits":null,"lockout":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want CheckResponse
		wantErr := json.NewDecoder(bytes.NewReader(b)).Decode(&want)
		var got CheckResponse
		if decodeCheckResponse(b, &got) {
			if wantErr != nil {
				t.Fatalf("fast path accepted %q; encoding/json fails: %v", b, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeCheckResponse(%q) = %+v; encoding/json %+v", b, got, want)
			}
		}
		// The other direction: every answer in the form Guard writes
		// (encoding/json's encoding, no lockout, printable ASCII without
		// escapes) takes the fast path, so valid answers are not left to
		// the slow one by mistake.
		if wantErr != nil || want.Lockout != nil {
			return
		}
		canonical, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range canonical {
			if c < 0x20 || c > 0x7e || c == '\\' {
				return
			}
		}
		var again CheckResponse
		if !decodeCheckResponse(canonical, &again) || !reflect.DeepEqual(again, want) {
			t.Fatalf("fast path refused or misread Guard's own form %s (= %+v from %q)", canonical, want, b)
		}
	})
}

// TestDecodeAnswer: decodeAnswer reads like json.NewDecoder(body).Decode:
// the same values and the same errors, for short and long bodies, bodies
// with trailing data, and bodies whose reader fails.
func TestDecodeAnswer(t *testing.T) {
	long := `{"mode":"` + strings.Repeat("x", 3*maxBufferedAnswer) + `","redis":"ok"}`
	boom := errors.New("boom")
	tests := []struct {
		name string
		body func() io.Reader
	}{
		{"readiness", func() io.Reader {
			return strings.NewReader(`{"mode":"normal","redis":"ok","postgres":"down","audit_backlog":3}`)
		}},
		{"longer than the buffer", func() io.Reader { return strings.NewReader(long) }},
		{"trailing data", func() io.Reader { return strings.NewReader(`{"mode":"normal"} {"x"`) }},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(long)) }},
		{"empty", func() io.Reader { return strings.NewReader("") }},
		{"malformed", func() io.Reader { return strings.NewReader(`{"mode":`) }},
		{"wrong type", func() io.Reader { return strings.NewReader(`{"mode":1}`) }},
		{"reader fails mid-value", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"mode":"nor`), iotest.ErrReader(boom))
		}},
		{"reader fails after the value", func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"mode":"normal"}`), iotest.ErrReader(boom))
		}},
		{"reader fails past the buffer", func() io.Reader {
			return io.MultiReader(strings.NewReader(long[:2*maxBufferedAnswer]), iotest.ErrReader(boom))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want, got Readiness
			wantErr := json.NewDecoder(tt.body()).Decode(&want)
			gotErr := decodeAnswer(tt.body(), &got)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Errorf("decodeAnswer = %+v, %v; json.Decoder %+v, %v", got, gotErr, want, wantErr)
			}
		})
	}
	for i, b := range canonicalAnswers(t) {
		var want, got CheckResponse
		wantErr := json.NewDecoder(bytes.NewReader(b)).Decode(&want)
		if err := decodeAnswer(iotest.HalfReader(bytes.NewReader(b)), &got); err != nil || wantErr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("answer %d: decodeAnswer = %+v, %v; want %+v, %v", i, got, err, want, wantErr)
		}
	}
	lock := CheckResponse{Decision: DecisionDeny, Reason: ReasonLockedOut, Limits: []Limit{},
		Lockout: &Lockout{Dimension: "user", Until: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), Level: 2}}
	b, _ := json.Marshal(lock)
	var got CheckResponse
	if err := decodeAnswer(bytes.NewReader(b), &got); err != nil || !reflect.DeepEqual(got, lock) {
		t.Errorf("lockout answer: decodeAnswer = %+v, %v; want %+v", got, err, lock)
	}
}
