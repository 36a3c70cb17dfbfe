//! What a new user trips over (issue 11), from real client connections.
//!
//! - `work_assert` in autocommit: a current token is refused with 25P01, as
//!   `LOCK TABLE` refuses it (its row lock would end with the statement);
//!   inside `BEGIN` (or an implicit block: several statements in one query
//!   string) it works and holds the lock; a DO block run by one autocommit
//!   statement is refused too; a dead token gets its 55000 either way.
//! - Interval DETAILs show intervals as the server prints them (the
//!   session's `IntervalStyle`), not counts of microseconds.
//! - `work_assert`'s HINT is one per reason a token is dead.
//! - A claim left in an open transaction: another connection's renew is
//!   refused and `work_lease_status` says `uncommitted`; after COMMIT the
//!   token is `current`, after ROLLBACK `superseded` (the claim never took
//!   effect).
//! - An operator finds the claimers long-polling a queue in `pg_locks` with
//!   `hashtext(queue)` ([`WAITERS`], the query `src/backend/wait.rs` documents).
//!
//! Needs the extension installed (`scripts/test.sh`).

use crate::common;

use std::sync::Arc;
use std::thread;

use common::{ok, poll_until, scalar};
use postgres::error::DbError;
use postgres::Client;
use workfence_harness::Cluster;

/// The queue every test uses (each test has its own database).
const QUEUE: &str = "mail";

/// The claimers long-polling queue `'mail'` in this database, by backend
/// pid: exactly the query `src/backend/wait.rs` gives operators (the wait lock is
/// the advisory lock `(0x57467774, hashtext(queue))`, "WFwt", in the
/// extension's own lock space, `objsubid` 22342).
const WAITERS: &str = "\
SELECT l.pid
  FROM pg_locks AS l
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT d.oid FROM pg_database AS d
                      WHERE d.datname = current_database())
   AND l.classid = 1464235892
   AND l.objid = hashtext('mail')::oid
   AND l.objsubid = 22342
   AND l.granted";

/// One cluster for the tests that run at the same time.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

/// A fresh database with the extension; returns a connection to it.
fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

/// The server's error of a call that must fail.
fn db_error<T: std::fmt::Debug>(result: Result<T, postgres::Error>, what: &str) -> DbError {
    match result {
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
        Err(e) => e
            .as_db_error()
            .unwrap_or_else(|| panic!("{what}: not a server error: {e}"))
            .clone(),
    }
}

/// Enqueue `key` and claim it as owner `w`: its (id, epoch).
fn enqueue_and_claim(c: &mut Client, key: &str) -> (i64, i64) {
    ok(
        c.execute(
            "SELECT workfence.work_enqueue($1, '{}', $2)",
            &[&QUEUE, &key],
        ),
        "enqueue",
    );
    claim_key(c, key)
}

/// `work_claim_key(QUEUE, key, 'w', '1 minute')`: its (id, epoch).
fn claim_key(c: &mut Client, key: &str) -> (i64, i64) {
    let row = ok(
        c.query_one(
            "SELECT id, epoch FROM workfence.work_claim_key($1, $2, 'w', '1 minute')",
            &[&QUEUE, &key],
        ),
        "claim_key",
    );
    (row.get(0), row.get(1))
}

fn lease_status(c: &mut Client, id: i64, owner: &str, epoch: i64) -> String {
    scalar(
        c,
        "SELECT workfence.work_lease_status($1, $2, $3)",
        &[&id, &owner, &epoch],
    )
}

fn renew(c: &mut Client, id: i64, epoch: i64) -> bool {
    scalar(
        c,
        "SELECT workfence.work_renew($1, 'w', $2, '1 minute')",
        &[&id, &epoch],
    )
}

/// `work_assert` inside BEGIN ... ROLLBACK; its error.
fn assert_error_in_block(c: &mut Client, id: i64, owner: &str, epoch: i64) -> DbError {
    let mut tx = ok(c.transaction(), "BEGIN");
    let err = db_error(
        tx.execute(
            "SELECT workfence.work_assert($1, $2, $3)",
            &[&id, &owner, &epoch],
        ),
        "work_assert of a dead token",
    );
    ok(tx.rollback(), "ROLLBACK");
    err
}

#[test]
fn work_assert_outside_a_transaction_block_is_refused_with_25p01() {
    let cluster = cluster();
    let mut c = database(&cluster, "assert_autocommit");
    let mut other = ok(cluster.connect_to("assert_autocommit"), "second connection");
    let (id, epoch) = enqueue_and_claim(&mut c, "job");
    let assert = "SELECT workfence.work_assert($1, 'w', $2)";

    // Autocommit, current token: refused as LOCK TABLE is refused.
    let err = db_error(c.execute(assert, &[&id, &epoch]), "autocommit work_assert");
    assert_eq!(err.code().code(), "25P01", "{err:?}");
    assert_eq!(
        err.message(),
        "work_assert can only be used in transaction blocks"
    );
    assert!(
        err.detail().is_some_and(|d| d.contains("row lock")),
        "DETAIL says why: {err:?}"
    );
    assert!(
        err.hint().is_some_and(|h| h.contains("BEGIN")),
        "HINT says what to do: {err:?}"
    );
    // Nothing was locked, nothing changed: the token is still current.
    assert_eq!(lease_status(&mut c, id, "w", epoch), "current");

    // A DO block run by one autocommit statement: refused too (decision
    // documented in src/verbs/lease.rs).
    let err = db_error(
        c.batch_execute(&format!(
            "DO $$ BEGIN PERFORM workfence.work_assert({id}, 'w', {epoch}); END $$"
        )),
        "work_assert in an autocommit DO block",
    );
    assert_eq!(err.code().code(), "25P01", "{err:?}");

    // A dead token gets its 55000 in autocommit too.
    let err = db_error(c.execute(assert, &[&id, &(epoch - 1)]), "stale token");
    assert_eq!(err.code().code(), "55000", "{err:?}");

    // Inside BEGIN it works, and the row stays locked until COMMIT.
    let mut tx = ok(c.transaction(), "BEGIN");
    ok(
        tx.execute(assert, &[&id, &epoch]),
        "work_assert inside BEGIN",
    );
    let locked = db_error(
        other.query(
            "SELECT i.id FROM workfence.items AS i WHERE i.id = $1 FOR UPDATE NOWAIT",
            &[&id],
        ),
        "locking the asserted row from another connection",
    );
    assert_eq!(locked.code().code(), "55P03", "{locked:?}");
    ok(tx.commit(), "COMMIT");

    // An implicit transaction block (several statements in one simple query
    // string) is a transaction block: accepted.
    ok(
        c.batch_execute(&format!(
            "SELECT workfence.work_assert({id}, 'w', {epoch}); SELECT 1"
        )),
        "work_assert in a multi-statement query string",
    );
}

#[test]
fn interval_details_read_as_intervals() {
    let cluster = cluster();
    let mut c = database(&cluster, "interval_details");
    let claim = |c: &mut Client, lease: &str| {
        db_error(
            c.query(
                "SELECT * FROM workfence.work_claim('q', 'w', $1::text::interval)",
                &[&lease],
            ),
            lease,
        )
    };
    let err = claim(&mut c, "8 days");
    assert_eq!(err.code().code(), "22023");
    assert_eq!(err.detail(), Some("The lease is '8 days'."));
    assert_eq!(
        claim(&mut c, "0").detail(),
        Some("The lease is '00:00:00'.")
    );
    assert_eq!(
        claim(&mut c, "1 day -25 hours").detail(),
        Some("The lease is '1 day -25:00:00'.")
    );

    let (id, epoch) = enqueue_and_claim(&mut c, "job");
    let release = |c: &mut Client, delay: &str| {
        db_error(
            c.query(
                "SELECT workfence.work_release($1, 'w', $2, $3::text::interval)",
                &[&id, &epoch, &delay],
            ),
            delay,
        )
    };
    assert_eq!(
        release(&mut c, "1 mon -29 days").detail(),
        Some("The interval is '1 mon -29 days'.")
    );
    // Months count as the calendar months that follow: the real length is
    // shown beside the interval given.
    let err = release(&mut c, "12 mons 5 days");
    let detail = err.detail().unwrap_or_default();
    assert!(
        detail.starts_with("The interval is '1 year 5 days', '3")
            && detail.ends_with(" days' from now."),
        "{detail}"
    );
    let err = db_error(
        c.query(
            "SELECT * FROM workfence.work_claim('q', 'w', '1 minute', 1, '2 hours')",
            &[],
        ),
        "wait of 2 hours",
    );
    assert_eq!(err.detail(), Some("The interval is '02:00:00'."));

    // The session's IntervalStyle, as a query result would show it.
    ok(c.batch_execute("SET intervalstyle = iso_8601"), "SET");
    assert_eq!(
        claim(&mut c, "8 days").detail(),
        Some("The lease is 'P8D'.")
    );
}

#[test]
fn each_reason_a_token_is_dead_has_its_own_hint() {
    let cluster = cluster();
    let mut c = database(&cluster, "assert_hints");
    let mut hints = Vec::new();
    let mut check = |c: &mut Client, what: &str, status: &str, id: i64, owner: &str, epoch| {
        assert_eq!(lease_status(c, id, owner, epoch), status, "{what}");
        let err = assert_error_in_block(c, id, owner, epoch);
        assert_eq!(err.code().code(), "55000", "{what}: {err:?}");
        let hint = err.hint().unwrap_or_default().to_string();
        assert!(!hint.is_empty(), "{what}: no HINT");
        hints.push((what.to_string(), hint));
    };

    check(&mut c, "missing", "missing", i64::MAX, "w", 1);
    let (id, epoch) = enqueue_and_claim(&mut c, "wrong-owner");
    check(&mut c, "wrong owner", "wrong_owner", id, "v", epoch);
    let (id, epoch) = enqueue_and_claim(&mut c, "finished");
    ok(
        c.execute("SELECT workfence.work_finish($1, 'w', $2)", &[&id, &epoch]),
        "finish",
    );
    check(&mut c, "finished", "finished", id, "w", epoch);
    let (id, epoch) = enqueue_and_claim(&mut c, "cancelled");
    ok(
        c.execute("SELECT workfence.work_cancel($1, 'cancelled')", &[&QUEUE]),
        "cancel",
    );
    check(&mut c, "cancelled", "cancelled", id, "w", epoch);
    let (id, epoch) = enqueue_and_claim(&mut c, "released");
    ok(
        c.execute("SELECT workfence.work_release($1, 'w', $2)", &[&id, &epoch]),
        "release",
    );
    check(&mut c, "released", "superseded", id, "w", epoch);
    // Claimed again after the release: the old token is superseded.
    let (again, newer) = claim_key(&mut c, "released");
    assert_eq!(again, id);
    assert!(newer > epoch);
    check(&mut c, "superseded", "superseded", id, "w", epoch);

    // The cancelled item's hint no longer sends the worker looking for
    // another holder; every reason reads differently.
    let cancelled = &hints.iter().find(|(w, _)| w == "cancelled").unwrap().1;
    assert!(
        cancelled.contains("work_cancel") && !cancelled.contains("another worker"),
        "{cancelled}"
    );
    for (i, (what, hint)) in hints.iter().enumerate() {
        for (other, other_hint) in &hints[i + 1..] {
            assert_ne!(hint, other_hint, "{what} and {other} share a HINT");
        }
    }
    println!("work_assert HINTs: {hints:#?}");
}

#[test]
fn work_lease_status_tells_an_uncommitted_claim_apart() {
    let cluster = cluster();
    let mut claimer = database(&cluster, "uncommitted_claim");
    let mut heartbeat = ok(cluster.connect_to("uncommitted_claim"), "heartbeat");
    for key in ["committed", "rolled-back"] {
        ok(
            claimer.execute(
                "SELECT workfence.work_enqueue($1, '{}', $2)",
                &[&QUEUE, &key],
            ),
            "enqueue",
        );
    }

    // The claim stays inside an open transaction.
    ok(claimer.batch_execute("BEGIN"), "BEGIN");
    let (id, epoch) = claim_key(&mut claimer, "committed");
    assert_eq!(lease_status(&mut claimer, id, "w", epoch), "current");
    assert!(!renew(&mut heartbeat, id, epoch), "renew before the commit");
    assert_eq!(lease_status(&mut heartbeat, id, "w", epoch), "uncommitted");
    let err = assert_error_in_block(&mut heartbeat, id, "w", epoch);
    assert_eq!(err.code().code(), "55000");
    assert!(
        err.message().ends_with("(uncommitted)"),
        "{}",
        err.message()
    );
    assert!(err.hint().is_some_and(|h| h.contains("Commit")), "{err:?}");
    ok(claimer.batch_execute("COMMIT"), "COMMIT");
    assert_eq!(lease_status(&mut heartbeat, id, "w", epoch), "current");
    assert!(renew(&mut heartbeat, id, epoch), "renew after the commit");

    // The same, rolled back: the claim never took effect, its epoch is dead.
    ok(claimer.batch_execute("BEGIN"), "BEGIN");
    let (id, epoch) = claim_key(&mut claimer, "rolled-back");
    assert_eq!(lease_status(&mut heartbeat, id, "w", epoch), "uncommitted");
    ok(claimer.batch_execute("ROLLBACK"), "ROLLBACK");
    assert_eq!(lease_status(&mut heartbeat, id, "w", epoch), "superseded");
    assert!(
        !renew(&mut heartbeat, id, epoch),
        "renew after the rollback"
    );
    let err = assert_error_in_block(&mut heartbeat, id, "w", epoch);
    assert!(
        err.detail().is_some_and(|d| d.contains("rolled back")),
        "{err:?}"
    );
    let (again, newer) = claim_key(&mut claimer, "rolled-back");
    assert_eq!(again, id);
    assert!(
        newer > epoch,
        "a rolled-back epoch is never handed out again"
    );
    assert_eq!(lease_status(&mut heartbeat, id, "w", epoch), "superseded");
    assert_eq!(lease_status(&mut heartbeat, id, "w", newer), "current");
}

#[test]
fn an_operator_finds_a_waiting_long_poll_in_pg_locks() {
    let cluster = cluster();
    let mut c = database(&cluster, "waiters_in_pg_locks");
    let mut waiter = common::connect_long_poller(&cluster, "waiters_in_pg_locks");
    let waiter_pid: i32 = scalar(&mut waiter, "SELECT pg_catalog.pg_backend_pid()", &[]);
    assert!(
        ok(c.query(WAITERS, &[]), WAITERS).is_empty(),
        "nobody waits yet"
    );

    let poll = thread::spawn(move || {
        let rows = ok(
            waiter.query(
                "SELECT id FROM workfence.work_claim($1, 'w', '1 minute', wait => '60 seconds')",
                &[&QUEUE],
            ),
            "the long poll",
        );
        rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>()
    });
    poll_until(
        &mut c,
        &format!("SELECT $1 = ANY (ARRAY({WAITERS}))"),
        &[&waiter_pid],
        "the waiting claim in pg_locks",
    );
    let pids: Vec<i32> = ok(c.query(WAITERS, &[]), WAITERS)
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(pids, vec![waiter_pid]);

    // The enqueue's commit wakes it, and it leaves the list.
    let id: i64 = scalar(
        &mut c,
        "SELECT id FROM workfence.work_enqueue($1, '{}')",
        &[&QUEUE],
    );
    assert_eq!(poll.join().expect("the long poll's thread"), vec![id]);
    assert!(
        ok(c.query(WAITERS, &[]), WAITERS).is_empty(),
        "the woken claim left the list"
    );
}
