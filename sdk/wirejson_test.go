package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestAppendCheckRequestMatchesEncodingJSON: the hand-written request body
// is byte for byte json.Marshal's, omitempty included.
func TestAppendCheckRequestMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		r    CheckRequest
	}{
		{"zero", CheckRequest{}},
		{"typical", CheckRequest{Action: "login", User: ptr("alice@example.com"), IP: ptr("203.0.113.7")}},
		{"all fields", CheckRequest{Action: "otp_send", User: ptr("u"), IP: ptr("::1"), Device: ptr("d-4f1c"), Phone: ptr("+44 7400 123456"), Cost: ptr(3), DryRun: true, ChallengePassed: true}},
		{"phone only", CheckRequest{Action: "otp_send", Phone: ptr("＋４４７４００１２３４５６")}},
		{"empty strings present", CheckRequest{User: ptr(""), IP: ptr(""), Device: ptr(""), Phone: ptr("")}},
		{"zero and negative cost", CheckRequest{Action: "a", Cost: ptr(0)}},
		{"negative cost", CheckRequest{Action: "a", Cost: ptr(-9223372036854775808)}},
		{"escapes", CheckRequest{Action: "<a&b>", User: ptr("\"\\\b\f\n\r\t\x00\x1f\x7f"), IP: ptr("\u2028\u2029"), Device: ptr("\xff\xc3é😀")}},
		{"long", CheckRequest{Action: "login", User: ptr(strings.Repeat("ß&", 300))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendCheckRequest(nil, &tt.r); !bytes.Equal(got, want) {
				t.Errorf("appendCheckRequest =\n%s\nwant (encoding/json)\n%s", got, want)
			}
		})
	}
}

// FuzzAppendCheckRequest: for any strings, cost and flags the body is
// json.Marshal's.
func FuzzAppendCheckRequest(f *testing.F) {
	f.Add("login", "alice@example.com", "203.0.113.7", "", 0, false, uint8(3))
	f.Add("<>&", "\xff\u2028", "\x00\"\\", "é", -1, true, uint8(15))
	f.Add("otp_send", "", "", "+447400123456", 0, false, uint8(16))
	f.Fuzz(func(t *testing.T, action, user, ip, device string, cost int, dry bool, present uint8) {
		r := CheckRequest{Action: action, DryRun: dry}
		if present&1 != 0 {
			r.User = &user
		}
		if present&2 != 0 {
			r.IP = &ip
		}
		if present&4 != 0 {
			r.Device = &device
		}
		if present&8 != 0 {
			r.Cost = &cost
		}
		if present&16 != 0 {
			r.Phone = &device // any string will do
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendCheckRequest(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("appendCheckRequest(%+v) =\n%s\nwant\n%s", r, got, want)
		}
	})
}

// TestCheckRequestWire: what Check sends: the method, path, headers and
// the body encoding/json would write.
func TestCheckRequestWire(t *testing.T) {
	var got *http.Request
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`)
	}))
	defer srv.Close()
	req := CheckRequest{Action: "login", User: ptr("a<b>@example.com"), Cost: ptr(2)}
	res, err := New(srv.URL+"/", "k-1", WithUserAgent("ua/1")).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed() || res.DecisionID != "01J" || res.Limits == nil {
		t.Errorf("answer = %+v", res)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/v1/check" || got.URL.RawQuery != "" {
		t.Errorf("request = %s %s", got.Method, got.URL)
	}
	for k, want := range map[string]string{
		"Content-Type": "application/json", "Accept": "application/json",
		"User-Agent": "ua/1", "Authorization": "Bearer k-1",
	} {
		if v := got.Header.Values(k); len(v) != 1 || v[0] != want {
			t.Errorf("%s = %q; want [%q]", k, v, want)
		}
	}
	want, _ := json.Marshal(req)
	if !bytes.Equal(gotBody, want) {
		t.Errorf("body = %s; want %s", gotBody, want)
	}
	if got.ContentLength != int64(len(want)) {
		t.Errorf("Content-Length = %d; want %d", got.ContentLength, len(want))
	}
}

// FuzzAppendJSONString: any string, valid UTF-8 or not, is quoted exactly
// as encoding/json quotes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "ok", `"\`, "<>&", "\u2028\u2029", "\xff", "\xe2\x80\xa8", "\x00\x1f\x7f", "é😀", "\xed\xa0\x80"} {
		f.Add(s, int64(0), 0)
	}
	f.Fuzz(func(t *testing.T, s string, _ int64, _ int) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
	})
}
