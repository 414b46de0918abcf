package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

// challengeStack serves signup (a challenge rule on the device, a deny
// rule on the IP) and otp_verify (reserve_failures, 3 failures strike).
func challengeStack(t *testing.T) *stack {
	return newStack(t, func(c *abuse.Config) {
		c.Policy.Actions = map[string]abuse.Action{
			"signup": {Limits: []abuse.Rule{
				{Dimension: abuse.DimDevice, Limit: 1, Window: time.Minute, OnLimit: abuse.OnLimitChallenge},
				{Dimension: abuse.DimIP, Limit: 3, Window: time.Minute},
			}},
			"otp_verify": {
				Limits:          []abuse.Rule{{Dimension: abuse.DimIP, Limit: 100, Window: time.Minute}},
				Failures:        []abuse.Rule{{Dimension: abuse.DimUser, Limit: 3, Window: 10 * time.Minute}},
				Lockout:         abuse.Lockout{Ladder: []time.Duration{time.Minute}},
				ReserveFailures: true,
			},
		}
	})
}

func TestIntegrationChallenge(t *testing.T) {
	s := challengeStack(t)
	const body = `{"action":"signup","ip":"203.0.113.7","device":"d-1"`
	if w := s.do(t, "POST", "/v1/check", "k-check", body+`}`); w.Code != 200 {
		t.Fatalf("first check = %d %s", w.Code, w.Body)
	}
	s.clock.Advance(10 * time.Second)
	w := s.do(t, "POST", "/v1/check", "k-check", body+`}`)
	var got checkAnswer
	decodeStrictly(t, w, &got)
	if got.Decision != "challenge" || got.Reason != "challenge_required" || got.RetryAfterMs != 50000 || got.Lockout != nil {
		t.Errorf("challenge = %+v; want decision challenge, reason challenge_required, retry_after_ms 50000 (when the device rule frees up)", got)
	}
	if len(got.Limits) != 2 || got.Limits[0].Rule != "signup/device" || got.Limits[0].Remaining != 0 || got.Limits[1].Remaining != 2 {
		t.Errorf("challenge limits = %+v; want signup/device remaining 0 first, signup/ip remaining 2", got.Limits)
	}
	if ra := w.Header().Get("Retry-After"); ra != "" {
		t.Errorf("challenge has Retry-After %q; want none", ra)
	}
	if rl := w.Header().Get("RateLimit"); rl != `"signup/device";r=0;t=50, "signup/ip";r=2;t=50` {
		t.Errorf("RateLimit = %q", rl)
	}

	w = s.do(t, "POST", "/v1/check", "k-check", body+`,"challenge_passed":true}`)
	got = checkAnswer{}
	decodeStrictly(t, w, &got)
	if got.Decision != "allow" || got.Reason != "ok" || got.RetryAfterMs != 0 {
		t.Errorf("passed = %+v; want allow ok", got)
	}
	if w := s.do(t, "POST", "/v1/check", "k-check", body+`,"challenge_passed":"yes"}`); w.Code != 400 || !jsonHasField(w, "challenge_passed") {
		t.Errorf("challenge_passed as a string = %d %s; want 400 field challenge_passed", w.Code, w.Body)
	}

	// Forward-auth answers a challenge with 429 and the generic body.
	req := httptest.NewRequest("GET", "/v1/forward-auth?action=signup", nil)
	req.RemoteAddr = "203.0.113.7:1234"
	req.Header.Set("Authorization", "Bearer k-check")
	req.Header.Set("X-Guard-Device", "d-1")
	fw := httptest.NewRecorder()
	s.h.ServeHTTP(fw, req)
	var denial struct {
		Error map[string]string `json:"error"`
	}
	if err := json.Unmarshal(fw.Body.Bytes(), &denial); err != nil || fw.Code != 429 || denial.Error["code"] != "challenge_required" ||
		denial.Error["message"] != "too many attempts" || fw.Header().Get("Retry-After") != "" {
		t.Errorf("forward-auth challenge = %d %s Retry-After %q; want 429 challenge_required, no Retry-After", fw.Code, fw.Body, fw.Header().Get("Retry-After"))
	}

	s.settle(t)
	w = s.do(t, "GET", "/v1/audit?decision=challenge", "k-admin", "")
	var events struct {
		Events []struct{ Decision, Reason string } `json:"events"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &events); err != nil || w.Code != 200 || len(events.Events) != 2 {
		t.Fatalf("audit decision=challenge = %d %s; want the two challenges", w.Code, w.Body)
	}
	for _, e := range events.Events {
		if e.Decision != "challenge" || e.Reason != "challenge_required" {
			t.Errorf("audit event %+v; want challenge / challenge_required", e)
		}
	}
	// The review page filters by it too, and offers it.
	w = s.do(t, "GET", "/ui/events?decision=challenge", "k-admin", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), "challenge_required") || !strings.Contains(w.Body.String(), `<option selected>challenge</option>`) {
		t.Errorf("/ui/events?decision=challenge = %d; want 200 listing the challenges with challenge among the decisions", w.Code)
	}
}

func jsonHasField(w *httptest.ResponseRecorder, field string) bool {
	var body struct {
		Error struct{ Field string } `json:"error"`
	}
	return json.Unmarshal(w.Body.Bytes(), &body) == nil && body.Error.Field == field
}

func TestIntegrationReserveFailures(t *testing.T) {
	s := challengeStack(t)
	const check = `{"action":"otp_verify","user":"alice","ip":"203.0.113.7"}`
	// Six parallel guesses before any report: three fit the failure
	// budget (the third strikes), three meet the lockout.
	var wg sync.WaitGroup
	reasons := make(chan string, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got checkAnswer
			decodeStrictly(t, s.do(t, "POST", "/v1/check", "k-check", check), &got)
			reasons <- got.Reason
		}()
	}
	wg.Wait()
	close(reasons)
	count := map[string]int{}
	for r := range reasons {
		count[r]++
	}
	if count["ok"] != 3 || count["locked_out"] != 3 {
		t.Errorf("6 parallel guesses, 3 failures strike: reasons %v; want 3 ok, 3 locked_out", count)
	}

	// Settle once: a failure reported twice with its decision_id is one.
	other := `{"action":"otp_verify","user":"bob","ip":"203.0.113.8"`
	report := func(outcome, id string) string {
		w := s.do(t, "POST", "/v1/report", "k-check", other+`,"outcome":"`+outcome+`","decision_id":"`+id+`"}`)
		if w.Code != 200 {
			t.Fatalf("report = %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	for i := range 2 {
		var got checkAnswer
		decodeStrictly(t, s.do(t, "POST", "/v1/check", "k-check", other+`}`), &got)
		if got.Decision != "allow" {
			t.Fatalf("bob's check %d = %+v; want allow", i+1, got)
		}
		for range 2 {
			if body := report("failure", got.DecisionID); body != `{"lockout":null}` {
				t.Errorf("settling report = %s; want no lockout (failure %d of 3)", body, i+1)
			}
		}
	}
	var got checkAnswer
	decodeStrictly(t, s.do(t, "POST", "/v1/check", "k-check", other+`}`), &got)
	if got.Decision != "allow" || got.Lockout != nil {
		t.Errorf("third check = %+v; want allow (its provisional failure strikes)", got)
	}
	if body := report("success", got.DecisionID); body == `{"lockout":null}` {
		t.Errorf("success after the strike = %s; want the lockout (a success cannot undo a strike)", body)
	}
	decodeStrictly(t, s.do(t, "POST", "/v1/check", "k-check", other+`}`), &got)
	if got.Reason != "locked_out" {
		t.Errorf("fourth check = %+v; want locked_out", got)
	}
}
