//! Promises the reference makes about transactions, from real client
//! connections (issue 20, part 2): each test is the documented behaviour.
//!
//! - `work_assert`'s fence holds whatever savepoints do: after a rolled-back
//!   savepoint or exception block released its row lock, the commit checks
//!   the token again and fails with 55000 if another worker has claimed the
//!   item meanwhile; the stale worker's writes never commit. The workers run
//!   as a role with only `EXECUTE` on the functions (the commit's re-check
//!   runs as the extension's owner, not as the session's role).
//! - A long poll under REPEATABLE READ or SERIALIZABLE is refused at once
//!   (25000); a claim that does not wait works there.
//! - `work_lease_status` answers from the statement's snapshot: the newest
//!   committed state in READ COMMITTED, the transaction's snapshot under
//!   REPEATABLE READ.
//! - Statement shapes that read part of a claim's result: the rows are
//!   claimed whether or not the query returns them (documented pitfalls).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ok, scalar};
use postgres::error::SqlState;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue, Token};
use workfence_harness::scenario::wait_for_lease_lapse;
use workfence_harness::Cluster;

const QUEUE: &str = "jobs";

fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    let mut c = ok(cluster.connect_to(name), "connecting");
    ok(
        c.batch_execute("CREATE TABLE sent (worker text, epoch bigint)"),
        "the business table",
    );
    c
}

/// A worker of database `name` as docs/operations.md sets one up: a role
/// (its own, `<name>_worker`: roles are cluster-wide and the tests of this
/// file share a cluster) with `EXECUTE` on the extension's functions and
/// rights on its own table only, none on the extension's tables.
fn least_privilege_worker(cluster: &Cluster, admin: &mut Client, name: &str) -> Client {
    let role = format!("{name}_worker");
    ok(
        admin.batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA workfence TO {role};
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA workfence TO {role};
             GRANT SELECT, INSERT ON sent TO {role};"
        )),
        "the worker role",
    );
    common::connect_as(cluster, name, &role, "least-privilege worker")
}

fn sqlstate(result: Result<impl Sized, postgres::Error>) -> SqlState {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.code().cloned().expect("a server error with a SQLSTATE"),
    }
}

/// The two ways a subtransaction that ran `work_assert` rolls back.
const SHAPES: [(&str, &str); 2] = [
    (
        "ROLLBACK TO SAVEPOINT",
        "SAVEPOINT s; SELECT workfence.work_assert({id}, 'laptop', {epoch}); ROLLBACK TO SAVEPOINT s;",
    ),
    (
        "an exception block",
        "DO $$ BEGIN PERFORM workfence.work_assert({id}, 'laptop', {epoch}); \
         RAISE EXCEPTION 'job step failed'; EXCEPTION WHEN raise_exception THEN NULL; END $$;",
    ),
];

fn shape_sql(template: &str, id: i64, epoch: i64) -> String {
    template
        .replace("{id}", &id.to_string())
        .replace("{epoch}", &epoch.to_string())
}

#[test]
fn a_stale_worker_cannot_commit_after_a_rolled_back_savepoint_released_the_lock() {
    let cluster = cluster();
    // B, the worker that claims the item anew, is the superuser's session.
    let mut b = database(&cluster, "fence_savepoint");
    let mut a = least_privilege_worker(&cluster, &mut b, "fence_savepoint");
    for (n, (shape, template)) in SHAPES.iter().enumerate() {
        let key = format!("job-{n}");
        let Token {
            id, epoch: a_epoch, ..
        } = common::enqueued_and_claimed(&mut a, QUEUE, &key, "laptop", "300 milliseconds");
        // A asserts inside a subtransaction that rolls back, then writes.
        ok(
            a.batch_execute(&format!(
                "BEGIN; {} INSERT INTO sent VALUES ('A', {a_epoch});",
                shape_sql(template, id, a_epoch)
            )),
            "A's transaction",
        );
        // The row lock is gone: A's lease lapses and B (same owner name)
        // claims and finishes under a newer epoch.
        ok(wait_for_lease_lapse(&mut b, id), "A's lease lapses");
        let b_token = ok(
            calls::claim_key(&mut b, QUEUE, &key, "laptop", "1 minute"),
            "B's claim",
        )
        .expect("claimable once the lease lapsed")
        .token("laptop");
        let b_epoch = b_token.epoch;
        assert!(b_epoch > a_epoch);
        let mut tx = ok(b.transaction(), "B's BEGIN");
        ok(calls::assert(&mut tx, &b_token), "B's work_assert");
        ok(
            tx.execute("INSERT INTO sent VALUES ('B', $1)", &[&b_epoch]),
            "B's write",
        );
        ok(calls::finish(&mut tx, &b_token, None), "B's work_finish");
        ok(tx.commit(), "B's COMMIT");
        // A's commit re-checks the token and fails; its write is gone.
        let err = a.batch_execute("COMMIT").expect_err("A's commit must fail");
        let db = err.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "{shape}"
        );
        assert!(
            db.message().starts_with("lease lost before commit"),
            "{shape}: {}",
            db.message()
        );
        assert!(
            db.detail().is_some_and(|d| d.contains("superseded")),
            "{shape}"
        );
        let rows: Vec<(String, i64)> = ok(
            a.query("SELECT worker, epoch FROM sent ORDER BY epoch", &[]),
            "sent",
        )
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        assert_eq!(rows.last(), Some(&("B".to_string(), b_epoch)), "{shape}");
        assert!(
            !rows.iter().any(|r| r.1 == a_epoch),
            "{shape}: the stale write committed: {rows:?}"
        );
    }
}

#[test]
fn a_rolled_back_savepoint_under_a_current_lease_commits() {
    let cluster = cluster();
    let mut admin = database(&cluster, "fence_current");
    let mut a = least_privilege_worker(&cluster, &mut admin, "fence_current");
    for (n, (shape, template)) in SHAPES.iter().enumerate() {
        let key = format!("job-{n}");
        let Token { id, epoch, .. } =
            common::enqueued_and_claimed(&mut a, QUEUE, &key, "laptop", "1 minute");
        ok(
            a.batch_execute(&format!(
                "BEGIN; {} INSERT INTO sent VALUES ('A', {epoch}); \
                 SELECT workfence.work_finish({id}, 'laptop', {epoch}); COMMIT",
                shape_sql(template, id, epoch)
            )),
            shape,
        );
        let state: String = scalar(
            &mut admin,
            "SELECT state::text FROM workfence.items WHERE id = $1",
            &[&id],
        );
        assert_eq!(state, "done", "{shape}");
        let written: i64 = scalar(
            &mut a,
            "SELECT count(*) FROM sent WHERE epoch = $1",
            &[&epoch],
        );
        assert_eq!(written, 1, "{shape}");
    }
}

#[test]
fn a_long_poll_is_refused_at_once_where_the_snapshot_is_fixed() {
    let cluster = cluster();
    let mut c = database(&cluster, "wait_isolation");
    common::enqueue_new(&mut c, &Enqueue::new(QUEUE).key("k"));
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        ok(
            c.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")),
            "BEGIN",
        );
        let started = Instant::now();
        let code = sqlstate(calls::claim(
            &mut c,
            QUEUE,
            "w",
            "1 minute",
            Some(1),
            Some("30 seconds"),
        ));
        assert_eq!(code, SqlState::INVALID_TRANSACTION_STATE, "{level}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{level}: not at once"
        );
        ok(c.batch_execute("ROLLBACK"), "ROLLBACK");
    }
    // Without a wait the claim works under REPEATABLE READ.
    ok(
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        "BEGIN",
    );
    let got = ok(
        calls::claim(&mut c, QUEUE, "w", "1 minute", Some(1), Some("0")),
        "claim without a wait",
    );
    assert_eq!(got.len(), 1);
    ok(c.batch_execute("COMMIT"), "COMMIT");
}

#[test]
fn lease_status_answers_from_the_statements_snapshot() {
    let cluster = cluster();
    let mut a = database(&cluster, "status_snapshot");
    let mut b = ok(cluster.connect_to("status_snapshot"), "B");
    let held = common::enqueued_and_claimed(&mut a, QUEUE, "k", "laptop", "300 milliseconds");
    let (id, epoch) = (held.id, held.epoch);
    ok(
        a.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        "BEGIN",
    );
    assert_eq!(
        ok(calls::lease_status(&mut a, &held), "lease status"),
        "current"
    );
    ok(wait_for_lease_lapse(&mut b, id), "the lease lapses");
    let newer = ok(
        calls::claim_key(&mut b, QUEUE, "k", "laptop", "1 minute"),
        "B's claim",
    )
    .expect("claimable once the lease lapsed")
    .epoch;
    assert!(newer > epoch);
    // The transaction's snapshot predates the re-claim ...
    assert_eq!(
        ok(calls::lease_status(&mut a, &held), "lease status"),
        "current"
    );
    ok(a.batch_execute("COMMIT"), "COMMIT");
    // ... a statement in READ COMMITTED sees it.
    assert_eq!(
        ok(calls::lease_status(&mut a, &held), "lease status"),
        "superseded"
    );
}

#[test]
fn a_query_that_reads_part_of_a_claim_still_claims_every_row() {
    let cluster = cluster();
    let mut c = database(&cluster, "shapes");
    ok(
        c.execute(
            "SELECT workfence.work_enqueue($1, '{}') FROM generate_series(1, 20)",
            &[&QUEUE],
        ),
        "enqueue 20",
    );
    let claimed_by = |c: &mut Client, owner: &str| -> i64 {
        scalar(
            c,
            "SELECT count(*) FROM workfence.items WHERE state = 'claimed' AND owner = $1",
            &[&owner],
        )
    };
    // LIMIT: 5 claimed, 1 returned.
    let rows = ok(
        c.query(
            "SELECT id FROM workfence.work_claim($1, 'limit', '1 minute', 5) LIMIT 1",
            &[&QUEUE],
        ),
        "LIMIT",
    );
    assert_eq!((rows.len(), claimed_by(&mut c, "limit")), (1, 5));
    // EXISTS: claimed, nothing returned.
    assert!(scalar::<bool>(
        &mut c,
        "SELECT EXISTS (SELECT FROM workfence.work_claim($1, 'exists', '1 minute', 2))",
        &[&QUEUE],
    ));
    assert_eq!(claimed_by(&mut c, "exists"), 2);
    // A cursor: FETCH 1 of a claim of 3.
    ok(
        c.batch_execute(&format!(
            "BEGIN; DECLARE cur CURSOR FOR SELECT id FROM workfence.work_claim('{QUEUE}', 'cursor', '1 minute', 3); \
             FETCH 1 FROM cur; COMMIT"
        )),
        "cursor",
    );
    assert_eq!(claimed_by(&mut c, "cursor"), 3);
    // A lateral call that does not depend on the outer row runs once: two
    // rows carry the same token.
    let epochs: Vec<i64> = ok(
        c.query(
            "SELECT w.epoch FROM generate_series(1, 2) AS g, \
                    LATERAL workfence.work_claim($1, 'lateral', '1 minute', 1) AS w",
            &[&QUEUE],
        ),
        "LATERAL",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(epochs.len(), 2);
    assert_eq!(epochs[0], epochs[1], "one claim, its token returned twice");
    assert_eq!(claimed_by(&mut c, "lateral"), 1);
}
