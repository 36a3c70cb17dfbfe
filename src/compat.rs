//! Code that differs between PostgreSQL majors, in one place (house style
//! 18): a new major is this file's work.
//!
//! Today the extension builds for PostgreSQL 15 only (`pg15` feature).

use pgrx::pg_sys;

extern "C-unwind" {
    /// `storage/sinvaladt.h` (PostgreSQL 15 and 16): the `PGPROC` of the
    /// live backend that holds backend id `backendID`, or NULL. Not in
    /// pgrx's bindings (it does not include that header).
    fn BackendIdGetProc(backendID: std::ffi::c_int) -> *mut pg_sys::PGPROC;

    /// `common/hashfn.h`: Bob Jenkins' hash of `keylen` bytes, the hash
    /// behind `hash_any` and so behind SQL's `hashtext`. Not in pgrx's
    /// bindings.
    fn hash_bytes(k: *const u8, keylen: std::ffi::c_int) -> u32;
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
/// backend id to the one live backend that holds it; the local transaction
/// id is then compared, so a slot reused since the lock was looked up is not
/// taken either. The comparison is unlocked: at worst it lets through a
/// backend that is ending its transaction, and setting that backend's latch
/// is a spurious wake-up, which every latch user tolerates.
///
/// # Safety
/// Call in a backend attached to shared memory.
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

/// Whether this backend holds a lock on relation `relid` in the lock
/// manager's *fast path* (its own `PGPROC`'s slots, PostgreSQL 15: 16 slots,
/// 3 mode bits each). Weak relation locks (AccessShare, RowShare,
/// RowExclusive) start there; a backend that requests a strong, conflicting
/// lock on the relation first moves every backend's fast-path locks on it
/// into the shared lock table (`FastPathTransferRelationLocks`), so a lock
/// that was in the fast path and no longer is tells its holder that a
/// conflicting request came.
///
/// # Safety
/// Call in a backend. The slots are read without `fpInfoLock`: only this
/// backend adds to them, and a transfer racing the read is seen at the
/// next one.
pub unsafe fn fast_path_holds(relid: pg_sys::Oid) -> bool {
    /// FAST_PATH_BITS_PER_SLOT in lock.c.
    const BITS_PER_SLOT: usize = 3;
    let proc = pg_sys::MyProc;
    let bits = std::ptr::read_volatile(&(*proc).fpLockBits);
    (*proc)
        .fpRelId
        .iter()
        .enumerate()
        .any(|(slot, id)| *id == relid && (bits >> (slot * BITS_PER_SLOT)) & 0b111 != 0)
}
