//! Lock keys: the int4 a name hashes to, for the advisory-lock tags of a
//! queue's waiters, pause, limit and groups. Below every verb.

use crate::pg::compat;

/// The second key of a queue's wait lock (and of its prepared-wake lock):
/// PostgreSQL's own `hashtext(queue)`, the same in every backend, every
/// build of this library and every PostgreSQL major (a library replaced in
/// place must not make old and new backends miss each other's wake-ups),
/// and computable from SQL. Computed as `hashtext` computes it for a
/// deterministic collation (every database's default collation is one):
/// `hash_bytes` over the name's bytes ([`compat::hash_text`]); the pg test
/// `queue_key_is_sql_hashtext` compares the two.
///
/// An operator finds the claimers long-polling queue `'mail'` in this
/// database with (1464235892 is [`crate::backend::wait::WAIT_LOCK_CLASS`], 0x57467774, "WFwt";
/// `objsubid` 22342 is the extension's own lock space,
/// [`compat::LOCK_SPACE`], which no SQL advisory lock function reaches):
///
/// ```sql
/// SELECT l.pid
///   FROM pg_locks AS l
///  WHERE l.locktype = 'advisory'
///    AND l.database = (SELECT d.oid FROM pg_database AS d
///                       WHERE d.datname = current_database())
///    AND l.classid = 1464235892
///    AND l.objid = hashtext('mail')::oid
///    AND l.objsubid = 22342
///    AND l.granted;
/// ```
///
/// (`harness/tests/client/first_use.rs` runs exactly this query against a waiting
/// claim.) A waiter holds the lock only while it waits, not while it claims;
/// two queues whose names hash alike share their waiters' list (see the
/// module comment).
pub fn queue_key(queue: &str) -> i32 {
    // The lock manager stores the int4's bits; hashtext returns them as int4.
    compat::hash_text(queue.as_bytes()) as i32
}
