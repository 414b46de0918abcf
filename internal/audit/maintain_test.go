package audit

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardhq/guard/internal/testenv"
)

// An event written while Maintain runs, for a day that has no partition
// yet (a fresh database, or maintenance that did not run for days), lands
// in the default partition. Maintain must still create that day's
// partition and re-home the row, rather than fail (Postgres refuses a
// partition whose range the default partition holds rows of) and leave
// the day in the default partition until the next run, an hour later.
func TestMaintainWithConcurrentInsertIntoDefault(t *testing.T) {
	ctx := context.Background()
	// A retention that drops nothing the other tests created.
	s := NewPGStore(discardLogger(), testPool(t), PGConfig{Retention: 1_000_000 * time.Hour, PartitionsAhead: 1})
	day := time.Date(2034, 6, 15, 0, 0, 0, 0, time.UTC)
	for i := -1; i <= 1; i++ {
		if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+partitionName(day.AddDate(0, 0, i))); err != nil {
			t.Fatal(err)
		}
	}
	// Another instance's insert into the default partition, not yet
	// committed when Maintain starts.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	late := Event{ID: "late-1", At: day.Add(10 * time.Hour), Kind: KindCheck}
	if _, err := tx.Exec(ctx, `INSERT INTO audit_events (at, id, kind) VALUES ($1, $2, $3)`, late.At, late.ID, late.Kind); err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep MaintenanceReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := s.Maintain(ctx, day.Add(12*time.Hour))
		done <- result{rep, err}
	}()
	// Let Maintain get as far as it can before the insert commits.
	select {
	case r := <-done:
		t.Fatalf("maintain finished (%+v, %v) while an insert into the partitioned table was open", r.rep, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("maintain with a concurrent insert into the default partition: %v", r.err)
	}
	var where string
	if err := s.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM audit_events WHERE id = $1`, late.ID).Scan(&where); err != nil {
		t.Fatal(err)
	}
	if want := partitionName(day); where != want {
		t.Errorf("got the event in %s, want %s", where, want)
	}
}

// Maintenance that fails (Postgres not up yet when Guard starts, or not
// migrated yet) is retried soon, not an interval (an hour) later, while
// events for a day without a partition pile up in the default partition.
func TestRunMaintenanceRetriesSoonAfterFailure(t *testing.T) {
	needPostgres(t, testDB.err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := testenv.Database(t, "guard_audit_maintretry_")
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reports := make(chan MaintenanceReport, 10)
	s := NewPGStore(discardLogger(), pool, PGConfig{MaintenanceInterval: time.Hour,
		MaintenanceRetry: 20 * time.Millisecond, OnMaintain: func(r MaintenanceReport) { reports <- r }})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.RunMaintenance(runCtx) }()
	// The first run fails: the schema is not there yet.
	time.Sleep(50 * time.Millisecond)
	if _, _, err := Migrate(ctx, u, MigrateUp); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reports:
		if len(r.Created) == 0 {
			t.Errorf("got report %+v, want today's partitions created", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("maintenance did not run again after failing")
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v from RunMaintenance, want context.Canceled", err)
	}
}

// Two Guard instances maintaining at once, while events arrive: both runs
// succeed, each partition is created once, and every event lands in its
// day's partition.
func TestMaintainConcurrentInstances(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	cfg := PGConfig{Retention: 1_000_000 * time.Hour, PartitionsAhead: 2}
	a, b := NewPGStore(discardLogger(), pool, cfg), NewPGStore(discardLogger(), pool, cfg)
	now := time.Date(2035, 2, 20, 23, 59, 59, 0, time.UTC) // a second before midnight
	for i := -1; i <= 3; i++ {
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+partitionName(now.AddDate(0, 0, i))); err != nil {
			t.Fatal(err)
		}
	}
	evs := genEvents("cc", 200, now, 10*time.Millisecond) // across midnight
	errs := make(chan error, 3)
	created := make(chan []string, 2)
	for _, s := range []*PGStore{a, b} {
		go func() {
			rep, err := s.Maintain(ctx, now)
			created <- rep.Created
			errs <- err
		}()
	}
	go func() { errs <- a.Insert(ctx, evs) }()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent maintain/insert: %v", err)
		}
	}
	var all []string
	for range 2 {
		all = append(all, <-created...)
	}
	// The insert may have landed in the default partition first; then the
	// next run moves it, as RunMaintenance would an hour (or a retry) later.
	if _, err := a.Maintain(ctx, now); err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	want := []string{partitionName(now.AddDate(0, 0, -1)), partitionName(now),
		partitionName(now.AddDate(0, 0, 1)), partitionName(now.AddDate(0, 0, 2))}
	if !slices.Equal(all, want) {
		t.Errorf("got created %v, want each of %v once", all, want)
	}
	rows, err := pool.Query(ctx, `SELECT tableoid::regclass::text, count(*) FROM audit_events GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		got[name] = n
	}
	if w := map[string]int{partitionName(now): 100, partitionName(now.AddDate(0, 0, 1)): 100}; !maps.Equal(got, w) {
		t.Errorf("got rows per partition %v, want %v", got, w)
	}
}
