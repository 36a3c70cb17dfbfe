"""Integration tests of the worker runner against the real server (WORKFENCE_TEST_DSN): finish,
fenced transaction, failure and retry, lease loss by notification and by refused renew,
concurrency and the buffer bound, serial groups and queue limits, and shutdown."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

import workfence
from workfence import errors

from .conftest import eventually, running, state, wait_event

OWNER = "pytest/shared-owner"


def worker(dsn: str, queue: str, handler: Any, **settings: Any) -> workfence.Worker:
    """A worker with quick test settings (short poll, short grace) unless given."""
    settings.setdefault("owner", OWNER)
    settings.setdefault("poll_wait", 1)
    settings.setdefault("lease", 6)
    return workfence.Worker(dsn, queue, handler, **settings)


async def test_a_returned_value_finishes_the_item(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 7})
    seen: list[tuple[Any, ...]] = []

    async def handle(job: workfence.Job) -> Any:
        seen.append((job.id, job.key, job.payload, job.attempt, job.queue, job.owner))
        return {"output": job.payload["n"] ** 2}

    async with running(worker(dsn, queue, handle)):
        await eventually(
            lambda: _state_is(db, made.id, "done"), "the item finished by the handler's value"
        )
    st = await state(db, made.id)
    assert st[4] == {"output": 49}
    assert seen == [(made.id, made.key, {"n": 7}, 1, queue, OWNER)]
    epoch = st[2]
    assert f"claim id={made.id} epoch={epoch} attempt=1" in lines
    assert f"finish id={made.id} epoch={epoch} ok" in lines
    assert lines[-1] == "exit"


async def _state_is(db: psycopg.AsyncConnection[Any], item_id: int, wanted: str) -> bool:
    return (await state(db, item_id))[0] == wanted


async def test_the_fenced_transaction_commits_writes_with_the_finish(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 3})

    async def handle(job: workfence.Job) -> Any:
        async with job.transaction() as conn:
            # Inside: the item is still claimed (work_finish comes at the block's end).
            cur = await conn.execute(
                "SELECT state::text FROM workfence.items WHERE id = %s", (job.id,)
            )
            assert (await cur.fetchone()) == ("claimed",)
            await conn.execute(
                f"INSERT INTO {table} (item_id, epoch, output) VALUES (%s, %s, %s)",
                (job.id, job.epoch, job.payload["n"] ** 2),
            )
            job.result = {"output": 9}
        return "ignored after the transaction"

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "done"), "the fenced finish")
    st = await state(db, made.id)
    assert st[4] == {"output": 9}
    cur = await db.execute(f"SELECT item_id, epoch, output FROM {table}")
    assert await cur.fetchall() == [(made.id, st[2], 9)]


async def test_an_error_in_the_block_rolls_back_and_fails_the_item(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str
) -> None:
    made = await workfence.enqueue(db, queue, max_attempts=1)

    async def handle(job: workfence.Job) -> Any:
        async with job.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
            raise ValueError("broken after the write")

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "failed"), "the failed item")
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)
    info = await workfence.item(db, made.id)
    assert info is not None
    # Stored with its type, then the traceback's last frames (the handler's among them).
    first, _, frames = info.errors[-1]["error"].partition("\n")
    assert first == "ValueError: broken after the write"
    assert frames.startswith("Traceback (most recent call last):\n")
    assert 'raise ValueError("broken after the write")' in frames and ", in handle\n" in frames


async def test_a_raising_handler_fails_with_the_retry_policys_delay(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, max_attempts=3)
    asked: list[tuple[int, str]] = []

    def policy(attempt: int, error: BaseException) -> float:
        asked.append((attempt, str(error)))
        return 0.1

    async def handle(job: workfence.Job) -> Any:
        raise RuntimeError(f"attempt {job.attempt} fails")

    async with running(worker(dsn, queue, handle, retry=policy)):
        await eventually(lambda: _state_is(db, made.id, "failed"), "dead-lettered after 3")
    assert asked == [(1, "attempt 1 fails"), (2, "attempt 2 fails"), (3, "attempt 3 fails")]
    info = await workfence.item(db, made.id)
    assert info is not None and info.attempts == 3
    assert [e["error"].partition("\n")[0] for e in info.errors] == [
        f"RuntimeError: attempt {n} fails" for n in (1, 2, 3)
    ]
    assert sum(line.startswith(f"fail id={made.id} epoch=") for line in lines) == 3
    assert any(line.endswith("error=RuntimeError: attempt 3 fails") for line in lines)


async def test_a_plain_function_handler_runs_in_a_thread(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 4})
    threads: list[str] = []

    def handle(job: workfence.Job) -> Any:
        threads.append(threading.current_thread().name)
        return {"output": job.payload["n"] * 2}

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "done"), "the plain handler's finish")
    assert (await state(db, made.id))[4] == {"output": 8}
    assert threads and threads[0] != threading.main_thread().name


async def _lapse_and_reclaim(db: psycopg.AsyncConnection[Any], queue: str, item_id: int) -> int:
    """Wait until the item's lease has lapsed on the server's clock, then claim it under the
    same owner name (as another worker would); the new epoch."""
    await eventually(
        lambda: _lapsed(db, item_id), "the unrenewed lease lapsing on the server", timeout=20
    )
    cur = await db.execute(
        "SELECT id, epoch FROM workfence.work_claim(%s, %s, interval '1 minute', 1)",
        (queue, OWNER),
    )
    rows = await cur.fetchall()
    assert len(rows) == 1 and rows[0][0] == item_id
    return int(rows[0][1])


async def _lapsed(db: psycopg.AsyncConnection[Any], item_id: int) -> bool:
    return bool((await state(db, item_id))[5])


async def test_a_lease_lost_notification_cancels_the_async_handler(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, {"stall": True}, max_attempts=3)
    started, cancelled = asyncio.Event(), asyncio.Event()
    reasons: list[str | None] = []
    epochs: list[int] = []

    async def handle(job: workfence.Job) -> Any:
        if not job.payload.get("stall"):
            return {"next": True}
        job.stop_renewing()
        epochs.append(job.epoch)
        started.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            reasons.append(job.cancelled.reason)
            cancelled.set()
            raise
        async with job.transaction() as conn:  # never reached
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))

    async with running(worker(dsn, queue, handle, lease=1.5)):
        await wait_event(started, "the handler starting")
        ours = await _lapse_and_reclaim(db, queue, made.id)
        await wait_event(cancelled, "the handler cancelled on the notification", timeout=5)
        assert reasons == ["lease lost"]
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "the refused line")
        # The runner goes on serving.
        nxt = await workfence.enqueue(db, queue, {})
        await eventually(lambda: _state_is(db, nxt.id, "done"), "the next item finished")
    assert f"lease lost (notified) id={made.id} epoch={epochs[0]}" in lines
    st = await state(db, made.id)
    assert (st[0], st[1], st[2]) == ("claimed", OWNER, ours)  # untouched by the runner
    assert not any(
        line.startswith((f"finish id={made.id} ", f"fail id={made.id} ", f"release id={made.id} "))
        for line in lines
    )
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)


def _has(lines: list[str], wanted: str) -> Any:
    async def check() -> bool:
        return wanted in lines

    return check


async def test_a_refused_renew_sets_the_plain_handlers_cancel_flag(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, key="victim")
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    outcome: list[tuple[bool, str | None]] = []

    def handle(job: workfence.Job) -> Any:
        loop.call_soon_threadsafe(started.set)
        stopped = job.cancelled.wait(60)
        outcome.append((stopped, job.cancelled.reason))
        return {"too": "late"}

    async with running(worker(dsn, queue, handle, lease=1.5)):
        await wait_event(started, "the handler starting")
        assert await workfence.cancel(db, queue, "victim")  # the token is refused from now
        await eventually(_has(lines, f"renew id={made.id} refused"), "the refused renew")
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "abandoned")
        await eventually(_truthy(outcome), "the thread seeing the flag")
    assert outcome == [(True, "lease lost")]
    assert (await state(db, made.id))[0] == "cancelled"
    assert not any(line.startswith(f"finish id={made.id} ") for line in lines)


def _truthy(value: Any) -> Any:
    async def check() -> bool:
        return bool(value)

    return check


async def test_the_fenced_transaction_raises_lease_lost_for_a_dead_token(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, key="doomed")
    started, go = asyncio.Event(), asyncio.Event()
    raised: list[BaseException] = []

    async def handle(job: workfence.Job) -> Any:
        job.stop_renewing()  # so that only work_assert can find out
        started.set()
        await go.wait()
        try:
            async with job.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
        except errors.LeaseLost as error:
            raised.append(error)
            raise

    async with running(worker(dsn, queue, handle)):
        await wait_event(started, "the handler starting")
        assert await workfence.cancel(db, queue, "doomed")
        go.set()
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "refused")
    assert len(raised) == 1 and raised[0].sqlstate == "55000"
    assert raised[0].detail and "cancel" in raised[0].detail
    assert (await state(db, made.id))[0] == "cancelled"
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)


async def test_concurrency_and_the_buffer_bound(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    ids = [(await workfence.enqueue(db, queue, {"i": i})).id for i in range(9)]
    running_now = 0
    most_running = 0
    most_held: list[int] = []
    gate = asyncio.Event()
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    async def handle(job: workfence.Job) -> Any:
        nonlocal running_now, most_running
        running_now += 1
        most_running = max(most_running, running_now)
        cur = await probe.execute(
            "SELECT count(*) FROM workfence.items WHERE queue = %s AND state = 'claimed'",
            (queue,),
        )
        row = await cur.fetchone()
        most_held.append(int(row[0]) if row else 0)
        if running_now == 2:
            gate.set()
        await gate.wait()
        running_now -= 1
        return None

    try:
        async with running(worker(dsn, queue, handle, concurrency=2, batch_size=3)):
            await eventually(lambda: _all_done(db, ids), "all nine items finished", timeout=30)
    finally:
        await probe.close()
    assert most_running == 2
    # Never more than concurrency - 1 + batch_size = 4 items held.
    assert max(most_held) <= 4


async def _all_done(db: psycopg.AsyncConnection[Any], ids: list[int]) -> bool:
    cur = await db.execute(
        "SELECT count(*) FROM workfence.items WHERE id = ANY(%s) AND state = 'done'", (ids,)
    )
    row = await cur.fetchone()
    return row is not None and row[0] == len(ids)


async def test_a_groups_items_are_handed_out_one_at_a_time_in_order(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    first = await workfence.enqueue(db, queue, {"n": 1}, group_key="customer-42")
    second = await workfence.enqueue(db, queue, {"n": 2}, group_key="customer-42")
    events: list[str] = []
    in_group = 0
    most_in_group = 0
    first_running, let_first_go = asyncio.Event(), asyncio.Event()

    async def handle(job: workfence.Job) -> Any:
        nonlocal in_group, most_in_group
        if "n" not in job.payload:
            return None  # the ungrouped probe below
        in_group += 1
        most_in_group = max(most_in_group, in_group)
        events.append(f"start {job.payload['n']}")
        if job.id == first.id:
            first_running.set()
            await let_first_go.wait()
        events.append(f"end {job.payload['n']}")
        in_group -= 1
        return None

    async with running(worker(dsn, queue, handle, concurrency=4)):
        await wait_event(first_running, "the group's first item running")
        # An ungrouped item enqueued after the second: the worker (room for three more) claims
        # it, and a claim that hands it out would have handed out the second first (claim
        # order), had its group not held it back.
        probe = await workfence.enqueue(db, queue, {"probe": True})
        await eventually(
            lambda: _state_is(db, probe.id, "done"), "the ungrouped item done meanwhile"
        )
        st = await state(db, second.id)
        assert (st[0], st[3]) == ("pending", 0), "the second item waits for the first"
        let_first_go.set()
        await eventually(lambda: _state_is(db, second.id, "done"), "the second item done")
    assert events == ["start 1", "end 1", "start 2", "end 2"]
    assert most_in_group == 1
    done_first = await workfence.item(db, first.id)
    done_second = await workfence.item(db, second.id)
    assert done_first is not None and done_second is not None
    assert done_first.finished_at is not None and done_second.claimed_at is not None
    assert done_second.claimed_at >= done_first.finished_at  # the server's clock agrees


async def test_a_limit_caps_a_worker_of_concurrency_4_at_one_job_at_a_time(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    await workfence.limit(db, queue, concurrency=1)
    ids = [(await workfence.enqueue(db, queue, {"i": i})).id for i in range(4)]
    running_now = 0
    most_running = 0
    pair_arrived = 0
    pair_together = asyncio.Event()

    async def handle(job: workfence.Job) -> Any:
        nonlocal running_now, most_running, pair_arrived
        running_now += 1
        most_running = max(most_running, running_now)
        try:
            if job.payload.get("pair"):
                # After the limit is lifted: each of two items waits for the other to run.
                pair_arrived += 1
                if pair_arrived == 2:
                    pair_together.set()
                await pair_together.wait()
            else:
                await asyncio.sleep(0.2)  # holds the job, so that others would overlap it
        finally:
            running_now -= 1
        return None

    async with running(worker(dsn, queue, handle, concurrency=4)):
        await eventually(lambda: _all_done(db, ids), "all four items finished", timeout=30)
        assert most_running == 1
        # The same worker runs the queue's items side by side once the limit is lifted.
        await workfence.limit(db, queue)
        pair = [(await workfence.enqueue(db, queue, {"pair": True})).id for _ in range(2)]
        await eventually(lambda: _all_done(db, pair), "two items running at once", timeout=30)
    assert most_running == 2


async def test_stop_releases_buffered_items_and_lets_the_running_one_finish(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    ids = [(await workfence.enqueue(db, queue, {"i": i}, priority=i)).id for i in range(3)]
    started, go = asyncio.Event(), asyncio.Event()

    async def handle(job: workfence.Job) -> Any:
        started.set()
        await go.wait()
        return {"i": job.payload["i"]}

    w = worker(dsn, queue, handle, batch_size=3, shutdown_grace=30)
    task = asyncio.create_task(w.run())
    await wait_event(started, "the first handler starting")
    w.stop()
    # The buffered two are released at once, while the running one still runs.
    await eventually(lambda: _count(db, ids, "pending", 2), "the two buffered items released")
    assert (await state(db, ids[0]))[0] == "claimed"
    go.set()
    await asyncio.wait_for(task, 15)
    assert (await state(db, ids[0]))[0] == "done"
    for item_id in ids[1:]:
        st = await state(db, item_id)
        assert (st[0], st[3]) == ("pending", 0)  # the attempt given back
        assert f"release id={item_id} epoch={st[2]}" in lines
    assert lines[-1] == "exit"


async def _count(db: psycopg.AsyncConnection[Any], ids: list[int], wanted: str, n: int) -> bool:
    cur = await db.execute(
        "SELECT count(*) FROM workfence.items WHERE id = ANY(%s) AND state::text = %s",
        (ids, wanted),
    )
    row = await cur.fetchone()
    return row is not None and row[0] == n


async def test_after_the_grace_the_handler_is_cancelled_and_its_item_released(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue)
    in_block = asyncio.Event()
    reasons: list[str | None] = []
    locker = await psycopg.AsyncConnection.connect(dsn)

    async def handle(job: workfence.Job) -> Any:
        try:
            async with job.transaction() as conn:
                in_block.set()
                # Waits on the test's lock: the statement is cancelled with the task.
                await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
        except asyncio.CancelledError:
            reasons.append(job.cancelled.reason)
            raise

    try:
        await locker.execute(f"LOCK TABLE {table} IN SHARE MODE")
        w = worker(dsn, queue, handle, shutdown_grace=0.3)
        task = asyncio.create_task(w.run())
        await wait_event(in_block, "the handler in its fenced transaction")
        w.stop()
        await asyncio.wait_for(task, 15)
    finally:
        await locker.rollback()
        await locker.close()
    assert reasons == ["shutdown"]
    st = await state(db, made.id)
    assert (st[0], st[3]) == ("pending", 0)
    assert f"release id={made.id} epoch={st[2]}" in lines
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)


async def test_stop_cancels_the_long_poll(dsn: str, queue: str) -> None:
    w = worker(f"{dsn} application_name={queue}", queue, lambda job: None, poll_wait=600)
    task = asyncio.create_task(w.run())
    # Wait for the long poll to be waiting in the server.
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        await eventually(lambda: _polling(probe, queue), "the long poll waiting in the server")
    finally:
        await probe.close()
    loop = asyncio.get_running_loop()
    began = loop.time()
    w.stop()
    await asyncio.wait_for(task, 10)
    assert loop.time() - began < 5


async def _polling(probe: psycopg.AsyncConnection[Any], queue: str) -> bool:
    cur = await probe.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
        "   AND query LIKE '%%work_claim%%' AND application_name = %s",
        (queue,),
    )
    row = await cur.fetchone()
    return row is not None and row[0] >= 1


SCRIPT = """
import logging, sys
import workfence
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
workfence.Worker(sys.argv[1], sys.argv[2], lambda job: None, poll_wait=600).run_sync()
"""


async def test_run_sync_stops_on_sigterm(dsn: str, queue: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        f"{dsn} application_name={queue}",
        queue,
        stdout=asyncio.subprocess.PIPE,
    )
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        await eventually(lambda: _polling(probe, queue), "the long poll waiting in the server")
    finally:
        await probe.close()
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0
    assert out.decode().splitlines()[-1] == "exit"


# ------------------------------------------------------------ a handler that will not stop


async def test_a_handler_swallowing_cancellation_is_abandoned_at_shutdown(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 1})
    started, go = asyncio.Event(), asyncio.Event()
    cancels: list[str | None] = []
    after: list[Any] = []
    me: list[asyncio.Task[Any]] = []

    async def handle(job: workfence.Job) -> Any:
        me.append(asyncio.current_task())  # type: ignore[arg-type]
        started.set()
        while not go.is_set():
            try:
                await go.wait()
            except asyncio.CancelledError:  # the mistake the runner must survive
                cancels.append(job.cancelled.reason)
        try:
            async with job.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
        except errors.LeaseLost as error:
            after.append(error)
        return {"late": True}

    w = worker(dsn, queue, handle, shutdown_grace=0.2)
    task = asyncio.create_task(w.run())
    await wait_event(started, "the handler starting")
    handler_task = me[0]
    w.stop()
    try:
        # run() returns although the handler is still running.
        await asyncio.wait_for(asyncio.shield(task), 10)
        assert not handler_task.done()
        assert cancels == ["shutdown"]
        st = await state(db, made.id)
        assert (st[0], st[3]) == ("pending", 0)  # released now, the attempt given back
        assert f"release id={made.id} epoch={st[2]}" in lines
        assert lines[-1] == "exit"
    finally:
        go.set()
        await asyncio.wait_for(handler_task, 10)
    # Its later fenced transaction is refused, its result ignored.
    assert len(after) == 1 and after[0].sqlstate == "55000"
    assert (await state(db, made.id))[0] == "pending"
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)
    assert not any(line.startswith(f"finish id={made.id} ") for line in lines)


async def test_a_handler_swallowing_cancellation_in_its_transaction_is_abandoned(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 1})
    in_block, go = asyncio.Event(), asyncio.Event()
    ended: list[BaseException] = []
    me: list[asyncio.Task[Any]] = []

    async def handle(job: workfence.Job) -> Any:
        me.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            async with job.transaction() as conn:  # holds the item's row lock
                await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
                in_block.set()
                while not go.is_set():
                    try:
                        await go.wait()
                    except asyncio.CancelledError:
                        pass
                await conn.execute("SELECT 1")
        except BaseException as error:  # noqa: BLE001 - recorded for the test
            ended.append(error)
            raise

    w = worker(dsn, queue, handle, shutdown_grace=0.2)
    task = asyncio.create_task(w.run())
    await wait_event(in_block, "the handler in its fenced transaction")
    handler_task = me[0]
    w.stop()
    try:
        await asyncio.wait_for(asyncio.shield(task), 10)
        st = await state(db, made.id)
        assert (st[0], st[3]) == ("pending", 0)  # released: the block's lock is gone
        assert f"release id={made.id} epoch={st[2]}" in lines
        cur = await db.execute(f"SELECT count(*) FROM {table}")
        assert await cur.fetchone() == (0,)  # the block's write rolled back
        assert lines[-1] == "exit"
    finally:
        go.set()
        await asyncio.wait_for(asyncio.wait({handler_task}), 10)
    assert len(ended) == 1  # its connection is closed: the block cannot go on


STUBBORN = """
import asyncio, logging, sys, threading
import workfence
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")

async def stubborn_async(job):
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

def stubborn_thread(job):
    threading.Event().wait()

handler = stubborn_async if sys.argv[3] == "async" else stubborn_thread
workfence.Worker(sys.argv[1], sys.argv[2], handler, poll_wait=1, shutdown_grace=0.2).run_sync()
"""


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_run_sync_exits_when_a_handler_ignores_the_shutdown(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, kind: str
) -> None:
    made = await workfence.enqueue(db, queue)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", STUBBORN, dsn, queue, kind, stdout=asyncio.subprocess.PIPE
    )
    try:
        await eventually(lambda: _state_is(db, made.id, "claimed"), "the item claimed")
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    st = await state(db, made.id)
    assert (st[0], st[3]) == ("pending", 0)
    text = out.decode().splitlines()
    assert f"release id={made.id} epoch={st[2]}" in text
    assert text[-1] == "exit"


# ---------------------------------------------------------------- results that are not JSON


@pytest.mark.parametrize(
    "value",
    [{"x": object()}, {1, 2}, float("nan"), {"s": "a\x00b"}],
    ids=["object", "set", "nan", "nul"],
)
async def test_a_result_that_is_not_json_fails_the_item(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str], value: Any
) -> None:
    made = await workfence.enqueue(db, queue, max_attempts=1)

    async def handle(job: workfence.Job) -> Any:
        return value

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "failed"), "the item failed")
    info = await workfence.item(db, made.id)
    assert info is not None
    assert info.errors[-1]["error"].startswith("ValueError: result is not JSON: ")
    assert any(line.startswith(f"fail id={made.id} ") for line in lines)


async def test_a_fenced_result_that_is_not_json_rolls_back_and_fails(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str
) -> None:
    made = await workfence.enqueue(db, queue, max_attempts=1)

    async def handle(job: workfence.Job) -> Any:
        async with job.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
            job.result = {"when": object()}

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "failed"), "the item failed")
    info = await workfence.item(db, made.id)
    assert info is not None
    assert info.errors[-1]["error"].startswith("ValueError: result is not JSON: ")
    cur = await db.execute(f"SELECT count(*) FROM {table}")
    assert await cur.fetchone() == (0,)


# ------------------------------------------------------------- claim errors that do not heal


async def test_a_database_without_the_extension_ends_run_with_the_error(
    dsn: str, queue: str, lines: list[str]
) -> None:
    other = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")  # no extension there
    w = worker(other, queue, lambda job: None)
    with pytest.raises(errors.WorkfenceError) as caught:
        await asyncio.wait_for(w.run(), 15)
    assert caught.value.sqlstate == "3F000"
    assert caught.value.hint and "CREATE EXTENSION pg_workfence" in caught.value.hint
    assert sum(line.startswith("claim error=") for line in lines) == 1  # not retried
    assert lines[-1].startswith("exit error=") and "workfence" in lines[-1]


async def test_a_missing_grant_ends_run_with_the_error(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    role = f"pytest_nobody_{uuid.uuid4().hex[:8]}"
    await db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        w = worker(psycopg.conninfo.make_conninfo(dsn, user=role), queue, lambda job: None)
        with pytest.raises(errors.NotPermitted) as caught:
            await asyncio.wait_for(w.run(), 15)
    finally:
        await db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert caught.value.sqlstate == "42501"
    assert lines[-1].startswith("exit error=")


async def test_a_terminated_claim_connection_is_reconnected(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    w = worker(f"{dsn} application_name={queue}", queue, lambda job: {"ok": True})
    async with running(w):
        await eventually(lambda: _polling(db, queue), "the long poll waiting in the server")
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND query LIKE '%%work_claim%%'",
            (queue,),
        )
        await eventually(
            lambda: _truthy([x for x in lines if x.startswith("reconnect claim in ")])(),
            "the failed claim logged",
        )
        made = await workfence.enqueue(db, queue)
        await eventually(lambda: _state_is(db, made.id, "done"), "the next item finished")
    assert lines[-1] == "exit"
