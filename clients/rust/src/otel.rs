//! OpenTelemetry (feature `otel`): the traceparent an enqueue sends, and the `process <queue>`
//! span each job's handler runs in, linked to its enqueuer's span (README.md, *Tracing*). Only
//! the OpenTelemetry API is used: the global tracer provider and text map propagator the
//! application installs. Without them (the API's no-op defaults) nothing is sent or recorded.

use std::collections::HashMap;
use std::error::Error as StdError;

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{global, Context, InstrumentationScope, KeyValue};

use crate::failure::{error_text, first_line};
use crate::traceparent::TraceParent;

/// The instrumentation scope's name (the crate's).
const SCOPE: &str = "workfence";

/// The header the W3C TraceContext propagator writes.
const TRACEPARENT: &str = "traceparent";

/// The `traceparent` of `cx`'s span, for [`crate::EnqueueOptions::trace`]: `None` when `cx` has
/// no valid span context (no span, or only the no-op tracer's, as when no OpenTelemetry SDK is
/// installed). Formatted by the global text map propagator when it writes a `traceparent` (the
/// SDK's `TraceContextPropagator`, alone or in a composite); otherwise (no propagator installed,
/// or one of another format) from the span context, in the same W3C format.
///
/// [`crate::enqueue`] calls it with the current context when no trace is given; call it
/// yourself for another context (with `tracing-opentelemetry`, a `tracing` span's
/// `OpenTelemetrySpanExt::context()`).
pub fn traceparent(cx: &Context) -> Option<String> {
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    global::get_text_map_propagator(|propagator| propagator.inject_context(cx, &mut carrier));
    match carrier.remove(TRACEPARENT) {
        Some(value) if TraceParent::parse(&value).is_some() => Some(value),
        _ => Some(of_span_context(sc).to_string()),
    }
}

/// The current context's [`traceparent`]: what an enqueue without an explicit trace sends.
pub(crate) fn current_traceparent() -> Option<String> {
    traceparent(&Context::current())
}

/// The traceparent of a span context.
fn of_span_context(sc: &SpanContext) -> TraceParent {
    TraceParent {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
    }
}

/// The enqueuer's span context in an item's traceparent (remote, no trace state), or `None`
/// for none or a malformed one.
pub(crate) fn span_context_of(trace: Option<&str>) -> Option<SpanContext> {
    let tp = TraceParent::parse(trace?)?;
    Some(SpanContext::new(
        TraceId::from_bytes(tp.trace_id),
        SpanId::from_bytes(tp.span_id),
        if tp.is_sampled() {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::NOT_SAMPLED
        },
        true,
        TraceState::default(),
    ))
}

/// A job's `process <queue>` span (kind CONSUMER), the root of a trace of its own, linked to the
/// enqueuer's span; ended when dropped. With the no-op tracer (no SDK installed) it is a no-op
/// span: nothing is recorded.
pub(crate) struct JobSpan {
    /// A context holding the span: the handler runs in it.
    cx: Context,
}

impl JobSpan {
    /// Starts the span of item `id` (its `epoch`, `attempt` and `trace`) of `queue`.
    pub(crate) fn start(
        queue: &str,
        id: i64,
        epoch: i64,
        attempt: i32,
        trace: Option<&str>,
    ) -> JobSpan {
        let tracer = global::tracer_with_scope(
            InstrumentationScope::builder(SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        let links = span_context_of(trace)
            .map(|sc| vec![Link::with_context(sc)])
            .unwrap_or_default();
        let builder = tracer
            .span_builder(format!("process {queue}"))
            .with_kind(SpanKind::Consumer)
            .with_links(links)
            .with_attributes([
                KeyValue::new("messaging.system", "pg_workfence"),
                KeyValue::new("messaging.destination.name", queue.to_owned()),
                KeyValue::new("messaging.message.id", id.to_string()),
                KeyValue::new("workfence.epoch", epoch),
                KeyValue::new("workfence.attempt", i64::from(attempt)),
            ]);
        // A parent of none: the job's run is a trace of its own, linked (not parented) to the
        // enqueue, whatever context the worker was started in.
        let span = tracer.build_with_context(builder, &Context::new());
        JobSpan {
            cx: Context::new().with_span(span),
        }
    }

    /// The context the handler runs in (its current span is this one).
    pub(crate) fn context(&self) -> Context {
        self.cx.clone()
    }

    /// The handler failed with `error` (an `Err` or a panic): an `exception` event and error
    /// status, described by the first line of the text `work_fail` records.
    pub(crate) fn failed(&self, error: &(dyn StdError + 'static)) {
        let span = self.cx.span();
        if !span.is_recording() {
            return;
        }
        span.record_error(error);
        span.set_status(Status::error(first_line(&error_text(error)).to_owned()));
    }

    /// The job ended without its result counting (`why`: its lease was lost, or it was
    /// cancelled at shutdown): error status.
    pub(crate) fn ended_unfinished(&self, why: &'static str) {
        self.cx.span().set_status(Status::error(why));
    }
}

impl Drop for JobSpan {
    /// Ends the span.
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_gives_the_remote_span_context_it_names() {
        let sc = span_context_of(Some(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ))
        .expect("valid");
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("hex")
        );
        assert_eq!(
            sc.span_id(),
            SpanId::from_hex("b7ad6b7169203331").expect("hex")
        );
        assert!(sc.is_sampled() && sc.is_remote() && sc.is_valid());
        assert_eq!(
            of_span_context(&sc).to_string(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert!(span_context_of(None).is_none());
        assert!(span_context_of(Some("garbage")).is_none());
    }

    #[test]
    fn no_span_or_an_invalid_one_gives_no_traceparent() {
        assert_eq!(traceparent(&Context::new()), None);
        assert_eq!(current_traceparent(), None);
        let invalid = Context::new().with_remote_span_context(SpanContext::empty_context());
        assert_eq!(traceparent(&invalid), None);
    }

    /// A propagator that writes a fixed `traceparent`.
    #[derive(Debug)]
    struct Fixed(&'static str);

    impl opentelemetry::propagation::TextMapPropagator for Fixed {
        fn inject_context(
            &self,
            _cx: &Context,
            injector: &mut dyn opentelemetry::propagation::Injector,
        ) {
            injector.set(TRACEPARENT, self.0.to_owned());
        }
        fn extract_with_context(
            &self,
            cx: &Context,
            _extractor: &dyn opentelemetry::propagation::Extractor,
        ) -> Context {
            cx.clone()
        }
        fn fields(&self) -> opentelemetry::propagation::text_map_propagator::FieldIter<'_> {
            opentelemetry::propagation::text_map_propagator::FieldIter::new(&[])
        }
    }

    /// One test for every state of the global propagator, which it sets: the tests of this
    /// binary run in parallel, and the others never reach the propagator.
    #[test]
    fn the_global_propagator_formats_it_and_without_one_the_span_context_is_formatted() {
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
            SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
            TraceFlags::NOT_SAMPLED,
            true,
            TraceState::default(),
        );
        let cx = Context::new().with_remote_span_context(sc);
        let formatted = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        // The API's no-op propagator (none installed yet) writes nothing: formatted here.
        assert_eq!(traceparent(&cx).as_deref(), Some(formatted));
        // The no-op tracer's span keeps an invalid context: nothing to send.
        let noop = global::tracer("test").start_with_context("noop", &Context::new());
        assert_eq!(traceparent(&Context::new().with_span(noop)), None);
        // An installed propagator's traceparent is the one sent...
        let from_propagator = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        global::set_text_map_propagator(Fixed(from_propagator));
        assert_eq!(traceparent(&cx).as_deref(), Some(from_propagator));
        // ... unless it is not one.
        global::set_text_map_propagator(Fixed("not a traceparent"));
        assert_eq!(traceparent(&cx).as_deref(), Some(formatted));
        global::set_text_map_propagator(
            opentelemetry::propagation::TextMapCompositePropagator::new(vec![]),
        );
        assert_eq!(traceparent(&cx).as_deref(), Some(formatted));
    }
}
