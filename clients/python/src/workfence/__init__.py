"""workfence: a worker library for pg_workfence, the lease-fenced work queue for PostgreSQL.

The runner (`Worker`) claims with the long poll, renews leases from a heartbeat that also
listens on `work_lease_lost`, cancels a handler whose lease is lost, runs the handler's writes
in a fenced transaction (`job.transaction()`), records failures, and releases what it holds on
shutdown, and sends a settle whose answer was lost again with the same token. A job can store
a checkpoint (`job.progress(value)`, read back by the next attempt as `job.checkpoint`), guard an
external side effect (`job.guard()`) and name its attempt to other systems
(`job.fencing_token`). The enqueue and operator helpers (`enqueue`, from 0.12.0 `enqueue_many`
for many items in one statement, `retry`, ..., from 0.12.0 the schedules: `schedule`,
`unschedule`, `pause_schedule`, `resume_schedule`, `fire_schedules`, `schedules`, and
`await_result`) run on a connection the caller passes (asyncio here, synchronous twins in
`workfence.sync`); `workfence.errors` maps every SQLSTATE the functions raise to a class. From
0.12.0 an item carries the trace context it was enqueued in (`job.trace`), and the runner makes
an OpenTelemetry span per job when an SDK is configured (`workfence.tracing`; optional), and
items make workflows (`enqueue(..., after=[ids])`: a step runs once the items it waits for are
done, and reads their results with `job.parent_results()`; `workflow(conn, id)` the graph). Logs
go to `logging.getLogger("workfence")`. See clients/README.md (the common spec) and
clients/python/README.md.
"""

from . import errors, sync, tracing
from .errors import (
    Cancelled,
    InvalidArgument,
    LeaseLost,
    NotPermitted,
    NoTransaction,
    NullArgument,
    ReadOnly,
    SerializationFailure,
    UndefinedObject,
    UnknownParent,
    WorkfenceError,
)
from .operations import (
    CatchUp,
    EnqueueItem,
    Enqueued,
    ItemInfo,
    OnConflict,
    OnParentFailure,
    Outcome,
    Schedule,
    WorkflowItem,
    await_result,
    cancel,
    enqueue,
    enqueue_many,
    fire_schedules,
    item,
    limit,
    pause,
    pause_schedule,
    reschedule,
    resume,
    resume_schedule,
    retry,
    schedule,
    schedules,
    unschedule,
    workflow,
)
from .worker import CancelFlag, Handler, Job, RetryPolicy, Worker, default_owner

__version__ = "0.12.0"

__all__ = [
    "Worker",
    "Job",
    "CancelFlag",
    "Handler",
    "RetryPolicy",
    "default_owner",
    "Enqueued",
    "EnqueueItem",
    "ItemInfo",
    "OnConflict",
    "OnParentFailure",
    "Outcome",
    "WorkflowItem",
    "enqueue",
    "enqueue_many",
    "await_result",
    "retry",
    "reschedule",
    "cancel",
    "pause",
    "resume",
    "limit",
    "item",
    "workflow",
    "CatchUp",
    "Schedule",
    "schedule",
    "unschedule",
    "pause_schedule",
    "resume_schedule",
    "fire_schedules",
    "schedules",
    "errors",
    "sync",
    "tracing",
    "WorkfenceError",
    "NullArgument",
    "InvalidArgument",
    "ReadOnly",
    "NoTransaction",
    "SerializationFailure",
    "NotPermitted",
    "UndefinedObject",
    "UnknownParent",
    "LeaseLost",
    "Cancelled",
]
