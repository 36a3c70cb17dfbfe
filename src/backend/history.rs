//! The last hour of each queue, minute by minute, in shared memory: what
//! the dashboard's charts draw (throughput, time in queue, backlog) and
//! the view `work_queue_history` returns.
//!
//! Kept beside the counters ([`super::counters`]) and written in the same
//! place: when a transaction's counts are added to the shared table at its
//! commit, under the same exclusive acquisition of its lock, they are also
//! added to the queue's current minute. So a chart costs a commit a few
//! additions more and a read O(queues × 60), whatever the number of items,
//! and any dashboard process draws the last hour as soon as it starts (a
//! restart of the server starts the hour afresh, as the counters do).
//!
//! Each queue with a history has a ring of [`RING`] minutes (the current
//! one and the hour before it), a minute's slot reused when its minute
//! comes round again: no writer ever walks or trims the ring. The backlog
//! of a minute is the queue's pending items (due or not) after the last
//! commit of that minute that counted for the queue, from the state
//! counts when they are valid; a minute without such a commit had the
//! backlog of the minute before it (nothing moved an item).
//!
//! At most [`RINGS`] queues per server are charted within one hour (a
//! queue's ring goes to another queue once nothing of it is in the hour):
//! about 6 MB of shared memory, a segment of its own
//! ([`init`]), zeroed in place (a zeroed ring is an empty one), and read
//! and written only under the counters' lock ([`rings`], [`rings_mut`]).
//! A queue beyond those has counters but no history.

use std::sync::atomic::{AtomicPtr, Ordering};

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::buckets::BUCKETS;

/// Minutes of history a queue keeps (the last hour), the current minute
/// included.
pub const MINUTES: usize = 60;

/// Slots of a ring: the [`MINUTES`] read, and one more being reused.
const RING: usize = MINUTES + 1;

/// How many queues per server keep a history.
pub const RINGS: usize = 1024;

/// Microseconds per minute.
const MINUTE_MICROS: i64 = 60_000_000;

/// What one queue went through in one minute.
#[derive(Clone, Copy)]
#[repr(C)]
struct Minute {
    /// Minutes since 2000-01-01 00:00 UTC (PostgreSQL's epoch); 0: unused.
    minute: i64,
    enqueued: u32,
    claimed: u32,
    done: u32,
    failed: u32,
    /// Time in queue of this minute's claims, per bucket of
    /// [`BOUNDS_MICROS`] (not cumulative).
    waited: [u32; BUCKETS],
    /// Pending items after this minute's last commit, plus one; 0:
    /// unknown (the state counts were not valid), as zeroed memory reads.
    backlog: i64,
}

impl Minute {
    const UNUSED: Minute = Minute {
        minute: 0,
        enqueued: 0,
        claimed: 0,
        done: 0,
        failed: 0,
        waited: [0; BUCKETS],
        backlog: 0,
    };
}

/// A backlog as [`Minute::backlog`] keeps it.
fn kept(backlog: Option<i64>) -> i64 {
    backlog.map_or(0, |n| n.max(0).saturating_add(1))
}

/// A backlog [`Minute::backlog`] kept.
fn read(kept: i64) -> Option<i64> {
    (kept > 0).then(|| kept - 1)
}

/// What one commit did to a queue, as a minute counts it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moved {
    /// Items enqueued (as the counters' `enqueued`).
    pub enqueued: u64,
    /// Items claimed.
    pub claimed: u64,
    /// Runs finished.
    pub done: u64,
    /// Items that became failed.
    pub failed: u64,
}

/// One queue's last hour. A queue's counter slot names its ring.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Ring {
    minutes: [Minute; RING],
    /// The latest minute whose slot was reused, and its backlog (as
    /// [`Minute::backlog`]): the backlog of the minutes after it that have
    /// no slot of their own.
    dropped_minute: i64,
    dropped_backlog: i64,
    /// The newest minute recorded (0: none): a ring whose newest minute
    /// left the hour shows nothing, and may go to another queue.
    latest: i64,
    /// The counter slot it belongs to, plus one (0: none).
    pub owner: u32,
}

impl Ring {
    /// A ring with nothing in it: all zeros.
    pub const EMPTY: Ring = Ring {
        minutes: [Minute::UNUSED; RING],
        dropped_minute: 0,
        dropped_backlog: 0,
        latest: 0,
        owner: 0,
    };

    /// Whether nothing it holds is in the hour up to minute `now`: it
    /// reads as empty, and may be given to another queue.
    pub fn stale(&self, now: i64) -> bool {
        self.latest <= now - MINUTES as i64
    }

    /// Add one commit's counts to minute `minute`: its items enqueued,
    /// claimed, done and failed ([`Moved`]), its claims' time in queue
    /// (per bucket), and the queue's backlog after it (`None`: unknown).
    pub fn record(
        &mut self,
        minute: i64,
        moved: Moved,
        waited: &[u64; BUCKETS],
        backlog: Option<i64>,
    ) {
        let slot = &mut self.minutes[minute.rem_euclid(RING as i64) as usize];
        if slot.minute != minute {
            if slot.minute < minute && slot.minute > self.dropped_minute {
                self.dropped_minute = slot.minute;
                self.dropped_backlog = slot.backlog;
            }
            // A slot of a minute an hour or more ahead (the clock was set
            // back after running ahead) is reused too: kept, it would hold
            // the counts of now where no reader looks until then.
            *slot = Minute {
                minute,
                ..Minute::UNUSED
            };
        }
        self.latest = minute;
        let add = |total: &mut u32, n: u64| {
            *total = total.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        };
        add(&mut slot.enqueued, moved.enqueued);
        add(&mut slot.claimed, moved.claimed);
        add(&mut slot.done, moved.done);
        add(&mut slot.failed, moved.failed);
        for (total, &n) in slot.waited.iter_mut().zip(waited) {
            add(total, n);
        }
        slot.backlog = kept(backlog);
    }

    /// The [`MINUTES`] minutes up to and including `now` (a minute
    /// number), oldest first.
    pub fn series(&self, now: i64) -> Vec<Point> {
        let first = now - MINUTES as i64 + 1;
        // The backlog carried into the window: the latest minute before it.
        let mut carried = self
            .minutes
            .iter()
            .filter(|m| m.minute != 0 && m.minute < first)
            .map(|m| (m.minute, m.backlog))
            .chain(std::iter::once((self.dropped_minute, self.dropped_backlog)))
            .max_by_key(|&(minute, _)| minute)
            .map_or(0, |(_, backlog)| backlog);
        (first..=now)
            .map(|minute| {
                let slot = &self.minutes[minute.rem_euclid(RING as i64) as usize];
                if slot.minute == minute {
                    carried = slot.backlog;
                    Point {
                        minute,
                        enqueued: i64::from(slot.enqueued),
                        claimed: i64::from(slot.claimed),
                        done: i64::from(slot.done),
                        failed: i64::from(slot.failed),
                        waited: slot.waited,
                        backlog: read(carried),
                    }
                } else {
                    Point {
                        minute,
                        enqueued: 0,
                        claimed: 0,
                        done: 0,
                        failed: 0,
                        waited: [0; BUCKETS],
                        backlog: read(carried),
                    }
                }
            })
            .collect()
    }
}

/// Where the rings are: set in the postmaster when it sets the segment
/// aside, inherited by every backend it forks; null when not preloaded.
static RINGS_AT: AtomicPtr<Ring> = AtomicPtr::new(std::ptr::null_mut());

/// The segment's name in PostgreSQL's shared memory index.
const SEGMENT: &std::ffi::CStr = c"pg_workfence history";

static mut PREVIOUS_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// Set the rings' segment aside when the postmaster preloads the library
/// (called from `counters::init`). A segment of its own, zeroed in
/// place: built as a value, as the counters' table is, its 6 MB would be
/// a temporary on the postmaster's stack.
pub fn init() {
    // SAFETY: the postmaster's hooks, set while it loads the preloaded
    // libraries, on its one thread; the previous hooks are called first.
    unsafe {
        PREVIOUS_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREVIOUS_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: as in `init`; PostgreSQL calls it once, in the postmaster.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<[Ring; RINGS]>());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: as in `init`; the segment is found or made under
    // AddinShmemInitLock (lock 21 of the main array, as PostgreSQL's
    // `AddinShmemInitLock` macro names it), and zeroed only when made.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let at = pg_sys::ShmemInitStruct(
            SEGMENT.as_ptr(),
            std::mem::size_of::<[Ring; RINGS]>(),
            &mut found,
        )
        .cast::<Ring>();
        if !found {
            at.write_bytes(0, RINGS);
        }
        RINGS_AT.store(at, Ordering::Relaxed);
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The rings; empty when not preloaded.
///
/// # Safety
/// The caller holds the counters' lock (`counters::TABLE`) in share mode
/// or more for as long as it reads them: that lock orders every access.
pub(super) unsafe fn rings<'a>() -> &'a [Ring] {
    let at = RINGS_AT.load(Ordering::Relaxed);
    if at.is_null() {
        return &[];
    }
    // SAFETY: the segment holds RINGS rings for the server's life; the
    // caller holds the lock.
    unsafe { std::slice::from_raw_parts(at, RINGS) }
}

/// The rings, to write; empty when not preloaded.
///
/// # Safety
/// The caller holds the counters' lock exclusively for as long as it uses
/// them.
pub(super) unsafe fn rings_mut<'a>() -> &'a mut [Ring] {
    let at = RINGS_AT.load(Ordering::Relaxed);
    if at.is_null() {
        return &mut [];
    }
    // SAFETY: as in `rings`, with the lock held exclusively.
    unsafe { std::slice::from_raw_parts_mut(at, RINGS) }
}

/// One minute of one queue's history, as read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Minutes since PostgreSQL's epoch.
    pub minute: i64,
    /// Items enqueued in the minute.
    pub enqueued: i64,
    /// Items claimed in the minute.
    pub claimed: i64,
    /// Runs finished in the minute.
    pub done: i64,
    /// Items that became failed in the minute.
    pub failed: i64,
    /// Claims per bucket of time in queue.
    pub waited: [u32; BUCKETS],
    /// Pending items at the minute's end; `None`: unknown.
    pub backlog: Option<i64>,
}

impl Point {
    /// The start of the minute, as a PostgreSQL `TimestampTz`
    /// (microseconds since its epoch).
    pub fn start(&self) -> i64 {
        self.minute * MINUTE_MICROS
    }
}

/// The minute number of a PostgreSQL `TimestampTz`.
pub fn minute_of(timestamp: i64) -> i64 {
    timestamp.div_euclid(MINUTE_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(claimed: u64, done: u64) -> Moved {
        Moved {
            claimed,
            done,
            ..Moved::default()
        }
    }

    #[test]
    fn a_minute_adds_its_commits_and_keeps_the_last_backlog() {
        let mut ring = Ring::EMPTY;
        let mut waited = [0; BUCKETS];
        waited[0] = 2;
        ring.record(1_000, events(2, 0), &waited, Some(8));
        ring.record(1_000, events(0, 2), &[0; BUCKETS], Some(6));
        let series = ring.series(1_000);
        assert_eq!(series.len(), MINUTES);
        let now = series.last().unwrap();
        assert_eq!((now.minute, now.claimed, now.done), (1_000, 2, 2));
        assert_eq!(now.waited[0], 2);
        assert_eq!(now.backlog, Some(6));
        assert_eq!(series[0].minute, 1_000 - 59);
        assert_eq!(
            series[0].backlog, None,
            "nothing known before the first commit"
        );
    }

    #[test]
    fn a_quiet_minute_carries_the_backlog_and_an_old_minute_leaves_the_hour() {
        let mut ring = Ring::EMPTY;
        ring.record(100, events(1, 0), &[0; BUCKETS], Some(5));
        ring.record(130, events(1, 0), &[0; BUCKETS], Some(4));
        let series = ring.series(150);
        let at = |minute: i64| series.iter().find(|p| p.minute == minute).unwrap();
        assert_eq!(
            at(120).backlog,
            Some(5),
            "carried from minute 100, before the hour"
        );
        assert_eq!(at(120).claimed, 0);
        assert_eq!(at(130).backlog, Some(4));
        assert_eq!(at(150).backlog, Some(4));
        // Minute 161 reuses minute 100's slot: its backlog is carried still.
        ring.record(161, events(0, 1), &[0; BUCKETS], None);
        let series = ring.series(161);
        assert!(series.iter().all(|p| p.minute != 100));
        assert_eq!(
            series.iter().map(|p| p.claimed).sum::<i64>(),
            1,
            "minute 130's claim"
        );
        assert_eq!(series[0].minute, 102);
        assert_eq!(series[0].backlog, Some(5));
        assert_eq!(
            series.last().unwrap().backlog,
            None,
            "unknown after minute 161's commit"
        );
    }

    #[test]
    fn after_the_clock_ran_ahead_and_came_back_the_hour_is_read_again() {
        let mut ring = Ring::EMPTY;
        ring.record(1_000 + 61 * 3, events(5, 0), &[0; BUCKETS], Some(1));
        ring.record(1_000, events(2, 0), &[0; BUCKETS], Some(1));
        let series = ring.series(1_000);
        assert_eq!(series.last().unwrap().claimed, 2);
        assert!(!ring.stale(1_000));
        assert!(ring.stale(1_060));
    }

    #[test]
    fn a_slot_of_a_minute_an_hour_old_is_not_read_as_now() {
        let mut ring = Ring::EMPTY;
        ring.record(10, events(3, 0), &[0; BUCKETS], Some(1));
        // Minute 71 shares minute 10's slot; it was never written.
        let series = ring.series(71);
        assert_eq!(series.iter().map(|p| p.claimed).sum::<i64>(), 0);
        assert_eq!(series.last().unwrap().backlog, Some(1));
    }
}
