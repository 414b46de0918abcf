package api

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// handleLockouts answers GET /v1/lockouts?user=&ip=&device=&dimension=&ledger=.
func (s *server) handleLockouts(c *gin.Context) {
	q, err := singleParams(c, "user", "ip", "device", "dimension", "ledger")
	if err != nil {
		writeError(c, err)
		return
	}
	f, err := lockoutFilter(q)
	if err != nil {
		writeError(c, err)
		return
	}
	list, err := s.deps.Guard.Lockouts(c.Request.Context(), f)
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	c.JSON(http.StatusOK, sdk.LockoutsResponse{Lockouts: wireLockouts(list)})
}

// lockoutFilter builds the abuse filter from single-valued query params.
// As in GET /v1/audit, a parameter given empty ("?user=", what a form with
// an unfilled field sends) does not filter; a value that normalises to
// nothing (" ") is still bad input, like such a field in a check.
func lockoutFilter(q map[string]*string) (abuse.LockoutFilter, error) {
	for k, v := range q {
		if *v == "" {
			delete(q, k)
		}
	}
	f := abuse.LockoutFilter{Subject: abuse.Subject{User: q["user"], IP: q["ip"], Device: q["device"]}}
	if d := q["dimension"]; d != nil {
		if !validDimension(*d) {
			return f, badRequest("dimension", "dimension must be one of user, ip, device, user+ip, user+device")
		}
		f.Dimension = *d
	}
	if l := q["ledger"]; l != nil {
		f.Ledger = *l
	}
	return f, nil
}

func validDimension(d string) bool {
	for _, v := range abuse.Dimensions {
		if d == v {
			return true
		}
	}
	return false
}

func wireLockouts(list []abuse.ActiveLockout) []sdk.LockoutEntry {
	out := make([]sdk.LockoutEntry, 0, len(list))
	for _, l := range list {
		out = append(out, sdk.LockoutEntry{
			Ledger:    l.Ledger,
			Dimension: l.Dimension,
			User:      l.User,
			IP:        l.IP,
			Device:    l.Device,
			Level:     l.Level,
			Since:     l.Since.UTC(),
			Until:     l.Until.UTC(),
		})
	}
	return out
}

// handleUnlock answers DELETE /v1/lockouts.
func (s *server) handleUnlock(c *gin.Context) {
	var req sdk.UnlockRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, err)
		return
	}
	if req.Dimension == "" {
		writeError(c, badRequest("dimension", "dimension is required"))
		return
	}
	if !validDimension(req.Dimension) {
		writeError(c, badRequest("dimension", "dimension must be one of user, ip, device, user+ip, user+device"))
		return
	}
	err := s.deps.Guard.Unlock(c.Request.Context(), abuse.UnlockInput{
		Dimension: req.Dimension,
		Subject:   abuse.Subject{User: req.User, IP: req.IP, Device: req.Device},
		Ledger:    req.Ledger,
		Reason:    req.Reason,
		APIKey:    keyName(c),
	})
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	c.JSON(http.StatusOK, sdk.UnlockResponse{Unlocked: true})
}

// singleParams returns the named query parameters that are present (nil
// for absent ones) and rejects unknown or repeated parameters: a typo in a
// filter must not silently widen the result.
func singleParams(c *gin.Context, names ...string) (map[string]*string, error) {
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n] = true
	}
	query, err := url.ParseQuery(c.Request.URL.RawQuery)
	if err != nil {
		return nil, badRequest("", "the query string is malformed")
	}
	out := make(map[string]*string, len(names))
	for k, vs := range query {
		if !known[k] {
			return nil, badRequest(k, "unknown query parameter "+k)
		}
		if len(vs) > 1 {
			return nil, badRequest(k, k+" is given more than once")
		}
		v := vs[0]
		if !storableText(v) {
			return nil, badRequest(k, k+" must be valid UTF-8 without NUL")
		}
		out[k] = &v
	}
	return out, nil
}

// storableText reports whether s is text Postgres can store and search:
// valid UTF-8 (no lone surrogates, which utf8.ValidString also refuses)
// and no NUL. Any other query value would reach the audit store as an
// encoding error (SQLSTATE 22021), a 5xx for what is bad input.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.Contains(s, "\x00")
}
