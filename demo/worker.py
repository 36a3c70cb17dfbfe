"""The demo's worker (scripts/demo.sh, demo/demo.py): a worker process on the `workfence` library
(clients/python), which the demo runs twice, as A and B, with the same owner name.

Its jobs, by queue:
- `invoices`: the job writes its row of the business table `demo.invoices_sent` (invoice, epoch,
  worker's pid) in its fenced transaction (`work_assert` ... `work_finish`, one commit), as
  docs/writing-workers.md says for writes in the same database.
- `messages`: the job sends its message to an outside system, the database `provider` standing in
  for a provider's API, whose `provider.deliver(message, epoch, body)` keeps the highest epoch per
  message and rejects older ones (docs/writing-workers.md, *Fencing writes to other systems with
  the epoch*). Right before it sends, the job checks its lease (the guard: `work_lease_status` is
  `current`); then it records the outcome in `demo.messages_sent` and finishes, in its fenced
  transaction.

The stall: with WORKFENCE_DEMO_STALL=before-write (invoices) or after-guard (messages), the first
job that reaches that point stops its whole process with SIGSTOP, as a long pause would (a garbage
collection, a swapped-out process): nothing of the process runs, its heartbeat neither, until the
demo sends SIGCONT. The stall is put where it hurts most: after the guard, the lease is checked and
the send not yet made.

Configuration from the environment: WORKFENCE_DSN and WORKFENCE_QUEUE (required),
WORKFENCE_OWNER (required: the demo gives both processes the same), WORKFENCE_PROVIDER_DSN
(required for `messages`), WORKFENCE_DEMO_STALL (optional). One line per event on stdout, the
library's log lines among them (`claim id=7 epoch=42 attempt=1`, `renew id=7 refused`, `refused
id=7 (lease lost)`, `finish id=7 epoch=42 ok`); the job's own lines start with `job`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

import psycopg

import workfence

#: Each lease, in seconds: short, so that a stopped worker's lease lapses soon.
LEASE_SECONDS = 2.0
#: The long poll's wait, in seconds (a waiting claim also wakes when a lease lapses).
POLL_WAIT_SECONDS = 5.0
#: Items one claim takes: A holds all three of its part, one running and two waiting their turn.
BATCH = 3

STALL_POINTS = ("before-write", "after-guard")

log = logging.getLogger("workfence.demo")


class Settings:
    """The worker's settings, read from the environment (see the module's docstring)."""

    def __init__(self, env: dict[str, str]) -> None:
        """Read and check the settings; a missing or bad one raises `SystemExit` with its name."""

        def need(name: str) -> str:
            value = env.get(name, "")
            if not value:
                raise SystemExit(f"demo/worker.py: set {name}")
            return value

        self.dsn = need("WORKFENCE_DSN")
        self.queue = need("WORKFENCE_QUEUE")
        self.owner = need("WORKFENCE_OWNER")
        self.provider_dsn = env.get("WORKFENCE_PROVIDER_DSN", "")
        if self.queue == "messages" and not self.provider_dsn:
            raise SystemExit("demo/worker.py: set WORKFENCE_PROVIDER_DSN for the messages queue")
        if self.queue not in ("invoices", "messages"):
            raise SystemExit(
                f"demo/worker.py: no job for queue {self.queue!r} (invoices, messages)"
            )
        self.stall = env.get("WORKFENCE_DEMO_STALL", "")
        if self.stall and self.stall not in STALL_POINTS:
            raise SystemExit(
                f"demo/worker.py: WORKFENCE_DEMO_STALL={self.stall!r} is none of {STALL_POINTS}"
            )


class Jobs:
    """The two jobs, and the stall that stops the process once."""

    def __init__(self, settings: Settings) -> None:
        """Jobs for `settings`; the stall is armed when WORKFENCE_DEMO_STALL is set."""
        self.settings = settings
        self.stall_armed = bool(settings.stall)

    def stall(self, point: str, job: workfence.Job) -> None:
        """Stop this whole process (SIGSTOP to itself) the first time a job reaches `point`, if
        that is the configured stall point. Blocking on purpose: until SIGCONT nothing of the
        process runs, as in a real pause."""
        if not self.stall_armed or self.settings.stall != point:
            return
        self.stall_armed = False
        log.info(
            "job stall id=%d epoch=%d: this process stops itself (SIGSTOP) %s",
            job.id,
            job.epoch,
            point.replace("-", " "),
        )
        for handler in log.handlers + logging.getLogger("workfence").handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
        log.info("job resumed id=%d epoch=%d (SIGCONT)", job.id, job.epoch)

    async def invoice(self, job: workfence.Job) -> None:
        """Write the invoice's row of `demo.invoices_sent` and finish, in one fenced transaction."""
        invoice = job.payload["invoice"]
        log.info("job work id=%d epoch=%d: invoice %s", job.id, job.epoch, invoice)
        self.stall("before-write", job)
        try:
            async with job.transaction() as conn:
                await conn.execute(
                    "INSERT INTO demo.invoices_sent (invoice, epoch, worker_pid)"
                    " VALUES (%s, %s, %s)",
                    (invoice, job.epoch, os.getpid()),
                )
                job.result = {"invoice": invoice, "worker_pid": os.getpid()}
                log.info(
                    "job write id=%d epoch=%d: demo.invoices_sent %s (commits with the finish)",
                    job.id,
                    job.epoch,
                    invoice,
                )
        except workfence.LeaseLost as error:
            log.info(
                "job write id=%d epoch=%d refused, SQLSTATE %s: %s",
                job.id,
                job.epoch,
                error.sqlstate,
                error.message,
            )
            raise

    async def message(self, job: workfence.Job) -> None:
        """Guard, send to the provider with the epoch, then record the outcome and finish in one
        fenced transaction (docs/writing-workers.md: pass the epoch along, the other side rejects
        older ones, finish as usual). A guard that does not say `current` skips the send; the
        fenced transaction, the ground truth, then settles the item (and is refused)."""
        message = job.payload["message"]
        log.info("job work id=%d epoch=%d: message %s", job.id, job.epoch, message)
        status = await self.lease_status(job)
        outcome = f"not sent: the guard said {status}"
        if status == "current":
            log.info("job guard id=%d epoch=%d: the lease is current", job.id, job.epoch)
            self.stall("after-guard", job)
            # A send once made cannot be taken back: it runs to its end even when the runner
            # cancels the job meanwhile (a refused renew), and logs what the provider answered.
            accepted = await asyncio.shield(self.send(job, message))
            outcome = "accepted" if accepted else "rejected"
        else:
            log.info(
                "job guard id=%d epoch=%d: the lease is %s: not sending", job.id, job.epoch, status
            )
        async with job.transaction() as conn:
            await conn.execute(
                "INSERT INTO demo.messages_sent (message, epoch, outcome) VALUES (%s, %s, %s)",
                (message, job.epoch, outcome),
            )
            job.result = {"message": message, "outcome": outcome}

    async def lease_status(self, job: workfence.Job) -> str:
        """The guard: what `work_lease_status` says of the job's token right now."""
        async with await psycopg.AsyncConnection.connect(
            self.settings.dsn, autocommit=True
        ) as conn:
            cur = await conn.execute(
                "SELECT workfence.work_lease_status(%s, %s, %s)", (job.id, job.owner, job.epoch)
            )
            row = await cur.fetchone()
        return str(row[0]) if row else "missing"

    async def send(self, job: workfence.Job, message: str) -> bool:
        """Send `message` to the provider with the job's epoch; log its answer and return whether
        it accepted."""
        async with await psycopg.AsyncConnection.connect(
            self.settings.provider_dsn, autocommit=True
        ) as conn:
            cur = await conn.execute(
                "SELECT accepted, held_epoch FROM provider.deliver(%s, %s, %s)",
                (message, job.epoch, f"{message} from pid {os.getpid()}"),
            )
            row = await cur.fetchone()
        if row is None:
            raise RuntimeError("provider.deliver returned no row")
        accepted, held = bool(row[0]), int(row[1])
        if accepted:
            log.info(
                "job send id=%d epoch=%d: the provider accepted %s", job.id, job.epoch, message
            )
        else:
            log.info(
                "job send id=%d epoch=%d: the provider REJECTED %s: it holds epoch %d, newer",
                job.id,
                job.epoch,
                message,
                held,
            )
        return accepted


def main() -> int:
    """Read the settings, log to stdout, run the worker until SIGTERM or SIGINT."""
    settings = Settings(dict(os.environ))
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("workfence")  # the library's, and the job's child logger
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    jobs = Jobs(settings)
    job: Any = jobs.invoice if settings.queue == "invoices" else jobs.message
    workfence.Worker(
        settings.dsn,
        settings.queue,
        job,
        owner=settings.owner,
        concurrency=1,
        batch_size=BATCH,
        lease=LEASE_SECONDS,
        poll_wait=POLL_WAIT_SECONDS,
        shutdown_grace=0,
    ).run_sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
