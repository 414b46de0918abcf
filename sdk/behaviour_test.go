package sdk_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Servers that misbehave the ways a Guard in trouble does: hang, error,
// answer slowly, drop connections. They stand in for a broken network
// path, not for Guard (whose answers the end-to-end tests get from a real
// one).

// hanging answers nothing until the test ends.
func hanging(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, &calls
}

// failing answers status n times, then a valid answer for the path.
func failing(t *testing.T, status, n int) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(calls.Add(1)) <= n {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"guard cannot answer right now","request_id":"req-1"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/check":
			_, _ = w.Write([]byte(`{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`))
		case "/v1/report":
			_, _ = w.Write([]byte(`{"lockout":null}`))
		default:
			_, _ = w.Write([]byte(`{"actions":{},"lists":{"allow":{},"deny":{}}}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// dropping accepts connections and closes them at once, after the request
// may have arrived.
func dropping(t *testing.T) (string, *atomic.Int32) {
	var calls atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			calls.Add(1)
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String(), &calls
}

// closedPort is an address where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

var login = sdk.Subject{User: "alice@example.com", IP: "203.0.113.7"}.Check("login")

func TestDefaultTimeoutStopsAHangingGuard(t *testing.T) {
	srv, _ := hanging(t)
	start := time.Now()
	_, err := sdk.New(srv.URL, "k").Check(context.Background(), login)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !sdk.IsUnavailable(err) {
		t.Fatalf("Check against a hanging server = %v; want a deadline error", err)
	}
	// Not the 10 s of a default http.Client: the 300 ms budget (a loose
	// bound, for a busy machine).
	if elapsed > 5*time.Second {
		t.Errorf("Check returned after %v", elapsed)
	}
}

func TestTimeouts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(150 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(`{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}`))
	}))
	defer srv.Close()
	tests := []struct {
		name    string
		opts    []sdk.Option
		ctx     func() (context.Context, context.CancelFunc)
		wantErr bool
	}{
		{"slow answer inside the budget", []sdk.Option{sdk.WithTimeout(5 * time.Second)}, nil, false},
		{"slow answer past the budget", []sdk.Option{sdk.WithTimeout(20 * time.Millisecond)}, nil, true},
		{"context deadline before the budget", []sdk.Option{sdk.WithTimeout(5 * time.Second)}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, true},
		{"no budget: the context decides", []sdk.Option{sdk.WithTimeout(0)}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			res, err := sdk.New(srv.URL, "k", tt.opts...).Check(ctx, login)
			if tt.wantErr {
				if !errors.Is(err, context.DeadlineExceeded) || !sdk.IsUnavailable(err) {
					t.Errorf("Check = %v, %v; want a deadline error", res, err)
				}
				return
			}
			if err != nil || !res.Allowed() {
				t.Errorf("Check = %+v, %v; want allowed", res, err)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	ctx := context.Background()
	t.Run("GET retried after 5xx", func(t *testing.T) {
		srv, calls := failing(t, http.StatusServiceUnavailable, 2)
		if _, err := sdk.New(srv.URL, "k", sdk.WithTimeout(5*time.Second)).Policy(ctx); err != nil {
			t.Fatalf("Policy = %v", err)
		}
		if got := calls.Load(); got != 3 {
			t.Errorf("calls = %d; want 3", got)
		}
	})
	t.Run("GET gives up after the retries", func(t *testing.T) {
		srv, calls := failing(t, http.StatusBadGateway, 10)
		_, err := sdk.New(srv.URL, "k", sdk.WithRetries(1)).Policy(ctx)
		var e *sdk.Error
		if !errors.As(err, &e) || e.Status != 502 || e.RequestID != "req-1" {
			t.Fatalf("Policy = %v; want the last 502", err)
		}
		if got := calls.Load(); got != 2 {
			t.Errorf("calls = %d; want 2", got)
		}
	})
	t.Run("GET not retried after 4xx", func(t *testing.T) {
		srv, calls := failing(t, http.StatusForbidden, 10)
		if _, err := sdk.New(srv.URL, "k").Policy(ctx); err == nil {
			t.Fatal("no error")
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("calls = %d; want 1", got)
		}
	})
	t.Run("check not retried after 5xx", func(t *testing.T) {
		srv, calls := failing(t, http.StatusServiceUnavailable, 1)
		_, err := sdk.New(srv.URL, "k").Check(ctx, login)
		if !sdk.IsUnavailable(err) {
			t.Fatalf("Check = %v", err)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("calls = %d; want 1 (a check that reached Guard may have counted)", got)
		}
	})
	t.Run("report not retried after a dropped connection", func(t *testing.T) {
		url, calls := dropping(t)
		_, err := sdk.New(url, "k").Report(ctx, sdk.Subject{User: "a"}.Report("login", sdk.OutcomeFailure, nil))
		if !sdk.IsUnavailable(err) {
			t.Fatalf("Report = %v", err)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("calls = %d; want 1", got)
		}
	})
	t.Run("GET retried after a dropped connection", func(t *testing.T) {
		url, calls := dropping(t)
		if _, err := sdk.New(url, "k").Ready(ctx); !sdk.IsUnavailable(err) {
			t.Fatalf("Ready = %v", err)
		}
		if got := calls.Load(); got != 3 {
			t.Errorf("calls = %d; want 3", got)
		}
	})
	t.Run("check retried when nothing was sent", func(t *testing.T) {
		// A refused connection sent nothing, so even a check may be
		// retried; all attempts fail here, within the budget.
		_, err := sdk.New(closedPort(t), "k").Check(ctx, login)
		if !sdk.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Check = %v; want a connection error", err)
		}
	})
}

func TestFailurePolicies(t *testing.T) {
	hang, _ := hanging(t)
	fail, _ := failing(t, http.StatusInternalServerError, 1000)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":"invalid_request","message":"ip is not an IP address","field":"ip"}}`))
	}))
	defer bad.Close()
	down := closedPort(t)
	tests := []struct {
		name         string
		url          string
		client, call sdk.FailurePolicy
		wantDecision string // "" wants an error
	}{
		{"error policy, hanging", hang.URL, sdk.FailError, sdk.FailError, ""},
		{"open, hanging", hang.URL, sdk.FailOpen, sdk.FailOpen, sdk.DecisionAllow},
		{"closed, hanging", hang.URL, sdk.FailClosed, sdk.FailClosed, sdk.DecisionDeny},
		{"open, 500", fail.URL, sdk.FailOpen, sdk.FailOpen, sdk.DecisionAllow},
		{"closed, 500", fail.URL, sdk.FailClosed, sdk.FailClosed, sdk.DecisionDeny},
		{"open, refused", down, sdk.FailOpen, sdk.FailOpen, sdk.DecisionAllow},
		{"closed per call over an open client", down, sdk.FailOpen, sdk.FailClosed, sdk.DecisionDeny},
		{"open per call over an erroring client", fail.URL, sdk.FailError, sdk.FailOpen, sdk.DecisionAllow},
		{"error per call over an open client", fail.URL, sdk.FailOpen, sdk.FailError, ""},
		{"open, but the call is wrong (400)", bad.URL, sdk.FailOpen, sdk.FailOpen, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Only the hanging server needs a short budget; the others
			// must answer within it even on a loaded machine.
			budget := 5 * time.Second
			if tt.url == hang.URL {
				budget = 30 * time.Millisecond
			}
			c := sdk.New(tt.url, "k", sdk.WithTimeout(budget), sdk.WithFailurePolicy(tt.client))
			res, err := c.Check(context.Background(), login, tt.call)
			if tt.wantDecision == "" {
				if err == nil {
					t.Fatalf("Check = %+v; want an error", res)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check error = %v", err)
			}
			if res.Decision != tt.wantDecision || !res.Bypassed || res.Cause == nil || res.Reason != sdk.ReasonGuardUnavailable {
				t.Errorf("Check = %+v; want %s, bypassed, with a cause", res, tt.wantDecision)
			}
			if res.Allowed() != (tt.wantDecision == sdk.DecisionAllow) {
				t.Errorf("Allowed = %v", res.Allowed())
			}
		})
	}
}

// A check whose context the caller cancels (an end client that hung up)
// is an error under every policy: FailOpen must not let an attempt
// through that nobody waits for. The caller's deadline is Guard not
// answering in time, which the policy answers.
func TestFailurePolicyCallerCancelled(t *testing.T) {
	hang, _ := hanging(t)
	c := sdk.New(hang.URL, "k", sdk.WithTimeout(5*time.Second), sdk.WithFailurePolicy(sdk.FailOpen))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if res, err := c.Check(ctx, login); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with the caller's context cancelled = %+v, %v; want context.Canceled", res, err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer dcancel()
	if res, err := c.Check(dctx, login); err != nil || !res.Bypassed || !res.Allowed() {
		t.Errorf("Check past the caller's deadline = %+v, %v; want FailOpen's bypassed allow", res, err)
	}
}

func TestReportAsync(t *testing.T) {
	t.Run("detached from the request context", func(t *testing.T) {
		var got atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(30 * time.Millisecond) // past the caller's return
			got.Add(1)
			_, _ = w.Write([]byte(`{"lockout":null}`))
		}))
		defer srv.Close()
		var errs []error
		var mu sync.Mutex
		c := sdk.New(srv.URL, "k", sdk.WithAsyncErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
		ctx, cancel := context.WithCancel(context.Background())
		c.ReportAsync(ctx, sdk.Subject{User: "a"}.Report("login", sdk.OutcomeSuccess, nil))
		cancel() // the handler returned
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got.Load() != 1 || len(errs) != 0 {
			t.Errorf("reports arrived = %d, errors %v; want 1 and none", got.Load(), errs)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		srv, _ := hanging(t)
		errs := make(chan error, 10)
		c := sdk.New(srv.URL, "k", sdk.WithMaxPendingReports(1), sdk.WithTimeout(200*time.Millisecond),
			sdk.WithAsyncErrorHandler(func(err error) { errs <- err }))
		rep := sdk.Subject{User: "a"}.Report("login", sdk.OutcomeFailure, nil)
		c.ReportAsync(context.Background(), rep)
		c.ReportAsync(context.Background(), rep)
		if err := <-errs; !errors.Is(err, sdk.ErrTooManyPendingReports) {
			t.Errorf("second report: %v; want ErrTooManyPendingReports", err)
		}
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; !sdk.IsUnavailable(err) {
			t.Errorf("first report: %v; want its timeout", err)
		}
	})
	t.Run("flush bounded by its context", func(t *testing.T) {
		srv, _ := hanging(t)
		c := sdk.New(srv.URL, "k", sdk.WithTimeout(0))
		c.ReportAsync(context.Background(), sdk.Subject{User: "a"}.Report("login", sdk.OutcomeFailure, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := c.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Flush = %v; want its deadline", err)
		}
	})
}

func TestSubject(t *testing.T) {
	s := sdk.Subject{User: "bob", Device: "d-1"}
	c := s.Check("login")
	if c.Action != "login" || *c.User != "bob" || c.IP != nil || *c.Device != "d-1" {
		t.Errorf("Check = %+v", c)
	}
	r := s.Report("login", sdk.OutcomeFailure, &sdk.CheckResponse{DecisionID: "01J"})
	if r.DecisionID != "01J" || r.Outcome != sdk.OutcomeFailure || r.IP != nil {
		t.Errorf("Report = %+v", r)
	}
	if r := s.Report("login", sdk.OutcomeSuccess, &sdk.CheckResponse{DecisionID: "x", Bypassed: true}); r.DecisionID != "" {
		t.Errorf("Report after a bypass carries decision id %q", r.DecisionID)
	}
}

// TestCheckAnswerWithoutDecision: a 2xx whose JSON carries no decision
// (another server at the URL, a proxy's own JSON) is no answer of Guard's,
// like one that is not JSON at all: the failure policy answers it, and
// FailError returns an error, never an attempt read as denied.
func TestCheckAnswerWithoutDecision(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	c := sdk.New(srv.URL, "k")
	if res, err := c.Check(context.Background(), login); err == nil || !sdk.IsUnavailable(err) {
		t.Errorf("Check = %+v, %v; want an error IsUnavailable reports", res, err)
	}
	if res, err := c.Check(context.Background(), login, sdk.FailOpen); err != nil || !res.Bypassed || !res.Allowed() {
		t.Errorf("Check with FailOpen = %+v, %v; want the policy's bypassed allow", res, err)
	}
}
