// The enqueue helper and the operator's calls of clients/README.md, one SQL function each, on a
// connection the caller passes, so that they can be part of the caller's own transaction.

import { InvalidArgument, fromPgError } from './errors.js';
import { currentTraceparent } from './tracing.js';

/**
 * Runs one statement on `client`, turning a pg_workfence SQLSTATE into its named error.
 * @param {{query: Function}} client
 * @param {string} text
 * @param {unknown[]} values
 */
export async function query(client, text, values) {
  try {
    return await client.query(text, values);
  } catch (err) {
    throw fromPgError(err);
  }
}

/** A JSON value as the text bound to a `jsonb` parameter (`undefined` becomes SQL NULL). */
export function jsonText(value) {
  if (value === undefined) return null;
  return JSON.stringify(value);
}

/**
 * Whether the database behind a client takes `trace` in `work_enqueue`, by client (a `pg.Client`,
 * `pg.Pool` or pool client), asked at its first enqueue in a span and forgotten with the client.
 * @type {WeakMap<object, {takes: boolean, at: number}>}
 */
const takesTrace = new WeakMap();

/** How long (ms) a database without a `trace` argument is believed before it is asked again. */
const TAKES_TRACE_RECHECK_MS = 60_000;

/** The question {@link takesTrace} caches: does `workfence.work_enqueue` have an argument `trace`? */
const TAKES_TRACE_SQL = `SELECT EXISTS (
  SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname = 'workfence' AND p.proname = 'work_enqueue'
     AND 'trace' = ANY (p.proargnames)) AS takes`;

/**
 * The trace an enqueue given none sends: the active span's `traceparent`, when there is one and
 * the client's database takes it (asked once per client, so that an enqueue in a span still works
 * against a server without the argument); else null.
 * @param {{query: Function}} client
 * @returns {Promise<string | null>}
 */
async function activeTrace(client) {
  const traceparent = await currentTraceparent();
  if (traceparent === null) return null;
  const known = takesTrace.get(client);
  // A "no" is asked again after TAKES_TRACE_RECHECK_MS: an ALTER EXTENSION ... UPDATE may have
  // added the argument while a pool lives on.
  let takes = known && (known.takes || Date.now() - known.at <= TAKES_TRACE_RECHECK_MS)
    ? known.takes
    : undefined;
  if (takes === undefined) {
    const { rows: [row] } = await query(client, TAKES_TRACE_SQL, []);
    takes = row.takes === true;
    if (client && typeof client === 'object') takesTrace.set(client, { takes, at: Date.now() });
  }
  return takes ? traceparent : null;
}

/**
 * Adds an item to `queue` with `workfence.work_enqueue` (docs/contract.md). Repeating an enqueue
 * with the same key returns the existing item with `inserted: false`, changed as `onConflict`
 * says.
 *
 * @param {{query: Function}} client a `pg.Client`, `pg.Pool` or pool client
 * @param {string} queue the queue's name (at most 128 bytes)
 * @param {unknown} [payload] any JSON value (default `{}`)
 * @param {object} [options]
 * @param {string} [options.key] unique within the queue (default: a generated UUIDv7)
 * @param {Date|string} [options.runAt] not claimable before this time (default: now, server clock)
 * @param {number} [options.priority] lower is claimed first (default 0)
 * @param {number} [options.maxAttempts] 1..1000 (default 25)
 * @param {number} [options.maxRun] seconds: a limit on the run time of each claim (default none)
 * @param {string} [options.groupKey] the item's serial group (from 0.10.0): at most one item of a
 *   (queue, groupKey) is claimed at a time, in claim order (default none). Sent only when set, so
 *   that an enqueue without it also works against a 0.9.0 database
 * @param {'keep'|'replace'|'preserve_run_at'} [options.onConflict] what an existing item of the
 *   key becomes (from 0.12.0; default 'keep'): 'keep' leaves it unchanged; 'replace' (debounce)
 *   gives a pending item the new payload and runAt (none: now), 'preserve_run_at' (throttle) the
 *   new payload and keeps its run_at; with either, a done, failed or cancelled item runs again
 *   (pending with the new payload, runAt or now, attempts counted afresh, its errors kept), and
 *   a claimed one takes the new payload at once (its holder keeps its token and old payload) and
 *   runs exactly once more after the current run. Sent (as `on_conflict`) only when set, so that
 *   an enqueue without it also works against a 0.11.0 database
 * @param {string} [options.trace] a W3C `traceparent` (from 0.12.0:
 *   `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) stored with the item and handed to its
 *   runs as `job.trace`, sent unchanged (a malformed one: 22023). Left out: the active
 *   OpenTelemetry span's context, when `@opentelemetry/api` is installed, a valid span context is
 *   active, and the database's `work_enqueue` takes a trace (asked once per client); else none.
 *   With onConflict 'replace' or 'preserve_run_at' the item takes this call's trace; 'keep'
 *   leaves its own
 * @param {Array<string|bigint|number>} [options.after] the ids of the items this one waits for
 *   (from 0.12.0, workflows: its parents, in any queue of the database, at most 1000), as
 *   `enqueue` returned them: the item is `waiting` until every parent is done, then pending (due
 *   at its runAt), and its handler reads their results with {@link Job#parentResults}. An
 *   existing key's `after` is ignored (edges are made only at the insert). Sent only when it
 *   names an id, so that an enqueue without it also works against a database before workflows
 * @param {'cancel'|'run'} [options.onParentFailure] what a parent that ends failed (for good)
 *   or cancelled does to the waiting item (from 0.12.0; default 'cancel'): 'cancel' cancels it
 *   and its own waiting descendants that say 'cancel'; 'run' runs it once every parent has
 *   ended, and `parentResults()` shows the failure as `{state: 'failed', error}`. Sent (as
 *   `on_parent_failure`) only when set
 * @returns {Promise<{id: string, key: string, inserted: boolean}>} `id` is the bigint as a
 *   decimal string; `inserted` true only when a new item was made (false whenever the key
 *   existed, kept or changed)
 * @throws {NullArgument} 22004 (also a null in `after`), {@link InvalidArgument} 22023 (also an
 *   unknown onConflict, a malformed trace, over 1000 parents, an onParentFailure not 'cancel' or
 *   'run', an `after` that is not an array), {@link UnknownParent} 23503 (an `after` id of no
 *   item, or of one in a queue the role may not read), {@link NotPermitted} 42501,
 *   {@link SerializationFailure} 40001 (raced a purge: retry)
 */
export async function enqueue(client, queue, payload = {}, options = {}) {
  const args = ['queue => $1', 'payload => $2::jsonb'];
  const values = [queue, jsonText(payload)];
  const add = (name, value, cast) => {
    if (value === undefined || value === null) return;
    values.push(value instanceof Date ? value.toISOString() : value);
    args.push(`${name} => ${cast.replace('$', `$${values.length}`)}`);
  };
  add('key', options.key, '$::text');
  add('run_at', options.runAt, '$::timestamptz');
  add('priority', options.priority, '$::integer');
  add('max_attempts', options.maxAttempts, '$::integer');
  add('max_run', options.maxRun, 'make_interval(secs => $::double precision)');
  add('group_key', options.groupKey, '$::text');
  add('on_conflict', options.onConflict, '$::text');
  const parents = parentIds(options.after);
  const trace = options.trace ?? await activeTrace(client);
  add('trace', trace, '$::text');
  if (parents.length > 0) add('after', parents, '$::bigint[]');
  add('on_parent_failure', options.onParentFailure, '$::text');
  const { rows: [row] } = await query(client,
    `SELECT id::text AS id, key, inserted FROM workfence.work_enqueue(${args.join(', ')})`, values);
  return row;
}

/**
 * Adds many items to `queue` in one statement with `workfence.work_enqueue_many` (from 0.12.0,
 * docs/contract.md): one row per item, in the items' order. Each item is judged as
 * `enqueue(client, queue, item.payload, { key, runAt, groupKey, ...options })` would judge it,
 * one after the other: an existing key, or one an earlier item of the same call has, returns
 * that item with `inserted: false` (unchanged under 'keep', changed as `onConflict` says). The
 * items commit (or roll back) together, with the caller's transaction. At most 10000 items per
 * call: enqueue more in several calls (in one transaction if they must commit together). There is
 * no `maxRun`, `after` or `trace` here (`work_enqueue_many` has none): the items carry no trace
 * context; enqueue those one by one with {@link enqueue}. An empty array enqueues nothing.
 *
 * @param {{query: Function}} client a `pg.Client`, `pg.Pool` or pool client
 * @param {string} queue the queue's name (at most 128 bytes)
 * @param {Array<{payload?: unknown, key?: string|null, runAt?: Date|string|null,
 *   groupKey?: string|null}>} items what differs from item to item: `payload` any JSON value
 *   (default `{}`), `key` unique within the queue (default: a generated UUIDv7), `runAt` not
 *   claimable before this time (default: now, server clock), `groupKey` the item's serial group
 *   (default none)
 * @param {object} [options] what every item of the call shares
 * @param {number} [options.priority] lower is claimed first (default 0)
 * @param {number} [options.maxAttempts] 1..1000 (default 25)
 * @param {'keep'|'replace'|'preserve_run_at'} [options.onConflict] what an existing item of a
 *   key becomes, as `enqueue`'s (default 'keep'). An option left out (or null) is not sent: the
 *   server's default applies
 * @returns {Promise<Array<{id: string, key: string, inserted: boolean}>>} one per item, in the
 *   items' order: `id` the bigint as a decimal string, `key` the given or generated key,
 *   `inserted` true only when this call made the item
 * @throws {InvalidArgument} 22023 (over 10000 items, a bad queue, key, runAt or groupKey,
 *   maxAttempts out of 1..1000, an unknown onConflict; raised before anything is sent: `items`
 *   not an array, or an item that is not an object), {@link NullArgument} 22004 (a null queue),
 *   {@link NotPermitted} 42501 (no `enqueue` grant covering the queue, or for an onConflict
 *   running a cancelled item again no `operate` grant), {@link SerializationFailure} 40001
 *   (raced a purge: retry); 25000 (an onConflict changing a pending item of a group under
 *   REPEATABLE READ or SERIALIZABLE) and 42883 (a server before 0.12.0) as {@link WorkfenceError}
 *   or the driver's error
 */
export async function enqueueMany(client, queue, items, options = {}) {
  if (!Array.isArray(items)) {
    throw new InvalidArgument(`items must be an array of items, got ${String(items)}`,
      { code: '22023' });
  }
  for (const each of items) {
    if (each === null || typeof each !== 'object' || Array.isArray(each)) {
      throw new InvalidArgument(
        `items must hold objects ({ payload, key, runAt, groupKey }), got ${String(each)}`,
        { code: '22023' });
    }
  }
  // One array per column, one element per item, so that the arrays are always as long as each
  // other. Payloads go as JSON text, each one element of the jsonb[]. A column no item sets, and
  // an option left out, is not sent: the server's default applies (as in `enqueue`).
  const args = ['queue => $1::text', 'payloads => $2::jsonb[]'];
  const values = [
    queue, items.map((each) => JSON.stringify(each.payload === undefined ? {} : each.payload)),
  ];
  const add = (name, value, cast) => {
    if (value === undefined || value === null) return;
    values.push(value);
    args.push(`${name} => $${values.length}::${cast}`);
  };
  const column = (pick) => {
    const picked = items.map((each) => {
      const value = pick(each);
      if (value === undefined || value === null) return null;
      return value instanceof Date ? value.toISOString() : value;
    });
    return picked.some((v) => v !== null) ? picked : null;
  };
  add('keys', column((each) => each.key), 'text[]');
  add('run_at', column((each) => each.runAt), 'timestamptz[]');
  add('priority', options.priority, 'integer');
  add('max_attempts', options.maxAttempts, 'integer');
  add('group_keys', column((each) => each.groupKey), 'text[]');
  add('on_conflict', options.onConflict, 'text');
  const { rows } = await query(client,
    `SELECT id::text AS id, key, inserted FROM workfence.work_enqueue_many(${args.join(', ')})`,
    values);
  return rows;
}

/**
 * `after` as the array sent for `work_enqueue`'s `bigint[]`: each id as its decimal string (a
 * bigint or a number as well as the string `enqueue` returns), null kept for the server's 22004.
 * @param {unknown} after
 * @returns {Array<string|null>} empty when `after` is undefined or null
 * @throws {InvalidArgument} 22023 when `after` is not an array
 */
function parentIds(after) {
  if (after === undefined || after === null) return [];
  if (!Array.isArray(after)) {
    throw new InvalidArgument(`after must be an array of item ids, got ${String(after)}`,
      { code: '22023' });
  }
  return after.map((id) => (id === null || id === undefined ? null : String(id)));
}

/**
 * `workfence.work_retry`: puts a `failed` or `cancelled` item back to `pending`.
 * @param {{query: Function}} client
 * @param {string} queue
 * @param {string} key
 * @param {Date|string} [runAt] due time (default: now)
 * @returns {Promise<boolean>} true if the item changed
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function retry(client, queue, key, runAt = null) {
  return bool(client, 'SELECT workfence.work_retry($1, $2, $3::timestamptz) AS ok',
    [queue, key, runAt instanceof Date ? runAt.toISOString() : runAt]);
}

/**
 * `workfence.work_reschedule`: moves a `pending` item's `run_at`.
 * @param {{query: Function}} client
 * @param {string} queue
 * @param {string} key
 * @param {Date|string} runAt the new due time
 * @returns {Promise<boolean>} true if the item changed
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function reschedule(client, queue, key, runAt) {
  return bool(client, 'SELECT workfence.work_reschedule($1, $2, $3::timestamptz) AS ok',
    [queue, key, runAt instanceof Date ? runAt.toISOString() : runAt]);
}

/**
 * `workfence.work_cancel`: cancels a `pending` or `claimed` item (from 0.12.0 also a `waiting`
 * one, and its waiting children with it, transitively, but for those enqueued with
 * `onParentFailure: 'run'`, which count it as ended); its holder's token is refused.
 * @param {{query: Function}} client
 * @param {string} queue
 * @param {string} key
 * @returns {Promise<boolean>} true if the item changed
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function cancel(client, queue, key) {
  return bool(client, 'SELECT workfence.work_cancel($1, $2) AS ok', [queue, key]);
}

/**
 * `workfence.work_pause`: the queue hands nothing out until resumed.
 * @param {{query: Function}} client
 * @param {string} queue
 * @returns {Promise<boolean>} true if it was not paused
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function pause(client, queue) {
  return bool(client, 'SELECT workfence.work_pause($1) AS ok', [queue]);
}

/**
 * `workfence.work_resume`: ends a pause and wakes the queue's long polls.
 * @param {{query: Function}} client
 * @param {string} queue
 * @returns {Promise<boolean>} true if it was paused
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function resume(client, queue) {
  return bool(client, 'SELECT workfence.work_resume($1) AS ok', [queue]);
}

/**
 * `workfence.work_limit` (from 0.10.0): sets the queue's limits, replacing them all: at most
 * `concurrency` items claimed at once across all workers, at most `rate` items handed out per
 * `per` seconds (a sliding window), and (from 0.12.0) at most `perGroup` items of one group key
 * claimed at once. A limit left out (or null) is lifted (`perGroup`: 1, serial groups);
 * `limit(client, queue)` lifts them all. Claims that would exceed a limit hand out fewer items or
 * none; they never block.
 * @param {{query: Function}} client
 * @param {string} queue
 * @param {object} [options]
 * @param {number|null} [options.concurrency] 1..10000 (default: no limit)
 * @param {number|null} [options.rate] 1..10000 (default: no limit)
 * @param {number} [options.per] seconds, more than 0 and at most a day (default 1)
 * @param {number|null} [options.perGroup] 1..10000 (default: 1, serial groups). Sent (as
 *   `per_group`) only when set, so that a call without it also works against a 0.11.0 database
 * @returns {Promise<void>}
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function limit(client, queue, options = {}) {
  const values = [queue, options.concurrency ?? null, options.rate ?? null];
  let named = '';
  if (options.per !== undefined && options.per !== null) {
    values.push(options.per);
    named += `, per => make_interval(secs => $${values.length}::double precision)`;
  }
  if (options.perGroup !== undefined && options.perGroup !== null) {
    values.push(options.perGroup);
    named += `, per_group => $${values.length}::integer`;
  }
  await query(client,
    `SELECT workfence.work_limit($1::text, concurrency => $2::integer, rate => $3::integer${named})`,
    values);
}

// `progress` (from 0.12.0) read from the row as JSON, so that a server without the column
// answers null instead of an error.
const ITEM_COLUMNS = `w.id::text AS id, w.queue, w.key, w.state, w.priority, w.run_at, w.attempts,
  w.max_attempts, w.owner, w.epoch::text AS epoch, w.claimed_at, w.lease_until, w.errors, w.result,
  w.created_at, w.finished_at, w.payload, extract(epoch FROM w.max_run)::double precision AS max_run,
  pg_catalog.to_jsonb(w) -> 'progress' AS progress`;

/**
 * `workfence.work_item`: the item as an operator sees it, by (queue, key) or by id.
 * @param {{query: Function}} client
 * @param {string|bigint|number} queueOrId a queue name, or an item id (bigint, or its decimal
 *   string when `key` is left out)
 * @param {string} [key] the item's key (with a queue name)
 * @returns {Promise<object|null>} the row (ids and epochs as decimal strings, `max_run` in seconds,
 *   times as `Date`s, `progress` the last checkpoint stored with `job.progress()`, null before
 *   one or on a server before 0.12.0) or null
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function item(client, queueOrId, key) {
  const { rows } = key === undefined
    ? await query(client, `SELECT ${ITEM_COLUMNS} FROM workfence.work_item($1::bigint) AS w`,
      [String(queueOrId)])
    : await query(client, `SELECT ${ITEM_COLUMNS} FROM workfence.work_item($1::text, $2::text) AS w`,
      [queueOrId, key]);
  return rows[0] ?? null;
}

/**
 * `workfence.work_workflow` (from 0.12.0): the workflow around the item `id`, for operators and
 * dashboards: the item itself (`depth` 0), its ancestors (-1 its parents, -2 theirs, ...) and its
 * descendants (1, 2, ...), each once at its nearest depth, nearest first, at most 1000 rows.
 * @param {{query: Function}} client
 * @param {string|bigint|number} id the item's id (its decimal string, as `enqueue` returns it)
 * @returns {Promise<Array<{id: string, queue: string, key: string, state: string, depth: number,
 *   parents: string[]}>>} one row per item (ids as decimal strings); `parents` the ids of the
 *   row's own parents (every edge into it), so the rows draw the graph; `state` the item's
 *   (`waiting` included). Empty for an unknown id (or, with queue grants enforced, an item in a
 *   queue the role may not read; rows of other such queues are left out)
 * @throws {NullArgument} 22004, {@link NotPermitted} 42501; 42883 from a server before 0.12.0
 */
export async function workflow(client, id) {
  const { rows } = await query(client,
    `SELECT id::text AS id, queue, key, state, depth, parents::text[] AS parents
       FROM workfence.work_workflow($1::bigint)`, [String(id)]);
  return rows;
}

/** The states in which an item's run is over: `awaitResult` returns at once for them. */
const FINAL_STATES = new Set(['done', 'failed', 'cancelled']);

/** The longest `wait` one `work_await` call takes (1 hour; the server caps it lower). */
const AWAIT_CALL_MAX = 3600;

/**
 * Waits for the item (queue, key) to be done, failed or cancelled, with
 * `workfence.work_await(queue, key, wait)` (from 0.12.0): the server answers at once for a
 * finished item, else sleeps until the item's settle commits (woken at that commit) or the call's
 * wait ends, which the server caps at `workfence.long_poll_max` (3 s by default). This calls it
 * again until the item is over or `timeout` has passed, each call waiting at most what is left.
 *
 * Call it on a connection in autocommit or a READ COMMITTED transaction (under REPEATABLE READ or
 * SERIALIZABLE the server refuses a wait with 25000). It occupies the connection while it waits:
 * pass a `pg.Pool`, or a client of its own, not a connection other work is waiting for.
 *
 * @param {{query: Function}} client
 * @param {string} queue
 * @param {string} key
 * @param {object} [options]
 * @param {number} [options.timeout] seconds to wait at most, 0 (one look, no wait) to
 *   `Infinity` (default 30)
 * @returns {Promise<{state: string, result: unknown, lastError: string|null}|null>} the item's
 *   state (`done`, `failed`, `cancelled`), its `result` (what `work_finish` stored; null unless
 *   done) and `lastError` (the last failure's text, if any); after `timeout`, the item's state
 *   then (`pending`, `claimed` or `waiting`, result null), so the caller tells a timeout by the
 *   state; null when there is no such item (never enqueued, purged, or where queue grants are
 *   enforced, in a queue the role may not read)
 * @throws {InvalidArgument} 22023 (a bad queue or key; `timeout` negative or not a number, raised
 *   before anything is sent), {@link NullArgument} 22004, {@link NotPermitted} 42501 (no `read`
 *   grant), 25000 from the server in a REPEATABLE READ or SERIALIZABLE transaction
 */
export async function awaitResult(client, queue, key, options = {}) {
  const timeout = options.timeout ?? 30;
  if (typeof timeout !== 'number' || Number.isNaN(timeout) || timeout < 0) {
    throw new InvalidArgument(`timeout must be a number of seconds, 0 or more (Infinity: no limit), got ${String(timeout)}`,
      { code: '22023' });
  }
  const deadline = performance.now() + timeout * 1000;
  for (;;) {
    const left = Math.max(0, (deadline - performance.now()) / 1000);
    const wait = Math.min(left, AWAIT_CALL_MAX);
    const { rows } = await query(client,
      `SELECT state::text AS state, result, last_error
         FROM workfence.work_await($1::text, $2::text, make_interval(secs => $3::double precision))`,
      [queue, key, wait]);
    if (rows.length === 0) return null;
    const [{ state, result, last_error: lastError }] = rows;
    if (FINAL_STATES.has(state) || performance.now() >= deadline) {
      return { state, result: result ?? null, lastError: lastError ?? null };
    }
  }
}

/**
 * `workfence.work_schedule` (from 0.12.0): creates or replaces the schedule `name`. Each slot of
 * `cron`, read in `options.timezone`, enqueues one item in `queue` with key
 * `<name>@<slot as UTC ISO 8601>` (`nightly@2026-12-07T01:00:00Z`), `run_at` the slot, and the
 * payload, priority, maxAttempts and groupKey given here (as `enqueue`'s). A worker of the queue
 * needs nothing more: its long poll fires the queue's due slots itself.
 *
 * @param {{query: Function}} client a `pg.Client`, `pg.Pool` or pool client
 * @param {string} name the schedule's name, 1..128 bytes
 * @param {string} cron five fields (minute, hour, day of month, month, day of week), six with
 *   seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`
 * @param {string} queue the queue its items go to
 * @param {unknown} [payload] any JSON value, every item's payload (default `{}`)
 * @param {object} [options]
 * @param {string} [options.timezone] the IANA time zone `cron` is read in (default 'UTC')
 * @param {'latest'|'all'|'none'} [options.catchUp] what a fire does with slots that passed
 *   unfired: the most recent one, each one, or only one at most 60 s old (default 'latest')
 * @param {number} [options.priority] the items' priority (default 0)
 * @param {number} [options.maxAttempts] the items' max_attempts, 1..1000 (default 25)
 * @param {string} [options.groupKey] the items' serial group (default none)
 * @returns {Promise<boolean>} true if the schedule is new or one of its settings changed
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023 (a bad name or queue, a cron
 *   expression that does not parse or names no time, an unknown time zone, catchUp not 'latest',
 *   'all' or 'none', maxAttempts out of range, a bad groupKey), {@link ReadOnly} 25006,
 *   {@link NotPermitted} 42501 (no `operate` grant)
 */
export async function schedule(client, name, cron, queue, payload = {}, options = {}) {
  const args = ['name => $1::text', 'cron => $2::text', 'queue => $3::text', 'payload => $4::jsonb'];
  const values = [name, cron, queue, jsonText(payload)];
  const add = (argument, value, cast) => {
    if (value === undefined || value === null) return;
    values.push(value);
    args.push(`${argument} => $${values.length}::${cast}`);
  };
  add('timezone', options.timezone, 'text');
  add('catch_up', options.catchUp, 'text');
  add('priority', options.priority, 'integer');
  add('max_attempts', options.maxAttempts, 'integer');
  add('group_key', options.groupKey, 'text');
  return bool(client, `SELECT workfence.work_schedule(${args.join(', ')}) AS ok`, values);
}

/**
 * `workfence.work_unschedule` (from 0.12.0): removes the schedule; the items it fired stay.
 * @param {{query: Function}} client
 * @param {string} name
 * @returns {Promise<boolean>} true if it existed
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link NotPermitted} 42501
 */
export async function unschedule(client, name) {
  return bool(client, 'SELECT workfence.work_unschedule($1::text) AS ok', [name]);
}

/**
 * `workfence.work_pause_schedule` (from 0.12.0): the schedule fires nothing from the commit on,
 * until resumed. Its queue and items are untouched (`pause` stops the queue).
 * @param {{query: Function}} client
 * @param {string} name
 * @returns {Promise<boolean>} true if it was not paused
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link UndefinedObject} 42704 (no
 *   schedule of that name), {@link NotPermitted} 42501
 */
export async function pauseSchedule(client, name) {
  return bool(client, 'SELECT workfence.work_pause_schedule($1::text) AS ok', [name]);
}

/**
 * `workfence.work_resume_schedule` (from 0.12.0): the schedule fires again from the commit on;
 * the slots missed while it was paused are fired as its `catch_up` says.
 * @param {{query: Function}} client
 * @param {string} name
 * @returns {Promise<boolean>} true if it was paused
 * @throws {NullArgument} 22004, {@link InvalidArgument} 22023, {@link UndefinedObject} 42704 (no
 *   schedule of that name), {@link NotPermitted} 42501
 */
export async function resumeSchedule(client, name) {
  return bool(client, 'SELECT workfence.work_resume_schedule($1::text) AS ok', [name]);
}

/**
 * `workfence.work_fire_schedules` (from 0.12.0): fires every due slot of every schedule that is
 * not paused, now, in the caller's transaction. Any number of sessions may call it at once: a
 * schedule another transaction is firing is passed over, and no slot is fired twice. Not needed
 * where workers long-poll the schedules' queues, or the maintenance worker runs.
 * @param {{query: Function}} client
 * @returns {Promise<number>} how many items it enqueued
 * @throws {ReadOnly} 25006 (a hot standby, or a read-only transaction)
 */
export async function fireSchedules(client) {
  const { rows: [{ fired }] } = await query(client,
    'SELECT workfence.work_fire_schedules() AS fired', []);
  return fired;
}

// next_slot is NULL for `infinity` (the expression names no more slots), which no Date holds.
const SCHEDULE_COLUMNS = `name, cron, timezone, queue, catch_up, paused,
  CASE WHEN pg_catalog.isfinite(next_slot) THEN next_slot END AS next_slot, last_slot,
  last_item_id::text AS last_item_id, last_fired_at, payload, priority, max_attempts, group_key`;

/**
 * The view `workfence.work_schedules` (from 0.12.0): every schedule, by name (where queue grants
 * are enforced, those of queues the role may read).
 * @param {{query: Function}} client
 * @returns {Promise<object[]>} rows with the view's columns: `next_slot`, `last_slot` and
 *   `last_fired_at` as `Date`s or null (`next_slot` null when the expression names no more slots),
 *   `last_item_id` as a decimal string or null
 * @throws {NotPermitted} 42501 (no privilege on the view)
 */
export async function schedules(client) {
  const { rows } = await query(client,
    `SELECT ${SCHEDULE_COLUMNS} FROM workfence.work_schedules ORDER BY name`, []);
  return rows;
}

async function bool(client, text, values) {
  const { rows: [{ ok }] } = await query(client, text, values);
  return ok;
}
