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

// errorBody is the wire form of every error: {"error": {...}}; field
// only when one input field is at fault, request_id (contract v1.1) when
// the server names the request.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Field     string `json:"field"`
		RequestID string `json:"request_id"`
	} `json:"error"`
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
	// RequestID is the server's id of the request (the error body's
	// request_id, else the X-Request-Id header), for support; "" when the
	// server named none.
	RequestID string
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
