// pg_workfence example worker in Node.js with node-postgres (`pg`).
//
// Claims items with the long poll `workfence.work_claim(..., wait)`, runs each job while a heartbeat
// renews its lease on a second connection, and settles it with its fencing token: success writes the
// job's effect (a row in examples.results) and `work_finish` in ONE transaction behind `work_assert`;
// a job error is `work_fail`; SIGTERM releases whatever is held and exits 0. The heartbeat's
// connection also LISTENs on `work_lease_lost`: a notification naming a token this worker holds
// (id and epoch) stops that job at once, as a refused renew would.
// Configuration comes from WORKFENCE_* environment variables (see README.md beside this file).

import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

const LEASE_LOST = 'lease lost';
const SHUTDOWN = 'shutdown';

/** One log line on stdout (synchronous for pipes and files on Linux, so nothing is lost at exit). */
function log(message) {
  process.stdout.write(`[node pid=${process.pid}] ${message}\n`);
}

/** A positive (or, with allowZero, non-negative) number from the environment, or the default. */
function envNumber(name, fallback, { integer = false, allowZero = false } = {}) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  const ok = Number.isFinite(value) && (allowZero ? value >= 0 : value > 0)
    && (!integer || Number.isInteger(value));
  if (!ok) {
    const what = `${integer ? 'a whole number' : 'a number'} ${allowZero ? '>= 0' : '> 0'}`;
    throw new Error(`${name} must be ${what}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/**
 * The `pg.Client` configuration for a libpq connection string: a URI (postgresql://...) is passed
 * on as it is; the keyword/value form (`host=... port=... dbname='...'`, quoting as in libpq: a
 * value in single quotes, backslash escapes the next character) is parsed here, because
 * node-postgres reads only URIs. Keywords that pg cannot honour are an error, never ignored.
 */
function clientConfig(conninfo) {
  if (/^postgres(ql)?:\/\//.test(conninfo)) return { connectionString: conninfo };
  const pairs = {};
  let i = 0;
  const skipSpace = () => { while (i < conninfo.length && /\s/.test(conninfo[i])) i += 1; };
  for (skipSpace(); i < conninfo.length; skipSpace()) {
    let key = '';
    while (i < conninfo.length && conninfo[i] !== '=' && !/\s/.test(conninfo[i])) key += conninfo[i++];
    skipSpace();
    if (conninfo[i] !== '=') throw new Error(`WORKFENCE_DSN: missing "=" after "${key}"`);
    i += 1;
    skipSpace();
    let value = '';
    if (conninfo[i] === "'") {
      for (i += 1; ; i += 1) {
        if (i >= conninfo.length) throw new Error('WORKFENCE_DSN: unterminated quoted value');
        if (conninfo[i] === "'") { i += 1; break; }
        if (conninfo[i] === '\\') i += 1;
        value += conninfo[i] ?? '';
      }
    } else {
      for (; i < conninfo.length && !/\s/.test(conninfo[i]); i += 1) {
        if (conninfo[i] === '\\') i += 1;
        value += conninfo[i] ?? '';
      }
    }
    pairs[key] = value;
  }
  const config = {};
  for (const [key, value] of Object.entries(pairs)) {
    switch (key) {
      case 'host': case 'hostaddr': config.host = value; break;
      case 'port': config.port = Number(value); break;
      case 'user': config.user = value; break;
      case 'password': config.password = value; break;
      case 'dbname': config.database = value; break;
      case 'application_name': config.application_name = value; break;
      case 'options': config.options = value; break;
      case 'connect_timeout': config.connectionTimeoutMillis = Number(value) * 1000; break;
      case 'sslmode':
        if (['disable', 'allow', 'prefer'].includes(value)) config.ssl = false;
        else if (value === 'require') config.ssl = { rejectUnauthorized: false };
        else if (['verify-ca', 'verify-full'].includes(value)) config.ssl = true;
        else throw new Error(`WORKFENCE_DSN: unknown sslmode "${value}"`);
        break;
      default: throw new Error(`WORKFENCE_DSN: keyword "${key}" is not supported by this example`);
    }
  }
  return config;
}

/**
 * The simulated job: sleep (stoppable through `signal`), then fail on purpose or return n*n.
 * (`"heartbeat": false` in the payload is read by `Worker.heartbeat`, not here.)
 */
async function runJob(payload, signal) {
  await sleep(payload.sleep_ms ?? 0, undefined, { signal });
  if (payload.fail) throw new Error(`job ${payload.n} failed on purpose`);
  const n = BigInt(payload.n); // exact: n*n may exceed 2^53
  return n * n;
}

/** The worker: two connections, the settings, and what it holds. */
class Worker {
  /** Reads the settings from `env`; throws on a bad one. Connects nothing yet. */
  constructor(env) {
    this.queue = env.WORKFENCE_QUEUE || 'examples';
    this.owner = env.WORKFENCE_OWNER || os.hostname();
    this.batch = envNumber('WORKFENCE_BATCH', 5, { integer: true });
    this.lease = envNumber('WORKFENCE_LEASE_SECONDS', 6);
    this.wait = envNumber('WORKFENCE_WAIT_SECONDS', 5, { allowZero: true });
    if (!env.WORKFENCE_DSN) throw new Error('WORKFENCE_DSN is not set');
    const config = clientConfig(env.WORKFENCE_DSN);
    // Main connection: claims, the final transaction, fail and release.
    this.main = new pg.Client(config);
    // Side connection: the heartbeat's renews, cancelling the main connection's long poll, and
    // LISTEN work_lease_lost. node-postgres reads the socket whenever data comes and emits
    // 'notification' at once, busy or idle, so the heartbeat's connection can carry it: no
    // third connection, and the claims and transactions on main are never held up by it.
    this.side = new pg.Client(config);
    this.side.on('notification', (msg) => this.notified(msg));
    for (const client of [this.main, this.side]) {
      // An idle client whose connection breaks emits 'error'; the next query then rejects.
      client.on('error', (err) => log(`connection error: ${err.message}`));
    }
    this.stopping = false;
    this.held = new Map(); // id -> claimed item not yet settled (released on shutdown)
    this.job = null; // { item, controller } of the job in progress
    this.polling = false; // the main connection is in work_claim's long poll
    this.cancel = null; // promise of the pg_cancel_backend sent to that poll
    this.strayCancel = false; // that cancel may still hit a later statement on main
  }

  /** SIGTERM/SIGINT: take no new work, stop the job in progress, cut the long poll short. */
  stop(signal) {
    if (this.stopping) return;
    this.stopping = true;
    log(`stop signal=${signal}`);
    this.job?.controller.abort(SHUTDOWN);
    if (this.polling) {
      this.cancel = this.side.query('SELECT pg_cancel_backend($1)', [this.main.processID]);
    }
  }

  /**
   * A `work_lease_lost` notification: when its token (id AND epoch: the owner name is shared
   * with other copies) is one this worker holds, the item is someone else's now. Its job stops
   * at once (the same abort as a refused renew), or, waiting its turn in the batch, it is
   * dropped. A hint only, arriving at the re-claim's commit: the refused renew and work_assert
   * remain the ground truth, so a payload that cannot be read is logged and ignored.
   */
  notified({ channel, payload }) {
    if (channel !== 'work_lease_lost') return;
    let id;
    let epoch;
    try {
      ({ id, epoch } = JSON.parse(payload));
    } catch (err) {
      log(`error notification payload=${JSON.stringify(payload)}: ${err.message}`);
      return;
    }
    // ids and epochs are held as node-postgres returns bigints: decimal strings. A JSON number
    // is exact only up to 2^53, so a larger one cannot be matched (the renew still will).
    if (!Number.isSafeInteger(id) || !Number.isSafeInteger(epoch)) {
      log(`error notification payload=${JSON.stringify(payload)}: id and epoch must be safe integers`);
      return;
    }
    const item = this.held.get(String(id));
    if (!item || item.epoch !== String(epoch)) return; // not ours, or already settled
    log(`lease lost (notified) id=${item.id} epoch=${item.epoch}`);
    if (this.job?.item === item) {
      this.job.controller.abort(LEASE_LOST); // process() drops it from `held`
    } else {
      this.held.delete(item.id); // waiting its turn: skipped by run(), never released
    }
    log(`refused id=${item.id} (lease lost)`);
  }

  /** Connects (and LISTENs), then claims and works batches until a shutdown. */
  async run() {
    await this.main.connect();
    await this.side.connect();
    await this.side.query('LISTEN work_lease_lost');
    while (!this.stopping) {
      const items = await this.claim();
      for (const item of items) this.held.set(item.id, item);
      for (const item of items) {
        if (this.stopping) break;
        if (!this.held.has(item.id)) continue; // its lease was lost (notified) while it waited
        await this.process(item);
      }
    }
  }

  /** One long poll: the items claimed, or none when the wait passed or a shutdown cancelled it. */
  async claim() {
    this.polling = true;
    try {
      const { rows } = await this.main.query(
        `SELECT id, key, payload, epoch, attempt, lease_until
           FROM workfence.work_claim($1, $2, make_interval(secs => $3), $4, make_interval(secs => $5))`,
        [this.queue, this.owner, this.lease, this.batch, this.wait],
      );
      for (const row of rows) log(`claim id=${row.id} epoch=${row.epoch} attempt=${row.attempt}`);
      if (this.cancel) this.strayCancel = true; // the poll ended before the cancel reached it
      return rows;
    } catch (err) {
      if (err.code === '57014' && this.stopping) return []; // our own cancel: nothing was claimed
      throw err;
    } finally {
      this.polling = false;
      // Wait until the cancel has been sent before the main connection runs anything else.
      if (this.cancel) await this.cancel;
    }
  }

  /** Run one item's job under a heartbeat, then settle it with its token. */
  async process(item) {
    const job = new AbortController();
    this.job = { item, controller: job };
    const stopHeartbeat = this.heartbeat(item, job);
    let output;
    try {
      output = await runJob(item.payload, job.signal);
    } catch (err) {
      await stopHeartbeat();
      if (job.signal.aborted && err.name === 'AbortError') {
        const reason = job.signal.reason;
        if (reason === LEASE_LOST) this.held.delete(item.id); // someone else's now: not ours to settle
        else if (reason !== SHUTDOWN) throw reason; // the heartbeat's connection failed
        return; // SHUTDOWN: the item stays held and is released on the way out
      }
      await this.fail(item, err);
      return;
    } finally {
      this.job = null;
    }
    await stopHeartbeat(); // before the transaction: a renew would wait on work_assert's row lock
    await this.finish(item, output);
  }

  /**
   * Renew the item's lease every lease/3 on the side connection; a refusal stops the job.
   * The payload's `"heartbeat": false` turns it off for that item, standing in for a worker that
   * stalls (a GC pause, a network partition): its lease lapses while the job runs.
   */
  heartbeat(item, job) {
    if (item.payload?.heartbeat === false) return async () => {};
    let inFlight = null;
    const timer = setInterval(() => {
      if (inFlight) return; // the previous renew has not answered yet
      inFlight = this.side
        .query('SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4)) AS renewed',
          [item.id, this.owner, item.epoch, this.lease])
        .then(({ rows: [{ renewed }] }) => {
          log(`renew id=${item.id} ${renewed ? 'ok' : 'refused'}`);
          if (!renewed) {
            log(`refused id=${item.id} (lease lost)`);
            job.abort(LEASE_LOST);
          }
        }, (err) => job.abort(err))
        .finally(() => { inFlight = null; });
    }, (this.lease * 1000) / 3);
    return async () => {
      clearInterval(timer);
      await inFlight;
    };
  }

  /** Success: the effect and the finish commit together, only while the lease is ours. */
  async finish(item, output) {
    const result = `{"output": ${output}}`; // JSON text, bound as a parameter
    await this.main.query('BEGIN');
    try {
      await this.main.query('SELECT workfence.work_assert($1, $2, $3)', [item.id, this.owner, item.epoch]);
      await this.main.query(
        'INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES ($1, $2, $3, $4)',
        [item.id, item.epoch, process.pid, output.toString()],
      );
      const { rows: [{ finished }] } = await this.main.query(
        'SELECT workfence.work_finish($1, $2, $3, $4) AS finished',
        [item.id, this.owner, item.epoch, result],
      );
      // Unreachable while work_assert holds the row, but never commit an effect without a finish.
      await this.main.query(finished ? 'COMMIT' : 'ROLLBACK');
      log(`finish id=${item.id} epoch=${item.epoch} ${finished ? 'ok' : 'false'}`);
    } catch (err) {
      await this.main.query('ROLLBACK');
      if (err.code !== '55000') throw err;
      log(`refused id=${item.id} (lease lost)`); // the assert refused: nothing was written
    }
    this.held.delete(item.id);
  }

  /** The job raised: record it; the item is retried shortly, or dead-letters after max_attempts. */
  async fail(item, err) {
    await this.main.query(
      'SELECT workfence.work_fail($1, $2, $3, $4, retry_in => make_interval(secs => 0.2))',
      [item.id, this.owner, item.epoch, err.message],
    );
    log(`fail id=${item.id} error=${err.message}`);
    this.held.delete(item.id);
  }

  /** Hand back every item claimed and not settled, so the other workers take it at once. */
  async releaseHeld() {
    for (const item of this.held.values()) {
      const args = [item.id, this.owner, item.epoch];
      let released;
      try {
        ({ rows: [{ released }] } = await this.main.query(
          'SELECT workfence.work_release($1, $2, $3) AS released', args));
      } catch (err) {
        // A cancel sent to a long poll that had already returned hits one later statement, once.
        if (err.code !== '57014' || !this.strayCancel) throw err;
        this.strayCancel = false;
        ({ rows: [{ released }] } = await this.main.query(
          'SELECT workfence.work_release($1, $2, $3) AS released', args));
      }
      log(`release id=${item.id} epoch=${item.epoch}${released ? '' : ' refused'}`);
    }
    this.held.clear();
  }

  /** Closes both connections; a failure to close one is logged (the process exits anyway). */
  async close() {
    const ended = await Promise.allSettled([this.main.end(), this.side.end()]);
    for (const { status, reason } of ended) {
      if (status === 'rejected') log(`error closing a connection: ${reason.message}`);
    }
  }
}

/** Runs the worker until a shutdown; the exit status (0, 1 after an error, 2 on bad settings). */
async function main() {
  let worker;
  try {
    worker = new Worker(process.env);
  } catch (err) {
    log(`error ${err.message}`);
    return 2;
  }
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => worker.stop(signal));
  let code = 0;
  try {
    await worker.run();
  } catch (err) {
    log(`error ${err.code ? `code=${err.code} ` : ''}${err.message}`);
    code = 1;
  }
  try {
    await worker.releaseHeld();
  } catch (err) {
    log(`error releasing: ${err.message}`);
    code = 1;
  }
  await worker.close();
  log('exit');
  return code;
}

process.exit(await main());
