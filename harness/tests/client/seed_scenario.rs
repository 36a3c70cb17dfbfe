//! The scenario from the bug report, from two real client processes.
//!
//! Workers A and B are two `workfence-worker` processes, each with its own
//! connection, both claiming as `routines/laptop`, against a throwaway cluster;
//! each test has a database of its own. Waiting for a lease to lapse happens
//! on the server's clock (`pg_sleep_until(lease_until)`), never with a client
//! sleep.
//!
//! Each test runs twice: on one database, and through a PL/Proxy router in
//! front of four shards (docs/scaling.md), the workers connected to the
//! router.
//!
//! Needs the extension installed into PostgreSQL 15: `scripts/test.sh` does
//! that and then runs these tests (`cargo test -p workfence-harness --release --test client -- seed_scenario::`).

use crate::common;

use std::sync::Arc;

use common::ok;

use serde_json::json;
use workfence_harness::scenario::{self, KEY, LONG_LEASE, OWNER, QUEUE, SHORT_LEASE};
use workfence_harness::{Claim, Cluster, Worker};

const WORKER_EXE: &str = env!("CARGO_BIN_EXE_workfence-worker");

/// One cluster for the tests that run at the same time; it stops and is
/// removed when the last of them drops its handle.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

/// A fresh database with the extension, and workers A and B (same owner) on it.
fn setup(cluster: &Cluster, database: &str) -> (postgres::Client, Worker, Worker) {
    ok(
        cluster.create_database(database),
        "creating the test database",
    );
    workers(cluster, database)
}

/// A PL/Proxy router in front of four shards (docs/scaling.md), and workers
/// A and B (same owner) connected to the router: every call they make is
/// routed to a shard. The scheduler is connected to the router too; what it
/// reads of `workfence.items` is every shard's table (the harness's test
/// view).
fn setup_router(cluster: &Cluster, database: &str) -> (postgres::Client, Worker, Worker) {
    let router = common::router(cluster, database);
    workers(cluster, &router.database)
}

/// A scheduler connection and workers A and B, all to `database`.
fn workers(cluster: &Cluster, database: &str) -> (postgres::Client, Worker, Worker) {
    let scheduler = ok(cluster.connect_to(database), "connecting");
    let conninfo = cluster.connection_string(database);
    let a = ok(
        Worker::spawn(WORKER_EXE, "A", &conninfo, OWNER),
        "starting worker A",
    );
    let b = ok(
        Worker::spawn(WORKER_EXE, "B", &conninfo, OWNER),
        "starting worker B",
    );
    // Two processes, two connections: nothing is shared but the owner string.
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.backend_pid(), b.backend_pid());
    (scheduler, a, b)
}

fn claimed(claim: Option<Claim>, who: &str) -> Claim {
    claim.unwrap_or_else(|| panic!("{who}'s claim_key returned no row"))
}

#[test]
fn stale_worker_is_fenced_after_its_lease_lapses() {
    let cluster = cluster();
    stale_worker_is_fenced(setup(&cluster, "seed_lapsed_lease"));
}

/// The scenario through a router: A's claim, B's re-claim and A's refused
/// calls are each routed to the item's shard.
#[test]
fn stale_worker_is_fenced_through_the_router() {
    let cluster = cluster();
    stale_worker_is_fenced(setup_router(&cluster, "seed_lapsed_router"));
}

fn stale_worker_is_fenced((mut scheduler, mut a, mut b): (postgres::Client, Worker, Worker)) {
    let payload = json!({"routine": "daily-report", "scheduled_for": "2026-11-30T09:00Z"});
    let item = ok(
        scenario::enqueue(&mut scheduler, QUEUE, KEY, &payload),
        "enqueue",
    );
    assert!(item.inserted);

    // A claims with a short lease; the lease lapses by the server's clock.
    let a_claim = claimed(ok(a.claim_key(QUEUE, KEY, SHORT_LEASE), "A claim"), "A");
    assert_eq!(a_claim.id, item.id);
    assert_eq!(a_claim.payload, payload);
    ok(
        scenario::wait_for_lease_lapse(&mut scheduler, a_claim.id),
        "waiting for A's lease to lapse",
    );

    // B, same owner name, claims the lapsed item with a newer epoch.
    let b_claim = claimed(ok(b.claim_key(QUEUE, KEY, LONG_LEASE), "B claim"), "B");
    assert_eq!(b_claim.id, a_claim.id);
    assert!(
        b_claim.epoch > a_claim.epoch,
        "B's epoch {} must exceed A's {}",
        b_claim.epoch,
        a_claim.epoch
    );

    // A carries on with its stale token: refused, and nothing changes.
    assert!(!ok(
        a.renew(a_claim.id, a_claim.epoch, LONG_LEASE),
        "A renew"
    ));
    assert!(!ok(
        a.finish(a_claim.id, a_claim.epoch, Some(json!({"sent_by": "A"}))),
        "A finish"
    ));
    let row = ok(scenario::item(&mut scheduler, item.id), "reading the item");
    assert_eq!(row.state, "claimed");
    assert_eq!(row.epoch, Some(b_claim.epoch));
    assert_eq!(row.result, None);

    // B finishes under the current lease.
    assert!(ok(
        b.finish(b_claim.id, b_claim.epoch, Some(json!({"sent_by": "B"}))),
        "B finish"
    ));

    // Dispatched exactly once, by B's epoch.
    assert_eq!(
        ok(scenario::done_count(&mut scheduler, QUEUE, KEY), "count"),
        1
    );
    let row = ok(scenario::item(&mut scheduler, item.id), "reading the item");
    assert_eq!(row.state, "done");
    assert_eq!(row.owner.as_deref(), Some(OWNER));
    assert_eq!(row.epoch, Some(b_claim.epoch));
    assert_eq!(row.result, Some(json!({"sent_by": "B"})));
    assert!(row.finished_at.is_some());

    // Neither token is current any more: A's was superseded, B's finished.
    for (worker, claim) in [(&mut a, &a_claim), (&mut b, &b_claim)] {
        match worker.assert(claim.id, claim.epoch) {
            Err(err) => assert_eq!(
                err.sqlstate(),
                Some("55000"),
                "work_assert of {}'s token: {err}",
                worker.name()
            ),
            Ok(()) => panic!(
                "work_assert of {}'s token (epoch {}) was not refused",
                worker.name(),
                claim.epoch
            ),
        }
    }

    for w in [a, b] {
        assert!(ok(w.quit(), "quit").success());
    }
}

#[test]
fn live_lease_blocks_a_second_claim_with_the_same_owner() {
    let cluster = cluster();
    live_lease_blocks(setup(&cluster, "seed_live_lease"));
}

#[test]
fn live_lease_blocks_a_second_claim_through_the_router() {
    let cluster = cluster();
    live_lease_blocks(setup_router(&cluster, "seed_live_router"));
}

fn live_lease_blocks((mut scheduler, mut a, mut b): (postgres::Client, Worker, Worker)) {
    let item = ok(
        scenario::enqueue(&mut scheduler, QUEUE, KEY, &json!({})),
        "enqueue",
    );

    let a_claim = claimed(ok(a.claim_key(QUEUE, KEY, LONG_LEASE), "A claim"), "A");
    assert_eq!(a_claim.id, item.id);

    // Same owner string, live lease: B gets nothing, by key or from the queue.
    assert_eq!(ok(b.claim_key(QUEUE, KEY, LONG_LEASE), "B claim_key"), None);
    assert_eq!(ok(b.claim(QUEUE, 10, LONG_LEASE), "B claim"), Vec::new());

    // B's attempts changed nothing: A still holds the item and can go on.
    let row = ok(scenario::item(&mut scheduler, item.id), "reading the item");
    assert_eq!(row.state, "claimed");
    assert_eq!(row.epoch, Some(a_claim.epoch));
    ok(a.assert(a_claim.id, a_claim.epoch), "A assert");
    assert!(ok(
        a.renew(a_claim.id, a_claim.epoch, LONG_LEASE),
        "A renew"
    ));
    assert!(ok(a.finish(a_claim.id, a_claim.epoch, None), "A finish"));
    assert_eq!(
        ok(scenario::done_count(&mut scheduler, QUEUE, KEY), "count"),
        1
    );

    for w in [a, b] {
        assert!(ok(w.quit(), "quit").success());
    }
}
