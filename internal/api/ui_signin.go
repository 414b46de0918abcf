package api

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// Refused review sign-ins are limited per client address, so the sign-in
// form is no oracle for guessing API keys at the network's speed: in the
// limit store when the Guard keeps a shared count (sharedSignIns), and on
// each instance (signInLimiter), which holds alone when the shared count
// cannot be read.
const (
	// signInFailures is how many refused sign-ins a client address may
	// make per signInWindow; beyond that /ui/login answers 429 without
	// checking the key.
	signInFailures = 10
	signInWindow   = time.Minute
	// signInClients bounds the addresses tracked. When that many have a
	// live window, the others share one window (and its limit), so the
	// table stays bounded under a spread-out attack without lifting the
	// limit.
	signInClients = 10000
)

// sharedSignIns is implemented by *abuse.Guard: refused sign-ins counted
// in the limit store, one count per client address for every instance on
// one Redis.
type sharedSignIns interface {
	SignInBlocked(ctx context.Context, client string, limit int, window time.Duration) (time.Duration, bool, error)
	SignInRefused(ctx context.Context, client string, limit int, window time.Duration) error
}

// signInBlocked reports whether client has used up its refused sign-ins,
// and for how long it stays blocked: by the shared count when the Guard
// keeps one, and by this instance's own, which holds when the shared count
// cannot be read (or was lost, a Redis flushed) and is never looser.
func (s *server) signInBlocked(c *gin.Context, client string) (time.Duration, bool) {
	wait, blocked := s.signIns.blocked(client)
	if sh, ok := s.deps.Guard.(sharedSignIns); ok {
		w, b, err := sh.SignInBlocked(c.Request.Context(), client, signInFailures, signInWindow)
		switch {
		case err != nil:
			loggerFrom(c).Warn("review sign-ins: the shared count is unavailable, this instance's own holds", "err", err)
		case b:
			wait, blocked = max(wait, w), true
		}
	}
	return wait, blocked
}

// signInRefused counts a refused sign-in of client, in the shared count
// when the Guard keeps one and in this instance's own.
func (s *server) signInRefused(c *gin.Context, client string) {
	s.signIns.refused(client)
	if sh, ok := s.deps.Guard.(sharedSignIns); ok {
		if err := sh.SignInRefused(c.Request.Context(), client, signInFailures, signInWindow); err != nil {
			loggerFrom(c).Warn("review sign-ins: the refusal is counted on this instance only", "err", err)
		}
	}
}

// signInLimiter counts refused sign-ins per client in fixed windows that
// start at a client's first refusal. Expired windows are pruned on use.
type signInLimiter struct {
	now func() time.Time

	mu      sync.Mutex
	windows map[string]*signInWindowState
}

type signInWindowState struct {
	start time.Time
	n     int
}

func newSignInLimiter(now func() time.Time) *signInLimiter {
	return &signInLimiter{now: now, windows: map[string]*signInWindowState{}}
}

// signInClient is the limiter's key for a client address: the address,
// an IPv6 one by its /64 (one host owns a /64); "" for none.
func signInClient(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// blocked reports whether client has used up its refusals, and for how
// long it stays blocked.
func (l *signInLimiter) blocked(client string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window(client, false)
	if w == nil || w.n < signInFailures {
		return 0, false
	}
	return w.start.Add(signInWindow).Sub(l.now()), true
}

// refused counts a refused sign-in of client.
func (l *signInLimiter) refused(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window(client, true).n++
}

// window is client's live window (the shared one when the table is full),
// nil when it has none and create is false. l.mu is held.
func (l *signInLimiter) window(client string, create bool) *signInWindowState {
	now := l.now()
	live := func(w *signInWindowState) bool { return w != nil && now.Before(w.start.Add(signInWindow)) }
	if w := l.windows[client]; live(w) {
		return w
	}
	if _, ok := l.windows[client]; !ok && len(l.windows) >= signInClients {
		for k, w := range l.windows {
			if !live(w) {
				delete(l.windows, k)
			}
		}
		if len(l.windows) >= signInClients {
			client = signInOverflow
			if w := l.windows[client]; live(w) {
				return w
			}
		}
	}
	if !create {
		return nil
	}
	w := &signInWindowState{start: now}
	l.windows[client] = w
	return w
}

// signInOverflow is the shared window's key (no address looks like it).
const signInOverflow = "overflow"
