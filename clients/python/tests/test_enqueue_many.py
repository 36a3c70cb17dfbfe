"""Integration tests of `enqueue_many` (`work_enqueue_many`, from 0.12.0), asyncio and sync,
against the real server (WORKFENCE_TEST_DSN): a row per item in the items' order, existing and
repeated keys, the shared options, claimability, one statement's atomicity, and the errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import workfence
from workfence import EnqueueItem, errors


async def _count(db: psycopg.AsyncConnection[Any], queue: str) -> int:
    cur = await db.execute("SELECT count(*) FROM workfence.items WHERE queue = %s", (queue,))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_enqueue_many_returns_a_row_per_item_in_order_existing_and_repeated_keys(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    existing = await workfence.enqueue(db, queue, {"n": "old"}, key="b")
    rows = await workfence.enqueue_many(
        db,
        queue,
        [
            EnqueueItem({"n": 1}, key="a"),
            EnqueueItem({"n": 2}, key="b"),  # the queue has it: returned, kept
            EnqueueItem({"n": 3}),  # no key: a UUIDv7
            EnqueueItem({"n": 4}, key="a"),  # repeats the first item's key
            EnqueueItem(key="z"),  # no payload: {}
        ],
        priority=2,
        max_attempts=3,
    )
    assert all(isinstance(r, workfence.Enqueued) for r in rows)
    assert [r.key for r in rows[:2]] + [r.key for r in rows[3:]] == ["a", "b", "a", "z"]
    assert len(rows[2].key) == 36 and rows[2].key not in ("a", "b", "z")
    assert [r.inserted for r in rows] == [True, False, True, False, True]
    assert rows[1] == workfence.Enqueued(id=existing.id, key="b", inserted=False)
    assert rows[3] == workfence.Enqueued(id=rows[0].id, key="a", inserted=False)
    assert len({rows[0].id, rows[1].id, rows[2].id, rows[4].id}) == 4
    assert await _count(db, queue) == 4

    kept = await workfence.item(db, queue, "b")
    assert kept is not None and kept.payload == {"n": "old"}  # keep: unchanged
    assert (kept.priority, kept.max_attempts) == (0, 25)
    first = await workfence.item(db, queue, "a")
    assert first is not None and first.payload == {"n": 1}  # the first of the call wins
    assert (first.priority, first.max_attempts, first.state) == (2, 3, "pending")
    generated = await workfence.item(db, rows[2].id)
    assert generated is not None and generated.key == rows[2].key
    assert generated.payload == {"n": 3}
    empty = await workfence.item(db, queue, "z")
    assert empty is not None and empty.payload == {}


async def test_enqueue_many_items_are_claimable_and_take_their_run_at_and_group(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    rows = await workfence.enqueue_many(
        db,
        queue,
        [
            EnqueueItem({"i": 0}, key="now-0"),
            EnqueueItem({"i": 1}, key="later", run_at=later),
            EnqueueItem({"i": 2}, key="grouped", group_key="customer-7"),
            # Keys travel as array elements: quotes, commas, braces, backslashes and the word
            # NULL come back as they were.
            EnqueueItem({"s": 'a "b", {c} \\ d'}, key='odd "key", {3} \\ ü'),
        ],
    )
    assert [r.key for r in rows] == ["now-0", "later", "grouped", 'odd "key", {3} \\ ü']
    odd = await workfence.item(db, queue, 'odd "key", {3} \\ ü')
    assert odd is not None and odd.payload == {"s": 'a "b", {c} \\ d'}
    assert all(r.inserted for r in rows)
    cur = await db.execute(
        "SELECT id FROM workfence.work_claim(%s, 'bulk-test', interval '30 s', 10)", (queue,)
    )
    claimed = {row[0] for row in await cur.fetchall()}
    assert claimed == {rows[0].id, rows[2].id, rows[3].id}  # all due, "later" not yet
    info = await workfence.item(db, queue, "later")
    assert info is not None and info.state == "pending"
    assert abs((info.run_at - later).total_seconds()) < 0.001
    cur = await db.execute("SELECT group_key FROM workfence.items WHERE id = %s", (rows[2].id,))
    assert await cur.fetchone() == ("customer-7",)


async def test_enqueue_many_on_conflict_replace_changes_the_existing_item(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    existing = await workfence.enqueue(db, queue, {"v": 1}, key="debounced")
    rows = await workfence.enqueue_many(
        db,
        queue,
        [EnqueueItem({"v": 2}, key="debounced"), EnqueueItem({"v": 9}, key="fresh")],
        on_conflict="replace",
    )
    assert rows == [
        workfence.Enqueued(id=existing.id, key="debounced", inserted=False),
        workfence.Enqueued(id=rows[1].id, key="fresh", inserted=True),
    ]
    info = await workfence.item(db, queue, "debounced")
    assert info is not None and info.payload == {"v": 2}
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.enqueue_many(
            db, queue, [EnqueueItem(key="x")], on_conflict="update"  # type: ignore[arg-type]
        )
    assert bad.value.sqlstate == "22023" and "on_conflict" in bad.value.message


async def test_enqueue_many_commits_with_the_callers_transaction(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await workfence.enqueue_many(conn, queue, [EnqueueItem(key="t1"), EnqueueItem()])
        await conn.rollback()
    assert [r.inserted for r in rows] == [True, True]
    assert await _count(db, queue) == 0
    assert await workfence.enqueue_many(db, queue, []) == []


async def test_enqueue_many_refusals_are_named_errors_and_enqueue_nothing(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    # One bad item refuses the whole call: the statement enqueues all its items or none.
    with pytest.raises(errors.InvalidArgument) as bad_key:
        await workfence.enqueue_many(db, queue, [EnqueueItem(key="fine"), EnqueueItem(key="")])
    assert bad_key.value.sqlstate == "22023" and "key" in bad_key.value.message
    assert isinstance(bad_key.value.__cause__, psycopg.errors.InvalidParameterValue)
    with pytest.raises(errors.InvalidArgument) as bad_attempts:
        await workfence.enqueue_many(db, queue, [EnqueueItem()], max_attempts=0)
    assert "max_attempts" in bad_attempts.value.message
    # Over 10000 items: 22023, nothing enqueued.
    with pytest.raises(errors.InvalidArgument) as too_many:
        await workfence.enqueue_many(db, queue, [EnqueueItem({"i": i}) for i in range(10001)])
    assert too_many.value.sqlstate == "22023" and "payloads" in too_many.value.message
    assert await _count(db, queue) == 0
    # Items that are not EnqueueItems are refused before anything is sent.
    for items in ([{"payload": 1}], "abc", {"k": EnqueueItem()}):
        with pytest.raises(errors.InvalidArgument):
            await workfence.enqueue_many(db, queue, items)  # type: ignore[arg-type]
    with pytest.raises(errors.NullArgument):
        await workfence.enqueue_many(db, None, [EnqueueItem()])  # type: ignore[arg-type]


async def test_unequal_arrays_of_work_enqueue_many_are_invalid_argument(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    # enqueue_many sends one element per item in every array, so it cannot send arrays of
    # unequal lengths; the server's refusal of them (22023) is the same InvalidArgument.
    try:
        await db.execute(
            "SELECT * FROM workfence.work_enqueue_many(%s, '{\"{}\",\"{}\"}'::jsonb[], "
            "keys => ARRAY['only-one'])",
            (queue,),
        )
    except psycopg.Error as error:
        translated = errors.translate(error)
    else:
        pytest.fail("work_enqueue_many with 2 payloads and 1 key did not raise")
    assert isinstance(translated, errors.InvalidArgument)
    assert translated.sqlstate == "22023" and "keys" in translated.message
    assert translated.detail and translated.hint


def test_enqueue_many_sync_twin(dsn: str, queue: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = workfence.sync.enqueue(conn, queue, {"n": 0}, key="s0")
        rows = workfence.sync.enqueue_many(
            conn,
            queue,
            (EnqueueItem({"n": n}, key=f"s{n}") for n in range(3)),  # any iterable
            priority=-1,
        )
        assert [(r.key, r.inserted) for r in rows] == [("s0", False), ("s1", True), ("s2", True)]
        assert rows[0].id == before.id
        claim = "SELECT key FROM workfence.work_claim(%s, 'bulk-sync', interval '30 s', 2)"
        # The claim takes priority -1 (the new items) before the single enqueue's 0.
        assert {row[0] for row in conn.execute(claim, (queue,)).fetchall()} == {"s1", "s2"}
        assert conn.execute(claim, (queue,)).fetchall() == [("s0",)]
        with pytest.raises(errors.InvalidArgument):
            workfence.sync.enqueue_many(conn, queue, [EnqueueItem(group_key="")])
