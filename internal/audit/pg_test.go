package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardhq/guard/internal/testenv"
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
	u, drop, err := testenv.CreateDatabase(ctx, "guard_audit_test_")
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

// needPostgres skips (locally) or fails (CI) when the test database is
// unavailable.
func needPostgres(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		testenv.Missing(t, "postgres not available: %v", err)
	}
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
