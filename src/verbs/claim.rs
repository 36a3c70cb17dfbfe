//! `work_claim` and `work_claim_key`: take items under a fresh lease.
//!
//! A claim takes items that are pending and due, or claimed under a lease that
//! has lapsed (server time), locks them with `FOR UPDATE SKIP LOCKED` so that
//! concurrent claimers neither wait on each other nor get the same item, and
//! gives each a fresh epoch from `workfence.epoch_seq` in the same statement.

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::counters::{self, Event, ItemState};
use crate::backend::paused;
use crate::backend::wait;
use crate::base::error::{OrReport, Result};
use crate::pg::jsonb::RawJsonb;
use crate::pg::plans::{self, params, Statement};
use crate::store::sql::claim_sets;
use crate::store::sql::server_clock;
pub(crate) use crate::store::take::{read_claim_result, ready, ClaimOutcome, ClaimedRow};
use crate::verbs::flow;
use crate::verbs::generation;
use crate::verbs::lapse;

/// The claim statement for schema `$mode`; see [`CLAIM`].
macro_rules! claim_sql {
    ($mode:ident) => {
        concat!(
            r#"
WITH due AS (
    SELECT i.id, i.priority, i.run_at,
           NULL::pg_catalog.text AS lost_owner, NULL::pg_catalog.int8 AS lost_epoch,
           NULL::pg_catalog.timestamptz AS lost_at
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND i.run_at OPERATOR(pg_catalog.<=) $5
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), lapsed AS (
    SELECT i.id, i.priority, i.run_at, i.owner, i.epoch, i.lease_until
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) $5
       AND i.attempts OPERATOR(pg_catalog.<) i.max_attempts
     ORDER BY i.priority, i.run_at, i.id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), exhausted AS (
    SELECT i.id, i.owner, i.epoch, i.lease_until
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.lease_until OPERATOR(pg_catalog.<=) $5
       AND i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT c.id, false AS dead, c.lost_owner, c.lost_epoch, c.lost_at
       FROM (SELECT * FROM due UNION ALL SELECT * FROM lapsed) AS c
      ORDER BY c.priority, c.run_at, c.id
      LIMIT $4)
    UNION ALL
    SELECT e.id, true, e.owner, e.epoch, e.lease_until FROM exhausted AS e
)
UPDATE workfence.items AS i"#,
            claim_sets!($mode, "$2", "$3", "$5")
        )
    };
}

// Claim up to `$4` items of queue `$1` for owner `$2` under lease `$3`, by
// the server's clock `$5` (read by the caller just before: every item of a
// batch gets the same `claimed_at`, and the statement carries no clock
// sub-plans to start). The pause is checked before the statement
// ([`paused::is_paused`]).
//
// - Two claim paths, each walking its own partial index in order: pending
//   and due (items_due_idx), and claimed with a lapsed lease
//   (items_lease_idx). One OR over both would use neither index. A lapsed
//   lease carries its superseded token (owner, epoch, lease_until) along,
//   for `errors` and `work_lease_lost` ([`crate::verbs::lapse`]).
// - Lapsed final attempts (`exhausted`) are dead-lettered by the same
//   UPDATE, without taking one of the `$4` slots.
//
// One row per item the statement changed, in no particular order (the
// caller sorts the claimed rows by priority, run_at, id: a sort node would
// cost every claim its start-up): column 10 (`dead`) false for a claimed
// item, whose columns 7-9 carry the superseded token when it was a lapsed
// lease claimed anew; true for a dead letter, 7-9 its superseded token.
static CLAIM: plans::Claiming<ClaimParams> = plans::Claiming {
    life: Statement::new(claim_sql!(life)),
    older: plans::Versioned {
        current: Statement::new(claim_sql!(current)),
        legacy: Statement::new(claim_sql!(legacy)),
    },
};

params! {
    /// `$1` queue, `$2` owner, `$3` lease, `$4` max_items, `$5` the server's clock.
    struct ClaimParams<'a> {
        queue: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        max_items: i32 = INT4OID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// The claim statement of the common case, for schema `$mode`; see
/// [`CLAIM_DUE`].
macro_rules! claim_due_sql {
    ($mode:ident, $pick:literal, $limit:literal, $close:literal) => {
        concat!(
            r#"
UPDATE workfence.items AS i
   SET state = 'claimed'::workfence.item_state,
       epoch = pg_catalog.nextval('workfence.epoch_seq'::pg_catalog.regclass),
       owner = $2,
       attempts = i.attempts OPERATOR(pg_catalog.+) 1,"#,
            plans::by_schema!(
                $mode,
                concat!(
                    "\n       claimed_at = $5,",
                    "\n       lease_until = LEAST($5 OPERATOR(pg_catalog.+) $3, ",
                    "$5 OPERATOR(pg_catalog.+) i.max_run)"
                ),
                "\n       lease_until = $5 OPERATOR(pg_catalog.+) $3"
            ),
            r#"
 WHERE i.ctid OPERATOR(pg_catalog.=) "#,
            $pick,
            r#"
    SELECT d.ctid
      FROM workfence.items AS d
     WHERE d.queue OPERATOR(pg_catalog.=) $1
       AND d.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND d.run_at OPERATOR(pg_catalog.<=) $5
     ORDER BY d.priority, d.run_at, d.id
     LIMIT "#,
            $limit,
            r#"
       FOR UPDATE SKIP LOCKED"#,
            $close,
            r#"
RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until,
          NULL::pg_catalog.text, NULL::pg_catalog.int8, NULL::pg_catalog.timestamptz,
          false, i.priority, i.run_at"#,
            plans::life_only!($mode, ", i.trace"),
            "\n"
        )
    };
}

// The claim of a queue in which no lease has lapsed (by the server's clock
// `$5`; [`LAPSED`] tells): pending and due items only, with CLAIM's
// parameters and result columns (7-9 NULL, `dead` false). Same claim order
// and the same `SKIP LOCKED` as CLAIM; the picked rows reach the UPDATE as
// an array of their ctids, which only a TID scan reads, whatever the
// generic plan estimates on a table with statistics (joined with the
// picked rows by id, a small table got a hash join over all of it); for
// one item, see CLAIM_ONE. A ctid is
// stable here: the subquery holds the row's lock (so no one else updates,
// deletes or moves it) and follows a concurrent update to the newest
// version before locking it; without CLAIM's two other branches
// (lapsed leases, lapsed final attempts), whose plan nodes every claim
// would otherwise start and end: their start-up was the largest part of
// what a claim cost beyond the hand-written statement (callgrind,
// docs/benchmarks.md, "What was changed").
static CLAIM_DUE: plans::Claiming<ClaimParams> = plans::Claiming {
    life: Statement::new(claim_due_sql!(life, "ANY (ARRAY(", "$4", "))")),
    older: plans::Versioned {
        current: Statement::new(claim_due_sql!(current, "ANY (ARRAY(", "$4", "))")),
        legacy: Statement::new(claim_due_sql!(legacy, "ANY (ARRAY(", "$4", "))")),
    },
};

// CLAIM_DUE for one item (`max_items` 1, `$4` unused): the picked row's
// ctid as a scalar subquery, which the planner reads with a TID scan even
// on a table it has no statistics for (a fresh install's first minute):
// there, `ctid = ANY (...)` of an array it guesses at ten elements costs
// more than the ten pages it guesses the table has, and a generic plan with
// a sequential scan would be kept until autovacuum's first ANALYZE. A batch
// claim takes that risk for its first minute (measured: the one-item claim
// is what the sustained-load benchmark's workers do).
static CLAIM_ONE: plans::Claiming<ClaimParams> = plans::Claiming {
    life: Statement::new(claim_due_sql!(life, "(", "1", ")")),
    older: plans::Versioned {
        current: Statement::new(claim_due_sql!(current, "(", "1", ")")),
        legacy: Statement::new(claim_due_sql!(legacy, "(", "1", ")")),
    },
};

/// The claim statement of one key for schema `$mode`; see [`CLAIM_KEY`].
macro_rules! claim_key_sql {
    ($mode:ident) => {
        concat!(
            r#"
WITH picked AS (
    SELECT i.id,
           i.attempts OPERATOR(pg_catalog.>=) i.max_attempts
             AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state AS dead,
           CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                THEN i.owner END AS lost_owner,
           CASE WHEN i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                THEN i.epoch END AS lost_epoch,
           i.lease_until AS lost_at
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.key OPERATOR(pg_catalog.=) $2
       AND ((i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
             AND i.run_at OPERATOR(pg_catalog.<=) $5)
         OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
             AND i.lease_until OPERATOR(pg_catalog.<=) $5))
       FOR UPDATE SKIP LOCKED
)
UPDATE workfence.items AS i"#,
            claim_sets!($mode, "$3", "$4", "$5")
        )
    };
}

// Claim item `$2` of queue `$1`, if claimable, for owner `$3` under lease
// `$4` by the server's clock `$5` (a fresh epoch, as CLAIM gives); a lapsed
// final attempt is dead-lettered instead. The result has CLAIM's columns.
static CLAIM_KEY: plans::Claiming<ClaimKeyParams> = plans::Claiming {
    life: Statement::new(claim_key_sql!(life)),
    older: plans::Versioned {
        current: Statement::new(claim_key_sql!(current)),
        legacy: Statement::new(claim_key_sql!(legacy)),
    },
};

params! {
    /// `$1` queue, `$2` key, `$3` owner, `$4` lease, `$5` the server's clock.
    struct ClaimKeyParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// After a claim statement of `queue`: count what it claimed (and how long
/// each item waited since it fell due) in the queue's counters at commit
/// ([`counters::claimed_after`]), and settle the tokens it superseded
/// ([`crate::verbs::lapse::settle`]: `errors`, `work_lease_lost`, the `lapsed`
/// and `failed` counters). True if the statement changed anything at all.
fn settle(queue: &str, outcome: &ClaimOutcome) -> Result<bool> {
    if counters::enabled() {
        for waited in &outcome.waited {
            match waited {
                Some(micros) => counters::claimed_after(queue, *micros),
                None => counters::count(queue, Event::Claimed, 1),
            }
        }
        // Lapsed leases claimed anew stay claimed.
        let anew = outcome.lost.iter().filter(|t| !t.dead_lettered).count();
        let from_pending = outcome.claimed.len().saturating_sub(anew);
        counters::moved(
            queue,
            Some(ItemState::Pending),
            Some(ItemState::Claimed),
            from_pending as i64,
        );
    }
    if !outcome.lost.is_empty() {
        Spi::connect_mut(|client| lapse::settle(client, &outcome.lost))?;
    }
    Ok(!outcome.claimed.is_empty() || !outcome.lost.is_empty())
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
/// reached (server time); from 0.10.0 also within the item's group and its
/// queue's limits ([`crate::verbs::flow`]: a batch takes at most one item per
/// group). Order: priority, run_at, id. Each returned item has
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
/// gets something, or zero rows once `wait` has passed (see [`crate::backend::wait`]).
/// `statement_timeout` and `pg_cancel_backend` end the wait with 57014.
///
/// Errors: 22004 for a NULL argument; 22023 for a bad queue or owner (see
/// `work_enqueue`; owner blank, > 256 bytes or with control characters), a
/// lease not in (0, 7 days], `max_items` outside 1..1000, `wait` not in
/// [0, 1 hour]; 25000 for `wait` > 0 under REPEATABLE READ or SERIALIZABLE,
/// or for a queue with groups or limits claimed under them (from 0.10.0);
/// 25006 on a hot standby (before anything else: claim on the primary);
/// 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no claim grant covering the queue
/// (see `crate::access::grants`), checked again at every attempt of a
/// waiting claim; 57014 when cancelled while waiting.
///
/// From 0.12.0 each row ends with `progress`: the item's checkpoint, the
/// last `work_progress` an earlier run stored under its lease (NULL on a
/// first attempt), so a retried run resumes from it
/// ([`crate::verbs::life::with_progress`]); and `trace`: the W3C
/// `traceparent` `work_enqueue` stored with the item (NULL: none), for the
/// worker's span to link to the request that enqueued it.
#[pg_extern(
    name = "work_claim",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::type_complexity)]
pub fn work_claim_progress(
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
        name!(progress, Option<RawJsonb>),
        name!(trace, Option<String>),
    ),
> {
    (|| {
        let wait = validate::wait(wait.map(Into::into))?;
        claim(queue, owner, lease, max_items, wait).and_then(crate::verbs::life::with_progress)
    })()
    .map(|rows| TableIterator::new(rows.into_iter().map(flatten)))
    .or_report()
}

/// A claim row of the claim functions of 0.12.0: the columns of
/// [`ClaimedRow`] but its trace, then `progress`, then `trace`.
type ClaimRowWithProgress = (
    i64,
    String,
    RawJsonb,
    i64,
    i32,
    TimestampWithTimeZone,
    Option<RawJsonb>,
    Option<String>,
);

/// A claimed row and its checkpoint as one result row.
fn flatten(
    ((id, key, payload, epoch, attempt, lease_until, trace), progress): crate::verbs::life::ClaimedWithProgress,
) -> ClaimRowWithProgress {
    (
        id,
        key,
        payload,
        epoch,
        attempt,
        lease_until,
        progress,
        trace,
    )
}

/// A claim row of the claim functions before 0.12.0: no checkpoint, no
/// trace.
type OlderClaimRow = (i64, String, RawJsonb, i64, i32, TimestampWithTimeZone);

/// The claimed rows as the claim functions before 0.12.0 return them.
fn older(rows: Vec<ClaimedRow>) -> Vec<OlderClaimRow> {
    rows.into_iter()
        .map(|(id, key, payload, epoch, attempt, lease_until, _)| {
            (id, key, payload, epoch, attempt, lease_until)
        })
        .collect()
}

/// The 5-argument `work_claim` of versions 0.2.0 to 0.11.0 (rows without
/// `progress`), kept as the C symbol `work_claim_wait_wrapper` that their
/// install scripts bind, so that a database not yet updated keeps working
/// with this library, and a call that resolved the old function before
/// `ALTER EXTENSION pg_workfence UPDATE` renamed it
/// (`work_claim_retired_0_11_0`) still runs. Not part of this version's
/// SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
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
        claim(queue, owner, lease, max_items, wait).map(older)
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
        .map(older)
        .map(TableIterator::new)
        .or_report()
}

/// The body of `work_claim`, also the second half of the fused calls
/// ([`crate::verbs::cycle`]): validate, check the standby and the grants, then claim
/// (waiting up to `wait`).
pub(crate) fn claim(
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
    generation::refuse_on_standby("work_claim")?;
    grants::check(Capability::Claim, &queue)?;
    let waiting = !wait.is_zero();
    // Read before the long poll's attempts, each a subtransaction (in
    // which every call is "in a transaction block").
    let may_fire = crate::verbs::schedule::claim_may_fire();
    wait::until_claimed(&queue, wait, || {
        claim_once(&queue, &owner, lease, max_items, waiting, may_fire)
    })
}

/// Take the claim's strongest lock on `workfence.items`, ROW EXCLUSIVE (for
/// its UPDATE), before the statement, whose executor would take ROW SHARE
/// (for `FOR UPDATE`) first and then upgrade.
///
/// Why: an `ALTER EXTENSION ... UPDATE` through several scripts can hold a
/// lock between the two (SHARE ROW EXCLUSIVE, from a `CREATE TRIGGER`) and
/// then ask for ACCESS EXCLUSIVE (an `ALTER TABLE` of a later script). A
/// claim holding ROW SHARE and waiting for ROW EXCLUSIVE then deadlocks
/// with it (measured: 3 calls failed with 40P01 in a round of the upgrade
/// test from 0.3.0); holding ROW EXCLUSIVE first, the claim waits holding
/// nothing and goes on after the update commits. A waiting claim
/// (`conditional`) holds an ACCESS SHARE lock on the table for its whole
/// wait, so it must not wait here at all: it takes the lock only if it is
/// free at once and otherwise reports `false` (this attempt is skipped;
/// the long poll tries again, or gives way to the update, see
/// [`crate::backend::wait`]).
fn lock_items(conditional: bool) -> bool {
    let items = plans::workfence_relation(c"items");
    if items == pg_sys::InvalidOid {
        return true;
    }
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a relation lock of the current transaction on a relation
    // looked up in it; released at the transaction's (or the waiting
    // attempt's subtransaction's) end, as the statement's own would be.
    unsafe {
        if conditional {
            pg_sys::ConditionalLockRelationOid(items, mode)
        } else {
            pg_sys::LockRelationOid(items, mode);
            true
        }
    }
}

/// One claim statement: the rows claimed, and whether the statement changed
/// anything at all (claimed, or dead-lettered a lapsed final attempt).
fn claim_once(
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    max_items: i32,
    waiting: bool,
    may_fire: bool,
) -> Result<(Vec<ClaimedRow>, bool)> {
    // No fire yet in this attempt (a flag left by an earlier claim of this
    // backend must not end this one's wait).
    crate::backend::schedules::set_fired(false);
    if waiting {
        // A revoke that commits while the claim waits ends it at its next
        // attempt (the first was checked by `claim`).
        grants::check(Capability::Claim, queue)?;
    }
    if !lock_items(waiting) {
        return Ok((Vec::new(), false));
    }
    let settings = paused::settings(queue)?;
    if settings.paused {
        return Ok((Vec::new(), false));
    }
    generation::refuse_read_only(c"work_claim");
    generation::ensure()?;
    // A due slot of the queue's schedules, fired here when nothing else
    // did (crate::verbs::schedule): its item is claimable below.
    let fired = may_fire && crate::verbs::schedule::fire_for_claim(queue)?;
    crate::backend::schedules::set_fired(fired);
    if settings.grouped || settings.limited {
        let outcome = flow::claim(queue, owner, lease, flow::Pick::Queue(max_items), settings)?;
        let changed = settle(queue, &outcome)? || fired;
        return Ok((durable(outcome.claimed), changed));
    }
    let now = server_clock()?;
    let outcome = Spi::connect_mut(|client| {
        let (lapsed, due) = ready(client, queue, now)?;
        if !lapsed && !due {
            return Ok(ClaimOutcome::default());
        }
        plans::run(
            client,
            match (lapsed, max_items) {
                (true, _) => CLAIM.get(),
                (false, 1) => CLAIM_ONE.get(),
                (false, _) => CLAIM_DUE.get(),
            },
            ClaimParams {
                queue,
                owner,
                lease,
                max_items,
                now,
            },
            |rows| read_claim_result(queue, rows),
        )
    })?;
    let changed = settle(queue, &outcome)? || fired;
    Ok((durable(outcome.claimed), changed))
}

/// Claim the one item of `queue` named `key`, if it is claimable.
///
/// SQL: `workfence.work_claim_key(queue text, key text, owner text, lease
/// interval) RETURNS TABLE (id, key, payload, epoch, attempt, lease_until)`,
/// zero or one row: the item for a scheduled firing or a singleton job. The
/// rules are `work_claim`'s: zero rows when the item is missing, not yet due,
/// held under a live lease, finished, or locked by a concurrent claim.
///
/// From 0.10.0 the item's group and its queue's limits apply as in
/// `work_claim` ([`crate::verbs::flow`]).
///
/// Errors: 22004 for a NULL argument; 22023 for a bad queue, key, owner or
/// lease; 25000 for a queue with groups or limits under REPEATABLE READ or
/// SERIALIZABLE; 25006 on a hot standby; 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no claim grant covering the queue
/// (see `crate::access::grants`).
///
/// From 0.12.0 the row ends with `progress` and `trace`, as `work_claim`'s.
#[pg_extern(
    name = "work_claim_key",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
#[allow(clippy::type_complexity)]
pub fn work_claim_key_progress(
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
        name!(progress, Option<RawJsonb>),
        name!(trace, Option<String>),
    ),
> {
    claim_key(queue, key, owner, lease)
        .and_then(crate::verbs::life::with_progress)
        .map(|rows| TableIterator::new(rows.into_iter().map(flatten)))
        .or_report()
}

/// `work_claim_key` of versions 0.3.0 to 0.11.0 (a row without
/// `progress`), kept as the C symbol `work_claim_key_wrapper` that their
/// install scripts bind (see [`work_claim_wait`]); renamed
/// `work_claim_key_retired_0_11_0` by the update. Not part of this
/// version's SQL.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
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
        .map(older)
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
    generation::refuse_on_standby("work_claim_key")?;
    grants::check(Capability::Claim, &queue)?;
    lock_items(false);
    let settings = paused::settings(&queue)?;
    if settings.paused {
        return Ok(Vec::new());
    }
    generation::refuse_read_only(c"work_claim_key");
    generation::ensure()?;
    if settings.grouped || settings.limited {
        let outcome = flow::claim(&queue, &owner, lease, flow::Pick::Key(&key), settings)?;
        settle(&queue, &outcome)?;
        return Ok(durable(outcome.claimed));
    }
    let now = server_clock()?;
    let outcome = Spi::connect_mut(|client| {
        plans::run(
            client,
            CLAIM_KEY.get(),
            ClaimKeyParams {
                queue: &queue,
                key: &key,
                owner: &owner,
                lease,
                now,
            },
            |rows| read_claim_result(&queue, rows),
        )
    })?;
    settle(&queue, &outcome)?;
    Ok(durable(outcome.claimed))
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
