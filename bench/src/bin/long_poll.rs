//! `workfence-long-poll`: the long poll with many workers, measured.
//!
//! Two experiments on one throwaway cluster (`scripts/bench.sh
//! --long-poll` runs it; `--quick` sizes are the smoke run of
//! `scripts/test.sh`):
//!
//! 1. **Herd.** N workers (1, 20, 150) each loop `work_claim(.., 1, wait)` then
//!    `work_finish`, while one connection enqueues items back to back (one
//!    autocommit enqueue each). Reported: items/s from the first enqueue to
//!    the last finish, and index scans of `workfence.items` per item (from
//!    `pg_stat_user_tables.idx_scan`), for the long poll (`wait => '3 s'`) and
//!    for polling (`wait => '0'`, 50 ms client sleep when empty) side by side.
//! 2. **Horizon.** Two workers claim and finish as fast as they can for a
//!    fixed time, once alone and once beside a connection that keeps a long
//!    poll waiting on an empty queue (each call waiting `wait`, called again
//!    at once; `workfence.long_poll_max` raised so that the whole wait is
//!    slept). Reported: claims/s per window of the run, and dead tuples
//!    left in `workfence.items` at the end (vacuum cannot remove rows that a
//!    waiting statement's snapshot may still see). Autovacuum runs as usual
//!    (naptime 1 s), so the figure is what a user would see.
//!
//! Figures are printed (and written to `--out FILE`, markdown). Numbers
//! from one run on a shared machine: compare within the run, not across.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use workfence_harness::calls::{self, prepared};
use workfence_harness::Cluster;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Args {
    quick: bool,
    out: Option<String>,
    /// `--only herd` or `--only horizon`: one of the two experiments.
    only: Option<String>,
    /// `--waits 1,10,60`: the horizon experiment's waits, in seconds.
    waits: Vec<u32>,
}

/// What `workfence-long-poll --help` prints.
const USAGE: &str =
    "usage: workfence-long-poll [--quick] [--only herd|horizon] [--waits 1,10,60] [--out FILE]
  Measures the long poll of work_claim(..., wait) on a throwaway cluster: the herd (N waiters
  on one queue, long poll against polling, side by side) and the horizon (what waiting
  sessions cost vacuum), and prints a markdown table (to FILE with --out).
  --quick        small sizes (the test suite's smoke run)
  --only X       one of the two experiments
  --waits L      the horizon experiment's waits, in seconds, comma-separated
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut args = Args {
        quick: false,
        out: None,
        only: None,
        waits: vec![1, 10, 60],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--out" => args.out = Some(it.next().ok_or("--out needs a file")?),
            "--only" => args.only = Some(it.next().ok_or("--only needs herd or horizon")?),
            "--waits" => {
                args.waits = it
                    .next()
                    .ok_or("--waits needs seconds, e.g. 1,10,60")?
                    .split(',')
                    .map(|w| w.trim().parse::<u32>())
                    .collect::<std::result::Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    Ok(Some(args))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("workfence-long-poll: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("long-poll-bench")
        .replace_existing(true)
        // WORKFENCE_KEEP: leave the cluster (and its log) for a post-mortem.
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("max_connections", "200")
        .setting("shared_buffers", "256MB")
        .setting("autovacuum_naptime", "1s")
        .start()?;
    let mut report = String::from(
        "# Long poll: many workers, and vacuum's horizon\n\n\
         Written by `workfence-long-poll` (`scripts/bench.sh`; see the top of \
         `bench/src/bin/long_poll.rs` for the method). One run on a shared machine: compare \
         rows within this file, not with other runs.\n\n## Long poll: herd\n\n",
    );
    report.push_str(
        "| waiters | mode | items | items/s | index scans per item |\n|---:|---|---:|---:|---:|\n",
    );
    let (items, waiter_counts): (usize, &[usize]) = if args.quick {
        (40, &[1, 5])
    } else {
        (500, &[1, 20, 150])
    };
    let herd_counts = if args.only.as_deref() == Some("horizon") {
        &[][..]
    } else {
        waiter_counts
    };
    for &n in herd_counts {
        for (mode, wait) in [("long poll 3 s", "3 seconds"), ("poll 50 ms", "0")] {
            let db = format!("herd_{n}_{}", if wait == "0" { "poll" } else { "wait" });
            cluster.create_database(&db)?;
            let (rate, scans) = herd(&cluster, &db, n, wait, items)?;
            let line = format!("| {n} | {mode} | {items} | {rate:.0} | {scans:.1} |\n");
            print!("long_poll herd: {line}");
            report.push_str(&line);
        }
    }
    report.push_str("\n## Long poll: horizon\n\n");
    report.push_str("| beside | claims/s per window | dead tuples at the end |\n|---|---|---:|\n");
    let (run_for, windows) = if args.quick {
        (Duration::from_secs(4), 2)
    } else {
        (Duration::from_secs(60), 6)
    };
    let mut configs: Vec<Option<u32>> = vec![None];
    if args.only.as_deref() == Some("herd") {
        configs.clear();
    } else if args.quick {
        configs.push(Some(10));
    } else {
        configs.extend(args.waits.iter().map(|w| Some(*w)));
    }
    for wait_s in configs {
        let label = wait_s.map_or("nothing".to_string(), |w| {
            format!("a long poll, wait {w} s")
        });
        let wait_text = wait_s.map(|w| format!("{w} seconds"));
        let wait = wait_text.as_deref();
        let db = format!(
            "horizon_{}",
            wait_s.map_or("none".to_string(), |w| w.to_string())
        );
        cluster.create_database(&db)?;
        let (rates, dead) = horizon(&cluster, &db, wait, run_for, windows)?;
        let rates: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        let line = format!("| {label} | {} | {dead} |\n", rates.join(", "));
        print!("long_poll horizon: {line}");
        report.push_str(&line);
    }
    if let Some(out) = args.out {
        std::fs::write(out, report)?;
    }
    Ok(())
}

fn idx_scans(c: &mut Client) -> Result<i64> {
    // The statistics of this backend's transactions reach the views when
    // they are flushed; ask for it and read a fresh snapshot of them.
    c.batch_execute("SELECT pg_catalog.pg_stat_clear_snapshot()")?;
    Ok(c.query_one(
        "SELECT coalesce(idx_scan, 0) FROM pg_catalog.pg_stat_user_tables \
          WHERE relid = 'workfence.items'::regclass",
        &[],
    )?
    .get(0))
}

/// `n` workers drain `items` items enqueued back to back; returns (items/s,
/// index scans per item).
fn herd(cluster: &Cluster, db: &str, n: usize, wait: &str, items: usize) -> Result<(f64, f64)> {
    let mut admin = cluster.connect_to(db)?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..n {
        let mut c = cluster.connect_to(db)?;
        let (done, stop) = (done.clone(), stop.clone());
        let wait = wait.to_string();
        workers.push(thread::spawn(move || -> Result<()> {
            let claim = c.prepare(
                "SELECT id, epoch FROM workfence.work_claim('q', $1, '1 minute', 1, $2::text::interval)",
            )?;
            let finish = c.prepare(prepared::FINISH)?;
            let owner = format!("w{w}");
            while !stop.load(Ordering::Relaxed) {
                let rows = c.query(&claim, &[&owner, &wait])?;
                if rows.is_empty() {
                    if wait == "0" {
                        thread::sleep(Duration::from_millis(50));
                    }
                    continue;
                }
                for r in rows {
                    let (id, epoch): (i64, i64) = (r.get(0), r.get(1));
                    c.query_one(&finish, &[&id, &owner, &epoch])?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
    }
    // The long polls are asleep before the clock starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    if wait != "0" {
        loop {
            let sleeping: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity \
                      WHERE datname = current_database() AND wait_event_type = 'Extension'",
                    &[],
                )?
                .get(0);
            if sleeping as usize >= n {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("only {sleeping} of {n} long polls asleep after 30 s").into());
            }
            admin.batch_execute("SELECT pg_catalog.pg_sleep(0.01)")?;
        }
    }
    let scans_before = idx_scans(&mut admin)?;
    let t0 = Instant::now();
    let enqueue = admin.prepare("SELECT workfence.work_enqueue('q')")?;
    for _ in 0..items {
        admin.query_one(&enqueue, &[])?;
    }
    while done.load(Ordering::Relaxed) < items as u64 {
        if t0.elapsed() > Duration::from_secs(600) {
            return Err("the herd did not drain the queue in 10 minutes".into());
        }
        thread::sleep(Duration::from_millis(1));
    }
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| "worker panicked")??;
    }
    // Backends flush their statistics when they exit: read once the
    // workers' backends are gone.
    while admin
        .query_one(
            "SELECT count(*) > 1 FROM pg_catalog.pg_stat_activity WHERE datname = current_database()",
            &[],
        )?
        .get::<_, bool>(0)
    {
        admin.batch_execute("SELECT pg_catalog.pg_sleep(0.01)")?;
    }
    let scans = idx_scans(&mut admin)? - scans_before;
    Ok((
        items as f64 / elapsed.as_secs_f64(),
        scans as f64 / items as f64,
    ))
}

/// Two workers churn for `run_for`, beside a long poll of `wait` (or
/// nothing); returns claims/s per window and the dead tuples at the end.
fn horizon(
    cluster: &Cluster,
    db: &str,
    wait: Option<&str>,
    run_for: Duration,
    windows: usize,
) -> Result<(Vec<f64>, i64)> {
    let mut admin = cluster.connect_to(db)?;
    admin.batch_execute(
        "SELECT workfence.work_enqueue('churn', key => 'k' || g) FROM generate_series(1, 200) g",
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let claims = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    if let Some(wait) = wait {
        let mut c = cluster.connect_to(db)?;
        let stop = stop.clone();
        let wait = wait.to_string();
        // The whole wait, not the default long_poll_max (10 s), to show
        // what a longer one costs.
        c.batch_execute("SET workfence.long_poll_max = 3600")?;
        threads.push(thread::spawn(move || -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                calls::claim(&mut c, "empty", "waiter", "1 minute", Some(1), Some(&wait))?;
            }
            Ok(())
        }));
    }
    for w in 0..2 {
        let mut c = cluster.connect_to(db)?;
        let (stop, claims) = (stop.clone(), claims.clone());
        threads.push(thread::spawn(move || -> Result<()> {
            let owner = format!("churn{w}");
            let claim = c.prepare(prepared::CLAIM_TOKENS)?;
            // Release, not finish: the item is claimable again at once, so
            // the table keeps 200 live rows and every claim leaves dead ones.
            let release = c.prepare(prepared::RELEASE)?;
            while !stop.load(Ordering::Relaxed) {
                for r in c.query(&claim, &[&"churn", &owner, &"1 minute", &1i32])? {
                    let (id, epoch): (i64, i64) = (r.get(0), r.get(1));
                    c.query_one(&release, &[&id, &owner, &epoch])?;
                    claims.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
    }
    let window = run_for / windows as u32;
    let mut rates = Vec::with_capacity(windows);
    let mut last = 0;
    for _ in 0..windows {
        thread::sleep(window);
        let now = claims.load(Ordering::Relaxed);
        rates.push((now - last) as f64 / window.as_secs_f64());
        last = now;
    }
    let dead: i64 = admin
        .query_one(
            "SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables \
              WHERE relid = 'workfence.items'::regclass",
            &[],
        )?
        .get(0);
    stop.store(true, Ordering::Relaxed);
    // The waiter returns at the end of its wait at the latest.
    for t in threads {
        t.join().map_err(|_| "thread panicked")??;
    }
    Ok((rates, dead))
}
