"""A side effect outside the database (an email, here a line appended to a file), made by two
copies of a worker under ONE owner name, one stopped with SIGSTOP past its lease and resumed:
with `job.guard()` it is sent once; without it, the resumed copy sends it again (the duplicate is
shown, so that the test proves the guard matters). The order of events is set by an advisory
lock the test holds and by the server's clock, never by sleeps."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import workfence

from .conftest import eventually

OWNER = "pytest/one-owner"
LEASE = 2.0

# One copy of the worker. The handler "sends an email" by appending a line (its item's fencing
# token and its pid) to the sink file. The first attempt waits first for the test's advisory
# lock: the stand-in for a slow call or a timer, during which the process is stopped.
# mode "plain": wait, then send (no guard); "guard": wait, then send inside `job.guard()`;
# "inside": enter `job.guard()`, wait there, then send.
WORKER = """
import logging, os, sys
import psycopg, workfence
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
dsn, queue, sink, mode, lock_key, owner, lease = sys.argv[1:8]

def send(job):
    with open(sink, "a") as out:
        out.write(f"{job.fencing_token} {os.getpid()}\\n")

async def wait_for_the_test(job):
    if job.attempt == 1:
        lock = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await lock.execute("SELECT pg_advisory_lock(%s)", (int(lock_key),))
        return lock
    return None

async def handle(job):
    lock = None
    try:
        if mode == "plain":
            lock = await wait_for_the_test(job)
            send(job)
            return {"sent": True}
        if mode == "guard":
            lock = await wait_for_the_test(job)
            async with job.guard():
                send(job)
                job.result = {"sent": True}
            return None
        async with job.guard():
            lock = await wait_for_the_test(job)
            send(job)
            job.result = {"sent": True}
    finally:
        if lock is not None:
            await lock.close()

workfence.Worker(dsn, queue, handle, owner=owner, lease=float(lease), poll_wait=1).run_sync()
"""


class Copy:
    """One worker process, its log lines collected as they come."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.lines: list[str] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode().rstrip("\n"))

    def logged(self, wanted: str) -> Any:
        async def check() -> bool:
            return wanted in self.lines

        return check


@asynccontextmanager
async def copies(dsn: str, queue: str, sink: Path, mode: str, lock_key: int) -> AsyncIterator[Any]:
    """Start copies of the worker on demand (`await start(name)`); all stopped at the end."""
    started: list[Copy] = []

    async def start(name: str) -> Copy:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",
            "-c",
            WORKER,
            f"{dsn} application_name={name}",
            queue,
            str(sink),
            mode,
            str(lock_key),
            OWNER,
            str(LEASE),
            stdout=asyncio.subprocess.PIPE,
        )
        copy = Copy(name, proc)
        started.append(copy)
        return copy

    try:
        yield start
    finally:
        for copy in started:
            if copy.proc.returncode is None:
                copy.proc.send_signal(signal.SIGCONT)
                copy.proc.send_signal(signal.SIGTERM)
        for copy in started:
            try:
                await asyncio.wait_for(copy.proc.wait(), 15)
            except TimeoutError:
                copy.proc.kill()
                await copy.proc.wait()
            await copy.reader


async def _one_row(db: psycopg.AsyncConnection[Any], query: str, params: tuple[Any, ...]) -> Any:
    cur = await db.execute(query, params)
    return await cur.fetchone()


def _waiting_for_lock(db: psycopg.AsyncConnection[Any], name: str) -> Any:
    """A check: a backend of the copy `name` waits for an advisory lock."""

    async def check() -> bool:
        row = await _one_row(
            db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            "   AND wait_event_type = 'Lock' AND query LIKE '%%pg_advisory_lock%%'",
            (name,),
        )
        return bool(row[0])

    return check


def _holding_lock(db: psycopg.AsyncConnection[Any], name: str, key: int) -> Any:
    """A check: a backend of the copy `name` holds the advisory lock `key`."""

    async def check() -> bool:
        row = await _one_row(
            db,
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted"
            "   AND l.objid = %s",
            (name, key),
        )
        return bool(row[0])

    return check


def _lapsed(db: psycopg.AsyncConnection[Any], item_id: int) -> Any:
    """A check: the item's lease has lapsed on the server's clock."""

    async def check() -> bool:
        row = await _one_row(
            db,
            "SELECT lease_until < clock_timestamp() FROM workfence.items WHERE id = %s",
            (item_id,),
        )
        return bool(row[0])

    return check


def _state(db: psycopg.AsyncConnection[Any], item_id: int, wanted: str) -> Any:
    async def check() -> bool:
        info = await workfence.item(db, item_id)
        return info is not None and info.state == wanted

    return check


def _sent(sink: Path) -> list[str]:
    """The "emails" sent: one line (fencing token, pid) each."""
    return sink.read_text().splitlines() if sink.exists() else []


@pytest.mark.parametrize(("mode", "sends"), [("plain", 2), ("guard", 1)])
async def test_a_copy_stopped_past_its_lease_sends_again_unless_guarded(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, tmp_path: Path, mode: str, sends: int
) -> None:
    sink = tmp_path / "outbox"
    key = random.randrange(1, 2**31)
    a_name, b_name = f"{queue}-A", f"{queue}-B"
    await db.execute("SELECT pg_advisory_lock(%s)", (key,))
    made = await workfence.enqueue(db, queue, {"to": "customer@example.com"})
    async with copies(dsn, queue, sink, mode, key) as start:
        a = await start(a_name)
        # A claimed the item and its handler waits (the stand-in for a slow call): stop A.
        await eventually(_waiting_for_lock(db, a_name), "A's handler waiting")
        a.proc.send_signal(signal.SIGSTOP)
        # A notification is a hint, lost while a listener reconnects: A's heartbeat connection
        # is dropped, so that only a renew (after a reconnect) could stop A's handler once it
        # resumes, and its wake-up (already in its socket) comes first.
        row = await _one_row(
            db,
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE application_name = %s"
            "   AND (query = 'LISTEN work_lease_lost' OR query LIKE '%%work_renew%%')",
            (a_name,),
        )
        assert row == (1,)
        await eventually(_lapsed(db, made.id), "A's lease lapsing on the server's clock")
        # B, the second copy under the same owner name, claims the item anew and sends.
        b = await start(b_name)
        await eventually(_state(db, made.id, "done"), "B finishing the item")
        info = await workfence.item(db, made.id)
        assert info is not None and info.attempts == 2
        assert len(_sent(sink)) == 1
        # A's wait ends (the lock is granted while A is stopped), then A resumes.
        await db.execute("SELECT pg_advisory_unlock(%s)", (key,))
        await eventually(_holding_lock(db, a_name, key), "A's backend granted the lock")
        a.proc.send_signal(signal.SIGCONT)
        await eventually(a.logged(f"refused id={made.id} (lease lost)"), "A refused")
        assert f"claim id={made.id} epoch={info.epoch} attempt=2" in b.lines
    sent = _sent(sink)
    assert len(sent) == sends, sent
    tokens = [line.split()[0] for line in sent]
    assert tokens[0] == f"{made.id}:{info.epoch}"  # B's send, under the new token
    if mode == "plain":
        # The duplicate: A sent under its stale token after B had sent.
        assert tokens[1] != tokens[0] and tokens[1].startswith(f"{made.id}:")
    final = await workfence.item(db, made.id)
    assert final is not None and (final.state, final.epoch) == ("done", info.epoch)


async def test_a_copy_stopped_inside_the_guard_holds_off_every_claim(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, tmp_path: Path
) -> None:
    sink = tmp_path / "outbox"
    key = random.randrange(1, 2**31)
    a_name, b_name = f"{queue}-A", f"{queue}-B"
    await db.execute("SELECT pg_advisory_lock(%s)", (key,))
    made = await workfence.enqueue(db, queue, {"to": "customer@example.com"})
    async with copies(dsn, queue, sink, "inside", key) as start:
        a = await start(a_name)
        await eventually(_waiting_for_lock(db, a_name), "A waiting inside its guard")
        a.proc.send_signal(signal.SIGSTOP)
        await eventually(_lapsed(db, made.id), "A's lease lapsing on the server's clock")
        b = await start(b_name)
        # The lease has lapsed, but the guard's row lock holds: no claim can take the item.
        cur = await db.execute(
            "SELECT id FROM workfence.work_claim(%s, %s, interval '1 minute', 10)", (queue, OWNER)
        )
        assert await cur.fetchall() == []
        await db.execute("SELECT pg_advisory_unlock(%s)", (key,))
        await eventually(_holding_lock(db, a_name, key), "A's backend granted the lock")
        a.proc.send_signal(signal.SIGCONT)
        await eventually(_state(db, made.id, "done"), "A finishing the item")
        info = await workfence.item(db, made.id)
        assert info is not None and info.attempts == 1
        await eventually(a.logged(f"finish id={made.id} epoch={info.epoch} ok"), "A's finish")
    sent = _sent(sink)
    assert sent == [f"{made.id}:{info.epoch} {a.proc.pid}"]
    assert not any(line.startswith(f"claim id={made.id} ") for line in b.lines)
