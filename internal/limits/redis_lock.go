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

// Lock sets manual lock records, one script run per slot (one on a single
// Redis), then adds them to their lockout indexes; see LockRequest. A lock
// without a StrikeKey reads a key that never exists (its own key with a
// suffix), so the script's KEYS stay regular. An index entry that fails to
// be written only hides the lock from listings by that identity; the lock
// itself holds.
func (s *RedisStore) Lock(ctx context.Context, req *LockRequest) ([]LockState, error) {
	if err := validateLock(req); err != nil {
		return nil, err
	}
	bySlot := map[int][]int{}
	var order []int
	for i, l := range req.Locks {
		sl := s.slot(l.Key)
		if l.StrikeKey != "" && s.slot(l.StrikeKey) != sl {
			return nil, fmt.Errorf("lock %d: the strike record is in another slot than the manual one", i)
		}
		if bySlot[sl] == nil {
			order = append(order, sl)
		}
		bySlot[sl] = append(bySlot[sl], i)
	}
	out := make([]LockState, len(req.Locks))
	var idx []strikeIndex
	for _, sl := range order {
		locks := bySlot[sl]
		keys := make([]string, 0, 2*len(locks))
		args := []any{len(locks), req.Duration.Milliseconds()}
		for _, i := range locks {
			l := req.Locks[i]
			sk := l.StrikeKey
			if sk == "" {
				sk = l.Key + ":none"
			}
			keys = append(keys, l.Key, sk)
			args = append(args, l.Info)
		}
		v, err := s.runLock(ctx, keys, args)
		if err != nil {
			return nil, redisError("eval lock script", err)
		}
		if len(v) != 1+2*len(locks) {
			return nil, fmt.Errorf("read lock reply: %d values, want %d", len(v), 1+2*len(locks))
		}
		now := time.UnixMilli(v[0])
		for j, i := range locks {
			l := req.Locks[i]
			out[i] = LockState{Key: l.Key, Level: int(v[1+2*j]), Since: now, Until: time.UnixMilli(v[2+2*j]), Info: l.Info}
			// The index holds the manual record's own end: that is when
			// the record vanishes.
			own := LockState{Key: l.Key, Until: now.Add(req.Duration)}
			for _, x := range l.Indexes {
				idx = append(idx, strikeIndex{index: x, lock: own})
			}
		}
	}
	if len(idx) > 0 {
		s.writeIndexes(ctx, followUpAllowance(ctx), idx)
	}
	return out, nil
}

// runLock runs the lock script with the call's deadline on Redis's clock
// as its last argument ("Late calls" in redis_late.go), once more when
// Redis refused it as LATE while ctx still runs, as the batcher does.
func (s *RedisStore) runLock(ctx context.Context, keys []string, args []any) ([]int64, error) {
	args = append(args, nil)
	for try := 0; ; try++ {
		args[len(args)-1] = s.clock.deadline(ctx)
		sent := time.Now()
		v, err := redisLockScript.Run(ctx, s.client, keys, args...).Int64Slice()
		if len(v) > 0 {
			s.clock.observe(ctx, sent, []any{v[0]}, nil)
		} else {
			s.clock.observe(ctx, sent, nil, err)
		}
		if try > 0 || !isLate(err) || ctx.Err() != nil {
			return v, err
		}
	}
}
