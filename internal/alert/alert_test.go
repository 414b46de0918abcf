package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// receiver is a webhook endpoint that records bodies and answers with the
// status codes in plan, one per request (200 once plan is used up).
type receiver struct {
	srv  *httptest.Server
	h    http.Handler
	mu   sync.Mutex
	got  []Payload
	hits atomic.Int64
	plan []int
	hang chan struct{} // if set, every request blocks until it is closed
}

func newReceiver(t *testing.T, plan ...int) *receiver {
	t.Helper()
	r := newHandler(t, plan...)
	r.srv = httptest.NewServer(r.h)
	t.Cleanup(r.srv.Close)
	return r
}

// memURL is the webhook URL of tests that deliver through receiver.inMemory.
const memURL = "http://alerts.invalid/hook"

// newHandler is a receiver without a server, for receiver.inMemory.
func newHandler(t *testing.T, plan ...int) *receiver {
	t.Helper()
	r := &receiver{plan: plan}
	r.h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		i := r.hits.Add(1) - 1
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
				return
			}
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("webhook Content-Type = %q, want application/json", ct)
		}
		code := http.StatusOK
		if int(i) < len(r.plan) {
			code = r.plan[i]
		}
		if code == http.StatusOK {
			var p Payload
			dec := json.NewDecoder(req.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p); err != nil {
				t.Errorf("webhook body: %v", err)
			}
			r.mu.Lock()
			r.got = append(r.got, p)
			r.mu.Unlock()
		}
		w.WriteHeader(code)
	})
	return r
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// inMemory returns a client that hands each request straight to r's
// handler, with no socket: inside a synctest bubble a network read is not
// "durably blocked", so tests on the fake clock deliver this way. The
// handler is the one the real server runs, checks included.
func (r *receiver) inMemory() *http.Client {
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, req)
		return rec.Result(), nil
	})}
}

func (r *receiver) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ev []string
	for _, p := range r.got {
		ev = append(ev, p.Event)
	}
	return ev
}

// results records OnResult calls as "event/result".
type results struct {
	mu  sync.Mutex
	got []string
}

func (rs *results) record(event, result string) {
	rs.mu.Lock()
	rs.got = append(rs.got, event+"/"+result)
	rs.mu.Unlock()
}

func (rs *results) String() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return fmt.Sprint(rs.got)
}

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)

func testConfig(url string, rs *results) Config {
	return Config{
		WebhookURL: url,
		Timeout:    time.Second,
		Retries:    3,
		Backoff:    5 * time.Millisecond,
		Hold:       60 * time.Millisecond,
		Instance:   "guard-test",
		OnResult:   rs.record,
	}
}

// closeNotifier closes n, waiting for every delivery.
func closeNotifier(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// The hold tests run in a synctest bubble: the Hold timer follows the fake
// clock, so "not before Hold, right at Hold" is exact and takes no time.

func TestDownAndRecoveryPayloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newHandler(t)
		var rs results
		cfg := testConfig(memURL, &rs)
		n := New(nil, cfg, r.inMemory(), func() time.Time { return t0.Add(time.Second) })

		n.Down(Redis, t0, "dial tcp 127.0.0.1:6379: connection refused")
		n.Down(Redis, t0.Add(time.Millisecond), "again") // duplicate: ignored
		n.Up(Redis, t0.Add(90*time.Second), "")
		wantRecoveryAfter(t, r, cfg.Hold)
		closeNotifier(t, n)

		want := []Payload{
			{Event: "redis_down", Instance: "guard-test", Since: "2025-03-04T05:06:07.890Z",
				At: "2025-03-04T05:06:08.890Z", Detail: "dial tcp 127.0.0.1:6379: connection refused",
				Counts: Counts{Transitions: 1}},
			{Event: "redis_recovered", Instance: "guard-test", Since: "2025-03-04T05:06:07.890Z",
				At: "2025-03-04T05:07:37.890Z", Counts: Counts{Transitions: 1, DownMS: 90_000}},
		}
		r.mu.Lock()
		got := r.got
		r.mu.Unlock()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("payloads:\n got %+v\nwant %+v", got, want)
		}
		if s := rs.String(); s != "[redis_down/sent redis_recovered/sent]" {
			t.Errorf("results = %s, want one sent each", s)
		}
	})
}

// TestHoldCountsFromRecovery: the hold runs from the moment the condition
// came back, not from the Up call, so a caller that confirms a recovery
// before reporting it (the breaker's good probes) does not delay the
// announcement beyond Hold after the dependency returned.
func TestHoldCountsFromRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newHandler(t)
		var rs results
		cfg := testConfig(memURL, &rs)
		n := New(nil, cfg, r.inMemory(), nil)
		n.Down(Redis, time.Now(), "refused")
		confirmed := cfg.Hold / 3
		back := time.Now()
		time.Sleep(confirmed)
		n.Up(Redis, back, "")
		wantRecoveryAfter(t, r, cfg.Hold-confirmed)
		closeNotifier(t, n)
	})
}

// wantRecoveryAfter checks, in a synctest bubble, that wait from now less
// 1ms only the down alert has been sent, and at wait the recovery too.
func wantRecoveryAfter(t *testing.T, r *receiver, wait time.Duration) {
	t.Helper()
	time.Sleep(wait - time.Millisecond)
	synctest.Wait()
	if got := fmt.Sprint(r.events()); got != "[redis_down]" {
		t.Fatalf("events 1ms before the recovery is due = %s, want [redis_down]", got)
	}
	time.Sleep(time.Millisecond)
	synctest.Wait()
	if got := fmt.Sprint(r.events()); got != "[redis_down redis_recovered]" {
		t.Fatalf("events once the recovery is due = %s, want the recovery too", got)
	}
}

func TestHysteresis(t *testing.T) {
	const hold = 60 * time.Millisecond // testConfig's
	tests := []struct {
		name  string
		steps func(n *Notifier)
		want  string
		flaps int
	}{
		{
			name: "flapping within hold is one outage",
			steps: func(n *Notifier) {
				for range 5 {
					n.Down(Redis, t0, "refused")
					time.Sleep(hold / 2)
					n.Up(Redis, t0, "")
					time.Sleep(hold - time.Millisecond)
				}
			},
			want:  "[redis_down redis_recovered]",
			flaps: 5,
		},
		{
			name: "stable for exactly hold then down again is a new outage",
			steps: func(n *Notifier) {
				n.Down(Redis, t0, "refused")
				n.Up(Redis, t0, "")
				time.Sleep(hold)
				synctest.Wait() // the hold timer fires at this instant too: let it run first
				n.Down(Redis, t0, "refused")
				n.Up(Redis, t0, "")
			},
			want:  "[redis_down redis_recovered redis_down redis_recovered]",
			flaps: 1,
		},
		{
			name: "up without down sends nothing",
			steps: func(n *Notifier) {
				n.Up(Redis, t0, "")
				n.Up(Postgres, t0, "")
			},
			want: "[]",
		},
		{
			name: "conditions are independent",
			steps: func(n *Notifier) {
				n.Down(Redis, t0, "")
				n.Down(Postgres, t0, "")
				n.Down(Spool, t0, "")
				n.Up(Postgres, t0, "")
			},
			want: "[redis_down postgres_down spool_full postgres_recovered]",
		},
		{
			name: "still down at close sends no recovery",
			steps: func(n *Notifier) {
				n.Down(Redis, t0, "")
				n.Up(Redis, t0, "")
				n.Down(Redis, t0, "")
			},
			want: "[redis_down]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newHandler(t)
				var rs results
				n := New(nil, testConfig(memURL, &rs), r.inMemory(), nil)
				tc.steps(n)
				time.Sleep(hold) // let holds elapse
				synctest.Wait()
				closeNotifier(t, n)
				if got := fmt.Sprint(r.events()); got != tc.want {
					t.Errorf("events = %s, want %s", got, tc.want)
				}
				if tc.flaps > 0 {
					r.mu.Lock()
					last := r.got[len(r.got)-1]
					r.mu.Unlock()
					if last.Counts.Transitions != tc.flaps {
						t.Errorf("recovery transitions = %d, want %d", last.Counts.Transitions, tc.flaps)
					}
				}
			})
		})
	}
}

func TestCloseFlushesPendingRecovery(t *testing.T) {
	r := newReceiver(t)
	var rs results
	cfg := testConfig(r.srv.URL, &rs)
	cfg.Hold = time.Hour
	n := New(nil, cfg, nil, nil)
	n.Down(Redis, t0, "")
	n.Up(Redis, t0, "")
	closeNotifier(t, n)
	if got := fmt.Sprint(r.events()); got != "[redis_down redis_recovered]" {
		t.Errorf("events = %s, want the held recovery sent at Close", got)
	}
	n.Down(Redis, t0, "") // after Close: ignored, must not panic
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		plan     []int
		retries  int
		wantHits int64
		want     string
	}{
		{"succeeds after two 5xx", []int{500, 503}, 3, 3, "[redis_down/sent]"},
		{"429 is retried", []int{429}, 3, 2, "[redis_down/sent]"},
		{"gives up after retries", []int{500, 500, 500, 500, 500}, 3, 4, "[redis_down/failed]"},
		{"4xx is not retried", []int{400}, 3, 1, "[redis_down/failed]"},
		{"no retries", []int{500}, -1, 1, "[redis_down/failed]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t, tc.plan...)
			var rs results
			cfg := testConfig(r.srv.URL, &rs)
			cfg.Retries = tc.retries
			n := New(nil, cfg, nil, nil)
			n.Down(Redis, t0, "")
			closeNotifier(t, n)
			if got := r.hits.Load(); got != tc.wantHits {
				t.Errorf("attempts = %d, want %d", got, tc.wantHits)
			}
			if got := rs.String(); got != tc.want {
				t.Errorf("results = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAttemptTimeout(t *testing.T) {
	r := newReceiver(t)
	r.hang = make(chan struct{})
	defer close(r.hang)
	var rs results
	cfg := testConfig(r.srv.URL, &rs)
	cfg.Timeout = 20 * time.Millisecond
	cfg.Retries = 1
	n := New(nil, cfg, nil, nil)
	n.Down(Redis, t0, "")
	closeNotifier(t, n)
	if got := r.hits.Load(); got != 2 {
		t.Errorf("attempts = %d, want 2 (each timed out)", got)
	}
	if got := rs.String(); got != "[redis_down/failed]" {
		t.Errorf("results = %s, want failed", got)
	}
}

func TestCloseGivesUpWhenContextEnds(t *testing.T) {
	r := newReceiver(t)
	r.hang = make(chan struct{})
	defer close(r.hang)
	var rs results
	cfg := testConfig(r.srv.URL, &rs)
	cfg.Timeout = time.Minute
	n := New(nil, cfg, nil, nil)
	n.Down(Redis, t0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Close(ctx); err != context.DeadlineExceeded {
		t.Errorf("Close = %v, want context.DeadlineExceeded", err)
	}
	if got := rs.String(); got != "[redis_down/failed]" {
		t.Errorf("results = %s, want the abandoned delivery counted as failed", got)
	}
}

func TestQueueFullDrops(t *testing.T) {
	r := newReceiver(t)
	r.hang = make(chan struct{})
	var rs results
	cfg := testConfig(r.srv.URL, &rs)
	cfg.QueueSize = 1
	cfg.Hold = -1
	n := New(nil, cfg, nil, nil)
	// The first alert is taken by the sender and hangs; the second waits in
	// the queue; the rest do not fit.
	n.Down(Redis, t0, "")
	for r.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	n.Down(Postgres, t0, "")
	n.Down(Spool, t0, "")
	n.Up(Redis, t0, "")
	close(r.hang)
	closeNotifier(t, n)
	if got := rs.String(); got != "[spool_full/dropped redis_recovered/dropped redis_down/sent postgres_down/sent]" {
		t.Errorf("results = %s", got)
	}
}

func TestLogOnlyWithoutURL(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var rs results
	cfg := testConfig("", &rs)
	cfg.Hold = -1
	n := New(logger, cfg, nil, nil)
	for range 3 {
		n.Down(Redis, t0, "refused")
	}
	n.Up(Redis, t0, "")
	closeNotifier(t, n)

	out := logs.String()
	// WARN: the component that went down logs its transition at ERROR
	// itself, and API.md asks for one ERROR line per transition.
	if got := strings.Count(out, "level=WARN msg=alert event=redis_down"); got != 1 {
		t.Errorf("WARN redis_down lines = %d, want 1; logs:\n%s", got, out)
	}
	if got := strings.Count(out, "level=ERROR"); got != 0 {
		t.Errorf("ERROR lines = %d, want none; logs:\n%s", got, out)
	}
	if got := strings.Count(out, "level=WARN msg=alert event=redis_recovered"); got != 1 {
		t.Errorf("WARN redis_recovered lines = %d, want 1; logs:\n%s", got, out)
	}
	if got := rs.String(); got != "[]" {
		t.Errorf("results = %s, want none without a webhook", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		url     string
		wantErr bool
	}{
		{"", false},
		{"https://hooks.example.com/T000/B000/secret", false},
		{"http://127.0.0.1:9000/alert", false},
		{"hooks.example.com/alert", true},
		{"ftp://example.com/x", true},
		{"http://", true},
		{"://bad", true},
	}
	for _, tc := range tests {
		err := Config{WebhookURL: tc.url}.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("Validate(%q) = %v, want error %v", tc.url, err, tc.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Validate(%q) error leaks the URL path: %v", tc.url, err)
		}
	}
}

func TestEventsCoverEveryCondition(t *testing.T) {
	got := Events()
	want := []string{"redis_down", "redis_recovered", "postgres_down", "postgres_recovered",
		"spool_full", "spool_recovered", "audit_default_partition", "audit_partition_recovered", "config_rejected"}
	if !slices.Equal(got, want) {
		t.Errorf("Events() = %q, want %q", got, want)
	}
}
