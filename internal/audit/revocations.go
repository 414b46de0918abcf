package audit

import (
	"context"
	"fmt"
	"time"
)

// Review page sign-outs, shared by the instances of one database
// (ui_session_revocations, migration 000005). A session is named by the
// SHA-256 of its nonce (internal/api); the store never sees the nonce.

// RevokeSession records the session of digest as signed out until until,
// when no copy of its cookie can be valid any more, and deletes the
// records past theirs.
func (s *PGStore) RevokeSession(ctx context.Context, digest []byte, until time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO ui_session_revocations (digest, until) VALUES ($1, $2)
		ON CONFLICT (digest) DO UPDATE SET until = greatest(ui_session_revocations.until, excluded.until)`,
		digest, until)
	if err != nil {
		return fmt.Errorf("revoke review session: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM ui_session_revocations WHERE until < now()`); err != nil {
		return fmt.Errorf("prune review sign-outs: %w", err)
	}
	return nil
}

// SessionRevoked reports whether the session of digest is recorded as
// signed out (and its record not yet past).
func (s *PGStore) SessionRevoked(ctx context.Context, digest []byte) (bool, error) {
	var revoked bool
	err := s.read.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ui_session_revocations
		WHERE digest = $1 AND until >= now())`, digest).Scan(&revoked)
	if err != nil {
		return false, fmt.Errorf("read review sign-outs: %w", err)
	}
	return revoked, nil
}
