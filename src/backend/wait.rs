//! The long poll of `work_claim(..., wait)`: sleep on the backend's latch
//! until an item of the queue may have become claimable, then claim again.
//!
//! No shared memory of our own (so no `shared_preload_libraries`): the lock
//! manager is the registry of waiters.
//!
//! - A waiting claim takes a transaction-scoped **shared advisory lock** on
//!   `(WAIT_LOCK_CLASS, queue_key(queue))` before its first attempt and
//!   releases it when it stops waiting. Shared locks never conflict with
//!   each other, so any number of claimers wait on one queue.
//! - A transaction that makes items claimable (an enqueue, a release, a
//!   failure with a retry) counts them per queue ([`crate::backend::xact`]); once it
//!   has **committed**, it asks the lock manager which backends hold that
//!   lock (`GetLockConflicts` with an exclusive mode) and sets the latches of
//!   as many of them as it made items, skipping waiters whose latch is set
//!   already (woken and not yet running). Waking after commit means a woken
//!   claimer's next statement sees the new item; waking one waiter per item,
//!   not all of them, keeps a burst of enqueues from sending every waiter to
//!   scan the queue for one item (the thundering herd).
//! - A waiter that leaves (with items, at its deadline, or giving way)
//!   while its latch is set again (a wake-up arrived that it will not use)
//!   passes one wake-up on to another waiter, as PostgreSQL's condition
//!   variables forward a signal a sleeper did not use
//!   (`ConditionVariableCancelSleep`). So no item is left waiting for a
//!   waiter nobody woke.
//! - A backend named in the lock's holders is found by
//!   [`crate::pg::compat::proc_of`], which returns only a live backend still in
//!   the same transaction (the slots of exited backends keep their ids).
//! - A prepared transaction that made items claimable holds a shared
//!   advisory lock `(PREPARED_WAKE_CLASS, queue_key)` until `COMMIT PREPARED`
//!   or `ROLLBACK PREPARED` (PostgreSQL runs no extension code at either).
//!   The `PREPARE` wakes every waiter of those queues once the lock is the
//!   prepared transaction's. A waiter that sees such a lock on its queue,
//!   before its attempt or after it, re-checks every [`PREPARED_POLL`]
//!   until it is gone (looking only after the attempt, a waiter missed a
//!   `COMMIT PREPARED` that landed between the two and slept to its
//!   deadline: 1 run in 6 of `wake_ups::` on PostgreSQL 18).
//! - Items that become claimable by the clock alone (a `run_at` or a
//!   `lease_until` reached) wake nobody: the waiter computes when the next one
//!   will, and sleeps no longer than that.
//!
//! - A waiter gives way to DDL: every [`GIVE_WAY_CHECK`] of its sleep it
//!   asks the lock manager whether a lock request that conflicts with the
//!   locks its statement holds on `workfence.items` is queued (an `ALTER
//!   EXTENSION ... UPDATE`, `VACUUM FULL`, `CREATE INDEX`), and if so ends
//!   its wait with zero rows, as autovacuum gives way to a conflicting lock
//!   request; otherwise the DDL would wait for the whole `wait`, and every
//!   claim behind the DDL with it.
//!
//! The waiter resets its latch *before* each claim attempt and sleeps only if
//! that attempt found nothing, so a wake-up that lands between the attempt
//! and the sleep is not lost (the latch stays set). Two queue names whose
//! 32-bit keys collide share one list of waiters: a wake-up for one may go
//! to a waiter of the other, which comes back empty and sleeps again, while
//! the first queue's waiter sleeps on until its call ends (at most
//! `workfence.long_poll_max`) and its next call finds the item. Every wake-up runs
//! `CHECK_FOR_INTERRUPTS`, so `statement_timeout`, `pg_cancel_backend` and a
//! server shutdown end the wait at once (57014 / 57P01), and the postmaster's
//! death ends the process (`WL_EXIT_ON_PM_DEATH`).
//!
//! - A paused queue (`work_pause`) is seen by every attempt, which then
//!   claims nothing, and by [`next_due`], which then reports nothing due:
//!   the waiter sleeps until a wake-up (the resume wakes every waiter of
//!   the queue) or its deadline, without polling.
//! - A waiter whose client has gone away (the peer closed the socket) ends
//!   its session at once, as `client_connection_check_interval` would, so
//!   that it claims nothing for nobody: its sleep also waits for the
//!   socket's `WL_SOCKET_CLOSED` ([`compat::wait_latch_or_client_gone`]).
//!
//! A long poll needs a fresh snapshot per attempt: under REPEATABLE READ or
//! SERIALIZABLE every attempt would see the transaction's first snapshot and
//! never an item enqueued since, so `wait > 0` is refused there (25000).

use std::time::{Duration, Instant};

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::backend::{paused, xact};
use crate::base::error::{Result, WorkfenceError};
use crate::pg::compat;
use crate::pg::plans::{self, params, Statement};

/// The first key of the advisory lock waiters hold (ASCII "WFwt"), so that
/// the locks are recognisable in `pg_locks` (`classid`) and unlikely to meet
/// an application's own advisory locks.
pub const WAIT_LOCK_CLASS: i32 = 0x5746_7774;

/// The first key of the advisory lock a prepared transaction holds for each
/// queue it made items claimable in (ASCII "WFpp").
pub const PREPARED_WAKE_CLASS: i32 = 0x5746_7070;

/// How often a waiter re-checks its queue while a prepared transaction holds
/// wake-ups for it.
pub const PREPARED_POLL: Duration = Duration::from_millis(50);

/// How often a sleeping waiter checks whether someone queues for a lock
/// that conflicts with the ones its statement holds on `workfence.items`
/// (DDL, `ALTER EXTENSION ... UPDATE`, `VACUUM FULL`, `CREATE INDEX`): it
/// then gives way, ending its wait with zero rows, as autovacuum gives way
/// to a conflicting lock request. These checks run no SQL.
pub const GIVE_WAY_CHECK: Duration = Duration::from_millis(200);

/// How long a waiter (a long poll, or `work_await`) sleeps between looks
/// when it could not take its advisory lock: it then polls, rather than
/// block. Since 0.12.0 the lock is
/// in the extension's own space ([`compat::LOCK_SPACE`]), where nothing
/// takes it exclusively, so this is a guard, not a path any role can force.
pub const POLL_WITHOUT_LOCK: Duration = Duration::from_millis(250);

/// `workfence.long_poll_max` (seconds, default 3, superuser-set): the
/// longest one call of `work_claim(..., wait)` sleeps; a longer `wait`
/// returns zero rows after this, and the caller calls again. A waiting
/// statement keeps its snapshot, which holds back vacuum's horizon for the
/// whole database as long as it sleeps (PostgreSQL gives a statement no way
/// to sleep without it). Measured beside two workers that claim and hand
/// back 200 items as fast as they can (`workfence-long-poll`, docs/long-poll.md): a
/// waiter calling with 1 s or 3 s waits left their rate where it was alone
/// (about 1,000-1,200 claims/s); with 10 s waits it fell to about 600 for
/// part of the minute, with 60 s waits from about 600 to 190. Short calls
/// release the snapshot between them; the default is the longest of those
/// that cost nothing measurable.
pub static LONG_POLL_MAX: GucSetting<i32> = GucSetting::<i32>::new(3);

/// Define `workfence.long_poll_max`; called from `_PG_init`.
pub fn init() {
    GucRegistry::define_int_guc(
        c"workfence.long_poll_max",
        c"pg_workfence: the longest one long-poll call of work_claim sleeps.",
        c"A waiting claim holds its snapshot, and so vacuum's horizon, while it sleeps; a longer \
          wait returns zero rows after this and the caller calls again.",
        &LONG_POLL_MAX,
        1,
        3600,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}

pub use crate::pg::keys::queue_key;

/// Arrange for `items` claimers waiting on `queue` to be woken when the
/// current transaction commits (nothing happens if it aborts).
pub fn wake_after_commit(queue: &str, items: u32) {
    xact::wake_at_commit(queue_key(queue), items);
}

/// Set the latches of up to `n` backends waiting on queue key `key` whose
/// latch is not set already; returns how many were set. Runs after commit:
/// it must not raise (nothing here allocates beyond one palloc'd array or
/// takes more than the lock manager's partition lock and the
/// shared-invalidation lock, shared).
pub fn wake(key: i32, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let tag = compat::advisory_tag(WAIT_LOCK_CLASS, key);
    let mut woken = 0;
    // SAFETY: the tag is fully initialised; the walk hands out live PGPROCs
    // only, and setting a latch cannot raise.
    unsafe {
        compat::for_each_conflicting_proc(
            &tag,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            |proc| {
                if compat::set_latch_if_clear(proc) {
                    woken += 1;
                }
                woken < n
            },
        );
    }
    woken
}

/// The lock space (`objsubid` in `pg_locks`) of the locks `work_await`
/// callers hold while they sleep: one per awaited item, keys (high and
/// low 32 bits of the item's id), shared ([`crate::verbs::life`]).
pub const AWAIT_SPACE: u16 = 0x5761;

/// The lock tag of item `id`'s awaiters.
fn await_tag(id: i64) -> pg_sys::LOCKTAG {
    compat::advisory_tag_in(AWAIT_SPACE, (id >> 32) as i32, id as i32)
}

/// Take item `id`'s await lock (shared, transaction-scoped, never waits):
/// while held, a commit that settles the item sets this backend's latch
/// ([`wake_awaiters`]). False if it could not be had at once (the caller
/// then re-checks on a timer).
pub fn register_awaiter(id: i64) -> bool {
    let tag = await_tag(id);
    // SAFETY: a transaction-scoped lock of the current transaction, taken
    // without waiting.
    let result =
        unsafe { pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, true) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Release the lock [`register_awaiter`] took.
pub fn unregister_awaiter(id: i64) {
    let tag = await_tag(id);
    // SAFETY: releases a transaction-scoped lock this backend holds.
    unsafe {
        pg_sys::LockRelease(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false);
    }
}

/// Sleep, for `work_await`, until this backend's latch is set (a settle
/// of the awaited item committed, [`wake_awaiters`]), `wake_at` passes, or
/// someone queues for a lock on `workfence.items` that conflicts with this
/// statement's (then it gives way, as a long poll does): true in that last
/// case. Resets the latch first only if the caller did (it must, before
/// its look at the item, so that a settle committing in between is not
/// lost). The client's going away ends the session, and cancels end the
/// sleep with 57014, as for a long poll.
pub fn sleep_awaiting(wake_at: Instant) -> Result<bool> {
    let items = ItemsLock::take(plans::workfence_relation(c"items"));
    sleep_until(wake_at, items)
}

/// Reset this backend's latch (before a look whose outcome decides
/// whether to sleep).
pub fn reset_latch() {
    // SAFETY: MyLatch is this backend's own latch.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) }
}

/// Set the latch of every backend holding item `id`'s await lock. Runs
/// after commit: one look-up in the lock manager's table (its partition
/// lock, shared), no SQL; cannot raise.
pub fn wake_awaiters(id: i64) {
    let tag = await_tag(id);
    // SAFETY: as in `wake`.
    unsafe {
        compat::for_each_conflicting_proc(
            &tag,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            |proc| {
                compat::set_latch_if_clear(proc);
                true
            },
        );
    }
}

/// At `PREPARE TRANSACTION`: hold the prepared-wake lock of queue key `key`
/// (shared, so prepared transactions never wait on each other), which the
/// prepared transaction keeps until it is committed or rolled back.
pub fn hold_for_prepared(key: i32) {
    let tag = compat::advisory_tag(PREPARED_WAKE_CLASS, key);
    // SAFETY: a transaction-scoped lock taken before the prepare moves the
    // transaction's locks to the prepared transaction.
    unsafe {
        pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, false);
    }
}

/// Whether a prepared transaction holds wake-ups for queue key `key`.
fn prepared_wakes_pending(key: i32) -> bool {
    let tag = compat::advisory_tag(PREPARED_WAKE_CLASS, key);
    // SAFETY: a look-up in the lock manager's shared table.
    unsafe { compat::lock_conflicts_exist(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE) }
}

/// Whether this backend's latch is set.
fn latch_is_set() -> bool {
    // SAFETY: MyLatch is this backend's own latch.
    unsafe { (*pg_sys::MyLatch).is_set != 0 }
}

/// Take the wait lock of queue key `key` (shared, transaction-scoped, in
/// the extension's lock space); false if it cannot be had at once (the
/// waiter then polls every [`POLL_WITHOUT_LOCK`]).
fn register(key: i32) -> bool {
    let tag = compat::advisory_tag(WAIT_LOCK_CLASS, key);
    // SAFETY: a transaction-scoped lock of the current transaction, taken
    // without waiting.
    let result =
        unsafe { pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, true) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Release the wait lock [`register`] took.
fn unregister(key: i32) {
    let tag = compat::advisory_tag(WAIT_LOCK_CLASS, key);
    // SAFETY: releases the transaction-scoped lock this backend holds (a
    // transaction lock may be released before the transaction ends, as
    // UnlockRelationOid does).
    unsafe {
        pg_sys::LockRelease(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false);
    }
}

// (1) Seconds until the next item of the queue becomes claimable by the
// clock alone (a pending item's future run_at, a claimed item's future
// lease_until), or NULL. (2) Whether an item is claimable already, which,
// right after a claim that found nothing, means another transaction has it
// locked (a claim or cancel not yet committed, a worker's work_assert on a
// lapsed lease). (1) is a `min` over the future range of each state's
// index, items_ready_idx (from 0.12.0) in run_at order and items_lease_idx
// in lease_until order; (2) the first entry at or before the clock in each,
// read with the item's row, as `crate::verbs::claim`'s probe does (see LAPSED
// there): one probe each, whatever the backlog. (Until 0.11.0 the pending
// ones read items_due_idx, whose priority column comes first, and walked
// every future item of the queue: 219 pages for 20k on PostgreSQL 15,
// issue 33; as EXISTS, a generic plan could
// choose a sequential scan.) The clock is a parameter, `$2`: read from a
// CTE (0.11.0), it made each `min` a join, which PostgreSQL does not read
// as the first index entry but aggregates over every row: 100k future
// items cost 16 idle long pollers 1.5 cores while a producer added 100
// future items a second, each waking a poller (issue 33).
// (A paused queue is not asked: nothing becomes claimable by the clock
// then, and only the resume, which wakes every waiter, opens it.)
static NEXT_DUE: Statement<NextDueParams> = Statement::new(concat!(
    r#"
SELECT EXTRACT(EPOCH FROM LEAST(
           (SELECT pg_catalog.min(i.run_at)
              FROM workfence.items AS i
             WHERE i.queue OPERATOR(pg_catalog.=) $1
               AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
               AND i.run_at OPERATOR(pg_catalog.>) $2),
           (SELECT pg_catalog.min(i.lease_until)
              FROM workfence.items AS i
             WHERE i.queue OPERATOR(pg_catalog.=) $1
               AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
               AND i.lease_until OPERATOR(pg_catalog.>) $2))
         OPERATOR(pg_catalog.-) $2)::pg_catalog.float8,
       "#,
    crate::store::sql::due_probe!(),
    "\n       OR ",
    crate::store::sql::lapsed_probe!(),
    "\n"
));

params! {
    /// `$1` queue, `$2` the server's clock.
    struct NextDueParams<'a> {
        queue: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// Run one claim attempt of a waiting claim in a subtransaction, kept if
/// the attempt changed something (`attempt` returns its rows and whether it
/// claimed or dead-lettered anything), rolled back otherwise.
///
/// Why: `FOR UPDATE SKIP LOCKED` in READ COMMITTED locks the newest version
/// of a candidate row before it re-checks the row's conditions, and keeps
/// that lock when the row no longer qualifies (another claim took it
/// meanwhile). A claim that returns at once releases such stray locks at
/// its commit; a waiting one held them for its whole wait, so the worker
/// that had taken the item waited that long to renew or finish it
/// (measured: 20 waiters draining 500 items ran at 127 items/s, with
/// finishes blocked up to the 3 s wait). Rolling back an attempt that
/// changed nothing releases its locks at once. Errors roll the
/// subtransaction back and go on up.
fn kept_if_changed<T>(attempt: &mut impl FnMut() -> Result<(Vec<T>, bool)>) -> Result<Vec<T>> {
    // SAFETY: the pattern PostgreSQL's procedural languages use for an
    // internal subtransaction: begin it, run in the caller's memory context,
    // then release or roll it back and restore the caller's memory context
    // and resource owner, also when the attempt raises.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(&mut *attempt))
            .catch_others(|caught| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                caught.rethrow()
            })
            .execute();
        match &outcome {
            Ok((rows, changed)) if !rows.is_empty() || *changed => {
                pg_sys::ReleaseCurrentSubTransaction()
            }
            _ => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        restore();
        outcome.map(|(rows, _)| rows)
    }
}

/// When nothing new is due but a due item is locked by another transaction,
/// the waiter re-checks after this, doubling up to [`LOCKED_BACKOFF_MAX`]:
/// that transaction's commit may hand the item to someone else (no wake-up
/// is sent for that) or its rollback may leave it claimable.
const LOCKED_BACKOFF_MIN: Duration = Duration::from_millis(5);

/// The longest re-check interval while due items are locked by others.
const LOCKED_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Run `attempt` (a claim) until it returns rows or `wait` has passed,
/// sleeping in between until the queue may have something claimable.
/// `wait` zero: one attempt, no sleep.
pub fn until_claimed<T>(
    queue: &str,
    wait: Duration,
    mut attempt: impl FnMut() -> Result<(Vec<T>, bool)>,
) -> Result<Vec<T>> {
    if wait.is_zero() {
        return Ok(attempt()?.0);
    }
    // SAFETY: a plain int global of the backend.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(WorkfenceError::WaitNeedsFreshSnapshots);
    }
    let mut attempt = || kept_if_changed(&mut attempt);
    let key = queue_key(queue);
    let cap = Duration::from_secs(u64::try_from(LONG_POLL_MAX.get()).unwrap_or(1));
    let deadline = Instant::now() + wait.min(cap);
    // Registered before the first attempt: an item committed after it wakes
    // this waiter, one committed before it is seen by the attempt.
    let registered = register(key);
    let items = ItemsLock::take(plans::workfence_relation(c"items"));
    let outcome = sleep_and_attempt(queue, key, deadline, registered, items, &mut attempt);
    if registered {
        // A backend that has stopped waiting must not stay in the list of
        // waiters until its transaction ends (inside a longer transaction
        // it would be woken in a real waiter's place). An error ends the
        // transaction, which releases the lock anyway.
        unregister(key);
    }
    if latch_is_set() || outcome.is_err() {
        // A wake-up came in that this waiter, leaving (with items, at its
        // deadline, or giving way), will not use: pass it on (see the
        // module comment). A waiter leaving with an error (its queue grant
        // revoked while it waited, see `crate::access::grants`) may have been woken
        // for an item and reset its latch before the attempt that failed:
        // it passes one on too, so the item does not wait for a waiter
        // nobody woke.
        wake(key, 1);
    }
    outcome
}

/// The loop of a registered waiter: attempt, and sleep until woken, until
/// it claims something, `deadline` passes, or it gives way to DDL.
fn sleep_and_attempt<T>(
    queue: &str,
    key: i32,
    deadline: Instant,
    registered: bool,
    items: ItemsLock,
    attempt: &mut impl FnMut() -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let mut backoff = LOCKED_BACKOFF_MIN;
    loop {
        reset_latch();
        // Looked at before the attempt as well as after it: a `COMMIT
        // PREPARED` that lands between the attempt (which did not see its
        // items) and the look after would leave this waiter asleep to its
        // deadline, since PostgreSQL runs no extension code to wake it.
        let prepared_before = prepared_wakes_pending(key);
        let rows = attempt()?;
        // An attempt that fired a schedule's slot and claimed nothing ends
        // the wait, so that the statement commits the fire.
        if !rows.is_empty() | crate::backend::schedules::take_fired() {
            return Ok(rows);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(rows);
        }
        let mut sleep = deadline - now;
        let (next, locked_by_others) = next_due(queue)?;
        if let Some(next) = next {
            sleep = sleep.min(next);
        }
        if let Some(slot) = crate::backend::schedules::until_next_slot(queue)? {
            sleep = sleep.min(slot);
        }
        if locked_by_others {
            sleep = sleep.min(backoff);
            backoff = (backoff * 2).min(LOCKED_BACKOFF_MAX);
        } else {
            backoff = LOCKED_BACKOFF_MIN;
        }
        if !registered {
            sleep = sleep.min(POLL_WITHOUT_LOCK);
        }
        if prepared_before || prepared_wakes_pending(key) {
            sleep = sleep.min(PREPARED_POLL);
        }
        // At least 1 ms, so that an item due "now" is not spun on.
        let wake_at = Instant::now() + sleep.max(Duration::from_millis(1));
        if sleep_until(wake_at, items)? {
            return Ok(Vec::new());
        }
    }
}

/// Sleep on the latch until it is set or `wake_at` passes, checking every
/// [`GIVE_WAY_CHECK`] for a queued lock request that conflicts with this
/// statement's locks on `workfence.items` (see [`ItemsLock`]); true when the
/// waiter must give way. Interrupts are served at every wake-up.
fn sleep_until(wake_at: Instant, items: ItemsLock) -> Result<bool> {
    loop {
        let now = Instant::now();
        if now >= wake_at {
            return Ok(false);
        }
        let chunk = (wake_at - now).min(GIVE_WAY_CHECK);
        let timeout_ms = chunk.as_micros().div_ceil(1000) as std::ffi::c_long;
        // SAFETY: waiting on our own latch (and, for a backend with a
        // client, on its socket being closed); the flags are PostgreSQL's.
        let events = unsafe { compat::wait_latch_or_client_gone(timeout_ms) };
        check_for_interrupts!();
        if events & pg_sys::WL_SOCKET_CLOSED as i32 != 0 {
            // The client went away: nobody would receive what this claim
            // takes. End the session as PostgreSQL's own
            // `client_connection_check_interval` does (FATAL "connection to
            // client lost"), which rolls the transaction back.
            // SAFETY: the flags ProcessInterrupts reads, set on the main thread.
            unsafe {
                pg_sys::ClientConnectionLost = 1;
                pg_sys::InterruptPending = 1;
            }
            check_for_interrupts!();
        }
        if items.request_queued() {
            return Ok(true);
        }
        if events & pg_sys::WL_LATCH_SET as i32 != 0 {
            return Ok(false);
        }
    }
}

/// Where this waiter holds its lock on `workfence.items` while it sleeps
/// (ACCESS SHARE: its attempts' stronger locks go with their
/// subtransactions), which decides how it can learn of a conflicting lock
/// request: only an ACCESS EXCLUSIVE one (ALTER TABLE, DROP, VACUUM FULL,
/// an update script that alters the table) conflicts; CREATE INDEX does not
/// wait for a sleeping waiter at all.
#[derive(Clone, Copy)]
enum ItemsLock {
    /// The extension is not installed here (no relation to watch).
    None,
    /// In the lock manager's fast path (the usual case): a conflicting
    /// request moves it to the shared table, which is the sign.
    FastPath(pg_sys::Oid),
    /// In the shared lock table from the start: `LockHasWaiters` can look
    /// (it cannot for a fast-path lock, which has no shared entry).
    Shared(pg_sys::Oid),
}

impl ItemsLock {
    /// Take an ACCESS SHARE lock on relation `items` for the rest of the
    /// transaction (the waiter's attempts run in subtransactions, whose
    /// locks go with them) and say where it is held.
    fn take(items: pg_sys::Oid) -> ItemsLock {
        if items == pg_sys::InvalidOid {
            return ItemsLock::None;
        }
        let tag = compat::relation_tag(items);
        // SAFETY: a relation lock in the current transaction (the relation
        // was just looked up in it); `local` is this backend's lock table
        // entry.
        let local = unsafe {
            compat::lock_acquire_local(&tag, pg_sys::AccessShareLock as pg_sys::LOCKMODE)
        };
        // SAFETY: reads this backend's own fast-path slots and lock entry.
        unsafe {
            if compat::fast_path_holds(items) {
                ItemsLock::FastPath(items)
            } else if !local.is_null() && !(*local).lock.is_null() {
                ItemsLock::Shared(items)
            } else {
                // A fast-path lock already moved to the shared table (a
                // strong request came earlier in this transaction): its
                // entry has no shared lock to ask LockHasWaiters about, so
                // this waiter does not give way.
                ItemsLock::None
            }
        }
    }

    /// Whether another backend waits (or waited) for a lock on the
    /// relation that conflicts with the locks this backend holds on it.
    fn request_queued(self) -> bool {
        match self {
            ItemsLock::None => false,
            // SAFETY: reads this backend's own fast-path slots.
            ItemsLock::FastPath(items) => unsafe { !compat::fast_path_holds(items) },
            ItemsLock::Shared(items) => {
                let tag = compat::relation_tag(items);
                // SAFETY: the ACCESS SHARE lock `take` acquired, held in the
                // shared lock table (not the fast path, where LockHasWaiters
                // cannot look), to the end of the transaction.
                unsafe {
                    pg_sys::LockHasWaiters(&tag, pg_sys::AccessShareLock as pg_sys::LOCKMODE, false)
                }
            }
        }
    }
}

/// How long until the next item of `queue` becomes claimable by the clock
/// (None if none will without a write), and whether one is claimable now
/// (see [`NEXT_DUE`]).
fn next_due(queue: &str) -> Result<(Option<Duration>, bool)> {
    if paused::is_paused(queue)? {
        return Ok((None, false));
    }
    Spi::connect_mut(|client| {
        let now = crate::store::sql::server_clock()?;
        plans::run(client, &NEXT_DUE, NextDueParams { queue, now }, |rows| {
            let row = rows.first();
            let seconds: Option<f64> = row.get(1)?;
            let due_now = row.get::<bool>(2)?.unwrap_or(false);
            Ok((
                seconds.map(|s| Duration::from_secs_f64(s.clamp(0.0, 86_400.0))),
                due_now,
            ))
        })
    })
}
