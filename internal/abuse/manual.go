package abuse

import (
	"context"
	"fmt"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

// ActionLock and ActionUnlock are the actions of admin audit events.
const (
	ActionLock   = "lock"
	ActionUnlock = "unlock"
)

// Lock sets a manual lockout: the dimension's key is locked for
// in.Duration in the given ledger, or in every ledger of an action with a
// lockout ladder. It is not a strike: the level stays; a strike during it
// raises the level as usual and the key stays locked until the later of the
// two ends. A second manual lock of the key replaces the first; Unlock
// lifts it. It answers one entry per ledger (level: the key's current
// strike level, 0 without strikes; until: the later end), records an
// admin event (action "lock", note the reason, lockout_until the end) and
// sends a lockout notification per ledger (Config.Notifier).
//
// Errors: *InputError for a missing or unknown dimension ("dimension"), a
// missing or bad identifier the dimension needs ("user", "ip", "device"),
// an unknown ledger ("ledger"), a duration outside 1s..30 days
// ("duration_ms"), or no ledger with a ladder; else a wrapped store error.
func (g *Guard) Lock(ctx context.Context, in LockInput) ([]ActiveLockout, error) {
	d, id, err := g.adminTarget(in.Dimension, in.Subject, "lock")
	if err != nil {
		return nil, err
	}
	if in.Duration < MinManualLock || in.Duration > MaxManualLock {
		return nil, &InputError{Code: CodeInvalidRequest, Field: "duration_ms",
			Message: "duration_ms must be from 1000 (1s) to 2592000000 (30 days)"}
	}
	var ledgers []string
	if in.Ledger != "" {
		if g.ledgers[in.Ledger] == nil {
			return nil, &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", in.Ledger)}
		}
		ledgers = []string{in.Ledger}
	} else {
		for _, name := range g.names {
			if g.ledgers[name].hasLadder {
				ledgers = append(ledgers, name)
			}
		}
		if len(ledgers) == 0 {
			return nil, &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: "no action has a lockout ladder"}
		}
	}
	indexes := g.keys.lockIndexes(&id, d)
	req := limits.LockRequest{Duration: in.Duration}
	for _, name := range ledgers {
		led := g.ledgers[name]
		req.Locks = append(req.Locks, limits.ManualLock{
			Key:       g.keys.key(led.manualKind[d], &id, d),
			StrikeKey: g.keys.key(led.lockKind[d], &id, d),
			Indexes:   indexes,
			Info:      g.keys.lockInfo(name, d, &id),
		})
	}
	states, err := g.store.Lock(ctx, &req)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", in.Dimension, err)
	}
	g.strikes.remember(states, &id)
	out := make([]ActiveLockout, 0, len(states))
	for i, st := range states {
		al := ActiveLockout{Ledger: ledgers[i], Dimension: d.String(), Level: st.Level, Since: st.Since, Until: st.Until,
			Manual: true}
		namesOf(&id).fill(&al, d)
		out = append(out, al)
	}
	end := out[0].Until
	for _, al := range out {
		if al.Until.After(end) {
			end = al.Until
		}
	}
	now := g.nowMs()
	e := audit.Event{
		ID:           newID(now),
		At:           now,
		Kind:         audit.KindAdmin,
		Action:       ActionLock,
		APIKey:       in.APIKey,
		Instance:     g.cfg.Instance,
		Note:         in.Reason,
		LockoutUntil: &end,
	}
	g.auditIdentifiers(&e, &id)
	g.rec.Record(e)
	for _, al := range out {
		g.notify(sdk.NotificationLockout, now, al.Ledger, d, &id, al.Level, al.Until, in.Reason)
	}
	return out, nil
}

// adminTarget validates an admin operation's dimension and keeps only the
// identifiers it needs, each required.
func (g *Guard) adminTarget(dim string, s Subject, verb string) (dimIndex, identity, error) {
	var id identity
	if dim == "" {
		return 0, id, &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: "dimension is required"}
	}
	d, ok := parseDim(dim)
	if !ok {
		return 0, id, &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: fmt.Sprintf("unknown dimension %q", dim)}
	}
	full, err := g.identify(s)
	if err != nil {
		return 0, id, err
	}
	// A phone_country or phone_prefix that is given must be valid whatever
	// the dimension uses: bad input is an error, not ignored.
	// Beside a phone it must be that phone's country or prefix: a request
	// naming two different keys would otherwise have one of them ignored
	// (the phone's wins), and lock or unlock a key its sender did not mean.
	for _, pd := range [...]dimIndex{dimPhoneCountry, dimPhonePrefix} {
		named, ok, err := g.phoneKeyOf(pd, s)
		if err != nil {
			return 0, id, err
		}
		if !ok || !full.hasPhone {
			continue
		}
		field, given, phones := "phone_country", named.country, full.phone.country
		if pd == dimPhonePrefix {
			field, given, phones = "phone_prefix", named.prefix, full.phone.prefix
		}
		if given != phones {
			return 0, id, &InputError{Code: CodeInvalidRequest, Field: field,
				Message: fmt.Sprintf("%s %q contradicts phone, whose %s is %q: give one of them, or both alike", field, given, field, phones)}
		}
	}
	needUser := d == dimUser || d == dimUserIP || d == dimUserDevice
	needIP := d == dimIP || d == dimUserIP
	needDevice := d == dimDevice || d == dimUserDevice
	// A phone_country or phone_prefix key is named by any number in it.
	needPhone := isPhoneDim(d)
	if needPhone && !full.hasPhone && d != dimPhone {
		p, ok, err := g.phoneKeyOf(d, s)
		if err != nil {
			return 0, id, err
		}
		full.phone, full.hasPhone = p, ok
	}
	for _, need := range []struct {
		need, has bool
		field     string
	}{{needUser, full.hasUser, "user"}, {needIP, full.hasIP, "ip"}, {needDevice, full.hasDevice, "device"}, {needPhone, full.hasPhone, "phone"}} {
		if need.need && !need.has {
			return 0, id, &InputError{Code: CodeInvalidRequest, Field: need.field,
				Message: fmt.Sprintf("%s is required to %s dimension %s", need.field, verb, dim)}
		}
	}
	if needUser {
		id.user, id.hasUser = full.user, true
	}
	if needIP {
		id.ip, id.ipNet, id.hasIP = full.ip, full.ipNet, true
	}
	if needDevice {
		id.device, id.hasDevice = full.device, true
	}
	if needPhone {
		id.phone, id.hasPhone = full.phone, true
	}
	return d, id, nil
}
