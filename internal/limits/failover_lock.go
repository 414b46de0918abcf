package limits

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Lock sets manual lockouts on the primary and, once the primary has them,
// on this instance's fallback too, so this instance keeps enforcing them
// through a later outage. It never answers from the fallback alone: while
// the breaker is open, or when the primary fails, it returns an error
// (wrapping ErrUnavailable when the primary could not be reached), because
// a lock only this instance knows would be a lock the fleet ignores. It
// never moves the breaker.
func (f *FailoverStore) Lock(ctx context.Context, req *LockRequest) ([]LockState, error) {
	if err := validateLock(req); err != nil {
		return nil, err
	}
	if f.Degraded() {
		return nil, fmt.Errorf("lock: %w: the primary store is down", ErrUnavailable)
	}
	// An admin write, not a decision: AdminTimeout, not the budget.
	pctx, cancel := context.WithTimeout(ctx, f.cfg.AdminTimeout)
	states, err := f.primary.Lock(pctx, req)
	cancel()
	if err != nil {
		f.primaryError(err)
		return nil, fmt.Errorf("lock: %w", err)
	}
	if _, lerr := f.fallback.Lock(context.WithoutCancel(ctx), req); lerr != nil {
		f.logger.Warn("fallback lock failed", "err", lerr)
	} else {
		f.mirror(req)
	}
	return states, nil
}

// mirror remembers the manual locks of req, now copied into the fallback,
// until they end (FailoverStore.mirrored), and forgets those that ended.
func (f *FailoverStore) mirror(req *LockRequest) {
	now := f.cfg.Now()
	end := now.Add(req.Duration)
	f.mirMu.Lock()
	defer f.mirMu.Unlock()
	for k, until := range f.mirrored {
		if !until.After(now) {
			delete(f.mirrored, k)
		}
	}
	if f.mirrored == nil {
		f.mirrored = make(map[string]time.Time)
	}
	for _, l := range req.Locks {
		if end.After(f.mirrored[l.Key]) {
			f.mirrored[l.Key] = end
		}
	}
}

// mirrorHolds reports whether one of keys is a manual lock copied from the
// primary that has not ended yet.
func (f *FailoverStore) mirrorHolds(keys []string) bool {
	now := f.cfg.Now()
	f.mirMu.Lock()
	defer f.mirMu.Unlock()
	for _, k := range keys {
		if f.mirrored[k].After(now) {
			return true
		}
	}
	return false
}

// mirroredOf returns the keys among keys that are manual locks copied from
// the primary and not ended yet.
func (f *FailoverStore) mirroredOf(keys []string) []string {
	now := f.cfg.Now()
	f.mirMu.Lock()
	defer f.mirMu.Unlock()
	var out []string
	for _, k := range keys {
		if f.mirrored[k].After(now) {
			out = append(out, k)
		}
	}
	return out
}

// without returns keys less those in drop.
func without(keys, drop []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !slices.Contains(drop, k) {
			out = append(out, k)
		}
	}
	return out
}

// forgetMirrored drops keys, lifted on the primary, from f.mirrored.
func (f *FailoverStore) forgetMirrored(keys []string) {
	f.mirMu.Lock()
	defer f.mirMu.Unlock()
	for _, k := range keys {
		delete(f.mirrored, k)
	}
}
