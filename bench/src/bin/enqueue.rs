//! `workfence-enqueue`: what enqueueing costs, against a plain `INSERT` of the same rows.
//!
//! Two experiments on one throwaway cluster (`scripts/bench.sh` runs it; `--quick` sizes are the
//! smoke run of `scripts/test.sh`), each contender's rounds alternating with the others' in one
//! run, so that the machine's noise falls on all of them alike:
//!
//! 1. **Bulk.** `--rows` rows per round in statements of `--batch` rows, each statement
//!    autocommitted, keys and payloads sent as arrays: a plain `INSERT ... SELECT FROM unnest`
//!    into a copy of `workfence.items` (`CREATE TABLE ... (LIKE workfence.items INCLUDING ALL)`:
//!    the same columns, defaults, constraints and indexes, no trigger), `work_enqueue_many`, and
//!    `work_enqueue` once per row of the same arrays (`LATERAL`, the only way before 0.12.0);
//!    then the same without keys: the plain insert generating `gen_random_uuid()` keys, and
//!    `work_enqueue_many` with `keys` NULL (UUIDv7s generated, no `ON CONFLICT`).
//! 2. **Single rows.** 8 connections (`--connections`) each insert one row per autocommitted
//!    statement for `--seconds`: a plain `INSERT` into the copy, `work_enqueue` with the
//!    server's defaults, and `work_enqueue` with `workfence.notify_enqueued` on and off (set in
//!    the session).
//!
//! Reported per contender: the median rows/s over the rounds and the ratio of each round to
//! the plain insert's round beside it (median, min-max). Printed, and written to `--out FILE`
//! (markdown). One run on a shared machine: compare rows within the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::{json, Value};
use workfence_bench::median;
use workfence_harness::Cluster;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What `workfence-enqueue --help` prints.
const USAGE: &str = "usage: workfence-enqueue [--quick] [--rounds N] [--rows N] [--batch N] [--connections N] [--seconds S] [--out FILE]
  Measures enqueueing on a throwaway cluster against a plain INSERT of the same rows into a copy
  of workfence.items: in bulk (work_enqueue_many, work_enqueue per row) and one row per
  statement from several connections (work_enqueue with the defaults, with NOTIFY on and off),
  rounds alternating, and prints a markdown table (to FILE with --out).
  --quick          small sizes (the test suite's smoke run)
  --rounds N       rounds per contender (default 5; --quick 2)
  --rows N         rows per bulk round (default 100000; --quick 4000)
  --batch N        rows per bulk statement (default 1000)
  --connections N  connections of the single-row experiment (default 8)
  --seconds S      seconds per single-row round (default 5; --quick 1)
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

struct Args {
    rounds: usize,
    rows: usize,
    batch: usize,
    connections: usize,
    seconds: f64,
    out: Option<String>,
}

fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut args = Args {
        rounds: 5,
        rows: 100_000,
        batch: 1000,
        connections: 8,
        seconds: 5.0,
        out: None,
    };
    let mut quick = false;
    let (mut rounds, mut rows, mut seconds) = (None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--quick" => quick = true,
            "--rounds" => rounds = Some(value("a count")?.parse()?),
            "--rows" => rows = Some(value("a count")?.parse()?),
            "--batch" => args.batch = value("a count")?.parse()?,
            "--connections" => args.connections = value("a count")?.parse()?,
            "--seconds" => seconds = Some(value("seconds")?.parse()?),
            "--out" => args.out = Some(value("a file")?),
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if quick {
        (args.rounds, args.rows, args.seconds) = (2, 4000, 1.0);
    }
    args.rounds = rounds.unwrap_or(args.rounds).max(1);
    args.rows = rows.unwrap_or(args.rows).max(1);
    args.seconds = seconds.unwrap_or(args.seconds);
    if args.batch == 0 || args.batch > 10_000 {
        return Err("--batch must be 1 to 10000 (work_enqueue_many's cap)".into());
    }
    Ok(Some(args))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("workfence-enqueue: {e:?}");
        std::process::exit(1);
    }
}

/// A contender's figure per round, and its ratio to the baseline's round beside it.
#[derive(Default)]
struct Figures {
    rates: Vec<f64>,
    ratios: Vec<f64>,
}

fn row(name: &str, f: &Figures) -> String {
    let lo = f.ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = f.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "| {name} | {:.0} | {:.2} | {lo:.2}-{hi:.2} |\n",
        median(f.rates.clone()),
        median(f.ratios.clone())
    )
}

fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("enqueue-bench")
        .replace_existing(true)
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("shared_buffers", "256MB")
        .setting("max_wal_size", "4GB")
        .start()?;
    cluster.create_database("enqueue")?;
    let mut admin = cluster.connect_to("enqueue")?;
    admin.batch_execute(
        "CREATE SCHEMA plain;
         CREATE TABLE plain.items (LIKE workfence.items INCLUDING ALL);",
    )?;
    // The setting exists once the library is loaded (by a call, or here).
    admin.batch_execute("LOAD 'pg_workfence'")?;
    let default_notify: String = admin
        .query_one("SELECT current_setting('workfence.notify_enqueued')", &[])?
        .get(0);
    let mut report = format!(
        "# Enqueue: bulk and single rows against a plain INSERT\n\n\
         Written by `workfence-enqueue` (see the top of `bench/src/bin/enqueue.rs` for the \
         method). {} rounds per contender, alternating; ratio: each round against the plain \
         insert's round beside it (median, min-max). `workfence.notify_enqueued` defaults to \
         `{default_notify}`.\n\n\
         ## Bulk: {} rows per round, {} per statement\n\n\
         | contender | rows/s | ratio to plain INSERT ... SELECT (keys given, or generated) | min-max |\n|---|---:|---:|---|\n",
        args.rounds, args.rows, args.batch
    );

    // 1. Bulk.
    // (name, statement, the contender its ratio is taken against)
    let bulk: [(&str, &str, usize); 5] = [
        (
            "plain INSERT ... SELECT",
            "INSERT INTO plain.items (queue, key, payload, priority, run_at, max_attempts) \
             SELECT 'bulk', u.k, u.p, 0, pg_catalog.clock_timestamp(), 25 \
               FROM unnest($1::text[], $2::jsonb[]) AS u(k, p)",
            0,
        ),
        (
            "work_enqueue_many",
            "SELECT count(*) FROM workfence.work_enqueue_many('bulk', $2::jsonb[], $1::text[])",
            0,
        ),
        (
            "work_enqueue per row",
            "SELECT count(e.id) FROM unnest($1::text[], $2::jsonb[]) AS u(k, p), \
                    LATERAL workfence.work_enqueue('bulk', u.p, u.k) AS e",
            0,
        ),
        (
            "plain INSERT ... SELECT, keys generated",
            "INSERT INTO plain.items (queue, key, payload, priority, run_at, max_attempts) \
             SELECT 'bulk', pg_catalog.gen_random_uuid()::text, u.p, 0, \
                    pg_catalog.clock_timestamp(), 25 \
               FROM unnest($1::text[], $2::jsonb[]) AS u(k, p)",
            3,
        ),
        (
            "work_enqueue_many, keys generated",
            "SELECT count(*) FROM workfence.work_enqueue_many('bulk', $2::jsonb[]) \
              WHERE pg_catalog.cardinality($1::text[]) >= 0",
            3,
        ),
    ];
    let mut figures: Vec<Figures> = bulk.iter().map(|_| Figures::default()).collect();
    let mut next = 0usize;
    for round in 0..args.rounds {
        let mut rates = vec![0.0; bulk.len()];
        // Each round starts with another contender.
        for k in 0..bulk.len() {
            let i = (k + round) % bulk.len();
            let statement = admin.prepare(bulk[i].1)?;
            let t0 = Instant::now();
            let mut done = 0;
            while done < args.rows {
                let n = args.batch.min(args.rows - done);
                let keys: Vec<String> = (next..next + n).map(|j| format!("k{j}")).collect();
                let payloads: Vec<Value> = (next..next + n)
                    .map(|j| json!({"n": j, "to": "someone@example.com", "template": "welcome"}))
                    .collect();
                next += n;
                admin.execute(&statement, &[&keys, &payloads])?;
                done += n;
            }
            rates[i] = args.rows as f64 / t0.elapsed().as_secs_f64();
        }
        for (i, rate) in rates.iter().enumerate() {
            figures[i].rates.push(*rate);
            figures[i].ratios.push(rate / rates[bulk[i].2]);
        }
        println!(
            "enqueue bulk round {}: {}",
            round + 1,
            bulk.iter()
                .zip(&rates)
                .map(|((name, _, _), r)| format!("{name} {r:.0}/s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for ((name, _, _), f) in bulk.iter().zip(&figures) {
        report.push_str(&row(name, f));
    }

    // 2. Single rows from several connections.
    report.push_str(&format!(
        "\n## Single rows: {} connections, {} s per round, one row per statement\n\n\
         | contender | rows/s | ratio to plain INSERT | min-max |\n|---|---:|---:|---|\n",
        args.connections, args.seconds
    ));
    let single: [(&str, &str, Option<&str>); 4] = [
        (
            "plain INSERT",
            "INSERT INTO plain.items (queue, key, payload, priority, run_at, max_attempts) \
             VALUES ('single', $1, $2, 0, pg_catalog.clock_timestamp(), 25)",
            None,
        ),
        (
            "work_enqueue, default settings",
            "SELECT workfence.work_enqueue('single', $2, $1)",
            None,
        ),
        (
            "work_enqueue, notify_enqueued on",
            "SELECT workfence.work_enqueue('single', $2, $1)",
            Some("on"),
        ),
        (
            "work_enqueue, notify_enqueued off",
            "SELECT workfence.work_enqueue('single', $2, $1)",
            Some("off"),
        ),
    ];
    let mut figures: Vec<Figures> = single.iter().map(|_| Figures::default()).collect();
    for round in 0..args.rounds {
        let mut rates = vec![0.0; single.len()];
        for k in 0..single.len() {
            let i = (k + round) % single.len();
            let (_, sql, notify) = single[i];
            rates[i] = single_rows(&cluster, &args, sql, notify, &format!("r{round}c{i}"))?;
        }
        for (i, rate) in rates.iter().enumerate() {
            figures[i].rates.push(*rate);
            figures[i].ratios.push(rate / rates[0]);
        }
        println!(
            "enqueue single round {}: {}",
            round + 1,
            single
                .iter()
                .zip(&rates)
                .map(|((name, _, _), r)| format!("{name} {r:.0}/s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for ((name, _, _), f) in single.iter().zip(&figures) {
        report.push_str(&row(name, f));
    }
    print!("{report}");
    if let Some(out) = args.out {
        std::fs::write(out, report)?;
    }
    Ok(())
}

/// `args.connections` connections each run `sql` (keys `$1`, payload `$2`) back to back for
/// `args.seconds`, with `workfence.notify_enqueued` set to `notify` (or left alone); rows/s.
fn single_rows(
    cluster: &Cluster,
    args: &Args,
    sql: &str,
    notify: Option<&str>,
    tag: &str,
) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(args.connections + 1));
    let mut threads = Vec::new();
    for c in 0..args.connections {
        let mut db: Client = cluster.connect_to("enqueue")?;
        if let Some(notify) = notify {
            db.batch_execute(&format!(
                "LOAD 'pg_workfence'; SET workfence.notify_enqueued = {notify}"
            ))?;
        }
        let statement = db.prepare(sql)?;
        let (stop, done, start) = (stop.clone(), done.clone(), start.clone());
        let prefix = format!("{tag}-{c}-");
        threads.push(thread::spawn(move || -> Result<()> {
            let payload = json!({"to": "someone@example.com", "template": "welcome"});
            start.wait();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("{prefix}{n}");
                db.execute(&statement, &[&key, &payload])?;
                n += 1;
            }
            done.fetch_add(n, Ordering::Relaxed);
            Ok(())
        }));
    }
    start.wait();
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(args.seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| "a connection's thread panicked")??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64())
}
