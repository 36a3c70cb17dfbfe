//! A settle (finish, fail, release) whose connection is lost is sent again with the same token
//! after reconnecting, within the lease: a killed connection neither runs a job again nor
//! delays it by a lease. A finish and a fail whose backends are terminated while they wait on a
//! row lock (so that they certainly did not commit) are each recorded once, the job run once;
//! and under `pg_terminate_backend` of the worker's connections five times a second, no job runs
//! again after a completed run (the figures are printed: `cargo test --test settle --
//! --nocapture`).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::Client;
use workfence::{EnqueueOptions, Job, Worker};

/// The log lines of every test of this file: one global subscriber (tracing caches per call
/// site whether anybody listens, so a per-thread one beside other tests would miss lines).
fn capture() -> &'static common::Capture {
    static CAPTURE: OnceLock<common::Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = common::Capture::default();
        tracing::subscriber::set_global_default(capture.clone()).expect("the only subscriber");
        capture
    })
}

/// The test database's DSN with `application_name` `name`: the worker's pool connections carry
/// it, its claims' and heartbeat's `<name> claim` and `<name> heartbeat`.
fn dsn_named(name: &str) -> String {
    format!("{} application_name={name}", common::dsn())
}

/// Waits until a pool backend of the worker `name` waits on a lock in a statement calling
/// `function`; returns its pid.
async fn blocked_in(c: &Client, name: &str, function: &str) -> i32 {
    common::wait_for(&format!("{function} waiting on the row lock"), || async {
        c.query_opt(
            "SELECT pid FROM pg_stat_activity
              WHERE application_name = $1 AND wait_event_type = 'Lock'
                AND query LIKE '%' || $2 || '%'",
            &[&name, &function],
        )
        .await
        .expect("pg_stat_activity")
        .map(|r| r.get::<_, i32>(0))
    })
    .await
}

/// Holds item `id`'s row lock on `locker` (a transaction left open), so that a settle of it waits.
async fn lock_item(locker: &Client, id: i64) {
    locker.batch_execute("BEGIN").await.expect("BEGIN");
    locker
        .query_one(
            "SELECT id FROM workfence.items WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .expect("lock the item");
}

/// How many times the handler started for each key.
type Runs = Arc<Mutex<HashMap<String, u32>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_and_a_fail_whose_connections_are_killed_are_sent_again_and_run_once() {
    let lines = capture();
    let c = common::connect().await;
    let locker = common::connect().await;
    let queue = common::unique("s_killed");
    let name = common::unique("wfs");
    let runs: Runs = Arc::default();
    let (started_tx, mut started) = mpsc::unbounded_channel::<(String, i64, i64)>();
    let gate = Arc::new(Notify::new());
    let (seen, go) = (Arc::clone(&runs), Arc::clone(&gate));
    let w = Worker::builder(dsn_named(&name), &queue)
        .owner("tests/settle")
        .poll_wait(Duration::from_secs(1))
        .lease(Duration::from_secs(5))
        // A failed attempt is due a minute later: a second run within the test is a re-run.
        .retry(|_, _| Some(Duration::from_secs(60)))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let (seen, go, started_tx) =
                    (Arc::clone(&seen), Arc::clone(&go), started_tx.clone());
                async move {
                    // No renews: were the settle left to the lease, it would lapse in 5 s.
                    job.stop_renewing();
                    let run = {
                        let mut runs = seen.lock().unwrap_or_else(PoisonError::into_inner);
                        let run = runs.entry(job.key.clone()).or_default();
                        *run += 1;
                        *run
                    };
                    if run == 1 {
                        started_tx
                            .send((job.key.clone(), job.id, job.epoch))
                            .map_err(|e| e.to_string())?;
                        go.notified().await;
                    }
                    if job.payload["fail"] == json!(true) {
                        return Err("refused by the test".into());
                    }
                    Ok(Some(json!({ "epoch": job.epoch })))
                }
            },
            std::future::pending(),
        )
        .await
    });

    for (key, fail, function) in [("f", false, "work_finish"), ("x", true, "work_fail")] {
        workfence::enqueue(
            &c,
            &queue,
            &json!({ "fail": fail }),
            &EnqueueOptions::default().key(key).max_attempts(3),
        )
        .await
        .expect("enqueue");
        let (_, id, epoch) = tokio::time::timeout(common::DEADLINE, started.recv())
            .await
            .expect("the job starts")
            .expect("a job");
        // The settle waits on the test's row lock, then its backend is terminated: it did not
        // commit, and its reply is lost.
        lock_item(&locker, id).await;
        gate.notify_one();
        let pid = blocked_in(&c, &name, function).await;
        let terminated: bool = c
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("terminate")
            .get(0);
        assert!(terminated);
        locker.batch_execute("ROLLBACK").await.expect("ROLLBACK");
        let item = common::wait_for(&format!("{key} settled"), || async {
            let item = workfence::item(&c, &queue, key)
                .await
                .expect("item")
                .expect("exists");
            let settled = if fail {
                item.errors.as_ref().and_then(Value::as_array).map(Vec::len) == Some(1)
            } else {
                item.state == "done"
            };
            settled.then_some(item)
        })
        .await;
        let ran = runs.lock().unwrap_or_else(PoisonError::into_inner)[key];
        assert_eq!(
            ran, 1,
            "{key}: the job ran again after its {function} was lost"
        );
        assert_eq!(
            item.epoch,
            Some(epoch),
            "{key}: settled under the first claim"
        );
        assert_eq!(item.attempts, 1, "{key}");
        if fail {
            assert_eq!(
                item.state, "pending",
                "{key}: failed once, due again in a minute"
            );
            assert_eq!(
                item.errors.expect("errors")[0]["error"],
                json!("refused by the test")
            );
        } else {
            assert_eq!(item.result, Some(json!({ "epoch": epoch })));
        }
        let again = format!(
            "resend {} id={id} epoch={epoch} error=",
            &function["work_".len()..]
        );
        assert!(
            lines.lines().iter().any(|l| l.starts_with(&again)),
            "no line {again:?}"
        );
    }
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
}

/// Makes every commit of a session whose `synchronous_commit` is `on` wait, once it is durable
/// here, for a standby that never comes (`on`), or puts things back (`!on`); every other session
/// gets `synchronous_commit = local` meanwhile, so that it commits as usual. Returns once a commit
/// of such a session waits (`on`) or does not (`!on`): a backend seeing the new setting is not
/// enough, as whether commits wait is the checkpointer's to publish (it does so when it reloads
/// the configuration, in its own time: on a loaded machine a settle could commit before it had).
async fn commits_wait_for_a_standby(c: &Client, on: bool) {
    let statements: &[&str] = if on {
        &[
            "ALTER SYSTEM SET synchronous_commit = 'local'",
            "ALTER SYSTEM SET synchronous_standby_names = 'workfence_nobody'",
        ]
    } else {
        &[
            "ALTER SYSTEM RESET synchronous_standby_names",
            "ALTER SYSTEM RESET synchronous_commit",
        ]
    };
    for statement in statements {
        c.batch_execute(statement).await.expect("ALTER SYSTEM");
    }
    c.batch_execute("SELECT pg_reload_conf()")
        .await
        .expect("reload");
    let (probe, _) = tokio_postgres::connect(
        &format!("{} options='-c synchronous_commit=on'", common::dsn()),
        tokio_postgres::NoTls,
    )
    .await
    .map(|(client, connection)| (client, tokio::spawn(connection)))
    .expect("the probe's connection");
    let pid: i32 = probe
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("the probe's pid")
        .get(0);
    let want = if on {
        "commits waiting"
    } else {
        "commits not waiting"
    };
    common::wait_for(&format!("{want} for the standby"), || async {
        (commit_waits(c, &probe, pid).await == on).then_some(())
    })
    .await;
}

/// Whether a commit of `probe` (backend `pid`, `synchronous_commit = on`) waits for the standby:
/// it commits a transaction that wrote WAL (a transactional logical message, which changes no
/// table; a transaction with an xid and no other WAL does not wait), and if `c` sees it wait,
/// cancels the wait (the commit has then happened here, with a warning).
async fn commit_waits(c: &Client, probe: &Client, pid: i32) -> bool {
    let commit = probe.query_one(
        "SELECT pg_catalog.pg_logical_emit_message(true, 'workfence_probe', '')",
        &[],
    );
    tokio::pin!(commit);
    loop {
        tokio::select! {
            done = &mut commit => {
                done.expect("the probe's commit");
                return false;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
        let waiting = c
            .query_one(
                "SELECT coalesce(wait_event = 'SyncRep', false) FROM pg_stat_activity
                  WHERE pid = $1",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .get::<_, bool>(0);
        if waiting {
            c.query_one("SELECT pg_cancel_backend($1)", &[&pid])
                .await
                .expect("cancel the probe's wait");
            commit
                .await
                .expect("the probe's commit, its wait cancelled");
            return true;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_that_committed_before_its_reply_was_lost_is_not_taken_for_a_lost_lease() {
    let lines = capture();
    let c = common::connect().await;
    let queue = common::unique("s_committed");
    let name = common::unique("wfl");
    let runs: Runs = Arc::default();
    let (started_tx, mut started) = mpsc::unbounded_channel::<(i64, i64)>();
    let (fenced_tx, mut fenced) = mpsc::unbounded_channel::<Result<(), String>>();
    let gate = Arc::new(Notify::new());
    let (seen, go) = (Arc::clone(&runs), Arc::clone(&gate));
    // Only the worker's sessions wait for the standby (while it is asked for).
    let dsn = format!("{} options='-c synchronous_commit=on'", dsn_named(&name));
    let w = Worker::builder(dsn, &queue)
        .owner("tests/settle")
        .poll_wait(Duration::from_secs(1))
        .lease(Duration::from_secs(5))
        .retry(|_, _| Some(Duration::from_secs(60)))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let (seen, go, started_tx, fenced_tx) = (
                    Arc::clone(&seen),
                    Arc::clone(&go),
                    started_tx.clone(),
                    fenced_tx.clone(),
                );
                async move {
                    job.stop_renewing();
                    *seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(job.key.clone())
                        .or_default() += 1;
                    started_tx
                        .send((job.id, job.epoch))
                        .map_err(|e| e.to_string())?;
                    go.notified().await;
                    match job.key.as_str() {
                        "x" => Err("refused by the test".into()),
                        "t" => {
                            let tx = job.transaction().await?;
                            let finished = tx.finish(Some(json!({ "epoch": job.epoch }))).await;
                            fenced_tx
                                .send(finished.map_err(|e| e.to_string()))
                                .map_err(|e| e.to_string())?;
                            Ok(None)
                        }
                        _ => Ok(Some(json!({ "epoch": job.epoch }))),
                    }
                }
            },
            std::future::pending(),
        )
        .await
    });
    // Run in a task, so that the system settings are put back whatever happens.
    let body = {
        let queue = queue.clone();
        tokio::spawn(async move {
            for key in ["f", "x", "t"] {
                workfence::enqueue(
                    &c,
                    &queue,
                    &json!({}),
                    &EnqueueOptions::default().key(key).max_attempts(3),
                )
                .await
                .expect("enqueue");
                let (id, epoch) = tokio::time::timeout(common::DEADLINE, started.recv())
                    .await
                    .expect("the job starts")
                    .expect("a job");
                commits_wait_for_a_standby(&c, true).await;
                gate.notify_one();
                // The settle (or the fenced COMMIT) committed here, then waits for the standby:
                // its backend is terminated, and the reply is lost.
                let pid = common::wait_for(
                    &format!("{key}: a commit waiting for the standby"),
                    || async {
                        c.query_opt(
                            "SELECT pid FROM pg_stat_activity
                          WHERE application_name = $1 AND wait_event = 'SyncRep'",
                            &[&name],
                        )
                        .await
                        .expect("pg_stat_activity")
                        .map(|r| r.get::<_, i32>(0))
                    },
                )
                .await;
                let terminated: bool = c
                    .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .expect("terminate")
                    .get(0);
                assert!(terminated);
                commits_wait_for_a_standby(&c, false).await;
                let item = common::wait_for(&format!("{key} settled"), || async {
                    let item = workfence::item(&c, &queue, key)
                        .await
                        .expect("item")
                        .expect("exists");
                    let settled = item.state == "done"
                        || item.errors.as_ref().and_then(Value::as_array).map(Vec::len) == Some(1);
                    settled.then_some(item)
                })
                .await;
                assert_eq!((item.epoch, item.attempts), (Some(epoch), 1), "{key}");
                let want = match key {
                    "x" => {
                        assert_eq!(item.state, "pending", "x failed once");
                        format!("fail id={id} epoch={epoch} error=refused by the test")
                    }
                    _ => {
                        assert_eq!(item.state, "done", "{key}");
                        assert_eq!(item.result, Some(json!({ "epoch": epoch })), "{key}");
                        format!("finish id={id} epoch={epoch} ok")
                    }
                };
                if key == "t" {
                    let finished = tokio::time::timeout(common::DEADLINE, fenced.recv())
                        .await
                        .expect("tx.finish returned")
                        .expect("an outcome");
                    assert_eq!(finished, Ok(()), "a COMMIT whose reply was lost, resolved");
                }
                common::wait_for(&format!("the line {want:?}"), || async {
                    lines.lines().contains(&want).then_some(())
                })
                .await;
                let resent = format!(
                    "resend {} id={id} epoch={epoch} error=",
                    if key == "t" {
                        "commit"
                    } else if key == "x" {
                        "fail"
                    } else {
                        "finish"
                    }
                );
                assert!(
                    lines.lines().iter().any(|l| l.starts_with(&resent)),
                    "no line {resent:?}"
                );
                let refused = format!("refused id={id} (lease lost)");
                assert!(!lines.lines().contains(&refused), "{key}: {refused:?}");
            }
        })
    };
    let outcome = body.await;
    commits_wait_for_a_standby(&common::connect().await, false).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
    let runs = runs.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(
        runs,
        HashMap::from([
            ("f".to_owned(), 1),
            ("x".to_owned(), 1),
            ("t".to_owned(), 1)
        ]),
        "each job ran once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_commit_killed_before_it_committed_is_the_connection_error_and_a_retry() {
    let lines = capture();
    let c = common::connect().await;
    let holder = common::connect().await;
    let queue = common::unique("s_rolled_back");
    let name = common::unique("wfr");
    let table = common::unique("settle_rows");
    // The job's business table: its commit waits (a deferred trigger) for a lock the test holds.
    c.batch_execute(&format!(
        "CREATE TABLE {table} (item_id bigint, epoch bigint);
         CREATE FUNCTION {table}_wait() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(TG_TABLE_NAME)); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER wait AFTER INSERT ON {table} DEFERRABLE INITIALLY DEFERRED
           FOR EACH ROW EXECUTE FUNCTION {table}_wait();"
    ))
    .await
    .expect("the business table");
    holder
        .execute("SELECT pg_advisory_lock(hashtext($1))", &[&table])
        .await
        .expect("hold the lock");
    let (outcome_tx, mut outcome) = mpsc::unbounded_channel::<Result<(), (bool, String)>>();
    let w = Worker::builder(dsn_named(&name), &queue)
        .owner("tests/settle")
        .poll_wait(Duration::from_secs(1))
        .lease(Duration::from_secs(5))
        .retry(|_, _| Some(Duration::from_secs(60)))
        .build()
        .expect("build");
    let handle = w.handle();
    let insert = format!("INSERT INTO {table} VALUES ($1, $2)");
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let (outcome_tx, insert) = (outcome_tx.clone(), insert.clone());
                async move {
                    let tx = job.transaction().await?;
                    tx.execute(insert.as_str(), &[&job.id, &job.epoch]).await?;
                    let finished = tx.finish(Some(json!({ "epoch": job.epoch }))).await;
                    outcome_tx
                        .send(
                            finished
                                .as_ref()
                                .map(|_| ())
                                .map_err(|e| (e.is_lease_lost(), e.to_string())),
                        )
                        .map_err(|e| e.to_string())?;
                    finished?;
                    Ok(None)
                }
            },
            std::future::pending(),
        )
        .await
    });
    let e = workfence::enqueue(
        &c,
        &queue,
        &json!({}),
        &EnqueueOptions::default().key("t").max_attempts(3),
    )
    .await
    .expect("enqueue");
    // The COMMIT waits in its deferred trigger, not committed; its backend is terminated.
    let pid = common::wait_for("the COMMIT waiting on the test's lock", || async {
        c.query_opt(
            "SELECT pid FROM pg_stat_activity
              WHERE application_name = $1 AND wait_event_type = 'Lock' AND query = 'COMMIT'",
            &[&name],
        )
        .await
        .expect("pg_stat_activity")
        .map(|r| r.get::<_, i32>(0))
    })
    .await;
    let terminated: bool = c
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("terminate")
        .get(0);
    assert!(terminated);
    holder
        .execute("SELECT pg_advisory_unlock(hashtext($1))", &[&table])
        .await
        .expect("let go");
    let finished = tokio::time::timeout(common::DEADLINE, outcome.recv())
        .await
        .expect("tx.finish returned")
        .expect("an outcome");
    let item = common::wait_for("t failed once", || async {
        let item = workfence::item(&c, &queue, "t")
            .await
            .expect("item")
            .expect("exists");
        (item.errors.as_ref().and_then(Value::as_array).map(Vec::len) == Some(1)).then_some(item)
    })
    .await;
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
    let rows: i64 = c
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("rows")
        .get(0);
    c.batch_execute(&format!("DROP TABLE {table}; DROP FUNCTION {table}_wait()"))
        .await
        .expect("drop");
    match finished {
        Err((lease_lost, text)) => assert!(!lease_lost, "not a lost lease: {text}"),
        Ok(()) => panic!("a COMMIT that did not commit came out as Ok"),
    }
    assert_eq!(rows, 0, "nothing of the transaction committed");
    assert_eq!(
        (item.state.as_str(), item.attempts, item.epoch.is_some()),
        ("pending", 1, true),
        "failed with the connection error, to run again"
    );
    let lines = lines.lines();
    let resent = format!("resend commit id={} epoch=", e.id);
    assert!(
        lines.iter().any(|l| l.starts_with(&resent)),
        "no line {resent:?}"
    );
    let refused = format!("refused id={} (lease lost)", e.id);
    assert!(!lines.contains(&refused), "{refused:?}");
}

/// One run of an item's handler: whether it returned (a value: the runner then finishes it).
type Ran = Arc<Mutex<HashMap<i64, Vec<bool>>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_five_kills_a_second_no_job_runs_again_because_of_a_lost_settle() {
    let lines = capture();
    const ITEMS: i64 = 10_000;
    /// How long the kills go on at most (the run usually ends sooner).
    const KILLING: Duration = Duration::from_secs(60);
    let c = common::connect().await;
    let queue = common::unique("s_chaos");
    let name = common::unique("wfk");
    c.execute(
        "SELECT count(*)
           FROM generate_series(1, $2::bigint) AS g,
                LATERAL workfence.work_enqueue($1, jsonb_build_object('n', g), key => 'k' || g) AS e",
        &[&queue, &ITEMS],
    )
    .await
    .expect("enqueue");
    let ran: Ran = Arc::default();
    let seen = Arc::clone(&ran);
    let w = Worker::builder(dsn_named(&name), &queue)
        .owner("tests/chaos")
        .concurrency(4)
        .poll_wait(Duration::from_secs(1))
        // Short enough that a claim whose reply was lost comes back within the test.
        .lease(Duration::from_secs(5))
        .build()
        .expect("build");
    let handle = w.handle();
    let task = tokio::spawn(async move {
        w.run(
            move |job: Job| {
                let seen = Arc::clone(&seen);
                async move {
                    let run = {
                        let mut ran = seen.lock().unwrap_or_else(PoisonError::into_inner);
                        let runs = ran.entry(job.id).or_default();
                        runs.push(false);
                        runs.len() - 1
                    };
                    // The job's work: a few milliseconds.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_mut(&job.id)
                        .expect("started")[run] = true;
                    Ok(Some(json!({ "epoch": job.epoch })))
                }
            },
            std::future::pending(),
        )
        .await
    });

    // Once the worker is up (a failure of its first connections ends `run`, as documented):
    // its claims' connection has sent a claim.
    common::wait_for("the worker's first claim", || async {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND query LIKE '%work_claim%'",
                &[&format!("{name} claim")],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        (n > 0).then_some(())
    })
    .await;
    // Five times a second, one of the worker's backends (claims, heartbeat or pool) at random.
    let started = Instant::now();
    let mut kills: HashMap<String, u32> = HashMap::new();
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    let done = loop {
        ticks.tick().await;
        let done: i64 = c
            .query_one(
                "SELECT count(*) FROM workfence.items WHERE queue = $1 AND state = 'done'",
                &[&queue],
            )
            .await
            .expect("count")
            .get(0);
        if done == ITEMS || started.elapsed() > KILLING {
            break done;
        }
        let killed = c
            .query_opt(
                "SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE (application_name = $1 OR application_name LIKE $1 || ' %')
                    AND pid <> pg_backend_pid()
                  ORDER BY random() LIMIT 1",
                &[&name],
            )
            .await
            .expect("terminate");
        if let Some(row) = killed {
            let app: String = row.get(0);
            let kind = app.strip_prefix(&name).unwrap_or("").trim();
            let kind = if kind.is_empty() { "pool" } else { kind };
            *kills.entry(kind.to_owned()).or_default() += 1;
        }
    };
    let killing = started.elapsed();
    // Then without kills, until every item is done (a claim whose reply was lost lapses first).
    let all_done = if done == ITEMS {
        true
    } else {
        let until = Instant::now() + common::DEADLINE;
        loop {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM workfence.items WHERE queue = $1 AND state = 'done'",
                    &[&queue],
                )
                .await
                .expect("count")
                .get(0);
            if n == ITEMS || Instant::now() > until {
                break n == ITEMS;
            }
            ticks.tick().await;
        }
    };
    handle.stop();
    tokio::time::timeout(common::DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");

    let ran = ran.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let runs: usize = ran.values().map(Vec::len).sum();
    let twice = ran.values().filter(|r| r.len() > 1).count();
    // Ran again after a run whose handler returned: its finish was lost (or refused).
    let after_completed = ran
        .values()
        .filter(|r| r[..r.len() - 1].iter().any(|&completed| completed))
        .count();
    // This test's lines: those naming one of its items (the other test logs beside it).
    let lines: Vec<String> = lines
        .lines()
        .into_iter()
        .filter(|l| {
            l.split(' ')
                .find_map(|word| word.strip_prefix("id="))
                .and_then(|id| id.parse::<i64>().ok())
                .is_some_and(|id| ran.contains_key(&id))
        })
        .collect();
    let count = |prefix: &str, part: &str| {
        lines
            .iter()
            .filter(|l| l.starts_with(prefix) && l.contains(part))
            .count()
    };
    let sent_again = count("resend finish id=", "");
    let given_up = count("settling id=", "");
    let refused = count("refused id=", "");
    println!(
        "settle chaos: {ITEMS} items, concurrency 4, lease 5 s; {} kills in {:.1} s \
         (claim {}, heartbeat {}, pool {}); {runs} runs; {twice} items ran twice; \
         {after_completed} ran again after a completed run (lost settle); finishes sent again \
         after a lost reply {sent_again}; settles given up {given_up}; refusals {refused}; \
         all done: {all_done}",
        kills.values().sum::<u32>(),
        killing.as_secs_f64(),
        kills.get("claim").unwrap_or(&0),
        kills.get("heartbeat").unwrap_or(&0),
        kills.get("pool").unwrap_or(&0),
    );
    assert!(all_done, "every item done");
    assert_eq!(
        ran.len(),
        usize::try_from(ITEMS).expect("fits"),
        "every item ran"
    );
    assert_eq!(
        after_completed, 0,
        "jobs that ran again because their settle was lost"
    );
}
