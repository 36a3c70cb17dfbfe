// Type declarations of the `workfence` package (index.js), kept by hand in step with lib/*.js;
// test/types/usage.ts is compiled against them by `npm run typecheck` (test/types.test.js).
//
// bigint columns (ids, epochs) are decimal strings, as node-postgres returns them: exact at any
// size. Durations are numbers of seconds.

/** Anything that runs a parameterised statement: a `pg.Client`, `pg.Pool` or pool client. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
}

/** The logger the runner writes to: `console` (the default) and pino loggers fit. */
export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A JSON value (what a payload or a result may be). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ---------------------------------------------------------------------------------------------
// Errors (clients/README.md, "Errors")

/**
 * Base class of every error raised for a pg_workfence SQLSTATE, keeping the server's message,
 * detail and hint; `cause` is the original node-postgres error when there is one.
 */
export class WorkfenceError extends Error {
  constructor(message: string, fields?: { code?: string; detail?: string; hint?: string; cause?: unknown });
  /** The SQLSTATE, e.g. '55000'. */
  readonly code: string;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  /** The SQLSTATE of the class. */
  static readonly sqlstate: string | undefined;
}
/** 22004: a NULL where a value is required. */
export class NullArgument extends WorkfenceError {}
/** 22023: a bad queue, key, owner, lease, interval or `max_items`; a schedule's bad cron, time zone or catchUp. */
export class InvalidArgument extends WorkfenceError {}
/** 25006: a write on a hot standby. */
export class ReadOnly extends WorkfenceError {}
/** 25P01: `work_assert` outside a transaction block. */
export class NoTransaction extends WorkfenceError {}
/** 40001: an enqueue that raced a purge three times: retry. */
export class SerializationFailure extends WorkfenceError {}
/** 42501: a queue grant is missing. */
export class NotPermitted extends WorkfenceError {}
/** 42704: a grant naming an unknown role or capability; pause/resume of an unknown schedule. */
export class UndefinedObject extends WorkfenceError {}
/**
 * 23503 (from 0.12.0): an enqueue's `after` names an item that does not exist, or one in a queue
 * the role may not read. Nothing was enqueued.
 */
export class UnknownParent extends WorkfenceError {}
/**
 * 55000: the token is not current (`work_assert`, also at `COMMIT`); also the `reason` of a job's
 * signal aborted for a lost lease.
 */
export class LeaseLost extends WorkfenceError {}
/**
 * 57014: a statement was cancelled; also the `reason` of a job's signal aborted at the end of
 * the shutdown grace.
 */
export class Cancelled extends WorkfenceError {}

/** The error classes by SQLSTATE. */
export const ERRORS_BY_SQLSTATE: Readonly<Record<string, typeof WorkfenceError>>;

/**
 * The named error for a node-postgres error (by `err.code`), message, detail and hint kept;
 * any other error is returned unchanged.
 */
export function fromPgError(err: unknown): unknown;

// ---------------------------------------------------------------------------------------------
// Connection strings and notifications

/**
 * The `pg.Client` configuration for a libpq connection string (a URI, or keyword/value pairs:
 * host hostaddr port user password dbname application_name options connect_timeout sslmode).
 * @throws TypeError on a malformed string or an unsupported keyword
 */
export function connectionConfig(dsn: string): Record<string, unknown>;

/** The (id, epoch) of a `work_lease_lost` payload, exactly, as decimal strings; null if unreadable. */
export function leaseLostToken(payload: string): { id: string; epoch: string } | null;

// ---------------------------------------------------------------------------------------------
// Enqueue and the operator's calls, on a connection the caller passes

export interface EnqueueOptions {
  /** Unique within the queue (at most 512 bytes); default a generated UUIDv7. */
  key?: string;
  /** Not claimable before this time; default now (server clock). */
  runAt?: Date | string;
  /** Lower is claimed first; default 0. */
  priority?: number;
  /** 1..1000; default 25. */
  maxAttempts?: number;
  /** Seconds: no lease of a claim reaches past claimed_at + maxRun; default no limit. */
  maxRun?: number;
  /**
   * The item's serial group (from 0.10.0): at most one item of a (queue, groupKey) is claimed at
   * a time, in claim order. Non-empty, at most 128 bytes, no control characters; default none
   * (then the enqueue also works against a 0.9.0 database).
   */
  groupKey?: string;
  /**
   * What an existing item of the key becomes (from 0.12.0; default 'keep'). 'keep': unchanged.
   * 'replace' (debounce): a pending item takes the new payload and runAt (none: now).
   * 'preserve_run_at' (throttle): a pending item takes the new payload, keeps its run_at. With
   * either, a done, failed or cancelled item runs again (pending, new payload, runAt or now,
   * attempts counted afresh, its errors kept), and a claimed one takes the new payload at once
   * (its holder keeps its token and old payload) and runs exactly once more after the current
   * run. Sent only when set (then the enqueue also works against 0.11.0).
   */
  onConflict?: OnConflict;
  /**
   * A W3C `traceparent` (from 0.12.0: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`)
   * stored with the item and handed to its runs as `job.trace`; sent unchanged (a malformed one is
   * refused with 22023). Left out: the active OpenTelemetry span's context, when
   * `@opentelemetry/api` is installed, a valid span context is active and the database's
   * `work_enqueue` takes a trace (asked once per client); else none. With onConflict 'replace' or
   * 'preserve_run_at' the item takes this call's trace; 'keep' leaves its own.
   */
  trace?: string;
  /**
   * The ids of the items this one waits for (from 0.12.0, workflows: its parents, any queue of
   * the database, at most 1000), as `enqueue` returned them: the item is `waiting` until every
   * parent is done, then pending, and its handler reads their results with
   * `job.parentResults()`. An existing key's `after` is ignored. Sent only when it names an id
   * (then the enqueue also works against a database before workflows).
   */
  after?: ReadonlyArray<string | bigint | number>;
  /**
   * What a parent that ends failed (for good) or cancelled does to the waiting item (from
   * 0.12.0; default 'cancel'): 'cancel' cancels it (and its waiting descendants that say
   * 'cancel'); 'run' runs it once every parent has ended. Sent only when set.
   */
  onParentFailure?: OnParentFailure;
}

/** `EnqueueOptions.onParentFailure`: what a parent's failure or cancel does to a waiting item. */
export type OnParentFailure = 'cancel' | 'run';

/** `EnqueueOptions.onConflict`: what an enqueue does to an existing item of its key. */
export type OnConflict = 'keep' | 'replace' | 'preserve_run_at';

/**
 * `workfence.work_enqueue`. A repeated key returns the existing item with `inserted: false`
 * (changed as `onConflict` says); `inserted` is true only when a new item was made.
 * @throws NullArgument (22004, also a null in `after`), InvalidArgument (22023, also an unknown
 *   onConflict or onParentFailure, over 1000 parents), UnknownParent (23503: an `after` id of no
 *   item, or one the role may not read), NotPermitted (42501), SerializationFailure (40001: retry)
 */
export function enqueue(
  client: Queryable, queue: string, payload?: unknown, options?: EnqueueOptions,
): Promise<{ id: string; key: string; inserted: boolean }>;

/** One item of {@link enqueueMany} (from 0.12.0): what differs from item to item of one call. */
export interface EnqueueManyItem {
  /** Any JSON value; default `{}`. */
  payload?: unknown;
  /**
   * Unique within the queue (at most 512 bytes); default a generated UUIDv7. A key the queue
   * has, or one an earlier item of the same call has, returns that item (`inserted: false`).
   */
  key?: string | null;
  /** Not claimable before this time; default now (server clock). */
  runAt?: Date | string | null;
  /** The item's serial group (non-empty, at most 128 bytes, no control characters); default none. */
  groupKey?: string | null;
}

/** The options every item of one {@link enqueueMany} call shares (left out: the server's default). */
export interface EnqueueManyOptions {
  /** Lower is claimed first; default 0. */
  priority?: number;
  /** 1..1000; default 25. */
  maxAttempts?: number;
  /** What an existing item of a key becomes, as `EnqueueOptions.onConflict`; default 'keep'. */
  onConflict?: OnConflict;
}

/**
 * `workfence.work_enqueue_many` (from 0.12.0): many items of one queue in one statement, which
 * commits (or rolls back) with the caller's transaction. One result per item, in the items'
 * order, each item judged as `enqueue` would judge it, one after the other (an existing or
 * repeated key: `inserted: false`). At most 10000 items per call. No maxRun, after or trace:
 * the items carry no trace context.
 * @throws InvalidArgument (22023: over 10000 items, a bad queue, key, runAt or groupKey,
 *   maxAttempts out of range, an unknown onConflict; `items` not an array of objects, before
 *   anything is sent), NullArgument (22004), NotPermitted (42501), SerializationFailure (40001:
 *   retry)
 */
export function enqueueMany(
  client: Queryable, queue: string, items: ReadonlyArray<EnqueueManyItem>, options?: EnqueueManyOptions,
): Promise<Array<{ id: string; key: string; inserted: boolean }>>;

/** `workfence.work_retry`: a failed or cancelled item pending again; true if it changed. */
export function retry(client: Queryable, queue: string, key: string, runAt?: Date | string | null): Promise<boolean>;
/** `workfence.work_reschedule`: a pending item's new `run_at`; true if it changed. */
export function reschedule(client: Queryable, queue: string, key: string, runAt: Date | string): Promise<boolean>;
/**
 * `workfence.work_cancel`: true if the item was pending, claimed or (from 0.12.0) waiting and is
 * now cancelled; its waiting children are cancelled with it (those with onParentFailure 'run'
 * count it as ended).
 */
export function cancel(client: Queryable, queue: string, key: string): Promise<boolean>;
/** `workfence.work_pause`: true if the queue was not paused. */
export function pause(client: Queryable, queue: string): Promise<boolean>;
/** `workfence.work_resume`: true if the queue was paused. */
export function resume(client: Queryable, queue: string): Promise<boolean>;

export interface LimitOptions {
  /** At most this many items of the queue claimed at once, 1..10000; null/absent: no limit. */
  concurrency?: number | null;
  /** At most this many items handed out per `per`, 1..10000; null/absent: no limit. */
  rate?: number | null;
  /** Seconds: the rate's sliding window, in (0, 86400]; default 1. */
  per?: number;
  /**
   * From 0.12.0: at most this many items of one group key claimed at once, 1..10000; null/absent:
   * 1 (serial groups). Sent only when set, so a call without it also works against 0.11.0.
   */
  perGroup?: number | null;
}

/**
 * `workfence.work_limit` (from 0.10.0): sets the queue's limits, replacing them all; a limit left
 * out is lifted (`limit(client, queue)` lifts them all).
 * @throws NullArgument (22004), InvalidArgument (22023), NotPermitted (42501: no `operate` grant)
 */
export function limit(client: Queryable, queue: string, options?: LimitOptions): Promise<void>;

/** A row of `workfence.work_item`. */
export interface Item {
  id: string;
  queue: string;
  key: string;
  /** `waiting` (from 0.12.0): enqueued with `after`, its parents not all ended. */
  state: 'pending' | 'claimed' | 'done' | 'failed' | 'cancelled' | 'waiting';
  priority: number;
  run_at: Date;
  attempts: number;
  max_attempts: number;
  owner: string | null;
  epoch: string | null;
  claimed_at: Date | null;
  lease_until: Date | null;
  errors: Json;
  result: Json;
  created_at: Date;
  finished_at: Date | null;
  payload: Json;
  /** Seconds, or null for no limit. */
  max_run: number | null;
  /**
   * The last checkpoint stored with `job.progress()` under a current lease (from 0.12.0); null
   * before the first, after a rerun by onConflict, and on an older server.
   */
  progress: Json;
}

/** `workfence.work_item` by queue and key, or by id; null when there is no such item (or no read grant). */
export function item(client: Queryable, queue: string, key: string): Promise<Item | null>;
export function item(client: Queryable, id: string | bigint | number): Promise<Item | null>;

/** A row of `workfence.work_workflow` (from 0.12.0). */
export interface WorkflowItem {
  /** The item's id, a decimal string. */
  id: string;
  queue: string;
  key: string;
  state: Item['state'];
  /** 0 for the item asked for, -1 its parents, -2 theirs, ..., 1 its children, 2 theirs. */
  depth: number;
  /** The ids of this row's own parents (every edge into it), decimal strings. */
  parents: string[];
}

/**
 * `workfence.work_workflow` (from 0.12.0): the workflow around the item `id` (the item, its
 * ancestors and descendants, each once at its nearest depth, nearest first, at most 1000 rows);
 * empty for an unknown id (or one the role may not read).
 * @throws NullArgument (22004), NotPermitted (42501)
 */
export function workflow(client: Queryable, id: string | bigint | number): Promise<WorkflowItem[]>;

/** What `awaitResult` resolves to for an item that exists. */
export interface AwaitedResult {
  /**
   * `done`, `failed` or `cancelled` when the run is over; after the timeout, the state then
   * (`pending`, `claimed` or `waiting`).
   */
  state: Item['state'];
  /** What `work_finish` stored (the handler's result) when done; else null. */
  result: Json;
  /** The last failure's text, if any. */
  lastError: string | null;
}

export interface AwaitOptions {
  /** Seconds to wait at most: 0 (one look) to Infinity; default 30. */
  timeout?: number;
}

/**
 * Waits for the item (queue, key) to be done, failed or cancelled, calling
 * `workfence.work_await(queue, key, wait)` (from 0.12.0) until it is or `timeout` passes (the
 * server caps one call at `workfence.long_poll_max`, 3 s by default, and wakes it at the settle's
 * commit). Resolves null when there is no such item; after the timeout, to the item's state then.
 * Occupies the connection while it waits; autocommit or READ COMMITTED only.
 * @throws InvalidArgument (22023: bad queue, key or timeout), NullArgument (22004),
 *   NotPermitted (42501: no `read` grant)
 */
export function awaitResult(
  client: Queryable, queue: string, key: string, options?: AwaitOptions,
): Promise<AwaitedResult | null>;

// ---------------------------------------------------------------------------------------------
// Schedules (from 0.12.0): cron in the server, one item per slot

/** A schedule's `catchUp`: what a fire does with slots that passed unfired. */
export type CatchUp = 'latest' | 'all' | 'none';

export interface ScheduleOptions {
  /** The IANA time zone the expression is read in (e.g. 'Europe/Berlin'); default 'UTC'. */
  timezone?: string;
  /**
   * Slots that passed unfired (downtime, a pause): 'latest' fires the most recent one, 'all'
   * each one (oldest first, at most 100 per schedule per round), 'none' only one at most 60 s
   * old. Default 'latest'.
   */
  catchUp?: CatchUp;
  /** The items' priority, lower first; default 0. */
  priority?: number;
  /** The items' max_attempts, 1..1000; default 25. */
  maxAttempts?: number;
  /** The items' serial group (as `EnqueueOptions.groupKey`); default none. */
  groupKey?: string;
}

/**
 * `workfence.work_schedule`: creates or replaces the schedule `name`; each slot of `cron` (five
 * fields, six with seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`) read
 * in `timezone` enqueues one item in `queue` with key `<name>@<slot as UTC ISO 8601>` and
 * `run_at` the slot. Resolves true if the schedule is new or one of its settings changed.
 * @throws NullArgument (22004), InvalidArgument (22023: a bad name, queue, cron expression, time
 *   zone, catchUp, maxAttempts or groupKey), ReadOnly (25006), NotPermitted (42501: no `operate`
 *   grant)
 */
export function schedule(
  client: Queryable, name: string, cron: string, queue: string, payload?: unknown,
  options?: ScheduleOptions,
): Promise<boolean>;
/** `workfence.work_unschedule`: true if the schedule existed; the items it fired stay. */
export function unschedule(client: Queryable, name: string): Promise<boolean>;
/**
 * `workfence.work_pause_schedule`: true if it was not paused; it fires nothing until resumed.
 * @throws UndefinedObject (42704) when there is no schedule of that name
 */
export function pauseSchedule(client: Queryable, name: string): Promise<boolean>;
/**
 * `workfence.work_resume_schedule`: true if it was paused; missed slots fire as its catchUp says.
 * @throws UndefinedObject (42704) when there is no schedule of that name
 */
export function resumeSchedule(client: Queryable, name: string): Promise<boolean>;
/**
 * `workfence.work_fire_schedules`: fires every due slot of every schedule that is not paused, in
 * the caller's transaction; resolves to the number of items enqueued. Safe to call concurrently.
 * @throws ReadOnly (25006: a hot standby or a read-only transaction)
 */
export function fireSchedules(client: Queryable): Promise<number>;

/** A row of the view `workfence.work_schedules`. */
export interface Schedule {
  name: string;
  cron: string;
  /** The IANA time zone the expression is read in. */
  timezone: string;
  /** The queue its items go to. */
  queue: string;
  catch_up: CatchUp;
  paused: boolean;
  /** The first slot not yet fired or skipped; null when the expression names no more. */
  next_slot: Date | null;
  /** The last slot fired; null before the first. */
  last_slot: Date | null;
  /** The id of the last slot's item (a decimal string; it may since be purged); null before the first. */
  last_item_id: string | null;
  /** Server time of the last fire; null before the first. */
  last_fired_at: Date | null;
  /** The items' payload. */
  payload: Json;
  priority: number;
  max_attempts: number;
  group_key: string | null;
}

/** The view `workfence.work_schedules`, by name (where grants are enforced, readable queues only). */
export function schedules(client: Queryable): Promise<Schedule[]>;

// ---------------------------------------------------------------------------------------------
// Trace context (from 0.12.0; OpenTelemetry optional)

/** A span context as OpenTelemetry's API has it (`traceFlags` 1: sampled). */
export interface TraceSpanContext {
  /** 32 lowercase hex digits, not all zero. */
  traceId: string;
  /** 16 lowercase hex digits, not all zero. */
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}

/**
 * What the runner needs of an OpenTelemetry `TracerProvider` (the type is `@opentelemetry/api`'s,
 * an optional peer dependency, so it is not named here).
 */
export interface TracerProviderLike {
  getTracer(name: string, version?: string, options?: unknown): unknown;
}

/**
 * The W3C `traceparent` of a span context, `00-<traceId>-<spanId>-<flags>`; null for a missing or
 * invalid one. Needs no OpenTelemetry package.
 */
export function formatTraceparent(spanContext: TraceSpanContext | null | undefined): string | null;
/**
 * The span context a W3C `traceparent` names (`isRemote` true); null for a missing or malformed
 * value. Needs no OpenTelemetry package.
 */
export function parseTraceparent(value: string | null | undefined): (TraceSpanContext & { isRemote: true }) | null;
/**
 * The `traceparent` of the active span's context (what `enqueue` sends when given no `trace`); null
 * without `@opentelemetry/api` or an active valid span context.
 */
export function currentTraceparent(): Promise<string | null>;
/** Whether `@opentelemetry/api` can be imported. */
export function tracingAvailable(): Promise<boolean>;

// ---------------------------------------------------------------------------------------------
// The worker runner

/** The default owner name: `<hostname>:<pid>`. */
export function defaultOwner(): string;

/** What a handler is given for one claimed item. */
export class Job<P = any> {
  private constructor();
  /** The item's id (bigint as a decimal string). */
  readonly id: string;
  readonly key: string;
  readonly payload: P;
  /** Which claim of the item this is, from 1. */
  readonly attempt: number;
  /** The fencing token (bigint as a decimal string). */
  readonly epoch: string;
  /** The lease's end as of the claim (server clock). */
  readonly leaseUntil: Date;
  /**
   * The claim row's `progress` (from 0.12.0): the last value an earlier attempt stored with
   * `progress()` under a current lease, to resume from; null on a first attempt, after a rerun by
   * onConflict, and on an older server. The value at claim time (this attempt's `progress()`
   * calls do not change it).
   */
  readonly checkpoint: Json;
  /**
   * The claim row's `trace` (from 0.12.0): the W3C `traceparent` the item was enqueued with (the
   * enqueuer's span), or null when it has none and on a server without trace context.
   */
  readonly trace: string | null;
  /**
   * `<id>:<epoch>`: this claim's fencing token as one stable string, the idempotency key to pass
   * to an external API (the same for repeats within this attempt, different for every claim).
   */
  readonly fencingToken: string;
  readonly queue: string;
  readonly owner: string;
  /**
   * Aborted when the lease is lost (reason: a `LeaseLost`) or when the shutdown grace is over
   * (reason: a `Cancelled`). Pass it to whatever the job awaits.
   */
  readonly signal: AbortSignal;
  /**
   * Runs `fn` in the job's fenced transaction: BEGIN, `work_assert`, `fn(client)`,
   * `work_finish(..., result = fn's value)`, COMMIT. Once per job; return its value from the
   * handler.
   * @throws LeaseLost (55000) when the token is not current (nothing committed; the item is
   *   abandoned); whatever `fn` throws, after a ROLLBACK (the item is then failed)
   * `client` is the transaction's connection, a `pg.PoolClient` of the runner's pool.
   */
  transaction<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  /**
   * Stores a checkpoint with `workfence.work_progress` (from 0.12.0), fenced: resolves true when
   * stored, false when the lease is lost (then handled as a refused renew: the signal aborts with
   * LeaseLost and nothing more is sent for the item). In `transaction()` or `guard()`, written in
   * that transaction.
   * @throws NullArgument (22004: null or undefined), InvalidArgument (22023: over 64 KiB)
   */
  progress(value: unknown): Promise<boolean>;
  /**
   * The results of the items this one waited for (`enqueue(..., { after })`), read with
   * `workfence.work_parent_results` (from 0.12.0), fenced: one key per parent id (decimal
   * string), a done parent's result, or `{ state: 'failed' | 'cancelled', error }` for one that
   * ended so (an item with onParentFailure 'run'); `{}` without parents. Resolves null when the
   * lease is lost (then handled as a refused renew: the signal aborts with LeaseLost and nothing
   * more is sent for the item).
   */
  parentResults(): Promise<Record<string, Json> | null>;
  /**
   * Runs `fn` (an external side effect) while the lease is checked and held: BEGIN,
   * `work_assert` (no re-claim of the item until this ends), `work_renew`, `fn(client)`, COMMIT.
   * A stalled copy whose item was claimed anew is refused here and never runs `fn`. Does not
   * finish the job. One guard or transaction of a job at a time.
   * @throws LeaseLost (55000) when the token is not current (`fn` did not run); whatever `fn`
   *   throws, after a ROLLBACK
   */
  guard<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  /** Stops renewing this job's lease (a hook for tests and for jobs that should run into their lease). */
  stopRenewing(): void;
}

/**
 * The user's work: resolves to the result (JSON) to finish with, or rejects to fail the item (the
 * error recorded as `<type>: <message>`, its stack frames and causes, at most 2048 bytes). A result
 * `JSON.stringify` refuses (a BigInt, a cycle) fails the item with `Error: result is not JSON: ...`.
 */
export type Handler<P = any> = (job: Job<P>) => Promise<unknown> | unknown;

export interface WorkerOptions<P = any> {
  /** A libpq connection string, or a node-postgres client configuration. Required. */
  dsn: string | Record<string, unknown>;
  /** The queue to work. Required: non-empty, at most 128 bytes of UTF-8, no control characters. */
  queue: string;
  /** Called for every claimed item. Required. */
  handler: Handler<P>;
  /**
   * The owner of every claim; default `<hostname>:<pid>`. Not an identity: the epoch fences. Not
   * blank, at most 256 bytes of UTF-8, no control characters.
   */
  owner?: string;
  /** Handlers running at once; default 1; the size of the settling pool. */
  concurrency?: number;
  /** Most items one claim takes; default `concurrency`. At most `concurrency - 1 + batchSize` are held. */
  batchSize?: number;
  /** Seconds: the lease of each claim and renew; the heartbeat renews every `lease / 3`. Default 30. */
  lease?: number;
  /** Seconds: the long poll's wait. Default 5. */
  pollWait?: number;
  /**
   * Seconds before the next attempt after the handler threw, given the attempt (from 1) and what
   * was thrown; null/undefined (or no policy) means the server's exponential backoff.
   */
  retry?: ((attempt: number, error: unknown) => number | null | undefined) | null;
  /** Seconds running handlers may still finish after a shutdown begins. Default 10. */
  shutdownGrace?: number;
  /** Where the event lines go (debug: renew ok; warn: renew refused, lease lost, refused). Default `console`. */
  logger?: Logger;
  /**
   * Whether `run()` installs SIGTERM and SIGINT handlers that call `stop()` (removed when it
   * returns). Default true.
   */
  handleSignals?: boolean;
  /**
   * The OpenTelemetry `TracerProvider` of the jobs' spans; default the global one. When there is
   * one (an SDK registered, or a provider given), each handler runs inside a span
   * `process <queue>` (kind CONSUMER, a new trace) linked to the span context of the item's
   * `trace`, with the attributes `messaging.system`, `messaging.destination.name`,
   * `messaging.message.id`, `workfence.epoch` and `workfence.attempt`; a handler that throws
   * has the exception recorded and the error status. Without `@opentelemetry/api`, or with the
   * API's no-op provider, no span is made.
   */
  tracerProvider?: TracerProviderLike | null;
}

/** The worker runner for one queue (clients/README.md). */
export class Worker<P = any> {
  /**
   * @throws InvalidArgument (22023) on a missing or bad option, checked as the server checks it
   *   (queue, owner, lease in (0, 7 days], pollWait 0..3600, batchSize 1..1000, a malformed dsn
   *   string, ...); nothing is connected
   */
  constructor(options: WorkerOptions<P>);
  readonly queue: string;
  readonly owner: string;
  readonly concurrency: number;
  readonly batchSize: number;
  readonly lease: number;
  readonly pollWait: number;
  readonly shutdownGrace: number;
  readonly retry: ((attempt: number, error: unknown) => number | null | undefined) | null;
  readonly handleSignals: boolean;
  readonly logger: Logger;
  /** The `tracerProvider` option; null: the global one. */
  readonly tracerProvider: TracerProviderLike | null;
  /**
   * Connects, claims and runs jobs until `stop()` (or SIGTERM/SIGINT), then shuts down: buffered
   * items released, running handlers given `shutdownGrace`, then aborted and released; logs `exit`.
   * A lost connection (a server restart 57P01, a failover, a network cut) does not end it: the
   * claim and heartbeat connections are replaced after a backoff of 0.5 s doubling to 30 s (reset
   * by a successful claim), logged `reconnect claim|heartbeat in <s>s error=<text>` at warn, for
   * errors with no SQLSTATE, class 08, 57P01/57P02/57P03, 57014, 40001, 40P01, 25006 or class 53;
   * `stop()` cuts the wait short. Rejects with the error that stopped it (after the shutdown,
   * logging `exit error=<message>` instead of `exit`): a failure of the first connections (not
   * retried), or an error with any other SQLSTATE, e.g. a refused claim (`NotPermitted`, 42501).
   * A claim in a database without the extension (3F000, 42883) rejects with a `hint` naming
   * `CREATE EXTENSION pg_workfence`. Callable once.
   */
  run(): Promise<void>;
  /** Begins the shutdown; resolves when `run()` has finished it. Idempotent. */
  stop(): Promise<void>;
}
