package abuse

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func TestLockoutListing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		for range 3 {
			mustReport(t, g, failure("login", "Alice@Example.com", "2001:db8::7", "phone-1"))
		}
		for range 2 {
			mustReport(t, g, failure("otp_verify", "bob", "", ""))
		}
		ctx := context.Background()
		all, err := listOf(g.Lockouts(ctx, LockoutFilter{}))
		if err != nil {
			t.Fatalf("Lockouts: %v", err)
		}
		if len(all) != 2 {
			t.Fatalf("Lockouts() = %d entries %+v; want 2", len(all), all)
		}
		// Both struck level 1; bob's ends last (struck later) or together.
		byDim := map[string]ActiveLockout{}
		for _, l := range all {
			byDim[l.Dimension] = l
		}
		ui, u := byDim[DimUserIP], byDim[DimUser]
		if ui.Ledger != "auth" || deref(ui.User) != "alice@example.com" || deref(ui.IP) != "2001:db8::7" || ui.Device != nil || ui.Level != 1 {
			t.Errorf("user+ip lockout = %+v (user %s ip %s); want auth, alice@example.com, 2001:db8::7, no device, level 1",
				ui, deref(ui.User), deref(ui.IP))
		}
		if u.Ledger != "auth" || deref(u.User) != "bob" || u.IP != nil || u.Device != nil {
			t.Errorf("user lockout = %+v (user %s); want auth, bob, only the user", u, deref(u.User))
		}
		if b.clock != nil && !ui.Until.Equal(b.clock.Now().Add(time.Minute)) {
			t.Errorf("until = %v; want now+1m", ui.Until)
		}

		tests := []struct {
			name   string
			filter LockoutFilter
			want   []string // dimensions
		}{
			{"user normalised", LockoutFilter{Subject: subj("ALICE@example.COM", "", "")}, []string{DimUserIP}},
			{"ip in the same /64", LockoutFilter{Subject: subj("", "2001:db8::99", "")}, []string{DimUserIP}},
			{"user and ip", LockoutFilter{Subject: subj("alice@example.com", "2001:db8::7", "")}, []string{DimUserIP}},
			{"device not part of the lock", LockoutFilter{Subject: subj("", "", "phone-1")}, nil},
			{"other user", LockoutFilter{Subject: subj("carol", "", "")}, nil},
			{"dimension", LockoutFilter{Dimension: DimUser}, []string{DimUser}},
			{"ledger", LockoutFilter{Ledger: "auth"}, []string{DimUserIP, DimUser}},
			{"other ledger", LockoutFilter{Ledger: "otp_send"}, nil},
			{"bob by user", LockoutFilter{Subject: subj("Bob", "", ""), Ledger: "auth", Dimension: DimUser}, []string{DimUser}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := listOf(g.Lockouts(ctx, tt.filter))
				if err != nil {
					t.Fatalf("Lockouts: %v", err)
				}
				if got == nil {
					t.Fatalf("Lockouts returned nil; want a (possibly empty) slice")
				}
				dims := map[string]bool{}
				for _, l := range got {
					dims[l.Dimension] = true
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %d lockouts %+v; want dimensions %v", len(got), got, tt.want)
				}
				for _, d := range tt.want {
					if !dims[d] {
						t.Errorf("missing the %s lockout in %+v", d, got)
					}
				}
			})
		}
		// Pages of one: both lockouts, once each; a cursor belongs to its
		// listing.
		first, err := g.Lockouts(ctx, LockoutFilter{Limit: 1})
		if err != nil || len(first.Lockouts) != 1 || first.Next == "" {
			t.Fatalf("first page of 1 = %+v, %v; want one lockout and a next cursor", first, err)
		}
		second, err := g.Lockouts(ctx, LockoutFilter{Limit: 1, Cursor: first.Next})
		if err != nil || len(second.Lockouts) != 1 || second.Lockouts[0].Dimension == first.Lockouts[0].Dimension {
			t.Fatalf("second page = %+v, %v; want the other lockout", second, err)
		}
		if second.Next != "" {
			if third, err := g.Lockouts(ctx, LockoutFilter{Limit: 1, Cursor: second.Next}); err != nil || len(third.Lockouts) != 0 {
				t.Errorf("third page = %+v, %v; want empty", third, err)
			}
		}
		var ie *InputError
		if _, err := g.Lockouts(ctx, LockoutFilter{Limit: 1, Cursor: first.Next, Subject: subj("bob", "", "")}); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("another listing's cursor: %v; want an InputError for cursor", err)
		}
		for _, f := range []LockoutFilter{{Dimension: "email"}, {Ledger: "nope"}, {Subject: subj("", "1.2.3.04", "")}, {Limit: 1001}} {
			var ie *InputError
			if _, err := listOf(g.Lockouts(ctx, f)); !errors.As(err, &ie) {
				t.Errorf("Lockouts(%+v) error = %v; want an InputError", f, err)
			}
		}

		// Another Guard (another instance) without the strikes in its
		// cache names them from the audit trail.
		lookup := &eventLookup{events: rec.all()}
		other, err := New(slog.New(slog.DiscardHandler), Config{Policy: authPolicy(50), KeySecret: testSecret, KeyPrefix: b.prefix, Now: b.now()},
			b.store, &fakeRecorder{}, lookup)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		got, err := listOf(other.Lockouts(ctx, LockoutFilter{Dimension: DimUserIP}))
		if err != nil || len(got) != 1 || deref(got[0].User) != "alice@example.com" || deref(got[0].IP) != "2001:db8::7" {
			t.Fatalf("Lockouts via audit = %+v, %v; want alice@example.com at 2001:db8::7", got, err)
		}
		if f := lookup.last(); f.LockedAfter.IsZero() {
			t.Errorf("audit lookup filter %+v; want LockedAfter set", f)
		}
		// Without either, identifiers come from the filter or stay nil.
		blind, err := New(slog.New(slog.DiscardHandler), Config{Policy: authPolicy(50), KeySecret: testSecret, KeyPrefix: b.prefix, Now: b.now()},
			b.store, &fakeRecorder{}, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		got, err = listOf(blind.Lockouts(ctx, LockoutFilter{Subject: subj("alice@example.com", "", "")}))
		if err != nil || len(got) != 1 || deref(got[0].User) != "alice@example.com" || got[0].IP != nil {
			t.Fatalf("Lockouts by user without names = %+v, %v; want user from the filter, ip nil", got, err)
		}
	})
}

// eventLookup serves audit events from memory the way the audit store
// does for a LockedAfter filter.
type eventLookup struct {
	mu      sync.Mutex
	events  []audit.Event
	filters []audit.Filter
}

func (l *eventLookup) Query(_ context.Context, f audit.Filter) (audit.Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.filters = append(l.filters, f)
	var p audit.Page
	for i := len(l.events) - 1; i >= 0; i-- {
		e := l.events[i]
		if e.LockoutUntil != nil && e.LockoutUntil.After(f.LockedAfter) {
			p.Events = append(p.Events, e)
		}
	}
	return p, nil
}

func (l *eventLookup) last() audit.Filter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.filters) == 0 {
		return audit.Filter{}
	}
	return l.filters[len(l.filters)-1]
}

func TestUnlock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		ctx := context.Background()
		const ip = "203.0.113.7"
		check := CheckInput{Action: "login", Subject: subj("alice", ip, "")}
		for range 5 { // strike, then two failures in the emptied log
			mustReport(t, g, failure("login", "alice", ip, ""))
		}
		wantDecision(t, mustCheck(t, g, check), false, ReasonLockedOut)

		bad := []struct {
			name  string
			in    UnlockInput
			field string
		}{
			{"no dimension", UnlockInput{Subject: subj("alice", ip, "")}, "dimension"},
			{"unknown dimension", UnlockInput{Dimension: "email", Subject: subj("alice", ip, "")}, "dimension"},
			{"missing ip", UnlockInput{Dimension: DimUserIP, Subject: subj("alice", "", "")}, "ip"},
			{"missing user", UnlockInput{Dimension: DimUserIP, Subject: subj("", ip, "")}, "user"},
			{"bad ip", UnlockInput{Dimension: DimUserIP, Subject: subj("alice", "nope", "")}, "ip"},
			{"unknown ledger", UnlockInput{Dimension: DimUserIP, Subject: subj("alice", ip, ""), Ledger: "nope"}, "ledger"},
		}
		for _, tt := range bad {
			var ie *InputError
			if err := g.Unlock(ctx, tt.in); !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("%s: Unlock error = %v; want InputError field %s", tt.name, err, tt.field)
			}
		}
		// A lock of another dimension is not this one.
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimUser, Subject: subj("alice", "", "")}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Unlock(user) = %v; want ErrNotFound", err)
		}
		n := len(rec.all())
		err := g.Unlock(ctx, UnlockInput{Dimension: DimUserIP, Subject: subj("ALICE", ip, "ignored-device"), Ledger: "auth", Reason: "ticket 42", APIKey: "secteam"})
		if err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		wantDecision(t, mustCheck(t, g, check), true, ReasonOK)
		ev := rec.all()
		if len(ev) != n+2 { // the admin event, then the check
			t.Fatalf("%d new audit events; want 2", len(ev)-n)
		}
		if e := ev[n]; e.Kind != audit.KindAdmin || e.Action != "unlock" || e.APIKey != "secteam" || e.Note != "ticket 42" ||
			e.User != "alice" || e.IP != ip || e.Device != "" || e.ID == "" || e.Instance != "test-1" {
			t.Errorf("admin event = %+v; want unlock by secteam, note, alice at %s, no device", e, ip)
		}
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimUserIP, Subject: subj("alice", ip, "")}); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Unlock = %v; want ErrNotFound", err)
		}
		// The failure log was reset (two failures were in it) and so was
		// the level: the next strike takes three failures and is level 1.
		for i := range 2 {
			if out := mustReport(t, g, failure("login", "alice", ip, "")); out.Lockout != nil {
				t.Fatalf("failure %d after unlock struck %+v; the log should be empty", i+1, out.Lockout)
			}
		}
		if out := mustReport(t, g, failure("login", "alice", ip, "")); out.Lockout == nil || out.Lockout.Level != 1 {
			t.Fatalf("strike after unlock: %+v; want level 1", out.Lockout)
		}
		// Without a ledger every ledger is unlocked.
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimUserIP, Subject: subj("alice", ip, "")}); err != nil {
			t.Fatalf("Unlock across ledgers: %v", err)
		}
		if got, _ := listOf(g.Lockouts(ctx, LockoutFilter{})); len(got) != 0 {
			t.Errorf("lockouts after unlock: %+v; want none", got)
		}
	})
}

// listOf drops the cursor of a listing that fits one page.
func listOf(p LockoutPage, err error) ([]ActiveLockout, error) { return p.Lockouts, err }

// TestLockoutCursorAcrossOutage: a cursor of the Redis listing used after
// the breaker opened (the listing now comes from the fallback) is a 400 on
// the cursor, with a message that says why, not a 503: Guard can answer,
// the cursor is just of the other listing.
func TestLockoutCursorAcrossOutage(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	primary := limits.NewRedis(testenv.RedisClient(t, srv.URL()), limits.RedisStoreConfig{})
	fallback := limits.NewMemory(limits.MemoryConfig{})
	f := limits.NewFailover(nil, limits.FailoverConfig{}, primary, fallback, limits.FailoverEvents{})
	t.Cleanup(func() { f.Close() })
	g, _ := newGuard(t, &backend{name: "failover", store: f, prefix: DefaultKeyPrefix}, authPolicy(50))
	for _, ip := range []string{"2001:db8::7", "2001:db8:1::7"} {
		for _, user := range []string{"alice", "bob"} {
			for range 3 {
				mustReport(t, g, failure("login", user, ip, ""))
			}
		}
	}
	ctx := context.Background()
	page, err := g.Lockouts(ctx, LockoutFilter{Limit: 1})
	if err != nil || len(page.Lockouts) != 1 || page.Next == "" {
		t.Fatalf("first page on Redis: %+v, %v; want one lockout and a cursor", page, err)
	}
	// A filtered listing reads the identity's lockout index on either
	// store; its cursor too is of one store's listing.
	byUser := LockoutFilter{Subject: subj("alice", "", ""), Limit: 1}
	userPage, err := g.Lockouts(ctx, byUser)
	if err != nil || len(userPage.Lockouts) != 1 || userPage.Next == "" {
		t.Fatalf("alice's first page on Redis: %+v, %v; want one lockout and a cursor", userPage, err)
	}

	srv.Kill()
	for i := 0; !f.Degraded(); i++ {
		if i == 20 {
			t.Fatal("the breaker stayed closed with Redis killed")
		}
		mustCheck(t, g, CheckInput{Action: "login", Subject: subj("carol", "198.51.100.1", "")})
	}
	// An unlock of what the fallback does not hold cannot say "nothing is
	// locked": Redis may hold it. Unavailable, not not-found.
	if err := g.Unlock(ctx, UnlockInput{Dimension: DimUserIP, Subject: subj("alice", "2001:db8::7", "")}); !errors.Is(err, limits.ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("unlock while degraded, nothing in the fallback: %v; want ErrUnavailable", err)
	}
	byUser.Cursor = userPage.Next
	for _, f := range []LockoutFilter{{Limit: 1, Cursor: page.Next}, byUser} {
		_, err = g.Lockouts(ctx, f)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "cursor" || !strings.Contains(ie.Message, "list again") {
			t.Errorf("Redis's cursor on the fallback's listing (%+v): %v; want an InputError on cursor saying to list again", f.Subject, err)
		}
	}
}

// TestDegradedAnswerNamesItsShare: while Redis is down the fallback
// enforces this instance's share of each limit (store.fleet_size), and the
// answer says so: limit and remaining agree (limit 3 of 6 with two
// instances, remaining 2 after one attempt).
func TestDegradedAnswerNamesItsShare(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	primary := limits.NewRedis(testenv.RedisClient(t, srv.URL()), limits.RedisStoreConfig{})
	f := limits.NewFailover(nil, limits.FailoverConfig{FleetSize: 2}, primary, limits.NewMemory(limits.MemoryConfig{}), limits.FailoverEvents{})
	t.Cleanup(func() { f.Close() })
	pol := Policy{Actions: map[string]Action{"login": {Limits: []Rule{{Dimension: DimIP, Limit: 6, Window: time.Minute}}}}}
	g, _ := newGuard(t, &backend{name: "failover", store: f, prefix: DefaultKeyPrefix}, pol)
	in := CheckInput{Action: "login", Subject: subj("", "198.51.100.9", "")}
	if d := mustCheck(t, g, in); d.Degraded || d.Limits[0].Limit != 6 {
		t.Fatalf("Redis up: degraded %v, limit %d; want false, 6", d.Degraded, d.Limits[0].Limit)
	}
	srv.Kill()
	d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("", "198.51.100.10", "")})
	if !d.Degraded || d.Limits[0].Limit != 3 || d.Limits[0].Remaining != 2 {
		t.Errorf("Redis down: degraded %v, limit %d, remaining %d; want true, 3 (the share), 2", d.Degraded, d.Limits[0].Limit, d.Limits[0].Remaining)
	}
}
