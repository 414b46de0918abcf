package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/testenv"
)

// OpenTestPG migrates a fresh test database (named from prefix), opens the
// audit store on it and makes today's partitions; the store is closed when
// the test ends. Exported for the api_test files of this directory too.
func OpenTestPG(t *testing.T, prefix string) *audit.PGStore {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.Database(t, prefix)
	if _, _, err := audit.Migrate(ctx, dbURL, audit.MigrateUp); err != nil {
		t.Fatal(err)
	}
	pg, err := audit.OpenPostgres(ctx, slog.New(slog.DiscardHandler), audit.PostgresConfig{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if _, err := pg.Maintain(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	return pg
}
