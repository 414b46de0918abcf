package sdk

import (
	"strconv"
)

// decodeCheckResponse reads a check answer in the exact form Guard writes
// it (keys in order, no whitespace, strings of printable ASCII without
// escapes, integers without leading zeros, no lockout) without
// encoding/json's reflection; that is every answer but lockouts. It
// reports false for anything else, and the caller decodes with
// encoding/json, so what it accepts it decodes as encoding/json would
// (FuzzDecodeCheckResponse holds it to that). out is written only on
// success.
func decodeCheckResponse(b []byte, out *CheckResponse) bool {
	p := checkParser{b: b}
	var r CheckResponse
	ok := p.lit(`{"decision":`) && p.str(&r.Decision) &&
		p.lit(`,"reason":`) && p.str(&r.Reason) &&
		p.lit(`,"retry_after_ms":`) && p.int64(&r.RetryAfterMs) &&
		p.lit(`,"decision_id":`) && p.str(&r.DecisionID) &&
		p.lit(`,"degraded":`) && p.bool(&r.Degraded) &&
		p.lit(`,"limits":`) && p.limits(&r.Limits) &&
		p.lit(`,"lockout":null}`) && p.i == len(b)
	if ok {
		*out = r
	}
	return ok
}

// checkParser walks a check answer; every method reports false on
// anything outside the exact form, leaving the decision to encoding/json.
type checkParser struct {
	b []byte
	i int
}

func (p *checkParser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str reads a string of printable ASCII without escapes; the values the
// answer repeats come back as constants, without allocating.
func (p *checkParser) str(dst *string) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		if c == '"' {
			*dst = intern(p.b[start:j])
			p.i = j + 1
			return true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return false
}

func intern(b []byte) string {
	switch string(b) {
	case DecisionAllow:
		return DecisionAllow
	case DecisionDeny:
		return DecisionDeny
	case DecisionChallenge:
		return DecisionChallenge
	case ReasonChallenge:
		return ReasonChallenge
	case ReasonOK:
		return ReasonOK
	case ReasonRateLimited:
		return ReasonRateLimited
	case ReasonLockedOut:
		return ReasonLockedOut
	case ReasonDenylisted:
		return ReasonDenylisted
	case ReasonAllowlisted:
		return ReasonAllowlisted
	case ReasonShadow:
		return ReasonShadow
	case ReasonStoreUnavailable:
		return ReasonStoreUnavailable
	case "user":
		return "user"
	case "ip":
		return "ip"
	case "device":
		return "device"
	case "user+ip":
		return "user+ip"
	case "user+device":
		return "user+device"
	case "log":
		return "log"
	case "counter":
		return "counter"
	case "bucket":
		return "bucket"
	case "phone":
		return "phone"
	case "phone_country":
		return "phone_country"
	case "phone_prefix":
		return "phone_prefix"
	}
	return string(b)
}

// int64 reads a JSON integer (-?(0|[1-9][0-9]*)) that fits in 64 bits.
func (p *checkParser) int64(dst *int64) bool {
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == digits || (p.b[digits] == '0' && j-digits > 1) {
		return false
	}
	if j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	p.i = j
	return true
}

func (p *checkParser) int(dst *int) bool {
	var n int64
	if !p.int64(&n) || int64(int(n)) != n {
		return false
	}
	*dst = int(n)
	return true
}

func (p *checkParser) bool(dst *bool) bool {
	switch {
	case p.lit("true"):
		*dst = true
	case p.lit("false"):
		*dst = false
	default:
		return false
	}
	return true
}

// limits reads null, [] or an array of limits in the exact form.
func (p *checkParser) limits(dst *[]Limit) bool {
	if p.lit("null") {
		*dst = nil
		return true
	}
	if !p.lit("[") {
		return false
	}
	out := make([]Limit, 0, 2)
	if p.lit("]") {
		*dst = out
		return true
	}
	for {
		var l Limit
		if !(p.lit(`{"rule":`) && p.str(&l.Rule) &&
			p.lit(`,"dimension":`) && p.str(&l.Dimension) &&
			p.lit(`,"limit":`) && p.int(&l.Limit) &&
			p.lit(`,"window_ms":`) && p.int64(&l.WindowMs) &&
			p.lit(`,"remaining":`) && p.int(&l.Remaining) &&
			p.lit(`,"reset_ms":`) && p.int64(&l.ResetMs) &&
			p.lit(`,"algorithm":`) && p.str(&l.Algorithm) &&
			(!p.lit(`,"distinct":`) || p.str(&l.Distinct) && l.Distinct != "") &&
			p.lit("}")) {
			return false
		}
		out = append(out, l)
		if p.lit("]") {
			*dst = out
			return true
		}
		if !p.lit(",") {
			return false
		}
	}
}
