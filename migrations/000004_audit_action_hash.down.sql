-- Restores the action index of 000003 and the BRIN of 000001. Like the up
-- migration: maintenance's advisory lock first, every partition's indexes
-- built under a SHARE lock, the index being replaced renamed first and
-- dropped last.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

ALTER INDEX IF EXISTS audit_events_action_idx RENAME TO audit_events_action_idx_000004;

CREATE INDEX audit_events_action_idx ON audit_events (action, at, id);
CREATE INDEX IF NOT EXISTS audit_events_at_brin ON audit_events USING brin (at);

DROP INDEX IF EXISTS audit_events_action_idx_000004;
