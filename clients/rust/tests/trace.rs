//! Trace context (from 0.12.0) with the `otel` feature: an OpenTelemetry SDK installed as an
//! application installs it (a tracer provider exporting to the SDK's in-memory exporter, the W3C
//! TraceContext propagator), an enqueue inside a producer span stores its traceparent, and the
//! worker runs the job in a `process <queue>` consumer span linked to it, with the messaging
//! attributes and an error status when the handler fails; an explicit trace is sent unchanged
//! (and a malformed one refused); without a current span the item has none.
//!
//! The provider is the process's global one, shared by the tests of this file: each reads only
//! the spans of its own queue (a fresh name). A worker's spans are all ended when its `run`
//! returns (each job's span ends after its settle, and `run` waits for every job).

mod common;

use std::collections::HashMap;
use std::sync::OnceLock;

use common::{spawn, stop};
use opentelemetry::trace::{
    FutureExt, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer,
};
use opentelemetry::{global, Context, KeyValue, Value as OtelValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tokio::sync::mpsc;
use workfence::{EnqueueOptions, Error, Job, OnConflict};

/// The in-memory exporter of the global tracer provider, installed on first use.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        global::set_tracer_provider(provider);
        global::set_text_map_propagator(TraceContextPropagator::new());
        exporter
    })
}

/// A producer span's context (of the global provider): what an application enqueues in.
fn producer(name: &str) -> Context {
    exporter();
    let span = global::tracer("tests/producer").start(name.to_owned());
    Context::new().with_span(span)
}

/// The traceparent of `sc`, as the W3C format writes it.
fn traceparent_of(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The ended spans named `process <queue>`, keyed by their `messaging.message.id`.
fn consumer_spans(queue: &str) -> HashMap<String, SpanData> {
    let name = format!("process {queue}");
    exporter()
        .get_finished_spans()
        .expect("finished spans")
        .into_iter()
        .filter(|span| span.name == name)
        .map(|span| {
            let id = attribute(&span, "messaging.message.id")
                .map(|v| v.as_str().into_owned())
                .expect("messaging.message.id");
            (id, span)
        })
        .collect()
}

/// The value of the attribute `key` of `span`.
fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a OtelValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// What a handler saw: the job's trace and the span context current in the handler.
type Seen = (i64, Option<String>, SpanContext);

/// A handler that reports what it saw, then returns `Ok` (payload `{"do": "ok"}`), an `Err`
/// (`"fail"`) or panics (`"panic"`).
fn reporting(
    seen: mpsc::UnboundedSender<Seen>,
) -> impl Fn(
    Job,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = workfence::HandlerResult> + Send>>
       + Send
       + Sync
       + 'static {
    move |job: Job| {
        let seen = seen.clone();
        Box::pin(async move {
            let current = Context::current().span().span_context().clone();
            seen.send((job.id, job.trace().map(str::to_owned), current))
                .map_err(|e| e.to_string())?;
            match job.payload["do"].as_str() {
                Some("fail") => Err("the handler failed on purpose".into()),
                Some("panic") => panic!("the handler panicked on purpose"),
                _ => Ok(Some(json!("ok"))),
            }
        })
    }
}

/// Receives `n` reports, keyed by item id.
async fn reports(seen: &mut mpsc::UnboundedReceiver<Seen>, n: usize) -> HashMap<i64, Seen> {
    let mut got = HashMap::new();
    while got.len() < n {
        let report = tokio::time::timeout(common::DEADLINE, seen.recv())
            .await
            .expect("a job ran in time")
            .expect("the handler's channel");
        got.insert(report.0, report);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_in_a_producer_span_runs_in_a_consumer_span_linked_to_it() {
    let c = common::connect().await;
    let queue = common::unique("rs_trace_link");
    let cx = producer("enqueue");
    let sc = cx.span().span_context().clone();
    assert!(sc.is_valid(), "the SDK's producer span");
    let enqueued = workfence::enqueue(
        &c,
        &queue,
        &json!({"do": "ok"}),
        &EnqueueOptions::default().key("k"),
    )
    .with_context(cx.clone())
    .await
    .expect("enqueue");
    cx.span().end();
    assert_eq!(
        workfence::traceparent(&cx).as_deref(),
        Some(traceparent_of(&sc).as_str())
    );
    let (tx, mut seen) = mpsc::unbounded_channel();
    let worker = common::worker(&queue).build().expect("build");
    let (handle, task) = spawn(worker, reporting(tx));
    let report = reports(&mut seen, 1).await;
    common::wait_for_all(&c, &queue, "done", 1).await;
    stop(handle, task).await;

    let (_, trace, current) = &report[&enqueued.id];
    assert_eq!(
        trace.as_deref(),
        Some(traceparent_of(&sc).as_str()),
        "the item carries the producer span's traceparent"
    );
    let spans = consumer_spans(&queue);
    assert_eq!(spans.len(), 1, "one consumer span: {spans:?}");
    let span = &spans[&enqueued.id.to_string()];
    assert_eq!(span.span_kind, SpanKind::Consumer);
    assert_eq!(span.links.links.len(), 1, "one link");
    let link = &span.links.links[0];
    assert_eq!(link.span_context.trace_id(), sc.trace_id());
    assert_eq!(link.span_context.span_id(), sc.span_id());
    assert!(link.span_context.is_remote());
    // A trace of its own: a root span, not a child of the producer.
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    assert_ne!(span.span_context.trace_id(), sc.trace_id());
    // The handler ran in it: an enqueue from the handler would carry the consumer span.
    assert_eq!(current.span_id(), span.span_context.span_id());
    assert_eq!(current.trace_id(), span.span_context.trace_id());
    let (epoch, attempt): (i64, i32) = {
        let row = c
            .query_one(
                "SELECT epoch, attempts FROM workfence.items WHERE id = $1",
                &[&enqueued.id],
            )
            .await
            .expect("item");
        (row.get(0), row.get(1))
    };
    for want in [
        KeyValue::new("messaging.system", "pg_workfence"),
        KeyValue::new("messaging.destination.name", queue.clone()),
        KeyValue::new("messaging.message.id", enqueued.id.to_string()),
        KeyValue::new("workfence.epoch", epoch),
        KeyValue::new("workfence.attempt", i64::from(attempt)),
    ] {
        assert_eq!(
            attribute(span, want.key.as_str()),
            Some(&want.value),
            "attribute {}",
            want.key
        );
    }
    assert_eq!(
        span.status,
        Status::Unset,
        "a success leaves the status unset"
    );
    assert!(span.events.events.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_panicking_handler_sets_error_status_and_records_the_exception() {
    let c = common::connect().await;
    let queue = common::unique("rs_trace_fail");
    let cx = producer("enqueue failing");
    let mut ids = HashMap::new();
    for what in ["fail", "panic"] {
        let e = workfence::enqueue(
            &c,
            &queue,
            &json!({ "do": what }),
            &EnqueueOptions::default().key(what).max_attempts(1),
        )
        .with_context(cx.clone())
        .await
        .expect("enqueue");
        ids.insert(what, e.id);
    }
    cx.span().end();
    let (tx, mut seen) = mpsc::unbounded_channel();
    let worker = common::worker(&queue)
        .concurrency(2)
        .build()
        .expect("build");
    let (handle, task) = spawn(worker, reporting(tx));
    reports(&mut seen, 2).await;
    common::wait_for_all(&c, &queue, "failed", 2).await;
    stop(handle, task).await;

    let spans = consumer_spans(&queue);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let failed = &spans[&ids["fail"].to_string()];
    assert_eq!(
        failed.status,
        Status::error("the handler failed on purpose"),
        "an Err: error status with the error's first line"
    );
    let exception = failed
        .events
        .events
        .iter()
        .find(|e| e.name == "exception")
        .expect("an exception event");
    assert!(
        exception
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "exception.message"
                && kv.value.as_str() == "the handler failed on purpose"),
        "{exception:?}"
    );
    let panicked = &spans[&ids["panic"].to_string()];
    assert_eq!(
        panicked.status,
        Status::error("handler panicked: the handler panicked on purpose")
    );
    assert!(panicked.events.events.iter().any(|e| e.name == "exception"));
    for span in [failed, panicked] {
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(span.links.links.len(), 1);
        assert_eq!(
            span.links.links[0].span_context.span_id(),
            cx.span().span_context().span_id()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_trace_is_sent_unchanged_and_replace_takes_the_new_one() {
    let c = common::connect().await;
    let queue = common::unique("rs_trace_explicit");
    // Inside a producer span, the explicit trace wins.
    let cx = producer("enqueue explicit");
    let first = "00-11111111111111111111111111111111-2222222222222222-00";
    let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let third = "00-33333333333333333333333333333333-4444444444444444-01";
    let explicit = workfence::enqueue(
        &c,
        &queue,
        &json!({"do": "ok"}),
        &EnqueueOptions::default().key("explicit").trace(second),
    )
    .with_context(cx.clone())
    .await
    .expect("enqueue");
    cx.span().end();
    // replace takes the new call's trace along with the payload; keep leaves it.
    let mut replaced = None;
    for (trace, on_conflict) in [
        (first, OnConflict::Keep),
        (second, OnConflict::Replace),
        (third, OnConflict::Keep),
    ] {
        let e = workfence::enqueue(
            &c,
            &queue,
            &json!({"do": "ok"}),
            &EnqueueOptions::default()
                .key("replaced")
                .trace(trace)
                .on_conflict(on_conflict),
        )
        .await
        .expect("enqueue");
        replaced = Some(e.id);
    }
    let replaced = replaced.expect("enqueued");
    // A malformed traceparent is the server's 22023.
    let malformed = workfence::enqueue(
        &c,
        &queue,
        &json!({}),
        &EnqueueOptions::default()
            .key("malformed")
            .trace("00-not-a-trace-01"),
    )
    .await;
    match malformed {
        Err(Error::InvalidArgument(..)) => {}
        other => panic!("a malformed trace: {other:?}"),
    }
    let (tx, mut seen) = mpsc::unbounded_channel();
    let worker = common::worker(&queue).build().expect("build");
    let (handle, task) = spawn(worker, reporting(tx));
    let report = reports(&mut seen, 2).await;
    common::wait_for_all(&c, &queue, "done", 2).await;
    stop(handle, task).await;

    assert_eq!(report[&explicit.id].1.as_deref(), Some(second), "unchanged");
    assert_eq!(
        report[&replaced].1.as_deref(),
        Some(second),
        "replace took the second call's trace, keep left it"
    );
    let spans = consumer_spans(&queue);
    let span = &spans[&explicit.id.to_string()];
    let link = &span.links.links[0];
    assert_eq!(
        link.span_context.trace_id(),
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("hex")
    );
    assert_eq!(
        link.span_context.span_id(),
        SpanId::from_hex("b7ad6b7169203331").expect("hex")
    );
    assert!(link.span_context.is_sampled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_current_span_the_job_has_no_trace_and_its_span_no_link() {
    let c = common::connect().await;
    let queue = common::unique("rs_trace_none");
    exporter();
    assert!(!Context::current().span().span_context().is_valid());
    let e = workfence::enqueue(
        &c,
        &queue,
        &json!({"do": "ok"}),
        &EnqueueOptions::default().key("k"),
    )
    .await
    .expect("enqueue");
    let stored: Option<String> = c
        .query_one("SELECT trace FROM workfence.items WHERE id = $1", &[&e.id])
        .await
        .expect("item")
        .get(0);
    assert_eq!(stored, None);
    let (tx, mut seen) = mpsc::unbounded_channel();
    let worker = common::worker(&queue).build().expect("build");
    let (handle, task) = spawn(worker, reporting(tx));
    let report = reports(&mut seen, 1).await;
    common::wait_for_all(&c, &queue, "done", 1).await;
    stop(handle, task).await;

    assert_eq!(report[&e.id].1, None, "no trace");
    let spans = consumer_spans(&queue);
    let span = &spans[&e.id.to_string()];
    assert_eq!(span.span_kind, SpanKind::Consumer);
    assert!(span.links.links.is_empty(), "nothing to link to");
}
