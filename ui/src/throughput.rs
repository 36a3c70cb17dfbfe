//! Throughput "since the dashboard started watching": each time the queue
//! statistics are read (the queues page, `/metrics`), the number of
//! finished items (done + failed) of each queue is kept with the time, and a
//! queue's throughput is the change between its oldest and newest reading of
//! the last [`WINDOW`], in items per minute, once two readings at least a
//! second apart exist. Nothing is stored in the database and nothing is read
//! for it: a dashboard nobody looks at knows no throughput.
//!
//! That count is of the finished items still in the table, not of finishes
//! (the server keeps no counter of those), so the change is the finishes
//! less the done and failed items purged (`work_purge`, the maintenance
//! worker) and the failed ones sent back by `work_retry` in that time:
//! - when a reading is lower than the one before, the queue's readings
//!   start over from it (a reset: no rate until a reading a second later),
//!   so a rate never spans a fall;
//! - a purge or retry that takes away fewer items than finished between two
//!   readings shows no fall, and lowers the rate unseen.
//!
//! The rate is therefore at most the true rate of finishes, and equal to it
//! when nothing was purged or retried over the time it covers ([`Rate::over`]).
//! Cancelled items are not counted.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How far back throughput looks.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);

/// Samples closer together than this replace each other (bounds memory when
/// the pages are read often).
const MIN_SPACING: Duration = Duration::from_secs(1);

/// A queue's throughput: items finished per minute, over a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Net finished items (done + failed) per minute.
    pub per_minute: f64,
    /// The time between the two readings it is computed from (at most
    /// [`WINDOW`]; shorter after a reset).
    pub over: Duration,
}

/// Per-queue samples of (time, done + failed).
#[derive(Debug, Default)]
pub struct Throughput {
    samples: Mutex<HashMap<String, VecDeque<(Instant, i64)>>>,
}

impl Throughput {
    /// An empty record.
    pub fn new() -> Throughput {
        Throughput::default()
    }

    /// Records the finished counts read at `now`, one `(queue, done + failed)`
    /// per queue; queues not among them are forgotten.
    pub fn record<'a>(&self, now: Instant, counts: impl IntoIterator<Item = (&'a str, i64)>) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashMap::new();
        for (queue, finished) in counts {
            let entry = samples.entry(queue.to_owned()).or_default();
            if entry.back().is_some_and(|&(_, last)| finished < last) {
                // Purged or retried: the count fell. A reset: start over from
                // this reading, so that no rate spans the fall.
                entry.clear();
            }
            let close = entry.len() > 1
                && entry
                    .back()
                    .is_some_and(|&(t, _)| now.duration_since(t) < MIN_SPACING);
            if close {
                entry.pop_back();
            }
            entry.push_back((now, finished));
            while entry
                .front()
                .is_some_and(|&(t, _)| now.duration_since(t) > WINDOW)
            {
                entry.pop_front();
            }
            seen.insert(queue.to_owned(), ());
        }
        samples.retain(|queue, _| seen.contains_key(queue));
    }

    /// Items finished per minute between the oldest and newest samples of
    /// the last [`WINDOW`] (since the last reset), if they are at least a
    /// second apart.
    pub fn rate(&self, queue: &str) -> Option<Rate> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let entry = samples.get(queue)?;
        let (&(t0, v0), &(t1, v1)) = (entry.front()?, entry.back()?);
        let span = t1.duration_since(t0);
        if span < MIN_SPACING {
            return None;
        }
        Some(Rate {
            per_minute: (v1 - v0) as f64 * 60.0 / span.as_secs_f64(),
            over: span,
        })
    }

    /// [`Throughput::rate`]'s items per minute alone.
    #[cfg(test)]
    pub fn per_minute(&self, queue: &str) -> Option<f64> {
        self.rate(queue).map(|r| r.per_minute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_two_samples_then_counts_per_minute() {
        let t = Throughput::new();
        let start = Instant::now();
        t.record(start, [("q", 10)]);
        assert_eq!(t.per_minute("q"), None);
        t.record(start + Duration::from_secs(30), [("q", 40)]);
        assert_eq!(t.per_minute("q"), Some(60.0));
        assert_eq!(t.per_minute("other"), None);
    }

    #[test]
    fn old_samples_leave_the_window() {
        let t = Throughput::new();
        let start = Instant::now();
        t.record(start, [("q", 0)]);
        t.record(start + Duration::from_secs(100), [("q", 1000)]);
        t.record(start + Duration::from_secs(350), [("q", 1060)]);
        // The first sample is older than five minutes: 60 items in 250 s.
        let rate = t.per_minute("q").unwrap();
        assert!((rate - 60.0 * 60.0 / 250.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn a_purge_starts_over_and_dropped_queues_are_forgotten() {
        let t = Throughput::new();
        let start = Instant::now();
        t.record(start, [("q", 100), ("r", 1)]);
        t.record(start + Duration::from_secs(10), [("q", 5), ("r", 2)]);
        assert_eq!(t.per_minute("q"), None);
        assert_eq!(t.per_minute("r"), Some(6.0));
        // After the reset, the rate spans only the readings since the fall.
        t.record(start + Duration::from_secs(15), [("q", 10), ("r", 2)]);
        assert_eq!(
            t.rate("q"),
            Some(Rate {
                per_minute: 60.0,
                over: Duration::from_secs(5)
            })
        );
        t.record(start + Duration::from_secs(20), [("q", 5)]);
        assert_eq!(t.per_minute("r"), None);
    }

    #[test]
    fn close_samples_replace_each_other() {
        let t = Throughput::new();
        let start = Instant::now();
        t.record(start, [("q", 0)]);
        t.record(start + Duration::from_secs(2), [("q", 2)]);
        for ms in 1..500 {
            t.record(
                start + Duration::from_secs(2) + Duration::from_millis(ms),
                [("q", 2 + ms as i64)],
            );
        }
        let len = t.samples.lock().unwrap()["q"].len();
        assert!(len <= 3, "{len}");
    }
}
