package limits

import (
	"context"
	"regexp"
	"testing"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisFunc: the library is named by its source's version, loads
// (twice, as every instance does at start), answers through its function,
// and a call of a library Redis does not have is "function missing" and
// unavailable (the store loads and calls again rather than failing).
func TestRedisFunc(t *testing.T) {
	fn := newRedisFunc(redisSource)
	if !regexp.MustCompile(`^guard_[0-9a-f]{16}$`).MatchString(fn.name) {
		t.Fatalf("name %q, want guard_<16 hex digits>", fn.name)
	}
	if other := newRedisFunc(redisSource + "\n"); other.name == fn.name {
		t.Errorf("a changed source kept the name %q", fn.name)
	}
	redisURL, prefix := testenv.Redis(t)
	c := newRedisTestClient(t, redisURL)
	ctx := context.Background()
	for i := range 2 {
		if err := fn.load(ctx, c); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
	// A dry check of one rule: the reply starts with Redis's time.
	res, err := c.FCall(ctx, fn.name, []string{prefix + "fn:log"}, "check", "1", "0", "0", "0", "1", "1", "0", "0",
		"a", "ea60", "60000", "0", "0").Slice()
	if err != nil || len(res) == 0 {
		t.Fatalf("fcall: %v %v", res, err)
	}
	if now, ok := res[0].(int64); !ok || now < 1e12 {
		t.Errorf("reply starts with %v, want Redis time in ms", res[0])
	}
	_, err = c.FCall(ctx, "guard_0000000000000000", []string{prefix + "fn:log"}, "check").Result()
	if !functionMissing(err) || !redisUnavailable(err) {
		t.Errorf("call of a missing function: got %v (missing %v, unavailable %v), want both", err, functionMissing(err), redisUnavailable(err))
	}
	if _, err := c.FCall(ctx, fn.name, nil, "nope").Result(); err == nil || functionMissing(err) || redisUnavailable(err) {
		t.Errorf("unknown op: got %v, want a plain script error", err)
	}
}
