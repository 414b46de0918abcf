-- Drops the phone column (and its index with it): the phone numbers of the
-- audit trail are lost.
DROP INDEX IF EXISTS audit_events_phone_idx;
ALTER TABLE audit_events DROP COLUMN IF EXISTS phone;
