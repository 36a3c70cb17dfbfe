"""Chaos: worker processes of the library under `pg_terminate_backend` of their connections,
5 a second (WORKFENCE_CHAOS_KILLS, default 5) for 20 s (WORKFENCE_CHAOS_SECONDS), while the test
feeds the queue. Half the jobs return their result (`work_finish` after the handler), half write
a business row in the fenced transaction. Every item ends done, every fenced item has exactly
one business row, no job runs again after a run that completed because its settle was lost (a
settle whose answer was lost is sent again with the same token), and none waits out a lease to
run again. The figures are printed.

WORKFENCE_CHAOS_LIBRARY, when set, is a directory put first on the workers' PYTHONPATH (an
older `workfence` package, to measure it with the same test)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

import workfence

from .conftest import eventually

SECONDS = float(os.environ.get("WORKFENCE_CHAOS_SECONDS", "20"))
KILLS_PER_SECOND = float(os.environ.get("WORKFENCE_CHAOS_KILLS", "5"))
PROCESSES = int(os.environ.get("WORKFENCE_CHAOS_PROCESSES", "2"))
CONCURRENCY = 4
ENQUEUE_PER_SECOND = 150
LEASE = 30.0

# One worker process. Each run notes "start" when its handler begins and "end" when it
# completed (its value about to be returned, or its fenced transaction committed), with the
# time; a start after an end of the same item is a job that ran again after a completed run.
WORKER = """
import asyncio, logging, sys, time
import workfence
dsn, queue, table, events_path, concurrency, lease = sys.argv[1:7]
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
events = open(events_path, "a", buffering=1)

def note(kind, job):
    events.write(f"{kind} {job.id} {job.epoch} {time.time():.6f}\\n")

async def handle(job):
    note("start", job)
    await asyncio.sleep(0.005)
    if job.payload["n"] % 2:
        async with job.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (job.id, job.epoch))
            job.result = {"n": job.payload["n"]}
        note("end", job)
        return None
    note("end", job)
    return {"n": job.payload["n"]}

workfence.Worker(
    dsn, queue, handle, concurrency=int(concurrency), lease=float(lease), poll_wait=1,
    retry=lambda attempt, error: 0,
).run_sync()
"""


async def test_no_job_runs_again_because_a_settle_was_lost(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = f"public.chaos_{uuid.uuid4().hex[:12]}"
    await db.execute(f"CREATE TABLE {table} (item_id bigint, epoch bigint)")
    app = f"chaos-{queue}"
    env = dict(os.environ)
    library = os.environ.get("WORKFENCE_CHAOS_LIBRARY")
    if library:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [library, env.get("PYTHONPATH")]))
    procs: list[asyncio.subprocess.Process] = []
    readers: list[asyncio.Task[bytes]] = []
    outputs: list[bytes] = []
    try:
        for n in range(PROCESSES):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-u",
                    "-c",
                    WORKER,
                    f"{dsn} application_name={app}",
                    queue,
                    table,
                    str(tmp_path / f"events-{n}"),
                    str(CONCURRENCY),
                    str(LEASE),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                )
            )
        readers.extend(asyncio.create_task(_read(proc)) for proc in procs)
        # Every worker up (its claim and heartbeat connections made) before the first kill.
        await eventually(_listening(db, app, PROCESSES), "the workers listening", timeout=30)
        ids: list[int] = []
        kills = 0
        loop = asyncio.get_running_loop()
        began = loop.time()
        feeder = asyncio.create_task(_feed(dsn, queue, ids, began + SECONDS))
        killer = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            tick = began
            while loop.time() < began + SECONDS:
                tick += 1 / KILLS_PER_SECOND
                await asyncio.sleep(max(0.0, tick - loop.time()))  # the kills' pace, not a sync
                cur = await killer.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM ("
                    "  SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                    "   ORDER BY random() LIMIT 1) victim",
                    (app,),
                )
                row = await cur.fetchone()
                kills += row[0] if row else 0
        finally:
            await killer.close()
        await feeder
        chaos = loop.time() - began
        drain_began = loop.time()
        await eventually(
            lambda: _all_done(db, queue, len(ids)), "every item done", timeout=LEASE + 90
        )
        drain = loop.time() - drain_began
        for proc in procs:
            assert proc.returncode is None, "a worker process ended under the kills"
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 30)
        outputs = [await reader for reader in readers]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if not outputs:  # failed: show what the workers said (pytest prints it)
            for reader in readers:
                print((await reader).decode())
    log = b"".join(outputs).decode().splitlines()
    starts: dict[int, list[float]] = defaultdict(list)
    ends: dict[int, list[float]] = defaultdict(list)
    for n in range(PROCESSES):
        for line in (tmp_path / f"events-{n}").read_text().splitlines():
            kind, item_id, _epoch, at = line.split()
            (starts if kind == "start" else ends)[int(item_id)].append(float(at))
    # A run that started after a run of the same item had completed: the job ran twice.
    again = {i for i, done in ends.items() if any(s > min(done) for s in starts[i])}
    twice_completed = sum(1 for done in ends.values() if len(done) > 1)
    reruns = sum(len(s) - 1 for s in starts.values())
    late_reruns = sum(
        1 for s in starts.values() for a, b in zip(sorted(s), sorted(s)[1:]) if b - a > LEASE / 2
    )
    cur = await db.execute(f"SELECT count(*), count(DISTINCT item_id) FROM {table}")
    rows, distinct = await cur.fetchone() or (0, 0)
    fenced = len(ids) // 2  # the odd payloads
    await db.execute(f"DROP TABLE {table}")
    figures = {
        "library": library or "this checkout",
        "processes x concurrency": f"{PROCESSES} x {CONCURRENCY}",
        "chaos seconds": round(chaos, 1),
        "terminations": kills,
        "terminations per second": round(kills / chaos, 2),
        "items": len(ids),
        "runs": sum(len(s) for s in starts.values()),
        "re-runs (any cause)": reruns,
        "re-runs after a lease lapse (start > lease/2 after the one before)": late_reruns,
        "jobs run again after a completed run (a lost settle)": len(again),
        "jobs completed twice": twice_completed,
        "settles sent again (resend finish/fail/release/commit)": sum(
            line.startswith("resend ") for line in log
        ),
        "settles given up (left to the lease)": sum(line.startswith("settle id=") for line in log),
        "drain seconds after the chaos": round(drain, 1),
    }
    with capsys.disabled():
        print("\nchaos figures:")
        for name, value in figures.items():
            print(f"  {name}: {value}")
    assert kills >= 0.8 * KILLS_PER_SECOND * SECONDS
    assert (rows, distinct) == (fenced, fenced)  # one business row per fenced item
    assert len(again) == 0, sorted(again)[:20]
    assert late_reruns == 0  # nor was any job delayed by a lease


async def _read(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stdout is not None
    return await proc.stdout.read()


def _listening(db: psycopg.AsyncConnection[Any], app: str, n: int) -> Any:
    async def check() -> bool:
        cur = await db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            "   AND (query = 'LISTEN work_lease_lost' OR query LIKE '%%work_renew%%')",
            (app,),
        )
        row = await cur.fetchone()
        return row is not None and row[0] >= n

    return check


async def _feed(dsn: str, queue: str, ids: list[int], until: float) -> None:
    """Enqueue ENQUEUE_PER_SECOND items a second (in batches every 0.1 s) until `until`."""
    loop = asyncio.get_running_loop()
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        tick = loop.time()
        while loop.time() < until:
            async with conn.transaction():
                for _ in range(ENQUEUE_PER_SECOND // 10):
                    made = await workfence.enqueue(conn, queue, {"n": len(ids)})
                    ids.append(made.id)
            tick += 0.1
            await asyncio.sleep(max(0.0, tick - loop.time()))


async def _all_done(db: psycopg.AsyncConnection[Any], queue: str, n: int) -> bool:
    cur = await db.execute(
        "SELECT count(*) FROM workfence.items WHERE queue = %s AND state::text = 'done'", (queue,)
    )
    row = await cur.fetchone()
    return row is not None and row[0] == n
