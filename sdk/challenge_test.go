package sdk_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/guardhq/guard/sdk"
)

// TestMiddlewareChallenge: against the built-in policy (signup challenges
// a device after 5 sign-ups an hour), the sixth sign-up from one device is
// answered with a challenge the handler never sees; with a verified proof
// the same request goes through.
func TestMiddlewareChallenge(t *testing.T) {
	guard := startTestGuard(t, "")
	m := &sdk.Middleware{
		Client: testClient(guard, keyCheck), Action: "signup", DeviceHeader: "X-Device",
		// The test's stand-in for verifying a CAPTCHA token.
		ChallengePassed: func(r *http.Request) bool { return r.Header.Get("X-Captcha") == "verified" },
	}
	app, seen := protected(t, m)
	for i := range 5 {
		if resp := post(t, app.URL, "", "X-Device", "d-family-pc"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sign-up %d: %d, want 204", i+1, resp.StatusCode)
		}
		<-seen
	}
	resp := post(t, app.URL, "", "X-Device", "d-family-pc")
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != "challenge_required" ||
		body.Error.Message != sdk.ChallengeMessage || resp.Header.Get("Retry-After") != "" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("sixth sign-up: %d %+v Retry-After %q RateLimit %q; want 429 challenge_required, no Retry-After, RateLimit",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
	}
	resp = post(t, app.URL, "", "X-Device", "d-family-pc", "X-Captcha", "verified")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign-up with a passed challenge: %d, want 204", resp.StatusCode)
	}
	if a := <-seen; !a.Result.Allowed() || a.Result.Reason != sdk.ReasonOK {
		t.Errorf("passed attempt's result = %+v; want allow ok", a.Result)
	}
}

// TestClientChallenge: the client's answer reads a challenge, and
// ChallengePassed goes over the wire.
func TestClientChallenge(t *testing.T) {
	guard := startTestGuard(t, "")
	c := testClient(guard, keyCheck)
	req := sdk.Subject{Device: "d-1", IP: "198.51.100.9"}.Check("signup")
	for range 5 {
		if res, err := c.Check(t.Context(), req, sdk.FailError); err != nil || !res.Allowed() {
			t.Fatalf("check: %+v %v", res, err)
		}
	}
	res, err := c.Check(t.Context(), req, sdk.FailError)
	if err != nil || !res.Challenge() || res.Allowed() || res.Reason != sdk.ReasonChallenge || res.RetryAfterMs <= 0 {
		t.Fatalf("sixth check = %+v, %v; want a challenge with the wait without one", res, err)
	}
	req.ChallengePassed = true
	if res, err = c.Check(t.Context(), req, sdk.FailError); err != nil || !res.Allowed() || res.Challenge() {
		t.Errorf("passed check = %+v, %v; want allowed", res, err)
	}
}
