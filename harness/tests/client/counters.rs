//! The server's per-queue counters and histograms (0.12.0, issue 36): the
//! view `work_queue_counters`, from real client connections to a server
//! that preloads the library (the counts live in shared memory).
//!
//! What a user relies on: each count is the number of items that went
//! through it, counted once its transaction commits (a rolled-back
//! transaction or savepoint counts nothing, a prepared one counts at its
//! prepare); a histogram's buckets are cumulative and its count is the
//! number of observations; a role sees only the queues it may read; and
//! reading the view touches no item.
//!
//! Each test has a database and queues of its own (the counters are per
//! database and queue), so the expected values are exact, not deltas.

use crate::common;

use std::sync::Arc;

use common::ok;
use postgres::Client;
use serde_json::json;
use workfence_harness::calls::{self, generated, Enqueue};
use workfence_harness::Cluster;

/// One cluster for this file's tests, with the library preloaded and room
/// for a prepared transaction.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_built(
        |builder| {
            builder
                .setting("shared_preload_libraries", "pg_workfence")
                .setting("max_prepared_transactions", "2")
        },
        |_| {},
    )
}

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "create database");
    ok(cluster.connect_to(name), "connect")
}

/// The counts of `queue` in column order (enqueued, claimed, done, failed,
/// retried, released, cancelled, refused, lapsed), or `None` when the view
/// has no row for it.
fn counts(c: &mut Client, queue: &str) -> Option<[i64; 9]> {
    let rows = ok(generated::queue_counter_rows(c), "queue_counter_rows");
    rows.iter()
        .find(|r| r.queue.as_deref() == Some(queue))
        .map(|r| {
            [
                r.enqueued,
                r.claimed,
                r.done,
                r.failed,
                r.retried,
                r.released,
                r.cancelled,
                r.refused,
                r.lapsed,
            ]
            .map(|n| n.expect("a count is never NULL"))
        })
}

#[test]
fn each_count_is_the_items_that_went_through_it_once_their_transaction_committed() {
    let cluster = cluster();
    let mut c = database(&cluster, "counted");
    let q = "counted";
    for key in ["a", "b", "c", "d", "e"] {
        common::enqueue_new(&mut c, &Enqueue::new(q).key(key).max_attempts(2));
    }
    // A rolled-back enqueue and a rolled-back claim count nothing.
    ok(c.batch_execute("BEGIN"), "begin");
    common::enqueue_new(&mut c, &Enqueue::new(q).key("rolled back"));
    common::claimed_one(&mut c, q, "w", "1 minute");
    ok(c.batch_execute("ROLLBACK"), "rollback");
    // A claim inside a savepoint that rolls back counts nothing either,
    // one before it does.
    ok(c.batch_execute("BEGIN"), "begin");
    let a = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    ok(c.batch_execute("SAVEPOINT s"), "savepoint");
    common::claimed_one(&mut c, q, "w", "1 minute");
    ok(c.batch_execute("ROLLBACK TO SAVEPOINT s"), "rollback to");
    // Not counted until the commit.
    assert_eq!(counts(&mut c, q), Some([5, 0, 0, 0, 0, 0, 0, 0, 0]));
    ok(c.batch_execute("COMMIT"), "commit");
    assert_eq!(counts(&mut c, q), Some([5, 1, 0, 0, 0, 0, 0, 0, 0]));

    assert!(ok(calls::finish(&mut c, &a, Some(&json!(1))), "finish"));
    // A repeated finish with the same token is answered true but finishes
    // nothing more; a stale token is refused (counted at once).
    assert!(ok(calls::finish(&mut c, &a, None), "finish again"));
    assert!(!ok(
        calls::release(&mut c, &a, None),
        "release of a done item"
    ));
    let b = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(
        calls::fail(&mut c, &b, "once", None),
        "fail, attempts left"
    ));
    let c3 = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(calls::release(&mut c, &c3, None), "release"));
    assert!(ok(calls::cancel(&mut c, q, "e"), "cancel"));
    // b again (its retry waits out a backoff; moved to now) ...
    let now = calls::RunAt::In("0 seconds".into());
    assert!(ok(calls::reschedule(&mut c, q, "b", &now), "reschedule"));
    let b2 = ok(calls::claim_key(&mut c, q, "b", "w", "1 minute"), "claim b")
        .expect("b is due")
        .token("w");
    // ... fails its final attempt: a dead letter, then an operator's retry.
    assert!(ok(calls::fail(&mut c, &b2, "twice", None), "final fail"));
    assert!(ok(calls::retry(&mut c, q, "b", None), "work_retry"));
    // enqueued 5; claimed a, b, c, b; done a; failed b; retried b (fail)
    // and b (work_retry); released c; cancelled e; refused the release.
    assert_eq!(counts(&mut c, q), Some([5, 4, 1, 1, 2, 1, 1, 1, 0]));
}

/// (bucket_le, time_in_queue_buckets, time_in_queue_sum, run_time_buckets,
/// run_time_sum) of `queue`.
type Histograms = (Vec<f64>, Vec<i64>, f64, Vec<i64>, f64);

fn histograms(c: &mut Client, queue: &str) -> Histograms {
    let rows = ok(generated::queue_counter_rows(c), "queue_counter_rows");
    let r = rows
        .into_iter()
        .find(|r| r.queue.as_deref() == Some(queue))
        .unwrap_or_else(|| panic!("no counters of {queue}"));
    (
        r.bucket_le.expect("bucket_le"),
        r.time_in_queue_buckets.expect("time_in_queue_buckets"),
        r.time_in_queue_sum.expect("time_in_queue_sum"),
        r.run_time_buckets.expect("run_time_buckets"),
        r.run_time_sum.expect("run_time_sum"),
    )
}

/// The cumulative count of `buckets` at the bound `le` of `bounds`.
fn at(bounds: &[f64], buckets: &[i64], le: f64) -> i64 {
    let i = bounds
        .iter()
        .position(|b| *b == le)
        .unwrap_or_else(|| panic!("no bound {le} in {bounds:?}"));
    buckets[i]
}

#[test]
fn time_in_queue_counts_from_run_at_and_run_time_from_the_claim() {
    let cluster = cluster();
    let mut c = database(&cluster, "timed");
    let q = "timed";
    // Due 3 s ago: claimed now, it waited at least 3 s (and far less than
    // 30 s on any machine), so it lands in the 5 s bucket, not 2.5 s.
    common::enqueue_new(
        &mut c,
        &Enqueue::new(q)
            .key("late")
            .run_at(calls::RunAt::In("-3 seconds".into())),
    );
    let token = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    // The run lasts at least 60 ms by the server's clock: the measured
    // quantity itself, not a synchronisation.
    ok(
        c.batch_execute("SELECT pg_catalog.pg_sleep(0.06)"),
        "a 60 ms run",
    );
    assert!(ok(calls::finish(&mut c, &token, None), "finish"));

    let (bounds, waited, waited_sum, ran, ran_sum) = histograms(&mut c, q);
    assert_eq!(bounds.len(), 17);
    assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
    assert!(bounds[16].is_infinite());
    for buckets in [&waited, &ran] {
        assert_eq!(buckets.len(), bounds.len());
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "cumulative: {buckets:?}"
        );
        assert_eq!(buckets[16], 1, "one observation: {buckets:?}");
    }
    assert_eq!(at(&bounds, &waited, 2.5), 0, "{waited:?}");
    assert_eq!(at(&bounds, &waited, 5.0), 1, "{waited:?}");
    assert!(
        (3.0..30.0).contains(&waited_sum),
        "time in queue {waited_sum} s"
    );
    assert_eq!(at(&bounds, &ran, 0.05), 0, "{ran:?}");
    assert!((0.06..30.0).contains(&ran_sum), "run time {ran_sum} s");
}

#[test]
fn a_prepared_transaction_counts_when_it_is_prepared() {
    let cluster = cluster();
    let mut c = database(&cluster, "prepared");
    let q = "prepared";
    common::enqueue_new(&mut c, &Enqueue::new(q).key("p"));
    ok(c.batch_execute("BEGIN"), "begin");
    common::claimed_one(&mut c, q, "w", "1 minute");
    ok(c.batch_execute("PREPARE TRANSACTION 'counted'"), "prepare");
    // COMMIT PREPARED runs no extension code: the claim counts now ...
    assert_eq!(counts(&mut c, q), Some([1, 1, 0, 0, 0, 0, 0, 0, 0]));
    // ... and a ROLLBACK PREPARED leaves it counted (documented).
    ok(
        c.batch_execute("ROLLBACK PREPARED 'counted'"),
        "rollback prepared",
    );
    assert_eq!(counts(&mut c, q), Some([1, 1, 0, 0, 0, 0, 0, 0, 0]));
}

#[test]
fn a_role_sees_the_counters_of_the_queues_it_may_read_only() {
    let cluster = cluster();
    let mut c = database(&cluster, "scoped");
    for q in ["billing.a", "search.a"] {
        common::enqueue_new(&mut c, &Enqueue::new(q).key("k"));
    }
    ok(
        c.batch_execute(
            "CREATE ROLE counters_reader LOGIN;
             GRANT USAGE ON SCHEMA workfence TO counters_reader;
             GRANT SELECT ON workfence.work_queue_counters TO counters_reader;
             GRANT EXECUTE ON FUNCTION workfence.queue_counter_rows() TO counters_reader;
             GRANT SELECT ON workfence.work_queue_history TO counters_reader;
             GRANT EXECUTE ON FUNCTION workfence.queue_history_rows(text) TO counters_reader;
             SELECT workfence.work_grant('read', 'billing.*', 'counters_reader');
             SELECT workfence.work_enforce_grants(true);",
        ),
        "a reader of billing.*",
    );
    let mut reader = common::connect_as(&cluster, "scoped", "counters_reader", "reader");
    let seen: Vec<String> = ok(
        reader.query(
            "SELECT queue FROM workfence.work_queue_counters ORDER BY queue",
            &[],
        ),
        "the view as the reader",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(seen, vec!["billing.a".to_owned()]);
    // So with each queue's last hour: the reader's queues only, and a
    // queue it may not read named is refused.
    let seen: Vec<String> = ok(
        reader.query(
            "SELECT DISTINCT queue FROM workfence.work_queue_history ORDER BY queue",
            &[],
        ),
        "the history as the reader",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(seen, vec!["billing.a".to_owned()]);
    let refused = reader
        .query(
            "SELECT * FROM workfence.queue_history_rows('search.a')",
            &[],
        )
        .expect_err("another team's history");
    assert_eq!(
        refused.code(),
        Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // The owner sees both.
    assert!(counts(&mut c, "search.a").is_some());
    assert_eq!(history(&mut c, "search.a").len(), 60);
    ok(
        c.batch_execute("SELECT workfence.work_enforce_grants(false)"),
        "grants off",
    );
}

/// One row of `work_queue_history`.
#[derive(Debug)]
struct Minute {
    minute: std::time::SystemTime,
    enqueued: i64,
    claimed: i64,
    done: i64,
    failed: i64,
    p50: Option<f64>,
    p99: Option<f64>,
    backlog: Option<i64>,
}

/// `queue`'s last hour, oldest minute first.
fn history(c: &mut Client, queue: &str) -> Vec<Minute> {
    ok(
        c.query(
            "SELECT minute, enqueued, claimed, done, failed, time_in_queue_p50,
                    time_in_queue_p99, backlog
               FROM workfence.queue_history_rows($1)",
            &[&queue],
        ),
        "queue_history_rows",
    )
    .iter()
    .map(|r| Minute {
        minute: r.get(0),
        enqueued: r.get(1),
        claimed: r.get(2),
        done: r.get(3),
        failed: r.get(4),
        p50: r.get(5),
        p99: r.get(6),
        backlog: r.get(7),
    })
    .collect()
}

/// A queue's last hour (`work_queue_history`, the dashboard's charts): 60
/// minutes up to the current one, whose counts add up to what the
/// counters counted in them (a rolled-back transaction nothing), with the
/// time in queue of their claims and the backlog after their last commit.
#[test]
fn the_last_hour_adds_up_each_minutes_commits_and_ends_with_the_backlog() {
    let cluster = cluster();
    let mut c = database(&cluster, "history");
    assert!(history(&mut c, "h").is_empty(), "no history before a count");
    // The state counts are kept from their first read on (the backlog is
    // unknown before).
    states(&mut c, "h");
    let started: std::time::SystemTime = common::scalar(
        &mut c,
        "SELECT date_trunc('minute', clock_timestamp())",
        &[],
    );
    for k in ["a", "b", "c", "d"] {
        common::enqueue_new(&mut c, &Enqueue::new("h").key(k).max_attempts(1));
    }
    let mut tx = ok(c.transaction(), "BEGIN");
    common::enqueue_new(&mut tx, &Enqueue::new("h").key("rolled back"));
    ok(tx.rollback(), "ROLLBACK");
    let claimed = ok(
        calls::claim(&mut c, "h", "w", "1 minute", Some(2), None),
        "claim",
    );
    assert_eq!(claimed.len(), 2);
    assert!(ok(
        calls::finish(&mut c, &claimed[0].token("w"), None),
        "finish"
    ));
    assert!(ok(
        calls::fail(&mut c, &claimed[1].token("w"), "boom", None),
        "fail"
    ));
    let minute_now = |c: &mut Client| -> std::time::SystemTime {
        common::scalar(c, "SELECT date_trunc('minute', clock_timestamp())", &[])
    };
    let before = minute_now(&mut c);
    let hour = history(&mut c, "h");
    let after = minute_now(&mut c);
    assert_eq!(hour.len(), 60, "{hour:?}");
    let last = hour.last().expect("60 minutes");
    assert!(
        before <= last.minute && last.minute <= after,
        "the last row is the current minute: {hour:?}"
    );
    assert!(
        hour.windows(2).all(|w| w[1]
            .minute
            .duration_since(w[0].minute)
            .is_ok_and(|d| d.as_secs() == 60)),
        "one row a minute: {hour:?}"
    );
    let sum = |f: fn(&Minute) -> i64| hour.iter().map(f).sum::<i64>();
    assert_eq!(
        [
            sum(|m| m.enqueued),
            sum(|m| m.claimed),
            sum(|m| m.done),
            sum(|m| m.failed)
        ],
        [4, 2, 1, 1]
    );
    // Nothing was counted before the test's first commit; its claims came
    // at once after their enqueues (well within 30 s, on a loaded machine).
    for m in &hour {
        if m.minute < started {
            assert_eq!((m.claimed, m.backlog), (0, None), "{m:?}");
        }
        if m.claimed > 0 {
            let (p50, p99) = (m.p50.expect("p50"), m.p99.expect("p99"));
            assert!(p50 <= p99 && p99 <= 30.0, "{m:?}");
        } else {
            assert_eq!((m.p50, m.p99), (None, None), "{m:?}");
        }
    }
    assert_eq!(last.backlog, Some(2), "two items pending: {hour:?}");
    // A bad queue is refused as every function refuses it.
    let bad = c
        .query("SELECT * FROM workfence.queue_history_rows('')", &[])
        .expect_err("an empty queue name");
    assert_eq!(
        bad.code(),
        Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE)
    );
}

#[test]
fn reading_the_counters_reads_no_item() {
    let cluster = cluster();
    let mut c = database(&cluster, "unread");
    common::enqueue_new(&mut c, &Enqueue::new("unread").key("k"));
    // The view is a function scan of shared memory: its plan has no
    // relation in it at all (work_queue_stats' reads workfence.items).
    let plan: Vec<String> = ok(
        c.query(
            "EXPLAIN (COSTS OFF) SELECT * FROM workfence.work_queue_counters",
            &[],
        ),
        "explain",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Function Scan on queue_counter_rows"),
        "{plan}"
    );
    assert!(!plan.contains("items"), "{plan}");
}

/// The state counts `work_queue_stats` reads, of `queue`: (pending,
/// claimed, done, failed, cancelled), zeros when it has no row.
fn states(c: &mut Client, queue: &str) -> [i64; 5] {
    state_counts(c, queue, false)
}

/// [`states`] after a rebuild (`queue_state_counts(rebuild => true)`).
fn states_rebuilt(c: &mut Client, queue: &str) -> [i64; 5] {
    state_counts(c, queue, true)
}

fn state_counts(c: &mut Client, queue: &str, rebuild: bool) -> [i64; 5] {
    let rows = ok(
        c.query(
            "SELECT s.pending, s.claimed, s.done, s.failed, s.cancelled
               FROM workfence.queue_state_counts(rebuild => $2) AS s WHERE s.queue = $1",
            &[&queue, &rebuild],
        ),
        "queue_state_counts",
    );
    rows.first().map_or([0; 5], |r| {
        [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)]
    })
}

/// The same counted from the items, by `work_queue_stats_exact`.
fn exact(c: &mut Client, queue: &str) -> [i64; 5] {
    let rows = ok(
        c.query(
            "SELECT s.pending + s.scheduled, s.claimed + s.expired, s.done, s.failed, s.cancelled
               FROM workfence.work_queue_stats_exact AS s WHERE s.queue = $1",
            &[&queue],
        ),
        "work_queue_stats_exact",
    );
    rows.first().map_or([0; 5], |r| {
        [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)]
    })
}

#[test]
fn the_state_counts_follow_every_change_and_a_restart_rebuilds_them() {
    let mut cluster = ok(
        Cluster::builder(common::scratch_base())
            .setting("shared_preload_libraries", "pg_workfence")
            .start(),
        "a preloaded cluster",
    );
    ok(cluster.create_database("states"), "create database");
    let mut c = ok(cluster.connect_to("states"), "connect");
    let q = "states";
    for key in ["a", "b", "c", "d", "e", "f", "g"] {
        common::enqueue_new(&mut c, &Enqueue::new(q).key(key).max_attempts(1));
    }
    // The first read rebuilds them (nothing counted yet), from here kept.
    assert_eq!(states(&mut c, q), [7, 0, 0, 0, 0]);
    let a = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(calls::finish(&mut c, &a, None), "finish a"));
    let b = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(
        calls::fail(&mut c, &b, "final", None),
        "fail b (its only attempt)"
    ));
    let cc = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(calls::release(&mut c, &cc, None), "release c"));
    assert!(ok(calls::cancel(&mut c, q, "d"), "cancel d (pending)"));
    let claimed = common::claimed_one(&mut c, q, "w", "1 minute");
    assert!(ok(
        calls::cancel(&mut c, q, &claimed.key),
        "cancel a claimed item"
    ));
    assert!(ok(calls::retry(&mut c, q, "b", None), "retry b (failed)"));
    // A finished item run again by on_conflict.
    let again = common::enqueued(&mut c, &Enqueue::new(q).key("a").on_conflict("replace"));
    assert!(!again.inserted);
    // A rolled-back change counts nothing.
    ok(c.batch_execute("BEGIN"), "begin");
    assert!(ok(calls::cancel(&mut c, q, "f"), "cancel f"));
    ok(c.batch_execute("ROLLBACK"), "rollback");
    assert_eq!(states(&mut c, q), exact(&mut c, q), "after the verbs");
    // A purge takes the finished items out of the counts.
    ok(c.batch_execute("SELECT workfence.work_purge('0')"), "purge");
    assert_eq!(states(&mut c, q), exact(&mut c, q), "after the purge");
    let before = exact(&mut c, q);
    assert_ne!(before, [0; 5]);

    // A restart forgets them: the first read rebuilds them from the items.
    drop(c);
    ok(cluster.stop(), "stop");
    ok(cluster.start_again(), "start again");
    let mut c = ok(cluster.connect_to("states"), "connect again");
    assert_eq!(states(&mut c, q), before, "rebuilt after the restart");
    // Its last hour starts afresh: nothing moved since the restart, and the
    // current minute has the backlog of the rebuilt counts (a queue whose
    // workers are all down still shows what waits).
    let hour = history(&mut c, q);
    assert_eq!(hour.len(), 60, "{hour:?}");
    assert!(
        hour.iter()
            .all(|m| m.enqueued + m.claimed + m.done + m.failed == 0),
        "{hour:?}"
    );
    assert_eq!(hour.last().and_then(|m| m.backlog), Some(before[0]));
    assert!(hour[..59].iter().all(|m| m.backlog.is_none()), "{hour:?}");
    // A DELETE by hand is not seen until a rebuild is asked for.
    ok(
        c.batch_execute("DELETE FROM workfence.items WHERE key = 'g'"),
        "a delete by hand",
    );
    assert_ne!(states(&mut c, q), exact(&mut c, q));
    assert_eq!(states_rebuilt(&mut c, q), exact(&mut c, q));
}

#[test]
fn a_rebuild_counts_what_commits_while_it_runs_once() {
    let cluster = cluster();
    let mut c = database(&cluster, "rebuilt");
    let q = "rebuilt";
    common::enqueue_new(&mut c, &Enqueue::new(q).key("before"));
    // The order, made explicit with table locks: a writer in flight when
    // the rebuild takes its snapshot (so its scan cannot see it) commits
    // while the rebuild's scan waits for a lock, behind a session that
    // queued for ACCESS EXCLUSIVE behind the writer.
    let mut writer = ok(cluster.connect_to("rebuilt"), "the writer");
    ok(writer.batch_execute("BEGIN"), "begin");
    common::enqueue_new(&mut writer, &Enqueue::new(q).key("in flight"));
    let mut locker = ok(cluster.connect_to("rebuilt"), "the locker");
    let locker_pid = common::backend_pid(&mut locker);
    let lock = std::thread::spawn(move || {
        ok(
            locker.batch_execute("BEGIN; LOCK TABLE workfence.items IN ACCESS EXCLUSIVE MODE"),
            "the lock",
        );
        locker
    });
    common::poll_until(
        &mut c,
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                         WHERE pid = $1 AND wait_event_type = 'Lock')",
        &[&locker_pid],
        "the locker queued behind the writer",
    );
    let mut reader = ok(cluster.connect_to("rebuilt"), "the reader");
    let reader_pid = common::backend_pid(&mut reader);
    let rebuild = std::thread::spawn(move || {
        let rows = ok(
            reader.query(
                "SELECT s.pending FROM workfence.queue_state_counts(rebuild => true) AS s
                  WHERE s.queue = 'rebuilt'",
                &[],
            ),
            "the rebuild",
        );
        rows.first().map_or(0i64, |r| r.get(0))
    });
    // Its snapshot taken, its scan queued behind the locker.
    common::poll_until(
        &mut c,
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                         WHERE pid = $1 AND wait_event_type = 'Lock')",
        &[&reader_pid],
        "the rebuild's scan waiting for its lock",
    );
    // The writer commits during the rebuild: the locker gets its lock, and
    // lets it go.
    ok(writer.batch_execute("COMMIT"), "the writer commits");
    let mut locker = lock.join().expect("the locker's thread");
    ok(locker.batch_execute("ROLLBACK"), "the locker lets go");
    let pending = rebuild.join().expect("the rebuild's thread");
    assert_eq!(
        pending, 2,
        "before (the scan's) and in flight (its commit's), each once"
    );
    assert_eq!(states(&mut c, q), exact(&mut c, q));
    // Kept from here on.
    common::enqueue_new(&mut c, &Enqueue::new(q).key("after"));
    assert_eq!(states(&mut c, q), [3, 0, 0, 0, 0]);
}

#[test]
fn no_rebuild_runs_while_a_transaction_is_prepared_and_reads_count_the_items() {
    let cluster = cluster();
    let mut c = database(&cluster, "prepared_rebuild");
    let q = "prepared_rebuild";
    common::enqueue_new(&mut c, &Enqueue::new(q).key("a"));
    common::enqueue_new(&mut c, &Enqueue::new(q).key("b"));
    ok(c.batch_execute("BEGIN"), "begin");
    let token = common::claimed_one(&mut c, q, "w", "1 minute").token("w");
    assert!(ok(calls::finish(&mut c, &token, None), "finish"));
    ok(c.batch_execute("PREPARE TRANSACTION 'a finish'"), "prepare");
    // A rebuild now would miss the prepared finish at its COMMIT PREPARED
    // (counted at the prepare, before the rebuild): the reads count the
    // items instead, which show neither the claim nor the finish yet.
    assert_eq!(states(&mut c, q), [2, 0, 0, 0, 0]);
    ok(
        c.batch_execute("COMMIT PREPARED 'a finish'"),
        "commit prepared",
    );
    // Now a rebuild runs, and the counts are the items'.
    assert_eq!(states(&mut c, q), [1, 0, 1, 0, 0]);
    assert_eq!(states(&mut c, q), exact(&mut c, q));
}

#[test]
fn a_rebuild_cut_short_inside_an_exception_block_lets_the_next_one_run() {
    let cluster = cluster();
    let mut c = database(&cluster, "cut_short");
    let q = "cut_short";
    for key in ["a", "b"] {
        common::enqueue_new(&mut c, &Enqueue::new(q).key(key));
    }
    // The rebuild's scan cannot get its lock (held ACCESS EXCLUSIVE) and
    // fails with 55P03 inside an exception block: a subtransaction rolls
    // back, the session and its transaction go on.
    let mut locker = ok(cluster.connect_to("cut_short"), "the locker");
    ok(
        locker.batch_execute("BEGIN; LOCK TABLE workfence.items IN ACCESS EXCLUSIVE MODE"),
        "the lock",
    );
    let mut cut = ok(cluster.connect_to("cut_short"), "the cut-short rebuild");
    ok(
        cut.batch_execute(
            "SET lock_timeout = '50ms';
             DO $$ BEGIN
                 PERFORM * FROM workfence.queue_state_counts(rebuild => true);
             EXCEPTION WHEN lock_not_available THEN
                 PERFORM pg_catalog.set_config('test.caught', 'yes', false);
             END $$;",
        ),
        "the cut-short rebuild",
    );
    let caught: Option<String> = common::scalar(
        &mut cut,
        "SELECT pg_catalog.current_setting('test.caught', true)",
        &[],
    );
    let caught = caught.unwrap_or_default();
    assert_eq!(caught, "yes", "the rebuild's scan was refused its lock");
    ok(locker.batch_execute("ROLLBACK"), "the locker lets go");
    // Another session's rebuild runs (the cut-short one left nothing
    // behind, its backend still alive): from then on the counts are kept,
    // so a DELETE by hand is not seen by them (it would be, were every
    // read still counting the items).
    assert_eq!(
        states_rebuilt(&mut c, q),
        [2, 0, 0, 0, 0],
        "the next rebuild"
    );
    ok(
        c.batch_execute("DELETE FROM workfence.items WHERE queue = 'cut_short' AND key = 'a'"),
        "a delete by hand",
    );
    assert_eq!(states(&mut c, q), [2, 0, 0, 0, 0], "kept, not counted");
    assert_eq!(exact(&mut c, q), [1, 0, 0, 0, 0]);
    drop(cut);
}
