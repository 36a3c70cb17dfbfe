//! `/metrics`: the queue statistics in the Prometheus text format (0.0.4).
//!
//! Per queue: the gauge `workfence_items{state=...}` for every state
//! (pending, scheduled, claimed, expired, done, failed, cancelled), the
//! gauges `workfence_oldest_due_age_seconds` (0 when nothing is due) and
//! `workfence_paused`; and, when the library is preloaded, the counters
//! `workfence_refused_total` and `workfence_lapsed_total` (monotonic since
//! the server started; absent otherwise).
//!
//! Per schedule (from 0.12.0, labels `schedule` and `queue`): the gauges
//! `workfence_schedule_last_fire_seconds`, when it last fired (unix seconds,
//! the server's clock; absent before its first fire), and
//! `workfence_schedule_next_slot_seconds`, its next slot (unix seconds;
//! absent when its expression names no more slots). A database older than
//! 0.12.0, or a role that may not read `work_schedules`, has neither.
//!
//! Done, failed and cancelled are gauges, not counters: the server keeps no
//! count of items ever finished, only the finished items still in the table,
//! and that number falls when `work_purge` removes them or `work_retry`
//! sends one back to pending. Exposed as a counter, each fall would read as
//! a counter reset and `rate()` would jump; as a gauge, `deriv()` or
//! `delta()` of `workfence_items{state="done"}` is the net change (finishes
//! less purges and retries), which is what it is.

use std::fmt::Write;

use crate::db::{QueueStats, ScheduleRow};

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

/// Renders the statistics of every queue, and the fires of every schedule.
pub fn render(stats: &[QueueStats], schedules: &[ScheduleRow]) -> String {
    let mut out = String::new();
    let mut family = |f: Family<'_>, samples: &mut dyn Iterator<Item = (String, f64)>| {
        let samples: Vec<_> = samples.collect();
        if samples.is_empty() {
            // No queue, or refused/lapsed without preloading: leave the family out.
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value) in samples {
            let _ = writeln!(out, "{}{{{}}} {}", f.name, labels, number(value));
        }
    };
    let q = |s: &QueueStats| format!("queue=\"{}\"", escape_label(&s.queue));

    family(
        Family {
            name: "workfence_items",
            kind: "gauge",
            help: "Items of the queue now, by state: pending (due), scheduled (not yet due), \
                   claimed (lease running), expired (lease ran out, not yet claimed anew), and \
                   the finished items still kept: done, failed, cancelled (these fall when \
                   work_purge removes items or work_retry sends one back to pending).",
        },
        &mut stats.iter().flat_map(|s| {
            [
                ("pending", s.pending),
                ("scheduled", s.scheduled),
                ("claimed", s.claimed),
                ("expired", s.expired),
                ("done", s.done),
                ("failed", s.failed),
                ("cancelled", s.cancelled),
            ]
            .into_iter()
            .map(move |(state, n)| (format!("{},state=\"{state}\"", q(s)), n as f64))
        }),
    );
    family(
        Family {
            name: "workfence_oldest_due_age_seconds",
            kind: "gauge",
            help: "How long the oldest due pending item has waited, by the server's clock (0: none due).",
        },
        &mut stats
            .iter()
            .map(|s| (q(s), s.oldest_due_age.unwrap_or(0.0))),
    );
    family(
        Family {
            name: "workfence_paused",
            kind: "gauge",
            help: "1 when the queue is paused (work_pause), else 0.",
        },
        &mut stats
            .iter()
            .map(|s| (q(s), if s.paused { 1.0 } else { 0.0 })),
    );
    family(
        Family {
            name: "workfence_refused_total",
            kind: "counter",
            help: "Stale-token calls refused since the server started (only with pg_workfence preloaded).",
        },
        &mut stats
            .iter()
            .filter_map(|s| s.refused.map(|n| (q(s), n as f64))),
    );
    family(
        Family {
            name: "workfence_lapsed_total",
            kind: "counter",
            help: "Lapsed leases claimed anew since the server started (only with pg_workfence preloaded).",
        },
        &mut stats
            .iter()
            .filter_map(|s| s.lapsed.map(|n| (q(s), n as f64))),
    );
    let sq = |s: &ScheduleRow| {
        format!(
            "schedule=\"{}\",queue=\"{}\"",
            escape_label(&s.name),
            escape_label(&s.queue)
        )
    };
    family(
        Family {
            name: "workfence_schedule_last_fire_seconds",
            kind: "gauge",
            help:
                "When the schedule last fired a slot (enqueued its item), in unix seconds by the \
                   server's clock (absent until its first fire).",
        },
        &mut schedules
            .iter()
            .filter_map(|s| s.last_fired_epoch.map(|t| (sq(s), t))),
    );
    family(
        Family {
            name: "workfence_schedule_next_slot_seconds",
            kind: "gauge",
            help: "The schedule's next slot, the first not yet fired or skipped, in unix seconds \
                   (absent when its cron expression names no more slots).",
        },
        &mut schedules
            .iter()
            .filter_map(|s| s.next_slot_epoch.map(|t| (sq(s), t))),
    );
    out
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
        assert!(!render(&[stats("q")], &[]).contains("workfence_schedule_"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn renders_every_family() {
        let text = render(&[stats("q\"1")], &[]);
        assert!(text.contains("# TYPE workfence_items gauge\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"pending\"} 3\n"));
        assert!(text.contains("workfence_oldest_due_age_seconds{queue=\"q\\\"1\"} 1.5\n"));
        assert!(text.contains("workfence_paused{queue=\"q\\\"1\"} 1\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"done\"} 10\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"failed\"} 1\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"cancelled\"} 0\n"));
        assert!(!text.contains("_done_total") && !text.contains("_failed_total"));
        assert!(!text.contains("workfence_refused_total{"));
        // One HELP and one TYPE line per family, however many queues.
        let text = render(&[stats("a"), stats("b")], &[]);
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
}
