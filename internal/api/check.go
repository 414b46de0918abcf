package api

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// handleCheck answers POST /v1/check.
func (s *server) handleCheck(c *gin.Context) {
	var req sdk.CheckRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, err)
		return
	}
	in, err := checkInput(req, keyName(c))
	if err != nil {
		writeError(c, err)
		return
	}
	d, err := s.decide(c, in)
	if err != nil {
		writeError(c, err)
		return
	}
	setDecisionHeaders(c.Writer.Header(), d, in.Cost)
	r := checkResponse(d)
	writeCheckJSON(c, &r)
}

// decide runs one check and reports it to the observer.
func (s *server) decide(c *gin.Context, in abuse.CheckInput) (abuse.Decision, error) {
	start := s.now()
	d, err := s.deps.Guard.Check(c.Request.Context(), in)
	if err != nil {
		return abuse.Decision{}, dependency(err)
	}
	s.observe(in.Action, d.Verdict(), d.Reason, d.Degraded, s.now().Sub(start))
	return d, nil
}

// checkInput validates what abuse cannot: an action is present. Everything
// else, the identifiers and the cost included, is left to abuse, which
// checks the action first, then the identifiers, then the cost, so
// {"action": "nope"} is unknown_action whatever else is wrong. abuse reads
// a cost of 0 as "not given": an explicit cost below 1 goes to it as -1,
// which it refuses as below 1.
func checkInput(req sdk.CheckRequest, key string) (abuse.CheckInput, error) {
	if req.Action == "" {
		return abuse.CheckInput{}, badRequest("action", "action is required")
	}
	cost := 1
	if req.Cost != nil {
		cost = *req.Cost
		if cost < 1 {
			cost = -1
		}
	}
	return abuse.CheckInput{
		Action:          req.Action,
		Subject:         abuse.Subject{User: req.User, IP: req.IP, Device: req.Device, Phone: req.Phone},
		Cost:            cost,
		DryRun:          req.DryRun,
		ChallengePassed: req.ChallengePassed,
		APIKey:          key,
	}, nil
}

// checkResponse is the wire form of a decision.
func checkResponse(d abuse.Decision) sdk.CheckResponse {
	r := sdk.CheckResponse{
		Decision:   d.Verdict(),
		Reason:     d.Reason,
		DecisionID: d.ID,
		Degraded:   d.Degraded,
		Limits:     make([]sdk.Limit, 0, len(d.Limits)),
	}
	if !d.Allowed {
		r.RetryAfterMs = ceilMillis(d.RetryAfter)
		if d.Reason == abuse.ReasonStoreUnavailable && r.RetryAfterMs == 0 {
			r.RetryAfterMs = 1000
		}
	}
	for _, l := range d.Limits {
		r.Limits = append(r.Limits, sdk.Limit{
			Rule:      l.Rule,
			Dimension: l.Dimension,
			Limit:     l.Limit,
			WindowMs:  ceilMillis(l.Window),
			Remaining: max(l.Remaining, 0),
			ResetMs:   ceilMillis(l.Reset),
			Algorithm: wireAlgorithm(l.Algorithm),
			Distinct:  l.Distinct,
		})
	}
	if d.Lockout != nil {
		r.Lockout = wireLockout(d.Lockout)
	}
	return r
}

func wireLockout(l *abuse.LockoutInfo) *sdk.Lockout {
	if l == nil {
		return nil
	}
	return &sdk.Lockout{Dimension: l.Dimension, Until: l.Until.UTC(), Level: l.Level}
}

// handleReport answers POST /v1/report.
func (s *server) handleReport(c *gin.Context) {
	var req sdk.ReportRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, err)
		return
	}
	// abuse checks the rest in contract order: the action, the outcome,
	// then the identifiers.
	if req.Action == "" {
		writeError(c, badRequest("action", "action is required"))
		return
	}
	out, err := s.deps.Guard.Report(c.Request.Context(), abuse.ReportInput{
		Action:     req.Action,
		Subject:    abuse.Subject{User: req.User, IP: req.IP, Device: req.Device, Phone: req.Phone},
		Outcome:    req.Outcome,
		DecisionID: req.DecisionID,
		APIKey:     keyName(c),
	})
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	c.JSON(http.StatusOK, reportJSON{Lockout: encodeLockout(wireLockout(out.Lockout))})
}

// setDecisionHeaders sets RateLimit-Policy and RateLimit (every evaluated
// rule, most restrictive first, same order in both; only when rules were
// evaluated) and Retry-After on denials that will end.
func setDecisionHeaders(h http.Header, d abuse.Decision, cost int) {
	limits := d.Limits // abuse orders them most restrictive first
	// Canonical keys set directly (what h.Set would store, without
	// canonicalising on every decision), values sharing one backing array.
	vals := make([]string, 3)
	if len(limits) > 0 {
		var scratch [256]byte
		b := scratch[:0]
		for i, l := range limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, l.Rule)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, int64(l.Limit), 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(l.Window), 10)
		}
		vals[0] = string(b)
		b = b[:0]
		for i, l := range limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, l.Rule)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(max(l.Remaining, 0)), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSeconds(l.Reset), 10)
		}
		vals[1] = string(b)
		h["Ratelimit-Policy"] = vals[0:1:1]
		h["Ratelimit"] = vals[1:2:2]
	}
	if secs, ok := retryAfter(d); ok {
		vals[2] = strconv.FormatInt(secs, 10)
		h["Retry-After"] = vals[2:3:3]
	}
}

// retryAfter is the Retry-After of a decision in whole seconds, rounded
// up: on rate-limit and lockout denials retry_after_ms rounded up (at
// least 1); exactly 1 on a store_unavailable denial; none on allowed or
// denylisted answers, which no waiting changes. retry_after_ms is already
// the earliest moment the same attempt is allowed (abuse: the latest wait
// of the rules that deny it, a lockout's end or later), so it is never
// earlier than the t of a rule that stands in the way; the t of a rule
// that does not (a distinct set that holds the attempt's value, a
// challenge the caller passed, a rule with room) raises nothing.
func retryAfter(d abuse.Decision) (int64, bool) {
	if d.Allowed {
		return 0, false
	}
	switch d.Reason {
	case abuse.ReasonStoreUnavailable:
		return 1, true
	case abuse.ReasonRateLimited, abuse.ReasonLockedOut:
	default:
		return 0, false
	}
	secs := ceilSeconds(d.RetryAfter)
	return max(secs, 1), true
}
