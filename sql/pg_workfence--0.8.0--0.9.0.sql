-- pg_workfence 0.8.0 -> 0.9.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.9.0 is released: never edit it, write the next step as
-- pg_workfence--0.9.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh 0.9.0
-- install.
--
-- What 0.9.0 adds (issue 15, faster than the same semantics by hand): the
-- fused calls work_finish_and_claim and work_fail_and_claim, a worker's
-- cycle (settle the previous item, claim the next) in one statement and one
-- commit (src/cycle.rs, docs/benchmarks.md). Nothing else changes: no
-- table, no existing function. Calls keep working while this runs
-- (CONTRIBUTING.md, "An update keeps every function callable").

-- ---- a worker's cycle in one call ----
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
	"settled" bool
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_finish_and_claim_wrapper';

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
	"settled" bool
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_fail_and_claim_wrapper';

COMMENT ON FUNCTION workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer) IS
'work_finish_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, result jsonb DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled). From 0.9.0: a worker''s cycle in one statement and one commit: work_finish(last_id, owner, last_epoch, result), then work_claim(queue, owner, lease, max_items) without a wait, each judged exactly as those functions judge it. One row per claimed item, in claim order; exactly one row with NULL item columns when nothing was claimed. settled is what work_finish would have returned (false: the token was refused, nothing changed for that item). Both halves commit together; an error rolls back both. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch, 22023 bad queue/owner, lease not in (0, 7 days], max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer) IS
'work_fail_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, error text, retry_in interval DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled). From 0.9.0: work_fail(last_id, owner, last_epoch, error, retry_in), then work_claim(queue, owner, lease, max_items) without a wait, in one statement and one commit, rows as work_finish_and_claim returns them; settled is what work_fail would have returned. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch/error, 22023 bad queue/owner, lease not in (0, 7 days], retry_in negative or over 365 days (real length from now), max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

-- ---- signatures retired by earlier updates ----
-- Dropped now, unless this very transaction renamed them (an update from
-- 0.5.0 or earlier straight to 0.9.0 keeps 0.5.0's work_enqueue, from 0.1.0
-- 0.1.0's work_claim, until the next update): calls in flight that
-- resolved them before that update must still find them.
DO $retire$
BEGIN
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
-- privilege"). Only the new functions: the grants an operator made on the
-- objects that were there before stay as they are.
DO $privileges$
DECLARE
    routine pg_catalog.regprocedure;
BEGIN
    FOR routine IN
        SELECT pg_catalog.unnest(ARRAY[
            'workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer)',
            'workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer)'
        ]::pg_catalog.regprocedure[])
    LOOP
        -- Catalog names rendered by regprocedure, not user data.
        EXECUTE pg_catalog.format(
            'ALTER ROUTINE %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', routine);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', routine);
    END LOOP;
END
$privileges$;
