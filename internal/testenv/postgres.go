package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates an empty database named namePrefix plus a random
// suffix on the shared test Postgres (DatabaseURL) and returns its URL and
// a function dropping it (WITH (FORCE), ignoring errors). It is for
// TestMain, which has no testing.TB; tests use Database. namePrefix must be
// a lowercase SQL identifier.
func CreateDatabase(ctx context.Context, namePrefix string) (dbURL string, drop func(), err error) {
	admin := DatabaseURL()
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, fmt.Errorf("parse database url: %w", err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	name := namePrefix + strings.ToLower(rand.Text()[:12])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// Database creates a fresh empty database (see CreateDatabase) for this
// test and returns its URL; it is dropped when the test ends. It calls
// Missing when Postgres does not answer.
func Database(tb testing.TB, namePrefix string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := DatabaseURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		redacted := admin
		if u, perr := url.Parse(admin); perr == nil {
			redacted = u.Redacted()
		}
		Missing(tb, "no Postgres at %s: %v", redacted, err)
	}
	_ = conn.Close(ctx)
	u, drop, err := CreateDatabase(ctx, namePrefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(drop)
	return u
}
