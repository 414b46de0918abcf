package limits

import (
	"errors"
	"fmt"
	"time"
)

// MaxManualLock is the longest manual lockout a LockRequest may set.
const MaxManualLock = 30 * 24 * time.Hour

// LockRequest sets manual lockouts (an administrator's "lock this key for
// this long"). A manual lockout lives in its own record, beside the record
// that strikes escalate, so that it is not a strike: it never raises the
// level, and a strike during it leaves it in place. Checks consult both
// records (the caller names both among CheckRequest.Locks), so an attempt is
// locked until the later of the two ends. Unlock lifts it like any lock when
// the caller names its key.
type LockRequest struct {
	// Locks are the manual lock records to set; at least one.
	Locks []ManualLock
	// Duration is how long each lock lasts from the store's now; 1ms to
	// MaxManualLock.
	Duration time.Duration
}

// ManualLock names one manual lock record and the strike record beside it.
type ManualLock struct {
	// Key is the manual lock record's key; it is replaced (a second manual
	// lock restarts the first).
	Key string
	// StrikeKey is the lock record that strikes of the same key escalate;
	// Lock reads its level and until and never writes it. May be "". On
	// Redis Cluster it shares Key's slot (the keys carry one hash tag).
	StrikeKey string
	// Indexes are the lockout index keys the lock is added to, as
	// FailureRule.Indexes, so listings by identity find it.
	Indexes []string
	// Info is stored with the record and returned by Lockouts, as
	// FailureRule.Info; at most 512 bytes.
	Info string
}

// validateLock checks a LockRequest the same way for every store.
func validateLock(req *LockRequest) error {
	if req == nil {
		return errors.New("lock: nil request")
	}
	if len(req.Locks) == 0 {
		return errors.New("lock: no locks")
	}
	if req.Duration < time.Millisecond || req.Duration > MaxManualLock {
		return fmt.Errorf("lock: duration %v: must be from 1ms to %v", req.Duration, MaxManualLock)
	}
	for i, l := range req.Locks {
		if l.Key == "" {
			return fmt.Errorf("lock %d: empty key", i)
		}
		if l.Key == l.StrikeKey {
			return fmt.Errorf("lock %d: the manual and the strike record must differ", i)
		}
		if len(l.Info) > maxInfo {
			return fmt.Errorf("lock %d: info of %d bytes: at most %d", i, len(l.Info), maxInfo)
		}
	}
	return nil
}
