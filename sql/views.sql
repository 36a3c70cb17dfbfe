-- pg_workfence: the monitoring view. Runs after bootstrap (it reads
-- workfence.items) and before finalize.
--
-- One reading of the server's clock for the whole view (a MATERIALIZED CTE
-- is evaluated once), so the counts of one row add up: an item is exactly one
-- of pending, scheduled, claimed, expired, done, failed, cancelled. A view's
-- names and operators are bound when it is created; they are schema-qualified
-- all the same.
CREATE VIEW workfence.work_queue_stats AS
WITH server_time AS MATERIALIZED (
    SELECT pg_catalog.clock_timestamp() AS now
)
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
 GROUP BY i.queue, t.now;

COMMENT ON VIEW workfence.work_queue_stats IS
    'One row per queue that has items: how many are in each state, and how long the oldest due item '
    'has waited, by the server''s clock (clock_timestamp(), read once per query). Reads every item '
    '(a scan of workfence.items): for monitoring, not for a hot path. Not readable by PUBLIC.';
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

REVOKE ALL ON TABLE workfence.work_queue_stats FROM PUBLIC;
