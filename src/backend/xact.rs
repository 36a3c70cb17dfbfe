//! What the extension remembers during a transaction, and the transaction
//! callbacks that act on it when the transaction ends.
//!
//! - **Wake-ups** ([`crate::backend::wait`]): a transaction that makes items of a
//!   queue claimable (enqueue, release, a failure with a retry) counts them;
//!   once it has committed, that many claimers long-polling the queue are
//!   woken, at the end of its resource release: after PostgreSQL has sent
//!   its invalidation messages and released its locks, both of which come
//!   after the commit callback (a waiter woken by a resume must find the
//!   queue's pause set invalidated and the resume's lock gone, see
//!   `crate::backend::paused`). An abort wakes nobody. A `PREPARE TRANSACTION` hands the
//!   wake-ups to the prepared transaction: it holds a shared advisory lock
//!   per queue (class [`crate::backend::wait::PREPARED_WAKE_CLASS`]) until `COMMIT
//!   PREPARED` or `ROLLBACK PREPARED` releases it, and waiters re-check their
//!   queue while such a lock exists (the prepare wakes the queue's waiters so
//!   that they notice it; the session that prepared wakes nobody at its
//!   next commit).
//! - **The fence at commit** ([`crate::verbs::lease`]): every token `work_assert`
//!   accepted. Its row lock lasts to the end of the transaction only if no
//!   subtransaction that held it rolled back (`ROLLBACK TO SAVEPOINT`, an
//!   exception block). After such a rollback, the commit (or prepare)
//!   re-checks each asserted token under a fresh row lock and raises 55000
//!   if one is no longer current, so the transaction's writes never commit
//!   under a lease someone else holds.
//!
//! - **Counts** ([`crate::backend::counters`]): what the transaction did to
//!   items (enqueued, claimed, finished, lapsed leases claimed anew, ...),
//!   added to the server's counters when it commits or is prepared (not
//!   those of a rolled-back transaction or savepoint). The counters module
//!   keeps them; this one tells it when the transaction ends.
//!
//! One `RegisterXactCallback`, one `RegisterSubXactCallback` and one
//! `RegisterResourceReleaseCallback` per backend,
//! made in `_PG_init`, rather than pgrx's per-transaction callbacks: those
//! are dropped on commit and abort but not on prepare, so a wake-up queued
//! before `PREPARE TRANSACTION` would fire at the session's next commit.

use std::cell::RefCell;
use std::sync::OnceLock;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::base::error::{OrReport, Result};
use crate::base::types::Token;

/// What a commit asks of the modules above this one, which know how:
/// handed to [`init`] by `_PG_init` (`src/lib.rs`), so that this module,
/// with the per-backend state the verbs record into, names none of them
/// (the verbs record effects; the commit runs them).
pub struct CommitHooks {
    /// Mark a queue grouped (`flow::mark_grouped`).
    pub mark_grouped: fn(&str) -> Result<()>,
    /// Take a group's lock if free, to the end of the transaction
    /// (`flow::try_group_lock`).
    pub try_group_lock: fn(&str, &str) -> bool,
    /// Re-check items enqueued behind others of their group: (ids to
    /// check, ids to clear) (`enqueue::verify_behind`).
    pub verify_behind: fn(Vec<i64>, Vec<i64>) -> Result<()>,
    /// The order a commit takes queues' pause locks in
    /// (`paused::lock_order`).
    pub pause_lock_order: fn(&str) -> i32,
    /// Take a queue's pause lock to the end of the commit
    /// (`paused::hold_for_commit`).
    pub hold_pause_lock: fn(&str),
    /// Re-check asserted tokens under fresh row locks, 55000 if one is no
    /// longer current (`lease::fence_at_commit`).
    pub fence: fn(&[Token]) -> Result<()>,
    /// Hold a queue key's prepared-wake lock (`wait::hold_for_prepared`).
    pub hold_for_prepared: fn(i32),
    /// Wake up to `n` waiters of a queue key; how many were woken
    /// (`wait::wake`).
    pub wake: fn(i32, usize) -> usize,
    /// Wake every `work_await` caller waiting on an item
    /// (`wait::wake_awaiters`). Must not raise.
    pub wake_awaiters: fn(i64),
}

static HOOKS: OnceLock<CommitHooks> = OnceLock::new();

/// The hooks [`init`] was given (it runs in `_PG_init`, before any callback
/// of this module is registered).
fn hooks() -> &'static CommitHooks {
    HOOKS
        .get()
        .expect("xact::init runs in _PG_init, before its callbacks are registered")
}

#[derive(Default)]
struct XactState {
    /// Queue keys to wake at commit, each with how many items became
    /// claimable (or will, at a `run_at` the waiters should learn of).
    wake: Vec<(i32, u32)>,
    /// Tokens `work_assert` accepted in this transaction.
    asserted: Vec<Token>,
    /// A subtransaction rolled back after an assert: its row lock may be gone.
    locks_maybe_lost: bool,
    /// Queues whose first grouped item this transaction enqueued: marked
    /// grouped at commit ([`crate::verbs::flow::mark_grouped`]).
    mark_grouped: Vec<String>,
    /// Queues whose settings this transaction changed (pause, resume,
    /// limit, the grouped mark): their pause locks are taken at commit
    /// ([`crate::backend::paused::hold_for_commit`]).
    settings_changed: Vec<String>,
    /// Limited queues whose limit lock this transaction holds (a claim of
    /// it, [`crate::verbs::flow`]), with the subtransaction that took it (whose
    /// rollback lets it go): such a transaction cannot be prepared.
    limit_locks: Vec<(pg_sys::SubTransactionId, String)>,
    /// Items this transaction enqueued `behind` in their group, per
    /// (queue, group): checked again at commit ([`crate::verbs::flow`], group
    /// heads).
    behind: Vec<((String, String), Vec<i64>)>,
    /// Items this transaction settled (finished, failed, cancelled, or
    /// sent to run once more): their `work_await` callers are woken after
    /// it commits ([`crate::verbs::life`]).
    awaited: Vec<i64>,
}

thread_local! {
    static STATE: RefCell<XactState> = RefCell::new(XactState::default());
    /// The items whose `work_await` callers a committed transaction wakes
    /// (see [`awaited_at_commit`]), kept as `COMMITTED_WAKES` is.
    static COMMITTED_AWAITED: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
    /// The wake-ups of a transaction that has committed, kept from its
    /// `XACT_EVENT_COMMIT` to the end of its resource release, when its
    /// locks are gone and its invalidation messages sent (see
    /// [`on_resource_release`]).
    static COMMITTED_WAKES: RefCell<Vec<(i32, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Keep `hooks` and register the callbacks; `_PG_init` calls it once per
/// backend.
pub fn init(hooks: CommitHooks) {
    if HOOKS.set(hooks).is_err() {
        return;
    }
    // SAFETY: registering C callbacks with static lifetime, in the backend's
    // main thread, at library load.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
        pg_sys::RegisterResourceReleaseCallback(Some(on_resource_release), std::ptr::null_mut());
    }
}

/// Count `items` items of queue key `key` as made claimable by this
/// transaction: after it commits, that many waiters are woken.
pub fn wake_at_commit(key: i32, items: u32) {
    STATE.with(|state| {
        let wake = &mut state.borrow_mut().wake;
        match wake.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n = n.saturating_add(items),
            None => wake.push((key, items)),
        }
    });
}

/// Wake the `work_await` callers of item `id` when this transaction
/// commits (nothing if it aborts; a prepared transaction's are dropped, and
/// its awaiters see the settle at their next look, at the latest when their
/// call's wait ends).
pub fn awaited_at_commit(id: i64) {
    STATE.with(|state| {
        let awaited = &mut state.borrow_mut().awaited;
        if !awaited.contains(&id) {
            awaited.push(id);
        }
    });
}

/// Mark `queue` grouped when this transaction commits (its first grouped
/// enqueue, [`crate::verbs::flow::enqueue_grouped`]).
pub fn mark_grouped_at_commit(queue: &str) {
    STATE.with(|state| {
        let marks = &mut state.borrow_mut().mark_grouped;
        if !marks.iter().any(|q| q == queue) {
            marks.push(queue.to_owned());
        }
    });
}

/// Item `id`, enqueued by this transaction into `group` of `queue`, was
/// behind a pending item of its group in the enqueue's snapshot: at commit,
/// under the group's lock, it is checked again ([`verify_behind`]).
pub fn behind_at_commit(queue: &str, group: &str, id: i64) {
    STATE.with(|state| {
        let behind = &mut state.borrow_mut().behind;
        match behind
            .iter_mut()
            .find(|((q, g), _)| q == queue && g == group)
        {
            Some((_, ids)) => ids.push(id),
            None => behind.push(((queue.to_owned(), group.to_owned()), vec![id])),
        }
    });
}

/// How many groups one commit re-checks under their group locks
/// ([`verify_behind`]); the items of further groups become heads.
const MAX_VERIFIED_GROUPS: usize = 64;

/// Before the commit (or prepare, `prepare`) of a transaction that
/// enqueued items behind others of their group: for each group, its lock
/// if free, held from now to the end of the commit; then, in a snapshot
/// taken after those locks were granted, the items of the locked groups
/// that nothing pending comes before any more, and every item of the other
/// groups, stop being behind ([`crate::verbs::enqueue::VERIFY_BEHIND`]). A claim
/// that served one of these groups after the enqueue's snapshot and
/// committed is seen now; one that comes later holds the lock after this
/// commit and sees the items; one in flight holds the lock, so its items
/// here become heads themselves (stale heads, which claims pass over):
/// never is a group's first pending item left behind. Under REPEATABLE
/// READ the snapshot would be the transaction's own, and a prepared
/// transaction would hold the locks until COMMIT PREPARED: both make every
/// item a head instead.
unsafe fn verify_behind(prepare: bool) {
    let behind = STATE.with(|s| std::mem::take(&mut s.borrow_mut().behind));
    if behind.is_empty() {
        return;
    }
    let fresh = !prepare && pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32;
    let (mut check, mut clear) = (Vec::new(), Vec::new());
    for (n, ((queue, group), ids)) in behind.into_iter().enumerate() {
        // Each lock is a slot of the shared lock table, held to the end of
        // the commit: an enqueue of 100,000 items into 50,000 groups ran it
        // out ("out of shared memory", 53200). Past MAX_VERIFIED_GROUPS
        // groups the items become heads unchecked (stale heads at worst).
        if fresh && n < MAX_VERIFIED_GROUPS && (hooks().try_group_lock)(&queue, &group) {
            check.extend(ids);
        } else {
            clear.extend(ids);
        }
    }
    pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    as_extension_owner(|| (hooks().verify_behind)(check, clear)).or_report();
    pg_sys::PopActiveSnapshot();
}

/// Take `queue`'s pause lock at this transaction's commit (it changed the
/// queue's settings, [`crate::backend::paused::changing`]).
pub fn settings_change_at_commit(queue: &str) {
    STATE.with(|state| {
        let changed = &mut state.borrow_mut().settings_changed;
        if !changed.iter().any(|q| q == queue) {
            changed.push(queue.to_owned());
        }
    });
}

/// This transaction holds `queue`'s limit lock, to its end: it claimed
/// from the limited queue while the database's schema predates 0.12.0
/// (from 0.12.0 a claim holds slot rows instead, [`crate::verbs::flow`]).
pub fn limit_lock_held(queue: &str) {
    // SAFETY: reads this backend's transaction state.
    let subid = unsafe { pg_sys::GetCurrentSubTransactionId() };
    STATE.with(|state| {
        state
            .borrow_mut()
            .limit_locks
            .push((subid, queue.to_owned()))
    });
}

/// Whether this transaction enqueued `queue`'s first grouped item (the
/// queue is marked at commit). A look at an empty list for almost every
/// call.
pub fn grouped_pending(queue: &str) -> bool {
    STATE.with(|state| state.borrow().mark_grouped.iter().any(|q| q == queue))
}

/// Remember a token `work_assert` accepted, for the fence at commit.
pub fn asserted(token: Token) {
    STATE.with(|state| {
        let asserted = &mut state.borrow_mut().asserted;
        if !asserted.contains(&token) {
            asserted.push(token);
        }
    });
}

fn clear() {
    STATE.with(|state| *state.borrow_mut() = XactState::default());
}

/// The tokens to re-check before commit: empty unless a subtransaction
/// rolled back after an assert.
fn tokens_to_recheck() -> Vec<Token> {
    STATE.with(|state| {
        let state = state.borrow();
        if state.locks_maybe_lost {
            state.asserted.clone()
        } else {
            Vec::new()
        }
    })
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => {
            crate::backend::counters::before_commit();
            let marks = STATE.with(|s| std::mem::take(&mut s.borrow_mut().mark_grouped));
            if event == XACT_EVENT_PRE_PREPARE {
                // A prepared transaction would hold the pause locks until
                // COMMIT PREPARED, and every claim of those queues would
                // hand out nothing meanwhile.
                let changed = STATE.with(|s| s.borrow().settings_changed.first().cloned());
                if let Some(queue) = marks.first().cloned().or(changed) {
                    Err::<(), _>(crate::base::error::WorkfenceError::SettingsPrepared { queue })
                        .or_report();
                }
                let limited = STATE.with(|s| s.borrow().limit_locks.first().map(|l| l.1.clone()));
                if let Some(queue) = limited {
                    Err::<(), _>(crate::base::error::WorkfenceError::LimitedClaimPrepared {
                        queue,
                    })
                    .or_report();
                }
            }
            if !marks.is_empty() {
                // As for the fence below: SPI needs an active snapshot, and
                // the table is the extension owner's.
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
                as_extension_owner(|| {
                    marks
                        .iter()
                        .try_for_each(|queue| (hooks().mark_grouped)(queue))
                })
                .or_report();
                pg_sys::PopActiveSnapshot();
            }
            verify_behind(event == XACT_EVENT_PRE_PREPARE);
            // The pause locks of the queues whose settings this commit
            // changes, held from now to the end of the commit (see
            // `crate::backend::paused`), taken in one order.
            let mut changed = STATE.with(|s| std::mem::take(&mut s.borrow_mut().settings_changed));
            changed.sort_by_key(|queue| (hooks().pause_lock_order)(queue));
            for queue in &changed {
                (hooks().hold_pause_lock)(queue);
            }
            let tokens = tokens_to_recheck();
            if !tokens.is_empty() {
                // SPI needs an active snapshot, which a commit no longer has
                // (an error unwinds the stack with the transaction).
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
                // Raising here aborts the commit (or the prepare); the
                // abort puts the session's user back.
                as_extension_owner(|| (hooks().fence)(&tokens)).or_report();
                pg_sys::PopActiveSnapshot();
            }
            if event == XACT_EVENT_PRE_PREPARE {
                let keys: Vec<i32> = STATE.with(|s| s.borrow().wake.iter().map(|w| w.0).collect());
                for key in keys {
                    (hooks().hold_for_prepared)(key);
                }
            }
        }
        XACT_EVENT_COMMIT => {
            // Not yet: PostgreSQL sends the transaction's invalidation
            // messages (a pause or resume, see `crate::backend::paused`) and
            // releases its locks after this callback. A waiter woken now
            // could look before either and sleep on; the wake-ups go out at
            // the end of the resource release instead.
            let wake = STATE.with(|s| std::mem::take(&mut s.borrow_mut().wake));
            let awaited = STATE.with(|s| std::mem::take(&mut s.borrow_mut().awaited));
            crate::backend::counters::at_commit();
            clear();
            COMMITTED_WAKES.with(|c| *c.borrow_mut() = wake);
            COMMITTED_AWAITED.with(|c| *c.borrow_mut() = awaited);
        }
        XACT_EVENT_PREPARE => {
            // Waiters asleep on these queues must learn that a prepared
            // transaction now holds wake-ups for them (they then re-check
            // every PREPARED_POLL): wake them all, once, but not yet.
            // PostgreSQL 15 runs this callback before it moves the
            // transaction's locks to the prepared transaction
            // (`PostPrepare_Locks`), while they still belong to this backend,
            // which has left the transaction: a waiter woken now could look
            // for the prepared-wake lock, find no holder, and sleep to its
            // deadline. The resource release after the move wakes them. (Its
            // counts count now: COMMIT PREPARED runs no extension code.)
            let wake = STATE.with(|s| std::mem::take(&mut s.borrow_mut().wake));
            crate::backend::counters::at_commit();
            clear();
            let all = wake.into_iter().map(|(key, _)| (key, u32::MAX)).collect();
            COMMITTED_WAKES.with(|c| *c.borrow_mut() = all);
        }
        XACT_EVENT_ABORT => {
            crate::backend::counters::at_abort();
            clear();
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    _parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        STATE.with(|state| {
            let mut state = state.borrow_mut();
            if !state.asserted.is_empty() {
                state.locks_maybe_lost = true;
            }
            // The limit locks of claims in this subtransaction or one
            // inside it (their ids are this one's or larger) went with it.
            state.limit_locks.retain(|(subid, _)| *subid < my_subid);
        });
        // So did the counts they made.
        crate::backend::counters::at_subxact_abort(my_subid);
    }
}

/// Run `f` as the owner of `workfence.items`, as the extension's
/// `SECURITY DEFINER` functions run: a commit runs outside them, as the
/// session's user, who has (and needs) no privilege on the extension's
/// tables. The switch is the one PostgreSQL's `fmgr_security_definer` makes
/// (`SECURITY_LOCAL_USERID_CHANGE`, so nothing in between can `SET ROLE`);
/// the previous user is put back when `f` returns, and by the transaction's
/// abort when it raises. Without the extension's table, `f` runs as is.
fn as_extension_owner<T>(f: impl FnOnce() -> T) -> T {
    let items = crate::pg::plans::workfence_relation(c"items");
    if items == pg_sys::InvalidOid {
        return f();
    }
    // SAFETY: a relation this transaction has locked (its claims, renews
    // or asserts touched it), opened to read its owner and closed again;
    // the user switch of fmgr_security_definer, undone below or by the
    // abort of the transaction.
    unsafe {
        let owner = crate::pg::plans::relation_owner(items);
        let mut user = pg_sys::InvalidOid;
        let mut context: std::ffi::c_int = 0;
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as std::ffi::c_int,
        );
        let out = f();
        pg_sys::SetUserIdAndSecContext(user, context);
        out
    }
}

/// The resource release of a transaction: once a committed top-level
/// transaction's locks are released (`RESOURCE_RELEASE_AFTER_LOCKS`, after
/// its invalidation messages went out), wake the waiters its commit owes;
/// once a prepared one's locks are the prepared transaction's (the same
/// phase, which `PrepareTransaction` runs with `is_commit` true), every
/// waiter of its queues. Setting a latch cannot raise.
#[pg_guard]
unsafe extern "C-unwind" fn on_resource_release(
    phase: pg_sys::ResourceReleasePhase::Type,
    is_commit: bool,
    is_top_level: bool,
    _arg: *mut std::ffi::c_void,
) {
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS || !is_top_level {
        return;
    }
    let wake = COMMITTED_WAKES.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let awaited = COMMITTED_AWAITED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if !is_commit {
        return;
    }
    for (key, items) in wake {
        (hooks().wake)(key, items as usize);
    }
    for id in awaited {
        (hooks().wake_awaiters)(id);
    }
}
