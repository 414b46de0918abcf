package limits

import (
	"context"
	"errors"
	"time"
)

// BreakerState is the state of a FailoverStore's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: calls go to the primary.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls go to the fallback; probes have not yet
	// succeeded.
	BreakerOpen
	// BreakerHalfOpen: calls still go to the fallback; at least one probe
	// succeeded but fewer than RecoverAfter in a row.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open" (metric label values).
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	default:
		return "unknown"
	}
}

// succeeded ends a run of failures. The load first keeps the hot path free
// of writes to a shared cache line while all is well.
func (f *FailoverStore) succeeded() {
	if f.failures.Load() != 0 {
		f.failures.Store(0)
	}
}

// primaryError reports one failed primary call to the hook.
func (f *FailoverStore) primaryError(err error) {
	if f.events.OnPrimaryError != nil {
		f.events.OnPrimaryError(err)
	}
}

// countFailure adds one to the run of failures and opens the breaker when
// the run reaches the threshold. A nil cause counts nothing (the call never
// reached the primary).
//
// Only unavailability (ErrUnavailable: timeouts, refused or reset
// connections, LOADING, failovers) counts: any other error of the primary
// (a script or type error) is a bug, not an outage, so it is logged as one
// and does not move the breaker.
func (f *FailoverStore) countFailure(cause error) {
	if cause == nil {
		return
	}
	if !errors.Is(cause, ErrUnavailable) {
		f.logger.Error("limit store error that is not an outage (a bug?); answered from the fallback, breaker left closed", "err", cause)
		return
	}
	f.failSeq.Add(1)
	if f.failures.Add(1) >= int64(f.cfg.FailureThreshold) {
		f.trip(cause)
	}
}

// MarkUnavailable opens a closed breaker now, as a run of failed calls
// would, for a primary known to be unreachable before any call (serve's
// start-up check): decisions come from the fallback at once, and the
// hooks (metrics, the redis_down alert) fire without waiting for calls or
// probes to fail. Probes close it again as usual. A cause that is not
// unavailability (ErrUnavailable) changes nothing, as in countFailure.
func (f *FailoverStore) MarkUnavailable(cause error) {
	if errors.Is(cause, ErrUnavailable) {
		f.trip(cause)
	}
}

// trip opens a closed breaker.
func (f *FailoverStore) trip(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.State() != BreakerClosed {
		return
	}
	f.openedAt = f.cfg.Now()
	f.goodProbes = 0
	f.setState(BreakerOpen)
	f.logger.Error("limit store unavailable; deciding from the local fallback",
		"cause", cause, "budget", f.cfg.Budget, "fleet_size", f.cfg.FleetSize)
	if f.events.OnStateChange != nil {
		f.events.OnStateChange(false, f.openedAt, cause)
	}
}

// setState stores s and tells the hook; f.mu is held.
func (f *FailoverStore) setState(s BreakerState) {
	f.state.Store(int32(s))
	if f.events.OnBreakerState != nil {
		f.events.OnBreakerState(s)
	}
}

// probeLoop pings the primary every ProbeInterval until Close.
func (f *FailoverStore) probeLoop() {
	defer close(f.probeDone)
	t := time.NewTimer(f.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-f.stopped.Done():
			return
		case <-t.C:
			f.probe()
			t.Reset(f.cfg.ProbeInterval)
		}
	}
}

// probe pings the primary once within the budget. While closed, a failed
// probe counts like a failed call (so an idle instance notices an outage)
// and a good one changes nothing (a probe that works does not prove that
// every decision does). While open, RecoverAfter good probes in a row close the
// breaker and any failure starts the count again.
func (f *FailoverStore) probe() {
	sent := f.cfg.Now()
	ctx, cancel := context.WithTimeout(f.stopped, f.cfg.Budget)
	err := f.primary.Ping(ctx)
	cancel()
	if f.stopped.Err() != nil {
		return
	}
	if err != nil {
		f.primaryError(err)
	}
	if f.State() == BreakerClosed {
		if err == nil {
			f.probeOK.Store(f.failSeq.Load())
		}
		f.countFailure(err)
		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	switch st := f.State(); {
	case st == BreakerClosed:
		return
	case err != nil:
		f.goodProbes = 0
		f.lastDownProbe = sent
		if st == BreakerHalfOpen {
			f.setState(BreakerOpen)
		}
	default:
		f.goodProbes++
		if f.goodProbes == 1 {
			// The primary came back after the last probe that failed was
			// sent (or after the breaker opened): its earliest possible
			// return, so an alert held "until up for 10 s" goes out at
			// most 10 s after it returned.
			f.upSince = f.openedAt
			if f.lastDownProbe.After(f.upSince) {
				f.upSince = f.lastDownProbe
			}
		}
		if f.goodProbes < f.cfg.RecoverAfter {
			if st == BreakerOpen {
				f.setState(BreakerHalfOpen)
			}
			return
		}
		f.failures.Store(0)
		f.setState(BreakerClosed)
		now := f.cfg.Now()
		// At ERROR like the outage's line: the contract logs each
		// transition at ERROR, so a log-based alert sees both ends.
		f.logger.Error("limit store recovered; deciding from it again",
			"down_for", now.Sub(f.openedAt).Round(time.Millisecond))
		if f.events.OnStateChange != nil {
			f.events.OnStateChange(true, f.upSince, nil)
		}
	}
}
