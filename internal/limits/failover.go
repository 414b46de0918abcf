package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultAdminTimeout bounds an admin call on the primary (a lockout
// listing, a manual lock, an unlock) unless FailoverConfig.AdminTimeout
// says otherwise; NewRedisClient's socket timeouts leave it whole.
const DefaultAdminTimeout = 2 * time.Second

// FailoverConfig configures NewFailover. Zero (or negative) fields get the
// defaults stated on each field.
type FailoverConfig struct {
	// Budget bounds every call to the primary store, probes included
	// (default 50ms). A call that has not answered within Budget is answered
	// from the fallback instead and counts as a failure.
	Budget time.Duration
	// AdminTimeout bounds a lockout listing, a manual lock or an unlock on
	// the primary (default DefaultAdminTimeout): admin calls, not
	// decisions.
	AdminTimeout time.Duration
	// FailureThreshold is the number of consecutive primary failures or
	// timeouts that open the breaker (default 3).
	FailureThreshold int
	// ProbeInterval is the pause between background probes of the primary
	// (Store.Ping; on Redis an empty check through the function library;
	// default 500ms). While the breaker is closed a failing probe counts
	// as a failure, so an idle instance still notices an outage; while it
	// is open, probes decide when to return to the primary.
	ProbeInterval time.Duration
	// RecoverAfter is the number of consecutive good probes that close an
	// open breaker (default 2).
	RecoverAfter int
	// FleetSize is the number of Guard instances sharing the primary
	// (default 1). While degraded every limit, attempt and failure rules
	// alike, is divided by it (rounded up, at least 1), so the fleet's
	// local fallbacks together admit about what the primary would.
	FleetSize int
	// Now is the clock used for transition times (default time.Now).
	Now func() time.Time
}

// FailoverEvents are optional hooks through which the owner of a
// FailoverStore wires alerts and metrics. Hooks run synchronously on the
// goroutine that caused the event, transitions serialised in order, so they
// must be quick and must not block (hand slow work to a queue).
type FailoverEvents struct {
	// OnStateChange is called once per transition: up=false when the
	// breaker opens (since is the moment it opened, cause the error that
	// tripped it), up=true when it closes again (since is when the primary
	// answered again at the earliest: when the last probe that failed was
	// sent, or the breaker opened; cause nil).
	OnStateChange func(up bool, since time.Time, cause error)
	// OnBreakerState is called with every new breaker state.
	OnBreakerState func(state BreakerState)
	// OnPrimaryError is called for every failed or timed-out call or probe
	// of the primary (calls cancelled by their caller excluded).
	OnPrimaryError func(err error)
}

// FailoverStore is a Store that answers from a primary (Redis) within a
// per-call budget and from a local fallback (memory) when the primary fails,
// times out or is known to be down. It never returns the primary's errors
// to its caller: a failed call is answered from the fallback (or, per
// request, allowed or denied with Unavailable set) and marked Degraded.
//
// The fallback's state is its own: limits, failure logs, lockouts and
// trusted devices recorded while degraded live in this instance only and are
// not copied to the primary when it returns.
type FailoverStore struct {
	logger   *slog.Logger
	cfg      FailoverConfig
	primary  Store
	fallback Store
	events   FailoverEvents

	state    atomic.Int32 // a BreakerState
	failures atomic.Int64 // consecutive primary failures while closed
	// failSeq counts the failures countFailure counted; probeOK is its
	// value at the last good probe while closed (Unreachable).
	failSeq atomic.Int64
	probeOK atomic.Int64

	mu         sync.Mutex // serialises transitions and their hooks
	goodProbes int
	openedAt   time.Time
	upSince    time.Time // the earliest the primary can have come back (see OnStateChange)
	// lastDownProbe is when the last probe that failed while open was sent.
	lastDownProbe time.Time

	// mirrored holds, by key, the end of each manual lock that Lock set on
	// the primary and copied into the fallback: while degraded, Unlock
	// lifts none of them (see Unlock). Entries go when their lock ends or
	// an unlock on the primary lifts it.
	mirMu    sync.Mutex
	mirrored map[string]time.Time

	stop      context.CancelFunc
	stopped   context.Context
	probeDone chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// NewFailover wraps primary with a breaker and fallback and starts the
// background prober; Close stops it and closes both stores. The breaker
// starts closed (the primary is presumed up until calls or probes fail).
func NewFailover(logger *slog.Logger, cfg FailoverConfig, primary Store, fallback Store, events FailoverEvents) *FailoverStore {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AdminTimeout <= 0 {
		cfg.AdminTimeout = DefaultAdminTimeout
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 3
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 500 * time.Millisecond
	}
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 2
	}
	if cfg.FleetSize <= 0 {
		cfg.FleetSize = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &FailoverStore{
		logger:    logger,
		cfg:       cfg,
		primary:   primary,
		fallback:  fallback,
		events:    events,
		stop:      cancel,
		stopped:   ctx,
		probeDone: make(chan struct{}),
	}
	go f.probeLoop()
	return f
}

// Degraded reports whether the breaker is open or half-open, that is
// whether decisions currently come from the local fallback.
func (f *FailoverStore) Degraded() bool {
	return f.State() != BreakerClosed
}

// Unreachable reports whether the primary looks unreachable now: the
// breaker is not closed, or the last primary call failed for
// unavailability and no probe has answered since (a run of failures still
// below the threshold, whose decisions the fallback answers already).
// /readyz says degraded while it holds, so it never says normal while
// decisions come back degraded.
func (f *FailoverStore) Unreachable() bool {
	return f.Degraded() || f.failures.Load() > 0 && f.failSeq.Load() > f.probeOK.Load()
}

// State returns the breaker's current state.
func (f *FailoverStore) State() BreakerState {
	return BreakerState(f.state.Load())
}

// Check decides one attempt on the primary within the budget, or on the
// fallback (limits divided by FleetSize) when the primary is down, failing
// or slow; see FailoverStore. Per request, OnFailure FailAllow/FailDeny
// answer Allowed true/false with Unavailable and Degraded set and empty
// Rules instead of consulting the fallback. The only errors are the
// caller's context ending and an invalid request (one every store
// rejects, also under FailAllow and FailDeny).
func (f *FailoverStore) Check(ctx context.Context, req *CheckRequest) (CheckResult, error) {
	if !f.Degraded() {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.Budget)
		res, err := f.primary.Check(pctx, req)
		cancel()
		if err == nil {
			f.succeeded()
			return res, nil
		}
		if ctx.Err() != nil {
			return CheckResult{}, fmt.Errorf("check: %w", ctx.Err())
		}
		f.primaryError(err)
		return f.checkDegraded(ctx, req, err)
	}
	return f.checkDegraded(ctx, req, nil)
}

// checkDegraded answers req without the primary. A non-nil cause is the
// primary failure that sent the call here; it counts toward the breaker
// only once the fallback has accepted the request, so a request that every
// store rejects (a caller bug) cannot open the breaker.
func (f *FailoverStore) checkDegraded(ctx context.Context, req *CheckRequest, cause error) (CheckResult, error) {
	if req.OnFailure == FailAllow || req.OnFailure == FailDeny {
		// No store is consulted, so validate here what every store would
		// reject: a caller bug is an error, not an answer or a failure.
		if err := validateCheck(req); err != nil {
			return CheckResult{}, fmt.Errorf("check: %w", err)
		}
		f.countFailure(cause)
		return CheckResult{
			Now:         f.cfg.Now(),
			Allowed:     req.OnFailure == FailAllow,
			Degraded:    true,
			Unavailable: true,
		}, nil
	}
	shared := f.shareCheck(req)
	res, err := f.fallback.Check(context.WithoutCancel(ctx), shared)
	if err != nil {
		return CheckResult{}, fmt.Errorf("fallback check: %w", err)
	}
	f.countFailure(cause)
	res.Degraded = true
	if shared != req {
		// The answer names the limits it enforced (this instance's
		// share), so that remaining and limit agree.
		for i := range res.Rules {
			if i < len(shared.Rules) {
				res.Rules[i].Limit = shared.Rules[i].Limit
			}
		}
	}
	return res, nil
}

// Report records an outcome on the primary within the budget, or on the
// fallback (failure limits divided by FleetSize); OnFailure FailAllow and
// FailDeny record nothing and answer with Unavailable and Degraded set.
// Errors as for Check.
func (f *FailoverStore) Report(ctx context.Context, req *ReportRequest) (ReportResult, error) {
	if !f.Degraded() {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.Budget)
		res, err := f.primary.Report(pctx, req)
		cancel()
		if err == nil {
			f.succeeded()
			return res, nil
		}
		if ctx.Err() != nil {
			return ReportResult{}, fmt.Errorf("report: %w", ctx.Err())
		}
		f.primaryError(err)
		return f.reportDegraded(ctx, req, err)
	}
	return f.reportDegraded(ctx, req, nil)
}

func (f *FailoverStore) reportDegraded(ctx context.Context, req *ReportRequest, cause error) (ReportResult, error) {
	if req.OnFailure == FailAllow || req.OnFailure == FailDeny {
		if err := validateReport(req); err != nil {
			return ReportResult{}, fmt.Errorf("report: %w", err)
		}
		f.countFailure(cause)
		return ReportResult{Now: f.cfg.Now(), Degraded: true, Unavailable: true}, nil
	}
	res, err := f.fallback.Report(context.WithoutCancel(ctx), f.shareReport(req))
	if err != nil {
		return ReportResult{}, fmt.Errorf("fallback report: %w", err)
	}
	f.countFailure(cause)
	res.Degraded = true
	return res, nil
}

// Unlock lifts locks on the primary and always on this instance's fallback
// too, so a lockout recorded locally during an earlier outage cannot return
// in the next one. While the breaker is closed it answers the primary's
// result, within AdminTimeout like the other admin calls, and a primary
// that fails is an error (wrapping ErrUnavailable when it could not be
// reached): the lock may still hold on the primary, so answering the
// fallback's "not found" would be false; the fallback's copies of manual
// locks set through the primary are then kept (they hold on the primary
// and must go on denying here if an outage is starting), the rest of the
// fallback is lifted. Like every admin call it never
// moves the breaker. While the breaker is open it answers the fallback's
// result (other instances' fallbacks are not reached), unless req names a
// manual lock that Lock set on the primary and copied here: then it lifts
// nothing and fails with ErrUnavailable, since that lock still holds on the
// primary and returns with it, and "unlocked" would be false (a lock struck
// by this fallback during the outage exists here only, and is lifted).
func (f *FailoverStore) Unlock(ctx context.Context, req *UnlockRequest) (bool, error) {
	if f.Degraded() && f.mirrorHolds(req.Locks) {
		return false, fmt.Errorf("unlock: %w: a manual lockout set through the primary store, which is down: unlock again when it is back", ErrUnavailable)
	}
	if !f.Degraded() {
		// The fallback's copies of manual locks are lifted only once the
		// primary has lifted them: an unlock the primary fails (a Redis
		// that stopped answering, the breaker still closed) must leave
		// them denying through the outage it may be the start of.
		local := req
		if mirrored := f.mirroredOf(req.Locks); len(mirrored) > 0 {
			local = &UnlockRequest{Locks: without(req.Locks, mirrored), Failures: req.Failures}
		}
		_, localErr := f.fallback.Unlock(context.WithoutCancel(ctx), local)
		pctx, cancel := context.WithTimeout(ctx, f.cfg.AdminTimeout)
		active, err := f.primary.Unlock(pctx, req)
		cancel()
		if err != nil {
			f.primaryError(err)
			return false, fmt.Errorf("unlock: %w", err)
		}
		if local != req {
			_, localErr = f.fallback.Unlock(context.WithoutCancel(ctx), &UnlockRequest{Locks: f.mirroredOf(req.Locks)})
		}
		f.forgetMirrored(req.Locks)
		if localErr != nil {
			f.logger.Warn("fallback unlock failed", "err", localErr)
		}
		return active, nil
	}
	localActive, localErr := f.fallback.Unlock(context.WithoutCancel(ctx), req)
	if localErr != nil {
		return false, fmt.Errorf("fallback unlock: %w", localErr)
	}
	return localActive, nil
}

// Lockouts lists a page of the primary's lockouts, within AdminTimeout
// rather than the decision budget, and neither moves the breaker nor
// falls back while the primary answers: an admin read never answers from
// the fallback while Redis is up, also while the breaker is open because
// decisions met a slow Redis. Only when the breaker is open and the
// primary fails too does it list this instance's fallback lockouts; with
// the breaker closed a failed listing is an error. Its cursors say which
// store issued them ("p" or "f" first): a page of the primary continues
// on the primary only (ErrBadCursor when the primary fails it with the
// breaker open: the listing is the fallback's now), a page of the
// fallback only while the breaker is open (else ErrBadCursor, whatever
// the filter). A primary whose connection failed under the listing is
// asked once more within the allowance before the listing fails; one that
// refuses connections is not.
func (f *FailoverStore) Lockouts(ctx context.Context, q *LockQuery) (LockPage, error) {
	from := ""
	if q.Cursor != "" {
		from = q.Cursor[:1]
		if from != "p" && from != "f" || from == "f" && !f.Degraded() {
			return LockPage{}, fmt.Errorf("lockouts: cursor of the other store's listing: %w", ErrBadCursor)
		}
		inner := *q
		inner.Cursor = q.Cursor[1:]
		q = &inner
	}
	var page LockPage
	var err error
	mark := "p"
	if from != "f" {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.AdminTimeout)
		page, err = f.primary.Lockouts(pctx, q)
		if err != nil && errors.Is(err, ErrUnavailable) && !errors.Is(err, syscall.ECONNREFUSED) && pctx.Err() == nil {
			// A read, so it may run again: once, within the same
			// allowance, for a connection that the server closed under
			// it (a Sentinel failover, a restart). A hung server has
			// spent the allowance already, and one that refuses
			// connections would only refuse them again.
			page, err = f.primary.Lockouts(pctx, q)
		}
		cancel()
		if err != nil && (!f.Degraded() || ctx.Err() != nil) {
			return LockPage{}, fmt.Errorf("lockouts: %w", err)
		}
		if err != nil && from == "p" {
			// Redis went down between the pages: the listing is now the
			// fallback's, which this cursor is not of.
			return LockPage{}, fmt.Errorf("lockouts: cursor of the other store's listing (%v): %w", err, ErrBadCursor)
		}
	}
	if from == "f" || err != nil {
		mark = "f"
		if page, err = f.fallback.Lockouts(context.WithoutCancel(ctx), q); err != nil {
			return LockPage{}, fmt.Errorf("fallback lockouts: %w", err)
		}
	}
	if page.Next != "" {
		page.Next = mark + page.Next
	}
	return page, nil
}

// Ping reports whether this store can decide: nil when the primary answers
// within the budget or, failing that, the fallback answers. While degraded
// it asks the fallback only, so a readiness probe never waits on a dead
// primary. It does not move the breaker; use Degraded for the primary's
// health.
func (f *FailoverStore) Ping(ctx context.Context) error {
	if f.Degraded() {
		if err := f.fallback.Ping(ctx); err != nil {
			return fmt.Errorf("fallback ping: %w", err)
		}
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, f.cfg.Budget)
	perr := f.primary.Ping(pctx)
	cancel()
	if perr == nil {
		return nil
	}
	if err := f.fallback.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", errors.Join(perr, err))
	}
	return nil
}

// Close stops the prober and closes both stores; it is safe to call more
// than once and returns the stores' errors joined.
func (f *FailoverStore) Close() error {
	f.closeOnce.Do(func() {
		f.stop()
		<-f.probeDone
		f.closeErr = errors.Join(f.primary.Close(), f.fallback.Close())
	})
	return f.closeErr
}

// shareCheck returns req with this instance's share of every limit, leaving
// the caller's request untouched. Cost is capped at the smallest shared
// limit so an attempt that fits the fleet-wide limit can still fit locally.
func (f *FailoverStore) shareCheck(req *CheckRequest) *CheckRequest {
	if f.cfg.FleetSize == 1 {
		return req
	}
	c := *req
	c.Rules = make([]Rule, len(req.Rules))
	smallest := 0
	for i, r := range req.Rules {
		r.Limit = f.share(r.Limit)
		c.Rules[i] = r
		if r.Distinct == "" && (smallest == 0 || r.Limit < smallest) {
			smallest = r.Limit
		}
	}
	if smallest > 0 && c.Cost > smallest {
		c.Cost = smallest
	}
	if req.DenialFailures != nil {
		e := f.shareEscalation(*req.DenialFailures)
		c.DenialFailures = &e
	}
	if req.Reserve != nil {
		r := *req.Reserve
		r.Escalation = f.shareEscalation(r.Escalation)
		c.Reserve = &r
	}
	return &c
}

func (f *FailoverStore) shareReport(req *ReportRequest) *ReportRequest {
	if f.cfg.FleetSize == 1 {
		return req
	}
	c := *req
	c.Escalation = f.shareEscalation(req.Escalation)
	return &c
}

func (f *FailoverStore) shareEscalation(e Escalation) Escalation {
	failures := make([]FailureRule, len(e.Failures))
	for i, r := range e.Failures {
		r.Limit = f.share(r.Limit)
		failures[i] = r
	}
	e.Failures = failures
	return e
}

// share is ceil(limit/FleetSize), at least 1.
func (f *FailoverStore) share(limit int) int {
	n := (limit + f.cfg.FleetSize - 1) / f.cfg.FleetSize
	return max(n, 1)
}
