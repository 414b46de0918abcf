package abuse

import (
	"strings"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// Lockout listing page sizes (GET /v1/lockouts limit).
const (
	DefaultLockoutLimit = 100
	MaxLockoutLimit     = 1000
)

// MinManualLock and MaxManualLock bound a manual lockout's duration (the
// store accepts from 1ms; the API's floor is a second).
const (
	MinManualLock = time.Second
	MaxManualLock = limits.MaxManualLock
)

// isManualKey reports whether key is a manual lockout record (manualKind;
// hashes are base64url and never hold '!').
func (g *Guard) isManualKey(key string) bool {
	return strings.HasSuffix(key, "!m") || strings.Contains(key, "!m:")
}

// strikeKeyOf names the strike record of a manual lock record (its key
// without "!m"), "" for any other key: a listing's manual entry answers
// that record's level, the key's level (limits.LockQuery.Partner).
func (g *Guard) strikeKeyOf(key string) string {
	if !g.isManualKey(key) {
		return ""
	}
	if k, ok := strings.CutSuffix(key, "!m"); ok {
		return k
	}
	return strings.Replace(key, "!m:", ":", 1)
}
