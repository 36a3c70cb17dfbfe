-- pg_workfence: the views. Run after bootstrap (they read the tables) and
-- after the functions workfence.queue_counters, workfence.queue_counter_rows, workfence.queue_history_rows,
-- workfence.queue_state_counts and workfence.work_may (pgrx
-- places them there: `requires`), before finalize.
--
-- One reading of the server's clock for the whole view (a MATERIALIZED CTE
-- is evaluated once), so the counts of one row add up: an item is exactly one
-- of pending, scheduled, claimed, expired, done, failed, cancelled. A view's
-- names and operators are bound when it is created; they are schema-qualified
-- all the same.
--
-- Where queue grants are enforced (from 0.7.0), a reader sees only the
-- queues it may read (work_may, which judges the session's role). The
-- filter runs in a MATERIALIZED CTE, before queue_counters is called for a
-- queue, and the view is a security_barrier, so that no condition of the
-- reader's query is evaluated on a row the filter removes.
CREATE VIEW workfence.work_queue_stats WITH (security_barrier) AS
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

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items or settings (work_pause, work_limit): how many items are in each state, how '
    'long the oldest due item has waited, by the server''s clock (clock_timestamp(), read once per '
    'query), whether the queue is paused, its limits, and how often fencing refused a stale token. Where queue grants are '
    'enforced, only the queues the reader may read (work_may). From 0.12.0 the state counts come from the server '
    '(workfence.queue_state_counts: kept at each commit, with the library preloaded), and the items read are the '
    'scheduled and expired ones only; work_queue_stats_exact counts every item. Not readable by PUBLIC; a reader '
    'needs EXECUTE on workfence.queue_state_counts, workfence.queue_counters and workfence.work_may too.';
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
COMMENT ON COLUMN workfence.work_queue_stats.per_group IS
    'From 0.12.0: the queue''s per-group limit (work_limit): at most this many items of one group_key claimed at once; '
    'NULL: one (serial groups).';
COMMENT ON COLUMN workfence.work_queue_stats.waiting IS
    'From 0.12.0: items waiting for their parents (work_enqueue''s after): each becomes pending in the transaction of '
    'its last parent''s finish.';

REVOKE ALL ON TABLE workfence.work_queue_stats FROM PUBLIC;

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
