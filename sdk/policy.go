package sdk

import (
	"context"
	"errors"
	"net"
)

// FailurePolicy says what Check does when Guard cannot answer: the
// connection fails, the call times out, or Guard answers 5xx.
type FailurePolicy int

const (
	// FailError returns the error; the caller decides. The Client's
	// default (Middleware's default is FailOpen).
	FailError FailurePolicy = iota
	// FailOpen lets the attempt go ahead: Check returns an allowed
	// CheckResponse with Bypassed set. Logins keep working through a
	// Guard outage, unprotected; Guard's own design when Redis is down.
	FailOpen
	// FailClosed refuses the attempt: Check returns a denied
	// CheckResponse with Bypassed set. Nobody logs in while Guard is
	// unreachable.
	FailClosed
)

// String returns "error", "open" or "closed".
func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "error"
}

// CallOption changes one call; a FailurePolicy is one, so
// client.Check(ctx, req, sdk.FailClosed) overrides the client's policy
// for that call.
type CallOption interface {
	applyCall(*callConfig)
}

type callConfig struct {
	policy FailurePolicy
}

func (p FailurePolicy) applyCall(c *callConfig) { c.policy = p }

// bypassed is the answer a failure policy gives instead of Guard's.
func bypassed(p FailurePolicy, cause error) *CheckResponse {
	r := &CheckResponse{Decision: DecisionAllow, Reason: ReasonGuardUnavailable, Limits: []Limit{},
		Bypassed: true, Cause: cause}
	if p == FailClosed {
		r.Decision = DecisionDeny
	}
	return r
}

// unavailableError marks a failure of the transport: Guard could not be
// reached, did not answer in time, or broke off its answer.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// IsUnavailable reports whether err says Guard could not answer: a
// network error, a timeout, or a 5xx answer. Those are what a
// FailurePolicy applies to; a 4xx (*Error with Status < 500) says the call
// was wrong and is not one.
func IsUnavailable(err error) bool {
	var ue *unavailableError
	if errors.As(err, &ue) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// notSent reports whether err happened before any byte of the request
// left: the connection could not be made, so a retry cannot count the
// attempt twice.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
