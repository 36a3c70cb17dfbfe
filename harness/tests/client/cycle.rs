//! The fused calls `work_finish_and_claim` and `work_fail_and_claim`
//! (from 0.9.0, `src/verbs/cycle.rs`): a worker's cycle, settling the previous
//! item and claiming the next, in one statement and one commit.
//!
//! What a worker relies on:
//! - the previous item is finished (failed) exactly as `work_finish`
//!   (`work_fail`) would, and the next is claimed exactly as `work_claim`
//!   would: fresh epochs, claim order, the dead letter, the pause;
//! - `settled` tells it whether its previous token was honoured, also when
//!   nothing was claimed (one row of NULLs), and a stale token changes
//!   nothing for its item while the claim still runs;
//! - both halves commit together: until the call's transaction commits,
//!   another session sees the previous item still claimed and the next one
//!   still claimable-but-locked; an error in either half changes nothing;
//! - a finish repeated after a lost reply is settled again.

use crate::common;

use common::{ok, server_error, shared_cluster, snapshot};
use std::sync::Arc;

use serde_json::json;
use workfence_harness::calls::{self, Enqueue, Token};
use workfence_harness::Cluster;

/// A database of its own with `keys` enqueued in queue `q`, in claim order;
/// the shared cluster's handle (it stops when the last test drops it) and a
/// connection.
fn with_items(db: &str, keys: &[&str]) -> (Arc<Cluster>, postgres::Client) {
    let cluster = shared_cluster();
    ok(cluster.create_database(db), "create database");
    let mut c = ok(cluster.connect_to(db), "connect");
    for (n, key) in keys.iter().enumerate() {
        common::enqueue_new(
            &mut c,
            &Enqueue::new("q")
                .key(*key)
                .priority(i32::try_from(n).expect("few keys")),
        );
    }
    (cluster, c)
}

#[test]
fn finish_and_claim_finishes_the_previous_item_and_claims_the_next_with_a_newer_epoch() {
    let (_cluster, mut c) = with_items("cycle_basic", &["a", "b", "c"]);
    let first = common::claimed_one(&mut c, "q", "w", "1 minute");
    assert_eq!(first.key, "a");

    let cycle = ok(
        calls::finish_and_claim(
            &mut c,
            "q",
            &first.token("w"),
            "1 minute",
            Some(&json!({"sent": true})),
            None,
        ),
        "work_finish_and_claim",
    );
    assert!(cycle.settled, "the current token's finish is honoured");
    assert_eq!(cycle.claimed.len(), 1, "max_items defaults to 1");
    let second = &cycle.claimed[0];
    assert_eq!(second.key, "b", "claim order: priority, run_at, id");
    assert!(second.epoch > first.epoch, "a fresh, newer epoch");
    assert_eq!(second.attempt, 1);

    let a = ok(calls::item(&mut c, "q", "a"), "work_item a").expect("a exists");
    assert_eq!(a.state, "done");
    assert_eq!(a.result, Some(json!({"sent": true})));
    let b = ok(calls::item(&mut c, "q", "b"), "work_item b").expect("b exists");
    assert_eq!((b.state.as_str(), b.epoch), ("claimed", Some(second.epoch)));

    // The same finish again (a retry after a lost reply): settled again,
    // and the claim takes the next item.
    let again = ok(
        calls::finish_and_claim(&mut c, "q", &first.token("w"), "1 minute", None, Some(5)),
        "work_finish_and_claim repeated",
    );
    assert!(again.settled, "a repeated finish of the same token is true");
    let keys: Vec<&str> = again.claimed.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["c"], "only c is left to claim");
    let a = ok(calls::item(&mut c, "q", "a"), "work_item a").expect("a exists");
    assert_eq!(
        a.result,
        Some(json!({"sent": true})),
        "a repeated finish changes nothing"
    );
}

#[test]
fn a_cycle_that_claims_nothing_still_says_whether_the_previous_token_was_honoured() {
    let (_cluster, mut c) = with_items("cycle_empty", &["only"]);
    let only = common::claimed_one(&mut c, "q", "w", "1 minute");
    let rows = ok(
        c.query(
            "SELECT id, key, payload, epoch, attempt, lease_until, settled
               FROM workfence.work_finish_and_claim('q', 'w', '1 minute', $1, $2)",
            &[&only.id, &only.epoch],
        ),
        "work_finish_and_claim on an empty queue",
    );
    assert_eq!(rows.len(), 1, "exactly one row when nothing was claimed");
    assert_eq!(rows[0].get::<_, Option<i64>>(0), None);
    assert_eq!(rows[0].get::<_, Option<String>>(1), None);
    assert_eq!(rows[0].get::<_, Option<i64>>(3), None);
    assert!(rows[0].get::<_, bool>(6), "the finish was honoured");

    // A token that never was: refused, and still one row.
    let never = Token::new(only.id, "w", only.epoch + 1_000);
    let refused = ok(
        calls::finish_and_claim(&mut c, "q", &never, "1 minute", None, None),
        "work_finish_and_claim with a wrong epoch",
    );
    assert_eq!((refused.settled, refused.claimed.len()), (false, 0));
}

/// The seed bug through the fused call: a worker whose lease lapsed and was
/// claimed anew, under the same owner name, gets `settled` false, its item
/// stays with the new holder, and its own claim of the next item still runs.
#[test]
fn a_superseded_token_is_refused_and_changes_nothing_while_the_claim_still_runs() {
    let (_cluster, mut c) = with_items("cycle_stale", &["a", "b"]);
    let old = ok(
        calls::claim(&mut c, "q", "routines/laptop", "1 second", None, None),
        "claim a",
    )
    .pop()
    .expect("a is due");
    common::wait_out_lease(&mut c, old.id);
    let new = common::claimed_one(&mut c, "q", "routines/laptop", "1 minute");
    assert_eq!(
        (new.id, new.key.as_str()),
        (old.id, "a"),
        "a is claimed anew"
    );

    let cycle = ok(
        calls::finish_and_claim(
            &mut c,
            "q",
            &old.token("routines/laptop"),
            "1 minute",
            Some(&json!("late")),
            None,
        ),
        "the stale worker's fused call",
    );
    assert!(!cycle.settled, "the superseded token must be refused");
    assert_eq!(cycle.claimed.len(), 1);
    assert_eq!(cycle.claimed[0].key, "b", "its claim still runs");
    assert!(cycle.claimed[0].epoch > new.epoch);
    let a = ok(calls::item(&mut c, "q", "a"), "work_item a").expect("a exists");
    assert_eq!(
        (a.state.as_str(), a.epoch, a.result),
        ("claimed", Some(new.epoch), None),
        "the new holder keeps a, untouched"
    );
    let status = ok(
        calls::lease_status(&mut c, &new.token("routines/laptop")),
        "lease status",
    );
    assert_eq!(status, "current");
}

/// Both halves are one transaction: while the fused call's transaction is
/// open, another session still sees the previous item claimed under its
/// token and cannot claim the next (locked: SKIP LOCKED passes it by);
/// after a rollback, nothing happened; after the commit, both did.
#[test]
fn the_finish_and_the_claim_commit_together() {
    let (cluster, mut c) = with_items("cycle_atomic", &["a", "b"]);
    let mut other = ok(cluster.connect_to("cycle_atomic"), "connect other");
    let a = common::claimed_one(&mut c, "q", "w", "1 minute");

    for commit in [false, true] {
        let mut tx = ok(c.transaction(), "BEGIN");
        let cycle = ok(
            calls::finish_and_claim(&mut tx, "q", &a.token("w"), "1 minute", None, None),
            "work_finish_and_claim in a transaction",
        );
        assert!(cycle.settled);
        assert_eq!(cycle.claimed[0].key, "b");
        // Seen from outside before the commit: a still claimed, b not claimable.
        let seen = ok(calls::item(&mut other, "q", "a"), "work_item a").expect("a");
        assert_eq!(
            seen.state, "claimed",
            "the finish is not visible before commit"
        );
        assert_eq!(
            common::claim_count(&mut other, "q"),
            0,
            "b is locked by the uncommitted claim, and a is under a live lease"
        );
        if commit {
            ok(tx.commit(), "COMMIT");
        } else {
            ok(tx.rollback(), "ROLLBACK");
            let a_after = ok(calls::item(&mut other, "q", "a"), "work_item a").expect("a");
            let b_after = ok(calls::item(&mut other, "q", "b"), "work_item b").expect("b");
            assert_eq!(
                (a_after.state.as_str(), b_after.state.as_str()),
                ("claimed", "pending"),
                "a rollback undoes both halves"
            );
        }
    }
    let a_after = ok(calls::item(&mut other, "q", "a"), "work_item a").expect("a");
    let b_after = ok(calls::item(&mut other, "q", "b"), "work_item b").expect("b");
    assert_eq!(
        (a_after.state.as_str(), b_after.state.as_str()),
        ("done", "claimed")
    );
}

/// An error in the claim half (a bad lease, a paused-then-granted... here
/// the simplest: an invalid lease) raises and leaves the previous item as it
/// was: the worker still holds it and can repeat the call.
#[test]
fn an_error_in_either_half_changes_nothing() {
    let (_cluster, mut c) = with_items("cycle_error", &["a", "b"]);
    let a = common::claimed_one(&mut c, "q", "w", "1 minute");
    let before = snapshot(&mut c);
    server_error(
        calls::finish_and_claim(&mut c, "q", &a.token("w"), "0", None, None),
        "22023",
        "a fused call with a zero lease",
    );
    server_error(
        calls::fail_and_claim(
            &mut c,
            "q",
            &a.token("w"),
            "1 minute",
            "boom",
            None,
            Some(0),
        ),
        "22023",
        "a fused call with max_items 0",
    );
    let err = server_error(
        c.query(
            "SELECT * FROM workfence.work_finish_and_claim('q', 'w', '1 minute', NULL, $1)",
            &[&a.epoch],
        ),
        "22004",
        "a NULL last_id",
    );
    assert!(err.message().contains("last_id"), "{}", err.message());
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    let status = ok(calls::lease_status(&mut c, &a.token("w")), "lease status");
    assert_eq!(status, "current", "the worker still holds a");
}

#[test]
fn fail_and_claim_records_the_failure_and_claims_the_next() {
    let cluster = shared_cluster();
    ok(cluster.create_database("cycle_fail"), "create database");
    let mut c = ok(cluster.connect_to("cycle_fail"), "connect");
    common::enqueue_new(&mut c, &Enqueue::new("q").key("a").max_attempts(2));
    common::enqueue_new(&mut c, &Enqueue::new("q").key("b").priority(1));
    common::enqueue_new(&mut c, &Enqueue::new("q").key("c").priority(2));
    let a = common::claimed_one(&mut c, "q", "w", "1 minute");
    assert_eq!(a.key, "a");

    // A retry in an hour: a is scheduled again, b is claimed.
    let cycle = ok(
        calls::fail_and_claim(
            &mut c,
            "q",
            &a.token("w"),
            "1 minute",
            "smtp 451",
            Some("1 hour"),
            None,
        ),
        "work_fail_and_claim",
    );
    assert!(cycle.settled);
    assert_eq!(cycle.claimed[0].key, "b");
    let a_item = ok(calls::item(&mut c, "q", "a"), "work_item a").expect("a");
    assert_eq!((a_item.state.as_str(), a_item.attempts), ("pending", 1));
    assert_eq!(a_item.errors[0]["error"], json!("smtp 451"));
    assert_eq!(a_item.errors[0]["epoch"], json!(a.epoch));

    // Due again at once (retry_in 0) and first in claim order: the same
    // call claims it back, with a newer epoch; its last attempt.
    let b = &cycle.claimed[0];
    let back = ok(
        calls::fail_and_claim(
            &mut c,
            "q",
            &b.token("w"),
            "1 minute",
            "boom",
            Some("0"),
            None,
        ),
        "work_fail_and_claim, retry at once",
    );
    assert!(back.settled);
    assert_eq!(
        back.claimed[0].key, "b",
        "b is due again and first in order"
    );
    assert!(back.claimed[0].epoch > b.epoch);
    assert_eq!(back.claimed[0].attempt, 2);

    // The failed attempt's token is refused from now on, by either call.
    let stale = ok(
        calls::fail_and_claim(&mut c, "q", &b.token("w"), "1 minute", "late", None, None),
        "the stale token's fail",
    );
    assert!(
        !stale.settled,
        "a superseded token's failure is not recorded"
    );
    assert_eq!(stale.claimed[0].key, "c");
}
