//! Flow control (from 0.10.0): serial groups (`group_key` at enqueue) and
//! per-queue limits (`work_limit`), kept inside the server so that every
//! client language gets them from the same SQL, with fencing intact.
//!
//! **Serial groups.** At most one item of a (queue, group_key) is in state
//! `claimed` at any time, and a group's items are first claimed in claim
//! order (priority, run_at, id): a claim takes a grouped item only when no
//! item of its group is claimed and no pending item of the group comes
//! before it (not yet due or not). A lapsed lease keeps its group until the
//! next claim takes that same item anew (its epoch superseded, as for any
//! lapsed lease) or dead-letters it on its final attempt, which frees the
//! group. Holding the group through a lapse, rather than only while the
//! lease runs, means a worker that renews a lapsed lease nobody took yet
//! can never run beside the group's next item. (The ideas: graphile-worker's
//! named queues, pgmq's FIFO groups; the check here is on the items
//! themselves, so finishing, failing, releasing or cancelling an item frees
//! its group with no write beyond the item's own.)
//!
//! **Limits.** `work_limit(queue, concurrency, rate, per)`: at most
//! `concurrency` items of the queue claimed at once (a lapsed lease keeps
//! its slot until the item is claimed anew, inside that slot, or finished),
//! and at most `rate` items handed out by claims in any window of length
//! `per` (a sliding window: the server times of the window's claims are kept
//! in the queue's row, one per item). Both hold across all workers and
//! connections, as seen by the server's clock.
//!
//! **How a claim keeps them** without claimers waiting on each other. A
//! queue's claims take this path only when its settings say it has groups
//! or limits ([`crate::paused::Settings`]); every other queue runs the
//! plain statements of [`crate::claim`], unchanged.
//! 1. Limits: the claim takes the queue's *limit lock* (a transaction-level
//!    advisory lock, class [`LIMIT_LOCK_CLASS`]) without waiting: if another
//!    transaction holds it (claiming from the queue right now, or having
//!    claimed and not yet committed), this claim returns nothing. Under the
//!    lock, a statement with a snapshot taken after the lock was granted
//!    counts the claimed items and the window's claims: every claim that
//!    could count is committed and visible, none is in flight.
//! 2. The pick ([`PICK`]): due items (for a grouped item: its group has no
//!    claimed item and no pending item before it, in this snapshot) and
//!    lapsed leases, in claim order, locked `FOR UPDATE SKIP LOCKED`.
//! 3. Groups: for each picked grouped item, the group's *group lock*
//!    (class [`GROUP_LOCK_CLASS`], keys the hashes of queue and group),
//!    taken without waiting; a group whose lock is held (another claim of it
//!    in flight) is passed over.
//! 4. The claim ([`TAKE`]): a new statement, so a new snapshot taken after
//!    the group locks were granted, checks the group rule again and claims.
//!    The pick's snapshot may predate a claim of the same group that has
//!    committed since (its transaction released the group lock before this
//!    one took it); the re-check sees it. Without step 4 two claimers
//!    could hold one group: the model in `harness/tests/model.rs` finds
//!    that interleaving.
//!
//! The locks are held to the end of the claim's transaction: claim in a
//! transaction of its own (as every worker library does), or other claims
//! of the queue (limits) or group get nothing until it ends. Under
//! REPEATABLE READ or SERIALIZABLE a snapshot cannot see claims committed
//! after the transaction began, so claims of such queues raise 25000.
//!
//! Long polls: a claim that got nothing because of a limit, a busy group or
//! the limit lock held by another claim still finds due items in the queue,
//! so the waiter re-checks after 5 ms, doubling up to 500 ms
//! ([`crate::wait`]); a claim of a limited queue that claimed something
//! wakes one waiter of the queue at its commit (the next turn on the limit
//! lock); and finishing, failing, releasing or cancelling an item of a
//! grouped or limited queue wakes one waiter of the queue at commit
//! ([`freed`]).

use std::collections::HashSet;

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::claim::{self, ClaimOutcome};
use crate::error::{OrReport, Result, WorkfenceError};
use crate::grants::{self, Capability};
use crate::paused::{self, Settings};
use crate::plans::{self, params, Statement};
use crate::validate;
use crate::wait;

/// The first key of a queue's limit lock (ASCII "WFli"); the second is
/// `hashtext(queue)`, as the pause lock's ([`crate::paused`]).
pub const LIMIT_LOCK_CLASS: i32 = 0x5746_6c69;

/// `locktag_field4` of a group lock (ASCII "WG"), apart from the values 1
/// and 2 the SQL advisory lock functions use, so no `pg_advisory_lock`
/// call can take it.
pub const GROUP_LOCK_CLASS: u16 = 0x5747;

/// Whether this database's schema has flow control (0.10.0 or later: the
/// index `workfence.items_group_idx` exists). A library newer than the
/// schema (installed, `ALTER EXTENSION ... UPDATE` not yet run) claims as
/// the schema's version did. Two catalog-cache look-ups.
pub fn schema_has_flow() -> bool {
    plans::workfence_relation(c"items_group_idx") != pg_sys::InvalidOid
}

/// The form of a statement that names what 0.10.0 added (`group_key`, the
/// flow settings of `workfence.queues`) for this database's schema: `current`
/// from 0.10.0 on, `legacy` before (a library newer than the schema serves
/// the old one until `ALTER EXTENSION ... UPDATE`).
pub fn for_schema<P>(pair: &'static plans::Versioned<P>) -> &'static plans::Statement<P> {
    if schema_has_flow() {
        &pair.current
    } else {
        &pair.legacy
    }
}

/// The lock tag of the limit lock of `queue`.
fn limit_lock(queue: &str) -> pg_sys::LOCKTAG {
    crate::compat::advisory_tag(LIMIT_LOCK_CLASS, wait::queue_key(queue))
}

/// The lock tag of group `group` of `queue`. Two groups whose hashes
/// collide share a lock: a claim of one may pass the other over while it
/// is claimed (never both held: step 4 checks the group by name).
fn group_lock(queue: &str, group: &str) -> pg_sys::LOCKTAG {
    let mut tag = crate::compat::advisory_tag(wait::queue_key(queue), wait::queue_key(group));
    tag.locktag_field4 = GROUP_LOCK_CLASS;
    tag
}

/// Take `tag` exclusively to the end of the transaction if it is free; false
/// if another transaction holds it.
fn try_lock(tag: &pg_sys::LOCKTAG) -> bool {
    // SAFETY: a transaction-scoped lock of the current transaction, taken
    // without waiting.
    unsafe {
        pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    }
}

// The queue's limits and what counts against them, by the server's clock
// `$2`: concurrency, rate, the claimed items (a lapsed lease keeps its
// slot), and the items handed out in the window (`$2 - per`, `$2`].
static LIMIT_STATE: Statement<ClockParams> = Statement::new(
    r#"
SELECT q.concurrency, q.rate,
       (SELECT pg_catalog.count(*)
          FROM workfence.items AS i
         WHERE i.queue OPERATOR(pg_catalog.=) $1
           AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state),
       (SELECT pg_catalog.count(*)
          FROM pg_catalog.unnest(q.rate_log) AS t(at)
         WHERE t.at OPERATOR(pg_catalog.>) ($2 OPERATOR(pg_catalog.-) q.per))
  FROM workfence.queues AS q
 WHERE q.queue OPERATOR(pg_catalog.=) $1
"#,
);

params! {
    /// `$1` queue, `$2` the server's clock.
    struct ClockParams<'a> {
        queue: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

// Record `$3` items handed out at `$2` in the rate limit's window of queue
// `$1`, dropping the times that have left it.
static RATE_RECORD: Statement<RateParams> = Statement::new(
    r#"
UPDATE workfence.queues AS q
   SET rate_log = ARRAY(SELECT t.at
                          FROM pg_catalog.unnest(q.rate_log) AS t(at)
                         WHERE t.at OPERATOR(pg_catalog.>) ($2 OPERATOR(pg_catalog.-) q.per)
                         ORDER BY t.at)
                  OPERATOR(pg_catalog.||) pg_catalog.array_fill($2, ARRAY[$3])
 WHERE q.queue OPERATOR(pg_catalog.=) $1
   AND q.rate IS NOT NULL
"#,
);

params! {
    /// `$1` queue, `$2` the server's clock, `$3` items handed out.
    struct RateParams<'a> {
        queue: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
        items: i32 = INT4OID,
    }
}

// Step 2: the candidates of a claim of queue `$1` by the server's clock
// `$4`: up to `$2` due items (a grouped one only if its group has no item
// claimed and no pending item before it) and lapsed leases, at most `$3`
// in all, in claim order; and lapsed final attempts (to dead-letter, not
// counted). Each locked `FOR UPDATE SKIP LOCKED`. Columns: id, group_key
// (NULL for a dead letter, which frees its group and needs no lock).
static PICK: Statement<PickParams> = Statement::new(
    r#"
WITH due AS (
    SELECT i.id, i.priority, i.run_at, i.group_key
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND i.run_at OPERATOR(pg_catalog.<=) $4
       AND (i.group_key IS NULL
            OR (NOT EXISTS (SELECT FROM workfence.items AS o
                             WHERE o.queue OPERATOR(pg_catalog.=) $1
                               AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                               AND o.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state)
                AND NOT EXISTS (SELECT FROM workfence.items AS o
                                 WHERE o.queue OPERATOR(pg_catalog.=) $1
                                   AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                                   AND o.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                                   AND (o.priority, o.run_at, o.id)
                                       OPERATOR(pg_catalog.<) (i.priority, i.run_at, i.id))))
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), lapsed AS (
    SELECT i.id, i.priority, i.run_at, i.group_key
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) $4
       AND i.attempts OPERATOR(pg_catalog.<) i.max_attempts
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), exhausted AS (
    SELECT i.id
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) $4
       AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
     LIMIT $3
       FOR UPDATE SKIP LOCKED
)
(SELECT c.id, c.group_key
   FROM (SELECT * FROM due UNION ALL SELECT * FROM lapsed) AS c
  ORDER BY c.priority, c.run_at, c.id
  LIMIT $3)
UNION ALL
SELECT e.id, NULL::pg_catalog.text FROM exhausted AS e
"#,
);

params! {
    /// `$1` queue, `$2` due items at most, `$3` items at most, `$4` the
    /// server's clock.
    struct PickParams<'a> {
        queue: &'a str = TEXTOID,
        due: i32 = INT4OID,
        items: i32 = INT4OID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

// Step 4: claim the picked items `$4` of queue `$1` (this transaction holds
// their row locks, and the locks of their groups) for owner `$2` under
// lease `$3` by the server's clock `$5`, each only if it is still claimable
// and, for a grouped item, if its group has no other item claimed and (for
// a pending item) no pending item before it, in this statement's snapshot;
// a lapsed final attempt is dead-lettered. CLAIM's result columns
// ([`crate::claim`]).
static TAKE: Statement<TakeParams> = Statement::new(concat!(
    r#"
WITH picked AS (
    SELECT i.id,
           i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts AS dead,
           CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                THEN i.owner END AS lost_owner,
           CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                THEN i.epoch END AS lost_epoch,
           i.lease_until AS lost_at
      FROM workfence.items AS i
     WHERE i.id OPERATOR(pg_catalog.=) ANY ($4)
       AND i.queue OPERATOR(pg_catalog.=) $1
       AND ((i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
             AND i.run_at OPERATOR(pg_catalog.<=) $5)
         OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.lease_until OPERATOR(pg_catalog.<=) $5))
       AND (i.group_key IS NULL
            OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts)
            OR (NOT EXISTS (SELECT FROM workfence.items AS o
                             WHERE o.queue OPERATOR(pg_catalog.=) $1
                               AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                               AND o.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                               AND o.id OPERATOR(pg_catalog.<>) i.id)
                AND (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                     OR NOT EXISTS (SELECT FROM workfence.items AS o
                                     WHERE o.queue OPERATOR(pg_catalog.=) $1
                                       AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                                       AND o.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                                       AND (o.priority, o.run_at, o.id)
                                           OPERATOR(pg_catalog.<) (i.priority, i.run_at, i.id)))))
)
UPDATE workfence.items AS i"#,
    crate::claim::claim_sets!(current, "$2", "$3", "$5")
));

params! {
    /// `$1` queue, `$2` owner, `$3` lease, `$4` the picked ids, `$5` the
    /// server's clock.
    struct TakeParams<'a> {
        queue: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        ids: Vec<i64> = INT8ARRAYOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// Refuse a claim of a queue with groups or limits under REPEATABLE READ or
/// SERIALIZABLE: 25000.
pub fn needs_read_committed(queue: &str) -> Result<()> {
    // SAFETY: a plain int global of the backend.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(WorkfenceError::FlowNeedsReadCommitted {
            queue: queue.to_owned(),
        });
    }
    Ok(())
}

/// What a claim of a flow-controlled queue picks from: the queue (up to
/// `max_items` items) or the one item of a key (`work_claim_key`).
#[derive(Clone, Copy)]
pub(crate) enum Pick<'a> {
    /// `work_claim`: up to this many items.
    Queue(i32),
    /// `work_claim_key`: the item of this key.
    Key(&'a str),
}

// Step 2 for `work_claim_key`: the item of key `$2` in queue `$1` if it is
// claimable by the server's clock `$3`, locked `FOR UPDATE SKIP LOCKED`.
// Columns: id, group_key (NULL for a lapsed final attempt, a dead letter),
// whether it is pending (a claim of it needs a slot).
static PICK_KEY: Statement<PickKeyParams> = Statement::new(
    r#"
SELECT i.id,
       CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                 AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
            THEN NULL ELSE i.group_key END,
       i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
  FROM workfence.items AS i
 WHERE i.queue OPERATOR(pg_catalog.=) $1
   AND i.key OPERATOR(pg_catalog.=) $2
   AND ((i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
         AND i.run_at OPERATOR(pg_catalog.<=) $3)
     OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
         AND i.lease_until OPERATOR(pg_catalog.<=) $3))
   FOR UPDATE SKIP LOCKED
"#,
);

params! {
    /// `$1` queue, `$2` key, `$3` the server's clock.
    struct PickKeyParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// What the limits allow one claim of `queue` at `now`, reading them under
/// the limit lock: (due items at most, items at most, whether a rate limit
/// counts them), each within 0..=`max_items`.
fn allowance(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    max_items: i32,
    now: TimestampWithTimeZone,
) -> Result<(i32, i32, bool)> {
    let (concurrency, rate, claimed, recent) =
        plans::run(client, &LIMIT_STATE, ClockParams { queue, now }, |rows| {
            if rows.is_empty() {
                return Ok((None, None, 0, 0));
            }
            let row = rows.first();
            Ok((
                row.get::<i32>(1)?,
                row.get::<i32>(2)?,
                row.get::<i64>(3)?.unwrap_or(0),
                row.get::<i64>(4)?.unwrap_or(0),
            ))
        })?;
    let max = i64::from(max_items);
    let by_rate = rate.map_or(max, |r| (i64::from(r) - recent).clamp(0, max));
    let by_slots = concurrency.map_or(max, |c| (i64::from(c) - claimed).clamp(0, max));
    // In 0..=max_items, so the casts are exact.
    Ok((by_slots.min(by_rate) as i32, by_rate as i32, rate.is_some()))
}

/// The claim of a queue with groups or limits (`settings`): what `pick`
/// names, for `owner` under `lease`, by the steps of the module comment.
/// The result as [`crate::claim`]'s statements give it.
pub(crate) fn claim(
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    pick: Pick<'_>,
    settings: Settings,
) -> Result<ClaimOutcome> {
    needs_read_committed(queue)?;
    if settings.limited {
        if !try_lock(&limit_lock(queue)) {
            return Ok(ClaimOutcome::default());
        }
        // Held to the end of the transaction: a prepared one would keep it
        // until COMMIT PREPARED, and the queue's claims would get nothing.
        crate::xact::limit_lock_held(queue);
    }
    let max_items = match pick {
        Pick::Queue(n) => n,
        Pick::Key(_) => 1,
    };
    Spi::connect_mut(|client| {
        let (due, items, rate) = if settings.limited {
            // Read after the limit lock: the window's times grow with the
            // claims.
            allowance(client, queue, max_items, claim::server_clock()?)?
        } else {
            (max_items, max_items, false)
        };
        if items == 0 {
            return Ok(ClaimOutcome::default());
        }
        let now = claim::server_clock()?;
        let picked: Vec<(i64, Option<String>)> = match pick {
            Pick::Queue(_) => plans::run(
                client,
                &PICK,
                PickParams {
                    queue,
                    due,
                    items,
                    now,
                },
                |rows| {
                    let mut picked = Vec::with_capacity(rows.len());
                    for row in rows {
                        if let Some(id) = row.get::<i64>(1)? {
                            picked.push((id, row.get::<String>(2)?));
                        }
                    }
                    Ok(picked)
                },
            )?,
            Pick::Key(key) => plans::run(
                client,
                &PICK_KEY,
                PickKeyParams { queue, key, now },
                |rows| {
                    let mut picked = Vec::with_capacity(1);
                    for row in rows {
                        let pending = row.get::<bool>(3)?.unwrap_or(false);
                        if let Some(id) = row.get::<i64>(1)? {
                            // A pending item needs a free slot; a lapsed
                            // lease claimed anew keeps its own.
                            if !pending || due > 0 {
                                picked.push((id, row.get::<String>(2)?));
                            }
                        }
                    }
                    Ok(picked)
                },
            )?,
        };
        let mut groups = HashSet::new();
        let ids: Vec<i64> = picked
            .into_iter()
            .filter(|(_, group)| match group {
                None => true,
                // One item per group in a batch, and only a group whose
                // lock is free.
                Some(group) => groups.insert(group.clone()) && try_lock(&group_lock(queue, group)),
            })
            .map(|(id, _)| id)
            .collect();
        if ids.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        // The claim's time (`claimed_at`, the lease's start, the rate
        // window's entry) is read after the slots were counted and the
        // groups locked: whatever freed a slot or a group committed
        // before it. An item picked at the earlier time is claimable at
        // this one too.
        let now = claim::server_clock()?;
        let outcome = plans::run(
            client,
            &TAKE,
            TakeParams {
                queue,
                owner,
                lease,
                ids,
                now,
            },
            |rows| claim::read_claim_result(queue, rows),
        )?;
        if settings.limited && !outcome.claimed.is_empty() {
            // Claims of a limited queue take turns on its limit lock, which
            // this claim holds to its commit; a claim that found it held
            // went back to waiting. Pass the turn on: one long poll of the
            // queue is woken at this commit and claims next, if the limits
            // still allow (a relay, instead of every waiter polling: 16
            // long-polling workers under a concurrency limit of 100 took
            // 103 items/s polling, docs/flow-control.md).
            wait::wake_after_commit(queue, 1);
        }
        if rate && !outcome.claimed.is_empty() {
            plans::run(
                client,
                &RATE_RECORD,
                RateParams {
                    queue,
                    now,
                    // At most max_items (1000).
                    items: outcome.claimed.len() as i32,
                },
                |_| Ok(()),
            )?;
        }
        Ok(outcome)
    })
}

/// After an item of `queue` left state claimed for good or for now
/// (finished, failed, released, cancelled): if the queue has groups or
/// limits, a group or a slot may have freed, so one claimer long-polling
/// the queue is woken at commit. Reads this backend's settings of the queue
/// (no lock: a wake-up missed here is caught by the waiter's own re-check).
pub fn freed(queue: &str) -> Result<()> {
    let settings = paused::settings_unlocked(queue)?;
    if settings.grouped || settings.limited {
        wait::wake_after_commit(queue, 1);
    }
    Ok(())
}

// Mark queue `$1` as having groups (its first grouped enqueue).
static MARK_GROUPED: Statement<QueueOnly> = Statement::new(
    r#"
INSERT INTO workfence.queues AS q (queue, grouped) VALUES ($1, true)
    ON CONFLICT (queue) DO UPDATE SET grouped = true WHERE NOT q.grouped
RETURNING q.queue
"#,
);

params! {
    /// `$1` queue.
    struct QueueOnly<'a> {
        queue: &'a str = TEXTOID,
    }
}

/// Before a grouped item is enqueued in `queue`: unless this backend knows
/// the queue has groups, remember to mark it when the transaction commits
/// ([`mark_grouped_at_commit`]), so that from the enqueue's commit on every
/// claim of the queue keeps its groups serial. Until then the item is seen
/// by this transaction alone, whose own claims read the queue as grouped
/// ([`crate::xact::grouped_pending`]). Nothing is locked or written before
/// the commit: until 0.11.0 the mark took the queue's pause lock and its
/// settings row at once, and a producer that left such a transaction open
/// (or idle) stopped every claim and operator call of the queue (issue 30).
pub fn enqueue_grouped(queue: &str) -> Result<()> {
    if paused::settings_unlocked(queue)?.grouped {
        return Ok(());
    }
    crate::xact::mark_grouped_at_commit(queue);
    Ok(())
}

/// At the commit of a transaction that enqueued `queue`'s first grouped
/// item: mark the queue grouped under its pause lock, with the invalidation
/// a pause sends (see [`crate::paused`]), both held or sent only for the
/// moment of the commit. Runs as the extension's owner, with an active
/// snapshot ([`crate::xact`]).
pub fn mark_grouped(queue: &str) -> Result<()> {
    paused::changing(queue);
    let marked = Spi::connect_mut(|client| {
        plans::run(client, &MARK_GROUPED, QueueOnly { queue }, |rows| {
            Ok(!rows.is_empty())
        })
    })?;
    if marked {
        paused::changed();
    }
    Ok(())
}

// Set queue `$1`'s limits: `$2` concurrency, `$3` rate, `$4` per (NULL
// without a rate). The window's claims are kept (a new rate counts them).
static LIMIT: Statement<LimitParams> = Statement::new(
    r#"
INSERT INTO workfence.queues AS q (queue, concurrency, rate, per) VALUES ($1, $2, $3, $4)
    ON CONFLICT (queue) DO UPDATE
   SET concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate, per = EXCLUDED.per,
       rate_log = CASE WHEN EXCLUDED.rate IS NULL THEN NULL ELSE q.rate_log END
"#,
);

params! {
    /// `$1` queue, `$2` concurrency, `$3` rate, `$4` per.
    struct LimitParams<'a> {
        queue: &'a str = TEXTOID,
        concurrency: Option<i32> = INT4OID,
        rate: Option<i32> = INT4OID,
        per: Option<Interval> = INTERVALOID,
    }
}

/// Limit how much of `queue` is claimed: at most `concurrency` items
/// claimed at once, at most `rate` items handed out per `per`.
///
/// SQL: `workfence.work_limit(queue text, concurrency int DEFAULT NULL, rate
/// int DEFAULT NULL, per interval DEFAULT '1 second') RETURNS void`. NULL
/// lifts a limit; `work_limit(queue)` lifts both. Every session sees the
/// limits from its next claim after the commit; every claimer long-polling
/// the queue is woken then. The limits are shown in `work_queue_stats`.
///
/// - `concurrency` (1 to 10,000): claims hand out an item only while fewer
///   than `concurrency` items of the queue are claimed. A lapsed lease keeps
///   its slot until a claim takes the item anew (in that slot) or
///   dead-letters it. Lowering the limit below what is claimed takes nothing
///   back: claims wait until enough items are finished.
/// - `rate` (1 to 10,000) per `per` (more than 0, at most 1 day): at most
///   `rate` items handed out in any window of length `per` (a sliding window
///   by the server's clock; a lapsed lease claimed anew counts).
///
/// Claimers never wait on each other: a claim that would exceed a limit
/// returns fewer rows or none, and a claim that finds another transaction
/// claiming from the queue at that moment returns none (a long poll
/// re-checks within milliseconds). Claims of a limited queue hold its limit
/// lock to the end of their transaction: claim in a transaction of its own.
/// (Oban's and River's queue limits are the model.)
///
/// Errors: 22004 for a NULL queue or per; 22023 for a bad queue (see
/// `work_enqueue`), a concurrency or rate outside 1..10000, a per not in
/// (0, 1 day]; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no operate grant covering the queue
/// (see `crate::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn work_limit(
    queue: Option<String>,
    concurrency: default!(Option<i32>, "NULL"),
    rate: default!(Option<i32>, "NULL"),
    per: default!(Option<Interval>, "'1 second'"),
) {
    (|| {
        let queue = validate::queue(queue)?;
        let concurrency = validate::limit("concurrency", concurrency)?;
        let rate = validate::limit("rate", rate)?;
        validate::per(per.map(Into::into))?;
        grants::check(Capability::Operate, &queue)?;
        paused::changing(&queue);
        Spi::connect_mut(|client| {
            plans::run(
                client,
                &LIMIT,
                LimitParams {
                    queue: &queue,
                    concurrency,
                    rate,
                    per: rate.and(per),
                },
                |_| Ok(()),
            )
        })?;
        paused::changed();
        wait::wake_after_commit(&queue, u32::MAX);
        Ok(())
    })()
    .or_report()
}
