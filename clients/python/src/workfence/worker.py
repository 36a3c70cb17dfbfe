"""The worker runner: claim, heartbeat, run the handler, settle, shut down (clients/README.md).

One `Worker` works one queue on psycopg's `AsyncConnection`, with three kinds of connection:
the **claim** connection (the long poll `work_claim(..., wait)`, autocommit, and the releases of
buffered items on shutdown), the **heartbeat** connection (renews every `lease / 3` and
`LISTEN work_lease_lost` in between), and one connection per running handler (`concurrency` at
most), on which the item is settled and the job's fenced transaction runs.

The shape (a buffer of claimed items fed to a fixed number of handler slots, a heartbeat for all
held items, a graceful shutdown with a grace period) is that of graphile-worker's and
procrastinate's workers; the fencing (abandon on a refused renew or a `work_lease_lost`
notification naming the token, `work_assert` ... `work_finish` in one transaction) is
docs/writing-workers.md's.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import os
import re
import signal
import socket
import threading
import traceback
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import datetime, timedelta
from time import monotonic
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from . import _sql, tracing
from .errors import InvalidArgument, LeaseLost, WorkfenceError, translate

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["Worker", "Job", "CancelFlag", "Handler", "RetryPolicy", "default_owner"]

log = logging.getLogger("workfence")

#: A handler: `async def handler(job) -> result` or `def handler(job) -> result`.
Handler = Callable[["Job"], Any]
#: A retry policy: (attempt, error) -> the delay before the next attempt, in seconds or as a
#: timedelta; None means the server's backoff.
RetryPolicy = Callable[[int, BaseException], "float | timedelta | None"]

# How long the runner waits after a failed claim or heartbeat call before it tries again
# (doubling up to the maximum), in seconds.
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0
# How long a stop waits for a long poll to end after a cancel request, before sending another
# (a cancel that reached the server before the query did is lost), in seconds.
_CANCEL_AGAIN_AFTER = 0.5
# At the end of the shutdown grace the handlers are cancelled; how long the runner then waits
# for them to end before it lets go of those still running (a handler that swallows
# `CancelledError`, a thread that ignores `job.cancelled`): their connections are closed, their
# items released, and `run()` returns, in seconds.
_CANCEL_WAIT = 1.0
# How much longer a job whose `work_finish` or fenced `COMMIT` is in flight at that point may
# take (it is never cancelled: the commit decides), in seconds. Past it the job is left to its
# lease and `run()` returns.
_COMMIT_WAIT = 5.0
# The bound on each connect and `work_release` made while shutting down, in seconds.
_EXIT_CALL_WAIT = 5.0
# A settle (finish, fail, release, a fenced COMMIT) whose reply was lost is sent again on a new
# connection after these waits (the first at once, then doubling), until the lease ends, in
# seconds; each connect is bounded by `_RESEND_CONNECT_WAIT`.
_RESEND_FIRST = 0.0
_RESEND_NEXT = 0.1
_RESEND_MAX = 1.0
_RESEND_CONNECT_WAIT = 10.0
# The text `work_fail` is sent for a handler's error: its type and message, then the last frames
# of its traceback, then its causes, at most `_ERROR_TEXT_MAX` bytes (the server keeps 2048 and
# cuts the rest from the end, where the newest frames are: cut here from the top instead), the
# first line at most `_ERROR_HEAD_MAX` bytes of them.
_ERROR_TEXT_MAX = 2048
_ERROR_HEAD_MAX = 1024
# ... and at most `_CAUSES_NAMED` lines `caused by: ...`, each at most `_CAUSE_MAX` bytes.
_CAUSES_NAMED = 3
_CAUSE_MAX = 256

# The SQLSTATEs of claim errors that retrying can fix (the claim is retried with backoff): the
# connection class 08, admin shutdown / crash / not yet accepting connections (57P0x), a
# cancelled statement (57014), serialization failure and deadlock (40001, 40P01), a read-only
# standby not yet promoted (25006) and insufficient resources (class 53). A lost connection
# without a SQLSTATE heals too. Any other SQLSTATE (no extension 3F000, a missing function
# 42883, a missing grant 42501, a bad argument 22023/22004, ...) ends `run()` with the error.
_HEALING_CODES = frozenset({"57014", "40001", "40P01", "25006"})
_HEALING_CLASSES = ("08", "53", "57P0")
# The SQLSTATEs that mean the extension may be missing from the database: the error's hint says
# so.
_NO_EXTENSION_CODES = frozenset({"3F000", "42883"})
_NO_EXTENSION_HINT = (
    "the extension pg_workfence may be missing: CREATE EXTENSION pg_workfence in this database"
)
# A JSON text holding the escape \u0000 (an odd number of backslashes before u0000), which
# PostgreSQL's jsonb cannot store.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# The columns of a claim row the runner reads, by name, in the order `Job` takes them.
_CLAIM_COLUMNS = ("id", "key", "payload", "epoch", "attempt", "lease_until", "progress", "trace")

LEASE_LOST = "lease lost"
SHUTDOWN = "shutdown"


def default_owner() -> str:
    """The default owner name, `<hostname>:<pid>` (clients/README.md): it names the process for
    an operator reading `work_item`; it is not an identity (the epoch fences)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class CancelFlag:
    """A job's cancellation flag, like a `threading.Event`: set when the job must stop, with
    the `reason` ("lease lost" or "shutdown"). An async handler is also cancelled as an asyncio
    task; a plain function (run in a thread) can only check `is_set()` or `wait(timeout)`."""

    def __init__(self) -> None:
        """A flag not yet set."""
        self._event = threading.Event()
        self.reason: str | None = None

    def is_set(self) -> bool:
        """Whether the job must stop."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the flag is set or `timeout` seconds pass (None: no
        limit). Result: whether it is set. For plain-function handlers: an async handler must
        not block the event loop with it."""
        return self._event.wait(timeout)

    def __bool__(self) -> bool:
        """`is_set()`."""
        return self._event.is_set()

    def _set(self, reason: str) -> None:
        """Set the flag (the first reason is kept)."""
        if self.reason is None:
            self.reason = reason
        self._event.set()


class Job:
    """One claimed item, handed to the handler.

    Attributes: `id`, `key`, `payload` (the decoded JSON), `epoch` (the fencing token: pass it
    to other systems the job writes to, docs/writing-workers.md), `attempt` (1 on the first
    claim), `lease_until` (server time at the claim), `checkpoint` (from 0.12.0: the last
    progress an earlier attempt stored with `job.progress(value)`, None on a first attempt and
    from an older server), `trace` (from 0.12.0: the W3C `traceparent` the item was enqueued
    with, `00-<trace id>-<span id>-<flags>`; None when it has none, and from an older server),
    `queue`, `owner`, `cancelled` (a `CancelFlag`), and `result`, the JSON value
    `job.transaction()` (or `job.guard()`) finishes the item with; `fencing_token` is the
    string `"<id>:<epoch>"`, the idempotency key to give an external API. A step of a workflow
    (enqueued with `after=`, from 0.12.0) reads what its parents ended with from
    `await job.parent_results()`.
    """

    def __init__(
        self, worker: Worker, row: tuple[Any, ...], claimed_at: float | None = None
    ) -> None:
        """The job for one row of `work_claim` (id, key, payload, epoch, attempt, lease_until,
        and from 0.12.0 progress and trace); `claimed_at` is the `monotonic()` time the claim was
        sent (default: now), from which the runner counts the lease it is sure of."""
        self.id: int = row[0]
        self.key: str = row[1]
        self.payload: Any = row[2]
        self.epoch: int = row[3]
        self.attempt: int = row[4]
        self.lease_until: datetime = row[5]
        self.checkpoint: Any = row[6] if len(row) > 6 else None
        self.trace: str | None = row[7] if len(row) > 7 else None
        self.queue = worker.queue
        self.owner = worker.owner
        self.cancelled = CancelFlag()
        self.result: Any = None
        self._worker = worker
        # Until when (monotonic) the lease surely holds: the time the claim or the last accepted
        # renew was sent, plus the lease. Before it no other claim can take the item.
        sent = monotonic() if claimed_at is None else claimed_at
        self._lease_end = sent + worker.lease
        self._renewing = True  # the heartbeat renews it (stop_renewing() turns it off)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Future[Any] | None = None  # the handler's task while it runs
        self._lost = False  # the lease is known lost: abandon, settle nothing
        self._settling = False  # finish/commit in flight: not cancelled any more
        self._settled = False  # finished (or failed/released): nothing left to send
        self._abandoned = False  # let go at shutdown: its result is ignored, its item released
        self._refusal_logged = False

    def __repr__(self) -> str:
        """`Job(id=.., epoch=.., attempt=..)`."""
        return f"Job(id={self.id}, epoch={self.epoch}, attempt={self.attempt})"

    @property
    def fencing_token(self) -> str:
        """The job's fencing token as one stable string, `"<id>:<epoch>"` (e.g. `"7:42"`): pass
        it as the idempotency key of a call to an external API (a payment, an email), so that
        the API itself drops a second call made under the same token. A later attempt has a
        newer epoch, hence another token: an idempotency key for one attempt, not for the item
        (use the item's `key`, or `id`, for that)."""
        return f"{self.id}:{self.epoch}"

    async def progress(self, value: Any) -> bool:
        """Store a checkpoint: `workfence.work_progress(id, owner, epoch, value)` (from 0.12.0),
        fenced like a renew. Result: true when it was stored (the lease is current); the next
        attempt's claim returns it as `job.checkpoint`, and `work_item` shows it. False when the
        token is stale (nothing stored): the lease is lost, and the runner treats it as a
        refused renew: `job.cancelled` is set, an async handler is cancelled at its next
        `await`, nothing is settled for the item. Also false, without a call, when the runner
        already lost the lease or let the job go.

        `value` is any JSON value (at most 64 KiB of JSON text: the server's bound). It is sent
        on the job's connection, at once (autocommit); inside `job.transaction()` it is part of
        that transaction. Async handlers only. Errors: `ValueError` ("progress is not JSON:
        ...") for a value that is not JSON, `InvalidArgument` (22023: over 64 KiB), other server
        errors as `workfence.errors` classes, `psycopg.OperationalError` for a lost connection;
        42883 from a server older than 0.12.0.
        """
        if self._lost or self._abandoned:
            return False
        if self._settled:
            raise RuntimeError(f"job {self.id} is already settled")
        text = _json_text(value, "progress", null=True)
        conn = await self._connection()
        ok = await _fetch_bool(conn, _sql.PROGRESS, (self.id, self.owner, self.epoch, text))
        if ok:
            log.debug("progress id=%d ok", self.id)
            return True
        log.warning("progress id=%d refused", self.id)
        self._worker._heartbeat.discard(self)
        self._worker._lose(self)
        return False

    async def parent_results(self) -> dict[int, Any] | None:
        """The results of the items this one waited for (its parents: `enqueue(..., after=)`),
        read with `workfence.work_parent_results(id, owner, epoch)` (from 0.12.0), fenced like a
        renew. Result: a dict from each parent's id to what it ended with: a parent that is done
        maps to its result (None when it finished without one); one that ended failed or
        cancelled (only an item enqueued with `on_parent_failure="run"` runs after that) maps to
        `{"state": "failed" | "cancelled", "error": <its last error text or None>}`. `{}` for an
        item without parents (a purged parent is left out).

        None when the token is stale (the item was claimed anew, cancelled or finished: a
        stalled copy reads nothing); the runner then treats it as a refused renew, as
        `progress`: `job.cancelled` is set, an async handler is cancelled at its next `await`,
        nothing is settled for the item (`parent_results id=.. refused`, then `refused id=..
        (lease lost)`). Also None, without a call, when the runner already lost the lease or let
        the job go. Sent on the job's connection (inside `job.transaction()`, in that
        transaction); reads only. Async handlers only. Errors: server errors as
        `workfence.errors` classes, `psycopg.OperationalError` for a lost connection; 42883 from
        a server older than 0.12.0.
        """
        if self._lost or self._abandoned:
            return None
        if self._settled:
            raise RuntimeError(f"job {self.id} is already settled")
        conn = await self._connection()
        try:
            cur = await conn.execute(_sql.PARENT_RESULTS, (self.id, self.owner, self.epoch))
            row = await cur.fetchone()
        except psycopg.Error as error:
            translated = translate(error)
            if translated is error:
                raise
            raise translated from error
        results = None if row is None else row[0]
        if results is None:
            log.warning("parent_results id=%d refused", self.id)
            self._worker._heartbeat.discard(self)
            self._worker._lose(self)
            return None
        return {int(parent): value for parent, value in results.items()}

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The job's connection, replaced by a new one when it broke while idle (a terminated
        backend): nothing of the job was open on it."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the job's calls are only available while the handler runs")
        if conn.closed or conn.broken:
            self._conn = await self._worker._connect()
            await conn.close()
            return self._conn
        return conn

    def stop_renewing(self) -> None:
        """Stop renewing this job's lease: the lease then lapses `lease` after the last renew,
        and another claim may take the item (it is then lost: a `work_lease_lost` notification
        or the final `work_assert` stops the job). A hook for tests that need a lease to lapse
        while a job runs (a stand-in for a stalled worker), and for jobs that should run into
        their lease. Takes effect from the next heartbeat round."""
        self._renewing = False

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The job's fenced transaction: `async with job.transaction() as conn:` yields the
        job's connection in a transaction that began with `work_assert(id, owner, epoch)`; on a
        clean exit the runner calls `work_finish(id, owner, epoch, job.result)` in it and
        commits, so the block's writes commit only while the lease is held (promise 1,
        docs/writing-workers.md). The item is then finished (logged `finish id=.. epoch=.. ok`)
        and the handler's return value is ignored. An exception in the block rolls it back and
        propagates (the item is failed if the handler lets it through). A `job.result` that
        is not JSON raises `ValueError` ("result is not JSON: ...") after a rollback.

        A `COMMIT` whose reply is lost (the connection dropped) is resolved before the block
        exits: the runner asks the server on a new connection, within the lease, whether this
        token finished the item. If it did, the block exits cleanly (the writes and the finish
        committed); if the token is still current (rolled back), the connection error
        propagates; if the lease is lost meanwhile, `LeaseLost`.

        The heartbeat stops renewing the item before `work_assert` (which holds its row lock
        until the commit). A job's connection that broke while idle is replaced first. Async
        handlers only. Errors: `LeaseLost` (55000: `work_assert` refused the token, `COMMIT`
        found it superseded, or `work_finish` returned false) after a rollback, and the item is
        abandoned; also `LeaseLost`, before anything is sent, when the runner already lost the
        lease or let the job go at shutdown (the item released); other server errors of these
        three statements as `workfence.errors` classes; errors of the block's own statements
        unchanged.
        """
        if self._abandoned:
            raise LeaseLost(
                "lease lost",
                sqlstate="55000",
                detail="the runner let the job go at shutdown and released its item",
            )
        if self._lost:
            raise LeaseLost("lease lost", sqlstate="55000", detail="the runner lost the lease")
        if self._conn is None:
            raise RuntimeError("job.transaction() is only available while the handler runs")
        if self._settled:
            raise RuntimeError(f"job {self.id} is already settled")
        conn = await self._connection()
        worker = self._worker
        await worker._heartbeat.drop(self)
        token = (self.id, worker.owner, self.epoch)
        phase = "assert"
        try:
            async with conn.transaction():
                await conn.execute(_sql.ASSERT, token)
                phase = "body"
                yield conn
                result = _result_json(self.result)  # ValueError: rolled back, then failed
                phase = "finish"
                self._settling = True
                cur = await conn.execute(_sql.FINISH, (*token, result))
                row = await cur.fetchone()
                if row is None or not row[0]:
                    raise LeaseLost(
                        "lease lost",
                        sqlstate="55000",
                        detail="work_finish refused the token; the transaction was rolled back",
                    )
                phase = "commit"
        except psycopg.Error as error:
            if phase == "body":
                self._settling = False
                if not (self._lost or self._abandoned):
                    worker._heartbeat.add(self)
                raise
            translated = translate(error)
            if phase == "commit" and translated is error and _heals(error):
                # The COMMIT's answer was lost: did it commit? The server knows.
                try:
                    committed = await worker._committed(self, error)
                except BaseException:
                    self._settling = False
                    raise
                if not committed:
                    self._settling = False
                    raise
            else:
                self._settling = False
                if isinstance(translated, LeaseLost):
                    self._lost = True
                if translated is error:
                    raise
                raise translated from error
        except LeaseLost:
            self._settling = False
            self._lost = True
            raise
        except BaseException:
            self._settling = False
            if phase == "body" and not (self._lost or self._abandoned):
                worker._heartbeat.add(self)
            raise
        self._settled = True
        self._settling = False
        log.info("finish id=%d epoch=%d ok", self.id, self.epoch)

    @asynccontextmanager
    async def guard(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Guard an external side effect (an email, a payment, a call to another service):
        `async with job.guard() as conn:` enters only while the job's token is current, and
        holds it current until the block ends; do the side effect inside, then the item is
        finished with `job.result` as the block exits.

        It is the job's fenced transaction (`job.transaction()`): it begins with
        `work_assert(id, owner, epoch)`, which raises `LeaseLost` (55000) instead of entering
        when the token is stale (the item was claimed again, or cancelled, while this worker
        stalled), and otherwise takes the item's row lock until the block's `COMMIT`. A claim
        of the item waits for that lock, so a worker stalled past its lease (a GC pause, a
        SIGSTOP, a laptop lid) and then resumed either holds the lock (and nobody else runs
        the side effect meanwhile) or is refused at the door. Give the external API
        `job.fencing_token` as the idempotency key as well: a side effect done inside whose
        `COMMIT` is lost with the connection leaves the item to run again (the runner
        resolves a lost `COMMIT` when it can, see `transaction()`).

        Keep the block short: the row lock also holds off the heartbeat's renews (they are
        stopped for it). Yields the job's connection (the block may record the side effect
        in the same transaction). Errors: as `transaction()`.
        """
        async with self.transaction() as conn:
            yield conn


def _json_text(value: Any, what: str, *, null: bool = False) -> str | None:
    """`value` as the JSON text a jsonb argument takes (None: SQL NULL, unless `null`, when it
    is the JSON `null`).

    Raises `ValueError` ("<what> is not JSON: ...") for a value `json.dumps` cannot write (an
    object, a set, a circular or too deeply nested structure), for NaN and infinities (not
    JSON), and for a string holding U+0000 (which PostgreSQL's jsonb cannot store)."""
    if value is None and not null:
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(f"{what} is not JSON: {error}") from error
    if _JSON_NUL.search(text):
        raise ValueError(
            f"{what} is not JSON: PostgreSQL's jsonb cannot store the character U+0000"
        )
    return text


def _result_json(value: Any) -> str | None:
    """A handler's result as the JSON text `work_finish` stores (None stays SQL NULL).

    Raises `ValueError` ("result is not JSON: ...") for a value that is not JSON (see
    `_json_text`); the runner then fails the item with that text, as if the handler had raised
    it."""
    return _json_text(value, "result")


def _failure_text(error: BaseException) -> str:
    """The text `work_fail` stores for a handler's error: its type and message on the first
    line, as Python prints them (`KeyError: 'invoice'`, `myapp.errors.Declined: card expired`),
    then `Traceback (most recent call last):` and its frames, newest last, then one line
    `caused by: <type>: <message>` per exception it was raised from (`__cause__`, or the one it
    was raised while handling), at most `_CAUSES_NAMED` (3). At most `_ERROR_TEXT_MAX` (2048)
    bytes of UTF-8 in all, the server's bound: the first line is cut at a character boundary to
    `_ERROR_HEAD_MAX` (1024) bytes, ended with `...`, a cause line to `_CAUSE_MAX` (256); frames
    that do not fit are cut from the top (the oldest, the runner's own), which the title line
    then says (`Traceback (most recent call last, 3 earlier frames cut):`), so the frames
    nearest the error are kept. An error without a traceback has no frames."""
    head = _cut_utf8(_error_line(error), _ERROR_HEAD_MAX)
    causes: list[str] = []
    seen = error
    for _ in range(_CAUSES_NAMED):
        cause = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
        if cause is None:
            break
        line = _error_line(cause).partition("\n")[0]
        causes.append(_cut_utf8(f"caused by: {line}", _CAUSE_MAX))
        seen = cause
    tail = "".join(f"\n{line}" for line in causes)
    frames = traceback.format_tb(error.__traceback__)
    # The room for the title and the frames, after the head, its newline, and the causes.
    room = _ERROR_TEXT_MAX - len(head.encode()) - 1 - len(tail.encode())
    sizes = [len(frame.encode()) for frame in frames]
    title = "Traceback (most recent call last):\n"
    if frames and len(title.encode()) + sum(sizes) > room:
        # Keep the newest frames that fit beside the longest title this can need.
        used = len(_cut_title(len(frames)).encode())
        kept = 0
        while kept < len(frames) and used + sizes[-1 - kept] <= room:
            used += sizes[-1 - kept]
            kept += 1
        title = _cut_title(len(frames) - kept)
        frames = frames[len(frames) - kept :]
    if not frames or len(title.encode()) > room:
        return head + tail
    return (head + "\n" + title + "".join(frames)).rstrip("\n") + tail


def _error_line(error: BaseException) -> str:
    """`<type>: <message>` as Python prints an exception's last line: the type qualified by its
    module unless a builtin (or `__main__`), the type alone when the message is empty."""
    cls = type(error)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = f"{cls.__module__}.{name}"
    message = str(error)
    return f"{name}: {message}" if message else name


def _cut_title(cut: int) -> str:
    """The traceback's title line when its `cut` oldest frames were left out."""
    return f"Traceback (most recent call last, {cut} earlier frames cut):\n"


def _cut_utf8(text: str, most: int) -> str:
    """`text` cut to at most `most` bytes of UTF-8, at a character boundary, ended with `...`
    when cut."""
    data = text.encode()
    if len(data) <= most:
        return text
    return data[: most - 3].decode(errors="ignore") + "..."


def _heals(error: BaseException) -> bool:
    """Whether retrying can fix a failed claim: an error without a SQLSTATE (a lost connection)
    or one of the SQLSTATEs `_HEALING_CODES` and `_HEALING_CLASSES` list. Any other SQLSTATE
    ends `run()` with the error."""
    sqlstate = getattr(error, "sqlstate", None)
    if not sqlstate:
        return True
    return sqlstate in _HEALING_CODES or sqlstate.startswith(_HEALING_CLASSES)


def _hint_missing_extension(error: WorkfenceError) -> None:
    """Add to the hint of a 3F000 or 42883 error that the extension may be missing."""
    if error.sqlstate in _NO_EXTENSION_CODES:
        error.hint = f"{error.hint}\n{_NO_EXTENSION_HINT}" if error.hint else _NO_EXTENSION_HINT


def _error_text(error: BaseException) -> str:
    """An error's text for a log line (its class name when the text is empty)."""
    return str(error) or type(error).__name__


async def _fetch_bool(
    conn: psycopg.AsyncConnection[Any], query: str, params: tuple[Any, ...]
) -> bool:
    """Run a statement returning one boolean (renew, finish, fail, release); errors translated."""
    try:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    except psycopg.Error as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
    return bool(row is not None and row[0])


def _check_name(value: str, what: str, most_bytes: int) -> str:
    """Validate a queue or owner name as the server will (a string, not empty after trimming,
    at most `most_bytes` bytes, no control characters), so that a bad one stops the worker at
    start-up (docs/writing-workers.md). Raises `InvalidArgument` (22023)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty string", sqlstate="22023")
    if len(value.encode()) > most_bytes:
        raise InvalidArgument(f"{what} is longer than {most_bytes} bytes", sqlstate="22023")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidArgument(f"{what} {value!r} has a control character", sqlstate="22023")
    return value


def _check_int(value: int, what: str) -> int:
    """`value` if it is an `int` (not a bool, a float or a string). Raises `InvalidArgument`
    (22023) otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {value!r}", sqlstate="22023")
    return value


def _seconds(value: float | timedelta, what: str) -> float:
    """`value` in seconds (a number or a timedelta). Raises `InvalidArgument` for other types."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be seconds or a timedelta, not {value!r}")
    return float(value)


class Worker:
    """A worker runner for one queue (clients/README.md, "What every library does").

    Arguments (all but `handler`, `dsn` and `queue` keyword-only):
    - `dsn`: libpq connection string; `queue`: the queue to work;
    - `handler`: `async def handler(job)` (run as an asyncio task, cancelled on a lost lease or
      at the end of the shutdown grace; one still running 1 s later is let go: its connection
      closed, its item released, its later result ignored) or a plain `def handler(job)` (run
      in a daemon thread of its own; it cannot be interrupted: it should check
      `job.cancelled`). Its return value is the item's result (`work_finish`), unless it used
      `job.transaction()`; an exception, or a result that is not JSON ("result is not JSON:
      ..."), fails the item (`work_fail` with the error's text);
    - `owner`: the owner name of every claim (default `<hostname>:<pid>`; not an identity);
    - `concurrency`: handlers running at once (an `int`, default 1);
    - `batch_size`: an `int`, most items one claim takes (default `concurrency`); claimed items wait in a
      buffer, their leases renewed, and the runner never holds more than
      `concurrency - 1 + batch_size`;
    - `lease`: seconds (or a timedelta) each claim and renew asks for (default 30; the heartbeat
      renews every `lease / 3`);
    - `poll_wait`: the long poll's wait in seconds (default 5);
    - `retry`: a `RetryPolicy` (attempt, error) -> delay for `work_fail`'s `retry_in` (default
      None: the server's exponential backoff with jitter);
    - `shutdown_grace`: seconds running handlers may still finish after a stop (default 10),
      before they are cancelled and their items released;
    - `tracer_provider`: the OpenTelemetry `TracerProvider` of the jobs' spans (default None:
      the global one). When there is one (an SDK is configured, or a provider is given), each
      handler runs inside a span `process <queue>` (kind CONSUMER, a new trace) linked to the
      span context of the item's `trace`, which records the handler's exception and the error
      status when the run fails (`workfence.tracing`). Without `opentelemetry-api`, or with the
      global no-op provider, no span is made.

    Run it with `await worker.run()` (returns after `worker.stop()`, or raises a claim error
    retrying cannot fix) or `worker.run_sync()` (SIGTERM and SIGINT stop it). One run per
    `Worker`. Invalid settings (including a `concurrency` or `batch_size` that is not an `int`)
    raise `InvalidArgument` (22023) from the constructor.
    """

    def __init__(
        self,
        dsn: str,
        queue: str,
        handler: Handler,
        *,
        owner: str | None = None,
        concurrency: int = 1,
        batch_size: int | None = None,
        lease: float | timedelta = 30.0,
        poll_wait: float | timedelta = 5.0,
        retry: RetryPolicy | None = None,
        shutdown_grace: float | timedelta = 10.0,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        """Check and keep the settings (see the class); connects nothing yet."""
        if not dsn:
            raise InvalidArgument("dsn is required", sqlstate="22023")
        _check_int(concurrency, "concurrency")
        if concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1", sqlstate="22023")
        batch = concurrency if batch_size is None else _check_int(batch_size, "batch_size")
        if not 1 <= batch <= 1000:
            raise InvalidArgument("batch_size must be in 1..1000", sqlstate="22023")
        lease_s = _seconds(lease, "lease")
        if not 0 < lease_s <= 7 * 86400:
            raise InvalidArgument("lease must be in (0, 7 days]", sqlstate="22023")
        wait_s = _seconds(poll_wait, "poll_wait")
        if not 0 <= wait_s <= 3600:
            raise InvalidArgument("poll_wait must be in 0..1 hour", sqlstate="22023")
        grace_s = _seconds(shutdown_grace, "shutdown_grace")
        if grace_s < 0:
            raise InvalidArgument("shutdown_grace must not be negative", sqlstate="22023")
        self.dsn = dsn
        self.queue = _check_name(queue, "queue", 128)
        self.handler = handler
        self.owner = _check_name(default_owner() if owner is None else owner, "owner", 256)
        self.concurrency = concurrency
        self.batch_size = batch
        self.lease = lease_s
        self.poll_wait = wait_s
        self.retry = retry
        self.shutdown_grace = grace_s
        self.tracer_provider = tracer_provider
        # An `async def` function, or an object whose class has an `async def __call__`.
        self._is_async = inspect.iscoroutinefunction(handler) or (
            callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)
        )
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()  # set when the held count drops (or on stop)
        self._poll_idle = asyncio.Event()  # set while no long poll is in flight
        self._poll_idle.set()
        self._held: dict[int, Job] = {}  # buffered and running jobs, by id
        self._buffer: deque[Job] = deque()
        self._tasks: dict[asyncio.Task[None], Job] = {}  # the running jobs' runner tasks
        self._cancelling = False  # the grace is over: no handler starts any more
        self._idle_conns: list[psycopg.AsyncConnection[Any]] = []
        self._claim_conn: psycopg.AsyncConnection[Any] | None = None
        self._tasks_aux: set[asyncio.Task[None]] = set()  # stop()'s poll cancellers
        self._heartbeat = _Heartbeat(self)
        self._claim_sent = 0.0  # monotonic time the last claim was sent
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # ----------------------------------------------------------------- public

    def stop(self) -> None:
        """Ask the runner to stop: no more claims (a long poll in flight is cancelled), buffered
        items released, running handlers given `shutdown_grace`. Returns at once; `run()`
        returns when all is settled. Safe to call more than once, from the loop's thread (a
        signal handler installed with `loop.add_signal_handler`, a handler, a task); from
        another thread use `loop.call_soon_threadsafe(worker.stop)`."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._room.set()
        if self._loop is not None and not self._poll_idle.is_set():
            task = self._loop.create_task(self._cancel_poll())
            self._tasks_aux.add(task)
            task.add_done_callback(self._tasks_aux.discard)

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called."""
        return self._stopping.is_set()

    async def run(self) -> None:
        """Work the queue until `stop()`, then shut down (release buffered items, grace for
        running handlers, cancel and release the rest) and log `exit`.

        Raises a connection error (`psycopg.OperationalError`) if the first connections cannot
        be made, and ends with a `WorkfenceError` when a claim fails with an error retrying
        cannot fix (any SQLSTATE but the connection class 08, 57P0x, 57014, 40001, 40P01, 25006
        and class 53: e.g. 3F000 or 42883 when the extension is missing from the database, its
        hint saying so; 42501 for a missing grant; 22023): the runner then shuts down as on a
        stop and logs `exit error=<text>`. Claim errors retrying can fix, and lost connections,
        are logged and retried with backoff (0.5 s doubling to 30 s)."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        self._loop = asyncio.get_running_loop()
        try:
            try:
                self._claim_conn = await self._connect()
                await self._heartbeat.start()
                try:
                    await self._claim_loop()
                finally:
                    await self._shutdown()
            finally:
                await self._heartbeat.stop()
                for conn in [self._claim_conn, *self._idle_conns]:
                    if conn is not None:
                        await conn.close()
                self._idle_conns.clear()
        except BaseException as error:
            log.error("exit error=%s", _error_text(error))
            raise
        log.info("exit")

    def run_sync(self) -> None:
        """Run the worker in a new event loop with SIGTERM and SIGINT calling `stop()`; returns
        after the shutdown, or raises what `run()` raises.

        Like `asyncio.run`, except that it does not wait for ever for what the runner let go: the
        tasks still pending when `run()` returns (a handler that swallowed its cancellation)
        are cancelled once more and given `_CANCEL_WAIT` (1 s) before the loop is closed
        without them, and plain-function handlers run in daemon threads, which do not keep the
        process alive."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.stop)
            try:
                await self.run()
            finally:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)

        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(main())
        finally:
            try:
                left = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.wait(left, timeout=_CANCEL_WAIT))
                for task in left:
                    if not task.done():
                        # Let go on purpose (and logged): no "Task was destroyed but it is
                        # pending!" when it is collected (the flag asyncio.gather clears too).
                        with suppress(AttributeError):
                            task._log_destroy_pending = False  # type: ignore[attr-defined]
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    # --------------------------------------------------------------- claiming

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A new autocommit connection (claims are committed before the heartbeat sees them)."""
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def _claim_loop(self) -> None:
        """Claim while there is room, dispatch to handlers; back off on errors; until stop."""
        backoff = _BACKOFF_FIRST
        while not self._stopping.is_set():
            while len(self._held) >= self.concurrency and not self._stopping.is_set():
                self._room.clear()
                await self._room.wait()
            if self._stopping.is_set():
                break
            try:
                rows = await self._claim()
            except (psycopg.Error, WorkfenceError) as error:
                if not _heals(error):
                    log.error("claim error=%s", error)
                    raise  # run() shuts down and ends with it
                log.warning("reconnect claim in %ss error=%s", backoff, error)
                await self._pause(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                await self._reconnect_claim()
                continue
            backoff = _BACKOFF_FIRST
            for row in rows:
                job = Job(self, row, self._claim_sent)
                log.info("claim id=%d epoch=%d attempt=%d", job.id, job.epoch, job.attempt)
                self._held[job.id] = job
                self._buffer.append(job)
                self._heartbeat.add(job)
            self._dispatch()

    async def _claim(self) -> list[tuple[Any, ...]]:
        """One long poll for `batch_size` items; none when stopped (the poll is cancelled).
        Each row is (id, key, payload, epoch, attempt, lease_until, progress, trace), read by
        column name: progress and trace None from a server without such columns (older than
        0.12.0; trace: older than its trace context)."""
        conn = self._claim_conn
        assert conn is not None
        params = (
            self.queue,
            self.owner,
            timedelta(seconds=self.lease),
            self.batch_size,
            timedelta(seconds=self.poll_wait),
        )
        self._poll_idle.clear()
        try:
            if self._stopping.is_set():
                return []
            self._claim_sent = monotonic()
            cur = await conn.execute(_sql.CLAIM, params)
            rows = await cur.fetchall()
            names = [column.name for column in cur.description or ()]
            at = [names.index(name) if name in names else None for name in _CLAIM_COLUMNS]
            return [tuple(None if i is None else row[i] for i in at) for row in rows]
        except pg_errors.QueryCanceled:
            if self._stopping.is_set():
                return []  # cancelled by stop(): the claim took nothing
            raise
        except psycopg.Error as error:
            translated = translate(error)
            if translated is error:
                raise
            assert isinstance(translated, WorkfenceError)
            _hint_missing_extension(translated)
            raise translated from error
        finally:
            self._poll_idle.set()

    async def _cancel_poll(self) -> None:
        """Cancel the long poll in flight, again every `_CANCEL_AGAIN_AFTER` seconds until it
        ends (a cancel request that reaches the server before the query is lost)."""
        conn = self._claim_conn
        while conn is not None and not self._poll_idle.is_set():
            try:
                await conn.cancel_safe(timeout=5)
            except psycopg.Error as error:
                log.warning("cancel error=%s", error)
            with suppress(TimeoutError):
                await asyncio.wait_for(self._poll_idle.wait(), _CANCEL_AGAIN_AFTER)

    async def _reconnect_claim(self) -> None:
        """Replace the claim connection when it is broken or closed."""
        conn = self._claim_conn
        if conn is not None and not (conn.closed or conn.broken):
            return
        try:
            self._claim_conn = await self._connect()
            if conn is not None:
                await conn.close()
        except psycopg.Error as error:
            log.error("connect error=%s", error)

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the worker is stopped meanwhile."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # ---------------------------------------------------------------- running

    def _dispatch(self) -> None:
        """Start buffered jobs while fewer than `concurrency` handlers run."""
        while self._buffer and len(self._tasks) < self.concurrency and not self._stopping.is_set():
            job = self._buffer.popleft()
            task = asyncio.create_task(self._run_job(job), name=f"workfence-job-{job.id}")
            self._tasks[task] = job
            task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        """A job's task ended: make room, start the next buffered job."""
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("runner error=%r", task.exception())
        self._dispatch()

    def _forget(self, job: Job) -> None:
        """The job is no longer held: stop watching it and make room for a claim."""
        self._heartbeat.discard(job)
        if self._held.get(job.id) is job:
            del self._held[job.id]
        self._room.set()

    async def _acquire_conn(self) -> psycopg.AsyncConnection[Any]:
        """An idle handler connection, or a new one."""
        while self._idle_conns:
            conn = self._idle_conns.pop()
            if not (conn.closed or conn.broken):
                return conn
        return await self._connect()

    async def _job_start_conn(self, job: Job) -> psycopg.AsyncConnection[Any]:
        """A connection for a job about to start: an idle one, or a new one; a connect that
        fails is tried again (at once, then every 0.1 s doubling to 1 s) until the lease the
        runner was sure of when the job started ends, so that a dropped connection does not
        leave the item to its lease."""
        deadline = job._lease_end
        delay = _RESEND_FIRST
        while True:
            try:
                return await asyncio.wait_for(self._acquire_conn(), _RESEND_CONNECT_WAIT)
            except (psycopg.Error, TimeoutError) as error:
                if monotonic() >= deadline or self._cancelling:
                    raise
                log.warning("connect error=%s (id=%d: trying again)", _error_text(error), job.id)
            if delay:
                await asyncio.sleep(delay)
            delay = min(max(delay * 2, _RESEND_NEXT), _RESEND_MAX)

    async def _release_conn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Give a handler connection back (closed instead when broken or left in a transaction)."""
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if conn.closed or conn.broken or not idle:
            await conn.close()
        else:
            self._idle_conns.append(conn)

    async def _run_job(self, job: Job) -> None:
        """Run one job's handler and settle its item (clients/README.md, runner step 4)."""
        try:
            conn = await self._job_start_conn(job)
        except (psycopg.Error, TimeoutError) as error:
            # The item stays claimed; its lease lapses and another claim takes it.
            log.error("connect error=%s (abandoning id=%d)", _error_text(error), job.id)
            self._forget(job)
            return
        job._conn = conn
        interrupted = False
        span: Span | None = None
        failure: BaseException | None = None
        try:
            if job._lost:
                self._abandon(job)
                return
            if self._cancelling:
                # The grace ended before the handler could start: hand the item back.
                await self._settle(job, conn, None, asyncio.CancelledError())
                return
            tracer = tracing.consumer_tracer(self.tracer_provider)
            if tracer is None:
                job._task = self._start_handler(job)
            else:
                span = tracing.start_consumer_span(tracer, self.queue, job)
                with tracing.activate(span):
                    job._task = self._start_handler(job)
            try:
                value = await asyncio.shield(job._task)
                outcome: BaseException | None = None
            except asyncio.CancelledError:
                if job._abandoned:
                    interrupted = True
                    # The shutdown let the handler go (it ignored its cancellation): it runs
                    # on unawaited, its result ignored; the shutdown releases the item.
                    job._task.add_done_callback(_ignore_late(job))
                    raise
                if not job._task.cancelled():
                    # This runner task itself was cancelled: cancel the handler, wait a little.
                    interrupted = True
                    job.cancelled._set(SHUTDOWN)
                    job._task.cancel()
                    await asyncio.wait({job._task}, timeout=_CANCEL_WAIT)
                    if not job._task.done():
                        job._abandoned = True
                        job._task.add_done_callback(_ignore_late(job))
                        raise
                value, outcome = None, asyncio.CancelledError()
            except Exception as error:
                value, outcome = None, error
            failure = outcome  # kept should the settle itself be cancelled
            failure = await self._settle(job, job._conn or conn, value, outcome)
        finally:
            if span is not None:
                reason = None
                if interrupted or isinstance(failure, asyncio.CancelledError):
                    reason = job.cancelled.reason or SHUTDOWN
                elif job._lost:
                    reason = LEASE_LOST
                tracing.end_consumer_span(span, failure, reason)
            # The job's connection may have been replaced (a broken one, by job.progress(),
            # job.transaction() or a settle sent again); the replaced one is closed.
            current = job._conn if job._conn is not None else conn
            job._task = None
            job._conn = None
            self._forget(job)
            if interrupted or job._abandoned:
                # psycopg cancelled a statement in flight in the server: do not let a late
                # cancel request reach the next job's statements on this connection. A
                # connection a let-go handler may still use is cancelled and closed too (which
                # also rolls back its fenced transaction and frees the item's row lock).
                await _close_now(current)
            await self._release_conn(current)
            if conn is not current and not conn.closed:
                await conn.close()

    def _start_handler(self, job: Job) -> asyncio.Future[Any]:
        """Start the handler of `job`: an async one as a task, a plain function in a thread of
        its own; either runs in a copy of the current context (the job's span, when traced)."""
        if self._is_async:
            return asyncio.ensure_future(self.handler(job))
        return self._in_thread(job)

    def _in_thread(self, job: Job) -> asyncio.Future[Any]:
        """Run the plain-function handler in a daemon thread of its own (with the caller's
        context variables, as `asyncio.to_thread`); the future gets its result or exception.
        Cancelling the future lets the thread go: its later result is dropped, and it does not
        keep the process alive."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def deliver(value: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)

        def target() -> None:
            value: Any = None
            error: BaseException | None = None
            try:
                value = context.run(self.handler, job)
            except BaseException as exc:  # handed to the runner as the handler's error
                error = exc
            with suppress(RuntimeError):  # the loop is closed: the runner let the job go
                loop.call_soon_threadsafe(deliver, value, error)

        threading.Thread(target=target, name=f"workfence-job-{job.id}", daemon=True).start()
        return future

    async def _settle(
        self,
        job: Job,
        conn: psycopg.AsyncConnection[Any],
        value: Any,
        outcome: BaseException | None,
    ) -> BaseException | None:
        """Finish, fail, release or abandon the item after its handler ended. A call whose
        reply is lost is sent again with the same token (`_send`). Result: what the run failed
        with (`outcome`, or the `ValueError` of a result that is not JSON), None when it did
        not fail: for the job's span."""
        if job._lost or isinstance(outcome, LeaseLost):
            job._lost = True
            self._abandon(job)
            return outcome
        if job._settled:
            if outcome is not None and not isinstance(outcome, asyncio.CancelledError):
                log.warning(
                    "handler of id=%d raised after its transaction committed: %r", job.id, outcome
                )
            return outcome
        await self._heartbeat.drop(job)
        token = (job.id, self.owner, job.epoch)
        try:
            if isinstance(outcome, asyncio.CancelledError):
                await self._release(conn, job)
                return outcome
            if outcome is None:
                try:
                    result = _result_json(value)
                except ValueError as error:
                    outcome = error  # the handler's failure: failed with the error's text
            if outcome is not None:
                await self._fail(conn, job, outcome)
            else:
                job._settling = True
                ok = await self._send(conn, job, "finish", _sql.FINISH, (*token, result))
                job._settled = True
                if ok:
                    log.info("finish id=%d epoch=%d ok", job.id, job.epoch)
                else:
                    self._abandon(job)
        except (psycopg.Error, WorkfenceError) as error:
            # The outcome is unknown (no answer within the lease) or the call was rejected:
            # the item stays claimed until its lease lapses, then another claim takes it.
            log.error("settle id=%d epoch=%d error=%s", job.id, job.epoch, error)
        return outcome

    async def _fail(
        self, conn: psycopg.AsyncConnection[Any], job: Job, error: BaseException
    ) -> None:
        """Record the handler's error with `work_fail` (its type, message and last frames:
        `_failure_text`) and the retry policy's delay."""
        text = _failure_text(error)
        delay: float | timedelta | None = None
        if self.retry is not None:
            try:
                delay = self.retry(job.attempt, error)
            except Exception as policy_error:
                log.error("retry policy error=%r (using the server's backoff)", policy_error)
        retry_in = _sql.interval(delay, "retry delay")
        args = (job.id, self.owner, job.epoch, text, retry_in)
        ok = await self._send(conn, job, "fail", _sql.FAIL, args)
        job._settled = True
        if ok:
            log.info("fail id=%d epoch=%d error=%s", job.id, job.epoch, text.partition("\n")[0])
        else:
            self._abandon(job)

    async def _release(self, conn: psycopg.AsyncConnection[Any], job: Job) -> None:
        """Hand the item back with `work_release` (shutdown); a refusal abandons it."""
        args = (job.id, self.owner, job.epoch)
        ok = await self._send(conn, job, "release", _sql.RELEASE, args)
        job._settled = True
        if ok:
            log.info("release id=%d epoch=%d", job.id, job.epoch)
        else:
            self._abandon(job)

    async def _send(
        self,
        conn: psycopg.AsyncConnection[Any],
        job: Job,
        verb: str,
        query: str,
        params: tuple[Any, ...],
    ) -> bool:
        """Send a settle (`work_finish`, `work_fail`, `work_release`) and return its answer; when
        the answer is lost, send it again with the same token until one comes, within the lease.

        A call that fails with an error retrying can fix (`_heals`: a dropped connection, a
        terminated backend, a cancelled statement) may or may not have committed. It is sent
        again (logged `resend <verb> id=.. epoch=.. error=..`) on a new connection when
        the job's is broken, at once and then after 0.1 s doubling to 1 s, while the lease the
        runner is sure of lasts (at least once). A repeated `work_finish` of a token that
        already finished returns true; a repeated fail or release is refused, so a refusal
        after a lost answer is read with `_settled_by`, and counts as this token's settle when
        it says so. Raises the last error when no answer came in time (the item is left to its
        lease), and errors retrying cannot fix at once.
        """
        try:
            if conn.closed or conn.broken:
                conn = await self._job_conn(job)  # nothing was sent on the broken one
            return await _fetch_bool(conn, query, params)
        except (psycopg.Error, WorkfenceError, TimeoutError) as error:
            if not _heals(error):
                raise
            last: BaseException = error
        delay = _RESEND_FIRST
        while True:
            log.warning(
                "resend %s id=%d epoch=%d error=%s", verb, job.id, job.epoch, _error_text(last)
            )
            if delay:
                await asyncio.sleep(delay)
            delay = min(max(delay * 2, _RESEND_NEXT), _RESEND_MAX)
            try:
                if conn.closed or conn.broken:
                    conn = await self._job_conn(job)
                if await _fetch_bool(conn, query, params):
                    return True
                settled = await self._settled_by(conn, job)
                if settled is None:
                    job._refusal_logged = True  # not known to be lost: no "refused" line
                    log.warning(
                        "settle id=%d epoch=%d outcome unknown (%s refused after a lost reply; "
                        "no read grant to tell)",
                        job.id,
                        job.epoch,
                        verb,
                    )
                return bool(settled)
            except (psycopg.Error, WorkfenceError, TimeoutError) as error:
                if not _heals(error):
                    raise
                last = error
            if monotonic() + delay >= job._lease_end:
                raise last

    async def _job_conn(self, job: Job) -> psycopg.AsyncConnection[Any]:
        """A new connection for `job` in place of its broken one (closed), bounded by
        `_RESEND_CONNECT_WAIT`; it becomes the job's connection (released after the job)."""
        conn = await asyncio.wait_for(self._connect(), _RESEND_CONNECT_WAIT)
        old, job._conn = job._conn, conn
        if old is not None and old is not conn:
            await old.close()
        return conn

    async def _settled_by(
        self, conn: psycopg.AsyncConnection[Any], job: Job, status: str | None = None
    ) -> bool | None:
        """After a settle was refused, its earlier sending having lost its answer: whether that
        earlier one settled the item with this token. `work_lease_status` says `finished` (done
        or failed under it): yes. `superseded` (the item left this epoch): yes while the lease
        the runner is sure of still held, since no other claim could take the item before it
        ended (a cancel says `cancelled`), even if the settle sent it round again
        (`on_conflict`) and it was claimed at once; after that, yes when `work_item` shows the
        item still under this epoch and owner (handed back by it, not claimed anew), None when
        the item cannot be read (no `read` grant where queue grants are enforced). Any other
        status: no (the lease was lost, or, `current`, nothing settled it). `status`: the
        token's status when already read."""
        if status is None:
            status = await self._token_status(conn, job)
        if status == "finished":
            return True
        if status != "superseded":
            return False
        if monotonic() < job._lease_end:
            return True
        try:
            cur = await conn.execute(_sql.ITEM_BY_ID, (job.id,))
            item = await cur.fetchone()
        except pg_errors.InsufficientPrivilege:
            return None
        if item is None:
            return None  # hidden (no read grant) or purged
        names = [column.name for column in cur.description or ()]
        by_name = dict(zip(names, item, strict=True))
        return bool(by_name.get("epoch") == job.epoch and by_name.get("owner") == self.owner)

    async def _token_status(self, conn: psycopg.AsyncConnection[Any], job: Job) -> str | None:
        """`work_lease_status` of the job's token."""
        cur = await conn.execute(_sql.LEASE_STATUS, (job.id, self.owner, job.epoch))
        row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def _committed(self, job: Job, error: BaseException) -> bool:
        """Whether the fenced transaction of `job`, whose `COMMIT` lost its answer with `error`,
        committed: asked on a new connection (the job's, in place of the broken one) with a
        renew, which waits for the row lock a transaction still ending holds (a network cut
        leaves it running on the old backend) and then answers true while the token is current,
        so the transaction rolled back: false (the lease is then longer). A job that stopped
        renewing is asked with `work_lease_status` instead (`current`: false). A refused renew
        is read with `_settled_by`: this token's settle: it committed: true. Logged `resend
        commit id=.. epoch=.. error=..`, tried again as `_send` does while the lease lasts.
        Raises `LeaseLost` when the token was lost otherwise, and `error` when no answer came
        within the lease or the outcome cannot be told (logged `commit id=.. epoch=.. outcome
        unknown error=..`)."""
        log.warning("resend commit id=%d epoch=%d error=%s", job.id, job.epoch, _error_text(error))
        args = (job.id, self.owner, job.epoch, timedelta(seconds=self.lease))
        last = error
        delay = _RESEND_FIRST
        while True:
            if delay:
                await asyncio.sleep(delay)
            delay = min(max(delay * 2, _RESEND_NEXT), _RESEND_MAX)
            try:
                conn = job._conn
                if conn is None or conn.closed or conn.broken:
                    conn = await self._job_conn(job)
                status = None
                if job._renewing:
                    sent = monotonic()
                    if await _fetch_bool(conn, _sql.RENEW, args):
                        job._lease_end = max(job._lease_end, sent + self.lease)
                        return False
                else:
                    status = await self._token_status(conn, job)
                    if status == "current":
                        return False
                settled = await self._settled_by(conn, job, status)
            except (psycopg.Error, WorkfenceError, TimeoutError) as retry_error:
                if not _heals(retry_error):
                    raise
                last = retry_error
                if monotonic() + delay >= job._lease_end:
                    log.warning(
                        "commit id=%d epoch=%d outcome unknown error=%s",
                        job.id,
                        job.epoch,
                        _error_text(last),
                    )
                    raise error from last
                continue
            if settled is None:
                log.warning(
                    "commit id=%d epoch=%d outcome unknown error=%s",
                    job.id,
                    job.epoch,
                    _error_text(error),
                )
                raise error
            if settled:
                return True
            job._lost = True
            raise LeaseLost(
                "lease lost",
                sqlstate="55000",
                detail="the COMMIT lost its answer and did not commit; the token is no longer "
                "current",
            ) from error

    def _abandon(self, job: Job) -> None:
        """Log the refusal once; nothing is sent for the item (its token is dead)."""
        if not job._refusal_logged:
            job._refusal_logged = True
            log.warning("refused id=%d (lease lost)", job.id)

    def _lose(self, job: Job) -> None:
        """The lease of `job` is lost (a refused renew, a notification): stop its handler,
        unless its fenced transaction is committing (the commit decides); a buffered job is
        dropped at once."""
        job._lost = True
        job.cancelled._set(LEASE_LOST)
        if job in self._buffer:
            self._buffer.remove(job)
            self._abandon(job)
            self._forget(job)
            return
        if job._task is not None and not job._settling:
            job._task.cancel()

    # --------------------------------------------------------------- shutdown

    async def _shutdown(self) -> None:
        """Release buffered items, give running handlers the grace, then cancel them and
        release their items (clients/README.md, runner step 5). Every wait is bounded: a
        handler still running `_CANCEL_WAIT` after its cancellation is let go (`_let_go`), a
        finish or fenced commit in flight gets `_COMMIT_WAIT` more and is never cancelled."""
        self._stopping.set()  # also after a claim error that ends run(): no job starts
        self._room.set()
        while self._buffer:
            job = self._buffer.popleft()
            await self._release_at_exit(job)
            self._forget(job)
        if self._tasks and self.shutdown_grace > 0:
            await asyncio.wait(set(self._tasks), timeout=self.shutdown_grace)
        self._cancelling = True
        for job in list(self._tasks.values()):
            task = job._task
            if task is not None and not task.done() and not job._settling:
                job.cancelled._set(SHUTDOWN)
                task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=_CANCEL_WAIT)
        committing = {task for task, job in self._tasks.items() if job._settling}
        if committing:
            await asyncio.wait(committing, timeout=_COMMIT_WAIT)
        left = dict(self._tasks)
        if left:
            await self._let_go(left)
        for task in list(self._tasks_aux):
            task.cancel()

    async def _let_go(self, left: dict[asyncio.Task[None], Job]) -> None:
        """The jobs still running after the cancel wait: a finish or commit in flight is left
        to its lease (never cancelled; the commit decides); the others are let go: their runner
        task is cancelled (closing the job's connection, which rolls back a fenced transaction
        the handler still holds open), their items released on the claim connection, and
        their handlers, still running, get `LeaseLost` from a later `job.transaction()` and
        have their results ignored."""
        for task, job in left.items():
            if job._settling:
                log.warning(
                    "settle id=%d epoch=%d still in flight at exit: left to the lease",
                    job.id,
                    job.epoch,
                )
                continue
            job._abandoned = True
            job.cancelled._set(SHUTDOWN)
            task.cancel()
            log.warning(
                "handler of id=%d epoch=%d still running %.0f s after its cancellation: let go",
                job.id,
                job.epoch,
                _CANCEL_WAIT,
            )
        let_go = [task for task, job in left.items() if job._abandoned]
        if let_go:
            await asyncio.wait(let_go, timeout=_EXIT_CALL_WAIT)
        for job in left.values():
            if job._abandoned and not job._settled and not job._lost:
                await self._release_at_exit(job)
                job._lost = True  # its token is dead (or lapsing): nothing more for it

    async def _release_at_exit(self, job: Job) -> None:
        """Release `job`'s item on the claim connection (a new one if it is broken), each call
        bounded by `_EXIT_CALL_WAIT`; an error is logged and the item left to its lease."""
        try:
            conn = self._claim_conn
            if conn is None or conn.closed or conn.broken:
                conn = await asyncio.wait_for(self._connect(), _EXIT_CALL_WAIT)
                if self._claim_conn is not None:
                    await self._claim_conn.close()
                self._claim_conn = conn
            await asyncio.wait_for(self._release(conn, job), _EXIT_CALL_WAIT)
        except (psycopg.Error, WorkfenceError, TimeoutError) as error:
            log.error("release id=%d epoch=%d error=%s", job.id, job.epoch, _error_text(error))
        finally:
            # A connection a release sent again opened for the job (the job runs no more).
            extra, job._conn = job._conn, None
            if extra is not None and extra is not self._claim_conn:
                await extra.close()


def _ignore_late(job: Job) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback for the handler of a job the runner let go: its result is ignored (and
    its exception retrieved, so that asyncio does not report it)."""

    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            future.exception()
        log.warning("handler of id=%d ended after it was let go: its result is ignored", job.id)

    return done


async def _close_now(conn: psycopg.AsyncConnection[Any]) -> None:
    """Close a handler's connection at once: a statement in flight is cancelled first (bounded
    by `_EXIT_CALL_WAIT`), so that the server ends its transaction and frees its locks."""
    if conn.closed:
        return
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE:
        with suppress(psycopg.Error):
            await conn.cancel_safe(timeout=_EXIT_CALL_WAIT)
    await conn.close()


class _Heartbeat:
    """Renews every held item every `lease / 3` on a connection of its own, and listens there
    for `work_lease_lost` in between (docs/writing-workers.md, "Stopping a job whose lease is
    lost"): a refused renew, or a notification naming a held token by id AND epoch (never by
    owner, which other processes share), loses the item. Notifications that arrive while a
    renew runs are kept by psycopg for the next `notifies()`."""

    def __init__(self, worker: Worker) -> None:
        """A heartbeat for `worker`, not started."""
        self.worker = worker
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.held: dict[int, Job] = {}
        self.lock = asyncio.Lock()  # held while renewing one item
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect, LISTEN, and start the heartbeat task."""
        self.conn = await self._connect()
        self.task = asyncio.create_task(self._run(), name="workfence-heartbeat")

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A new autocommit connection listening on `work_lease_lost`."""
        conn = await psycopg.AsyncConnection.connect(self.worker.dsn, autocommit=True)
        await conn.execute(_sql.LISTEN)
        return conn

    async def stop(self) -> None:
        """Stop the task and close the connection."""
        if self.task is not None:
            self.task.cancel()
            with suppress(asyncio.CancelledError):
                await self.task
        if self.conn is not None:
            await self.conn.close()

    def add(self, job: Job) -> None:
        """Watch `job` (renew it unless it stopped renewing; match notifications)."""
        self.held[job.id] = job

    def discard(self, job: Job) -> None:
        """Stop watching `job` (a renew of it may still be in flight)."""
        if self.held.get(job.id) is job:
            del self.held[job.id]

    async def drop(self, job: Job) -> None:
        """Stop watching `job` and wait for a renew in flight, so that no renew waits on the
        row lock of its fenced transaction (and then reads as refused)."""
        self.discard(job)
        async with self.lock:
            pass

    async def _run(self) -> None:
        """Renew every `lease / 3`; listen for notifications in between."""
        interval = self.worker.lease / 3
        due = monotonic() + interval
        while True:
            try:
                left = due - monotonic()
                if left > 0:
                    await self._listen(left)
                    continue
                for job in list(self.held.values()):
                    async with self.lock:
                        if self.held.get(job.id) is job and job._renewing:
                            await self._renew(job)
                due = monotonic() + interval
            except Exception as error:  # a bug: keep the heartbeat alive, and say so
                log.error("heartbeat error=%r", error)
                await asyncio.sleep(1.0)

    async def _listen(self, timeout: float) -> None:
        """Handle the notifications that arrive within `timeout` seconds."""
        conn = self.conn
        try:
            if conn is None or conn.closed or conn.broken:
                raise psycopg.OperationalError("the heartbeat connection is closed")
            async for notify in conn.notifies(timeout=timeout):
                self._notified(notify.payload)
        except psycopg.Error as error:
            # Only the hint is missing meanwhile: renews still tell a lost lease.
            log.error("listen error=%s", error)
            await self._reconnect()
            await asyncio.sleep(min(timeout, 1.0))

    def _notified(self, payload: str) -> None:
        """A `work_lease_lost` payload: if it names a held token (id and epoch), lose it."""
        try:
            token = json.loads(payload)
            lost_id, lost_epoch = int(token["id"]), int(token["epoch"])
        except (ValueError, TypeError, KeyError) as error:
            log.warning("listen error=unreadable work_lease_lost payload %r: %r", payload, error)
            return
        job = self.held.get(lost_id)
        if job is None or job.epoch != lost_epoch:
            return  # another worker's token, or one of ours already settled
        log.warning("lease lost (notified) id=%d epoch=%d", lost_id, lost_epoch)
        self.discard(job)
        self.worker._lose(job)

    async def _renew(self, job: Job) -> None:
        """Renew one item; a refusal loses it, an error is logged (the next round retries)."""
        conn = self.conn
        args = (job.id, self.worker.owner, job.epoch, timedelta(seconds=self.worker.lease))
        sent = monotonic()
        try:
            if conn is None or conn.closed or conn.broken:
                raise psycopg.OperationalError("the heartbeat connection is closed")
            ok = await _fetch_bool(conn, _sql.RENEW, args)
        except (psycopg.Error, WorkfenceError) as error:
            log.error("renew id=%d error=%s", job.id, error)
            await self._reconnect()
            return
        if ok:
            job._lease_end = sent + self.worker.lease
            log.debug("renew id=%d ok", job.id)
            return
        log.warning("renew id=%d refused", job.id)
        self.discard(job)
        self.worker._lose(job)

    async def _reconnect(self) -> None:
        """Replace a broken connection (LISTENing again); keep the old one on failure."""
        conn = self.conn
        if conn is not None and not (conn.closed or conn.broken):
            return
        try:
            self.conn = await self._connect()
        except psycopg.Error as error:
            log.error("heartbeat connect error=%s", error)
            return
        if conn is not None:
            await conn.close()
