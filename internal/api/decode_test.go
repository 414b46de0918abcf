package api

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

func TestCheckRequestValidation(t *testing.T) {
	var got abuse.CheckInput
	guard := &fakeGuard{check: func(_ context.Context, in abuse.CheckInput) (abuse.Decision, error) {
		got = in
		if in.Subject == (abuse.Subject{}) { // as abuse: identifiers are its to check
			return abuse.Decision{}, &abuse.InputError{Code: abuse.CodeInvalidRequest, Message: "at least one of user, ip and device is required"}
		}
		if in.Subject.User != nil && *in.Subject.User == "" {
			return abuse.Decision{}, &abuse.InputError{Code: abuse.CodeInvalidRequest, Field: "user", Message: "user is empty after normalisation"}
		}
		if in.Subject.IP != nil {
			if _, err := abuse.ParseIP(*in.Subject.IP); err != nil {
				return abuse.Decision{}, err
			}
		}
		if in.Action != "login" {
			return abuse.Decision{}, &abuse.InputError{Code: abuse.CodeUnknownAction, Field: "action", Message: "unknown action"}
		}
		if in.Cost < 1 || in.Cost > 30 {
			return abuse.Decision{}, &abuse.InputError{Code: abuse.CodeInvalidRequest, Field: "cost", Message: "cost must be from 1 to 30"}
		}
		return abuse.Decision{ID: "01X", Allowed: true, Reason: abuse.ReasonOK}, nil
	}}
	h := newTestHandler(t, testConfig(), Deps{Guard: guard})
	big := `{"action":"login","user":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	exact := `{"action":"login","user":"` + strings.Repeat("a", MaxBodyBytes-len(`{"action":"login","user":""}`)) + `"}`
	tests := []struct {
		name        string
		body        string
		contentType string
		wantStatus  int
		wantCode    string
		wantField   string
	}{
		{"ok", `{"action":"login","user":"alice"}`, "", 200, "", ""},
		{"ok with charset", `{"action":"login","ip":"203.0.113.7"}`, "application/json; charset=utf-8", 200, "", ""},
		{"ok at exactly 8 KiB", exact, "", 200, "", ""},
		{"surrogate pair is fine", `{"action":"login","user":"\ud83d\ude00"}`, "", 200, "", ""},
		{"null identifier is absent", `{"action":"login","user":null,"ip":"192.0.2.1"}`, "", 200, "", ""},
		{"too large", big, "", 413, "too_large", ""},
		{"no content type", `{"action":"login","user":"a"}`, "-", 415, "unsupported_media_type", ""},
		{"text/plain", `{"action":"login","user":"a"}`, "text/plain", 415, "unsupported_media_type", ""},
		{"form", `action=login`, "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"empty body", ``, "application/json", 400, "invalid_request", ""},
		{"array body", `[{"action":"login"}]`, "", 400, "invalid_request", ""},
		{"malformed", `{"action":"login",`, "", 400, "invalid_request", ""},
		{"trailing object", `{"action":"login","user":"a"}{}`, "", 400, "invalid_request", ""},
		{"trailing garbage", `{"action":"login","user":"a"} x`, "", 400, "invalid_request", ""},
		{"unknown field", `{"action":"login","user":"a","password":"x"}`, "", 400, "invalid_request", "password"},
		{"case variant field", `{"ACTION":"login","user":"a"}`, "", 400, "invalid_request", "ACTION"},
		{"duplicate field", `{"action":"login","user":"a","user":"b"}`, "", 400, "invalid_request", "user"},
		{"cost as string", `{"action":"login","user":"a","cost":"2"}`, "", 400, "invalid_request", "cost"},
		{"cost fractional", `{"action":"login","user":"a","cost":1.5}`, "", 400, "invalid_request", "cost"},
		{"cost huge", `{"action":"login","user":"a","cost":1e40}`, "", 400, "invalid_request", "cost"},
		{"cost zero", `{"action":"login","user":"a","cost":0}`, "", 400, "invalid_request", "cost"},
		{"cost negative", `{"action":"login","user":"a","cost":-1}`, "", 400, "invalid_request", "cost"},
		// The action first, whatever the cost (abuse's order).
		{"cost zero, unknown action", `{"action":"nope","user":"a","cost":0}`, "", 400, "unknown_action", "action"},
		{"cost over smallest limit", `{"action":"login","user":"a","cost":31}`, "", 400, "invalid_request", "cost"},
		{"user as number", `{"action":"login","user":42}`, "", 400, "invalid_request", "user"},
		{"dry_run as string", `{"action":"login","user":"a","dry_run":"yes"}`, "", 400, "invalid_request", "dry_run"},
		{"escaped NUL", `{"action":"login","user":"a\u0000b"}`, "", 400, "invalid_request", "user"},
		{"raw NUL", "{\"action\":\"login\",\"device\":\"a\x00b\"}", "", 400, "invalid_request", "device"},
		{"lone high surrogate", `{"action":"login","user":"\ud800"}`, "", 400, "invalid_request", "user"},
		{"lone low surrogate", `{"action":"login","user":"x\udc00"}`, "", 400, "invalid_request", "user"},
		{"high surrogate then letter", `{"action":"login","user":"\ud800\u0041"}`, "", 400, "invalid_request", "user"},
		{"invalid UTF-8", "{\"action\":\"login\",\"user\":\"\xff\xfe\"}", "", 400, "invalid_request", "user"},
		{"UTF-8 encoded surrogate", "{\"action\":\"login\",\"user\":\"\xed\xa0\x80\"}", "", 400, "invalid_request", "user"},
		{"bad key text", "{\"\xff\":1}", "", 400, "invalid_request", ""},
		{"missing action", `{"user":"a"}`, "", 400, "invalid_request", "action"},
		{"no identifiers", `{"action":"login"}`, "", 400, "invalid_request", ""},
		{"unknown action", `{"action":"launch","user":"a"}`, "", 400, "unknown_action", "action"},
		{"empty user", `{"action":"login","user":""}`, "", 400, "invalid_request", "user"},
		{"ip with zone", `{"action":"login","ip":"fe80::1%eth0"}`, "", 400, "invalid_request", "ip"},
		{"ip leading zeros", `{"action":"login","ip":"010.0.0.1"}`, "", 400, "invalid_request", "ip"},
		{"ip garbage", `{"action":"login","ip":"not-an-ip"}`, "", 400, "invalid_request", "ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			switch tt.contentType {
			case "":
			case "-":
				headers = []string{"Content-Type", ""}
			default:
				headers = []string{"Content-Type", tt.contentType}
			}
			w := call(h, http.MethodPost, "/v1/check", keyCheck, tt.body, headers...)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantStatus == 200 {
				return
			}
			code, field := errorOf(t, w)
			if code != tt.wantCode || field != tt.wantField {
				t.Errorf("error = %s/%q, want %s/%q (body %s)", code, field, tt.wantCode, tt.wantField, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
		})
	}
	t.Run("input reaches abuse", func(t *testing.T) {
		w := call(h, http.MethodPost, "/v1/check", keyCheck, `{"action":"login","user":"Alice","device":"d1","cost":3,"dry_run":true}`)
		if w.Code != 200 {
			t.Fatalf("status = %d: %s", w.Code, w.Body)
		}
		if got.Action != "login" || *got.Subject.User != "Alice" || *got.Subject.Device != "d1" ||
			got.Subject.IP != nil || got.Cost != 3 || !got.DryRun || got.APIKey != "auth-service" {
			t.Errorf("abuse got %+v, want login/Alice/d1 cost 3 dry run by auth-service", got)
		}
	})
}

func TestReportRequestValidation(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantField  string
	}{
		{"ok", `{"action":"login","user":"a","outcome":"failure","decision_id":"01X"}`, 200, ""},
		{"missing action", `{"user":"a","outcome":"failure"}`, 400, "action"},
		{"unknown field", `{"action":"login","user":"a","outcome":"success","cost":1}`, 400, "cost"},
		{"lone surrogate", `{"action":"login","user":"a","outcome":"success","decision_id":"\udfff"}`, 400, "decision_id"},
		// The outcome and the identifiers are abuse's to check, after the
		// action: see TestIntegrationBadInput.
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := call(h, http.MethodPost, "/v1/report", keyCheck, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantStatus != 200 {
				if _, field := errorOf(t, w); field != tt.wantField {
					t.Errorf("field = %q, want %q", field, tt.wantField)
				}
				return
			}
			if got := strings.TrimSpace(w.Body.String()); got != `{"lockout":null}` {
				t.Errorf("body = %s, want {\"lockout\":null}", got)
			}
		})
	}
}

func TestBodyTooLargeByContentLength(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{})
	req := newRequest(http.MethodPost, "/v1/check", strings.NewReader(`{}`))
	req.ContentLength = MaxBodyBytes + 1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyCheck)
	w := serve(h, req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413", w.Code)
	}
	if code, _ := errorOf(t, w); code != "too_large" {
		t.Errorf("code = %s, want too_large", code)
	}
}

// BenchmarkDecodeStrict decodes a typical check body: the strict scan,
// the key checks and encoding/json.
func BenchmarkDecodeStrict(b *testing.B) {
	body := []byte(`{"action":"login","user":"alice@example.com","ip":"203.0.113.7","device":"d-4f1c"}`)
	for b.Loop() {
		var req sdk.CheckRequest
		if err := decodeStrict(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeStrict holds decodeStrict to encoding/json from both sides:
// whatever it accepts, encoding/json decodes to the same value; and every
// body that is valid by the contract (one object, known keys exactly
// spelled and once, valid UTF-8, no NUL, no lone surrogate) is accepted.
// A valid body is also made from every value encoding/json reads, by
// encoding that value again, so the second direction is exercised on
// more than the inputs that happen to be valid.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"action":"login","user":"alice@example.com","ip":"203.0.113.7","device":"d-4f1c","cost":1,"dry_run":false}`,
		`{"action":"login","user":"\ud83d\ude00"}`, `{"action":"login","user":"\ud800"}`, `{"action":"a\u0000"}`,
		`{"action":"login","user":null}`, `{"ACTION":"login"}`, `{"action":"a","action":"b"}`, "{\"action\":\"\xff\"}",
		`{"action":"login","cost":1e2}`, `{"action":"login","cost":-0}`, `{"action":"x"} `, `{"action":"\u00e9\/"}`,
		`{"action":"login","user":"\ufffd"}`, `{"action":"login","dry_run":null,"cost":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got sdk.CheckRequest
		gotErr := decodeStrict(body, &got)
		var want sdk.CheckRequest
		dec := stdjson.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		wantErr := dec.Decode(&want)
		if wantErr == nil {
			if _, err := dec.Token(); err != io.EOF {
				wantErr = errors.New("trailing data")
			}
		}
		if gotErr == nil {
			if wantErr != nil {
				t.Fatalf("decodeStrict accepted %q; encoding/json: %v", body, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeStrict(%q) = %+v; encoding/json %+v", body, got, want)
			}
		} else if wantErr == nil && contractValid(body, want) {
			t.Fatalf("decodeStrict refused valid %q: %v", body, gotErr)
		}
		if wantErr != nil || !validText(want) {
			return
		}
		canonical, err := stdjson.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var again sdk.CheckRequest
		if err := decodeStrict(canonical, &again); err != nil || !reflect.DeepEqual(again, want) {
			t.Fatalf("decodeStrict(%s) = %+v, %v; want %+v (encoding/json's own encoding of %q)", canonical, again, err, want, body)
		}
	})
}

// validText reports whether every string of r is valid UTF-8 without NUL
// and without U+FFFD (which encoding/json substitutes for what is invalid).
func validText(r sdk.CheckRequest) bool {
	for _, p := range []*string{&r.Action, r.User, r.IP, r.Device} {
		if p != nil && (!utf8.ValidString(*p) || strings.ContainsAny(*p, "\x00\ufffd")) {
			return false
		}
	}
	return true
}

// contractValid is the contract's idea of a valid body, decided without
// decodeStrict: encoding/json reads it (known fields), the text is valid
// UTF-8 with no U+FFFD at all (so none was substituted), no string holds
// NUL, and its top-level keys are exact field names, each once.
func contractValid(body []byte, decoded sdk.CheckRequest) bool {
	if !utf8.Valid(body) || bytes.Contains(body, []byte("\ufffd")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) || !validText(decoded) {
		return false
	}
	dec := stdjson.NewDecoder(bytes.NewReader(body))
	seen := map[string]bool{}
	depth, expectKey := 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return err == io.EOF
		}
		switch v := tok.(type) {
		case stdjson.Delim:
			if v == '{' || v == '[' {
				depth++
				expectKey = depth == 1 && v == '{'
				continue
			}
			depth--
		case string:
			if depth == 1 && expectKey {
				if seen[v] || !jsonFields(&decoded).set[v] {
					return false
				}
				seen[v] = true
				expectKey = false
				continue
			}
		}
		if depth == 1 {
			expectKey = true
		}
	}
}

func TestDecodeStrictFindsNULAnywhere(t *testing.T) {
	type request struct {
		Name string            `json:"name"`
		Tags []string          `json:"tags"`
		Meta map[string]string `json:"meta"`
	}
	tests := []struct{ body, field string }{
		{`{"name":"a\u0000"}`, "name"},
		{`{"name":"a","tags":["x","y\u0000"]}`, "tags"},
		{`{"meta":{"k\u0000":"v"}}`, "meta"},
		{`{"name":"\\u0000 is text here"}`, ""},
	}
	for _, tt := range tests {
		var dst request
		err := decodeStrict([]byte(tt.body), &dst)
		var e *Error
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", tt.body, err)
			}
			continue
		}
		if !errors.As(err, &e) || e.Field != tt.field {
			t.Errorf("%s: error %v, want one naming field %s", tt.body, err, tt.field)
		}
	}
}

// A body that says it is compressed is 415 (it would be garbage read as
// JSON); identity is no coding.
func TestContentEncodingRefused(t *testing.T) {
	guard := &fakeGuard{check: func(context.Context, abuse.CheckInput) (abuse.Decision, error) {
		return abuse.Decision{ID: "01X", Allowed: true, Reason: abuse.ReasonOK}, nil
	}}
	h := newTestHandler(t, testConfig(), Deps{Guard: guard})
	body := `{"action":"login","user":"alice"}`
	for ce, want := range map[string]int{"gzip": 415, "br": 415, "identity": 200, "Identity ": 200, "identity, gzip": 415} {
		w := call(h, http.MethodPost, "/v1/check", keyCheck, body, "Content-Encoding", ce)
		if w.Code != want {
			t.Errorf("Content-Encoding %q: status %d, want %d (%s)", ce, w.Code, want, w.Body)
		}
		if want == 415 {
			if code, _ := errorOf(t, w); code != "unsupported_media_type" {
				t.Errorf("Content-Encoding %q: code %s", ce, code)
			}
		}
	}
	// The header twice: every value counts.
	req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyCheck)
	req.Header.Add("Content-Encoding", "identity")
	req.Header.Add("Content-Encoding", "gzip")
	if w := serve(h, req); w.Code != 415 {
		t.Errorf("Content-Encoding identity then gzip: status %d, want 415", w.Code)
	}
}

// A cost that is no plain integer says why.
func TestCostMessages(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Guard: &fakeGuard{}})
	for body, want := range map[string]string{
		`{"action":"login","user":"a","cost":2.0}`:                  "cost must be an integer written without a fraction or exponent (such as 2)",
		`{"action":"login","user":"a","cost":1e0}`:                  "cost must be an integer written without a fraction or exponent (such as 2)",
		`{"action":"login","user":"a","cost":99999999999999999999}`: "cost is out of range",
	} {
		w := call(h, http.MethodPost, "/v1/check", keyCheck, body)
		code, field := errorOf(t, w)
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = stdjson.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != 400 || code != "invalid_request" || field != "cost" || e.Error.Message != want {
			t.Errorf("%s: %d %s %s %q, want 400 invalid_request cost %q", body, w.Code, code, field, e.Error.Message, want)
		}
	}
}
