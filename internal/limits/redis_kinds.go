package limits

import (
	"fmt"
	"strconv"
)

// The Redis side of the rule kinds of kinds.go: the arguments of
// redis.lua's "other rules" section, its reply, and the undo calls of a
// Cluster decision that another slot denied.

// kindCode is a rule's kind letter in redis.lua.
func kindCode(r *Rule) string {
	switch {
	case r.Distinct != "":
		return "d"
	case r.Algorithm == AlgCounter:
		return "c"
	}
	return "b"
}

// kindKeep is the PX of a rule's key after a write: a counter's counts
// weigh until the end of the next sub-window, a bucket is full and a set
// empty after the longest window.
func kindKeep(r *Rule) int64 {
	if r.Algorithm == AlgCounter {
		return counterTTL(r.Keep, r.Window)
	}
	return keepMs(r.Keep, r.Window)
}

// otherArgs appends the group's other rules' section, "per rule: kind
// limit window keep flags member" (their keys follow the check's trust
// record in KEYS, their count is in its header).
func (g *callGroup) otherArgs(a *callArgs, rules []Rule) {
	for _, i := range g.others {
		r := &rules[i]
		a.tok(kindCode(r))
		a.hex(int64(r.Limit))
		a.hex(r.Window.Milliseconds())
		a.hex(kindKeep(r))
		a.hex(int64(ruleFlags(r)))
		a.vary(r.Distinct)
	}
}

// otherReply is what redis.lua saw of one other rule before the attempt
// (see its header): a, b, c and d by kind, at what to undo.
type otherReply struct {
	a, b, c int64
	d       string // bucket: tokens ("%.17g"); distinct: a stamp
	at      int64
}

// others reads the "nO {a b c d at}" section.
func (r *replyReader) others(want int) []otherReply {
	n := int(r.int())
	if r.err == nil && n != want {
		r.err = fmt.Errorf("reply has %d other rules, want %d", n, want)
	}
	if r.err != nil || n == 0 {
		return nil
	}
	out := make([]otherReply, n)
	for i := range out {
		o := &out[i]
		o.a, o.b, o.c = r.int(), r.int(), r.int()
		switch v := r.next().(type) {
		case int64:
			o.d = strconv.FormatInt(v, 10)
		case string:
			o.d = v
		default:
			if r.err == nil {
				r.err = fmt.Errorf("reply value %d is %T, want integer or string", r.i-1, v)
			}
		}
		o.at = r.int()
	}
	return out
}

// result answers the rule from the reply; allowed is the whole decision.
func (o *otherReply) result(rule *Rule, cost int, allowed bool, now int64) RuleResult {
	switch {
	case rule.Distinct != "":
		other, _ := strconv.ParseInt(o.d, 10, 64)
		return distinctResult(rule, allowed, now, int(o.a), o.b == 1, o.c, other)
	case rule.Algorithm == AlgCounter:
		return counterResult(rule, cost, allowed, now, o.a, o.b, o.c)
	}
	tokens, err := strconv.ParseFloat(o.d, 64)
	if err != nil {
		tokens = 0 // unreadable: answer as empty (stricter)
	}
	return bucketResult(rule, cost, allowed, now, tokens, o.a)
}

// undoCalls are the undo ops that take back what the other rules of the
// slots which allowed their share of a denied decision recorded.
func undoCalls(req *CheckRequest, groups []*callGroup, replies []checkReply) []*pending {
	var calls []*pending
	for gi, g := range groups {
		if !replies[gi].allowed {
			continue
		}
		for j, ri := range g.others {
			at := replies[gi].others[j].at
			if at == 0 {
				continue
			}
			r := &req.Rules[ri]
			calls = append(calls, &pending{
				keys: []string{r.Key},
				args: undoArgs(r, replies[gi].others[j].spent(r, req.Cost, replies[gi].now), at),
			})
		}
	}
	return calls
}

// spent is what the undo of rule r's share gives back: cost, but for a
// counter whose count saturated only what was added, and for a bucket
// that a passed challenge spent below cost tokens (bucketSpend clamps it
// at 0) only the level it held, so the undone rule holds what it held
// before, not more. It is the one decimal number among the
// script's arguments, since that level may be a fraction.
func (o *otherReply) spent(r *Rule, cost int, now int64) string {
	if kindCode(r) == "c" && r.Passed {
		// A passed challenge's count saturates (counterAdd): give back
		// what it added, so the undone count is what it was before.
		return strconv.FormatInt(counterAdd(o.b, cost)-o.b, 10)
	}
	if kindCode(r) != "b" || !r.Passed {
		return strconv.Itoa(cost)
	}
	tokens, err := strconv.ParseFloat(o.d, 64)
	if err != nil {
		return "0" // unreadable: give nothing back (stricter)
	}
	if level := bucketAt(now, tokens, o.a, r.Limit, r.Window.Milliseconds()); level < float64(cost) {
		return strconv.FormatFloat(level, 'g', -1, 64)
	}
	return strconv.Itoa(cost)
}

// undoArgs is the ARGV of the undo of rule r's share (redis.lua "undo").
func undoArgs(r *Rule, spent string, at int64) []any {
	var a callArgs
	a.start("undo", 1)
	a.tok(kindCode(r))
	a.tok(spent)
	a.hex(at)
	a.hex(int64(r.Limit))
	a.hex(r.Window.Milliseconds())
	a.vary(r.Distinct)
	return a.args()
}
