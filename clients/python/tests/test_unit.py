"""Unit tests: no database. Settings and their defaults, the error classes, the cancel flag."""

from __future__ import annotations

import os
import socket
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import workfence
from workfence import errors
from workfence import worker as worker_module
from workfence._sql import interval


async def handler(job: workfence.Job) -> None:
    """A handler that does nothing."""


def test_defaults_follow_the_common_spec() -> None:
    worker = workfence.Worker("dbname=x", "q", handler)
    assert worker.owner == f"{socket.gethostname()}:{os.getpid()}"
    assert worker.concurrency == 1
    assert worker.batch_size == 1
    assert worker.lease == 30.0
    assert worker.poll_wait == 5.0
    assert worker.retry is None
    assert worker.shutdown_grace == 10.0


def test_batch_size_defaults_to_concurrency() -> None:
    worker = workfence.Worker("dbname=x", "q", handler, concurrency=4)
    assert worker.batch_size == 4


def test_durations_take_seconds_or_timedelta() -> None:
    worker = workfence.Worker(
        "dbname=x", "q", handler, lease=timedelta(minutes=2), poll_wait=1.5, shutdown_grace=0
    )
    assert (worker.lease, worker.poll_wait, worker.shutdown_grace) == (120.0, 1.5, 0.0)


@pytest.mark.parametrize(
    "settings",
    [
        {"owner": ""},
        {"owner": "   "},
        {"owner": "host\n"},
        {"owner": "x" * 257},
        {"concurrency": 0},
        {"batch_size": 0},
        {"batch_size": 1001},
        {"lease": 0},
        {"lease": 7 * 86400 + 1},
        {"lease": "30"},
        {"poll_wait": -1},
        {"poll_wait": 3601},
        {"shutdown_grace": -1},
    ],
)
def test_bad_settings_are_refused_at_construction(settings: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        workfence.Worker("dbname=x", "q", handler, **settings)  # type: ignore[arg-type]
    assert caught.value.sqlstate == "22023"


@pytest.mark.parametrize("queue", ["", " ", "q\tx", "q" * 129])
def test_bad_queue_names_are_refused_at_construction(queue: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        workfence.Worker("dbname=x", queue, handler)


def test_owner_of_256_bytes_is_accepted() -> None:
    assert workfence.Worker("dbname=x", "q", handler, owner="é" * 128).owner == "é" * 128


def test_every_documented_sqlstate_has_its_class() -> None:
    expected = {
        "22004": "NullArgument",
        "22023": "InvalidArgument",
        "25006": "ReadOnly",
        "25P01": "NoTransaction",
        "40001": "SerializationFailure",
        "42501": "NotPermitted",
        "42704": "UndefinedObject",
        "23503": "UnknownParent",
        "55000": "LeaseLost",
        "57014": "Cancelled",
    }
    assert {code: cls.__name__ for code, cls in errors.BY_SQLSTATE.items()} == expected
    for cls in errors.BY_SQLSTATE.values():
        assert issubclass(cls, errors.WorkfenceError)
        assert getattr(workfence, cls.__name__) is cls


@pytest.mark.parametrize("sqlstate", ["22004", "22023", "40001", "42501", "55000", "57014"])
def test_translate_picks_the_class_by_sqlstate(sqlstate: str) -> None:
    original = psycopg.errors.lookup(sqlstate)("boom")
    translated = errors.translate(original)
    assert type(translated) is errors.BY_SQLSTATE[sqlstate]
    assert isinstance(translated, errors.WorkfenceError)
    assert translated.sqlstate == sqlstate
    assert translated.message == "boom"
    assert translated.__cause__ is original


def test_translate_keeps_an_unknown_sqlstate_in_the_base_class() -> None:
    translated = errors.translate(psycopg.errors.lookup("42P01")("no table"))
    assert type(translated) is errors.WorkfenceError
    assert translated.sqlstate == "42P01"


def test_translate_leaves_an_error_without_sqlstate_alone() -> None:
    original = psycopg.OperationalError("connection lost")
    assert errors.translate(original) is original


def test_error_text_has_detail_and_hint() -> None:
    error = errors.LeaseLost("lease lost", detail="claimed again", hint="drop the job")
    assert (error.sqlstate, error.detail, error.hint) == ("55000", "claimed again", "drop the job")
    assert str(error) == "lease lost\nDETAIL: claimed again\nHINT: drop the job"


def test_cancel_flag_is_an_event_with_a_reason() -> None:
    flag = workfence.CancelFlag()
    assert not flag and not flag.is_set() and flag.reason is None
    assert flag.wait(0) is False
    setter = threading.Thread(target=flag._set, args=("lease lost",))
    setter.start()
    assert flag.wait(10) is True
    setter.join()
    flag._set("shutdown")
    assert flag and flag.reason == "lease lost"


def test_intervals_are_sent_as_timedelta_never_as_numbers() -> None:
    assert interval(0.2, "x") == timedelta(milliseconds=200)
    assert interval(None, "x") is None
    assert interval(timedelta(seconds=3), "x") == timedelta(seconds=3)
    with pytest.raises(errors.InvalidArgument):
        interval(True, "x")


@pytest.mark.parametrize(
    "settings",
    [
        {"concurrency": 2.5},
        {"concurrency": True},
        {"concurrency": "2"},
        {"batch_size": 2.5},
        {"batch_size": True},
        {"batch_size": "3"},
    ],
)
def test_integer_settings_must_be_ints(settings: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        workfence.Worker("dbname=x", "q", handler, **settings)  # type: ignore[arg-type]
    assert caught.value.sqlstate == "22023"


@pytest.mark.parametrize(
    "sqlstate", ["08006", "08001", "57P01", "57P02", "57P03", "57014", "40001", "40P01", "25006",
                 "53300", "53100"],
)
def test_claim_errors_that_retrying_can_fix_are_retried(sqlstate: str) -> None:
    error = errors.translate(psycopg.errors.lookup(sqlstate)("x"))
    assert isinstance(error, errors.WorkfenceError)
    assert worker_module._heals(error)


@pytest.mark.parametrize(
    "sqlstate", ["3F000", "42883", "42501", "22023", "22004", "42P01", "XX000", "55000"]
)
def test_claim_errors_that_retrying_cannot_fix_end_the_run(sqlstate: str) -> None:
    error = errors.translate(psycopg.errors.lookup(sqlstate)("x"))
    assert isinstance(error, errors.WorkfenceError)
    assert not worker_module._heals(error)


def test_a_lost_connection_without_sqlstate_is_retried() -> None:
    assert worker_module._heals(psycopg.OperationalError("server closed the connection"))


async def test_a_failed_first_connection_logs_exit_with_the_error(lines: list[str]) -> None:
    w = workfence.Worker("host=127.0.0.1 port=1 connect_timeout=5", "q", handler)
    with pytest.raises(psycopg.OperationalError):
        await w.run()
    assert lines[-1].startswith("exit error=")
    assert "exit" not in lines[:-1]


def test_results_are_checked_as_json_postgresql_can_store() -> None:
    assert worker_module._result_json(None) is None
    assert worker_module._result_json({"a": [1, "x"]}) == '{"a": [1, "x"]}'
    assert worker_module._result_json("back\\u0000slash") == '"back\\\\u0000slash"'
    for bad in ({"x": object()}, {1, 2}, float("inf"), {"s": "a\x00b"}):
        with pytest.raises(ValueError, match="^result is not JSON: "):
            worker_module._result_json(bad)


def test_group_key_is_sent_by_name_and_only_when_set() -> None:
    # Without a group the statement is 0.9.0's seven-argument call, so that a library of 0.10.0
    # still enqueues into a 0.9.0 database; with one, `group_key => ` is added by name.
    from workfence.operations import enqueue_call

    plain, params = enqueue_call("q", None, None, None, 0, 25, None, None)
    assert "group_key" not in plain and len(params) == 7
    grouped, params = enqueue_call("q", None, None, None, 0, 25, None, "customer-42")
    assert "group_key => %s::text" in grouped
    assert len(params) == 8 and params[-1] == "customer-42"


def test_per_group_is_sent_by_name_and_only_when_set() -> None:
    # Without per_group the statement is 0.11.0's four-argument call, so that a library of
    # 0.12.0 still sets limits in a 0.11.0 database; with it, `per_group => ` is added by name.
    from workfence.operations import limit_call

    plain, params = limit_call("q", 5, None, 1, None)
    assert "per_group" not in plain and params == ("q", 5, None, timedelta(seconds=1))
    grouped, params = limit_call("q", None, None, 1, 4)
    assert "per_group => %s::integer" in grouped
    assert params == ("q", None, None, timedelta(seconds=1), 4)
    with pytest.raises(errors.InvalidArgument, match="per_group"):
        limit_call("q", None, None, 1, True)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [2.5, True, "1"])
def test_limit_counts_must_be_ints(value: object) -> None:
    from workfence.operations import limit_params

    with pytest.raises(errors.InvalidArgument, match="concurrency"):
        limit_params("q", value, None, 1)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="rate"):
        limit_params("q", None, value, 1)  # type: ignore[arg-type]
    assert limit_params("q", 5, None, 60) == ("q", 5, None, timedelta(seconds=60))


# ------------------------------------------------------------------ a job's life (0.12.0)


def test_on_conflict_is_sent_by_name_and_only_when_set() -> None:
    # Without on_conflict the statement is the one an older server takes; with it,
    # `on_conflict => ` is added by name (after group_key when both are set).
    from workfence.operations import enqueue_call

    plain, params = enqueue_call("q", None, None, None, 0, 25, None, None)
    assert "on_conflict" not in plain and len(params) == 7
    query, params = enqueue_call("q", None, "k", None, 0, 25, None, None, "replace")
    assert "on_conflict => %s::text" in query and "group_key" not in query
    assert len(params) == 8 and params[-1] == "replace"
    both, params = enqueue_call("q", None, "k", None, 0, 25, None, "g", "preserve_run_at")
    assert both.index("group_key =>") < both.index("on_conflict =>")
    assert params[-2:] == ("g", "preserve_run_at")


def test_after_and_on_parent_failure_are_sent_by_name_and_only_when_set() -> None:
    # Without them (or with an empty after) the statement is the one a server before workflows
    # takes; with them, `after => ` (bigint[]) and `on_parent_failure => ` are added by name,
    # after the older optional arguments.
    from workfence.operations import enqueue_call

    for after in (None, [], ()):
        plain, params = enqueue_call("q", None, None, None, 0, 25, None, None, after=after)
        assert "after" not in plain and "on_parent_failure" not in plain and len(params) == 7
    query, params = enqueue_call("q", None, "k", None, 0, 25, None, None, after=iter([3, 4]))
    assert "after => %s::bigint[]" in query and "on_parent_failure" not in query
    assert params[-1] == [3, 4] and len(params) == 8
    query, params = enqueue_call(
        "q", None, "k", None, 0, 25, None, "g", "keep", None, [5], "run"
    )
    assert query.index("group_key =>") < query.index("on_conflict =>") < query.index("after =>")
    assert query.index("after =>") < query.index("on_parent_failure => %s::text")
    assert params[-4:] == ("g", "keep", [5], "run")


@pytest.mark.parametrize("after", ["12", b"12", [1, "2"], [True], [1.5]])
def test_after_must_be_a_list_of_int_ids(after: Any) -> None:
    from workfence.operations import enqueue_call

    with pytest.raises(errors.InvalidArgument):
        enqueue_call("q", None, None, None, 0, 25, None, None, after=after)


def test_enqueue_many_sends_one_element_per_item_and_null_for_unset_columns() -> None:
    # One array per column, as long as the items; keys, run_at and group_keys NULL when no item
    # sets one (the server's defaults); on_conflict by name only when set.
    from psycopg.types.json import Jsonb

    from workfence import EnqueueItem
    from workfence.operations import enqueue_many_call

    plain, params = enqueue_many_call("q", [EnqueueItem({"n": 1}), EnqueueItem()], 0, 25, None)
    assert "work_enqueue_many(" in plain and "on_conflict" not in plain
    queue, payloads, keys, run_at, priority, max_attempts, group_keys = params
    assert (queue, priority, max_attempts) == ("q", 0, 25)
    assert (keys, run_at, group_keys) == (None, None, None)
    assert all(isinstance(p, Jsonb) for p in payloads)
    assert [p.obj for p in payloads] == [{"n": 1}, {}]  # None: {} as in enqueue
    query, params = enqueue_many_call(
        "q",
        iter([EnqueueItem(key="a", group_key="g"), EnqueueItem(payload=[1, 2])]),
        1,
        3,
        "replace",
    )
    assert query.rstrip().endswith("on_conflict => %s::text)")
    assert params[2] == ["a", None] and params[3] is None and params[6] == ["g", None]
    assert params[4:6] == (1, 3) and params[-1] == "replace"
    assert [p.obj for p in params[1]] == [{}, [1, 2]]


@pytest.mark.parametrize("items", ["ab", b"ab", {"a": 1}, [{"payload": 1}], [None]])
def test_enqueue_many_takes_only_enqueue_items(items: Any) -> None:
    from workfence.operations import enqueue_many_call

    with pytest.raises(errors.InvalidArgument):
        enqueue_many_call("q", items, 0, 25, None)


def _job(row: tuple[object, ...]) -> workfence.Job:
    return workfence.Job(workfence.Worker("dbname=x", "q", handler), row)


def test_a_job_reads_its_checkpoint_and_names_its_token() -> None:
    base = (7, "k", {"a": 1}, 42, 2, None)
    job = _job((*base, {"step": 3}))
    assert job.checkpoint == {"step": 3}
    assert job.fencing_token == "7:42"
    assert _job(base).checkpoint is None  # a server older than 0.12.0: no progress column


def test_await_result_waits_at_most_three_seconds_per_call() -> None:
    from time import monotonic

    from workfence.operations import await_call_wait, await_wait

    assert await_call_wait(None) == timedelta(seconds=3)
    assert await_call_wait(monotonic() + 60) == timedelta(seconds=3)
    assert await_call_wait(monotonic() - 1) == timedelta(0)
    assert timedelta(0) < await_call_wait(monotonic() + 1) <= timedelta(seconds=1)
    assert await_wait(None) is None and await_wait(timedelta(seconds=2)) == 2.0
    for bad in (-1, "3", True):
        with pytest.raises(errors.InvalidArgument):
            await_wait(bad)  # type: ignore[arg-type]


def _ping(n: int) -> None:
    if n == 0:
        raise KeyError("invoice")
    _pong(n - 1)


def _pong(n: int) -> None:
    _ping(n - 1)  # two functions by turns: Python collapses only a frame repeated in a row


def test_an_error_text_has_its_type_then_the_newest_frames_within_2048_bytes() -> None:
    try:
        _ping(2)
    except KeyError as error:
        short = worker_module._failure_text(error)
    lines = short.splitlines()
    assert lines[0] == "KeyError: 'invoice'"
    assert lines[1] == "Traceback (most recent call last):"
    assert sum(line.endswith((", in _ping", ", in _pong")) for line in lines) == 3
    try:
        _ping(200)
    except KeyError as error:
        deep = worker_module._failure_text(error)
    assert len(deep.encode()) <= 2048
    first, title = deep.splitlines()[:2]
    assert first == "KeyError: 'invoice'"
    assert title.startswith("Traceback (most recent call last, ") and "earlier frames cut" in title
    cut = int(title.split(", ")[1].split()[0])
    kept = sum(line.endswith((", in _ping", ", in _pong")) for line in deep.splitlines())
    assert kept > 5 and cut + kept == 202  # this test's frame, then 201 of _ping and _pong
    assert deep.rstrip().endswith('raise KeyError("invoice")')  # the newest frame kept


def test_an_error_text_bounds_a_long_message_and_names_the_module() -> None:
    class Declined(Exception):
        pass

    text = worker_module._failure_text(Declined("é" * 2000))  # never raised: no traceback
    assert text.startswith("tests.test_unit.test_an_error_text_bounds_a_long_message_and_names_")
    assert len(text.encode()) <= 1024 and "\n" not in text and text.endswith("é...")
    assert worker_module._failure_text(RuntimeError()) == "RuntimeError"


def test_an_error_text_names_its_causes() -> None:
    try:
        try:
            invoices: dict[str, int] = {}
            invoices["invoice"]
        except KeyError as inner:
            raise RuntimeError("cannot bill") from inner
    except RuntimeError as error:
        text = worker_module._failure_text(error)
    lines = text.splitlines()
    assert lines[0] == "RuntimeError: cannot bill"
    assert lines[-1] == "caused by: KeyError: 'invoice'"
    assert lines[1] == "Traceback (most recent call last):"
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise OSError("while handling") from None  # the context suppressed: no cause line
    except OSError as error:
        assert "caused by" not in worker_module._failure_text(error)
