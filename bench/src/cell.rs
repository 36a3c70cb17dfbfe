//! One timed cell: `conns` worker connections claim and finish `items` items
//! of the contender's queue, and the driver reads throughput, claim latency
//! and WAL written.
//!
//! Every worker connects and prepares its statements first; a barrier starts
//! them together, and the clock runs from the barrier to the last worker's
//! end. The workers share one owner name (they are one deployment's
//! replicas); each claim's latency goes into the worker's own HDR histogram,
//! merged at the end.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use workfence_harness::Cluster;

use crate::contender::{Contender, Session, Token};
use crate::{Error, Result};

/// Lease of every claim: far longer than any cell, so no lease lapses and
/// every finish is current.
const LEASE: &str = "5 minutes";

/// What a cell does.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Worker connections, one thread each.
    pub conns: usize,
    /// `max_items` per claim. 1: finish each item; more: one `finish_many`
    /// per claimed batch.
    pub batch: i32,
    /// Items to process; workers stop claiming once this many are claimed.
    pub items: i64,
    /// Workload 5: per item, this much synthetic work (a sleep, as a job
    /// waiting on I/O), then one renew (the heartbeat), then the finish.
    pub work: Option<Duration>,
    /// `synchronous_commit` of the worker sessions.
    pub sync_commit: bool,
}

/// What a cell measured.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// Items finished (each with its current token).
    pub items: i64,
    /// From the barrier to the last worker's end.
    pub seconds: f64,
    /// Claim latency, median and 99th percentile, microseconds.
    pub claim_p50_us: u64,
    /// See `claim_p50_us`.
    pub claim_p99_us: u64,
    /// WAL inserted during the timed phase (`pg_current_wal_insert_lsn()`
    /// difference, cluster-wide; nothing else runs meanwhile).
    pub wal_bytes: i64,
}

fn new_histogram() -> Histogram<u64> {
    // 1 µs to 10 minutes, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant, valid histogram bounds")
}

fn wal_position(cluster: &Cluster, db: &str) -> Result<i64> {
    let mut client = cluster.connect_to(db)?;
    Ok(client
        .query_one(
            "SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_catalog.pg_lsn)::bigint",
            &[],
        )?
        .get(0))
}

/// Run one cell against `contender`, whose queue the caller has filled.
pub fn run(cluster: &Cluster, contender: &'static Contender, plan: Plan) -> Result<Measured> {
    let setting = if plan.sync_commit { "on" } else { "off" };
    let mut sessions = Vec::with_capacity(plan.conns);
    for _ in 0..plan.conns {
        let client = cluster.connect_to(contender.database)?;
        let mut session = contender.session(client, "bench-worker@host".to_owned())?;
        session.execute(&format!("SET synchronous_commit = {setting}"))?;
        sessions.push(session);
    }

    let claimed = AtomicI64::new(0);
    let start = Barrier::new(plan.conns + 1);
    let wal_before = wal_position(cluster, contender.database)?;
    let (elapsed, outcomes) = thread::scope(|scope| {
        let workers: Vec<_> = sessions
            .into_iter()
            .map(|session| {
                let (claimed, start) = (&claimed, &start);
                scope.spawn(move || {
                    start.wait();
                    work(session, plan, claimed)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let outcomes: Vec<_> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::Bench("a worker panicked".into())))
            })
            .collect();
        (t0.elapsed(), outcomes)
    });
    let wal_after = wal_position(cluster, contender.database)?;

    let mut latencies = new_histogram();
    let mut finished = 0;
    for outcome in outcomes {
        let (n, hist) = outcome?;
        finished += n;
        latencies
            .add(&hist)
            .map_err(|e| Error::Bench(format!("merging histograms: {e}")))?;
    }
    let claimed = claimed.into_inner();
    if finished != claimed {
        return Err(Error::Bench(format!(
            "{}: {claimed} items claimed but {finished} finished with a current token",
            contender.name
        )));
    }
    if finished < plan.items {
        return Err(Error::Bench(format!(
            "{}: the queue ran dry after {finished} of {} items",
            contender.name, plan.items
        )));
    }
    Ok(Measured {
        items: finished,
        seconds: elapsed.as_secs_f64(),
        claim_p50_us: latencies.value_at_quantile(0.50),
        claim_p99_us: latencies.value_at_quantile(0.99),
        wal_bytes: wal_after - wal_before,
    })
}

/// One worker: claim until the cell's items are all claimed or the queue is
/// empty; finish what it claimed. Returns items finished and claim latencies.
fn work(mut s: Session, plan: Plan, claimed: &AtomicI64) -> Result<(i64, Histogram<u64>)> {
    if s.fused() && plan.batch == 1 && plan.work.is_none() {
        return work_fused(s, plan, claimed);
    }
    let mut hist = new_histogram();
    let mut finished = 0;
    while claimed.load(Ordering::Relaxed) < plan.items {
        let t0 = Instant::now();
        let tokens = s.claim(LEASE, plan.batch)?;
        hist.saturating_record(t0.elapsed().as_micros() as u64);
        if tokens.is_empty() {
            break;
        }
        claimed.fetch_add(tokens.len() as i64, Ordering::Relaxed);
        finished += settle(&mut s, plan, &tokens)?;
    }
    Ok((finished, hist))
}

fn settle(s: &mut Session, plan: Plan, tokens: &[Token]) -> Result<i64> {
    if let Some(work) = plan.work {
        let mut n = 0;
        for &token in tokens {
            thread::sleep(work);
            if s.renew(token, LEASE)? && s.finish(token)? {
                n += 1;
            }
        }
        return Ok(n);
    }
    if let [token] = tokens {
        return Ok(i64::from(s.finish(*token)?));
    }
    s.finish_many(tokens)
}

/// One worker of the fused contender: the first item claimed alone, then
/// each item finished and the next claimed by one fused call (its latency
/// is what the histogram records), and the last item finished alone.
fn work_fused(mut s: Session, plan: Plan, claimed: &AtomicI64) -> Result<(i64, Histogram<u64>)> {
    let mut hist = new_histogram();
    let mut finished = 0;
    let mut held: Option<Token> = None;
    loop {
        let more = claimed.load(Ordering::Relaxed) < plan.items;
        let t0 = Instant::now();
        let tokens = match (held.take(), more) {
            (Some(last), true) => {
                let (settled, tokens) = s.cycle(last, LEASE, 1)?;
                finished += i64::from(settled);
                tokens
            }
            (Some(last), false) => {
                finished += i64::from(s.finish(last)?);
                break;
            }
            (None, true) => s.claim(LEASE, 1)?,
            (None, false) => break,
        };
        hist.saturating_record(t0.elapsed().as_micros() as u64);
        match tokens.as_slice() {
            [] => break,
            [token] => {
                claimed.fetch_add(1, Ordering::Relaxed);
                held = Some(*token);
            }
            _ => {
                return Err(Error::Bench(format!(
                    "a fused call of max_items 1 claimed {} items",
                    tokens.len()
                )))
            }
        }
    }
    Ok((finished, hist))
}
