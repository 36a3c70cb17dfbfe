//! Workflows (0.12.0, issue 37), from real client connections: items that
//! wait for others (`work_enqueue`'s `after`), released only by a current
//! lease's finish (docs/contract.md, promise 13).
//!
//! Orderings are explicit: a finish held open in a transaction while
//! another connection looks, a zombie's lease superseded by a real
//! re-claim (its lapse awaited on the server's clock), workers that stop
//! when the join is done.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use common::{ok, scalar};
use postgres::Client;
use serde_json::{json, Value};
use workfence_harness::calls::{self, Enqueue, Token};
use workfence_harness::Cluster;

fn database(cluster: &Cluster, name: &str) -> Client {
    ok(cluster.create_database(name), "creating the database");
    ok(cluster.connect_to(name), "connecting")
}

/// A new item of `queue` with key `key`, waiting for `after` (none when
/// empty) with `on_parent_failure` `policy`: its id.
fn node(c: &mut Client, queue: &str, key: &str, after: &[i64], policy: &str) -> i64 {
    let mut item = Enqueue::new(queue).key(key);
    if !after.is_empty() {
        item = item.after(after).on_parent_failure(policy);
    }
    common::enqueue_new(c, &item)
}

/// The item's (state, waiting_on).
fn standing(c: &mut Client, id: i64) -> (String, i32) {
    let row = ok(
        c.query_one(
            "SELECT state::text, waiting_on FROM workfence.items WHERE id = $1",
            &[&id],
        ),
        "the item's state",
    );
    (row.get(0), row.get(1))
}

fn state(c: &mut Client, id: i64) -> String {
    standing(c, id).0
}

/// Claims the item `key` of `queue` as `owner`: its token.
fn claim_key(c: &mut Client, queue: &str, key: &str, owner: &str) -> Token {
    ok(
        calls::claim_key(c, queue, key, owner, "1 minute"),
        "work_claim_key",
    )
    .unwrap_or_else(|| panic!("{queue}/{key} is not claimable"))
    .token(owner)
}

fn finish(c: &mut Client, token: &Token, result: &Value) -> bool {
    ok(calls::finish(c, token, Some(result)), "work_finish")
}

/// `work_parent_results` under `token`: NULL for a stale token.
fn parent_results(c: &mut Client, token: &Token) -> Option<Value> {
    scalar(
        c,
        "SELECT workfence.work_parent_results($1, $2, $3)",
        &[&token.id, &token.owner, &token.epoch],
    )
}

fn key_of(c: &mut Client, id: i64) -> String {
    scalar(c, "SELECT key FROM workfence.items WHERE id = $1", &[&id])
}

#[test]
fn a_child_waits_for_every_parent_and_reads_their_results() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_fan_in");
    let a = node(&mut c, "wf.a", "a", &[], "cancel");
    let b = node(&mut c, "wf.b", "b", &[], "cancel");
    let child = node(&mut c, "wf.join", "join", &[a, b], "cancel");
    assert_eq!(standing(&mut c, child), ("waiting".to_owned(), 2));
    assert_eq!(
        common::claim_count(&mut c, "wf.join"),
        0,
        "a waiting item is not claimable"
    );

    let ta = claim_key(&mut c, "wf.a", "a", "w");
    assert!(finish(&mut c, &ta, &json!({"from": "a"})));
    assert_eq!(standing(&mut c, child), ("waiting".to_owned(), 1));
    // The same finish repeated (a lost reply) is true and counts nothing.
    assert!(finish(&mut c, &ta, &json!({"from": "a"})));
    assert_eq!(standing(&mut c, child), ("waiting".to_owned(), 1));

    let tb = claim_key(&mut c, "wf.b", "b", "w");
    assert!(finish(&mut c, &tb, &json!({"from": "b"})));
    assert_eq!(standing(&mut c, child), ("pending".to_owned(), 0));

    let tc = claim_key(&mut c, "wf.join", "join", "w");
    assert_eq!(
        parent_results(&mut c, &tc),
        Some(json!({a.to_string(): {"from": "a"}, b.to_string(): {"from": "b"}}))
    );
    let stale = Token::new(tc.id, "w", tc.epoch - 1);
    assert_eq!(
        parent_results(&mut c, &stale),
        None,
        "a stale token reads nothing"
    );
    assert!(finish(&mut c, &tc, &json!(null)));

    // The graph, from the child: itself, then its parents.
    let graph = ok(
        calls::generated::work_workflow(&mut c, child),
        "work_workflow",
    );
    let seen: Vec<(i64, i32, Vec<i64>)> = graph
        .iter()
        .map(|r| {
            (
                r.id.expect("id"),
                r.depth.expect("depth"),
                r.parents.clone().expect("parents"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![(child, 0, vec![a, b]), (a, -1, vec![]), (b, -1, vec![])]
    );
}

#[test]
fn the_child_is_released_only_when_the_last_parents_finish_commits() {
    let cluster = common::shared_cluster();
    let mut worker = database(&cluster, "wf_commit");
    let mut observer = ok(cluster.connect_to("wf_commit"), "connecting");
    let p = node(&mut worker, "wf.p", "p", &[], "cancel");
    let child = node(&mut worker, "wf.c", "c", &[p], "cancel");
    let token = claim_key(&mut worker, "wf.p", "p", "w");

    // A finish that rolls back releases nothing.
    ok(worker.batch_execute("BEGIN"), "BEGIN");
    assert!(finish(&mut worker, &token, &json!(1)));
    assert_eq!(
        state(&mut worker, child),
        "pending",
        "the finish's own transaction sees it"
    );
    assert_eq!(state(&mut observer, child), "waiting");
    assert_eq!(common::claim_count(&mut observer, "wf.c"), 0);
    ok(worker.batch_execute("ROLLBACK"), "ROLLBACK");
    assert_eq!(state(&mut observer, child), "waiting");
    assert_eq!(state(&mut observer, p), "claimed");

    // Held open: no claim takes the child until the finish commits.
    ok(worker.batch_execute("BEGIN"), "BEGIN");
    assert!(finish(&mut worker, &token, &json!(2)));
    assert_eq!(
        common::claim_count(&mut observer, "wf.c"),
        0,
        "claimed before the commit"
    );
    ok(worker.batch_execute("COMMIT"), "COMMIT");
    assert_eq!(
        common::claim_count(&mut observer, "wf.c"),
        1,
        "released at the commit"
    );
}

#[test]
fn a_child_enqueued_while_its_parent_finishes_is_counted_either_way() {
    // The enqueue locks the parent's row: a finish in flight is waited for
    // and read as done; an enqueue in flight is waited for by the finish,
    // which then releases the child it did not see begin.
    let cluster = common::shared_cluster();
    let mut a = database(&cluster, "wf_race");
    let mut b = ok(cluster.connect_to("wf_race"), "connecting");
    let mut observer = ok(cluster.connect_to("wf_race"), "connecting");
    let pid_b = common::backend_pid(&mut b);
    let pid_a = common::backend_pid(&mut a);

    // 1. The finish holds the row; the enqueue waits, then sees done.
    let p1 = node(&mut a, "wf.p", "p1", &[], "cancel");
    let t1 = claim_key(&mut a, "wf.p", "p1", "w");
    ok(a.batch_execute("BEGIN"), "BEGIN");
    assert!(finish(&mut a, &t1, &json!(1)));
    let enqueuer = thread::spawn(move || {
        let id = node(&mut b, "wf.c", "c1", &[p1], "cancel");
        (b, id)
    });
    common::wait_until_blocked(&mut observer, pid_b, pid_a);
    ok(a.batch_execute("COMMIT"), "COMMIT");
    let (mut b, c1) = enqueuer.join().expect("the enqueuer");
    assert_eq!(standing(&mut observer, c1), ("pending".to_owned(), 0));

    // 2. The enqueue holds the parent's row; the finish waits, then
    //    releases the child.
    let p2 = node(&mut a, "wf.p", "p2", &[], "cancel");
    let t2 = claim_key(&mut a, "wf.p", "p2", "w");
    ok(b.batch_execute("BEGIN"), "BEGIN");
    let c2 = node(&mut b, "wf.c", "c2", &[p2], "cancel");
    let finisher = thread::spawn(move || {
        let done = finish(&mut a, &t2, &json!(2));
        (a, done)
    });
    common::wait_until_blocked(&mut observer, pid_a, pid_b);
    ok(b.batch_execute("COMMIT"), "COMMIT");
    let (_a, done) = finisher.join().expect("the finisher");
    assert!(done);
    assert_eq!(standing(&mut observer, c2), ("pending".to_owned(), 0));
}

#[test]
fn a_zombie_parents_late_finish_releases_nothing_and_a_rerun_parent_counts_once() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_zombie");
    let p = node(&mut c, "wf.p", "p", &[], "cancel");
    let q = node(&mut c, "wf.q", "q", &[], "cancel");
    let child = node(&mut c, "wf.c", "c", &[p, q], "cancel");

    // Worker A (routines/laptop) claims P with a short lease and stalls;
    // the lease lapses and worker B (also routines/laptop) claims P anew.
    let zombie = ok(
        calls::claim_key(&mut c, "wf.p", "p", "routines/laptop", "50 milliseconds"),
        "work_claim_key",
    )
    .expect("p is claimable")
    .token("routines/laptop");
    common::wait_out_lease(&mut c, p);
    let current = claim_key(&mut c, "wf.p", "p", "routines/laptop");
    assert!(current.epoch > zombie.epoch);

    assert!(
        !finish(&mut c, &zombie, &json!("zombie")),
        "the zombie's finish is refused"
    );
    assert_eq!(
        standing(&mut c, child),
        ("waiting".to_owned(), 2),
        "and counts nothing"
    );
    assert!(finish(&mut c, &current, &json!("current")));
    assert_eq!(standing(&mut c, child), ("waiting".to_owned(), 1));
    assert!(
        !finish(&mut c, &zombie, &json!("zombie")),
        "refused after the finish too"
    );
    assert_eq!(standing(&mut c, child), ("waiting".to_owned(), 1));

    // P runs again (on_conflict replace of a done item) and finishes again:
    // its edge was counted once, so Q still holds the child.
    let again = common::enqueued(
        &mut c,
        &Enqueue::new("wf.p").key("p").on_conflict("replace"),
    );
    assert_eq!(again.id, p);
    assert_eq!(state(&mut c, p), "pending");
    let rerun = claim_key(&mut c, "wf.p", "p", "routines/laptop");
    assert!(finish(&mut c, &rerun, &json!("again")));
    assert_eq!(
        standing(&mut c, child),
        ("waiting".to_owned(), 1),
        "a parent finished twice released its child early"
    );
    let tq = claim_key(&mut c, "wf.q", "q", "w");
    assert!(finish(&mut c, &tq, &json!("q")));
    assert_eq!(standing(&mut c, child), ("pending".to_owned(), 0));
    let tc = claim_key(&mut c, "wf.c", "c", "w");
    assert_eq!(
        parent_results(&mut c, &tc),
        Some(json!({p.to_string(): "again", q.to_string(): "q"})),
        "the child reads the parent's newest result, never the zombie's"
    );
}

#[test]
fn a_failed_parent_cancels_its_subtree_and_a_retry_brings_it_back() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_failure");
    let f = common::enqueue_new(&mut c, &Enqueue::new("wf.f").key("f").max_attempts(2));
    let g = node(&mut c, "wf.g", "g", &[f], "cancel");
    let h = node(&mut c, "wf.h", "h", &[g], "cancel");
    let i = node(&mut c, "wf.i", "i", &[h], "cancel");
    let runs = node(&mut c, "wf.r", "r", &[f], "run");

    // A failure with an attempt left is a retry: the children wait on.
    let t1 = claim_key(&mut c, "wf.f", "f", "w");
    assert!(ok(
        calls::fail(&mut c, &t1, "first", Some("0 seconds")),
        "work_fail"
    ));
    assert_eq!(state(&mut c, f), "pending");
    for id in [g, h, i, runs] {
        assert_eq!(state(&mut c, id), "waiting");
    }

    // The final failure cancels the subtree in its transaction; the 'run'
    // child runs and reads the failure.
    let t2 = claim_key(&mut c, "wf.f", "f", "w");
    assert!(ok(calls::fail(&mut c, &t2, "boom", None), "work_fail"));
    assert_eq!(state(&mut c, f), "failed");
    let errors: Vec<(String, Option<String>)> = [g, h, i]
        .iter()
        .map(|id| {
            let row = ok(
                c.query_one(
                    "SELECT state::text, last_error FROM workfence.items WHERE id = $1",
                    &[id],
                ),
                "a cancelled item",
            );
            (row.get(0), row.get(1))
        })
        .collect();
    assert_eq!(
        errors,
        vec![
            (
                "cancelled".to_owned(),
                Some(format!("parent {f} ended failed"))
            ),
            (
                "cancelled".to_owned(),
                Some(format!("parent {g} ended cancelled"))
            ),
            (
                "cancelled".to_owned(),
                Some(format!("parent {h} ended cancelled"))
            ),
        ]
    );
    assert_eq!(state(&mut c, runs), "pending");
    let tr = claim_key(&mut c, "wf.r", "r", "w");
    assert_eq!(
        parent_results(&mut c, &tr),
        Some(json!({f.to_string(): {"state": "failed", "error": "boom"}}))
    );
    assert!(finish(&mut c, &tr, &json!("ran anyway")));

    // The operator retries the dead letter: its workflow waits again, and
    // runs to the end once it is done.
    assert!(ok(calls::retry(&mut c, "wf.f", "f", None), "work_retry"));
    for id in [g, h, i] {
        assert_eq!(standing(&mut c, id), ("waiting".to_owned(), 1));
    }
    let mut token = claim_key(&mut c, "wf.f", "f", "w");
    for (queue, id) in [("wf.g", g), ("wf.h", h), ("wf.i", i)] {
        assert!(finish(&mut c, &token, &json!(queue)));
        assert_eq!(state(&mut c, id), "pending");
        let key = key_of(&mut c, id);
        token = claim_key(&mut c, queue, &key, "w");
    }
    assert!(finish(&mut c, &token, &json!("end")));
    assert_eq!(state(&mut c, runs), "done", "the run child ran once");
}

#[test]
fn a_cancelled_parent_cancels_and_an_ended_parent_counts_at_enqueue() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_cancel");
    let p = node(&mut c, "wf.p", "p", &[], "cancel");
    let child = node(&mut c, "wf.c", "c", &[p], "cancel");
    assert!(ok(calls::cancel(&mut c, "wf.p", "p"), "work_cancel"));
    assert_eq!(state(&mut c, child), "cancelled");
    // Enqueued after the parent ended: cancelled at once, or pending with
    // 'run'; after a done parent, pending.
    let n1 = node(&mut c, "wf.c", "late", &[p], "cancel");
    assert_eq!(state(&mut c, n1), "cancelled");
    let n2 = node(&mut c, "wf.c", "late-run", &[p], "run");
    assert_eq!(state(&mut c, n2), "pending");
    let d = node(&mut c, "wf.d", "d", &[], "cancel");
    let token = claim_key(&mut c, "wf.d", "d", "w");
    assert!(finish(&mut c, &token, &json!(null)));
    let n3 = node(&mut c, "wf.c", "after-done", &[d], "cancel");
    assert_eq!(state(&mut c, n3), "pending");
    // A waiting item can be cancelled too.
    let q = node(&mut c, "wf.q", "q", &[], "cancel");
    let waiting = node(&mut c, "wf.c", "waiting", &[q], "cancel");
    assert!(ok(calls::cancel(&mut c, "wf.c", "waiting"), "work_cancel"));
    assert_eq!(state(&mut c, waiting), "cancelled");
    let tq = claim_key(&mut c, "wf.q", "q", "w");
    assert!(finish(&mut c, &tq, &json!(null)));
    assert_eq!(
        state(&mut c, waiting),
        "cancelled",
        "a finish does not undo a cancel"
    );
}

/// Workers claiming from `queues` in turn until `stop` says so; each
/// finishes what it claims with `{"by": worker}`. Returns every claim made:
/// (worker, id, epoch).
fn work(
    cluster: &Cluster,
    database: &str,
    queues: &'static [&'static str],
    workers: usize,
    stop: i64,
) -> Vec<(usize, i64, i64)> {
    let claims = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let mut c = ok(cluster.connect_to(database), "a worker's connection");
            let claims = Arc::clone(&claims);
            thread::spawn(move || loop {
                let mut any = false;
                for queue in queues {
                    let got = ok(
                        calls::claim(&mut c, queue, "worker", "1 minute", Some(4), None),
                        "work_claim",
                    );
                    for claim in got {
                        any = true;
                        claims
                            .lock()
                            .expect("claims")
                            .push((w, claim.id, claim.epoch));
                        let token = claim.token("worker");
                        assert!(finish(&mut c, &token, &json!({"by": w})));
                    }
                }
                if state(&mut c, stop) == "done" {
                    return;
                }
                if !any {
                    // Nothing due anywhere: long-poll the join's queue (a
                    // release anywhere else wakes the other queues'
                    // pollers; this one comes back within 20 ms).
                    let got = ok(
                        calls::claim(
                            &mut c,
                            queues[queues.len() - 1],
                            "worker",
                            "1 minute",
                            None,
                            Some("20 milliseconds"),
                        ),
                        "work_claim",
                    );
                    for claim in got {
                        claims
                            .lock()
                            .expect("claims")
                            .push((w, claim.id, claim.epoch));
                        let token = claim.token("worker");
                        assert!(finish(&mut c, &token, &json!({"by": w})));
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("a worker");
    }
    let claims = claims.lock().expect("claims").clone();
    claims
}

#[test]
fn fan_out_and_fan_in_under_eight_workers_runs_the_join_once_after_every_parent() {
    const QUEUES: &[&str] = &["wf8.root", "wf8.mid", "wf8.join"];
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_fan");
    let root = node(&mut c, "wf8.root", "root", &[], "cancel");
    let mids: Vec<i64> = (0..100)
        .map(|n| node(&mut c, "wf8.mid", &format!("m{n}"), &[root], "cancel"))
        .collect();
    let join = node(&mut c, "wf8.join", "join", &mids, "cancel");
    assert_eq!(standing(&mut c, join), ("waiting".to_owned(), 100));

    let started = Instant::now();
    let claims = work(&cluster, "wf_fan", QUEUES, 8, join);
    let elapsed = started.elapsed();

    let joins = claims.iter().filter(|(_, id, _)| *id == join).count();
    assert_eq!(joins, 1, "the join was claimed {joins} times");
    let ids: HashSet<i64> = claims.iter().map(|(_, id, _)| *id).collect();
    assert_eq!(ids.len(), 102, "every item ran");
    assert_eq!(claims.len(), 102, "each item ran once");
    // Never before its parents: every claim after every parent's finish.
    let early: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM workfence.item_edges AS e
           JOIN workfence.items AS p ON p.id = e.parent
           JOIN workfence.items AS ch ON ch.id = e.child
          WHERE ch.claimed_at < p.finished_at",
        &[],
    );
    assert_eq!(early, 0, "a child claimed before a parent finished");
    let attempts: i32 = scalar(
        &mut c,
        "SELECT attempts FROM workfence.items WHERE id = $1",
        &[&join],
    );
    assert_eq!(attempts, 1);
    let workers: BTreeMap<usize, usize> =
        claims.iter().fold(BTreeMap::new(), |mut m, (w, _, _)| {
            *m.entry(*w).or_default() += 1;
            m
        });
    println!(
        "fan-out/fan-in 1 -> 100 -> 1, 8 workers: {} items in {:.0} ms, claims per worker {:?}",
        claims.len(),
        elapsed.as_secs_f64() * 1000.0,
        workers
    );
}

/// A statement of src/verbs/workflow.rs (`static NAME: Statement<PARAMS>`),
/// as the extension runs it (read from the source, so the plan shown is
/// the real one's).
fn statement_sql(name: &str, params: &str) -> String {
    let sources = common::extension_sources();
    let (_, text) = sources
        .iter()
        .find(|(path, _)| path == "verbs/workflow.rs")
        .expect("src/verbs/workflow.rs");
    let start = text
        .find(&format!(
            "static {name}: Statement<{params}> = Statement::new(\n    r#\""
        ))
        .unwrap_or_else(|| panic!("the {name} statement"));
    let body = &text[start..];
    let open = body.find("r#\"").expect("its raw string") + 3;
    let close = body[open..].find("\"#").expect("its end") + open;
    body[open..close].to_owned()
}

/// EXPLAIN (ANALYZE, BUFFERS) of a release of `parent`'s children, done, in
/// a transaction rolled back: SETTLE_DONE (a finish's, `single`) or SETTLE
/// (a batch's and a failure's). The plan's JSON.
fn explain_settle(c: &mut Client, parent: i64, single: bool) -> Value {
    let (prepare, execute) = if single {
        (
            format!(
                "PREPARE settle (bigint) AS {}",
                statement_sql("SETTLE_DONE", "SettleDoneParams")
            ),
            format!("EXECUTE settle({parent})"),
        )
    } else {
        (
            format!(
                "PREPARE settle (bigint[], boolean, text) AS {}",
                statement_sql("SETTLE", "SettleParams")
            ),
            format!("EXECUTE settle(ARRAY[{parent}::bigint], false, 'done')"),
        )
    };
    let mut tx = ok(c.transaction(), "BEGIN");
    // As the extension plans its statements (src/pg/plans.rs).
    ok(
        tx.batch_execute("SET LOCAL plan_cache_mode = force_generic_plan"),
        "generic plans",
    );
    ok(tx.batch_execute(&prepare), "PREPARE");
    // (EXPLAIN EXECUTE takes no bind parameters: the id, an integer, is
    // written into the text.)
    let plan: Value = ok(
        tx.query_one(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {execute}"),
            &[],
        ),
        "EXPLAIN",
    )
    .get(0);
    ok(tx.rollback(), "ROLLBACK");
    // (A prepared statement outlives its transaction.)
    ok(c.batch_execute("DEALLOCATE settle"), "DEALLOCATE");
    plan
}

/// Every (node type, relation or index) of a JSON plan, and its total
/// shared buffers (hit + read).
fn plan_shape(plan: &Value) -> (Vec<String>, i64) {
    fn walk(node: &Value, shape: &mut Vec<String>) {
        let kind = node["Node Type"].as_str().unwrap_or("?");
        let on = node["Index Name"]
            .as_str()
            .or(node["Relation Name"].as_str())
            .unwrap_or("");
        shape.push(format!("{kind} {on}").trim().to_owned());
        if let Some(children) = node["Plans"].as_array() {
            for child in children {
                walk(child, shape);
            }
        }
    }
    let root = &plan[0]["Plan"];
    let mut shape = Vec::new();
    walk(root, &mut shape);
    let buffers = root["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + root["Shared Read Blocks"].as_i64().unwrap_or(0);
    (shape, buffers)
}

#[test]
fn releasing_a_child_costs_the_same_at_depth_one_and_ten_thousand() {
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_deep");
    // A chain of 3,333 diamonds (10,000 items): top -> (left, right) -> the
    // next top, enqueued in one transaction.
    let started = Instant::now();
    ok(
        c.batch_execute(
            "DO $$
             DECLARE
                 top bigint;
                 l bigint;
                 r bigint;
             BEGIN
                 SELECT id INTO top FROM workfence.work_enqueue('deep', '{}', key => 't0');
                 FOR n IN 1..3333 LOOP
                     SELECT id INTO l FROM workfence.work_enqueue('deep', '{}', key => 'l' || n, after => ARRAY[top]);
                     SELECT id INTO r FROM workfence.work_enqueue('deep', '{}', key => 'r' || n, after => ARRAY[top]);
                     SELECT id INTO top FROM workfence.work_enqueue('deep', '{}', key => 't' || n, after => ARRAY[l, r]);
                 END LOOP;
             END $$",
        ),
        "the chain",
    );
    let built = started.elapsed();
    ok(
        c.batch_execute("ANALYZE workfence.items, workfence.item_edges"),
        "ANALYZE",
    );
    let items: i64 = scalar(&mut c, "SELECT count(*) FROM workfence.items", &[]);
    assert_eq!(items, 10_000);
    let first: i64 = scalar(
        &mut c,
        "SELECT id FROM workfence.items WHERE key = 'l1'",
        &[],
    );
    let deepest: i64 = scalar(
        &mut c,
        "SELECT id FROM workfence.items WHERE key = 'l3333'",
        &[],
    );

    for single in [true, false] {
        let name = if single { "SETTLE_DONE" } else { "SETTLE" };
        let (shallow_shape, shallow_buffers) = plan_shape(&explain_settle(&mut c, first, single));
        let (deep_shape, deep_buffers) = plan_shape(&explain_settle(&mut c, deepest, single));
        println!(
            "10,000-item diamond chain built in {:.0} ms; {name} at depth 1: {shallow_buffers} \
             buffers, at depth 9,998: {deep_buffers} buffers; plan {shallow_shape:?}",
            built.as_secs_f64() * 1000.0
        );
        assert_eq!(
            shallow_shape, deep_shape,
            "{name}'s plan depends on the depth"
        );
        assert!(
            shallow_shape
                .iter()
                .all(|node| !node.starts_with("Seq Scan")),
            "{name} reads a table whole: {shallow_shape:?}"
        );
        for index in ["item_edges_pkey", "items_pkey"] {
            assert!(
                shallow_shape.iter().any(|node| node.ends_with(index)),
                "{name} does not use {index}: {shallow_shape:?}"
            );
        }
        assert!(
            deep_buffers <= shallow_buffers + 4,
            "{name} at depth 9,998 reads {deep_buffers} buffers, at depth 1 {shallow_buffers}"
        );
    }

    // And through the functions: the finish of a left node at the top and
    // at the bottom of the chain moves the same rows, with no sequential
    // scan (each in a transaction of its own, whose statistics say so).
    // Everything in between runs in one server-side loop.
    let mut counts = Vec::new();
    let mut measure = |c: &mut Client, key: &str| {
        let token = claim_key(c, "deep", key, "w");
        // Read before and after the finish: PostgreSQL 15's pending
        // statistics of earlier transactions show in these views too.
        let read = |tx: &mut postgres::Transaction<'_>| -> (i64, i64) {
            let row = ok(
                tx.query_one(
                    "SELECT sum(seq_scan)::bigint, sum(n_tup_upd)::bigint
                       FROM pg_catalog.pg_stat_xact_all_tables
                      WHERE schemaname = 'workfence' AND relname IN ('items', 'item_edges')",
                    &[],
                ),
                "the transaction's statistics",
            );
            (row.get(0), row.get(1))
        };
        let mut tx = ok(c.transaction(), "BEGIN");
        let before = read(&mut tx);
        assert!(ok(calls::finish(&mut tx, &token, None), "work_finish"));
        let after = read(&mut tx);
        counts.push((key.to_owned(), after.0 - before.0, after.1 - before.1));
        ok(tx.commit(), "COMMIT");
    };
    measure(&mut c, "t0");
    measure(&mut c, "l1");
    ok(
        c.batch_execute(
            "DO $$
             DECLARE
                 k text;
                 t record;
             BEGIN
                 FOR n IN 1..3333 LOOP
                     FOREACH k IN ARRAY CASE WHEN n = 1 THEN ARRAY['r1', 't1']
                                             WHEN n = 3333 THEN ARRAY['r3333']
                                             ELSE ARRAY['l' || n, 'r' || n, 't' || n] END LOOP
                         SELECT * INTO STRICT t FROM workfence.work_claim_key('deep', k, 'w', '1 minute');
                         PERFORM workfence.work_finish(t.id, 'w', t.epoch);
                     END LOOP;
                 END LOOP;
             END $$",
        ),
        "finishing the chain down to its bottom",
    );
    measure(&mut c, "l3333");
    println!("finish of (node, sequential scans, rows updated): {counts:?}");
    for (key, seq, _) in &counts {
        assert_eq!(*seq, 0, "the finish of {key} scanned a table");
    }
    assert_eq!(
        counts[1].2, counts[2].2,
        "a left node's finish at depth 1 and at the bottom"
    );
    let bottom: i64 = scalar(
        &mut c,
        "SELECT id FROM workfence.items WHERE key = 't3333'",
        &[],
    );
    assert_eq!(
        state(&mut c, bottom),
        "pending",
        "the bottom of the chain is released"
    );
}

#[test]
fn a_retried_child_waits_for_a_parent_retried_before_it() {
    // The model's counterexample to a retry decided by the count alone
    // (docs/model.md, `Sql::RetryByCount`): a chain i0 -> i1 -> i2, both
    // children cancelled while waiting, i1 retried (waiting for i0 again),
    // then i2 retried: i2 must wait for i1, not run before it.
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_retry_chain");
    let i0 = node(&mut c, "wf.0", "i0", &[], "cancel");
    let i1 = node(&mut c, "wf.1", "i1", &[i0], "cancel");
    let i2 = node(&mut c, "wf.2", "i2", &[i1], "cancel");
    assert!(ok(calls::cancel(&mut c, "wf.2", "i2"), "work_cancel"));
    assert!(ok(calls::cancel(&mut c, "wf.1", "i1"), "work_cancel"));
    assert!(ok(calls::retry(&mut c, "wf.1", "i1", None), "work_retry"));
    assert_eq!(standing(&mut c, i1), ("waiting".to_owned(), 1));
    assert!(ok(calls::retry(&mut c, "wf.2", "i2", None), "work_retry"));
    assert_eq!(
        standing(&mut c, i2),
        ("waiting".to_owned(), 1),
        "the retried child runs before its retried parent"
    );
    assert_eq!(common::claim_count(&mut c, "wf.2"), 0);
    // The same through on_conflict: a re-run of a finished child waits too.
    assert!(ok(calls::cancel(&mut c, "wf.2", "i2"), "work_cancel"));
    let again = common::enqueued(
        &mut c,
        &Enqueue::new("wf.2").key("i2").on_conflict("replace"),
    );
    assert_eq!(again.id, i2);
    assert_eq!(standing(&mut c, i2), ("waiting".to_owned(), 1));
    // And the chain runs in order.
    let t0 = claim_key(&mut c, "wf.0", "i0", "w");
    assert!(finish(&mut c, &t0, &json!(0)));
    assert_eq!(state(&mut c, i1), "pending");
    assert_eq!(state(&mut c, i2), "waiting");
    let t1 = claim_key(&mut c, "wf.1", "i1", "w");
    assert!(finish(&mut c, &t1, &json!(1)));
    assert_eq!(standing(&mut c, i2), ("pending".to_owned(), 0));
    let stats: (i64, i64) = {
        let row = ok(
            c.query_one(
                "SELECT s.waiting, e.waiting FROM workfence.work_queue_stats AS s
                   JOIN workfence.work_queue_stats_exact AS e USING (queue) WHERE queue = 'wf.2'",
                &[],
            ),
            "the stats",
        );
        (row.get(0), row.get(1))
    };
    assert_eq!(stats, (0, 0), "the kept counts follow the retries");
}

#[test]
fn a_resubmit_of_an_existing_key_ignores_its_after() {
    // An idempotent resubmit: the existing item is returned as it is, its
    // edges unchanged, even when a parent named was purged since (no
    // 23503); a new key with the same after is refused.
    let cluster = common::shared_cluster();
    let mut c = database(&cluster, "wf_resubmit");
    let p = node(&mut c, "wf.p", "p", &[], "cancel");
    let child = node(&mut c, "wf.c", "c", &[p], "cancel");
    let token = claim_key(&mut c, "wf.p", "p", "w");
    assert!(finish(&mut c, &token, &json!(null)));
    let purged: i64 = scalar(
        &mut c,
        "SELECT workfence.work_purge('0 seconds', 'wf.p')",
        &[],
    );
    assert_eq!(purged, 1);
    let again = common::enqueued(&mut c, &Enqueue::new("wf.c").key("c").after(&[p]));
    assert_eq!((again.id, again.inserted), (child, false));
    let edges: i64 = scalar(&mut c, "SELECT count(*) FROM workfence.item_edges", &[]);
    assert_eq!(edges, 0, "the purge took the edge with its parent");
    common::server_error(
        calls::enqueue(&mut c, &Enqueue::new("wf.c").key("new").after(&[p])),
        "23503",
        "a new key after a purged parent",
    );
}
