package limits

// Conformance cases of the rule kinds of kinds.go: sliding-window
// counters, token buckets and distinct sets (as attempt and failure
// rules), their exact answers, atomicity with other rules and strictness
// under concurrency.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// confKindCases are the rule-kind cases; runConformance runs them with the
// others.
func confKindCases() []confCase {
	return []confCase{
		{"CounterFreshKey", false, confCounterFresh},
		{"CounterExact", true, confCounterExact},
		{"BucketBurstThenDeny", false, confBucketBurst},
		{"BucketExact", true, confBucketExact},
		{"Distinct", false, confDistinct},
		{"DistinctExact", true, confDistinctExact},
		{"DistinctFailureStrikes", false, confDistinctFailure},
		{"DistinctDenialFailures", false, confDistinctDenialFailures},
		{"KindsAllOrNothing", false, confKindsAllOrNothing},
		{"KindsDryRun", false, confKindsDryRun},
		{"KindsConcurrentStrictness", false, confKindsConcurrent},
		{"DistinctConcurrentStrikes", false, confDistinctConcurrentStrikes},
	}
}

// confValue is a distinct value of DistinctBytes bytes.
func confValue(s string) string { return fmt.Sprintf("%-8.8s", s) }

// confCounterFresh: on a fresh key (no previous sub-window) a counter
// admits exactly L, and a denial waits until the next sub-window has
// weighed the current count down far enough.
func confCounterFresh(t *testing.T, c *conf) {
	const w = time.Hour
	cases := []struct {
		name        string
		limit, cost int
		want        []bool
	}{
		{"limit5", 5, 1, []bool{true, true, true, true, true, false}},
		{"limit5cost2", 5, 2, []bool{true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule := Rule{Key: c.key("log", "counter", tc.name), Limit: tc.limit, Window: w, Algorithm: AlgCounter}
			count := 0
			for i, want := range tc.want {
				res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}, Cost: tc.cost})
				if res.Allowed != want {
					t.Fatalf("attempt %d: got allowed %v, want %v", i, res.Allowed, want)
				}
				now := confMs(res.Now)
				wm := w.Milliseconds()
				start := now - now%wm
				wantRR := RuleResult{Allowed: want}
				if want {
					count += tc.cost
				} else {
					// Next sub-window: count*(W-e)/W + cost <= limit
					// once e >= W*(count+cost-limit)/count.
					e := (wm*int64(count+tc.cost-tc.limit) + int64(count) - 1) / int64(count)
					wantRR.RetryAfter = confMsDur(start + wm + e - now)
				}
				wantRR.Count = count
				wantRR.Remaining = tc.limit - count
				wantRR.Reset = confMsDur(start + 2*wm - now)
				confWantRule(t, "attempt", res.Rules[0], wantRR)
			}
		})
	}
}

// confCounterExact walks one counter through two sub-windows on the fake
// clock: the previous count weighs (W-e)/W of itself.
func confCounterExact(t *testing.T, c *conf) {
	const w = 10 * time.Second
	rule := Rule{Key: c.key("log", "counter-exact"), Limit: 10, Window: w, Algorithm: AlgCounter}
	probe := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, DryRun: true})
	now := confMs(probe.Now)
	c.advance(t, confMsDur(w.Milliseconds()-now%w.Milliseconds())) // to a sub-window start
	for i := range 10 {
		if res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}}); !res.Allowed {
			t.Fatalf("attempt %d of 10: denied", i)
		}
	}
	c.advance(t, w+w/2) // next sub-window, half elapsed: the 10 weigh 5
	steps := []struct {
		what      string
		allowed   bool
		remaining int
		retry     time.Duration
	}{
		{"estimate 5+1", true, 4, 0},
		{"estimate 6+1", true, 3, 0},
		{"estimate 7+1", true, 2, 0},
		{"estimate 8+1", true, 1, 0},
		{"estimate 9+1", true, 0, 0},
		// cur 5, prev 10: 5 + 10*(W-e)/W + 1 <= 10 once e >= 0.6W.
		{"estimate 10+1", false, 0, w / 10},
	}
	for i, st := range steps {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}})
		got := res.Rules[0]
		if res.Allowed != st.allowed || got.Remaining != st.remaining || got.RetryAfter != st.retry {
			t.Errorf("%s: got allowed %v remaining %d retry %v, want %v %d %v",
				st.what, res.Allowed, got.Remaining, got.RetryAfter, st.allowed, st.remaining, st.retry)
		}
	}
	c.advance(t, w/10-time.Millisecond)
	if res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}}); res.Allowed {
		t.Errorf("1ms before the retry: got allowed, want denied")
	}
	c.advance(t, time.Millisecond)
	if res := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}}); !res.Allowed {
		t.Errorf("at the retry: got denied, want allowed")
	}
}

// confBucketBurst: a new bucket is full, admits a burst of L (cost
// spends that many tokens) and then waits for one token's refill.
func confBucketBurst(t *testing.T, c *conf) {
	const w = time.Hour
	rule := Rule{Key: c.key("log", "bucket"), Limit: 6, Window: w, Algorithm: AlgBucket}
	costs := []int{2, 1, 3, 1}
	wantAllowed := []bool{true, true, true, false}
	wantRemaining := []int{4, 3, 0, 0}
	for i, cost := range costs {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}, Cost: cost})
		got := res.Rules[0]
		if res.Allowed != wantAllowed[i] || got.Remaining != wantRemaining[i] {
			t.Fatalf("attempt %d (cost %d): got allowed %v remaining %d, want %v %d",
				i, cost, res.Allowed, got.Remaining, wantAllowed[i], wantRemaining[i])
		}
		if res.Allowed && got.RetryAfter != 0 {
			t.Errorf("attempt %d: got retry %v on an allowed attempt", i, got.RetryAfter)
		}
		if !res.Allowed {
			// One token takes W/L = 10m; a few ms have refilled already.
			if per := w / 6; got.RetryAfter <= 0 || got.RetryAfter > per {
				t.Errorf("denied: got retry %v, want in (0, %v]", got.RetryAfter, per)
			}
			if got.Reset <= w-w/6-time.Second || got.Reset > w {
				t.Errorf("denied: got reset %v, want about %v (until full)", got.Reset, w)
			}
		}
	}
}

// confBucketExact checks the continuous refill to the millisecond.
func confBucketExact(t *testing.T, c *conf) {
	rule := Rule{Key: c.key("log", "bucket-exact"), Limit: 10, Window: 10 * time.Second, Algorithm: AlgBucket}
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 10})
	if !res.Allowed || res.Rules[0].Remaining != 0 || res.Rules[0].Reset != 10*time.Second {
		t.Fatalf("spending the full bucket: got %+v, want allowed, 0 left, full in 10s", res.Rules[0])
	}
	steps := []struct {
		advance   time.Duration
		cost      int
		allowed   bool
		remaining int
		retry     time.Duration
	}{
		{0, 1, false, 0, time.Second},
		{400 * time.Millisecond, 1, false, 0, 600 * time.Millisecond},
		{0, 3, false, 0, 2600 * time.Millisecond},
		{600 * time.Millisecond, 1, true, 0, 0},
		{2500 * time.Millisecond, 2, true, 0, 0}, // 2.5 tokens, 0.5 left
		{500 * time.Millisecond, 1, true, 0, 0},
		{10 * time.Second, 1, true, 9, 0}, // full again, capped at 10
	}
	for i, st := range steps {
		c.advance(t, st.advance)
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}, Cost: st.cost})
		got := res.Rules[0]
		if res.Allowed != st.allowed || got.Remaining != st.remaining || got.RetryAfter != st.retry {
			t.Errorf("step %d: got allowed %v remaining %d retry %v, want %v %d %v",
				i, res.Allowed, got.Remaining, got.RetryAfter, st.allowed, st.remaining, st.retry)
		}
	}
}

// confDistinct: L distinct values fit; a further one is denied until the
// oldest leaves; a value already seen is always admitted and refreshed.
func confDistinct(t *testing.T, c *conf) {
	key := c.key("log", "distinct")
	rule := func(v string) Rule {
		return Rule{Key: key, Limit: 3, Window: confWindow, Distinct: confValue(v)}
	}
	var first, second int64
	steps := []struct {
		value     string
		allowed   bool
		remaining int
	}{
		{"alice", true, 2}, {"bob", true, 1}, {"alice", true, 1}, {"carol", true, 0},
		{"dave", false, 0}, {"bob", true, 0}, {"erin", false, 0},
	}
	for i, st := range steps {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule(st.value)}, Cost: 2})
		got := res.Rules[0]
		now := confMs(res.Now)
		switch i {
		case 0:
			first = now
		case 1:
			second = now
		}
		if res.Allowed != st.allowed || got.Remaining != st.remaining {
			t.Errorf("step %d (%s): got allowed %v remaining %d, want %v %d", i, st.value, res.Allowed, got.Remaining, st.allowed, st.remaining)
		}
		if i == 2 {
			// alice was the oldest and is refreshed: bob is now.
			if want := confMsDur(second + confWindow.Milliseconds() - now); !confNear(got.Reset, want) {
				t.Errorf("refreshing the oldest: got reset %v, want %v", got.Reset, want)
			}
		}
		if i == 4 {
			// The oldest is bob's (alice was refreshed after him).
			want := confMsDur(second + confWindow.Milliseconds() - now)
			if !confNear(got.RetryAfter, want) || !confNear(got.Reset, want) {
				t.Errorf("denied: got retry %v reset %v, want both %v", got.RetryAfter, got.Reset, want)
			}
		}
	}
	_ = first
}

// confDistinctExact: values leave the window one by one at their last
// sighting + W.
func confDistinctExact(t *testing.T, c *conf) {
	const w = time.Second
	key := c.key("log", "distinct-exact")
	check := func(i int, v string) CheckResult {
		return c.check(t, c.store(i), CheckRequest{Rules: []Rule{{Key: key, Limit: 2, Window: w, Distinct: confValue(v)}}})
	}
	check(0, "a")
	c.advance(t, 100*time.Millisecond)
	check(1, "b")
	c.advance(t, 100*time.Millisecond)
	check(0, "a") // refreshed at 200
	c.advance(t, 850*time.Millisecond)
	if res := check(1, "c"); res.Allowed || res.Rules[0].RetryAfter != 50*time.Millisecond {
		t.Errorf("at 1050: got allowed %v retry %v, want denied, 50ms (b leaves at 1100)", res.Allowed, res.Rules[0].RetryAfter)
	}
	c.advance(t, 50*time.Millisecond)
	if res := check(0, "c"); !res.Allowed || res.Rules[0].Remaining != 0 {
		t.Errorf("at 1100: got allowed %v remaining %d, want allowed, 0", res.Allowed, res.Rules[0].Remaining)
	}
	if res := check(1, "b"); res.Allowed {
		t.Errorf("b after it left: got allowed, want denied (a and c fill the set)")
	}
}

// confDistinctFailure: a distinct failure set strikes when it reaches L
// distinct values (repeats do not count), and the strike empties it.
func confDistinctFailure(t *testing.T, c *conf) {
	esc := c.escalation("spray", 3, []time.Duration{time.Minute, 5 * time.Minute}, time.Hour)
	values := []string{"u1", "u2", "u1", "u2", "u3", "u4", "u5", "u4", "u6"}
	wantLevel := []int{0, 0, 0, 0, 1, 0, 0, 0, 2}
	for i, v := range values {
		esc.Failures[0].Distinct = confValue(v)
		res := c.fail(t, c.store(i), esc)
		got := 0
		if len(res.Struck) == 1 {
			got = res.Struck[0].Level
		} else if len(res.Struck) > 1 {
			t.Fatalf("failure %d: %d strikes", i, len(res.Struck))
		}
		if got != wantLevel[i] {
			t.Errorf("failure %d (%s): got strike level %d, want %d", i, v, got, wantLevel[i])
		}
	}
	// Unlock deletes the set like a failure log.
	esc.Failures[0].Distinct = confValue("u7")
	c.fail(t, c.a, esc)
	c.unlock(t, c.b, UnlockRequest{Locks: []string{esc.Failures[0].LockKey}, Failures: []string{esc.Failures[0].Key}})
	for i, v := range []string{"u8", "u9"} {
		esc.Failures[0].Distinct = confValue(v)
		if res := c.fail(t, c.store(i), esc); len(res.Struck) != 0 {
			t.Errorf("after unlock, failure %d: got a strike, want none (the set was emptied)", i)
		}
	}
}

// confDistinctDenialFailures: with count_denials, each rate-limit denial
// records the request's distinct value in a distinct failure set, and L
// distinct values strike.
func confDistinctDenialFailures(t *testing.T, c *conf) {
	rule := Rule{Key: c.key("log", "spray-gate"), Limit: 1, Window: confWindow}
	esc := c.escalation("spray-denials", 2, []time.Duration{time.Minute}, time.Hour)
	lock := []LockRef{{Key: esc.Failures[0].LockKey}}
	if res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}}); !res.Allowed {
		t.Fatal("first check denied")
	}
	for i, v := range []string{"u1", "u1", "u2"} {
		esc.Failures[0].Distinct = confValue(v)
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}, Locks: lock, DenialFailures: &esc})
		if res.Allowed || res.Locked != nil {
			t.Fatalf("denial %d: got %+v, want a rate-limit denial", i, res)
		}
		if got, want := len(res.Struck), map[bool]int{true: 1, false: 0}[i == 2]; got != want {
			t.Errorf("denial %d (%s): got %d strikes, want %d", i, v, got, want)
		}
	}
}

// confKindsAllOrNothing: a denial by any rule records nothing in the
// others, whatever their kinds (on Cluster: the undo op).
func confKindsAllOrNothing(t *testing.T, c *conf) {
	gate := Rule{Key: c.key("log", "gate"), Limit: 1, Window: confWindow}
	counter := Rule{Key: c.key("log", "aon-counter"), Limit: 10, Window: time.Hour, Algorithm: AlgCounter}
	bucket := Rule{Key: c.key("log", "aon-bucket"), Limit: 10, Window: time.Hour, Algorithm: AlgBucket}
	set := Rule{Key: c.key("log", "aon-set"), Limit: 10, Window: confWindow}
	for i := range 4 {
		set.Distinct = confValue(fmt.Sprint("v", i))
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{counter, gate, bucket, set}})
		if res.Allowed != (i == 0) {
			t.Fatalf("attempt %d: got allowed %v, want %v", i, res.Allowed, i == 0)
		}
	}
	set.Distinct = confValue("other")
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{counter, bucket, set}, DryRun: true})
	got := []int{res.Rules[0].Remaining, res.Rules[1].Remaining, res.Rules[2].Remaining}
	if want := []int{8, 8, 8}; !slices.Equal(got, want) {
		t.Errorf("after 1 allowed and 3 denied: got remaining %v, want %v (only the allowed attempt counted)", got, want)
	}
}

// confKindsDryRun: a dry run answers as if recorded and records nothing.
func confKindsDryRun(t *testing.T, c *conf) {
	rules := []Rule{
		{Key: c.key("log", "dry-counter"), Limit: 3, Window: time.Hour, Algorithm: AlgCounter},
		{Key: c.key("log", "dry-bucket"), Limit: 3, Window: time.Hour, Algorithm: AlgBucket},
		{Key: c.key("log", "dry-set"), Limit: 3, Window: confWindow, Distinct: confValue("x")},
	}
	for i := range 3 {
		res := c.check(t, c.store(i), CheckRequest{Rules: rules, DryRun: true})
		for j, rr := range res.Rules {
			if !rr.Allowed || rr.Remaining != 2 {
				t.Errorf("dry run %d, rule %d: got %+v, want allowed with 2 left", i, j, rr)
			}
		}
	}
}

// confKindsConcurrent: 50 parallel first attempts (distinct values for
// the set) admit exactly L for every kind.
func confKindsConcurrent(t *testing.T, c *conf) {
	const workers = 50
	cases := []struct {
		name string
		rule func(w int) Rule
	}{
		{"counter", func(int) Rule {
			return Rule{Key: c.key("log", "par-counter"), Limit: 10, Window: time.Hour, Algorithm: AlgCounter}
		}},
		{"bucket", func(int) Rule {
			return Rule{Key: c.key("log", "par-bucket"), Limit: 10, Window: time.Hour, Algorithm: AlgBucket}
		}},
		{"distinct", func(w int) Rule {
			return Rule{Key: c.key("log", "par-set"), Limit: 10, Window: confWindow, Distinct: confValue(fmt.Sprint("w", w))}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allowed := make(chan bool, workers)
			errs := make(chan error, workers)
			start := make(chan struct{})
			for w := range workers {
				go func() {
					<-start
					res, err := c.store(w).Check(context.Background(), &CheckRequest{Rules: []Rule{tc.rule(w)}, Cost: 1, Nonce: confFreshNonce()})
					if err != nil {
						errs <- err
					}
					allowed <- err == nil && res.Allowed
				}()
			}
			close(start)
			total := 0
			for range workers {
				if <-allowed {
					total++
				}
			}
			close(errs)
			for err := range errs {
				t.Errorf("Check: %v", err)
			}
			if total != 10 {
				t.Errorf("%d parallel attempts: got %d allowed, want exactly 10", workers, total)
			}
		})
	}
}

// confDistinctConcurrentStrikes: 50 parallel failures of distinct values
// on a set of limit 10 strike exactly 5 times, one per crossing.
func confDistinctConcurrentStrikes(t *testing.T, c *conf) {
	const workers, limit = 50, 10
	ladder := make([]time.Duration, 10)
	for i := range ladder {
		ladder[i] = time.Duration(i+1) * time.Minute
	}
	levels := make(chan []int, workers)
	start := make(chan struct{})
	for w := range workers {
		go func() {
			esc := c.escalation("par-spray", limit, ladder, time.Hour)
			esc.Failures[0].Distinct = confValue(fmt.Sprint("w", w))
			<-start
			res, err := c.store(w).Report(context.Background(), &ReportRequest{Failure: true, Escalation: esc, Nonce: confFreshNonce()})
			if err != nil {
				t.Errorf("Report: %v", err)
			}
			var got []int
			for _, l := range res.Struck {
				got = append(got, l.Level)
			}
			levels <- got
		}()
	}
	close(start)
	var all []int
	for range workers {
		all = append(all, <-levels...)
	}
	slices.Sort(all)
	if want := []int{1, 2, 3, 4, 5}; !slices.Equal(all, want) {
		t.Errorf("%d parallel distinct failures, limit %d: got strike levels %v, want %v", workers, limit, all, want)
	}
}
