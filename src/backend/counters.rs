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

pub use super::buckets::{BOUNDS_MICROS, BUCKETS};
use super::history::{self, Ring, RINGS};
use crate::access::grants::{self, Capability};
use crate::access::validate;
use crate::base::error::{OrReport, Result, WorkfenceError};

/// How many (database, queue) pairs the server counts for (about 600
/// bytes of shared memory each: 2.4 MB).
pub const SLOTS: usize = 4096;

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

/// An item's state (`workfence.item_state`), for the state counts: how
/// many of a queue's items are in each (`work_queue_stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ItemState {
    Pending,
    Claimed,
    Done,
    Failed,
    Cancelled,
    /// Enqueued after parents that are not all done (from 0.12.0,
    /// [`crate::verbs::workflow`]).
    Waiting,
}

/// How many [`ItemState`]s there are.
pub const STATES: usize = 6;

impl ItemState {
    /// The state named `text` (`workfence.item_state`'s labels).
    pub fn parse(text: &str) -> Option<ItemState> {
        Some(match text {
            "pending" => ItemState::Pending,
            "claimed" => ItemState::Claimed,
            "done" => ItemState::Done,
            "failed" => ItemState::Failed,
            "cancelled" => ItemState::Cancelled,
            "waiting" => ItemState::Waiting,
            _ => return None,
        })
    }
}

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
    /// Items per [`ItemState`]: in the shared table the queue's state
    /// counts (meaningful while its database's are valid, see
    /// [`Status`]), in a transaction's counts what it moved.
    items: [i64; STATES],
}

impl Counts {
    const ZERO: Counts = Counts {
        events: [0; EVENTS],
        waited: Histogram::EMPTY,
        ran: Histogram::EMPTY,
        items: [0; STATES],
    };

    /// Add the counts of `other`, but not its state counts (the caller
    /// decides where those go).
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
    /// While its database's state counts are rebuilt: what transactions
    /// that the rebuild's scan does not see moved (see [`rebuild`]).
    rebuild_add: [i64; STATES],
    /// Its last hour's ring in [`Table::rings`], plus one; 0: none (yet).
    ring: u16,
}

impl Slot {
    const FREE: Slot = Slot {
        database: 0,
        len: 0,
        name: [0; validate::QUEUE_MAX_BYTES],
        counts: Counts::ZERO,
        rebuild_add: [0; STATES],
        ring: 0,
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
    /// Whether each database's state counts are valid.
    databases: [Database; DATABASES],
    /// The rebuild in progress, if any (one at a time per server).
    building: Building,
    /// The transactions between their pre-commit and their commit
    /// callback that moved items (see [`rebuild`]).
    committing: [Committing; COMMITTERS],
    /// How many of the rings of [`super::history`] are taken (the last
    /// hour of the first [`RINGS`] queues counted, each named by its
    /// slot's `ring`).
    rings_used: u32,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: [Slot::FREE; SLOTS],
            full: false,
            databases: [Database::UNKNOWN; DATABASES],
            building: Building::NONE,
            committing: [Committing::FREE; COMMITTERS],
            rings_used: 0,
        }
    }
}

/// How many transactions may be committing at once with their moves
/// tracked (more than `max_connections` ever is): one more finds none free
/// and makes its database's state counts unknown.
const COMMITTERS: usize = 1024;

/// A transaction that moved items, from its pre-commit (before it becomes
/// visible) to its commit callback (after): a rebuild that counts it in
/// its scan marks it `skip`, so that its callback does not add it again.
/// `pid == 0` marks a free entry.
#[derive(Clone, Copy)]
#[repr(C)]
struct Committing {
    pid: i32,
    database: u32,
    xid: pg_sys::TransactionId,
    skip: bool,
}

impl Committing {
    const FREE: Committing = Committing {
        pid: 0,
        database: 0,
        xid: pg_sys::InvalidTransactionId,
        skip: false,
    };
}

/// How many databases' state counts the server keeps track of.
pub const DATABASES: usize = 64;

/// The most transactions a rebuild's snapshot may have in progress (its
/// `xip`); a rebuild that finds more gives up (the state counts stay
/// unknown and `work_queue_stats` counts the items instead).
const MAX_IN_PROGRESS: usize = 1024;

/// Where a database's state counts stand.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Status {
    /// Never rebuilt since the server started, or given up: not to be read.
    Unknown,
    /// A rebuild is counting its items ([`rebuild`]).
    Building,
    /// Rebuilt, and kept by every commit since: readable.
    Valid,
}

/// One database's [`Status`]. `database == 0` marks a free entry.
#[derive(Clone, Copy)]
#[repr(C)]
struct Database {
    database: u32,
    status: Status,
    /// The OID of `workfence.items` the counts were rebuilt from: a
    /// `DROP EXTENSION` and `CREATE EXTENSION` (a new, empty table) makes
    /// them unknown.
    items: u32,
}

impl Database {
    const UNKNOWN: Database = Database {
        database: 0,
        status: Status::Unknown,
        items: 0,
    };
}

/// The snapshot a rebuild counts with, as the commits during the rebuild
/// need it: whether their transaction is one it sees (then its count is
/// the scan's) or not (then it is added after the scan).
#[derive(Clone, Copy)]
#[repr(C)]
struct Building {
    /// The database being rebuilt; 0: none.
    database: u32,
    /// The backend rebuilding it (a rebuild whose backend is gone is taken
    /// over).
    owner: i32,
    xmin: pg_sys::TransactionId,
    xmax: pg_sys::TransactionId,
    in_progress: u32,
    xip: [pg_sys::TransactionId; MAX_IN_PROGRESS],
}

impl Building {
    const NONE: Building = Building {
        database: 0,
        owner: 0,
        xmin: pg_sys::InvalidTransactionId,
        xmax: pg_sys::InvalidTransactionId,
        in_progress: 0,
        xip: [pg_sys::InvalidTransactionId; MAX_IN_PROGRESS],
    };

    /// Whether the rebuild's snapshot sees transaction `xid` (committed):
    /// it finished before the snapshot was taken. As `XidInMVCCSnapshot`
    /// judges it, for a top-level transaction id.
    fn sees(&self, xid: pg_sys::TransactionId) -> bool {
        // SAFETY: pure comparisons of transaction ids (modulo 2^32).
        unsafe {
            if !pg_sys::TransactionIdIsNormal(xid) {
                return false;
            }
            if pg_sys::TransactionIdPrecedes(xid, self.xmin) {
                return true;
            }
            if !pg_sys::TransactionIdPrecedes(xid, self.xmax) {
                return false;
            }
        }
        !self.xip[..self.in_progress as usize].contains(&xid)
    }
}

impl Table {
    /// The status of `database`'s state counts.
    fn status(&self, database: u32) -> Status {
        self.databases
            .iter()
            .find(|d| d.database == database)
            .map_or(Status::Unknown, |d| d.status)
    }

    /// Whether `database`'s state counts are valid, and of the table
    /// `items` (the OID of `workfence.items` now).
    fn valid(&self, database: u32, items: u32) -> bool {
        self.databases
            .iter()
            .any(|d| d.database == database && d.status == Status::Valid && d.items == items)
    }

    /// Set `database`'s status (taking a free entry; with none left, it
    /// stays unknown).
    fn set_status(&mut self, database: u32, status: Status) {
        if let Some(d) = self.databases.iter_mut().find(|d| d.database == database) {
            d.status = status;
        } else if let Some(d) = self.databases.iter_mut().find(|d| d.database == 0) {
            *d = Database {
                database,
                status,
                items: 0,
            };
        }
    }

    /// Record the OID of the table `database`'s counts are of.
    fn set_items(&mut self, database: u32, items: u32) {
        if let Some(d) = self.databases.iter_mut().find(|d| d.database == database) {
            d.items = items;
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
        history::init();
        ENABLED.store(true, Ordering::Relaxed);
    }
}

pub(super) fn database() -> u32 {
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

/// The index of `queue`'s slot of this database in `table`, taken if it
/// had none; `None` when the table is full (then the queue is not
/// counted, and the database's state counts are unknown from now on).
fn slot_of(table: &mut Table, database: u32, queue: &str) -> Option<usize> {
    let name = queue.as_bytes();
    if name.len() > validate::QUEUE_MAX_BYTES {
        // Every queue the functions accept fits; nothing else is counted.
        return None;
    }
    let Some(i) = probe(table, database, name) else {
        table.full = true;
        table.set_status(database, Status::Unknown);
        return None;
    };
    let slot = &mut table.slots[i];
    if slot.database == 0 {
        slot.database = database;
        slot.len = name.len() as u8;
        slot.name[..name.len()].copy_from_slice(name);
    }
    Some(i)
}

/// Add `counts` to `queue`'s slot of this database in `table`, those of a
/// transaction `xid` committed: its events and observations, and what it
/// moved between states to the state counts, as the database's [`Status`]
/// says (while they are rebuilt, only what the rebuild's scan cannot see);
/// and, with `minute` (the commit's, [`history::minute_of`]), to the
/// queue's last hour.
fn add_to(
    table: &mut Table,
    database: u32,
    queue: &str,
    counts: &Counts,
    xid: pg_sys::TransactionId,
    skip: bool,
    minute: Option<i64>,
) {
    let Some(i) = slot_of(table, database, queue) else {
        return;
    };
    let status = if skip {
        // A rebuild's scan counted this transaction.
        Status::Unknown
    } else {
        table.status(database)
    };
    let unseen = status == Status::Building
        && table.building.database == database
        && !table.building.sees(xid);
    let slot = &mut table.slots[i];
    slot.counts.add(counts);
    for (n, moved) in counts.items.iter().enumerate() {
        match status {
            Status::Valid => slot.counts.items[n] += moved,
            Status::Building if unseen => slot.rebuild_add[n] += moved,
            _ => {}
        }
    }
    let Some(minute) = minute else {
        return;
    };
    let moved = history::Moved {
        enqueued: counts.events[Event::Enqueued as usize],
        claimed: counts.events[Event::Claimed as usize],
        done: counts.events[Event::Done as usize],
        failed: counts.events[Event::Failed as usize],
    };
    if slot.ring == 0 {
        // A queue gets its hour from a commit that charts something (a
        // purge, which moves only finished items, does not take one).
        let charted = moved.enqueued + moved.claimed + moved.done + moved.failed > 0
            || counts.items[ItemState::Pending as usize] != 0;
        if !charted || !give_ring(table, i, minute) {
            return;
        }
    }
    let slot = &table.slots[i];
    let backlog = (table.status(database) == Status::Valid)
        .then(|| slot.counts.items[ItemState::Pending as usize].max(0));
    let ring = usize::from(slot.ring) - 1;
    // SAFETY: the caller holds TABLE's lock exclusively (`table`).
    if let Some(ring) = unsafe { history::rings_mut() }.get_mut(ring) {
        ring.record(minute, moved, &counts.waited.buckets, backlog);
    }
}

/// Give slot `i` of `table` (held exclusively) a ring of the last hour: a
/// new one while some are left, else one whose newest minute left the hour
/// by minute `now` (its queue's view shows nothing of it any more), taken
/// from its queue. False when every ring holds some of the hour (more than
/// [`RINGS`] queues charted within it).
fn give_ring(table: &mut Table, i: usize, now: i64) -> bool {
    // SAFETY: the caller holds TABLE's lock exclusively (`table`).
    let rings = unsafe { history::rings_mut() };
    let taken = if (table.rings_used as usize) < rings.len() {
        table.rings_used += 1;
        table.rings_used as usize - 1
    } else {
        let Some(stale) = rings.iter().position(|r| r.stale(now)) else {
            return false;
        };
        let owner = rings[stale].owner as usize;
        if let Some(previous) = owner.checked_sub(1).and_then(|o| table.slots.get_mut(o)) {
            if usize::from(previous.ring) == stale + 1 {
                previous.ring = 0;
            }
        }
        rings[stale] = Ring::EMPTY;
        stale
    };
    rings[taken].owner = i as u32 + 1;
    // RINGS fits a u16.
    table.slots[i].ring = taken as u16 + 1;
    true
}

/// The last hour of this database's queues (`queue`: of that queue only),
/// copied out under the table's lock in share mode: the queue, its ring
/// ([`super::history`]), and its pending items now when the state counts
/// of table `items` (its OID) are valid. A queue without a ring is
/// included, with an empty one, when the state counts are valid and it has
/// items, and no queue was ever refused a ring (then it charted nothing
/// since the server started: a queue nothing moves still has its backlog).
/// Empty when nothing is counted.
fn histories(queue: Option<&str>, items: u32) -> Vec<(String, Ring, Option<i64>)> {
    if !enabled() {
        return Vec::new();
    }
    let database = database();
    let table = TABLE.share();
    let valid = table.valid(database, items);
    let complete = (table.rings_used as usize) < RINGS;
    // SAFETY: read under TABLE's lock (`table`), held to the end.
    let rings = unsafe { history::rings() };
    let ring_of = |slot: &Slot| {
        if slot.database != database {
            return None;
        }
        let pending = valid.then(|| slot.counts.items[ItemState::Pending as usize].max(0));
        match usize::from(slot.ring).checked_sub(1) {
            Some(ring) => Some((slot.queue(), *rings.get(ring)?, pending)),
            None if valid && complete && slot.counts.items.iter().any(|&n| n != 0) => {
                Some((slot.queue(), Ring::EMPTY, pending))
            }
            None => None,
        }
    };
    match queue {
        Some(queue) => probe(&table, database, queue.as_bytes())
            .and_then(|i| ring_of(&table.slots[i]))
            .into_iter()
            .collect(),
        None => table.slots.iter().filter_map(ring_of).collect(),
    }
}

/// Count `n` calls refused for a stale token on items of `queue`, at once
/// (see the module's documentation).
pub fn refused(queue: &str, n: u64) {
    if n == 0 || !enabled() {
        return;
    }
    let mut counts = Counts::ZERO;
    counts.events[Event::Refused as usize] = n;
    add_to(
        &mut TABLE.exclusive(),
        database(),
        queue,
        &counts,
        pg_sys::InvalidTransactionId,
        false,
        None,
    );
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
    /// The committing transaction's id, read before its commit
    /// ([`before_commit`]).
    static COMMITTING: std::cell::Cell<pg_sys::TransactionId> =
        const { std::cell::Cell::new(pg_sys::InvalidTransactionId) };
    /// Whether this backend holds an entry of [`Table::committing`].
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this backend is rebuilding a database's state counts.
    static REBUILDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn my_pid() -> i32 {
    // SAFETY: a plain global of the backend.
    unsafe { pg_sys::MyProcPid }
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

/// Count `n` items of `queue` that this transaction moved from state
/// `from` to state `to` (`None`: inserted, or deleted), in the state
/// counts `work_queue_stats` reads, when it commits.
pub fn moved(queue: &str, from: Option<ItemState>, to: Option<ItemState>, n: i64) {
    if n == 0 || from == to {
        return;
    }
    pending(queue, |counts| {
        if let Some(from) = from {
            counts.items[from as usize] -= n;
        }
        if let Some(to) = to {
            counts.items[to as usize] += n;
        }
    });
}

/// The transaction is about to commit (or be prepared): remember its id,
/// which [`at_commit`] files its state counts under (a rebuild must know
/// whether its scan saw the transaction).
pub fn before_commit() {
    // SAFETY: reads this backend's transaction state.
    let xid = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    COMMITTING.with(|c| c.set(xid));
    let moves = PENDING.with(|p| p.borrow().iter().any(|p| p.counts.items != [0; STATES]));
    if !moves || !enabled() {
        return;
    }
    // Before the transaction becomes visible: a rebuild that counts it in
    // its scan finds it here and marks it, so its callback skips it.
    let database = database();
    let mut table = TABLE.exclusive();
    match table.committing.iter_mut().find(|c| c.pid == 0) {
        Some(entry) => {
            *entry = Committing {
                pid: my_pid(),
                database,
                xid,
                skip: false,
            };
            REGISTERED.with(|r| r.set(true));
        }
        // No room to track it: its moves could be counted twice by a
        // rebuild, so the counts are unknown (rebuilt by the next reader).
        None => table.set_status(database, Status::Unknown),
    }
}

/// This backend's entry of [`Table::committing`] leaves `table`, and
/// whether a rebuild marked it counted.
fn unregister(table: &mut Table) -> bool {
    if !REGISTERED.with(|r| r.replace(false)) {
        return false;
    }
    let pid = my_pid();
    match table.committing.iter_mut().find(|c| c.pid == pid) {
        Some(entry) => {
            let skip = entry.skip;
            *entry = Committing::FREE;
            skip
        }
        None => false,
    }
}

/// The transaction committed (or was prepared): add its counts to the
/// shared table, under one exclusive acquisition of its lock. Cannot
/// raise (it runs in the commit callback, after the commit record).
pub fn at_commit() {
    let pending = PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
    let xid = COMMITTING.with(|c| c.replace(pg_sys::InvalidTransactionId));
    if pending.is_empty() || !enabled() {
        return;
    }
    let database = database();
    // SAFETY: reads the clock.
    let minute = history::minute_of(unsafe { pg_sys::GetCurrentTimestamp() });
    let mut table = TABLE.exclusive();
    let skip = unregister(&mut table);
    for p in &pending {
        add_to(
            &mut table,
            database,
            &p.queue,
            &p.counts,
            xid,
            skip,
            Some(minute),
        );
    }
}

/// The transaction rolled back: its counts go, and so does a rebuild it
/// was running.
pub fn at_abort() {
    PENDING.with(|pending| pending.borrow_mut().clear());
    COMMITTING.with(|c| c.set(pg_sys::InvalidTransactionId));
    let registered = REGISTERED.with(|r| r.get());
    if registered && enabled() {
        unregister(&mut TABLE.exclusive());
    }
    give_up_rebuild();
}

/// Subtransaction `subid` rolled back: the counts it (or one inside it,
/// whose ids are larger) made go, and so does a rebuild running in it
/// (an error caught by an exception block: the transaction goes on).
pub fn at_subxact_abort(subid: pg_sys::SubTransactionId) {
    PENDING.with(|pending| pending.borrow_mut().retain(|p| p.subid < subid));
    give_up_rebuild();
}

/// A rebuild this backend was running was cut short (an error, a cancel,
/// a FATAL: an abort runs for each): its database's counts stay unknown,
/// and the next reader rebuilds them.
fn give_up_rebuild() {
    if !REBUILDING.with(|r| r.replace(false)) || !enabled() {
        return;
    }
    let mut table = TABLE.exclusive();
    if table.building.database != 0 && table.building.owner == my_pid() {
        let database = table.building.database;
        table.building.database = 0;
        table.set_status(database, Status::Unknown);
    }
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

/// One row of [`queue_history_rows`].
type HistoryRow = (
    String,
    TimestampWithTimeZone,
    i64,
    i64,
    i64,
    i64,
    Option<f64>,
    Option<f64>,
    Option<i64>,
);

/// The last hour of this database's queues, minute by minute: the rows of
/// the view `work_queue_history` ([`super::history`]), and what the dashboard's charts draw.
///
/// SQL: `workfence.queue_history_rows(queue text DEFAULT NULL) RETURNS
/// TABLE (queue text, minute timestamptz, enqueued bigint, claimed bigint,
/// done bigint, failed bigint, time_in_queue_p50 double precision,
/// time_in_queue_p99 double precision, backlog bigint)`: for each queue
/// with a history (of `queue` only, when given) and that the session's
/// role may read, [`history::MINUTES`] rows, one per minute up to the current one,
/// ordered by queue and minute. `minute` is the minute's start; the counts
/// are those of `work_queue_counters` committed in that minute (the
/// current minute so far); `time_in_queue_p50` and `_p99` estimate, in
/// seconds, the quantiles of the time in queue of the minute's claims of
/// pending items from the counters' buckets, as Prometheus'
/// `histogram_quantile` does (NULL without one: a lapsed lease claimed
/// anew is not timed); `backlog` is the queue's pending items (due or not)
/// at the minute's end, the current minute's as the state counts say now,
/// NULL where unknown (before the hour's first commit that counted for the
/// queue, or while the state counts were not kept: see
/// `queue_state_counts`). A queue with items nothing moved since the
/// restart has rows too (zeros, and its backlog now) once the state
/// counts are kept, unless some queue was ever refused a ring. Reads
/// shared memory only: O(queues × 60). No rows unless pg_workfence is in
/// `shared_preload_libraries`; a restart starts the hour afresh; at most
/// [`RINGS`] queues per server are charted within one hour
/// ([`give_ring`]).
///
/// Errors: 22023 for a bad queue (see `work_enqueue`); 42501
/// (insufficient_privilege) for a `queue` the role has no read grant
/// covering, where queue grants are enforced.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
#[allow(clippy::type_complexity)]
pub fn queue_history_rows(
    queue: default!(Option<String>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(minute, TimestampWithTimeZone),
        name!(enqueued, i64),
        name!(claimed, i64),
        name!(done, i64),
        name!(failed, i64),
        name!(time_in_queue_p50, Option<f64>),
        name!(time_in_queue_p99, Option<f64>),
        name!(backlog, Option<i64>),
    ),
> {
    (|| -> Result<Vec<HistoryRow>> {
        let only = match queue {
            Some(queue) => {
                let queue = validate::queue(Some(queue))?;
                grants::check(Capability::Read, &queue)?;
                Some(queue)
            }
            None => None,
        };
        // SAFETY: reads the clock.
        let now = history::minute_of(unsafe { pg_sys::GetCurrentTimestamp() });
        let items = crate::pg::plans::workfence_relation(c"items").to_u32();
        let mut rings = histories(only.as_deref(), items);
        rings.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let scope = grants::scope(Capability::Read)?;
        let mut rows = Vec::new();
        for (queue, ring, pending) in rings.into_iter().filter(|(q, _, _)| scope.allows(q)) {
            let mut series = ring.series(now);
            // The current minute ends with the backlog as it is now, when
            // the state counts say (a queue nothing moved since a restart
            // has no commit that recorded one).
            if let (Some(now), Some(pending)) = (series.last_mut(), pending) {
                now.backlog = Some(pending);
            }
            for point in series {
                let minute = TimestampWithTimeZone::try_from(point.start())
                    .map_err(|_| WorkfenceError::UnexpectedNull { column: "minute" })?;
                rows.push((
                    queue.clone(),
                    minute,
                    point.enqueued,
                    point.claimed,
                    point.done,
                    point.failed,
                    super::buckets::quantile(&point.waited, 0.5),
                    super::buckets::quantile(&point.waited, 0.99),
                    point.backlog,
                ));
            }
        }
        Ok(rows)
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

// Every item of the database, counted per queue and state.
const COUNT_ITEMS: &std::ffi::CStr =
    c"SELECT i.queue, i.state::pg_catalog.text, pg_catalog.count(*)
  FROM workfence.items AS i
 GROUP BY i.queue, i.state";

/// The state counts of every queue of this database, counted from its
/// items with `snapshot` (`None`: the statement's own): (queue, counts).
///
/// # Safety
/// Inside a transaction of a database with the extension; `snapshot`, if
/// given, registered by the caller.
unsafe fn count_items(snapshot: Option<pg_sys::Snapshot>) -> Result<Vec<(String, [i64; STATES])>> {
    let mut counted: Vec<(String, [i64; STATES])> = Vec::new();
    Spi::connect(|_| -> Result<()> {
        let plan = pg_sys::SPI_prepare(COUNT_ITEMS.as_ptr(), 0, std::ptr::null_mut());
        if plan.is_null() {
            // SPI_prepare leaves its error code in SPI_result.
            Spi::check_status(pg_sys::SPI_result)?;
        }
        let status = match snapshot {
            Some(snapshot) => pg_sys::SPI_execute_snapshot(
                plan,
                std::ptr::null_mut(),
                std::ptr::null(),
                snapshot,
                std::ptr::null_mut(),
                true,
                false,
                0,
            ),
            None => pg_sys::SPI_execute_plan(plan, std::ptr::null_mut(), std::ptr::null(), true, 0),
        };
        Spi::check_status(status)?;
        let table = pg_sys::SPI_tuptable;
        let rows = pg_sys::SPI_processed as usize;
        for n in 0..rows {
            let tuple = *(*table).vals.add(n);
            let text = |column: i32| {
                let value = pg_sys::SPI_getvalue(tuple, (*table).tupdesc, column);
                (!value.is_null()).then(|| {
                    std::ffi::CStr::from_ptr(value)
                        .to_string_lossy()
                        .into_owned()
                })
            };
            let (Some(queue), Some(state), Some(count)) = (text(1), text(2), text(3)) else {
                continue;
            };
            let (Some(state), Ok(count)) = (ItemState::parse(&state), count.parse::<i64>()) else {
                continue;
            };
            match counted.iter_mut().find(|(q, _)| *q == queue) {
                Some((_, counts)) => counts[state as usize] += count,
                None => {
                    let mut counts = [0; STATES];
                    counts[state as usize] = count;
                    counted.push((queue, counts));
                }
            }
        }
        pg_sys::SPI_freeplan(plan);
        Ok(())
    })?;
    Ok(counted)
}

/// Rebuild this database's state counts by one scan of its items, while
/// commits go on, waiting for no one: true when they are valid now (false:
/// another rebuild is running, a transaction is prepared in the database,
/// or the server's tables are full; then the caller counts the items).
///
/// 1. Under the table's lock: the database's status becomes building, and
///    a snapshot S is taken and kept in shared memory. From here each
///    commit callback judges its own transaction against S: one S does not
///    see adds what it moved to its slot's `rebuild_add`; one S sees is
///    left to the scan.
/// 2. Count the items with S.
/// 3. Under the lock: the state counts are the scan's plus `rebuild_add`,
///    and valid. A transaction that S sees but whose commit callback has
///    not run yet (it became visible between its pre-commit and its
///    callback) is in [`Table::committing`] (it entered at its pre-commit,
///    before it was visible): it is marked `skip`, and its callback adds
///    nothing, since the scan counted it. Every other callback after this
///    adds what it moved: its transaction is one S does not see.
///
/// A transaction prepared before the rebuild and committed after it would
/// be missed (its counts were filed at the prepare, and `COMMIT PREPARED`
/// runs no extension code), so no rebuild runs while one is prepared in
/// the database. A `ROLLBACK PREPARED` of one that moved items leaves its
/// moves counted until the next rebuild (a restart, or
/// `queue_state_counts(rebuild => true)`). Nothing is rebuilt during
/// recovery (a hot standby replays changes without extension code).
///
/// # Safety
/// Inside a transaction that has written nothing (no transaction id: its
/// own uncommitted changes would be counted by the scan and lost by its
/// rollback), in a database with the extension.
unsafe fn rebuild(database: u32) -> Result<bool> {
    let items = crate::pg::plans::workfence_relation(c"items");
    if items == pg_sys::InvalidOid || pg_sys::RecoveryInProgress() || prepared_here()? {
        return Ok(false);
    }
    let snapshot = {
        let mut table = TABLE.exclusive();
        let owner = table.building.owner;
        // A rebuild whose backend is gone (killed outside a transaction's
        // abort) is taken over.
        let running = table.building.database != 0 && !pg_sys::BackendPidGetProc(owner).is_null();
        if running || table.full {
            return Ok(false);
        }
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let count = (*snapshot).xcnt as usize;
        table.set_status(database, Status::Building);
        if count > MAX_IN_PROGRESS || table.status(database) != Status::Building {
            // Too many transactions in progress, or no entry left for the
            // database's status.
            pg_sys::UnregisterSnapshot(snapshot);
            table.set_status(database, Status::Unknown);
            return Ok(false);
        }
        let building = &mut table.building;
        building.database = database;
        building.owner = my_pid();
        building.xmin = (*snapshot).xmin;
        building.xmax = (*snapshot).xmax;
        building.in_progress = count as u32;
        for n in 0..count {
            building.xip[n] = *(*snapshot).xip.add(n);
        }
        for slot in table.slots.iter_mut().filter(|s| s.database == database) {
            slot.rebuild_add = [0; STATES];
        }
        REBUILDING.with(|r| r.set(true));
        snapshot
    };
    let counted = count_items(Some(snapshot));
    pg_sys::UnregisterSnapshot(snapshot);
    // An error unwinds through the transaction's abort ([`at_abort`]).
    let counted = counted?;
    let mut table = TABLE.exclusive();
    REBUILDING.with(|r| r.set(false));
    table.building.database = 0;
    // A commit of this database that found no slot meanwhile made its
    // counts unknown: then they stay so.
    if table.status(database) != Status::Building || table.full {
        table.set_status(database, Status::Unknown);
        return Ok(false);
    }
    for slot in table.slots.iter_mut().filter(|s| s.database == database) {
        slot.counts.items = slot.rebuild_add;
    }
    for (queue, counts) in &counted {
        let Some(i) = slot_of(&mut table, database, queue) else {
            table.set_status(database, Status::Unknown);
            return Ok(false);
        };
        for (mine, n) in table.slots[i].counts.items.iter_mut().zip(counts) {
            *mine += n;
        }
    }
    let building = table.building;
    for entry in table.committing.iter_mut() {
        if entry.pid != 0 && entry.database == database && building.sees(entry.xid) {
            entry.skip = true;
        }
    }
    table.set_status(database, Status::Valid);
    table.set_items(database, items.to_u32());
    Ok(true)
}

/// Whether a transaction is prepared in this database (`pg_prepared_xacts`).
fn prepared_here() -> Result<bool> {
    Ok(Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts AS p
                         WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database())",
    )?
    .unwrap_or(false))
}

/// The state counts of this database's queues, from shared memory when
/// they are valid (rebuilt first if they are not and can be), else counted
/// from the items: (queue, counts), queues with no item left out.
fn state_counts(force: bool) -> Result<Vec<(String, [i64; STATES])>> {
    let database = database();
    if enabled() {
        // SAFETY: reads this backend's transaction state.
        let wrote = unsafe { pg_sys::GetTopTransactionIdIfAny() } != pg_sys::InvalidTransactionId;
        let items = crate::pg::plans::workfence_relation(c"items").to_u32();
        // SAFETY: reads the server's state.
        let recovering = unsafe { pg_sys::RecoveryInProgress() };
        let mut valid = TABLE.share().valid(database, items) && !force && !recovering;
        if !valid && !wrote {
            // SAFETY: in a transaction without a transaction id.
            valid = unsafe { rebuild(database)? };
        }
        if valid {
            let table = TABLE.share();
            // Read under the same lock that says they are valid.
            if table.valid(database, items) {
                return Ok(table
                    .slots
                    .iter()
                    .filter(|s| s.database == database && s.counts.items.iter().any(|&n| n != 0))
                    .map(|s| (s.queue(), s.counts.items.map(|n| n.max(0))))
                    .collect());
            }
        }
    }
    // SAFETY: in a transaction, with the statement's snapshot.
    unsafe { count_items(None) }
}

/// One row of [`queue_state_counts`]: queue, pending, claimed, done,
/// failed, cancelled, waiting.
type StateRow = (String, i64, i64, i64, i64, i64, i64);

/// How many of each queue's items are in each state, without reading the
/// items when the server keeps the counts: what `work_queue_stats` reads.
///
/// SQL: `workfence.queue_state_counts(rebuild boolean DEFAULT false)
/// RETURNS TABLE (queue text, pending bigint, claimed bigint, done bigint,
/// failed bigint, cancelled bigint, waiting bigint)` (`waiting` from
/// 0.12.0's workflows), a row per queue of this database
/// that has items and that the session's role may read (where queue grants
/// are enforced), in no order. `rebuild` true rebuilds the counts first
/// (one scan of the items), as after a restart.
///
/// With the library preloaded, the counts are kept in shared memory: each
/// commit adds what its transaction moved between states (with the
/// counters, under the same lock), so a read is O(queues). After a
/// restart, or when they were given up, the first read rebuilds them with
/// one scan of the items ([`rebuild`]) while commits go on, unless its
/// transaction has written, a transaction is prepared in the database or
/// the server is in recovery (then it counts the items, as it does without
/// preloading). They stay exact as long as every change of
/// an item goes through the extension's functions; a `DELETE` or `UPDATE`
/// of `workfence.items` by hand, or a transaction prepared across a
/// rebuild, puts them off until the next rebuild (`rebuild => true`; the
/// view `work_queue_stats_exact` counts the items whatever).
///
/// Errors: 22004 for a NULL `rebuild`.
#[pg_extern(volatile, parallel_unsafe, requires = ["bootstrap"])]
pub fn queue_state_counts(
    rebuild: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(pending, i64),
        name!(claimed, i64),
        name!(done, i64),
        name!(failed, i64),
        name!(cancelled, i64),
        name!(waiting, i64),
    ),
> {
    (|| -> Result<Vec<StateRow>> {
        let rebuild = validate::required("rebuild", rebuild)?;
        let scope = grants::scope(Capability::Read)?;
        Ok(state_counts(rebuild)?
            .into_iter()
            .filter(|(queue, _)| scope.allows(queue))
            .map(|(queue, c)| (queue, c[0], c[1], c[2], c[3], c[4], c[5]))
            .collect())
    })()
    .map(TableIterator::new)
    .or_report()
}
