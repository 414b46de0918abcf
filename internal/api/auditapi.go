package api

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

// auditParams are the query parameters of GET /v1/audit and /ui/events.
var auditParams = []string{"user", "ip", "device", "phone", "action", "decision", "reason",
	"kind", "since", "until", "limit", "cursor"}

// auditPage is the JSON answer of GET /v1/audit.
type auditPage struct {
	Events     []audit.Event `json:"events"`
	NextCursor *string       `json:"next_cursor"`
}

// handleAudit answers GET /v1/audit: one JSON page, or, when Accept asks
// for application/x-ndjson or text/csv, the whole filtered result
// streamed (limit and cursor then only bound where it starts).
func (s *server) handleAudit(c *gin.Context) {
	f, err := s.auditFilter(c)
	if err != nil {
		writeError(c, err)
		return
	}
	// Several Accept lines are one comma-separated list (RFC 9110 5.3).
	if ct := exportType(strings.Join(c.Request.Header.Values("Accept"), ",")); ct != "" {
		s.streamAudit(c, f, ct)
		return
	}
	page, err := s.deps.Audit.Query(c.Request.Context(), f)
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	out := auditPage{Events: page.Events}
	if out.Events == nil {
		out.Events = []audit.Event{}
	}
	if page.Next != nil {
		next := s.deps.Cursors.Encode(page.Next)
		out.NextCursor = &next
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, out)
}

// streamAudit writes every event matching f in the export format ct. An
// error before anything reached the client is answered with the error
// body; after that the connection is aborted so the client sees a broken
// transfer rather than a short file that looks complete. At most
// Exports.MaxConcurrent run at once; each is cut off when its client stops
// reading for Exports.WriteTimeout, or when the server begins to stop.
func (s *server) streamAudit(c *gin.Context, f audit.Filter, ct string) {
	f.Limit = 0
	release, ok := s.exports.acquire()
	if !ok {
		// Load shedding, not a failure: a WARN at most once a minute
		// rather than writeError's ERROR per refused request.
		if s.exports.logRefusal(time.Now()) {
			loggerFrom(c).Warn("audit export refused: the limit of exports at once is reached (logged at most once a minute)",
				"limit", cap(s.exports.slots))
		}
		c.Header("Retry-After", "5")
		e := errTooManyExports
		writeErrorBody(c, e.Status, errorDetail{Code: e.Code, Message: e.Message})
		return
	}
	defer release()
	h := c.Writer.Header()
	h.Set("Content-Type", ct+"; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if c.Request.Method == http.MethodHead {
		// The status and headers the export would have, without sending
		// it: the store is asked for the first event, so a store that
		// cannot answer is a 503 as for GET.
		err := s.deps.Audit.Stream(c.Request.Context(), f, func(audit.Event) error { return errHeadProbed })
		if err != nil && !errors.Is(err, errHeadProbed) {
			h.Del("Content-Type")
			writeError(c, dependency(err))
			return
		}
		c.Status(http.StatusOK)
		return
	}
	out := newDeadlineWriter(c.Writer, s.exports.writeTimeout)
	ctx, stop := s.exportContext(c.Request.Context(), out)
	defer stop()
	x, err := audit.NewExporter(out, ct)
	if err != nil {
		writeError(c, err)
		return
	}
	if err := s.deps.Audit.Stream(ctx, f, x.Write); err != nil {
		if !c.Writer.Written() {
			h.Del("Content-Type")
			writeError(c, dependency(err))
			return
		}
		loggerFrom(c).Warn("audit export cut off", "err", err, "bytes", c.Writer.Size())
		panic(http.ErrAbortHandler)
	}
	if err := x.Close(); err != nil {
		loggerFrom(c).Warn("audit export: flush failed", "err", err)
		panic(http.ErrAbortHandler)
	}
}

// errHeadProbed ends a HEAD export's read at its first event.
var errHeadProbed = errors.New("audit export: HEAD read its first event")

// exportType picks the answer format from Accept: audit.ContentTypeNDJSON
// or audit.ContentTypeCSV when one of them is the most preferred
// acceptable type, "" (JSON) otherwise, including for a missing or
// unparseable header.
func exportType(accept string) string {
	best, bestQ := "", 0.0
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		var ct string
		switch mt {
		case audit.ContentTypeNDJSON, audit.ContentTypeCSV:
			ct = mt
		case "application/json", "application/*", "*/*":
			ct = ""
		default:
			continue
		}
		if q > bestQ {
			best, bestQ = ct, q
		}
	}
	return best
}

// auditFilter parses and validates the audit query parameters. Empty
// values do not filter (so the review page's form can send them all).
func (s *server) auditFilter(c *gin.Context) (audit.Filter, error) {
	q, err := singleParams(c, auditParams...)
	if err != nil {
		return audit.Filter{}, err
	}
	return s.buildAuditFilter(q, func(name, v string) (time.Time, error) {
		at, err := parseQueryTime(v)
		if err != nil {
			return at, badRequest(name, name+" must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		return at, nil
	})
}

// buildAuditFilter validates the audit filter parameters in q; parseTime
// reads since and until (the review pages accept more forms than the API).
func (s *server) buildAuditFilter(q map[string]*string, parseTime func(name, v string) (time.Time, error)) (audit.Filter, error) {
	var err error
	get := func(k string) string {
		if v := q[k]; v != nil {
			return *v
		}
		return ""
	}
	var f audit.Filter
	if v := get("user"); v != "" {
		if f.User, err = s.deps.NormalizeUser(v); err != nil {
			return f, inputError(err, "user")
		}
	}
	if v := get("device"); v != "" {
		if f.Device, err = s.deps.NormalizeDevice(v); err != nil {
			return f, inputError(err, "device")
		}
	}
	if v := get("phone"); v != "" {
		if f.Phone, err = s.deps.NormalizePhone(queryPhone(v)); err != nil {
			return f, inputError(err, "phone")
		}
	}
	if v := get("ip"); v != "" {
		if f.IP, err = prefixOf(v); err != nil {
			return f, badRequest("ip", "ip must be an IPv4 or IPv6 address or CIDR without zone")
		}
		if aa, ok := s.deps.Guard.(auditAddresses); ok {
			// Pseudonymised events hold a keyed hash of the address: an
			// address still matches (by its hash), a range cannot.
			hashed, isHash, err := aa.AuditIP(f.IP.Addr().String())
			switch {
			case err != nil:
				return f, badRequest("ip", "ip must be an IPv4 or IPv6 address or CIDR without zone")
			case isHash && !f.IP.IsSingleIP():
				return f, badRequest("ip", "audit.pseudonymize is on: events keep hashed addresses, so ip takes a single address, not a CIDR range")
			case isHash:
				f.IP, f.IPText = netip.Prefix{}, hashed
			}
		}
	}
	f.Action, f.Reason = get("action"), get("reason")
	switch f.Decision = get("decision"); f.Decision {
	case "", sdk.DecisionAllow, sdk.DecisionDeny, sdk.DecisionChallenge:
	default:
		return f, badRequest("decision", `decision must be "allow", "deny" or "challenge"`)
	}
	switch f.Kind = get("kind"); f.Kind {
	case "", audit.KindCheck, audit.KindReport, audit.KindAdmin:
	default:
		return f, badRequest("kind", `kind must be "check", "report" or "admin"`)
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := get(t.name); v != "" {
			at, err := parseTime(t.name, v)
			if err != nil {
				return f, err
			}
			*t.dst = at.UTC()
		}
	}
	if f.Until.IsZero() && get("until") != "" {
		// until=0001-01-01T00:00:00Z is a bound (nothing is before it),
		// where the stores read a zero Until as none: a nanosecond later
		// keeps it a bound and still matches nothing.
		f.Until = f.Until.Add(time.Nanosecond)
	}
	f.Limit = audit.DefaultLimit
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxLimit {
			return f, badRequest("limit", "limit must be an integer from 1 to 1000")
		}
		f.Limit = n
	}
	if v := get("cursor"); v != "" {
		if f.Cursor, err = s.deps.Cursors.Decode(v); err != nil {
			return f, badRequest("cursor", "cursor is not one Guard issued")
		}
	}
	return f, nil
}

// parseQueryTime parses an RFC 3339 time from a query string. A numeric
// offset's "+" arrives as a space when the caller did not percent-encode
// it (?since=2026-01-02T15:04:05+01:00, as typed in a shell); an RFC 3339
// time never holds a space, so that one reading is unambiguous.
func parseQueryTime(v string) (time.Time, error) {
	// RFC 3339 (5.6) allows a lower-case "t" and "z"; Go's layout does not.
	v = strings.Map(func(r rune) rune {
		switch r {
		case 't':
			return 'T'
		case 'z':
			return 'Z'
		}
		return r
	}, v)
	at, err := parseRFC3339(v)
	if err != nil && strings.Contains(v, " ") {
		if at2, err2 := parseRFC3339(strings.ReplaceAll(v, " ", "+")); err2 == nil {
			return at2, nil
		}
	}
	return at, err
}

// parseRFC3339 parses an RFC 3339 date-time (upper-case T and Z). It is
// time.Parse's RFC3339, which also accepts numeric offsets of hour 24 and
// minute 60 (+24:00, +00:60), without them: RFC 3339's time-numoffset
// has hours 00-23 and minutes 00-59.
func parseRFC3339(v string) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, err
	}
	// Parsed, v ends in Z or in a numeric offset of the form +hh:mm.
	if n := len(v); v[n-1] != 'Z' && (v[n-5:n-3] > "23" || v[n-2:] > "59") {
		return time.Time{}, fmt.Errorf("%q: offset %s is outside -23:59..+23:59", v, v[n-6:])
	}
	return at, nil
}

// queryPhone undoes what a query string does to an E.164 number whose "+"
// was not percent-encoded (?phone=+447400123456, as typed in a shell or a
// browser's address bar): the "+" arrives as a space, and a phone number
// given in international form never starts with one.
func queryPhone(v string) string {
	if rest, ok := strings.CutPrefix(v, " "); ok && rest != "" && rest[0] >= '1' && rest[0] <= '9' {
		return "+" + rest
	}
	return v
}

// inputError keeps an *abuse.InputError from a normaliser and turns any
// other error into a 400 for field.
func inputError(err error, field string) error {
	if e := classify(err); e.Status == http.StatusBadRequest {
		out := *e
		if out.Field == "" {
			out.Field = field
		}
		return &out
	}
	return badRequest(field, field+" is not valid")
}
