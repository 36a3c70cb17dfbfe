//! `workfence-bench`: pg_workfence against the hand-written SQL baseline and
//! the peer queues, side by side on one throwaway PostgreSQL 15 cluster.
//!
//! `scripts/bench.sh [--quick]` builds and installs everything and runs this;
//! see docs/benchmarks.md for what the workloads are and what it printed.
//!
//! Usage: `workfence-bench [--quick] [--reps N] [--no-peers] [--workloads
//! 1,2,...] --out DIR`.
//! Writes `DIR/benchmarks.csv` (every repetition of every cell) and
//! `DIR/benchmarks.md` (medians, ratios to the baseline, the targets).

mod cell;
mod contender;
mod peers;
mod report;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use workfence_harness::Cluster;

use contender::{Contender, CONTENDERS, CYCLE_CONTENDERS, DEPTH_PRIORITY};
use report::Sample;

/// What can end a run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A statement failed.
    #[error("{0}")]
    Postgres(#[from] postgres::Error),
    /// The cluster could not be started or reached.
    #[error("{0}")]
    Cluster(#[from] workfence_harness::Error),
    /// Writing the report.
    #[error("{0}")]
    Csv(#[from] csv::Error),
    /// Writing the report.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A cell or runner misbehaved.
    #[error("{0}")]
    Bench(String),
}

/// The result type of the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How big a run is.
#[derive(Clone, Debug)]
struct Size {
    name: &'static str,
    reps: usize,
    /// Workload 1: connection counts, items per cell.
    conns: Vec<usize>,
    single_items: i64,
    /// Workload 2 (at `peer_conns`): items per cell.
    batch_items: i64,
    /// Workloads 3 to 5: connections, items per cell.
    small_conns: usize,
    depth_items: i64,
    /// Workload 3: the two depths; workload 4: finished rows retained.
    depth_small: i64,
    depth_large: i64,
    retained: i64,
    work_items: i64,
    /// Peers: jobs per run, at `peer_conns`.
    peer_jobs: i64,
    peer_conns: usize,
}

impl Size {
    fn default_size() -> Size {
        Size {
            name: "default",
            reps: 3,
            conns: vec![1, 4, 16, 64],
            single_items: 8_000,
            batch_items: 30_000,
            small_conns: 4,
            depth_items: 6_000,
            depth_small: 10_000,
            depth_large: 1_000_000,
            retained: 1_000_000,
            work_items: 3_000,
            peer_jobs: 8_000,
            peer_conns: 16,
        }
    }

    fn quick() -> Size {
        Size {
            name: "quick",
            reps: 1,
            conns: vec![1, 16],
            single_items: 400,
            batch_items: 2_000,
            small_conns: 4,
            depth_items: 300,
            depth_small: 1_000,
            depth_large: 20_000,
            retained: 20_000,
            work_items: 200,
            peer_jobs: 200,
            peer_conns: 16,
        }
    }
}

struct Args {
    size: Size,
    out: PathBuf,
    peers: bool,
    /// Workloads to run (1 to 5); all by default.
    workloads: Vec<u8>,
}

/// What `workfence-bench --help` prints.
const USAGE: &str =
    "usage: workfence-bench [--quick] [--reps N] [--no-peers] [--workloads 1,2,...] --out DIR
  Runs the benchmark's workloads against pg_workfence, the hand-written baseline SQL and the
  peers (awa, graphile-worker, pg-boss, procrastinate) on throwaway clusters, side by side,
  and writes DIR/benchmarks.csv and DIR/benchmarks.md (medians and ratios).
  --quick          tiny sizes, every contender and workload once (the test suite's smoke run)
  --reps N         repetitions of each cell (the median is reported)
  --no-peers       pg_workfence and the baseline only
  --workloads L    which workloads (1 to 5), comma-separated; all by default
  --out DIR        where the figures go (required)
scripts/bench.sh runs it with the README's settings.";

fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut size = Size::default_size();
    let mut out = None;
    let mut reps = None;
    let mut peers = true;
    let mut workloads = vec![1, 2, 3, 4, 5];
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => size = Size::quick(),
            "--no-peers" => peers = false,
            "--workloads" => {
                let v = it.next().unwrap_or_default();
                workloads = v
                    .split(',')
                    .map(|w| w.trim().parse().ok().filter(|w| (1..=5).contains(w)))
                    .collect::<Option<Vec<u8>>>()
                    .filter(|w| !w.is_empty())
                    .ok_or_else(|| {
                        Error::Bench(format!(
                            "--workloads wants numbers from 1 to 5, comma-separated, not {v:?}"
                        ))
                    })?;
            }
            "--out" => out = it.next().map(PathBuf::from),
            "--reps" => {
                let v = it.next().unwrap_or_default();
                reps = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    Error::Bench(format!("--reps wants a count of 1 or more, not {v:?}"))
                })?);
            }
            other => return Err(Error::Bench(format!("unknown argument {other:?}\n{USAGE}"))),
        }
    }
    if let Some(reps) = reps {
        size.reps = reps;
    }
    let out = out.ok_or_else(|| Error::Bench("--out DIR is required".into()))?;
    Ok(Some(Args {
        size,
        out,
        peers,
        workloads,
    }))
}

/// The repository root (this crate is `bench/` in it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}

/// A human-sized count: 10000 -> "10k", 1000000 -> "1M".
fn count(n: i64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

struct Run<'a> {
    cluster: &'a Cluster,
    size: Size,
    samples: Vec<Sample>,
    started: Instant,
}

impl Run<'_> {
    fn admin(&self, c: &Contender) -> Result<postgres::Client> {
        Ok(self.cluster.connect_to(c.database)?)
    }

    /// Run one cell `reps` times per contender, alternating contenders, each
    /// from a reset table with `items` fresh items.
    fn cell(&mut self, workload: u8, variant: &str, plan: cell::Plan) -> Result<()> {
        self.cell_of(&CONTENDERS, workload, variant, plan)
    }

    /// [`Run::cell`] over `contenders`, alternating them.
    fn cell_of<const N: usize>(
        &mut self,
        contenders: &[&'static Contender; N],
        workload: u8,
        variant: &str,
        plan: cell::Plan,
    ) -> Result<()> {
        for rep in 1..=self.size.reps {
            // ABBA: who goes first alternates between repetitions, so
            // neither always runs on a machine the other just warmed.
            let mut order = *contenders;
            if rep % 2 == 0 {
                order.reverse();
            }
            for &c in order.iter() {
                let mut admin = self.admin(c)?;
                c.reset(&mut admin)?;
                c.enqueue(&mut admin, plan.items as i32, contender::CELL_PRIORITY)?;
                c.analyze(&mut admin)?;
                drop(admin);
                let m = cell::run(self.cluster, c, plan)?;
                let sample = Sample {
                    workload,
                    variant: variant.to_owned(),
                    contender: c.name.to_owned(),
                    conns: plan.conns,
                    sync_commit: if plan.sync_commit { "on" } else { "off" },
                    batch: plan.batch,
                    rep,
                    items: m.items,
                    seconds: m.seconds,
                    items_per_s: m.items as f64 / m.seconds,
                    claim_p50_us: Some(m.claim_p50_us),
                    claim_p99_us: Some(m.claim_p99_us),
                    wal_bytes_per_item: m.wal_bytes as f64 / m.items as f64,
                };
                self.progress(&sample);
                self.samples.push(sample);
            }
        }
        Ok(())
    }

    fn progress(&self, s: &Sample) {
        eprintln!(
            "[{:>4} s] w{} {:<22} {:<16} conns={:<2} sync={:<3} batch={:<3} rep={} {:>8.0} items/s p50={:>6} µs p99={:>6} µs WAL={:>5.0} B/item",
            self.started.elapsed().as_secs(),
            s.workload,
            s.variant,
            s.contender,
            s.conns,
            s.sync_commit,
            s.batch,
            s.rep,
            s.items_per_s,
            s.claim_p50_us.map_or("-".into(), |v| v.to_string()),
            s.claim_p99_us.map_or("-".into(), |v| v.to_string()),
            s.wal_bytes_per_item
        );
    }

    /// Add a fixture to every contender's database.
    fn fixture(
        &self,
        what: &str,
        load: impl Fn(&Contender, &mut postgres::Client) -> Result<i64>,
    ) -> Result<()> {
        for &c in CONTENDERS.iter() {
            let t0 = Instant::now();
            let mut admin = self.admin(c)?;
            let n = load(c, &mut admin)?;
            c.analyze(&mut admin)?;
            eprintln!(
                "[{:>4} s] fixture {}: {what}: {n} rows in {:.1} s",
                self.started.elapsed().as_secs(),
                c.name,
                t0.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
}

fn plan(conns: usize, batch: i32, items: i64, sync_commit: bool) -> cell::Plan {
    cell::Plan {
        conns,
        batch,
        items,
        work: None,
        sync_commit,
    }
}

/// Both settings of `synchronous_commit` every cell runs with.
const SYNCS: [bool; 2] = [true, false];

/// Workloads 1, 2 and 5: no fixture.
fn measure_ours(run: &mut Run, runs: &dyn Fn(u8) -> bool) -> Result<()> {
    let size = run.size.clone();
    // 1. Claim -> finish, one item per claim.
    for &conns in size.conns.iter().filter(|_| runs(1)) {
        for sync in SYNCS {
            // With pg_workfence's fused cycle beside the two-statement one.
            run.cell_of(
                &CYCLE_CONTENDERS,
                1,
                "",
                plan(conns, 1, size.single_items, sync),
            )?;
        }
    }
    // 2. Batch claims, finished with one finish_many per batch.
    for batch in [10, 100].into_iter().filter(|_| runs(2)) {
        for sync in SYNCS {
            run.cell(2, "", plan(size.peer_conns, batch, size.batch_items, sync))?;
        }
    }
    // 5. 1 ms of work and one renew per item.
    for sync in SYNCS.into_iter().filter(|_| runs(5)) {
        let mut p = plan(size.small_conns, 1, size.work_items, sync);
        p.work = Some(Duration::from_millis(1));
        run.cell(5, "", p)?;
    }
    Ok(())
}

/// The variant names of workloads 3 and 4 for a run's size.
struct Names {
    small: String,
    large: String,
    retained: String,
    purged: String,
}

impl Names {
    fn new(size: &Size) -> Names {
        Names {
            small: format!("{} pending", count(size.depth_small)),
            large: format!("{} pending", count(size.depth_large)),
            retained: format!(
                "{} pending + {} finished",
                count(size.depth_small),
                count(size.retained)
            ),
            purged: format!("{} pending, after work_purge", count(size.depth_small)),
        }
    }
}

/// Workloads 3 and 4, in the order their fixtures build up: the small
/// depth; retained finished rows; after the purge; the large depth.
fn measure_depth(run: &mut Run, names: &Names) -> Result<()> {
    let size = run.size.clone();
    let depth_cells = |run: &mut Run, workload: u8, variant: &str| -> Result<()> {
        for sync in SYNCS {
            let p = plan(size.small_conns, 1, size.depth_items, sync);
            run.cell(workload, variant, p)?;
        }
        Ok(())
    };
    run.fixture(&names.small, |c, db| {
        c.enqueue(db, size.depth_small as i32, DEPTH_PRIORITY)
    })?;
    depth_cells(run, 3, &names.small)?;
    run.fixture(&format!("{} finished", count(size.retained)), |c, db| {
        c.retain(db, size.retained as i32)
    })?;
    depth_cells(run, 4, &names.retained)?;
    run.fixture("purge (work_purge for pg_workfence)", |c, db| c.purge(db))?;
    depth_cells(run, 4, &names.purged)?;
    run.fixture(&names.large, |c, db| {
        let more = size.depth_large - size.depth_small;
        c.enqueue(db, more as i32, DEPTH_PRIORITY)
    })?;
    depth_cells(run, 3, &names.large)
}

/// The peers, at `peer_conns`, through their own runners; returns a line
/// per peer on its version and settings. A peer in its batched
/// configuration is a row of workload 2 and runs as many jobs as
/// pg_workfence's batch cells; the others are rows of workload 1.
fn measure_peers(run: &mut Run, admin: &mut postgres::Client, root: &Path) -> Result<Vec<String>> {
    let size = run.size.clone();
    let mut notes = Vec::new();
    for peer in peers::PEERS.iter() {
        admin.batch_execute(&format!("CREATE DATABASE {}", peer.database))?;
        let workload = peer.workload();
        let jobs = if workload == 2 {
            size.batch_items
        } else {
            size.peer_jobs
        };
        let mut note = None;
        for rep in 1..=size.reps {
            for sync in SYNCS {
                let r = peer.run(
                    run.cluster,
                    root,
                    jobs,
                    size.peer_conns,
                    sync,
                    size.name == "quick",
                )?;
                let sample = Sample {
                    workload,
                    variant: String::new(),
                    contender: peer.name.to_owned(),
                    conns: size.peer_conns,
                    sync_commit: if sync { "on" } else { "off" },
                    batch: 0,
                    rep,
                    items: r.completed,
                    seconds: r.seconds,
                    items_per_s: r.completed as f64 / r.seconds,
                    claim_p50_us: None,
                    claim_p99_us: None,
                    wal_bytes_per_item: r.wal_bytes as f64 / r.completed as f64,
                };
                run.progress(&sample);
                run.samples.push(sample);
                note = Some(format!("- **{}** {}: {}", peer.name, r.version, r.config));
            }
        }
        notes.extend(note);
    }
    Ok(notes)
}

const BEGIN: &str = "<!-- figures:begin -->";
const END: &str = "<!-- figures:end -->";

/// Put `figures` between the markers of `path`, keeping the prose around
/// them; a file without markers is made anew with just the figures.
fn write_between_markers(path: &Path, figures: &str) -> Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{BEGIN}\n{figures}{}", &old[..b], &old[e..]),
        _ => format!("# pg_workfence benchmarks\n\n{BEGIN}\n{figures}{END}\n"),
    };
    Ok(std::fs::write(path, new)?)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("workfence-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let size = args.size.clone();
    let root = root();
    std::fs::create_dir_all(&args.out)?;
    let scratch = std::env::var_os("WORKFENCE_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cluster = Cluster::builder(scratch)
        .name("bench-cluster")
        .replace_existing(true)
        .setting("max_connections", "200")
        .setting("shared_buffers", "1GB")
        // No checkpoint inside a timed phase: WAL per item is the records a
        // cell writes, without the full-page images a checkpoint would add
        // at a random point.
        .setting("max_wal_size", "16GB")
        .setting("checkpoint_timeout", "1h")
        // Every cell starts with an explicit VACUUM of its own table; the
        // autovacuum daemon could otherwise work on one contender's table
        // during another's cell.
        .setting("autovacuum", "off")
        .start()?;
    let mut run = Run {
        cluster: &cluster,
        size: size.clone(),
        samples: Vec::new(),
        started: Instant::now(),
    };
    let mut admin = cluster.connect()?;
    for &c in CONTENDERS.iter() {
        admin.batch_execute(&format!("CREATE DATABASE {}", c.database))?;
        run.admin(c)?.batch_execute(c.install)?;
    }
    let server_version: String = admin.query_one("SHOW server_version", &[])?.get(0);

    let names = Names::new(&size);
    let runs = |w: u8| args.workloads.contains(&w);
    measure_ours(&mut run, &runs)?;
    if runs(3) || runs(4) {
        measure_depth(&mut run, &names)?;
    }
    let peer_notes = if args.peers {
        measure_peers(&mut run, &mut admin, &root)?
    } else {
        Vec::new()
    };

    let elapsed = run.started.elapsed();
    let csv = args.out.join("benchmarks.csv");
    report::write_csv(&csv, &run.samples)?;
    let cells = report::cells(&run.samples);
    let layout = report::Layout {
        conns: &size.conns,
        peer_conns: size.peer_conns,
        depth_conns: size.small_conns,
        depth: (&names.small, &names.large),
        retained: &names.retained,
    };
    let verdicts = report::verdicts(&cells, &layout);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- Written by scripts/bench.sh{} ({} size); edit bench/src/report.rs, not this file's figures. -->\n",
        if size.name == "quick" { " --quick" } else { "" },
        size.name
    );
    let _ = writeln!(
        md,
        "Run: {} size, {} repetitions per cell (medians shown), PostgreSQL {server_version}, \
         {} s in all. Raw figures: `benchmarks.csv`; plot: `benchmarks.png`.\n",
        size.name,
        size.reps,
        elapsed.as_secs()
    );
    md.push_str("## Targets\n\n");
    md.push_str(&report::verdict_table(&verdicts));
    md.push_str("\n## Peers\n\n");
    for n in &peer_notes {
        let _ = writeln!(md, "{n}");
    }
    md.push_str("\n## Figures\n\n");
    md.push_str(&report::tables(&cells));
    let md_path = args.out.join("benchmarks.md");
    write_between_markers(&md_path, &md)?;
    eprintln!(
        "workfence-bench: {} samples in {} s; wrote {} and {}",
        run.samples.len(),
        elapsed.as_secs(),
        csv.display(),
        md_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_written_short() {
        assert_eq!(count(10_000), "10k");
        assert_eq!(count(1_000_000), "1M");
        assert_eq!(count(1_500), "1500");
        assert_eq!(count(20_000), "20k");
    }

    #[test]
    fn figures_replace_only_what_is_between_the_markers() {
        let dir = std::env::temp_dir().join(format!("workfence-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.md");
        std::fs::write(&path, format!("prose\n{BEGIN}\nold\n{END}\ntail\n")).unwrap();
        write_between_markers(&path, "new\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("prose\n{BEGIN}\nnew\n{END}\ntail\n"));
        std::fs::remove_file(&path).unwrap();
        write_between_markers(&path, "fresh\n").unwrap();
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains(&format!("{BEGIN}\nfresh\n{END}")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
