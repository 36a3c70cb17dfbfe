//! awa-bench: benchmark runner for the `awa` job queue (crate awa 0.6.9),
//! one of the peer contenders of scripts/bench.sh (issue 4).
//!
//! Usage: awa-bench --dsn postgresql://postgres@127.0.0.1:PORT/DB --jobs N --concurrency C
//!
//! Steps (the runner contract in the bench driver):
//!  1. Schema, untimed: `awa::migrations::run` (the canonical migrations),
//!     then `QueueStorage::install` with the default `QueueStorageConfig`
//!     (schema `awa`, 16 queue / 8 lease / 8 claim slots, 1 stripe, receipt
//!     claims on). That is the 0.6 default worker engine; `install` lays down
//!     its substrate and marks it active, which `Client::start` would also
//!     do by itself on a fresh database (but only if no job was enqueued
//!     before the first start). Both calls are idempotent.
//!  2. Cleanup, untimed: `QueueStorage::reset` (the public API awa's own
//!     benchmark harness uses): truncates every queue-storage table
//!     (ready/done/lease/claim rings, rollups, DLQ) and restarts the rings.
//!  3. Enqueue, untimed: N no-op jobs (kind `noop`, args `{}`) in queue
//!     `bench` with default `InsertOpts`, in one bulk COPY through
//!     `QueueStorage::enqueue_params_copy`, committed before timing starts.
//!  4. Timed: read pg_current_wal_insert_lsn(), start the timer, build and start an
//!     `awa::Client` with one queue, `QueueConfig { max_workers: C, .. }` and
//!     a handler that returns `JobResult::Completed`; poll awa's terminal
//!     counters (TERMINAL_COUNT_SQL) every 20 ms on a separate connection, so
//!     the end time has ~20 ms resolution; stop the timer when N jobs are
//!     terminal, read the LSN again.
//!  5. Verify: `QueueStorage::queue_counts` (exact) reports 0 available,
//!     0 running, N terminal, no pruned failures, and no job of the queue is
//!     failed/cancelled (done_entries), deferred (retry/schedule) or in the
//!     DLQ, i.e. exactly N completed.
//!  6. `Client::shutdown`, print one JSON line on stdout.
//!
//! Settings that differ from awa's defaults:
//!  * `max_workers = C` (awa default 50): C concurrent handler executions.
//!  * Connection pool: max(C, 5) connections (sqlx default would be 10).
//!    awa pins three pool connections for the life of a client (the
//!    dispatcher's LISTEN connection, the admin-cancel LISTEN connection and
//!    the maintenance leader's advisory-lock session), and its maintenance
//!    leader's batch-operation pass holds one more connection while it
//!    acquires another. With 4 connections the pool starves (measured: runs
//!    stall for the 30 s sqlx acquire timeout), so 5 is the smallest pool
//!    awa 0.6.9 runs on. Claims, completion batches, heartbeats and
//!    maintenance share what is not pinned. The completion poller, the LSN
//!    reads and the verification use one extra connection of their own.
//!  * `poll_interval = 20 ms` (default 200 ms). awa wakes its dispatcher by
//!    LISTEN/NOTIFY and on freed worker capacity, but the jobs were enqueued
//!    before the worker started, so with the default the first claim would
//!    wait for the first 200 ms poll tick: a benchmark artefact, not a cost
//!    of the queue.
//!  Everything else is default: one claimer, claims of up to 512 jobs per
//!  round-trip (bounded by free worker slots), completion batcher with
//!  batches of up to 512 flushed every 1 ms on 1 shard (so awa is batched by
//!  its defaults, with nothing to turn on: unlike graphile-worker and
//!  pg-boss it has no separate batched run, and the bench compares this run
//!  with pg_workfence's batch cells too), heartbeat 30 s,
//!  deadline 5 min, queue/claim/lease ring rotation every 1 s, no DLQ, no
//!  lifecycle hooks.

use awa::{
    insert, migrations, Client, InsertOpts, JobArgs, JobResult, QueueConfig, QueueStorage,
    QueueStorageConfig,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// The exact awa version; Cargo.toml pins `awa = "=0.6.9"`.
const AWA_VERSION: &str = "0.6.9";
const QUEUE: &str = "bench";
const POLL: Duration = Duration::from_millis(20);
const DISPATCH_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Smallest pool awa 0.6.9 runs on without starving (see the header).
const MIN_POOL: u32 = 5;
/// Give up when no job completes for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Serialize, Deserialize, JobArgs)]
struct Noop {}

struct Args {
    dsn: String,
    jobs: i64,
    concurrency: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut dsn = None;
    let mut jobs = None;
    let mut concurrency = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("missing value after {flag}"))?;
        match flag.as_str() {
            "--dsn" => dsn = Some(value),
            "--jobs" => {
                jobs = Some(
                    value
                        .parse::<i64>()
                        .map_err(|e| format!("bad --jobs {value}: {e}"))?,
                )
            }
            "--concurrency" => {
                concurrency = Some(
                    value
                        .parse::<u32>()
                        .map_err(|e| format!("bad --concurrency {value}: {e}"))?,
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let args = Args {
        dsn: dsn.ok_or("--dsn is required")?,
        jobs: jobs.ok_or("--jobs is required")?,
        concurrency: concurrency.ok_or("--concurrency is required")?,
    };
    if args.jobs < 1 || args.concurrency < 1 {
        return Err("--jobs and --concurrency must be at least 1".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("awa-bench: {msg}");
            eprintln!("usage: awa-bench --dsn URL --jobs N --concurrency C");
            std::process::exit(2);
        }
    };
    match run(&args).await {
        Ok(line) => println!("{line}"),
        Err(err) => {
            eprintln!("awa-bench: error: {err}");
            std::process::exit(1);
        }
    }
}

async fn run(args: &Args) -> Result<String, BoxError> {
    let n = args.jobs;
    let c = args.concurrency;
    let pool_size = c.max(MIN_POOL);

    let pool = PgPoolOptions::new()
        .max_connections(pool_size)
        .connect(&args.dsn)
        .await?;
    // Separate connection for the LSN reads and the completion poller.
    let monitor = PgPoolOptions::new()
        .max_connections(1)
        .connect(&args.dsn)
        .await?;

    // 1. Schema (idempotent).
    migrations::run(&pool).await?;
    let store = QueueStorage::new(QueueStorageConfig::default())?;
    store.install(&pool).await?;
    if !store.terminal_counter_trusted(&pool).await? {
        // The completion poller reads awa's terminal counters; they are
        // authoritative on any schema installed by awa >= 0.6 (fresh here).
        return Err("awa terminal counter is not trusted on this schema".into());
    }

    // 2. Empty queue.
    store.reset(&pool).await?;
    let leftover = store.queue_counts(&pool, QUEUE).await?;
    if leftover.available != 0 || leftover.running != 0 || leftover.terminal != 0 {
        return Err(format!("queue not empty after reset: {leftover:?}").into());
    }

    // 3. Enqueue N jobs in one bulk COPY (committed when it returns).
    let opts = InsertOpts {
        queue: QUEUE.into(),
        ..Default::default()
    };
    let params = (0..n)
        .map(|_| insert::params_with(&Noop {}, opts.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let enqueue_start = Instant::now();
    let inserted = store.enqueue_params_copy(&pool, &params).await?;
    drop(params);
    if inserted as i64 != n {
        return Err(format!("enqueued {inserted} jobs, expected {n}").into());
    }
    let queued = store.queue_counts(&monitor, QUEUE).await?;
    if queued.available != n {
        return Err(format!("expected {n} available jobs after enqueue, got {queued:?}").into());
    }
    eprintln!(
        "awa-bench: enqueued {n} jobs in {:.3}s; pool {pool_size}, {c} workers",
        enqueue_start.elapsed().as_secs_f64()
    );

    // 4. Timed phase.
    let lsn_before: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(&monitor)
        .await?;
    let start = Instant::now();

    let client = Client::builder(pool.clone())
        .queue(
            QUEUE,
            QueueConfig {
                max_workers: c,
                poll_interval: DISPATCH_POLL_INTERVAL,
                ..QueueConfig::default()
            },
        )
        .register::<Noop, _, _>(|_args, _ctx| async { Ok(JobResult::Completed) })
        .build()?;
    client.start().await?;

    let wait = wait_for_terminal(&monitor, n).await;
    let seconds = start.elapsed().as_secs_f64();
    let lsn_after: String = match wait {
        Ok(()) => {
            sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
                .fetch_one(&monitor)
                .await?
        }
        Err(err) => {
            client.shutdown(Duration::from_secs(5)).await;
            return Err(err);
        }
    };
    let wal_bytes: i64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint")
            .bind(&lsn_after)
            .bind(&lsn_before)
            .fetch_one(&monitor)
            .await?;

    // 5. Verify from the database.
    let verify_start = Instant::now();
    let verified = verify(&store, &monitor, n).await;
    eprintln!(
        "awa-bench: timed {seconds:.3}s, verified in {:.3}s",
        verify_start.elapsed().as_secs_f64()
    );

    // 6. Shut down.
    client.shutdown(Duration::from_secs(10)).await;
    let completed = verified?;

    let config = format!(
        "awa::Client, queue-storage engine (defaults: 16 queue/8 lease/8 claim slots, \
         receipt claims, 1 s ring rotation), max_workers={c}, sqlx pool {pool_size} \
         (=max(C,5): awa pins 3 for LISTEN x2 + leader lock and deadlocks below 5), \
         batched by its defaults, nothing to turn on (so no separate batched run): \
         1 claimer with claims <=512/round-trip, completion batcher <=512 jobs per 1 ms \
         flush on 1 shard; poll_interval 20 ms (default 200) + LISTEN/NOTIFY; bulk COPY \
         enqueue; completion polled every 20 ms on 1 extra connection"
    );
    let line = serde_json::json!({
        "contender": "awa",
        "version": AWA_VERSION,
        "jobs": n,
        "concurrency": c,
        "seconds": seconds,
        "wal_bytes": wal_bytes,
        "completed": completed,
        "config": config,
    });
    Ok(line.to_string())
}

/// Cheap terminal count for the completion poller: the counter-fed part of
/// `QueueStorage::queue_counts` (awa 0.6.9, `queue_counts_exact` with a
/// trusted terminal counter) without its `available`/`running` scans, which
/// expand every open claim and cost seconds per call at 10k jobs (and, as a
/// long query, pin the MVCC horizon that awa's rollups wait for). Counts
/// completed + failed + cancelled, live and pruned, for one queue.
const TERMINAL_COUNT_SQL: &str = r#"
    WITH pruned AS (
        SELECT
            COALESCE(sum(GREATEST(
                COALESCE(lanes.pruned_completed_count, 0),
                COALESCE(rollups.pruned_completed_count, 0)
            )), 0)::bigint
            + COALESCE(sum(COALESCE(rollups.pruned_failed_count, 0)), 0)::bigint AS n
        FROM (
            SELECT queue, priority, pruned_completed_count
            FROM awa.queue_lanes WHERE queue = $1
        ) AS lanes
        FULL OUTER JOIN (
            SELECT queue, priority, pruned_completed_count, pruned_failed_count
            FROM awa.queue_terminal_rollups WHERE queue = $1
        ) AS rollups USING (queue, priority)
    )
    SELECT (SELECT n FROM pruned) + GREATEST(0,
        COALESCE((SELECT sum(live_terminal_count) FROM awa.queue_terminal_live_counts
                  WHERE queue = $1), 0)
        + COALESCE((SELECT sum(terminal_delta) FROM awa.queue_terminal_count_deltas
                    WHERE queue = $1), 0)
        + COALESCE((SELECT sum(completed_count) FROM awa.receipt_completion_batches
                    WHERE queue = $1), 0)
        - COALESCE((SELECT count(*) FROM awa.receipt_completion_tombstones
                    WHERE queue = $1), 0)
    )::bigint
"#;

/// Poll the terminal count every POLL until it reaches `n`.
async fn wait_for_terminal(monitor: &PgPool, n: i64) -> Result<(), BoxError> {
    let mut last = -1i64;
    let mut last_change = Instant::now();
    let mut polls = 0u64;
    let mut poll_time = Duration::ZERO;
    loop {
        let t = Instant::now();
        let terminal: i64 = sqlx::query_scalar(TERMINAL_COUNT_SQL)
            .bind(QUEUE)
            .fetch_one(monitor)
            .await?;
        poll_time += t.elapsed();
        polls += 1;
        if terminal >= n {
            eprintln!(
                "awa-bench: {polls} completion polls, mean {:.2} ms each",
                poll_time.as_secs_f64() * 1000.0 / polls as f64
            );
            return Ok(());
        }
        if terminal != last {
            last = terminal;
            last_change = Instant::now();
        } else if last_change.elapsed() > STALL_TIMEOUT {
            return Err(format!(
                "no progress for {}s: {terminal} of {n} jobs terminal",
                STALL_TIMEOUT.as_secs()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Check that exactly `n` jobs of the queue completed successfully and that
/// nothing else is left; returns the completed count.
async fn verify(store: &QueueStorage, monitor: &PgPool, n: i64) -> Result<i64, BoxError> {
    // Exact counts (awa's own API). `terminal` counts completed + failed +
    // cancelled, live and already pruned into rollups by ring rotation.
    let counts = store.queue_counts(monitor, QUEUE).await?;
    // Live terminal rows that are not successes (successful receipt
    // completions are stored as compact batches, everything else here),
    // jobs waiting for a retry or schedule, dead-lettered jobs.
    let (failed_live, deferred, dlq): (i64, i64, i64) = sqlx::query_as(
        r#"
        SELECT
            (SELECT count(*) FROM awa.done_entries
              WHERE queue = $1 AND state <> 'completed')::bigint,
            (SELECT count(*) FROM awa.deferred_jobs WHERE queue = $1)::bigint,
            (SELECT count(*) FROM awa.dlq_entries WHERE queue = $1)::bigint
        "#,
    )
    .bind(QUEUE)
    .fetch_one(monitor)
    .await?;
    let completed = counts.terminal - failed_live - counts.pruned_failed;
    if counts.available != 0
        || counts.running != 0
        || counts.pruned_failed != 0
        || failed_live != 0
        || deferred != 0
        || dlq != 0
        || completed != n
    {
        return Err(format!(
            "verification failed: expected {n} completed; queue_counts {counts:?}, \
             failed/cancelled {failed_live}, deferred {deferred}, dlq {dlq}"
        )
        .into());
    }
    Ok(completed)
}
