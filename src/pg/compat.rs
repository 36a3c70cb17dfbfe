//! Code that differs between PostgreSQL majors, in one place (house style
//! 18): a new major is this file's work.
//!
//! The extension builds for PostgreSQL 15 (`pg15` feature, the default) and
//! 18 (`pg18`). What differs between them, each under `cfg(feature)`:
//!
//! - a virtual transaction id names its backend by *backend id* in 15 and
//!   by `PGPROC` number in 17 and later ([`proc_of`]);
//! - the fast-path lock slots are one fixed array of 16 in 15 and groups of
//!   16 sized at start-up from `max_locks_per_transaction` in 18
//!   ([`fast_path_holds`]);
//! - `LockAcquireExtended` gained a `logLockFailure` argument in 18
//!   ([`lock_acquire_local`]);
//! - `pqsignal` is a macro for `pqsignal_be` in a backend of 18
//!   ([`set_signal_handler`]).
//!
//! Everything else the extension calls (transaction callbacks, SPI,
//! latches, `LockAcquire`/`LockRelease`, `TransactionIdIsInProgress`,
//! `pg_database`'s row, `Port`'s first field) has kept its shape from 15 to
//! 18.
//!
//! What lives here: lock tags (advisory and relation), finding the live
//! backends that hold a lock, setting a backend's latch, the fast-path lock
//! slots, `pg_database`'s row layout, and the `hash_bytes` behind SQL's
//! `hashtext`.

use pgrx::pg_sys;

#[cfg(not(any(feature = "pg15", feature = "pg18")))]
compile_error!("build with feature pg15 (the default) or pg18: cargo pgrx test pg18");

#[cfg(feature = "pg15")]
extern "C-unwind" {
    /// `storage/sinvaladt.h` (PostgreSQL 15 and 16): the `PGPROC` of the
    /// live backend that holds backend id `backendID`, or NULL. Not in
    /// pgrx's bindings (it does not include that header).
    fn BackendIdGetProc(backendID: std::ffi::c_int) -> *mut pg_sys::PGPROC;
}

extern "C-unwind" {
    /// `common/hashfn.h`: Bob Jenkins' hash of `keylen` bytes, the hash
    /// behind `hash_any` and so behind SQL's `hashtext`. Not in pgrx's
    /// bindings.
    fn hash_bytes(k: *const u8, keylen: std::ffi::c_int) -> u32;
}

/// Wait on this backend's latch for at most `timeout_ms`, as `WaitLatch`
/// with `WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH` does, and, when the
/// backend has a client, also for the client's socket being closed by the
/// peer (`WL_SOCKET_CLOSED`, PostgreSQL 15 and later: a killed client, a
/// dropped connection). Returns the events that ended the wait.
///
/// Not `pq_check_connection()`, which `client_connection_check_interval`
/// uses: it resets the latch when it finds it set, and a wake-up set
/// between a waiter's `WaitLatch` and that reset would be lost. Here the
/// socket is one more event of the same wait, and the latch is left as it
/// is.
///
/// The socket is the first field of `Port` (`libpq/libpq-be.h`: `pgsocket
/// sock;`, first in PostgreSQL 15's and 18's headers), which pgrx's
/// bindings leave opaque: a new major checks its header here.
///
/// # Safety
/// Call on the backend's main thread.
pub unsafe fn wait_latch_or_client_gone(timeout_ms: std::ffi::c_long) -> std::ffi::c_int {
    let events = (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32;
    if pg_sys::MyProcPort.is_null() {
        return pg_sys::WaitLatch(
            pg_sys::MyLatch,
            events,
            timeout_ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
    }
    let sock = *(pg_sys::MyProcPort as *const pg_sys::pgsocket);
    pg_sys::WaitLatchOrSocket(
        pg_sys::MyLatch,
        events | pg_sys::WL_SOCKET_CLOSED as i32,
        sock,
        timeout_ms,
        pg_sys::PG_WAIT_EXTENSION,
    )
}

/// SQL's `hashtext(t)` of the text whose bytes are `bytes`, as it is under a
/// deterministic collation (every database's default collation; a
/// nondeterministic one hashes a normalised key instead): `hash_any` over
/// the bytes, which is `hash_bytes`. The same function since PostgreSQL
/// 8.4, in every major this extension builds for.
pub fn hash_text(bytes: &[u8]) -> u32 {
    // A queue name is at most 128 bytes (validate::QUEUE_MAX_BYTES); any
    // text is under 1 GB, so the length fits a c_int.
    let len = std::ffi::c_int::try_from(bytes.len()).unwrap_or(std::ffi::c_int::MAX);
    // SAFETY: reads `len` bytes of the slice; a pure function of them.
    unsafe { hash_bytes(bytes.as_ptr(), len) }
}

/// The `PGPROC` of the transaction `vxid` names, if that transaction is
/// still running in a backend; `None` for a prepared transaction (it has no
/// backend) or a backend that has moved on.
///
/// PostgreSQL 15 names a backend in a virtual transaction id by its
/// *backend id*, not by its `PGPROC` slot; the slots of exited backends keep
/// their old `backendId` and `pid`, so a scan of `ProcGlobal->allProcs` can
/// pick a dead slot (the long poll's missed wake-ups, fixed in 0.4.0).
/// `BackendIdGetProc` asks the shared-invalidation state, which maps each
/// backend id to the one live backend that holds it. PostgreSQL 17 and later
/// name the `PGPROC` slot itself (`procNumber`), and `ProcNumberGetProc`
/// refuses a slot with no process. Either way the local transaction id is
/// then compared, and that is what leaves out a prepared transaction: its
/// dummy `PGPROC` carries the preparing backend's id and the local id it had
/// (`MarkAsPreparingGuts`), while that backend, if still alive, has cleared
/// or moved on from it (a transaction prepared before a restart has no
/// backend at all: an invalid id, returned early). The same comparison
/// leaves out a slot reused since the lock was looked up. It is unlocked:
/// at worst it lets through a backend that is ending its transaction, and
/// setting that backend's latch is a spurious wake-up, which every latch
/// user tolerates.
///
/// # Safety
/// Call in a backend attached to shared memory.
#[cfg(feature = "pg15")]
pub unsafe fn proc_of(vxid: &pg_sys::VirtualTransactionId) -> Option<*mut pg_sys::PGPROC> {
    if vxid.backendId < 1 {
        return None;
    }
    let proc = BackendIdGetProc(vxid.backendId);
    if proc.is_null() || (*proc).lxid != vxid.localTransactionId {
        return None;
    }
    Some(proc)
}

/// See the PostgreSQL 15 version above.
///
/// # Safety
/// Call in a backend attached to shared memory.
#[cfg(feature = "pg18")]
pub unsafe fn proc_of(vxid: &pg_sys::VirtualTransactionId) -> Option<*mut pg_sys::PGPROC> {
    if vxid.procNumber < 0 {
        return None;
    }
    let proc = pg_sys::ProcNumberGetProc(vxid.procNumber);
    if proc.is_null()
        || (*proc).vxid.procNumber != vxid.procNumber
        || (*proc).vxid.lxid != vxid.localTransactionId
    {
        return None;
    }
    Some(proc)
}

/// Whether this backend holds a lock on relation `relid` in the lock
/// manager's *fast path* (its own `PGPROC`'s slots, 3 mode bits each).
/// Weak relation locks (AccessShare, RowShare, RowExclusive) start there; a
/// backend that requests a strong, conflicting lock on the relation first
/// moves every backend's fast-path locks on it into the shared lock table
/// (`FastPathTransferRelationLocks`), so a lock that was in the fast path
/// and no longer is tells its holder that a conflicting request came.
///
/// PostgreSQL 15 has 16 slots in one array and one 64-bit word of mode
/// bits; 18 has `FastPathLockGroupsPerBackend` groups of 16 slots, a word
/// of mode bits per group, and a relation can only sit in the group its
/// OID hashes to (`FAST_PATH_REL_GROUP` in `lock.c`).
///
/// # Safety
/// Call in a backend. The slots are read without `fpInfoLock`: only this
/// backend adds to them, and a transfer racing the read is seen at the
/// next one.
pub unsafe fn fast_path_holds(relid: pg_sys::Oid) -> bool {
    /// FAST_PATH_BITS_PER_SLOT in lock.c.
    const BITS_PER_SLOT: usize = 3;
    let proc = pg_sys::MyProc;
    #[cfg(feature = "pg15")]
    {
        let bits = std::ptr::read_volatile(&(*proc).fpLockBits);
        (*proc)
            .fpRelId
            .iter()
            .enumerate()
            .any(|(slot, id)| *id == relid && (bits >> (slot * BITS_PER_SLOT)) & 0b111 != 0)
    }
    #[cfg(feature = "pg18")]
    {
        /// FP_LOCK_SLOTS_PER_GROUP in storage/proc.h.
        const SLOTS_PER_GROUP: usize = 16;
        /// The prime of FAST_PATH_REL_GROUP in lock.c.
        const GROUP_HASH: u64 = 49157;
        // A power of two, set once at start-up.
        let groups = pg_sys::FastPathLockGroupsPerBackend as u64;
        if groups == 0 {
            return false;
        }
        let group = ((u64::from(relid.to_u32()) * GROUP_HASH) & (groups - 1)) as usize;
        let bits = std::ptr::read_volatile((*proc).fpLockBits.add(group));
        let ids = (*proc).fpRelId.add(group * SLOTS_PER_GROUP);
        (0..SLOTS_PER_GROUP)
            .any(|index| *ids.add(index) == relid && (bits >> (index * BITS_PER_SLOT)) & 0b111 != 0)
    }
}

/// Take `mode` on `tag` for the transaction and return this backend's lock
/// table entry for it (`LockAcquireExtended` with `sessionLock` and
/// `dontWait` false and `reportMemoryError` true; 18 adds
/// `logLockFailure`, false here as in `LockAcquire`). Waits as `LockAcquire`
/// does; raises what it raises (a deadlock is 40P01).
///
/// # Safety
/// A transaction is open; `tag` names an object of this database.
pub unsafe fn lock_acquire_local(
    tag: &pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
) -> *mut pg_sys::LOCALLOCK {
    let mut local: *mut pg_sys::LOCALLOCK = std::ptr::null_mut();
    #[cfg(feature = "pg15")]
    pg_sys::LockAcquireExtended(tag, mode, false, false, true, &mut local);
    #[cfg(feature = "pg18")]
    pg_sys::LockAcquireExtended(tag, mode, false, false, true, &mut local, false);
    local
}

/// Install `handler` for signal `signo` (`pqsignal`, whose backend symbol
/// is `pqsignal_be` in PostgreSQL 18).
///
/// # Safety
/// A PostgreSQL signal handler, installed while signals are blocked.
pub unsafe fn set_signal_handler(
    signo: std::ffi::c_int,
    handler: unsafe extern "C-unwind" fn(std::ffi::c_int),
) {
    #[cfg(feature = "pg15")]
    pg_sys::pqsignal(signo, Some(handler));
    #[cfg(feature = "pg18")]
    pg_sys::pqsignal_be(signo, Some(handler));
}

/// `locktag_field4` of every advisory lock the extension takes (ASCII
/// "WF"). The SQL advisory lock functions (`pg_advisory_lock` and its
/// kin) make only 1 (the `bigint` form) and 2 (the `(int4, int4)` form),
/// so no role can take, hold or wait on one of the extension's locks from
/// SQL, whatever keys it computes from a queue's name (until 0.11.0 they
/// were in the `(int4, int4)` space, and any role that could connect could
/// stall another role's claims and operator calls: issue 30). `pg_locks`
/// shows them with `locktype = 'advisory'` and `objsubid` = 22342.
pub const LOCK_SPACE: u16 = 0x5746;

/// The lock tag of the extension's advisory lock `(key1, key2)` in this
/// database: the tag `pg_advisory_xact_lock_shared(key1, key2)` would make,
/// but in the extension's own space ([`LOCK_SPACE`]), out of reach of SQL.
/// `pg_locks` shows it as `classid` = key1, `objid` = key2, `objsubid` =
/// [`LOCK_SPACE`].
pub fn advisory_tag(key1: i32, key2: i32) -> pg_sys::LOCKTAG {
    advisory_tag_in(LOCK_SPACE, key1, key2)
}

/// [`advisory_tag`] in lock space `space` (`locktag_field4`, which
/// `pg_locks` shows as `objsubid`): the extension's own spaces besides
/// [`LOCK_SPACE`] (a group's lock, a concurrency slot's), never 1 or 2,
/// which the SQL advisory lock functions make.
pub fn advisory_tag_in(space: u16, key1: i32, key2: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: a plain global of the backend, set at connection start.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        // The lock manager stores the signed keys' bits.
        locktag_field2: key1 as u32,
        locktag_field3: key2 as u32,
        locktag_field4: space,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// The lock tag of relation `relid` in this database.
pub fn relation_tag(relid: pg_sys::Oid) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: a plain global of the backend.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: relid.to_u32(),
        locktag_field3: 0,
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_RELATION as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    }
}

/// Hand `visit` the `PGPROC` of each live backend (not this one) that holds
/// a lock on `tag` conflicting with `mode`, until it returns false.
/// Prepared transactions, which have no backend, are skipped (see
/// [`lock_conflicts_exist`]).
///
/// # Safety
/// Call in a backend attached to shared memory; `visit` must not raise
/// (the holders' array is freed after the walk).
pub unsafe fn for_each_conflicting_proc(
    tag: &pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
    mut visit: impl FnMut(*mut pg_sys::PGPROC) -> bool,
) {
    // GetLockConflicts returns a palloc'd array terminated by an invalid
    // VirtualTransactionId (it leaves out this backend).
    let array = pg_sys::GetLockConflicts(tag, mode, std::ptr::null_mut());
    let mut vxid = array;
    while (*vxid).localTransactionId != 0 {
        if let Some(proc) = proc_of(&*vxid) {
            if !visit(proc) {
                break;
            }
        }
        vxid = vxid.add(1);
    }
    pg_sys::pfree(array.cast());
}

/// Whether any transaction other than this backend's, a prepared one
/// included, holds a lock on `tag` conflicting with `mode`.
///
/// # Safety
/// Call in a backend attached to shared memory.
pub unsafe fn lock_conflicts_exist(tag: &pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE) -> bool {
    let vxid = pg_sys::GetLockConflicts(tag, mode, std::ptr::null_mut());
    let any = (*vxid).localTransactionId != 0;
    pg_sys::pfree(vxid.cast());
    any
}

/// Set the latch of backend `proc` unless it is set already (woken and not
/// yet running); true when this call set it.
///
/// # Safety
/// `proc` is a live backend's `PGPROC` (from [`proc_of`]).
pub unsafe fn set_latch_if_clear(proc: *mut pg_sys::PGPROC) -> bool {
    if (*proc).procLatch.is_set != 0 {
        return false;
    }
    pg_sys::SetLatch(&mut (*proc).procLatch);
    true
}

/// Whether the `pg_database` row `form` is a database one can connect to:
/// it allows connections and is not left invalid by an interrupted `DROP
/// DATABASE` (`datconnlimit` = -2, DATCONNLIMIT_INVALID, since 15.4).
///
/// # Safety
/// `form` points at a `pg_database` tuple's data, held by the caller.
pub unsafe fn database_accepts_connections(form: *const pg_sys::FormData_pg_database) -> bool {
    /// DATCONNLIMIT_INVALID in catalog/pg_database.h.
    const DATCONNLIMIT_INVALID: i32 = -2;
    (*form).datallowconn && (*form).datconnlimit != DATCONNLIMIT_INVALID
}

/// The `oid` of the `pg_database` row `form`.
///
/// # Safety
/// As for [`database_accepts_connections`].
pub unsafe fn database_oid_of(form: *const pg_sys::FormData_pg_database) -> pg_sys::Oid {
    (*form).oid
}

/// The name of the `pg_database` row `form`.
///
/// # Safety
/// As for [`database_accepts_connections`]; the name borrows the tuple.
pub unsafe fn database_name_of<'a>(
    form: *const pg_sys::FormData_pg_database,
) -> &'a std::ffi::CStr {
    std::ffi::CStr::from_ptr((*form).datname.data.as_ptr())
}
