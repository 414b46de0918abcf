package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisSpecs: every call's spec (redis.lua) is parsed and cached by
// its string; checks of more distinct shapes than the function's cache
// holds (512) still decide exactly, and a challenge passed on the 70th
// rule (a flags field of 71 characters) counts.
func TestRedisSpecs(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	s, _, _ := newRedisTestStore(t, redisURL, prefix)
	// Limit i+1 is a spec of its own: every 50th is taken to its end
	// (i+1 attempts allowed, the next denied), then 600 are met once.
	for i := 0; i < 600; i += 50 {
		key := fmt.Sprintf("%sspec:%d", prefix, i)
		for n := range i + 2 {
			res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{{Key: key, Limit: i + 1, Window: time.Hour}}, Cost: 1})
			if err != nil {
				t.Fatalf("limit %d attempt %d: %v", i+1, n+1, err)
			}
			if want := n <= i; res.Allowed != want || res.Rules[0].Count != min(n+1, i+1) {
				t.Fatalf("limit %d attempt %d: allowed %v count %d, want %v %d", i+1, n+1, res.Allowed, res.Rules[0].Count, want, min(n+1, i+1))
			}
		}
	}
	for i := range 600 {
		key := fmt.Sprintf("%sspec1:%d", prefix, i)
		res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{{Key: key, Limit: i + 1, Window: time.Hour}}, Cost: 1})
		if err != nil || !res.Allowed || res.Rules[0].Remaining != i {
			t.Fatalf("limit %d: %+v %v, want allowed with %d remaining", i+1, res, err, i)
		}
	}

	// 70 rules, the last a challenge already passed over a full log.
	rules := make([]Rule, 70)
	for i := range rules {
		rules[i] = Rule{Key: fmt.Sprintf("%swide:%d", prefix, i), Limit: 1, Window: time.Hour}
	}
	full := &rules[69]
	if res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{*full}, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("filling the last log: %+v %v", res, err)
	}
	full.Challenge = true
	res, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1})
	if err != nil || res.Allowed || !res.Challenge {
		t.Fatalf("70 rules, the last full: %+v %v, want a challenge", res, err)
	}
	full.Passed = true
	res, err = s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1})
	if err != nil || !res.Allowed {
		t.Fatalf("70 rules, the last full and its challenge passed: %+v %v, want allowed", res, err)
	}
	if res.Rules[0].Count != 1 || res.Rules[69].Count != 2 {
		t.Errorf("counts %d and %d, want 1 and 2 (a passed challenge logs past its limit)", res.Rules[0].Count, res.Rules[69].Count)
	}
}

// TestRedisSpecVaryingFields: infos and distinct values holding spaces
// (and other whitespace) travel outside the spec, each to its own failure
// rule and other rule, in a check with a denial escalation, other rules and
// a reservation at once, and in a report; answers agree with the memory
// store's.
func TestRedisSpecVaryingFields(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	rs, _, _ := newRedisTestStore(t, redisURL, prefix)
	ms := NewMemory(MemoryConfig{})
	t.Cleanup(func() { ms.Close() })
	for si, st := range []Store{rs, ms} {
		p := fmt.Sprintf("%svary%d:", prefix, si)
		esc := func(tag string) Escalation {
			return Escalation{Ladder: []time.Duration{time.Hour, 2 * time.Hour}, Decay: time.Hour, Failures: []FailureRule{
				{Key: p + tag + "f1", Limit: 1, Window: time.Hour, LockKey: p + tag + "k1", Info: "info one\twith spaces", Name: "one"},
				{Key: p + tag + "fd", Limit: 1, Window: time.Hour, LockKey: p + tag + "k2", Info: " two ", Distinct: "a b\nc d ", Name: "two"},
				{Key: p + tag + "f3", Limit: 1, Window: time.Hour, LockKey: p + tag + "k3", Info: "", Name: "three"},
			}}
		}
		deny := esc("d")
		rsv := Escalation{Ladder: []time.Duration{3 * time.Hour}, Failures: []FailureRule{
			{Key: p + "rf", Limit: 1, Window: time.Hour, LockKey: p + "rk", Info: "res erved", Name: "r"},
		}}
		rules := []Rule{
			{Key: p + "l1", Limit: 5, Window: time.Hour},
			{Key: p + "d1", Limit: 1, Window: time.Hour, Distinct: " x y z  "},
			{Key: p + "d2", Limit: 2, Window: time.Hour, Distinct: "\x00 \x00 \x00 \x20\x20"},
		}
		// Allowed: reserves, the reservation's one failure rule strikes.
		res, err := st.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, DenialFailures: &deny,
			Reserve: &Reservation{Escalation: rsv, Records: []string{p + "rec"}, TTL: time.Hour}})
		if err != nil || !res.Allowed {
			t.Fatalf("store %d: first check %+v %v", si, res, err)
		}
		if len(res.Struck) != 1 || res.Struck[0].Info != "res erved" {
			t.Fatalf("store %d: first check struck %+v, want the reservation's with its info", si, res.Struck)
		}
		// Another distinct value than d1's: denied, the denial strikes every failure rule.
		rules[1].Distinct = "other v\x20"
		res, err = st.Check(ctx, &CheckRequest{Rules: rules, Cost: 1, DenialFailures: &deny})
		if err != nil || res.Allowed {
			t.Fatalf("store %d: second check %+v %v", si, res, err)
		}
		want := map[string]string{"one": "info one\twith spaces", "two": " two ", "three": ""}
		if len(res.Struck) != 3 {
			t.Fatalf("store %d: second check struck %+v", si, res.Struck)
		}
		for _, s := range res.Struck {
			if want[s.Rule] != s.Info {
				t.Errorf("store %d: rule %q struck with info %q, want %q", si, s.Rule, s.Info, want[s.Rule])
			}
		}
		// The lock records hold each rule's info (redis.lua writes it).
		for i, f := range deny.Failures {
			res, err := st.Check(ctx, &CheckRequest{Locks: []LockRef{{Key: f.LockKey}}, Cost: 1})
			if err != nil || res.Locked == nil || res.Locked.Info != f.Info {
				t.Errorf("store %d: lock of failure rule %d: %+v %v, want locked with info %q", si, i, res.Locked, err, f.Info)
			}
		}
		// A report: every failure rule strikes again, infos intact.
		rep, err := st.Report(ctx, &ReportRequest{Failure: true, Escalation: esc("r"), Nonce: "n"})
		if err != nil || len(rep.Struck) != 3 {
			t.Fatalf("store %d: report %+v %v", si, rep, err)
		}
		for _, s := range rep.Struck {
			if want[s.Rule] != s.Info {
				t.Errorf("store %d: report: rule %q struck with info %q, want %q", si, s.Rule, s.Info, want[s.Rule])
			}
		}
		for i, f := range esc("r").Failures {
			res, err := st.Check(ctx, &CheckRequest{Locks: []LockRef{{Key: f.LockKey}}, Cost: 1})
			if err != nil || res.Locked == nil || res.Locked.Info != f.Info {
				t.Errorf("store %d: report: lock of failure rule %d: %+v %v, want locked with info %q", si, i, res.Locked, err, f.Info)
			}
		}
		// The reservation's lock record holds its info too.
		res, err = st.Check(ctx, &CheckRequest{Locks: []LockRef{{Key: p + "rk"}}, Cost: 1})
		if err != nil || res.Locked == nil || res.Locked.Info != "res erved" {
			t.Errorf("store %d: reservation's lock: %+v %v", si, res.Locked, err)
		}
		// The distinct failure set holds its value with its spaces: the
		// same value again is no new value (limit 2: no strike), another is.
		dset := []FailureRule{{Key: p + "ds", Limit: 2, Window: time.Hour, LockKey: p + "dk", Info: "d", Distinct: " v a l  ", Name: "d"}}
		for n, v := range []string{" v a l  ", " v a l  ", "v a l   "} {
			dset[0].Distinct = v
			rep, err := st.Report(ctx, &ReportRequest{Failure: true, Escalation: Escalation{Ladder: []time.Duration{time.Hour}, Failures: dset}})
			if err != nil || len(rep.Struck) != map[bool]int{true: 1, false: 0}[n == 2] {
				t.Errorf("store %d: distinct report %d (%q): %+v %v", si, n, v, rep.Struck, err)
			}
		}
	}
}

// TestRedisSpecEscalationCache: redis.lua keeps an escalation section's
// tables with the parsed spec and fills in each call's keys, infos and
// values; reports of one spec for ten identities each strike their own
// lock with their own info, and a check's denial escalation of the same
// shape does too.
func TestRedisSpecEscalationCache(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	s, _, _ := newRedisTestStore(t, redisURL, prefix)
	esc := func(id int) Escalation {
		p := fmt.Sprintf("%sesc%d:", prefix, id)
		return Escalation{Ladder: []time.Duration{time.Hour}, Decay: time.Hour, Failures: []FailureRule{
			{Key: p + "f", Limit: 2, Window: time.Hour, LockKey: p + "lock", Info: fmt.Sprintf("identity %d", id), Name: "f"},
		}}
	}
	lockOf := func(id int) []LockRef { return []LockRef{{Key: esc(id).Failures[0].LockKey}} }
	for id := range 10 {
		// The first failure of each identity strikes nothing, the second
		// strikes that identity's lock.
		for n := range 2 {
			res, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc(id)})
			if err != nil || len(res.Struck) != n {
				t.Fatalf("identity %d failure %d: %+v %v, want %d strikes", id, n+1, res, err, n)
			}
		}
		res, err := s.Check(ctx, &CheckRequest{Cost: 1, Locks: lockOf(id)})
		if err != nil || res.Locked == nil || res.Locked.Info != fmt.Sprintf("identity %d", id) {
			t.Fatalf("identity %d: %+v %v, want locked with its own info", id, res.Locked, err)
		}
	}
	// A check denied by a full log records the failure in its denial
	// escalation: the same shape for other identities, each its own log.
	for id := 10; id < 15; id++ {
		e := esc(id)
		rule := []Rule{{Key: fmt.Sprintf("%sesc%d:log", prefix, id), Limit: 1, Window: time.Hour}}
		for n := range 3 {
			res, err := s.Check(ctx, &CheckRequest{Cost: 1, Rules: rule, DenialFailures: &e})
			if err != nil || res.Allowed != (n == 0) {
				t.Fatalf("identity %d check %d: %+v %v", id, n+1, res, err)
			}
		}
		res, err := s.Check(ctx, &CheckRequest{Cost: 1, Locks: lockOf(id)})
		if err != nil || res.Locked == nil || res.Locked.Info != fmt.Sprintf("identity %d", id) {
			t.Fatalf("identity %d after two denials: %+v %v, want locked with its own info", id, res.Locked, err)
		}
		if res, _ := s.Check(ctx, &CheckRequest{Cost: 1, Locks: lockOf(id + 100)}); res.Locked != nil {
			t.Fatalf("an identity that never failed is locked: %+v", res.Locked)
		}
	}
}

// TestSpecCacheBound: Guard's spec cache interns up to maxSpecs specs and
// starts again when full, so the current policy's specs are interned
// again after old policies' filled it.
func TestSpecCacheBound(t *testing.T) {
	c := specCache{m: map[string]any{}}
	for i := range maxSpecs + 10 {
		b := []byte(fmt.Sprintf("check %x", i))
		if v := c.get(b); v != string(b) {
			t.Fatalf("spec %d: got %v", i, v)
		}
		if len(c.m) > maxSpecs {
			t.Fatalf("cache of %d specs, want at most %d", len(c.m), maxSpecs)
		}
	}
	cur := []byte("check current")
	first := c.get(cur)
	if _, ok := c.m[string(cur)]; !ok {
		t.Fatal("a spec met after the cache filled is not interned")
	}
	if again := c.get(cur); again != first {
		t.Errorf("interned spec %v, then %v", first, again)
	}
}
