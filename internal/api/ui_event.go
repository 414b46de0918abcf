package api

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/sdk"
)

type eventRow struct{ Name, Value string }

type eventPage struct {
	Event                     audit.Event
	Rows                      []eventRow
	SameDecision, SameSubject []uiEvent
	SubjectField, Subject     string
	SubjectURL                string
	Now                       time.Time
}

// handleUIEvent renders one event with the related events: those of the
// same decision (its check and the reports that name it) and the latest of
// the same subject within a day either side. The audit store is searched
// by time, so the link carries the event's time in ?at=; without it the
// time is read from the id when that is a ULID (as check events' ids are)
// and the event looked for around it (eventIDWindows).
func (s *server) handleUIEvent(c *gin.Context) {
	id := c.Param("id")
	q, err := uiParams(c, "at")
	if err != nil {
		s.uiFail(c, err)
		return
	}
	var at time.Time
	exact := q["at"] != nil
	if exact {
		if at, err = parseQueryTime(*q["at"]); err != nil {
			s.uiFail(c, badRequest("at", "at must be an RFC 3339 time"))
			return
		}
	} else if at, err = ulidTime(id); err != nil {
		s.uiFail(c, badRequest("at", "at is required for events whose id is not a ULID"))
		return
	}
	if !storableText(id) {
		s.uiFail(c, badRequest("id", "id must be valid UTF-8 without NUL"))
		return
	}
	e, found, err := s.findEvent(c, id, at.UTC().Truncate(time.Millisecond), exact)
	if err != nil {
		s.uiFail(c, dependency(err))
		return
	}
	if !found {
		// The id is the link's text: only one shaped as Guard issues them
		// (a ULID) is repeated, so a crafted link cannot make the page say
		// what it likes.
		what := "No such event"
		if _, err := ulidTime(id); err == nil {
			what = "No event " + id
		}
		s.renderError(c, http.StatusNotFound, "Not found", what+" at "+at.UTC().Format(time.RFC3339Nano)+".")
		return
	}
	p := eventPage{Event: e, Now: s.now().UTC()}
	add := func(name, v string) {
		if v != "" {
			p.Rows = append(p.Rows, eventRow{name, v})
		}
	}
	add("id", e.ID)
	add("at", sdk.FormatTime(e.At))
	add("kind", e.Kind)
	add("action", e.Action)
	add("decision", e.Decision)
	add("reason", e.Reason)
	add("outcome", e.Outcome)
	add("rule", e.Rule)
	if e.RetryAfterMs != nil {
		add("retry_after_ms", strconv.FormatInt(*e.RetryAfterMs, 10))
	}
	if e.LockoutUntil != nil {
		add("lockout_until", sdk.FormatTime(*e.LockoutUntil))
	}
	if e.Degraded != nil {
		add("degraded", strconv.FormatBool(*e.Degraded))
	}
	if e.DryRun != nil {
		add("dry_run", strconv.FormatBool(*e.DryRun))
	}
	add("api_key", e.APIKey)
	add("decision_id", e.DecisionID)
	add("instance", e.Instance)
	add("note", e.Note)
	s.relatedEvents(c, &p)
	s.renderPage(c, http.StatusOK, s.ui.event, "Event "+e.ID, p)
}

// relatedEvents fills the same-decision and same-subject lists from the
// events of the subject (user, else phone, else device, else IP) within a
// day of e.
func (s *server) relatedEvents(c *gin.Context, p *eventPage) {
	e := p.Event
	f := audit.Filter{Since: e.At.Add(-24 * time.Hour), Until: e.At.Add(24 * time.Hour), Limit: audit.MaxLimit}
	switch {
	case e.User != "":
		f.User, p.SubjectField, p.Subject = e.User, "user", e.User
	case e.Phone != "":
		f.Phone, p.SubjectField, p.Subject = e.Phone, "phone", e.Phone
	case e.Device != "":
		f.Device, p.SubjectField, p.Subject = e.Device, "device", e.Device
	case e.IP != "":
		f.IPText, p.SubjectField, p.Subject = e.IP, "ip", e.IP
	default:
		return
	}
	// The value as stored: a keyed hash with audit.pseudonymize, which the
	// plain filter would hash again (storedParam).
	v := url.Values{s.storedParam(p.SubjectField): {p.Subject}}
	p.SubjectURL = "/ui/events?" + v.Encode()
	page, err := s.deps.Audit.Query(c.Request.Context(), f)
	if err != nil {
		loggerFrom(c).Warn("related events", "err", err)
		return
	}
	did := e.DecisionID
	if did == "" && e.Kind == audit.KindCheck {
		did = e.ID
	}
	for _, r := range page.Events {
		if r.ID == e.ID {
			continue
		}
		if did != "" && (r.DecisionID == did || r.ID == did) {
			p.SameDecision = append(p.SameDecision, uiEvent{r, eventURL(r)})
			continue
		}
		p.SameSubject = append(p.SameSubject, uiEvent{r, eventURL(r)})
	}
	// The subject's events closest in time to e, newest first.
	if len(p.SameSubject) > 20 {
		sort.SliceStable(p.SameSubject, func(i, j int) bool {
			return absDur(p.SameSubject[i].At.Sub(e.At)) < absDur(p.SameSubject[j].At.Sub(e.At))
		})
		p.SameSubject = p.SameSubject[:20]
		sort.SliceStable(p.SameSubject, func(i, j int) bool { return p.SameSubject[i].At.After(p.SameSubject[j].At) })
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
