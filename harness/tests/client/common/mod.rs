//! Helpers shared by the client-connection test modules (`use crate::common;`).
//!
//! Each topic uses a subset of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use postgres::types::{FromSql, ToSql};
use postgres::{Client, NoTls};
use workfence_harness::{Cluster, ClusterBuilder};

// Each test file uses a subset of these (hence the allow).
#[allow(unused_imports)]
pub use workfence_harness::testing::{doc_sql_block, ok};

/// Where the tests' throwaway clusters live: `$WORKFENCE_SCRATCH`, which
/// scripts/test.sh points at a directory the postgres OS user can reach (a
/// checkout under /root is not), else cargo's per-target scratch directory.
pub fn scratch_base() -> String {
    std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string())
}

/// One cluster for the tests of a topic (the file that calls this) that run
/// at the same time and ask for it with the same `setup`, as when each topic
/// was a binary of its own: topics do not share a cluster, so one topic's
/// connections, locks and load are not another's. It stops and is removed
/// when the last of them drops its handle. `setup` runs once on a new
/// cluster (roles, say, which are cluster-wide).
#[track_caller]
pub fn shared_cluster_with(setup: fn(&Cluster)) -> Arc<Cluster> {
    shared_cluster_built(|builder| builder, setup)
}

/// [`shared_cluster_with`], the cluster built by `build` (server settings
/// that must be in place before it starts, e.g. `max_prepared_transactions`).
#[track_caller]
pub fn shared_cluster_built(
    build: fn(ClusterBuilder) -> ClusterBuilder,
    setup: fn(&Cluster),
) -> Arc<Cluster> {
    // Keyed by the calling topic's file and the two functions' addresses (two
    // functions the compiler merged are the same code, so sharing is right).
    type Key = (&'static str, usize, usize);
    static SHARED: Mutex<Vec<(Key, Weak<Cluster>)>> = Mutex::new(Vec::new());
    let key: Key = (
        std::panic::Location::caller().file(),
        build as usize,
        setup as usize,
    );
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    shared.retain(|(_, cluster)| cluster.strong_count() > 0);
    if let Some(cluster) = shared
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, cluster)| cluster.upgrade())
    {
        return cluster;
    }
    let cluster = Arc::new(ok(
        build(Cluster::builder(scratch_base())).start(),
        "starting a throwaway PostgreSQL 15 cluster",
    ));
    setup(&cluster);
    shared.push((key, Arc::downgrade(&cluster)));
    cluster
}

/// [`shared_cluster_with`] with nothing to set up.
#[track_caller]
pub fn shared_cluster() -> Arc<Cluster> {
    shared_cluster_with(|_| {})
}

/// The single value of a one-row, one-column query.
pub fn scalar<T: for<'a> FromSql<'a>>(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> T {
    ok(client.query_one(sql, params), sql).get(0)
}

/// The longest [`poll_until`] waits for another backend to get somewhere.
pub const POLL_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `condition` (a query returning one boolean) on `observer` until it
/// is true, pausing 1 ms on the server between tries; fails with `what`
/// after [`POLL_DEADLINE`]. The condition is what orders the test; the pause
/// only keeps the poll from spinning.
pub fn poll_until(
    observer: &mut Client,
    condition: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &str,
) {
    let deadline = Instant::now() + POLL_DEADLINE;
    while !scalar::<bool>(observer, condition, params) {
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {POLL_DEADLINE:?}"
        );
        ok(
            observer.execute("SELECT pg_catalog.pg_sleep(0.001)", &[]),
            "pause between polls",
        );
    }
}

/// Returns once backend `waiter` waits on a lock that backend `holder`
/// holds (`pg_stat_activity` and `pg_blocking_pids`, read by `observer`).
pub fn wait_until_blocked(observer: &mut Client, waiter: i32, holder: i32) {
    poll_until(
        observer,
        "SELECT coalesce(bool_or(a.wait_event_type = 'Lock' \
                                 AND $2 = ANY (pg_catalog.pg_blocking_pids(a.pid))), false) \
           FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = $1",
        &[&waiter, &holder],
        &format!("backend {waiter} blocked on backend {holder}"),
    );
}

/// A connection to `database` logged in as `role` (trust authentication),
/// named `name` in pg_stat_activity; fails the test unless the session
/// really is `role` (not the superuser).
pub fn connect_as(cluster: &Cluster, database: &str, role: &str, name: &str) -> Client {
    let mut client = ok(
        postgres::Config::new()
            .host(cluster.host())
            .port(cluster.port())
            .user(role)
            .dbname(database)
            .application_name(name)
            .connect(NoTls),
        &format!("connecting as {role}"),
    );
    let who: String = ok(
        client.query_one("SELECT current_user::text", &[]),
        "current_user",
    )
    .get(0);
    assert_eq!(who, role, "{name} must not run as the superuser");
    client
}

/// A connection to `database` whose long polls sleep their whole `wait`:
/// it raises `workfence.long_poll_max` (3 s by default, superuser-set) to an
/// hour for its session, so that a test timing a wake-up against a long
/// wait cannot pass because the call returned at the cap instead.
pub fn connect_long_poller(cluster: &Cluster, database: &str) -> Client {
    let mut client = ok(cluster.connect_to(database), "a long-polling connection");
    ok(
        client.batch_execute("SET workfence.long_poll_max = '1h'"),
        "raising workfence.long_poll_max",
    );
    client
}

/// [`calls::enqueue`](workfence_harness::calls::enqueue), failing the test on
/// an error: the id, key and `inserted`.
pub fn enqueued(
    c: &mut impl postgres::GenericClient,
    item: &workfence_harness::calls::Enqueue,
) -> workfence_harness::calls::Enqueued {
    ok(workfence_harness::calls::enqueue(c, item), "work_enqueue")
}

/// [`enqueued`] of an item that must be new (`inserted`); its id.
pub fn enqueue_new(
    c: &mut impl postgres::GenericClient,
    item: &workfence_harness::calls::Enqueue,
) -> i64 {
    let enqueued = enqueued(c, item);
    assert!(enqueued.inserted, "{} was enqueued before", enqueued.key);
    enqueued.id
}

/// Enqueues a new item `key` (payload `{}`) and claims it as `owner` under
/// `lease`: the claim's token.
pub fn enqueued_and_claimed(
    c: &mut impl postgres::GenericClient,
    queue: &str,
    key: &str,
    owner: &str,
    lease: &str,
) -> workfence_harness::calls::Token {
    enqueue_new(c, &workfence_harness::calls::Enqueue::new(queue).key(key));
    ok(
        workfence_harness::calls::claim_key(c, queue, key, owner, lease),
        "work_claim_key",
    )
    .expect("the item just enqueued is claimable")
    .token(owner)
}

/// [`calls::claim`](workfence_harness::calls::claim) of one item (no wait)
/// from a queue that must have one due: the claim.
pub fn claimed_one(
    c: &mut impl postgres::GenericClient,
    queue: &str,
    owner: &str,
    lease: &str,
) -> workfence_harness::calls::Claim {
    ok(
        workfence_harness::calls::claim(c, queue, owner, lease, None, None),
        "work_claim",
    )
    .pop()
    .unwrap_or_else(|| panic!("nothing due in {queue} to claim"))
}

/// A throwaway cluster of the calling test's own, stopped and removed when
/// dropped (for a test that restarts, crashes or reconfigures its server).
pub fn own_cluster() -> Cluster {
    ok(
        Cluster::start(scratch_base()),
        "starting a throwaway PostgreSQL 15 cluster",
    )
}

/// [`own_cluster`] with database `name` (the extension created in it) and a
/// connection to it.
pub fn own_cluster_with_database(name: &str) -> (Cluster, Client) {
    let cluster = own_cluster();
    ok(cluster.create_database(name), "creating the database");
    let client = ok(cluster.connect_to(name), "connecting");
    (cluster, client)
}

/// The rows of a two-column query, as pairs.
pub fn pairs<A, B>(client: &mut Client, sql: &str) -> Vec<(A, B)>
where
    A: for<'a> FromSql<'a>,
    B: for<'a> FromSql<'a>,
{
    ok(client.query(sql, &[]), sql)
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// This connection's backend pid.
pub fn backend_pid(c: &mut Client) -> i32 {
    scalar(c, "SELECT pg_catalog.pg_backend_pid()", &[])
}

/// Polls until backend `pid` sleeps in the extension's wait (the long
/// poll: `wait_event_type = 'Extension'`).
pub fn wait_until_waiting(observer: &mut Client, pid: i32) {
    poll_until(
        observer,
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                         WHERE pid = $1 AND state = 'active'
                           AND wait_event_type = 'Extension')",
        &[&pid],
        &format!("backend {pid} waiting in the long poll"),
    );
}

/// The repository's root (this crate lives in `harness/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// The extension's Rust sources: every `.rs` file under `src/` (its layer
/// folders included), as (path relative to `src/` with `/` separators,
/// text), sorted by path. Panics when `src/` cannot be read or holds no
/// file: a test reading the source must not pass on nothing.
pub fn extension_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in ok(std::fs::read_dir(dir), "a folder of src/") {
            let path = ok(entry, "an entry of src/").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    let src = repo_root().join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    assert!(!paths.is_empty(), "no .rs file under {}", src.display());
    let mut sources: Vec<(String, String)> = paths
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&src)
                .expect("a path under src/")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            (
                relative,
                ok(std::fs::read_to_string(&path), "a source file"),
            )
        })
        .collect();
    sources.sort();
    sources
}

/// Sleeps on the server (`pg_sleep_until`, the server's clock, which the
/// lease is judged by) until item `id`'s lease has lapsed.
pub fn wait_out_lease(client: &mut Client, id: i64) {
    ok(
        client.execute(
            "SELECT pg_catalog.pg_sleep_until(i.lease_until) FROM workfence.items AS i WHERE i.id = $1",
            &[&id],
        ),
        "waiting out the lease",
    );
}

/// How many items one claim of `queue` by owner `w` (lease 1 minute, one
/// item, no wait) takes: 0 or 1.
pub fn claim_count(client: &mut impl postgres::GenericClient, queue: &str) -> usize {
    ok(
        workfence_harness::calls::claim(client, queue, "w", "1 minute", None, None),
        "claim",
    )
    .len()
}

/// Everything a call of the extension could change, as one string: every
/// item, queue setting and queue grant, whether grants are enforced, and
/// both sequences' positions. Equal before and after a call that changed
/// nothing.
pub fn snapshot(client: &mut Client) -> String {
    ok(
        client.query_one(
            "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), 'no rows')
                    || ' epoch_seq ' || (SELECT last_value || '/' || is_called FROM workfence.epoch_seq)
                    || ' items_id_seq ' || (SELECT last_value || '/' || is_called FROM workfence.items_id_seq)
                    || ' queues ' || (SELECT coalesce(string_agg(q::text, '|' ORDER BY q.queue), '')
                                        FROM workfence.queues AS q)
                    || ' grants ' || (SELECT coalesce(string_agg(g::text, '|' ORDER BY g::text), '')
                                        FROM workfence.queue_grants AS g)
                    || ' grants enforced ' || (SELECT count(*) FROM workfence.queue_grant_mode)
               FROM workfence.items AS t",
            &[],
        ),
        "snapshot",
    )
    .get(0)
}

/// Waits until `standby` has replayed everything `primary` has written so
/// far (its replay LSN reaches the primary's current one).
pub fn caught_up(primary: &Cluster, standby: &Cluster) {
    let mut p = ok(primary.connect(), "connecting to the primary");
    let lsn: String = scalar(&mut p, "SELECT pg_catalog.pg_current_wal_lsn()::text", &[]);
    let mut s = ok(standby.connect(), "connecting to the standby");
    poll_until(
        &mut s,
        "SELECT pg_catalog.pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
        &[&lsn],
        "the standby replaying the primary's WAL",
    );
}

/// The shards of the tests' routers: four, as issue 14 asks.
pub const ROUTER_SHARDS: usize = 4;

/// A PL/Proxy router `name` in front of [`ROUTER_SHARDS`] shard databases on
/// `cluster` (`workfence_harness::router`), with the test view
/// `workfence.items` over every shard in the router database, so that
/// observations written against one database's table read the same there.
/// Every router test has "router" in its name: the PostgreSQL 18 tier skips
/// them (no PL/Proxy for that server; scripts/test.sh).
pub fn router(cluster: &Cluster, name: &str) -> workfence_harness::router::Router {
    let router = ok(
        workfence_harness::router::Router::create(cluster, name, ROUTER_SHARDS),
        "a router and its shards (PL/Proxy: scripts/setup.sh installs it)",
    );
    ok(
        router.create_items_view(cluster),
        "the test view of every shard's items",
    );
    router
}

/// A connection to each of `router`'s shard databases, shard 0 first.
pub fn shard_connections(
    cluster: &Cluster,
    router: &workfence_harness::router::Router,
) -> Vec<Client> {
    router
        .shards
        .iter()
        .map(|shard| ok(cluster.connect_to(shard), "connecting to a shard"))
        .collect()
}

/// [`snapshot`] of every shard of a router, as one string.
pub fn shards_snapshot(shards: &mut [Client]) -> String {
    shards
        .iter_mut()
        .map(snapshot)
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The server error of a call that must fail with SQLSTATE `code`; panics
/// (naming `what`) if it succeeded, failed otherwise or with another code.
pub fn server_error<T: std::fmt::Debug>(
    result: Result<T, postgres::Error>,
    code: &str,
    what: &str,
) -> postgres::error::DbError {
    let err = match result {
        Ok(value) => panic!("{what} succeeded ({value:?}); expected SQLSTATE {code}"),
        Err(err) => err,
    };
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("{what}: not a server error: {err}"))
        .clone();
    assert_eq!(db.code().code(), code, "{what}: {db}");
    db
}

/// Runs `statements` in a `psql` of database `db` named `name`
/// (`application_name`), waits until `ready` (SQL taking `name` as `$1`)
/// holds on `main`, then kills the `psql` process, as a crashed client's
/// kernel closes its socket, and returns how long its backend took to end
/// after the kill. For the calls that wait in the server (a long poll,
/// `work_await`): each must end its session when its client goes away.
pub fn killed_client_ends_its_session(
    cluster: &Cluster,
    main: &mut Client,
    db: &str,
    name: &str,
    statements: &[&str],
    ready: &str,
) -> Duration {
    let conninfo = format!(
        "host={} port={} dbname={db} user=postgres application_name='{name}'",
        cluster.host(),
        cluster.port()
    );
    let mut command = std::process::Command::new(cluster.bin_dir().join("psql"));
    command.arg(&conninfo).arg("-X");
    for statement in statements {
        command.args(["-c", statement]);
    }
    let mut psql = ok(
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn(),
        "starting psql",
    );
    poll_until(main, ready, &[&name], "the psql session waiting");
    let pid: i32 = scalar(
        main,
        "SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1",
        &[&name],
    );
    ok(psql.kill(), "killing psql");
    ok(psql.wait(), "reaping psql");
    let killed = Instant::now();
    poll_until(
        main,
        "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)",
        &[&pid],
        "the waiting backend ending after its client went away",
    );
    killed.elapsed()
}
