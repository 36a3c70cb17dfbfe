//! Operating queues (0.6.0), from real client connections: what an operator
//! does beside running workers, and how fencing shows.
//!
//! - `work_retry` racing a claim and a second retry: one fresh epoch, the
//!   old tokens stay dead, the waiting claim is woken at commit;
//! - `work_reschedule` of a far-off item to now wakes a waiting claim;
//! - a pause racing a long poll: an item enqueued into a paused queue wakes
//!   nobody into claiming it, the resume does;
//! - `work_lease_lost` racing the lapsed holder's own finish: the finish is
//!   refused, and the notification (the superseded token) comes at the
//!   re-claim's commit, not before;
//! - `max_run` reached while a heartbeat renews under load: the renews turn
//!   false, the lease never goes past `claimed_at + max_run`, another worker
//!   takes the item;
//! - the refusal and lapse counters of `work_queue_stats` (the cluster here
//!   preloads the library): each stale-token call counted once per queue,
//!   a current holder's calls never, a refusal counted even when its
//!   transaction rolls back, and a refusal never waits behind the holder's
//!   transaction;
//! - a long poll whose client went away ends, and claims nothing for it;
//! - the operations guide's "Operating queues" SQL, verbatim.
//!
//! Ordering is by held transactions, `pg_blocking_pids`, the backends'
//! wait events and the server's clock (`pg_sleep_until(lease_until)`), never
//! by sleeping. Needs the extension installed (scripts/test.sh).

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::ok;
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, RunAt, SqlState, Token};
use workfence_harness::Cluster;

/// A woken long poll returns within this after the commit that woke it (the
/// waits below are ten times longer).
const PROMPT: Duration = Duration::from_millis(1500);

/// One cluster for this file's tests, with the library preloaded (the
/// counters live in shared memory).
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_built(
        |builder| builder.setting("shared_preload_libraries", "pg_workfence"),
        |_| {},
    )
}

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "create database");
    ok(cluster.connect_to(name), "connect")
}

/// An item of `queue` that has failed its only attempt (a dead letter): its
/// key and the token that failed it.
fn dead_letter(c: &mut Client, queue: &str, key: &str) -> Token {
    common::enqueue_new(c, &Enqueue::new(queue).key(key).max_attempts(1));
    let token =
        common::claimed_one(c, queue, "routines/laptop", "1 minute").token("routines/laptop");
    assert!(ok(calls::fail(c, &token, "boom", None), "fail"));
    let item = ok(calls::item(c, queue, key), "work_item").expect("the item");
    assert_eq!(item.state, "failed");
    token
}

#[test]
fn a_retry_racing_a_claim_and_a_second_retry_hands_out_one_fresh_token() {
    let cluster = cluster();
    let mut main = database(&cluster, "retry_race");
    let old = dead_letter(&mut main, "mail", "m1");

    thread::scope(|s| {
        // A worker long-polls the queue: nothing is claimable.
        let mut waiter = common::connect_long_poller(&cluster, "retry_race");
        let waiter_pid = common::backend_pid(&mut waiter);
        let claimer = s.spawn(move || {
            let got = calls::claim(
                &mut waiter,
                "mail",
                "routines/laptop",
                "1 minute",
                None,
                Some("30 s"),
            );
            (got, Instant::now())
        });
        common::wait_until_waiting(&mut main, waiter_pid);

        // Operator 1 retries in a transaction it holds open; operator 2's
        // retry of the same item waits for its row lock.
        let mut op1 = ok(cluster.connect_to("retry_race"), "operator 1");
        let mut op2 = ok(cluster.connect_to("retry_race"), "operator 2");
        let op1_pid = common::backend_pid(&mut op1);
        let op2_pid = common::backend_pid(&mut op2);
        let mut tx = ok(op1.transaction(), "BEGIN");
        assert!(ok(calls::retry(&mut tx, "mail", "m1", None), "retry 1"));
        let second = s.spawn(move || calls::retry(&mut op2, "mail", "m1", None));
        common::wait_until_blocked(&mut main, op2_pid, op1_pid);
        // Uncommitted, the retry is invisible: a claim finds nothing, at once.
        assert!(ok(
            calls::claim(&mut main, "mail", "w2", "1 minute", None, None),
            "claim"
        )
        .is_empty());
        ok(tx.commit(), "COMMIT the retry");
        let committed = Instant::now();

        assert!(
            !ok(second.join().expect("operator 2"), "retry 2"),
            "the second retry finds the item pending: false"
        );
        let (got, at) = claimer.join().expect("claimer");
        let got = ok(got, "the waiting claim");
        assert_eq!(got.len(), 1, "the retry woke the waiting claim");
        let latency = at.saturating_duration_since(committed);
        assert!(
            latency < PROMPT,
            "woken {latency:?} after the retry's commit"
        );
        let new = got[0].token("routines/laptop");
        assert_eq!(new.id, old.id);
        assert!(new.epoch > old.epoch);
        assert_eq!(
            got[0].attempt, 2,
            "one more attempt than the dead letter had"
        );

        // The old token, same owner name, stays dead; the new one finishes.
        assert!(!ok(calls::renew(&mut main, &old, "1 minute"), "old renew"));
        assert!(!ok(calls::finish(&mut main, &old, None), "old finish"));
        assert_eq!(
            ok(calls::lease_status(&mut main, &old), "status"),
            "superseded"
        );
        assert!(ok(calls::finish(&mut main, &new, None), "new finish"));
        let item = ok(calls::item(&mut main, "mail", "m1"), "work_item").expect("the item");
        assert_eq!(
            (item.state.as_str(), item.attempts, item.max_attempts),
            ("done", 2, 2)
        );
        assert_eq!(
            item.errors.as_array().map(Vec::len),
            Some(1),
            "the failure is kept"
        );
    });
}

#[test]
fn a_reschedule_to_now_wakes_a_waiting_claim() {
    let cluster = cluster();
    let mut main = database(&cluster, "reschedule_wakes");
    common::enqueue_new(
        &mut main,
        &Enqueue::new("later")
            .key("l1")
            .run_at(RunAt::In("1 day".into())),
    );
    thread::scope(|s| {
        let mut waiter = common::connect_long_poller(&cluster, "reschedule_wakes");
        let pid = common::backend_pid(&mut waiter);
        let claimer = s.spawn(move || {
            let got = calls::claim(&mut waiter, "later", "w", "1 minute", None, Some("30 s"));
            (got, Instant::now())
        });
        common::wait_until_waiting(&mut main, pid);
        assert!(ok(
            calls::reschedule(&mut main, "later", "l1", &RunAt::In("0".into())),
            "reschedule"
        ));
        let committed = Instant::now();
        let (got, at) = claimer.join().expect("claimer");
        assert_eq!(ok(got, "claim").len(), 1);
        let latency = at.saturating_duration_since(committed);
        assert!(latency < PROMPT, "woken {latency:?} after the reschedule");
    });
}

#[test]
fn a_pause_keeps_long_polls_waiting_and_the_resume_wakes_them() {
    let cluster = cluster();
    let mut main = database(&cluster, "pause_race");
    assert!(ok(calls::pause(&mut main, "p"), "pause"));
    thread::scope(|s| {
        // A short waiter: its whole wait passes with an item due in the
        // paused queue, and it claims nothing.
        let mut short = ok(cluster.connect_to("pause_race"), "short waiter");
        let short_pid = common::backend_pid(&mut short);
        let short_claim =
            s.spawn(move || calls::claim(&mut short, "p", "w", "1 minute", None, Some("2 s")));
        // A long waiter, woken by the resume.
        let mut long = common::connect_long_poller(&cluster, "pause_race");
        let long_pid = common::backend_pid(&mut long);
        let long_claim = s.spawn(move || {
            let got = calls::claim(&mut long, "p", "w", "1 minute", None, Some("60 s"));
            (got, Instant::now())
        });
        common::wait_until_waiting(&mut main, short_pid);
        common::wait_until_waiting(&mut main, long_pid);

        // The enqueue wakes a waiter, which finds the queue paused.
        common::enqueue_new(&mut main, &Enqueue::new("p").key("x"));
        assert!(
            ok(short_claim.join().expect("short waiter"), "short claim").is_empty(),
            "a paused queue hands out nothing for a whole wait"
        );
        let item = ok(calls::item(&mut main, "p", "x"), "work_item").expect("the item");
        assert_eq!((item.state.as_str(), item.attempts), ("pending", 0));
        // The long waiter is still waiting, and the resume wakes it.
        common::wait_until_waiting(&mut main, long_pid);
        let stats = ok(calls::queue_stats(&mut main), "stats");
        assert!(stats
            .iter()
            .any(|q| q.queue == "p" && q.paused && q.pending == 1));
        assert!(ok(calls::resume(&mut main, "p"), "resume"));
        let committed = Instant::now();
        let (got, at) = long_claim.join().expect("long waiter");
        let got = ok(got, "long claim");
        assert_eq!(got.len(), 1, "the resume woke the waiter");
        let latency = at.saturating_duration_since(committed);
        assert!(latency < PROMPT, "woken {latency:?} after the resume");
    });
}

#[test]
fn a_lease_lost_notification_comes_with_the_reclaim_and_the_holders_finish_is_refused() {
    let cluster = cluster();
    let mut main = database(&cluster, "lease_lost");
    // Worker A (owner routines/laptop) claims with a short lease and listens.
    let mut a = ok(cluster.connect_to("lease_lost"), "worker A");
    ok(a.batch_execute("LISTEN work_lease_lost"), "LISTEN");
    let a_pid = common::backend_pid(&mut a);
    let token_a =
        common::enqueued_and_claimed(&mut a, "routines", "daily", "routines/laptop", "1 second");
    // The lease lapses, by the server's clock.
    common::wait_out_lease(&mut main, token_a.id);
    // Worker B, same owner name, claims it anew in a transaction it holds open.
    let mut b = ok(cluster.connect_to("lease_lost"), "worker B");
    let b_pid = common::backend_pid(&mut b);
    let mut tx = ok(b.transaction(), "BEGIN");
    let claims = ok(
        calls::claim(
            &mut tx,
            "routines",
            "routines/laptop",
            "1 minute",
            None,
            None,
        ),
        "B's claim",
    );
    assert_eq!(claims.len(), 1);
    let token_b = claims[0].token("routines/laptop");
    assert!(token_b.epoch > token_a.epoch);

    thread::scope(|s| {
        // A's finish, racing: it waits for B's row lock...
        let stale = token_a.clone();
        let finish = s.spawn(move || {
            let finished = calls::finish(&mut a, &stale, None);
            (finished, a)
        });
        common::wait_until_blocked(&mut main, a_pid, b_pid);
        ok(tx.commit(), "COMMIT B's claim");
        // ... and is refused once B's claim commits.
        let (finished, mut a) = finish.join().expect("A's finish");
        assert!(
            !ok(finished, "A's finish"),
            "the superseded token is refused"
        );

        // The notification names A's token; it was sent at B's commit.
        let mut notifications = a.notifications();
        let lost = ok(
            notifications.timeout_iter(Duration::from_secs(10)).next(),
            "receiving",
        )
        .expect("a work_lease_lost notification");
        assert_eq!(lost.channel(), "work_lease_lost");
        let payload: serde_json::Value = ok(serde_json::from_str(lost.payload()), "JSON payload");
        assert_eq!(
            payload,
            serde_json::json!({
                "id": token_a.id, "queue": "routines", "key": "daily",
                "owner": "routines/laptop", "epoch": token_a.epoch,
            })
        );
        let more = ok(notifications.iter().count(), "receiving");
        assert_eq!(more, 0, "one notification");
    });
    assert!(ok(calls::finish(&mut b, &token_b, None), "B finishes"));
    let item = ok(calls::item(&mut main, "routines", "daily"), "work_item").expect("item");
    let lapse = &item.errors[0];
    assert_eq!(lapse["error"], "lease expired");
    assert_eq!(lapse["epoch"], token_a.epoch);
    let stats = ok(calls::queue_stats(&mut main), "stats");
    let routines = stats.iter().find(|q| q.queue == "routines").expect("row");
    assert_eq!(
        (routines.lapsed, routines.refused),
        (Some(1), Some(1)),
        "one lapse, A's refused finish"
    );
}

#[test]
fn max_run_ends_a_renewing_job_under_load() {
    let cluster = cluster();
    let mut main = database(&cluster, "max_run");
    common::enqueue_new(
        &mut main,
        &Enqueue::new("hung").key("h").max_run("2 seconds"),
    );
    let token = common::claimed_one(&mut main, "hung", "w1", "1 second").token("w1");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for n in 0..4 {
        let mut c = ok(cluster.connect_to("max_run"), "load");
        let stop = stop.clone();
        load.push(thread::spawn(move || {
            let owner = format!("load-{n}");
            let mut cycles = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ok(
                    calls::enqueue(&mut c, &Enqueue::new("busy")),
                    "load enqueue",
                );
                for claim in ok(
                    calls::claim(&mut c, "busy", &owner, "1 minute", Some(2), None),
                    "load claim",
                ) {
                    assert!(ok(
                        calls::finish(&mut c, &claim.token(&owner), None),
                        "load finish"
                    ));
                }
                cycles += 1;
            }
            cycles
        }));
    }
    // The heartbeat renews until a renew is refused; each renew's lease is
    // checked against claimed_at + max_run on the server.
    let mut heartbeat = ok(cluster.connect_to("max_run"), "heartbeat");
    let (mut renewed, started) = (0, Instant::now());
    loop {
        let ok_renew = ok(calls::renew(&mut heartbeat, &token, "1 second"), "renew");
        let within: bool = common::scalar(
            &mut heartbeat,
            "SELECT i.lease_until <= i.claimed_at + i.max_run FROM workfence.items AS i WHERE i.id = $1",
            &[&token.id],
        );
        assert!(within, "a lease past claimed_at + max_run");
        if !ok_renew {
            break;
        }
        renewed += 1;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "max_run never ended the renews"
        );
        // Pacing of the heartbeat, not synchronisation: the assertions hold
        // at any pace.
        thread::sleep(Duration::from_millis(100));
    }
    let ended: bool = common::scalar(
        &mut heartbeat,
        "SELECT pg_catalog.clock_timestamp() >= i.claimed_at + i.max_run FROM workfence.items AS i WHERE i.id = $1",
        &[&token.id],
    );
    assert!(ended, "a renew refused before max_run was used up");
    assert!(renewed >= 5, "only {renewed} renews before max_run");
    // The lapsed lease goes to another worker; the hung job's finish is refused.
    let next = common::claimed_one(&mut main, "hung", "w2", "1 minute").token("w2");
    assert!(next.epoch > token.epoch);
    assert!(!ok(
        calls::finish(&mut heartbeat, &token, None),
        "the hung job's finish"
    ));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cycles: u32 = load
        .into_iter()
        .map(|t| t.join().expect("load thread"))
        .sum();
    println!("operating: max_run '2 seconds' ended {renewed} renews beside {cycles} load cycles");
    assert!(cycles > 0);
}

#[test]
fn stale_tokens_are_counted_per_queue_and_never_wait_for_the_holder() {
    let cluster = cluster();
    let mut main = database(&cluster, "counters");
    let stale = common::enqueued_and_claimed(&mut main, "counted", "k", "w", "1 second");
    common::wait_out_lease(&mut main, stale.id);
    let current = common::claimed_one(&mut main, "counted", "w", "1 minute").token("w");
    assert_eq!(current.id, stale.id);
    common::enqueue_new(&mut main, &Enqueue::new("other").key("o"));

    // The holder keeps the row locked in an open transaction (work_assert).
    let mut holder = ok(cluster.connect_to("counters"), "holder");
    let mut held = ok(holder.transaction(), "BEGIN");
    ok(calls::assert(&mut held, &current), "assert");
    // Each kind of stale call is refused at once, not after the holder's
    // commit: a wait would hit lock_timeout (55P03).
    let mut stale_worker = ok(cluster.connect_to("counters"), "stale worker");
    ok(
        stale_worker.batch_execute("SET lock_timeout = '100ms'"),
        "lock_timeout",
    );
    let started = Instant::now();
    assert!(!ok(
        calls::renew(&mut stale_worker, &stale, "1 minute"),
        "renew"
    ));
    assert!(!ok(
        calls::finish(&mut stale_worker, &stale, None),
        "finish"
    ));
    assert!(!ok(
        calls::release(&mut stale_worker, &stale, None),
        "release"
    ));
    assert!(!ok(
        calls::fail(&mut stale_worker, &stale, "boom", None),
        "fail"
    ));
    let batch = ok(
        calls::finish_many(&mut stale_worker, "w", &[stale.id], &[stale.epoch], None),
        "finish_many",
    );
    assert_eq!(batch, vec![(stale.id, false)]);
    let mut tx = ok(stale_worker.transaction(), "BEGIN");
    let err = calls::assert(&mut tx, &stale).expect_err("a stale assert raises");
    assert_eq!(err.sqlstate(), Some("55000"));
    ok(tx.rollback(), "ROLLBACK");
    // A refusal in a transaction that rolls back is still a refusal.
    let mut tx = ok(stale_worker.transaction(), "BEGIN");
    assert!(!ok(calls::renew(&mut tx, &stale, "1 minute"), "renew"));
    ok(tx.rollback(), "ROLLBACK");
    let refusals = started.elapsed();
    ok(held.commit(), "the holder commits");

    // The current holder's own calls, a token of no item, and another
    // queue count nothing.
    assert!(ok(
        calls::renew(&mut holder, &current, "1 minute"),
        "current renew"
    ));
    assert!(!ok(
        calls::renew(&mut holder, &Token::new(-1, "w", 1), "1 minute"),
        "no such item"
    ));
    assert!(ok(
        calls::finish(&mut holder, &current, None),
        "current finish"
    ));
    assert!(ok(
        calls::finish(&mut holder, &current, None),
        "a repeated finish"
    ));
    let stats = ok(calls::queue_stats(&mut main), "stats");
    let counted = stats.iter().find(|q| q.queue == "counted").expect("row");
    assert_eq!(
        counted.refused,
        Some(7),
        "renew, finish, release, fail, finish_many, assert, renew"
    );
    assert_eq!(counted.lapsed, Some(1));
    let other = stats.iter().find(|q| q.queue == "other").expect("row");
    assert_eq!((other.refused, other.lapsed), (Some(0), Some(0)));
    assert_eq!(
        ok(
            calls::queue_counters(&mut main, "counted"),
            "queue_counters"
        ),
        Some((7, 1))
    );
    println!("operating: 7 refusals beside a held row lock took {refusals:?}");
}

#[test]
fn a_long_poll_ends_when_its_client_goes_away() {
    let cluster = cluster();
    let mut main = database(&cluster, "client_gone");
    let ended = common::killed_client_ends_its_session(
        &cluster,
        &mut main,
        "client_gone",
        "pg_workfence gone client",
        &[
            "SET workfence.long_poll_max = '1h'",
            "SELECT * FROM workfence.work_claim('gone', 'w', '1 minute', wait => '10 minutes')",
        ],
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                         WHERE application_name = $1 AND wait_event_type = 'Extension')",
    );
    println!("operating: a long poll ended {ended:?} after its client was killed");
    assert!(ended < Duration::from_secs(5), "ended after {ended:?}");
    // Nobody claimed for the gone client: the next item is a first attempt.
    common::enqueue_new(&mut main, &Enqueue::new("gone").key("g"));
    let claim = common::claimed_one(&mut main, "gone", "w2", "1 minute");
    assert_eq!(claim.attempt, 1);
}

#[test]
fn the_operations_guides_sql_does_what_it_says() {
    let cluster = cluster();
    let mut main = database(&cluster, "guide");
    dead_letter(&mut main, "reports", "r-1");
    common::enqueue_new(
        &mut main,
        &Enqueue::new("reports")
            .key("r-2")
            .run_at(RunAt::In("1 day".into())),
    );
    let sql = common::doc_sql_block(
        include_str!("../../../docs/operations.md"),
        "docs/operations.md",
        "operating-queues",
    );
    ok(main.batch_execute(sql), "the guide's SQL");
    let r1 = ok(calls::item(&mut main, "reports", "r-1"), "r-1").expect("r-1");
    assert_eq!(
        (r1.state.as_str(), r1.max_attempts),
        ("pending", 2),
        "retried"
    );
    let due: bool = common::scalar(
        &mut main,
        "SELECT w.run_at <= pg_catalog.clock_timestamp() FROM workfence.work_item('reports', 'r-2') AS w",
        &[],
    );
    assert!(due, "r-2 runs now");
    let stats = ok(calls::queue_stats(&mut main), "stats");
    let reports = stats.iter().find(|q| q.queue == "reports").expect("row");
    assert_eq!(
        (reports.paused, reports.pending),
        (false, 2),
        "resumed, both due"
    );
}

#[test]
fn a_pause_reaches_a_session_that_claimed_before_it_and_a_rolled_back_one_does_not() {
    let cluster = cluster();
    let mut operator = database(&cluster, "pause_seen");
    let mut worker = ok(cluster.connect_to("pause_seen"), "worker");
    for key in ["a", "b", "c"] {
        common::enqueue_new(&mut operator, &Enqueue::new("p").key(key));
    }
    // The worker's session knows the queue open (it has claimed from it).
    assert_eq!(
        common::claimed_one(&mut worker, "p", "w", "1 minute").key,
        "a"
    );
    // A pause that rolls back changes nothing for it.
    let mut tx = ok(operator.transaction(), "BEGIN");
    assert!(ok(calls::pause(&mut tx, "p"), "pause"));
    ok(tx.rollback(), "ROLLBACK");
    assert_eq!(
        common::claimed_one(&mut worker, "p", "w", "1 minute").key,
        "b"
    );
    // A committed pause closes the queue for the worker's very next claim.
    assert!(ok(calls::pause(&mut operator, "p"), "pause"));
    assert!(
        common::claim_count(&mut worker, "p") == 0,
        "a session that knew the queue open must see the pause"
    );
    assert!(ok(
        calls::claim_key(&mut worker, "p", "c", "w", "1 minute"),
        "claim_key"
    )
    .is_none());
    // And the resume opens it again.
    assert!(ok(calls::resume(&mut operator, "p"), "resume"));
    assert_eq!(
        common::claimed_one(&mut worker, "p", "w", "1 minute").key,
        "c"
    );
}

#[test]
fn a_repeatable_read_transaction_does_not_leave_its_session_blind_to_a_pause() {
    let cluster = cluster();
    let mut operator = database(&cluster, "pause_rr");
    let mut worker = ok(cluster.connect_to("pause_rr"), "worker");
    for key in ["a", "b", "c", "d"] {
        common::enqueue_new(&mut operator, &Enqueue::new("rr").key(key));
    }
    assert_eq!(
        common::claimed_one(&mut worker, "rr", "w", "1 minute").key,
        "a"
    );
    // A REPEATABLE READ transaction of the worker takes its snapshot, the
    // operator's `change` commits after it, the worker claims inside (by the
    // snapshot, as it may: the change is newer) and commits.
    let across_repeatable_read =
        |worker: &mut Client, operator: &mut Client, change: fn(&mut Client, &str) -> bool| {
            let mut tx = ok(
                worker
                    .build_transaction()
                    .isolation_level(postgres::IsolationLevel::RepeatableRead)
                    .start(),
                "BEGIN ISOLATION LEVEL REPEATABLE READ",
            );
            ok(tx.batch_execute("SELECT 1"), "the snapshot");
            assert!(change(operator, "rr"), "the change");
            let inside = ok(
                calls::claim(&mut tx, "rr", "w", "1 minute", None, None),
                "claim",
            );
            assert!(inside.len() <= 1);
            ok(tx.commit(), "COMMIT");
        };
    let pause = |c: &mut Client, q: &str| ok(calls::pause(c, q), "pause");
    let resume = |c: &mut Client, q: &str| ok(calls::resume(c, q), "resume");
    // Once the transaction is over, the session sees the pause...
    across_repeatable_read(&mut worker, &mut operator, pause);
    assert!(
        common::claim_count(&mut worker, "rr") == 0,
        "a REPEATABLE READ transaction left its session claiming from a paused queue"
    );
    // ... and the resume.
    across_repeatable_read(&mut worker, &mut operator, resume);
    assert_eq!(
        common::claim_count(&mut worker, "rr"),
        1,
        "a REPEATABLE READ transaction left its session blind to a resume"
    );
}

#[test]
fn a_pause_committed_with_an_enqueue_is_never_claimed_by_a_waiter_it_wakes() {
    let cluster = cluster();
    let mut operator = database(&cluster, "pause_wake");
    for trial in 0..20 {
        let queue = format!("pw{trial}");
        thread::scope(|s| {
            let mut waiter = ok(cluster.connect_to("pause_wake"), "waiter");
            let pid = common::backend_pid(&mut waiter);
            let q = queue.clone();
            let claim = s.spawn(move || {
                calls::claim(
                    &mut waiter,
                    &q,
                    "w",
                    "1 minute",
                    None,
                    Some("300 milliseconds"),
                )
            });
            common::wait_until_waiting(&mut operator, pid);
            let mut tx = ok(operator.transaction(), "BEGIN");
            assert!(ok(calls::pause(&mut tx, &queue), "pause"));
            common::enqueue_new(&mut tx, &Enqueue::new(&queue).key("k"));
            ok(tx.commit(), "COMMIT the pause and the enqueue");
            let got = ok(claim.join().expect("waiter"), "waiting claim");
            assert!(got.is_empty(), "trial {trial}: a waiter claimed from a queue paused by the very commit that woke it");
        });
    }
}

#[test]
fn a_lapse_counts_when_its_claim_commits_and_an_uncommitted_token_is_not_a_refusal() {
    let cluster = cluster();
    let mut main = database(&cluster, "counts_commit");
    let token = common::enqueued_and_claimed(&mut main, "cc", "k", "w", "1 second");
    common::wait_out_lease(&mut main, token.id);
    let mut claimer = ok(cluster.connect_to("counts_commit"), "claimer");
    // Two claims of the lapsed lease roll back; a third commits.
    for _ in 0..2 {
        let mut tx = ok(claimer.transaction(), "BEGIN");
        assert_eq!(
            ok(
                calls::claim(&mut tx, "cc", "w2", "1 minute", None, None),
                "claim"
            )
            .len(),
            1
        );
        ok(tx.rollback(), "ROLLBACK");
    }
    let mut tx = ok(claimer.transaction(), "BEGIN");
    let open = ok(
        calls::claim(&mut tx, "cc", "w2", "1 minute", None, None),
        "claim",
    );
    // Its token, used from another connection before the claim commits, is
    // refused (uncommitted), but no stale worker was fenced off.
    let uncommitted = open[0].token("w2");
    assert!(!ok(
        calls::renew(&mut main, &uncommitted, "1 minute"),
        "renew of an uncommitted claim"
    ));
    ok(tx.commit(), "COMMIT");
    assert!(!ok(
        calls::renew(&mut main, &token, "1 minute"),
        "the superseded token"
    ));
    let stats = ok(calls::queue_stats(&mut main), "stats");
    let cc = stats.iter().find(|q| q.queue == "cc").expect("row");
    assert_eq!(
        (cc.lapsed, cc.refused),
        (Some(1), Some(1)),
        "one lapse, one stale refusal"
    );
}
