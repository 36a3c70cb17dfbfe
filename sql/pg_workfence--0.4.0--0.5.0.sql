-- pg_workfence 0.4.0 -> 0.5.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.5.0 is released: never edit it, write the next step as
-- pg_workfence--0.5.0--<next>.sql. tests/upgrade.rs updates every released
-- version and checks the result is object for object a fresh 0.5.0 install.
--
-- What 0.5.0 changes (issue 11). In the library: work_assert of a current
-- token outside a transaction block raises 25P01; interval DETAILs print
-- intervals; one work_assert HINT per reason; work_lease_status says
-- 'uncommitted' for the epoch of a claim not committed yet; the long poll's
-- queue key is hashtext(queue). In the catalog: the comments below, and the
-- 4-argument work_claim of 0.1.0, renamed out of the way by the update to
-- 0.4.0, is dropped (CONTRIBUTING.md, "An update keeps every function
-- callable"). Its C symbol stays in the library for databases still at 0.1.0.
--
-- Not when this very transaction renamed it: an update from 0.1.0 runs
-- 0.1.0--0.4.0 and this script in one transaction, and calls in flight that
-- resolved the 0.1.0 work_claim before the update committed would fail with
-- XX000 "cache lookup failed for function" (tests/upgrade.rs, under load).
-- Such a database keeps it until the next version's update, which repeats
-- this step. age(xmin) = 0: the row version was written by this transaction.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_claim_retired_0_1_0(text, text, interval, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_claim_retired_0_1_0(text, text, interval, integer);
    END IF;
END
$retire$;

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

-- work_enqueue's COMMENT names the 40001 it can raise.
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25) -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned unchanged with inserted = false. run_at NULL = now (server time). Errors: 22004 NULL argument, 22023 bad queue/key/run_at/max_attempts; 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
'work_assert(id, owner, epoch) -> void. Call inside a transaction block (after BEGIN). Raises SQLSTATE 55000 (lease lost; DETAIL says why, HINT what to do) unless the token is current, and holds the item''s row lock (FOR NO KEY UPDATE) to the end of the transaction, so the worker''s own writes in that transaction commit only while it holds the lease. If a savepoint or exception block that held the lock rolls back, COMMIT re-checks the token and fails with 55000 (lease lost before commit) when it is no longer current. Errors: 55000 lease lost, 25P01 a current token outside a transaction block (autocommit, also a DO block or function run by one autocommit statement: the lock would end with the statement), 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, uncommitted, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, read with the statement''s snapshot (READ COMMITTED: the newest committed state; REPEATABLE READ: the transaction''s snapshot). A lapsed lease nobody claimed anew is current; uncommitted: the epoch is newer than the item''s committed one and a transaction still in progress is changing the item (the claim that handed the epoch out has not committed: only its own transaction can use the token until it commits); a lease handed back (work_release, retryable work_fail), a newer claim, or a claim that rolled back is superseded. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';
