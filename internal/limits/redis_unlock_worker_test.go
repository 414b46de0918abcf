package limits_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// slowUnlock holds every unlock call (an FCALL whose spec starts
// "unlock") for delay before the real server gets it, and says when one
// began.
type slowUnlock struct {
	delay time.Duration
	began chan struct{}
}

func (h *slowUnlock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowUnlock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "unlock") {
				close(h.began)
				time.Sleep(h.delay)
				break
			}
		}
		return next(ctx, cmd)
	}
}

func (h *slowUnlock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestUnlockLeavesBatcherWorkersFree: an unlock runs on its caller's
// goroutine, not on a batcher worker, so an unlock that Redis is slow to
// answer (it may wait up to the 2 s admin timeout) does not hold up
// decisions, even with a single worker.
func TestUnlockLeavesBatcherWorkersFree(t *testing.T) {
	url, prefix := testenv.Redis(t)
	hook := &slowUnlock{delay: 1500 * time.Millisecond, began: make(chan struct{})}
	client := testenv.RedisClient(t, url)
	client.AddHook(hook)
	s := limits.NewRedis(client, limits.RedisStoreConfig{Workers: 1})
	defer s.Close()
	ctx := context.Background()

	done := make(chan error, 1)
	go func() {
		_, err := s.Unlock(ctx, &limits.UnlockRequest{Locks: []string{prefix + "lock"}})
		done <- err
	}()
	<-hook.began
	start := time.Now()
	for i := range 3 {
		rule := limits.Rule{Key: fmt.Sprintf("%slog:%d", prefix, i), Limit: 5, Window: time.Minute}
		if _, err := s.Check(ctx, &limits.CheckRequest{Rules: []limits.Rule{rule}, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > hook.delay/2 {
		t.Errorf("3 checks during a slow unlock took %v; want them not to wait for it (%v)", took, hook.delay)
	}
	if err := <-done; err != nil {
		t.Errorf("unlock: %v", err)
	}
}
