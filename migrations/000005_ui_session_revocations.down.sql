-- Drops the shared review sign-outs: afterwards a sign-out holds on the
-- instance that took it only, as before 000005.
DROP TABLE IF EXISTS ui_session_revocations;
