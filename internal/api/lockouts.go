package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// lockoutParams are the query parameters of GET /v1/lockouts.
var lockoutParams = []string{"user", "ip", "device", "phone", "dimension", "ledger", "limit", "cursor"}

// handleLockouts answers GET /v1/lockouts?user=&ip=&device=&phone=&dimension=&ledger=&limit=&cursor=.
func (s *server) handleLockouts(c *gin.Context) {
	q, err := singleParams(c, lockoutParams...)
	if err != nil {
		writeError(c, err)
		return
	}
	f, err := lockoutFilter(q)
	if err != nil {
		writeError(c, err)
		return
	}
	page, err := s.deps.Guard.Lockouts(c.Request.Context(), f)
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	out := sdk.LockoutsResponse{Lockouts: wireLockouts(page.Lockouts)}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	// Who is locked out now: no cache may keep it (as /v1/audit).
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, encodeLockouts(out))
}

// lockRequest is the body of POST /v1/lockouts (v1.1 manual lockouts).
type lockRequest struct {
	Dimension string  `json:"dimension"`
	User      *string `json:"user,omitempty"`
	IP        *string `json:"ip,omitempty"`
	Device    *string `json:"device,omitempty"`
	Phone     *string `json:"phone,omitempty"`
	// PhoneCountry and PhonePrefix name a phone_country or phone_prefix
	// key as listings show it, instead of a number in it.
	PhoneCountry *string `json:"phone_country,omitempty"`
	PhonePrefix  *string `json:"phone_prefix,omitempty"`
	DurationMs   *int64  `json:"duration_ms"`
	Reason       string  `json:"reason,omitempty"`
	// Ledger is nil when absent (every ledger); "" is refused (ledger).
	Ledger *string `json:"ledger,omitempty"`
}

// unlockRequest is the body of DELETE /v1/lockouts: sdk.UnlockRequest's
// fields, but with Ledger a pointer, so that an explicit "" is told from
// an absent ledger (every ledger) and refused.
type unlockRequest struct {
	Dimension    string  `json:"dimension"`
	User         *string `json:"user,omitempty"`
	IP           *string `json:"ip,omitempty"`
	Device       *string `json:"device,omitempty"`
	Phone        *string `json:"phone,omitempty"`
	PhoneCountry *string `json:"phone_country,omitempty"`
	PhonePrefix  *string `json:"phone_prefix,omitempty"`
	Ledger       *string `json:"ledger,omitempty"`
	Reason       string  `json:"reason,omitempty"`
}

// bodyLedger is a request body's ledger: "" (every ledger) when absent. An
// explicit "" names no ledger, as the config file's ledger: "" is no
// ledger name; it is refused rather than read as every ledger.
func bodyLedger(l *string) (string, error) {
	switch {
	case l == nil:
		return "", nil
	case *l == "":
		return "", badRequest("ledger", `unknown ledger "": leave ledger out for every ledger`)
	}
	return *l, nil
}

// handleLock answers POST /v1/lockouts: 201 with one entry per ledger.
func (s *server) handleLock(c *gin.Context) {
	var req lockRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, err)
		return
	}
	list, err := s.lock(c, req)
	if err != nil {
		writeError(c, err)
		return
	}
	// The answer is the set lockouts, not a listing: no next_cursor.
	c.JSON(http.StatusCreated, struct {
		Lockouts []lockoutEntryJSON `json:"lockouts"`
	}{encodeLockouts(sdk.LockoutsResponse{Lockouts: wireLockouts(list)}).Lockouts})
}

// lock validates a manual lockout request and sets it.
func (s *server) lock(c *gin.Context, req lockRequest) ([]abuse.ActiveLockout, error) {
	if req.Dimension == "" {
		return nil, badRequest("dimension", "dimension is required")
	}
	if !validDimension(req.Dimension) {
		return nil, errUnknownDimension
	}
	if req.DurationMs == nil {
		return nil, badRequest("duration_ms", "duration_ms is required")
	}
	if d := *req.DurationMs; d < abuse.MinManualLock.Milliseconds() || d > abuse.MaxManualLock.Milliseconds() {
		return nil, badRequest("duration_ms", "duration_ms must be from 1000 (1s) to 2592000000 (30 days)")
	}
	ledger, err := bodyLedger(req.Ledger)
	if err != nil {
		return nil, err
	}
	list, err := s.deps.Guard.Lock(c.Request.Context(), abuse.LockInput{
		Dimension: req.Dimension,
		Subject: abuse.Subject{User: req.User, IP: req.IP, Device: req.Device, Phone: req.Phone,
			PhoneCountry: req.PhoneCountry, PhonePrefix: req.PhonePrefix},
		Ledger:   ledger,
		Duration: time.Duration(*req.DurationMs) * time.Millisecond,
		Reason:   req.Reason,
		APIKey:   keyName(c),
	})
	if err != nil {
		return nil, dependency(err)
	}
	return list, nil
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
	if p := q["phone"]; p != nil {
		*p = queryPhone(*p)
	}
	f := abuse.LockoutFilter{Subject: abuse.Subject{User: q["user"], IP: q["ip"], Device: q["device"], Phone: q["phone"]}}
	if d := q["dimension"]; d != nil {
		// A "+" typed into a query string arrives as a space
		// (?dimension=user+ip); no dimension holds a space, so that one
		// reading is unambiguous (as queryPhone's).
		*d = strings.ReplaceAll(*d, " ", "+")
		if !validDimension(*d) {
			return f, errUnknownDimension
		}
		f.Dimension = *d
	}
	if l := q["ledger"]; l != nil {
		f.Ledger = *l
	}
	if v := q["limit"]; v != nil {
		n, err := strconv.Atoi(*v)
		if err != nil || n < 1 || n > abuse.MaxLockoutLimit {
			return f, badRequest("limit", "limit must be an integer from 1 to 1000")
		}
		f.Limit = n
	}
	if v := q["cursor"]; v != nil {
		f.Cursor = *v
	}
	return f, nil
}

// errUnknownDimension answers a dimension that is none of abuse.Dimensions.
var errUnknownDimension = badRequest("dimension", "dimension must be one of "+strings.Join(abuse.Dimensions, ", "))

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
			Ledger:       l.Ledger,
			Dimension:    l.Dimension,
			User:         l.User,
			IP:           l.IP,
			Device:       l.Device,
			Phone:        l.Phone,
			PhoneCountry: l.PhoneCountry,
			PhonePrefix:  l.PhonePrefix,
			Level:        l.Level,
			Since:        l.Since.UTC(),
			Until:        l.Until.UTC(),
		})
	}
	return out
}

// handleUnlock answers DELETE /v1/lockouts.
func (s *server) handleUnlock(c *gin.Context) {
	var req unlockRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, err)
		return
	}
	if req.Dimension == "" {
		writeError(c, badRequest("dimension", "dimension is required"))
		return
	}
	if !validDimension(req.Dimension) {
		writeError(c, errUnknownDimension)
		return
	}
	ledger, err := bodyLedger(req.Ledger)
	if err != nil {
		writeError(c, err)
		return
	}
	err = s.deps.Guard.Unlock(c.Request.Context(), abuse.UnlockInput{
		Dimension: req.Dimension,
		Subject: abuse.Subject{User: req.User, IP: req.IP, Device: req.Device, Phone: req.Phone,
			PhoneCountry: req.PhoneCountry, PhonePrefix: req.PhonePrefix},
		Ledger: ledger,
		Reason: req.Reason,
		APIKey: keyName(c),
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
		if name := misencodedParam(c.Request.URL.RawQuery); name != "" {
			return nil, badRequest(name, name+" is not correctly percent-encoded")
		}
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

// misencodedParam names the parameter of the query string raw whose
// value url.ParseQuery could not percent-decode, so that the error names
// the one field at fault (contract "Errors"). It is "" when no single
// parameter is to blame: a name that does not decode, more than one such
// value, a semicolon (which may have been meant as a separator), or a
// failure that is not a decoding one (too many parameters).
func misencodedParam(raw string) string {
	bad := ""
	for pair := range strings.SplitSeq(raw, "&") {
		if strings.Contains(pair, ";") {
			return ""
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || !storableText(name) {
			return ""
		}
		if _, err := url.QueryUnescape(v); err != nil {
			if name == "" || bad != "" && bad != name {
				return ""
			}
			bad = name
		}
	}
	return bad
}

// storableText reports whether s is text Postgres can store and search:
// valid UTF-8 (no lone surrogates, which utf8.ValidString also refuses)
// and no NUL. Any other query value would reach the audit store as an
// encoding error (SQLSTATE 22021), a 5xx for what is bad input.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.Contains(s, "\x00")
}
