//! The charts of a queue's last hour, on its page: inline SVG rendered here, on the server,
//! from the minutes the server keeps (`queue_history_rows`, db.rs), with no script.
//!
//! The Content Security Policy (security.rs) allows styles from the stylesheet only, no inline
//! `style` attribute: every colour, stroke and font size of a chart is an SVG presentation
//! attribute (`stroke="#1a7f37"`), which the policy does not govern, so a chart looks the same
//! without the stylesheet. Each chart is an `<svg role="img">` named by its `<title>` and
//! described by its `<desc>` (the series' totals, in words); each minute has a transparent
//! column whose `<title>` is that minute's values (a tooltip). A value the server does not
//! know (a time in queue in a minute without claims, a backlog not known) is left out of the
//! line, which breaks there: a gap, never a zero. A known value with no known neighbour is a
//! dot.

use maud::{html, Markup};

use crate::db::HistoryMinute;
use crate::pages::seconds;

/// A chart's width, in SVG user units (pixels at the page's scale).
const WIDTH: f64 = 440.0;
/// A chart's height.
const HEIGHT: f64 = 200.0;
/// The room left of the plot, for the y axis' labels and name.
const LEFT: f64 = 68.0;
/// The room right of the plot.
const RIGHT: f64 = 12.0;
/// The room above the plot.
const TOP: f64 = 10.0;
/// The room below the plot, for the x axis' labels and name.
const BOTTOM: f64 = 44.0;

/// The smallest time in queue the log scale shows, in seconds (1 ms): a smaller estimate is
/// drawn at it.
const LOG_FLOOR: f64 = 0.001;

/// Colours (of the series, the axes, the labels).
const DONE: &str = "#1a7f37";
const FAILED: &str = "#cf222e";
const CLAIMED: &str = "#0969da";
const P50: &str = "#0969da";
const P99: &str = "#8250df";
const BACKLOG: &str = "#9a6700";
const AXIS: &str = "#888";
const GRID: &str = "#e6e6e6";
const LABEL: &str = "#555";

/// One line of a chart: a value per minute, `None` where not known.
struct Series {
    /// Its name in the markup (`data-series`) and the legend.
    name: &'static str,
    /// Its colour.
    colour: &'static str,
    /// Its dash pattern (`stroke-dasharray`), if not solid.
    dash: Option<&'static str>,
    /// A value per minute, oldest first.
    values: Vec<Option<f64>>,
}

/// How a chart maps its values to heights.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    /// From 0 to `top`, a tick every `step` (whole numbers: counts).
    Linear { top: f64, step: f64 },
    /// Seconds, from 10^`low` to 10^`high`, a tick per power of ten.
    Log { low: i32, high: i32 },
}

impl Scale {
    /// A linear scale from 0 that holds `max` (at least 1), with 2 to 5 steps of 1, 2 or 5
    /// times a power of ten (never less than 1: the values are counts).
    fn linear(max: f64) -> Scale {
        let max = max.max(1.0);
        let raw = max / 4.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude)
            .max(1.0);
        Scale::Linear {
            top: step * (max / step).ceil(),
            step,
        }
    }

    /// A log scale of whole powers of ten that holds the durations from `min` to `max`
    /// seconds (at least one power; from [`LOG_FLOOR`], to 10^4 s, above the server's
    /// largest estimate, 3600 s); 1 ms to 1 s without any.
    fn log(min: Option<f64>, max: Option<f64>) -> Scale {
        let (Some(min), Some(max)) = (min, max) else {
            return Scale::Log { low: -3, high: 0 };
        };
        let exponent = |v: f64| v.max(LOG_FLOOR).log10();
        let low = (exponent(min).floor() as i32).clamp(-3, 3);
        let high = (exponent(max).ceil() as i32).clamp(low + 1, 4);
        Scale::Log { low, high }
    }

    /// Where `v` is between the bottom (0) and the top (1) of the plot.
    fn fraction(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear { top, .. } => (v / top).clamp(0.0, 1.0),
            Scale::Log { low, high } => ((v.max(LOG_FLOOR).log10() - f64::from(low))
                / f64::from(high - low))
            .clamp(0.0, 1.0),
        }
    }

    /// The ticks of the y axis: each value and its label.
    fn ticks(&self) -> Vec<(f64, String)> {
        match *self {
            Scale::Linear { top, step } => {
                let n = (top / step).round() as i64;
                (0..=n)
                    .map(|i| {
                        let v = step * i as f64;
                        (v, format!("{v:.0}"))
                    })
                    .collect()
            }
            Scale::Log { low, high } => (low..=high)
                .map(|e| {
                    let v = 10f64.powi(e);
                    let label = if e < 0 {
                        format!("{:.0} ms", v * 1000.0)
                    } else {
                        format!("{v:.0} s")
                    };
                    (v, label)
                })
                .collect(),
        }
    }
}

/// `HH:MM` of a unix time, in UTC.
pub fn hh_mm(unix_seconds: i64) -> String {
    let minutes = unix_seconds.div_euclid(60).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// A chart's x coordinate of minute `i` of `n`: the first at the plot's left edge, the last
/// (the current minute) at its right edge.
fn x_of(i: usize, n: usize) -> f64 {
    if n < 2 {
        return LEFT + (WIDTH - LEFT - RIGHT) / 2.0;
    }
    LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / (n - 1) as f64
}

/// A chart's y coordinate of `v` on `scale`.
fn y_of(scale: &Scale, v: f64) -> f64 {
    let plot = HEIGHT - TOP - BOTTOM;
    TOP + plot * (1.0 - scale.fraction(v))
}

/// The runs of consecutive known values of `values`: each a list of (minute index, value).
fn runs(values: &[Option<f64>]) -> Vec<Vec<(usize, f64)>> {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => run.push((i, *v)),
            None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// What one chart draws.
struct Chart<'a> {
    /// Its id (`chart-<id>`): `throughput`, `time-in-queue`, `backlog`.
    id: &'static str,
    /// Its name, the figure's caption and the SVG's `<title>`.
    title: &'static str,
    /// The SVG's `<desc>`: what it shows, in words.
    desc: String,
    /// The y axis' name, with its unit.
    y_name: &'static str,
    /// How values map to heights.
    scale: Scale,
    /// Its lines.
    series: Vec<Series>,
    /// The minutes, oldest first.
    minutes: &'a [HistoryMinute],
    /// Each minute's values in words (the tooltip after the minute's time).
    tip: Box<dyn Fn(&HistoryMinute) -> String + 'a>,
    /// Shown across the plot when no series has a known value.
    if_none: &'static str,
}

impl Chart<'_> {
    /// The chart as a `<figure>`: its caption with the legend, and the SVG.
    fn render(&self) -> Markup {
        let n = self.minutes.len();
        let (plot_left, plot_right) = (LEFT, WIDTH - RIGHT);
        let (plot_top, plot_bottom) = (TOP, HEIGHT - BOTTOM);
        let column = if n < 2 {
            plot_right - plot_left
        } else {
            (plot_right - plot_left) / (n - 1) as f64
        };
        let title_id = format!("chart-{}-title", self.id);
        let desc_id = format!("chart-{}-desc", self.id);
        let known = self
            .series
            .iter()
            .any(|s| s.values.iter().any(Option::is_some));
        // Clock-aligned x ticks: every quarter hour.
        let x_ticks: Vec<(f64, String)> = self
            .minutes
            .iter()
            .enumerate()
            .filter(|(_, m)| m.minute.rem_euclid(15 * 60) == 0)
            .map(|(i, m)| (x_of(i, n), hh_mm(m.minute)))
            .collect();
        html! {
            figure.chart id=(format!("chart-{}", self.id)) {
                figcaption {
                    strong { (self.title) }
                    @for s in &self.series {
                        " "
                        span.key {
                            svg width="18" height="8" aria-hidden="true" {
                                line x1="0" y1="4" x2="18" y2="4" stroke=(s.colour) stroke-width="2" stroke-dasharray=[s.dash] {}
                            }
                            " " (s.name)
                        }
                    }
                }
                svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT)
                    role="img" aria-labelledby=(format!("{title_id} {desc_id}"))
                    font-family="system-ui, sans-serif" font-size="11" {
                    title id=(title_id) { (self.title) }
                    desc id=(desc_id) { (self.desc) }
                    // The y axis: grid lines and labels, its name turned along it.
                    @for (v, label) in self.scale.ticks() {
                        @let y = y_of(&self.scale, v);
                        line.grid x1=(f1(plot_left)) y1=(f1(y)) x2=(f1(plot_right)) y2=(f1(y)) stroke=(GRID) {}
                        text x=(f1(plot_left - 4.0)) y=(f1(y + 4.0)) text-anchor="end" fill=(LABEL) { (label) }
                    }
                    text transform=(format!("translate(12 {}) rotate(-90)", f1((plot_top + plot_bottom) / 2.0)))
                        text-anchor="middle" fill=(LABEL) { (self.y_name) }
                    // The x axis: a tick and label every quarter hour, its name below.
                    line.axis x1=(f1(plot_left)) y1=(f1(plot_bottom)) x2=(f1(plot_right)) y2=(f1(plot_bottom)) stroke=(AXIS) {}
                    line.axis x1=(f1(plot_left)) y1=(f1(plot_top)) x2=(f1(plot_left)) y2=(f1(plot_bottom)) stroke=(AXIS) {}
                    @for (x, label) in &x_ticks {
                        line x1=(f1(*x)) y1=(f1(plot_bottom)) x2=(f1(*x)) y2=(f1(plot_bottom + 4.0)) stroke=(AXIS) {}
                        text x=(f1(*x)) y=(f1(plot_bottom + 16.0)) text-anchor="middle" fill=(LABEL) { (label) }
                    }
                    text x=(f1((plot_left + plot_right) / 2.0)) y=(f1(HEIGHT - 6.0)) text-anchor="middle" fill=(LABEL) {
                        "time (UTC), one point per minute, the last one so far"
                    }
                    @if !known {
                        text.none x=(f1((plot_left + plot_right) / 2.0)) y=(f1((plot_top + plot_bottom) / 2.0))
                            text-anchor="middle" fill=(LABEL) { (self.if_none) }
                    }
                    // The lines, broken where a value is not known; a lone known value is a dot.
                    @for s in &self.series {
                        @for run in runs(&s.values) {
                            @if run.len() == 1 {
                                circle.point data-series=(s.name) cx=(f1(x_of(run[0].0, n))) cy=(f1(y_of(&self.scale, run[0].1)))
                                    r="2.5" fill=(s.colour) {}
                            } @else {
                                polyline.line data-series=(s.name) fill="none" stroke=(s.colour) stroke-width="1.75"
                                    stroke-linejoin="round" stroke-dasharray=[s.dash]
                                    points=(run.iter().map(|(i, v)| format!("{},{}", f1(x_of(*i, n)), f1(y_of(&self.scale, *v)))).collect::<Vec<_>>().join(" ")) {}
                            }
                        }
                    }
                    // A column per minute, its values as its tooltip (transparent, but painted:
                    // it takes the pointer; the stylesheet shades it under the pointer).
                    g.minutes fill="#000" fill-opacity="0" {
                        @for (i, m) in self.minutes.iter().enumerate() {
                            @let left = (x_of(i, n) - column / 2.0).max(plot_left);
                            @let right = (x_of(i, n) + column / 2.0).min(plot_right);
                            rect.minute data-minute=(hh_mm(m.minute)) x=(f1(left)) y=(f1(plot_top))
                                width=(f1(right - left)) height=(f1(plot_bottom - plot_top)) {
                                title {
                                    (hh_mm(m.minute)) " UTC"
                                    @if i + 1 == n { " (so far)" }
                                    ": " ((self.tip)(m))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A coordinate with one decimal.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// The minute (as `HH:MM`) and value of the largest of `values`, if any is known and above 0.
fn peak(minutes: &[HistoryMinute], values: &[Option<f64>]) -> Option<(String, f64)> {
    minutes
        .iter()
        .zip(values)
        .filter_map(|(m, v)| v.map(|v| (m.minute, v)))
        .filter(|(_, v)| *v > 0.0)
        .fold(None, |best: Option<(i64, f64)>, (m, v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((m, v)),
        })
        .map(|(m, v)| (hh_mm(m), v))
}

/// The three charts of a queue's last hour (at least one minute): throughput (done, failed,
/// claimed per minute), time in queue (p50, p99, seconds on a log scale) and backlog
/// (pending items at each minute's end).
pub fn queue_charts(minutes: &[HistoryMinute]) -> Markup {
    let (Some(first), Some(last)) = (minutes.first(), minutes.last()) else {
        return html! {};
    };
    let span = format!("{} to {} UTC", hh_mm(first.minute), hh_mm(last.minute));
    let count = |f: fn(&HistoryMinute) -> i64| -> Vec<Option<f64>> {
        minutes.iter().map(|m| Some(f(m) as f64)).collect()
    };
    let sum = |f: fn(&HistoryMinute) -> i64| -> i64 { minutes.iter().map(f).sum() };

    let done = count(|m| m.done);
    let failed = count(|m| m.failed);
    let claimed = count(|m| m.claimed);
    let most = [&done, &failed, &claimed]
        .iter()
        .flat_map(|s| s.iter().flatten())
        .fold(0.0_f64, |a, b| a.max(*b));
    let busiest = match peak(minutes, &done) {
        Some((at, n)) => format!("; the most done in a minute: {n:.0}, at {at}"),
        None => String::new(),
    };
    let throughput = Chart {
        id: "throughput",
        title: "Throughput",
        desc: format!(
            "Items per minute from {span}: {} done, {} failed and {} claimed in all{busiest}.",
            sum(|m| m.done),
            sum(|m| m.failed),
            sum(|m| m.claimed)
        ),
        y_name: "items per minute",
        scale: Scale::linear(most),
        series: vec![
            Series {
                name: "done",
                colour: DONE,
                dash: None,
                values: done,
            },
            Series {
                name: "failed",
                colour: FAILED,
                dash: None,
                values: failed,
            },
            Series {
                name: "claimed",
                colour: CLAIMED,
                dash: Some("4 3"),
                values: claimed,
            },
        ],
        minutes,
        tip: Box::new(|m| {
            format!(
                "done {}, failed {}, claimed {}",
                m.done, m.failed, m.claimed
            )
        }),
        if_none: "",
    };

    let p50: Vec<Option<f64>> = minutes.iter().map(|m| m.time_in_queue_p50).collect();
    let p99: Vec<Option<f64>> = minutes.iter().map(|m| m.time_in_queue_p99).collect();
    let known = p50.iter().chain(&p99).flatten().copied();
    let (low, high) = known.fold((None, None), |(lo, hi): (Option<f64>, Option<f64>), v| {
        (
            Some(lo.map_or(v, |l| l.min(v))),
            Some(hi.map_or(v, |h| h.max(v))),
        )
    });
    let with_claims = p50.iter().filter(|v| v.is_some()).count();
    let latency_desc = match peak(minutes, &p99) {
        Some((at, v)) => format!(
            "Time from due to claimed of each minute's claims from {span}, the median (p50) and \
             99th percentile (p99) in seconds on a log scale: {with_claims} of {} minutes had \
             claims; the highest p99 {}, at {at}; no line where a minute had none.",
            minutes.len(),
            seconds(v)
        ),
        None => format!("No claims from {span}: no time in queue to show."),
    };
    let time_in_queue = Chart {
        id: "time-in-queue",
        title: "Time in queue",
        desc: latency_desc,
        y_name: "seconds (log scale)",
        scale: Scale::log(low, high),
        series: vec![
            Series {
                name: "p50",
                colour: P50,
                dash: None,
                values: p50,
            },
            Series {
                name: "p99",
                colour: P99,
                dash: Some("4 3"),
                values: p99,
            },
        ],
        minutes,
        tip: Box::new(|m| match (m.time_in_queue_p50, m.time_in_queue_p99) {
            (Some(p50), Some(p99)) => format!(
                "p50 {}, p99 {} ({} claimed)",
                seconds(p50),
                seconds(p99),
                m.claimed
            ),
            _ => "no timed claims".to_owned(),
        }),
        if_none: "no timed claims in the last hour",
    };

    let backlog: Vec<Option<f64>> = minutes
        .iter()
        .map(|m| m.backlog.map(|b| b as f64))
        .collect();
    let unknown = backlog.iter().filter(|v| v.is_none()).count();
    let backlog_desc = if unknown == minutes.len() {
        format!("The queue's pending items are not known for any minute from {span}.")
    } else {
        format!(
            "Pending items (due or not) at each minute's end from {span}: {}{}{}.",
            match last.backlog {
                Some(n) => format!("{n} now"),
                None => "not known now".to_owned(),
            },
            match peak(minutes, &backlog) {
                Some((at, n)) => format!(", at most {n:.0}, at {at}"),
                None => String::new(),
            },
            match unknown {
                0 => String::new(),
                u => format!("; not known for {u} minutes, left blank"),
            }
        )
    };
    let backlog_chart = Chart {
        id: "backlog",
        title: "Backlog",
        desc: backlog_desc,
        y_name: "pending items",
        scale: Scale::linear(backlog.iter().flatten().fold(0.0_f64, |a, b| a.max(*b))),
        series: vec![Series {
            name: "pending",
            colour: BACKLOG,
            dash: None,
            values: backlog,
        }],
        minutes,
        tip: Box::new(|m| match m.backlog {
            Some(n) => format!("{n} pending"),
            None => "not known".to_owned(),
        }),
        if_none: "not known",
    };

    html! {
        div.charts {
            (throughput.render())
            (time_in_queue.render())
            (backlog_chart.render())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(i: i64) -> HistoryMinute {
        HistoryMinute::quiet(1_767_225_600 + 60 * i) // 2026-01-01 00:00 UTC
    }

    #[test]
    fn scales_hold_their_values() {
        assert_eq!(
            Scale::linear(0.0),
            Scale::Linear {
                top: 1.0,
                step: 1.0
            }
        );
        assert_eq!(
            Scale::linear(3.0),
            Scale::Linear {
                top: 3.0,
                step: 1.0
            }
        );
        assert_eq!(
            Scale::linear(42.0),
            Scale::Linear {
                top: 60.0,
                step: 20.0
            }
        );
        assert_eq!(
            Scale::linear(1000.0),
            Scale::Linear {
                top: 1000.0,
                step: 500.0
            }
        );
        assert_eq!(Scale::log(None, None), Scale::Log { low: -3, high: 0 });
        assert_eq!(
            Scale::log(Some(0.0025), Some(0.0049)),
            Scale::Log { low: -3, high: -2 }
        );
        assert_eq!(
            Scale::log(Some(0.2), Some(3600.0)),
            Scale::Log { low: -1, high: 4 }
        );
        assert_eq!(
            Scale::log(Some(0.0), Some(0.0)),
            Scale::Log { low: -3, high: -2 }
        );
        let log = Scale::Log { low: -3, high: 1 };
        assert_eq!(
            log.ticks().into_iter().map(|(_, l)| l).collect::<Vec<_>>(),
            ["1 ms", "10 ms", "100 ms", "1 s", "10 s"]
        );
        assert!((log.fraction(0.1) - 0.5).abs() < 1e-9);
        assert_eq!(log.fraction(0.0), 0.0, "below the floor: at the bottom");
    }

    #[test]
    fn unknown_values_are_gaps_and_lone_values_dots() {
        let values = [None, Some(1.0), Some(2.0), None, Some(3.0), None];
        assert_eq!(
            runs(&values),
            vec![vec![(1, 1.0), (2, 2.0)], vec![(4, 3.0)]]
        );
        let mut minutes: Vec<HistoryMinute> = (0..60).map(minute).collect();
        minutes[58].claimed = 2;
        minutes[58].done = 2;
        minutes[58].time_in_queue_p50 = Some(0.0025);
        minutes[58].time_in_queue_p99 = Some(0.0049);
        minutes[58].backlog = Some(4);
        minutes[59].backlog = Some(3);
        let html = queue_charts(&minutes).into_string();
        // The time in queue: one minute with claims, a dot per quantile, no line.
        assert_eq!(
            html.matches("<circle class=\"point\" data-series=\"p50\"")
                .count(),
            1
        );
        assert_eq!(
            html.matches("<circle class=\"point\" data-series=\"p99\"")
                .count(),
            1
        );
        assert!(
            !html.contains("<polyline class=\"line\" data-series=\"p50\""),
            "{html}"
        );
        // The backlog: two known minutes, one line of two points.
        let backlog = html
            .split("data-series=\"pending\"")
            .nth(1)
            .expect("a backlog line");
        let points = backlog
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 2, "{points}");
        // Throughput: every minute known, 60 points.
        let done = html.split("data-series=\"done\"").nth(1).unwrap();
        let points = done
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 60);
        assert!(
            html.contains("<title>00:58 UTC: done 2, failed 0, claimed 2</title>"),
            "{html}"
        );
        assert!(html.contains("<title>00:59 UTC (so far): done 0, failed 0, claimed 0</title>"));
        assert!(html.contains("<title>00:57 UTC: no timed claims</title>"));
        assert!(
            html.contains("<title>00:58 UTC: p50 2.5 ms, p99 4.9 ms (2 claimed)</title>"),
            "{html}"
        );
        assert!(html.contains("<title>00:10 UTC: not known</title>"));
        assert!(
            html.contains("2 done, 0 failed and 2 claimed in all"),
            "{html}"
        );
        assert!(html.contains("not known for 58 minutes"), "{html}");
        assert!(
            !html.contains("style="),
            "the CSP refuses inline styles: {html}"
        );
        // Quarter-hour ticks: 00:00, 00:15, 00:30, 00:45.
        for t in ["00:00", "00:15", "00:30", "00:45"] {
            assert!(
                html.contains(&format!("text-anchor=\"middle\" fill=\"#555\">{t}</text>")),
                "{t}"
            );
        }
    }

    #[test]
    fn a_quiet_hour_says_so() {
        let minutes: Vec<HistoryMinute> = (0..60).map(minute).collect();
        let html = queue_charts(&minutes).into_string();
        assert!(
            html.contains(">no timed claims in the last hour</text>"),
            "{html}"
        );
        assert!(html.contains("No claims from 00:00 to 00:59 UTC"), "{html}");
        assert!(html.contains("not known for any minute"), "{html}");
        assert!(!html.contains("<circle"), "{html}");
        assert!(queue_charts(&[]).into_string().is_empty());
    }

    #[test]
    fn times_of_day_are_utc() {
        assert_eq!(hh_mm(0), "00:00");
        assert_eq!(hh_mm(1_767_225_600 + 13 * 3600 + 5 * 60 + 59), "13:05");
        assert_eq!(hh_mm(-60), "23:59");
    }
}
