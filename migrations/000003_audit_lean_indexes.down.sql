-- Restores the search indexes of 000001 and 000002 (the IP-text and
-- decision indexes did not exist then). Like the up migration: builds
-- every index of every partition under a SHARE lock (searches go on,
-- writes wait), with the indexes being replaced renamed first and dropped
-- last, after maintenance's advisory lock.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

ALTER INDEX IF EXISTS audit_events_user_idx RENAME TO audit_events_user_idx_000003;
ALTER INDEX IF EXISTS audit_events_ip_idx RENAME TO audit_events_ip_idx_000003;
ALTER INDEX IF EXISTS audit_events_device_idx RENAME TO audit_events_device_idx_000003;
ALTER INDEX IF EXISTS audit_events_action_idx RENAME TO audit_events_action_idx_000003;
ALTER INDEX IF EXISTS audit_events_reason_idx RENAME TO audit_events_reason_idx_000003;
ALTER INDEX IF EXISTS audit_events_phone_idx RENAME TO audit_events_phone_idx_000003;

CREATE INDEX audit_events_user_idx   ON audit_events (user_id, at DESC, id DESC);
CREATE INDEX audit_events_ip_idx     ON audit_events (ip_addr, at DESC, id DESC);
CREATE INDEX audit_events_device_idx ON audit_events (device, at DESC, id DESC);
CREATE INDEX audit_events_action_idx ON audit_events (action, at DESC, id DESC);
CREATE INDEX audit_events_reason_idx ON audit_events (reason, at DESC, id DESC);
CREATE INDEX audit_events_phone_idx  ON audit_events (phone, at DESC, id DESC)
    WHERE phone IS NOT NULL;

DROP INDEX IF EXISTS audit_events_user_idx_000003, audit_events_ip_idx_000003,
    audit_events_device_idx_000003, audit_events_action_idx_000003,
    audit_events_reason_idx_000003, audit_events_phone_idx_000003,
    audit_events_ip_text_idx, audit_events_decision_idx;
