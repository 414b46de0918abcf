package abuse

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// Report outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
)

// Report records how an attempt ended and its audit event.
//
// A failure adds one entry to each of the action's failure rules whose
// dimension the request names; a rule that fills strikes its lock in the
// action's ledger. A success deletes the user+ip and user+device failure
// logs of that user with that IP or device, for every action of the ledger
// (never the user, ip or device logs, so no success erases evidence of an
// attack from elsewhere), and trusts the device for the user for TrustTTL.
// The outcome names the lockout the report struck or met (the one ending
// last), or nil.
//
// Errors: *InputError for an unknown action, a bad identifier, no
// identifier, an outcome other than "success" or "failure" (field
// "outcome"), or a decision_id that is not at most MaxDecisionIDLen bytes
// of [A-Za-z0-9_-] (field "decision_id"; "" is none); else a wrapped store error, with nothing audited.
func (g *Guard) Report(ctx context.Context, in ReportInput) (ReportOutcome, error) {
	a, err := g.action(in.Action)
	if err != nil {
		return ReportOutcome{}, err
	}
	if in.Outcome != OutcomeSuccess && in.Outcome != OutcomeFailure {
		return ReportOutcome{}, &InputError{Code: CodeInvalidRequest, Field: "outcome",
			Message: fmt.Sprintf(`outcome must be "success" or "failure", not %q`, in.Outcome)}
	}
	if in.DecisionID != "" && !validDecisionID(in.DecisionID) {
		return ReportOutcome{}, &InputError{Code: CodeInvalidRequest, Field: "decision_id",
			Message: fmt.Sprintf("decision_id must be at most %d bytes of letters, digits, _ and -", MaxDecisionIDLen)}
	}
	id, err := g.subject(in.Subject)
	if err != nil {
		return ReportOutcome{}, err
	}
	start := g.nowMs()
	eventID := newID(start)
	req := limits.ReportRequest{
		Failure:   in.Outcome == OutcomeFailure,
		Locks:     g.lockRefs(a.ledger, &id),
		Nonce:     eventID,
		OnFailure: a.onFailure,
	}
	if id.hasUser && id.hasDevice {
		req.TrustKey = g.keys.trustKey(&id)
	}
	if req.Failure || a.reserve && in.DecisionID != "" {
		req.Escalation = g.escalation(a, &id)
	}
	if a.reserve && in.DecisionID != "" {
		// Settles the check's reservation, if Guard made one; a success
		// takes its provisional failures back before clearing.
		req.Records = g.recordKeys(a, &id, in.DecisionID)
	}
	if !req.Failure {
		req.Clear = g.clearKeys(a.ledger, &id)
		if req.TrustKey != "" {
			req.TrustTTL = g.cfg.TrustTTL
		}
	}
	res, err := g.store.Report(ctx, &req)
	if err != nil {
		return ReportOutcome{}, fmt.Errorf("report %s: %w", a.name, err)
	}
	out := ReportOutcome{Degraded: res.Degraded || res.Unavailable}
	if st := latest(res.Struck, res.Locked); st != nil {
		out.Lockout = g.lockoutInfo(st)
	}
	e := audit.Event{
		ID:         eventID,
		At:         res.Now.UTC().Truncate(time.Millisecond),
		Kind:       audit.KindReport,
		Action:     a.name,
		Outcome:    in.Outcome,
		Degraded:   ptr(out.Degraded),
		APIKey:     in.APIKey,
		DecisionID: in.DecisionID,
		Instance:   g.cfg.Instance,
	}
	if res.Now.IsZero() {
		e.At = start
	}
	if len(res.Struck) > 0 {
		g.strikes.remember(res.Struck, &id)
		g.notifyStrikes(a, &id, res.Struck, e.At)
		// The latest end among the keys struck, each the later of its
		// strike and a manual lockout of the same key (the store's Until).
		var until time.Time
		for i := range res.Struck {
			if u := res.Struck[i].Until; u.After(until) {
				until = u
			}
		}
		e.LockoutUntil = ptr(until.UTC())
	}
	g.auditIdentifiers(&e, &id)
	g.rec.Record(e)
	return out, nil
}

// recordKeys are the reservation record keys of decisionID for the
// request's identifiers: one per hash tag of the action's failure logs
// that apply, "<prefix>{<tag>}r:<action>:<decision_id>", so each lies in
// the slot of the logs it remembers (decision ids are [A-Za-z0-9_-], action
// names hold no ':'). The action is part of the key: a report to another
// action that carries this decision_id is a v1 report of that action and
// must not settle (and so use up) this action's reservation.
func (g *Guard) recordKeys(a *compiledAction, id *identity, decisionID string) []string {
	var keys []string
	for _, r := range a.failures {
		if !id.has(r.dim) {
			continue
		}
		k := g.keys.prefix + "{" + g.keys.hash(id, tagDim(r.dim)) + "}r:" + a.name + ":" + decisionID
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// clearKeys are the failure logs a success deletes: the user+ip and
// user+device logs of every action sharing the ledger, for this user with
// this IP or device.
func (g *Guard) clearKeys(led *compiledLedger, id *identity) []string {
	var keys []string
	for _, r := range led.failures {
		if (r.dim == dimUserIP || r.dim == dimUserDevice) && id.has(r.dim) {
			keys = append(keys, g.keys.key(r.kind, id, r.dim))
			if r.pendKind != "" {
				keys = append(keys, g.keys.key(r.pendKind, id, r.dim))
			}
		}
	}
	return keys
}
