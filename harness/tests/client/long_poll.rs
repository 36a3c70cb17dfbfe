//! `work_claim(..., wait)`: the long poll, from real client connections.
//!
//! A claimer calls `work_claim` with a `wait` on its own connection (a
//! thread); the test sees it sleeping in the server (`pg_stat_activity`:
//! `wait_event_type = 'Extension'`) before it acts on another connection.
//! What it proves:
//! - an enqueue wakes a waiting claim when it commits, and the claim returns
//!   the item at once (figures printed), not at the end of its wait;
//! - a release wakes it the same way; a `run_at` or a lapsed lease is picked
//!   up when the server's clock reaches it, with no write to wake anyone;
//! - with nothing to claim the call returns zero rows once `wait` has passed,
//!   having run a handful of statements, not a polling loop;
//! - of several waiters, exactly one gets a single item;
//! - `statement_timeout` and `pg_cancel_backend` end a wait with 57014, and a
//!   fast shutdown of the server is not held up by a claim waiting an hour.
//!
//! The bounds on "at once" are generous (seconds, against waits of a minute)
//! so that a loaded machine cannot fail them; the printed figures are the
//! measurement. Needs the extension installed (`scripts/test.sh`).

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::ok;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, RunAt, Token};
use workfence_harness::Cluster;

/// The queue every test uses (each test has its own database).
const QUEUE: &str = "mail";

/// A `wait` far longer than any wake-up may take.
const LONG_WAIT: &str = "60 seconds";

/// Upper bound on the time from a wake-up's cause to the claim's return.
/// The wait is 60 s; a claim that was not woken would take that long.
const PROMPT: Duration = Duration::from_secs(20);

/// One cluster for the tests that run at the same time.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

/// A fresh database with the extension; returns a connection to it.
fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

/// What a waiting claim returned: (id, epoch, lease_until as text) per item,
/// and how long the call took.
struct Returned {
    items: Vec<(i64, i64, String)>,
    at: Instant,
}

/// `work_claim(QUEUE, 'w', '1 minute', max_items, wait)` on `c`.
fn claim(c: &mut Client, max_items: i32, wait: &str) -> Result<Returned, postgres::Error> {
    let claims = calls::claim(c, QUEUE, "w", "1 minute", Some(max_items), Some(wait))?;
    Ok(Returned {
        items: claims
            .into_iter()
            .map(|claim| (claim.id, claim.epoch, claim.lease_until))
            .collect(),
        at: Instant::now(),
    })
}

fn enqueue(c: &mut Client, key: &str) -> i64 {
    common::enqueue_new(c, &Enqueue::new(QUEUE).key(key))
}

/// Starts a claimer on a new connection and returns once it is seen waiting.
fn waiting_claimer<'s>(
    scope: &'s thread::Scope<'s, '_>,
    cluster: &Cluster,
    db: &str,
    observer: &mut Client,
    wait: &'static str,
) -> thread::ScopedJoinHandle<'s, Result<Returned, postgres::Error>> {
    let mut c = common::connect_long_poller(cluster, db);
    let pid = common::backend_pid(&mut c);
    let handle = scope.spawn(move || claim(&mut c, 1, wait));
    common::wait_until_waiting(observer, pid);
    handle
}

#[test]
fn an_enqueue_wakes_a_waiting_claim_when_it_commits() {
    let cluster = cluster();
    let mut main = database(&cluster, "wake_on_enqueue");
    thread::scope(|s| {
        let claimer = waiting_claimer(s, &cluster, "wake_on_enqueue", &mut main, LONG_WAIT);
        // Uncommitted, the item is invisible and no wake-up is sent: the
        // claimer is still asleep after the enqueue statement.
        let mut tx = ok(main.transaction(), "BEGIN");
        let id = common::enqueue_new(&mut tx, &Enqueue::new(QUEUE).key("k1"));
        ok(tx.commit(), "COMMIT");
        let committed = Instant::now();
        let got = ok(claimer.join().expect("claimer thread"), "waiting claim");
        let latency = got.at.saturating_duration_since(committed);
        println!("long_poll: enqueue commit -> claim returned in {latency:?}");
        assert_eq!(got.items.len(), 1);
        assert_eq!(got.items[0].0, id);
        assert!(latency < PROMPT, "woken after {latency:?}");
    });
}

#[test]
fn a_release_wakes_a_waiting_claim() {
    let cluster = cluster();
    let mut main = database(&cluster, "wake_on_release");
    let id = enqueue(&mut main, "k1");
    let held = ok(claim(&mut main, 1, "0"), "first claim");
    assert_eq!(held.items.len(), 1);
    let epoch = held.items[0].1;
    thread::scope(|s| {
        let claimer = waiting_claimer(s, &cluster, "wake_on_release", &mut main, LONG_WAIT);
        let released = ok(
            calls::release(&mut main, &Token::new(id, "w", epoch), None),
            "release",
        );
        assert!(released);
        let committed = Instant::now();
        let got = ok(claimer.join().expect("claimer thread"), "waiting claim");
        let latency = got.at.saturating_duration_since(committed);
        println!("long_poll: release -> claim returned in {latency:?}");
        assert_eq!(got.items.len(), 1);
        assert_eq!(got.items[0].0, id);
        assert!(got.items[0].1 > epoch, "a fresh epoch");
        assert!(latency < PROMPT, "woken after {latency:?}");
    });
}

#[test]
fn a_run_at_reached_on_the_server_clock_ends_the_wait() {
    let cluster = cluster();
    let mut main = database(&cluster, "wake_on_run_at");
    thread::scope(|s| {
        let claimer = waiting_claimer(s, &cluster, "wake_on_run_at", &mut main, LONG_WAIT);
        let id = common::enqueue_new(
            &mut main,
            &Enqueue::new(QUEUE)
                .key("later")
                .run_at(RunAt::In("1 second".into())),
        );
        let run_at: String = ok(
            main.query_one(
                "SELECT run_at::text FROM workfence.items WHERE id = $1",
                &[&id],
            ),
            "run_at",
        )
        .get(0);
        let got = ok(claimer.join().expect("claimer thread"), "waiting claim");
        assert_eq!(got.items.len(), 1, "the item, once due");
        // Claimed no earlier than run_at, and within PROMPT of it (server time).
        let (early, late): (bool, bool) = {
            let row = ok(
                main.query_one(
                    "SELECT $1::text::timestamptz - interval '1 minute' < $2::text::timestamptz,
                            $1::text::timestamptz - interval '1 minute' > $2::text::timestamptz + $3::text::interval",
                    &[&got.items[0].2, &run_at, &format!("{} seconds", PROMPT.as_secs())],
                ),
                "compare",
            );
            (row.get(0), row.get(1))
        };
        assert!(!early, "claimed before its run_at {run_at}");
        assert!(
            !late,
            "claimed more than {PROMPT:?} after its run_at {run_at}"
        );
    });
}

#[test]
fn a_lapsed_lease_is_picked_up_by_a_waiting_claim() {
    let cluster = cluster();
    let mut main = database(&cluster, "wake_on_lapse");
    let id = enqueue(&mut main, "k1");
    let held: (i64, String) = {
        let claim = common::claimed_one(&mut main, QUEUE, "dead worker", "1 second");
        (claim.epoch, claim.lease_until)
    };
    thread::scope(|s| {
        let claimer = waiting_claimer(s, &cluster, "wake_on_lapse", &mut main, LONG_WAIT);
        let got = ok(claimer.join().expect("claimer thread"), "waiting claim");
        assert_eq!(got.items.len(), 1);
        assert_eq!(got.items[0].0, id);
        assert!(got.items[0].1 > held.0, "a newer epoch");
        let after_lapse: bool = ok(
            main.query_one(
                "SELECT $1::text::timestamptz - interval '1 minute' >= $2::text::timestamptz",
                &[&got.items[0].2, &held.1],
            ),
            "compare",
        )
        .get(0);
        assert!(after_lapse, "re-claimed before the lease lapsed");
    });
}

#[test]
fn with_nothing_to_claim_the_wait_ends_empty_without_polling() {
    let cluster = cluster();
    let mut main = database(&cluster, "wait_expires");
    let mut c = common::connect_long_poller(&cluster, "wait_expires");
    // Reads of workfence.items, as the statistics count them, around one
    // claim that waits 2 s on an empty queue.
    let scans = |c: &mut Client| -> i64 {
        ok(
            c.query_one(
                "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)
                   FROM pg_catalog.pg_stat_user_tables
                  WHERE relid = 'workfence.items'::regclass",
                &[],
            ),
            "pg_stat_user_tables",
        )
        .get(0)
    };
    let before = scans(&mut main);
    let started = Instant::now();
    let got = ok(claim(&mut c, 10, "2 seconds"), "waiting claim");
    let took = got.at - started;
    // The claimer's counts reach the shared statistics when its backend next
    // goes idle; the force makes that flush happen, the statement after it
    // runs only once it has.
    ok(
        c.batch_execute("SELECT pg_catalog.pg_stat_force_next_flush()"),
        "force a statistics flush",
    );
    ok(c.batch_execute("SELECT 1"), "after the flush");
    let after = scans(&mut main);
    println!(
        "long_poll: empty wait of 2 s took {took:?} and {} scans of items",
        after - before
    );
    assert!(got.items.is_empty());
    assert!(took >= Duration::from_secs(2), "returned after {took:?}");
    assert!(
        took < Duration::from_secs(2) + PROMPT,
        "returned after {took:?}"
    );
    // One attempt before sleeping, one after, and one look at what is due
    // (a few index scans each); a 10 ms polling loop would make hundreds.
    assert!(
        after - before < 40,
        "{} scans in a 2 s wait",
        after - before
    );
}

#[test]
fn one_item_goes_to_exactly_one_of_several_waiters() {
    let cluster = cluster();
    let mut main = database(&cluster, "many_waiters");
    thread::scope(|s| {
        let waiters: Vec<_> = (0..4)
            .map(|_| waiting_claimer(s, &cluster, "many_waiters", &mut main, "3 seconds"))
            .collect();
        let id = enqueue(&mut main, "only");
        let results: Vec<Returned> = waiters
            .into_iter()
            .map(|w| ok(w.join().expect("claimer thread"), "waiting claim"))
            .collect();
        let winners: Vec<&Returned> = results.iter().filter(|r| !r.items.is_empty()).collect();
        assert_eq!(winners.len(), 1, "exactly one waiter gets the item");
        assert_eq!(winners[0].items, vec![winners[0].items[0].clone()]);
        assert_eq!(winners[0].items[0].0, id);
    });
}

#[test]
fn statement_timeout_and_cancel_end_a_wait_with_57014() {
    let cluster = cluster();
    let mut main = database(&cluster, "cancel_wait");
    let mut c = common::connect_long_poller(&cluster, "cancel_wait");
    ok(c.batch_execute("SET statement_timeout = '500ms'"), "SET");
    let started = Instant::now();
    let err = match claim(&mut c, 1, LONG_WAIT) {
        Ok(r) => panic!("the wait was not cut short: {} items", r.items.len()),
        Err(err) => err,
    };
    let took = started.elapsed();
    let code = err.as_db_error().map(|e| e.code().code().to_owned());
    assert_eq!(code.as_deref(), Some("57014"), "{err}");
    assert!(took < PROMPT, "statement_timeout took {took:?}");
    ok(c.batch_execute("RESET statement_timeout"), "RESET");

    let pid = common::backend_pid(&mut c);
    thread::scope(|s| {
        let claimer = s.spawn(move || claim(&mut c, 1, LONG_WAIT).map(|r| r.items.len()));
        common::wait_until_waiting(&mut main, pid);
        let cancelled: bool = ok(
            main.query_one("SELECT pg_catalog.pg_cancel_backend($1)", &[&pid]),
            "pg_cancel_backend",
        )
        .get(0);
        assert!(cancelled);
        let sent = Instant::now();
        let err = claimer
            .join()
            .expect("claimer thread")
            .expect_err("the cancelled wait must fail");
        let code = err.as_db_error().map(|e| e.code().code().to_owned());
        assert_eq!(code.as_deref(), Some("57014"), "{err}");
        assert!(sent.elapsed() < PROMPT, "cancel took {:?}", sent.elapsed());
    });
}

#[test]
fn a_fast_shutdown_is_not_held_up_by_a_waiting_claim() {
    // A cluster of its own: this test stops it.
    let mut cluster = ok(
        Cluster::start(common::scratch_base()),
        "starting a throwaway PostgreSQL 15 cluster",
    );
    let mut main = database(&cluster, "shutdown");
    let mut c = common::connect_long_poller(&cluster, "shutdown");
    let pid = common::backend_pid(&mut c);
    thread::scope(|s| {
        let claimer = s.spawn(move || claim(&mut c, 1, "1 hour").map(|r| r.items.len()));
        common::wait_until_waiting(&mut main, pid);
        drop(main);
        let started = Instant::now();
        ok(cluster.stop(), "pg_ctl -m fast stop");
        let took = started.elapsed();
        println!("long_poll: fast shutdown with a claim waiting 1 hour took {took:?}");
        assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
        let outcome = claimer.join().expect("claimer thread");
        assert!(outcome.is_err(), "the waiting claim ends with an error");
    });
}

#[test]
fn a_waiting_claim_gives_way_to_a_conflicting_lock_request() {
    let cluster = cluster();
    let mut main = database(&cluster, "give_way");
    thread::scope(|s| {
        let claimer = waiting_claimer(s, &cluster, "give_way", &mut main, LONG_WAIT);
        // CREATE INDEX's lock does not conflict with a sleeping waiter's
        // ACCESS SHARE: granted at once, the waiter sleeps on.
        let mut tx = ok(main.transaction(), "BEGIN");
        ok(
            tx.batch_execute(
                "SET LOCAL lock_timeout = '2s'; LOCK TABLE workfence.items IN SHARE MODE",
            ),
            "a SHARE lock beside a sleeping waiter",
        );
        ok(tx.commit(), "COMMIT");
        // What ALTER TABLE (an update script), DROP or VACUUM FULL ask for.
        let asked = Instant::now();
        ok(
            main.batch_execute("BEGIN; LOCK TABLE workfence.items IN ACCESS EXCLUSIVE MODE"),
            "LOCK TABLE",
        );
        let granted = asked.elapsed();
        ok(main.batch_execute("COMMIT"), "COMMIT");
        let got = ok(claimer.join().expect("claimer thread"), "waiting claim");
        println!(
            "long_poll: an ACCESS EXCLUSIVE lock on items waited {granted:?} for a waiting claim"
        );
        assert!(got.items.is_empty(), "the waiter gives way with zero rows");
        // The waiter checks every 200 ms; 60 s would mean it did not give way.
        assert!(granted < Duration::from_secs(5), "waited {granted:?}");
    });
}

#[test]
fn one_call_sleeps_at_most_long_poll_max() {
    let cluster = cluster();
    let mut c = database(&cluster, "long_poll_max");
    // Any call loads the library, which defines the setting.
    ok(
        calls::lease_status(&mut c, &Token::new(1, "w", 1)),
        "load the library",
    );
    assert_eq!(
        common::scalar::<String>(
            &mut c,
            "SELECT current_setting('workfence.long_poll_max')",
            &[]
        ),
        "3s",
        "the default"
    );
    ok(
        c.batch_execute("SET workfence.long_poll_max = 1"),
        "a superuser lowers it",
    );
    let started = Instant::now();
    let got = ok(claim(&mut c, 1, LONG_WAIT), "a 60 s wait");
    let took = got.at.duration_since(started);
    println!("long_poll: a 60 s wait under long_poll_max = 1 s returned after {took:?}");
    assert!(got.items.is_empty());
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "returned after {took:?}"
    );
}

#[test]
fn a_claim_that_stopped_waiting_leaves_the_waiters_list_at_once() {
    let cluster = cluster();
    let mut c = database(&cluster, "unregister");
    let pid = common::backend_pid(&mut c);
    enqueue(&mut c, "k1");
    // Inside a transaction that goes on after the claim: were it still
    // listed as a waiter, commits would wake it in a real waiter's place.
    let mut tx = ok(c.transaction(), "BEGIN");
    let got = ok(
        calls::claim(&mut tx, QUEUE, "w", "1 minute", Some(1), Some("1 second")),
        "a waiting claim that finds an item",
    );
    assert_eq!(got.len(), 1);
    let empty = ok(
        calls::claim(
            &mut tx,
            QUEUE,
            "w",
            "1 minute",
            Some(1),
            Some("50 milliseconds"),
        ),
        "a waiting claim that ends empty",
    );
    assert!(empty.is_empty());
    let mut observer = ok(cluster.connect_to("unregister"), "observer");
    let listed: i64 = common::scalar(
        &mut observer,
        "SELECT count(*) FROM pg_catalog.pg_locks
          WHERE locktype = 'advisory' AND classid = 1464235892 AND pid = $1",
        &[&pid],
    );
    assert_eq!(
        listed, 0,
        "still holds the wait lock after its claims returned"
    );
    ok(tx.commit(), "COMMIT");
}
