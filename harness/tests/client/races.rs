//! Races between real client connections: issue 3, scenarios 1 to 8.
//!
//! Every test opens several connections (each its own backend) to a database
//! of its own on one throwaway cluster shared by the test binary, and orders
//! them explicitly: a barrier releases racing threads together; a transaction
//! held open keeps a row lock while another connection acts; a connection
//! that must wait on that lock is seen waiting in `pg_stat_activity`
//! (`wait_event_type = 'Lock'`, blocked by the holder's pid per
//! `pg_blocking_pids`) before the holder commits; a lease is waited out on the
//! server's clock (`pg_sleep_until(lease_until)`, then a check that
//! `clock_timestamp()` has passed it). No client sleep orders anything.
//!
//! What the tests prove, one scenario each (docs/contract.md, promises 1 to 3,
//! and `work_cancel` / `work_assert`):
//! 1. three schedulers racing for one firing: exactly one claim wins, and
//!    again exactly one when its lease lapses; the first token is then dead;
//! 2. a worker restarted under the same owner name cannot take its own item
//!    while the old lease runs, can after it lapses, and the old token is dead;
//! 3. a superseded `work_fail` / `work_release` changes nothing at all;
//! 4. `work_finish` of an old token against a re-claim of its lapsed lease, in
//!    both orders: exactly one wins;
//! 5. `work_cancel` of a claimed item fences its holder for good;
//! 6. a job renewing every third of its lease is never re-claimed, however
//!    long it runs, while other workers of the same name poll the queue;
//! 7. a renew at the edge of expiry against a claim: one wins, never both;
//! 8. `work_assert` in the worker's own transaction: a stale worker's writes
//!    never commit; a current worker's writes and finish commit together.
//!
//! Through a PL/Proxy router in front of four shards (docs/scaling.md):
//! scenario 1; scenario 4 with both calls held at the shard's table lock
//! until they race; and batch claims from queues on four shards at once.
//!
//! Needs the extension installed into PostgreSQL 15 (`scripts/test.sh`).

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::{enqueue_new, ok, server_error};
use postgres::{Client, GenericClient};
use serde_json::{json, Value};
use workfence_harness::calls::{self, Enqueue, Token};
use workfence_harness::router::Router;
use workfence_harness::scenario::wait_for_lease_lapse;
use workfence_harness::{Claim, Cluster};

/// The queue every test uses (each test has its own database).
const QUEUE: &str = "jobs";

/// A lease that is meant to lapse during the test.
const SHORT: &str = "300 milliseconds";

/// A lease that outlasts any test. Races for a lease that must stay live
/// run under it, so that only a broken promise, never a stalled racer (a
/// statement runs at most `statement_timeout`, 30 s), can make a second
/// winner; where the test then needs the lease to lapse, the holder shortens
/// it to [`SHORT`] with a renew once the race is over.
const LONG: &str = "5 minutes";

/// One cluster for the tests that run at the same time; it stops and is
/// removed when the last of them drops its handle.
fn cluster() -> Arc<Cluster> {
    common::shared_cluster()
}

/// One test's database on the shared cluster, or its router.
struct Db {
    cluster: Arc<Cluster>,
    name: String,
    /// With a router: the router (`name` is its database).
    router: Option<Router>,
}

impl Db {
    /// Creates database `name` with the extension.
    fn new(name: &str) -> Db {
        let cluster = cluster();
        ok(cluster.create_database(name), "creating the test database");
        Db {
            cluster,
            name: name.to_owned(),
            router: None,
        }
    }

    /// Creates a PL/Proxy router `name` in front of four shards
    /// (docs/scaling.md); connections go to the router, and its test view
    /// `workfence.items` shows every shard's items.
    fn router(name: &str) -> Db {
        let cluster = cluster();
        let router = common::router(&cluster, name);
        Db {
            cluster,
            name: router.database.clone(),
            router: Some(router),
        }
    }

    /// The DETAIL of 55000 for a superseded token: the shard's, or through a
    /// router, the router's work_assert's (a check on the shard).
    fn superseded_detail(&self) -> &'static str {
        if self.router.is_some() {
            "Checked through a pg_workfence router: work_lease_status on the item's shard says superseded."
        } else {
            SUPERSEDED
        }
    }

    /// A new connection (a backend of its own). A statement that hangs, say a
    /// claim that waited on a lock instead of skipping it, fails the test
    /// after 30 s instead of hanging it.
    fn connect(&self) -> Client {
        let mut client = ok(self.cluster.connect_to(&self.name), "connecting");
        client
            .batch_execute("SET statement_timeout = '30s'")
            .expect("setting statement_timeout");
        client
    }
}

/// The result `work_finish` stores in these tests: who finished.
fn by(who: &str) -> Value {
    json!({ "by": who })
}

/// Asserts that `work_assert` of `token` raises 55000 "lease lost" with `detail`.
fn assert_lease_lost(token: &Token, c: &mut impl GenericClient, detail: &str) {
    let err = server_error(
        calls::assert(c, token),
        "55000",
        "work_assert of a dead token",
    );
    assert_eq!(err.detail(), Some(detail), "work_assert: {err}");
}

/// DETAIL of 55000 for a token whose item was claimed again.
const SUPERSEDED: &str = "The item was claimed again since: a newer epoch holds it.";

/// Every column of one item; timestamps as the server renders them.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    id: i64,
    queue: String,
    key: String,
    payload: Value,
    priority: i32,
    run_at: String,
    state: String,
    attempts: i32,
    max_attempts: i32,
    owner: Option<String>,
    epoch: Option<i64>,
    lease_until: Option<String>,
    last_error: Option<String>,
    result: Option<Value>,
    created_at: String,
    finished_at: Option<String>,
}

/// Reads item `id`, all of it.
fn item(c: &mut impl GenericClient, id: i64) -> Item {
    let row = c
        .query_one(
            "SELECT id, queue, key, payload, priority, run_at::text, state::text, attempts, \
                    max_attempts, owner, epoch, lease_until::text, last_error, result, \
                    created_at::text, finished_at::text \
               FROM workfence.items WHERE id = $1",
            &[&id],
        )
        .expect("reading the item");
    Item {
        id: row.get(0),
        queue: row.get(1),
        key: row.get(2),
        payload: row.get(3),
        priority: row.get(4),
        run_at: row.get(5),
        state: row.get(6),
        attempts: row.get(7),
        max_attempts: row.get(8),
        owner: row.get(9),
        epoch: row.get(10),
        lease_until: row.get(11),
        last_error: row.get(12),
        result: row.get(13),
        created_at: row.get(14),
        finished_at: row.get(15),
    }
}

/// Waits on the server until the lease of claimed item `id` has lapsed by the
/// server's clock.
fn wait_for_lapse(c: &mut Client, id: i64) {
    ok(
        wait_for_lease_lapse(c, id),
        "waiting for the lease to lapse",
    );
}

/// Waits on the server until `clock_timestamp()` is past `moment` (a
/// `timestamptz` as text), for an item that no longer has a lease to read.
fn wait_past(c: &mut Client, moment: &str) {
    for _ in 0..100 {
        let passed: bool = c
            .query_one(
                "SELECT pg_catalog.clock_timestamp() > $1::text::timestamptz \
                   FROM pg_catalog.pg_sleep_until($1::text::timestamptz)",
                &[&moment],
            )
            .expect("pg_sleep_until")
            .get(0);
        if passed {
            return;
        }
    }
    panic!("the server's clock did not pass {moment}");
}

/// Runs `work_claim_key(QUEUE, key, owner, lease)` on every client at once (a barrier
/// releases the threads together); the results in client order.
fn race_claim_key(
    clients: &mut [Client],
    key: &str,
    owner: &str,
    lease: &str,
) -> Vec<Option<Claim>> {
    let barrier = Barrier::new(clients.len());
    thread::scope(|s| {
        let racers: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    calls::claim_key(c, QUEUE, key, owner, lease).expect("work_claim_key")
                })
            })
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().expect("a claiming thread panicked"))
            .collect()
    })
}

/// The one index whose claim succeeded; panics unless exactly one did.
fn sole_winner(results: &[Option<Claim>]) -> usize {
    let winners: Vec<usize> = (0..results.len())
        .filter(|&i| results[i].is_some())
        .collect();
    assert_eq!(winners.len(), 1, "exactly one claim must win: {results:?}");
    winners[0]
}

/// Scenario 1. Three schedulers, one owner name, one firing key.
#[test]
fn three_schedulers_race_for_one_firing() {
    three_schedulers(Db::new("race_three_schedulers"));
}

/// Scenario 1 through a router: the three claims race on the key's shard.
#[test]
fn three_schedulers_race_for_one_firing_through_the_router() {
    three_schedulers(Db::router("race_three_router"));
}

fn three_schedulers(db: Db) {
    const KEY: &str = "daily-report@09:00";
    const OWNER: &str = "scheduler";
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let mut clients: Vec<Client> = (0..3).map(|_| db.connect()).collect();

    // Round 1: exactly one of the three gets the firing. The lease is long,
    // so a loser that the machine stalled still finds it live.
    let round1 = race_claim_key(&mut clients, KEY, OWNER, LONG);
    let w1 = sole_winner(&round1);
    let first = round1[w1].clone().expect("the first winner's claim");
    assert_eq!((first.id, first.attempt), (id, 1));
    let first = first.token(OWNER);

    // The race over, the winner shortens its lease (a renew); it lapses on
    // the server's clock, and the two others race for it, again under a long
    // lease.
    let mut first_client = clients.remove(w1);
    assert!(
        calls::renew(&mut first_client, &first, SHORT).expect("work_renew"),
        "the winner's renew"
    );
    wait_for_lapse(&mut observer, id);
    let round2 = race_claim_key(&mut clients, KEY, OWNER, LONG);
    let w2 = sole_winner(&round2);
    let second = round2[w2].clone().expect("the second winner's claim");
    assert_eq!((second.id, second.attempt), (id, 2));
    let second = second.token(OWNER);
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");

    // The first winner's token is dead: refused, and nothing changes.
    let before = item(&mut observer, id);
    assert_eq!(before.state, "claimed");
    assert_eq!(before.epoch, Some(second.epoch));
    assert!(
        !calls::renew(&mut first_client, &first, LONG).expect("work_renew"),
        "stale renew"
    );
    assert!(
        !calls::finish(&mut first_client, &first, Some(&by("first"))).expect("work_finish"),
        "stale finish"
    );
    assert!(
        !calls::fail(&mut first_client, &first, "stale", None).expect("work_fail"),
        "stale fail"
    );
    assert!(
        !calls::release(&mut first_client, &first, Some("0")).expect("work_release"),
        "stale release"
    );
    assert_eq!(item(&mut observer, id), before);
    assert_lease_lost(&first, &mut first_client, db.superseded_detail());

    // The second winner finishes; the firing was dispatched once, by it.
    assert!(calls::finish(&mut clients[w2], &second, Some(&by("second"))).expect("work_finish"));
    let after = item(&mut observer, id);
    assert_eq!(after.state, "done");
    assert_eq!(after.epoch, Some(second.epoch));
    assert_eq!(after.result, Some(json!({"by": "second"})));
}

/// Scenario 2, shared by both variants: a worker restarts under the same
/// owner name while its old lease runs, its old connection kept open or not.
fn restart_with_the_same_owner(database: &'static str, old_stays_open: bool) {
    const KEY: &str = "nightly-backup";
    const OWNER: &str = "backup/host-1";
    let db = Db::new(database);
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));

    // The first run's lease is long, so the refused claims below find it
    // live however slowly they run.
    let mut old = db.connect();
    let held = calls::claim_key(&mut old, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("first run's claim returned no row")
        .token(OWNER);
    let mut old = old_stays_open.then_some(old);

    // The restarted worker: a new connection, the same owner name.
    let mut new = db.connect();
    assert_eq!(
        calls::claim_key(&mut new, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut new, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    let still_live: bool = observer
        .query_one(
            "SELECT lease_until > pg_catalog.clock_timestamp() FROM workfence.items WHERE id = $1",
            &[&id],
        )
        .expect("reading the lease")
        .get(0);
    assert!(
        still_live,
        "the lease lapsed before the refused claims were checked"
    );
    let row = item(&mut observer, id);
    assert_eq!(
        (row.state.as_str(), row.epoch),
        ("claimed", Some(held.epoch))
    );

    // The test shortens the old lease with the old token (as the first run's
    // last heartbeat could have; from the observer when its connection is
    // gone). Once it has lapsed on the server, the new run takes the item.
    let shortener = match old.as_mut() {
        Some(old) => old,
        None => &mut observer,
    };
    assert!(
        calls::renew(shortener, &held, SHORT).expect("work_renew"),
        "shortening the old lease"
    );
    wait_for_lapse(&mut new, id);
    let got = calls::claim(&mut new, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim");
    assert_eq!(got.len(), 1, "{got:?}");
    let fresh = got.into_iter().next().expect("the restarted run's claim");
    assert_eq!((fresh.id, fresh.attempt), (id, 2));
    assert!(fresh.epoch > held.epoch);
    let fresh = fresh.token(OWNER);

    // The old token is dead, whether its connection lives on or the
    // restarted worker replays it from its own.
    let before = item(&mut observer, id);
    let presenter = match old.as_mut() {
        Some(old) => old,
        None => &mut new,
    };
    assert!(
        !calls::renew(presenter, &held, LONG).expect("work_renew"),
        "old renew"
    );
    assert!(
        !calls::finish(presenter, &held, Some(&by("old run"))).expect("work_finish"),
        "old finish"
    );
    assert_lease_lost(&held, presenter, SUPERSEDED);
    assert_eq!(item(&mut observer, id), before);

    assert!(calls::finish(&mut new, &fresh, Some(&by("restarted run"))).expect("work_finish"));
    assert_eq!(item(&mut observer, id).state, "done");
}

/// Scenario 2, the old connection still open.
#[test]
fn restarted_worker_waits_out_its_old_lease_old_connection_open() {
    restart_with_the_same_owner("race_restart_open", true);
}

/// Scenario 2, the old connection closed.
#[test]
fn restarted_worker_waits_out_its_old_lease_old_connection_closed() {
    restart_with_the_same_owner("race_restart_closed", false);
}

/// Scenario 3. A superseded holder's fail and release change nothing.
#[test]
fn superseded_fail_and_release_change_nothing() {
    const KEY: &str = "resize-image-42";
    const OWNER: &str = "thumbnailer";
    let db = Db::new("race_superseded_fail_release");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());

    let stale = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);
    let current = calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("B's claim returned no row")
        .token(OWNER);

    let before = item(&mut observer, id);
    assert_eq!(before.state, "claimed");
    assert_eq!(before.attempts, 2);
    assert_eq!(before.epoch, Some(current.epoch));
    assert_eq!(before.last_error, None);

    assert!(
        !calls::fail(&mut a, &stale, "A gave up", Some("0")).expect("work_fail"),
        "stale fail, retry now"
    );
    assert!(
        !calls::fail(&mut a, &stale, "A gave up", None).expect("work_fail"),
        "stale fail, backoff"
    );
    assert!(
        !calls::release(&mut a, &stale, Some("0")).expect("work_release"),
        "stale release"
    );
    assert!(
        !calls::release(&mut a, &stale, Some("1 hour")).expect("work_release"),
        "stale release with delay"
    );
    assert_eq!(item(&mut observer, id), before);

    // B's lease is untouched and still works.
    assert!(calls::renew(&mut b, &current, LONG).expect("work_renew"));
    assert!(calls::finish(&mut b, &current, Some(&by("B"))).expect("work_finish"));
    let after = item(&mut observer, id);
    assert_eq!((after.state.as_str(), after.last_error), ("done", None));
}

/// Scenario 4a. The old token's finish holds the row lock; a re-claim of the
/// lapsed lease at that moment skips the item; the finish stands alone.
#[test]
fn finish_of_a_lapsed_lease_locks_out_a_concurrent_reclaim() {
    const KEY: &str = "invoice-7";
    const OWNER: &str = "billing";
    let db = Db::new("race_finish_first");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());

    let old = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);

    let mut tx = a.transaction().expect("BEGIN");
    assert!(
        calls::finish(&mut tx, &old, Some(&by("A"))).expect("work_finish"),
        "the lapsed but newest token finishes"
    );
    // The finish is not committed. B's claims skip the locked row at once.
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    tx.commit().expect("COMMIT");

    // Committed: done, and still not claimable.
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    let done = item(&mut observer, id);
    assert_eq!(done.state, "done");
    assert_eq!((done.epoch, done.attempts), (Some(old.epoch), 1));
    assert_eq!(done.result, Some(json!({"by": "A"})));
    assert!(done.finished_at.is_some());

    // A retried finish with the same token: true, and nothing changes.
    assert!(calls::finish(&mut a, &old, Some(&by("A, retried"))).expect("work_finish"));
    assert_eq!(item(&mut observer, id), done);
}

/// Scenario 4b. A re-claim of the lapsed lease is uncommitted; the old
/// token's finish waits on its row lock; the claim commits and the finish is
/// refused.
#[test]
fn reclaim_of_a_lapsed_lease_refuses_the_waiting_finish() {
    const KEY: &str = "invoice-8";
    const OWNER: &str = "billing";
    let db = Db::new("race_claim_first");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());
    let (a_pid, b_pid) = (common::backend_pid(&mut a), common::backend_pid(&mut b));

    let old = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);

    let mut tx = b.transaction().expect("BEGIN");
    let new = calls::claim_key(&mut tx, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("B's claim returned no row")
        .token(OWNER);
    assert!(new.epoch > old.epoch);
    let finished = thread::scope(|s| {
        let finisher =
            s.spawn(|| calls::finish(&mut a, &old, Some(&by("A"))).expect("work_finish"));
        common::wait_until_blocked(&mut observer, a_pid, b_pid);
        tx.commit().expect("COMMIT of B's claim");
        finisher.join().expect("A's thread panicked")
    });
    assert!(!finished, "A's finish must lose to B's committed claim");

    let row = item(&mut observer, id);
    assert_eq!(row.state, "claimed");
    assert_eq!((row.epoch, row.attempts), (Some(new.epoch), 2));
    assert_eq!((row.result, row.finished_at), (None, None));

    assert!(calls::finish(&mut b, &new, Some(&by("B"))).expect("work_finish"));
    let done = item(&mut observer, id);
    assert_eq!(done.state, "done");
    assert_eq!(done.epoch, Some(new.epoch));
    assert_eq!(done.result, Some(json!({"by": "B"})));
    assert!(
        !calls::finish(&mut a, &old, Some(&by("A, retried"))).expect("work_finish"),
        "A's token is still dead"
    );
}

/// Scenario 4c. The re-claim that the old token's finish waited for rolls
/// back: the old token is still the newest (time only opens the door), and
/// its finish goes through.
#[test]
fn rolled_back_reclaim_lets_the_waiting_finish_through() {
    const KEY: &str = "invoice-9";
    const OWNER: &str = "billing";
    let db = Db::new("race_claim_rolled_back");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());
    let (a_pid, b_pid) = (common::backend_pid(&mut a), common::backend_pid(&mut b));

    let old = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);

    let mut tx = b.transaction().expect("BEGIN");
    calls::claim_key(&mut tx, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("B's claim returned no row")
        .token(OWNER);
    let finished = thread::scope(|s| {
        let finisher =
            s.spawn(|| calls::finish(&mut a, &old, Some(&by("A"))).expect("work_finish"));
        common::wait_until_blocked(&mut observer, a_pid, b_pid);
        tx.rollback().expect("ROLLBACK of B's claim");
        finisher.join().expect("A's thread panicked")
    });
    assert!(
        finished,
        "with B's claim rolled back, A's token is the newest"
    );

    let done = item(&mut observer, id);
    assert_eq!(done.state, "done");
    assert_eq!((done.epoch, done.attempts), (Some(old.epoch), 1));
    assert_eq!(done.result, Some(json!({"by": "A"})));
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
}

/// Scenario 5. Cancel while claimed: the holder is refused for good and the
/// item is never claimed again, not even after its lease would have lapsed.
#[test]
fn cancel_while_claimed_fences_the_holder_for_good() {
    const KEY: &str = "export-2026-11";
    const OWNER: &str = "exporter";
    let db = Db::new("race_cancel_while_claimed");
    let mut scheduler = db.connect();
    let id = enqueue_new(&mut scheduler, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());

    let a_claim = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row");
    let held = a_claim.token(OWNER);
    let claimed = item(&mut scheduler, id);
    let cancelled = calls::cancel(&mut scheduler, QUEUE, KEY).expect("work_cancel");
    assert!(cancelled, "cancel of a claimed item");

    let row = item(&mut scheduler, id);
    assert_eq!(row.state, "cancelled");
    assert_eq!((&row.owner, row.epoch), (&claimed.owner, claimed.epoch));
    assert_eq!(row.attempts, claimed.attempts);
    assert!(row.finished_at.is_some());
    assert_eq!(row.result, None);

    // The holder is refused, and nothing changes.
    assert!(
        !calls::renew(&mut a, &held, LONG).expect("work_renew"),
        "renew after cancel"
    );
    assert!(
        !calls::finish(&mut a, &held, Some(&by("A"))).expect("work_finish"),
        "finish after cancel"
    );
    assert!(
        !calls::release(&mut a, &held, Some("0")).expect("work_release"),
        "release after cancel"
    );
    assert!(
        !calls::fail(&mut a, &held, "A failed", Some("0")).expect("work_fail"),
        "fail after cancel"
    );
    assert_lease_lost(&held, &mut a, "The item was cancelled.");
    let again = calls::cancel(&mut scheduler, QUEUE, KEY).expect("work_cancel");
    assert!(!again, "a second cancel finds nothing to cancel");
    assert_eq!(item(&mut scheduler, id), row);

    // Never claimed again: not now, and not after the lease would have lapsed.
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    wait_past(&mut scheduler, &a_claim.lease_until);
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    assert!(
        !calls::renew(&mut a, &held, LONG).expect("work_renew"),
        "renew after the lease lapsed"
    );
    assert_eq!(item(&mut scheduler, id), row);
}

/// Scenario 5, raced against `work_assert` both ways: a cancel waits for a
/// worker committing under `work_assert` and then finds the item done; a
/// worker's `work_assert` waits for an uncommitted cancel and then raises.
#[test]
fn cancel_and_work_assert_exclude_each_other() {
    const OWNER: &str = "exporter";
    let db = Db::new("race_cancel_vs_assert");
    let mut observer = db.connect();
    let mut scheduler = db.connect();
    let mut worker = db.connect();
    let (scheduler_pid, worker_pid) = (
        common::backend_pid(&mut scheduler),
        common::backend_pid(&mut worker),
    );

    // The worker commits first: the cancel waits, then finds the item done.
    let first = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key("first"));
    let held = calls::claim_key(&mut worker, QUEUE, "first", OWNER, LONG)
        .expect("work_claim_key")
        .expect("worker's claim returned no row")
        .token(OWNER);
    let mut tx = worker.transaction().expect("BEGIN");
    calls::assert(&mut tx, &held).expect("work_assert of the current token");
    let cancelled = thread::scope(|s| {
        let canceller =
            s.spawn(|| calls::cancel(&mut scheduler, QUEUE, "first").expect("work_cancel"));
        common::wait_until_blocked(&mut observer, scheduler_pid, worker_pid);
        assert!(calls::finish(&mut tx, &held, Some(&by("worker"))).expect("work_finish"));
        tx.commit().expect("COMMIT of the worker's finish");
        canceller.join().expect("the scheduler's thread panicked")
    });
    assert!(!cancelled, "the cancel came after the finish committed");
    let row = item(&mut observer, first);
    assert_eq!((row.state.as_str(), row.epoch), ("done", Some(held.epoch)));

    // The cancel commits first: the worker's work_assert (in its own
    // transaction, as work_assert must be) waits, then raises.
    let second = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key("second"));
    let held = calls::claim_key(&mut worker, QUEUE, "second", OWNER, LONG)
        .expect("work_claim_key")
        .expect("worker's claim returned no row")
        .token(OWNER);
    let mut cancel_tx = scheduler.transaction().expect("BEGIN");
    let cancelled = calls::cancel(&mut cancel_tx, QUEUE, "second").expect("work_cancel");
    assert!(cancelled);
    let mut worker_tx = worker.transaction().expect("BEGIN");
    let asserted = thread::scope(|s| {
        let asserter = s.spawn(|| calls::assert(&mut worker_tx, &held));
        common::wait_until_blocked(&mut observer, worker_pid, scheduler_pid);
        cancel_tx.commit().expect("COMMIT of the cancel");
        asserter.join().expect("the worker's thread panicked")
    });
    let err = server_error(asserted, "55000", "work_assert after a cancel");
    assert_eq!(err.detail(), Some("The item was cancelled."));
    worker_tx.rollback().expect("ROLLBACK");
    let row = item(&mut observer, second);
    assert_eq!(
        (row.state.as_str(), row.epoch),
        ("cancelled", Some(held.epoch))
    );
}

/// Sets the flag when dropped, so the other threads stop even if the one
/// holding it panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Scenario 6. A long job renews every third of its lease for about five
/// seconds while three workers with the same owner name claim from its queue
/// as fast as they can: the job's item is never handed to them.
#[test]
fn a_job_that_keeps_renewing_is_never_reclaimed() {
    const OWNER: &str = "fleet";
    const TARGET: &str = "long-job";
    const LEASE: &str = "900 milliseconds";
    // Renew when a third of the lease has passed, i.e. 600 ms before it ends.
    const RENEW_AT_LEFT: &str = "600 milliseconds";
    const RENEWS: usize = 16;
    const CLAIMERS: usize = 3;
    let db = Db::new("race_long_job");
    let mut observer = db.connect();
    // Priority -1: if it were ever claimable, it would be the first handed out.
    let target = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(TARGET).priority(-1));
    for n in 0..12 {
        enqueue_new(
            &mut observer,
            &Enqueue::new(QUEUE).key(format!("filler-{n}")),
        );
    }
    let mut worker = db.connect();
    let job = calls::claim_key(&mut worker, QUEUE, TARGET, OWNER, LEASE)
        .expect("work_claim_key")
        .expect("job's claim returned no row")
        .token(OWNER);
    let mut claimers: Vec<Client> = (0..CLAIMERS).map(|_| db.connect()).collect();
    let stop = AtomicBool::new(false);

    let ((renewed, epochs, margins_ms), polls) = thread::scope(|s| {
        let (job, stop, worker) = (&job, &stop, &mut worker);
        let polls: Vec<_> = claimers
            .iter_mut()
            .map(|c| {
                s.spawn(move || {
                    let (mut rounds, mut stolen) = (0usize, Vec::new());
                    while !stop.load(Ordering::SeqCst) {
                        stolen.extend(
                            calls::claim_key(c, QUEUE, TARGET, OWNER, LONG)
                                .expect("work_claim_key"),
                        );
                        for got in
                            calls::claim(c, QUEUE, OWNER, LONG, Some(3), None).expect("work_claim")
                        {
                            if got.id == job.id {
                                stolen.push(got);
                            } else {
                                let t = got.token(OWNER);
                                assert!(
                                    calls::release(c, &t, Some("0")).expect("work_release"),
                                    "releasing a filler"
                                );
                            }
                        }
                        rounds += 1;
                    }
                    (rounds, stolen)
                })
            })
            .collect();
        let renewer = s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let (mut renewed, mut epochs, mut margins) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..RENEWS {
                // Pacing on the server's clock: this is the job's heartbeat.
                let margin: f64 = worker
                    .query_one(
                        "SELECT extract(epoch FROM lease_until - pg_catalog.clock_timestamp()) \
                                  ::float8 * 1000 \
                           FROM workfence.items, \
                                pg_catalog.pg_sleep_until(lease_until - $2::text::interval) \
                          WHERE id = $1",
                        &[&job.id, &RENEW_AT_LEFT],
                    )
                    .expect("pacing the renew")
                    .get(0);
                margins.push(margin);
                renewed.push(calls::renew(worker, job, LEASE).expect("work_renew"));
                epochs.push(item(worker, job.id).epoch);
            }
            (renewed, epochs, margins)
        });
        let renewer = renewer.join().expect("the job's thread panicked");
        let polls: Vec<(usize, Vec<Claim>)> = polls
            .into_iter()
            .map(|p| p.join().expect("a claimer thread panicked"))
            .collect();
        (renewer, polls)
    });

    let least_margin = margins_ms.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "long job: {RENEWS} renews, least lease left at a renew {least_margin:.0} ms; \
         claimer rounds {:?}",
        polls.iter().map(|p| p.0).collect::<Vec<_>>()
    );
    assert_eq!(renewed, vec![true; RENEWS], "every renew must succeed");
    assert_eq!(
        epochs,
        vec![Some(job.epoch); RENEWS],
        "the epoch never moves"
    );
    for (n, (rounds, stolen)) in polls.iter().enumerate() {
        assert_eq!(
            stolen,
            &Vec::<Claim>::new(),
            "claimer {n} got the job's item"
        );
        assert!(*rounds > 0, "claimer {n} never polled");
    }
    let row = item(&mut observer, target);
    assert_eq!((row.state.as_str(), row.attempts), ("claimed", 1));
    assert!(calls::finish(&mut worker, &job, Some(&by("job"))).expect("work_finish"));
    assert_eq!(item(&mut observer, target).state, "done");
}

/// Scenario 7a. At the edge of expiry the claim comes first (uncommitted);
/// the holder's renew waits on the row lock and, once the claim commits, is
/// refused.
#[test]
fn renew_at_the_edge_loses_to_a_claim_that_came_first() {
    const KEY: &str = "sync-calendar";
    const OWNER: &str = "sync";
    let db = Db::new("race_edge_claim_first");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut holder, mut claimer) = (db.connect(), db.connect());
    let (holder_pid, claimer_pid) = (
        common::backend_pid(&mut holder),
        common::backend_pid(&mut claimer),
    );

    let old = calls::claim_key(&mut holder, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("holder's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut claimer, id);
    let mut tx = claimer.transaction().expect("BEGIN");
    let new = calls::claim_key(&mut tx, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("claimer's claim returned no row");
    let renewed = thread::scope(|s| {
        let renewer = s.spawn(|| calls::renew(&mut holder, &old, LONG).expect("work_renew"));
        common::wait_until_blocked(&mut observer, holder_pid, claimer_pid);
        tx.commit().expect("COMMIT of the claim");
        renewer.join().expect("the holder's thread panicked")
    });
    assert!(
        !renewed,
        "the renew waited for the claim and must be refused"
    );

    let row = item(&mut observer, id);
    assert_eq!(
        (row.state.as_str(), row.epoch),
        ("claimed", Some(new.epoch))
    );
    assert_eq!(row.lease_until.as_deref(), Some(new.lease_until.as_str()));
    assert!(!calls::finish(&mut holder, &old, Some(&by("holder"))).expect("work_finish"));
    assert!(
        calls::finish(&mut claimer, &new.token(OWNER), Some(&by("claimer"))).expect("work_finish")
    );
}

/// Scenario 7b. The renew comes first and stays uncommitted past the old
/// expiry: the claim skips the locked row, and after the commit finds the
/// lease pushed out.
#[test]
fn renew_at_the_edge_holds_off_a_claim_that_came_second() {
    const KEY: &str = "sync-contacts";
    const OWNER: &str = "sync";
    let db = Db::new("race_edge_renew_first");
    let mut observer = db.connect();
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut holder, mut claimer) = (db.connect(), db.connect());

    let held = calls::claim_key(&mut holder, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("holder's claim returned no row")
        .token(OWNER);
    let mut tx = holder.transaction().expect("BEGIN");
    assert!(
        calls::renew(&mut tx, &held, LONG).expect("work_renew"),
        "renew before the lease lapsed"
    );
    // The committed row still has the old lease; let it pass on the server.
    wait_for_lapse(&mut observer, id);
    assert_eq!(
        calls::claim_key(&mut claimer, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut claimer, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    tx.commit().expect("COMMIT of the renew");

    assert_eq!(
        calls::claim_key(&mut claimer, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut claimer, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    let live: bool = observer
        .query_one(
            "SELECT state = 'claimed' AND epoch = $2 \
                    AND lease_until > pg_catalog.clock_timestamp() + interval '1 minute' \
               FROM workfence.items WHERE id = $1",
            &[&id, &held.epoch],
        )
        .expect("reading the lease")
        .get(0);
    assert!(live, "the renewed lease must be live, under the same epoch");
    assert!(calls::finish(&mut holder, &held, Some(&by("holder"))).expect("work_finish"));
}

/// Scenario 7, many times, with the order left to chance: holder and a
/// worker polling the queue (`work_claim`) are released together by a
/// barrier, each waits on the server until the lease's end plus a random
/// offset of up to ±2 ms, then renews or claims. In every round exactly one
/// of them wins (each round's item is the queue's only unfinished one).
#[test]
fn renew_and_claim_at_the_edge_never_both_win() {
    const OWNER: &str = "sync";
    const ROUNDS: usize = 20;
    const EDGE_LEASE: &str = "100 milliseconds";
    let db = Db::new("race_edge_random");
    let mut observer = db.connect();
    let (mut holder, mut claimer) = (db.connect(), db.connect());
    let at_the_edge = "SELECT pg_catalog.pg_sleep_until($1::text::timestamptz \
                       + (pg_catalog.random() * 4 - 2) * interval '1 millisecond')";
    let (mut renews_won, mut claims_won) = (0, 0);

    for round in 0..ROUNDS {
        let key = format!("edge-{round}");
        let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(&key));
        let claimed = calls::claim_key(&mut holder, QUEUE, &key, OWNER, EDGE_LEASE)
            .expect("work_claim_key")
            .expect("holder's claim returned no row");
        let held = claimed.token(OWNER);
        let barrier = Barrier::new(2);
        let (renewed, taken) = thread::scope(|s| {
            let renewer = s.spawn(|| {
                barrier.wait();
                holder
                    .execute(at_the_edge, &[&claimed.lease_until])
                    .expect("waiting for the edge");
                calls::renew(&mut holder, &held, LONG).expect("work_renew")
            });
            let taker = s.spawn(|| {
                barrier.wait();
                claimer
                    .execute(at_the_edge, &[&claimed.lease_until])
                    .expect("waiting for the edge");
                let mut got = calls::claim(&mut claimer, QUEUE, OWNER, LONG, Some(1), None)
                    .expect("work_claim")
                    .into_iter();
                let first = got.next();
                assert_eq!(got.next(), None, "max_items 1");
                first
            });
            (
                renewer.join().expect("the holder's thread panicked"),
                taker.join().expect("the claimer's thread panicked"),
            )
        });
        assert_ne!(
            renewed,
            taken.is_some(),
            "round {round}: exactly one of renew ({renewed}) and claim ({taken:?}) must win"
        );
        let row = item(&mut observer, id);
        assert_eq!(row.state, "claimed");
        match taken {
            None => {
                renews_won += 1;
                assert_eq!(row.epoch, Some(held.epoch), "round {round}");
                assert!(
                    calls::finish(&mut holder, &held, Some(&by("holder"))).expect("work_finish"),
                    "round {round}"
                );
            }
            Some(taken) => {
                claims_won += 1;
                let taken = taken.token(OWNER);
                assert_eq!(row.epoch, Some(taken.epoch), "round {round}");
                assert!(
                    !calls::finish(&mut holder, &held, Some(&by("holder"))).expect("work_finish"),
                    "round {round}"
                );
                assert!(
                    calls::finish(&mut claimer, &taken, Some(&by("claimer"))).expect("work_finish"),
                    "round {round}"
                );
            }
        }
        assert_eq!(item(&mut observer, id).state, "done");
    }
    eprintln!("edge race: {renews_won} renews won, {claims_won} claims won in {ROUNDS} rounds");
}

/// A worker's business table for scenario 8: one row per job effect.
const BUSINESS_TABLE: &str =
    "CREATE TABLE sent_mail (item_id bigint NOT NULL, epoch bigint NOT NULL)";

/// How many business rows item `id` has, and under which epochs.
fn business_rows(c: &mut Client, id: i64) -> Vec<i64> {
    c.query(
        "SELECT epoch FROM sent_mail WHERE item_id = $1 ORDER BY epoch",
        &[&id],
    )
    .expect("reading sent_mail")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Writes the job's effect (one `sent_mail` row) in the given transaction.
fn send_mail(c: &mut impl GenericClient, token: &Token) -> Result<u64, postgres::Error> {
    c.execute(
        "INSERT INTO sent_mail VALUES ($1, $2)",
        &[&token.id, &token.epoch],
    )
}

/// Scenario 8a and 8b. A stale worker's effects never commit, whether it
/// writes them before or after `work_assert`; the current worker's effects
/// and finish commit together.
#[test]
fn work_assert_rolls_back_a_stale_worker_and_commits_a_current_one() {
    const KEY: &str = "welcome-mail-1";
    const OWNER: &str = "mailer";
    let db = Db::new("race_assert_stale_and_current");
    let mut observer = db.connect();
    observer
        .batch_execute(BUSINESS_TABLE)
        .expect("business table");
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());

    let stale = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);
    let current = calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG)
        .expect("work_claim_key")
        .expect("B's claim returned no row")
        .token(OWNER);
    let claimed = item(&mut observer, id);

    // Stale, effect first: the assert raises, and even COMMIT keeps nothing.
    let mut tx = a.transaction().expect("BEGIN");
    assert_eq!(send_mail(&mut tx, &stale).expect("A's insert"), 1);
    assert_lease_lost(&stale, &mut tx, SUPERSEDED);
    tx.commit()
        .expect("COMMIT of an aborted transaction rolls back");
    // Stale, assert first: the effect cannot even be written.
    let mut tx = a.transaction().expect("BEGIN");
    assert_lease_lost(&stale, &mut tx, SUPERSEDED);
    server_error(
        send_mail(&mut tx, &stale),
        "25P02",
        "insert after a failed assert",
    );
    tx.rollback().expect("ROLLBACK");
    assert_eq!(business_rows(&mut observer, id), Vec::<i64>::new());
    assert_eq!(item(&mut observer, id), claimed);

    // Current: assert, effect, finish, one commit.
    let mut tx = b.transaction().expect("BEGIN");
    calls::assert(&mut tx, &current).expect("work_assert of the current token");
    assert_eq!(send_mail(&mut tx, &current).expect("B's insert"), 1);
    assert!(calls::finish(&mut tx, &current, Some(&by("B"))).expect("work_finish"));
    // Nothing is visible before the commit, then both are.
    assert_eq!(business_rows(&mut observer, id), Vec::<i64>::new());
    assert_eq!(item(&mut observer, id).state, "claimed");
    tx.commit().expect("COMMIT");
    assert_eq!(business_rows(&mut observer, id), vec![current.epoch]);
    let done = item(&mut observer, id);
    assert_eq!(
        (done.state.as_str(), done.epoch),
        ("done", Some(current.epoch))
    );
}

/// Scenario 8c. A worker whose lease has lapsed but is still the newest
/// asserts it and holds the row lock; a claimer then skips the item, so the
/// worker's effects and finish commit and stand.
#[test]
fn work_assert_lock_holds_off_a_claim_of_the_lapsed_lease() {
    const KEY: &str = "welcome-mail-2";
    const OWNER: &str = "mailer";
    let db = Db::new("race_assert_lock");
    let mut observer = db.connect();
    observer
        .batch_execute(BUSINESS_TABLE)
        .expect("business table");
    let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(KEY));
    let (mut a, mut b) = (db.connect(), db.connect());

    let held = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT)
        .expect("work_claim_key")
        .expect("A's claim returned no row")
        .token(OWNER);
    wait_for_lapse(&mut observer, id);

    let mut tx = a.transaction().expect("BEGIN");
    calls::assert(&mut tx, &held).expect("a lapsed lease nobody re-claimed is still current");
    // The lease has lapsed, but the row is locked: B's claims skip it.
    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    assert_eq!(send_mail(&mut tx, &held).expect("A's insert"), 1);
    assert!(calls::finish(&mut tx, &held, Some(&by("A"))).expect("work_finish"));
    tx.commit().expect("COMMIT");

    assert_eq!(
        calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG).expect("work_claim_key"),
        None
    );
    assert_eq!(
        calls::claim(&mut b, QUEUE, OWNER, LONG, Some(10), None).expect("work_claim"),
        Vec::new()
    );
    assert_eq!(business_rows(&mut observer, id), vec![held.epoch]);
    let done = item(&mut observer, id);
    assert_eq!(done.state, "done");
    assert_eq!((done.epoch, done.attempts), (Some(held.epoch), 1));
    assert_eq!(done.result, Some(json!({"by": "A"})));
}

/// Scenario 4 through a router, both calls in flight at once: the old
/// token's finish and a re-claim of its lapsed lease are sent through the
/// router together while the test holds the item table of their shard
/// (`LOCK TABLE ... IN EXCLUSIVE MODE`, which lets neither the claim's row
/// lock nor the finish's update through); once both wait on the test's
/// lock (`pg_blocking_pids` on the shard), the lock goes and they race for
/// the row. Whichever gets it, exactly one wins: the finish (the item done
/// under the old epoch, the claim empty) or the claim (a newer epoch, the
/// finish refused and the old token dead). A router call is one autocommit
/// statement on the shard, so this is the race of two direct calls.
#[test]
fn finish_and_reclaim_of_a_lapsed_lease_never_both_win_through_the_router() {
    const OWNER: &str = "billing";
    const ROUNDS: usize = 6;
    let db = Db::router("race_finish_router");
    let router = db.router.as_ref().expect("a router");
    let mut observer = db.connect();
    let shard = &router.shards[ok(
        router.shard_of_queue(&mut observer, QUEUE),
        "the queue's shard",
    )];
    let mut holder = ok(db.cluster.connect_to(shard), "connecting to the shard");
    let holder_pid = common::backend_pid(&mut holder);
    let mut shard_observer = ok(db.cluster.connect_to(shard), "connecting to the shard");
    let (mut a, mut b) = (db.connect(), db.connect());
    let (mut finish_won, mut claim_won) = (0, 0);
    for round in 0..ROUNDS {
        let key = format!("invoice-{round}");
        let id = enqueue_new(&mut observer, &Enqueue::new(QUEUE).key(&key));
        let old = calls::claim_key(&mut a, QUEUE, &key, OWNER, SHORT)
            .expect("work_claim_key")
            .expect("A's claim returned no row")
            .token(OWNER);
        wait_for_lapse(&mut observer, id);

        let mut tx = ok(holder.transaction(), "BEGIN (holder)");
        ok(
            tx.batch_execute("LOCK TABLE workfence.items IN EXCLUSIVE MODE"),
            "locking the shard's items",
        );
        let (finished, reclaim) = thread::scope(|s| {
            let finisher = s.spawn(|| calls::finish(&mut a, &old, Some(&by("A"))));
            let claimer = s.spawn(|| calls::claim_key(&mut b, QUEUE, &key, OWNER, LONG));
            common::poll_until(
                &mut shard_observer,
                "SELECT count(*) = 2 FROM pg_catalog.pg_stat_activity AS a
                  WHERE $1 = ANY (pg_catalog.pg_blocking_pids(a.pid))",
                &[&holder_pid],
                "the finish and the claim both waiting on the shard",
            );
            ok(tx.commit(), "COMMIT (holder)");
            (
                finisher
                    .join()
                    .expect("A's thread panicked")
                    .expect("work_finish"),
                claimer
                    .join()
                    .expect("B's thread panicked")
                    .expect("work_claim_key"),
            )
        });
        let row = item(&mut observer, id);
        match (finished, reclaim) {
            (true, None) => {
                finish_won += 1;
                assert_eq!(row.state, "done", "round {round}");
                assert_eq!((row.epoch, row.attempts), (Some(old.epoch), 1));
            }
            (false, Some(new)) => {
                claim_won += 1;
                assert!(
                    new.epoch > old.epoch,
                    "round {round}: {new:?} after {old:?}"
                );
                assert_eq!(row.state, "claimed", "round {round}");
                assert_eq!((row.epoch, row.attempts), (Some(new.epoch), 2));
                assert_eq!(row.result, None);
                assert_lease_lost(&old, &mut a, db.superseded_detail());
                assert!(
                    calls::finish(&mut b, &new.token(OWNER), Some(&by("B"))).expect("work_finish")
                );
            }
            other => {
                panic!("round {round}: the finish and the claim both won or both lost: {other:?}")
            }
        }
    }
    println!(
        "races through the router: {ROUNDS} rounds of finish against re-claim, \
         the finish won {finish_won}, the claim won {claim_won}, never both"
    );
}

/// Workers claiming in batches through a router, all at once (a barrier),
/// from queues on different shards: every item is handed to exactly one of
/// them, and `work_finish_many` through the router (each pair sent to its
/// item's shard) finishes each once.
#[test]
fn batch_claims_through_the_router_hand_each_item_to_one_worker() {
    const WORKERS: usize = 4;
    // One queue on each of the four shards (hashtext(queue) & 3: 2, 1, 0, 3).
    const QUEUES: [&str; 4] = ["mail", "email", "sms", "payments"];
    const PER_QUEUE: i64 = 40;
    let db = Db::router("race_batches_router");
    let router = db.router.as_ref().expect("a router");
    let mut observer = db.connect();
    let mut shards_used = std::collections::BTreeSet::new();
    for queue in QUEUES {
        shards_used.insert(ok(router.shard_of_queue(&mut observer, queue), "shard"));
        ok(
            observer.execute(
                "SELECT count(*) FROM pg_catalog.generate_series(1, $2::bigint) AS n,
                        LATERAL workfence.work_enqueue($1, pg_catalog.jsonb_build_object('n', n))",
                &[&queue, &PER_QUEUE],
            ),
            "enqueueing",
        );
    }
    assert!(
        shards_used.len() > 1,
        "the queues must live on several shards"
    );
    let barrier = Barrier::new(WORKERS);
    let taken: Vec<Vec<(i64, i64)>> = thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (barrier, db) = (&barrier, &db);
                s.spawn(move || {
                    let mut c = db.connect();
                    let mut mine = Vec::new();
                    barrier.wait();
                    loop {
                        let mut round = Vec::new();
                        // Each worker starts at another queue.
                        for q in 0..QUEUES.len() {
                            let queue = QUEUES[(q + w) % QUEUES.len()];
                            round.extend(
                                calls::claim(&mut c, queue, "w", LONG, Some(5), None)
                                    .expect("work_claim"),
                            );
                        }
                        if round.is_empty() {
                            return mine;
                        }
                        let ids: Vec<i64> = round.iter().map(|c| c.id).collect();
                        let epochs: Vec<i64> = round.iter().map(|c| c.epoch).collect();
                        let finished = calls::finish_many(&mut c, "w", &ids, &epochs, None)
                            .expect("finish_many");
                        let expected: Vec<(i64, bool)> = ids.iter().map(|&id| (id, true)).collect();
                        assert_eq!(finished, expected, "finish_many through the router");
                        mine.extend(ids.into_iter().zip(epochs));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    let all: Vec<i64> = taken.iter().flatten().map(|&(id, _)| id).collect();
    let distinct: std::collections::BTreeSet<i64> = all.iter().copied().collect();
    let total = PER_QUEUE * QUEUES.len() as i64;
    assert_eq!(
        all.len(),
        distinct.len(),
        "an item was handed to two workers"
    );
    assert_eq!(all.len() as i64, total, "every item claimed once");
    let done: i64 = common::scalar(
        &mut observer,
        "SELECT count(*) FROM workfence.items WHERE state = 'done' AND attempts = 1",
        &[],
    );
    assert_eq!(done, total);
    println!(
        "races through the router: {total} items over {} shards claimed by {WORKERS} workers \
         at once ({:?} each), none twice",
        shards_used.len(),
        taken.iter().map(Vec::len).collect::<Vec<_>>()
    );
}
