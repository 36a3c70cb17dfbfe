-- pg_workfence 0.3.0 -> 0.4.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.4.0 is released: never edit it, write the next step as
-- pg_workfence--0.4.0--<next>.sql. tests/upgrade.rs updates every released
-- version and checks the result is object for object a fresh 0.4.0 install.
--
-- What 0.4.0 changes (all in the library; the SQL objects keep their
-- signatures, only comments change):
-- - long-poll wake-ups find the waiting backend by its live backend id and
--   transaction (they latched exited backends' slots after connection
--   churn), wake one waiter per item, and survive PREPARE TRANSACTION;
-- - work_assert's fence is re-checked at COMMIT after a rolled-back
--   savepoint released its row lock (55000 "lease lost before commit");
-- - work_claim refuses wait > 0 under REPEATABLE READ / SERIALIZABLE (25000);
-- - delay and retry_in are capped by their real length from now;
-- - items_finished_idx serves the purge; the trigger items_sequence_floor keeps
--   ids and epochs above any row restored without its sequences.

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
