#!/usr/bin/env node
// pg-boss runner for scripts/bench.sh (contenders "pg-boss" and, with --batch B, "pg-boss
// (batched)").
//
//   node pgboss.mjs --dsn postgresql://postgres@127.0.0.1:PORT/DB --jobs N --concurrency C [--batch B]
//
// Untimed: PgBoss#start() installs or migrates the `pgboss` schema; deleteQueue('bench') removes
// the queue and the jobs of earlier runs; createQueue('bench') makes it anew (a standard queue,
// pg-boss defaults); one insert() of N jobs with data {}; getQueueStats('bench', { force: true })
// takes the new queue's first count (so pg-boss's cached ready count is N); that instance stops.
// A second instance (the worker: pool `max: C`, every other constructor option at its default,
// supervision and cron included) then starts, still untimed.
// Timed: work('bench', { localConcurrency: C, batchSize: 1, pollingIntervalSeconds: 0.5,
// burstWhenReadyExceeds: 1 }, async () => {}): C independent fetch loops, each claiming one job,
// running the empty handler and completing that job, so C jobs run at once, each claimed and
// completed on its own. The clock stops when a separate connection counts N jobs in state
// 'completed' (polled every 20 ms).
//
// Why those work() options: a pg-boss worker sleeps its polling interval (default 2 s, minimum
// 0.5 s) after every fetch, even one that returned a job, unless a "burst" trigger holds (C jobs
// per 0.5 s at best without one). At batchSize 1 burstWhenBatchFull is ignored by design, so
// burstWhenReadyExceeds: 1 (its minimum) is the trigger that keeps a loop fetching back to back
// while its fetches come back full and the queue's ready count is above 1. That count is pg-boss's
// cached one (loaded at start and every 60 s by default), which is why the setup recreates the
// queue and counts it before the worker instance starts: a queue never counted is counted at
// once, while a forced count of an older queue may serve a count up to a minute old. The first
// empty fetch of a loop ends its burst. pollingIntervalSeconds is pg-boss's minimum, 0.5 s.
//
// With --batch B, the batched configuration (pg-boss's own batching; it replaces the
// BENCH_PGBOSS_MODE=batch switch this file had, one loop fetching C jobs at a time):
// work('bench', { localConcurrency: C, batchSize: B, pollingIntervalSeconds: 0.5,
// burstWhenBatchFull: true }, async (jobs) => {}). Each of the C fetch loops claims up to B jobs in
// one statement and hands the whole array to the handler (pg-boss 12's WorkHandler always takes a
// Job[]); when the handler resolves, pg-boss completes every job of that batch in one statement
// (complete(name, jobs); checked in dist/types.d.ts and dist/manager.js; perJobResults stays off,
// so nothing is settled job by job). That is the shape of pg_workfence's batch cells: C
// connections, each claiming up to B and finishing them with one work_finish_many; the driver
// (bench/src/peers.rs) passes B = 100, pg_workfence's largest batch. burstWhenBatchFull (default
// false) replaces burstWhenReadyExceeds: it keeps a loop fetching back to back while its fetches
// come back full, without pg-boss's cached ready count, and the first short fetch (the queue
// running dry) ends the burst. The pool stays at max C, one connection per loop.
import { PgBoss } from 'pg-boss';
import {
  POLL_MS, fail, installedVersion, log, monitorClient, parseArgs, report, timedRun,
} from './common.mjs';

const QUEUE = 'bench';

async function main() {
  const { dsn, jobs, concurrency, batch } = parseArgs();
  const version = installedVersion('pg-boss');
  const batchMode = batch !== undefined;
  const errors = [];

  // 1-3: schema, empty queue, N jobs, fresh cached counts. Untimed.
  const setup = new PgBoss({ connectionString: dsn, max: concurrency });
  setup.on('error', (e) => errors.push(e));
  await setup.start();
  await setup.deleteQueue(QUEUE);
  await setup.createQueue(QUEUE);
  await setup.insert(QUEUE, Array.from({ length: jobs }, () => ({ data: {} })), { returnId: false });
  const stats = await setup.getQueueStats(QUEUE, { force: true });
  const ready = stats[0]?.readyCount;
  await setup.stop({ graceful: true });
  if (errors.length) throw errors[0];
  if (ready !== jobs) throw new Error(`expected ${jobs} ready jobs after the insert, pg-boss counts ${ready}`);

  const boss = new PgBoss({ connectionString: dsn, max: concurrency });
  boss.on('error', (e) => { log(`pg-boss error: ${e.message}`); errors.push(e); });
  await boss.start();

  const client = await monitorClient(dsn);
  const workOptions = batchMode
    ? { localConcurrency: concurrency, batchSize: batch, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true }
    : { localConcurrency: concurrency, batchSize: 1, pollingIntervalSeconds: 0.5, burstWhenReadyExceeds: 1 };
  let handled = 0;

  // 4: the timed phase.
  const run = await timedRun({
    client,
    jobs,
    errors,
    start: () => boss.work(QUEUE, workOptions, async (batch) => { handled += batch.length; }),
    progress: async () => {
      const { rows } = await client.query(
        `SELECT count(*) FILTER (WHERE state = 'completed')::int AS done,
                count(*) FILTER (WHERE state = 'failed')::int AS failed
           FROM pgboss.job WHERE name = $1`, [QUEUE]);
      return rows[0];
    },
  });

  // 6 (first half): stop the workers, wait for them.
  await boss.stop({ graceful: true });
  if (errors.length) throw errors[0];

  // 5: every job of the queue completed, none in any other state.
  const { rows } = await client.query(
    `SELECT state::text AS state, count(*)::int AS n FROM pgboss.job WHERE name = $1 GROUP BY 1`, [QUEUE]);
  await client.end();
  const byState = Object.fromEntries(rows.map((r) => [r.state, r.n]));
  const completed = byState.completed ?? 0;
  const total = rows.reduce((s, r) => s + r.n, 0);
  if (completed !== jobs || total !== jobs) {
    throw new Error(`expected ${jobs} completed jobs and nothing else, found ${JSON.stringify(byState)}`);
  }
  if (handled !== jobs) throw new Error(`the handler ran ${handled} times for ${jobs} jobs`);

  const config = batchMode
    ? `batched: work() localConcurrency ${concurrency}, batchSize ${batch} (each of the ${concurrency} loops claims up to ${batch} jobs per fetch, the handler receives them as one array, pg-boss completes the whole batch in one statement when it resolves), burstWhenBatchFull (fetch back to back while fetches come back full), pollingIntervalSeconds 0.5; pool max ${concurrency}; other options default; completion polled every ${POLL_MS} ms`
    : `work() localConcurrency ${concurrency}, batchSize 1, pollingIntervalSeconds 0.5 (its minimum), burstWhenReadyExceeds 1 (fetch back to back while backlog); pool max ${concurrency}; other options default; completion polled every ${POLL_MS} ms`;
  report({
    contender: batchMode ? 'pg-boss (batched)' : 'pg-boss',
    version,
    jobs,
    concurrency,
    seconds: run.seconds,
    wal_bytes: run.wal_bytes,
    completed,
    config,
  });
}

main().then(
  () => process.exit(0),
  (e) => fail(e?.stack || String(e)),
);
