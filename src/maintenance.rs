//! Optional background maintenance: a background worker that dead-letters
//! lapsed final attempts and purges old finished items.
//!
//! It runs only when the library is in `shared_preload_libraries` (a static
//! background worker can be registered only while the postmaster loads the
//! preloaded libraries). Without preloading nothing here runs, and
//! everything else works as before: `work_purge` is there to call, and a
//! claim dead-letters what it finds.
//!
//! Settings (GUCs, all `PGC_SIGHUP`: `postgresql.conf` or `ALTER SYSTEM`,
//! then a reload), defined in every backend that loads the library:
//! - `workfence.retention` (seconds; default 7 days; `-1` = never purge):
//!   finished items older than this are purged;
//! - `workfence.maintenance_naptime` (seconds, default 60): time between
//!   rounds;
//! - `workfence.maintenance_database` (default `postgres`; empty = idle): the
//!   one database the worker connects to.
//!
//! Each round is one transaction, as the bootstrap superuser (with
//! `search_path` pinned to `pg_catalog, pg_temp`), in the configured
//! database; a database without the extension is skipped. It
//! (1) turns `failed` every claimed item whose lease has lapsed on its final
//! attempt (the claim's own dead-letter statement, [`crate::claim`], over
//! every queue) and (2) runs `work_purge`'s statement with the retention.
//! Both lock rows `FOR UPDATE SKIP LOCKED`, so a round never waits for a
//! worker's transaction. An ERROR in a round aborts that round's
//! transaction only: it is logged as a WARNING and the next round runs as
//! usual.
//!
//! Shutdown is never delayed: SIGTERM is PostgreSQL's own `die` handler, so
//! any `CHECK_FOR_INTERRUPTS` (in the nap, or inside a running statement)
//! ends the process; the nap also ends it if the postmaster dies
//! (`WL_EXIT_ON_PM_DEATH`). A worker connected to one database cannot move
//! to another: when a reload changes `workfence.maintenance_database`, it
//! exits with code 1 and the postmaster starts it again after
//! [`RESTART_SECONDS`], connected to the new one (as it does after a crash
//! or `pg_terminate_backend`). A database that does not exist makes each
//! start fail with a FATAL in the log, retried every [`RESTART_SECONDS`].

use std::ffi::{c_long, CString};
use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder};
use pgrx::datum::Interval;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::claim::dead_letter;
use crate::error::Result;
use crate::plans::{self, Statement};
use crate::purge;

/// The worker's name and type: `pg_stat_activity.backend_type` shows it.
pub const WORKER_TYPE: &str = "pg_workfence maintenance";

/// Seconds the postmaster waits before starting the worker again after it
/// exited with code 1 (a crash, `pg_terminate_backend`, a change of
/// database).
pub const RESTART_SECONDS: u64 = 5;

/// Default of `workfence.retention`: 7 days, in seconds (`work_purge`'s
/// default too).
const DEFAULT_RETENTION: i32 = 7 * 24 * 3600;

/// Largest `workfence.retention`: 3650 days, `work_purge`'s limit.
const MAX_RETENTION: i32 = 3650 * 24 * 3600;

/// `workfence.retention`: purge finished items older than this many seconds;
/// `-1` never purges.
pub static RETENTION: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_RETENTION);

/// `workfence.maintenance_naptime`: seconds between two rounds.
pub static NAPTIME: GucSetting<i32> = GucSetting::<i32>::new(60);

/// `workfence.maintenance_database`: the database the worker maintains;
/// empty leaves it idle.
pub static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

// Every queue's lapsed final attempts, dead-lettered exactly as a claim does
// it (the same CTE text). `(SELECT clock_timestamp())` is read once.
static DEAD_LETTER: Statement = Statement {
    name: "maintenance_dead_letter",
    sql: concat!(
        "WITH exhausted_ids AS ( \
           SELECT i.id FROM workfence.items AS i \
            WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state \
              AND i.lease_until OPERATOR(pg_catalog.<=) (SELECT pg_catalog.clock_timestamp()) \
              AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts \
            FOR UPDATE SKIP LOCKED \
         )",
        dead_letter!(),
        " SELECT pg_catalog.count(*) FROM exhausted"
    ),
    args: &[],
};

// Is the extension installed in this database? (The worker's database may
// have it created or dropped at any time.)
static INSTALLED: Statement = Statement {
    name: "maintenance_installed",
    sql: "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension AS e \
                          WHERE e.extname OPERATOR(pg_catalog.=) 'pg_workfence'::pg_catalog.name)",
    args: &[],
};

/// Define the settings, in every backend that loads the library; register
/// the worker when the library is being preloaded. Called from `_PG_init`.
pub fn init() {
    GucRegistry::define_int_guc(
        c"workfence.retention",
        c"pg_workfence maintenance: purge finished items older than this.",
        c"Done, failed and cancelled items whose finished_at is older than this are deleted by \
          the background worker (shared_preload_libraries only). -1 never purges.",
        &RETENTION,
        -1,
        MAX_RETENTION,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"workfence.maintenance_naptime",
        c"pg_workfence maintenance: time between two rounds of the background worker.",
        c"",
        &NAPTIME,
        1,
        24 * 3600,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_string_guc(
        c"workfence.maintenance_database",
        c"pg_workfence maintenance: the database the background worker maintains.",
        c"Empty leaves the worker idle. A change makes a connected worker restart.",
        &DATABASE,
        GucContext::Sighup,
        GucFlags::empty(),
    );
    // SAFETY: called from _PG_init on PostgreSQL's main thread; the prefix is
    // a NUL-terminated constant.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"workfence".as_ptr()) };

    // SAFETY: a plain flag PostgreSQL sets while it loads the preloaded
    // libraries; read on the main thread.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        BackgroundWorkerBuilder::new(WORKER_TYPE)
            .set_type(WORKER_TYPE)
            .set_library("pg_workfence")
            .set_function("workfence_maintenance_main")
            .enable_spi_access()
            .set_restart_time(Some(Duration::from_secs(RESTART_SECONDS)))
            .load();
    }
}

/// The configured database, `None` when the setting is empty.
fn database_setting() -> Option<String> {
    DATABASE
        .get()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
}

/// The purge's `older_than`, `None` when purging is off (`-1`).
fn retention() -> Option<Interval> {
    let seconds = RETENTION.get();
    (seconds >= 0).then(|| Interval::from_micros(i64::from(seconds) * 1_000_000))
}

/// PostgreSQL's own signal handlers, declared here as the C functions they
/// are: `pg_sys` wraps its declarations in Rust functions, which cannot be
/// handed to `pqsignal`.
mod postgres_signals {
    use std::ffi::c_int;

    extern "C-unwind" {
        /// SIGTERM: sets `ProcDiePending` and the latch; the next
        /// `CHECK_FOR_INTERRUPTS` ends the process.
        pub fn die(signal: c_int);
        /// SIGHUP: sets `ConfigReloadPending` and the latch.
        pub fn SignalHandlerForConfigReload(signal: c_int);
    }
}

/// Entry point of the background worker (`bgw_function_name`).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn workfence_maintenance_main(_arg: pg_sys::Datum) {
    // SAFETY: the standard handlers of a PostgreSQL process; signals are
    // blocked until BackgroundWorkerUnblockSignals.
    unsafe {
        pg_sys::pqsignal(
            pg_sys::SIGHUP as i32,
            Some(postgres_signals::SignalHandlerForConfigReload),
        );
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(postgres_signals::die));
        pg_sys::BackgroundWorkerUnblockSignals();
    }

    // Idle until a database is configured (a reload wakes the nap).
    let database = loop {
        if let Some(database) = database_setting() {
            break database;
        }
        nap(None);
        reload_if_asked();
    };
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    // The statements name every object; pinning search_path as the SQL
    // functions do keeps it that way should one ever not.
    // SAFETY: NUL-terminated constants; search_path's check needs no
    // transaction.
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_SESSION,
        );
    }
    log!("{WORKER_TYPE}: started in database \"{database}\"");

    loop {
        round();
        let next = Instant::now() + naptime();
        loop {
            let now = Instant::now();
            if now >= next {
                break;
            }
            nap(Some(next - now));
            if reload_if_asked() && database_setting().as_deref() != Some(database.as_str()) {
                log!(
                    "{WORKER_TYPE}: workfence.maintenance_database changed from \"{database}\"; \
                     restarting in {RESTART_SECONDS} s"
                );
                // SAFETY: exit code 1 asks the postmaster for a restart.
                unsafe { pg_sys::proc_exit(1) };
            }
        }
    }
}

/// `workfence.maintenance_naptime` as a duration.
fn naptime() -> Duration {
    Duration::from_secs(u64::try_from(NAPTIME.get()).unwrap_or(1).max(1))
}

/// Sleep on the process latch until it is set (a signal), `timeout` passes,
/// or the postmaster dies (the process then exits); then serve interrupts,
/// which ends the process on SIGTERM.
fn nap(timeout: Option<Duration>) {
    let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_EXIT_ON_PM_DEATH;
    let mut millis: c_long = -1;
    if let Some(timeout) = timeout {
        events |= pg_sys::WL_TIMEOUT;
        // Round up, so a nap never ends just before its deadline.
        millis = c_long::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX.into());
    }
    // SAFETY: MyLatch is this process's latch; called on the main thread.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            events as i32,
            millis,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pg_sys::check_for_interrupts!();
}

/// Re-read the configuration files if a SIGHUP asked for it; true if it did.
fn reload_if_asked() -> bool {
    // SAFETY: the flag SignalHandlerForConfigReload sets; the main thread
    // clears it before reading the files, as PostgreSQL's own processes do.
    unsafe {
        if pg_sys::ConfigReloadPending == 0 {
            return false;
        }
        pg_sys::ConfigReloadPending = 0;
        pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
    }
    true
}

/// What one round did.
struct Done {
    /// Lapsed final attempts turned `failed`.
    failed: i64,
    /// Finished items deleted.
    purged: i64,
}

/// One round in its own transaction. An ERROR (or an error of ours) aborts
/// the transaction and is logged as a WARNING; the worker carries on.
fn round() {
    // SAFETY (both blocks): the transaction calls of a background worker's
    // main loop, made on its main thread outside any transaction.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::pgstat_report_activity(
            pg_sys::BackendState::STATE_RUNNING,
            c"pg_workfence maintenance round".as_ptr(),
        );
    }
    let outcome = PgTryBuilder::new(|| match Spi::connect_mut(run_round) {
        Ok(done) => {
            unsafe {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Ok(done)
        }
        Err(err) => {
            unsafe { pg_sys::AbortCurrentTransaction() };
            Err(err.to_string())
        }
    })
    .catch_others(|caught| {
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(caught_message(&caught))
    })
    .execute();
    unsafe {
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
    }
    match outcome {
        Ok(Some(Done { failed, purged })) => {
            if failed > 0 {
                log!("{WORKER_TYPE}: {failed} item(s) failed: lease expired on the final attempt");
            }
            debug1!("{WORKER_TYPE}: {purged} finished item(s) purged");
        }
        Ok(None) => debug1!("{WORKER_TYPE}: extension not installed here; nothing to do"),
        Err(message) => warning!("{WORKER_TYPE}: round failed, retried next round: {message}"),
    }
}

/// The round's statements, on `client`; `None` if the extension is not
/// installed in this database.
fn run_round(client: &mut SpiClient<'_>) -> Result<Option<Done>> {
    let installed = plans::run(client, &INSTALLED, &[], |rows| {
        Ok(rows.first().get_one::<bool>()?.unwrap_or(false))
    })?;
    if !installed {
        return Ok(None);
    }
    let failed = plans::run(client, &DEAD_LETTER, &[], |rows| {
        Ok(rows.first().get_one::<i64>()?.unwrap_or_default())
    })?;
    let purged = match retention() {
        Some(older_than) => purge::purge_finished(client, Some(older_than), None)?,
        None => 0,
    };
    Ok(Some(Done { failed, purged }))
}

/// The message of an error caught by [`PgTryBuilder`], with its SQLSTATE.
fn caught_message(caught: &pg_sys::panic::CaughtError) -> String {
    let report = match caught {
        pg_sys::panic::CaughtError::PostgresError(report)
        | pg_sys::panic::CaughtError::ErrorReport(report)
        | pg_sys::panic::CaughtError::RustPanic {
            ereport: report, ..
        } => report,
    };
    format!("{:?}: {}", report.sql_error_code(), report.message())
}
