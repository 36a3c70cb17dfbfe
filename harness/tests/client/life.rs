//! A job's life (0.12.0, issue 35), from real client connections:
//! `on_conflict` (debounce and the run once more of a claimed item),
//! fenced checkpoints (`work_progress` and the claim's `progress`), and
//! `work_await`'s wake-up at the settle's commit.
//!
//! Orderings are explicit: a zombie's lease is superseded by a real
//! re-claim (its lapse awaited by polling the server's clock, not slept
//! for), and an awaiter is known to be asleep when `pg_locks` shows its
//! await lock.

use crate::common;

use std::thread;
use std::time::{Duration, Instant};

use common::{ok, poll_until};
use postgres::Client;
use serde_json::{json, Value};
use workfence_harness::calls::{self, Token};
use workfence_harness::Cluster;

const QUEUE: &str = "life";

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

/// `work_enqueue(QUEUE, payload, key, run_at => now() + delay, on_conflict)`:
/// (id, inserted).
fn enqueue(c: &mut Client, key: &str, payload: &Value, delay_ms: i64, mode: &str) -> (i64, bool) {
    let row = ok(
        c.query_one(
            "SELECT id, inserted FROM workfence.work_enqueue($1, $2, $3,
                 run_at => pg_catalog.clock_timestamp() + $4 * interval '1 millisecond',
                 on_conflict => $5)",
            &[&QUEUE, payload, &key, &(delay_ms as f64), &mode],
        ),
        "work_enqueue",
    );
    (row.get(0), row.get(1))
}

/// One claim of QUEUE by `owner`: (id, epoch, attempt, payload, progress).
type Claimed = (i64, i64, i32, Value, Option<Value>);

fn claim(c: &mut Client, owner: &str, lease: &str) -> Option<Claimed> {
    let rows = ok(
        c.query(
            "SELECT id, epoch, attempt, payload, progress
               FROM workfence.work_claim($1, $2, $3::text::interval)",
            &[&QUEUE, &owner, &lease],
        ),
        "work_claim",
    );
    rows.first()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// `work_finish` with the token (id, owner, epoch) and a result.
fn finish(c: &mut Client, id: i64, owner: &str, epoch: i64, result: &Value) -> bool {
    let token = Token {
        id,
        owner: owner.to_owned(),
        epoch,
    };
    ok(calls::finish(c, &token, Some(result)), "work_finish")
}

/// `work_progress` with the token (id, owner, epoch).
fn progress(c: &mut Client, id: i64, owner: &str, epoch: i64, value: &Value) -> bool {
    ok(
        calls::generated::work_progress(c, id, owner, epoch, value),
        "work_progress",
    )
}

#[test]
fn fifty_replaces_within_the_window_leave_one_item_with_the_last_payload_run_once() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_debounce");
    let mut ids = Vec::new();
    for n in 0..50 {
        // Each enqueue pushes the item 2 s out: the debounce window.
        let (id, inserted) = enqueue(&mut c, "digest", &json!({ "n": n }), 2_000, "replace");
        assert_eq!(inserted, n == 0, "only the first enqueue inserts");
        ids.push(id);
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one item: {ids:?}");
    assert!(
        claim(&mut c, "w", "1 minute").is_none(),
        "not due inside the window"
    );
    // Run it now, as the window's end would.
    ok(
        c.execute(
            "SELECT workfence.work_reschedule($1, 'digest', pg_catalog.clock_timestamp())",
            &[&QUEUE],
        ),
        "reschedule",
    );
    let (id, epoch, attempt, payload, _) = claim(&mut c, "w", "1 minute").expect("claimed");
    assert_eq!((id, attempt, &payload), (ids[0], 1, &json!({ "n": 49 })));
    assert!(finish(&mut c, id, "w", epoch, &json!("sent")));
    assert!(claim(&mut c, "w", "1 minute").is_none(), "it ran once");
}

#[test]
fn a_replace_while_claimed_runs_exactly_once_more_after_the_current_run() {
    let cluster = common::shared_cluster();
    let mut a = database(&cluster, "life_rerun");
    let mut b = ok(cluster.connect_to("life_rerun"), "second worker");
    enqueue(&mut a, "sync", &json!({ "v": 1 }), 0, "keep");
    let (id, epoch, _, payload, _) = claim(&mut a, "a", "1 minute").expect("claimed");
    assert_eq!(payload, json!({ "v": 1 }));

    // Two replaces while it runs: one more run, with the last payload.
    for v in [2, 3] {
        let (same, inserted) = enqueue(&mut b, "sync", &json!({ "v": v }), 0, "replace");
        assert_eq!((same, inserted), (id, false));
    }
    // Nothing runs beside the current run.
    assert!(
        claim(&mut b, "b", "1 minute").is_none(),
        "claimed twice at once"
    );
    // The holder's token still works; repeating its finish too.
    assert!(progress(&mut a, id, "a", epoch, &json!({ "page": 1 })));
    assert!(finish(&mut a, id, "a", epoch, &json!("first")));
    assert!(
        finish(&mut a, id, "a", epoch, &json!("first")),
        "a repeated finish"
    );

    let (again, epoch2, attempt, payload, checkpoint) =
        claim(&mut b, "b", "1 minute").expect("the run once more");
    assert_eq!((again, attempt), (id, 1), "attempts counted afresh");
    assert!(epoch2 > epoch);
    assert_eq!(payload, json!({ "v": 3 }));
    assert_eq!(
        checkpoint, None,
        "a new run starts without the old checkpoint"
    );
    assert!(
        !finish(&mut a, id, "a", epoch, &json!("stale")),
        "the old token is dead"
    );
    assert!(finish(&mut b, id, "b", epoch2, &json!("second")));
    assert!(
        claim(&mut b, "b", "1 minute").is_none(),
        "exactly once more"
    );
    let state: String = ok(
        b.query_one(
            "SELECT state FROM workfence.work_item($1, 'sync')",
            &[&QUEUE],
        ),
        "work_item",
    )
    .get(0);
    assert_eq!(state, "done");
}

#[test]
fn a_stale_checkpoint_changes_nothing_and_a_retry_resumes_from_the_last_current_one() {
    let cluster = common::shared_cluster();
    let mut zombie = database(&cluster, "life_progress");
    let mut fresh = ok(cluster.connect_to("life_progress"), "second worker");
    enqueue(&mut zombie, "import", &json!({}), 0, "keep");
    let (id, old, ..) = claim(&mut zombie, "z", "100 milliseconds").expect("claimed");
    assert!(progress(&mut zombie, id, "z", old, &json!({ "row": 100 })));
    // The zombie's lease lapses (the server's clock says so) and another
    // worker claims the item anew, under a newer epoch.
    poll_until(
        &mut fresh,
        "SELECT lease_until < pg_catalog.clock_timestamp() FROM workfence.items WHERE id = $1",
        &[&id],
        "the zombie's lease to lapse",
    );
    let (same, new, attempt, _, checkpoint) =
        claim(&mut fresh, "f", "1 minute").expect("re-claimed");
    assert_eq!((same, attempt), (id, 2));
    assert_eq!(
        checkpoint,
        Some(json!({ "row": 100 })),
        "resumes from the zombie's checkpoint"
    );
    assert!(progress(&mut fresh, id, "f", new, &json!({ "row": 500 })));
    // The zombie wakes up and writes an older checkpoint: refused.
    assert!(!progress(&mut zombie, id, "z", old, &json!({ "row": 200 })));
    let seen: Value = ok(
        fresh.query_one("SELECT progress FROM workfence.work_item($1)", &[&id]),
        "work_item",
    )
    .get(0);
    assert_eq!(seen, json!({ "row": 500 }));
    // The fresh run fails; its retry resumes from the newest checkpoint.
    ok(
        fresh.execute(
            "SELECT workfence.work_fail($1, 'f', $2, 'boom', '0')",
            &[&id, &new],
        ),
        "work_fail",
    );
    let (_, _, attempt, _, checkpoint) = claim(&mut fresh, "f", "1 minute").expect("retried");
    assert_eq!(attempt, 3);
    assert_eq!(checkpoint, Some(json!({ "row": 500 })));
}

/// Starts `work_await(QUEUE, key, '3 s')` on a new connection and returns
/// once its backend holds the item's await lock (asleep, or about to sleep
/// with its latch reset before its last look).
fn awaiter<'s>(
    scope: &'s thread::Scope<'s, '_>,
    cluster: &Cluster,
    db: &str,
    observer: &mut Client,
    key: &'static str,
) -> thread::ScopedJoinHandle<'s, (String, Instant)> {
    let mut c = ok(cluster.connect_to(db), "awaiter");
    let pid = common::backend_pid(&mut c);
    let handle = scope.spawn(move || {
        let row = ok(
            c.query_one(
                "SELECT state FROM workfence.work_await($1, $2, '3 seconds')",
                &[&QUEUE, &key],
            ),
            "work_await",
        );
        (row.get::<_, String>(0), Instant::now())
    });
    poll_until(
        observer,
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks
                         WHERE pid = $1 AND locktype = 'advisory' AND objsubid = 22369 AND granted)",
        &[&pid],
        &format!("backend {pid} awaiting"),
    );
    handle
}

#[test]
fn an_awaiter_wakes_within_100_ms_of_the_finish_commit() {
    let cluster = common::shared_cluster();
    let db = "life_await";
    let mut main = database(&cluster, db);
    let mut observer = ok(cluster.connect_to(db), "observer");
    let trials: usize = std::env::var("WORKFENCE_WAKE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut latencies = Vec::with_capacity(trials);
    for trial in 0..trials {
        // Connection churn before each trial, as the long poll's tests do.
        let churned: Vec<Client> = (0..1 + trial % 4)
            .map(|_| ok(cluster.connect_to(db), "churn"))
            .collect();
        drop(churned);
        ok(
            main.execute("DELETE FROM workfence.items WHERE queue = $1", &[&QUEUE]),
            "clear",
        );
        enqueue(&mut main, "report", &json!({}), 0, "keep");
        let (id, epoch, ..) = claim(&mut main, "w", "1 minute").expect("claimed");
        let (state, latency) = thread::scope(|s| {
            let handle = awaiter(s, &cluster, db, &mut observer, "report");
            assert!(finish(&mut main, id, "w", epoch, &json!({ "ok": trial })));
            let committed = Instant::now();
            let (state, at) = handle.join().expect("awaiter");
            (state, at.saturating_duration_since(committed))
        });
        assert_eq!(state, "done");
        latencies.push(latency);
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "work_await after the finish's commit: n={} p50={:.2} ms p99={:.2} ms max={:.2} ms",
        latencies.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
    );
    assert!(at(0.99) < Duration::from_millis(100), "p99 {:?}", at(0.99));
}

#[test]
fn an_awaiter_whose_client_goes_away_ends_its_session() {
    let cluster = common::shared_cluster();
    let db = "life_await_gone";
    let mut main = database(&cluster, db);
    enqueue(&mut main, "slow", &json!({}), 60_000, "keep");
    let ended = common::killed_client_ends_its_session(
        &cluster,
        &mut main,
        db,
        "pg_workfence gone awaiter",
        &[
            "SET workfence.long_poll_max = '1h'",
            "SELECT * FROM workfence.work_await('life', 'slow', '10 minutes')",
        ],
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS a
                          JOIN pg_catalog.pg_locks AS l ON l.pid = a.pid
                         WHERE a.application_name = $1 AND l.locktype = 'advisory'
                           AND l.objsubid = 22369)",
    );
    println!("life: an await ended {ended:?} after its client was killed");
    assert!(ended < Duration::from_secs(5), "ended after {ended:?}");
}

#[test]
fn waiting_needs_read_committed_and_a_missing_key_returns_nothing() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_await_rr");
    assert!(ok(
        c.query(
            "SELECT * FROM workfence.work_await($1, 'none', '1 second')",
            &[&QUEUE]
        ),
        "await of a missing key"
    )
    .is_empty());
    enqueue(&mut c, "k", &json!({}), 0, "keep");
    ok(
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        "BEGIN",
    );
    let err = c
        .query(
            "SELECT * FROM workfence.work_await($1, 'k', '1 second')",
            &[&QUEUE],
        )
        .expect_err("25000");
    assert_eq!(err.code().map(|code| code.code()), Some("25000"), "{err}");
    ok(c.batch_execute("ROLLBACK"), "ROLLBACK");
}

#[test]
fn a_replaced_item_whose_final_attempt_lapses_runs_once_more() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_dead_letter");
    ok(
        c.execute(
            "SELECT workfence.work_enqueue($1, '{\"v\": 1}', 'once', max_attempts => 1)",
            &[&QUEUE],
        ),
        "enqueue",
    );
    let (id, epoch, ..) = claim(&mut c, "a", "1 microsecond").expect("claimed");
    let (same, _) = enqueue(&mut c, "once", &json!({ "v": 2 }), 0, "replace");
    assert_eq!(same, id);
    // The lease (1 µs) has lapsed on its final attempt: the next claim
    // dead-letters it and, in the same transaction, the replace sends it
    // round once more; the claim after that takes it.
    assert!(
        claim(&mut c, "b", "1 minute").is_none(),
        "the dead letter is not handed out"
    );
    let state: (String, i32) = {
        let row = ok(
            c.query_one(
                "SELECT state, attempts FROM workfence.work_item($1)",
                &[&id],
            ),
            "work_item",
        );
        (row.get(0), row.get(1))
    };
    assert_eq!(
        state,
        ("pending".to_string(), 0),
        "run once more, attempts afresh"
    );
    let (again, epoch2, attempt, payload, _) =
        claim(&mut c, "b", "1 minute").expect("the run once more");
    assert_eq!((again, attempt, payload), (id, 1, json!({ "v": 2 })));
    assert!(epoch2 > epoch);
}

/// Claims of `queue` one at a time by `w`, each finished at once, until a
/// claim returns nothing: the keys in the order they ran.
fn drain(c: &mut Client, queue: &str) -> Vec<String> {
    let mut ran = Vec::new();
    loop {
        let row = ok(
            c.query_opt(
                "SELECT id, epoch, key FROM workfence.work_claim($1, 'w', '1 minute')",
                &[&queue],
            ),
            "work_claim",
        );
        let Some(row) = row else { break };
        let (id, epoch, key): (i64, i64, String) = (row.get(0), row.get(1), row.get(2));
        assert!(finish(c, id, "w", epoch, &json!(null)));
        ran.push(key);
    }
    ran
}

#[test]
fn a_throttle_of_a_grouped_item_while_a_claim_waits_strands_no_group() {
    let cluster = common::shared_cluster();
    let db = "life_group_throttle";
    let mut p = database(&cluster, db);
    let mut observer = ok(cluster.connect_to(db), "observer");
    ok(
        p.batch_execute(
            "SELECT workfence.work_enqueue('g', '{}', k, group_key => 'g')
               FROM unnest('{x,y,z}'::text[]) AS k",
        ),
        "enqueue x, y, z in one group",
    );
    // The producer replaces y's payload and holds its transaction open.
    ok(p.batch_execute("BEGIN"), "BEGIN");
    ok(
        p.execute(
            "SELECT workfence.work_enqueue('g', '{\"v\": 2}', 'y', on_conflict => 'preserve_run_at')",
            &[],
        ),
        "throttle y",
    );
    // A claim of the queue meanwhile: it waits for the producer (0.12.0
    // before issue 35's review: on y's row, in the claim that makes the
    // group's heads, which then strands the group) or passes over the
    // group the producer holds (now: its lock is taken first).
    let mut c = ok(cluster.connect_to(db), "claimer");
    let pid = common::backend_pid(&mut c);
    let returned = std::sync::atomic::AtomicBool::new(false);
    let first = thread::scope(|s| {
        let claim = s.spawn(|| {
            let rows = ok(
                c.query(
                    "SELECT id, epoch, key FROM workfence.work_claim('g', 'w', '1 minute')",
                    &[],
                ),
                "the claim beside the producer",
            );
            returned.store(true, std::sync::atomic::Ordering::SeqCst);
            rows.first().map(|r| {
                (
                    r.get::<_, i64>(0),
                    r.get::<_, i64>(1),
                    r.get::<_, String>(2),
                )
            })
        });
        let started = Instant::now();
        loop {
            if returned.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let waiting: bool = common::scalar(
                &mut observer,
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                                 WHERE pid = $1 AND wait_event_type = 'Lock')",
                &[&pid],
            );
            if waiting {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the claim neither waited nor returned"
            );
        }
        ok(p.batch_execute("COMMIT"), "COMMIT");
        claim.join().expect("claim")
    });
    let mut ran = Vec::new();
    if let Some((id, epoch, key)) = first {
        assert!(finish(&mut p, id, "w", epoch, &json!(null)));
        ran.push(key);
    }
    ran.extend(drain(&mut p, "g"));
    assert_eq!(ran, ["x", "y", "z"], "the group went on in order");
}

#[test]
fn a_grouped_head_moved_later_holds_up_no_other_item() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_group_later");
    ok(
        c.batch_execute(
            "SELECT workfence.work_enqueue('h', '{}', k, group_key => 'g')
               FROM unnest('{x1,x2}'::text[]) AS k",
        ),
        "enqueue x1, x2 in one group",
    );
    assert_eq!(drain_one(&mut c, "h"), Some("x1".to_string()));
    // x2 is the group's head now (its turn set); it is claimed, and a
    // replace moves its run once more ten minutes out.
    let row = ok(
        c.query_one(
            "SELECT id, epoch FROM workfence.work_claim('h', 'w', '1 minute')",
            &[],
        ),
        "claim x2",
    );
    let (id, epoch): (i64, i64) = (row.get(0), row.get(1));
    ok(
        c.execute(
            "SELECT workfence.work_enqueue('h', '{\"v\": 2}', 'x2',
                 run_at => pg_catalog.clock_timestamp() + interval '10 minutes',
                 on_conflict => 'replace')",
            &[],
        ),
        "replace x2",
    );
    assert!(finish(&mut c, id, "w", epoch, &json!(null)));
    ok(
        c.execute("SELECT workfence.work_enqueue('h', '{}', 'plain')", &[]),
        "an item in no group",
    );
    // A one-item claim takes the item that is due, not the future head.
    assert_eq!(drain_one(&mut c, "h"), Some("plain".to_string()));
}

/// One claim of `queue`, finished at once: its key.
fn drain_one(c: &mut Client, queue: &str) -> Option<String> {
    let row = ok(
        c.query_opt(
            "SELECT id, epoch, key FROM workfence.work_claim($1, 'w', '1 minute')",
            &[&queue],
        ),
        "work_claim",
    )?;
    let (id, epoch, key): (i64, i64, String) = (row.get(0), row.get(1), row.get(2));
    assert!(finish(c, id, "w", epoch, &json!(null)));
    Some(key)
}

#[test]
fn a_checkpoint_survives_a_release_and_belongs_to_its_payload() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_release");
    enqueue(&mut c, "r", &json!({ "file": "v1" }), 0, "keep");
    // A graceful shutdown: checkpoint, then release (a run with a
    // checkpoint keeps its attempt and gets one more: the next claim is
    // attempt 2 of 26, and hands the checkpoint back).
    let (id, epoch, attempt, ..) = claim(&mut c, "a", "1 minute").expect("claimed");
    assert_eq!(attempt, 1);
    assert!(progress(&mut c, id, "a", epoch, &json!({ "cursor": 500 })));
    assert!(ok(
        c.query_one("SELECT workfence.work_release($1, 'a', $2)", &[&id, &epoch]),
        "release"
    )
    .get::<_, bool>(0));
    let (_, epoch, attempt, _, checkpoint) = claim(&mut c, "b", "1 minute").expect("again");
    assert_eq!((attempt, checkpoint), (2, Some(json!({ "cursor": 500 }))));
    let max_attempts: i32 = common::scalar(
        &mut c,
        "SELECT max_attempts FROM workfence.work_item($1)",
        &[&id],
    );
    assert_eq!(max_attempts, 26, "the attempts left are the same");
    // A replace while it runs: the next run has a new payload, and neither
    // the old checkpoint nor one the replaced run writes afterwards.
    enqueue(&mut c, "r", &json!({ "file": "v2" }), 0, "replace");
    assert!(progress(&mut c, id, "b", epoch, &json!({ "cursor": 900 })));
    ok(
        c.execute("SELECT workfence.work_release($1, 'b', $2)", &[&id, &epoch]),
        "release",
    );
    let (_, epoch, _, payload, checkpoint) = claim(&mut c, "c", "1 minute").expect("v2");
    assert_eq!((payload, checkpoint), (json!({ "file": "v2" }), None));
    // The new payload's own checkpoint is handed on.
    assert!(progress(&mut c, id, "c", epoch, &json!({ "cursor": 7 })));
    ok(
        c.execute(
            "SELECT workfence.work_fail($1, 'c', $2, 'boom', '0')",
            &[&id, &epoch],
        ),
        "fail",
    );
    let (.., checkpoint) = claim(&mut c, "d", "1 minute").expect("retry");
    assert_eq!(checkpoint, Some(json!({ "cursor": 7 })));
}

#[test]
fn a_checkpoint_over_64_kib_is_refused_however_it_is_stored() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_big");
    enqueue(&mut c, "big", &json!({}), 0, "keep");
    let (id, epoch, ..) = claim(&mut c, "w", "1 minute").expect("claimed");
    // 640 KB stored out of line (a TOAST pointer when read back), and 1 MB
    // that compresses to a few KB in line.
    ok(
        c.batch_execute(
            "CREATE TABLE big (name text, j jsonb);
             ALTER TABLE big ALTER COLUMN j SET STORAGE EXTERNAL;
             INSERT INTO big SELECT 'external', pg_catalog.to_jsonb(pg_catalog.string_agg(pg_catalog.md5(g::text), ''))
               FROM generate_series(1, 20000) AS g;
             INSERT INTO big SELECT 'compressed', pg_catalog.to_jsonb(pg_catalog.repeat('a', 1000000));",
        ),
        "big values",
    );
    for name in ["external", "compressed"] {
        let err = c
            .query_one(
                "SELECT workfence.work_progress($1, 'w', $2, (SELECT j FROM big WHERE name = $3))",
                &[&id, &epoch, &name],
            )
            .expect_err("over 64 KiB");
        assert_eq!(err.code().map(|s| s.code()), Some("22023"), "{name}: {err}");
    }
}

/// A W3C `traceparent` of the enqueuing request, and another one's.
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const LATER_TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// `work_enqueue(queue, key, trace => ...)` with `on_conflict`.
fn enqueue_traced(c: &mut Client, queue: &str, key: &str, trace: Option<&str>, mode: &str) {
    ok(
        c.execute(
            "SELECT * FROM workfence.work_enqueue($1, key => $2, on_conflict => $3, trace => $4)",
            &[&queue, &key, &mode, &trace],
        ),
        "work_enqueue with a trace",
    );
}

/// Trace context (0.12.0, issue 36): the `traceparent` an item was
/// enqueued with comes back in the `trace` column of every claim form
/// (a plain queue's batch and one-item claims, a lapsed lease claimed anew,
/// `work_claim_key`, the fused calls, a limited queue's and a grouped
/// queue's claims), NULL for an item enqueued without one; a debounce
/// gives the item the new request's trace with its payload, and anything
/// but a traceparent is refused with 22023 before anything is written.
#[test]
fn the_trace_an_item_was_enqueued_with_comes_back_with_every_claim() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "life_trace");
    let traces = |rows: Vec<postgres::Row>| -> Vec<(String, Option<String>)> {
        rows.iter()
            .filter(|r| r.get::<_, Option<i64>>("id").is_some())
            .map(|r| (r.get("key"), r.get("trace")))
            .collect()
    };
    let some = |key: &str, trace: &str| (key.to_owned(), Some(trace.to_owned()));

    // A plain queue: a batch claim, then a one-item claim.
    enqueue_traced(&mut c, "plain", "a", Some(TRACE), "keep");
    enqueue_traced(&mut c, "plain", "b", None, "keep");
    let batch = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('plain', 'w', '1 minute', 2)",
            &[],
        ),
        "a batch claim",
    );
    assert_eq!(
        traces(batch),
        vec![some("a", TRACE), ("b".to_owned(), None)]
    );
    enqueue_traced(&mut c, "plain", "c", Some(LATER_TRACE), "keep");
    let one = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('plain', 'w', '1 minute')",
            &[],
        ),
        "a one-item claim",
    );
    assert_eq!(traces(one), vec![some("c", LATER_TRACE)]);

    // A lapsed lease claimed anew keeps its trace (the claim's other branch).
    enqueue_traced(&mut c, "lapsing", "l", Some(TRACE), "keep");
    ok(
        c.execute(
            "SELECT * FROM workfence.work_claim('lapsing', 'w', '1 millisecond')",
            &[],
        ),
        "a short lease",
    );
    let mut observer = ok(cluster.connect_to("life_trace"), "observer");
    poll_until(
        &mut observer,
        "SELECT lease_until < clock_timestamp() FROM workfence.items WHERE key = 'l'",
        &[],
        "the lease lapsed",
    );
    let anew = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('lapsing', 'w2', '1 minute')",
            &[],
        ),
        "the lapsed lease claimed anew",
    );
    assert_eq!(traces(anew), vec![some("l", TRACE)]);

    // work_claim_key, and the fused calls.
    enqueue_traced(&mut c, "keyed", "k", Some(TRACE), "keep");
    let keyed = ok(
        c.query(
            "SELECT * FROM workfence.work_claim_key('keyed', 'k', 'w', '1 minute')",
            &[],
        ),
        "work_claim_key",
    );
    let first: (i64, i64) = (keyed[0].get("id"), keyed[0].get("epoch"));
    assert_eq!(traces(keyed), vec![some("k", TRACE)]);
    enqueue_traced(&mut c, "keyed", "next", Some(LATER_TRACE), "keep");
    let fused = ok(
        c.query(
            "SELECT * FROM workfence.work_finish_and_claim('keyed', 'w', '1 minute', $1, $2)",
            &[&first.0, &first.1],
        ),
        "work_finish_and_claim",
    );
    let next: (i64, i64) = (fused[0].get("id"), fused[0].get("epoch"));
    assert_eq!(traces(fused), vec![some("next", LATER_TRACE)]);
    let nothing = ok(
        c.query(
            "SELECT * FROM workfence.work_fail_and_claim('keyed', 'w', '1 minute', $1, $2, 'boom')",
            &[&next.0, &next.1],
        ),
        "work_fail_and_claim",
    );
    // The failed item is due again only after its backoff: nothing claimed.
    assert!(traces(nothing).is_empty());

    // A limited queue's claims (slots) and a grouped queue's.
    ok(
        c.execute(
            "SELECT workfence.work_limit('limited', concurrency => 2)",
            &[],
        ),
        "work_limit",
    );
    enqueue_traced(&mut c, "limited", "x", Some(TRACE), "keep");
    enqueue_traced(&mut c, "limited", "y", None, "keep");
    let limited = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('limited', 'w', '1 minute', 2)",
            &[],
        ),
        "a limited queue's claim",
    );
    assert_eq!(
        traces(limited),
        vec![some("x", TRACE), ("y".to_owned(), None)]
    );
    ok(
        c.execute(
            "SELECT * FROM workfence.work_enqueue('grouped', key => 'g', group_key => 'customer',
                                                 trace => $1)",
            &[&TRACE],
        ),
        "a grouped item",
    );
    let grouped = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('grouped', 'w', '1 minute')",
            &[],
        ),
        "a grouped queue's claim",
    );
    assert_eq!(traces(grouped), vec![some("g", TRACE)]);

    // A debounce: the item takes the new request's trace with its payload.
    enqueue_traced(&mut c, "debounced", "d", Some(TRACE), "replace");
    enqueue_traced(&mut c, "debounced", "d", Some(LATER_TRACE), "replace");
    let debounced = ok(
        c.query(
            "SELECT * FROM workfence.work_claim('debounced', 'w', '1 minute')",
            &[],
        ),
        "the debounced item",
    );
    assert_eq!(traces(debounced), vec![some("d", LATER_TRACE)]);

    // Anything but a traceparent is refused, and nothing is written.
    for bad in [
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        let err = c
            .execute(
                "SELECT * FROM workfence.work_enqueue('refused', key => 'r', trace => $1)",
                &[&bad],
            )
            .expect_err("a malformed traceparent");
        assert_eq!(
            err.code(),
            Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE),
            "{bad}: {err}"
        );
    }
    let written: i64 = common::scalar(
        &mut c,
        "SELECT count(*) FROM workfence.items WHERE queue = 'refused'",
        &[],
    );
    assert_eq!(written, 0);
}
