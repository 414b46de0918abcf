package abuse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestSignIns: a client is blocked after limit refusals in the window,
// until the oldest leaves it; the check writes nothing; other clients and
// other key secrets have counts of their own; and the count is a log of
// the client's hash, never its address.
func TestSignIns(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		g, _ := newGuard(t, b, DefaultPolicy())
		const limit, window = 3, time.Minute
		blocked := func(client string) (time.Duration, bool) {
			t.Helper()
			wait, ok, err := g.SignInBlocked(ctx, client, limit, window)
			if err != nil {
				t.Fatal(err)
			}
			return wait, ok
		}
		for i := range limit {
			if _, ok := blocked("198.51.100.7"); ok {
				t.Fatalf("blocked after %d refusals; limit %d", i, limit)
			}
			if err := g.SignInRefused(ctx, "198.51.100.7", limit, window); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 { // checks count nothing
			if _, ok := blocked("198.51.100.8"); ok {
				t.Fatal("another client blocked")
			}
		}
		wait, ok := blocked("198.51.100.7")
		if !ok || wait <= 0 || wait > window {
			t.Fatalf("after %d refusals: blocked %v, wait %v; want blocked, 0 < wait <= %v", limit, ok, wait, window)
		}
		if _, ok := blocked(""); ok {
			t.Error("a request without an address is blocked by another's count")
		}
		other, _ := newGuard(t, b, DefaultPolicy(), func(c *Config) { c.KeySecret = []byte("another fleet's secret, 32 bytes") })
		if _, ok, _ := other.SignInBlocked(ctx, "198.51.100.7", limit, window); ok {
			t.Error("a Guard of another key secret shares the count")
		}
		if b.name == "redis" {
			keys, err := testenv.RedisClient(t, testenv.RedisURL()).Keys(ctx, b.prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			want := g.keys.signInKey("198.51.100.7")
			if len(keys) != 1 || keys[0] != want || strings.Contains(keys[0], "198.51") {
				t.Errorf("keys %q; want only the client's hashed key %q", keys, want)
			}
		}
		if b.clock != nil {
			b.clock.Advance(wait)
			if _, ok := blocked("198.51.100.7"); ok {
				t.Errorf("still blocked %v later, when the oldest refusal left the window", wait)
			}
		}
	})
}
