package sdk

import "net/http"

// ChallengeMessage is the text WriteChallenge sends: it asks for the
// challenge and, like DenialMessage, names no rule, limit or account.
const ChallengeMessage = "Please confirm you are not a robot and try again."

// WriteChallenge answers an attempt Guard wants challenged: 429 with the
// RateLimit and RateLimit-Policy headers Guard sent, no Retry-After (the
// person need not wait, only pass the challenge), and the body
// {"error": {"code": "challenge_required", "message": ChallengeMessage}}.
// The client then shows its challenge (CAPTCHA, step-up MFA) and sends the
// request again with the proof, which Middleware.ChallengePassed verifies.
func WriteChallenge(w http.ResponseWriter, res *CheckResponse) {
	h := w.Header()
	if res.RateLimit != "" {
		h.Set("RateLimit", res.RateLimit)
	}
	if res.RateLimitPolicy != "" {
		h.Set("RateLimit-Policy", res.RateLimitPolicy)
	}
	writeJSONError(w, http.StatusTooManyRequests, ReasonChallenge, ChallengeMessage)
}
