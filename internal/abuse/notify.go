package abuse

import (
	"context"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/notify"
	"github.com/guardhq/guard/sdk"
)

// Notifier takes lockout notifications (contract v1.1) without blocking:
// Guard calls it on the decision path, right where it records the audit
// event of a strike, a manual lockout or an unlock. notify.Notifier
// implements it; Config.Notifier nil turns notifications off.
type Notifier interface {
	// Wants reports whether an event ("lockout", "unlock") would be sent,
	// so that nothing is built for notifications that are off.
	Wants(event string) bool
	Notify(e notify.Event)
}

// notifyStrikes sends a lockout notification for each lock in struck, set
// by a's failure rules for id (reported failures, denials counted with
// count_denials, provisional failures reserved at check time). Its reason
// is the name of the failure rule that struck, which the store answers
// (LockState.Rule): two rules may strike one lock key (an ip log and an ip
// distinct set), so the key alone cannot tell them apart.
func (g *Guard) notifyStrikes(a *compiledAction, id *identity, struck []limits.LockState, at time.Time) {
	if g.cfg.Notifier == nil || len(struck) == 0 || !g.cfg.Notifier.Wants(sdk.NotificationLockout) {
		return
	}
	for i := range struck {
		st := &struck[i]
		reason := st.Rule
		info := g.lockoutInfo(st)
		d, ok := parseDim(info.Dimension)
		if !ok {
			g.log.Warn("no lockout notification for a lock of unknown dimension", "key", st.Key)
			continue
		}
		g.notify(sdk.NotificationLockout, at, info.Ledger, d, id, st.Level, st.Until, reason)
	}
}

// lockedLedgers names, for an unlock of every ledger, the ledgers in which
// id's key of dimension d is locked now, so that each gets its own unlock
// notification; [""] (one notification for every ledger) when none is
// found or the listing fails, or without a Notifier.
func (g *Guard) lockedLedgers(ctx context.Context, d dimIndex, id *identity) []string {
	all := []string{""}
	if g.cfg.Notifier == nil || !g.cfg.Notifier.Wants(sdk.NotificationUnlock) {
		return all
	}
	var s Subject
	if id.hasUser {
		s.User = &id.user
	}
	if id.hasIP {
		ip := id.ip.String()
		s.IP = &ip
	}
	if id.hasDevice {
		s.Device = &id.device
	}
	f := LockoutFilter{Subject: s, Dimension: d.String(), Limit: 1000, ledgersOnly: true}
	if isPhoneDim(d) && id.hasPhone {
		f.phoneKey = g.keys.hash(id, d)
	}
	page, err := g.Lockouts(ctx, f)
	if err != nil {
		g.log.Debug("unlock notification for every ledger: listing failed", "err", err)
		return all
	}
	var out []string
	for _, name := range g.names {
		for _, al := range page.Lockouts {
			if al.Ledger == name {
				out = append(out, name)
				break
			}
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// notify sends one notification about the lock of dimension d in ledger
// ("" for every ledger). Its identifiers are id's exactly as the audit
// event recorded beside it has them (normalised, or keyed hashes with
// Pseudonymize): for a strike every identifier of the striking request,
// for a manual lockout or an unlock those of the dimension. dimension says
// which key is locked; an ip lockout may carry the user whose attempt
// struck it.
func (g *Guard) notify(event string, at time.Time, ledger string, d dimIndex, id *identity, level int, until time.Time, reason string) {
	if g.cfg.Notifier == nil || !g.cfg.Notifier.Wants(event) {
		return
	}
	var e audit.Event
	g.auditIdentifiers(&e, id)
	n := notify.Event{
		ID: newID(at), Event: event, At: at.UTC(), Instance: g.cfg.Instance, Ledger: ledger,
		Dimension: d.String(), Level: level, Until: until.UTC(), Reason: reason,
	}
	if id.hasUser {
		n.User = &e.User
	}
	if id.hasIP {
		n.IP = &e.IP
	}
	if id.hasDevice {
		n.Device = &e.Device
	}
	if e.Phone != "" {
		n.Phone = &e.Phone
	}
	g.cfg.Notifier.Notify(n)
}
