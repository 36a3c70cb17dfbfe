//! Shared by the integration tests: the database from `WORKFENCE_TEST_DSN` (a test FAILS
//! without it), fresh queue names, bounded polls of the database state, a log capture.
#![allow(dead_code)] // each test file uses a part

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::{Client, NoTls};

/// The longest any awaited condition may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The connection string of the test database (scripts/client-tests.sh exports it).
pub fn dsn() -> String {
    match std::env::var("WORKFENCE_TEST_DSN") {
        Ok(dsn) if !dsn.trim().is_empty() => dsn,
        _ => panic!(
            "WORKFENCE_TEST_DSN is not set: these tests need a PostgreSQL database with the \
             pg_workfence extension; run them with `bash scripts/client-tests.sh rust`"
        ),
    }
}

/// A new connection to the test database.
pub async fn connect() -> Client {
    let (client, connection) = tokio_postgres::connect(&dsn(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to WORKFENCE_TEST_DSN: {e}"));
    tokio::spawn(connection);
    client
}

/// A name no other test (or earlier run) uses: `<prefix>_<pid>_<nanos>_<n>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!(
        "{prefix}_{}_{nanos}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Polls `check` (a query of the database state) every 20 ms until it returns `Some`, failing
/// the test after [`DEADLINE`] with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "waited {DEADLINE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Counts of the queue's items by state, e.g. `[("done", 3)]`, sorted.
pub async fn states(c: &Client, queue: &str) -> Vec<(String, i64)> {
    c.query(
        "SELECT state::text, count(*) FROM workfence.items WHERE queue = $1 GROUP BY 1 ORDER BY 1",
        &[&queue],
    )
    .await
    .expect("states")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Waits until every item of `queue` is in `state` (and there are `count` of them).
pub async fn wait_for_all(c: &Client, queue: &str, state: &str, count: i64) {
    let want = vec![(state.to_owned(), count)];
    wait_for(&format!("{count} items {state} in {queue}"), || async {
        (states(c, queue).await == want).then_some(())
    })
    .await;
}

/// The log lines of target `workfence` while it is the thread's default subscriber (the
/// tests using it run on a current-thread runtime, so every task logs on this thread).
#[derive(Clone, Default)]
pub struct Capture(pub Arc<Mutex<Vec<String>>>);

impl Capture {
    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Collects an event's `message` field.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "workfence"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Waits until item `id`'s lease has lapsed on the server's clock (`lease_until` passed).
pub async fn wait_lease_lapsed(c: &Client, id: i64) {
    wait_for("the lease to lapse", || async {
        let lapsed: bool = c
            .query_one(
                "SELECT lease_until < clock_timestamp() FROM workfence.items WHERE id = $1",
                &[&id],
            )
            .await
            .expect("lease")
            .get(0);
        lapsed.then_some(())
    })
    .await;
}

/// Enqueues `n` items `{"n": i}` with keys `k1..kn` and `max_attempts`.
pub async fn enqueue_n(c: &Client, queue: &str, n: i64, max_attempts: i32) {
    for i in 1..=n {
        workfence::enqueue(
            c,
            queue,
            &serde_json::json!({ "n": i }),
            &workfence::EnqueueOptions::default()
                .key(format!("k{i}"))
                .max_attempts(max_attempts),
        )
        .await
        .expect("enqueue");
    }
}

/// A worker on `queue` with short timings for tests (owner `tests/shared-owner`, a 1 s poll).
pub fn worker(queue: &str) -> workfence::WorkerBuilder {
    workfence::Worker::builder(dsn(), queue)
        .owner("tests/shared-owner")
        .poll_wait(Duration::from_secs(1))
}

/// Runs `worker` with `handler` in a task; returns the stop handle and the task.
pub fn spawn<H: workfence::Handler>(
    worker: workfence::Worker,
    handler: H,
) -> (
    workfence::Handle,
    tokio::task::JoinHandle<workfence::Result<()>>,
) {
    let handle = worker.handle();
    let task = tokio::spawn(async move { worker.run(handler, std::future::pending()).await });
    (handle, task)
}

/// Stops the worker and waits (bounded) for `run` to return Ok: every job it ran has been
/// settled (and, with the `otel` feature, every job's span has ended).
pub async fn stop(handle: workfence::Handle, task: tokio::task::JoinHandle<workfence::Result<()>>) {
    handle.stop();
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("run returns after stop")
        .expect("the run task")
        .expect("run returns Ok");
}

/// A database of its own with the extension at an older release (`version`), for the tests of
/// the library against a schema it must still serve: its connection string, a connection to it,
/// and what [`OldDatabase::remove`] needs to drop it.
pub struct OldDatabase {
    /// The database's connection string.
    pub dsn: String,
    /// A connection to it.
    pub client: Client,
    name: String,
    admin: Client,
    connection: tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
}

/// Creates a database named from `prefix` with `CREATE EXTENSION pg_workfence VERSION version`.
pub async fn old_database(prefix: &str, version: &str) -> OldDatabase {
    let admin = connect().await;
    let name = unique(prefix);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    let dsn = format!("{} dbname={name}", dsn());
    let (client, connection) = tokio_postgres::connect(&dsn, NoTls).await.expect("connect");
    let connection = tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE EXTENSION pg_workfence VERSION '{version}'"
        ))
        .await
        .unwrap_or_else(|e| panic!("CREATE EXTENSION pg_workfence VERSION '{version}': {e}"));
    OldDatabase {
        dsn,
        client,
        name,
        admin,
        connection,
    }
}

impl OldDatabase {
    /// Closes the connection and drops the database (its other sessions ended by force).
    pub async fn remove(self) {
        drop(self.client);
        let _closed = self.connection.await;
        self.admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .expect("DROP DATABASE");
    }
}
