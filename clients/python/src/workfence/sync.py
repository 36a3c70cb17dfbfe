"""Enqueue and operator calls on a synchronous `psycopg.Connection`: the twins of
`workfence.operations` (same arguments, results and errors), for code that is not asyncio, e.g. a
web request handler enqueueing in its own transaction. Nothing is committed here."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from time import monotonic
from typing import Any

import psycopg

from . import _sql, tracing
from .errors import translate
from .operations import (
    TAKES_TRACE,
    known_takes_trace,
    CatchUp,
    Enqueued,
    EnqueueItem,
    ItemInfo,
    OnConflict,
    OnParentFailure,
    Outcome,
    Schedule,
    WorkflowItem,
    await_call_wait,
    await_wait,
    enqueue_call,
    enqueue_many_call,
    item_info,
    item_query,
    limit_call,
    schedule_params,
)

__all__ = [
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
    "schedule",
    "unschedule",
    "pause_schedule",
    "resume_schedule",
    "fire_schedules",
    "schedules",
]


def _one(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> Any:
    """The first row of `query` (None when there is none), errors translated."""
    try:
        return conn.execute(query, params).fetchone()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error


def enqueue(
    conn: psycopg.Connection[Any],
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
    """`workfence.operations.enqueue` on a synchronous connection (see there): `trace` given
    is sent unchanged; None sends the current OpenTelemetry span's context, if any; `after` and
    `on_parent_failure` (workflows) are sent only when given."""
    if trace is None:
        trace = _current_trace(conn)
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
    row = _one(conn, query, params)
    return Enqueued(id=row[0], key=row[1], inserted=row[2])


def enqueue_many(
    conn: psycopg.Connection[Any],
    queue: str,
    items: Iterable[EnqueueItem],
    *,
    priority: int = 0,
    max_attempts: int = 25,
    on_conflict: OnConflict | None = None,
) -> list[Enqueued]:
    """`workfence.operations.enqueue_many` on a synchronous connection (see there): one
    `work_enqueue_many` statement, a list of `Enqueued` in the items' order."""
    query, params = enqueue_many_call(queue, items, priority, max_attempts, on_conflict)
    try:
        rows = conn.execute(query, params).fetchall()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
    return [Enqueued(id=row[0], key=row[1], inserted=row[2]) for row in rows]


def _current_trace(conn: psycopg.Connection[Any]) -> str | None:
    """The trace an enqueue given no `trace=` sends: the current span's `traceparent`, when
    there is one and the connection's database takes it (asked once per connection); else
    None."""
    traceparent = tracing.current_traceparent()
    if traceparent is None:
        return None
    takes = known_takes_trace(conn)
    if takes is None:
        takes = bool(_one(conn, _sql.ENQUEUE_TAKES_TRACE, ())[0])
        TAKES_TRACE[conn] = (takes, monotonic())
    return traceparent if takes else None


def retry(
    conn: psycopg.Connection[Any], queue: str, key: str, run_at: datetime | None = None
) -> bool:
    """`workfence.operations.retry` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.RETRY, (queue, key, run_at))[0])


def reschedule(conn: psycopg.Connection[Any], queue: str, key: str, run_at: datetime) -> bool:
    """`workfence.operations.reschedule` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.RESCHEDULE, (queue, key, run_at))[0])


def cancel(conn: psycopg.Connection[Any], queue: str, key: str) -> bool:
    """`workfence.operations.cancel` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.CANCEL, (queue, key))[0])


def pause(conn: psycopg.Connection[Any], queue: str) -> bool:
    """`workfence.operations.pause` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.PAUSE, (queue,))[0])


def resume(conn: psycopg.Connection[Any], queue: str) -> bool:
    """`workfence.operations.resume` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.RESUME, (queue,))[0])


def limit(
    conn: psycopg.Connection[Any],
    queue: str,
    concurrency: int | None = None,
    rate: int | None = None,
    per: float | timedelta = 1.0,
    per_group: int | None = None,
) -> None:
    """`workfence.operations.limit` on a synchronous connection (see there)."""
    query, params = limit_call(queue, concurrency, rate, per, per_group)
    _one(conn, query, params)


def item(
    conn: psycopg.Connection[Any], queue_or_id: str | int, key: str | None = None
) -> ItemInfo | None:
    """`workfence.operations.item` on a synchronous connection (see there)."""
    query, params = item_query(queue_or_id, key)
    try:
        cur = conn.execute(query, params)
        row = cur.fetchone()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
    if row is None:
        return None
    return item_info([column.name for column in cur.description or ()], row)


def workflow(conn: psycopg.Connection[Any], item_id: int) -> list[WorkflowItem]:
    """`workfence.operations.workflow` on a synchronous connection (see there)."""
    try:
        rows = conn.execute(_sql.WORKFLOW, (item_id,)).fetchall()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
    return [WorkflowItem(*row) for row in rows]


def await_result(
    conn: psycopg.Connection[Any],
    queue: str,
    key: str,
    *,
    timeout: float | timedelta | None = 30.0,
) -> Outcome | None:
    """`workfence.operations.await_result` on a synchronous connection (see there): blocks the
    calling thread until the item's outcome is known or `timeout` passes."""
    seconds = await_wait(timeout)
    deadline = None if seconds is None else monotonic() + seconds
    while True:
        row = _one(conn, _sql.AWAIT, (queue, key, await_call_wait(deadline)))
        if row is None:
            return None
        outcome = Outcome(state=row[0], result=row[1], last_error=row[2])
        if outcome.finished or (deadline is not None and monotonic() >= deadline):
            return outcome


def schedule(
    conn: psycopg.Connection[Any],
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
    """`workfence.operations.schedule` on a synchronous connection (see there)."""
    params = schedule_params(
        name, cron, queue, payload, timezone, catch_up, priority, max_attempts, group_key
    )
    return bool(_one(conn, _sql.SCHEDULE, params)[0])


def unschedule(conn: psycopg.Connection[Any], name: str) -> bool:
    """`workfence.operations.unschedule` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.UNSCHEDULE, (name,))[0])


def pause_schedule(conn: psycopg.Connection[Any], name: str) -> bool:
    """`workfence.operations.pause_schedule` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.PAUSE_SCHEDULE, (name,))[0])


def resume_schedule(conn: psycopg.Connection[Any], name: str) -> bool:
    """`workfence.operations.resume_schedule` on a synchronous connection (see there)."""
    return bool(_one(conn, _sql.RESUME_SCHEDULE, (name,))[0])


def fire_schedules(conn: psycopg.Connection[Any]) -> int:
    """`workfence.operations.fire_schedules` on a synchronous connection (see there)."""
    return int(_one(conn, _sql.FIRE_SCHEDULES, ())[0])


def schedules(conn: psycopg.Connection[Any]) -> list[Schedule]:
    """`workfence.operations.schedules` on a synchronous connection (see there)."""
    try:
        rows = conn.execute(_sql.SCHEDULES).fetchall()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
    return [Schedule(*row) for row in rows]
