package limits

import (
	"fmt"
	"time"
)

// redisReply is the decoded check/report reply of redis.lua.
type redisReply struct {
	now     int64
	allowed bool
	// lockIdx is the 1-based index of the active lock in the request's
	// Locks, 0 when none; lock holds its state without the key.
	lockIdx int
	lock    LockState
	rules   []RuleResult
	struck  []redisStrike
}

type redisStrike struct {
	failure          int // 1-based index into the escalation's Failures
	level            int
	sinceMs, untilMs int64
}

// redisReplyReader walks the flat reply array.
type redisReplyReader struct {
	v   []any
	i   int
	err error
}

func (r *redisReplyReader) int() int64 {
	if r.err != nil {
		return 0
	}
	if r.i >= len(r.v) {
		r.err = fmt.Errorf("reply ends at value %d", r.i)
		return 0
	}
	n, ok := r.v[r.i].(int64)
	if !ok {
		r.err = fmt.Errorf("reply value %d is %T, want integer", r.i, r.v[r.i])
	}
	r.i++
	return n
}

func (r *redisReplyReader) str() string {
	if r.err != nil {
		return ""
	}
	if r.i >= len(r.v) {
		r.err = fmt.Errorf("reply ends at value %d", r.i)
		return ""
	}
	s, ok := r.v[r.i].(string)
	if !ok {
		r.err = fmt.Errorf("reply value %d is %T, want string", r.i, r.v[r.i])
	}
	r.i++
	return s
}

// parseRedisReply decodes a check/report reply for a request of nRules
// rules.
func parseRedisReply(v []any, nRules int) (redisReply, error) {
	r := &redisReplyReader{v: v}
	var out redisReply
	out.now = r.int()
	out.allowed = r.int() == 1
	out.lockIdx = int(r.int())
	out.lock.Level = int(r.int())
	out.lock.Since = time.UnixMilli(r.int())
	out.lock.Until = time.UnixMilli(r.int())
	out.lock.Info = r.str()
	if n := int(r.int()); r.err == nil && n != nRules {
		return out, fmt.Errorf("reply has %d rules, want %d", n, nRules)
	}
	if nRules > 0 {
		out.rules = make([]RuleResult, nRules)
	}
	for i := range out.rules {
		out.rules[i] = RuleResult{
			Allowed:    r.int() == 1,
			Count:      int(r.int()),
			Remaining:  int(r.int()),
			Reset:      time.Duration(r.int()) * time.Millisecond,
			RetryAfter: time.Duration(r.int()) * time.Millisecond,
		}
	}
	n := int(r.int())
	for i := 0; i < n && r.err == nil; i++ {
		out.struck = append(out.struck, redisStrike{
			failure: int(r.int()),
			level:   int(r.int()),
			sinceMs: r.int(),
			untilMs: r.int(),
		})
	}
	if r.err == nil && r.i != len(v) {
		return out, fmt.Errorf("reply has %d values, read %d", len(v), r.i)
	}
	return out, r.err
}

// locked returns the active lock as a LockState of locks, or nil.
func (r *redisReply) locked(locks []LockRef) *LockState {
	if r.lockIdx < 1 || r.lockIdx > len(locks) {
		return nil
	}
	st := r.lock
	st.Key = locks[r.lockIdx-1].Key
	return &st
}

// struckStates returns the strikes as LockStates of failures.
func (r *redisReply) struckStates(failures []FailureRule) []LockState {
	var out []LockState
	for _, s := range r.struck {
		if s.failure < 1 || s.failure > len(failures) {
			continue
		}
		f := failures[s.failure-1]
		out = append(out, LockState{
			Key:   f.LockKey,
			Level: s.level,
			Since: time.UnixMilli(s.sinceMs),
			Until: time.UnixMilli(s.untilMs),
			Info:  f.Info,
		})
	}
	return out
}
