package limits

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// callGroup is the share of one decision that one script call decides: on
// a single node every key, on Cluster the keys of one slot. Indexes are
// into the request's Rules, Locks and escalation Failures.
type callGroup struct {
	slot  int
	rules []int
	// others are the rules of other kinds (counter, bucket, distinct),
	// which redis.lua decides in a section of their own.
	others []int
	locks  []int
	trust  bool
	// esc holds the failure rules decided here; foreign[i] the index keys
	// of esc[i] that lie in other slots (written after a strike).
	esc      []FailureRule
	foreign  [][]string
	escSpec  *Escalation
	denyFail bool
	clear    []string
	// record is the group's reservation record ("" when none); rsv the
	// failure rules it reserves in (a check's), rsvForeign as foreign.
	record     string
	rsv        []FailureRule
	rsvForeign [][]string
	// wantAt: the check's reply carries each rule's stamp, which only the
	// rollback of a decision spanning slots reads.
	wantAt bool
}

// groups collects callGroups by slot, in first-seen order.
type groups struct {
	s     *RedisStore
	bySlt map[int]*callGroup
	list  []*callGroup
}

func (gs *groups) of(key string) *callGroup {
	if !gs.s.cluster {
		// One node: every key in the one script, no map needed.
		if len(gs.list) == 0 {
			gs.list = append(gs.list, &callGroup{})
		}
		return gs.list[0]
	}
	slot := gs.s.slot(key)
	if g := gs.bySlt[slot]; g != nil {
		return g
	}
	g := &callGroup{slot: slot}
	if gs.bySlt == nil {
		gs.bySlt = map[int]*callGroup{}
	}
	gs.bySlt[slot] = g
	gs.list = append(gs.list, g)
	return g
}

// addLocks puts each lock in its slot's group, and the trust record in
// every group whose lock spares trusted devices.
func (gs *groups) addLocks(locks []LockRef, trustKey string) {
	for i, l := range locks {
		g := gs.of(l.Key)
		g.locks = append(g.locks, i)
		if l.SpareIfTrusted && trustKey != "" {
			g.trust = true
		}
	}
}

// addReserve puts each failure rule of a reservation in its log's slot,
// with the first record of that slot; a rule without a record in its
// slot reserves nothing (see Reservation).
func (gs *groups) addReserve(r *Reservation) {
	for _, f := range r.Escalation.Failures {
		rec := gs.recordFor(f.Key, r.Records)
		if rec == "" {
			continue
		}
		g := gs.of(f.Key)
		g.record = rec
		local, foreign := gs.split(g, f)
		g.rsv = append(g.rsv, local)
		g.rsvForeign = append(g.rsvForeign, foreign)
	}
}

// addRecords gives every group of a report the first of records in its
// slot (on one node: the first record).
func (gs *groups) addRecords(records []string) {
	for _, g := range gs.list {
		for _, k := range records {
			if !gs.s.cluster || gs.s.slot(k) == g.slot {
				g.record = k
				break
			}
		}
	}
}

func (gs *groups) recordFor(logKey string, records []string) string {
	for _, k := range records {
		if gs.s.slot(k) == gs.s.slot(logKey) {
			return k
		}
	}
	return ""
}

// split returns f with only the lockout index keys in g's slot, and the
// others.
func (gs *groups) split(g *callGroup, f FailureRule) (FailureRule, []string) {
	var foreign []string
	local := f
	local.Indexes = nil
	for _, x := range f.Indexes {
		if gs.s.slot(x) == g.slot {
			local.Indexes = append(local.Indexes, x)
		} else {
			foreign = append(foreign, x)
		}
	}
	return local, foreign
}

// addEscalation puts each failure rule in its log's slot.
func (gs *groups) addEscalation(esc *Escalation) {
	for _, f := range esc.Failures {
		g := gs.of(f.Key)
		g.escSpec = esc
		local, foreign := gs.split(g, f)
		g.esc = append(g.esc, local)
		g.foreign = append(g.foreign, foreign)
	}
}

func (s *RedisStore) checkGroups(req *CheckRequest) []*callGroup {
	gs := &groups{s: s}
	for i := range req.Rules {
		g := gs.of(req.Rules[i].Key)
		if req.Rules[i].isLog() {
			g.rules = append(g.rules, i)
		} else {
			g.others = append(g.others, i)
		}
	}
	gs.addLocks(req.Locks, req.TrustKey)
	if len(gs.list) == 0 {
		gs.of("") // a check without rules or locks still reads the clock
	}
	// On one node the denial's failure is recorded in the same script; on
	// Cluster, with several slots, after the combined decision.
	if req.DenialFailures != nil && len(gs.list) == 1 && !s.cluster {
		gs.list[0].denyFail = true
		gs.addEscalation(req.DenialFailures)
	}
	if req.Reserve != nil && !req.DryRun {
		gs.addReserve(req.Reserve)
	}
	for _, g := range gs.list {
		g.wantAt = len(gs.list) > 1
	}
	return gs.list
}

func (s *RedisStore) reportGroups(req *ReportRequest) []*callGroup {
	gs := &groups{s: s}
	if req.Failure {
		gs.addEscalation(&req.Escalation)
	} else {
		for _, k := range req.Clear {
			g := gs.of(k)
			g.clear = append(g.clear, k)
		}
		if req.TrustKey != "" && req.TrustTTL > 0 {
			gs.of(req.TrustKey).trust = true
		}
	}
	if len(req.Records) > 0 && !req.Failure {
		// A success takes back the provisional entries of its check.
		gs.addEscalation(&req.Escalation)
	}
	gs.addLocks(req.Locks, req.TrustKey)
	if len(gs.list) == 0 {
		gs.of("")
	}
	gs.addRecords(req.Records)
	return gs.list
}

// build returns KEYS and ARGV of the group's call for req (a
// *CheckRequest or *ReportRequest), in redis.lua's order.
func (g *callGroup) build(req any) ([]string, []any) {
	var keys []string
	var a callArgs
	switch req := req.(type) {
	case *CheckRequest:
		nT := 0
		if g.trust {
			nT = 1
		}
		// Sized for a check without escalation or reservation sections.
		keys = make([]string, 0, len(g.rules)+len(g.locks)+nT+len(g.others))
		a.start("check", 3+len(g.others))
		a.hex(int64(len(g.rules)))
		a.hex(int64(len(g.locks)))
		a.hex(int64(nT))
		a.hex(int64(len(g.others)))
		a.flag(g.denyFail)
		a.hex(g.spareMask(req.Locks))
		a.hex(g.pairMask(req.Locks))
		a.flag(g.wantAt)
		a.vary(costArg(req.Cost))
		a.vary(g.checkFlags(req))
		for _, i := range g.rules {
			keys = append(keys, req.Rules[i].Key)
		}
		keys = g.lockKeys(keys, req.Locks)
		if g.trust {
			keys = append(keys, req.TrustKey)
		}
		for _, i := range g.others {
			keys = append(keys, req.Rules[i].Key)
		}
		for _, i := range g.rules {
			r := &req.Rules[i]
			a.hex(int64(r.Limit))
			a.hex(r.Window.Milliseconds())
			// keep in decimal: the script passes it on as SET's PX.
			a.dec(keepMs(r.Keep, r.Window))
			a.hex(int64(ruleFlags(r)))
		}
		if g.denyFail {
			keys = g.escalation(keys, &a)
		}
		g.otherArgs(&a, req.Rules)
		if len(g.rsv) > 0 {
			a.flag(true)
			a.hex(req.Reserve.TTL.Milliseconds())
			keys = append(keys, g.record)
			keys = escalationSection(keys, &a, &req.Reserve.Escalation, g.rsv)
		} else {
			a.flag(false)
		}
	case *ReportRequest:
		nT := 0
		if g.trust {
			nT = 1
		}
		a.start("report", 2*len(g.esc))
		a.hex(int64(len(g.locks)))
		a.hex(int64(nT))
		a.flag(req.Failure)
		a.hex(req.TrustTTL.Milliseconds())
		a.hex(int64(len(g.clear)))
		keys = g.lockKeys(keys, req.Locks)
		if g.trust {
			keys = append(keys, req.TrustKey)
		}
		keys = append(keys, g.clear...)
		keys = g.escalation(keys, &a)
		a.hex(g.spareMask(req.Locks))
		a.hex(g.pairMask(req.Locks))
		if g.record != "" {
			a.flag(true)
			keys = append(keys, g.record)
		} else {
			a.flag(false)
		}
	}
	return keys, a.args()
}

// callArgs builds a call's ARGV (redis.lua, "ARGV[1], the spec"): the
// spec's tokens, joined by spaces, are ARGV[1]; the fields that vary from
// call to call follow it, one argument each.
type callArgs struct {
	spec   *[]byte // from specBufs until args()
	argv   []any
	intern bool
}

var specBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// start begins the spec with op; n is how many varying fields to expect.
// The specs of checks and reports are interned (see specs).
func (a *callArgs) start(op string, n int) {
	a.spec = specBufs.Get().(*[]byte)
	*a.spec = append((*a.spec)[:0], op...)
	a.argv = make([]any, 1, 2+n) // and the deadline the batcher appends
	a.intern = op == "check" || op == "report"
}

// hex appends a number token (hexadecimal, which redis.lua reads).
func (a *callArgs) hex(n int64) { *a.spec = strconv.AppendInt(append(*a.spec, ' '), n, 16) }

// dec appends a decimal number token (a keep, passed on as PX).
func (a *callArgs) dec(n int64) { *a.spec = strconv.AppendInt(append(*a.spec, ' '), n, 10) }

// tok appends a token; it must hold no space.
func (a *callArgs) tok(s string) { *a.spec = append(append(*a.spec, ' '), s...) }

// flag appends a boolean token: 1 or 0.
func (a *callArgs) flag(b bool) {
	if b {
		a.tok("1")
	} else {
		a.tok("0")
	}
}

// vary appends a varying field.
func (a *callArgs) vary(v any) { a.argv = append(a.argv, v) }

// args returns ARGV.
func (a *callArgs) args() []any {
	if a.intern {
		a.argv[0] = specs.get(*a.spec)
	} else {
		a.argv[0] = string(*a.spec)
	}
	if cap(*a.spec) <= 4096 {
		specBufs.Put(a.spec)
	}
	a.spec = nil
	return a.argv
}

// specs interns the specs of checks and reports: a policy has a few dozen
// (one per request shape), so the calls of one shape share one string and
// its boxed form, and building a spec allocates nothing. Bounded: at
// maxSpecs (reloads of changed policies leave their shapes behind) the
// cache starts again, as redis.lua's does.
var specs = specCache{m: map[string]any{}}

const maxSpecs = 4096

type specCache struct {
	mu sync.RWMutex
	m  map[string]any
}

func (c *specCache) get(b []byte) any {
	c.mu.RLock()
	v, ok := c.m[string(b)]
	c.mu.RUnlock()
	if ok {
		return v
	}
	s := string(b)
	v = s
	c.mu.Lock()
	if len(c.m) >= maxSpecs {
		c.m = make(map[string]any, maxSpecs)
	}
	c.m[s] = v
	c.mu.Unlock()
	return v
}

// hexCost holds the hexadecimal forms of the costs 0..255, boxed once.
var hexCost = func() (t [256]any) {
	for i := range t {
		t[i] = strconv.FormatInt(int64(i), 16)
	}
	return t
}()

// costArg is a check's cost field (hexadecimal).
func costArg(n int) any {
	if n >= 0 && n < len(hexCost) {
		return hexCost[n]
	}
	return strconv.FormatInt(int64(n), 16)
}

// opArgs is the ARGV of an op whose fields are all numbers (unlock,
// rollback, release): the spec alone.
func opArgs(op string, nums ...int64) []any {
	var a callArgs
	a.start(op, 0)
	for _, n := range nums {
		a.hex(n)
	}
	return a.args()
}

// checkFlags is a check's flags field: "" when none is set, else '0' or
// '1' for dry run, then for each of the group's log rules and other rules
// whether the attempt passed its challenge.
func (g *callGroup) checkFlags(req *CheckRequest) any {
	n := 1 + len(g.rules) + len(g.others)
	set := req.DryRun
	for _, i := range g.rules {
		set = set || req.Rules[i].Passed
	}
	for _, i := range g.others {
		set = set || req.Rules[i].Passed
	}
	if !set {
		return "" // a constant: boxed without an allocation
	}
	b := make([]byte, 0, n)
	b = append(b, byte('0'+redisBool(req.DryRun)))
	for _, i := range g.rules {
		b = append(b, byte('0'+redisBool(req.Rules[i].Passed)))
	}
	for _, i := range g.others {
		b = append(b, byte('0'+redisBool(req.Rules[i].Passed)))
	}
	return string(b)
}

func (g *callGroup) lockKeys(keys []string, locks []LockRef) []string {
	for _, i := range g.locks {
		keys = append(keys, locks[i].Key)
	}
	return keys
}

// spareMask is the spares argument of a check or a report: bit j-1 set
// when the group's lock j is spared for a trusted device. Lua's numbers
// hold 53 bits: a lock beyond the 53rd (no policy has so many) is never
// spared, which is stricter, never looser.
func (g *callGroup) spareMask(locks []LockRef) int64 {
	var m int64
	for j, i := range g.locks {
		if locks[i].SpareIfTrusted && j < 53 {
			m |= 1 << j
		}
	}
	return m
}

// pairMask is the pairs argument of a check or a report: bit j-1 set when
// the group's lock j shares its key's level with lock j-1 (its struck
// record, the lock before it in the request, which a slot never
// separates from it). As for spares, a lock beyond the 53rd is never
// paired: its own level is answered.
func (g *callGroup) pairMask(locks []LockRef) int64 {
	var m int64
	for j, i := range g.locks {
		if j > 0 && j < 53 && locks[i].SharesLevel && g.locks[j-1] == i-1 {
			m |= 1 << j
		}
	}
	return m
}

// escalation appends the escalation section (empty without failure rules).
func (g *callGroup) escalation(keys []string, a *callArgs) []string {
	return escalationSection(keys, a, g.escSpec, g.esc)
}

// escalationSection appends the escalation section of spec's ladder and
// the failure rules fails.
func escalationSection(keys []string, a *callArgs, e *Escalation, fails []FailureRule) []string {
	if len(fails) == 0 {
		a.tok("0 0 0")
		return keys
	}
	a.hex(int64(len(fails)))
	a.hex(e.Decay.Milliseconds())
	a.hex(int64(len(e.Ladder)))
	for _, d := range e.Ladder {
		a.hex(d.Milliseconds())
	}
	for _, f := range fails {
		a.hex(int64(f.Limit))
		a.hex(f.Window.Milliseconds())
		a.dec(keepMs(f.Keep, f.Window))
		a.hex(int64(len(f.Indexes)))
		if f.Pending != "" {
			a.tok("1")
			keys = append(keys, f.Pending)
		} else {
			a.tok("0")
		}
		a.vary(f.Info)
		a.vary(f.Distinct)
		keys = append(keys, f.Key, f.LockKey)
		keys = append(keys, f.Indexes...)
	}
	return keys
}

// redisStampBytes is the size of one log entry in redis.lua's logs.
const redisStampBytes = 6

func keepMs(keep, window time.Duration) int64 {
	return max(keep, window).Milliseconds()
}

// ruleFlags is a rule's flags token: 1 shadow, 2 challenge (whether its
// challenge was passed is a varying field, checkFlags).
func ruleFlags(r *Rule) int {
	return redisBool(r.Shadow) | redisBool(r.Challenge)<<1
}

// challengeOnly reports whether every enforced rule that does not admit
// the attempt is a Challenge rule (a denial that is then a challenge).
func challengeOnly(rules []Rule, results []RuleResult) bool {
	for i := range results {
		if i < len(rules) && !results[i].Allowed && !rules[i].Shadow && !rules[i].Challenge {
			return false
		}
	}
	return true
}

func redisBool(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkReply is a decoded check or report reply of redis.lua.
type checkReply struct {
	now     int64
	allowed bool
	trusted bool // a check's trust record names a trusted device
	// lockIdx is the 1-based index of the active lock among the group's
	// locks, 0 when none; lock holds its state without the key.
	lockIdx int
	lock    LockState
	rules   []ruleReply
	others  []otherReply
	struck  []redisStrike
}

type ruleReply struct {
	count, oldest, kth, at int64
}

type redisStrike struct {
	failure          int // 1-based index into the group's failure rules
	level            int
	sinceMs, untilMs int64
}

// replyReader walks a flat reply array.
type replyReader struct {
	v   []any
	i   int
	err error
}

func (r *replyReader) next() any {
	if r.err != nil {
		return nil
	}
	if r.i >= len(r.v) {
		r.err = fmt.Errorf("reply ends at value %d", r.i)
		return nil
	}
	r.i++
	return r.v[r.i-1]
}

func (r *replyReader) int() int64 {
	v := r.next()
	n, ok := v.(int64)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("reply value %d is %T, want integer", r.i-1, v)
	}
	return n
}

func (r *replyReader) str() string {
	v := r.next()
	s, ok := v.(string)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("reply value %d is %T, want string", r.i-1, v)
	}
	return s
}

// parseCheckReply decodes a report reply (nRules 0).
func parseCheckReply(v []any, nRules int) (checkReply, error) {
	return parseReply(v, nRules, -1, false)
}

// parseReply decodes a check reply for nRules log rules and nOthers rules
// of other kinds, with the rules' stamps when ats; nOthers -1 is a report
// reply, which has no such section.
func parseReply(v []any, nRules, nOthers int, ats bool) (checkReply, error) {
	r := &replyReader{v: v}
	var out checkReply
	out.now = r.int()
	a := r.int()
	out.allowed, out.trusted = a&1 == 1, a&2 != 0
	out.lockIdx = int(r.int())
	if out.lockIdx > 0 {
		out.lock.Level = int(r.int())
		out.lock.Since = time.UnixMilli(r.int())
		out.lock.Until = time.UnixMilli(r.int())
		out.lock.Info = r.str()
	}
	if n := int(r.int()); r.err == nil && n != nRules {
		return out, fmt.Errorf("reply has %d rules, want %d", n, nRules)
	}
	if nRules > 0 {
		out.rules = make([]ruleReply, nRules)
	}
	for i := range out.rules {
		out.rules[i] = ruleReply{count: r.int(), oldest: r.int(), kth: r.int()}
	}
	for i := 0; ats && i < len(out.rules); i++ {
		out.rules[i].at = r.int()
	}
	if nOthers >= 0 {
		out.others = r.others(nOthers)
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

// ruleResult turns what the script saw of one rule into its RuleResult,
// given the decision (allowed: the attempt was logged where it fits).
func ruleResult(rule *Rule, cost int, allowed bool, now int64, r ruleReply) RuleResult {
	w := rule.Window.Milliseconds()
	fits := int(r.count)+cost <= rule.Limit || rule.Passed
	logs := allowed && fits
	after := int(r.count)
	if logs {
		after += cost
	}
	var reset, retry int64
	switch {
	case r.count > 0:
		reset = r.oldest + w - now
	case logs:
		reset = w
	}
	if !fits {
		// Cost fits once the k oldest entries have left; the k-th leaves
		// at its stamp + W. A cost above the limit never fits: come back
		// when the log is empty.
		retry = w
		if r.kth > 0 {
			retry = r.kth + w - now
		}
	}
	return RuleResult{
		Allowed:    fits,
		Count:      after,
		Remaining:  max(rule.Limit-after, 0),
		Reset:      time.Duration(reset) * time.Millisecond,
		RetryAfter: time.Duration(retry) * time.Millisecond,
	}
}

// lockState returns the group's active lock as a LockState, or nil.
func (r *checkReply) lockState(locks []LockRef, idx []int) *LockState {
	if r.lockIdx < 1 || r.lockIdx > len(idx) {
		return nil
	}
	st := r.lock
	st.Key = locks[idx[r.lockIdx-1]].Key
	return &st
}

// struckStates returns the strikes as LockStates of the group's failures.
func (r *checkReply) struckStates(failures []FailureRule) []LockState {
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
			Rule:  f.Name,
		})
	}
	return out
}
