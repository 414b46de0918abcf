package limits

// The memory store's rule kinds of kinds.go: counters, buckets and
// distinct sets, kept in memShard.others apart from the logs.

// memOther is the state of one counter, bucket or distinct set; a key
// holds one kind only (the caller's key kinds keep them apart).
type memOther struct {
	// counter: the current sub-window's start and the two counts.
	start, cur, prev int64
	// bucket: tokens at the last spend, and its time (0: never).
	tokens float64
	last   int64
	// distinct set: members ascending by ts.
	set []memMember
	// expires is when the key vanishes (as its Redis PX would).
	expires int64
}

// memMember is one distinct value and when it was last seen (unix ms);
// in a pending set (FailureRule.Pending) also how many reservations hold
// it (at most pendMaxHolders, redis.lua's 2 bytes) and the token of the
// record: the reservation record key of the check whose hold made it (see
// redis.lua's pending sets).
type memMember struct {
	ts  int64
	v   string
	n   int
	tok string
}

// pendMaxHolders is the most holders a pending set counts per value.
const pendMaxHolders = 65535

// other returns key's live state, or nil (an expired one is dropped).
func (s *MemoryStore) other(key string, now int64) *memOther {
	sh := s.shard(key)
	o := sh.others[key]
	if o != nil && o.expires <= now {
		delete(sh.others, key)
		return nil
	}
	return o
}

// otherFor returns key's live state, creating it.
func (s *MemoryStore) otherFor(key string, now int64) *memOther {
	if o := s.other(key, now); o != nil {
		return o
	}
	o := &memOther{}
	s.shard(key).others[key] = o
	return o
}

// counterState is r's counter state rolled to now.
func (s *MemoryStore) counterState(r *Rule, now int64) (start, cur, prev int64) {
	w := memMs(r.Window)
	start = now - now%w
	if o := s.other(r.Key, now); o != nil {
		start, cur, prev = counterRoll(now, o.start, o.cur, o.prev, w)
	}
	return start, cur, prev
}

// distinctState is what r's set holds at now: the values in the window,
// whether r's value is one, the oldest stamp and the oldest stamp of the
// other values (0: none).
func (s *MemoryStore) distinctState(key, value string, w, now int64) (n int, present bool, oldest, other int64) {
	o := s.other(key, now)
	if o == nil {
		return 0, false, 0, 0
	}
	for _, m := range o.set {
		if m.ts <= now-w {
			continue
		}
		n++
		if oldest == 0 {
			oldest = m.ts
		}
		if m.v == value {
			present = true
		} else if other == 0 {
			other = m.ts
		}
	}
	return n, present, oldest, other
}

// otherResult answers rule r before recording; recorded says the whole
// decision is an allowed one (recorded, or as if for a dry run).
func (s *MemoryStore) otherResult(r *Rule, cost int, recorded bool, now int64) RuleResult {
	switch {
	case r.Distinct != "":
		n, present, oldest, other := s.distinctState(r.Key, r.Distinct, memMs(r.Window), now)
		return distinctResult(r, recorded, now, n, present, oldest, other)
	case r.Algorithm == AlgCounter:
		start, cur, prev := s.counterState(r, now)
		return counterResult(r, cost, recorded, now, start, cur, prev)
	}
	var tokens float64
	var last int64
	if o := s.other(r.Key, now); o != nil {
		tokens, last = o.tokens, o.last
	}
	return bucketResult(r, cost, recorded, now, tokens, last)
}

// otherRecord counts an allowed attempt in rule r, which admits it.
func (s *MemoryStore) otherRecord(r *Rule, cost int, now int64) {
	switch {
	case r.Distinct != "":
		s.see(r.Key, r.Distinct, memMs(r.Keep), memMs(r.Window), now)
		if r.Passed {
			o := s.shard(r.Key).others[r.Key]
			if extra := len(o.set) - distinctMost(r); extra > 0 {
				o.set = append(o.set[:0], o.set[extra:]...)
			}
		}
	case r.Algorithm == AlgCounter:
		start, cur, prev := s.counterState(r, now)
		o := s.otherFor(r.Key, now)
		o.start, o.cur, o.prev = start, counterAdd(cur, cost), prev
		o.expires = now + counterTTL(r.Keep, r.Window)
	default:
		w := memMs(r.Window)
		var tokens float64
		var last int64
		if o := s.other(r.Key, now); o != nil {
			tokens, last = o.tokens, o.last
		}
		level := bucketAt(now, tokens, last, r.Limit, w)
		o := s.otherFor(r.Key, now)
		o.tokens, o.last = bucketSpend(level, cost), now
		o.expires = now + keepMs(r.Keep, r.Window)
	}
}

// see adds or refreshes value in key's set, trimmed to keep (at least w).
// A clock that stepped back is clamped to the newest stamp, as in logs.
func (s *MemoryStore) see(key, value string, keep, w, now int64) {
	keep = max(keep, w)
	o := s.otherFor(key, now)
	at := now
	if n := len(o.set); n > 0 {
		at = max(now, o.set[n-1].ts)
	}
	kept := o.set[:0]
	for _, m := range o.set {
		if m.ts > now-keep && m.v != value {
			kept = append(kept, m)
		}
	}
	o.set = append(kept, memMember{ts: at, v: value})
	o.expires = at + keep
}

// failDistinct records one failure in distinct failure set f and reports
// whether it struck (the set reached f.Limit values and is emptied, with
// its pending set).
func (s *MemoryStore) failDistinct(f *FailureRule, now int64) bool {
	if s.distinctFull(f, now) {
		return true
	}
	s.see(f.Key, f.Distinct, memMs(f.Keep), memMs(f.Window), now)
	return false
}

// reserveDistinct adds one holder of f's value to f's pending set (a
// reservation under record key rec) and reports whether that struck, as
// failDistinct, and otherwise the token of the record that holds it.
func (s *MemoryStore) reserveDistinct(f *FailureRule, rec string, now int64) (struck bool, tok string) {
	if s.distinctFull(f, now) {
		return true, ""
	}
	keep, w := max(memMs(f.Keep), memMs(f.Window)), memMs(f.Window)
	o := s.otherFor(f.Pending, now)
	at, held := now, 0
	if n := len(o.set); n > 0 {
		at = max(now, o.set[n-1].ts)
	}
	tok = rec
	kept := o.set[:0]
	for _, m := range o.set {
		switch {
		case m.v == f.Distinct:
			if m.ts > now-w {
				held, tok = m.n, m.tok
			}
		case m.ts > now-keep:
			kept = append(kept, m)
		}
	}
	o.set = append(kept, memMember{ts: at, v: f.Distinct, n: min(held+1, pendMaxHolders), tok: tok})
	o.expires = at + keep
	return false, tok
}

// distinctFull reports whether one more failure of f's value fills f (its
// set and pending set count their distinct values together), and if so
// empties both: the strike.
func (s *MemoryStore) distinctFull(f *FailureRule, now int64) bool {
	w := memMs(f.Window)
	n, present, _, _ := s.distinctState(f.Key, f.Distinct, w, now)
	if f.Pending != "" {
		if p := s.other(f.Pending, now); p != nil {
			set := s.other(f.Key, now)
			for _, m := range p.set {
				if m.ts <= now-w || set.has(m.v, now-w) {
					continue
				}
				n++
				present = present || m.v == f.Distinct
			}
		}
	}
	if !present {
		n++
	}
	if n < f.Limit {
		return false
	}
	delete(s.shard(f.Key).others, f.Key)
	if f.Pending != "" {
		delete(s.shard(f.Pending).others, f.Pending)
	}
	return true
}

// has reports whether set o (nil: none) holds value v later than edge.
func (o *memOther) has(v string, edge int64) bool {
	if o == nil {
		return false
	}
	for _, m := range o.set {
		if m.v == v && m.ts > edge {
			return true
		}
	}
	return false
}

// unhold takes one holder of value v from pending set key, if the record
// the hold went to (token tok) is still there: a strike, an unlock or the
// window may have dropped it, and a record of v made after that holds
// other checks only. Its stamp stays.
func (s *MemoryStore) unhold(key, v, tok string, now int64) {
	o := s.other(key, now)
	if o == nil {
		return
	}
	for i := range o.set {
		if o.set[i].v != v {
			continue
		}
		if o.set[i].tok != tok {
			break
		}
		if o.set[i].n--; o.set[i].n <= 0 {
			o.set = append(o.set[:i], o.set[i+1:]...)
		}
		break
	}
	if len(o.set) == 0 {
		delete(s.shard(key).others, key)
	}
}
