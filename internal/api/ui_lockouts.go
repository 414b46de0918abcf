package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

// lockDurations are the manual lockout form's choices (any Go duration,
// or "Nd", from 1s to 30 days is accepted).
var lockDurations = []struct{ Value, Label string }{
	{"15m", "15 minutes"}, {"1h", "1 hour"}, {"6h", "6 hours"}, {"24h", "1 day"},
	{"7d", "7 days"}, {"30d", "30 days"},
}

type uiLockout struct {
	abuse.ActiveLockout
	User, IP, Device string
	// Phone is the entry's phone key: the number, or the country or
	// prefix of a phone_country or phone_prefix lockout.
	Phone string
	// Unlockable is false when Guard could not name the identifiers (then
	// only the API, with the identifiers, can lift it).
	Unlockable bool
	// Sel is the entry's value in the bulk unlock form.
	Sel string
}

type uiLockoutsPage struct {
	Form       map[string]string
	Errors     map[string]string
	Error      string
	Done       string
	Lockouts   []uiLockout
	NextURL    string
	FirstURL   string
	Dimensions []string
	Ledgers    []string
	Durations  []struct{ Value, Label string }
	Lock       map[string]string // the manual lock form's values
	LockErrors map[string]string
	Admin      []uiEvent
	Now        time.Time
}

func (s *server) newLockoutsPage() *uiLockoutsPage {
	p := &uiLockoutsPage{Form: map[string]string{}, Errors: map[string]string{}, Lock: map[string]string{"duration": "1h"},
		LockErrors: map[string]string{}, Dimensions: abuse.Dimensions, Durations: lockDurations, Now: s.now().UTC()}
	seen := map[string]bool{}
	for _, a := range s.deps.Guard.Policy().Actions {
		if l := a.Lockout.Ledger; l != "" && !seen[l] {
			seen[l] = true
			p.Ledgers = append(p.Ledgers, l)
		}
	}
	sort.Strings(p.Ledgers)
	return p
}

// handleUILockouts renders the active lockouts (filtered, paged), the
// unlock and manual lockout forms for admin keys, and the latest admin
// events.
func (s *server) handleUILockouts(c *gin.Context) {
	p := s.newLockoutsPage()
	q, err := uiParams(c, append(lockoutParams, "done", "n")...)
	if err != nil {
		p.Error = classify(err).Message
		s.renderLockouts(c, http.StatusBadRequest, p)
		return
	}
	for k, v := range q {
		p.Form[k] = *v
	}
	switch p.Form["done"] {
	case "unlocked":
		p.Done = "Unlocked. The admin event is in the list below and on the Events page."
		if v := p.Form["n"]; v != "" {
			// Only a count goes into the message: the link is anyone's to
			// craft, and the page would state its text as Guard's.
			p.Done = ""
			if n, ok := unlockedCount(v); ok {
				p.Done = "Unlocked " + strconv.Itoa(n) + " lockout(s). The admin events are in the list below and on the Events page."
			}
		}
	case "locked":
		p.Done = "Locked. The admin event is in the list below and on the Events page."
	}
	delete(q, "done")
	delete(q, "n")
	s.renderLockouts(c, http.StatusOK, p)
}

// renderLockouts lists the lockouts of p.Form and renders the page; an
// error in the filter is shown beside its field.
func (s *server) renderLockouts(c *gin.Context, status int, p *uiLockoutsPage) {
	q := map[string]*string{}
	for _, k := range lockoutParams {
		if v := p.Form[k]; v != "" {
			q[k] = &v
		}
	}
	f, err := lockoutFilter(q)
	var page abuse.LockoutPage
	if err == nil {
		page, err = s.deps.Guard.Lockouts(c.Request.Context(), f)
	}
	if err != nil {
		e := classify(err)
		if e.Status != http.StatusBadRequest {
			s.uiFail(c, dependency(err))
			return
		}
		if e.Field == "ledger" {
			// abuse quotes the unknown ledger: text from the link.
			e = badRequest("ledger", "ledger is not a lockout ledger of the policy")
		}
		if e.Field != "" && e.Field != "cursor" {
			p.Errors[e.Field] = e.Message
		} else {
			p.Error = e.Message
		}
		status = http.StatusBadRequest
	}
	for _, l := range page.Lockouts {
		u := uiLockout{ActiveLockout: l, User: derefStr(l.User), IP: derefStr(l.IP), Device: derefStr(l.Device),
			Phone: derefStr(l.Phone) + derefStr(l.PhoneCountry) + derefStr(l.PhonePrefix)}
		u.Unlockable = unlockable(l)
		u.Sel = lockoutSel(l)
		p.Lockouts = append(p.Lockouts, u)
	}
	if page.Next != "" || f.Cursor != "" {
		v := url.Values{}
		for _, k := range []string{"user", "ip", "device", "phone", "dimension", "ledger", "limit"} {
			if p.Form[k] != "" {
				v.Set(k, p.Form[k])
			}
		}
		p.FirstURL = "/ui/lockouts"
		if len(v) > 0 {
			p.FirstURL += "?" + v.Encode()
		}
		if page.Next != "" {
			v.Set("cursor", page.Next)
			p.NextURL = "/ui/lockouts?" + v.Encode()
		}
	}
	if adm, err := s.deps.Audit.Query(c.Request.Context(), audit.Filter{Kind: audit.KindAdmin, Limit: 10}); err == nil {
		for _, e := range adm.Events {
			p.Admin = append(p.Admin, uiEvent{e, eventURL(e)})
		}
	}
	s.renderPage(c, status, s.ui.lockouts, "Lockouts", p)
}

// unlockedCount reads the n of a bulk unlock's redirect: a decimal count
// up to maxBulkUnlock.
func unlockedCount(v string) (int, bool) {
	if v == "" || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n <= maxBulkUnlock
}

// unlockable reports whether the entry names every identifier its
// dimension needs.
func unlockable(l abuse.ActiveLockout) bool {
	d := l.Dimension
	return !(strings.Contains(d, "user") && l.User == nil || strings.Contains(d, "ip") && l.IP == nil ||
		strings.Contains(d, "device") && l.Device == nil || d == abuse.DimPhone && l.Phone == nil ||
		d == abuse.DimPhoneCountry && l.PhoneCountry == nil || d == abuse.DimPhonePrefix && l.PhonePrefix == nil)
}

// lockoutIdentifiers are an entry's identifiers by form field name.
func lockoutIdentifiers(l *abuse.ActiveLockout) map[string]**string {
	return map[string]**string{"user": &l.User, "ip": &l.IP, "device": &l.Device, "phone": &l.Phone,
		"phone_country": &l.PhoneCountry, "phone_prefix": &l.PhonePrefix}
}

// lockoutSel encodes an entry for the bulk unlock form.
func lockoutSel(l abuse.ActiveLockout) string {
	v := url.Values{"dimension": {l.Dimension}, "ledger": {l.Ledger}}
	for k, p := range lockoutIdentifiers(&l) {
		if *p != nil {
			v.Set(k, **p)
		}
	}
	return v.Encode()
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// formSubject reads the identifiers of a lock or unlock form; empty fields
// are absent.
func formSubject(c *gin.Context) abuse.Subject {
	get := func(k string) *string {
		if v := c.PostForm(k); v != "" {
			return &v
		}
		return nil
	}
	return abuse.Subject{User: get("user"), IP: get("ip"), Device: get("device"), Phone: get("phone"),
		PhoneCountry: get("phone_country"), PhonePrefix: get("phone_prefix")}
}

// handleUIUnlock lifts a lockout from the lockouts page (admin, CSRF
// token, a reason required), then shows the page with the admin event.
func (s *server) handleUIUnlock(c *gin.Context) {
	if !s.checkCSRF(c) {
		return
	}
	p := s.newLockoutsPage()
	reason := strings.TrimSpace(c.PostForm("reason"))
	if reason == "" {
		p.Error = "An unlock needs a reason (it goes into the audit trail)."
		s.renderLockouts(c, http.StatusBadRequest, p)
		return
	}
	t0 := s.now().UTC().Truncate(time.Millisecond)
	err := s.deps.Guard.Unlock(c.Request.Context(), abuse.UnlockInput{
		Dimension: c.PostForm("dimension"), Subject: formSubject(c), Ledger: c.PostForm("ledger"),
		Reason: reason, APIKey: keyName(c),
	})
	if err != nil {
		e := classify(dependency(err))
		if e.Status >= 500 {
			s.uiFail(c, dependency(err))
			return
		}
		p.Error = e.Message
		if errors.Is(err, abuse.ErrNotFound) {
			p.Error = "Nothing was locked for that key any more (it may have ended or been lifted already)."
		}
		s.renderLockouts(c, e.Status, p)
		return
	}
	s.awaitAdminEvent(c.Request.Context(), abuse.ActionUnlock, keyName(c), t0, 1)
	c.Redirect(http.StatusSeeOther, "/ui/lockouts?done=unlocked")
}

// handleUILock sets a manual lockout from the lockouts page (admin, CSRF
// token, a reason required); errors are shown beside the form's fields.
func (s *server) handleUILock(c *gin.Context) {
	if !s.checkCSRF(c) {
		return
	}
	p := s.newLockoutsPage()
	for _, k := range []string{"dimension", "user", "ip", "device", "phone", "ledger", "duration", "reason"} {
		p.Lock[k] = c.PostForm(k)
	}
	fail := func(field, msg string) {
		p.LockErrors[field] = msg
		s.renderLockouts(c, http.StatusBadRequest, p)
	}
	reason := strings.TrimSpace(p.Lock["reason"])
	if reason == "" {
		fail("reason", "A manual lockout needs a reason (it goes into the audit trail).")
		return
	}
	d, err := parseLockDuration(p.Lock["duration"])
	if err != nil {
		fail("duration", err.Error())
		return
	}
	ms := d.Milliseconds()
	t0 := s.now().UTC().Truncate(time.Millisecond)
	fs := formSubject(c)
	// The form's ledger select sends "" for every ledger.
	var ledger *string
	if l := p.Lock["ledger"]; l != "" {
		ledger = &l
	}
	_, err = s.lock(c, lockRequest{Dimension: p.Lock["dimension"], User: fs.User, IP: fs.IP, Device: fs.Device, Phone: fs.Phone,
		PhoneCountry: fs.PhoneCountry, PhonePrefix: fs.PhonePrefix, DurationMs: &ms, Reason: reason, Ledger: ledger})
	if err != nil {
		e := classify(err)
		if e.Status >= 500 {
			s.uiFail(c, err)
			return
		}
		field := e.Field
		if field == "duration_ms" {
			field = "duration"
		}
		if field == "" {
			field = "form"
		}
		fail(field, e.Message)
		return
	}
	s.awaitAdminEvent(c.Request.Context(), abuse.ActionLock, keyName(c), t0, 1)
	c.Redirect(http.StatusSeeOther, "/ui/lockouts?done=locked")
}

// parseLockDuration reads the manual lockout form's duration: a Go
// duration or a number of days ("7d"), 1s to 30 days.
func parseLockDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok && days != "" && !strings.ContainsAny(days, "hms") {
		n, err := time.ParseDuration(days + "h")
		if err != nil {
			return 0, errors.New("duration must be like 15m, 6h or 7d")
		}
		if n > abuse.MaxManualLock/24 || n < -abuse.MaxManualLock/24 {
			// Out of range already, and n*24 could wrap into it.
			return 0, errors.New("duration must be from 1s to 30 days")
		}
		d = n * 24
	} else {
		n, err := time.ParseDuration(v)
		if err != nil {
			return 0, errors.New("duration must be like 15m, 6h or 7d")
		}
		d = n
	}
	if d < abuse.MinManualLock || d > abuse.MaxManualLock {
		return 0, errors.New("duration must be from 1s to 30 days")
	}
	return d, nil
}

// awaitAdminEvent waits (at most 2 s) until the audit store holds the n
// admin events an action just recorded (at or after since, by key), so the
// page the browser is sent to shows them: events reach the store through
// the asynchronous writer.
func (s *server) awaitAdminEvent(ctx context.Context, action, key string, since time.Time, n int) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	f := audit.Filter{Kind: audit.KindAdmin, Action: action, Since: since, Limit: audit.MaxLimit}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if page, err := s.deps.Audit.Query(ctx, f); err == nil {
			seen := 0
			for _, e := range page.Events {
				if e.APIKey == key {
					seen++
				}
			}
			if seen >= n {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
