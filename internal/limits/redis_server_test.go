package limits

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Helpers shared by the Redis tests and benchmarks: connecting to the test
// server, isolating each test under a random key prefix, counting round
// trips, and starting a private server for tests that disturb it.

// redisTestURL is the shared test server; GUARD_TEST_REDIS_URL overrides it.
func redisTestURL() string {
	if u := os.Getenv("GUARD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// redisMissing skips the test locally and fails it under CI.
func redisMissing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	tb.Skipf("%s; skipping (start Redis or set GUARD_TEST_REDIS_URL)", msg)
}

// newRedisTestClient connects a fresh client (its own pool, as a separate
// Guard replica would have) to url, honouring ctx deadlines; it is closed by
// tb.Cleanup unless a store took it over and closed it first.
func newRedisTestClient(tb testing.TB, url string) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("parse redis url %q: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		redisMissing(tb, "no Redis at %s: %v", url, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// redisTestPrefix isolates one test's keys on the shared server.
func redisTestPrefix() string {
	return "guardtest:" + rand.Text()[:12] + ":"
}

// redisTestKeys lists the keys under prefix.
func redisTestKeys(tb testing.TB, c redis.UniversalClient, prefix string) []string {
	tb.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("scan %s*: %v", prefix, err)
	}
	return keys
}

// cleanupRedisPrefix deletes the test's keys when it ends (they all carry
// TTLs anyway; this keeps the shared server tidy).
func cleanupRedisPrefix(tb testing.TB, prefix string) {
	tb.Helper()
	tb.Cleanup(func() {
		opt, err := redis.ParseURL(redisTestURL())
		if err != nil {
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		for _, k := range redisTestKeys(tb, c, prefix) {
			c.Del(context.Background(), k)
		}
	})
}

// redisCountHook counts the round trips a client makes: one per command
// outside a pipeline, one per pipeline.
type redisCountHook struct {
	trips atomic.Int64
	names atomic.Value // []string of the last commands, for messages
}

func (h *redisCountHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redisCountHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *redisCountHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.add(fmt.Sprintf("pipeline(%d)", len(cmds)))
		return next(ctx, cmds)
	}
}

func (h *redisCountHook) add(name string) {
	old, _ := h.names.Load().([]string)
	h.names.Store(append(append([]string(nil), old...), name))
}

// reset zeroes the count and returns the previous count and commands.
func (h *redisCountHook) reset() (int64, []string) {
	names, _ := h.names.Load().([]string)
	h.names.Store([]string(nil))
	return h.trips.Swap(0), names
}

// startPrivateRedis starts a redis-server of the test's own on a free
// loopback port, for tests that flush scripts, pause or kill the server;
// it is stopped by tb.Cleanup. It returns the URL and the server process.
func startPrivateRedis(tb testing.TB) (string, *exec.Cmd) {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		redisMissing(tb, "no redis-server binary for a private instance: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir())
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(url)
	c := redis.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			tb.Fatalf("private redis-server on port %d did not answer within 5s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return url, cmd
}
