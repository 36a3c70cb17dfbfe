//! `/metrics`: the queue statistics in the Prometheus text format (0.0.4).
//!
//! Per queue: the gauges `workfence_items{state=pending|scheduled|claimed|expired}`,
//! `workfence_oldest_due_age_seconds` (0 when nothing is due) and
//! `workfence_paused`; the counters `workfence_items_done_total` and
//! `workfence_items_failed_total`, which are the current counts of done and
//! failed items and so fall when a purge removes finished items (Prometheus'
//! `rate()` takes a fall for a counter reset); and, when the library is
//! preloaded, `workfence_refused_total` and `workfence_lapsed_total` (since
//! the server started; absent otherwise).

use std::fmt::Write;

use crate::db::QueueStats;

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

/// Renders the statistics of every queue.
pub fn render(stats: &[QueueStats]) -> String {
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
            help: "Live items of the queue by state: pending (due), scheduled (not yet due), \
                   claimed (lease running), expired (lease ran out, not yet claimed anew).",
        },
        &mut stats.iter().flat_map(|s| {
            [
                ("pending", s.pending),
                ("scheduled", s.scheduled),
                ("claimed", s.claimed),
                ("expired", s.expired),
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
            name: "workfence_items_done_total",
            kind: "counter",
            help: "Done items of the queue (the current count: falls when a purge removes them).",
        },
        &mut stats.iter().map(|s| (q(s), s.done as f64)),
    );
    family(
        Family {
            name: "workfence_items_failed_total",
            kind: "counter",
            help: "Failed items of the queue (the current count: falls when a purge removes them).",
        },
        &mut stats.iter().map(|s| (q(s), s.failed as f64)),
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
            may_operate: true,
        }
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn renders_every_family() {
        let text = render(&[stats("q\"1")]);
        assert!(text.contains("# TYPE workfence_items gauge\n"));
        assert!(text.contains("workfence_items{queue=\"q\\\"1\",state=\"pending\"} 3\n"));
        assert!(text.contains("workfence_oldest_due_age_seconds{queue=\"q\\\"1\"} 1.5\n"));
        assert!(text.contains("workfence_paused{queue=\"q\\\"1\"} 1\n"));
        assert!(text.contains("workfence_items_done_total{queue=\"q\\\"1\"} 10\n"));
        assert!(!text.contains("workfence_refused_total{"));
    }
}
