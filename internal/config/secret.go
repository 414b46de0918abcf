package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrKeySecretRequired says what EnsureKeySecret's error says with a Redis
// URL and no key secret (the error itself also names where the Redis was
// configured).
var ErrKeySecretRequired = errors.New("key_secret is required with a Redis URL (every instance and every restart must hash identifiers with the same secret): set GUARD_KEY_SECRET or key_secret, e.g. to the output of openssl rand -hex 32")

// EnsureKeySecret makes up a key secret when none is configured and that is
// safe: with Redis, instances and restarts must hash identifiers alike, so
// a missing secret is an error there (ErrKeySecretRequired's message, at
// the place the Redis was configured: keySecretProblem). serve runs it at
// start; Check and reloads report the same problem.
func (c *Config) EnsureKeySecret() (generated bool, err error) {
	if len(c.Guard.KeySecret) != 0 {
		return false, nil
	}
	if c.Redis.Enabled() {
		return false, c.keySecretProblem()
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return false, fmt.Errorf("generate key secret: %w", err)
	}
	c.Guard.KeySecret = []byte(hex.EncodeToString(b))
	return true, nil
}
