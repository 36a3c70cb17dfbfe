-- pg_workfence 0.10.0 -> 0.11.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.11.0 is released: never edit it, write the next step as
-- pg_workfence--0.11.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh
-- 0.11.0 install.
--
-- What 0.11.0 adds (issue 18, the dashboard): work_items, a queue's items
-- a page at a time along the indexes the claims already keep (keyset
-- pagination; src/listing.rs). No table, index or column changes: the
-- update takes no lock on workfence.items and calls keep working while it
-- runs.

-- ---- work_items ----
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
	"last_error" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_items_wrapper';

-- ---- documentation ----
COMMENT ON FUNCTION workfence.work_items(text, text, bigint, integer) IS
'work_items(queue, state DEFAULT NULL, after bigint DEFAULT NULL, max int DEFAULT 50) -> setof (id, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, created_at, finished_at, group_key, last_error). From 0.11.0: a page of at most max (1..1000) of the queue''s items, keyset-paged along an index the claims keep: state NULL every item by key descending (generated keys are UUIDv7: newest first); pending in claim order (priority, run_at, id; a pending item not yet due is claimed once due); claimed soonest lease end first (lease_until, id; lapsed leases on top); done, failed, cancelled newest finish first (finished_at, id descending). after: the id of the last row of the previous page (NULL: the first page); the page continues after that item''s place in the order as it is now (its sort key, even after it left the listed state), and is empty when that sort key is gone (purged; a claimed item no longer claimed; a finished one retried). last_error: the newest error of the item''s history. Reads only (also on a hot standby): grant it with work_item. Errors: 22004 NULL queue or max, 22023 bad queue, state not one of pending, claimed, done, failed, cancelled, max outside 1..1000; 42501 when queue grants are enforced and the role has no read grant covering the queue.';

-- ---- signatures retired by earlier updates ----
-- Dropped now, unless this very transaction renamed them (an update from
-- 0.9.0 or earlier straight to 0.11.0 keeps 0.9.0's work_enqueue, from
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

-- ---- privileges of the new function ----
-- As sql/finalize.sql sets them in a fresh install: SECURITY DEFINER with a
-- pinned search_path, no EXECUTE for PUBLIC (docs/operations.md, "Least
-- privilege").
ALTER ROUTINE workfence.work_items(text, text, bigint, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION workfence.work_items(text, text, bigint, integer) FROM PUBLIC;

-- ---- work_items reaches whoever could read items ----
-- A role (or PUBLIC) granted EXECUTE on work_item(bigint) (the monitoring
-- role of docs/operations.md) may list items after the update, as a fresh
-- install's guide grants it, with the grant option if it had it: the
-- dashboard keeps working for the role it runs as.
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
         WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('workfence.work_item(bigint)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_items(text, text, bigint, integer) TO %s',
            grant_to);
    END LOOP;
END
$grants$;
