package limits

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLockSource sets manual lockouts; see its header for KEYS, ARGV and
// the reply.
//
//go:embed redis_lock.lua
var redisLockSource string

var redisLockScript = redis.NewScript(redisLockSource)

// Lock sets manual lock records in one round trip; see LockRequest. A lock
// without a StrikeKey reads a key that never exists (its own key with a
// suffix), so the script's KEYS stay regular.
func (s *RedisStore) Lock(ctx context.Context, req *LockRequest) ([]LockState, error) {
	if err := validateLock(req); err != nil {
		return nil, err
	}
	n := len(req.Locks)
	keys := make([]string, 0, 2*n+1)
	args := make([]any, 0, 2+n)
	args = append(args, n, req.Duration.Milliseconds())
	for _, l := range req.Locks {
		keys = append(keys, l.Key)
		args = append(args, l.Info)
	}
	for _, l := range req.Locks {
		sk := l.StrikeKey
		if sk == "" {
			sk = l.Key + ":none"
		}
		keys = append(keys, sk)
	}
	keys = append(keys, s.index)
	v, err := redisLockScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, redisError("eval lock script", err)
	}
	if len(v) != 1+2*n {
		return nil, fmt.Errorf("read lock reply: %d values, want %d", len(v), 1+2*n)
	}
	now := time.UnixMilli(v[0])
	out := make([]LockState, n)
	for i, l := range req.Locks {
		out[i] = LockState{Key: l.Key, Level: int(v[1+2*i]), Since: now, Until: time.UnixMilli(v[2+2*i]), Info: l.Info}
	}
	return out, nil
}
