-- pg_workfence 0.11.0 -> 0.12.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.12.0 is released: never edit it, write the next step as
-- pg_workfence--0.12.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh
-- 0.12.0 install.
--
-- What 0.12.0 changes so far. Issue 35 (a job's life): the items'
-- columns progress, rerun_after and rerun_at, work_enqueue's on_conflict,
-- work_progress, work_await, and the checkpoint as the last column of the
-- claim functions' rows and of work_items (the old functions renamed
-- *_retired_0_11_0). Issue 30 (features that compose): work_item
-- shows the item's group_key; the resume that kept a queue's other
-- settings and the locks out of SQL's reach are in the library alone.
-- Issue 33 (claims that never walk the backlog): the index items_ready_idx
-- (built here; the update's ALTER TABLE of workfence.items below takes an
-- ACCESS EXCLUSIVE lock held to its commit, so enqueues and claims wait for
-- the whole update: 4.2 s beside 1,000,000 items on a 2-core machine,
-- UPDATING.md), the column items.slot and its index, and the slot
-- rows of limited queues (workfence.queue_slots, filled from each limited
-- queue's claimed items and rate window, which replace queues.rate_log). A claim that runs before the update commits
-- keeps the limits as 0.11.0 did (src/verbs/flow.rs, the schema's form).

-- ---- work_item gains group_key ----
-- Renamed, not dropped: a call that resolved the old functions before this
-- update commits still finds them (their C symbols, work_item_by_key_wrapper
-- and work_item_by_id_wrapper, stay in the library). The next release's
-- update drops them.
ALTER FUNCTION workfence.work_item(text, text) RENAME TO work_item_retired_0_11_0;
ALTER FUNCTION workfence.work_item(bigint) RENAME TO work_item_retired_0_11_0;

CREATE FUNCTION workfence."work_item"(
	"queue" TEXT,
	"key" TEXT
) RETURNS TABLE (
	"id" bigint,
	"queue" TEXT,
	"key" TEXT,
	"state" TEXT,
	"priority" INT,
	"run_at" timestamp with time zone,
	"attempts" INT,
	"max_attempts" INT,
	"owner" TEXT,
	"epoch" bigint,
	"claimed_at" timestamp with time zone,
	"lease_until" timestamp with time zone,
	"errors" jsonb,
	"result" jsonb,
	"created_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"payload" jsonb,
	"max_run" interval,
	"group_key" TEXT,
	"progress" jsonb
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_item_of_key_wrapper';

CREATE FUNCTION workfence."work_item"(
	"id" bigint
) RETURNS TABLE (
	"id" bigint,
	"queue" TEXT,
	"key" TEXT,
	"state" TEXT,
	"priority" INT,
	"run_at" timestamp with time zone,
	"attempts" INT,
	"max_attempts" INT,
	"owner" TEXT,
	"epoch" bigint,
	"claimed_at" timestamp with time zone,
	"lease_until" timestamp with time zone,
	"errors" jsonb,
	"result" jsonb,
	"created_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"payload" jsonb,
	"max_run" interval,
	"group_key" TEXT,
	"progress" jsonb
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_item_of_id_wrapper';

-- ---- documentation ----
COMMENT ON FUNCTION workfence.work_item(text, text) IS
'work_item(queue, key) -> zero or one (id, queue, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, errors, result, created_at, finished_at, payload, max_run, group_key, progress). The item as an operator sees it; errors is its history of failed attempts and lapsed leases, oldest first (the newest 20 kept); group_key its serial group (NULL: none; from 0.12.0); progress its checkpoint (work_progress; from 0.12.0). Reads only: grant it to a role that may only look. Errors: 22004 NULL queue/key, 22023 bad queue/key, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_item(bigint) IS
'work_item(id) -> zero or one row, the columns of work_item(queue, key): the item with this id. Reads only. Where queue grants are enforced, an item of a queue the role may not read is answered with zero rows, as if missing. Errors: 22004 NULL id.';

-- ---- signatures retired by earlier updates ----
-- Dropped now, unless this very transaction renamed them (an update from
-- 0.9.0 or earlier straight to 0.12.0 keeps 0.9.0's work_enqueue, from
-- 0.5.0 or earlier 0.5.0's, from 0.1.0 0.1.0's work_claim, until the next
-- update): calls in flight that resolved them before that update must
-- still find them.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_enqueue_retired_0_9_0(text, jsonb, text, timestamptz, integer, integer, interval)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_enqueue_retired_0_9_0(text, jsonb, text, timestamptz, integer, integer, interval);
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer);
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_claim_retired_0_1_0(text, text, interval, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_claim_retired_0_1_0(text, text, interval, integer);
    END IF;
END
$retire$;

-- ---- privileges of the new functions ----
-- As sql/finalize.sql sets them in a fresh install: SECURITY DEFINER with a
-- pinned search_path, no EXECUTE for PUBLIC (docs/operations.md, "Least
-- privilege").
ALTER ROUTINE workfence.work_item(text, text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_item(text, text) FROM PUBLIC;
ALTER ROUTINE workfence.work_item(bigint)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_item(bigint) FROM PUBLIC;

-- ---- the new work_item keeps the old one's grants ----
-- A role granted EXECUTE on 0.11.0's work_item (the monitoring and
-- operator groups of docs/operations.md) may call the new one after the
-- update, as before it, with the grant option if it had it.
DO $grants$
DECLARE
    grant_to pg_catalog.text;
BEGIN
    FOR grant_to IN
        SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
          FROM pg_catalog.pg_proc AS p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
          LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                   'workfence.work_item_retired_0_11_0(text, text)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_item(text, text) TO %s', grant_to);
    END LOOP;
END
$grants$;

DO $grants$
DECLARE
    grant_to pg_catalog.text;
BEGIN
    FOR grant_to IN
        SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
          FROM pg_catalog.pg_proc AS p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
          LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                   'workfence.work_item_retired_0_11_0(bigint)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_item(bigint) TO %s', grant_to);
    END LOOP;
END
$grants$;

-- ---- work_limit gains per_group (issue 33) ----
-- Renamed, not dropped, as work_item above (its C symbol work_limit_wrapper
-- stays in the library); the new one keeps the old one's grants.
ALTER FUNCTION workfence.work_limit(text, integer, integer, interval) RENAME TO work_limit_retired_0_11_0;
CREATE FUNCTION workfence."work_limit"(
	"queue" TEXT,
	"concurrency" INT DEFAULT NULL,
	"rate" INT DEFAULT NULL,
	"per" interval DEFAULT '1 second',
	"per_group" INT DEFAULT NULL
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_limit_per_group_wrapper';
ALTER ROUTINE workfence.work_limit(text, integer, integer, interval, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_limit(text, integer, integer, interval, integer) FROM PUBLIC;
DO $grants$
DECLARE
    grant_to pg_catalog.text;
BEGIN
    FOR grant_to IN
        SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
          FROM pg_catalog.pg_proc AS p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
          LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                   'workfence.work_limit_retired_0_11_0(text, integer, integer, interval)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_limit(text, integer, integer, interval, integer) TO %s',
            grant_to);
    END LOOP;
END
$grants$;


-- ---- a job's life (issue 35) ----
-- work_enqueue gains on_conflict; work_claim, work_claim_key and the fused
-- calls return the checkpoint (progress) as their last column. Renamed, not
-- dropped, as work_item above: a call that resolved an old one before this
-- update commits still finds it (the C symbols work_enqueue_with_group_wrapper,
-- work_claim_wait_wrapper, work_claim_key_wrapper,
-- work_finish_and_claim_wrapper and work_fail_and_claim_wrapper stay in the
-- library). Each new one keeps the old one's grants (below).
ALTER FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text)
    RENAME TO work_enqueue_retired_0_11_0;
ALTER FUNCTION workfence.work_claim(text, text, interval, integer, interval)
    RENAME TO work_claim_retired_0_11_0;
ALTER FUNCTION workfence.work_claim_key(text, text, text, interval)
    RENAME TO work_claim_key_retired_0_11_0;
ALTER FUNCTION workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer)
    RENAME TO work_finish_and_claim_retired_0_11_0;
ALTER FUNCTION workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer)
    RENAME TO work_fail_and_claim_retired_0_11_0;
ALTER FUNCTION workfence.work_items(text, text, bigint, integer)
    RENAME TO work_items_retired_0_11_0;

CREATE FUNCTION workfence."work_enqueue"(
	"queue" TEXT,
	"payload" jsonb DEFAULT '{}',
	"key" TEXT DEFAULT NULL,
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"max_attempts" INT DEFAULT 25,
	"max_run" interval DEFAULT NULL,
	"group_key" TEXT DEFAULT NULL,
	"on_conflict" TEXT DEFAULT 'keep',
	"trace" TEXT DEFAULT NULL,
	"after" bigint[] DEFAULT NULL,
	"on_parent_failure" TEXT DEFAULT 'cancel'
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"inserted" bool
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_enqueue_on_conflict_wrapper';

CREATE FUNCTION workfence."work_claim"(
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
	"lease_until" timestamp with time zone,
	"progress" jsonb,
	"trace" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_claim_progress_wrapper';

CREATE FUNCTION workfence."work_claim_key"(
	"queue" TEXT,
	"key" TEXT,
	"owner" TEXT,
	"lease" interval
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"payload" jsonb,
	"epoch" bigint,
	"attempt" INT,
	"lease_until" timestamp with time zone,
	"progress" jsonb,
	"trace" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_claim_key_progress_wrapper';

CREATE FUNCTION workfence."work_finish_and_claim"(
	"queue" TEXT,
	"owner" TEXT,
	"lease" interval,
	"last_id" bigint,
	"last_epoch" bigint,
	"result" jsonb DEFAULT NULL,
	"max_items" INT DEFAULT 1
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"payload" jsonb,
	"epoch" bigint,
	"attempt" INT,
	"lease_until" timestamp with time zone,
	"settled" bool,
	"progress" jsonb,
	"trace" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_finish_and_claim_progress_wrapper';

CREATE FUNCTION workfence."work_fail_and_claim"(
	"queue" TEXT,
	"owner" TEXT,
	"lease" interval,
	"last_id" bigint,
	"last_epoch" bigint,
	"error" TEXT,
	"retry_in" interval DEFAULT NULL,
	"max_items" INT DEFAULT 1
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"payload" jsonb,
	"epoch" bigint,
	"attempt" INT,
	"lease_until" timestamp with time zone,
	"settled" bool,
	"progress" jsonb,
	"trace" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_fail_and_claim_progress_wrapper';

CREATE FUNCTION workfence."work_items"(
	"queue" TEXT,
	"state" TEXT DEFAULT NULL,
	"after" bigint DEFAULT NULL,
	"max" INT DEFAULT 50
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"state" TEXT,
	"priority" INT,
	"run_at" timestamp with time zone,
	"attempts" INT,
	"max_attempts" INT,
	"owner" TEXT,
	"epoch" bigint,
	"claimed_at" timestamp with time zone,
	"lease_until" timestamp with time zone,
	"created_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"group_key" TEXT,
	"last_error" TEXT,
	"progress" jsonb
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_items_progress_wrapper';

CREATE FUNCTION workfence."work_progress"(
	"id" bigint,
	"owner" TEXT,
	"epoch" bigint,
	"progress" jsonb
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_progress_wrapper';

CREATE FUNCTION workfence."work_await"(
	"queue" TEXT,
	"key" TEXT,
	"wait" interval DEFAULT '0'
) RETURNS TABLE (
	"state" TEXT,
	"result" jsonb,
	"last_error" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_await_wrapper';

CREATE FUNCTION workfence."work_parent_results"(
	"id" bigint,
	"owner" TEXT,
	"epoch" bigint
) RETURNS jsonb
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_parent_results_wrapper';

CREATE FUNCTION workfence."work_workflow"(
	"id" bigint
) RETURNS TABLE (
	"id" bigint,
	"queue" TEXT,
	"key" TEXT,
	"state" TEXT,
	"depth" INT,
	"parents" bigint[]
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_workflow_wrapper';

CREATE FUNCTION workfence."work_enqueue_many"(
	"queue" TEXT,
	"payloads" jsonb[],
	"keys" TEXT[] DEFAULT NULL,
	"run_at" timestamp with time zone[] DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"max_attempts" INT DEFAULT 25,
	"group_keys" TEXT[] DEFAULT NULL,
	"on_conflict" TEXT DEFAULT 'keep'
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"inserted" bool
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_enqueue_many_wrapper';

COMMENT ON FUNCTION workfence.work_retry(text, text, timestamptz) IS
'work_retry(queue, key, run_at DEFAULT NULL) -> boolean. A failed or cancelled item back to pending, due at run_at (NULL: now), with at least one more attempt (max_attempts raised to attempts + 1 when used up); its errors history is kept, its old tokens stay dead; wakes long polls at commit. From 0.12.0 (workflows) an item some of whose parents have not settled now (pending, claimed or waiting) goes back to waiting for them instead, and the children the item''s failure cancelled wait again (transitively). True if it changed the item; false for a missing item or any other state. Errors: 22004 NULL queue/key, 22023 bad queue/key/run_at, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';
COMMENT ON FUNCTION workfence.work_parent_results(bigint, text, bigint) IS
'work_parent_results(id, owner, epoch) -> jsonb. From 0.12.0 (workflows): while the item is claimed under exactly this owner AND epoch (a lapsed lease nobody re-claimed still counts, as for work_renew), an object with a key per parent of the item (work_enqueue''s after; its id as text): the parent''s result if it ended done (JSON null without one), else {"state": its state, "error": its last_error} (what an on_parent_failure run child sees of a failed parent); {} for an item without parents; a purged parent is left out. NULL for any other token, or where queue grants are enforced an item in a queue the role may not claim. Reads only. Errors: 22004 NULL argument, 22023 bad owner.';
COMMENT ON FUNCTION workfence.work_enqueue_many(text, jsonb[], text[], timestamptz[], integer, integer, text[], text) IS
'work_enqueue_many(queue, payloads jsonb[], keys text[] DEFAULT NULL, run_at timestamptz[] DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, group_keys text[] DEFAULT NULL, on_conflict DEFAULT ''keep'') -> setof (id, key, inserted). From 0.12.0: a row per element of payloads, in their order, each judged as work_enqueue(queue, payloads[i], keys[i], run_at[i], priority, max_attempts, NULL, group_keys[i], on_conflict) would judge it: a NULL key (or keys NULL) gets a UUIDv7, a NULL run_at element is now, a NULL group key no group; an existing key, or one repeated in the arrays, returns its item with inserted = false (kept, or changed as on_conflict says). A call without group keys under on_conflict keep is one INSERT ... SELECT; a call in which any element has a group key, or with another on_conflict, enqueues each item in turn. Two calls that insert overlapping keys in different orders can deadlock (40P01), as two transactions of work_enqueue calls can: sort the keys, or retry. Wakes long polls at commit; one work_enqueued notification if an inserted item is due and workfence.notify_enqueued is on. Limits: at most 10000 payloads. Errors: 22004 NULL queue, payloads, priority, max_attempts or on_conflict, or a NULL element of payloads; 22023 keys, run_at or group_keys not as long as payloads, over 10000 payloads, bad queue/key/run_at/group_key, max_attempts out of 1..1000, on_conflict not keep, replace or preserve_run_at; 25000 on_conflict of a pending item of a group under REPEATABLE READ or SERIALIZABLE; 42501 when queue grants are enforced and the role has no enqueue grant covering the queue (with on_conflict running a cancelled item again: no operate grant); 40001 when an existing item of a key was deleted while this enqueue ran (retry the transaction).';
COMMENT ON FUNCTION workfence.work_workflow(bigint) IS
'work_workflow(id) -> setof (id, queue, key, state, depth, parents bigint[]). From 0.12.0 (workflows): the item (depth 0), its ancestors (depth -1 its parents, -2 theirs, ...) and its descendants (1, 2, ...), each once at its nearest depth, nearest first then by id, with the ids of its parents (every edge into it, so the rows draw the graph). At most 1000 rows and 1000 levels each way. Zero rows for an unknown id. Where queue grants are enforced: zero rows unless the role may read the item''s queue, and only the rows of queues it may read. Errors: 22004 NULL id.';

DO $life$
DECLARE
    routine pg_catalog.text;
BEGIN
    FOREACH routine IN ARRAY ARRAY[
        'workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, text, bigint[], text)',
        'workfence.work_claim(text, text, interval, integer, interval)',
        'workfence.work_claim_key(text, text, text, interval)',
        'workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer)',
        'workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer)',
        'workfence.work_items(text, text, bigint, integer)',
        'workfence.work_progress(bigint, text, bigint, jsonb)',
        'workfence.work_await(text, text, interval)',
        'workfence.work_parent_results(bigint, text, bigint)',
        'workfence.work_workflow(bigint)',
        'workfence.work_enqueue_many(text, jsonb[], text[], timestamptz[], integer, integer, text[], text)'
    ] LOOP
        -- Function signatures written above, not user data.
        EXECUTE pg_catalog.format(
            'ALTER ROUTINE %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', routine);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', routine);
    END LOOP;
END
$life$;

-- The new functions keep the grants of the ones they replace: a role that
-- could enqueue, claim or run the fused calls before the update can after
-- it, with the grant option if it had it; a role that could enqueue can
-- also call work_enqueue_many.
DO $grants$
DECLARE
    pair pg_catalog.text[];
    grant_to pg_catalog.text;
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[
        ['workfence.work_enqueue_retired_0_11_0(text, jsonb, text, timestamptz, integer, integer, interval, text)',
         'workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, text, bigint[], text)'],
        -- A role that could enqueue can enqueue many at once (work_enqueue_many, 0.12.0).
        ['workfence.work_enqueue_retired_0_11_0(text, jsonb, text, timestamptz, integer, integer, interval, text)',
         'workfence.work_enqueue_many(text, jsonb[], text[], timestamptz[], integer, integer, text[], text)'],
        ['workfence.work_claim_retired_0_11_0(text, text, interval, integer, interval)',
         'workfence.work_claim(text, text, interval, integer, interval)'],
        ['workfence.work_claim_key_retired_0_11_0(text, text, text, interval)',
         'workfence.work_claim_key(text, text, text, interval)'],
        ['workfence.work_finish_and_claim_retired_0_11_0(text, text, interval, bigint, bigint, jsonb, integer)',
         'workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer)'],
        ['workfence.work_fail_and_claim_retired_0_11_0(text, text, interval, bigint, bigint, text, interval, integer)',
         'workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer)'],
        ['workfence.work_items_retired_0_11_0(text, text, bigint, integer)',
         'workfence.work_items(text, text, bigint, integer)']
    ] LOOP
        FOR grant_to IN
            SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
                   || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
              FROM pg_catalog.pg_proc AS p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
              LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(pair[1])
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            -- A signature written above and a role name quoted by
            -- quote_ident, not user data.
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', pair[2], grant_to);
        END LOOP;
    END LOOP;
END
$grants$;


-- ---- the retired functions keep no grants ----
-- Their grants went to the new work_item above. Left on the retired ones,
-- pg_dump would write GRANTs for functions a restore's CREATE EXTENSION does
-- not make, and the restore would fail on them (--exit-on-error). A call
-- already running passed its privilege check when it started; a cached plan
-- that named the old function is re-planned after the rename and finds the
-- new one.
DO $revoke$
DECLARE
    routine pg_catalog.regprocedure;
    grantee pg_catalog.text;
BEGIN
    FOR routine IN
        SELECT pg_catalog.unnest(ARRAY[
            'workfence.work_item_retired_0_11_0(text, text)',
            'workfence.work_item_retired_0_11_0(bigint)',
            'workfence.work_limit_retired_0_11_0(text, integer, integer, interval)',
            'workfence.work_enqueue_retired_0_11_0(text, jsonb, text, timestamptz, integer, integer, interval, text)',
            'workfence.work_claim_retired_0_11_0(text, text, interval, integer, interval)',
            'workfence.work_claim_key_retired_0_11_0(text, text, text, interval)',
            'workfence.work_finish_and_claim_retired_0_11_0(text, text, interval, bigint, bigint, jsonb, integer)',
            'workfence.work_fail_and_claim_retired_0_11_0(text, text, interval, bigint, bigint, text, interval, integer)',
            'workfence.work_items_retired_0_11_0(text, text, bigint, integer)'
        ]::pg_catalog.regprocedure[])
    LOOP
        FOR grantee IN
            SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                 ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
              FROM pg_catalog.pg_proc AS p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
              LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE p.oid OPERATOR(pg_catalog.=) routine
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            -- A catalog name rendered by regprocedure and a role name quoted
            -- by quote_ident, not user data.
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE', routine, grantee);
        END LOOP;
    END LOOP;
END
$revoke$;

-- ---- grants an update copied are the database's, not the extension's ----
-- PostgreSQL records every privilege an extension script sets as the
-- object's initial privileges (pg_init_privs), which pg_dump leaves out of a
-- dump, since CREATE EXTENSION makes them. A grant an update copied to a
-- role (0.10.0's work_enqueue, 0.11.0's work_items, this update's
-- work_item) is not one a fresh install makes: recorded as initial, it was
-- missing after a restore. A fresh install's functions have only their
-- owner's privileges as initial ones; so do an updated database's from now
-- on, and pg_dump writes the copied grants as it writes the operator's own.
UPDATE pg_catalog.pg_init_privs AS ip
   SET initprivs = ARRAY(
           SELECT a.item
             FROM pg_catalog.unnest(ip.initprivs) AS a(item)
            WHERE NOT EXISTS (
                      SELECT FROM pg_catalog.aclexplode(ARRAY[a.item]) AS x
                       WHERE x.grantee OPERATOR(pg_catalog.<>) 0
                         AND x.grantee OPERATOR(pg_catalog.<>) p.proowner))
  FROM pg_catalog.pg_proc AS p
 WHERE ip.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
   AND ip.objsubid OPERATOR(pg_catalog.=) 0
   AND ip.objoid OPERATOR(pg_catalog.=) p.oid
   AND p.pronamespace OPERATOR(pg_catalog.=) 'workfence'::pg_catalog.regnamespace;

-- ---- issue 33: a claimed item's concurrency slot ----
-- First, while nothing else of this update holds a lock on the table: the
-- column takes an ACCESS EXCLUSIVE lock for a moment (no rewrite).
ALTER TABLE workfence.items ADD COLUMN slot integer;
COMMENT ON COLUMN workfence.items.slot IS
    'From 0.12.0: the concurrency slot of its queue''s limit (work_limit) the item holds while claimed by a claim of a '
    'limited queue (src/verbs/flow.rs); meaningless in other states.';
-- Group heads (issue 33): in the same moment's lock, also without a
-- rewrite (a constant default is kept in the catalog).
ALTER TABLE workfence.items ADD COLUMN behind boolean NOT NULL DEFAULT false;
ALTER TABLE workfence.items ADD COLUMN turn timestamptz;
COMMENT ON COLUMN workfence.items.behind IS
    'From 0.12.0: a pending item of a group known to have a pending item of its group before it in claim order, '
    'which claims therefore skip without reading (src/verbs/flow.rs, group heads); false for every other item.';
COMMENT ON COLUMN workfence.items.turn IS
    'From 0.12.0: for a group''s first pending item, when a claim of its group made it so (at the earliest its run_at): '
    'claims serve group heads in (priority, turn or else run_at) order, so a group just served waits its turn '
    'behind the others (round-robin). NULL otherwise.';
-- A job's life (issue 35): the checkpoint and the run once more of
-- on_conflict, in the same moment's lock (nullable, no default: no rewrite).
ALTER TABLE workfence.items ADD COLUMN progress jsonb;
ALTER TABLE workfence.items ADD COLUMN rerun_after bigint;
ALTER TABLE workfence.items ADD COLUMN rerun_at timestamptz;
-- Trace context (issue 36): the enqueuer's W3C traceparent, handed to claims.
ALTER TABLE workfence.items ADD COLUMN trace text;
COMMENT ON COLUMN workfence.items.progress IS
    'From 0.12.0: the newest checkpoint written by work_progress under a current lease (at most 64 KiB), handed to '
    'the next claim of the item so that a retried run resumes from it; cleared when on_conflict makes the item run again.';
COMMENT ON COLUMN workfence.items.rerun_after IS
    'From 0.12.0: the epoch of a run after whose finish (or final failure) the item runs once more, set by a '
    'work_enqueue with on_conflict replace or preserve_run_at while the item was claimed; NULL otherwise.';
COMMENT ON COLUMN workfence.items.rerun_at IS
    'From 0.12.0: when that run once more is due (NULL: at once), with rerun_after.';
COMMENT ON COLUMN workfence.items.trace IS
    'From 0.12.0: the W3C traceparent work_enqueue was given (trace), handed to every claim of the item so that the '
    'worker''s span can link to the request that enqueued it; NULL: none.';

-- ---- issue 37: workflows ----
-- An item may wait for others (work_enqueue's after): the new state
-- waiting, the edges' table, and three columns of the items. The enum's new
-- value cannot be used in this transaction (PostgreSQL refuses a value
-- added in the same transaction): nothing below names it but as text
-- (work_queue_stats_exact), and the library's statements run after commit.
ALTER TYPE workfence.item_state ADD VALUE 'waiting';
COMMENT ON TYPE workfence.item_state IS
    'Life cycle of an item: pending -> claimed -> done | failed; pending or claimed -> cancelled; '
    'claimed -> pending on release or on a retryable failure. An expired lease is claimed anew '
    'directly (claimed -> claimed, with a new epoch and attempts + 1), or, on the final attempt, '
    'made failed. failed or cancelled -> pending only by an operator''s work_retry (from 0.6.0); done is final. '
    'From 0.12.0, waiting: enqueued with parents (after) not all done; waiting -> pending in the transaction of the '
    'last parent''s finish, waiting -> cancelled when a parent ends failed or cancelled (on_parent_failure cancel).';
COMMENT ON COLUMN workfence.items.state IS 'pending, claimed, done, failed, cancelled or (from 0.12.0) waiting.';
ALTER TABLE workfence.items ADD COLUMN has_children boolean NOT NULL DEFAULT false;
ALTER TABLE workfence.items ADD COLUMN waiting_on integer NOT NULL DEFAULT 0;
ALTER TABLE workfence.items ADD COLUMN on_parent_failure text;
COMMENT ON COLUMN workfence.items.has_children IS
    'From 0.12.0: some item was enqueued with this one in its after (workflows, src/verbs/workflow.rs), so the '
    'item''s finish, failure or cancel settles the edges to its children; false for every other item, whose settle '
    'reads no edge.';
COMMENT ON COLUMN workfence.items.waiting_on IS
    'From 0.12.0: how many of the item''s edges from its parents (workfence.item_edges) are not resolved yet, kept '
    'under the item''s row lock; a waiting item becomes pending when it reaches 0. 0 for an item without parents.';
COMMENT ON COLUMN workfence.items.on_parent_failure IS
    'From 0.12.0: cancel or run, what a parent ending failed or cancelled does to the item while it waits (work_enqueue''s '
    'on_parent_failure); NULL for an item without parents.';

CREATE TABLE workfence.item_edges (
    parent     bigint NOT NULL,
    child      bigint NOT NULL,
    resolved   boolean NOT NULL DEFAULT false,
    cancelled  boolean NOT NULL DEFAULT false,
    CONSTRAINT item_edges_pkey PRIMARY KEY (parent, child)
);
COMMENT ON TABLE workfence.item_edges IS
    'Workflow edges: the child waits for the parent (work_enqueue''s after). Written only by the extension''s functions; '
    'a purge deletes the edges of the items it deletes. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.item_edges.parent IS 'The item waited for (workfence.items.id).';
COMMENT ON COLUMN workfence.item_edges.child IS 'The waiting item (workfence.items.id).';
COMMENT ON COLUMN workfence.item_edges.resolved IS
    'The parent settled (done, failed or cancelled) and the child''s waiting_on counted it; resolved once, so a parent '
    'finished again after an on_conflict re-run releases nothing.';
COMMENT ON COLUMN workfence.item_edges.cancelled IS
    'The parent ended failed or cancelled and the child''s on_parent_failure is cancel: work_retry of the parent brings '
    'the child back to waiting.';
COMMENT ON INDEX workfence.item_edges_pkey IS 'A parent''s children: what its finish, failure or cancel settles.';
CREATE INDEX item_edges_child_idx ON workfence.item_edges (child, parent);
COMMENT ON INDEX workfence.item_edges_child_idx IS
    'An item''s parents: work_parent_results, work_workflow and a purge.';

REVOKE ALL ON TABLE workfence.item_edges FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.item_edges', '');

-- ---- issue 33: anything due, and the next run_at, in one probe ----
CREATE INDEX items_ready_idx ON workfence.items (queue, run_at)
    WHERE state = 'pending';
COMMENT ON INDEX workfence.items_ready_idx IS
    'Pending items by run_at: whether a queue has a due item, and when its next one is due, in one probe.';

-- ---- issue 33: the slots of limited queues ----
CREATE INDEX items_slot_idx ON workfence.items (queue, slot)
    WHERE state = 'claimed' AND slot IS NOT NULL;
COMMENT ON INDEX workfence.items_slot_idx IS
    'Claimed items by concurrency slot: whether a slot of a limited queue is busy, in one probe.';

CREATE TABLE workfence.queue_slots (
    queue    text NOT NULL,
    kind     "char" NOT NULL CHECK (kind IN ('c', 'r')),
    slot     integer NOT NULL CHECK (slot > 0),
    used_at  timestamptz,
    CONSTRAINT queue_slots_pkey PRIMARY KEY (queue, kind, slot)
);
COMMENT ON TABLE workfence.queue_slots IS
    'Slots of the limited queues, written by work_limit and by claims (src/verbs/flow.rs): a claim takes a free slot per item '
    'it hands out, FOR UPDATE SKIP LOCKED. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.queue_slots.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.queue_slots.kind IS
    'c: a concurrency slot (free unless a claimed item of the queue holds it, items.slot); r: a rate slot (free once used_at is older than per).';
COMMENT ON COLUMN workfence.queue_slots.slot IS
    'Slot number, from 1 to the limit.';
COMMENT ON COLUMN workfence.queue_slots.used_at IS 'r: server time of the claim that last used the slot; NULL if never.';
COMMENT ON INDEX workfence.queue_slots_pkey IS 'A queue''s slots of one kind in slot order.';
CREATE INDEX queue_slots_used_idx ON workfence.queue_slots (queue, used_at NULLS FIRST) WHERE kind = 'r';
COMMENT ON INDEX workfence.queue_slots_used_idx IS 'Rate slots, least recently used first: a claim finds a free one at the front.';
REVOKE ALL ON TABLE workfence.queue_slots FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_slots', '');

-- Each limited queue gets its concurrency slots 1..concurrency, and its
-- claimed items hold them in id order (those beyond the limit hold numbers
-- above it: retired slots, which claims absorb as the items finish); the
-- most recent claims of its rate window hold its rate slots, as work_limit
-- would set them (src/verbs/flow.rs). No claim is in flight while they are read:
-- the CREATE INDEX statements above hold a SHARE lock on workfence.items to
-- the end of the update, which every claim's ROW EXCLUSIVE lock waits for
-- (and they waited for those before them).
INSERT INTO workfence.queue_slots (queue, kind, slot)
SELECT q.queue, 'c', g.n
  FROM workfence.queues AS q
 CROSS JOIN LATERAL pg_catalog.generate_series(1, q.concurrency) AS g(n)
 WHERE q.concurrency IS NOT NULL;
UPDATE workfence.items AS i
   SET slot = c.n
  FROM (SELECT k.id,
               pg_catalog.row_number() OVER (PARTITION BY k.queue ORDER BY k.id) AS n
          FROM workfence.items AS k
          JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) k.queue
         WHERE q.concurrency IS NOT NULL
           AND k.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state) AS c
 WHERE i.id OPERATOR(pg_catalog.=) c.id;
INSERT INTO workfence.queue_slots (queue, kind, slot, used_at)
SELECT q.queue, 'r', g.n,
       (SELECT t.at FROM pg_catalog.unnest(q.rate_log) AS t(at)
         ORDER BY t.at DESC OFFSET g.n OPERATOR(pg_catalog.-) 1 LIMIT 1)
  FROM workfence.queues AS q
 CROSS JOIN LATERAL pg_catalog.generate_series(1, q.rate) AS g(n)
 WHERE q.rate IS NOT NULL;
ALTER TABLE workfence.queues DROP COLUMN rate_log;

-- ---- issue 33: group heads and per_group ----
-- Every pending item of a group that has a pending item of its group before
-- it in claim order is behind; each group's first is its head. No claim or
-- enqueue runs meanwhile (the SHARE lock above). Then the indexes claims
-- of grouped queues walk (src/verbs/flow.rs): both built over the pending items
-- only, as items_ready_idx was.
UPDATE workfence.items AS i
   SET behind = true
 WHERE i.group_key IS NOT NULL
   AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
   AND EXISTS (SELECT FROM workfence.items AS o
                WHERE o.queue OPERATOR(pg_catalog.=) i.queue
                  AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                  AND o.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                  AND (o.priority, o.run_at, o.id)
                      OPERATOR(pg_catalog.<) (i.priority, i.run_at, i.id));
CREATE INDEX items_head_idx ON workfence.items (queue, priority, (COALESCE(turn, run_at)), id)
    WHERE state = 'pending' AND NOT behind;
COMMENT ON INDEX workfence.items_head_idx IS
    'Claims of a queue with groups: pending items in no group and each group''s head, in serving order.';
CREATE INDEX items_group_head_idx ON workfence.items (queue, group_key)
    WHERE state = 'pending' AND group_key IS NOT NULL AND NOT behind;
COMMENT ON INDEX workfence.items_group_head_idx IS
    'A group''s pending items that are not behind: its head, and items that came before it since (src/verbs/flow.rs).';
ALTER TABLE workfence.queues ADD COLUMN per_group integer;
COMMENT ON COLUMN workfence.queues.per_group IS
    'From 0.12.0 (work_limit): at most this many items of one group_key claimed at once; NULL: one (serial groups).';

CREATE OR REPLACE VIEW workfence.work_queue_stats WITH (security_barrier) AS
WITH server_time AS MATERIALIZED (
    SELECT pg_catalog.clock_timestamp() AS now
), counts AS (
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
     GROUP BY i.queue, t.now
), names AS MATERIALIZED (
    SELECT u.queue
      FROM (SELECT c.queue FROM counts AS c
            UNION
            SELECT q.queue FROM workfence.queues AS q) AS u
     WHERE workfence.work_may('read', u.queue)
)
SELECT n.queue,
       COALESCE(c.pending, 0) AS pending,
       COALESCE(c.scheduled, 0) AS scheduled,
       COALESCE(c.claimed, 0) AS claimed,
       COALESCE(c.expired, 0) AS expired,
       COALESCE(c.done, 0) AS done,
       COALESCE(c.failed, 0) AS failed,
       COALESCE(c.cancelled, 0) AS cancelled,
       c.oldest_due_age,
       COALESCE(q.paused, false) AS paused,
       f.refused,
       f.lapsed,
       q.concurrency,
       q.rate,
       q.per,
       q.per_group
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;
COMMENT ON COLUMN workfence.work_queue_stats.per_group IS
    'From 0.12.0: the queue''s per-group limit (work_limit): at most this many items of one group_key claimed at once; '
    'NULL: one (serial groups).';

-- ---- issue 33: the comments of work_limit and work_claim say what per_group does ----
COMMENT ON FUNCTION workfence.work_limit(text, integer, integer, interval, integer) IS
'work_limit(queue, concurrency int DEFAULT NULL, rate int DEFAULT NULL, per interval DEFAULT ''1 second'', per_group int DEFAULT NULL) -> void. From 0.10.0: at most concurrency items of the queue claimed at once (a lapsed lease keeps its slot until claimed anew or dead-lettered), at most rate items handed out by claims in any window of length per (sliding, server clock); from 0.12.0 at most per_group items of one group_key claimed at once (NULL: 1, serial groups), the groups served round-robin (each group has one item in line at a time, and a group just served goes behind the others). A call sets them all: NULL lifts a limit, work_limit(queue) every one; shown in work_queue_stats. A claim that would exceed a limit returns fewer rows, never waits; from 0.12.0 each item it hands out takes a slot row of the queue (workfence.queue_slots) FOR UPDATE SKIP LOCKED, so claims of one queue run side by side; lowering a limit takes nothing back (claims wait until fewer items than it are claimed); claims of a limited queue run in READ COMMITTED only (see work_claim). Errors: 22004 NULL queue or per, 22023 bad queue, concurrency, rate or per_group outside 1..10000, per not in (0, 1 day]; 42501 when queue grants are enforced and the role has no operate grant covering the queue.';
COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until, progress, trace). progress (from 0.12.0): the item''s checkpoint, the last work_progress of an earlier run under its lease (NULL on a first attempt); trace (from 0.12.0): the W3C traceparent work_enqueue stored with the item (NULL: none). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. From 0.10.0: an item with a group_key is claimed only when no item of its group is claimed (from 0.12.0: fewer than the queue''s per_group, see work_limit) and no pending item of the group comes before it in claim order (a lapsed one is claimed anew first), a batch takes at most one item per group, and a queue''s limits (work_limit) cap what a claim hands out; such a claim returns fewer rows, never waits. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE, or a queue with groups or limits claimed under them; 25006 on a hot standby (claim on the primary); 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting. The first claim of a new history (a promoted standby, a point-in-time recovery, a restored or copied database) moves the epoch sequence to the generation floor (milliseconds since 2000-01-01 x 1024), above every epoch the old history handed out.';

-- ---- issue 33: cancel and reschedule of a grouped item need READ COMMITTED ----
COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
'work_cancel(queue, key) -> boolean. Cancels the item if it is pending, claimed or (from 0.12.0) waiting, and with it its waiting children that say on_parent_failure cancel (transitively; run: they count it as ended): state cancelled, finished_at = clock_timestamp(), not claimed again unless work_retry puts it back (under a new epoch); the holder''s token is refused from then on (work_assert: 55000, cancelled). False, changing nothing, when the item is missing or already done, failed or cancelled. Errors: 22004 NULL argument, 22023 bad queue/key, 25000 (from 0.12.0) for an item in a group under REPEATABLE READ or SERIALIZABLE (the call chooses the group''s next item after taking the group''s lock, waiting for a claim of the group in flight), 42501 when queue grants are enforced and the role has no operate grant covering the queue.';
COMMENT ON FUNCTION workfence.work_reschedule(text, text, timestamptz) IS
'work_reschedule(queue, key, run_at) -> boolean. Moves a pending item''s run_at (run it now: now()); wakes long polls at commit. True if it changed the item; false for a missing item or one that is not pending. Errors: 22004 NULL argument, 22023 bad queue/key/run_at, 25000 (from 0.12.0) for an item in a group under REPEATABLE READ or SERIALIZABLE (the call chooses the group''s next item after taking the group''s lock, waiting for a claim of the group in flight), 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

-- ---- issue 34: schedules ----
-- Schedules (from 0.12.0, issue 34; src/verbs/schedule.rs): cron in the
-- server. A fire enqueues the item of a slot (key '<name>@<slot>') and moves
-- next_slot past it in one transaction, holding the row FOR UPDATE (firers
-- skip a row another holds): a slot's item and its record commit together
-- or not at all, and next_slot only moves forward past last_slot (the CHECK
-- keeps it so), so no slot is fired twice.
CREATE TABLE workfence.schedules (
    name          text NOT NULL PRIMARY KEY,
    cron          text NOT NULL,
    timezone      text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    catch_up      text NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    priority      integer NOT NULL,
    max_attempts  integer NOT NULL,
    group_key     text,
    paused        boolean NOT NULL DEFAULT false,
    next_slot     timestamptz NOT NULL,
    last_slot     timestamptz,
    last_item_id  bigint,
    last_fired_at timestamptz,
    CONSTRAINT schedules_slots_forward CHECK (last_slot IS NULL OR next_slot > last_slot)
);
COMMENT ON TABLE workfence.schedules IS
    'Schedules (from 0.12.0): written by work_schedule, work_unschedule, work_pause_schedule, work_resume_schedule '
    'and by the fires (work_fire_schedules, the maintenance worker, claims of the queue). Read it through '
    'workfence.work_schedules. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.schedules.name IS 'The schedule''s name; its items'' keys are <name>@<slot>.';
COMMENT ON COLUMN workfence.schedules.cron IS 'Cron expression: 5 fields, 6 with seconds first, or @hourly, @daily, ...';
COMMENT ON COLUMN workfence.schedules.timezone IS 'IANA time zone the expression is read in.';
COMMENT ON COLUMN workfence.schedules.queue IS 'Queue its items are enqueued in.';
COMMENT ON COLUMN workfence.schedules.payload IS 'Payload of every item it enqueues.';
COMMENT ON COLUMN workfence.schedules.catch_up IS 'latest, all or none: what a fire does with slots that passed unfired.';
COMMENT ON COLUMN workfence.schedules.priority IS 'Priority of its items.';
COMMENT ON COLUMN workfence.schedules.max_attempts IS 'max_attempts of its items.';
COMMENT ON COLUMN workfence.schedules.group_key IS 'group_key of its items (NULL: none).';
COMMENT ON COLUMN workfence.schedules.paused IS 'work_pause_schedule: fires nothing until work_resume_schedule.';
COMMENT ON COLUMN workfence.schedules.next_slot IS 'The first slot not yet fired or skipped; due when it is at or before now; infinity when the expression names no more.';
COMMENT ON COLUMN workfence.schedules.last_slot IS 'The last slot fired; NULL before the first fire.';
COMMENT ON COLUMN workfence.schedules.last_item_id IS 'The id of the item the last slot fired (it may since be purged).';
COMMENT ON COLUMN workfence.schedules.last_fired_at IS 'Server time of the last fire.';
COMMENT ON INDEX workfence.schedules_pkey IS 'A schedule by name.';
CREATE INDEX schedules_due_idx ON workfence.schedules (next_slot) WHERE NOT paused;
COMMENT ON INDEX workfence.schedules_due_idx IS 'The schedules that are not paused, by next slot: a fire finds the due ones at the front.';
CREATE INDEX schedules_queue_idx ON workfence.schedules (queue, next_slot) WHERE NOT paused;
COMMENT ON INDEX workfence.schedules_queue_idx IS 'A queue''s schedules that are not paused, by next slot: a claim''s fire of its queue.';
REVOKE ALL ON TABLE workfence.schedules FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.schedules', '');

-- The schedules (from 0.12.0), as work_schedule made them, with what they
-- last fired. Where queue grants are enforced, only the schedules of queues
-- the reader may read (work_may), filtered before the reader's conditions.
CREATE VIEW workfence.work_schedules WITH (security_barrier) AS
SELECT s.name,
       s.cron,
       s.timezone,
       s.queue,
       s.catch_up,
       s.paused,
       s.next_slot,
       s.last_slot,
       s.last_item_id,
       s.last_fired_at,
       s.payload,
       s.priority,
       s.max_attempts,
       s.group_key
  FROM workfence.schedules AS s
 WHERE workfence.work_may('read', s.queue);
COMMENT ON VIEW workfence.work_schedules IS
    'One row per schedule (work_schedule): its cron expression, time zone, queue and catch_up, whether it is paused, '
    'its next slot, and the last slot it fired with that slot''s item. Where queue grants are enforced, only the '
    'schedules of queues the reader may read (work_may). Not readable by PUBLIC; a reader needs EXECUTE on '
    'workfence.work_may too.';
COMMENT ON COLUMN workfence.work_schedules.name IS 'The schedule''s name; its items'' keys are <name>@<slot as UTC ISO 8601>.';
COMMENT ON COLUMN workfence.work_schedules.cron IS 'Cron expression: 5 fields, 6 with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly.';
COMMENT ON COLUMN workfence.work_schedules.timezone IS 'IANA time zone the expression is read in.';
COMMENT ON COLUMN workfence.work_schedules.queue IS 'Queue its items are enqueued in.';
COMMENT ON COLUMN workfence.work_schedules.catch_up IS 'latest, all or none: what a fire does with slots that passed unfired.';
COMMENT ON COLUMN workfence.work_schedules.paused IS 'Whether it is paused (work_pause_schedule): it fires nothing.';
COMMENT ON COLUMN workfence.work_schedules.next_slot IS 'The first slot not yet fired or skipped (infinity: the expression names no more).';
COMMENT ON COLUMN workfence.work_schedules.last_slot IS 'The last slot fired; NULL before the first.';
COMMENT ON COLUMN workfence.work_schedules.last_item_id IS 'The item the last slot fired (it may since be purged).';
COMMENT ON COLUMN workfence.work_schedules.last_fired_at IS 'Server time of the last fire.';
COMMENT ON COLUMN workfence.work_schedules.payload IS 'Payload of its items.';
COMMENT ON COLUMN workfence.work_schedules.priority IS 'Priority of its items.';
COMMENT ON COLUMN workfence.work_schedules.max_attempts IS 'max_attempts of its items.';
COMMENT ON COLUMN workfence.work_schedules.group_key IS 'group_key of its items (NULL: none).';
REVOKE ALL ON TABLE workfence.work_schedules FROM PUBLIC;

CREATE FUNCTION workfence."work_schedule"(
	"name" TEXT,
	"cron" TEXT,
	"queue" TEXT,
	"payload" jsonb DEFAULT '{}',
	"timezone" TEXT DEFAULT 'UTC',
	"catch_up" TEXT DEFAULT 'latest',
	"priority" INT DEFAULT 0,
	"max_attempts" INT DEFAULT 25,
	"group_key" TEXT DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_schedule_wrapper';
CREATE FUNCTION workfence."work_unschedule"("name" TEXT) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_unschedule_wrapper';
CREATE FUNCTION workfence."work_pause_schedule"("name" TEXT) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_pause_schedule_wrapper';
CREATE FUNCTION workfence."work_resume_schedule"("name" TEXT) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_resume_schedule_wrapper';
CREATE FUNCTION workfence."work_fire_schedules"() RETURNS INT
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_fire_schedules_wrapper';
ALTER ROUTINE workfence.work_schedule(text, text, text, jsonb, text, text, integer, integer, text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_schedule(text, text, text, jsonb, text, text, integer, integer, text) FROM PUBLIC;
ALTER ROUTINE workfence.work_unschedule(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_unschedule(text) FROM PUBLIC;
ALTER ROUTINE workfence.work_pause_schedule(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_pause_schedule(text) FROM PUBLIC;
ALTER ROUTINE workfence.work_resume_schedule(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_resume_schedule(text) FROM PUBLIC;
ALTER ROUTINE workfence.work_fire_schedules()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_fire_schedules() FROM PUBLIC;

COMMENT ON FUNCTION workfence.work_schedule(text, text, text, jsonb, text, text, integer, integer, text) IS
'work_schedule(name, cron, queue, payload jsonb DEFAULT ''{}'', timezone DEFAULT ''UTC'', catch_up DEFAULT ''latest'', priority DEFAULT 0, max_attempts DEFAULT 25, group_key DEFAULT NULL) -> boolean. From 0.12.0: creates or replaces the schedule name; true if it is new or a setting changed. Each slot of cron (5 fields, 6 with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly; parsed by croner) in timezone (IANA name) enqueues one item in queue with key <name>@<slot as UTC ISO 8601>, run_at = the slot, and the other arguments as work_enqueue''s, in the transaction that records the slot as fired: each slot fires at most once. A fixed local time skipped by a spring-forward fires once at the transition, a repeated one once; other expressions follow real time. catch_up: latest (after a gap fire the most recent missed slot), all (each, at most 100 per schedule per round), none (only a slot at most 60 seconds old). A new schedule starts at its first slot after now; a replace keeps the next slot if cron and timezone are unchanged, else starts after now and after the last slot fired; it keeps the pause. Errors: 22004 NULL argument, 22023 bad name (1..128 bytes, no control characters) or queue, cron not an expression or naming no time or over 256 bytes, unknown timezone, catch_up not latest/all/none, max_attempts out of 1..1000, bad group_key; 25006 on a hot standby; 42501 when queue grants are enforced and the role has no operate and enqueue grants covering the queue (or no operate grant covering the replaced schedule''s queue).';

COMMENT ON FUNCTION workfence.work_unschedule(text) IS
'work_unschedule(name) -> boolean. From 0.12.0: removes the schedule; true if it existed. The items it fired stay; a fire of it in flight is waited for, and none starts after. Errors: 22004 NULL name, 22023 bad name; 25006 on a hot standby; 42501 when queue grants are enforced and the role has no operate grant covering the schedule''s queue.';

COMMENT ON FUNCTION workfence.work_pause_schedule(text) IS
'work_pause_schedule(name) -> boolean. From 0.12.0: the schedule fires nothing until work_resume_schedule; true if it was not paused. A fire in flight is waited for. Errors: 22004 NULL name, 22023 bad name, 42704 no schedule of that name; 25006 on a hot standby; 42501 when queue grants are enforced and the role has no operate grant covering the schedule''s queue.';

COMMENT ON FUNCTION workfence.work_resume_schedule(text) IS
'work_resume_schedule(name) -> boolean. From 0.12.0: the schedule fires again; true if it was paused. The slots that passed while it was paused are missed slots: its catch_up decides (latest: the most recent, all: each, none: only one at most 60 seconds old). Errors: 22004 NULL name, 22023 bad name, 42704 no schedule of that name; 25006 on a hot standby; 42501 when queue grants are enforced and the role has no operate grant covering the schedule''s queue.';

COMMENT ON FUNCTION workfence.work_fire_schedules() IS
'work_fire_schedules() -> integer. From 0.12.0: fires every due slot of every schedule that is not paused and that no other transaction is firing (passed over, never waited for), in the caller''s transaction; returns how many items it enqueued (a slot whose key exists enqueues none). Safe to call from any number of sessions at once, as often as wanted: no slot is fired twice. At most 1000 schedules and 100 slots of each per call. No queue grant is checked: it does only what the schedules'' makers asked for, at the time they asked; but where queue grants are enforced it fires (and so holds, until the caller''s transaction ends) only the schedules of queues the session''s role holds a grant of any capability on. Each schedule fires without waiting for a lock: one whose slot''s item key another transaction is inserting is passed over and stays due, as is one whose fire fails (a WARNING names it). Errors: 25006 on a hot standby or in a read-only transaction.';

-- ---- a job's life (issue 35): documentation ----
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, text, bigint[], text) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, max_run interval DEFAULT NULL, group_key DEFAULT NULL, on_conflict DEFAULT ''keep'', trace DEFAULT NULL, after bigint[] DEFAULT NULL, on_parent_failure DEFAULT ''cancel'') -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned with inserted = false, unchanged under on_conflict keep. From 0.12.0, on_conflict replace (debounce): a pending item takes the new payload and run_at; preserve_run_at (throttle): the new payload only; with either, a done, failed or cancelled item runs again (pending, attempts afresh, result and checkpoint cleared, errors history kept) and a claimed one takes the new payload and runs once more after its current run ends with a finish, a final failure or a dead letter (its holder''s token keeps working). run_at NULL = now (server time). max_run: a run-time limit, no claim or renew sets lease_until past claimed_at + max_run (NULL: none). group_key (from 0.10.0): the item''s serial group, at most one item of a (queue, group_key) claimed at a time, claimed in claim order (NULL: no group). trace (from 0.12.0): a W3C traceparent stored with the item and returned by every claim of it (with on_conflict replace or preserve_run_at, the item takes the new trace with the payload). after (from 0.12.0, workflows): the ids of up to 1000 parent items of the same database; a new item waits (state waiting) until every parent is done, and becomes pending (due at run_at) in the transaction of the last parent''s accepted finish; on_parent_failure: when a parent ends failed or cancelled, cancel (the waiting item and its waiting descendants are cancelled) or run (the parent counts as ended); an existing key''s after is ignored. Errors: 22004 NULL argument or NULL element of after, 22023 bad queue/key/run_at, max_attempts out of 1..1000, max_run not in (0, 365 days], group_key empty, over 128 bytes or with control characters, on_conflict not keep, replace or preserve_run_at, trace not a traceparent, after naming over 1000 items, on_parent_failure not cancel or run; 23503 an after id of no item (or of a queue the role may not read); 25000 on_conflict of a pending item of a group under REPEATABLE READ or SERIALIZABLE; 42501 when queue grants are enforced and the role has no enqueue grant covering the queue (with on_conflict running a cancelled item again: no operate grant); 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until, progress, trace). progress (from 0.12.0): the item''s checkpoint, the last work_progress of an earlier run under its lease (NULL on a first attempt); trace (from 0.12.0): the W3C traceparent work_enqueue stored with the item (NULL: none). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. From 0.10.0: an item with a group_key is claimed only when no item of its group is claimed (from 0.12.0: fewer than the queue''s per_group, see work_limit) and no pending item of the group comes before it in claim order (a lapsed one is claimed anew first), a batch takes at most one item per group, and a queue''s limits (work_limit) cap what a claim hands out; such a claim returns fewer rows, never waits. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE, or a queue with groups or limits claimed under them; 25006 on a hot standby (claim on the primary); 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting. The first claim of a new history (a promoted standby, a point-in-time recovery, a restored or copied database) moves the epoch sequence to the generation floor (milliseconds since 2000-01-01 x 1024), above every epoch the old history handed out.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until, progress, trace), progress and trace as work_claim''s. Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim (its group and its queue''s limits too, from 0.10.0). Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease, 25000 a queue with groups or limits under REPEATABLE READ or SERIALIZABLE, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer) IS
'work_finish_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, result jsonb DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled, progress, trace). From 0.9.0: a worker''s cycle in one statement and one commit: work_finish(last_id, owner, last_epoch, result), then work_claim(queue, owner, lease, max_items) without a wait, each judged exactly as those functions judge it. One row per claimed item, in claim order; exactly one row with NULL item columns when nothing was claimed. settled is what work_finish would have returned (false: the token was refused, nothing changed for that item). Both halves commit together; an error rolls back both. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch, 22023 bad queue/owner, lease not in (0, 7 days], max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer) IS
'work_fail_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, error text, retry_in interval DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled, progress, trace). From 0.9.0: work_fail(last_id, owner, last_epoch, error, retry_in), then work_claim(queue, owner, lease, max_items) without a wait, in one statement and one commit, rows as work_finish_and_claim returns them; settled is what work_fail would have returned. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch/error, 22023 bad queue/owner, lease not in (0, 7 days], retry_in negative or over 365 days (real length from now), max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_progress(bigint, text, bigint, jsonb) IS
'work_progress(id, owner, epoch, progress jsonb) -> boolean. From 0.12.0: true and progress stored as the item''s checkpoint only under the current token (owner AND epoch, state claimed; a lapsed lease nobody re-claimed still counts, as for work_renew); false and nothing changed for any other token. The checkpoint is shown by work_item and returned by the item''s next claim (the progress column), so a retried run resumes from it; a superseded token can never overwrite a newer run''s checkpoint. At most 64 KiB of jsonb. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner or progress over 64 KiB.';

COMMENT ON FUNCTION workfence.work_await(text, text, interval) IS
'work_await(queue, key, wait interval DEFAULT ''0'') -> zero or one (state, result, last_error). From 0.12.0: zero rows when the queue has no item of that key; at once the item''s state, result and newest error when it is done, failed or cancelled; otherwise sleeps in the server until the commit of a transaction that settles the item wakes it, or wait (at most workfence.long_poll_max, default 3 s) passes, then returns the item''s state (pending or claimed, result NULL: call again). A settle by COMMIT PREPARED wakes nobody (seen when wait ends). Ends the session if the client disconnects. Errors: 22004 NULL argument, 22023 bad queue/key, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE; 42501 when queue grants are enforced and the role has no read grant covering the queue; 57014 when cancelled while waiting.';

COMMENT ON FUNCTION workfence.work_items(text, text, bigint, integer) IS
'work_items(queue, state DEFAULT NULL, after bigint DEFAULT NULL, max int DEFAULT 50) -> setof (id, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, created_at, finished_at, group_key, last_error, progress). From 0.11.0: a page of at most max (1..1000) of the queue''s items, keyset-paged along an index the claims keep: state NULL every item by key descending (generated keys are UUIDv7: newest first); pending in claim order (priority, run_at, id; a pending item not yet due is claimed once due); claimed soonest lease end first (lease_until, id; lapsed leases on top); done, failed, cancelled newest finish first (finished_at, id descending); waiting (from 0.12.0, workflows) oldest first (id). after: the id of the last row of the previous page (NULL: the first page); the page continues after that item''s place in the order as it is now (its sort key, even after it left the listed state), and is empty when that sort key is gone (purged; a claimed item no longer claimed; a finished one retried). last_error: the newest error of the item''s history. progress (from 0.12.0): the item''s checkpoint (work_progress). Reads only (also on a hot standby): grant it with work_item. Errors: 22004 NULL queue or max, 22023 bad queue, state not one of pending, claimed, done, failed, cancelled, waiting, max outside 1..1000; 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
'work_release(id, owner, epoch, delay interval DEFAULT ''0'') -> boolean. Hands a claimed item back unfinished: pending again from clock_timestamp() + delay (with no delay it keeps its run_at, so its place in claim order, from 0.10.0), attempt given back (from 0.12.0, when the run stored a checkpoint: kept, and max_attempts raised by one), token dead. False for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner, delay negative or over 365 days (its real length from now: months count as the calendar months that follow).';

-- ---- issue 36: counters and histograms in shared memory ----
-- What each queue's items went through since the server started, read from
-- shared memory (src/backend/counters.rs): the function behind the view,
-- then the view (as sql/views.sql makes it).
CREATE FUNCTION workfence."queue_counter_rows"() RETURNS TABLE (
	"queue" TEXT,
	"enqueued" bigint,
	"claimed" bigint,
	"done" bigint,
	"failed" bigint,
	"retried" bigint,
	"released" bigint,
	"cancelled" bigint,
	"refused" bigint,
	"lapsed" bigint,
	"bucket_le" double precision[],
	"time_in_queue_buckets" bigint[],
	"time_in_queue_sum" double precision,
	"run_time_buckets" bigint[],
	"run_time_sum" double precision
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_counter_rows_wrapper';
ALTER ROUTINE workfence.queue_counter_rows() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.queue_counter_rows() FROM PUBLIC;
COMMENT ON FUNCTION workfence.queue_counter_rows() IS
'queue_counter_rows() -> setof (queue, enqueued, claimed, done, failed, retried, released, cancelled, refused, lapsed, bucket_le, time_in_queue_buckets, time_in_queue_sum, run_time_buckets, run_time_sum). From 0.12.0: the rows of the view work_queue_counters, one per queue of this database the server has counted for since it started, ordered by queue: counts of what its items went through (counted when the transaction that did it commits; refused at once) and two histograms (time in queue, from run_at to the claim; run time, from the claim to work_finish, work_fail or work_release) with cumulative buckets per upper bound of bucket_le (seconds, 0.005 to 3600, then Infinity) and sums in seconds. Reads shared memory only. No rows unless pg_workfence is in shared_preload_libraries; at most 4096 queues per server are counted. Where queue grants are enforced, only the queues the role has a read grant covering. Grant it with work_queue_counters. Errors: none of its own.';

-- What each queue's items went through since the server started (from
-- 0.12.0): counters and histograms the server keeps in shared memory
-- (src/backend/counters.rs), read in O(queues) without touching an item.
-- Where queue grants are enforced, queue_counter_rows returns only the
-- queues the reader may read.
CREATE VIEW workfence.work_queue_counters AS
SELECT c.queue, c.enqueued, c.claimed, c.done, c.failed, c.retried, c.released, c.cancelled,
       c.refused, c.lapsed, c.bucket_le, c.time_in_queue_buckets, c.time_in_queue_sum,
       c.run_time_buckets, c.run_time_sum
  FROM workfence.queue_counter_rows() AS c;

COMMENT ON VIEW workfence.work_queue_counters IS
    'From 0.12.0: one row per queue the server has counted for in this database since it started (as pg_stat_* '
    'counts: zero again after a restart or crash), with what its items went through: counts, and histograms of time '
    'in queue and run time. Counted when the transaction that did it commits (a refusal at once). Reads shared memory '
    'only: cheap at any number of items. Empty unless pg_workfence is in shared_preload_libraries. Where queue grants '
    'are enforced, only the queues the reader may read. Not readable by PUBLIC; a reader needs EXECUTE on '
    'workfence.queue_counter_rows too.';
COMMENT ON COLUMN workfence.work_queue_counters.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.work_queue_counters.enqueued IS
    'Items inserted by work_enqueue or a schedule''s fire, and items that on_conflict sent to run again (a finished '
    'item, or a claimed one once more).';
COMMENT ON COLUMN workfence.work_queue_counters.claimed IS 'Items handed out by claims (lapsed leases claimed anew included).';
COMMENT ON COLUMN workfence.work_queue_counters.done IS 'Runs finished (work_finish, work_finish_many, work_finish_and_claim).';
COMMENT ON COLUMN workfence.work_queue_counters.failed IS
    'Items that became failed (dead letters): a work_fail on the final attempt, or a lapsed final attempt.';
COMMENT ON COLUMN workfence.work_queue_counters.retried IS
    'Failed attempts sent back for another: work_fail with attempts left, and work_retry.';
COMMENT ON COLUMN workfence.work_queue_counters.released IS 'Claims handed back with work_release.';
COMMENT ON COLUMN workfence.work_queue_counters.cancelled IS 'Items withdrawn with work_cancel.';
COMMENT ON COLUMN workfence.work_queue_counters.refused IS
    'Calls refused for a stale token (as work_queue_stats.refused: counted whether or not the caller commits).';
COMMENT ON COLUMN workfence.work_queue_counters.lapsed IS 'Lapsed leases claimed anew (as work_queue_stats.lapsed).';
COMMENT ON COLUMN workfence.work_queue_counters.bucket_le IS
    'The histograms'' upper bounds in seconds, ascending, Infinity last (17 bounds, 0.005 to 3600): Prometheus'' le.';
COMMENT ON COLUMN workfence.work_queue_counters.time_in_queue_buckets IS
    'Time in queue, from an item''s run_at (when it fell due) to its claim, for claims of pending items: per bound of '
    'bucket_le, how many took at most that long (cumulative; the last element is the count).';
COMMENT ON COLUMN workfence.work_queue_counters.time_in_queue_sum IS 'Sum of the times in queue, in seconds.';
COMMENT ON COLUMN workfence.work_queue_counters.run_time_buckets IS
    'Run time, from a claim to its work_finish, work_fail or work_release: per bound of bucket_le, how many took at '
    'most that long (cumulative; the last element is the count).';
COMMENT ON COLUMN workfence.work_queue_counters.run_time_sum IS 'Sum of the run times, in seconds.';

REVOKE ALL ON TABLE workfence.work_queue_counters FROM PUBLIC;

-- ---- issue 36: each queue's last hour (the dashboard's charts) ----
-- Read from shared memory beside the counters (src/backend/history.rs):
-- the function behind the view, then the view (as sql/views.sql makes it).
CREATE FUNCTION workfence."queue_history_rows"(
	"queue" TEXT DEFAULT NULL
) RETURNS TABLE (
	"queue" TEXT,
	"minute" timestamp with time zone,
	"enqueued" bigint,
	"claimed" bigint,
	"done" bigint,
	"failed" bigint,
	"time_in_queue_p50" double precision,
	"time_in_queue_p99" double precision,
	"backlog" bigint
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_history_rows_wrapper';
ALTER ROUTINE workfence.queue_history_rows(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.queue_history_rows(text) FROM PUBLIC;
COMMENT ON FUNCTION workfence.queue_history_rows(text) IS
'queue_history_rows(queue DEFAULT NULL) -> setof (queue, minute, enqueued, claimed, done, failed, time_in_queue_p50, time_in_queue_p99, backlog). From 0.12.0: the rows of the view work_queue_history: per queue of this database with a history (queue given: that one only), 60 rows, one per minute up to the current one (minute: its start), ordered by queue and minute: the counts of work_queue_counters committed in that minute, the p50 and p99 of the time in queue of its claims of pending items in seconds (estimated from the counters'' buckets as Prometheus'' histogram_quantile does; NULL without one), and backlog, the queue''s pending items at the minute''s end, the current minute''s as they are now (NULL where unknown). Reads shared memory only. No rows unless pg_workfence is in shared_preload_libraries; a restart starts the hour afresh; at most 1024 queues per server are charted within one hour. Where queue grants are enforced, only the queues the role has a read grant covering. Grant it with work_queue_history. Errors: 22023 bad queue; 42501 when queue grants are enforced and the role has no read grant covering the given queue.';

-- Each queue's last hour, minute by minute (from 0.12.0): what the
-- dashboard's charts draw, kept in shared memory beside the counters
-- (src/backend/history.rs). Where queue grants are enforced,
-- queue_history_rows returns only the queues the reader may read.
CREATE VIEW workfence.work_queue_history AS
SELECT h.queue, h.minute, h.enqueued, h.claimed, h.done, h.failed,
       h.time_in_queue_p50, h.time_in_queue_p99, h.backlog
  FROM workfence.queue_history_rows() AS h;

COMMENT ON VIEW workfence.work_queue_history IS
    'From 0.12.0: each queue''s last hour in this database, 60 rows per queue, one per minute up to the current one: '
    'what work_queue_counters counted in that minute, its claims'' time in queue (p50, p99) and the backlog at its end. '
    'Reads shared memory only. Empty unless pg_workfence is in shared_preload_libraries; a restart starts the hour '
    'afresh; at most 1024 queues per server are charted within one hour. Where queue grants are enforced, only the queues the '
    'reader may read. Not readable by PUBLIC; a reader needs EXECUTE on workfence.queue_history_rows too.';
COMMENT ON COLUMN workfence.work_queue_history.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.work_queue_history.minute IS 'The minute''s start.';
COMMENT ON COLUMN workfence.work_queue_history.enqueued IS 'Items enqueued (as work_queue_counters.enqueued) in the minute.';
COMMENT ON COLUMN workfence.work_queue_history.claimed IS 'Items claimed in the minute.';
COMMENT ON COLUMN workfence.work_queue_history.done IS 'Runs finished in the minute.';
COMMENT ON COLUMN workfence.work_queue_history.failed IS 'Items that became failed in the minute.';
COMMENT ON COLUMN workfence.work_queue_history.time_in_queue_p50 IS
    'Median time in queue of the minute''s claims of pending items, in seconds, estimated from the counters'' buckets; '
    'NULL without one (a lapsed lease claimed anew is not timed).';
COMMENT ON COLUMN workfence.work_queue_history.time_in_queue_p99 IS
    '99th percentile of the time in queue of the minute''s claims of pending items, in seconds; NULL without one.';
COMMENT ON COLUMN workfence.work_queue_history.backlog IS
    'Pending items (due or not) at the minute''s end (the current minute''s: now), from the state counts '
    'work_queue_stats reads; NULL where unknown.';

REVOKE ALL ON TABLE workfence.work_queue_history FROM PUBLIC;

-- ---- issue 36: state counts kept by the server ----
-- work_queue_stats reads the state counts the server keeps at each commit
-- (src/backend/counters.rs) instead of counting every item; the old view
-- stays as work_queue_stats_exact. A role that reads work_queue_stats needs
-- EXECUTE on the new function too: every grantee of SELECT on the view
-- gets it (with the grant option if it had it).
CREATE FUNCTION workfence."queue_state_counts"(
	"rebuild" bool DEFAULT false
) RETURNS TABLE (
	"queue" TEXT,
	"pending" bigint,
	"claimed" bigint,
	"done" bigint,
	"failed" bigint,
	"cancelled" bigint,
	"waiting" bigint
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_state_counts_wrapper';
ALTER ROUTINE workfence.queue_state_counts(boolean) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.queue_state_counts(boolean) FROM PUBLIC;
COMMENT ON FUNCTION workfence.queue_state_counts(boolean) IS
'queue_state_counts(rebuild boolean DEFAULT false) -> setof (queue, pending, claimed, done, failed, cancelled, waiting). From 0.12.0: per queue of this database with items, how many are in each state, as work_queue_stats reads them. With pg_workfence in shared_preload_libraries the server keeps these counts in shared memory, each commit adding what its transaction moved, so a read touches no item; after a restart (or with rebuild true) the first read rebuilds them with one scan of the items while commits go on, waiting for no one, unless its own transaction has written, a transaction is prepared in the database, or the server is in recovery (then it counts the items). Without preloading it counts the items. Exact while items change only through the extension''s functions (a DELETE or UPDATE of workfence.items by hand, or a transaction prepared across a rebuild, needs rebuild true; work_queue_stats_exact counts the items). Where queue grants are enforced, only the queues the role has a read grant covering. Grant it with work_queue_stats. Errors: 22004 NULL rebuild.';
COMMENT ON FUNCTION workfence.work_purge(interval, text) IS
'work_purge(older_than interval DEFAULT ''7 days'', queue DEFAULT NULL) -> bigint. Deletes the done, failed and cancelled items whose finished_at is before clock_timestamp() - older_than, in one queue or (NULL) all; returns how many: from 0.12.0 at most 10000 per call, the oldest first (call it again, each call its own transaction, until it returns fewer). Never touches pending or claimed items; skips rows another transaction has locked (FOR UPDATE SKIP LOCKED), so it never waits. Ids and epochs are never reused after a purge. Errors: 22004 NULL older_than, 22023 older_than negative, with a negative field or over 3650 days, bad queue; 42501 when queue grants are enforced and the role has no purge grant covering the queue (with queue NULL: no purge grant of *).';

DO $grants$
DECLARE
    grant_to pg_catalog.text;
BEGIN
    FOR grant_to IN
        SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname::pg_catalog.text) END
               || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
          FROM pg_catalog.pg_class AS c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) AS a
          LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
         WHERE c.oid OPERATOR(pg_catalog.=) 'workfence.work_queue_stats'::pg_catalog.regclass
           AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.queue_state_counts(boolean) TO %s', grant_to);
    END LOOP;
END
$grants$;

CREATE OR REPLACE VIEW workfence.work_queue_stats WITH (security_barrier) AS
WITH server_time AS MATERIALIZED (
    SELECT pg_catalog.clock_timestamp() AS now
), states AS MATERIALIZED (
    SELECT s.queue, s.pending, s.claimed, s.done, s.failed, s.cancelled, s.waiting
      FROM workfence.queue_state_counts() AS s
), counts AS (
    -- The split of pending into due and scheduled, and of claimed into
    -- live and expired, depends on the clock: read from the partial
    -- indexes of pending and claimed items, over the scheduled and expired
    -- ones only (the working set, never the history).
    SELECT s.queue,
           GREATEST(s.pending OPERATOR(pg_catalog.-) f.scheduled, 0) AS pending,
           LEAST(f.scheduled, s.pending) AS scheduled,
           GREATEST(s.claimed OPERATOR(pg_catalog.-) x.expired, 0) AS claimed,
           LEAST(x.expired, s.claimed) AS expired,
           s.done, s.failed, s.cancelled, s.waiting,
           t.now OPERATOR(pg_catalog.-) LEAST(o.run_at, o.created_at) AS oldest_due_age
      FROM states AS s
     CROSS JOIN server_time AS t
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS scheduled
             FROM workfence.items AS i
            WHERE i.queue OPERATOR(pg_catalog.=) s.queue
              AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
              AND i.run_at OPERATOR(pg_catalog.>) t.now) AS f
     CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS expired
             FROM workfence.items AS i
            WHERE i.queue OPERATOR(pg_catalog.=) s.queue
              AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
              AND i.lease_until OPERATOR(pg_catalog.<=) t.now) AS x
     -- The oldest due item: the first finite run_at in the index, and the
     -- enqueue time of items due at '-infinity' (due since their enqueue;
     -- subtracting an infinite timestamp is an error in PostgreSQL 15).
     CROSS JOIN LATERAL (
           SELECT (SELECT i.run_at
                     FROM workfence.items AS i
                    WHERE i.queue OPERATOR(pg_catalog.=) s.queue
                      AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                      AND i.run_at OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz
                      AND i.run_at OPERATOR(pg_catalog.<=) t.now
                    ORDER BY i.run_at
                    LIMIT 1) AS run_at,
                  (SELECT pg_catalog.min(i.created_at)
                     FROM workfence.items AS i
                    WHERE i.queue OPERATOR(pg_catalog.=) s.queue
                      AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                      AND i.run_at OPERATOR(pg_catalog.=) '-infinity'::pg_catalog.timestamptz)
                    AS created_at) AS o
), names AS MATERIALIZED (
    SELECT u.queue
      FROM (SELECT c.queue FROM counts AS c
            UNION
            SELECT q.queue FROM workfence.queues AS q) AS u
     WHERE workfence.work_may('read', u.queue)
)
SELECT n.queue,
       COALESCE(c.pending, 0) AS pending,
       COALESCE(c.scheduled, 0) AS scheduled,
       COALESCE(c.claimed, 0) AS claimed,
       COALESCE(c.expired, 0) AS expired,
       COALESCE(c.done, 0) AS done,
       COALESCE(c.failed, 0) AS failed,
       COALESCE(c.cancelled, 0) AS cancelled,
       c.oldest_due_age,
       COALESCE(q.paused, false) AS paused,
       f.refused,
       f.lapsed,
       q.concurrency,
       q.rate,
       q.per,
       q.per_group,
       COALESCE(c.waiting, 0) AS waiting
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;
COMMENT ON COLUMN workfence.work_queue_stats.waiting IS
    'From 0.12.0: items waiting for their parents (work_enqueue''s after): each becomes pending in the transaction of '
    'its last parent''s finish.';

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items or settings (work_pause, work_limit): how many items are in each state, how '
    'long the oldest due item has waited, by the server''s clock (clock_timestamp(), read once per '
    'query), whether the queue is paused, its limits, and how often fencing refused a stale token. Where queue grants are '
    'enforced, only the queues the reader may read (work_may). From 0.12.0 the state counts come from the server '
    '(workfence.queue_state_counts: kept at each commit, with the library preloaded), and the items read are the '
    'scheduled and expired ones only; work_queue_stats_exact counts every item. Not readable by PUBLIC; a reader '
    'needs EXECUTE on workfence.queue_state_counts, workfence.queue_counters and workfence.work_may too.';

-- work_queue_stats as it was until 0.11.0 (from 0.12.0 under this name): the
-- same columns, counted from every item at every read. For a check of the
-- state counts the server keeps (they are exact unless items were changed
-- by hand), not for monitoring.
CREATE VIEW workfence.work_queue_stats_exact WITH (security_barrier) AS
WITH server_time AS MATERIALIZED (
    SELECT pg_catalog.clock_timestamp() AS now
), counts AS (
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
           -- (As text: an update to 0.12.0 creates this view in the
           -- transaction that adds the enum's value, which may not use it.)
           pg_catalog.count(*) FILTER (
               WHERE i.state::pg_catalog.text OPERATOR(pg_catalog.=) 'waiting') AS waiting,
           -- An item due at '-infinity' has been due since its enqueue (and
           -- subtracting an infinite timestamp is an error in PostgreSQL 15).
           t.now OPERATOR(pg_catalog.-) pg_catalog.min(
               CASE WHEN pg_catalog.isfinite(i.run_at) THEN i.run_at ELSE i.created_at END)
               FILTER (
                   WHERE i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                     AND i.run_at OPERATOR(pg_catalog.<=) t.now) AS oldest_due_age
      FROM workfence.items AS i
     CROSS JOIN server_time AS t
     GROUP BY i.queue, t.now
), names AS MATERIALIZED (
    SELECT u.queue
      FROM (SELECT c.queue FROM counts AS c
            UNION
            SELECT q.queue FROM workfence.queues AS q) AS u
     WHERE workfence.work_may('read', u.queue)
)
SELECT n.queue,
       COALESCE(c.pending, 0) AS pending,
       COALESCE(c.scheduled, 0) AS scheduled,
       COALESCE(c.claimed, 0) AS claimed,
       COALESCE(c.expired, 0) AS expired,
       COALESCE(c.done, 0) AS done,
       COALESCE(c.failed, 0) AS failed,
       COALESCE(c.cancelled, 0) AS cancelled,
       c.oldest_due_age,
       COALESCE(q.paused, false) AS paused,
       f.refused,
       f.lapsed,
       q.concurrency,
       q.rate,
       q.per,
       q.per_group,
       COALESCE(c.waiting, 0) AS waiting
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;

COMMENT ON VIEW workfence.work_queue_stats_exact IS
    'From 0.12.0: work_queue_stats counted from the items themselves (a scan of workfence.items at every read, '
    '0.6-0.9 s at a million items): what work_queue_stats was until 0.11.0. For checking the state counts the server '
    'keeps, not for monitoring. Not readable by PUBLIC.';
REVOKE ALL ON TABLE workfence.work_queue_stats_exact FROM PUBLIC;

-- As sql/finalize.sql: row estimates of the functions the views read.
ALTER FUNCTION workfence.queue_state_counts(boolean) ROWS 10;
ALTER FUNCTION workfence.queue_counter_rows() ROWS 10;
ALTER FUNCTION workfence.queue_counters(text) ROWS 1;

-- queue_counters: the counter table holds 4096 queues from 0.12.0.
COMMENT ON FUNCTION workfence.queue_counters(text) IS
'queue_counters(queue) -> zero or one (refused, lapsed): stale-token calls refused and lapsed leases claimed anew in the queue since the server started, as work_queue_stats shows them. No row unless pg_workfence is in shared_preload_libraries (or when the server''s counter table of 4096 queues is full and the queue is not in it). Grant it with work_queue_stats. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no read grant covering the queue.';
