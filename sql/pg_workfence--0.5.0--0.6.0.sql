-- pg_workfence 0.5.0 -> 0.6.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.6.0 is released: never edit it, write the next step as
-- pg_workfence--0.6.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh 0.6.0
-- install.
--
-- What 0.6.0 adds (issue 12, operating queues): work_retry, work_reschedule,
-- work_pause, work_resume, work_item (by key and by id), work_enqueue's
-- max_run, the items' claimed_at, max_run and errors columns, the queues
-- table, work_queue_stats' paused, refused and lapsed columns (the last two
-- from queue_counters, shared memory), NOTIFY work_lease_lost.
--
-- Calls keep working while this runs (CONTRIBUTING.md, "An update keeps
-- every function callable"): the 0.6.0 library runs the statements of a
-- schema before 0.6.0 until this commits (src/plans.rs, Schema), and
-- work_enqueue, whose arguments change, is renamed out of the way rather
-- than dropped. The next version's update drops it.

-- ---- the shapes of errors entries and work_lease_lost payloads ----
-- The shapes of two JSON objects the functions build: an entry of an item's
-- `errors` history, and the payload of NOTIFY work_lease_lost (to_jsonb /
-- to_json of a row of these, so every key and value is typed and escaped).
CREATE TYPE workfence.error_entry AS (
    attempt  integer,
    epoch    bigint,
    owner    text,
    at       timestamptz,
    error    text
);
COMMENT ON TYPE workfence.error_entry IS
    'One entry of workfence.items.errors, as jsonb: the attempt, the epoch and owner of its token, when it '
    'failed or its lease lapsed (at), and the error text.';
CREATE TYPE workfence.lost_token AS (
    id     bigint,
    queue  text,
    key    text,
    owner  text,
    epoch  bigint
);
COMMENT ON TYPE workfence.lost_token IS
    'The payload of NOTIFY work_lease_lost, as json: the token a claim superseded.';

-- ---- the items' new columns (nullable, no default: no table rewrite) ----
ALTER TABLE workfence.items
    ADD COLUMN claimed_at timestamptz,
    ADD COLUMN max_run interval,
    ADD COLUMN errors jsonb;
COMMENT ON COLUMN workfence.items.claimed_at IS 'Server time the current epoch was claimed (from 0.6.0; NULL for claims made before).';
COMMENT ON COLUMN workfence.items.max_run IS
    'Run-time limit given at enqueue: no claim or renew sets lease_until past claimed_at + max_run. NULL: no limit.';
COMMENT ON COLUMN workfence.items.errors IS
    'History of failed attempts, oldest first: one object {attempt, epoch, owner, at, error} per work_fail and per '
    'lapsed lease (claimed anew or dead-lettered); the newest 20 are kept, each error text at most 2048 bytes. '
    'NULL until the first entry.';

COMMENT ON TYPE workfence.item_state IS
    'Life cycle of an item: pending -> claimed -> done | failed; pending or claimed -> cancelled; '
    'claimed -> pending on release or on a retryable failure. An expired lease is claimed anew '
    'directly (claimed -> claimed, with a new epoch and attempts + 1), or, on the final attempt, '
    'made failed. failed or cancelled -> pending only by an operator''s work_retry (from 0.6.0); done is final.';

-- ---- queue settings ----
-- Settings of a queue, one row per queue that has any (a queue exists by
-- its items; this table holds only what an operator set). `paused`: claims
-- of the queue hand out nothing (work_pause / work_resume).
CREATE TABLE workfence.queues (
    queue      text NOT NULL PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    paused_at  timestamptz
);
COMMENT ON TABLE workfence.queues IS
    'Settings of queues, set by an operator through the workfence.work_* functions (work_pause, work_resume), '
    'which tell every session to read it again; a row written any other way is seen by new sessions only. '
    'A queue without a row has the defaults (not paused). Not writable by PUBLIC.';
COMMENT ON COLUMN workfence.queues.queue IS 'Queue name.';
COMMENT ON COLUMN workfence.queues.paused IS 'Whether claims of the queue hand out nothing (work_pause; work_resume ends it).';
COMMENT ON COLUMN workfence.queues.paused_at IS 'Server time of the work_pause that paused it; NULL when not paused.';
COMMENT ON INDEX workfence.queues_pkey IS 'A queue''s settings by name: the claim''s pause check is one probe here.';
REVOKE ALL ON TABLE workfence.queues FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.queues', '');

-- ---- work_enqueue gains max_run ----
-- Renamed, not dropped: a call that resolved the 6-argument function before
-- this update commits still finds it (its C symbol, work_enqueue_wrapper,
-- stays in the library).
ALTER FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer)
    RENAME TO work_enqueue_retired_0_5_0;

CREATE FUNCTION workfence.work_enqueue(
	"queue" TEXT,
	"payload" jsonb DEFAULT '{}',
	"key" TEXT DEFAULT NULL,
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"max_attempts" INT DEFAULT 25,
	"max_run" interval DEFAULT NULL
) RETURNS TABLE (
	"id" bigint, 
	"key" TEXT, 
	"inserted" bool 
)
VOLATILE PARALLEL UNSAFE  
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_enqueue_with_max_run_wrapper';

-- ---- new functions ----
CREATE FUNCTION workfence.work_retry(
	"queue" TEXT,
	"key" TEXT,
	"run_at" timestamp with time zone DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_retry_wrapper';

CREATE FUNCTION workfence.work_reschedule(
	"queue" TEXT,
	"key" TEXT,
	"run_at" timestamp with time zone
) RETURNS bool
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_reschedule_wrapper';

CREATE FUNCTION workfence.work_pause(
	"queue" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_pause_wrapper';

CREATE FUNCTION workfence.work_resume(
	"queue" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_resume_wrapper';

CREATE FUNCTION workfence.work_item(
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
	"max_run" interval 
)
VOLATILE PARALLEL UNSAFE  
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_item_by_key_wrapper';

CREATE FUNCTION workfence.work_item(
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
	"max_run" interval 
)
VOLATILE PARALLEL UNSAFE  
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_item_by_id_wrapper';

CREATE FUNCTION workfence.queue_counters(
	"queue" TEXT
) RETURNS TABLE (
	"refused" bigint, 
	"lapsed" bigint 
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_counters_wrapper';

-- ---- the monitoring view gains paused, refused and lapsed ----
CREATE OR REPLACE VIEW workfence.work_queue_stats AS
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
), names AS (
    SELECT c.queue FROM counts AS c
    UNION
    SELECT q.queue FROM workfence.queues AS q
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
       f.lapsed
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items or settings (work_pause): how many items are in each state, how '
    'long the oldest due item has waited, by the server''s clock (clock_timestamp(), read once per '
    'query), whether the queue is paused, and how often fencing refused a stale token. Reads every item '
    '(a scan of workfence.items): for monitoring, not for a hot path. Not readable by PUBLIC; a reader '
    'needs EXECUTE on workfence.queue_counters too.';
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

-- (The view keeps the privileges it had: CREATE OR REPLACE VIEW does not change them.)

-- ---- documentation, as sql/finalize.sql writes it ----
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, max_run interval DEFAULT NULL) -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned unchanged with inserted = false. run_at NULL = now (server time). max_run: a run-time limit, no claim or renew sets lease_until past claimed_at + max_run (NULL: none). Errors: 22004 NULL argument, 22023 bad queue/key/run_at, max_attempts out of 1..1000, max_run not in (0, 365 days]; 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE; 57014 when cancelled while waiting.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until). Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim. Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease.';

COMMENT ON FUNCTION workfence.work_renew(bigint, text, bigint, interval) IS
'work_renew(id, owner, epoch, lease interval) -> boolean. True and lease_until = clock_timestamp() + lease, capped at claimed_at + max_run, only if the item is claimed under exactly this owner AND epoch and its max_run is not used up; false otherwise (stop the job). Errors: 22004 NULL argument, 22023 bad owner or lease.';

COMMENT ON FUNCTION workfence.work_fail(bigint, text, bigint, text, interval) IS
'work_fail(id, owner, epoch, error text, retry_in interval DEFAULT NULL) -> boolean. Records error (in last_error and the errors history; a text over 2048 bytes is cut there); pending again after retry_in (NULL: exponential backoff with jitter, 2^n/2..2^n s, at most 1 h) or failed once attempts are used up. False (nothing recorded) for any token but the current one. Errors: 22004 NULL id/owner/epoch/error, 22023 bad owner, retry_in negative or over 365 days (real length from now).';

COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
'work_cancel(queue, key) -> boolean. Cancels the item if it is pending or claimed: state cancelled, finished_at = clock_timestamp(), not claimed again unless work_retry puts it back (under a new epoch); the holder''s token is refused from then on (work_assert: 55000, cancelled). False, changing nothing, when the item is missing or already done, failed or cancelled. Errors: 22004 NULL argument, 22023 bad queue/key.';

COMMENT ON FUNCTION workfence.work_retry(text, text, timestamptz) IS
'work_retry(queue, key, run_at DEFAULT NULL) -> boolean. A failed or cancelled item back to pending, due at run_at (NULL: now), with at least one more attempt (max_attempts raised to attempts + 1 when used up); its errors history is kept, its old tokens stay dead; wakes long polls at commit. True if it changed the item; false for a missing item or any other state. Errors: 22004 NULL queue/key, 22023 bad queue/key/run_at.';

COMMENT ON FUNCTION workfence.work_reschedule(text, text, timestamptz) IS
'work_reschedule(queue, key, run_at) -> boolean. Moves a pending item''s run_at (run it now: now()); wakes long polls at commit. True if it changed the item; false for a missing item or one that is not pending. Errors: 22004 NULL argument, 22023 bad queue/key/run_at.';

COMMENT ON FUNCTION workfence.work_pause(text) IS
'work_pause(queue) -> boolean. Pauses the queue: work_claim and work_claim_key of it return no rows (they claim and dead-letter nothing) and long polls go on waiting until work_resume; enqueue, renew, finish, release, fail and assert work as usual. True if it was not paused. Errors: 22004 NULL queue, 22023 bad queue.';

COMMENT ON FUNCTION workfence.work_resume(text) IS
'work_resume(queue) -> boolean. Ends a pause and wakes every long poll of the queue at commit. True if it was paused. Errors: 22004 NULL queue, 22023 bad queue.';

COMMENT ON FUNCTION workfence.work_item(text, text) IS
'work_item(queue, key) -> zero or one (id, queue, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, errors, result, created_at, finished_at, payload, max_run). The item as an operator sees it; errors is its history of failed attempts and lapsed leases, oldest first (the newest 20 kept). Reads only: grant it to a role that may only look. Errors: 22004 NULL queue/key, 22023 bad queue/key.';

COMMENT ON FUNCTION workfence.work_item(bigint) IS
'work_item(id) -> zero or one row, the columns of work_item(queue, key): the item with this id. Reads only. Errors: 22004 NULL id.';

COMMENT ON FUNCTION workfence.queue_counters(text) IS
'queue_counters(queue) -> zero or one (refused, lapsed): stale-token calls refused and lapsed leases claimed anew in the queue since the server started, as work_queue_stats shows them. No row unless pg_workfence is in shared_preload_libraries (or when the server''s counter table of 1024 queues is full and the queue is not in it). Grant it with work_queue_stats. Errors: 22004 NULL queue, 22023 bad queue.';

-- ---- the 0.1.0 claim, once more (see pg_workfence--0.4.0--0.5.0.sql) ----
-- A database updated from 0.1.0 to 0.5.0 in one transaction kept
-- work_claim_retired_0_1_0; drop it now, unless this very transaction
-- renamed it (an update from 0.1.0 straight to 0.6.0).
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

-- ---- privileges of the new functions ----
-- As sql/finalize.sql sets them in a fresh install: SECURITY DEFINER with a
-- pinned search_path, no EXECUTE for PUBLIC (docs/operations.md, "Least
-- privilege"). Only the new functions: the grants an operator made on the
-- objects that were there before, PUBLIC's included, stay as they are.
DO $privileges$
DECLARE
    routine pg_catalog.regprocedure;
BEGIN
    FOR routine IN
        SELECT pg_catalog.unnest(ARRAY[
            'workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval)',
            'workfence.work_retry(text, text, timestamptz)',
            'workfence.work_reschedule(text, text, timestamptz)',
            'workfence.work_pause(text)',
            'workfence.work_resume(text)',
            'workfence.work_item(text, text)',
            'workfence.work_item(bigint)',
            'workfence.queue_counters(text)'
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
-- A role (or PUBLIC) granted EXECUTE on the 6-argument work_enqueue (the
-- enqueuer group of docs/operations.md) may call the 7-argument one after
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
                   'workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer)')
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        -- A role name quoted by quote_ident, not user data.
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval) TO %s',
            grant_to);
    END LOOP;
END
$grants$;
