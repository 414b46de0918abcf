package limits

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// memFakeClock is a settable clock, safe for concurrent use.
type memFakeClock struct{ ms atomic.Int64 }

func newMemFakeClock() *memFakeClock {
	c := &memFakeClock{}
	// An arbitrary fixed start, far from the zero time.
	c.ms.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *memFakeClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

func (c *memFakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// memHarness runs the conformance suite on MemoryStores sharing one fake
// clock; both stores of a pair are the same MemoryStore, as two goroutines
// of one Guard instance would share it.
func memHarness() storeHarness {
	clock := newMemFakeClock()
	return storeHarness{
		New: func(t *testing.T) (Store, Store, string) {
			s := NewMemory(MemoryConfig{Now: clock.Now, Shards: 8})
			t.Cleanup(func() { s.Close() })
			return s, s, "guard:test:" + t.Name() + ":"
		},
		Advance:   func(t *testing.T, d time.Duration) { clock.Advance(d) },
		FakeClock: true,
	}
}

func TestMemoryConformance(t *testing.T) {
	runConformance(t, memHarness())
}

// TestMemoryConformanceOneShard forces every key into one shard, so the
// multi-key paths lock one mutex once.
func TestMemoryConformanceOneShard(t *testing.T) {
	clock := newMemFakeClock()
	runConformance(t, storeHarness{
		New: func(t *testing.T) (Store, Store, string) {
			s := NewMemory(MemoryConfig{Now: clock.Now, Shards: 1})
			t.Cleanup(func() { s.Close() })
			return s, s, "p:"
		},
		Advance:   func(t *testing.T, d time.Duration) { clock.Advance(d) },
		FakeClock: true,
	})
}

// memSize counts the keys held.
func (s *MemoryStore) memSize() (logs, locks, trust int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		logs += len(sh.logs)
		locks += len(sh.locks)
		trust += len(sh.trust)
		sh.mu.Unlock()
	}
	return logs, locks, trust
}

func TestMemorySweepDropsIdleKeys(t *testing.T) {
	clock := newMemFakeClock()
	s := NewMemory(MemoryConfig{Now: clock.Now, SweepInterval: time.Hour})
	defer s.Close()
	ctx := context.Background()
	const n = 1000
	for i := range n {
		id := strconv.Itoa(i)
		_, err := s.Check(ctx, &CheckRequest{
			Rules: []Rule{{Key: "log:" + id, Limit: 5, Window: time.Minute}}, Cost: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Report(ctx, &ReportRequest{Failure: true, Escalation: Escalation{
			Failures: []FailureRule{{Key: "fail:" + id, Limit: 1, Window: time.Minute, LockKey: "lock:" + id}},
			Ladder:   []time.Duration{time.Minute},
			Decay:    2 * time.Minute,
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Report(ctx, &ReportRequest{TrustKey: "trust:" + id, TrustTTL: 3 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name                 string
		advance              time.Duration
		logs, locks, trusted int
	}{
		{"all live", 0, n, n, n},
		{"window over", time.Minute, 0, n, n},
		{"lockout over, decay pending", 0, 0, n, n},
		{"decay over", time.Minute, 0, 0, n},
		{"trust over", time.Minute, 0, 0, 0},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		s.sweep()
		logs, locks, trusted := s.memSize()
		if logs != st.logs || locks != st.locks || trusted != st.trusted {
			t.Errorf("%s: got %d logs %d locks %d trust, want %d %d %d",
				st.name, logs, locks, trusted, st.logs, st.locks, st.trusted)
		}
	}
}

func TestMemorySweeperRunsInBackground(t *testing.T) {
	clock := newMemFakeClock()
	s := NewMemory(MemoryConfig{Now: clock.Now, SweepInterval: time.Millisecond})
	defer s.Close()
	_, err := s.Check(context.Background(), &CheckRequest{
		Rules: []Rule{{Key: "k", Limit: 1, Window: time.Second}}, Cost: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if logs, _, _ := s.memSize(); logs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the background sweeper did not drop an idle log within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMemoryLogStaysCompact(t *testing.T) {
	clock := newMemFakeClock()
	s := NewMemory(MemoryConfig{Now: clock.Now})
	defer s.Close()
	const limit = 100
	rule := Rule{Key: "k", Limit: limit, Window: time.Second}
	// A steady stream at the limit's rate for many windows.
	for range 50 * limit {
		res, err := s.Check(context.Background(), &CheckRequest{Rules: []Rule{rule}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			t.Fatalf("steady stream at the limit's rate: got denied %+v", res.Rules[0])
		}
		clock.Advance(time.Second / limit)
	}
	l := s.shard("k").logs["k"]
	if got, want := cap(l.entries), 4*limit; got > want {
		t.Errorf("log capacity after 50 windows: got %d, want at most %d", got, want)
	}
}

func TestMemoryClose(t *testing.T) {
	s := NewMemory(MemoryConfig{})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping before Close: got %v, want nil", err)
	}
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close %d: got %v, want nil", i+1, err)
		}
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Ping", func() error { return s.Ping(ctx) }},
		{"Check", func() error {
			_, err := s.Check(ctx, &CheckRequest{Cost: 1})
			return err
		}},
		{"Report", func() error {
			_, err := s.Report(ctx, &ReportRequest{})
			return err
		}},
		{"Unlock", func() error {
			_, err := s.Unlock(ctx, &UnlockRequest{})
			return err
		}},
		{"Lockouts", func() error {
			_, err := s.Lockouts(ctx, &LockQuery{Pattern: "*", Limit: 1})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, errMemoryClosed) {
			t.Errorf("%s after Close: got %v, want errMemoryClosed", c.name, err)
		}
	}
}

func TestMemoryRejectsInvalidRequests(t *testing.T) {
	s := NewMemory(MemoryConfig{})
	defer s.Close()
	ctx := context.Background()
	okRule := Rule{Key: "k", Limit: 1, Window: time.Second}
	esc := func(mod func(*Escalation)) Escalation {
		e := Escalation{
			Failures: []FailureRule{{Key: "f", Limit: 1, Window: time.Second, LockKey: "l"}},
			Ladder:   []time.Duration{time.Minute},
		}
		mod(&e)
		return e
	}
	checks := []struct {
		name string
		req  *CheckRequest
	}{
		{"nil", nil},
		{"cost 0", &CheckRequest{Rules: []Rule{okRule}}},
		{"limit 0", &CheckRequest{Cost: 1, Rules: []Rule{{Key: "k", Window: time.Second}}}},
		{"window below 1ms", &CheckRequest{Cost: 1, Rules: []Rule{{Key: "k", Limit: 1, Window: time.Microsecond}}}},
		{"empty key", &CheckRequest{Cost: 1, Rules: []Rule{{Limit: 1, Window: time.Second}}}},
		{"empty lock key", &CheckRequest{Cost: 1, Locks: []LockRef{{}}}},
		{"nonce too long", &CheckRequest{Cost: 1, Nonce: "0123456789012345678901234567890123"}},
		{"nonce with a colon", &CheckRequest{Cost: 1, Nonce: "a:b"}},
		{"empty ladder", &CheckRequest{Cost: 1, DenialFailures: &Escalation{Failures: []FailureRule{{Key: "f", Limit: 1, Window: time.Second, LockKey: "l"}}}}},
	}
	for _, tc := range checks {
		if _, err := s.Check(ctx, tc.req); err == nil {
			t.Errorf("Check %s: got nil error, want one", tc.name)
		}
	}
	reports := []struct {
		name string
		req  *ReportRequest
	}{
		{"nil", nil},
		{"no lock key", &ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].LockKey = "" })}},
		{"info too long", &ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Info = string(make([]byte, 513)) })}},
		{"zero ladder step", &ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Ladder[0] = 0 })}},
		{"negative decay", &ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Decay = -time.Second })}},
		{"failure limit 0", &ReportRequest{Failure: true, Escalation: esc(func(e *Escalation) { e.Failures[0].Limit = 0 })}},
		{"negative trust ttl", &ReportRequest{TrustKey: "t", TrustTTL: -time.Second}},
	}
	for _, tc := range reports {
		if _, err := s.Report(ctx, tc.req); err == nil {
			t.Errorf("Report %s: got nil error, want one", tc.name)
		}
	}
	if _, err := s.Unlock(ctx, nil); err == nil {
		t.Errorf("Unlock nil: got nil error, want one")
	}
}

// TestMemoryClockStepsBack checks that a wall clock stepping backwards
// never loosens a limit.
func TestMemoryClockStepsBack(t *testing.T) {
	clock := newMemFakeClock()
	s := NewMemory(MemoryConfig{Now: clock.Now})
	defer s.Close()
	rule := Rule{Key: "k", Limit: 2, Window: time.Second}
	want := []bool{true, true, false}
	for i, w := range want {
		res, err := s.Check(context.Background(), &CheckRequest{Rules: []Rule{rule}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != w {
			t.Errorf("attempt %d: got allowed %v, want %v", i, res.Allowed, w)
		}
		clock.Advance(-300 * time.Millisecond)
	}
}

// TestMemoryMultiKeyStress runs many goroutines whose requests touch random
// overlapping key sets (rules, locks, failure logs) over few shards: it must
// finish (no lock-order deadlock) and no key may admit more than its limit.
func TestMemoryMultiKeyStress(t *testing.T) {
	const (
		workers = 16
		calls   = 300
		keys    = 12
		limit   = 40
	)
	s := NewMemory(MemoryConfig{Shards: 5})
	defer s.Close()
	allowedPerKey := make([]atomic.Int64, keys)
	done := make(chan error, workers)
	for w := range workers {
		go func() {
			rng := uint64(w)*0x9E3779B97F4A7C15 + 1
			next := func(n int) int {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return int(rng % uint64(n))
			}
			for range calls {
				picked := []int{next(keys), next(keys), next(keys)}
				var rules []Rule
				seen := map[int]bool{}
				for _, k := range picked {
					if !seen[k] {
						seen[k] = true
						rules = append(rules, Rule{Key: "log:" + strconv.Itoa(k), Limit: limit, Window: time.Hour})
					}
				}
				lockKey := "lock:" + strconv.Itoa(next(keys))
				esc := &Escalation{
					Failures: []FailureRule{{Key: "fail:" + strconv.Itoa(next(keys)), Limit: 3, Window: time.Hour, LockKey: lockKey}},
					Ladder:   []time.Duration{time.Millisecond},
				}
				res, err := s.Check(context.Background(), &CheckRequest{
					Rules: rules, Cost: 1, DenialFailures: esc,
					Locks: []LockRef{{Key: "lock:" + strconv.Itoa(next(keys))}},
				})
				if err != nil {
					done <- err
					return
				}
				if res.Allowed {
					for k := range seen {
						allowedPerKey[k].Add(1)
					}
				}
				if _, err := s.Report(context.Background(), &ReportRequest{
					Failure: next(2) == 0, Escalation: *esc,
					Locks: []LockRef{{Key: lockKey}}, Clear: []string{esc.Failures[0].Key},
				}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	full := 0
	for k := range allowedPerKey {
		got := allowedPerKey[k].Load()
		if got > limit {
			t.Errorf("key %d: got %d allowed attempts, limit %d", k, got, limit)
		}
		if got == limit {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no key reached its limit; the stress did not stress")
	}
}
