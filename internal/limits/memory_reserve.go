package limits

// memRecord is a reservation record of the memory store (see Reservation).
type memRecord struct {
	// held maps each failure log that got a provisional entry to its
	// stamp (0: it struck, nothing to take back); nil once settled.
	held    map[string]int64
	settled bool
	expires int64 // unix ms
}

// heldLogs is the record's provisional entries, nil for no record.
func (r *memRecord) heldLogs() map[string]int64 {
	if r == nil {
		return nil
	}
	return r.held
}

// addReserveShards adds the shards of a reservation's logs, locks and
// records.
func (s *MemoryStore) addReserveShards(set []int, rsv *Reservation) []int {
	set = s.addEscalationShards(set, &rsv.Escalation)
	for _, k := range rsv.Records {
		set = s.withShard(set, k)
	}
	return set
}

// reserve records one provisional failure in every failure log of rsv and
// remembers the entries under its first record (one process: one slot),
// appending strikes to struck. The caller holds every shard involved.
func (s *MemoryStore) reserve(rsv *Reservation, now int64, struck []LockState) []LockState {
	esc := &rsv.Escalation
	if len(esc.Failures) == 0 || len(rsv.Records) == 0 {
		return struck
	}
	rec := &memRecord{held: make(map[string]int64, len(esc.Failures)), expires: now + memMs(rsv.TTL)}
	for i := range esc.Failures {
		f := &esc.Failures[i]
		if f.Distinct != "" {
			// Guard gives a reservation no distinct rules (abuse's
			// reservable, docs/api.md point 27); one given anyway counts
			// as a reported failure: the set takes the value and keeps
			// it, and a later failure refreshes it (as redis.lua's fail).
			if s.failDistinct(f, now) {
				struck = append(struck, s.strike(esc, f, now))
			}
			continue
		}
		ts, st := s.failOne(esc, f, now)
		if st != nil {
			struck = append(struck, *st)
		}
		rec.held[f.Key] = ts
	}
	s.shard(rsv.Records[0]).records[rsv.Records[0]] = rec
	return struck
}

// settle finds the reservation record a report names (nil: none, the
// report behaves as without one) and, for a success on a pending record,
// takes its provisional entries back. The caller marks it settled after
// the report. The caller holds every shard involved.
func (s *MemoryStore) settle(req *ReportRequest, now int64) *memRecord {
	if len(req.Records) == 0 {
		return nil
	}
	k := req.Records[0]
	sh := s.shard(k)
	rec := sh.records[k]
	if rec != nil && rec.expires <= now {
		delete(sh.records, k)
		return nil
	}
	if rec == nil || rec.settled || req.Failure {
		return rec
	}
	for i := range req.Escalation.Failures {
		f := &req.Escalation.Failures[i]
		ts, ok := rec.held[f.Key]
		if !ok || ts == 0 {
			continue
		}
		if l := s.liveLog(f.Key, now, memMs(f.Window)); l != nil {
			l.remove(ts)
			if l.count == 0 {
				delete(s.shard(f.Key).logs, f.Key)
			}
		}
	}
	return rec
}
