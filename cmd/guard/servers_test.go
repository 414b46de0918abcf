package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Helpers that give each test real servers: the shared Redis under a fresh
// key prefix and a fresh Postgres database, and a running `guard serve`.

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// missing skips locally and fails under CI (CI=true), as the team's
// integration tests do.
func missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	tb.Skipf("%s; skipping (start it or set GUARD_TEST_REDIS_URL / GUARD_TEST_DATABASE_URL)", msg)
}

func testRedisURL() string {
	if u := os.Getenv("GUARD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func testAdminDatabaseURL() string {
	if u := os.Getenv("GUARD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
}

// testRedis checks the shared Redis answers and returns its URL and a fresh
// key prefix whose keys are deleted when the test ends.
func testRedis(t *testing.T) (redisURL, prefix string) {
	t.Helper()
	redisURL = testRedisURL()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		missing(t, "no Redis at %s: %v", redisURL, err)
	}
	prefix = "guardtest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return redisURL, prefix
}

// testDatabase creates an empty database and returns its URL; it is
// dropped when the test ends.
func testDatabase(t *testing.T) string {
	t.Helper()
	admin := testAdminDatabaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		missing(t, "no Postgres at %s: %v", redactURL(admin), err)
	}
	defer conn.Close(ctx)
	name := "guard_cmd_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// logWatcher is the stderr of a guard under test: it keeps every JSON log
// line and announces the listen address.
type logWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []map[string]any
	addr  chan string
}

func newLogWatcher() *logWatcher { return &logWatcher{addr: make(chan string, 1)} }

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadBytes('\n')
		if err != nil {
			w.buf.Write(line) // incomplete: keep for the next write
			break
		}
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		w.lines = append(w.lines, m)
		if m["msg"] == "guard listening" {
			if a, ok := m["addr"].(string); ok {
				select {
				case w.addr <- a:
				default:
				}
			}
		}
	}
	return len(p), nil
}

// has reports whether a log line with this level and message was written.
func (w *logWatcher) has(level, msgPart string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.lines {
		if m["level"] == level && bytes.Contains([]byte(fmt.Sprint(m["msg"])), []byte(msgPart)) {
			return true
		}
	}
	return false
}

func (w *logWatcher) dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b bytes.Buffer
	for _, m := range w.lines {
		j, _ := json.Marshal(m)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// runningGuard is a `guard serve` started by startGuard.
type runningGuard struct {
	base   string // http://127.0.0.1:port
	log    *logWatcher
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	err    error         // run's error, set before done closes
}

// stop cancels the server's context (SIGINT/SIGTERM in main) and returns
// run's error.
func (g *runningGuard) stop(t *testing.T) error {
	t.Helper()
	g.cancel()
	select {
	case <-g.done:
		return g.err
	case <-time.After(30 * time.Second):
		t.Fatalf("guard did not stop within 30s; log:\n%s", g.log.dump())
		return nil
	}
}

// startGuard writes config to a file and runs `guard serve --config FILE
// extra...` with env as the environment, until the test ends.
func startGuard(t *testing.T, config string, env map[string]string, extra ...string) *runningGuard {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &runningGuard{log: newLogWatcher(), cancel: cancel, done: make(chan struct{})}
	args := append([]string{"guard", "serve", "--config", path, "--log-format", "json"}, extra...)
	var stdout bytes.Buffer
	go func() {
		g.err = run(ctx, args, envMap(env), &stdout, g.log)
		close(g.done)
	}()
	select {
	case addr := <-g.log.addr:
		g.base = "http://" + addr
	case <-g.done:
		cancel()
		t.Fatalf("guard exited at start: %v; log:\n%s", g.err, g.log.dump())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("guard did not listen within 30s; log:\n%s", g.log.dump())
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(30 * time.Second):
		}
	})
	return g
}

// scanLines splits s into lines (for help output checks).
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewBufferString(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
