//! The long poll of `work_claim(..., wait)`: sleep on the backend's latch
//! until an item of the queue may have become claimable, then claim again.
//!
//! No shared memory of our own (so no `shared_preload_libraries`): the lock
//! manager is the registry of waiters.
//!
//! - A waiting claim takes a transaction-scoped **shared advisory lock** on
//!   `(WAIT_LOCK_CLASS, queue_key(queue))`. Shared locks never conflict with
//!   each other, so any number of claimers wait on one queue.
//! - A transaction that makes an item claimable *now* (an enqueue of a due
//!   item, a release, a failure with a retry) asks, once it has **committed**,
//!   the lock manager which backends hold that lock
//!   (`GetLockConflicts` with an exclusive mode) and sets their latches
//!   (`SetLatch` on each one's `PGPROC`), as PostgreSQL's own NOTIFY does
//!   with its listeners. Waking after commit means a woken claimer's next
//!   statement sees the new item.
//! - Items that become claimable by the clock alone (a `run_at` or a
//!   `lease_until` reached) wake nobody: the waiter computes when the next one
//!   will, and sleeps no longer than that.
//!
//! The waiter resets its latch *before* each claim attempt and sleeps only if
//! that attempt found nothing, so a wake-up that lands between the attempt
//! and the sleep is not lost (the latch stays set). A hash collision between
//! two queue names only causes a spurious wake-up, and the claim simply
//! comes back empty and sleeps again. Every wake-up runs
//! `CHECK_FOR_INTERRUPTS`, so `statement_timeout`, `pg_cancel_backend` and a
//! server shutdown end the wait at once (57014 / 57P01), and the postmaster's
//! death ends the process (`WL_EXIT_ON_PM_DEATH`).

use std::cell::RefCell;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{register_xact_callback, PgXactCallbackEvent};

use crate::error::Result;
use crate::plans::{self, Statement};

/// The first key of the advisory lock waiters hold (ASCII "WFwt"), so that
/// the locks are recognisable in `pg_locks` (`classid`) and unlikely to meet
/// an application's own advisory locks.
pub const WAIT_LOCK_CLASS: i32 = 0x5746_7774;

/// How long a waiter sleeps between claim attempts when it could not take its
/// advisory lock (an application holds an exclusive lock on the same keys):
/// it then polls, rather than block on someone else's lock.
const POLL_WITHOUT_LOCK: Duration = Duration::from_millis(250);

/// The second key of a queue's wait lock: a 32-bit hash of its name (the same
/// in every backend running this build of the library).
pub fn queue_key(queue: &str) -> i32 {
    let mut hasher = DefaultHasher::new();
    queue.hash(&mut hasher);
    // Truncation is the point: any 32 bits of the hash make the key.
    hasher.finish() as i32
}

thread_local! {
    /// Queue keys whose waiters this transaction wakes when it commits.
    static TO_WAKE: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// Arrange for the claimers waiting on `queue` to be woken when the current
/// transaction commits (nothing happens if it aborts).
pub fn wake_after_commit(queue: &str) {
    let key = queue_key(queue);
    TO_WAKE.with(|keys| {
        let mut keys = keys.borrow_mut();
        if keys.is_empty() {
            // pgrx's transaction callbacks last one transaction.
            register_xact_callback(PgXactCallbackEvent::Commit, || {
                for key in TO_WAKE.with(RefCell::take) {
                    wake(key);
                }
            });
            register_xact_callback(PgXactCallbackEvent::Abort, || {
                TO_WAKE.with(RefCell::take);
            });
        }
        if !keys.contains(&key) {
            keys.push(key);
        }
    });
}

/// Set the latch of every backend holding the wait lock of queue key `key`.
/// Runs after commit: it must not raise (nothing here allocates beyond one
/// palloc'd array or takes more than the lock manager's partition lock).
fn wake(key: i32) {
    let tag = pg_sys::LOCKTAG {
        // SAFETY: a plain global of the backend, set at connection start.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        // The lock manager stores the signed keys' bits (as
        // pg_advisory_xact_lock_shared(int4, int4) does).
        locktag_field2: WAIT_LOCK_CLASS as u32,
        locktag_field3: key as u32,
        // 2 = the (int4, int4) form of the advisory lock functions.
        locktag_field4: 2,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    // SAFETY: the tag is fully initialised; GetLockConflicts returns a
    // palloc'd array terminated by an invalid VirtualTransactionId. ProcGlobal
    // and its allProcs array live in shared memory for the server's lifetime;
    // reading a slot that is being recycled can at worst set the latch of
    // another process (a spurious wake-up, which every latch user tolerates).
    unsafe {
        let mut vxid = pg_sys::GetLockConflicts(
            &tag,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            std::ptr::null_mut(),
        );
        while (*vxid).localTransactionId != 0 {
            let backend = (*vxid).backendId;
            let procs = (*pg_sys::ProcGlobal).allProcs;
            for i in 0..(*pg_sys::ProcGlobal).allProcCount as usize {
                let proc = procs.add(i);
                if (*proc).backendId == backend && (*proc).pid != 0 {
                    pg_sys::SetLatch(&mut (*proc).procLatch);
                    break;
                }
            }
            vxid = vxid.add(1);
        }
    }
}

static REGISTER: Statement = Statement {
    name: "wait_register",
    sql: "SELECT pg_catalog.pg_try_advisory_xact_lock_shared($1, $2)",
    args: &[pg_sys::INT4OID, pg_sys::INT4OID],
};

// (1) Seconds until the next item of the queue becomes claimable by the
// clock alone (a pending item's future run_at, a claimed item's future
// lease_until), or NULL. (2) Whether an item is claimable already, which,
// right after a claim that found nothing, means another transaction has it
// locked (a claim or cancel not yet committed, a worker's work_assert on a
// lapsed lease). Separate EXISTS per state, so that each can use its index.
static NEXT_DUE: Statement = Statement {
    name: "wait_next_due",
    sql: "WITH now AS (SELECT pg_catalog.clock_timestamp() AS t) \
          SELECT EXTRACT(EPOCH FROM LEAST( \
              (SELECT pg_catalog.min(i.run_at) FROM workfence.items AS i, now \
                WHERE i.queue OPERATOR(pg_catalog.=) $1 \
                  AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state \
                  AND i.run_at OPERATOR(pg_catalog.>) now.t), \
              (SELECT pg_catalog.min(i.lease_until) FROM workfence.items AS i, now \
                WHERE i.queue OPERATOR(pg_catalog.=) $1 \
                  AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state \
                  AND i.lease_until OPERATOR(pg_catalog.>) now.t)) \
            OPERATOR(pg_catalog.-) (SELECT now.t FROM now))::pg_catalog.float8, \
            EXISTS (SELECT FROM workfence.items AS i, now \
                     WHERE i.queue OPERATOR(pg_catalog.=) $1 \
                       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state \
                       AND i.run_at OPERATOR(pg_catalog.<=) now.t) \
            OR EXISTS (SELECT FROM workfence.items AS i, now \
                        WHERE i.queue OPERATOR(pg_catalog.=) $1 \
                          AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state \
                          AND i.lease_until OPERATOR(pg_catalog.<=) now.t)",
    args: &[pg_sys::TEXTOID],
};

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
    mut attempt: impl FnMut() -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let rows = attempt()?;
    if !rows.is_empty() || wait.is_zero() {
        return Ok(rows);
    }
    let deadline = Instant::now() + wait;
    let registered: bool = Spi::connect_mut(|client| {
        plans::run(
            client,
            &REGISTER,
            &[WAIT_LOCK_CLASS.into(), queue_key(queue).into()],
            |rows| Ok(rows.first().get_one::<bool>()?.unwrap_or(false)),
        )
    })?;
    let mut backoff = LOCKED_BACKOFF_MIN;
    loop {
        // SAFETY: MyLatch is this backend's own latch.
        unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
        let rows = attempt()?;
        if !rows.is_empty() {
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
        if locked_by_others {
            sleep = sleep.min(backoff);
            backoff = (backoff * 2).min(LOCKED_BACKOFF_MAX);
        } else {
            backoff = LOCKED_BACKOFF_MIN;
        }
        if !registered {
            sleep = sleep.min(POLL_WITHOUT_LOCK);
        }
        // At least 1 ms, so that an item due "now" is not spun on.
        let timeout_ms = sleep.as_millis().clamp(1, i64::MAX as u128) as std::ffi::c_long;
        // SAFETY: waiting on our own latch; the flags are PostgreSQL's.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                timeout_ms,
                pg_sys::PG_WAIT_EXTENSION,
            );
        }
        check_for_interrupts!();
    }
}

/// How long until the next item of `queue` becomes claimable by the clock
/// (None if none will without a write), and whether one is claimable now
/// (see [`NEXT_DUE`]).
fn next_due(queue: &str) -> Result<(Option<Duration>, bool)> {
    Spi::connect_mut(|client| {
        plans::run(client, &NEXT_DUE, &[queue.into()], |rows| {
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
