package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
)

// maxBulkUnlock bounds one bulk unlock.
const maxBulkUnlock = 5000

// handleUIUnlockMany lifts the selected lockouts, or with all=1 every
// lockout matching the page's filter (Keycloak's "unlock all", for the
// filter), each audited as its own admin event with the one reason.
func (s *server) handleUIUnlockMany(c *gin.Context) {
	if !s.checkCSRF(c) {
		return
	}
	p := s.newLockoutsPage()
	reason := strings.TrimSpace(c.PostForm("reason"))
	if reason == "" {
		p.Error = "A bulk unlock needs a reason (it goes into the audit trail)."
		s.renderLockouts(c, http.StatusBadRequest, p)
		return
	}
	ctx := c.Request.Context()
	var targets []abuse.UnlockInput
	add := func(l abuse.ActiveLockout) {
		if !unlockable(l) {
			return
		}
		targets = append(targets, abuse.UnlockInput{Dimension: l.Dimension, Ledger: l.Ledger,
			Subject: abuse.Subject{User: l.User, IP: l.IP, Device: l.Device, Phone: l.Phone,
				PhoneCountry: l.PhoneCountry, PhonePrefix: l.PhonePrefix}, Reason: reason, APIKey: keyName(c)})
	}
	if c.PostForm("all") == "1" {
		q := map[string]*string{}
		for _, k := range []string{"user", "ip", "device", "phone", "dimension", "ledger"} {
			if v := c.PostForm(k); v != "" {
				q[k] = &v
			}
		}
		f, err := lockoutFilter(q)
		if err != nil {
			p.Error = classify(err).Message
			s.renderLockouts(c, http.StatusBadRequest, p)
			return
		}
		f.Limit = abuse.MaxLockoutLimit
		for len(targets) < maxBulkUnlock {
			page, err := s.deps.Guard.Lockouts(ctx, f)
			if err != nil {
				s.uiFail(c, dependency(err))
				return
			}
			for _, l := range page.Lockouts {
				add(l)
			}
			if page.Next == "" {
				break
			}
			f.Cursor = page.Next
		}
	} else {
		for _, sel := range c.PostFormArray("sel") {
			v, err := url.ParseQuery(sel)
			if err != nil {
				continue
			}
			l := abuse.ActiveLockout{Dimension: v.Get("dimension"), Ledger: v.Get("ledger")}
			for k, dst := range lockoutIdentifiers(&l) {
				if x := v.Get(k); x != "" {
					*dst = &x
				}
			}
			add(l)
		}
	}
	if len(targets) == 0 {
		p.Error = "Nothing selected: tick the lockouts to lift, or \"every lockout matching the filter\"."
		s.renderLockouts(c, http.StatusBadRequest, p)
		return
	}
	t0 := s.now().UTC().Truncate(time.Millisecond)
	n, failed := 0, 0
	var firstErr error
	for _, in := range targets {
		err := s.deps.Guard.Unlock(ctx, in)
		switch {
		case err == nil:
			n++
		case errors.Is(err, abuse.ErrNotFound):
		case classify(dependency(err)).Status >= 500:
			// One target the store cannot answer (Redis down: the
			// fallback did not hold it) does not keep the others from
			// being tried; the page says how many could not be.
			failed++
			if firstErr == nil {
				firstErr = err
			}
		default:
			// Bad input (a ledger a reload removed, a tampered
			// selection): nothing to lift there, as before.
		}
	}
	if n > 0 {
		s.awaitAdminEvent(ctx, abuse.ActionUnlock, keyName(c), t0, n)
	}
	if failed > 0 {
		if failed == len(targets) {
			s.uiFail(c, dependency(firstErr))
			return
		}
		loggerFrom(c).Warn("bulk unlock: some lockouts could not be lifted", "lifted", n, "failed", failed, "err", firstErr)
		p.Error = fmt.Sprintf("%d lifted; %d could not be lifted now (the limit store did not answer for them): try those again.", n, failed)
		s.renderLockouts(c, http.StatusServiceUnavailable, p)
		return
	}
	c.Redirect(http.StatusSeeOther, "/ui/lockouts?done=unlocked&n="+strconv.Itoa(n))
}
