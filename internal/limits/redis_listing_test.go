package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// seedLockouts writes n active lock records (as strikes leave them: record
// plus an entry in the lockout index of their identity) straight into
// Redis, pipelined, and returns the store with the key of identity 0's
// index; identity 0 also has three lockouts of its own.
func seedLockouts(tb testing.TB, n int) (*RedisStore, *redis.Client, string) {
	tb.Helper()
	srv := testenv.PrivateRedis(tb)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	tb.Cleanup(func() { c.Close() })
	ctx := context.Background()
	now := time.Now().UnixMilli()
	pipe := c.Pipeline()
	for i := range n {
		id := fmt.Sprintf("id%07d", i)
		lock := "guard:v2:{" + id + "}k:auth:user"
		until := now + int64(time.Hour/time.Millisecond) + int64(i)
		pipe.Set(ctx, lock, fmt.Sprintf("1|%d|%d|%d|auth|user|%s||", now, until, now, id), time.Hour+time.Minute)
		pipe.ZAdd(ctx, "guard:v2:{"+id+"}x", redis.Z{Score: float64(until), Member: lock})
		if i%5000 == 4999 {
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatalf("seed: %v", err)
			}
		}
	}
	for j, dim := range []string{"user+ip", "user+device"} {
		lock := fmt.Sprintf("guard:v2:{id0000000}k:auth:%s:h%d", dim, j)
		until := now + int64(2*time.Hour/time.Millisecond)
		pipe.Set(ctx, lock, fmt.Sprintf("2|%d|%d|%d|auth|%s|id0000000||", now, until, now, dim), 3*time.Hour)
		pipe.ZAdd(ctx, "guard:v2:{id0000000}x", redis.Z{Score: float64(until), Member: lock})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("seed: %v", err)
	}
	s := NewRedis(redis.NewClient(&redis.Options{Addr: srv.Addr()}), RedisStoreConfig{})
	tb.Cleanup(func() { s.Close() })
	return s, c, "guard:v2:{id0000000}x"
}

// TestRedisListing100kLockouts: with 100,000 active lockouts a listing by
// identity reads only that identity's locks, and a listing by pattern
// pages through all of them in pages of the requested size, each lockout
// once, while decisions on the same store stay normal (listings go through
// the failover store's admin timeout and never touch its breaker).
func TestRedisListing100kLockouts(t *testing.T) {
	const n = 100_000
	s, _, idx := seedLockouts(t, n)
	f := NewFailover(nil, FailoverConfig{}, s, NewMemory(MemoryConfig{}), FailoverEvents{})
	defer f.Close()
	ctx := context.Background()

	page, err := f.Lockouts(ctx, &LockQuery{Index: idx, Limit: 100})
	if err != nil {
		t.Fatalf("by index: %v", err)
	}
	if len(page.Locks) != 3 || page.Next != "" || page.Locks[0].Level != 2 {
		t.Errorf("by index: %d lockouts (next %q) %+v; want identity 0's three, level-2 ones first", len(page.Locks), page.Next, page.Locks)
	}

	seen := map[string]bool{}
	q := LockQuery{Pattern: "guard:v2:{*}k:auth:user", Limit: 1000}
	pages := 0
	for {
		page, err := f.Lockouts(ctx, &q)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(page.Locks) > q.Limit {
			t.Fatalf("page %d: %d lockouts, limit %d", pages, len(page.Locks), q.Limit)
		}
		for _, l := range page.Locks {
			seen[l.Key] = true
		}
		// Decisions between pages are answered by Redis, not the fallback.
		res, err := f.Check(ctx, &CheckRequest{Rules: []Rule{{Key: "{d}l:x", Limit: 1_000_000, Window: time.Minute}}, Cost: 1})
		if err != nil || res.Degraded {
			t.Fatalf("decision during the listing: %+v, %v", res, err)
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	if len(seen) != n {
		t.Errorf("pattern listing: %d distinct lockouts in %d pages, want %d", len(seen), pages, n)
	}
}

// BenchmarkRedisLockoutListing measures a filtered page (by identity) and
// a first unfiltered page with 100,000 active lockouts in Redis.
func BenchmarkRedisLockoutListing(b *testing.B) {
	s, _, idx := seedLockouts(b, 100_000)
	ctx := context.Background()
	b.Run("by-identity", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Lockouts(ctx, &LockQuery{Index: idx, Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan-first-page-100", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Lockouts(ctx, &LockQuery{Pattern: "guard:v2:{*}k:*", Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
