package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guardhq/guard/sdk"
)

const testSecret = "whsec-test-123"

// delivery is one request a receiver got, its signature checked.
type delivery struct {
	at   time.Time
	body sdk.Notification
	sig  error
}

// receiver is a webhook endpoint that verifies each request's signature
// with the SDK helper, records it and answers with the status codes in
// plan, one per request (200 once plan is used up; 0 hangs until the
// caller gives up).
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	plan   []int
	got    []delivery
	h      http.Handler
}

func newReceiver(t *testing.T, secret string, plan ...int) *receiver {
	r := &receiver{t: t, secret: secret, plan: plan}
	r.h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		d := delivery{at: time.Now(), sig: sdk.VerifyWebhook([]byte(r.secret), req.Header.Get(sdk.SignatureHeader), body, time.Now(), 0)}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d.body); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", ct)
		}
		r.mu.Lock()
		code := http.StatusOK
		if i := len(r.got); i < len(r.plan) {
			code = r.plan[i]
		}
		r.got = append(r.got, d)
		r.mu.Unlock()
		if code == 0 {
			<-req.Context().Done()
			return
		}
		w.WriteHeader(code)
	})
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// inMemory hands each request straight to r's handler (the one a real
// server runs, checks included): inside a synctest bubble a socket read
// is not "durably blocked", so tests on the fake clock deliver this way.
func (r *receiver) inMemory() *http.Client {
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, req)
		if err := req.Context().Err(); err != nil {
			return nil, err
		}
		return rec.Result(), nil
	})}
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
	return strings.Join(rs.got, " ")
}

const memURL = "http://app.invalid/hooks/guard"

func testConfig(dir string) Config {
	return Config{
		Settings: Settings{WebhookURL: memURL, Secret: testSecret, Timeout: time.Second},
		SpoolDir: dir,
		Backoff:  time.Second,
	}
}

func startNotifier(t *testing.T, cfg Config, client *http.Client, rs *results) *Notifier {
	t.Helper()
	n, err := New(nil, cfg, client, Hooks{OnResult: rs.record})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

func closeNotifier(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func sampleEvent(id string) Event {
	u := "alice@example.com"
	return Event{
		ID: id, Event: sdk.NotificationLockout, At: time.Date(2026, 12, 1, 11, 0, 0, 123_456_000, time.UTC),
		Instance: "guard-1", Ledger: "auth", Dimension: "user", User: &u, Level: 2,
		Until: time.Date(2026, 12, 1, 11, 5, 0, 123_000_000, time.UTC), Reason: "login/user/failures",
	}
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDeliverSignedBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rcv := newReceiver(t, testSecret)
		rs := &results{}
		n := startNotifier(t, testConfig(dir), rcv.inMemory(), rs)
		n.Notify(sampleEvent("01JDA0000000000000000000AA"))
		synctest.Wait()
		got := rcv.deliveries()
		if len(got) != 1 {
			t.Fatalf("deliveries = %d, want 1", len(got))
		}
		if got[0].sig != nil {
			t.Errorf("signature: %v", got[0].sig)
		}
		u, led, until := "alice@example.com", "auth", "2026-12-01T11:05:00.123Z"
		want := sdk.Notification{ID: "01JDA0000000000000000000AA", Event: "lockout", At: "2026-12-01T11:00:00.123Z",
			Instance: "guard-1", Ledger: &led, Dimension: "user", User: &u, Level: 2, Until: &until, Reason: "login/user/failures"}
		if g, w := fmt.Sprintf("%+v", deref(got[0].body)), fmt.Sprintf("%+v", deref(want)); g != w {
			t.Errorf("body = %s, want %s", g, w)
		}
		if g, w := rs.String(), "lockout/delivered"; g != w {
			t.Errorf("results = %q, want %q", g, w)
		}
		if g := spoolFiles(t, dir); len(g) != 0 {
			t.Errorf("spool after delivery = %v, want empty", g)
		}
		closeNotifier(t, n)
	})
}

// deref renders a notification's pointers as values, for comparisons.
func deref(n sdk.Notification) map[string]any {
	s := func(p *string) any {
		if p == nil {
			return nil
		}
		return *p
	}
	return map[string]any{"id": n.ID, "event": n.Event, "at": n.At, "instance": n.Instance, "ledger": s(n.Ledger),
		"dimension": n.Dimension, "user": s(n.User), "ip": s(n.IP), "device": s(n.Device), "level": n.Level,
		"until": s(n.Until), "reason": n.Reason}
}

// A failing receiver gets the same notification again, with the same id
// and a fresh signature, after a backoff that doubles (with jitter: 50-100%
// of it); 4xx, 5xx, a redirect and a timeout are all retried.
func TestRetryBackoffSameID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := newReceiver(t, testSecret, 500, 404, 0, 302, 200)
		rs := &results{}
		n := startNotifier(t, testConfig(t.TempDir()), rcv.inMemory(), rs)
		n.Notify(sampleEvent("01JDA0000000000000000000BB"))
		time.Sleep(time.Hour)
		got := rcv.deliveries()
		if len(got) != 5 {
			t.Fatalf("attempts = %d, want 5", len(got))
		}
		for i, d := range got {
			if d.body.ID != "01JDA0000000000000000000BB" || d.sig != nil {
				t.Errorf("attempt %d: id %q, signature %v", i, d.body.ID, d.sig)
			}
		}
		// Attempt i+1 follows attempt i (which took timeout when it hung)
		// after 50-100% of 1s * 2^i.
		for i := 1; i < len(got); i++ {
			gap := got[i].at.Sub(got[i-1].at)
			if i == 3 {
				gap -= time.Second // the attempt that hung until the timeout
			}
			b := time.Second << (i - 1)
			if gap < b/2 || gap > b {
				t.Errorf("gap before attempt %d = %v, want %v..%v", i+1, gap, b/2, b)
			}
		}
		if g, w := rs.String(), "lockout/retried lockout/retried lockout/retried lockout/retried lockout/delivered"; g != w {
			t.Errorf("results = %q, want %q", g, w)
		}
		closeNotifier(t, n)
	})
}

// A receiver that never accepts is tried for all of MaxAge, the last
// attempt at its very end, then the notification is given up, counted as
// failed and removed; backoff stays capped.
func TestGiveUpAfterMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rcv := newReceiver(t, testSecret, slices.Repeat([]int{503}, 1000)...)
		rs := &results{}
		n := startNotifier(t, testConfig(dir), rcv.inMemory(), rs)
		start := time.Now()
		n.Notify(sampleEvent("01JDA0000000000000000000CC"))
		time.Sleep(25 * time.Hour)
		got := rcv.deliveries()
		last := got[len(got)-1].at.Sub(start)
		if last != DefaultMaxAge {
			t.Errorf("last attempt %v after enqueue, want at %v", last, DefaultMaxAge)
		}
		for i := 1; i < len(got); i++ {
			if gap := got[i].at.Sub(got[i-1].at); gap > DefaultMaxBackoff {
				t.Fatalf("gap before attempt %d = %v, want at most %v", i+1, gap, DefaultMaxBackoff)
			}
		}
		res := rs.String()
		if !strings.HasSuffix(res, "lockout/retried lockout/failed") || strings.Count(res, "failed") != 1 {
			t.Errorf("results end %q, want retries then one failed", res[max(0, len(res)-60):])
		}
		if g := spoolFiles(t, dir); len(g) != 0 {
			t.Errorf("spool = %v, want empty", g)
		}
		if n.Pending() != 0 {
			t.Errorf("Pending = %d, want 0", n.Pending())
		}
		closeNotifier(t, n)
	})
}
