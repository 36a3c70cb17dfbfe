//! `workfence-client-bench`: the overhead of the workfence runner against the same loop in raw
//! SQL calls, in one run (clients/README.md, *How they are tested*; scripts/client-bench.sh
//! computes medians and ratios from its lines).
//!
//! `workfence-client-bench --dsn DSN --items N --rounds R --batch B`: each round enqueues N
//! items (`{}`) into a fresh queue per mode and times, alternating which mode goes first:
//! - `raw`: one connection, `work_claim(queue, owner, 30 s, B)` then `work_finish` per item,
//!   until N are finished;
//! - `library`: a [`workfence::Worker`] with concurrency 1 and batch_size B whose handler
//!   returns `{"ok": true}`, stopped once N are finished.
//!
//! Prints one line per measurement, and nothing else on stdout:
//! `bench lang=rust mode=raw|library round=<r> items=<N> seconds=<s> items_per_s=<x>`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_postgres::NoTls;
use workfence::{Job, Worker};

/// Any error of a run.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The owner name of both modes' claims.
const OWNER: &str = "workfence-client-bench";

/// The command line.
struct Args {
    dsn: String,
    items: usize,
    rounds: usize,
    batch: usize,
}

/// The usage line `--help` prints.
const USAGE: &str = "usage: workfence-client-bench --dsn DSN [--items N] [--rounds R] [--batch B]";

/// Reads `--dsn DSN --items N --rounds R --batch B` (items 1000, rounds 3, batch 10 unless given);
/// `None` for `--help`.
fn args() -> Result<Option<Args>, BoxError> {
    let mut args = Args {
        dsn: String::new(),
        items: 1000,
        rounds: 3,
        batch: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dsn" => args.dsn = value,
            "--items" => args.items = value.parse()?,
            "--rounds" => args.rounds = value.parse()?,
            "--batch" => args.batch = value.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.dsn.is_empty() {
        return Err(USAGE.into());
    }
    if args.items == 0 || args.batch == 0 {
        return Err("--items and --batch must be at least 1".into());
    }
    Ok(Some(args))
}

/// A connection, driven by a task of its own.
async fn connect(dsn: &str) -> Result<tokio_postgres::Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Enqueues `items` items `{}` into `queue` in one statement.
async fn fill(dsn: &str, queue: &str, items: usize) -> Result<(), BoxError> {
    let client = connect(dsn).await?;
    let n = i32::try_from(items)?;
    client
        .execute(
            "SELECT workfence.work_enqueue($1, '{}'::jsonb) FROM generate_series(1, $2)",
            &[&queue, &n],
        )
        .await
        .map_err(workfence::Error::from)?;
    // One helper call too, so that a wrong DSN or a missing extension fails here, not later.
    workfence::item(&client, queue, "no-such-key").await?;
    Ok(())
}

/// The raw loop: claim a batch, finish each item, until `items` are finished.
async fn raw(dsn: &str, queue: &str, items: usize, batch: usize) -> Result<(), BoxError> {
    let client = connect(dsn).await?;
    let claim = client
        .prepare("SELECT id, epoch FROM workfence.work_claim($1, $2, interval '30 s', $3)")
        .await?;
    let finish = client
        .prepare("SELECT workfence.work_finish($1, $2, $3, '{\"ok\": true}'::jsonb)")
        .await?;
    let batch = i32::try_from(batch)?;
    let mut finished = 0;
    while finished < items {
        let rows = client.query(&claim, &[&queue, &OWNER, &batch]).await?;
        if rows.is_empty() {
            return Err(format!("raw: the queue ran dry at {finished} of {items}").into());
        }
        for row in rows {
            let (id, epoch): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            let done: bool = client
                .query_one(&finish, &[&id, &OWNER, &epoch])
                .await?
                .try_get(0)?;
            if !done {
                return Err(format!("raw: finish of {id} refused").into());
            }
            finished += 1;
        }
    }
    Ok(())
}

/// The library: a worker (concurrency 1, batch_size `batch`) stopped once `items` handlers
/// returned; `run` returns after their finishes (the shutdown waits for running jobs).
async fn library(dsn: &str, queue: &str, items: usize, batch: usize) -> Result<(), BoxError> {
    let worker = Worker::builder(dsn, queue)
        .owner(OWNER)
        .concurrency(1)
        .batch_size(batch)
        .poll_wait(Duration::from_secs(1))
        .build()?;
    let handle = worker.handle();
    let done = Arc::new(AtomicUsize::new(0));
    worker
        .run(
            move |_job: Job| {
                let (done, handle) = (Arc::clone(&done), handle.clone());
                async move {
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == items {
                        handle.stop();
                    }
                    Ok(Some(json!({ "ok": true })))
                }
            },
            std::future::pending(),
        )
        .await?;
    Ok(())
}

/// Times one mode on a fresh queue of `items` items and prints its line.
async fn measure(args: &Args, mode: &str, round: usize) -> Result<(), BoxError> {
    let queue = format!(
        "bench_rust_{mode}_{}_{round}_{}",
        std::process::id(),
        Instant::now().elapsed().subsec_nanos()
    );
    fill(&args.dsn, &queue, args.items).await?;
    let started = Instant::now();
    match mode {
        "raw" => raw(&args.dsn, &queue, args.items, args.batch).await?,
        _ => library(&args.dsn, &queue, args.items, args.batch).await?,
    }
    let seconds = started.elapsed().as_secs_f64();
    // usize -> f64 loses nothing at benchmark sizes.
    #[allow(clippy::cast_precision_loss)]
    let per_second = args.items as f64 / seconds;
    println!(
        "bench lang=rust mode={mode} round={round} items={} seconds={seconds:.3} items_per_s={per_second:.1}",
        args.items
    );
    Ok(())
}

/// Runs the rounds; exits 1 with the error on stderr.
#[tokio::main]
async fn main() -> ExitCode {
    let result = async {
        let Some(args) = args()? else {
            println!("{USAGE}");
            return Ok(());
        };
        for round in 1..=args.rounds {
            let order = if round % 2 == 1 {
                ["raw", "library"]
            } else {
                ["library", "raw"]
            };
            for mode in order {
                measure(&args, mode, round).await?;
            }
        }
        Ok::<(), BoxError>(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("workfence-client-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
