package abuse

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// The compiled policy: everything a request needs, computed once by New
// from the validated policy (key prefixes, lock dimensions, clear lists),
// and the lookups requests make in it.

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
	// reserve is reserve_failures; failTTL the longest failure window
	// (how long a reservation record lives).
	reserve   bool
	failTTL   time.Duration
	onFailure limits.OnFailure
	minLimit  int // smallest attempt-rule limit; 0 without limits
}

type compiledRule struct {
	Rule
	dim       dimIndex
	challenge bool          // on_limit: challenge
	kind      string        // "l:<name>" or "f:<name>" (see keyer.key, ruleKind)
	keep      time.Duration // the longest window any rule uses kind with
	// alg is the store's algorithm; distinct, when hasDistinct, the
	// field a distinct rule counts (rulekinds.go).
	alg         limits.Algorithm
	distinct    dimIndex
	hasDistinct bool
	// pendKind, for a distinct failure rule a reservation reaches, is the
	// kind of its pending set ("q:<name>", limits.FailureRule.Pending).
	pendKind string
}

// compileRule completes a validated rule for the store.
func compileRule(r Rule, failure bool, keep map[string]time.Duration) compiledRule {
	d, _ := parseDim(r.Dimension)
	kind := ruleKind(&r, failure)
	return compiledRule{Rule: r, dim: d, kind: kind, keep: keep[kind], alg: limitsAlgorithm(r.Algorithm),
		challenge: r.OnLimit == OnLimitChallenge, distinct: distinctDim(r.Distinct), hasDistinct: r.Distinct != ""}
}

// applies reports whether the request names every field the rule needs.
func (r *compiledRule) applies(id *identity) bool {
	return id.has(r.dim) && (!r.hasDistinct || id.has(r.distinct))
}

// compiledLedger is the lockout state shared by actions.
type compiledLedger struct {
	name string
	// lockDim marks the dimensions any action of the ledger has failure
	// rules on; checks consult these locks.
	lockDim [numDims]bool
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
	cidrs     []netip.Prefix
	users     map[string]struct{}
	devices   map[string]struct{}
	countries map[string]struct{}
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
	// A distinct failure rule that a reservation reaches keeps its
	// provisional values in a pending set; every action whose rule shares
	// that set's name must count them too.
	pending := map[string]bool{}
	for _, name := range names {
		a := g.policy.Actions[name]
		for _, r := range a.Limits {
			keep[ruleKind(&r, false)] = max(keep[ruleKind(&r, false)], r.Window)
		}
		for _, r := range a.Failures {
			keep[ruleKind(&r, true)] = max(keep[ruleKind(&r, true)], r.Window)
			if a.ReserveFailures && r.Distinct != "" {
				pending[ruleKind(&r, true)] = true
			}
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
			reserve:   a.ReserveFailures,
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
			ca.limits = append(ca.limits, compileRule(r, false, keep))
			// Cost does not apply to distinct rules, so it is not
			// bounded by them.
			if r.Distinct == "" && (ca.minLimit == 0 || r.Limit < ca.minLimit) {
				ca.minLimit = r.Limit
			}
		}
		for _, r := range a.Failures {
			cr := compileRule(r, true, keep)
			if pending[cr.kind] {
				cr.pendKind = pendingKind(r.Name)
			}
			ca.failures = append(ca.failures, cr)
			led.failures = append(led.failures, cr)
			ca.failTTL = max(ca.failTTL, r.Window)
		}
		g.actions[name] = ca
	}
	for name, led := range g.ledgers {
		for _, r := range led.failures {
			led.lockDim[r.dim] = true
		}
		g.names = append(g.names, name)
	}
	sort.Strings(g.names)
	g.allow = compileList(g.policy.Allow)
	g.deny = compileList(g.policy.Deny)
}

func compileList(l List) compiledList {
	c := compiledList{cidrs: l.CIDRs, users: map[string]struct{}{}, devices: map[string]struct{}{}, countries: map[string]struct{}{}}
	for _, r := range l.Countries {
		c.countries[r] = struct{}{}
	}
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
	if id.hasPhone {
		if _, ok := c.countries[id.phone.country]; ok {
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

// lockRefs are the lock records of the action's ledger that the request's
// identifiers name, per dimension present: the struck record when the
// ledger has failure rules on it (the user-level one spares trusted
// devices), then the manual lockout record (an administrator's lock spares
// nothing), which shares the struck record's level: a strike during a
// manual lockout raises the key's level as usual.
func (g *Guard) lockRefs(led *compiledLedger, id *identity) []limits.LockRef {
	refs := make([]limits.LockRef, 0, 2*int(numDims))
	for d := range numDims {
		if !id.has(d) {
			continue
		}
		struck := led.lockDim[d]
		if struck {
			refs = append(refs, limits.LockRef{Key: g.keys.key(led.lockKind[d], id, d), SpareIfTrusted: d == dimUser})
		}
		refs = append(refs, limits.LockRef{Key: g.keys.key(led.manualKind[d], id, d), SharesLevel: struck})
	}
	return refs
}

// escalation is the action's failure policy for the request's identifiers:
// the enforced failure rules whose dimension is present. A shadow failure
// rule, or any of a shadow action, records and strikes nothing: a shadow
// rule never turns a decision into a denial (API.md), and a lockout it
// struck would deny this action's and its ledger's other actions' checks.
func (g *Guard) escalation(a *compiledAction, id *identity) limits.Escalation {
	esc := limits.Escalation{Ladder: a.ladder, Decay: a.decay}
	for i := range a.failures {
		r := &a.failures[i]
		if r.Shadow || a.shadow || !r.applies(id) {
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
			Name:    r.Name,
		})
		f := &esc.Failures[len(esc.Failures)-1]
		f.Distinct = g.distinctValue(r, id)
		if r.pendKind != "" {
			f.Pending = g.keys.key(r.pendKind, id, r.dim)
		}
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
