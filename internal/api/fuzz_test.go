package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/guardhq/guard/internal/abuse"
)

// FuzzDecodeCheck drives arbitrary bodies through POST /v1/check and
// holds the API to its promises: bad input is never a 5xx, every error has
// the error body, and what reaches abuse is valid UTF-8 without NUL.
func FuzzDecodeCheck(f *testing.F) {
	for _, seed := range []string{
		`{"action":"login","user":"alice@example.com","ip":"203.0.113.7","device":"d-4f1c","cost":1,"dry_run":false}`,
		`{"action":"login","user":"\ud800"}`,
		`{"action":"login","user":"\ud83d\ude00"}`,
		`{"action":"login","user":"a\u0000"}`,
		"{\"action\":\"login\",\"user\":\"\xff\"}",
		`{"action":"login","user":"a"}{"x":1}`,
		`{"action":"login","user":{"nested":["\udc00"]}}`,
		`{"action":"login","cost":99999999999999999999}`,
		`{"ACTION":"login"}`,
		`{"action":"login","action":"otp_send","ip":"::1"}`,
		`[1,2,3]`,
		`"just a string"`,
		`{"action":"login","ip":"fe80::1%eth0"}`,
		`{"action":"login","user":"` + strings.Repeat("ß", 300) + `"}`,
		`{`,
		``,
		`{"action":"login","user":"\`,
		`{"action":"login","user":"\u12"}`,
	} {
		f.Add([]byte(seed))
	}
	guard := &fakeGuard{check: func(_ context.Context, in abuse.CheckInput) (abuse.Decision, error) {
		for _, p := range []*string{&in.Action, in.Subject.User, in.Subject.IP, in.Subject.Device} {
			if p != nil && (!utf8.ValidString(*p) || strings.IndexByte(*p, 0) >= 0) {
				panic("invalid text reached abuse: " + *p)
			}
		}
		if in.Cost < 1 {
			panic("cost below 1 reached abuse")
		}
		if in.Subject.User != nil {
			if _, err := abuse.NormalizeUser(*in.Subject.User); err != nil {
				return abuse.Decision{}, err
			}
		}
		if in.Subject.IP != nil {
			if _, err := abuse.ParseIP(*in.Subject.IP); err != nil {
				return abuse.Decision{}, err
			}
		}
		return abuse.Decision{ID: "01F", Allowed: true, Reason: abuse.ReasonOK}, nil
	}}
	h := newTestHandler(f, testConfig(), Deps{Guard: guard})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+keyCheck)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
		}
		if w.Code != 200 {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("body %q: status %d without an error body: %s", body, w.Code, w.Body)
			}
		}
	})
}
