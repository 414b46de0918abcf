-- The action index keyed by a hash, and no BRIN: after 000003 these were
-- the cheapest cuts left in Postgres's CPU per audit row
-- (docs/performance.md, "Postgres CPU per audit row", the second round).
--
-- (action, at, id) led with a text column: every comparison of a b-tree
-- insertion compared the action under the database collation and then,
-- because a variable-length column comes first, found at and id by walking
-- the index tuple (nocache_index_getattr), which was a fifth of the
-- instructions the index cost a row. (hashtextextended(action, 0), at) has
-- fixed-width columns only, compared as integers, as the identifier indexes
-- of 000003 are, and the query states the hash and the exact match as it
-- does for them (internal/audit/postgres.go, buildWhere). Ties within one
-- millisecond are put in order by an Incremental Sort, as for identifiers;
-- the keyset cursor becomes "at <= $t" in the index. Partial: rows without
-- an action never enter it.
--
-- The BRIN on at served only time ranges, which the primary key (at, id)
-- serves as well (the overview's range scans become a bitmap or index scan
-- of the primary key, or a sequential scan when the range is most of a
-- partition), and on Postgres 15 a BRIN insertion reads the index's
-- metapage and revmap for every row.
--
-- Like 000003: maintenance's advisory lock first; on a big trail this
-- builds the new index on every partition in one transaction under a SHARE
-- lock (searches go on, writes wait; docs/operations.md says how to build
-- it beforehand with CREATE INDEX CONCURRENTLY); the old indexes are
-- renamed out of the way and dropped last, since DROP INDEX takes an
-- ACCESS EXCLUSIVE lock.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

ALTER INDEX IF EXISTS audit_events_action_idx RENAME TO audit_events_action_idx_000003;

CREATE INDEX audit_events_action_idx ON audit_events (hashtextextended(action, 0), at)
    WHERE action IS NOT NULL;

DROP INDEX IF EXISTS audit_events_action_idx_000003, audit_events_at_brin;
