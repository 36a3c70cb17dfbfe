//! Schedules (from 0.12.0, issue 34): cron in the server, each slot fired
//! exactly once.
//!
//! A schedule (`work_schedule`) names a cron expression, an IANA time zone
//! ([`crate::base::cron`]) and the item each of its *slots* (the instants
//! the expression names) enqueues: queue, payload, priority, max_attempts,
//! group_key. A *fire* of a due slot enqueues that item with key
//! `<name>@<slot in UTC, ISO 8601>` and moves the schedule's `next_slot`
//! past the slot, in one transaction.
//!
//! **Invariant: at most one item per (schedule, slot), ever.** A fire holds
//! the schedule's row (`FOR UPDATE SKIP LOCKED`: racing firers pass over a
//! row another holds, never wait for it), and, READ COMMITTED's re-check of
//! a locked row reading its newest version, sees the `next_slot` of every
//! fire that committed before it. It fires only slots at or after that
//! `next_slot`, and writes a `next_slot` after each of them, in the
//! transaction that inserted their items: both commit or neither. So a
//! slot fired once is before `next_slot` in every later fire's view. The
//! table's CHECK (`next_slot > last_slot`) holds the database to it, and
//! the item's key is a second guard: a fire whose key exists (a restored
//! item) enqueues nothing. A replaced expression starts at its first slot
//! after both now and the last slot fired, so a replace never moves
//! `next_slot` back either.
//!
//! **Firers.** Any number, anywhere: `work_fire_schedules()` (from pg_cron,
//! a client loop, an operator); the maintenance worker when the library is
//! preloaded, in its database, at each next slot ([`crate::maintenance`]);
//! and, so that a database without either still fires, a claim of the
//! schedule's queue that finds one of its slots due ([`fire_for_claim`]).
//!
//! **Failover.** A fire is one transaction of the primary. A standby that
//! had not received it when promoted has neither the item nor the record,
//! and fires the slot again in its history: each history fires the slot
//! once. The item lost with the old primary's history was claimed, if at
//! all, under an epoch below the new history's generation floor
//! ([`crate::verbs::generation`]), so its holder's calls are refused on the
//! new primary.

use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::schedules;
use crate::base::cron::{self, CatchUp, Micros};
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::verbs::generation;

params! {
    /// `$1` name.
    struct NameParams<'a> {
        name: &'a str = TEXTOID,
    }
}

params! {
    /// A schedule's definition: `$1` name .. `$9` group_key, `$10` the
    /// next slot of a new (or changed) expression.
    struct DefineParams<'a> {
        name: &'a str = TEXTOID,
        cron: &'a str = TEXTOID,
        timezone: &'a str = TEXTOID,
        queue: &'a str = TEXTOID,
        payload: RawJsonb = JSONBOID,
        catch_up: &'a str = TEXTOID,
        priority: i32 = INT4OID,
        max_attempts: i32 = INT4OID,
        group_key: Option<&'a str> = TEXTOID,
        next_slot: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

params! {
    /// `$1` now, `$2` the most rows to fire, `$3` the queue (NULL: all),
    /// `$4` whether every queue is the caller's (else only the queues the
    /// session's role holds a queue grant on, where grants are enforced).
    struct DueParams<'a> {
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
        limit: i64 = INT8OID,
        queue: Option<&'a str> = TEXTOID,
        every_queue: bool = BOOLOID,
    }
}

params! {
    /// `$1` name, `$2` next slot, `$3` last slot fired (NULL: none this
    /// round), `$4` its item.
    struct RecordParams<'a> {
        name: &'a str = TEXTOID,
        next_slot: TimestampWithTimeZone = TIMESTAMPTZOID,
        last_slot: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        last_item_id: Option<i64> = INT8OID,
    }
}

params! {
    /// `$1` queue (NULL: every queue), `$2` now.
    struct QueueOrAllAt<'a> {
        queue: Option<&'a str> = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

// A new schedule; nothing if the name exists.
static CREATE: Statement<DefineParams> = Statement::new(
    r#"
INSERT INTO workfence.schedules
       (name, cron, timezone, queue, payload, catch_up, priority, max_attempts, group_key, next_slot)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (name) DO NOTHING
RETURNING true
"#,
);

// The schedule of a name, locked (waits for a fire in flight, which holds
// it): its queue, cron, time zone, last slot and next slot.
static LOCK: Statement<NameParams> = Statement::new(
    r#"
SELECT s.queue, s.cron, s.timezone, s.last_slot, s.next_slot
  FROM workfence.schedules AS s
 WHERE s.name OPERATOR(pg_catalog.=) $1
   FOR UPDATE
"#,
);

// Replace a schedule's definition (locked by LOCK in this transaction);
// true if anything changed.
static REPLACE: Statement<DefineParams> = Statement::new(
    r#"
UPDATE workfence.schedules AS s
   SET cron = $2, timezone = $3, queue = $4, payload = $5, catch_up = $6, priority = $7,
       max_attempts = $8, group_key = $9, next_slot = $10
 WHERE s.name OPERATOR(pg_catalog.=) $1
   AND (s.cron, s.timezone, s.queue, s.payload, s.catch_up, s.priority, s.max_attempts,
        s.group_key, s.next_slot)
       IS DISTINCT FROM ($2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING true
"#,
);

static DELETE: Statement<NameParams> = Statement::new(
    r#"
DELETE FROM workfence.schedules AS s WHERE s.name OPERATOR(pg_catalog.=) $1 RETURNING true
"#,
);

params! {
    /// `$1` name, `$2` paused.
    struct PausedParams<'a> {
        name: &'a str = TEXTOID,
        paused: bool = BOOLOID,
    }
}

// Pause or resume a schedule (locked by LOCK in this transaction): its next
// slot if that changed it.
static SET_PAUSED: Statement<PausedParams> = Statement::new(
    r#"
UPDATE workfence.schedules AS s SET paused = $2
 WHERE s.name OPERATOR(pg_catalog.=) $1 AND s.paused OPERATOR(pg_catalog.<>) $2
RETURNING s.next_slot
"#,
);

// The due schedules that no other transaction holds, earliest first,
// locked: each row's re-check reads its newest version, so a fire that
// committed since the snapshot moved it out of the WHERE. A caller of
// `work_fire_schedules` locks only the schedules of queues its role holds
// a grant on (where grants are enforced), so that a role left in an open
// transaction holds no other team's schedules.
static DUE: Statement<DueParams> = Statement::new(
    r#"
SELECT s.name, s.cron, s.timezone, s.catch_up, s.next_slot, s.queue, s.payload, s.priority,
       s.max_attempts, s.group_key
  FROM workfence.schedules AS s
 WHERE NOT s.paused
   AND s.next_slot OPERATOR(pg_catalog.<=) $1
   AND ($3::pg_catalog.text IS NULL OR s.queue OPERATOR(pg_catalog.=) $3)
   AND ($4
        OR workfence.work_may('enqueue', s.queue)
        OR workfence.work_may('claim', s.queue)
        OR workfence.work_may('operate', s.queue)
        OR workfence.work_may('read', s.queue)
        OR workfence.work_may('purge', s.queue))
 ORDER BY s.next_slot
 LIMIT $2
   FOR UPDATE SKIP LOCKED
"#,
);

// A fire's record: the next slot, and the last slot fired with its item.
static RECORD: Statement<RecordParams> = Statement::new(
    r#"
UPDATE workfence.schedules AS s
   SET next_slot = $2,
       last_slot = COALESCE($3, s.last_slot),
       last_item_id = CASE WHEN $3 IS NULL THEN s.last_item_id ELSE $4 END,
       last_fired_at = CASE WHEN $3 IS NULL THEN s.last_fired_at
                            ELSE pg_catalog.clock_timestamp() END
 WHERE s.name OPERATOR(pg_catalog.=) $1
"#,
);

// Of a queue's schedules that are not paused (of all schedules when `$1`
// is NULL), committed or this transaction's: the earliest next slot, the
// earliest one after `$2` (now), and whether any is still due (held by
// another transaction, or passed over).
static EARLIEST: Statement<QueueOrAllAt> = Statement::new(
    r#"
SELECT pg_catalog.min(s.next_slot),
       pg_catalog.min(s.next_slot) FILTER (WHERE s.next_slot OPERATOR(pg_catalog.>) $2),
       COALESCE(pg_catalog.bool_or(s.next_slot OPERATOR(pg_catalog.<=) $2), false)
  FROM workfence.schedules AS s
 WHERE NOT s.paused
   AND ($1::pg_catalog.text IS NULL OR s.queue OPERATOR(pg_catalog.=) $1)
"#,
);

/// The most schedules one round fires (each up to
/// [`cron::CATCH_UP_CAP`] slots); the rest in the next round.
pub const SCHEDULES_PER_ROUND: i64 = 1000;

fn timestamp(at: Micros) -> Result<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(at).map_err(|_| WorkfenceError::UnexpectedNull {
        column: "next_slot",
    })
}

fn now() -> Micros {
    // SAFETY: reads the system clock; cannot fail.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Create or replace a schedule.
///
/// SQL: `workfence.work_schedule(name text, cron text, queue text, payload
/// jsonb DEFAULT '{}', timezone text DEFAULT 'UTC', catch_up text DEFAULT
/// 'latest', priority int DEFAULT 0, max_attempts int DEFAULT 25, group_key
/// text DEFAULT NULL) RETURNS boolean`: true if the schedule is new or any
/// of its settings changed. Each slot of `cron` in `timezone` enqueues one
/// item in `queue` with key `<name>@<slot as UTC ISO 8601>` and the other
/// arguments as `work_enqueue`'s. A new schedule's first slot is the first
/// after now. Replacing keeps the schedule's next slot when `cron` and
/// `timezone` are unchanged (a due slot still fires), and otherwise starts
/// at the new expression's first slot after now and after the last slot
/// fired; it keeps the schedule paused or not.
///
/// Errors: 22004 for a NULL name, cron, queue, payload, timezone,
/// catch_up, priority or max_attempts; 22023 for a bad name or queue (as
/// `work_enqueue`'s queue), a cron expression croner does not read or that
/// names no time, an unknown time zone, catch_up not 'latest', 'all' or
/// 'none', max_attempts outside 1..1000, a bad group_key; 42501 when queue
/// grants are enforced and the role has no `operate` and `enqueue` grants
/// covering the queue (and, when replacing, no `operate` grant covering the
/// schedule's current queue); 25006 on a hot standby.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
#[allow(clippy::too_many_arguments)]
pub fn work_schedule(
    name: Option<String>,
    cron: Option<String>,
    queue: Option<String>,
    payload: default!(Option<RawJsonb>, "'{}'"),
    timezone: default!(Option<String>, "'UTC'"),
    catch_up: default!(Option<String>, "'latest'"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, 25),
    group_key: default!(Option<String>, "NULL"),
) -> bool {
    (|| {
        let name = validate::schedule_name(name)?;
        let cron_text = validate::required("cron", cron)?;
        let queue = validate::queue(queue)?;
        let payload = validate::required("payload", payload)?;
        let timezone = validate::required("timezone", timezone)?;
        let catch_up = CatchUp::parse(&validate::required("catch_up", catch_up)?)?;
        let priority = validate::required("priority", priority)?;
        let max_attempts = validate::max_attempts(max_attempts)?;
        let group_key = validate::group_key(group_key)?;
        let expression = cron::parse(&cron_text, &timezone)?;
        generation::refuse_on_standby("work_schedule")?;
        // Managing a schedule is operating the queue; its items are
        // enqueues, which a role without `enqueue` may not make.
        grants::check(Capability::Operate, &queue)?;
        grants::check(Capability::Enqueue, &queue)?;
        let now = now();
        let define = |next_slot: Micros| -> Result<DefineParams<'_>> {
            Ok(DefineParams {
                name: &name,
                cron: &cron_text,
                timezone: &timezone,
                queue: &queue,
                payload: payload.clone(),
                catch_up: catch_up.as_str(),
                priority,
                max_attempts,
                group_key: group_key.as_deref(),
                next_slot: timestamp(next_slot)?,
            })
        };
        Spi::connect_mut(|client| {
            loop {
                let first = expression.next_after(now);
                if plans::run(client, &CREATE, define(first)?, |rows| Ok(!rows.is_empty()))? {
                    schedules::changed(Some(first));
                    return Ok(true);
                }
                let existing = plans::run(client, &LOCK, NameParams { name: &name }, |rows| {
                    if rows.is_empty() {
                        return Ok(None);
                    }
                    let row = rows.first();
                    Ok(Some((
                        row.get::<String>(1)?.unwrap_or_default(),
                        row.get::<String>(2)?.unwrap_or_default(),
                        row.get::<String>(3)?.unwrap_or_default(),
                        row.get::<TimestampWithTimeZone>(4)?.map(|t| t.into_inner()),
                        row.get::<TimestampWithTimeZone>(5)?.map(|t| t.into_inner()),
                    )))
                })?;
                // Deleted between the two statements: create it again.
                let Some((old_queue, old_cron, old_zone, last_slot, next_slot)) = existing else {
                    continue;
                };
                if old_queue != queue {
                    grants::check(Capability::Operate, &old_queue)?;
                }
                let next = match next_slot {
                    Some(kept) if old_cron == cron_text && old_zone == timezone => kept,
                    _ => expression.next_after(now.max(last_slot.unwrap_or(i64::MIN))),
                };
                let changed =
                    plans::run(client, &REPLACE, define(next)?, |rows| Ok(!rows.is_empty()))?;
                if changed {
                    schedules::changed(Some(next));
                }
                return Ok(changed);
            }
        })
    })()
    .or_report()
}

/// Lock the schedule `name` (waiting for a fire of it in flight) and check
/// the role's `operate` grant on its queue: false if there is none.
fn lock_for_operator(client: &mut pgrx::spi::SpiClient<'_>, name: &str) -> Result<bool> {
    let queue = plans::run(client, &LOCK, NameParams { name }, |rows| {
        if rows.is_empty() {
            return Ok(None);
        }
        Ok(rows.first().get::<String>(1)?)
    })?;
    let Some(queue) = queue else {
        return Ok(false);
    };
    grants::check(Capability::Operate, &queue)?;
    Ok(true)
}

/// Remove a schedule.
///
/// SQL: `workfence.work_unschedule(name text) RETURNS boolean`: true if it
/// existed. The items it fired stay. A fire of it in flight is waited for
/// (its item stays); no fire starts after.
///
/// Errors: 22004 for a NULL name; 22023 for a bad name; 42501 when queue
/// grants are enforced and the role has no `operate` grant covering the
/// schedule's queue; 25006 on a hot standby.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_unschedule(name: Option<String>) -> bool {
    (|| {
        let name = validate::schedule_name(name)?;
        generation::refuse_on_standby("work_unschedule")?;
        Spi::connect_mut(|client| {
            if !lock_for_operator(client, &name)? {
                return Ok(false);
            }
            plans::run(client, &DELETE, NameParams { name: &name }, |_| Ok(()))?;
            schedules::changed(None);
            Ok(true)
        })
    })()
    .or_report()
}

/// Pause a schedule: it fires nothing until `work_resume_schedule`.
///
/// SQL: `workfence.work_pause_schedule(name text) RETURNS boolean`: true if
/// it was not paused. A fire in flight is waited for.
///
/// Errors: 22004 for a NULL name; 22023 for a bad name; 42704 when there is
/// no schedule of that name; 42501 when queue grants are enforced and the
/// role has no `operate` grant covering the schedule's queue; 25006 on a
/// hot standby.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_pause_schedule(name: Option<String>) -> bool {
    set_paused(name, true, "work_pause_schedule").or_report()
}

/// Resume a paused schedule.
///
/// SQL: `workfence.work_resume_schedule(name text) RETURNS boolean`: true
/// if it was paused. The slots that passed while it was paused are missed
/// slots: its `catch_up` decides which fire (`latest`: the most recent one,
/// `all`: each, `none`: only one at most 60 seconds old).
///
/// Errors: 22004 for a NULL name; 22023 for a bad name; 42704 when there is
/// no schedule of that name; 42501 when queue grants are enforced and the
/// role has no `operate` grant covering the schedule's queue; 25006 on a
/// hot standby.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_resume_schedule(name: Option<String>) -> bool {
    set_paused(name, false, "work_resume_schedule").or_report()
}

/// Pause (`paused`) or resume the schedule `name`: true if that changed it.
/// A resume tells the maintenance worker its next slot.
fn set_paused(name: Option<String>, paused: bool, function: &'static str) -> Result<bool> {
    let name = validate::schedule_name(name)?;
    generation::refuse_on_standby(function)?;
    Spi::connect_mut(|client| {
        if !lock_for_operator(client, &name)? {
            return Err(WorkfenceError::UnknownSchedule { name: name.clone() });
        }
        let params = PausedParams {
            name: &name,
            paused,
        };
        let changed = plans::run(client, &SET_PAUSED, params, |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(Some(
                rows.first()
                    .get_one::<TimestampWithTimeZone>()?
                    .map(|t| t.into_inner()),
            ))
        })?;
        match changed {
            Some(next) => {
                schedules::changed(if paused { None } else { next });
                Ok(true)
            }
            None => Ok(false),
        }
    })
}

/// Fire every due slot of every schedule now.
///
/// SQL: `workfence.work_fire_schedules() RETURNS integer`: how many items it
/// enqueued. For each schedule that is due (not paused, next slot at or
/// before now) and that no other transaction is firing (passed over, never
/// waited for): the slots its `catch_up` keeps, each one item, and its
/// next slot, in the caller's transaction. Callable as often as wanted,
/// from pg_cron (`SELECT workfence.work_fire_schedules()` every minute, or
/// every few seconds for seconds-level expressions) or any client; firing
/// twice fires nothing twice. At most [`SCHEDULES_PER_ROUND`] schedules and
/// [`cron::CATCH_UP_CAP`] slots of each per call.
///
/// Errors: 25006 on a hot standby; 25006 in a read-only transaction.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_fire_schedules() -> i32 {
    (|| {
        generation::refuse_on_standby("work_fire_schedules")?;
        generation::refuse_read_only(c"work_fire_schedules");
        let fired = fire(None, false)?;
        Ok(i32::try_from(fired.enqueued).unwrap_or(i32::MAX))
    })()
    .or_report()
}

/// What a fire did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fired {
    /// Items enqueued (a slot whose key existed enqueues none).
    pub enqueued: i64,
    /// Slots fired, their items new or not.
    pub slots: i64,
    /// The earliest next slot of the schedules it looked at afterwards
    /// (of the queue, or of all), as this transaction sees them.
    pub earliest: Option<Micros>,
    /// The earliest next slot after now of those schedules.
    pub next_future: Option<Micros>,
    /// Whether any of them is still due afterwards (held by another
    /// transaction, passed over, or past the catch-up cap).
    pub due_left: bool,
    /// Due schedules passed over: a lock they needed was taken (their
    /// item's key being inserted by another transaction), or their fire
    /// failed (a WARNING names the schedule and the SQLSTATE).
    pub passed_over: i64,
}

/// How long a fire waits for a lock (`lock_timeout`, milliseconds) before
/// it passes the schedule over.
const NO_WAIT: &std::ffi::CStr = c"1";

/// Whether an error of a schedule's fire ends the whole call (a cancel, a
/// timeout, a shutdown, a resource or internal error) rather than passing
/// the one schedule over: classes 53, 57, 58 and XX.
fn ends_the_call(code: PgSqlErrorCode) -> bool {
    matches!(
        &crate::base::error::sqlstate_text(code)[..2],
        "53" | "57" | "58" | "XX"
    )
}

/// Run the fire of schedule `name` (`work`) in a subtransaction whose
/// `lock_timeout` is [`NO_WAIT`]: `Some` of its result, committed into the
/// caller's transaction; or `None`, rolled back, when it met a lock another
/// transaction held (55P03) or failed (a WARNING names the schedule and
/// the SQLSTATE): one schedule that cannot fire (an expression a newer
/// parser refuses, a trigger on the items) holds up no other, nor the claims
/// of its queue. A cancel, a timeout, a shutdown or a resource or internal
/// error goes on up ([`ends_the_call`]). (The pattern of PL/pgSQL's `BEGIN
/// ... EXCEPTION` block, and of the long poll's attempts,
/// [`crate::backend::wait`].)
fn without_waiting<T>(name: &str, work: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    // SAFETY: an internal subtransaction begun, run in the caller's memory
    // context, then released or rolled back, restoring the caller's memory
    // context and resource owner, on every path; the GUC nest level made
    // inside it is popped before its release (its rollback pops it too).
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"lock_timeout".as_ptr(),
            NO_WAIT.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| work().map(Some)))
            .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                Ok(None)
            })
            .catch_others(|caught| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                let report = match &caught {
                    pg_sys::panic::CaughtError::PostgresError(report)
                    | pg_sys::panic::CaughtError::ErrorReport(report)
                    | pg_sys::panic::CaughtError::RustPanic {
                        ereport: report, ..
                    } => report,
                };
                if ends_the_call(report.sql_error_code()) {
                    caught.rethrow()
                }
                warning!(
                    "schedule {name:?} was not fired, and stays due: {} (SQLSTATE {})",
                    report.message(),
                    crate::base::error::sqlstate_text(report.sql_error_code())
                );
                Ok(None)
            })
            .execute();
        match outcome {
            Ok(Some(value)) => {
                pg_sys::AtEOXact_GUC(true, nest);
                pg_sys::ReleaseCurrentSubTransaction();
                restore();
                Ok(Some(value))
            }
            // Rolled back above.
            Ok(None) => Ok(None),
            Err(err) => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                warning!(
                    "schedule {name:?} was not fired, and stays due: {err} (SQLSTATE {})",
                    crate::base::error::sqlstate_text(err.sqlstate())
                );
                Ok(None)
            }
        }
    }
}

/// Fire the due schedules (of `queue`, or all): see [`work_fire_schedules`].
/// Runs as the caller (inside a SECURITY DEFINER function: the extension's
/// owner); the schedule's maker had `operate` and `enqueue` on its queue.
/// `every_queue`: every schedule (the maintenance worker, a claim of the
/// queue); else, where queue grants are enforced, only those of queues the
/// session's role holds a grant on.
///
/// Each schedule fires in a subtransaction that waits for no lock
/// ([`without_waiting`]): one whose item's key another transaction is
/// inserting (an uncommitted `work_enqueue` of `<name>@<slot>`) is passed
/// over and stays due, instead of stopping every schedule behind it.
pub fn fire(queue: Option<&str>, every_queue: bool) -> Result<Fired> {
    let now = now();
    Spi::connect_mut(|client| {
        let due = plans::run(
            client,
            &DUE,
            DueParams {
                now: timestamp(now)?,
                limit: SCHEDULES_PER_ROUND,
                queue,
                every_queue,
            },
            |rows| {
                let mut due = Vec::with_capacity(rows.len());
                for row in rows {
                    due.push(DueRow {
                        name: row.get::<String>(1)?.unwrap_or_default(),
                        cron: row.get::<String>(2)?.unwrap_or_default(),
                        timezone: row.get::<String>(3)?.unwrap_or_default(),
                        catch_up: row.get::<String>(4)?.unwrap_or_default(),
                        next_slot: row
                            .get::<TimestampWithTimeZone>(5)?
                            .map_or(cron::NEVER, |t| t.into_inner()),
                        queue: row.get::<String>(6)?.unwrap_or_default(),
                        payload: row.get::<RawJsonb>(7)?,
                        priority: row.get::<i32>(8)?.unwrap_or(0),
                        max_attempts: row.get::<i32>(9)?.unwrap_or(25),
                        group_key: row.get::<String>(10)?,
                    });
                }
                Ok(due)
            },
        )?;
        let mut fired = Fired::default();
        for row in &due {
            match without_waiting(&row.name, || fire_one(client, row, now))? {
                Some((slots, enqueued)) => {
                    fired.slots += slots;
                    fired.enqueued += enqueued;
                }
                None => fired.passed_over += 1,
            }
        }
        let at = QueueOrAllAt {
            queue,
            now: timestamp(now)?,
        };
        (fired.earliest, fired.next_future, fired.due_left) =
            plans::run(client, &EARLIEST, at, |rows| {
                let row = rows.first();
                Ok((
                    row.get::<TimestampWithTimeZone>(1)?.map(|t| t.into_inner()),
                    row.get::<TimestampWithTimeZone>(2)?.map(|t| t.into_inner()),
                    row.get::<bool>(3)?.unwrap_or(false),
                ))
            })?;
        Ok(fired)
    })
}

/// A due schedule's row, locked.
struct DueRow {
    name: String,
    cron: String,
    timezone: String,
    catch_up: String,
    next_slot: Micros,
    queue: String,
    payload: Option<RawJsonb>,
    priority: i32,
    max_attempts: i32,
    group_key: Option<String>,
}

/// One schedule's round at `now`: its items and its record; (slots fired,
/// items enqueued).
fn fire_one(
    client: &mut pgrx::spi::SpiClient<'_>,
    row: &DueRow,
    now: Micros,
) -> Result<(i64, i64)> {
    let expression = cron::parse(&row.cron, &row.timezone)?;
    let catch_up = CatchUp::parse(&row.catch_up)?;
    let round = cron::round(&expression, catch_up, row.next_slot, now);
    let payload = row
        .payload
        .clone()
        .ok_or(WorkfenceError::UnexpectedNull { column: "payload" })?;
    let mut last = None;
    let mut enqueued = 0;
    for &slot in &round.fire {
        let (id, inserted) = crate::verbs::enqueue::insert(
            &row.queue,
            &cron::slot_key(&row.name, slot),
            payload.clone(),
            Some(timestamp(slot)?),
            row.priority,
            row.max_attempts,
            None,
            row.group_key.as_deref(),
            crate::verbs::enqueue::How {
                on_conflict: crate::verbs::life::OnConflict::Keep,
                trace: None,
                generated_key: false,
            },
            None,
        )?;
        enqueued += i64::from(inserted);
        last = Some((slot, id));
    }
    plans::run(
        client,
        &RECORD,
        RecordParams {
            name: &row.name,
            next_slot: timestamp(round.next)?,
            last_slot: last.map(|(slot, _)| timestamp(slot)).transpose()?,
            last_item_id: last.map(|(_, id)| id),
        },
        |_| Ok(()),
    )?;
    Ok((round.fire.len() as i64, enqueued))
}

/// Whether a claim starting now may fire its queue's schedules: outside a
/// transaction block (so that it holds no schedule, and hides no fired
/// item, past its own statement) and in READ COMMITTED. Read by the claim
/// before its long poll's attempts, which run in subtransactions.
pub fn claim_may_fire() -> bool {
    // SAFETY: reads backend state of the current transaction.
    let in_block = unsafe { pg_sys::IsTransactionBlock() };
    !in_block && crate::pg::invalidation::read_may_be_kept()
}

/// The lazy fire of a claim of `queue` that may fire ([`claim_may_fire`]):
/// fires the queue's due slots when this backend knows one is due. True if
/// it enqueued anything.
pub fn fire_for_claim(queue: &str) -> Result<bool> {
    let Some(next) = schedules::next_slot(queue)? else {
        return Ok(false);
    };
    if next > now() {
        return Ok(false);
    }
    let fired = fire(Some(queue), true)?;
    // A schedule passed over stays due; this backend's claims look again
    // in a second, not at every call (each would warn again).
    let recheck = now() + 1_000_000;
    let earliest = match fired.earliest {
        Some(at) if fired.passed_over > 0 && at < recheck => Some(recheck),
        other => other,
    };
    schedules::fired(queue, earliest);
    Ok(fired.enqueued > 0)
}
