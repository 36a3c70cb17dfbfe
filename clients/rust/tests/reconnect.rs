//! The runner when its own connections fail: backends terminated (`pg_terminate_backend`, as a
//! server restart or a failover does) while it idles in a long poll and while a job runs; it
//! reconnects with a backoff, `LISTEN`s again, finishes what comes afterwards, and `run`
//! returns `Ok` on a stop, promptly even in the middle of a backoff. An error that retrying
//! cannot fix still ends `run` with `Err`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, Notify};
use tokio_postgres::Client;
use workfence::{EnqueueOptions, Error, Job, Worker};

/// The test database's DSN with `application_name` set to `name`: the worker's connections are
/// then `<name> claim`, `<name> heartbeat` and `<name>` (the pool), and only this test's
/// backends are terminated.
fn dsn_named(name: &str) -> String {
    format!("{} application_name={name}", common::dsn())
}

/// The pids of the worker's backends whose `application_name` is `<name><suffix>`.
async fn backends(c: &Client, name: &str, suffix: &str) -> Vec<i32> {
    c.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
        &[&format!("{name}{suffix}")],
    )
    .await
    .expect("pg_stat_activity")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Terminates every backend of the worker named `name` (claims, heartbeat, pool); returns how
/// many.
async fn terminate_all(c: &Client, name: &str) -> i64 {
    c.query_one(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE (application_name = $1 OR application_name LIKE $1 || ' %')
            AND pid <> pg_backend_pid()",
        &[&name],
    )
    .await
    .expect("terminate")
    .get(0)
}

/// Waits until (with `claims`) the claims' connection is a new backend (not one of `old`) in a
/// long poll, and the heartbeat's a new backend whose last statement is the `LISTEN` (or a renew, which comes
/// after it).
async fn wait_reconnected(c: &Client, name: &str, old: &[i32], claims: bool) {
    common::wait_for("a new claims' connection in a long poll", || async {
        if !claims {
            return Some(());
        }
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND state = 'active' AND query LIKE '%work_claim%'
                    AND NOT pid = ANY($2)",
                &[&format!("{name} claim"), &old],
            )
            .await
            .expect("activity")
            .get(0);
        (n >= 1).then_some(())
    })
    .await;
    common::wait_for("a new heartbeat connection LISTENing", || async {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1
                    AND (query = 'LISTEN work_lease_lost' OR query LIKE '%work_renew%')
                    AND NOT pid = ANY($2)",
                &[&format!("{name} heartbeat"), &old],
            )
            .await
            .expect("activity")
            .get(0);
        (n >= 1).then_some(())
    })
    .await;
}

/// Waits until item `key` of `queue` is in `state`.
async fn wait_state(c: &Client, queue: &str, key: &str, state: &str) {
    common::wait_for(&format!("{key} {state}"), || async {
        let item = workfence::item(c, queue, key)
            .await
            .expect("item")
            .expect("exists");
        (item.state == state).then_some(())
    })
    .await;
}

async fn enqueue(c: &Client, queue: &str, key: &str, payload: serde_json::Value) {
    workfence::enqueue(c, queue, &payload, &EnqueueOptions::default().key(key))
        .await
        .expect("enqueue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_are_reconnected_while_idle_and_while_a_job_runs() {
    let c = common::connect().await;
    let queue = common::unique("r_terminated");
    let name = common::unique("wfr");
    // Parked jobs report (id, epoch, cancelled?) and wait for `go` (or run into their lease when
    // they ask not to be renewed).
    let (started_tx, mut started) =
        mpsc::unbounded_channel::<(i64, i64, workfence::CancellationToken)>();
    let go = Arc::new(Notify::new());
    let go_handler = Arc::clone(&go);
    let w = Worker::builder(dsn_named(&name), &queue)
        .owner("tests/reconnect")
        .poll_wait(Duration::from_secs(60))
        .lease(Duration::from_secs(3))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let (started_tx, go) = (started_tx.clone(), Arc::clone(&go_handler));
                async move {
                    if job.payload.get("park").is_some() {
                        if job.payload.get("lapse").is_some() {
                            job.stop_renewing();
                        }
                        started_tx
                            .send((job.id, job.epoch, job.cancellation_token()))
                            .map_err(|e| e.to_string())?;
                        go.notified().await;
                    }
                    Ok(Some(json!({ "epoch": job.epoch })))
                }
            },
            std::future::pending(),
        )
        .await
    });

    // 1. A first item, so that the pool holds a connection too; then the worker idles.
    wait_reconnected(&c, &name, &[], true).await;
    enqueue(&c, &queue, "first", json!({})).await;
    wait_state(&c, &queue, "first", "done").await;

    // 2. Idle in the long poll: every backend of the worker is terminated.
    let old = backends(&c, &name, " claim").await;
    let mut old_all = old.clone();
    old_all.extend(backends(&c, &name, " heartbeat").await);
    old_all.extend(backends(&c, &name, "").await);
    assert!(
        terminate_all(&c, &name).await >= 2,
        "claims and heartbeat terminated"
    );
    wait_reconnected(&c, &name, &old_all, true).await;
    assert!(
        !task.is_finished(),
        "run goes on after the idle connections were terminated"
    );
    enqueue(&c, &queue, "after_idle", json!({})).await;
    wait_state(&c, &queue, "after_idle", "done").await;

    // 3. While a job runs: terminate again, then let the job finish (on a fresh pool connection).
    enqueue(&c, &queue, "running", json!({"park": true})).await;
    let (_, _, running_token) = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    let mut old_all = backends(&c, &name, " claim").await;
    old_all.extend(backends(&c, &name, " heartbeat").await);
    old_all.extend(backends(&c, &name, "").await);
    // Concurrency 1 and a job running: no claim is made until it ends, so only the heartbeat's
    // connection is there to terminate and reconnect now (it renews the job on the new one).
    assert!(terminate_all(&c, &name).await >= 1);
    wait_reconnected(&c, &name, &old_all, false).await;
    assert!(
        !running_token.is_cancelled(),
        "a lost connection is not a lost lease"
    );
    go.notify_one();
    wait_state(&c, &queue, "running", "done").await;
    enqueue(&c, &queue, "after_running", json!({})).await;
    wait_state(&c, &queue, "after_running", "done").await;

    // 4. The new heartbeat connection LISTENs: a re-claim of a lapsed, unrenewed job cancels
    //    it by notification (no renew is made for it, so nothing else could).
    enqueue(&c, &queue, "lapsing", json!({"park": true, "lapse": true})).await;
    let (id, epoch, token) = tokio::time::timeout(common::DEADLINE, started.recv())
        .await
        .expect("the job starts")
        .expect("a job");
    common::wait_lease_lapsed(&c, id).await;
    let ours = c
        .query_one(
            "SELECT id, epoch FROM workfence.work_claim($1, 'tests/reconnect', interval '1 minute')",
            &[&queue],
        )
        .await
        .expect("re-claim");
    assert_eq!(ours.get::<_, i64>(0), id);
    assert!(ours.get::<_, i64>(1) > epoch);
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("the job is cancelled by the notification on the new connection");

    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok after reconnecting");
}

#[tokio::test(flavor = "current_thread")]
async fn a_stop_during_the_reconnect_backoff_returns_promptly() {
    let capture = common::Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let c = common::connect().await;
    let queue = common::unique("r_backoff");
    let name = common::unique("wfb");
    // A role of its own, so that its logins can be refused without touching other tests.
    let role = common::unique("wf_role");
    c.batch_execute(&format!("CREATE ROLE {role} LOGIN SUPERUSER"))
        .await
        .expect("role");
    let dsn = format!("{} user={role}", dsn_named(&name));
    let w = Worker::builder(dsn, &queue)
        .poll_wait(Duration::from_secs(60))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(|_job: Job| async move { Ok(None) }, std::future::pending())
            .await
    });
    wait_reconnected(&c, &name, &[], true).await;
    // Logins refused from now on: every reconnect fails, and the pauses grow 0.5, 1, 2, 4 s.
    c.batch_execute(&format!("ALTER ROLE {role} NOLOGIN"))
        .await
        .expect("nologin");
    assert!(terminate_all(&c, &name).await >= 2);
    common::wait_for("a 4 s reconnect pause", || async {
        capture
            .lines()
            .iter()
            .any(|l| l.starts_with("reconnect claim in 4s error="))
            .then_some(())
    })
    .await;
    let asked = Instant::now();
    handle.stop();
    let result = tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task");
    let took = asked.elapsed();
    c.batch_execute(&format!("DROP ROLE {role}"))
        .await
        .expect("drop role");
    result.expect("run returns Ok");
    assert!(
        took < Duration::from_secs(2),
        "stop took {took:?} in a 4 s pause"
    );
    let lines = capture.lines();
    for which in ["claim", "heartbeat"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("reconnect {which} in 0.5s error="))),
            "no first reconnect of the {which}: {lines:?}"
        );
    }
    assert_eq!(lines.last().map(String::as_str), Some("exit"), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_retrying_cannot_fix_still_ends_run() {
    // A queue name with a control character: work_claim raises 22023 (not transient).
    let queue = format!("{}\tbad", common::unique("r_fatal"));
    let w = Worker::builder(common::dsn(), &queue)
        .poll_wait(Duration::from_secs(1))
        .build()
        .expect("build");
    let result = tokio::time::timeout(
        common::DEADLINE,
        w.run(|_job: Job| async move { Ok(None) }, std::future::pending()),
    )
    .await
    .expect("run ends by itself");
    match result {
        Err(e @ Error::InvalidArgument(..)) => {
            assert_eq!(e.code(), Some("22023"));
            assert!(!e.is_transient());
        }
        other => panic!("expected InvalidArgument (22023), got {other:?}"),
    }
}
