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

// The layers, bottom to top: a file imports only from its own layer and
// the layers below it (harness/tests/client/layers.rs checks this, and that
// no two files import each other). A claim's path only goes down.
//
// The shared types and the one error enum: import nothing above them.
pub mod base;
// The server's facilities: what differs between majors, jsonb passed
// through, lock keys, prepared plans, shared invalidation.
pub mod pg;
// Who may do what: argument checks and queue-scoped grants.
pub mod access;
// The items' SQL: fragments, shared parameters, the ready probe.
pub mod store;
// Per-backend state and what runs after commit: counters, the transaction's
// effects, paused queues, the long poll's waiters, NOTIFY. Names no verb.
pub mod backend;
// The state machine: every `#[pg_extern]` verb of the SQL surface.
pub mod verbs;
// Optional background worker (shared_preload_libraries): dead letters and purge; its GUCs.
pub mod maintenance;

use backend::{counters, notify, paused, wait, xact};
use verbs::{enqueue, flow, lease};

// Tables, sequence and indexes, before any function.
extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
// The views (`work_queue_stats`, `work_queue_counters`, `work_queue_grants`,
// `work_schedules`), over the tables and shared memory.
extension_sql_file!(
    "../sql/views.sql",
    name = "views",
    requires = [
        "bootstrap",
        counters::queue_counters,
        counters::queue_counter_rows,
        counters::queue_history_rows,
        counters::queue_state_counts,
        access::grants::work_may
    ]
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
        wake_awaiters: wait::wake_awaiters,
    });
    notify::init();
    wait::init();
    counters::init();
    pg::invalidation::init();
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
