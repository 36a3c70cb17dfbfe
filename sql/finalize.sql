-- pg_workfence: documentation of every function, for \df+ and \dd.
-- Runs last in the install script (pgrx `finalize`), after every function exists.

-- surface:comments:begin (generated from sql/functions.toml by `cargo run -p workfence-surface`: edit the table)
COMMENT ON FUNCTION workfence.work_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text) IS
'work_enqueue(queue, payload jsonb DEFAULT ''{}'', key DEFAULT NULL, run_at DEFAULT NULL, priority DEFAULT 0, max_attempts DEFAULT 25, max_run interval DEFAULT NULL, group_key DEFAULT NULL) -> (id, key, inserted). Adds an item; a NULL key gets a UUIDv7; an existing (queue, key) is returned unchanged with inserted = false. run_at NULL = now (server time). max_run: a run-time limit, no claim or renew sets lease_until past claimed_at + max_run (NULL: none). group_key (from 0.10.0): the item''s serial group, at most one item of a (queue, group_key) claimed at a time, claimed in claim order (NULL: no group). Errors: 22004 NULL argument, 22023 bad queue/key/run_at, max_attempts out of 1..1000, max_run not in (0, 365 days], group_key empty, over 128 bytes or with control characters; 42501 when queue grants are enforced and the role has no enqueue grant covering the queue; 40001 when the existing item of the key was deleted while this enqueue ran (retry the transaction).';

COMMENT ON FUNCTION workfence.work_claim(text, text, interval, integer, interval) IS
'work_claim(queue, owner, lease interval, max_items DEFAULT 1, wait interval DEFAULT ''0'') -> setof (id, key, payload, epoch, attempt, lease_until). Claims up to max_items (1..1000) items that are pending and due or whose lease lapsed, in order priority, run_at, id, with FOR UPDATE SKIP LOCKED; each gets a fresh epoch (fencing token), claimed_at = clock_timestamp() and lease_until = clock_timestamp() + lease (at most claimed_at + max_run). A lapsed lease claimed anew sends NOTIFY work_lease_lost with the superseded token. A paused queue (work_pause) hands out nothing. From 0.10.0: an item with a group_key is claimed only when no item of its group is claimed (from 0.12.0: fewer than the queue''s per_group, see work_limit) and no pending item of the group comes before it in claim order (a lapsed one is claimed anew first), a batch takes at most one item per group, and a queue''s limits (work_limit) cap what a claim hands out; such a claim returns fewer rows, never waits. Every row is claimed when the call runs, whether or not the query reads it (LIMIT, EXISTS, a cursor): call it as a query of its own. wait (0..1 hour): when nothing is claimable, sleeps in the server until an enqueue/release/retry/reschedule/resume in the queue commits (COMMIT PREPARED too) or a run_at/lease_until is reached, then claims again; zero rows when wait passes; ends the session if the client disconnects; READ COMMITTED only. Errors: 22004 NULL argument, 22023 bad queue/owner, lease not in (0, 7 days], max_items out of range, wait not in [0, 1 hour]; 25000 wait > 0 under REPEATABLE READ or SERIALIZABLE, or a queue with groups or limits claimed under them; 25006 on a hot standby (claim on the primary); 42501 when queue grants are enforced and the role has no claim grant covering the queue (also when revoked while waiting); 57014 when cancelled while waiting. The first claim of a new history (a promoted standby, a point-in-time recovery, a restored or copied database) moves the epoch sequence to the generation floor (milliseconds since 2000-01-01 x 1024), above every epoch the old history handed out.';

COMMENT ON FUNCTION workfence.work_claim_key(text, text, text, interval) IS
'work_claim_key(queue, key, owner, lease interval) -> zero or one (id, key, payload, epoch, attempt, lease_until). Claims the named item if it is claimable and its queue is not paused, under the rules of work_claim (its group and its queue''s limits too, from 0.10.0). Errors: 22004 NULL argument, 22023 bad queue/key/owner/lease, 25000 a queue with groups or limits under REPEATABLE READ or SERIALIZABLE, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_renew(bigint, text, bigint, interval) IS
'work_renew(id, owner, epoch, lease interval) -> boolean. True and lease_until = clock_timestamp() + lease, capped at claimed_at + max_run, only if the item is claimed under exactly this owner AND epoch and its max_run is not used up; false otherwise (stop the job). Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner or lease.';

COMMENT ON FUNCTION workfence.work_finish(bigint, text, bigint, jsonb) IS
'work_finish(id, owner, epoch, result jsonb DEFAULT NULL) -> boolean. True and the item done only under the current lease; repeating it with the same token returns true and changes nothing; any other token gets false. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL id/owner/epoch, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_finish_many(text, bigint[], bigint[], jsonb[]) IS
'work_finish_many(owner, ids bigint[], epochs bigint[], results jsonb[] DEFAULT NULL) -> setof (id, finished). The batch form of work_finish in one statement; each (id, epoch) judged as work_finish would (queue grants included). Errors: 22004 NULL argument or element, 22023 bad owner or arrays of unequal length.';

COMMENT ON FUNCTION workfence.work_finish_and_claim(text, text, interval, bigint, bigint, jsonb, integer) IS
'work_finish_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, result jsonb DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled). From 0.9.0: a worker''s cycle in one statement and one commit: work_finish(last_id, owner, last_epoch, result), then work_claim(queue, owner, lease, max_items) without a wait, each judged exactly as those functions judge it. One row per claimed item, in claim order; exactly one row with NULL item columns when nothing was claimed. settled is what work_finish would have returned (false: the token was refused, nothing changed for that item). Both halves commit together; an error rolls back both. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch, 22023 bad queue/owner, lease not in (0, 7 days], max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_fail_and_claim(text, text, interval, bigint, bigint, text, interval, integer) IS
'work_fail_and_claim(queue, owner, lease interval, last_id bigint, last_epoch bigint, error text, retry_in interval DEFAULT NULL, max_items int DEFAULT 1) -> setof (id, key, payload, epoch, attempt, lease_until, settled). From 0.9.0: work_fail(last_id, owner, last_epoch, error, retry_in), then work_claim(queue, owner, lease, max_items) without a wait, in one statement and one commit, rows as work_finish_and_claim returns them; settled is what work_fail would have returned. Errors: 22004 NULL queue/owner/lease/last_id/last_epoch/error, 22023 bad queue/owner, lease not in (0, 7 days], retry_in negative or over 365 days (real length from now), max_items outside 1..1000, 25006 on a hot standby, 42501 when queue grants are enforced and the role has no claim grant covering the queue.';

COMMENT ON FUNCTION workfence.work_release(bigint, text, bigint, interval) IS
'work_release(id, owner, epoch, delay interval DEFAULT ''0'') -> boolean. Hands a claimed item back unfinished: pending again from clock_timestamp() + delay (with no delay it keeps its run_at, so its place in claim order, from 0.10.0), attempt given back, token dead. False for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL argument, 22023 bad owner, delay negative or over 365 days (its real length from now: months count as the calendar months that follow).';

COMMENT ON FUNCTION workfence.work_fail(bigint, text, bigint, text, interval) IS
'work_fail(id, owner, epoch, error text, retry_in interval DEFAULT NULL) -> boolean. Records error (in last_error and the errors history; a text over 2048 bytes is cut there); pending again after retry_in (NULL: exponential backoff with jitter, 2^n/2..2^n s, at most 1 h) or failed once attempts are used up. False (nothing recorded) for any token but the current one. Where queue grants are enforced, a token of an item in a queue the role may not claim is refused as for a missing item. Errors: 22004 NULL id/owner/epoch/error, 22023 bad owner, retry_in negative or over 365 days (real length from now).';

COMMENT ON FUNCTION workfence.work_assert(bigint, text, bigint) IS
'work_assert(id, owner, epoch) -> void. Call inside a transaction block (after BEGIN). Raises SQLSTATE 55000 (lease lost; DETAIL says why, HINT what to do) unless the token is current, and holds the item''s row lock (FOR NO KEY UPDATE) to the end of the transaction, so the worker''s own writes in that transaction commit only while it holds the lease. If a savepoint or exception block that held the lock rolls back, COMMIT re-checks the token and fails with 55000 (lease lost before commit) when it is no longer current. Where queue grants are enforced, an item in a queue the role may not claim is missing to it. Errors: 55000 lease lost, 25P01 a current token outside a transaction block (autocommit, also a DO block or function run by one autocommit statement: the lock would end with the statement), 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_cancel(text, text) IS
'work_cancel(queue, key) -> boolean. Cancels the item if it is pending or claimed: state cancelled, finished_at = clock_timestamp(), not claimed again unless work_retry puts it back (under a new epoch); the holder''s token is refused from then on (work_assert: 55000, cancelled). False, changing nothing, when the item is missing or already done, failed or cancelled. Errors: 22004 NULL argument, 22023 bad queue/key, 25000 (from 0.12.0) for an item in a group under REPEATABLE READ or SERIALIZABLE (the call chooses the group''s next item after taking the group''s lock, waiting for a claim of the group in flight), 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_purge(interval, text) IS
'work_purge(older_than interval DEFAULT ''7 days'', queue DEFAULT NULL) -> bigint. Deletes the done, failed and cancelled items whose finished_at is before clock_timestamp() - older_than, in one queue or (NULL) all; returns how many. Never touches pending or claimed items; skips rows another transaction has locked (FOR UPDATE SKIP LOCKED), so it never waits. Ids and epochs are never reused after a purge. Errors: 22004 NULL older_than, 22023 older_than negative, with a negative field or over 3650 days, bad queue; 42501 when queue grants are enforced and the role has no purge grant covering the queue (with queue NULL: no purge grant of *).';

COMMENT ON FUNCTION workfence.work_lease_status(bigint, text, bigint) IS
'work_lease_status(id, owner, epoch) -> text: current, uncommitted, superseded, finished, cancelled, wrong_owner or missing. Why the token is (not) honoured, read with the statement''s snapshot (READ COMMITTED: the newest committed state; REPEATABLE READ: the transaction''s snapshot). A lapsed lease nobody claimed anew is current; uncommitted: the epoch is newer than the item''s committed one and a transaction still in progress is changing the item (the claim that handed the epoch out has not committed: only its own transaction can use the token until it commits); a lease handed back (work_release, retryable work_fail), a newer claim, or a claim that rolled back is superseded. Where queue grants are enforced, an item in a queue the role may not claim is missing. Changes nothing. Errors: 22004 NULL argument, 22023 bad owner.';

COMMENT ON FUNCTION workfence.work_retry(text, text, timestamptz) IS
'work_retry(queue, key, run_at DEFAULT NULL) -> boolean. A failed or cancelled item back to pending, due at run_at (NULL: now), with at least one more attempt (max_attempts raised to attempts + 1 when used up); its errors history is kept, its old tokens stay dead; wakes long polls at commit. True if it changed the item; false for a missing item or any other state. Errors: 22004 NULL queue/key, 22023 bad queue/key/run_at, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_reschedule(text, text, timestamptz) IS
'work_reschedule(queue, key, run_at) -> boolean. Moves a pending item''s run_at (run it now: now()); wakes long polls at commit. True if it changed the item; false for a missing item or one that is not pending. Errors: 22004 NULL argument, 22023 bad queue/key/run_at, 25000 (from 0.12.0) for an item in a group under REPEATABLE READ or SERIALIZABLE (the call chooses the group''s next item after taking the group''s lock, waiting for a claim of the group in flight), 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_pause(text) IS
'work_pause(queue) -> boolean. Pauses the queue: work_claim and work_claim_key of it return no rows (they claim and dead-letter nothing) and long polls go on waiting until work_resume; enqueue, renew, finish, release, fail and assert work as usual. True if it was not paused. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_resume(text) IS
'work_resume(queue) -> boolean. Ends a pause and wakes every long poll of the queue at commit. True if it was paused. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

COMMENT ON FUNCTION workfence.work_limit(text, integer, integer, interval, integer) IS
'work_limit(queue, concurrency int DEFAULT NULL, rate int DEFAULT NULL, per interval DEFAULT ''1 second'', per_group int DEFAULT NULL) -> void. From 0.10.0: at most concurrency items of the queue claimed at once (a lapsed lease keeps its slot until claimed anew or dead-lettered), at most rate items handed out by claims in any window of length per (sliding, server clock); from 0.12.0 at most per_group items of one group_key claimed at once (NULL: 1, serial groups), the groups served round-robin (each group has one item in line at a time, and a group just served goes behind the others). A call sets them all: NULL lifts a limit, work_limit(queue) every one; shown in work_queue_stats. A claim that would exceed a limit returns fewer rows, never waits; from 0.12.0 each item it hands out takes a slot row of the queue (workfence.queue_slots) FOR UPDATE SKIP LOCKED, so claims of one queue run side by side; lowering a limit takes nothing back (claims wait until fewer items than it are claimed); claims of a limited queue run in READ COMMITTED only (see work_claim). Errors: 22004 NULL queue or per, 22023 bad queue, concurrency, rate or per_group outside 1..10000, per not in (0, 1 day]; 42501 when queue grants are enforced and the role has no operate grant covering the queue.';

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

COMMENT ON FUNCTION workfence.work_item(text, text) IS
'work_item(queue, key) -> zero or one (id, queue, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, errors, result, created_at, finished_at, payload, max_run, group_key). The item as an operator sees it; errors is its history of failed attempts and lapsed leases, oldest first (the newest 20 kept); group_key its serial group (NULL: none; from 0.12.0). Reads only: grant it to a role that may only look. Errors: 22004 NULL queue/key, 22023 bad queue/key, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_item(bigint) IS
'work_item(id) -> zero or one row, the columns of work_item(queue, key): the item with this id. Reads only. Where queue grants are enforced, an item of a queue the role may not read is answered with zero rows, as if missing. Errors: 22004 NULL id.';

COMMENT ON FUNCTION workfence.work_items(text, text, bigint, integer) IS
'work_items(queue, state DEFAULT NULL, after bigint DEFAULT NULL, max int DEFAULT 50) -> setof (id, key, state, priority, run_at, attempts, max_attempts, owner, epoch, claimed_at, lease_until, created_at, finished_at, group_key, last_error). From 0.11.0: a page of at most max (1..1000) of the queue''s items, keyset-paged along an index the claims keep: state NULL every item by key descending (generated keys are UUIDv7: newest first); pending in claim order (priority, run_at, id; a pending item not yet due is claimed once due); claimed soonest lease end first (lease_until, id; lapsed leases on top); done, failed, cancelled newest finish first (finished_at, id descending). after: the id of the last row of the previous page (NULL: the first page); the page continues after that item''s place in the order as it is now (its sort key, even after it left the listed state), and is empty when that sort key is gone (purged; a claimed item no longer claimed; a finished one retried). last_error: the newest error of the item''s history. Reads only (also on a hot standby): grant it with work_item. Errors: 22004 NULL queue or max, 22023 bad queue, state not one of pending, claimed, done, failed, cancelled, max outside 1..1000; 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.queue_counters(text) IS
'queue_counters(queue) -> zero or one (refused, lapsed): stale-token calls refused and lapsed leases claimed anew in the queue since the server started, as work_queue_stats shows them. No row unless pg_workfence is in shared_preload_libraries (or when the server''s counter table of 1024 queues is full and the queue is not in it). Grant it with work_queue_stats. Errors: 22004 NULL queue, 22023 bad queue, 42501 when queue grants are enforced and the role has no read grant covering the queue.';

COMMENT ON FUNCTION workfence.work_grant(text, text, text) IS
'work_grant(capability, queues, role) -> boolean. Lets role (and its members) use capability on queues: enqueue (work_enqueue), claim (work_claim, work_claim_key and the token calls), operate (work_cancel, work_retry, work_reschedule, work_pause, work_resume, work_limit), read (work_queue_stats, work_item, queue_counters) or purge (work_purge); queues is a queue name or a prefix followed by * (* alone: every queue). Checked only while queue grants are enforced (work_enforce_grants); every session sees it from its next call after the commit. True if the grant is new. For the extension''s owner. Errors: 22004 NULL argument, 22023 unknown capability, empty queues, name or prefix over 128 bytes or with control characters, empty role or one over 63 bytes; 42704 role does not exist; 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_revoke(text, text, text) IS
'work_revoke(capability, queues, role) -> boolean. Takes back the grant work_grant made with exactly these arguments; every session sees it from its next call after the commit (a worker of the role then finds its tokens refused as for a missing item). True if the grant existed. For the extension''s owner. Errors: 22004 NULL argument, 22023 unknown capability, empty queues, name or prefix over 128 bytes or with control characters, empty role or one over 63 bytes; 42704 role does not exist; 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_enforce_grants(boolean) IS
'work_enforce_grants(enforced) -> boolean. Turns the checking of queue grants on or off for this database. On: every call of a role that is not a superuser is checked against the queue grants of the session''s role and the roles it is a member of (a role without a grant reaches no queue). Off (the default, and after an update): grants decide nothing, as before 0.7.0. Make the grants and turn it on in one transaction. True if the setting changed. For the extension''s owner. Errors: 22004 NULL enforced, 42501 when the session''s role is neither a superuser nor a member of the extension''s owner.';

COMMENT ON FUNCTION workfence.work_may(text, text) IS
'work_may(capability, queue) -> boolean. Whether the session''s role may use capability on queue: true when queue grants are not enforced, for a superuser, or when a grant to the role or a role it is a member of covers the queue. Answers for the caller only, so PUBLIC may execute it; work_queue_stats shows a role only the queues it may read through it. Errors: 22004 NULL argument, 22023 unknown capability or bad queue.';
-- surface:comments:end

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

-- The one exception: work_may answers only what the caller itself may do,
-- and work_queue_stats calls it, so every role that can read the view (and
-- has USAGE on the schema, which PUBLIC has not) can call it.
GRANT EXECUTE ON FUNCTION workfence.work_may(text, text) TO PUBLIC;
