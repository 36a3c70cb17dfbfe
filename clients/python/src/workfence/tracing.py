"""Trace context (from 0.12.0): OpenTelemetry across the queue, when it is installed.

An item carries a W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`),
stored by `work_enqueue(..., trace)` and handed back with every claim. `enqueue` sends the one
given as `trace=`, else the current span's context (formatted by OpenTelemetry's W3C
TraceContext propagator); the runner shows it as `job.trace` and, when an OpenTelemetry SDK is
configured, runs the handler inside a span `process <queue>` (kind CONSUMER) with a LINK to the
enqueuer's span: the run is a trace of its own, linked to the one that enqueued it, as
otelriver and opentelemetry_oban do.

OpenTelemetry is optional (`pip install workfence[otel]` adds `opentelemetry-api`): without it,
or with the API but no SDK (its no-op tracer provider), nothing is sent, no span is made, and
the only cost is a check per enqueue and per job. The API is imported at the first use, not
with `workfence`.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider

__all__ = ["available", "current_traceparent", "format_traceparent", "parse_traceparent"]

#: The instrumentation scope of the runner's spans (the tracer's name).
TRACER_NAME = "workfence"

# The OpenTelemetry API as `_load()` found it: None when it is not installed, `_UNSET` before the
# first look.
_UNSET: Any = object()
_api: Any = _UNSET
_api_lock = threading.Lock()
# The last (provider, tracer) pair `consumer_tracer` made: a provider's tracer is made once.
_tracer_cache: tuple[Any, Any] | None = None


def _load() -> Any:
    """The parts of the OpenTelemetry API this module uses, imported once (None when the API is
    not installed)."""
    global _api
    if _api is _UNSET:
        with _api_lock:
            if _api is _UNSET:
                try:
                    from opentelemetry import trace
                    from opentelemetry.context import Context
                    from opentelemetry.trace.propagation.tracecontext import (
                        TraceContextTextMapPropagator,
                    )
                    from opentelemetry.trace.status import Status, StatusCode
                except ImportError:
                    _api = None
                else:
                    _api = SimpleNamespace(
                        trace=trace,
                        Context=Context,
                        propagator=TraceContextTextMapPropagator(),
                        Status=Status,
                        StatusCode=StatusCode,
                    )
    return _api


def available() -> bool:
    """Whether the OpenTelemetry API (`opentelemetry-api`) can be imported."""
    return _load() is not None


def format_traceparent(span_context: SpanContext | None) -> str | None:
    """The W3C `traceparent` of `span_context`, as OpenTelemetry's TraceContext propagator
    writes it (`00-<trace id>-<span id>-<flags>`, lowercase hex); None for None, an invalid
    span context, or when the OpenTelemetry API is not installed."""
    api = _load()
    if api is None or span_context is None or not span_context.is_valid:
        return None
    context = api.trace.set_span_in_context(api.trace.NonRecordingSpan(span_context), api.Context())
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier, context=context)
    return carrier.get("traceparent")


def current_traceparent() -> str | None:
    """The `traceparent` of the current span's context (what `enqueue` sends when it is given
    no `trace=`): None when the OpenTelemetry API is not installed or no valid span context is
    current (with no SDK configured there is none, unless one was propagated in)."""
    api = _load()
    if api is None:
        return None
    return format_traceparent(api.trace.get_current_span().get_span_context())


def parse_traceparent(value: str | None) -> SpanContext | None:
    """The span context a W3C `traceparent` names (remote, with its sampled flag), read by
    OpenTelemetry's TraceContext propagator; None for None, a malformed value (wrong length or
    case, all-zero ids, version `ff`, extra fields after version `00`), or when the
    OpenTelemetry API is not installed."""
    api = _load()
    if api is None or not value:
        return None
    context = api.propagator.extract({"traceparent": value})
    span_context = api.trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def consumer_tracer(provider: TracerProvider | None) -> Tracer | None:
    """The tracer of the runner's spans from `provider` (None: the global one), or None when
    nothing is to be traced: the API is not installed, or no provider was given and the global
    one is OpenTelemetry's no-op or proxy provider (no SDK configured). Cheap after the first
    call for a provider. Internal."""
    global _tracer_cache
    api = _load()
    if api is None:
        return None
    if provider is None:
        provider = api.trace.get_tracer_provider()
        if isinstance(provider, api.trace.ProxyTracerProvider | api.trace.NoOpTracerProvider):
            return None
    cached = _tracer_cache
    if cached is not None and cached[0] is provider:
        found: Tracer = cached[1]
        return found
    from . import __version__

    tracer = provider.get_tracer(TRACER_NAME, __version__)
    _tracer_cache = (provider, tracer)
    return tracer


def start_consumer_span(tracer: Tracer, queue: str, job: Any) -> Span:
    """Start the span `process <queue>` (kind CONSUMER) of one job's run: a new trace (not a
    child of whatever is current), linked to the enqueuer's span context when the job's
    `trace` parses, with the attributes `messaging.system` (`pg_workfence`),
    `messaging.destination.name` (the queue), `messaging.message.id` (the item id, as text),
    `workfence.epoch` and `workfence.attempt`. Not made current: `activate` does that.
    Internal."""
    api = _load()
    linked = parse_traceparent(job.trace)
    links = [api.trace.Link(linked)] if linked is not None else None
    return tracer.start_span(
        f"process {queue}",
        context=api.Context(),
        kind=api.trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "pg_workfence",
            "messaging.destination.name": queue,
            "messaging.message.id": str(job.id),
            "workfence.epoch": job.epoch,
            "workfence.attempt": job.attempt,
        },
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )


def activate(span: Span) -> Any:
    """A context manager that makes `span` current (not ending it), so that the handler's task
    or thread, started inside it, runs in it and its own spans are the span's children.
    Internal."""
    return _load().trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def end_consumer_span(span: Span, failure: BaseException | None, reason: str | None) -> None:
    """End a job's span. A run that ended with `failure` (the handler's error, a result that is
    not JSON, `LeaseLost` from `job.transaction()`) has the exception recorded and the error
    status; a cancelled one (`asyncio.CancelledError`: the lease was lost, or the shutdown
    released the item) the error status described by `reason`, without an exception event; so
    does a run without a failure whose token was refused at its settle (`reason` "lease lost").
    Internal."""
    api = _load()
    if isinstance(failure, asyncio.CancelledError):
        span.set_status(api.Status(api.StatusCode.ERROR, f"cancelled: {reason or 'cancelled'}"))
    elif failure is not None:
        span.record_exception(failure)
        text = str(failure)
        name = type(failure).__name__
        span.set_status(api.Status(api.StatusCode.ERROR, f"{name}: {text}" if text else name))
    elif reason is not None:
        span.set_status(api.Status(api.StatusCode.ERROR, reason))
    span.end()
