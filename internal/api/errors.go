package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

// Error is an answer the API gives on purpose: a status, a code from the
// contract, a message safe to show the caller, and the field at fault.
type Error struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

func badRequest(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: sdk.CodeInvalidRequest, Message: msg, Field: field}
}

var (
	errUnauthenticated = &Error{Status: http.StatusUnauthorized, Code: sdk.CodeUnauthenticated,
		Message: "a valid API key is required: Authorization: Bearer <key>"}
	errForbidden = &Error{Status: http.StatusForbidden, Code: sdk.CodeForbidden,
		Message: "the API key lacks the scope this endpoint needs"}
	errNotFound = &Error{Status: http.StatusNotFound, Code: sdk.CodeNotFound,
		Message: "no such endpoint"}
	errMethodNotAllowed = &Error{Status: http.StatusMethodNotAllowed, Code: sdk.CodeMethodNotAllowed,
		Message: "method not allowed on this endpoint"}
	errTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Code: sdk.CodeTooLarge,
		Message: "request body is larger than 8 KiB"}
	errMediaType = &Error{Status: http.StatusUnsupportedMediaType, Code: sdk.CodeUnsupportedMediaType,
		Message: "Content-Type must be application/json"}
	errInternal = &Error{Status: http.StatusInternalServerError, Code: sdk.CodeInternal,
		Message: "internal error"}
	errUnavailable = &Error{Status: http.StatusServiceUnavailable, Code: sdk.CodeUnavailable,
		Message: "guard cannot answer right now"}
)

// classify is the one place that maps an error to what the client sees.
// Bad input (an *Error of ours or an *abuse.InputError) keeps its status,
// code and field; abuse.ErrNotFound is 404; a dependency that fails or runs
// out of time is 503; anything else is 500. Only the first two carry their
// own message: the others never leak internals.
func classify(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var ie *abuse.InputError
	if errors.As(err, &ie) {
		code := ie.Code
		if code == "" {
			code = sdk.CodeInvalidRequest
		}
		return &Error{Status: http.StatusBadRequest, Code: code, Message: ie.Message, Field: ie.Field}
	}
	if errors.Is(err, audit.ErrBadCursor) {
		return badRequest("cursor", "cursor is not one Guard issued")
	}
	if errors.Is(err, audit.ErrBadFilter) {
		return badRequest("", "the audit filter is not valid")
	}
	if errors.Is(err, abuse.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Code: sdk.CodeNotFound, Message: "nothing is locked for that subject"}
	}
	if errors.Is(err, errPanic) {
		return errInternal
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errUnavailable
	}
	if dependencyError(err) {
		return errUnavailable
	}
	return errInternal
}

// errPanic marks a recovered panic.
var errPanic = errors.New("panic")

// depError marks an error returned by a dependency (the Guard, the audit
// store): the request was fine, the service behind it was not.
type depError struct{ err error }

func (e depError) Error() string { return e.err.Error() }
func (e depError) Unwrap() error { return e.err }

// dependency wraps err from a dependency call so classify answers 503 for
// it unless it is bad input or not-found.
func dependency(err error) error {
	if err == nil {
		return nil
	}
	return depError{err}
}

func dependencyError(err error) bool {
	var d depError
	return errors.As(err, &d)
}

// writeError answers err with the error body and aborts the chain. 5xx
// answers are logged with the underlying error, which the client never
// sees.
func writeError(c *gin.Context, err error) {
	e := classify(err)
	if e.Status >= 500 {
		loggerFrom(c).Error("request failed", "status", e.Status, "err", err)
	}
	if e.Status == http.StatusUnauthorized && c.Writer.Header().Get("WWW-Authenticate") == "" {
		// The review pages set their own (Basic) challenge first.
		c.Header("WWW-Authenticate", `Bearer realm="guard"`)
	}
	writeErrorBody(c, e.Status, errorDetail{Code: e.Code, Message: e.Message, Field: e.Field})
}

// writeErrorBody answers status with {"error": d}, d.RequestID set to the
// request's id (the X-Request-Id the answer carries), and aborts the
// chain. Every error body goes through it, including bodies that say less
// than writeError's (the generic forward-auth denial).
func writeErrorBody(c *gin.Context, status int, d errorDetail) {
	if st := stateFrom(c); st != nil {
		d.RequestID = st.id
	}
	c.Header("Cache-Control", "no-store")
	c.AbortWithStatusJSON(status, errorBody{Error: d})
}
