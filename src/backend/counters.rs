//! Per-queue cumulative counters and histograms, in shared memory: what
//! happened to a queue's items since the server started
//! (`work_queue_counters`, `/metrics`), and the fencing counters
//! `work_queue_stats.refused` and `.lapsed`.
//!
//! Why shared memory and not a table: a count must not write, lock or wait
//! on the path it counts. A counter row would be one more row every claim
//! and finish of a queue locks (serialising them), and a refusal must not
//! wait behind the current holder's transaction. So the counts are kept as
//! PostgreSQL keeps its own cumulative statistics (`pg_stat_*`, and
//! pg_stat_statements' entries): in shared memory, since the server started
//! (a restart or crash sets them back to zero; Prometheus' `rate()` and
//! `increase()` treat a counter that goes down as a reset).
//!
//! What counts when:
//! - **Refusals** count at once, whether or not the caller's transaction
//!   commits: a refused call with a stale token is a refusal either way.
//! - **Everything else** ([`Event`], and the two histograms) counts when
//!   the transaction that did it commits, as pgstat's transactional counts
//!   do: a backend collects the counts of its transaction in local memory
//!   ([`PENDING`], each with the subtransaction that counted it, so a
//!   `ROLLBACK TO SAVEPOINT` or a failed exception block drops its share)
//!   and adds them to the shared table at commit, under one exclusive
//!   acquisition of the table's lock per transaction (not per item). A
//!   transaction that rolls back counts nothing. A prepared transaction's
//!   counts are added when it is prepared (`COMMIT PREPARED` runs no
//!   extension code), so a `ROLLBACK PREPARED` leaves them counted.
//!
//! The histograms have fixed buckets ([`BOUNDS_MICROS`], in the manner of
//! Prometheus' client libraries: an observation adds one to the first
//! bucket whose upper bound it does not exceed, and to the sum); they are
//! read out cumulative, as Prometheus' `_bucket{le=...}` series are.
//!
//! Shared memory can only be set aside while the postmaster loads
//! `shared_preload_libraries`; without the library there, nothing is
//! counted, [`queue_counters`] returns no row (`work_queue_stats` shows
//! NULL) and `work_queue_counters` is empty.
//!
//! The table holds [`SLOTS`] (database, queue) pairs for the whole server,
//! one LWLock over all of them. A queue that finds the table full is not
//! counted, and from then on queues absent from the table read as NULL
//! (unknown) rather than zero.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::lwlock::PgLwLock;
use pgrx::pg_shmem_init;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;

use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::base::error::{OrReport, Result};

/// How many (database, queue) pairs the server counts for.
pub const SLOTS: usize = 1024;

/// What a queue's items went through, each counted per item
/// (`work_queue_counters` has a column of each name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// An item inserted by `work_enqueue` (or a schedule's fire), or a
    /// finished item sent to run again by `on_conflict`.
    Enqueued,
    /// An item handed out by a claim (a lapsed lease claimed anew too).
    Claimed,
    /// An item finished (`work_finish`, a pair of `work_finish_many`, the
    /// fused finish).
    Done,
    /// An item that became failed: a final `work_fail`, or a dead letter
    /// (a lapsed lease on its final attempt).
    Failed,
    /// A failed attempt sent back to pending for another (`work_fail` with
    /// attempts left, the fused fail; and an operator's `work_retry`).
    Retried,
    /// A claim handed back with `work_release`.
    Released,
    /// An item withdrawn with `work_cancel`.
    Cancelled,
    /// A call refused for a stale token (counted at once).
    Refused,
    /// A lapsed lease claimed anew.
    Lapsed,
}

/// How many [`Event`]s there are.
pub const EVENTS: usize = 9;

/// The histograms' upper bounds, in microseconds; a last, unbounded
/// bucket follows (`le="+Inf"`). From 5 ms to an hour: a job queue's waits
/// and runs span seconds to hours, where Prometheus' default buckets (5 ms
/// to 10 s) would put most of them in `+Inf`.
pub const BOUNDS_MICROS: [i64; 16] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    300_000_000,
    900_000_000,
    3_600_000_000,
];

/// Buckets per histogram: one per bound, and `+Inf`.
pub const BUCKETS: usize = BOUNDS_MICROS.len() + 1;

/// A histogram of durations: observations per bucket (not cumulative) and
/// their sum in microseconds.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Histogram {
    buckets: [u64; BUCKETS],
    sum_micros: u64,
}

impl Histogram {
    const EMPTY: Histogram = Histogram {
        buckets: [0; BUCKETS],
        sum_micros: 0,
    };

    fn observe(&mut self, micros: i64) {
        let micros = micros.max(0);
        let bucket = BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[bucket] = self.buckets[bucket].saturating_add(1);
        self.sum_micros = self.sum_micros.saturating_add(micros as u64);
    }

    fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine = mine.saturating_add(theirs);
        }
        self.sum_micros = self.sum_micros.saturating_add(other.sum_micros);
    }

    /// The buckets as Prometheus reads them: each the count of
    /// observations at or below its bound (the last is the total).
    fn cumulative(&self) -> Vec<i64> {
        self.buckets
            .iter()
            .scan(0u64, |total, &n| {
                *total = total.saturating_add(n);
                Some(i64::try_from(*total).unwrap_or(i64::MAX))
            })
            .collect()
    }

    fn sum_seconds(&self) -> f64 {
        self.sum_micros as f64 / 1e6
    }
}

/// What one queue went through: [`Event`] counts and the two histograms.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Counts {
    events: [u64; EVENTS],
    /// Time in queue: from an item's `run_at` to its claim.
    waited: Histogram,
    /// Run time: from a claim to the run's finish, failure or release.
    ran: Histogram,
}

impl Counts {
    const ZERO: Counts = Counts {
        events: [0; EVENTS],
        waited: Histogram::EMPTY,
        ran: Histogram::EMPTY,
    };

    fn add(&mut self, other: &Counts) {
        for (mine, theirs) in self.events.iter_mut().zip(other.events) {
            *mine = mine.saturating_add(theirs);
        }
        self.waited.add(&other.waited);
        self.ran.add(&other.ran);
    }
}

/// One counted queue. `database == 0` marks a free slot.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// The database's OID.
    database: u32,
    /// How many bytes of `name` are the queue's name.
    len: u8,
    /// The queue's name (at most [`validate::QUEUE_MAX_BYTES`] bytes).
    name: [u8; validate::QUEUE_MAX_BYTES],
    counts: Counts,
}

impl Slot {
    const FREE: Slot = Slot {
        database: 0,
        len: 0,
        name: [0; validate::QUEUE_MAX_BYTES],
        counts: Counts::ZERO,
    };

    fn is(&self, database: u32, name: &[u8]) -> bool {
        self.database == database && &self.name[..usize::from(self.len)] == name
    }

    fn queue(&self) -> String {
        String::from_utf8_lossy(&self.name[..usize::from(self.len)]).into_owned()
    }
}

/// The counters of every queue the server has counted for, an open-addressed
/// table (linear probing from the queue's `hashtext`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Table {
    slots: [Slot; SLOTS],
    /// A queue once found the table full: absent queues are unknown, not zero.
    full: bool,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: [Slot::FREE; SLOTS],
            full: false,
        }
    }
}

// SAFETY: plain old data (integers and byte arrays), no pointers.
unsafe impl PGRXSharedMemory for Slot {}
// SAFETY: as above.
unsafe impl PGRXSharedMemory for Table {}

static TABLE: PgLwLock<Table> = unsafe { PgLwLock::new(c"pg_workfence counters") };

/// Whether [`TABLE`] was set aside (the library is preloaded). Set in the
/// postmaster at load, inherited by every backend it forks.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Set the table aside when the postmaster preloads the library; called
/// from `_PG_init`.
pub fn init() {
    // SAFETY: a plain flag PostgreSQL sets while it loads the preloaded
    // libraries; read on the main thread.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        pg_shmem_init!(TABLE);
        ENABLED.store(true, Ordering::Relaxed);
    }
}

fn database() -> u32 {
    // SAFETY: a plain global of the connected backend.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

/// The slot of (database, name) in `table`, or where it would go (a free
/// slot), or `None` when it is absent and the table is full.
fn probe(table: &Table, database: u32, name: &[u8]) -> Option<usize> {
    let start = crate::pg::compat::hash_text(name) as usize % SLOTS;
    (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .find(|&i| table.slots[i].database == 0 || table.slots[i].is(database, name))
}

/// Add `counts` to `queue`'s slot of this database in `table` (taking a
/// free slot for a queue not yet counted).
fn add_to(table: &mut Table, database: u32, queue: &str, counts: &Counts) {
    let name = queue.as_bytes();
    if name.len() > validate::QUEUE_MAX_BYTES {
        // Every queue the functions accept fits; nothing else is counted.
        return;
    }
    let Some(i) = probe(table, database, name) else {
        table.full = true;
        return;
    };
    let slot = &mut table.slots[i];
    if slot.database == 0 {
        slot.database = database;
        slot.len = name.len() as u8;
        slot.name[..name.len()].copy_from_slice(name);
    }
    slot.counts.add(counts);
}

/// Count `n` calls refused for a stale token on items of `queue`, at once
/// (see the module's documentation).
pub fn refused(queue: &str, n: u64) {
    if n == 0 || !enabled() {
        return;
    }
    let mut counts = Counts::ZERO;
    counts.events[Event::Refused as usize] = n;
    add_to(&mut TABLE.exclusive(), database(), queue, &counts);
}

/// The counts of the running transaction for one queue, made in one
/// subtransaction (or one inside it).
struct Pending {
    subid: pg_sys::SubTransactionId,
    queue: String,
    counts: Counts,
}

thread_local! {
    /// This backend's counts not yet added to [`TABLE`]: those of its
    /// running transaction, added when it commits (or is prepared).
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

/// The running transaction's counts of `queue` in its current
/// subtransaction, for `f` to add to.
fn pending(queue: &str, f: impl FnOnce(&mut Counts)) {
    if !enabled() {
        return;
    }
    // SAFETY: reads this backend's transaction state.
    let subid = unsafe { pg_sys::GetCurrentSubTransactionId() };
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let entry = match pending
            .iter()
            .position(|p| p.subid == subid && p.queue == queue)
        {
            Some(i) => &mut pending[i],
            None => {
                pending.push(Pending {
                    subid,
                    queue: queue.to_owned(),
                    counts: Counts::ZERO,
                });
                pending.last_mut().expect("just pushed")
            }
        };
        f(&mut entry.counts);
    });
}

/// Count `n` items of `queue` that went through `event` in this
/// transaction, when (and if) it commits.
pub fn count(queue: &str, event: Event, n: u64) {
    if n == 0 {
        return;
    }
    pending(queue, |counts| {
        let total = &mut counts.events[event as usize];
        *total = total.saturating_add(n);
    });
}

/// Count one item of `queue` claimed `waited_micros` after it fell due
/// (time in queue), when this transaction commits.
pub fn claimed_after(queue: &str, waited_micros: i64) {
    pending(queue, |counts| {
        counts.events[Event::Claimed as usize] += 1;
        counts.waited.observe(waited_micros);
    });
}

/// Count one run of `queue` that ended with `event` (done, failed,
/// retried or released) `ran_micros` after its claim (run time), when
/// this transaction commits. A negative or unknown run time (`None`: a
/// schema before 0.12.0, whose settles do not return `claimed_at`) counts
/// the event only.
pub fn run_ended(queue: &str, event: Event, ran_micros: Option<i64>) {
    pending(queue, |counts| {
        counts.events[event as usize] += 1;
        if let Some(micros) = ran_micros {
            counts.ran.observe(micros);
        }
    });
}

/// The transaction committed (or was prepared): add its counts to the
/// shared table, under one exclusive acquisition of its lock. Cannot
/// raise (it runs in the commit callback, after the commit record).
pub fn at_commit() {
    let pending = PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
    if pending.is_empty() || !enabled() {
        return;
    }
    let database = database();
    let mut table = TABLE.exclusive();
    for p in &pending {
        add_to(&mut table, database, &p.queue, &p.counts);
    }
}

/// The transaction rolled back: its counts go.
pub fn at_abort() {
    PENDING.with(|pending| pending.borrow_mut().clear());
}

/// Subtransaction `subid` rolled back: the counts it (or one inside it,
/// whose ids are larger) made go.
pub fn at_subxact_abort(subid: pg_sys::SubTransactionId) {
    PENDING.with(|pending| pending.borrow_mut().retain(|p| p.subid < subid));
}

/// Whether anything is counted at all (the library is preloaded): the
/// token calls skip the look-up of a refused item's queue when it is not.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The counters of `queue` in this database, if they are known: `None`
/// when nothing is counted (not preloaded) or the queue is absent from a
/// table that filled up.
fn read(queue: &str) -> Option<(i64, i64)> {
    if !enabled() {
        return None;
    }
    let database = database();
    let name = queue.as_bytes();
    let table = TABLE.share();
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    match probe(&table, database, name) {
        Some(i) if table.slots[i].database != 0 => {
            let events = &table.slots[i].counts.events;
            Some((
                as_i64(events[Event::Refused as usize]),
                as_i64(events[Event::Lapsed as usize]),
            ))
        }
        _ if table.full => None,
        _ => Some((0, 0)),
    }
}

/// The fencing counters of one queue of this database, since the server
/// started.
///
/// SQL: `workfence.queue_counters(queue text) RETURNS TABLE (refused bigint,
/// lapsed bigint)`: one row, or none when nothing is counted (the library
/// is not in `shared_preload_libraries`) or the queue is unknown to a
/// counter table that filled up ([`SLOTS`] queues per server).
/// `work_queue_stats` reads it for its `refused` and `lapsed` columns;
/// grant it with the view.
///
/// - `refused`: calls of `work_renew`, `work_finish`, `work_finish_many`
///   (per pair), `work_release`, `work_fail` and `work_assert` refused for
///   a token that is not the item's current one (superseded, finished,
///   cancelled, wrong owner), counted whether or not the caller's
///   transaction commits. A token of an item that does not exist is not
///   counted (it has no queue).
/// - `lapsed`: lapsed leases claimed anew (each one superseded a token).
///
/// Errors: 22004 for a NULL queue; 22023 for a bad queue (see `work_enqueue`);
/// 42501 (insufficient_privilege) when queue grants are
/// enforced and the session's role has no read grant covering the queue
/// (see `crate::access::grants`).
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn queue_counters(
    queue: Option<String>,
) -> TableIterator<'static, (name!(refused, i64), name!(lapsed, i64))> {
    (|| -> Result<Vec<(i64, i64)>> {
        let queue = validate::queue(queue)?;
        grants::check(Capability::Read, &queue)?;
        Ok(read(&queue).into_iter().collect())
    })()
    .map(TableIterator::new)
    .or_report()
}

/// One row of [`queue_counter_rows`].
type CounterRow = (
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Vec<f64>,
    Vec<i64>,
    f64,
    Vec<i64>,
    f64,
);

/// The histograms' upper bounds in seconds, `Infinity` last.
fn bounds_seconds() -> Vec<f64> {
    BOUNDS_MICROS
        .iter()
        .map(|&micros| micros as f64 / 1e6)
        .chain(std::iter::once(f64::INFINITY))
        .collect()
}

/// Every counted queue of this database the session's role may read,
/// with what its items went through since the server started: the rows
/// of the view `work_queue_counters`.
///
/// SQL: `workfence.queue_counter_rows() RETURNS TABLE (queue text,
/// enqueued bigint, claimed bigint, done bigint, failed bigint, retried
/// bigint, released bigint, cancelled bigint, refused bigint, lapsed
/// bigint, bucket_le double precision[], time_in_queue_buckets bigint[],
/// time_in_queue_sum double precision, run_time_buckets bigint[],
/// run_time_sum double precision)`, ordered by queue. Each count is an
/// [`Event`]'s; the histograms' buckets are cumulative (Prometheus'
/// `_bucket{le}`: the count of observations at or below each bound of
/// `bucket_le`, seconds, `Infinity` last, so the last bucket is the
/// count), their sums in seconds. Time in queue: from an item's `run_at`
/// (when it fell due) to its claim, for claims of pending items (a lapsed
/// lease claimed anew is not a wait); run time: from a claim to the run's
/// finish, failure or release (a lease that lapses ends no run it can
/// time). Zero rows when nothing is counted (the library is not in
/// `shared_preload_libraries`). It reads shared memory only, under the
/// table's lock in share mode, then judges each queue against the role's
/// read grants: O(queues), whatever the number of items.
///
/// Errors: none of its own.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
#[allow(clippy::type_complexity)]
pub fn queue_counter_rows() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(enqueued, i64),
        name!(claimed, i64),
        name!(done, i64),
        name!(failed, i64),
        name!(retried, i64),
        name!(released, i64),
        name!(cancelled, i64),
        name!(refused, i64),
        name!(lapsed, i64),
        name!(bucket_le, Vec<f64>),
        name!(time_in_queue_buckets, Vec<i64>),
        name!(time_in_queue_sum, f64),
        name!(run_time_buckets, Vec<i64>),
        name!(run_time_sum, f64),
    ),
> {
    (|| -> Result<Vec<CounterRow>> {
        if !enabled() {
            return Ok(Vec::new());
        }
        let database = database();
        // Copied out under the lock, judged after it: a grant look-up may
        // read the catalog.
        let mut counted: Vec<(String, Counts)> = {
            let table = TABLE.share();
            table
                .slots
                .iter()
                .filter(|slot| slot.database == database)
                .map(|slot| (slot.queue(), slot.counts))
                .collect()
        };
        counted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let scope = grants::scope(Capability::Read)?;
        let bounds = bounds_seconds();
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(counted
            .into_iter()
            .filter(|(queue, _)| scope.allows(queue))
            .map(|(queue, c)| {
                let e = |event: Event| as_i64(c.events[event as usize]);
                (
                    queue,
                    e(Event::Enqueued),
                    e(Event::Claimed),
                    e(Event::Done),
                    e(Event::Failed),
                    e(Event::Retried),
                    e(Event::Released),
                    e(Event::Cancelled),
                    e(Event::Refused),
                    e(Event::Lapsed),
                    bounds.clone(),
                    c.waited.cumulative(),
                    c.waited.sum_seconds(),
                    c.ran.cumulative(),
                    c.ran.sum_seconds(),
                )
            })
            .collect())
    })()
    .map(TableIterator::new)
    .or_report()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let mut h = Histogram::EMPTY;
        h.observe(0);
        h.observe(5_000); // exactly the first bound: le="0.005"
        h.observe(5_001);
        h.observe(-3); // a clock step back counts as zero
        h.observe(i64::MAX);
        assert_eq!(h.buckets[0], 3);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[BUCKETS - 1], 1);
        let cumulative = h.cumulative();
        assert_eq!(cumulative.len(), BUCKETS);
        assert_eq!(cumulative[0], 3);
        assert_eq!(cumulative[1], 4);
        assert_eq!(*cumulative.last().unwrap(), 5);
        assert!(cumulative.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn the_bounds_rise_and_end_unbounded() {
        let bounds = bounds_seconds();
        assert_eq!(bounds.len(), BUCKETS);
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(bounds[0], 0.005);
        assert!(bounds[BUCKETS - 1].is_infinite());
    }
}
