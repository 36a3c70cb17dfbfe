//! Optional background maintenance: background workers that dead-letter
//! lapsed final attempts and purge old finished items.
//!
//! They run only when the library is in `shared_preload_libraries` (a static
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
//!   one database maintained.
//!
//! Two kinds of process, so that no database is held between rounds:
//! - The **launcher** ([`LAUNCHER_TYPE`], a static worker) connects to no
//!   database. Every naptime it looks the configured database up in the
//!   shared catalog `pg_database` and, if it exists and accepts
//!   connections, starts a **round** worker there and waits for it to end;
//!   otherwise it logs once (LOG) and looks again next time. A reload takes
//!   effect at once: a shorter naptime shortens the nap under way, a new
//!   database is used from the next round. `pg_cancel_backend` does nothing
//!   to it (SIGINT is ignored).
//! - A **round** worker ([`WORKER_TYPE`], a dynamic worker) connects to the
//!   database, runs one round and exits. The round is one transaction, as the
//!   bootstrap superuser (with `search_path` pinned to `pg_catalog,
//!   pg_temp`): if the extension is installed it (1) turns `failed` every
//!   claimed item whose lease has lapsed on its final attempt (the claim's
//!   own dead-letter statement, [`crate::verbs::claim`], over every queue) and (2)
//!   runs `work_purge`'s statement with the retention; if not, it says so
//!   (LOG, once per change, through a word of shared memory the launcher and
//!   rounds share). Both statements lock rows `FOR UPDATE SKIP LOCKED`, so a
//!   round never waits for a worker's transaction. An ERROR in a round
//!   (including `pg_cancel_backend` on it) aborts that round only: it is
//!   logged as a WARNING with its SQLSTATE, and the next round runs as
//!   usual.
//!
//! So the database is held for the length of a round (milliseconds), not
//! between rounds: `DROP DATABASE`, `ALTER DATABASE ... RENAME` and `CREATE
//! DATABASE ... TEMPLATE` of it fail only if they meet a round under way
//! (`WITH (FORCE)` ends it), and a dropped database is logged once, not
//! every few seconds.
//!
//! Shutdown is never delayed: SIGTERM is PostgreSQL's own `die` handler, so
//! any `CHECK_FOR_INTERRUPTS` (in the nap, while waiting for a round, or
//! inside a running statement) ends the process; the nap also ends it if the
//! postmaster dies (`WL_EXIT_ON_PM_DEATH`). If the launcher exits with an
//! error, the postmaster starts it again after [`RESTART_SECONDS`].

use std::ffi::{c_long, CString};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU32, Ordering};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder};
use pgrx::datum::Interval;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::{pg_shmem_init, PgAtomic};

use crate::base::error::Result;
use crate::pg::compat;
use crate::pg::plans::{self, Statement};
use crate::verbs::lapse::{self, LostToken};
use crate::verbs::purge;

/// The round worker's name and type: `pg_stat_activity.backend_type` shows
/// it, with the database, while a round runs.
pub const WORKER_TYPE: &str = "pg_workfence maintenance";

/// The launcher's name and type (connected to no database).
pub const LAUNCHER_TYPE: &str = "pg_workfence maintenance launcher";

/// Seconds the postmaster waits before starting the launcher again after it
/// exited with an error (a crash, `pg_terminate_backend`).
pub const RESTART_SECONDS: u64 = 5;

/// What the last round found, shared by the launcher and the rounds so that
/// a state is logged once, when it changes: [`STATUS_UNKNOWN`],
/// [`STATUS_MAINTAINED`], [`STATUS_NOT_INSTALLED`] or [`STATUS_NO_DATABASE`].
static STATUS: PgAtomic<AtomicU32> = unsafe { PgAtomic::new(c"workfence_maintenance_status") };
const STATUS_UNKNOWN: u32 = 0;
const STATUS_MAINTAINED: u32 = 1;
const STATUS_NOT_INSTALLED: u32 = 2;
const STATUS_NO_DATABASE: u32 = 3;

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

// Every queue's lapsed final attempts, dead-lettered as a claim does it
// (state, last_error and finished_at as `claim`'s statement sets them),
// paused queues included (nobody holds those items; a pause stops new work,
// not the bookkeeping of abandoned work), with the superseded tokens
// ([`crate::verbs::lapse::settle`] records and announces them).
// `(SELECT clock_timestamp())` is read once.
static DEAD_LETTER: Statement<()> = Statement::new(
    r#"
WITH exhausted AS (
    SELECT i.id, i.lease_until
      FROM workfence.items AS i
     WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) (SELECT pg_catalog.clock_timestamp())
       AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
       FOR UPDATE SKIP LOCKED
)
UPDATE workfence.items AS i
   SET state = 'failed'::workfence.item_state,
       lease_until = NULL,
       last_error = 'lease expired on the final attempt',
       finished_at = pg_catalog.clock_timestamp()
  FROM exhausted AS x
 WHERE i.id OPERATOR(pg_catalog.=) x.id
RETURNING i.id, i.key, i.owner, i.epoch, i.attempts, x.lease_until, i.queue
"#,
);

// Is the extension installed in this database? (The worker's database may
// have it created or dropped at any time.)
static INSTALLED: Statement<()> = Statement::new(
    r#"
SELECT EXISTS (SELECT FROM pg_catalog.pg_extension AS e
                WHERE e.extname OPERATOR(pg_catalog.=) 'pg_workfence'::pg_catalog.name)
"#,
);

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
        pg_shmem_init!(STATUS = AtomicU32::new(STATUS_UNKNOWN));
        crate::backend::schedules::init_shared();
        BackgroundWorkerBuilder::new(LAUNCHER_TYPE)
            .set_type(LAUNCHER_TYPE)
            .set_library("pg_workfence")
            .set_function("workfence_maintenance_launcher_main")
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

/// Install PostgreSQL's SIGHUP and SIGTERM handlers and unblock signals.
fn standard_signals() {
    // SAFETY: the standard handlers of a PostgreSQL process; signals are
    // blocked until BackgroundWorkerUnblockSignals.
    unsafe {
        compat::set_signal_handler(
            pg_sys::SIGHUP as i32,
            postgres_signals::SignalHandlerForConfigReload,
        );
        compat::set_signal_handler(pg_sys::SIGTERM as i32, postgres_signals::die);
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Log `message` at LOG when the shared status moves to `status`.
fn log_on_change(status: u32, message: impl FnOnce() -> String) {
    if STATUS.get().swap(status, Ordering::Relaxed) != status {
        log!("{}", message());
    }
}

/// Entry point of the launcher (`bgw_function_name`).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn workfence_maintenance_launcher_main(_arg: pg_sys::Datum) {
    standard_signals();
    // SAFETY: SIG_IGN for SIGINT: a cancel has nothing to cancel here.
    unsafe { libc_sig_ign(pg_sys::SIGINT as i32) };
    // No database: the shared catalogs (pg_database) only.
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut last_round: Option<Instant> = None;
    let mut last_fire: Option<Instant> = None;
    let mut spacing = FIRE_SPACING;
    let mut naptime_in_force = naptime();
    loop {
        if reload_if_asked() && naptime() != naptime_in_force {
            naptime_in_force = naptime();
            let next = last_round.map_or(Duration::ZERO, |at| {
                (at + naptime_in_force).saturating_duration_since(Instant::now())
            });
            log!(
                "{LAUNCHER_TYPE}: naptime is now {} s; next round in {} s",
                naptime_in_force.as_secs(),
                next.as_secs()
            );
        }
        let Some(database) = database_setting() else {
            // Idle until a database is configured (a reload wakes the nap).
            nap(None);
            continue;
        };
        let due = last_round.map_or(Instant::now(), |at| at + naptime());
        let now = Instant::now();
        if now < due {
            match until_fire(last_fire, spacing) {
                Some(wait) if wait.is_zero() => {
                    let before = crate::backend::schedules::firing_rounds();
                    last_fire = Some(Instant::now());
                    if let Some(oid) = database_oid(&database) {
                        run_round_in(oid, &database, Round::Fire);
                    }
                    // A round that fired nothing (a due schedule held by a
                    // transaction, or passed over for a key in flight) backs
                    // off, so that a session left open does not start a
                    // round worker every few milliseconds.
                    spacing = if crate::backend::schedules::firing_rounds() == before {
                        (spacing * 2).min(FIRE_SPACING_MAX)
                    } else {
                        FIRE_SPACING
                    };
                }
                // A schedule's change lowers the next fire without a
                // signal (and a round that found none left it at "never"):
                // look again within the second. A reload during the nap
                // recomputes `due` at once.
                Some(wait) => nap(Some((due - now).min(wait).min(FIRE_LOOK))),
                None if crate::backend::schedules::next_fire().is_some() => {
                    nap(Some((due - now).min(FIRE_LOOK)))
                }
                None => nap(Some(due - now)),
            }
            continue;
        }
        last_round = Some(Instant::now());
        last_fire = last_round;
        match database_oid(&database) {
            Some(oid) => run_round_in(oid, &database, Round::Full),
            None => log_on_change(STATUS_NO_DATABASE, || {
                format!(
                    "{LAUNCHER_TYPE}: database \"{database}\" does not exist or does not accept \
                     connections; nothing is maintained until it does"
                )
            }),
        }
    }
}

/// SIG_IGN for `signal` (pgrx's `pqsignal` takes only handler functions).
///
/// # Safety
/// Called on the process's main thread.
unsafe fn libc_sig_ign(signum: i32) {
    extern "C" {
        fn signal(signum: std::ffi::c_int, handler: usize) -> usize;
    }
    // SIG_IGN is 1 on Linux.
    signal(signum, 1);
}

/// The OID of database `name` if it exists, accepts connections and is not
/// left invalid by an interrupted `DROP DATABASE`, read
/// from the shared catalog `pg_database` in a transaction of the launcher's
/// own. A sequential scan, as the autovacuum launcher reads the catalog (a
/// process connected to no database cannot use its indexes' relcache
/// entries); pg_database has a handful of rows.
fn database_oid(name: &str) -> Option<pg_sys::Oid> {
    // SAFETY: a transaction of this background worker's main loop, outside
    // any other; a catalog heap scan under AccessShareLock, every tuple
    // read while the scan holds its buffer.
    unsafe {
        pg_sys::StartTransactionCommand();
        let rel = pg_sys::table_open(
            pg_sys::DatabaseRelationId,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        let mut found = None;
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let form = pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_database;
            if compat::database_name_of(form).to_bytes() == name.as_bytes() {
                // Not usable: connecting would fail with a FATAL (e.g. a
                // DROP DATABASE was interrupted).
                found = compat::database_accepts_connections(form)
                    .then(|| compat::database_oid_of(form));
                break;
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        pg_sys::CommitTransactionCommand();
        found
    }
}

/// What a round worker does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Fire the due schedules, then dead-letter and purge (every naptime).
    Full,
    /// Fire the due schedules only (at a schedule's next slot).
    Fire,
}

/// The argument bit that says [`Round::Fire`] (above the database OID's 32
/// bits).
const FIRE_ONLY: u64 = 1 << 32;

/// The launcher looks at the next fire at least this often (a schedule's
/// change lowers it in shared memory, without a signal).
const FIRE_LOOK: Duration = Duration::from_secs(1);

/// Two fire rounds start at least this far apart (a due schedule another
/// transaction holds stays due: no round can fire it until that ends),
/// doubling up to [`FIRE_SPACING_MAX`] while rounds move no schedule on.
const FIRE_SPACING: Duration = Duration::from_millis(200);

/// The longest spacing of fire rounds that move no schedule on.
const FIRE_SPACING_MAX: Duration = Duration::from_secs(5);

/// How long until the maintenance worker's next fire: the earliest next
/// slot after the last round ([`crate::backend::schedules::next_fire`]),
/// and, when that round left a schedule due (held by a transaction, or
/// passed over), a retry `spacing` after the last fire round; zero when
/// due, `None` when nothing is scheduled (or not preloaded). The retry's
/// back-off never delays the other schedules' next slot.
fn until_fire(last_fire: Option<Instant>, spacing: Duration) -> Option<Duration> {
    let next = crate::backend::schedules::next_fire()?;
    let retry = crate::backend::schedules::due_left().then(|| {
        last_fire
            .map(|at| (at + spacing).saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::ZERO)
    });
    let slot = (next != crate::base::cron::NEVER).then(|| {
        // SAFETY: reads the system clock; cannot fail.
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let until = Duration::from_micros(u64::try_from(next.saturating_sub(now)).unwrap_or(0));
        // A slot just fired is not started again within FIRE_SPACING.
        let spaced = last_fire
            .map(|at| (at + FIRE_SPACING).saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::ZERO);
        until.max(spaced)
    });
    match (slot, retry) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Start a round worker in database `oid` and wait for it to end.
fn run_round_in(oid: pg_sys::Oid, database: &str, kind: Round) {
    let started = BackgroundWorkerBuilder::new(WORKER_TYPE)
        .set_type(WORKER_TYPE)
        .set_library("pg_workfence")
        .set_function("workfence_maintenance_round_main")
        .enable_spi_access()
        .set_restart_time(None)
        .set_argument(Some(pg_sys::Datum::from(
            u64::from(u32::from(oid)) | if kind == Round::Fire { FIRE_ONLY } else { 0 },
        )))
        // SAFETY: this process's pid.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    match started {
        // Interrupts (SIGTERM) are served while waiting.
        Ok(worker) => {
            let _ = worker.wait_for_shutdown();
        }
        Err(_) => warning!(
            "{LAUNCHER_TYPE}: could not start a round in database \"{database}\" (max_worker_processes \
             reached?); trying again next round"
        ),
    }
}

/// Entry point of a round worker (`bgw_function_name`): one round in the
/// database whose OID is the argument, then exit.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn workfence_maintenance_round_main(arg: pg_sys::Datum) {
    standard_signals();
    let oid = pg_sys::Oid::from(arg.value() as u32);
    let kind = if arg.value() as u64 & FIRE_ONLY != 0 {
        Round::Fire
    } else {
        Round::Full
    };
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(oid), None);
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
    // SAFETY: a transaction of this worker's own for the catalog look-up.
    let database = unsafe {
        pg_sys::StartTransactionCommand();
        let name = current_database();
        pg_sys::CommitTransactionCommand();
        name
    };
    fire_round(&database);
    if kind == Round::Full {
        round(&database);
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

/// `work` in a transaction of its own, shown in `pg_stat_activity` as
/// `activity`. An ERROR (or an error of ours) aborts the transaction and
/// comes back as its message with its SQLSTATE.
fn in_transaction<T>(
    activity: &std::ffi::CStr,
    work: impl FnOnce(&mut SpiClient<'_>) -> Result<T>,
) -> std::result::Result<T, String> {
    // SAFETY (all blocks): the transaction calls of a background worker's
    // main loop, made on its main thread outside any transaction.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, activity.as_ptr());
    }
    let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
        match Spi::connect_mut(work) {
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
        }
    }))
    .catch_others(|caught| {
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(caught_message(&caught))
    })
    .execute();
    unsafe {
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
    }
    outcome
}

/// Fire the due schedules ([`crate::verbs::schedule::fire`]) in a
/// transaction of their own, before the round's others (a long purge
/// does not delay the slots' items), then tell the launcher the next slot.
fn fire_round(database: &str) {
    let seen = crate::backend::schedules::changes().unwrap_or(0);
    let outcome = in_transaction(c"pg_workfence maintenance: fire schedules", |client| {
        let installed = plans::run(client, &INSTALLED, (), |rows| {
            Ok(rows.first().get_one::<bool>()?.unwrap_or(false))
        })?;
        // Not installed, or not yet updated to 0.12.0: nothing to fire.
        if !installed || plans::workfence_relation(c"schedules") == pg_sys::InvalidOid {
            return Ok(None);
        }
        crate::verbs::schedule::fire(None, true).map(Some)
    });
    match outcome {
        Ok(Some(fired)) => {
            crate::backend::schedules::round_found(
                seen,
                fired.next_future,
                fired.due_left,
                fired.slots > 0,
            );
            if fired.slots > 0 {
                debug1!(
                    "{WORKER_TYPE}: fired {} slot(s) of schedules in database \"{database}\", {} new item(s)",
                    fired.slots,
                    fired.enqueued
                );
            }
        }
        Ok(None) => crate::backend::schedules::round_found(seen, None, false, false),
        Err(message) => {
            // Tried again at the next full round, not every few milliseconds.
            crate::backend::schedules::round_found(seen, None, false, false);
            warning!("{WORKER_TYPE}: firing schedules failed, retried next round: {message}")
        }
    }
}

/// One round in its own transaction. An ERROR (or an error of ours) aborts
/// the transaction and is logged as a WARNING; the worker carries on.
fn round(database: &str) {
    let outcome = in_transaction(c"pg_workfence maintenance round", run_round).and_then(|done| {
        match (done, retention()) {
            (Some(done), Some(older_than)) => Ok(Some(Done {
                purged: purge_round(older_than)?,
                ..done
            })),
            (done, _) => Ok(done),
        }
    });
    match outcome {
        Ok(Some(Done { failed, purged })) => {
            log_on_change(STATUS_MAINTAINED, || {
                format!("{WORKER_TYPE}: maintaining database \"{database}\"")
            });
            if failed > 0 {
                log!("{WORKER_TYPE}: {failed} item(s) failed: lease expired on the final attempt");
            }
            debug1!("{WORKER_TYPE}: {purged} finished item(s) purged");
        }
        Ok(None) => log_on_change(STATUS_NOT_INSTALLED, || {
            format!(
                "{WORKER_TYPE}: extension pg_workfence is not installed in database \"{database}\"; \
                 nothing to maintain there"
            )
        }),
        Err(message) => warning!("{WORKER_TYPE}: round failed, retried next round: {message}"),
    }
}

/// The round's statements, on `client`; `None` if the extension is not
/// installed in this database.
fn run_round(client: &mut SpiClient<'_>) -> Result<Option<Done>> {
    let installed = plans::run(client, &INSTALLED, (), |rows| {
        Ok(rows.first().get_one::<bool>()?.unwrap_or(false))
    })?;
    if !installed {
        return Ok(None);
    }
    let lost = plans::run(client, &DEAD_LETTER, (), |rows| {
        let mut lost = Vec::with_capacity(rows.len());
        for row in rows {
            let (Some(id), Some(epoch), Some(lapsed_at)) = (
                row.get::<i64>(1)?,
                row.get::<i64>(4)?,
                row.get::<TimestampWithTimeZone>(6)?,
            ) else {
                continue;
            };
            lost.push(LostToken {
                id,
                key: row.get::<String>(2)?.unwrap_or_default(),
                owner: row.get::<String>(3)?.unwrap_or_default(),
                epoch,
                attempt: row.get::<i32>(5)?.unwrap_or_default(),
                lapsed_at,
                queue: row.get::<String>(7)?.unwrap_or_default(),
                dead_lettered: true,
            });
        }
        Ok(lost)
    })?;
    lapse::settle(client, &lost)?;
    let failed = lost.len() as i64;
    Ok(Some(Done { failed, purged: 0 }))
}

/// How many purge batches one round runs at most ([`purge::BATCH`] items
/// each, a transaction each): 1,000,000 items a round; the rest waits for
/// the next round, so that the round's dead letters and schedules are not
/// held up behind a purge of a long history.
const PURGE_BATCHES_PER_ROUND: usize = 100;

/// Purge the finished items past the retention, in transactions of at most
/// [`purge::BATCH`] items each (WAL and row locks per transaction stay
/// bounded, and a claim never waits for a purge to end), until a batch
/// deletes fewer or the round's batches are used; how many were deleted.
fn purge_round(older_than: Interval) -> std::result::Result<i64, String> {
    let mut purged = 0;
    for _ in 0..PURGE_BATCHES_PER_ROUND {
        let n = in_transaction(c"pg_workfence maintenance: purge", |client| {
            purge::purge_finished(client, Some(older_than), None)
        })?;
        purged += n;
        if n < i64::from(purge::BATCH) {
            break;
        }
    }
    Ok(purged)
}

/// This process's database name (call inside a transaction).
fn current_database() -> String {
    // SAFETY: MyDatabaseId is set once connected; get_database_name pallocs
    // the name (or returns NULL).
    unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(name)
            .to_string_lossy()
            .into_owned()
    }
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
    format!(
        "{} (SQLSTATE {})",
        report.message(),
        crate::base::error::sqlstate_text(report.sql_error_code())
    )
}
