-- Restores the search indexes of 000001 and 000002 (the IP-text and
-- decision indexes did not exist then). Builds every index of every
-- partition under a SHARE lock on audit_events, like the up migration.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

DROP INDEX IF EXISTS audit_events_user_idx, audit_events_device_idx, audit_events_phone_idx,
    audit_events_ip_idx, audit_events_ip_text_idx, audit_events_action_idx,
    audit_events_reason_idx, audit_events_decision_idx;

CREATE INDEX audit_events_user_idx   ON audit_events (user_id, at DESC, id DESC);
CREATE INDEX audit_events_ip_idx     ON audit_events (ip_addr, at DESC, id DESC);
CREATE INDEX audit_events_device_idx ON audit_events (device, at DESC, id DESC);
CREATE INDEX audit_events_action_idx ON audit_events (action, at DESC, id DESC);
CREATE INDEX audit_events_reason_idx ON audit_events (reason, at DESC, id DESC);
CREATE INDEX audit_events_phone_idx  ON audit_events (phone, at DESC, id DESC)
    WHERE phone IS NOT NULL;
