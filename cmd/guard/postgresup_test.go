package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/testenv"
)

// TestPostgresUpGaugeFollowsTheDatabase starts Guard while its database
// does not answer, then makes it answer (a TCP forwarder to the real
// Postgres appears on the URL's port): guard_postgres_up must go from 0 to
// 1 without any audit write failing first, as /readyz does.
func TestPostgresUpGaugeFollowsTheDatabase(t *testing.T) {
	dbURL := testenv.Database(t, "guardpgup")
	ctx := context.Background()
	if _, _, err := audit.Migrate(ctx, dbURL, audit.MigrateUp); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	target, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := ln.Addr().String()
	ln.Close() // nothing answers there until the forwarder starts
	proxied := *target
	proxied.Host = proxyAddr
	q := proxied.Query()
	q.Set("connect_timeout", "1")
	proxied.RawQuery = q.Encode()

	g := startGuard(t, e2eConfig(t.TempDir()), map[string]string{"GUARD_DATABASE_URL": proxied.String()})
	if got := scrapeGauge(t, g.base, "guard_postgres_up"); got != "0" {
		t.Errorf("guard_postgres_up with the database down = %q, want 0", got)
	}

	stop := forwardTCP(t, proxyAddr, target.Host)
	defer stop()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := scrapeGauge(t, g.base, "guard_postgres_up")
		if got == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("guard_postgres_up = %q 15s after the database came up, want 1; log:\n%s", got, g.log.dump())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := g.stop(t); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// scrapeGauge returns the value of the unlabelled series name on /metrics.
func scrapeGauge(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("metrics have no series %s", name)
	return ""
}

// forwardTCP listens on addr and copies every connection to and from
// target, until stop (which also cuts the open connections).
func forwardTCP(t *testing.T, addr, target string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("forwarder on %s: %v", addr, err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	return func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}
