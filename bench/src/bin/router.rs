//! `workfence-router-bench`: what the PL/Proxy router (`router/install.sql`)
//! costs, measured on one throwaway cluster (`scripts/bench.sh` runs it;
//! `--quick` sizes are the smoke run of `scripts/test.sh`).
//!
//! 1. **Router overhead.** One shard behind a router
//!    ([`workfence_harness::router::Router`]). W worker threads, each with a
//!    connection of its own, drain one pre-filled queue: `work_claim(queue,
//!    owner, '30 seconds', batch)`, then `work_finish` per item (batch 1) or
//!    one `work_finish_many` (batch 10), until a claim comes back empty.
//!    Rounds alternate between the workers connected to the shard database
//!    (direct) and the same number connected to the router database
//!    (router), in the order direct, router, router, direct, ...; reported:
//!    the median items/s of each path and their ratio, and the CPU time the
//!    backends spent per item (from `/proc/<pid>/schedstat`: the router's
//!    backends, and the shard's backends, PL/Proxy's connections included).
//!    Then one connection per path, sequential, claims one item and finishes
//!    it, again and again: the median and 90th percentile of one call (µs).
//! 2. **Shards.** The same workload through routers of 1, 2 and 4 shards:
//!    T threads (8; `--quick` 4), each draining a queue of its own, the
//!    queues chosen so that every shard of the 4-shard router holds the same
//!    number of them (and so every shard of the 2-shard one too). Rounds
//!    rotate over the three routers; reported: median items/s, backend CPU
//!    per item, and the connections each database holds.
//!
//! Items are enqueued on the shard databases directly, outside the timed
//! part; after every round the finished items are purged and the shard's
//! items table vacuumed, so every round starts from the same table. Every
//! connection makes one call before the rounds, so PL/Proxy's connections to
//! the shards are open before the clock starts (PL/Proxy keeps one per shard
//! per router backend, and runs each remote call as a transaction of its own
//! on the shard, as the direct calls are here too: autocommit).
//!
//! Figures are printed (and written to `--out FILE`, markdown). Numbers from
//! one run on a shared machine: compare within the run, not across runs.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, Statement};
use workfence_harness::calls::prepared;
use workfence_harness::router::Router;
use workfence_harness::Cluster;

/// Any failure of a run (sendable, as the worker threads return it).
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The command line.
struct Args {
    /// `--quick`: the small sizes of the smoke run.
    quick: bool,
    /// `--out FILE`: where the markdown report goes (besides stdout).
    out: Option<String>,
}

/// What `workfence-router-bench --help` prints.
const USAGE: &str = "usage: workfence-router-bench [--quick] [--out FILE]
  Measures the PL/Proxy router (router/install.sql) on a throwaway cluster: claim -> finish
  through a router in front of one shard against the same calls made to the shard directly
  (alternating rounds; items/s, backend CPU per item, one call's latency), then through
  routers of 1, 2 and 4 shards; prints a markdown report (to FILE with --out).
  --quick        small sizes (the test suite's smoke run)
With WORKFENCE_KEEP set (any value) the cluster and its log are kept afterwards.";

/// The lease of every claim: far longer than a round, so none lapses.
const LEASE: &str = "30 seconds";

/// The queue of the router-overhead rounds (all workers share it).
const OVERHEAD_QUEUE: &str = "overhead";

/// The queue of the latency measurement.
const LATENCY_QUEUE: &str = "latency";

/// The shard counts of the second experiment (each a router of its own).
const SHARD_COUNTS: [usize; 3] = [1, 2, 4];

/// How many of each run's measurements there are.
struct Sizes {
    /// Worker threads (one connection each) per path in the overhead rounds.
    workers: usize,
    /// Rounds per path of each overhead measurement (throughput and latency).
    rounds: usize,
    /// Items drained per overhead round, batch 1.
    items: usize,
    /// Items drained per overhead round, batch 10.
    items_batch: usize,
    /// Claim -> finish cycles per path per latency round.
    latency_calls: usize,
    /// Threads of the shard rounds (a queue each; a multiple of 4).
    shard_threads: usize,
    /// Rounds per shard count.
    shard_rounds: usize,
    /// Items drained per shard round, spread evenly over the queues.
    shard_items: usize,
}

impl Sizes {
    /// The sizes of `--quick` (under 20 s with the setup) or of a full run
    /// (under 3 minutes).
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                workers: 2,
                rounds: 2,
                items: 400,
                items_batch: 800,
                latency_calls: 100,
                shard_threads: 4,
                shard_rounds: 1,
                shard_items: 600,
            }
        } else {
            Sizes {
                workers: 4,
                rounds: 5,
                items: 5000,
                items_batch: 20000,
                latency_calls: 500,
                shard_threads: 8,
                shard_rounds: 5,
                shard_items: 6000,
            }
        }
    }
}

/// The command line, or `None` after `--help` printed the usage.
fn parse_args() -> Result<Option<Args>> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut args = Args {
        quick: false,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--out" => args.out = Some(it.next().ok_or("--out needs a file")?),
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    Ok(Some(args))
}

/// Runs the bench; on failure says why and exits 1.
fn main() {
    if let Err(e) = run() {
        eprintln!("workfence-router-bench: {e}");
        std::process::exit(1);
    }
}

/// A worker's connection, with the hot calls prepared once, and the pid of
/// the backend that serves it.
struct Conn {
    /// The connection (to a shard database, or to a router database).
    client: Client,
    /// `work_claim(queue, owner, lease, max_items)` → `(id, epoch)` rows.
    claim: Statement,
    /// `work_finish(id, owner, epoch)` → bool.
    finish: Statement,
    /// `work_finish_many(owner, ids, epochs)` → how many were finished.
    finish_many: Statement,
    /// The backend's process id (its CPU time is read from `/proc`).
    pid: i32,
}

impl Conn {
    /// Connects to `db`, prepares the calls, and makes one claim on `queue`
    /// (empty at this point), so that a router backend has opened its
    /// PL/Proxy connection to the queue's shard before any round.
    fn open(cluster: &Cluster, db: &str, queue: &str) -> Result<Conn> {
        let mut client = cluster.connect_to(db)?;
        let claim = client.prepare(prepared::CLAIM_TOKENS)?;
        let finish = client.prepare(prepared::FINISH)?;
        let finish_many = client.prepare(prepared::FINISH_MANY_COUNT)?;
        let pid = client
            .query_one("SELECT pg_catalog.pg_backend_pid()", &[])?
            .get(0);
        let mut conn = Conn {
            client,
            claim,
            finish,
            finish_many,
            pid,
        };
        let got = conn.claim(queue, "warm-up", 1)?;
        if !got.is_empty() {
            return Err(format!("queue {queue} of {db} was not empty before the rounds").into());
        }
        Ok(conn)
    }

    /// Claims up to `batch` items of `queue` for `owner`: their (id, epoch).
    fn claim(&mut self, queue: &str, owner: &str, batch: i32) -> Result<Vec<(i64, i64)>> {
        Ok(self
            .client
            .query(&self.claim, &[&queue, &owner, &LEASE, &batch])?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Finishes `tokens` (claimed by `owner`): one `work_finish` each, or
    /// one `work_finish_many` for them all. Fails unless every one of them
    /// finished (no lease may lapse in a round).
    fn finish(&mut self, owner: &str, tokens: &[(i64, i64)], many: bool) -> Result<()> {
        let finished = if many {
            let ids: Vec<i64> = tokens.iter().map(|t| t.0).collect();
            let epochs: Vec<i64> = tokens.iter().map(|t| t.1).collect();
            let n: i64 = self
                .client
                .query_one(&self.finish_many, &[&owner, &ids, &epochs])?
                .get(0);
            n as usize
        } else {
            let mut n = 0;
            for (id, epoch) in tokens {
                let ok: bool = self
                    .client
                    .query_one(&self.finish, &[id, &owner, epoch])?
                    .get(0);
                if !ok {
                    let status: String = self
                        .client
                        .query_one(
                            "SELECT workfence.work_lease_status($1, $2, $3)",
                            &[id, &owner, epoch],
                        )?
                        .get(0);
                    return Err(format!(
                        "work_finish({id}, {owner}, {epoch}) was refused: the token is {status}"
                    )
                    .into());
                }
                n += 1;
            }
            n
        };
        if finished != tokens.len() {
            return Err(format!("{finished} of {} claimed items finished", tokens.len()).into());
        }
        Ok(())
    }
}

/// A shard database as the bench's own connection sees it: it fills the
/// queues before a round and cleans up after one.
struct Shard {
    /// A connection to it (not a worker's).
    client: Client,
    /// The backend serving `client`.
    pid: i32,
}

impl Shard {
    /// Connects to shard database `name`.
    fn open(cluster: &Cluster, name: &str) -> Result<Shard> {
        let mut client = cluster.connect_to(name)?;
        let pid = client
            .query_one("SELECT pg_catalog.pg_backend_pid()", &[])?
            .get(0);
        Ok(Shard { client, pid })
    }

    /// Enqueues `n` items into `queue`, in one statement.
    fn enqueue(&mut self, queue: &str, n: usize) -> Result<()> {
        let n = i32::try_from(n)?;
        self.client.execute(
            "SELECT workfence.work_enqueue($1::text) FROM pg_catalog.generate_series(1, $2::int4)",
            &[&queue, &n],
        )?;
        Ok(())
    }

    /// Deletes the finished items and vacuums the items table, so that the
    /// next round starts from the same table as this one did.
    fn clean(&mut self) -> Result<()> {
        self.client.execute(
            "SELECT workfence.work_purge($1::text::interval)",
            &[&"0 seconds"],
        )?;
        self.client.batch_execute("VACUUM workfence.items")?;
        Ok(())
    }

    /// The client backends of this database that none of `ours` (the pids
    /// of the bench's own connections) is: PL/Proxy's connections.
    fn plproxy_pids(&mut self, ours: &[i32]) -> Result<Vec<i32>> {
        Ok(self
            .client
            .query(
                "SELECT pid FROM pg_catalog.pg_stat_activity
                  WHERE datname = pg_catalog.current_database()
                    AND backend_type = 'client backend'
                    AND pid <> pg_catalog.pg_backend_pid()
                    AND pid <> ALL ($1::int4[])",
                &[&ours],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

/// CPU time (on-CPU nanoseconds) spent so far by the processes `pids`, from
/// the first field of `/proc/<pid>/schedstat`.
fn cpu_ns(pids: &[i32]) -> Result<u64> {
    let mut total = 0;
    for pid in pids {
        let path = format!("/proc/{pid}/schedstat");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let ns: u64 = text
            .split_whitespace()
            .next()
            .ok_or_else(|| format!("{path} is empty"))?
            .parse()?;
        total += ns;
    }
    Ok(total)
}

/// CPU time of two sets of backends, summed over rounds, and the items
/// those rounds finished.
#[derive(Default)]
struct CpuTally {
    /// Nanoseconds of the router database's backends.
    router_ns: u64,
    /// Nanoseconds of the shard databases' backends.
    shard_ns: u64,
    /// Items finished while they were counted.
    items: usize,
}

impl CpuTally {
    /// Router backends' CPU per item, µs.
    fn router_us(&self) -> f64 {
        self.router_ns as f64 / 1000.0 / self.items.max(1) as f64
    }

    /// Shard backends' CPU per item, µs.
    fn shard_us(&self) -> f64 {
        self.shard_ns as f64 / 1000.0 / self.items.max(1) as f64
    }
}

/// Which backends a path's rounds are charged to.
struct Backends {
    /// The router database's backends serving the workers (none when direct).
    router: Vec<i32>,
    /// The shard databases' backends doing the work: the workers' own
    /// (direct), or PL/Proxy's connections (router).
    shard: Vec<i32>,
}

/// One drain round: every connection in `conns` claims from its queue
/// (`queues[i]`) until a claim comes back empty, `batch` at a time, and
/// finishes what it claimed; all start together. Returns the items finished
/// and the time from the start to the last worker's end.
fn drain(conns: &mut [Conn], queues: &[String], batch: i32) -> Result<(usize, Duration)> {
    let barrier = Barrier::new(conns.len() + 1);
    let outcomes = thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .zip(queues)
            .enumerate()
            .map(|(w, (conn, queue))| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(usize, Instant)> {
                    barrier.wait();
                    let owner = format!("w{w}");
                    let mut done = 0;
                    loop {
                        let tokens = conn.claim(queue, &owner, batch)?;
                        if tokens.is_empty() {
                            return Ok((done, Instant::now()));
                        }
                        conn.finish(&owner, &tokens, batch > 1)?;
                        done += tokens.len();
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let ends: Vec<Result<(usize, Instant)>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into())))
            .collect();
        (start, ends)
    });
    let (start, ends) = outcomes;
    let mut items = 0;
    let mut last = start;
    for end in ends {
        let (n, at) = end?;
        items += n;
        last = last.max(at);
    }
    Ok((items, last - start))
}

/// Runs a round (`drain`) with the backends' CPU counted into `tally`, and
/// checks that exactly `expected` items were finished; returns items/s.
fn counted_round(
    conns: &mut [Conn],
    queues: &[String],
    batch: i32,
    expected: usize,
    backends: &Backends,
    tally: &mut CpuTally,
) -> Result<f64> {
    let (router0, shard0) = (cpu_ns(&backends.router)?, cpu_ns(&backends.shard)?);
    let (items, elapsed) = drain(conns, queues, batch)?;
    tally.router_ns += cpu_ns(&backends.router)? - router0;
    tally.shard_ns += cpu_ns(&backends.shard)? - shard0;
    tally.items += items;
    if items != expected {
        return Err(format!("a round finished {items} items, {expected} were enqueued").into());
    }
    Ok(items as f64 / elapsed.as_secs_f64())
}

/// The median of `v` ([`workfence_bench::median`]).
fn median(v: &[f64]) -> f64 {
    workfence_bench::median(v.to_vec())
}

/// The `p`-th percentile (0-100, nearest rank) of `v`, in µs.
fn percentile_us(v: &[Duration], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = (p * v.len()).div_ceil(100).clamp(1, v.len());
    v[rank - 1].as_secs_f64() * 1e6
}

/// Rates as the report lists them: `1234, 1301, ...`.
fn rates_list(rates: &[f64]) -> String {
    let rates: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    rates.join(", ")
}

/// The two paths of the overhead experiment: direct to the shard, or
/// through the router.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// Workers connected to the shard database.
    Direct,
    /// Workers connected to the router database.
    Router,
}

impl Path {
    /// The order of round `r`: direct, router, router, direct, ... so that
    /// neither path is always the one to run first.
    fn order(r: usize) -> [Path; 2] {
        if r % 2 == 0 {
            [Path::Direct, Path::Router]
        } else {
            [Path::Router, Path::Direct]
        }
    }
}

/// One batch size's throughput rounds of the overhead experiment.
struct Throughput {
    /// The claim's `max_items`.
    batch: i32,
    /// Items per round.
    items: usize,
    /// Items/s of each direct round.
    direct: Vec<f64>,
    /// Items/s of each router round.
    router: Vec<f64>,
    /// Backend CPU of the direct rounds.
    direct_cpu: CpuTally,
    /// Backend CPU of the router rounds.
    router_cpu: CpuTally,
}

impl Throughput {
    /// Median router items/s over median direct items/s.
    fn ratio(&self) -> f64 {
        median(&self.router) / median(&self.direct)
    }
}

/// The time of each claim call and of each finish call of a path.
type CallTimes = (Vec<Duration>, Vec<Duration>);

/// The connections of the overhead experiment: the workers and the latency
/// connection of each path, and the shard's own connection.
struct OverheadSetup {
    /// The workers connected to the shard database.
    direct: Vec<Conn>,
    /// The workers connected to the router database.
    routed: Vec<Conn>,
    /// The sequential connection to the shard database.
    direct_one: Conn,
    /// The sequential connection to the router database.
    routed_one: Conn,
    /// The shard database's own connection.
    shard: Shard,
    /// Backends charged with the direct rounds.
    direct_backends: Backends,
    /// Backends charged with the router rounds.
    router_backends: Backends,
}

impl OverheadSetup {
    /// Opens every connection of the overhead experiment on `router` (one
    /// shard), `workers` per path.
    fn open(cluster: &Cluster, router: &Router, workers: usize) -> Result<OverheadSetup> {
        let shard_db = &router.shards[0];
        let mut shard = Shard::open(cluster, shard_db)?;
        let mut direct = Vec::with_capacity(workers);
        let mut routed = Vec::with_capacity(workers);
        for _ in 0..workers {
            direct.push(Conn::open(cluster, shard_db, OVERHEAD_QUEUE)?);
            routed.push(Conn::open(cluster, &router.database, OVERHEAD_QUEUE)?);
        }
        let direct_one = Conn::open(cluster, shard_db, LATENCY_QUEUE)?;
        let routed_one = Conn::open(cluster, &router.database, LATENCY_QUEUE)?;
        let ours: Vec<i32> = direct.iter().chain([&direct_one]).map(|c| c.pid).collect();
        let direct_backends = Backends {
            router: Vec::new(),
            shard: direct.iter().map(|c| c.pid).collect(),
        };
        let router_backends = Backends {
            router: routed.iter().map(|c| c.pid).collect(),
            // The latency connection's PL/Proxy backend is among them; it
            // idles during the rounds.
            shard: shard.plproxy_pids(&ours)?,
        };
        if router_backends.shard.len() != workers + 1 {
            return Err(format!(
                "{} PL/Proxy connections on {shard_db}, expected {} (one per router backend)",
                router_backends.shard.len(),
                workers + 1
            )
            .into());
        }
        Ok(OverheadSetup {
            direct,
            routed,
            direct_one,
            routed_one,
            shard,
            direct_backends,
            router_backends,
        })
    }

    /// `rounds` rounds of each path at `batch`, `items` per round,
    /// alternating.
    fn throughput(&mut self, batch: i32, items: usize, rounds: usize) -> Result<Throughput> {
        let queues = vec![OVERHEAD_QUEUE.to_string(); self.direct.len()];
        let mut t = Throughput {
            batch,
            items,
            direct: Vec::new(),
            router: Vec::new(),
            direct_cpu: CpuTally::default(),
            router_cpu: CpuTally::default(),
        };
        for r in 0..rounds {
            for path in Path::order(r) {
                self.shard.enqueue(OVERHEAD_QUEUE, items)?;
                let rate = match path {
                    Path::Direct => {
                        let rate = counted_round(
                            &mut self.direct,
                            &queues,
                            batch,
                            items,
                            &self.direct_backends,
                            &mut t.direct_cpu,
                        )?;
                        t.direct.push(rate);
                        rate
                    }
                    Path::Router => {
                        let rate = counted_round(
                            &mut self.routed,
                            &queues,
                            batch,
                            items,
                            &self.router_backends,
                            &mut t.router_cpu,
                        )?;
                        t.router.push(rate);
                        rate
                    }
                };
                println!("router overhead: batch {batch}, round {r}, {path:?}: {rate:.0} items/s");
                self.shard.clean()?;
            }
        }
        Ok(t)
    }

    /// `rounds` rounds of `calls` sequential claim -> finish cycles per
    /// path, alternating; returns (claim, finish) call times of the direct
    /// path, then of the router path.
    fn latency(&mut self, calls: usize, rounds: usize) -> Result<[CallTimes; 2]> {
        let mut out: [CallTimes; 2] = Default::default();
        for r in 0..rounds {
            for path in Path::order(r) {
                self.shard.enqueue(LATENCY_QUEUE, calls)?;
                let (conn, (claims, finishes)) = match path {
                    Path::Direct => (&mut self.direct_one, &mut out[0]),
                    Path::Router => (&mut self.routed_one, &mut out[1]),
                };
                for _ in 0..calls {
                    let t0 = Instant::now();
                    let tokens = conn.claim(LATENCY_QUEUE, "one", 1)?;
                    claims.push(t0.elapsed());
                    if tokens.len() != 1 {
                        return Err(format!("a latency claim got {} items", tokens.len()).into());
                    }
                    let t0 = Instant::now();
                    conn.finish("one", &tokens, false)?;
                    finishes.push(t0.elapsed());
                }
                self.shard.clean()?;
            }
        }
        Ok(out)
    }
}

/// A router of the shard experiment, its workers (one per queue) and its
/// shards' own connections.
struct ShardSetup {
    /// How many shards the router has.
    shards: usize,
    /// The workers connected to the router database, worker i on queue i.
    conns: Vec<Conn>,
    /// The shard databases' own connections, shard 0 first.
    feeders: Vec<Shard>,
    /// Backends charged with this router's rounds.
    backends: Backends,
    /// Items/s of each round.
    rates: Vec<f64>,
    /// Backend CPU of the rounds.
    cpu: CpuTally,
}

/// `count` queue names spread evenly over 4 shards (and so over 2 and 1):
/// the first names `queue<n>` of each partition of the 4-shard router
/// (`hashtext(queue) & 3`, as PL/Proxy picks it), with their partition hash.
fn spread_queues(router: &mut Client, count: usize) -> Result<Vec<(String, i32)>> {
    let rows = router.query(
        "SELECT q, workfence_router.queue_shard(q)
           FROM (SELECT g, 'queue' OPERATOR(pg_catalog.||) g AS q
                   FROM pg_catalog.generate_series(0, $1::int4) AS g) AS n
          ORDER BY n.g",
        &[&1000i32],
    )?;
    let per_shard = count / 4;
    let mut picked: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for row in rows {
        let (queue, hash): (String, i32) = (row.get(0), row.get(1));
        let bucket = picked.entry(hash & 3).or_default();
        if bucket.len() < per_shard {
            bucket.push((queue, hash));
        }
    }
    let queues: Vec<(String, i32)> = picked.into_values().flatten().collect();
    if queues.len() != count {
        return Err(format!("found {} of {count} spread queue names", queues.len()).into());
    }
    Ok(queues)
}

/// The connections each database holds, by who opened them: `(database,
/// the bench's, PL/Proxy's)`, for the databases in `databases`.
fn connection_counts(
    cluster: &Cluster,
    databases: &[String],
    ours: &HashSet<i32>,
) -> Result<Vec<(String, usize, usize)>> {
    let mut admin = cluster.connect()?;
    let rows = admin.query(
        "SELECT datname::text, pid FROM pg_catalog.pg_stat_activity
          WHERE backend_type = 'client backend' AND datname = ANY ($1::text[])",
        &[&databases],
    )?;
    let mut counts: BTreeMap<String, (usize, usize)> =
        databases.iter().map(|d| (d.clone(), (0, 0))).collect();
    for row in rows {
        let (db, pid): (String, i32) = (row.get(0), row.get(1));
        let entry = counts.entry(db).or_default();
        if ours.contains(&pid) {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    Ok(databases
        .iter()
        .map(|d| (d.clone(), counts[d].0, counts[d].1))
        .collect())
}

/// Starts the cluster, runs both experiments, and prints (and writes) the
/// report.
fn run() -> Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let sizes = Sizes::new(args.quick);
    let started = Instant::now();
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("router-bench")
        .replace_existing(true)
        // WORKFENCE_KEEP: leave the cluster (and its log) for a post-mortem.
        .keep(std::env::var_os("WORKFENCE_KEEP").is_some())
        .setting("max_connections", "200")
        .setting("shared_buffers", "256MB")
        .start()?;
    let cores = thread::available_parallelism().map_or(0, |n| n.get());

    // ---- 1. router overhead: one shard, direct against router ----
    let router1 = Router::create(&cluster, "router1", 1)?;
    let mut setup = OverheadSetup::open(&cluster, &router1, sizes.workers)?;
    let single = setup.throughput(1, sizes.items, sizes.rounds)?;
    let batched = setup.throughput(10, sizes.items_batch, sizes.rounds)?;
    let [(direct_claims, direct_finishes), (router_claims, router_finishes)] =
        setup.latency(sizes.latency_calls, sizes.rounds)?;

    // ---- 2. shards: routers of 1, 2 and 4 shards ----
    // Fresh routers, the 1-shard one too: every shard starts from an
    // unused database.
    let routers = SHARD_COUNTS
        .iter()
        .map(|&n| Router::create(&cluster, &format!("shards{n}"), n))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let queues = spread_queues(
        &mut cluster.connect_to(&routers[2].database)?,
        sizes.shard_threads,
    )?;
    let queue_names: Vec<String> = queues.iter().map(|q| q.0.clone()).collect();
    let mut ours: HashSet<i32> = setup
        .direct
        .iter()
        .chain(&setup.routed)
        .chain([&setup.direct_one, &setup.routed_one])
        .map(|c| c.pid)
        .chain([setup.shard.pid])
        .collect();
    let mut shard_setups = Vec::new();
    for (router, &n) in routers.iter().zip(&SHARD_COUNTS) {
        let mut feeders = router
            .shards
            .iter()
            .map(|db| Shard::open(&cluster, db))
            .collect::<Result<Vec<_>>>()?;
        ours.extend(feeders.iter().map(|f| f.pid));
        let conns = queue_names
            .iter()
            .map(|q| Conn::open(&cluster, &router.database, q))
            .collect::<Result<Vec<_>>>()?;
        ours.extend(conns.iter().map(|c| c.pid));
        let ours_list: Vec<i32> = ours.iter().copied().collect();
        let mut shard_pids = Vec::new();
        for feeder in &mut feeders {
            shard_pids.extend(feeder.plproxy_pids(&ours_list)?);
        }
        let backends = Backends {
            router: conns.iter().map(|c| c.pid).collect(),
            shard: shard_pids,
        };
        shard_setups.push(ShardSetup {
            shards: n,
            conns,
            feeders,
            backends,
            rates: Vec::new(),
            cpu: CpuTally::default(),
        });
    }
    let per_queue = sizes.shard_items / sizes.shard_threads;
    let total = per_queue * sizes.shard_threads;
    for r in 0..sizes.shard_rounds {
        for k in 0..shard_setups.len() {
            // Rotate which router goes first.
            let s = &mut shard_setups[(k + r) % SHARD_COUNTS.len()];
            for (queue, hash) in &queues {
                let part = (hash & (s.shards as i32 - 1)) as usize;
                s.feeders[part].enqueue(queue, per_queue)?;
            }
            let rate = counted_round(
                &mut s.conns,
                &queue_names,
                1,
                total,
                &s.backends,
                &mut s.cpu,
            )?;
            println!(
                "router shards: {} shard(s), round {r}: {rate:.0} items/s",
                s.shards
            );
            s.rates.push(rate);
            for f in &mut s.feeders {
                f.clean()?;
            }
        }
    }
    let databases: Vec<String> = std::iter::once(&router1)
        .chain(&routers)
        .flat_map(|r| std::iter::once(r.database.clone()).chain(r.shards.iter().cloned()))
        .collect();
    let connections = connection_counts(&cluster, &databases, &ours)?;

    // ---- the report ----
    let mut md = String::from(
        "# The PL/Proxy router: overhead and shards\n\n\
         Written by `workfence-router-bench` (`scripts/bench.sh`; see the top of \
         `bench/src/bin/router.rs` for the method). One run on a shared machine: compare \
         rows within this file, not with other runs.\n\n",
    );
    writeln!(
        md,
        "Machine: {cores} cores, one PostgreSQL 15 cluster (fsync on) holding the routers and \
         all their shards; the bench's client threads run on the same cores.\n"
    )?;
    md.push_str("## Router overhead: one shard, direct against through the router\n\n");
    writeln!(
        md,
        "{} worker threads per path, each with its own connection, drain one queue; \
         rounds per path: {}, alternating (direct first, then router first, ...). CPU: on-CPU time of the backends, per item finished \
         (router: the router database's backends; shard: the shard's, PL/Proxy's connections \
         for the router path).\n",
        sizes.workers, sizes.rounds
    )?;
    md.push_str(
        "| batch | finish call | items per round | direct items/s | router items/s | router/direct \
         | direct rounds | router rounds |\n|---:|---|---:|---:|---:|---:|---|---|\n",
    );
    for t in [&single, &batched] {
        let line = format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {} |\n",
            t.batch,
            if t.batch > 1 {
                "work_finish_many"
            } else {
                "work_finish"
            },
            t.items,
            median(&t.direct),
            median(&t.router),
            t.ratio(),
            rates_list(&t.direct),
            rates_list(&t.router),
        );
        print!("router overhead: {line}");
        md.push_str(&line);
    }
    md.push_str(
        "\n| batch | path | shard backends µs CPU/item | router backends µs CPU/item |\n\
         |---:|---|---:|---:|\n",
    );
    for t in [&single, &batched] {
        for (path, cpu) in [("direct", &t.direct_cpu), ("router", &t.router_cpu)] {
            let router = if path == "direct" {
                "-".to_string()
            } else {
                format!("{:.1}", cpu.router_us())
            };
            let line = format!(
                "| {} | {path} | {:.1} | {router} |\n",
                t.batch,
                cpu.shard_us()
            );
            print!("router cpu: {line}");
            md.push_str(&line);
        }
    }
    writeln!(
        md,
        "\nOne connection per path, sequential: claim one item, finish it; {} cycles per path \
         per round; rounds: {}, alternating.\n",
        sizes.latency_calls, sizes.rounds
    )?;
    md.push_str(
        "| path | calls | claim µs median | claim µs p90 | finish µs median | finish µs p90 |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (path, claims, finishes) in [
        ("direct", &direct_claims, &direct_finishes),
        ("router", &router_claims, &router_finishes),
    ] {
        let line = format!(
            "| {path} | {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            claims.len(),
            percentile_us(claims, 50),
            percentile_us(claims, 90),
            percentile_us(finishes, 50),
            percentile_us(finishes, 90),
        );
        print!("router latency: {line}");
        md.push_str(&line);
    }
    md.push_str("\n## Shards: the same workload through routers of 1, 2 and 4 shards\n\n");
    writeln!(
        md,
        "{} threads, each draining a queue of its own (the queues spread evenly over the \
         shards), batch 1, `work_finish` per item, {} items per round; rounds per router: {}, \
         rotating.\n",
        sizes.shard_threads, total, sizes.shard_rounds
    )?;
    md.push_str(
        "| shards | items/s | vs 1 shard | rounds | shard backends µs CPU/item | router backends \
         µs CPU/item |\n|---:|---:|---:|---|---:|---:|\n",
    );
    let base = median(&shard_setups[0].rates);
    for s in &shard_setups {
        let line = format!(
            "| {} | {:.0} | {:.2} | {} | {:.1} | {:.1} |\n",
            s.shards,
            median(&s.rates),
            median(&s.rates) / base,
            rates_list(&s.rates),
            s.cpu.shard_us(),
            s.cpu.router_us(),
        );
        print!("router shards: {line}");
        md.push_str(&line);
    }
    md.push_str(
        "\nConnections each database held at the end (client backends; the bench's own, and \
         the ones PL/Proxy opened from the router backends):\n\n\
         | database | the bench's | PL/Proxy's |\n|---|---:|---:|\n",
    );
    for (db, bench, plproxy) in &connections {
        let line = format!("| {db} | {bench} | {plproxy} |\n");
        print!("router connections: {line}");
        md.push_str(&line);
    }

    // ---- what the figures mean, from this run's figures ----
    let router_us = single.router_cpu.router_us();
    let shard_via_router_us = single.router_cpu.shard_us();
    let shard_direct_us = single.direct_cpu.shard_us();
    let routed_total_us = router_us + shard_via_router_us;
    let claim_extra = percentile_us(&router_claims, 50) - percentile_us(&direct_claims, 50);
    let finish_extra = percentile_us(&router_finishes, 50) - percentile_us(&direct_finishes, 50);
    md.push_str("\n## What the figures mean\n\n");
    writeln!(
        md,
        "Through the router, one shard did {:.2}x the direct items/s at batch 1 and {:.2}x at \
         batch 10; at the median one call took {claim_extra:+.0} µs (claim) and \
         {finish_extra:+.0} µs (finish) against direct. Per item at batch 1 the router's \
         backends spent {router_us:.1} µs of CPU, and the shard's backends {shard_via_router_us:.1} \
         µs behind the router against {shard_direct_us:.1} µs direct (PL/Proxy sends every \
         remote call unprepared, with PQsendQueryParams; the direct workers run prepared \
         statements): {routed_total_us:.1} µs in all against {shard_direct_us:.1}. Were the \
         {cores} cores, which the router, the shard and the bench share here, the only limit, \
         the router path would do {:.2}x the direct items/s; it did {:.2}x. At batch 10 the \
         router's backends spent {:.1} µs per item.",
        single.ratio(),
        batched.ratio(),
        shard_direct_us / routed_total_us,
        single.ratio(),
        batched.router_cpu.router_us(),
    )?;
    let rel = |k: usize| median(&shard_setups[k].rates) / base;
    let (two, four) = (rel(1), rel(2));
    let shard_cpu: Vec<String> = shard_setups
        .iter()
        .map(|s| format!("{:.0}", s.cpu.shard_us()))
        .collect();
    let router_cpu: Vec<String> = shard_setups
        .iter()
        .map(|s| format!("{:.0}", s.cpu.router_us()))
        .collect();
    // Backend CPU per item is read as the cost of more shards; items/s is
    // judged against the spread of its own rounds (on a shared machine it
    // moves with whatever else runs).
    let total_us = |s: &ShardSetup| s.cpu.shard_us() + s.cpu.router_us();
    let cpu_change = total_us(&shard_setups[2]) / total_us(&shard_setups[0]) - 1.0;
    let spread = "spreading the same work over 4 databases and their PL/Proxy connections";
    let cost = if cpu_change > 0.05 {
        format!(
            "{spread} cost {:.0}% more backend CPU per item (the router's fan-out)",
            cpu_change * 100.0
        )
    } else if cpu_change < -0.05 {
        format!(
            "{spread} cost {:.0}% less backend CPU per item (less contention inside one \
             database, presumably)",
            -cpu_change * 100.0
        )
    } else {
        format!(
            "{spread} cost no more backend CPU per item ({:+.0}%, within 5%)",
            cpu_change * 100.0
        )
    };
    let all_rates: Vec<f64> = shard_setups
        .iter()
        .flat_map(|s| s.rates.iter().copied())
        .collect();
    let (lo, hi) = all_rates
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &r| {
            (lo.min(r), hi.max(r))
        });
    writeln!(
        md,
        "\nAll the shards of the 2- and 4-shard routers run on the same {cores} cores too, so \
         more shards cannot show scaling here: 2 shards did {two:.2}x and 4 shards {four:.2}x \
         the items/s of 1, with single rounds from {lo:.0} to {hi:.0} items/s. The shards' \
         backends spent {} µs of CPU per item (1, 2, 4 shards) and the router's {} µs: {cost}.",
        shard_cpu.join(", "),
        router_cpu.join(", "),
    )?;
    writeln!(
        md,
        "\nWith a machine per shard, each shard would do what one shard does alone, and \
         throughput would add up per shard until the router's own CPU is the limit: at \
         {router_us:.1} µs of router CPU per item (batch 1), one router core carries at most \
         about {:.0} items/s, and one shard core, at {shard_via_router_us:.1} µs per item \
         behind the router, about {:.0}: one router core for every {:.1} shard cores. At batch \
         10 ({:.1} µs per item) one router core carries about {:.0} items/s. These ceilings \
         count the backends' CPU only (not the WAL writer's, the clients', nor the network \
         between machines).",
        1e6 / router_us,
        1e6 / shard_via_router_us,
        shard_via_router_us / router_us,
        batched.router_cpu.router_us(),
        1e6 / batched.router_cpu.router_us(),
    )?;
    writeln!(md, "\nRun time: {:.0} s.", started.elapsed().as_secs_f64())?;
    println!();
    print!("{md}");
    if let Some(out) = args.out {
        std::fs::write(out, md)?;
    }
    Ok(())
}
