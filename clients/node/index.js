// workfence: the worker library for pg_workfence on node-postgres (clients/README.md is the
// common spec; README.md beside this file is the API). Types: index.d.ts.

export {
  WorkfenceError, NullArgument, InvalidArgument, ReadOnly, NoTransaction, SerializationFailure,
  NotPermitted, UndefinedObject, UnknownParent, LeaseLost, Cancelled, ERRORS_BY_SQLSTATE,
  fromPgError,
} from './lib/errors.js';
export { connectionConfig } from './lib/dsn.js';
export { leaseLostToken } from './lib/notify.js';
export {
  enqueue, enqueueMany, retry, reschedule, cancel, pause, resume, limit, item, workflow,
  awaitResult, schedule, unschedule, pauseSchedule, resumeSchedule, fireSchedules, schedules,
} from './lib/operations.js';
export { Worker, Job, defaultOwner } from './lib/worker.js';
export {
  currentTraceparent, formatTraceparent, parseTraceparent, tracingAvailable,
} from './lib/tracing.js';
