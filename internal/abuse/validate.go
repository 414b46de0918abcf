package abuse

import (
	"fmt"
	"net/netip"
	"sort"
	"time"
)

// maxNameBytes bounds action, rule and ledger names: they are part of Redis
// keys, header values and audit rows.
const maxNameBytes = 64

// PolicyError is a policy the validator rejects. It names where the problem
// is so cmd/guard can point at the config file's line.
type PolicyError struct {
	// Action is the action's name; "" for the lists or the policy itself.
	Action string
	// Section is "limits", "failures", "lockout", "on_store_failure", the
	// action name itself ("name"), or for lists "allow" or "deny"; "" for
	// the policy as a whole.
	Section string
	// Index is the position in a rule list or list section, or -1.
	Index int
	// Field is the offending field ("dimension", "limit", "window",
	// "name", "ladder", "decay", "ledger", "count_denials", "users",
	// "devices", "cidrs"), or "".
	Field string
	// Message says what is wrong.
	Message string
}

func (e *PolicyError) Error() string {
	where := ""
	switch {
	case e.Action != "":
		where = fmt.Sprintf("action %q: ", e.Action)
	case e.Section == "allow" || e.Section == "deny":
		where = "lists: "
	}
	if e.Section != "" && e.Section != "name" {
		where += e.Section
		if e.Index >= 0 {
			where += fmt.Sprintf("[%d]", e.Index)
		}
		if e.Field != "" {
			where += "." + e.Field
		}
		where += ": "
	} else if e.Field != "" {
		where += e.Field + ": "
	}
	return where + e.Message
}

// Validate fills the policy's defaults and checks it, so that Guard never
// runs a policy it half understood. Defaults: rule names "action/dimension"
// and "action/dimension/failures", the ledger is the action's name, decay is
// DefaultDecay, on_store_failure is "local"; list users are normalised and
// IPv4-mapped CIDRs become IPv4. It rejects (with a *PolicyError) no
// actions, an action with neither limits nor failures, unknown dimensions,
// limits below 1, windows below 1ms or not in whole milliseconds, two rules
// of one action on one dimension without distinct names, duplicate rule
// names, failures without a ladder, count_denials without failures, unknown
// on_store_failure values and malformed names or list entries. Validate
// modifies p in place; it is safe to call again on its own result.
func (p *Policy) Validate() error {
	if len(p.Actions) == 0 {
		return &PolicyError{Index: -1, Message: "the policy has no actions"}
	}
	names := make([]string, 0, len(p.Actions))
	for name := range p.Actions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a := p.Actions[name]
		if err := validateAction(name, &a); err != nil {
			return err
		}
		p.Actions[name] = a
	}
	if err := validateList("allow", &p.Allow); err != nil {
		return err
	}
	return validateList("deny", &p.Deny)
}

func validateAction(name string, a *Action) error {
	fail := func(section string, index int, field, format string, args ...any) error {
		return &PolicyError{Action: name, Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if msg := checkName(name); msg != "" {
		return fail("name", -1, "", "action name %s", msg)
	}
	if len(a.Limits) == 0 && len(a.Failures) == 0 {
		return fail("", -1, "", "needs limits or failures (at least one rule)")
	}
	// Copies (the caller's slices stay untouched), never nil, so the
	// effective policy shows empty lists as [] rather than null.
	a.Limits = append(make([]Rule, 0, len(a.Limits)), a.Limits...)
	a.Failures = append(make([]Rule, 0, len(a.Failures)), a.Failures...)
	if err := validateRules(name, "limits", "", a.Limits); err != nil {
		return err
	}
	if err := validateRules(name, "failures", "/failures", a.Failures); err != nil {
		return err
	}
	l := &a.Lockout
	if len(a.Failures) > 0 && len(l.Ladder) == 0 {
		return fail("lockout", -1, "ladder", "failures need a lockout ladder (at least one step)")
	}
	if l.CountDenials && len(a.Failures) == 0 {
		return fail("lockout", -1, "count_denials", "count_denials needs failure rules to record denials in")
	}
	l.Ladder = append(make([]time.Duration, 0, len(l.Ladder)), l.Ladder...)
	for i, step := range l.Ladder {
		if step < time.Millisecond || step%time.Millisecond != 0 {
			return fail("lockout", i, "ladder", "step %v must be at least 1ms in whole milliseconds", step)
		}
	}
	switch {
	case l.Decay < 0 || l.Decay%time.Millisecond != 0:
		return fail("lockout", -1, "decay", "decay %v must be positive, in whole milliseconds", l.Decay)
	case l.Decay == 0:
		l.Decay = DefaultDecay
	}
	if l.Ledger == "" {
		l.Ledger = name
	}
	if msg := checkName(l.Ledger); msg != "" {
		return fail("lockout", -1, "ledger", "ledger name %s", msg)
	}
	switch a.OnStoreFailure {
	case "":
		a.OnStoreFailure = OnFailureLocal
	case OnFailureLocal, OnFailureAllow, OnFailureDeny:
	default:
		return fail("on_store_failure", -1, "", "unknown value %q (want local, allow or deny)", a.OnStoreFailure)
	}
	return nil
}

func validateRules(action, section, suffix string, rules []Rule) error {
	fail := func(index int, field, format string, args ...any) error {
		return &PolicyError{Action: action, Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	perDim := map[string]int{}
	for _, r := range rules {
		perDim[r.Dimension]++
	}
	seen := map[string]int{}
	for i := range rules {
		r := &rules[i]
		if _, ok := parseDim(r.Dimension); !ok {
			return fail(i, "dimension", "unknown dimension %q (want user, ip, device, user+ip or user+device)", r.Dimension)
		}
		if r.Limit < 1 {
			return fail(i, "limit", "limit %d is below 1", r.Limit)
		}
		if r.Window < time.Millisecond || r.Window%time.Millisecond != 0 {
			return fail(i, "window", "window %v must be at least 1ms in whole milliseconds", r.Window)
		}
		if r.Name == "" {
			if perDim[r.Dimension] > 1 {
				return fail(i, "name", "%d rules on dimension %s: each needs its own name", perDim[r.Dimension], r.Dimension)
			}
			r.Name = action + "/" + r.Dimension + suffix
		}
		if msg := checkName(r.Name); msg != "" {
			return fail(i, "name", "rule name %s", msg)
		}
		if j, dup := seen[r.Name]; dup {
			return fail(i, "name", "rule name %q is already used by %s[%d]", r.Name, section, j)
		}
		seen[r.Name] = i
	}
	return nil
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

func validateList(section string, l *List) error {
	fail := func(index int, field, format string, args ...any) error {
		return &PolicyError{Section: section, Index: index, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	cidrs := make([]netip.Prefix, len(l.CIDRs))
	for i, p := range l.CIDRs {
		if !p.IsValid() {
			return fail(i, "cidrs", "invalid CIDR")
		}
		if p.Addr().Zone() != "" {
			return fail(i, "cidrs", "CIDR %s must not carry a zone", p)
		}
		cidrs[i] = unmapPrefix(p)
	}
	l.CIDRs = cidrs
	users := make([]string, len(l.Users))
	for i, u := range l.Users {
		n, err := NormalizeUser(u)
		if err != nil {
			return fail(i, "users", "%v", err)
		}
		users[i] = n
	}
	l.Users = users
	devices := make([]string, len(l.Devices))
	for i, d := range l.Devices {
		if _, err := NormalizeDevice(d); err != nil {
			return fail(i, "devices", "%v", err)
		}
		devices[i] = d
	}
	l.Devices = devices
	return nil
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
