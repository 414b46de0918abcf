package limits

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisSource is the one script every decision runs; see its header for
// KEYS, ARGV and the reply.
//
//go:embed redis.lua
var redisSource string

// RedisStoreConfig configures a RedisStore.
type RedisStoreConfig struct {
	// Prefix is put in front of the store's own keys (today only the
	// lockout index, Prefix+"locks"). Default "guard:v1:". Log, lock and
	// trust keys come from the caller, already prefixed.
	Prefix string
}

// RedisStore is the Store backed by Redis: each Check and each Report is
// one EVALSHA of one embedded Lua script, so a decision is atomic and costs
// one round trip; "now" is Redis TIME, one clock for every Guard instance.
//
// The client must be built with ContextTimeoutEnabled: true, so that the
// ctx deadline given to each call (the failover store's budget, 50 ms by
// default) bounds the call. Errors that mean the server could not answer
// (network, timeout, closed client, LOADING, READONLY, BUSY, ...) match
// errors.Is(err, ErrUnavailable); script errors do not.
//
// All keys of one decision reach the script through KEYS. On Redis Cluster
// they must therefore hash to one slot; the lockout index (Prefix+"locks")
// is one of them.
//
// The first call after a start, a SCRIPT FLUSH or a failover costs two
// round trips (EVALSHA answers NOSCRIPT, then EVAL loads the script); every
// later call costs one. A client that retries a command after a lost reply
// may run a decision twice, which only ever counts more, never less; build
// it with MaxRetries: -1 unless that is acceptable.
type RedisStore struct {
	client redis.UniversalClient
	script *redis.Script
	index  string
}

var _ Store = (*RedisStore)(nil)

// NewRedis returns a RedisStore over client. The store owns the client:
// Close closes it. The script is loaded on first use (and reloaded
// transparently after SCRIPT FLUSH or a restart).
func NewRedis(client redis.UniversalClient, cfg RedisStoreConfig) *RedisStore {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultKeyPrefix
	}
	return &RedisStore{
		client: client,
		script: redis.NewScript(redisSource),
		index:  cfg.Prefix + "locks",
	}
}

// Check decides one attempt in one round trip; see the package
// documentation. An empty Nonce is replaced by a random one. An invalid
// request is an error that is not ErrUnavailable and sends nothing.
func (s *RedisStore) Check(ctx context.Context, req *CheckRequest) (CheckResult, error) {
	if err := validateRedisCheck(req); err != nil {
		return CheckResult{}, err
	}
	a := newRedisArgs(req.Nonce)
	a.cost, a.dry = req.Cost, req.DryRun
	a.rules = req.Rules
	a.locks, a.trust = req.Locks, req.TrustKey
	if req.DenialFailures != nil {
		a.escalation = *req.DenialFailures
	}
	keys, args := a.build(s.index, "check")
	v, err := s.script.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return CheckResult{}, redisError("eval check script", err)
	}
	r, err := parseRedisReply(v, len(req.Rules))
	if err != nil {
		return CheckResult{}, fmt.Errorf("read check reply: %w", err)
	}
	res := CheckResult{
		Now:     time.UnixMilli(r.now),
		Allowed: r.allowed,
		Rules:   r.rules,
		Locked:  r.locked(req.Locks),
		Struck:  r.struckStates(a.escalation.Failures),
	}
	return res, nil
}

// Report records a failure or a success in one round trip; see the package
// documentation.
func (s *RedisStore) Report(ctx context.Context, req *ReportRequest) (ReportResult, error) {
	if err := validateRedisReport(req); err != nil {
		return ReportResult{}, err
	}
	a := newRedisArgs(req.Nonce)
	a.failure = req.Failure
	a.locks, a.trust = req.Locks, req.TrustKey
	if req.Failure {
		a.escalation = req.Escalation
	} else {
		a.clear = req.Clear
		a.trustTTL = req.TrustTTL
	}
	keys, args := a.build(s.index, "report")
	v, err := s.script.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return ReportResult{}, redisError("eval report script", err)
	}
	r, err := parseRedisReply(v, 0)
	if err != nil {
		return ReportResult{}, fmt.Errorf("read report reply: %w", err)
	}
	return ReportResult{
		Now:    time.UnixMilli(r.now),
		Struck: r.struckStates(a.escalation.Failures),
		Locked: r.locked(req.Locks),
	}, nil
}

// Unlock deletes the lock records, their lockout index entries and the
// failure logs in one atomic step, and reports whether any lock was active.
func (s *RedisStore) Unlock(ctx context.Context, req *UnlockRequest) (bool, error) {
	if req == nil {
		return false, errors.New("unlock: nil request")
	}
	a := newRedisArgs("u")
	a.locks = make([]LockRef, len(req.Locks))
	for i, k := range req.Locks {
		if k == "" {
			return false, fmt.Errorf("unlock: lock %d: empty key", i)
		}
		a.locks[i] = LockRef{Key: k}
	}
	for i, k := range req.Failures {
		if k == "" {
			return false, fmt.Errorf("unlock: failure log %d: empty key", i)
		}
	}
	a.clear = req.Failures
	keys, args := a.build(s.index, "unlock")
	v, err := s.script.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return false, redisError("eval unlock script", err)
	}
	if len(v) != 2 {
		return false, fmt.Errorf("read unlock reply: %d values, want 2", len(v))
	}
	active, ok := v[1].(int64)
	if !ok {
		return false, fmt.Errorf("read unlock reply: %T, want integer", v[1])
	}
	return active == 1, nil
}

// Lockouts lists the active lockouts (until > now, now from Redis TIME),
// ordered by until descending, then by key. It reads the lockout index and
// then the records: two round trips, which is fine on the admin path.
func (s *RedisStore) Lockouts(ctx context.Context) ([]LockState, error) {
	pipe := s.client.Pipeline()
	timeCmd := pipe.Time(ctx)
	indexCmd := pipe.ZRangeWithScores(ctx, s.index, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, redisError("read lockout index", err)
	}
	now := timeCmd.Val().UnixMilli()
	var keys []string
	for _, z := range indexCmd.Val() {
		if k, ok := z.Member.(string); ok && int64(z.Score) > now {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return []LockState{}, nil
	}
	pipe = s.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HMGet(ctx, k, "level", "since", "until", "info")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, redisError("read lock records", err)
	}
	out := make([]LockState, 0, len(keys))
	for i, cmd := range cmds {
		st, ok := parseRedisLock(keys[i], cmd.Val())
		// The record, not the index, is the truth: a record deleted or
		// already ended is not listed.
		if ok && st.Until.UnixMilli() > now {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Until.Equal(out[j].Until) {
			return out[i].Until.After(out[j].Until)
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// Ping reports whether Redis answers; a failure matches ErrUnavailable.
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return redisError("ping redis", err)
	}
	return nil
}

// Close closes the client the store was built with.
func (s *RedisStore) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

// parseRedisLock reads an HMGET level since until info reply.
func parseRedisLock(key string, v []any) (LockState, bool) {
	if len(v) != 4 {
		return LockState{}, false
	}
	num := func(x any) (int64, bool) {
		s, ok := x.(string)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	level, ok1 := num(v[0])
	since, ok2 := num(v[1])
	until, ok3 := num(v[2])
	if !ok1 || !ok2 || !ok3 {
		return LockState{}, false
	}
	info, _ := v[3].(string)
	return LockState{
		Key:   key,
		Level: int(level),
		Since: time.UnixMilli(since),
		Until: time.UnixMilli(until),
		Info:  info,
	}, true
}

// redisUnavailablePrefixes are server replies that mean "cannot answer now"
// rather than "the request or the script is wrong".
var redisUnavailablePrefixes = []string{
	"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
	"NOREPLICAS", "MOVED", "ASK", "UNBLOCKED",
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
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		// Network errors, timeouts, cancelled contexts, a closed client or
		// an exhausted pool: the server did not answer.
		return true
	}
	msg := rerr.Error()
	for _, p := range redisUnavailablePrefixes {
		if strings.HasPrefix(msg, p+" ") || msg == p {
			return true
		}
	}
	return false
}
