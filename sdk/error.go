package sdk

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error codes Guard answers with.
const (
	CodeInvalidRequest       = "invalid_request"
	CodeUnknownAction        = "unknown_action"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeTooLarge             = "too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInternal             = "internal"
	CodeUnavailable          = "unavailable"
)

// ErrorBody is the wire form of every error: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody. Field is set only when one input
// field is at fault. RequestID is the answer's X-Request-Id (contract v1.1),
// to quote when asking an operator about the failure.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// Error is a non-2xx answer from Guard, as returned by every Client method.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is one of the Code constants, or "" when the body was not a
	// Guard error body.
	Code    string
	Message string
	// Field names the input field at fault, if one is.
	Field string
	// RetryAfter is the parsed Retry-After header; 0 when absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("guard: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// ParseRetryAfter parses an RFC 9110 Retry-After value, either delay
// seconds or an HTTP date (relative to now). It reports false when v is
// empty or malformed; a date in the past yields 0.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := at.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}
