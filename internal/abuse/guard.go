// Package abuse turns Guard's policy into decisions: it normalises and
// hashes identifiers, applies the allow and deny lists, picks an action's
// rules, lockouts and trusted-device record, asks the limits.Store in one
// call, maps the answer to a Decision and records the audit event.
package abuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// DefaultTrustTTL is how long a success trusts a device for a user.
const DefaultTrustTTL = 720 * time.Hour

// Recorder takes audit events without blocking the decision path
// (audit.Writer implements it).
type Recorder interface {
	Record(e audit.Event)
}

// EventLookup queries the audit trail; Guard uses it to name the
// identifiers of lockouts struck by other instances. audit stores
// implement it.
type EventLookup interface {
	Query(ctx context.Context, f audit.Filter) (audit.Page, error)
}

// Config configures a Guard. Zero fields get the documented defaults.
type Config struct {
	// Policy is the policy to enforce; it is validated (and defaulted) by
	// New. Its zero value is replaced by DefaultPolicy().
	Policy Policy
	// KeySecret keys the HMAC-SHA256 hashes that stand for identifiers in
	// Redis. Required (non-empty; 32 random bytes recommended); changing it
	// orphans every key.
	KeySecret []byte
	// KeyPrefix starts every Redis key; default DefaultKeyPrefix
	// ("guard:v2:").
	KeyPrefix string
	// IPv6Prefix is the prefix length (1..128) IPv6 addresses are
	// aggregated to for limiting; default 64.
	IPv6Prefix int
	// TrustTTL is how long a success trusts the device for the user;
	// default DefaultTrustTTL (720h); negative disables trust.
	TrustTTL time.Duration
	// Pseudonymize puts keyed hashes instead of identifiers into audit
	// events (the IP's hash is of the full address, not its network).
	// Lockout listings then name identifiers only from this process's
	// in-memory record of recent strikes or from the filter.
	Pseudonymize bool
	// Instance names this process in audit events.
	Instance string
	// Now is the clock for decision ids and audit times when the store
	// gives none; default time.Now.
	Now func() time.Time
}

// Guard decides attempts. It is safe for concurrent use.
type Guard struct {
	log     *slog.Logger
	cfg     Config
	store   limits.Store
	rec     Recorder
	lookup  EventLookup
	keys    *keyer
	policy  Policy // validated; never handed out without copying
	actions map[string]*compiledAction
	ledgers map[string]*compiledLedger
	names   []string // ledger names, sorted
	allow   compiledList
	deny    compiledList
	strikes *strikeCache
}

// compiledAction is an action's policy with everything a request needs
// computed once at start: key prefixes, lock dimensions, clear lists.
type compiledAction struct {
	name      string
	ledger    *compiledLedger
	limits    []compiledRule
	failures  []compiledRule
	ladder    []time.Duration
	decay     time.Duration
	countDeny bool
	shadow    bool
	onFailure limits.OnFailure
	minLimit  int // smallest attempt-rule limit; 0 without limits
}

type compiledRule struct {
	Rule
	dim  dimIndex
	kind string        // "l:<name>" or "f:<name>" (see keyer.key)
	keep time.Duration // the longest window any rule uses kind with
}

// compiledLedger is the lockout state shared by actions.
type compiledLedger struct {
	name string
	// lockDims are the dimensions any action of the ledger has failure
	// rules on, in canonical order; checks consult these locks.
	lockDims []dimIndex
	// lockKind per dimension: "k:<ledger>:<dim>" (see keyer.key).
	lockKind [numDims]string
	// manualKind per dimension: "k:<ledger>:<dim>!m", the manual lockout
	// records; checks consult them for every dimension.
	manualKind [numDims]string
	// hasLadder is set when an action of the ledger has a lockout ladder:
	// a manual lockout without a ledger applies to these.
	hasLadder bool
	// failures are every failure rule of every action of the ledger (the
	// logs an unlock or a success may clear).
	failures []compiledRule
}

type compiledList struct {
	cidrs   []netip.Prefix
	users   map[string]struct{}
	devices map[string]struct{}
}

// New builds a Guard over store. rec receives every audit event and must
// not block; lookup (may be nil) lets lockout listings name identifiers of
// strikes this process did not see. It returns an error for an invalid
// policy (a *PolicyError), a missing or short KeySecret, or an IPv6Prefix
// outside 1..128.
func New(logger *slog.Logger, cfg Config, store limits.Store, rec Recorder, lookup EventLookup) (*Guard, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if store == nil {
		return nil, errors.New("abuse: a limits store is required")
	}
	if rec == nil {
		return nil, errors.New("abuse: an audit recorder is required")
	}
	if len(cfg.KeySecret) == 0 {
		return nil, errors.New("abuse: a key secret is required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		// Keys carry their Redis Cluster hash tag right after the prefix;
		// a brace in the prefix would become the tag of every key.
		return nil, fmt.Errorf("abuse: key prefix %q: must not contain { or }", cfg.KeyPrefix)
	}
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = DefaultIPv6Prefix
	}
	if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
		return nil, fmt.Errorf("abuse: ipv6 prefix %d outside 1..128", cfg.IPv6Prefix)
	}
	if cfg.TrustTTL == 0 {
		cfg.TrustTTL = DefaultTrustTTL
	}
	if cfg.TrustTTL < 0 {
		cfg.TrustTTL = 0
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pol := copyPolicy(cfg.Policy)
	if len(pol.Actions) == 0 && len(pol.Allow.CIDRs)+len(pol.Allow.Users)+len(pol.Allow.Devices)+
		len(pol.Deny.CIDRs)+len(pol.Deny.Users)+len(pol.Deny.Devices) == 0 {
		pol = DefaultPolicy()
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("abuse: invalid policy: %w", err)
	}
	keys := newKeyer(cfg.KeySecret, cfg.KeyPrefix)
	cfg.Policy = Policy{}
	cfg.KeySecret = nil // the keyer holds its own copy
	g := &Guard{
		keys:    keys,
		log:     logger,
		cfg:     cfg,
		store:   store,
		rec:     rec,
		lookup:  lookup,
		policy:  pol,
		strikes: newStrikeCache(strikeCacheSize),
	}
	g.compile()
	return g, nil
}

func (g *Guard) compile() {
	g.actions = make(map[string]*compiledAction, len(g.policy.Actions))
	g.ledgers = map[string]*compiledLedger{}
	names := make([]string, 0, len(g.policy.Actions))
	for name := range g.policy.Actions {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic ledger failure order
	// A log key is its rule's name: rules of several actions that share a
	// name share a log, which must then live for the longest window.
	keep := map[string]time.Duration{}
	for _, name := range names {
		a := g.policy.Actions[name]
		for _, r := range a.Limits {
			keep[logKind(r.Name)] = max(keep[logKind(r.Name)], r.Window)
		}
		for _, r := range a.Failures {
			keep[failKind(r.Name)] = max(keep[failKind(r.Name)], r.Window)
		}
	}
	for _, name := range names {
		a := g.policy.Actions[name]
		led := g.ledgers[a.Lockout.Ledger]
		if led == nil {
			led = &compiledLedger{name: a.Lockout.Ledger}
			for d := range numDims {
				led.lockKind[d] = lockKind(led.name, d)
				led.manualKind[d] = manualKind(led.name, d)
			}
			g.ledgers[led.name] = led
		}
		if len(a.Lockout.Ladder) > 0 {
			led.hasLadder = true
		}
		ca := &compiledAction{
			name:      name,
			ledger:    led,
			ladder:    a.Lockout.Ladder,
			decay:     a.Lockout.Decay,
			countDeny: a.Lockout.CountDenials,
			shadow:    a.Shadow,
		}
		switch a.OnStoreFailure {
		case OnFailureAllow:
			ca.onFailure = limits.FailAllow
		case OnFailureDeny:
			ca.onFailure = limits.FailDeny
		default:
			ca.onFailure = limits.FailLocal
		}
		for _, r := range a.Limits {
			d, _ := parseDim(r.Dimension)
			ca.limits = append(ca.limits, compiledRule{Rule: r, dim: d, kind: logKind(r.Name), keep: keep[logKind(r.Name)]})
			if ca.minLimit == 0 || r.Limit < ca.minLimit {
				ca.minLimit = r.Limit
			}
		}
		for _, r := range a.Failures {
			d, _ := parseDim(r.Dimension)
			cr := compiledRule{Rule: r, dim: d, kind: failKind(r.Name), keep: keep[failKind(r.Name)]}
			ca.failures = append(ca.failures, cr)
			led.failures = append(led.failures, cr)
		}
		g.actions[name] = ca
	}
	for name, led := range g.ledgers {
		var has [numDims]bool
		for _, r := range led.failures {
			has[r.dim] = true
		}
		for d := range numDims {
			if has[d] {
				led.lockDims = append(led.lockDims, d)
			}
		}
		g.names = append(g.names, name)
	}
	sort.Strings(g.names)
	g.allow = compileList(g.policy.Allow)
	g.deny = compileList(g.policy.Deny)
}

func compileList(l List) compiledList {
	c := compiledList{cidrs: l.CIDRs, users: map[string]struct{}{}, devices: map[string]struct{}{}}
	for _, u := range l.Users {
		c.users[u] = struct{}{}
	}
	for _, d := range l.Devices {
		c.devices[d] = struct{}{}
	}
	return c
}

// matches reports whether any present identifier of id is on the list.
func (c *compiledList) matches(id *identity) bool {
	if id.hasUser {
		if _, ok := c.users[id.user]; ok {
			return true
		}
	}
	if id.hasDevice {
		if _, ok := c.devices[id.device]; ok {
			return true
		}
	}
	if id.hasIP {
		for _, p := range c.cidrs {
			if p.Contains(id.ip) {
				return true
			}
		}
	}
	return false
}

// Policy returns the effective policy (validated, defaults filled) as a
// copy the caller may keep or modify.
func (g *Guard) Policy() Policy { return copyPolicy(g.policy) }

// Ledgers returns the names of the lockout ledgers, sorted.
func (g *Guard) Ledgers() []string { return append([]string(nil), g.names...) }

func copyPolicy(p Policy) Policy {
	out := Policy{Actions: make(map[string]Action, len(p.Actions)), Allow: copyList(p.Allow), Deny: copyList(p.Deny)}
	for name, a := range p.Actions {
		a.Limits = slices.Clone(a.Limits)
		a.Failures = slices.Clone(a.Failures)
		a.Lockout.Ladder = slices.Clone(a.Lockout.Ladder)
		out.Actions[name] = a
	}
	return out
}

func copyList(l List) List {
	return List{
		CIDRs:   slices.Clone(l.CIDRs),
		Users:   slices.Clone(l.Users),
		Devices: slices.Clone(l.Devices),
	}
}

// action resolves an action name or answers unknown_action.
func (g *Guard) action(name string) (*compiledAction, error) {
	a, ok := g.actions[name]
	if !ok {
		return nil, &InputError{Code: CodeUnknownAction, Field: "action", Message: fmt.Sprintf("unknown action %q", name)}
	}
	return a, nil
}

// subject normalises a request's identifiers and requires at least one.
func (g *Guard) subject(s Subject) (identity, error) {
	id, err := normalizeSubject(s, g.cfg.IPv6Prefix)
	if err != nil {
		return id, err
	}
	if id.empty() {
		return id, &InputError{Code: CodeInvalidRequest, Message: "at least one of user, ip and device is required"}
	}
	return id, nil
}

// lockRefs are the lock records of the action's ledger that the request's
// identifiers name: the struck records of the ledger's lock dimensions (the
// user-level one spares trusted devices) and the manual lockout records of
// every dimension present (an administrator's lock spares nothing).
func (g *Guard) lockRefs(led *compiledLedger, id *identity) []limits.LockRef {
	refs := make([]limits.LockRef, 0, len(led.lockDims)+int(numDims))
	for _, d := range led.lockDims {
		if id.has(d) {
			refs = append(refs, limits.LockRef{Key: g.keys.key(led.lockKind[d], id, d), SpareIfTrusted: d == dimUser})
		}
	}
	for d := range numDims {
		if id.has(d) {
			refs = append(refs, limits.LockRef{Key: g.keys.key(led.manualKind[d], id, d)})
		}
	}
	return refs
}

// escalation is the action's failure policy for the request's identifiers:
// the failure rules whose dimension is present.
func (g *Guard) escalation(a *compiledAction, id *identity) limits.Escalation {
	esc := limits.Escalation{Ladder: a.ladder, Decay: a.decay}
	for _, r := range a.failures {
		if !id.has(r.dim) {
			continue
		}
		esc.Failures = append(esc.Failures, limits.FailureRule{
			Key:     g.keys.key(r.kind, id, r.dim),
			Limit:   r.Limit,
			Window:  r.Window,
			Keep:    r.keep,
			LockKey: g.keys.key(a.ledger.lockKind[r.dim], id, r.dim),
			Indexes: g.keys.lockIndexes(id, r.dim),
			Info:    g.keys.lockInfo(a.ledger.name, r.dim, id),
		})
	}
	return esc
}

// lockoutInfo names a lock record the request consulted or struck.
func (g *Guard) lockoutInfo(st *limits.LockState) *LockoutInfo {
	if st == nil {
		return nil
	}
	info := &LockoutInfo{Level: st.Level, Since: st.Since, Until: st.Until}
	if p, ok := parseLockInfo(st.Info); ok {
		info.Ledger, info.Dimension = p.ledger, p.dim.String()
	} else if led, d, ok := g.parseLockKey(st.Key); ok {
		info.Ledger, info.Dimension = led, d.String()
	}
	return info
}

// parseLockKey reads ledger and dimension from
// "<prefix>{<tag>}k:<ledger>:<dim>[:<hash>]".
func (g *Guard) parseLockKey(key string) (string, dimIndex, bool) {
	_, rest, ok := strings.Cut(key, "}k:")
	if !ok {
		return "", 0, false
	}
	for _, name := range g.names {
		led := g.ledgers[name]
		for d := range numDims {
			kind := led.lockKind[d][len("k:"):]
			if rest == kind || strings.HasPrefix(rest, kind+":") && len(rest) == len(kind)+1+hashLen {
				return name, d, true
			}
		}
	}
	return "", 0, false
}

// auditIdentifiers fills an event's identifiers: normalised (IP canonical,
// not aggregated), or their keyed hashes with Pseudonymize.
func (g *Guard) auditIdentifiers(e *audit.Event, id *identity) {
	if id.hasUser {
		e.User = id.user
		if g.cfg.Pseudonymize {
			e.User = g.keys.hash(id, dimUser)
		}
	}
	if id.hasIP {
		e.IP = id.ip.String()
		if g.cfg.Pseudonymize {
			e.IP = g.keys.sum(id, dimAddr)
		}
	}
	if id.hasDevice {
		e.Device = id.device
		if g.cfg.Pseudonymize {
			e.Device = g.keys.hash(id, dimDevice)
		}
	}
}

// AuditUser returns the value audit events store for a user identifier
// (normalised, or its keyed hash with Pseudonymize), for audit filters.
// Errors as NormalizeUser.
func (g *Guard) AuditUser(raw string) (string, error) {
	u, err := NormalizeUser(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return u, err
	}
	id := identity{user: u, hasUser: true}
	return g.keys.hash(&id, dimUser), nil
}

// AuditIP returns, when Pseudonymize is on, the keyed hash that audit
// events store for the IP address raw, with hashed true; with hashed false
// events keep real addresses, to be filtered by address or CIDR. Errors as
// ParseIP.
func (g *Guard) AuditIP(raw string) (value string, hashed bool, err error) {
	a, err := ParseIP(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return "", false, err
	}
	id := identity{ip: a, hasIP: true}
	return g.keys.sum(&id, dimAddr), true, nil
}

// AuditDevice returns the value audit events store for a device identifier
// (as given, or its keyed hash with Pseudonymize). Errors as NormalizeDevice.
func (g *Guard) AuditDevice(raw string) (string, error) {
	d, err := NormalizeDevice(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return d, err
	}
	id := identity{device: d, hasDevice: true}
	return g.keys.hash(&id, dimDevice), nil
}

// Pseudonymized reports whether audit events hold keyed hashes of the
// identifiers (audit.pseudonymize) rather than the identifiers.
func (g *Guard) Pseudonymized() bool { return g.cfg.Pseudonymize }

// nowMs is the injected clock at millisecond precision in UTC, the
// precision of every time Guard reports.
func (g *Guard) nowMs() time.Time { return g.cfg.Now().UTC().Truncate(time.Millisecond) }

func ptr[T any](v T) *T { return &v }
