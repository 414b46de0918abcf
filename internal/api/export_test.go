package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
)

// endlessAudit streams events until its context ends or the writer fails,
// counting the streams running and closing done[i] when stream i returns.
type endlessAudit struct {
	fakeAudit
	running atomic.Int64
	ended   chan error
}

func newEndlessAudit() *endlessAudit {
	a := &endlessAudit{ended: make(chan error, 100)}
	a.stream = func(ctx context.Context, _ audit.Filter, fn func(audit.Event) error) error {
		a.running.Add(1)
		e := audit.Event{ID: "01JDXYZABCDEFGHJKMNPQRSTVW", At: t0, Kind: audit.KindCheck, Action: "login",
			Decision: "allow", Reason: "ok", User: strings.Repeat("u", 200), Instance: "guard-1"}
		for {
			err := ctx.Err()
			if err == nil {
				err = fn(e)
			}
			if err != nil {
				// No longer running once ended is seen.
				a.running.Add(-1)
				a.ended <- err
				return err
			}
		}
	}
	return a
}

// startExport opens an NDJSON export and reads its first bytes, so the
// export is known to be running; the caller reads on or leaves it. A 503
// is retried for a few seconds: a slot that an ended export frees is given
// back when its handler returns, a moment after the store's export ended.
func startExport(t *testing.T, srv *httptest.Server) *http.Response {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var resp *http.Response
	for {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/audit", nil)
		req.Header.Set("Authorization", "Bearer "+keyAudit)
		req.Header.Set("Accept", audit.ContentTypeNDJSON)
		var err error
		if resp, err = srv.Client().Do(req); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("export status %d", resp.StatusCode)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1024)); err != nil {
		t.Fatalf("export read: %v", err)
	}
	return resp
}

func waitEnded(t *testing.T, a *endlessAudit, within time.Duration, what string) {
	t.Helper()
	select {
	case <-a.ended:
	case <-time.After(within):
		t.Fatalf("%s: the export still runs after %v", what, within)
	}
}

// At most MaxConcurrent exports run; one more is 503 with Retry-After, and
// a slot freed is a slot taken.
func TestExportConcurrencyCap(t *testing.T) {
	a := newEndlessAudit()
	cfg := testConfig()
	cfg.Exports = ExportConfig{MaxConcurrent: 2, WriteTimeout: time.Minute}
	srv := httptest.NewServer(newTestHandler(t, cfg, Deps{Audit: a}))
	t.Cleanup(srv.Close) // after the clients' Cleanup closed their bodies
	first := startExport(t, srv)
	startExport(t, srv)
	w := call(srv.Config.Handler, "GET", "/v1/audit", keyAudit, "", "Accept", audit.ContentTypeCSV)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("third export: status %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if code, _ := errorOf(t, w); code != "unavailable" {
		t.Errorf("code %q, want unavailable", code)
	}
	// A HEAD export answers as its GET would (RFC 9110): 503 here too.
	h := call(srv.Config.Handler, "HEAD", "/v1/audit", keyAudit, "", "Accept", audit.ContentTypeCSV)
	if h.Code != http.StatusServiceUnavailable || h.Header().Get("Retry-After") != w.Header().Get("Retry-After") {
		t.Errorf("HEAD export with every slot taken: status %d, Retry-After %q; want 503, %q",
			h.Code, h.Header().Get("Retry-After"), w.Header().Get("Retry-After"))
	}
	// JSON pages are not exports: still served.
	if w := call(srv.Config.Handler, "GET", "/v1/audit", keyAudit, ""); w.Code != 200 {
		t.Errorf("JSON page while exports run: %d", w.Code)
	}
	first.Body.Close() // the client goes away: its export ends, its slot frees
	waitEnded(t, a, 10*time.Second, "client gone")
	startExport(t, srv)
}

// The write deadline moves with progress: a client that keeps reading
// outlasts WriteTimeout many times over; one that stops reading is cut off
// about WriteTimeout later, releasing its goroutine, buffers and slot.
func TestExportWriteDeadlineMovesWithProgress(t *testing.T) {
	a := newEndlessAudit()
	cfg := testConfig()
	// The client below reads as fast as it can: a slow reader frees
	// socket buffer space in steps the sender sees only every so often
	// (TCP window updates), which WriteTimeout must cover (30s by
	// default; here the test's patience).
	const timeout = time.Second
	cfg.Exports = ExportConfig{MaxConcurrent: 1, WriteTimeout: timeout}
	srv := httptest.NewServer(newTestHandler(t, cfg, Deps{Audit: a}))
	t.Cleanup(srv.Close) // after the clients' Cleanup closed their bodies
	resp := startExport(t, srv)
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(3 * timeout)
	for time.Now().Before(deadline) {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("a reading client was cut off after %v: %v", 3*timeout-time.Until(deadline), err)
		}
	}
	select {
	case err := <-a.ended:
		t.Fatalf("export ended while its client read: %v", err)
	default:
	}
	// Stop reading: the socket buffers fill, the write blocks, the
	// deadline passes.
	waitEnded(t, a, timeout+10*time.Second, "client stopped reading")
	resp.Body.Close()
	if got := a.running.Load(); got != 0 {
		t.Errorf("%d streams still running", got)
	}
	startExport(t, srv) // the slot is free
}

// When the server begins to stop, exports in flight end at once, even one
// whose client does not read (its write would otherwise block until the
// write deadline), so they never hold a graceful stop.
func TestExportEndsWhenServerStops(t *testing.T) {
	a := newEndlessAudit()
	stopping := make(chan struct{})
	cfg := testConfig()
	cfg.Exports = ExportConfig{WriteTimeout: time.Hour}
	srv := httptest.NewServer(newTestHandler(t, cfg, Deps{Audit: a, Stopping: stopping}))
	t.Cleanup(srv.Close)               // after the clients' Cleanup closed their bodies
	startExport(t, srv)                // and never read again
	time.Sleep(200 * time.Millisecond) // the socket buffers fill
	t0 := time.Now()
	close(stopping)
	waitEnded(t, a, 5*time.Second, "server stopping")
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("export ended %v after the stop began", d)
	}
}
