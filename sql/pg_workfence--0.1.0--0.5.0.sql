-- pg_workfence 0.1.0 -> 0.5.0 in one step (ALTER EXTENSION pg_workfence UPDATE
-- from 0.1.0 takes it: PostgreSQL prefers the shortest update path).
--
-- FROZEN once 0.5.0 is released. It is pg_workfence--0.1.0--0.4.0.sql (the
-- 0.1.0 work_claim renamed to workfence.work_claim_retired_0_1_0, not
-- dropped) followed by the comments of pg_workfence--0.4.0--0.5.0.sql,
-- WITHOUT that step's DROP of the retired function. Without this script an
-- update from 0.1.0 would run 0.1.0 -> 0.4.0 -> 0.5.0 in one transaction:
-- rename and drop together, and calls in flight that resolved the 0.1.0
-- work_claim before the update committed failed with XX000 "cache lookup
-- failed for function" (tests/upgrade.rs under load: 2 calls in the first
-- round). A database updated from 0.1.0 keeps the retired function until
-- the next version's update drops it (DROP FUNCTION IF EXISTS).

-- ---- 0.1.0 -> 0.2.0 ----
\echo Use "ALTER EXTENSION pg_workfence UPDATE TO '0.5.0'" to load this file. \quit

-- The view, as sql/views.sql creates it.
CREATE VIEW workfence.work_queue_stats AS
WITH server_time AS MATERIALIZED (
    SELECT pg_catalog.clock_timestamp() AS now
)
SELECT i.queue,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
             AND i.run_at OPERATOR(pg_catalog.<=) t.now) AS pending,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
             AND i.run_at OPERATOR(pg_catalog.>) t.now) AS scheduled,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.lease_until OPERATOR(pg_catalog.>) t.now) AS claimed,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.lease_until OPERATOR(pg_catalog.<=) t.now) AS expired,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'done'::workfence.item_state) AS done,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'failed'::workfence.item_state) AS failed,
       pg_catalog.count(*) FILTER (
           WHERE i.state OPERATOR(pg_catalog.=) 'cancelled'::workfence.item_state) AS cancelled,
       -- An item due at '-infinity' has been due since its enqueue (and
       -- subtracting an infinite timestamp is an error in PostgreSQL 15).
       t.now OPERATOR(pg_catalog.-) pg_catalog.min(
           CASE WHEN pg_catalog.isfinite(i.run_at) THEN i.run_at ELSE i.created_at END)
           FILTER (
               WHERE i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                 AND i.run_at OPERATOR(pg_catalog.<=) t.now) AS oldest_due_age
  FROM workfence.items AS i
 CROSS JOIN server_time AS t
 GROUP BY i.queue, t.now;

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items: how many are in each state, and how long the oldest due item '
    'has waited, by the server''s clock (clock_timestamp(), read once per query). Reads every item '
    '(a scan of workfence.items): for monitoring, not for a hot path. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.work_queue_stats.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.work_queue_stats.pending IS 'Pending items that are due (run_at reached): claimable now.';
COMMENT ON COLUMN workfence.work_queue_stats.scheduled IS 'Pending items not yet due (run_at in the future: scheduled, or a retry backing off).';
COMMENT ON COLUMN workfence.work_queue_stats.claimed IS 'Claimed items whose lease is live (lease_until in the future).';
COMMENT ON COLUMN workfence.work_queue_stats.expired IS 'Claimed items whose lease lapsed: the next claim takes them (the old token stays current until then).';
COMMENT ON COLUMN workfence.work_queue_stats.done IS 'Items finished with work_finish (until purged).';
COMMENT ON COLUMN workfence.work_queue_stats.failed IS 'Items whose attempts are used up: the dead letters (until purged).';
COMMENT ON COLUMN workfence.work_queue_stats.cancelled IS 'Items withdrawn with work_cancel (until purged).';
COMMENT ON COLUMN workfence.work_queue_stats.oldest_due_age IS
    'Server time minus the run_at of the oldest due pending item (its created_at when run_at is -infinity); '
    'NULL when no item is due. How far the workers are behind.';

REVOKE ALL ON TABLE workfence.work_queue_stats FROM PUBLIC;

-- work_claim(queue, owner, lease, max_items) becomes work_claim(..., wait).
-- Not dropped: renamed, so that calls that resolved the name before this
-- update commits still find their function (a DROP made them fail with
-- XX000 "cache lookup failed for function"). The next version's update
-- drops it, when no call can still hold its OID.
ALTER FUNCTION workfence.work_claim(text, text, interval, integer)
    RENAME TO work_claim_retired_0_1_0;

CREATE FUNCTION workfence.work_claim(
	"queue" TEXT,
	"owner" TEXT,
	"lease" interval,
	"max_items" INT DEFAULT 1,
	"wait" interval DEFAULT '0'
) RETURNS TABLE (
	"id" bigint, 
	"key" TEXT, 
	"payload" jsonb, 
	"epoch" bigint, 
	"attempt" INT, 
	"lease_until" timestamp with time zone 
)
VOLATILE PARALLEL UNSAFE  
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_claim_wait_wrapper';

CREATE FUNCTION workfence.work_cancel(
	"queue" TEXT,
	"key" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_cancel_wrapper';

CREATE FUNCTION workfence.work_purge(
	"older_than" interval DEFAULT '7 days',
	"queue" TEXT DEFAULT NULL
) RETURNS bigint
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_purge_wrapper';

CREATE FUNCTION workfence.work_lease_status(
	"id" bigint,
	"owner" TEXT,
	"epoch" bigint
) RETURNS TEXT
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_lease_status_wrapper';

-- Their documentation, as sql/finalize.sql writes it.
COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token) and lease_until = clock_timestamp() + lease. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry in the queue commits or a run_at/lease_until is reached, then claims again; zero rows when wait passes. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 57014 when cancelled while waiting.';

COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
'work_cancel(queue, key) -> boolean. Cancels the item if it is pending or claimed: state cancelled, finished_at = clock_timestamp(), never claimed again; the holder''s token is refused from then on (work_assert: 55000, cancelled). False, changing nothing, when the item is missing or already done, failed or cancelled. Errors: 22004 NULL argument, 22023 bad queue/key.';

COMMENT ON FUNCTION workfence.work_purge(interval, text) IS
'work_purge(older_than interval DEFAULT ''7 days'', queue DEFAULT NULL) -> bigint. Deletes the done, failed and cancelled items whose finished_at is before clock_timestamp() - older_than, in one queue or (NULL) all; returns how many. Never touches pending or claimed items; skips rows another transaction has locked (FOR UPDATE SKIP LOCKED), so it never waits. Ids and epochs are never reused after a purge. Errors: 22004 NULL older_than, 22023 older_than negative, with a negative field or over 3650 days, bad queue.';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, from the newest committed state. A lapsed lease nobody claimed anew is current; a lease handed back (work_release, retryable work_fail) is superseded. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';

-- Privileges and search_path safety. KEEP THIS BLOCK LAST: it covers every
-- function, table, view and sequence in schema workfence that exists when it
-- runs, without naming them (docs/operations.md, "Least privilege").
--
-- Every function runs as the extension's owner (SECURITY DEFINER), so a role
-- needs EXECUTE on the functions it calls and no privilege on the tables: a
-- worker can change an item only through the lease checks. Each function pins
-- search_path to pg_catalog with pg_temp explicitly last, as "Writing SECURITY
-- DEFINER Functions Safely" in the PostgreSQL manual asks, on top of the
-- schema-qualified SQL the functions run: objects a caller puts on its own
-- search_path are never looked up. PostgreSQL grants EXECUTE to PUBLIC by
-- default; that is revoked, so only roles granted a function may call it.
DO $privileges$
DECLARE
    routine pg_catalog.regprocedure;
BEGIN
    FOR routine IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'workfence'::pg_catalog.regnamespace
         ORDER BY p.oid
    LOOP
        -- A catalog name rendered by regprocedure, not user data.
        EXECUTE pg_catalog.format(
            'ALTER ROUTINE %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', routine);
    END LOOP;
END
$privileges$;

REVOKE ALL ON ALL ROUTINES IN SCHEMA workfence FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA workfence FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA workfence FROM PUBLIC;
REVOKE ALL ON SCHEMA workfence FROM PUBLIC;

-- ---- 0.2.0 -> 0.3.0 ----
ALTER TABLE workfence.items
    DROP CONSTRAINT items_attempts_range,
    DROP CONSTRAINT items_claimed_has_lease;

-- ---- 0.3.0 -> 0.4.0 ----
COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token) and lease_until = clock_timestamp() + lease. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE; 57014 when cancelled while waiting.';

COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
'work_release(id, owner, epoch, delay interval DEFAULT ''0'') -> boolean. Hands a claimed item back unfinished: pending again from clock_timestamp() + delay, attempt given back, token dead. False for any token but the current one. Errors: 22004 NULL argument, 22023 bad owner, delay negative or over 365 days (its real length from now: months count as the calendar months that follow).';

COMMENT ON FUNCTION workfence.work_fail(bigint, text, bigint, text, interval) IS
'work_fail(id, owner, epoch, error text, retry_in interval DEFAULT NULL) -> boolean. Records error; pending again after retry_in (NULL: exponential backoff with jitter, 2^n/2..2^n s, at most 1 h) or failed once attempts are used up. False (nothing recorded) for any token but the current one. Errors: 22004 NULL id/owner/epoch/error, 22023 bad owner, retry_in negative or over 365 days (real length from now).';

COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
'work_assert(id, owner, epoch) -> void. Raises SQLSTATE 55000 (lease lost; DETAIL says why) unless the token is current, and holds the item''s row lock (FOR NO KEY UPDATE) to the end of the transaction, so the worker''s own writes in that transaction commit only while it holds the lease. If a savepoint or exception block that held the lock rolls back, COMMIT re-checks the token and fails with 55000 (lease lost before commit) when it is no longer current. Errors: 55000 lease lost, 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, read with the statement''s snapshot (READ COMMITTED: the newest committed state; REPEATABLE READ: the transaction''s snapshot). A lapsed lease nobody claimed anew is current; a lease handed back (work_release, retryable work_fail) is superseded. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';

-- A purge reads what it deletes, not the table (issue 21, item 6).
CREATE INDEX items_finished_idx ON workfence.items (finished_at)
    WHERE state IN ('done', 'failed', 'cancelled');
COMMENT ON INDEX workfence.items_finished_idx IS
    'Purge path: finished items by finished_at, so a purge reads what it deletes, not the table.';

-- Rows inserted with ids or epochs of their own (a data-only restore without
-- the sequences) lift the sequences past them (issue 21, item 10).
CREATE FUNCTION workfence.items_sequence_floor() RETURNS trigger
LANGUAGE plpgsql AS $floor$
BEGIN
    -- Only past the sequence's position: a value nextval already handed out
    -- (an enqueue's own id) never moves it, so no concurrent nextval is undone.
    IF EXISTS (SELECT FROM workfence.items_id_seq AS s
                WHERE NEW.id OPERATOR(pg_catalog.>) s.last_value
                   OR (NEW.id OPERATOR(pg_catalog.=) s.last_value AND NOT s.is_called)) THEN
        PERFORM pg_catalog.setval('workfence.items_id_seq'::pg_catalog.regclass, NEW.id);
    END IF;
    IF EXISTS (SELECT FROM workfence.epoch_seq AS s
                WHERE NEW.epoch OPERATOR(pg_catalog.>) s.last_value
                   OR (NEW.epoch OPERATOR(pg_catalog.=) s.last_value AND NOT s.is_called)) THEN
        PERFORM pg_catalog.setval('workfence.epoch_seq'::pg_catalog.regclass, NEW.epoch);
    END IF;
    RETURN NULL;
END
$floor$;
COMMENT ON FUNCTION workfence.items_sequence_floor() IS
    'Trigger of workfence.items: a row inserted with an id or epoch at or above its sequence''s '
    'position (a restore, a COPY) moves the sequence past it. Not callable by users.';
ALTER FUNCTION workfence.items_sequence_floor()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.items_sequence_floor() FROM PUBLIC;
CREATE TRIGGER items_sequence_floor AFTER INSERT ON workfence.items
    FOR EACH ROW
    WHEN (NEW.epoch IS NOT NULL
          OR NEW.created_at OPERATOR(pg_catalog.<) pg_catalog.transaction_timestamp())
    EXECUTE FUNCTION workfence.items_sequence_floor();

-- ---- 0.4.0 -> 0.5.0, without the DROP ----
-- An expired lease is claimed anew directly (claimed -> claimed), not via pending.
COMMENT ON TYPE workfence.item_state IS
    'Life cycle of an item: pending -> claimed -> done | failed; pending or claimed -> cancelled; '
    'claimed -> pending on release or on a retryable failure. An expired lease is claimed anew '
    'directly (claimed -> claimed, with a new epoch and attempts + 1), or, on the final attempt, '
    'made failed. done, failed and cancelled are final.';

-- Every claim is an attempt (a lapsed lease too); a release gives it back.
COMMENT ON COLUMN workfence.items.max_attempts IS
    'How many attempts the item may have: every claim counts as one (a lapsed lease too), a release '
    'gives its attempt back. A failure, or a lapsed lease, on the final attempt makes the item failed '
    '(dead letter).';

COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
'work_assert(id, owner, epoch) -> void. Call inside a transaction block (after BEGIN). Raises SQLSTATE 55000 (lease lost; DETAIL says why, HINT what to do) unless the token is current, and holds the item''s row lock (FOR NO KEY UPDATE) to the end of the transaction, so the worker''s own writes in that transaction commit only while it holds the lease. If a savepoint or exception block that held the lock rolls back, COMMIT re-checks the token and fails with 55000 (lease lost before commit) when it is no longer current. Errors: 55000 lease lost, 25P01 a current token outside a transaction block (autocommit, also a DO block or function run by one autocommit statement: the lock would end with the statement), 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, uncommitted, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, read with the statement''s snapshot (READ COMMITTED: the newest committed state; REPEATABLE READ: the transaction''s snapshot). A lapsed lease nobody claimed anew is current; uncommitted: the epoch is newer than the item''s committed one and a transaction still in progress is changing the item (the claim that handed the epoch out has not committed: only its own transaction can use the token until it commits); a lease handed back (work_release, retryable work_fail), a newer claim, or a claim that rolled back is superseded. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';
