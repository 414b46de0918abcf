package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

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
		if in.Cost > 30 {
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

// FuzzScanObjectKeys: for any JSON object scanObject accepts, the keys it
// reports are the top-level keys encoding/json reads, in order (the
// fast path that copies an unescaped key must agree with unquoting).
func FuzzScanObjectKeys(f *testing.F) {
	for _, s := range []string{
		`{"action":"login","user":"a"}`, `{"a\u0062":1,"é":{"x":[1,"y"]},"":null}`, `{"\"":1,"\\":2}`,
		`{"a":{"b":"c"},"a":1}`, "{\"\xff\":1}", `{"\ud83d\ude00":true}`, `{ "k" : "v" , "l" : [ ] }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := scanObject(body, []string{"action", "user", "ip"}, nil)
		if err != nil || !json.Valid(body) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		var want []string
		depth := 0
		expectKey := false
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch v := tok.(type) {
			case json.Delim:
				if v == '{' || v == '[' {
					depth++
					expectKey = depth == 1 && v == '{'
					continue
				}
				depth--
			case string:
				if depth == 1 && expectKey {
					want = append(want, v)
					expectKey = false
					continue
				}
			}
			if depth == 1 {
				expectKey = true
			}
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("scanObject(%q) keys = %q; encoding/json reads %q", body, keys, want)
		}
	})
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
