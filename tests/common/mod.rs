//! Helpers shared by the client-connection test files (`mod common;`).

use std::error::Error;

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
