package limits

import "time"

// sweepLoop runs sweep every interval until Close.
func (s *MemoryStore) sweepLoop(interval time.Duration) {
	defer s.swept.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every idle key: logs whose newest entry has left the longest
// window they were used with, lock records past max(until, last strike +
// decay), and expired trust records. Shards are swept one at a time so a
// sweep never stalls more than one shard's decisions.
func (s *MemoryStore) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.nowMs()
		for k, l := range sh.logs {
			if l.expires <= now || l.count == 0 {
				delete(sh.logs, k)
			}
		}
		for k, rec := range sh.locks {
			if rec.expires <= now {
				delete(sh.locks, k)
			}
		}
		for k, o := range sh.others {
			if o.expires <= now {
				delete(sh.others, k)
			}
		}
		for k, exp := range sh.trust {
			if exp <= now {
				delete(sh.trust, k)
			}
		}
		for k, rec := range sh.records {
			if rec.expires <= now {
				delete(sh.records, k)
			}
		}
		sh.mu.Unlock()
	}
}
