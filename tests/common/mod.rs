//! Helpers shared by the client-connection test files (`mod common;`).
//!
//! Each test file is its own binary and uses a subset of these.
#![allow(dead_code)]

use std::error::Error;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use pg_workfence_client::Cluster;

/// Unwraps, or panics with the error and its chain of sources (a
/// `postgres::Error` says only "db error"; its source has the server's
/// message; a missing extension's error says how to install it).
pub fn ok<T, E: Error>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        panic!("{what}: {text}")
    })
}

/// Where the tests' throwaway clusters live: `$WORKFENCE_SCRATCH`, which
/// scripts/test.sh points at a directory the postgres OS user can reach (a
/// checkout under /root is not), else cargo's per-target scratch directory.
pub fn scratch_base() -> String {
    std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string())
}

/// One cluster for the tests of a binary that run at the same time; it stops
/// and is removed when the last of them drops its handle. `setup` runs once
/// on a new cluster (roles, say, which are cluster-wide).
pub fn shared_cluster_with(setup: fn(&Cluster)) -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = slot.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(ok(
        Cluster::start(scratch_base()),
        "starting a throwaway PostgreSQL 15 cluster",
    ));
    setup(&cluster);
    *slot = Arc::downgrade(&cluster);
    cluster
}

/// [`shared_cluster_with`] with nothing to set up.
pub fn shared_cluster() -> Arc<Cluster> {
    shared_cluster_with(|_| {})
}
