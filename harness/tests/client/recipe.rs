//! The replicated job store recipe (`docs/replicated-job-store.md`), run.
//!
//! The recipe's SQL is read from the guide: every fenced ```sql block that
//! follows a `<!-- recipe:NAME -->` comment (setup, submit, status, cancel,
//! claim, renew, finish), and the least-privilege blocks of
//! `docs/operations.md`, so the guides cannot drift from what is tested.
//! Replicas are connections logged in as a member of `workfence_enqueuer`
//! (plus the recipe's status function), workers as a member of
//! `workfence_worker`; the superuser only sets up and inspects. Concurrent
//! steps are ordered by a barrier, by a transaction held open while another
//! connection is seen blocked on it (`pg_blocking_pids`), and by the server's
//! clock (the long poll wakes when a lease lapses); no client sleep orders
//! anything.
//!
//! What the tests prove:
//! - submit: two replicas submitting the same keys at the same moment get, per
//!   key, exactly one `inserted = true` and the same id, and the stored
//!   payload is the winner's; a submit that meets an uncommitted submit of its
//!   key waits for it and returns the same item, which a third replica sees
//!   only after the commit; the key returns the item after it is done, and a
//!   new item only once `work_purge` deleted it (the idempotency window);
//! - cancel: a cancel from another replica withdraws a claimed and a pending
//!   job; later claims never return them; the holder's renew and finish are
//!   refused and its `work_assert` raises 55000, so its write never commits;
//!   a cancel meeting a finishing transaction waits and returns false, the job
//!   done with exactly one write; a re-submit returns the cancelled job;
//! - restart: every replica and worker is cut off at once (one submit and one
//!   finishing transaction uncommitted); new connections find every committed
//!   job by key, the lost submit is inserted once when resent, and new
//!   long-polling workers sharing the old owner name take the dead workers'
//!   jobs only after their leases lapsed on the server's clock, with a newer
//!   epoch and the next attempt; every job ends done, with exactly one row in
//!   the business table under its final epoch; the old tokens are refused.
//!
//! Needs the extension installed (scripts/test.sh). Runtime: about 5 s after
//! the build, the cluster's start included (a 1 s lease is waited out, and a
//! long poll of at most 1 s ends the workers' run).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::{connect_as, ok};
use postgres::Client;
use serde_json::{json, Value};
use workfence_harness::calls::{self, Token};
use workfence_harness::Cluster;

/// The recipe: its marked SQL blocks are what the replicas run.
const RECIPE_GUIDE: &str = include_str!("../../../docs/replicated-job-store.md");
/// The operations guide: its least-privilege blocks set up the roles.
const OPERATIONS_GUIDE: &str = include_str!("../../../docs/operations.md");

/// Every `<!-- recipe:NAME -->` block the guide has, each run below.
const RECIPE_BLOCKS: &[&str] = &[
    "setup", "submit", "status", "cancel", "claim", "renew", "finish",
];

/// The replicas' login role (the API side: submit, status, cancel).
const API: &str = "recipe_api";
/// The workers' login role.
const WORKER: &str = "recipe_worker";
/// One owner name for every worker, old and new: replicas may share it.
const OWNER: &str = "jobs-service";

/// The login roles, members of the operations guide's groups, and the
/// business table the workers write in their finishing transactions
/// (deliberately without a unique constraint, so a duplicate would show).
const TEST_SETUP: &str = "
    CREATE SCHEMA app;
    CREATE TABLE app.outcomes (item_id bigint NOT NULL, epoch bigint NOT NULL, output jsonb);
    GRANT USAGE ON SCHEMA app TO recipe_worker;
    GRANT INSERT ON app.outcomes TO recipe_worker;";

/// The longest any test waits for another backend to block, or for all its
/// jobs to be done: a bound on a hang, not a synchronisation.
const DEADLINE: Duration = Duration::from_secs(30);

/// The SQL of the ```sql block that follows `<!-- {marker} -->` in `guide`.
fn block_after(guide: &'static str, file: &str, marker: &str) -> &'static str {
    let comment = format!("<!-- {marker} -->");
    let mut found = guide.match_indices(&comment);
    let (at, _) = found
        .next()
        .unwrap_or_else(|| panic!("{file} has no {comment}"));
    assert!(found.next().is_none(), "{file} has {comment} twice");
    guide[at + comment.len()..]
        .trim_start()
        .strip_prefix("```sql\n")
        .and_then(|rest| rest.find("```").map(|end| rest[..end].trim()))
        .unwrap_or_else(|| panic!("{comment} must be followed by a ```sql block"))
}

/// The recipe's block `name`.
fn recipe(name: &str) -> &'static str {
    assert!(
        RECIPE_BLOCKS.contains(&name),
        "{name} is not in RECIPE_BLOCKS"
    );
    block_after(
        RECIPE_GUIDE,
        "docs/replicated-job-store.md",
        &format!("recipe:{name}"),
    )
}

/// The two statements of the recipe's finishing transaction, `work_assert`
/// and `work_finish`: the block must be `BEGIN; assert; finish; COMMIT;`,
/// with the job's own writes (a comment in the guide) between the two.
fn finish_statements() -> (String, String) {
    let code: String = recipe("finish")
        .lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let statements: Vec<String> = code
        .split(';')
        .map(|statement| statement.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|statement| !statement.is_empty())
        .collect();
    match statements.as_slice() {
        [begin, assert, finish, commit]
            if begin == "BEGIN"
                && commit == "COMMIT"
                && assert.contains("workfence.work_assert(")
                && finish.contains("workfence.work_finish(") =>
        {
            (assert.clone(), finish.clone())
        }
        other => panic!("recipe:finish must be BEGIN; work_assert; work_finish; COMMIT: {other:?}"),
    }
}

/// One cluster for the tests of this binary, with the guide's group roles
/// and the login roles (roles are cluster-wide).
fn cluster() -> Arc<Cluster> {
    common::shared_cluster_with(|cluster| {
        let mut admin = ok(cluster.connect(), "connecting as the superuser");
        ok(
            admin.batch_execute(common::doc_sql_block(
                OPERATIONS_GUIDE,
                "docs/operations.md",
                "least-privilege-roles",
            )),
            "the operations guide's CREATE ROLE block",
        );
        ok(
            admin.batch_execute(
                "CREATE ROLE recipe_api LOGIN IN ROLE workfence_enqueuer;
                 CREATE ROLE recipe_worker LOGIN IN ROLE workfence_worker;",
            ),
            "creating the login roles",
        );
    })
}

/// A fresh database with the extension, the operations guide's grants, the
/// recipe's setup and the business table; the superuser's connection to it.
fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the test database");
    let mut admin = ok(cluster.connect_to(name), "connecting as the superuser");
    ok(
        admin.batch_execute(common::doc_sql_block(
            OPERATIONS_GUIDE,
            "docs/operations.md",
            "least-privilege-grants",
        )),
        "the operations guide's GRANT block",
    );
    ok(
        admin.batch_execute(recipe("setup")),
        "the recipe's setup block",
    );
    ok(admin.batch_execute(TEST_SETUP), "the business table");
    admin
}

/// A replica: the API side of the service.
fn replica(cluster: &Cluster, database: &str, name: &str) -> Client {
    connect_as(cluster, database, API, name)
}

/// A worker of the service.
fn worker(cluster: &Cluster, database: &str, name: &str) -> Client {
    connect_as(cluster, database, WORKER, name)
}

/// The backend pid of `client`.
fn pid(client: &mut Client) -> i32 {
    ok(
        client.query_one("SELECT pg_backend_pid()", &[]),
        "pg_backend_pid",
    )
    .get(0)
}

/// The SQLSTATE a failed statement raised.
fn sqlstate(error: &postgres::Error) -> String {
    error
        .code()
        .unwrap_or_else(|| panic!("not an error of the server: {error}"))
        .code()
        .to_owned()
}

/// The recipe's submit: (id, inserted).
fn submit(client: &mut Client, queue: &str, payload: &Value, key: &str) -> (i64, bool) {
    let row = ok(
        client.query_one(recipe("submit"), &[&queue, payload, &key]),
        "the recipe's submit",
    );
    (row.get("id"), row.get("inserted"))
}

/// A row of the recipe's status read.
#[derive(Debug, Clone, PartialEq)]
struct Status {
    id: i64,
    state: String,
    attempts: i32,
    run_at: SystemTime,
    last_error: Option<String>,
    result: Option<Value>,
    created_at: SystemTime,
    finished_at: Option<SystemTime>,
}

/// The recipe's status read: None when the key is unknown.
fn status(client: &mut Client, queue: &str, key: &str) -> Option<Status> {
    let rows = ok(
        client.query(recipe("status"), &[&queue, &key]),
        "the recipe's status read",
    );
    assert!(rows.len() <= 1, "one item per key");
    rows.first().map(|row| Status {
        id: row.get("id"),
        state: row.get("state"),
        attempts: row.get("attempts"),
        run_at: row.get("run_at"),
        last_error: row.get("last_error"),
        result: row.get("result"),
        created_at: row.get("created_at"),
        finished_at: row.get("finished_at"),
    })
}

/// The state the recipe's status read reports for `key`.
fn state_of(client: &mut Client, queue: &str, key: &str) -> String {
    status(client, queue, key)
        .unwrap_or_else(|| panic!("{key} has no status"))
        .state
}

/// The recipe's cancel.
fn cancel(client: &mut Client, queue: &str, key: &str) -> bool {
    ok(
        client.query_one(recipe("cancel"), &[&queue, &key]),
        "the recipe's cancel",
    )
    .get(0)
}

/// One item the recipe's claim returned.
#[derive(Debug, Clone)]
struct Claimed {
    id: i64,
    key: String,
    payload: Value,
    epoch: i64,
    attempt: i32,
    lease_until: SystemTime,
}

/// The recipe's claim: the long poll, `wait` seconds at most.
fn claim(client: &mut Client, queue: &str, lease: f64, batch: i32, wait: f64) -> Vec<Claimed> {
    ok(
        client.query(recipe("claim"), &[&queue, &OWNER, &lease, &batch, &wait]),
        "the recipe's claim",
    )
    .iter()
    .map(|row| Claimed {
        id: row.get("id"),
        key: row.get("key"),
        payload: row.get("payload"),
        epoch: row.get("epoch"),
        attempt: row.get("attempt"),
        lease_until: row.get("lease_until"),
    })
    .collect()
}

/// The recipe's renew of `item`'s lease, by `OWNER`.
fn renew(client: &mut Client, item: &Claimed, lease: f64) -> bool {
    ok(
        client.query_one(recipe("renew"), &[&item.id, &OWNER, &item.epoch, &lease]),
        "the recipe's renew",
    )
    .get(0)
}

/// The job's own write, in the finishing transaction.
const WRITE: &str = "INSERT INTO app.outcomes (item_id, epoch, output) VALUES ($1, $2, $3)";

/// The recipe's finishing transaction for `item`, with the job's write of
/// `output` (which is also the result): `work_finish`'s answer, or the error
/// (the transaction then rolled back).
fn finish(client: &mut Client, item: &Claimed, output: &Value) -> Result<bool, postgres::Error> {
    let (assert, finish) = finish_statements();
    let mut tx = client.transaction()?;
    tx.execute(&assert, &[&item.id, &OWNER, &item.epoch])?;
    tx.execute(WRITE, &[&item.id, &item.epoch, output])?;
    let finished: bool = tx
        .query_one(&finish, &[&item.id, &OWNER, &item.epoch, output])?
        .get(0);
    tx.commit()?;
    Ok(finished)
}

/// What a job computes from its payload.
fn output_of(item: &Claimed) -> Value {
    json!({ "for": item.payload["request"], "by_epoch": item.epoch })
}

/// `work_lease_status` of `item`'s token (a worker's function).
fn lease_status(client: &mut Client, item: &Claimed) -> String {
    ok(
        calls::lease_status(client, &Token::new(item.id, OWNER, item.epoch)),
        "work_lease_status",
    )
}

/// The business rows written for item `id`, as (epoch, output).
fn outcomes(admin: &mut Client, id: i64) -> Vec<(i64, Value)> {
    ok(
        admin.query(
            "SELECT epoch, output FROM app.outcomes WHERE item_id = $1 ORDER BY epoch",
            &[&id],
        ),
        "reading app.outcomes",
    )
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

#[test]
fn the_guide_marks_exactly_the_blocks_this_test_runs() {
    let marked: BTreeSet<&str> = RECIPE_GUIDE
        .match_indices("<!-- recipe:")
        .map(|(at, prefix)| {
            let name = &RECIPE_GUIDE[at + prefix.len()..];
            &name[..name.find(" -->").expect("a recipe marker ends with ' -->'")]
        })
        .collect();
    let run: BTreeSet<&str> = RECIPE_BLOCKS.iter().copied().collect();
    assert_eq!(marked, run);
    for name in RECIPE_BLOCKS {
        assert!(!recipe(name).is_empty(), "recipe:{name} is empty");
    }
    finish_statements();
}

#[test]
fn a_submit_is_idempotent_from_any_replica() {
    let cluster = cluster();
    let db = "recipe_submit";
    let mut admin = database(&cluster, db);
    let mut a = replica(&cluster, db, "replica a");
    let b = replica(&cluster, db, "replica b");
    let mut c = replica(&cluster, db, "replica c");

    // The replicas cannot read the table: the status function is their read
    // path.
    let denied = a
        .batch_execute("SELECT * FROM workfence.items")
        .expect_err("a replica read workfence.items");
    assert_eq!(sqlstate(&denied), "42501");

    // Two replicas submit the same keys at the same moment, each its own
    // payload.
    const RACED: usize = 20;
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = [(a, "a"), (b, "b")]
        .into_iter()
        .map(|(mut client, name)| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let answers: Vec<(i64, bool)> = (0..RACED)
                    .map(|k| {
                        barrier.wait();
                        submit(
                            &mut client,
                            "orders",
                            &json!({ "request": k, "replica": name }),
                            &format!("order-{k}"),
                        )
                    })
                    .collect();
                (client, answers)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for racer in racers {
        answers.push(racer.join().expect("a submitting replica panicked"));
    }
    let (mut b, from_b) = answers.pop().expect("replica b");
    let (mut a, from_a) = answers.pop().expect("replica a");
    let mut ids = BTreeSet::new();
    for k in 0..RACED {
        let ((id_a, inserted_a), (id_b, inserted_b)) = (from_a[k], from_b[k]);
        assert_eq!(id_a, id_b, "order-{k}: one item for both replicas");
        assert!(
            inserted_a != inserted_b,
            "order-{k}: exactly one submit inserts (a: {inserted_a}, b: {inserted_b})"
        );
        let winner = if inserted_a { "a" } else { "b" };
        let payload: Value = ok(
            admin.query_one(
                "SELECT payload FROM workfence.items WHERE id = $1",
                &[&id_a],
            ),
            "the stored payload",
        )
        .get(0);
        assert_eq!(
            payload,
            json!({ "request": k, "replica": winner }),
            "order-{k}: the second submit changed nothing"
        );
        let seen = status(&mut c, "orders", &format!("order-{k}")).expect("order has a status");
        assert_eq!((seen.id, seen.state.as_str()), (id_a, "pending"));
        ids.insert(id_a);
    }
    assert_eq!(ids.len(), RACED, "one item per key");
    let items: i64 = ok(
        admin.query_one(
            "SELECT count(*) FROM workfence.items WHERE queue = 'orders'",
            &[],
        ),
        "counting items",
    )
    .get(0);
    assert_eq!(items, RACED as i64);

    // A submit meeting an uncommitted submit of the same key waits for it.
    let (pid_a, pid_b) = (pid(&mut a), pid(&mut b));
    let mut tx = ok(a.transaction(), "BEGIN");
    let held = ok(
        tx.query_one(
            recipe("submit"),
            &[&"payments", &json!({ "amount": 42 }), &"pay-1"],
        ),
        "the recipe's submit, in a transaction",
    );
    let (first_id, first_inserted): (i64, bool) = (held.get("id"), held.get("inserted"));
    assert!(first_inserted);
    let second = thread::spawn(move || {
        let answer = submit(&mut b, "payments", &json!({ "amount": 43 }), "pay-1");
        (b, answer)
    });
    common::wait_until_blocked(&mut admin, pid_b, pid_a);
    assert_eq!(
        status(&mut c, "payments", "pay-1"),
        None,
        "another replica sees no job before the submit commits"
    );
    ok(tx.commit(), "COMMIT");
    let (mut b, (second_id, second_inserted)) =
        second.join().expect("the second submitter panicked");
    assert_eq!((second_id, second_inserted), (first_id, false));
    let seen = status(&mut c, "payments", "pay-1").expect("pay-1 has a status");
    assert_eq!(
        (seen.id, seen.state.as_str(), seen.attempts),
        (first_id, "pending", 0)
    );
    assert_eq!(
        (seen.last_error, seen.result, seen.finished_at),
        (None, None, None)
    );

    // The window: the key returns the item while it exists, done included,
    // and a new item once work_purge deleted it.
    let mut w = worker(&cluster, db, "worker");
    let taken = claim(&mut w, "payments", 30.0, 1, 0.0);
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (taken[0].id, taken[0].payload.clone()),
        (first_id, json!({ "amount": 42 }))
    );
    let receipt = json!({ "receipt": "r-1" });
    assert!(ok(finish(&mut w, &taken[0], &receipt), "finishing pay-1"));
    assert_eq!(
        submit(&mut a, "payments", &json!({ "amount": 44 }), "pay-1"),
        (first_id, false)
    );
    let seen = status(&mut c, "payments", "pay-1").expect("pay-1 has a status");
    assert_eq!(
        (seen.id, seen.state.as_str(), seen.attempts, seen.result),
        (first_id, "done", 1, Some(receipt))
    );
    let finished_at = seen.finished_at.expect("a done job has finished_at");
    assert!(seen.run_at < finished_at && seen.created_at < finished_at);
    let purged = ok(
        calls::purge(&mut admin, Some("0"), Some("payments")),
        "work_purge",
    );
    assert_eq!(purged, 1);
    assert_eq!(status(&mut c, "payments", "pay-1"), None);
    let (new_id, inserted) = submit(&mut b, "payments", &json!({ "amount": 45 }), "pay-1");
    assert!(inserted, "after the purge the key is free");
    assert!(new_id > first_id, "a new item, with a new id");
    assert_eq!(state_of(&mut c, "payments", "pay-1"), "pending");
}

#[test]
fn a_cancel_from_any_replica_fences_the_holder() {
    let cluster = cluster();
    let db = "recipe_cancel";
    let mut admin = database(&cluster, db);
    let mut a = replica(&cluster, db, "replica a");
    let mut b = replica(&cluster, db, "replica b");
    let mut c = replica(&cluster, db, "replica c");
    let mut w = worker(&cluster, db, "worker");

    let (mail_1, _) = submit(&mut a, "mail", &json!({ "request": 1 }), "mail-1");
    let held = claim(&mut w, "mail", 30.0, 1, 0.0);
    assert_eq!(held.len(), 1);
    let held = held[0].clone();
    assert_eq!((held.id, held.key.as_str()), (mail_1, "mail-1"));
    let (mail_2, _) = submit(&mut a, "mail", &json!({ "request": 2 }), "mail-2");
    let (mail_3, _) = submit(&mut a, "mail", &json!({ "request": 3 }), "mail-3");

    // Another replica cancels the claimed job and a pending one.
    assert!(cancel(&mut b, "mail", "mail-1"));
    assert!(cancel(&mut b, "mail", "mail-2"));
    for key in ["mail-1", "mail-2"] {
        let seen = status(&mut c, "mail", key).expect("a cancelled job has a status");
        assert_eq!(seen.state, "cancelled", "{key}");
        assert!(seen.finished_at.is_some(), "{key}");
    }
    assert_eq!(state_of(&mut c, "mail", "mail-3"), "pending");

    // The holder is fenced: renew and finish refused, assert raises 55000,
    // its write never commits.
    assert!(!renew(&mut w, &held, 30.0), "renew after the cancel");
    let refused = finish(&mut w, &held, &output_of(&held)).expect_err("finish after the cancel");
    assert_eq!(sqlstate(&refused), "55000", "{refused}");
    let (_, finish_sql) = finish_statements();
    let finished: bool = ok(
        w.query_one(
            finish_sql.as_str(),
            &[&held.id, &OWNER, &held.epoch, &output_of(&held)],
        ),
        "work_finish after the cancel",
    )
    .get(0);
    assert!(!finished, "work_finish after the cancel");
    assert_eq!(lease_status(&mut w, &held), "cancelled");
    assert!(
        outcomes(&mut admin, mail_1).is_empty(),
        "a write after the cancel"
    );

    // Claims never return the cancelled jobs: only mail-3, then nothing for
    // a wait of 200 ms in the server.
    let next = claim(&mut w, "mail", 30.0, 10, 0.0);
    assert_eq!(
        next.iter().map(|item| item.id).collect::<Vec<_>>(),
        [mail_3]
    );
    assert_eq!(claim(&mut w, "mail", 30.0, 10, 0.2).len(), 0);

    // A cancel meeting the finishing transaction of mail-3 waits for it, and
    // then finds the job done.
    let (pid_w, pid_b) = (pid(&mut w), pid(&mut b));
    let (assert_sql, finish_sql) = finish_statements();
    let item = &next[0];
    let output = output_of(item);
    let mut tx = ok(w.transaction(), "BEGIN");
    ok(
        tx.execute(assert_sql.as_str(), &[&item.id, &OWNER, &item.epoch]),
        "work_assert",
    );
    ok(
        tx.execute(WRITE, &[&item.id, &item.epoch, &output]),
        "the job's write",
    );
    let canceller = thread::spawn(move || {
        let cancelled = cancel(&mut b, "mail", "mail-3");
        (b, cancelled)
    });
    common::wait_until_blocked(&mut admin, pid_b, pid_w);
    let finished: bool = ok(
        tx.query_one(
            finish_sql.as_str(),
            &[&item.id, &OWNER, &item.epoch, &output],
        ),
        "work_finish",
    )
    .get(0);
    assert!(finished);
    ok(tx.commit(), "COMMIT");
    let (_, cancelled) = canceller.join().expect("the cancelling replica panicked");
    assert!(!cancelled, "a cancel of a done job changes nothing");
    assert_eq!(state_of(&mut c, "mail", "mail-3"), "done");
    assert_eq!(outcomes(&mut admin, mail_3), [(item.epoch, output)]);

    // Cancelling again changes nothing; a re-submit returns the cancelled job.
    assert!(!cancel(&mut c, "mail", "mail-1"));
    assert_eq!(
        submit(&mut c, "mail", &json!({ "request": 1 }), "mail-1"),
        (mail_1, false)
    );
    assert_eq!(state_of(&mut c, "mail", "mail-1"), "cancelled");
    assert_eq!(state_of(&mut c, "mail", "mail-2"), "cancelled");
    assert!(outcomes(&mut admin, mail_2).is_empty());
}

#[test]
fn nothing_is_lost_when_every_replica_restarts() {
    const JOBS: usize = 24;
    const OLD_LEASE: f64 = 1.0;
    const NEW_LEASE: f64 = 5.0;
    let cluster = cluster();
    let db = "recipe_restart";
    let mut admin = database(&cluster, db);
    let key = |k: usize| format!("job-{k:02}");

    // Before: three replicas submit, two workers hold jobs under a short
    // lease; one replica is mid-submit and one worker mid-finish.
    let mut old_replicas: Vec<Client> = (0..3)
        .map(|n| replica(&cluster, db, &format!("old replica {n}")))
        .collect();
    let mut ids = BTreeMap::new();
    for k in 0..JOBS {
        let (id, inserted) = submit(
            &mut old_replicas[k % 3],
            "jobs",
            &json!({ "request": k }),
            &key(k),
        );
        assert!(inserted);
        ids.insert(key(k), id);
    }
    let mut w1 = worker(&cluster, db, "old worker 1");
    let mut w2 = worker(&cluster, db, "old worker 2");
    let held_1 = claim(&mut w1, "jobs", OLD_LEASE, 4, 0.0);
    let held_2 = claim(&mut w2, "jobs", OLD_LEASE, 4, 0.0);
    assert_eq!((held_1.len(), held_2.len()), (4, 4));
    let mut finished_before = Vec::new();
    for item in &held_1[..2] {
        assert!(ok(finish(&mut w1, item, &output_of(item)), "finishing"));
        finished_before.push(item.clone());
    }
    let in_flight: Vec<Claimed> = held_1[2..].iter().chain(&held_2).cloned().collect();
    ok(old_replicas[0].batch_execute("BEGIN"), "BEGIN");
    let (lost_id, inserted) = submit(
        &mut old_replicas[0],
        "jobs",
        &json!({ "request": "lost" }),
        "job-lost",
    );
    assert!(inserted);
    let (assert_sql, _) = finish_statements();
    let cut = &held_2[0];
    ok(w2.batch_execute("BEGIN"), "BEGIN");
    ok(
        w2.execute(assert_sql.as_str(), &[&cut.id, &OWNER, &cut.epoch]),
        "work_assert",
    );
    ok(
        w2.execute(WRITE, &[&cut.id, &cut.epoch, &output_of(cut)]),
        "the job's write",
    );

    // Every replica and worker goes at once: their backends end, their open
    // transactions roll back.
    let mut pids: Vec<i32> = old_replicas.iter_mut().map(pid).collect();
    pids.extend([pid(&mut w1), pid(&mut w2)]);
    let ended: Vec<bool> = ok(
        admin.query(
            "SELECT pg_terminate_backend(p, 10000) FROM unnest($1::int[]) AS p",
            &[&pids],
        ),
        "pg_terminate_backend",
    )
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(ended, vec![true; pids.len()], "every old backend ended");
    drop((old_replicas, w1, w2));

    // After: new replicas find every committed job by its key; the resent
    // submits return the same items, the lost one is inserted once.
    let mut replicas: Vec<Client> = (0..3)
        .map(|n| replica(&cluster, db, &format!("new replica {n}")))
        .collect();
    let done_before: BTreeSet<i64> = finished_before.iter().map(|item| item.id).collect();
    let held_before: BTreeSet<i64> = in_flight.iter().map(|item| item.id).collect();
    for k in 0..JOBS {
        let replica = &mut replicas[(k + 1) % 3];
        let id = ids[&key(k)];
        let seen = status(replica, "jobs", &key(k)).expect("every committed job is there");
        let expected = if done_before.contains(&id) {
            "done"
        } else if held_before.contains(&id) {
            "claimed"
        } else {
            "pending"
        };
        assert_eq!((seen.id, seen.state.as_str()), (id, expected), "{}", key(k));
        assert_eq!(
            submit(replica, "jobs", &json!({ "request": k }), &key(k)),
            (id, false),
            "a resent {}",
            key(k)
        );
    }
    assert_eq!(status(&mut replicas[1], "jobs", "job-lost"), None);
    let (resent_id, inserted) = submit(
        &mut replicas[2],
        "jobs",
        &json!({ "request": "lost" }),
        "job-lost",
    );
    assert!(inserted, "the uncommitted submit never happened");
    assert!(resent_id > lost_id);
    ids.insert("job-lost".into(), resent_id);
    assert!(
        outcomes(&mut admin, cut.id).is_empty(),
        "the cut write rolled back"
    );

    // New workers, same owner name, long-poll until every job is done.
    let total = ids.len();
    let done = Arc::new(AtomicUsize::new(done_before.len()));
    let start = Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|n| {
            let mut client = worker(&cluster, db, &format!("new worker {n}"));
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut claims = Vec::new();
                while done.load(Ordering::SeqCst) < total {
                    assert!(start.elapsed() < DEADLINE, "the jobs were not all done");
                    for item in claim(&mut client, "jobs", NEW_LEASE, 5, 1.0) {
                        assert!(
                            ok(finish(&mut client, &item, &output_of(&item)), "finishing"),
                            "a new worker's finish"
                        );
                        done.fetch_add(1, Ordering::SeqCst);
                        claims.push(item);
                    }
                }
                (client, claims)
            })
        })
        .collect();
    let mut claims: Vec<Claimed> = Vec::new();
    let mut w = None;
    for handle in workers {
        let (client, taken) = handle.join().expect("a new worker panicked");
        claims.extend(taken);
        w = Some(client);
    }
    let mut w = w.expect("a new worker");

    // Each job not done before was claimed once after the restart; the dead
    // workers' jobs only once their leases had lapsed, with a newer epoch and
    // the next attempt.
    let claimed_after: BTreeSet<i64> = claims.iter().map(|item| item.id).collect();
    assert_eq!(claims.len(), claimed_after.len(), "no job claimed twice");
    let expected: BTreeSet<i64> = ids
        .values()
        .copied()
        .filter(|id| !done_before.contains(id))
        .collect();
    assert_eq!(claimed_after, expected);
    let lease = Duration::from_secs_f64(NEW_LEASE);
    for item in &claims {
        match in_flight.iter().find(|old| old.id == item.id) {
            Some(old) => {
                assert!(
                    item.lease_until - lease >= old.lease_until,
                    "{} was claimed before its lease lapsed",
                    item.key
                );
                assert!(item.epoch > old.epoch);
                assert_eq!(item.attempt, old.attempt + 1);
            }
            None => assert_eq!(item.attempt, 1, "{}", item.key),
        }
    }

    // Every job done, with exactly one business row, under its final epoch.
    for (key, id) in &ids {
        assert_eq!(state_of(&mut replicas[0], "jobs", key), "done", "{key}");
        let final_epoch: i64 = ok(
            admin.query_one("SELECT epoch FROM workfence.items WHERE id = $1", &[id]),
            "the final epoch",
        )
        .get(0);
        let rows = outcomes(&mut admin, *id);
        assert_eq!(rows.len(), 1, "{key}: one business row, got {rows:?}");
        assert_eq!(rows[0].0, final_epoch, "{key}");
    }
    let rows: i64 = ok(
        admin.query_one("SELECT count(*) FROM app.outcomes", &[]),
        "counting outcomes",
    )
    .get(0);
    assert_eq!(rows, total as i64);

    // The dead workers' tokens are refused, although the owner name is the
    // same.
    for old in &in_flight {
        assert!(!renew(&mut w, old, NEW_LEASE), "{}: an old renew", old.key);
        assert_eq!(lease_status(&mut w, old), "superseded", "{}", old.key);
    }
    for old in &finished_before {
        assert_eq!(lease_status(&mut w, old), "finished", "{}", old.key);
    }
}
