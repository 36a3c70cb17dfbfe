"""Integration tests of the schedules (from 0.12.0) through the library, asyncio and sync,
against the real server (WORKFENCE_TEST_DSN): a schedule made with `schedule` shows in
`schedules()`, a due slot fires once with the documented key and a `Worker` claims its item (also
when only the worker's long poll fires it), pause and resume, and the errors.

A slot is made due without waiting by moving the schedule's `next_slot` a second into the past
(as superuser, on the table); the expressions are yearly, so no slot comes due by itself. The
tests run one at a time, so `fire_schedules()` counts only the slot the test made due.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

import workfence
from workfence import errors

from .conftest import eventually, running

YEARLY = "0 0 1 1 *"


@pytest.fixture
async def name(db: psycopg.AsyncConnection[Any]) -> AsyncIterator[str]:
    """A schedule name no other test uses; the schedule is removed at the end."""
    value = f"pytest-schedule-{uuid.uuid4().hex[:12]}"
    try:
        yield value
    finally:
        await workfence.unschedule(db, value)


async def make_due(db: psycopg.AsyncConnection[Any], name: str) -> datetime:
    """Move the schedule's next slot a second into the past (whole seconds, as slots are), as
    though it had come due; returns that slot."""
    cur = await db.execute(
        "UPDATE workfence.schedules"
        "   SET next_slot = date_trunc('second', clock_timestamp()) - interval '1 second',"
        "       last_slot = NULL"
        " WHERE name = %s RETURNING next_slot",
        (name,),
    )
    row = await cur.fetchone()
    assert row is not None, f"no schedule {name}"
    slot: datetime = row[0]
    return slot


def slot_key(name: str, slot: datetime) -> str:
    """The documented key of a slot's item: `<name>@<slot as UTC ISO 8601>`."""
    return f"{name}@{slot.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


async def shown(db: psycopg.AsyncConnection[Any], name: str) -> workfence.Schedule | None:
    """The schedule of `name` as `schedules()` lists it, or None."""
    found = [s for s in await workfence.schedules(db) if s.name == name]
    assert len(found) <= 1
    return found[0] if found else None


async def keys(db: psycopg.AsyncConnection[Any], queue: str) -> list[str]:
    """The keys of the queue's items, oldest first."""
    cur = await db.execute("SELECT key FROM workfence.items WHERE queue = %s ORDER BY id", (queue,))
    return [row[0] for row in await cur.fetchall()]


async def test_a_schedule_shows_in_schedules_and_a_replace_says_whether_it_changed(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, name: str
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        assert await workfence.schedule(conn, name, "0 2 * * *", queue)
        await conn.rollback()
    assert await shown(db, name) is None, "rolled back with the caller's transaction"

    before = datetime.now(UTC)
    assert await workfence.schedule(
        db,
        name,
        "0 2 * * *",
        queue,
        {"kind": "daily"},
        timezone="Europe/Berlin",
        priority=2,
        max_attempts=3,
        group_key="reports",
    )
    row = await shown(db, name)
    assert row is not None
    assert (row.cron, row.timezone, row.queue, row.catch_up, row.paused) == (
        "0 2 * * *",
        "Europe/Berlin",
        queue,
        "latest",
        False,
    )
    assert (row.payload, row.priority, row.max_attempts, row.group_key) == (
        {"kind": "daily"},
        2,
        3,
        "reports",
    )
    assert (row.last_slot, row.last_item_id, row.last_fired_at) == (None, None, None)
    # The first slot after now: 02:00 in Berlin, within the next day.
    assert row.next_slot is not None and before < row.next_slot
    assert (row.next_slot - before).total_seconds() <= 25 * 3600
    local = row.next_slot.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.second) == (2, 0, 0)

    same = await workfence.schedule(
        db,
        name,
        "0 2 * * *",
        queue,
        {"kind": "daily"},
        timezone="Europe/Berlin",
        priority=2,
        max_attempts=3,
        group_key="reports",
    )
    assert same is False, "the same settings change nothing"
    assert await workfence.schedule(db, name, "0 2 * * *", queue, catch_up="all")
    row = await shown(db, name)
    assert row is not None
    assert (row.catch_up, row.timezone, row.payload, row.group_key) == ("all", "UTC", {}, None)

    assert await workfence.unschedule(db, name)
    assert not await workfence.unschedule(db, name)
    assert await shown(db, name) is None


async def test_a_due_slot_fires_one_item_with_the_documented_key_that_a_worker_claims(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, name: str
) -> None:
    assert await workfence.schedule(db, name, YEARLY, queue, {"report": "yearly"}, priority=1)
    slot = await make_due(db, name)
    assert await workfence.fire_schedules(db) == 1
    assert await workfence.fire_schedules(db) == 0, "a slot is fired once"
    key = slot_key(name, slot)
    assert await keys(db, queue) == [key]
    info = await workfence.item(db, queue, key)
    assert info is not None
    assert (info.state, info.run_at, info.payload, info.priority) == (
        "pending",
        slot,
        {"report": "yearly"},
        1,
    )
    row = await shown(db, name)
    assert row is not None
    assert (row.last_slot, row.last_item_id) == (slot, info.id)
    assert row.last_fired_at is not None
    assert row.next_slot is not None and row.next_slot > slot
    next_local = row.next_slot.astimezone(UTC)
    assert (next_local.month, next_local.day, next_local.hour) == (1, 1, 0)

    seen: list[tuple[int, str, Any]] = []

    async def handle(job: workfence.Job) -> Any:
        seen.append((job.id, job.key, job.payload))
        return {"ok": True}

    worker = workfence.Worker(dsn, queue, handle, owner="pytest/schedules", poll_wait=1)
    async with running(worker):
        await eventually(lambda: _done(db, info.id), "the scheduled item done by the worker")
    assert seen == [(info.id, key, {"report": "yearly"})]


async def _done(db: psycopg.AsyncConnection[Any], item_id: int) -> bool:
    info = await workfence.item(db, item_id)
    return info is not None and info.state == "done"


async def test_a_workers_long_poll_fires_a_due_slot_itself(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, name: str
) -> None:
    assert await workfence.schedule(db, name, YEARLY, queue, {"n": 1})
    slot = await make_due(db, name)
    key = slot_key(name, slot)
    seen: list[str] = []

    async def handle(job: workfence.Job) -> Any:
        seen.append(job.key)
        return None

    # No fire_schedules: the worker's claim of the queue fires the due slot.
    worker = workfence.Worker(dsn, queue, handle, owner="pytest/schedules", poll_wait=1)
    async with running(worker):

        async def finished() -> bool:
            info = await workfence.item(db, queue, key)
            return info is not None and info.state == "done"

        await eventually(finished, "the slot fired by the worker's claim, and done")
    assert seen == [key]
    row = await shown(db, name)
    assert row is not None and row.last_slot == slot


async def test_pause_and_resume_a_schedule(
    db: psycopg.AsyncConnection[Any], queue: str, name: str
) -> None:
    assert await workfence.schedule(db, name, YEARLY, queue)
    assert await workfence.pause_schedule(db, name)
    assert not await workfence.pause_schedule(db, name), "already paused"
    row = await shown(db, name)
    assert row is not None and row.paused
    slot = await make_due(db, name)
    assert await workfence.fire_schedules(db) == 0, "a paused schedule fires nothing"
    assert await keys(db, queue) == []
    assert not await workfence.schedule(db, name, YEARLY, queue), "unchanged"
    row = await shown(db, name)
    assert row is not None and row.paused, "a replace keeps the pause"

    assert await workfence.resume_schedule(db, name)
    assert not await workfence.resume_schedule(db, name), "not paused"
    row = await shown(db, name)
    assert row is not None and not row.paused
    # The slot missed while paused: catch_up 'latest' fires it.
    assert await workfence.fire_schedules(db) == 1
    assert await keys(db, queue) == [slot_key(name, slot)]


async def test_bad_arguments_and_unknown_schedules_raise_the_named_errors(
    db: psycopg.AsyncConnection[Any], queue: str, name: str
) -> None:
    with pytest.raises(errors.InvalidArgument) as bad_cron:
        await workfence.schedule(db, name, "every day at two", queue)
    assert bad_cron.value.sqlstate == "22023"
    assert isinstance(bad_cron.value.__cause__, psycopg.errors.InvalidParameterValue)
    assert "cron" in str(bad_cron.value)
    with pytest.raises(errors.InvalidArgument) as bad_zone:
        await workfence.schedule(db, name, YEARLY, queue, timezone="Mars/Olympus_Mons")
    assert bad_zone.value.sqlstate == "22023"
    with pytest.raises(errors.InvalidArgument) as bad_catch_up:
        await workfence.schedule(
            db, name, YEARLY, queue, catch_up="sometimes"  # type: ignore[arg-type]
        )
    assert bad_catch_up.value.sqlstate == "22023"
    with pytest.raises(errors.NullArgument) as null:
        await workfence.schedule(db, None, YEARLY, queue)  # type: ignore[arg-type]
    assert null.value.sqlstate == "22004"
    assert await shown(db, name) is None, "nothing was made"

    with pytest.raises(errors.UndefinedObject) as unknown:
        await workfence.pause_schedule(db, name)
    assert unknown.value.sqlstate == "42704"
    with pytest.raises(errors.UndefinedObject):
        await workfence.resume_schedule(db, name)
    assert not await workfence.unschedule(db, name)


def test_sync_twins(dsn: str, queue: str) -> None:
    name = f"pytest-schedule-{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            assert workfence.sync.schedule(conn, name, YEARLY, queue, {"n": 2}, timezone="UTC")
            found = [s for s in workfence.sync.schedules(conn) if s.name == name]
            assert [(s.queue, s.payload, s.paused) for s in found] == [(queue, {"n": 2}, False)]
            assert workfence.sync.pause_schedule(conn, name)
            assert workfence.sync.resume_schedule(conn, name)
            row = conn.execute(
                "UPDATE workfence.schedules"
                "   SET next_slot = date_trunc('second', clock_timestamp()) - interval '1 second',"
                "       last_slot = NULL"
                " WHERE name = %s RETURNING next_slot",
                (name,),
            ).fetchone()
            assert row is not None
            assert workfence.sync.fire_schedules(conn) == 1
            info = workfence.sync.item(conn, queue, slot_key(name, row[0]))
            assert info is not None and info.payload == {"n": 2}
            with pytest.raises(errors.InvalidArgument):
                workfence.sync.schedule(conn, name, "61 * * * *", queue)
            with pytest.raises(errors.UndefinedObject):
                workfence.sync.pause_schedule(conn, f"{name}-missing")
            assert workfence.sync.unschedule(conn, name)
            assert not [s for s in workfence.sync.schedules(conn) if s.name == name]
        finally:
            workfence.sync.unschedule(conn, name)
