package abuse

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/notify"
)

// fakeNotifier keeps every notification; off lists events it does not want.
type fakeNotifier struct {
	mu  sync.Mutex
	got []notify.Event
	off []string
}

func (f *fakeNotifier) Wants(event string) bool { return !slices.Contains(f.off, event) }

func (f *fakeNotifier) Notify(e notify.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, e)
}

func (f *fakeNotifier) take() []notify.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.got
	f.got = nil
	return out
}

// summary is a notification without its id and times, for comparisons.
func summary(e notify.Event) string {
	return fmt.Sprintf("%s %s %s %s user=%s ip=%s device=%s level=%d reason=%q",
		e.Event, e.Instance, e.Ledger, e.Dimension, deref(e.User), deref(e.IP), deref(e.Device), e.Level, e.Reason)
}

func withNotifier(n Notifier) func(*Config) { return func(c *Config) { c.Notifier = n } }

func TestNotifyStrikes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		fn := &fakeNotifier{}
		g, rec := newGuard(t, b, authPolicy(3), withNotifier(fn))
		for range 2 {
			mustReport(t, g, failure("login", "Alice", "203.0.113.7", "d-1"))
		}
		if got := fn.take(); len(got) != 0 {
			t.Fatalf("before the strike: %v, want none", got)
		}
		mustReport(t, g, failure("login", "Alice", "203.0.113.7", "d-1"))
		e := rec.last(t)
		got := fn.take()
		want := []string{
			`lockout test-1 auth user+ip user=alice ip=203.0.113.7 device=d-1 level=1 reason="login/user+ip/failures"`,
			`lockout test-1 auth user user=alice ip=203.0.113.7 device=d-1 level=1 reason="login/user/failures"`,
		}
		if len(got) != len(want) {
			t.Fatalf("notifications = %v, want %d", got, len(want))
		}
		seen := map[string]bool{}
		for i, n := range got {
			if g := summary(n); g != want[i] {
				t.Errorf("notification %d = %s\nwant %s", i, g, want[i])
			}
			if deref(n.User) != e.User || deref(n.IP) != e.IP || deref(n.Device) != e.Device {
				t.Errorf("notification %d identifiers %s %s %s, want the audit event's %s %s %s", i,
					deref(n.User), deref(n.IP), deref(n.Device), e.User, e.IP, e.Device)
			}
			if !n.At.Equal(e.At) || !n.Until.Equal(*e.LockoutUntil) {
				t.Errorf("notification %d at %v until %v, want the report's %v and %v", i, n.At, n.Until, e.At, *e.LockoutUntil)
			}
			if len(n.ID) != 26 || seen[n.ID] || n.ID == e.ID {
				t.Errorf("notification %d id %q: want a fresh ULID", i, n.ID)
			}
			seen[n.ID] = true
		}
		// A strike while locked raises the level.
		for range 3 {
			mustReport(t, g, failure("login", "alice", "203.0.113.8", ""))
		}
		got = fn.take()
		if len(got) != 2 || got[0].Level != 1 || got[0].Dimension != DimUserIP || got[1].Level != 2 || got[1].Dimension != DimUser {
			t.Errorf("second strikes = %v, want user+ip level 1 and user level 2", got)
		}
	})
}

// Two failure rules on one dimension strike one lock; each notification
// names its own rule.
func TestNotifyStrikeNamesTheRule(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"login": {
			Failures: []Rule{
				{Name: "fast", Dimension: DimUser, Limit: 2, Window: time.Hour},
				{Name: "slow", Dimension: DimUser, Limit: 4, Window: time.Hour},
			},
			Lockout: Lockout{Ladder: []time.Duration{time.Minute, time.Hour}},
		}}}
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, pol, withNotifier(fn))
		var reasons []string
		for range 4 {
			mustReport(t, g, failure("login", "bob", "", ""))
			for _, n := range fn.take() {
				reasons = append(reasons, fmt.Sprintf("%s/%d", n.Reason, n.Level))
			}
		}
		if g, w := fmt.Sprint(reasons), "[fast/1 fast/2 slow/2]"; g != w {
			t.Errorf("strikes = %s, want %s", g, w)
		}
	})
}

func TestNotifyCountDenials(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, authPolicy(50), withNotifier(fn))
		in := CheckInput{Action: "otp_send", Subject: subj("alice", "203.0.113.7", "")}
		var d Decision
		for range 4 {
			d = mustCheck(t, g, in)
		}
		got := fn.take()
		if len(got) != 1 {
			t.Fatalf("notifications = %v, want one strike", got)
		}
		if g, w := summary(got[0]), `lockout test-1 otp_send user user=alice ip=203.0.113.7 device=<nil> level=1 reason="otp_send/user/failures"`; g != w {
			t.Errorf("notification = %s\nwant %s", g, w)
		}
		if !got[0].At.Equal(d.At) {
			t.Errorf("at = %v, want the striking check's %v", got[0].At, d.At)
		}
	})
}

func TestNotifyManualLockAndUnlock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, authPolicy(50), withNotifier(fn))
		ctx := context.Background()
		locks, err := g.Lock(ctx, LockInput{Dimension: DimIP, Subject: subj("alice", "203.0.113.9", ""), Duration: time.Hour, Reason: "scanner"})
		if err != nil {
			t.Fatal(err)
		}
		got := fn.take()
		want := []string{
			`lockout test-1 auth ip user=<nil> ip=203.0.113.9 device=<nil> level=0 reason="scanner"`,
			`lockout test-1 otp_send ip user=<nil> ip=203.0.113.9 device=<nil> level=0 reason="scanner"`,
		}
		if len(got) != 2 {
			t.Fatalf("notifications = %v, want one per ledger", got)
		}
		for i := range got {
			if g := summary(got[i]); g != want[i] || !got[i].Until.Equal(locks[i].Until) {
				t.Errorf("notification %d = %s until %v\nwant %s until %v", i, g, got[i].Until, want[i], locks[i].Until)
			}
		}
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimIP, Subject: subj("", "203.0.113.9", ""), Reason: "false positive"}); err != nil {
			t.Fatal(err)
		}
		got = fn.take()
		want = []string{
			`unlock test-1 auth ip user=<nil> ip=203.0.113.9 device=<nil> level=0 reason="false positive"`,
			`unlock test-1 otp_send ip user=<nil> ip=203.0.113.9 device=<nil> level=0 reason="false positive"`,
		}
		if len(got) != 2 || summary(got[0]) != want[0] || summary(got[1]) != want[1] || !got[0].Until.IsZero() {
			t.Errorf("unlock notifications = %v, want one per ledger that was locked, no until", got)
		}
		// A user locked in one ledger only: an unlock of every ledger
		// names that one.
		for range 2 {
			mustReport(t, g, failure("otp_verify", "bob", "", ""))
		}
		fn.take()
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimUser, Subject: subj("bob", "203.0.113.1", "")}); err != nil {
			t.Fatal(err)
		}
		if got := fn.take(); len(got) != 1 || got[0].Ledger != "auth" || deref(got[0].User) != "bob" || got[0].IP != nil {
			t.Errorf("unlock notifications = %v, want one for ledger auth naming bob", got)
		}
		// Nothing locked: no unlock, no notification.
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimIP, Subject: subj("", "203.0.113.9", ""), Ledger: "auth"}); err != ErrNotFound {
			t.Fatalf("second Unlock = %v, want ErrNotFound", err)
		}
		if got := fn.take(); len(got) != 0 {
			t.Errorf("notifications for nothing unlocked: %v", got)
		}
	})
}

func TestNotifyPseudonymized(t *testing.T) {
	b := memoryBackend(t)
	fn := &fakeNotifier{}
	g, rec := newGuard(t, b, authPolicy(50), withNotifier(fn), func(c *Config) { c.Pseudonymize = true })
	for range 3 {
		mustReport(t, g, failure("login", "alice", "203.0.113.7", ""))
	}
	e := rec.last(t)
	got := fn.take()
	if len(got) != 1 || got[0].User == nil || got[0].IP == nil || got[0].Dimension != DimUserIP {
		t.Fatalf("notifications = %v, want the user+ip strike", got)
	}
	if *got[0].User != e.User || *got[0].IP != e.IP || *got[0].User == "alice" || *got[0].IP == "203.0.113.7" {
		t.Errorf("identifiers %s %s, want the audit event's hashes %s %s", *got[0].User, *got[0].IP, e.User, e.IP)
	}
}

// Events the notifier does not want are not built (nor sent).
func TestNotifyWants(t *testing.T) {
	b := memoryBackend(t)
	fn := &fakeNotifier{off: []string{"lockout"}}
	g, _ := newGuard(t, b, authPolicy(50), withNotifier(fn))
	for range 3 {
		mustReport(t, g, failure("login", "alice", "203.0.113.7", ""))
	}
	if _, err := g.Lock(context.Background(), LockInput{Dimension: DimUser, Subject: subj("dave", "", ""), Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := fn.take(); len(got) != 0 {
		t.Errorf("with lockout off: %v, want none", got)
	}
	if err := g.Unlock(context.Background(), UnlockInput{Dimension: DimUser, Subject: subj("dave", "", "")}); err != nil {
		t.Fatal(err)
	}
	if got := fn.take(); len(got) != 2 || got[0].Event != "unlock" {
		t.Errorf("unlock notifications = %v, want one per ledger dave was locked in", got)
	}
}

// Two failure rules that lock one key (an ip log and an ip distinct set):
// the notification names the rule that struck, not the first on that key.
func TestNotifyStrikeNamesTheRuleSharingALockKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"login": {
			Failures: []Rule{
				{Name: "spray", Dimension: DimIP, Distinct: DimUser, Limit: 5, Window: time.Hour},
				{Name: "ipfails", Dimension: DimIP, Limit: 2, Window: time.Hour},
			},
			Lockout: Lockout{Ladder: []time.Duration{time.Minute, time.Hour}},
		}}}
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, pol, withNotifier(fn))
		mustReport(t, g, failure("login", "bob", "203.0.113.9", ""))
		mustReport(t, g, failure("login", "bob", "203.0.113.9", ""))
		var reasons []string
		for _, n := range fn.take() {
			reasons = append(reasons, n.Reason)
		}
		if g, w := fmt.Sprint(reasons), "[ipfails]"; g != w {
			t.Errorf("strike reasons = %s, want %s", g, w)
		}
	})
}

// TestNotifyStrikeDuringManualLock: the lockout notification of a strike
// during a manual lockout of the same key says the key's real end, the
// later manual one, at the strike's level.
func TestNotifyStrikeDuringManualLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, authPolicy(50), withNotifier(fn))
		ip := "203.0.113.44"
		locks, err := g.Lock(context.Background(), LockInput{Dimension: DimUserIP, Subject: subj("fay", ip, ""), Duration: time.Hour, Ledger: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		fn.take()
		for range 3 { // login's user+ip failure limit
			mustReport(t, g, failure("login", "fay", ip, ""))
		}
		got := fn.take()
		if len(got) != 1 || got[0].Level != 1 || !got[0].Until.Equal(locks[0].Until) {
			t.Errorf("strike notifications = %v; want one at level 1 until the manual end %v", got, locks[0].Until)
		}
	})
}

// TestNotifyStrikeDuringManualLockBesideALongerOne: the notification
// and the audit event of a strike during a manual lockout of its key say
// that key's end (the manual one) also when another key of the request is
// locked longer still: the lock the report answers is then that other
// one, which tells nothing of the struck key's end.
func TestNotifyStrikeDuringManualLockBesideALongerOne(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		fn := &fakeNotifier{}
		g, rec := newGuard(t, b, authPolicy(50), withNotifier(fn))
		ctx := context.Background()
		ip := "198.51.100.50"
		keyLock, err := g.Lock(ctx, LockInput{Dimension: DimUserIP, Subject: subj("bob2", ip, ""), Duration: 30 * time.Minute, Ledger: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Lock(ctx, LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Duration: time.Hour, Ledger: "auth"}); err != nil {
			t.Fatal(err)
		}
		fn.take()
		for range 3 { // login's user+ip failure limit
			mustReport(t, g, failure("login", "bob2", ip, ""))
		}
		end := keyLock[0].Until
		got := fn.take()
		if len(got) != 1 || got[0].Dimension != DimUserIP || !got[0].Until.Equal(end) {
			t.Errorf("strike notifications = %v; want one of the user+ip key until its manual end %v", got, end)
		}
		if e := rec.last(t); e.LockoutUntil == nil || !e.LockoutUntil.Equal(end) {
			t.Errorf("striking report's audit event: lockout_until %v; want the struck key's manual end %v", e.LockoutUntil, end)
		}
	})
}

// TestNotifyUnlockPhoneLedgers: an unlock of every ledger of a phone key
// names the ledgers that key was locked in, not those in which some other
// number, country or prefix is locked.
func TestNotifyUnlockPhoneLedgers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := phonePolicy()
		pol.Actions["otp_check"] = Action{
			Failures: []Rule{{Dimension: DimPhone, Limit: 2, Window: 10 * time.Minute}},
			Lockout:  Lockout{Ladder: []time.Duration{time.Minute}},
		}
		fn := &fakeNotifier{}
		g, _ := newGuard(t, b, pol, withNotifier(fn))
		ctx := context.Background()
		for _, tc := range []struct {
			dim            string
			mine, other    Subject
			ledger, others string
		}{
			{DimPhone, phoneSubj("+447400123456"), phoneSubj("+447400123457"), "otp_verify", "otp_check"},
			{DimPhoneCountry, phoneSubj("+447400123456"), phoneSubj("+33612345678"), "otp_check", "otp_verify"},
			{DimPhonePrefix, Subject{PhonePrefix: sp("+447400")}, Subject{PhonePrefix: sp("+447500")}, "otp_verify", "otp_check"},
		} {
			if _, err := g.Lock(ctx, LockInput{Dimension: tc.dim, Subject: tc.mine, Duration: time.Hour, Ledger: tc.ledger}); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Lock(ctx, LockInput{Dimension: tc.dim, Subject: tc.other, Duration: time.Hour, Ledger: tc.others}); err != nil {
				t.Fatal(err)
			}
			fn.take()
			if err := g.Unlock(ctx, UnlockInput{Dimension: tc.dim, Subject: tc.mine}); err != nil {
				t.Fatal(err)
			}
			var ledgers []string
			for _, n := range fn.take() {
				ledgers = append(ledgers, n.Ledger)
			}
			if got, want := fmt.Sprint(ledgers), "["+tc.ledger+"]"; got != want {
				t.Errorf("%s: unlock notifications for ledgers %s, want %s", tc.dim, got, want)
			}
		}
	})
}
