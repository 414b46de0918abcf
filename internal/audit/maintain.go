package audit

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaintenanceReport says what one Maintain did.
type MaintenanceReport struct {
	// Created and Dropped name the daily partitions created and dropped.
	Created []string
	Dropped []string
	// DefaultRows is how many rows were in audit_events_default when
	// maintenance started: rows whose day had no partition. It should be
	// 0; alert when it is not (a clock far off, a very old spool replayed,
	// or maintenance not running). Maintenance moves them into the right
	// partition (or deletes them when older than the retention).
	DefaultRows int64
}

const (
	partitionPrefix = "audit_events_"
	partitionLayout = "20060102"
	day             = 24 * time.Hour
)

// partitionName names the daily partition holding the UTC day of t.
func partitionName(t time.Time) string {
	return partitionPrefix + t.UTC().Format(partitionLayout)
}

// Maintain keeps the partitions in shape for now: it creates the daily
// partitions from yesterday through PartitionsAhead days ahead, re-homes rows
// found in the default partition into partitions of their own days, and
// drops every partition that ends before now-Retention (and default rows
// that old). It runs in one transaction under an advisory lock, so several
// Guard instances may call it at once. When there is work, it locks
// audit_events (reads and writes wait the milliseconds it takes; creating
// and dropping partitions needs that lock anyway), so a row landing in the
// default partition meanwhile never fails it; it gives up after
// maintainLockTimeout rather than hold writers queued behind a long query.
// Run it at start and hourly (RunMaintenance).
func (s *PGStore) Maintain(ctx context.Context, now time.Time) (MaintenanceReport, error) {
	var rep MaintenanceReport
	now = now.UTC()
	cutoff := now.Add(-s.cfg.Retention)
	cutoffDay := cutoff.Truncate(day)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("audit maintain: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'))`); err != nil {
		return rep, fmt.Errorf("audit maintain: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+strconv.Itoa(int(maintainLockTimeout.Milliseconds()))); err != nil {
		return rep, fmt.Errorf("audit maintain: lock timeout: %w", err)
	}
	p, err := s.plan(ctx, tx, now, cutoff)
	if err != nil {
		return rep, err
	}
	if p.work() {
		// Inserts committed after the plan could put rows in the default
		// partition of a day about to get its partition, which Postgres
		// then refuses to create. Take the lock creating and dropping
		// partitions needs anyway, in one step while holding no lock on
		// audit_events (only a share lock on the default partition, which
		// inserts and queries never conflict with), so an insert that
		// holds a weaker lock and asks for more goes first instead of
		// deadlocking; then plan again with nothing moving.
		if _, err := tx.Exec(ctx, `LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE`); err != nil {
			return rep, fmt.Errorf("audit maintain: lock table: %w", err)
		}
		if p, err = s.plan(ctx, tx, now, cutoff); err != nil {
			return rep, err
		}
	}
	rep.DefaultRows = p.defaultRows
	if rep.DefaultRows > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM audit_events_default WHERE at < $1`, cutoffDay); err != nil {
			return rep, fmt.Errorf("audit maintain: expire default: %w", err)
		}
	}
	for _, d := range p.create {
		if err := createPartition(ctx, tx, d, rep.DefaultRows > 0); err != nil {
			return rep, err
		}
		rep.Created = append(rep.Created, partitionName(d))
	}
	for _, name := range p.drop {
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			return rep, fmt.Errorf("audit maintain: drop %s: %w", name, err)
		}
		rep.Dropped = append(rep.Dropped, name)
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("audit maintain: commit: %w", err)
	}
	s.defaultRows.Store(rep.DefaultRows)
	if rep.DefaultRows > 0 || len(rep.Created) > 0 || len(rep.Dropped) > 0 {
		level := slogInfoOrWarn(rep.DefaultRows)
		s.logger.Log(ctx, level, "audit partitions maintained",
			"created", rep.Created, "dropped", rep.Dropped, "default_rows", rep.DefaultRows)
	}
	if s.cfg.OnMaintain != nil {
		s.cfg.OnMaintain(rep)
	}
	return rep, nil
}

// maintainLockTimeout bounds how long Maintain waits for a lock: writers
// queue behind a waiting ACCESS EXCLUSIVE request, so a long query must
// make maintenance give up (and retry), not stall every audit write.
const maintainLockTimeout = time.Second

// maintenancePlan is what Maintain is to do.
type maintenancePlan struct {
	defaultRows int64
	create      []time.Time // days to create partitions for, oldest first
	drop        []string    // partitions past the retention, sorted
}

func (p maintenancePlan) work() bool {
	return p.defaultRows > 0 || len(p.create) > 0 || len(p.drop) > 0
}

// plan reads what Maintain must do for now: the default partition's rows,
// the missing partitions of the window and of the default rows' days, and
// the partitions that end before cutoff.
func (s *PGStore) plan(ctx context.Context, tx pgx.Tx, now, cutoff time.Time) (maintenancePlan, error) {
	var p maintenancePlan
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM audit_events_default`).Scan(&p.defaultRows); err != nil {
		return p, fmt.Errorf("audit maintain: count default: %w", err)
	}
	days := map[time.Time]bool{}
	for i := -1; i <= s.cfg.PartitionsAhead; i++ { // yesterday too: late events near midnight
		days[now.Truncate(day).Add(time.Duration(i)*day)] = true
	}
	if p.defaultRows > 0 {
		rows, err := tx.Query(ctx, `SELECT DISTINCT date_bin('1 day', at, TIMESTAMPTZ '1970-01-01 00:00:00+00')
			FROM audit_events_default`)
		if err != nil {
			return p, fmt.Errorf("audit maintain: default days: %w", err)
		}
		defDays, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		if err != nil {
			return p, fmt.Errorf("audit maintain: default days: %w", err)
		}
		for _, d := range defDays {
			days[d.UTC()] = true
		}
	}
	existing, err := partitions(ctx, tx)
	if err != nil {
		return p, err
	}
	for d := range days {
		if !existing[partitionName(d)] && d.Add(day).After(cutoff) {
			p.create = append(p.create, d)
		}
	}
	sort.Slice(p.create, func(i, j int) bool { return p.create[i].Before(p.create[j]) })
	for name := range existing {
		d, err := time.Parse(partitionLayout, strings.TrimPrefix(name, partitionPrefix))
		if err != nil {
			continue // not one of ours; leave it alone
		}
		if !d.Add(day).After(cutoff) {
			p.drop = append(p.drop, name)
		}
	}
	sort.Strings(p.drop)
	return p, nil
}

// DefaultRows returns the default partition's row count seen by the last
// Maintain (for a gauge such as guard_audit_default_partition_rows).
func (s *PGStore) DefaultRows() int64 { return s.defaultRows.Load() }

// partitions returns the names of audit_events' partitions, default excluded.
func partitions(ctx context.Context, tx pgx.Tx) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass AND c.relname <> 'audit_events_default'`)
	if err != nil {
		return nil, fmt.Errorf("audit maintain: list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("audit maintain: list partitions: %w", err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// createPartition creates the partition of day d. Postgres refuses to create
// a partition while the default partition holds rows of its range, so those
// rows are moved out first and back in afterwards, in the same transaction.
func createPartition(ctx context.Context, tx pgx.Tx, d time.Time, defaultHasRows bool) error {
	name := partitionName(d)
	from, to := d.Format(time.RFC3339), d.Add(day).Format(time.RFC3339)
	if defaultHasRows {
		if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE IF NOT EXISTS audit_events_rehome
			(LIKE audit_events) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("audit maintain: rehome table: %w", err)
		}
		if _, err := tx.Exec(ctx, `WITH moved AS (
				DELETE FROM audit_events_default WHERE at >= $1 AND at < $2 RETURNING *)
			INSERT INTO audit_events_rehome SELECT * FROM moved`, d, d.Add(day)); err != nil {
			return fmt.Errorf("audit maintain: move default rows of %s: %w", name, err)
		}
	}
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF audit_events FOR VALUES FROM ('%s') TO ('%s')`,
		pgx.Identifier{name}.Sanitize(), from, to)
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("audit maintain: create %s: %w", name, err)
	}
	if defaultHasRows {
		if _, err := tx.Exec(ctx, `INSERT INTO audit_events SELECT * FROM audit_events_rehome;
			TRUNCATE audit_events_rehome`); err != nil {
			return fmt.Errorf("audit maintain: rehome rows of %s: %w", name, err)
		}
	}
	return nil
}

// RunMaintenance runs Maintain now and then every MaintenanceInterval until
// ctx ends; a failure is logged and retried after MaintenanceRetry. It
// returns ctx's error.
func (s *PGStore) RunMaintenance(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		next := s.cfg.MaintenanceInterval
		if _, err := s.Maintain(ctx, s.cfg.Now()); err != nil && ctx.Err() == nil {
			s.logger.Error("audit partition maintenance failed", "err", err, "retry_in", s.cfg.MaintenanceRetry.String())
			next = s.cfg.MaintenanceRetry
		}
		t.Reset(next)
	}
}

func slogInfoOrWarn(defaultRows int64) slog.Level {
	if defaultRows > 0 {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}
