//! Trace context with the `otel` feature against a database older than 0.12.0, whose
//! `work_enqueue` takes no `trace` and whose claim rows have none: an enqueue inside a producer
//! span is served without it (the crate asks the database once whether it takes one), an
//! explicit trace is refused as any new argument is (42883), and the job runs in its consumer
//! span without a link. A binary of its own: what the crate learned about the database is kept
//! for the process.

mod common;

use std::time::Duration;

use opentelemetry::trace::{FutureExt, SpanKind, TraceContextExt, Tracer};
use opentelemetry::{global, Context};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use tokio::sync::mpsc;
use workfence::{EnqueueOptions, Job, Worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_older_than_0_12_0_is_served_without_a_trace() {
    let exporter = InMemorySpanExporter::default();
    global::set_tracer_provider(
        SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build(),
    );
    global::set_text_map_propagator(TraceContextPropagator::new());
    let db = common::old_database("workfence_rs_trace_0110", "0.11.0").await;
    let (old, dsn) = (&db.client, db.dsn.clone());
    let queue = common::unique("t_0110");
    let cx = Context::new().with_span(global::tracer("tests/producer").start("enqueue"));
    assert!(cx.span().span_context().is_valid());
    let traced = workfence::enqueue(
        old,
        &queue,
        &json!({"n": 1}),
        &EnqueueOptions::default().key("k"),
    )
    .with_context(cx.clone())
    .await;
    let explicit = workfence::enqueue(
        old,
        &queue,
        &json!({"n": 2}),
        &EnqueueOptions::default()
            .key("explicit")
            .trace("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    )
    .await;
    cx.span().end();
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<Option<String>>();
    let w = Worker::builder(dsn, &queue)
        .owner("tests/old")
        .poll_wait(Duration::from_secs(1))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let seen_tx = seen_tx.clone();
                async move {
                    seen_tx
                        .send(job.trace().map(str::to_owned))
                        .map_err(|e| e.to_string())?;
                    Ok(None)
                }
            },
            std::future::pending(),
        )
        .await
    });
    let ran = tokio::time::timeout(common::DEADLINE, seen.recv()).await;
    common::wait_for("k done", || async {
        let k = workfence::item(old, &queue, "k")
            .await
            .expect("item")
            .expect("exists");
        (k.state == "done").then_some(())
    })
    .await;
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
    db.remove().await;

    assert!(
        traced.expect("an enqueue in a span on 0.11.0").inserted,
        "served without the trace"
    );
    assert_eq!(
        explicit.expect_err("a trace on 0.11.0").code(),
        Some("42883"),
        "0.11.0's work_enqueue has no trace"
    );
    assert_eq!(ran.expect("the job ran").expect("seen"), None);
    let spans: Vec<_> = exporter
        .get_finished_spans()
        .expect("spans")
        .into_iter()
        .filter(|s| s.name == format!("process {queue}"))
        .collect();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].span_kind, SpanKind::Consumer);
    assert!(spans[0].links.links.is_empty());
}
