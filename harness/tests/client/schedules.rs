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
use workfence_harness::calls::{self, SqlState};
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

/// The slots of `queue` in `c`, as seconds since the epoch, must be every
/// second from the first to the last, once each; they are returned.
fn contiguous(c: &mut postgres::Client, queue: &str, what: &str) -> Vec<i64> {
    let slots = fired_slots(c, queue);
    let expected: Vec<i64> = (slots[0]..=*slots.last().unwrap()).collect();
    assert_eq!(
        slots, expected,
        "{what}: one item per slot, none skipped, none twice"
    );
    slots
}

/// The server's clock, in whole seconds since the epoch.
fn server_second(c: &mut postgres::Client) -> i64 {
    common::scalar(
        c,
        "SELECT extract(epoch FROM date_trunc('second', clock_timestamp()))::bigint",
        &[],
    )
}

#[test]
fn a_standby_promoted_after_fires_it_missed_fires_those_slots_once_in_its_history() {
    let base = common::scratch_base();
    let mut primary = ok(Cluster::start(&base), "the primary");
    ok(primary.create_database("jobs"), "creating the database");
    let mut p = ok(primary.connect_to("jobs"), "connecting");
    assert!(ok(
        calls::schedule(&mut p, "tick", "* * * * * *", "ticks", "UTC", "all"),
        "work_schedule"
    ));
    // Fires the standby receives.
    let start = server_second(&mut p);
    common::poll_until(
        &mut p,
        "SELECT clock_timestamp() >= to_timestamp($1::float8 + 2)",
        &[&(start as f64)],
        "two slots passing",
    );
    assert!(ok(calls::fire_schedules(&mut p), "work_fire_schedules") >= 2);
    let mut standby = ok(primary.standby(&base), "the standby");
    common::caught_up(&primary, &standby);
    let seen_by_standby = fired_slots(&mut p, "ticks");
    // The standby falls behind: stopped, it misses the fires that follow.
    ok(standby.stop(), "stopping the standby");
    let behind = *seen_by_standby.last().unwrap();
    common::poll_until(
        &mut p,
        "SELECT clock_timestamp() >= to_timestamp($1::float8 + 3)",
        &[&(behind as f64)],
        "three more slots passing",
    );
    assert!(ok(calls::fire_schedules(&mut p), "work_fire_schedules") >= 3);
    let lost = contiguous(&mut p, "ticks", "the old primary");
    // Worker A claims an item of a slot the standby never received.
    let key = format!(
        "tick@{}",
        common::scalar::<String>(
            &mut p,
            "SELECT to_char(to_timestamp($1::float8) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
            &[&((behind + 1) as f64)],
        )
    );
    let a = ok(
        calls::claim_key(&mut p, "ticks", &key, "A", "10 minutes"),
        "A's claim",
    )
    .expect("the lost slot's item is claimable")
    .token("A");
    drop(p);
    ok(primary.crash(), "crashing the primary");
    ok(standby.start_again(), "starting the standby again");
    ok(standby.promote(), "promoting the standby");
    let mut s = ok(standby.connect_to("jobs"), "connecting to the new primary");
    assert_eq!(
        fired_slots(&mut s, "ticks"),
        seen_by_standby,
        "the new primary's history"
    );
    // Fired again in this history: every slot the old primary fired after
    // the standby stopped, once each, and the ones since.
    assert!(ok(calls::fire_schedules(&mut s), "work_fire_schedules") >= 3);
    assert_eq!(ok(calls::fire_schedules(&mut s), "work_fire_schedules"), 0);
    let survived = contiguous(&mut s, "ticks", "the new primary");
    for slot in &lost {
        assert!(
            survived.contains(slot),
            "slot {slot} lost in the new history"
        );
    }
    // The old holder of a lost slot's item is refused; the new item's holder
    // gets a newer epoch.
    let b = ok(
        calls::claim_key(&mut s, "ticks", &key, "B", "10 minutes"),
        "B's claim",
    )
    .expect("the slot fired again is claimable")
    .token("B");
    assert!(
        b.epoch > a.epoch,
        "B's epoch {} is above A's {}",
        b.epoch,
        a.epoch
    );
    assert!(
        !ok(calls::finish(&mut s, &a, None), "A's finish"),
        "A's token is refused"
    );
    assert!(ok(calls::finish(&mut s, &b, None), "B's finish"));
    println!(
        "schedules failover: {} slots on the old primary, {} seen by the standby, {} after \
         promotion and one fire: every slot of the surviving history once, none of the lost \
         window lost",
        lost.len(),
        seen_by_standby.len(),
        survived.len()
    );
}

/// One field of a generated cron expression: its text and the values it
/// allows (`None`: every value, written `*`).
#[derive(Debug, Clone)]
struct Field {
    text: String,
    values: Option<Vec<i32>>,
}

/// A field over `low..=high`: `*`, `*/k`, `a-b`, a list or one value.
fn field(low: i32, high: i32) -> impl proptest::strategy::Strategy<Value = Field> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Field {
            text: "*".into(),
            values: None
        }),
        (2..=((high - low) / 2).max(2)).prop_map(move |k| Field {
            text: format!("*/{k}"),
            values: Some((low..=high).step_by(k as usize).collect()),
        }),
        (low..=high, low..=high).prop_map(|(a, b)| {
            let (a, b) = (a.min(b), a.max(b));
            Field {
                text: format!("{a}-{b}"),
                values: Some((a..=b).collect()),
            }
        }),
        proptest::collection::btree_set(low..=high, 1..4).prop_map(|set| Field {
            text: set.iter().map(i32::to_string).collect::<Vec<_>>().join(","),
            values: Some(set.into_iter().collect()),
        }),
    ]
}

/// The first `n` slots after `from` (unix seconds) of the expression whose
/// fields are `f` (minute, hour, day of month, month, day of week) in
/// `zone`, found by PostgreSQL walking every minute for 400 days in its own
/// zone data: the oracle. A day of month and a day of week both restricted
/// match either (Vixie cron).
fn oracle(c: &mut postgres::Client, f: &[Field; 5], zone: &str, from: i64, n: i64) -> Vec<i64> {
    let set = |i: usize| f[i].values.clone();
    ok(
        c.query(
            "SELECT extract(epoch FROM t)::bigint
               FROM generate_series(to_timestamp($1::float8) + interval '1 minute',
                                    to_timestamp($1::float8) + interval '400 days',
                                    interval '1 minute') AS t,
                    LATERAL (SELECT t AT TIME ZONE $2 AS l) AS z
              WHERE ($3::int[] IS NULL OR extract(minute FROM z.l)::int = ANY ($3))
                AND ($4::int[] IS NULL OR extract(hour FROM z.l)::int = ANY ($4))
                AND ($6::int[] IS NULL OR extract(month FROM z.l)::int = ANY ($6))
                AND CASE WHEN $5::int[] IS NULL AND $7::int[] IS NULL THEN true
                         WHEN $5::int[] IS NULL THEN extract(dow FROM z.l)::int = ANY ($7)
                         WHEN $7::int[] IS NULL THEN extract(day FROM z.l)::int = ANY ($5)
                         ELSE extract(day FROM z.l)::int = ANY ($5)
                              OR extract(dow FROM z.l)::int = ANY ($7) END
              ORDER BY t
              LIMIT $8",
            &[
                &(from as f64),
                &zone,
                &set(0),
                &set(1),
                &set(2),
                &set(3),
                &set(4),
                &n,
            ],
        ),
        "the oracle",
    )
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[test]
fn slots_agree_with_an_oracle_over_postgresqls_zone_data() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};

    let cluster = common::shared_cluster();
    let db = "schedule_oracle";
    ok(cluster.create_database(db), "creating the database");
    let c = std::cell::RefCell::new(ok(cluster.connect_to(db), "connecting"));
    // Zones without daylight saving for fixed-time expressions (whose skipped
    // and repeated local times follow rules of their own, unit-tested in
    // src/base/cron.rs); any zone for the others, whose slots are exactly
    // the real minutes whose local time matches.
    const PLAIN: [&str; 4] = ["UTC", "Asia/Kolkata", "Asia/Tokyo", "America/Phoenix"];
    const DST: [&str; 3] = ["Europe/Berlin", "America/New_York", "Australia/Sydney"];
    let strategy = (
        field(0, 59),
        field(0, 23),
        field(1, 31),
        field(1, 12),
        field(0, 6),
        0..PLAIN.len() + DST.len(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 24,
        rng_seed: RngSeed::Fixed(34),
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0);
    let outcome = runner.run(&strategy, |(minute, hour, dom, month, dow, zone)| {
        case.set(case.get() + 1);
        let case = case.get();
        let mut c = c.borrow_mut();
        let c = &mut *c;
        let fields = [minute, hour, dom, month, dow];
        let fixed = fields[0].values.as_ref().is_some_and(|v| v.len() == 1)
            && fields[1].values.as_ref().is_some_and(|v| v.len() == 1);
        let zone = if fixed || zone < PLAIN.len() {
            PLAIN[zone % PLAIN.len()]
        } else {
            DST[zone - PLAIN.len()]
        };
        let cron = fields.iter().map(|f| f.text.as_str()).collect::<Vec<_>>().join(" ");
        // A year back, so that 'all' fires up to 100 slots at once.
        let from: i64 = common::scalar(
            c,
            "SELECT extract(epoch FROM date_trunc('minute', clock_timestamp()) - interval '1 year')::bigint",
            &[],
        );
        let expected = oracle(c, &fields, zone, from, 100);
        let name = format!("p{case}");
        let queue = format!("oracle-{case}");
        let made = calls::schedule(c, &name, &cron, &queue, zone, "all");
        if expected.is_empty() {
            // Names no time within 400 days (e.g. 30 February): refused or
            // never due; either way nothing to compare.
            return Ok(());
        }
        prop_assert!(made.is_ok(), "{cron} in {zone}: {made:?}");
        // Start the schedule at the oracle's first slot; every later slot is
        // the extension's own walk.
        ok(
            c.execute(
                "UPDATE workfence.schedules SET next_slot = to_timestamp($2::float8) WHERE name = $1",
                &[&name, &(expected[0] as f64)],
            ),
            "starting the schedule",
        );
        ok(calls::fire_schedules(c), "work_fire_schedules");
        let fired = fired_slots(c, &queue);
        let n = fired.len().min(expected.len());
        prop_assert!(n > 0, "{cron} in {zone}: nothing fired");
        prop_assert_eq!(&fired[..n], &expected[..n], "{} in {}", cron, zone);
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    println!(
        "schedules oracle: {} random expressions agreed with PostgreSQL's zone data",
        case.get()
    );
}

#[test]
fn schedules_through_the_router_live_on_their_queues_shard_and_move_with_it() {
    let cluster = common::shared_cluster();
    let router = common::router(&cluster, "router_schedules");
    let mut r = ok(
        cluster.connect_to(&router.database),
        "connecting to the router",
    );
    let mut shards = common::shard_connections(&cluster, &router);
    // Two queues on two shards.
    let names: Vec<String> = (0..32).map(|i| format!("cron-{i}")).collect();
    let first = &names[0];
    let first_shard = ok(router.shard_of_queue(&mut r, first), "a shard");
    let (second, second_shard) = names
        .iter()
        .map(|q| (q, ok(router.shard_of_queue(&mut r, q), "a shard")))
        .find(|(_, shard)| *shard != first_shard)
        .expect("a queue on another shard");
    let on = |shards: &mut [postgres::Client], shard: usize| -> i64 {
        common::scalar(
            &mut shards[shard],
            "SELECT count(*) FROM workfence.schedules WHERE name = 'report'",
            &[],
        )
    };

    assert!(ok(
        calls::schedule(&mut r, "report", "0 * * * *", first, "UTC", "latest"),
        "schedule"
    ));
    assert_eq!(on(&mut shards, first_shard), 1, "on the queue's shard");
    assert_eq!(on(&mut shards, second_shard), 0);
    let listed: String = common::scalar(
        &mut r,
        "SELECT queue FROM workfence.work_schedules WHERE name = 'report'",
        &[],
    );
    assert_eq!(&listed, first);
    assert!(ok(calls::pause_schedule(&mut r, "report"), "pause"));
    assert!(ok(calls::resume_schedule(&mut r, "report"), "resume"));
    let unknown =
        calls::pause_schedule(&mut r, "no-such-schedule").expect_err("an unknown schedule");
    assert!(format!("{unknown:?}").contains("42704"), "{unknown:?}");

    ok(
        shards[first_shard].batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) \
              WHERE name = 'report'",
        ),
        "making a slot due on the shard",
    );
    assert_eq!(ok(calls::fire_schedules(&mut r), "work_fire_schedules"), 1);
    assert_eq!(fired_slots(&mut shards[first_shard], first).len(), 1);

    // A move refused by the new queue's shard (a bad expression) changes
    // nothing: the schedule stays where it was.
    let refused = calls::schedule(&mut r, "report", "61 * * * *", second, "UTC", "latest")
        .expect_err("a bad expression");
    assert!(format!("{refused:?}").contains("22023"), "{refused:?}");
    assert_eq!(on(&mut shards, first_shard), 1, "still on its shard");
    assert_eq!(on(&mut shards, second_shard), 0);
    // Moved to a queue of another shard: it leaves the old shard.
    assert!(ok(
        calls::schedule(&mut r, "report", "0 * * * *", second, "UTC", "latest"),
        "move"
    ));
    assert_eq!(on(&mut shards, first_shard), 0, "gone from the old shard");
    assert_eq!(on(&mut shards, second_shard), 1, "on the new queue's shard");
    assert!(ok(calls::unschedule(&mut r, "report"), "unschedule"));
    assert!(!ok(calls::unschedule(&mut r, "report"), "unschedule again"));
}

/// Slot -> item latency of `queue`'s items, p50 and p99, in milliseconds.
fn latency(c: &mut postgres::Client, queue: &str) -> (f64, f64) {
    let row = ok(
        c.query_one(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), \
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) \
               FROM (SELECT extract(epoch FROM created_at - run_at) * 1000 AS ms \
                       FROM workfence.items WHERE queue = $1) AS l",
            &[&queue],
        ),
        "fire latency",
    );
    (row.get(0), row.get(1))
}

/// Each firer alone on a per-second schedule of its own database, side by
/// side for 20 s: every slot fired once, and the latency from the slot to
/// its item (printed: the figures of issue 34's closing note).
#[test]
fn each_firer_alone_fires_every_slot_once_and_its_latency_is_printed() {
    const ALONE: Duration = Duration::from_secs(20);
    let cluster = ok(
        Cluster::builder(common::scratch_base())
            .setting("shared_preload_libraries", "pg_workfence")
            .setting("workfence.maintenance_naptime", "3600")
            .setting("workfence.maintenance_database", "by_worker")
            .start(),
        "starting a cluster with the library preloaded",
    );
    for db in ["by_worker", "by_function", "by_claims"] {
        ok(cluster.create_database(db), "creating a database");
        let mut c = ok(cluster.connect_to(db), "connecting");
        assert!(ok(
            calls::schedule(&mut c, "tick", "* * * * * *", "ticks", "UTC", "all"),
            "work_schedule"
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    {
        let stop = stop.clone();
        let mut c = ok(cluster.connect_to("by_function"), "connecting");
        threads.push(std::thread::spawn(move || {
            // A client's loop, as pg_cron would call it (every 100 ms here).
            while !stop.load(Ordering::Relaxed) {
                ok(calls::fire_schedules(&mut c), "work_fire_schedules");
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    {
        let stop = stop.clone();
        let mut c = common::connect_long_poller(&cluster, "by_claims");
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for item in ok(
                    calls::claim(
                        &mut c,
                        "ticks",
                        "w",
                        "30 seconds",
                        Some(10),
                        Some("1 second"),
                    ),
                    "work_claim",
                ) {
                    assert!(ok(
                        calls::finish(&mut c, &item.token("w"), None),
                        "work_finish"
                    ));
                }
            }
        }));
    }
    std::thread::sleep(ALONE);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a firer panicked");
    }
    let mut figures = Vec::new();
    for (db, firer) in [
        ("by_worker", "the maintenance worker"),
        ("by_function", "work_fire_schedules() every 100 ms"),
        ("by_claims", "a long-polling worker's claims"),
    ] {
        let mut c = ok(cluster.connect_to(db), "connecting");
        ok(calls::unschedule(&mut c, "tick"), "work_unschedule");
        let slots = contiguous(&mut c, "ticks", firer);
        assert!(
            slots.len() as u64 >= ALONE.as_secs() - 2,
            "{firer}: {} slots",
            slots.len()
        );
        let (p50, p99) = latency(&mut c, "ticks");
        figures.push(format!(
            "{firer}: {} slots, p50 {p50:.1} ms, p99 {p99:.1} ms",
            slots.len()
        ));
    }
    println!(
        "schedules fire latency (slot -> item), each firer alone: {}",
        figures.join("; ")
    );
}

/// Where queue grants are enforced, managing a schedule needs `operate` on
/// its queue: a team may schedule into its own queues, and can neither
/// schedule into another team's queue nor take over, pause or remove
/// another team's schedule by its name (42501, nothing changed).
#[test]
fn a_team_manages_only_the_schedules_of_its_own_queues() {
    let cluster = common::shared_cluster();
    let db = "schedule_grants";
    ok(cluster.create_database(db), "creating the database");
    let mut admin = ok(cluster.connect_to(db), "connecting");
    ok(
        admin.batch_execute(
            "DO $$ BEGIN
                 CREATE ROLE sched_billing LOGIN;
                 CREATE ROLE sched_search LOGIN;
             EXCEPTION WHEN duplicate_object THEN NULL; END $$;
             GRANT USAGE ON SCHEMA workfence TO sched_billing, sched_search;
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO sched_billing, sched_search;
             GRANT SELECT ON workfence.work_schedules TO sched_billing, sched_search;
             SELECT workfence.work_grant('operate', 'billing.*', 'sched_billing');
             SELECT workfence.work_grant('enqueue', 'billing.*', 'sched_billing');
             SELECT workfence.work_grant('read', 'billing.*', 'sched_billing');
             SELECT workfence.work_grant('operate', 'search.*', 'sched_search');
             SELECT workfence.work_grant('enqueue', 'search.*', 'sched_search');
             SELECT workfence.work_grant('read', 'search.*', 'sched_search');
             SELECT workfence.work_enforce_grants(true);",
        ),
        "two teams' roles and grants",
    );
    let mut billing = common::connect_as(&cluster, db, "sched_billing", "billing");
    let mut search = common::connect_as(&cluster, db, "sched_search", "search");
    assert!(ok(
        calls::schedule(
            &mut billing,
            "invoices",
            "0 2 * * *",
            "billing.run",
            "UTC",
            "latest"
        ),
        "billing's own schedule"
    ));
    let before = common::snapshot(&mut admin);
    let schedules = || {
        "SELECT count(*) FROM workfence.schedules WHERE name = 'invoices' AND queue = 'billing.run' AND NOT paused"
    };
    for (what, refused) in [
        (
            "scheduling into billing's queue",
            calls::schedule(
                &mut search,
                "mine",
                "0 2 * * *",
                "billing.run",
                "UTC",
                "latest",
            )
            .err(),
        ),
        (
            "taking billing's schedule over",
            calls::schedule(
                &mut search,
                "invoices",
                "0 3 * * *",
                "search.run",
                "UTC",
                "latest",
            )
            .err(),
        ),
        (
            "pausing billing's schedule",
            calls::pause_schedule(&mut search, "invoices").err(),
        ),
        (
            "removing billing's schedule",
            calls::unschedule(&mut search, "invoices").err(),
        ),
    ] {
        let e = refused.unwrap_or_else(|| panic!("{what} was allowed"));
        assert_eq!(e.sqlstate(), Some("42501"), "{what}: {e:?}");
    }
    assert_eq!(
        common::snapshot(&mut admin),
        before,
        "the refused calls changed nothing"
    );
    assert_eq!(common::scalar::<i64>(&mut admin, schedules(), &[]), 1);
    // Review of issue 34: search's fire, left in an open transaction, holds
    // only schedules of queues search has a grant on, so billing's own
    // pause of its due schedule does not wait for it.
    ok(
        admin.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()) \
              WHERE name = 'invoices'",
        ),
        "billing's schedule due",
    );
    ok(search.batch_execute("BEGIN"), "BEGIN");
    assert_eq!(ok(calls::fire_schedules(&mut search), "search's fire"), 0);
    ok(
        billing.batch_execute("SET lock_timeout = '5s'"),
        "a bound on waiting",
    );
    assert!(ok(
        calls::pause_schedule(&mut billing, "invoices"),
        "billing's pause, not held"
    ));
    ok(search.batch_execute("ROLLBACK"), "ROLLBACK");
    assert!(ok(
        calls::resume_schedule(&mut billing, "invoices"),
        "resumed"
    ));
    // Each team sees only its own schedules.
    let seen: i64 = common::scalar(
        &mut search,
        "SELECT count(*) FROM workfence.work_schedules",
        &[],
    );
    assert_eq!(seen, 0, "search does not see billing's schedule");
    assert!(ok(
        calls::pause_schedule(&mut billing, "invoices"),
        "billing pauses its own"
    ));
    // A role that may operate a queue but not enqueue into it cannot make
    // a schedule there: its items would be enqueues.
    ok(
        admin
            .batch_execute("SELECT workfence.work_revoke('enqueue', 'billing.*', 'sched_billing')"),
        "billing loses enqueue",
    );
    let e = calls::schedule(
        &mut billing,
        "more",
        "0 4 * * *",
        "billing.run",
        "UTC",
        "latest",
    )
    .expect_err("no enqueue grant");
    assert_eq!(e.sqlstate(), Some("42501"), "{e:?}");
}

/// Review of issue 34: an uncommitted enqueue of a schedule's next key (any
/// role that may enqueue into the queue can predict it) held every fire,
/// and so every other schedule, until it ended. Now that schedule is passed
/// over, the others fire at once, and it fires once the enqueue ends.
#[test]
fn a_slots_key_enqueued_by_an_open_transaction_holds_up_no_other_schedule() {
    let cluster = common::shared_cluster();
    let db = "schedule_key_in_flight";
    ok(cluster.create_database(db), "creating the database");
    let mut admin = ok(cluster.connect_to(db), "connecting");
    for (name, queue) in [("held", "held-q"), ("free", "free-q")] {
        assert!(ok(
            calls::schedule(&mut admin, name, "0 * * * *", queue, "UTC", "latest"),
            "schedule"
        ));
    }
    ok(
        admin.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp())",
        ),
        "both due",
    );
    let key: String = common::scalar(
        &mut admin,
        "SELECT 'held@' || to_char(date_trunc('hour', clock_timestamp()) AT TIME ZONE 'UTC', \
                'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        &[],
    );
    let mut producer = ok(cluster.connect_to(db), "connecting the producer");
    ok(producer.batch_execute("BEGIN"), "BEGIN");
    ok(
        producer.execute("SELECT workfence.work_enqueue('held-q', '{}', $1)", &[&key]),
        "the key enqueued, not committed",
    );
    let mut firer = ok(cluster.connect_to(db), "connecting the firer");
    ok(
        firer.batch_execute("SET statement_timeout = '10s'"),
        "a bound on waiting",
    );
    let started = Instant::now();
    assert_eq!(
        ok(calls::fire_schedules(&mut firer), "work_fire_schedules"),
        1,
        "only 'free' fired"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the fire waited {:?}",
        started.elapsed()
    );
    assert_eq!(fired_slots(&mut firer, "free-q").len(), 1);
    ok(producer.batch_execute("COMMIT"), "COMMIT");
    // 'held' is still due: its slot's key now exists, so it records it and
    // enqueues nothing more.
    assert_eq!(
        ok(calls::fire_schedules(&mut firer), "work_fire_schedules"),
        0
    );
    let recorded: bool = common::scalar(
        &mut firer,
        "SELECT last_item_id = (SELECT id FROM workfence.items WHERE key = $1) \
           FROM workfence.schedules WHERE name = 'held'",
        &[&key],
    );
    assert!(
        recorded,
        "the held schedule moved on past the existing item's slot"
    );
}

/// Review of issue 34: a claim's fire that its statement then rolled back
/// left the backend believing the slot fired, so its later claims never
/// fired it. Now the next claim of the same session fires it.
#[test]
fn a_claims_fire_rolled_back_with_its_statement_is_fired_by_the_next_claim() {
    let (_cluster, mut c) = common::own_cluster_with_database("rolled_back");
    assert!(ok(
        calls::schedule(&mut c, "y", "0 0 1 1 *", "rb", "UTC", "latest"),
        "schedule"
    ));
    ok(
        c.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('year', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
        ),
        "this year's slot due",
    );
    // A replace (another catch_up) makes the session read the schedules again.
    assert!(ok(
        calls::schedule(&mut c, "y", "0 0 1 1 *", "rb", "UTC", "all"),
        "replace"
    ));
    let failed = c.query(
        "SELECT 1 / (id - id) FROM workfence.work_claim('rb', 'w', '1 minute')",
        &[],
    );
    assert_eq!(
        failed
            .expect_err("the statement fails after its claim fired")
            .sqlstate(),
        Some("22012")
    );
    let claimed = ok(
        calls::claim(&mut c, "rb", "w", "1 minute", None, None),
        "work_claim",
    );
    assert_eq!(
        claimed.len(),
        1,
        "the slot the failed statement fired is fired again"
    );
    assert!(claimed[0].key.starts_with("y@"), "{}", claimed[0].key);
}

/// Review of issue 34: a schedule changed in a prepared transaction was
/// told to the maintenance worker only at the preparing session's next
/// commit. Now such a transaction cannot be prepared (0A000).
#[test]
fn a_transaction_that_changed_a_schedule_cannot_be_prepared() {
    let cluster = common::shared_cluster_built(
        |builder| builder.setting("max_prepared_transactions", "4"),
        |_| {},
    );
    let db = "schedule_prepared";
    ok(cluster.create_database(db), "creating the database");
    let mut c = ok(cluster.connect_to(db), "connecting");
    ok(c.batch_execute("BEGIN"), "BEGIN");
    assert!(ok(
        calls::schedule(&mut c, "p", "0 * * * *", "pq", "UTC", "latest"),
        "schedule"
    ));
    let refused = c
        .batch_execute("PREPARE TRANSACTION 'schedule'")
        .expect_err("refused");
    assert_eq!(refused.sqlstate(), Some("0A000"), "{refused:?}");
    let mut other = ok(cluster.connect_to(db), "connecting");
    let none: i64 = common::scalar(&mut other, "SELECT count(*) FROM workfence.schedules", &[]);
    assert_eq!(none, 0, "nothing was prepared or committed");
}

/// Review of issue 34: one schedule whose fire fails (here an expression
/// the parser now refuses, written into the table by hand) stopped every
/// fire in the database and every claim of its queue. Now it is passed
/// over with a WARNING naming it, and stays due; the others fire and the
/// queue's items are claimed.
#[test]
fn a_schedule_that_cannot_fire_holds_up_no_other_nor_its_queues_claims() {
    let cluster = common::shared_cluster();
    let db = "schedule_broken";
    ok(cluster.create_database(db), "creating the database");
    let mut c = ok(cluster.connect_to(db), "connecting");
    for (name, queue) in [("good", "good-q"), ("bad", "bad-q")] {
        assert!(ok(
            calls::schedule(&mut c, name, "0 * * * *", queue, "UTC", "latest"),
            "schedule"
        ));
    }
    ok(
        c.batch_execute(
            "UPDATE workfence.schedules SET next_slot = date_trunc('hour', clock_timestamp()); \
             UPDATE workfence.schedules SET cron = '* * * * * * * *' WHERE name = 'bad';",
        ),
        "both due, one unreadable",
    );
    assert_eq!(
        ok(calls::fire_schedules(&mut c), "work_fire_schedules"),
        1,
        "good fired"
    );
    let still_due: bool = common::scalar(
        &mut c,
        "SELECT next_slot <= clock_timestamp() FROM workfence.schedules WHERE name = 'bad'",
        &[],
    );
    assert!(still_due, "the broken schedule stays due");
    common::enqueue_new(
        &mut c,
        &workfence_harness::calls::Enqueue::new("bad-q").key("plain"),
    );
    let claimed = ok(
        calls::claim(&mut c, "bad-q", "w", "1 minute", None, None),
        "work_claim",
    );
    assert_eq!(claimed.len(), 1, "the queue's own item is claimed");
    assert_eq!(claimed[0].key, "plain");
}
