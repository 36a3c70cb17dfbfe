"""The release test's Python worker (scripts/release-test.sh): run from a fresh virtual environment
holding only the packaged `workfence` wheel or sdist and what it depends on, never this repository.

usage: python worker.py DSN
Enqueues three items into queue `release-python` with the library, works them with its Worker
(each handler returns its result: work_finish), and exits 0 once the server says all three are
done with their results, 1 otherwise (after 60 s at most).
"""

import asyncio
import sys

import psycopg

import workfence
from workfence import sync

QUEUE = "release-python"


async def double(job: workfence.Job) -> dict:
    return {"doubled": job.payload["n"] * 2}


async def main(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(3):
            sync.enqueue(conn, QUEUE, {"n": n}, key=f"k{n}")
    worker = workfence.Worker(dsn, QUEUE, double, poll_wait=1)
    running = asyncio.create_task(worker.run())
    results: list = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(600):
            cursor = await conn.execute(
                "SELECT (result->>'doubled')::int FROM workfence.items"
                " WHERE queue = %s AND state = 'done' ORDER BY key",
                (QUEUE,),
            )
            results = [row[0] for row in await cursor.fetchall()]
            if len(results) == 3:
                break
            await asyncio.sleep(0.1)
    worker.stop()
    await running
    print(f"python workfence {workfence.__version__}: done {results}")
    return 0 if results == [0, 2, 4] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
