package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

const notifySecret = "whsec-e2e-0123456789"

// hookReceiver is the application's webhook endpoint: it verifies every
// request's signature with the SDK helper, answers the next status of
// plan (200 when plan is used up) and passes each accepted notification
// on deliveries.
type hookReceiver struct {
	t          *testing.T
	srv        *httptest.Server
	mu         sync.Mutex
	plan       []int
	attempts   []sdk.Notification // every request, accepted or not
	deliveries chan sdk.Notification
}

func newHookReceiver(t *testing.T, plan ...int) *hookReceiver {
	r := &hookReceiver{t: t, plan: plan, deliveries: make(chan sdk.Notification, 16)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := sdk.VerifyWebhook([]byte(notifySecret), req.Header.Get(sdk.SignatureHeader), body, time.Now(), 0); err != nil {
			t.Errorf("notification %s: %v", body, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n sdk.Notification
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&n); err != nil {
			t.Errorf("notification body %s: %v", body, err)
		}
		// Exactly API.md's fields (null when one does not apply), and
		// Guard's phone only when the lockout has one.
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Errorf("notification body %s: %v", body, err)
		}
		var keys []string
		for k := range fields {
			if k != "phone" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		if want := []string{"at", "device", "dimension", "event", "id", "instance", "ip", "ledger", "level", "reason", "until", "user"}; !slices.Equal(keys, want) {
			t.Errorf("notification body %s has fields %v, want %v", body, keys, want)
		}
		if p, ok := fields["phone"]; ok && string(p) == "null" {
			t.Errorf("notification body %s: a null phone, want none", body)
		}
		r.mu.Lock()
		code := http.StatusOK
		if len(r.plan) > 0 {
			code, r.plan = r.plan[0], r.plan[1:]
		}
		r.attempts = append(r.attempts, n)
		r.mu.Unlock()
		w.WriteHeader(code)
		if code == http.StatusOK {
			r.deliveries <- n
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// next waits for the next accepted notification.
func (r *hookReceiver) next(t *testing.T, what string) sdk.Notification {
	t.Helper()
	select {
	case n := <-r.deliveries:
		return n
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s notification within 30s", what)
		return sdk.Notification{}
	}
}

func (r *hookReceiver) attemptCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts)
}

// notifyConfig is e2eConfig with notifications to url and extra lines.
func notifyConfig(spoolDir, url, extra string) string {
	return e2eConfig(spoolDir) + "notifications: {webhook_url: \"" + url + "\", secret: " + notifySecret + "}\n" + extra
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// adminCall sends an admin request with a JSON body and returns the status.
func adminCall(t *testing.T, base, method, path, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func strike(t *testing.T, c *sdk.Client, user, ip string) {
	t.Helper()
	for range 2 {
		if _, err := c.Report(context.Background(), sdk.ReportRequest{Action: "login", User: &user, IP: &ip, Outcome: "failure"}); err != nil {
			t.Fatalf("report: %v", err)
		}
	}
}

// A strike, a manual lockout and an unlock each reach the receiver,
// signed, with the contract's fields; a receiver that fails first gets
// the same notification again.
func TestNotificationsEndToEnd(t *testing.T) {
	rcv := newHookReceiver(t, http.StatusInternalServerError)
	g := startGuard(t, notifyConfig(t.TempDir(), rcv.srv.URL+"/hooks/guard", ""), nil)
	c := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	before := time.Now().Add(-time.Second)

	strike(t, c, "Alice@Example.COM", "203.0.113.7")
	n := rcv.next(t, "strike")
	if got := rcv.attemptCount(); got != 2 {
		t.Errorf("attempts = %d, want 2 (a 500, then the retry)", got)
	}
	if first := rcv.attempts[0]; first.ID != n.ID {
		t.Errorf("retry id %q, want the first attempt's %q", n.ID, first.ID)
	}
	at, err := time.Parse(sdk.TimeFormat, n.At)
	if err != nil || at.Before(before) || at.Format(sdk.TimeFormat) != n.At {
		t.Errorf("at = %q (%v), want a recent time in the contract's format", n.At, err)
	}
	until, err := time.Parse(sdk.TimeFormat, str(n.Until))
	if err != nil || until.Sub(at) != time.Minute {
		t.Errorf("until = %s, want at + 1m (level 1 of the ladder)", str(n.Until))
	}
	if n.Event != "lockout" || n.Instance != "e2e-1" || str(n.Ledger) != "auth" || n.Dimension != "user" ||
		str(n.User) != "alice@example.com" || str(n.IP) != "203.0.113.7" || n.Device != nil || n.Level != 1 || n.Reason != "login/user/failures" {
		t.Errorf("strike notification = %+v (user %s, ip %s)", n, str(n.User), str(n.IP))
	}

	if code := adminCall(t, g.base, http.MethodPost, "/v1/lockouts",
		`{"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 3600000, "reason": "scanner"}`); code != http.StatusCreated {
		t.Fatalf("POST /v1/lockouts = %d, want 201", code)
	}
	n = rcv.next(t, "manual lockout")
	if n.Event != "lockout" || str(n.Ledger) != "auth" || n.Dimension != "ip" || str(n.IP) != "203.0.113.9" ||
		n.User != nil || n.Level != 0 || n.Reason != "scanner" || n.Until == nil {
		t.Errorf("manual lockout notification = %+v (ip %s)", n, str(n.IP))
	}

	admin := sdk.New(g.base, adminKey, sdk.WithTimeout(10*time.Second))
	if err := admin.Unlock(context.Background(), sdk.UnlockRequest{Dimension: "user", User: strp("alice@example.com"), Ledger: "auth", Reason: "verified by phone"}); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	n = rcv.next(t, "unlock")
	if n.Event != "unlock" || str(n.Ledger) != "auth" || n.Dimension != "user" || str(n.User) != "alice@example.com" ||
		n.Level != 0 || n.Until != nil || n.Reason != "verified by phone" {
		t.Errorf("unlock notification = %+v", n)
	}

	// The receiver answered before Guard counted the answer: wait for it.
	wants := []string{
		`guard_notifications_total{event="lockout",result="delivered"} 2`,
		`guard_notifications_total{event="lockout",result="retried"} 1`,
		`guard_notifications_total{event="unlock",result="delivered"} 1`,
		`guard_notifications_pending 0`,
	}
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		metrics := scrapeMetrics(t, g.base)
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(metrics, want+"\n") {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("metrics lack %v", missing)
	}
}

func scrapeMetrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A notification whose delivery failed before a stop is in the spool and
// is delivered, with the same id, by the next start on it.
func TestNotificationSurvivesRestart(t *testing.T) {
	rcv := newHookReceiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	spool := t.TempDir()
	cfg := notifyConfig(spool, rcv.srv.URL, "")
	g := startGuard(t, cfg, nil)
	strike(t, sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second)), "bob@example.com", "203.0.113.7")
	deadline := time.Now().Add(30 * time.Second)
	for rcv.attemptCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(spool, "notifications", "*.ntf"))
	if len(files) != 1 {
		t.Fatalf("spool after stop = %v, want one pending notification", files)
	}
	rcv.mu.Lock()
	failed := rcv.attempts[0]
	rcv.plan = nil
	rcv.mu.Unlock()

	startGuard(t, cfg, nil)
	n := rcv.next(t, "spooled")
	if n.ID != failed.ID || str(n.User) != "bob@example.com" || n.Event != "lockout" {
		t.Errorf("after restart got %+v, want the notification %s that failed before the stop", n, failed.ID)
	}
	deadline = time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if files, _ = filepath.Glob(filepath.Join(spool, "notifications", "*.ntf")); len(files) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(files) != 0 {
		t.Errorf("spool after delivery = %v, want empty", files)
	}
}

// With audit.pseudonymize the identifiers are the audit trail's hashes;
// notifications.events filters what is sent.
func TestNotificationsPseudonymizedAndFiltered(t *testing.T) {
	rcv := newHookReceiver(t)
	cfg := strings.Replace(e2eConfig(t.TempDir()), "audit: {", "audit: {pseudonymize: true, ", 1) +
		"notifications:\n  webhook_url: " + rcv.srv.URL + "\n  events: [unlock]\n"
	g := startGuard(t, cfg, map[string]string{"GUARD_NOTIFICATIONS_SECRET": notifySecret})
	strike(t, sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second)), "carol@example.com", "203.0.113.7")
	admin := sdk.New(g.base, adminKey, sdk.WithTimeout(10*time.Second))
	if err := admin.Unlock(context.Background(), sdk.UnlockRequest{Dimension: "user", User: strp("carol@example.com"), Reason: "ok"}); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	// Notifications go out in order: a lockout sent despite the filter
	// would arrive first.
	n := rcv.next(t, "unlock")
	if n.Event != "unlock" || str(n.Ledger) != "auth" || n.User == nil || *n.User == "carol@example.com" {
		t.Fatalf("notification = %+v (ledger %s, user %s), want the unlock of ledger auth (the one locked) with a hashed user", n, str(n.Ledger), str(n.User))
	}
	audit := sdk.New(g.base, auditKey, sdk.WithTimeout(10*time.Second))
	var events []sdk.AuditEvent
	deadline := time.Now().Add(30 * time.Second)
	for len(events) == 0 && time.Now().Before(deadline) {
		page, err := audit.Audit(context.Background(), sdk.AuditFilter{User: "carol@example.com", Kind: "admin"})
		if err != nil {
			t.Fatal(err)
		}
		events = page.Events
		time.Sleep(20 * time.Millisecond)
	}
	if len(events) != 1 || str(events[0].User) != *n.User {
		t.Errorf("audit admin events %+v, want one whose user is the notification's %s", events, *n.User)
	}
}
