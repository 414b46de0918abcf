package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisPrune: guard redis prune, on the Redis of GUARD_REDIS_URL,
// lists and deletes another version's library and keeps this version's;
// --dry-run only lists.
func TestRedisPrune(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	c := testenv.RedisClient(t, srv.URL())
	ctx := context.Background()
	store := limits.NewRedis(c, limits.RedisStoreConfig{})
	t.Cleanup(func() { store.Close() })
	if err := store.Prepare(ctx); err != nil { // this version's library, as serve loads it
		t.Fatal(err)
	}
	const old = "guard_00000000000000bb"
	if err := c.FunctionLoad(ctx, "#!lua name="+old+"\nredis.register_function('"+old+"', function() return 1 end)").Err(); err != nil {
		t.Fatal(err)
	}
	loaded := func(name string) bool {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(libs) == 1
	}
	env := envMap(map[string]string{"GUARD_REDIS_URL": srv.URL()})
	prune := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(ctx, append([]string{"guard", "redis", "prune"}, args...), env, &stdout, &stderr); err != nil {
			t.Fatalf("guard redis prune %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String()
	}
	current := limits.FunctionLibrary()
	out := prune("--dry-run")
	for _, want := range []string{old + "  would be deleted (--dry-run)", current + "  kept: this version"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run printed:\n%s\nwant a line with %q", out, want)
		}
	}
	if !loaded(old) {
		t.Fatalf("the dry run deleted %s", old)
	}
	out = prune()
	for _, want := range []string{old + "  deleted", current + "  kept: this version"} {
		if !strings.Contains(out, want) {
			t.Errorf("prune printed:\n%s\nwant a line with %q", out, want)
		}
	}
	if loaded(old) || !loaded(current) {
		t.Errorf("after prune: %s loaded %v, %s loaded %v; want only this version's", old, loaded(old), current, loaded(current))
	}
	if err := c.FunctionDelete(ctx, current).Err(); err != nil {
		t.Fatal(err)
	}
	if out := prune(); !strings.Contains(out, "no Guard function library") {
		t.Errorf("prune of a Redis without Guard libraries printed:\n%s", out)
	}
}

// Against a Redis that does not answer, prune fails with the reason, and
// prints neither an empty table nor go-redis's own log lines.
func TestRedisPruneUnreachable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	env := envMap(map[string]string{"GUARD_REDIS_URL": "redis://127.0.0.1:1/0"})
	err := run(context.Background(), []string{"guard", "redis", "prune", "--timeout", "1s"}, env, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("prune against a closed port = %v; want the connection's error", err)
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("prune printed %q on stdout and %q on stderr; want only its error", stdout.String(), stderr.String())
	}
}
