-- The README's quickstart, verbatim: if this file's expected output changes,
-- the README is out of date. (\gset keeps ids and epochs in psql variables,
-- as a worker keeps them in its own.)
CREATE EXTENSION pg_workfence;
SET search_path = workfence, public;

-- 1. Submit work. The key makes a submit idempotent.
SELECT key, inserted FROM work_enqueue('email', '{"to": "ada@example.com"}', key => 'welcome-ada');
SELECT key, inserted FROM work_enqueue('email', '{"to": "ada@example.com"}', key => 'welcome-ada');

-- 2. A worker claims it under a lease and gets the fencing token (epoch).
SELECT id, epoch FROM work_claim('email', 'mailer@host-1', '30 seconds') \gset
SELECT key, payload, attempts, lease_until > now() AS leased FROM workfence.items WHERE id = :id;

-- 3. While it works it renews; it finishes with the same token.
SELECT work_renew(:id, 'mailer@host-1', :epoch, '30 seconds') AS renewed;
SELECT work_finish(:id, 'mailer@host-1', :epoch, '{"message_id": "m-1"}') AS finished;
SELECT work_finish(:id, 'mailer@host-1', :epoch) AS finished_again;   -- a retried finish is safe

-- 4. The bug this project ends: two workers with the SAME name. A's lease
--    lapses, B claims; A's token is refused, B's holds.
SELECT work_enqueue('routines', key => 'daily-report@2026-11-30T09:00Z') IS NOT NULL AS enqueued;
SELECT id AS firing, epoch AS a_epoch FROM work_claim('routines', 'routines/laptop', '1 second') \gset
SELECT pg_sleep_until(lease_until) FROM workfence.items WHERE id = :firing;   -- A's lease lapses (server clock)
SELECT epoch AS b_epoch FROM work_claim('routines', 'routines/laptop', '30 seconds') \gset
SELECT :b_epoch > :a_epoch AS b_has_newer_token;
SELECT work_renew(:firing, 'routines/laptop', :a_epoch, '30 seconds') AS a_renew,
       work_finish(:firing, 'routines/laptop', :a_epoch) AS a_finish;
SELECT work_finish(:firing, 'routines/laptop', :b_epoch) AS b_finish;
SELECT state, epoch = :b_epoch AS finished_by_b FROM workfence.items WHERE id = :firing;

-- 5. Fence the worker's own writes: work_assert in the same transaction.
CREATE TABLE invoices_sent (invoice text PRIMARY KEY, epoch bigint);
SELECT work_enqueue('invoices', key => 'inv-42') IS NOT NULL AS enqueued;
SELECT id AS inv, epoch AS inv_epoch FROM work_claim('invoices', 'billing-1', '1 minute') \gset
BEGIN;
SELECT work_assert(:inv, 'billing-1', :inv_epoch);   -- current: the item's row stays locked
INSERT INTO invoices_sent VALUES ('inv-42', :inv_epoch);
SELECT work_finish(:inv, 'billing-1', :inv_epoch) AS finished;
COMMIT;
SELECT work_assert(:inv, 'billing-1', :inv_epoch - 1);   -- not the current token
\echo :LAST_ERROR_SQLSTATE

-- 6. Failures retry (after retry_in, or with exponential backoff), then dead-letter.
SELECT work_enqueue('reports', key => 'r-1', max_attempts => 2) IS NOT NULL AS enqueued;
SELECT id AS rep, epoch AS rep_epoch FROM work_claim('reports', 'rep-1', '1 minute') \gset
SELECT work_fail(:rep, 'rep-1', :rep_epoch, 'timeout talking to S3', retry_in => '0') AS failed_once;
SELECT epoch AS rep_epoch, attempt FROM work_claim('reports', 'rep-1', '1 minute') \gset
SELECT :attempt AS attempt;
SELECT work_fail(:rep, 'rep-1', :rep_epoch, 'timeout again') AS failed_twice;
SELECT state, attempts, last_error FROM workfence.items WHERE id = :rep;

-- 7. A release hands work back unfinished (shutdown, snooze); the token dies.
SELECT work_enqueue('reports', key => 'r-2') IS NOT NULL AS enqueued;
SELECT id AS r2, epoch AS r2_epoch FROM work_claim('reports', 'rep-1', '1 minute') \gset
SELECT work_release(:r2, 'rep-1', :r2_epoch, delay => '0') AS released;
SELECT work_finish(:r2, 'rep-1', :r2_epoch) AS finish_after_release;
SELECT state, attempts FROM workfence.items WHERE id = :r2;

-- 8. Batches: claim many, finish many in one statement.
SELECT count(*) FROM (SELECT work_enqueue('batch', jsonb_build_object('n', n)) FROM generate_series(1, 5) n) s;
CREATE TEMP TABLE got AS SELECT id, epoch FROM work_claim('batch', 'bulk-1', '1 minute', max_items => 10);
SELECT count(*) AS claimed FROM got;
SELECT count(*) FILTER (WHERE finished) AS finished
  FROM work_finish_many('bulk-1', (SELECT array_agg(id ORDER BY id) FROM got),
                                  (SELECT array_agg(epoch ORDER BY id) FROM got));

-- 9. Bad input is an error with a SQLSTATE, never a silent NULL.
SELECT * FROM work_claim('email', NULL, '30 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM work_claim('email', 'w', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM work_claim('email', 'w', '30 seconds', max_items => 5000);
\echo :LAST_ERROR_SQLSTATE

-- 10. Operate (0.6.0): retry the dead letter of step 6 (its history is kept),
--     pause a queue (claims hand out nothing), resume it.
SELECT work_retry('reports', 'r-1') AS retried;
SELECT state, attempts, max_attempts, jsonb_array_length(errors) AS failures,
       errors -> 0 ->> 'error' AS first_error
  FROM work_item('reports', 'r-1');
SELECT work_pause('reports') AS paused;
SELECT count(*) AS claimed_while_paused FROM work_claim('reports', 'rep-1', '1 minute');
SELECT work_resume('reports') AS resumed;
SELECT key, attempt FROM work_claim('reports', 'rep-1', '1 minute', max_items => 2);
SELECT queue, paused, pending, claimed, failed FROM work_queue_stats WHERE queue = 'reports';
-- 11. Workflows (0.12.0): a job that waits for others. It is released in the
--     transaction of its last parent's finish, and reads their results.
SELECT id AS fetch_a FROM work_enqueue('fetch', '{"url": "a"}') \gset
SELECT id AS fetch_b FROM work_enqueue('fetch', '{"url": "b"}') \gset
SELECT id AS merge FROM work_enqueue('merge', after => ARRAY[:fetch_a, :fetch_b]) \gset
SELECT state FROM workfence.items WHERE id = :merge;
SELECT count(*) AS finished
  FROM work_claim('fetch', 'fetcher', '1 minute', max_items => 2) AS c,
       LATERAL work_finish(c.id, 'fetcher', c.epoch, jsonb_build_object('bytes', c.id - :fetch_a + 10)) AS f
 WHERE f;
SELECT id AS m, epoch AS m_epoch FROM work_claim('merge', 'merger', '1 minute') \gset
SELECT work_parent_results(:m, 'merger', :m_epoch) = jsonb_build_object(:'fetch_a', '{"bytes": 10}'::jsonb, :'fetch_b', '{"bytes": 11}'::jsonb) AS both_results;
SELECT depth, state, cardinality(parents) AS parents FROM work_workflow(:m) ORDER BY depth, id;
