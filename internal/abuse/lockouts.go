package abuse

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

// Lookup bounds: a listing reads at most this many audit events to name
// lockouts struck by other instances.
const (
	lookupPageSize = 1000
	lookupMaxPages = 5
)

// Lockouts lists a page of the active lockouts that match the filter: its
// ledger, its dimension, and every identifier it names (a user filter
// matches user, user+ip and user+device lockouts of that user). With an
// identifier the store reads that identity's lockout index (a few round
// trips whatever the number of lockouts), ending last first across pages;
// without, it scans lock records page by page. Each entry carries the
// identifiers of its dimension, resolved from this process's recent
// strikes, else from the audit trail (events whose lockout is still
// active), else from the filter; nil when unknown.
//
// Errors: *InputError for an unknown dimension or ledger, a bad
// identifier, a limit outside 1..1000 or a cursor Guard did not issue;
// else a wrapped store error.
func (g *Guard) Lockouts(ctx context.Context, f LockoutFilter) (LockoutPage, error) {
	var wantDim dimIndex
	if f.Dimension != "" {
		d, ok := parseDim(f.Dimension)
		if !ok {
			return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "dimension", Message: fmt.Sprintf("unknown dimension %q", f.Dimension)}
		}
		wantDim = d
	}
	if f.Ledger != "" && g.ledgers[f.Ledger] == nil {
		return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", f.Ledger)}
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "limit", Message: "limit must be 1 to 1000"}
	}
	q := limits.LockQuery{Limit: f.Limit}
	fid, err := g.identify(f.Subject)
	if err != nil {
		return LockoutPage{}, err
	}
	var wantUser, wantIP, wantDevice, wantPhone string
	if fid.hasUser {
		wantUser = g.keys.hash(&fid, dimUser)
	}
	if fid.hasIP {
		wantIP = g.keys.hash(&fid, dimIP)
	}
	if fid.hasDevice {
		wantDevice = g.keys.hash(&fid, dimDevice)
	}
	if fid.hasPhone {
		wantPhone = g.keys.hash(&fid, dimPhone)
	}
	phoneDim := dimPhone
	if f.phoneKey != "" {
		wantPhone, phoneDim = f.phoneKey, wantDim
	}
	switch {
	case wantUser != "":
		q.Index = g.keys.indexKey(wantUser)
	case wantIP != "":
		q.Index = g.keys.indexKey(wantIP)
	case wantDevice != "":
		q.Index = g.keys.indexKey(wantDevice)
	case wantPhone != "":
		q.Index = g.keys.indexKey(wantPhone)
	default:
		q.Pattern = g.keys.lockPattern(f.Ledger, wantDim, f.Dimension == "")
	}
	// A cursor is sealed with the listing it continues (index or
	// pattern), so one listing's cursor is refused by another instead of
	// confusing the store.
	bind := q.Index + "\x00" + q.Pattern + "\x00"
	if f.Cursor != "" {
		c, ok := g.keys.open(f.Cursor)
		rest, bound := strings.CutPrefix(c, bind)
		if !ok || !bound {
			return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "cursor", Message: "cursor is not one Guard issued for this listing"}
		}
		q.Cursor = rest
	}
	q.Keep = func(st limits.LockState) bool {
		p, ok := parseLockInfo(st.Info)
		switch {
		case !ok:
			g.log.Debug("lockout with unreadable info skipped", "info", st.Info)
			return false
		case f.Ledger != "" && p.ledger != f.Ledger,
			f.Dimension != "" && p.dim != wantDim,
			wantUser != "" && p.user != wantUser,
			wantIP != "" && p.ip != wantIP,
			wantDevice != "" && p.device != wantDevice,
			// A phone filter names the number's own lockouts (those of
			// its country or prefix are listed by dimension).
			wantPhone != "" && (p.dim != phoneDim || p.phone != wantPhone):
			return false
		}
		return true
	}

	q.Partner = g.strikeKeyOf
	page, err := g.store.Lockouts(ctx, &q)
	if errors.Is(err, limits.ErrBadCursor) {
		// Sealed by Guard for this listing, but of the other store: Redis
		// went down or came back between the two pages.
		return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "cursor",
			Message: "cursor is from the listing before Redis went down or came back; list again without it"}
	}
	if err != nil {
		return LockoutPage{}, fmt.Errorf("list lockouts: %w", err)
	}
	out := LockoutPage{Lockouts: make([]ActiveLockout, 0, len(page.Locks))}
	if page.Next != "" {
		out.Next = g.keys.seal(bind + page.Next)
	}
	var unresolved map[string]int // lock key -> index in out
	for _, st := range page.Locks {
		p, _ := parseLockInfo(st.Info)
		al := ActiveLockout{Ledger: p.ledger, Dimension: p.dim.String(), Level: st.Level, Since: st.Since, Until: st.Until,
			Manual: g.isManualKey(st.Key)}
		if n, ok := g.strikes.get(st.Key); ok {
			n.fill(&al, p.dim)
		} else {
			if unresolved == nil {
				unresolved = map[string]int{}
			}
			unresolved[st.Key] = len(out.Lockouts)
		}
		out.Lockouts = append(out.Lockouts, al)
	}
	if len(unresolved) > 0 && g.lookup != nil && !g.cfg.Pseudonymize && !f.ledgersOnly {
		g.resolveFromAudit(ctx, unresolved, out.Lockouts)
	}
	for _, i := range unresolved {
		d, _ := parseDim(out.Lockouts[i].Dimension)
		namesOf(&fid).fill(&out.Lockouts[i], d)
	}
	return out, nil
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
			id, ok := eventIdentity(e, g.cfg.IPv6Prefix, g.cfg.Phone.PrefixDigits)
			if !ok {
				continue
			}
			if e.Kind == audit.KindAdmin && e.Action == ActionLock {
				// A manual lockout names the key of every ledger.
				for _, name := range g.names {
					for d := range numDims {
						if id.has(d) {
							g.resolveKey(g.keys.key(g.ledgers[name].manualKind[d], &id, d), &id, d, unresolved, out)
						}
					}
				}
				continue
			}
			a := g.actions[e.Action]
			if a == nil {
				continue
			}
			for d := range numDims {
				if a.ledger.lockDim[d] && id.has(d) {
					g.resolveKey(g.keys.key(a.ledger.lockKind[d], &id, d), &id, d, unresolved, out)
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
func eventIdentity(e audit.Event, ipv6Prefix, prefixDigits int) (identity, bool) {
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
	if e.Phone != "" {
		// Stored in E.164, which needs no default region.
		p, err := parsePhone(e.Phone, "", prefixDigits)
		if err != nil {
			return id, false
		}
		id.phone, id.hasPhone = p, true
	}
	return id, true
}

// Unlock lifts a lockout: it deletes the lock of the dimension's identity
// in the given ledger (every ledger when Ledger is ""), which also resets
// its level, and that identity's failure logs of the dimension across those
// ledgers, then records an admin event and sends an unlock notification
// (Config.Notifier). It returns ErrNotFound when no such lockout was active
// (the failure logs are deleted all the same; nothing is audited or sent).
//
// Errors: *InputError for a missing or unknown dimension (field
// "dimension"), a missing or bad identifier the dimension needs (field
// "user", "ip" or "device"), or an unknown ledger (field "ledger"); else a
// wrapped store error.
func (g *Guard) Unlock(ctx context.Context, in UnlockInput) error {
	d, id, err := g.adminTarget(in.Dimension, in.Subject, "unlock")
	if err != nil {
		return err
	}
	ledgers := g.names
	if in.Ledger != "" {
		if g.ledgers[in.Ledger] == nil {
			return &InputError{Code: CodeInvalidRequest, Field: "ledger", Message: fmt.Sprintf("unknown ledger %q", in.Ledger)}
		}
		ledgers = []string{in.Ledger}
	}
	var req limits.UnlockRequest
	for _, name := range ledgers {
		led := g.ledgers[name]
		req.Locks = append(req.Locks, g.keys.key(led.lockKind[d], &id, d), g.keys.key(led.manualKind[d], &id, d))
		for _, r := range led.failures {
			if r.dim == d {
				req.Failures = append(req.Failures, g.keys.key(r.kind, &id, r.dim))
				if r.pendKind != "" {
					req.Failures = append(req.Failures, g.keys.key(r.pendKind, &id, r.dim))
				}
			}
		}
	}
	notifyLedgers := []string{in.Ledger}
	if in.Ledger == "" {
		notifyLedgers = g.lockedLedgers(ctx, d, &id)
	}
	deg, _ := g.store.(interface{ Degraded() bool })
	degradedBefore := deg != nil && deg.Degraded()
	unlocked, err := g.store.Unlock(ctx, &req)
	if err != nil {
		return fmt.Errorf("unlock %s: %w", in.Dimension, err)
	}
	if !unlocked {
		if degradedBefore || deg != nil && deg.Degraded() {
			// Only this instance's fallback answered (or may have: the
			// breaker moved during the call): Redis, out of reach, may
			// hold a lockout that applies again when it is back, so
			// "nothing is locked" would be false. (A lockout the fallback
			// held is lifted, and answered as such.)
			return fmt.Errorf("unlock %s: nothing locked in this instance's fallback, and the limit store is down: %w",
				in.Dimension, limits.ErrUnavailable)
		}
		return ErrNotFound
	}
	now := g.nowMs()
	e := audit.Event{
		ID:       newID(now),
		At:       now,
		Kind:     audit.KindAdmin,
		Action:   ActionUnlock,
		APIKey:   in.APIKey,
		Instance: g.cfg.Instance,
		Note:     in.Reason,
	}
	g.auditIdentifiers(&e, &id)
	g.rec.Record(e)
	for _, led := range notifyLedgers {
		g.notify(sdk.NotificationUnlock, now, led, d, &id, 0, time.Time{}, in.Reason)
	}
	return nil
}

// names are the identifiers behind a lock, as far as known.
type names struct {
	user, device   string
	ip             netip.Addr
	phone          phoneID
	hasUser, hasIP bool
	hasDevice      bool
	hasPhone       bool
}

func namesOf(id *identity) names {
	return names{user: id.user, ip: id.ip, device: id.device, phone: id.phone,
		hasUser: id.hasUser, hasIP: id.hasIP, hasDevice: id.hasDevice, hasPhone: id.hasPhone}
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
	if n.hasPhone {
		switch {
		case d == dimPhone && al.Phone == nil:
			al.Phone = ptr(n.phone.e164)
		case d == dimPhoneCountry && al.PhoneCountry == nil:
			al.PhoneCountry = ptr(n.phone.country)
		case d == dimPhonePrefix && al.PhonePrefix == nil:
			al.PhonePrefix = ptr(n.phone.prefix)
		}
	}
}
