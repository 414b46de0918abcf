package limits

// Conformance cases for attempt rules: sliding-window counting, cost,
// multi-rule atomicity, shadow rules, dry runs, window edges, strictness
// under concurrency and request validation.

import (
	"context"
	"strings"
	"testing"
	"time"
)

func confLimitThenDeny(t *testing.T, c *conf) {
	cases := []struct {
		name  string
		limit int
		cost  int
		want  []bool
	}{
		{"limit1", 1, 1, []bool{true, false, false}},
		{"limit3", 3, 1, []bool{true, true, true, false, false}},
		{"limit5cost2", 5, 2, []bool{true, true, false, false}},
		{"limit4cost4", 4, 4, []bool{true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule := Rule{Key: c.key("log", tc.name), Limit: tc.limit, Window: confWindow}
			count := 0
			var first int64
			for i, want := range tc.want {
				res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}, Cost: tc.cost})
				if res.Allowed != want {
					t.Fatalf("attempt %d: got allowed %v, want %v", i, res.Allowed, want)
				}
				if res.Locked != nil || len(res.Struck) != 0 {
					t.Errorf("attempt %d: got Locked %v Struck %v, want none", i, res.Locked, res.Struck)
				}
				if i == 0 {
					first = confMs(res.Now)
				}
				wantRR := RuleResult{Allowed: want}
				if want {
					count += tc.cost
				} else {
					// The oldest entries are the first attempt's.
					wantRR.RetryAfter = confMsDur(first + confWindow.Milliseconds() - confMs(res.Now))
				}
				wantRR.Count = count
				wantRR.Remaining = tc.limit - count
				wantRR.Reset = confMsDur(first + confWindow.Milliseconds() - confMs(res.Now))
				confWantRule(t, "attempt", res.Rules[0], wantRR)
			}
		})
	}
}

func confDeniedNotLogged(t *testing.T, c *conf) {
	rule := Rule{Key: c.key("log", "denied"), Limit: 2, Window: confWindow}
	for i := range 10 {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{rule}})
		if got, want := res.Allowed, i < 2; got != want {
			t.Fatalf("attempt %d: got allowed %v, want %v", i, got, want)
		}
		if got, want := res.Rules[0].Count, min(i+1, 2); got != want {
			t.Errorf("attempt %d: got count %d, want %d", i, got, want)
		}
	}
	// A fresh look with a larger limit sees only the two allowed entries.
	wide := rule
	wide.Limit = 100
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{wide}, DryRun: true})
	if got, want := res.Rules[0].Count, 3; got != want {
		t.Errorf("dry run with limit 100: got count %d, want %d (2 logged + 1)", got, want)
	}
}

func confCost(t *testing.T, c *conf) {
	const limit = 5
	w := confWindow.Milliseconds()
	rule := Rule{Key: c.key("log", "cost"), Limit: limit, Window: confWindow}
	step := 10 * time.Millisecond

	r1 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 2})
	c.advance(t, step)
	r2 := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}, Cost: 2})
	c.advance(t, step)
	if !r1.Allowed || !r2.Allowed {
		t.Fatalf("two cost-2 attempts under limit 5: got %v %v, want both allowed", r1.Allowed, r2.Allowed)
	}
	t1, t2 := confMs(r1.Now), confMs(r2.Now)

	// 4+2 > 5: one entry must leave, the first of the first attempt's two.
	r3 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 2})
	now := confMs(r3.Now)
	confWantRule(t, "cost 2 at count 4", r3.Rules[0], RuleResult{
		Allowed: false, Count: 4, Remaining: 1,
		Reset: confMsDur(t1 + w - now), RetryAfter: confMsDur(t1 + w - now),
	})
	if r3.Allowed {
		t.Fatalf("cost 2 at count 4: got allowed, want denied")
	}

	// 4+1 fits exactly.
	r4 := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}, Cost: 1})
	now = confMs(r4.Now)
	confWantRule(t, "cost 1 at count 4", r4.Rules[0], RuleResult{
		Allowed: true, Count: 5, Remaining: 0, Reset: confMsDur(t1 + w - now),
	})
	c.advance(t, step)

	// 5+3 > 5: three entries must leave; in age order they are t1, t1, t2.
	r5 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 3})
	now = confMs(r5.Now)
	confWantRule(t, "cost 3 at count 5", r5.Rules[0], RuleResult{
		Allowed: false, Count: 5, Remaining: 0,
		Reset: confMsDur(t1 + w - now), RetryAfter: confMsDur(t2 + w - now),
	})
	// 5+5: all five must leave, the last one is r4's.
	r6 := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}, Cost: 5})
	now = confMs(r6.Now)
	confWantRule(t, "cost 5 at count 5", r6.Rules[0], RuleResult{
		Allowed: false, Count: 5, Remaining: 0,
		Reset: confMsDur(t1 + w - now), RetryAfter: confMsDur(confMs(r4.Now) + w - now),
	})
}

func confMultiRule(t *testing.T, c *conf) {
	wide := Rule{Key: c.key("log", "wide"), Limit: 5, Window: confWindow}
	narrow := Rule{Key: c.key("log", "narrow"), Limit: 2, Window: 2 * confWindow}
	for i := range 2 {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{wide, narrow}})
		if !res.Allowed {
			t.Fatalf("attempt %d: got denied, want allowed", i)
		}
	}
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{wide, narrow}})
	if res.Allowed {
		t.Fatalf("third attempt: got allowed, want denied by the narrow rule")
	}
	if got := res.Rules[0]; !got.Allowed || got.Count != 2 || got.Remaining != 3 || got.RetryAfter != 0 {
		t.Errorf("wide rule on a denial: got %+v, want allowed, count 2, remaining 3, no retry", got)
	}
	if got := res.Rules[1]; got.Allowed || got.Count != 2 || got.Remaining != 0 || got.RetryAfter <= 0 {
		t.Errorf("narrow rule on a denial: got %+v, want denied, count 2, remaining 0, retry > 0", got)
	}
	// The denial consumed nothing in the wide rule.
	res = c.check(t, c.b, CheckRequest{Rules: []Rule{wide}})
	if !res.Allowed || res.Rules[0].Count != 3 {
		t.Errorf("wide rule alone after the denial: got allowed %v count %d, want allowed count 3",
			res.Allowed, res.Rules[0].Count)
	}
	// Rule order in the request does not matter for the decision.
	res = c.check(t, c.a, CheckRequest{Rules: []Rule{narrow, wide}})
	if res.Allowed || res.Rules[0].Allowed || !res.Rules[1].Allowed || res.Rules[1].Count != 3 {
		t.Errorf("reversed order: got %+v, want denied by narrow (index 0), wide count 3", res)
	}
}

// confSharedLog covers rules of one request that name the same log: the
// attempt is one attempt, so the log receives Cost entries once, and every
// rule's numbers describe that one log before and after.
func confSharedLog(t *testing.T, c *conf) {
	w := confWindow.Milliseconds()
	key := c.key("log", "shared")
	twice := []Rule{{Key: key, Limit: 2, Window: confWindow}, {Key: key, Limit: 2, Window: confWindow}}
	c.check(t, c.a, CheckRequest{Rules: twice})
	for i, want := range []bool{true, false} {
		res := c.check(t, c.store(i+1), CheckRequest{Rules: twice})
		if res.Allowed != want {
			t.Fatalf("attempt %d on a log named twice, limit 2: got allowed %v, want %v (%+v)", i+2, res.Allowed, want, res.Rules)
		}
		for j, rr := range res.Rules {
			if rr.Count != 2 {
				t.Errorf("attempt %d rule %d: got count %d, want 2", i+2, j, rr.Count)
			}
		}
	}

	// A shadow rule on the same log that would deny is answered from the
	// log as it was before the enforced rule logged this attempt.
	other := c.key("log", "sharedshadow")
	c.check(t, c.a, CheckRequest{Rules: []Rule{{Key: other, Limit: 5, Window: confWindow}}})
	c.advance(t, 10*time.Millisecond)
	both := []Rule{{Key: other, Limit: 5, Window: confWindow}, {Key: other, Limit: 1, Window: confWindow, Shadow: true}}
	res := c.check(t, c.b, CheckRequest{Rules: both})
	if !res.Allowed {
		t.Fatalf("enforced rule with room beside a shadow rule on its log: got denied")
	}
	now := confMs(res.Now)
	t1 := now - 10
	if c.h.FakeClock {
		confWantRule(t, "shadow rule on a shared log", res.Rules[1], RuleResult{
			Count: 1, Remaining: 0, Reset: confMsDur(t1 + w - now), RetryAfter: confMsDur(t1 + w - now),
		})
	} else if got := res.Rules[1]; got.Count != 1 || got.RetryAfter >= confWindow || got.RetryAfter != got.Reset {
		t.Errorf("shadow rule on a shared log: got %+v, want count 1 and RetryAfter = Reset < %v (the older entry's)", got, confWindow)
	}
}

// confLogKeepsLongestWindow covers a log used with two windows (a rule key
// that two actions share, or a rule and a failure rule on one key): an add
// under the shorter window must not make the store forget entries that the
// longer window still counts. The caller names the longest window as Keep
// on every rule of the key.
func confLogKeepsLongestWindow(t *testing.T, c *conf) {
	const short = 150 * time.Millisecond
	key := c.key("log", "mixed")
	long := Rule{Key: key, Limit: 10, Window: confWindow, Keep: confWindow}
	brief := Rule{Key: key, Limit: 10, Window: short, Keep: confWindow}
	first := c.check(t, c.a, CheckRequest{Rules: []Rule{long}})
	second := c.check(t, c.b, CheckRequest{Rules: []Rule{brief}})

	lock := c.key("lock", "mixed")
	failures := func(w time.Duration) Escalation { return keptEscalation(c.key("fail", "mixed"), lock, w) }
	f1 := c.report(t, c.a, ReportRequest{Failure: true, Escalation: failures(confWindow)})
	f2 := c.report(t, c.b, ReportRequest{Failure: true, Escalation: failures(short)})
	if second.Rules[0].Count != 2 || confMs(f2.Now)-confMs(f1.Now) >= short.Milliseconds() {
		t.Skip("the backend took longer than the short window between two calls; nothing to learn here")
	}

	c.advance(t, short+100*time.Millisecond)
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{long}, DryRun: true})
	if got, want := res.Rules[0].Count, 3; got != want {
		t.Errorf("long window after a short-window add (first at %d, now %d): got count %d, want %d",
			confMs(first.Now), confMs(res.Now), got, want)
	}
	rep := c.report(t, c.b, ReportRequest{Failure: true, Escalation: failures(confWindow), Locks: []LockRef{{Key: lock}}})
	if len(rep.Struck) != 1 {
		t.Errorf("third failure within the long window after a short-window failure: got struck %+v, want one strike", rep.Struck)
	}
}

// keptEscalation is one failure rule on key (3 failures in w, kept for
// confWindow) striking lock: the failure log that rules of two windows
// share in the confLogKeepsLongestWindow cases.
func keptEscalation(key, lock string, w time.Duration) Escalation {
	return Escalation{
		Failures: []FailureRule{{Key: key, Limit: 3, Window: w, Keep: confWindow, LockKey: lock}},
		Ladder:   []time.Duration{time.Minute},
		Decay:    time.Hour,
	}
}

// confLogKeepsLongestWindowLate is confLogKeepsLongestWindow with the
// short-window add coming after the first entry has left the short window:
// that add must count only its own window but still keep the older entry
// for the longer window.
func confLogKeepsLongestWindowLate(t *testing.T, c *conf) {
	const short = 150 * time.Millisecond
	key := c.key("log", "late")
	long := Rule{Key: key, Limit: 10, Window: confWindow, Keep: confWindow}
	brief := Rule{Key: key, Limit: 1, Window: short, Keep: confWindow}
	c.check(t, c.a, CheckRequest{Rules: []Rule{long}})
	c.advance(t, short+50*time.Millisecond)
	if res := c.check(t, c.b, CheckRequest{Rules: []Rule{brief}}); !res.Allowed || res.Rules[0].Count != 1 {
		t.Errorf("short window after the first entry left it: got allowed %v count %d, want allowed count 1",
			res.Allowed, res.Rules[0].Count)
	}
	if res := c.check(t, c.a, CheckRequest{Rules: []Rule{long}, DryRun: true}); res.Rules[0].Count != 3 {
		t.Errorf("long window after a late short-window add: got count %d, want 3", res.Rules[0].Count)
	}

	lock := c.key("lock", "late")
	failures := func(w time.Duration) Escalation { return keptEscalation(c.key("fail", "late"), lock, w) }
	c.report(t, c.a, ReportRequest{Failure: true, Escalation: failures(confWindow)})
	c.advance(t, short+50*time.Millisecond)
	if rep := c.report(t, c.b, ReportRequest{Failure: true, Escalation: failures(short)}); len(rep.Struck) != 0 {
		t.Errorf("second failure, the first outside the short window: got struck %+v, want none", rep.Struck)
	}
	rep := c.report(t, c.a, ReportRequest{Failure: true, Escalation: failures(confWindow), Locks: []LockRef{{Key: lock}}})
	if len(rep.Struck) != 1 {
		t.Errorf("third failure within the long window after a late short-window failure: got struck %+v, want one strike", rep.Struck)
	}
}

func confShadow(t *testing.T, c *conf) {
	w := confWindow.Milliseconds()
	enforced := Rule{Key: c.key("log", "enforced"), Limit: 5, Window: confWindow}
	shadow := Rule{Key: c.key("log", "shadow"), Limit: 1, Window: confWindow, Shadow: true}
	first := c.check(t, c.a, CheckRequest{Rules: []Rule{enforced, shadow}})
	if !first.Allowed || first.Rules[1].Count != 1 {
		t.Fatalf("first attempt: got %+v, want allowed and logged under the shadow rule", first)
	}
	t0 := confMs(first.Now)
	for i := range 3 {
		res := c.check(t, c.store(i+1), CheckRequest{Rules: []Rule{enforced, shadow}})
		now := confMs(res.Now)
		if !res.Allowed {
			t.Fatalf("attempt %d: got denied, want allowed (shadow rules never deny)", i+2)
		}
		confWantRule(t, "enforced", res.Rules[0], RuleResult{
			Allowed: true, Count: i + 2, Remaining: 5 - (i + 2), Reset: confMsDur(t0 + w - now),
		})
		confWantRule(t, "shadow", res.Rules[1], RuleResult{
			Allowed: false, Count: 1, Remaining: 0,
			Reset: confMsDur(t0 + w - now), RetryAfter: confMsDur(t0 + w - now),
		})
	}
	// A request of shadow rules only is allowed and logs nothing it would deny.
	res := c.check(t, c.b, CheckRequest{Rules: []Rule{shadow}})
	if !res.Allowed || res.Rules[0].Allowed || res.Rules[0].Count != 1 {
		t.Errorf("shadow only: got %+v, want allowed, rule denied, count 1", res)
	}
}

func confDryRun(t *testing.T, c *conf) {
	w := confWindow.Milliseconds()
	rule := Rule{Key: c.key("log", "dry"), Limit: 3, Window: confWindow}
	lock := c.key("lock", "dry")
	esc := &Escalation{
		Failures: []FailureRule{{Key: c.key("fail", "dry"), Limit: 1, Window: confWindow, LockKey: lock}},
		Ladder:   []time.Duration{time.Minute},
		Decay:    time.Hour,
	}

	res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, DryRun: true})
	confWantRule(t, "dry run on an empty log", res.Rules[0], RuleResult{Allowed: true, Count: 1, Remaining: 2, Reset: confWindow})
	if !res.Allowed {
		t.Fatalf("dry run on an empty log: got denied")
	}
	real1 := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
	t0 := confMs(real1.Now)
	if real1.Rules[0].Count != 1 {
		t.Fatalf("first real attempt after a dry run: got count %d, want 1 (dry run wrote nothing)", real1.Rules[0].Count)
	}
	c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 2})

	// Full: a dry run is denied like the real attempt, with the same numbers,
	// and even with DenialFailures records no failure.
	dry := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}, DryRun: true, DenialFailures: esc, Locks: []LockRef{{Key: lock}}})
	now := confMs(dry.Now)
	if dry.Allowed || len(dry.Struck) != 0 {
		t.Fatalf("dry run on a full log: got %+v, want denied, nothing struck", dry)
	}
	confWantRule(t, "dry run on a full log", dry.Rules[0], RuleResult{
		Count: 3, Remaining: 0, Reset: confMsDur(t0 + w - now), RetryAfter: confMsDur(t0 + w - now),
	})
	after := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Locks: []LockRef{{Key: lock}}})
	if after.Locked != nil {
		t.Errorf("after a denied dry run with DenialFailures: got locked %+v, want no lock (nothing written)", after.Locked)
	}
	if after.Rules[0].Count != 3 {
		t.Errorf("after dry runs: got count %d, want 3", after.Rules[0].Count)
	}

	// A dry run beside a shadow rule that would deny reports what the real
	// attempt would log.
	shadow := Rule{Key: c.key("log", "dryshadow"), Limit: 1, Window: confWindow, Shadow: true}
	other := Rule{Key: c.key("log", "dryother"), Limit: 3, Window: confWindow}
	c.check(t, c.a, CheckRequest{Rules: []Rule{shadow}})
	res = c.check(t, c.b, CheckRequest{Rules: []Rule{other, shadow}, DryRun: true})
	if !res.Allowed || res.Rules[0].Count != 1 || res.Rules[1].Count != 1 || res.Rules[1].Allowed {
		t.Errorf("dry run with a denying shadow rule: got %+v, want allowed, other count 1, shadow denied count 1", res)
	}
}

func confWindowEdgeExact(t *testing.T, c *conf) {
	const w = time.Second
	rule := Rule{Key: c.key("log", "edge"), Limit: 2, Window: w}
	r1 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}})
	c.advance(t, 300*time.Millisecond)
	c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
	c.advance(t, 200*time.Millisecond)

	denied := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}})
	if denied.Allowed {
		t.Fatalf("third attempt: got allowed, want denied")
	}
	wantRetry := confMsDur(confMs(r1.Now) + w.Milliseconds() - confMs(denied.Now))
	if got := denied.Rules[0].RetryAfter; got != 500*time.Millisecond || got != wantRetry {
		t.Fatalf("RetryAfter: got %v, want 500ms (%v)", got, wantRetry)
	}
	c.advance(t, denied.Rules[0].RetryAfter-time.Millisecond)
	early := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
	if early.Allowed {
		t.Fatalf("1ms before RetryAfter: got allowed, want denied")
	}
	confWantRule(t, "1ms before RetryAfter", early.Rules[0], RuleResult{
		Count: 2, Remaining: 0, Reset: time.Millisecond, RetryAfter: time.Millisecond,
	})
	c.advance(t, time.Millisecond)
	// The first entry is now exactly now-W old and no longer counts.
	ok := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}})
	if !ok.Allowed {
		t.Fatalf("at RetryAfter: got denied, want allowed")
	}
	confWantRule(t, "at RetryAfter", ok.Rules[0], RuleResult{
		Allowed: true, Count: 2, Remaining: 0, Reset: 300 * time.Millisecond,
	})
}

func confWindowEdgeTolerant(t *testing.T, c *conf) {
	const w = 150 * time.Millisecond
	rule := Rule{Key: c.key("log", "edge"), Limit: 1, Window: w}
	first := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}})
	if !first.Allowed {
		t.Fatalf("first attempt: got denied")
	}
	denied := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
	if denied.Allowed {
		// The backend was slower than the window; nothing to learn here.
		t.Skip("second attempt came after the window; backend too slow for this case")
	}
	retry := denied.Rules[0].RetryAfter
	if want := confMsDur(confMs(first.Now) + w.Milliseconds() - confMs(denied.Now)); retry != want || retry <= 0 || retry > w {
		t.Fatalf("RetryAfter: got %v, want %v within (0, %v]", retry, want, w)
	}
	c.advance(t, retry+30*time.Millisecond)
	if res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}}); !res.Allowed {
		t.Errorf("after RetryAfter: got denied (%+v), want allowed", res.Rules[0])
	}
}

func confNonce(t *testing.T, c *conf) {
	rule := Rule{Key: c.key("log", "nonce"), Limit: 10, Window: confWindow}
	r1 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Nonce: "n1"})
	r2 := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}, Nonce: "n2"})
	if !c.h.FakeClock && !r1.Now.Equal(r2.Now) {
		t.Logf("the two checks landed in different milliseconds; the case still checks counting")
	}
	if got, want := r2.Rules[0].Count, 2; got != want {
		t.Errorf("two checks in one millisecond: got count %d, want %d", got, want)
	}
	// A cost-3 attempt logs three entries under one nonce.
	r3 := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Cost: 3, Nonce: "n3"})
	if got, want := r3.Rules[0].Count, 5; got != want {
		t.Errorf("cost 3 after two: got count %d, want %d", got, want)
	}

	// Failures in one millisecond are logged apart too.
	lock := c.key("lock", "nonce")
	esc := Escalation{
		Failures: []FailureRule{{Key: c.key("fail", "nonce"), Limit: 2, Window: confWindow, LockKey: lock}},
		Ladder:   []time.Duration{time.Minute},
		Decay:    time.Hour,
	}
	c.report(t, c.a, ReportRequest{Failure: true, Escalation: esc, Nonce: "f1"})
	res := c.report(t, c.b, ReportRequest{Failure: true, Escalation: esc, Nonce: "f2"})
	if len(res.Struck) != 1 {
		t.Errorf("second failure with limit 2: got struck %+v, want one strike", res.Struck)
	}
}

func confConcurrentStrictness(t *testing.T, c *conf) {
	const (
		workers  = 32
		attempts = 4
	)
	cases := []struct {
		name  string
		rules func(worker int) []Rule
		want  int
	}{
		{"one key", func(int) []Rule {
			return []Rule{{Key: c.key("log", "hammer"), Limit: 10, Window: confWindow}}
		}, 10},
		{"two keys in both orders", func(w int) []Rule {
			x := Rule{Key: c.key("log", "hx"), Limit: 12, Window: confWindow}
			y := Rule{Key: c.key("log", "hy"), Limit: 7, Window: confWindow}
			if w%2 == 0 {
				return []Rule{x, y}
			}
			return []Rule{y, x}
		}, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allowed := make(chan int, workers)
			errs := make(chan error, workers*attempts)
			start := make(chan struct{})
			for w := range workers {
				go func() {
					s := c.store(w)
					n := 0
					<-start
					for range attempts {
						res, err := s.Check(context.Background(), &CheckRequest{Rules: tc.rules(w), Cost: 1, Nonce: confFreshNonce()})
						if err != nil {
							errs <- err
							continue
						}
						if res.Allowed {
							n++
						}
					}
					allowed <- n
				}()
			}
			close(start)
			total := 0
			for range workers {
				total += <-allowed
			}
			close(errs)
			for err := range errs {
				t.Errorf("Check: %v", err)
			}
			if total != tc.want {
				t.Errorf("%d concurrent attempts: got %d allowed, want exactly %d", workers*attempts, total, tc.want)
			}
		})
	}
}

// confRejectsInvalid checks that every store refuses the same malformed
// requests with an error (and that none of them writes anything).
func confRejectsInvalid(t *testing.T, c *conf) {
	ctx := context.Background()
	rule := Rule{Key: c.key("log", "invalid"), Limit: 1, Window: time.Second}
	esc := func(mod func(*Escalation)) Escalation {
		e := Escalation{
			Failures: []FailureRule{{Key: c.key("fail", "invalid"), Limit: 1, Window: time.Second, LockKey: c.key("lock", "invalid")}},
			Ladder:   []time.Duration{time.Minute},
		}
		mod(&e)
		return e
	}
	checks := []struct {
		name string
		req  CheckRequest
	}{
		{"cost 0", CheckRequest{Rules: []Rule{rule}, Nonce: "n"}},
		{"limit 0", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Window: time.Second}}}},
		{"window below 1ms", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Limit: 1, Window: time.Microsecond}}}},
		{"window above MaxDuration", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Limit: 1, Window: MaxDuration + time.Millisecond, Algorithm: AlgCounter}}}},
		{"empty rule key", CheckRequest{Cost: 1, Rules: []Rule{{Limit: 1, Window: time.Second}}}},
		{"empty lock key", CheckRequest{Cost: 1, Rules: []Rule{rule}, Locks: []LockRef{{}}}},
		{"nonce over 32 bytes", CheckRequest{Cost: 1, Rules: []Rule{rule}, Nonce: strings.Repeat("n", 33)}},
		{"nonce with a colon", CheckRequest{Cost: 1, Rules: []Rule{rule}, Nonce: "a:b"}},
		{"denial failures without ladder", CheckRequest{Cost: 1, Rules: []Rule{rule},
			DenialFailures: &Escalation{Failures: esc(func(*Escalation) {}).Failures}}},
		{"unknown algorithm", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Limit: 1, Window: time.Second, Algorithm: AlgBucket + 1}}}},
		{"short distinct value", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Limit: 1, Window: time.Second, Distinct: "abc"}}}},
		{"distinct counter", CheckRequest{Cost: 1, Rules: []Rule{{Key: rule.Key, Limit: 1, Window: time.Second, Distinct: "abcdefgh", Algorithm: AlgCounter}}}},
	}
	for _, tc := range checks {
		if _, err := c.a.Check(ctx, &tc.req); err == nil {
			t.Errorf("Check %s: got nil error, want one", tc.name)
		}
	}
	reports := []struct {
		name string
		req  ReportRequest
	}{
		{"empty lock key", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].LockKey = "" })}},
		{"one log for two failure rules", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) {
			e.Failures = append(e.Failures, e.Failures[0])
			e.Failures[1].LockKey += "2"
		})}},
		{"info over 512 bytes", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Info = strings.Repeat("i", 513) })}},
		{"ladder step 0", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Ladder = []time.Duration{0} })}},
		{"negative decay", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Decay = -time.Second })}},
		{"ladder step above MaxDuration", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Ladder = []time.Duration{MaxDuration + time.Millisecond} })}},
		{"decay above MaxDuration", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Decay = MaxDuration + time.Millisecond })}},
		{"failure window above MaxDuration", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Window = MaxDuration + time.Millisecond })}},
		{"trust ttl above MaxDuration", ReportRequest{TrustKey: c.key("trust", "invalid"), TrustTTL: MaxDuration + time.Millisecond}},
		{"failure limit 0", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Limit = 0 })}},
		{"long distinct value", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Distinct = "123456789" })}},
		{"pending key of a log rule", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Pending = c.key("pend", "invalid") })}},
		{"pending key that is its own set", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) {
			e.Failures[0].Distinct, e.Failures[0].Pending = "12345678", e.Failures[0].Key
		})}},
		{"pending key that is another rule's log", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) {
			e.Failures = append(e.Failures, FailureRule{Key: c.key("set", "invalid"), Pending: e.Failures[0].Key, Distinct: "12345678",
				Limit: 3, Window: time.Second, LockKey: e.Failures[0].LockKey})
		})}},
		{"one pending key for two failure rules", ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) {
			for i := range 2 {
				e.Failures = append(e.Failures, FailureRule{Key: c.key("set", "invalid", string(rune('a'+i))), Pending: c.key("pend", "invalid"),
					Distinct: "12345678", Limit: 3, Window: time.Second, LockKey: e.Failures[0].LockKey})
			}
		})}},
		{"negative trust ttl", ReportRequest{TrustKey: c.key("trust", "invalid"), TrustTTL: -time.Second}},
		{"empty clear key", ReportRequest{Clear: []string{""}}},
	}
	for _, tc := range reports {
		if _, err := c.b.Report(ctx, &tc.req); err == nil {
			t.Errorf("Report %s: got nil error, want one", tc.name)
		}
	}
	unlocks := []struct {
		name string
		req  UnlockRequest
	}{
		{"empty lock key", UnlockRequest{Locks: []string{c.key("lock", "invalid"), ""}}},
		{"empty failure key", UnlockRequest{Failures: []string{""}}},
	}
	for _, tc := range unlocks {
		if _, err := c.a.Unlock(ctx, &tc.req); err == nil {
			t.Errorf("Unlock %s: got nil error, want one", tc.name)
		}
	}
	// Nothing above was written.
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Locks: []LockRef{{Key: c.key("lock", "invalid")}}})
	if !res.Allowed || res.Rules[0].Count != 1 {
		t.Errorf("after the rejected requests: got %+v, want allowed with count 1", res)
	}
}

// confMaxDuration: every rule kind, a ladder step, decay and trust TTL of
// MaxDuration answer exact, positive times: the stores' millisecond
// arithmetic (two windows ahead for a counter) neither overflows nor
// rounds there.
func confMaxDuration(t *testing.T, c *conf) {
	const w = MaxDuration
	wm := w.Milliseconds()
	for _, tc := range []struct {
		name string
		rule Rule
		vals [2]string
	}{
		{"log", Rule{Limit: 1, Window: w}, [2]string{}},
		{"counter", Rule{Limit: 1, Window: w, Algorithm: AlgCounter}, [2]string{}},
		{"bucket", Rule{Limit: 1, Window: w, Algorithm: AlgBucket}, [2]string{}},
		{"distinct", Rule{Limit: 1, Window: w}, [2]string{confValue("a"), confValue("b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := tc.rule
			rule.Key = c.key("log", "max", tc.name)
			rule.Distinct = tc.vals[0]
			first := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}})
			rule.Distinct = tc.vals[1]
			res := c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
			if !first.Allowed || res.Allowed {
				t.Fatalf("got allowed %v then %v, want true then false", first.Allowed, res.Allowed)
			}
			now, start := confMs(res.Now), confMs(first.Now)
			var want time.Duration
			switch tc.rule.Algorithm {
			case AlgCounter:
				// One attempt in the current sub-window, limit 1: it
				// fits again when the sub-window after next begins.
				want = confMsDur(start - start%wm + 2*wm - now)
			default:
				// The log's entry, the set's value, the bucket's token:
				// back one window after the first attempt.
				want = confMsDur(start + wm - now)
			}
			if got := res.Rules[0].RetryAfter; !confNear(got, want) || got <= 0 {
				t.Errorf("retry after = %v, want %v", got, want)
			}
			if got := res.Rules[0].Reset; got <= 0 || got > 2*w {
				t.Errorf("reset = %v, want within (0, %v]", got, 2*w)
			}
		})
	}
	esc := Escalation{
		Failures: []FailureRule{{Key: c.key("fail", "max"), Limit: 1, Window: w, LockKey: c.key("lock", "max")}},
		Ladder:   []time.Duration{w},
		Decay:    w,
	}
	res := c.fail(t, c.a, esc)
	confWantStrike(t, "strike", res, esc, 1)
	if r := c.report(t, c.b, ReportRequest{TrustKey: c.key("trust", "max"), TrustTTL: w}); r.Locked != nil {
		t.Errorf("success: got locked %+v, want none", r.Locked)
	}
}
