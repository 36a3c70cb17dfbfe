"""The errors pg_workfence's SQL functions raise, one class per SQLSTATE (clients/README.md).

Every error the server raises in one of the library's own calls (enqueue, the operator's calls,
the runner's claim/renew/finish/fail/release, `work_assert` and the `COMMIT` of a fenced
transaction) reaches the caller as a `WorkfenceError`: the named subclass below for the SQLSTATEs
the functions document, the base class for any other SQLSTATE. The server's message, DETAIL and
HINT are kept (`message`, `detail`, `hint`), and the psycopg error is the `__cause__`. A lost
connection (no SQLSTATE) is not translated: it stays a `psycopg.OperationalError`.

The one-class-per-SQLSTATE table follows psycopg's own `psycopg.errors` (itself after
PostgreSQL's `errcodes.txt`), narrowed to what docs/contract.md lists.
"""

from __future__ import annotations

import psycopg

__all__ = [
    "WorkfenceError",
    "NullArgument",
    "InvalidArgument",
    "ReadOnly",
    "NoTransaction",
    "SerializationFailure",
    "NotPermitted",
    "UndefinedObject",
    "UnknownParent",
    "LeaseLost",
    "Cancelled",
    "BY_SQLSTATE",
    "translate",
]


class WorkfenceError(Exception):
    """Base class of every error the library raises for a server error.

    Attributes: `sqlstate` (the five-character code, None for an error the library raised
    itself), `message` (the server's primary message), `detail` and `hint` (the server's DETAIL
    and HINT, None when absent).
    """

    #: The SQLSTATE this class stands for (None on the base class: any other code).
    SQLSTATE: str | None = None

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        """Make the error from the server's `message`, `sqlstate`, `detail` and `hint`."""
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate if sqlstate is not None else self.SQLSTATE
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        """The message, then the DETAIL and HINT lines when present (as psql prints them)."""
        text = self.message
        if self.detail:
            text += f"\nDETAIL: {self.detail}"
        if self.hint:
            text += f"\nHINT: {self.hint}"
        return text


class NullArgument(WorkfenceError):
    """22004: a NULL where a value is required (the message names the argument)."""

    SQLSTATE = "22004"


class InvalidArgument(WorkfenceError):
    """22023: a bad queue, key, owner, lease, interval or `max_items` (a configuration error);
    from 0.12.0 also a schedule's bad cron expression, time zone or `catch_up`."""

    SQLSTATE = "22023"


class ReadOnly(WorkfenceError):
    """25006: a write on a hot standby (a claim after a failover to a standby not yet promoted)."""

    SQLSTATE = "25006"


class NoTransaction(WorkfenceError):
    """25P01: `work_assert` outside a transaction block (its lock would fence nothing)."""

    SQLSTATE = "25P01"


class SerializationFailure(WorkfenceError):
    """40001: an enqueue that raced a purge three times (retry it), or a token call under
    REPEATABLE READ or SERIALIZABLE whose row changed."""

    SQLSTATE = "40001"


class NotPermitted(WorkfenceError):
    """42501: a queue grant (or an EXECUTE privilege) is missing (docs/operations.md)."""

    SQLSTATE = "42501"


class UndefinedObject(WorkfenceError):
    """42704: a grant naming an unknown role or capability, or (from 0.12.0)
    `pause_schedule`/`resume_schedule` of a schedule that does not exist."""

    SQLSTATE = "42704"


class UnknownParent(WorkfenceError):
    """23503 (from 0.12.0): an enqueue's `after` names an item that does not exist (never
    enqueued, or purged), or one in a queue the role may not `read` (the two are not told apart).
    Nothing was enqueued."""

    SQLSTATE = "23503"


class LeaseLost(WorkfenceError):
    """55000: the token is not current (`work_assert`, also at `COMMIT`: "lease lost before
    commit"); the DETAIL says why. The library also raises it, with `sqlstate` 55000, when a
    fenced transaction's `work_finish` returns false (possible through a PL/Proxy router, where
    `work_assert` holds no lock), after rolling the transaction back."""

    SQLSTATE = "55000"


class Cancelled(WorkfenceError):
    """57014: a statement was cancelled (the long poll on shutdown, or `statement_timeout`)."""

    SQLSTATE = "57014"


#: The named classes by SQLSTATE.
BY_SQLSTATE: dict[str, type[WorkfenceError]] = {
    cls.SQLSTATE: cls
    for cls in (
        NullArgument,
        InvalidArgument,
        ReadOnly,
        NoTransaction,
        SerializationFailure,
        NotPermitted,
        UndefinedObject,
        UnknownParent,
        LeaseLost,
        Cancelled,
    )
    if cls.SQLSTATE is not None
}


def translate(error: psycopg.Error) -> WorkfenceError | psycopg.Error:
    """The `WorkfenceError` for a psycopg error that carries a SQLSTATE, or `error` itself.

    Arguments: `error`, a psycopg error raised by a statement. Result: an instance of the class
    `BY_SQLSTATE` names for its SQLSTATE (`WorkfenceError` for any other code), with the
    server's message, detail and hint, and `__cause__` set to `error`; `error` unchanged when it
    has no SQLSTATE (a lost connection, a client-side error). Raises nothing.
    """
    sqlstate = error.sqlstate
    if sqlstate is None:
        return error
    diag = error.diag
    cls = BY_SQLSTATE.get(sqlstate, WorkfenceError)
    text = str(error)
    message = diag.message_primary or (text.splitlines()[0] if text else sqlstate)
    translated = cls(
        message,
        sqlstate=sqlstate,
        detail=diag.message_detail,
        hint=diag.message_hint,
    )
    translated.__cause__ = error
    return translated
