//! A job's whole life (from 0.12.0) through the crate: `on_conflict` (debounce, throttle, a
//! finished item run again, a claimed one run exactly once more), checkpoints that survive a
//! retry and a stale copy cannot overwrite, `await_result` woken by the finish or ending at its
//! timeout with the last state, the fencing token, and a database older than 0.12.0 still
//! served without the new arguments and columns.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use common::{spawn, stop};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{Client, NoTls};
use workfence::{CancellationToken, EnqueueOptions, Error, Job, OnConflict, Worker};

/// The item of `queue` with `key`.
async fn item(c: &Client, queue: &str, key: &str) -> workfence::Item {
    workfence::item(c, queue, key)
        .await
        .expect("item")
        .expect("exists")
}

/// Waits until item `key` is done; returns it.
async fn done(c: &Client, queue: &str, key: &str) -> workfence::Item {
    common::wait_for(&format!("{key} done"), || async {
        let item = item(c, queue, key).await;
        (item.state == "done").then_some(item)
    })
    .await
}

/// Whether two times are the same to the server's precision (a microsecond).
fn same_time(a: SystemTime, b: SystemTime) -> bool {
    let d = a.duration_since(b).unwrap_or_else(|e| e.duration());
    d < Duration::from_millis(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_debounced_enqueues_leave_one_item_with_the_last_payload_that_runs_once() {
    let c = common::connect().await;
    let queue = common::unique("l_debounce");
    // The debounce window: an hour from now, moved to now once the enqueues are done.
    let later = SystemTime::now() + Duration::from_secs(3600);
    let mut ids = HashSet::new();
    let mut inserted = Vec::new();
    for n in 1..=50 {
        let e = workfence::enqueue(
            &c,
            &queue,
            &json!({ "n": n }),
            &EnqueueOptions::default()
                .key("d")
                .run_at(later)
                .on_conflict(OnConflict::Replace),
        )
        .await
        .expect("enqueue");
        ids.insert(e.id);
        inserted.push(e.inserted);
    }
    assert_eq!(ids.len(), 1, "one item");
    assert!(inserted[0], "inserted by the first");
    assert!(
        inserted[1..].iter().all(|i| !i),
        "inserted only by the first"
    );
    let pending = item(&c, &queue, "d").await;
    assert_eq!(pending.state, "pending");
    assert_eq!(pending.payload, json!({ "n": 50 }), "the last payload");
    assert!(same_time(pending.run_at, later), "the last run_at");
    assert!(workfence::reschedule_in(&c, &queue, "d", Duration::ZERO)
        .await
        .expect("due now"));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&runs);
    let (handle, task) = spawn(
        common::worker(&queue).build().expect("build"),
        move |job: Job| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(job.payload.clone());
                Ok(Some(job.payload))
            }
        },
    );
    let d = done(&c, &queue, "d").await;
    stop(handle, task).await;
    assert_eq!(d.result, Some(json!({ "n": 50 })));
    assert_eq!(
        *runs.lock().unwrap_or_else(PoisonError::into_inner),
        [json!({ "n": 50 })],
        "run once"
    );
}

#[tokio::test]
async fn throttle_keeps_the_run_at_keep_changes_nothing_and_replace_moves_it() {
    let c = common::connect().await;
    let queue = common::unique("l_throttle");
    let first = SystemTime::now() + Duration::from_secs(3600);
    let enqueue = |n: i32, run_at: Option<SystemTime>, on_conflict: Option<OnConflict>| {
        let mut options = EnqueueOptions::default().key("t");
        options.run_at = run_at;
        options.on_conflict = on_conflict;
        let (c, queue) = (&c, &queue);
        async move {
            workfence::enqueue(c, queue, &json!({ "n": n }), &options)
                .await
                .expect("enqueue")
        }
    };
    assert!(enqueue(1, Some(first), None).await.inserted);
    let throttled = enqueue(
        2,
        Some(first + Duration::from_secs(3600)),
        Some(OnConflict::PreserveRunAt),
    )
    .await;
    assert!(!throttled.inserted);
    let t = item(&c, &queue, "t").await;
    assert_eq!(t.payload, json!({ "n": 2 }), "the new payload");
    assert!(same_time(t.run_at, first), "the run_at kept");
    for on_conflict in [Some(OnConflict::Keep), None] {
        assert!(!enqueue(3, None, on_conflict).await.inserted);
        assert_eq!(
            item(&c, &queue, "t").await.payload,
            json!({ "n": 2 }),
            "{on_conflict:?}: unchanged"
        );
    }
    let before = SystemTime::now();
    assert!(!enqueue(4, None, Some(OnConflict::Replace)).await.inserted);
    let t = item(&c, &queue, "t").await;
    assert_eq!(t.payload, json!({ "n": 4 }));
    assert!(
        t.run_at < before + Duration::from_secs(60),
        "replace without a run_at: due now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_runs_a_finished_item_again_and_a_claimed_one_exactly_once_more() {
    let c = common::connect().await;
    let queue = common::unique("l_rerun");
    // Each run: (payload's n, started, ended) in order, and a gate the test opens for n = 2.
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let gate = Arc::new(Notify::new());
    let (started_tx, mut started) = mpsc::unbounded_channel::<i64>();
    let (seen, go) = (Arc::clone(&events), Arc::clone(&gate));
    let w = common::worker(&queue)
        .concurrency(2)
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let (seen, go, started_tx) = (Arc::clone(&seen), Arc::clone(&go), started_tx.clone());
        async move {
            let n = job.payload["n"].as_i64().ok_or("no n")?;
            let log = |what: &str| {
                seen.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!("{what} {n}"));
            };
            log("start");
            started_tx.send(n).map_err(|e| e.to_string())?;
            if n == 2 {
                go.notified().await;
            }
            log("end");
            Ok(Some(json!({ "saw": n, "attempt": job.attempt })))
        }
    });
    let replace = EnqueueOptions::default()
        .key("r")
        .on_conflict(OnConflict::Replace);
    // A finished item runs again.
    workfence::enqueue(&c, &queue, &json!({"n": 1}), &replace)
        .await
        .expect("enqueue");
    assert_eq!(
        done(&c, &queue, "r").await.result,
        Some(json!({"saw": 1, "attempt": 1}))
    );
    let again = workfence::enqueue(&c, &queue, &json!({"n": 2}), &replace)
        .await
        .expect("enqueue again");
    assert!(!again.inserted);
    // (Its run parks at the gate: claimed, with payload n = 2 in hand.)
    let n = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("a run")
        .expect("n");
    assert_eq!(n, 1, "the first run started");
    let n = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("a second run")
        .expect("n");
    assert_eq!(n, 2, "the finished item ran again with the new payload");
    let claimed = item(&c, &queue, "r").await;
    assert_eq!(
        (claimed.state.as_str(), claimed.attempts),
        ("claimed", 1),
        "attempts afresh"
    );
    // Replaced while claimed: the payload changes at once, the holder keeps its run.
    let during = workfence::enqueue(&c, &queue, &json!({"n": 3}), &replace)
        .await
        .expect("enqueue while claimed");
    assert!(!during.inserted);
    let claimed = item(&c, &queue, "r").await;
    assert_eq!(claimed.state, "claimed");
    assert_eq!(claimed.payload, json!({"n": 3}));
    gate.notify_one();
    let n = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("one more run")
        .expect("n");
    assert_eq!(n, 3, "exactly once more, with the new payload");
    let last = done(&c, &queue, "r").await;
    assert_eq!(last.result, Some(json!({"saw": 3, "attempt": 1})));
    stop(handle, task).await;
    assert_eq!(
        *events.lock().unwrap_or_else(PoisonError::into_inner),
        ["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"],
        "one run at a time, none more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_resumes_from_its_checkpoint() {
    let c = common::connect().await;
    let queue = common::unique("l_checkpoint");
    workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default().key("p"))
        .await
        .expect("enqueue");
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<(i32, Option<Value>, String)>();
    let w = common::worker(&queue)
        .retry(|_, _| Some(Duration::ZERO))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let seen_tx = seen_tx.clone();
        async move {
            seen_tx
                .send((job.attempt, job.checkpoint().cloned(), job.fencing_token()))
                .map_err(|e| e.to_string())?;
            if job.attempt == 1 {
                for step in [1, 2] {
                    if !job.progress(&json!({ "step": step })).await? {
                        return Err(format!("progress {step} refused").into());
                    }
                }
                return Err("crashed after step 2".into());
            }
            let tx = job.transaction().await?;
            // Outside the open transaction it would wait for the transaction's own row lock.
            match job.progress(&json!({"step": 0})).await {
                Err(Error::Config {
                    name: "progress", ..
                }) => {}
                other => return Err(format!("job.progress in a transaction: {other:?}").into()),
            }
            if !tx.progress(&json!({"step": 3})).await? {
                return Err("progress 3 refused".into());
            }
            tx.finish(Some(json!({"resumed_from": job.checkpoint()})))
                .await?;
            Ok(None)
        }
    });
    let p = done(&c, &queue, "p").await;
    stop(handle, task).await;
    let (a1, c1, t1) = seen.recv().await.expect("attempt 1");
    let (a2, c2, t2) = seen.recv().await.expect("attempt 2");
    assert_eq!((a1, c1), (1, None), "no checkpoint on a first attempt");
    assert_eq!(
        (a2, c2),
        (2, Some(json!({"step": 2}))),
        "the last checkpoint"
    );
    assert_eq!(t2, format!("{}:{}", p.id, p.epoch.expect("epoch")));
    assert_ne!(t1, t2, "each attempt has its own fencing token");
    assert_eq!(p.result, Some(json!({"resumed_from": {"step": 2}})));
    assert_eq!(
        p.progress,
        Some(json!({"step": 3})),
        "committed with the transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_progress_changes_nothing_and_cancels_the_job() {
    let c = common::connect().await;
    let queue = common::unique("l_stale");
    workfence::enqueue(&c, &queue, &json!({}), &EnqueueOptions::default().key("s"))
        .await
        .expect("enqueue");
    let (started_tx, mut started) = mpsc::unbounded_channel::<(i64, i64, CancellationToken)>();
    let (stored_tx, mut stored) = mpsc::unbounded_channel::<bool>();
    let gate = Arc::new(Notify::new());
    let go = Arc::clone(&gate);
    let w = common::worker(&queue)
        .lease(Duration::from_secs(1))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let (started_tx, stored_tx, go) = (started_tx.clone(), stored_tx.clone(), Arc::clone(&go));
        async move {
            job.stop_renewing();
            started_tx
                .send((job.id, job.epoch, job.cancellation_token()))
                .map_err(|e| e.to_string())?;
            go.notified().await;
            let written = job.progress(&json!({"by": "stale"})).await?;
            stored_tx.send(written).map_err(|e| e.to_string())?;
            job.cancelled().await;
            Ok(None)
        }
    });
    let (id, epoch, token) = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    common::wait_lease_lapsed(&c, id).await;
    // Claimed anew without a notification, so that only the refusal tells the stale job.
    c.batch_execute("SET workfence.notify_lease_lost = off")
        .await
        .expect("no notification");
    let row = c
        .query_one(
            "SELECT id, epoch, progress FROM workfence.work_claim($1, 'tests/shared-owner', interval '1 minute')",
            &[&queue],
        )
        .await
        .expect("claim anew");
    let new_epoch: i64 = row.get(1);
    assert!(new_epoch > epoch);
    let written: bool = c
        .query_one(
            "SELECT workfence.work_progress($1, 'tests/shared-owner', $2, '{\"by\": \"new\"}')",
            &[&id, &new_epoch],
        )
        .await
        .expect("progress")
        .get(0);
    assert!(written);
    gate.notify_one();
    let stale = tokio::time::timeout(common::DEADLINE, stored.recv())
        .await
        .expect("the stale progress")
        .expect("an answer");
    assert!(!stale, "a stale progress is refused");
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("a refused progress cancels the job");
    assert_eq!(
        item(&c, &queue, "s").await.progress,
        Some(json!({"by": "new"})),
        "the newer checkpoint stays"
    );
    stop(handle, task).await;
    // The next claim hands the checkpoint on.
    let finished: bool = c
        .query_one(
            "SELECT workfence.work_fail($1, 'tests/shared-owner', $2, 'again', retry_in => interval '0')",
            &[&id, &new_epoch],
        )
        .await
        .expect("fail")
        .get(0);
    assert!(finished);
    let again = c
        .query_one(
            "SELECT progress FROM workfence.work_claim_key($1, 's', 'tests/shared-owner', interval '1 minute')",
            &[&queue],
        )
        .await
        .expect("claim again");
    let progress: Option<tokio_postgres::types::Json<Value>> = again.get(0);
    assert_eq!(progress.map(|p| p.0), Some(json!({"by": "new"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_result_is_woken_by_the_finish_and_times_out_with_the_last_state() {
    let c = common::connect().await;
    let queue = common::unique("l_await");
    let name = common::unique("wfa");
    let owner = "tests/await";
    assert_eq!(
        workfence::await_result(&c, &queue, "nope", Duration::ZERO)
            .await
            .expect("await"),
        None,
        "no such item"
    );
    for key in ["a", "b", "c"] {
        workfence::enqueue(
            &c,
            &queue,
            &json!({}),
            &EnqueueOptions::default().key(key).max_attempts(1),
        )
        .await
        .expect("enqueue");
    }
    // A short timeout: the last state.
    let asked = Instant::now();
    let pending = workfence::await_result(&c, &queue, "a", Duration::from_millis(300))
        .await
        .expect("await")
        .expect("exists");
    assert!(asked.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        (
            pending.state.as_str(),
            pending.result.as_ref(),
            pending.is_finished()
        ),
        ("pending", None, false)
    );
    // Woken by the finish's commit.
    let (waiter, connection) =
        tokio_postgres::connect(&format!("{} application_name={name}", common::dsn()), NoTls)
            .await
            .expect("connect");
    tokio::spawn(connection);
    let q = queue.clone();
    let waiting = tokio::spawn(async move {
        let outcome = workfence::await_result(&waiter, &q, "a", Duration::from_secs(60)).await;
        (outcome, Instant::now())
    });
    common::wait_for("the waiter in work_await", || async {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND state = 'active' AND query LIKE '%work_await%'",
                &[&name],
            )
            .await
            .expect("activity")
            .get(0);
        (n == 1).then_some(())
    })
    .await;
    let claimed = c
        .query_one(
            "SELECT id, epoch FROM workfence.work_claim_key($1, 'a', $2, interval '1 minute')",
            &[&queue, &owner],
        )
        .await
        .expect("claim");
    let (id, epoch): (i64, i64) = (claimed.get(0), claimed.get(1));
    let finished: bool = c
        .query_one(
            "SELECT workfence.work_finish($1, $2, $3, '{\"ok\": true}')",
            &[&id, &owner, &epoch],
        )
        .await
        .expect("finish")
        .get(0);
    assert!(finished);
    let committed = Instant::now();
    let (outcome, returned) = tokio::time::timeout(common::DEADLINE, waiting)
        .await
        .expect("await returns")
        .expect("the task");
    let outcome = outcome.expect("await").expect("exists");
    assert_eq!(
        (outcome.state.as_str(), outcome.result, outcome.last_error),
        ("done", Some(json!({"ok": true})), None)
    );
    let woke = returned.saturating_duration_since(committed);
    println!("await_result returned {woke:?} after the finish's commit");
    assert!(
        woke < Duration::from_secs(1),
        "woken by the finish: {woke:?}"
    );
    // A finished item: at once.
    let asked = Instant::now();
    let again = workfence::await_result(&c, &queue, "a", Duration::from_secs(60))
        .await
        .expect("await")
        .expect("exists");
    assert!(again.is_finished() && asked.elapsed() < Duration::from_secs(1));
    // A failed one, with its error.
    let claimed = c
        .query_one(
            "SELECT id, epoch FROM workfence.work_claim_key($1, 'b', $2, interval '1 minute')",
            &[&queue, &owner],
        )
        .await
        .expect("claim");
    let failed: bool = c
        .query_one(
            "SELECT workfence.work_fail($1, $2, $3, 'it broke')",
            &[&claimed.get::<_, i64>(0), &owner, &claimed.get::<_, i64>(1)],
        )
        .await
        .expect("fail")
        .get(0);
    assert!(failed);
    let b = workfence::await_result(&c, &queue, "b", Duration::ZERO)
        .await
        .expect("await")
        .expect("exists");
    assert_eq!(
        (b.state.as_str(), b.result, b.last_error.as_deref()),
        ("failed", None, Some("it broke"))
    );
    // A timeout past one call's cap (3 s): calls again until it ends.
    let asked = Instant::now();
    let c_item = workfence::await_result(&c, &queue, "c", Duration::from_secs(4))
        .await
        .expect("await")
        .expect("exists");
    let took = asked.elapsed();
    assert_eq!(c_item.state, "pending");
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_older_than_0_12_0_is_served_without_the_new_arguments_and_columns() {
    let db = common::old_database("workfence_rs_life_0110", "0.11.0").await;
    let (old, dsn) = (&db.client, db.dsn.clone());
    let queue = common::unique("l_0110");
    let plain = workfence::enqueue(
        old,
        &queue,
        &json!({"n": 1}),
        &EnqueueOptions::default().key("k"),
    )
    .await;
    let replaced = workfence::enqueue(
        old,
        &queue,
        &json!({"n": 2}),
        &EnqueueOptions::default()
            .key("k")
            .on_conflict(OnConflict::Replace),
    )
    .await;
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<(Option<Value>, Option<String>)>();
    let w = Worker::builder(dsn, &queue)
        .owner("tests/old")
        .poll_wait(Duration::from_secs(1))
        .build()
        .expect("build");
    let (handle, task) = spawn(w, move |job: Job| {
        let seen_tx = seen_tx.clone();
        async move {
            let progress = job.progress(&json!({"step": 1})).await;
            seen_tx
                .send((
                    job.checkpoint().cloned(),
                    progress.err().and_then(|e| e.code().map(str::to_owned)),
                ))
                .map_err(|e| e.to_string())?;
            Ok(Some(json!("ok")))
        }
    });
    let ran = tokio::time::timeout(common::DEADLINE, seen.recv()).await;
    let k = common::wait_for("k done", || async {
        let k = workfence::item(old, &queue, "k")
            .await
            .expect("item")
            .expect("exists");
        (k.state == "done").then_some(k)
    })
    .await;
    stop(handle, task).await;
    db.remove().await;
    assert!(
        plain
            .expect("an enqueue without on_conflict on 0.11.0")
            .inserted
    );
    // 0.11.0's work_enqueue has no on_conflict: 42883, undefined function.
    assert_eq!(
        replaced.expect_err("on_conflict on 0.11.0").code(),
        Some("42883")
    );
    let (checkpoint, progress) = ran.expect("the job ran").expect("seen");
    assert_eq!(checkpoint, None, "a claim row without progress");
    assert_eq!(
        progress.as_deref(),
        Some("42883"),
        "no work_progress in 0.11.0"
    );
    assert_eq!((k.progress, k.payload), (None, json!({"n": 1})));
}
