package api

import (
	"net/netip"
	"sync"
	"time"
)

// Refused review sign-ins are limited per client address, so the sign-in
// form is no oracle for guessing API keys at the network's speed.
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
