package limits

import (
	"context"
	"fmt"
	"slices"
)

// memLock is a lock record. All times are unix ms.
type memLock struct {
	level      int
	since      int64
	until      int64
	lastStrike int64
	expires    int64 // max(until, lastStrike+decay): the record vanishes then
	info       string
	indexes    []string // the lockout indexes of the last strike
}

func (m *memLock) state(key string) LockState {
	return LockState{
		Key:   key,
		Level: m.level,
		Since: memTime(m.since),
		Until: memTime(m.until),
		Info:  m.info,
	}
}

// Report records a failure or a success as the package documentation
// specifies, in one critical section over every shard the request touches.
// ctx is not consulted. It returns an error for an invalid request or after
// Close.
func (s *MemoryStore) Report(ctx context.Context, req *ReportRequest) (ReportResult, error) {
	if err := s.open(); err != nil {
		return ReportResult{}, err
	}
	if err := validateReport(req); err != nil {
		return ReportResult{}, fmt.Errorf("memory report: %w", err)
	}
	var buf [16]int
	set := buf[:0]
	set = s.addLockShards(set, req.Locks, req.TrustKey)
	if req.Failure || len(req.Records) > 0 {
		set = s.addEscalationShards(set, &req.Escalation)
	}
	if !req.Failure {
		for _, k := range req.Clear {
			set = s.withShard(set, k)
		}
	}
	for _, k := range req.Records {
		set = s.withShard(set, k)
	}
	set = s.lockShards(set)
	defer s.unlockShards(set)

	now := s.nowMs()
	res := ReportResult{Now: memTime(now)}
	rec := s.settle(req, now)
	switch {
	case rec != nil && rec.settled:
		// Settled before: this report changes nothing.
	case req.Failure:
		res.Struck = s.recordFailure(&req.Escalation, now, rec)
		s.manualEnds(res.Struck, req.Locks, now)
	default:
		for _, k := range req.Clear {
			delete(s.shard(k).logs, k)
			delete(s.shard(k).others, k)
		}
		if req.TrustKey != "" && req.TrustTTL > 0 {
			s.shard(req.TrustKey).trust[req.TrustKey] = now + memMs(req.TrustTTL)
		}
	}
	if rec != nil {
		rec.settled, rec.held, rec.pend = true, nil, nil
	}
	res.Locked = s.activeLock(req.Locks, req.TrustKey, now)
	return res, nil
}

// Unlock deletes the named lock records and failure logs in one critical
// section and reports whether any of the locks was active. ctx is not
// consulted; it fails for a nil request or an empty key (as Redis does) and
// after Close.
func (s *MemoryStore) Unlock(ctx context.Context, req *UnlockRequest) (bool, error) {
	if err := s.open(); err != nil {
		return false, err
	}
	if err := validateUnlock(req); err != nil {
		return false, fmt.Errorf("memory unlock: %w", err)
	}
	var buf [16]int
	set := buf[:0]
	for _, k := range req.Locks {
		set = s.withShard(set, k)
	}
	for _, k := range req.Failures {
		set = s.withShard(set, k)
	}
	set = s.lockShards(set)
	defer s.unlockShards(set)

	now := s.nowMs()
	active := false
	for _, k := range req.Locks {
		if rec := s.lockRecord(k, now); rec != nil {
			active = active || rec.until > now
			delete(s.shard(k).locks, k)
		}
	}
	for _, k := range req.Failures {
		delete(s.shard(k).logs, k)
		delete(s.shard(k).others, k)
	}
	return active, nil
}

// Lockouts lists a page of active lockouts (see LockQuery), ending last
// first. Each record is read atomically; the list is not one snapshot
// across shards. ctx is not consulted; it fails for an invalid query and
// after Close.
func (s *MemoryStore) Lockouts(ctx context.Context, q *LockQuery) (LockPage, error) {
	if err := validateLockQuery(q); err != nil {
		return LockPage{}, fmt.Errorf("lockouts: %w", err)
	}
	if err := s.open(); err != nil {
		return LockPage{}, err
	}
	var out []LockState
	now := s.nowMs()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now = s.nowMs()
		for k, rec := range sh.locks {
			switch {
			case rec.expires <= now:
				delete(sh.locks, k)
			case rec.until <= now:
			case q.Index != "" && slices.Contains(rec.indexes, q.Index),
				q.Index == "" && matchPattern(q.Pattern, k):
				out = append(out, rec.state(k))
			}
		}
		sh.mu.Unlock()
	}
	page, err := pageLocks(out, now, q)
	if err != nil || q.Partner == nil {
		return page, err
	}
	// A manual record answers its strike record's level (LockQuery.Partner).
	for i := range page.Locks {
		k := q.Partner(page.Locks[i].Key)
		if k == "" {
			continue
		}
		sh := s.shard(k)
		sh.mu.Lock()
		if rec, ok := sh.locks[k]; ok && rec.expires > now {
			page.Locks[i].Level = rec.state(k).Level
		}
		sh.mu.Unlock()
	}
	return page, nil
}

// recordFailure logs one failure in each of esc's failure logs and sets
// but those rec holds (a reservation's, which hold it already; rec may be
// nil) and strikes the lock of every one that fills, returning the
// strikes. The caller holds the shards of every failure and lock key.
func (s *MemoryStore) recordFailure(esc *Escalation, now int64, rec *memRecord) []LockState {
	var struck []LockState
	for i := range esc.Failures {
		f := &esc.Failures[i]
		if rec.holds(f) {
			continue
		}
		if f.Distinct != "" {
			if s.failDistinct(f, now) {
				struck = append(struck, s.strike(esc, f, now))
			}
			continue
		}
		if _, st := s.failOne(esc, f, now); st != nil {
			struck = append(struck, *st)
		}
	}
	return struck
}

// failOne logs one failure in f's log and returns the entry's stamp, or
// 0 and the strike when the log filled (a strike empties it).
func (s *MemoryStore) failOne(esc *Escalation, f *FailureRule, now int64) (int64, *LockState) {
	keep := keepMs(f.Keep, f.Window)
	sh := s.shard(f.Key)
	l := sh.logs[f.Key]
	if l == nil {
		l = &memLog{}
		sh.logs[f.Key] = l
	}
	l.trim(now, keep)
	ts := l.add(now, keep, 1)
	if _, count := l.span(now, memMs(f.Window)); count < f.Limit {
		return ts, nil
	}
	delete(sh.logs, f.Key)
	st := s.strike(esc, f, now)
	return 0, &st
}

// strike raises f's lock by one level and restarts its lockout at now. A
// strike at or past its ladder's top (on a ledger whose actions have
// ladders of different lengths, through the shorter one) never lowers the
// level nor ends a running lockout earlier: its step is its ladder's last,
// the lock the later.
func (s *MemoryStore) strike(esc *Escalation, f *FailureRule, now int64) LockState {
	decay := memMs(esc.Decay)
	rec := s.lockRecord(f.LockKey, now)
	level, running := 0, int64(0)
	if rec != nil && now-rec.lastStrike < decay {
		level, running = rec.level, rec.until
	}
	if rec == nil {
		rec = &memLock{}
		s.shard(f.LockKey).locks[f.LockKey] = rec
	}
	capped := level >= len(esc.Ladder)
	level = max(min(level+1, len(esc.Ladder)), level)
	until := now + memMs(esc.Ladder[min(level, len(esc.Ladder))-1])
	if capped {
		until = max(until, running)
	}
	*rec = memLock{
		level:      level,
		since:      now,
		until:      until,
		lastStrike: now,
		expires:    max(until, now+decay),
		info:       f.Info,
		indexes:    f.Indexes,
	}
	st := rec.state(f.LockKey)
	st.Rule = f.Name
	return st
}

// lockRecord returns key's lock record if it still exists at now, dropping
// it when it has expired.
func (s *MemoryStore) lockRecord(key string, now int64) *memLock {
	sh := s.shard(key)
	rec := sh.locks[key]
	if rec != nil && rec.expires <= now {
		delete(sh.locks, key)
		return nil
	}
	return rec
}

// trusted reports whether the trust record key exists at now.
func (s *MemoryStore) trusted(key string, now int64) bool {
	sh := s.shard(key)
	exp, ok := sh.trust[key]
	if ok && exp <= now {
		delete(sh.trust, key)
		return false
	}
	return ok
}

// manualEnds moves the end of each lock in struck to that of an active
// manual lockout of the same key when it ends later (the manual record
// follows its key's struck record in refs, LockRef.SharesLevel): a strike
// during a manual lockout leaves the key locked until the later of the
// two ends, and answers that.
func (s *MemoryStore) manualEnds(struck []LockState, refs []LockRef, now int64) {
	for i := range struck {
		for j := 0; j+1 < len(refs); j++ {
			if refs[j].Key != struck[i].Key || !refs[j+1].SharesLevel {
				continue
			}
			if m := s.lockRecord(refs[j+1].Key, now); m != nil && m.until > struck[i].Until.UnixMilli() {
				struck[i].Until = memTime(m.until)
			}
			break
		}
	}
}

// activeLock returns the active lockout among refs that ends last, honouring
// SpareIfTrusted, or nil.
func (s *MemoryStore) activeLock(refs []LockRef, trustKey string, now int64) *LockState {
	if len(refs) == 0 {
		return nil
	}
	trusted := trustKey != "" && s.trusted(trustKey, now)
	var best *memLock
	bi := -1
	for i, ref := range refs {
		if ref.SpareIfTrusted && trusted {
			continue
		}
		rec := s.lockRecord(ref.Key, now)
		if rec == nil || rec.until <= now {
			continue
		}
		if best == nil || rec.until > best.until {
			best, bi = rec, i
		}
	}
	if best == nil {
		return nil
	}
	st := best.state(refs[bi].Key)
	// A manual lockout answers its key's level (LockRef.SharesLevel).
	if refs[bi].SharesLevel && bi > 0 {
		if prev := s.lockRecord(refs[bi-1].Key, now); prev != nil && prev.level > st.Level {
			st.Level = prev.level
		}
	}
	return &st
}

// addLockShards adds the shards of lock references and the trust record.
func (s *MemoryStore) addLockShards(set []int, refs []LockRef, trustKey string) []int {
	for _, ref := range refs {
		set = s.withShard(set, ref.Key)
	}
	if trustKey != "" {
		set = s.withShard(set, trustKey)
	}
	return set
}

// addEscalationShards adds the shards of esc's failure logs and locks.
func (s *MemoryStore) addEscalationShards(set []int, esc *Escalation) []int {
	for i := range esc.Failures {
		set = s.withShard(set, esc.Failures[i].Key)
		set = s.withShard(set, esc.Failures[i].LockKey)
		if k := esc.Failures[i].Pending; k != "" {
			set = s.withShard(set, k)
		}
	}
	return set
}
