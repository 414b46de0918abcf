package limits

import (
	"context"
	"fmt"
)

// Lock sets manual lock records as LockRequest documents, in one critical
// section over every shard the request touches. ctx is not consulted; it
// fails for an invalid request and after Close.
func (s *MemoryStore) Lock(ctx context.Context, req *LockRequest) ([]LockState, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if err := validateLock(req); err != nil {
		return nil, fmt.Errorf("memory %w", err)
	}
	var buf [16]int
	set := buf[:0]
	for _, l := range req.Locks {
		set = s.withShard(set, l.Key)
		if l.StrikeKey != "" {
			set = s.withShard(set, l.StrikeKey)
		}
	}
	set = s.lockShards(set)
	defer s.unlockShards(set)

	now := s.nowMs()
	until := now + memMs(req.Duration)
	out := make([]LockState, 0, len(req.Locks))
	for _, l := range req.Locks {
		st := LockState{Key: l.Key, Since: memTime(now), Until: memTime(until), Info: l.Info}
		if l.StrikeKey != "" {
			if rec := s.lockRecord(l.StrikeKey, now); rec != nil {
				st.Level = rec.level
				if rec.until > until {
					st.Until = memTime(rec.until)
				}
			}
		}
		s.shard(l.Key).locks[l.Key] = &memLock{since: now, until: until, expires: until, info: l.Info, indexes: l.Indexes}
		out = append(out, st)
	}
	return out, nil
}
