//! The HTML pages, server-rendered with maud (which escapes every value it
//! interpolates: a payload `<script>` shows as text). No page has a script;
//! the Content Security Policy (security.rs) forbids any.

use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::db::{
    Histogram, History, Item, ItemRow, QueueCounters, QueueStats, ScheduleRow, Session, Workflow,
    DEFAULT_PER, ITEM_STATES, WORKFLOW_MAX_DRAWN, WORKFLOW_MAX_ROWS,
};
use crate::security::TOKEN_FIELD;
use crate::throughput::Rate;
use crate::{charts, workflow};

/// What a path segment keeps unencoded: letters, digits and `-._~`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The stylesheet, served at `/style.css`.
pub const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
a{color:#0645ad}table{border-collapse:collapse;margin:.5em 0}\
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}\
td.num,th.num{text-align:right}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}\
.badge{background:#b35900;color:#fff;border-radius:.3em;padding:.1em .5em;font-size:.85em}\
#flash{background:#e6f4e6;padding:.5em}#error{background:#fbe9e9;padding:.5em}\
form.inline{display:inline}nav a{margin-right:1em}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}\
dt{font-weight:bold}dd{margin:0}.muted{color:#777}\
details.set-limits summary{cursor:pointer;color:#0645ad}details.set-limits label{display:block;margin:.2em 0}\
details.set-limits input[type=number]{width:6em}#schedules td.name,#schedules td.cron,#queue-schedules td.cron{white-space:nowrap}\
.charts{display:flex;flex-wrap:wrap;gap:.5em 2em}figure.chart{margin:0}figure.chart figcaption{margin-bottom:.2em}\
figure.chart>svg{display:block;max-width:100%;height:auto}.key{color:#555;font-size:.9em;margin-left:.5em}\
.key svg{display:inline;vertical-align:middle}rect.minute:hover{fill-opacity:.06}\
figure#workflow-graph{margin:0}.workflow-scroll{display:inline-block;overflow:auto;max-height:40em;max-width:100%;border:1px solid #eee}\
.workflow-scroll>svg{display:block}a.node:hover rect.box,a.node:focus rect.box{stroke-width:3}";

/// `/queues/NAME` for a queue name (percent-encoded).
pub fn queue_href(queue: &str) -> String {
    format!("/queues/{}", utf8_percent_encode(queue, SEGMENT))
}

/// `/schedules/NAME` for a schedule name (percent-encoded): the actions' base.
pub fn schedule_href(name: &str) -> String {
    format!("/schedules/{}", utf8_percent_encode(name, SEGMENT))
}

/// `/items/ID`.
pub fn item_href(id: i64) -> String {
    format!("/items/{id}")
}

/// A query string value, form-encoded.
pub fn query_value(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The frame of every page: title, navigation, the read-only badge and a flash.
pub struct Frame<'a> {
    /// The page's title and heading.
    pub title: String,
    /// Why nothing can be changed from this page, when nothing can (shown as a badge).
    pub read_only: Option<&'a str>,
    /// The role the dashboard runs as, when known.
    pub role: Option<&'a str>,
    /// A message about the action just done.
    pub flash: Option<String>,
    /// The form token, also put in a `<meta name="csrf-token">` of the page
    /// (a page without forms still has it: a client may POST what it likes and
    /// be answered by the database, e.g. with 42501).
    pub csrf: Option<&'a str>,
}

/// Wraps `body` in the frame.
pub fn page(frame: &Frame<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (frame.title) " · workfence" }
                link rel="stylesheet" href="/style.css";
                @if let Some(csrf) = frame.csrf {
                    meta name="csrf-token" content=(csrf);
                }
            }
            body {
                nav {
                    a href="/" { "queues" }
                    a href="/schedules" { "schedules" }
                    a href="/metrics" { "metrics" }
                    @if let Some(role) = frame.role {
                        span.muted { "as role " code { (role) } }
                    }
                }
                h1 {
                    (frame.title)
                    @if let Some(why) = frame.read_only {
                        " " span #read-only .badge title=(why) { "read-only" }
                    }
                }
                @if let Some(flash) = &frame.flash {
                    p #flash { (flash) }
                }
                (body)
            }
        }
    }
}

/// The hidden token field of every POST form.
fn token(csrf: &str) -> Markup {
    html! { input type="hidden" name=(TOKEN_FIELD) value=(csrf); }
}

/// Why nothing can be changed, for the whole session, if nothing can.
pub fn session_read_only(session: &Session) -> Option<&'static str> {
    if session.in_recovery {
        Some("the server is a hot standby (in recovery): nothing can be changed")
    } else if !session.may_act() {
        Some("this role may not call the operating functions (work_pause, work_retry, ...)")
    } else {
        None
    }
}

/// A duration in seconds, in words: `4.2 s`, `3 min 5 s`, `2 h 10 min`, `3 d 4 h`.
pub fn age(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{seconds:.1} s");
    }
    let s = seconds as u64;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m} min")
    } else {
        format!("{m} min {sec} s")
    }
}

/// A queue's limits in words, or `none`.
pub fn limits(stats: &QueueStats) -> String {
    let mut parts = Vec::new();
    if let Some(c) = stats.concurrency {
        parts.push(format!("concurrency {c}"));
    }
    if let Some(rate) = stats.rate {
        match &stats.per {
            Some(per) => parts.push(format!("{rate} per {per}")),
            None => parts.push(format!("rate {rate}")),
        }
    }
    if let Some(n) = stats.per_group {
        parts.push(format!("{n} per group"));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("; ")
    }
}

/// The form that sets every limit of a queue (`work_limit`), prefilled with
/// its limits now and folded away until opened. An empty field lifts that
/// limit; `per_group` is there only when the database's `work_limit` takes it
/// (0.12.0 or later).
pub fn limits_form(stats: &QueueStats, csrf: &str) -> Markup {
    html! {
        details.set-limits {
            summary { "set" }
            form method="post" action={ (queue_href(&stats.queue)) "/limits" } {
                (token(csrf))
                label { "concurrency " input type="number" name="concurrency" step="1" placeholder="none" value=[stats.concurrency]; }
                label { "rate " input type="number" name="rate" step="1" placeholder="none" value=[stats.rate]; }
                label { "per " input type="text" name="per" size="10" placeholder=(DEFAULT_PER) value=(stats.per.as_deref().unwrap_or(DEFAULT_PER)); }
                @if stats.per_group_settable {
                    label { "per group " input type="number" name="per_group" step="1" placeholder="1 (serial)" value=[stats.per_group]; }
                }
                button type="submit" data-action="limits" { "set limits" }
                p.muted { "Every limit at once: an empty field lifts that limit." }
            }
        }
    }
}

/// The queues page.
pub fn queues(
    session: &Session,
    stats: &[QueueStats],
    throughput: &dyn Fn(&str) -> Option<Rate>,
    csrf: &str,
    flash: Option<String>,
) -> Markup {
    let read_only = session_read_only(session);
    let frame = Frame {
        title: "Queues".into(),
        read_only,
        role: Some(&session.role),
        flash,
        csrf: Some(csrf),
    };
    let body = html! {
        @if stats.is_empty() {
            p #no-queues { "No queue has items or settings that this role may read." }
        } @else {
            table #queues {
                thead { tr {
                    th { "queue" }
                    th.num title="waiting for their parents (workflows, from 0.12.0)" { "waiting" }
                    th.num { "pending" } th.num { "scheduled" } th.num { "claimed" }
                    th.num { "expired" } th.num { "done" } th.num { "failed" }
                    th.num { "cancelled" } th { "oldest due" } th { "paused" }
                    th.num { "refused" } th.num { "lapsed" } th { "limits" }
                    th title="net change of done + failed per minute over the last five minutes, since this dashboard started watching (see below)" { "throughput" }
                    th { "actions" }
                } }
                tbody {
                    @for s in stats {
                        tr data-queue=(s.queue) {
                            td.queue { a href=(queue_href(&s.queue)) { (s.queue) } }
                            td.num.waiting { (s.waiting) }
                            td.num.pending { (s.pending) }
                            td.num.scheduled { (s.scheduled) }
                            td.num.claimed { (s.claimed) }
                            td.num.expired { (s.expired) }
                            td.num.done { (s.done) }
                            td.num.failed { (s.failed) }
                            td.num.cancelled { (s.cancelled) }
                            td.oldest-due { @match s.oldest_due_age { Some(a) => (age(a)), None => "—" } }
                            td.paused { @if s.paused { "paused" } @else { "no" } }
                            td.num.refused { @match s.refused { Some(n) => (n), None => span.muted title="counted only with pg_workfence preloaded" { "—" } } }
                            td.num.lapsed { @match s.lapsed { Some(n) => (n), None => span.muted title="counted only with pg_workfence preloaded" { "—" } } }
                            td.limits {
                                span.limits-now { (limits(s)) }
                                @if read_only.is_none() && s.may_operate && session.limit {
                                    " " (limits_form(s, csrf))
                                }
                            }
                            @match throughput(&s.queue) {
                                Some(r) => td.throughput title=(format!("over the last {}", age(r.over.as_secs_f64()))) {
                                    (format!("{:.1}/min", r.per_minute))
                                },
                                None => td.throughput title="not yet two readings a second apart since this dashboard started watching (or since the count fell)" {
                                    span.muted { "—" }
                                },
                            }
                            td.actions {
                                @if read_only.is_none() && s.may_operate {
                                    @if s.paused && session.resume {
                                        form.inline method="post" action={ (queue_href(&s.queue)) "/resume" } {
                                            (token(csrf))
                                            button type="submit" data-action="resume" { "resume" }
                                        }
                                    } @else if !s.paused && session.pause {
                                        form.inline method="post" action={ (queue_href(&s.queue)) "/pause" } {
                                            (token(csrf))
                                            button type="submit" data-action="pause" { "pause" }
                                        }
                                    }
                                } @else {
                                    span.muted { "read-only" }
                                }
                            }
                        }
                    }
                }
            }
        }
        p.muted #throughput-note {
            "Throughput is counted since this dashboard started watching: each time this page or "
            a href="/metrics" { "/metrics" }
            " is read, each queue's count of done + failed items is kept, and the change per minute over the last five minutes is shown once two readings a second apart exist. "
            "That count is of the finished items still kept, not of finishes: items purged or retried between two readings are subtracted, so the rate is at most the true rate of finishes (equal when nothing was purged or retried). "
            "When the count falls, the queue's readings start over (—, then a rate over the time since). Cancelled items are not counted."
        }
    };
    page(&frame, body)
}

/// What the items page shows.
pub struct ItemsView<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The state filter, if any.
    pub state: Option<&'a str>,
    /// The page's rows.
    pub rows: &'a [ItemRow],
    /// The `after` of the next page, when there is one.
    pub next_after: Option<i64>,
    /// The `after` this page was asked for (`None`: the first page).
    pub after: Option<i64>,
    /// For an empty page after `after`, when that item is no longer in this
    /// listing: why, in words (`purged: no item has that id`, `it is done
    /// now`, ...).
    pub after_left: Option<String>,
    /// `work_may('operate', queue)`.
    pub may_operate: bool,
    /// The schedules that enqueue in the queue (none where the role may not read
    /// `work_schedules`, or before 0.12.0).
    pub schedules: &'a [ScheduleRow],
    /// What the queue's items went through since the server started (`work_queue_counters`:
    /// from 0.12.0, with the library preloaded, for a role that may read it).
    pub counters: Option<&'a QueueCounters>,
    /// The queue's last hour, minute by minute (`queue_history_rows`, from 0.12.0): its
    /// charts, or the sentence that says why there are none.
    pub history: &'a History,
}

/// The queue page's section *Last hour*: the charts of the queue's last hour
/// ([`charts::queue_charts`]), or one sentence (`#no-history`) that says why there are none:
/// an extension older than 0.12.0, a role that may not read the history, or no minute kept
/// for the queue. `counted`: the server counts the queue (`work_queue_counters` has its row),
/// so it is preloaded: a queue counted without a history had nothing charted since the
/// server started (refusals, purges), or 1024 other queues were charted within the hour.
fn last_hour(history: &History, counted: bool) -> Markup {
    let why = match history {
        History::Minutes(minutes) if !minutes.is_empty() => None,
        History::Absent => Some(
            "No charts: the queue's last hour is kept from pg_workfence 0.12.0, and this \
             database's extension is older (ALTER EXTENSION pg_workfence UPDATE)."
                .to_owned(),
        ),
        History::NotReadable => Some(
            "No charts: this role may not read the queue's last hour (it needs SELECT on \
             workfence.work_queue_history and EXECUTE on workfence.queue_history_rows, as \
             workfence_monitor has, and a read grant on the queue where queue grants are \
             enforced)."
                .to_owned(),
        ),
        History::Minutes(_) if counted => Some(
            "No charts: the server counts this queue but keeps no history of it: it keeps one \
             from a queue's first enqueue, claim, finish or failure since it started, for at \
             most 1024 queues charted within one hour."
                .to_owned(),
        ),
        History::Minutes(_) => Some(
            "No charts yet: the server keeps each queue's last hour only with pg_workfence in \
             shared_preload_libraries, from the queue's first enqueue, claim or finish since \
             the server started."
                .to_owned(),
        ),
    };
    html! {
        section #history {
            h2 { "Last hour" }
            @match (why, history) {
                (Some(why), _) => p #no-history .muted { (why) },
                (None, History::Minutes(minutes)) => {
                    (charts::queue_charts(minutes))
                    p.muted #history-note {
                        "From the server's history of the queue (" code { "work_queue_history" }
                        "), kept in shared memory since the server started: each minute's counts as "
                        "committed, the current minute so far; time in queue from due to claimed, "
                        "estimated from the counters' buckets. A line breaks where a minute had no "
                        "claims or its backlog is not known. Hover a minute for its values."
                    }
                },
                (None, _) => {},
            }
        }
    }
}

/// The order `work_items` lists a state filter's items in, in words.
pub fn listing_order(state: Option<&str>) -> &'static str {
    match state {
        None => "Every item, by key, descending (generated keys: newest first).",
        Some("pending") => {
            "Claim order: priority, then due time, then id (those not yet due included)."
        }
        Some("claimed") => "Soonest lease end first (lapsed leases on top).",
        Some("waiting") => "Oldest first (by id): the items waiting for their parents.",
        Some(_) => "Newest finish first.",
    }
}

/// A link to a page of the queue's items.
fn items_link(queue: &str, state: Option<&str>, after: Option<i64>) -> String {
    let mut href = queue_href(queue);
    let mut sep = '?';
    if let Some(state) = state {
        href.push_str(&format!("{sep}state={}", query_value(state)));
        sep = '&';
    }
    if let Some(after) = after {
        href.push_str(&format!("{sep}after={after}"));
    }
    href
}

/// The items page of a queue.
pub fn items(session: &Session, view: &ItemsView<'_>, csrf: &str) -> Markup {
    let frame = Frame {
        title: format!("Queue {}", view.queue),
        read_only: session_read_only(session).or(if view.may_operate {
            None
        } else {
            Some("this role may not operate this queue (queue grants)")
        }),
        role: Some(&session.role),
        flash: None,
        csrf: Some(csrf),
    };
    let body = html! {
        (last_hour(view.history, view.counters.is_some()))
        p #filters {
            "State: "
            @if view.state.is_none() { strong { "all" } } @else { a href=(items_link(view.queue, None, None)) { "all" } }
            // Waiting items (workflows) from 0.12.0, where work_items lists them.
            @for s in ITEM_STATES.into_iter().filter(|s| *s != "waiting" || session.workflow_exists) {
                " · "
                @if view.state == Some(s) { strong { (s) } } @else { a href=(items_link(view.queue, Some(s), None)) data-state=(s) { (s) } }
            }
        }
        p #order .muted { (listing_order(view.state)) }
        form #key-search method="get" action=(queue_href(view.queue)) {
            label { "Key: " input type="text" name="key" required; }
            " "
            button type="submit" { "find" }
        }
        @if view.rows.is_empty() {
            @if let Some(after) = view.after {
                p #no-items {
                    @if let Some(why) = &view.after_left {
                        "The item this page started after (" (after) ") has left this listing "
                        "(" (why) ") — start again from "
                    } @else {
                        "No more items after item " (after) ": those that followed it have left this listing "
                        "since the page before was read. Start again from "
                    }
                    a href=(items_link(view.queue, view.state, None)) { "the first page" } "."
                }
            } @else {
                p #no-items { "No items." }
            }
        } @else {
            table #items {
                thead { tr {
                    th.num { "id" } th { "key" } th { "state" } th.num { "priority" }
                    th { "run at" } th { "attempts" } th { "owner" } th.num { "epoch" }
                    th { "lease until" } th { "group" } th { "last error" }
                } }
                tbody {
                    @for r in view.rows {
                        tr data-id=(r.id) {
                            td.num { a href=(item_href(r.id)) { (r.id) } }
                            td.key { (r.key) }
                            td.state { (r.state) }
                            td.num { (r.priority) }
                            td { (r.run_at.as_deref().unwrap_or("")) }
                            td { (r.attempts) "/" (r.max_attempts) }
                            td { (r.owner.as_deref().unwrap_or("")) }
                            td.num { @if let Some(e) = r.epoch { (e) } }
                            td {
                                @if r.state == "claimed" {
                                    (r.lease_until.as_deref().unwrap_or(""))
                                    @if !r.lease_live { " " span.badge { "lapsed" } }
                                }
                            }
                            td { (r.group_key.as_deref().unwrap_or("")) }
                            td.last-error { (r.last_error.as_deref().map(|e| shorten(e, 160)).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        p {
            @if view.after.is_some() && !view.rows.is_empty() {
                a #first href=(items_link(view.queue, view.state, None)) { "first page" } " "
            }
            @if let Some(after) = view.next_after {
                a #next href=(items_link(view.queue, view.state, Some(after))) { "next page" }
            }
        }
        @if let Some(c) = view.counters {
            (counters(c))
        }
        @if !view.schedules.is_empty() {
            h2 { "Schedules" }
            table #queue-schedules {
                thead { tr {
                    th { "schedule" } th { "cron" } th { "time zone" } th { "paused" }
                    th { "next slot" } th { "last fired" }
                } }
                tbody {
                    @for s in view.schedules {
                        tr data-schedule=(s.name) {
                            td.name { a href="/schedules" { (s.name) } }
                            td.cron { code { (s.cron) } }
                            td.timezone { (s.timezone) }
                            td.paused { @if s.paused { "paused" } @else { "no" } }
                            td.next-slot { (s.next_slot.as_deref().unwrap_or("")) }
                            td.last-fired { (s.last_fired_at.as_deref().unwrap_or("—")) }
                        }
                    }
                }
            }
        }
    };
    page(&frame, body)
}

/// A short duration in words: milliseconds below a second (one decimal below 10 ms), else as
/// [`age`] writes durations (`2.5 ms`, `340 ms`, `4.2 s`, `3 min 5 s`).
pub fn seconds(v: f64) -> String {
    if v < 0.01 {
        format!("{:.1} ms", v * 1000.0)
    } else if v < 1.0 {
        format!("{:.0} ms", v * 1000.0)
    } else {
        age(v)
    }
}

/// A quantile of a histogram in words, as [`seconds`] writes durations; `—` without
/// observations; `> ` the largest finite bound when it falls beyond it.
pub fn quantile(h: &Histogram, q: f64) -> String {
    let Some(v) = h.quantile(q) else {
        return "—".to_owned();
    };
    let text = seconds(v);
    if h.beyond_bounds(q) {
        format!("> {text}")
    } else {
        text
    }
}

/// The table of a queue's counters: each count, and the p50 and p99 of time in queue and run
/// time.
fn counters(c: &QueueCounters) -> Markup {
    let counts = [
        ("enqueued", c.enqueued),
        ("claimed", c.claimed),
        ("done", c.done),
        ("failed", c.failed),
        ("retried", c.retried),
        ("released", c.released),
        ("cancelled", c.cancelled),
        ("refused", c.refused),
        ("lapsed", c.lapsed),
    ];
    html! {
        h2 { "Since the server started" }
        table #counters {
            thead { tr { @for (name, _) in counts { th.num { (name) } } } }
            tbody { tr { @for (name, n) in counts { td.num data-counter=(name) { (n) } } } }
        }
        table #latency {
            thead { tr { th { } th.num { "count" } th.num { "p50" } th.num { "p99" } } }
            tbody {
                @for (id, what, h) in [
                    ("time-in-queue", "time in queue (run_at to claim)", &c.time_in_queue),
                    ("run-time", "run time (claim to finish, fail or release)", &c.run_time),
                ] {
                    tr data-histogram=(id) {
                        th { (what) }
                        td.num.count { (h.count()) }
                        td.num.p50 { (quantile(h, 0.5)) }
                        td.num.p99 { (quantile(h, 0.99)) }
                    }
                }
            }
        }
        p.muted {
            "Counted in shared memory since the server started (zero again after a restart). "
            "Quantiles are estimated from the histogram's buckets, as Prometheus' "
            code { "histogram_quantile" } " does: interpolated within the bucket they fall in."
        }
    }
}

/// Why no schedule can be paused or resumed from this dashboard, if none can.
pub fn schedules_read_only(session: &Session) -> Option<&'static str> {
    if session.in_recovery {
        Some("the server is a hot standby (in recovery): nothing can be changed")
    } else if !(session.pause_schedule || session.resume_schedule) {
        Some("this role may not call work_pause_schedule or work_resume_schedule")
    } else {
        None
    }
}

/// The schedules page (`work_schedules`, from 0.12.0): one row per schedule
/// the role may read, with pause or resume where the role may operate its
/// queue. `rows` is `None` for a database without schedules (older than
/// 0.12.0).
pub fn schedules(
    session: &Session,
    rows: Option<&[ScheduleRow]>,
    csrf: &str,
    flash: Option<String>,
) -> Markup {
    let read_only = schedules_read_only(session);
    let frame = Frame {
        title: "Schedules".into(),
        read_only,
        role: Some(&session.role),
        flash,
        csrf: Some(csrf),
    };
    let body = html! {
        @match rows {
            None => p #no-schedules-view {
                "This database has no schedules: they need pg_workfence 0.12.0 or later "
                "(ALTER EXTENSION pg_workfence UPDATE)."
            },
            Some([]) => p #no-schedules { "No schedule that this role may read." },
            Some(rows) => table #schedules {
                thead { tr {
                    th { "schedule" } th { "cron" } th { "time zone" } th { "queue" }
                    th title="what a fire does with slots that passed unfired: latest, all or none" { "catch up" }
                    th { "paused" } th { "next slot" } th { "last slot" }
                    th.num { "last item" } th { "last fired" } th { "actions" }
                } }
                tbody {
                    @for s in rows {
                        tr data-schedule=(s.name) {
                            td.name { (s.name) }
                            td.cron { code { (s.cron) } }
                            td.timezone { (s.timezone) }
                            td.queue { a href=(queue_href(&s.queue)) { (s.queue) } }
                            td.catch-up { (s.catch_up) }
                            td.paused { @if s.paused { "paused" } @else { "no" } }
                            td.next-slot { (s.next_slot.as_deref().unwrap_or("")) }
                            td.last-slot { (s.last_slot.as_deref().unwrap_or("—")) }
                            td.num.last-item {
                                @match s.last_item_id {
                                    Some(id) => a href=(item_href(id)) { (id) },
                                    None => "—",
                                }
                            }
                            td.last-fired { (s.last_fired_at.as_deref().unwrap_or("—")) }
                            td.actions {
                                @if read_only.is_none() && s.may_operate {
                                    @if s.paused && session.resume_schedule {
                                        form.inline method="post" action={ (schedule_href(&s.name)) "/resume" } {
                                            (token(csrf))
                                            button type="submit" data-action="resume-schedule" { "resume" }
                                        }
                                    } @else if !s.paused && session.pause_schedule {
                                        form.inline method="post" action={ (schedule_href(&s.name)) "/pause" } {
                                            (token(csrf))
                                            button type="submit" data-action="pause-schedule" { "pause" }
                                        }
                                    }
                                } @else {
                                    span.muted { "read-only" }
                                }
                            }
                        }
                    }
                }
            },
        }
        p.muted #schedules-note {
            "Times are UTC, by the server's clock. A paused schedule fires nothing; when it is resumed, "
            "its catch up decides which of the slots it missed fire (latest: the most recent, all: each, "
            "none: only one at most 60 s old). Pausing a schedule leaves its queue and items as they are. The last item may "
            "have been purged since."
        }
    };
    page(&frame, body)
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// What `work_lease_status(id, owner, epoch)` answered about an item's last lease.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseStatus {
    /// The function's answer (`current`, `superseded`, `missing`, ...).
    Said(String),
    /// Not asked: the role has no EXECUTE on the function (or the item no lease).
    NotCallable,
    /// The function refused the role: 42501 (insufficient privilege).
    Refused,
}

/// What `work_lease_status(id, owner, epoch)` says about an item's last
/// lease, in words. When the function could not be asked
/// ([`LeaseStatus::NotCallable`], [`LeaseStatus::Refused`]), or answered
/// `missing` about an item this role was just shown (under queue grants it
/// may read the queue and not claim from it, and the function answers as
/// for a claim), the sentence is read from the item, and says so.
pub fn lease_words(item: &Item, status: &LeaseStatus) -> String {
    let (Some(owner), Some(epoch)) = (item.owner.as_deref(), item.epoch) else {
        return "no lease: the item has never been claimed.".into();
    };
    let until = item.lease_until.as_deref().unwrap_or("?");
    let finished = item.finished_at.as_deref().unwrap_or("?");
    let from_item = match item.state.as_str() {
        "claimed" => "current",
        "done" | "failed" => "finished",
        "cancelled" => "cancelled",
        _ => "superseded",
    };
    let (status, why_from_item) = match status {
        LeaseStatus::Said(said) if said == "missing" => (
            from_item,
            Some(
                "work_lease_status answered missing: this role may read the item's queue but not \
                 claim from it (queue grants), or the item was removed since this page read it",
            ),
        ),
        LeaseStatus::Said(said) => (said.as_str(), None),
        LeaseStatus::NotCallable => (from_item, Some("this role may not call work_lease_status")),
        LeaseStatus::Refused => (
            from_item,
            Some("work_lease_status refused this role (SQLSTATE 42501)"),
        ),
    };
    let last_attempt = item.attempts >= item.max_attempts;
    let words = match status {
        "current" if item.state == "claimed" && item.lease_live => format!(
            "current: the holder's token (owner {owner}, epoch {epoch}) is the newest; its lease runs until {until}."
        ),
        "current" if item.state == "claimed" && last_attempt => format!(
            "lapsed on the last attempt: the lease of owner {owner}, epoch {epoch} ran out at {until}, on attempt \
             {} of {}; the next claim that finds the item (or, with the library preloaded, the maintenance \
             worker) dead-letters the item: it becomes failed instead of being handed out again, and the token \
             is refused from then on (until then the holder's token still works).",
            item.attempts, item.max_attempts
        ),
        "current" if item.state == "claimed" => format!(
            "lapsed: the lease of owner {owner}, epoch {epoch} ran out at {until}; the next claim takes the item \
             over (until then the holder's token still works)."
        ),
        "current" => format!("current: the token of owner {owner}, epoch {epoch} is the item's newest."),
        "uncommitted" => format!(
            "uncommitted: a transaction still in progress is changing the item (the claim that handed out \
             epoch {epoch} has not committed); only that transaction can use the token until it commits."
        ),
        "superseded" => format!(
            "superseded: the lease of owner {owner}, epoch {epoch} was handed back or a newer claim took over; \
             that token is refused."
        ),
        "finished" => format!(
            "finished: the item is {} since {finished}; no token changes it any more.",
            item.state
        ),
        "cancelled" => format!(
            "cancelled: the item was cancelled at {finished}; the token of owner {owner}, epoch {epoch} is refused."
        ),
        "wrong_owner" => format!("wrong owner: the item's newest claim is not owner {owner}'s."),
        other => format!("{other}."),
    };
    match why_from_item {
        Some(why) => format!("{words} (Read from the item: {why}.)"),
        None => words,
    }
}

/// A JSON value, indented; `None` for SQL NULL (none stored). A JSON
/// `null` that was stored shows as `null`.
fn json(value: &Option<Value>) -> Option<String> {
    value
        .as_ref()
        .map(|v| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
}

/// What the item page shows.
pub struct ItemView<'a> {
    /// The item.
    pub item: &'a Item,
    /// What `work_lease_status` says about its last lease, in words ([`lease_words`]).
    pub lease: &'a str,
    /// The workflow around it (`work_workflow`, from 0.12.0).
    pub workflow: &'a Workflow,
}

/// The item page's section *Workflow* (`#workflow`), when there is something to show: the
/// graph of the item's parents and children ([`workflow::graph`]) when `work_workflow`
/// returned another item than this one; a sentence when it returned only this one, with
/// parents that the role may not read, or when the role may not call it. Nothing for an item
/// without parents or children, nor on a database older than 0.12.0.
fn workflow_section(item: &Item, workflow: &Workflow) -> Markup {
    let rows = match workflow {
        Workflow::Absent => return html! {},
        Workflow::NotCallable => {
            return html! {
                section #workflow {
                    h2 { "Workflow" }
                    p #no-workflow .muted {
                        "Not shown: this role may not call workfence.work_workflow (workfence_monitor may), "
                        "which reads an item's parents and children."
                    }
                }
            }
        }
        Workflow::Rows(rows) => rows,
    };
    let me = rows.iter().find(|r| r.id == item.id);
    let parents: &[i64] = me.map(|r| r.parents.as_slice()).unwrap_or_default();
    let others = rows.iter().filter(|r| r.id != item.id).count();
    if others == 0 && parents.is_empty() {
        return html! {};
    }
    let state_of = |id: &i64| rows.iter().find(|r| r.id == *id).map(|r| r.state.as_str());
    let done = parents
        .iter()
        .filter(|p| state_of(p) == Some("done"))
        .count();
    let unseen = parents.iter().filter(|p| state_of(p).is_none()).count();
    let left_out = rows.len().saturating_sub(WORKFLOW_MAX_DRAWN);
    html! {
        section #workflow {
            h2 { "Workflow" }
            @if item.state == "waiting" && !parents.is_empty() {
                p #workflow-waiting {
                    "Waiting for its parents: it becomes pending in the transaction of its last parent's finish. "
                    (done) " of its " (parents.len()) " " @if parents.len() == 1 { "parent is" } @else { "parents are" } " done"
                    @if unseen > 0 { " (" (unseen) " not shown: in queues this role may not read)" }
                    "."
                }
            }
            @if others == 0 {
                p #workflow-unreadable .muted {
                    "This item has " (parents.len()) " " @if parents.len() == 1 { "parent" } @else { "parents" }
                    " (" (parents.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")) ") in queues this role may not read."
                }
            } @else {
                (workflow::graph(item.id, rows))
                @if left_out > 0 {
                    p #workflow-left-out {
                        (left_out) " of the " (rows.len()) " items of the workflow are not drawn: the graph shows the "
                        (WORKFLOW_MAX_DRAWN) " nearest to this item (+N on a box: its parents or children not drawn)."
                        @if rows.len() >= WORKFLOW_MAX_ROWS {
                            " work_workflow returns at most " (WORKFLOW_MAX_ROWS) " items: the workflow may have more."
                        }
                    }
                }
                p.muted #workflow-note {
                    "From work_workflow: the item's ancestors to its left, a column per step, and its descendants to "
                    "its right; an arrow goes from a parent to the item that waits for it. Each box is an item, with "
                    "its state, queue and key (shortened: the tooltip has them whole), linked to its page. +N: parents "
                    "or children of that item not drawn (not ancestors of this item, in queues this role may not read, "
                    "or left out)."
                }
            }
        }
    }
}

/// The item page.
pub fn item(session: &Session, view: &ItemView<'_>, csrf: &str, flash: Option<String>) -> Markup {
    let (item, lease) = (view.item, view.lease);
    let read_only = session_read_only(session).or(if item.may_operate {
        None
    } else {
        Some("this role may not operate this item's queue (queue grants)")
    });
    let can = |allowed: bool| read_only.is_none() && allowed;
    let retry = can(session.retry) && matches!(item.state.as_str(), "failed" | "cancelled");
    let reschedule = can(session.reschedule) && item.state == "pending";
    let cancel =
        can(session.cancel) && matches!(item.state.as_str(), "waiting" | "pending" | "claimed");
    let frame = Frame {
        title: format!("Item {}", item.id),
        read_only,
        role: Some(&session.role),
        flash,
        csrf: Some(csrf),
    };
    let action = |name: &str| format!("{}/{name}", item_href(item.id));
    let body = html! {
        dl #item {
            dt { "queue" } dd { a href=(queue_href(&item.queue)) { (item.queue) } }
            dt { "key" } dd #key { (item.key) }
            dt { "state" } dd { span #state { (item.state) } }
            dt { "priority" } dd { (item.priority) }
            dt { "run at" } dd { (item.run_at.as_deref().unwrap_or("")) }
            dt { "attempts" } dd { (item.attempts) " of " (item.max_attempts) }
            dt { "created" } dd { (item.created_at.as_deref().unwrap_or("")) }
            dt { "finished" } dd { (item.finished_at.as_deref().unwrap_or("—")) }
            @if let Some(m) = &item.max_run { dt { "max run" } dd { (m) } }
        }
        @if retry || reschedule || cancel {
            h2 { "Actions" }
            div #actions {
                @if retry {
                    form.inline method="post" action=(action("retry")) {
                        (token(csrf)) button type="submit" data-action="retry" { "retry" }
                    }
                }
                @if reschedule {
                    form.inline method="post" action=(action("run-now")) {
                        (token(csrf)) button type="submit" data-action="run-now" { "run now" }
                    }
                    form.inline method="post" action=(action("reschedule")) {
                        (token(csrf))
                        " at " input type="datetime-local" name="run_at" step="1";
                        " UTC, or in " input type="number" name="delay" min="0" step="1" size="6";
                        " s "
                        button type="submit" data-action="reschedule" { "reschedule" }
                    }
                }
                @if cancel {
                    form.inline method="post" action=(action("cancel")) {
                        (token(csrf)) button type="submit" data-action="cancel" { "cancel" }
                    }
                }
            }
        }
        (workflow_section(item, view.workflow))
        h2 { "Lease" }
        dl #lease {
            dt { "owner" } dd.owner { (item.owner.as_deref().unwrap_or("—")) }
            dt { "epoch" } dd.epoch { @match item.epoch { Some(e) => (e), None => "—" } }
            dt { "claimed at" } dd.claimed-at { (item.claimed_at.as_deref().unwrap_or("—")) }
            dt { "lease until" } dd.lease-until { (item.lease_until.as_deref().unwrap_or("—")) }
        }
        p #lease-status { (lease) }
        h2 { "Payload" }
        @match json(&item.payload) {
            Some(text) => pre #payload { (text) },
            None => p #payload .muted { "— (no payload)" },
        }
        h2 title="the last work_progress stored under a current lease: the next claim resumes from it" { "Checkpoint" }
        @match json(&item.progress) {
            Some(text) => pre #progress { (text) },
            None => p #progress .muted { "none" },
        }
        h2 { "Result" }
        @match json(&item.result) {
            Some(text) => pre #result { (text) },
            None => p #result .muted { "— (no result)" },
        }
        h2 { "Errors" }
        @if item.errors.is_empty() {
            p #no-errors .muted { "No failed attempt or lapsed lease." }
        } @else {
            table #errors {
                thead { tr { th { "attempt" } th { "epoch" } th { "owner" } th { "at" } th { "error" } } }
                tbody {
                    @for e in &item.errors {
                        tr { td { (e.attempt) } td { (e.epoch) } td { (e.owner) } td { (e.at) } td.error { (e.error) } }
                    }
                }
            }
        }
    };
    page(&frame, body)
}

/// An error page: `<p id="error">` holds the SQLSTATE (when the database
/// raised it) and the message; `extra` adds DETAIL and HINT lines.
pub fn error_page(
    title: &str,
    code: Option<&str>,
    message: &str,
    extra: &[(&str, &str)],
) -> Markup {
    let frame = Frame {
        title: title.to_owned(),
        read_only: None,
        role: None,
        flash: None,
        csrf: None,
    };
    page(
        &frame,
        html! {
            p #error {
                @if let Some(code) = code { "SQLSTATE " span #sqlstate { (code) } ": " }
                (message)
            }
            @for (label, text) in extra {
                p.muted { (label) ": " (text) }
            }
            p { a href="/" { "back to the queues" } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(state: &str, live: bool) -> Item {
        Item {
            id: 1,
            queue: "q".into(),
            key: "k".into(),
            state: state.into(),
            priority: 0,
            run_at: None,
            attempts: 1,
            max_attempts: 3,
            owner: Some("w<1>".into()),
            epoch: Some(7),
            claimed_at: Some("2026-01-01 00:00:00.000 UTC".into()),
            lease_until: Some("2026-01-01 00:00:30.000 UTC".into()),
            errors: vec![],
            result: None,
            created_at: None,
            finished_at: Some("2026-01-01 00:01:00.000 UTC".into()),
            payload: Some(serde_json::json!({"x": "<script>alert(1)</script>"})),
            max_run: None,
            lease_live: live,
            may_operate: true,
            progress: None,
        }
    }

    fn render_item(session: &Session, it: &Item, workflow: &Workflow) -> Markup {
        let view = ItemView {
            item: it,
            lease: "x",
            workflow,
        };
        super::item(session, &view, "tok", None)
    }

    fn wf_row(id: i64, state: &str, depth: i32, parents: &[i64]) -> crate::db::WorkflowRow {
        crate::db::WorkflowRow {
            id,
            queue: "q".into(),
            key: format!("k{id}"),
            state: state.into(),
            depth,
            parents: parents.to_vec(),
        }
    }

    #[test]
    fn the_workflow_is_drawn_only_when_there_is_one() {
        let session = Session {
            role: "r".into(),
            cancel: true,
            ..Session::default()
        };
        let mut it = item("waiting", false);
        it.id = 3;
        let page = |w: &Workflow, it: &Item| render_item(&session, it, w).into_string();
        // Before 0.12.0, and an item on its own: no section.
        let alone = Workflow::Rows(vec![wf_row(3, "pending", 0, &[])]);
        for w in [&Workflow::Absent, &alone, &Workflow::Rows(Vec::new())] {
            let html = page(w, &it);
            assert!(!html.contains("id=\"workflow"), "{w:?}: {html}");
        }
        let html = page(&Workflow::NotCallable, &it);
        assert!(
            html.contains("<p class=\"muted\" id=\"no-workflow\">"),
            "{html}"
        );
        assert!(!html.contains("<svg"), "{html}");
        // A fan-in seen from its child: three boxes, the child framed, waiting said.
        let fan_in = Workflow::Rows(vec![
            wf_row(3, "waiting", 0, &[1, 2]),
            wf_row(1, "done", -1, &[]),
            wf_row(2, "pending", -1, &[]),
        ]);
        let html = page(&fan_in, &it);
        assert_eq!(html.matches("<a class=\"node\"").count(), 3, "{html}");
        assert!(html.contains("1 of its 2 parents are done."), "{html}");
        assert!(!html.contains("workflow-left-out"), "{html}");
        // A waiting item can be cancelled (work_cancel, 0.12.0), not retried or rescheduled.
        assert!(html.contains("data-action=\"cancel\""), "{html}");
        assert!(!html.contains("data-action=\"retry\""), "{html}");
        assert!(!html.contains("data-action=\"run-now\""), "{html}");
        // Parents only in queues the role may not read: said, no graph.
        let unreadable = Workflow::Rows(vec![wf_row(3, "waiting", 0, &[8, 9])]);
        let html = page(&unreadable, &it);
        assert!(html.contains("id=\"workflow-unreadable\""), "{html}");
        assert!(
            html.contains("(8, 9) in queues this role may not read"),
            "{html}"
        );
        assert!(
            html.contains("0 of its 2 parents are done (2 not shown"),
            "{html}"
        );
        assert!(!html.contains("<svg"), "{html}");
        // More than the graph draws: the rest counted.
        let mut rows = vec![wf_row(3, "done", 0, &[])];
        rows.extend((10..10 + 250).map(|id| wf_row(id, "waiting", 1, &[3])));
        it.state = "done".into();
        let html = page(&Workflow::Rows(rows), &it);
        assert_eq!(
            html.matches("<a class=\"node\"").count(),
            200,
            "{}",
            html.len()
        );
        assert!(
            html.contains("51 of the 251 items of the workflow are not drawn"),
            "{html}"
        );
        assert!(
            html.contains("class=\"hidden-children\" data-parent=\"3\" data-count=\"51\""),
            "{html}"
        );
    }

    fn said(status: &str) -> LeaseStatus {
        LeaseStatus::Said(status.into())
    }

    #[test]
    fn lease_sentences() {
        assert!(lease_words(&item("claimed", true), &said("current"))
            .starts_with("current: the holder's token"));
        let lapsed = lease_words(&item("claimed", false), &said("current"));
        assert!(lapsed.starts_with("lapsed: the lease"), "{lapsed}");
        assert!(lapsed.contains("the next claim takes the item over"));
        assert!(lease_words(&item("done", false), &said("finished"))
            .starts_with("finished: the item is done"));
        assert!(lease_words(&item("pending", false), &said("superseded")).starts_with("superseded"));
        assert!(
            lease_words(&item("claimed", true), &LeaseStatus::NotCallable)
                .contains("may not call work_lease_status")
        );
        let mut fresh = item("pending", false);
        fresh.owner = None;
        fresh.epoch = None;
        assert!(lease_words(&fresh, &LeaseStatus::NotCallable).starts_with("no lease"));
    }

    #[test]
    fn a_lapsed_last_attempt_is_dead_lettered_not_taken_over() {
        let mut last = item("claimed", false);
        last.attempts = 3;
        let words = lease_words(&last, &said("current"));
        assert!(words.starts_with("lapsed on the last attempt"), "{words}");
        assert!(words.contains("attempt 3 of 3"), "{words}");
        assert!(words.contains("dead-letters the item"), "{words}");
        assert!(!words.contains("takes the item over"), "{words}");
    }

    #[test]
    fn missing_or_refused_reads_the_item() {
        // Shown, yet missing to work_lease_status: queue grants without claim.
        let words = lease_words(&item("failed", false), &said("missing"));
        assert!(words.starts_with("finished: the item is failed"), "{words}");
        assert!(words.contains("(Read from the item: work_lease_status answered missing"));
        let words = lease_words(&item("claimed", true), &LeaseStatus::Refused);
        assert!(words.starts_with("current: the holder's token"), "{words}");
        assert!(words.contains("42501"), "{words}");
        assert!(!words.contains("may not call"), "{words}");
    }

    #[test]
    fn values_are_escaped() {
        let session = Session {
            role: "r".into(),
            ..Session::default()
        };
        let mut it = item("claimed", true);
        it.progress = Some(serde_json::json!({"step": "</pre><script>alert(2)</script>"}));
        let html = render_item(&session, &it, &Workflow::Absent).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("w&lt;1&gt;"));
        assert!(
            html.contains("&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn nothing_stored_is_said_so() {
        let session = Session {
            role: "r".into(),
            ..Session::default()
        };
        let mut it = item("pending", false);
        let html = render_item(&session, &it, &Workflow::Absent).into_string();
        assert!(!html.contains("id=\"errors\""), "{html}");
        assert!(html.contains("No failed attempt or lapsed lease."));
        assert!(html.contains("— (no result)"), "{html}");
        assert!(!html.contains("<pre id=\"result\">"), "{html}");
        assert!(
            html.contains("<p class=\"muted\" id=\"progress\">none</p>"),
            "{html}"
        );
        it.errors = vec![crate::db::ErrorEntry {
            attempt: "1".into(),
            epoch: "7".into(),
            owner: "w".into(),
            at: "2026-01-01".into(),
            error: "boom".into(),
        }];
        it.result = Some(Value::Null);
        it.progress = Some(serde_json::json!({"page": 3}));
        let html = render_item(&session, &it, &Workflow::Absent).into_string();
        assert!(html.contains("<table id=\"errors\">"), "{html}");
        assert!(
            html.contains("<pre id=\"progress\">{\n  &quot;page&quot;: 3\n}</pre>"),
            "{html}"
        );
        assert!(!html.contains(">none<"), "{html}");
        assert!(!html.contains("No failed attempt"), "{html}");
        assert!(html.contains("<pre id=\"result\">null</pre>"), "{html}");
    }

    #[test]
    fn an_empty_page_after_a_cursor_says_why() {
        let session = Session {
            role: "r".into(),
            ..Session::default()
        };
        let history = History::Minutes(Vec::new());
        let view = |after: Option<i64>, after_left: Option<String>| ItemsView {
            queue: "q",
            state: Some("pending"),
            rows: &[],
            next_after: None,
            after,
            after_left,
            may_operate: true,
            schedules: &[],
            counters: None,
            history: &history,
        };
        let html = items(
            &session,
            &view(Some(42), Some("it is done now".into())),
            "tok",
        )
        .into_string();
        assert!(
            html.contains(
                "The item this page started after (42) has left this listing (it is done now) — \
                 start again from <a href=\"/queues/q?state=pending\">the first page</a>."
            ),
            "{html}"
        );
        assert!(html.contains("<a href=\"/queues/q?state=pending\">the first page</a>"));
        let html = items(&session, &view(Some(42), None), "tok").into_string();
        assert!(html.contains("No more items after item 42"), "{html}");
        let html = items(&session, &view(None, None), "tok").into_string();
        assert!(html.contains("<p id=\"no-items\">No items.</p>"), "{html}");
        assert!(html.contains("Claim order"), "{html}");
        // The filter waiting from 0.12.0 (work_items lists waiting items there).
        assert!(!html.contains("state=waiting"), "{html}");
        let session = Session {
            workflow_exists: true,
            ..session
        };
        let html = items(&session, &view(None, None), "tok").into_string();
        assert!(
            html.contains("<a href=\"/queues/q?state=waiting\" data-state=\"waiting\">"),
            "{html}"
        );
    }

    fn schedule_row(name: &str, paused: bool, may_operate: bool) -> ScheduleRow {
        ScheduleRow {
            name: name.into(),
            cron: "0 2 * * *".into(),
            timezone: "Europe/Berlin".into(),
            queue: "team/a b".into(),
            catch_up: "latest".into(),
            paused,
            next_slot: Some("2026-01-02 01:00:00.000 UTC".into()),
            last_slot: None,
            last_item_id: None,
            last_fired_at: None,
            next_slot_epoch: None,
            last_fired_epoch: None,
            may_operate,
        }
    }

    #[test]
    fn the_schedules_page_offers_what_the_role_may_do() {
        let mut session = Session {
            role: "r".into(),
            pause_schedule: true,
            resume_schedule: true,
            schedules_exist: true,
            schedules_readable: true,
            ..Session::default()
        };
        let mut fired = schedule_row("b", true, true);
        fired.last_item_id = Some(42);
        fired.last_fired_at = Some("2026-01-01 01:00:00.123 UTC".into());
        let rows = [
            schedule_row("a<b>/c", false, true),
            fired,
            schedule_row("other", false, false),
        ];
        let html = schedules(&session, Some(&rows), "tok", None).into_string();
        assert!(html.contains("a&lt;b&gt;/c"), "{html}");
        assert!(!html.contains("a<b>"), "{html}");
        assert!(
            html.contains("action=\"/schedules/a%3Cb%3E%2Fc/pause\""),
            "{html}"
        );
        assert!(html.contains("action=\"/schedules/b/resume\""), "{html}");
        assert!(html.contains("href=\"/queues/team%2Fa%20b\""), "{html}");
        assert!(html.contains("<a href=\"/items/42\">42</a>"), "{html}");
        assert!(!html.contains("/schedules/other/"), "queue grants: {html}");
        assert!(!html.contains("id=\"read-only\""), "{html}");
        session.pause_schedule = false;
        session.resume_schedule = false;
        let html = schedules(&session, Some(&rows), "tok", None).into_string();
        assert!(html.contains("id=\"read-only\""), "{html}");
        assert!(!html.contains("method=\"post\""), "{html}");
        let html = schedules(&session, Some(&[]), "tok", None).into_string();
        assert!(html.contains("id=\"no-schedules\""), "{html}");
        let html = schedules(&session, None, "tok", None).into_string();
        assert!(html.contains("0.12.0"), "{html}");
    }

    #[test]
    fn the_last_hour_says_why_there_are_no_charts() {
        let why = |history: &History, counted: bool| last_hour(history, counted).into_string();
        let none = History::Minutes(Vec::new());
        for (html, says) in [
            (why(&History::Absent, false), "pg_workfence 0.12.0"),
            (why(&History::NotReadable, true), "this role may not read"),
            (
                why(&none, false),
                "only with pg_workfence in shared_preload_libraries",
            ),
            (why(&none, true), "counts this queue but keeps no history"),
        ] {
            assert!(
                html.contains("<p class=\"muted\" id=\"no-history\">"),
                "{html}"
            );
            assert!(html.contains(says), "{says}: {html}");
            assert!(!html.contains("<svg"), "{html}");
        }
        let minutes = (0..60)
            .map(|i| crate::db::HistoryMinute::quiet(60 * i))
            .collect();
        let html = why(&History::Minutes(minutes), true);
        assert!(!html.contains("no-history"), "{html}");
        assert_eq!(html.matches("<figure class=\"chart\"").count(), 3, "{html}");
    }

    #[test]
    fn links_are_encoded() {
        assert_eq!(queue_href("a b/c?d"), "/queues/a%20b%2Fc%3Fd");
        assert_eq!(
            items_link("q", Some("done"), Some(5)),
            "/queues/q?state=done&after=5"
        );
        assert_eq!(query_value("a&b c"), "a%26b+c");
    }

    #[test]
    fn ages() {
        assert_eq!(age(1.25), "1.2 s");
        assert_eq!(age(185.0), "3 min 5 s");
        assert_eq!(age(7800.0), "2 h 10 min");
        assert_eq!(age(3.0 * 86400.0 + 4.0 * 3600.0), "3 d 4 h");
    }

    #[test]
    fn limits_in_words() {
        let mut s = QueueStats {
            queue: "q".into(),
            pending: 0,
            scheduled: 0,
            claimed: 0,
            expired: 0,
            done: 0,
            failed: 0,
            cancelled: 0,
            waiting: 0,
            oldest_due_age: None,
            paused: false,
            refused: None,
            lapsed: None,
            concurrency: None,
            rate: None,
            per: None,
            per_group: None,
            per_group_settable: true,
            may_operate: true,
        };
        assert_eq!(limits(&s), "none");
        s.per_group = Some(3);
        assert_eq!(limits(&s), "3 per group");
        s.concurrency = Some(4);
        s.rate = Some(100);
        s.per = Some("00:01:00".into());
        assert_eq!(limits(&s), "concurrency 4; 100 per 00:01:00; 3 per group");
    }

    #[test]
    fn the_limits_form_is_prefilled() {
        let mut s = QueueStats {
            queue: "a b".into(),
            pending: 0,
            scheduled: 0,
            claimed: 0,
            expired: 0,
            done: 0,
            failed: 0,
            cancelled: 0,
            waiting: 0,
            oldest_due_age: None,
            paused: false,
            refused: None,
            lapsed: None,
            concurrency: Some(4),
            rate: None,
            per: None,
            per_group: Some(3),
            per_group_settable: true,
            may_operate: true,
        };
        let html = limits_form(&s, "tok").into_string();
        assert!(html.contains("action=\"/queues/a%20b/limits\""), "{html}");
        assert!(html.contains("name=\"csrf\" value=\"tok\""), "{html}");
        assert!(
            html.contains("name=\"concurrency\" step=\"1\" placeholder=\"none\" value=\"4\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"rate\" step=\"1\" placeholder=\"none\">"),
            "no rate: empty, {html}"
        );
        assert!(html.contains("value=\"1 second\""), "{html}");
        assert!(html.contains("value=\"3\""), "{html}");
        // A 0.11.0 database: no per_group field.
        s.per_group_settable = false;
        s.per = Some("00:01:00".into());
        let html = limits_form(&s, "tok").into_string();
        assert!(!html.contains("per_group"), "{html}");
        assert!(html.contains("value=\"00:01:00\""), "{html}");
    }
}
