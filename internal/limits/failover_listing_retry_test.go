package limits_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// dropFirst fails the first n commands named name as a connection the
// server closed under them would (net.ErrClosed), then lets every command
// through to the real server; seen counts the commands named name.
type dropFirst struct {
	name string
	n    atomic.Int64
	seen atomic.Int64
}

func (h *dropFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *dropFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != h.name {
			return next(ctx, cmd)
		}
		if h.seen.Add(1); h.n.Add(-1) >= 0 {
			cmd.SetErr(net.ErrClosed)
			return net.ErrClosed
		}
		return next(ctx, cmd)
	}
}

func (h *dropFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFailoverListingRetriesOnce: a lockout listing whose connection the
// server closed (as in a Sentinel failover) is asked again, once, within
// its allowance, and answers; a primary that fails twice fails the
// listing (the breaker closed: never the fallback); neither moves the
// breaker.
func TestFailoverListingRetriesOnce(t *testing.T) {
	url, prefix := testenv.Redis(t)
	hook := &dropFirst{name: "time"}
	client := testenv.RedisClient(t, url)
	client.AddHook(hook)
	fo := limits.NewFailover(nil, limits.FailoverConfig{Budget: 50 * time.Millisecond, ProbeInterval: time.Hour},
		limits.NewRedis(client, limits.RedisStoreConfig{}), limits.NewMemory(limits.MemoryConfig{}), limits.FailoverEvents{})
	defer fo.Close()
	ctx := context.Background()
	if _, err := fo.Lock(ctx, &limits.LockRequest{Duration: time.Minute,
		Locks: []limits.ManualLock{{Key: prefix + "lock", Info: "x"}}}); err != nil {
		t.Fatal(err)
	}
	q := &limits.LockQuery{Pattern: prefix + "*", Limit: 10}

	hook.n.Store(1)
	page, err := fo.Lockouts(ctx, q)
	if err != nil || len(page.Locks) != 1 {
		t.Errorf("listing after one dropped connection: %d lockouts, %v; want 1 and no error", len(page.Locks), err)
	}
	hook.n.Store(2)
	if _, err := fo.Lockouts(ctx, q); !errors.Is(err, limits.ErrUnavailable) {
		t.Errorf("listing after two dropped connections: %v; want ErrUnavailable", err)
	}
	if hook.n.Load() > 0 {
		t.Errorf("%d dropped connections left; want the listing to have asked twice", hook.n.Load())
	}
	if fo.Degraded() {
		t.Errorf("Degraded() = true; listings never open the breaker")
	}
}

// TestFailoverListingRefusedOnce: a primary that refuses connections is
// asked once: a second attempt would only be refused again.
func TestFailoverListingRefusedOnce(t *testing.T) {
	dead := testenv.PrivateRedis(t)
	url := dead.URL()
	dead.Kill()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	client := redis.NewClient(opt)
	defer client.Close()
	hook := &dropFirst{name: "time"}
	client.AddHook(hook)
	fo := limits.NewFailover(nil, limits.FailoverConfig{Budget: 50 * time.Millisecond, ProbeInterval: time.Hour},
		limits.NewRedis(client, limits.RedisStoreConfig{}), limits.NewMemory(limits.MemoryConfig{}), limits.FailoverEvents{})
	defer fo.Close()
	_, err = fo.Lockouts(context.Background(), &limits.LockQuery{Pattern: "guardtest:*", Limit: 10})
	if !errors.Is(err, limits.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("listing on a refusing primary: %v; want ErrUnavailable and ECONNREFUSED", err)
	}
	if n := hook.seen.Load(); n != 1 {
		t.Errorf("the refusing primary was asked %d times; want 1", n)
	}
}
