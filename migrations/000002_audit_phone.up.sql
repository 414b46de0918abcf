-- Contract v1.1: audit events carry the phone number of the request (E.164,
-- or its keyed hash under audit.pseudonymize), and GET /v1/audit filters by
-- it (?phone=).
--
-- Adding a nullable column without a default is a catalog change only: no
-- existing row is rewritten, whatever the size of the trail.
-- A running Guard's partition maintenance reads audit_events_default and
-- then locks audit_events; this migration locks audit_events and then its
-- partitions. Taking maintenance's advisory lock first (held until this
-- file's implicit transaction ends) makes the two wait for each other
-- instead of deadlocking, so `guard migrate up` beside a live Guard works.
SELECT pg_advisory_xact_lock(hashtext('guard audit maintenance'));

ALTER TABLE audit_events ADD COLUMN phone text;

-- The phone filter is what an SMS pumping investigation runs (every send to
-- one number, newest first), so it gets a b-tree ordered like the listing,
-- as user_id and device have. Partial: only events that carry a phone enter
-- it, so login and signup traffic without one pays nothing per row, and a
-- trail of few phone events keeps a small index. Queries "phone = $1" imply
-- "phone IS NOT NULL", so the planner uses it for every phone filter.
CREATE INDEX audit_events_phone_idx ON audit_events (phone, at DESC, id DESC)
    WHERE phone IS NOT NULL;
