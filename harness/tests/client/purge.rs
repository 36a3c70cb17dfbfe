//! `work_purge` against other transactions, from real client connections.
//!
//! What it proves: a purge never waits for a lock, and nobody waits for it.
//! - a finished row another transaction holds locked (an operator's
//!   `SELECT ... FOR UPDATE`, a purge that has not committed) is skipped and
//!   left for the next purge;
//! - a worker that has run `work_assert` and `work_finish` in a transaction
//!   it has not committed yet is not touched (its item is still `claimed` to
//!   everyone else) and not waited for; once it commits, the next purge takes
//!   the item;
//! - while a purge holds its rows, claims, finishes and enqueues of other
//!   items go on.
//!
//! "Never waits" is checked with `lock_timeout` on the connections that must
//! not wait: a statement that queued for any lock would fail with 55P03
//! instead of returning (no sleep, no timing of the happy path).
//!
//! Needs the extension installed (`scripts/test.sh`). Runs in a few seconds.

use crate::common;

use common::ok;
use postgres::Client;
use workfence_harness::calls::{self, Enqueue};
use workfence_harness::Cluster;

/// Keys of the items left, in key order.
fn keys(client: &mut Client) -> Vec<String> {
    ok(
        client.query("SELECT key FROM workfence.items ORDER BY key", &[]),
        "reading the keys",
    )
    .iter()
    .map(|row| row.get(0))
    .collect()
}

/// A connection on which any wait for a lock is an error (55P03).
fn never_waits(cluster: &Cluster, database: &str) -> Client {
    let mut client = ok(cluster.connect_to(database), "connecting");
    ok(client.batch_execute("SET lock_timeout = '1s'"), "SET");
    client
}

#[test]
fn a_purge_skips_locked_rows_and_never_waits() {
    let db = "purge";
    let (cluster, mut admin) = common::own_cluster_with_database(db);

    // a, b, c done; d claimed by a worker; e pending.
    ok(
        admin.batch_execute(
            "SELECT workfence.work_enqueue('q', '{}', k) FROM unnest('{a,b,c,d,e}'::text[]) AS k",
        ),
        "enqueue",
    );
    for key in ["a", "b", "c"] {
        let token = ok(
            calls::claim_key(&mut admin, "q", key, "w", "1 hour"),
            "work_claim_key",
        )
        .expect("claimable")
        .token("w");
        let done = ok(calls::finish(&mut admin, &token, None), "work_finish");
        assert!(done);
    }
    let d = ok(
        calls::claim_key(&mut admin, "q", "d", "w", "1 hour"),
        "work_claim_key",
    )
    .expect("claimable")
    .token("w");

    // An operator holds a's row; the worker finishes d under work_assert in
    // a transaction it has not committed.
    let mut operator = ok(cluster.connect_to(db), "connecting");
    let mut operator_tx = ok(operator.transaction(), "BEGIN");
    ok(
        operator_tx.execute(
            "SELECT 1 FROM workfence.items WHERE key = 'a' FOR UPDATE",
            &[],
        ),
        "locking a",
    );
    let mut worker = ok(cluster.connect_to(db), "connecting");
    let mut worker_tx = ok(worker.transaction(), "BEGIN");
    ok(calls::assert(&mut worker_tx, &d), "work_assert");
    let finished = ok(calls::finish(&mut worker_tx, &d, None), "work_finish");
    assert!(finished);

    // The purge takes b and c, skips a (locked) and d (claimed, as far as
    // anyone else can see), and waits for neither.
    let mut purger = never_waits(&cluster, db);
    assert_eq!(
        ok(calls::purge(&mut purger, Some("0"), None), "work_purge"),
        2
    );
    assert_eq!(keys(&mut admin), vec!["a", "d", "e"]);

    ok(operator_tx.commit(), "operator COMMIT");
    ok(worker_tx.commit(), "worker COMMIT");

    // Two purges at once: the first holds a and d (deleted, uncommitted);
    // the second skips them rather than wait for the first to end.
    let mut first = ok(cluster.connect_to(db), "connecting");
    let mut first_tx = ok(first.transaction(), "BEGIN");
    assert_eq!(
        ok(calls::purge(&mut first_tx, Some("0"), None), "work_purge"),
        2,
        "a and d, now finished"
    );
    assert_eq!(
        ok(calls::purge(&mut purger, Some("0"), None), "work_purge"),
        0
    );

    // Meanwhile the queue works: enqueue, claim and finish others' items.
    let mut busy = never_waits(&cluster, db);
    ok(
        calls::enqueue(&mut busy, &Enqueue::new("q").key("f")),
        "enqueue",
    );
    let mut claimed = ok(
        calls::claim(&mut busy, "q", "w2", "1 minute", Some(10), None),
        "work_claim",
    );
    claimed.sort_by(|a, b| a.key.cmp(&b.key));
    let claimed_keys: Vec<&str> = claimed.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(claimed_keys, vec!["e", "f"]);
    for claim in &claimed {
        let done = ok(
            calls::finish(&mut busy, &claim.token("w2"), None),
            "work_finish",
        );
        assert!(done);
    }
    ok(first_tx.commit(), "first purge COMMIT");
    assert_eq!(keys(&mut admin), vec!["e", "f"]);
}

/// A purge that deletes nothing reads the finished-items index, not the
/// table: on 200,000 recently finished items it runs no scan of the table
/// and one of `items_finished_idx` (this transaction's statistics, which
/// PostgreSQL keeps per backend before they are flushed). Its time is
/// printed beside a scan of the whole table for comparison.
#[test]
fn a_purge_reads_what_it_deletes_not_the_table() {
    let db = "purge_index";
    let (_cluster, mut admin) = common::own_cluster_with_database(db);
    ok(
        admin.batch_execute(
            "INSERT INTO workfence.items (queue, key, payload, run_at, state, max_attempts, \
                                          owner, epoch, finished_at) \
             SELECT 'q', 'k' || g, '{}', now(), 'done', 1, 'w', g, now() \
               FROM generate_series(1, 200000) g; \
             SELECT workfence.work_enqueue('q', '{}', 'old'); \
             UPDATE workfence.items SET state = 'done', finished_at = now() - interval '30 days' \
              WHERE key = 'old';",
        ),
        "200,000 finished items and one old one",
    );
    ok(
        admin.batch_execute("VACUUM ANALYZE workfence.items"),
        "VACUUM",
    );
    let stats = "SELECT pg_catalog.pg_stat_get_xact_numscans('workfence.items'::regclass), \
                        pg_catalog.pg_stat_get_xact_numscans('workfence.items_finished_idx'::regclass)";
    let mut tx = ok(admin.transaction(), "BEGIN");
    let started = std::time::Instant::now();
    let purged = ok(calls::purge(&mut tx, Some("7 days"), None), "purge");
    let took = started.elapsed();
    let row = ok(tx.query_one(stats, &[]), "this transaction's scans");
    let (table_scans, index_scans): (i64, i64) = (row.get(0), row.get(1));
    ok(tx.commit(), "COMMIT");
    let started = std::time::Instant::now();
    ok(
        admin.query_one(
            "SELECT count(*) FROM workfence.items WHERE finished_at < now() - interval '7 days'",
            &[],
        ),
        "a scan of the table",
    );
    println!(
        "purge: deleting 1 of 200,001 finished items took {took:?}; a scan of the table {:?}",
        started.elapsed()
    );
    assert_eq!(purged, 1, "the one old item");
    assert_eq!(table_scans, 0, "the purge scanned the table");
    assert_eq!(index_scans, 1, "the purge used items_finished_idx");
}
