package audit

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/guardhq/guard/migrations"
)

// Migration directions accepted by Migrate.
const (
	MigrateUp      = "up"      // apply every pending migration
	MigrateDown    = "down"    // revert the newest applied migration (one step)
	MigrateVersion = "version" // change nothing, report the version
)

// Migrate runs Guard's embedded migrations (package migrations) against the
// Postgres database at databaseURL (postgres:// or postgresql://; pgx5:// is
// accepted as is). direction is MigrateUp, MigrateDown or MigrateVersion.
// "down" reverts one migration only, so a slip of the finger never drops the
// whole audit trail in one go. It returns the schema version afterwards
// (0 when no migration is applied) and whether the schema is dirty (a
// migration failed half-way; fix it by hand, then force the version with the
// migrate CLI). Nothing to do is not an error. When ctx ends, the running
// migration is finished and the rest are skipped, and ctx's error returned.
func Migrate(ctx context.Context, databaseURL, direction string) (version uint, dirty bool, err error) {
	switch direction {
	case MigrateUp, MigrateDown, MigrateVersion:
	default:
		return 0, false, fmt.Errorf("migrate: unknown direction %q (want up, down or version)", direction)
	}
	dbURL, err := pgx5URL(databaseURL)
	if err != nil {
		return 0, false, err
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return 0, false, fmt.Errorf("migrate: open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, dbURL)
	if err != nil {
		return 0, false, fmt.Errorf("migrate: connect: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			m.GracefulStop <- true
		case <-done:
		}
	}()

	switch direction {
	case MigrateUp:
		err = m.Up()
	case MigrateDown:
		// At version 0 there is nothing to revert (Steps would report a
		// missing file).
		if _, _, verr := m.Version(); errors.Is(verr, migrate.ErrNilVersion) {
			break
		}
		err = m.Steps(-1)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return 0, false, fmt.Errorf("migrate %s: %w", direction, err)
	}
	if ctx.Err() != nil {
		return 0, false, fmt.Errorf("migrate %s: %w", direction, ctx.Err())
	}
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrate: read version: %w", err)
	}
	return version, dirty, nil
}

// pgx5URL turns a postgres:// URL into the pgx5:// form golang-migrate's
// pgx/v5 driver is registered under.
func pgx5URL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("migrate: parse database url: %w", err)
	}
	switch u.Scheme {
	case "postgres", "postgresql", "pgx5":
		u.Scheme = "pgx5"
		return u.String(), nil
	default:
		return "", fmt.Errorf("migrate: database url scheme %q is not postgres://", u.Scheme)
	}
}
