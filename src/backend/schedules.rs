//! What a backend knows of the schedules (from 0.12.0, issue 34;
//! [`crate::verbs::schedule`]): which queues have schedules that are not
//! paused, and the earliest next slot of each, so that a claim of a queue
//! with none pays a hash look-up for the lazy fire, and a long poll knows
//! when to look again; and, when the library is preloaded, the earliest
//! next slot the maintenance worker knows of, in shared memory.
//!
//! The map is read in one statement (`workfence.schedules` holds a row per
//! schedule, not per item) and kept for the invalidation generation it was
//! read in ([`crate::pg::invalidation`]): `work_schedule`,
//! `work_unschedule`, `work_pause_schedule` and `work_resume_schedule`
//! invalidate the table. A fire does not (it would make every backend
//! read every cache again at every slot): the backend that fired sets its
//! own entry ([`fired`]); another backend's entry is then early, so its
//! next claim of the queue runs the fire statement once, finds nothing due,
//! and sets its entry from what it read. An entry is never late.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use pgrx::pg_shmem_init;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgAtomic;

use crate::base::cron::{Micros, NEVER};
use crate::base::error::{OrReport, Result};
use crate::pg::invalidation::{self, Watched};
use crate::pg::plans::{self, Statement};

thread_local! {
    /// A claim's lazy fire enqueued items this attempt ([`set_fired`]).
    static FIRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Queue -> earliest next slot of its schedules that are not paused,
    /// and the invalidation generation it was read in.
    static NEXT: RefCell<Option<(u64, HashMap<String, Micros>)>> = const { RefCell::new(None) };
}

// Every queue's earliest next slot among its schedules that are not paused.
static NEXT_SLOTS: Statement<()> = Statement::new(
    r#"
SELECT s.queue, pg_catalog.min(s.next_slot)
  FROM workfence.schedules AS s
 WHERE NOT s.paused
 GROUP BY s.queue
"#,
);

/// The earliest next slot of `queue`'s schedules that are not paused, as
/// this backend knows it (early at worst, see the module comment); `None`
/// when it has none, or in a schema before 0.12.0. Call inside a
/// transaction.
pub fn next_slot(queue: &str) -> Result<Option<Micros>> {
    let generation = invalidation::generation();
    let known = NEXT.with(|next| match &*next.borrow() {
        Some((read_in, map)) if *read_in == generation => Some(map.get(queue).copied()),
        _ => None,
    });
    if let Some(answer) = known {
        return Ok(answer);
    }
    if invalidation::watch(Watched::Schedules) == pg_sys::InvalidOid {
        return Ok(None);
    }
    let map = Spi::connect_mut(|client| {
        plans::run(client, &NEXT_SLOTS, (), |rows| {
            let mut map = HashMap::new();
            for row in rows {
                if let (Some(queue), Some(at)) =
                    (row.get::<String>(1)?, row.get::<TimestampWithTimeZone>(2)?)
                {
                    map.insert(queue, at.into_inner());
                }
            }
            Ok(map)
        })
    })?;
    let answer = map.get(queue).copied();
    if invalidation::read_may_be_kept() {
        NEXT.with(|next| *next.borrow_mut() = Some((generation, map)));
    }
    Ok(answer)
}

/// Whether a claim attempt's fire enqueued items (set by every attempt): a
/// long poll whose attempt fired and claimed nothing ends its wait
/// ([`take_fired`]), so that its statement commits the fire (holding the
/// schedule's row and hiding its items no longer).
pub fn set_fired(fired: bool) {
    FIRED.set(fired);
}

/// Whether the last attempt's fire enqueued items (and forget it).
pub fn take_fired() -> bool {
    FIRED.replace(false)
}

/// How long a long poll of `queue` may sleep before a slot of its
/// schedules is due (zero-free: a slot already due that this backend did
/// not fire, because another transaction holds the schedule or the claim
/// runs in a transaction block, is looked at again after
/// [`DUE_RECHECK`]); `None` when the queue has no schedule.
pub fn until_next_slot(queue: &str) -> Result<Option<std::time::Duration>> {
    let Some(next) = next_slot(queue)? else {
        return Ok(None);
    };
    // SAFETY: reads the system clock; cannot fail.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    Ok(Some(if next > now {
        std::time::Duration::from_micros(u64::try_from(next - now).unwrap_or(u64::MAX))
    } else {
        DUE_RECHECK
    }))
}

/// See [`until_next_slot`].
pub const DUE_RECHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// After this backend ran a fire of `queue`: its earliest next slot as the
/// fire read it (`None`: it has no schedule that is not paused). The fire
/// is not committed yet: if its transaction aborts (the claim's statement
/// fails after it), the map is dropped and read again, so that a slot the
/// aborted fire had moved past is not taken for fired.
pub fn fired(queue: &str, next: Option<Micros>) {
    NEXT.with(|cache| {
        if let Some((_, map)) = &mut *cache.borrow_mut() {
            match next {
                Some(at) => map.insert(queue.to_string(), at),
                None => map.remove(queue),
            };
        }
    });
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, || {
        NEXT.with(|cache| *cache.borrow_mut() = None);
    });
}

/// After a verb changed `workfence.schedules` (not a fire): every backend
/// reads it again, and, once this transaction commits, the maintenance
/// worker looks at `next` (the changed schedule's next slot) if it is
/// earlier than what it knew.
pub fn changed(next: Option<Micros>) {
    invalidation::invalidate(Watched::Schedules);
    // The maintenance worker learns of a change at its commit, which a
    // prepared transaction's COMMIT PREPARED runs no code of ours for.
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::PrePrepare, || {
        Err::<(), _>(crate::base::error::WorkfenceError::SchedulePrepared).or_report();
    });
    if let (Some(at), true) = (next, SHARED.load(Ordering::Relaxed)) {
        // After the commit is visible to other snapshots, so that a round
        // that counts this change sees the schedule (see `round_found`).
        pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Commit, move || {
            CHANGES.get().fetch_add(1, Ordering::AcqRel);
            NEXT_FIRE.get().fetch_min(at, Ordering::AcqRel);
        });
    }
}

/// The earliest next slot the maintenance worker knows of, in shared
/// memory, when the library is preloaded: a round sets it; a schedule's
/// change lowers it. `i64::MIN` (before the first round): a round is due.
static NEXT_FIRE: PgAtomic<AtomicI64> = unsafe { PgAtomic::new(c"workfence_next_fire") };

/// How many schedule changes committed since the server started (shared
/// memory, when preloaded): a round that began before one may have missed it.
static CHANGES: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"workfence_schedule_changes") };

/// How many maintenance rounds fired a slot since the server started
/// (shared memory, when preloaded): the launcher backs off from rounds that
/// fire nothing while a schedule stays due.
static FIRING_ROUNDS: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"workfence_firing_rounds") };

/// Whether the last round left a schedule due (held by another
/// transaction, or passed over): the launcher retries it, backing off,
/// apart from the next slot of the others (shared memory, when preloaded).
static DUE_LEFT: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"workfence_schedules_due_left") };

/// Whether [`NEXT_FIRE`] was set aside (the library is preloaded).
static SHARED: AtomicBool = AtomicBool::new(false);

/// Set the shared words aside while the postmaster preloads the library
/// (called from `crate::maintenance::init`).
pub fn init_shared() {
    pg_shmem_init!(NEXT_FIRE = AtomicI64::new(i64::MIN));
    pg_shmem_init!(CHANGES = AtomicU64::new(0));
    pg_shmem_init!(FIRING_ROUNDS = AtomicU64::new(0));
    pg_shmem_init!(DUE_LEFT = AtomicBool::new(false));
    SHARED.store(true, Ordering::Relaxed);
}

/// The maintenance worker's next fire: the earliest next slot it knows of
/// ([`NEVER`] when nothing is scheduled, `i64::MIN` when a round is due at
/// once); `None` when not preloaded.
pub fn next_fire() -> Option<Micros> {
    SHARED
        .load(Ordering::Relaxed)
        .then(|| NEXT_FIRE.get().load(Ordering::Acquire))
}

/// The count of committed schedule changes, read by a round before its
/// first statement (`None` when not preloaded).
pub fn changes() -> Option<u64> {
    SHARED
        .load(Ordering::Relaxed)
        .then(|| CHANGES.get().load(Ordering::Acquire))
}

/// Whether the last round left a schedule due (false when not preloaded).
pub fn due_left() -> bool {
    SHARED.load(Ordering::Relaxed) && DUE_LEFT.get().load(Ordering::Acquire)
}

/// How many maintenance rounds fired a slot (0 when not preloaded).
pub fn firing_rounds() -> u64 {
    if SHARED.load(Ordering::Relaxed) {
        FIRING_ROUNDS.get().load(Ordering::Acquire)
    } else {
        0
    }
}

/// A round that read [`changes`] as `seen` before its statements found
/// `next` as the earliest next slot after now of all schedules, some still
/// due or not (`due_left`), and fired a slot or not (`fired`). A change counted
/// after `seen` lowers the value after this store (its callback runs after
/// its count), or, counted before this check, makes the next round due at
/// once: so no change's slot waits for the naptime.
pub fn round_found(seen: u64, next: Option<Micros>, due_left: bool, fired: bool) {
    if !SHARED.load(Ordering::Relaxed) {
        return;
    }
    DUE_LEFT.get().store(due_left, Ordering::Release);
    if fired {
        FIRING_ROUNDS.get().fetch_add(1, Ordering::AcqRel);
    }
    NEXT_FIRE
        .get()
        .store(next.unwrap_or(NEVER), Ordering::Release);
    if CHANGES.get().load(Ordering::Acquire) != seen {
        NEXT_FIRE.get().store(i64::MIN, Ordering::Release);
    }
}
