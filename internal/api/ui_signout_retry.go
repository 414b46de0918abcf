package api

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A sign-out the shared store could not record (Postgres down, the
// migration not applied yet) holds on its own instance at once, and is
// recorded again in the background: after signOutRetry, then at doubling
// intervals up to signOutRetryMax, until the store takes it or no copy of
// the session's cookie can be valid any more. So a sign-out taken during
// an outage reaches the other instances once Postgres is back, without
// waiting for a page view.
const (
	signOutRetry    = 2 * time.Second
	signOutRetryMax = time.Minute
	// unsharedMax bounds the sign-outs waiting; past it the one whose
	// session can stay valid the shortest is dropped first.
	unsharedMax = 10000
)

// unsharedSignOuts holds the sign-outs waiting to be shared. It lives with
// the sessions (State), so a reload keeps them.
type unsharedSignOuts struct {
	now   func() time.Time
	first time.Duration // signOutRetry; tests shorten it

	mu      sync.Mutex
	pending map[string]time.Time // nonce digest -> until
	store   SessionRevocations   // the store of the latest failure
	log     *slog.Logger
	timer   *time.Timer
	wait    time.Duration
}

// add keeps one sign-out for store and starts the retries when none run.
func (u *unsharedSignOuts) add(store SessionRevocations, log *slog.Logger, digest []byte, until time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending = map[string]time.Time{}
	}
	if len(u.pending) >= unsharedMax {
		var first string
		for d, t := range u.pending {
			if first == "" || t.Before(u.pending[first]) {
				first = d
			}
		}
		delete(u.pending, first)
	}
	u.pending[string(digest)] = until
	u.store, u.log = store, log
	if u.timer == nil {
		u.wait = u.first
		u.timer = time.AfterFunc(u.wait, u.retry)
	}
}

// waiting is how many sign-outs wait to be shared.
func (u *unsharedSignOuts) waiting() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.pending)
}

// retry records the waiting sign-outs, stopping at the first failure, and
// schedules the next attempt while any wait.
func (u *unsharedSignOuts) retry() {
	u.mu.Lock()
	store, log, now := u.store, u.log, u.now()
	batch := make(map[string]time.Time, len(u.pending))
	for d, until := range u.pending {
		if until.After(now) {
			batch[d] = until
		} else {
			delete(u.pending, d)
		}
	}
	u.mu.Unlock()
	shared := 0
	var failed error
	for d, until := range batch {
		ctx, cancel := context.WithTimeout(context.Background(), revocationWait)
		err := store.RevokeSession(ctx, []byte(d), until)
		cancel()
		if err != nil {
			failed = err
			break
		}
		shared++
		u.mu.Lock()
		if u.pending[d] == until {
			delete(u.pending, d)
		}
		u.mu.Unlock()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if shared > 0 {
		log.Info("review sign-outs shared with the other instances after all", "sign_outs", shared)
	}
	if len(u.pending) == 0 {
		u.timer = nil
		return
	}
	if failed != nil {
		u.wait = min(2*u.wait, signOutRetryMax)
	}
	u.timer = time.AfterFunc(u.wait, u.retry)
}
