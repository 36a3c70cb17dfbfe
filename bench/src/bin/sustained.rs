//! `workfence-sustained`: pg_workfence under a steady load for minutes, with
//! autovacuum left as a user has it (issue 15).
//!
//! One throwaway PostgreSQL cluster (`shared_buffers` 1 GB as in the main
//! benchmark, fsync on, and, unlike the main benchmark, autovacuum on with
//! every autovacuum setting at its default), one database with the
//! extension, one queue. For `--minutes` minutes of `--minute-seconds`
//! seconds each:
//!
//! - **Producers** (`--producers`, 2) enqueue at a steady total rate
//!   (`--rate` items/s): one autocommit `work_enqueue(queue, payload)` per
//!   item, paced to a schedule (item k of a producer is due at a fixed
//!   offset from the start; a producer sleeps until its next item is due,
//!   and one that fell behind enqueues at once until it is back on
//!   schedule). How far behind its schedule a producer got is reported.
//! - **Workers** (`--workers`, 8), each on a connection of its own, claim one
//!   item at a time, `work_claim(queue, owner, '5 minutes')`, and finish it
//!   with `work_finish(id, owner, epoch)`; a claim that finds the queue empty
//!   is counted and the worker sleeps `--idle-ms` (50) before its next claim,
//!   as the polling mode of `workfence-long-poll` does (the plain claim, not
//!   the long poll: what is measured is the claim's own cost, not time spent
//!   waiting for the next item; `docs/long-poll.md` measures the long poll).
//!   Empty claims are not free: with 5 ms sleeps, eight idle workers' empty
//!   claims took enough of the two cores to cut what the run could sustain
//!   by a third to a half (unpaced: about 1,650 items/s with 50 ms sleeps,
//!   850 to 1,120 with 5 ms, in one session). A refused finish fails the run (no lease can
//!   lapse: the lease is 5 minutes).
//! - **A purger** deletes finished items older than `--retain` seconds with
//!   `work_purge` every `--purge-every` seconds (both default to one
//!   "minute"; `--purge-every 0`: never), as an operator's cron job or the
//!   extension's maintenance worker would, so that the table can reach a
//!   steady size.
//!
//! Reported per minute: items enqueued and finished per second, claim
//! latency p50 and p99 (HDR histogram of the claims that returned an item,
//! timed by the client), empty claims per second, the producers' largest
//! lag behind schedule, items purged; and at each minute's end the backlog
//! (pending items), `pg_relation_size` of `workfence.items` and of each of
//! its indexes, `pg_total_relation_size`, `n_live_tup`, `n_dead_tup`,
//! `autovacuum_count` and `autoanalyze_count` from `pg_stat_user_tables`, and
//! the checkpoints begun so far. Then each minute's items/s and claim p99 as
//! a ratio to the first minute's, and whether it is within 10% (printed,
//! never asserted), and a paragraph generated from the figures.
//!
//! Writes the markdown report to `--out FILE.md` and the figures, one row a
//! minute, to the CSV beside it (`FILE.csv`); `bench/plot_sustained.py`
//! draws them. Numbers from one run on a shared machine: compare within the
//! run, not across runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};
use workfence_bench::value;

use workfence_bench::load::{
    self, count, mb, opt, plural, ratio, ratio_text, server, spawn, Clock, Monitor, Producer,
    Result, Server, Shared, Snapshot, Target, Worker, LEASE,
};
use workfence_harness::Cluster;

/// What `workfence-sustained --help` prints.
const USAGE: &str =
    "usage: workfence-sustained [--quick] [--minutes N] [--minute-seconds S] [--rate R]
                           [--workers N] [--producers N] [--purge-every S] [--retain S]
                           [--idle-ms MS] [--warm-up N] [--out FILE.md]
  Runs pg_workfence under a steady load on a throwaway PostgreSQL cluster with autovacuum on
  (default settings): producers enqueue at a fixed rate, workers claim one item at a time and
  finish it, a purger deletes old finished items. Prints per-minute figures (items/s, claim
  p50/p99, backlog, table and index sizes, dead tuples, autovacuums) and each minute's items/s
  and claim p99 against the first minute's; with --out, a markdown report to FILE.md and the
  figures to the CSV beside it (FILE.csv).
  --quick            the smoke run: 3 minutes of 5 s, 200 items/s, 4 workers, 1 producer
  --minutes N        minutes to run (default 10)
  --minute-seconds S seconds per reported minute (default 60)
  --rate R           items enqueued per second, all producers together (default 1000)
  --workers N        claiming connections (default 8)
  --producers N      enqueueing connections (default 2)
  --purge-every S    run work_purge every S seconds (default: one minute; 0: never)
  --retain S         purge finished items older than S seconds (default: one minute)
  --idle-ms MS       a worker's sleep after a claim that found nothing (default 50)
  --warm-up N        minutes of the same load run first and not reported (default 1): the
                     first minutes after the cluster's start (its first autovacuums, a machine
                     still busy with what ran before) are not the steady state the minutes
                     after are compared with
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

/// The default of `--rate`: items per second (see [`RATE_WHY`]).
const DEFAULT_RATE: f64 = 1000.0;

/// Why the default rate is what it is; the report quotes it when the run
/// used the default.
const RATE_WHY: &str = "1,000 items/s, the default, is what this 2-core machine sustains with \
room to spare. Every item is three transactions committed with fsync on (the enqueue, the claim, \
the finish). It was chosen when the enqueues committed one at a time: each sent `NOTIFY \
work_enqueued` (`workfence.notify_enqueued` was on by default before 0.12.0), and PostgreSQL \
serialises notifying commits with a cluster-wide lock held until the commit's WAL flush, so no \
two enqueues shared a flush, whatever the number of producers. On this machine `work_enqueue` alone (pgbench) reached about 3,000 \
commits/s from one connection and about the same from four (5,000 from four with the \
notification off), and this binary unpaced (`--rate 20000`, otherwise the defaults) finished \
about 1,650 items/s while another job kept one of the two cores busy. 1,000 items/s leaves room \
for autovacuum, checkpoints and other processes on the same two cores. The ceiling moves with \
the WAL flush time: while other jobs were writing to the same disk it fell to 300 to 500 \
items/s, and then the producers fall behind (the enqueued/s and producer lag columns show it). \
The point is stability over time, not the peak.";

/// The queue every producer and worker uses.
const QUEUE: &str = "sustained";

/// The database the run creates (with the extension).
const DB: &str = "sustained";

/// The command line, as given.
struct Args {
    /// `--quick`: the smoke run's sizes, where not given explicitly.
    quick: bool,
    /// `--out FILE.md`: the markdown report (the CSV goes beside it).
    out: Option<PathBuf>,
    /// `--minutes`.
    minutes: Option<usize>,
    /// `--minute-seconds`.
    minute_seconds: Option<u64>,
    /// `--rate`.
    rate: Option<f64>,
    /// `--workers`.
    workers: Option<usize>,
    /// `--producers`.
    producers: Option<usize>,
    /// `--purge-every`.
    purge_every: Option<u64>,
    /// `--retain`.
    retain: Option<u64>,
    /// `--idle-ms`.
    idle_ms: Option<u64>,
    /// `--warm-up`.
    warm_up: Option<usize>,
}

/// The run's sizes: the command line with the defaults filled in.
#[derive(Clone, Debug)]
struct Plan {
    /// The smoke run's sizes were the defaults.
    quick: bool,
    /// Reported minutes.
    minutes: usize,
    /// Minutes of load before the reported ones, not reported.
    warm_up: usize,
    /// Length of one reported minute.
    minute: Duration,
    /// Target items per second, all producers together.
    rate: f64,
    /// The rate was `--rate`'s default.
    default_rate: bool,
    /// Claiming connections.
    workers: usize,
    /// Enqueueing connections.
    producers: usize,
    /// Time between purges; `None`: no purge.
    purge_every: Option<Duration>,
    /// Age of the finished items a purge deletes, in seconds.
    retain: u64,
    /// A worker's sleep after an empty claim.
    idle: Duration,
}

/// The command line, or `None` after `--help` printed the usage.
fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut args = Args {
        quick: false,
        out: None,
        minutes: None,
        minute_seconds: None,
        rate: None,
        workers: None,
        producers: None,
        purge_every: None,
        retain: None,
        idle_ms: None,
        warm_up: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--out" => args.out = Some(it.next().ok_or("--out needs a file")?.into()),
            "--minutes" => args.minutes = Some(value(&arg, &mut it)?),
            "--minute-seconds" => args.minute_seconds = Some(value(&arg, &mut it)?),
            "--rate" => args.rate = Some(value(&arg, &mut it)?),
            "--workers" => args.workers = Some(value(&arg, &mut it)?),
            "--producers" => args.producers = Some(value(&arg, &mut it)?),
            "--purge-every" => args.purge_every = Some(value(&arg, &mut it)?),
            "--retain" => args.retain = Some(value(&arg, &mut it)?),
            "--idle-ms" => args.idle_ms = Some(value(&arg, &mut it)?),
            "--warm-up" => args.warm_up = Some(value(&arg, &mut it)?),
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    Ok(Some(args))
}

impl Plan {
    /// Minutes of load in all: the warm-up and the reported ones.
    fn total_minutes(&self) -> usize {
        self.warm_up + self.minutes
    }

    /// The defaults (of a full run, or of `--quick`) under what `args` gave;
    /// refuses sizes the run cannot use.
    fn new(args: &Args) -> Result<Plan> {
        let q = args.quick;
        let minutes = args.minutes.unwrap_or(if q { 3 } else { 10 });
        let minute_seconds = args.minute_seconds.unwrap_or(if q { 5 } else { 60 });
        let rate = args.rate.unwrap_or(if q { 200.0 } else { DEFAULT_RATE });
        let workers = args.workers.unwrap_or(if q { 4 } else { 8 });
        let producers = args.producers.unwrap_or(if q { 1 } else { 2 });
        let purge_every = args.purge_every.unwrap_or(minute_seconds);
        let retain = args.retain.unwrap_or(minute_seconds);
        let idle_ms = args.idle_ms.unwrap_or(50);
        if minutes == 0 || minutes > 10_000 {
            return Err("--minutes must be 1 to 10000".into());
        }
        let warm_up = args.warm_up.unwrap_or(1);
        if warm_up > 60 {
            return Err("--warm-up must be 0 to 60 minutes".into());
        }
        if minute_seconds == 0 || minute_seconds > 3600 {
            return Err("--minute-seconds must be 1 to 3600".into());
        }
        if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
            return Err("--rate must be above 0 and at most 1000000".into());
        }
        if workers == 0 || producers == 0 || workers + producers > 180 {
            return Err(
                "--workers and --producers must be at least 1, at most 180 together".into(),
            );
        }
        if retain > 3650 * 86_400 {
            return Err("--retain must be at most 3650 days".into());
        }
        Ok(Plan {
            quick: q,
            minutes,
            warm_up,
            minute: Duration::from_secs(minute_seconds),
            rate,
            default_rate: args.rate.is_none() && !q,
            workers,
            producers,
            purge_every: (purge_every > 0).then(|| Duration::from_secs(purge_every)),
            retain,
            idle: Duration::from_millis(idle_ms),
        })
    }
}

/// Runs the bench; on failure says why and exits 1.
fn main() {
    if let Err(e) = run() {
        eprintln!("workfence-sustained: {e}");
        std::process::exit(1);
    }
}

/// One reported minute: what the threads counted and the snapshot at its end.
struct Minute {
    /// Items enqueued per second.
    enqueued_per_s: f64,
    /// Items finished per second.
    finished_per_s: f64,
    /// Claim latency median, µs (`None`: no claim returned an item).
    p50_us: Option<u64>,
    /// Claim latency 99th percentile, µs.
    p99_us: Option<u64>,
    /// Claims that found nothing, per second.
    empty_per_s: f64,
    /// The producers' largest lag behind schedule, ms.
    lag_max_ms: f64,
    /// Items purged.
    purged: i64,
    /// The table at the minute's end.
    snap: Snapshot,
}

/// Runs the bench and writes its report.
fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let plan = Plan::new(&args)?;
    if let Some(out) = &args.out {
        if out.extension().is_some_and(|e| e == "csv") {
            return Err(format!(
                "--out {}: the report is markdown, and its CSV goes beside it as FILE.csv; \
                 name the report FILE.md",
                out.display()
            )
            .into());
        }
    }
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("sustained-bench")
        .replace_existing(true)
        // WORKFENCE_KEEP: leave the cluster (and its log) for a post-mortem.
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("max_connections", "200")
        .setting("shared_buffers", "1GB")
        // Nothing else: autovacuum and checkpoints as a user has them.
        .start()?;
    // The statements of 0.12.0 and before: no clock in the payload (workfence-pressure's
    // end-to-end latency needs it; this bench reports claim latency only).
    let target = Target::workfence(DB, false)?;
    target.create(&cluster)?;
    let mut monitor = Monitor::open(&cluster, &target, QUEUE)?;
    let server = server(&mut monitor.client)?;
    println!(
        "sustained: {} minutes of {} s, {} items/s, {}, {}{}",
        plan.minutes,
        plan.minute.as_secs(),
        plan.rate,
        plural(plan.workers, "worker"),
        plural(plan.producers, "producer"),
        if plan.quick { " (--quick)" } else { "" }
    );

    // Every connection is open, its statements prepared, before the start.
    let workers = (0..plan.workers)
        .map(|w| Worker::open(&cluster, &target, QUEUE, w))
        .collect::<Result<Vec<_>>>()?;
    let producers = (0..plan.producers)
        .map(|_| Producer::open(&cluster, &target))
        .collect::<Result<Vec<_>>>()?;
    let purger = cluster.connect_to(DB)?;
    // The counters before the start: the report shows what happened since.
    let start = monitor.snapshot()?;
    // Time for the threads to start.
    let t0 = Instant::now() + Duration::from_millis(200);
    let shared = Shared::new(Clock {
        start: t0,
        t0,
        period: plan.minute,
        periods: plan.total_minutes(),
    });
    let mut threads = Vec::new();
    for wk in workers {
        let idle = plan.idle;
        threads.push(spawn(&shared, move |s| load::work(wk, idle, s)));
    }
    for (p, c) in producers.into_iter().enumerate() {
        let (producers, rate) = (plan.producers, plan.rate);
        threads.push(spawn(&shared, move |s| {
            load::produce(c, p, producers, rate, QUEUE, s)
        }));
    }
    if let Some(every) = plan.purge_every {
        let retain = Duration::from_secs(plan.retain);
        threads.push(spawn(&shared, move |s| {
            load::purge(purger, &target, QUEUE, every, retain, s)
        }));
    } else {
        drop(purger);
    }

    let snaps = watch(&mut monitor, &shared, &start);
    shared.stop();
    let tally = load::join(threads, plan.total_minutes())?;
    let snaps = snaps?;

    let secs = plan.minute.as_secs_f64();
    // The warm-up's minutes are run, not reported.
    let minutes: Vec<Minute> = snaps
        .into_iter()
        .enumerate()
        .skip(plan.warm_up)
        .map(|(m, snap)| {
            let h = &tally.claim_us[m];
            let some = !h.is_empty();
            Minute {
                enqueued_per_s: tally.enqueued[m] as f64 / secs,
                finished_per_s: tally.finished[m] as f64 / secs,
                p50_us: some.then(|| h.value_at_quantile(0.5)),
                p99_us: some.then(|| h.value_at_quantile(0.99)),
                empty_per_s: tally.empty[m] as f64 / secs,
                lag_max_ms: tally.lag_max_us[m] as f64 / 1000.0,
                purged: tally.purged[m],
                snap,
            }
        })
        .collect();
    let report = report(&plan, &server, &minutes);
    print!("{report}");
    if let Some(out) = &args.out {
        std::fs::write(out, &report).map_err(|e| format!("writing {}: {e}", out.display()))?;
        let csv_path = out.with_extension("csv");
        write_csv(&csv_path, &minutes)
            .map_err(|e| format!("writing {}: {e}", csv_path.display()))?;
        println!(
            "sustained: wrote {} and {}",
            out.display(),
            csv_path.display()
        );
    }
    Ok(())
}

/// At each minute's end, a snapshot of the table (its counters counted
/// from `start`'s) and a progress line; returns the snapshots (fewer than
/// the minutes if a thread failed, which the caller then reports).
fn watch(monitor: &mut Monitor, shared: &Shared, start: &Snapshot) -> Result<Vec<Snapshot>> {
    let secs = shared.clock.period.as_secs_f64();
    let (mut enqueued, mut finished) = (0, 0);
    load::watch(monitor, shared, |m, snap| {
        snap.autovacuums -= start.autovacuums;
        snap.autoanalyzes -= start.autoanalyzes;
        snap.checkpoints -= start.checkpoints;
        let (e, f) = (
            shared.live.enqueued.load(Ordering::Relaxed),
            shared.live.finished.load(Ordering::Relaxed),
        );
        println!(
            "sustained: minute {}: about {:.0} enqueued/s, {:.0} finished/s, backlog {}, \
             items {:.1} MB (total {:.1} MB), {} dead tuples, {} autovacuums",
            m + 1,
            (e - enqueued) as f64 / secs,
            (f - finished) as f64 / secs,
            snap.backlog,
            mb(snap.table_bytes),
            mb(snap.total_bytes),
            snap.n_dead_tup,
            snap.autovacuums,
        );
        (enqueued, finished) = (e, f);
        Ok(())
    })
}

/// Whether a ratio is within 10% of 1.
fn within(r: Option<f64>) -> &'static str {
    match r {
        // 1e-9: 110 / 100 is 1.1000000000000001 in floating point.
        Some(r) if (r - 1.0).abs() <= 0.10 + 1e-9 => "yes",
        Some(_) => "**no**",
        None => "-",
    }
}

/// The markdown report.
fn report(plan: &Plan, server: &Server, minutes: &[Minute]) -> String {
    let mut s = String::new();
    let secs = plan.minute.as_secs();
    let _ = write!(
        s,
        "# Sustained load: {} minutes at {:.0} items/s, autovacuum on\n\n\
         Written by `workfence-sustained` (`scripts/bench.sh`; see the top of \
         `bench/src/bin/sustained.rs` for the method). One run on a shared machine: compare rows \
         within this file, not with other runs.\n\n",
        plan.minutes, plan.rate
    );
    let purge = match plan.purge_every {
        Some(every) => format!(
            "every {} s, from {} s after the start, a `work_purge` deleted the finished items \
             older than {} s",
            every.as_secs(),
            every.as_secs_f64() / 2.0,
            plan.retain
        ),
        None => "finished items were never purged (`--purge-every 0`)".to_string(),
    };
    let _ = write!(
        s,
        "Run: {} \"minutes\" of {secs} s{}; target {:.0} items/s enqueued by {}, one \
         autocommit `work_enqueue` per item, paced to a schedule; {}, each claiming one item at a time (`work_claim(queue, owner, '{LEASE}')`, \
         then `work_finish`; a claim that found nothing was followed by a {} ms sleep); {purge}. {}\n\n",
        plan.minutes,
        if plan.quick {
            " (`--quick`: the smoke run, too short for the figures to mean much)"
        } else {
            ""
        },
        plan.rate,
        plural(plan.producers, "producer connection"),
        plural(plan.workers, "worker connection"),
        plan.idle.as_millis(),
        match plan.warm_up {
            0 => "No warm-up: minute 1 starts with the load.".to_string(),
            n => format!(
                "The same load ran for {} first, not reported (`--warm-up`): minute 1 is the \
                 first after it, and the reference the later minutes are compared with; \
                 counts \"since the start\" include the warm-up.",
                plural(n, "minute")
            ),
        },
    );
    let non_default: Vec<&str> = server
        .autovacuum
        .iter()
        .filter(|a| !a.2)
        .map(|a| a.0.as_str())
        .collect();
    let settings: Vec<String> = server
        .autovacuum
        .iter()
        .map(|(name, value, _)| format!("`{name}` {value}"))
        .collect();
    let _ = write!(
        s,
        "Server: {}, `shared_buffers` {}, fsync on, autovacuum on with {} ({}); everything \
         else default (so checkpoints too: `checkpoint_timeout` 5 min, `max_wal_size` 1 GB). \
         {} cores, shared by the server, this driver and whatever else ran on the machine.\n\n",
        server.version,
        server.shared_buffers,
        if non_default.is_empty() {
            "every autovacuum setting at its default".to_string()
        } else {
            format!("these settings changed: {}", non_default.join(", "))
        },
        settings.join(", "),
        thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if plan.default_rate {
        let _ = write!(s, "Why this rate: {RATE_WHY}\n\n");
    } else {
        let _ = write!(
            s,
            "The rate was set for this run (`--rate`{}); the full run's default is {DEFAULT_RATE:.0} \
             items/s.\n\n",
            if plan.quick { ", or `--quick`'s" } else { "" }
        );
    }

    s.push_str(
        "## Per minute\n\n\
         Claim latency: the claims that returned an item, timed by the client. Backlog, sizes \
         and statistics: at the minute's end. Autovacuums, autoanalyzes and checkpoints: counts \
         since the start.\n\n\
         | minute | enqueued/s | finished/s | claim p50 µs | claim p99 µs | empty claims/s | \
         producer lag max ms | backlog | purged | n_live_tup | n_dead_tup | autovacuums | \
         autoanalyzes | checkpoints |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (m, x) in minutes.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            m + 1,
            x.enqueued_per_s,
            x.finished_per_s,
            opt(x.p50_us),
            opt(x.p99_us),
            x.empty_per_s,
            x.lag_max_ms,
            x.snap.backlog,
            x.purged,
            x.snap.n_live_tup,
            x.snap.n_dead_tup,
            x.snap.autovacuums,
            x.snap.autoanalyzes,
            x.snap.checkpoints,
        );
    }

    let index_names: Vec<&str> = minutes.first().map_or(Vec::new(), |x| {
        x.snap.index_bytes.iter().map(|i| i.0.as_str()).collect()
    });
    s.push_str(
        "\n## Sizes at each minute's end (MB)\n\n\
         `pg_relation_size` of `workfence.items` (the heap) and of each of its indexes, and \
         `pg_total_relation_size` (heap, indexes and TOAST).\n\n| minute | heap |",
    );
    for name in &index_names {
        let _ = write!(s, " {name} |");
    }
    s.push_str(" total |\n|---:|---:|");
    s.push_str(&"---:|".repeat(index_names.len() + 1));
    s.push('\n');
    for (m, x) in minutes.iter().enumerate() {
        let _ = write!(s, "| {} | {:.1} |", m + 1, mb(x.snap.table_bytes));
        for name in &index_names {
            let bytes = x
                .snap
                .index_bytes
                .iter()
                .find(|i| i.0 == *name)
                .map_or(0, |i| i.1);
            let _ = write!(s, " {:.1} |", mb(bytes));
        }
        let _ = writeln!(s, " {:.1} |", mb(x.snap.total_bytes));
    }

    let first = minutes.first();
    let first_rate = first.map(|x| x.finished_per_s);
    let first_p99 = first.and_then(|x| x.p99_us).map(|v| v as f64);
    s.push_str(
        "\n## Each minute against the first\n\n\
         Ratios to minute 1; \"within 10%\" is 0.90 to 1.10. Printed, not asserted.\n\n\
         | minute | finished/s | ratio | within 10% | claim p99 µs | ratio | within 10% |\n\
         |---:|---:|---:|---|---:|---:|---|\n",
    );
    for (m, x) in minutes.iter().enumerate() {
        let r = ratio(Some(x.finished_per_s), first_rate);
        let p = ratio(x.p99_us.map(|v| v as f64), first_p99);
        let _ = writeln!(
            s,
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            m + 1,
            x.finished_per_s,
            ratio_text(r),
            within(r),
            opt(x.p99_us),
            ratio_text(p),
            within(p),
        );
    }

    if let Some(last) = minutes.last() {
        s.push_str("\n## At the end\n\n");
        let _ = writeln!(
            s,
            "- `workfence.items`: heap {:.1} MB, with indexes and TOAST {:.1} MB \
             (after minute 1: {:.1} and {:.1} MB)",
            mb(last.snap.table_bytes),
            mb(last.snap.total_bytes),
            first.map_or(0.0, |x| mb(x.snap.table_bytes)),
            first.map_or(0.0, |x| mb(x.snap.total_bytes)),
        );
        for (name, bytes) in &last.snap.index_bytes {
            let then = first
                .and_then(|x| x.snap.index_bytes.iter().find(|i| i.0 == *name))
                .map_or(0, |i| i.1);
            let _ = writeln!(
                s,
                "- index `{name}`: {:.1} MB (after minute 1: {:.1} MB)",
                mb(*bytes),
                mb(then)
            );
        }
        let _ = writeln!(
            s,
            "- {} live and {} dead tuples; {} and {} of the table and {} during the run",
            last.snap.n_live_tup,
            last.snap.n_dead_tup,
            plural(count(last.snap.autovacuums), "autovacuum"),
            plural(count(last.snap.autoanalyzes), "autoanalyze"),
            plural(count(last.snap.checkpoints), "checkpoint"),
        );
    }

    s.push_str("\n## What it means\n\n");
    s.push_str(&meaning(plan, minutes));
    s.push('\n');
    s
}

/// The paragraph under "What it means", generated from the figures.
fn meaning(plan: &Plan, minutes: &[Minute]) -> String {
    let (Some(first), Some(last)) = (minutes.first(), minutes.last()) else {
        return "No minute completed: there are no figures.\n".to_string();
    };
    let n = minutes.len() as f64;
    let mut s = String::new();
    let enq = minutes.iter().map(|x| x.enqueued_per_s).sum::<f64>() / n;
    let fin = minutes.iter().map(|x| x.finished_per_s).sum::<f64>() / n;
    let max_backlog = minutes.iter().map(|x| x.snap.backlog).max().unwrap_or(0);
    let max_lag = minutes.iter().map(|x| x.lag_max_ms).fold(0.0, f64::max);
    if enq >= plan.rate * 0.98 {
        let _ = write!(
            s,
            "The producers held the target: {enq:.0} items/s enqueued on average against \
             {:.0} asked (largest lag behind their schedule {max_lag:.1} ms). ",
            plan.rate
        );
    } else {
        let _ = write!(
            s,
            "The producers fell short of the target: {enq:.0} items/s enqueued on average \
             against {:.0} asked (up to {max_lag:.0} ms behind their schedule): this machine did \
             not sustain the rate, and the figures below are of a saturated queue rather than a \
             steady one (a lower `--rate` measures stability). ",
            plan.rate
        );
        let empty = minutes.iter().map(|x| x.empty_per_s).sum::<f64>() / n;
        if empty >= 1.0 {
            let _ = write!(
                s,
                "The workers meanwhile found the queue empty {empty:.0} times a second: the \
                 enqueues were the bottleneck (each commits on its own; with \
                 `workfence.notify_enqueued` on, off by default from 0.12.0, each one's `NOTIFY \
                 work_enqueued` also holds PostgreSQL's cluster-wide notify lock through its \
                 commit's WAL flush, one flush per item). "
            );
        }
    }
    // Under a second of load waiting: the workers kept up.
    if (max_backlog as f64) < plan.rate.max(1.0) {
        let empty = minutes.iter().map(|x| x.empty_per_s).sum::<f64>() / n;
        let _ = write!(
            s,
            "The workers kept up: {fin:.0} items/s finished on average, the backlog at a \
             minute's end was at most {} (under a second of load), and claims \
             found the queue empty {empty:.0} times a second, so there was capacity to spare. ",
            plural(count(max_backlog), "item")
        );
    } else {
        let _ = write!(
            s,
            "The workers did not keep up: {fin:.0} items/s finished on average, and the backlog \
             reached {max_backlog} items ({last_backlog} at the end). ",
            last_backlog = last.snap.backlog
        );
    }

    let ratios: Vec<Option<f64>> = minutes
        .iter()
        .map(|x| ratio(Some(x.finished_per_s), Some(first.finished_per_s)))
        .collect();
    let ok = ratios.iter().filter(|r| within(**r) == "yes").count();
    let (lo, hi) = ratios
        .iter()
        .flatten()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let _ = write!(
        s,
        "Finished items/s stayed within 10% of the first minute's in {ok} of {} minutes \
         (ratios {lo:.2} to {hi:.2}); with the producers paced, this can only drop if the \
         workers fall behind. ",
        minutes.len()
    );

    let first_p99 = first.p99_us.map(|v| v as f64);
    let p99s: Vec<(usize, Option<f64>)> = minutes
        .iter()
        .enumerate()
        .map(|(m, x)| (m, ratio(x.p99_us.map(|v| v as f64), first_p99)))
        .collect();
    let ok = p99s.iter().filter(|(_, r)| within(*r) == "yes").count();
    // The other minutes' ratio furthest from 1.
    let worst = p99s
        .iter()
        .skip(1)
        .filter_map(|(m, r)| r.map(|r| (*m, r)))
        .max_by(|a, b| (a.1 - 1.0).abs().total_cmp(&(b.1 - 1.0).abs()));
    let p50s: Vec<u64> = minutes.iter().filter_map(|x| x.p50_us).collect();
    let _ = write!(
        s,
        "Claim p99 stayed within 10% of the first minute's ({} µs) in {ok} of {} minutes",
        opt(first.p99_us),
        minutes.len()
    );
    if let Some((m, r)) = worst {
        let _ = write!(
            s,
            "; the ratio furthest from 1 was {r:.2} (minute {}, {})",
            m + 1,
            if r > 1.0 { "slower" } else { "faster" }
        );
        // What else happened in that minute: the counters are counted
        // from the start, so a rise since the minute before is an event.
        let rose = |count: fn(&Snapshot) -> i64| {
            count(&minutes[m].snap) > m.checked_sub(1).map_or(0, |p| count(&minutes[p].snap))
        };
        let mut during = Vec::new();
        if rose(|x| x.autovacuums) {
            during.push("an autovacuum of the table ended");
        }
        if rose(|x| x.checkpoints) {
            during.push("a checkpoint began");
        }
        if r > 1.10 && !during.is_empty() {
            let _ = write!(s, ", a minute in which {}", during.join(" and "));
        }
    }
    if let (Some(lo), Some(hi)) = (p50s.iter().min(), p50s.iter().max()) {
        let _ = write!(s, "; p50 was between {lo} and {hi} µs");
    }
    s.push_str(". ");

    // Size: the second half of the run against the first half's end, so
    // that the purge's first round (one retention in) is behind.
    let mid = &minutes[(minutes.len() - 1) / 2];
    let growth = |then: i64, now: i64| {
        if then > 0 {
            format!("{:+.0}%", (now as f64 / then as f64 - 1.0) * 100.0)
        } else {
            "from nothing".to_string()
        }
    };
    let index_total = |x: &Minute| x.snap.index_bytes.iter().map(|i| i.1).sum::<i64>();
    let _ = write!(
        s,
        "The heap of `workfence.items` was {:.1} MB after minute {} and {:.1} MB at the end ({}); \
         its indexes together {:.1} MB and {:.1} MB ({}). ",
        mb(mid.snap.table_bytes),
        (minutes.len() - 1) / 2 + 1,
        mb(last.snap.table_bytes),
        growth(mid.snap.table_bytes, last.snap.table_bytes),
        mb(index_total(mid)),
        mb(index_total(last)),
        growth(index_total(mid), index_total(last)),
    );
    if plan.purge_every.is_some() {
        s.push_str(
            "With finished items purged, a table that autovacuum keeps up with levels off once \
             the first purges are past (its free space reused); steady growth in the second half \
             would be bloat. ",
        );
    } else {
        s.push_str(
            "Nothing was purged, so the table grows with the finished items it keeps; that \
             growth is retention, not bloat. ",
        );
    }
    let _ = write!(
        s,
        "Autovacuum processed the table {} and analyzed it {}; it ended with {} dead tuples \
         beside {} live ones.",
        plural(count(last.snap.autovacuums), "time"),
        plural(count(last.snap.autoanalyzes), "time"),
        last.snap.n_dead_tup,
        last.snap.n_live_tup
    );
    if plan.quick {
        s.push_str(
            " (A `--quick` run: its \"minutes\" are seconds long, too short for autovacuum's \
             one-minute naptime; the figures only show that the run works.)",
        );
    }
    s.push('\n');
    s
}

/// The figures, one row a minute, as CSV (the index columns named after
/// the indexes, in bytes).
fn write_csv(path: &Path, minutes: &[Minute]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    let index_names: Vec<String> = minutes.first().map_or(Vec::new(), |x| {
        x.snap.index_bytes.iter().map(|i| i.0.clone()).collect()
    });
    let mut header: Vec<String> = [
        "minute",
        "enqueued_per_s",
        "finished_per_s",
        "claim_p50_us",
        "claim_p99_us",
        "empty_claims_per_s",
        "producer_lag_max_ms",
        "backlog",
        "purged",
        "n_live_tup",
        "n_dead_tup",
        "autovacuum_count",
        "autoanalyze_count",
        "checkpoints",
        "table_bytes",
        "total_bytes",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect();
    header.extend(index_names.iter().map(|n| format!("index_bytes_{n}")));
    header.extend(["finished_ratio".to_string(), "claim_p99_ratio".to_string()]);
    w.write_record(&header)?;
    let first = minutes.first();
    for (m, x) in minutes.iter().enumerate() {
        let r = ratio(Some(x.finished_per_s), first.map(|f| f.finished_per_s));
        let p = ratio(
            x.p99_us.map(|v| v as f64),
            first.and_then(|f| f.p99_us).map(|v| v as f64),
        );
        let mut row = vec![
            (m + 1).to_string(),
            format!("{:.1}", x.enqueued_per_s),
            format!("{:.1}", x.finished_per_s),
            x.p50_us.map_or(String::new(), |v| v.to_string()),
            x.p99_us.map_or(String::new(), |v| v.to_string()),
            format!("{:.1}", x.empty_per_s),
            format!("{:.3}", x.lag_max_ms),
            x.snap.backlog.to_string(),
            x.purged.to_string(),
            x.snap.n_live_tup.to_string(),
            x.snap.n_dead_tup.to_string(),
            x.snap.autovacuums.to_string(),
            x.snap.autoanalyzes.to_string(),
            x.snap.checkpoints.to_string(),
            x.snap.table_bytes.to_string(),
            x.snap.total_bytes.to_string(),
        ];
        for name in &index_names {
            let bytes = x
                .snap
                .index_bytes
                .iter()
                .find(|i| i.0 == *name)
                .map_or(0, |i| i.1);
            row.push(bytes.to_string());
        }
        row.push(r.map_or(String::new(), |r| format!("{r:.4}")));
        row.push(p.map_or(String::new(), |p| format!("{p:.4}")));
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Args as given on the command line: nothing but `--quick` or not.
    fn args(quick: bool) -> Args {
        Args {
            quick,
            out: None,
            minutes: None,
            minute_seconds: None,
            rate: None,
            workers: None,
            producers: None,
            purge_every: None,
            retain: None,
            idle_ms: None,
            warm_up: None,
        }
    }

    #[test]
    fn defaults_and_quick_sizes() {
        let full = Plan::new(&args(false)).unwrap();
        assert_eq!((full.minutes, full.minute.as_secs()), (10, 60));
        assert_eq!(
            (full.rate, full.workers, full.producers),
            (DEFAULT_RATE, 8, 2)
        );
        assert!(full.default_rate);
        assert_eq!(full.purge_every, Some(Duration::from_secs(60)));
        let quick = Plan::new(&args(true)).unwrap();
        assert_eq!((quick.minutes, quick.minute.as_secs()), (3, 5));
        assert_eq!((quick.rate, quick.workers, quick.producers), (200.0, 4, 1));
        assert!(!quick.default_rate);
        assert_eq!(
            (quick.purge_every, quick.retain),
            (Some(Duration::from_secs(5)), 5)
        );
        let mut given = args(true);
        given.minutes = Some(2);
        given.purge_every = Some(0);
        let plan = Plan::new(&given).unwrap();
        assert_eq!((plan.minutes, plan.purge_every), (2, None));
    }

    #[test]
    fn sizes_the_run_cannot_use_are_refused() {
        for bad in [
            |a: &mut Args| a.minutes = Some(0),
            |a: &mut Args| a.minute_seconds = Some(0),
            |a: &mut Args| a.rate = Some(0.0),
            |a: &mut Args| a.rate = Some(f64::NAN),
            |a: &mut Args| a.workers = Some(0),
            |a: &mut Args| a.producers = Some(200),
        ] {
            let mut a = args(false);
            bad(&mut a);
            assert!(Plan::new(&a).is_err());
        }
    }

    #[test]
    fn within_ten_percent_both_ways() {
        assert_eq!(within(ratio(Some(110.0), Some(100.0))), "yes");
        assert_eq!(within(ratio(Some(90.0), Some(100.0))), "yes");
        assert_eq!(within(ratio(Some(111.0), Some(100.0))), "**no**");
        assert_eq!(within(ratio(Some(89.0), Some(100.0))), "**no**");
        assert_eq!(within(ratio(None, Some(100.0))), "-");
        assert_eq!(within(ratio(Some(1.0), Some(0.0))), "-");
    }
}
