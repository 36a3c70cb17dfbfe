// The worker runner of clients/README.md ("A worker runner"): long-poll claims into a buffer,
// handlers with an AbortSignal, a heartbeat that renews and LISTENs on work_lease_lost, fenced
// transactions, settling, and a graceful shutdown. docs/writing-workers.md explains each choice.
//
// Ideas borrowed: graphile-worker's single "listen + fetch" connection apart from the job
// connections and its `gracefulShutdown` on SIGTERM/SIGINT; River's per-job cancellation of the
// handler's context when the job's lease is lost; procrastinate's shutdown grace ("shutdown
// timeout") before running jobs are cancelled.

import os from 'node:os';
import pg from 'pg';

import { connectionConfig } from './dsn.js';
import {
  Cancelled, InvalidArgument, LeaseLost, NotPermitted, WorkfenceError, fromPgError,
} from './errors.js';
import { leaseLostToken } from './notify.js';
import { jsonText } from './operations.js';
import {
  consumerTracer, endConsumerSpan, loadApi, startConsumerSpan, withSpan,
} from './tracing.js';

// Every column of the claim row (`c.*`), so that the last ones, `progress` and `trace` (from
// 0.12.0), are read when the server has them and simply absent before; the bigints again as exact
// text.
const CLAIM_SQL = `SELECT c.*, c.id::text AS id_text, c.epoch::text AS epoch_text
  FROM workfence.work_claim($1, $2, make_interval(secs => $3), $4, make_interval(secs => $5)) AS c`;

const RENEW_SQL = `SELECT t.id::text AS id,
       workfence.work_renew(t.id, $1, t.epoch, make_interval(secs => $2)) AS renewed
  FROM unnest($3::bigint[], $4::bigint[]) WITH ORDINALITY AS t(id, epoch, n)
 ORDER BY t.n`;

/** The default owner name: `<hostname>:<pid>` (clients/README.md, settings). */
export function defaultOwner() {
  return `${os.hostname()}:${process.pid}`;
}

/**
 * One claimed item as the runner tracks it. `status` moves:
 * buffered -> running -> settling -> finished | failed | released | abandoned,
 * and from buffered/running/settling to `lost` (the lease is someone else's) or, on shutdown,
 * from buffered/running to `releasing`.
 */
class Held {
  /**
   * @param {object} row a claim row
   * @param {number} leaseEnd when the lease ends at the latest, on this process's monotonic clock
   *   (`performance.now()` when the claim was sent, plus the lease)
   */
  constructor(row, leaseEnd) {
    this.id = row.id_text ?? String(row.id);
    this.key = row.key;
    this.payload = row.payload;
    this.epoch = row.epoch_text ?? String(row.epoch);
    this.attempt = row.attempt;
    this.leaseUntil = row.lease_until;
    this.checkpoint = row.progress ?? null; // absent before 0.12.0
    this.trace = row.trace ?? null; // absent before 0.12.0's trace context
    this.leaseEnd = leaseEnd;
    this.status = 'buffered';
    this.renewing = true;
    this.inTransaction = false;
    this.transactionUsed = false;
    this.txClient = null; // the connection of the job's transaction or guard, while one runs
    this.controller = new AbortController();
    this.done = null; // the promise of its run, once started
  }

  /** Whether the runner still acts for this token (renews it, may settle it). */
  get live() {
    return this.status === 'buffered' || this.status === 'running';
  }
}

/**
 * What a handler is given for one claimed item.
 *
 * `id` and `epoch` are bigints as decimal strings (exact, as node-postgres returns them);
 * `attempt` counts claims of the item, from 1; `payload` is the item's JSON payload;
 * `leaseUntil` the lease's end at claim time (server clock); `checkpoint` the last progress an
 * earlier attempt stored with {@link Job#progress} (null on a first attempt); `trace` the W3C
 * traceparent the item was enqueued with (null: none); `fencingToken`
 * the string `<id>:<epoch>`; `signal` aborts when the lease is lost (reason: a
 * {@link LeaseLost}) or when the shutdown grace is over (reason: a {@link Cancelled}). A step of
 * a workflow (enqueued with `after`, from 0.12.0) reads what its parents ended with from
 * {@link Job#parentResults}.
 */
export class Job {
  /** @param {Worker} worker @param {Held} held */
  constructor(worker, held) {
    this.id = held.id;
    this.key = held.key;
    this.payload = held.payload;
    this.attempt = held.attempt;
    this.epoch = held.epoch;
    this.leaseUntil = held.leaseUntil;
    /**
     * The claim row's `progress` (from 0.12.0): the last value an earlier attempt of this item
     * stored with {@link Job#progress} while its lease was current, so that a retried job resumes
     * from it; null on a first attempt, after a rerun by `enqueue(..., { onConflict })`, and
     * against a server before 0.12.0. It is the value at claim time: this attempt's own
     * `progress()` calls do not change it.
     */
    this.checkpoint = held.checkpoint;
    /**
     * The claim row's `trace` (from 0.12.0): the W3C `traceparent` the item was enqueued with
     * (`00-<trace id>-<span id>-<flags>`, the enqueuer's span), or null when it has none and on a
     * server without trace context. The runner's span links to it (see `tracerProvider`).
     */
    this.trace = held.trace;
    /**
     * `<id>:<epoch>`, e.g. `"7:42"`: this claim's fencing token as one stable string, to pass as
     * the idempotency key (or fencing token) of a call to an external API. It is the same for
     * every repeat of a call within this attempt and different for every other claim of the item,
     * so a service that keeps the highest epoch it saw per id can refuse a stale holder's call.
     */
    this.fencingToken = `${held.id}:${held.epoch}`;
    this.queue = worker.queue;
    this.owner = worker.owner;
    this.signal = held.controller.signal;
    Object.defineProperty(this, '_worker', { value: worker });
    Object.defineProperty(this, '_held', { value: held });
  }

  /**
   * Stores a checkpoint: `workfence.work_progress(id, owner, epoch, value)` (from 0.12.0). The
   * server keeps it only under this job's current token (fenced like a renew: a stale holder's
   * write changes nothing), shows it in `item()`, and hands it to the next claim of the item as
   * {@link Job#checkpoint}, so that a retried job resumes from it.
   *
   * Inside {@link Job#transaction} or {@link Job#guard} it is written in that transaction (on its
   * connection: the transaction holds the item's row lock), and commits or rolls back with it.
   *
   * @param {unknown} value any JSON value, at most 64 KiB as JSON text
   * @returns {Promise<boolean>} true when stored; false when the lease is lost (the job's token is
   *   not current any more), which the runner then handles as a refused renew: the job's signal
   *   aborts with {@link LeaseLost}, `progress id=<id> refused` and `refused id=<id> (lease lost)`
   *   are logged, and nothing more is sent for the item. Also false, with no statement sent, once
   *   the runner has stopped acting for the token (lost, or being settled).
   * @throws {NullArgument} 22004 for `undefined` or `null`; {@link InvalidArgument} 22023 over
   *   64 KiB; `TypeError` for a value `JSON.stringify` refuses (a BigInt, a cycle); a connection
   *   error as node-postgres raises it (nothing is known then: call again)
   */
  progress(value) {
    return this._worker._progress(this._held, value);
  }

  /**
   * The results of the items this one waited for (its parents, `enqueue(..., { after })`), read
   * with `workfence.work_parent_results(id, owner, epoch)` (from 0.12.0), fenced like a renew.
   *
   * Inside {@link Job#transaction} or {@link Job#guard} it is read on that transaction's
   * connection; otherwise on a pool connection. It only reads.
   *
   * @returns {Promise<Record<string, unknown> | null>} an object with one key per parent, its id
   *   as a decimal string (as `enqueue` returns ids): a parent that is done maps to its result
   *   (null when it finished without one); one that ended failed or cancelled (only an item
   *   enqueued with `onParentFailure: 'run'` runs after that) to `{state: 'failed' | 'cancelled',
   *   error: <its last error text, or null>}`; `{}` for an item without parents (a purged parent
   *   is left out). **null** when the lease is lost (the item was claimed anew, cancelled or
   *   finished: a stalled copy reads nothing), which the runner then handles as a refused renew:
   *   the job's signal aborts with {@link LeaseLost}, `parent_results id=<id> refused` and
   *   `refused id=<id> (lease lost)` are logged, and nothing more is sent for the item. Also
   *   null, with no statement sent, once the runner has stopped acting for the token.
   * @throws a server error as its named class; a connection error as node-postgres raises it
   *   (nothing is known then: call again); 42883 from a server before 0.12.0
   */
  parentResults() {
    return this._worker._parentResults(this._held);
  }

  /**
   * Runs `fn(client)` while this job's lease is checked and held: the way to make a side effect
   * outside the database (an email, a payment, a call to another service) safe against a stalled
   * copy of this job. In one transaction on a pool connection: `BEGIN; SELECT
   * workfence.work_assert(id, owner, epoch)` (raises {@link LeaseLost} unless the token is current,
   * and row-locks the item, so that no re-claim of it can happen until this transaction ends);
   * `work_renew` (the lease runs a full `lease` from here); `fn(client)`; `COMMIT`.
   *
   * So a copy that was stopped (SIGSTOP, a long GC pause, a suspended VM) past its lease, while
   * another worker claimed the item anew, is refused here and never runs `fn`, even when its
   * heartbeat has not noticed the loss yet; and while `fn` runs nobody else can claim the item.
   * Writes `fn` makes on `client` commit with the guard (record there that the effect happened,
   * so that a later attempt can skip it). A guard does not finish the job: the handler goes on
   * and returns its result. For the last effect of a job, {@link Job#transaction} holds the lock
   * from before the effect through the finish. Pass {@link Job#fencingToken} to the external
   * service as the call's idempotency key. The heartbeat does not renew this job while a guard
   * runs (the guard's own renew covers it).
   *
   * One guard or transaction of a job at a time (a second one while one runs throws: it would
   * wait on the first one's row lock).
   *
   * @template T
   * @param {(client: import('pg').PoolClient) => Promise<T>} fn the side effect
   * @returns {Promise<T>} what `fn` returned, after the COMMIT
   * @throws {LeaseLost} 55000 when the token is not current (from the runner at once when it
   *   already knows, else from `work_assert`): `fn` did not run, and the job's signal aborts
   * @throws whatever `fn` throws (after a ROLLBACK); a connection error at the COMMIT (`fn` ran;
   *   its writes on `client` may or may not have committed)
   */
  guard(fn) {
    return this._worker._guard(this._held, fn);
  }

  /**
   * Runs `fn(client)` inside the job's fenced transaction and finishes the job in it:
   * `BEGIN; SELECT workfence.work_assert(id, owner, epoch); <fn's statements>;
   * SELECT workfence.work_finish(id, owner, epoch, result); COMMIT`, where `result` is what `fn`
   * returns (as JSON). The handler's writes therefore commit only while the lease is held
   * (docs/contract.md, `work_assert`; docs/writing-workers.md, "The loop" step 3). The lease is
   * no longer renewed from the moment this is called (a renew would wait on the row lock).
   * Callable once per job; the handler should return what this returns (the runner sends no
   * further finish). {@link Job#progress} inside `fn` is written in this transaction.
   *
   * The last side effect of a job outside the database belongs here too (see
   * {@link Job#guard}): made inside `fn`, after `work_assert`, it runs only under the current
   * token, and the row lock keeps the item from being claimed anew until the finish commits.
   *
   * A connection lost at the `COMMIT` leaves its outcome unknown: the runner then asks
   * `work_lease_status` on a new connection (until the lease's end) and returns normally when the
   * transaction had committed (the item is done under this token), so a committed job is not
   * run again.
   *
   * @template T
   * @param {(client: import('pg').PoolClient) => Promise<T>} fn the handler's writes, on the
   *   transaction's connection (a client of the runner's pool)
   * @returns {Promise<T>} what `fn` returned, after the COMMIT
   * @throws {LeaseLost} 55000: the token is not current (at `work_assert`, a refused finish, or
   *   at `COMMIT`); nothing was committed, and the runner abandons the item
   * @throws whatever `fn` throws (after a ROLLBACK): the runner then fails the item as usual
   */
  transaction(fn) {
    return this._worker._transaction(this._held, fn);
  }

  /**
   * Stops renewing this job's lease, so that it runs into its lease: a hook for tests that need
   * a lease to lapse while a job runs (a stand-in for a stalled worker), and for jobs that must
   * not outlive one lease. A `work_lease_lost` notification or a refused finish still tells the
   * runner that the lease is lost.
   */
  stopRenewing() {
    this._held.renewing = false;
  }
}

/**
 * The error text of a job's span that ended without an error of its own, by the item's status:
 * its token was refused, or the shutdown released the item while the handler ran on.
 */
const SPAN_REASONS = { lost: 'lease lost', releasing: 'cancelled: shutdown', released: 'cancelled: shutdown' };

/** An event listener that does nothing. */
function ignore() {}

/** Waits `seconds` (none for 0). */
async function pauseFor(seconds) {
  if (seconds > 0) await new Promise((resolve) => { setTimeout(resolve, seconds * 1000); });
}

/** The delay before the next resend of a settle: at once, then 0.1 s doubling to 1 s. */
function nextResendDelay(delay) {
  return delay === 0 ? 0.1 : Math.min(delay * 2, 1);
}

/** A promise and its resolve function. */
function deferred() {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  return { promise, resolve };
}

/** A bad setting: {@link InvalidArgument} (22023), as the server reports a bad argument. */
function invalid(message) {
  return new InvalidArgument(message, { code: '22023' });
}

/**
 * `value` must be a finite number within [min, max] (and an integer when asked).
 * @throws {InvalidArgument} 22023 otherwise
 */
function checkNumber(name, value, { min, max, integer = false, minExclusive = false }) {
  const ok = typeof value === 'number' && Number.isFinite(value)
    && (minExclusive ? value > min : value >= min) && value <= max
    && (!integer || Number.isInteger(value));
  if (!ok) {
    throw invalid(`${name} must be ${integer ? 'an integer' : 'a number'} in `
      + `${minExclusive ? '(' : '['}${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

/** Control characters as the server's check sees them (Rust `char::is_control`: Unicode Cc). */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;

/**
 * A queue or owner name checked as the server checks it (src/access/validate.rs): a string, not empty
 * (an owner: not blank after trimming), at most `mostBytes` bytes of UTF-8, no control
 * characters. So a bad name stops the worker at construction, not at its first claim.
 * @param {string} what 'queue' or 'owner'
 * @param {unknown} value
 * @param {number} mostBytes 128 for a queue, 256 for an owner (docs/contract.md)
 * @param {boolean} trim whether a blank value counts as empty (the owner's rule)
 * @returns {string} the value, unchanged (the server compares it byte for byte)
 * @throws {InvalidArgument} 22023
 */
function checkName(what, value, mostBytes, trim) {
  if (typeof value !== 'string' || (trim ? value.trim() : value) === '') {
    throw invalid(`${what} is required (a non-empty${trim ? ', not blank' : ''} string)`);
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > mostBytes) throw invalid(`${what} is longer than ${mostBytes} bytes (${bytes} bytes of UTF-8)`);
  const control = CONTROL.exec(value);
  if (control) {
    const cp = control[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
    throw invalid(`${what} ${JSON.stringify(value)} has a control character (U+${cp})`);
  }
  return value;
}

/**
 * The JSON text of a handler's result, for `work_finish`.
 * @throws {Error} `result is not JSON: <why>` for a value JSON.stringify refuses (a BigInt, a
 *   cycle, a throwing toJSON); the runner fails the item with this text
 */
function resultJson(value) {
  try {
    return jsonText(value);
  } catch (err) {
    throw new Error(`result is not JSON: ${errorText(err)}`, { cause: err });
  }
}

/** The first delay before a reconnect (seconds); it doubles up to {@link BACKOFF_MAX}. */
const BACKOFF_FIRST = 0.5;
/** The longest delay between reconnects (seconds). */
const BACKOFF_MAX = 30;

/**
 * The server's SQLSTATE of an error, or null when the error did not come from the server (a
 * refused or lost connection: node-postgres's own `Error`s, or a Node system error whose `code`
 * is `ECONNREFUSED`, `EPIPE`, ..., never a SQLSTATE).
 * @param {unknown} err
 * @returns {string | null}
 */
function sqlstateOf(err) {
  if (!err || typeof err !== 'object') return null;
  const code = /** @type {any} */ (err).code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return null;
  return err instanceof pg.DatabaseError || err instanceof WorkfenceError ? code : null;
}

/** An error's text for a reconnect or settle line: its message, and its SQLSTATE if any. */
function describe(err) {
  const code = sqlstateOf(err);
  return code ? `${errorText(err)} (${code})` : errorText(err);
}

/** SQLSTATEs that retrying can fix, besides the classes of {@link HEALING_CLASSES}. */
const HEALING_CODES = new Set(['57014', '40001', '40P01', '25006']);
/** SQLSTATE prefixes that retrying can fix: connection exception, 57P0x, insufficient resources. */
const HEALING_CLASSES = ['08', '57P0', '53'];

/**
 * Whether an error of the runner's own connections can heal, so that the runner reconnects
 * after a backoff instead of ending `run()` (clients/README.md, "When the loop itself fails"; the
 * same list as the Python library's): no SQLSTATE (a refused, cut or lost connection), the
 * connection class 08, 57P01/57P02/57P03 (admin or crash shutdown, not yet accepting
 * connections: a server restart), 57014 (a statement cancelled by someone else), 40001 and 40P01
 * (serialization failure, deadlock), 25006 (a read-only standby during a failover) and class 53
 * (too many connections, out of memory or disk). Any other SQLSTATE (3F000 no extension, 42883,
 * 42501 a missing grant, 28P01 a wrong password, ...) cannot heal.
 * @param {unknown} err
 * @returns {boolean}
 */
export function heals(err) {
  const code = sqlstateOf(err);
  if (code === null) return true;
  return HEALING_CODES.has(code) || HEALING_CLASSES.some((prefix) => code.startsWith(prefix));
}

/**
 * Whether, after `err` (one that {@link heals}), the connection is replaced by a new one: yes
 * unless the session is known to be sound (40001, 40P01, 57014 end a statement, not the session).
 * A read-only standby (25006) is left for a new connection, which may reach the promoted primary.
 */
function replaces(err) {
  const code = sqlstateOf(err);
  return !(code === '40001' || code === '40P01' || code === '57014');
}

/** SQLSTATEs of a claim in a database without the extension: no schema, no function. */
const MISSING_EXTENSION = new Set(['3F000', '42883']);

/**
 * A claim's error, with a hint that the extension may be missing when the schema `workfence` or
 * the function is (3F000, 42883); the server's own hint, if any, is kept after it.
 */
function claimError(err) {
  if (err && MISSING_EXTENSION.has(err.code)) {
    const ours = 'The extension pg_workfence may be missing from this database: '
      + 'run CREATE EXTENSION pg_workfence in it.';
    if (!String(err.hint ?? '').startsWith(ours)) err.hint = err.hint ? `${ours} ${err.hint}` : ours;
  }
  return fromPgError(err);
}

/**
 * The worker runner for one queue (clients/README.md, "A worker runner").
 *
 * Connections: one `pg.Client` for the long-poll claims; one for the heartbeat's renews, which
 * also `LISTEN`s on `work_lease_lost`, cancels the long poll on shutdown and releases buffered
 * items; and a `pg.Pool` of `concurrency` connections for settling (finish, fail, release) and
 * for the jobs' fenced transactions. A lost claim or heartbeat connection is replaced after a
 * backoff (0.5 s doubling to 30 s, reset by a success) while the error {@link heals}; the pool
 * replaces its own broken connections. The idea is the Python library's (clients/python).
 */
export class Worker {
  /**
   * @param {object} options see index.d.ts `WorkerOptions` for each setting, its unit and default
   * @throws {InvalidArgument} 22023 on a missing or bad setting, checked as the server would
   *   check it (queue: non-empty, at most 128 bytes, no control characters; owner: not blank, at
   *   most 256 bytes, no control characters; lease in (0, 7 days]; pollWait 0..3600; batchSize
   *   1..1000; a malformed dsn string). Nothing is connected.
   */
  constructor(options) {
    const o = options ?? {};
    if (typeof o.dsn === 'string') {
      try {
        this._config = connectionConfig(o.dsn);
      } catch (err) {
        throw invalid(err.message);
      }
    } else if (o.dsn && typeof o.dsn === 'object') this._config = { ...o.dsn };
    else throw invalid('dsn is required (a libpq connection string or a pg config object)');
    if (typeof o.handler !== 'function') throw invalid('handler must be a function');
    if (o.retry !== undefined && o.retry !== null && typeof o.retry !== 'function') {
      throw invalid('retry must be a function (attempt, error) => seconds');
    }
    this.queue = checkName('queue', o.queue, 128, false);
    this.owner = checkName('owner', o.owner ?? defaultOwner(), 256, true);
    this.concurrency = checkNumber('concurrency', o.concurrency ?? 1,
      { min: 1, max: 1000, integer: true });
    this.batchSize = checkNumber('batchSize', o.batchSize ?? this.concurrency,
      { min: 1, max: 1000, integer: true });
    this.lease = checkNumber('lease', o.lease ?? 30, { min: 0, max: 7 * 86400, minExclusive: true });
    this.pollWait = checkNumber('pollWait', o.pollWait ?? 5, { min: 0, max: 3600 });
    this.shutdownGrace = checkNumber('shutdownGrace', o.shutdownGrace ?? 10,
      { min: 0, max: 2 ** 31 / 1000 });
    this.retry = o.retry ?? null;
    this.handleSignals = o.handleSignals ?? true;
    if (o.tracerProvider !== undefined && o.tracerProvider !== null
      && typeof o.tracerProvider.getTracer !== 'function') {
      throw invalid('tracerProvider must be an OpenTelemetry TracerProvider (with getTracer)');
    }
    this.tracerProvider = o.tracerProvider ?? null;
    this.logger = o.logger ?? console;
    for (const level of ['debug', 'info', 'warn', 'error']) {
      if (typeof this.logger[level] !== 'function') throw invalid(`logger.${level} must be a function`);
    }
    this._handler = o.handler;

    this._state = 'new'; // new -> running -> stopping -> stopped
    this._held = new Map(); // id -> Held, every token the runner acts for
    this._buffer = []; // Held claimed and waiting for a free handler
    this._running = new Set(); // Held whose handler has started and not yet returned
    this._room = null; // deferred resolved when a claim may be made (room, or stopping)
    this._polling = false; // the claim client is in the long poll
    this._claimerInUse = false; // a finish or fail is running on the claim client
    this._cancel = null; // promise of the pg_cancel_backend sent to that poll
    this._renewing = null; // promise of the renew in flight
    this._fatal = null; // the first error that stopped the runner
    this._stopEarly = false; // stop() was called before run()
    this._closing = false; // run() is closing the connections
    this._stopped = deferred();
    this._stopSignal = deferred(); // resolved by stop(): cuts backoff pauses and reconnects short
    this._claimerDown = null; // the error that broke the claim connection, until it is replaced
    this._beatDown = null; // the error that broke the heartbeat connection, until it is replaced
    this._beatRestoring = null; // promise of the heartbeat's reconnect loop, while it runs
    this._connected = false; // the first connections are up
    this._graceEnd = Infinity; // performance.now() at which the shutdown grace ends, once stopping
  }

  /**
   * Connects, then claims and runs jobs until {@link Worker#stop} (or, with `handleSignals`,
   * SIGTERM or SIGINT), then shuts down: buffered items released at once, running handlers given
   * `shutdownGrace` seconds, then their signals aborted and their items released. Logs `exit`
   * last, or `exit error=<message>` (at error level) when it rejects, as the Rust library does.
   * Callable once. A lost connection (a server restart 57P01, a network cut, a failover) does
   * not end it: the claim and heartbeat connections are replaced after a backoff of 0.5 s
   * doubling to 30 s (logged `reconnect claim|heartbeat in <s>s error=<text>` at warn) while the
   * error {@link heals}; what the runner held meanwhile may lapse and be claimed anew.
   *
   * @returns {Promise<void>} resolved after a clean shutdown
   * @throws the error that stopped the runner, after the shutdown: a failure of the first
   *   connections (not retried: a wrong DSN shows at once), or a claim, renew or reconnect error
   *   that cannot heal (a pg_workfence SQLSTATE as its named error, e.g. {@link NotPermitted}
   *   42501; 3F000 or 42883 from a claim with a hint to CREATE EXTENSION pg_workfence; 28P01)
   */
  async run() {
    if (this._state !== 'new') throw new Error('Worker.run() may be called only once');
    this._state = this._stopEarly ? 'stopping' : 'running';
    if (this._stopEarly) this._stopSignal.resolve();
    const onSignal = () => this.stop();
    if (this.handleSignals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    try {
      try {
        await loadApi(); // @opentelemetry/api, if installed: each job then checks for an SDK at once
        await this._connect();
        if (this._state === 'running') await this._claimLoop();
      } catch (err) {
        this._die(err);
      }
      await this._shutdown();
    } finally {
      this._closing = true;
      clearInterval(this._timer);
      if (this._beatRestoring) await this._beatRestoring;
      if (this._renewing) await this._renewing;
      await this._close();
      if (this.handleSignals) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
      }
      this._state = 'stopped';
      this._stopped.resolve();
    }
    if (this._fatal) {
      this.logger.error(`exit error=${errorText(this._fatal)}`);
      throw this._fatal;
    }
    this.logger.info('exit');
  }

  /**
   * Asks the runner to shut down: no more claims (a long poll in flight is cancelled), buffered
   * items are released, running handlers get `shutdownGrace`. Returns at once; idempotent.
   * @returns {Promise<void>} resolves when `run()` has finished its shutdown
   */
  stop() {
    if (this._state === 'new') {
      this._stopEarly = true; // run() will shut down as soon as it has connected
    } else if (this._state === 'running') {
      this._state = 'stopping';
      this._graceEnd = performance.now() + this.shutdownGrace * 1000;
      this._stopSignal.resolve();
      this._room?.resolve();
      if (this._polling && !this._cancel && this._beat) {
        // On the heartbeat's connection; on a pool connection while that one is being replaced.
        const via = this._beatDown ? this._pool : this._beat;
        this._cancel = via
          .query('SELECT pg_catalog.pg_cancel_backend($1)', [this._claimer.processID])
          .catch((err) => this.logger.error(`error cancelling the long poll: ${err.message}`));
      }
    }
    return this._stopped.promise;
  }

  /** Records the first fatal error and stops. */
  _die(err) {
    if (this._closing) return; // ends of our own connections while closing them
    if (!this._fatal) {
      this._fatal = fromPgError(err);
      const hint = err.hint ? ` (hint: ${err.hint})` : '';
      this.logger.error(`error ${err.code ? `code=${err.code} ` : ''}${err.message}${hint}`);
    }
    this.stop();
  }

  /** The first connections: not retried (a wrong DSN or password ends run() at once). */
  async _connect() {
    this._pool = new pg.Pool({ ...this._config, max: this.concurrency });
    // The pool drops a broken idle connection by itself and opens a new one when needed.
    this._pool.on('error', (err) => this.logger.warn(`error on an idle pool connection: ${describe(err)}`));
    const claimer = this._client('claim');
    const beat = this._client('heartbeat');
    this._claimer = claimer.client;
    this._beat = beat.client;
    await Promise.all([claimer.ready, beat.ready]);
    this._connected = true;
    this._timer = setInterval(() => this._heartbeat(), (this.lease * 1000) / 3);
    this._timer.unref?.();
  }

  /**
   * A new client for `which` ('claim' or 'heartbeat', which also LISTENs on work_lease_lost),
   * and the promise of its connection. Its `error` and `end` events mark it broken while it is
   * the runner's current one (later events of a replaced client are ignored; the listener stays,
   * so that no `error` event is ever unhandled).
   */
  _client(which) {
    const client = new pg.Client(this._config);
    const broken = (err) => this._broken(which, client, err);
    client.on('error', broken);
    client.on('end', () => broken(new Error('Connection terminated')));
    if (which === 'heartbeat') client.on('notification', (msg) => this._notified(msg));
    const ready = client.connect()
      .then(() => (which === 'heartbeat' ? client.query('LISTEN work_lease_lost') : null))
      .then(() => client, (err) => {
        client.end().catch(() => {});
        throw err;
      });
    return { client, ready };
  }

  /**
   * A new connected client for `which`, or null when stop() was called before it connected
   * (the client is then closed): a reconnect never holds up a shutdown.
   * @throws the connection's error
   */
  async _reconnect(which) {
    const { client, ready } = this._client(which);
    const stopped = this._stopSignal.promise.then(() => null);
    const got = await Promise.race([ready, stopped]);
    if (got === null) {
      ready.then(() => client.end(), () => {}).catch(() => {});
    }
    return got;
  }

  /** An `error` or `end` event of a runner's client: if it is the current one, mark it broken. */
  _broken(which, client, err) {
    // Ends of our own connections while closing them; a failed first connect ends run() anyway.
    if (this._closing || !this._connected) return;
    if (which === 'claim') {
      if (client === this._claimer && !this._claimerDown) this._claimerDown = err;
    } else if (client === this._beat && !this._beatDown) {
      this._beatDown = err;
      this._restoreBeat();
    }
  }

  /** Waits `seconds`, or less when stop() is called meanwhile. */
  async _pause(seconds) {
    let timer;
    await Promise.race([
      this._stopSignal.promise,
      new Promise((resolve) => { timer = setTimeout(resolve, seconds * 1000); }),
    ]);
    clearTimeout(timer);
  }

  /**
   * Replaces the claim connection after `err` (one that heals) once `delay` seconds have passed
   * (cut short by stop()), again with doubled delays while reconnecting fails with errors that
   * heal. Logs `reconnect claim in <s>s error=<text>` at warn before each wait.
   * @returns {Promise<number>} the next delay, should the next claim fail again
   * @throws a reconnect error that cannot heal (e.g. 28P01, 3D000)
   */
  async _recoverClaimer(err, delay) {
    let error = err;
    let next = delay;
    for (;;) {
      this.logger.warn(`reconnect claim in ${next}s error=${describe(error)}`);
      await this._pause(next);
      next = Math.min(next * 2, BACKOFF_MAX);
      if (this._state !== 'running') return next;
      if (!this._claimerDown && !replaces(error)) return next; // the session is sound: claim again
      try {
        const client = await this._reconnect('claim');
        if (client === null) return next; // stopped meanwhile
        const old = this._claimer;
        this._claimer = client;
        this._claimerDown = null;
        old.end().catch(() => {});
        return next;
      } catch (reconnectErr) {
        if (!heals(reconnectErr)) throw reconnectErr;
        error = reconnectErr;
      }
    }
  }

  /**
   * Replaces the heartbeat's connection (LISTENing again) in the background, with the same
   * backoff as the claim connection, until it succeeds, the runner stops, or an error cannot
   * heal (which stops the runner). Renews fail meanwhile (leases may lapse: fencing decides) and
   * notifications are missed; the first renew after it tells which leases are still held.
   */
  _restoreBeat() {
    if (this._beatRestoring || this._closing || this._state !== 'running') return;
    this._beatRestoring = (async () => {
      let error = this._beatDown;
      let delay = BACKOFF_FIRST;
      while (this._state === 'running') {
        this.logger.warn(`reconnect heartbeat in ${delay}s error=${describe(error)}`);
        await this._pause(delay);
        delay = Math.min(delay * 2, BACKOFF_MAX);
        if (this._state !== 'running') return;
        try {
          const client = await this._reconnect('heartbeat');
          if (client === null) return;
          const old = this._beat;
          if (this._renewing) await this._renewing;
          this._beat = client;
          this._beatDown = null;
          old.end().catch(() => {});
          return;
        } catch (err) {
          if (!heals(err)) {
            this._die(err);
            return;
          }
          error = err;
        }
      }
    })().finally(() => {
      this._beatRestoring = null;
      if (this._beatDown === null && this._state === 'running') this._heartbeat(); // renew now
    });
  }

  /** Items held and not done with: buffered and running (lost handlers still occupy a slot). */
  _load() {
    let buffered = 0;
    for (const held of this._buffer) if (held.status === 'buffered') buffered += 1;
    return buffered + this._running.size;
  }

  async _claimLoop() {
    let delay = BACKOFF_FIRST;
    while (this._state === 'running') {
      if (this._load() >= this.concurrency) {
        this._room = deferred();
        await this._room.promise;
        this._room = null;
        continue;
      }
      let rows;
      const sent = performance.now();
      try {
        if (this._claimerDown) throw this._claimerDown;
        rows = await this._claim();
      } catch (err) {
        if (this._state !== 'running') break;
        if (!heals(err)) throw err;
        delay = await this._recoverClaimer(err, delay);
        continue;
      }
      delay = BACKOFF_FIRST;
      for (const row of rows) {
        const held = new Held(row, sent + this.lease * 1000);
        this._held.set(held.id, held);
        this._buffer.push(held);
        this.logger.info(`claim id=${held.id} epoch=${held.epoch} attempt=${held.attempt}`);
      }
      this._dispatch();
    }
  }

  /** One long poll for `batchSize` items; none when it waited out or the shutdown cancelled it. */
  async _claim() {
    this._polling = true;
    try {
      const { rows } = await this._claimer.query(CLAIM_SQL,
        [this.queue, this.owner, this.lease, this.batchSize, this.pollWait]);
      return rows;
    } catch (err) {
      if (err.code === '57014' && this._state !== 'running') return [];
      throw claimError(err);
    } finally {
      this._polling = false;
      // The cancel must have been delivered before this connection could run anything else;
      // after a shutdown it runs nothing more, so a cancel that came late hits nothing.
      if (this._cancel) await this._cancel;
    }
  }

  /** Starts handlers for buffered items while there is a free slot. */
  _dispatch() {
    while (this._state === 'running' && this._running.size < this.concurrency && this._buffer.length) {
      const held = this._buffer.shift();
      if (held.status !== 'buffered') continue; // lost while it waited
      held.status = 'running';
      this._running.add(held);
      held.done = this._execute(held).finally(() => {
        this._running.delete(held);
        this._room?.resolve();
        this._dispatch();
      });
    }
  }

  /**
   * Runs the handler for one item and settles the item by its outcome; when there is a tracer
   * (an OpenTelemetry SDK registered, or `tracerProvider` given), inside the job's span
   * `process <queue>`, ended after the settle with the run's error, if any.
   */
  async _execute(held) {
    const tracer = consumerTracer(this.tracerProvider);
    if (tracer === null) return this._executeIn(held, null);
    const span = startConsumerSpan(tracer, this.queue, held);
    let outcome = { threw: false };
    try {
      outcome = await this._executeIn(held, span);
    } catch (err) {
      outcome = { threw: true, error: err };
      throw err;
    } finally {
      endConsumerSpan(span, { ...outcome, reason: SPAN_REASONS[held.status] ?? null });
    }
    return outcome;
  }

  /**
   * {@link Worker#_execute} itself: the handler (inside `span` when there is one), then the
   * settle. Resolves to whether the run failed and with what (for the span).
   * @returns {Promise<{threw: boolean, error?: unknown}>}
   */
  async _executeIn(held, span) {
    let value;
    let error;
    let threw = false;
    try {
      const job = new Job(this, held);
      value = await (span === null ? this._handler(job) : withSpan(span, () => this._handler(job)));
    } catch (err) {
      threw = true;
      error = err;
    }
    if (held.status !== 'running') {
      // Settled by its transaction, lost, or released at shutdown: nothing more to send.
      if (threw && held.status === 'finished') {
        this.logger.warn(`handler of id=${held.id} raised after its transaction finished: ${errorText(error)}`);
      }
      return { threw, error };
    }
    held.status = 'settling';
    let json;
    if (!threw) {
      try {
        json = resultJson(value);
      } catch (err) {
        // A result work_finish cannot take is the handler's failure, recorded like a throw
        // (else the item would stay claimed, lapse and dead-letter with no error recorded).
        threw = true;
        error = err;
      }
    }
    try {
      if (!threw) await this._finish(held, json);
      else if (held.controller.signal.reason instanceof Cancelled) await this._release(held);
      else await this._fail(held, error);
    } catch (err) {
      // Refused with an error, or sent again until the lease's end without an answer: the item
      // stays claimed until its lease lapses, then a claim takes it again (next attempt).
      held.status = 'abandoned';
      this.logger.error(`settle id=${held.id} epoch=${held.epoch} error=${describe(err)}`);
    } finally {
      this._forget(held);
    }
    return { threw, error };
  }

  /**
   * One settling statement (finish, fail or release). It runs on the claim connection when that
   * one is parked (the claim loop waits for room, no long poll in flight, no other settle on it,
   * no shutdown begun): one connection then carries a concurrency-1 worker's whole loop, as a
   * hand-written loop would, which saves the wake-up of a second backend per item (about half
   * the throughput at concurrency 1). Otherwise a pool connection.
   */
  async _settleQuery(text, values) {
    const parked = this._state === 'running' && this._room !== null && !this._polling
      && !this._claimerInUse && !this._claimerDown;
    try {
      if (!parked) return await this._pool.query(text, values);
      this._claimerInUse = true;
      try {
        return await this._claimer.query(text, values);
      } finally {
        this._claimerInUse = false;
      }
    } catch (err) {
      throw fromPgError(err);
    }
  }

  /**
   * Sends one settling call (`verb`: finish, fail or release; `text` a statement answering one
   * row with a boolean `ok`) for `held`'s token, and sends it again after an error that
   * {@link heals} (a dropped connection, a server restart: the first call's outcome is unknown)
   * on a new connection (logged `resend <verb> id=<id> epoch=<epoch> error=<text>` at warn): once
   * at once, then after 0.1 s doubling to 1 s while its lease lasts (on this process's clock,
   * from the last renew; during a shutdown until the end of the grace at the latest). A finish,
   * fail or release is safe to repeat under one token: the server settles the item once.
   *
   * A repeat can be refused although the first call settled the item (a `work_finish` repeated
   * returns true, but a repeated `work_fail` or `work_release` finds the lease handed back and
   * returns false): after a lost reply, a refusal is checked with {@link Worker#_tokenFate}
   * before it counts as a lost lease.
   *
   * @param {Held} held
   * @param {'finish'|'fail'|'release'} verb for the log lines
   * @param {string} text
   * @param {unknown[]} values
   * @param {{query: Function}|null} [first] the connection for the first call (default: as
   *   {@link Worker#_settleQuery} chooses)
   * @returns {Promise<'ok'|'refused'|'unknown'>} `unknown`: refused after a lost reply, and the
   *   role may not read the item (no `read` grant) to tell whether the first call settled it
   * @throws an error that does not heal, or the last error when the lease ended meanwhile
   */
  async _send(held, verb, text, values, first = null) {
    let lost = null; // the first error after which the outcome was unknown
    let delay = 0;
    let resent = 0;
    for (;;) {
      try {
        const via = lost === null && first ? first : null;
        const { rows: [{ ok }] } = via
          ? await via.query(text, values).catch((err) => { throw fromPgError(err); })
          : await this._settleQuery(text, values);
        if (ok) return 'ok';
        if (lost === null) return 'refused';
        const fate = await this._tokenFate(held);
        return fate === 'ours' ? 'ok' : fate === 'unknown' ? 'unknown' : 'refused';
      } catch (err) {
        if (!heals(err)) throw err;
        lost ??= err;
        // Once at least, at once; then while the lease (and a shutdown's grace) lasts.
        const bound = Math.min(held.leaseEnd, this._graceEnd);
        if (resent > 0 && performance.now() + delay * 1000 >= bound) throw err;
        this.logger.warn(`resend ${verb} id=${held.id} epoch=${held.epoch} error=${describe(err)}`);
        await pauseFor(delay);
        delay = nextResendDelay(delay);
        resent += 1;
      }
    }
  }

  /**
   * What became of `held`'s token, asked after its connection dropped with a settle in flight:
   * `ours` when this token settled the item (`work_lease_status` says `finished`: done or failed
   * under it; or `superseded` while the item still carries this epoch and owner: handed back by
   * it, a release or a failure with attempts left, or a finish after which `onConflict` sent the
   * item round once more); `current` when nothing settled it yet; `lost` when the item was
   * claimed anew, cancelled or is gone. Where the role may not read the item (no `read` grant
   * on its queue), `superseded` counts as `ours` while the lease the runner is sure of lasts
   * (nobody else can have claimed the item), else `unknown`.
   * @returns {Promise<'ours'|'current'|'lost'|'unknown'>}
   */
  async _tokenFate(held) {
    const { rows: [{ status }] } = await this._settleQuery(
      'SELECT workfence.work_lease_status($1, $2, $3) AS status', [held.id, this.owner, held.epoch]);
    if (status === 'finished') return 'ours';
    if (status === 'current') return 'current';
    if (status !== 'superseded') return 'lost';
    try {
      const { rows } = await this._settleQuery(
        'SELECT epoch::text AS epoch, owner FROM workfence.work_item($1::bigint)', [held.id]);
      const ours = rows.length === 1 && rows[0].epoch === held.epoch && rows[0].owner === this.owner;
      return ours ? 'ours' : 'lost';
    } catch (err) {
      if (!(err instanceof NotPermitted)) throw err;
      return performance.now() < held.leaseEnd ? 'ours' : 'unknown';
    }
  }

  /** Logs an answer of {@link Worker#_send} that is not ok; loses the token when refused. */
  _notSettled(held, verb, outcome) {
    if (outcome === 'refused') {
      this._lose(held);
    } else {
      held.status = 'abandoned';
      this.logger.warn(`settle id=${held.id} epoch=${held.epoch} outcome unknown `
        + `(${verb} refused after a lost reply; no read grant to tell)`);
    }
  }

  /** `work_finish` with `json`, the result's JSON text (from {@link resultJson}). */
  async _finish(held, json) {
    const outcome = await this._send(held, 'finish',
      'SELECT workfence.work_finish($1, $2, $3, $4::jsonb) AS ok',
      [held.id, this.owner, held.epoch, json]);
    if (outcome === 'ok') {
      held.status = 'finished';
      this.logger.info(`finish id=${held.id} epoch=${held.epoch} ok`);
    } else {
      this._notSettled(held, 'finish', outcome);
    }
  }

  async _fail(held, error) {
    let retryIn = null;
    if (this.retry) {
      try {
        const seconds = this.retry(held.attempt, error);
        if (seconds !== null && seconds !== undefined) retryIn = checkNumber('retry()', seconds, { min: 0, max: 365 * 86400 });
      } catch (err) {
        this.logger.error(`error in the retry policy for id=${held.id}: ${err.message}; using the server's backoff`);
      }
    }
    const text = failureText(error);
    const outcome = await this._send(held, 'fail',
      'SELECT workfence.work_fail($1, $2, $3, $4, make_interval(secs => $5::double precision)) AS ok',
      [held.id, this.owner, held.epoch, text, retryIn]);
    if (outcome === 'ok') {
      held.status = 'failed';
      this.logger.info(`fail id=${held.id} epoch=${held.epoch} error=${text.split('\n', 1)[0]}`);
    } else {
      this._notSettled(held, 'fail', outcome);
    }
  }

  /** `work_release`, first on `client` when given (the heartbeat's, at shutdown). */
  async _release(held, client = null) {
    const outcome = await this._send(held, 'release',
      'SELECT workfence.work_release($1, $2, $3) AS ok', [held.id, this.owner, held.epoch], client);
    if (outcome === 'ok') {
      held.status = 'released';
      this.logger.info(`release id=${held.id} epoch=${held.epoch}`);
    } else {
      this._notSettled(held, 'release', outcome);
    }
  }

  /**
   * The token is not current any more: stop acting for it, log `refused`, abort its handler.
   * No finish, fail or release is sent for it.
   */
  _lose(held, message = 'lease lost') {
    if (held.status === 'lost') return;
    held.status = 'lost';
    this._forget(held);
    this.logger.warn(`refused id=${held.id} (lease lost)`);
    held.controller.abort(new LeaseLost(message));
    this._room?.resolve();
  }

  /** Drops `held` from the tokens acted for (not a newer claim of the same id that replaced it). */
  _forget(held) {
    if (this._held.get(held.id) === held) this._held.delete(held.id);
  }

  /** Every lease/3: renew every live, renewable item in one statement on the heartbeat client. */
  _heartbeat() {
    if (this._renewing || !this._beat || this._state === 'stopped' || this._closing) return;
    const items = [...this._held.values()].filter((h) => h.live && h.renewing && !h.inTransaction);
    if (items.length === 0) return;
    if (this._beatDown) {
      // Being replaced: no renew now (not a refusal). The leases may lapse; fencing decides.
      for (const held of items) this.logger.warn(`renew id=${held.id} error=${describe(this._beatDown)}`);
      return;
    }
    const beat = this._beat;
    const sent = performance.now();
    this._renewing = beat.query(RENEW_SQL,
      [this.owner, this.lease, items.map((h) => h.id), items.map((h) => h.epoch)])
      .then(({ rows }) => {
        rows.forEach(({ renewed }, i) => {
          const held = items[i];
          if (!held.live) return; // settled (or lost) meanwhile: a false here means nothing
          if (renewed) {
            held.leaseEnd = Math.max(held.leaseEnd, sent + this.lease * 1000);
            this.logger.debug(`renew id=${held.id} ok`);
          } else {
            this.logger.warn(`renew id=${held.id} refused`);
            this._lose(held, 'renew refused');
          }
        });
      }, (err) => {
        if (!heals(err)) {
          this._die(err);
          return;
        }
        // A renew that errs is not a refusal: the handlers go on; the next round tries again.
        for (const held of items) this.logger.warn(`renew id=${held.id} error=${describe(err)}`);
        if (replaces(err) && beat === this._beat && !this._beatDown) {
          this._beatDown = err;
          this._restoreBeat();
        }
      })
      .finally(() => { this._renewing = null; });
  }

  /** A `work_lease_lost` notification naming a held token (id AND epoch, never the owner). */
  _notified({ channel, payload }) {
    if (channel !== 'work_lease_lost') return;
    const token = leaseLostToken(payload);
    if (!token) {
      this.logger.error(`error unreadable work_lease_lost payload=${JSON.stringify(payload)}`);
      return;
    }
    const held = this._held.get(token.id);
    if (!held || held.epoch !== token.epoch || !held.live) return;
    this.logger.warn(`lease lost (notified) id=${held.id} epoch=${held.epoch}`);
    this._lose(held, 'lease lost (notified)');
  }

  /** Job.transaction: see its doc comment. */
  async _transaction(held, fn) {
    if (held.transactionUsed) throw new Error('job.transaction() may be called only once per job');
    held.transactionUsed = true;
    if (held.status !== 'running') {
      throw held.controller.signal.reason ?? new LeaseLost('the job is no longer held');
    }
    if (held.inTransaction) throw new Error(ONE_AT_A_TIME);
    held.inTransaction = true;
    try {
      // A renew of this item in flight would wait on work_assert's row lock: let it answer first.
      if (this._renewing) await this._renewing;
      const client = await this._pool.connect();
      // A checked-out client has no listener of the pool's: a connection lost meanwhile would be
      // an unhandled 'error' event. Its query rejects with the error, which is what counts.
      client.on('error', ignore);
      held.txClient = client;
      let broken;
      try {
        await client.query('BEGIN');
        try {
          await client.query('SELECT workfence.work_assert($1, $2, $3)', [held.id, this.owner, held.epoch]);
          const value = await fn(client);
          if (held.status !== 'running') throw held.controller.signal.reason;
          const json = resultJson(value); // not JSON: rolled back, the handler gets the error
          held.status = 'settling';
          const { rows: [{ finished }] } = await client.query(
            'SELECT workfence.work_finish($1, $2, $3, $4::jsonb) AS finished',
            [held.id, this.owner, held.epoch, json],
          );
          if (!finished) throw new LeaseLost('work_finish refused the token', { code: '55000' });
          try {
            await client.query('COMMIT');
          } catch (err) {
            if (!heals(err)) throw err;
            // The connection dropped at the COMMIT: it may have committed. The finish was in
            // it, so the token's fate tells (a committed transaction is never run again).
            broken = err;
            const fate = await this._fateAfterLoss(held, err);
            if (fate === 'lost') {
              this._lose(held);
              throw new LeaseLost('lease lost (the connection dropped at COMMIT, which did not commit)',
                { code: '55000', cause: err });
            }
            if (fate !== 'ours') throw err; // not committed (or unknown): the runner fails the item
          }
          held.status = 'finished';
          this._forget(held);
          this.logger.info(`finish id=${held.id} epoch=${held.epoch} ok`);
          return value;
        } catch (err) {
          if (!broken) await client.query('ROLLBACK').catch((rollbackErr) => { broken = rollbackErr; });
          const mapped = fromPgError(err);
          if (mapped instanceof LeaseLost) {
            this._lose(held, mapped.message);
          } else if (held.status === 'settling') {
            held.status = 'running'; // the finish itself failed: the runner fails the item
          }
          throw mapped;
        }
      } finally {
        held.txClient = null;
        client.removeListener('error', ignore);
        client.release(broken);
      }
    } finally {
      held.inTransaction = false;
    }
  }

  /**
   * After the connection of a COMMIT dropped (logged `resend commit id=<id> epoch=<epoch>
   * error=<text>`): whether that transaction committed, asked on new connections while the lease
   * lasts. First with a renew, which waits for the row lock of a transaction still ending on the
   * old backend (a network cut leaves it running) and is true while the token is current: then
   * it did not commit (`current`); a refused renew is read with {@link Worker#_tokenFate}
   * (`ours`: it committed; `lost`). `unknown` when no answer came within the lease.
   * @returns {Promise<'ours'|'current'|'lost'|'unknown'>}
   */
  async _fateAfterLoss(held, err) {
    this.logger.warn(`resend commit id=${held.id} epoch=${held.epoch} error=${describe(err)}`);
    let delay = 0;
    let last = err;
    for (let asked = 0; ; asked += 1) {
      if (asked > 0 && performance.now() + delay * 1000 >= Math.min(held.leaseEnd, this._graceEnd)) {
        this.logger.warn(`commit id=${held.id} epoch=${held.epoch} outcome unknown error=${describe(last)}`);
        return 'unknown';
      }
      await pauseFor(delay);
      delay = nextResendDelay(delay);
      try {
        if (held.renewing) {
          const sent = performance.now();
          const { rows: [{ ok }] } = await this._settleQuery(
            'SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4)) AS ok',
            [held.id, this.owner, held.epoch, this.lease]);
          if (ok) {
            held.leaseEnd = Math.max(held.leaseEnd, sent + this.lease * 1000);
            return 'current';
          }
        }
        return await this._tokenFate(held);
      } catch (checkErr) {
        if (!heals(checkErr)) throw checkErr;
        last = checkErr;
      }
    }
  }

  /** Job.guard: see its doc comment. */
  async _guard(held, fn) {
    if (held.status !== 'running') {
      throw held.controller.signal.reason ?? new LeaseLost('the job is no longer held');
    }
    if (held.inTransaction) throw new Error(ONE_AT_A_TIME);
    held.inTransaction = true;
    try {
      // A renew of this item in flight would wait on work_assert's row lock: let it answer first.
      if (this._renewing) await this._renewing;
      const client = await this._pool.connect();
      // A checked-out client has no listener of the pool's: a connection lost meanwhile would be
      // an unhandled 'error' event. Its query rejects with the error, which is what counts.
      client.on('error', ignore);
      held.txClient = client;
      let broken;
      let step = 'assert';
      try {
        await client.query('BEGIN');
        try {
          const token = [held.id, this.owner, held.epoch];
          await client.query('SELECT workfence.work_assert($1, $2, $3)', token);
          let renewed = false;
          const sent = performance.now();
          if (held.renewing) {
            ({ rows: [{ renewed }] } = await client.query(
              'SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4)) AS renewed',
              [...token, this.lease]));
          }
          step = 'fn';
          const value = await fn(client);
          step = 'commit';
          await client.query('COMMIT');
          if (renewed) held.leaseEnd = Math.max(held.leaseEnd, sent + this.lease * 1000);
          return value;
        } catch (err) {
          await client.query('ROLLBACK').catch((rollbackErr) => { broken = rollbackErr; });
          const mapped = fromPgError(err);
          // The token's refusal (at work_assert, or at a COMMIT after a rolled-back savepoint),
          // not a LeaseLost that fn threw for reasons of its own.
          if (mapped instanceof LeaseLost && step !== 'fn' && held.status === 'running') {
            this._lose(held, mapped.message);
          }
          throw mapped;
        }
      } finally {
        held.txClient = null;
        client.removeListener('error', ignore);
        client.release(broken);
      }
    } finally {
      held.inTransaction = false;
    }
  }

  /** Job.progress: see its doc comment. */
  async _progress(held, value) {
    const json = jsonText(value); // a BigInt or a cycle: TypeError, nothing sent
    if (held.status !== 'running') return false;
    let ok;
    try {
      ({ rows: [{ ok }] } = await (held.txClient ?? this._pool).query(
        'SELECT workfence.work_progress($1, $2, $3, $4::jsonb) AS ok',
        [held.id, this.owner, held.epoch, json]));
    } catch (err) {
      throw fromPgError(err);
    }
    if (!ok && held.status === 'running') {
      this.logger.warn(`progress id=${held.id} refused`);
      this._lose(held, 'progress refused');
    }
    return ok;
  }

  /** Job.parentResults: see its doc comment. */
  async _parentResults(held) {
    if (held.status !== 'running') return null;
    let results;
    try {
      ({ rows: [{ results }] } = await (held.txClient ?? this._pool).query(
        'SELECT workfence.work_parent_results($1, $2, $3) AS results',
        [held.id, this.owner, held.epoch]));
    } catch (err) {
      throw fromPgError(err);
    }
    if (results === null && held.status === 'running') {
      this.logger.warn(`parent_results id=${held.id} refused`);
      this._lose(held, 'parent_results refused');
    }
    return results;
  }

  /** Buffered items released; running handlers get the grace, then are cancelled and released. */
  async _shutdown() {
    const waiting = this._buffer.filter((h) => h.status === 'buffered');
    this._buffer = [];
    for (const held of waiting) held.status = 'releasing';
    const via = this._beatDown ? this._pool : this._beat;
    for (const held of waiting) await this._settleAtShutdown(held, via);

    const running = [...this._running];
    if (running.length > 0) {
      let timer;
      await Promise.race([
        Promise.allSettled(running.map((h) => h.done)),
        new Promise((resolve) => { timer = setTimeout(resolve, this.shutdownGrace * 1000); }),
      ]);
      clearTimeout(timer);
    }
    const waits = [];
    for (const held of this._running) {
      if (held.status === 'running') {
        held.controller.abort(new Cancelled('the worker is shutting down'));
        if (!held.inTransaction) {
          // The handler may ignore its signal: the item is released now, its outcome ignored.
          held.status = 'releasing';
          waits.push(this._settleAtShutdown(held, this._pool));
          continue;
        }
      }
      waits.push(held.done); // in its transaction, or settling: let that end
    }
    await Promise.allSettled(waits);
  }

  async _settleAtShutdown(held, client) {
    try {
      await this._release(held, client);
    } catch (err) {
      held.status = 'abandoned';
      this.logger.error(`release id=${held.id} epoch=${held.epoch} error=${describe(err)}`);
    } finally {
      this._forget(held);
    }
  }

  async _close() {
    const ends = [this._claimer?.end(), this._beat?.end(), this._pool?.end()].filter(Boolean);
    const results = await Promise.allSettled(ends);
    for (const r of results) {
      if (r.status === 'rejected') this.logger.error(`error closing a connection: ${r.reason.message}`);
    }
  }
}

/** An error's message for a log line (its name when the message is empty). */
function errorText(error) {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}

/** Two guards, or a guard and the transaction, of one job at once. */
const ONE_AT_A_TIME = 'one job.guard() or job.transaction() of a job at a time: a second one '
  + 'would wait on the first one\'s row lock';

/**
 * The most bytes (UTF-8) of the error text {@link failureText} makes for `work_fail`: the server's
 * own bound (it stores at most 2048 bytes, cutting a longer text mid-line with `[truncated: N
 * bytes in all]`: docs/reference.md, `work_fail`), so that the cut is made here, between lines.
 */
export const ERROR_TEXT_MAX_BYTES = 2048;

/** The most bytes of the first line (`<type>: <message>`), so that frames have room. */
export const ERROR_HEAD_MAX_BYTES = 1024;

/** How many causes (`err.cause`, and theirs) {@link failureText} names. */
const CAUSES_NAMED = 3;

/**
 * The type name of a thrown error: its `name` unless that is the generic `Error` (or
 * node-postgres's `error`), then its class's name (`class InvoiceMissing extends Error {}` names
 * `InvoiceMissing`).
 */
function typeName(error) {
  const name = typeof error.name === 'string' ? error.name : '';
  if (name && name !== 'Error' && name !== 'error') return name;
  const cls = error.constructor?.name;
  return cls && cls !== 'Object' ? cls : (name || 'Error');
}

/** `<type>: <message>`, with ` (<SQLSTATE>)` for a server error. */
function headLine(error) {
  if (!(error instanceof Error)) {
    if (error !== null && typeof error === 'object') {
      try {
        return JSON.stringify(error) ?? String(error);
      } catch {
        return String(error);
      }
    }
    return String(error);
  }
  const code = sqlstateOf(error);
  const message = error.message ? `: ${error.message}` : '';
  return `${typeName(error)}${message}${code ? ` (${code})` : ''}`;
}

/**
 * The text `work_fail` records for what a handler threw: the error's type and message on the
 * first line (`TypeError: x is not a function`, `DatabaseError: ... (23505)`), then its stack
 * frames as V8 prints them (`    at render (file:///app/jobs.js:12:5)`), then one line per cause
 * (`caused by: <type>: <message>`, at most 3). A value that is not an Error is recorded as its
 * JSON or its `String()`. Bounded to {@link ERROR_TEXT_MAX_BYTES} (2048, the server's bound) of
 * UTF-8: the first line is cut at a character boundary to {@link ERROR_HEAD_MAX_BYTES} (1024,
 * ended with `...`), then whole lines are kept while they fit (V8 prints the newest frame
 * first, so the frames nearest the error stay), then `[cut: N more lines]`.
 * @param {unknown} error
 * @returns {string}
 */
export function failureText(error) {
  const head = headLine(error);
  const rest = [];
  if (error instanceof Error) {
    const stack = typeof error.stack === 'string' ? error.stack : '';
    for (const line of stack.split('\n')) if (/^\s+at /.test(line)) rest.push(line);
    let cause = error.cause;
    for (let n = 0; n < CAUSES_NAMED && cause !== undefined && cause !== null; n += 1) {
      rest.push(`caused by: ${headLine(cause).split('\n', 1)[0]}`);
      cause = cause instanceof Error ? cause.cause : undefined;
    }
  }
  const max = ERROR_TEXT_MAX_BYTES;
  const bytes = (text) => Buffer.byteLength(text, 'utf8');
  let text = head;
  if (bytes(text) > ERROR_HEAD_MAX_BYTES) {
    // Cut at a character boundary: drop the bytes past the bound, then a partial character.
    const cut = Buffer.from(text, 'utf8').subarray(0, ERROR_HEAD_MAX_BYTES - 3).toString('utf8')
      .replace(/\uFFFD+$/u, '');
    text = `${cut}...`;
  }
  for (let i = 0; i < rest.length; i += 1) {
    const left = rest.length - i;
    const note = `\n[cut: ${left} more lines]`;
    const room = i === rest.length - 1 ? max : max - bytes(note);
    if (bytes(text) + 1 + bytes(rest[i]) > room) return `${text}${note}`;
    text += `\n${rest[i]}`;
  }
  return text;
}
