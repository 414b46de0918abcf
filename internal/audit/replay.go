package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Reading the trail for a backtest (guard backtest): every check and
// report in a time range, oldest first, over a connection that cannot
// write. Admin events are left out: a backtest replays what callers asked,
// not what operators did.

// DefaultReplayPage is how many events one keyset page of Replay reads.
const DefaultReplayPage = 5000

// ReplayFilter selects the events of a replay.
type ReplayFilter struct {
	// Since (inclusive) and Until (exclusive) bound the events' times;
	// both are required.
	Since, Until time.Time
	// Action, when set, selects one action's events.
	Action string
	// PageSize is the events per query; default DefaultReplayPage.
	PageSize int
}

// ReplayReader reads the trail read-only: its connections run every
// transaction READ ONLY (default_transaction_read_only), so a backtest
// cannot write to the trail whatever it runs.
type ReplayReader struct {
	pool *pgxpool.Pool
}

// OpenReplay connects to the audit database of url read-only (one
// connection). Close releases it.
func OpenReplay(ctx context.Context, url string) (*ReplayReader, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = "guard-backtest"
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &ReplayReader{pool: pool}, nil
}

// Close closes the connection.
func (r *ReplayReader) Close() { r.pool.Close() }

func (f ReplayFilter) where() (string, []any, error) {
	if f.Since.IsZero() || f.Until.IsZero() {
		return "", nil, errors.New("replay: since and until are required")
	}
	sql := "kind IN ('check', 'report') AND at >= $1 AND at < $2"
	args := []any{f.Since, f.Until}
	if f.Action != "" {
		args = append(args, f.Action)
		sql += " AND action = $3"
	}
	return sql, args, nil
}

// Count returns how many events Replay would read (for a progress bar).
func (r *ReplayReader) Count(ctx context.Context, f ReplayFilter) (int64, error) {
	where, args, err := f.where()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM audit_events WHERE "+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("replay count: %w", err)
	}
	return n, nil
}

// Replay calls fn for every check and report of f, oldest first (ties by
// id), in keyset pages on the primary key (at, id): memory stays one page
// whatever the range, and no snapshot is held between pages (events
// written meanwhile past the last page read are included). An error from
// fn stops the replay and is returned.
func (r *ReplayReader) Replay(ctx context.Context, f ReplayFilter, fn func(Event) error) error {
	where, args, err := f.where()
	if err != nil {
		return err
	}
	page := f.PageSize
	if page <= 0 {
		page = DefaultReplayPage
	}
	var last *Event
	buf := make([]Event, 0, page)
	for {
		q, a := "SELECT "+selectColumns+" FROM audit_events WHERE "+where, append([]any(nil), args...)
		if last != nil {
			a = append(a, last.At, last.ID)
			q += fmt.Sprintf(" AND (at, id) > ($%d, $%d)", len(a)-1, len(a))
		}
		a = append(a, page)
		q += fmt.Sprintf(" ORDER BY at, id LIMIT $%d", len(a))
		rows, err := r.pool.Query(ctx, q, a...)
		if err != nil {
			return fmt.Errorf("replay query: %w", err)
		}
		buf = buf[:0]
		for rows.Next() {
			e, err := scanEvent(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("replay scan: %w", err)
			}
			buf = append(buf, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("replay query: %w", err)
		}
		for i := range buf {
			if err := fn(buf[i]); err != nil {
				return err
			}
		}
		if len(buf) < page {
			return nil
		}
		e := buf[len(buf)-1]
		last = &e
	}
}
