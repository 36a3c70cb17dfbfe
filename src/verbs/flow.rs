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
//! **Per-group limits (from 0.12.0, issue 33).** `work_limit(queue, ...,
//! per_group => n)` lets up to `n` items of one group be claimed at once
//! (NULL is 1, the serial groups above; "at most 3 jobs per customer at
//! once" is a group per customer and `per_group => 3`). The rule above
//! becomes: a claim takes a grouped item only when fewer than `n` items of
//! its group are claimed and no pending item of the group comes before it.
//!
//! **Group heads (from 0.12.0, issue 33).** Until 0.11.0 a claim walked the
//! queue's due items in claim order and asked of each grouped one whether
//! its group was busy: a group of 20,000 pending items whose first was
//! claimed cost every other claim 20,000 probes (0.3-4 items/s). Now a
//! group has one item in line at a time, its *head*: a pending item of a
//! group is `behind` (`items.behind`) when it is known that a pending item
//! of its group comes before it, and claims walk `items_head_idx`, which
//! holds the pending items that are not behind (items in no group, and
//! each group's head). **Invariant**: in every committed state, a group's
//! first pending item in claim order is not behind, unless a transaction
//! holding the group's lock will make it so before it commits. Items that
//! are not first and not behind (*stale heads*) are allowed: a claim passes
//! them over (the group rule), and the claim that next serves the group
//! makes them behind. So a claim reads each busy group's head and no more.
//! Who writes `behind` (every writer of a group's order holds the group
//! lock, except those that only add heads):
//! - An enqueue marks its item behind if a pending item of its group comes
//!   before it (or ties) in its snapshot. That snapshot may be stale at the
//!   commit (a claim of the group may have taken that item since, not
//!   seeing this one, uncommitted), so at its commit the transaction tries
//!   each such group's lock without waiting, holds it through the commit,
//!   and in a snapshot taken after that makes every such item that nothing
//!   pending precedes any more a head ([`crate::backend::xact`]); for a group whose
//!   lock a claim in flight holds (which may not see the items) it makes
//!   them all heads, stale ones at worst. A claim that runs after the
//!   commit holds the lock after it, and sees the items.
//! - A claim that served groups (it holds their locks) runs [`NORMALIZE`]
//!   in a new snapshot: each group's first pending item becomes its head,
//!   with `turn` = the claim's time, and the group's stale heads behind.
//! - A cancel or reschedule of a grouped item waits for the group's lock
//!   and runs [`NORMALIZE`] after it ([`regroup`]).
//! - A release, a failure with a retry and `work_retry` put an item back
//!   to pending as a head (it was claimed, so not behind; a cancel leaves a
//!   cancelled item not behind): a stale head at worst, never a lost one.
//!
//! [`NORMALIZE`] waits for a row lock only to make a behind item its group's
//! head: a claim's pick holds such a row only when the row became behind
//! after the pick's snapshot (READ COMMITTED locks a row's newest version,
//! then re-checks it and passes it over, keeping the lock), which a claim
//! that serves the group must then wait out; every other row it skips when
//! locked. Two such waits can cross between two claims only in that rare
//! case, and PostgreSQL's deadlock detection then ends one claim (40P01).
//! Cancel and reschedule of a grouped item refuse REPEATABLE READ and
//! SERIALIZABLE (25000): their snapshot could predate the group's changes.
//! The model in `harness/tests/client/model.rs` checks this design, and finds the
//! stranded group of a `NORMALIZE` that skipped a locked behind row, and of
//! a cancel in a REPEATABLE READ snapshot.
//!
//! **Round-robin.** Claims serve the heads in (priority, `turn` else
//! `run_at`, id) order. `turn` is set when a claim serving the group makes
//! an item its head: the claim's time (or the item's `run_at`, if later).
//! So a group just served queues its next head behind every head that was
//! waiting, as in a round-robin over the groups, and a group with a long
//! backlog has one item in line at a time, whatever its size: "a group of
//! 10,000 items beside 100 groups of 10" serves the small groups' first
//! items within the first 101 claims. (Hatchet's round-robin concurrency
//! keys and pg-boss's group concurrency are the references; the order here
//! is by time, not weighted.)
//!
//! **Limits.** `work_limit(queue, concurrency, rate, per)`: at most
//! `concurrency` items of the queue claimed at once (a lapsed lease keeps
//! its slot until the item is claimed anew, inside that slot, or finished),
//! and at most `rate` items handed out by claims in any window of length
//! `per` (a sliding window). Both hold across all workers and connections,
//! as seen by the server's clock.
//!
//! **Slot rows (from 0.12.0, issue 33).** Until 0.11.0 a limited queue's
//! claims took turns on one advisory lock held to each claim's commit:
//! 0.10-0.19x an unlimited queue's items/s whatever the limit, and a claim
//! inside a long transaction stopped the queue. Now each limit is a set of
//! slots, which claims take without waiting, passing over the ones other
//! claims hold, as they take items `SKIP LOCKED` (Solid Queue keeps its
//! concurrency semaphores in rows, one per key with a count; here one lock
//! per slot, so that claims skip each other's slots instead of waiting on
//! one):
//! - **Concurrency**: slots `1..concurrency` (rows `('c', n)` of
//!   `workfence.queue_slots` list them, and are never written while the
//!   limit stands). A claim takes a slot's *lock* (class
//!   [`SLOT_LOCK_CLASS`], keys the queue's hash and the number) without
//!   waiting and holds it to its transaction's end, and the item it claims
//!   records the slot it took (`items.slot`, in the claim's own update of
//!   the item). Until issue 33's last step the lock was the slot row's
//!   `FOR UPDATE`: a heap write and WAL record per claim, and a statement
//!   of its own before the claim's: pgbench claim -> finish, 16 clients on
//!   2 cores, `concurrency => 100` over an unlimited queue in the same run,
//!   0.60-0.63x then, 0.80-0.87x with locks in the lock manager and
//!   [`CLAIM_IN_SLOT`] (docs/benchmarks.md). A slot is *free* when no claimed item of the
//!   queue holds it; finishing, failing, releasing, cancelling or
//!   dead-lettering the item frees it with no write beyond the item's own.
//!   **Invariant**: no two claimed items of the queue hold one slot, and
//!   every item a limited claim took holds one from its claim until it
//!   leaves state `claimed` (a lapsed lease claimed anew keeps its slot).
//!   So a claim that takes only free slots at or below the limit, while no
//!   claimed item holds a slot above it, keeps `claimed <= concurrency`.
//!   (A first design wrote the item into the slot's row at each claim: the
//!   queue's 100 slot rows then took 12 pages and 1,212 dead versions
//!   after 20,000 claims, which every claim read.)
//! - **Rate**: slots `('r', 1..rate)`, each with the time of the claim that
//!   last used it (`used_at`). Free when that is older than `per`; every
//!   item handed out, a lapsed lease's new claim included, uses one and
//!   sets `used_at` to the claim's time (its items' `claimed_at`). A slot is
//!   used at most once per window, so no window holds more than `rate`
//!   claims; and a window holding fewer leaves a slot free: exactly the
//!   sliding window of 0.10.0, in `rate` rows of fixed size written in
//!   place, where 0.10.0 rewrote an array of up to `rate` times per claim.
//!
//! **How a claim keeps them** (statements below). A queue's claims take
//! this path only when its settings say it has groups or limits
//! ([`crate::backend::paused::Settings`]); every other queue runs the plain
//! statements of [`crate::verbs::claim`], unchanged. Every flow claim first asks
//! whether anything is due or lapsed (`take::ready`, one index probe
//! each) and stops if not, so that nothing is walked for nothing.
//! 0. The queue's *slots lock* (slot number 0 of [`SLOT_LOCK_CLASS`]) in
//!    share mode, without waiting, held to the end if the claim gives a
//!    slot: `work_limit` takes it exclusively, so it waits for the claims
//!    in flight that gave slots and none starts until it commits (a claim
//!    that finds it taken hands out nothing). Every slot lock a claim call
//!    took and gave no item, and the slots lock if it gave none, are
//!    released when the call ends ([`SlotLocks`]): a claim left open holds
//!    the slots of its items and nothing else.
//! 1. Slots ([`LOCK_SLOTS`]): up to as many free slots of each kind as the
//!    claim wants: rate slot rows `FOR UPDATE SKIP LOCKED`, concurrency
//!    slots' locks tried in turn ([`lock_slots`]): a slot another claim
//!    holds (in flight, or claimed and not yet committed) is passed over,
//!    never waited for.
//! 2. The re-check ([`VERIFY_SLOTS`], or inside [`FAST_TAKE`] or
//!    [`CLAIM_IN_SLOT`]): a new statement, so a snapshot taken after step
//!    1's locks were granted,
//!    keeps the concurrency slots that are free in it. Step 1 alone cannot
//!    tell: a claim that took an item into one of those slots and committed
//!    (releasing the slot) after step 1's snapshot was taken left the slot
//!    free in that snapshot. Every claim that held the slot before has
//!    committed or aborted by the time the lock is granted, so the new
//!    snapshot sees its item. (Rate slots need no second look: `used_at` is
//!    in the slot's own row, which the re-check of the lock reads in its
//!    newest version.)
//! 3. The pick ([`PICK`]): due items that are not behind (for a grouped
//!    item: its group has fewer than `per_group` items claimed and no
//!    pending item before it, in this snapshot) and lapsed leases, in
//!    serving order, locked `FOR UPDATE SKIP LOCKED`; at most one pending
//!    item per free concurrency slot, one item per rate slot.
//! 4. Groups: for each picked grouped item, the group's *group lock*
//!    (class [`GROUP_LOCK_CLASS`], keys the hashes of queue and group),
//!    taken without waiting; a group whose lock is held (another claim of it
//!    in flight) is passed over. Then the claim ([`TAKE`]): a new statement,
//!    so a new snapshot taken after the group locks were granted, checks the
//!    group rule again and claims. The pick's snapshot may predate a claim
//!    of the same group that has committed since (its transaction released
//!    the group lock before this one took it); the re-check sees it.
//!    Without it two claimers could hold one group: the model in
//!    `harness/tests/client/model.rs` finds that interleaving.
//!    Then the heads of the groups it served ([`NORMALIZE`]).
//! 5. The slots' writes ([`USE_SLOTS`]): each pending item claimed takes
//!    one of the free slots (`items.slot`); each rate slot used gets the
//!    claim's time.
//!
//! Why the invariant holds under SKIP LOCKED races: an item is given a
//! slot only by a transaction that holds the slot's lock (a claim), or
//! by `work_limit`, which first waits out every claim of the queue (the
//! slots lock); a claim
//! gives a slot only if no claimed item held it in a snapshot taken after
//! every earlier holder ended; two claims never hold one slot; and the
//! item's claim and its slot are one transaction's writes, committed
//! together. The model checks it (`Sql::NoSlotRecheck`, without step 2,
//! and `Sql::SlotFreedByLease`, a slot freed when its lease lapses, are
//! both caught).
//!
//! The common case, an ungrouped limited queue with no lapsed lease and
//! no retired slot, runs steps 2 to 5 as one statement ([`FAST_TAKE`]).
//! A one-item claim of a queue whose only limit is concurrency first tries
//! the slot its backend's previous claim of the queue filled (a worker's
//! own finish freed it), and steps 2 to 5 in [`CLAIM_IN_SLOT`], with no
//! step 1 statement at all ([`claim_in_slot`]); when that slot is held or
//! busy, or something lapsed, the steps above run.
//!
//! **Changing the limits** (`work_limit`, [`sync_slots`]): it takes the
//! queue's slots lock exclusively (waiting for the claims in flight that
//! gave slots) and locks every slot row (waiting for the claims that hold
//! rate slots), then writes
//! them as the new limits want: slot rows `1..concurrency`, and every
//! claimed item that holds no slot of its own (it was claimed while the
//! queue had no limit, or shares a number with an older item) gets a free
//! one, or, when none is left, a *retired* number above the limit. An item
//! that holds a number above a lowered limit keeps it, retired. A claim
//! that finds retired slots locks their items (`SKIP LOCKED`), moves each
//! into one of its own free slots (which that item then fills), and takes
//! new items only when it locked every such item and moved it: a lowered
//! limit takes nothing back and holds claims until fewer items than it are
//! claimed, as a count would. Rate slots keep the window's `rate` most
//! recent claims. One limit change races claims that read the queue's
//! settings before it committed and had no limit then: an item they claim
//! after the change's slots were written holds no slot and is not counted
//! until it leaves state claimed (0.10.0's count had the same window, one
//! claim wide).
//!
//! Claims of a limited queue hold the locks of the slots they gave items,
//! and then the slots lock (share), to the end of their transaction, as
//! they hold their items'; no lock one claim waits for. Under REPEATABLE READ or SERIALIZABLE a snapshot cannot see
//! claims committed after the transaction began, so claims of such queues
//! raise 25000. (A database whose schema predates 0.12.0, with the library
//! installed and `ALTER EXTENSION ... UPDATE` not yet run, has no slot
//! rows: its limited claims take turns on the limit lock, class
//! [`LIMIT_LOCK_CLASS`], as 0.10.0 and 0.11.0 did, and a transaction
//! holding it cannot be prepared, 0A000.)
//!
//! Long polls: a claim that got nothing because of a limit, a busy group or
//! slots held by other claims still finds due items in the queue, so the
//! waiter re-checks after 5 ms, doubling up to 500 ms ([`crate::backend::wait`]);
//! and finishing, failing, releasing or cancelling an item of a grouped or
//! limited queue wakes one waiter of the queue at commit ([`freed`]).

use std::collections::HashSet;

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::backend::paused::{self, Settings};
use crate::backend::wait;
use crate::base::error::{OrReport, Result, WorkfenceError};
use crate::pg::plans::{self, params, Statement, Versioned};
use crate::pg::plans::{schema_has_heads, schema_has_slots};
use crate::store::sql::{group_order, group_pending};
use crate::store::take::{self, ready, ClaimOutcome};

/// The first key of a queue's limit lock (ASCII "WFli"); the second is
/// `hashtext(queue)`, as the pause lock's ([`crate::backend::paused`]).
pub const LIMIT_LOCK_CLASS: i32 = 0x5746_6c69;

/// `locktag_field4` of a group lock (ASCII "WG"), apart from the values 1
/// and 2 the SQL advisory lock functions use, so no `pg_advisory_lock`
/// call can take it.
pub const GROUP_LOCK_CLASS: u16 = 0x5747;

/// The lock tag of the limit lock of `queue`.
fn limit_lock(queue: &str) -> pg_sys::LOCKTAG {
    crate::pg::compat::advisory_tag(LIMIT_LOCK_CLASS, crate::pg::keys::queue_key(queue))
}

/// The lock tag of group `group` of `queue`. Two groups whose hashes
/// collide share a lock: a claim of one may pass the other over while it
/// is claimed (never both held: step 4 checks the group by name).
fn group_lock(queue: &str, group: &str) -> pg_sys::LOCKTAG {
    crate::pg::compat::advisory_tag_in(
        GROUP_LOCK_CLASS,
        crate::pg::keys::queue_key(queue),
        crate::pg::keys::queue_key(group),
    )
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

// The group rule of a claim, in SQL, for item `i` of queue `$1`: its group
// has fewer than `per_group` items claimed besides it (`$other`: `o.id <>
// i.id` or true), read from the CTE `per_group` (`n`: the queue's
// per_group, 1 when unset; 0.10.0 and 0.11.0 had no setting, and
// `per_group` is then one row with 1). The group's claimed items are read
// in `items_group_idx` (which holds a group's pending and claimed items;
// among them `state > 'pending'` are the claimed ones), never through
// `items_lease_idx`: written as `state = 'claimed'`, the clause proved that
// index's predicate, and a generic plan made while the queue had few
// claimed items read the group's through it, filtering every claimed item
// of the queue by group: 3,000 claimed items made each probe read 58
// buffers, and draining 25,000 groups' first items by claims of 1,000 took
// 87 s where it takes 2 (a claim of 1,000 from 89 ms to 550 ms as items
// were claimed). Written as a range, the clause proves no partial index's
// predicate but this one's (with the `ANY`, which is that predicate).
macro_rules! group_has_room {
    ($other:literal) => {
        concat!(
            r#"(SELECT pg_catalog.count(*)
                  FROM (SELECT FROM workfence.items AS o
                         WHERE o.queue OPERATOR(pg_catalog.=) $1
                           AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                           AND o.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed}'::workfence.item_state[])
                           AND o.state OPERATOR(pg_catalog.>) 'pending'::workfence.item_state
                           AND "#,
            $other,
            r#"
                         "#,
            group_order!("o"),
            r#"
                         LIMIT (SELECT g.n FROM per_group AS g)) AS o)
               OPERATOR(pg_catalog.<) (SELECT g.n FROM per_group AS g)"#
        )
    };
}

// ... and no pending item of its group comes before it in claim order: it
// is the group's first pending item (`i` is pending). Read as the first
// entry of `items_group_idx` in claim order (ORDER BY ... LIMIT 1): as
// `NOT EXISTS (a pending item before it)`, a generic plan that estimated
// the group's many pending items chose a sequential scan, which read every
// item of the table to find none before a group's head (5.9 ms a claim
// beside 20,000 items of one group).
macro_rules! group_first {
    () => {
        concat!(
            r#"(SELECT o.id
                  FROM workfence.items AS o
                 WHERE o.queue OPERATOR(pg_catalog.=) $1
                   AND o.group_key OPERATOR(pg_catalog.=) i.group_key
                   AND "#,
            group_pending!("o"),
            "\n                 ",
            group_order!("o"),
            r#"
                 LIMIT 1) OPERATOR(pg_catalog.=) i.id"#
        )
    };
}

// The queue's per_group as the CTE `per_group`, for schema `$mode`
// (`heads`: 0.12.0 on, `flat`: 0.10.0 and 0.11.0, serial groups).
macro_rules! per_group_cte {
    (heads) => {
        r#"per_group AS (
    SELECT COALESCE((SELECT q.per_group FROM workfence.queues AS q
                      WHERE q.queue OPERATOR(pg_catalog.=) $1), 1) AS n
)"#
    };
    (flat) => {
        "per_group AS (\n    SELECT 1 AS n\n)"
    };
}

// Step 3 for schema `$mode`, see PICK.
macro_rules! pick_sql {
    ($mode:ident, $order:literal, $candidate:literal) => {
        concat!(
            "\nWITH ",
            per_group_cte!($mode),
            r#", due AS (
    SELECT i.id, i.priority, "#,
            $order,
            r#" AS at, i.group_key
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state"#,
            $candidate,
            r#"
       AND "#,
            $order,
            r#" OPERATOR(pg_catalog.<=) $4
       AND (i.group_key IS NULL
            OR ("#,
            group_has_room!("true"),
            r#"
                AND "#,
            group_first!(),
            r#"))
     ORDER BY i.priority, "#,
            $order,
            r#", i.id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), lapsed AS (
    SELECT i.id, i.priority, i.run_at AS at, i.group_key
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
  ORDER BY c.priority, c.at, c.id
  LIMIT $3)
UNION ALL
SELECT e.id, NULL::pg_catalog.text FROM exhausted AS e
"#
        )
    };
}

// Step 3: the candidates of a claim of queue `$1` by the server's clock
// `$4`: up to `$2` due items (a grouped one only if its group has fewer
// than `per_group` items claimed and no pending item before it) and lapsed
// leases, at most `$3` in all, in claim order; and lapsed final attempts
// (to dead-letter, not counted). Each locked `FOR UPDATE SKIP LOCKED`.
// Columns: id, group_key (NULL for a dead letter, which frees its group
// and needs no lock).
//
// `current` (0.12.0 on, group heads): the due items are read from
// `items_head_idx`, which holds the pending items in no group and each
// group's head but not the items behind it, in serving order (priority,
// then `turn`, the time a claim of the group made the item its head, else
// `run_at`). The due test is `run_at`'s, written beside the index's order:
// a head whose `run_at` moved later than its `turn` (a retry after a
// backoff, a release with a delay, a `work_retry` or an `on_conflict`
// replace with a later `run_at`) is passed over until it is due, instead
// of taking the one-item claim's only candidate and leaving the claim
// empty (an adversarial review of issue 35 found every one-item claim of
// the queue empty until that `run_at`). So a claim never walks a busy
// group's backlog, and a group just served waits behind the heads of the
// others (round-robin). `legacy` (0.10.0, 0.11.0): every due item in claim
// order, a busy group's backlog included.
static PICK: Versioned<PickParams> = Versioned {
    current: Statement::new(pick_sql!(
        heads,
        "COALESCE(i.turn, i.run_at)",
        "\n       AND NOT i.behind\n       AND i.run_at OPERATOR(pg_catalog.<=) $4"
    )),
    legacy: Statement::new(pick_sql!(flat, "i.run_at", "")),
};

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

// Step 4 for schema `$mode`, see TAKE.
macro_rules! take_sql {
    ($mode:ident, $claim:ident) => {
        concat!(
            "\nWITH ",
            per_group_cte!($mode),
            r#", picked AS (
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
            OR ("#,
            group_has_room!("o.id OPERATOR(pg_catalog.<>) i.id"),
            r#"
                AND (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                     OR "#,
            group_first!(),
            r#")))
)
UPDATE workfence.items AS i"#,
            crate::store::sql::claim_sets!($claim, "$2", "$3", "$5")
        )
    };
}

// Step 4: claim the picked items `$4` of queue `$1` (this transaction holds
// their row locks, and the locks of their groups) for owner `$2` under
// lease `$3` by the server's clock `$5`, each only if it is still claimable
// and, for a grouped item, if its group has fewer than `per_group` other
// items claimed and (for a pending item) no pending item before it, in
// this statement's snapshot; a lapsed final attempt is dead-lettered.
// CLAIM's result columns ([`crate::verbs::claim`]). `current`: 0.12.0 on, with the
// queue's per_group; `legacy`: 0.10.0 and 0.11.0, serial groups.
static TAKE: Versioned<TakeParams> = Versioned {
    current: Statement::new(take_sql!(heads, life)),
    legacy: Statement::new(take_sql!(flat, current)),
};

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

// Group heads (0.12.0 on), run by a transaction that holds the group lock
// of each group `$2` of queue `$1`, in a snapshot taken after it got them:
// each group's first pending item in claim order becomes its head (`behind`
// false; when `$3` is given, a claim of the group at that time served it,
// and the head's `turn` becomes `$3`, or its run_at if later, so that it
// waits behind the heads of the groups not served since: round-robin), and
// the group's other pending items that are not behind (enqueued, released
// or retried before the head since it was made) become behind. A first
// item that is behind is locked waiting: in READ COMMITTED a claim's pick
// locks a row's newest version before it re-checks the row and passes it
// over, and holds that lock to its end, so a row that became behind since
// the pick's snapshot may be locked by a claim that will not take it
// (skipped, the group would keep no head: the model in
// `harness/tests/client/model.rs`, `Sql::NormalizeSkipsLockedHead`, finds that).
// Rows that are not behind (a head whose `turn` changes, stale heads made
// behind) are left as they are when another transaction holds them
// (`SKIP LOCKED`: the claim that picked them), which costs a turn or leaves
// a stale head, never the group's head. Item `$4` (NULL: none), cancelled by this transaction,
// is made not behind, so that a `work_retry` brings it back a candidate.
static NORMALIZE: Statement<NormalizeParams> = Statement::new(concat!(
    r#"
WITH g AS (
    SELECT DISTINCT x.group_key FROM pg_catalog.unnest($2) AS x(group_key)
), first AS (
    SELECT f.id
      FROM g CROSS JOIN LATERAL (
               SELECT i.id
                 FROM workfence.items AS i
                WHERE i.queue OPERATOR(pg_catalog.=) $1
                  AND i.group_key OPERATOR(pg_catalog.=) g.group_key
                  AND "#,
    group_pending!("i"),
    "\n                ",
    group_order!("i"),
    r#"
                LIMIT 1) AS f
), head AS (
    SELECT i.ctid
      FROM workfence.items AS i
     WHERE i.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT first.id FROM first))
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND i.behind
       FOR UPDATE
), turned AS (
    SELECT i.ctid
      FROM workfence.items AS i
     WHERE i.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT first.id FROM first))
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND NOT i.behind
       AND $3 IS NOT NULL
       FOR UPDATE SKIP LOCKED
), stale AS (
    SELECT i.ctid
      FROM workfence.items AS i, g
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.group_key OPERATOR(pg_catalog.=) g.group_key
       AND i.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND NOT i.behind
       AND i.id OPERATOR(pg_catalog.<>) ALL (ARRAY(SELECT first.id FROM first))
       FOR UPDATE OF i SKIP LOCKED
), headed AS (
    UPDATE workfence.items AS i
       SET behind = false,
           turn = CASE WHEN $3 IS NULL THEN i.turn ELSE GREATEST(i.run_at, $3) END
     WHERE i.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT head.ctid FROM head
                                                     UNION ALL
                                                     SELECT turned.ctid FROM turned))
), reset AS (
    UPDATE workfence.items AS i
       SET behind = false, turn = NULL
     WHERE i.id OPERATOR(pg_catalog.=) $4
       AND i.state OPERATOR(pg_catalog.<>) 'pending'::workfence.item_state
       AND i.behind
)
UPDATE workfence.items AS i
   SET behind = true, turn = NULL
 WHERE i.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT stale.ctid FROM stale))
"#
));

params! {
    /// `$1` queue, `$2` groups, `$3` the time a claim served them (NULL: no
    /// claim did), `$4` an item this transaction cancelled (NULL: none).
    struct NormalizeParams<'a> {
        queue: &'a str = TEXTOID,
        groups: Vec<String> = TEXTARRAYOID,
        served: Option<TimestampWithTimeZone> = TIMESTAMPTZOID,
        cancelled: Option<i64> = INT8OID,
    }
}

/// The form of PICK or TAKE for this database's schema.
fn by_heads<P>(pair: &'static Versioned<P>) -> &'static Statement<P> {
    if schema_has_heads() {
        &pair.current
    } else {
        &pair.legacy
    }
}

// The concurrency slots the claimed items of queue `$1` hold, in SQL (a
// CTE body; the statement's CTE `q` has the queue's `concurrency`), read in
// one pass over the queue's claimed items: `slots`, every slot held;
// `retired`, how many are above the limit (left by a lowered limit); `low`,
// how many are at or below it. One row, also with no claimed item.
macro_rules! claimed_slots {
    () => {
        r#"SELECT COALESCE(pg_catalog.array_agg(i.slot), '{}') AS slots,
           pg_catalog.count(*) FILTER (WHERE i.slot OPERATOR(pg_catalog.>) q.concurrency) AS retired,
           pg_catalog.count(*) FILTER (WHERE i.slot OPERATOR(pg_catalog.<=) q.concurrency) AS low
      FROM workfence.items AS i, q
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.slot IS NOT NULL"#
    };
}

// Step 1 of a claim of a limited queue (0.12.0 on): the queue's limits;
// the concurrency slots at or below the limit that no claimed item of the
// queue holds (`items.slot`, as this statement's snapshot sees the items:
// see VERIFY_SLOTS), in slot order from a slot of the backend's own (`$4`,
// its process id, modulo the limit) round to it, so that claimers do not
// all look at the same busy slots first: as many as the claim wants (`$3`)
// and claimed items hold retired slots (above the limit, left by a lowered
// limit: the claim moves those items into free slots before it takes new
// ones), and 64 more, for the slots other claims in flight hold, which
// [`lock_slots`] tries and passes over (their locks are in the lock
// manager, not on these rows); and up to `$3` rate slots whose last use
// left the window by the server's clock `$2` (least recently used first),
// locked `FOR UPDATE SKIP LOCKED`. Columns: concurrency, rate, the
// concurrency slots, the rate slots, how many claimed items of the queue
// hold a retired slot, and `take::ready`'s two answers (a lapsed lease, a
// due item): when there is neither, no slot is read or locked (the slot
// columns are NULL; a CTE is run only as far as the query reads it), and
// the claim ends having run this one statement. No row when the queue has
// no limits.
//
// The slots that claimed items hold are read once (`busy`: one pass over
// the queue's claimed items), and a full queue (as many claimed items at
// or below the limit as the limit) looks at no slot. A probe per slot
// (`NOT EXISTS` a claimed item holding it) depends on its generic plan:
// made while statistics showed few claimed items, it read the probe
// through `items_lease_idx`, every claimed item of the queue per slot (836
// buffers a call at `concurrency => 100` under 16 pgbench clients; 4 s a
// call on a full queue of `concurrency => 10000`). The array costs a
// linear search per slot looked at: one or two slots while the queue has
// room, and up to the whole range when few are free (a claim on a queue of
// `concurrency => 10000` with one slot free: 227 ms, psql on this 2-core
// machine).
static LOCK_SLOTS: Statement<SlotParams> = Statement::new(concat!(
    r#"
WITH q AS (
    SELECT q.concurrency, q.rate, q.per
      FROM workfence.queues AS q
     WHERE q.queue OPERATOR(pg_catalog.=) $1
), start AS (
    SELECT 1 OPERATOR(pg_catalog.+) ($4 OPERATOR(pg_catalog.%) q.concurrency) AS slot FROM q
), busy AS (
    "#,
    claimed_slots!(),
    r#"
), retired AS (
    SELECT busy.retired AS n FROM busy
), c_from AS (
    SELECT s.slot
      FROM workfence.queue_slots AS s, busy AS b
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
       AND s.slot OPERATOR(pg_catalog.>=) (SELECT start.slot FROM start)
       AND b.low OPERATOR(pg_catalog.<) (SELECT q.concurrency FROM q)
       AND s.slot OPERATOR(pg_catalog.<=) (SELECT q.concurrency FROM q)
       AND s.slot OPERATOR(pg_catalog.<>) ALL (b.slots)
     ORDER BY s.slot
     LIMIT $3 OPERATOR(pg_catalog.+) (SELECT retired.n FROM retired) OPERATOR(pg_catalog.+) 64
), c_before AS (
    SELECT s.slot
      FROM workfence.queue_slots AS s, busy AS b
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
       AND s.slot OPERATOR(pg_catalog.<) (SELECT start.slot FROM start)
       AND b.low OPERATOR(pg_catalog.<) (SELECT q.concurrency FROM q)
       AND s.slot OPERATOR(pg_catalog.<>) ALL (b.slots)
     ORDER BY s.slot
     LIMIT $3 OPERATOR(pg_catalog.+) (SELECT retired.n FROM retired) OPERATOR(pg_catalog.+) 64
), r AS (
    SELECT s.slot
      FROM workfence.queue_slots AS s
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'r'::"char"
       AND s.slot OPERATOR(pg_catalog.<=) (SELECT q.rate FROM q)
       AND (s.used_at IS NULL
            OR s.used_at OPERATOR(pg_catalog.<=) ($2 OPERATOR(pg_catalog.-) (SELECT q.per FROM q)))
     ORDER BY s.used_at NULLS FIRST
     LIMIT $3
       FOR UPDATE OF s SKIP LOCKED
)
SELECT q.concurrency, q.rate,
       CASE WHEN (ready.lapsed OR ready.due) AND q.concurrency IS NOT NULL
            THEN ARRAY(SELECT c.slot
                         FROM (SELECT f.slot FROM c_from AS f
                               UNION ALL
                               SELECT b.slot FROM c_before AS b) AS c
                        LIMIT $3 OPERATOR(pg_catalog.+) (SELECT retired.n FROM retired) OPERATOR(pg_catalog.+) 64) END,
       CASE WHEN (ready.lapsed OR ready.due) AND q.rate IS NOT NULL
            THEN ARRAY(SELECT r.slot FROM r) END,
       (SELECT retired.n FROM retired),
       ready.lapsed, ready.due
  FROM q,
       (SELECT "#,
    crate::store::sql::lapsed_probe!(),
    " AS lapsed,\n               ",
    crate::store::sql::due_probe!(),
    r#" AS due
        OFFSET 0) AS ready
 WHERE q.concurrency IS NOT NULL OR q.rate IS NOT NULL
"#
));

params! {
    /// `$1` queue, `$2` the server's clock, `$3` slots of each kind at most,
    /// `$4` this backend's process id (where its look for a free slot
    /// starts).
    struct SlotParams<'a> {
        queue: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
        most: i32 = INT4OID,
        backend: i32 = INT4OID,
    }
}

// Step 1b, when a claimed item of the queue holds a slot above limit `$2`
// (a retired slot): lock those items `FOR NO KEY UPDATE SKIP LOCKED` (a
// row whose state or slot changed since this statement's snapshot is
// re-checked in its newest version), and count them all. Columns: the
// items locked, how many there are.
static LOCK_RETIRED: Statement<RetiredParams> = Statement::new(
    r#"
WITH l AS (
    SELECT i.id
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
       AND i.slot OPERATOR(pg_catalog.>) $2
       FOR NO KEY UPDATE OF i SKIP LOCKED
)
SELECT ARRAY(SELECT l.id FROM l),
       (SELECT pg_catalog.count(*)
          FROM workfence.items AS i
         WHERE i.queue OPERATOR(pg_catalog.=) $1
           AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
           AND i.slot OPERATOR(pg_catalog.>) $2)
"#,
);

params! {
    /// `$1` queue, `$2` its concurrency limit.
    struct RetiredParams<'a> {
        queue: &'a str = TEXTOID,
        concurrency: i32 = INT4OID,
    }
}

// Step 2: the concurrency slots `$2` of queue `$1`, which this transaction
// has locked, read in a snapshot taken after the locks were granted (a new
// statement): each slot, whether a claimed item holds it (busy), the
// queue's concurrency limit and whether a claimed item holds a slot above
// it, in this snapshot (a `work_limit` that committed since step 1 changed
// them: the claim then takes nothing new this time). Step 1's own look
// cannot decide: a claim that took an item into one of these slots and
// committed after step 1's snapshot was taken, releasing the slot, left
// the slot free in that snapshot.
static VERIFY_SLOTS: Statement<VerifyParams> = Statement::new(
    r#"
SELECT s.slot,
       EXISTS (SELECT FROM workfence.items AS i
                WHERE i.queue OPERATOR(pg_catalog.=) $1
                  AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                  AND i.slot OPERATOR(pg_catalog.=) s.slot),
       q.concurrency,
       EXISTS (SELECT FROM workfence.items AS i
                WHERE i.queue OPERATOR(pg_catalog.=) $1
                  AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                  AND i.slot OPERATOR(pg_catalog.>) q.concurrency)
  FROM workfence.queue_slots AS s
  LEFT JOIN workfence.queues AS q ON q.queue OPERATOR(pg_catalog.=) $1
 WHERE s.queue OPERATOR(pg_catalog.=) $1
   AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
   AND s.slot OPERATOR(pg_catalog.=) ANY ($2)
"#,
);

params! {
    /// `$1` queue, `$2` concurrency slots.
    struct VerifyParams<'a> {
        queue: &'a str = TEXTOID,
        slots: Vec<i32> = INT4ARRAYOID,
    }
}

// Step 5, in the claim's transaction, which holds every slot and item
// named here: items `$3` take concurrency slots `$2` (pairwise: a claimed
// item its slot, a retired slot's item one at or below the limit), rate
// slots `$4` are used at `$5`.
static USE_SLOTS: Statement<UseParams> = Statement::new(
    r#"
WITH given AS (
    UPDATE workfence.items AS i
       SET slot = v.slot
      FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS v(slot, item)
     WHERE i.id OPERATOR(pg_catalog.=) v.item
)
UPDATE workfence.queue_slots AS s
   SET used_at = $5
 WHERE s.queue OPERATOR(pg_catalog.=) $1
   AND s.kind OPERATOR(pg_catalog.=) 'r'::"char"
   AND s.slot OPERATOR(pg_catalog.=) ANY ($4)
"#,
);

params! {
    /// `$1` queue, `$2` concurrency slots and `$3` their items, `$4` rate
    /// slots, `$5` the claim's time.
    struct UseParams<'a> {
        queue: &'a str = TEXTOID,
        given: Vec<i32> = INT4ARRAYOID,
        items: Vec<i64> = INT8ARRAYOID,
        rate: Vec<i32> = INT4ARRAYOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// The slots one claim of a limited queue holds (locked to the end of its
/// transaction) and what it does with them ([`USE_SLOTS`]).
#[derive(Default)]
struct Slots {
    /// Free concurrency slots, for the pending items the claim takes; None
    /// when the queue has no concurrency limit.
    free: Option<Vec<i32>>,
    /// Free rate slots, one per item handed out; None without a rate limit.
    rate: Option<Vec<i32>>,
    /// Items of retired slots given one of this claim's free slots (slot,
    /// item).
    moved: Vec<(i32, i64)>,
}

impl Slots {
    /// (due items at most, items at most) this claim may take, each within
    /// 0..=`max_items`: a pending item needs a concurrency slot and a rate
    /// slot, a lapsed lease claimed anew a rate slot (it keeps its
    /// concurrency slot).
    fn allowance(&self, max_items: i32) -> (i32, i32) {
        let count = |v: &Option<Vec<i32>>| {
            v.as_ref()
                .map_or(max_items, |v| (v.len() as i32).min(max_items))
        };
        let items = count(&self.rate);
        (count(&self.free).min(items), items)
    }
}

/// What step 1 ([`LOCK_SLOTS`]) locked and read.
struct Locked {
    /// The queue's concurrency limit, if any.
    concurrency: Option<i32>,
    /// Its rate limit, if any.
    rate: Option<i32>,
    /// Concurrency slots at or below the limit that looked free, which
    /// this claim holds (after [`lock_slots`] tried them).
    low: Vec<i32>,
    /// Free rate slots.
    rate_slots: Vec<i32>,
    /// Whether a claimed item of the queue holds a retired slot.
    has_retired: bool,
    /// Whether a lapsed lease of the queue is due to be claimed anew.
    lapsed: bool,
    /// Whether a pending item of the queue is due.
    due: bool,
}

/// The most concurrency slots one claim holds: half of
/// `max_locks_per_transaction` (32 by default). Each is an entry of the
/// server's shared lock table, which holds about `max_locks_per_transaction`
/// per connection for everything (every relation a query opens takes one
/// too), so one batch claim of a queue limited to thousands must not fill
/// it: a batch claim of a queue with a concurrency limit hands out at most
/// this many new items (it returns fewer rows, as at a limit; raise
/// `max_locks_per_transaction` for larger batches). Rate slots are rows and
/// take no entry.
fn slot_budget() -> i32 {
    // SAFETY: a plain int GUC of the server, set at start.
    (unsafe { pg_sys::max_locks_per_xact } / 2).max(1)
}

/// Step 1: [`LOCK_SLOTS`]. None when the queue has no limits.
fn lock_slots(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    max_items: i32,
    now: TimestampWithTimeZone,
) -> Result<Option<Locked>> {
    let budget = slot_budget();
    plans::run(
        client,
        &LOCK_SLOTS,
        SlotParams {
            queue,
            now,
            most: max_items,
            // SAFETY: a plain int global of the backend.
            backend: unsafe { pg_sys::MyProcPid },
        },
        |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            let retired = row.get::<i64>(5)?.unwrap_or(0);
            // Lock the free-looking slots in order, passing over those
            // other claims hold, until the claim has as many as it wants.
            let want = (i64::from(max_items) + retired).min(i64::from(budget)) as usize;
            let mut low = Vec::new();
            for slot in row.get::<Vec<i32>>(3)?.unwrap_or_default() {
                if low.len() >= want {
                    break;
                }
                if try_lock(&slot_lock(queue, slot)) {
                    low.push(slot);
                }
            }
            Ok(Some(Locked {
                concurrency: row.get::<i32>(1)?,
                rate: row.get::<i32>(2)?,
                low,
                rate_slots: row.get::<Vec<i32>>(4)?.unwrap_or_default(),
                has_retired: retired > 0,
                lapsed: row.get::<bool>(6)?.unwrap_or(false),
                due: row.get::<bool>(7)?.unwrap_or(false),
            }))
        },
    )
}

/// Step 2 and the retired slots: which of the slots step 1 locked are free
/// in a fresh snapshot, and which items of retired slots this claim moves
/// into them.
fn verify_slots(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    locked: Locked,
) -> Result<Slots> {
    let Locked {
        concurrency,
        rate,
        low,
        rate_slots,
        has_retired,
        ..
    } = locked;
    let mut slots = Slots {
        rate: rate.map(|_| rate_slots),
        ..Slots::default()
    };
    let Some(concurrency) = concurrency else {
        return Ok(slots);
    };
    // The items of retired slots, locked (a row whose state or slot
    // changed since the statement's snapshot is re-checked in its newest
    // version, so these are claimed and above the limit now).
    let (retired, all_retired) = if has_retired {
        plans::run(
            client,
            &LOCK_RETIRED,
            RetiredParams { queue, concurrency },
            |rows| {
                let row = rows.first();
                let locked = row.get::<Vec<i64>>(1)?.unwrap_or_default();
                let all = row.get::<i64>(2)?.unwrap_or(0);
                let all_locked = locked.len() as i64 >= all;
                Ok((locked, all_locked))
            },
        )?
    } else {
        (Vec::new(), true)
    };
    if low.is_empty() {
        slots.free = Some(Vec::new());
        return Ok(slots);
    }
    let mut changed = false;
    let mut free: Vec<i32> = plans::run(
        client,
        &VERIFY_SLOTS,
        VerifyParams { queue, slots: low },
        |rows| {
            let mut free = Vec::with_capacity(rows.len());
            for row in rows {
                let busy = row.get::<bool>(2)?.unwrap_or(true);
                if let (Some(slot), false) = (row.get::<i32>(1)?, busy) {
                    if slot <= concurrency {
                        free.push(slot);
                    }
                }
                changed |= row.get::<i32>(3)? != Some(concurrency)
                    || row.get::<bool>(4)?.unwrap_or(false) != has_retired;
            }
            Ok(free)
        },
    )?;
    free.sort_unstable();
    // Each retired slot's item moves into a free slot at or below the
    // limit (which it then fills), while one is left.
    let mut busy_left = false;
    for item in retired {
        match free.pop() {
            Some(into) => slots.moved.push((into, item)),
            None => busy_left = true,
        }
    }
    // New items only when no item holds a retired slot any more (this
    // claim saw and moved them all): the queue's claimed items then all
    // hold slots at or below the limit, one of them free. And only if the
    // limit is still the one step 1 read.
    if busy_left || !all_retired || changed {
        free.clear();
    }
    slots.free = Some(free);
    Ok(slots)
}

// The SET list of a claim whose time is the statement's CTE `clock`
// (read inside the statement, after its snapshot: see FAST_TAKE), for
// owner `$2` under lease `$3`: CLAIM_DUE's ([`crate::verbs::claim`]) with
// that time.
macro_rules! claimed_by_clock {
    () => {
        r#"state = 'claimed'::workfence.item_state,
           epoch = pg_catalog.nextval('workfence.epoch_seq'::pg_catalog.regclass),
           owner = $2,
           attempts = i.attempts OPERATOR(pg_catalog.+) 1,
           claimed_at = (SELECT clock.t FROM clock),
           lease_until = LEAST((SELECT clock.t FROM clock) OPERATOR(pg_catalog.+) $3,
                               (SELECT clock.t FROM clock) OPERATOR(pg_catalog.+) i.max_run)"#
    };
}

// FAST_TAKE: steps 2 to 5 in one statement, for the common case: a claim of up to
// `$7` pending items (no lapsed lease is due, the queue has no groups and
// no retired slot) of queue `$1` for owner `$2` under lease `$3` by the
// server's clock `$6`, holding concurrency slots `$4` (NULL: no
// concurrency limit) and rate slots `$5` (NULL: no rate limit; at least
// `$7` of them otherwise). `free` is step 2: the slots re-read in this
// statement's snapshot, taken after step 1's locks were granted, at or
// below the limit as it is now and only while no claimed item holds a
// retired slot (a `work_limit` that committed since step 1 may have made
// some). The claim is CLAIM_DUE's ([`crate::verbs::claim`]), as many items as
// free slots, each claimed item taking one of them (`items.slot`, written
// by the claim's own update); the rate slots used get the claim's time.
// That time (`claimed_at`, the lease's start) is read inside the statement,
// after its snapshot was taken: whatever freed a slot it takes committed
// before it (`$6`, read before the statement, only says what is due).
// CLAIM's result columns, and the slot each item took. One statement where the general path runs four
// (VERIFY_SLOTS, PICK, TAKE, USE_SLOTS); what that saves was not measured
// apart from the other changes of its commit: one-repetition runs of the
// flow benchmark (20,000 pending, limits 10 and 100) gave 0.50x and 0.70x
// of an unlimited queue before it, 0.48x and 0.56x after, within one
// machine's noise.
static FAST_TAKE: Statement<FastParams> = Statement::new(concat!(
    r#"
WITH clock AS (
    SELECT pg_catalog.clock_timestamp() AS t
), q AS (
    SELECT q.concurrency FROM workfence.queues AS q WHERE q.queue OPERATOR(pg_catalog.=) $1
), held AS (
    "#,
    claimed_slots!(),
    r#"
), free AS (
    SELECT f.slot, f.n
      FROM pg_catalog.unnest(ARRAY(
               SELECT s.slot
                 FROM workfence.queue_slots AS s, held AS h
                WHERE s.queue OPERATOR(pg_catalog.=) $1
                  AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
                  AND s.slot OPERATOR(pg_catalog.=) ANY ($4)
                  AND s.slot OPERATOR(pg_catalog.<=) (SELECT q.concurrency FROM q)
                  AND h.retired OPERATOR(pg_catalog.=) 0
                  AND s.slot OPERATOR(pg_catalog.<>) ALL (h.slots)
                ORDER BY s.slot)) WITH ORDINALITY AS f(slot, n)
), picked AS (
    SELECT p.ctid, p.n
      FROM pg_catalog.unnest(ARRAY(
               SELECT d.ctid
                 FROM workfence.items AS d
                WHERE d.queue OPERATOR(pg_catalog.=) $1
                  AND d.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
                  AND d.run_at OPERATOR(pg_catalog.<=) $6
                ORDER BY d.priority, d.run_at, d.id
                LIMIT CASE WHEN $4 IS NULL THEN $7
                           ELSE LEAST($7, (SELECT pg_catalog.count(*) FROM free)) END
                  FOR UPDATE SKIP LOCKED)) WITH ORDINALITY AS p(ctid, n)
), claimed AS (
    UPDATE workfence.items AS i
       SET "#,
    claimed_by_clock!(),
    r#",
           slot = CASE WHEN $4 IS NULL THEN i.slot
                       ELSE (SELECT f.slot
                               FROM picked AS p
                               JOIN free AS f ON f.n OPERATOR(pg_catalog.=) p.n
                              WHERE p.ctid OPERATOR(pg_catalog.=) i.ctid) END
     WHERE i.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT p.ctid FROM picked AS p))
    RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until, i.priority, i.run_at, i.slot,
              i.trace
), used AS (
    UPDATE workfence.queue_slots AS s
       SET used_at = (SELECT clock.t FROM clock)
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'r'::"char"
       AND s.slot OPERATOR(pg_catalog.=) ANY ($5[1:(SELECT pg_catalog.count(*) FROM claimed)::pg_catalog.int4])
)
SELECT c.id, c.key, c.payload, c.epoch, c.attempts, c.lease_until,
       NULL::pg_catalog.text, NULL::pg_catalog.int8, NULL::pg_catalog.timestamptz,
       false, c.priority, c.run_at, c.slot, c.trace
  FROM claimed AS c
"#
));

params! {
    /// `$1` queue, `$2` owner, `$3` lease, `$4` concurrency slots, `$5` rate
    /// slots, `$6` the server's clock, `$7` items at most.
    struct FastParams<'a> {
        queue: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        concurrency: Option<Vec<i32>> = INT4ARRAYOID,
        rate: Option<Vec<i32>> = INT4ARRAYOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
        most: i32 = INT4OID,
    }
}

/// [`FAST_TAKE`] for the slots step 1 `locked`: a claim of up to
/// `max_items` pending items of `queue` for `owner` under `lease`; the
/// slot of a one-item claim is kept for the next one's [`claim_in_slot`]
/// unless this call's try of [`claim_in_slot`] missed, and the slots the
/// items took go to `held`.
fn fast_take(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    max_items: i32,
    locked: Locked,
    held: &mut SlotLocks,
) -> Result<ClaimOutcome> {
    let most = match locked.rate {
        Some(_) => max_items.min(locked.rate_slots.len() as i32),
        None => max_items,
    };
    let concurrency = locked.concurrency.is_some();
    if most == 0 || (concurrency && locked.low.is_empty()) {
        return Ok(ClaimOutcome::default());
    }
    let outcome = plans::run(
        client,
        &FAST_TAKE,
        FastParams {
            queue,
            owner,
            lease,
            concurrency: locked.concurrency.map(|_| locked.low),
            rate: locked.rate.map(|_| locked.rate_slots),
            now: crate::store::sql::server_clock()?,
            most,
        },
        |mut rows| {
            // (Without a concurrency limit the column is the item's old
            // slot, if any: nothing this claim gave.)
            for row in rows.by_ref() {
                if let (Some(slot), true) = (row.get::<i32>(13)?, concurrency) {
                    held.given.push(slot);
                }
            }
            take::read_claim_result(queue, rows.rewind())
        },
    )?;
    if let ([slot], false) = (held.given.as_slice(), held.missed) {
        remember_slot(queue, *slot);
    }
    Ok(outcome)
}

/// Step 5: record what the claim did with its slots: each pending item it
/// claimed (`claimed`: the ids claimed, `lapsed`: those that were lapsed
/// leases claimed anew, which keep their slot) takes one of its free
/// concurrency slots, each moved item its new slot, each rate slot it used
/// the claim's time `now`.
fn use_slots(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    slots: Slots,
    claimed: &[i64],
    lapsed: &HashSet<i64>,
    now: TimestampWithTimeZone,
    held: &mut SlotLocks,
) -> Result<()> {
    let (mut given, mut items): (Vec<i32>, Vec<i64>) = slots.moved.iter().copied().unzip();
    if let Some(free) = slots.free {
        let pending = claimed.iter().filter(|id| !lapsed.contains(id));
        // The allowance gave this claim no more pending items than slots.
        for (slot, id) in free.into_iter().zip(pending) {
            given.push(slot);
            items.push(*id);
        }
    }
    let rate: Vec<i32> = slots
        .rate
        .unwrap_or_default()
        .into_iter()
        .take(claimed.len())
        .collect();
    held.given.extend(&given);
    if given.is_empty() && rate.is_empty() {
        return Ok(());
    }
    plans::run(
        client,
        &USE_SLOTS,
        UseParams {
            queue,
            given,
            items,
            rate,
            now,
        },
        |_| Ok(()),
    )
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

// Step 3 for `work_claim_key`, see PICK_KEY.
macro_rules! pick_key_sql {
    ($candidate:literal) => {
        concat!(
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
         AND i.run_at OPERATOR(pg_catalog.<=) $3"#,
            $candidate,
            r#")
     OR (i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
         AND i.lease_until OPERATOR(pg_catalog.<=) $3))
   FOR UPDATE SKIP LOCKED
"#
        )
    };
}

// Step 3 for `work_claim_key`: the item of key `$2` in queue `$1` if it is
// claimable by the server's clock `$3`, locked `FOR UPDATE SKIP LOCKED`.
// Columns: id, group_key (NULL for a lapsed final attempt, a dead letter),
// whether it is pending (a claim of it needs a slot). `current` (0.12.0
// on): a pending item behind its group's head is not claimable, and is not
// locked (a claim of its group that makes it the head must not wait for
// it, see NORMALIZE).
static PICK_KEY: Versioned<PickKeyParams> = Versioned {
    current: Statement::new(pick_key_sql!("\n         AND NOT i.behind")),
    legacy: Statement::new(pick_key_sql!("")),
};

params! {
    /// `$1` queue, `$2` key, `$3` the server's clock.
    struct PickKeyParams<'a> {
        queue: &'a str = TEXTOID,
        key: &'a str = TEXTOID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// Before 0.12.0's schema (no slot rows): what the limits allow one claim
/// of `queue` at `now`, reading them under the limit lock: (due items at most, items at most, whether a rate limit
/// counts them), each within 0..=`max_items`.
fn legacy_allowance(
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

/// `locktag_field4` of a concurrency slot's lock (ASCII "WS"), apart from
/// the values 1 and 2 the SQL advisory lock functions use, so no
/// `pg_advisory_lock` call can take it. Keys: the queue's hash and the slot
/// number; number 0 is the queue's *slots lock*. Two queues whose names
/// hash alike share these locks: a claim of one may pass over a slot of
/// the other that a claim in flight holds, and a `work_limit` of one waits
/// for claims of the other, never more (every check reads the queue by
/// name), as for the group lock.
pub const SLOT_LOCK_CLASS: u16 = 0x5753;

/// The lock tag of concurrency slot `slot` of `queue` (from 1), or of the
/// queue's slots lock (0): claims hold it in share mode, `work_limit`
/// exclusively ([`sync_slots`]).
fn slot_lock(queue: &str, slot: i32) -> pg_sys::LOCKTAG {
    crate::pg::compat::advisory_tag_in(SLOT_LOCK_CLASS, crate::pg::keys::queue_key(queue), slot)
}

/// The mode claims hold the slots lock in (`work_limit`: exclusive).
const SLOTS_SHARED: pg_sys::LOCKMODE = pg_sys::ShareLock as pg_sys::LOCKMODE;

/// The mode of a slot's lock, and of `work_limit`'s slots lock.
const EXCLUSIVE: pg_sys::LOCKMODE = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;

/// Take the slots lock of `queue` in share mode to the end of the
/// transaction if no `work_limit` of the queue holds or waits for it; false
/// otherwise (the claim then hands out nothing, as while a pause changes).
fn share_slots(queue: &str) -> bool {
    // SAFETY: a transaction-scoped lock of the current transaction, taken
    // without waiting.
    unsafe {
        pg_sys::LockAcquire(&slot_lock(queue, 0), SLOTS_SHARED, false, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    }
}

/// `work_limit`'s hold on the slots lock of `queue`: exclusive, waiting for
/// the claims in flight that hold it shared, to the end of the transaction.
fn hold_slots(queue: &str) {
    // SAFETY: a transaction-scoped lock of the current transaction.
    unsafe {
        pg_sys::LockAcquire(&slot_lock(queue, 0), EXCLUSIVE, false, false);
    }
}

/// Undo one acquisition of slot lock `slot` of `queue` (0: the slots lock,
/// in `mode`) that this claim call made and does not use; a lock the
/// transaction took more than once stays held.
fn unlock_slot(queue: &str, slot: i32, mode: pg_sys::LOCKMODE) {
    // SAFETY: a transaction-scoped lock this transaction holds; releasing
    // it early is what `LockRelease` is for.
    unsafe {
        pg_sys::LockRelease(&slot_lock(queue, slot), mode, false);
    }
}

thread_local! {
    /// Per limited queue of this backend's claims: its concurrency limit as
    /// the last general claim read it (queues with no other limit; gone
    /// when one had a rate limit, or none), and the slot this backend's
    /// last claim of the queue gave an item (so a worker that claims,
    /// finishes and claims again asks first for the slot its own finish
    /// freed). A hint only: [`CLAIM_IN_SLOT`] checks both in its own
    /// snapshot.
    static HINTS: std::cell::RefCell<std::collections::HashMap<String, SlotHint>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// One queue's entry in [`HINTS`].
#[derive(Clone, Copy)]
struct SlotHint {
    /// The queue's concurrency limit.
    concurrency: i32,
    /// The slot this backend last gave an item, if any.
    last: Option<i32>,
}

/// After step 1 read `locked` of `queue`: keep its concurrency limit as a
/// hint for the next claim's [`claim_in_slot`], or forget the queue.
fn remember_limits(queue: &str, locked: Option<&Locked>) {
    HINTS.with(|hints| {
        let mut hints = hints.borrow_mut();
        match locked {
            Some(Locked {
                concurrency: Some(concurrency),
                rate: None,
                ..
            }) => {
                hints
                    .entry(queue.to_owned())
                    .and_modify(|hint| hint.concurrency = *concurrency)
                    .or_insert(SlotHint {
                        concurrency: *concurrency,
                        last: None,
                    });
            }
            _ => {
                hints.remove(queue);
            }
        }
    });
}

// The claim of one pending item of queue `$1` into concurrency slot `$4`,
// which this transaction holds ([`claim_in_slot`]): CLAIM_ONE's
// ([`crate::verbs::claim`]), with the slot's checks as a one-time filter,
// read in this statement's snapshot, taken after the slot's lock was
// granted: the queue has a concurrency limit, at least `$4`, and no rate
// limit; no claimed item of the queue holds a slot above the limit (left
// by a lowered one) or slot `$4`. The item takes the slot (`items.slot`)
// in the claim's own update. Three index probes more than a plain claim
// (queues_pkey, and items_slot_idx twice). The claim's time (`claimed_at`,
// the lease's start) is read inside the statement, as in FAST_TAKE: the
// finish that freed the slot committed before it (`$5`, read before the
// slot's lock, only says what is due). CLAIM's result columns.
static CLAIM_IN_SLOT: Statement<SlotClaimParams> = Statement::new(concat!(
    r#"
WITH clock AS (
    SELECT pg_catalog.clock_timestamp() AS t
)
UPDATE workfence.items AS i
   SET "#,
    claimed_by_clock!(),
    r#",
       slot = $4
 WHERE i.ctid OPERATOR(pg_catalog.=) (
    SELECT d.ctid
      FROM workfence.items AS d
     WHERE d.queue OPERATOR(pg_catalog.=) $1
       AND d.state OPERATOR(pg_catalog.=) 'pending'::workfence.item_state
       AND d.run_at OPERATOR(pg_catalog.<=) $5
       AND EXISTS (SELECT FROM workfence.queues AS q
                    WHERE q.queue OPERATOR(pg_catalog.=) $1
                      AND q.rate IS NULL
                      AND $4 OPERATOR(pg_catalog.<=) q.concurrency
                      AND NOT EXISTS (SELECT FROM workfence.items AS r
                                       WHERE r.queue OPERATOR(pg_catalog.=) $1
                                         AND r.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                                         AND r.slot OPERATOR(pg_catalog.>) q.concurrency))
       AND NOT EXISTS (SELECT FROM workfence.items AS b
                        WHERE b.queue OPERATOR(pg_catalog.=) $1
                          AND b.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
                          AND b.slot OPERATOR(pg_catalog.=) $4)
     ORDER BY d.priority, d.run_at, d.id
     LIMIT 1
       FOR UPDATE SKIP LOCKED)
RETURNING i.id, i.key, i.payload, i.epoch, i.attempts, i.lease_until,
          NULL::pg_catalog.text, NULL::pg_catalog.int8, NULL::pg_catalog.timestamptz,
          false, i.priority, i.run_at, i.trace
"#
));

params! {
    /// `$1` queue, `$2` owner, `$3` lease, `$4` the slot, `$5` the server's
    /// clock.
    struct SlotClaimParams<'a> {
        queue: &'a str = TEXTOID,
        owner: &'a str = TEXTOID,
        lease: Option<Interval> = INTERVALOID,
        slot: i32 = INT4OID,
        now: TimestampWithTimeZone = TIMESTAMPTZOID,
    }
}

/// What [`claim_in_slot`] did.
enum InSlot {
    /// It decided the claim: claimed an item, or found nothing due.
    Decided(ClaimOutcome),
    /// It tried the slot its backend last filled, and found it held or
    /// busy (the worker holds that item still, or another claim took the
    /// slot since), or the limits changed: the general steps run, and the
    /// slot they give is not remembered, so the next claim runs them too
    /// (a worker that claims again before it finishes pays for one miss in
    /// two claims, not one in each).
    Missed,
    /// It had no slot to try (no hint, or a lapsed lease is due).
    NotTried,
}

/// The one-item claim of a queue whose only limit is its concurrency, in
/// the common case (nothing lapsed, the slot this backend's previous claim
/// of the queue filled is free again: its own finish freed it): the ready
/// probe, that slot's lock tried, and [`CLAIM_IN_SLOT`]. A plain one-item
/// claim runs the same probe and one statement of the same shape. Releases
/// the slot's lock when it claims nothing.
fn claim_in_slot(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    held: &mut SlotLocks,
) -> Result<InSlot> {
    let Some((slot, concurrency)) = HINTS.with(|hints| {
        hints
            .borrow()
            .get(queue)
            .and_then(|hint| Some((hint.last?, hint.concurrency)))
    }) else {
        return Ok(InSlot::NotTried);
    };
    let now = crate::store::sql::server_clock()?;
    match ready(client, queue, now)? {
        (false, false) => return Ok(InSlot::Decided(ClaimOutcome::default())),
        (true, _) => return Ok(InSlot::NotTried),
        (false, true) => {}
    }
    if slot > concurrency || !try_lock(&slot_lock(queue, slot)) {
        forget_slot(queue);
        return Ok(InSlot::Missed);
    }
    let outcome = plans::run(
        client,
        &CLAIM_IN_SLOT,
        SlotClaimParams {
            queue,
            owner,
            lease,
            slot,
            now,
        },
        |rows| take::read_claim_result(queue, rows),
    )?;
    held.taken.push(slot);
    if outcome.claimed.is_empty() {
        forget_slot(queue);
        return Ok(InSlot::Missed);
    }
    held.given.push(slot);
    Ok(InSlot::Decided(outcome))
}

/// After a miss of [`claim_in_slot`]: no slot to try next time.
fn forget_slot(queue: &str) {
    HINTS.with(|hints| {
        if let Some(hint) = hints.borrow_mut().get_mut(queue) {
            hint.last = None;
        }
    });
}

/// The slot this backend's claim of `queue` just gave an item.
fn remember_slot(queue: &str, slot: i32) {
    HINTS.with(|hints| {
        if let Some(hint) = hints.borrow_mut().get_mut(queue) {
            hint.last = Some(slot);
        }
    });
}

/// The claim of a queue with groups or limits (`settings`): what `pick`
/// names, for `owner` under `lease`, by the steps of the module comment.
/// The result as [`crate::verbs::claim`]'s statements give it.
pub(crate) fn claim(
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    pick: Pick<'_>,
    settings: Settings,
) -> Result<ClaimOutcome> {
    needs_read_committed(queue)?;
    let slotted = settings.limited && schema_has_slots();
    let legacy = settings.limited && !slotted;
    if slotted && !share_slots(queue) {
        // A `work_limit` of the queue is under way.
        return Ok(ClaimOutcome::default());
    }
    if legacy {
        if !try_lock(&limit_lock(queue)) {
            return Ok(ClaimOutcome::default());
        }
        // Held to the end of the transaction: a prepared one would keep it
        // until COMMIT PREPARED, and the queue's claims would get nothing.
        crate::backend::xact::limit_lock_held(queue);
    }
    let max_items = match pick {
        Pick::Queue(n) => n,
        Pick::Key(_) => 1,
    };
    let mut held = SlotLocks::default();
    let outcome = Spi::connect_mut(|client| {
        // Nothing to take (LOCK_SLOTS or `take::ready` tells): no slot is
        // locked for nothing (a long poll re-checks often, and a locked slot
        // is one the other claims of the queue skip), and no pick walks the
        // queue's future items.
        let mut slots = None;
        if slotted && !settings.grouped && matches!(pick, Pick::Queue(1)) {
            match claim_in_slot(client, queue, owner, lease, &mut held)? {
                InSlot::Decided(outcome) => return Ok(outcome),
                InSlot::Missed => held.missed = true,
                InSlot::NotTried => {}
            }
        }
        let (due, items, rate) = if slotted {
            let got = lock_slots(client, queue, max_items, crate::store::sql::server_clock()?)?;
            remember_limits(queue, got.as_ref());
            if let Some(locked) = &got {
                held.taken.extend(&locked.low);
            }
            match got {
                Some(locked) if !locked.lapsed && !locked.due => {
                    return Ok(ClaimOutcome::default());
                }
                Some(locked)
                    if !locked.has_retired
                        && !locked.lapsed
                        && !settings.grouped
                        && matches!(pick, Pick::Queue(_)) =>
                {
                    return fast_take(client, queue, owner, lease, max_items, locked, &mut held);
                }
                Some(locked) => {
                    let taken = verify_slots(client, queue, locked)?;
                    let (due, items) = taken.allowance(max_items);
                    slots = Some(taken);
                    (due, items, false)
                }
                // The limits were lifted: claim as a queue without them.
                None => (max_items, max_items, false),
            }
        } else if ready(client, queue, crate::store::sql::server_clock()?)? == (false, false) {
            return Ok(ClaimOutcome::default());
        } else if legacy {
            // Read after the limit lock: the window's times grow with the
            // claims.
            legacy_allowance(client, queue, max_items, crate::store::sql::server_clock()?)?
        } else {
            (max_items, max_items, false)
        };
        let (outcome, now) = if items == 0 {
            (ClaimOutcome::default(), crate::store::sql::server_clock()?)
        } else {
            pick_and_take(client, queue, owner, lease, pick, due, items)?
        };
        if let Some(slots) = slots {
            let claimed: Vec<i64> = outcome.claimed.iter().map(|row| row.0).collect();
            let lapsed: HashSet<i64> = outcome
                .lost
                .iter()
                .filter(|lost| !lost.dead_lettered)
                .map(|lost| lost.id)
                .collect();
            use_slots(client, queue, slots, &claimed, &lapsed, now, &mut held)?;
        }
        if legacy && !outcome.claimed.is_empty() {
            // Claims of a limited queue take turns on its limit lock, which
            // this claim holds to its commit; a claim that found it held
            // went back to waiting. Pass the turn on: one long poll of the
            // queue is woken at this commit and claims next, if the limits
            // still allow.
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
    })?;
    if slotted {
        held.release(queue);
    }
    Ok(outcome)
}

/// The concurrency slots one claim call locked and gave items (or moved
/// retired items into): what it took and did not give is released when
/// the call ends, and the queue's slots lock too if it gave none, so that
/// a claim that got nothing, or fewer items than slots, in a transaction
/// left open (or prepared) holds no slot another claim could use and
/// keeps no `work_limit` waiting. A lapsed lease claimed anew keeps the
/// slot it holds and needs neither. Each release undoes this call's own
/// acquisition only: a lock the transaction held before stays held.
#[derive(Default)]
struct SlotLocks {
    /// Slots whose locks this call took.
    taken: Vec<i32>,
    /// Slots this call gave an item.
    given: Vec<i32>,
    /// Whether this call's [`claim_in_slot`] found its slot taken (the
    /// slot the general steps give then is not kept as the next hint).
    missed: bool,
}

impl SlotLocks {
    /// Release what this call took and did not use (see the type).
    fn release(self, queue: &str) {
        for slot in self.taken.iter().filter(|slot| !self.given.contains(slot)) {
            unlock_slot(queue, *slot, EXCLUSIVE);
        }
        if self.given.is_empty() {
            // The share lock `share_slots` took in this call.
            unlock_slot(queue, 0, SLOTS_SHARED);
        }
    }
}

/// Steps 3 and 4 of a claim of `queue` for `owner` under `lease`: what
/// `pick` names, at most `due` pending items and `items` items in all; the
/// result as [`crate::verbs::claim`]'s statements give it, and the claim's time
/// (each item's `claimed_at`, which the rate window counts from).
fn pick_and_take(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    owner: &str,
    lease: Option<Interval>,
    pick: Pick<'_>,
    due: i32,
    items: i32,
) -> Result<(ClaimOutcome, TimestampWithTimeZone)> {
    let now = crate::store::sql::server_clock()?;
    let picked: Vec<(i64, Option<String>)> = match pick {
        Pick::Queue(_) => plans::run(
            client,
            by_heads(&PICK),
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
            by_heads(&PICK_KEY),
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
    let picked: Vec<(i64, Option<String>)> = picked
        .into_iter()
        .filter(|(_, group)| match group {
            None => true,
            // One item per group in a batch, and only a group whose
            // lock is free.
            Some(group) => groups.insert(group.clone()) && try_lock(&group_lock(queue, group)),
        })
        .collect();
    if picked.is_empty() {
        return Ok((ClaimOutcome::default(), now));
    }
    let ids: Vec<i64> = picked.iter().map(|(id, _)| *id).collect();
    // The claim's time (`claimed_at`, the lease's start, the rate
    // window's entry) is read after the slots were counted and the
    // groups locked: whatever freed a slot or a group committed
    // before it. An item picked at the earlier time is claimable at
    // this one too.
    let now = crate::store::sql::server_clock()?;
    let heads = schema_has_heads();
    let outcome = plans::run(
        client,
        by_heads(&TAKE),
        TakeParams {
            queue,
            owner,
            lease,
            ids,
            now,
        },
        |rows| take::read_claim_result(queue, rows),
    )?;
    if heads {
        // The groups this claim served get their next heads, in a new
        // snapshot (this claim's items are claimed in it), under the group
        // locks this transaction holds.
        let served: Vec<String> = picked
            .into_iter()
            .filter(|(id, _)| outcome.claimed.iter().any(|row| row.0 == *id))
            .filter_map(|(_, group)| group)
            .collect();
        if !served.is_empty() {
            normalize(client, queue, served, Some(now), None)?;
        }
    }
    Ok((outcome, now))
}

/// [`NORMALIZE`] `groups` of `queue` (this transaction holds their group
/// locks): `served` the claim's time if a claim served them, `cancelled`
/// an item this transaction cancelled.
fn normalize(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    groups: Vec<String>,
    served: Option<TimestampWithTimeZone>,
    cancelled: Option<i64>,
) -> Result<()> {
    plans::run(
        client,
        &NORMALIZE,
        NormalizeParams {
            queue,
            groups,
            served,
            cancelled,
        },
        |_| Ok(()),
    )
}

// The group of item `$1`, if it has one.
static GROUP_OF: Statement<ItemParams> = Statement::new(
    r#"
SELECT i.group_key FROM workfence.items AS i WHERE i.id OPERATOR(pg_catalog.=) $1
"#,
);

params! {
    /// `$1` item id.
    struct ItemParams {
        id: i64 = INT8OID,
    }
}

/// After an operator changed item `id` of `queue` in a way that may change
/// its group's first pending item (a cancel, `cancelled` true, or a
/// reschedule): take the group's lock, waiting for the claim of the group
/// that holds it, and make the group's first pending item its head
/// ([`NORMALIZE`]) in a snapshot taken after the lock was granted. Every
/// claim that makes heads holds the lock, so one that ran before sees
/// nothing of this change and one that runs after sees all of it. Nothing
/// for an item in no group, or a schema before 0.12.0.
///
/// Errors: 25000 under REPEATABLE READ or SERIALIZABLE for an item in a
/// group (the transaction, and the change, roll back): their snapshot, taken
/// at the transaction's first statement, may predate changes of the group
/// that the new head depends on (the model in `harness/tests/client/model.rs`,
/// `Sql::CancelInTransactionSnapshot`, strands a group that way).
pub fn regroup(queue: &str, id: i64, cancelled: bool) -> Result<()> {
    if !schema_has_heads() {
        return Ok(());
    }
    Spi::connect_mut(|client| {
        let group = plans::run(client, &GROUP_OF, ItemParams { id }, |rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(rows.first().get::<String>(1)?)
        })?;
        let Some(group) = group else {
            return Ok(());
        };
        let verb = if cancelled {
            "work_cancel"
        } else {
            "work_reschedule"
        };
        lock_group_before_change(queue, &group, verb)?;
        normalize(client, queue, vec![group], None, cancelled.then_some(id))
    })
}

/// Before a change of a pending item of `group` of `queue` that may move
/// its group's first pending item (`work_enqueue`'s `on_conflict`,
/// [`crate::verbs::life`]; and [`regroup`], for `verb` `work_cancel` and
/// `work_reschedule`): take the group's lock, waiting for the claim of
/// the group that holds it, before the item's row is locked, so that no
/// claim of the group waits for the row while holding the lock (a claim's
/// [`NORMALIZE`] that waited for a row updated meanwhile matched nothing,
/// and the group stranded behind an item left `behind`). The caller then
/// makes the heads again with [`regroup`] under the same lock. Nothing for
/// a schema before 0.12.0.
///
/// Errors: 25000 under REPEATABLE READ or SERIALIZABLE (as [`regroup`]).
pub fn lock_group_before_change(queue: &str, group: &str, verb: &'static str) -> Result<()> {
    if !schema_has_heads() {
        return Ok(());
    }
    // SAFETY: a plain int global of the backend.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(WorkfenceError::GroupChangeNeedsReadCommitted {
            verb,
            queue: queue.to_owned(),
        });
    }
    lock(&group_lock(queue, group));
    Ok(())
}

/// Take the group lock of `group` of `queue` if it is free, to the end of
/// the transaction (an enqueue's commit, [`crate::backend::xact`]).
pub fn try_group_lock(queue: &str, group: &str) -> bool {
    try_lock(&group_lock(queue, group))
}

/// Take `tag` exclusively to the end of the transaction, waiting for it
/// (deadlock detection, `lock_timeout` and cancellation apply).
fn lock(tag: &pg_sys::LOCKTAG) {
    // SAFETY: a transaction-scoped lock of the current transaction.
    unsafe {
        pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, false);
    }
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
/// ([`crate::backend::xact::grouped_pending`]). Nothing is locked or written before
/// the commit: until 0.11.0 the mark took the queue's pause lock and its
/// settings row at once, and a producer that left such a transaction open
/// (or idle) stopped every claim and operator call of the queue (issue 30).
pub fn enqueue_grouped(queue: &str) -> Result<()> {
    if paused::settings_unlocked(queue)?.grouped {
        return Ok(());
    }
    crate::backend::xact::mark_grouped_at_commit(queue);
    Ok(())
}

/// At the commit of a transaction that enqueued `queue`'s first grouped
/// item: mark the queue grouped under its pause lock, with the invalidation
/// a pause sends (see [`crate::backend::paused`]), both held or sent only for the
/// moment of the commit. Runs as the extension's owner, with an active
/// snapshot ([`crate::backend::xact`]).
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
// without a rate), `$5` per_group. `current`: from 0.12.0, whose rate
// window is in the rate slots (SYNC_RATE) and which has per_group;
// `legacy`: before, where the window's claims are kept in the row (a new
// rate counts them) and groups are serial (`$5` unused: only the SQL
// function of 0.12.0 passes a per_group).
static LIMIT: Versioned<LimitParams> = Versioned {
    current: Statement::new(
        r#"
INSERT INTO workfence.queues AS q (queue, concurrency, rate, per, per_group)
VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (queue) DO UPDATE
   SET concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate, per = EXCLUDED.per,
       per_group = EXCLUDED.per_group
"#,
    ),
    legacy: Statement::new(
        r#"
INSERT INTO workfence.queues AS q (queue, concurrency, rate, per) VALUES ($1, $2, $3, $4)
    ON CONFLICT (queue) DO UPDATE
   SET concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate, per = EXCLUDED.per,
       rate_log = CASE WHEN EXCLUDED.rate IS NULL THEN NULL ELSE q.rate_log END
"#,
    ),
};

// The slot rows of queue `$1`, all locked by `work_limit` before it
// rewrites them: it waits for the claims that hold rate slot rows (a claim
// that gave no concurrency slot keeps no slots lock; see SlotLocks).
static SYNC_LOCK: Statement<QueueOnly> = Statement::new(
    r#"
SELECT FROM workfence.queue_slots AS s
 WHERE s.queue OPERATOR(pg_catalog.=) $1
   FOR UPDATE
"#,
);

// Queue `$1`'s concurrency slots for limit `$2` (NULL: none), part 1: the
// slot rows above the limit go (an item that holds one keeps its number,
// retired), the slots 1..`$2` that are missing come.
static SYNC_CONCURRENCY: Statement<SyncParams> = Statement::new(
    r#"
WITH gone AS (
    DELETE FROM workfence.queue_slots AS s
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
       AND ($2 IS NULL OR s.slot OPERATOR(pg_catalog.>) $2)
)
INSERT INTO workfence.queue_slots (queue, kind, slot)
SELECT $1, 'c', g.n FROM pg_catalog.generate_series(1, $2) AS g(n)
    ON CONFLICT (queue, kind, slot) DO NOTHING
"#,
);

// Part 2: every claimed item of queue `$1` that holds no concurrency slot
// of its own at or below the new limit `$2` (it was claimed while the
// queue had no limit, or shares its slot number with an item of a smaller
// id, claimed under an earlier limit and kept since) is given a free slot,
// in slot order, or when none is left a retired slot above the limit,
// which claims then absorb (see the module comment). An item above the
// limit keeps its slot: it is retired already. Waits for the transactions
// that hold such an item's row locked (a worker's `work_assert`).
static SYNC_CLAIMED: Statement<SyncParams> = Statement::new(
    r#"
WITH claimed AS (
    SELECT i.id, i.slot
      FROM workfence.items AS i
     WHERE i.queue OPERATOR(pg_catalog.=) $1
       AND i.state OPERATOR(pg_catalog.=) 'claimed'::workfence.item_state
), orphan AS (
    SELECT o.id, o.n
      FROM pg_catalog.unnest(ARRAY(
               SELECT c.id
                 FROM claimed AS c
                WHERE c.slot IS NULL
                   OR (c.slot OPERATOR(pg_catalog.<=) $2
                       AND EXISTS (SELECT FROM claimed AS d
                                    WHERE d.slot OPERATOR(pg_catalog.=) c.slot
                                      AND d.id OPERATOR(pg_catalog.<) c.id))
                ORDER BY c.id)) WITH ORDINALITY AS o(id, n)
), free AS (
    SELECT f.slot, f.n
      FROM pg_catalog.unnest(ARRAY(
               SELECT s.slot
                 FROM workfence.queue_slots AS s
                WHERE s.queue OPERATOR(pg_catalog.=) $1
                  AND s.kind OPERATOR(pg_catalog.=) 'c'::"char"
                  AND NOT EXISTS (SELECT FROM claimed AS c
                                   WHERE c.slot OPERATOR(pg_catalog.=) s.slot)
                ORDER BY s.slot)) WITH ORDINALITY AS f(slot, n)
), spare AS (
    SELECT pg_catalog.count(*) AS n FROM free
), top AS (
    SELECT GREATEST($2, (SELECT c.slot FROM claimed AS c WHERE c.slot IS NOT NULL
                          ORDER BY c.slot DESC LIMIT 1)) AS slot
)
UPDATE workfence.items AS i
   SET slot = COALESCE(f.slot, (top.slot OPERATOR(pg_catalog.+) (o.n OPERATOR(pg_catalog.-) spare.n))::pg_catalog.int4)
  FROM orphan AS o
 CROSS JOIN spare
 CROSS JOIN top
  LEFT JOIN free AS f ON f.n OPERATOR(pg_catalog.=) o.n
 WHERE i.id OPERATOR(pg_catalog.=) o.id
"#,
);

// Queue `$1`'s rate slots for rate `$2` (NULL: none): slots 1..`$2`, the
// window's most recent claims kept (a rate lowered below the claims in the
// window holds new claims until enough have left it, as a sliding window
// does).
static SYNC_RATE: Statement<SyncParams> = Statement::new(
    r#"
WITH old AS (
    DELETE FROM workfence.queue_slots AS s
     WHERE s.queue OPERATOR(pg_catalog.=) $1
       AND s.kind OPERATOR(pg_catalog.=) 'r'::"char"
    RETURNING s.used_at
), kept AS (
    SELECT k.used_at, k.n
      FROM pg_catalog.unnest(ARRAY(SELECT o.used_at FROM old AS o
                                    ORDER BY o.used_at DESC NULLS LAST)) WITH ORDINALITY AS k(used_at, n)
)
INSERT INTO workfence.queue_slots (queue, kind, slot, used_at)
SELECT $1, 'r', g.n, k.used_at
  FROM pg_catalog.generate_series(1, $2) AS g(n)
  LEFT JOIN kept AS k ON k.n OPERATOR(pg_catalog.=) g.n
"#,
);

params! {
    /// `$1` queue, `$2` the limit (NULL: none).
    struct SyncParams<'a> {
        queue: &'a str = TEXTOID,
        limit: Option<i32> = INT4OID,
    }
}

/// After `work_limit` set `concurrency` and `rate` on `queue`, holding the
/// queue's slots lock exclusively: its slots as the new limits want them
/// (see the module comment).
fn sync_slots(
    client: &mut pgrx::spi::SpiClient<'_>,
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
) -> Result<()> {
    plans::run(client, &SYNC_LOCK, QueueOnly { queue }, |_| Ok(()))?;
    let sync = |client: &mut pgrx::spi::SpiClient<'_>, statement, limit| {
        plans::run(client, statement, SyncParams { queue, limit }, |_| Ok(()))
    };
    sync(client, &SYNC_CONCURRENCY, concurrency)?;
    if concurrency.is_some() {
        sync(client, &SYNC_CLAIMED, concurrency)?;
    }
    sync(client, &SYNC_RATE, rate)
}

params! {
    /// `$1` queue, `$2` concurrency, `$3` rate, `$4` per, `$5` per_group.
    struct LimitParams<'a> {
        queue: &'a str = TEXTOID,
        concurrency: Option<i32> = INT4OID,
        rate: Option<i32> = INT4OID,
        per: Option<Interval> = INTERVALOID,
        per_group: Option<i32> = INT4OID,
    }
}

/// Limit how much of `queue` is claimed: at most `concurrency` items
/// claimed at once, at most `rate` items handed out per `per`, at most
/// `per_group` items of one group claimed at once.
///
/// SQL: `workfence.work_limit(queue text, concurrency int DEFAULT NULL, rate
/// int DEFAULT NULL, per interval DEFAULT '1 second', per_group int DEFAULT
/// NULL) RETURNS void`. A call sets all of them: NULL lifts a limit;
/// `work_limit(queue)` lifts every one. Every session sees the limits from
/// its next claim after the commit; every claimer long-polling the queue is
/// woken then. The limits are shown in `work_queue_stats`.
///
/// - `concurrency` (1 to 10,000): claims hand out an item only while fewer
///   than `concurrency` items of the queue are claimed. A lapsed lease keeps
///   its slot until a claim takes the item anew (in that slot) or
///   dead-letters it. Lowering the limit below what is claimed takes nothing
///   back: claims wait until enough items are finished.
/// - `rate` (1 to 10,000) per `per` (more than 0, at most 1 day): at most
///   `rate` items handed out in any window of length `per` (a sliding window
///   by the server's clock; a lapsed lease claimed anew counts).
/// - `per_group` (1 to 10,000, from 0.12.0): at most this many items of one
///   `group_key` claimed at once (a lapsed lease keeps its place, as for
///   `concurrency`); a group's items are still first claimed in claim order,
///   one per claim call. NULL (the default) is 1: serial groups, as before
///   0.12.0. Lowering it takes nothing back either. Claims serve the groups
///   round-robin: each group has one item in line at a time (its head),
///   and a group a claim just served puts its next head behind the heads
///   that were waiting (see [`crate::verbs::flow`]), so a group with a long backlog
///   never keeps another group's first item waiting behind its own.
///
/// Claimers never wait on each other: a claim that would exceed a limit
/// returns fewer rows or none. From 0.12.0 each item a claim hands out
/// takes a slot (a lock per concurrency slot, a row of
/// `workfence.queue_slots` `FOR UPDATE SKIP LOCKED` per rate slot; see the
/// module comment), held to the claim's commit as its items are: claims of
/// one queue run side by side, and a claim in a long or prepared
/// transaction holds only its own slots, at most half of
/// `max_locks_per_transaction` concurrency slots a call (32 by default:
/// each is an entry of the server's shared lock table; a batch claim
/// returns fewer rows beyond that). The call itself waits for the
/// claims of the queue in flight at that moment (and new ones hand out
/// nothing until it commits), then rewrites the slots
/// (lowering a limit takes nothing back: claims wait until fewer items than
/// the new limit are claimed). (Oban's and River's queue limits are the
/// model; per-key concurrency is Solid Queue's `limits_concurrency to:`,
/// River Pro's partitioned limits.)
///
/// Errors: 22004 for a NULL queue or per; 22023 for a bad queue (see
/// `work_enqueue`), a concurrency, rate or per_group outside 1..10000, a
/// per not in (0, 1 day]; 42501 (insufficient_privilege) when queue grants
/// are enforced and the session's role has no operate grant covering the
/// queue (see `crate::access::grants`).
#[pg_extern(
    name = "work_limit",
    volatile,
    parallel_unsafe,
    requires = ["bootstrap"]
)]
pub fn work_limit_per_group(
    queue: Option<String>,
    concurrency: default!(Option<i32>, "NULL"),
    rate: default!(Option<i32>, "NULL"),
    per: default!(Option<Interval>, "'1 second'"),
    per_group: default!(Option<i32>, "NULL"),
) {
    limit(queue, concurrency, rate, per, per_group).or_report()
}

/// The 4-argument `work_limit` of versions 0.10.0 and 0.11.0 (no
/// `per_group`), kept as the C symbol `work_limit_wrapper` that their
/// install scripts bind, so that a database not yet updated keeps working
/// with this library, and a call that resolved the old function before
/// `ALTER EXTENSION pg_workfence UPDATE` renamed it
/// (`work_limit_retired_0_11_0`) still runs. Not part of this version's
/// SQL. It sets per_group to NULL, as the 0.12.0 call without it does.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn work_limit(
    queue: Option<String>,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: Option<Interval>,
) {
    limit(queue, concurrency, rate, per, None).or_report()
}

fn limit(
    queue: Option<String>,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: Option<Interval>,
    per_group: Option<i32>,
) -> Result<()> {
    let queue = validate::queue(queue)?;
    let concurrency = validate::limit("concurrency", concurrency)?;
    let rate = validate::limit("rate", rate)?;
    let per_group = validate::per_group(per_group)?;
    validate::per(per.map(Into::into))?;
    grants::check(Capability::Operate, &queue)?;
    paused::changing(&queue);
    let slotted = schema_has_slots();
    if slotted {
        // Waits for the claims in flight that gave slots (each holds the
        // queue's slots lock in share mode to its end) and holds off new
        // ones until this commits ([`sync_slots`]); taken before the
        // queue's row is written, so that a transaction that claimed and
        // then changes the queue's settings (a pause) waits for this call
        // rather than deadlock with it.
        hold_slots(&queue);
    }
    Spi::connect_mut(|client| {
        plans::run(
            client,
            if slotted {
                &LIMIT.current
            } else {
                &LIMIT.legacy
            },
            LimitParams {
                queue: &queue,
                concurrency,
                rate,
                per: rate.and(per),
                per_group,
            },
            |_| Ok(()),
        )?;
        if slotted {
            sync_slots(client, &queue, concurrency, rate)?;
        }
        Ok::<(), WorkfenceError>(())
    })?;
    paused::changed();
    wait::wake_after_commit(&queue, u32::MAX);
    Ok(())
}
