"""A pg_workfence worker in Python 3.11 with psycopg 3: the example every language implements.

It long-polls `workfence.work_claim` for a batch, runs each job while a heartbeat thread (its own
connection) renews every item it still holds, and commits the job's effect only under its lease:
`work_assert`, the INSERT into `examples.results` and `work_finish` in one transaction. A job that
raises is recorded with `work_fail`; a renew that is refused stops the job, which is then not
finished. Between renews the heartbeat's connection LISTENs on `work_lease_lost`: a notification
naming one of its tokens (id and epoch) stops that job at once, the same way. SIGTERM (or SIGINT)
stops it taking work, cancels a long poll in flight, abandons the job in progress and hands every
item it holds back with `work_release`, then it exits 0.

Configuration from the environment: WORKFENCE_DSN (libpq connection string, required),
WORKFENCE_QUEUE (default `examples`), WORKFENCE_OWNER (default: the hostname), WORKFENCE_BATCH
(default 5), WORKFENCE_LEASE_SECONDS (default 6; the heartbeat renews every third of it),
WORKFENCE_WAIT_SECONDS (default 5). One line per event on stdout, e.g.
`[python pid=123] claim id=7 epoch=42 attempt=1`. See examples/python/README.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from time import monotonic
from types import FrameType
from typing import Any

import psycopg
from psycopg import errors
from psycopg.types.json import Jsonb

PREFIX = f"[python pid={os.getpid()}]"

CLAIM = """
    SELECT id, key, payload, epoch, attempt, lease_until
      FROM workfence.work_claim(%(queue)s, %(owner)s, make_interval(secs => %(lease)s),
                                %(batch)s, make_interval(secs => %(wait)s))
"""
RENEW = "SELECT workfence.work_renew(%s, %s, %s, make_interval(secs => %s))"
ASSERT = "SELECT workfence.work_assert(%s, %s, %s)"
INSERT_RESULT = """
    INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES (%s, %s, %s, %s)
"""
FINISH = "SELECT workfence.work_finish(%s, %s, %s, %s)"
FAIL = "SELECT workfence.work_fail(%s, %s, %s, %s, retry_in => make_interval(secs => 0.2))"
RELEASE = "SELECT workfence.work_release(%s, %s, %s)"
LISTEN = "LISTEN work_lease_lost"

# The longest the heartbeat waits for a notification before it looks at its stop flag again:
# psycopg's wait in `notifies()` cannot be woken from another thread, so a shutdown waits for
# this slice at most (notifications themselves are handled the moment they arrive).
STOP_CHECK_SECONDS = 0.25


def query_bool(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> bool:
    """Run a statement that returns one boolean (renew, finish, fail, release)."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return bool(row[0])


def log(message: str) -> None:
    """Print one event line, flushed at once (stdout is a pipe under a test harness)."""
    print(f"{PREFIX} {message}", flush=True)


@dataclass(frozen=True)
class Config:
    """The worker's settings, read from WORKFENCE_* environment variables."""

    dsn: str
    queue: str
    owner: str
    batch: int
    lease: float
    wait: float

    @classmethod
    def from_env(cls) -> Config:
        """Read the settings; exit with a message when WORKFENCE_DSN is missing."""
        env = os.environ
        if not env.get("WORKFENCE_DSN"):
            raise SystemExit("worker.py: set WORKFENCE_DSN to a libpq connection string")
        return cls(
            dsn=env["WORKFENCE_DSN"],
            queue=env.get("WORKFENCE_QUEUE", "examples"),
            owner=env.get("WORKFENCE_OWNER") or socket.gethostname(),
            batch=int(env.get("WORKFENCE_BATCH", "5")),
            lease=float(env.get("WORKFENCE_LEASE_SECONDS", "6")),
            wait=float(env.get("WORKFENCE_WAIT_SECONDS", "5")),
        )


@dataclass(eq=False)
class Item:
    """One claimed item and its token (id, owner, epoch)."""

    id: int
    key: str
    payload: dict[str, Any]
    epoch: int
    attempt: int
    # Set when the job must stop: the lease was lost, or the worker is shutting down.
    interrupt: threading.Event = field(default_factory=threading.Event)
    lease_lost: bool = False

    @property
    def renewed(self) -> bool:
        """Whether the heartbeat renews this item: `"heartbeat": false` in the payload stands in
        for a worker that stalls (a GC pause, a partition) and lets the lease lapse mid-job."""
        return self.payload.get("heartbeat", True) is not False


class JobFailed(Exception):
    """The job raised: recorded with work_fail, retried until max_attempts."""


def run_job(item: Item) -> int | None:
    """The simulated job: sleep `sleep_ms`, then fail on purpose or return n*n.

    Returns None when interrupted (lease lost or SIGTERM) before it completed.
    """
    payload = item.payload
    if item.interrupt.wait(payload.get("sleep_ms", 0) / 1000):
        return None
    if payload.get("fail", False):
        raise JobFailed(f"job {payload['n']} failed on purpose")
    return int(payload["n"]) ** 2


class Heartbeat(threading.Thread):
    """Renews the lease of every item the worker holds every lease/3, on its own connection,
    and listens on that connection for `work_lease_lost` in between.

    A refused renew, or a notification naming one of the held tokens (matched by id AND epoch:
    the owner name is shared with other copies), marks the item lost and interrupts its job.
    The listening is on this connection because it is otherwise idle between renews and only
    this thread uses it: `conn.notifies(timeout=...)` is the wait until the next renew is due,
    and notifications that arrive during a renew are kept by psycopg and returned by the next
    `notifies()`. The notification is a hint that comes at the re-claim's commit; the refused
    renew (and the final `work_assert`) stay the ground truth.

    `drop` takes an item out of the held set and waits for a renew of it in flight, so that no
    renew runs while the main connection's final transaction holds the item's row lock (it
    would wait on it and then be refused).
    """

    def __init__(self, config: Config) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.config = config
        self.conn = self._connect()
        self.stopped = threading.Event()
        self._lock = threading.Lock()  # held while renewing or matching; guards _held
        self._held: dict[int, Item] = {}

    def _connect(self) -> psycopg.Connection[Any]:
        """Open the heartbeat's connection (autocommit) and LISTEN on `work_lease_lost`."""
        conn = psycopg.connect(self.config.dsn, autocommit=True)
        conn.execute(LISTEN)
        return conn

    def add(self, item: Item) -> None:
        """Hold `item`: renew it (unless its payload says not to) and watch for its loss."""
        with self._lock:
            self._held[item.id] = item

    def drop(self, item: Item) -> None:
        """Stop renewing and watching `item`; returns after a renew of it in flight."""
        with self._lock:
            self._held.pop(item.id, None)

    def run(self) -> None:
        """Renew every lease/3; wait for notifications in between, until stopped."""
        interval = self.config.lease / 3
        due = monotonic() + interval
        while not self.stopped.is_set():
            left = due - monotonic()
            if left > 0:
                self._listen(min(left, STOP_CHECK_SECONDS))
                continue
            with self._lock:
                items = list(self._held.values())
            for item in items:
                with self._lock:
                    if self.stopped.is_set() or item.id not in self._held or not item.renewed:
                        continue
                    self._renew(item)
            due = monotonic() + interval

    def _listen(self, timeout: float) -> None:
        """Handle the notifications that arrive within `timeout` seconds."""
        try:
            for notify in self.conn.notifies(timeout=timeout):
                self._notified(notify.payload)
        except psycopg.Error as exc:
            # Only the hint is missing meanwhile: renews still tell a lost lease. Reconnect
            # (and LISTEN again) if the connection broke, and do not spin on a dead one.
            log(f"listen error={exc}")
            if self.conn.closed or self.conn.broken:
                self._reconnect()
            self.stopped.wait(timeout)

    def _notified(self, payload: str) -> None:
        """A `work_lease_lost` payload: if it names a held token (id and epoch), lose it."""
        try:
            token = json.loads(payload)
            lost_id, lost_epoch = int(token["id"]), int(token["epoch"])
        except (ValueError, TypeError, KeyError) as exc:
            log(f"listen error=unreadable work_lease_lost payload {payload!r}: {exc!r}")
            return
        with self._lock:
            item = self._held.get(lost_id)
            if item is None or item.epoch != lost_epoch:
                return  # another worker's token, or one of ours already settled
            log(f"lease lost (notified) id={lost_id} epoch={lost_epoch}")
            self._lose(item)

    def _lose(self, item: Item) -> None:
        """The item is someone else's now: forget it and stop its job (caller holds _lock)."""
        del self._held[item.id]
        item.lease_lost = True
        item.interrupt.set()

    def _renew(self, item: Item) -> None:
        """Renew one item's lease (caller holds _lock); a refusal loses the item."""
        try:
            ok = query_bool(
                self.conn, RENEW, (item.id, self.config.owner, item.epoch, self.config.lease)
            )
        except psycopg.Error as exc:
            # The lease is not known to be lost: the final work_assert decides. Reconnect
            # for the next round if the connection broke.
            log(f"renew id={item.id} error={exc}")
            if self.conn.closed or self.conn.broken:
                self._reconnect()
            return
        log(f"renew id={item.id} {'ok' if ok else 'refused'}")
        if not ok:
            self._lose(item)

    def _reconnect(self) -> None:
        """Replace a broken connection (LISTENing again); log and keep the old on failure."""
        try:
            self.conn = self._connect()
        except psycopg.Error as exc:
            log(f"heartbeat reconnect error={exc}")

    def stop(self) -> None:
        """Stop the thread (within STOP_CHECK_SECONDS or a renew) and close its connection."""
        self.stopped.set()
        self.join()
        self.conn.close()


class Worker:
    """The claim / run / finish loop on the main connection."""

    def __init__(self, config: Config, stopping: threading.Event) -> None:
        self.config = config
        self.stopping = stopping  # set by SIGTERM/SIGINT
        self.conn = psycopg.connect(config.dsn, autocommit=True)
        self.heartbeat = Heartbeat(config)
        self.polling = False  # True while the long-poll claim is on the main connection
        self.current: Item | None = None  # the item whose job runs now

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: stop taking work, interrupt the job, cancel a long poll in flight.

        Python runs this in the main thread between bytecodes, also while psycopg waits for
        the long poll's result; the server then ends the claim with 57014 (QueryCanceled),
        and since it ran as one autocommit statement, it claimed nothing.
        """
        if self.stopping.is_set():
            return
        self.stopping.set()
        current = self.current
        if current is not None:
            current.interrupt.set()
        if self.polling:
            try:
                self.conn.cancel_safe(timeout=5)
            except psycopg.Error as exc:
                log(f"cancel error={exc}")

    def run(self) -> int:
        """Claim and work batches until SIGTERM/SIGINT; returns the exit status (0)."""
        self.heartbeat.start()
        try:
            while not self.stopping.is_set():
                self.work_batch(self.claim())
        finally:
            self.heartbeat.stop()
            self.conn.close()
        log("exit")
        return 0

    def claim(self) -> list[Item]:
        """One long poll; the items claimed (none when the wait passed or SIGTERM cancelled it)."""
        c = self.config
        params = {
            "queue": c.queue,
            "owner": c.owner,
            "lease": c.lease,
            "batch": c.batch,
            "wait": c.wait,
        }
        self.polling = True
        try:
            # A SIGTERM before this check is seen here; one after it cancels the query.
            # (One that lands between the check and the query reaching the server is lost
            # as a cancel: the loop then ends when the long poll returns, in at most
            # WORKFENCE_WAIT_SECONDS.)
            if self.stopping.is_set():
                return []
            rows = self.conn.execute(CLAIM, params).fetchall()
        except errors.QueryCanceled:
            if self.stopping.is_set():
                return []
            raise
        finally:
            self.polling = False
        items = [Item(id=r[0], key=r[1], payload=r[2], epoch=r[3], attempt=r[4]) for r in rows]
        for item in items:
            log(f"claim id={item.id} epoch={item.epoch} attempt={item.attempt}")
            self.heartbeat.add(item)
        return items

    def work_batch(self, items: list[Item]) -> None:
        """Work the items one by one; on SIGTERM release the ones not started."""
        for index, item in enumerate(items):
            if self.stopping.is_set():
                for rest in items[index:]:
                    self.release(rest)
                return
            self.work_one(item)

    def work_one(self, item: Item) -> None:
        """Run one item's job and settle it: finish, fail, release (SIGTERM), or, when its lease
        was lost (a refused renew or a `work_lease_lost` notification), abandon it."""
        self.current = item
        if self.stopping.is_set():  # a SIGTERM just before `current` was set
            item.interrupt.set()
        try:
            output = run_job(item)
        except Exception as exc:  # any error of the job is its failure, not the worker's
            self.heartbeat.drop(item)
            self.fail(item, str(exc))
            return
        finally:
            self.current = None
        self.heartbeat.drop(item)
        if item.lease_lost:
            log(f"refused id={item.id} (lease lost)")
        elif output is None:  # interrupted by SIGTERM: abandoned, handed back
            self.release(item)
        else:
            self.finish(item, output)

    def finish(self, item: Item, output: int) -> None:
        """Assert the lease, write the effect and finish, in one transaction."""
        c = self.config
        try:
            with self.conn.transaction():
                # Raises 55000 unless the token is current; then holds the item's row lock
                # to COMMIT, so nobody can claim it before the INSERT below commits.
                self.conn.execute(ASSERT, (item.id, c.owner, item.epoch))
                self.conn.execute(INSERT_RESULT, (item.id, item.epoch, os.getpid(), output))
                finished = query_bool(
                    self.conn, FINISH, (item.id, c.owner, item.epoch, Jsonb({"output": output}))
                )
                if not finished:  # cannot happen under the assert's lock; never commit it
                    raise psycopg.Rollback()
        except errors.ObjectNotInPrerequisiteState:
            # Leaving the block on the exception rolled the transaction back: no COMMIT was
            # sent (after the error the server would have turned it into a ROLLBACK anyway).
            log(f"refused id={item.id} (lease lost)")
            return
        log(f"finish id={item.id} epoch={item.epoch} {'ok' if finished else 'false'}")

    def fail(self, item: Item, error: str) -> None:
        """Record the job's error with `work_fail` (retried in 0.2 s, or dead-lettered)."""
        ok = query_bool(self.conn, FAIL, (item.id, self.config.owner, item.epoch, error))
        if ok:
            log(f"fail id={item.id} error={error}")
        else:
            log(f"refused id={item.id} (lease lost)")

    def release(self, item: Item) -> None:
        """Hand the item back unfinished with `work_release` (SIGTERM)."""
        self.heartbeat.drop(item)
        args = (item.id, self.config.owner, item.epoch)
        try:
            ok = query_bool(self.conn, RELEASE, args)
        except errors.QueryCanceled:
            # A SIGTERM's cancel meant for the long poll can land on the next statement.
            ok = query_bool(self.conn, RELEASE, args)
        if ok:
            log(f"release id={item.id} epoch={item.epoch}")
        else:
            log(f"refused id={item.id} (lease lost)")


def main() -> int:
    """Read the settings, install the signal handlers, run the worker; the exit status."""
    config = Config.from_env()
    stopping = threading.Event()
    # Until the worker is connected, a signal only asks it to stop before it starts.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stopping.set())
    worker = Worker(config, stopping)
    signal.signal(signal.SIGTERM, worker.on_signal)
    signal.signal(signal.SIGINT, worker.on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
