"""Integration tests of the enqueue and operator helpers, asyncio and sync, and of the error
mapping against the real server (WORKFENCE_TEST_DSN)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

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


async def test_enqueue_with_a_group_key(db: psycopg.AsyncConnection[Any], queue: str) -> None:
    made = await workfence.enqueue(db, queue, {"op": "debit"}, key="d1", group_key="customer-42")
    assert made.inserted
    plain = await workfence.enqueue(db, queue, key="d2")
    cur = await db.execute(
        "SELECT key, group_key FROM workfence.items WHERE queue = %s ORDER BY id", (queue,)
    )
    assert await cur.fetchall() == [("d1", "customer-42"), ("d2", None)]
    assert plain.inserted
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.enqueue(db, queue, group_key="")
    assert bad.value.sqlstate == "22023"


async def _limits(db: psycopg.AsyncConnection[Any], queue: str) -> tuple[Any, ...] | None:
    cur = await db.execute(
        "SELECT concurrency, rate, per FROM workfence.queues WHERE queue = %s", (queue,)
    )
    return await cur.fetchone()


async def test_limit_sets_and_lifts_the_queues_limits(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    assert await workfence.limit(db, queue, concurrency=5, rate=100, per=60) is None
    assert await _limits(db, queue) == (5, 100, timedelta(seconds=60))
    await workfence.limit(db, queue, rate=3, per=timedelta(milliseconds=500))
    assert await _limits(db, queue) == (None, 3, timedelta(milliseconds=500))
    await workfence.limit(db, queue, 2)
    assert await _limits(db, queue) == (2, None, None)  # no rate: no window kept
    await workfence.enqueue(db, queue)
    cur = await db.execute(
        "SELECT concurrency, rate FROM workfence.work_queue_stats WHERE queue = %s", (queue,)
    )
    assert await cur.fetchone() == (2, None)
    await workfence.limit(db, queue)  # both lifted
    limits = await _limits(db, queue)
    assert limits is None or limits[:2] == (None, None)
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.limit(db, queue, concurrency=0)
    assert bad.value.sqlstate == "22023" and "concurrency" in bad.value.message
    with pytest.raises(errors.InvalidArgument):
        await workfence.limit(db, queue, rate=1, per=timedelta(days=2))
    with pytest.raises(errors.NullArgument):
        await workfence.limit(db, queue, concurrency=1, per=None)  # type: ignore[arg-type]


async def _per_group(db: psycopg.AsyncConnection[Any], queue: str) -> Any:
    cur = await db.execute(
        "SELECT per_group FROM workfence.work_queue_stats WHERE queue = %s", (queue,)
    )
    row = await cur.fetchone()
    return None if row is None else row[0]


async def test_limit_sets_per_group_and_a_call_without_it_resets_it(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    await workfence.limit(db, queue, concurrency=5, per_group=3)
    assert await _per_group(db, queue) == 3
    assert await _limits(db, queue) == (5, None, None)
    await workfence.limit(db, queue, concurrency=5)  # a call sets every limit: per_group lifted
    assert await _per_group(db, queue) is None
    await workfence.limit(db, queue, per_group=10000)
    assert await _per_group(db, queue) == 10000
    for bad in (0, 10001):
        with pytest.raises(errors.InvalidArgument) as refused:
            await workfence.limit(db, queue, per_group=bad)
        assert refused.value.sqlstate == "22023" and "per_group" in refused.value.message
    with pytest.raises(errors.InvalidArgument):
        await workfence.limit(db, queue, per_group=2.5)  # type: ignore[arg-type]
    assert await _per_group(db, queue) == 10000
    await workfence.limit(db, queue)
    assert await _per_group(db, queue) is None


async def test_without_per_group_limit_works_against_a_0_11_0_database(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    name = f"workfence_py_0110_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE DATABASE {name}")
    try:
        old_dsn = make_conninfo(dsn, dbname=name)
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as old:
            await old.execute("CREATE EXTENSION pg_workfence VERSION '0.11.0'")
            await workfence.limit(old, queue, concurrency=2, rate=10, per=60)
            assert await _limits(old, queue) == (2, 10, timedelta(seconds=60))
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.limit(old, queue, per_group=2)
            assert missing.value.sqlstate == "42883"  # 0.11.0's work_limit has no per_group
        with psycopg.connect(old_dsn, autocommit=True) as old_sync:
            workfence.sync.limit(old_sync, queue, concurrency=1)
    finally:
        await db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_without_a_group_key_enqueue_works_against_a_0_9_0_database(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    name = f"workfence_py_090_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE DATABASE {name}")
    try:
        old_dsn = make_conninfo(dsn, dbname=name)
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as old:
            await old.execute("CREATE EXTENSION pg_workfence VERSION '0.9.0'")
            made = await workfence.enqueue(
                old, queue, {"n": 1}, key="k", priority=1, max_attempts=3, max_run=60
            )
            assert made.inserted
            info = await workfence.item(old, queue, "k")
            assert info is not None and info.max_run == timedelta(seconds=60)
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.enqueue(old, queue, group_key="g")
            assert missing.value.sqlstate == "42883"  # 0.9.0's work_enqueue has no group_key
        with psycopg.connect(old_dsn, autocommit=True) as old_sync:
            assert workfence.sync.enqueue(old_sync, queue, key="s").inserted
    finally:
        await db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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
        grouped = workfence.sync.enqueue(conn, queue, key="g", group_key="customer-1")
        row = conn.execute(
            "SELECT group_key FROM workfence.items WHERE id = %s", (grouped.id,)
        ).fetchone()
        assert row == ("customer-1",)
        assert workfence.sync.limit(conn, queue, concurrency=1, rate=10, per=60) is None
        row = conn.execute(
            "SELECT concurrency, rate, per FROM workfence.queues WHERE queue = %s", (queue,)
        ).fetchone()
        assert row == (1, 10, timedelta(seconds=60))
        workfence.sync.limit(conn, queue, per_group=2)
        row = conn.execute(
            "SELECT per_group FROM workfence.work_queue_stats WHERE queue = %s", (queue,)
        ).fetchone()
        assert row == (2,)
        workfence.sync.limit(conn, queue)
        with pytest.raises(errors.InvalidArgument):
            workfence.sync.limit(conn, queue, rate=0)


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
