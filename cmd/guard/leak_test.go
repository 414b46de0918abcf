package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// TestServeLeavesNoGoroutines runs Guard with Redis and Postgres, makes it
// decide, stops it and checks that every goroutine it started (partition
// maintenance, health polling, the failover prober, the audit writer, the
// alert sender, the Redis and Postgres pools) has ended.
func TestServeLeavesNoGoroutines(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	dbURL := testenv.Database(t, "guardleak")
	before := guardGoroutines()
	g := startGuard(t, e2eConfig(t.TempDir()), map[string]string{
		"GUARD_REDIS_URL":    redisURL,
		"GUARD_KEY_PREFIX":   prefix,
		"GUARD_DATABASE_URL": dbURL,
	}, "--migrate")
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	if _, err := client.Check(context.Background(), sdk.CheckRequest{Action: "login", IP: strp("192.0.2.1")}); err != nil {
		t.Fatalf("check: %v", err)
	}
	if len(guardGoroutines()) <= len(before) {
		t.Fatalf("no Guard goroutines while serving; the test would see no leak")
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := guardGoroutines()
		if len(after) <= len(before) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of Guard or its clients still running 5s after stop (%d before start):\n%s",
				len(after), len(before), strings.Join(after, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// guardGoroutines returns the stacks of running goroutines that belong to
// Guard's packages or its Redis and Postgres clients.
func guardGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "guardGoroutines") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		for _, mark := range []string{"guardhq/guard/internal/", "guardhq/guard/cmd/guard.", "redis/go-redis", "jackc/pgx", "jackc/puddle"} {
			if strings.Contains(g, mark) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
