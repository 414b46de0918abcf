package limits

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/testenv"
)

// Helpers shared by the Redis tests and benchmarks: connecting clients and
// listing and counting what reaches the server. The servers themselves
// (the shared one under a random key prefix, private ones for tests that
// disturb them) come from internal/testenv.

// privateRedisPrefix is the key prefix on a private server
// (testenv.PrivateRedis), which no other test shares.
const privateRedisPrefix = "guardtest:private:"

// newRedisTestClient connects a fresh client (its own pool, as a separate
// Guard replica would have) to url, honouring ctx deadlines; it is closed by
// tb.Cleanup unless a store took it over and closed it first.
func newRedisTestClient(tb testing.TB, url string) *redis.Client {
	tb.Helper()
	return testenv.RedisClient(tb, url, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
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
