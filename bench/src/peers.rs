//! The peer queues, each run by its own runner program through its public
//! API (bench/peers/*), in a database of its own on the same cluster.
//!
//! The runner contract: `RUNNER --dsn URL --jobs N --concurrency C` sets up
//! its schema, empties its queue, enqueues N no-op jobs (untimed), then times
//! C concurrent workers until all N are completed, and prints one JSON line
//! ([`PeerRun`]). `synchronous_commit` is set on the database beforehand.

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use workfence_harness::Cluster;

use crate::{Error, Result};

/// A peer queue and how to start its runner.
pub struct Peer {
    /// Name in the report.
    pub name: &'static str,
    /// Its database.
    pub database: &'static str,
    /// Program and leading arguments, relative to the repository root where
    /// they name files.
    argv: &'static [&'static str],
}

/// Every peer, in report order.
pub static PEERS: [Peer; 4] = [
    Peer {
        name: "awa",
        database: "bench_awa",
        argv: &["bench/peers/awa/target/release/awa-bench"],
    },
    Peer {
        name: "graphile-worker",
        database: "bench_graphile",
        argv: &["node", "bench/peers/node/graphile.mjs"],
    },
    Peer {
        name: "pg-boss",
        database: "bench_pgboss",
        argv: &["node", "bench/peers/node/pgboss.mjs"],
    },
    Peer {
        name: "procrastinate",
        database: "bench_procrastinate",
        argv: &[
            "bench/peers/python/.venv/bin/python",
            "bench/peers/python/procrastinate_runner.py",
        ],
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
    /// Run the peer once: `jobs` jobs on `concurrency` workers, with
    /// `synchronous_commit` set on its database.
    pub fn run(
        &self,
        cluster: &Cluster,
        root: &Path,
        jobs: i64,
        concurrency: usize,
        sync_commit: bool,
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
