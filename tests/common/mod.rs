//! Helpers shared by the client-connection test files (`mod common;`).

use pg_workfence_client::Error;

/// Unwraps with the error's Display text (which, for a missing extension,
/// says how to install it).
pub fn ok<T>(result: Result<T, Error>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Where the tests' throwaway clusters live: `$WORKFENCE_SCRATCH`, which
/// scripts/test.sh points at a directory the postgres OS user can reach (a
/// checkout under /root is not), else cargo's per-target scratch directory.
pub fn scratch_base() -> String {
    std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string())
}
