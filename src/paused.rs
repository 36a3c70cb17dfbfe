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
//! that have arrived (`AcceptInvalidationMessages`), so a claim that starts
//! after a pause committed sees it. Dropping or re-creating the extension
//! invalidates the table too. Only those two functions change the table;
//! a row written to it directly (a superuser's `UPDATE`) is seen by a
//! backend only when something else invalidates the table, or by new
//! backends.
//!
//! A database whose extension predates 0.6.0 has no `workfence.queues`:
//! nothing is paused there.

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
    QUEUES.set(queues);
    let set = if queues == pg_sys::InvalidOid {
        HashSet::new()
    } else {
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
    // Read in `generation`: if an invalidation came while reading, the
    // next call reads again.
    PAUSED.with(|paused| *paused.borrow_mut() = Some((generation, set)));
    Ok(answer)
}
