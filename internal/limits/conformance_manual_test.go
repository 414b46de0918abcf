package limits

import (
	"context"
	"errors"
	"testing"
	"time"
)

// confManualCases are the conformance cases of Store.Lock (manual
// lockouts); runConformance runs them with the others.
func confManualCases() []confCase {
	return []confCase{
		{"ManualLock", false, confManualLock},
		{"ManualLockKeepsLevel", false, confManualKeepsLevel},
		{"ManualLockStrikeDuring", false, confManualStrikeDuring},
		{"ManualLockStrikeDuringAnotherLongerLock", false, confManualStrikeBesideLonger},
		{"ManualLockUnlock", false, confManualUnlock},
		{"ManualLockEndsExact", true, confManualEndsExact},
		{"ManualLockRejectsInvalid", false, confManualRejectsInvalid},
	}
}

func (c *conf) lock(t *testing.T, s Store, req LockRequest) []LockState {
	t.Helper()
	got, err := s.Lock(context.Background(), &req)
	if c.h.LockUnavailable {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Lock with the primary down: got %v, want ErrUnavailable", err)
		}
		t.Skip("Lock is unavailable on this store, as it must be")
	}
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if len(got) != len(req.Locks) {
		t.Fatalf("Lock: got %d states, want %d", len(got), len(req.Locks))
	}
	return got
}

// confManualLock: a key without strikes is locked at level 0 for exactly
// the duration, checks naming the record are denied by it, and listings
// show it with its info.
func confManualLock(t *testing.T, c *conf) {
	mk, sk := c.key("lock", "manual-"+"a"), c.key("lock", "a")
	got := c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: sk, Info: "info-a"}}, Duration: time.Hour})
	want := LockState{Key: mk, Level: 0, Since: got[0].Since, Until: got[0].Since.Add(time.Hour), Info: "info-a"}
	confWantLock(t, "Lock answer", &got[0], want)

	res := c.check(t, c.b, CheckRequest{
		Rules: []Rule{{Key: c.key("log", "a"), Limit: 5, Window: confWindow}},
		Locks: []LockRef{{Key: sk}, {Key: mk}},
	})
	if res.Allowed {
		t.Fatal("check under a manual lock: allowed, want denied")
	}
	confWantLock(t, "check Locked", res.Locked, want)
	if res.Rules[0].Count != 0 {
		t.Errorf("check under a manual lock logged: count %d, want 0", res.Rules[0].Count)
	}
	ls := c.lockouts(t, c.b)
	if len(ls) != 1 {
		t.Fatalf("lockouts: got %+v, want the manual lock", ls)
	}
	confWantLock(t, "listing", &ls[0], want)
}

// confManualKeepsLevel: locking a struck key answers the strike record's
// level and leaves that record as it was (a manual lock is not a strike).
func confManualKeepsLevel(t *testing.T, c *conf) {
	esc := c.escalation("lvl", 1, []time.Duration{time.Minute, time.Hour}, 24*time.Hour)
	struck := c.fail(t, c.a, esc).Struck[0]
	mk := c.key("lock", "manual-"+"lvl")
	got := c.lock(t, c.b, LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: struck.Key, Info: "m"}}, Duration: 2 * time.Hour})
	if got[0].Level != 1 || !got[0].Until.Equal(got[0].Since.Add(2*time.Hour)) {
		t.Errorf("Lock answer %+v: want level 1 (the strike's) and until since+2h", got[0])
	}
	ls := c.lockouts(t, c.a)
	if len(ls) != 2 {
		t.Fatalf("lockouts: got %+v, want the manual and the struck record", ls)
	}
	confWantLock(t, "struck record untouched", &ls[1], struck)
	if ls[0].Key != mk || ls[0].Level != 0 {
		t.Errorf("first listed %+v: want the manual record (ends last) at level 0", ls[0])
	}
}

// confManualStrikeDuring: a strike during a manual lock raises the strike
// record's level as usual; the key stays locked until the later end, and
// a strike lock that outlasts a short manual lock is answered by Lock.
func confManualStrikeDuring(t *testing.T, c *conf) {
	esc := c.escalation("during", 1, []time.Duration{time.Minute, 3 * time.Hour}, 24*time.Hour)
	sk := esc.Failures[0].LockKey
	mk := c.key("lock", "manual-"+"during")
	ml := c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: sk}}, Duration: time.Hour})[0]
	// The manual record after its key's struck record shares its level
	// (LockRef.SharesLevel): the strike raises the key's level as usual,
	// and the lock ends at the later of the two ends.
	paired := []LockRef{{Key: sk}, {Key: mk, SharesLevel: true}}
	first := c.report(t, c.b, ReportRequest{Failure: true, Escalation: esc, Locks: paired})
	if len(first.Struck) != 1 || first.Struck[0].Level != 1 {
		t.Fatalf("strike during a manual lock: got %+v, want level 1", first.Struck)
	}
	if !first.Struck[0].Until.Equal(ml.Until) {
		t.Errorf("strike during a manual lock: until %v, want the manual end %v (the later of the two)", first.Struck[0].Until, ml.Until)
	}
	if first.Locked == nil || first.Locked.Key != mk || first.Locked.Level != 1 || !first.Locked.Until.Equal(ml.Until) {
		t.Errorf("striking report: locked %+v, want the manual record at the key's level 1 until the manual end %v", first.Locked, ml.Until)
	}
	res := c.check(t, c.a, CheckRequest{Locks: []LockRef{{Key: sk}, {Key: mk}}, Nonce: confFreshNonce()})
	if res.Allowed || res.Locked == nil || !res.Locked.Until.Equal(ml.Until) || res.Locked.Level != 0 {
		t.Errorf("check: got %+v, want locked until the manual end %v (later than the 1m strike), the manual record's own level 0 when not paired", res.Locked, ml.Until)
	}
	res = c.check(t, c.a, CheckRequest{Locks: paired, Nonce: confFreshNonce()})
	if res.Allowed || res.Locked == nil || !res.Locked.Until.Equal(ml.Until) || res.Locked.Level != 1 {
		t.Errorf("paired check: got %+v, want locked until the manual end %v at the key's level 1", res.Locked, ml.Until)
	}
	second := c.fail(t, c.b, esc)
	if len(second.Struck) != 1 || second.Struck[0].Level != 2 {
		t.Fatalf("second strike: got %+v, want level 2", second.Struck)
	}
	res = c.check(t, c.a, CheckRequest{Locks: []LockRef{{Key: sk}, {Key: mk}}, Nonce: confFreshNonce()})
	if res.Locked == nil || !res.Locked.Until.Equal(second.Struck[0].Until) || res.Locked.Level != 2 {
		t.Errorf("check: got %+v, want the 3h strike (later than the manual end)", res.Locked)
	}
	again := c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: sk}}, Duration: time.Second})[0]
	if again.Level != 2 || !again.Until.Equal(second.Struck[0].Until) {
		t.Errorf("Lock answer %+v: want level 2 and the strike's later end %v", again, second.Struck[0].Until)
	}
}

// confManualStrikeBesideLonger: a strike during a manual lock of its key
// answers, as the struck lock's end, the later of the strike's and that
// manual lock's, also when another key of the request is locked longer
// still (so Locked is that other key's lock and cannot tell it).
func confManualStrikeBesideLonger(t *testing.T, c *conf) {
	esc := c.escalation("beside", 1, []time.Duration{time.Minute}, 24*time.Hour)
	sk := esc.Failures[0].LockKey
	mk := c.key("lock", "manual-"+"beside")
	other := c.key("lock", "manual-"+"beside-other")
	ml := c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: sk}}, Duration: time.Hour})[0]
	ol := c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: other}}, Duration: 2 * time.Hour})[0]
	locks := []LockRef{{Key: sk}, {Key: mk, SharesLevel: true}, {Key: other}}
	rep := c.report(t, c.b, ReportRequest{Failure: true, Escalation: esc, Locks: locks})
	if len(rep.Struck) != 1 || rep.Struck[0].Key != sk {
		t.Fatalf("strike: got %+v, want one on %s", rep.Struck, sk)
	}
	if !rep.Struck[0].Until.Equal(ml.Until) {
		t.Errorf("struck until %v, want its key's manual end %v (later than the 1m strike)", rep.Struck[0].Until, ml.Until)
	}
	if rep.Locked == nil || rep.Locked.Key != other || !rep.Locked.Until.Equal(ol.Until) {
		t.Errorf("locked %+v, want the other key's longer lock until %v", rep.Locked, ol.Until)
	}
}

// confManualUnlock: Unlock naming the manual record lifts it.
func confManualUnlock(t *testing.T, c *conf) {
	mk := c.key("lock", "manual-"+"u")
	c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk}}, Duration: time.Hour})
	if !c.unlock(t, c.b, UnlockRequest{Locks: []string{c.key("lock", "u"), mk}}) {
		t.Error("Unlock: got false, want true (the manual lock was active)")
	}
	res := c.check(t, c.a, CheckRequest{Locks: []LockRef{{Key: mk}}})
	if !res.Allowed || res.Locked != nil {
		t.Errorf("check after unlock: got allowed %v locked %+v, want allowed", res.Allowed, res.Locked)
	}
	if ls := c.lockouts(t, c.a); len(ls) != 0 {
		t.Errorf("lockouts after unlock: %+v, want none", ls)
	}
}

// confManualEndsExact: the lock holds 1ms before its end and is gone at it.
func confManualEndsExact(t *testing.T, c *conf) {
	mk := c.key("lock", "manual-"+"end")
	c.lock(t, c.a, LockRequest{Locks: []ManualLock{{Key: mk}}, Duration: time.Second})
	c.advance(t, time.Second-time.Millisecond)
	if res := c.check(t, c.b, CheckRequest{Locks: []LockRef{{Key: mk}}}); res.Allowed {
		t.Error("1ms before the end: allowed, want locked")
	}
	c.advance(t, time.Millisecond)
	if res := c.check(t, c.b, CheckRequest{Locks: []LockRef{{Key: mk}}}); !res.Allowed {
		t.Errorf("at the end: locked %+v, want allowed", res.Locked)
	}
	if ls := c.lockouts(t, c.a); len(ls) != 0 {
		t.Errorf("lockouts at the end: %+v, want none", ls)
	}
}

func confManualRejectsInvalid(t *testing.T, c *conf) {
	mk := c.key("lock", "manual-"+"bad")
	long := make([]byte, 513)
	for i := range long {
		long[i] = 'x'
	}
	for _, tc := range []struct {
		name string
		req  *LockRequest
	}{
		{"nil", nil},
		{"no locks", &LockRequest{Duration: time.Hour}},
		{"zero duration", &LockRequest{Locks: []ManualLock{{Key: mk}}}},
		{"over 30 days", &LockRequest{Locks: []ManualLock{{Key: mk}}, Duration: MaxManualLock + time.Millisecond}},
		{"empty key", &LockRequest{Locks: []ManualLock{{Key: ""}}, Duration: time.Hour}},
		{"same keys", &LockRequest{Locks: []ManualLock{{Key: mk, StrikeKey: mk}}, Duration: time.Hour}},
		{"long info", &LockRequest{Locks: []ManualLock{{Key: mk, Info: string(long)}}, Duration: time.Hour}},
	} {
		if _, err := c.a.Lock(context.Background(), tc.req); err == nil {
			t.Errorf("%s: Lock succeeded, want an error", tc.name)
		}
	}
	if c.h.LockUnavailable {
		return // listings are refused too
	}
	if ls := c.lockouts(t, c.a); len(ls) != 0 {
		t.Errorf("lockouts after rejected locks: %+v, want none", ls)
	}
}
