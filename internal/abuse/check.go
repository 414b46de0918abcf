package abuse

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// storeUnavailableRetry is the retry_after of a store_unavailable denial.
const storeUnavailableRetry = time.Second

// Check decides one attempt and records its audit event.
//
// Errors: an *InputError for an unknown action (code unknown_action, field
// "action"), an invalid or missing identifier (field "user", "ip",
// "device", or none when all three are absent) or a cost outside 1..the
// smallest attempt-rule limit of the action (field "cost"); otherwise only
// a wrapped store error (limits.ErrUnavailable when a store without
// failover cannot be reached), in which case nothing is audited.
func (g *Guard) Check(ctx context.Context, in CheckInput) (Decision, error) {
	a, err := g.action(in.Action)
	if err != nil {
		return Decision{}, err
	}
	id, err := g.subject(in.Subject)
	if err != nil {
		return Decision{}, err
	}
	cost := in.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 1 {
		return Decision{}, &InputError{Code: CodeInvalidRequest, Field: "cost", Message: "cost must be at least 1"}
	}
	// Bounded by the smallest limit cost applies to; an action without
	// such a rule (distinct rules or failures only) bounds it by a log
	// rule's largest limit.
	maxCost := a.minLimit
	if maxCost == 0 {
		maxCost = MaxRuleLimit
	}
	if cost > maxCost {
		return Decision{}, &InputError{Code: CodeInvalidRequest, Field: "cost",
			Message: fmt.Sprintf("cost %d outside 1..%d (the smallest limit of action %s)", in.Cost, maxCost, a.name)}
	}

	d := Decision{Action: a.name, DryRun: in.DryRun, Limits: []LimitState{}}
	start := g.nowMs()
	d.ID = newID(start)
	switch {
	case g.deny.matches(&id):
		d.At, d.Reason = start, ReasonDenylisted
		g.recordCheck(&d, &id, in.APIKey, "", nil)
		return d, nil
	case g.allow.matches(&id):
		d.At, d.Allowed, d.Reason = start, true, ReasonAllowlisted
		g.recordCheck(&d, &id, in.APIKey, "", nil)
		return d, nil
	}

	req := limits.CheckRequest{Cost: cost, DryRun: in.DryRun, Nonce: d.ID, OnFailure: a.onFailure,
		Rules: make([]limits.Rule, 0, len(a.limits))}
	// evaluated maps request rules back to the action's rules.
	var evaluated [8]*compiledRule
	rules := evaluated[:0]
	for i := range a.limits {
		r := &a.limits[i]
		if !r.applies(&id) {
			continue
		}
		rules = append(rules, r)
		req.Rules = append(req.Rules, limits.Rule{
			Key: g.keys.key(r.kind, &id, r.dim), Limit: r.Limit, Window: r.Window, Keep: r.keep, Shadow: r.Shadow || a.shadow,
			Algorithm: r.alg, Distinct: g.distinctValue(r, &id),
			Challenge: r.challenge, Passed: r.challenge && in.ChallengePassed,
		})
	}
	req.Locks = g.lockRefs(a.ledger, &id)
	if len(req.Rules) == 0 && len(req.Locks) == 0 {
		// Nothing applies: no store round trip for an answer that is
		// always "ok".
		d.At, d.Allowed, d.Reason = start, true, ReasonOK
		g.recordCheck(&d, &id, in.APIKey, "", nil)
		return d, nil
	}
	if id.hasUser && id.hasDevice && sparesTrusted(req.Locks) {
		req.TrustKey = g.keys.trustKey(&id)
	}
	if a.countDeny || a.reserve && !in.DryRun {
		if esc := g.escalation(a, &id); len(esc.Failures) > 0 {
			if a.countDeny {
				req.DenialFailures = &esc
			}
			if a.reserve && !in.DryRun {
				// Every failure rule takes the provisional failure: a
				// distinct one into its pending set (compile gives each
				// of a reserve_failures action one).
				req.Reserve = &limits.Reservation{Escalation: esc, Records: g.recordKeys(a, &id, d.ID), TTL: a.failTTL}
			}
		}
	}

	res, err := g.store.Check(ctx, &req)
	if err != nil {
		return Decision{}, fmt.Errorf("check %s: %w", a.name, err)
	}
	d.At = res.Now.UTC().Truncate(time.Millisecond)
	if res.Now.IsZero() {
		d.At = start
	}
	d.Degraded = res.Degraded || res.Unavailable
	if n := min(len(res.Rules), len(rules)); n > 0 {
		d.Limits = make([]LimitState, 0, n) // one allocation, not one per growth
	}
	for i, rr := range res.Rules {
		if i >= len(rules) {
			break
		}
		r := rules[i]
		reset := rr.Reset
		if !rr.Allowed && (r.Algorithm == AlgCounter || r.Algorithm == AlgBucket) {
			// A counter's reset is when its counts weigh nothing, a
			// bucket's when it is full: long after the attempt fits. A rule
			// that denies answers when it admits the attempt, so that
			// Retry-After (its exact retry_after_ms rounded up) is never
			// earlier than its t (API.md asks both).
			reset = rr.RetryAfter
		}
		limit := r.Limit
		if rr.Limit > 0 {
			limit = rr.Limit // the fallback's share (store.fleet_size)
		}
		d.Limits = append(d.Limits, LimitState{
			Rule: r.Name, Dimension: r.Dimension, Limit: limit, Window: r.Window,
			Remaining: rr.Remaining, Reset: reset, Shadow: r.Shadow || a.shadow,
			Algorithm: r.Algorithm, Distinct: r.Distinct,
		})
	}
	var lockUntil *time.Time
	switch {
	case res.Unavailable:
		d.Reason = ReasonStoreUnavailable
		d.Allowed = a.onFailure != limits.FailDeny
		if !d.Allowed {
			d.RetryAfter = storeUnavailableRetry
		}
	case res.Locked != nil && a.shadow:
		// A shadow action reports what it would have done.
		d.Allowed, d.Reason = true, ReasonShadow
	case res.Locked != nil:
		d.Reason = ReasonLockedOut
		d.Lockout = g.lockoutInfo(res.Locked)
		// The attempt goes ahead once the lockout has ended and every
		// enforced rule admits it: the later of the two. Denied attempts
		// are not logged, so a rule that is full now frees up on its own
		// schedule, lockout or not.
		d.RetryAfter = max(res.Locked.Until.Sub(res.Now), rulesRetryAfter(req.Rules, res.Rules), time.Millisecond)
		lockUntil = &res.Locked.Until
	case res.Challenge:
		// Only challenge rules stand in the way. retry_after_ms is when
		// they would admit the attempt without a challenge, exact as for a
		// rate limit: the caller may wait instead of challenging.
		d.Challenge, d.Reason = true, ReasonChallenge
		d.RetryAfter = rulesRetryAfter(req.Rules, res.Rules)
		// The contract names the challenging rules with remaining 0, even
		// when a cost above 1 is what does not fit in what is left.
		for i, rr := range res.Rules {
			if i < len(d.Limits) && !rr.Allowed && req.Rules[i].Challenge && !req.Rules[i].Shadow {
				d.Limits[i].Remaining = 0
			}
		}
	case !res.Allowed:
		d.Reason = ReasonRateLimited
		d.RetryAfter = rulesRetryAfter(req.Rules, res.Rules)
		// A denial that struck (count_denials) answers rate_limited, but
		// the same attempt is allowed again only once the lockout it
		// started has ended: retry_after_ms is the earliest moment the
		// attempt would be allowed. A lockout that spares this request's
		// trusted device (res.Trusted) does not stand in its way.
		for _, st := range res.Struck {
			if res.Trusted && sparedIfTrusted(req.Locks, st.Key) {
				continue
			}
			d.RetryAfter = max(d.RetryAfter, st.Until.Sub(res.Now))
		}
	default:
		d.Allowed, d.Reason = true, ReasonOK
		for _, rr := range res.Rules {
			if !rr.Allowed {
				d.Reason = ReasonShadow
				break
			}
		}
	}
	if len(res.Struck) > 0 {
		g.strikes.remember(res.Struck, &id)
		g.notifyStrikes(a, &id, res.Struck, d.At)
		last := latest(res.Struck, nil)
		lockUntil = &last.Until
	}
	sortLimits(d.Limits)
	rule := ""
	if len(d.Limits) > 0 {
		rule = d.Limits[0].Rule
	}
	g.recordCheck(&d, &id, in.APIKey, rule, lockUntil)
	return d, nil
}

// rulesRetryAfter is how long until every enforced rule admits the
// attempt: the longest RetryAfter of the enforced rules that deny it, 0
// when they all admit it.
func rulesRetryAfter(rules []limits.Rule, results []limits.RuleResult) time.Duration {
	var d time.Duration
	for i, rr := range results {
		if i < len(rules) && !rules[i].Shadow && !rr.Allowed {
			d = max(d, rr.RetryAfter)
		}
	}
	return d
}

// sparedIfTrusted reports whether lock key spares a trusted device.
func sparedIfTrusted(locks []limits.LockRef, key string) bool {
	for _, l := range locks {
		if l.Key == key {
			return l.SpareIfTrusted
		}
	}
	return false
}

// sparesTrusted reports whether any lock honours a trusted device; only
// then is the trust record worth a hash and a lookup.
func sparesTrusted(locks []limits.LockRef) bool {
	for _, l := range locks {
		if l.SpareIfTrusted {
			return true
		}
	}
	return false
}

// sortLimits orders the rules most restrictive first: least remaining,
// then latest reset; ties keep config order.
func sortLimits(ls []LimitState) {
	slices.SortStableFunc(ls, func(a, b LimitState) int {
		if a.Remaining != b.Remaining {
			return a.Remaining - b.Remaining
		}
		switch {
		case a.Reset > b.Reset:
			return -1
		case a.Reset < b.Reset:
			return 1
		}
		return 0
	})
}

// latest returns the lock state that ends last among states and extra.
func latest(states []limits.LockState, extra *limits.LockState) *limits.LockState {
	best := extra
	for i := range states {
		if best == nil || states[i].Until.After(best.Until) {
			best = &states[i]
		}
	}
	return best
}

func (g *Guard) recordCheck(d *Decision, id *identity, apiKey, rule string, lockUntil *time.Time) {
	decision := d.Verdict()
	e := audit.Event{
		ID:           d.ID,
		At:           d.At,
		Kind:         audit.KindCheck,
		Action:       d.Action,
		Decision:     decision,
		Reason:       d.Reason,
		Rule:         rule,
		RetryAfterMs: ptr(ceilMs(d.RetryAfter)),
		Degraded:     ptr(d.Degraded),
		DryRun:       ptr(d.DryRun),
		APIKey:       apiKey,
		DecisionID:   d.ID,
		Instance:     g.cfg.Instance,
	}
	if lockUntil != nil {
		e.LockoutUntil = ptr(lockUntil.UTC())
	}
	g.auditIdentifiers(&e, id)
	g.rec.Record(e)
}

// ceilMs is a duration in whole milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// newID returns a ULID stamped with t. The library's default entropy is a
// mutex-guarded monotonic reader, so ids of one millisecond stay unique and
// ordered.
func newID(t time.Time) string {
	id, err := ulid.New(ulid.Timestamp(t), ulid.DefaultEntropy())
	if err != nil {
		// Only a monotonic overflow (2^80 ids in one millisecond) or a
		// time past 10889 AD gets here; a fresh random id is still unique.
		return ulid.Make().String()
	}
	return id.String()
}
