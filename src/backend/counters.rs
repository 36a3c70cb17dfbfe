//! Per-queue counters of fencing at work, in shared memory: how many calls
//! with a stale token were refused, and how many lapsed leases were claimed
//! anew (`work_queue_stats.refused` and `.lapsed`).
//!
//! Why shared memory and not a table: a refusal must not write, lock or wait
//! on the path of the item's current holder, nor wait behind that holder's
//! transaction (a counter row would be one more row every refusal locks,
//! and a counter kept in the item's row would be a write under the holder's
//! lock), and a refusal inside a transaction that then rolls back is still
//! a refusal. So the counts are kept as PostgreSQL keeps its own cumulative
//! statistics (`pg_stat_*`): in shared memory, counted whether or not the
//! transaction commits, since the server started (a restart or crash sets
//! them back to zero).
//!
//! Shared memory can only be set aside while the postmaster loads
//! `shared_preload_libraries`; without the library there, nothing is
//! counted and [`queue_counters`] returns no row (the view shows NULL).
//!
//! The table holds [`SLOTS`] (database, queue) pairs for the whole server,
//! one LWLock over all of them (taken exclusively for one increment, only
//! on the refusal and lapse paths, never by a call that is honoured). A
//! queue that finds the table full is not counted, and from then on queues
//! absent from the table read as NULL (unknown) rather than zero.

use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::lwlock::PgLwLock;
use pgrx::pg_shmem_init;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::base::error::{OrReport, Result};

/// How many (database, queue) pairs the server counts for.
pub const SLOTS: usize = 1024;

/// One counted queue. `database == 0` marks a free slot.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// The database's OID.
    database: u32,
    /// How many bytes of `name` are the queue's name.
    len: u8,
    /// The queue's name (at most [`validate::QUEUE_MAX_BYTES`] bytes).
    name: [u8; validate::QUEUE_MAX_BYTES],
    /// Stale-token calls refused.
    refused: u64,
    /// Lapsed leases claimed anew.
    lapsed: u64,
}

impl Slot {
    const FREE: Slot = Slot {
        database: 0,
        len: 0,
        name: [0; validate::QUEUE_MAX_BYTES],
        refused: 0,
        lapsed: 0,
    };

    fn is(&self, database: u32, name: &[u8]) -> bool {
        self.database == database && &self.name[..usize::from(self.len)] == name
    }
}

/// The counters of every queue the server has counted for, an open-addressed
/// table (linear probing from the queue's `hashtext`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Table {
    slots: [Slot; SLOTS],
    /// A queue once found the table full: absent queues are unknown, not zero.
    full: bool,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: [Slot::FREE; SLOTS],
            full: false,
        }
    }
}

// SAFETY: plain old data (integers and byte arrays), no pointers.
unsafe impl PGRXSharedMemory for Slot {}
// SAFETY: as above.
unsafe impl PGRXSharedMemory for Table {}

static TABLE: PgLwLock<Table> = unsafe { PgLwLock::new(c"pg_workfence counters") };

/// Whether [`TABLE`] was set aside (the library is preloaded). Set in the
/// postmaster at load, inherited by every backend it forks.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Set the table aside when the postmaster preloads the library; called
/// from `_PG_init`.
pub fn init() {
    // SAFETY: a plain flag PostgreSQL sets while it loads the preloaded
    // libraries; read on the main thread.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        pg_shmem_init!(TABLE);
        ENABLED.store(true, Ordering::Relaxed);
    }
}

/// What to add to a queue's counters.
#[derive(Clone, Copy)]
enum Count {
    Refused,
    Lapsed,
}

fn database() -> u32 {
    // SAFETY: a plain global of the connected backend.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

/// The slot of (database, name) in `table`, or where it would go (a free
/// slot), or `None` when it is absent and the table is full.
fn probe(table: &Table, database: u32, name: &[u8]) -> Option<usize> {
    let start = crate::pg::compat::hash_text(name) as usize % SLOTS;
    (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .find(|&i| table.slots[i].database == 0 || table.slots[i].is(database, name))
}

fn add(queue: &str, what: Count, n: u64) {
    if n == 0 || !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let name = queue.as_bytes();
    if name.len() > validate::QUEUE_MAX_BYTES {
        // Every queue the functions accept fits; nothing else is counted.
        return;
    }
    let database = database();
    let mut table = TABLE.exclusive();
    let Some(i) = probe(&table, database, name) else {
        table.full = true;
        return;
    };
    let slot = &mut table.slots[i];
    if slot.database == 0 {
        slot.database = database;
        slot.len = name.len() as u8;
        slot.name[..name.len()].copy_from_slice(name);
    }
    match what {
        Count::Refused => slot.refused = slot.refused.saturating_add(n),
        Count::Lapsed => slot.lapsed = slot.lapsed.saturating_add(n),
    }
}

/// Count `n` calls refused for a stale token on items of `queue`.
pub fn refused(queue: &str, n: u64) {
    add(queue, Count::Refused, n);
}

/// Count `n` lapsed leases of `queue` claimed anew.
pub fn lapsed(queue: &str, n: u64) {
    add(queue, Count::Lapsed, n);
}

/// Whether refusals are counted at all (the library is preloaded): the
/// token calls skip the look-up of a refused item's queue when they are not.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The counters of `queue` in this database, if they are known: `None`
/// when nothing is counted (not preloaded) or the queue is absent from a
/// table that filled up.
fn read(queue: &str) -> Option<(i64, i64)> {
    if !enabled() {
        return None;
    }
    let database = database();
    let name = queue.as_bytes();
    let table = TABLE.share();
    match probe(&table, database, name) {
        Some(i) if table.slots[i].database != 0 => {
            let slot = &table.slots[i];
            Some((
                i64::try_from(slot.refused).unwrap_or(i64::MAX),
                i64::try_from(slot.lapsed).unwrap_or(i64::MAX),
            ))
        }
        _ if table.full => None,
        _ => Some((0, 0)),
    }
}

/// The fencing counters of one queue of this database, since the server
/// started.
///
/// SQL: `workfence.queue_counters(queue text) RETURNS TABLE (refused bigint,
/// lapsed bigint)`: one row, or none when nothing is counted (the library
/// is not in `shared_preload_libraries`) or the queue is unknown to a
/// counter table that filled up ([`SLOTS`] queues per server).
/// `work_queue_stats` reads it for its `refused` and `lapsed` columns;
/// grant it with the view.
///
/// - `refused`: calls of `work_renew`, `work_finish`, `work_finish_many`
///   (per pair), `work_release`, `work_fail` and `work_assert` refused for
///   a token that is not the item's current one (superseded, finished,
///   cancelled, wrong owner), counted whether or not the caller's
///   transaction commits. A token of an item that does not exist is not
///   counted (it has no queue).
/// - `lapsed`: lapsed leases claimed anew (each one superseded a token).
///
/// Errors: 22004 for a NULL queue; 22023 for a bad queue (see `work_enqueue`);
/// 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no read grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn queue_counters(
    queue: Option<String>,
) -> TableIterator<'static, (name!(refused, i64), name!(lapsed, i64))> {
    (|| -> Result<Vec<(i64, i64)>> {
        let queue = validate::queue(queue)?;
        grants::check(Capability::Read, &queue)?;
        Ok(read(&queue).into_iter().collect())
    })()
    .map(TableIterator::new)
    .or_report()
}
