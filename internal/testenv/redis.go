package testenv

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingTimeout bounds the reachability check of a server.
const pingTimeout = 2 * time.Second

// Redis checks that the shared test Redis answers (Missing otherwise) and
// returns its URL and a fresh random key prefix, "guardtest:<random>:",
// whose keys are deleted when the test ends.
func Redis(tb testing.TB) (url, prefix string) {
	tb.Helper()
	url = RedisURL()
	c := RedisClient(tb, url)
	_ = c.Close()
	prefix = "guardtest:" + rand.Text()[:12] + ":"
	CleanupPrefix(tb, url, prefix)
	return url, prefix
}

// RedisClient connects a fresh client (its own pool) to url; adjust, if
// given, changes the parsed options first. It calls Missing when the server
// does not answer PING within 2s, and the client is closed when the test
// ends (closing it earlier is fine).
func RedisClient(tb testing.TB, url string, adjust ...func(*redis.Options)) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("parse redis url %q: %v", url, err)
	}
	for _, f := range adjust {
		f(opt)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		Missing(tb, "no Redis at %s: %v", url, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// CleanupPrefix deletes every key under prefix on the Redis at url when the
// test ends (the keys carry TTLs anyway; this keeps the shared server tidy).
// Errors are ignored: cleanup must not fail a test.
func CleanupPrefix(tb testing.TB, url, prefix string) {
	tb.Helper()
	tb.Cleanup(func() {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
}
