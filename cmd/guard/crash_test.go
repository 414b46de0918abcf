package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// readyBacklog reads audit_backlog from /readyz.
func readyBacklog(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		Backlog *int `json:"audit_backlog"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.Backlog == nil {
		t.Fatalf("GET /readyz answered %s (%v); want audit_backlog", raw, err)
	}
	return *body.Backlog
}

// TestCrashWhilePostgresHangsKeepsDecisions: Postgres stops answering (a
// network partition: no error, no reply), Guard goes on deciding, and is
// killed (SIGKILL, no shutdown) a few flush intervals later. The next Guard
// on the same spool directory replays it: every decision answered before
// the kill is in the audit trail, once. Events recorded while the writes
// hang are spooled once those writes have been in flight for two flush
// intervals; they must not wait in memory for the writes' 5 s timeout.
func TestCrashWhilePostgresHangsKeepsDecisions(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	dbURL := testenv.Database(t, "guard_cmd_")
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	part := testenv.NewFreezeProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = part.Addr()
	spool := t.TempDir()
	env := map[string]string{
		"GUARD_REDIS_URL":    redisURL,
		"GUARD_DATABASE_URL": viaProxy.String(),
		"GUARD_KEY_PREFIX":   prefix,
	}
	p := startGuardProcess(t, e2eConfig(spool), env, "--migrate")
	client := sdk.New(p.base, checkKey, sdk.WithTimeout(10*time.Second))
	var answered []string
	check := func(i int) {
		t.Helper()
		user := "crash" + strconv.Itoa(i) + "@example.com"
		ip := "198.51.100." + strconv.Itoa(1+i%200)
		res, err := client.Check(context.Background(), sdk.CheckRequest{Action: "login", User: &user, IP: &ip})
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		answered = append(answered, res.DecisionID)
	}
	for i := range 100 {
		check(i)
	}
	waitUntil(t, 10*time.Second, "the first decisions to be stored", func() bool {
		return readyBacklog(t, p.base) == 0
	}, p)

	part.Freeze()
	start := time.Now()
	for i := 100; i < 400; i++ { // 8 batches of 50, over about half a second
		check(i)
		time.Sleep(time.Millisecond)
	}
	// Two flush intervals (20ms) for the writes in flight, one more for
	// the spool's fsync, and a margin for a loaded machine.
	time.Sleep(300 * time.Millisecond)
	if since := time.Since(start); since > 4*time.Second {
		t.Skipf("the machine is too slow for this test: the checks took %v, near the writes' 5 s timeout", since)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill guard: %v", err)
	}
	p.wait(10 * time.Second)
	part.Close()

	env["GUARD_DATABASE_URL"] = dbURL
	again := startGuardProcess(t, e2eConfig(spool), env)
	waitUntil(t, 20*time.Second, "the spool's replay", func() bool {
		return readyBacklog(t, again.base) == 0
	}, again)
	stored := auditIDCounts(t, dbURL)
	var lost []string
	for _, id := range answered {
		if stored[id] == 0 {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d answered decisions are missing from the audit trail after the crash (first: %s); log:\n%s",
			len(lost), len(answered), lost[0], p.logSummary())
	}
	for id, n := range stored {
		if n != 1 {
			t.Errorf("event %s stored %d times, want once", id, n)
		}
	}
}
