//! `/metrics`: the queue statistics in the Prometheus text format (0.0.4).
//!
//! Per queue: the gauge `workfence_items{state=...}` for every state
//! (waiting, pending, scheduled, claimed, expired, done, failed, cancelled; waiting from
//! 0.12.0's workflows, 0 on an older database, which has no such state), the
//! gauges `workfence_oldest_due_age_seconds` (0 when nothing is due) and
//! `workfence_paused`; and, when the library is preloaded, the counters
//! `workfence_refused_total` and `workfence_lapsed_total` (monotonic since
//! the server started; absent otherwise).
//!
//! From 0.12.0, with the library preloaded, per queue from `work_queue_counters` (shared
//! memory: no item is read): the counters `workfence_enqueued_total`,
//! `workfence_claimed_total`, `workfence_done_total`, `workfence_failed_total`,
//! `workfence_retried_total`, `workfence_released_total` and `workfence_cancelled_total`,
//! and the histograms `workfence_time_in_queue_seconds` (from an item's `run_at` to its
//! claim) and `workfence_run_time_seconds` (from a claim to its finish, fail or release),
//! each `_bucket{le=...}`, `_sum` and `_count`. All count since the server started, and
//! start from zero again after a restart, which `rate()` reads as the counter reset it is.
//! `workfence_refused_total` and `workfence_lapsed_total` keep their names and meaning: the
//! view's `refused` and `lapsed` are the counters `work_queue_stats` shows, read from it
//! where it has the queue and from `work_queue_stats` where not (one sample per queue).
//! A database older than 0.12.0, a role that may not read the view, or a server without the
//! library preloaded (the view is empty) has none of these families.
//!
//! Per schedule (from 0.12.0, labels `schedule` and `queue`): the gauges
//! `workfence_schedule_last_fire_seconds`, when it last fired (unix seconds,
//! the server's clock; absent before its first fire), and
//! `workfence_schedule_next_slot_seconds`, its next slot (unix seconds;
//! absent when its expression names no more slots). A database older than
//! 0.12.0, or a role that may not read `work_schedules`, has neither.
//!
//! The state `done` (and `failed`, `cancelled`) of `workfence_items` stays a gauge: it is
//! the finished items still in the table, a number that falls when `work_purge` removes
//! them or `work_retry` sends one back to pending. Exposed as a counter, each fall would read
//! as a counter reset and `rate()` would jump; as a gauge, `deriv()` or `delta()` of
//! `workfence_items{state="done"}` is the net change (finishes less purges and retries). The
//! count of finishes themselves is `workfence_done_total`, where the server keeps one.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::db::{Histogram, QueueCounters, QueueStats, ScheduleRow};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value escaped for the text format: `\`, `"` and line feeds.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One metric family's name, type and help text.
struct Family<'a> {
    name: &'a str,
    kind: &'a str,
    help: &'a str,
}

/// One sample: the suffix of the family's name (`""`, or a histogram's `_bucket`, `_sum`,
/// `_count`), its labels as written between the braces, and its value.
type Sample = (&'static str, String, f64);

/// The text being written, one family at a time.
struct Exposition(String);

impl Exposition {
    /// Writes family `f` with its `samples`: its `# HELP` and `# TYPE` lines, once, then one
    /// line per sample; nothing at all when there is no sample (no queue, or counters that
    /// the server does not keep).
    fn family(&mut self, f: Family<'_>, samples: impl IntoIterator<Item = Sample>) {
        let mut samples = samples.into_iter().peekable();
        if samples.peek().is_none() {
            return;
        }
        let out = &mut self.0;
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (suffix, labels, value) in samples {
            let _ = writeln!(out, "{}{suffix}{{{labels}}} {}", f.name, number(value));
        }
    }
}

/// A counter family of `work_queue_counters`: its name, help text and column.
type CounterFamily = (&'static str, &'static str, fn(&QueueCounters) -> i64);

/// The counters of `work_queue_counters` besides `refused` and `lapsed`.
const COUNTERS: [CounterFamily; 7] = [
    (
        "workfence_enqueued_total",
        "Items enqueued since the server started: work_enqueue, a schedule's fire, and items \
         that on_conflict sent to run again (only with pg_workfence preloaded, from 0.12.0).",
        |c| c.enqueued,
    ),
    (
        "workfence_claimed_total",
        "Items handed out by claims since the server started, lapsed leases claimed anew \
         included (only with pg_workfence preloaded, from 0.12.0).",
        |c| c.claimed,
    ),
    (
        "workfence_done_total",
        "Runs finished since the server started: work_finish, work_finish_many, \
         work_finish_and_claim (only with pg_workfence preloaded, from 0.12.0).",
        |c| c.done,
    ),
    (
        "workfence_failed_total",
        "Items that became failed (dead letters) since the server started: a work_fail on the \
         final attempt, or a lapsed final attempt (only with pg_workfence preloaded, from 0.12.0).",
        |c| c.failed,
    ),
    (
        "workfence_retried_total",
        "Failed attempts sent back for another since the server started: work_fail with \
         attempts left, and work_retry (only with pg_workfence preloaded, from 0.12.0).",
        |c| c.retried,
    ),
    (
        "workfence_released_total",
        "Claims handed back with work_release since the server started (only with pg_workfence \
         preloaded, from 0.12.0).",
        |c| c.released,
    ),
    (
        "workfence_cancelled_total",
        "Items withdrawn with work_cancel since the server started (only with pg_workfence \
         preloaded, from 0.12.0).",
        |c| c.cancelled,
    ),
];

/// A queue's `refused` and `lapsed` counts: `work_queue_counters`' where it has the queue,
/// else `work_queue_stats`' (the same counters: one sample per queue, whichever read it).
fn refusals_and_lapses(
    stats: &[QueueStats],
    counters: &[QueueCounters],
) -> BTreeMap<String, (i64, i64)> {
    let mut out = BTreeMap::new();
    for s in stats {
        if let (Some(refused), Some(lapsed)) = (s.refused, s.lapsed) {
            out.insert(s.queue.clone(), (refused, lapsed));
        }
    }
    for c in counters {
        out.insert(c.queue.clone(), (c.refused, c.lapsed));
    }
    out
}

/// A histogram's samples for one queue: `_bucket` per bound (`le`, `+Inf` last), `_sum`,
/// `_count` (the `+Inf` bucket's count, as the format wants).
fn histogram_samples(queue: &str, h: &Histogram) -> Vec<Sample> {
    let q = format!("queue=\"{}\"", escape_label(queue));
    let mut samples: Vec<Sample> =
        h.le.iter()
            .zip(&h.buckets)
            .map(|(le, n)| {
                (
                    "_bucket",
                    format!("{q},le=\"{}\"", le_label(*le)),
                    *n as f64,
                )
            })
            .collect();
    samples.push(("_sum", q.clone(), h.sum));
    samples.push(("_count", q, h.count() as f64));
    samples
}

/// A bucket's upper bound as the `le` label: `+Inf`, or the number.
fn le_label(le: f64) -> String {
    if le == f64::INFINITY {
        "+Inf".to_owned()
    } else {
        number(le)
    }
}

/// Renders the statistics of every queue, the counters the server keeps (from 0.12.0,
/// preloaded; none otherwise), and the fires of every schedule.
pub fn render(
    stats: &[QueueStats],
    schedules: &[ScheduleRow],
    counters: &[QueueCounters],
) -> String {
    let mut out = Exposition(String::new());
    let q = |queue: &str| format!("queue=\"{}\"", escape_label(queue));

    out.family(
        Family {
            name: "workfence_items",
            kind: "gauge",
            help: "Items of the queue now, by state: waiting (for their parents, workflows: \
                   from 0.12.0, 0 before), pending (due), scheduled (not yet due), \
                   claimed (lease running), expired (lease ran out, not yet claimed anew), and \
                   the finished items still kept: done, failed, cancelled (these fall when \
                   work_purge removes items or work_retry sends one back to pending).",
        },
        stats.iter().flat_map(|s| {
            [
                ("waiting", s.waiting),
                ("pending", s.pending),
                ("scheduled", s.scheduled),
                ("claimed", s.claimed),
                ("expired", s.expired),
                ("done", s.done),
                ("failed", s.failed),
                ("cancelled", s.cancelled),
            ]
            .into_iter()
            .map(move |(state, n)| ("", format!("{},state=\"{state}\"", q(&s.queue)), n as f64))
        }),
    );
    out.family(
        Family {
            name: "workfence_oldest_due_age_seconds",
            kind: "gauge",
            help: "How long the oldest due pending item has waited, by the server's clock (0: none due).",
        },
        stats
            .iter()
            .map(|s| ("", q(&s.queue), s.oldest_due_age.unwrap_or(0.0))),
    );
    out.family(
        Family {
            name: "workfence_paused",
            kind: "gauge",
            help: "1 when the queue is paused (work_pause), else 0.",
        },
        stats
            .iter()
            .map(|s| ("", q(&s.queue), if s.paused { 1.0 } else { 0.0 })),
    );
    let faults = refusals_and_lapses(stats, counters);
    out.family(
        Family {
            name: "workfence_refused_total",
            kind: "counter",
            help: "Stale-token calls refused since the server started (only with pg_workfence preloaded).",
        },
        faults
            .iter()
            .map(|(queue, (refused, _))| ("", q(queue), *refused as f64)),
    );
    out.family(
        Family {
            name: "workfence_lapsed_total",
            kind: "counter",
            help: "Lapsed leases claimed anew since the server started (only with pg_workfence preloaded).",
        },
        faults
            .iter()
            .map(|(queue, (_, lapsed))| ("", q(queue), *lapsed as f64)),
    );
    for (name, help, column) in COUNTERS {
        out.family(
            Family {
                name,
                kind: "counter",
                help,
            },
            counters.iter().map(|c| ("", q(&c.queue), column(c) as f64)),
        );
    }
    out.family(
        Family {
            name: "workfence_time_in_queue_seconds",
            kind: "histogram",
            help: "Time in queue, from an item's run_at (when it fell due) to its claim, of the \
                   claims of pending items since the server started (only with pg_workfence \
                   preloaded, from 0.12.0).",
        },
        counters
            .iter()
            .flat_map(|c| histogram_samples(&c.queue, &c.time_in_queue)),
    );
    out.family(
        Family {
            name: "workfence_run_time_seconds",
            kind: "histogram",
            help: "Run time, from a claim to its work_finish, work_fail or work_release, since \
                   the server started (only with pg_workfence preloaded, from 0.12.0).",
        },
        counters
            .iter()
            .flat_map(|c| histogram_samples(&c.queue, &c.run_time)),
    );
    let sq = |s: &ScheduleRow| {
        format!(
            "schedule=\"{}\",queue=\"{}\"",
            escape_label(&s.name),
            escape_label(&s.queue)
        )
    };
    out.family(
        Family {
            name: "workfence_schedule_last_fire_seconds",
            kind: "gauge",
            help:
                "When the schedule last fired a slot (enqueued its item), in unix seconds by the \
                   server's clock (absent until its first fire).",
        },
        schedules
            .iter()
            .filter_map(|s| s.last_fired_epoch.map(|t| ("", sq(s), t))),
    );
    out.family(
        Family {
            name: "workfence_schedule_next_slot_seconds",
            kind: "gauge",
            help: "The schedule's next slot, the first not yet fired or skipped, in unix seconds \
                   (absent when its cron expression names no more slots).",
        },
        schedules
            .iter()
            .filter_map(|s| s.next_slot_epoch.map(|t| ("", sq(s), t))),
    );
    out.0
}

/// A sample value: integers without a fraction, others as Rust prints them.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Histogram;

    fn stats(queue: &str) -> QueueStats {
        QueueStats {
            queue: queue.into(),
            pending: 3,
            scheduled: 1,
            claimed: 2,
            expired: 0,
            done: 10,
            failed: 1,
            cancelled: 0,
            waiting: 4,
            oldest_due_age: Some(1.5),
            paused: true,
            refused: None,
            lapsed: None,
            concurrency: None,
            rate: None,
            per: None,
            per_group: None,
            per_group_settable: true,
            may_operate: true,
        }
    }

    fn schedule(name: &str, fired: Option<f64>, next: Option<f64>) -> ScheduleRow {
        ScheduleRow {
            name: name.into(),
            cron: "0 2 * * *".into(),
            timezone: "UTC".into(),
            queue: "reports".into(),
            catch_up: "latest".into(),
            paused: false,
            next_slot: None,
            last_slot: None,
            last_item_id: None,
            last_fired_at: None,
            next_slot_epoch: next,
            last_fired_epoch: fired,
            may_operate: true,
        }
    }

    #[test]
    fn schedules_are_unix_seconds_or_absent() {
        let text = render(
            &[],
            &[
                schedule("nightly", Some(1_767_225_601.25), Some(1_767_319_200.0)),
                schedule("new\"one", None, Some(1_767_319_200.0)),
                schedule("ended", Some(1_767_225_600.0), None),
            ],
            &[],
        );
        assert!(text.contains("# TYPE workfence_schedule_last_fire_seconds gauge\n"));
        assert!(text.contains("# TYPE workfence_schedule_next_slot_seconds gauge\n"));
        assert!(text.contains(
            "workfence_schedule_last_fire_seconds{schedule=\"nightly\",queue=\"reports\"} 1767225601.25\n"
        ));
        assert!(text.contains(
            "workfence_schedule_next_slot_seconds{schedule=\"nightly\",queue=\"reports\"} 1767319200\n"
        ));
        assert!(text.contains(
            "workfence_schedule_next_slot_seconds{schedule=\"new\\\"one\",queue=\"reports\"} 1767319200\n"
        ));
        assert!(!text.contains("workfence_schedule_last_fire_seconds{schedule=\"new"));
        assert!(text.contains("workfence_schedule_last_fire_seconds{schedule=\"ended\""));
        assert!(!text.contains("workfence_schedule_next_slot_seconds{schedule=\"ended\""));
        for family in [
            "workfence_schedule_last_fire_seconds",
            "workfence_schedule_next_slot_seconds",
        ] {
            for what in ["HELP", "TYPE"] {
                let line = format!("# {what} {family} ");
                assert_eq!(text.matches(&line).count(), 1, "{line}");
            }
        }
        // No schedule: neither family.
        assert!(!render(&[stats("q")], &[], &[]).contains("workfence_schedule_"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn renders_every_family() {
        let text = render(&[stats("q\"1")], &[], &[]);
        assert!(text.contains("# TYPE workfence_items gauge\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"pending\"} 3\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"waiting\"} 4\n"));
        assert!(text.contains("workfence_oldest_due_age_seconds{queue=\"q\\\"1\"} 1.5\n"));
        assert!(text.contains("workfence_paused{queue=\"q\\\"1\"} 1\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"done\"} 10\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"failed\"} 1\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"cancelled\"} 0\n"));
        assert!(!text.contains("_done_total") && !text.contains("_failed_total"));
        assert!(!text.contains("workfence_refused_total{"));
        // One HELP and one TYPE line per family, however many queues.
        let text = render(&[stats("a"), stats("b")], &[], &[]);
        for family in [
            "workfence_items",
            "workfence_oldest_due_age_seconds",
            "workfence_paused",
        ] {
            for what in ["HELP", "TYPE"] {
                let line = format!("# {what} {family} ");
                assert_eq!(text.matches(&line).count(), 1, "{line}");
            }
        }
    }

    /// The view's bounds: 0.005 s to an hour, then Infinity.
    const LE: [f64; 17] = [
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
        30.0,
        60.0,
        300.0,
        900.0,
        3600.0,
        f64::INFINITY,
    ];

    fn counters(queue: &str, refused: i64) -> QueueCounters {
        let h = |at: usize, n: i64, sum: f64| {
            let buckets = (0..LE.len()).map(|i| if i >= at { n } else { 0 }).collect();
            Histogram::new(LE.to_vec(), buckets, sum).expect("a histogram")
        };
        QueueCounters {
            queue: queue.into(),
            enqueued: 3,
            claimed: 2,
            done: 1,
            failed: 0,
            retried: 1,
            released: 0,
            cancelled: 0,
            refused,
            lapsed: 0,
            time_in_queue: h(0, 2, 0.004),
            run_time: h(7, 2, 1.5),
        }
    }

    #[test]
    fn counters_and_histograms_of_work_queue_counters() {
        let text = render(&[], &[], &[counters("c\"q", 4)]);
        for (family, kind) in [
            ("workfence_enqueued_total", "counter"),
            ("workfence_claimed_total", "counter"),
            ("workfence_done_total", "counter"),
            ("workfence_failed_total", "counter"),
            ("workfence_retried_total", "counter"),
            ("workfence_released_total", "counter"),
            ("workfence_cancelled_total", "counter"),
            ("workfence_refused_total", "counter"),
            ("workfence_lapsed_total", "counter"),
            ("workfence_time_in_queue_seconds", "histogram"),
            ("workfence_run_time_seconds", "histogram"),
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {family} {kind}\n")).count(),
                1,
                "{family}"
            );
            assert_eq!(
                text.matches(&format!("# HELP {family} ")).count(),
                1,
                "{family}"
            );
        }
        let q = "queue=\"c\\\"q\"";
        assert!(
            text.contains(&format!("workfence_enqueued_total{{{q}}} 3\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("workfence_refused_total{{{q}}} 4\n")),
            "{text}"
        );
        assert!(text.contains(&format!(
            "workfence_run_time_seconds_bucket{{{q},le=\"0.5\"}} 0\n\
             workfence_run_time_seconds_bucket{{{q},le=\"1\"}} 2\n"
        )));
        assert!(text.contains(&format!(
            "workfence_run_time_seconds_bucket{{{q},le=\"+Inf\"}} 2\n\
             workfence_run_time_seconds_sum{{{q}}} 1.5\n\
             workfence_run_time_seconds_count{{{q}}} 2\n"
        )));
        assert!(text.contains(&format!(
            "workfence_time_in_queue_seconds_bucket{{{q},le=\"0.005\"}} 2\n"
        )));
        assert_eq!(
            text.matches("workfence_time_in_queue_seconds_bucket{")
                .count(),
            17
        );
        // No counters (an older database, a role that may not read them, nothing
        // preloaded): none of their families.
        let text = render(&[stats("q")], &[], &[]);
        assert!(
            !text.contains("_total") && !text.contains("_seconds_bucket"),
            "{text}"
        );
    }

    #[test]
    fn refused_and_lapsed_are_one_sample_per_queue_from_either_source() {
        let mut only_stats = stats("old");
        only_stats.refused = Some(7);
        only_stats.lapsed = Some(1);
        let mut both = stats("both");
        both.refused = Some(2);
        both.lapsed = Some(0);
        let text = render(
            &[only_stats, both],
            &[],
            &[counters("both", 2), counters("new", 5)],
        );
        assert!(
            text.contains("workfence_refused_total{queue=\"old\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("workfence_refused_total{queue=\"both\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("workfence_refused_total{queue=\"new\"} 5\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("workfence_refused_total{queue=\"both\"}")
                .count(),
            1
        );
        assert_eq!(text.matches("workfence_lapsed_total{").count(), 3);
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        // 10 observations: 2 at most 0.1 s, 8 more at most 0.25 s.
        let mut buckets = vec![0_i64; LE.len()];
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = match i {
                0..=3 => 0,
                4 => 2,
                _ => 10,
            };
        }
        let h = Histogram::new(LE.to_vec(), buckets, 1.6).expect("a histogram");
        // Rank 5 is the 3rd of 8 in (0.1, 0.25]: 0.1 + 0.15 * 3/8.
        let p50 = h.quantile(0.5).expect("p50");
        assert!((p50 - (0.1 + 0.15 * 3.0 / 8.0)).abs() < 1e-12, "{p50}");
        // Rank 1 is in the first bucket with observations: (0.05, 0.1], half way.
        let p10 = h.quantile(0.1).expect("p10");
        assert!((p10 - 0.075).abs() < 1e-12, "{p10}");
        assert!(!h.beyond_bounds(0.99));
        // In the first bucket: from 0.
        let mut first = vec![4_i64; LE.len()];
        first[0] = 4;
        let h = Histogram::new(LE.to_vec(), first, 0.01).expect("a histogram");
        assert!((h.quantile(0.5).expect("p50") - 0.0025).abs() < 1e-12);
        // Beyond the last finite bound: that bound, and said so.
        let mut late = vec![0_i64; LE.len()];
        late[LE.len() - 1] = 3;
        let h = Histogram::new(LE.to_vec(), late, 99999.0).expect("a histogram");
        assert_eq!(h.quantile(0.5), Some(3600.0));
        assert!(h.beyond_bounds(0.5));
        // No observations: no quantile.
        let h = Histogram::new(LE.to_vec(), vec![0; LE.len()], 0.0).expect("a histogram");
        assert_eq!(h.quantile(0.5), None);
        // Arrays that do not match, or no infinite bound: refused.
        assert!(Histogram::new(LE.to_vec(), vec![0; 3], 0.0).is_err());
        assert!(Histogram::new(vec![1.0, 2.0], vec![0, 0], 0.0).is_err());
    }
}
