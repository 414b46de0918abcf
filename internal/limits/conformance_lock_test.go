package limits

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// escalation builds a one-rule escalation striking lock after limit
// failures.
func (c *conf) escalation(name string, limit int, ladder []time.Duration, decay time.Duration) Escalation {
	return Escalation{
		Failures: []FailureRule{{
			Key: c.key("fail", name), Limit: limit, Window: confWindow,
			LockKey: c.key("lock", name), Info: "info-" + name,
		}},
		Ladder: ladder,
		Decay:  decay,
	}
}

// fail reports one failure under esc and answers with the lock of esc.
func (c *conf) fail(t *testing.T, s Store, esc Escalation) ReportResult {
	t.Helper()
	return c.report(t, s, ReportRequest{
		Failure: true, Escalation: esc, Locks: []LockRef{{Key: esc.Failures[0].LockKey}},
	})
}

// confStruckState is the lock a strike at now on level with step d sets.
func confStruckState(esc Escalation, level int, now time.Time) LockState {
	f := esc.Failures[0]
	return LockState{
		Key: f.LockKey, Level: level, Since: now,
		Until: now.Add(esc.Ladder[level-1]), Info: f.Info,
	}
}

// confWantStrike checks that res struck exactly one lock, at level.
func confWantStrike(t *testing.T, what string, res ReportResult, esc Escalation, level int) {
	t.Helper()
	if len(res.Struck) != 1 {
		t.Fatalf("%s: got struck %+v, want one strike at level %d", what, res.Struck, level)
	}
	want := confStruckState(esc, level, res.Now)
	confWantLock(t, what+" (Struck)", &res.Struck[0], want)
	confWantLock(t, what+" (Locked)", res.Locked, want)
}

func confStrikeLadder(t *testing.T, c *conf) {
	esc := c.escalation("ladder", 3, []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}, time.Hour)
	var current *LockState
	for round, level := range []int{1, 2, 3, 3} {
		for i := range 2 {
			res := c.fail(t, c.store(i), esc)
			if len(res.Struck) != 0 {
				t.Fatalf("round %d failure %d: got struck %+v, want none (the log was emptied)", round, i+1, res.Struck)
			}
			if current == nil && res.Locked != nil {
				t.Errorf("round %d failure %d: got locked %+v, want none", round, i+1, res.Locked)
			}
			if current != nil {
				confWantLock(t, "failure while locked", res.Locked, *current)
			}
		}
		res := c.fail(t, c.store(round), esc)
		confWantStrike(t, "third failure", res, esc, level)
		current = res.Locked
	}
}

func confDecay(t *testing.T, c *conf) {
	esc := c.escalation("decay", 1, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}, 300*time.Millisecond)
	confWantStrike(t, "first strike", c.fail(t, c.a, esc), esc, 1)
	c.advance(t, 100*time.Millisecond)
	res := c.check(t, c.b, CheckRequest{Locks: []LockRef{{Key: esc.Failures[0].LockKey}}})
	if res.Locked != nil || !res.Allowed {
		t.Errorf("after the level-1 lockout ended: got %+v, want allowed, not locked", res)
	}
	confWantStrike(t, "strike within decay", c.fail(t, c.b, esc), esc, 2)
	c.advance(t, 450*time.Millisecond)
	confWantStrike(t, "strike after decay", c.fail(t, c.a, esc), esc, 1)
}

func confDecayExact(t *testing.T, c *conf) {
	const decay = time.Hour
	esc := c.escalation("decayx", 1, []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}, decay)
	confWantStrike(t, "first strike", c.fail(t, c.a, esc), esc, 1)
	c.advance(t, decay-time.Millisecond)
	confWantStrike(t, "strike 1ms before decay", c.fail(t, c.b, esc), esc, 2)
	c.advance(t, decay)
	confWantStrike(t, "strike exactly at decay", c.fail(t, c.a, esc), esc, 1)

	// The decay rule applies first even while a long lockout is active.
	long := c.escalation("decaylong", 1, []time.Duration{2 * time.Hour, 4 * time.Hour}, decay)
	confWantStrike(t, "first long strike", c.fail(t, c.a, long), long, 1)
	c.advance(t, decay)
	confWantStrike(t, "strike while locked, decay old", c.fail(t, c.b, long), long, 1)
	c.advance(t, decay-time.Millisecond)
	confWantStrike(t, "strike while locked, within decay", c.fail(t, c.a, long), long, 2)
}

func confCheckWhileLocked(t *testing.T, c *conf) {
	w := confWindow.Milliseconds()
	rule := Rule{Key: c.key("log", "locked"), Limit: 5, Window: confWindow}
	full := Rule{Key: c.key("log", "lockedfull"), Limit: 1, Window: confWindow}
	empty := Rule{Key: c.key("log", "lockedempty"), Limit: 1, Window: confWindow}
	first := c.check(t, c.a, CheckRequest{Rules: []Rule{rule, full}})
	c.check(t, c.b, CheckRequest{Rules: []Rule{rule}})
	t0 := confMs(first.Now)

	short := c.escalation("short", 1, []time.Duration{time.Minute}, time.Hour)
	long := c.escalation("long", 1, []time.Duration{5 * time.Minute}, time.Hour)
	c.fail(t, c.a, short)
	struck := c.fail(t, c.b, long)
	other := c.escalation("other", 1, []time.Duration{time.Minute}, time.Hour)
	locks := []LockRef{
		{Key: c.key("lock", "never")},
		{Key: short.Failures[0].LockKey},
		{Key: long.Failures[0].LockKey},
	}
	for i := range 3 {
		res := c.check(t, c.store(i), CheckRequest{
			Rules: []Rule{rule, full, empty}, Locks: locks, DenialFailures: &other,
		})
		now := confMs(res.Now)
		if res.Allowed || len(res.Struck) != 0 {
			t.Fatalf("check %d while locked: got allowed %v struck %+v, want denied, nothing struck", i, res.Allowed, res.Struck)
		}
		confWantLock(t, "lock that ends last", res.Locked, struck.Struck[0])
		confWantRule(t, "rule with room", res.Rules[0], RuleResult{
			Allowed: true, Count: 2, Remaining: 3, Reset: confMsDur(t0 + w - now),
		})
		confWantRule(t, "full rule", res.Rules[1], RuleResult{
			Count: 1, Remaining: 0, Reset: confMsDur(t0 + w - now), RetryAfter: confMsDur(t0 + w - now),
		})
		confWantRule(t, "empty rule", res.Rules[2], RuleResult{Allowed: true, Count: 0, Remaining: 1})
	}
	// Neither the locked checks nor their rule denials recorded anything.
	res := c.check(t, c.a, CheckRequest{Rules: []Rule{rule}, Locks: []LockRef{{Key: other.Failures[0].LockKey}}})
	if !res.Allowed || res.Locked != nil || res.Rules[0].Count != 3 {
		t.Errorf("after locked checks: got %+v, want allowed, unlocked, count 3", res)
	}
}

func confLockEndsAtUntil(t *testing.T, c *conf) {
	esc := c.escalation("until", 2, []time.Duration{time.Minute}, time.Hour)
	lock := []LockRef{{Key: esc.Failures[0].LockKey}}
	c.fail(t, c.a, esc)
	struck := c.fail(t, c.b, esc)
	confWantStrike(t, "strike", struck, esc, 1)
	c.advance(t, time.Minute-time.Millisecond)
	res := c.check(t, c.a, CheckRequest{Locks: lock})
	confWantLock(t, "1ms before Until", res.Locked, struck.Struck[0])
	if res.Allowed {
		t.Errorf("1ms before Until: got allowed, want denied")
	}
	if got := len(c.lockouts(t, c.b)); got != 1 {
		t.Errorf("1ms before Until: got %d lockouts, want 1", got)
	}
	c.advance(t, time.Millisecond)
	res = c.check(t, c.b, CheckRequest{Locks: lock})
	if !res.Allowed || res.Locked != nil {
		t.Errorf("at Until: got %+v, want allowed, not locked", res)
	}
	if got := c.lockouts(t, c.a); len(got) != 0 {
		t.Errorf("at Until: got lockouts %+v, want none", got)
	}
	rep := c.report(t, c.a, ReportRequest{Locks: lock})
	if rep.Locked != nil {
		t.Errorf("success at Until: got locked %+v, want none", rep.Locked)
	}
}

func confSpareIfTrusted(t *testing.T, c *conf) {
	esc := c.escalation("spare", 1, []time.Duration{time.Hour}, time.Hour)
	lockKey := esc.Failures[0].LockKey
	struck := c.fail(t, c.a, esc).Struck[0]
	spare := []LockRef{{Key: lockKey, SpareIfTrusted: true}}
	trusted, stranger := c.key("trust", "dev"), c.key("trust", "other")

	res := c.check(t, c.b, CheckRequest{Locks: spare, TrustKey: trusted})
	confWantLock(t, "before any success", res.Locked, struck)

	rep := c.report(t, c.a, ReportRequest{Locks: spare, TrustKey: trusted, TrustTTL: time.Minute})
	if rep.Locked != nil {
		t.Errorf("success that trusts the device: got locked %+v, want none", rep.Locked)
	}
	untrusting := c.key("trust", "ttl0")
	c.report(t, c.b, ReportRequest{TrustKey: untrusting, TrustTTL: 0})

	cases := []struct {
		name   string
		locks  []LockRef
		trust  string
		locked bool
	}{
		{"trusted device", spare, trusted, false},
		{"lock that spares nobody", []LockRef{{Key: lockKey}}, trusted, true},
		{"other device", spare, stranger, true},
		{"no device", spare, "", true},
		{"success with TrustTTL 0", spare, untrusting, true},
	}
	for i, tc := range cases {
		res := c.check(t, c.store(i), CheckRequest{Locks: tc.locks, TrustKey: tc.trust})
		if got := res.Locked != nil; got != tc.locked || res.Allowed == tc.locked {
			t.Errorf("%s: got locked %+v allowed %v, want locked %v", tc.name, res.Locked, res.Allowed, tc.locked)
		}
	}
	other := c.escalation("sparefail", 100, []time.Duration{time.Minute}, time.Hour)
	rep = c.report(t, c.b, ReportRequest{Failure: true, Escalation: other, Locks: spare, TrustKey: trusted})
	if rep.Locked != nil {
		t.Errorf("failure from a trusted device: got locked %+v, want none", rep.Locked)
	}

	// Trust expires after its TTL.
	brief := c.key("trust", "brief")
	c.report(t, c.a, ReportRequest{TrustKey: brief, TrustTTL: 150 * time.Millisecond})
	c.advance(t, 250*time.Millisecond)
	res = c.check(t, c.b, CheckRequest{Locks: spare, TrustKey: brief})
	confWantLock(t, "after TrustTTL", res.Locked, struck)
}

func confTrustTTLExact(t *testing.T, c *conf) {
	esc := c.escalation("trustx", 1, []time.Duration{time.Hour}, time.Hour)
	spare := []LockRef{{Key: esc.Failures[0].LockKey, SpareIfTrusted: true}}
	trust := c.key("trust", "x")
	c.fail(t, c.a, esc)
	c.report(t, c.b, ReportRequest{TrustKey: trust, TrustTTL: 10 * time.Second})
	c.advance(t, 10*time.Second-time.Millisecond)
	if res := c.check(t, c.a, CheckRequest{Locks: spare, TrustKey: trust}); res.Locked != nil {
		t.Errorf("1ms before TrustTTL: got locked %+v, want spared", res.Locked)
	}
	c.advance(t, time.Millisecond)
	if res := c.check(t, c.b, CheckRequest{Locks: spare, TrustKey: trust}); res.Locked == nil {
		t.Errorf("at TrustTTL: got not locked, want locked")
	}
}

func confSuccessClears(t *testing.T, c *conf) {
	near := c.escalation("near", 3, []time.Duration{time.Minute}, time.Hour)
	far := c.escalation("far", 3, []time.Duration{time.Minute}, time.Hour)
	both := Escalation{Failures: append(slices.Clone(near.Failures), far.Failures...), Ladder: near.Ladder, Decay: near.Decay}
	fail := func(i int) []string {
		res := c.report(t, c.store(i), ReportRequest{Failure: true, Escalation: both})
		var keys []string
		for _, l := range res.Struck {
			keys = append(keys, l.Key)
		}
		return keys
	}
	fail(0)
	fail(1)
	c.report(t, c.a, ReportRequest{Clear: []string{near.Failures[0].Key}})
	if got, want := fail(2), []string{far.Failures[0].LockKey}; !slices.Equal(got, want) {
		t.Errorf("third failure after clearing near: got struck %v, want %v", got, want)
	}
	if got := fail(3); len(got) != 0 {
		t.Errorf("fourth failure: got struck %v, want none", got)
	}
	if got, want := fail(4), []string{near.Failures[0].LockKey}; !slices.Equal(got, want) {
		t.Errorf("fifth failure: got struck %v, want %v", got, want)
	}
}

func confReportAnswersLock(t *testing.T, c *conf) {
	esc := c.escalation("answer", 2, []time.Duration{time.Minute}, time.Hour)
	lockKey := esc.Failures[0].LockKey
	c.fail(t, c.a, esc)
	struck := c.fail(t, c.b, esc).Struck[0]

	res := c.fail(t, c.a, esc)
	if len(res.Struck) != 0 {
		t.Errorf("failure that does not strike: got struck %+v", res.Struck)
	}
	confWantLock(t, "failure that does not strike", res.Locked, struck)
	res = c.report(t, c.b, ReportRequest{Locks: []LockRef{{Key: c.key("lock", "idle")}, {Key: lockKey}}})
	confWantLock(t, "success", res.Locked, struck)
	res = c.report(t, c.a, ReportRequest{Failure: true, Escalation: c.escalation("unrelated", 5, esc.Ladder, esc.Decay)})
	if res.Locked != nil {
		t.Errorf("report without Locks: got locked %+v, want none", res.Locked)
	}
}

func confDenialFailures(t *testing.T, c *conf) {
	rule := Rule{Key: c.key("log", "denials"), Limit: 1, Window: confWindow}
	esc := c.escalation("denials", 2, []time.Duration{time.Minute}, time.Hour)
	lock := []LockRef{{Key: esc.Failures[0].LockKey}}
	req := CheckRequest{Rules: []Rule{rule}, Locks: lock, DenialFailures: &esc}

	if res := c.check(t, c.a, req); !res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("first check: got %+v, want allowed, nothing struck", res)
	}
	res := c.check(t, c.b, req)
	if res.Allowed || res.Locked != nil || len(res.Struck) != 0 {
		t.Fatalf("first denial: got %+v, want a rate-limit denial, nothing struck", res)
	}
	res = c.check(t, c.a, req)
	if res.Allowed || res.Locked != nil || res.Rules[0].Allowed || res.Rules[0].RetryAfter <= 0 {
		t.Errorf("second denial: got %+v, want a rate-limit denial with RetryAfter", res)
	}
	if len(res.Struck) != 1 {
		t.Fatalf("second denial: got struck %+v, want one strike", res.Struck)
	}
	confWantLock(t, "second denial", &res.Struck[0], confStruckState(esc, 1, res.Now))
	next := c.check(t, c.b, req)
	confWantLock(t, "check after the strike", next.Locked, res.Struck[0])
	if next.Allowed || len(next.Struck) != 0 {
		t.Errorf("check after the strike: got %+v, want denied, nothing struck", next)
	}

	// A shadow rule that would deny is no denial and records no failure.
	shadow := Rule{Key: c.key("log", "denialshadow"), Limit: 1, Window: confWindow, Shadow: true}
	quick := c.escalation("denialshadow", 1, []time.Duration{time.Minute}, time.Hour)
	for i := range 3 {
		res := c.check(t, c.store(i), CheckRequest{Rules: []Rule{shadow}, DenialFailures: &quick})
		if !res.Allowed || len(res.Struck) != 0 {
			t.Errorf("shadow check %d: got %+v, want allowed, nothing struck", i, res)
		}
	}
}

func confUnlock(t *testing.T, c *conf) {
	esc := c.escalation("unlock", 2, []time.Duration{time.Minute, 5 * time.Minute}, time.Hour)
	lockKey, failKey := esc.Failures[0].LockKey, esc.Failures[0].Key
	req := UnlockRequest{Locks: []string{lockKey}, Failures: []string{failKey}}
	if c.unlock(t, c.a, req) {
		t.Errorf("unlock with nothing locked: got true, want false")
	}
	c.fail(t, c.a, esc)
	confWantStrike(t, "first strike", c.fail(t, c.b, esc), esc, 1)
	if !c.unlock(t, c.a, req) {
		t.Errorf("unlock of an active lock: got false, want true")
	}
	if res := c.check(t, c.b, CheckRequest{Locks: []LockRef{{Key: lockKey}}}); res.Locked != nil {
		t.Errorf("after unlock: got locked %+v", res.Locked)
	}
	if got := c.lockouts(t, c.a); len(got) != 0 {
		t.Errorf("after unlock: got lockouts %+v, want none", got)
	}
	if c.unlock(t, c.b, req) {
		t.Errorf("second unlock: got true, want false")
	}
	// The level was reset.
	c.fail(t, c.a, esc)
	confWantStrike(t, "strike after unlock", c.fail(t, c.b, esc), esc, 1)

	// Unlock deletes failure logs even with no lock named.
	c.fail(t, c.a, esc)
	if c.unlock(t, c.b, UnlockRequest{Failures: []string{failKey}}) {
		t.Errorf("unlock of failures only: got true, want false")
	}
	if res := c.fail(t, c.a, esc); len(res.Struck) != 0 {
		t.Errorf("first failure after the log was deleted: got struck %+v, want none", res.Struck)
	}
	confWantStrike(t, "second failure: level kept", c.fail(t, c.b, esc), esc, 2)

	// Unlocking an ended lockout whose level has not decayed reports false
	// but still resets the level.
	ended := c.escalation("ended", 1, []time.Duration{100 * time.Millisecond, time.Minute}, time.Hour)
	confWantStrike(t, "short strike", c.fail(t, c.a, ended), ended, 1)
	c.advance(t, 150*time.Millisecond)
	if c.unlock(t, c.b, UnlockRequest{Locks: []string{ended.Failures[0].LockKey}}) {
		t.Errorf("unlock of an ended lockout: got true, want false")
	}
	confWantStrike(t, "strike after unlocking an ended lockout", c.fail(t, c.a, ended), ended, 1)
}

func confLockouts(t *testing.T, c *conf) {
	ladders := []time.Duration{500 * time.Millisecond, time.Minute, 2 * time.Minute}
	var want []LockState
	for i, d := range ladders {
		esc := c.escalation("listed"+string(rune('a'+i)), 1, []time.Duration{d}, time.Hour)
		if i == 1 {
			esc.Failures[0].Info = strings.Repeat("i", 512)
		}
		res := c.fail(t, c.store(i), esc)
		confWantStrike(t, "strike", res, esc, 1)
		want = append(want, res.Struck[0])
	}
	slices.Reverse(want) // Until descending
	for i, s := range []Store{c.a, c.b} {
		got := c.lockouts(t, s)
		if len(got) != len(want) {
			t.Fatalf("store %d: got %d lockouts %+v, want %d", i, len(got), got, len(want))
		}
		for j := range want {
			confWantLock(t, "listed lockout", &got[j], want[j])
		}
	}
	c.advance(t, 600*time.Millisecond)
	got := c.lockouts(t, c.b)
	if len(got) != 2 {
		t.Fatalf("after the shortest ended: got %d lockouts %+v, want 2", len(got), got)
	}
	for j := range got {
		confWantLock(t, "listed lockout", &got[j], want[j])
	}
}

func confConcurrentStrikes(t *testing.T, c *conf) {
	const (
		workers = 32
		reports = 2
		limit   = 4
	)
	ladder := make([]time.Duration, 20)
	for i := range ladder {
		ladder[i] = time.Duration(i+1) * time.Minute
	}
	esc := c.escalation("parallel", limit, ladder, time.Hour)
	type outcome struct {
		levels []int
		err    error
	}
	out := make(chan outcome, workers)
	start := make(chan struct{})
	for w := range workers {
		go func() {
			var o outcome
			<-start
			for range reports {
				res, err := c.store(w).Report(context.Background(), &ReportRequest{
					Failure: true, Escalation: esc, Nonce: confFreshNonce(),
				})
				if err != nil {
					o.err = err
					break
				}
				for _, l := range res.Struck {
					o.levels = append(o.levels, l.Level)
				}
			}
			out <- o
		}()
	}
	close(start)
	var levels []int
	for range workers {
		o := <-out
		if o.err != nil {
			t.Errorf("Report: %v", o.err)
		}
		levels = append(levels, o.levels...)
	}
	slices.Sort(levels)
	want := make([]int, workers*reports/limit)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(levels, want) {
		t.Errorf("%d concurrent failures, limit %d: got strike levels %v, want %v", workers*reports, limit, levels, want)
	}
}

// confLockoutPages: listings by lockout index and by key pattern, paged,
// filtered by Keep, ended lockouts left out, cursors validated.
func confLockoutPages(t *testing.T, c *conf) {
	idxA, idxB := c.key("idx", "a"), c.key("idx", "b")
	var inA []string
	for i := range 5 {
		name := "paged" + string(rune('a'+i))
		esc := c.escalation(name, 1, []time.Duration{time.Duration(i+1) * time.Minute}, time.Hour)
		esc.Failures[0].Indexes = []string{idxB}
		if i < 3 {
			esc.Failures[0].Indexes = []string{idxA, idxB}
			inA = append(inA, esc.Failures[0].LockKey)
		}
		confWantStrike(t, "strike", c.fail(t, c.store(i), esc), esc, 1)
	}
	ended := c.escalation("pagedend", 1, []time.Duration{100 * time.Millisecond}, time.Hour)
	ended.Failures[0].Indexes = []string{idxA}
	confWantStrike(t, "short strike", c.fail(t, c.a, ended), ended, 1)
	c.advance(t, 150*time.Millisecond)

	all := func(s Store, q LockQuery) []string {
		t.Helper()
		var keys []string
		for range 10 {
			page, err := s.Lockouts(context.Background(), &q)
			if err != nil {
				t.Fatalf("Lockouts(%+v): %v", q, err)
			}
			if len(page.Locks) > q.Limit {
				t.Fatalf("Lockouts: %d lockouts on a page of %d", len(page.Locks), q.Limit)
			}
			// Next is "" exactly when nothing follows (as /v1/audit's
			// next_cursor): a cursor never leads to an empty page.
			if len(page.Locks) == 0 && q.Cursor != "" {
				t.Errorf("Lockouts(%+v): the previous page's cursor led to an empty page", q)
			}
			for _, l := range page.Locks {
				keys = append(keys, l.Key)
			}
			if page.Next == "" {
				return keys
			}
			q.Cursor = page.Next
		}
		t.Fatalf("Lockouts(%+v): more than 10 pages", q)
		return nil
	}
	// Ending last first: the index listing is ordered across pages.
	wantA := slices.Clone(inA)
	slices.Reverse(wantA)
	if got := all(c.b, LockQuery{Index: idxA, Limit: 2}); !slices.Equal(got, wantA) {
		t.Errorf("by index, pages of 2: got %v, want %v", got, wantA)
	}
	if got := all(c.a, LockQuery{Index: idxB, Limit: 1}); len(got) != 5 {
		t.Errorf("by index b, pages of 1: got %v, want 5 lockouts", got)
	}
	got := all(c.a, LockQuery{Pattern: c.key("lock", "paged*"), Limit: 2})
	slices.Sort(got)
	if len(got) != 5 || len(slices.Compact(slices.Clone(got))) != 5 {
		t.Errorf("by pattern, pages of 2: got %v, want the 5 active lockouts once each", got)
	}
	// A page holding the last active lockout has no cursor, though an
	// ended lockout's record (kept for the decay) matches after it.
	for _, tc := range []struct {
		q    LockQuery
		want int
	}{{LockQuery{Pattern: c.key("lock", "paged*"), Limit: 5}, 5}, {LockQuery{Index: idxA, Limit: 3}, 3}} {
		page, err := c.a.Lockouts(context.Background(), &tc.q)
		if err != nil || len(page.Locks) != tc.want || page.Next != "" {
			t.Errorf("Lockouts(%+v) = %d lockouts, next %q, %v; want %d and no cursor", tc.q, len(page.Locks), page.Next, err, tc.want)
		}
	}
	keep := func(st LockState) bool { return st.Level == 1 && st.Key != inA[0] }
	if got := all(c.b, LockQuery{Index: idxA, Limit: 10, Keep: keep}); !slices.Equal(got, wantA[:2]) {
		t.Errorf("by index with Keep: got %v, want %v", got, wantA[:2])
	}
	if got := all(c.b, LockQuery{Pattern: c.key("nothing*"), Limit: 10}); len(got) != 0 {
		t.Errorf("pattern matching nothing: got %v", got)
	}
	for _, q := range []LockQuery{
		{Index: idxA, Limit: 0},
		{Index: idxA, Limit: 1001},
		{Limit: 10},
		{Index: idxA, Limit: 10, Cursor: "tampered"},
		{Pattern: "*", Limit: 10, Cursor: "tampered"},
	} {
		if _, err := c.a.Lockouts(context.Background(), &q); err == nil {
			t.Errorf("Lockouts(%+v): no error", q)
		}
	}
	// A lockout of a page already read vanishing (unlocked, expired)
	// makes the listing skip none of the others.
	q := LockQuery{Pattern: c.key("lock", "paged*"), Limit: 2}
	page1, err := c.a.Lockouts(context.Background(), &q)
	if err != nil || len(page1.Locks) != 2 || page1.Next == "" {
		t.Fatalf("pattern page 1: %+v, %v", page1, err)
	}
	c.unlock(t, c.b, UnlockRequest{Locks: []string{page1.Locks[0].Key}})
	q.Cursor = page1.Next
	rest := map[string]bool{}
	for range 10 {
		page, err := c.a.Lockouts(context.Background(), &q)
		if err != nil {
			t.Fatalf("pattern page: %v", err)
		}
		for _, l := range page.Locks {
			rest[l.Key] = true
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	if len(rest) != 3 || rest[page1.Locks[0].Key] || rest[page1.Locks[1].Key] {
		t.Errorf("after unlocking one of page 1: got %v, want the 3 lockouts page 1 did not hold", rest)
	}
}

// confShorterLadder: two actions share a lock key (one ledger) with
// ladders of different lengths; a strike through the shorter ladder never
// lowers the key's level nor ends its running lockout earlier.
func confShorterLadder(t *testing.T, c *conf) {
	long := c.escalation("ledger", 1, []time.Duration{time.Minute, time.Hour, 6 * time.Hour}, 24*time.Hour)
	short := long
	short.Failures = []FailureRule{long.Failures[0]}
	short.Failures[0].Key = c.key("fail", "ledger-short")
	short.Ladder = []time.Duration{time.Minute, 2 * time.Minute}
	var top LockState
	for level := 1; level <= 3; level++ {
		res := c.fail(t, c.store(level), long)
		if len(res.Struck) != 1 || res.Struck[0].Level != level {
			t.Fatalf("strike %d on the long ladder: %+v", level, res.Struck)
		}
		top = res.Struck[0]
	}
	res := c.fail(t, c.a, short)
	if len(res.Struck) != 1 {
		t.Fatalf("strike on the short ladder: %+v, want one strike", res.Struck)
	}
	if got := res.Struck[0]; got.Level != 3 || got.Until.Before(top.Until) {
		t.Errorf("strike on the short ladder after level 3 until %v: got level %d until %v; want level 3, until no earlier", top.Until, got.Level, got.Until)
	}
	if res.Locked == nil || res.Locked.Level != 3 || res.Locked.Until.Before(top.Until) {
		t.Errorf("report's lock %+v; want level 3 until no earlier than %v", res.Locked, top.Until)
	}
	// Below its ladder's top a strike restarts the lockout at its step,
	// even one shorter than the running lockout (a decreasing ladder).
	down := c.escalation("ledger-down", 1, []time.Duration{time.Hour, time.Minute}, 24*time.Hour)
	c.fail(t, c.a, down)
	res = c.fail(t, c.b, down)
	if len(res.Struck) != 1 || res.Struck[0].Level != 2 || !res.Struck[0].Until.Equal(res.Struck[0].Since.Add(time.Minute)) {
		t.Errorf("second strike of a decreasing ladder: %+v; want level 2 for 1m from the strike", res.Struck)
	}
}

// confStrikeReportsTrust: a check whose denial strikes (DenialFailures)
// reports whether its TrustKey names a trusted device (CheckResult.
// Trusted), so the caller can tell whether a struck lock that spares such
// a device stands in this device's way; without a strike it is false.
func confStrikeReportsTrust(t *testing.T, c *conf) {
	trusted, stranger := c.key("trust", "st-dev"), c.key("trust", "st-other")
	c.report(t, c.a, ReportRequest{TrustKey: trusted, TrustTTL: time.Minute})
	full := Rule{Key: c.key("log", "st-full"), Limit: 1, Window: confWindow}
	c.check(t, c.a, CheckRequest{Rules: []Rule{full}})
	for i, tc := range []struct {
		name, trust string
		want        bool
	}{{"trusted device", trusted, true}, {"other device", stranger, false}, {"no device", "", false}} {
		esc := c.escalation("st-"+strconv.Itoa(i), 1, []time.Duration{time.Hour}, time.Hour)
		req := CheckRequest{Rules: []Rule{full}, Locks: []LockRef{{Key: esc.Failures[0].LockKey, SpareIfTrusted: true}},
			TrustKey: tc.trust, DenialFailures: &esc}
		res := c.check(t, c.store(i), req)
		if res.Allowed || len(res.Struck) != 1 || res.Trusted != tc.want {
			t.Errorf("%s: got allowed %v struck %d trusted %v, want a striking denial with trusted %v", tc.name, res.Allowed, len(res.Struck), res.Trusted, tc.want)
		}
	}
	// Without a strike Trusted says nothing.
	if res := c.check(t, c.b, CheckRequest{Rules: []Rule{full}, TrustKey: trusted}); res.Trusted {
		t.Errorf("denial without a strike: got trusted true, want false")
	}
}
