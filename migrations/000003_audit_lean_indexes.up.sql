-- Leaner search indexes: each audit row used to pay for seven b-trees, and
-- the ones on random identifiers and on (action, at DESC, id DESC) were most
-- of Postgres's CPU per row (docs/performance.md, "Postgres CPU per audit
-- row"). Every filter of GET /v1/audit is still an index range scan that
-- stops after "limit" rows; the queries that use these indexes are stated
-- in internal/audit/postgres.go (buildWhere), which must match them.
--
-- On a big trail this builds every index of every partition in one
-- transaction, holding a SHARE lock on the partitions: searches go on,
-- writes wait (Guard spools meanwhile). The old indexes are renamed out of
-- the way first and dropped last, because DROP INDEX takes an ACCESS
-- EXCLUSIVE lock, which would stop searches too from there to the commit.
-- docs/operations.md says how to build the partitions' indexes beforehand
-- with CREATE INDEX CONCURRENTLY so that this migration only attaches them.
--
-- As in 000002: take partition maintenance's advisory lock first (held until
-- this file's implicit transaction ends), so a live Guard's maintenance and
-- this migration wait for each other instead of deadlocking.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

ALTER INDEX IF EXISTS audit_events_user_idx RENAME TO audit_events_user_idx_000002;
ALTER INDEX IF EXISTS audit_events_ip_idx RENAME TO audit_events_ip_idx_000002;
ALTER INDEX IF EXISTS audit_events_device_idx RENAME TO audit_events_device_idx_000002;
ALTER INDEX IF EXISTS audit_events_action_idx RENAME TO audit_events_action_idx_000002;
ALTER INDEX IF EXISTS audit_events_reason_idx RENAME TO audit_events_reason_idx_000002;
ALTER INDEX IF EXISTS audit_events_phone_idx RENAME TO audit_events_phone_idx_000002;

-- Identifiers are only ever matched by equality, so their b-trees are keyed
-- by a 64-bit hash of the identifier and the time, (hash, at): 24-byte
-- entries compared as integers (no collation, no detoasting) instead of
-- (text, at, id) entries of 60 bytes and more, which halves what the random
-- insertion into each of them costs a row. The query states both
-- "hashtextextended(col, 0) = hashtextextended($1, 0)" (the index
-- condition) and the exact match on col (a hash collision costs a row
-- filtered out, never a wrong result). hashtextextended is the function
-- hash partitioning routes text rows with, which pg_upgrade relies on
-- staying the same across releases, as this index does. Without id in the
-- key, ties within one millisecond are put in order on the fly (an
-- Incremental Sort of each tie), and the keyset cursor becomes "at <= $t"
-- in the index with the exact (at, id) comparison as a filter. Partial:
-- rows without the identifier never enter the index.
CREATE INDEX audit_events_user_idx ON audit_events (hashtextextended(user_id, 0), at)
    WHERE user_id IS NOT NULL;
CREATE INDEX audit_events_device_idx ON audit_events (hashtextextended(device, 0), at)
    WHERE device IS NOT NULL;
CREATE INDEX audit_events_phone_idx ON audit_events (hashtextextended(phone, 0), at)
    WHERE phone IS NOT NULL;

-- Addresses need an ordered key (CIDR filters are ranges of inet), so this
-- one stays on the address itself. Partial: pseudonymised events store no
-- address (ip_addr is NULL), and are found through the next index instead.
CREATE INDEX audit_events_ip_idx ON audit_events (ip_addr, at)
    WHERE ip_addr IS NOT NULL;
-- With audit.pseudonymize the stored ip is a keyed hash, matched exactly
-- (Filter.IPText); before this migration that filter had no index. Only
-- rows whose ip is not an address enter it, so a trail of addresses pays
-- nothing for it.
CREATE INDEX audit_events_ip_text_idx ON audit_events (hashtextextended(ip, 0), at)
    WHERE ip_addr IS NULL AND ip IS NOT NULL;

-- Few distinct actions: ascending, so that each row lands at the end of its
-- action's run of entries (Postgres then splits pages to leave them full)
-- instead of at its start (half-empty pages, twice the splits). A backward
-- scan serves "ORDER BY at DESC, id DESC" just as well.
CREATE INDEX audit_events_action_idx ON audit_events (action, at, id);

-- Reasons and decisions are searched for the rare values (denylisted,
-- locked_out, deny, challenge, ...). The common value of a healthy trail,
-- reason 'ok' and decision 'allow', is left out of these indexes, so most
-- rows pay nothing for them; a query for one of the rare values adds the
-- literal "reason <> 'ok'" ("decision <> 'allow'") so that the planner can
-- use the partial index with a prepared statement's generic plan too. A
-- query for 'ok' ('allow') walks the primary key backwards, newest first,
-- and stops after "limit" matching rows, which on such a trail come almost
-- at once. The literals are sdk.ReasonOK and sdk.DecisionAllow.
CREATE INDEX audit_events_reason_idx ON audit_events (reason, at, id)
    WHERE reason <> 'ok';
CREATE INDEX audit_events_decision_idx ON audit_events (decision, at, id)
    WHERE decision <> 'allow';

DROP INDEX IF EXISTS audit_events_user_idx_000002, audit_events_ip_idx_000002,
    audit_events_device_idx_000002, audit_events_action_idx_000002,
    audit_events_reason_idx_000002, audit_events_phone_idx_000002;
