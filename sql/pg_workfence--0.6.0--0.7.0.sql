-- pg_workfence 0.6.0 -> 0.7.0 (ALTER EXTENSION pg_workfence UPDATE).
--
-- FROZEN once 0.7.0 is released: never edit it, write the next step as
-- pg_workfence--0.7.0--<next>.sql. harness/tests/upgrade.rs updates every
-- released version and checks the result is object for object a fresh 0.7.0
-- install.
--
-- What 0.7.0 adds (issue 19, queue-scoped privileges): the tables
-- queue_grants and queue_grant_mode, work_grant, work_revoke,
-- work_enforce_grants, work_may, the view work_queue_grants, and
-- work_queue_stats showing a role only the queues it may read. Queue grants
-- are not enforced after this update (queue_grant_mode stays empty): every
-- call behaves as before until the owner runs work_enforce_grants(true).
--
-- Calls keep working while this runs (CONTRIBUTING.md, "An update keeps
-- every function callable"): nothing a caller may be calling is dropped or
-- re-created; the functions' bodies are the library's, and the 0.7.0
-- library checks grants only where queue_grants exists.

-- ---- queue grants ----
-- Queue grants (from 0.7.0): which role may use which capability on which
-- queues, and whether they are enforced. Written only by work_grant,
-- work_revoke and work_enforce_grants, which tell every session to read
-- them again (src/grants.rs).
CREATE TABLE workfence.queue_grants (
    role        regrole NOT NULL,
    capability  text NOT NULL
                CHECK (capability IN ('enqueue', 'claim', 'operate', 'read', 'purge')),
    queues      text NOT NULL CHECK (queues <> ''),
    granted_at  timestamptz NOT NULL,
    CONSTRAINT queue_grants_pkey PRIMARY KEY (role, capability, queues)
);
COMMENT ON TABLE workfence.queue_grants IS
    'Queue grants: role may use capability on queues (a queue name, or a prefix followed by *), as '
    'work_grant made them; checked only while workfence.queue_grant_mode has its row (work_enforce_grants). '
    'Members of role are covered too. Not readable by PUBLIC; workfence.work_queue_grants lists them.';
COMMENT ON COLUMN workfence.queue_grants.role IS 'The role granted (its members are covered too).';
COMMENT ON COLUMN workfence.queue_grants.capability IS
    'enqueue, claim (claims and the token calls), operate (cancel, retry, reschedule, pause, resume), '
    'read (work_queue_stats, work_item, queue_counters) or purge.';
COMMENT ON COLUMN workfence.queue_grants.queues IS
    'A queue name, or a prefix followed by * (every queue whose name starts with it; * alone: every queue).';
COMMENT ON COLUMN workfence.queue_grants.granted_at IS 'Server time of the work_grant that made it.';
COMMENT ON INDEX workfence.queue_grants_pkey IS 'One grant per (role, capability, queues).';

-- Zero rows: grants are not enforced (as before 0.7.0); one row: enforced
-- since enforced_since. No row is made here, so that a restored dump's
-- row (if any) never meets one the install made.
CREATE TABLE workfence.queue_grant_mode (
    enforced        boolean NOT NULL DEFAULT true CHECK (enforced),
    enforced_since  timestamptz NOT NULL,
    CONSTRAINT queue_grant_mode_pkey PRIMARY KEY (enforced)
);
COMMENT ON TABLE workfence.queue_grant_mode IS
    'Whether queue grants are enforced in this database: one row (enforced, since when) if they are, none if '
    'not. Written by work_enforce_grants. Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.queue_grant_mode.enforced IS 'Always true: the row''s presence is the setting.';
COMMENT ON COLUMN workfence.queue_grant_mode.enforced_since IS 'Server time of the work_enforce_grants(true) that turned it on.';
COMMENT ON INDEX workfence.queue_grant_mode_pkey IS 'At most one row.';
REVOKE ALL ON TABLE workfence.queue_grants FROM PUBLIC;
REVOKE ALL ON TABLE workfence.queue_grant_mode FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_grants', '');
SELECT pg_catalog.pg_extension_config_dump('workfence.queue_grant_mode', '');

-- ---- the new functions ----
CREATE FUNCTION workfence."work_grant"(
	"capability" TEXT,
	"queues" TEXT,
	"role" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_grant_wrapper';

CREATE FUNCTION workfence."work_revoke"(
	"capability" TEXT,
	"queues" TEXT,
	"role" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_revoke_wrapper';

CREATE FUNCTION workfence."work_enforce_grants"(
	"enforced" bool
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_enforce_grants_wrapper';

CREATE FUNCTION workfence."work_may"(
	"capability" TEXT,
	"queue" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_may_wrapper';

-- ---- work_queue_stats shows a reader only the queues it may read ----
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
       f.lapsed
  FROM names AS n
  LEFT JOIN counts AS c ON c.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) n.queue
  LEFT JOIN LATERAL workfence.queue_counters(n.queue) AS f ON true;

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items or settings (work_pause): how many items are in each state, how '
    'long the oldest due item has waited, by the server''s clock (clock_timestamp(), read once per '
    'query), whether the queue is paused, and how often fencing refused a stale token. Where queue grants are '
    'enforced, only the queues the reader may read (work_may). Reads every item (a scan of workfence.items): '
    'for monitoring, not for a hot path. Not readable by PUBLIC; a reader needs EXECUTE on '
    'workfence.queue_counters and workfence.work_may too.';

-- (The view keeps the privileges it had: CREATE OR REPLACE VIEW does not change them.)


-- The queue grants as work_grant made them (from 0.7.0), with the role's
-- name (pg_get_userbyid: "unknown (OID=n)" for a role dropped since).
CREATE VIEW workfence.work_queue_grants AS
SELECT pg_catalog.pg_get_userbyid(g.role::pg_catalog.oid) AS role,
       g.capability,
       g.queues,
       g.granted_at
  FROM workfence.queue_grants AS g;

COMMENT ON VIEW workfence.work_queue_grants IS
    'One row per queue grant (work_grant): role may use capability on queues. Checked only while queue grants '
    'are enforced (work_enforce_grants; workfence.queue_grant_mode has a row). Not readable by PUBLIC.';
COMMENT ON COLUMN workfence.work_queue_grants.role IS 'The role granted; its members are covered too.';
COMMENT ON COLUMN workfence.work_queue_grants.capability IS
    'enqueue, claim (claims and the token calls), operate (cancel, retry, reschedule, pause, resume), '
    'read (work_queue_stats, work_item, queue_counters) or purge.';
COMMENT ON COLUMN workfence.work_queue_grants.queues IS
    'A queue name, or a prefix followed by * (every queue whose name starts with it; * alone: every queue).';
COMMENT ON COLUMN workfence.work_queue_grants.granted_at IS 'Server time of the work_grant that made it.';

REVOKE ALL ON TABLE workfence.work_queue_grants FROM PUBLIC;

-- ---- documentation, as sql/finalize.sql writes it ----
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, max_run interval DEFAULT NULL) -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned unchanged with inserted = false. run_at NULL = now (server time). max_run: a run-time limit, no claim or renew sets lease_until past claimed_at + max_run (NULL: none). Errors: 22004 NULL argument, 22023 bad queue/key/run_at, max_attempts out of 1..1000, max_run not in (0, 365 days]; 42501 when queue grants are enforced and the role has no enqueue grant covering the queue; 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE; 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until). Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim. Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_renew(bigint, text, bigint, interval) IS
'work_renew(id, owner, epoch, lease interval) -> boolean. True and lease_until = clock_timestamp() + lease, capped at claimed_at + max_run, only if the item is claimed under exactly this owner AND epoch and its max_run is not used up; false otherwise (stop the job). Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner or lease.';

COMMENT ON FUNCTION workfence.work_finish(bigint, text, bigint, jsonb) IS
'work_finish(id, owner, epoch, result jsonb DEFAULT NULL) -> boolean. True and the item done only under the current lease; repeating it with the same token returns true and changes nothing; any other token gets false. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL id/owner/epoch, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_finish_many(text, bigint[], bigint[], jsonb[]) IS
'work_finish_many(owner, ids bigint[], epochs bigint[], results jsonb[] DEFAULT NULL) -> setof (id, finished). The batch form of work_finish in one statement; each (id, epoch) judged as work_finish would (queue grants included). Errors: 22004 NULL argument or element, 22023 bad owner or arrays of unequal length.';

COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
'work_release(id, owner, epoch, delay interval DEFAULT ''0'') -> boolean. Hands a claimed item back unfinished: pending again from clock_timestamp() + delay, attempt given back, token dead. False for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner, delay negative or over 365 days (its real length from now: months count as the calendar months that follow).';

COMMENT ON FUNCTION workfence.work_fail(bigint, text, bigint, text, interval) IS
'work_fail(id, owner, epoch, error text, retry_in interval DEFAULT NULL) -> boolean. Records error (in last_error and the errors history; a text over 2048 bytes is cut there); pending again after retry_in (NULL: exponential backoff with jitter, 2^n/2..2^n s, at most 1 h) or failed once attempts are used up. False (nothing recorded) for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL id/owner/epoch/error, 22023 bad owner, retry_in negative or over 365 days (real length from now).';

COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
'work_assert(id, owner, epoch) -> void. Call inside a transaction block (after BEGIN). Raises SQLSTATE 55000 (lease lost; DETAIL says why, HINT what to do) unless the token is current, and holds the item''s row lock (FOR NO KEY UPDATE) to the end of the transaction, so the worker''s own writes in that transaction commit only while it holds the lease. If a savepoint or exception block that held the lock rolls back, COMMIT re-checks the token and fails with 55000 (lease lost before commit) when it is no longer current. Where queue grants are enforced, an item in a queue the role may not claim is missing to it. Errors: 55000 lease lost, 25P01 a current token outside a transaction block (autocommit, also a DO block or function run by one autocommit statement: the lock would end with the statement), 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
'work_cancel(queue, key) -> boolean. Cancels the item if it is pending or claimed: state cancelled, finished_at = clock_timestamp(), not claimed again unless work_retry puts it back (under a new epoch); the holder''s token is refused from then on (work_assert: 55000, cancelled). False, changing nothing, when the item is missing or already done, failed or cancelled. Errors: 22004 NULL argument, 22023 bad queue/key, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_purge(interval, text) IS
'work_purge(older_than interval DEFAULT ''7 days'', queue DEFAULT NULL) -> bigint. Deletes the done, failed and cancelled items whose finished_at is before clock_timestamp() - older_than, in one queue or (NULL) all; returns how many. Never touches pending or claimed items; skips rows another transaction has locked (FOR UPDATE SKIP LOCKED), so it never waits. Ids and epochs are never reused after a purge. Errors: 22004 NULL older_than, 22023 older_than negative, with a negative field or over 3650 days, bad queue; 42501 when queue grants are enforced and the role has no purge grant covering the queue (with queue NULL: no purge grant of *).';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, uncommitted, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, read with the statement''s snapshot (READ COMMITTED: the newest committed state; REPEATABLE READ: the transaction''s snapshot). A lapsed lease nobody claimed anew is current; uncommitted: the epoch is newer than the item''s committed one and a transaction still in progress is changing the item (the claim that handed the epoch out has not committed: only its own transaction can use the token until it commits); a lease handed back (work_release, retryable work_fail), a newer claim, or a claim that rolled back is superseded. Where queue grants are enforced, an item in a queue the role may not claim is missing. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_retry(text, text, timestamptz) IS
'work_retry(queue, key, run_at DEFAULT NULL) -> boolean. A failed or cancelled item back to pending, due at run_at (NULL: now), with at least one more attempt (max_attempts raised to attempts + 1 when used up); its errors history is kept, its old tokens stay dead; wakes long polls at commit. True if it changed the item; false for a missing item or any other state. Errors: 22004 NULL queue/key, 22023 bad queue/key/run_at, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_reschedule(text, text, timestamptz) IS
'work_reschedule(queue, key, run_at) -> boolean. Moves a pending item''s run_at (run it now: now()); wakes long polls at commit. True if it changed the item; false for a missing item or one that is not pending. Errors: 22004 NULL argument, 22023 bad queue/key/run_at, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_pause(text) IS
'work_pause(queue) -> boolean. Pauses the queue: work_claim and work_claim_key of it return no rows (they claim and dead-letter nothing) and long polls go on waiting until work_resume; enqueue, renew, finish, release, fail and assert work as usual. True if it was not paused. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_resume(text) IS
'work_resume(queue) -> boolean. Ends a pause and wakes every long poll of the queue at commit. True if it was paused. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_item(text, text) IS
'work_item(queue, key) -> zero or one (id, queue, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, errors, result, created_at, finished_at, payload, max_run). The item as an operator sees it; errors is its history of failed attempts and lapsed leases, oldest first (the newest 20 kept). Reads only: grant it to a role that may only look. Errors: 22004 NULL queue/key, 22023 bad queue/key, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_item(bigint) IS
'work_item(id) -> zero or one row, the columns of work_item(queue, key): the item with this id. Reads only. Where queue grants are enforced, an item of a queue the role may not read is answered with zero rows, as if missing. Errors: 22004 NULL id.';

COMMENT ON FUNCTION workfence.queue_counters(text) IS
'queue_counters(queue) -> zero or one (refused, lapsed): stale-token calls refused and lapsed leases claimed anew in the queue since the server started, as work_queue_stats shows them. No row unless pg_workfence is in shared_preload_libraries (or when the server''s counter table of 1024 queues is full and the queue is not in it). Grant it with work_queue_stats. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_grant(text, text, text) IS
'work_grant(capability, queues, role) -> boolean. Lets role (and its members) use capability on queues: enqueue (work_enqueue), claim (work_claim, work_claim_key and the token calls), operate (work_cancel, work_retry, work_reschedule, work_pause, work_resume), read (work_queue_stats, work_item, queue_counters) or purge (work_purge); queues is a queue name or a prefix followed by * (* alone: every queue). Checked only while queue grants are enforced (work_enforce_grants); every session sees it from its next call after the commit. True if the grant is new. For the extension''s owner. Errors: 22004 NULL argument, 22023 unknown capability, empty queues, name or prefix over 128 bytes or with control characters, empty role or one over 63 bytes; 42704 role does not exist; 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_revoke(text, text, text) IS
'work_revoke(capability, queues, role) -> boolean. Takes back the grant work_grant made with exactly these arguments; every session sees it from its next call after the commit (a worker of the role then finds its tokens refused as for a missing item). True if the grant existed. For the extension''s owner. Errors: 22004 NULL argument, 22023 unknown capability, empty queues, name or prefix over 128 bytes or with control characters, empty role or one over 63 bytes; 42704 role does not exist; 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_enforce_grants(boolean) IS
'work_enforce_grants(enforced) -> boolean. Turns the checking of queue grants on or off for this database. On: every call of a role that is not a superuser is checked against the queue grants of the session''s role and the roles it is a member of (a role without a grant reaches no queue). Off (the default, and after an update): grants decide nothing, as before 0.7.0. Make the grants and turn it on in one transaction. True if the setting changed. For the extension''s owner. Errors: 22004 NULL enforced, 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_may(text, text) IS
'work_may(capability, queue) -> boolean. Whether the session''s role may use capability on queue: true when queue grants are not enforced, for a superuser, or when a grant to the role or a role it is a member of covers the queue. Answers for the caller only, so PUBLIC may execute it; work_queue_stats shows a role only the queues it may read through it. Errors: 22004 NULL argument, 22023 unknown capability or bad queue.';

-- ---- the 0.5.0 work_enqueue, renamed by the update to 0.6.0 ----
-- Dropped now, unless this very transaction renamed it (an update from
-- 0.5.0 or earlier straight to 0.7.0): calls in flight that resolved it
-- before that update must still find it.
DO $retire$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
                          'workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer)')
                  AND pg_catalog.age(p.xmin) OPERATOR(pg_catalog.<>) 0) THEN
        DROP FUNCTION workfence.work_enqueue_retired_0_5_0(text, jsonb, text, timestamptz, integer, integer);
    END IF;
END
$retire$;

-- ---- the 0.1.0 claim, once more (see pg_workfence--0.4.0--0.5.0.sql) ----
-- A database updated from 0.1.0 to 0.6.0 in one transaction kept
-- work_claim_retired_0_1_0; drop it now, unless this very transaction
-- renamed it (an update from 0.1.0 straight to 0.7.0).
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
-- objects that were there before stay as they are.
DO $privileges$
DECLARE
    routine pg_catalog.regprocedure;
BEGIN
    FOR routine IN
        SELECT pg_catalog.unnest(ARRAY[
            'workfence.work_grant(text, text, text)',
            'workfence.work_revoke(text, text, text)',
            'workfence.work_enforce_grants(boolean)',
            'workfence.work_may(text, text)'
        ]::pg_catalog.regprocedure[])
    LOOP
        -- Catalog names rendered by regprocedure, not user data.
        EXECUTE pg_catalog.format(
            'ALTER ROUTINE %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', routine);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', routine);
    END LOOP;
END
$privileges$;

-- ---- readers of work_queue_stats keep reading it ----
-- The view now calls work_may, which answers only what the caller itself
-- may do: PUBLIC may execute it (as a fresh install grants), so every role
-- that could read the view still can.
GRANT EXECUTE ON FUNCTION workfence.work_may(text, text) TO PUBLIC;
