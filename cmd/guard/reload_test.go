package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// TestSIGHUPReloads runs guard as a real process and reloads it with real
// SIGHUPs: a valid file changes the limits of the next check, is logged and
// audited; an invalid one changes nothing, logs its problems and alerts
// config_rejected; a changed listen address is reported as needing a
// restart.
func TestSIGHUPReloads(t *testing.T) {
	var (
		mu     sync.Mutex
		alerts []map[string]any
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		alerts = append(alerts, p)
		mu.Unlock()
	}))
	defer hook.Close()
	base := e2eConfig(t.TempDir()) + "alerts: {webhook_url: \"" + hook.URL + "\", timeout: 1s}\n"
	p := startGuardProcess(t, base, nil)
	path := p.cmd.Args[3] // serve --config PATH
	client := sdk.New(p.base, checkKey, sdk.WithTimeout(10*time.Second))
	ctx := context.Background()
	ipLimit := func() int {
		t.Helper()
		res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("198.51.100.1")})
		if err != nil || len(res.Limits) != 1 {
			t.Fatalf("check = %+v, %v; want one rule", res, err)
		}
		return res.Limits[0].Limit
	}
	hup := func(content, logMsg string, n int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatalf("send SIGHUP: %v", err)
		}
		waitUntil(t, 10*time.Second, "log "+logMsg, func() bool { return p.log.count(logMsg) >= n }, p)
	}
	if got, want := ipLimit(), 3; got != want {
		t.Fatalf("ip limit at start = %d, want %d", got, want)
	}

	next := strings.Replace(base, "{dimension: ip, limit: 3, window: 1m}", "{dimension: ip, limit: 7, window: 1m}", 1)
	hup(strings.Replace(next, "listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1), "config reloaded", 1)
	if got, want := ipLimit(), 7; got != want {
		t.Errorf("ip limit after the reload = %d, want %d", got, want)
	}
	if !p.log.has("WARN", "needs a restart") {
		t.Errorf("no log line reports listen as needing a restart; log:\n%s", p.logSummary())
	}
	audit := sdk.New(p.base, auditKey, sdk.WithTimeout(10*time.Second))
	var events []sdk.AuditEvent
	waitUntil(t, 10*time.Second, "the reload's admin event", func() bool {
		page, err := audit.Audit(ctx, sdk.AuditFilter{Kind: "admin"})
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		events = page.Events
		return len(events) > 0
	}, p)
	if len(events) != 1 || events[0].Action == nil || *events[0].Action != "reload" || events[0].APIKey != nil {
		t.Errorf("admin events = %+v, want one reload without an api key", events)
	}

	hup(base+"bogus: true\n", "config reload rejected", 1)
	if got, want := ipLimit(), 7; got != want {
		t.Errorf("ip limit after an invalid reload = %d, want %d (unchanged)", got, want)
	}
	waitUntil(t, 10*time.Second, "the config_rejected alert", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(alerts) > 0
	}, p)
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0]["event"] != "config_rejected" || alerts[0]["instance"] != "e2e-1" ||
		!strings.Contains(alerts[0]["detail"].(string), `unknown key "bogus"`) {
		t.Errorf("alerts = %v, want one config_rejected from e2e-1 naming the problem", alerts)
	}
}

// count is how many log lines contain msgPart in their message.
func (w *logWatcher) count(msgPart string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.lines {
		if strings.Contains(fmt.Sprint(m["msg"]), msgPart) {
			n++
		}
	}
	return n
}

// TestSIGHUPReloadsNotifications: a reload moves lockout notifications to
// the new webhook_url (the spool stays); the old receiver gets no more.
func TestSIGHUPReloadsNotifications(t *testing.T) {
	first, second := newHookReceiver(t), newHookReceiver(t)
	spool := t.TempDir()
	p := startGuardProcess(t, notifyConfig(spool, first.srv.URL, ""), nil)
	path := p.cmd.Args[3] // serve --config PATH
	client := sdk.New(p.base, checkKey, sdk.WithTimeout(10*time.Second))
	strike(t, client, "bob@example.com", "203.0.113.7")
	if n := first.next(t, "first receiver's"); str(n.User) != "bob@example.com" {
		t.Errorf("first receiver got %+v, want bob's lockout", n)
	}
	if err := os.WriteFile(path, []byte(notifyConfig(spool, second.srv.URL, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("send SIGHUP: %v", err)
	}
	waitUntil(t, 10*time.Second, "log config reloaded", func() bool { return p.log.count("config reloaded") >= 1 }, p)
	strike(t, client, "carol@example.com", "203.0.113.8")
	if n := second.next(t, "second receiver's"); str(n.User) != "carol@example.com" {
		t.Errorf("second receiver got %+v, want carol's lockout", n)
	}
	if got := first.attemptCount(); got != 1 {
		t.Errorf("first receiver got %d requests, want 1 (none after the reload)", got)
	}
}
