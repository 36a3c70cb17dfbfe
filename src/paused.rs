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
//! The set is kept correct by PostgreSQL's shared invalidation
//! ([`crate::invalidation`]): `work_pause` and `work_resume` register a
//! relcache invalidation of `workfence.queues`, which PostgreSQL sends to
//! every backend when their transaction commits; the set is valid for the
//! invalidation generation it was read in, and the next claim after a
//! change reads the table again. Every claim first takes the invalidations
//! that have arrived. Dropping or re-creating the extension invalidates the
//! table too.
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

use std::cell::RefCell;
use std::collections::HashSet;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::error::Result;
use crate::invalidation::{self, Watched};
use crate::plans::{self, Statement};

thread_local! {
    /// The paused queues, and the invalidation generation they were read in.
    static PAUSED: RefCell<Option<(u64, HashSet<String>)>> = const { RefCell::new(None) };
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
    invalidation::invalidate(Watched::Queues);
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
    let generation = invalidation::generation();
    let known = PAUSED.with(|paused| match &*paused.borrow() {
        Some((read_in, set)) if *read_in == generation => Some(set.contains(queue)),
        _ => None,
    });
    if let Some(answer) = known {
        return Ok(answer);
    }
    if invalidation::watch(Watched::Queues) == pg_sys::InvalidOid {
        // A schema before 0.6.0: nothing is paused, and nothing is kept.
        return Ok(false);
    }
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
    if invalidation::read_may_be_kept() {
        // Read in `generation`: if an invalidation came while reading, the
        // next call reads again.
        PAUSED.with(|paused| *paused.borrow_mut() = Some((generation, set)));
    }
    Ok(answer)
}
