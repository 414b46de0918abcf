package api

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

//go:embed templates/*.html
var templateFS embed.FS

// uiTemplates are the review pages, each parsed with the shared layout.
// html/template escapes every value by context (text, attribute, URL).
type uiTemplates struct {
	events, event, lockouts *template.Template
}

func parseUITemplates() (*uiTemplates, error) {
	parse := func(page string) (*template.Template, error) {
		t, err := template.ParseFS(templateFS, "templates/layout.html", "templates/"+page)
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", page, err)
		}
		return t.Lookup(page), nil
	}
	var ui uiTemplates
	var err error
	if ui.events, err = parse("events.html"); err != nil {
		return nil, err
	}
	if ui.event, err = parse("event.html"); err != nil {
		return nil, err
	}
	if ui.lockouts, err = parse("lockouts.html"); err != nil {
		return nil, err
	}
	return &ui, nil
}

// render executes t into a buffer first, so a template error is a clean
// 500 rather than half a page, and sets headers that keep the pages (which
// show identifiers) out of caches, frames and Referer headers.
func render(c *gin.Context, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		writeError(c, fmt.Errorf("render %s: %w", t.Name(), err))
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/html; charset=utf-8", buf.Bytes())
}

type uiField struct{ Name, Value string }

type uiEvent struct {
	At, Kind, Action, Decision, Reason, Outcome, User, IP, Device, Rule, APIKey string
	DetailURL                                                                   string
}

// handleUIEvents renders the events list with the audit API's filters and
// a link to the next page.
func (s *server) handleUIEvents(c *gin.Context) {
	f, err := s.auditFilter(c)
	if err != nil {
		writeError(c, err)
		return
	}
	page, err := s.deps.Audit.Query(c.Request.Context(), f)
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	query := c.Request.URL.Query()
	data := struct {
		Title   string
		Fields  []uiField
		Events  []uiEvent
		NextURL string
	}{Title: "Audit events"}
	for _, name := range auditParams {
		if name != "cursor" {
			data.Fields = append(data.Fields, uiField{Name: name, Value: query.Get(name)})
		}
	}
	for _, e := range page.Events {
		data.Events = append(data.Events, uiEvent{
			At: sdk.FormatTime(e.At), Kind: e.Kind, Action: e.Action, Decision: e.Decision,
			Reason: e.Reason, Outcome: e.Outcome, User: e.User, IP: e.IP, Device: e.Device,
			Rule: e.Rule, APIKey: e.APIKey,
			DetailURL: "/ui/events/" + url.PathEscape(e.ID) + "?at=" + url.QueryEscape(e.At.UTC().Format(time.RFC3339Nano)),
		})
	}
	if page.Next != nil {
		next := url.Values{}
		for k, vs := range query {
			if k != "cursor" && len(vs) == 1 && vs[0] != "" {
				next.Set(k, vs[0])
			}
		}
		next.Set("cursor", s.deps.Cursors.Encode(page.Next))
		data.NextURL = "/ui/events?" + next.Encode()
	}
	render(c, s.ui.events, data)
}

// handleUIEvent renders one event. The audit store is searched by time,
// so the link carries the event's time in ?at=; without it the time is
// read from the id when that is a ULID (as check events' ids are).
func (s *server) handleUIEvent(c *gin.Context) {
	id := c.Param("id")
	q, err := singleParams(c, "at")
	if err != nil {
		writeError(c, err)
		return
	}
	var at time.Time
	exact := q["at"] != nil
	if exact {
		if at, err = time.Parse(time.RFC3339, *q["at"]); err != nil {
			writeError(c, badRequest("at", "at must be an RFC 3339 time"))
			return
		}
	} else if at, err = ulidTime(id); err != nil {
		writeError(c, badRequest("at", "at is required for events whose id is not a ULID"))
		return
	}
	if !storableText(id) {
		writeError(c, badRequest("id", "id must be valid UTF-8 without NUL"))
		return
	}
	e, found, err := s.findEvent(c, id, at.UTC().Truncate(time.Millisecond), exact)
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	if !found {
		writeError(c, &Error{Status: http.StatusNotFound, Code: sdk.CodeNotFound, Message: "no such event"})
		return
	}
	rows := []uiField{{"id", e.ID}, {"at", sdk.FormatTime(e.At)}, {"kind", e.Kind},
		{"action", e.Action}, {"decision", e.Decision}, {"reason", e.Reason},
		{"outcome", e.Outcome}, {"user", e.User}, {"ip", e.IP}, {"device", e.Device},
		{"rule", e.Rule}}
	if e.RetryAfterMs != nil {
		rows = append(rows, uiField{"retry_after_ms", strconv.FormatInt(*e.RetryAfterMs, 10)})
	}
	if e.LockoutUntil != nil {
		rows = append(rows, uiField{"lockout_until", sdk.FormatTime(*e.LockoutUntil)})
	}
	if e.Degraded != nil {
		rows = append(rows, uiField{"degraded", strconv.FormatBool(*e.Degraded)})
	}
	if e.DryRun != nil {
		rows = append(rows, uiField{"dry_run", strconv.FormatBool(*e.DryRun)})
	}
	rows = append(rows, uiField{"api_key", e.APIKey}, uiField{"decision_id", e.DecisionID},
		uiField{"instance", e.Instance}, uiField{"note", e.Note})
	data := struct {
		Title string
		Rows  []uiField
	}{Title: "Event " + e.ID}
	for _, r := range rows {
		if r.Value != "" {
			data.Rows = append(data.Rows, r)
		}
	}
	render(c, s.ui.event, data)
}

// findEvent looks for the event with id among those at exactly at.
func (s *server) findEvent(c *gin.Context, id string, at time.Time, exact bool) (audit.Event, bool, error) {
	windows := []time.Duration{0}
	if !exact {
		windows = eventIDWindows
	}
	for _, w := range windows {
		f := audit.Filter{ID: id, Since: at.Add(-w), Until: at.Add(w + time.Millisecond), Limit: 1}
		page, err := s.deps.Audit.Query(c.Request.Context(), f)
		if err != nil {
			return audit.Event{}, false, err
		}
		if len(page.Events) > 0 {
			return page.Events[0], true, nil
		}
	}
	return audit.Event{}, false, nil
}

// eventIDWindows are how far from its ULID's time an event is looked for,
// narrowest first. The ULID carries Guard's clock when the decision began;
// the stored at is Redis TIME when the store answered: a few milliseconds
// later on a healthy fleet, more when clocks drift. An event further off
// than the last window needs ?at=.
var eventIDWindows = []time.Duration{5 * time.Second, 10 * time.Minute}

// ulidTime reads the millisecond timestamp in the first 10 characters of
// a ULID (Crockford base32).
func ulidTime(id string) (time.Time, error) {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	if len(id) != 26 {
		return time.Time{}, fmt.Errorf("not a ULID")
	}
	var ms uint64
	for n, ch := range strings.ToUpper(id) {
		i := strings.IndexRune(alphabet, ch)
		if i < 0 {
			return time.Time{}, fmt.Errorf("not a ULID")
		}
		if n < 10 {
			ms = ms<<5 | uint64(i)
		}
	}
	if ms >= 1<<48 {
		return time.Time{}, fmt.Errorf("not a ULID")
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

type uiLockout struct {
	Ledger, Dimension, User, IP, Device string
	Level                               int
	Since, Until                        string
}

// handleUILockouts renders every active lockout.
func (s *server) handleUILockouts(c *gin.Context) {
	if _, err := singleParams(c); err != nil {
		writeError(c, err)
		return
	}
	list, err := s.deps.Guard.Lockouts(c.Request.Context(), abuse.LockoutFilter{})
	if err != nil {
		writeError(c, dependency(err))
		return
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	data := struct {
		Title    string
		Lockouts []uiLockout
	}{Title: "Active lockouts"}
	for _, l := range list {
		data.Lockouts = append(data.Lockouts, uiLockout{
			Ledger: l.Ledger, Dimension: l.Dimension, User: str(l.User), IP: str(l.IP),
			Device: str(l.Device), Level: l.Level,
			Since: sdk.FormatTime(l.Since), Until: sdk.FormatTime(l.Until),
		})
	}
	render(c, s.ui.lockouts, data)
}
