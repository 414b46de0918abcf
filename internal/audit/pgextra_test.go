package audit

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardhq/guard/internal/testenv"
)

func TestMigrateUpDownUp(t *testing.T) {
	needPostgres(t, testDB.err)
	ctx := context.Background()
	u := testenv.Database(t, "guard_audit_migtest_")
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tableExists := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('audit_events') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	phoneExists := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_name = 'audit_events' AND column_name = 'phone')`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	indexDef := func(name string) string {
		var def string
		err := pool.QueryRow(ctx, `SELECT coalesce(pg_get_indexdef(to_regclass($1)), '')`, name).Scan(&def)
		if err != nil {
			t.Fatal(err)
		}
		return def
	}
	// The definition of the user index tells the schemas apart: keyed by
	// the text (000001) or by its hash (000003).
	userIndex := func() string { return indexDef("audit_events_user_idx") }
	// The action index and the BRIN tell 000004 apart from 000003.
	actionIndex := func() string { return indexDef("audit_events_action_idx") }
	brinExists := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('audit_events_at_brin') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const (
		actionText = "CREATE INDEX audit_events_action_idx ON ONLY public.audit_events USING btree (action, at DESC, id DESC)"
		actionAsc  = "CREATE INDEX audit_events_action_idx ON ONLY public.audit_events USING btree (action, at, id)"
		actionHash = "CREATE INDEX audit_events_action_idx ON ONLY public.audit_events USING btree (hashtextextended(action, (0)::bigint), at) WHERE (action IS NOT NULL)"
	)
	const (
		textIndex = "CREATE INDEX audit_events_user_idx ON ONLY public.audit_events USING btree (user_id, at DESC, id DESC)"
		hashIndex = "CREATE INDEX audit_events_user_idx ON ONLY public.audit_events USING btree (hashtextextended(user_id, (0)::bigint), at) WHERE (user_id IS NOT NULL)"
	)
	// The sign-outs table tells 000005 apart from 000004.
	signOuts := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('ui_session_revocations') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	steps := []struct {
		direction    string
		wantVersion  uint
		wantTable    bool
		wantPhone    bool
		wantIndex    string
		wantAction   string
		wantBrin     bool
		wantSignOuts bool
	}{
		{MigrateVersion, 0, false, false, "", "", false, false},
		{MigrateUp, 5, true, true, hashIndex, actionHash, false, true},
		{MigrateUp, 5, true, true, hashIndex, actionHash, false, true}, // nothing to do is not an error
		{MigrateDown, 4, true, true, hashIndex, actionHash, false, false},
		{MigrateDown, 3, true, true, hashIndex, actionAsc, true, false},
		{MigrateDown, 2, true, true, textIndex, actionText, true, false},
		{MigrateDown, 1, true, false, textIndex, actionText, true, false},
		{MigrateDown, 0, false, false, "", "", false, false},
		{MigrateDown, 0, false, false, "", "", false, false},
		{MigrateUp, 5, true, true, hashIndex, actionHash, false, true},
		{MigrateVersion, 5, true, true, hashIndex, actionHash, false, true},
	}
	for i, st := range steps {
		v, dirty, err := Migrate(ctx, u, st.direction)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, st.direction, err)
		}
		if v != st.wantVersion || dirty {
			t.Errorf("step %d %s: got version %d dirty %v, want %d clean", i, st.direction, v, dirty, st.wantVersion)
		}
		if got := tableExists(); got != st.wantTable {
			t.Errorf("step %d %s: got table %v, want %v", i, st.direction, got, st.wantTable)
		}
		if got := phoneExists(); got != st.wantPhone {
			t.Errorf("step %d %s: got phone column %v, want %v", i, st.direction, got, st.wantPhone)
		}
		if got := userIndex(); got != st.wantIndex {
			t.Errorf("step %d %s: got user index %q, want %q", i, st.direction, got, st.wantIndex)
		}
		if got := actionIndex(); got != st.wantAction {
			t.Errorf("step %d %s: got action index %q, want %q", i, st.direction, got, st.wantAction)
		}
		if got := brinExists(); got != st.wantBrin {
			t.Errorf("step %d %s: got BRIN %v, want %v", i, st.direction, got, st.wantBrin)
		}
		if got := signOuts(); got != st.wantSignOuts {
			t.Errorf("step %d %s: got sign-outs table %v, want %v", i, st.direction, got, st.wantSignOuts)
		}
	}
	// The schema works after the round trip.
	s := NewPGStore(discardLogger(), pool, PGConfig{})
	if _, err := s.Maintain(ctx, time.Now()); err != nil {
		t.Fatalf("maintain: %v", err)
	}
	if err := s.Insert(ctx, fixture(time.Now())); err != nil {
		t.Fatalf("insert after up/down/up: %v", err)
	}
	if _, _, err := Migrate(ctx, u, "sideways"); err == nil {
		t.Errorf("got nil error for an unknown direction")
	}
	if _, _, err := Migrate(ctx, "mysql://x/y", MigrateUp); err == nil {
		t.Errorf("got nil error for a non-postgres url")
	}
}

func partitionNames(t *testing.T, s *PGStore) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit_events'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		out = append(out, n)
	}
	return out
}

func TestRetentionDropsPartitions(t *testing.T) {
	ctx := context.Background()
	s := NewPGStore(discardLogger(), testPool(t), PGConfig{Retention: 72 * time.Hour, PartitionsAhead: 1})
	now := time.Date(2031, 3, 10, 12, 0, 0, 0, time.UTC)
	if _, err := s.pool.Exec(ctx, `DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'audit_events'::regclass AND c.relname <> 'audit_events_default'
		LOOP EXECUTE 'DROP TABLE ' || quote_ident(r.relname); END LOOP; END $$`); err != nil {
		t.Fatal(err)
	}
	// Partitions for 2031-02-27 .. 2031-03-07 (made with a long retention),
	// then one event per day from 02-28 to 03-09.
	setup := NewPGStore(discardLogger(), s.pool, PGConfig{Retention: 1000 * time.Hour, PartitionsAhead: 1})
	for d := now.AddDate(0, 0, -10); d.Before(now.AddDate(0, 0, -3)); d = d.AddDate(0, 0, 1) {
		if _, err := setup.Maintain(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var evs []Event
	for i := 10; i >= 1; i-- {
		evs = append(evs, Event{ID: "r" + string(rune('a'+i)), At: now.AddDate(0, 0, -i), Kind: KindCheck})
	}
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Maintain(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	// Days before 2031-03-07 end before now-72h (2031-03-07T12:00Z) and go.
	wantDropped := []string{"audit_events_20310227", "audit_events_20310228", "audit_events_20310301",
		"audit_events_20310302", "audit_events_20310303", "audit_events_20310304",
		"audit_events_20310305", "audit_events_20310306"}
	if !slices.Equal(rep.Dropped, wantDropped) {
		t.Errorf("got dropped %v, want %v", rep.Dropped, wantDropped)
	}
	// Events of 03-08 and 03-09 were in the default partition (no partition
	// existed); maintenance reports them and re-homes them.
	if rep.DefaultRows != 2 {
		t.Errorf("got default rows %d, want 2", rep.DefaultRows)
	}
	wantParts := []string{"audit_events_20310307", "audit_events_20310308", "audit_events_20310309",
		"audit_events_20310310", "audit_events_20310311", "audit_events_default"}
	if got := partitionNames(t, s); !slices.Equal(got, wantParts) {
		t.Errorf("got partitions %v, want %v", got, wantParts)
	}
	page, err := s.Query(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(page.Events), []string{"rb", "rc", "rd"}; !slices.Equal(got, want) {
		t.Errorf("got events %v, want %v", got, want)
	}
	var inDefault int
	s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events_default`).Scan(&inDefault)
	if inDefault != 0 || s.DefaultRows() != 2 {
		t.Errorf("got %d rows left in default (reported %d), want 0 (reported 2)", inDefault, s.DefaultRows())
	}
	// Idempotent: a second run changes nothing.
	rep, err = s.Maintain(ctx, now)
	if err != nil || len(rep.Created)+len(rep.Dropped) != 0 || rep.DefaultRows != 0 {
		t.Errorf("second maintain: got %+v, %v; want no changes", rep, err)
	}
}

// A crashed process leaves a spool whose prefix was already written to
// Postgres and whose last record is torn: the next Writer stores every
// intact event exactly once.
func TestWriterReplaysCrashedSpoolIntoPostgres(t *testing.T) {
	ctx := context.Background()
	store := testPGStore(t, PGConfig{})
	dir := t.TempDir()
	evs := genEvents("c", 300, time.Now().UTC().Add(-time.Minute), time.Millisecond)
	if err := store.Insert(ctx, evs[:120]); err != nil { // written before the crash
		t.Fatal(err)
	}
	sp, err := openSpool(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.append(evs); err != nil {
		t.Fatal(err)
	}
	if err := sp.close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, spoolFileName), os.O_WRONLY|os.O_APPEND, 0)
	f.Write(binary.BigEndian.AppendUint32(nil, 500)) // torn: a header cut short
	f.Close()

	w := newTestWriter(t, WriterConfig{SpoolDir: dir, FlushInterval: 10 * time.Millisecond}, store, WriterHooks{})
	waitFor(t, "spool replayed", func() bool { return w.Backlog() == 0 })
	assertExactlyOnce(t, store.pool, evs)
	// A previous run's records may be stored: replayed through dedup, never
	// a fast COPY that meets them.
	if got := store.pathCounts(); got.conflicts != 0 || got.direct != 0 {
		t.Errorf("got paths %+v, want the replay deduplicated", got)
	}
}

// assertExactlyOnce checks that audit_events holds exactly evs, each once.
func assertExactlyOnce(t *testing.T, pool *pgxpool.Pool, evs []Event) {
	t.Helper()
	var rows, distinct int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT id) FROM audit_events`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != len(evs) || distinct != len(evs) {
		t.Errorf("got %d rows, %d distinct ids; want %d of each", rows, distinct, len(evs))
	}
	want := make([]string, len(evs))
	for i, e := range evs {
		want[i] = e.ID
	}
	var got []string
	r, err := pool.Query(context.Background(), `SELECT id FROM audit_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var id string
		r.Scan(&id)
		got = append(got, id)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("stored ids differ from recorded ids (%d vs %d)", len(got), len(want))
	}
}

func TestPGStoreCleansUnstorableText(t *testing.T) {
	ctx := context.Background()
	s := testPGStore(t, PGConfig{})
	w := newTestWriter(t, WriterConfig{FlushInterval: 10 * time.Millisecond}, s, WriterHooks{})
	evs := genEvents("u", 3, time.Now().UTC(), time.Millisecond)
	evs[1].Note = "nul\x00byte and bad \xff utf8"
	for _, e := range evs {
		w.Record(e)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	page, err := s.Query(ctx, Filter{})
	if err != nil || len(page.Events) != 3 {
		t.Fatalf("got %d events, %v; want 3", len(page.Events), err)
	}
	if got, want := page.Events[1].Note, "nulbyte and bad \uFFFD utf8"; got != want {
		t.Errorf("got note %q, want %q", got, want)
	}
}
