//! Workflows (from 0.12.0, issue 37) through the crate: `EnqueueOptions::after` and
//! `on_parent_failure`, `Job::parent_results` and `workflow`: a fan-in whose step reads both
//! parents' results, a failed parent cancelling its waiting descendants, a step that runs anyway
//! and sees the failure, a stale token reading nothing, the errors, and a database before
//! workflows.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::{spawn, stop};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::Client;
use workfence::{EnqueueOptions, Error, Job, OnParentFailure, Outcome, WorkflowItem};

/// Enqueues `payload` with key `key` and `options`; returns the id.
async fn add(c: &Client, queue: &str, key: &str, payload: Value, options: EnqueueOptions) -> i64 {
    workfence::enqueue(c, queue, &payload, &options.key(key))
        .await
        .unwrap_or_else(|e| panic!("enqueue {key}: {e}"))
        .id
}

/// The item's outcome once it is done, failed or cancelled.
async fn finished(c: &Client, queue: &str, key: &str) -> Outcome {
    let outcome = workfence::await_result(c, queue, key, Duration::from_secs(20))
        .await
        .expect("await_result")
        .expect("the item exists");
    assert!(outcome.is_finished(), "{key} not finished: {outcome:?}");
    outcome
}

/// The rows of `workflow` as (id, depth, sorted parents), sorted.
fn graph(rows: &[WorkflowItem]) -> Vec<(i64, i32, Vec<i64>)> {
    let mut graph: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut parents = r.parents.clone();
            parents.sort_unstable();
            (r.id, r.depth, parents)
        })
        .collect();
    graph.sort_unstable();
    graph
}

/// An item id no item has (shard 16383's last id).
const NO_ITEM: i64 = i64::MAX;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_in_child_runs_after_both_parents_and_reads_their_results() {
    let c = common::connect().await;
    let queue = common::unique("wf_fan_in");
    let none = EnqueueOptions::default;
    let p1 = add(&c, &queue, "p1", json!({"n": 1}), none()).await;
    let p2 = add(&c, &queue, "p2", json!({"n": 2}), none()).await;
    let child = add(&c, &queue, "child", json!({}), none().after([p1, p2])).await;
    let waiting = workfence::item_by_id(&c, child).await.expect("item");
    assert_eq!(waiting.expect("exists").state, "waiting");
    // The graph, read from either end.
    let around_child = workfence::workflow(&c, child).await.expect("workflow");
    assert_eq!(
        graph(&around_child),
        graph(&[
            row(child, 0, vec![p1, p2]),
            row(p1, -1, vec![]),
            row(p2, -1, vec![])
        ])
    );
    let around_p1 = workfence::workflow(&c, p1).await.expect("workflow");
    assert_eq!(
        around_p1.iter().map(|r| r.depth).collect::<Vec<_>>(),
        [0, 1],
        "nearest first"
    );
    let mut seen_child = around_p1[1].clone();
    seen_child.parents.sort_unstable();
    assert_eq!(
        seen_child,
        WorkflowItem {
            id: child,
            queue: queue.clone(),
            key: "child".to_owned(),
            state: "waiting".to_owned(),
            depth: 1,
            parents: vec![p1, p2],
        }
    );
    assert_eq!(
        workfence::workflow(&c, NO_ITEM).await.expect("workflow"),
        []
    );

    type Seen = Vec<(String, Option<BTreeMap<i64, Value>>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let record = Arc::clone(&seen);
    let w = common::worker(&queue)
        .concurrency(2)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let record = Arc::clone(&record);
        async move {
            let results = job.parent_results().await?;
            let sum: i64 = results
                .iter()
                .flat_map(|r| r.values())
                .filter_map(|v| v["doubled"].as_i64())
                .sum();
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((job.key.clone(), results));
            if job.key == "child" {
                return Ok(Some(json!({ "sum": sum })));
            }
            let n = job.payload["n"].as_i64().ok_or("no n")?;
            Ok(Some(json!({ "doubled": n * 2 })))
        }
    });
    let outcome = finished(&c, &queue, "child").await;
    stop(handle, task).await;
    assert_eq!(outcome.state, "done");
    assert_eq!(outcome.result, Some(json!({"sum": 6})));
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut parents: Vec<_> = seen[..2].to_vec();
    parents.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        parents,
        [
            ("p1".to_owned(), Some(BTreeMap::new())),
            ("p2".to_owned(), Some(BTreeMap::new()))
        ],
        "the parents ran first, without parents of their own"
    );
    assert_eq!(
        seen[2..],
        [(
            "child".to_owned(),
            Some(BTreeMap::from([
                (p1, json!({"doubled": 2})),
                (p2, json!({"doubled": 4}))
            ]))
        )]
    );
    let states: Vec<_> = workfence::workflow(&c, child)
        .await
        .expect("workflow")
        .into_iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(states, ["done", "done", "done"]);
}

/// A row of `workflow`'s answer, for comparing graphs.
fn row(id: i64, depth: i32, parents: Vec<i64>) -> WorkflowItem {
    WorkflowItem {
        id,
        queue: String::new(),
        key: String::new(),
        state: String::new(),
        depth,
        parents,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_parent_cancels_its_waiting_descendants_by_default() {
    let c = common::connect().await;
    let queue = common::unique("wf_cancel");
    let none = EnqueueOptions::default;
    let parent = add(&c, &queue, "parent", json!({}), none().max_attempts(1)).await;
    let child = add(&c, &queue, "child", json!({}), none().after([parent])).await;
    let grandchild = add(&c, &queue, "grandchild", json!({}), none().after([child])).await;
    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&ran);
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        move |job: Job| {
            let record = Arc::clone(&record);
            async move {
                record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(job.key.clone());
                Err("boom".into())
            }
        },
    );
    let failed = finished(&c, &queue, "parent").await;
    let cancelled = finished(&c, &queue, "child").await;
    let also = finished(&c, &queue, "grandchild").await;
    stop(handle, task).await;
    assert_eq!(
        (failed.state.as_str(), failed.last_error.as_deref()),
        ("failed", Some("boom"))
    );
    assert_eq!(
        cancelled,
        Outcome {
            state: "cancelled".to_owned(),
            result: None,
            last_error: Some(format!("parent {parent} ended failed")),
        }
    );
    assert_eq!(
        also,
        Outcome {
            state: "cancelled".to_owned(),
            result: None,
            last_error: Some(format!("parent {child} ended cancelled")),
        }
    );
    assert_eq!(
        *ran.lock().unwrap_or_else(PoisonError::into_inner),
        ["parent"],
        "no descendant ran"
    );
    assert_eq!(
        graph(&workfence::workflow(&c, grandchild).await.expect("workflow")),
        graph(&[
            row(grandchild, 0, vec![child]),
            row(child, -1, vec![parent]),
            row(parent, -2, vec![])
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_parent_failure_run_the_child_runs_and_sees_the_failure() {
    let c = common::connect().await;
    let queue = common::unique("wf_run");
    let none = EnqueueOptions::default;
    let bad = add(
        &c,
        &queue,
        "bad",
        json!({"fail": true}),
        none().max_attempts(1),
    )
    .await;
    let good = add(&c, &queue, "good", json!({"fail": false}), none()).await;
    let run = none()
        .after([bad, good])
        .on_parent_failure(OnParentFailure::Run);
    add(&c, &queue, "child", json!({}), run).await;
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<Option<BTreeMap<i64, Value>>>();
    let w = common::worker(&queue)
        .concurrency(2)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let seen_tx = seen_tx.clone();
        async move {
            if job.key == "child" {
                seen_tx
                    .send(job.parent_results().await?)
                    .map_err(|e| e.to_string())?;
                return Ok(Some(json!("ran anyway")));
            }
            if job.payload["fail"] == json!(true) {
                return Err("boom".into());
            }
            Ok(Some(json!({"ok": true})))
        }
    });
    let outcome = finished(&c, &queue, "child").await;
    stop(handle, task).await;
    assert_eq!(
        (outcome.state.as_str(), outcome.result),
        ("done", Some(json!("ran anyway")))
    );
    let results = seen.recv().await.expect("the child ran").expect("current");
    assert_eq!(
        results,
        BTreeMap::from([
            (bad, json!({"state": "failed", "error": "boom"})),
            (good, json!({"ok": true})),
        ])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn parent_results_under_a_stale_token_is_none_and_cancels_the_job() {
    let capture = common::Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let c = common::connect().await;
    let queue = common::unique("wf_stale");
    let id = add(&c, &queue, "s", json!({}), EnqueueOptions::default()).await;
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<Option<BTreeMap<i64, Value>>>();
    let gate = Arc::new(Notify::new());
    let go = Arc::clone(&gate);
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        move |job: Job| {
            let (answers_tx, go) = (answers_tx.clone(), Arc::clone(&go));
            async move {
                // Current: no parents.
                answers_tx
                    .send(job.parent_results().await?)
                    .map_err(|e| e.to_string())?;
                go.notified().await;
                // The item was cancelled meanwhile.
                answers_tx
                    .send(job.parent_results().await?)
                    .map_err(|e| e.to_string())?;
                job.cancelled().await;
                Ok(None)
            }
        },
    );
    let first = tokio::time::timeout(common::DEADLINE, answers.recv())
        .await
        .expect("the first read")
        .expect("an answer");
    assert_eq!(first, Some(BTreeMap::new()));
    // An operator cancels the item: no notification comes, so it is the read that is refused.
    assert!(workfence::cancel(&c, &queue, "s").await.expect("cancel"));
    gate.notify_one();
    let stale = tokio::time::timeout(common::DEADLINE, answers.recv())
        .await
        .expect("the stale read")
        .expect("an answer");
    assert_eq!(stale, None, "a stale token reads nothing");
    common::wait_for("the item abandoned", || async {
        capture
            .lines()
            .contains(&format!("refused id={id} (lease lost)"))
            .then_some(())
    })
    .await;
    stop(handle, task).await;
    // The item's lines after its claim (whose line a test running beside this one may keep from
    // the capture: tracing caches a call site's interest across threads).
    let lines: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.contains(&format!("id={id}")) && !l.starts_with("claim "))
        .collect();
    assert_eq!(
        lines,
        [
            format!("parent_results id={id} refused"),
            format!("refused id={id} (lease lost)")
        ],
        "{:?}",
        capture.lines()
    );
}

#[tokio::test]
async fn enqueue_refuses_an_unknown_parent_and_an_existing_key_keeps_its_edges() {
    let c = common::connect().await;
    let queue = common::unique("wf_errors");
    let none = EnqueueOptions::default;
    let parent = add(&c, &queue, "p", json!({}), none()).await;
    let unknown = workfence::enqueue(
        &c,
        &queue,
        &json!({}),
        &none().key("c").after([parent, NO_ITEM]),
    )
    .await
    .expect_err("an unknown parent");
    assert!(matches!(unknown, Error::UnknownParent(..)), "{unknown:?}");
    assert_eq!(unknown.code(), Some("23503"));
    let server = unknown.server().expect("the server's error");
    assert_eq!(
        server.message,
        format!("parent item {NO_ITEM} does not exist")
    );
    assert!(server.hint.is_some());
    assert!(workfence::item(&c, &queue, "c")
        .await
        .expect("item")
        .is_none());
    // An existing key's after is ignored: the edges are made only at the insert.
    let plain = add(&c, &queue, "plain", json!({}), none()).await;
    let again = workfence::enqueue(
        &c,
        &queue,
        &json!({}),
        &none()
            .key("plain")
            .after([parent])
            .on_parent_failure(OnParentFailure::Cancel),
    )
    .await
    .expect("enqueue again");
    assert_eq!((again.id, again.inserted), (plain, false));
    assert_eq!(
        graph(&workfence::workflow(&c, plain).await.expect("workflow")),
        [(plain, 0, vec![])]
    );
}

#[tokio::test]
async fn a_database_before_workflows_takes_an_enqueue_without_after() {
    let db = common::old_database("workfence_rs_wf_0110", "0.11.0").await;
    let queue = common::unique("wf_0110");
    let none = EnqueueOptions::default;
    let plain = workfence::enqueue(&db.client, &queue, &json!({}), &none().key("a")).await;
    let with_after =
        workfence::enqueue(&db.client, &queue, &json!({}), &none().key("b").after([1])).await;
    let with_policy = workfence::enqueue(
        &db.client,
        &queue,
        &json!({}),
        &none().key("b").on_parent_failure(OnParentFailure::Run),
    )
    .await;
    let graph = workfence::workflow(&db.client, 1).await;
    db.remove().await;
    assert!(plain.expect("an enqueue without after on 0.11.0").inserted);
    // 0.11.0 has neither argument, nor work_workflow: 42883, undefined function.
    for (what, result) in [
        ("after", with_after.err()),
        ("on_parent_failure", with_policy.err()),
        ("workflow", graph.err()),
    ] {
        assert_eq!(
            result.expect(what).code(),
            Some("42883"),
            "{what} on 0.11.0"
        );
    }
}
