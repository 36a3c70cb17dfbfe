//! `workfence-pressure`: a queue at a fixed offered rate while something else in the database
//! holds vacuum's horizon back (issue 38), after the method of the independent cross-system
//! benchmark hardbyte/postgresql-job-queue-benchmarking (`docs/method.md`: its `idle-in-tx`
//! and `active-readers` phases between clean and recovery ones).
//!
//! One throwaway PostgreSQL cluster (`shared_buffers` 1 GB, fsync on, autovacuum on with every
//! setting at its default, as `workfence-sustained` has it). Each system runs on a fresh
//! database of that cluster, one after the other (pg_workfence, then the hand-written SQL
//! baseline of `bench/sql/`; each database is dropped after its run, and a `CHECKPOINT` comes
//! before the next), through the same five phases of `--phase-seconds` (90) each, after a
//! warm-up of `--warm-up` seconds (10) under the same load, not reported:
//!
//! 1. **clean**: the load alone;
//! 2. **idle in tx**: one more session runs `BEGIN; SELECT txid_current()` at the phase's start
//!    and stays idle in that transaction, holding its transaction id, until the phase's end
//!    (`ROLLBACK`): no row version deleted or updated after it began can be removed by vacuum;
//! 3. **recovery**: the load alone again;
//! 4. **readers**: `--readers` (4) sessions each run `BEGIN ISOLATION LEVEL REPEATABLE READ`
//!    and read the items table once (`SELECT count(*)`), then stay idle in that transaction
//!    until the phase's end (`COMMIT`): their snapshots hold the horizon as the transaction id
//!    did (hardbyte's readers scan again and again; one read is enough to hold the snapshot);
//! 5. **recovery**.
//!
//! The load is `workfence-sustained`'s (`workfence_bench::load`): `--producers` (2) enqueue
//! `--rate` (500) items/s together, one autocommit statement per item paced to a schedule
//! (`work_enqueue`; the baseline's plain `INSERT`); `--workers` (8) claim one item at a time
//! and finish it (`work_claim` and `work_finish` as `workfence_harness::calls::prepared` has
//! them; the baseline's claim and fenced finish), sleeping `--idle-ms` (50) after a claim that
//! found nothing; a purger deletes the finished items older than `--retain` seconds (10) every
//! `--purge-every` seconds (10; `work_purge`, the baseline's `DELETE`), an aggressive retention
//! so that the table's size is what bloat makes it, not history.
//!
//! Reported per phase and system: completions (finishes) per second and as a ratio of the
//! offered rate; end-to-end latency p50 and p99 (from just before an item's enqueue to the
//! return of its finish, client clocks: the enqueue carries its clock in the payload and the
//! claim returns it; over the items finished in the phase, the backlog of an earlier phase
//! included; with the queue empty, the workers' polling sleep is part of it); claim latency p50
//! and p99 (the claims that returned an item); at the phase's end the backlog (pending items),
//! `n_dead_tup`, the heap size of the items table and its indexes' together; WAL written per
//! completed item (`pg_current_wal_lsn()` at the phase's end minus at its start, over the
//! phase's completions; cluster-wide, and only this system's database is busy). Then each
//! phase against the same system's clean phase, the goal of issue 38 checked against the
//! figures (printed, never asserted), and the details (items enqueued per second, the
//! producers' lag, empty claims, items purged, autovacuums, the age of the oldest transaction
//! id or snapshot among the database's sessions, which shows the horizon held).
//!
//! Printed, and written to `--out FILE` (markdown). Numbers from one run on a shared machine:
//! compare rows within the run, not across runs.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};
use workfence_bench::value;

use postgres::Client;
use workfence_bench::load::{
    self, mb, plural, ratio, ratio_text, server, sleep_until, spawn, Clock, Monitor, Producer,
    Result, Server, Shared, Snapshot, Target, Worker, LEASE,
};
use workfence_harness::Cluster;

/// What `workfence-pressure --help` prints.
const USAGE: &str =
    "usage: workfence-pressure [--quick] [--phase-seconds S] [--rate R] [--workers N]
                          [--producers N] [--readers N] [--idle-ms MS] [--purge-every S]
                          [--retain S] [--warm-up S] [--no-baseline] [--out FILE]
  Runs a queue at a fixed offered rate through five phases on a throwaway PostgreSQL cluster
  (autovacuum at its defaults): clean, an idle-in-transaction session holding an xid, recovery,
  REPEATABLE READ readers holding snapshots, recovery; pg_workfence and then the hand-written
  SQL baseline, each on a fresh database. Prints per phase and system: completions/s and their
  ratio to the offered rate, end-to-end and claim latency p50/p99, backlog, dead tuples, heap
  and index size, WAL per item; then each phase against the clean one and issue 38's goal.
  A markdown table, to FILE with --out.
  --quick            the smoke run: phases of 4 s after 1 s of warm-up, 200 items/s,
                     4 workers, 1 producer, purges every 2 s of items older than 2 s
  --phase-seconds S  seconds per phase (default 90)
  --rate R           items enqueued per second, all producers together (default 500)
  --workers N        claiming connections (default 8)
  --producers N      enqueueing connections (default 2)
  --readers N        REPEATABLE READ sessions of the readers phase (default 4)
  --idle-ms MS       a worker's sleep after a claim that found nothing (default 50)
  --purge-every S    purge finished items every S seconds (default 10; 0: never)
  --retain S         purge the finished items older than S seconds (default 10)
  --warm-up S        seconds of the same load before the first phase, not reported (default 10)
  --no-baseline      pg_workfence alone
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

/// The default of `--rate`, items per second: issue 38's, about half of what this 2-core
/// machine sustained unpaced in `workfence-sustained` (so that the clean phase keeps up).
const DEFAULT_RATE: f64 = 500.0;

/// The queue every producer and worker uses.
const QUEUE: &str = "pressure";

/// What happens beside the load in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing.
    Clean,
    /// One session idle in a transaction that holds a transaction id.
    IdleInTx,
    /// Nothing, after a phase that held the horizon.
    Recovery,
    /// Sessions idle in REPEATABLE READ transactions that read the table once.
    Readers,
}

/// The phases, in order.
const PHASES: [Phase; 5] = [
    Phase::Clean,
    Phase::IdleInTx,
    Phase::Recovery,
    Phase::Readers,
    Phase::Recovery,
];

impl Phase {
    /// The phase's name in the report.
    fn name(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::IdleInTx => "idle in tx",
            Phase::Recovery => "recovery",
            Phase::Readers => "readers",
        }
    }
}

/// Phase `p` (from 0) as the report's rows name it: its number and name.
fn label(p: usize) -> String {
    format!("{} {}", p + 1, PHASES[p].name())
}

/// The command line, as given.
#[derive(Default)]
struct Args {
    /// `--quick`: the smoke run's sizes, where not given explicitly.
    quick: bool,
    /// `--out FILE`.
    out: Option<PathBuf>,
    /// `--phase-seconds`.
    phase_seconds: Option<u64>,
    /// `--rate`.
    rate: Option<f64>,
    /// `--workers`.
    workers: Option<usize>,
    /// `--producers`.
    producers: Option<usize>,
    /// `--readers`.
    readers: Option<usize>,
    /// `--idle-ms`.
    idle_ms: Option<u64>,
    /// `--purge-every`.
    purge_every: Option<u64>,
    /// `--retain`.
    retain: Option<u64>,
    /// `--warm-up`.
    warm_up: Option<u64>,
    /// `--no-baseline`.
    no_baseline: bool,
}

/// The run's sizes: the command line with the defaults filled in.
#[derive(Clone, Debug)]
struct Plan {
    /// The smoke run's sizes were the defaults.
    quick: bool,
    /// Length of one phase.
    phase: Duration,
    /// Offered items per second, all producers together.
    rate: f64,
    /// Claiming connections.
    workers: usize,
    /// Enqueueing connections.
    producers: usize,
    /// Sessions of the readers phase.
    readers: usize,
    /// A worker's sleep after an empty claim.
    idle: Duration,
    /// Time between purges; `None`: no purge.
    purge_every: Option<Duration>,
    /// Age of the finished items a purge deletes.
    retain: Duration,
    /// Load before the first phase, not reported.
    warm_up: Duration,
    /// The baseline runs too.
    baseline: bool,
}

/// The command line, or `None` after `--help` printed the usage.
fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--out" => args.out = Some(it.next().ok_or("--out needs a file")?.into()),
            "--phase-seconds" => args.phase_seconds = Some(value(&arg, &mut it)?),
            "--rate" => args.rate = Some(value(&arg, &mut it)?),
            "--workers" => args.workers = Some(value(&arg, &mut it)?),
            "--producers" => args.producers = Some(value(&arg, &mut it)?),
            "--readers" => args.readers = Some(value(&arg, &mut it)?),
            "--idle-ms" => args.idle_ms = Some(value(&arg, &mut it)?),
            "--purge-every" => args.purge_every = Some(value(&arg, &mut it)?),
            "--retain" => args.retain = Some(value(&arg, &mut it)?),
            "--warm-up" => args.warm_up = Some(value(&arg, &mut it)?),
            "--no-baseline" => args.no_baseline = true,
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    Ok(Some(args))
}

impl Plan {
    /// The defaults (of a full run, or of `--quick`) under what `args` gave; refuses sizes the
    /// run cannot use.
    fn new(args: &Args) -> Result<Plan> {
        let q = args.quick;
        let phase_seconds = args.phase_seconds.unwrap_or(if q { 4 } else { 90 });
        let rate = args.rate.unwrap_or(if q { 200.0 } else { DEFAULT_RATE });
        let workers = args.workers.unwrap_or(if q { 4 } else { 8 });
        let producers = args.producers.unwrap_or(if q { 1 } else { 2 });
        let readers = args.readers.unwrap_or(4);
        let purge_every = args.purge_every.unwrap_or(if q { 2 } else { 10 });
        let retain = args.retain.unwrap_or(if q { 2 } else { 10 });
        let warm_up = args.warm_up.unwrap_or(if q { 1 } else { 10 });
        if phase_seconds == 0 || phase_seconds > 3600 {
            return Err("--phase-seconds must be 1 to 3600".into());
        }
        if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
            return Err("--rate must be above 0 and at most 1000000".into());
        }
        if workers == 0 || producers == 0 || readers == 0 || workers + producers + readers > 180 {
            return Err(
                "--workers, --producers and --readers must be at least 1, at most 180 together"
                    .into(),
            );
        }
        if retain > 3650 * 86_400 || warm_up > 3600 {
            return Err("--retain must be at most 3650 days, --warm-up at most 3600 s".into());
        }
        Ok(Plan {
            quick: q,
            phase: Duration::from_secs(phase_seconds),
            rate,
            workers,
            producers,
            readers,
            idle: Duration::from_millis(args.idle_ms.unwrap_or(50)),
            purge_every: (purge_every > 0).then(|| Duration::from_secs(purge_every)),
            retain: Duration::from_secs(retain),
            warm_up: Duration::from_secs(warm_up),
            baseline: !args.no_baseline,
        })
    }
}

/// Runs the bench; on failure says why and exits 1.
fn main() {
    if let Err(e) = run() {
        eprintln!(
            "workfence-pressure: {}",
            workfence_harness::cli::error_chain(e.as_ref())
        );
        std::process::exit(1);
    }
}

/// The sessions that hold the horizon back, opened before the start so that a phase's
/// beginning costs no connection.
struct Pressure {
    /// The idle-in-transaction session.
    idle: Client,
    /// The REPEATABLE READ readers.
    readers: Vec<Client>,
    /// The items table the readers read.
    table: &'static str,
    /// The phase whose sessions are open now.
    held: Phase,
}

impl Pressure {
    /// Connects the sessions to the target's database.
    fn open(cluster: &Cluster, target: &Target, readers: usize) -> Result<Pressure> {
        Ok(Pressure {
            idle: cluster.connect_to(&target.database)?,
            readers: (0..readers)
                .map(|_| cluster.connect_to(&target.database))
                .collect::<std::result::Result<_, _>>()?,
            table: target.table,
            held: Phase::Clean,
        })
    }

    /// Opens what `phase` holds; says what it did, for the progress line.
    fn begin(&mut self, phase: Phase) -> Result<String> {
        self.end()?;
        let said = match phase {
            Phase::Clean | Phase::Recovery => String::new(),
            Phase::IdleInTx => {
                self.idle.batch_execute("BEGIN")?;
                let xid: i64 = self
                    .idle
                    .query_one("SELECT pg_catalog.txid_current()", &[])?
                    .get(0);
                format!("a session holds xid {xid}, idle in its transaction")
            }
            Phase::Readers => {
                let read = format!("SELECT pg_catalog.count(*) FROM {}", self.table);
                let mut rows = Vec::new();
                for r in &mut self.readers {
                    r.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")?;
                    rows.push(r.query_one(&read, &[])?.get::<_, i64>(0));
                }
                format!(
                    "{} in REPEATABLE READ read {rows:?} rows, idle in their transactions",
                    plural(self.readers.len(), "session")
                )
            }
        };
        self.held = phase;
        Ok(said)
    }

    /// Ends what the current phase holds.
    fn end(&mut self) -> Result<()> {
        match self.held {
            Phase::Clean | Phase::Recovery => {}
            Phase::IdleInTx => self.idle.batch_execute("ROLLBACK")?,
            Phase::Readers => {
                for r in &mut self.readers {
                    r.batch_execute("COMMIT")?;
                }
            }
        }
        self.held = Phase::Clean;
        Ok(())
    }
}

/// One phase of one system: what the threads counted and the table at its end.
struct Figures {
    /// The system's name.
    system: &'static str,
    /// Items enqueued per second.
    enqueued_per_s: f64,
    /// Items finished per second.
    finished_per_s: f64,
    /// End-to-end latency p50 and p99, µs (`None`: nothing finished).
    e2e_us: Option<(u64, u64)>,
    /// Claim latency p50 and p99, µs (`None`: no claim returned an item).
    claim_us: Option<(u64, u64)>,
    /// Claims that found nothing, per second.
    empty_per_s: f64,
    /// The producers' largest lag behind schedule, ms.
    lag_max_ms: f64,
    /// Items purged.
    purged: i64,
    /// WAL bytes per finished item (`None`: nothing finished).
    wal_per_item: Option<f64>,
    /// Autovacuums of the table that ended during the phase.
    autovacuums: i64,
    /// The table at the phase's end.
    snap: Snapshot,
}

/// p50 and p99 of `h`, or `None` when it is empty.
fn quantiles(h: &hdrhistogram::Histogram<u64>) -> Option<(u64, u64)> {
    (!h.is_empty()).then(|| (h.value_at_quantile(0.5), h.value_at_quantile(0.99)))
}

/// Runs the phases against `target` on a fresh database; its figures, one per phase.
fn run_target(cluster: &Cluster, target: Target, plan: &Plan) -> Result<Vec<Figures>> {
    target.create(cluster)?;
    // Every system starts right after a checkpoint (full-page images weigh alike).
    cluster.connect()?.batch_execute("CHECKPOINT")?;
    let mut monitor = Monitor::open(cluster, &target, QUEUE)?;
    // Every connection is open, its statements prepared, before the start.
    let workers = (0..plan.workers)
        .map(|w| Worker::open(cluster, &target, QUEUE, w))
        .collect::<Result<Vec<_>>>()?;
    let producers = (0..plan.producers)
        .map(|_| Producer::open(cluster, &target))
        .collect::<Result<Vec<_>>>()?;
    let purger = cluster.connect_to(&target.database)?;
    let mut pressure = Pressure::open(cluster, &target, plan.readers)?;
    // Time for the threads to start.
    let start = Instant::now() + Duration::from_millis(200);
    let clock = Clock {
        start,
        t0: start + plan.warm_up,
        period: plan.phase,
        periods: PHASES.len(),
    };
    let shared = Shared::new(clock);
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
    let system = target.name;
    if let Some(every) = plan.purge_every {
        let retain = plan.retain;
        let purge_target = target.clone();
        threads.push(spawn(&shared, move |s| {
            load::purge(purger, &purge_target, QUEUE, every, retain, s)
        }));
    } else {
        drop(purger);
    }

    // The phases: the table at t0 (the WAL position and counters each phase is measured
    // from), then at each phase's end, when the next phase's sessions begin.
    let watched = (|| {
        sleep_until(clock.t0);
        let first = monitor.snapshot()?;
        pressure.begin(PHASES[0])?;
        let secs = plan.phase.as_secs_f64();
        let mut finished = shared.live.finished.load(Ordering::Relaxed);
        let snaps = load::watch(&mut monitor, &shared, |p, snap| {
            let f = shared.live.finished.load(Ordering::Relaxed);
            println!(
                "pressure: {system}, phase {}: about {:.0} finished/s, backlog {}, heap {:.1} MB, \
                 indexes {:.1} MB, {} dead tuples, oldest xid or xmin {} transactions old",
                label(p),
                (f - finished) as f64 / secs,
                snap.backlog,
                mb(snap.table_bytes),
                mb(snap.index_total()),
                snap.n_dead_tup,
                snap.horizon_age,
            );
            finished = f;
            if let Some(next) = PHASES.get(p + 1) {
                let said = pressure.begin(*next)?;
                if !said.is_empty() {
                    println!("pressure: {system}, phase {}: {said}", label(p + 1));
                }
            } else {
                pressure.end()?;
            }
            Ok(())
        })?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((first, snaps))
    })();
    shared.stop();
    let tally = load::join(threads, PHASES.len())?;
    let (first, snaps) = watched?;
    drop(pressure);
    drop(monitor);
    if snaps.len() < PHASES.len() {
        return Err(format!("{system}: the run stopped after {} phases", snaps.len()).into());
    }

    // No autovacuum of this database's leftovers during the next system's run.
    target.drop_database(cluster)?;

    let secs = plan.phase.as_secs_f64();
    let mut before = &first;
    let mut figures = Vec::new();
    for (p, snap) in snaps.iter().enumerate() {
        let finished = tally.finished[p];
        figures.push(Figures {
            system,
            enqueued_per_s: tally.enqueued[p] as f64 / secs,
            finished_per_s: finished as f64 / secs,
            e2e_us: quantiles(&tally.e2e_us[p]),
            claim_us: quantiles(&tally.claim_us[p]),
            empty_per_s: tally.empty[p] as f64 / secs,
            lag_max_ms: tally.lag_max_us[p] as f64 / 1000.0,
            purged: tally.purged[p],
            wal_per_item: (finished > 0)
                .then(|| (snap.wal_bytes - before.wal_bytes) as f64 / finished as f64),
            autovacuums: snap.autovacuums - before.autovacuums,
            snap: snap.clone(),
        });
        before = snap;
    }
    Ok(figures)
}

/// Runs the bench and writes its report.
fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let plan = Plan::new(&args)?;
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("pressure-bench")
        .replace_existing(true)
        // WORKFENCE_KEEP: leave the cluster (and its log) for a post-mortem.
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("max_connections", "200")
        .setting("shared_buffers", "1GB")
        // Nothing else: autovacuum and checkpoints as a user has them.
        .start()?;
    let server = server(&mut cluster.connect()?)?;
    println!(
        "pressure: phases of {} s after {} s of warm-up, {} items/s offered, {}, {}{}",
        plan.phase.as_secs(),
        plan.warm_up.as_secs(),
        plan.rate,
        plural(plan.workers, "worker"),
        plural(plan.producers, "producer"),
        if plan.quick { " (--quick)" } else { "" }
    );
    let mut targets = vec![Target::workfence("pressure_workfence", true)?];
    if plan.baseline {
        targets.push(Target::baseline("pressure_baseline")?);
    }
    let mut systems = Vec::new();
    for target in targets {
        systems.push(run_target(&cluster, target, &plan)?);
    }
    let report = report(&plan, &server, &systems);
    print!("{report}");
    if let Some(out) = &args.out {
        std::fs::write(out, &report).map_err(|e| format!("writing {}: {e}", out.display()))?;
        println!("pressure: wrote {}", out.display());
    }
    Ok(())
}

/// Microseconds as milliseconds with `decimals` decimals.
fn ms(us: u64, decimals: usize) -> String {
    format!("{:.decimals$}", us as f64 / 1000.0)
}

/// A p50/p99 pair in ms, as two cells.
fn pair(q: Option<(u64, u64)>, decimals: usize) -> String {
    q.map_or("- | -".to_string(), |(p50, p99)| {
        format!("{} | {}", ms(p50, decimals), ms(p99, decimals))
    })
}

/// `value` beside whether it meets its goal.
fn verdict(value: String, met: Option<bool>) -> String {
    match met {
        Some(true) => format!("{value} (yes)"),
        Some(false) => format!("{value} (**no**)"),
        None => format!("{value} (-)"),
    }
}

/// The largest of the values known, if any.
fn max_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    values.into_iter().flatten().reduce(f64::max)
}

/// The smallest of the values known, if any.
fn min_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    values.into_iter().flatten().reduce(f64::min)
}

/// The indexes of the phases of `kind`.
fn phases_of(kind: &[Phase]) -> Vec<usize> {
    (0..PHASES.len())
        .filter(|p| kind.contains(&PHASES[*p]))
        .collect()
}

/// The markdown report: `systems` holds each system's figures, one per phase.
fn report(plan: &Plan, server: &Server, systems: &[Vec<Figures>]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "# Pressure: a long transaction and REPEATABLE READ readers beside a queue at {:.0} items/s\n\n\
         Written by `workfence-pressure` (`scripts/bench.sh`; see the top of \
         `bench/src/bin/pressure.rs` for the method). One run on a shared machine: compare rows \
         within this file, not with other runs.\n\n",
        plan.rate
    );
    let purge = match plan.purge_every {
        Some(every) => format!(
            "every {} s a purge deleted the finished items older than {} s (`work_purge`; the \
             baseline's `DELETE`)",
            every.as_secs(),
            plan.retain.as_secs()
        ),
        None => "finished items were never purged (`--purge-every 0`)".to_string(),
    };
    let _ = write!(
        s,
        "Run: each system on a fresh database of one cluster, one after the other, through five \
         phases of {} s{} (clean; idle in tx: one session `BEGIN; SELECT txid_current()` then idle; \
         recovery; readers: {} in `REPEATABLE READ` that read the table once then idle; \
         recovery) after {} s of the same load not reported. Offered {:.0} items/s by {}, one \
         autocommit enqueue per item paced to a schedule; {}, each claiming one item at a time \
         (lease '{LEASE}') and finishing it, sleeping {} ms after a claim that found nothing; \
         {purge}.\n\n",
        plan.phase.as_secs(),
        if plan.quick {
            " (`--quick`: the smoke run, too short for the figures to mean much)"
        } else {
            ""
        },
        plural(plan.readers, "session"),
        plan.warm_up.as_secs(),
        plan.rate,
        plural(plan.producers, "producer connection"),
        plural(plan.workers, "worker connection"),
        plan.idle.as_millis(),
    );
    let non_default: Vec<&str> = server
        .autovacuum
        .iter()
        .filter(|a| !a.2)
        .map(|a| a.0.as_str())
        .collect();
    let _ = write!(
        s,
        "Server: {}, `shared_buffers` {}, fsync on, autovacuum on with {}; {} cores, shared by \
         the server, this driver and whatever else ran on the machine.\n\n",
        server.version,
        server.shared_buffers,
        if non_default.is_empty() {
            "every autovacuum setting at its default".to_string()
        } else {
            format!("these settings changed: {}", non_default.join(", "))
        },
        thread::available_parallelism().map_or(0, |n| n.get()),
    );

    s.push_str(
        "## Per phase\n\n\
         Completions: finishes per second, and their ratio to the offered rate. End to end: from \
         just before an item's enqueue to the return of its finish (client clocks), over the \
         items finished in the phase. Claim: the claims that returned an item. Backlog (pending \
         items), dead tuples (`n_dead_tup`), heap (`pg_relation_size`) and indexes (together): \
         at the phase's end. WAL per item: bytes of WAL the phase wrote over its completions.\n\n\
         | phase | system | completions/s | × offered | e2e p50 ms | e2e p99 ms | claim p50 ms \
         | claim p99 ms | backlog | dead tuples | heap MB | indexes MB | WAL/item B |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in 0..PHASES.len() {
        for f in systems.iter().filter_map(|sys| sys.get(p)) {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.2} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
                label(p),
                f.system,
                f.finished_per_s,
                f.finished_per_s / plan.rate,
                pair(f.e2e_us, 1),
                pair(f.claim_us, 2),
                f.snap.backlog,
                f.snap.n_dead_tup,
                mb(f.snap.table_bytes),
                mb(f.snap.index_total()),
                f.wal_per_item
                    .map_or("-".to_string(), |w| format!("{w:.0}")),
            );
        }
    }

    s.push_str(
        "\n## Against the clean phase\n\n\
         Each phase's figures as a ratio to the same system's clean phase (phase 1).\n\n\
         | phase | system | completions | claim p99 | e2e p99 | heap | indexes |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    let p99 = |q: Option<(u64, u64)>| q.map(|(_, p99)| p99 as f64);
    for p in 0..PHASES.len() {
        for sys in systems {
            let (Some(clean), Some(f)) = (sys.first(), sys.get(p)) else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                label(p),
                f.system,
                ratio_text(ratio(Some(f.finished_per_s), Some(clean.finished_per_s))),
                ratio_text(ratio(p99(f.claim_us), p99(clean.claim_us))),
                ratio_text(ratio(p99(f.e2e_us), p99(clean.e2e_us))),
                ratio_text(ratio(
                    Some(f.snap.table_bytes as f64),
                    Some(clean.snap.table_bytes as f64)
                )),
                ratio_text(ratio(
                    Some(f.snap.index_total() as f64),
                    Some(clean.snap.index_total() as f64)
                )),
            );
        }
    }

    let pressure = phases_of(&[Phase::IdleInTx, Phase::Readers]);
    let recovery = phases_of(&[Phase::Recovery]);
    // A second of the offered load: a backlog within it of the clean phase's is "back".
    let slack = plan.rate.ceil() as i64;
    s.push_str(&format!(
        "\n## Issue 38's goal\n\n\
         Printed, not asserted. Under pressure: the worse of the idle-in-tx and readers phases \
         (completions as a ratio of the offered rate, claim p99 as a ratio of the clean \
         phase's). After: the worse of the two recovery phases, over the whole phase (the goal \
         asks it of the 30 s after; with phases of {} s the p99 includes the first seconds \
         after the pressure ended, the backlog has had the whole phase to drain); the backlog \
         is back when it is within {slack} items (a second of load) of the clean phase's end. \
         Sizes after: the heap and the indexes at the end of the last recovery as a ratio of \
         the clean phase's end.\n\n\
         | system | completions ≥ 0.8× offered | claim p99 ≤ 3× clean | after: claim p99 ≤ 1.2× \
         clean | after: backlog back | after: heap ≤ 1.5× | after: indexes ≤ 1.5× |\n\
         |---|---|---|---|---|---|---|\n",
        plan.phase.as_secs()
    ));
    for sys in systems {
        let (Some(clean), Some(last)) = (sys.first(), sys.last()) else {
            continue;
        };
        let clean_p99 = p99(clean.claim_us);
        let done = min_of(
            pressure
                .iter()
                .map(|p| Some(sys[*p].finished_per_s / plan.rate)),
        );
        let under = max_of(
            pressure
                .iter()
                .map(|p| ratio(p99(sys[*p].claim_us), clean_p99)),
        );
        let after = max_of(
            recovery
                .iter()
                .map(|p| ratio(p99(sys[*p].claim_us), clean_p99)),
        );
        let backlog = recovery.iter().map(|p| sys[*p].snap.backlog).max();
        let heap = ratio(
            Some(last.snap.table_bytes as f64),
            Some(clean.snap.table_bytes as f64),
        );
        let indexes = ratio(
            Some(last.snap.index_total() as f64),
            Some(clean.snap.index_total() as f64),
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            last.system,
            verdict(ratio_text(done), done.map(|r| r >= 0.8)),
            verdict(ratio_text(under), under.map(|r| r <= 3.0)),
            verdict(ratio_text(after), after.map(|r| r <= 1.2)),
            verdict(
                format!(
                    "{}, clean {}",
                    backlog.map_or("-".to_string(), |b| b.to_string()),
                    clean.snap.backlog
                ),
                backlog.map(|b| b <= clean.snap.backlog + slack)
            ),
            verdict(ratio_text(heap), heap.map(|r| r <= 1.5)),
            verdict(ratio_text(indexes), indexes.map(|r| r <= 1.5)),
        );
    }

    s.push_str(
        "\n## Details\n\n\
         Producer lag: the largest delay of an enqueue's return behind its due time. \
         Autovacuums: of the items table, ended during the phase. Horizon age: at the phase's \
         end, the age in transactions of the oldest transaction id or snapshot `xmin` among the \
         database's sessions (`pg_stat_activity`): large while a session holds vacuum's horizon \
         back.\n\n\
         | phase | system | enqueued/s | producer lag max ms | empty claims/s | purged | live \
         tuples | autovacuums | horizon age |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in 0..PHASES.len() {
        for f in systems.iter().filter_map(|sys| sys.get(p)) {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.1} | {:.0} | {} | {} | {} | {} |",
                label(p),
                f.system,
                f.enqueued_per_s,
                f.lag_max_ms,
                f.empty_per_s,
                f.purged,
                f.snap.n_live_tup,
                f.autovacuums,
                f.snap.horizon_age,
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_quick_sizes() {
        let full = Plan::new(&Args::default()).unwrap();
        assert_eq!(full.phase.as_secs(), 90);
        assert_eq!(
            (full.rate, full.workers, full.producers, full.readers),
            (DEFAULT_RATE, 8, 2, 4)
        );
        assert_eq!(full.purge_every, Some(Duration::from_secs(10)));
        assert!(full.baseline);
        let quick = Plan::new(&Args {
            quick: true,
            ..Args::default()
        })
        .unwrap();
        assert_eq!((quick.phase.as_secs(), quick.warm_up.as_secs()), (4, 1));
        assert_eq!((quick.rate, quick.workers, quick.producers), (200.0, 4, 1));
        let plan = Plan::new(&Args {
            quick: true,
            phase_seconds: Some(20),
            purge_every: Some(0),
            no_baseline: true,
            ..Args::default()
        })
        .unwrap();
        assert_eq!(
            (plan.phase.as_secs(), plan.purge_every, plan.baseline),
            (20, None, false)
        );
    }

    #[test]
    fn sizes_the_run_cannot_use_are_refused() {
        for bad in [
            |a: &mut Args| a.phase_seconds = Some(0),
            |a: &mut Args| a.rate = Some(0.0),
            |a: &mut Args| a.rate = Some(f64::NAN),
            |a: &mut Args| a.workers = Some(0),
            |a: &mut Args| a.readers = Some(0),
            |a: &mut Args| a.producers = Some(200),
        ] {
            let mut a = Args::default();
            bad(&mut a);
            assert!(Plan::new(&a).is_err());
        }
    }

    #[test]
    fn the_phases_go_clean_idle_recovery_readers_recovery() {
        let names: Vec<String> = (0..PHASES.len()).map(label).collect();
        assert_eq!(
            names,
            [
                "1 clean",
                "2 idle in tx",
                "3 recovery",
                "4 readers",
                "5 recovery"
            ]
        );
        assert_eq!(phases_of(&[Phase::Recovery]), [2, 4]);
        assert_eq!(max_of([Some(1.0), None, Some(3.0)]), Some(3.0));
        assert_eq!(min_of([None::<f64>]), None);
    }
}
