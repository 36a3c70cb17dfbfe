//! Locks no role can take (issue 30; docs/contract.md, *Seams*): every lock
//! the extension relies on is out of reach of SQL's advisory-lock functions
//! and of `LOCK TABLE` by a role without privileges on its tables.
//!
//! Until 0.11.0 the pause, limit, wait and prepared-wake locks were advisory
//! locks in the `(int4, int4)` key space of `pg_advisory_lock`, which PUBLIC
//! may call: a role with no grant at all ran `pg_advisory_lock(x'57467061'::int,
//! hashtext('billing.invoices'))` and billing's worker claimed 0 of 3 due
//! items, billing's `work_limit` blocked until `statement_timeout`, and
//! every long poll of the queue fell back to polling. From 0.12.0 the
//! extension's advisory locks carry their own `locktag_field4`
//! (`src/pg/compat.rs`, `LOCK_SPACE`), which no SQL function makes.
//!
//! Here an intruder, a role that may only connect, holds every advisory
//! lock SQL lets it take with keys derived from the queue's name (both
//! forms, exclusive, for the whole test), and tries `LOCK TABLE` on every
//! table of schema `workfence`; meanwhile a claim, a long poll's wake-up and
//! the operator calls of that queue behave exactly as with no intruder.
//! Each operator call runs under a `statement_timeout` guard, so a call that
//! waits on the intruder fails the test instead of hanging it.

use crate::common;

use std::thread;

use common::{backend_pid, ok, scalar, server_error, wait_until_waiting};
use workfence_harness::calls::{self, Enqueue};

/// The queue the intruder goes after.
const QUEUE: &str = "billing.invoices";

/// The classes (first keys) of the extension's queue-level locks: pause
/// ("WFpa"), limit ("WFli"), wait ("WFwt") and prepared wake ("WFpp").
const CLASSES: [i32; 4] = [0x5746_7061, 0x5746_6c69, 0x5746_7774, 0x5746_7070];

/// The guard on each call of the victim: far longer than any of them takes
/// alone (milliseconds), far shorter than the test runner's patience.
const GUARD: &str = "SET statement_timeout = '20s'";

/// The cluster of this file's tests: prepared transactions enabled (a
/// prepared first grouped enqueue is refused, not the prepare itself).
fn cluster() -> std::sync::Arc<workfence_harness::Cluster> {
    common::shared_cluster_built(
        |builder| builder.setting("max_prepared_transactions", "4"),
        |_| {},
    )
}

/// Runs `PREPARE TRANSACTION` in `tx` and requires the extension's refusal:
/// SQLSTATE 0A000 with the extension's message naming `queue` (PostgreSQL
/// raises 0A000 on its own for a transaction that sent a NOTIFY or used a
/// temporary object, which must not pass for the extension's check).
fn prepare_refused(tx: &mut postgres::Transaction<'_>, queue: &str, what: &str) {
    let db = server_error(
        tx.batch_execute("PREPARE TRANSACTION 'refused'"),
        "0A000",
        what,
    );
    assert!(
        db.message().contains("cannot be prepared") && db.message().contains(queue),
        "{what}: not the extension's refusal: {db}"
    );
}

/// How many advisory locks the intruder holds, granted.
fn intruders_locks(admin: &mut postgres::Client) -> i64 {
    scalar(
        admin,
        "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)
          WHERE a.usename = 'intruder' AND l.locktype = 'advisory' AND l.granted",
        &[],
    )
}

#[test]
fn no_role_can_stall_a_queue_through_the_extensions_locks() {
    let cluster = cluster();
    ok(cluster.create_database("locks"), "create database");
    let mut admin = ok(cluster.connect_to("locks"), "connect");
    ok(
        admin.batch_execute("CREATE ROLE intruder LOGIN"),
        "create the intruder (no grant beyond what PUBLIC has)",
    );

    // Every advisory lock SQL can take with the queue's keys: each class
    // with hashtext(queue) in the (int4, int4) form, the same pair packed
    // into the bigint form, and the group lock's pair (hashtext(queue),
    // hashtext(group)). Session-level and exclusive, so held across every
    // transaction below and conflicting with every mode.
    let mut intruder = common::connect_as(&cluster, "locks", "intruder", "intruder");
    let key: i32 = scalar(&mut intruder, "SELECT hashtext($1)", &[&QUEUE]);
    let group_key: i32 = scalar(&mut intruder, "SELECT hashtext('customer-1')", &[]);
    let mut held = 0;
    for class in CLASSES.into_iter().chain([key]) {
        let second = if class == key { group_key } else { key };
        for sql in [
            "SELECT pg_advisory_lock($1, $2)",
            "SELECT pg_advisory_lock(($1::int4::bigint << 32) | ($2::int4::bigint & 4294967295))",
        ] {
            ok(
                intruder.execute(sql, &[&class, &second]),
                "the intruder takes an advisory lock",
            );
            held += 1;
        }
    }
    assert_eq!(
        intruders_locks(&mut admin),
        held,
        "the intruder holds every lock it asked for"
    );

    // LOCK TABLE on every table of the schema: refused (42501) before any
    // lock is granted, so nothing is held afterwards.
    let tables: Vec<String> = ok(
        admin.query(
            "SELECT c.oid::regclass::text FROM pg_class AS c
              WHERE c.relnamespace = 'workfence'::regnamespace AND c.relkind IN ('r', 'p')
              ORDER BY 1",
            &[],
        ),
        "tables of schema workfence",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert!(tables.iter().any(|t| t == "workfence.items"), "{tables:?}");
    for table in &tables {
        let mut tx = ok(intruder.transaction(), "BEGIN");
        server_error(
            tx.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")),
            "42501",
            &format!("the intruder's LOCK TABLE {table}"),
        );
        drop(tx);
    }

    // The victim's queue, with three due items: a claim takes all three.
    ok(admin.batch_execute(GUARD), "guard");
    for key in ["a", "b", "c"] {
        ok(
            calls::enqueue(&mut admin, &Enqueue::new(QUEUE).key(key)),
            "enqueue",
        );
    }
    let claimed = ok(
        calls::claim(
            &mut admin,
            QUEUE,
            "billing-worker",
            "1 minute",
            Some(10),
            None,
        ),
        "claim beside the intruder's locks",
    );
    assert_eq!(claimed.len(), 3, "the claim took every due item");

    // The operator calls, each of which takes one of the locks the intruder
    // went after: none waits (the guard would end it with 57014).
    ok(
        calls::work_limit(&mut admin, QUEUE, Some(5), Some(100), "1 hour"),
        "work_limit",
    );
    assert!(ok(calls::pause(&mut admin, QUEUE), "work_pause"));
    assert!(ok(calls::resume(&mut admin, QUEUE), "work_resume"));
    ok(
        calls::enqueue(
            &mut admin,
            &Enqueue::new(QUEUE).key("grouped").group_key("customer-1"),
        ),
        "grouped enqueue (marks the queue grouped under the pause lock)",
    );
    let grouped = ok(
        calls::claim(
            &mut admin,
            QUEUE,
            "billing-worker",
            "1 minute",
            Some(10),
            None,
        ),
        "claim of a grouped item in a limited queue (its limit and group locks)",
    );
    assert_eq!(grouped.len(), 1, "the grouped item, within the limit of 5");

    // A long poll registers as a waiter (its wait lock granted, in the
    // extension's own lock space) although the intruder holds the same keys
    // in SQL's, and an enqueue wakes it with the item.
    let mut waiter = common::connect_long_poller(&cluster, "locks");
    ok(waiter.batch_execute(GUARD), "guard");
    let waiter_pid = backend_pid(&mut waiter);
    let poll = thread::spawn(move || {
        let got = calls::claim(
            &mut waiter,
            QUEUE,
            "billing-worker",
            "1 minute",
            Some(1),
            Some("15 seconds"),
        );
        (waiter, got)
    });
    wait_until_waiting(&mut admin, waiter_pid);
    let registered: bool = scalar(
        &mut admin,
        "SELECT EXISTS (SELECT FROM pg_locks AS l
                         WHERE l.pid = $1 AND l.locktype = 'advisory' AND l.granted
                           AND l.classid = 1464235892 AND l.objid = hashtext($2)::oid
                           AND l.objsubid = 22342)",
        // 1464235892 = 0x57467774 ("WFwt", src/backend/wait.rs WAIT_LOCK_CLASS);
        // 22342 = 0x5746, the extension's lock space (src/pg/compat.rs LOCK_SPACE).
        &[&waiter_pid, &QUEUE],
    );
    assert!(
        registered,
        "the waiter holds its wait lock beside the intruder"
    );
    ok(
        calls::enqueue(&mut admin, &Enqueue::new(QUEUE).key("late")),
        "enqueue that wakes the waiter",
    );
    let (_waiter, got) = poll.join().expect("the long poll's thread");
    let got = ok(got, "the long poll");
    // It got the late item. (A waiter that lost its wait lock would get
    // it too, by polling: the registration above is what 0.11.0 lacked.)
    assert_eq!(got.len(), 1, "the long poll got the late item");

    // Still held to the end: the intruder's locks were there all along.
    assert_eq!(intruders_locks(&mut admin), held);
    drop(intruder);
}

/// A producer's transaction that enqueues a queue's first grouped item and
/// stays open (or idle) holds nothing another role waits on: claims of the
/// queue hand out its due items, and `work_pause` and `work_limit` return.
/// Until 0.11.0 that enqueue took the queue's pause lock and its settings
/// row at once, to the end of the producer's transaction (found by issue
/// 30's adversarial review): every claim got nothing and the operator calls
/// hung. The queue is marked grouped at the producer's commit, and from then
/// on its groups are serial. A first grouped enqueue cannot be prepared
/// (0A000): the prepared transaction would hold the mark's lock.
#[test]
fn an_open_first_grouped_enqueue_stalls_no_one() {
    let cluster = cluster();
    ok(cluster.create_database("open_grouped"), "create database");
    let mut admin = ok(cluster.connect_to("open_grouped"), "connect");
    ok(admin.batch_execute(GUARD), "guard");
    for key in ["a", "b"] {
        ok(
            calls::enqueue(&mut admin, &Enqueue::new("mail").key(key)),
            "enqueue",
        );
    }

    let mut producer = ok(cluster.connect_to("open_grouped"), "producer");
    let mut open = ok(producer.transaction(), "BEGIN");
    for key in ["g1", "g2"] {
        ok(
            calls::enqueue(&mut open, &Enqueue::new("mail").key(key).group_key("g")),
            "the first grouped enqueues, left uncommitted",
        );
    }
    // The producer's own claim already keeps the group serial.
    let own = ok(
        calls::claim(&mut open, "mail", "producer", "1 hour", Some(10), None),
        "a claim inside the producer's transaction",
    );
    let own_keys: Vec<&str> = own.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(own_keys, ["a", "b", "g1"], "one item of the group");
    open.rollback().expect("ROLLBACK");

    let mut open = ok(producer.transaction(), "BEGIN");
    ok(
        calls::enqueue(&mut open, &Enqueue::new("mail").key("g1").group_key("g")),
        "first grouped enqueue, left open",
    );
    ok(
        calls::enqueue(&mut open, &Enqueue::new("mail").key("g2").group_key("g")),
        "second grouped enqueue, left open",
    );
    let claimed = ok(
        calls::claim(&mut admin, "mail", "worker", "1 hour", Some(10), None),
        "claim beside the open enqueue",
    );
    assert_eq!(claimed.len(), 2, "the due items were handed out");
    ok(
        calls::work_limit(&mut admin, "mail", Some(10), None, "1 second"),
        "work_limit beside the open enqueue",
    );
    assert!(ok(calls::pause(&mut admin, "mail"), "work_pause"));
    assert!(ok(calls::resume(&mut admin, "mail"), "work_resume"));
    ok(open.commit(), "COMMIT of the grouped enqueues");

    // From the commit on, the group is serial for everyone.
    let grouped = ok(
        calls::claim(&mut admin, "mail", "worker", "1 hour", Some(10), None),
        "claim after the commit",
    );
    let keys: Vec<&str> = grouped.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["g1"], "one item of the group at a time");

    // A prepared first grouped enqueue is refused at PREPARE.
    ok(
        admin.batch_execute("SET workfence.notify_enqueued = off"),
        "no NOTIFY (which PREPARE refuses on its own)",
    );
    let mut tx = ok(admin.transaction(), "BEGIN");
    ok(
        calls::enqueue(&mut tx, &Enqueue::new("other").key("x").group_key("g")),
        "first grouped enqueue of another queue",
    );
    prepare_refused(&mut tx, "other", "PREPARE of a first grouped enqueue");
}

/// Two queue names whose 32-bit `hashtext` collide (found by brute force in
/// about a minute on one core by issue 30's adversarial review): a role
/// that may operate only its own queue, `t/01b8edb6bf`, pauses it and
/// leaves the transaction open; another team's `billing` goes on: its
/// claims hand out its items and its own pause and resume return. Until
/// 0.11.0 a pause held the queue's pause lock, keyed by that hash, from the
/// call to the end of its transaction (or of a prepared transaction, past
/// the session's end): billing's claims got nothing and its pause hung.
/// From 0.12.0 the lock is held for the moment of the commit only, and a
/// pause cannot be prepared (0A000).
#[test]
fn an_open_pause_of_a_queue_whose_name_hashes_alike_stalls_no_other_queue() {
    let cluster = cluster();
    ok(cluster.create_database("collide"), "create database");
    let mut admin = ok(cluster.connect_to("collide"), "connect");
    ok(admin.batch_execute(GUARD), "guard");
    let (tenant_queue, victim) = ("t/01b8edb6bf", "billing");
    let alike: bool = scalar(
        &mut admin,
        "SELECT hashtext($1) = hashtext($2)",
        &[&tenant_queue, &victim],
    );
    assert!(
        alike,
        "the two names must collide for this test to mean anything"
    );
    for (queue, key) in [(victim, "a"), (victim, "b"), (tenant_queue, "t")] {
        ok(
            calls::enqueue(&mut admin, &Enqueue::new(queue).key(key)),
            "enqueue",
        );
    }

    let mut tenant = ok(cluster.connect_to("collide"), "the tenant's operator");
    let mut open = ok(tenant.transaction(), "BEGIN");
    assert!(ok(
        calls::pause(&mut open, tenant_queue),
        "the tenant's pause, left open"
    ));
    let claimed = ok(
        calls::claim(
            &mut admin,
            victim,
            "billing-worker",
            "1 hour",
            Some(10),
            None,
        ),
        "billing's claim beside the open pause",
    );
    assert_eq!(claimed.len(), 2, "billing's due items were handed out");
    assert!(ok(calls::pause(&mut admin, victim), "billing's pause"));
    assert!(ok(calls::resume(&mut admin, victim), "billing's resume"));
    ok(open.commit(), "COMMIT of the tenant's pause");
    assert!(
        ok(
            calls::claim(&mut admin, tenant_queue, "w", "1 hour", Some(10), None),
            "a claim of the paused queue"
        )
        .is_empty(),
        "the tenant's queue is paused from the commit on"
    );

    // None of the settings verbs can be prepared.
    let mut tx = ok(admin.transaction(), "BEGIN");
    assert!(ok(calls::resume(&mut tx, tenant_queue), "resume"));
    prepare_refused(&mut tx, tenant_queue, "PREPARE of a resume");
    drop(tx);
    let mut tx = ok(admin.transaction(), "BEGIN");
    assert!(ok(calls::pause(&mut tx, victim), "pause"));
    prepare_refused(&mut tx, victim, "PREPARE of a pause");
    drop(tx);
    let mut tx = ok(admin.transaction(), "BEGIN");
    ok(
        calls::work_limit(&mut tx, victim, Some(2), None, "1 second"),
        "work_limit",
    );
    prepare_refused(&mut tx, victim, "PREPARE of a work_limit");
}

/// Until 0.11.0 a claim of a limited queue held the queue's limit lock to
/// the end of its transaction, and a worker that prepared such a
/// transaction stopped every other claim of the queue until `COMMIT
/// PREPARED`, past its session's end (found by issue 30's adversarial
/// review; 0.12.0's first fix refused the prepare). From issue 33 a claim
/// holds only the slot it took (src/verbs/flow.rs): the prepare goes through,
/// the other claims of the queue take the other slots meanwhile, and the
/// limit still counts the prepared claim once it commits.
#[test]
fn a_prepared_claim_of_a_limited_queue_holds_only_its_own_slot() {
    let cluster = cluster();
    ok(cluster.create_database("prepared_claim"), "create database");
    let mut admin = ok(cluster.connect_to("prepared_claim"), "connect");
    ok(admin.batch_execute(GUARD), "guard");
    ok(
        calls::work_limit(&mut admin, "limited", Some(3), None, "1 second"),
        "work_limit",
    );
    for key in ["a", "b", "c", "d"] {
        ok(
            calls::enqueue(&mut admin, &Enqueue::new("limited").key(key)),
            "enqueue",
        );
    }
    let mut worker = ok(cluster.connect_to("prepared_claim"), "worker");
    let mut tx = ok(worker.transaction(), "BEGIN");
    let claimed = ok(
        calls::claim(&mut tx, "limited", "w2", "1 hour", Some(1), None),
        "claim of the limited queue",
    );
    assert_eq!(claimed.len(), 1);
    ok(
        tx.batch_execute("PREPARE TRANSACTION 'limited_claim'"),
        "PREPARE after a claim of a limited queue",
    );
    drop(tx);
    // The prepared claim holds one slot: two are left, and under GUARD's
    // statement timeout the claim takes them at once.
    let others = ok(
        calls::claim(&mut admin, "limited", "w1", "1 hour", Some(10), None),
        "claim beside the prepared one",
    );
    assert_eq!(
        others.len(),
        2,
        "the claims beside a prepared one: {others:?}"
    );
    ok(
        admin.batch_execute("COMMIT PREPARED 'limited_claim'"),
        "COMMIT PREPARED",
    );
    // Three claimed, the limit: the fourth item waits.
    assert_eq!(
        ok(
            calls::claim(&mut admin, "limited", "w1", "1 hour", Some(10), None),
            "claim at the limit"
        )
        .len(),
        0
    );
    let claimed_now: i64 = ok(
        admin.query_one(
            "SELECT count(*) FROM workfence.items WHERE queue = 'limited' AND state = 'claimed'",
            &[],
        ),
        "count",
    )
    .get(0);
    assert_eq!(claimed_now, 3);
}
