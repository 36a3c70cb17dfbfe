//! Which queues are paused (`work_pause`), as each backend knows it: read
//! once from `workfence.queues` and kept until a pause or resume commits.
//!
//! A claim must find a paused queue closed, and must cost a queue that is
//! not paused nothing measurable. A probe of `workfence.queues` in the
//! claim statement costs every claim the start-up of its sub-plan, its
//! index scan and two more relation locks, part of the 15% more
//! instructions per claim -> finish the first 0.6.0 build counted against
//! 0.5.0 (callgrind, `scripts/bench-ab.sh`); a set of names in the backend
//! costs a hash look-up.
//!
//! The set is kept correct by PostgreSQL's shared invalidation: `work_pause`
//! and `work_resume` register a relcache invalidation of `workfence.queues`
//! (`CacheInvalidateRelcacheByRelid`), which PostgreSQL sends to every
//! backend when their transaction commits (and applies in the pausing
//! backend at once, and again if it aborts); a backend's callback
//! (`CacheRegisterRelcacheCallback`) then marks its set stale, and the next
//! claim reads the table again. Every claim first takes the invalidations
//! that have arrived (`AcceptInvalidationMessages`). Dropping or
//! re-creating the extension invalidates the table too.
//!
//! PostgreSQL makes a commit visible to other snapshots before it sends the
//! committing transaction's invalidation messages, and releases its locks
//! after. So that no claim falls between the two (it would see a pause's
//! enqueue but not the pause), a pause or resume holds an exclusive
//! advisory lock on the queue (class [`PAUSE_LOCK_CLASS`], key
//! `hashtext(queue)`) to the end of its transaction, and a claim first
//! takes and drops the same lock in share mode without waiting: while it
//! is held, the queue's pause is changing, and the claim hands out nothing
//! (as if paused). Once it is free, the change's invalidation has been
//! sent, and the set is right. Wake-ups go out after the locks are
//! released (`crate::xact`), so a long poll woken by a resume finds the
//! queue open.
//!
//! The set is read with a fresh snapshot (READ COMMITTED) and kept; under
//! REPEATABLE READ or SERIALIZABLE the read uses the transaction's
//! snapshot, whose answer is used but not kept. Only `work_pause` and
//! `work_resume` change the table; a row written to it directly (a
//! superuser's `UPDATE`) is seen by a backend only when something else
//! invalidates the table, or by new backends.
//!
//! A database whose extension predates 0.6.0 has no `workfence.queues`:
//! nothing is paused there, and nothing is kept (after `ALTER EXTENSION
//! ... UPDATE` the next claim finds the table).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::error::Result;
use crate::plans::{self, Statement};

thread_local! {
    /// Bumped by the invalidation callback; the set below is valid for the
    /// generation it was read in. A `Cell`, so that the callback (which can
    /// run inside any catalog access, even while the set is being read)
    /// never borrows anything.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// The OID of `workfence.queues` when the set was read (`InvalidOid`:
    /// none yet), which the callback compares its relation with.
    static QUEUES: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    /// The paused queues, and the generation they were read in.
    static PAUSED: RefCell<Option<(u64, HashSet<String>)>> = const { RefCell::new(None) };
}

/// Register the invalidation callback; `_PG_init` calls it once per backend.
pub fn init() {
    // SAFETY: registering a C callback with static lifetime at library load,
    // on the backend's main thread.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidated), pg_sys::Datum::from(0)) };
}

/// The relcache callback: `relid` was invalidated (`InvalidOid`: every
/// relation). Must not access the catalog, allocate or raise.
#[pg_guard]
unsafe extern "C-unwind" fn invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid == QUEUES.get() {
        GENERATION.set(GENERATION.get().wrapping_add(1));
    }
}

/// The first key of the advisory lock a pause or resume of a queue holds to
/// the end of its transaction (ASCII "WFpa"); the second is
/// `hashtext(queue)`, as the long poll's ([`crate::wait::queue_key`]).
pub const PAUSE_LOCK_CLASS: i32 = 0x5746_7061;

fn pause_lock(queue: &str) -> pg_sys::LOCKTAG {
    crate::compat::advisory_tag(PAUSE_LOCK_CLASS, crate::wait::queue_key(queue))
}

/// Before `work_pause` or `work_resume` changes `queue`'s row: hold its
/// pause lock (exclusive, to the end of the transaction), waiting for
/// another pause or resume of the queue to end.
pub fn changing(queue: &str) {
    let tag = pause_lock(queue);
    // SAFETY: a transaction-scoped lock of the current transaction.
    unsafe {
        pg_sys::LockAcquire(
            &tag,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            false,
            false,
        );
    }
}

/// After `work_pause` or `work_resume` changed `workfence.queues`: every
/// backend (this one included) reads it again before its next claim.
pub fn changed() {
    let queues = plans::workfence_relation(c"queues");
    if queues != pg_sys::InvalidOid {
        // SAFETY: registers an invalidation message of this transaction.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(queues) };
    }
}

// The paused queues of this database.
static PAUSED_QUEUES: Statement<()> = Statement::new(
    r#"
SELECT q.queue FROM workfence.queues AS q WHERE q.paused
"#,
);

/// Whether claims of `queue` hand out nothing (it is paused). Call inside a
/// transaction.
pub fn is_paused(queue: &str) -> Result<bool> {
    let tag = pause_lock(queue);
    let share = pg_sys::ShareLock as pg_sys::LOCKMODE;
    // SAFETY: a lock taken without waiting and released at once (this
    // backend's own exclusive lock, if it is pausing, does not conflict).
    unsafe {
        if pg_sys::LockAcquire(&tag, share, false, true)
            == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
        {
            // A pause or resume of this queue is under way.
            return Ok(true);
        }
        pg_sys::LockRelease(&tag, share, false);
    }
    // SAFETY: takes the invalidation messages that have arrived, as every
    // lock acquisition does; may run the callback above.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    let generation = GENERATION.get();
    let known = PAUSED.with(|paused| match &*paused.borrow() {
        Some((read_in, set)) if *read_in == generation => Some(set.contains(queue)),
        _ => None,
    });
    if let Some(answer) = known {
        return Ok(answer);
    }
    let queues = plans::workfence_relation(c"queues");
    if queues == pg_sys::InvalidOid {
        // A schema before 0.6.0: nothing is paused, and nothing is kept.
        return Ok(false);
    }
    QUEUES.set(queues);
    let set = {
        Spi::connect_mut(|client| {
            plans::run(client, &PAUSED_QUEUES, (), |rows| {
                let mut set = HashSet::new();
                for row in rows {
                    if let Some(name) = row.get::<String>(1)? {
                        set.insert(name);
                    }
                }
                Ok(set)
            })
        })?
    };
    let answer = set.contains(queue);
    // SAFETY: a plain int global of the backend.
    let fresh = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    if fresh {
        // Read in `generation`: if an invalidation came while reading, the
        // next call reads again.
        PAUSED.with(|paused| *paused.borrow_mut() = Some((generation, set)));
    }
    Ok(answer)
}
