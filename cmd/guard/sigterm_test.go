package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// sigtermConfig is e2eConfig's policy with an audit writer that writes
// only full batches of 64 while serving (the flush interval never comes):
// the tail of the burst, including the held request's event, recorded
// last, reaches Postgres only through the shutdown's flush, so the test
// fails when the shutdown skips it (unless the count happens to be a
// multiple of 64), while full batches still take the live write path.
func sigtermConfig(t *testing.T, spoolDir string) string {
	t.Helper()
	const live, tail = "flush_interval: 20ms, batch_size: 50", "flush_interval: 1h, batch_size: 64"
	cfg := e2eConfig(spoolDir)
	if !strings.Contains(cfg, live) {
		t.Fatalf("e2eConfig no longer holds %q: update sigtermConfig", live)
	}
	return strings.Replace(cfg, live, tail, 1)
}

// TestSIGTERMDuringBurstKeepsEveryDecision runs guard as a real process
// (main with its signal handling), sends it SIGTERM in the middle of a
// burst of checks, and requires a clean stop: new connections refused
// while a request in flight is still answered, exit status 0, and every
// answered decision in the Postgres audit table exactly once.
func TestSIGTERMDuringBurstKeepsEveryDecision(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	dbURL := testenv.Database(t, "guard_cmd_")
	p := startGuardProcess(t, sigtermConfig(t, t.TempDir()), map[string]string{
		"GUARD_REDIS_URL":    redisURL,
		"GUARD_DATABASE_URL": dbURL,
		"GUARD_KEY_PREFIX":   prefix,
	}, "--migrate")

	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := sdk.New(p.base, checkKey, sdk.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}), sdk.WithTimeout(10*time.Second))

	var (
		mu            sync.Mutex
		answered      []string // decision ids of 200 answers
		afterSignal   int      // of those, answered after SIGTERM was sent
		signalled     atomic.Bool
		workersActive atomic.Int32
		wg            sync.WaitGroup
	)
	const workers = 8
	for w := range workers {
		wg.Add(1)
		workersActive.Add(1)
		go func() {
			defer wg.Done()
			defer workersActive.Add(-1)
			for i := 0; ; i++ {
				ip := "192.0.2." + strconv.Itoa(1+(w*31+i)%250)
				user := "w" + strconv.Itoa(w) + "u" + strconv.Itoa(i) + "@example.com"
				res, err := client.Check(context.Background(), sdk.CheckRequest{Action: "login", User: &user, IP: &ip})
				var apiErr *sdk.Error
				switch {
				case errors.As(err, &apiErr):
					t.Errorf("worker %d: check answered %v; a check is always answered 200, shutdown or not", w, err)
					return
				case err != nil && !signalled.Load():
					t.Errorf("worker %d: check failed before SIGTERM: %v", w, err)
					return
				case err != nil:
					return // Guard is stopping: keep going until requests fail.
				}
				mu.Lock()
				answered = append(answered, res.DecisionID)
				if signalled.Load() {
					afterSignal++
				}
				mu.Unlock()
			}
		}()
	}
	// Whatever happens, the workers end once the process is gone.
	defer wg.Wait()
	defer func() {
		if p.running() {
			signalled.Store(true) // a failed test: the workers' errors are noise
			_ = p.cmd.Process.Kill()
		}
	}()

	// Let the burst get well under way.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(answered)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) || workersActive.Load() < workers {
			t.Fatalf("only %d checks answered before the burst stalled; log:\n%s", n, p.logSummary())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A request the server is provably handling when the signal arrives:
	// the handler has started reading its body (it answered 100 Continue),
	// and the body is sent only after the server has stopped accepting.
	held := holdCheck(t, p.addr, "held@example.com", "203.0.113.99")

	signalled.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("send SIGTERM: %v", err)
	}

	waitUntil(t, 10*time.Second, "the process to log its shutdown", func() bool {
		return p.log.has("INFO", "shutting down")
	}, p)
	// New connections are refused while the process is still alive (the
	// held request keeps it serving).
	waitUntil(t, 10*time.Second, "new connections to be refused", func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}, p)
	// The burst keeps going until its requests fail.
	waitUntil(t, 15*time.Second, "every burst worker to see a failed request", func() bool {
		return workersActive.Load() == 0
	}, p)
	if !p.running() {
		t.Fatalf("guard exited before the held request was answered (exit %v); log:\n%s", p.err, p.logSummary())
	}

	heldID := held.finish(t)
	mu.Lock()
	answered = append(answered, heldID)
	mu.Unlock()

	code, ok := p.wait(20 * time.Second)
	if !ok {
		t.Fatalf("guard did not exit within 20s of its last request; log:\n%s", p.logSummary())
	}
	if code != 0 {
		t.Fatalf("guard exited with %v after SIGTERM, want status 0; log:\n%s", p.err, p.logSummary())
	}
	if !p.log.has("INFO", "guard stopped") {
		t.Errorf("no 'guard stopped' log line; log:\n%s", p.logSummary())
	}
	if _, err := client.Check(context.Background(), sdk.CheckRequest{Action: "login", User: strp("late@example.com")}); err == nil {
		t.Errorf("a check after guard exited was answered, want a connection error")
	}
	wg.Wait()

	stored := auditIDCounts(t, dbURL)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d decisions answered (%d after SIGTERM, plus the held one); %d distinct events stored",
		len(answered)-1, afterSignal, len(stored))
	var lost []string
	for _, id := range answered {
		if stored[id] == 0 {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d answered decisions are missing from audit_events (first: %s)", len(lost), len(answered), lost[0])
	}
	if stored[heldID] == 0 {
		t.Errorf("the decision answered during shutdown (%s) is missing from audit_events", heldID)
	}
	for id, n := range stored {
		if n != 1 {
			t.Errorf("event %s stored %d times, want once", id, n)
		}
	}
}

// heldCheck is a /v1/check on its own connection whose body is withheld.
type heldCheck struct {
	conn net.Conn
	br   *bufio.Reader
	body string
}

// holdCheck sends a check's headers with Expect: 100-continue and waits
// for the 100 Continue, which the server sends when the handler starts
// reading the body: from then on the request is in flight.
func holdCheck(t *testing.T, addr, user, ip string) *heldCheck {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	h := &heldCheck{conn: conn, br: bufio.NewReader(conn),
		body: `{"action":"login","user":"` + user + `","ip":"` + ip + `"}`}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = fmt.Fprintf(conn, "POST /v1/check HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, checkKey, len(h.body))
	if err != nil {
		t.Fatalf("send held request headers: %v", err)
	}
	status, err := h.br.ReadString('\n')
	if err != nil {
		t.Fatalf("read interim answer: %v", err)
	}
	if got, want := strings.TrimSpace(status), "HTTP/1.1 100 Continue"; got != want {
		t.Fatalf("interim answer = %q, want %q", got, want)
	}
	if blank, err := h.br.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("after 100 Continue read %q, %v; want an empty line", blank, err)
	}
	return h
}

// finish sends the body and returns the decision id of the 200 answer.
func (h *heldCheck) finish(t *testing.T) string {
	t.Helper()
	_ = h.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(h.conn, h.body); err != nil {
		t.Fatalf("send held request body: %v", err)
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("the request in flight at SIGTERM got no answer: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Fatalf("the request in flight at SIGTERM: status = %d, want %d: %s", got, want, raw)
	}
	var res sdk.CheckResponse
	if err := json.Unmarshal(raw, &res); err != nil || res.DecisionID == "" {
		t.Fatalf("the request in flight at SIGTERM: answer %s has no decision id (%v)", raw, err)
	}
	return res.DecisionID
}

// waitUntil polls cond every 10ms for at most d, failing the test (with
// the process's log) when it never holds or the process exits first.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, p *guardProcess) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if !p.running() {
			t.Fatalf("guard exited (%v) while the test waited for %s; log:\n%s", p.err, what, p.logSummary())
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; log:\n%s", d, what, p.logSummary())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// auditIDCounts returns how often each event id is in audit_events.
func auditIDCounts(t *testing.T, dbURL string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, count(*) FROM audit_events GROUP BY id`)
	if err != nil {
		t.Fatalf("query audit_events: %v", err)
	}
	counts := map[string]int64{}
	var (
		id string
		n  int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		counts[id] = n
		return nil
	}); err != nil {
		t.Fatalf("read audit_events: %v", err)
	}
	return counts
}
