package abuse

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
)

func TestManualLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		ctx := context.Background()
		const ip = "203.0.113.9"
		check := CheckInput{Action: "login", Subject: subj("alice", ip, "")}

		bad := []struct {
			name  string
			in    LockInput
			field string
		}{
			{"no dimension", LockInput{Subject: subj("", ip, ""), Duration: time.Hour}, "dimension"},
			{"missing ip", LockInput{Dimension: DimIP, Subject: subj("alice", "", ""), Duration: time.Hour}, "ip"},
			{"bad ip", LockInput{Dimension: DimIP, Subject: subj("", "1.2.3.04", ""), Duration: time.Hour}, "ip"},
			{"too short", LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Duration: 999 * time.Millisecond}, "duration_ms"},
			{"too long", LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Duration: 30*24*time.Hour + time.Millisecond}, "duration_ms"},
			{"unknown ledger", LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Duration: time.Hour, Ledger: "nope"}, "ledger"},
			// Fields the dimension does not use are still input.
			{"bad unused phone_country", LockInput{Dimension: DimIP, Subject: withPhoneKeys(subj("", ip, ""), "ZZZ", ""), Duration: time.Hour}, "phone_country"},
			{"bad unused phone_prefix", LockInput{Dimension: DimIP, Subject: withPhoneKeys(subj("", ip, ""), "", "abc"), Duration: time.Hour}, "phone_prefix"},
		}
		for _, tt := range bad {
			var ie *InputError
			if _, err := g.Lock(ctx, tt.in); !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("%s: Lock error = %v; want InputError field %s", tt.name, err, tt.field)
			}
			if tt.field == "duration_ms" {
				continue // an unlock has no duration
			}
			if err := g.Unlock(ctx, UnlockInput{Dimension: tt.in.Dimension, Subject: tt.in.Subject, Ledger: tt.in.Ledger}); !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("%s: Unlock error = %v; want InputError field %s", tt.name, err, tt.field)
			}
		}

		// The ip dimension has no failure rule in this policy: a manual
		// lock of it still holds, in every ledger.
		got, err := g.Lock(ctx, LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Duration: time.Hour, Reason: "scanner", APIKey: "secteam"})
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if len(got) != 2 || got[0].Ledger != "auth" || got[1].Ledger != "otp_send" {
			t.Fatalf("Lock = %+v; want one entry per ledger (auth, otp_send)", got)
		}
		for _, l := range got {
			if l.Level != 0 || deref(l.IP) != ip || l.User != nil || !l.Until.Equal(l.Since.Add(time.Hour)) || !l.Manual {
				t.Errorf("entry %+v (ip %s): want level 0, the ip only, an hour, manual", l, deref(l.IP))
			}
		}
		e := rec.last(t)
		if e.Kind != audit.KindAdmin || e.Action != ActionLock || e.Note != "scanner" || e.APIKey != "secteam" || e.IP != ip ||
			e.LockoutUntil == nil || !e.LockoutUntil.Equal(got[0].Until) {
			t.Errorf("admin event = %+v; want lock by secteam, note, the ip and the end", e)
		}
		d := mustCheck(t, g, check)
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil || d.Lockout.Dimension != DimIP || !d.Lockout.Until.Equal(got[0].Until) {
			t.Errorf("lockout = %+v; want the manual ip lock", d.Lockout)
		}
		// Not a strike: three failures of alice from the ip strike level 1
		// of user+ip; the ip lock stays as it was.
		for range 3 {
			mustReport(t, g, failure("login", "alice", ip, ""))
		}
		list, err := listOf(g.Lockouts(ctx, LockoutFilter{Ledger: "auth"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].Dimension != DimIP || !list[0].Manual || list[0].Level != 0 ||
			list[1].Dimension != DimUserIP || list[1].Level != 1 || list[1].Manual {
			t.Fatalf("listing = %+v; want the manual ip lock, then the struck user+ip one", list)
		}

		// A manual lock of a struck key: one entry, its level, the later end.
		got, err = g.Lock(ctx, LockInput{Dimension: DimUserIP, Subject: subj("alice", ip, ""), Duration: 2 * time.Hour, Ledger: "auth"})
		if err != nil || len(got) != 1 || got[0].Level != 1 {
			t.Fatalf("Lock(user+ip) = %+v, %v; want one entry at level 1", got, err)
		}
		// Listed as two entries: the manual one (ending last, at the
		// key's level, as Lock answered and checks see it) and the struck
		// one.
		list, _ = listOf(g.Lockouts(ctx, LockoutFilter{Dimension: DimUserIP}))
		if len(list) != 2 || !list[0].Manual || list[0].Level != 1 || !list[0].Until.Equal(got[0].Until) || deref(list[0].User) != "alice" ||
			list[1].Manual || list[1].Level != 1 {
			t.Fatalf("listing user+ip = %+v; want the manual entry, then the struck one at level 1", list)
		}

		// Unlock lifts the manual and the struck record.
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimUserIP, Subject: subj("alice", ip, "")}); err != nil {
			t.Fatalf("Unlock(user+ip): %v", err)
		}
		if err := g.Unlock(ctx, UnlockInput{Dimension: DimIP, Subject: subj("", ip, "")}); err != nil {
			t.Fatalf("Unlock(ip): %v", err)
		}
		wantDecision(t, mustCheck(t, g, check), true, ReasonOK)
		if list, _ := listOf(g.Lockouts(ctx, LockoutFilter{})); len(list) != 0 {
			t.Errorf("listing after unlocks: %+v; want none", list)
		}
	})
}

// TestManualLockSparesNoDevice: a struck user lockout spares the user's
// trusted devices; an administrator's manual lock of the user does not.
func TestManualLockSparesNoDevice(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, authPolicy(2), func(c *Config) { c.TrustTTL = time.Hour })
		ctx := context.Background()
		mustReport(t, g, success("login", "dana", "192.0.2.1", "her-phone"))
		onPhone := CheckInput{Action: "login", Subject: subj("dana", "192.0.2.1", "her-phone")}
		if _, err := g.Lock(ctx, LockInput{Dimension: DimUser, Subject: subj("dana", "", ""), Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		d := mustCheck(t, g, onPhone)
		wantDecision(t, d, false, ReasonLockedOut)
		if d.Lockout == nil || d.Lockout.Dimension != DimUser {
			t.Errorf("lockout = %+v; want the manual user lock", d.Lockout)
		}
		// The contrast: erin's struck user lockout spares her phone.
		mustReport(t, g, success("login", "erin", "192.0.2.1", "erin-phone"))
		for range 2 {
			mustReport(t, g, failure("login", "erin", "192.0.2.9", ""))
		}
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("erin", "192.0.2.5", "")}), false, ReasonLockedOut)
		wantDecision(t, mustCheck(t, g, CheckInput{Action: "login", Subject: subj("erin", "192.0.2.1", "erin-phone")}), true, ReasonOK)
	})
}

func TestLockoutsPage(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, _ := newGuard(t, b, authPolicy(50))
		ctx := context.Background()
		ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"}
		for i, ip := range ips {
			// Distinct ends, the first IP ending last.
			if _, err := g.Lock(ctx, LockInput{Dimension: DimIP, Subject: subj("", ip, ""), Ledger: "auth",
				Duration: time.Duration(10-i) * time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		var seen []string
		f := LockoutFilter{Ledger: "auth", Limit: 2}
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("paging does not end")
			}
			p, err := g.Lockouts(ctx, f)
			if err != nil {
				t.Fatalf("LockoutsPage: %v", err)
			}
			for _, l := range p.Lockouts {
				seen = append(seen, deref(l.IP))
			}
			if len(p.Lockouts) > 2 {
				t.Errorf("page of %d; want at most 2", len(p.Lockouts))
			}
			if p.Next == "" {
				break
			}
			f.Cursor = p.Next
		}
		// Without an identifier the store scans: every lockout once, in an
		// order of its own across pages.
		slices.Sort(seen)
		if !slices.Equal(seen, ips) {
			t.Errorf("paged %v; want each of %v once", seen, ips)
		}
		first, _ := g.Lockouts(ctx, LockoutFilter{Limit: 1})
		tampered := []byte(first.Next)
		tampered[3] ^= 1
		for _, tc := range []struct {
			f     LockoutFilter
			field string
		}{
			{LockoutFilter{Limit: -1}, "limit"},
			{LockoutFilter{Limit: MaxLockoutLimit + 1}, "limit"},
			{LockoutFilter{Cursor: "nope"}, "cursor"},
			{LockoutFilter{Cursor: string(tampered)}, "cursor"},
		} {
			var ie *InputError
			if _, err := g.Lockouts(ctx, tc.f); !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("LockoutsPage(%+v) = %v; want InputError field %s", tc.f, err, tc.field)
			}
		}
		// Default page size holds all five.
		if p, err := g.Lockouts(ctx, LockoutFilter{}); err != nil || len(p.Lockouts) != 5 || p.Next != "" {
			t.Errorf("default page = %d entries, next %q, %v; want 5, none", len(p.Lockouts), p.Next, err)
		}
	})
}

// TestManualLockStrikeDuring: a strike during a manual lockout raises the
// key's level as usual and the lock ends at the later of the two ends
// (API.md, "Manual lockouts"): the striking report and the next check
// answer the manual lockout's end at the key's new level.
func TestManualLockStrikeDuring(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		ctx := context.Background()
		ip := "2001:db8::9"
		got, err := g.Lock(ctx, LockInput{Dimension: DimUserIP, Subject: subj("erin", ip, ""), Duration: time.Hour, Ledger: "auth"})
		if err != nil || len(got) != 1 || got[0].Level != 0 {
			t.Fatalf("Lock = %+v, %v; want one lockout at level 0", got, err)
		}
		end := got[0].Until
		var out ReportOutcome
		for range 3 { // login's user+ip failure limit
			out = mustReport(t, g, failure("login", "erin", ip, ""))
		}
		if out.Lockout == nil || out.Lockout.Level != 1 || !out.Lockout.Until.Equal(end) {
			t.Errorf("striking report: lockout %+v; want level 1 until the manual end %v", out.Lockout, end)
		}
		if e := rec.last(t); e.LockoutUntil == nil || !e.LockoutUntil.Equal(end) {
			t.Errorf("striking report's audit event: lockout_until %v; want the manual end %v", e.LockoutUntil, end)
		}
		d := mustCheck(t, g, CheckInput{Action: "login", Subject: subj("erin", ip, "")})
		if d.Allowed || d.Reason != ReasonLockedOut || d.Lockout == nil || d.Lockout.Level != 1 || !d.Lockout.Until.Equal(end) {
			t.Errorf("check: %+v (lockout %+v); want locked_out at level 1 until %v", d, d.Lockout, end)
		}
	})
}

// TestManualLockTwoStrikesAudit: a report that strikes two keys, one of
// them under a manual lockout that ends later, is audited with the latest
// end of the keys it struck: the manual one.
func TestManualLockTwoStrikesAudit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(3))
		ip := "2001:db8::12"
		got, err := g.Lock(context.Background(), LockInput{Dimension: DimUser, Subject: subj("ivy", "", ""), Duration: time.Hour, Ledger: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		var out ReportOutcome
		for range 3 { // both the user+ip and the user failure limits
			out = mustReport(t, g, failure("login", "ivy", ip, ""))
		}
		if out.Lockout == nil || !out.Lockout.Until.Equal(got[0].Until) {
			t.Fatalf("striking report: lockout %+v; want until the manual end %v", out.Lockout, got[0].Until)
		}
		if e := rec.last(t); e.LockoutUntil == nil || !e.LockoutUntil.Equal(got[0].Until) {
			t.Errorf("audit lockout_until %v; want the manual end %v (the latest of the keys struck)", e.LockoutUntil, got[0].Until)
		}
	})
}

// withPhoneKeys is s with a phone_country and a phone_prefix, each set
// when not "".
func withPhoneKeys(s Subject, country, prefix string) Subject {
	if country != "" {
		s.PhoneCountry = &country
	}
	if prefix != "" {
		s.PhonePrefix = &prefix
	}
	return s
}
