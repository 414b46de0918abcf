-- Drops the audit trail with every partition (they are dropped with their
-- parent). This destroys all audit history.
DROP TABLE IF EXISTS audit_events;
