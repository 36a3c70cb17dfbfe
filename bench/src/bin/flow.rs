//! `workfence-flow`: what flow control (0.10.0, issue 17) does to a queue's
//! claims: serial groups (`work_enqueue(..., group_key => g)`), a
//! concurrency limit (`work_limit(queue, concurrency)`) and, where the
//! server has it, `work_limit(..., per_group)` with its round-robin claims;
//! and what a queue's future items cost its claims and its idle long
//! pollers. Every figure beside a baseline measured in the same run.
//!
//! One throwaway PostgreSQL cluster, set as the main benchmark's
//! (`shared_buffers` 1 GB, fsync on, no checkpoint inside a cell, autovacuum
//! off: every cell starts from a table emptied and vacuumed), one database
//! with the extension. Every **cell** runs on a queue of its own, so that no
//! setting of one cell (a queue once grouped stays grouped) reaches another.
//!
//! **Drain cells** (the first five experiments) all run the same way:
//!
//! 1. The cell's items are enqueued in batches, one statement each, in
//!    order (item `g` of a batch's `generate_series` in group `prefix || g %
//!    G` for a grouped batch, in no group otherwise); the queue's
//!    `work_limit` first, if it has one. Then `ANALYZE`.
//! 2. The worker connections (one thread each) connect, and each claims and
//!    finishes one item of a warm-up queue with the cell's own settings, one
//!    connection after the other, so every statement a claim of the cell
//!    can run (the flow path's pick, claim and limit count, or the plain
//!    claim) is prepared before the clock starts.
//! 3. The workers start together at a barrier and loop:
//!    `work_claim(queue, owner, '5 minutes', 1, wait => '1 second')`, the
//!    long poll every worker library uses (`--wait`; `--wait 0`: a claim
//!    that got nothing is made again at once), then `work_finish` of the
//!    item (a finish that is refused fails the run: no lease can lapse). The
//!    cell ends at its deadline (`--seconds`), or earlier when every item it
//!    counts is finished (or, for fairness, every watched group served).
//!
//! **Figures** of a drain cell: items/s (counted items whose finish returned
//! before the deadline, over the time to the deadline or to the last such
//! item); claim latency p50 and p99, from an HDR histogram of the time from
//! a worker's claim call to the call that returned its item (a long poll
//! that ran out of its second and the call after it count as one wait),
//! merged over the workers; claim calls per item; and the most items of the
//! queue claimed at once and of one group claimed at once, sampled every
//! 50 ms by another connection. The sample is a check as well: more claimed
//! items than the limit, or more of one group than it may hold (1, or
//! `per_group`), fail the run.
//!
//! **Baselines** run in the same repetition as their flow cells, the sides
//! of a cell one after the other, forwards in one repetition and backwards
//! in the next (ABBA), so each flow cell has its baseline taken about a
//! minute apart at most. The experiments (`--cells` picks some; each
//! repetition runs the drain cells in this order; the future and idle
//! cells come after all of them, their repetitions inside):
//!
//! - `groups`: `--items` items spread over G serial groups (`--groups`,
//!   default 1, 100, 10,000), `--conns` workers, beside the same items in
//!   no group (one baseline per repetition, shared by the group counts).
//! - `limits`: `work_limit(queue, concurrency => C)` for each `--limits` C
//!   (default 10, 100) at each `--backlogs` B (default 4,000, 20,000 and
//!   100,000 pending items), `--conns` workers, beside the unlimited queue
//!   with the same backlog (one baseline per backlog and repetition, shared
//!   by its limits: the sides run forwards or backwards in turn).
//! - `hot`: `--items` items in one group drained by 1 worker, beside the
//!   same items in no group drained by 1 worker (a serial queue can at best
//!   run at one worker's speed).
//! - `burst`: `--items` / 4 items of one group enqueued ahead of `--items`
//!   items spread over 1,000 other groups, `--conns` workers; items/s and
//!   claim latency count the other groups' items only (the cell ends when
//!   all of them are finished), beside the same `--items` over 1,000 groups
//!   without the burst.
//! - `fair`: one group of 10,000 items enqueued first, then 100 groups of 10
//!   (item `g` in small group `g % 100`), `--conns` workers; the figure is
//!   the time from the cell's start until every small group has had its
//!   first item claimed (the claim call returned it), and how many items
//!   were claimed by then. Three sides: `work_limit(queue, per_group =>
//!   --conns)` (claims serve groups round-robin); the same serial groups
//!   without `per_group`; and the baseline, the same items in no group
//!   (FIFO; the payload says which small group an item is of). The
//!   `per_group` side is skipped, with a note, when the server's
//!   `work_limit` has no `per_group` argument (`pg_proc.proargnames`).
//! - `future`: one connection, no other load. (a) `work_claim(queue, owner,
//!   '5 minutes', 1)` (no wait) on a queue holding only future items
//!   (`run_at` now + 1 day): every call claims nothing; (b) `work_claim`
//!   then `work_finish` on a queue of due items, each cycle followed
//!   (untimed) by one `work_enqueue` into the same queue, so its backlog
//!   stays. For each, from an emptied table: a queue of 1,000 items is
//!   enqueued and measured alone in the table once per repetition (the
//!   baseline); then a queue of `--big` items (1,000,000) is enqueued in one
//!   statement (timed, reported), and the big queue and the small one,
//!   beside it now, are measured once per repetition in ABBA order (the
//!   small one again: what other queues' items cost a claim). A
//!   measurement: one untimed call of the queue first (the plans), then
//!   `--calls` calls (2,000), or as many as fit in `--seconds` (at least
//!   10). Figures: the median and p99 µs of a call (of a claim → finish
//!   cycle for b); the big queue's median over the small one's alone, and
//!   the small one's beside the big one over alone.
//! - `idle`: `--conns` workers long-poll (the cells' claim, `--wait`) a
//!   queue holding 100,000 future items and nothing due, while one producer
//!   connection enqueues 100 future items per second (`run_at` now + 1 day,
//!   one autocommit enqueue every 10 ms) for 10 s; the figure is the CPU
//!   the worker backends used over those 10 s, utime + stime from
//!   `/proc/<pid>/stat` (clock ticks, `getconf CLK_TCK`) of each worker's
//!   backend (`pg_backend_pid()`), as a fraction of one core; beside the
//!   same on a queue with no backlog. A claim that returns an item (none
//!   is due) fails the run.
//!
//! Writes a markdown report (medians over `--reps` repetitions, the ratios
//! to the baselines) to `--out FILE.md` and every repetition to the CSV
//! beside it (`FILE.csv`). Numbers from one run on a shared machine:
//! compare rows within the run, not across runs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};
use workfence_bench::value;

use hdrhistogram::Histogram;
use postgres::{Client, Statement};
use serde::Serialize;
use workfence_bench::median;
use workfence_harness::calls::{self, prepared};
use workfence_harness::Cluster;

/// Any failure of a run (sendable, as the worker threads return it).
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What `workfence-flow --help` prints.
const USAGE: &str =
    "usage: workfence-flow [--quick] [--reps N] [--seconds S] [--items N] [--conns N]
                      [--groups 1,100,10000] [--limits 10,100] [--backlogs 4000,20000,100000]
                      [--big N] [--calls N] [--cells groups,limits,hot,burst,fair,future,idle]
                      [--wait S] [--sync on|off] [--out FILE.md]
  Measures flow control on a throwaway cluster, each cell beside a baseline in the same run
  (ABBA over the repetitions): workers claim (long poll) and finish items of a queue whose items
  are spread over G serial groups (groups), of a queue with a concurrency limit C at backlogs B
  (limits), of one group drained by one worker (hot), of 1,000 groups behind a burst of one group
  (burst); the time until each of 100 small groups behind a big one gets its first claim, with
  work_limit(per_group) if the server has it (fair); an empty claim beside --big future items and
  a claim -> finish beside --big due items, each against 1,000 (future); the CPU of idle long
  pollers on 100,000 future items while 100 more arrive per second (idle). Prints items/s, claim
  latency p50/p99, claim calls per item, the most items claimed at once and each experiment's
  own figures; with --out, a markdown report to FILE.md and every repetition to FILE.csv.
  --quick        the smoke run: 4 connections, 2,000 items, 0.5 s cells, groups 1,100,1000,
                 backlogs 500,2000, big 5000, 200 calls, fairness behind 1,000 items, idle
                 pollers on 5,000 future items for 1 s
  --reps N       repetitions of every cell (default 3; the medians are reported)
  --seconds S    length of a cell (default 5; also the time cap of a future cell's calls)
  --items N      items enqueued per groups, hot and burst cell (default 20000)
  --conns N      worker connections (default 16)
  --groups L     the group counts, comma-separated, or none (default 1,100,10000)
  --limits L     the concurrency limits, comma-separated, or none (default 10,100)
  --backlogs L   the pending items of each limit cell, comma-separated (default 4000,20000,100000)
  --big N        the big queue of the future cells (default 1000000; beside 1,000)
  --calls N      calls per queue and repetition in the future cells (default 2000)
  --cells L      the experiments to run, comma-separated, or all (default all)
  --wait S       the claims' long poll, seconds (default 1; 0: no wait, a worker whose claim
                 got nothing claims again at once)
  --sync on|off  synchronous_commit of the workers (default on)
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

/// The lease of every claim: far longer than any cell, so none lapses and
/// every finish must be current.
const LEASE: &str = "5 minutes";

/// The long poll of every claim (`--wait`'s default, seconds): a worker
/// waits in the server for an item, as the worker libraries do (theirs is
/// 5 s; 1 s bounds a cell's end).
const WAIT_SECONDS: f64 = 1.0;

/// The claim: the long poll for one item.
const CLAIM: &str = "SELECT c.id, c.epoch
  FROM workfence.work_claim($1, $2, ($3::text)::interval, 1, ($4::text)::interval) AS c";

/// Enqueue `$2` items into queue `$1`, item `g` in group `$4 || g % $3`
/// (`$3` 0: in no group), due at `now() + $5` (`$5` NULL: now); one row:
/// the count and the least and greatest id. The payload names `g`: a call
/// whose arguments do not depend on `g` would run once (its function scan
/// is not rescanned), and a custom plan for `$3` 0 folds the group away.
const ENQUEUE: &str = "SELECT pg_catalog.count(e.id), pg_catalog.min(e.id), pg_catalog.max(e.id)
  FROM pg_catalog.generate_series(1, $2::int) AS g,
       LATERAL workfence.work_enqueue($1::text, pg_catalog.jsonb_build_object('n', g),
           run_at => CASE WHEN $5::text IS NOT NULL
                          THEN pg_catalog.now() + ($5::text)::interval END,
           group_key => CASE WHEN $3::int > 0 THEN $4::text || (g % $3::int) END) AS e";

/// One item enqueued now into queue `$1` (the future cells' refill).
const ENQUEUE_ONE: &str = "SELECT e.id FROM workfence.work_enqueue($1::text, '{}'::jsonb) AS e";

/// One item due in a day into queue `$1` (the idle cells' producer).
const ENQUEUE_FUTURE: &str = "SELECT e.id
  FROM workfence.work_enqueue($1::text, '{}'::jsonb,
                              run_at => pg_catalog.now() + interval '1 day') AS e";

/// `work_limit` with `per_group` (`$3`), for a server that has it.
const LIMIT_PER_GROUP: &str =
    "SELECT workfence.work_limit($1::text, concurrency => $2::int, per_group => $3::int)";

/// Whether the server's `work_limit` has a `per_group` argument.
const HAS_PER_GROUP: &str = "SELECT EXISTS (
  SELECT FROM pg_catalog.pg_proc AS p
    JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
   WHERE n.nspname = 'workfence' AND p.proname = 'work_limit'
     AND 'per_group' = ANY (p.proargnames))";

/// The watched items of a fairness cell: id and small group of the items
/// of queue `$1` with ids from `$2` to `$3` (one batch), by the payload's
/// `n` modulo `$4`.
const WATCHED: &str = "SELECT i.id, ((i.payload ->> 'n')::int % $4::int)::int
  FROM workfence.items AS i
 WHERE i.queue = $1 AND i.id BETWEEN $2 AND $3";

/// The monitor's sample: items of queue `$1` claimed now, and the most of
/// one group.
const SAMPLE: &str = "SELECT coalesce(sum(s.n), 0)::bigint,
       coalesce(max(s.n) FILTER (WHERE s.g IS NOT NULL), 0)::bigint
  FROM (SELECT i.group_key AS g, count(*) AS n
          FROM workfence.items AS i
         WHERE i.queue = $1 AND i.state = 'claimed'
         GROUP BY i.group_key) AS s";

/// How often the monitor samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The database the run creates (with the extension).
const DB: &str = "flow";

/// The fairness cells' small groups, and the items of each.
const FAIR_GROUPS: i32 = 100;
const FAIR_GROUP_ITEMS: i32 = 10;

/// The future cells' small queue.
const SMALL: i32 = 1_000;

/// Items the idle cells' producer enqueues per second.
const PRODUCER_RATE: u32 = 100;

/// Future items on the idle pollers' queue (`--quick`: 5,000).
const IDLE_BACKLOG: i32 = 100_000;

/// The experiments, as `--cells` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Groups,
    Limits,
    Hot,
    Burst,
    Fair,
    Future,
    Idle,
}

impl Part {
    const ALL: [Part; 7] = [
        Part::Groups,
        Part::Limits,
        Part::Hot,
        Part::Burst,
        Part::Fair,
        Part::Future,
        Part::Idle,
    ];

    fn name(self) -> &'static str {
        match self {
            Part::Groups => "groups",
            Part::Limits => "limits",
            Part::Hot => "hot",
            Part::Burst => "burst",
            Part::Fair => "fair",
            Part::Future => "future",
            Part::Idle => "idle",
        }
    }
}

/// One statement's worth of a cell's items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Batch {
    items: i32,
    /// Item `g` belongs to group `g % groups` (0: to none).
    groups: i32,
    /// Whether the groups are the items' group keys (false: only the
    /// payload's `n` says, as on the fairness cells' FIFO queue).
    keyed: bool,
    /// The group keys' prefix.
    prefix: &'static str,
}

impl Batch {
    fn plain(items: i32) -> Batch {
        Batch {
            items,
            groups: 0,
            keyed: false,
            prefix: "g",
        }
    }

    fn grouped(items: i32, groups: i32, prefix: &'static str) -> Batch {
        Batch {
            items,
            groups,
            keyed: true,
            prefix,
        }
    }
}

/// One side of a drain cell: what its queue holds and who claims it.
#[derive(Clone, Debug, PartialEq)]
struct Setup {
    /// Its name in the report.
    label: String,
    /// The items, enqueued in this order.
    batches: Vec<Batch>,
    /// `work_limit(queue, concurrency => C)`.
    concurrency: Option<i32>,
    /// `work_limit(queue, per_group => P)`.
    per_group: Option<i32>,
    /// Worker connections.
    conns: usize,
    /// The items of the batches before this one are not counted (the
    /// burst): neither in items/s nor to end the cell.
    counted_from: usize,
    /// The batch whose groups' first claims are timed (fairness); the cell
    /// ends once each of its groups has had one.
    watch: Option<usize>,
    /// The longest the timed phase runs.
    limit: Duration,
}

impl Setup {
    fn new(label: impl Into<String>, batches: Vec<Batch>, conns: usize, limit: Duration) -> Setup {
        Setup {
            label: label.into(),
            batches,
            concurrency: None,
            per_group: None,
            conns,
            counted_from: 0,
            watch: None,
            limit,
        }
    }

    /// Groups of its items (group keys; 0: none).
    fn groups(&self) -> i32 {
        self.batches
            .iter()
            .filter(|b| b.keyed)
            .map(|b| b.groups)
            .sum()
    }

    /// Items enqueued before the clock starts.
    fn backlog(&self) -> i64 {
        self.batches.iter().map(|b| i64::from(b.items)).sum()
    }

    /// The items that count (end the cell, make its items/s).
    fn counted(&self) -> i64 {
        self.batches[self.counted_from..]
            .iter()
            .map(|b| i64::from(b.items))
            .sum()
    }
}

/// A flow cell and its baseline (the fairness cells: and a contrast), run
/// side by side.
#[derive(Clone, Debug)]
struct Pair {
    part: Part,
    /// The report row's name (the flow side's label).
    label: String,
    /// (role, setup), the flow side first: "flow", "contrast" or
    /// "baseline".
    sides: Vec<(&'static str, Setup)>,
    /// Sides this server cannot run: their label and why.
    skipped: Vec<(String, String)>,
}

fn plural(n: i32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// 10000 -> "10,000".
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// The run's sizes.
#[derive(Clone, Debug)]
struct Plan {
    quick: bool,
    reps: usize,
    cell: Duration,
    items: i32,
    conns: usize,
    groups: Vec<i32>,
    limits: Vec<i32>,
    backlogs: Vec<i32>,
    /// The burst cell: items of the one group ahead, and the other groups.
    burst: i32,
    burst_groups: i32,
    /// The fairness cells: items of the big group, and their time cap.
    fair_big: i32,
    fair_cap: Duration,
    /// The future cells: the big queue's items, calls per measurement.
    big: i32,
    calls: usize,
    /// The idle cells: future items on the pollers' queue, the window.
    idle_backlog: i32,
    idle: Duration,
    parts: Vec<Part>,
    /// The claims' `wait`, interval text.
    wait: String,
    sync: bool,
    out: Option<PathBuf>,
}

impl Plan {
    fn runs(&self, part: Part) -> bool {
        self.parts.contains(&part)
    }
}

/// A comma-separated list of counts from 1 to `max`, or `none`.
fn counts_to(flag: &str, text: &str, max: i32) -> Result<Vec<i32>> {
    if text == "none" {
        return Ok(Vec::new());
    }
    let list = text
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (1..=max).contains(n))
        })
        .collect::<Option<Vec<i32>>>()
        .unwrap_or_default();
    if list.is_empty() {
        return Err(format!(
            "{flag} wants counts from 1 to {max}, comma-separated, or none, not {text:?}"
        )
        .into());
    }
    Ok(list)
}

/// A comma-separated list of counts from 1 to 10,000, or `none`.
fn counts(flag: &str, text: &str) -> Result<Vec<i32>> {
    counts_to(flag, text, 10_000)
}

/// `--cells`: experiment names, comma-separated, or `all`.
fn parts(text: &str) -> Result<Vec<Part>> {
    if text == "all" {
        return Ok(Part::ALL.to_vec());
    }
    let mut list = Vec::new();
    for name in text.split(',').map(str::trim) {
        let part = Part::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                format!(
                    "--cells wants all or some of {}, comma-separated, not {name:?}",
                    Part::ALL.map(Part::name).join(",")
                )
            })?;
        if !list.contains(&part) {
            list.push(part);
        }
    }
    // Run in the order of Part::ALL whatever the order named.
    Ok(Part::ALL.into_iter().filter(|p| list.contains(p)).collect())
}

/// The command line with the defaults filled in, or `None` after `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Plan> {
    let mut quick = false;
    let (mut reps, mut seconds, mut items, mut conns) = (None, None, None, None);
    let (mut groups, mut limits, mut backlogs) = (None, None, None);
    let (mut big, mut calls, mut cells) = (None, None, None);
    let mut sync = true;
    let mut wait = WAIT_SECONDS;
    let mut out = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--reps" => reps = Some(value::<usize>(&arg, &mut it)?),
            "--seconds" => seconds = Some(value::<f64>(&arg, &mut it)?),
            "--items" => items = Some(value::<i32>(&arg, &mut it)?),
            "--conns" => conns = Some(value::<usize>(&arg, &mut it)?),
            "--groups" => groups = Some(counts(&arg, &value::<String>(&arg, &mut it)?)?),
            "--limits" => limits = Some(counts(&arg, &value::<String>(&arg, &mut it)?)?),
            "--backlogs" => {
                backlogs = Some(counts_to(
                    &arg,
                    &value::<String>(&arg, &mut it)?,
                    10_000_000,
                )?)
            }
            "--big" => big = Some(value::<i32>(&arg, &mut it)?),
            "--calls" => calls = Some(value::<usize>(&arg, &mut it)?),
            "--cells" => cells = Some(parts(&value::<String>(&arg, &mut it)?)?),
            "--wait" => wait = value::<f64>(&arg, &mut it)?,
            "--sync" => {
                sync = match value::<String>(&arg, &mut it)?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--sync wants on or off, not {other:?}").into()),
                }
            }
            "--out" => out = Some(PathBuf::from(value::<String>(&arg, &mut it)?)),
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    let items = items.unwrap_or(if quick { 2_000 } else { 20_000 });
    let plan = Plan {
        quick,
        reps: reps.unwrap_or(if quick { 1 } else { 3 }),
        cell: Duration::from_secs_f64(seconds.unwrap_or(if quick { 0.5 } else { 5.0 })),
        items,
        conns: conns.unwrap_or(if quick { 4 } else { 16 }),
        groups: groups.unwrap_or_else(|| {
            if quick {
                vec![1, 100, 1_000]
            } else {
                vec![1, 100, 10_000]
            }
        }),
        limits: limits.unwrap_or_else(|| vec![10, 100]),
        backlogs: backlogs.unwrap_or_else(|| {
            if quick {
                vec![500, 2_000]
            } else {
                vec![4_000, 20_000, 100_000]
            }
        }),
        burst: (items / 4).max(1),
        burst_groups: (if quick { 100 } else { 1_000 }).min(items),
        fair_big: if quick { 1_000 } else { 10_000 },
        fair_cap: Duration::from_secs(if quick { 5 } else { 30 }),
        big: big.unwrap_or(if quick { 5_000 } else { 1_000_000 }),
        calls: calls.unwrap_or(if quick { 200 } else { 2_000 }),
        idle_backlog: if quick { 5_000 } else { IDLE_BACKLOG },
        idle: Duration::from_secs(if quick { 1 } else { 10 }),
        parts: cells.unwrap_or_else(|| Part::ALL.to_vec()),
        wait: format!("{wait} second{}", if wait == 1.0 { "" } else { "s" }),
        sync,
        out,
    };
    if plan.reps == 0 || plan.reps > 100 {
        return Err("--reps must be 1 to 100".into());
    }
    if plan.cell.is_zero() || plan.cell > Duration::from_secs(3600) {
        return Err("--seconds must be above 0 and at most 3600".into());
    }
    if !(1..=10_000_000).contains(&plan.items) {
        return Err("--items must be 1 to 10000000".into());
    }
    if !(1..=10_000_000).contains(&plan.big) {
        return Err("--big must be 1 to 10000000".into());
    }
    if plan.calls == 0 || plan.calls > 1_000_000 {
        return Err("--calls must be 1 to 1000000".into());
    }
    if plan.parts.is_empty() {
        return Err("--cells names no experiment".into());
    }
    if !(0.0..=60.0).contains(&wait) {
        return Err("--wait must be 0 to 60 seconds".into());
    }
    if plan.conns == 0 || plan.conns > 150 {
        return Err("--conns must be 1 to 150".into());
    }
    Ok(plan)
}

/// The drain cells of `plan`, in the order they run within a repetition.
/// `per_group`: whether the server's `work_limit` has that argument.
fn pairs(plan: &Plan, per_group: bool) -> Vec<Pair> {
    let (n, cell) = (plan.conns, plan.cell);
    let mut out = Vec::new();
    let pair = |part, flow: Setup, base: Setup| Pair {
        part,
        label: flow.label.clone(),
        sides: vec![("flow", flow), ("baseline", base)],
        skipped: Vec::new(),
    };
    if plan.runs(Part::Groups) && !plan.groups.is_empty() {
        // One cell: each group count, and the same items in no group as the
        // baseline of them all.
        let mut sides = Vec::new();
        for &g in &plan.groups {
            let label = format!("{} group{}", thousands(i64::from(g)), plural(g));
            let batches = vec![Batch::grouped(plan.items, g, "g")];
            sides.push(("flow", Setup::new(label, batches, n, cell)));
        }
        let plain = vec![Batch::plain(plan.items)];
        sides.push(("baseline", Setup::new("no groups", plain, n, cell)));
        out.push(Pair {
            part: Part::Groups,
            label: "serial groups".to_owned(),
            sides,
            skipped: Vec::new(),
        });
    }
    if plan.runs(Part::Limits) && !plan.limits.is_empty() {
        // One cell per backlog: each limit, and the unlimited queue as the
        // baseline of them all.
        for &b in &plan.backlogs {
            let mut sides = Vec::new();
            for &c in &plan.limits {
                let label = format!(
                    "concurrency limit {}, {} pending",
                    thousands(i64::from(c)),
                    thousands(i64::from(b))
                );
                let mut flow = Setup::new(label, vec![Batch::plain(b)], n, cell);
                flow.concurrency = Some(c);
                sides.push(("flow", flow));
            }
            sides.push((
                "baseline",
                Setup::new("no limit", vec![Batch::plain(b)], n, cell),
            ));
            out.push(Pair {
                part: Part::Limits,
                label: format!("{} pending", thousands(i64::from(b))),
                sides,
                skipped: Vec::new(),
            });
        }
    }
    if plan.runs(Part::Hot) {
        out.push(pair(
            Part::Hot,
            Setup::new(
                "1 group, 1 worker",
                vec![Batch::grouped(plan.items, 1, "hot-")],
                1,
                cell,
            ),
            Setup::new(
                "no groups, 1 worker",
                vec![Batch::plain(plan.items)],
                1,
                cell,
            ),
        ));
    }
    if plan.runs(Part::Burst) {
        let others = Batch::grouped(plan.items, plan.burst_groups, "g");
        let mut flow = Setup::new(
            format!(
                "{} groups behind a burst of {}",
                thousands(i64::from(plan.burst_groups)),
                thousands(i64::from(plan.burst))
            ),
            vec![Batch::grouped(plan.burst, 1, "burst-"), others],
            n,
            cell,
        );
        flow.counted_from = 1;
        out.push(pair(
            Part::Burst,
            flow,
            Setup::new("no burst", vec![others], n, cell),
        ));
    }
    if plan.runs(Part::Fair) {
        let small = FAIR_GROUPS * FAIR_GROUP_ITEMS;
        let side = |label: String, keyed: bool| {
            let mut batches = vec![
                Batch::grouped(plan.fair_big, 1, "big-"),
                Batch::grouped(small, FAIR_GROUPS, "small-"),
            ];
            for b in &mut batches {
                b.keyed = keyed;
            }
            let mut s = Setup::new(label, batches, n, plan.fair_cap);
            s.watch = Some(1);
            s
        };
        let label = format!(
            "{FAIR_GROUPS} groups of {FAIR_GROUP_ITEMS} behind a group of {}",
            thousands(i64::from(plan.fair_big))
        );
        let round_robin = format!("per_group => {n}, round-robin");
        let mut sides = Vec::new();
        let mut skipped = Vec::new();
        if per_group {
            let mut s = side(round_robin, true);
            s.per_group = Some(n as i32);
            sides.push(("flow", s));
        } else {
            skipped.push((
                round_robin,
                "skipped: this server's work_limit has no per_group argument".to_owned(),
            ));
        }
        sides.push(("contrast", side("serial groups, no per_group".into(), true)));
        sides.push(("baseline", side("no groups, FIFO".into(), false)));
        out.push(Pair {
            part: Part::Fair,
            label,
            sides,
            skipped,
        });
    }
    out
}

fn main() {
    if workfence_harness::cli::help_requested(USAGE) {
        return;
    }
    if let Err(e) = parse_args(std::env::args().skip(1)).and_then(|plan| run(&plan)) {
        eprintln!(
            "workfence-flow: {}",
            workfence_harness::cli::error_chain(e.as_ref())
        );
        std::process::exit(1);
    }
}

/// One repetition of one side of one cell: a row of the CSV. Fields that do
/// not apply to an experiment are empty.
#[derive(Clone, Debug, Default, Serialize)]
struct Sample {
    /// Repetition, from 1.
    rep: usize,
    /// The experiment (`--cells` name).
    part: &'static str,
    /// The cell this run belongs to (the flow side's label).
    pair: String,
    /// This side's own label.
    side: String,
    /// "flow", "contrast" or "baseline".
    role: &'static str,
    /// Worker connections.
    conns: usize,
    /// Items on the queue when the clock started.
    backlog: i64,
    /// Groups of the queue's items (0: none).
    groups: i32,
    /// The queue's concurrency limit (empty: none).
    concurrency: Option<i32>,
    /// The queue's per_group limit (empty: none).
    per_group: Option<i32>,
    /// Counted items finished by the deadline (future cells: calls timed).
    items: i64,
    /// The timed phase.
    seconds: f64,
    /// items / seconds.
    items_per_s: f64,
    /// Claim latency (to an item), median, µs (future cells: one call's,
    /// or one claim → finish cycle's).
    claim_p50_us: u64,
    /// The same, 99th percentile.
    claim_p99_us: u64,
    /// Claim calls made per item claimed.
    calls_per_item: Option<f64>,
    /// Most items of the queue claimed at once (sampled).
    max_claimed: Option<i64>,
    /// Most items of one group claimed at once (sampled).
    max_group_claimed: Option<i64>,
    /// Fairness: ms from the cell's start until every watched group had
    /// its first item claimed (empty: not all of them did).
    served_ms: Option<f64>,
    /// Fairness: watched groups that had an item claimed.
    served_groups: Option<i64>,
    /// Fairness: items claimed (all groups) by the time the last watched
    /// group was served.
    claims_by_served: Option<i64>,
    /// Idle: CPU of the worker backends, in cores (1.0: one core busy).
    cpu_cores: Option<f64>,
    /// Idle: claim calls returned per second, all workers.
    calls_per_s: Option<f64>,
    /// Idle: items the producer enqueued per second.
    enqueued_per_s: Option<f64>,
}

/// A claim latency histogram: 1 µs to 10 minutes, 3 significant digits.
fn new_histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// One worker's connection, its statements prepared.
struct Worker {
    client: Client,
    owner: String,
    claim: Statement,
    finish: Statement,
}

impl Worker {
    fn new(cluster: &Cluster, n: usize, sync: bool) -> Result<Worker> {
        let mut client = cluster.connect_to(DB)?;
        client.batch_execute(if sync {
            "SET synchronous_commit = on"
        } else {
            "SET synchronous_commit = off"
        })?;
        let claim = client.prepare(CLAIM)?;
        let finish = client.prepare(prepared::FINISH)?;
        Ok(Worker {
            client,
            owner: format!("flow-worker-{n}"),
            claim,
            finish,
        })
    }

    /// One long poll of `queue` with `wait`; the item's token if it got one.
    fn claim(&mut self, queue: &str, wait: &str) -> Result<Option<(i64, i64)>> {
        let rows = self
            .client
            .query(&self.claim, &[&queue, &self.owner, &LEASE, &wait])?;
        Ok(rows.first().map(|r| (r.get(0), r.get(1))))
    }

    /// Finish a claimed item; a refused finish is an error.
    fn finish(&mut self, (id, epoch): (i64, i64)) -> Result<()> {
        let done: bool = self
            .client
            .query_one(&self.finish, &[&id, &self.owner, &epoch])?
            .get(0);
        if !done {
            return Err(format!("{}: the finish of item {id} was refused", self.owner).into());
        }
        Ok(())
    }
}

/// What one statement of [`ENQUEUE`] enqueued: count, least and greatest id.
struct Enqueued {
    count: i64,
    first: i64,
    last: i64,
}

/// Enqueue `batch` into `queue`, due at now + `due_in` (interval text;
/// `None`: now).
fn enqueue(
    admin: &mut Client,
    queue: &str,
    batch: Batch,
    due_in: Option<&str>,
) -> Result<Enqueued> {
    let groups = if batch.keyed { batch.groups } else { 0 };
    let row = admin.query_one(
        ENQUEUE,
        &[&queue, &batch.items, &groups, &batch.prefix, &due_in],
    )?;
    let (first, last): (Option<i64>, Option<i64>) = (row.get(1), row.get(2));
    Ok(Enqueued {
        count: row.get(0),
        first: first.unwrap_or(0),
        last: last.unwrap_or(0),
    })
}

/// Give `queue` the limits of `setup` (and nothing else).
fn set_limits(admin: &mut Client, queue: &str, setup: &Setup) -> Result<()> {
    if let Some(p) = setup.per_group {
        admin.execute(LIMIT_PER_GROUP, &[&queue, &setup.concurrency, &p])?;
    } else if let Some(c) = setup.concurrency {
        calls::work_limit(admin, queue, Some(c), None, "1 second")?;
    }
    Ok(())
}

/// An emptied, vacuumed items table: every cell starts from one.
fn reset(admin: &mut Client) -> Result<()> {
    admin.batch_execute("DELETE FROM workfence.items")?;
    admin.batch_execute("VACUUM workfence.items")?;
    Ok(())
}

/// What one run of a drain cell measured.
#[derive(Default)]
struct Measured {
    items: i64,
    seconds: f64,
    claim_p50_us: u64,
    claim_p99_us: u64,
    calls: i64,
    claimed: i64,
    max_claimed: i64,
    max_group_claimed: i64,
    served_ms: Option<f64>,
    served_groups: Option<i64>,
    claims_by_served: Option<i64>,
}

/// Run one side of a drain cell: `setup` on a fresh queue named `queue`.
fn cell(cluster: &Cluster, plan: &Plan, queue: &str, setup: &Setup) -> Result<Measured> {
    let mut admin = cluster.connect_to(DB)?;
    reset(&mut admin)?;
    set_limits(&mut admin, queue, setup)?;
    let mut batches = Vec::with_capacity(setup.batches.len());
    for &b in &setup.batches {
        batches.push(enqueue(&mut admin, queue, b, None)?);
    }
    // Batches are enqueued one after the other by one session: each one's
    // ids are above all of the batch before's.
    let count_from = batches[setup.counted_from].first;
    // Fairness: which watched group each of the watched batch's items is in.
    let watched: HashMap<i64, usize> = match setup.watch {
        Some(w) => admin
            .query(
                WATCHED,
                &[
                    &queue,
                    &batches[w].first,
                    &batches[w].last,
                    &setup.batches[w].groups,
                ],
            )?
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1) as usize))
            .collect(),
        None => HashMap::new(),
    };
    let watched_groups = setup.watch.map_or(0, |w| setup.batches[w].groups as usize);
    // The warm-up queue: one item per worker, each in a group of its own if
    // the cell's items have groups; the cell's limits.
    let warm_queue = format!("{queue}-warm-up");
    set_limits(&mut admin, &warm_queue, setup)?;
    let conns = setup.conns as i32;
    let warm = if setup.groups() > 0 {
        Batch::grouped(conns, conns, "w")
    } else {
        Batch::plain(conns)
    };
    enqueue(&mut admin, &warm_queue, warm, None)?;
    admin.batch_execute("ANALYZE workfence.items")?;

    let mut workers = Vec::with_capacity(setup.conns);
    for n in 0..setup.conns {
        let mut w = Worker::new(cluster, n, plan.sync)?;
        // One after the other, so a limit of 1 hands each its item.
        let token = w
            .claim(&warm_queue, "5 seconds")?
            .ok_or_else(|| format!("{}: the warm-up claim got nothing", w.owner))?;
        w.finish(token)?;
        workers.push(w);
    }

    let target = setup.counted();
    let finished = AtomicI64::new(0);
    let last_finish_ns = AtomicI64::new(0);
    let claims = AtomicI64::new(0);
    let first_claim: Vec<AtomicBool> = (0..watched_groups)
        .map(|_| AtomicBool::new(false))
        .collect();
    let served = AtomicUsize::new(0);
    let served_ns = AtomicI64::new(-1);
    let claims_by_served = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let peaks = Mutex::new((0i64, 0i64));
    let zero: OnceLock<Instant> = OnceLock::new();
    let start = Barrier::new(setup.conns + 1);
    let mut monitor = cluster.connect_to(DB)?;
    let sample = monitor.prepare(SAMPLE)?;

    let (outcomes, monitored) = thread::scope(|scope| {
        let threads: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                let (finished, last_finish_ns, start, zero) =
                    (&finished, &last_finish_ns, &start, &zero);
                let (claims, first_claim, served, served_ns, claims_by_served, done) = (
                    &claims,
                    &first_claim,
                    &served,
                    &served_ns,
                    &claims_by_served,
                    &done,
                );
                let watched = &watched;
                scope.spawn(move || -> Result<(Histogram<u64>, i64, i64)> {
                    let mut hist = new_histogram()?;
                    let (mut calls, mut claimed) = (0i64, 0i64);
                    start.wait();
                    let t0 = *zero.get().ok_or("the cell's clock was not set")?;
                    let deadline = t0 + setup.limit;
                    let mut waiting_since = None;
                    while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
                        let asked = *waiting_since.get_or_insert_with(Instant::now);
                        calls += 1;
                        let Some(token) = w.claim(queue, &plan.wait)? else {
                            continue;
                        };
                        waiting_since = None;
                        claimed += 1;
                        if token.0 >= count_from {
                            hist.saturating_record(asked.elapsed().as_micros() as u64);
                        }
                        let so_far = claims.fetch_add(1, Ordering::Relaxed) + 1;
                        if let Some(&g) = watched.get(&token.0) {
                            if !first_claim[g].swap(true, Ordering::Relaxed) {
                                let ns = t0.elapsed().as_nanos() as i64;
                                if served.fetch_add(1, Ordering::Relaxed) + 1 == first_claim.len() {
                                    served_ns.store(ns, Ordering::Relaxed);
                                    claims_by_served.store(so_far, Ordering::Relaxed);
                                    done.store(true, Ordering::Relaxed);
                                }
                            }
                        }
                        w.finish(token)?;
                        let at = Instant::now();
                        if token.0 >= count_from && at <= deadline {
                            let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
                            let ns = at.duration_since(t0).as_nanos() as i64;
                            last_finish_ns.fetch_max(ns, Ordering::Relaxed);
                            if n >= target {
                                done.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    Ok((hist, calls, claimed))
                })
            })
            .collect();
        // The monitor: the claimed items of the queue, every SAMPLE_EVERY.
        let monitor_thread = scope.spawn(|| -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                let row = monitor.query_one(&sample, &[&queue])?;
                let (now, group): (i64, i64) = (row.get(0), row.get(1));
                let mut p = peaks.lock().map_err(|_| "the monitor's lock is poisoned")?;
                p.0 = p.0.max(now);
                p.1 = p.1.max(group);
                drop(p);
                thread::sleep(SAMPLE_EVERY);
            }
            Ok(())
        });
        let _ = zero.set(Instant::now());
        start.wait();
        let outcomes: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect();
        stop.store(true, Ordering::Relaxed);
        let monitored = monitor_thread
            .join()
            .unwrap_or_else(|_| Err("the monitor panicked".into()));
        (outcomes, monitored)
    });
    monitored?;

    let mut hist = new_histogram()?;
    let (mut calls, mut claimed) = (0, 0);
    for outcome in outcomes {
        let (h, c, n) = outcome?;
        hist.add(&h)
            .map_err(|e| format!("merging histograms: {e}"))?;
        calls += c;
        claimed += n;
    }
    let items = finished.into_inner();
    let served_ns = served_ns.into_inner();
    let seconds = if items >= target {
        last_finish_ns.into_inner() as f64 / 1e9
    } else if served_ns >= 0 {
        // A fairness cell ended when its last watched group was served.
        served_ns as f64 / 1e9
    } else {
        setup.limit.as_secs_f64()
    };
    let (max_claimed, max_group_claimed) = *peaks.lock().map_err(|_| "poisoned")?;
    if let Some(c) = setup.concurrency {
        if max_claimed > i64::from(c) {
            return Err(format!("{queue}: {max_claimed} items claimed at once, limit {c}").into());
        }
    }
    let per_group = setup.per_group.unwrap_or(1);
    if max_group_claimed > i64::from(per_group) {
        return Err(format!(
            "{queue}: {max_group_claimed} items of one group claimed at once, at most {per_group} allowed"
        )
        .into());
    }
    if items == 0 && setup.watch.is_none() {
        return Err(format!(
            "{queue}: no item finished in {:.1} s",
            setup.limit.as_secs_f64()
        )
        .into());
    }
    Ok(Measured {
        items,
        seconds,
        claim_p50_us: hist.value_at_quantile(0.50),
        claim_p99_us: hist.value_at_quantile(0.99),
        calls,
        claimed,
        max_claimed,
        max_group_claimed,
        served_ms: (served_ns >= 0).then(|| served_ns as f64 / 1e6),
        served_groups: setup.watch.map(|_| served.into_inner() as i64),
        claims_by_served: (served_ns >= 0).then(|| claims_by_served.into_inner()),
    })
}

/// The order of a pair's sides in repetition `rep` (the `i`-th pair): as
/// listed, or backwards, alternating (ABBA).
fn side_order(rep: usize, i: usize, sides: usize) -> Vec<usize> {
    if (rep + i) % 2 == 1 {
        (0..sides).rev().collect()
    } else {
        (0..sides).collect()
    }
}

fn run(plan: &Plan) -> Result<()> {
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("flow-bench")
        .replace_existing(true)
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("max_connections", "200")
        .setting("shared_buffers", "1GB")
        .setting("max_wal_size", "16GB")
        .setting("checkpoint_timeout", "1h")
        .setting("autovacuum", "off")
        .start()?;
    cluster.create_database(DB)?;
    let mut admin = cluster.connect_to(DB)?;
    let server_version: String = admin.query_one("SHOW server_version", &[])?.get(0);
    let per_group: bool = admin.query_one(HAS_PER_GROUP, &[])?.get(0);
    drop(admin);
    let pairs = pairs(plan, per_group);
    let mut notes = Vec::new();
    for p in &pairs {
        for (side, why) in &p.skipped {
            let note = format!("{}: {side}: {why}.", p.label);
            eprintln!("workfence-flow: {note}");
            notes.push(note);
        }
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut queue_no = 0;
    for rep in 1..=plan.reps {
        for (i, pair) in pairs.iter().enumerate() {
            for k in side_order(rep, i, pair.sides.len()) {
                let (role, setup) = &pair.sides[k];
                queue_no += 1;
                let queue = format!("flow-{queue_no}");
                let m = cell(&cluster, plan, &queue, setup)?;
                let s = Sample {
                    rep,
                    part: pair.part.name(),
                    pair: pair.label.clone(),
                    side: setup.label.clone(),
                    role,
                    conns: setup.conns,
                    backlog: setup.backlog(),
                    groups: setup.groups(),
                    concurrency: setup.concurrency,
                    per_group: setup.per_group,
                    items: m.items,
                    seconds: m.seconds,
                    items_per_s: m.items as f64 / m.seconds,
                    claim_p50_us: m.claim_p50_us,
                    claim_p99_us: m.claim_p99_us,
                    calls_per_item: Some(m.calls as f64 / m.claimed.max(1) as f64),
                    max_claimed: Some(m.max_claimed),
                    max_group_claimed: Some(m.max_group_claimed),
                    served_ms: m.served_ms,
                    served_groups: m.served_groups,
                    claims_by_served: m.claims_by_served,
                    ..Sample::default()
                };
                let fairness = match (s.served_groups, s.served_ms) {
                    (Some(n), Some(ms)) => format!(" all {n} groups served at {ms:.0} ms"),
                    (Some(n), None) => format!(" only {n} groups served"),
                    _ => String::new(),
                };
                eprintln!(
                    "[{:>4} s] rep {rep} {:<40} {:<28} {:>8.0} items/s p50={:>7} µs p99={:>8} µs calls/item={:.2} most claimed={} (one group: {}){fairness}",
                    started.elapsed().as_secs(),
                    s.pair,
                    s.side,
                    s.items_per_s,
                    s.claim_p50_us,
                    s.claim_p99_us,
                    s.calls_per_item.unwrap_or(0.0),
                    m.max_claimed,
                    m.max_group_claimed,
                );
                samples.push(s);
            }
        }
    }
    if plan.runs(Part::Future) {
        future_cells(&cluster, plan, &mut samples, &mut notes, started)?;
    }
    if plan.runs(Part::Idle) {
        idle_cells(&cluster, plan, &mut samples, started)?;
    }
    let report = report(
        plan,
        &pairs,
        &samples,
        &notes,
        &server_version,
        started.elapsed().as_secs(),
    );
    print!("{report}");
    if let Some(out) = &plan.out {
        std::fs::write(out, &report)?;
        let csv_path = out.with_extension("csv");
        write_csv(&csv_path, &samples)?;
        eprintln!(
            "workfence-flow: wrote {} and {}",
            out.display(),
            csv_path.display()
        );
    }
    Ok(())
}

/// The two experiments of the future cells, as (pair label, items due in,
/// whether each call finishes what it claimed).
const FUTURE: [(&str, Option<&str>, bool); 2] = [
    ("empty claim, future items", Some("1 day"), false),
    ("claim and finish, due items", None, true),
];

/// The future cells' connection: one claim (→ finish) at a time.
struct Prober {
    client: Client,
    claim: Statement,
    finish: Statement,
    refill: Statement,
    /// Whether each call finishes the item it claimed (and refills).
    finishes: bool,
}

impl Prober {
    const OWNER: &'static str = "flow-future";

    fn new(cluster: &Cluster, sync: bool, finishes: bool) -> Result<Prober> {
        let mut client = cluster.connect_to(DB)?;
        client.batch_execute(if sync {
            "SET synchronous_commit = on"
        } else {
            "SET synchronous_commit = off"
        })?;
        Ok(Prober {
            claim: client.prepare(prepared::CLAIM_TOKENS)?,
            finish: client.prepare(prepared::FINISH)?,
            refill: client.prepare(ENQUEUE_ONE)?,
            client,
            finishes,
        })
    }

    /// One call: a claim without a wait, and the finish of what it claimed.
    /// An empty claim must get nothing (only future items), a finishing one
    /// an item.
    fn call(&mut self, queue: &str) -> Result<()> {
        let rows = self
            .client
            .query(&self.claim, &[&queue, &Self::OWNER, &LEASE, &1i32])?;
        match (rows.first(), self.finishes) {
            (Some(_), false) => Err(format!("{queue}: a claim returned a future item").into()),
            (None, true) => Err(format!("{queue}: a claim got no due item").into()),
            (Some(r), true) => {
                let (id, epoch): (i64, i64) = (r.get(0), r.get(1));
                let done: bool = self
                    .client
                    .query_one(&self.finish, &[&id, &Self::OWNER, &epoch])?
                    .get(0);
                if done {
                    Ok(())
                } else {
                    Err(format!("{queue}: the finish of item {id} was refused").into())
                }
            }
            (None, false) => Ok(()),
        }
    }

    /// After a finishing call: one item enqueued, so the backlog stays.
    fn refill(&mut self, queue: &str) -> Result<()> {
        if self.finishes {
            self.client.query_one(&self.refill, &[&queue])?;
        }
        Ok(())
    }

    /// `plan.calls` timed calls, or as many as fit in `plan.cell` (at least
    /// 10): their latency histogram, the calls and the seconds they took.
    fn measure(&mut self, plan: &Plan, queue: &str) -> Result<(Histogram<u64>, usize, f64)> {
        let mut hist = new_histogram()?;
        let t0 = Instant::now();
        let mut calls = 0usize;
        while calls < plan.calls && (t0.elapsed() < plan.cell || calls < 10) {
            let t = Instant::now();
            self.call(queue)?;
            hist.saturating_record(t.elapsed().as_micros() as u64);
            calls += 1;
            self.refill(queue)?;
        }
        Ok((hist, calls, t0.elapsed().as_secs_f64()))
    }
}

/// The future cells' sides, as the report names them: the small queue
/// alone in the table (the baseline), the big queue, the small queue beside
/// the big one.
fn future_sides(plan: &Plan) -> [String; 3] {
    let (small, big) = (thousands(i64::from(SMALL)), thousands(i64::from(plan.big)));
    [
        format!("{small} items, alone"),
        format!("{big} items"),
        format!("{small} items beside {big}"),
    ]
}

/// The future cells: for each of [`FUTURE`], a queue of 1,000 items alone
/// in the table, measured `--reps` times; then a queue of `--big` items is
/// enqueued beside it, and the two are measured `--reps` times each, ABBA.
fn future_cells(
    cluster: &Cluster,
    plan: &Plan,
    samples: &mut Vec<Sample>,
    notes: &mut Vec<String>,
    started: Instant,
) -> Result<()> {
    let [alone, big_side, beside] = future_sides(plan);
    for (i, (label, due_in, finishes)) in FUTURE.into_iter().enumerate() {
        let small_queue = format!("future-{i}-small");
        let big_queue = format!("future-{i}-big");
        let mut admin = cluster.connect_to(DB)?;
        reset(&mut admin)?;
        enqueue(&mut admin, &small_queue, Batch::plain(SMALL), due_in)?;
        admin.batch_execute("ANALYZE workfence.items")?;
        let mut c = Prober::new(cluster, plan.sync, finishes)?;
        // One untimed call per queue first: the plans are prepared.
        c.call(&small_queue)?;
        c.refill(&small_queue)?;
        let mut record = |rep: usize, side: &str, role: &'static str, items: i32, queue: &str| {
            let (hist, calls, seconds) = c.measure(plan, queue)?;
            let s = Sample {
                rep,
                part: Part::Future.name(),
                pair: label.to_owned(),
                side: side.to_owned(),
                role,
                conns: 1,
                backlog: i64::from(items),
                items: calls as i64,
                seconds,
                items_per_s: calls as f64 / seconds,
                claim_p50_us: hist.value_at_quantile(0.50),
                claim_p99_us: hist.value_at_quantile(0.99),
                ..Sample::default()
            };
            eprintln!(
                "[{:>4} s] rep {rep} {:<40} {:<28} {:>6} calls p50={:>7} µs p99={:>8} µs",
                started.elapsed().as_secs(),
                s.pair,
                s.side,
                calls,
                s.claim_p50_us,
                s.claim_p99_us
            );
            samples.push(s);
            Result::Ok(())
        };
        // The small queue alone: before the big one exists (so not ABBA).
        for rep in 1..=plan.reps {
            record(rep, &alone, "baseline", SMALL, &small_queue)?;
        }
        let t = Instant::now();
        let n = enqueue(&mut admin, &big_queue, Batch::plain(plan.big), due_in)?.count;
        let fill = t.elapsed().as_secs_f64();
        admin.batch_execute("ANALYZE workfence.items")?;
        drop(admin);
        let note = format!(
            "{label}: enqueuing the {} items of the big queue (one INSERT ... SELECT through \
             work_enqueue) took {fill:.1} s, {:.0} items/s.",
            thousands(n),
            n as f64 / fill
        );
        eprintln!("[{:>4} s] {note}", started.elapsed().as_secs());
        notes.push(note);
        for rep in 1..=plan.reps {
            for k in side_order(rep, i, 2) {
                if k == 0 {
                    record(rep, &big_side, "flow", plan.big, &big_queue)?;
                } else {
                    record(rep, &beside, "contrast", SMALL, &small_queue)?;
                }
            }
        }
    }
    Ok(())
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`getconf
/// CLK_TCK`; 100 if that cannot be run).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// utime + stime of process `pid`, clock ticks (fields 14 and 15 of
/// `/proc/<pid>/stat`, counted after the command's closing parenthesis).
fn cpu_ticks(pid: i32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let rest = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("{path}: no command field"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15.
    let field = |n: usize| -> Result<u64> {
        Ok(fields
            .get(n - 3)
            .ok_or_else(|| format!("{path}: no field {n}"))?
            .parse::<u64>()
            .map_err(|e| format!("{path}: field {n}: {e}"))?)
    };
    Ok(field(14)? + field(15)?)
}

/// The idle cells: `--conns` pollers on a queue of future items and on one
/// with none, while a producer adds future items, `--reps` times, ABBA.
fn idle_cells(
    cluster: &Cluster,
    plan: &Plan,
    samples: &mut Vec<Sample>,
    started: Instant,
) -> Result<()> {
    let ticks = clock_ticks();
    let label = format!("{} future items", thousands(i64::from(plan.idle_backlog)));
    let mut queue_no = 0;
    for rep in 1..=plan.reps {
        for k in side_order(rep, 0, 2) {
            let (backlog, side, role) = if k == 0 {
                (plan.idle_backlog, label.clone(), "flow")
            } else {
                (0, "no backlog".to_owned(), "baseline")
            };
            queue_no += 1;
            let queue = format!("idle-{queue_no}");
            let mut admin = cluster.connect_to(DB)?;
            reset(&mut admin)?;
            if backlog > 0 {
                enqueue(&mut admin, &queue, Batch::plain(backlog), Some("1 day"))?;
            }
            admin.batch_execute("ANALYZE workfence.items")?;
            drop(admin);
            let m = idle_cell(cluster, plan, &queue, ticks)?;
            let s = Sample {
                rep,
                part: Part::Idle.name(),
                pair: label.clone(),
                side,
                role,
                conns: plan.conns,
                backlog: i64::from(backlog),
                seconds: m.seconds,
                cpu_cores: Some(m.cpu_cores),
                calls_per_s: Some(m.calls as f64 / m.seconds),
                enqueued_per_s: Some(m.enqueued as f64 / m.seconds),
                ..Sample::default()
            };
            eprintln!(
                "[{:>4} s] rep {rep} idle pollers, {:<28} CPU {:.3} cores, {:.0} claim calls/s, {:.0} enqueued/s",
                started.elapsed().as_secs(),
                s.side,
                m.cpu_cores,
                m.calls as f64 / m.seconds,
                m.enqueued as f64 / m.seconds
            );
            samples.push(s);
        }
    }
    Ok(())
}

/// What one idle cell measured.
struct IdleMeasured {
    seconds: f64,
    cpu_cores: f64,
    calls: i64,
    enqueued: i64,
}

/// `--conns` pollers long-poll `queue` (nothing due on it) while a producer
/// enqueues [`PRODUCER_RATE`] future items per second for `plan.idle`; the
/// pollers' backends' CPU over that window.
fn idle_cell(cluster: &Cluster, plan: &Plan, queue: &str, ticks: f64) -> Result<IdleMeasured> {
    let mut pollers = Vec::with_capacity(plan.conns);
    let mut pids = Vec::with_capacity(plan.conns);
    for n in 0..plan.conns {
        let mut w = Worker::new(cluster, n, plan.sync)?;
        let pid: i32 = w.client.query_one("SELECT pg_backend_pid()", &[])?.get(0);
        // One claim without a wait: the claim's plans are prepared.
        if w.claim(queue, "0 seconds")?.is_some() {
            return Err(format!("{queue}: a claim returned an item, none is due").into());
        }
        pids.push(pid);
        pollers.push(w);
    }
    let mut producer = cluster.connect_to(DB)?;
    let produce = producer.prepare(ENQUEUE_FUTURE)?;
    let stop = AtomicBool::new(false);
    let calls = AtomicI64::new(0);
    let start = Barrier::new(plan.conns + 1);
    let cpu = |pids: &[i32]| -> Result<u64> { pids.iter().map(|&p| cpu_ticks(p)).sum() };

    thread::scope(|scope| -> Result<IdleMeasured> {
        let threads: Vec<_> = pollers
            .into_iter()
            .map(|mut w| {
                let (stop, calls, start) = (&stop, &calls, &start);
                scope.spawn(move || -> Result<()> {
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let got = w.claim(queue, &plan.wait)?;
                        calls.fetch_add(1, Ordering::Relaxed);
                        if got.is_some() {
                            return Err(
                                format!("{queue}: a claim returned an item, none is due").into()
                            );
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        // Let every poller reach its long poll.
        thread::sleep(Duration::from_millis(200));
        let measured = (|| -> Result<IdleMeasured> {
            let (cpu0, calls0) = (cpu(&pids)?, calls.load(Ordering::Relaxed));
            let t0 = Instant::now();
            let every = Duration::from_secs(1) / PRODUCER_RATE;
            let mut next = t0;
            let mut enqueued = 0i64;
            while t0.elapsed() < plan.idle {
                producer.query_one(&produce, &[&queue])?;
                enqueued += 1;
                next += every;
                let now = Instant::now();
                if next > now {
                    thread::sleep(next - now);
                } else if now - next > Duration::from_millis(100) {
                    // Fallen behind: no burst to catch up.
                    next = now;
                }
            }
            let (cpu1, calls1) = (cpu(&pids)?, calls.load(Ordering::Relaxed));
            let seconds = t0.elapsed().as_secs_f64();
            Ok(IdleMeasured {
                seconds,
                cpu_cores: (cpu1 - cpu0) as f64 / ticks / seconds,
                calls: calls1 - calls0,
                enqueued,
            })
        })();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join()
                .unwrap_or_else(|_| Err("a poller panicked".into()))?;
        }
        measured
    })
}

fn write_csv(path: &Path, samples: &[Sample]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    for s in samples {
        w.serialize(s)?;
    }
    w.flush()?;
    Ok(())
}

/// Medians of one side of one pair over the repetitions.
struct Medians {
    items_per_s: f64,
    p50: f64,
    p99: f64,
    calls_per_item: f64,
    max_claimed: i64,
    max_group_claimed: i64,
}

fn medians(samples: &[&Sample]) -> Medians {
    let m = |f: &dyn Fn(&Sample) -> f64| median(samples.iter().map(|s| f(s)).collect());
    Medians {
        items_per_s: m(&|s| s.items_per_s),
        p50: m(&|s| s.claim_p50_us as f64),
        p99: m(&|s| s.claim_p99_us as f64),
        calls_per_item: m(&|s| s.calls_per_item.unwrap_or(f64::NAN)),
        max_claimed: samples
            .iter()
            .filter_map(|s| s.max_claimed)
            .max()
            .unwrap_or(0),
        max_group_claimed: samples
            .iter()
            .filter_map(|s| s.max_group_claimed)
            .max()
            .unwrap_or(0),
    }
}

/// A ratio with two decimals, or three below 0.1 (so that 0.004 does not
/// read as 0.00).
fn ratio(r: f64) -> String {
    if r < 0.1 {
        format!("{r:.3}")
    } else {
        format!("{r:.2}")
    }
}

/// `a / b` as [`ratio`] writes it, or a dash when `b` is no base for one.
fn ratio_of(a: f64, b: f64) -> String {
    if b > 0.0 && (a / b).is_finite() {
        ratio(a / b)
    } else {
        "–".to_owned()
    }
}

/// The samples of one side of `pair`.
fn side_samples<'a>(samples: &'a [Sample], pair: &str, side: &str) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.pair == pair && s.side == side)
        .collect()
}

/// The table of drain cells that compares items/s: one row per flow side,
/// beside its pair's baseline; limit rows by limit, then backlog.
fn drain_table(out: &mut String, pairs: &[&Pair], samples: &[Sample]) {
    let mut rows: Vec<(&Pair, &Setup)> = pairs
        .iter()
        .flat_map(|p| {
            p.sides
                .iter()
                .filter(|(role, _)| *role == "flow")
                .map(move |(_, s)| (*p, s))
        })
        .collect();
    rows.sort_by_key(|(_, s)| (s.concurrency, s.backlog()));
    out.push_str(
        "| queue | items/s | × baseline | claim p50 µs | claim p99 µs | calls per item | most claimed (one group) | baseline items/s | baseline p50 µs | baseline p99 µs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (pair, flow) in rows {
        let Some((_, base)) = pair.sides.iter().find(|(role, _)| *role == "baseline") else {
            continue;
        };
        let (ours, theirs) = (
            side_samples(samples, &pair.label, &flow.label),
            side_samples(samples, &pair.label, &base.label),
        );
        if ours.is_empty() || theirs.is_empty() {
            continue;
        }
        let (a, b) = (medians(&ours), medians(&theirs));
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {:.0} | {:.0} | {:.2} | {} ({}) | {:.0} | {:.0} | {:.0} |",
            flow.label,
            a.items_per_s,
            ratio_of(a.items_per_s, b.items_per_s),
            a.p50,
            a.p99,
            a.calls_per_item,
            a.max_claimed,
            a.max_group_claimed,
            b.items_per_s,
            b.p50,
            b.p99
        );
    }
}

/// The fairness table: one row per side of each pair.
fn fair_table(out: &mut String, plan: &Plan, pairs: &[&Pair], samples: &[Sample]) {
    out.push_str(
        "| queue | every small group's first claim, ms | × no groups | small groups served | items claimed by then | most claimed (one group) |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for pair in pairs {
        let _ = writeln!(out, "| **{}** | | | | | |", pair.label);
        // The baseline's time to serve every small group.
        let served = |side: &Setup| -> Option<f64> {
            let s = side_samples(samples, &pair.label, &side.label);
            if s.is_empty() || s.iter().any(|s| s.served_ms.is_none()) {
                return None;
            }
            Some(median(s.iter().filter_map(|s| s.served_ms).collect()))
        };
        let base = pair
            .sides
            .iter()
            .find(|(role, _)| *role == "baseline")
            .and_then(|(_, s)| served(s));
        for (label, why) in &pair.skipped {
            let _ = writeln!(out, "| {label} | {why} | | | | |");
        }
        for (_, side) in &pair.sides {
            let s = side_samples(samples, &pair.label, &side.label);
            if s.is_empty() {
                continue;
            }
            let m = medians(&s);
            let groups = s.iter().filter_map(|s| s.served_groups).min().unwrap_or(0);
            let (ms, times) = match served(side) {
                Some(ms) => (
                    format!("{ms:.0}"),
                    base.map_or("–".to_owned(), |b| ratio_of(ms, b)),
                ),
                None => (format!("> {}", plan.fair_cap.as_millis()), "–".to_owned()),
            };
            let by_then = if s.iter().all(|s| s.claims_by_served.is_some()) {
                format!(
                    "{:.0}",
                    median(
                        s.iter()
                            .filter_map(|s| s.claims_by_served.map(|n| n as f64))
                            .collect()
                    )
                )
            } else {
                "–".to_owned()
            };
            let _ = writeln!(
                out,
                "| {} | {ms} | {times} | {groups} | {by_then} | {} ({}) |",
                side.label, m.max_claimed, m.max_group_claimed
            );
        }
    }
}

/// The future cells' table: one row per experiment, the big queue beside
/// the small one.
fn future_table(out: &mut String, plan: &Plan, samples: &[Sample]) {
    let [alone, big, beside] = future_sides(plan);
    let _ = writeln!(
        out,
        "| call, one connection | {big}: p50 µs | × {alone} | {big}: p99 µs | {alone}: p50 µs | p99 µs | {beside}: p50 µs | × alone | p99 µs | calls timed (big / alone / beside) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (label, _, _) in FUTURE {
        let (a, b, c) = (
            side_samples(samples, label, &big),
            side_samples(samples, label, &alone),
            side_samples(samples, label, &beside),
        );
        if a.is_empty() || b.is_empty() || c.is_empty() {
            continue;
        }
        let (ma, mb, mc) = (medians(&a), medians(&b), medians(&c));
        let calls = |s: &[&Sample]| median(s.iter().map(|s| s.items as f64).collect());
        let _ = writeln!(
            out,
            "| {label} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.0} | {:.0} / {:.0} / {:.0} |",
            ma.p50,
            ratio_of(ma.p50, mb.p50),
            ma.p99,
            mb.p50,
            mb.p99,
            mc.p50,
            ratio_of(mc.p50, mb.p50),
            mc.p99,
            calls(&a),
            calls(&b),
            calls(&c)
        );
    }
}

/// The idle cells' table: the pollers' CPU beside a queue with no backlog.
fn idle_table(out: &mut String, samples: &[Sample]) {
    let idle: Vec<&Sample> = samples.iter().filter(|s| s.part == "idle").collect();
    let side =
        |role: &str| -> Vec<&Sample> { idle.iter().copied().filter(|s| s.role == role).collect() };
    let (ours, base) = (side("flow"), side("baseline"));
    let cores = |s: &[&Sample]| median(s.iter().filter_map(|s| s.cpu_cores).collect());
    let base_cores = cores(&base);
    out.push_str(
        "| pollers' queue | CPU of the pollers' backends, cores | × no backlog | claim calls/s (all pollers) | enqueued/s |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for rows in [&ours, &base] {
        let Some(first) = rows.first() else {
            continue;
        };
        let c = cores(rows);
        let _ = writeln!(
            out,
            "| {} | {c:.3} | {} | {:.1} | {:.1} |",
            first.side,
            ratio_of(c, base_cores),
            median(rows.iter().filter_map(|s| s.calls_per_s).collect()),
            median(rows.iter().filter_map(|s| s.enqueued_per_s).collect()),
        );
    }
}

/// The markdown report: the method in short, one table per experiment.
fn report(
    plan: &Plan,
    pairs: &[Pair],
    samples: &[Sample],
    notes: &[String],
    server_version: &str,
    seconds: u64,
) -> String {
    let mut out =
        String::from("# Flow control: serial groups, limits, fairness and future items\n\n");
    let _ = writeln!(
        out,
        "Written by `workfence-flow`{} (`scripts/bench.sh`; the method is at the top of \
         `bench/src/bin/flow.rs` and in `docs/benchmarks.md`). Worker connections each loop \
         `work_claim(queue, owner, '{LEASE}', 1, wait => '{}')` then `work_finish`, \
         `synchronous_commit` {}; cells of {} s at most, {} repetition{} (medians shown), each \
         flow cell beside its baseline (and contrast) in ABBA order. PostgreSQL \
         {server_version}, {seconds} s in all. One run on a shared machine: compare rows within \
         this file, not with other runs.\n",
        if plan.quick { " --quick" } else { "" },
        plan.wait,
        if plan.sync { "on" } else { "off" },
        plan.cell.as_secs_f64(),
        plan.reps,
        if plan.reps == 1 { "" } else { "s" },
    );
    out.push_str(
        "Claim latency: from a worker's claim call to the call that returned its item, µs. \
         Calls per item: claim calls made per item claimed (a long poll that ran out of its \
         wait counts). Most claimed: the most items of the queue claimed at once, and of one \
         group, sampled every 50 ms (the maxima over the repetitions; a sample above a limit \
         fails the run).\n",
    );
    // The pairs of one experiment that have samples.
    let of = |part: Part| -> Vec<&Pair> {
        pairs
            .iter()
            .filter(|p| p.part == part && samples.iter().any(|s| s.pair == p.label))
            .collect()
    };
    let (n, items) = (plan.conns, thousands(i64::from(plan.items)));
    let drains = [
        (
            Part::Groups,
            "Serial groups: items spread over G groups".to_owned(),
            format!("{items} items per cell, {n} workers, beside the same items in no group."),
        ),
        (
            Part::Limits,
            "Concurrency limits at backlogs: work_limit(queue, concurrency => C)".to_owned(),
            format!(
                "{n} workers; the backlog is the pending items when the clock starts; each \
                 beside the unlimited queue with the same backlog."
            ),
        ),
        (
            Part::Hot,
            "One hot group drained by one worker".to_owned(),
            format!(
                "{items} items in one group, 1 worker connection, beside the same items in no \
                 group with 1 worker: a serial queue runs at best at one worker's speed."
            ),
        ),
        (
            Part::Burst,
            "A burst in one group ahead of other groups".to_owned(),
            format!(
                "{} items of one group enqueued ahead of {items} items spread over {} other \
                 groups, {n} workers. Items/s and claim latency count the other groups' items \
                 only (the cell ends when all of them are finished); beside the same {items} \
                 items over {} groups without the burst.",
                thousands(i64::from(plan.burst)),
                thousands(i64::from(plan.burst_groups)),
                thousands(i64::from(plan.burst_groups)),
            ),
        ),
    ];
    for (part, title, intro) in drains {
        let rows = of(part);
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n## {title}\n\n{intro}\n");
        drain_table(&mut out, &rows, samples);
    }
    let fair = of(Part::Fair);
    if !fair.is_empty() {
        let _ = writeln!(
            out,
            "\n## Fairness: small groups behind one big group\n\n\
             One group of {} items enqueued first, then {FAIR_GROUPS} groups of \
             {FAIR_GROUP_ITEMS} items, {n} workers. The figure: ms from the cell's start until \
             every small group has had its first item claimed (median; `> {}` when some group \
             had none by then), and how many items were claimed by that time. Sides: \
             `work_limit(queue, per_group => {n})` (claims serve groups round-robin), the same \
             serial groups without `per_group`, and the same items in no group (FIFO: the \
             baseline).\n",
            thousands(i64::from(plan.fair_big)),
            plan.fair_cap.as_millis(),
        );
        fair_table(&mut out, plan, &fair, samples);
    }
    if samples.iter().any(|s| s.part == "future") {
        let _ = writeln!(
            out,
            "\n## Claims beside future items\n\n\
             One connection, nothing else running. Empty claim: `work_claim(queue, owner, \
             '{LEASE}', 1)` (no wait) on a queue holding only items due in a day; claim and \
             finish: `work_claim` then `work_finish` on a queue of due items, each cycle \
             followed by one untimed `work_enqueue` into it (its backlog stays). For each, a \
             queue of {small} items is measured alone in the table first, then a queue of {big} \
             items is enqueued beside it and the two are measured in ABBA order: the big \
             queue against the small one alone (×), and the small one again beside it (a \
             claim's cost from other queues' items). Each measurement: {} calls, or as many \
             as fit in {} s (at least 10); µs per call (per claim → finish cycle), medians \
             over the repetitions.\n",
            thousands(plan.calls as i64),
            plan.cell.as_secs_f64(),
            small = thousands(i64::from(SMALL)),
            big = thousands(i64::from(plan.big)),
        );
        future_table(&mut out, plan, samples);
    }
    if samples.iter().any(|s| s.part == "idle") {
        let _ = writeln!(
            out,
            "\n## Idle long pollers' CPU\n\n\
             {n} workers long-poll (`wait => '{}'`) a queue with nothing due while one producer \
             enqueues {PRODUCER_RATE} items due in a day per second (one autocommit enqueue \
             each) for {} s. CPU: utime + stime of the workers' backends over that window \
             (`/proc/<pid>/stat`), in cores (1.000: one core busy all along), beside the same \
             on a queue with no backlog.\n",
            plan.wait,
            plan.idle.as_secs_f64(),
        );
        idle_table(&mut out, samples);
    }
    if !notes.is_empty() {
        out.push_str("\n## Notes\n\n");
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_sizes_default_and_refuse_what_cannot_run() {
        let p = parse_args(args(&[])).unwrap();
        assert_eq!((p.reps, p.items, p.conns), (3, 20_000, 16));
        assert_eq!(p.groups, vec![1, 100, 10_000]);
        assert_eq!(p.limits, vec![10, 100]);
        assert_eq!(p.backlogs, vec![4_000, 20_000, 100_000]);
        assert_eq!((p.big, p.calls), (1_000_000, 2_000));
        assert_eq!(
            (p.burst, p.burst_groups, p.fair_big),
            (5_000, 1_000, 10_000)
        );
        assert_eq!((p.idle_backlog, p.idle), (100_000, Duration::from_secs(10)));
        assert_eq!(p.parts, Part::ALL.to_vec());
        let q = parse_args(args(&["--quick", "--limits", "2"])).unwrap();
        assert_eq!((q.reps, q.items, q.conns), (1, 2_000, 4));
        assert_eq!(q.limits, vec![2]);
        assert_eq!(q.backlogs, vec![500, 2_000]);
        assert_eq!((q.big, q.burst, q.burst_groups), (5_000, 500, 100));
        assert!(parse_args(args(&["--groups", "0"])).is_err());
        assert!(parse_args(args(&["--groups", "none"]))
            .unwrap()
            .groups
            .is_empty());
        assert!(parse_args(args(&["--limits", "1,x"])).is_err());
        assert_eq!(
            parse_args(args(&["--backlogs", "100000,2000000"]))
                .unwrap()
                .backlogs,
            vec![100_000, 2_000_000]
        );
        assert!(parse_args(args(&["--backlogs", "0"])).is_err());
        assert!(parse_args(args(&["--big", "0"])).is_err());
        assert_eq!(
            parse_args(args(&["--cells", "idle,groups,idle"]))
                .unwrap()
                .parts,
            vec![Part::Groups, Part::Idle]
        );
        assert!(parse_args(args(&["--cells", "groups,nope"])).is_err());
        assert_eq!(p.wait, "1 second");
        let w = parse_args(args(&["--wait", "0"])).unwrap();
        assert_eq!(w.wait, "0 seconds");
        assert!(parse_args(args(&["--wait", "61"])).is_err());
        assert!(parse_args(args(&["--sync", "maybe"])).is_err());
        assert!(parse_args(args(&["--reps", "0"])).is_err());
        assert!(parse_args(args(&["--frobnicate"])).is_err());
    }

    #[test]
    fn labels_read_as_the_report_says_them() {
        let p = parse_args(args(&[])).unwrap();
        let labels: Vec<String> = pairs(&p, true).iter().map(|p| p.label.clone()).collect();
        assert_eq!(labels[0], "serial groups");
        assert_eq!(labels[1], "4,000 pending");
        assert_eq!(labels[3], "100,000 pending");
        assert_eq!(labels[4], "1 group, 1 worker");
        assert_eq!(labels[5], "1,000 groups behind a burst of 5,000");
        assert_eq!(labels[6], "100 groups of 10 behind a group of 10,000");
        assert_eq!(labels.len(), 7);
        let all = pairs(&p, true);
        let groups: Vec<&str> = all[0].sides.iter().map(|(_, s)| s.label.as_str()).collect();
        assert_eq!(
            groups,
            vec!["1 group", "100 groups", "10,000 groups", "no groups"]
        );
        let limits: Vec<&str> = all[3].sides.iter().map(|(_, s)| s.label.as_str()).collect();
        assert_eq!(
            limits,
            vec![
                "concurrency limit 10, 100,000 pending",
                "concurrency limit 100, 100,000 pending",
                "no limit"
            ]
        );
        assert_eq!(
            future_sides(&p),
            [
                "1,000 items, alone".to_owned(),
                "1,000,000 items".to_owned(),
                "1,000 items beside 1,000,000".to_owned()
            ]
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(ratio(0.8), "0.80");
        assert_eq!(ratio(0.0045), "0.004");
        assert_eq!(ratio_of(1.0, 0.0), "–");
    }

    #[test]
    fn the_cells_hold_what_the_experiments_say() {
        let p = parse_args(args(&[])).unwrap();
        let all = pairs(&p, true);
        let find = |label: &str| all.iter().find(|p| p.label == label).unwrap();
        // A backlog's limit cells and their one baseline: the same
        // backlog, the limits, and no limit.
        let l = find("20,000 pending");
        let limits: Vec<Option<i32>> = l.sides.iter().map(|(_, s)| s.concurrency).collect();
        assert_eq!(limits, vec![Some(10), Some(100), None]);
        assert!(l.sides.iter().all(|(_, s)| s.backlog() == 20_000));
        assert_eq!(l.sides[2].0, "baseline");
        // The hot group: one worker on each side.
        let h = find("1 group, 1 worker");
        assert_eq!((h.sides[0].1.conns, h.sides[1].1.conns), (1, 1));
        assert_eq!((h.sides[0].1.groups(), h.sides[1].1.groups()), (1, 0));
        // The burst: enqueued first, not counted; the same others beside.
        let b = &find("1,000 groups behind a burst of 5,000").sides;
        assert_eq!(b[0].1.batches[0], Batch::grouped(5_000, 1, "burst-"));
        assert_eq!((b[0].1.counted(), b[1].1.counted()), (20_000, 20_000));
        assert_eq!(b[0].1.batches[1], b[1].1.batches[0]);
        // Fairness: the big group first; per_group on the flow side only;
        // the FIFO side's groups are in the payload alone.
        let f = find("100 groups of 10 behind a group of 10,000");
        let roles: Vec<&str> = f.sides.iter().map(|(r, _)| *r).collect();
        assert_eq!(roles, vec!["flow", "contrast", "baseline"]);
        assert_eq!(f.sides[0].1.per_group, Some(16));
        assert_eq!(f.sides[1].1.per_group, None);
        assert_eq!(f.sides[0].1.batches[0].items, 10_000);
        assert_eq!((f.sides[1].1.groups(), f.sides[2].1.groups()), (101, 0));
        assert_eq!(f.sides[2].1.batches[1].groups, 100);
        assert!(f.sides.iter().all(|(_, s)| s.watch == Some(1)));
        // A server without per_group: that side is skipped, with a note.
        let old = pairs(&p, false);
        let f = old.last().unwrap();
        assert_eq!(f.sides.len(), 2);
        assert_eq!(f.skipped.len(), 1);
        // --cells picks.
        let only = parse_args(args(&["--cells", "hot,future"])).unwrap();
        let labels: Vec<String> = pairs(&only, true).into_iter().map(|p| p.label).collect();
        assert_eq!(labels, vec!["1 group, 1 worker"]);
        // ABBA: forwards and backwards in turn.
        assert_eq!(side_order(1, 0, 3), vec![2, 1, 0]);
        assert_eq!(side_order(2, 0, 3), vec![0, 1, 2]);
    }

    #[test]
    fn cpu_ticks_reads_this_process() {
        let me = std::process::id() as i32;
        assert!(cpu_ticks(me).is_ok());
        assert!(clock_ticks() > 0.0);
    }

    fn sample(pair: &Pair, k: usize, rep: usize, ips: f64, p99: u64) -> Sample {
        let (role, setup) = &pair.sides[k];
        Sample {
            rep,
            part: pair.part.name(),
            pair: pair.label.clone(),
            side: setup.label.clone(),
            role,
            conns: 16,
            groups: setup.groups(),
            concurrency: setup.concurrency,
            items: 1000,
            seconds: 1000.0 / ips,
            items_per_s: ips,
            claim_p50_us: p99 / 4,
            claim_p99_us: p99,
            calls_per_item: Some(1.0),
            max_claimed: Some(16),
            max_group_claimed: Some(1),
            ..Sample::default()
        }
    }

    #[test]
    fn the_report_sets_each_flow_cell_beside_its_own_baseline() {
        let p = parse_args(args(&["--quick", "--limits", "10", "--backlogs", "500"])).unwrap();
        let all = pairs(&p, false);
        let g = all.iter().find(|p| p.label == "serial groups").unwrap();
        let c = all.iter().find(|p| p.label == "500 pending").unwrap();
        let f = all.iter().find(|p| p.part == Part::Fair).unwrap();
        let mut samples = vec![
            sample(g, 3, 1, 1000.0, 800),
            sample(g, 1, 1, 900.0, 1200),
            sample(g, 1, 2, 700.0, 1000),
            sample(g, 3, 2, 1000.0, 800),
            sample(g, 1, 3, 800.0, 1400),
            sample(g, 3, 3, 1000.0, 800),
            sample(c, 0, 1, 500.0, 3000),
            sample(c, 1, 1, 2000.0, 900),
        ];
        for (k, ms) in [(0, Some(40.0)), (1, Some(400.0))] {
            let mut s = sample(f, k, 1, 1000.0, 1000);
            s.served_ms = ms;
            s.served_groups = Some(100);
            s.claims_by_served = Some(1100);
            samples.push(s);
        }
        for (side, role, p50) in [
            ("5,000 items", "flow", 5000),
            ("1,000 items, alone", "baseline", 50),
            ("1,000 items beside 5,000", "contrast", 500),
        ] {
            samples.push(Sample {
                part: "future",
                pair: FUTURE[0].0.to_owned(),
                side: side.to_owned(),
                role,
                items: 200,
                claim_p50_us: p50,
                claim_p99_us: p50 * 2,
                ..Sample::default()
            });
        }
        for (side, role, cores) in [
            ("5,000 future items", "flow", 0.5),
            ("no backlog", "baseline", 0.05),
        ] {
            samples.push(Sample {
                part: "idle",
                side: side.to_owned(),
                role,
                cpu_cores: Some(cores),
                calls_per_s: Some(40.0),
                enqueued_per_s: Some(99.0),
                ..Sample::default()
            });
        }
        let notes = vec!["a note".to_owned()];
        let r = report(&p, &all, &samples, &notes, "15", 9);
        assert!(
            r.contains(
                "| 100 groups | 800 | 0.80 | 300 | 1200 | 1.00 | 16 (1) | 1000 | 200 | 800 |"
            ),
            "{r}"
        );
        assert!(
            r.contains("| concurrency limit 10, 500 pending | 500 | 0.25 | 750 | 3000 |"),
            "{r}"
        );
        assert!(
            r.contains("| serial groups, no per_group | 40 | 0.10 | 100 | 1100 | 16 (1) |"),
            "{r}"
        );
        assert!(r.contains("| no groups, FIFO | 400 | 1.00 |"), "{r}");
        assert!(
            r.contains("| per_group => 4, round-robin | skipped: this server's work_limit"),
            "{r}"
        );
        assert!(
            r.contains(
                "| empty claim, future items | 5000 | 100.00 | 10000 | 50 | 100 | 500 | 10.00 | 1000 | 200 / 200 / 200 |"
            ),
            "{r}"
        );
        assert!(
            r.contains("| 5,000 future items | 0.500 | 10.00 | 40.0 | 99.0 |"),
            "{r}"
        );
        assert!(r.contains("| no backlog | 0.050 | 1.00 |"), "{r}");
        assert!(r.contains("- a note"), "{r}");
        assert!(r.contains("## Serial groups") && r.contains("## Concurrency limits at backlogs"));
        // Experiments with no samples print no table.
        assert!(!r.contains("## One hot group"), "{r}");
    }
}
