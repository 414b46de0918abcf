package abuse

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// maxNameBytes bounds action, rule and ledger names: they are part of Redis
// keys, header values and audit rows.
const maxNameBytes = 64

// MaxDuration bounds every duration of a policy (windows, ladder steps,
// decay) and the trust TTL: limits.MaxDuration (366 days), the longest the
// stores' millisecond arithmetic takes without overflow.
const MaxDuration = limits.MaxDuration

// MaxDurationText is MaxDuration as a config file writes it, for messages.
var MaxDurationText = fmt.Sprintf("%dh (%d days)", int64(MaxDuration/time.Hour), int64(MaxDuration/(24*time.Hour)))

// MaxRuleLimit bounds a rule's limit: a sliding-window log keeps one entry
// per counted attempt, so a huge limit is a huge ZSET per key.
const MaxRuleLimit = 1_000_000

// actionNameRE keeps action and ledger names safe inside Redis keys,
// metrics labels and RateLimit header strings.
var actionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// PolicyError is one problem of a policy. It names where the problem is so
// internal/config can point at the config file's line.
type PolicyError struct {
	// Action is the action's name; "" for the lists or the policy itself.
	Action string
	// Section is "limits", "failures", "lockout", "on_store_failure", the
	// action name itself ("name"), or for lists "allow" or "deny"; "" for
	// the action or the policy as a whole.
	Section string
	// Index is the position in a rule list, a ladder or a list's entries,
	// or -1.
	Index int
	// Field is the offending field ("dimension", "limit", "window",
	// "name", "ladder", "decay", "ledger", "count_denials", "users",
	// "devices", "cidrs"), or "".
	Field string
	// Message says what is wrong.
	Message string
	// PriorSection and PriorIndex, when PriorIndex >= 0, are the rule of
	// the same action that the problem clashes with (a rule name used
	// twice): Error says "by limits[0]", internal/config "on line N".
	PriorSection string
	PriorIndex   int
}

func (e *PolicyError) Error() string {
	if e.Section == "allow" || e.Section == "deny" {
		// A list entry is named as the config file writes it:
		// lists.allow.users[1].
		where := "lists." + e.Section
		if e.Field != "" {
			where += "." + e.Field
		}
		if e.Index >= 0 {
			where += fmt.Sprintf("[%d]", e.Index)
		}
		return where + ": " + e.Message
	}
	where := ""
	if e.Action != "" {
		where = fmt.Sprintf("action %q: ", e.Action)
	}
	if e.Section != "" && e.Section != "name" {
		where += e.Section
		switch {
		case e.Section == "lockout" && e.Index >= 0:
			// The index is a ladder step's: lockout.ladder[1].
			where += fmt.Sprintf(".%s[%d]", e.Field, e.Index)
		case e.Index >= 0:
			where += fmt.Sprintf("[%d]", e.Index)
			if e.Field != "" {
				where += "." + e.Field
			}
		case e.Field != "":
			where += "." + e.Field
		}
		where += ": "
	} else if e.Field != "" {
		where += e.Field + ": "
	}
	msg := where + e.Message
	if e.PriorIndex >= 0 && e.PriorSection != "" {
		msg += fmt.Sprintf(" by %s[%d]", e.PriorSection, e.PriorIndex)
	}
	return msg
}

// problems collects a policy's PolicyErrors.
type problems []error

func (ps *problems) add(e PolicyError) {
	if e.PriorSection == "" {
		e.PriorIndex = -1
	}
	*ps = append(*ps, &e)
}

// Validate fills the policy's defaults and checks it, so that Guard never
// runs a policy it half understood. Defaults: rule names "action/dimension"
// and "action/dimension/failures", the ledger is the action's name, decay is
// DefaultDecay, on_store_failure is "local"; list users are normalised and
// IPv4-mapped CIDRs become IPv4. It rejects no actions, an action with
// neither limits nor failures, unknown dimensions, limits outside
// 1..MaxRuleLimit (MaxCounterLimit, MaxDistinctLimit for those kinds),
// unknown algorithms, an algorithm but log on a failure or distinct rule, a
// distinct field other than user or device or within the dimension, windows
// and ladder steps below 1ms, above MaxDuration or not in whole milliseconds,
// a decay above MaxDuration, two rules of one action on one
// dimension without distinct names, duplicate rule names, a distinct attempt
// rule sharing the set of a distinct failure rule that reserve_failures
// reaches, counter rules of different actions sharing a state with
// different windows (buckets: different limits or windows), an explicitly
// empty (non-nil) ladder, with failures or without, count_denials without
// failures, unknown on_store_failure values and malformed names or list
// entries. Every
// problem is reported: the error joins one *PolicyError per problem
// (errors.As finds the first). Validate modifies p in place; it is safe to
// call again on its own result. It is the policy's only validation: the
// config file's loader relies on it.
func (p *Policy) Validate() error {
	var ps problems
	if len(p.Actions) == 0 {
		ps.add(PolicyError{Index: -1, Message: "the policy has no actions (at least one action is required)"})
	}
	names := make([]string, 0, len(p.Actions))
	for name := range p.Actions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a := p.Actions[name]
		validateAction(&ps, name, &a)
		p.Actions[name] = a
	}
	validateReservedSets(&ps, p, names)
	validateSharedKinds(&ps, p, names)
	validateList(&ps, "allow", &p.Allow)
	validateList(&ps, "deny", &p.Deny)
	return errors.Join(ps...)
}

func validateAction(ps *problems, name string, a *Action) {
	fail := func(section string, index int, field, format string, args ...any) {
		ps.add(PolicyError{Action: name, Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	// Names derived from a bad action name (default rule names, the
	// default ledger) are not reported again.
	nameOK := actionNameRE.MatchString(name)
	if !nameOK {
		fail("name", -1, "", "%q is not a valid action name (letters, digits, _ . -, at most 64)", name)
	}
	if len(a.Limits) == 0 && len(a.Failures) == 0 {
		fail("", -1, "", "needs at least one rule in limits or failures")
	}
	// Copies (the caller's slices stay untouched), never nil, so the
	// effective policy shows empty lists as [] rather than null.
	a.Limits = append(make([]Rule, 0, len(a.Limits)), a.Limits...)
	a.Failures = append(make([]Rule, 0, len(a.Failures)), a.Failures...)
	validateRules(ps, name, nameOK, "limits", "", a.Limits, nil)
	validateRules(ps, name, nameOK, "failures", "/failures", a.Failures, a.Limits)
	l := &a.Lockout
	if len(a.Failures) > 0 && l.Ladder == nil {
		// lockout (or its ladder) is optional (API.md): failures escalate
		// on the built-in policy's ladder.
		l.Ladder = defaultLadder
	}
	if l.Ladder != nil && len(l.Ladder) == 0 {
		// An explicit [] is refused with failures or without: it asks for
		// no lockout and for one at once. Without failures a ladder is
		// optional (it puts the ledger among those a manual lockout
		// without ledger covers); leaving it out is how to have none.
		fail("lockout", -1, "ladder", "ladder needs at least one step (lockout durations per level, e.g. [1m, 5m, 15m]); leave it out for the default")
	}
	if l.CountDenials && len(a.Failures) == 0 {
		fail("lockout", -1, "count_denials", "count_denials needs failures rules to record the denials in")
	}
	if a.ReserveFailures && len(a.Failures) == 0 {
		fail("", -1, "reserve_failures", "reserve_failures needs failures rules to reserve in")
	}
	// A copy (the caller's slice stays untouched); an action without a
	// ladder keeps a nil one, so that validating the result again does
	// not take it for an explicit [].
	l.Ladder = slices.Clone(l.Ladder)
	for i, step := range l.Ladder {
		if msg := checkDuration(step); msg != "" {
			fail("lockout", i, "ladder", "ladder step %s", msg)
		}
	}
	switch {
	case l.Decay < 0 || l.Decay%time.Millisecond != 0:
		fail("lockout", -1, "decay", "decay %v must be positive, in whole milliseconds", l.Decay)
	case l.Decay > MaxDuration:
		fail("lockout", -1, "decay", "decay must be at most %s, not %v", MaxDurationText, l.Decay)
	case l.Decay == 0:
		l.Decay = DefaultDecay
	}
	explicitLedger := l.Ledger != ""
	if !explicitLedger {
		l.Ledger = name
	}
	if (explicitLedger || nameOK) && !actionNameRE.MatchString(l.Ledger) {
		fail("lockout", -1, "ledger", "ledger %q is not a valid ledger name (letters, digits, _ . -, at most 64)", l.Ledger)
	}
	switch a.OnStoreFailure {
	case "":
		a.OnStoreFailure = OnFailureLocal
	case OnFailureLocal, OnFailureAllow, OnFailureDeny:
	default:
		fail("on_store_failure", -1, "", "on_store_failure must be local, allow or deny, not %q", a.OnStoreFailure)
	}
}

// checkDuration is the rule for windows and ladder steps.
// validateReservedSets refuses an attempt rule that shares its name and
// dimension, and so its distinct set, with a distinct failure rule that
// reserve_failures reaches: the reservations hold their values in the
// failure rule's pending set, which only failure rules count, so the
// attempt rule would count fewer values than are held.
func validateReservedSets(ps *problems, p *Policy, names []string) {
	type set struct{ name, dim string }
	reserved := map[set]string{} // a set -> an action that reserves it
	for _, name := range names {
		a := p.Actions[name]
		if !a.ReserveFailures {
			continue
		}
		for _, r := range a.Failures {
			if k := (set{r.Name, r.Dimension}); r.Distinct != "" && reserved[k] == "" {
				reserved[k] = name
			}
		}
	}
	for _, name := range names {
		for i, r := range p.Actions[name].Limits {
			if by := reserved[set{r.Name, r.Dimension}]; by != "" && r.Distinct != "" {
				ps.add(PolicyError{Action: name, Section: "limits", Index: i, Field: "name",
					Message: fmt.Sprintf("rule name %q is a distinct failure rule's in action %q, whose reserve_failures holds values that an attempt rule would not count; give this rule another name", r.Name, by)})
			}
		}
	}
}

// validateSharedKinds refuses counter and bucket rules of different
// actions that share their state (one name and dimension, so one key)
// but not their model: a counter's sub-windows are aligned on its window,
// so one of another window rolls (and empties) the other's sub-window,
// and a bucket refills at limit per window, so one of another limit or
// window hands the other tokens at its own rate. Either would admit more
// than the rule's own model. Logs and distinct sets keep stamps, and
// counters of one window share counts, each rule applying its own limit.
func validateSharedKinds(ps *problems, p *Policy, names []string) {
	type state struct{ name, dim, alg string }
	type first struct {
		action string
		rule   *Rule
	}
	seen := map[state]first{}
	for _, name := range names {
		a := p.Actions[name]
		for i := range a.Limits {
			r := &a.Limits[i]
			if r.Distinct != "" || r.Algorithm != AlgCounter && r.Algorithm != AlgBucket || r.Name == "" {
				continue
			}
			k := state{r.Name, r.Dimension, r.Algorithm}
			f, ok := seen[k]
			if !ok {
				seen[k] = first{name, r}
				continue
			}
			if f.action == name {
				continue // a name used twice in one action is reported already
			}
			field, what := "", ""
			switch {
			case r.Window != f.rule.Window:
				field, what = "window", fmt.Sprintf("window %v", f.rule.Window)
			case r.Algorithm == AlgBucket && r.Limit != f.rule.Limit:
				field, what = "limit", fmt.Sprintf("limit %d", f.rule.Limit)
			default:
				continue
			}
			ps.add(PolicyError{Action: name, Section: "limits", Index: i, Field: field,
				Message: fmt.Sprintf("rule %q shares its %s state with the rule of that name in action %q, which has %s: a shared %s needs the same %s; give this rule another name",
					r.Name, r.Algorithm, f.action, what, r.Algorithm, sharedNeeds(r.Algorithm))})
		}
	}
}

// sharedNeeds is what rules sharing a state of algorithm alg must agree on.
func sharedNeeds(alg string) string {
	if alg == AlgBucket {
		return "limit and window"
	}
	return "window"
}

func checkDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("must be at least 1ms, not %v", d)
	case d%time.Millisecond != 0:
		return fmt.Sprintf("must be whole milliseconds, not %v", d)
	case d > MaxDuration:
		return fmt.Sprintf("must be at most %s, not %v", MaxDurationText, d)
	}
	return ""
}

// validateRules checks one rule list of an action; others are the rules
// already checked (limits, when checking failures), whose names the list
// must not reuse. nameOK says the action's name is valid, so that default
// rule names made from it are worth checking.
func validateRules(ps *problems, action string, nameOK bool, section, suffix string, rules, others []Rule) {
	fail := func(index int, field, format string, args ...any) *PolicyError {
		ps.add(PolicyError{Action: action, Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)})
		return (*ps)[len(*ps)-1].(*PolicyError)
	}
	perDim := map[string]int{}
	for _, r := range rules {
		perDim[r.Dimension+distinctSuffix(&r)]++
	}
	type at struct {
		section string
		index   int
	}
	seen := map[string]at{}
	for i, r := range others {
		seen[r.Name] = at{"limits", i}
	}
	for i := range rules {
		r := &rules[i]
		ok := true
		if _, known := parseDim(r.Dimension); !known {
			fail(i, "dimension", "unknown dimension %q (known: %s)", r.Dimension, strings.Join(Dimensions, ", "))
			ok = false
		}
		if maxLimit := ruleMaxLimit(r); r.Limit < 1 || r.Limit > maxLimit {
			fail(i, "limit", "limit must be between 1 and %d, not %d", maxLimit, r.Limit)
		}
		if msg := checkDuration(r.Window); msg != "" {
			fail(i, "window", "window %s", msg)
		}
		for _, p := range validateKind(r, section == "failures") {
			fail(i, p.field, "%s", p.msg)
		}
		switch {
		case section != "limits":
			if r.OnLimit != "" {
				fail(i, "on_limit", "on_limit applies to limits only (a full failure rule strikes)")
			}
		case r.OnLimit == "":
			r.OnLimit = OnLimitDeny
		case r.OnLimit != OnLimitDeny && r.OnLimit != OnLimitChallenge:
			fail(i, "on_limit", "on_limit must be deny or challenge, not %q", r.OnLimit)
		}
		if r.Name == "" {
			if !ok {
				continue
			}
			if n := perDim[r.Dimension+distinctSuffix(r)]; n > 1 {
				fail(i, "name", "%d rules on dimension %q: each needs its own name", n, r.Dimension)
				continue
			}
			r.Name = action + "/" + r.Dimension + distinctSuffix(r) + suffix
			if !nameOK {
				continue
			}
		}
		if msg := checkName(r.Name); msg != "" {
			fail(i, "name", "rule name %s", msg)
			continue
		}
		if prior, dup := seen[r.Name]; dup {
			e := fail(i, "name", "rule name %q is already used", r.Name)
			e.PriorSection, e.PriorIndex = prior.section, prior.index
			continue
		}
		seen[r.Name] = at{section, i}
	}
}

// checkName allows the characters that are safe in a Redis key segment, a
// quoted RateLimit header item and the lock info format: printable ASCII
// without white space, quotes, backslash or '|'.
func checkName(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > maxNameBytes {
		return fmt.Sprintf("%q is longer than %d bytes", s, maxNameBytes)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '|' {
			return fmt.Sprintf("%q may hold only printable ASCII without white space, quotes, backslash or '|'", s)
		}
	}
	return ""
}

func validateList(ps *problems, section string, l *List) {
	fail := func(index int, field, format string, args ...any) {
		ps.add(PolicyError{Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	cidrs := make([]netip.Prefix, len(l.CIDRs))
	for i, p := range l.CIDRs {
		switch {
		case !p.IsValid():
			fail(i, "cidrs", "invalid CIDR")
		case p.Addr().Zone() != "":
			fail(i, "cidrs", "CIDR %s must not carry a zone", p)
		default:
			cidrs[i] = unmapPrefix(p)
		}
	}
	l.CIDRs = cidrs
	users := make([]string, len(l.Users))
	for i, u := range l.Users {
		if u == "" {
			fail(i, "users", "must not be empty")
			continue
		}
		n, err := NormalizeUser(u)
		if err != nil {
			fail(i, "users", "%s", inputMessage(err))
		}
		users[i] = n
	}
	l.Users = users
	devices := make([]string, len(l.Devices))
	for i, d := range l.Devices {
		if d == "" {
			fail(i, "devices", "must not be empty")
			continue
		}
		if _, err := NormalizeDevice(d); err != nil {
			fail(i, "devices", "%s", inputMessage(err))
		}
		devices[i] = d
	}
	l.Devices = devices
	countries := make([]string, len(l.Countries))
	for i, c := range l.Countries {
		r, ok := NormalizeRegion(c)
		if !ok {
			fail(i, "countries", "%q is not an ISO 3166 region with a numbering plan (e.g. GB, US; %s for non-geographic numbers)", c, NonGeoRegion)
		}
		countries[i] = r
	}
	l.Countries = countries
}

// inputMessage is what is wrong with a list entry, without the API's error
// code and field (the problem names the entry).
func inputMessage(err error) string {
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Message
	}
	return err.Error()
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) into
// its IPv4 form (10.0.0.0/8), since requests are unmapped before matching;
// a mapped prefix shorter than /96 also covers non-mapped addresses and
// stays as it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}
