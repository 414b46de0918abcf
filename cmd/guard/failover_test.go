package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// TestServeFailsOpenWhenRedisDies kills Guard's Redis: decisions go on from
// the local fallback marked degraded, /readyz and the metrics say so, and
// the webhook receives one redis_down alert.
func TestServeFailsOpenWhenRedisDies(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	var (
		mu     sync.Mutex
		alerts []map[string]any
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &p) == nil {
			mu.Lock()
			alerts = append(alerts, p)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	config := strings.Replace(e2eConfig(t.TempDir()), "store: {budget: 2s}", "store: {budget: 50ms}", 1) +
		"alerts: {webhook_url: \"" + hook.URL + "\", timeout: 1s}\n"
	g := startGuard(t, config, map[string]string{"GUARD_REDIS_URL": srv.URL()})
	ctx := context.Background()
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	ip := "203.0.113.50"
	res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", IP: &ip})
	if err != nil || res.Degraded {
		t.Fatalf("check with Redis up = %+v, %v; want a normal answer", res, err)
	}

	srv.Kill()

	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err = client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("198.51.100.77")})
		if err != nil {
			t.Fatalf("check with Redis down: %v (Guard must fail open)", err)
		}
		if res.Degraded || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !res.Degraded || res.Decision != "allow" {
		t.Errorf("check with Redis down = %s degraded=%v, want allow degraded=true", res.Decision, res.Degraded)
	}
	// The first failed call is answered from the fallback at once, and
	// readiness says so at once; the breaker (and its gauges) opens after
	// a few failures.
	ready, err := client.Ready(ctx)
	if err != nil {
		t.Fatalf("readyz with Redis down: %v (want 200: Guard still decides)", err)
	}
	if ready.Mode != "degraded" || ready.Redis != "down" {
		t.Errorf("readyz right after a degraded answer = %+v, want mode degraded, redis down", *ready)
	}
	var missing []string
	for {
		resp, err := http.Get(g.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing = missing[:0]
		for _, want := range []string{"guard_degraded 1", "guard_redis_up 0"} {
			if !strings.Contains(string(body), want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		_, _ = client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("198.51.100.78")})
		time.Sleep(20 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("metrics lack %v", missing)
	}
	for {
		mu.Lock()
		n := len(alerts)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 1 || alerts[0]["event"] != "redis_down" || alerts[0]["instance"] != "e2e-1" {
		t.Errorf("webhook alerts = %v, want one redis_down from e2e-1", alerts)
	}
}

// TestServeDegradedFromStartWhenRedisIsDown: a Redis that does not answer
// at start opens the breaker at once, so the gauges say so before any
// decision and the first decision comes from the fallback without waiting
// the budget; once Redis answers, Guard returns to it on its own.
func TestServeDegradedFromStartWhenRedisIsDown(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	srv.Kill()
	config := strings.Replace(e2eConfig(t.TempDir()), "store: {budget: 2s}", "store: {budget: 50ms}", 1)
	g := startGuard(t, config, map[string]string{"GUARD_REDIS_URL": srv.URL()})
	metrics := func() string {
		resp, err := http.Get(g.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := metrics(); !strings.Contains(m, "guard_degraded 1") || !strings.Contains(m, "guard_redis_up 0") {
		t.Errorf("metrics before any decision lack guard_degraded 1 and guard_redis_up 0")
	}
	ctx := context.Background()
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("198.51.100.90")})
	if err != nil || !res.Degraded {
		t.Fatalf("first check with Redis down = %+v, %v; want a degraded answer", res, err)
	}
	srv.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err = client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("198.51.100.91")})
		if err == nil && !res.Degraded || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || res.Degraded {
		t.Errorf("check after Redis came up = %+v, %v; want Redis's answer again", res, err)
	}
}

// TestServeSpoolsWhilePostgresIsDown starts Guard with a database that does
// not answer: it still starts and decides, readiness reports Postgres down,
// and the decisions wait in the spool on disk, which a graceful stop keeps.
func TestServeSpoolsWhilePostgresIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "postgres://postgres@" + ln.Addr().String() + "/guard?sslmode=disable&connect_timeout=1"
	ln.Close() // nothing listens there now
	spool := t.TempDir()
	g := startGuard(t, e2eConfig(spool), map[string]string{"GUARD_DATABASE_URL": deadURL})
	ctx := context.Background()
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	for i := range 5 {
		res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", IP: strp("192.0.2." + strconv.Itoa(i+1))})
		if err != nil || res.Decision != "allow" {
			t.Fatalf("check %d = %+v, %v; want allow (Postgres is not on the decision path)", i, res, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var ready *sdk.Readiness
	for {
		ready, err = client.Ready(ctx)
		if err != nil {
			t.Fatalf("readyz: %v", err)
		}
		if (ready.Postgres == "down" && ready.AuditBacklog >= 5) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ready.Mode != "normal" || ready.Postgres != "down" || ready.AuditBacklog < 5 {
		t.Errorf("readyz = %+v, want mode normal, postgres down, backlog >= 5", *ready)
	}
	if err := g.stop(t); err != nil {
		t.Logf("stop with Postgres down: %v", err)
	}
	info, err := os.Stat(filepath.Join(spool, "audit.spool"))
	if err != nil || info.Size() == 0 {
		t.Errorf("spool file after stop: %v, size %d; want the unwritten events kept on disk", err, sizeOf(info))
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// TestReadyzFastWhilePostgresHangs: a database that accepts connections and
// never answers (a hung Postgres) makes every ping wait out its timeout;
// /readyz answers from the last health poll instead, at once, so a
// readiness probe with a 1 s timeout does not fail while Guard decides.
func TestReadyzFastWhilePostgresHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	hungURL := "postgres://postgres@" + ln.Addr().String() + "/guard?sslmode=disable&connect_timeout=1"
	g := startGuard(t, e2eConfig(t.TempDir()), map[string]string{"GUARD_DATABASE_URL": hungURL})
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	ctx := context.Background()
	var slowest time.Duration
	var ready *sdk.Readiness
	deadline := time.Now().Add(10 * time.Second)
	for ready == nil || ready.Postgres != "down" {
		if time.Now().After(deadline) {
			t.Fatalf("readyz = %+v after 10 s, want postgres down", ready)
		}
		start := time.Now()
		if ready, err = client.Ready(ctx); err != nil {
			t.Fatalf("readyz: %v", err)
		}
		slowest = max(slowest, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	for range 5 {
		start := time.Now()
		if _, err := client.Ready(ctx); err != nil {
			t.Fatalf("readyz: %v", err)
		}
		slowest = max(slowest, time.Since(start))
	}
	if ready.Mode != "normal" {
		t.Errorf("readyz mode = %q, want normal (Postgres is not on the decision path)", ready.Mode)
	}
	if slowest >= 900*time.Millisecond {
		t.Errorf("slowest /readyz while Postgres hangs: %v, want an answer from the last poll, well under the 1 s ping timeout", slowest)
	}
}
