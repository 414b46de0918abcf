package limits

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"
)

// storeHarness describes one Store implementation under test.
//
// runConformance calls New once per subtest; subtests run one after another
// (never in parallel), so Advance may move one clock shared by every store
// the harness made.
type storeHarness struct {
	// New returns two Stores sharing one backend (as two Guard replicas
	// would) and a key prefix unique to this test; both are closed by
	// t.Cleanup.
	New func(t *testing.T) (a, b Store, prefix string)
	// Advance moves the backend's clock forward; for a real-clock backend
	// (Redis) it sleeps.
	Advance func(t *testing.T, d time.Duration)
	// FakeClock is true when Advance is exact (memory store with an
	// injected clock): millisecond-exact edge cases run only then.
	FakeClock bool
	// LockUnavailable is true when Lock must fail with ErrUnavailable (a
	// failover store whose primary is down never locks from its fallback).
	LockUnavailable bool
	// SlotTags gives keys Redis Cluster hash tags as the store's contract
	// asks (a failure log, its lock and the trust records that spare
	// locks share a slot: the test's own), while each log keeps a slot of
	// its own, so decisions span slots.
	SlotTags bool
}

// confCase is one shared conformance case; fakeClock cases need a store
// whose clock the test sets.
type confCase struct {
	name      string
	fakeClock bool
	run       func(t *testing.T, c *conf)
}

// runConformance runs the shared Store test suite against h. Every
// expectation about time is derived from the Now the store reports, so the
// suite is exact on a real clock too; only the cases that need to stand one
// millisecond before or at an edge are limited to FakeClock.
func runConformance(t *testing.T, h storeHarness) {
	t.Helper()
	cases := []confCase{
		{"LimitThenDeny", false, confLimitThenDeny},
		{"DeniedNotLogged", false, confDeniedNotLogged},
		{"Cost", false, confCost},
		{"MultiRuleAllOrNothing", false, confMultiRule},
		{"SharedLog", false, confSharedLog},
		{"LogKeepsLongestWindow", false, confLogKeepsLongestWindow},
		{"LogKeepsLongestWindowLate", false, confLogKeepsLongestWindowLate},
		{"Shadow", false, confShadow},
		{"DryRun", false, confDryRun},
		{"WindowEdgeExact", true, confWindowEdgeExact},
		{"WindowEdgeRealClock", false, confWindowEdgeTolerant},
		{"ConcurrentStrictness", false, confConcurrentStrictness},
		{"Nonce", false, confNonce},
		{"StrikeAndLadder", false, confStrikeLadder},
		{"ShorterLadderOnLedger", false, confShorterLadder},
		{"Decay", false, confDecay},
		{"DecayExact", true, confDecayExact},
		{"CheckWhileLocked", false, confCheckWhileLocked},
		{"LockEndsAtUntil", true, confLockEndsAtUntil},
		{"SpareIfTrusted", false, confSpareIfTrusted},
		{"StrikeReportsTrust", false, confStrikeReportsTrust},
		{"TrustTTLExact", true, confTrustTTLExact},
		{"SuccessClears", false, confSuccessClears},
		{"ReportAnswersActiveLock", false, confReportAnswersLock},
		{"DenialFailures", false, confDenialFailures},
		{"Unlock", false, confUnlock},
		{"Lockouts", false, confLockouts},
		{"LockoutPages", false, confLockoutPages},
		{"ConcurrentStrikes", false, confConcurrentStrikes},
		{"RejectsInvalid", false, confRejectsInvalid},
		{"MaxDuration", false, confMaxDuration},
	}
	cases = append(cases, confManualCases()...)
	cases = append(cases, confKindCases()...)
	cases = append(cases, confChallengeCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fakeClock && !h.FakeClock {
				t.Skip("needs a millisecond-exact fake clock")
			}
			a, b, prefix := h.New(t)
			tc.run(t, &conf{h: h, a: a, b: b, prefix: prefix})
		})
	}
}

// conf is one subtest's view of the harness.
type conf struct {
	h      storeHarness
	a, b   Store
	prefix string
}

// key builds a key under the test's prefix.
func (c *conf) key(parts ...string) string {
	if !c.h.SlotTags {
		return c.prefix + strings.Join(parts, ":")
	}
	if parts[0] == "log" {
		return c.prefix + "log:{" + strings.Join(parts[1:], ":") + "}"
	}
	return "{" + c.prefix + "}" + strings.Join(parts, ":")
}

// store alternates between the two stores so every case exercises both
// replicas of the backend.
func (c *conf) store(i int) Store {
	if i%2 == 0 {
		return c.a
	}
	return c.b
}

func (c *conf) advance(t *testing.T, d time.Duration) {
	t.Helper()
	c.h.Advance(t, d)
}

// confFreshNonce returns a fresh nonce of [A-Z2-7], 26 bytes.
func confFreshNonce() string { return rand.Text() }

func (c *conf) check(t *testing.T, s Store, req CheckRequest) CheckResult {
	t.Helper()
	if req.Cost == 0 {
		req.Cost = 1
	}
	if req.Nonce == "" {
		req.Nonce = confFreshNonce()
	}
	res, err := s.Check(context.Background(), &req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(res.Rules) != len(req.Rules) {
		t.Fatalf("Check: got %d rule results, want %d", len(res.Rules), len(req.Rules))
	}
	return res
}

func (c *conf) report(t *testing.T, s Store, req ReportRequest) ReportResult {
	t.Helper()
	if req.Nonce == "" {
		req.Nonce = confFreshNonce()
	}
	res, err := s.Report(context.Background(), &req)
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	return res
}

func (c *conf) unlock(t *testing.T, s Store, req UnlockRequest) bool {
	t.Helper()
	ok, err := s.Unlock(context.Background(), &req)
	if err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	return ok
}

// lockouts returns the active lockouts under the test's prefix (a shared
// backend may hold other tests' lockouts too).
func (c *conf) lockouts(t *testing.T, s Store) []LockState {
	t.Helper()
	page, err := s.Lockouts(context.Background(), &LockQuery{Pattern: c.key("lock*"), Limit: 1000})
	if err != nil {
		t.Fatalf("Lockouts: %v", err)
	}
	if page.Next != "" {
		t.Fatalf("Lockouts: a next page after %d lockouts", len(page.Locks))
	}
	return page.Locks
}

// confMs is the store-clock millisecond of t.
func confMs(t time.Time) int64 { return t.UnixMilli() }

// confMsDur converts a millisecond count to a Duration.
func confMsDur(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// confWantRule compares one RuleResult field by field.
func confWantRule(t *testing.T, what string, got, want RuleResult) {
	t.Helper()
	g, w := got, want
	g.Reset, w.Reset, g.RetryAfter, w.RetryAfter = 0, 0, 0, 0
	if g != w || !confNear(got.Reset, want.Reset) || !confNear(got.RetryAfter, want.RetryAfter) {
		t.Errorf("%s: got %+v, want %+v", what, got, want)
	}
}

// confSkew is how far the clocks that one answer draws on may stand
// apart: 0 for one Redis or the memory store (exact); on Redis Cluster
// every slot's node reads its own TIME at its own moment, which on a loaded
// machine can be tens of milliseconds apart (counts stay exact). Set by the cluster test only, which does not run in parallel.
var confSkew time.Duration

func confNear(got, want time.Duration) bool {
	d := got - want
	return d <= confSkew && -d <= confSkew && (got == 0) == (want == 0)
}

// confWantLock compares a LockState, times by instant.
func confWantLock(t *testing.T, what string, got *LockState, want LockState) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: got no lock, want %+v", what, want)
		return
	}
	if got.Key != want.Key || got.Level != want.Level || got.Info != want.Info ||
		(got.Since.Sub(want.Since)).Abs() > confSkew || (got.Until.Sub(want.Until)).Abs() > confSkew {
		t.Errorf("%s: got %+v, want %+v", what, *got, want)
	}
}

// confWindow is long enough that no entry leaves during a case that does not
// advance the clock on purpose.
const confWindow = time.Minute
