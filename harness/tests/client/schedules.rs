//! Schedules (0.12.0, issue 34) on real servers: the firers racing, a claim
//! that fires its queue where nothing else does, a fire lost with a crash
//! and fired again once, a schedule removed while a fire of it is in flight.
//!
//! What one transaction shows (each `catch_up`, the key guard, bad input)
//! is in `pgrx-tests/schedules.rs`; daylight saving, month ends and the
//! leap day in the unit tests of `src/base/cron.rs`.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ok;
use workfence_harness::calls;
use workfence_harness::Cluster;

/// How long the firers race (the issue asks for a minute).
const RACE: Duration = Duration::from_secs(60);

/// The seconds since the epoch of every slot fired into `queue`, in order.
fn fired_slots(client: &mut postgres::Client, queue: &str) -> Vec<i64> {
    ok(
        client.query(
            "SELECT extract(epoch FROM run_at)::bigint FROM workfence.items \
              WHERE queue = $1 ORDER BY run_at",
            &[&queue],
        ),
        "reading the fired items",
    )
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[test]
fn three_firers_racing_fire_every_slot_exactly_once() {
    let db = "racing";
    let mut cluster = ok(
        Cluster::builder(common::scratch_base())
            .setting("shared_preload_libraries", "pg_workfence")
            // Full rounds (dead letters, purge) out of the way: the worker
            // fires at each slot regardless.
            .setting("workfence.maintenance_naptime", "3600")
            .setting("workfence.maintenance_database", db)
            .start(),
        "starting a cluster with the library preloaded",
    );
    ok(cluster.create_database(db), "creating the database");
    let mut admin = ok(cluster.connect_to(db), "connecting");
    assert!(ok(
        calls::schedule(&mut admin, "tick", "* * * * * *", "ticks", "UTC", "all"),
        "work_schedule"
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let by_function = Arc::new(AtomicI64::new(0));
    let mut threads = Vec::new();
    // Firer 1: work_fire_schedules() in a loop, as pg_cron or a client would.
    {
        let (stop, by_function) = (stop.clone(), by_function.clone());
        let mut c = ok(cluster.connect_to(db), "connecting the caller");
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = ok(calls::fire_schedules(&mut c), "work_fire_schedules");
                by_function.fetch_add(i64::from(n), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(37));
            }
        }));
    }
    // Firers 2 and 3: workers long-polling the queue (autocommit), whose
    // claims fire it; they finish what they claim.
    for w in 0..2 {
        let stop = stop.clone();
        let mut c = common::connect_long_poller(&cluster, db);
        threads.push(std::thread::spawn(move || {
            let owner = format!("w{w}");
            while !stop.load(Ordering::Relaxed) {
                let claimed = ok(
                    calls::claim(
                        &mut c,
                        "ticks",
                        &owner,
                        "30 seconds",
                        Some(10),
                        Some("1 second"),
                    ),
                    "work_claim",
                );
                for item in claimed {
                    let token = item.token(&owner);
                    assert!(ok(calls::finish(&mut c, &token, None), "work_finish"));
                }
            }
        }));
    }
    // Firer 4 is the maintenance worker, at each slot.
    std::thread::sleep(RACE);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a firer panicked");
    }
    assert!(ok(calls::unschedule(&mut admin, "tick"), "work_unschedule"));

    let slots = fired_slots(&mut admin, "ticks");
    let (first, last) = (slots[0], *slots.last().unwrap());
    let expected: Vec<i64> = (first..=last).collect();
    assert_eq!(
        slots, expected,
        "one item per second, none skipped, none twice"
    );
    assert!(
        slots.len() as u64 >= RACE.as_secs() - 2,
        "{} slots fired in a race of {RACE:?}",
        slots.len()
    );
    // Every key names its slot.
    let bad: i64 = common::scalar(
        &mut admin,
        "SELECT count(*) FROM workfence.items WHERE queue = 'ticks' \
          AND key <> 'tick@' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        &[],
    );
    assert_eq!(bad, 0);
    let latency: Vec<f64> = ok(
        admin.query(
            "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP \
                    (ORDER BY extract(epoch FROM created_at - run_at) * 1000)::float8[] \
               FROM workfence.items WHERE queue = 'ticks'",
            &[],
        ),
        "fire latency",
    )[0]
    .get(0);
    println!(
        "schedules race: {} slots in {RACE:?}, all fired once; work_fire_schedules fired {}; \
         fire latency (slot -> item) p50 {:.1} ms, p99 {:.1} ms",
        slots.len(),
        by_function.load(Ordering::Relaxed),
        latency[0],
        latency[1]
    );
    ok(cluster.stop(), "stopping");
}

#[test]
fn a_long_poll_fires_its_queue_where_nothing_else_does() {
    let (_cluster, mut c) = common::own_cluster_with_database("lazy");
    // No preload, no caller of work_fire_schedules: only the claim.
    assert!(ok(
        calls::schedule(
            &mut c,
            "each-second",
            "* * * * * *",
            "lazy",
            "UTC",
            "latest"
        ),
        "work_schedule"
    ));
    ok(
        c.batch_execute("SET workfence.long_poll_max = '1h'"),
        "long poll cap",
    );
    let started = Instant::now();
    let claimed = ok(
        calls::claim(&mut c, "lazy", "w", "30 seconds", None, Some("10 seconds")),
        "work_claim",
    );
    assert_eq!(
        claimed.len(),
        1,
        "the long poll fired the slot and claimed it"
    );
    assert!(
        claimed[0].key.starts_with("each-second@"),
        "{}",
        claimed[0].key
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // In a transaction block a claim fires nothing: it would hold the
    // schedule and hide the item until its transaction ends.
    ok(
        c.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('second', clock_timestamp()) + interval '1 hour'",
        ),
        "moving the next slot an hour on",
    );
    // A replace (a changed catch_up) makes every session read the schedules
    // again; the next slot, an hour on, is kept.
    assert!(ok(
        calls::schedule(&mut c, "each-second", "* * * * * *", "lazy", "UTC", "all"),
        "work_schedule"
    ));
    ok(c.batch_execute("BEGIN"), "BEGIN");
    ok(
        c.batch_execute(
            "UPDATE workfence.schedules SET last_slot = NULL, \
                    next_slot = date_trunc('second', clock_timestamp()) - interval '5 seconds'",
        ),
        "making a slot due in this transaction",
    );
    let in_block = ok(
        calls::claim(&mut c, "lazy", "w", "30 seconds", None, None),
        "work_claim",
    );
    assert!(in_block.is_empty(), "{in_block:?}");
    ok(c.batch_execute("ROLLBACK"), "ROLLBACK");
}

#[test]
fn a_fire_lost_in_a_crash_is_fired_once_after_the_restart() {
    let (mut cluster, mut c) = common::own_cluster_with_database("crash");
    assert!(ok(
        calls::schedule(&mut c, "hourly", "0 * * * *", "crash", "UTC", "all"),
        "work_schedule"
    ));
    ok(
        c.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) - interval '1 hour'",
        ),
        "making two slots due",
    );
    // A fire in flight, its transaction open, when the server crashes.
    ok(c.batch_execute("BEGIN"), "BEGIN");
    assert_eq!(ok(calls::fire_schedules(&mut c), "work_fire_schedules"), 2);
    ok(cluster.crash(), "crashing the server");
    drop(c);
    ok(cluster.start_again(), "starting it again");
    let mut c = ok(cluster.connect_to("crash"), "reconnecting");
    assert_eq!(
        common::scalar::<i64>(&mut c, "SELECT count(*) FROM workfence.items", &[]),
        0,
        "the lost fire's items and record were lost together"
    );
    assert_eq!(ok(calls::fire_schedules(&mut c), "work_fire_schedules"), 2);
    assert_eq!(ok(calls::fire_schedules(&mut c), "work_fire_schedules"), 0);
    assert_eq!(fired_slots(&mut c, "crash").len(), 2);
}

#[test]
fn a_schedule_removed_while_a_fire_is_in_flight_keeps_that_item_and_fires_no_more() {
    let cluster = common::shared_cluster();
    let db = "schedule_removed";
    ok(cluster.create_database(db), "creating the database");
    let mut a = ok(cluster.connect_to(db), "connecting the firer");
    let mut b = ok(cluster.connect_to(db), "connecting the operator");
    let mut observer = ok(cluster.connect_to(db), "connecting the observer");
    assert!(ok(
        calls::schedule(&mut a, "removed", "0 * * * *", "removed-q", "UTC", "latest"),
        "work_schedule"
    ));
    ok(
        a.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) \
              WHERE name = 'removed'",
        ),
        "making a slot due",
    );
    ok(a.batch_execute("BEGIN"), "BEGIN");
    assert!(ok(calls::fire_schedules(&mut a), "work_fire_schedules") >= 1);
    let a_pid = common::backend_pid(&mut a);
    let b_pid = common::backend_pid(&mut b);
    let remover =
        std::thread::spawn(move || ok(calls::unschedule(&mut b, "removed"), "unschedule"));
    common::wait_until_blocked(&mut observer, b_pid, a_pid);
    ok(a.batch_execute("COMMIT"), "COMMIT");
    assert!(remover.join().expect("the remover panicked"));
    assert_eq!(
        fired_slots(&mut a, "removed-q").len(),
        1,
        "the fired item stays"
    );
    assert_eq!(ok(calls::fire_schedules(&mut a), "work_fire_schedules"), 0);
}
