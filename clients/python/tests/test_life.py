"""Integration tests of a job's whole life (from 0.12.0) against the real server
(WORKFENCE_TEST_DSN): `enqueue(..., on_conflict=)`, `job.progress()` and `job.checkpoint`,
`await_result`, `job.fencing_token`, `job.guard()`, errors stored with their type and
traceback, and a settle whose answer was lost sent again with the same token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import workfence
from workfence import _sql, errors, operations
from workfence import worker as worker_module

from .conftest import eventually, running, state, wait_event

OWNER = "pytest/shared-owner"


def worker(dsn: str, queue: str, handler: Any, **settings: Any) -> workfence.Worker:
    """A worker with quick test settings (short poll) unless given."""
    settings.setdefault("owner", OWNER)
    settings.setdefault("poll_wait", 1)
    settings.setdefault("lease", 6)
    return workfence.Worker(dsn, queue, handler, **settings)


async def _state_is(db: psycopg.AsyncConnection[Any], item_id: int, wanted: str) -> bool:
    return bool((await state(db, item_id))[0] == wanted)


def _has(lines: list[str], wanted: str) -> Any:
    async def check() -> bool:
        return wanted in lines

    return check


# ------------------------------------------------------------------------------ on_conflict


async def test_debounce_leaves_one_item_with_the_last_payload_run_once(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    seen: list[Any] = []

    async def handle(job: workfence.Job) -> Any:
        seen.append(job.payload)
        return {"sent": job.payload["n"]}

    async with running(worker(dsn, queue, handle)):
        made = []
        for n in range(50):
            # Each enqueue moves the item's run_at a second past now: the debounce window.
            due = datetime.now(UTC) + timedelta(seconds=1)
            made.append(
                await workfence.enqueue(
                    db, queue, {"n": n}, key="digest", run_at=due, on_conflict="replace"
                )
            )
        await eventually(lambda: _state_is(db, made[0].id, "done"), "the debounced item run")
    assert {m.id for m in made} == {made[0].id}
    assert [m.inserted for m in made] == [True] + [False] * 49
    assert seen == [{"n": 49}]
    info = await workfence.item(db, made[0].id)
    assert info is not None and info.result == {"sent": 49} and info.attempts == 1


async def test_throttle_keeps_run_at_and_keep_changes_nothing(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    first = await workfence.enqueue(db, queue, {"v": 1}, key="t", run_at=later)
    kept = await workfence.enqueue(db, queue, {"v": 2}, key="t", on_conflict="keep")
    assert kept == workfence.Enqueued(id=first.id, key="t", inserted=False)
    info = await workfence.item(db, queue, "t")
    assert info is not None and info.payload == {"v": 1}
    throttled = await workfence.enqueue(db, queue, {"v": 3}, key="t", on_conflict="preserve_run_at")
    assert throttled == workfence.Enqueued(id=first.id, key="t", inserted=False)
    info = await workfence.item(db, queue, "t")
    assert info is not None and info.payload == {"v": 3}
    assert abs((info.run_at - later).total_seconds()) < 0.001
    replaced = await workfence.enqueue(db, queue, {"v": 4}, key="t", on_conflict="replace")
    assert not replaced.inserted
    info = await workfence.item(db, queue, "t")
    assert info is not None and info.payload == {"v": 4} and info.run_at < later
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.enqueue(db, queue, key="t", on_conflict="overwrite")  # type: ignore[arg-type]
    assert bad.value.sqlstate == "22023"


async def test_replace_while_claimed_runs_exactly_once_more_with_the_new_payload(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    made = await workfence.enqueue(db, queue, {"v": 1}, key="r")
    started, go = asyncio.Event(), asyncio.Event()
    runs: list[tuple[Any, int]] = []
    at_once = 0
    most = 0

    async def handle(job: workfence.Job) -> Any:
        nonlocal at_once, most
        at_once += 1
        most = max(most, at_once)
        try:
            runs.append((job.payload, job.epoch))
            started.set()
            if job.payload == {"v": 1}:
                await go.wait()
            return {"ran": job.payload["v"]}
        finally:
            at_once -= 1

    async with running(worker(dsn, queue, handle, concurrency=2)):
        await wait_event(started, "the first run")
        again = await workfence.enqueue(db, queue, {"v": 2}, key="r", on_conflict="replace")
        assert again == workfence.Enqueued(id=made.id, key="r", inserted=False)
        go.set()  # the first run's token still finishes; then the item runs once more
        await eventually(_ran(runs, 2), "the second run")
        await eventually(lambda: _state_is(db, made.id, "done"), "the item done again")
    assert [payload for payload, _ in runs] == [{"v": 1}, {"v": 2}]
    assert runs[1][1] > runs[0][1] and most == 1
    info = await workfence.item(db, made.id)
    assert info is not None and info.result == {"ran": 2}


def _ran(runs: list[Any], n: int) -> Any:
    async def check() -> bool:
        return len(runs) >= n

    return check


def test_sync_enqueue_with_on_conflict(dsn: str, queue: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = workfence.sync.enqueue(conn, queue, {"v": 1}, key="s")
        again = workfence.sync.enqueue(conn, queue, {"v": 2}, key="s", on_conflict="replace")
        assert again == workfence.Enqueued(id=first.id, key="s", inserted=False)
        info = workfence.sync.item(conn, queue, "s")
        assert info is not None and info.payload == {"v": 2}


# ------------------------------------------------------------------ progress and checkpoint


async def test_a_retried_job_resumes_from_its_checkpoint(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    made = await workfence.enqueue(db, queue, {"steps": 5}, max_attempts=3)
    checkpoints: list[Any] = []

    async def handle(job: workfence.Job) -> Any:
        checkpoints.append(job.checkpoint)
        if job.attempt == 1:
            assert await job.progress({"step": 3}) is True
            raise RuntimeError("crashed after step 3")
        with pytest.raises(errors.InvalidArgument):
            await job.progress("x" * 70_000)  # over the server's 64 KiB
        with pytest.raises(ValueError, match="^progress is not JSON: "):
            await job.progress({"when": object()})
        return {"resumed_from": job.checkpoint["step"]}

    async with running(worker(dsn, queue, handle, retry=lambda attempt, error: 0)):
        await eventually(lambda: _state_is(db, made.id, "done"), "the second attempt's finish")
    assert checkpoints == [None, {"step": 3}]
    info = await workfence.item(db, made.id)
    assert info is not None
    assert (info.attempts, info.result, info.progress) == (2, {"resumed_from": 3}, {"step": 3})


async def test_a_refused_progress_is_a_lost_lease(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, key="p")
    started, go = asyncio.Event(), asyncio.Event()
    answers: list[bool] = []
    seen: list[Any] = []

    async def handle(job: workfence.Job) -> Any:
        assert await job.progress({"step": 1})
        started.set()
        await go.wait()
        answers.append(await job.progress({"step": 2}))  # the item was cancelled meanwhile
        seen.append(job.cancelled.reason)
        try:
            await asyncio.sleep(60)  # the runner cancels the handler, as on a refused renew
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async with running(worker(dsn, queue, handle)):
        await wait_event(started, "the first checkpoint")
        assert await workfence.cancel(db, queue, "p")
        go.set()
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "the item abandoned")
    assert answers == [False] and seen == ["lease lost", "cancelled"]
    assert f"progress id={made.id} refused" in lines
    info = await workfence.item(db, made.id)
    assert info is not None and info.state == "cancelled" and info.progress == {"step": 1}
    assert not any(
        line.startswith((f"finish id={made.id} ", f"fail id={made.id} ")) for line in lines
    )


async def test_against_a_0_11_0_database(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    # A server without the new column and arguments: the claim row has no progress (the
    # checkpoint is None), an enqueue without on_conflict works, one with it is 42883.
    name = f"workfence_py_0110_life_{queue[-8:]}"
    await db.execute(f"CREATE DATABASE {name}")
    try:
        old_dsn = make_conninfo(dsn, dbname=name)
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as old:
            await old.execute("CREATE EXTENSION pg_workfence VERSION '0.11.0'")
            made = await workfence.enqueue(old, queue, {"n": 2}, key="k")
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.enqueue(old, queue, key="k", on_conflict="replace")
            assert missing.value.sqlstate == "42883"
            seen: list[Any] = []

            async def handle(job: workfence.Job) -> Any:
                seen.append((job.checkpoint, job.fencing_token))
                return {"n": job.payload["n"] * 2}

            async with running(worker(old_dsn, queue, handle)):
                await eventually(lambda: _old_done(old, queue), "the item finished")
            info = await workfence.item(old, queue, "k")
            assert info is not None and info.progress is None and info.result == {"n": 4}
            assert seen == [(None, f"{made.id}:{info.epoch}")]
    finally:
        await db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def _old_done(old: psycopg.AsyncConnection[Any], queue: str) -> bool:
    info = await workfence.item(old, queue, "k")
    return info is not None and info.state == "done"


# ---------------------------------------------------------------------------- await_result


async def test_await_result_wakes_at_the_finish(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await workfence.enqueue(db, queue, {"n": 6}, key="a")
    started, go = asyncio.Event(), asyncio.Event()
    calls = 0
    real_one = operations._one

    async def counting(conn: Any, query: str, params: tuple[Any, ...]) -> Any:
        nonlocal calls
        if query is _sql.AWAIT:
            calls += 1
        return await real_one(conn, query, params)

    # Calls of 0.2 s each, so that one wait spans several (the server's cap is 1 s at least).
    monkeypatch.setattr(operations, "AWAIT_CALL_MAX", 0.2)
    monkeypatch.setattr(operations, "_one", counting)

    async def handle(job: workfence.Job) -> Any:
        started.set()
        await go.wait()
        return {"out": job.payload["n"] * 7}

    async with running(worker(dsn, queue, handle)):
        await wait_event(started, "the handler running")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as waiter:
            awaiting = asyncio.create_task(workfence.await_result(waiter, queue, "a", timeout=30))
            await eventually(_at_least(lambda: calls, 3), "three work_await calls")
            assert not awaiting.done()
            go.set()
            outcome = await asyncio.wait_for(awaiting, 10)
    assert outcome == workfence.Outcome(state="done", result={"out": 42}, last_error=None)
    assert outcome.finished
    # A finished item answers at once.
    again = await workfence.await_result(db, queue, "a", timeout=0)
    assert again == outcome


def _at_least(value: Any, n: int) -> Any:
    async def check() -> bool:
        return bool(value() >= n)

    return check


async def test_await_result_times_out_with_the_last_state_and_knows_missing_items(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    await workfence.enqueue(db, queue, key="idle")
    loop = asyncio.get_running_loop()
    began = loop.time()
    outcome = await workfence.await_result(db, queue, "idle", timeout=0.3)
    took = loop.time() - began
    assert outcome == workfence.Outcome(state="pending", result=None, last_error=None)
    assert outcome is not None and not outcome.finished
    assert 0.3 <= took < 2
    assert await workfence.await_result(db, queue, "missing", timeout=5) is None
    with pytest.raises(errors.InvalidArgument):
        await workfence.await_result(db, queue, "idle", timeout=-1)


async def test_await_result_of_a_failed_item_has_its_error(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    await workfence.enqueue(db, queue, {}, key="f", max_attempts=1)

    async def handle(job: workfence.Job) -> Any:
        return job.payload["invoice"]

    async with (
        running(worker(dsn, queue, handle)),
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as waiter,
    ):
        outcome = await workfence.await_result(waiter, queue, "f", timeout=20)
    assert outcome is not None and (outcome.state, outcome.result) == ("failed", None)
    assert outcome.last_error is not None
    assert outcome.last_error.startswith("KeyError: 'invoice'\nTraceback (most recent call last")


def test_sync_await_result(dsn: str, queue: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        workfence.sync.enqueue(conn, queue, key="s")
        assert workfence.sync.await_result(conn, queue, "s", timeout=0.2) == workfence.Outcome(
            "pending", None, None
        )
        assert workfence.sync.cancel(conn, queue, "s")
        assert workfence.sync.await_result(conn, queue, "s") == workfence.Outcome(
            "cancelled", None, None
        )
        assert workfence.sync.await_result(conn, queue, "none") is None


# --------------------------------------------------------------- fencing token and the guard


async def test_the_guard_runs_the_side_effect_under_the_lease_and_finishes(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, table: str
) -> None:
    made = await workfence.enqueue(db, queue, {"to": "a@example.com"})
    sent: list[str] = []

    async def handle(job: workfence.Job) -> Any:
        async with job.guard() as conn:
            # Inside: the item is still claimed, its row locked by this transaction.
            cur = await conn.execute(
                "SELECT state::text FROM workfence.items WHERE id = %s", (job.id,)
            )
            assert await cur.fetchone() == ("claimed",)
            sent.append(job.fencing_token)  # the side effect, with its idempotency key
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
            job.result = {"sent": True}

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "done"), "the guarded finish")
    st = await state(db, made.id)
    assert sent == [f"{made.id}:{st[2]}"] and st[4] == {"sent": True}
    cur = await db.execute(f"SELECT item_id, epoch FROM {table}")
    assert await cur.fetchall() == [(made.id, st[2])]


async def test_the_guard_refuses_a_stale_token_before_the_side_effect(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, key="stale")
    started, go = asyncio.Event(), asyncio.Event()
    sent: list[str] = []
    refused: list[errors.LeaseLost] = []

    async def handle(job: workfence.Job) -> Any:
        job.stop_renewing()  # so that only the guard can find out
        started.set()
        await go.wait()
        try:
            async with job.guard():
                sent.append(job.fencing_token)
        except errors.LeaseLost as error:
            refused.append(error)
            raise

    async with running(worker(dsn, queue, handle)):
        await wait_event(started, "the handler starting")
        assert await workfence.cancel(db, queue, "stale")
        go.set()
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "refused")
    assert sent == []
    assert len(refused) == 1 and refused[0].sqlstate == "55000"


# ------------------------------------------------------------------------- errors stored


async def test_an_error_is_stored_with_its_type_and_traceback(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, {"order": 7}, max_attempts=1)

    def lookup(payload: dict[str, Any]) -> Any:
        return payload["invoice"]

    async def handle(job: workfence.Job) -> Any:
        return lookup(job.payload)

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _state_is(db, made.id, "failed"), "the failed item")
    info = await workfence.item(db, made.id)
    assert info is not None
    text = info.errors[-1]["error"]
    first, _, frames = text.partition("\n")
    assert first == "KeyError: 'invoice'"
    assert frames.startswith("Traceback (most recent call last):\n")
    # The last frames are the handler's and the function that raised, newest last.
    assert frames.index(", in handle\n") < frames.index(", in lookup\n")
    last = [line for line in frames.splitlines() if line.startswith("  File ")][-1]
    assert last.endswith(", in lookup") and 'return payload["invoice"]' in frames
    assert len(text.encode()) <= 2048
    assert f"fail id={made.id} epoch={info.epoch} error=KeyError: 'invoice'" in lines


# ------------------------------------------------------- a settle whose answer was lost


def _losing(
    monkeypatch: pytest.MonkeyPatch, query: str, item_id: int, *, committed: bool
) -> list[int]:
    """Make the runner's first `query` call for `item_id` lose its answer: the call is run
    (`committed`) or not, then the connection is closed and the error a dropped connection
    gives is raised. Returns the list the calls are counted in."""
    real = worker_module._fetch_bool
    calls: list[int] = []

    async def lossy(conn: Any, sql: str, params: tuple[Any, ...]) -> bool:
        if sql is query and params[0] == item_id:
            calls.append(1)
            if len(calls) == 1:
                if committed:
                    await real(conn, sql, params)
                await conn.close()
                raise psycopg.OperationalError("server closed the connection unexpectedly")
        return await real(conn, sql, params)

    monkeypatch.setattr(worker_module, "_fetch_bool", lossy)
    return calls


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not-committed"])
async def test_a_finish_whose_answer_was_lost_is_sent_again(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    lines: list[str],
    monkeypatch: pytest.MonkeyPatch,
    committed: bool,
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 3})
    calls = _losing(monkeypatch, _sql.FINISH, made.id, committed=committed)
    runs: list[int] = []

    async def handle(job: workfence.Job) -> Any:
        runs.append(job.epoch)
        return {"n": job.payload["n"]}

    # A lease of 30 s: the item is done well before it could lapse and run again.
    async with running(worker(dsn, queue, handle, lease=30)):
        await eventually(lambda: _state_is(db, made.id, "done"), "the finish", timeout=10)
    st = await state(db, made.id)
    assert (st[2], st[3], st[4]) == (runs[0], 1, {"n": 3}) and len(runs) == 1
    assert len(calls) == 2
    assert any(
        line.startswith(f"resend finish id={made.id} epoch={runs[0]} error=") for line in lines
    )
    assert f"finish id={made.id} epoch={runs[0]} ok" in lines
    assert f"refused id={made.id} (lease lost)" not in lines


@pytest.mark.parametrize(
    ("final", "lapsed"),
    [(True, False), (False, False), (False, True)],
    ids=["dead-lettered", "retried", "retried-past-the-lease"],
)
async def test_a_fail_whose_answer_was_lost_is_not_taken_for_a_lost_lease(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    lines: list[str],
    monkeypatch: pytest.MonkeyPatch,
    final: bool,
    lapsed: bool,
) -> None:
    # The first work_fail commits and its answer is lost; the repeat is refused (the token
    # settled the item: finished, or handed back), which the runner reads as settled: from
    # the lease (nobody else could have claimed the item), or past it from the item, still
    # under this epoch.
    made = await workfence.enqueue(db, queue, max_attempts=1 if final else 5)
    calls = _losing(monkeypatch, _sql.FAIL, made.id, committed=True)

    async def handle(job: workfence.Job) -> Any:
        if lapsed:
            job.stop_renewing()
            job._lease_end = 0.0  # as if the lease the runner was sure of had ended
        raise RuntimeError("declined")

    w = worker(dsn, queue, handle, lease=30, retry=lambda attempt, error: 3600)
    async with running(w):
        await eventually(_has_prefix(lines, f"fail id={made.id} "), "the fail logged", timeout=10)
    st = await state(db, made.id)
    assert (st[0], st[3]) == ("failed" if final else "pending", 1)
    info = await workfence.item(db, made.id)
    assert info is not None and len(info.errors) == 1  # recorded once
    assert len(calls) == 2
    assert any(line.startswith(f"resend fail id={made.id} ") for line in lines)
    assert f"refused id={made.id} (lease lost)" not in lines


def _has_prefix(lines: list[str], prefix: str) -> Any:
    async def check() -> bool:
        return any(line.startswith(prefix) for line in lines)

    return check


async def test_a_release_whose_answer_was_lost_is_not_taken_for_a_lost_lease(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    lines: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = await workfence.enqueue(db, queue)
    calls = _losing(monkeypatch, _sql.RELEASE, made.id, committed=True)
    started = asyncio.Event()

    async def handle(job: workfence.Job) -> Any:
        started.set()
        await asyncio.sleep(60)  # cancelled at the end of the grace: the item is released

    w = worker(dsn, queue, handle, lease=30, shutdown_grace=0)
    task = asyncio.create_task(w.run())
    await wait_event(started, "the handler running")
    w.stop()
    await asyncio.wait_for(task, 15)
    st = await state(db, made.id)
    assert (st[0], st[3]) == ("pending", 0)
    assert len(calls) == 2
    assert f"release id={made.id} epoch={st[2]}" in lines
    assert f"refused id={made.id} (lease lost)" not in lines


@asynccontextmanager
async def _commit_lost(conn: psycopg.AsyncConnection[Any], committed: bool) -> AsyncIterator[Any]:
    """A stand-in for `conn.transaction()` whose COMMIT loses its answer: it commits (or not:
    the connection is closed in the transaction, which rolls it back), then the connection is
    closed and a dropped connection's error raised."""
    tx = psycopg.AsyncConnection.transaction(conn)
    entered = await tx.__aenter__()
    try:
        yield entered
    except BaseException as error:
        await tx.__aexit__(type(error), error, error.__traceback__)
        raise
    if committed:
        await tx.__aexit__(None, None, None)
    await conn.close()
    raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
async def test_a_fenced_commit_whose_answer_was_lost_is_resolved(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    table: str,
    lines: list[str],
    committed: bool,
) -> None:
    made = await workfence.enqueue(db, queue, {"n": 5}, max_attempts=3)
    outcomes: list[str] = []

    async def handle(job: workfence.Job) -> Any:
        conn = job._conn
        assert conn is not None
        if job.attempt == 1:

            def lossy(*args: Any, **kwargs: Any) -> Any:
                return _commit_lost(conn, committed)

            conn.transaction = lossy  # type: ignore[method-assign]
        try:
            async with job.transaction() as tx:
                await tx.execute(f"INSERT INTO {table} VALUES (%s, %s, 1)", (job.id, job.epoch))
                job.result = {"attempt": job.attempt}
        except psycopg.OperationalError:
            outcomes.append("raised")
            raise
        outcomes.append("finished")

    # Not delayed by the lease (30 s): a rolled-back commit is failed and retried at once.
    w = worker(dsn, queue, handle, lease=30, retry=lambda attempt, error: 0)
    async with running(w):
        await eventually(lambda: _state_is(db, made.id, "done"), "the item done", timeout=10)
    st = await state(db, made.id)
    cur = await db.execute(f"SELECT epoch FROM {table}")
    rows = await cur.fetchall()
    resent = [line for line in lines if line.startswith(f"resend commit id={made.id} ")]
    assert len(resent) == 1
    if committed:
        assert resent[0].startswith(f"resend commit id={made.id} epoch={st[2]} error=")
        assert f"finish id={made.id} epoch={st[2]} ok" in lines
        # The block exits as committed: one run, its writes and its finish.
        assert outcomes == ["finished"] and st[3] == 1 and st[4] == {"attempt": 1}
        assert rows == [(st[2],)]
    else:
        # The block raises the connection error (nothing committed); the item is failed with
        # it and runs again at once.
        assert outcomes == ["raised", "finished"] and st[3] == 2 and st[4] == {"attempt": 2}
        assert rows == [(st[2],)]
        info = await workfence.item(db, made.id)
        assert info is not None
        assert info.errors[0]["error"].startswith("psycopg.OperationalError: server closed")
    assert f"refused id={made.id} (lease lost)" not in lines
