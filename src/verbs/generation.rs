//! Epochs that survive a failover (docs/contract.md, promise 8; the
//! reasoning is `docs/failover.md`).
//!
//! An epoch is drawn from `workfence.epoch_seq`, whose position is only as
//! new as the WAL the server has. A standby promoted before it replayed the
//! primary's last claims, a point-in-time recovery to before some claims,
//! or an older dump restored, continues from an older position and would
//! hand the same epochs out again: the token of a worker that claimed on
//! the old history would be honoured on the new one.
//!
//! **History.** The row of `workfence.generation` names the history the
//! database's epochs come from: the cluster's system identifier, the
//! timeline, and the database's OID. A promotion and a point-in-time
//! recovery start a new timeline, a restore into another cluster a new
//! system identifier, a restore or a copy (`CREATE DATABASE ... TEMPLATE`)
//! into the same cluster a new database OID; a dump restored brings the old
//! row along with the one `CREATE EXTENSION` wrote, so two rows also mean a
//! new history. A timeline number alone can repeat (two standbys of one
//! primary promoted one after the other both start timeline 2), and so can
//! the row as a whole; what cannot repeat is the moment a history starts.
//!
//! **The generation floor.** The first claim on a new history moves the
//! sequence to at least `now << 10`: the server's clock in milliseconds
//! since 2000-01-01 times 1024 ([`floor_at`]). Within a history the epoch
//! grows by one per claim, and no server claims 1,024 items per
//! millisecond on average (a million per second), so every epoch of a
//! history started at time `t0` is below `now << 10` for as long as that
//! history runs: a later history starts above all of it, whichever
//! timeline, system or database it has, and however many of the old
//! history's claims it lost. The one assumption is the servers' clocks:
//! the new history's clock at its first claim must not be behind the old
//! history's at its last claim (they are seconds apart at a failover and
//! far more at a restore, and NTP keeps machines within milliseconds). The
//! floor stays below 2^53 until the year 2278, so JavaScript clients that
//! read epochs as numbers keep them exact. (Hybrid logical clocks,
//! Kulkarni et al. 2014, take the same max of a counter and the clock; here
//! only the start of a history takes it, so a claim's epoch is still one
//! `nextval`.)
//!
//! **Cost.** Each backend checks the row once, then only compares the
//! server's timeline with the one it checked (one read of shared memory);
//! a backend connected before a promotion sees the new timeline and checks
//! again. On a new history the first claim moves the sequence (a `setval`)
//! and rewrites the row in its transaction, under a table lock that keeps
//! two backends from rewriting it at once. Nothing waits for that lock: a
//! backend that finds it taken (another claim of the new history, its
//! transaction still open, perhaps for long) moves the sequence itself and
//! goes on, and so does every backend's first claim until a claim that
//! rewrote the row commits (a long poll that claimed nothing, or a claim
//! rolled back, takes its row back with it). Moving the sequence is safe to
//! repeat: it only ever moves it forward, to the floor, and leaves it
//! alone once it is there. The backends that move it take turns for that
//! one statement (a lock claims' `nextval` does not conflict with), each
//! reading the clock in its turn, so that none moves it back to a floor it
//! read before another moved it higher.
//!
//! **Hot standby.** A claim on a server in recovery is refused at once
//! with 25006, not left to fail in its statement or to wait.

use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::base::error::{Result, WorkfenceError};
use crate::pg::plans::{self, params, Statement};

/// Epochs a history may hand out per millisecond of its life, on average,
/// and still stay below the floor of any later one (a power of two: the
/// floor is a shift).
pub const EPOCHS_PER_MS: i64 = 1024;

/// The generation floor at server time `now` (microseconds since
/// 2000-01-01, PostgreSQL's `TimestampTz`): the milliseconds since then
/// times [`EPOCHS_PER_MS`]. `sql/bootstrap.sql`'s `items_sequence_floor`
/// computes the same in SQL (the pg test `the_sql_floor_is_the_rust_floor`
/// compares them).
pub fn floor_at(now: i64) -> i64 {
    (now / 1000).max(0) * EPOCHS_PER_MS
}

/// The history a claim on this server and database continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct History {
    /// `pg_control_system().system_identifier`.
    system: i64,
    /// The timeline WAL is written on.
    timeline: i32,
    /// The database's OID.
    database: pg_sys::Oid,
}

thread_local! {
    /// The timeline this backend last found its history on (checked
    /// against `workfence.generation`); `None`: not checked yet.
    static CHECKED: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Refuse a claim on a server in recovery (a hot standby): 25006.
pub fn refuse_on_standby(function: &'static str) -> Result<()> {
    // SAFETY: reads a backend flag (shared memory only until recovery ends).
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(WorkfenceError::HotStandby { function });
    }
    Ok(())
}

/// Refuse a claim in a read-only transaction (`default_transaction_read_only`,
/// `SET TRANSACTION READ ONLY`, a session to a server during failover) with
/// PostgreSQL's own error, SQLSTATE 25006 (read_only_sql_transaction),
/// before anything is read: the claim's UPDATE would raise it, but from
/// 0.12.0 a claim first asks whether anything is due (issue 33), and on an
/// empty queue a worker in such a session would be told "nothing" for ever
/// instead of learning that it cannot claim (worker libraries reconnect on
/// 25006). `function` names the call in the message.
pub fn refuse_read_only(function: &'static std::ffi::CStr) {
    // SAFETY: raises through PostgreSQL's error machinery, which the
    // pg_sys wrapper turns into a Rust panic that pgrx reports; a read of
    // a backend flag otherwise.
    unsafe { pg_sys::PreventCommandIfReadOnly(function.as_ptr()) }
}

/// Before a claim draws an epoch: if this database's history is new (a
/// promotion, a point-in-time recovery, a restore), move `epoch_seq` above
/// every epoch the old history could have handed out. Call inside the
/// claim's transaction, on a primary.
pub fn ensure() -> Result<()> {
    // SAFETY: a primary's timeline, read without a lock (it cannot change
    // while the server is out of recovery).
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    if CHECKED.get() == Some(timeline) {
        return Ok(());
    }
    let table = plans::workfence_relation(c"generation");
    if table == pg_sys::InvalidOid {
        // A schema before 0.8.0 (the update has not run): no check.
        return Ok(());
    }
    // SAFETY: plain reads of backend and shared globals.
    let history = unsafe {
        History {
            system: pg_sys::GetSystemIdentifier() as i64,
            timeline: timeline as i32,
            database: pg_sys::MyDatabaseId,
        }
    };
    if recorded(table) != [history] {
        // A new history. One backend at a time rewrites the row (the lock
        // is held to the end of the claim's transaction); the others do not
        // wait for it: they move the sequence themselves.
        // SAFETY: a table lock of this transaction, on the extension's
        // table, taken only if it is free.
        let rewrite = unsafe {
            pg_sys::ConditionalLockRelationOid(
                table,
                pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE,
            )
        };
        // Under the lock, look again: another backend may have rewritten
        // the row and committed meanwhile.
        if !rewrite || recorded(table) != [history] {
            bump(history, rewrite)?;
        }
    }
    CHECKED.set(Some(timeline));
    Ok(())
}

/// The rows of `workfence.generation` as a snapshot taken now sees them.
fn recorded(table: pg_sys::Oid) -> Vec<History> {
    let mut rows = Vec::with_capacity(1);
    // SAFETY: the table of this version's schema: (system_identifier
    // bigint, timeline integer, database oid, floor bigint, since
    // timestamptz), all NOT NULL.
    unsafe {
        plans::latest_rows(table, 5, |values, nulls| {
            if nulls[..3].iter().any(|null| *null) {
                return;
            }
            rows.push(History {
                system: values[0].value() as i64,
                timeline: values[1].value() as i32,
                database: pg_sys::Oid::from(values[2].value() as u32),
            });
        });
    }
    rows
}

// Move the sequence forward to `$1` (the generation floor) if its next
// value is below it, so that the next nextval returns at least `$1`; leave
// it alone otherwise (another backend of the new history moved it and may
// be drawing from it: writing back a position read here could move it
// backwards). The result: the next value, and whether this call moved it.
static SEQUENCE_TO_FLOOR: Statement<FloorParams> = Statement::new(
    r#"
SELECT CASE WHEN n.next OPERATOR(pg_catalog.<) $1
            THEN pg_catalog.setval('workfence.epoch_seq'::pg_catalog.regclass, $1, false)
            ELSE n.next END,
       n.next OPERATOR(pg_catalog.<) $1
  FROM (SELECT CASE WHEN s.is_called THEN s.last_value OPERATOR(pg_catalog.+) 1
                    ELSE s.last_value END AS next
          FROM workfence.epoch_seq AS s) AS n
"#,
);

params! {
    /// `$1` the generation floor.
    struct FloorParams {
        floor: i64 = INT8OID,
    }
}

// The new history's row, in place of every row before.
static RECORD: Statement<RecordParams> = Statement::new(
    r#"
WITH gone AS (DELETE FROM workfence.generation RETURNING 1)
INSERT INTO workfence.generation (system_identifier, timeline, database, floor, since)
SELECT $1, $2, $3, $4, pg_catalog.clock_timestamp()
  FROM (SELECT pg_catalog.count(*) FROM gone) AS g
"#,
);

params! {
    /// `$1` system identifier, `$2` timeline, `$3` database, `$4` floor.
    struct RecordParams {
        system: i64 = INT8OID,
        timeline: i32 = INT4OID,
        database: pg_sys::Oid = OIDOID,
        floor: i64 = INT8OID,
    }
}

/// Start the generation of `history`: the sequence forward to the floor,
/// the row rewritten when `rewrite` (this backend holds the table lock),
/// and a LOG line for the operator when this call moved the sequence.
fn bump(history: History, rewrite: bool) -> Result<()> {
    // The backends that move the sequence take turns, and each reads the
    // clock only once it has its turn: the read of the sequence and its
    // setval are two steps, and a backend that had read the clock earlier
    // (a lower floor) and moved the sequence after another one had moved it
    // higher moved it back, below epochs already handed out (the soak test
    // caught it after a failover: an epoch of the new history at or below
    // one the same history had committed). Claims drawing with nextval take
    // a lock this one does not conflict with, so they never wait for it;
    // it is released as soon as the sequence is moved, not held to the end
    // of the claim's transaction.
    let seq = plans::workfence_relation(c"epoch_seq");
    let lock = pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a lock on the extension's sequence, released below.
    unsafe { pg_sys::LockRelationOid(seq, lock) };
    // SAFETY: reads the system clock.
    let floor = floor_at(unsafe { pg_sys::GetCurrentTimestamp() });
    let moved_to = Spi::connect_mut(|client| {
        plans::run(client, &SEQUENCE_TO_FLOOR, FloorParams { floor }, |rows| {
            let row = rows.first();
            Ok((
                row.get::<i64>(1)?.unwrap_or(floor),
                row.get::<bool>(2)?.unwrap_or(false),
            ))
        })
    });
    // SAFETY: the lock taken above (an error above ends the transaction,
    // which releases it).
    unsafe { pg_sys::UnlockRelationOid(seq, lock) };
    let (next, moved) = moved_to?;
    let (next, moved) = Spi::connect_mut(|client| {
        if rewrite {
            plans::run(
                client,
                &RECORD,
                RecordParams {
                    system: history.system,
                    timeline: history.timeline,
                    database: history.database,
                    floor: next,
                },
                |_| Ok(()),
            )?;
        }
        Ok::<_, WorkfenceError>((next, moved))
    })?;
    if moved {
        log!(
            "pg_workfence: claims continue a new history (system {}, timeline {}, database {}): \
             epochs from {next} on",
            history.system,
            history.timeline,
            history.database.to_u32()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{floor_at, EPOCHS_PER_MS};

    #[test]
    fn the_floor_is_milliseconds_times_1024() {
        assert_eq!(EPOCHS_PER_MS, 1024);
        assert_eq!(floor_at(0), 0);
        assert_eq!(floor_at(999), 0);
        assert_eq!(floor_at(1_000), 1024);
        assert_eq!(floor_at(-5), 0);
    }

    #[test]
    fn the_floor_stays_a_safe_javascript_integer_until_2278() {
        // Microseconds from 2000-01-01 to 2278-01-01 (a 365.2425-day year).
        let year_2278 = (278.0 * 365.2425 * 86_400.0 * 1e6) as i64;
        assert!(floor_at(year_2278) < (1_i64 << 53));
        let year_2280 = (280.0 * 365.2425 * 86_400.0 * 1e6) as i64;
        assert!(floor_at(year_2280) > (1_i64 << 53));
    }
}
