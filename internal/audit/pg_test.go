package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testDB is the fresh database this test package runs against, created from
// the migrations in TestMain and dropped on exit.
var testDB struct {
	url string
	err error
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	u, drop, err := createTestDatabase(ctx, "guard_audit_test_")
	cancel()
	testDB.url, testDB.err = u, err
	if err == nil {
		if _, _, err := Migrate(context.Background(), u, MigrateUp); err != nil {
			testDB.err = fmt.Errorf("migrate up: %w", err)
		}
	}
	code := m.Run()
	if drop != nil {
		drop()
	}
	return code
}

// adminURL is the server the tests create their databases on.
func adminURL() string {
	if u := os.Getenv("GUARD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
}

// createTestDatabase creates an empty database with a random name and
// returns its URL and a function dropping it.
func createTestDatabase(ctx context.Context, prefix string) (string, func(), error) {
	admin := adminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", admin, err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// needPostgres skips (locally) or fails (CI) when the test database is
// unavailable.
func needPostgres(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("postgres required in CI: %v", err)
	}
	t.Skipf("postgres not available (set GUARD_TEST_DATABASE_URL): %v", err)
}

// testPool returns a pool on the package's test database with audit_events
// emptied and today's partitions created.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	needPostgres(t, testDB.err)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testDB.url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "TRUNCATE audit_events"); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	return pool
}

func testPGStore(t testing.TB, cfg PGConfig) *PGStore {
	t.Helper()
	s := NewPGStore(discardLogger(), testPool(t), cfg)
	if _, err := s.Maintain(context.Background(), time.Now()); err != nil {
		t.Fatalf("maintain: %v", err)
	}
	return s
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
