package limits

import (
	"errors"
	"fmt"
	"time"
)

// Request validation, one copy for every store: the rules of the field docs
// of CheckRequest, ReportRequest, UnlockRequest and LockQuery. The errors
// are plain (never ErrUnavailable): they are bugs of the caller, which
// validates user input long before this point.

// MaxDuration is the longest window, ladder step, decay, trust TTL and
// reservation TTL a store accepts (366 days). The stores compute in
// milliseconds (Lua numbers are doubles, exact to 2^53) and answer
// time.Durations (nanoseconds in an int64, at most about 292 years): a
// counter's reset lies up to two windows ahead and its key lives for two,
// a lock's end a ladder step past now. Far below both limits, so none of
// that arithmetic can overflow or round; internal/abuse refuses longer
// policy durations, and so the config file (docs/configuration.md).
const MaxDuration = 366 * 24 * time.Hour

// maxInfo is the largest FailureRule.Info in bytes.
const maxInfo = 512

// maxNonce is the longest Nonce in bytes.
const maxNonce = 32

func validateCheck(req *CheckRequest) error {
	if req == nil {
		return errors.New("nil request")
	}
	if req.Cost < 1 {
		return fmt.Errorf("cost %d: must be at least 1", req.Cost)
	}
	for i := range req.Rules {
		r := &req.Rules[i]
		if err := validateLog(r.Key, r.Limit, r.Window); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		if err := validateKind(r); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	if err := validateLocks(req.Locks); err != nil {
		return err
	}
	if req.DenialFailures != nil {
		if err := validateEscalation(req.DenialFailures); err != nil {
			return fmt.Errorf("denial failures: %w", err)
		}
	}
	if r := req.Reserve; r != nil {
		if err := validateEscalation(&r.Escalation); err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
		if r.TTL < time.Millisecond || r.TTL > MaxDuration {
			return fmt.Errorf("reserve: ttl %v: must be 1ms to %v", r.TTL, MaxDuration)
		}
		if len(r.Escalation.Failures) > 0 && len(r.Records) == 0 {
			return errors.New("reserve: failure rules without a record key")
		}
		if err := validateRecords(r.Records); err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
	}
	return validateNonce(req.Nonce)
}

func validateReport(req *ReportRequest) error {
	if req == nil {
		return errors.New("nil request")
	}
	if req.Failure || len(req.Records) > 0 {
		if err := validateEscalation(&req.Escalation); err != nil {
			return err
		}
	}
	if err := validateRecords(req.Records); err != nil {
		return err
	}
	if err := validateLocks(req.Locks); err != nil {
		return err
	}
	if req.TrustTTL < 0 || req.TrustTTL > MaxDuration {
		return fmt.Errorf("trust ttl %v: must be 0 to %v", req.TrustTTL, MaxDuration)
	}
	for i, k := range req.Clear {
		if k == "" {
			return fmt.Errorf("clear key %d: empty", i)
		}
	}
	return validateNonce(req.Nonce)
}

func validateUnlock(req *UnlockRequest) error {
	if req == nil {
		return errors.New("nil request")
	}
	for i, k := range req.Locks {
		if k == "" {
			return fmt.Errorf("lock %d: empty key", i)
		}
	}
	for i, k := range req.Failures {
		if k == "" {
			return fmt.Errorf("failure log %d: empty key", i)
		}
	}
	return nil
}

func validateRecords(keys []string) error {
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("record %d: empty key", i)
		}
	}
	return nil
}

func validateLog(key string, limit int, window time.Duration) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case limit < 1:
		return fmt.Errorf("key %q: limit %d: must be at least 1", key, limit)
	case window < time.Millisecond || window > MaxDuration:
		return fmt.Errorf("key %q: window %v: must be 1ms to %v", key, window, MaxDuration)
	}
	return nil
}

// validateKind checks a rule's algorithm and distinct value (kinds.go).
func validateKind(r *Rule) error {
	switch {
	case r.Algorithm > AlgBucket:
		return fmt.Errorf("key %q: unknown algorithm %d", r.Key, r.Algorithm)
	case r.Distinct != "" && len(r.Distinct) != DistinctBytes:
		return fmt.Errorf("key %q: distinct value of %d bytes: want %d", r.Key, len(r.Distinct), DistinctBytes)
	case r.Distinct != "" && r.Algorithm != AlgLog:
		return fmt.Errorf("key %q: a distinct rule has no algorithm but log", r.Key)
	}
	return nil
}

func validateLocks(refs []LockRef) error {
	for i, ref := range refs {
		if ref.Key == "" {
			return fmt.Errorf("lock %d: empty key", i)
		}
	}
	return nil
}

// validateEscalation checks an escalation that has failure rules; one
// without any is never used and always valid.
func validateEscalation(esc *Escalation) error {
	if len(esc.Failures) == 0 {
		return nil
	}
	if len(esc.Ladder) == 0 {
		return errors.New("escalation: empty ladder")
	}
	for i, d := range esc.Ladder {
		if d < time.Millisecond || d > MaxDuration {
			return fmt.Errorf("escalation: ladder step %d: %v: must be 1ms to %v", i, d, MaxDuration)
		}
	}
	if esc.Decay < 0 || esc.Decay > MaxDuration {
		return fmt.Errorf("escalation: decay %v: must be 0 to %v", esc.Decay, MaxDuration)
	}
	for i := range esc.Failures {
		f := &esc.Failures[i]
		if err := validateLog(f.Key, f.Limit, f.Window); err != nil {
			return fmt.Errorf("failure rule %d: %w", i, err)
		}
		if f.Distinct != "" && len(f.Distinct) != DistinctBytes {
			return fmt.Errorf("failure rule %d: distinct value of %d bytes: want %d", i, len(f.Distinct), DistinctBytes)
		}
		if f.Pending != "" && f.Distinct == "" {
			return fmt.Errorf("failure rule %d: a pending key belongs to a distinct rule", i)
		}
		if f.LockKey == "" {
			return fmt.Errorf("failure rule %d: empty lock key", i)
		}
		if len(f.Info) > maxInfo {
			return fmt.Errorf("failure rule %d: info of %d bytes: at most %d", i, len(f.Info), maxInfo)
		}
		// One failure adds one entry to each rule's log, and a success
		// takes a reservation's entry back from each: a log two rules
		// shared would count every failure twice.
		for j := range i {
			if esc.Failures[j].Key == f.Key {
				return fmt.Errorf("failure rule %d: key %q is failure rule %d's too: each failure rule has a log of its own", i, f.Key, j)
			}
		}
		// A pending set is its rule's alone, and no rule's log or set (its
		// own included): a reservation record names what it holds by key,
		// and a store reads a key as one kind.
		if f.Pending != "" {
			for j := range esc.Failures {
				if g := &esc.Failures[j]; g.Key == f.Pending || j != i && g.Pending == f.Pending {
					return fmt.Errorf("failure rule %d: pending key %q is failure rule %d's too", i, f.Pending, j)
				}
			}
		}
	}
	return nil
}

// validateNonce accepts "" or up to 32 bytes of [A-Za-z0-9_-].
func validateNonce(n string) error {
	if len(n) > maxNonce {
		return fmt.Errorf("nonce of %d bytes: at most %d", len(n), maxNonce)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("nonce: byte %d (%q) is not in [A-Za-z0-9_-]", i, c)
		}
	}
	return nil
}

func validateLockQuery(q *LockQuery) error {
	switch {
	case q == nil:
		return errors.New("nil lock query")
	case q.Limit < 1 || q.Limit > 1000:
		return fmt.Errorf("lock query: limit %d: must be 1 to 1000", q.Limit)
	case q.Index == "" && q.Pattern == "":
		return errors.New("lock query: neither index nor pattern")
	}
	return nil
}
