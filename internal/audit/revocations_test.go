package audit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSessionRevocations: a recorded sign-out is read back by its digest
// alone until its end; a later record of the same session never shortens
// it; a sign-out deletes the records past their end.
func TestSessionRevocations(t *testing.T) {
	needPostgres(t, testDB.err)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testDB.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := NewPGStore(discardLogger(), pool, PGConfig{})
	if _, err := pool.Exec(ctx, `TRUNCATE ui_session_revocations`); err != nil {
		t.Fatal(err)
	}
	revoked := func(d string) bool {
		t.Helper()
		ok, err := s.SessionRevoked(ctx, []byte(d))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	now := time.Now()
	if err := s.RevokeSession(ctx, []byte("a"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !revoked("a") || revoked("b") {
		t.Errorf("after revoking a: a %v, b %v; want true, false", revoked("a"), revoked("b"))
	}
	// An earlier end does not shorten a's record.
	if err := s.RevokeSession(ctx, []byte("a"), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !revoked("a") {
		t.Errorf("a re-revoked with an earlier end: not revoked; want the later end kept")
	}
	// A record past its end is no sign-out, and the next sign-out
	// deletes it.
	if _, err := pool.Exec(ctx, `INSERT INTO ui_session_revocations VALUES ('old', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	if revoked("old") {
		t.Errorf("a record past its end reads as revoked")
	}
	if err := s.RevokeSession(ctx, []byte("c"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ui_session_revocations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d records after the next sign-out; want 2 (a, c: the one past its end deleted)", n)
	}
}
