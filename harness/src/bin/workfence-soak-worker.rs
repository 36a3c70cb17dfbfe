//! `workfence-soak-worker CONNINFO QUEUE OWNER SEED LEASE BATCH STALL_ONE_IN`:
//! an autonomous pg_workfence worker for the soak test (`harness/tests/client/soak.rs`).
//!
//! It loops on its own, with no driver on stdin:
//!
//! 1. connects (again and again, with a bounded backoff, while the server is
//!    down, restarting or has terminated its backend);
//! 2. claims up to BATCH items of QUEUE under OWNER with a LEASE-long lease,
//!    recording each claim in the table `claims_seen` in the same statement
//!    (so that table holds exactly the committed claims);
//! 3. for each item, sometimes (one in STALL_ONE_IN, from a PRNG seeded with
//!    SEED) stalls on the server until its lease has lapsed (recording the
//!    stall in the table `stalls` in the same statement), then in ONE
//!    transaction runs `work_assert`, writes the job's effect (a row in
//!    `effects`) and `work_finish`es it. A 55000 from `work_assert` (lease
//!    lost) rolls the transaction back and is recorded in `refusals`;
//! 4. exits once the producer has closed the queue (`soak_producer.open` is
//!    false) and no item of QUEUE is left unfinished.
//!
//! On exit it prints one line, `done=N claims=N refusals=N stalls=N
//! reconnects=N`. It exits with failure on anything that is neither lost
//! connectivity nor a refused lease (an unexpected SQLSTATE, `work_finish`
//! refusing a token `work_assert` just accepted, its parent going away, or
//! the server staying unreachable for a minute). Diagnostics go to stderr.
//!
//! The tables `effects`, `claims_seen`, `refusals`, `stalls` and
//! `soak_producer` are the test's; they live in the `public` schema of the
//! database CONNINFO names.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use workfence_harness::calls::{self, Token};

const USAGE: &str =
    "usage: workfence-soak-worker CONNINFO QUEUE OWNER SEED LEASE BATCH STALL_ONE_IN
  CONNINFO      libpq-style connection string
  QUEUE         the queue to work on
  OWNER         the owner name to claim under (every soak worker uses the same)
  SEED          seed (u64) of the PRNG that picks the items to stall on
  LEASE         lease of each claim, e.g. '1 second'
  BATCH         max_items of each claim
  STALL_ONE_IN  stall on one item in this many (0: never)";

/// The first wait after a failed connection attempt; doubled up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(20);

/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// How long the server may stay unreachable before the worker gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The pause before claiming again when nothing was claimable but the queue
/// is not finished (items held by other workers, or more to come).
const IDLE_POLL: Duration = Duration::from_millis(50);

/// How far past its lease's end a stall lasts (on the server's clock).
const STALL_PAST_LEASE: &str = "300 milliseconds";

/// The worker's settings, from the command line.
struct Settings {
    conninfo: String,
    queue: String,
    owner: String,
    seed: u64,
    lease: String,
    batch: i32,
    stall_one_in: u32,
}

/// What the worker did; printed on exit.
#[derive(Default)]
struct Stats {
    done: u64,
    claims: u64,
    refusals: u64,
    stalls: u64,
    reconnects: u64,
}

/// Why a round of work stopped.
enum Failure {
    /// The connection is gone (server down, backend terminated): reconnect.
    Lost(postgres::Error),
    /// Anything else: the worker stops with this message.
    Fatal(String),
}

impl From<postgres::Error> for Failure {
    fn from(err: postgres::Error) -> Self {
        if connection_lost(&err) {
            Failure::Lost(err)
        } else {
            Failure::Fatal(format!("unexpected error: {}", describe(&err)))
        }
    }
}

/// What one round (one claim and its items) found.
enum Round {
    /// Items were claimed (and worked on, or refused).
    Worked,
    /// Nothing claimable now, but the queue is not finished.
    Idle,
    /// The producer closed the queue and every item is finished.
    Finished,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if workfence_harness::cli::help_requested(USAGE) {
        return ExitCode::SUCCESS;
    }
    let settings = match parse(&args) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut stats = Stats::default();
    let outcome = run(&settings, &mut stats);
    println!(
        "done={} claims={} refusals={} stalls={} reconnects={}",
        stats.done, stats.claims, stats.refusals, stats.stalls, stats.reconnects
    );
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!(
                "workfence-soak-worker (pid {}): {message}",
                std::process::id()
            );
            ExitCode::FAILURE
        }
    }
}

fn parse(args: &[String]) -> Result<Settings, String> {
    let [conninfo, queue, owner, seed, lease, batch, stall_one_in] = args else {
        return Err(format!("expected 7 arguments, got {}", args.len()));
    };
    Ok(Settings {
        conninfo: conninfo.clone(),
        queue: queue.clone(),
        owner: owner.clone(),
        seed: seed.parse().map_err(|e| format!("SEED {seed:?}: {e}"))?,
        lease: lease.clone(),
        batch: batch.parse().map_err(|e| format!("BATCH {batch:?}: {e}"))?,
        stall_one_in: stall_one_in
            .parse()
            .map_err(|e| format!("STALL_ONE_IN {stall_one_in:?}: {e}"))?,
    })
}

fn run(settings: &Settings, stats: &mut Stats) -> Result<(), String> {
    let mut config: postgres::Config = settings
        .conninfo
        .parse()
        .map_err(|e| format!("bad connection string: {e}"))?;
    // The test finds this worker's backend in pg_stat_activity by this name.
    config.application_name(&format!("workfence-soak-worker {}", std::process::id()));
    let parent = std::os::unix::process::parent_id();
    let mut rng = fastrand::Rng::with_seed(settings.seed);
    let mut client: Option<Client> = None;
    let mut backoff = MIN_BACKOFF;
    let mut unreachable_since: Option<Instant> = None;
    loop {
        // Orphaned (the test died): stop rather than poll forever.
        if std::os::unix::process::parent_id() != parent {
            return Err("the parent process went away".into());
        }
        let Some(conn) = client.as_mut() else {
            match config.connect(NoTls) {
                Ok(conn) => {
                    client = Some(conn);
                    backoff = MIN_BACKOFF;
                    unreachable_since = None;
                }
                Err(err) if connection_lost(&err) => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > GIVE_UP_AFTER {
                        return Err(format!(
                            "the server stayed unreachable for {GIVE_UP_AFTER:?}: {}",
                            describe(&err)
                        ));
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(err) => return Err(format!("could not connect: {}", describe(&err))),
            }
            continue;
        };
        match round(conn, settings, &mut rng, stats) {
            Ok(Round::Worked) => {}
            Ok(Round::Idle) => std::thread::sleep(IDLE_POLL),
            Ok(Round::Finished) => {
                return client
                    .take()
                    .map_or(Ok(()), Client::close)
                    .map_err(|e| format!("could not close the connection: {e}"));
            }
            Err(Failure::Lost(err)) => {
                eprintln!(
                    "workfence-soak-worker (pid {}): connection lost, reconnecting: {}",
                    std::process::id(),
                    describe(&err)
                );
                client = None;
                stats.reconnects += 1;
            }
            Err(Failure::Fatal(message)) => return Err(message),
        }
    }
}

/// One claim and the work on what it returned.
fn round(
    client: &mut Client,
    settings: &Settings,
    rng: &mut fastrand::Rng,
    stats: &mut Stats,
) -> Result<Round, Failure> {
    let pid = i32::try_from(std::process::id()).map_err(|e| Failure::Fatal(e.to_string()))?;
    // The claim and its record in claims_seen commit together, or neither.
    let claimed = client.query(
        "WITH c AS ( \
           SELECT id, epoch, lease_until \
             FROM workfence.work_claim($1, $2, $3::text::interval, $4) \
         ) \
         INSERT INTO public.claims_seen (item_id, epoch, lease_until, worker_pid) \
         SELECT id, epoch, lease_until, $5 FROM c \
         RETURNING item_id, epoch, lease_until::text",
        &[
            &settings.queue,
            &settings.owner,
            &settings.lease,
            &settings.batch,
            &pid,
        ],
    )?;
    if claimed.is_empty() {
        let finished: bool = client
            .query_one(
                "SELECT NOT p.open AND NOT EXISTS ( \
                   SELECT 1 FROM workfence.items AS i \
                    WHERE i.queue = $1 \
                      AND i.state NOT IN ('done', 'failed', 'cancelled')) \
                   FROM public.soak_producer AS p",
                &[&settings.queue],
            )?
            .try_get(0)?;
        return Ok(if finished {
            Round::Finished
        } else {
            Round::Idle
        });
    }
    stats.claims += claimed.len() as u64;
    for row in claimed {
        let id: i64 = row.try_get(0)?;
        let epoch: i64 = row.try_get(1)?;
        let lease_until: String = row.try_get(2)?;
        if settings.stall_one_in > 0 && rng.u32(..settings.stall_one_in) == 0 {
            // Part of the workload: a job slower than its lease. Waiting on
            // the server's clock makes sure the lease has lapsed.
            // The stall is recorded in `stalls` by the statement that waits,
            // once the wait is over, so that table counts every stall the
            // server saw through (a worker killed later has no exit line).
            client.execute(
                "INSERT INTO public.stalls (item_id, epoch, worker_pid) \
                 SELECT $3, $4, $5 \
                   FROM pg_catalog.pg_sleep_until($1::text::timestamptz + $2::text::interval)",
                &[&lease_until, &STALL_PAST_LEASE, &id, &epoch, &pid],
            )?;
            stats.stalls += 1;
        }
        work(client, settings, pid, id, epoch, stats)?;
    }
    Ok(Round::Worked)
}

/// The job on one claimed item: assert, effect and finish in one transaction.
fn work(
    client: &mut Client,
    settings: &Settings,
    pid: i32,
    id: i64,
    epoch: i64,
    stats: &mut Stats,
) -> Result<(), Failure> {
    let token = Token::new(id, &settings.owner, epoch);
    let mut tx = client.transaction()?;
    if let Err(err) = calls::assert(&mut tx, &token) {
        if err.code().map(|c| c.code()) != Some("55000") {
            return Err(err.into());
        }
        tx.rollback()?;
        let detail = err
            .as_db_error()
            .and_then(|db| db.detail())
            .unwrap_or_default()
            .to_owned();
        client.execute(
            "INSERT INTO public.refusals (item_id, epoch, worker_pid, detail) \
             VALUES ($1, $2, $3, $4)",
            &[&id, &epoch, &pid, &detail],
        )?;
        stats.refusals += 1;
        return Ok(());
    }
    tx.execute(
        "INSERT INTO public.effects (item_id, epoch, worker_pid) VALUES ($1, $2, $3)",
        &[&id, &epoch, &pid],
    )?;
    let finished = calls::finish(&mut tx, &token, None)?;
    if !finished {
        tx.rollback()?;
        return Err(Failure::Fatal(format!(
            "work_finish refused item {id} epoch {epoch} in the transaction where \
             work_assert had accepted it"
        )));
    }
    tx.commit()?;
    stats.done += 1;
    Ok(())
}

/// Whether `err` means the connection is unusable or the server unreachable
/// (refused, dropped, terminated, shutting down, starting up), as opposed to an
/// error about the statement itself.
fn connection_lost(err: &postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    if let Some(code) = err.code() {
        let code = code.code();
        // 08: connection exception; 57P01 admin shutdown (pg_terminate_backend,
        // smart/fast/immediate shutdown); 57P02 crash shutdown; 57P03 cannot
        // connect now (starting up, in recovery).
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    // No SQLSTATE: lost if an I/O error lies underneath (refused, reset, EOF).
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The error with what lies under it: the SQLSTATE and message of a server
/// error (its Display is only "db error"), or the chain of causes.
fn describe(err: &postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return format!("SQLSTATE {}: {}", db.code().code(), db.message());
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
