//! A paced load on one queue, what `workfence-sustained` and `workfence-pressure` share.
//!
//! - **Producers** enqueue at a steady total rate, one autocommit statement per item, paced to a
//!   schedule (item k of a producer is due at a fixed offset from the start; a producer sleeps
//!   until its next item is due, and one that fell behind enqueues at once until it is back on
//!   schedule).
//! - **Workers**, each on a connection of its own, claim one item at a time and finish it; a
//!   claim that finds the queue empty is counted and the worker sleeps before its next claim.
//! - **A purger** deletes finished items older than a retention, every so often.
//! - **A monitor** reads the table's state (backlog, sizes, statistics, WAL position) at the end
//!   of each period of the run.
//!
//! What they do goes through a [`Target`]: pg_workfence's functions, or the hand-written SQL
//! baseline of `bench/sql/` (the same columns, indexes and claim order, as plain statements).
//! Every thread counts what it did per period of the [`Clock`] in a [`Tally`]; the tallies are
//! merged at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use postgres::{Client, Statement};
use workfence_harness::calls::{self, prepared, Token};
use workfence_harness::Cluster;

/// Any failure of a run (sendable, as the threads return it).
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The lease of every claim: far longer than any claim-to-finish, so no lease lapses and every
/// finish must be current.
pub const LEASE: &str = "5 minutes";

/// How long a waiting thread sleeps at most between looks at the stop flag.
pub const POLL: Duration = Duration::from_millis(100);

/// The run's clock: when the threads start, when the first reported period begins, how long a
/// period is, how many there are.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The threads begin their work at this instant (before `t0`: a warm-up, not counted).
    pub start: Instant,
    /// The start of period 0.
    pub t0: Instant,
    /// One period.
    pub period: Duration,
    /// How many periods.
    pub periods: usize,
}

impl Clock {
    /// The end of the run.
    pub fn end(&self) -> Instant {
        self.t0 + self.period * self.periods as u32
    }

    /// The end of period `p` (from 0).
    pub fn period_end(&self, p: usize) -> Instant {
        self.t0 + self.period * (p as u32 + 1)
    }

    /// The period (from 0) instant `t` falls in; `None` before `t0` and after the end.
    pub fn period_of(&self, t: Instant) -> Option<usize> {
        let since = t.checked_duration_since(self.t0)?.as_nanos();
        let p = (since / self.period.as_nanos()) as usize;
        (p < self.periods).then_some(p)
    }

    /// Microseconds from `start` to `t` (0 before it): the clock an item carries.
    pub fn micros(&self, t: Instant) -> i64 {
        t.saturating_duration_since(self.start).as_micros() as i64
    }
}

/// Sleeps until `t` (at once if it has passed).
pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

/// A latency histogram: 1 µs to 10 minutes, 3 significant digits.
pub fn new_histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// What one thread counted, per period of the run (index 0 is the first). Merged over the
/// threads at the end.
pub struct Tally {
    /// Items enqueued.
    pub enqueued: Vec<u64>,
    /// The producers' largest lag behind their schedule, µs (the time from an item's due
    /// instant to its enqueue's return).
    pub lag_max_us: Vec<u64>,
    /// Items finished (counted when the finish returned).
    pub finished: Vec<u64>,
    /// Claims that returned no item.
    pub empty: Vec<u64>,
    /// Latency of the claims that returned an item, µs.
    pub claim_us: Vec<Histogram<u64>>,
    /// From the start of an item's enqueue to the return of its finish, µs (with a
    /// [`Target`] whose items carry the enqueue's clock; counted in the period of the finish).
    pub e2e_us: Vec<Histogram<u64>>,
    /// Items deleted by the purger.
    pub purged: Vec<i64>,
}

impl Tally {
    /// All zero, for `periods` periods.
    pub fn new(periods: usize) -> Result<Tally> {
        Ok(Tally {
            enqueued: vec![0; periods],
            lag_max_us: vec![0; periods],
            finished: vec![0; periods],
            empty: vec![0; periods],
            claim_us: (0..periods)
                .map(|_| new_histogram())
                .collect::<Result<_>>()?,
            e2e_us: (0..periods)
                .map(|_| new_histogram())
                .collect::<Result<_>>()?,
            purged: vec![0; periods],
        })
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: Tally) -> Result<()> {
        for p in 0..self.finished.len() {
            self.enqueued[p] += other.enqueued[p];
            self.lag_max_us[p] = self.lag_max_us[p].max(other.lag_max_us[p]);
            self.finished[p] += other.finished[p];
            self.empty[p] += other.empty[p];
            self.claim_us[p].add(&other.claim_us[p])?;
            self.e2e_us[p].add(&other.e2e_us[p])?;
            self.purged[p] += other.purged[p];
        }
        Ok(())
    }
}

/// Running totals, for progress lines.
#[derive(Default)]
pub struct Live {
    /// Items enqueued so far.
    pub enqueued: AtomicU64,
    /// Items finished so far.
    pub finished: AtomicU64,
}

/// What the threads share: the clock, the stop flag (set at the end, or by a thread that
/// failed), the running totals.
pub struct Shared {
    /// The run's clock.
    pub clock: Clock,
    /// Set when the run ends or a thread fails: every thread stops.
    pub stop: AtomicBool,
    /// Running totals.
    pub live: Live,
}

impl Shared {
    /// Shared state for a run on `clock`.
    pub fn new(clock: Clock) -> Arc<Shared> {
        Arc::new(Shared {
            clock,
            stop: AtomicBool::new(false),
            live: Live::default(),
        })
    }

    /// True once the threads should stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Tells every thread to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs `body` on a thread of its own; a failure sets the stop flag, so that the other threads
/// and the monitor stop early.
pub fn spawn(
    shared: &Arc<Shared>,
    body: impl FnOnce(&Shared) -> Result<Tally> + Send + 'static,
) -> JoinHandle<Result<Tally>> {
    let shared = shared.clone();
    thread::spawn(move || {
        let result = body(&shared);
        if result.is_err() {
            shared.stop();
        }
        result
    })
}

/// Joins `threads` and merges their tallies into one of `periods` periods; the first failure
/// (a thread's error, or a panic) if any.
pub fn join(threads: Vec<JoinHandle<Result<Tally>>>, periods: usize) -> Result<Tally> {
    let mut tally = Tally::new(periods)?;
    let mut failure = None;
    for t in threads {
        match t.join() {
            Ok(Ok(t)) => tally.merge(t)?,
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => failure = failure.or(Some("a thread panicked".into())),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(tally),
    }
}

/// What the load runs against: a database, its table, and the statements of each role.
/// Parameters:
/// - `enqueue`: queue text, producer int4, n int8 (the producer's item number), and with
///   `clock` the enqueue's clock int8 ([`Clock::micros`]) → one row, the id;
/// - `claim`: queue text, owner text, lease text (an interval), max_items int4 → rows (id,
///   epoch), and with `clock` a third column, the clock the item was enqueued with;
/// - `finish`: id, owner, epoch → a boolean row, or a row count of 1, when the token was current;
/// - `purge`: older_than text (an interval), queue text → one row, how many were deleted.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name in the reports.
    pub name: &'static str,
    /// Its database on the run's cluster.
    pub database: String,
    /// Schema set-up run in the fresh database after `CREATE DATABASE`; `None`: `CREATE
    /// EXTENSION pg_workfence` (pg_workfence itself).
    pub install: Option<&'static str>,
    /// Run on every worker session before it prepares its statements.
    pub session_setup: &'static str,
    /// The items table (a qualified name).
    pub table: &'static str,
    /// The enqueue.
    pub enqueue: &'static str,
    /// The claim.
    pub claim: String,
    /// The fenced finish.
    pub finish: &'static str,
    /// The purge.
    pub purge: &'static str,
    /// Whether items carry the enqueue's clock (for the end-to-end latency).
    pub clock: bool,
}

/// `text` with its one occurrence of `from` replaced by `to`; an error if `from` is not in it
/// exactly once (a statement this module extends changed shape).
fn replace_once(text: &str, from: &str, to: &str) -> Result<String> {
    match text.matches(from).count() {
        1 => Ok(text.replacen(from, to, 1)),
        n => Err(format!("expected {from:?} once in the statement, found it {n} times").into()),
    }
}

impl Target {
    /// pg_workfence through its public functions: `work_enqueue`, `work_claim`
    /// ([`prepared::CLAIM_TOKENS`]), `work_finish` ([`prepared::FINISH`]), `work_purge`. With
    /// `clock`, the payload carries the enqueue's clock as `t` and the claim returns it.
    pub fn workfence(database: &str, clock: bool) -> Result<Target> {
        let (enqueue, claim) = if clock {
            (
                "SELECT e.id FROM workfence.work_enqueue($1::text, \
                 pg_catalog.jsonb_build_object('producer', $2::int4, 'n', $3::int8, 't', $4::int8)) AS e",
                replace_once(
                    prepared::CLAIM_TOKENS,
                    "SELECT c.id, c.epoch",
                    "SELECT c.id, c.epoch, (c.payload OPERATOR(pg_catalog.->>) 't')::int8",
                )?,
            )
        } else {
            (
                "SELECT e.id FROM workfence.work_enqueue($1::text, \
                 pg_catalog.jsonb_build_object('producer', $2::int4, 'n', $3::int8)) AS e",
                prepared::CLAIM_TOKENS.to_string(),
            )
        };
        Ok(Target {
            name: "pg_workfence",
            database: database.to_string(),
            install: None,
            session_setup: "",
            table: "workfence.items",
            enqueue,
            claim,
            finish: prepared::FINISH,
            purge: "SELECT workfence.work_purge(($1::text)::interval, $2::text)",
            clock,
        })
    }

    /// The hand-written baseline (`bench/sql/baseline*.sql`, as `workfence-bench` runs it): a
    /// plain `INSERT` with a key of the producer and item number, the claim and fenced finish
    /// as prepared statements under `plan_cache_mode = force_generic_plan`, a plain `DELETE`
    /// of the finished items older than the retention. Its items always carry the clock.
    pub fn baseline(database: &str) -> Result<Target> {
        Ok(Target {
            name: "baseline SQL",
            database: database.to_string(),
            install: Some(include_str!("../sql/baseline.sql")),
            session_setup: "SET plan_cache_mode = force_generic_plan",
            table: "baseline.items",
            enqueue: "INSERT INTO baseline.items (queue, key, payload) \
                      VALUES ($1::text, $2::int4::text || ':' || $3::int8::text, \
                              pg_catalog.jsonb_build_object('producer', $2::int4, 'n', $3::int8, \
                                                            't', $4::int8)) \
                      RETURNING id",
            claim: replace_once(
                include_str!("../sql/baseline_claim.sql"),
                "RETURNING i.id, i.epoch",
                "RETURNING i.id, i.epoch, (i.payload OPERATOR(pg_catalog.->>) 't')::int8",
            )?,
            finish: include_str!("../sql/baseline_finish.sql"),
            purge: "WITH gone AS ( \
                      DELETE FROM baseline.items \
                       WHERE queue = $2::text AND state IN ('done', 'failed', 'cancelled') \
                         AND finished_at < pg_catalog.clock_timestamp() - ($1::text)::interval \
                      RETURNING 1) \
                    SELECT pg_catalog.count(*) FROM gone",
            clock: true,
        })
    }

    /// Creates the target's database on `cluster` and installs its schema.
    pub fn create(&self, cluster: &Cluster) -> Result<()> {
        match self.install {
            None => cluster.create_database(&self.database)?,
            Some(sql) => {
                let mut admin = cluster.connect()?;
                let create: String = admin
                    .query_one(
                        "SELECT pg_catalog.format('CREATE DATABASE %I', $1::text)",
                        &[&self.database],
                    )?
                    .get(0);
                admin.batch_execute(&create)?;
                cluster.connect_to(&self.database)?.batch_execute(sql)?;
            }
        }
        Ok(())
    }

    /// Drops the target's database (every connection to it closed first).
    pub fn drop_database(&self, cluster: &Cluster) -> Result<()> {
        let mut admin = cluster.connect()?;
        let drop: String = admin
            .query_one(
                "SELECT pg_catalog.format('DROP DATABASE %I WITH (FORCE)', $1::text)",
                &[&self.database],
            )?
            .get(0);
        admin.batch_execute(&drop)?;
        Ok(())
    }
}

/// A producer's connection, its statement prepared.
pub struct Producer {
    /// The connection.
    client: Client,
    /// The target's enqueue.
    enqueue: Statement,
    /// Whether the enqueue takes the clock.
    clock: bool,
}

impl Producer {
    /// Connects and prepares.
    pub fn open(cluster: &Cluster, target: &Target) -> Result<Producer> {
        let mut client = cluster.connect_to(&target.database)?;
        let enqueue = client.prepare(target.enqueue)?;
        Ok(Producer {
            client,
            enqueue,
            clock: target.clock,
        })
    }
}

/// A producer (number `p` of `producers`): enqueues one item into `queue` every `producers /
/// rate` seconds, its schedule offset by `p / rate` from the other producers', from the
/// clock's start to the end of the run.
pub fn produce(
    mut c: Producer,
    p: usize,
    producers: usize,
    rate: f64,
    queue: &str,
    shared: &Shared,
) -> Result<Tally> {
    let clock = shared.clock;
    let mut tally = Tally::new(clock.periods)?;
    let every = producers as f64 / rate;
    let offset = p as f64 / rate;
    let producer = i32::try_from(p)?;
    let end = clock.end();
    for n in 0i64.. {
        let due = clock.start + Duration::from_secs_f64(offset + n as f64 * every);
        if due >= end || shared.stopping() {
            break;
        }
        sleep_until(due);
        if c.clock {
            let t = clock.micros(Instant::now());
            c.client
                .query_one(&c.enqueue, &[&queue, &producer, &n, &t])?;
        } else {
            c.client.query_one(&c.enqueue, &[&queue, &producer, &n])?;
        }
        let now = Instant::now();
        shared.live.enqueued.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = clock.period_of(now) {
            tally.enqueued[m] += 1;
            let lag = now.saturating_duration_since(due).as_micros() as u64;
            tally.lag_max_us[m] = tally.lag_max_us[m].max(lag);
        }
    }
    Ok(tally)
}

/// A worker's connection, its statements prepared.
pub struct Worker {
    /// The connection.
    client: Client,
    /// Its owner name.
    owner: String,
    /// The queue it claims from.
    queue: String,
    /// The target's claim.
    claim: Statement,
    /// The target's finish.
    finish: Statement,
    /// Whether claims return the enqueue's clock.
    clock: bool,
    /// pg_workfence (a refused finish is explained by `work_lease_status`).
    workfence: bool,
}

impl Worker {
    /// Connects, prepares, and claims once from `queue`, which must be empty then (the first
    /// call of a connection plans, and is not measured).
    pub fn open(cluster: &Cluster, target: &Target, queue: &str, w: usize) -> Result<Worker> {
        let mut client = cluster.connect_to(&target.database)?;
        client.batch_execute(target.session_setup)?;
        let claim = client.prepare(&target.claim)?;
        let finish = client.prepare(target.finish)?;
        let owner = format!("worker-{w}");
        if !client
            .query(&claim, &[&queue, &owner, &LEASE, &1i32])?
            .is_empty()
        {
            return Err("the queue was not empty before the start".into());
        }
        Ok(Worker {
            client,
            owner,
            queue: queue.to_string(),
            claim,
            finish,
            clock: target.clock,
            workfence: target.install.is_none(),
        })
    }

    /// Finishes one item: true when its token was current (a boolean row from pg_workfence's
    /// function, one row updated by the baseline's `UPDATE`).
    fn finish(&mut self, id: i64, epoch: i64) -> Result<bool> {
        let params: [&(dyn postgres::types::ToSql + Sync); 3] = [&id, &self.owner, &epoch];
        if self.finish.columns().is_empty() {
            return Ok(self.client.execute(&self.finish, &params)? == 1);
        }
        Ok(self.client.query_one(&self.finish, &params)?.get(0))
    }
}

/// A worker: claims one item at a time and finishes it, from the clock's start until the end;
/// after a claim that found nothing it sleeps `idle`.
pub fn work(mut wk: Worker, idle: Duration, shared: &Shared) -> Result<Tally> {
    let clock = shared.clock;
    let mut tally = Tally::new(clock.periods)?;
    sleep_until(clock.start);
    let end = clock.end();
    while !shared.stopping() && Instant::now() < end {
        let before = Instant::now();
        let rows = wk
            .client
            .query(&wk.claim, &[&wk.queue, &wk.owner, &LEASE, &1i32])?;
        let after = Instant::now();
        let period = clock.period_of(after);
        if rows.is_empty() {
            if let Some(m) = period {
                tally.empty[m] += 1;
            }
            thread::sleep(idle);
            continue;
        }
        if let Some(m) = period {
            let us = after.duration_since(before).as_micros() as u64;
            tally.claim_us[m].saturating_record(us.max(1));
        }
        for row in rows {
            let (id, epoch): (i64, i64) = (row.get(0), row.get(1));
            if !wk.finish(id, epoch)? {
                let owner = wk.owner.clone();
                if !wk.workfence {
                    return Err(format!(
                        "the finish of ({id}, {owner}, {epoch}) was refused \
                         (no lease of {LEASE} should lapse in this run)"
                    )
                    .into());
                }
                let token = Token { id, owner, epoch };
                let status = calls::lease_status(&mut wk.client, &token)?;
                return Err(format!(
                    "work_finish({id}, {}, {epoch}) was refused: the token is {status} \
                     (no lease of {LEASE} should lapse in this run)",
                    token.owner
                )
                .into());
            }
            let now = Instant::now();
            shared.live.finished.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = clock.period_of(now) {
                tally.finished[m] += 1;
                if wk.clock {
                    let enqueued: Option<i64> = row.get(2);
                    if let Some(t) = enqueued {
                        let us = (clock.micros(now) - t).max(1) as u64;
                        tally.e2e_us[m].saturating_record(us);
                    }
                }
            }
        }
    }
    Ok(tally)
}

/// The purger: the target's purge of `queue`'s finished items older than `retain` every
/// `every`, the first half a period after `t0` (so that, with the purge period equal to the
/// clock's, each period has one purge in its middle, none on its edges), until the end.
pub fn purge(
    mut c: Client,
    target: &Target,
    queue: &str,
    every: Duration,
    retain: Duration,
    shared: &Shared,
) -> Result<Tally> {
    let clock = shared.clock;
    let mut tally = Tally::new(clock.periods)?;
    let statement = c.prepare(target.purge)?;
    let older_than = format!("{} seconds", retain.as_secs_f64());
    let end = clock.end();
    for k in 1u32.. {
        let due = clock.t0 + every * k - every / 2;
        // Wait for the next purge in short sleeps, so that a stop (a failed thread) is seen at
        // once.
        while Instant::now() < due.min(end) && !shared.stopping() {
            thread::sleep(POLL.min(due.saturating_duration_since(Instant::now())));
        }
        if due >= end || shared.stopping() {
            break;
        }
        let n: i64 = c.query_one(&statement, &[&older_than, &queue])?.get(0);
        if let Some(m) = clock.period_of(Instant::now()) {
            tally.purged[m] += n;
        }
    }
    Ok(tally)
}

/// The table's state at a period's end, read by the monitor's connection.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Pending items of the queue.
    pub backlog: i64,
    /// `pg_relation_size` of the items table: the heap alone.
    pub table_bytes: i64,
    /// `pg_relation_size` of each index of the items table, by name.
    pub index_bytes: Vec<(String, i64)>,
    /// `pg_total_relation_size` of the items table: heap, indexes, TOAST.
    pub total_bytes: i64,
    /// `pg_stat_user_tables.n_live_tup`.
    pub n_live_tup: i64,
    /// `pg_stat_user_tables.n_dead_tup`.
    pub n_dead_tup: i64,
    /// `pg_stat_user_tables.autovacuum_count`: autovacuums of the table.
    pub autovacuums: i64,
    /// `pg_stat_user_tables.autoanalyze_count`.
    pub autoanalyzes: i64,
    /// Checkpoints begun (timed and requested) since the server started.
    pub checkpoints: i64,
    /// `pg_current_wal_lsn()` in bytes from `0/0`.
    pub wal_bytes: i64,
    /// The age (in transactions) of the oldest transaction id or snapshot `xmin` among the
    /// database's sessions (`pg_stat_activity.backend_xid`, `backend_xmin`): how far back they
    /// hold vacuum's horizon.
    pub horizon_age: i64,
}

impl Snapshot {
    /// The indexes' sizes together.
    pub fn index_total(&self) -> i64 {
        self.index_bytes.iter().map(|i| i.1).sum()
    }
}

/// The monitor's connection and what it asks the server.
pub struct Monitor {
    /// A connection of its own (autocommit: every statistics read is fresh).
    pub client: Client,
    /// The queue whose backlog it counts.
    queue: String,
    /// The items table.
    table: &'static str,
    /// The statement that counts the queue's pending items.
    backlog: Statement,
    /// The statement that counts checkpoints, which moved from `pg_stat_bgwriter` to
    /// `pg_stat_checkpointer` in PostgreSQL 17.
    checkpoints_sql: &'static str,
}

impl Monitor {
    /// Connects to the target's database.
    pub fn open(cluster: &Cluster, target: &Target, queue: &str) -> Result<Monitor> {
        let mut client = cluster.connect_to(&target.database)?;
        let version: i32 = client
            .query_one(
                "SELECT pg_catalog.current_setting('server_version_num')::int4",
                &[],
            )?
            .get(0);
        let checkpoints_sql = if version >= 170_000 {
            "SELECT (num_timed + num_requested)::int8 FROM pg_catalog.pg_stat_checkpointer"
        } else {
            "SELECT (checkpoints_timed + checkpoints_req)::int8 FROM pg_catalog.pg_stat_bgwriter"
        };
        // The table name is the target's own constant, not input.
        let backlog = client.prepare(&format!(
            "SELECT pg_catalog.count(*) FROM {} WHERE queue = $1 AND state = 'pending'",
            target.table
        ))?;
        Ok(Monitor {
            client,
            queue: queue.to_string(),
            table: target.table,
            backlog,
            checkpoints_sql,
        })
    }

    /// The table's state now.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let c = &mut self.client;
        let backlog: i64 = c.query_one(&self.backlog, &[&self.queue])?.get(0);
        let row = c.query_one(
            "SELECT pg_catalog.pg_relation_size(s.relid), \
                    pg_catalog.pg_total_relation_size(s.relid), \
                    s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count, \
                    pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), '0/0')::int8, \
                    (SELECT coalesce(pg_catalog.max(GREATEST(pg_catalog.age(a.backend_xid), \
                                                             pg_catalog.age(a.backend_xmin))), 0)::int8 \
                       FROM pg_catalog.pg_stat_activity AS a \
                      WHERE a.datname = pg_catalog.current_database() \
                        AND a.pid <> pg_catalog.pg_backend_pid()) \
               FROM pg_catalog.pg_stat_user_tables AS s \
              WHERE s.relid = $1::text::pg_catalog.regclass",
            &[&self.table],
        )?;
        let index_bytes = c
            .query(
                "SELECT c.relname::text, pg_catalog.pg_relation_size(c.oid) \
                   FROM pg_catalog.pg_index AS i \
                   JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid \
                  WHERE i.indrelid = $1::text::pg_catalog.regclass \
                  ORDER BY 1",
                &[&self.table],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let checkpoints: i64 = c.query_one(self.checkpoints_sql, &[])?.get(0);
        Ok(Snapshot {
            backlog,
            table_bytes: row.get(0),
            index_bytes,
            total_bytes: row.get(1),
            n_live_tup: row.get(2),
            n_dead_tup: row.get(3),
            autovacuums: row.get(4),
            autoanalyzes: row.get(5),
            checkpoints,
            wal_bytes: row.get(6),
            horizon_age: row.get(7),
        })
    }
}

/// At each period's end, a snapshot of the table, handed to `at_end` (with the period's
/// index) before it is kept; returns the snapshots (fewer than the periods if a thread failed
/// and set the stop flag, which the caller then reports).
pub fn watch(
    monitor: &mut Monitor,
    shared: &Shared,
    mut at_end: impl FnMut(usize, &mut Snapshot) -> Result<()>,
) -> Result<Vec<Snapshot>> {
    let clock = shared.clock;
    let mut snaps = Vec::with_capacity(clock.periods);
    for p in 0..clock.periods {
        let end = clock.period_end(p);
        while Instant::now() < end && !shared.stopping() {
            thread::sleep(POLL.min(end.saturating_duration_since(Instant::now())));
        }
        if shared.stopping() {
            break;
        }
        let mut snap = monitor.snapshot()?;
        at_end(p, &mut snap)?;
        snaps.push(snap);
    }
    Ok(snaps)
}

/// The server as the run found it, for a report's header.
pub struct Server {
    /// `SELECT version()`, up to " on ".
    pub version: String,
    /// `SHOW shared_buffers`.
    pub shared_buffers: String,
    /// Every `autovacuum%` setting: (name, value with its unit, at its default).
    pub autovacuum: Vec<(String, String, bool)>,
}

/// Reads what a report says about the server.
pub fn server(c: &mut Client) -> Result<Server> {
    let version: String = c.query_one("SELECT pg_catalog.version()", &[])?.get(0);
    // "PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, ..."
    let version = version.split(" on ").next().unwrap_or_default().to_string();
    let shared_buffers: String = c
        .query_one("SELECT pg_catalog.current_setting('shared_buffers')", &[])?
        .get(0);
    let autovacuum = c
        .query(
            "SELECT name, setting || coalesce(' ' || unit, ''), source = 'default' \
               FROM pg_catalog.pg_settings \
              WHERE name LIKE 'autovacuum%' ORDER BY name",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    Ok(Server {
        version,
        shared_buffers,
        autovacuum,
    })
}

/// `n thing` or `n things`.
pub fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// A count from the server (never negative) as a `usize`.
pub fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// Bytes in MB (2^20).
pub fn mb(bytes: i64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// `Some(v)` as an integer, `None` as `-`.
pub fn opt(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// `value / first`, when both are known and `first` is not 0.
pub fn ratio(value: Option<f64>, first: Option<f64>) -> Option<f64> {
    match (value, first) {
        (Some(v), Some(f)) if f > 0.0 => Some(v / f),
        _ => None,
    }
}

/// The ratio with two decimals, or `-`.
pub fn ratio_text(r: Option<f64>) -> String {
    r.map_or("-".to_string(), |r| format!("{r:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fall_in_their_period_and_none_outside_the_run() {
        let t0 = Instant::now() + Duration::from_secs(2);
        let clock = Clock {
            start: t0 - Duration::from_secs(2),
            t0,
            period: Duration::from_secs(5),
            periods: 3,
        };
        assert_eq!(clock.period_of(clock.start), None);
        assert_eq!(clock.period_of(t0), Some(0));
        assert_eq!(clock.period_of(t0 + Duration::from_millis(4999)), Some(0));
        assert_eq!(clock.period_of(t0 + Duration::from_secs(5)), Some(1));
        assert_eq!(clock.period_of(t0 + Duration::from_millis(14999)), Some(2));
        assert_eq!(clock.period_of(clock.end()), None);
        assert_eq!(clock.period_end(0), t0 + Duration::from_secs(5));
        assert_eq!(clock.micros(t0), 2_000_000);
    }

    #[test]
    fn the_statements_carry_the_clock_when_asked() {
        let plain = Target::workfence("db", false).unwrap();
        assert_eq!(plain.claim, prepared::CLAIM_TOKENS);
        assert!(!plain.enqueue.contains("$4"));
        let timed = Target::workfence("db", true).unwrap();
        assert!(timed.claim.contains("'t')::int8"));
        assert!(timed.enqueue.contains("'t', $4::int8"));
        let baseline = Target::baseline("db").unwrap();
        assert!(baseline
            .claim
            .trim_end()
            .ends_with("RETURNING i.id, i.epoch, (i.payload OPERATOR(pg_catalog.->>) 't')::int8"));
        assert!(replace_once("a b a", "a", "c").is_err());
    }
}
