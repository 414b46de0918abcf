package limits

import (
	"context"
	"fmt"
)

// Check decides one attempt as the package documentation specifies, in one
// critical section over every shard the request touches. ctx is not
// consulted: the memory store never waits on I/O. It returns an error for
// an invalid request (see CheckRequest's field docs) or after Close.
func (s *MemoryStore) Check(ctx context.Context, req *CheckRequest) (CheckResult, error) {
	if err := s.open(); err != nil {
		return CheckResult{}, err
	}
	if err := validateCheck(req); err != nil {
		return CheckResult{}, fmt.Errorf("memory check: %w", err)
	}
	esc := req.DenialFailures
	if req.DryRun {
		esc = nil // a dry run writes nothing, not even a failure
	}

	var buf [16]int
	set := buf[:0]
	for i := range req.Rules {
		set = s.withShard(set, req.Rules[i].Key)
	}
	set = s.addLockShards(set, req.Locks, req.TrustKey)
	if esc != nil {
		set = s.addEscalationShards(set, esc)
	}
	rsv := req.Reserve
	if req.DryRun {
		rsv = nil
	}
	if rsv != nil {
		set = s.addReserveShards(set, rsv)
	}
	set = s.lockShards(set)
	defer s.unlockShards(set)

	now := s.nowMs()
	res := CheckResult{Now: memTime(now), Allowed: true, Rules: make([]RuleResult, len(req.Rules))}
	res.Locked = s.activeLock(req.Locks, req.TrustKey, now)

	// Pass 1: trim and count every rule; decide. hard: an enforced rule
	// that does not challenge denies.
	hard := false
	for i := range req.Rules {
		r := &req.Rules[i]
		if !r.isLog() {
			fits := s.otherResult(r, req.Cost, false, now).Allowed
			res.Rules[i].Allowed = fits
			if !fits && !r.Shadow {
				res.Allowed = false
				hard = hard || !r.Challenge
			}
			continue
		}
		w := memMs(r.Window)
		_, count := s.liveLog(r.Key, now, keepMs(r.Keep, r.Window)).span(now, w)
		rr := &res.Rules[i]
		rr.Allowed = count+req.Cost <= r.Limit || r.Passed
		rr.Count = count
		if !rr.Allowed && !r.Shadow {
			res.Allowed = false
			hard = hard || !r.Challenge
		}
	}
	record := res.Allowed && res.Locked == nil
	res.Challenge = !res.Allowed && res.Locked == nil && !hard
	if res.Locked != nil {
		res.Allowed = false
	}

	// Pass 2: fill in what remains, each rule from its log as pass 1 left
	// it, then log (unless a dry run). Rules that name one log share it:
	// the attempt adds Cost entries to it once, as Redis does.
	for i := range req.Rules {
		r := &req.Rules[i]
		rr := &res.Rules[i]
		if !r.isLog() {
			*rr = s.otherResult(r, req.Cost, record, now)
			continue
		}
		w := memMs(r.Window)
		l := s.shard(r.Key).logs[r.Key]
		from, count := l.span(now, w)
		logs := record && rr.Allowed
		switch {
		case logs:
			// Recorded, or as if recorded for a dry run.
			rr.Count += req.Cost
			oldest := now
			if count > 0 {
				oldest = min(l.entries[from].ts, now)
			}
			rr.Reset = memDur(oldest + w - now)
		case count > 0:
			rr.Reset = memDur(l.entries[from].ts + w - now)
		}
		rr.Remaining = max(r.Limit-rr.Count, 0)
		if !rr.Allowed {
			rr.RetryAfter = memDur(l.retryAfter(now, w, r.Limit, req.Cost))
		}
	}
	if record && !req.DryRun {
		for i := range req.Rules {
			r := &req.Rules[i]
			if !res.Rules[i].Allowed {
				continue
			}
			if !r.isLog() {
				s.otherRecord(r, req.Cost, now)
				continue
			}
			keep := keepMs(r.Keep, r.Window)
			sh := s.shard(r.Key)
			l := sh.logs[r.Key]
			switch {
			case l == nil:
				l = &memLog{}
				sh.logs[r.Key] = l
			case memLoggedBefore(req.Rules[:i], res.Rules[:i], r.Key):
				// Logged already; keep it for this rule's window too.
				l.expires = max(l.expires, now+keep)
				continue
			}
			l.add(now, keep, req.Cost)
			if r.Passed {
				l.keepNewest(max(r.Limit+req.Cost, PassedKeep))
			}
		}
	}

	if !res.Allowed && res.Locked == nil && esc != nil && !res.Challenge {
		res.Struck = s.recordFailure(esc, now, nil)
	}
	if record && rsv != nil {
		res.Struck = s.reserve(rsv, now, res.Struck)
	}
	if len(res.Struck) > 0 && req.TrustKey != "" {
		res.Trusted = s.trusted(req.TrustKey, now)
	}
	return res, nil
}

// memLoggedBefore reports whether one of rules, answered by results, has
// already logged this attempt in key.
func memLoggedBefore(rules []Rule, results []RuleResult, key string) bool {
	for i := range rules {
		if rules[i].Key == key && results[i].Allowed {
			return true
		}
	}
	return false
}

// liveLog returns key's log trimmed to keep (ms, the longest window any
// rule counts it with) at now, or nil when it holds no entry (an empty log
// is dropped on the spot).
func (s *MemoryStore) liveLog(key string, now, keep int64) *memLog {
	sh := s.shard(key)
	l := sh.logs[key]
	if l == nil {
		return nil
	}
	l.trim(now, keep)
	if l.count == 0 {
		delete(sh.logs, key)
		return nil
	}
	return l
}
