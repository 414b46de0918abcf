package api

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/guard.css
var guardCSS []byte

// uiCSP is the review pages' Content-Security-Policy: nothing but the
// page itself and its one stylesheet; no script at all, inline or not.
const uiCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// uiTemplates are the review pages, each parsed with the shared layout.
// html/template escapes every value by context (text, attribute, URL);
// identifiers go through identHTML, which also defuses bidi controls and
// look-alikes.
type uiTemplates struct {
	login, overview, events, event, lockouts, message *template.Template
}

var uiFuncs = template.FuncMap{
	"ident": identHTML,
	"time":  uiTime,
	"ago":   uiAgo,
	"list":  func(v ...string) []string { return v },
	"has":   func(list []string, v string) bool { return slices.Contains(list, v) },
	"ptr": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
}

// parseUITemplates parses the pages. "pivot" links an identifier as a
// person would type it; "pivotStored" one read from an audit event, which
// with exact set (events hold keyed hashes: audit.pseudonymize) is matched
// as stored instead of being normalised (hashed) once more.
func parseUITemplates(exact bool) (*uiTemplates, error) {
	stored := pivotHTML
	if exact {
		stored = pivotExactHTML
	}
	parse := func(page string) (*template.Template, error) {
		t, err := template.New(page).Funcs(uiFuncs).Funcs(template.FuncMap{"pivot": pivotHTML, "pivotStored": stored}).ParseFS(templateFS, "templates/layout.html", "templates/"+page)
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", page, err)
		}
		return t.Lookup(page), nil
	}
	var ui uiTemplates
	for _, p := range []struct {
		dst  **template.Template
		name string
	}{{&ui.login, "login.html"}, {&ui.overview, "overview.html"}, {&ui.events, "events.html"},
		{&ui.event, "event.html"}, {&ui.lockouts, "lockouts.html"}, {&ui.message, "message.html"}} {
		t, err := parse(p.name)
		if err != nil {
			return nil, err
		}
		*p.dst = t
	}
	return &ui, nil
}

// pageData is what the layout needs of every page; Page is the page's own.
type pageData struct {
	Title   string
	Nav     string
	KeyName string
	Scope   string
	IsAdmin bool
	CSRF    string
	// SignOut is set for a cookie session (Basic and Bearer have nothing
	// to sign out of).
	SignOut bool
	Page    any
}

// renderPage executes t into a buffer first, so a template error is a
// clean 500 rather than half a page, and sets headers that keep the pages
// (which show identifiers) out of caches, frames and Referer headers.
func (s *server) renderPage(c *gin.Context, status int, t *template.Template, title string, page any) {
	d := pageData{Title: title, Nav: navOf(c.Request.URL.Path), Page: page}
	if a := uiAuthFrom(c); a != nil {
		d.KeyName = a.key.name
		d.IsAdmin = a.key.has(ScopeAdmin)
		switch {
		case d.IsAdmin:
			d.Scope = ScopeAdmin
		case a.key.has(ScopeAuditRead):
			d.Scope = ScopeAuditRead
		default:
			d.Scope = ScopeCheck
		}
		d.CSRF = s.sess.csrfToken(a.sid)
		d.SignOut = a.cookie
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		writeError(c, fmt.Errorf("render %s: %w", t.Name(), err))
		return
	}
	uiHeaders(c)
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
	c.Abort()
}

func uiHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the pages' own form posts, which checkCSRF refuses.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

type messageData struct{ Heading, Text, Back string }

// renderError answers a review request with an HTML error page, or, for
// a client that did not ask for HTML (a script), with the API's error body.
func (s *server) renderError(c *gin.Context, status int, heading, text string) {
	if !wantsHTML(c) {
		writeError(c, &Error{Status: status, Code: statusCode(status), Message: text})
		return
	}
	s.renderPage(c, status, s.ui.message, heading, messageData{Heading: heading, Text: text, Back: "/ui/"})
}

// uiParams is singleParams for the review pages, whose messages are
// stated as Guard's: an unknown parameter is not named (its name is the
// link's text, anyone's to craft), in the message or as the field.
func uiParams(c *gin.Context, names ...string) (map[string]*string, error) {
	q, err := singleParams(c, names...)
	if err != nil {
		if f := classify(err).Field; f != "" && !slices.Contains(names, f) {
			return nil, badRequest("", "the link has a query parameter this page does not take")
		}
	}
	return q, err
}

// uiFail answers err on a review page: bad input and dependency failures
// keep the API's status and message, as a page.
func (s *server) uiFail(c *gin.Context, err error) {
	if !wantsHTML(c) {
		writeError(c, err)
		return
	}
	e := classify(err)
	if e.Status >= 500 {
		loggerFrom(c).Error("review page failed", "status", e.Status, "err", err)
	}
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	s.renderError(c, e.Status, http.StatusText(e.Status), msg)
}

// statusCode is the error code of a status the review pages answer.
func statusCode(status int) string {
	switch status {
	case http.StatusForbidden:
		return sdk.CodeForbidden
	case http.StatusNotFound:
		return sdk.CodeNotFound
	case http.StatusUnauthorized:
		return sdk.CodeUnauthenticated
	case http.StatusBadRequest:
		return sdk.CodeInvalidRequest
	case http.StatusRequestEntityTooLarge:
		return sdk.CodeTooLarge
	}
	return sdk.CodeInternal
}

func navOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/ui/events"):
		return "events"
	case strings.HasPrefix(path, "/ui/lockouts"):
		return "lockouts"
	}
	return "overview"
}

// handleUICSS serves the review pages' stylesheet.
func handleUICSS(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "public, max-age=3600")
	c.Data(http.StatusOK, "text/css; charset=utf-8", guardCSS)
}

// pivotHTML renders an identifier as a link to the events that carry it.
func pivotHTML(field, value string) template.HTML {
	if value == "" {
		return identHTML("")
	}
	q := url.Values{field: {value}}
	return template.HTML(`<a class="pv" href="/ui/events?`+template.HTMLEscapeString(q.Encode())+
		`" title="All events with this `+field+`">`) + identHTML(value) + `</a>`
}

// pivotExactHTML is pivotHTML for stored values that a filter must not
// normalise again: the link uses the <field>_exact parameter.
func pivotExactHTML(field, value string) template.HTML {
	if value == "" {
		return identHTML("")
	}
	q := url.Values{field + "_exact": {value}}
	return template.HTML(`<a class="pv" href="/ui/events?`+template.HTMLEscapeString(q.Encode())+
		`" title="All events with this `+field+`">`) + identHTML(value) + `</a>`
}

// uiTime is an event time as the pages show it (UTC, to the second).
func uiTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// uiAgo is a short relative time ("in 4m", "12s ago").
func uiAgo(t, now time.Time) string {
	d := t.Sub(now)
	suffix := ""
	prefix := "in "
	if d < 0 {
		d, prefix, suffix = -d, "", " ago"
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	return prefix + s + suffix
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

// eventURL links an event's detail page.
func eventURL(e audit.Event) string {
	return "/ui/events/" + url.PathEscape(e.ID) + "?at=" + url.QueryEscape(e.At.UTC().Format(time.RFC3339Nano))
}
