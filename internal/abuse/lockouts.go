package abuse

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// Lookup bounds: a listing reads at most this many audit events to name
// lockouts struck by other instances.
const (
	lookupPageSize = 1000
	lookupMaxPages = 5
)

// allLockouts lists the active lockouts, ending last first, that match the
// filter: its ledger, its dimension, and every identifier it names (a
// user filter matches user, user+ip and user+device lockouts of that user).
// Each entry carries the identifiers of its dimension, resolved from this
// process's recent strikes, else from the audit trail (events whose
// lockout is still active), else from the filter; nil when unknown.
//
// Errors: *InputError for an unknown dimension or ledger or a bad
// identifier; else a wrapped store error.
func (g *Guard) allLockouts(ctx context.Context, f LockoutFilter) ([]ActiveLockout, error) {
	var wantDim dimIndex
	if f.Dimension != "" {
		d, ok := parseDim(f.Dimension)
		if !ok {
			return nil, &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: fmt.Sprintf("unknown dimension %q", f.Dimension)}
		}
		wantDim = d
	}
	if f.Ledger != "" && g.ledgers[f.Ledger] == nil {
		return nil, &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", f.Ledger)}
	}
	fid, err := normalizeSubject(f.Subject, g.cfg.IPv6Prefix)
	if err != nil {
		return nil, err
	}
	var wantUser, wantIP, wantDevice string
	if fid.hasUser {
		wantUser = g.keys.hash(&fid, dimUser)
	}
	if fid.hasIP {
		wantIP = g.keys.hash(&fid, dimIP)
	}
	if fid.hasDevice {
		wantDevice = g.keys.hash(&fid, dimDevice)
	}

	states, err := g.store.Lockouts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list lockouts: %w", err)
	}
	out := []ActiveLockout{}
	byInfo := map[string]int{}    // a lock's info -> index in out
	var unresolved map[string]int // lock key -> index in out
	for _, st := range states {
		p, ok := parseLockInfo(st.Info)
		if !ok {
			g.log.Debug("lockout with unreadable info skipped", "info", st.Info)
			continue
		}
		switch {
		case f.Ledger != "" && p.ledger != f.Ledger,
			f.Dimension != "" && p.dim != wantDim,
			wantUser != "" && p.user != wantUser,
			wantIP != "" && p.ip != wantIP,
			wantDevice != "" && p.device != wantDevice:
			continue
		}
		manual := g.isManualKey(st.Key)
		// A key's struck and manual records are one lockout: the level is
		// the struck record's, the end the later of the two.
		if i, ok := byInfo[st.Info]; ok {
			al := &out[i]
			if !manual {
				al.Level = st.Level
			}
			if st.Until.After(al.Until) {
				al.Since, al.Until, al.Manual = st.Since, st.Until, manual
			}
			g.nameLock(st.Key, i, out, &unresolved)
			continue
		}
		al := ActiveLockout{Ledger: p.ledger, Dimension: p.dim.String(), Level: st.Level, Since: st.Since, Until: st.Until,
			Manual: manual, sortKey: st.Info}
		if manual {
			al.Level = 0
		}
		byInfo[st.Info] = len(out)
		out = append(out, al)
		g.nameLock(st.Key, len(out)-1, out, &unresolved)
	}
	if len(unresolved) > 0 && g.lookup != nil && !g.cfg.Pseudonymize {
		g.resolveFromAudit(ctx, unresolved, out)
	}
	for _, i := range unresolved {
		d, _ := parseDim(out[i].Dimension)
		names{user: fid.user, ip: fid.ip, device: fid.device,
			hasUser: fid.hasUser, hasIP: fid.hasIP, hasDevice: fid.hasDevice}.fill(&out[i], d)
	}
	sortLockouts(out)
	return out, nil
}

// nameLock fills out[i]'s identifiers from the strike cache when it knows
// key, else marks key unresolved (until another record of the entry names
// it).
func (g *Guard) nameLock(key string, i int, out []ActiveLockout, unresolved *map[string]int) {
	if n, ok := g.strikes.get(key); ok {
		d, _ := parseDim(out[i].Dimension)
		n.fill(&out[i], d)
		for k, j := range *unresolved {
			if j == i {
				delete(*unresolved, k)
			}
		}
		return
	}
	if out[i].User != nil || out[i].IP != nil || out[i].Device != nil {
		return
	}
	if *unresolved == nil {
		*unresolved = map[string]int{}
	}
	(*unresolved)[key] = i
}

// resolveFromAudit names lockouts from audit events whose lockout is still
// active: an event's identifiers that hash to a lock's key are that lock's
// identifiers. Resolved keys leave unresolved. Lookup errors only leave
// names unknown.
func (g *Guard) resolveFromAudit(ctx context.Context, unresolved map[string]int, out []ActiveLockout) {
	flt := audit.Filter{LockedAfter: g.nowMs(), Limit: lookupPageSize}
	for range lookupMaxPages {
		page, err := g.lookup.Query(ctx, flt)
		if err != nil {
			g.log.Warn("lockout names from the audit trail", "err", err)
			return
		}
		for _, e := range page.Events {
			id, ok := eventIdentity(e, g.cfg.IPv6Prefix)
			if !ok {
				continue
			}
			if e.Kind == audit.KindAdmin && e.Action == ActionLock {
				// A manual lockout names the key of every ledger.
				for _, name := range g.names {
					for d := range numDims {
						if id.has(d) {
							g.resolveKey(g.ledgers[name].manualPrefix[d]+g.keys.hash(&id, d), &id, d, unresolved, out)
						}
					}
				}
				continue
			}
			a := g.actions[e.Action]
			if a == nil {
				continue
			}
			for _, d := range a.ledger.lockDims {
				if id.has(d) {
					g.resolveKey(a.ledger.lockPrefix[d]+g.keys.hash(&id, d), &id, d, unresolved, out)
				}
			}
			if len(unresolved) == 0 {
				return
			}
		}
		if page.Next == nil {
			return
		}
		flt.Cursor = page.Next
	}
}

// resolveKey names the entry of the lock record key, if unresolved, from id.
func (g *Guard) resolveKey(key string, id *identity, d dimIndex, unresolved map[string]int, out []ActiveLockout) {
	if i, ok := unresolved[key]; ok {
		namesOf(id).fill(&out[i], d)
		delete(unresolved, key)
	}
}

// eventIdentity rebuilds an identity from an audit event's identifiers.
func eventIdentity(e audit.Event, ipv6Prefix int) (identity, bool) {
	var id identity
	if e.User != "" {
		u, err := NormalizeUser(e.User)
		if err != nil {
			return id, false
		}
		id.user, id.hasUser = u, true
	}
	if e.IP != "" {
		a, err := ParseIP(e.IP)
		if err != nil {
			return id, false
		}
		id.ip, id.ipNet, id.hasIP = a, AggregateIP(a, ipv6Prefix), true
	}
	if e.Device != "" {
		id.device, id.hasDevice = e.Device, true
	}
	return id, true
}

// Unlock lifts a lockout: it deletes the lock of the dimension's identity
// in the given ledger (every ledger when Ledger is ""), which also resets
// its level, and that identity's failure logs of the dimension across those
// ledgers, then records an admin event. It returns ErrNotFound when no such
// lockout was active (the failure logs are deleted all the same).
//
// Errors: *InputError for a missing or unknown dimension (field
// "dimension"), a missing or bad identifier the dimension needs (field
// "user", "ip" or "device"), or an unknown ledger (field "ledger"); else a
// wrapped store error.
func (g *Guard) Unlock(ctx context.Context, in UnlockInput) error {
	if in.Dimension == "" {
		return &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: "dimension is required"}
	}
	d, ok := parseDim(in.Dimension)
	if !ok {
		return &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: fmt.Sprintf("unknown dimension %q", in.Dimension)}
	}
	full, err := normalizeSubject(in.Subject, g.cfg.IPv6Prefix)
	if err != nil {
		return err
	}
	// Keep only the identifiers the dimension needs, each required.
	var id identity
	needUser := d == dimUser || d == dimUserIP || d == dimUserDevice
	needIP := d == dimIP || d == dimUserIP
	needDevice := d == dimDevice || d == dimUserDevice
	for _, need := range []struct {
		need, has bool
		field     string
	}{{needUser, full.hasUser, "user"}, {needIP, full.hasIP, "ip"}, {needDevice, full.hasDevice, "device"}} {
		if need.need && !need.has {
			return &InputError{Code: CodeInvalidRequest, Field: need.field,
				Message: fmt.Sprintf("%s is required to unlock dimension %s", need.field, in.Dimension)}
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
	ledgers := g.names
	if in.Ledger != "" {
		if g.ledgers[in.Ledger] == nil {
			return &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", in.Ledger)}
		}
		ledgers = []string{in.Ledger}
	}
	h := g.keys.hash(&id, d)
	var req limits.UnlockRequest
	for _, name := range ledgers {
		led := g.ledgers[name]
		req.Locks = append(req.Locks, led.lockPrefix[d]+h, led.manualPrefix[d]+h)
		for _, r := range led.failures {
			if r.dim == d {
				req.Failures = append(req.Failures, r.keyPrefix+h)
			}
		}
	}
	unlocked, err := g.store.Unlock(ctx, &req)
	if err != nil {
		return fmt.Errorf("unlock %s: %w", in.Dimension, err)
	}
	if !unlocked {
		return ErrNotFound
	}
	now := g.nowMs()
	e := audit.Event{
		ID:       newID(now),
		At:       now,
		Kind:     audit.KindAdmin,
		Action:   "unlock",
		APIKey:   in.APIKey,
		Instance: g.cfg.Instance,
		Note:     in.Reason,
	}
	g.auditIdentifiers(&e, &id)
	g.rec.Record(e)
	return nil
}

// names are the identifiers behind a lock, as far as known.
type names struct {
	user, device   string
	ip             netip.Addr
	hasUser, hasIP bool
	hasDevice      bool
}

func namesOf(id *identity) names {
	return names{user: id.user, ip: id.ip, device: id.device, hasUser: id.hasUser, hasIP: id.hasIP, hasDevice: id.hasDevice}
}

// fill sets the identifiers of dimension d that are known and not yet set.
func (n names) fill(al *ActiveLockout, d dimIndex) {
	if n.hasUser && al.User == nil && (d == dimUser || d == dimUserIP || d == dimUserDevice) {
		al.User = ptr(n.user)
	}
	if n.hasIP && al.IP == nil && (d == dimIP || d == dimUserIP) {
		al.IP = ptr(n.ip.String())
	}
	if n.hasDevice && al.Device == nil && (d == dimDevice || d == dimUserDevice) {
		al.Device = ptr(n.device)
	}
}
