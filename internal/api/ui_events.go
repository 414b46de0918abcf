package api

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

// auditReview is what the review pages use of an audit store beyond
// AuditReader; *audit.PGStore and *audit.MemoryStore implement it. Without
// it the pages have no counts, no newer-page links and no overview chart.
type auditReview interface {
	QueryNewer(ctx context.Context, f audit.Filter) (audit.Page, error)
	Count(ctx context.Context, f audit.Filter, max int) (int, error)
	Overview(ctx context.Context, q audit.OverviewQuery) (audit.Overview, error)
}

func (s *server) review() (auditReview, bool) {
	r, ok := s.deps.Audit.(auditReview)
	return r, ok
}

// countCap bounds the events page's result count.
const countCap = 10000

// uiEventParams are the events page's parameters: the audit API's, the
// picker fields beside since and until, and newer (a cursor to page
// towards newer events).
var uiEventParams = append(append([]string(nil), auditParams...), "since_at", "until_at", "newer",
	"user_exact", "ip_exact", "device_exact", "phone_exact")

// eventFilterFields are the filter fields a link or an export keeps.
var eventFilterFields = []string{"user", "ip", "device", "phone", "action", "decision", "reason", "kind", "since", "until", "since_at", "until_at", "limit",
	"user_exact", "ip_exact", "device_exact", "phone_exact"}

type uiEvent struct {
	audit.Event
	URL string
}

type eventsPage struct {
	Form                               map[string]string
	Errors                             map[string]string
	Error                              string
	Actions, Decisions, Reasons, Kinds []string
	Limits                             []string
	Events                             []uiEvent
	Count                              int
	CountMore, Counted                 bool
	NextURL, PrevURL, FirstURL         string
	CSVURL, NDJSONURL                  string
	Now                                time.Time
}

// handleUIEvents renders the events page: the filter form, a count, the
// page of events, newest first, and links one page older and one newer.
// A bad filter re-renders the form (400) with the error beside its field.
func (s *server) handleUIEvents(c *gin.Context) {
	now := s.now().UTC()
	p := &eventsPage{Form: map[string]string{}, Errors: map[string]string{}, Now: now}
	s.fillChoices(p)
	q, err := uiParams(c, uiEventParams...)
	if err != nil {
		if !wantsHTML(c) {
			writeError(c, err)
			return
		}
		p.Error = classify(err).Message
		s.renderPage(c, http.StatusBadRequest, s.ui.events, "Events", p)
		return
	}
	for k, v := range q {
		p.Form[k] = *v
	}
	newer := q["newer"] != nil && *q["newer"] != ""
	f, err := s.uiAuditFilter(q, now)
	if err != nil {
		e := classify(err)
		if e.Status != http.StatusBadRequest || !wantsHTML(c) {
			s.uiFail(c, err)
			return
		}
		if e.Field != "" && e.Field != "cursor" && e.Field != "newer" {
			p.Errors[e.Field] = e.Message
		} else {
			p.Error = e.Message
		}
		s.renderPage(c, http.StatusBadRequest, s.ui.events, "Events", p)
		return
	}
	ctx := c.Request.Context()
	rv, hasReview := s.review()
	var page audit.Page
	if newer && hasReview {
		page, err = rv.QueryNewer(ctx, f)
	} else {
		if newer { // no newer paging: start over
			f.Cursor = nil
		}
		page, err = s.deps.Audit.Query(ctx, f)
	}
	if err != nil {
		s.uiFail(c, dependency(err))
		return
	}
	for _, e := range page.Events {
		p.Events = append(p.Events, uiEvent{Event: e, URL: eventURL(e)})
	}
	keep := url.Values{}
	for _, k := range eventFilterFields {
		if v := p.Form[k]; v != "" {
			keep.Set(k, v)
		}
	}
	link := func(param string, cur *audit.Cursor) string {
		v := url.Values{}
		for k, vs := range keep {
			v[k] = vs
		}
		if cur != nil {
			v.Set(param, s.deps.Cursors.Encode(cur))
		}
		if len(v) == 0 {
			return "/ui/events"
		}
		return "/ui/events?" + v.Encode()
	}
	n := len(page.Events)
	switch {
	case newer:
		// Came from an older page: older events exist below this one.
		if n > 0 {
			p.NextURL = link("cursor", &audit.Cursor{At: page.Events[n-1].At, ID: page.Events[n-1].ID})
		}
		if page.Next != nil {
			p.PrevURL = link("newer", page.Next)
		}
	default:
		if page.Next != nil {
			p.NextURL = link("cursor", page.Next)
		}
		if f.Cursor != nil && n > 0 && hasReview {
			p.PrevURL = link("newer", &audit.Cursor{At: page.Events[0].At, ID: page.Events[0].ID})
		}
	}
	if p.PrevURL != "" || p.NextURL != "" && (f.Cursor != nil || newer) {
		p.FirstURL = link("", nil)
	}
	exp := url.Values{}
	for k, vs := range keep {
		if k != "limit" {
			exp[k] = vs
		}
	}
	exp.Set("format", "csv")
	p.CSVURL = "/ui/export?" + exp.Encode()
	exp.Set("format", "ndjson")
	p.NDJSONURL = "/ui/export?" + exp.Encode()
	if hasReview {
		cf := f
		cf.Cursor = nil
		if cnt, err := rv.Count(ctx, cf, countCap); err == nil {
			p.Count, p.CountMore, p.Counted = cnt, cnt >= countCap, true
		} else {
			loggerFrom(c).Warn("audit count failed", "err", err)
		}
	}
	s.renderPage(c, http.StatusOK, s.ui.events, "Events", p)
}

// fillChoices lists the select options: the policy's actions, plus the
// admin actions, and the fixed decisions, reasons and kinds.
func (s *server) fillChoices(p *eventsPage) {
	pol := s.deps.Guard.Policy()
	for name := range pol.Actions {
		p.Actions = append(p.Actions, name)
	}
	sort.Strings(p.Actions)
	p.Actions = append(p.Actions, abuse.ActionLock, abuse.ActionUnlock, abuse.ActionReload)
	p.Decisions = []string{sdk.DecisionAllow, sdk.DecisionDeny, sdk.DecisionChallenge}
	p.Reasons = []string{abuse.ReasonOK, abuse.ReasonRateLimited, abuse.ReasonLockedOut, abuse.ReasonDenylisted,
		abuse.ReasonAllowlisted, abuse.ReasonShadow, abuse.ReasonStoreUnavailable, abuse.ReasonChallenge}
	p.Kinds = []string{audit.KindCheck, audit.KindReport, audit.KindAdmin}
	p.Limits = []string{"25", "50", "100", "250", "1000"}
}

// uiAuditFilter is the audit filter of the events page and the export:
// the API's parameters, with since and until also taking a duration back
// from now ("24h", "90m", "7d"), a date, or a picker's local time (read as
// UTC); since_at and until_at are the pickers themselves; newer is a
// cursor paging towards newer events.
func (s *server) uiAuditFilter(q map[string]*string, now time.Time) (audit.Filter, error) {
	for _, pair := range [][2]string{{"since", "since_at"}, {"until", "until_at"}} {
		at := q[pair[1]]
		if at == nil || *at == "" {
			continue
		}
		if v := q[pair[0]]; v != nil && *v != "" {
			return audit.Filter{}, badRequest(pair[1], "give "+pair[0]+" or pick a time, not both")
		}
		q[pair[0]] = at
	}
	var exact [4]string
	for i, name := range []string{"user", "ip", "device", "phone"} {
		v := q[name+"_exact"]
		delete(q, name+"_exact")
		if v == nil || *v == "" {
			continue
		}
		if w := q[name]; w != nil && *w != "" {
			return audit.Filter{}, badRequest(name, "give "+name+" or keep the exact "+name+" of the link, not both")
		}
		exact[i] = *v
	}
	newer := q["newer"]
	if newer != nil && *newer != "" {
		if c := q["cursor"]; c != nil && *c != "" {
			return audit.Filter{}, badRequest("newer", "cursor and newer exclude each other")
		}
		q["cursor"] = newer
	}
	delete(q, "newer")
	delete(q, "since_at")
	delete(q, "until_at")
	f, err := s.buildAuditFilter(q, func(name, v string) (time.Time, error) {
		t, err := ParseTime(v, now)
		if err != nil {
			return t, badRequest(name, name+` must be a duration back from now (15m, 24h, 7d), a date (2026-01-02) or an RFC 3339 time (2026-01-02T15:04:05Z)`)
		}
		return t, nil
	})
	if err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, badRequest("until", "until must be after since")
	}
	// Exact values are matched as stored (a pivot on a pseudonymised
	// identifier: hashing the hash again would match nothing).
	if exact[0] != "" {
		f.User = exact[0]
	}
	if exact[1] != "" {
		f.IP, f.IPText = netip.Prefix{}, exact[1]
	}
	if exact[2] != "" {
		f.Device = exact[2]
	}
	if exact[3] != "" {
		f.Phone = exact[3]
	}
	return f, nil
}

// ParseTime reads a time as the review pages and `guard audit` take it: an
// RFC 3339 time, a date-time or date (UTC), or a duration back from now
// (15m, 24h, 7d).
func ParseTime(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := parseQueryTime(v); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 3650 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time, a date or a duration such as 24h or 7d", v)
}

// handleUIExport streams the events of the page's filter as CSV or NDJSON
// for download.
func (s *server) handleUIExport(c *gin.Context) {
	q, err := uiParams(c, append(uiEventParams, "format")...)
	if err != nil {
		s.uiFail(c, err)
		return
	}
	format := "csv"
	if v := q["format"]; v != nil {
		format = *v
	}
	delete(q, "format")
	var ct string
	switch format {
	case "csv":
		ct = audit.ContentTypeCSV
	case "ndjson":
		ct = audit.ContentTypeNDJSON
	default:
		s.uiFail(c, badRequest("format", `format must be "csv" or "ndjson"`))
		return
	}
	f, err := s.uiAuditFilter(q, s.now().UTC())
	if err != nil {
		s.uiFail(c, err)
		return
	}
	name := "guard-audit-" + s.now().UTC().Format("20060102T150405Z") + "." + format
	c.Header("Content-Disposition", `attachment; filename="`+name+`"`)
	s.streamAudit(c, f, ct)
}
