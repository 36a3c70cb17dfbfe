// The error types of clients/README.md ("Errors"): one class per SQLSTATE the pg_workfence
// functions raise (docs/contract.md), each keeping the server's message, detail and hint.

/**
 * Base class of every error this library raises for a pg_workfence SQLSTATE.
 *
 * Fields: `code` (the SQLSTATE, e.g. '55000'), `message`, `detail` and `hint` (the server's, or
 * undefined), `cause` (the original node-postgres `DatabaseError`, when there is one).
 */
export class WorkfenceError extends Error {
  /**
   * @param {string} message the server's message (or the library's, for an error it raises itself)
   * @param {{code?: string, detail?: string, hint?: string, cause?: unknown}} [fields]
   */
  constructor(message, { code, detail, hint, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code ?? new.target.sqlstate;
    this.detail = detail;
    this.hint = hint;
  }
}

/** 22004: a NULL where a value is required. */
export class NullArgument extends WorkfenceError {}
NullArgument.sqlstate = '22004';

/**
 * 22023: a bad queue, key, owner, lease, interval or `max_items`; from 0.12.0 also a schedule's
 * bad cron expression, time zone or `catchUp`.
 */
export class InvalidArgument extends WorkfenceError {}
InvalidArgument.sqlstate = '22023';

/** 25006: a write on a hot standby (a claim after a failover to a standby not yet promoted). */
export class ReadOnly extends WorkfenceError {}
ReadOnly.sqlstate = '25006';

/** 25P01: `work_assert` outside a transaction block. */
export class NoTransaction extends WorkfenceError {}
NoTransaction.sqlstate = '25P01';

/** 40001: an enqueue that raced a purge three times: retry it. */
export class SerializationFailure extends WorkfenceError {}
SerializationFailure.sqlstate = '40001';

/** 42501: a queue grant is missing (docs/operations.md). */
export class NotPermitted extends WorkfenceError {}
NotPermitted.sqlstate = '42501';

/**
 * 42704: a grant naming an unknown role or capability, or (from 0.12.0) `pauseSchedule` /
 * `resumeSchedule` of a schedule that does not exist.
 */
export class UndefinedObject extends WorkfenceError {}
UndefinedObject.sqlstate = '42704';

/**
 * 23503 (from 0.12.0): an enqueue's `after` names an item that does not exist (never enqueued,
 * or purged), or one in a queue the role may not read (the two are not told apart). Nothing was
 * enqueued.
 */
export class UnknownParent extends WorkfenceError {}
UnknownParent.sqlstate = '23503';

/**
 * 55000: the token is not current (`work_assert`, also at `COMMIT`), or the runner learned that
 * the lease was lost (a refused renew, a `work_lease_lost` notification, a refused finish). It is
 * also the `reason` of a job's `AbortSignal` aborted for a lost lease.
 */
export class LeaseLost extends WorkfenceError {}
LeaseLost.sqlstate = '55000';

/**
 * 57014: a statement was cancelled (the long poll on shutdown). Also the `reason` of a job's
 * `AbortSignal` aborted because the worker is shutting down (then with no `cause`).
 */
export class Cancelled extends WorkfenceError {}
Cancelled.sqlstate = '57014';

/** The classes above by SQLSTATE. */
export const ERRORS_BY_SQLSTATE = Object.freeze(Object.fromEntries(
  [NullArgument, InvalidArgument, ReadOnly, NoTransaction, SerializationFailure, NotPermitted,
    UndefinedObject, UnknownParent, LeaseLost, Cancelled].map((cls) => [cls.sqlstate, cls]),
));

/**
 * The named error for a node-postgres error: an instance of the class of its `err.code` (SQLSTATE)
 * with the server's message, detail and hint and the original error as `cause`; any other error
 * (another SQLSTATE, a broken connection, a programming error) is returned as it is.
 *
 * @param {unknown} err
 * @returns {unknown}
 */
export function fromPgError(err) {
  if (err instanceof WorkfenceError || err === null || typeof err !== 'object') return err;
  const cls = ERRORS_BY_SQLSTATE[/** @type {any} */ (err).code];
  if (!cls) return err;
  const { message, code, detail, hint } = /** @type {any} */ (err);
  return new cls(message, { code, detail, hint, cause: err });
}
