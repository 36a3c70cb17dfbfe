-- pg_workfence 0.9.0 -> 0.10.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.10.0 is released: never edit it, write the next step as
-- pg_workfence--0.10.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh
-- 0.10.0 install.
--
-- What 0.10.0 adds (issue 17, flow control in the server): serial groups
-- (work_enqueue's group_key, the items' group_key column and
-- items_group_idx), queue limits (work_limit, the queues' concurrency,
-- rate, per, grouped and rate_log columns, work_queue_stats' concurrency,
-- rate and per). src/flow.rs explains how claims keep them. A release
-- with no delay keeps the item's run_at (its place in claim order).
--
-- Calls keep working while this runs (CONTRIBUTING.md, "An update keeps
-- every function callable"): the 0.10.0 library claims as 0.9.0 did until
-- items_group_idx exists (src/flow.rs, schema_has_flow), and work_enqueue,
-- whose arguments change, is renamed out of the way rather than dropped.
-- The next version's update drops it.
--
-- Under load: the new columns have no default or a constant one (no table
-- rewrite); CREATE INDEX reads workfence.items once under a SHARE lock,
-- which claims and finishes wait for (no item has a group yet, so the
-- index is empty when built): about a second per million items.

-- ---- serial groups ----
ALTER TABLE workfence.items ADD COLUMN group_key text;
COMMENT ON COLUMN workfence.items.group_key IS
    'Serial group within the queue (from 0.10.0): at most one item of a (queue, group_key) is claimed at a time, '
    'and a group''s items are claimed in claim order (priority, run_at, id). NULL: in no group.';
CREATE INDEX items_group_idx ON workfence.items (queue, group_key, state, priority, run_at, id)
    WHERE group_key IS NOT NULL AND state IN ('pending', 'claimed');
COMMENT ON INDEX workfence.items_group_idx IS
    'Serial groups: a group''s claimed item, and its pending items in claim order.';

-- ---- queue limits, and which queues have groups ----
ALTER TABLE workfence.queues
    ADD COLUMN concurrency integer,
    ADD COLUMN rate integer,
    ADD COLUMN per interval,
    ADD COLUMN grouped boolean NOT NULL DEFAULT false,
    ADD COLUMN rate_log timestamptz[];
COMMENT ON TABLE workfence.queues IS
    'Settings of queues, set by an operator through the workfence.work_* functions (work_pause, work_resume, work_limit; '
    'grouped by the first work_enqueue with a group_key), '
    'which tell every session to read it again; a row written any other way is seen by new sessions only. '
    'A queue without a row has the defaults (not paused). Not writable by PUBLIC.';
COMMENT ON COLUMN workfence.queues.concurrency IS
    'From 0.10.0 (work_limit): at most this many items of the queue under unexpired leases at once; NULL: no limit.';
COMMENT ON COLUMN workfence.queues.rate IS
    'From 0.10.0 (work_limit): at most this many items handed out by claims in any window of length per; NULL: no limit.';
COMMENT ON COLUMN workfence.queues.per IS 'From 0.10.0 (work_limit): the window of the rate limit; NULL without one.';
COMMENT ON COLUMN workfence.queues.grouped IS
    'From 0.10.0: whether an item with a group_key was ever enqueued in the queue (its claims then keep groups serial).';
COMMENT ON COLUMN workfence.queues.rate_log IS
    'From 0.10.0: server times of the claims of the rate limit''s window, one per item handed out, oldest first.';

-- ---- work_queue_stats shows the limits ----
-- (The view keeps the privileges it had: CREATE OR REPLACE VIEW does not change them.)
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
       q.per
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items or settings (work_pause, work_limit): how many items are in each state, how '
    'long the oldest due item has waited, by the server''s clock (clock_timestamp(), read once per '
    'query), whether the queue is paused, its limits, and how often fencing refused a stale token. Where queue grants are '
    'enforced, only the queues the reader may read (work_may). Reads every item (a scan of workfence.items): '
    'for monitoring, not for a hot path. Not readable by PUBLIC; a reader needs EXECUTE on '
    'workfence.queue_counters and workfence.work_may too.';
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
COMMENT ON COLUMN workfence.work_queue_stats.paused IS 'Whether the queue is paused (work_pause): claims of it hand out nothing.';
COMMENT ON COLUMN workfence.work_queue_stats.refused IS
    'Calls of work_renew, work_finish, work_finish_many (per pair), work_release, work_fail and work_assert refused '
    'for a token that is not the current one, since the server started (counted whether or not the caller commits). '
    'NULL unless pg_workfence is in shared_preload_libraries.';
COMMENT ON COLUMN workfence.work_queue_stats.lapsed IS
    'Lapsed leases claimed anew (each superseded a token), since the server started. '
    'NULL unless pg_workfence is in shared_preload_libraries.';
COMMENT ON COLUMN workfence.work_queue_stats.concurrency IS
    'From 0.10.0: the queue''s concurrency limit (work_limit): at most this many items under unexpired leases; NULL: none.';
COMMENT ON COLUMN workfence.work_queue_stats.rate IS
    'From 0.10.0: the queue''s rate limit (work_limit): at most this many items handed out per per; NULL: none.';
COMMENT ON COLUMN workfence.work_queue_stats.per IS 'From 0.10.0: the window of the rate limit; NULL without one.';

-- ---- work_enqueue gains group_key ----
-- Renamed, not dropped: a call that resolved the 7-argument function before
-- this update commits still finds it (its C symbol,
-- work_enqueue_with_max_run_wrapper, stays in the library).
ALTER FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval)
    RENAME TO work_enqueue_retired_0_9_0;

CREATE FUNCTION workfence.work_enqueue(
	"queue" TEXT,
	"payload" jsonb DEFAULT '{}',
	"key" TEXT DEFAULT NULL,
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"max_attempts" INT DEFAULT 25,
	"max_run" interval DEFAULT NULL,
	"group_key" TEXT DEFAULT NULL
) RETURNS TABLE (
	"id" bigint,
	"key" TEXT,
	"inserted" bool
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_enqueue_with_group_wrapper';

-- ---- work_limit ----
CREATE FUNCTION workfence."work_limit"(
	"queue" TEXT,
	"concurrency" INT DEFAULT NULL,
	"rate" INT DEFAULT NULL,
	"per" interval DEFAULT '1 second'
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_limit_wrapper';

-- ---- documentation ----
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, max_run interval DEFAULT NULL, group_key DEFAULT NULL) -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned unchanged with inserted = false. run_at NULL = now (server time). max_run: a run-time limit, no claim or renew sets lease_until past claimed_at + max_run (NULL: none). group_key (from 0.10.0): the item''s serial group, at most one item of a (queue, group_key) claimed at a time, claimed in claim order (NULL: no group). Errors: 22004 NULL argument, 22023 bad queue/key/run_at, max_attempts out of 1..1000, max_run not in (0, 365 days], group_key empty, over 128 bytes or with control characters; 42501 when queue grants are enforced and the role has no enqueue grant covering the queue; 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_limit(text, integer, integer, interval) IS
'work_limit(queue, concurrency int DEFAULT NULL, rate int DEFAULT NULL, per interval DEFAULT ''1 second'') -> void. From 0.10.0: at most concurrency items of the queue claimed at once (a lapsed lease keeps its slot until claimed anew or dead-lettered), at most rate items handed out by claims in any window of length per (sliding, server clock); NULL lifts a limit, work_limit(queue) both; shown in work_queue_stats. A claim that would exceed a limit returns fewer rows, never waits; claims of a limited queue hold its limit lock to the end of their transaction (claim in a transaction of its own) and run in READ COMMITTED only (see work_claim). Errors: 22004 NULL queue or per, 22023 bad queue, concurrency or rate outside 1..10000, per not in (0, 1 day]; 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. From 0.10.0: an item with a group_key is claimed only when no item of its group is claimed and no pending item of the group comes before it in claim order (a lapsed one is claimed anew first), a batch takes at most one item per group, and a queue''s limits (work_limit) cap what a claim hands out; such a claim returns fewer rows, never waits. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE, or a queue with groups or limits claimed under them; 25006 on a hot standby (claim on the primary); 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting. The first claim of a new history (a promoted standby, a point-in-time recovery, a restored or copied database) moves the epoch sequence to the generation floor (milliseconds since 2000-01-01 x 1024), above every epoch the old history handed out.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until). Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim (its group and its queue''s limits too, from 0.10.0). Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease, 25000 a queue with groups or limits under REPEATABLE READ or SERIALIZABLE, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_grant(text, text, text) IS
'work_grant(capability, queues, role) -> boolean. Lets role (and its members) use capability on queues: enqueue (work_enqueue), claim (work_claim, work_claim_key and the token calls), operate (work_cancel, work_retry, work_reschedule, work_pause, work_resume, work_limit), read (work_queue_stats, work_item, queue_counters) or purge (work_purge); queues is a queue name or a prefix followed by * (* alone: every queue). Checked only while queue grants are enforced (work_enforce_grants); every session sees it from its next call after the commit. True if the grant is new. For the extension''s owner. Errors: 22004 NULL argument, 22023 unknown capability, empty queues, name or prefix over 128 bytes or with control characters, empty role or one over 63 bytes; 42704 role does not exist; 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
'work_release(id, owner, epoch, delay interval DEFAULT ''0'') -> boolean. Hands a claimed item back unfinished: pending again from clock_timestamp() + delay (with no delay it keeps its run_at, so its place in claim order, from 0.10.0), attempt given back, token dead. False for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner, delay negative or over 365 days (its real length from now: months count as the calendar months that follow).';

-- ---- signatures retired by earlier updates ----
-- Dropped now, unless this very transaction renamed them (an update from
-- 0.5.0 or earlier straight to 0.10.0 keeps 0.5.0's work_enqueue, from
-- 0.1.0 0.1.0's work_claim, until the next update): calls in flight that
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
            'workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text)',
            'workfence.work_limit(text, integer, integer, interval)'
        ]::pg_catalog.regprocedure[])
    LOOP
        -- Catalog names rendered by regprocedure, not user data.
        EXECUTE pg_catalog.format(
            'ALTER ROUTINE %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', routine);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', routine);
    END LOOP;
END
$privileges$;

-- ---- the new work_enqueue keeps the old one's grants ----
-- A role (or PUBLIC) granted EXECUTE on the 7-argument work_enqueue (the
-- enqueuer group of docs/operations.md) may call the 8-argument one after
-- the update, as before it, with the grant option if it had it.
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
                   'workfence.work_enqueue_retired_0_9_0(text, jsonb, text, timestamptz, integer, integer, interval)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text) TO %s',
            grant_to);
    END LOOP;
END
$grants$;
