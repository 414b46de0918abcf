package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
)

const migrateHelp = `
Applies (up), reverts one step of (down) or reports (version) the audit
trail's Postgres schema. The migrations are embedded in the binary. "down"
reverts only the newest migration, so one slip never drops the whole trail.

The database comes from --database-url, else GUARD_DATABASE_URL, else the
config file's database_url (--config or GUARD_CONFIG).`

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "up|down|version [flags]", migrateHelp)
	dbURL := fs.String("database-url", "", "Postgres URL (default: GUARD_DATABASE_URL or the config file's database_url)")
	configPath := fs.String("config", "", "config file (default: GUARD_CONFIG)")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	// Accept flags after the direction too ("guard migrate up --database-url ...").
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("migrate: give a direction: up, down or version")
	}
	direction := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("migrate: unexpected argument %q", fs.Arg(0))
	}
	switch direction {
	case audit.MigrateUp, audit.MigrateDown, audit.MigrateVersion:
	default:
		return fmt.Errorf("migrate: unknown direction %q (want up, down or version)", direction)
	}
	url := *dbURL
	if url == "" {
		cfg, err := config.Load(*configPath, e.env)
		if err != nil {
			return err
		}
		url = cfg.DatabaseURL
	}
	if url == "" {
		return errors.New("migrate: no database: set --database-url, GUARD_DATABASE_URL or database_url in the config file")
	}
	version, dirty, err := audit.Migrate(ctx, url, direction)
	if err != nil {
		return err
	}
	state := "clean"
	if dirty {
		state = "dirty: a migration failed half-way; repair it by hand before migrating again"
	}
	fmt.Fprintf(e.stdout, "schema version %d (%s)\n", version, state)
	if dirty {
		return errors.New("migrate: schema is dirty")
	}
	return nil
}
