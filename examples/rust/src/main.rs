//! `workfence-example-worker`: the pg_workfence example worker in Rust (tokio + tokio-postgres).
//!
//! It takes items from a queue and runs their jobs the way the README's worker loop says:
//! `work_claim` with the long poll, the job while a heartbeat renews the lease every lease/3,
//! then `work_assert` + the job's own write + `work_finish` in one transaction; `work_fail` when
//! the job raises; `work_release` of everything still held on SIGTERM (or SIGINT).
//!
//! It keeps two connections:
//! - the *main* one claims and writes (the final transaction, `work_fail`);
//! - the *side* one carries the heartbeat and, at shutdown, the releases. The heartbeat cannot
//!   share the main connection: that one is busy in the long poll or the final transaction.
//!   It also `LISTEN`s on `work_lease_lost`: its connection task (which reads the socket all the
//!   time, busy or idle) hands each notification to a [`LeaseWatch`], and a notification naming a
//!   token the worker holds (id and epoch) stops that job at once, as a refused renew does.
//!
//! Settings come from the environment (see [`Config::from_env`]); every event is one line on
//! stdout, prefixed `[rust pid=<pid>]`.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::io::Write;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, Statement};

/// Any error that ends the worker (a broken connection, a bad setting).
type BoxError = Box<dyn Error + Send + Sync>;

/// The long poll: up to `$4` items under a lease of `$3` seconds, waiting up to `$5` seconds.
const CLAIM_SQL: &str = "SELECT id, key, payload, epoch, attempt, lease_until \
     FROM workfence.work_claim($1, $2, make_interval(secs => $3), $4, make_interval(secs => $5))";
/// The heartbeat's renew (side connection).
const RENEW_SQL: &str = "SELECT workfence.work_renew($1, $2, $3, make_interval(secs => $4))";
/// Raises 55000 unless the token is current; holds the item's row lock to the end of the transaction.
const ASSERT_SQL: &str = "SELECT workfence.work_assert($1, $2, $3)";
/// The job's own effect, written only under `work_assert`.
const INSERT_SQL: &str =
    "INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES ($1, $2, $3, $4)";
/// Marks the item done, in the same transaction as its effect.
const FINISH_SQL: &str = "SELECT workfence.work_finish($1, $2, $3, $4)";
/// Records a job's error; a short retry so that the examples' tests run fast.
const FAIL_SQL: &str =
    "SELECT workfence.work_fail($1, $2, $3, $4, retry_in => make_interval(secs => 0.2))";
/// Hands an item back unfinished (shutdown).
const RELEASE_SQL: &str = "SELECT workfence.work_release($1, $2, $3)";
/// The channel on which a claim that supersedes a lapsed lease names the old token.
const LEASE_LOST_CHANNEL: &str = "work_lease_lost";

/// Writes one event line to stdout, prefixed `[rust pid=<pid>]`, and flushes it.
macro_rules! log {
    ($($arg:tt)*) => {
        log_line(format_args!($($arg)*))
    };
}

/// The body of [`log!`]: one line, flushed at once so that a reader of a pipe sees it.
fn log_line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) =
        writeln!(out, "[rust pid={}] {args}", std::process::id()).and_then(|()| out.flush())
    {
        // A closed stdout must not stop the worker: it still has items to finish or release.
        eprintln!("[rust pid={}] stdout: {e}", std::process::id());
    }
}

/// The worker's settings, from the environment.
struct Config {
    /// `WORKFENCE_DSN`: a libpq connection string.
    dsn: String,
    /// `WORKFENCE_QUEUE` (default `examples`).
    queue: String,
    /// `WORKFENCE_OWNER` (default: the hostname). Not an identity: the epoch is.
    owner: String,
    /// `WORKFENCE_BATCH`: `max_items` per claim (default 5).
    batch: i32,
    /// `WORKFENCE_LEASE_SECONDS` (default 6); the heartbeat renews every third of it.
    lease_seconds: f64,
    /// `WORKFENCE_WAIT_SECONDS`: how long one claim waits in the server (default 5).
    wait_seconds: f64,
    /// This process's id, written into `examples.results.worker_pid`.
    pid: i32,
}

impl Config {
    /// Reads the settings; a missing DSN or a value that does not parse is an error.
    fn from_env() -> Result<Self, BoxError> {
        let dsn = std::env::var("WORKFENCE_DSN").map_err(|e| format!("WORKFENCE_DSN: {e}"))?;
        let owner = match std::env::var("WORKFENCE_OWNER") {
            Ok(owner) => owner,
            Err(std::env::VarError::NotPresent) => whoami::hostname()?,
            Err(e) => return Err(format!("WORKFENCE_OWNER: {e}").into()),
        };
        let config = Config {
            dsn,
            queue: env_or("WORKFENCE_QUEUE", "examples".to_owned())?,
            owner,
            batch: env_or("WORKFENCE_BATCH", 5)?,
            lease_seconds: env_or("WORKFENCE_LEASE_SECONDS", 6.0)?,
            wait_seconds: env_or("WORKFENCE_WAIT_SECONDS", 5.0)?,
            pid: i32::try_from(std::process::id())?,
        };
        // The server checks every argument too; these two also size timers here.
        if !(config.lease_seconds.is_finite() && config.lease_seconds > 0.0) {
            return Err("WORKFENCE_LEASE_SECONDS must be a positive number".into());
        }
        if !(config.wait_seconds.is_finite() && config.wait_seconds >= 0.0) {
            return Err("WORKFENCE_WAIT_SECONDS must be a number >= 0".into());
        }
        Ok(config)
    }

    /// The heartbeat's period: a third of the lease.
    fn renew_every(&self) -> Duration {
        Duration::from_secs_f64(self.lease_seconds / 3.0)
    }
}

/// The value of the environment variable `name`, parsed, or `default` when it is not set.
fn env_or<T>(name: &str, default: T) -> Result<T, BoxError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{name}={text:?}: {e}").into()),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(format!("{name}: {e}").into()),
    }
}

/// Opens a connection and runs its I/O in a task of its own, as tokio-postgres expects.
/// `role` becomes the `application_name` (shown in `pg_stat_activity`) unless the DSN sets one.
/// The task reads the connection's messages with `Connection::poll_message`: notifications on
/// [`LEASE_LOST_CHANNEL`] go to `lease_watch` (when given), notices are logged.
async fn connect(
    dsn: &str,
    role: &str,
    lease_watch: Option<Arc<LeaseWatch>>,
) -> Result<Client, BoxError> {
    let mut config = tokio_postgres::Config::from_str(dsn)?;
    if config.get_application_name().is_none() {
        config.application_name(format!("workfence-example {role}"));
    }
    let (client, mut connection) = config.connect(NoTls).await?;
    let role = role.to_owned();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    if let (Some(watch), LEASE_LOST_CHANNEL) = (&lease_watch, note.channel()) {
                        watch.notified(note.payload());
                    }
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    log!(
                        "connection {role} notice {}: {}",
                        notice.severity(),
                        notice.message()
                    );
                }
                // AsyncMessage is non-exhaustive; nothing else is sent today.
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    log!("connection {role} error={e}");
                    break;
                }
                None => break,
            }
        }
    });
    Ok(client)
}

/// The tokens this worker holds, watched for `work_lease_lost` notifications. A notification
/// whose id AND epoch match a held token (never the owner name: other copies share it) marks
/// that item's lease lost, which stops its job at once. It is a hint that comes when the
/// re-claim commits; the refused renew and `work_assert` remain the ground truth.
#[derive(Default)]
struct LeaseWatch {
    /// Item id -> (the held epoch, the sender that tells the item's job its lease is lost).
    held: Mutex<HashMap<i64, (i64, watch::Sender<bool>)>>,
}

/// The part of a `work_lease_lost` payload the worker matches on (other fields are ignored).
#[derive(Deserialize)]
struct LostToken {
    /// The item's id.
    id: i64,
    /// The superseded epoch.
    epoch: i64,
}

impl LeaseWatch {
    /// Starts watching the token (`id`, `epoch`): the receiver turns true if it is notified lost.
    fn watch(&self, id: i64, epoch: i64) -> watch::Receiver<bool> {
        let (lost, receiver) = watch::channel(false);
        self.lock().insert(id, (epoch, lost));
        receiver
    }

    /// Stops watching the token (`id`, `epoch`), if it is still watched.
    fn forget(&self, id: i64, epoch: i64) {
        let mut held = self.lock();
        if held
            .get(&id)
            .is_some_and(|(held_epoch, _)| *held_epoch == epoch)
        {
            held.remove(&id);
        }
    }

    /// A notification's payload: when it names a watched token, logs it and marks it lost.
    fn notified(&self, payload: &str) {
        let token: LostToken = match serde_json::from_str(payload) {
            Ok(token) => token,
            Err(e) => {
                log!("error=unreadable {LEASE_LOST_CHANNEL} payload {payload:?}: {e}");
                return;
            }
        };
        let mut held = self.lock();
        if held
            .get(&token.id)
            .is_some_and(|(epoch, _)| *epoch == token.epoch)
        {
            if let Some((epoch, lost)) = held.remove(&token.id) {
                log!("lease lost (notified) id={} epoch={epoch}", token.id);
                lost.send_replace(true);
            }
        }
    }

    /// The map, also after a panic elsewhere while it was locked (it stays consistent).
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (i64, watch::Sender<bool>)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Becomes true once SIGTERM or SIGINT arrives. Each wait of the worker selects on it, and the
/// loop checks it before taking each item, so a signal that arrives mid-transaction is not missed.
struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Installs the signal handlers (they must exist before the first signal can be caught).
    fn listen() -> std::io::Result<Self> {
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let (requested, receiver) = watch::channel(false);
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            log!("{name}: stopping");
            requested.send_replace(true);
        });
        Ok(Shutdown(receiver))
    }

    /// Whether a stop was asked for.
    fn requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once a stop is asked for (at once if it already was).
    async fn wait(&mut self) {
        if self.0.wait_for(|&stop| stop).await.is_err() {
            // The signal task is gone without a signal: no stop will ever come.
            std::future::pending::<()>().await;
        }
    }
}

/// A job, as the payload describes it: `{"n": <int>, "sleep_ms": <int>, "fail": <bool>}`.
#[derive(Debug, Deserialize)]
struct Job {
    /// The input; the output is `n * n`.
    n: i64,
    /// How long the simulated work takes.
    #[serde(default)]
    sleep_ms: u64,
    /// Raise an error instead of producing the output.
    #[serde(default)]
    fail: bool,
    /// `false`: the heartbeat does not renew this item, standing in for a worker that stalls (a
    /// GC pause, a network partition) so that its lease lapses while the job runs.
    #[serde(default = "renewed_by_default")]
    heartbeat: bool,
}

/// The default of [`Job::heartbeat`]: renew.
fn renewed_by_default() -> bool {
    true
}

impl Job {
    /// Does the work: sleeps `sleep_ms` (cancel-safe: dropping the future stops it), then fails
    /// on purpose or returns `n * n`.
    async fn run(&self) -> Result<i64, String> {
        tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        if self.fail {
            return Err(format!("job {} failed on purpose", self.n));
        }
        self.n
            .checked_mul(self.n)
            .ok_or_else(|| format!("job {}: n*n does not fit a bigint", self.n))
    }
}

/// One claimed item: its token (with the worker's owner) and its job. Watched by the
/// [`LeaseWatch`] from the claim until it is dropped.
struct Claimed {
    /// The item's id.
    id: i64,
    /// The fencing token this claim handed out.
    epoch: i64,
    /// The job, or why its payload could not be read (the item then fails).
    job: Result<Job, String>,
    /// Turns true when a `work_lease_lost` notification names this token.
    lost: watch::Receiver<bool>,
    /// Where the token is watched (forgotten on drop).
    lease_watch: Arc<LeaseWatch>,
}

impl Claimed {
    /// Reads a row of `work_claim` and starts watching its token.
    fn from_row(row: &Row, lease_watch: &Arc<LeaseWatch>) -> Result<Self, tokio_postgres::Error> {
        let Json(payload) = row.try_get::<_, Json<serde_json::Value>>("payload")?;
        let job = serde_json::from_value(payload).map_err(|e| format!("bad payload: {e}"));
        let (id, epoch) = (row.try_get("id")?, row.try_get("epoch")?);
        Ok(Claimed {
            id,
            epoch,
            job,
            lost: lease_watch.watch(id, epoch),
            lease_watch: Arc::clone(lease_watch),
        })
    }

    /// Whether a notification said this token is lost.
    fn notified_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves when a notification says this token is lost (never, if none does).
    async fn lost(&self) {
        if self.lost.clone().wait_for(|&lost| lost).await.is_err() {
            // The watch forgot the token without a loss: nothing will come.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Claimed {
    /// Settled, released or abandoned: stop watching the token.
    fn drop(&mut self) {
        self.lease_watch.forget(self.id, self.epoch);
    }
}

/// The side connection: the heartbeat's renews and the shutdown's releases.
struct Side {
    /// The connection.
    client: Client,
    /// [`RENEW_SQL`], prepared.
    renew: Statement,
    /// [`RELEASE_SQL`], prepared.
    release: Statement,
}

impl Side {
    /// Connects, `LISTEN`s on [`LEASE_LOST_CHANNEL`] (the notifications go to `lease_watch`)
    /// and prepares the statements.
    async fn connect(dsn: &str, lease_watch: Arc<LeaseWatch>) -> Result<Self, BoxError> {
        let client = connect(dsn, "side", Some(lease_watch)).await?;
        client
            .batch_execute(&format!("LISTEN {LEASE_LOST_CHANNEL}"))
            .await?;
        Ok(Side {
            renew: client.prepare(RENEW_SQL).await?,
            release: client.prepare(RELEASE_SQL).await?,
            client,
        })
    }

    /// Hands `item` back unfinished. This runs here rather than on the main connection because
    /// a cancel request sent there to end the long poll can land late, on the next statement.
    async fn release(&self, owner: &str, item: &Claimed) -> Result<(), BoxError> {
        let released: bool = self
            .client
            .query_one(&self.release, &[&item.id, &owner, &item.epoch])
            .await?
            .try_get(0)?;
        if released {
            log!("release id={} epoch={}", item.id, item.epoch);
        } else {
            log!("refused id={} (lease lost)", item.id);
        }
        Ok(())
    }
}

/// The heartbeat of one item: a task that renews its lease on the side connection every
/// lease/3, and tells the job to stop (through `lost`) when a renew is refused. For a job whose
/// payload says `"heartbeat": false` the task renews nothing and only waits to be stopped.
struct Heartbeat {
    /// Dropping it stops the task.
    stop: oneshot::Sender<()>,
    /// Set to true by the task when a renew returned false: the lease is lost.
    lost: watch::Receiver<bool>,
    /// The task; it ends when stopped, when the lease is lost, or on a connection error.
    task: JoinHandle<Result<(), tokio_postgres::Error>>,
}

impl Heartbeat {
    /// Starts renewing `item`'s lease (only waiting to be stopped unless `renew`).
    fn start(side: Arc<Side>, config: &Config, item: &Claimed, renew: bool) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (lost_sender, lost) = watch::channel(false);
        let (id, epoch, owner, lease) = (
            item.id,
            item.epoch,
            config.owner.clone(),
            config.lease_seconds,
        );
        let period = config.renew_every();
        let task = tokio::spawn(async move {
            if !renew {
                // Resolves (with an error) when the sender is dropped: that is the stop.
                let _stopped = stopped.await;
                return Ok(());
            }
            let mut ticks = interval_at(Instant::now() + period, period);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    // Resolves (with an error) when the sender is dropped.
                    _ = &mut stopped => return Ok(()),
                    _ = ticks.tick() => {}
                }
                let renewed: bool = side
                    .client
                    .query_one(&side.renew, &[&id, &owner, &epoch, &lease])
                    .await?
                    .try_get(0)?;
                log!("renew id={id} {}", if renewed { "ok" } else { "refused" });
                if !renewed {
                    lost_sender.send_replace(true);
                    return Ok(());
                }
            }
        });
        Heartbeat { stop, lost, task }
    }

    /// Resolves when the task has ended on its own: the lease is lost (or the side connection
    /// failed, which [`Heartbeat::stop`] then reports).
    async fn ended(&mut self) {
        // Ok: the lease was lost; Err: the task dropped the sender, having failed.
        if self.lost.wait_for(|&lost| lost).await.is_err() {
            log!("heartbeat ended");
        }
    }

    /// Stops the task and waits for it, so that no renew is in flight afterwards (a renew
    /// would wait on the final transaction's row lock). Returns the side connection's error.
    async fn stop(self) -> Result<(), BoxError> {
        drop(self.stop);
        Ok(self.task.await??)
    }
}

/// How a job run ended.
enum Outcome {
    /// The job returned: its output or its error.
    Ran(Result<i64, String>),
    /// A renew was refused, or a notification said so: somebody else holds the item now.
    LeaseLost,
    /// SIGTERM: the item is to be released.
    Shutdown,
}

/// The worker: the main connection with its statements, the side connection, the settings.
struct Worker {
    /// The settings.
    config: Config,
    /// The main connection: claims, the final transactions, fails.
    main: Client,
    /// [`CLAIM_SQL`] prepared on `main`.
    claim: Statement,
    /// [`ASSERT_SQL`] prepared on `main`.
    assert: Statement,
    /// [`INSERT_SQL`] prepared on `main`.
    insert: Statement,
    /// [`FINISH_SQL`] prepared on `main`.
    finish: Statement,
    /// [`FAIL_SQL`] prepared on `main`.
    fail: Statement,
    /// The side connection (shared with the heartbeat tasks).
    side: Arc<Side>,
    /// The held tokens, which the side connection's notifications are matched against.
    lease_watch: Arc<LeaseWatch>,
    /// Set by SIGTERM/SIGINT.
    shutdown: Shutdown,
}

impl Worker {
    /// Connects twice and prepares every statement (so a missing table fails at start).
    async fn connect(config: Config, shutdown: Shutdown) -> Result<Self, BoxError> {
        let main = connect(&config.dsn, "main", None).await?;
        let lease_watch = Arc::new(LeaseWatch::default());
        let side = Arc::new(Side::connect(&config.dsn, Arc::clone(&lease_watch)).await?);
        Ok(Worker {
            claim: main.prepare(CLAIM_SQL).await?,
            assert: main.prepare(ASSERT_SQL).await?,
            insert: main.prepare(INSERT_SQL).await?,
            finish: main.prepare(FINISH_SQL).await?,
            fail: main.prepare(FAIL_SQL).await?,
            main,
            side,
            lease_watch,
            config,
            shutdown,
        })
    }

    /// The loop: claim, run each item; on shutdown release what is held, then return.
    async fn run(&mut self) -> Result<(), BoxError> {
        log!(
            "start queue={} owner={} batch={} lease={}s wait={}s",
            self.config.queue,
            self.config.owner,
            self.config.batch,
            self.config.lease_seconds,
            self.config.wait_seconds
        );
        while !self.shutdown.requested() {
            let mut held = self.claim().await?.into_iter();
            for item in held.by_ref() {
                if self.shutdown.requested() || !self.process(&item).await? {
                    self.side.release(&self.config.owner, &item).await?;
                    break;
                }
            }
            // Left over only when stopping: the items of the batch not yet started.
            for item in held {
                self.side.release(&self.config.owner, &item).await?;
            }
        }
        Ok(())
    }

    /// One long-poll claim, raced against the shutdown. On a signal the waiting statement is
    /// cancelled with the connection's cancel token and then awaited: it ends with 57014, or with
    /// the items it had claimed before the cancel arrived, which the caller releases.
    async fn claim(&mut self) -> Result<Vec<Claimed>, BoxError> {
        let params: [&(dyn ToSql + Sync); 5] = [
            &self.config.queue,
            &self.config.owner,
            &self.config.lease_seconds,
            &self.config.batch,
            &self.config.wait_seconds,
        ];
        let claim = self.main.query(&self.claim, &params);
        tokio::pin!(claim);
        let rows = tokio::select! {
            // Poll the claim first, so that its statement is sent before any cancel.
            biased;
            rows = &mut claim => rows,
            () = self.shutdown.wait() => {
                self.main.cancel_token().cancel_query(NoTls).await?;
                claim.await
            }
        };
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) && self.shutdown.requested() => {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let item = Claimed::from_row(row, &self.lease_watch)?;
            let attempt: i32 = row.try_get("attempt")?;
            log!(
                "claim id={} epoch={} attempt={attempt}",
                item.id,
                item.epoch
            );
            claimed.push(item);
        }
        Ok(claimed)
    }

    /// Runs one item's job under a heartbeat and records the outcome. Returns false when a
    /// shutdown interrupted it: the item is still held and must be released. An item whose
    /// lease was lost (a refused renew, or a notification, also while it waited its turn) is
    /// abandoned: no finish, no fail, no release.
    async fn process(&mut self, item: &Claimed) -> Result<bool, BoxError> {
        if item.notified_lost() {
            log!("refused id={} (lease lost)", item.id);
            return Ok(true);
        }
        let job = match &item.job {
            Ok(job) => job,
            Err(error) => {
                self.fail(item, error).await?;
                return Ok(true);
            }
        };
        let mut heartbeat =
            Heartbeat::start(Arc::clone(&self.side), &self.config, item, job.heartbeat);
        let outcome = tokio::select! {
            result = job.run() => Outcome::Ran(result),
            () = heartbeat.ended() => Outcome::LeaseLost,
            () = item.lost() => Outcome::LeaseLost,
            () = self.shutdown.wait() => Outcome::Shutdown,
        };
        // Before the final transaction: a renew in flight would wait on work_assert's lock.
        heartbeat.stop().await?;
        match outcome {
            Outcome::Ran(Ok(output)) => self.finish(item, output).await?,
            Outcome::Ran(Err(error)) => self.fail(item, &error).await?,
            Outcome::LeaseLost => log!("refused id={} (lease lost)", item.id),
            Outcome::Shutdown => return Ok(false),
        }
        Ok(true)
    }

    /// The job's effect and the finish in ONE transaction, fenced by `work_assert`. A 55000
    /// from the assert means the lease is lost: roll back (a COMMIT sent after the error would
    /// be a rollback that the driver reports as success, so it is not sent).
    async fn finish(&mut self, item: &Claimed, output: i64) -> Result<(), BoxError> {
        let owner = &self.config.owner;
        let tx = self.main.transaction().await?;
        if let Err(e) = tx
            .execute(&self.assert, &[&item.id, owner, &item.epoch])
            .await
        {
            if e.code() != Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) {
                return Err(e.into());
            }
            tx.rollback().await?;
            log!("refused id={} (lease lost)", item.id);
            return Ok(());
        }
        tx.execute(
            &self.insert,
            &[&item.id, &item.epoch, &self.config.pid, &output],
        )
        .await?;
        let result = Json(json!({ "output": output }));
        let finished: bool = tx
            .query_one(&self.finish, &[&item.id, owner, &item.epoch, &result])
            .await?
            .try_get(0)?;
        // Under the assert's lock the finish cannot be refused; if it were, keep no effect.
        if finished {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        log!(
            "finish id={} epoch={} {}",
            item.id,
            item.epoch,
            if finished { "ok" } else { "false" }
        );
        Ok(())
    }

    /// Records the job's error with `work_fail`: retried shortly, or dead-lettered once the
    /// item's attempts are used up.
    async fn fail(&self, item: &Claimed, error: &str) -> Result<(), BoxError> {
        let recorded: bool = self
            .main
            .query_one(
                &self.fail,
                &[&item.id, &self.config.owner, &item.epoch, &error],
            )
            .await?
            .try_get(0)?;
        if recorded {
            log!("fail id={} error={error}", item.id);
        } else {
            log!("refused id={} (lease lost)", item.id);
        }
        Ok(())
    }
}

/// What `--help` prints: the settings [`Config::from_env`] reads.
const USAGE: &str = "usage: workfence-example-worker   (settings from the environment)
  WORKFENCE_DSN            connection string (required), e.g. host=127.0.0.1 port=5432 dbname=app
  WORKFENCE_QUEUE          queue to work (default: examples)
  WORKFENCE_OWNER          owner name (default: the hostname; fencing does not rely on it)
  WORKFENCE_BATCH          max_items per claim (default 5)
  WORKFENCE_LEASE_SECONDS  lease length; the heartbeat renews every third of it (default 6)
  WORKFENCE_WAIT_SECONDS   how long one claim waits in the server (default 5)
Runs until SIGTERM or SIGINT, then releases what it holds.";

/// Reads the settings, runs the worker until SIGTERM, exits 0 (1 on an error, logged).
#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        // A reader closing the pipe early (`--help | head -1`) is no error.
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), "{USAGE}");
        return ExitCode::SUCCESS;
    }
    let result = async {
        let config = Config::from_env()?;
        let shutdown = Shutdown::listen()?;
        Worker::connect(config, shutdown).await?.run().await
    }
    .await;
    match result {
        Ok(()) => {
            log!("exit");
            ExitCode::SUCCESS
        }
        Err(e) => {
            log!("error={e}");
            log!("exit status=1");
            ExitCode::FAILURE
        }
    }
}
