//! `workfence-example-worker`: the pg_workfence example worker in Rust, on the `workfence`
//! library (clients/rust). The library runs the loop (long-poll claims, the heartbeat and
//! `LISTEN work_lease_lost`, the fenced transaction, `work_fail`, release on SIGTERM); this
//! program reads its settings from the environment, prints the library's log lines as
//! `[rust pid=<pid>] <event>`, and supplies the stand-in job.

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use workfence::{HandlerResult, Job, Worker};

/// The job's own effect, written in the job's fenced transaction.
const INSERT_SQL: &str =
    "INSERT INTO examples.results (item_id, epoch, worker_pid, output) VALUES ($1, $2, $3, $4)";

/// What `--help` prints.
const USAGE: &str = "usage: workfence-example-worker   (settings from the environment)
  WORKFENCE_DSN            connection string (required), e.g. host=127.0.0.1 port=5432 dbname=app
  WORKFENCE_QUEUE          queue to work (default: examples)
  WORKFENCE_OWNER          owner name (default: the library's, <hostname>:<pid>)
  WORKFENCE_BATCH          batch_size: most items one claim takes (default 5)
  WORKFENCE_CONCURRENCY    handlers running at once (default 1)
  WORKFENCE_LEASE_SECONDS  lease; the heartbeat renews every third of it (default 6)
  WORKFENCE_WAIT_SECONDS   poll_wait: how long one claim waits in the server (default 5)
Runs until SIGTERM or SIGINT, then releases what it holds.";

/// The stand-in job, as the payload describes it: `{"n": 7, "sleep_ms": 40, "fail": false,
/// "heartbeat": true}`.
#[derive(Debug, Deserialize)]
struct Spec {
    /// The input; the output is `n * n`.
    n: i64,
    /// How long the simulated work takes.
    #[serde(default)]
    sleep_ms: u64,
    /// Raise an error instead of producing the output.
    #[serde(default)]
    fail: bool,
    /// `false`: the job's lease is not renewed ([`Job::stop_renewing`]), a stand-in for a
    /// worker that stalls, so that its lease lapses while the job runs.
    #[serde(default = "renewed_by_default")]
    heartbeat: bool,
}

/// The default of [`Spec::heartbeat`]: renew.
fn renewed_by_default() -> bool {
    true
}

/// The handler: sleeps `sleep_ms` (cut short when the job is cancelled), raises if `fail`, else
/// writes `n*n` to `examples.results` and finishes with `{"output": n*n}` in ONE transaction
/// that began with `work_assert`.
async fn stand_in(job: Job) -> HandlerResult {
    let spec: Spec = serde_json::from_value(job.payload.clone())?;
    if !spec.heartbeat {
        job.stop_renewing();
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(spec.sleep_ms)) => {}
        // Lease lost or shutdown: the runner abandons or releases the item.
        () = job.cancelled() => return Ok(None),
    }
    if spec.fail {
        return Err(format!("job {} failed on purpose", spec.n).into());
    }
    let output = spec
        .n
        .checked_mul(spec.n)
        .ok_or_else(|| format!("job {}: n*n does not fit a bigint", spec.n))?;
    let pid = i32::try_from(std::process::id())?;
    let tx = job.transaction().await?;
    tx.execute(INSERT_SQL, &[&job.id, &job.epoch, &pid, &output])
        .await?;
    tx.finish(Some(json!({ "output": output }))).await?;
    Ok(None)
}

/// Prints each event as `[rust pid=<pid>] <message>` on one line (stdout is line-buffered, so
/// each line is flushed as it is written).
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "[rust pid={}] ", std::process::id())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Prints one line the way the library's events are printed.
fn say(text: &str) {
    tracing::info!(target: "workfence", "{text}");
}

/// The value of the environment variable `name`, parsed, or `default` when it is not set.
fn env_or<T>(name: &str, default: T) -> Result<T, String>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{name}={text:?}: {e}")),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// A number of seconds from the environment, as a duration.
fn seconds(name: &str, default: f64) -> Result<Duration, String> {
    let secs: f64 = env_or(name, default)?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{name}={secs}: {e}"))
}

/// The worker, configured from the environment (see [`USAGE`]).
fn worker() -> Result<Worker, Box<dyn std::error::Error>> {
    let dsn = std::env::var("WORKFENCE_DSN").map_err(|e| format!("WORKFENCE_DSN: {e}"))?;
    let queue: String = env_or("WORKFENCE_QUEUE", "examples".to_owned())?;
    let mut builder = Worker::builder(dsn, queue)
        .concurrency(env_or("WORKFENCE_CONCURRENCY", 1)?)
        .batch_size(env_or("WORKFENCE_BATCH", 5)?)
        .lease(seconds("WORKFENCE_LEASE_SECONDS", 6.0)?)
        .poll_wait(seconds("WORKFENCE_WAIT_SECONDS", 5.0)?)
        // Quick retries, so that the examples' tests run fast.
        .retry(|_attempt, _error| Some(Duration::from_millis(200)))
        // On SIGTERM the running job is cancelled and released at once.
        .shutdown_grace(Duration::ZERO);
    if let Ok(owner) = std::env::var("WORKFENCE_OWNER") {
        builder = builder.owner(owner);
    }
    Ok(builder.build()?)
}

/// Reads the settings, runs the worker until SIGTERM or SIGINT, exits 0 (the library logs
/// `exit`); 1 on an error, logged.
#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::stdout)
        .event_format(Line)
        .init();
    let worker = match worker() {
        Ok(worker) => worker,
        Err(e) => {
            say(&format!("error={e}"));
            return ExitCode::FAILURE;
        }
    };
    match worker.run_until_signal(stand_in).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error={e}"));
            ExitCode::FAILURE
        }
    }
}
