"""Integration tests of the enqueue and operator helpers, asyncio and sync, and of the error
mapping against the real server (WORKFENCE_TEST_DSN)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import workfence
from workfence import errors


async def test_enqueue_returns_the_item_and_repeats_safely(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    first = await workfence.enqueue(
        db, queue, {"n": 1}, key="k1", priority=3, max_attempts=2, max_run=60
    )
    assert first.inserted and first.key == "k1"
    again = await workfence.enqueue(db, queue, {"n": 2}, key="k1")
    assert again == workfence.Enqueued(id=first.id, key="k1", inserted=False)
    info = await workfence.item(db, queue, "k1")
    assert info is not None
    assert (info.id, info.state, info.priority, info.max_attempts) == (first.id, "pending", 3, 2)
    assert info.payload == {"n": 1}
    assert info.max_run == timedelta(seconds=60)
    assert await workfence.item(db, first.id) == info
    assert await workfence.item(db, queue, "missing") is None


async def test_enqueue_generates_a_key_and_defaults_the_payload(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    made = await workfence.enqueue(db, queue)
    assert made.inserted and len(made.key) == 36
    info = await workfence.item(db, made.id)
    assert info is not None and info.payload == {}


async def test_enqueue_in_the_callers_transaction_rolls_back_with_it(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        made = await workfence.enqueue(conn, queue, {"n": 1}, key="tx")
        await conn.rollback()
    assert made.inserted
    assert await workfence.item(db, queue, "tx") is None


async def test_operator_calls(db: psycopg.AsyncConnection[Any], queue: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    await workfence.enqueue(db, queue, key="a")
    assert await workfence.reschedule(db, queue, "a", later)
    info = await workfence.item(db, queue, "a")
    assert info is not None and abs((info.run_at - later).total_seconds()) < 0.001
    assert await workfence.cancel(db, queue, "a")
    assert not await workfence.cancel(db, queue, "a")
    assert await workfence.retry(db, queue, "a")
    info = await workfence.item(db, queue, "a")
    assert info is not None and info.state == "pending"
    assert await workfence.pause(db, queue)
    assert not await workfence.pause(db, queue)
    assert await workfence.resume(db, queue)
    assert not await workfence.resume(db, queue)


def test_sync_twins(dsn: str, queue: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = workfence.sync.enqueue(conn, queue, {"n": 5}, key="s")
        assert made.inserted
        assert workfence.sync.enqueue(conn, queue, key="s").inserted is False
        assert workfence.sync.reschedule(conn, queue, "s", datetime.now(UTC))
        assert workfence.sync.pause(conn, queue) and workfence.sync.resume(conn, queue)
        assert workfence.sync.cancel(conn, queue, "s")
        assert workfence.sync.retry(conn, queue, "s")
        info = workfence.sync.item(conn, queue, "s")
        assert info is not None and (info.id, info.state) == (made.id, "pending")
        with pytest.raises(errors.InvalidArgument):
            workfence.sync.enqueue(conn, queue, max_attempts=0)


async def test_server_errors_arrive_as_named_classes(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.enqueue(db, queue, max_attempts=0)
    assert bad.value.sqlstate == "22023"
    assert "max_attempts" in bad.value.message
    assert isinstance(bad.value.__cause__, psycopg.errors.InvalidParameterValue)
    with pytest.raises(errors.NullArgument):
        await workfence.pause(db, None)  # type: ignore[arg-type]


async def test_lease_lost_keeps_the_servers_detail_and_hint(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    made = await workfence.enqueue(db, queue)
    try:
        async with db.transaction():
            await db.execute("SELECT workfence.work_assert(%s, 'nobody', 1)", (made.id,))
    except psycopg.Error as error:
        translated = errors.translate(error)
    else:
        pytest.fail("work_assert of a token never handed out did not raise")
    assert isinstance(translated, errors.LeaseLost)
    assert translated.message.startswith("lease lost")
    assert translated.detail and translated.hint
    assert translated.detail in str(translated) and translated.hint in str(translated)
