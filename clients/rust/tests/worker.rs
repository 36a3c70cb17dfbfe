//! The runner against a real database: jobs finished with the handler's value or through the
//! fenced transaction, failures with the retry policy or the server's backoff, a lost lease
//! (notified or a refused renew) cancelling the job and settling nothing, concurrency, and the
//! shutdown (long poll cancelled, buffer released, the grace, then cancel and release).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::{spawn, stop};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Barrier};
use workfence::{CancellationToken, EnqueueOptions, Error, Job, Limits, Worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_finished_with_the_handlers_value() {
    let c = common::connect().await;
    let queue = common::unique("w_values");
    common::enqueue_n(&c, &queue, 12, 25).await;
    let w = common::worker(&queue)
        .concurrency(2)
        .batch_size(3)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, |job: Job| async move {
        let n = job.payload["n"].as_i64().ok_or("no n")?;
        Ok(Some(
            json!({ "double": n * 2, "epoch": job.epoch, "attempt": job.attempt }),
        ))
    });
    common::wait_for_all(&c, &queue, "done", 12).await;
    stop(handle, task).await;
    for i in 1..=12 {
        let item = workfence::item(&c, &queue, &format!("k{i}"))
            .await
            .expect("item")
            .expect("exists");
        assert_eq!(
            item.result,
            Some(json!({ "double": i * 2, "epoch": item.epoch, "attempt": 1 })),
            "item k{i}"
        );
        assert_eq!(item.owner.as_deref(), Some("tests/shared-owner"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_transaction_commits_the_handlers_writes_with_the_finish() {
    let c = common::connect().await;
    let queue = common::unique("w_fenced");
    let table = common::unique("wf_results");
    // The table name is made here, not taken from input; identifiers cannot be parameters.
    c.batch_execute(&format!(
        "CREATE TABLE public.{table} (item_id bigint, epoch bigint, output bigint)"
    ))
    .await
    .expect("table");
    common::enqueue_n(&c, &queue, 5, 25).await;
    let insert = format!("INSERT INTO public.{table} (item_id, epoch, output) VALUES ($1, $2, $3)");
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        move |job: Job| {
            let insert = insert.clone();
            async move {
                let n = job.payload["n"].as_i64().ok_or("no n")?;
                let tx = job.transaction().await?;
                tx.execute(insert.as_str(), &[&job.id, &job.epoch, &(n * n)])
                    .await?;
                if n == 3 {
                    // Rolled back: the write is not kept, and the job goes on.
                    tx.rollback().await?;
                    let tx = job.transaction().await?;
                    tx.execute(insert.as_str(), &[&job.id, &job.epoch, &-1_i64])
                        .await?;
                    tx.finish(Some(json!({ "output": -1 }))).await?;
                } else {
                    tx.finish(Some(json!({ "output": n * n }))).await?;
                }
                Ok(None)
            }
        },
    );
    common::wait_for_all(&c, &queue, "done", 5).await;
    stop(handle, task).await;
    let rows = c
        .query(
            &format!(
                "SELECT i.key, r.output, r.epoch = i.epoch, i.result
                   FROM workfence.items AS i JOIN public.{table} AS r ON r.item_id = i.id
                  WHERE i.queue = $1 ORDER BY i.key"
            ),
            &[&queue],
        )
        .await
        .expect("rows");
    let got: Vec<(String, i64, bool, Value)> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get::<_, tokio_postgres::types::Json<Value>>(3).0,
            )
        })
        .collect();
    let want: Vec<(String, i64, bool, Value)> = (1..=5)
        .map(|n: i64| {
            let out = if n == 3 { -1 } else { n * n };
            (format!("k{n}"), out, true, json!({ "output": out }))
        })
        .collect();
    assert_eq!(
        got, want,
        "one row per item, under its final epoch, with the finish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_is_failed_with_its_error_and_the_retry_policys_delay() {
    let c = common::connect().await;
    let queue = common::unique("w_fail");
    common::enqueue_n(&c, &queue, 2, 2).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let w = common::worker(&queue)
        .retry(move |attempt, error| {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((attempt, error.to_string()));
            Some(Duration::from_millis(100))
        })
        .build()
        .expect("build");
    let (handle, task) = spawn(w, |job: Job| async move {
        if job.payload["n"] == json!(1) {
            return Err(format!("boom {}", job.attempt).into());
        }
        panic!("kaput {}", job.attempt);
    });
    common::wait_for_all(&c, &queue, "failed", 2).await;
    stop(handle, task).await;
    let k1 = workfence::item(&c, &queue, "k1")
        .await
        .expect("item")
        .expect("exists");
    let errors: Vec<Value> = k1
        .errors
        .expect("errors")
        .as_array()
        .expect("array")
        .clone();
    let texts: Vec<&str> = errors
        .iter()
        .map(|e| e["error"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts, ["boom 1", "boom 2"]);
    let k2 = workfence::item(&c, &queue, "k2")
        .await
        .expect("item")
        .expect("exists");
    let last = k2.errors.expect("errors")[1]["error"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(last.starts_with("handler panicked: kaput 2"), "{last}");
    let mut asked = asked.lock().unwrap_or_else(PoisonError::into_inner).clone();
    asked.sort();
    assert!(
        asked.contains(&(1, "boom 1".to_owned())) && asked.contains(&(2, "boom 2".to_owned())),
        "{asked:?}"
    );
}

/// A handler's error with a type and a cause.
#[derive(Debug, thiserror::Error)]
enum InvoiceError {
    #[error("invoice {id} could not be read")]
    Unreadable {
        id: i64,
        #[source]
        cause: std::io::Error,
    },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_stored_with_its_type_and_its_causes() {
    let c = common::connect().await;
    let queue = common::unique("w_error_text");
    common::enqueue_n(&c, &queue, 2, 1).await;
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        |job: Job| async move {
            if job.key == "k1" {
                return Err(InvoiceError::Unreadable {
                    id: 7,
                    cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                }
                .into());
            }
            // Longer than a line may be.
            Err::<Option<Value>, _>("x".repeat(5000).into())
        },
    );
    common::wait_for_all(&c, &queue, "failed", 2).await;
    stop(handle, task).await;
    let k1 = workfence::item(&c, &queue, "k1")
        .await
        .expect("item")
        .expect("exists");
    let want = "Unreadable: invoice 7 could not be read\n\
                caused by: std::io::Error(NotFound): no such file";
    assert_eq!(k1.errors.expect("errors")[0]["error"], json!(want));
    let last_error: String = c
        .query_one(
            "SELECT last_error FROM workfence.items WHERE id = $1",
            &[&k1.id],
        )
        .await
        .expect("last_error")
        .get(0);
    assert_eq!(last_error, want);
    let k2 = workfence::item(&c, &queue, "k2")
        .await
        .expect("item")
        .expect("exists");
    let stored = k2.errors.expect("errors")[0]["error"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    // A line is cut at 1024 bytes by the runner (the text within the server's 2048).
    assert_eq!(stored, format!("{}...", "x".repeat(1021)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_retry_policy_the_server_backs_off() {
    let c = common::connect().await;
    let queue = common::unique("w_backoff");
    common::enqueue_n(&c, &queue, 1, 5).await;
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        |_job: Job| async move { Err::<Option<Value>, _>("no".into()) },
    );
    let item = common::wait_for("the first failure", || async {
        let item = workfence::item(&c, &queue, "k1")
            .await
            .expect("item")
            .expect("exists");
        (item.state == "pending" && item.attempts == 1).then_some(item)
    })
    .await;
    stop(handle, task).await;
    // The server's backoff after attempt 1 is 2^1/2..2^1 s: run_at at least 1 s after the
    // failure's record (a retry policy of 0 or a NULL retry_in would make it due at once).
    let delay: f64 = c
        .query_one(
            "SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::float8
               FROM workfence.items WHERE id = $1",
            &[&item.id],
        )
        .await
        .expect("delay")
        .get(0);
    assert!(
        (0.9..=2.1).contains(&delay),
        "backoff of {delay} s after attempt 1"
    );
}

/// Takes one claimed job's cancellation token from the handler (which then waits forever,
/// cancelled only by the runner) and, with `stop_renewing`, turns its heartbeat off.
fn parked(
    stop_renewing: bool,
) -> (
    mpsc::UnboundedReceiver<(i64, i64, CancellationToken)>,
    impl workfence::Handler,
) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let sender = sender.clone();
        async move {
            if job.payload.get("park").is_none() {
                return Ok(Some(json!("quick")));
            }
            if stop_renewing {
                job.stop_renewing();
            }
            sender
                .send((job.id, job.epoch, job.cancellation_token()))
                .map_err(|e| e.to_string())?;
            std::future::pending::<()>().await;
            Ok(None)
        }
    };
    (receiver, handler)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_notification_cancels_the_job_and_nothing_is_settled() {
    let c = common::connect().await;
    let queue = common::unique("w_notified");
    workfence::enqueue(
        &c,
        &queue,
        &json!({"park": true}),
        &EnqueueOptions::default().key("stalled"),
    )
    .await
    .expect("enqueue");
    let (mut parked_jobs, handler) = parked(true);
    let w = common::worker(&queue)
        .lease(Duration::from_secs(1))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, handler);
    let (id, epoch, token) = tokio::time::timeout(common::DEADLINE, parked_jobs.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    // Its lease lapses (no renews), then another claim under the SAME owner name takes it.
    common::wait_lease_lapsed(&c, id).await;
    let ours = c
        .query_one(
            "SELECT id, epoch FROM workfence.work_claim($1, 'tests/shared-owner', interval '1 minute')",
            &[&queue],
        )
        .await
        .expect("re-claim");
    let (our_id, our_epoch): (i64, i64) = (ours.get(0), ours.get(1));
    assert_eq!(our_id, id);
    assert!(our_epoch > epoch);
    let reclaimed = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("the job is cancelled within 5 s of the re-claim");
    assert!(reclaimed.elapsed() < Duration::from_secs(5));
    // The worker goes on serving: it finishes the next item.
    workfence::enqueue(
        &c,
        &queue,
        &json!({}),
        &EnqueueOptions::default().key("next"),
    )
    .await
    .expect("enqueue");
    common::wait_for("the next item done", || async {
        let item = workfence::item(&c, &queue, "next")
            .await
            .expect("item")
            .expect("exists");
        (item.state == "done").then_some(())
    })
    .await;
    stop(handle, task).await;
    // The stalled item is still the test's claim: no finish, fail or release came for it.
    let stalled = workfence::item(&c, &queue, "stalled")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!(
        (stalled.state.as_str(), stalled.epoch),
        ("claimed", Some(our_epoch))
    );
    let errors = stalled.errors.unwrap_or(json!([]));
    assert!(
        errors.as_array().is_some_and(|e| e
            .iter()
            .all(|e| !e["error"].as_str().unwrap_or("").contains("fail"))),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renew_cancels_the_job() {
    let c = common::connect().await;
    let queue = common::unique("w_refused");
    workfence::enqueue(
        &c,
        &queue,
        &json!({"park": true}),
        &EnqueueOptions::default().key("k"),
    )
    .await
    .expect("enqueue");
    let (mut parked_jobs, handler) = parked(false);
    let w = common::worker(&queue)
        .lease(Duration::from_millis(1500))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, handler);
    let (_, _, token) = tokio::time::timeout(common::DEADLINE, parked_jobs.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    // Cancelled by an operator: the token is dead, the next renew (every 0.5 s) is refused.
    assert!(workfence::cancel(&c, &queue, "k").await.expect("cancel"));
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("the job is cancelled after a refused renew");
    stop(handle, task).await;
    let item = workfence::item(&c, &queue, "k")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!(item.state, "cancelled");
    assert_eq!(
        item.errors.unwrap_or(json!([])),
        json!([]),
        "no work_fail for a lost lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_for_a_dead_token_is_lease_lost_and_nothing_is_written() {
    let c = Arc::new(common::connect().await);
    let queue = common::unique("w_dead");
    common::enqueue_n(&c, &queue, 1, 3).await;
    let (sender, mut outcomes) = mpsc::unbounded_channel();
    let (side, q) = (Arc::clone(&c), queue.clone());
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        move |job: Job| {
            let (side, q, sender) = (Arc::clone(&side), q.clone(), sender.clone());
            async move {
                // The operator cancels the item while the job runs (before any renew).
                workfence::cancel(&*side, &q, &job.key).await?;
                let outcome = job.transaction().await.map(|_| ());
                let lost =
                    matches!(&outcome, Err(e) if e.is_lease_lost() && e.code() == Some("55000"));
                sender.send(lost).map_err(|e| e.to_string())?;
                outcome?;
                Ok(Some(json!("unreachable")))
            }
        },
    );
    let lost = tokio::time::timeout(common::DEADLINE, outcomes.recv())
        .await
        .expect("the handler ran")
        .expect("an outcome");
    assert!(
        lost,
        "job.transaction() for a cancelled item is Error::LeaseLost (55000)"
    );
    stop(handle, task).await;
    let item = workfence::item(&*c, &queue, "k1")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!((item.state.as_str(), item.result), ("cancelled", None));
    assert_eq!(
        item.errors.unwrap_or(json!([])),
        json!([]),
        "the runner does not fail a lost item"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_run_at_once_up_to_concurrency() {
    let c = common::connect().await;
    let queue = common::unique("w_concurrency");
    common::enqueue_n(&c, &queue, 3, 1).await;
    let barrier = Arc::new(Barrier::new(3));
    let w = common::worker(&queue)
        .concurrency(3)
        .batch_size(1)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |_job: Job| {
        let barrier = Arc::clone(&barrier);
        async move {
            // Passes only when three handlers wait here at the same time.
            tokio::time::timeout(Duration::from_secs(20), barrier.wait())
                .await
                .map_err(|_| "fewer than three handlers ran at once")?;
            Ok(None)
        }
    });
    common::wait_for_all(&c, &queue, "done", 3).await;
    stop(handle, task).await;
}

/// The state and attempts of item `id`.
async fn state_of(c: &tokio_postgres::Client, id: i64) -> (String, i32) {
    let item = workfence::item_by_id(c, id)
        .await
        .expect("item")
        .expect("exists");
    (item.state, item.attempts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_items_are_handed_out_one_at_a_time_in_order() {
    let c = common::connect().await;
    let queue = common::unique("w_group");
    let grouped = EnqueueOptions::default().group_key("customer-42");
    let first = workfence::enqueue(&c, &queue, &json!({"n": 1}), &grouped)
        .await
        .expect("first");
    let second = workfence::enqueue(&c, &queue, &json!({"n": 2}), &grouped)
        .await
        .expect("second");
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let in_group = Arc::new(AtomicUsize::new(0));
    let most_in_group = Arc::new(AtomicUsize::new(0));
    let first_running = CancellationToken::new();
    let let_first_go = CancellationToken::new();
    let w = common::worker(&queue)
        .concurrency(4)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, {
        let (events, in_group, most_in_group) = (
            Arc::clone(&events),
            Arc::clone(&in_group),
            Arc::clone(&most_in_group),
        );
        let (first_running, let_first_go) = (first_running.clone(), let_first_go.clone());
        move |job: Job| {
            let (events, in_group, most_in_group) = (
                Arc::clone(&events),
                Arc::clone(&in_group),
                Arc::clone(&most_in_group),
            );
            let (first_running, let_first_go) = (first_running.clone(), let_first_go.clone());
            async move {
                let Some(n) = job.payload["n"].as_i64() else {
                    return Ok(None); // the ungrouped probe below
                };
                let now = in_group.fetch_add(1, Ordering::SeqCst) + 1;
                most_in_group.fetch_max(now, Ordering::SeqCst);
                let log = |line: String| {
                    events
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line)
                };
                log(format!("start {n}"));
                if job.id == first.id {
                    first_running.cancel();
                    let_first_go.cancelled().await;
                }
                log(format!("end {n}"));
                in_group.fetch_sub(1, Ordering::SeqCst);
                Ok(None)
            }
        }
    });
    tokio::time::timeout(common::DEADLINE, first_running.cancelled())
        .await
        .expect("the group's first item running");
    // An ungrouped item enqueued after the second: the worker (room for three more) claims it,
    // and a claim handing it out would have handed out the second first (claim order), had its
    // group not held it back.
    let probe = workfence::enqueue(&c, &queue, &json!({"probe": true}), &Default::default())
        .await
        .expect("probe");
    common::wait_for("the ungrouped item done meanwhile", || async {
        (state_of(&c, probe.id).await.0 == "done").then_some(())
    })
    .await;
    assert_eq!(
        state_of(&c, second.id).await,
        ("pending".to_owned(), 0),
        "the second item waits for the first"
    );
    let_first_go.cancel();
    common::wait_for("the second item done", || async {
        (state_of(&c, second.id).await.0 == "done").then_some(())
    })
    .await;
    stop(handle, task).await;
    assert_eq!(
        *events.lock().unwrap_or_else(PoisonError::into_inner),
        ["start 1", "end 1", "start 2", "end 2"]
    );
    assert_eq!(most_in_group.load(Ordering::SeqCst), 1);
    let a = workfence::item_by_id(&c, first.id).await.expect("a");
    let b = workfence::item_by_id(&c, second.id).await.expect("b");
    let (finished, claimed) = (
        a.and_then(|a| a.finished_at).expect("first finished_at"),
        b.and_then(|b| b.claimed_at).expect("second claimed_at"),
    );
    assert!(
        claimed >= finished,
        "the server claimed the second after the first finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_caps_a_worker_of_concurrency_4_at_one_job_at_a_time() {
    let c = common::connect().await;
    let queue = common::unique("w_limit");
    workfence::limit(&c, &queue, &Limits::default().concurrency(1))
        .await
        .expect("limit");
    common::enqueue_n(&c, &queue, 4, 25).await;
    let active = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let pair_arrived = Arc::new(AtomicUsize::new(0));
    let pair_together = CancellationToken::new();
    let w = common::worker(&queue)
        .concurrency(4)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, {
        let (active, most, pair_arrived) = (
            Arc::clone(&active),
            Arc::clone(&most),
            Arc::clone(&pair_arrived),
        );
        let pair_together = pair_together.clone();
        move |job: Job| {
            let (active, most, pair_arrived) = (
                Arc::clone(&active),
                Arc::clone(&most),
                Arc::clone(&pair_arrived),
            );
            let pair_together = pair_together.clone();
            async move {
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if job.payload["pair"] == json!(true) {
                    // After the limit is lifted: each of two items waits for the other to run.
                    if pair_arrived.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                        pair_together.cancel();
                    }
                    pair_together.cancelled().await;
                } else {
                    // Holds the job, so that the others would overlap it.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                active.fetch_sub(1, Ordering::SeqCst);
                Ok(None)
            }
        }
    });
    common::wait_for_all(&c, &queue, "done", 4).await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one job at a time under concurrency 1"
    );
    // The same worker runs the queue's items side by side once the limit is lifted.
    workfence::limit(&c, &queue, &Limits::default())
        .await
        .expect("lift");
    for key in ["p1", "p2"] {
        let options = EnqueueOptions::default().key(key);
        workfence::enqueue(&c, &queue, &json!({"pair": true}), &options)
            .await
            .expect("pair");
    }
    common::wait_for_all(&c, &queue, "done", 6).await;
    stop(handle, task).await;
    assert_eq!(most.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_an_idle_long_poll_at_once() {
    let queue = common::unique("w_idle");
    let w = common::worker(&queue)
        .poll_wait(Duration::from_secs(60))
        .build()
        .expect("build");
    let c = common::connect().await;
    let (handle, task) = spawn(w, |_job: Job| async move { Ok(None) });
    // Wait until the long poll is in the server.
    common::wait_for("the long poll", || async {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%work_claim%' AND state = 'active' AND pid <> pg_backend_pid() AND application_name = 'workfence claim'",
                &[],
            )
            .await
            .expect("activity")
            .get(0);
        (n >= 1).then_some(())
    })
    .await;
    let asked = Instant::now();
    stop(handle, task).await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "took {:?}",
        asked.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_the_buffer_and_after_the_grace_the_running_job() {
    let c = common::connect().await;
    let queue = common::unique("w_release");
    for i in 1..=3 {
        workfence::enqueue(
            &c,
            &queue,
            &json!({"park": true}),
            &EnqueueOptions::default().key(format!("k{i}")),
        )
        .await
        .expect("enqueue");
    }
    let (mut parked_jobs, handler) = parked(false);
    let w = common::worker(&queue)
        .batch_size(3)
        .shutdown_grace(Duration::from_millis(300))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, handler);
    let (_, _, token) = tokio::time::timeout(common::DEADLINE, parked_jobs.recv())
        .await
        .expect("a job starts")
        .expect("a job");
    assert_eq!(
        common::states(&c, &queue).await,
        [("claimed".to_owned(), 3)],
        "one running, two buffered"
    );
    stop(handle, task).await;
    assert!(
        token.is_cancelled(),
        "the running job was cancelled after the grace"
    );
    assert_eq!(
        common::states(&c, &queue).await,
        [("pending".to_owned(), 3)],
        "all released"
    );
    let attempts: Vec<i32> = c
        .query(
            "SELECT attempts FROM workfence.items WHERE queue = $1",
            &[&queue],
        )
        .await
        .expect("attempts")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(attempts, [0, 0, 0], "a release gives the attempt back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ends_within_the_grace_is_finished() {
    let c = common::connect().await;
    let queue = common::unique("w_grace");
    common::enqueue_n(&c, &queue, 1, 3).await;
    let (started_tx, started) = oneshot::channel::<()>();
    let (go, go_rx) = oneshot::channel::<()>();
    let slots = Arc::new(Mutex::new((Some(started_tx), Some(go_rx))));
    let w = common::worker(&queue)
        .shutdown_grace(Duration::from_secs(20))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |_job: Job| {
        let (started_tx, go_rx) = {
            let mut slots = slots.lock().unwrap_or_else(PoisonError::into_inner);
            (slots.0.take(), slots.1.take())
        };
        async move {
            started_tx
                .ok_or("one job only")?
                .send(())
                .map_err(|()| "test gone")?;
            go_rx
                .ok_or("one job only")?
                .await
                .map_err(|e| e.to_string())?;
            Ok(Some(json!("finished in the grace")))
        }
    });
    tokio::time::timeout(common::DEADLINE, started)
        .await
        .expect("the job starts")
        .expect("started");
    handle.stop();
    // Stopped, but the job still runs: the item is still claimed.
    assert!(!task.is_finished());
    go.send(()).expect("the job waits");
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns")
        .expect("task")
        .expect("run Ok");
    let item = workfence::item(&c, &queue, "k1")
        .await
        .expect("item")
        .expect("exists");
    assert_eq!(
        (item.state.as_str(), item.result),
        ("done", Some(json!("finished in the grace")))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_owner_is_refused_before_connecting_and_a_bad_dsn_fails_run() {
    let queue = common::unique("w_config");
    assert!(matches!(
        Worker::builder(common::dsn(), &queue)
            .owner("bad\nowner")
            .build(),
        Err(Error::Config { name: "owner", .. })
    ));
    let w = Worker::builder(
        "host=127.0.0.1 port=1 user=nobody connect_timeout=2",
        &queue,
    )
    .build()
    .expect("build");
    let result = w
        .run(|_job: Job| async move { Ok(None) }, std::future::pending())
        .await;
    assert!(matches!(result, Err(Error::Connection(_))), "{result:?}");
}
