package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardhq/guard/sdk"
)

// PGConfig configures PGStore; zero fields get the documented defaults.
type PGConfig struct {
	// Retention is how long events are kept; Maintain drops every daily
	// partition that ends before now-Retention. Default 2160h (90 days).
	Retention time.Duration
	// PartitionsAhead is how many days after today get a partition ahead of
	// time. Default 3.
	PartitionsAhead int
	// MaintenanceInterval is how often RunMaintenance runs Maintain.
	// Default 1h.
	MaintenanceInterval time.Duration
	// MaintenanceRetry is how soon RunMaintenance runs Maintain again after
	// it failed (Postgres not up yet at start): until it succeeds, a day
	// without a partition keeps its events in the default partition.
	// Default 1m, at most MaintenanceInterval.
	MaintenanceRetry time.Duration
	// Now is the clock for RunMaintenance. Default time.Now.
	Now func() time.Time
	// OnMaintain, if set, receives every Maintain's report (for the
	// default-partition metric and alert).
	OnMaintain func(MaintenanceReport)
}

// PGStore is the Postgres Store: the partitioned audit_events table created
// by the migrations. It is safe for concurrent use.
type PGStore struct {
	logger *slog.Logger
	pool   *pgxpool.Pool // writes, maintenance, pings
	read   *pgxpool.Pool // queries: pool, or OpenPostgres' bounded read pool
	cfg    PGConfig
	// readTimeout bounds a query on the client side (0: only ctx does);
	// owned says Close closes the pools (OpenPostgres opened them).
	readTimeout time.Duration
	owned       bool

	defaultRows atomic.Int64
	// Batches written by each path, for tests and the benchmark's notes.
	directBatches   atomic.Int64 // InsertFresh's plain COPY succeeded
	dedupBatches    atomic.Int64 // Insert's staging + ON CONFLICT path ran
	directConflicts atomic.Int64 // InsertFresh's COPY hit a stored event and fell back
}

// NewPGStore returns a store over pool, whose database must be migrated
// (Migrate up); reads and writes share pool. Guard itself uses
// OpenPostgres, which gives reads a bounded pool of their own.
func NewPGStore(logger *slog.Logger, pool *pgxpool.Pool, cfg PGConfig) *PGStore {
	if cfg.Retention <= 0 {
		cfg.Retention = 2160 * time.Hour
	}
	if cfg.PartitionsAhead <= 0 {
		cfg.PartitionsAhead = 3
	}
	if cfg.MaintenanceInterval <= 0 {
		cfg.MaintenanceInterval = time.Hour
	}
	if cfg.MaintenanceRetry <= 0 {
		cfg.MaintenanceRetry = time.Minute
	}
	cfg.MaintenanceRetry = min(cfg.MaintenanceRetry, cfg.MaintenanceInterval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &PGStore{logger: logger, pool: pool, read: pool, cfg: cfg}
}

// eventColumns is the COPY column list; eventRow must match it.
var eventColumns = []string{
	"at", "id", "kind", "action", "decision", "reason", "outcome", "user_id",
	"ip", "ip_addr", "device", "rule", "retry_after_ms", "lockout_until",
	"degraded", "dry_run", "api_key", "decision_id", "instance", "note", "phone",
}

const selectColumns = `at, id, kind, action, decision, reason, outcome, user_id,
	ip, device, rule, retry_after_ms, lockout_until, degraded, dry_run, api_key,
	decision_id, instance, note, phone`

func eventRow(e Event) []any {
	var addr any
	if a, ok := eventAddr(e.IP); ok {
		addr = a
	}
	return []any{
		e.At, clean(e.ID), clean(e.Kind), nullText(e.Action), nullText(e.Decision),
		nullText(e.Reason), nullText(e.Outcome), nullText(e.User),
		nullText(e.IP), addr, nullText(e.Device), nullText(e.Rule),
		e.RetryAfterMs, e.LockoutUntil, e.Degraded, e.DryRun,
		nullText(e.APIKey), nullText(e.DecisionID), nullText(e.Instance),
		nullText(e.Note), nullText(e.Phone),
	}
}

// nullText maps "" to NULL and makes s storable: Postgres text cannot hold
// NUL or invalid UTF-8, and one such event must not fail its whole batch.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return clean(s)
}

func clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// Insert writes events in one transaction: COPY into a per-connection
// temporary staging table, then one INSERT ... SELECT ... ON CONFLICT DO
// NOTHING into audit_events. COPY alone would fail the whole batch on one
// duplicate; the staging step makes a replayed batch (same id, same at) a
// no-op, at about 0.8x the speed of a plain COPY (docs/performance.md). On
// error nothing of the batch is written. InsertFresh is the faster choice
// for events that were never written before.
func (s *PGStore) Insert(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	s.dedupBatches.Add(1)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("audit insert: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	// ON COMMIT DELETE ROWS empties it for the next batch on this
	// connection without the catalog churn of creating a table per batch.
	if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE IF NOT EXISTS audit_events_staging
		(LIKE audit_events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`); err != nil {
		return fmt.Errorf("audit insert: staging table: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_events_staging"}, eventColumns, rowSource(events)); err != nil {
		return fmt.Errorf("audit insert: copy: %w", err)
	}
	cols := strings.Join(eventColumns, ", ")
	if _, err := tx.Exec(ctx, `INSERT INTO audit_events (`+cols+`)
		SELECT `+cols+` FROM audit_events_staging ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("audit insert: from staging: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("audit insert: commit: %w", err)
	}
	return nil
}

// InsertFresh writes events none of which is expected to be stored yet,
// such as the Writer's batches of newly recorded events, at the speed of a
// plain COPY. It keeps Insert's contract all the same: it runs one COPY
// straight into audit_events, which the primary key (at, id) makes fail as
// a whole, writing nothing, when an event is already stored (or repeated
// in the batch); the batch then goes through Insert's deduplicating path.
// On any other error nothing of the batch is written, unless the error
// left the outcome unknown (a timeout or a lost connection after the
// server received the whole COPY), in which case a retry must use Insert.
func (s *PGStore) InsertFresh(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"audit_events"}, eventColumns, rowSource(events))
	if err == nil {
		s.directBatches.Add(1)
		return nil
	}
	if !uniqueViolation(err) {
		return fmt.Errorf("audit insert: copy: %w", err)
	}
	s.directConflicts.Add(1)
	s.logger.Debug("audit batch holds an event already stored; writing it deduplicated", "events", len(events))
	return s.Insert(ctx, events)
}

// rowSource feeds events to COPY in eventColumns' order.
func rowSource(events []Event) pgx.CopyFromSource {
	i := 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(events) {
			return nil, nil
		}
		e := normalize(events[i])
		i++
		return eventRow(e), nil
	})
}

// uniqueViolation reports whether Postgres refused a write because a row
// with the same key exists (SQLSTATE 23505).
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// Query returns one page of matching events, newest first (ties by ID
// descending), using the keyset (at, id) < cursor, never OFFSET.
func (s *PGStore) Query(ctx context.Context, f Filter) (Page, error) {
	f, err := checkFilter(f)
	if err != nil {
		return Page{}, err
	}
	sql, args := buildQuery(f, f.Limit+1)
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	rows, err := s.read.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit query: %w", err)
	}
	defer rows.Close()
	var page Page
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return Page{}, fmt.Errorf("audit query: scan: %w", err)
		}
		page.Events = append(page.Events, e)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("audit query: %w", err)
	}
	if len(page.Events) > f.Limit {
		page.Events = page.Events[:f.Limit]
		last := page.Events[f.Limit-1]
		page.Next = &Cursor{At: last.At, ID: last.ID}
	}
	return page, nil
}

// Stream calls fn for every matching event, newest first, in keyset pages of
// MaxLimit: constant memory, and no connection or snapshot is held while fn
// (typically an HTTP client) is slow. f.Limit is ignored; f.Cursor, when
// set, starts after it.
func (s *PGStore) Stream(ctx context.Context, f Filter, fn func(Event) error) error {
	return streamPages(ctx, s, f, fn)
}

// Ping reports whether Postgres answers.
func (s *PGStore) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("audit ping: %w", err)
	}
	return nil
}

// buildQuery states matches() in SQL. Equality filters and the ordering
// line up with the (key, at[, id]) indexes of the migrations, scanned
// backwards.
func buildQuery(f Filter, limit int) (string, []any) {
	where, args := buildWhere(f)
	if f.Cursor != nil {
		args = append(args, f.Cursor.At, f.Cursor.ID)
		where = append(where, fmt.Sprintf("(at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	sql := "SELECT " + selectColumns + " FROM audit_events"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	sql += fmt.Sprintf(" ORDER BY at DESC, id DESC LIMIT $%d", len(args))
	return sql, args
}

// buildWhere states matches() in SQL: the conditions (numbered $1..) and
// their arguments; the cursor is left to the caller.
//
// The conditions are shaped for the indexes of migrations 000003 and
// 000004 and must match them (TestQueryPlansUseIndexes holds them to it):
// identifiers and the action are found through b-trees keyed by
// hashtextextended(col, 0), so their condition states the hash (the index
// condition) and the equality (the exact match, as a hash collision may
// bring other rows); the reason and decision indexes leave out the
// common value ('ok', 'allow'), so a filter for any other value also
// states "reason <> 'ok'" as a literal, which lets the planner prove the
// partial index applies even in a prepared statement's generic plan, where
// the value is an unknown $n. Only constants are ever inlined; filter values
// are always parameters.
func buildWhere(f Filter) ([]string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	for _, c := range []struct{ col, v string }{
		{"user_id", f.User}, {"device", f.Device}, {"phone", f.Phone}, {"ip", f.IPText},
		{"action", f.Action},
	} {
		if c.v != "" {
			// The exact match is written so that the planner does not
			// count its selectivity twice: "col = $1" next to the hash
			// condition would be taken as independent of it and square
			// the estimate (a user with 1% of the rows estimated at
			// 0.01%), steering plans to read all of a busy identifier's
			// rows and sort them. Where the hashes are equal, which the
			// first condition ensures, the OR is exactly "col = $1",
			// and it is estimated at about 1.
			h := "hashtextextended(" + c.col + ", 0)"
			add(h+" = hashtextextended(?, 0) AND ("+c.col+" = ? OR "+h+" <> hashtextextended(?, 0))", c.v)
		}
	}
	if f.IPText != "" {
		if _, isAddr := eventAddr(f.IPText); !isAddr {
			// Rows whose ip is not an address have no ip_addr
			// (eventRow): the condition the IP-text index is partial on.
			where = append(where, "ip_addr IS NULL")
		}
	}
	for _, c := range []struct{ col, v, common string }{
		{"id", f.ID, ""}, {"decision", f.Decision, sdk.DecisionAllow},
		{"reason", f.Reason, sdk.ReasonOK}, {"kind", f.Kind, ""},
	} {
		if c.v == "" {
			continue
		}
		add(c.col+" = ?", c.v)
		if c.common != "" && c.v != c.common {
			where = append(where, c.col+" <> '"+c.common+"'")
		}
	}
	if f.IP.IsValid() {
		if f.IP.IsSingleIP() {
			add("ip_addr = ?", f.IP.Addr())
		} else {
			add("ip_addr <<= ?", f.IP)
		}
	}
	if !f.Since.IsZero() {
		add("at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		add("at < ?", f.Until)
	}
	if !f.LockedAfter.IsZero() {
		add("lockout_until > ?", f.LockedAfter)
	}
	return where, args
}

func scanEvent(rows pgx.Rows) (Event, error) {
	var (
		e                                                Event
		action, decision, reason, outcome, user, ip, dev *string
		rule, apiKey, decisionID, instance, note, phone  *string
	)
	err := rows.Scan(&e.At, &e.ID, &e.Kind, &action, &decision, &reason,
		&outcome, &user, &ip, &dev, &rule, &e.RetryAfterMs, &e.LockoutUntil,
		&e.Degraded, &e.DryRun, &apiKey, &decisionID, &instance, &note, &phone)
	if err != nil {
		return Event{}, err
	}
	e.Action, e.Decision, e.Reason, e.Outcome = deref(action), deref(decision), deref(reason), deref(outcome)
	e.User, e.IP, e.Device, e.Rule = deref(user), deref(ip), deref(dev), deref(rule)
	e.APIKey, e.DecisionID, e.Instance, e.Note = deref(apiKey), deref(decisionID), deref(instance), deref(note)
	e.Phone = deref(phone)
	e.At = e.At.UTC()
	if e.LockoutUntil != nil {
		lu := e.LockoutUntil.UTC()
		e.LockoutUntil = &lu
	}
	return e, nil
}
