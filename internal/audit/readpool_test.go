package audit

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardhq/guard/internal/testenv"
)

// openTestPostgres is OpenPostgres on the package's test database (or on
// dbURL when given), closed when the test ends.
func openTestPostgres(t *testing.T, cfg PostgresConfig) *PGStore {
	t.Helper()
	needPostgres(t, testDB.err)
	if cfg.URL == "" {
		cfg.URL = testDB.url
	}
	s, err := OpenPostgres(context.Background(), discardLogger(), cfg)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Many slow audit readers cannot take the connections the writer and the
// readiness probe need: reads have their own bounded pool, and each read
// ends within ReadTimeout (Postgres cancels it) instead of piling up.
// With one shared pool, 40 readers stuck behind a lock made /readyz say
// postgres: down.
func TestReadersDoNotStarveWrites(t *testing.T) {
	s := openTestPostgres(t, PostgresConfig{ReadConns: 2, ReadTimeout: 700 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Maintain(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A transaction holding an exclusive lock on the table makes every
	// read wait, as a slow query on a loaded database would.
	locker, err := pgx.Connect(ctx, testDB.url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, "LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const readers = 40
	var wg sync.WaitGroup
	var failed atomic.Int64
	var slowest atomic.Int64
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if _, err := s.Query(ctx, Filter{Limit: 10}); err != nil {
				failed.Add(1)
			}
			if d := int64(time.Since(t0)); d > slowest.Load() {
				slowest.Store(d)
			}
		}()
	}
	// Meanwhile the write pool answers at once.
	time.Sleep(100 * time.Millisecond)
	for i := range 5 {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := s.Ping(pctx)
		pcancel()
		if err != nil {
			t.Fatalf("ping %d with %d readers waiting: %v", i, readers, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := s.ReadStats(); st.InUse > 2 || st.Max != 2 {
		t.Errorf("read pool %+v, want at most 2 connections", st)
	}
	wg.Wait()
	if got := failed.Load(); got != readers {
		t.Errorf("%d of %d reads behind the lock failed, want all (statement or client timeout)", got, readers)
	}
	// 40 readers on 2 connections, each cancelled after 0.7 s by Postgres
	// (or after 1.7 s on the client side, waiting for a connection
	// included): a waiter may queue behind several of them, but none waits
	// unboundedly. Reads served one after the other would take 14 s for
	// the last; the bound leaves a loaded -race run room above the 1.7 s
	// (2.3 s was seen once with a 2 s bound).
	if d := time.Duration(slowest.Load()); d > 5*time.Second {
		t.Errorf("slowest read took %v, want about its ReadTimeout plus a second", d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock gone, reads work.
	if _, err := s.Query(ctx, Filter{Limit: 10}); err != nil {
		t.Errorf("read after the lock: %v", err)
	}
}

// A Postgres that stops answering (frozen, or a network partition) makes
// an audit read fail after ReadTimeout plus a second instead of hanging:
// statement_timeout never runs when the server does not see the query.
func TestReadOnFrozenPostgresTimesOut(t *testing.T) {
	needPostgres(t, testDB.err)
	u, err := url.Parse(testDB.url)
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.NewFreezeProxy(t, u.Host)
	u.Host = px.Addr()
	s := openTestPostgres(t, PostgresConfig{URL: u.String(), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(px.Close) // before s.Close: a frozen connection never says goodbye
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Query(ctx, Filter{Limit: 1}); err != nil {
		t.Fatalf("read through the proxy: %v", err)
	}
	px.Freeze()
	t0 := time.Now()
	_, err = s.Query(ctx, Filter{Limit: 1})
	took := time.Since(t0)
	if err == nil {
		t.Fatal("read from a frozen Postgres succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want a deadline error", err)
	}
	if took > 5*time.Second {
		t.Errorf("read from a frozen Postgres took %v, want about 1.3s", took)
	}
}
