package limits

// memRecord is a reservation record of the memory store (see Reservation).
type memRecord struct {
	// held maps each failure log that got a provisional entry to its
	// stamp (0: it struck, nothing to take back); nil once settled.
	held map[string]int64
	// pend maps each distinct rule's pending set that got a holder to the
	// hold (value "": it struck); nil once settled.
	pend    map[string]memHold
	settled bool
	expires int64 // unix ms
}

// memHold is a reservation's hold in a pending set: the value and the
// token of the record it went to.
type memHold struct {
	v, tok string
}

// holds reports whether the record (nil: none) holds a provisional
// failure of f, which a settling failure then does not record again.
func (r *memRecord) holds(f *FailureRule) bool {
	if r == nil {
		return false
	}
	if f.Distinct != "" {
		_, ok := r.pend[f.Pending]
		return ok && f.Pending != ""
	}
	_, ok := r.held[f.Key]
	return ok
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
			// A distinct rule holds the value in its pending set; one
			// without a pending set takes it as a reported failure (as
			// redis.lua's fail).
			switch {
			case f.Pending == "":
				if s.failDistinct(f, now) {
					struck = append(struck, s.strike(esc, f, now))
				}
			default:
				if hit, tok := s.reserveDistinct(f, rsv.Records[0], now); hit {
					struck = append(struck, s.strike(esc, f, now))
					rec.pendFor(f.Pending, memHold{})
				} else {
					rec.pendFor(f.Pending, memHold{v: f.Distinct, tok: tok})
				}
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

func (r *memRecord) pendFor(key string, h memHold) {
	if r.pend == nil {
		r.pend = map[string]memHold{}
	}
	r.pend[key] = h
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
		if f.Distinct != "" {
			if h := rec.pend[f.Pending]; h.v != "" && f.Pending != "" {
				s.unhold(f.Pending, h.v, h.tok, now)
			}
			continue
		}
		ts, ok := rec.held[f.Key]
		if !ok || ts == 0 {
			continue
		}
		if l := s.liveLog(f.Key, now, keepMs(f.Keep, f.Window)); l != nil {
			l.remove(ts)
			if l.count == 0 {
				delete(s.shard(f.Key).logs, f.Key)
			}
		}
	}
	return rec
}
