"""Peer runner for the pg_workfence benchmark: procrastinate (contender "procrastinate").

Usage (from bench/peers/python/install.sh's venv):
    .venv/bin/python procrastinate_runner.py --dsn postgresql://postgres@127.0.0.1:PORT/DB \
        --jobs N --concurrency C

Prints one JSON line on stdout (the runner contract of scripts/bench.sh); logs go to stderr.

What it does, untimed first:
  1. applies procrastinate's schema with `app.schema_manager.apply_schema_async()` when the
     database does not have it yet (procrastinate has no "is it applied" call and its schema
     script is not idempotent, so the runner looks for the table procrastinate_jobs);
  2. empties the queue with plain SQL: TRUNCATE of procrastinate's four tables (jobs, events,
     periodic defers, workers), so every run starts from empty tables;
  3. enqueues N jobs of one async no-op task in one queue ("bench") with one
     `Task.batch_defer_async` call (a single INSERT through procrastinate_defer_jobs_v1).
Then timed: `App.run_worker_async(concurrency=C, wait=False, listen_notify=False)`.

Settings that differ from procrastinate's defaults, and why:
  * PsycopgConnector pool: min_size = max_size = C (psycopg_pool's default min_size of 4 would
    exceed a max of 1). All else is procrastinate's default, including its per-checkout
    connection check (`check=AsyncConnectionPool.check_connection`, an empty query).
  * wait=False: procrastinate's documented way to have a worker "terminate as soon as it has
    caught up with the queues". The worker fetches jobs back to back while fewer than C run,
    never sleeps on fetch_job_polling_interval (that sleep only happens with wait=True), and
    when a fetch finds nothing it stops fetching, waits for its running jobs to be recorded
    as finished, unregisters and returns. So the timer stops when run_worker_async returns:
    an event from the library, no completion polling (resolution: the worker's own
    start and shutdown are inside the timed phase: one prune-stalled-workers and one
    register query before the first fetch, cancelling its idle side tasks and one
    unregister query after the last job is recorded).
  * listen_notify=False: with wait=False no one waits for a notification, and the LISTEN
    connection would hold one of the C pool connections for the whole run (with C = 1 the
    worker could never fetch).
  * concurrency=C: at most C jobs in flight in one asyncio worker. Fetching is sequential
    (one fetch_job query at a time); completions (finish_job) run concurrently.
  * delete_jobs: the default ("never"), so completed jobs stay as status 'succeeded' and
    are counted from the database afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import logging
import sys
import time

import psycopg
import procrastinate

QUEUE = "bench"
TASK = "bench_noop"

log = logging.getLogger("procrastinate_runner")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True, help="postgresql:// URL of the database")
    p.add_argument("--jobs", type=int, required=True, help="number of jobs N")
    p.add_argument("--concurrency", type=int, required=True, help="concurrency C")
    args = p.parse_args()
    if args.jobs < 1 or args.concurrency < 1:
        p.error("--jobs and --concurrency must be >= 1")
    return args


async def scalar(conn: psycopg.AsyncConnection, query: str):
    cur = await conn.execute(query)
    row = await cur.fetchone()
    assert row is not None
    return row[0]


async def run(args: argparse.Namespace) -> dict:
    n, c = args.jobs, args.concurrency
    version = importlib.metadata.version("procrastinate")

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=args.dsn, min_size=c, max_size=c
        )
    )

    @app.task(name=TASK, queue=QUEUE)
    async def bench_noop() -> None:
        return None

    # A connection of our own, outside procrastinate's pool, for the schema check, the
    # clean-up, the WAL positions and the final count.
    side = await psycopg.AsyncConnection.connect(args.dsn, autocommit=True)
    try:
        async with app.open_async():
            # 1. Schema, once per database.
            if await scalar(side, "SELECT to_regclass('procrastinate_jobs') IS NULL"):
                log.info("applying procrastinate's schema")
                await app.schema_manager.apply_schema_async()
            else:
                log.info("procrastinate's schema is already applied")

            # 2. Empty queue.
            await side.execute(
                "TRUNCATE procrastinate_events, procrastinate_periodic_defers,"
                " procrastinate_jobs, procrastinate_workers"
            )

            # 3. Enqueue N no-op jobs in one batch (committed when the call returns).
            ids = await bench_noop.batch_defer_async(*({} for _ in range(n)))
            if len(ids) != n:
                raise RuntimeError(f"batch_defer_async returned {len(ids)} ids, not {n}")
            todo = await scalar(
                side, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'"
            )
            if todo != n:
                raise RuntimeError(f"{todo} jobs in 'todo' after enqueueing, not {n}")
            log.info("enqueued %d jobs; running the worker", n)

            # 4. Timed: one worker, C concurrent jobs, until the queue is drained.
            lsn_before = await scalar(side, "SELECT pg_current_wal_insert_lsn()::text")
            t0 = time.monotonic()
            await app.run_worker_async(
                queues=[QUEUE],
                concurrency=c,
                wait=False,
                listen_notify=False,
            )
            seconds = time.monotonic() - t0
            lsn_after = await scalar(side, "SELECT pg_current_wal_insert_lsn()::text")
            cur = await side.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
                (lsn_after, lsn_before),
            )
            row = await cur.fetchone()
            assert row is not None
            wal_bytes = int(row[0])

        # 5. Verify from the database: exactly N succeeded, nothing else.
        cur = await side.execute(
            "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1 ORDER BY 1"
        )
        by_status = {status: count for status, count in await cur.fetchall()}
        if by_status != {"succeeded": n}:
            raise RuntimeError(f"expected {{'succeeded': {n}}}, the database has {by_status}")
    finally:
        await side.close()

    return {
        "contender": "procrastinate",
        "version": version,
        "jobs": n,
        "concurrency": c,
        "seconds": seconds,
        "wal_bytes": wal_bytes,
        "completed": by_status["succeeded"],
        "config": (
            f"one asyncio worker, run_worker_async(concurrency={c}, wait=False: drains the"
            f" queue and returns, which stops the timer, no polling), listen_notify=False,"
            f" PsycopgConnector pool min=max={c}, async no-op task, N jobs enqueued with"
            f" one batch_defer_async, delete_jobs=never (default)"
        ),
    }


def main() -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="procrastinate_runner: %(levelname)s %(name)s: %(message)s",
    )
    log.setLevel(logging.INFO)
    # procrastinate warns when the App is created in __main__, because its workers usually
    # import tasks by their dotted path; here the worker runs in this very process and the
    # task has an explicit name, so the warning does not apply.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    args = parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as exc:  # noqa: BLE001 - report any failure as a non-zero exit
        log.error("failed: %s: %s", type(exc).__name__, exc, exc_info=True)
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
