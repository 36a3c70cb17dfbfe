#!/usr/bin/env node
// graphile-worker runner for scripts/bench.sh (contenders "graphile-worker" and, with --batch B,
// "graphile-worker (batched)").
//
//   node graphile.mjs --dsn postgresql://postgres@127.0.0.1:PORT/DB --jobs N --concurrency C [--batch B]
//
// Untimed: makeWorkerUtils().migrate() installs or migrates the `graphile_worker` schema; a plain
// DELETE on graphile_worker._private_jobs removes whatever earlier runs left (a successful job is
// deleted by graphile-worker itself, so only failed or unfinished ones could be there); one
// addJobs() call enqueues N jobs of task `noop` with payload {}.
// Timed: run({ concurrency: C, maxPoolSize: C + 1, taskList: { noop: async () => {} } }), graphile-
// worker's documented runner with its defaults otherwise: no local queue (localQueue.size -1), no
// batched completion (completeJobBatchDelay -1), pollInterval 2000 ms (it does not matter here: a
// worker that finishes a job asks for the next one at once and only waits after an empty fetch,
// and LISTEN/NOTIFY wakes it for new jobs anyway), prepared statements on. So C workers each claim
// one job with get_job, run the empty task and delete it. The clock stops when a separate
// connection counts no rows left in graphile_worker._private_jobs (polled every 20 ms). run()
// itself (compiling options, making the pool, re-checking the migrations) is inside the timed
// phase: about 10 ms here.
// maxPoolSize is C + 1, not C: the runner takes one client out of its pool for LISTEN and keeps
// it, so C + 1 leaves C connections for the jobs. With maxPoolSize = concurrency = 1 the LISTEN
// client holds the only connection and no job ever runs (seen with 0.17.3: 0 of 200 done in 120 s).
// Not defaults: noHandleSignals (the runner stops the workers itself), parsedCronItems [] (no
// crontab), and a logger that prints warnings and errors to stderr only: the default console
// logger prints a line per completed job to stdout, which the contract keeps for the JSON line.
//
// With --batch B, the batched configuration (graphile-worker's own batching, which its docs,
// worker.graphile.org/docs/performance#batching, recommend for high throughput of fast jobs): the
// same run() with three more settings, given as preset.worker options (in 0.17.3 they exist only
// there: run()'s legacy options have no name for them, and legacyOptionsToPreset would ignore
// them; checked in dist/index.d.ts and dist/lib.js):
// - localQueue: { size: B } (default -1, off): the pool, not each worker, fetches and locks up to
//   B jobs with one get_jobs query and serves its C workers from memory, fetching again when the
//   local queue runs dry. The driver (bench/src/peers.rs) passes B = C x 100 (1,600 at C = 16):
//   as many jobs held at once as pg_workfence's batch-100 cells hold (C connections claiming up
//   to 100 each). The option's docs call C + 1 "a good starting point" and add that "if you have
//   very high throughput and extremely fast tasks then a much higher number may make sense": the
//   jobs here are no-ops, and a bigger local queue means fewer fetches per job. B must be at
//   least C, or graphile-worker warns that the workers starve; the runner refuses it.
// - completeJobBatchDelay: 0 and failJobBatchDelay: 0 (default -1, off): the completions (and
//   failures, of which there are none) of one timer turn are collected and deleted by one
//   statement. The docs suggest starting at 250 ms, but 0 already batches everything completed
//   before the timer fires, and a longer delay only holds each batch back that long before its
//   delete.
// Everything else as above; the local queue's refetch delay stays off (it only acts when fetches
// come back short of B, the queue running dry).
//
// graphile-worker deletes a job when it completes, so the check that N jobs completed is: the
// task ran N times, graphile-worker reported N successes and no error, and its job table is empty
// (nothing failed, nothing left).
import { EventEmitter } from 'node:events';
import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import {
  POLL_MS, fail, installedVersion, log, monitorClient, parseArgs, report, timedRun,
} from './common.mjs';

const TASK = 'noop';
// completeJobBatchDelay and failJobBatchDelay of the batched configuration (see the header).
const BATCH_DELAY_MS = 0;

const logger = new Logger((scope) => (level, message) => {
  if (level === 'error' || level === 'warning') {
    log(`graphile-worker ${level}${scope.workerId ? ` [${scope.workerId}]` : ''}: ${message}`);
  }
});

async function main() {
  const { dsn, jobs, concurrency, batch } = parseArgs();
  if (batch !== undefined && batch < concurrency) {
    fail(`--batch ${batch} is below --concurrency ${concurrency}: the local queue would starve the workers`);
  }
  const version = installedVersion('graphile-worker');
  const errors = [];

  // 1-3: schema, empty job table, N jobs. Untimed.
  const utils = await makeWorkerUtils({ connectionString: dsn, logger });
  try {
    await utils.migrate();
    await utils.withPgClient((pg) => pg.query('DELETE FROM graphile_worker._private_jobs'));
    const added = await utils.addJobs(Array.from({ length: jobs }, () => ({ identifier: TASK, payload: {} })));
    if (added.length !== jobs) throw new Error(`addJobs returned ${added.length} jobs, expected ${jobs}`);
  } finally {
    await utils.release();
  }

  const client = await monitorClient(dsn);
  const events = new EventEmitter();
  let handled = 0;
  let succeeded = 0;
  events.on('job:success', () => { succeeded++; });
  events.on('job:error', ({ error }) => errors.push(new Error(`job failed: ${error?.message ?? error}`)));
  events.on('pool:gracefulShutdown', ({ message }) => log(`graphile-worker: shutdown: ${message}`));

  // 4: the timed phase.
  const { handle: runner, seconds, wal_bytes } = await timedRun({
    client,
    jobs,
    errors,
    start: async () => {
      const r = await run({
        connectionString: dsn,
        concurrency,
        maxPoolSize: concurrency + 1,
        noHandleSignals: true,
        logger,
        events,
        parsedCronItems: [],
        taskList: { [TASK]: async () => { handled++; } },
        ...(batch === undefined ? {} : {
          preset: {
            worker: { localQueue: { size: batch }, completeJobBatchDelay: BATCH_DELAY_MS, failJobBatchDelay: BATCH_DELAY_MS },
          },
        }),
      });
      r.promise.catch((e) => errors.push(e));
      return r;
    },
    progress: async () => {
      const { rows } = await client.query(
        `SELECT count(*)::int AS remaining,
                count(*) FILTER (WHERE last_error IS NOT NULL)::int AS failed
           FROM graphile_worker._private_jobs`);
      return { done: jobs - rows[0].remaining, failed: rows[0].failed };
    },
  });

  // 6 (first half): stop the workers, wait for them.
  await runner.stop();
  await runner.promise;
  if (errors.length) throw errors[0];

  // 5: nothing left or failed in the table, and N successful runs.
  const { rows } = await client.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs');
  await client.end();
  if (rows[0].n !== 0) throw new Error(`${rows[0].n} job(s) left in graphile_worker._private_jobs`);
  if (handled !== jobs || succeeded !== jobs) {
    throw new Error(`the task ran ${handled} times and graphile-worker reported ${succeeded} successes for ${jobs} jobs`);
  }

  report({
    contender: batch === undefined ? 'graphile-worker' : 'graphile-worker (batched)',
    version,
    jobs,
    concurrency,
    seconds,
    wal_bytes,
    completed: jobs,
    config: batch === undefined
      ? `run() concurrency ${concurrency}, maxPoolSize ${concurrency + 1} (C for jobs + the one its LISTEN client keeps), defaults otherwise: no local queue, unbatched completion, pollInterval 2000 ms (idles only when the queue is empty); completion polled every ${POLL_MS} ms`
      : `batched: run() concurrency ${concurrency}, maxPoolSize ${concurrency + 1} (C for jobs + the one its LISTEN client keeps), preset.worker.localQueue.size ${batch} (the pool fetches and locks up to ${batch} jobs per query${batch % concurrency === 0 ? `, ${batch / concurrency} per worker,` : ''} and serves its workers from memory), completeJobBatchDelay ${BATCH_DELAY_MS} and failJobBatchDelay ${BATCH_DELAY_MS} ms (the completions of one timer turn deleted by one statement); defaults otherwise (pollInterval 2000 ms, no refetch delay); completion polled every ${POLL_MS} ms`,
  });
}

main().then(
  () => process.exit(0),
  (e) => fail(e?.stack || String(e)),
);
