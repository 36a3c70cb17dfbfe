"""Trace context (from 0.12.0): `workfence.tracing`, `enqueue(..., trace=)`, `job.trace` and the
runner's `process <queue>` span.

The first part needs no server: the traceparent's formatting and parsing, the statement an
enqueue sends with and without a span (on a stand-in connection), and the library without
OpenTelemetry (in a child interpreter where `opentelemetry` cannot be imported). The second part
runs against the real server (WORKFENCE_TEST_DSN) with an SDK `TracerProvider` of the test's own
whose spans go to an in-memory exporter; the global provider is never set, so that it stays the
API's no-op one ("no SDK configured") for the tests that need that."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags
from psycopg.conninfo import make_conninfo

import workfence
from workfence import _sql, errors, operations, tracing

from .conftest import eventually, running

OWNER = "pytest/tracing"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An SDK tracer provider of the test's own (not the global one) and the exporter that
    keeps its finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


def _context(sampled: bool = True) -> SpanContext:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=flags)


# ---------------------------------------------------------------------------- no server


def test_format_traceparent_writes_the_w3c_header() -> None:
    assert tracing.format_traceparent(_context()) == GIVEN
    assert tracing.format_traceparent(_context(sampled=False)) == GIVEN[:-2] + "00"
    assert tracing.format_traceparent(trace.INVALID_SPAN_CONTEXT) is None
    assert tracing.format_traceparent(None) is None


def test_parse_traceparent_reads_ids_and_flags() -> None:
    parsed = tracing.parse_traceparent(GIVEN)
    assert parsed is not None
    assert (parsed.trace_id, parsed.span_id, parsed.trace_flags.sampled) == (
        TRACE_ID,
        SPAN_ID,
        True,
    )
    assert parsed.is_remote
    unsampled = tracing.parse_traceparent(GIVEN[:-2] + "00")
    assert unsampled is not None and not unsampled.trace_flags.sampled
    assert tracing.format_traceparent(parsed) == GIVEN


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "",
        "nope",
        GIVEN[:-1],  # flags cut short
        GIVEN.upper(),  # upper-case hex
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "ff" + GIVEN[2:],  # the forbidden version
        GIVEN + "-extra",  # version 00 has exactly four fields
    ],
)
def test_parse_traceparent_refuses_what_is_not_one(bad: str | None) -> None:
    assert tracing.parse_traceparent(bad) is None


def test_current_traceparent_is_that_of_the_current_span(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    assert tracing.current_traceparent() is None
    with provider.get_tracer("test").start_as_current_span("produce") as span:
        context = span.get_span_context()
        flags = f"{context.trace_flags:02x}"  # sampled, and from the SDK's ids also "random"
        expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"
        assert tracing.current_traceparent() == expected and context.trace_flags.sampled
    assert tracing.current_traceparent() is None
    # The API's own tracer, with no SDK configured, makes no span context: nothing to send.
    with trace.get_tracer("test").start_as_current_span("no sdk"):
        assert tracing.current_traceparent() is None


def test_no_sdk_configured_makes_no_tracer(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert tracing.consumer_tracer(None) is None
    assert tracing.consumer_tracer(trace.NoOpTracerProvider()) is not None  # given: used as is
    tracer = tracing.consumer_tracer(provider)
    assert tracer is not None and tracing.consumer_tracer(provider) is tracer


def test_enqueue_call_names_trace_only_when_set() -> None:
    query, params = operations.enqueue_call("q", None, None, None, 0, 25, None, None)
    assert query == _sql.ENQUEUE and len(params) == 7
    query, params = operations.enqueue_call("q", None, None, None, 0, 25, None, None, None, GIVEN)
    assert "trace => %s::text" in query and params[-1] == GIVEN
    query, params = operations.enqueue_call(
        "q", None, None, None, 0, 25, None, "g", "replace", GIVEN
    )
    assert query.index("group_key") < query.index("on_conflict") < query.index("trace")
    assert params[-3:] == ("g", "replace", GIVEN)


class _Cursor:
    """A stand-in cursor answering one row."""

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row

    async def fetchone(self) -> tuple[Any, ...]:
        return self.row


class _Conn:
    """A stand-in `AsyncConnection` that records the statements and answers the probe for a
    `trace` argument with `takes_trace`."""

    def __init__(self, takes_trace: bool = True) -> None:
        self.takes_trace = takes_trace
        self.sent: list[tuple[str, tuple[Any, ...]]] = []

    async def execute(self, query: str, params: tuple[Any, ...]) -> _Cursor:
        self.sent.append((query, params))
        if query == _sql.ENQUEUE_TAKES_TRACE:
            return _Cursor((self.takes_trace,))
        return _Cursor((1, "k", True))


async def test_enqueue_outside_a_span_sends_no_trace() -> None:
    conn = _Conn()
    await workfence.enqueue(conn, "q", key="k")  # type: ignore[arg-type]
    assert [query for query, _ in conn.sent] == [_sql.ENQUEUE]


async def test_enqueue_in_a_span_sends_its_traceparent_where_the_server_takes_one(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    tracer = provider.get_tracer("test")
    new, old = _Conn(takes_trace=True), _Conn(takes_trace=False)
    with tracer.start_as_current_span("produce"):
        expected = tracing.current_traceparent()
        for _ in range(2):
            await workfence.enqueue(new, "q", key="k")  # type: ignore[arg-type]
            await workfence.enqueue(old, "q", key="k")  # type: ignore[arg-type]
        await workfence.enqueue(old, "q", key="k", trace=GIVEN)  # type: ignore[arg-type]
    # The probe once per connection; the trace sent only where work_enqueue takes it.
    assert [query for query, _ in new.sent].count(_sql.ENQUEUE_TAKES_TRACE) == 1
    assert [params[-1] for query, params in new.sent if "trace =>" in query] == [expected] * 2
    assert [query for query, _ in old.sent].count(_sql.ENQUEUE_TAKES_TRACE) == 1
    # A trace given is sent as it is, asked nothing (an older server then refuses it: 42883).
    assert [params[-1] for query, params in old.sent if "trace =>" in query] == [GIVEN]


def test_the_library_without_opentelemetry_installed() -> None:
    # A child interpreter in which `import opentelemetry` fails, as where it is not installed.
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.modules["opentelemetry"] = None
        import workfence
        from workfence import _sql, tracing
        assert not tracing.available()
        assert tracing.current_traceparent() is None
        assert tracing.parse_traceparent("{GIVEN}") is None
        assert tracing.format_traceparent(None) is None
        assert tracing.consumer_tracer(None) is None
        class Cursor:
            async def fetchone(self):
                return (1, "k", True)
        class Conn:
            sent = []
            async def execute(self, query, params):
                self.sent.append(query)
                return Cursor()
        conn = Conn()
        asyncio.run(workfence.enqueue(conn, "q"))
        assert conn.sent == [_sql.ENQUEUE], conn.sent
        asyncio.run(workfence.enqueue(conn, "q", trace="{GIVEN}"))
        assert "trace =>" in conn.sent[-1]
        workfence.Worker("dbname=x", "q", lambda job: None)
        assert "opentelemetry.trace" not in sys.modules
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


# --------------------------------------------------------------------------- the server


def worker(dsn: str, queue: str, handler: Any, **settings: Any) -> workfence.Worker:
    """A worker with quick test settings (short poll) unless given."""
    settings.setdefault("owner", OWNER)
    settings.setdefault("poll_wait", 1)
    settings.setdefault("lease", 6)
    return workfence.Worker(dsn, queue, handler, **settings)


def _consumer_spans(exporter: InMemorySpanExporter, queue: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == f"process {queue}"]


def _has_spans(exporter: InMemorySpanExporter, queue: str, n: int) -> Any:
    async def check() -> bool:
        return len(_consumer_spans(exporter, queue)) >= n

    return check


async def test_the_consumer_span_links_to_the_enqueuers_span(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    with provider.get_tracer("test").start_as_current_span("produce") as producer:
        made = await workfence.enqueue(db, queue, {"n": 1})
    produced = producer.get_span_context()
    seen: list[tuple[str | None, SpanContext]] = []

    async def handle(job: workfence.Job) -> Any:
        seen.append((job.trace, trace.get_current_span().get_span_context()))
        with provider.get_tracer("test").start_as_current_span("inside"):
            pass
        return {"ok": True}

    async with running(worker(dsn, queue, handle, tracer_provider=provider)):
        await eventually(_has_spans(exporter, queue, 1), "the consumer span")
    [span] = _consumer_spans(exporter, queue)
    flags = f"{produced.trace_flags:02x}"
    assert seen[0][0] == f"00-{produced.trace_id:032x}-{produced.span_id:016x}-{flags}"
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is None  # a trace of its own ...
    assert span.context is not None and span.context.trace_id != produced.trace_id
    [link] = span.links  # ... linked to the enqueuer's span
    assert (link.context.trace_id, link.context.span_id) == (produced.trace_id, produced.span_id)
    info = await workfence.item(db, made.id)
    assert info is not None and info.epoch is not None
    assert dict(span.attributes or {}) == {
        "messaging.system": "pg_workfence",
        "messaging.destination.name": queue,
        "messaging.message.id": str(made.id),
        "workfence.epoch": info.epoch,
        "workfence.attempt": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    # The handler ran inside the span: its own spans are the span's children.
    assert seen[0][1] == span.context
    [inside] = [s for s in exporter.get_finished_spans() if s.name == "inside"]
    assert inside.parent is not None and inside.parent.span_id == span.context.span_id


async def test_a_failing_handler_has_an_error_span_with_the_exception(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    with provider.get_tracer("test").start_as_current_span("produce") as producer:
        await workfence.enqueue(db, queue, max_attempts=2)

    def handle(job: workfence.Job) -> Any:  # a plain function: it runs in a thread, in the span
        raise KeyError(f"invoice of attempt {job.attempt}")

    async with running(
        worker(dsn, queue, handle, tracer_provider=provider, retry=lambda attempt, error: 0)
    ):
        await eventually(_has_spans(exporter, queue, 2), "both attempts' spans")
    produced = producer.get_span_context()
    for attempt, span in enumerate(_consumer_spans(exporter, queue), start=1):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == f"KeyError: 'invoice of attempt {attempt}'"
        [event] = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "KeyError"
        assert (span.attributes or {})["workfence.attempt"] == attempt
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (
            produced.trace_id,
            produced.span_id,
        )


async def test_a_given_trace_is_passed_through_unchanged(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    with provider.get_tracer("test").start_as_current_span("produce"):
        await workfence.enqueue(db, queue, trace=GIVEN)  # given: the current span is not used
    with psycopg.connect(dsn, autocommit=True) as conn:
        workfence.sync.enqueue(conn, queue, trace=GIVEN[:-2] + "00")
    seen: list[str | None] = []

    async def handle(job: workfence.Job) -> None:
        seen.append(job.trace)

    async with running(worker(dsn, queue, handle, tracer_provider=provider)):
        await eventually(_has_spans(exporter, queue, 2), "both consumer spans")
    assert sorted(seen, key=str) == [GIVEN[:-2] + "00", GIVEN]
    for span in _consumer_spans(exporter, queue):
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (TRACE_ID, SPAN_ID)
    with pytest.raises(errors.InvalidArgument) as bad:
        await workfence.enqueue(db, queue, trace="not a traceparent")
    assert bad.value.sqlstate == "22023"


async def test_without_an_sdk_nothing_is_traced(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The global provider is the API's no-op one: no trace is sent, and the runner starts no span.
    started: list[Any] = []
    real = tracing.start_consumer_span

    def counting(*args: Any) -> Any:
        started.append(args)
        return real(*args)

    monkeypatch.setattr(tracing, "start_consumer_span", counting)
    with trace.get_tracer("test").start_as_current_span("no sdk"):
        await workfence.enqueue(db, queue, key="a")
    with psycopg.connect(dsn, autocommit=True) as conn:
        workfence.sync.enqueue(conn, queue, key="b")
    seen: list[tuple[str | None, bool]] = []

    async def handle(job: workfence.Job) -> None:
        seen.append((job.trace, trace.get_current_span().get_span_context().is_valid))

    async with running(worker(dsn, queue, handle)):
        await eventually(lambda: _done(db, queue, 2), "both items done")
    assert seen == [(None, False), (None, False)] and started == []
    cur = await db.execute(
        "SELECT count(*) FROM workfence.items WHERE queue = %s AND trace IS NULL", (queue,)
    )
    assert await cur.fetchone() == (2,)


async def _done(db: psycopg.AsyncConnection[Any], queue: str, n: int) -> bool:
    cur = await db.execute(
        "SELECT count(*) FROM workfence.items WHERE queue = %s AND state = 'done'", (queue,)
    )
    row = await cur.fetchone()
    return row is not None and row[0] >= n


async def test_a_span_changes_nothing_against_a_0_11_0_database(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    queue: str,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    # work_enqueue without `trace`: an enqueue in a span sends none (the probe says so), a claim
    # row has no trace column; the consumer span is made, with no link.
    provider, exporter = spans
    name = f"workfence_py_0110_trace_{queue[-8:]}"
    await db.execute(f"CREATE DATABASE {name}")
    try:
        old_dsn = make_conninfo(dsn, dbname=name)
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as old:
            await old.execute("CREATE EXTENSION pg_workfence VERSION '0.11.0'")
            with provider.get_tracer("test").start_as_current_span("produce"):
                await workfence.enqueue(old, queue, {"n": 1})
            with pytest.raises(errors.WorkfenceError) as missing:
                await workfence.enqueue(old, queue, trace=GIVEN)
            assert missing.value.sqlstate == "42883"
            seen: list[str | None] = []

            async def handle(job: workfence.Job) -> None:
                seen.append(job.trace)

            async with running(worker(old_dsn, queue, handle, tracer_provider=provider)):
                await eventually(_has_spans(exporter, queue, 1), "the consumer span")
            [span] = _consumer_spans(exporter, queue)
            assert seen == [None] and list(span.links) == []
    finally:
        await db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_replace_takes_the_new_trace_and_keep_leaves_it(
    dsn: str, db: psycopg.AsyncConnection[Any], queue: str
) -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    await workfence.enqueue(db, queue, key="k", trace=GIVEN)
    await workfence.enqueue(db, queue, key="k", trace=other, on_conflict="keep")
    assert await _trace_of(db, queue, "k") == GIVEN
    await workfence.enqueue(db, queue, key="k", trace=other, on_conflict="replace")
    assert await _trace_of(db, queue, "k") == other
    claimed: asyncio.Queue[str | None] = asyncio.Queue()

    async def handle(job: workfence.Job) -> None:
        claimed.put_nowait(job.trace)

    async with running(worker(dsn, queue, handle)):
        assert await asyncio.wait_for(claimed.get(), 15) == other


async def _trace_of(db: psycopg.AsyncConnection[Any], queue: str, key: str) -> str | None:
    cur = await db.execute(
        "SELECT trace FROM workfence.items WHERE queue = %s AND key = %s", (queue, key)
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0]
