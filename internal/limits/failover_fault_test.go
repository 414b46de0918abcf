package limits_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/metrics"
	"github.com/guardhq/guard/internal/testenv"
)

// The fault tests wire a FailoverStore the way cmd/guard does (Redis
// primary, memory fallback, alerts and metrics on its events) over a
// private redis-server that they kill, restart, pause and resume, under
// load from several goroutines.

const (
	faultBudget = 50 * time.Millisecond
	// faultMargin bounds how much longer than the budget any call may take.
	// It is a correctness bound on hanging (a dead or paused Redis must not
	// hold a request), generous for a loaded 2-core machine under -race;
	// not a speed claim.
	faultMargin = 250 * time.Millisecond
	faultHold   = 300 * time.Millisecond
)

// webhookSink records the events POSTed to it.
type webhookSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []string
}

func newWebhookSink(t *testing.T) *webhookSink {
	s := &webhookSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p alert.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		if p.Instance != "fault-test" || p.Since == "" || p.At == "" {
			t.Errorf("webhook payload %+v lacks instance, since or at", p)
		}
		s.mu.Lock()
		s.events = append(s.events, p.Event)
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *webhookSink) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.events, " ")
}

// faultClient builds the go-redis client exactly as cmd/guard must: the
// call's context (the failover budget) bounds dial, pool wait, write and
// read; no retries (a retry would spend the budget twice and can run a
// decision twice); one dial attempt per call.
func faultClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           250 * time.Millisecond,
		ReadTimeout:           250 * time.Millisecond,
		WriteTimeout:          250 * time.Millisecond,
		PoolTimeout:           250 * time.Millisecond,
		MaxRetries:            -1, // -1 disables retries; 0 means the default 3
		DialerRetries:         1,
	})
}

// load runs Check (and every fifth iteration a Report) from several
// goroutines until stopped and tallies what the callers saw.
type load struct {
	errs     atomic.Int64
	calls    atomic.Int64
	degraded atomic.Int64
	worst    atomic.Int64 // nanoseconds
	firstErr atomic.Value
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func startLoad(store limits.Store, prefix string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for g := range workers {
		l.wg.Go(func() {
			rule := limits.Rule{Key: fmt.Sprintf("%slog:g%d", prefix, g), Limit: 1000, Window: time.Second}
			esc := limits.Escalation{
				Failures: []limits.FailureRule{{Key: fmt.Sprintf("%sfail:g%d", prefix, g), Limit: 1000,
					Window: time.Second, LockKey: fmt.Sprintf("%slock:g%d", prefix, g)}},
				Ladder: []time.Duration{time.Second},
				Decay:  time.Minute,
			}
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				nonce := fmt.Sprintf("g%dn%d", g, i)
				start := time.Now()
				var degraded bool
				var err error
				if i%5 == 4 {
					var res limits.ReportResult
					res, err = store.Report(context.Background(), &limits.ReportRequest{Failure: true, Escalation: esc, Nonce: nonce})
					degraded = res.Degraded
				} else {
					var res limits.CheckResult
					res, err = store.Check(context.Background(), &limits.CheckRequest{Rules: []limits.Rule{rule}, Cost: 1, Nonce: nonce})
					degraded = res.Degraded
				}
				took := time.Since(start)
				for {
					w := l.worst.Load()
					if int64(took) <= w || l.worst.CompareAndSwap(w, int64(took)) {
						break
					}
				}
				l.calls.Add(1)
				if err != nil {
					l.errs.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
				}
				if degraded {
					l.degraded.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return l
}

// window returns the calls and degraded answers since the previous window.
func (l *load) window() (calls, degraded int64) {
	return l.calls.Swap(0), l.degraded.Swap(0)
}

func (l *load) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scrapeMetric returns the value of the sample line starting with series
// (a name, or a name with labels) in m's exposition.
func scrapeMetric(t *testing.T, m *metrics.Metrics, series string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return "(absent)"
}

func TestFailoverFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault tests start and kill a redis-server; skipped with -short")
	}
	srv := testenv.PrivateRedis(t)
	sink := newWebhookSink(t)
	var logs testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := metrics.New()
	notifier := alert.New(logger, alert.Config{
		WebhookURL: sink.srv.URL, Timeout: time.Second, Backoff: 10 * time.Millisecond,
		Hold: faultHold, Instance: "fault-test", OnResult: m.AlertSent,
	}, nil, nil)
	defer notifier.Close(context.Background())

	prefix := "guardfault:" + rand.Text()[:10] + ":"
	fo := limits.NewFailover(logger, limits.FailoverConfig{
		Budget: faultBudget, FailureThreshold: 3, ProbeInterval: 100 * time.Millisecond, RecoverAfter: 2,
	}, limits.NewRedis(faultClient(srv.Addr()), limits.RedisStoreConfig{}),
		limits.NewMemory(limits.MemoryConfig{}),
		limits.FailoverEvents{
			OnStateChange: func(up bool, since time.Time, cause error) {
				m.SetRedisUp(up)
				m.SetDegraded(!up)
				if up {
					notifier.Up(alert.Redis, since, "")
				} else {
					notifier.Down(alert.Redis, since, cause.Error())
				}
			},
			OnBreakerState: func(s limits.BreakerState) { m.SetBreakerState(s.String()) },
			OnPrimaryError: func(error) { m.RedisError() },
		})
	defer fo.Close()

	l := startLoad(fo, prefix, 4)
	defer l.halt()

	// expect checks the state a readiness probe and /metrics would show.
	expect := func(phase string, degraded bool, events string) {
		t.Helper()
		if got := fo.Degraded(); got != degraded {
			t.Errorf("%s: Degraded() = %v, want %v", phase, got, degraded)
		}
		if err := fo.Ping(context.Background()); err != nil {
			t.Errorf("%s: Ping = %v, want nil (Guard can decide, so it is ready)", phase, err)
		}
		up, deg := "1", "0"
		if degraded {
			up, deg = "0", "1"
		}
		if got := scrapeMetric(t, m, "guard_redis_up"); got != up {
			t.Errorf("%s: guard_redis_up = %s, want %s", phase, got, up)
		}
		if got := scrapeMetric(t, m, "guard_degraded"); got != deg {
			t.Errorf("%s: guard_degraded = %s, want %s", phase, got, deg)
		}
		if got := scrapeMetric(t, m, `guard_breaker_state{state="closed"}`); got != up {
			t.Errorf("%s: breaker closed gauge = %s, want %s", phase, got, up)
		}
		// Delivery is asynchronous; give it a moment, then demand the
		// exact sequence (no duplicates).
		waitFor(t, 3*time.Second, phase+": webhooks "+events, func() bool { return sink.got() == events })
		time.Sleep(50 * time.Millisecond)
		if got := sink.got(); got != events {
			t.Errorf("%s: webhook events = %q, want %q", phase, got, events)
		}
		if n := l.errs.Load(); n != 0 {
			t.Fatalf("%s: %d calls returned an error, want 0; first: %v", phase, n, l.firstErr.Load())
		}
		if worst := time.Duration(l.worst.Load()); worst > faultBudget+faultMargin {
			t.Errorf("%s: slowest call took %v, want at most budget %v + %v", phase, worst, faultBudget, faultMargin)
		}
	}
	// healthy runs the load for a while on a working Redis and demands
	// that no answer was degraded.
	healthy := func(phase string) {
		t.Helper()
		time.Sleep(20 * time.Millisecond) // calls begun before the change end
		l.window()
		time.Sleep(300 * time.Millisecond)
		calls, deg := l.window()
		if calls == 0 || deg != 0 {
			t.Errorf("%s: %d of %d answers degraded, want 0 of some", phase, deg, calls)
		}
	}
	// outage runs the load for a while after the breaker opened and
	// demands that every answer was degraded.
	outage := func(phase string) {
		t.Helper()
		waitFor(t, 3*time.Second, phase+": breaker open", fo.Degraded)
		time.Sleep(faultBudget + 50*time.Millisecond) // calls begun before the change end
		l.window()
		time.Sleep(400 * time.Millisecond)
		calls, deg := l.window()
		if calls == 0 || deg != calls {
			t.Errorf("%s: %d of %d answers degraded, want all of some", phase, deg, calls)
		}
	}

	healthy("healthy")
	expect("healthy", false, "")

	mark := time.Now()
	srv.Kill()
	waitFor(t, 3*time.Second, "killed: breaker open", fo.Degraded)
	t.Logf("killed: breaker open after %v", time.Since(mark))
	outage("killed")
	expect("killed", true, "redis_down")

	srv.Restart()
	mark = time.Now()
	waitFor(t, 5*time.Second, "restarted: back on Redis", func() bool { return !fo.Degraded() })
	t.Logf("restarted: back on Redis %v after it answered PING", time.Since(mark))
	healthy("restarted")
	expect("restarted", false, "redis_down redis_recovered")

	mark = time.Now()
	srv.Pause()
	waitFor(t, 3*time.Second, "paused: breaker open", fo.Degraded)
	t.Logf("paused: breaker open after %v", time.Since(mark))
	outage("paused")
	expect("paused", true, "redis_down redis_recovered redis_down")

	mark = time.Now()
	srv.Resume()
	waitFor(t, 5*time.Second, "resumed: back on Redis", func() bool { return !fo.Degraded() })
	t.Logf("resumed: back on Redis after %v", time.Since(mark))
	healthy("resumed")
	expect("resumed", false, "redis_down redis_recovered redis_down redis_recovered")

	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer admin.Close()
	if err := admin.FunctionFlush(context.Background()).Err(); err != nil {
		t.Fatalf("FUNCTION FLUSH: %v", err)
	}
	healthy("functions flushed")
	expect("functions flushed", false, "redis_down redis_recovered redis_down redis_recovered")

	l.halt()
	t.Logf("slowest call over all phases: %v (budget %v)", time.Duration(l.worst.Load()), faultBudget)

	// API.md: "logs at ERROR once per transition", both ways.
	if got := strings.Count(logs.String(), "level=ERROR msg=\"limit store unavailable"); got != 2 {
		t.Errorf("ERROR transition logs = %d, want 2 (one per outage); logs:\n%s", got, logs.String())
	}
	if got := strings.Count(logs.String(), "level=ERROR msg=\"limit store recovered"); got != 2 {
		t.Errorf("ERROR recovery logs = %d, want 2 (one per recovery); logs:\n%s", got, logs.String())
	}
	if got := scrapeMetric(t, m, `guard_alerts_total{event="redis_down",result="sent"}`); got != "2" {
		t.Errorf(`guard_alerts_total{event="redis_down",result="sent"} = %s, want 2`, got)
	}
	if got := scrapeMetric(t, m, "guard_redis_errors_total"); got == "0" || got == "(absent)" {
		t.Errorf("guard_redis_errors_total = %s, want > 0", got)
	}
}
