-- The audit trail: one row per decision, report and admin action.
--
-- Partitioned by day on "at" so retention is DROP TABLE of whole partitions
-- (no bulk DELETE, no bloat). Partitions are named audit_events_YYYYMMDD
-- (UTC) and created ahead of time by the application's maintenance
-- (audit.PGStore.Maintain); rows whose day has no partition land in
-- audit_events_default, which maintenance reports (metric/alert) and re-homes.
--
-- A unique index on a partitioned table must contain the partition key, so
-- the primary key is (at, id). Replays stay idempotent because an event's id
-- is deterministic and its "at" never changes between replays: fresh batches
-- are a plain COPY (a unique violation sends the batch to the dedup path),
-- and replays and retries copy into a temporary staging table and run
-- INSERT ... SELECT ... ON CONFLICT DO NOTHING.
CREATE TABLE audit_events (
    at             timestamptz NOT NULL,
    id             text COLLATE "C" NOT NULL,
    kind           text NOT NULL,
    action         text,
    decision       text,
    reason         text,
    outcome        text,
    user_id        text,
    -- ip is the identifier as stored (an address, or its keyed hash when
    -- audit.pseudonymize is on); ip_addr is the parsed address, NULL when ip
    -- is not one, so CIDR filters can use inet <<= on an index.
    ip             text,
    ip_addr        inet,
    device         text,
    rule           text,
    retry_after_ms bigint,
    lockout_until  timestamptz,
    degraded       boolean,
    dry_run        boolean,
    api_key        text,
    decision_id    text,
    instance       text,
    note           text,
    PRIMARY KEY (at, id)
) PARTITION BY RANGE (at);

CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;

-- Time-range scans over days of rows: BRIN is tiny because rows arrive in
-- time order. The primary key (at, id), scanned backwards, serves the
-- unfiltered newest-first listing and its keyset cursor.
CREATE INDEX audit_events_at_brin ON audit_events USING brin (at);

-- One b-tree per searchable identifier, ordered like the API's listing so a
-- filtered page is an index range scan that stops after "limit" rows.
CREATE INDEX audit_events_user_idx   ON audit_events (user_id, at DESC, id DESC);
CREATE INDEX audit_events_ip_idx     ON audit_events (ip_addr, at DESC, id DESC);
CREATE INDEX audit_events_device_idx ON audit_events (device, at DESC, id DESC);
CREATE INDEX audit_events_action_idx ON audit_events (action, at DESC, id DESC);
-- Rare reasons (denylisted, locked_out, ...) are what investigations look
-- for; without this index they would scan every recent allow.
CREATE INDEX audit_events_reason_idx ON audit_events (reason, at DESC, id DESC);
