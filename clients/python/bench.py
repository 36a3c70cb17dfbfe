"""The overhead benchmark of the Python worker library: items/s through `workfence.Worker`
against the same work done with raw SQL calls, in the same run (scripts/client-bench.sh runs it
and computes medians and ratios).

usage: .venv/bin/python bench.py --dsn DSN --items N --rounds R --batch B

Each round enqueues N items (payload `{}`) into a fresh queue for each mode and times, with the
mode that goes first alternating per round:
- raw: one connection, loop `work_claim(queue, owner, 30 s, B)`, then `work_finish(id, owner,
  epoch, '{"ok": true}')` per item, until N are finished;
- library: `Worker(concurrency=1, batch_size=B)` with a handler returning {"ok": true}, until N
  are finished (the clock stops when `run()` has returned, its shutdown included).
Prints one line per measurement and nothing else on stdout:
`bench lang=python mode=raw|library round=<r> items=<N> seconds=<s> items_per_s=<x>`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import workfence

OWNER = "bench/python"


async def enqueue(dsn: str, queue: str, items: int) -> None:
    """Enqueue `items` items with payload {} into `queue`, in one statement."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "SELECT workfence.work_enqueue(%s, '{}'::jsonb) FROM generate_series(1, %s)",
            (queue, items),
        )


async def raw(dsn: str, queue: str, items: int, batch: int) -> float:
    """The raw loop on one connection; seconds until `items` are finished."""
    result = Jsonb({"ok": True})
    lease = timedelta(seconds=30)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        began = time.perf_counter()
        finished = 0
        while finished < items:
            cur = await conn.execute(
                "SELECT id, epoch FROM workfence.work_claim(%s, %s, %s, %s)",
                (queue, OWNER, lease, batch),
            )
            for item_id, epoch in await cur.fetchall():
                cur = await conn.execute(
                    "SELECT workfence.work_finish(%s, %s, %s, %s)", (item_id, OWNER, epoch, result)
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    finished += 1
        return time.perf_counter() - began


async def library(dsn: str, queue: str, items: int, batch: int) -> float:
    """The library's runner; seconds until `items` are finished and `run()` returned."""
    handled = 0
    worker: workfence.Worker

    async def handler(job: workfence.Job) -> Any:
        nonlocal handled
        handled += 1
        if handled == items:
            worker.stop()  # the running handler (this one) still finishes its item
        return {"ok": True}

    worker = workfence.Worker(
        dsn, queue, handler, owner=OWNER, concurrency=1, batch_size=batch, poll_wait=1
    )
    began = time.perf_counter()
    await worker.run()
    return time.perf_counter() - began


async def main() -> None:
    """Parse the arguments and run the rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("workfence").setLevel(logging.CRITICAL)  # nothing but the bench lines
    modes = {"raw": raw, "library": library}
    for rnd in range(1, args.rounds + 1):
        order = ["raw", "library"] if rnd % 2 else ["library", "raw"]
        for mode in order:
            queue = f"bench-python-{mode}-{uuid.uuid4().hex[:10]}"
            await enqueue(args.dsn, queue, args.items)
            seconds = await modes[mode](args.dsn, queue, args.items, args.batch)
            print(
                f"bench lang=python mode={mode} round={rnd} items={args.items} "
                f"seconds={seconds:.3f} items_per_s={args.items / seconds:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
