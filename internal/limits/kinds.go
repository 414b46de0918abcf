package limits

import (
	"math"
	"time"
)

// Rule kinds beside the sliding-window log (contract v1.1): the
// sliding-window counter and the token bucket (Rule.Algorithm), and the
// distinct-count set (Rule.Distinct). Every store decides them with the
// predicates below and answers them with the result functions below, so
// the memory store and redis.lua agree to the last bit: redis.lua repeats
// only the allow predicates, written with the same floating-point
// operations in the same order (IEEE doubles in both), and returns the raw
// state, from which these functions compute remaining, reset and
// retry-after.
//
// # Counter
//
// Sub-windows of length W start at multiples of W since the Unix epoch.
// The state is the sub-window's start and the counts of the current (cur)
// and the previous (prev) sub-window. At now, with e = now - start, the
// estimate is cur + prev*(W-e)/W; an attempt of cost c is allowed iff
// estimate + c <= L, and then adds c to cur. The key lives 2W after its
// last write (its counts then weigh nothing).
//
// # Bucket
//
// Capacity L tokens, refilled continuously at L per W; a new key is full.
// The state is the token level at the last spend and that spend's time; an
// attempt of cost c is allowed iff the refilled level >= c, and then spends
// c. The key lives W after its last spend (it is full by then, and a
// missing key is full).
//
// # Distinct set
//
// Each member is a distinct value (Rule.Distinct, fixed DistinctBytes
// long) with the time it was last seen; the set is trimmed like a log. An
// attempt is allowed iff its value is in the window's set or fewer than L
// values are; an allowed attempt adds or refreshes its value. As a failure
// rule, the failure adds or refreshes its value, and L values are a strike
// (the set is emptied). The key lives Keep after its newest member.
//
// # Challenges
//
// A rule with Passed (store.go) is allowed whatever its state and records
// the attempt: a counter adds c (and may exceed L), a bucket spends c but
// never below 0 tokens (bucketSpend), a distinct set adds or refreshes the
// value and keeps at most max(L+1, PassedKeep) values (distinctMost). The
// pass thus counts against later attempts without one, and no state grows
// without bound.

// Algorithm is how an attempt rule counts.
type Algorithm uint8

const (
	// AlgLog is the exact sliding-window log (the default).
	AlgLog Algorithm = iota
	// AlgCounter is the sliding-window counter: O(1) memory, approximate
	// at sub-window edges.
	AlgCounter
	// AlgBucket is the token bucket: bursts up to L, refilled at L per W.
	AlgBucket
)

// String returns the algorithm's config and wire name.
func (a Algorithm) String() string {
	switch a {
	case AlgLog:
		return "log"
	case AlgCounter:
		return "counter"
	case AlgBucket:
		return "bucket"
	}
	return "unknown"
}

// DistinctBytes is the length of every distinct value (Rule.Distinct,
// FailureRule.Distinct): 64 bits of a keyed hash, which keeps a set of a
// few hundred values free of collisions and compact (14 bytes per member
// in Redis).
const DistinctBytes = 8

// isLog reports whether r is a sliding-window log (neither another
// algorithm nor a distinct set).
func (r *Rule) isLog() bool { return r.Algorithm == AlgLog && r.Distinct == "" }

// counterAt returns the counter estimate at t of a state whose current
// sub-window starts at start (a multiple of w), rolled forward to t.
func counterAt(t, start, cur, prev, w int64) float64 {
	k := t - t%w
	switch {
	case k <= start:
		// Same sub-window (or a clock that stepped back: no decay).
		e := max(t-start, 0)
		return float64(cur) + float64(float64(prev)*float64(w-e))/float64(w)
	case k == start+w:
		return float64(float64(cur)*float64(w-(t-k))) / float64(w)
	}
	return 0
}

// counterRoll moves a counter state to now's sub-window.
func counterRoll(now, start, cur, prev, w int64) (int64, int64, int64) {
	k := now - now%w
	switch {
	case k <= start:
		return start, cur, prev
	case k == start+w:
		return k, 0, cur
	}
	return k, 0, 0
}

// maxCounterCount is the most one sub-window's count holds: redis.lua
// keeps each count in 4 bytes. Limits stop at MaxCounterLimit (1e9), so
// only passed challenges (which add cost beyond the limit) get there; a
// count that saturates instead of wrapping around stays over 4 times any
// limit, so it keeps challenging.
const maxCounterCount = 1<<32 - 1

// counterAdd is a count after an admitted attempt adds cost to it,
// saturated at maxCounterCount (redis.lua does the same).
func counterAdd(cur int64, cost int) int64 { return min(cur+int64(cost), maxCounterCount) }

// counterFits is the counter's allow predicate: estimate + cost <= limit.
func counterFits(est float64, cost, limit int) bool {
	return est+float64(cost) <= float64(limit)
}

// counterResult answers a counter rule whose state at now (rolled) is
// start, cur, prev; recorded says the attempt was counted (or would have
// been, for a dry run).
func counterResult(rule *Rule, cost int, recorded bool, now, start, cur, prev int64) RuleResult {
	w := rule.Window.Milliseconds()
	est := counterAt(now, start, cur, prev, w)
	fits := counterFits(est, cost, rule.Limit) || rule.Passed
	if recorded && fits {
		cur = counterAdd(cur, cost)
		est = counterAt(now, start, cur, prev, w)
	}
	rr := RuleResult{Allowed: fits, Count: int(math.Ceil(est))}
	rr.Remaining = max(int(math.Floor(float64(rule.Limit)-est)), 0)
	switch {
	case cur > 0:
		rr.Reset = msDur(start + 2*w - now)
	case prev > 0:
		rr.Reset = msDur(start + w - now)
	}
	if !fits {
		// The estimate never rises without arrivals, so the first
		// millisecond at which cost fits is found by bisection; at
		// start+2w every count weighs nothing and any cost <= limit fits.
		at := firstMs(now+1, max(start+2*w, now+1), func(t int64) bool {
			return counterFits(counterAt(t, start, cur, prev, w), cost, rule.Limit)
		})
		rr.RetryAfter = msDur(at - now)
	}
	return rr
}

// bucketAt returns the token level at t of a bucket that held tokens at
// last (last 0: a new key, full).
func bucketAt(t int64, tokens float64, last int64, limit int, w int64) float64 {
	el := t - last
	switch {
	case last == 0 || el >= w:
		return float64(limit)
	case el <= 0:
		// No time passed (or the clock stepped back); capped, since the
		// key's limit may have been lowered since the last spend.
		return min(float64(limit), tokens)
	}
	// In floating point, as the Lua library (one rounding of the product,
	// the same result), so a limit of 1e9 over a long window cannot
	// overflow int64.
	return min(float64(limit), tokens+float64(el)*float64(limit)/float64(w))
}

// bucketResult answers a bucket rule whose stored state is tokens at last.
func bucketResult(rule *Rule, cost int, recorded bool, now int64, tokens float64, last int64) RuleResult {
	w, limit := rule.Window.Milliseconds(), rule.Limit
	level := bucketAt(now, tokens, last, limit, w)
	fits := level >= float64(cost) || rule.Passed
	if recorded && fits {
		tokens, last = bucketSpend(level, cost), now
		level = tokens
	}
	rr := RuleResult{Allowed: fits, Remaining: max(int(math.Floor(level)), 0)}
	rr.Count = limit - rr.Remaining
	if level < float64(limit) {
		full := firstMs(now+1, max(last, now)+w, func(t int64) bool {
			return bucketAt(t, tokens, last, limit, w) >= float64(limit)
		})
		rr.Reset = msDur(full - now)
	}
	if !fits {
		at := firstMs(now+1, max(last, now)+w, func(t int64) bool {
			return bucketAt(t, tokens, last, limit, w) >= float64(cost)
		})
		rr.RetryAfter = msDur(at - now)
	}
	return rr
}

// distinctResult answers a distinct rule that saw n values in its window,
// present telling whether the attempt's value is among them, oldest the
// oldest member's stamp and other the oldest stamp among the other values
// (0: none).
func distinctResult(rule *Rule, recorded bool, now int64, n int, present bool, oldest, other int64) RuleResult {
	w := rule.Window.Milliseconds()
	fits := present || n < rule.Limit || rule.Passed
	rr := RuleResult{Allowed: fits, Count: n}
	switch {
	case recorded && fits:
		if !present {
			rr.Count++
		}
		if rule.Passed {
			rr.Count = min(rr.Count, distinctMost(rule))
		}
		first := now
		if other > 0 {
			first = min(other, now)
		}
		rr.Reset = msDur(first + w - now)
	case oldest > 0:
		rr.Reset = msDur(oldest + w - now)
	}
	rr.Remaining = max(rule.Limit-rr.Count, 0)
	if !fits {
		rr.RetryAfter = msDur(max(oldest+w-now, 1))
	}
	return rr
}

// bucketSpend is a bucket's level after an admitted attempt spends cost
// at level: never below 0, since a passed challenge (Rule.Passed) admits
// an attempt the level does not cover, and a bucket in debt would be
// stricter afterwards than without the pass.
func bucketSpend(level float64, cost int) float64 { return max(level-float64(cost), 0) }

// distinctMost is how many values a distinct set keeps after an attempt
// that passed a challenge (Rule.Passed) adds one to a full set: the newest
// PassedKeep (or Limit+1, if more), the oldest beyond going. Up to
// that many values in the window the set is exact: a value seen in the
// window is admitted as present, as the contract says. The bound keeps
// passed challenges from growing one key without limit (14 bytes a value;
// redis.lua keeps the same); past it a dropped old value is no longer
// admitted as present, which is stricter, never looser: whether a new
// value fits depends only on the newest Limit values.
func distinctMost(rule *Rule) int { return max(rule.Limit+1, PassedKeep) }

// PassedKeep is the least number of entries a log, and of values a
// distinct set, keeps when passed challenges overfill it (Rule.Passed):
// up to that many in the window, both are exact (a log's reset is still
// when its oldest entry leaves). redis.lua keeps the same number.
const PassedKeep = 1000

// firstMs returns the smallest t in [lo, hi] for which ok holds, given
// that ok is monotone (false, then true) and holds at hi.
func firstMs(lo, hi int64, ok func(int64) bool) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// counterTTL and distinct/bucket TTLs: how long a key of each kind must
// live after its last write, from the rule's Keep (the longest window any
// rule uses the key with).
func counterTTL(keep, window time.Duration) int64 { return 2 * keepMs(keep, window) }

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
