-- Review page sign-outs shared by every instance on this database: a
-- session cookie is signed with a secret derived from key_secret, so every
-- instance accepts a copy of it; signing out records the session here, and
-- each instance refuses a cookie whose session is recorded (internal/api,
-- ui_session.go). Rows hold the SHA-256 of the session's nonce, never the
-- nonce or the cookie, and are kept until no copy of the cookie can be
-- valid any more; each sign-out deletes the rows past that.
--
-- A new table, which no running Guard reads before it exists: nothing of
-- audit_events is touched or locked.
CREATE TABLE IF NOT EXISTS ui_session_revocations (
    digest bytea PRIMARY KEY,
    until  timestamptz NOT NULL
);
