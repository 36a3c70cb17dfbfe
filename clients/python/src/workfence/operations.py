"""Enqueue and operator calls on a connection the caller passes, asyncio flavour.

Each function is one SQL call (`workfence.work_enqueue`, `work_retry`, ...) run on the caller's
`psycopg.AsyncConnection` in whatever transaction it is in, so that an enqueue can be part of the
caller's own transaction (the "transactional enqueue" of graphile-worker and procrastinate): it
becomes visible, and wakes the long polls, only when the caller commits. Nothing is committed
here. Server errors are raised as `workfence.errors` classes; the synchronous twins taking a
`psycopg.Connection` are in `workfence.sync`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from time import monotonic
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from . import _sql, tracing
from .errors import InvalidArgument, translate

__all__ = [
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
]

#: A schedule's `catch_up`: what a fire does with slots that passed unfired (downtime, a pause):
#: `latest` fires the most recent one, `all` each one (oldest first, at most 100 per schedule per
#: round), `none` only a slot at most 60 seconds old.
CatchUp = Literal["latest", "all", "none"]


#: What an enqueue does with a key the queue already has (from 0.12.0, `on_conflict=`): `keep`
#: returns the item unchanged (the server's default); `replace` (debounce) gives a pending item
#: the new payload and run_at; `preserve_run_at` (throttle) gives it the new payload and keeps its
#: run_at. With either of the last two, a finished item (done, failed, cancelled) runs again
#: (pending, attempts counted afresh, its errors kept), and a claimed one takes the new payload
#: and runs exactly once more after its current run (its holder's token keeps working).
OnConflict = Literal["keep", "replace", "preserve_run_at"]

#: What a parent that ends `failed` (for good) or `cancelled` does to an item enqueued with
#: `after=` (from 0.12.0, `on_parent_failure=`): `cancel` (the server's default) cancels the
#: waiting item, and its own waiting descendants that say `cancel`; `run` counts the parent as
#: ended, so the item runs once every parent has ended, and `job.parent_results()` shows the
#: failure (`{"state": "failed", "error": ...}`).
OnParentFailure = Literal["cancel", "run"]

#: The states in which an item's outcome is known: `await_result` stops waiting there.
FINAL_STATES = frozenset({"done", "failed", "cancelled"})
# The longest single `work_await` call `await_result` makes, in seconds (the server caps each
# call at workfence.long_poll_max, 3 s by default, anyway).
AWAIT_CALL_MAX = 3.0


@dataclass(frozen=True)
class Enqueued:
    """What an enqueue returns: the item's `id`, its `key` (given or generated, a UUIDv7), and
    `inserted`: true only when a new item was inserted; false whenever the queue already had an
    item with this key, whether it was returned unchanged (`on_conflict="keep"`, the default) or
    updated (`replace`, `preserve_run_at`)."""

    id: int
    key: str
    inserted: bool


@dataclass(frozen=True)
class EnqueueItem:
    """One item of `enqueue_many` (from 0.12.0): what differs from item to item of one call.

    `payload` any JSON-serialisable value (None: `{}`, as `enqueue`'s); `key` unique in the
    queue (None: a generated UUIDv7; an existing key, or one an earlier item of the same call
    has: that item is returned, `inserted` false, as `on_conflict` says); `run_at` an aware
    datetime before which it is not claimed (None: now, server time); `group_key` its serial
    group (None: none; non-empty, at most 128 bytes, no control characters). The options shared
    by every item of a call (`priority`, `max_attempts`, `on_conflict`) are `enqueue_many`'s."""

    payload: Any = None
    key: str | None = None
    run_at: datetime | None = None
    group_key: str | None = None


@dataclass(frozen=True)
class ItemInfo:
    """One item as `workfence.work_item` shows it to an operator (docs/contract.md): state is
    one of pending, claimed, done, failed, cancelled, and from 0.12.0 waiting (enqueued with
    `after=`, its parents not all ended); times are aware datetimes (server time);
    `errors` is the JSON list of failed attempts and lapsed leases, oldest first."""

    id: int
    queue: str
    key: str
    state: str
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    owner: str | None
    epoch: int | None
    claimed_at: datetime | None
    lease_until: datetime | None
    errors: Any
    result: Any
    created_at: datetime
    finished_at: datetime | None
    payload: Any
    max_run: timedelta | None
    #: From 0.12.0: the last checkpoint written under a current lease (`job.progress(value)`);
    #: None when there is none, and from an older server.
    progress: Any = None


def item_info(names: list[str], row: tuple[Any, ...]) -> ItemInfo:
    """An `ItemInfo` from a row of `work_item` read by column name, so that a column an older
    server lacks (`progress` before 0.12.0) is None and one this library does not know is
    passed over. Internal (shared with `workfence.sync`)."""
    by_name = dict(zip(names, row, strict=True))
    return ItemInfo(**{f.name: by_name[f.name] for f in fields(ItemInfo) if f.name in by_name})


@dataclass(frozen=True)
class Outcome:
    """What `await_result` returns: the item's `state` (`done`, `failed`, `cancelled`, or, when
    the timeout passed first, `pending`, `claimed` or `waiting`), its `result` (the JSON value it
    finished with; None unless `done`) and `last_error` (the text of its last failure, None when
    it never failed; for an item that a parent's end cancelled, `parent <id> ended failed` or
    `parent <id> ended cancelled`)."""

    state: str
    result: Any
    last_error: str | None

    @property
    def finished(self) -> bool:
        """Whether the outcome is known: the state is done, failed or cancelled (false when
        `await_result` timed out first)."""
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class WorkflowItem:
    """One row of `workfence.work_workflow` (from 0.12.0): an item of the workflow around the
    one asked for. `depth` is 0 for that item, -1 for its parents, -2 for theirs, ..., 1 for its
    children, 2 for theirs; `parents` the ids of the row's own parents (every edge into it), so
    that the rows draw the graph; `state` the item's (`waiting` included)."""

    id: int
    queue: str
    key: str
    state: str
    depth: int
    parents: list[int]


@dataclass(frozen=True)
class Schedule:
    """One row of the view `workfence.work_schedules` (from 0.12.0): a schedule as
    `work_schedule` made it, and what it last fired.

    `name`; `cron` (its expression); `timezone` (the IANA zone it is read in); `queue`;
    `catch_up` (`latest`, `all` or `none`); `paused`; `next_slot` (aware datetime, server time:
    the first slot not yet fired or skipped; None when the expression names no more);
    `last_slot` and `last_item_id` (the last slot fired and the id of its item, which may since be
    purged; None before the first fire); `last_fired_at` (server time of that fire); then
    `payload`, `priority`, `max_attempts` and `group_key` (None: no group) of the items it
    enqueues. The item of a slot has key `<name>@<slot as UTC ISO 8601>`
    (`nightly@2026-12-07T01:00:00Z`) and `run_at` the slot."""

    name: str
    cron: str
    timezone: str
    queue: str
    catch_up: CatchUp
    paused: bool
    next_slot: datetime | None
    last_slot: datetime | None
    last_item_id: int | None
    last_fired_at: datetime | None
    payload: Any
    priority: int
    max_attempts: int
    group_key: str | None


def schedule_params(
    name: str,
    cron: str,
    queue: str,
    payload: Any,
    timezone: str,
    catch_up: str,
    priority: int,
    max_attempts: int,
    group_key: str | None,
) -> tuple[Any, ...]:
    """The parameters of `_sql.SCHEDULE` (shared with `workfence.sync`). Internal."""
    return (
        name,
        cron,
        queue,
        Jsonb({} if payload is None else payload),
        timezone,
        catch_up,
        priority,
        max_attempts,
        group_key,
    )


def enqueue_call(
    queue: str,
    payload: Any,
    key: str | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int,
    max_run: float | timedelta | None,
    group_key: str | None,
    on_conflict: str | None = None,
    trace: str | None = None,
    after: Iterable[int] | None = None,
    on_parent_failure: str | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of `enqueue` (shared with `workfence.sync`). Internal.

    `group_key`, `on_conflict`, `trace`, `after` and `on_parent_failure` are passed (by name)
    only when they are set (`after`: only when it names an id, as an empty one is no parents to
    the server too), so that an enqueue without them also works against an older database,
    whose `work_enqueue` has no such argument (0.9.0: no `group_key`; 0.11.0: no `on_conflict`;
    a 0.12.0 build before trace context: no `trace`; one before workflows: no `after`, no
    `on_parent_failure`)."""
    params: tuple[Any, ...] = (
        queue,
        Jsonb({} if payload is None else payload),
        key,
        run_at,
        priority,
        max_attempts,
        _sql.interval(max_run, "max_run"),
    )
    named: list[str] = []
    if group_key is not None:
        named.append(_sql.ENQUEUE_GROUP_KEY)
        params = (*params, group_key)
    if on_conflict is not None:
        named.append(_sql.ENQUEUE_ON_CONFLICT)
        params = (*params, on_conflict)
    if trace is not None:
        named.append(_sql.ENQUEUE_TRACE)
        params = (*params, trace)
    parents = parent_ids(after)
    if parents:
        named.append(_sql.ENQUEUE_AFTER)
        params = (*params, parents)
    if on_parent_failure is not None:
        named.append(_sql.ENQUEUE_ON_PARENT_FAILURE)
        params = (*params, on_parent_failure)
    if not named:
        return _sql.ENQUEUE, params
    return _sql.ENQUEUE_NAMED.format(named=", ".join(named)), params


def parent_ids(after: Iterable[int] | None) -> list[int | None]:
    """`after` as the list sent for `work_enqueue`'s `bigint[]` (None: none). Raises
    `InvalidArgument` (22023) for a str or bytes (not a list of ids) and for an element that is
    not an int (a bool, a float, a str); a None element is sent, for the server's 22004.
    Internal (shared with `workfence.sync`)."""
    if after is None:
        return []
    if isinstance(after, str | bytes):
        raise InvalidArgument(f"after must be a list of item ids, not {after!r}")
    ids = list(after)
    for parent in ids:
        if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)):
            raise InvalidArgument(f"after must hold item ids (int), not {parent!r}")
    return ids


def enqueue_many_call(
    queue: str,
    items: Iterable[EnqueueItem],
    priority: int,
    max_attempts: int,
    on_conflict: str | None,
) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of `enqueue_many` (shared with `workfence.sync`). Internal.

    One array per column of the items, one element per item in their order (so the arrays are
    always as long as each other); `keys`, `run_at` and `group_keys` are sent as NULL when no
    item sets one, and `on_conflict` by name only when it is set (None: the server's `keep`).
    Raises `InvalidArgument` (22023) for `items` that is a str, bytes or a mapping, or holds
    anything but `EnqueueItem`s, before anything is sent."""
    if isinstance(items, str | bytes | dict):
        raise InvalidArgument(f"items must be a list of EnqueueItem, not {items!r}")
    listed = list(items)
    for each in listed:
        if not isinstance(each, EnqueueItem):
            raise InvalidArgument(f"items must hold EnqueueItem values, not {each!r}")
    keys = [each.key for each in listed]
    run_at = [each.run_at for each in listed]
    group_keys = [each.group_key for each in listed]
    params: tuple[Any, ...] = (
        queue,
        [Jsonb({} if each.payload is None else each.payload) for each in listed],
        keys if any(k is not None for k in keys) else None,
        run_at if any(r is not None for r in run_at) else None,
        priority,
        max_attempts,
        group_keys if any(g is not None for g in group_keys) else None,
    )
    if on_conflict is None:
        return _sql.ENQUEUE_MANY, params
    return _sql.ENQUEUE_MANY_ON_CONFLICT, (*params, on_conflict)


#: Whether the database of a connection takes `trace` in `work_enqueue`
#: (`_sql.ENQUEUE_TAKES_TRACE`), by connection, asked at its first enqueue inside a span and
#: forgotten with the connection: (answer, `monotonic()` when asked). A "no" is asked again
#: after `TAKES_TRACE_RECHECK` seconds (an `ALTER EXTENSION ... UPDATE` may have added it while
#: a pooled connection lives on). Internal (shared with `workfence.sync`).
TAKES_TRACE: weakref.WeakKeyDictionary[Any, tuple[bool, float]] = weakref.WeakKeyDictionary()

#: Seconds after which a database that had no `trace` argument is asked again.
TAKES_TRACE_RECHECK = 60.0


def known_takes_trace(conn: Any) -> bool | None:
    """The cached answer of `TAKES_TRACE` for `conn`: None when never asked, or when a "no"
    is older than `TAKES_TRACE_RECHECK`. Internal (shared with `workfence.sync`)."""
    known = TAKES_TRACE.get(conn)
    if known is None:
        return None
    takes, asked = known
    if not takes and monotonic() - asked > TAKES_TRACE_RECHECK:
        return None
    return takes


async def _current_trace(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """The trace an enqueue given no `trace=` sends: the current span's `traceparent`, when
    there is one and the connection's database takes it (asked once per connection); else
    None."""
    traceparent = tracing.current_traceparent()
    if traceparent is None:
        return None
    takes = known_takes_trace(conn)
    if takes is None:
        row = await _one(conn, _sql.ENQUEUE_TAKES_TRACE, ())
        takes = bool(row[0])
        TAKES_TRACE[conn] = (takes, monotonic())
    return traceparent if takes else None


def await_wait(timeout: float | timedelta | None) -> float | None:
    """`await_result`'s timeout in seconds (None: no limit). Raises `InvalidArgument` (22023)
    for a negative one or another type. Internal (shared with `workfence.sync`)."""
    seconds = _sql.interval(timeout, "timeout")
    if seconds is None:
        return None
    total = seconds.total_seconds()
    if total < 0:
        raise InvalidArgument(f"timeout must not be negative, not {timeout!r}")
    return total


def await_call_wait(deadline: float | None) -> timedelta:
    """The `wait` of the next `work_await` call: what is left until `deadline` (a `monotonic()`
    time; None: no limit), at most `AWAIT_CALL_MAX`, never negative. Internal."""
    if deadline is None:
        return timedelta(seconds=AWAIT_CALL_MAX)
    return timedelta(seconds=max(0.0, min(deadline - monotonic(), AWAIT_CALL_MAX)))


def limit_params(
    queue: str, concurrency: int | None, rate: int | None, per: float | timedelta
) -> tuple[Any, ...]:
    """The parameters of `_sql.LIMIT` (shared with `workfence.sync`). Internal."""
    return (
        queue,
        _sql.whole(concurrency, "concurrency"),
        _sql.whole(rate, "rate"),
        _sql.interval(per, "per"),
    )


def limit_call(
    queue: str,
    concurrency: int | None,
    rate: int | None,
    per: float | timedelta,
    per_group: int | None,
) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of `limit` (shared with `workfence.sync`). Internal.

    `per_group` is passed (by name) only when it is set, so that a limit without it also works
    against a 0.11.0 database, whose `work_limit` has no such argument."""
    params = limit_params(queue, concurrency, rate, per)
    if per_group is None:
        return _sql.LIMIT, params
    return _sql.LIMIT_PER_GROUP, (*params, _sql.whole(per_group, "per_group"))


def _raise(error: psycopg.Error) -> None:
    """Raise `error` translated to a `WorkfenceError` when it has a SQLSTATE."""
    translated = translate(error)
    if translated is error:
        raise error
    raise translated from error


async def _one(conn: psycopg.AsyncConnection[Any], query: str, params: tuple[Any, ...]) -> Any:
    """The first row of `query` (None when there is none), errors translated."""
    try:
        cur = await conn.execute(query, params)
        return await cur.fetchone()
    except psycopg.Error as error:
        _raise(error)
        raise  # unreachable: _raise always raises


async def _all(
    conn: psycopg.AsyncConnection[Any], query: str, params: tuple[Any, ...]
) -> list[Any]:
    """Every row of `query`, errors translated."""
    try:
        cur = await conn.execute(query, params)
        return await cur.fetchall()
    except psycopg.Error as error:
        _raise(error)
        raise  # unreachable: _raise always raises


async def enqueue(
    conn: psycopg.AsyncConnection[Any],
    queue: str,
    payload: Any = None,
    *,
    key: str | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int = 25,
    max_run: float | timedelta | None = None,
    group_key: str | None = None,
    on_conflict: OnConflict | None = None,
    trace: str | None = None,
    after: Iterable[int] | None = None,
    on_parent_failure: OnParentFailure | None = None,
) -> Enqueued:
    """Add an item to `queue` with `workfence.work_enqueue`, in the caller's transaction.

    Arguments: `payload` any JSON-serialisable value (None: `{}`); `key` unique in the queue
    (None: a generated UUIDv7; an existing key: see `on_conflict`); `run_at` an aware datetime
    before which it is not claimed (None: now, server time); `priority` lower first;
    `max_attempts` 1..1000; `max_run` a run-time limit in seconds or a timedelta (None: none);
    `group_key` (from 0.10.0) the item's serial group: at most one item of a (queue, group_key)
    is claimed at a time, in claim order (None: no group; only then does the call also work
    against a 0.9.0 database); `on_conflict` (from 0.12.0) what to do with an existing key:
    `"keep"` returns the item unchanged (the server's default), `"replace"` (debounce) gives a
    pending item this payload and run_at (None: now), `"preserve_run_at"` (throttle) this
    payload and its old run_at; with either, a finished item runs again and a claimed one runs
    exactly once more after its current run (`OnConflict`). None sends nothing, so that the call
    also works against a 0.11.0 database; `trace` (from 0.12.0) a W3C `traceparent`
    (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) stored with the item and handed to
    its runs (`job.trace`), sent unchanged; None: the current OpenTelemetry span's context when
    `opentelemetry-api` is installed and a valid span context is current (and the database's
    `work_enqueue` takes a trace, asked once per connection), else nothing (`workfence.tracing`).
    With `on_conflict` `replace` or `preserve_run_at` the item takes this call's trace; `keep`
    leaves its own. `after` (from 0.12.0, workflows) the ids of items this one waits for (its
    parents, any queue of the database, at most 1000): it is `waiting` until every parent is
    done, then pending (due at its `run_at`), and its handler reads their results with
    `job.parent_results()`; `on_parent_failure` (`OnParentFailure`) what a parent that ends
    failed or cancelled does to it: `"cancel"` (the server's default) cancels it, `"run"` runs
    it once every parent has ended. An existing key's `after` is ignored (edges are made only at
    the insert). Either is sent only when given (`after` only when it names an id), so that an
    enqueue without them also works against a database before workflows. Result:
    `Enqueued(id, key, inserted)`, `inserted` false whenever the key existed. Errors:
    `NullArgument` (22004, also a None in `after`), `InvalidArgument` (22023, also an
    `on_conflict` the server does not know, a malformed `trace`, over 1000 parents, an
    `on_parent_failure` not `cancel` or `run`), `UnknownParent` (23503: an `after` id of no item,
    or of one in a queue the role may not read), `NotPermitted` (42501), `SerializationFailure`
    (40001: a purge raced the enqueue; retry).
    """
    if trace is None:
        trace = await _current_trace(conn)
    query, params = enqueue_call(
        queue,
        payload,
        key,
        run_at,
        priority,
        max_attempts,
        max_run,
        group_key,
        on_conflict,
        trace,
        after,
        on_parent_failure,
    )
    row = await _one(conn, query, params)
    return Enqueued(id=row[0], key=row[1], inserted=row[2])


async def enqueue_many(
    conn: psycopg.AsyncConnection[Any],
    queue: str,
    items: Iterable[EnqueueItem],
    *,
    priority: int = 0,
    max_attempts: int = 25,
    on_conflict: OnConflict | None = None,
) -> list[Enqueued]:
    """Add many items to `queue` in one statement with `workfence.work_enqueue_many` (from
    0.12.0), in the caller's transaction: they commit (or roll back) together.

    Arguments: `items` a list (any iterable) of `EnqueueItem(payload, key=, run_at=,
    group_key=)`; `priority` (lower first), `max_attempts` (1..1000) and `on_conflict`
    (`OnConflict`; None: the server's `"keep"`) apply to every item. Each item is judged as
    `enqueue(conn, queue, item.payload, key=item.key, run_at=item.run_at, priority=...,
    max_attempts=..., group_key=item.group_key, on_conflict=...)` would judge it, one after the
    other: an existing key, or a key an earlier item of the same call has, returns that item with
    `inserted` false (unchanged under `"keep"`, changed as `on_conflict` says). At most 10000
    items per call: enqueue more in several calls (in one transaction if they must commit
    together). No `max_run`, `after` or `trace` here (`work_enqueue_many` has none): the items
    carry no trace context; enqueue those one by one with `enqueue`. An empty list enqueues
    nothing and returns `[]`.

    Result: a list of `Enqueued(id, key, inserted)`, one per item, in the items' order (`key`
    the generated one for an item without a key). Errors: `InvalidArgument` (22023: over 10000
    items, a bad queue, key, run_at or group_key, `max_attempts` out of 1..1000, an
    `on_conflict` the server does not know; also, raised before anything is sent, `items` that
    is not a list of `EnqueueItem`), `NullArgument` (22004: a None queue, priority or
    max_attempts), `NotPermitted` (42501: no `enqueue` grant covering the queue, or, for an
    `on_conflict` that runs a cancelled item again, no `operate` grant), `SerializationFailure`
    (40001: a purge raced the call three times; retry), `WorkfenceError` 25000 (an
    `on_conflict` changing a pending item of a group under REPEATABLE READ or SERIALIZABLE) and
    42883 from a server older than 0.12.0.
    """
    query, params = enqueue_many_call(queue, items, priority, max_attempts, on_conflict)
    rows = await _all(conn, query, params)
    return [Enqueued(id=row[0], key=row[1], inserted=row[2]) for row in rows]


async def retry(
    conn: psycopg.AsyncConnection[Any], queue: str, key: str, run_at: datetime | None = None
) -> bool:
    """Put a failed or cancelled item back to pending (`workfence.work_retry`), due at `run_at`
    (None: now). Result: true if it changed the item. Errors: 22004, 22023, 42501."""
    row = await _one(conn, _sql.RETRY, (queue, key, run_at))
    return bool(row[0])


async def reschedule(
    conn: psycopg.AsyncConnection[Any], queue: str, key: str, run_at: datetime
) -> bool:
    """Move a pending item's `run_at` (`workfence.work_reschedule`). Result: true if it changed
    the item. Errors: 22004, 22023, 42501."""
    row = await _one(conn, _sql.RESCHEDULE, (queue, key, run_at))
    return bool(row[0])


async def cancel(conn: psycopg.AsyncConnection[Any], queue: str, key: str) -> bool:
    """Cancel a pending or claimed item (`workfence.work_cancel`); its holder's token is refused
    from then on. From 0.12.0 also a waiting one; the cancel reaches its waiting children
    (cancelled with it, transitively, but for those enqueued with `on_parent_failure="run"`,
    which count it as ended). Result: true if it changed the item. Errors: 22004, 22023,
    42501."""
    row = await _one(conn, _sql.CANCEL, (queue, key))
    return bool(row[0])


async def pause(conn: psycopg.AsyncConnection[Any], queue: str) -> bool:
    """Pause `queue` (`workfence.work_pause`): claims hand nothing out until a resume. Result:
    true if it was not paused. Errors: 22004, 22023, 42501."""
    row = await _one(conn, _sql.PAUSE, (queue,))
    return bool(row[0])


async def resume(conn: psycopg.AsyncConnection[Any], queue: str) -> bool:
    """End a pause of `queue` (`workfence.work_resume`). Result: true if it was paused.
    Errors: 22004, 22023, 42501."""
    row = await _one(conn, _sql.RESUME, (queue,))
    return bool(row[0])


async def limit(
    conn: psycopg.AsyncConnection[Any],
    queue: str,
    concurrency: int | None = None,
    rate: int | None = None,
    per: float | timedelta = 1.0,
    per_group: int | None = None,
) -> None:
    """Set `queue`'s limits (`workfence.work_limit`, from 0.10.0), replacing them all: at most
    `concurrency` items claimed at once, across all workers, and at most `rate` items handed out
    per `per` (seconds or a timedelta; a sliding window); from 0.12.0 at most `per_group` items
    of one group_key claimed at once (None: 1, serial groups). None lifts a limit;
    `limit(conn, queue)` lifts them all. Claims that would exceed a limit hand out fewer items
    (or none); they never block. Takes effect when the caller commits. `per_group` is sent only
    when set, so that a call without it also works against a 0.11.0 database. Errors:
    `NullArgument` (22004: a None queue or `per`), `InvalidArgument` (22023: `concurrency`,
    `rate` or `per_group` outside 1..10000 or not an int, `per` outside (0, 1 day]),
    `NotPermitted` (42501: no `operate` grant)."""
    query, params = limit_call(queue, concurrency, rate, per, per_group)
    await _one(conn, query, params)


async def item(
    conn: psycopg.AsyncConnection[Any], queue_or_id: str | int, key: str | None = None
) -> ItemInfo | None:
    """One item as `workfence.work_item` shows it: by `(queue, key)`, or by id when
    `queue_or_id` is an int (and `key` omitted). Result: an `ItemInfo`, or None when there is no
    such item (or, with queue grants enforced, none the role may read). Errors: 22004, 22023,
    42501."""
    query, params = item_query(queue_or_id, key)
    try:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    except psycopg.Error as error:
        _raise(error)
        raise  # unreachable: _raise always raises
    if row is None:
        return None
    return item_info([column.name for column in cur.description or ()], row)


async def await_result(
    conn: psycopg.AsyncConnection[Any],
    queue: str,
    key: str,
    *,
    timeout: float | timedelta | None = 30.0,
) -> Outcome | None:
    """Wait for the outcome of the item `(queue, key)` (`workfence.work_await`, from 0.12.0).

    Returns at once when the item is done, failed or cancelled; else waits in the server, woken
    when the item's settle commits, calling `work_await` again (each call waiting at most 3 s,
    the server's `workfence.long_poll_max` by default) until the outcome is known or `timeout`
    (seconds or a timedelta; None: no limit) has passed. Result: `Outcome(state, result,
    last_error)`; on a timeout the item's state then (`pending`, `claimed` or `waiting`, result
    None: `outcome.finished` is false); None when there is no such item (or, with queue grants
    enforced, none the role may read). An item that runs again (`retry`, an `on_conflict`
    rerun) after it finished is reported finished: the first outcome seen is returned.

    Use an autocommit connection (or one in READ COMMITTED whose transaction you do not mind
    holding open while it waits): a wait needs READ COMMITTED (25000 otherwise). Errors:
    `NullArgument` (22004), `InvalidArgument` (22023: a bad queue or key, a negative timeout),
    `NotPermitted` (42501: no `read` grant), `WorkfenceError` 25000 (REPEATABLE READ or
    SERIALIZABLE), 42883 from a server older than 0.12.0.
    """
    seconds = await_wait(timeout)
    deadline = None if seconds is None else monotonic() + seconds
    while True:
        wait = await_call_wait(deadline)
        row = await _one(conn, _sql.AWAIT, (queue, key, wait))
        if row is None:
            return None
        outcome = Outcome(state=row[0], result=row[1], last_error=row[2])
        if outcome.finished or (deadline is not None and monotonic() >= deadline):
            return outcome


async def workflow(conn: psycopg.AsyncConnection[Any], item_id: int) -> list[WorkflowItem]:
    """The workflow around item `item_id` (`workfence.work_workflow`, from 0.12.0): the item
    itself (`depth` 0), its ancestors (-1 its parents, -2 theirs, ...) and its descendants (1, 2,
    ...), each once at its nearest depth, nearest first, at most 1000 rows; each row's `parents`
    lists the ids of its parents, so the rows draw the graph. An empty list for an unknown id
    (or, with queue grants enforced, an item in a queue the role may not read; rows of other
    such queues are left out). Result: a list of `WorkflowItem`. Errors: `NullArgument` (22004),
    `NotPermitted` (42501), 42883 from a server older than 0.12.0."""
    try:
        cur = await conn.execute(_sql.WORKFLOW, (item_id,))
        rows = await cur.fetchall()
    except psycopg.Error as error:
        _raise(error)
        raise  # unreachable: _raise always raises
    return [WorkflowItem(*row) for row in rows]


def item_query(queue_or_id: str | int, key: str | None) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of `item` (shared with `workfence.sync`). Internal."""
    if isinstance(queue_or_id, int) and not isinstance(queue_or_id, bool):
        if key is not None:
            raise TypeError("item(conn, id) takes no key")
        return _sql.ITEM_BY_ID, (queue_or_id,)
    if key is None:
        raise TypeError("item(conn, queue, key) needs a key")
    return _sql.ITEM_BY_KEY, (queue_or_id, key)


async def schedule(
    conn: psycopg.AsyncConnection[Any],
    name: str,
    cron: str,
    queue: str,
    payload: Any = None,
    *,
    timezone: str = "UTC",
    catch_up: CatchUp = "latest",
    priority: int = 0,
    max_attempts: int = 25,
    group_key: str | None = None,
) -> bool:
    """Create or replace the schedule `name` (`workfence.work_schedule`, from 0.12.0), in the
    caller's transaction: each slot of `cron`, read in `timezone`, enqueues one item in `queue`
    with key `<name>@<slot as UTC ISO 8601>` (`nightly@2026-12-07T01:00:00Z`), `run_at` the slot,
    and `payload`, `priority`, `max_attempts` and `group_key` as `enqueue`'s. The items are
    claimed like any other: a `Worker` of the queue needs nothing more (its long poll fires due
    slots itself).

    Arguments: `name` 1..128 bytes; `cron` five fields (minute, hour, day of month, month, day of
    week), six with seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`;
    `payload` any JSON-serialisable value (None: `{}`); `timezone` an IANA zone name
    (`Europe/Berlin`); `catch_up` what a fire does with slots that passed unfired (`latest`: the
    most recent one, `all`: each, `none`: only one at most 60 s old); `max_attempts` 1..1000;
    `group_key` the items' serial group (None: none). A new schedule starts at its first slot
    after now; a replace with the same `cron` and `timezone` keeps its next slot, and keeps a
    paused schedule paused. Result: true if the schedule is new or one of its settings changed.
    Errors: `NullArgument` (22004), `InvalidArgument` (22023: a bad name or queue, a cron
    expression that does not parse or names no time, an unknown time zone, `catch_up` not
    `latest`, `all` or `none`, `max_attempts` out of range, a bad `group_key`), `ReadOnly`
    (25006), `NotPermitted` (42501: no `operate` grant covering the queue, or, when replacing,
    the schedule's current queue).
    """
    params = schedule_params(
        name, cron, queue, payload, timezone, catch_up, priority, max_attempts, group_key
    )
    row = await _one(conn, _sql.SCHEDULE, params)
    return bool(row[0])


async def unschedule(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    """Remove the schedule `name` (`workfence.work_unschedule`, from 0.12.0); the items it fired
    stay. Result: true if it existed (false changes nothing). Errors: `NullArgument` (22004),
    `InvalidArgument` (22023: a bad name), `ReadOnly` (25006), `NotPermitted` (42501)."""
    row = await _one(conn, _sql.UNSCHEDULE, (name,))
    return bool(row[0])


async def pause_schedule(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    """Pause the schedule `name` (`workfence.work_pause_schedule`, from 0.12.0): it fires
    nothing from the commit on, until `resume_schedule`; its queue and items are untouched (to
    stop the work itself, `pause` the queue). Result: true if it was not paused. Errors:
    `NullArgument` (22004), `InvalidArgument` (22023), `UndefinedObject` (42704: no schedule of
    that name), `ReadOnly` (25006), `NotPermitted` (42501)."""
    row = await _one(conn, _sql.PAUSE_SCHEDULE, (name,))
    return bool(row[0])


async def resume_schedule(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    """Resume the schedule `name` (`workfence.work_resume_schedule`, from 0.12.0): it fires
    again from the commit on; the slots that passed while it was paused are missed slots, which
    its `catch_up` decides on. Result: true if it was paused. Errors: `NullArgument` (22004),
    `InvalidArgument` (22023), `UndefinedObject` (42704: no schedule of that name), `ReadOnly`
    (25006), `NotPermitted` (42501)."""
    row = await _one(conn, _sql.RESUME_SCHEDULE, (name,))
    return bool(row[0])


async def fire_schedules(conn: psycopg.AsyncConnection[Any]) -> int:
    """Fire every due slot of every schedule that is not paused, now, in the caller's
    transaction (`workfence.work_fire_schedules`, from 0.12.0). Safe to call from any number of
    sessions at once, as often as wanted: a schedule another transaction is firing is passed
    over, and no slot is fired twice. Not needed where workers long-poll the schedules' queues or
    the maintenance worker runs: both fire due slots themselves. Result: the number of items
    enqueued (a slot whose key already exists enqueues none). Errors: `ReadOnly` (25006: a hot
    standby, or a read-only transaction)."""
    row = await _one(conn, _sql.FIRE_SCHEDULES, ())
    return int(row[0])


async def schedules(conn: psycopg.AsyncConnection[Any]) -> list[Schedule]:
    """Every schedule, by name, as the view `workfence.work_schedules` shows it (from 0.12.0);
    where queue grants are enforced, only those of queues the role may `read`. Result: a list of
    `Schedule`. Errors: `NotPermitted` (42501: no privilege on the view, which PUBLIC lacks)."""
    try:
        cur = await conn.execute(_sql.SCHEDULES)
        rows = await cur.fetchall()
    except psycopg.Error as error:
        _raise(error)
        raise  # unreachable: _raise always raises
    return [Schedule(*row) for row in rows]
