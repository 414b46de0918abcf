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
