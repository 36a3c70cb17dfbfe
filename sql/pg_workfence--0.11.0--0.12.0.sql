-- pg_workfence 0.11.0 -> 0.12.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.12.0 is released: never edit it, write the next step as
-- pg_workfence--0.12.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh
-- 0.12.0 install.
--
-- What 0.12.0 changes so far. Issue 30 (features that compose): work_item
-- shows the item's group_key; the resume that kept a queue's other
-- settings and the locks out of SQL's reach are in the library alone.
-- Issue 33 (claims that never walk the backlog): the index items_ready_idx
-- (built here: the update holds a SHARE lock on workfence.items while it
-- builds, so enqueues and claims wait for it, 165 ms for 256k pending items
-- on a 2-core machine), the column items.slot and its index, and the slot
-- rows of limited queues (workfence.queue_slots, filled from each limited
-- queue's claimed items and rate window, which replace queues.rate_log). A claim that runs before the update commits
-- keeps the limits as 0.11.0 did (src/flow.rs, the schema's form).

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
	"group_key" TEXT
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
	"group_key" TEXT
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_item_of_id_wrapper';

-- ---- documentation ----
COMMENT ON FUNCTION workfence.work_item(text, text) IS
'work_item(queue, key) -> zero or one (id, queue, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, errors, result, created_at, finished_at, payload, max_run, group_key). The item as an operator sees it; errors is its history of failed attempts and lapsed leases, oldest first (the newest 20 kept); group_key its serial group (NULL: none; from 0.12.0). Reads only: grant it to a role that may only look. Errors: 22004 NULL queue/key, 22023 bad queue/key, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

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
            'workfence.work_item_retired_0_11_0(bigint)'
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
    'limited queue (src/flow.rs); meaningless in other states.';

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
    'Slots of the limited queues, written by work_limit and by claims (src/flow.rs): a claim takes a free slot per item '
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
-- would set them (src/flow.rs). No claim is in flight while they are read:
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

-- ---- issue 33: work_limit's comment says how claims keep the limits now ----
COMMENT ON FUNCTION workfence.work_limit(text, integer, integer, interval) IS
'work_limit(queue, concurrency int DEFAULT NULL, rate int DEFAULT NULL, per interval DEFAULT ''1 second'') -> void. From 0.10.0: at most concurrency items of the queue claimed at once (a lapsed lease keeps its slot until claimed anew or dead-lettered), at most rate items handed out by claims in any window of length per (sliding, server clock); NULL lifts a limit, work_limit(queue) both; shown in work_queue_stats. A claim that would exceed a limit returns fewer rows, never waits; from 0.12.0 each item it hands out takes a slot row of the queue (workfence.queue_slots) FOR UPDATE SKIP LOCKED, so claims of one queue run side by side; lowering a limit takes nothing back (claims wait until fewer items than it are claimed); claims of a limited queue run in READ COMMITTED only (see work_claim). Errors: 22004 NULL queue or per, 22023 bad queue, concurrency or rate outside 1..10000, per not in (0, 1 day]; 42501 when queue grants are enforced and the role has no operate grant covering the queue.';
