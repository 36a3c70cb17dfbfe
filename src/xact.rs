//! What the extension remembers during a transaction, and the transaction
//! callbacks that act on it when the transaction ends.
//!
//! - **Wake-ups** ([`crate::wait`]): a transaction that makes items of a
//!   queue claimable (enqueue, release, a failure with a retry) counts them;
//!   once it has committed, that many claimers long-polling the queue are
//!   woken. An abort wakes nobody. A `PREPARE TRANSACTION` hands the
//!   wake-ups to the prepared transaction: it holds a shared advisory lock
//!   per queue (class [`crate::wait::PREPARED_WAKE_CLASS`]) until `COMMIT
//!   PREPARED` or `ROLLBACK PREPARED` releases it, and waiters re-check their
//!   queue while such a lock exists (the prepare wakes the queue's waiters so
//!   that they notice it; the session that prepared wakes nobody at its
//!   next commit).
//! - **The fence at commit** ([`crate::lease`]): every token `work_assert`
//!   accepted. Its row lock lasts to the end of the transaction only if no
//!   subtransaction that held it rolled back (`ROLLBACK TO SAVEPOINT`, an
//!   exception block). After such a rollback, the commit (or prepare)
//!   re-checks each asserted token under a fresh row lock and raises 55000
//!   if one is no longer current, so the transaction's writes never commit
//!   under a lease someone else holds.
//!
//! One `RegisterXactCallback` and one `RegisterSubXactCallback` per backend,
//! made in `_PG_init`, rather than pgrx's per-transaction callbacks: those
//! are dropped on commit and abort but not on prepare, so a wake-up queued
//! before `PREPARE TRANSACTION` would fire at the session's next commit.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::lease::Token;

#[derive(Default)]
struct XactState {
    /// Queue keys to wake at commit, each with how many items became
    /// claimable (or will, at a `run_at` the waiters should learn of).
    wake: Vec<(i32, u32)>,
    /// Tokens `work_assert` accepted in this transaction.
    asserted: Vec<Token>,
    /// A subtransaction rolled back after an assert: its row lock may be gone.
    locks_maybe_lost: bool,
}

thread_local! {
    static STATE: RefCell<XactState> = RefCell::new(XactState::default());
}

/// Register the callbacks; `_PG_init` calls it once per backend.
pub fn init() {
    // SAFETY: registering C callbacks with static lifetime, in the backend's
    // main thread, at library load.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
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
            let tokens = tokens_to_recheck();
            if !tokens.is_empty() {
                // SPI needs an active snapshot, which a commit no longer has
                // (an error unwinds the stack with the transaction).
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
                // Raising here aborts the commit (or the prepare).
                crate::lease::fence_at_commit(&tokens).or_report();
                pg_sys::PopActiveSnapshot();
            }
            if event == XACT_EVENT_PRE_PREPARE {
                let keys: Vec<i32> = STATE.with(|s| s.borrow().wake.iter().map(|w| w.0).collect());
                for key in keys {
                    crate::wait::hold_for_prepared(key);
                }
            }
        }
        XACT_EVENT_COMMIT => {
            let wake = STATE.with(|s| std::mem::take(&mut s.borrow_mut().wake));
            clear();
            for (key, items) in wake {
                crate::wait::wake(key, items as usize);
            }
        }
        XACT_EVENT_PREPARE => {
            // Waiters asleep on these queues must learn that a prepared
            // transaction now holds wake-ups for them (they then re-check
            // every PREPARED_POLL): wake them all, once.
            let wake = STATE.with(|s| std::mem::take(&mut s.borrow_mut().wake));
            clear();
            for (key, _) in wake {
                crate::wait::wake(key, usize::MAX);
            }
        }
        XACT_EVENT_ABORT => clear(),
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    _my_subid: pg_sys::SubTransactionId,
    _parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        STATE.with(|state| {
            let mut state = state.borrow_mut();
            if !state.asserted.is_empty() {
                state.locks_maybe_lost = true;
            }
        });
    }
}
