package main

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/guardhq/guard/internal/abuse"
)

// maxRuleLimit bounds a rule's limit: a sliding-window log keeps one entry
// per counted attempt, so a huge limit is a huge ZSET per key.
const maxRuleLimit = 1_000_000

// actionNameRE keeps action names safe inside Redis keys, metrics labels and
// RateLimit header strings.
var actionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ruleNameRE keeps rule names printable and free of the quote and backslash
// that would break the RateLimit headers' quoted strings.
var ruleNameRE = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7b\x7d\x7e]{1,64}$`)

// policyLines remembers where each part of the policy came from in the
// file, so errors found later by abuse's own validation (*abuse.PolicyError:
// action, section, index, field) still point at a line.
type policyLines struct {
	at    map[string]int
	lists int
}

func lineKey(action, section string, index int, field string) string {
	return fmt.Sprintf("%s|%s|%d|%s", action, section, index, field)
}

func (l *policyLines) mark(n *yaml.Node, action, section string, index int, field string) {
	if l == nil || n == nil {
		return
	}
	if l.at == nil {
		l.at = map[string]int{}
	}
	l.at[lineKey(action, section, index, field)] = n.Line
}

// line finds the most precise line known for a policy error's position.
func (l *policyLines) line(e *abuse.PolicyError) int {
	for _, k := range []string{
		lineKey(e.Action, e.Section, e.Index, e.Field),
		lineKey(e.Action, e.Section, e.Index, ""),
		lineKey(e.Action, e.Section, -1, e.Field),
		lineKey(e.Action, e.Section, -1, ""),
		lineKey(e.Action, "", -1, ""),
	} {
		if line, ok := l.at[k]; ok {
			return line
		}
	}
	return l.lists
}

// decodeActions turns the `actions` mapping into policy actions.
func (d *yamlDecoder) decodeActions(n *yaml.Node, lines *policyLines) map[string]abuse.Action {
	out := map[string]abuse.Action{}
	entries := d.entries(n, "actions")
	if len(entries) == 0 && !d.failed() {
		d.errorf(resolve(n), "actions: at least one action is required when the key is present (omit it for the built-in default policy)")
	}
	for _, e := range entries {
		name := e.key.Value
		if !actionNameRE.MatchString(name) {
			d.errorf(e.key, "actions: %q is not a valid action name (letters, digits, _ . -, at most 64)", name)
			continue
		}
		lines.mark(e.key, name, "", -1, "")
		lines.mark(e.key, name, "name", -1, "")
		out[name] = d.decodeAction(name, e, lines)
	}
	return out
}

func (d *yamlDecoder) failed() bool { return len(d.errs) > 0 }

func (d *yamlDecoder) decodeAction(name string, e field, lines *policyLines) abuse.Action {
	what := "actions." + name
	a := abuse.Action{OnStoreFailure: abuse.OnFailureLocal}
	m := d.mapping(e.val, what, "limits", "failures", "lockout", "on_store_failure", "shadow")
	names := map[string]int{}
	if f, ok := m["limits"]; ok {
		lines.mark(f.key, name, "limits", -1, "")
		a.Limits = d.decodeRules(name, f, what+".limits", "", names, lines)
	}
	if f, ok := m["failures"]; ok {
		lines.mark(f.key, name, "failures", -1, "")
		a.Failures = d.decodeRules(name, f, what+".failures", "/failures", names, lines)
	}
	if len(a.Limits) == 0 && len(a.Failures) == 0 {
		d.errorf(e.key, "%s: needs at least one rule in limits or failures", what)
	}
	lockout, hasLockout := m["lockout"]
	if hasLockout {
		lines.mark(lockout.key, name, "lockout", -1, "")
		a.Lockout = d.decodeLockout(name, lockout, what+".lockout", lines)
	}
	if len(a.Failures) > 0 && !hasLockout {
		d.errorf(m["failures"].key, "%s: failures need a lockout (ladder) to escalate to", what)
	}
	if a.Lockout.CountDenials && len(a.Failures) == 0 {
		d.errorf(lockout.key, "%s.lockout: count_denials needs failures rules to record the denials in", what)
	}
	if f, ok := m["on_store_failure"]; ok {
		lines.mark(f.val, name, "on_store_failure", -1, "")
		var s string
		d.str(f, what+".on_store_failure", &s)
		switch s {
		case abuse.OnFailureLocal, abuse.OnFailureAllow, abuse.OnFailureDeny:
			a.OnStoreFailure = s
		default:
			d.errorf(f.val, "%s.on_store_failure must be local, allow or deny, not %q", what, s)
		}
	}
	if f, ok := m["shadow"]; ok {
		d.boolean(f, what+".shadow", &a.Shadow)
	}
	return a
}

// decodeRules decodes a list of rules; suffix is appended to default names
// ("/failures" for failure rules) so they never clash with attempt rules.
// names collects every rule name of the action (name → line) so limits and
// failures cannot share one.
func (d *yamlDecoder) decodeRules(action string, f field, what, suffix string, names map[string]int, lines *policyLines) []abuse.Rule {
	section := strings.TrimPrefix(what, "actions."+action+".")
	items := d.sequence(f.val, what)
	rules := make([]abuse.Rule, 0, len(items))
	var explicit []bool
	var nodes []*yaml.Node
	for i, n := range items {
		rw := fmt.Sprintf("%s[%d]", what, i)
		m := d.mapping(n, rw, "dimension", "limit", "window", "shadow", "name")
		lines.mark(n, action, section, len(rules), "")
		for k, v := range m {
			lines.mark(v.val, action, section, len(rules), k)
		}
		r := abuse.Rule{}
		ok := true
		if df, has := m["dimension"]; has {
			d.str(df, rw+".dimension", &r.Dimension)
			if !contains(abuse.Dimensions, r.Dimension) {
				d.errorf(df.val, "%s.dimension: unknown dimension %q (known: %s)", rw, r.Dimension, strings.Join(abuse.Dimensions, ", "))
				ok = false
			}
		} else {
			d.errorf(n, "%s: dimension is required", rw)
			ok = false
		}
		if lf, has := m["limit"]; has {
			d.integer(lf, rw+".limit", 1, maxRuleLimit, &r.Limit)
		} else {
			d.errorf(n, "%s: limit is required", rw)
		}
		if wf, has := m["window"]; has {
			d.duration(wf.val, rw+".window", time.Millisecond, &r.Window)
		} else {
			d.errorf(n, "%s: window is required", rw)
		}
		if sf, has := m["shadow"]; has {
			d.boolean(sf, rw+".shadow", &r.Shadow)
		}
		if nf, has := m["name"]; has {
			d.str(nf, rw+".name", &r.Name)
			if !ruleNameRE.MatchString(r.Name) {
				d.errorf(nf.val, "%s.name %q must be 1 to 64 printable ASCII characters without white space, quotes, backslash or '|'", rw, r.Name)
				ok = false
			}
		}
		if !ok {
			continue
		}
		explicit = append(explicit, r.Name != "")
		if r.Name == "" {
			r.Name = action + "/" + r.Dimension + suffix
		}
		rules = append(rules, r)
		nodes = append(nodes, n)
	}
	perDim := map[string]int{}
	for _, r := range rules {
		perDim[r.Dimension]++
	}
	for i, r := range rules {
		// The default name is the same for every rule on a dimension.
		if perDim[r.Dimension] > 1 && !explicit[i] {
			d.errorf(nodes[i], "%s: %d rules on dimension %q: each needs its own name", what, perDim[r.Dimension], r.Dimension)
			continue
		}
		if line, dup := names[r.Name]; dup {
			d.errorf(nodes[i], "%s: rule name %q is already used on line %d", what, r.Name, line)
			continue
		}
		names[r.Name] = nodes[i].Line
	}
	return rules
}

func (d *yamlDecoder) decodeLockout(action string, f field, what string, lines *policyLines) abuse.Lockout {
	l := abuse.Lockout{Ledger: action, Decay: abuse.DefaultDecay}
	m := d.mapping(f.val, what, "ladder", "decay", "ledger", "count_denials")
	for k, v := range m {
		lines.mark(v.val, action, "lockout", -1, k)
	}
	lf, ok := m["ladder"]
	if !ok {
		d.errorf(f.key, "%s: ladder is required (lockout durations per level, e.g. [1m, 5m, 15m])", what)
	}
	items := d.sequence(lf.val, what+".ladder")
	if ok && len(items) == 0 {
		d.errorf(lf.val, "%s.ladder needs at least one step", what)
	}
	for i, n := range items {
		lines.mark(n, action, "lockout", i, "ladder")
		var step time.Duration
		if d.duration(n, fmt.Sprintf("%s.ladder[%d]", what, i), time.Millisecond, &step) {
			l.Ladder = append(l.Ladder, step)
		}
	}
	if df, ok := m["decay"]; ok {
		d.duration(df.val, what+".decay", time.Millisecond, &l.Decay)
	}
	if gf, ok := m["ledger"]; ok {
		d.str(gf, what+".ledger", &l.Ledger)
		if !actionNameRE.MatchString(l.Ledger) {
			d.errorf(gf.val, "%s.ledger %q is not a valid ledger name (letters, digits, _ . -, at most 64)", what, l.Ledger)
		}
	}
	if cf, ok := m["count_denials"]; ok {
		d.boolean(cf, what+".count_denials", &l.CountDenials)
	}
	return l
}

// decodeLists decodes `lists: {allow: {...}, deny: {...}}`.
func (d *yamlDecoder) decodeLists(n *yaml.Node, lines *policyLines) (allow, deny abuse.List) {
	m := d.mapping(n, "lists", "allow", "deny")
	if f, ok := m["allow"]; ok {
		allow = d.decodeList(f, "allow", lines)
	}
	if f, ok := m["deny"]; ok {
		deny = d.decodeList(f, "deny", lines)
	}
	return allow, deny
}

func (d *yamlDecoder) decodeList(f field, section string, lines *policyLines) abuse.List {
	var l abuse.List
	what := "lists." + section
	lines.mark(f.key, "", section, -1, "")
	m := d.mapping(f.val, what, "cidrs", "users", "devices")
	for k, v := range m {
		lines.mark(v.key, "", section, -1, k)
		for i, item := range d.sequence(v.val, what+"."+k) {
			lines.mark(item, "", section, i, k)
		}
	}
	if c, ok := m["cidrs"]; ok {
		d.prefixes(c, what+".cidrs", &l.CIDRs)
	}
	if u, ok := m["users"]; ok {
		d.strings(u, what+".users", &l.Users)
	}
	if v, ok := m["devices"]; ok {
		d.strings(v, what+".devices", &l.Devices)
	}
	return l
}
