"""Integration tests of workflows (from 0.12.0, issue 37) against the real server
(WORKFENCE_TEST_DSN): `enqueue(..., after=, on_parent_failure=)`, `job.parent_results()` and
`workflow()`: a fan-in whose step reads both parents' results, a failed parent cancelling its
waiting descendants, a step that runs anyway and sees the failure, a stale token reading
nothing, the errors, and a database before workflows."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import workfence
from workfence import errors

from .conftest import eventually, running, wait_event

OWNER = "pytest/shared-owner"


def worker(dsn: str, queue: str, handler: Any, **settings: Any) -> workfence.Worker:
    """A worker with quick test settings (short poll) unless given."""
    settings.setdefault("owner", OWNER)
    settings.setdefault("poll_wait", 1)
    settings.setdefault("lease", 6)
    return workfence.Worker(dsn, queue, handler, **settings)


async def _finished(
    dsn: str, queue: str, key: str, timeout: float = 20.0
) -> workfence.Outcome:
    """The item's outcome once it is done, failed or cancelled (`await_result`)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as waiter:
        outcome = await workfence.await_result(waiter, queue, key, timeout=timeout)
    assert outcome is not None and outcome.finished, f"{key} not finished: {outcome}"
    return outcome


def _graph(rows: list[workfence.WorkflowItem]) -> set[tuple[int, int, tuple[int, ...]]]:
    """The rows of `workflow()` as (id, depth, sorted parents)."""
    return {(row.id, row.depth, tuple(sorted(row.parents))) for row in rows}


async def test_a_fan_in_child_runs_after_both_parents_and_reads_their_results(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    p1 = await workfence.enqueue(db, queue, {"n": 1}, key="p1")
    p2 = await workfence.enqueue(db, queue, {"n": 2}, key="p2")
    child = await workfence.enqueue(db, queue, {}, key="child", after=[p1.id, p2.id])
    info = await workfence.item(db, child.id)
    assert info is not None and info.state == "waiting"
    # The graph, read from either end (and through the synchronous twin).
    assert _graph(await workfence.workflow(db, child.id)) == {
        (child.id, 0, (p1.id, p2.id)),
        (p1.id, -1, ()),
        (p2.id, -1, ()),
    }
    around_p1 = await workfence.workflow(db, p1.id)
    assert _graph(around_p1) == {(p1.id, 0, ()), (child.id, 1, (p1.id, p2.id))}
    assert [row.depth for row in around_p1] == [0, 1], "nearest first"
    assert around_p1[1] == workfence.WorkflowItem(
        child.id, queue, "child", "waiting", 1, [p1.id, p2.id]
    )
    assert await workfence.workflow(db, 2**62) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert workfence.sync.workflow(conn, child.id) == await workfence.workflow(db, child.id)

    ran: list[str] = []
    seen: dict[str, Any] = {}

    async def handle(job: workfence.Job) -> Any:
        ran.append(job.key)
        seen[job.key] = await job.parent_results()
        if job.key == "child":
            return {"sum": sum(result["doubled"] for result in seen["child"].values())}
        return {"doubled": job.payload["n"] * 2}

    async with running(worker(dsn, queue, handle, concurrency=2)):
        outcome = await _finished(dsn, queue, "child")
    assert outcome == workfence.Outcome("done", {"sum": 6}, None)
    assert sorted(ran[:2]) == ["p1", "p2"] and ran[2:] == ["child"]
    assert seen == {
        "p1": {},
        "p2": {},
        "child": {p1.id: {"doubled": 2}, p2.id: {"doubled": 4}},
    }
    assert {row.state for row in await workfence.workflow(db, child.id)} == {"done"}


async def test_a_failed_parent_cancels_its_waiting_descendants_by_default(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    parent = await workfence.enqueue(db, queue, {}, key="parent", max_attempts=1)
    child = await workfence.enqueue(db, queue, {}, key="child", after=[parent.id])
    grandchild = await workfence.enqueue(db, queue, {}, key="grandchild", after=[child.id])
    ran: list[str] = []

    async def handle(job: workfence.Job) -> Any:
        ran.append(job.key)
        raise RuntimeError("boom")

    async with running(worker(dsn, queue, handle)):
        failed = await _finished(dsn, queue, "parent")
        cancelled = await _finished(dsn, queue, "child")
        also = await _finished(dsn, queue, "grandchild")
    assert failed.state == "failed"
    assert failed.last_error is not None and failed.last_error.startswith("RuntimeError: boom")
    assert cancelled == workfence.Outcome("cancelled", None, f"parent {parent.id} ended failed")
    assert also == workfence.Outcome("cancelled", None, f"parent {child.id} ended cancelled")
    assert ran == ["parent"], "no descendant ran"
    assert _graph(await workfence.workflow(db, grandchild.id)) == {
        (grandchild.id, 0, (child.id,)),
        (child.id, -1, (parent.id,)),
        (parent.id, -2, ()),
    }


async def test_with_on_parent_failure_run_the_child_runs_and_sees_the_failure(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    bad = await workfence.enqueue(db, queue, {"fail": True}, key="bad", max_attempts=1)
    good = await workfence.enqueue(db, queue, {"fail": False}, key="good")
    await workfence.enqueue(
        db, queue, {}, key="child", after=[bad.id, good.id], on_parent_failure="run"
    )
    seen: list[Any] = []

    async def handle(job: workfence.Job) -> Any:
        if job.key == "child":
            seen.append(await job.parent_results())
            return "ran anyway"
        if job.payload["fail"]:
            raise RuntimeError("boom")
        return {"ok": True}

    async with running(worker(dsn, queue, handle, concurrency=2)):
        outcome = await _finished(dsn, queue, "child")
    assert outcome == workfence.Outcome("done", "ran anyway", None)
    [results] = seen
    assert results.keys() == {bad.id, good.id}
    assert results[good.id] == {"ok": True}
    failure = results[bad.id]
    assert failure.keys() == {"state", "error"} and failure["state"] == "failed"
    assert failure["error"].startswith("RuntimeError: boom\nTraceback")


async def test_parent_results_under_a_stale_token_is_none_and_a_lost_lease(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, lines: list[str]
) -> None:
    made = await workfence.enqueue(db, queue, key="w")
    started, go = asyncio.Event(), asyncio.Event()
    answers: list[Any] = []
    seen: list[Any] = []

    async def handle(job: workfence.Job) -> Any:
        answers.append(await job.parent_results())  # current: no parents
        started.set()
        await go.wait()
        answers.append(await job.parent_results())  # the item was cancelled meanwhile
        seen.append(job.cancelled.reason)
        try:
            await asyncio.sleep(60)  # the runner cancels the handler, as on a refused renew
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async with running(worker(dsn, queue, handle)):
        await wait_event(started, "the first read")
        assert await workfence.cancel(db, queue, "w")
        go.set()
        await eventually(_has(lines, f"refused id={made.id} (lease lost)"), "the item abandoned")
    assert answers == [{}, None] and seen == ["lease lost", "cancelled"]
    assert f"parent_results id={made.id} refused" in lines


def _has(lines: list[str], wanted: str) -> Any:
    async def check() -> bool:
        return wanted in lines

    return check


async def test_enqueue_refuses_unknown_parents_and_bad_policies(
    db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    parent = await workfence.enqueue(db, queue, key="p")
    with pytest.raises(errors.UnknownParent) as unknown:
        await workfence.enqueue(db, queue, key="c", after=[parent.id, 2**62])
    assert unknown.value.sqlstate == "23503"
    assert unknown.value.message == f"parent item {2**62} does not exist"
    assert unknown.value.hint is not None
    policy: Any = "ignore"
    with pytest.raises(errors.InvalidArgument):
        await workfence.enqueue(db, queue, key="c", after=[parent.id], on_parent_failure=policy)
    with_null: Any = [parent.id, None]
    with pytest.raises(errors.NullArgument):
        await workfence.enqueue(db, queue, key="c", after=with_null)
    assert await workfence.item(db, queue, "c") is None, "nothing was enqueued"
    # An existing key's after is ignored: the edges are made only at the insert.
    plain = await workfence.enqueue(db, queue, key="plain")
    again = await workfence.enqueue(db, queue, key="plain", after=[parent.id])
    assert again == workfence.Enqueued(plain.id, "plain", False)
    assert _graph(await workfence.workflow(db, plain.id)) == {(plain.id, 0, ())}


async def test_against_a_0_11_0_database(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    # A server before workflows: an enqueue without after (or with an empty one) sends neither
    # argument and works; one with parents is 42883 (no such work_enqueue).
    name = f"workfence_py_0110_wf_{queue[-8:]}"
    await db.execute(f"CREATE DATABASE {name}")
    try:
        old_dsn = make_conninfo(dsn, dbname=name)
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as old:
            await old.execute("CREATE EXTENSION pg_workfence VERSION '0.11.0'")
            made = await workfence.enqueue(old, queue, key="a", after=[])
            assert made.inserted
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.enqueue(old, queue, key="b", after=[made.id])
            assert missing.value.sqlstate == "42883"
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.enqueue(old, queue, key="b", on_parent_failure="run")
            assert missing.value.sqlstate == "42883"
    finally:
        await db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
