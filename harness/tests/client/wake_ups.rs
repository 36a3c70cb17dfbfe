//! The long poll's wake-ups when backends come and go, and across
//! `PREPARE TRANSACTION`, from real client connections.
//!
//! Before 0.4.0 a committing transaction looked its waiters up by backend id
//! in `ProcGlobal->allProcs` and latched the first slot with that id, which
//! after connection churn was often an exited backend's: the waiter slept
//! its whole `wait`. Here every trial first opens and closes connections
//! (and waits until their backends are gone), then starts a waiter on a new
//! connection, so backend ids and PGPROC slots are reshuffled each time.
//! Each cause of a wake-up (enqueue, release, failure with a retry, and from
//! 0.6.0 an operator's retry, reschedule and resume) is tried
//! [`trials`] times; every wake-up must arrive within [`PROMPT`], and the
//! latency distribution is printed.
//!
//! With `max_prepared_transactions > 0`: a release committed with `COMMIT
//! PREPARED` wakes a waiter; one rolled back with `ROLLBACK PREPARED` does
//! not (the waiter ends empty at its deadline and the item keeps its lease);
//! and the session that prepared sends no stale wake-up at its next commit.

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{ok, poll_until};
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, RunAt, Token};
use workfence_harness::Cluster;

const QUEUE: &str = "mail";

/// A wake-up must reach the waiter within this (the bound).
const PROMPT: Duration = Duration::from_millis(100);

/// The waiters' `wait`: a wake-up that never arrives costs this much.
const WAIT: &str = "5 seconds";

/// Trials per cause: `WORKFENCE_WAKE_TRIALS`, default 100.
fn trials() -> usize {
    std::env::var("WORKFENCE_WAKE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// One cluster, with prepared transactions enabled, for this file's tests.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_built(
        |builder| builder.setting("max_prepared_transactions", "4"),
        |_| {},
    )
}

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

/// Opens `n` connections, closes them, and returns once their backends have
/// exited (their PGPROC slots are free, with their old ids in them).
fn churn(cluster: &Cluster, db: &str, observer: &mut Client, n: usize) {
    let mut pids = Vec::with_capacity(n);
    let clients: Vec<Client> = (0..n)
        .map(|_| {
            let mut c = ok(cluster.connect_to(db), "churn connection");
            pids.push(common::backend_pid(&mut c));
            c
        })
        .collect();
    drop(clients);
    poll_until(
        observer,
        "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = ANY ($1))",
        &[&pids],
        "the churned backends to exit",
    );
}

/// What a waiting claim returned and when.
struct Returned {
    items: Vec<(i64, i64)>,
    at: Instant,
}

/// Starts `work_claim(QUEUE, 'waiter', '1 minute', 1, wait)` on a new
/// connection and returns once the server shows it sleeping in the long poll.
fn waiter<'s>(
    scope: &'s thread::Scope<'s, '_>,
    cluster: &Cluster,
    db: &str,
    observer: &mut Client,
    wait: &'static str,
) -> thread::ScopedJoinHandle<'s, Returned> {
    let mut c = common::connect_long_poller(cluster, db);
    let pid = common::backend_pid(&mut c);
    let handle = scope.spawn(move || {
        let claims = ok(
            calls::claim(&mut c, QUEUE, "waiter", "1 minute", Some(1), Some(wait)),
            "waiting claim",
        );
        Returned {
            items: claims.iter().map(|claim| (claim.id, claim.epoch)).collect(),
            at: Instant::now(),
        }
    });
    poll_until(
        observer,
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                         WHERE pid = $1 AND state = 'active' AND wait_event_type = 'Extension')",
        &[&pid],
        &format!("backend {pid} waiting in the long poll"),
    );
    handle
}

/// Enqueues an item and claims it as 'holder': its token.
fn claimed(c: &mut Client, key: &str) -> Token {
    common::enqueued_and_claimed(c, QUEUE, key, "holder", "1 minute")
}

/// Releases the holder's `token` in a transaction prepared as `gid` on
/// `main`, then ends it with `{outcome} PREPARED` (COMMIT or ROLLBACK) from
/// `resolver`, as a transaction manager would.
fn release_prepared(
    main: &mut Client,
    resolver: &mut Client,
    token: &Token,
    gid: &str,
    outcome: &str,
) {
    ok(main.batch_execute("BEGIN"), "BEGIN");
    ok(calls::release(main, token, None), "release");
    let prepare = format!("PREPARE TRANSACTION '{gid}'");
    ok(main.batch_execute(&prepare), "release, prepared");
    let end = format!("{outcome} PREPARED '{gid}'");
    ok(resolver.batch_execute(&end), "COMMIT or ROLLBACK PREPARED");
}

#[derive(Debug, Clone, Copy)]
enum Cause {
    Enqueue,
    Release,
    FailWithRetry,
    /// `work_retry` of a dead letter (0.6.0).
    Retry,
    /// `work_reschedule` of an item due in a day to now (0.6.0).
    Reschedule,
    /// `work_resume` of the paused queue an item waits in (0.6.0).
    Resume,
}

/// p50, p99 and max of `latencies`, in milliseconds.
fn summary(latencies: &mut [Duration]) -> String {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    format!(
        "n={} p50={:.2} ms p99={:.2} ms max={:.2} ms",
        latencies.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
    )
}

#[test]
fn every_wake_up_arrives_within_100_ms_after_connection_churn() {
    let cluster = cluster();
    let db = "churn";
    let mut main = database(&cluster, db);
    let mut observer = ok(cluster.connect_to(db), "observer");
    let mut report = Vec::new();
    let mut late = Vec::new();
    for cause in [
        Cause::Enqueue,
        Cause::Release,
        Cause::FailWithRetry,
        Cause::Retry,
        Cause::Reschedule,
        Cause::Resume,
    ] {
        let mut latencies = Vec::with_capacity(trials());
        for trial in 0..trials() {
            let key = format!("{cause:?}-{trial}");
            // What is there before the waiter: a held item to hand back, or
            // an item not claimable until the call wakes it (its id).
            let (token, waiting) = match cause {
                Cause::Enqueue => (None, None),
                Cause::Release | Cause::FailWithRetry => (Some(claimed(&mut main, &key)), None),
                Cause::Retry => {
                    let item = Enqueue::new(QUEUE).key(&key).max_attempts(1);
                    let id = common::enqueue_new(&mut main, &item);
                    let held = common::claimed_one(&mut main, QUEUE, "holder", "1 minute");
                    assert!(ok(
                        calls::fail(&mut main, &held.token("holder"), "boom", None),
                        "fail"
                    ));
                    (None, Some(id))
                }
                Cause::Reschedule => {
                    let item = Enqueue::new(QUEUE)
                        .key(&key)
                        .run_at(RunAt::In("1 day".into()));
                    (None, Some(common::enqueue_new(&mut main, &item)))
                }
                Cause::Resume => {
                    assert!(ok(calls::pause(&mut main, QUEUE), "pause"));
                    (
                        None,
                        Some(common::enqueue_new(
                            &mut main,
                            &Enqueue::new(QUEUE).key(&key),
                        )),
                    )
                }
            };
            // 1 to 4 connections come and go before every wait.
            churn(&cluster, db, &mut observer, 1 + trial % 4);
            let (got, latency) = thread::scope(|s| {
                let w = waiter(s, &cluster, db, &mut observer, WAIT);
                let (id, changed) = match (cause, &token) {
                    (Cause::Enqueue, _) => (
                        common::enqueue_new(&mut main, &Enqueue::new(QUEUE).key(&key)),
                        true,
                    ),
                    (Cause::Release, Some(held)) => (
                        held.id,
                        ok(calls::release(&mut main, held, None), "release"),
                    ),
                    (Cause::FailWithRetry, Some(held)) => (
                        held.id,
                        ok(calls::fail(&mut main, held, "boom", Some("0")), "fail"),
                    ),
                    (Cause::Retry, _) => (
                        waiting.expect("a dead letter"),
                        ok(calls::retry(&mut main, QUEUE, &key, None), "retry"),
                    ),
                    (Cause::Reschedule, _) => (
                        waiting.expect("an item due in a day"),
                        ok(
                            calls::reschedule(&mut main, QUEUE, &key, &RunAt::In("0".into())),
                            "reschedule",
                        ),
                    ),
                    (Cause::Resume, _) => (
                        waiting.expect("an item in the paused queue"),
                        ok(calls::resume(&mut main, QUEUE), "resume"),
                    ),
                    _ => unreachable!("a claimed item for release and fail"),
                };
                assert!(changed, "{cause:?} #{trial}: the call was refused");
                let committed = Instant::now();
                let got = w.join().expect("waiter thread");
                assert_eq!(
                    got.items.iter().map(|i| i.0).collect::<Vec<_>>(),
                    vec![id],
                    "{cause:?} #{trial}: the waiter must get the item"
                );
                let latency = got.at.saturating_duration_since(committed);
                (got, latency)
            });
            if latency > PROMPT {
                late.push(format!("{cause:?} #{trial}: {latency:?}"));
            }
            latencies.push(latency);
            let (id, epoch) = got.items[0];
            assert!(ok(
                calls::finish(&mut main, &Token::new(id, "waiter", epoch), None),
                "finish"
            ));
        }
        let line = format!(
            "wake_ups: {cause:?} after churn: {}",
            summary(&mut latencies)
        );
        println!("{line}");
        report.push(line);
    }
    assert!(
        late.is_empty(),
        "wake-ups slower than {PROMPT:?}: {late:?}\n{}",
        report.join("\n")
    );
}

#[test]
fn commit_prepared_wakes_and_rollback_prepared_does_not() {
    let cluster = cluster();
    let db = "prepared";
    let mut main = database(&cluster, db);
    let mut observer = ok(cluster.connect_to(db), "observer");
    let mut resolver = ok(cluster.connect_to(db), "resolver");

    // COMMIT PREPARED of a release wakes the waiter.
    let held = claimed(&mut main, "committed");
    let (id, epoch) = (held.id, held.epoch);
    thread::scope(|s| {
        let w = waiter(s, &cluster, db, &mut observer, "30 seconds");
        release_prepared(&mut main, &mut resolver, &held, "release-1", "COMMIT");
        let committed = Instant::now();
        let got = w.join().expect("waiter thread");
        let latency = got.at.saturating_duration_since(committed);
        println!("wake_ups: COMMIT PREPARED -> claim returned in {latency:?}");
        assert_eq!(got.items.len(), 1);
        assert_eq!(got.items[0].0, id);
        assert!(got.items[0].1 > epoch, "claimed anew, under a newer epoch");
        // The waiter re-checks every 50 ms while a prepared wake-up is pending.
        assert!(latency < Duration::from_secs(1), "woken after {latency:?}");
    });

    // ROLLBACK PREPARED: nothing became claimable, the waiter is not handed
    // the item and ends empty at its deadline; the holder's token stands.
    let held = claimed(&mut main, "rolled-back");
    thread::scope(|s| {
        let started = Instant::now();
        let w = waiter(s, &cluster, db, &mut observer, "2 seconds");
        release_prepared(&mut main, &mut resolver, &held, "release-2", "ROLLBACK");
        let got = w.join().expect("waiter thread");
        assert!(got.items.is_empty(), "nothing was released");
        assert!(got.at.duration_since(started) >= Duration::from_secs(2));
        let status = ok(calls::lease_status(&mut main, &held), "lease status");
        assert_eq!(status, "current");
    });
}

#[test]
fn the_session_that_prepared_sends_no_stale_wake_up_at_its_next_commit() {
    let cluster = cluster();
    let db = "stale";
    let mut main = database(&cluster, db);
    let mut observer = ok(cluster.connect_to(db), "observer");
    let mut resolver = ok(cluster.connect_to(db), "resolver");
    // A release whose wake-up is queued, then prepared and rolled back
    // (an enqueue of a due item cannot be prepared: it sends a NOTIFY).
    let held = claimed(&mut main, "held");
    release_prepared(&mut main, &mut resolver, &held, "release-3", "ROLLBACK");
    // An item due in an hour: the waiter sleeps to its own deadline.
    // Enqueued from another connection: the preparing session's next
    // commit must be the one below, where a stale wake-up would fire.
    let later = common::enqueue_new(
        &mut observer,
        &Enqueue::new(QUEUE)
            .key("later")
            .run_at(RunAt::In("1 hour".into())),
    );
    thread::scope(|s| {
        let w = waiter(s, &cluster, db, &mut observer, "3 seconds");
        // Made due behind the extension's back: nothing wakes anyone.
        ok(
            observer.execute(
                "UPDATE workfence.items SET run_at = pg_catalog.clock_timestamp() WHERE id = $1",
                &[&later],
            ),
            "make the item due silently",
        );
        // The session that prepared commits again: a stale wake-up from
        // its prepared transaction would wake the waiter now.
        ok(
            main.batch_execute("BEGIN; SELECT 1; COMMIT"),
            "the next commit",
        );
        let committed = Instant::now();
        let got = w.join().expect("waiter thread");
        let after = got.at.saturating_duration_since(committed);
        println!("wake_ups: the silent item was claimed {after:?} after the next commit");
        assert_eq!(got.items.len(), 1, "claimed at the waiter's deadline");
        assert!(
            after > Duration::from_secs(1),
            "woken {after:?} after the session's next commit: a stale wake-up"
        );
    });
}
