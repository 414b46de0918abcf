package limits

import (
	"testing"
	"time"
)

// Reservations in distinct failure rules (reserve_failures with a rule
// such as {dimension: ip, distinct: user}): each allowed check holds its
// value in the rule's pending set, counted with the set.

// confReserveDistinctCases run with confChallengeCases.
func confReserveDistinctCases() []confCase {
	return []confCase{
		{"ReserveDistinctStrikes", false, confReserveDistinctSequential},
		{"ReserveDistinctParallelStrikesOnce", false, confReserveDistinctParallel},
		{"ReserveDistinctSuccessTakesOneHolder", false, confReserveDistinctHolders},
		{"ReserveDistinctReportedFailureStays", false, confReserveDistinctReported},
		{"ReserveDistinctSettlesOnce", false, confReserveDistinctSettleOnce},
		{"ReserveDistinctUnlockClears", false, confReserveDistinctUnlock},
		{"ReserveDistinctDeniedHoldsNothing", false, confReserveDistinctDenied},
		{"ReserveDistinctStaleSuccessAfterStrike", false, confReserveDistinctStaleStrike},
		{"ReserveDistinctStaleSuccessAfterWindow", false, confReserveDistinctStaleWindow},
	}
}

// distinctEsc returns, for value v, a function building name's escalation
// of one distinct failure rule of limit distinct values with a pending
// set (a fresh slice each time: requests may run in parallel).
func (c *conf) distinctEsc(name string, limit int) func(v string) Escalation {
	return func(v string) Escalation {
		esc := c.escalation(name, limit, []time.Duration{time.Minute, 5 * time.Minute}, time.Hour)
		esc.Failures[0].Distinct = confValue(v)
		esc.Failures[0].Pending = c.key("pend", name)
		return esc
	}
}

// reserveDistinct is a reserved check of value v under record rec.
func (c *conf) reserveDistinct(t *testing.T, s Store, esc Escalation, rec string) CheckResult {
	t.Helper()
	return c.check(t, s, c.reserveReq(&esc, rec))
}

// wantNoStrike fails unless res struck nothing.
func wantNoStrike(t *testing.T, what string, struck []LockState) {
	t.Helper()
	if len(struck) != 0 {
		t.Fatalf("%s: got struck %+v, want none", what, struck)
	}
}

// confReserveDistinctSequential: L checks of L distinct values strike at
// the L-th, which is allowed; the next is locked out. Repeats of one
// value count once.
func confReserveDistinctSequential(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvdseq", 3)
	for i, v := range []string{"u1", "u2", "u1", "u2"} {
		res := c.reserveDistinct(t, c.store(i), esc(v), c.key("rec", confFreshNonce()))
		if !res.Allowed {
			t.Fatalf("check %d (%s): got %+v, want allowed", i+1, v, res)
		}
		wantNoStrike(t, "check of "+v, res.Struck)
	}
	res := c.reserveDistinct(t, c.a, esc("u3"), c.key("rec", confFreshNonce()))
	if !res.Allowed || len(res.Struck) != 1 {
		t.Fatalf("the third value's check: got %+v, want allowed with one strike", res)
	}
	confWantLock(t, "strike", &res.Struck[0], confStruckState(esc("u3"), 1, res.Now))
	if next := c.reserveDistinct(t, c.b, esc("u4"), c.key("rec", confFreshNonce())); next.Allowed || next.Locked == nil {
		t.Errorf("after the strike: got %+v, want locked out", next)
	}
}

// confReserveDistinctParallel: N parallel reserved checks of N distinct
// values at a limit of L strike exactly once: L allowed, the rest locked.
func confReserveDistinctParallel(t *testing.T, c *conf) {
	const workers, limit = 12, 4
	esc := c.distinctEsc("rsvdpar", limit)
	allowed, locked, struck := c.parallelReserved(t, workers, func(w int) CheckRequest {
		e := esc(string(rune('a'+w)) + "user")
		return c.reserveReq(&e, c.key("rec", confFreshNonce()))
	})
	if allowed != limit || locked != workers-limit || struck != 1 {
		t.Errorf("%d parallel reserved checks of distinct values, limit %d: got %d allowed, %d locked out, %d strikes; want %d, %d, 1",
			workers, limit, allowed, locked, struck, limit, workers-limit)
	}
}

// confReserveDistinctHolders: two checks of one value (in the same
// millisecond, as likely as not) hold it twice; a success takes back one
// holder, so the value stays counted until the second success. The
// success names its record, not its value: one reported with another
// value takes back the check's.
func confReserveDistinctHolders(t *testing.T, c *conf) {
	// One success of two: u1 is still held, so u1, u2 fill a limit of 2.
	esc := c.distinctEsc("rsvdhold", 2)
	rec1, rec2 := c.key("rec", confFreshNonce()), c.key("rec", confFreshNonce())
	wantNoStrike(t, "first check of u1", c.reserveDistinct(t, c.a, esc("u1"), rec1).Struck)
	wantNoStrike(t, "second check of u1", c.reserveDistinct(t, c.b, esc("u1"), rec2).Struck)
	c.report(t, c.a, ReportRequest{Escalation: esc("other"), Records: []string{rec1}})
	confWantStrike(t, "a failure of u2 (u1 still held by the second check: u1, u2)", c.fail(t, c.b, esc("u2")), esc("u2"), 1)

	// Both successes: u1 is no longer held.
	esc = c.distinctEsc("rsvdhold2", 2)
	rec1, rec2 = c.key("rec", confFreshNonce()), c.key("rec", confFreshNonce())
	wantNoStrike(t, "first check of u1", c.reserveDistinct(t, c.a, esc("u1"), rec1).Struck)
	wantNoStrike(t, "second check of u1", c.reserveDistinct(t, c.b, esc("u1"), rec2).Struck)
	c.report(t, c.a, ReportRequest{Escalation: esc("other"), Records: []string{rec1}})
	c.report(t, c.b, ReportRequest{Escalation: esc("u1"), Records: []string{rec2}})
	wantNoStrike(t, "a failure of u2 (u1 no longer held)", c.fail(t, c.a, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3 (u2, u3)", c.fail(t, c.b, esc("u3")), esc("u3"), 1)
}

// confReserveDistinctReported: a success takes back only the check's
// holder: the same value's reported failure stays counted.
func confReserveDistinctReported(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvdrep", 3)
	wantNoStrike(t, "a failure of u1", c.fail(t, c.a, esc("u1")).Struck)
	rec := c.key("rec", confFreshNonce())
	wantNoStrike(t, "a check of u1", c.reserveDistinct(t, c.b, esc("u1"), rec).Struck)
	c.report(t, c.a, ReportRequest{Escalation: esc("u1"), Records: []string{rec}})
	wantNoStrike(t, "a failure of u2 (u1, u2)", c.fail(t, c.b, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3 (u1 reported: u1, u2, u3)", c.fail(t, c.a, esc("u3")), esc("u3"), 1)
}

// confReserveDistinctSettleOnce: a failure report keeps the check's
// holder as its failure (no second entry); repeating it changes nothing;
// a check never reported stays a failure.
func confReserveDistinctSettleOnce(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvdonce", 4)
	rec := c.key("rec", confFreshNonce())
	wantNoStrike(t, "a check of u1", c.reserveDistinct(t, c.a, esc("u1"), rec).Struck)
	for i := range 3 {
		wantNoStrike(t, "the settling failure", c.report(t, c.store(i), ReportRequest{Failure: true, Escalation: esc("u1"), Records: []string{rec}}).Struck)
	}
	wantNoStrike(t, "a check of u2, never reported", c.reserveDistinct(t, c.b, esc("u2"), c.key("rec", confFreshNonce())).Struck)
	wantNoStrike(t, "a failure of u3 (u1, u2, u3)", c.fail(t, c.a, esc("u3")).Struck)
	confWantStrike(t, "a failure of u4 (u1, u2, u3, u4)", c.fail(t, c.b, esc("u4")), esc("u4"), 1)
}

// confReserveDistinctUnlock: an unlock that deletes the set and its
// pending set forgets the held values; a success after it takes back
// nothing that is not there.
func confReserveDistinctUnlock(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvdunl", 2)
	rec := c.key("rec", confFreshNonce())
	wantNoStrike(t, "a check of u1", c.reserveDistinct(t, c.a, esc("u1"), rec).Struck)
	f := esc("u1").Failures[0]
	c.unlock(t, c.b, UnlockRequest{Locks: []string{f.LockKey}, Failures: []string{f.Key, f.Pending}})
	c.report(t, c.a, ReportRequest{Escalation: esc("u1"), Records: []string{rec}})
	wantNoStrike(t, "a failure of u2 (the set was emptied)", c.fail(t, c.b, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3", c.fail(t, c.a, esc("u3")), esc("u3"), 1)
}

// confReserveDistinctDenied: a check that a rule denies holds nothing,
// also when the rule lies in another slot than the reservation (Cluster:
// that slot's share is released after the combined decision).
func confReserveDistinctDenied(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvddeny", 3)
	req := func(v string) CheckRequest {
		e := esc(v)
		r := c.reserveReq(&e, c.key("rec", confFreshNonce()))
		r.Rules[0].Limit = 1
		return r
	}
	if res := c.check(t, c.a, req("u1")); !res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("first check: got %+v, want allowed, nothing struck", res)
	}
	if res := c.check(t, c.b, req("u2")); res.Allowed || len(res.Struck) != 0 {
		t.Fatalf("second check (its rule full): got %+v, want denied, nothing struck", res)
	}
	wantNoStrike(t, "a failure of u3 (u1, u3: the denied u2 holds nothing)", c.fail(t, c.a, esc("u3")).Struck)
	confWantStrike(t, "a failure of u4 (u1, u3, u4)", c.fail(t, c.b, esc("u4")), esc("u4"), 1)
}

// confReserveDistinctStaleSuccessAfterStrike: a strike empties the pending
// set; a check of the same value after it holds the value anew, and the
// success of a check from before the strike (whose hold the strike took)
// takes nothing from it: the newer check's failure report keeps its hold.
func confReserveDistinctStaleStrike(t *testing.T, c *conf) {
	esc := c.distinctEsc("rsvdstale", 3)
	// Checks without the lock: allowed after the strike too.
	reserve := func(s Store, v, rec string) CheckResult {
		e := esc(v)
		req := c.reserveReq(&e, rec)
		req.Locks = nil
		return c.check(t, s, req)
	}
	old, fresh := c.key("rec", confFreshNonce()), c.key("rec", confFreshNonce())
	wantNoStrike(t, "the old check of u1", reserve(c.a, "u1", old).Struck)
	wantNoStrike(t, "a failure of u2", c.fail(t, c.b, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3 (u1, u2, u3)", c.fail(t, c.a, esc("u3")), esc("u3"), 1)
	wantNoStrike(t, "the new check of u1", reserve(c.b, "u1", fresh).Struck)
	c.report(t, c.a, ReportRequest{Escalation: esc("u1"), Records: []string{old}})
	wantNoStrike(t, "the new check's failure", c.report(t, c.b, ReportRequest{Failure: true, Escalation: esc("u1"), Records: []string{fresh}}).Struck)
	wantNoStrike(t, "a failure of u2 (u1, u2)", c.fail(t, c.a, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3 (u1 held by the new check: u1, u2, u3)", c.fail(t, c.b, esc("u3")), esc("u3"), 2)
}

// confReserveDistinctStaleSuccessAfterWindow: a hold older than the
// rule's window no longer counts, and a check of the same value then holds
// it anew; the old check's success (its record lives for the action's
// longest failure window, longer than this rule's) takes nothing from it.
func confReserveDistinctStaleWindow(t *testing.T, c *conf) {
	const w = time.Second
	esc := func(v string) Escalation {
		e := c.distinctEsc("rsvdwin", 3)(v)
		e.Failures[0].Window = w
		return e
	}
	reserve := func(s Store, v, rec string) CheckResult {
		e := esc(v)
		return c.check(t, s, c.reserveReq(&e, rec))
	}
	old, fresh := c.key("rec", confFreshNonce()), c.key("rec", confFreshNonce())
	wantNoStrike(t, "the old check of u1", reserve(c.a, "u1", old).Struck)
	c.advance(t, w+200*time.Millisecond)
	wantNoStrike(t, "the new check of u1", reserve(c.b, "u1", fresh).Struck)
	c.report(t, c.a, ReportRequest{Escalation: esc("u1"), Records: []string{old}})
	wantNoStrike(t, "the new check's failure", c.report(t, c.b, ReportRequest{Failure: true, Escalation: esc("u1"), Records: []string{fresh}}).Struck)
	wantNoStrike(t, "a failure of u2 (u1, u2)", c.fail(t, c.a, esc("u2")).Struck)
	confWantStrike(t, "a failure of u3 (u1 held by the new check: u1, u2, u3)", c.fail(t, c.b, esc("u3")), esc("u3"), 1)
}
