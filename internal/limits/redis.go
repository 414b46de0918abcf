package limits

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisSource is the function library every decision calls (redisFunc);
// see its header for KEYS, ARGV and the replies.
//
//go:embed redis.lua
var redisSource string

// RedisStoreConfig configures a RedisStore. Zero fields get the defaults
// stated on each.
type RedisStoreConfig struct {
	// Workers is the number of batches in flight at once (default 4).
	Workers int
	// MaxBatch is the most function calls one batch carries (default 64).
	MaxBatch int
}

// RedisStore is the Store backed by Redis (one node, Sentinel or Cluster):
// each Check, Report and Unlock is one FCALL of one embedded Lua function
// library (redisFunc) per Redis Cluster slot its keys fall in (on one node
// or Sentinel: one), so a decision is atomic and costs one round trip;
// "now" is Redis TIME, one clock for every Guard instance on a node.
//
// Concurrent calls share round trips: a small batcher pipelines the
// calls of every decision waiting at the moment (see batcher).
//
// On Redis Cluster a decision whose keys span slots makes one call per
// slot, all issued together. Each slot checks and logs its own rules; when
// any slot denies, the slots that logged take their entries back
// (rollback), so under contention a decision may be denied that one Redis
// would allow, never the reverse. Lockout index keys of a strike that lie
// in another slot are written right after it. Keys that must be decided
// together (a lock that spares trusted devices and its trust record, a
// failure log and its lock record) must share a hash tag.
//
// The client must be built with ContextTimeoutEnabled: true, so that each
// call's ctx deadline (the failover store's budget) bounds it. Errors that
// mean the server could not answer (network, timeout, closed client,
// LOADING, READONLY, CLUSTERDOWN, ...) match errors.Is(err,
// ErrUnavailable); script and type errors do not. A client that retries a
// command after a lost reply may run a decision twice (and a rollback
// twice, which would take back another decision's entry): NewRedisClient
// builds clients that never retry.
type RedisStore struct {
	client  redis.UniversalClient
	fn      *redisFunc
	clock   *redisClock // Redis's clock offset, for the deadline of every call
	batch   *batcher
	cluster bool
}

var _ Store = (*RedisStore)(nil)

// NewRedis returns a RedisStore over client. The store owns the client:
// Close closes it. The function library is loaded on first use (and
// reloaded transparently after FUNCTION FLUSH, a restart or a failover).
func NewRedis(client redis.UniversalClient, cfg RedisStoreConfig) *RedisStore {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	_, cluster := client.(*redis.ClusterClient)
	clock := newRedisClock()
	return &RedisStore{
		client:  client,
		fn:      guardFunc,
		clock:   clock,
		batch:   newBatcher(client, guardFunc, clock, cfg.Workers, cfg.MaxBatch),
		cluster: cluster,
	}
}

// Check decides one attempt; see the package documentation and RedisStore.
// An invalid request is an error that is not ErrUnavailable and sends
// nothing.
func (s *RedisStore) Check(ctx context.Context, req *CheckRequest) (CheckResult, error) {
	if err := validateCheck(req); err != nil {
		return CheckResult{}, fmt.Errorf("check: %w", err)
	}
	allow := s.followUps(ctx)
	groups := s.checkGroups(req)
	calls := make([]*pending, len(groups))
	for i, g := range groups {
		calls[i] = &pending{}
		calls[i].keys, calls[i].args = g.build(req)
	}
	if err := s.batch.run(ctx, calls); err != nil {
		return CheckResult{}, redisError("call check function", err)
	}
	replies := make([]checkReply, len(groups))
	allowed, trusted := true, false
	for i, c := range calls {
		if c.err != nil {
			// A slot that answered and logged before another failed keeps
			// its entries: stricter, never looser.
			return CheckResult{}, redisError("call check function", c.err)
		}
		r, err := parseReply(c.res, len(groups[i].rules), len(groups[i].others), groups[i].wantAt)
		if err != nil {
			return CheckResult{}, fmt.Errorf("read check reply: %w", err)
		}
		replies[i] = r
		allowed = allowed && r.allowed
		trusted = trusted || r.trusted
	}

	// On Cluster each slot's node has its own TIME: every rule's times
	// are its own node's, and the answer's Now is the latest.
	res := CheckResult{Allowed: allowed, Rules: make([]RuleResult, len(req.Rules))}
	for _, r := range replies {
		res.Now = time.UnixMilli(max(res.Now.UnixMilli(), r.now))
	}
	var locked *LockState
	var foreign []strikeIndex
	for gi, g := range groups {
		r := &replies[gi]
		for j, ri := range g.rules {
			res.Rules[ri] = ruleResult(&req.Rules[ri], req.Cost, allowed, r.now, r.rules[j])
		}
		for j, ri := range g.others {
			res.Rules[ri] = r.others[j].result(&req.Rules[ri], req.Cost, allowed, r.now)
		}
		if st := r.lockState(req.Locks, g.locks); st != nil && (locked == nil || st.Until.After(locked.Until)) {
			locked = st
		}
		if r.allowed {
			// An allowed share's strikes are its reservation's.
			struck := r.struckStates(g.rsv)
			res.Struck = append(res.Struck, struck...)
			foreign = appendForeign(foreign, struck, r.struck, g.rsvForeign)
		} else {
			res.Struck = append(res.Struck, r.struckStates(g.esc)...)
		}
	}
	res.Locked = locked
	res.Trusted = trusted && len(res.Struck) > 0
	res.Challenge = !allowed && locked == nil && challengeOnly(req.Rules, res.Rules)
	if len(foreign) > 0 {
		s.writeIndexes(ctx, allow, foreign)
	}
	if allowed || req.DryRun || !s.cluster {
		return res, nil
	}

	// Cluster, denied: take back what allowing slots logged, then (unless
	// a lockout denied) record the denial as a failure. The answer is the
	// denial whatever these follow-ups meet: a rollback that fails leaves
	// entries in (stricter), a failure that cannot be recorded is one
	// failure less, but a denial never turns into an error (which the
	// failover store would answer from its fallback, perhaps allowing).
	rctx, cancel := followUp(ctx, allow)
	s.rollback(rctx, req, groups, replies)
	cancel()
	if locked == nil && !res.Challenge && req.DenialFailures != nil && len(req.DenialFailures.Failures) > 0 {
		fctx, cancel := followUp(ctx, allow)
		defer cancel()
		if rep, err := s.Report(fctx, &ReportRequest{Failure: true, Escalation: *req.DenialFailures}); err == nil {
			res.Struck = append(res.Struck, rep.Struck...)
		}
	}
	res.Trusted = trusted && len(res.Struck) > 0
	return res, nil
}

// followUpTimeout bounds the rollback and denial failure of a Cluster
// decision spanning slots, which run after its answer is known, and the
// lockout index entries a strike writes in other slots; each of them
// takes no longer than the decision itself had either (followUpAllowance).
const followUpTimeout = 250 * time.Millisecond

// followUpAllowance is how long each write that follows a decision's
// answer may take, read from the decision's ctx as it begins: the time it
// leaves the decision (the failover budget), at most followUpTimeout. The
// client's socket timeouts are the admin timeout's (NewRedisClient), so
// they no longer cut a follow-up off at the budget: without this bound a
// hung Redis would hold a decision up to followUpTimeout per follow-up
// past its answer.
func followUpAllowance(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(followUpTimeout, time.Until(d))
	}
	return followUpTimeout
}

// followUps is followUpAllowance on Cluster; on one node a decision has
// no follow-ups (every key is in its one slot), so nothing is read.
func (s *RedisStore) followUps(ctx context.Context) time.Duration {
	if !s.cluster {
		return 0
	}
	return followUpAllowance(ctx)
}

// followUp is the context of one follow-up write: without ctx's cancel
// (the answer is given and stands), bounded by allow.
func followUp(ctx context.Context, allow time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), allow)
}

// rollback removes the entries that the slots which allowed their share
// of a denied decision added.
func (s *RedisStore) rollback(ctx context.Context, req *CheckRequest, groups []*callGroup, replies []checkReply) {
	var calls []*pending
	for gi, g := range groups {
		if !replies[gi].allowed {
			continue
		}
		for j, ri := range g.rules {
			if at := replies[gi].rules[j].at; at > 0 {
				calls = append(calls, &pending{
					keys: []string{req.Rules[ri].Key},
					args: opArgs("rollback", 1, int64(req.Cost), at),
				})
			}
		}
		if len(g.rsv) > 0 {
			p := &pending{keys: []string{g.record}, args: opArgs("release", int64(len(g.rsv)))}
			for _, f := range g.rsv {
				// What the record holds: a log's entry, or a distinct
				// rule's holder in its pending set.
				if f.Pending != "" {
					p.keys = append(p.keys, f.Pending)
				} else {
					p.keys = append(p.keys, f.Key)
				}
			}
			calls = append(calls, p)
		}
	}
	calls = append(calls, undoCalls(req, groups, replies)...)
	if len(calls) > 0 {
		_ = s.batch.run(ctx, calls)
	}
}

// Report records a failure or a success; see the package documentation.
func (s *RedisStore) Report(ctx context.Context, req *ReportRequest) (ReportResult, error) {
	if err := validateReport(req); err != nil {
		return ReportResult{}, fmt.Errorf("report: %w", err)
	}
	allow := s.followUps(ctx)
	groups := s.reportGroups(req)
	calls := make([]*pending, len(groups))
	for i, g := range groups {
		calls[i] = &pending{}
		calls[i].keys, calls[i].args = g.build(req)
	}
	if err := s.batch.run(ctx, calls); err != nil {
		return ReportResult{}, redisError("call report function", err)
	}
	var res ReportResult
	var foreign []strikeIndex
	for gi, c := range calls {
		if c.err != nil {
			return ReportResult{}, redisError("call report function", c.err)
		}
		r, err := parseCheckReply(c.res, 0)
		if err != nil {
			return ReportResult{}, fmt.Errorf("read report reply: %w", err)
		}
		g := groups[gi]
		if gi == 0 || r.now > res.Now.UnixMilli() {
			res.Now = time.UnixMilli(r.now)
		}
		if st := r.lockState(req.Locks, g.locks); st != nil && (res.Locked == nil || st.Until.After(res.Locked.Until)) {
			res.Locked = st
		}
		struck := r.struckStates(g.esc)
		res.Struck = append(res.Struck, struck...)
		foreign = appendForeign(foreign, struck, r.struck, g.foreign)
	}
	if len(foreign) > 0 {
		s.writeIndexes(ctx, allow, foreign)
	}
	return res, nil
}

// appendForeign adds the index entries in other slots of a group's
// strikes (struck, as read from raw) to out.
func appendForeign(out []strikeIndex, struck []LockState, raw []redisStrike, foreign [][]string) []strikeIndex {
	for i, st := range struck {
		if f := raw[i].failure - 1; f >= 0 && f < len(foreign) {
			for _, x := range foreign[f] {
				out = append(out, strikeIndex{index: x, lock: st})
			}
		}
	}
	return out
}

// strikeIndex is a lockout index entry in another slot than its lock.
type strikeIndex struct {
	index string
	lock  LockState
}

// writeIndexes adds strikes to lockout indexes in other slots (Cluster
// only). The lock itself is already in force; an index entry that fails to
// be written only hides it from listings by that identity, so the error
// is not the decision's. It runs without ctx's cancel, within allow
// (followUpAllowance).
func (s *RedisStore) writeIndexes(ctx context.Context, allow time.Duration, entries []strikeIndex) {
	pipe := s.client.Pipeline()
	for _, e := range entries {
		until := e.lock.Until.UnixMilli()
		pipe.ZRemRangeByScore(ctx, e.index, "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		pipe.ZAdd(ctx, e.index, redis.Z{Score: float64(until), Member: e.lock.Key})
		// The index lives as long as its longest lock: NX gives a new
		// index its first expiry, GT only ever moves it later.
		pipe.Do(ctx, "PEXPIREAT", e.index, until, "NX")
		pipe.Do(ctx, "PEXPIREAT", e.index, until, "GT")
	}
	ictx, cancel := followUp(ctx, allow)
	defer cancel()
	_, _ = pipe.Exec(ictx)
}

// Unlock deletes the lock records and the failure logs, one script per
// slot, and reports whether any lock was active.
func (s *RedisStore) Unlock(ctx context.Context, req *UnlockRequest) (bool, error) {
	if err := validateUnlock(req); err != nil {
		return false, fmt.Errorf("unlock: %w", err)
	}
	groups := map[int]*pending{}
	var calls []*pending
	byLock := map[int][]string{}
	byClear := map[int][]string{}
	for _, k := range req.Locks {
		byLock[s.slot(k)] = append(byLock[s.slot(k)], k)
	}
	for _, k := range req.Failures {
		byClear[s.slot(k)] = append(byClear[s.slot(k)], k)
	}
	add := func(slot int) {
		if groups[slot] != nil {
			return
		}
		l, c := byLock[slot], byClear[slot]
		p := &pending{args: opArgs("unlock", int64(len(l)), int64(len(c)))}
		p.keys = append(append(p.keys, l...), c...)
		groups[slot] = p
		calls = append(calls, p)
	}
	for _, k := range req.Locks {
		add(s.slot(k))
	}
	for _, k := range req.Failures {
		add(s.slot(k))
	}
	if len(calls) == 0 {
		return false, nil
	}
	if err := s.batch.runHere(ctx, calls); err != nil {
		return false, redisError("call unlock function", err)
	}
	active := false
	for _, c := range calls {
		if c.err != nil {
			return false, redisError("call unlock function", c.err)
		}
		if len(c.res) != 2 {
			return false, fmt.Errorf("read unlock reply: %d values, want 2", len(c.res))
		}
		n, ok := c.res[1].(int64)
		if !ok {
			return false, fmt.Errorf("read unlock reply: %T, want integer", c.res[1])
		}
		active = active || n == 1
	}
	return active, nil
}

// slot is the group a key's script runs in: its Cluster slot, or 0 on a
// single node (where every key of a decision goes in one script).
func (s *RedisStore) slot(key string) int {
	if !s.cluster {
		return 0
	}
	return keySlot(key)
}

// Prepare loads the function library (on Cluster: into every master), so
// that the first decisions cost one round trip each rather than two; it
// also tells whether Redis answers. Call it at start; the store works
// without it.
func (s *RedisStore) Prepare(ctx context.Context) error {
	if err := s.fn.load(ctx, s.client); err != nil {
		return fmt.Errorf("load function library: %w: %w", ErrUnavailable, err)
	}
	return nil
}

// pingArgs are a check without rules, locks or keys: the function reads
// TIME and answers (redis.lua's header, every count 0; cost 1, no flags).
var pingArgs = []any{"check 0 0 0 0 0 0 0 0 0", "1", ""}

// Ping reports whether Redis can decide (on Cluster: every master): it
// calls the function library with an empty check rather than PING, so it
// needs what a decision needs (the library, which it loads again when a
// restart or FUNCTION FLUSH took it; an ACL that lets FCALL through;
// credentials Redis takes) and a probe never reports up a Redis that
// refuses every decision. A failure matches ErrUnavailable, whatever
// Redis answered: a Redis that refuses an empty check cannot decide
// anything (a database index it does not have, a server without
// functions), an outage to alert on and show in /readyz rather than a bug
// of one decision; Prepare's failures match it too. On Cluster a master
// whose cluster_state is not ok fails it too (clusterStateOK).
func (s *RedisStore) Ping(ctx context.Context) error {
	var err error
	if c, ok := s.client.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := s.pingOne(ctx, m); err != nil {
				return err
			}
			return clusterStateOK(ctx, m)
		})
	} else {
		err = s.pingOne(ctx, s.client)
	}
	if err != nil {
		return fmt.Errorf("ping redis: %w: %w", ErrUnavailable, err)
	}
	return nil
}

// pingOne probes one node (on Cluster, a master), loading the library
// into that node alone when it is missing.
// Its reply's now is a bound of Redis's clock offset (redisClock), so an
// idle store keeps its estimate.
func (s *RedisStore) pingOne(ctx context.Context, c redis.UniversalClient) error {
	sent := time.Now()
	res, err := c.FCall(ctx, s.fn.name, nil, pingArgs...).Slice()
	if functionMissing(err) {
		if err = s.fn.load(ctx, c); err == nil {
			sent = time.Now()
			res, err = c.FCall(ctx, s.fn.name, nil, pingArgs...).Slice()
		}
	}
	s.clock.observe(ctx, sent, res, err)
	return err
}

// clusterStateOK fails while a Cluster master's cluster_state is not ok:
// it then refuses every call with keys (CLUSTERDOWN) but still runs the
// probe's call without keys. An ACL that refuses CLUSTER INFO leaves the
// probe as it was.
func clusterStateOK(ctx context.Context, m *redis.Client) error {
	info, err := m.ClusterInfo(ctx).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOPERM") {
			return nil
		}
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("%s: cluster_state is not ok", m.Options().Addr)
	}
	return nil
}

// Close stops the batcher and closes the client the store was built with.
func (s *RedisStore) Close() error {
	s.batch.close()
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

// redisUnavailablePrefixes are server replies that mean "cannot answer now"
// rather than "the request or the script is wrong".
var redisUnavailablePrefixes = []string{
	"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
	// A call the function library began after its caller's deadline and
	// refused ("Late calls" in redis_late.go): Redis too slow for it.
	"LATE",
	"NOREPLICAS", "MOVED", "ASK", "UNBLOCKED", "NOSCRIPT",
	// At maxmemory with noeviction Redis refuses every FCALL of a function
	// that may write (Guard's does) before it runs: answered from the
	// fallback like any other Redis that cannot answer.
	"OOM",
	// Credentials Redis does not take (a rotated password, a removed ACL
	// user) or an ACL that refuses Guard's commands: no decision can be
	// made on this Redis until an operator acts, which is an outage to be
	// alerted on and shown in /readyz, not a bug of one call.
	"NOAUTH", "WRONGPASS", "NOPERM",
}

// redisError wraps err with context and, when the server could not be
// reached or could not answer, with ErrUnavailable too.
func redisError(what string, err error) error {
	if redisUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func redisUnavailable(err error) bool {
	if errors.Is(err, errBatcherClosed) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		// Network errors, timeouts, cancelled contexts, a closed client or
		// an exhausted pool: the server did not answer.
		return true
	}
	msg := rerr.Error()
	if functionMissing(err) {
		// The library went (FUNCTION FLUSH, a restart) between loading it
		// and calling it: as NOSCRIPT, the server cannot answer now.
		return true
	}
	for _, p := range redisUnavailablePrefixes {
		if strings.HasPrefix(msg, p+" ") || msg == p {
			return true
		}
	}
	return false
}
