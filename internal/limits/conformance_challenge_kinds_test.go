package limits

// Conformance cases of challenge rules of the other kinds (kinds.go):
// counters, buckets and distinct sets challenge like logs, a passed
// challenge admits and records, and a distinct set stays bounded.

import (
	"fmt"
	"testing"
	"time"
)

// confChallengeKind is one rule kind under test: rule builds the kind's
// challenge rule for attempt i (a distinct set sees a new value each
// time), all with limit 2 on key.
type confChallengeKind struct {
	name string
	rule func(key string, i int) Rule
}

func confChallengeKinds() []confChallengeKind {
	return []confChallengeKind{
		{"counter", func(key string, _ int) Rule {
			return Rule{Key: key, Limit: 2, Window: time.Hour, Algorithm: AlgCounter, Challenge: true}
		}},
		{"bucket", func(key string, _ int) Rule {
			return Rule{Key: key, Limit: 2, Window: time.Hour, Algorithm: AlgBucket, Challenge: true}
		}},
		{"distinct", func(key string, i int) Rule {
			return Rule{Key: key, Limit: 2, Window: confWindow, Distinct: confValue(fmt.Sprint("v", i)), Challenge: true}
		}},
	}
}

// confChallengeKindsCase: a full rule of each kind challenges (nothing
// recorded in it or in a log rule beside it, no denial failure); passed,
// it admits and records the attempt, and without a pass the next attempt
// is challenged again.
func confChallengeKindsCase(t *testing.T, c *conf) {
	for _, k := range confChallengeKinds() {
		t.Run(k.name, func(t *testing.T) {
			key := c.key("log", "chk", k.name)
			beside := Rule{Key: c.key("log", "chk-beside", k.name), Limit: 100, Window: confWindow}
			esc := c.escalation("chk-"+k.name, 1, []time.Duration{time.Minute}, time.Hour)
			req := func(i int, passed bool) CheckRequest {
				r := k.rule(key, i)
				r.Passed = passed
				return CheckRequest{Rules: []Rule{r, beside}, DenialFailures: &esc}
			}
			for i := range 2 {
				if res := c.check(t, c.store(i), req(i, false)); !res.Allowed || res.Challenge {
					t.Fatalf("attempt %d: got %+v, want allowed", i+1, res)
				}
			}
			for i := range 2 {
				res := c.check(t, c.store(i), req(2, false))
				if res.Allowed || !res.Challenge || len(res.Struck) != 0 || res.Rules[0].Allowed {
					t.Fatalf("full, try %d: got %+v, want a challenge, nothing struck", i+1, res)
				}
				if got, want := res.Rules[0].Remaining, 0; got != want {
					t.Errorf("full, try %d: got remaining %d, want %d", i+1, got, want)
				}
				if got, want := res.Rules[1].Count, 2; got != want {
					t.Errorf("full, try %d: rule beside has %d entries, want %d (a challenge records nothing)", i+1, got, want)
				}
			}
			for i := range 3 {
				res := c.check(t, c.store(i), req(2+i, true))
				if !res.Allowed || res.Challenge || !res.Rules[0].Allowed || res.Rules[0].RetryAfter != 0 {
					t.Fatalf("passed %d: got %+v, want allowed", i+1, res)
				}
				if got, want := res.Rules[1].Count, 3+i; got != want {
					t.Errorf("passed %d: rule beside has %d entries, want %d (passed attempts are recorded)", i+1, got, want)
				}
				want := map[string]int{"counter": 3 + i, "bucket": 2, "distinct": 3 + i}[k.name] // every value of the window (PassedKeep)
				if got := res.Rules[0].Count; got != want {
					t.Errorf("passed %d: got count %d, want %d", i+1, got, want)
				}
			}
			res := c.check(t, c.b, req(9, false))
			if res.Allowed || !res.Challenge || len(res.Struck) != 0 {
				t.Errorf("after passing: got %+v, want a challenge again", res)
			}
			if k.name == "bucket" {
				// Passes spend the bucket to 0 tokens, never below: one
				// token's refill (W/L) admits again.
				refill := time.Hour / 2
				if got := res.Rules[0].RetryAfter; got > refill || got < refill-time.Minute {
					t.Errorf("after passing: got retry %v, want about %v (clamped at 0 tokens)", got, refill)
				}
			}
		})
	}
}

// confChallengeKindsBounded: passing challenges with new values keeps
// every value of the window in a distinct set up to PassedKeep
// values, so a value seen in the window is admitted without a pass (the
// contract's "already among the distinct values seen"), a new one is
// challenged; past the bound the oldest go (a dropped one is challenged:
// stricter, never looser).
func confChallengeKindsBounded(t *testing.T, c *conf) {
	key := c.key("log", "chk-bounded")
	const limit = 3
	rule := func(v string, passed bool) Rule {
		return Rule{Key: key, Limit: limit, Window: confWindow, Distinct: confValue(v), Challenge: true, Passed: passed}
	}
	pass := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule(fmt.Sprint("v", i), true)}}); !res.Allowed {
				t.Fatalf("passed check %d: got %+v, want allowed", i+1, res)
			}
		}
	}
	type probe struct {
		value     string
		challenge bool
		count     int
	}
	expect := func(after int, tests []probe) {
		t.Helper()
		for _, tt := range tests {
			res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule(tt.value, false)}, DryRun: true})
			if got, want := res.Challenge, tt.challenge; got != want || res.Allowed == want {
				t.Errorf("value %s after %d passes: got %+v, want challenge %v", tt.value, after, res, want)
			}
			if got, want := res.Rules[0].Count, tt.count; got != want {
				t.Errorf("value %s after %d passes: got count %d, want %d", tt.value, after, got, want)
			}
		}
	}
	pass(0, 20)
	expect(20, []probe{
		{"new", true, 20},
		{"v19", false, 20},
		{"v0", false, 20}, // the first, still in the window
	})
	pass(20, PassedKeep+5)
	n := PassedKeep + 5
	expect(n, []probe{
		{"new", true, PassedKeep},
		{fmt.Sprint("v", n-1), false, PassedKeep},
		{fmt.Sprint("v", n-PassedKeep), false, PassedKeep},  // the oldest kept
		{fmt.Sprint("v", n-PassedKeep-1), true, PassedKeep}, // dropped
		{"v0", true, PassedKeep},
	})
}

// confChallengeKindsUndo: a passed attempt that another rule denies
// records nothing in a rule of any kind (on Cluster: the undo op gives
// back exactly what the pass took, so a bucket spent to 0 is not refilled).
func confChallengeKindsUndo(t *testing.T, c *conf) {
	for _, k := range confChallengeKinds() {
		t.Run(k.name, func(t *testing.T) {
			key := c.key("log", "chk-undo", k.name)
			gate := Rule{Key: c.key("log", "chk-undo-gate", k.name), Limit: 2, Window: confWindow}
			for i := range 2 {
				if res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{k.rule(key, i), gate}}); !res.Allowed {
					t.Fatalf("attempt %d: got %+v, want allowed", i+1, res)
				}
			}
			for i := range 3 {
				passed := k.rule(key, 2)
				passed.Passed = true
				res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{passed, gate}})
				if res.Allowed || res.Challenge || !res.Rules[0].Allowed || res.Rules[1].Allowed {
					t.Fatalf("passed, gate full, try %d: got %+v, want a denial by the gate only", i+1, res)
				}
			}
			res := c.check(t, c.a, CheckRequest{Rules: []Rule{k.rule(key, 2)}})
			if res.Allowed || !res.Challenge {
				t.Errorf("after the denied passes: got %+v, want a challenge (they recorded nothing)", res)
			}
			if got, want := res.Rules[0].Remaining, 0; got != want {
				t.Errorf("after the denied passes: got remaining %d, want %d", got, want)
			}
			if want := map[string]int{"counter": 2, "bucket": 2, "distinct": 2}[k.name]; res.Rules[0].Count != want {
				t.Errorf("after the denied passes: got count %d, want %d", res.Rules[0].Count, want)
			}
		})
	}
}

// confChallengeCounterBeyond32Bits: passed challenges may add cost to a
// counter beyond its limit, also beyond 32 bits (five passes of cost 1e9
// at the largest limit); the count must not wrap around (redis.lua kept
// it in 4 bytes), so an attempt without a pass is still challenged.
func confChallengeCounterBeyond32Bits(t *testing.T, c *conf) {
	const limit = 1_000_000_000
	rule := func(passed bool) Rule {
		return Rule{Key: c.key("log", "chk-counter-wrap"), Limit: limit, Window: time.Hour,
			Algorithm: AlgCounter, Challenge: true, Passed: passed}
	}
	for i := range 5 {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule(true)}, Cost: limit})
		if !res.Allowed {
			t.Fatalf("passed %d: got %+v, want allowed", i+1, res)
		}
	}
	// 5e9 mod 2^32 is 705032704, which this cost would fill to the limit.
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule(false)}, Cost: 294_967_296, DryRun: true})
	if res.Allowed || !res.Challenge {
		t.Errorf("after 5e9 passed: got %+v, want a challenge", res)
	}
	if got := res.Rules[0].Count; got < 4*limit {
		t.Errorf("after 5e9 passed: got count %d, want at least %d", got, 4*limit)
	}
}
