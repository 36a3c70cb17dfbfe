"""A pg_workfence worker in Python 3.11 on the `workfence` library (clients/python): the example
every language implements.

The library's runner does the loop (long-poll claim, heartbeat renews and `LISTEN
work_lease_lost`, fenced finish, `work_fail`, release on SIGTERM); this program is the job and
the settings. The job sleeps `sleep_ms` (cut short when the lease is lost or at shutdown),
raises if `fail`, else writes `n*n` to `examples.results` in the job's fenced transaction
(`work_assert` ... `work_finish`, one commit). `"heartbeat": false` in the payload stops the
renewing of that item, a stand-in for a stalled worker.

Configuration from the environment: WORKFENCE_DSN (required), WORKFENCE_QUEUE (default
`examples`), WORKFENCE_OWNER (default: the library's `<hostname>:<pid>`), WORKFENCE_BATCH
(default 5), WORKFENCE_CONCURRENCY (default 1), WORKFENCE_LEASE_SECONDS (default 6),
WORKFENCE_WAIT_SECONDS (default 5). One line per event on stdout, e.g.
`[python pid=123] claim id=7 epoch=42 attempt=1`. See examples/python/README.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

import workfence


class JobFailed(Exception):
    """The job raised on purpose: recorded with work_fail, retried until max_attempts."""


async def job(job: workfence.Job) -> None:
    """The stand-in job: sleep, fail on purpose or write n*n under the lease, and finish."""
    payload: dict[str, Any] = job.payload
    if payload.get("heartbeat", True) is False:
        job.stop_renewing()
    await asyncio.sleep(payload.get("sleep_ms", 0) / 1000)  # cancelled on loss or shutdown
    if payload.get("fail", False):
        raise JobFailed(f"job {payload['n']} failed on purpose")
    output = int(payload["n"]) ** 2
    async with job.transaction() as conn:
        await conn.execute(
            "INSERT INTO examples.results (item_id, epoch, worker_pid, output)"
            " VALUES (%s, %s, %s, %s)",
            (job.id, job.epoch, os.getpid(), output),
        )
        job.result = {"output": output}


def main() -> int:
    """Read the settings, print the library's log lines, run until SIGTERM/SIGINT."""
    env = os.environ
    if not env.get("WORKFENCE_DSN"):
        raise SystemExit("worker.py: set WORKFENCE_DSN to a libpq connection string")
    handler = logging.StreamHandler(sys.stdout)  # flushed after every line
    handler.setFormatter(logging.Formatter(f"[python pid={os.getpid()}] %(message)s"))
    logger = logging.getLogger("workfence")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    workfence.Worker(
        env["WORKFENCE_DSN"],
        env.get("WORKFENCE_QUEUE", "examples"),
        job,
        owner=env.get("WORKFENCE_OWNER") or None,
        concurrency=int(env.get("WORKFENCE_CONCURRENCY", "1")),
        batch_size=int(env.get("WORKFENCE_BATCH", "5")),
        lease=float(env.get("WORKFENCE_LEASE_SECONDS", "6")),
        poll_wait=float(env.get("WORKFENCE_WAIT_SECONDS", "5")),
        retry=lambda attempt, error: 0.2,
        shutdown_grace=0,
    ).run_sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
