package limits

import (
	"context"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisFollowUpsKeepTheBudget: the writes that follow a decision's
// answer (Cluster: lockout index entries in other slots, the rollback and
// the denial's failure) run without the caller's cancel but no longer
// than the decision itself could: on the client cmd/guard builds
// (NewRedisClient) the socket timeouts are the admin timeout's, so a
// follow-up bounded by followUpTimeout alone held a decision against a
// hung Redis five budgets past its answer, where the budget's socket
// timeouts had cut it at one.
func TestRedisFollowUpsKeepTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses a private redis-server; skipped with -short")
	}
	srv := testenv.PrivateRedis(t)
	const budget = 50 * time.Millisecond
	client, err := NewRedisClient(RedisConfig{URL: srv.URL()}, budget)
	if err != nil {
		t.Fatal(err)
	}
	s := NewRedis(client, RedisStoreConfig{})
	defer s.Close()
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries := []strikeIndex{{index: "guardfollowup:idx", lock: LockState{Key: "guardfollowup:lock", Until: time.Now().Add(time.Minute)}}}
	srv.Pause()
	defer srv.Resume()

	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	s.writeIndexes(ctx, followUpAllowance(ctx), entries)
	if took := time.Since(start); took > 3*budget {
		t.Errorf("index write against a hung Redis took %v after a decision of budget %v; want at most about the budget", took, budget)
	}

	ctx, cancel = context.WithTimeout(context.Background(), budget)
	defer cancel()
	allow := followUpAllowance(ctx)
	start = time.Now()
	fctx, fcancel := followUp(ctx, allow)
	defer fcancel()
	call := &pending{keys: []string{"guardfollowup:k"}, args: pingArgs}
	if err := s.batch.run(fctx, []*pending{call}); err == nil && call.err == nil {
		t.Errorf("a call to a hung Redis answered")
	}
	if took := time.Since(start); took > 3*budget {
		t.Errorf("follow-up call against a hung Redis took %v after a decision of budget %v; want at most about the budget", took, budget)
	}
}
