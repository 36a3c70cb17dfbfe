//! What keeps the backend's caches of the extension's settings fresh:
//! PostgreSQL's shared invalidation.
//!
//! The caches read a table once and keep what they read until it changes:
//! the paused queues ([`crate::backend::paused`], table `workfence.queues`), the
//! queue grants ([`crate::access::grants`], tables `workfence.queue_grants` and
//! `workfence.queue_grant_mode`) and the queues with schedules
//! ([`crate::backend::schedules`], table `workfence.schedules`). The functions that change those tables
//! register a relcache invalidation of the table they changed
//! ([`invalidate`]), which PostgreSQL sends to every backend when their
//! transaction commits (and applies in the changing backend at once, and
//! again if it aborts). A backend's callback then bumps one counter, the
//! **generation**; a cache is valid for the generation it was read in.
//! Roles changing (membership granted or revoked, a role's attributes such
//! as SUPERUSER, a role dropped) bump it too, through the syscache
//! callbacks of `pg_auth_members` and `pg_authid`: the grants' decisions
//! depend on who is a member of whom.
//!
//! One counter for every cache: a pause also makes the grants be read
//! again, and a grant the paused queues. Both change rarely; one counter
//! keeps the callback free of any choice.
//!
//! The callbacks run inside any catalog access, even while a cache is being
//! read, so they only touch `Cell`s: no allocation, no borrow, no error.

use std::cell::Cell;
use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::pg::plans;

/// A table whose rows a backend keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// `workfence.queues` (the pause).
    Queues = 0,
    /// `workfence.queue_grants`.
    QueueGrants = 1,
    /// `workfence.queue_grant_mode`.
    QueueGrantMode = 2,
    /// `workfence.schedules` (from 0.12.0: which queues have schedules,
    /// [`crate::backend::schedules`]).
    Schedules = 3,
}

impl Watched {
    /// The table's name in schema `workfence`.
    pub fn name(self) -> &'static CStr {
        match self {
            Watched::Queues => c"queues",
            Watched::QueueGrants => c"queue_grants",
            Watched::QueueGrantMode => c"queue_grant_mode",
            Watched::Schedules => c"schedules",
        }
    }
}

thread_local! {
    /// Bumped by the callbacks; each cache is valid for the generation it
    /// was read in.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// The OID of each watched table when a cache last read it
    /// (`InvalidOid`: not read yet), indexed by [`Watched`].
    static OIDS: [Cell<pg_sys::Oid>; 4] = const {
        [
            Cell::new(pg_sys::InvalidOid),
            Cell::new(pg_sys::InvalidOid),
            Cell::new(pg_sys::InvalidOid),
            Cell::new(pg_sys::InvalidOid),
        ]
    };
}

/// Register the callbacks; `_PG_init` calls it once per backend.
pub fn init() {
    // SAFETY: registering C callbacks with static lifetime at library load,
    // on the backend's main thread.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relation_changed), pg_sys::Datum::from(0));
        for cache in [
            pg_sys::SysCacheIdentifier::AUTHMEMMEMROLE,
            pg_sys::SysCacheIdentifier::AUTHOID,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as std::ffi::c_int,
                Some(roles_changed),
                pg_sys::Datum::from(0),
            );
        }
    }
}

fn bump() {
    GENERATION.set(GENERATION.get().wrapping_add(1));
}

/// The relcache callback: `relid` was invalidated (`InvalidOid`: every
/// relation).
#[pg_guard]
unsafe extern "C-unwind" fn relation_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let watched = OIDS.with(|oids| oids.iter().any(|oid| oid.get() == relid));
    if relid == pg_sys::InvalidOid || watched {
        bump();
    }
}

/// The syscache callback of `pg_auth_members` and `pg_authid`.
#[pg_guard]
unsafe extern "C-unwind" fn roles_changed(
    _arg: pg_sys::Datum,
    _cache: std::ffi::c_int,
    _hash: u32,
) {
    bump();
}

/// The generation now, after taking the invalidation messages that have
/// arrived (as every lock acquisition does). Call inside a transaction.
pub fn generation() -> u64 {
    // SAFETY: processes pending invalidation messages; may run the
    // callbacks above.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    GENERATION.get()
}

/// The OID of `table` (`InvalidOid` in a schema that predates it), which
/// from now on bumps the generation when invalidated. Call inside a
/// transaction, before reading the table.
pub fn watch(table: Watched) -> pg_sys::Oid {
    let oid = plans::workfence_relation(table.name());
    OIDS.with(|oids| oids[table as usize].set(oid));
    oid
}

/// After a function changed `table`: every backend (this one included)
/// reads it again before using it.
pub fn invalidate(table: Watched) {
    let oid = plans::workfence_relation(table.name());
    if oid != pg_sys::InvalidOid {
        // SAFETY: registers an invalidation message of this transaction.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(oid) };
    }
}

/// Whether a cache read now may be kept: only a read with a fresh snapshot
/// (READ COMMITTED). Under REPEATABLE READ or SERIALIZABLE a read sees the
/// transaction's snapshot, which may predate a change whose invalidation
/// has already been taken: its answer is used, not kept.
pub fn read_may_be_kept() -> bool {
    // SAFETY: a plain int global of the backend.
    unsafe { pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32 }
}
