//! The test harness of pg_workfence: everything that talks to the extension
//! from outside the server, over real connections.
//!
//! - [`calls`]: one typed call per SQL function of the extension, used by
//!   every client test and the benchmark driver; each wraps the
//!   function's binding in [`calls::generated`], which `cargo run -p
//!   workfence-surface` renders from `sql/functions.toml`.
//! - [`cli`]: `--help` for every binary of the workspace.
//! - [`Cluster`]: a throwaway PostgreSQL 15 cluster on a free loopback port, one
//!   database per test, stopped and removed on drop.
//! - [`Worker`]: drives a `workfence-worker` child process, so that two workers
//!   are two separate client processes, each with its own connection.
//! - [`protocol`]: the line protocol between [`Worker`] and `workfence-worker`.
//! - [`pgbouncer`]: a throwaway PgBouncer in front of a [`Cluster`].
//! - [`router`]: a PL/Proxy router database in front of shard databases.
//! - [`scenario`]: the pieces of the bug report's scenario shared by the
//!   tests (names, enqueue, waiting for a lease to lapse on the server).
//! - [`testing`]: what every test crate shares: [`testing::ok`] and the
//!   documentation's SQL blocks ([`testing::doc_sql_block`]).
//!
//! The binaries `workfence-worker` (the worker process) and
//! `workfence-soak-worker` (the autonomous worker of `tests/client/soak.rs`) live in
//! `src/bin/`; the client tests in `tests/client/` (one binary, a module per topic, helpers in
//! `tests/client/common/`). The bug report's scenario between two worker
//! processes is `tests/client/seed_scenario.rs`; the demo (`scripts/demo.sh`,
//! `demo/`) plays it with workers on the Python library.
//!
//! The extension must be installed into the PostgreSQL the cluster runs:
//! Debian's PostgreSQL 15 by default, the one whose `pg_config` is
//! `$WORKFENCE_PG_CONFIG` when that is set (`cargo pgrx install --release
//! --pg-config <that pg_config>`, which `scripts/test.sh` does for 15 and 18).

#![warn(missing_docs)]

pub mod calls;
pub mod cli;
mod cluster;
mod error;
mod os;
pub mod pgbouncer;
pub mod protocol;
pub mod router;
pub mod scenario;
pub mod testing;
mod worker;

pub use cluster::{pg_config, Cluster, ClusterBuilder, DEFAULT_PG_CONFIG, PG_CONFIG_ENV};
pub use error::{Error, ServerError};
pub use protocol::Claim;
pub use worker::{Worker, DEFAULT_REPLY_TIMEOUT};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
