//! [`Worker`]: the runner for one queue (clients/README.md, *A worker runner*). Its loop is the
//! one docs/writing-workers.md describes and examples/rust used to spell out by hand: the long
//! poll on a connection of its own, a heartbeat that renews every held item and `LISTEN`s on
//! `work_lease_lost` on another, the jobs as tasks settling on a pool, release on shutdown.
//!
//! Ideas borrowed: the builder and the `run(handler, shutdown)` shape from River's and
//! graphile-worker's runners; a separate heartbeat connection and the buffer of claimed items
//! from procrastinate's worker; abort-on-lease-loss from tokio's `JoinHandle::abort`.

use std::collections::VecDeque;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_postgres::types::Json;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::failure::{error_text, first_line, Panicked};
use crate::job::{Job, Shared};
use crate::registry::{Fate, Registry};
use crate::settle::{settle, Settle, Settled};

/// The long poll: up to `$4` items under a lease of `$3` seconds, waiting up to `$5` seconds.
/// Every column of the claim row (from 0.12.0 the last ones are `progress` and `trace`, read by
/// name when present, so that an older server works too), and what is left of the lease (less
/// than the lease when `max_run` cuts it short).
const CLAIM_SQL: &str = r#"
SELECT c.*, extract(epoch FROM c.lease_until - clock_timestamp())::float8 AS lease_left
  FROM workfence.work_claim($1, $2, make_interval(secs => $3), $4, make_interval(secs => $5)) AS c
"#;
/// Renews every held token in one statement (one round trip per heartbeat).
const RENEW_SQL: &str = r#"
SELECT t.id, t.epoch, workfence.work_renew(t.id, $1, t.epoch, make_interval(secs => $4)) AS renewed
  FROM unnest($2::bigint[], $3::bigint[]) AS t(id, epoch)
"#;
/// The channel on which a claim that supersedes a lapsed lease names the old token.
const LEASE_LOST_CHANNEL: &str = "work_lease_lost";

/// The most `max_items` one claim may ask for (docs/contract.md, `work_claim`).
const MAX_BATCH: usize = 1000;
/// The longest lease the server takes (docs/contract.md: `lease` in (0, 7 days]).
const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest long poll the server takes (`wait` 0..1 hour).
const MAX_POLL_WAIT: Duration = Duration::from_secs(3600);
/// The first pause after a transient error of the claims or the heartbeat before the runner
/// tries again (reconnecting where the connection broke); it doubles up to [`BACKOFF_MAX`] and
/// starts over after a success (as the Python library does).
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// The longest pause between two tries.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A capped exponential backoff: [`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`].
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    /// At the first pause.
    fn new() -> Self {
        Backoff(BACKOFF_FIRST)
    }

    /// The pause to take now; the next one is twice as long, at most [`BACKOFF_MAX`].
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (now * 2).min(BACKOFF_MAX);
        now
    }

    /// After a success: the next pause is [`BACKOFF_FIRST`] again.
    fn reset(&mut self) {
        self.0 = BACKOFF_FIRST;
    }
}

/// The error a handler returns. `work_fail` records its type (when one is known) and its
/// `Display`, then the type and `Display` of each error of its `source()` chain, one `caused by:`
/// line each, within the 2048 bytes the server keeps.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What a handler returns: `Ok(value)` finishes the item with `value` as its result (`None`:
/// NULL, or nothing more when the job's fenced transaction finished it); `Err` fails it.
pub type HandlerResult = std::result::Result<Option<Value>, HandlerError>;

/// The retry policy: (the attempt that failed, its error) → the delay before the next attempt,
/// passed to `work_fail` as `retry_in`; `None` leaves it to the server's backoff.
pub type RetryPolicy = Arc<
    dyn Fn(i32, &(dyn std::error::Error + Send + Sync + 'static)) -> Option<Duration> + Send + Sync,
>;

/// The user's code for one job. Implemented for every `Fn(Job) -> impl Future<Output =
/// HandlerResult>` closure; implement it on a type of your own to keep state.
///
/// The returned future runs as a task of its own: it is dropped (aborted) when the job's lease
/// is lost or the shutdown grace runs out (see [`Job`]). A panic fails the item.
pub trait Handler: Send + Sync + 'static {
    /// Runs `job`. See [`HandlerResult`] for what the result does.
    fn handle(&self, job: Job) -> impl Future<Output = HandlerResult> + Send + 'static;
}

impl<F, Fut> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn handle(&self, job: Job) -> impl Future<Output = HandlerResult> + Send + 'static {
        self(job)
    }
}

/// The settings of a [`Worker`] (clients/README.md, the settings table), checked by
/// [`WorkerBuilder::build`].
#[must_use = "call .build() to get the Worker"]
pub struct WorkerBuilder {
    dsn: String,
    queue: String,
    owner: Option<String>,
    concurrency: usize,
    batch_size: Option<usize>,
    lease: Duration,
    poll_wait: Duration,
    retry: Option<RetryPolicy>,
    shutdown_grace: Duration,
}

impl WorkerBuilder {
    /// The owner name given to every claim; default `<hostname>:<pid>`. Not an identity (the
    /// epoch fences, not the name): two workers may share it. Non-empty after trimming, at most
    /// 256 bytes, no control characters.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// How many handlers run at once; default 1.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The most items one claim takes, 1..1000; default `concurrency`. Claimed items wait in
    /// the runner's buffer (their leases renewed) until a handler is free: the runner never
    /// holds more than `concurrency - 1 + batch_size` items.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = Some(batch_size);
        self
    }

    /// The lease each claim and renew asks for, in (0, 7 days]; default 30 s. The heartbeat
    /// renews every `lease / 3`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The long poll's `wait`, 0..1 hour; default 5 s: an idle worker makes one claim per
    /// `poll_wait`. The session's `statement_timeout` must be longer.
    pub fn poll_wait(mut self, poll_wait: Duration) -> Self {
        self.poll_wait = poll_wait;
        self
    }

    /// The retry policy: `(attempt, error) -> delay` before the next attempt (`work_fail`'s
    /// `retry_in`); `None` from it, or no policy, means the server's exponential backoff with
    /// jitter (`2^n/2..2^n` s, at most 1 h).
    pub fn retry<F>(mut self, policy: F) -> Self
    where
        F: Fn(i32, &(dyn std::error::Error + Send + Sync + 'static)) -> Option<Duration>
            + Send
            + Sync
            + 'static,
    {
        self.retry = Some(Arc::new(policy));
        self
    }

    /// On shutdown, how long running handlers may still finish before they are cancelled and
    /// their items released; default 10 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Checks the settings and makes the worker; connects nothing yet.
    ///
    /// Errors: [`Error::Config`] for a DSN that does not parse, an empty queue, an owner that
    /// the server would refuse (empty, over 256 bytes, control characters), `concurrency` 0,
    /// `batch_size` outside 1..1000, a lease outside (0, 7 days], a `poll_wait` over an hour, or
    /// a default owner whose hostname cannot be read.
    pub fn build(self) -> Result<Worker> {
        let mut config = tokio_postgres::Config::from_str(&self.dsn)
            .map_err(|e| Error::config("dsn", e.to_string()))?;
        if config.get_application_name().is_none() {
            config.application_name("workfence");
        }
        if self.queue.is_empty() || self.queue.len() > 128 {
            return Err(Error::config("queue", "must be 1..128 bytes"));
        }
        let owner = match self.owner {
            Some(owner) => owner,
            None => default_owner()?,
        };
        check_owner(&owner)?;
        if self.concurrency == 0 {
            return Err(Error::config("concurrency", "must be at least 1"));
        }
        let batch_size = self.batch_size.unwrap_or(self.concurrency);
        if !(1..=MAX_BATCH).contains(&batch_size) {
            return Err(Error::config("batch_size", "must be 1..1000"));
        }
        if self.lease.is_zero() || self.lease > MAX_LEASE {
            return Err(Error::config("lease", "must be in (0, 7 days]"));
        }
        if self.poll_wait > MAX_POLL_WAIT {
            return Err(Error::config("poll_wait", "must be at most 1 hour"));
        }
        Ok(Worker {
            settings: Arc::new(Settings {
                config,
                queue: self.queue,
                owner,
                concurrency: self.concurrency,
                batch_size,
                lease: self.lease,
                poll_wait: self.poll_wait,
                retry: self.retry,
                shutdown_grace: self.shutdown_grace,
            }),
            stop: CancellationToken::new(),
        })
    }
}

/// `<hostname>:<pid>`: names the process, so that an operator reading `work_item` finds it.
fn default_owner() -> Result<String> {
    let host = whoami::hostname().map_err(|e| Error::config("owner", format!("hostname: {e}")))?;
    Ok(format!("{}:{}", host.trim(), std::process::id()))
}

/// The server's rules for an owner name (docs/writing-workers.md, *Owner names*), checked at
/// start-up rather than at the first claim.
fn check_owner(owner: &str) -> Result<()> {
    if owner.trim().is_empty() {
        return Err(Error::config("owner", "must not be empty"));
    }
    if owner.len() > 256 {
        return Err(Error::config("owner", "must be at most 256 bytes"));
    }
    if owner.chars().any(char::is_control) {
        return Err(Error::config(
            "owner",
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// The checked settings.
struct Settings {
    config: tokio_postgres::Config,
    queue: String,
    owner: String,
    concurrency: usize,
    batch_size: usize,
    lease: Duration,
    poll_wait: Duration,
    retry: Option<RetryPolicy>,
    shutdown_grace: Duration,
}

/// How many items the next claim asks for, given how many are `held`: `batch_size` while fewer
/// than `concurrency` are held (a handler is free or will be when the claim returns), else none,
/// so that the runner never holds more than `concurrency - 1 + batch_size`.
fn claim_size(held: usize, concurrency: usize, batch_size: usize) -> Option<i32> {
    if held >= concurrency {
        return None;
    }
    let room = concurrency - 1 + batch_size - held;
    i32::try_from(batch_size.min(room)).ok()
}

/// A stop request for a running [`Worker`] from another task: [`Handle::stop`].
#[derive(Debug, Clone)]
pub struct Handle {
    stop: CancellationToken,
}

impl Handle {
    /// Asks the worker to stop, as SIGTERM does: stop claiming, release the buffer, give the
    /// running handlers the shutdown grace. Returns at once; `run` returns when it is done.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// The worker runner for one queue. Make it with [`Worker::builder`], run it with
/// [`Worker::run`] or [`Worker::run_until_signal`].
pub struct Worker {
    settings: Arc<Settings>,
    stop: CancellationToken,
}

impl Worker {
    /// A builder for a worker on `queue`, connecting with the libpq-style connection string
    /// `dsn` (plain TCP or a Unix socket; tokio-postgres's `NoTls`).
    pub fn builder(dsn: impl Into<String>, queue: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            dsn: dsn.into(),
            queue: queue.into(),
            owner: None,
            concurrency: 1,
            batch_size: None,
            lease: Duration::from_secs(30),
            poll_wait: Duration::from_secs(5),
            retry: None,
            shutdown_grace: Duration::from_secs(10),
        }
    }

    /// The owner name of this worker's claims.
    pub fn owner(&self) -> &str {
        &self.settings.owner
    }

    /// A handle to stop the worker from another task.
    pub fn handle(&self) -> Handle {
        Handle {
            stop: self.stop.clone(),
        }
    }

    /// Runs until SIGTERM or SIGINT (or [`Handle::stop`]), then shuts down as [`Worker::run`]
    /// does. Errors: as `run`, and [`Error::Config`] if the signal handlers cannot be installed.
    pub async fn run_until_signal<H: Handler>(&self, handler: H) -> Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let installed = |e: std::io::Error| Error::config("signals", e.to_string());
        let mut term = signal(SignalKind::terminate()).map_err(installed)?;
        let mut interrupt = signal(SignalKind::interrupt()).map_err(installed)?;
        let shutdown = async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(target: "workfence", "{name}: stopping");
        };
        self.run(handler, shutdown).await
    }

    /// Runs the worker until `shutdown` resolves (or [`Handle::stop`]): claims, runs `handler`
    /// on each job, settles it; then stops claiming at once (a long poll in flight is
    /// cancelled), releases the buffered items, lets running handlers finish for
    /// `shutdown_grace`, cancels the rest and releases their items, logs `exit` and returns.
    ///
    /// A lost connection or a server restart does not end it: a claim or renew error that
    /// retrying can fix ([`Error::is_transient`]: no SQLSTATE, class 08, 57P01/57P02/57P03,
    /// 57014, 40001, 40P01, 25006, class 53) is logged `reconnect claim|heartbeat in <s>s
    /// error=<text>` (warn), and the runner tries again after 0.5 s doubling to 30 s (reset after
    /// a success), on a new connection where the old one broke (the heartbeat's `LISTEN`s
    /// again). While the heartbeat is down no renew is made: leases may lapse, and fencing
    /// decides. A finish, fail or release that fails is logged and its item left to its lease.
    ///
    /// Errors (after the same shutdown, with a grace of 0): the first connections failed
    /// ([`Error::Connection`], not retried); a claim or renew was rejected with an error retrying
    /// cannot fix ([`Error::InvalidArgument`] 22023, [`Error::NotPermitted`] 42501,
    /// [`Error::Database`] 3F000 without the extension, ...). Items held then are released where
    /// the pool still connects; the rest come back when their leases lapse.
    pub async fn run<H: Handler>(
        &self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<()> {
        let result = Runner::start(Arc::clone(&self.settings))
            .await?
            .run(Arc::new(handler), shutdown, self.stop.clone())
            .await;
        match &result {
            Ok(()) => tracing::info!(target: "workfence", "exit"),
            Err(e) => tracing::error!(target: "workfence", "exit error={e}"),
        }
        result
    }
}

/// Opens a connection and drives it in a task of its own, as tokio-postgres expects. With a
/// `registry`, notifications on [`LEASE_LOST_CHANNEL`] go to it (the task reads the socket all
/// the time, busy or idle). `closed` is cancelled when the connection ends.
async fn connect(
    config: &tokio_postgres::Config,
    registry: Option<Arc<Registry>>,
    closed: CancellationToken,
) -> Result<Client> {
    let (client, mut connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    if let (Some(registry), LEASE_LOST_CHANNEL) = (&registry, note.channel()) {
                        if let Some(token) = registry.notified(note.payload()) {
                            tracing::warn!(
                                target: "workfence",
                                "lease lost (notified) id={} epoch={}", token.id, token.epoch
                            );
                        }
                    }
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    tracing::debug!(target: "workfence", "notice: {}", notice.message());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::error!(target: "workfence", "connection error={e}");
                    break;
                }
                None => break,
            }
        }
        closed.cancel();
    });
    Ok(client)
}

/// One run of a worker: its connections and state.
struct Runner {
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    /// How the claims' connection connects (`application_name` `<name> claim`).
    claim_config: tokio_postgres::Config,
    /// The claims' connection, and a token cancelled when it ends; `None` after a transient
    /// error that broke it, until the reconnect.
    claimer: Option<Claimer>,
    /// The heartbeat task: renews, and ends with an error when its connection fails.
    heartbeat: JoinHandle<Result<()>>,
    /// Stops the heartbeat.
    heartbeat_stop: CancellationToken,
}

/// A claimed item waiting in the buffer for a free handler.
struct Buffered {
    row: Row,
    id: i64,
    epoch: i64,
    cancel: CancellationToken,
}

impl Runner {
    /// Connects: the claims' connection, the heartbeat's (which `LISTEN`s), and the pool. Their
    /// `application_name`s are `<name> claim`, `<name> heartbeat` and `<name>`, where `<name>`
    /// is the DSN's `application_name` (default `workfence`), so that an operator reading
    /// `pg_stat_activity` tells them apart. A failure here ends `run` (not retried).
    async fn start(settings: Arc<Settings>) -> Result<Self> {
        let registry = Arc::new(Registry::default());
        let name = settings
            .config
            .get_application_name()
            .unwrap_or("workfence")
            .to_owned();
        let mut claim_config = settings.config.clone();
        claim_config.application_name(format!("{name} claim"));
        let claimer = connect_claimer(&claim_config).await?;
        let mut beat_config = settings.config.clone();
        beat_config.application_name(format!("{name} heartbeat"));
        let beat = Beat::connect(&beat_config, &registry).await?;
        let manager = deadpool_postgres::Manager::from_config(
            settings.config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(settings.concurrency + 2)
            // A connection that broke (server restart, network cut) is closed by its task;
            // `RecyclingMethod::Fast` then drops it instead of handing it out again.
            .build()
            .map_err(|e| Error::Pool(e.to_string()))?;
        let shared = Arc::new(Shared {
            registry,
            pool,
            owner: settings.owner.clone(),
            lease: settings.lease,
        });
        let heartbeat_stop = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat(
            beat,
            beat_config,
            Arc::clone(&shared),
            Arc::clone(&settings),
            heartbeat_stop.clone(),
        ));
        Ok(Runner {
            settings,
            shared,
            claim_config,
            claimer: Some(claimer),
            heartbeat,
            heartbeat_stop,
        })
    }

    /// Starts one long-poll claim on `client` as a task of its own.
    fn claim(&self, client: Arc<Client>, n: i32) -> JoinHandle<Claimed> {
        let settings = Arc::clone(&self.settings);
        tokio::spawn(async move {
            let lease = settings.lease.as_secs_f64();
            let wait = settings.poll_wait.as_secs_f64();
            let sent = Instant::now();
            let rows = client
                .query(
                    CLAIM_SQL,
                    &[&settings.queue, &settings.owner, &lease, &n, &wait],
                )
                .await;
            (sent, rows)
        })
    }

    /// Registers and logs the `rows` claimed by a statement sent at `sent`, appending them to
    /// `buffer`.
    fn take(&self, sent: Instant, rows: Vec<Row>, buffer: &mut VecDeque<Buffered>) -> Result<()> {
        for row in rows {
            let id: i64 = row.try_get("id")?;
            let epoch: i64 = row.try_get("epoch")?;
            let attempt: i32 = row.try_get("attempt")?;
            let left: Option<f64> = row.try_get("lease_left")?;
            let left = left
                .filter(|s| s.is_finite())
                .map(|s| Duration::from_secs_f64(s.max(0.0)));
            let cancel = self
                .shared
                .registry
                .add(id, epoch, sent, self.settings.lease, left);
            tracing::info!(target: "workfence", "claim id={id} epoch={epoch} attempt={attempt}");
            buffer.push_back(Buffered {
                row,
                id,
                epoch,
                cancel,
            });
        }
        Ok(())
    }

    /// The loop, then the shutdown.
    async fn run<H: Handler>(
        mut self,
        handler: Arc<H>,
        shutdown: impl Future<Output = ()> + Send,
        stop: CancellationToken,
    ) -> Result<()> {
        tracing::info!(
            target: "workfence",
            "start queue={} owner={} concurrency={} batch_size={} lease={:?} poll_wait={:?}",
            self.settings.queue, self.settings.owner, self.settings.concurrency,
            self.settings.batch_size, self.settings.lease, self.settings.poll_wait
        );
        tokio::pin!(shutdown);
        let registry = Arc::clone(&self.shared.registry);
        let mut buffer: VecDeque<Buffered> = VecDeque::new();
        let mut running: JoinSet<()> = JoinSet::new();
        let mut claiming: Option<JoinHandle<_>> = None;
        // A reconnect of the claims' connection in flight.
        let mut connecting: Option<JoinHandle<Result<Claimer>>> = None;
        let mut backoff = Backoff::new();
        let mut retry_claim_at: Option<Instant> = None;
        let mut failure: Option<Error> = None;
        loop {
            // Registered before the buffer is looked at, so that no loss is missed in between.
            let changed = registry.changed.notified();
            // Drop the buffered items whose lease was lost meanwhile; hand out the rest.
            buffer.retain(|item| {
                let lost = registry.fate(item.id, item.epoch) == Some(Fate::Lost);
                if lost {
                    tracing::warn!(target: "workfence", "refused id={} (lease lost)", item.id);
                    registry.forget(item.id, item.epoch);
                }
                !lost
            });
            while running.len() < self.settings.concurrency {
                let Some(item) = buffer.pop_front() else {
                    break;
                };
                let job = match Job::new(&item.row, item.cancel, Arc::clone(&self.shared)) {
                    Ok(job) => job,
                    Err(e) => {
                        failure = Some(e.into());
                        break;
                    }
                };
                running.spawn(run_job(
                    Arc::clone(&handler),
                    job,
                    Arc::clone(&self.shared),
                    Arc::clone(&self.settings),
                ));
            }
            if failure.is_some() {
                break;
            }
            if claiming.is_none()
                && connecting.is_none()
                && retry_claim_at.is_none_or(|at| at <= Instant::now())
            {
                retry_claim_at = None;
                if let Some(n) = claim_size(
                    registry.len(),
                    self.settings.concurrency,
                    self.settings.batch_size,
                ) {
                    match &self.claimer {
                        Some((client, closed)) if !closed.is_cancelled() => {
                            claiming = Some(self.claim(Arc::clone(client), n));
                        }
                        _ => {
                            self.claimer = None;
                            let config = self.claim_config.clone();
                            connecting =
                                Some(tokio::spawn(async move { connect_claimer(&config).await }));
                        }
                    }
                }
            }
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = stop.cancelled() => break,
                beat = &mut self.heartbeat => {
                    failure = Some(match beat {
                        Ok(Err(e)) => e,
                        Ok(Ok(())) => Error::Pool("the heartbeat stopped".to_owned()),
                        Err(e) => Error::Pool(format!("the heartbeat task failed: {e}")),
                    });
                    break;
                }
                rows = async { claiming.as_mut().expect("guarded").await }, if claiming.is_some() => {
                    claiming = None;
                    match rows {
                        Ok((sent, Ok(rows))) => {
                            backoff.reset();
                            if let Err(e) = self.take(sent, rows, &mut buffer) {
                                failure = Some(e);
                                break;
                            }
                        }
                        Ok((_, Err(e))) => {
                            let e = Error::from(e);
                            if !e.is_transient() {
                                tracing::error!(target: "workfence", "claim error={e}");
                                failure = Some(e);
                                break;
                            }
                            let pause = backoff.next();
                            let broken = self
                                .claimer
                                .as_ref()
                                .is_none_or(|(_, closed)| closed.is_cancelled());
                            if broken || e.needs_new_connection() {
                                self.claimer = None;
                                tracing::warn!(
                                    target: "workfence",
                                    "reconnect claim in {}s error={e}", pause.as_secs_f64()
                                );
                            } else {
                                tracing::warn!(
                                    target: "workfence",
                                    "claim error={e} (again in {}s)", pause.as_secs_f64()
                                );
                            }
                            retry_claim_at = Some(Instant::now() + pause);
                        }
                        Err(e) => {
                            failure = Some(Error::Pool(format!("the claim task failed: {e}")));
                            break;
                        }
                    }
                }
                connected = async { connecting.as_mut().expect("guarded").await },
                    if connecting.is_some() => {
                    connecting = None;
                    match connected {
                        Ok(Ok(claimer)) => self.claimer = Some(claimer),
                        // Any failure to connect is retried (the server may still be starting,
                        // or refuse connections for a while); a fatal state shows in the claim.
                        Ok(Err(e)) => {
                            let pause = backoff.next();
                            tracing::warn!(
                                target: "workfence",
                                "reconnect claim in {}s error={e}", pause.as_secs_f64()
                            );
                            retry_claim_at = Some(Instant::now() + pause);
                        }
                        Err(e) => {
                            failure = Some(Error::Pool(format!("the connect task failed: {e}")));
                            break;
                        }
                    }
                }
                Some(_) = running.join_next(), if !running.is_empty() => {}
                () = changed => {}
                () = tokio::time::sleep_until(retry_claim_at.unwrap_or_else(Instant::now)),
                    if retry_claim_at.is_some() => {}
            }
        }
        if let Some(connect) = connecting {
            // A connect claims nothing: stop it at once.
            connect.abort();
        }
        self.shut_down(buffer, running, claiming, failure.is_some())
            .await;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Stops claiming (cancelling a long poll in flight: what it claimed before the cancel
    /// arrived is released too), releases the buffer, gives running handlers the grace (none
    /// when `failed`), cancels and releases the rest, stops the heartbeat.
    async fn shut_down(
        mut self,
        mut buffer: VecDeque<Buffered>,
        mut running: JoinSet<()>,
        claiming: Option<JoinHandle<Claimed>>,
        failed: bool,
    ) {
        if let Some(claim) = claiming {
            if let Some((client, closed)) = &self.claimer {
                if !closed.is_cancelled() {
                    if let Err(e) = client.cancel_token().cancel_query(NoTls).await {
                        tracing::warn!(target: "workfence", "cancelling the claim: {e}");
                    }
                }
            }
            match claim.await {
                Ok((sent, Ok(rows))) => {
                    if let Err(e) = self.take(sent, rows, &mut buffer) {
                        tracing::error!(target: "workfence", "error={e}");
                    }
                }
                Ok((_, Err(e)))
                    if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) => {}
                Ok((_, Err(e))) => tracing::warn!(target: "workfence", "claim error={e}"),
                Err(e) => tracing::error!(target: "workfence", "the claim task failed: {e}"),
            }
        }
        for item in buffer.drain(..) {
            let registry = &self.shared.registry;
            if registry.fate(item.id, item.epoch) == Some(Fate::Lost) {
                tracing::warn!(target: "workfence", "refused id={} (lease lost)", item.id);
            } else {
                release(&self.shared, item.id, item.epoch).await;
            }
            registry.forget(item.id, item.epoch);
        }
        let grace = if failed {
            Duration::ZERO
        } else {
            self.settings.shutdown_grace
        };
        let deadline = Instant::now() + grace;
        while !running.is_empty() {
            tokio::select! {
                _ = running.join_next() => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        // The jobs cancelled now release their items themselves.
        self.shared.registry.cancel_all();
        while running.join_next().await.is_some() {}
        self.heartbeat_stop.cancel();
        if !self.heartbeat.is_finished() {
            match (&mut self.heartbeat).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(target: "workfence", "heartbeat error={e}"),
                Err(e) => tracing::warn!(target: "workfence", "the heartbeat task failed: {e}"),
            }
        }
    }
}

/// The claims' connection and a token cancelled when it ends.
type Claimer = (Arc<Client>, CancellationToken);

/// A claim's outcome, with the time its statement was sent (the lease counts from after it).
type Claimed = (
    Instant,
    std::result::Result<Vec<Row>, tokio_postgres::Error>,
);

/// Connects the claims' connection.
async fn connect_claimer(config: &tokio_postgres::Config) -> Result<Claimer> {
    let closed = CancellationToken::new();
    let client = connect(config, None, closed.clone()).await?;
    Ok((Arc::new(client), closed))
}

/// The heartbeat's connection, `LISTEN`ing on [`LEASE_LOST_CHANNEL`], with the renew prepared.
struct Beat {
    client: Client,
    /// Cancelled when the connection ends.
    closed: CancellationToken,
    /// [`RENEW_SQL`], prepared.
    renew: tokio_postgres::Statement,
}

impl Beat {
    /// Connects, prepares the renew and `LISTEN`s (last, so that `pg_stat_activity` shows the
    /// `LISTEN` until the first renew).
    async fn connect(config: &tokio_postgres::Config, registry: &Arc<Registry>) -> Result<Beat> {
        let closed = CancellationToken::new();
        let client = connect(config, Some(Arc::clone(registry)), closed.clone()).await?;
        let renew = client.prepare(RENEW_SQL).await?;
        client
            .batch_execute(&format!("LISTEN {LEASE_LOST_CHANNEL}"))
            .await?;
        Ok(Beat {
            client,
            closed,
            renew,
        })
    }
}

/// The heartbeat: every `lease / 3`, renews every held token it may (one statement on its own
/// connection, which also carries the `LISTEN`); a refused renew marks the token lost and
/// cancels its job. When its connection breaks (or a renew raises a transient error) it
/// reconnects with the backoff, `LISTEN`ing again; meanwhile no renew is made (an error is not a
/// refusal: the jobs go on, and leases may lapse; fencing decides). Ends with an error only for
/// a renew error that retrying cannot fix ([`Error::is_transient`]).
async fn heartbeat(
    first: Beat,
    config: tokio_postgres::Config,
    shared: Arc<Shared>,
    settings: Arc<Settings>,
    stop: CancellationToken,
) -> Result<()> {
    let period = settings.lease / 3;
    let lease = settings.lease.as_secs_f64();
    let mut ticks = interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut beat = Some(first);
    let mut backoff = Backoff::new();
    let mut reconnect_at = Instant::now();
    loop {
        let closed = beat.as_ref().map(|b| b.closed.clone());
        let down = beat.is_none();
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = async { match &closed {
                Some(closed) => closed.cancelled().await,
                None => std::future::pending().await,
            } } => {
                beat = None;
                let pause = backoff.next();
                tracing::warn!(
                    target: "workfence",
                    "reconnect heartbeat in {}s error=the connection closed", pause.as_secs_f64()
                );
                reconnect_at = Instant::now() + pause;
                continue;
            }
            () = tokio::time::sleep_until(reconnect_at), if down => {
                let connected = tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    connected = Beat::connect(&config, &shared.registry) => connected,
                };
                match connected {
                    Ok(connected) => {
                        beat = Some(connected);
                        backoff.reset();
                    }
                    Err(e) => {
                        let pause = backoff.next();
                        tracing::warn!(
                            target: "workfence",
                            "reconnect heartbeat in {}s error={e}", pause.as_secs_f64()
                        );
                        reconnect_at = Instant::now() + pause;
                    }
                }
                continue;
            }
            _ = ticks.tick() => {}
        }
        // While the connection is down, no renew is made.
        let Some(current) = &beat else {
            continue;
        };
        let _gate = shared.registry.renew_gate.lock().await;
        let (ids, epochs) = shared.registry.renewable();
        if ids.is_empty() {
            continue;
        }
        let sent = Instant::now();
        let rows = match current
            .client
            .query(&current.renew, &[&settings.owner, &ids, &epochs, &lease])
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                let e = Error::from(e);
                if !e.is_transient() {
                    return Err(e);
                }
                if current.closed.is_cancelled() || e.needs_new_connection() {
                    beat = None;
                    let pause = backoff.next();
                    tracing::warn!(
                        target: "workfence",
                        "reconnect heartbeat in {}s error={e}", pause.as_secs_f64()
                    );
                    reconnect_at = Instant::now() + pause;
                } else {
                    tracing::warn!(target: "workfence", "renew error={e}");
                }
                continue;
            }
        };
        for row in rows {
            let (id, epoch, renewed): (i64, i64, bool) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            if renewed {
                shared.registry.renewed(id, epoch, sent, settings.lease);
                tracing::debug!(target: "workfence", "renew id={id} ok");
            } else {
                tracing::warn!(target: "workfence", "renew id={id} refused");
                shared.registry.lose(id, epoch, true);
            }
        }
    }
}

/// `work_release` of a held item (shutdown), logged; on a pool connection, never on the claims'
/// one, where a late cancel request could land on it. Sent again after a lost reply
/// ([`settle`]).
async fn release(shared: &Shared, id: i64, epoch: i64) {
    match settle(shared, id, epoch, &Settle::Release).await {
        Ok(Settled::Yes | Settled::Before) => {
            tracing::info!(target: "workfence", "release id={id} epoch={epoch}");
        }
        Ok(Settled::Refused) => tracing::warn!(target: "workfence", "refused id={id} (lease lost)"),
        Err(e) => tracing::error!(target: "workfence", "release id={id} epoch={epoch} error={e}"),
    }
}

/// The error status of a job's span whose lease was lost (feature `otel`).
#[cfg(feature = "otel")]
const LEASE_LOST: &str = "lease lost: the job's result did not count";

/// One job: runs the handler as a task of its own, aborting it when the job is cancelled, then
/// settles the item (finish, fail, release on shutdown; nothing when the lease was lost or the
/// fenced transaction finished it). Every outcome is logged. With the `otel` feature the handler
/// runs in the job's `process <queue>` span, which ends after the settle: error status when the
/// handler failed (an `Err`, with an `exception` event, or a panic), its lease was lost, or it
/// was cancelled at shutdown.
async fn run_job<H: Handler>(
    handler: Arc<H>,
    job: Job,
    shared: Arc<Shared>,
    settings: Arc<Settings>,
) {
    let (id, epoch, attempt) = (job.id, job.epoch, job.attempt);
    let cancel = job.cancellation_token();
    let registry = Arc::clone(&shared.registry);
    // The job's `process <queue>` span, ended when this function returns (after the settle).
    #[cfg(feature = "otel")]
    let span = crate::otel::JobSpan::start(&settings.queue, id, epoch, attempt, job.trace());
    let run = async move { handler.handle(job).await };
    #[cfg(feature = "otel")]
    let run = opentelemetry::context::FutureExt::with_context(run, span.context());
    let mut task = tokio::spawn(run);
    let outcome = tokio::select! {
        biased;
        outcome = &mut task => Some(outcome),
        () = cancel.cancelled() => None,
    };
    let outcome = match outcome {
        Some(outcome) => outcome,
        None => {
            task.abort();
            // Wait until the handler's future is dropped (its fenced transaction, if any, then
            // rolls back) before anything is released.
            let _aborted = task.await;
            match registry.fate(id, epoch) {
                Some(Fate::Shutdown) => {
                    #[cfg(feature = "otel")]
                    span.ended_unfinished("cancelled at shutdown: the item was released");
                    release(&shared, id, epoch).await;
                }
                Some(Fate::Settled) => {}
                _ => {
                    #[cfg(feature = "otel")]
                    span.ended_unfinished(LEASE_LOST);
                    tracing::warn!(target: "workfence", "refused id={id} (lease lost)");
                }
            }
            registry.forget(id, epoch);
            return;
        }
    };
    match registry.fate(id, epoch) {
        Some(Fate::Settled) => {
            if let Ok(Err(e)) = &outcome {
                tracing::debug!(target: "workfence", "id={id} finished, then the handler returned error={e}");
            }
        }
        Some(Fate::Lost) | None => {
            #[cfg(feature = "otel")]
            span.ended_unfinished(LEASE_LOST);
            tracing::warn!(target: "workfence", "refused id={id} (lease lost)");
        }
        Some(Fate::Held | Fate::Shutdown) => {
            registry.quiesce(id, epoch).await;
            let settled = match outcome {
                Ok(Ok(value)) => finish(&shared, id, epoch, value).await,
                Ok(Err(e)) if e.downcast_ref::<Error>().is_some_and(Error::is_lease_lost) => {
                    #[cfg(feature = "otel")]
                    span.failed(&*e);
                    tracing::warn!(target: "workfence", "refused id={id} (lease lost)");
                    Ok(())
                }
                Ok(Err(e)) => {
                    #[cfg(feature = "otel")]
                    span.failed(&*e);
                    fail(&shared, &settings, id, epoch, attempt, &*e).await
                }
                Err(join) => {
                    let text = match join.try_into_panic() {
                        Ok(panic) => panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a non-string panic".to_owned()),
                        Err(e) => e.to_string(),
                    };
                    let panicked = Panicked(text);
                    #[cfg(feature = "otel")]
                    span.failed(&panicked);
                    fail(&shared, &settings, id, epoch, attempt, &panicked).await
                }
            };
            if let Err(e) = settled {
                tracing::error!(target: "workfence", "settling id={id} epoch={epoch} error={e}");
            }
        }
    }
    registry.forget(id, epoch);
}

/// `work_finish(id, owner, epoch, value)` in autocommit, sent again after a lost reply
/// ([`settle`]); logs `finish .. ok` or the refusal.
async fn finish(shared: &Shared, id: i64, epoch: i64, value: Option<Value>) -> Result<()> {
    let value = value.map(Json);
    match settle(shared, id, epoch, &Settle::Finish(&value)).await? {
        Settled::Yes | Settled::Before => {
            tracing::info!(target: "workfence", "finish id={id} epoch={epoch} ok");
        }
        Settled::Refused => tracing::warn!(target: "workfence", "refused id={id} (lease lost)"),
    }
    Ok(())
}

/// `work_fail(id, owner, epoch, error, retry_in)` with the error's text ([`error_text`]: its
/// type, message and `source()` chain, at most 2048 bytes) and the retry policy's delay, sent
/// again after a lost reply ([`settle`]); logs `fail .. error=<its first line>` or the refusal.
async fn fail(
    shared: &Shared,
    settings: &Settings,
    id: i64,
    epoch: i64,
    attempt: i32,
    error: &(dyn std::error::Error + Send + Sync + 'static),
) -> Result<()> {
    let text = error_text(error);
    let retry_in = settings
        .retry
        .as_ref()
        .and_then(|policy| policy(attempt, error))
        .map(|d| d.as_secs_f64());
    match settle(shared, id, epoch, &Settle::Fail(&text, retry_in)).await? {
        Settled::Yes | Settled::Before => {
            tracing::info!(
                target: "workfence",
                "fail id={id} epoch={epoch} error={}",
                first_line(&text)
            );
        }
        Settled::Refused => tracing::warn!(target: "workfence", "refused id={id} (lease lost)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_asks_for_a_batch_only_while_a_handler_is_free() {
        // concurrency 1, batch 5: claim 5 when nothing is held, nothing while any item is held.
        assert_eq!(claim_size(0, 1, 5), Some(5));
        assert_eq!(claim_size(1, 1, 5), None);
        // concurrency 4, batch 4: at most 4 - 1 + 4 = 7 held.
        for held in 0..4 {
            let n = claim_size(held, 4, 4).expect("room");
            assert!(held + usize::try_from(n).unwrap() <= 7);
        }
        assert_eq!(claim_size(4, 4, 4), None);
    }

    #[test]
    fn the_builder_checks_its_settings() {
        let dsn = "host=127.0.0.1 user=postgres";
        let ok = Worker::builder(dsn, "q")
            .owner("me")
            .build()
            .expect("valid");
        assert_eq!(ok.owner(), "me");
        assert_eq!(ok.settings.batch_size, 1);
        assert_eq!(ok.settings.lease, Duration::from_secs(30));
        assert_eq!(ok.settings.poll_wait, Duration::from_secs(5));
        assert_eq!(ok.settings.shutdown_grace, Duration::from_secs(10));
        let four = Worker::builder(dsn, "q")
            .concurrency(4)
            .build()
            .expect("valid");
        assert_eq!(
            four.settings.batch_size, 4,
            "batch_size defaults to concurrency"
        );
        let owner = four.owner().to_owned();
        assert!(
            owner.ends_with(&format!(":{}", std::process::id())),
            "default owner {owner:?} is <hostname>:<pid>"
        );
        let bad = |b: WorkerBuilder, name: &str| match b.build() {
            Err(Error::Config { name: n, .. }) => assert_eq!(n, name),
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: accepted"),
        };
        bad(Worker::builder("host='", "q"), "dsn");
        bad(Worker::builder(dsn, ""), "queue");
        bad(Worker::builder(dsn, "q").owner("  "), "owner");
        bad(Worker::builder(dsn, "q").owner("host\n"), "owner");
        bad(Worker::builder(dsn, "q").owner("x".repeat(257)), "owner");
        bad(Worker::builder(dsn, "q").concurrency(0), "concurrency");
        bad(Worker::builder(dsn, "q").batch_size(0), "batch_size");
        bad(Worker::builder(dsn, "q").batch_size(1001), "batch_size");
        bad(Worker::builder(dsn, "q").lease(Duration::ZERO), "lease");
        bad(
            Worker::builder(dsn, "q").lease(Duration::from_secs(8 * 24 * 3600)),
            "lease",
        );
        bad(
            Worker::builder(dsn, "q").poll_wait(Duration::from_secs(3601)),
            "poll_wait",
        );
    }

    #[test]
    fn the_backoff_doubles_from_half_a_second_to_thirty_and_starts_over() {
        let mut b = Backoff::new();
        let secs: Vec<f64> = (0..9).map(|_| b.next().as_secs_f64()).collect();
        assert_eq!(secs, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(500));
        assert_eq!(format!("{}s", Duration::from_secs(1).as_secs_f64()), "1s");
    }

    #[test]
    fn a_closure_is_a_handler() {
        fn takes<H: Handler>(_: H) {}
        takes(|job: Job| async move { Ok(Some(serde_json::json!({ "id": job.id }))) });
    }
}
