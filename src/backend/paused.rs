//! Which queues are paused (`work_pause`), as each backend knows it: read
//! once from `workfence.queues` and kept until a pause or resume commits.
//! From 0.10.0 the same read also says which queues have serial groups or
//! limits ([`Settings`], [`crate::verbs::flow`]): `work_limit` and a queue's first
//! grouped enqueue change the table as a pause does, under the same lock
//! and with the same invalidation, so a claim never runs a queue's plain
//! statements once a grouped item or a limit is visible to it. (The first
//! grouped enqueue marks the queue at its transaction's commit, from
//! 0.12.0, so that it holds the lock and the row only for the moment of
//! the commit, never while a producer's transaction stays open.)
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
//! ([`crate::pg::invalidation`]): `work_pause` and `work_resume` register a
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
//! released (`crate::backend::xact`), so a long poll woken by a resume finds the
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
use std::collections::HashMap;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::base::error::Result;
use crate::pg::invalidation::{self, Watched};
use crate::pg::plans::{self, Statement};

/// What a claim needs to know of a queue's settings before it picks items.
/// A queue without a row in `workfence.queues` has the default: all false.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `work_pause`d: claims hand out nothing.
    pub paused: bool,
    /// An item with a `group_key` was enqueued in it (from 0.10.0): claims
    /// keep its groups serial ([`crate::verbs::flow`]).
    pub grouped: bool,
    /// It has a concurrency or rate limit (`work_limit`, from 0.10.0);
    /// the limits themselves are read by the claim with the slot rows it
    /// locks (from 0.12.0; before, under the queue's limit lock,
    /// [`crate::verbs::flow`]).
    pub limited: bool,
}

thread_local! {
    /// The queues with settings other than the default, and the
    /// invalidation generation they were read in.
    static SETTINGS: RefCell<Option<(u64, HashMap<String, Settings>)>> = const { RefCell::new(None) };
}

/// The first key of the advisory lock a pause or resume of a queue holds to
/// the end of its transaction (ASCII "WFpa"); the second is
/// `hashtext(queue)`, as the long poll's ([`crate::pg::keys::queue_key`]).
pub const PAUSE_LOCK_CLASS: i32 = 0x5746_7061;

fn pause_lock(queue: &str) -> pg_sys::LOCKTAG {
    crate::pg::compat::advisory_tag(PAUSE_LOCK_CLASS, crate::pg::keys::queue_key(queue))
}

/// Before `work_pause`, `work_resume`, `work_limit` or a first grouped
/// enqueue changes `queue`'s row: its pause lock is to be held, exclusively,
/// by the transaction's commit ([`hold_for_commit`], from the pre-commit
/// callback of [`crate::backend::xact`]). Only for the commit: the lock covers the
/// moment between the commit becoming visible and its invalidation being
/// sent, nothing more. Held from the call on, as until 0.11.0, it let a
/// role that may pause one queue (or enqueue its first grouped item) hold
/// an open transaction that stopped the claims of every queue whose name
/// hashes alike, another team's included (issue 30).
pub fn changing(queue: &str) {
    crate::backend::xact::settings_change_at_commit(queue);
}

/// At the commit of a transaction that changed `queue`'s settings: take its
/// pause lock exclusively, to the end of the commit, waiting for another
/// commit that holds it.
pub fn hold_for_commit(queue: &str) {
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

/// The key a queue's pause lock is ordered by: commits that change several
/// queues take their locks in this order, so two of them never wait on
/// each other in a cycle.
pub fn lock_order(queue: &str) -> i32 {
    crate::pg::keys::queue_key(queue)
}

/// After `work_pause` or `work_resume` changed `workfence.queues`: every
/// backend (this one included) reads it again before its next claim.
pub fn changed() {
    invalidation::invalidate(Watched::Queues);
}

// The queues of this database with settings other than the default:
// name, paused, grouped, limited. (`legacy`: before 0.10.0, which added
// the last three columns; before 0.6.0 there is no table at all.)
static QUEUE_SETTINGS: plans::Versioned<()> = plans::Versioned {
    current: Statement::new(
        r#"
SELECT q.queue, q.paused, q.grouped,
       q.concurrency IS NOT NULL OR q.rate IS NOT NULL
  FROM workfence.queues AS q
 WHERE q.paused OR q.grouped OR q.concurrency IS NOT NULL OR q.rate IS NOT NULL
"#,
    ),
    legacy: Statement::new(
        r#"
SELECT q.queue, q.paused, false, false FROM workfence.queues AS q WHERE q.paused
"#,
    ),
};

/// Whether claims of `queue` hand out nothing (it is paused). Call inside a
/// transaction.
pub fn is_paused(queue: &str) -> Result<bool> {
    Ok(settings(queue)?.paused)
}

/// The settings of `queue` a claim needs ([`Settings`]), as this backend
/// knows them (see the module comment). While a pause, resume or limit of
/// the queue, or the commit of its first grouped enqueue, is under way, it
/// reads as paused. Call
/// inside a transaction.
pub fn settings(queue: &str) -> Result<Settings> {
    let tag = pause_lock(queue);
    let share = pg_sys::ShareLock as pg_sys::LOCKMODE;
    // SAFETY: a lock taken without waiting and released at once (this
    // backend's own exclusive lock, if it is pausing, does not conflict).
    unsafe {
        if pg_sys::LockAcquire(&tag, share, false, true)
            == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
        {
            // A pause or resume of this queue is under way.
            return Ok(Settings {
                paused: true,
                ..Settings::default()
            });
        }
        pg_sys::LockRelease(&tag, share, false);
    }
    settings_unlocked(queue)
}

/// The settings of `queue` as this backend knows them, without looking at
/// the queue's pause lock: for callers that only tune what they do (wake a
/// waiter or not, mark a queue grouped or see it marked), never for a
/// claim's decision. Call inside a transaction.
pub fn settings_unlocked(queue: &str) -> Result<Settings> {
    let mut settings = settings_committed(queue)?;
    // A first grouped item this transaction enqueued: the queue is marked
    // at commit, and this transaction's own claims already see the item.
    settings.grouped |= crate::backend::xact::grouped_pending(queue);
    Ok(settings)
}

/// The settings of `queue` as committed, as this backend knows them.
fn settings_committed(queue: &str) -> Result<Settings> {
    let generation = invalidation::generation();
    let known = SETTINGS.with(|settings| match &*settings.borrow() {
        Some((read_in, map)) if *read_in == generation => {
            Some(map.get(queue).copied().unwrap_or_default())
        }
        _ => None,
    });
    if let Some(answer) = known {
        return Ok(answer);
    }
    if invalidation::watch(Watched::Queues) == pg_sys::InvalidOid {
        // A schema before 0.6.0: nothing is paused, and nothing is kept.
        return Ok(Settings::default());
    }
    let statement = crate::pg::plans::for_schema(&QUEUE_SETTINGS);
    let map = Spi::connect_mut(|client| {
        plans::run(client, statement, (), |rows| {
            let mut map = HashMap::new();
            for row in rows {
                if let Some(name) = row.get::<String>(1)? {
                    map.insert(
                        name,
                        Settings {
                            paused: row.get::<bool>(2)?.unwrap_or(false),
                            grouped: row.get::<bool>(3)?.unwrap_or(false),
                            limited: row.get::<bool>(4)?.unwrap_or(false),
                        },
                    );
                }
            }
            Ok(map)
        })
    })?;
    let answer = map.get(queue).copied().unwrap_or_default();
    if invalidation::read_may_be_kept() {
        // Read in `generation`: if an invalidation came while reading, the
        // next call reads again.
        SETTINGS.with(|settings| *settings.borrow_mut() = Some((generation, map)));
    }
    Ok(answer)
}
