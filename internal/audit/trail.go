package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// TrailConfig configures OpenTrail.
type TrailConfig struct {
	// DatabaseURL is the Postgres audit trail; "" keeps a bounded
	// in-memory store instead (single process, lost on restart).
	DatabaseURL string
	// Migrate applies the embedded migrations before the store is used.
	Migrate bool
	// Postgres configures the store (retention, maintenance).
	Postgres PGConfig
	// Writer configures the writer; its SpoolDir is used with Postgres
	// only (the memory store never goes down).
	Writer WriterConfig
	// Hooks are the writer's.
	Hooks WriterHooks
}

// Trail is an opened audit trail: the store, the writer that feeds it,
// and the Postgres store when there is one (nil in memory).
type Trail struct {
	Store  Store
	Writer *Writer
	PG     *PGStore
	// Up is whether Postgres answered when the trail was opened (true in
	// memory), for the health gauge until the first poll.
	Up bool
}

// OpenTrail opens the audit trail that cfg names: the memory store without
// a database (said loudly), else Postgres (migrated first with Migrate)
// with a spooling writer. Postgres need not answer yet: events are spooled
// until it does (the caller polls Ping for its health gauge). Errors: a dirty
// or failed migration, an unparseable URL (the message may repeat it:
// callers hide its password), a writer that cannot open its spool.
func OpenTrail(ctx context.Context, logger *slog.Logger, cfg TrailConfig) (*Trail, error) {
	if cfg.DatabaseURL == "" {
		logger.Warn(fmt.Sprintf("NO DATABASE CONFIGURED: the audit trail is kept in memory (at most %d events "+
			"and %d MiB, the oldest evicted) and lost on restart. Set GUARD_DATABASE_URL or database_url for production.",
			DefaultMemoryMax, DefaultMemoryMaxBytes>>20))
		if cfg.Migrate {
			logger.Warn("--migrate ignored: no database URL")
		}
		mem := NewMemoryStore(0)
		wcfg := cfg.Writer
		wcfg.SpoolDir = ""
		w, err := NewWriter(logger, wcfg, mem, cfg.Hooks)
		if err != nil {
			return nil, err
		}
		return &Trail{Store: mem, Writer: w, Up: true}, nil
	}
	if cfg.Migrate {
		v, dirty, err := Migrate(ctx, cfg.DatabaseURL, MigrateUp)
		if err != nil {
			return nil, err
		}
		if dirty {
			return nil, fmt.Errorf("audit schema version %d is dirty: repair it, then run guard migrate up", v)
		}
		logger.Info("audit schema migrated", "version", v)
	}
	pg, err := OpenPostgres(ctx, logger, PostgresConfig{URL: cfg.DatabaseURL, Store: cfg.Postgres})
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	up := true
	if err := pg.Ping(pingCtx); err != nil {
		up = false
		logger.Error("Postgres does not answer at start; audit events are spooled until it does",
			"err", err, "spool_dir", cfg.Writer.SpoolDir)
	} else {
		logger.Info("Postgres audit trail ready")
	}
	w, err := NewWriter(logger, cfg.Writer, pg, cfg.Hooks)
	if err != nil {
		pg.Close()
		return nil, err
	}
	return &Trail{Store: pg, Writer: w, PG: pg, Up: up}, nil
}
