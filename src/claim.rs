//! `work_claim` and `work_claim_key`: take items under a fresh lease.
//!
//! A claim takes items that are pending and due, or claimed under a lease that
//! has lapsed (server time), locks them with `FOR UPDATE SKIP LOCKED` so that
//! concurrent claimers neither wait on each other nor get the same item, and
//! gives each a fresh epoch from `workfence.epoch_seq` in the same statement.

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiTupleTable;

use crate::error::{OrReport, Result, WorkfenceError};
use crate::jsonb::RawJsonb;
use crate::plans::{self, params, Statement};
use crate::validate;
use crate::wait;

/// One claimed item: (id, key, payload, epoch, attempt, lease_until).
type ClaimedRow = (i64, String, RawJsonb, i64, i32, TimestampWithTimeZone);

/// A lapsed lease on an item whose attempts are used up is not handed out
/// again: the claim that finds it turns the item `failed` (a dead letter), so
/// a job that keeps crashing its worker cannot loop forever. This runs as a
/// data-modifying CTE beside the claim, on rows `exhausted_ids(id)` names, and
/// does not take any of the claim's `max_items` slots. The maintenance worker
/// ([`crate::maintenance`]) runs the same CTE over every queue. It has no
/// parameters, so no statement depends on another's `$n`.
macro_rules! dead_letter {
    () => {
        r#"
, exhausted AS (
    UPDATE workfence.items AS i
       SET state = 'failed'::workfence.item_state,
           lease_until = NULL,
           last_error = 'lease expired on the final attempt',
           finished_at = pg_catalog.clock_timestamp()
      FROM exhausted_ids
     WHERE i.id OPERATOR(pg_catalog.=) exhausted_ids.id
    RETURNING i.id
)"#
    };
}
pub(crate) use dead_letter;

// Claim up to `$4` items of queue `$1` for owner `$2` under lease `$3`. Two
// claim paths, each walking its own partial index in order: pending and due
// (items_due_idx), and claimed with a lapsed lease (items_lease_idx). One OR
// over both would use neither index. `(SELECT clock_timestamp())` is
// evaluated once (an InitPlan), so it can bound the index scan. Each picked
// item gets a fresh epoch and a lease in the same UPDATE (columns 8 and 9 of
// `upd`, priority and run_at, only order the result). Column 7 of the
// result: how many lapsed final attempts this statement dead-lettered, on
// every row; with nothing claimed, one row of NULLs carries it (a waiting
// claim keeps an empty attempt only if it changed something, see `wait`).
static CLAIM: Statement<ClaimParams> = Statement::new(concat!(
    r#"
WITH due AS (
    SELECT i.id, i.priority, i.run_at
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND i.run_at OPERATOR(pg_catalog.<=) (SELECT pg_catalog.clock_timestamp())
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), lapsed AS (
    SELECT i.id, i.priority, i.run_at
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) (SELECT pg_catalog.clock_timestamp())
       AND i.attempts OPERATOR(pg_catalog.<) i.max_attempts
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), exhausted_ids AS (
    SELECT i.id
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) (SELECT pg_catalog.clock_timestamp())
       AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
     LIMIT $4
       FOR UPDATE SKIP LOCKED
)"#,
    dead_letter!(),
    r#"
, picked AS (
    SELECT c.id
      FROM (SELECT * FROM due UNION ALL SELECT * FROM lapsed) AS c
     ORDER BY c.priority, c.run_at, c.id
     LIMIT $4
), upd AS (
    UPDATE workfence.items AS i
       SET state = 'claimed'::workfence.item_state,
           epoch = pg_catalog.nextval('workfence.epoch_seq'::pg_catalog.regclass),
           owner = $2,
           lease_until = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3,
           attempts = i.attempts OPERATOR(pg_catalog.+) 1
      FROM picked
     WHERE i.id OPERATOR(pg_catalog.=) picked.id
    RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until, i.priority, i.run_at
)
SELECT upd.id, upd.key, upd.payload, upd.epoch, upd.attempts, upd.lease_until, d.dead
  FROM (SELECT pg_catalog.count(*) AS dead FROM exhausted) AS d
  LEFT JOIN upd ON true
 ORDER BY upd.priority, upd.run_at, upd.id
"#
));

params! {
    /// `$1` queue, `$2` owner, `$3` lease, `$4` max_items.
    struct ClaimParams<'a> {
        queue: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        max_items: i32 = INT4OID,
    }
}

// Claim item `$2` of queue `$1`, if claimable, for owner `$3` under lease
// `$4` (a fresh epoch, as CLAIM gives); a lapsed final attempt is
// dead-lettered instead.
static CLAIM_KEY: Statement<ClaimKeyParams> = Statement::new(concat!(
    r#"
WITH candidate AS (
    SELECT i.id,
           i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
             AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state AS exhausted
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.key OPERATOR(pg_catalog.=) $2
       AND ((i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
             AND i.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
         OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()))
       FOR UPDATE SKIP LOCKED
), exhausted_ids AS (
    SELECT c.id FROM candidate AS c WHERE c.exhausted
)"#,
    dead_letter!(),
    r#"
, picked AS (
    SELECT c.id FROM candidate AS c WHERE NOT c.exhausted
)
UPDATE workfence.items AS i
   SET state = 'claimed'::workfence.item_state,
       epoch = pg_catalog.nextval('workfence.epoch_seq'::pg_catalog.regclass),
       owner = $3,
       lease_until = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $4,
       attempts = i.attempts OPERATOR(pg_catalog.+) 1
  FROM picked
 WHERE i.id OPERATOR(pg_catalog.=) picked.id
RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until, i.priority, i.run_at
"#
));

params! {
    /// `$1` queue, `$2` key, `$3` owner, `$4` lease.
    struct ClaimKeyParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
    }
}

/// The claimed rows of a claim statement's result.
fn read_claimed(rows: SpiTupleTable<'_>) -> Result<Vec<ClaimedRow>> {
    Ok(read_claim_result(rows, false)?.0)
}

/// The claimed rows and, with `counts_dead` (CLAIM's column 7), how many
/// lapsed final attempts the statement dead-lettered.
fn read_claim_result(rows: SpiTupleTable<'_>, counts_dead: bool) -> Result<(Vec<ClaimedRow>, i64)> {
    let mut out = Vec::with_capacity(rows.len());
    let mut dead = 0;
    for row in rows {
        if counts_dead {
            dead = row.get::<i64>(7)?.unwrap_or(0);
        }
        if row.get::<i64>(1)?.is_none() {
            // CLAIM's row that only carries the dead-letter count.
            continue;
        }
        // Every column is NOT NULL for a claimed row; a NULL here is a bug.
        let missing = |column| WorkfenceError::UnexpectedNull { column };
        out.push((
            row.get::<i64>(1)?.ok_or_else(|| missing("id"))?,
            row.get::<String>(2)?.ok_or_else(|| missing("key"))?,
            row.get::<RawJsonb>(3)?.ok_or_else(|| missing("payload"))?,
            row.get::<i64>(4)?.ok_or_else(|| missing("epoch"))?,
            row.get::<i32>(5)?.ok_or_else(|| missing("attempts"))?,
            row.get::<TimestampWithTimeZone>(6)?
                .ok_or_else(|| missing("lease_until"))?,
        ));
    }
    Ok((out, dead))
}

/// Claim up to `max_items` claimable items of `queue` for `owner`, waiting
/// up to `wait` for one to become claimable.
///
/// SQL: `workfence.work_claim(queue text, owner text, lease interval,
/// max_items int DEFAULT 1, wait interval DEFAULT '0') RETURNS TABLE (id
/// bigint, key text, payload jsonb, epoch bigint, attempt int, lease_until
/// timestamptz)`.
///
/// Claimable: pending with `run_at` reached, or claimed with `lease_until`
/// reached (server time). Order: priority, run_at, id. Each returned item has
/// a fresh epoch (the fencing token to pass to renew/finish/release/fail/
/// assert), its `attempt` number (1 on the first claim) and `lease_until`
/// (`clock_timestamp() + lease`). Concurrent claimers never get the same
/// item and skip rows other transactions hold locked (`FOR UPDATE SKIP
/// LOCKED`); run it in READ COMMITTED (the default). PostgreSQL's one
/// exception: a candidate whose update commits while the claim checks it
/// makes `SKIP LOCKED` follow the update chain and wait for whoever holds
/// the newest version (`heap_lock_updated_tuple`), for at most that
/// transaction's length. Every row is claimed when the call runs, whether
/// or not the query reads it (a `LIMIT`, `EXISTS`, a cursor).
///
/// `wait` (0 to 1 hour): when nothing is claimable, a long poll inside the
/// server: the call sleeps until an item may have become claimable (an
/// enqueue, release or retryable failure in the queue commits, or a `run_at`
/// or `lease_until` is reached) and claims again, returning as soon as it
/// gets something, or zero rows once `wait` has passed (see [`crate::wait`]).
/// `statement_timeout` and `pg_cancel_backend` end the wait with 57014.
///
/// Errors: 22004 for a NULL argument; 22023 for a bad queue or owner (see
/// `work_enqueue`; owner blank, > 256 bytes or with control characters), a
/// lease not in (0, 7 days], `max_items` outside 1..1000, `wait` not in
/// [0, 1 hour]; 25000 for `wait` > 0 under REPEATABLE READ or SERIALIZABLE;
/// 57014 when cancelled while waiting.
#[pg_extern(
    name = "work_claim",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
pub fn work_claim_wait(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    max_items: default!(Option<i32>, 1),
    wait: default!(Option<Interval>, "'0'"),
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(key, String),
        name!(payload, RawJsonb),
        name!(epoch, i64),
        name!(attempt, i32),
        name!(lease_until, TimestampWithTimeZone),
    ),
> {
    (|| {
        let wait = validate::wait(wait.map(Into::into))?;
        claim(queue, owner, lease, max_items, wait)
    })()
    .map(TableIterator::new)
    .or_report()
}

/// The 4-argument `work_claim` of version 0.1.0 (no `wait`), kept as the C
/// symbol `work_claim_wrapper` that 0.1.0's install script binds, so that a
/// database still at 0.1.0 keeps working with this library until `ALTER
/// EXTENSION pg_workfence UPDATE` replaces it with [`work_claim_wait`]. Not
/// part of this version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn work_claim(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    max_items: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(key, String),
        name!(payload, RawJsonb),
        name!(epoch, i64),
        name!(attempt, i32),
        name!(lease_until, TimestampWithTimeZone),
    ),
> {
    claim(queue, owner, lease, max_items, std::time::Duration::ZERO)
        .map(TableIterator::new)
        .or_report()
}

fn claim(
    queue: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
    max_items: Option<i32>,
    wait: std::time::Duration,
) -> Result<Vec<ClaimedRow>> {
    let queue = validate::queue(queue)?;
    let owner = validate::owner(owner)?;
    validate::lease(lease.map(Into::into))?;
    let max_items = validate::max_items(max_items)?;
    wait::until_claimed(&queue, wait, || {
        claim_once(&queue, &owner, lease, max_items)
    })
}

/// One claim statement: the rows claimed, and whether the statement changed
/// anything at all (claimed, or dead-lettered a lapsed final attempt).
fn claim_once(
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    max_items: i32,
) -> Result<(Vec<ClaimedRow>, bool)> {
    let (rows, dead) = Spi::connect_mut(|client| {
        plans::run(
            client,
            &CLAIM,
            ClaimParams {
                queue,
                owner,
                lease,
                max_items,
            },
            |rows| read_claim_result(rows, true),
        )
    })?;
    let changed = !rows.is_empty() || dead > 0;
    Ok((durable(rows), changed))
}

/// Claim the one item of `queue` named `key`, if it is claimable.
///
/// SQL: `workfence.work_claim_key(queue text, key text, owner text, lease
/// interval) RETURNS TABLE (id, key, payload, epoch, attempt, lease_until)`,
/// zero or one row: the item for a scheduled firing or a singleton job. The
/// rules are `work_claim`'s: zero rows when the item is missing, not yet due,
/// held under a live lease, finished, or locked by a concurrent claim.
///
/// Errors: 22004 for a NULL argument; 22023 for a bad queue, key, owner or lease.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_claim_key(
    queue: Option<String>,
    key: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(key, String),
        name!(payload, RawJsonb),
        name!(epoch, i64),
        name!(attempt, i32),
        name!(lease_until, TimestampWithTimeZone),
    ),
> {
    claim_key(queue, key, owner, lease)
        .map(TableIterator::new)
        .or_report()
}

fn claim_key(
    queue: Option<String>,
    key: Option<String>,
    owner: Option<String>,
    lease: Option<Interval>,
) -> Result<Vec<ClaimedRow>> {
    let queue = validate::queue(queue)?;
    let key = validate::key(validate::required("key", key)?)?;
    let owner = validate::owner(owner)?;
    validate::lease(lease.map(Into::into))?;
    Spi::connect_mut(|client| {
        plans::run(
            client,
            &CLAIM_KEY,
            ClaimKeyParams {
                queue: &queue,
                key: &key,
                owner: &owner,
                lease,
            },
            read_claimed,
        )
    })
    .map(durable)
}

/// Make the epochs of a claim durable before they are handed out.
///
/// With `synchronous_commit = off` a commit is acknowledged before its WAL
/// is flushed, and so may be the WAL record of `epoch_seq` that covers the
/// epochs just drawn. A crash then restores the sequence to an older
/// position and **the same epochs are handed out again**: the worker that got
/// the acknowledged (and lost) claim would hold a token that a later claim
/// of the same item, under the same owner name, also gets.
///
/// What must be durable is the sequence, not the claim: `nextval` WAL-logs
/// a position 32 values ahead of what it hands out (and again after every
/// checkpoint), so the latest record on the sequence's page covers every
/// epoch drawn so far. Flushing WAL up to that page's LSN rules the reuse
/// out; a lost claim then leaves the item with its old epoch, and the next
/// claim draws a newer one. Most claims find that record already flushed (by
/// an earlier claim or the WAL writer) and flush nothing; a claim's own row
/// updates stay asynchronous, as the session asked. Under the default
/// `synchronous_commit` (on, or any level that flushes locally) the commit
/// flushes anyway, and this does nothing.
fn durable(rows: Vec<ClaimedRow>) -> Vec<ClaimedRow> {
    // SAFETY: plain reads of backend globals; XLogFlush of a position that
    // was inserted (a page LSN, or this backend's own last record); it
    // raises only on an I/O failure (a PANIC-worthy event in PostgreSQL
    // anyway).
    unsafe {
        if !rows.is_empty()
            && (pg_sys::synchronous_commit as u32)
                < pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_LOCAL_FLUSH
        {
            pg_sys::XLogFlush(epoch_seq_lsn().unwrap_or(pg_sys::XactLastRecEnd));
        }
    }
    rows
}

/// The LSN of `workfence.epoch_seq`'s page: the end of its latest WAL
/// record. `None` if no sequence of that name exists (then the caller
/// flushes everything this backend wrote, which covers it too).
///
/// # Safety
/// Call inside a transaction that has drawn from the sequence (it holds a
/// lock on it; the relation and buffer are released before returning).
unsafe fn epoch_seq_lsn() -> Option<pg_sys::XLogRecPtr> {
    let seq = plans::workfence_relation(c"epoch_seq");
    if seq == pg_sys::InvalidOid {
        return None;
    }
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let rel = pg_sys::relation_open(seq, lock);
    if (*(*rel).rd_rel).relkind as u8 != pg_sys::RELKIND_SEQUENCE {
        pg_sys::relation_close(rel, lock);
        return None;
    }
    let buffer = pg_sys::ReadBuffer(rel, 0);
    // The content lock makes the 8-byte LSN read consistent with a
    // concurrent nextval, which updates it under an exclusive lock.
    pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
    let header = pg_sys::BufferGetPage(buffer) as *const pg_sys::PageHeaderData;
    let lsn = (u64::from((*header).pd_lsn.xlogid) << 32) | u64::from((*header).pd_lsn.xrecoff);
    pg_sys::UnlockReleaseBuffer(buffer);
    pg_sys::relation_close(rel, lock);
    Some(lsn)
}
