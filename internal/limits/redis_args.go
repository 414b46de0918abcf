package limits

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// redisArgs is one script call before it is flattened into KEYS and ARGV in
// the order redis.lua's header documents.
type redisArgs struct {
	nonce      string
	cost       int
	dry        bool
	failure    bool
	trustTTL   time.Duration
	rules      []Rule
	locks      []LockRef
	trust      string
	escalation Escalation
	clear      []string
}

// newRedisArgs starts a call; an empty nonce gets a random one so that two
// calls in one millisecond can never write the same log member (which would
// count one entry for two and let Limit+1 attempts through).
func newRedisArgs(nonce string) *redisArgs {
	if nonce == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		nonce = hex.EncodeToString(b[:])
	}
	return &redisArgs{nonce: nonce, cost: 1}
}

// build returns KEYS and ARGV for op ("check", "report" or "unlock").
func (a *redisArgs) build(index, op string) ([]string, []any) {
	nT := 0
	if a.trust != "" {
		nT = 1
	}
	fs := a.escalation.Failures
	keys := make([]string, 0, len(a.rules)+len(a.locks)+nT+2*len(fs)+len(a.clear)+1)
	for _, r := range a.rules {
		keys = append(keys, r.Key)
	}
	for _, l := range a.locks {
		keys = append(keys, l.Key)
	}
	if nT == 1 {
		keys = append(keys, a.trust)
	}
	for _, f := range fs {
		keys = append(keys, f.Key)
	}
	for _, f := range fs {
		keys = append(keys, f.LockKey)
	}
	keys = append(keys, a.clear...)
	keys = append(keys, index)

	ladder := a.escalation.Ladder
	if len(fs) == 0 {
		ladder = nil // unused without failure rules
	}
	args := make([]any, 0, 13+len(ladder)+3*len(a.rules)+len(a.locks)+3*len(fs))
	args = append(args, op, a.nonce,
		len(a.rules), len(a.locks), nT, len(fs), len(a.clear),
		a.cost, redisBool(a.dry), redisBool(a.failure),
		a.trustTTL.Milliseconds(), a.escalation.Decay.Milliseconds(), len(ladder))
	for _, d := range ladder {
		args = append(args, d.Milliseconds())
	}
	for _, r := range a.rules {
		args = append(args, r.Limit, r.Window.Milliseconds(), redisBool(r.Shadow))
	}
	for _, l := range a.locks {
		args = append(args, redisBool(l.SpareIfTrusted))
	}
	for _, f := range fs {
		args = append(args, f.Limit, f.Window.Milliseconds(), f.Info)
	}
	return keys, args
}

func redisBool(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validateRedisCheck rejects a request the script cannot evaluate
// faithfully. The errors are plain (not ErrUnavailable): they are bugs of
// the caller, which validates user input long before this point.
func validateRedisCheck(req *CheckRequest) error {
	if req == nil {
		return errors.New("check: nil request")
	}
	if req.Cost < 1 {
		return fmt.Errorf("check: cost %d below 1", req.Cost)
	}
	for i, r := range req.Rules {
		if err := validateRedisLog(r.Key, r.Limit, r.Window); err != nil {
			return fmt.Errorf("check: rule %d: %w", i, err)
		}
	}
	if err := validateRedisLocks(req.Locks); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if req.DenialFailures != nil {
		if err := validateRedisEscalation(req.DenialFailures); err != nil {
			return fmt.Errorf("check: denial failures: %w", err)
		}
	}
	if err := validateRedisNonce(req.Nonce); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	return nil
}

// validateRedisReport is validateRedisCheck for Report.
func validateRedisReport(req *ReportRequest) error {
	if req == nil {
		return errors.New("report: nil request")
	}
	if req.Failure {
		if err := validateRedisEscalation(&req.Escalation); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	if err := validateRedisLocks(req.Locks); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if req.TrustTTL < 0 {
		return fmt.Errorf("report: trust ttl %v below 0", req.TrustTTL)
	}
	for i, k := range req.Clear {
		if k == "" {
			return fmt.Errorf("report: clear key %d empty", i)
		}
	}
	if err := validateRedisNonce(req.Nonce); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func validateRedisLog(key string, limit int, window time.Duration) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case limit < 1:
		return fmt.Errorf("limit %d below 1", limit)
	case window < time.Millisecond:
		return fmt.Errorf("window %v below 1ms", window)
	}
	return nil
}

func validateRedisLocks(locks []LockRef) error {
	for i, l := range locks {
		if l.Key == "" {
			return fmt.Errorf("lock %d: empty key", i)
		}
	}
	return nil
}

func validateRedisEscalation(e *Escalation) error {
	if len(e.Failures) == 0 {
		return nil
	}
	if len(e.Ladder) == 0 {
		return errors.New("empty ladder")
	}
	for i, d := range e.Ladder {
		if d < time.Millisecond {
			return fmt.Errorf("ladder step %d: %v below 1ms", i, d)
		}
	}
	if e.Decay < 0 {
		return fmt.Errorf("decay %v below 0", e.Decay)
	}
	for i, f := range e.Failures {
		if err := validateRedisLog(f.Key, f.Limit, f.Window); err != nil {
			return fmt.Errorf("failure rule %d: %w", i, err)
		}
		if f.LockKey == "" {
			return fmt.Errorf("failure rule %d: empty lock key", i)
		}
		if len(f.Info) > 512 {
			return fmt.Errorf("failure rule %d: info of %d bytes over 512", i, len(f.Info))
		}
	}
	return nil
}

// validateRedisNonce keeps log members short (≤ 64 bytes) and free of the
// ':' separator; "" is allowed and replaced by a random nonce.
func validateRedisNonce(n string) error {
	if len(n) > 32 {
		return fmt.Errorf("nonce of %d bytes over 32", len(n))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("nonce byte %d (%q) not in [A-Za-z0-9_-]", i, c)
		}
	}
	return nil
}
