//! Epochs are never reissued, even under `synchronous_commit = off`.
//!
//! With asynchronous commit, PostgreSQL acknowledges a commit before its WAL
//! reaches disk; an operating-system crash then loses it, and with it the
//! `epoch_seq` record covering the epochs the lost claim handed out: after
//! recovery the sequence would hand the same epochs out again. `work_claim`
//! and `work_claim_key` therefore flush the WAL up to the sequence's latest
//! record before returning when the session's `synchronous_commit` does not
//! (see `durable()` in `src/verbs/claim.rs`); the claim's own row updates stay
//! asynchronous.
//!
//! An OS crash cannot be staged here (a `pg_ctl -m immediate` stop keeps WAL
//! the server already wrote to the OS), so the test checks the mechanism on
//! the server itself: inside a transaction under `synchronous_commit = off`,
//! right after a CHECKPOINT (so the claim's `nextval` writes a new sequence
//! record), WAL written before the claim is not yet flushed (the control,
//! showing the check can see a lag), while right after the claim the WAL is
//! flushed at least up to the sequence page's LSN (read with pageinspect),
//! and that record was written by the claim. Autovacuum is off and the WAL
//! writer slowed, so nothing else writes or flushes WAL in between.
//!
//! Needs the extension installed (`scripts/test.sh`).

use crate::common;

use std::time::{Duration, Instant};

use common::ok;
use postgres::{Client, GenericClient};
use workfence_harness::calls::{self, Enqueue};
use workfence_harness::Cluster;

/// (insert position, flush position) of the WAL, as numbers of bytes.
fn wal_positions(c: &mut impl GenericClient) -> (i64, i64) {
    let row = ok(
        c.query_one(
            "SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
                    (pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint",
            &[],
        ),
        "WAL positions",
    );
    (row.get(0), row.get(1))
}

/// The LSN of `workfence.epoch_seq`'s page (its latest WAL record), in bytes.
fn epoch_seq_lsn(c: &mut impl GenericClient) -> i64 {
    ok(
        c.query_one(
            "SELECT (h.lsn - '0/0'::pg_lsn)::bigint
               FROM page_header(get_raw_page('workfence.epoch_seq', 0)) AS h",
            &[],
        ),
        "the sequence page's LSN",
    )
    .get(0)
}

/// Enqueues `key` in queue `q` and claims from `q`, which must give an item.
fn enqueue_and_claim(tx: &mut impl GenericClient, key: &str) {
    ok(calls::enqueue(tx, &Enqueue::new("q").key(key)), "enqueue");
    let claimed = ok(
        calls::claim(tx, "q", "w", "1 minute", Some(10), None),
        "claim",
    )
    .len();
    assert!(claimed > 0, "the claim of {key} got nothing");
}

/// Waits until a new session sees `setting = value` after a reload.
fn wait_for_setting(cluster: &Cluster, setting: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c: Client = ok(cluster.connect(), "connecting");
        let now: String = ok(
            c.query_one("SELECT pg_catalog.current_setting($1)", &[&setting]),
            "current_setting",
        )
        .get(0);
        if now == value {
            return;
        }
        assert!(Instant::now() < deadline, "{setting} is {now}, not {value}");
    }
}

#[test]
fn a_claim_under_asynchronous_commit_flushes_its_epochs_before_returning() {
    let cluster = common::own_cluster();
    ok(cluster.create_database("durable"), "creating the database");
    let mut admin = ok(cluster.connect(), "connecting");
    for statement in [
        "ALTER SYSTEM SET autovacuum = off",
        "ALTER SYSTEM SET wal_writer_delay = '10s'",
        "ALTER SYSTEM SET wal_writer_flush_after = '1GB'",
        "SELECT pg_catalog.pg_reload_conf()",
    ] {
        ok(admin.batch_execute(statement), statement);
    }
    wait_for_setting(&cluster, "wal_writer_delay", "10s");
    wait_for_setting(&cluster, "autovacuum", "off");

    let mut c = ok(cluster.connect_to("durable"), "connecting");
    ok(
        c.batch_execute("CREATE EXTENSION pageinspect; SET synchronous_commit = off"),
        "synchronous_commit = off",
    );
    for claim in [
        "SELECT count(*) FROM workfence.work_claim('q', 'w', '1 minute', 10)",
        "SELECT count(*) FROM workfence.work_claim_key('q', 'k2', 'w', '1 minute')",
    ] {
        // The next nextval after a checkpoint WAL-logs the sequence anew.
        ok(c.batch_execute("CHECKPOINT"), "CHECKPOINT");
        let mut tx = ok(c.transaction(), "BEGIN");
        ok(
            tx.batch_execute(
                "SELECT workfence.work_enqueue('q', '{}', k)
                   FROM pg_catalog.unnest(ARRAY['k1', 'k2']) AS k
                  WHERE NOT EXISTS (SELECT FROM workfence.items)",
            ),
            "enqueue",
        );
        ok(
            tx.batch_execute("UPDATE workfence.items SET payload = '{\"n\": 1}'"),
            "write",
        );
        // The control: this transaction's WAL is not flushed yet.
        let (before, flushed) = wal_positions(&mut tx);
        assert!(
            flushed < before,
            "the WAL was flushed before the claim ({flushed} >= {before}): the check sees nothing"
        );
        let claimed: i64 = ok(tx.query_one(claim, &[]), claim).get(0);
        assert!(claimed > 0, "{claim} claimed nothing");
        let (inserted, flushed) = wal_positions(&mut tx);
        let seq = epoch_seq_lsn(&mut tx);
        assert!(
            seq > before,
            "the claim wrote no sequence record ({seq} <= {before}): the check sees nothing"
        );
        assert!(
            flushed >= seq,
            "{claim} returned its epochs with the sequence's WAL unflushed ({flushed} < {seq})"
        );
        assert!(inserted >= flushed);
        ok(tx.rollback(), "ROLLBACK");
    }

    // A claim whose epochs an already-flushed sequence record covers (nextval
    // logs 32 values ahead) flushes nothing: its own row updates are left to
    // the asynchronous commit, as the session asked.
    let mut tx = ok(c.transaction(), "BEGIN");
    enqueue_and_claim(&mut tx, "k4");
    let (inserted, flushed) = wal_positions(&mut tx);
    let seq = epoch_seq_lsn(&mut tx);
    assert!(
        flushed >= seq,
        "the sequence's WAL is unflushed ({flushed} < {seq})"
    );
    assert!(
        flushed < inserted,
        "a claim covered by a durable sequence record flushed the WAL ({flushed} >= {inserted})"
    );
    ok(tx.rollback(), "ROLLBACK");

    // Under the default synchronous_commit the claim does not flush by
    // itself (the commit does): no extra flush on the common path.
    ok(c.batch_execute("SET synchronous_commit = on"), "on");
    let mut tx = ok(c.transaction(), "BEGIN");
    enqueue_and_claim(&mut tx, "k3");
    let (inserted, flushed) = wal_positions(&mut tx);
    assert!(
        flushed < inserted,
        "a claim under synchronous_commit = on flushed by itself"
    );
    ok(tx.rollback(), "ROLLBACK");
}
