//! pg_workfence: lease-fenced claiming of work for PostgreSQL.
//!
//! Every claim of an item hands out a fresh, strictly increasing **epoch** (a
//! fencing token, after Kleppmann, "How to do distributed locking", 2016, and
//! the sequencers of Google's Chubby, Burrows 2006). Renew, finish, release,
//! fail and assert succeed only for the item's newest epoch AND its owner,
//! checked in one statement inside the server with the server's clock.
//!
//! The SQL surface and its guarantees are specified in `docs/contract.md`
//! (cited as "docs/contract.md, promise N"); `docs/reference.md` (generated from
//! `sql/functions.toml`) has a section per function. This file is only
//! the table of contents.

use pgrx::prelude::*;

::pgrx::pg_module_magic!(name, version);

// `work_cancel`.
pub mod cancel;
// Per-queue counters of refused tokens and lapsed leases (shared memory, when preloaded).
pub mod counters;
// What differs between PostgreSQL majors.
mod compat;
// `work_claim`, `work_claim_key`.
pub mod claim;
// What a superseded lapsed lease leaves: its `errors` entry, `work_lease_lost`, the `lapsed` count.
pub mod lapse;
// `work_finish_and_claim`, `work_fail_and_claim`: a worker's cycle in one call.
pub mod cycle;
// `work_enqueue`.
pub mod enqueue;
// Domain errors and their SQLSTATEs.
pub mod error;
// Flow control: serial groups and queue limits (`work_limit`).
pub mod flow;
// Epochs that survive a failover: the generation floor of a new history.
pub mod generation;
// Queue-scoped privileges: `work_grant`, `work_revoke`, `work_enforce_grants`, `work_may`.
pub mod grants;
// Keeping the backend's caches of the settings tables fresh (shared invalidation).
mod invalidation;
// A `jsonb` value passed through byte for byte (no parse, no re-serialise).
pub mod jsonb;
// `work_renew`, `work_finish`, `work_finish_many`, `work_release`, `work_fail`, `work_assert`,
// `work_lease_status`.
pub mod lease;
// `work_items`: a queue's items a page at a time (keyset pagination).
pub mod listing;
// Optional background worker (shared_preload_libraries): dead letters and purge; its GUCs.
pub mod maintenance;
// NOTIFY `work_enqueued` and `work_lease_lost`, and the settings that turn them off.
pub mod notify;
// `work_retry`, `work_reschedule`, `work_pause`, `work_resume`, `work_item`.
pub mod operate;
// Which queues are paused, per backend, kept fresh by shared invalidation.
mod paused;
// Per-backend cache of prepared SPI plans.
mod plans;
// `work_purge`.
pub mod purge;
// Argument checks shared by every function (pure, no database access).
pub mod validate;
// The shared types every layer names (capability, queue pattern, interval
// parts); imports nothing of the crate.
pub mod types;
// SQL fragments, shared parameter structs and the clock statements share.
mod sql;
// Lock keys: the int4 a queue or group name hashes to.
mod keys;
// What both claim paths share: the ready probe and a claim's outcome.
mod take;
// The long poll of `work_claim(..., wait)`: waiters and their wake-ups.
pub mod wait;
// Per-transaction state: wake-ups after commit, the fence of `work_assert` at commit.
mod xact;

// Tables, sequence and indexes, before any function.
extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
// The views `work_queue_stats` and `work_queue_grants`, over the tables.
extension_sql_file!(
    "../sql/views.sql",
    name = "views",
    requires = ["bootstrap", counters::queue_counters, grants::work_may]
);
// COMMENT ON FUNCTION and function privileges, after every function exists.
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

/// Runs in every backend that loads the library: defines the `workfence.*`
/// settings, and registers the maintenance worker when preloaded.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    quiet_backtraces();
    // The commit's effects, run by the backend layer (`xact`), which names
    // no verb: the verbs and modules that know how are handed to it here.
    xact::init(xact::CommitHooks {
        mark_grouped: flow::mark_grouped,
        try_group_lock: flow::try_group_lock,
        verify_behind: enqueue::verify_behind,
        pause_lock_order: paused::lock_order,
        hold_pause_lock: paused::hold_for_commit,
        fence: lease::fence_at_commit,
        hold_for_prepared: wait::hold_for_prepared,
        wake: wait::wake,
    });
    notify::init();
    wait::init();
    counters::init();
    invalidation::init();
    maintenance::init();
}

/// Errors reach clients with their message, detail and hint only. pgrx
/// appends a Rust backtrace to an error's DETAIL when one was captured, and
/// `std::backtrace::Backtrace::capture` captures one whenever the server's
/// environment has `RUST_BACKTRACE` set (common on developers' machines):
/// 30 lines of frames in DETAIL for a 57014. `RUST_LIB_BACKTRACE`, read
/// first, is set to 0 unless the environment sets it (set it to 1 in the
/// server's environment to debug). Backends are single-threaded, and this
/// runs at library load, before anything could capture.
fn quiet_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// The in-server `#[pg_test]` suites live in `pgrx-tests/`, next to (not in)
/// the extension's source, and are compiled into the test build only.
#[cfg(any(test, feature = "pg_test"))]
#[path = "../pgrx-tests/mod.rs"]
mod pgrx_tests;

/// Hooks `cargo pgrx test` needs at the crate root.
#[cfg(test)]
pub mod pg_test {
    /// One-off initialisation when the test framework starts; nothing to do.
    pub fn setup(_options: Vec<&str>) {}

    /// postgresql.conf settings the suites need: none beyond the defaults.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
