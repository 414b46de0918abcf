package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// foStore is a hand-written Store whose behaviour the test sets with
// func fields; unset fields answer an empty success. It counts calls.
type foStore struct {
	check    func(ctx context.Context, req *CheckRequest) (CheckResult, error)
	report   func(ctx context.Context, req *ReportRequest) (ReportResult, error)
	unlock   func(ctx context.Context, req *UnlockRequest) (bool, error)
	lockouts func(ctx context.Context) ([]LockState, error)
	lock     func(ctx context.Context, req *LockRequest) ([]LockState, error)
	ping     func(ctx context.Context) error

	calls  atomic.Int64
	closed atomic.Int64
}

func (s *foStore) Check(ctx context.Context, req *CheckRequest) (CheckResult, error) {
	s.calls.Add(1)
	if s.check == nil {
		return CheckResult{Allowed: true}, nil
	}
	return s.check(ctx, req)
}

func (s *foStore) Report(ctx context.Context, req *ReportRequest) (ReportResult, error) {
	s.calls.Add(1)
	if s.report == nil {
		return ReportResult{}, nil
	}
	return s.report(ctx, req)
}

func (s *foStore) Unlock(ctx context.Context, req *UnlockRequest) (bool, error) {
	s.calls.Add(1)
	if s.unlock == nil {
		return false, nil
	}
	return s.unlock(ctx, req)
}

func (s *foStore) Lockouts(ctx context.Context, q *LockQuery) (LockPage, error) {
	s.calls.Add(1)
	if s.lockouts == nil {
		return LockPage{}, nil
	}
	locks, err := s.lockouts(ctx)
	return LockPage{Locks: locks}, err
}

func (s *foStore) Lock(ctx context.Context, req *LockRequest) ([]LockState, error) {
	s.calls.Add(1)
	if s.lock == nil {
		return nil, nil
	}
	return s.lock(ctx, req)
}

func (s *foStore) Ping(ctx context.Context) error {
	if s.ping == nil {
		return nil
	}
	return s.ping(ctx)
}

func (s *foStore) Close() error {
	s.closed.Add(1)
	return nil
}

var errFoDown = fmt.Errorf("dial redis: %w", ErrUnavailable)

// foFailing answers every call with errFoDown.
func foFailing() *foStore {
	return &foStore{
		check: func(context.Context, *CheckRequest) (CheckResult, error) { return CheckResult{}, errFoDown },
		report: func(context.Context, *ReportRequest) (ReportResult, error) {
			return ReportResult{}, errFoDown
		},
		unlock:   func(context.Context, *UnlockRequest) (bool, error) { return false, errFoDown },
		lockouts: func(context.Context) ([]LockState, error) { return nil, errFoDown },
		lock:     func(context.Context, *LockRequest) ([]LockState, error) { return nil, errFoDown },
		ping:     func(context.Context) error { return errFoDown },
	}
}

// foHanging blocks every call until its context ends, like a Redis that
// was paused with SIGSTOP and a client that honours context deadlines.
func foHanging() *foStore {
	return &foStore{
		check: func(ctx context.Context, _ *CheckRequest) (CheckResult, error) {
			<-ctx.Done()
			return CheckResult{}, ctx.Err()
		},
		ping: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

// foTransitions records OnStateChange calls.
type foTransitions struct {
	mu     sync.Mutex
	ups    []bool
	states []BreakerState
	errs   atomic.Int64
}

func (tr *foTransitions) events() FailoverEvents {
	return FailoverEvents{
		OnStateChange: func(up bool, _ time.Time, _ error) {
			tr.mu.Lock()
			tr.ups = append(tr.ups, up)
			tr.mu.Unlock()
		},
		OnBreakerState: func(s BreakerState) {
			tr.mu.Lock()
			tr.states = append(tr.states, s)
			tr.mu.Unlock()
		},
		OnPrimaryError: func(error) { tr.errs.Add(1) },
	}
}

func (tr *foTransitions) snapshot() ([]bool, []BreakerState) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]bool(nil), tr.ups...), append([]BreakerState(nil), tr.states...)
}

var foNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestFailover builds a FailoverStore whose prober never fires by itself
// (tests call probe directly) and registers Close.
func newTestFailover(t *testing.T, cfg FailoverConfig, primary, fallback Store, ev FailoverEvents) *FailoverStore {
	t.Helper()
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return foNow }
	}
	f := NewFailover(nil, cfg, primary, fallback, ev)
	t.Cleanup(func() { f.Close() })
	return f
}

func foCheckReq() *CheckRequest {
	return &CheckRequest{
		Rules: []Rule{{Key: "k", Limit: 10, Window: time.Minute}},
		Cost:  1, Nonce: "n",
	}
}

func TestFailoverHealthyPrimary(t *testing.T) {
	primary := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		return CheckResult{Allowed: true, Rules: []RuleResult{{Allowed: true, Count: 1}}}, nil
	}}
	fallback := &foStore{}
	f := newTestFailover(t, FailoverConfig{}, primary, fallback, FailoverEvents{})

	res, err := f.Check(context.Background(), foCheckReq())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if res.Degraded || !res.Allowed || len(res.Rules) != 1 {
		t.Errorf("got %+v, want the primary's allowed, not degraded answer", res)
	}
	if got := fallback.calls.Load(); got != 0 {
		t.Errorf("fallback calls = %d, want 0", got)
	}
}

func TestFailoverOpensAfterThreshold(t *testing.T) {
	primary := foFailing()
	fallback := &foStore{}
	var tr foTransitions
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 3}, primary, fallback, tr.events())

	for i := range 5 {
		res, err := f.Check(context.Background(), foCheckReq())
		if err != nil {
			t.Fatalf("call %d: Check error %v, want none", i, err)
		}
		if !res.Degraded || !res.Allowed {
			t.Errorf("call %d: got %+v, want the fallback's degraded answer", i, res)
		}
		wantDegraded := i >= 2
		if got := f.Degraded(); got != wantDegraded {
			t.Errorf("after call %d: Degraded() = %v, want %v", i, got, wantDegraded)
		}
	}
	if got := primary.calls.Load(); got != 3 {
		t.Errorf("primary calls = %d, want 3 (none once open)", got)
	}
	if got := fallback.calls.Load(); got != 5 {
		t.Errorf("fallback calls = %d, want 5", got)
	}
	ups, states := tr.snapshot()
	if len(ups) != 1 || ups[0] {
		t.Errorf("state changes = %v, want one down", ups)
	}
	if len(states) != 1 || states[0] != BreakerOpen {
		t.Errorf("breaker states = %v, want [open]", states)
	}
	if got := tr.errs.Load(); got != 3 {
		t.Errorf("primary errors = %d, want 3", got)
	}
}

func TestFailoverSuccessResetsRun(t *testing.T) {
	var fail atomic.Bool
	primary := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		if fail.Load() {
			return CheckResult{}, errFoDown
		}
		return CheckResult{Allowed: true}, nil
	}}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 3}, primary, &foStore{}, FailoverEvents{})

	for i, failing := range []bool{true, true, false, true, true, false, true, true} {
		fail.Store(failing)
		if _, err := f.Check(context.Background(), foCheckReq()); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if f.Degraded() {
		t.Errorf("Degraded() = true after runs of 2 failures, want false (threshold 3)")
	}
}

// TestFailoverUnreachable: the first failed decision makes the primary
// unreachable (its answer came from the fallback) before the breaker
// opens; a success, or a good probe, ends that; an open breaker is
// unreachable; a bug (not an outage) is not.
func TestFailoverUnreachable(t *testing.T) {
	var fail, bug atomic.Bool
	primary := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		if bug.Load() {
			return CheckResult{}, errors.New("ERR script bug")
		}
		if fail.Load() {
			return CheckResult{}, errFoDown
		}
		return CheckResult{Allowed: true}, nil
	}}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 3}, primary, &foStore{}, FailoverEvents{})
	check := func(failing bool) {
		t.Helper()
		fail.Store(failing)
		if _, err := f.Check(context.Background(), foCheckReq()); err != nil {
			t.Fatal(err)
		}
	}
	if f.Unreachable() {
		t.Fatal("Unreachable() before any call, want false")
	}
	check(true)
	if f.Degraded() || !f.Unreachable() {
		t.Errorf("after one failed call: Degraded %v, Unreachable %v; want false, true", f.Degraded(), f.Unreachable())
	}
	check(false)
	if f.Unreachable() {
		t.Error("after a success: Unreachable() = true, want false")
	}
	check(true)
	fail.Store(false)
	f.probe() // good
	if f.Unreachable() {
		t.Error("after a good probe: Unreachable() = true, want false")
	}
	bug.Store(true)
	check(false)
	if f.Unreachable() {
		t.Error("after a bug: Unreachable() = true, want false (not an outage)")
	}
	bug.Store(false)
	check(true)
	check(true)
	check(true)
	if !f.Degraded() || !f.Unreachable() {
		t.Errorf("after three failed calls: Degraded %v, Unreachable %v; want true, true", f.Degraded(), f.Unreachable())
	}
}

func TestFailoverBudgetOnHang(t *testing.T) {
	const budget = 30 * time.Millisecond
	primary := foHanging()
	f := newTestFailover(t, FailoverConfig{Budget: budget, FailureThreshold: 100}, primary, &foStore{}, FailoverEvents{})

	var worst time.Duration
	for range 3 {
		start := time.Now()
		res, err := f.Check(context.Background(), foCheckReq())
		worst = max(worst, time.Since(start))
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if !res.Degraded {
			t.Errorf("got %+v, want degraded", res)
		}
	}
	// A correctness bound on hanging, not a speed claim: without the budget
	// the call would never return.
	if bound := budget + 250*time.Millisecond; worst > bound {
		t.Errorf("slowest call took %v, want at most %v", worst, bound)
	}
}

func TestFailoverCallerCancelled(t *testing.T) {
	primary := foHanging()
	fallback := &foStore{}
	var tr foTransitions
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, tr.events())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.Check(ctx, foCheckReq())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Check error = %v, want context.Canceled", err)
	}
	if f.Degraded() {
		t.Errorf("Degraded() = true, want false: the caller gave up, the primary did not fail")
	}
	if got := tr.errs.Load(); got != 0 {
		t.Errorf("primary errors = %d, want 0", got)
	}
}

func TestFailoverFallbackRejectsRequest(t *testing.T) {
	errBad := errors.New("invalid nonce")
	primary := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		return CheckResult{}, errBad
	}}
	fallback := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		return CheckResult{}, errBad
	}}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, FailoverEvents{})

	if _, err := f.Check(context.Background(), foCheckReq()); !errors.Is(err, errBad) {
		t.Errorf("Check error = %v, want %v", err, errBad)
	}
	if f.Degraded() {
		t.Errorf("Degraded() = true, want false: a request every store rejects must not open the breaker")
	}
}

// TestFailoverAllowDenyRejectsInvalid: on_store_failure allow/deny answer
// without the fallback, but a request that every store rejects is still a
// caller bug: an error, never an answer, and no step toward the breaker.
func TestFailoverAllowDenyRejectsInvalid(t *testing.T) {
	errBad := errors.New("check: cost 0 below 1")
	badCheck := &CheckRequest{Rules: []Rule{{Key: "k", Limit: 1, Window: time.Minute}}, Nonce: "n"}
	badReport := &ReportRequest{Failure: true, Escalation: Escalation{
		Failures: []FailureRule{{Key: "f", Limit: 1, Window: time.Minute, LockKey: "l"}},
	}, Nonce: "n"}
	for _, mode := range []OnFailure{FailAllow, FailDeny} {
		for _, open := range []bool{false, true} {
			t.Run(fmt.Sprintf("mode %d open %v", mode, open), func(t *testing.T) {
				primary := &foStore{
					check:  func(context.Context, *CheckRequest) (CheckResult, error) { return CheckResult{}, errBad },
					report: func(context.Context, *ReportRequest) (ReportResult, error) { return ReportResult{}, errBad },
					ping:   func(context.Context) error { return errFoDown },
				}
				fallback := NewMemory(MemoryConfig{})
				f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, FailoverEvents{})
				if open {
					f.probe()
					if !f.Degraded() {
						t.Fatalf("breaker not open after a failed probe with threshold 1")
					}
				}
				check := *badCheck
				check.OnFailure = mode
				if res, err := f.Check(context.Background(), &check); err == nil {
					t.Errorf("Check of cost 0: got %+v, want an error", res)
				}
				report := *badReport
				report.OnFailure = mode
				if res, err := f.Report(context.Background(), &report); err == nil {
					t.Errorf("Report without a ladder: got %+v, want an error", res)
				}
				if got := f.Degraded(); got != open {
					t.Errorf("Degraded() = %v, want %v: invalid requests must not move the breaker", got, open)
				}
			})
		}
	}
}

func TestFailoverProbes(t *testing.T) {
	var up atomic.Bool
	primary := foFailing()
	primary.ping = func(context.Context) error {
		if up.Load() {
			return nil
		}
		return errFoDown
	}
	var tr foTransitions
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1, RecoverAfter: 2}, primary, &foStore{}, tr.events())

	if _, err := f.Check(context.Background(), foCheckReq()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	steps := []struct {
		name string
		up   bool
		want BreakerState
	}{
		{"probe fails", false, BreakerOpen},
		{"first good probe", true, BreakerHalfOpen},
		{"probe fails again", false, BreakerOpen},
		{"good probe restarts the count", true, BreakerHalfOpen},
		{"second good probe in a row", true, BreakerClosed},
		{"good probe while closed", true, BreakerClosed},
	}
	for _, s := range steps {
		up.Store(s.up)
		f.probe()
		if got := f.State(); got != s.want {
			t.Fatalf("%s: state = %v, want %v", s.name, got, s.want)
		}
	}
	ups, states := tr.snapshot()
	if fmt.Sprint(ups) != "[false true]" {
		t.Errorf("state changes = %v, want [false true]", ups)
	}
	wantStates := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if fmt.Sprint(states) != fmt.Sprint(wantStates) {
		t.Errorf("breaker states = %v, want %v", states, wantStates)
	}
	// Closed again: calls reach the primary.
	primary.check = func(context.Context, *CheckRequest) (CheckResult, error) { return CheckResult{Allowed: true}, nil }
	res, err := f.Check(context.Background(), foCheckReq())
	if err != nil || res.Degraded {
		t.Errorf("after recovery got %+v, %v; want a primary answer", res, err)
	}
}

func TestFailoverIdleOutageDetectedByProbes(t *testing.T) {
	primary := foFailing()
	var tr foTransitions
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 3}, primary, &foStore{}, tr.events())

	for i := range 3 {
		if f.Degraded() {
			t.Fatalf("Degraded() before probe %d, want only after 3", i)
		}
		f.probe()
	}
	if !f.Degraded() {
		t.Errorf("Degraded() = false after 3 failed probes, want true")
	}
}

func TestFailoverProberRunsInBackground(t *testing.T) {
	var up atomic.Bool
	primary := foFailing()
	primary.ping = func(context.Context) error {
		if up.Load() {
			return nil
		}
		return errFoDown
	}
	recovered := make(chan struct{})
	ev := FailoverEvents{OnStateChange: func(isUp bool, _ time.Time, _ error) {
		if isUp {
			close(recovered)
		}
	}}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1, ProbeInterval: 5 * time.Millisecond}, primary, &foStore{}, ev)
	if _, err := f.Check(context.Background(), foCheckReq()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	up.Store(true)
	select {
	case <-recovered:
	case <-time.After(5 * time.Second):
		t.Fatalf("breaker did not close within 5s of the primary answering probes")
	}
	if f.Degraded() {
		t.Errorf("Degraded() = true after recovery")
	}
}

// TestFailoverRecoverySince: the recovery is reported as of the earliest
// the primary can have come back (when the last failed probe was sent),
// never after it did, so an alert held 10 s from then goes out at most
// 10 s after the primary returned.
func TestFailoverRecoverySince(t *testing.T) {
	var up atomic.Bool
	var failedPings atomic.Int64
	primary := foFailing()
	primary.ping = func(context.Context) error {
		if up.Load() {
			return nil
		}
		failedPings.Add(1)
		return errFoDown
	}
	sinceCh := make(chan time.Time, 1)
	ev := FailoverEvents{OnStateChange: func(isUp bool, since time.Time, _ error) {
		if isUp {
			sinceCh <- since
		}
	}}
	start := time.Now()
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1, ProbeInterval: 5 * time.Millisecond, Now: time.Now}, primary, &foStore{}, ev)
	if _, err := f.Check(context.Background(), foCheckReq()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	for failedPings.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	back := time.Now()
	up.Store(true)
	select {
	case since := <-sinceCh:
		if since.After(back) || since.Before(start) {
			t.Errorf("recovered since %v; want between the start %v and the primary's return %v", since, start, back)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("breaker did not close within 5s of the primary answering probes")
	}
}

func TestFailoverFleetShare(t *testing.T) {
	tests := []struct {
		name      string
		fleet     int
		limits    []int
		cost      int
		wantLim   []int
		wantCost  int
		failLimit int
		wantFail  int
	}{
		{"one instance keeps limits", 1, []int{10, 3}, 2, []int{10, 3}, 2, 5, 5},
		{"rounds up", 3, []int{10, 60}, 1, []int{4, 20}, 1, 10, 4},
		{"never below one", 5, []int{1, 4}, 1, []int{1, 1}, 1, 2, 1},
		{"cost capped at smallest share", 4, []int{8, 40}, 5, []int{2, 10}, 2, 8, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var gotCheck *CheckRequest
			var gotReport *ReportRequest
			fallback := &foStore{
				check: func(_ context.Context, r *CheckRequest) (CheckResult, error) {
					gotCheck = r
					return CheckResult{Allowed: true, Rules: make([]RuleResult, len(r.Rules))}, nil
				},
				report: func(_ context.Context, r *ReportRequest) (ReportResult, error) {
					gotReport = r
					return ReportResult{}, nil
				},
			}
			f := newTestFailover(t, FailoverConfig{FleetSize: tc.fleet}, foFailing(), fallback, FailoverEvents{})

			req := &CheckRequest{Cost: tc.cost, Nonce: "n",
				DenialFailures: &Escalation{Failures: []FailureRule{{Key: "f", Limit: tc.failLimit, Window: time.Minute}}}}
			for i, l := range tc.limits {
				req.Rules = append(req.Rules, Rule{Key: fmt.Sprint("k", i), Limit: l, Window: time.Minute})
			}
			res, err := f.Check(context.Background(), req)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			var gotLim, answered []int
			for i, r := range gotCheck.Rules {
				gotLim = append(gotLim, r.Limit)
				// The answer names the limit enforced when it is a share.
				lim := res.Rules[i].Limit
				if lim == 0 {
					lim = req.Rules[i].Limit
				}
				answered = append(answered, lim)
			}
			if fmt.Sprint(answered) != fmt.Sprint(tc.wantLim) {
				t.Errorf("answer's limits %v, want the enforced %v", answered, tc.wantLim)
			}
			if fmt.Sprint(gotLim) != fmt.Sprint(tc.wantLim) || gotCheck.Cost != tc.wantCost {
				t.Errorf("fallback got limits %v cost %d, want %v cost %d", gotLim, gotCheck.Cost, tc.wantLim, tc.wantCost)
			}
			if got := gotCheck.DenialFailures.Failures[0].Limit; got != tc.wantFail {
				t.Errorf("fallback got denial failure limit %d, want %d", got, tc.wantFail)
			}
			if req.Rules[0].Limit != tc.limits[0] || req.Cost != tc.cost || req.DenialFailures.Failures[0].Limit != tc.failLimit {
				t.Errorf("caller's request was modified: %+v", req)
			}

			rep := &ReportRequest{Failure: true, Nonce: "n",
				Escalation: Escalation{Failures: []FailureRule{{Key: "f", Limit: tc.failLimit, Window: time.Minute}}}}
			if _, err := f.Report(context.Background(), rep); err != nil {
				t.Fatalf("Report: %v", err)
			}
			if got := gotReport.Escalation.Failures[0].Limit; got != tc.wantFail {
				t.Errorf("fallback got report failure limit %d, want %d", got, tc.wantFail)
			}
			if rep.Escalation.Failures[0].Limit != tc.failLimit {
				t.Errorf("caller's report request was modified: %+v", rep)
			}
		})
	}
}

func TestFailoverOnFailureModes(t *testing.T) {
	tests := []struct {
		name        string
		mode        OnFailure
		open        bool
		wantAllowed bool
		wantRules   int
		wantLocal   int64
		wantUnavail bool
	}{
		{"local on a failed call", FailLocal, false, true, 1, 2, false},
		{"allow on a failed call", FailAllow, false, true, 0, 0, true},
		{"deny on a failed call", FailDeny, false, false, 0, 0, true},
		{"allow while open", FailAllow, true, true, 0, 0, true},
		{"deny while open", FailDeny, true, false, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fallback := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
				return CheckResult{Allowed: true, Rules: []RuleResult{{Allowed: true}}}, nil
			}}
			threshold := 10
			if tc.open {
				threshold = 1
			}
			f := newTestFailover(t, FailoverConfig{FailureThreshold: threshold}, foFailing(), fallback, FailoverEvents{})
			if tc.open {
				f.probe()
				if !f.Degraded() {
					t.Fatalf("breaker not open after a failed probe with threshold 1")
				}
			}
			req := foCheckReq()
			req.OnFailure = tc.mode
			res, err := f.Check(context.Background(), req)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if res.Allowed != tc.wantAllowed || len(res.Rules) != tc.wantRules || !res.Degraded || res.Unavailable != tc.wantUnavail {
				t.Errorf("got %+v, want allowed=%v rules=%d degraded unavailable=%v", res, tc.wantAllowed, tc.wantRules, tc.wantUnavail)
			}
			rep, err := f.Report(context.Background(), &ReportRequest{Failure: true, Nonce: "n", OnFailure: tc.mode})
			if err != nil {
				t.Fatalf("Report: %v", err)
			}
			if !rep.Degraded || rep.Unavailable != tc.wantUnavail {
				t.Errorf("report got %+v, want degraded unavailable=%v", rep, tc.wantUnavail)
			}
			if got := fallback.calls.Load(); got != tc.wantLocal {
				t.Errorf("fallback calls = %d, want %d", got, tc.wantLocal)
			}
		})
	}
}

func TestFailoverAdminCalls(t *testing.T) {
	// up: the primary answers everything; slow: it answers listings only
	// (decisions and probes time out, as against a slow Redis).
	var up, slow atomic.Bool
	up.Store(true)
	var lockoutDeadline, unlockDeadline atomic.Int64
	primary := &foStore{
		check: func(context.Context, *CheckRequest) (CheckResult, error) {
			if !up.Load() {
				return CheckResult{}, errFoDown
			}
			return CheckResult{Allowed: true}, nil
		},
		unlock: func(ctx context.Context, _ *UnlockRequest) (bool, error) {
			if d, ok := ctx.Deadline(); ok {
				unlockDeadline.Store(int64(time.Until(d)))
			}
			if !up.Load() {
				return false, errFoDown
			}
			return true, nil
		},
		lockouts: func(ctx context.Context) ([]LockState, error) {
			if d, ok := ctx.Deadline(); ok {
				lockoutDeadline.Store(int64(time.Until(d)))
			}
			if !up.Load() && !slow.Load() {
				return nil, errFoDown
			}
			return []LockState{{Key: "redis"}}, nil
		},
		ping: func(context.Context) error {
			if !up.Load() {
				return errFoDown
			}
			return nil
		},
	}
	fallback := &foStore{
		unlock:   func(context.Context, *UnlockRequest) (bool, error) { return false, nil },
		lockouts: func(context.Context) ([]LockState, error) { return []LockState{{Key: "local"}}, nil },
	}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 2}, primary, fallback, FailoverEvents{})
	q := &LockQuery{Pattern: "*", Limit: 10}

	// Up: the primary answers both, a listing within its own timeout, not
	// the decision budget.
	active, err := f.Unlock(context.Background(), &UnlockRequest{Locks: []string{"l"}})
	if err != nil || !active {
		t.Errorf("up: Unlock = %v, %v; want true, nil", active, err)
	}
	page, err := f.Lockouts(context.Background(), q)
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "redis" {
		t.Errorf("up: Lockouts = %v, %v; want [redis]", page, err)
	}
	if d := time.Duration(lockoutDeadline.Load()); d <= f.cfg.Budget {
		t.Errorf("listing deadline %v, want the admin timeout (above the %v budget)", d, f.cfg.Budget)
	}

	// Failing listings while the breaker is closed are errors, never the
	// fallback's answer, and never a step towards the breaker.
	up.Store(false)
	for range 3 {
		if page, err := f.Lockouts(context.Background(), q); err == nil {
			t.Errorf("closed breaker, primary failing: Lockouts = %v, want an error", page)
		}
	}
	if f.Degraded() {
		t.Fatalf("three failed listings opened the breaker")
	}

	// A failing unlock while the breaker is closed is an error (the lock
	// may still hold on the primary), clears the fallback too and, like
	// every admin call, is no step towards the breaker.
	for range 3 {
		before := fallback.calls.Load()
		if active, err := f.Unlock(context.Background(), &UnlockRequest{Locks: []string{"l"}}); err == nil || !errors.Is(err, errFoDown) {
			t.Errorf("closed breaker, primary failing: Unlock = %v, %v; want the primary's error", active, err)
		}
		if fallback.calls.Load() == before {
			t.Errorf("Unlock did not clear the fallback too")
		}
	}
	if f.Degraded() {
		t.Fatalf("three failed unlocks opened the breaker")
	}
	if d := time.Duration(unlockDeadline.Load()); d <= f.cfg.Budget {
		t.Errorf("unlock deadline %v, want the admin timeout (above the %v budget)", d, f.cfg.Budget)
	}
	// Decisions open it.
	for range 2 {
		f.Check(context.Background(), foCheckReq())
	}
	if !f.Degraded() {
		t.Fatalf("breaker closed after two failed decisions with threshold 2")
	}
	// Open breaker: unlock answers this instance's fallback.
	if active, err := f.Unlock(context.Background(), &UnlockRequest{Locks: []string{"l"}}); err != nil || active {
		t.Errorf("open breaker: Unlock = %v, %v; want the fallback's false, nil", active, err)
	}
	// Open breaker, primary down: this instance's fallback lockouts.
	page, err = f.Lockouts(context.Background(), q)
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "local" {
		t.Errorf("open breaker: Lockouts = %v, %v; want [local]", page, err)
	}
	// Open breaker, primary slow for decisions but answering a listing
	// within the admin timeout: Redis is up, so its lockouts, never the
	// fallback's.
	slow.Store(true)
	page, err = f.Lockouts(context.Background(), q)
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "redis" {
		t.Errorf("open breaker, primary answering: Lockouts = %v, %v; want [redis]", page, err)
	}
	if !f.Degraded() {
		t.Errorf("the breaker closed during the test; the case above proved nothing")
	}
}

// TestFailoverLockoutCursors: a page of the primary continues on the
// primary whatever the breaker (ErrBadCursor when it fails with the
// breaker open, never the fallback's listing under the primary's cursor),
// a page of the fallback only while the breaker is open.
func TestFailoverLockoutCursors(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	pages := func(key string, fail func() bool) func(context.Context, *LockQuery) (LockPage, error) {
		return func(_ context.Context, q *LockQuery) (LockPage, error) {
			if fail() {
				return LockPage{}, errFoDown
			}
			if q.Cursor == "" {
				return LockPage{Locks: []LockState{{Key: key + "1"}}, Next: "2"}, nil
			}
			return LockPage{Locks: []LockState{{Key: key + q.Cursor}}}, nil
		}
	}
	primary := &lockPager{foStore: foStore{
		check: func(context.Context, *CheckRequest) (CheckResult, error) {
			if !up.Load() {
				return CheckResult{}, errFoDown
			}
			return CheckResult{Allowed: true}, nil
		},
		ping: func(context.Context) error {
			if !up.Load() {
				return errFoDown
			}
			return nil
		},
	}, page: pages("redis", func() bool { return !up.Load() })}
	fallback := &lockPager{page: pages("local", func() bool { return false })}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, fallback, FailoverEvents{})
	list := func(cursor string) (LockPage, error) {
		return f.Lockouts(context.Background(), &LockQuery{Pattern: "*", Limit: 1, Cursor: cursor})
	}
	first, err := list("")
	if err != nil || first.Next != "p2" || first.Locks[0].Key != "redis1" {
		t.Fatalf("first page = %+v, %v; want redis1, next p2", first, err)
	}
	if _, err := list("f2"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("fallback cursor, breaker closed: %v, want ErrBadCursor", err)
	}
	up.Store(false)
	f.Check(context.Background(), foCheckReq()) // opens the breaker
	if !f.Degraded() {
		t.Fatal("breaker closed after a failed decision with threshold 1")
	}
	if page, err := list(first.Next); !errors.Is(err, ErrBadCursor) {
		t.Errorf("primary cursor, primary down: %+v, %v; want ErrBadCursor (list again: the fallback's listing)", page, err)
	}
	up.Store(true) // answers again; the breaker is still open
	if page, err := list(first.Next); err != nil || page.Locks[0].Key != "redis2" {
		t.Errorf("primary cursor, breaker open, primary answering: %+v, %v; want redis2", page, err)
	}
	up.Store(false)
	local, err := list("")
	if err != nil || local.Next != "f2" || local.Locks[0].Key != "local1" {
		t.Fatalf("first page, primary down = %+v, %v; want local1, next f2", local, err)
	}
	if page, err := list(local.Next); err != nil || page.Locks[0].Key != "local2" {
		t.Errorf("fallback cursor, breaker open = %+v, %v; want local2", page, err)
	}
	if _, err := list("x2"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("cursor of neither store: %v, want ErrBadCursor", err)
	}
}

// lockPager is a foStore whose Lockouts answers pages.
type lockPager struct {
	foStore
	page func(context.Context, *LockQuery) (LockPage, error)
}

func (s *lockPager) Lockouts(ctx context.Context, q *LockQuery) (LockPage, error) {
	return s.page(ctx, q)
}

// TestFailoverBugDoesNotTrip: an error of the primary that is not
// unavailability (a script or type error) is answered from the fallback
// but never opens the breaker.
func TestFailoverBugDoesNotTrip(t *testing.T) {
	errBug := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	primary := &foStore{check: func(context.Context, *CheckRequest) (CheckResult, error) {
		return CheckResult{}, errBug
	}}
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 1}, primary, NewMemory(MemoryConfig{}), FailoverEvents{})
	for range 3 {
		res, err := f.Check(context.Background(), foCheckReq())
		if err != nil || !res.Degraded {
			t.Errorf("Check = %+v, %v; want a degraded answer", res, err)
		}
	}
	if f.Degraded() {
		t.Errorf("a script error opened the breaker")
	}
}

func TestFailoverConcurrentFailuresOneTransition(t *testing.T) {
	var tr foTransitions
	f := newTestFailover(t, FailoverConfig{FailureThreshold: 3}, foFailing(), &foStore{}, tr.events())

	var wg sync.WaitGroup
	var errs atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 50 {
				res, err := f.Check(context.Background(), foCheckReq())
				if err != nil || !res.Degraded {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := errs.Load(); got != 0 {
		t.Errorf("%d calls failed or were not degraded, want 0", got)
	}
	if ups, _ := tr.snapshot(); len(ups) != 1 {
		t.Errorf("state changes = %v, want exactly one", ups)
	}
}

func TestFailoverPingAndClose(t *testing.T) {
	primary, fallback := foFailing(), &foStore{}
	f := NewFailover(nil, FailoverConfig{ProbeInterval: time.Millisecond}, primary, fallback, FailoverEvents{})
	if err := f.Ping(context.Background()); err != nil {
		t.Errorf("Ping = %v, want nil while the fallback answers", err)
	}
	for range 2 {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if primary.closed.Load() != 1 || fallback.closed.Load() != 1 {
		t.Errorf("closed primary %d, fallback %d times; want once each", primary.closed.Load(), fallback.closed.Load())
	}
}

// TestFailoverConformance runs the shared Store suite through a
// FailoverStore, once passing everything to a healthy primary and once with
// the primary down so that every answer comes from the fallback: degraded
// answers follow the same rules (FleetSize 1).
func TestFailoverConformance(t *testing.T) {
	tests := []struct {
		name        string
		primaryDown bool
	}{
		{"primary up", false},
		{"primary down", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newMemFakeClock()
			runConformance(t, storeHarness{
				New: func(t *testing.T) (Store, Store, string) {
					var primary Store = NewMemory(MemoryConfig{Now: clock.Now, Shards: 4})
					if tc.primaryDown {
						primary = foFailing()
					}
					fallback := NewMemory(MemoryConfig{Now: clock.Now, Shards: 4})
					f := newTestFailover(t, FailoverConfig{Now: clock.Now}, primary, fallback, FailoverEvents{})
					if tc.primaryDown {
						// Decisions open the breaker (admin calls never
						// do), so that every call of the suite, an unlock
						// first included, meets the outage as known.
						for !f.Degraded() {
							f.Check(context.Background(), foCheckReq())
						}
					}
					// One instance: its fallback state is its own, so both
					// handles are the same store.
					return f, f, "guard:test:" + t.Name() + ":"
				},
				Advance:         func(t *testing.T, d time.Duration) { clock.Advance(d) },
				FakeClock:       true,
				LockUnavailable: tc.primaryDown,
			})
		})
	}
}

// MarkUnavailable opens the breaker for unavailability only: a start-up
// error that is a bug (not an outage) leaves it closed, as countFailure
// does.
func TestFailoverMarkUnavailable(t *testing.T) {
	var opened atomic.Int64
	events := FailoverEvents{OnStateChange: func(up bool, _ time.Time, _ error) {
		if !up {
			opened.Add(1)
		}
	}}
	f := newTestFailover(t, FailoverConfig{}, foFailing(), NewMemory(MemoryConfig{}), events)
	f.MarkUnavailable(nil)
	f.MarkUnavailable(errors.New("ERR unknown command 'FUNCTION'"))
	if f.Degraded() || opened.Load() != 0 {
		t.Fatalf("a nil or non-outage cause opened the breaker")
	}
	f.MarkUnavailable(errFoDown)
	f.MarkUnavailable(errFoDown)
	if !f.Degraded() || opened.Load() != 1 {
		t.Errorf("degraded %v after MarkUnavailable(outage), %d transitions; want true, 1", f.Degraded(), opened.Load())
	}
}
