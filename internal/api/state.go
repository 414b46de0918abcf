package api

import "time"

// State is what the HTTP layer keeps across the handlers built for
// successive configs (a reload, internal/reload): the review sessions that
// were signed out, so a reload does not make their cookies valid again, the
// refused review sign-ins, so a reload does not reset their limit, and the
// audit exports running, so a reload does not double their cap.
type State struct {
	sess    *sessions
	signIns *signInLimiter
	exports exportLimits
}

// NewState returns the state for handlers of cfg's SessionSecret and
// Exports, which a reload does not change (the secret derives from
// key_secret); nil now means time.Now.
func NewState(cfg Config, now func() time.Time) *State {
	if now == nil {
		now = time.Now
	}
	return &State{sess: newSessions(cfg.SessionSecret, now), signIns: newSignInLimiter(now),
		exports: newExportLimits(cfg.Exports)}
}
