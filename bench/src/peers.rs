//! The peer queues, each run by its own runner program through its public
//! API (bench/peers/*), in a database of its own on the same cluster.
//!
//! The runner contract: `RUNNER --dsn URL --jobs N --concurrency C [--batch
//! B]` sets up its schema, empties its queue, enqueues N no-op jobs
//! (untimed), then times C concurrent workers until all N are completed, and
//! prints one JSON line ([`PeerRun`]). `synchronous_commit` is set on the
//! database beforehand. `--batch B` (the Node.js runners only) selects the
//! runner's batched configuration, fetching up to B jobs at a time; what
//! else it changes is in the runner's header and its `config`.
//!
//! Each peer runs in one of three shapes ([`Shape`]): one job per fetch and
//! per completion, as pg_workfence's one-item cells (workload 1); batched by
//! its defaults (awa: claims and completions of up to 512, workload 1 too);
//! or the runner's batched configuration (workload 2, beside pg_workfence's
//! batch claims with one `work_finish_many` per batch).

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use workfence_harness::Cluster;

use crate::{Error, Result};

/// How many jobs a batched peer may hold claimed per worker connection: the
/// largest batch pg_workfence claims in workload 2 (`max_items` 100 on each
/// of its connections), so that a batched peer holds no fewer jobs at once
/// than pg_workfence does.
pub const BATCH_PER_WORKER: usize = 100;

/// How a peer claims and completes its jobs.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// One job per fetch and per completion (workload 1).
    OneAtATime,
    /// Batched by the library's defaults, with nothing to turn on (workload
    /// 1, and compared with the batched peers as well).
    BatchedByDefault,
    /// The runner's batched configuration (workload 2): `--batch` with the
    /// value this gives for C workers.
    Batched(fn(usize) -> usize),
}

/// A peer queue and how to start its runner.
pub struct Peer {
    /// Name in the report.
    pub name: &'static str,
    /// Its database.
    pub database: &'static str,
    /// Program and leading arguments, relative to the repository root where
    /// they name files.
    argv: &'static [&'static str],
    /// The program of a smoke run (`--quick`, whose figures are not
    /// measurements) when it is built apart from the measured one: awa's
    /// unoptimised build (`bench/peers/awa/install.sh --smoke`).
    smoke_program: Option<&'static str>,
    /// How it claims and completes.
    pub shape: Shape,
}

/// graphile-worker's local queue is one per worker pool, shared by its C
/// workers: C × [`BATCH_PER_WORKER`] jobs per fetch.
fn per_pool(concurrency: usize) -> usize {
    concurrency * BATCH_PER_WORKER
}

/// pg-boss's C fetch loops each claim [`BATCH_PER_WORKER`] jobs, as
/// pg_workfence's C connections each claim 100 items.
fn per_worker(_concurrency: usize) -> usize {
    BATCH_PER_WORKER
}

/// Every peer, in report order.
pub static PEERS: [Peer; 6] = [
    Peer {
        name: "awa",
        database: "bench_awa",
        argv: &["bench/peers/awa/target/release/awa-bench"],
        smoke_program: Some("bench/peers/awa/target-smoke/release/awa-bench"),
        shape: Shape::BatchedByDefault,
    },
    Peer {
        name: "graphile-worker",
        database: "bench_graphile",
        argv: &["node", "bench/peers/node/graphile.mjs"],
        smoke_program: None,
        shape: Shape::OneAtATime,
    },
    Peer {
        name: "pg-boss",
        database: "bench_pgboss",
        argv: &["node", "bench/peers/node/pgboss.mjs"],
        smoke_program: None,
        shape: Shape::OneAtATime,
    },
    Peer {
        name: "procrastinate",
        database: "bench_procrastinate",
        argv: &[
            "bench/peers/python/.venv/bin/python",
            "bench/peers/python/procrastinate_runner.py",
        ],
        smoke_program: None,
        shape: Shape::OneAtATime,
    },
    Peer {
        name: "graphile-worker (batched)",
        database: "bench_graphile_batched",
        argv: &["node", "bench/peers/node/graphile.mjs"],
        smoke_program: None,
        shape: Shape::Batched(per_pool),
    },
    Peer {
        name: "pg-boss (batched)",
        database: "bench_pgboss_batched",
        argv: &["node", "bench/peers/node/pgboss.mjs"],
        smoke_program: None,
        shape: Shape::Batched(per_worker),
    },
];

/// What a runner printed.
#[derive(Debug, Deserialize)]
pub struct PeerRun {
    /// The library's exact version.
    pub version: String,
    /// Jobs completed (checked against what was asked).
    pub completed: i64,
    /// The timed phase.
    pub seconds: f64,
    /// WAL written in the timed phase.
    pub wal_bytes: i64,
    /// The notable settings the runner used.
    pub config: String,
}

impl Peer {
    /// The workload its rows belong to: 2 for a batched configuration, 1
    /// otherwise.
    pub fn workload(&self) -> u8 {
        match self.shape {
            Shape::Batched(_) => 2,
            Shape::OneAtATime | Shape::BatchedByDefault => 1,
        }
    }

    /// Whether it claims and completes in batches (by default or as
    /// configured): what the batched target compares with.
    pub fn batched(&self) -> bool {
        !matches!(self.shape, Shape::OneAtATime)
    }

    /// Run the peer once: `jobs` jobs on `concurrency` workers, with
    /// `synchronous_commit` set on its database; `smoke`: a smoke run's
    /// (`--quick`), with its smoke program where it has one.
    pub fn run(
        &self,
        cluster: &Cluster,
        root: &Path,
        jobs: i64,
        concurrency: usize,
        sync_commit: bool,
        smoke: bool,
    ) -> Result<PeerRun> {
        let mut admin = cluster.connect()?;
        // Both names are constants of this file, not input.
        let setting = if sync_commit { "on" } else { "off" };
        admin.batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = {setting}",
            self.database
        ))?;
        let dsn = format!(
            "postgresql://postgres@{}:{}/{}",
            cluster.host(),
            cluster.port(),
            self.database
        );
        let (program, args) = self.argv.split_first().expect("argv is never empty");
        let program = match self.smoke_program {
            Some(smoke_program) if smoke => smoke_program,
            _ => program,
        };
        let resolve = |a: &str| {
            if a.starts_with("bench/") {
                root.join(a).into_os_string()
            } else {
                a.into()
            }
        };
        let output = Command::new(resolve(program))
            .args(args.iter().map(|a| resolve(a)))
            .args(["--dsn", &dsn, "--jobs", &jobs.to_string()])
            .args(["--concurrency", &concurrency.to_string()])
            .args(match self.shape {
                Shape::Batched(batch) => vec!["--batch".to_owned(), batch(concurrency).to_string()],
                Shape::OneAtATime | Shape::BatchedByDefault => Vec::new(),
            })
            .current_dir(root)
            .output()
            .map_err(|e| Error::Bench(format!("{}: cannot start its runner: {e}", self.name)))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(Error::Bench(format!(
                "{} runner failed ({}): {}{}",
                self.name,
                output.status,
                stdout.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let line = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let run: PeerRun = serde_json::from_str(line).map_err(|e| {
            Error::Bench(format!(
                "{}: unreadable runner output {line:?}: {e}",
                self.name
            ))
        })?;
        if run.completed != jobs {
            return Err(Error::Bench(format!(
                "{}: {} of {jobs} jobs completed",
                self.name, run.completed
            )));
        }
        Ok(run)
    }
}
