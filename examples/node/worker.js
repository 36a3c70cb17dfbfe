// pg_workfence example worker in Node.js, on the `workfence` library (clients/node), which does
// the claiming, heartbeat, lease-lost handling, settling and shutdown: see examples/node/README.md.

import { setTimeout as sleep } from 'node:timers/promises';

import { Worker } from 'workfence';

/** One event line on stdout, `[node pid=<pid>] <event>`, written at once. */
function log(message) {
  process.stdout.write(`[node pid=${process.pid}] ${message}\n`);
}

/** Every level of the library's logger goes to stdout (`renew id=.. ok` is its debug line). */
const logger = { debug: log, info: log, warn: log, error: log };

/** A positive (or, with allowZero, non-negative) number from the environment, or the default. */
function envNumber(name, fallback, { integer = false, allowZero = false } = {}) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!(Number.isFinite(value) && (allowZero ? value >= 0 : value > 0)
    && (!integer || Number.isInteger(value)))) {
    throw new Error(`${name} must be ${integer ? 'a whole number' : 'a number'} ${allowZero ? '>= 0' : '> 0'}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/**
 * The stand-in job: sleep `sleep_ms` (cut short when the lease is lost or at shutdown), raise if
 * `fail`, else write n*n to examples.results and finish with {"output": n*n}, both in the job's
 * fenced transaction. `"heartbeat": false` stops renewing its lease (a stalled worker's stand-in).
 */
async function handler(job) {
  const { n, sleep_ms: sleepMs = 0, fail = false, heartbeat = true } = job.payload;
  if (heartbeat === false) job.stopRenewing();
  await sleep(sleepMs, undefined, { signal: job.signal });
  if (fail) throw new Error(`job ${n} failed on purpose`);
  return job.transaction(async (client) => {
    await client.query(
      'INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES ($1, $2, $3, $4)',
      [job.id, job.epoch, process.pid, n * n],
    );
    return { output: n * n };
  });
}

/** Runs the worker until SIGTERM/SIGINT; the exit status (0, 1 after an error, 2 on bad settings). */
async function main() {
  let worker;
  try {
    if (!process.env.WORKFENCE_DSN) throw new Error('WORKFENCE_DSN is not set');
    worker = new Worker({
      dsn: process.env.WORKFENCE_DSN,
      queue: process.env.WORKFENCE_QUEUE || 'examples',
      owner: process.env.WORKFENCE_OWNER || undefined, // default: <hostname>:<pid>
      concurrency: envNumber('WORKFENCE_CONCURRENCY', 1, { integer: true }),
      batchSize: envNumber('WORKFENCE_BATCH', 5, { integer: true }),
      lease: envNumber('WORKFENCE_LEASE_SECONDS', 6),
      pollWait: envNumber('WORKFENCE_WAIT_SECONDS', 5, { allowZero: true }),
      retry: () => 0.2, // seconds: quick retries for the tests
      shutdownGrace: 0, // on SIGTERM the running job is cancelled and released at once
      logger,
      handler,
    });
  } catch (err) {
    log(`error ${err.message}`);
    return 2;
  }
  try {
    await worker.run(); // handles SIGTERM and SIGINT; logs `exit` last
    return 0;
  } catch {
    return 1; // the library logged the error
  }
}

process.exit(await main());
