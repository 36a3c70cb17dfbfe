//! The functions through PgBouncer in transaction pooling mode keep every
//! promise, because they hold no session state: the token (id, owner, epoch)
//! travels with every call, leases are judged by the server's clock, and
//! `work_assert`'s row lock lives exactly as long as the transaction, which
//! is what transaction pooling pins to one server connection.
//!
//! Each test runs a handful of client connections through one pgbouncer
//! (Debian's package, started by [`PgBouncer`] as the `postgres` OS user on a
//! free loopback port, `pool_mode = transaction`, `default_pool_size = 2`) in
//! front of a throwaway cluster, and checks both the promise and that the
//! clients really shared the two server connections:
//!
//! - the bug report's scenario (A and B both `routines/laptop`, A's lease
//!   lapses on the server's clock, B claims, A is fenced out);
//! - six clients claiming batches concurrently never get the same item;
//! - `work_assert` + the worker's own INSERT + `work_finish` in one explicit
//!   transaction commit together, and a stale token's transaction is rolled
//!   back with SQLSTATE 55000, leaving no business row;
//! - six clients share two server connections, and one client's consecutive
//!   statements run on different backends;
//! - the other functions, each with an explicit outcome: `work_renew` pushes
//!   the lease out; `work_release` makes the item pending again and kills
//!   the token; the released item is claimed anew; `work_fail` with
//!   `retry_in '0'` makes it pending with `last_error` set and the attempt
//!   kept, and on an item with `max_attempts` 1 makes it `failed`;
//!   `work_cancel` of a claimed item fences its holder (renew and finish
//!   false, `work_assert` 55000); `work_finish_many` with current and stale
//!   pairs finishes exactly the current ones; `work_lease_status` tells
//!   current, superseded, finished and cancelled tokens apart; and a
//!   `work_claim` long poll (`wait '30 seconds'`) is woken by an enqueue
//!   committed from another pooled client and returns the item at once.
//!
//! Not tested here, because it cannot work through transaction pooling:
//! the `NOTIFY` on channel `work_enqueued`. `LISTEN` is session state; the
//! server connection that ran it goes back to the pool at the end of the
//! transaction, and other clients' transactions then run on it, so a
//! listener must connect to the server directly (or through a pool in
//! session mode). The long poll is the way to wait through PgBouncer: it
//! holds a server connection only while its one statement runs.
//!
//! Every statement goes through `query_typed` (see [`query`]; the typed calls
//! of `workfence_harness::calls` use it too), and a lease is waited out with `pg_sleep_until(lease_until)` on the server, never a client
//! sleep. Needs the extension installed into PostgreSQL 15 and Debian's
//! `pgbouncer` package (`scripts/setup.sh`, then `scripts/test.sh`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier, Mutex, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use common::{enqueue_new, ok};
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, GenericClient, Row};
use serde_json::{json, Value};
use workfence_harness::calls::{self, Enqueue};
use workfence_harness::pgbouncer::PgBouncer;
use workfence_harness::scenario::{KEY, LONG_LEASE, OWNER, QUEUE};
use workfence_harness::Cluster;

/// Server connections per database in the pool: fewer than the clients of
/// every test, so that sharing is forced.
const POOL_SIZE: usize = 2;

/// Client connections in the batch and sharing tests.
const CLIENTS: usize = 6;

/// A's lease in the scenario: short, so that waiting it out is quick.
const SHORT_LEASE: &str = "1 second";

/// A cluster and the pgbouncer in front of it. Fields drop in order: the
/// pgbouncer stops before the cluster does.
struct Stack {
    bouncer: PgBouncer,
    cluster: Cluster,
}

/// One stack for the tests that run at the same time; it stops and is removed
/// when the last of them drops its handle.
fn stack() -> Arc<Stack> {
    static SHARED: Mutex<Weak<Stack>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(stack) = slot.upgrade() {
        return stack;
    }
    let cluster = common::own_cluster();
    let bouncer = ok(
        PgBouncer::builder(common::scratch_base())
            .default_pool_size(POOL_SIZE as u32)
            .start(&cluster),
        "starting pgbouncer (Debian's pgbouncer package; scripts/setup.sh installs it)",
    );
    let stack = Arc::new(Stack { bouncer, cluster });
    *slot = Arc::downgrade(&stack);
    stack
}

/// A fresh database with the extension (created on a direct connection).
fn database(stack: &Stack, name: &str) {
    ok(
        stack.cluster.create_database(name),
        "creating the test database",
    );
}

/// A client connection to `db` through pgbouncer.
fn pooled(stack: &Stack, db: &str) -> Client {
    ok(stack.bouncer.connect_to(db), "connecting through pgbouncer")
}

/// Runs one statement through pgbouncer and returns its rows.
///
/// `query_typed`, not `query`: `query` prepares a *named* statement in one
/// protocol exchange (Parse/Describe/Sync) and runs it in the next
/// (Bind/Execute/Sync). Under transaction pooling the server connection goes
/// back to the pool at every Sync outside a transaction, so the second
/// exchange can land on a backend that never saw the statement ("prepared
/// statement does not exist"); PgBouncer 1.18 does not track prepared
/// statements. `query_typed` sends Parse/Bind/Describe/Execute/Sync for the
/// unnamed statement in one exchange, with the parameter types given here, so
/// it runs on one backend whatever the pooler does. Values are always
/// parameters, never formatted into the SQL. Result columns are built-in types
/// only (enums are cast to text): an unknown type would make the client look
/// it up with a named statement of its own.
fn query<C: GenericClient>(
    client: &mut C,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Row {
    let mut rows = client
        .query_typed(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(rows.len(), 1, "{sql}: expected one row");
    rows.remove(0)
}

/// A claim, and the backend that made it: the statements of the scenario and
/// the batch test read `pg_backend_pid()` beside the function's answer, in the
/// same statement (the typed calls do not), to count the backends used.
#[derive(Debug, Clone, Copy)]
struct Claimed {
    id: i64,
    epoch: i64,
    backend: i32,
}

/// `work_claim_key(QUEUE, KEY, OWNER, lease)`, which must return a row.
fn claim_key(client: &mut Client, lease: &str, who: &str) -> Claimed {
    let rows = client
        .query_typed(
            "SELECT id, epoch, pg_catalog.pg_backend_pid() \
               FROM workfence.work_claim_key($1, $2, $3, $4::interval)",
            &[
                (&QUEUE, Type::TEXT),
                (&KEY, Type::TEXT),
                (&OWNER, Type::TEXT),
                (&lease, Type::TEXT),
            ],
        )
        .unwrap_or_else(|e| panic!("{who}'s work_claim_key: {e}"));
    assert_eq!(rows.len(), 1, "{who}'s work_claim_key: expected one row");
    Claimed {
        id: rows[0].get(0),
        epoch: rows[0].get(1),
        backend: rows[0].get(2),
    }
}

/// `work_renew` with the token and a lease.
const RENEW: &str =
    "SELECT workfence.work_renew($1, $2, $3, $4::interval), pg_catalog.pg_backend_pid()";

/// `work_finish` with the token and a result.
const FINISH: &str = "SELECT workfence.work_finish($1, $2, $3, $4), pg_catalog.pg_backend_pid()";

/// Runs [`RENEW`] or [`FINISH`] with the token (id, OWNER, epoch) of `claim`
/// as `$1..$3` and `extra` as `$4`; the function's answer and the backend
/// that gave it.
fn token_call(
    client: &mut Client,
    sql: &str,
    claim: &Claimed,
    extra: &(dyn ToSql + Sync),
    extra_type: Type,
) -> (bool, i32) {
    let row = query(
        client,
        sql,
        &[
            (&claim.id, Type::INT8),
            (&OWNER, Type::TEXT),
            (&claim.epoch, Type::INT8),
            (extra, extra_type),
        ],
    );
    (row.get(0), row.get(1))
}

/// Waits on the server until the lease of item `id` has lapsed by its clock:
/// `pg_sleep_until(lease_until)`, then a check that `clock_timestamp()` is past
/// `lease_until` (repeated in the unlikely case the sleep ended on the very
/// microsecond). Returns the backends that ran the statements.
fn wait_for_lapse(client: &mut Client, id: i64) -> BTreeSet<i32> {
    let mut backends = BTreeSet::new();
    for _ in 0..100 {
        // The first column is pg_sleep_until's void, not read.
        let slept = query(
            client,
            "SELECT pg_catalog.pg_sleep_until(lease_until), pg_catalog.pg_backend_pid() \
               FROM workfence.items WHERE id = $1",
            &[(&id, Type::INT8)],
        );
        backends.insert(slept.get::<_, i32>(1));
        let row = query(
            client,
            "SELECT state::text, pg_catalog.clock_timestamp() > lease_until, \
                    pg_catalog.pg_backend_pid() \
               FROM workfence.items WHERE id = $1",
            &[(&id, Type::INT8)],
        );
        assert_eq!(row.get::<_, String>(0), "claimed");
        backends.insert(row.get::<_, i32>(2));
        if row.get::<_, bool>(1) {
            return backends;
        }
    }
    panic!("the lease of item {id} had not lapsed after 100 pg_sleep_until rounds");
}

/// State, epoch and result of item `id`.
fn item(client: &mut Client, id: i64) -> (String, i64, Option<Value>) {
    let row = query(
        client,
        "SELECT state::text, epoch, result FROM workfence.items WHERE id = $1",
        &[(&id, Type::INT8)],
    );
    (row.get(0), row.get(1), row.get(2))
}

/// The backends `pg_stat_activity` shows connected to `db`, seen on a direct
/// connection (not counting that connection): the pool's server connections.
fn server_backends(stack: &Stack, db: &str) -> BTreeSet<i32> {
    let mut direct = ok(stack.cluster.connect_to(db), "connecting directly");
    direct
        .query_typed(
            "SELECT pid FROM pg_catalog.pg_stat_activity \
              WHERE datname = $1 AND backend_type = 'client backend' \
                AND pid <> pg_catalog.pg_backend_pid()",
            &[(&db, Type::TEXT)],
        )
        .unwrap_or_else(|e| panic!("reading pg_stat_activity: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn bug_report_scenario_holds_through_transaction_pooling() {
    let stack = stack();
    let db = "pgb_scenario";
    database(&stack, db);
    // Three clients (scheduler, A, B), connected for the whole test.
    let mut scheduler = pooled(&stack, db);
    let mut a = pooled(&stack, db);
    let mut b = pooled(&stack, db);
    let mut backends = BTreeSet::new();

    let id = enqueue_new(
        &mut scheduler,
        &Enqueue::new(QUEUE).key(KEY).payload(json!({
            "routine": "daily-report",
            "scheduled_for": "2026-11-30T09:00Z"
        })),
    );

    // A claims with a short lease; the lease lapses by the server's clock.
    let a_claim = claim_key(&mut a, SHORT_LEASE, "A");
    assert_eq!(a_claim.id, id);
    backends.insert(a_claim.backend);
    backends.extend(wait_for_lapse(&mut scheduler, id));

    // B, same owner name, claims the lapsed item with a newer epoch.
    let b_claim = claim_key(&mut b, LONG_LEASE, "B");
    backends.insert(b_claim.backend);
    assert_eq!(b_claim.id, id);
    assert!(
        b_claim.epoch > a_claim.epoch,
        "B's epoch {} must exceed A's {}",
        b_claim.epoch,
        a_claim.epoch
    );

    // A goes on with its stale token, perhaps on the very backend B used:
    // refused all the same.
    let (renewed, pid) = token_call(&mut a, RENEW, &a_claim, &LONG_LEASE, Type::TEXT);
    backends.insert(pid);
    assert!(!renewed, "A's stale work_renew returned true");
    let a_result = json!({"sent_by": "A"});
    let (finished, pid) = token_call(&mut a, FINISH, &a_claim, &a_result, Type::JSONB);
    backends.insert(pid);
    assert!(!finished, "A's stale work_finish returned true");
    assert_eq!(
        item(&mut scheduler, id),
        ("claimed".to_owned(), b_claim.epoch, None)
    );

    // B finishes under the current lease.
    let b_result = json!({"sent_by": "B"});
    let (finished, pid) = token_call(&mut b, FINISH, &b_claim, &b_result, Type::JSONB);
    backends.insert(pid);
    assert!(finished, "B's work_finish returned false");

    // Finished exactly once, by B's epoch.
    let done = query(
        &mut scheduler,
        "SELECT count(*) FROM workfence.items WHERE queue = $1 AND key = $2 AND state = 'done'",
        &[(&QUEUE, Type::TEXT), (&KEY, Type::TEXT)],
    );
    assert_eq!(done.get::<_, i64>(0), 1);
    assert_eq!(
        item(&mut scheduler, id),
        ("done".to_owned(), b_claim.epoch, Some(b_result))
    );

    // Three clients, never more than the pool's two backends.
    assert!(
        backends.len() <= POOL_SIZE,
        "statements ran on {backends:?}, more backends than the pool holds"
    );
}

#[test]
fn concurrent_batch_claims_never_share_an_item() {
    const ITEMS: i32 = 200;
    const BATCH: i32 = 5;
    let stack = stack();
    let db = "pgb_batches";
    database(&stack, db);
    let mut scheduler = pooled(&stack, db);
    let enqueued: BTreeSet<i64> = scheduler
        .query_typed(
            "SELECT e.id FROM pg_catalog.generate_series(1, $1) AS g(n), \
                    LATERAL workfence.work_enqueue($2, pg_catalog.jsonb_build_object('n', g.n), \
                                                   'batch-' || g.n) AS e",
            &[(&ITEMS, Type::INT4), (&QUEUE, Type::TEXT)],
        )
        .unwrap_or_else(|e| panic!("enqueueing: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(enqueued.len(), ITEMS as usize);

    // Every client connects first, then all start claiming at once; each
    // claims batches until the queue is empty and finishes every batch it got
    // with work_finish_many.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let mut client = pooled(&stack, db);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let owner = format!("batch/worker-{n}");
                let mut claims = Vec::new();
                let mut backends = BTreeSet::new();
                barrier.wait();
                loop {
                    let rows = client
                        .query_typed(
                            "SELECT id, epoch, pg_catalog.pg_backend_pid() \
                               FROM workfence.work_claim($1, $2, $3::interval, $4)",
                            &[
                                (&QUEUE, Type::TEXT),
                                (&owner, Type::TEXT),
                                (&LONG_LEASE, Type::TEXT),
                                (&BATCH, Type::INT4),
                            ],
                        )
                        .unwrap_or_else(|e| panic!("{owner}'s work_claim: {e}"));
                    if rows.is_empty() {
                        break;
                    }
                    assert!(rows.len() <= BATCH as usize);
                    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                    let epochs: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
                    backends.extend(rows.iter().map(|r| r.get::<_, i32>(2)));
                    let finished = client
                        .query_typed(
                            "SELECT id, finished, pg_catalog.pg_backend_pid() \
                               FROM workfence.work_finish_many($1, $2, $3)",
                            &[
                                (&owner, Type::TEXT),
                                (&ids, Type::INT8_ARRAY),
                                (&epochs, Type::INT8_ARRAY),
                            ],
                        )
                        .unwrap_or_else(|e| panic!("{owner}'s work_finish_many: {e}"));
                    assert_eq!(finished.len(), ids.len());
                    for row in &finished {
                        assert!(
                            row.get::<_, bool>(1),
                            "{owner} could not finish item {} it had just claimed",
                            row.get::<_, i64>(0)
                        );
                        backends.insert(row.get(2));
                    }
                    claims.extend(ids.into_iter().zip(epochs));
                }
                (claims, backends)
            })
        })
        .collect();

    let mut claims_by_id: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut epochs = BTreeSet::new();
    let mut backends = BTreeSet::new();
    let mut total = 0;
    for worker in workers {
        let (claims, seen) = worker.join().expect("a claiming thread panicked");
        backends.extend(seen);
        for (id, epoch) in claims {
            total += 1;
            claims_by_id.entry(id).or_default().push(epoch);
            assert!(epochs.insert(epoch), "epoch {epoch} was handed out twice");
        }
    }
    let twice: Vec<_> = claims_by_id.iter().filter(|(_, e)| e.len() > 1).collect();
    assert!(twice.is_empty(), "items claimed more than once: {twice:?}");
    assert_eq!(total, ITEMS as usize);
    assert_eq!(
        claims_by_id.keys().copied().collect::<BTreeSet<_>>(),
        enqueued
    );

    let done = query(
        &mut scheduler,
        "SELECT count(*) FILTER (WHERE state = 'done'), count(*) \
           FROM workfence.items WHERE queue = $1",
        &[(&QUEUE, Type::TEXT)],
    );
    assert_eq!(done.get::<_, i64>(0), i64::from(ITEMS));
    assert_eq!(done.get::<_, i64>(1), i64::from(ITEMS));

    assert!(
        backends.len() <= POOL_SIZE,
        "{CLIENTS} clients ran on {backends:?}, more backends than the pool holds"
    );
}

#[test]
fn assert_insert_finish_commit_together_and_a_stale_transaction_rolls_back() {
    let stack = stack();
    let db = "pgb_transactions";
    database(&stack, db);
    let mut scheduler = pooled(&stack, db);
    let mut a = pooled(&stack, db);
    let mut b = pooled(&stack, db);
    // The worker's business table: what it must write only while it holds
    // the lease.
    scheduler
        .batch_execute(
            "CREATE TABLE public.deliveries \
               (item_id bigint NOT NULL, epoch bigint NOT NULL, sent_by text NOT NULL)",
        )
        .unwrap_or_else(|e| panic!("creating the business table: {e}"));
    let deliveries = |client: &mut Client| -> Vec<(i64, i64, String)> {
        client
            .query_typed(
                "SELECT item_id, epoch, sent_by FROM public.deliveries ORDER BY epoch",
                &[],
            )
            .unwrap_or_else(|e| panic!("reading deliveries: {e}"))
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    };
    let insert_delivery =
        "INSERT INTO public.deliveries (item_id, epoch, sent_by) VALUES ($1, $2, $3)";

    let id = enqueue_new(
        &mut scheduler,
        &Enqueue::new(QUEUE)
            .key(KEY)
            .payload(json!({"routine": "daily-report"})),
    );
    let a_claim = calls::claim_key(&mut a, QUEUE, KEY, OWNER, SHORT_LEASE)
        .unwrap_or_else(|e| panic!("A's work_claim_key: {e}"))
        .expect("A's work_claim_key: expected one row");
    wait_for_lapse(&mut scheduler, id);
    let b_claim = calls::claim_key(&mut b, QUEUE, KEY, OWNER, LONG_LEASE)
        .unwrap_or_else(|e| panic!("B's work_claim_key: {e}"))
        .expect("B's work_claim_key: expected one row");
    assert!(b_claim.epoch > a_claim.epoch);

    // A, stale, writes its delivery and then asserts its token in the same
    // transaction: 55000, and the rollback takes its delivery with it.
    {
        let mut tx = a.transaction().expect("A: BEGIN");
        tx.query_typed(
            insert_delivery,
            &[
                (&id, Type::INT8),
                (&a_claim.epoch, Type::INT8),
                (&"A", Type::TEXT),
            ],
        )
        .expect("A's INSERT");
        let err = calls::assert(&mut tx, &a_claim.token(OWNER))
            .expect_err("work_assert of A's superseded token succeeded");
        assert_eq!(
            err.code(),
            Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "work_assert of A's superseded token: {err}"
        );
        tx.rollback().expect("A: ROLLBACK");
    }
    assert_eq!(deliveries(&mut scheduler), Vec::new());

    // B asserts its token, writes its delivery and finishes, in one
    // transaction (pinned to one server connection until COMMIT).
    {
        let mut tx = b.transaction().expect("B: BEGIN");
        let b_token = b_claim.token(OWNER);
        calls::assert(&mut tx, &b_token).unwrap_or_else(|e| panic!("B's work_assert: {e}"));
        tx.query_typed(
            insert_delivery,
            &[
                (&id, Type::INT8),
                (&b_claim.epoch, Type::INT8),
                (&"B", Type::TEXT),
            ],
        )
        .expect("B's INSERT");
        let finished = calls::finish(&mut tx, &b_token, None)
            .unwrap_or_else(|e| panic!("B's work_finish: {e}"));
        assert!(finished, "B's work_finish returned false");

        // Before COMMIT, another client (on the pool's other server
        // connection) sees neither the finish nor the delivery.
        assert_eq!(
            item(&mut scheduler, id),
            ("claimed".to_owned(), b_claim.epoch, None)
        );
        assert_eq!(deliveries(&mut scheduler), Vec::new());
        tx.commit().expect("B: COMMIT");
    }

    // After COMMIT, both at once.
    assert_eq!(item(&mut scheduler, id).0, "done");
    assert_eq!(
        deliveries(&mut scheduler),
        vec![(id, b_claim.epoch, "B".to_owned())]
    );
}

#[test]
fn clients_share_server_connections_and_move_between_them() {
    let stack = stack();
    let db = "pgb_sharing";
    database(&stack, db);
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| pooled(&stack, db)).collect();
    let backend_of = |client: &mut Client| -> i32 {
        query(client, "SELECT pg_catalog.pg_backend_pid()", &[]).get(0)
    };

    // Every client, connected at once, runs statements: they all land on the
    // pool's backends, and the server has no more than those.
    let mut seen = BTreeSet::new();
    for _ in 0..3 {
        for client in clients.iter_mut() {
            seen.insert(backend_of(client));
        }
    }
    assert!(
        seen.len() <= POOL_SIZE,
        "{CLIENTS} clients ran on {seen:?}, more backends than the pool holds"
    );
    let on_server = server_backends(&stack, db);
    assert!(
        on_server.len() <= POOL_SIZE && seen.is_subset(&on_server),
        "{CLIENTS} clients connected, the server has backends {on_server:?}, the clients saw {seen:?}"
    );

    // One client moves between backends: X and Z each hold a transaction
    // open, pinning both server connections; Y's last statement ran on one
    // of them. The other one is released, so Y's next statement must run
    // there.
    let (y, rest) = clients.split_first_mut().expect("clients");
    let (x, rest) = rest.split_first_mut().expect("clients");
    let z = &mut rest[0];
    let y_before = backend_of(y);
    let mut x_tx = x.transaction().expect("X: BEGIN");
    let x_backend: i32 = query(&mut x_tx, "SELECT pg_catalog.pg_backend_pid()", &[]).get(0);
    let mut z_tx = z.transaction().expect("Z: BEGIN");
    let z_backend: i32 = query(&mut z_tx, "SELECT pg_catalog.pg_backend_pid()", &[]).get(0);
    assert_ne!(
        x_backend, z_backend,
        "two open transactions on one server connection"
    );
    assert!(
        [x_backend, z_backend].contains(&y_before),
        "Y ran on {y_before}, neither of the pool's two backends {x_backend} and {z_backend}"
    );
    let (kept, freed) = if x_backend == y_before {
        z_tx.commit().expect("Z: COMMIT");
        (x_tx, z_backend)
    } else {
        x_tx.commit().expect("X: COMMIT");
        (z_tx, x_backend)
    };
    let y_after = backend_of(y);
    assert_eq!(
        y_after, freed,
        "Y's next statement ran on {y_after}, not on the freed backend {freed}"
    );
    assert_ne!(y_before, y_after);
    kept.commit().expect("COMMIT");
}

/// State, attempts, last_error and whether `lease_until` and `finished_at`
/// are set, of item `id`.
fn item_detail(client: &mut Client, id: i64) -> (String, i32, Option<String>, bool, bool) {
    let row = query(
        client,
        "SELECT state::text, attempts, last_error, lease_until IS NOT NULL, \
                finished_at IS NOT NULL \
           FROM workfence.items WHERE id = $1",
        &[(&id, Type::INT8)],
    );
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

#[test]
fn the_other_functions_keep_their_promises_through_transaction_pooling() {
    /// The long poll's queue: nothing else is ever in it.
    const POLL_QUEUE: &str = "pgb-long-poll";
    /// The long poll's wait: far longer than a wake-up may take.
    const WAIT: &str = "30 seconds";
    /// [`WAIT`] as a duration: a claim that returns sooner (counted from
    /// before its statement was sent) was not ended by its wait running out.
    const WAIT_SECS: Duration = Duration::from_secs(30);
    /// Bound on the time from the enqueue's commit to the claim's return.
    const PROMPT: Duration = Duration::from_secs(5);
    /// How long the test waits to see the claimer sleeping in the server.
    const SEEN_DEADLINE: Duration = Duration::from_secs(30);

    let stack = stack();
    let db = "pgb_functions";
    database(&stack, db);
    let mut scheduler = pooled(&stack, db);
    let mut a = pooled(&stack, db);
    let mut b = pooled(&stack, db);
    let stale = "stale token";

    // work_renew: true, and lease_until moves later (to about ten minutes
    // from now, from one minute after the claim).
    let key = "renew-release-fail";
    let id = enqueue_new(&mut scheduler, &Enqueue::new(QUEUE).key(key));
    let first = calls::claim_key(&mut a, QUEUE, key, OWNER, "1 minute")
        .expect("work_claim_key")
        .expect("A's claim");
    assert_eq!((first.id, first.attempt), (id, 1));
    assert!(calls::renew(&mut a, &first.token(OWNER), "10 minutes").expect("work_renew"));
    let pushed_out: bool = query(
        &mut scheduler,
        "SELECT lease_until > $2::timestamptz \
                AND lease_until > pg_catalog.clock_timestamp() + interval '9 minutes' \
           FROM workfence.items WHERE id = $1",
        &[(&id, Type::INT8), (&first.lease_until, Type::TEXT)],
    )
    .get(0);
    assert!(pushed_out, "work_renew did not push the lease out");
    assert_eq!(
        calls::lease_status(&mut scheduler, &first.token(OWNER)).expect("work_lease_status"),
        "current"
    );

    // work_release: true; pending again, the attempt given back, no lease;
    // the token is dead.
    assert!(calls::release(&mut a, &first.token(OWNER), Some("0")).expect("work_release"));
    assert_eq!(
        item_detail(&mut scheduler, id),
        ("pending".to_owned(), 0, None, false, false)
    );
    assert!(
        !calls::renew(&mut a, &first.token(OWNER), "1 minute").expect("work_renew"),
        "renew of a released token"
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &first.token(OWNER)).expect("work_lease_status"),
        "superseded"
    );

    // The released item is claimed anew, by B, with a newer epoch.
    let second = calls::claim_key(&mut b, QUEUE, key, OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("B's claim of the released item");
    assert_eq!((second.id, second.attempt), (id, 1));
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
    assert!(
        !calls::finish(&mut a, &first.token(OWNER), None).expect("work_finish"),
        "{stale}"
    );

    // work_fail with retry_in '0': true; pending, last_error set, the
    // attempt kept (the next claim is attempt 2).
    assert!(
        calls::fail(&mut b, &second.token(OWNER), "smtp timeout", Some("0")).expect("work_fail")
    );
    assert_eq!(
        item_detail(&mut scheduler, id),
        (
            "pending".to_owned(),
            1,
            Some("smtp timeout".to_owned()),
            false,
            false
        )
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &second.token(OWNER)).expect("work_lease_status"),
        "superseded"
    );
    let third = calls::claim_key(&mut a, QUEUE, key, OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("A's claim after the failure");
    assert_eq!((third.id, third.attempt), (id, 2));
    assert!(calls::finish(&mut a, &third.token(OWNER), None).expect("work_finish"));
    assert_eq!(
        calls::lease_status(&mut scheduler, &third.token(OWNER)).expect("work_lease_status"),
        "finished"
    );

    // work_fail on an item with max_attempts 1: its attempts are used up,
    // so it is failed for good.
    let key = "fail-once";
    let id = enqueue_new(
        &mut scheduler,
        &Enqueue::new(QUEUE).key(key).max_attempts(1),
    );
    let once = calls::claim_key(&mut a, QUEUE, key, OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("claim of fail-once");
    assert!(calls::fail(&mut a, &once.token(OWNER), "bad address", Some("0")).expect("work_fail"));
    assert_eq!(
        item_detail(&mut scheduler, id),
        (
            "failed".to_owned(),
            1,
            Some("bad address".to_owned()),
            false,
            true
        )
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &once.token(OWNER)).expect("work_lease_status"),
        "finished"
    );
    assert!(calls::claim_key(&mut b, QUEUE, key, OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .is_none());

    // work_cancel of a claimed item: true; the holder's renew and finish are
    // false, its work_assert raises 55000.
    let key = "cancel-me";
    let id = enqueue_new(&mut scheduler, &Enqueue::new(QUEUE).key(key));
    let held = calls::claim_key(&mut a, QUEUE, key, OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("claim of cancel-me");
    let cancelled = calls::cancel(&mut scheduler, QUEUE, key).expect("work_cancel");
    assert!(cancelled, "work_cancel of a claimed item");
    assert!(!calls::renew(&mut a, &held.token(OWNER), LONG_LEASE).expect("work_renew"));
    assert!(!calls::finish(&mut a, &held.token(OWNER), None).expect("work_finish"));
    let err = calls::assert(&mut a, &held.token(OWNER))
        .expect_err("work_assert of a cancelled item's token succeeded");
    assert_eq!(
        err.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "work_assert after work_cancel: {err}"
    );
    let (state, ..) = item_detail(&mut scheduler, id);
    assert_eq!(state, "cancelled");
    assert_eq!(
        calls::lease_status(&mut scheduler, &held.token(OWNER)).expect("work_lease_status"),
        "cancelled"
    );

    // work_finish_many with two current pairs and a stale one (m3 released
    // and claimed again by B): exactly the current pairs finish.
    let ids: Vec<i64> = ["m1", "m2", "m3"]
        .iter()
        .map(|key| enqueue_new(&mut scheduler, &Enqueue::new(QUEUE).key(*key)))
        .collect();
    let m1 = calls::claim_key(&mut a, QUEUE, "m1", OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("claim of m1");
    let m2 = calls::claim_key(&mut a, QUEUE, "m2", OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("claim of m2");
    let m3_old = calls::claim_key(&mut a, QUEUE, "m3", OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("claim of m3");
    assert!(calls::release(&mut a, &m3_old.token(OWNER), Some("0")).expect("work_release"));
    let m3 = calls::claim_key(&mut b, QUEUE, "m3", OWNER, LONG_LEASE)
        .expect("work_claim_key")
        .expect("B's claim of m3");
    let pairs = [&m1, &m3_old, &m2];
    let batch_ids: Vec<i64> = pairs.iter().map(|h| h.id).collect();
    let batch_epochs: Vec<i64> = pairs.iter().map(|h| h.epoch).collect();
    let finished = calls::finish_many(&mut a, OWNER, &batch_ids, &batch_epochs, None)
        .expect("work_finish_many");
    assert_eq!(
        finished,
        vec![(ids[0], true), (ids[2], false), (ids[1], true)],
        "work_finish_many must finish exactly the current pairs"
    );
    let states: Vec<String> = ids
        .iter()
        .map(|&id| item_detail(&mut scheduler, id).0)
        .collect();
    assert_eq!(states, ["done", "done", "claimed"]);

    // work_lease_status tells the tokens apart.
    assert_eq!(
        calls::lease_status(&mut scheduler, &m3.token(OWNER)).expect("work_lease_status"),
        "current"
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &m3_old.token(OWNER)).expect("work_lease_status"),
        "superseded"
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &m1.token(OWNER)).expect("work_lease_status"),
        "finished"
    );
    assert_eq!(
        calls::lease_status(&mut scheduler, &held.token(OWNER)).expect("work_lease_status"),
        "cancelled"
    );
    assert!(calls::finish(&mut b, &m3.token(OWNER), None).expect("work_finish"));

    // The long poll: a claimer waits on an empty queue, holding one of the
    // pool's two server connections while its statement runs; an enqueue
    // committed from another pooled client (on the other one) wakes it. A
    // direct connection sees it sleeping in the server first.
    let mut observer = ok(stack.cluster.connect_to(db), "connecting directly");
    let mut waiter = pooled(&stack, db);
    let poll_started = Instant::now();
    let (id, claimed, woken_at, enqueued_at, seen_waiting) = thread::scope(|s| {
        let claimer = s.spawn(|| {
            let rows = waiter
                .query_typed(
                    "SELECT id, epoch, pg_catalog.pg_backend_pid() \
                       FROM workfence.work_claim($1, $2, $3::interval, $4, $5::interval)",
                    &[
                        (&POLL_QUEUE, Type::TEXT),
                        (&OWNER, Type::TEXT),
                        (&LONG_LEASE, Type::TEXT),
                        (&1i32, Type::INT4),
                        (&WAIT, Type::TEXT),
                    ],
                )
                .unwrap_or_else(|e| panic!("the long poll's work_claim: {e}"));
            let woken_at = Instant::now();
            let claimed: Vec<(i64, i64, i32)> = rows
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect();
            (claimed, woken_at)
        });
        let seen_waiting = loop {
            let waiting: Vec<i32> = observer
                .query_typed(
                    "SELECT pid FROM pg_catalog.pg_stat_activity \
                      WHERE datname = $1 AND state = 'active' \
                        AND wait_event_type = 'Extension' \
                        AND query LIKE '%work_claim(%'",
                    &[(&db, Type::TEXT)],
                )
                .unwrap_or_else(|e| panic!("reading pg_stat_activity: {e}"))
                .iter()
                .map(|row| row.get(0))
                .collect();
            if let [pid] = waiting[..] {
                break pid;
            }
            assert!(
                poll_started.elapsed() < SEEN_DEADLINE && !claimer.is_finished(),
                "the long poll was not seen waiting in the server: {waiting:?}"
            );
            observer
                .execute("SELECT pg_catalog.pg_sleep(0.005)", &[])
                .unwrap_or_else(|e| panic!("pause between polls: {e}"));
        };
        let id = enqueue_new(&mut scheduler, &Enqueue::new(POLL_QUEUE).key("wake-up"));
        let enqueued_at = Instant::now();
        let (claimed, woken_at) = claimer.join().expect("the claiming thread panicked");
        (id, claimed, woken_at, enqueued_at, seen_waiting)
    });
    let waited = woken_at - poll_started;
    // Woken at or after the commit, so possibly before the enqueue's reply
    // reached this client: measured from that reply, saturating at zero.
    let after_enqueue = woken_at.saturating_duration_since(enqueued_at);
    println!(
        "long poll through pgbouncer: returned {waited:?} after it started, \
         {after_enqueue:?} after the enqueue's commit was acknowledged"
    );
    let [(claimed_id, _, backend)] = claimed[..] else {
        panic!("the long poll returned {claimed:?}, not the one item enqueued");
    };
    assert_eq!(claimed_id, id, "the long poll returned {claimed:?}");
    assert_eq!(
        backend, seen_waiting,
        "the claim returned from another backend than the one seen waiting"
    );
    assert!(
        after_enqueue < PROMPT && waited < WAIT_SECS,
        "the long poll was not woken by the enqueue: it returned {after_enqueue:?} after it, \
         {waited:?} after it started"
    );
    let (state, attempts, ..) = item_detail(&mut scheduler, id);
    assert_eq!((state.as_str(), attempts), ("claimed", 1));
}
