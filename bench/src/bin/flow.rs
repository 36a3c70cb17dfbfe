//! `workfence-flow`: what flow control (0.10.0, issue 17) does to a queue's
//! claims: serial groups (`work_enqueue(..., group_key => g)`) and a
//! concurrency limit (`work_limit(queue, concurrency)`), each measured
//! beside a queue with neither, in the same run.
//!
//! One throwaway PostgreSQL cluster, set as the main benchmark's
//! (`shared_buffers` 1 GB, fsync on, no checkpoint inside a cell, autovacuum
//! off: every cell starts from a table emptied and vacuumed), one database
//! with the extension. Every **cell** runs on a queue of its own, so that no
//! setting of one cell (a queue once grouped stays grouped) reaches another:
//!
//! 1. `--items` pending items are enqueued in one statement (item `g` of the
//!    `generate_series` in group `g % G` for a groups cell, in no group
//!    otherwise); for a limit cell, `work_limit(queue, concurrency => C)`
//!    first. Then `ANALYZE`.
//! 2. `--conns` worker connections (one thread each) connect, and each
//!    claims and finishes one item of a warm-up queue with the cell's own
//!    settings, one connection after the other, so every statement a claim
//!    of the cell can run (the flow path's pick, claim and limit count, or
//!    the plain claim) is prepared before the clock starts.
//! 3. The workers start together at a barrier and loop for `--seconds`:
//!    `work_claim(queue, owner, '5 minutes', 1, wait => '1 second')`, the
//!    long poll every worker library uses (`--wait`; `--wait 0`: a claim
//!    that got nothing is made again at once), then `work_finish` of the
//!    item (a finish that is refused fails the run: no lease can lapse). The
//!    cell ends at the deadline, or earlier when every item is finished.
//!
//! **Figures** per cell: items/s (items whose finish returned before the
//! deadline, over the time to the deadline or to the last item); claim
//! latency p50 and p99, from an HDR histogram of the time from a worker's
//! claim call to the call that returned its item (a long poll that ran out
//! of its second and the call after it count as one wait), merged over the
//! workers; claim calls per item; and the most items of the queue claimed
//! at once and of one group claimed at once, sampled every 50 ms by another
//! connection. The sample is a check as well: more claimed items than the
//! limit, or two of one group, fail the run.
//!
//! **The baseline** is the same workload on a queue with neither groups nor
//! limits (the same claim call, the same number of items), run right before
//! or right after each flow cell, alternating over the repetitions (ABBA),
//! so each flow cell has a baseline of its own taken minutes apart at most.
//!
//! Writes a markdown report (medians over `--reps` repetitions, the ratios
//! to the baseline) to `--out FILE.md` and every repetition to the CSV
//! beside it (`FILE.csv`). Numbers from one run on a shared machine:
//! compare rows within the run, not across runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use postgres::{Client, Statement};
use serde::Serialize;
use workfence_harness::calls::{self, prepared};
use workfence_harness::Cluster;

/// Any failure of a run (sendable, as the worker threads return it).
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What `workfence-flow --help` prints.
const USAGE: &str =
    "usage: workfence-flow [--quick] [--reps N] [--seconds S] [--items N] [--conns N]
                      [--groups 1,100,10000] [--limits 1,10,100] [--wait S] [--sync on|off]
                      [--out FILE.md]
  Measures flow control (0.10.0) on a throwaway cluster: workers claim (long poll) and finish
  items of a queue whose items are spread over G serial groups, or of a queue with a
  concurrency limit C, each cell beside the same workload on a queue with neither (ABBA over
  the repetitions). Prints items/s, claim latency p50/p99, claim calls per item and the most
  items claimed at once; with --out, a markdown report to FILE.md and every repetition to the
  CSV beside it (FILE.csv).
  --quick        the smoke run: 4 connections, 2,000 items, 0.5 s cells, groups 1,100,1000
  --reps N       repetitions of every cell (default 3; the medians are reported)
  --seconds S    length of a cell (default 5)
  --items N      items enqueued per cell (default 20000)
  --conns N      worker connections (default 16)
  --groups L     the group counts, comma-separated, or none (default 1,100,10000)
  --limits L     the concurrency limits, comma-separated, or none (default 1,10,100)
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

/// Enqueue `$2` items into queue `$1`, item `g` in group `g % $3` (`$3`
/// 0: in no group); one row, the count. The payload names `g`: a call whose
/// arguments do not depend on `g` would run once (its function scan is not
/// rescanned), and a custom plan for `$3` 0 folds the group away.
const ENQUEUE: &str = "SELECT pg_catalog.count(e.id)
  FROM pg_catalog.generate_series(1, $2::int) AS g,
       LATERAL workfence.work_enqueue($1::text, pg_catalog.jsonb_build_object('n', g),
           group_key => CASE WHEN $3::int > 0 THEN 'g' || (g % $3::int) END) AS e";

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

/// What a flow cell puts on its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Neither groups nor limits: the baseline.
    Plain,
    /// Items spread over this many serial groups.
    Groups(i32),
    /// `work_limit(queue, concurrency => C)`.
    Concurrency(i32),
}

impl Flow {
    /// The cell's name in the report.
    fn label(self) -> String {
        match self {
            Flow::Plain => "no groups or limits".to_owned(),
            Flow::Groups(g) => format!("{} group{}", thousands(i64::from(g)), plural(g)),
            Flow::Concurrency(c) => format!("concurrency limit {}", thousands(i64::from(c))),
        }
    }

    /// The groups of its items (0: none).
    fn groups(self) -> i32 {
        match self {
            Flow::Groups(g) => g,
            _ => 0,
        }
    }

    /// Its concurrency limit, if any.
    fn concurrency(self) -> Option<i32> {
        match self {
            Flow::Concurrency(c) => Some(c),
            _ => None,
        }
    }
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
    /// The claims' `wait`, interval text.
    wait: String,
    sync: bool,
    out: Option<PathBuf>,
}

/// Parses the value of `flag`.
fn value<T: std::str::FromStr>(flag: &str, it: &mut impl Iterator<Item = String>) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let text = it.next().ok_or(format!("{flag} needs a value"))?;
    text.parse()
        .map_err(|e| format!("{flag} {text:?}: {e}").into())
}

/// A comma-separated list of counts from 1 to 10,000, or `none`.
fn counts(flag: &str, text: &str) -> Result<Vec<i32>> {
    if text == "none" {
        return Ok(Vec::new());
    }
    let list = text
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
        })
        .collect::<Option<Vec<i32>>>()
        .unwrap_or_default();
    if list.is_empty() {
        return Err(format!(
            "{flag} wants counts from 1 to 10000, comma-separated, or none, not {text:?}"
        )
        .into());
    }
    Ok(list)
}

/// The command line with the defaults filled in, or `None` after `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Plan> {
    let mut quick = false;
    let (mut reps, mut seconds, mut items, mut conns) = (None, None, None, None);
    let (mut groups, mut limits) = (None, None);
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
    let plan = Plan {
        quick,
        reps: reps.unwrap_or(if quick { 1 } else { 3 }),
        cell: Duration::from_secs_f64(seconds.unwrap_or(if quick { 0.5 } else { 5.0 })),
        items: items.unwrap_or(if quick { 2_000 } else { 20_000 }),
        conns: conns.unwrap_or(if quick { 4 } else { 16 }),
        groups: groups.unwrap_or_else(|| {
            if quick {
                vec![1, 100, 1_000]
            } else {
                vec![1, 100, 10_000]
            }
        }),
        limits: limits.unwrap_or_else(|| vec![1, 10, 100]),
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
    if !(0.0..=60.0).contains(&wait) {
        return Err("--wait must be 0 to 60 seconds".into());
    }
    if plan.conns == 0 || plan.conns > 150 {
        return Err("--conns must be 1 to 150".into());
    }
    Ok(plan)
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

/// One repetition of one cell: a row of the CSV.
#[derive(Clone, Debug, Serialize)]
struct Sample {
    /// Repetition, from 1.
    rep: usize,
    /// The flow cell this run belongs to (its own label for a flow run,
    /// the flow cell's for the baseline beside it).
    pair: String,
    /// "flow" or "baseline".
    role: &'static str,
    /// Groups of the queue's items (0: none).
    groups: i32,
    /// The queue's concurrency limit (empty: none).
    concurrency: Option<i32>,
    /// Worker connections.
    conns: usize,
    /// Items finished by the deadline.
    items: i64,
    /// The timed phase.
    seconds: f64,
    /// items / seconds.
    items_per_s: f64,
    /// Claim latency (to an item), median, µs.
    claim_p50_us: u64,
    /// Claim latency (to an item), 99th percentile, µs.
    claim_p99_us: u64,
    /// Claim calls made per item claimed.
    calls_per_item: f64,
    /// Most items of the queue claimed at once (sampled).
    max_claimed: i64,
    /// Most items of one group claimed at once (sampled).
    max_group_claimed: i64,
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

/// Give `queue` the settings of `flow` (a limit) and `items` pending items
/// (in `flow`'s groups); returns how many were enqueued.
fn fill(admin: &mut Client, queue: &str, flow: Flow, items: i32) -> Result<i64> {
    if let Some(c) = flow.concurrency() {
        calls::work_limit(admin, queue, Some(c), None, "1 second")?;
    }
    let n: i64 = admin
        .query_one(ENQUEUE, &[&queue, &items, &flow.groups()])?
        .get(0);
    Ok(n)
}

/// What one run of a cell measured.
struct Measured {
    items: i64,
    seconds: f64,
    claim_p50_us: u64,
    claim_p99_us: u64,
    calls: i64,
    claimed: i64,
    max_claimed: i64,
    max_group_claimed: i64,
}

/// Run one cell: `flow` on a fresh queue named `queue`.
fn cell(cluster: &Cluster, plan: &Plan, queue: &str, flow: Flow) -> Result<Measured> {
    let mut admin = cluster.connect_to(DB)?;
    // Every cell starts from an empty, vacuumed table.
    admin.batch_execute("DELETE FROM workfence.items")?;
    admin.batch_execute("VACUUM workfence.items")?;
    let warm_queue = format!("{queue}-warm-up");
    fill(&mut admin, queue, flow, plan.items)?;
    // The warm-up queue: one item per worker, each in a group of its own.
    let warm_flow = match flow {
        Flow::Groups(_) => Flow::Groups(plan.conns as i32),
        other => other,
    };
    fill(&mut admin, &warm_queue, warm_flow, plan.conns as i32)?;
    admin.batch_execute("ANALYZE workfence.items")?;

    let mut workers = Vec::with_capacity(plan.conns);
    for n in 0..plan.conns {
        let mut w = Worker::new(cluster, n, plan.sync)?;
        // One after the other, so a limit of 1 hands each its item.
        let token = w
            .claim(&warm_queue, "5 seconds")?
            .ok_or_else(|| format!("{}: the warm-up claim got nothing", w.owner))?;
        w.finish(token)?;
        workers.push(w);
    }

    let target = i64::from(plan.items);
    let finished = AtomicI64::new(0);
    let last_finish_ns = AtomicI64::new(0);
    let stop = AtomicBool::new(false);
    let peaks = Mutex::new((0i64, 0i64));
    let start = Barrier::new(plan.conns + 1);
    let mut monitor = cluster.connect_to(DB)?;
    let sample = monitor.prepare(SAMPLE)?;

    let (outcomes, monitored) = thread::scope(|scope| {
        let threads: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                let (finished, last_finish_ns, start) = (&finished, &last_finish_ns, &start);
                scope.spawn(move || -> Result<(Histogram<u64>, i64, i64)> {
                    let mut hist = new_histogram()?;
                    let (mut calls, mut claimed) = (0i64, 0i64);
                    start.wait();
                    let t0 = Instant::now();
                    let deadline = t0 + plan.cell;
                    let mut waiting_since = None;
                    while Instant::now() < deadline && finished.load(Ordering::Relaxed) < target {
                        let asked = *waiting_since.get_or_insert_with(Instant::now);
                        calls += 1;
                        let Some(token) = w.claim(queue, &plan.wait)? else {
                            continue;
                        };
                        waiting_since = None;
                        claimed += 1;
                        hist.saturating_record(asked.elapsed().as_micros() as u64);
                        w.finish(token)?;
                        let at = Instant::now();
                        if at <= deadline {
                            finished.fetch_add(1, Ordering::Relaxed);
                            let ns = at.duration_since(t0).as_nanos() as i64;
                            last_finish_ns.fetch_max(ns, Ordering::Relaxed);
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
    let drained = items >= target;
    let seconds = if drained {
        last_finish_ns.into_inner() as f64 / 1e9
    } else {
        plan.cell.as_secs_f64()
    };
    let (max_claimed, max_group_claimed) = *peaks.lock().map_err(|_| "poisoned")?;
    if let Some(c) = flow.concurrency() {
        if max_claimed > i64::from(c) {
            return Err(format!("{queue}: {max_claimed} items claimed at once, limit {c}").into());
        }
    }
    if max_group_claimed > 1 {
        return Err(
            format!("{queue}: {max_group_claimed} items of one group claimed at once").into(),
        );
    }
    if items == 0 {
        return Err(format!(
            "{queue}: no item finished in {:.1} s",
            plan.cell.as_secs_f64()
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
    })
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
    let server_version: String = cluster
        .connect_to(DB)?
        .query_one("SHOW server_version", &[])?
        .get(0);
    let flows: Vec<Flow> = plan
        .groups
        .iter()
        .map(|&g| Flow::Groups(g))
        .chain(plan.limits.iter().map(|&c| Flow::Concurrency(c)))
        .collect();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut queue_no = 0;
    for rep in 1..=plan.reps {
        for (i, &flow) in flows.iter().enumerate() {
            // ABBA: which of the pair goes first alternates.
            let order = if (rep + i) % 2 == 1 {
                [Flow::Plain, flow]
            } else {
                [flow, Flow::Plain]
            };
            for run_flow in order {
                queue_no += 1;
                let queue = format!("flow-{queue_no}");
                let m = cell(&cluster, plan, &queue, run_flow)?;
                let s = Sample {
                    rep,
                    pair: flow.label(),
                    role: if run_flow == Flow::Plain {
                        "baseline"
                    } else {
                        "flow"
                    },
                    groups: run_flow.groups(),
                    concurrency: run_flow.concurrency(),
                    conns: plan.conns,
                    items: m.items,
                    seconds: m.seconds,
                    items_per_s: m.items as f64 / m.seconds,
                    claim_p50_us: m.claim_p50_us,
                    claim_p99_us: m.claim_p99_us,
                    calls_per_item: m.calls as f64 / m.claimed.max(1) as f64,
                    max_claimed: m.max_claimed,
                    max_group_claimed: m.max_group_claimed,
                };
                eprintln!(
                    "[{:>4} s] rep {rep} {:<24} {:<8} {:>8.0} items/s p50={:>7} µs p99={:>8} µs calls/item={:.2} most claimed={} (one group: {})",
                    started.elapsed().as_secs(),
                    s.pair,
                    s.role,
                    s.items_per_s,
                    s.claim_p50_us,
                    s.claim_p99_us,
                    s.calls_per_item,
                    s.max_claimed,
                    s.max_group_claimed
                );
                samples.push(s);
            }
        }
    }
    let report = report(
        plan,
        &flows,
        &samples,
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

fn write_csv(path: &Path, samples: &[Sample]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    for s in samples {
        w.serialize(s)?;
    }
    w.flush()?;
    Ok(())
}

/// The median; the mean of the middle two for an even count.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
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
        calls_per_item: m(&|s| s.calls_per_item),
        max_claimed: samples.iter().map(|s| s.max_claimed).max().unwrap_or(0),
        max_group_claimed: samples
            .iter()
            .map(|s| s.max_group_claimed)
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

/// The markdown report: the method in short, one table per experiment.
fn report(
    plan: &Plan,
    flows: &[Flow],
    samples: &[Sample],
    server_version: &str,
    seconds: u64,
) -> String {
    let mut out = String::from("# Flow control: serial groups and concurrency limits\n\n");
    let _ = writeln!(
        out,
        "Written by `workfence-flow`{} (`scripts/bench.sh`; the method is at the top of \
         `bench/src/bin/flow.rs` and in `docs/benchmarks.md`). {} worker connections, each \
         looping `work_claim(queue, owner, '{LEASE}', 1, wait => '{}')` then `work_finish`, \
         `synchronous_commit` {}; {} items enqueued per cell, cells of {} s, {} repetition{} \
         (medians shown), each flow cell beside a baseline cell (the same on a queue with \
         neither groups nor limits) in ABBA order. PostgreSQL {server_version}, {seconds} s in \
         all. One run on a shared machine: compare rows within this file, not with other \
         runs.\n",
        if plan.quick { " --quick" } else { "" },
        plan.conns,
        plan.wait,
        if plan.sync { "on" } else { "off" },
        thousands(i64::from(plan.items)),
        plan.cell.as_secs_f64(),
        plan.reps,
        if plan.reps == 1 { "" } else { "s" },
    );
    out.push_str(
        "Claim latency: from a worker's claim call to the call that returned its item, µs. \
         Calls per item: claim calls made per item claimed (a long poll that ran out of its \
         wait counts). Most claimed: the most items of the queue claimed at once, and of one \
         group, sampled every 50 ms (the maxima over the repetitions).\n",
    );
    for (title, is_groups) in [
        ("Serial groups: items spread over G groups", true),
        (
            "Concurrency limit: work_limit(queue, concurrency => C)",
            false,
        ),
    ] {
        let rows: Vec<&Flow> = flows
            .iter()
            .filter(|f| matches!(f, Flow::Groups(_)) == is_groups)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n## {title}\n");
        out.push_str(
            "| queue | items/s | × baseline | claim p50 µs | claim p99 µs | calls per item | most claimed (one group) | baseline items/s | baseline p50 µs | baseline p99 µs |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for flow in rows {
            let label = flow.label();
            let side = |role: &str| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| s.pair == label && s.role == role)
                    .collect()
            };
            let (ours, base) = (side("flow"), side("baseline"));
            if ours.is_empty() || base.is_empty() {
                continue;
            }
            let (a, b) = (medians(&ours), medians(&base));
            let _ = writeln!(
                out,
                "| {label} | {:.0} | {} | {:.0} | {:.0} | {:.2} | {} ({}) | {:.0} | {:.0} | {:.0} |",
                a.items_per_s,
                ratio(a.items_per_s / b.items_per_s),
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
        assert_eq!(p.limits, vec![1, 10, 100]);
        let q = parse_args(args(&["--quick", "--limits", "2"])).unwrap();
        assert_eq!((q.reps, q.items, q.conns), (1, 2_000, 4));
        assert_eq!(q.limits, vec![2]);
        assert!(parse_args(args(&["--groups", "0"])).is_err());
        assert!(parse_args(args(&["--groups", "none"]))
            .unwrap()
            .groups
            .is_empty());
        assert!(parse_args(args(&["--limits", "1,x"])).is_err());
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
        assert_eq!(Flow::Groups(1).label(), "1 group");
        assert_eq!(Flow::Groups(10_000).label(), "10,000 groups");
        assert_eq!(Flow::Concurrency(100).label(), "concurrency limit 100");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(ratio(0.8), "0.80");
        assert_eq!(ratio(0.0045), "0.004");
    }

    fn sample(pair: Flow, role: &'static str, rep: usize, ips: f64, p99: u64) -> Sample {
        Sample {
            rep,
            pair: pair.label(),
            role,
            groups: pair.groups(),
            concurrency: pair.concurrency(),
            conns: 16,
            items: 1000,
            seconds: 1000.0 / ips,
            items_per_s: ips,
            claim_p50_us: p99 / 4,
            claim_p99_us: p99,
            calls_per_item: 1.0,
            max_claimed: 16,
            max_group_claimed: 1,
        }
    }

    #[test]
    fn the_report_sets_each_flow_cell_beside_its_own_baseline() {
        let p = parse_args(args(&["--quick"])).unwrap();
        let (g, c) = (Flow::Groups(100), Flow::Concurrency(10));
        let samples = vec![
            sample(g, "baseline", 1, 1000.0, 800),
            sample(g, "flow", 1, 900.0, 1200),
            sample(g, "flow", 2, 700.0, 1000),
            sample(g, "baseline", 2, 1000.0, 800),
            sample(g, "flow", 3, 800.0, 1400),
            sample(g, "baseline", 3, 1000.0, 800),
            sample(c, "flow", 1, 500.0, 3000),
            sample(c, "baseline", 1, 2000.0, 900),
        ];
        let r = report(&p, &[g, c], &samples, "15", 9);
        assert!(
            r.contains(
                "| 100 groups | 800 | 0.80 | 300 | 1200 | 1.00 | 16 (1) | 1000 | 200 | 800 |"
            ),
            "{r}"
        );
        assert!(
            r.contains("| concurrency limit 10 | 500 | 0.25 | 750 | 3000 |"),
            "{r}"
        );
        assert!(r.contains("## Serial groups") && r.contains("## Concurrency limit"));
    }
}
