// Package testenv gives Guard's tests the real servers they run against:
// the shared Redis and Postgres (under a fresh key prefix or a fresh
// database, so tests never touch each other's data), private redis-server
// instances that a test may kill or pause, and the team's rule for a
// missing server: skip locally, fail under CI.
//
// It is for tests only: import it from _test.go files, never from
// production code. internal/limits, whose non-test code imports no other
// internal package, imports it from its tests alone; that rule concerns the
// code that ships, not its tests.
//
// Every helper takes a testing.TB and registers its own Cleanup.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// Default server addresses, overridden by GUARD_TEST_REDIS_URL and
// GUARD_TEST_DATABASE_URL.
const (
	defaultRedisURL    = "redis://127.0.0.1:6379/0"
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
)

// Missing reports a server or tool the test needs but cannot reach: it
// skips the test locally and fails it when the environment variable CI is
// set (CI=true in CI), so CI never passes by skipping.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	tb.Skipf("%s; skipping (start it, or set GUARD_TEST_REDIS_URL / GUARD_TEST_DATABASE_URL)", msg)
}

// RedisURL is the shared test Redis: GUARD_TEST_REDIS_URL, default
// redis://127.0.0.1:6379/0. Tests use it only under a fresh key prefix
// (see Redis) and never flush, pause or reconfigure it.
func RedisURL() string {
	if u := os.Getenv("GUARD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return defaultRedisURL
}

// DatabaseURL is the shared test Postgres server's admin database:
// GUARD_TEST_DATABASE_URL, default postgres@127.0.0.1:5432/postgres. Tests
// create their own databases on it (see Database, CreateDatabase).
func DatabaseURL() string {
	if u := os.Getenv("GUARD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultDatabaseURL
}
