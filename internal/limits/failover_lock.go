package limits

import (
	"context"
	"fmt"
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
	}
	return states, nil
}
