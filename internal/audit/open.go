package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresConfig configures OpenPostgres; zero fields get the defaults
// stated on each.
type PostgresConfig struct {
	// URL is the database URL (postgres:// or postgresql://, or a
	// key=value DSN). Pool settings in it (pool_max_conns, ...) apply to
	// the write pool; the read pool takes ReadConns.
	URL string
	// Store configures the store (retention, maintenance).
	Store PGConfig
	// ReadConns bounds the connections audit reads (GET /v1/audit, the
	// review pages, exports) may hold at once, in a pool of their own, so
	// that readers never take the connections the writer and the
	// readiness probe need. Readers beyond it wait, within ReadTimeout.
	// Default 4.
	ReadConns int32
	// ReadTimeout bounds one read query: the read pool's
	// statement_timeout (Postgres cancels a slow query) and, a second
	// later, the client side's deadline (a Postgres that does not answer
	// at all), waiting for a connection included. Default 10s.
	ReadTimeout time.Duration
	// ConnectTimeout bounds opening one connection when the URL sets no
	// connect_timeout. Default 5s.
	ConnectTimeout time.Duration
}

// Defaults of PostgresConfig.
const (
	DefaultReadConns      = 4
	DefaultReadTimeout    = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
)

// OpenPostgres returns a PGStore over two pools on cfg.URL, whose
// database must be migrated (Migrate up): one for writes, maintenance and
// pings, one bounded pool for reads with a statement timeout. It does not
// wait for Postgres to answer (pools connect lazily), so Guard starts and
// spools while the database is down. Close closes both pools. Errors: an
// unparseable URL (the message may repeat the URL: callers hide its
// password).
func OpenPostgres(ctx context.Context, logger *slog.Logger, cfg PostgresConfig) (*PGStore, error) {
	if cfg.ReadConns <= 0 {
		cfg.ReadConns = DefaultReadConns
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	wcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if wcfg.ConnConfig.ConnectTimeout <= 0 {
		wcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	rcfg := wcfg.Copy()
	rcfg.MaxConns = cfg.ReadConns
	rcfg.MinConns = 0
	rcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.ReadTimeout.Milliseconds(), 10)
	rcfg.ConnConfig.RuntimeParams["application_name"] = "guard-audit-read"
	if _, ok := wcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		wcfg.ConnConfig.RuntimeParams["application_name"] = "guard-audit-write"
	}
	write, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres write pool: %w", err)
	}
	read, err := pgxpool.NewWithConfig(ctx, rcfg)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("postgres read pool: %w", err)
	}
	s := NewPGStore(logger, write, cfg.Store)
	s.read = read
	s.readTimeout = cfg.ReadTimeout + time.Second
	s.owned = true
	return s, nil
}

// Close closes the pools OpenPostgres opened; a store from NewPGStore
// leaves its pool to the caller. Writes, reads and maintenance must have
// stopped.
func (s *PGStore) Close() {
	if !s.owned {
		return
	}
	s.read.Close()
	s.pool.Close()
}

// ReadStats are the read pool's numbers: connections in use and how many
// waits for one there have been.
type ReadStats struct {
	InUse, Max int32
	Waits      int64
}

// ReadStats returns the read pool's state.
func (s *PGStore) ReadStats() ReadStats {
	st := s.read.Stat()
	return ReadStats{InUse: st.AcquiredConns(), Max: st.MaxConns(), Waits: st.EmptyAcquireCount()}
}

// readContext bounds one read on the client side as well: a Postgres that
// does not answer at all never runs statement_timeout.
func (s *PGStore) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.readTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, s.readTimeout, errReadTimeout)
}

var errReadTimeout = errors.New("audit read timed out")
