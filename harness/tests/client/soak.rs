//! Soak: many workers under ONE owner name, through worker kills, terminated
//! backends and server crashes, finish every item exactly once (docs/contract.md,
//! promises 1, 2 and 4, and "never handed out twice" for the epoch).
//!
//! Six `workfence-soak-worker` processes share the owner name `soak/shared`
//! and claim batches of three with a one-second lease; one item in eight they
//! stall on until its lease has lapsed (on the server's clock), so other
//! workers re-claim the lapsed items while the stalled worker still holds its
//! token. Each job writes its effect (a row in the plain table `effects`, with
//! no unique constraint so a duplicate would show) in one transaction with
//! `work_assert` before and `work_finish` after. The test enqueues the items in
//! waves; once part of a wave is done it SIGKILLs a random worker (and starts
//! a new one), `pg_terminate_backend`s a random worker's backend, and after
//! some waves crashes the server (`pg_ctl -m immediate stop`) and starts it
//! again on the same port. Once, it fails over: a streaming standby, stopped
//! before a wave (so it lags the whole wave), is promoted after the primary
//! crashes mid-wave, and takes over the primary's address; the workers,
//! holding tokens of claims the new primary never heard of, reconnect to it
//! as they would after a restart, and the producer submits the lost wave
//! again by key (docs/failover.md). Then it closes the queue and the workers
//! drain it.
//!
//! What must hold, whatever the timing:
//! - every item is `done` (none lost) with exactly one effect (no duplicate),
//!   written under the epoch the item was finished with, by the very process
//!   that claimed that epoch (the owner name alone cannot tell them apart);
//! - no epoch was handed out twice: every claim is recorded in `claims_seen`
//!   in the claim's own statement (so that table holds exactly the committed
//!   claims); within a server life and across restarts all epochs are
//!   distinct, and every claim after a restart has an epoch above every claim
//!   committed before the crash and above the highest epoch the committed
//!   data showed just before it; across the failover, above every epoch the
//!   old primary's committed data showed before it crashed, those of the
//!   lost wave included (the new primary's data no longer shows them);
//! - every `work_assert` the workers saw refused (table `refusals`) was of a
//!   token superseded by a later committed claim of its item;
//! - the chaos really happened: kills, terminations and restarts are counted
//!   as performed, and every life of the server after a restart saw claims;
//! - the stalls really happened and were fenced (issue 3, scenario 9, "stalls
//!   longer than the lease"): the table `stalls` (written by each stall's own
//!   statement once the server has waited past the lease, so it counts the
//!   stalls of killed workers too) is not empty, `refusals` is not empty, and
//!   at least one stalled token was refused by `work_assert`.
//!
//! Chaos is paced by progress (done items, polled) and short sleeps between
//! polls; no assertion depends on timing except the last one, which needs, in
//! the whole run, one stall during which another worker claimed the lapsed
//! item (some forty stalls, each leaving 300 ms past the lease for five
//! workers that claim the oldest claimable item first). The PRNG seed
//! (choices of victims and stalls) is printed; `WORKFENCE_SOAK_SEED` replays
//! one. About 15 s.
//!
//! Needs the extension installed into PostgreSQL 15 (`scripts/test.sh`).

use crate::common;

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{ok, scalar};
use postgres::Client;
use workfence_harness::Cluster;

const WORKER_EXE: &str = env!("CARGO_BIN_EXE_workfence-soak-worker");

/// The test's database.
const DATABASE: &str = "soak";

/// The one queue.
const QUEUE: &str = "soak";

/// The owner name of EVERY worker.
const OWNER: &str = "soak/shared";

/// Worker processes alive at any time.
const WORKERS: usize = 6;

/// Items are enqueued in this many waves ...
const WAVES: i64 = 10;

/// ... of this many items each.
const WAVE_ITEMS: i64 = 40;

/// Each claim's lease: short, so stalls outlast it.
const LEASE: &str = "1 second";

/// `max_items` of each claim.
const BATCH: &str = "3";

/// A worker stalls past the lease on one item in this many.
const STALL_ONE_IN: &str = "8";

/// After the chaos of these waves (0-based) the server crashes and restarts.
const CRASH_AFTER_WAVES: [i64; 2] = [3, 7];

/// The standby stops replaying before this wave is enqueued, and after its
/// chaos the primary crashes and the standby takes over: the new primary
/// has lost the wave and everything done since the standby stopped.
const FAILOVER_AT_WAVE: i64 = 5;

/// The whole test must finish within this; past it, it fails with the figures.
const DEADLINE: Duration = Duration::from_secs(180);

/// Pause between two polls of progress or of the workers.
const POLL: Duration = Duration::from_millis(20);

/// The seed when `WORKFENCE_SOAK_SEED` is not set.
const DEFAULT_SEED: u64 = 0x5EED_F00D;

/// The test's tables. None has a unique constraint: duplicates must show.
const SCHEMA: &str = "
    CREATE TABLE public.effects (
        item_id bigint NOT NULL, epoch bigint NOT NULL, worker_pid int NOT NULL);
    CREATE TABLE public.claims_seen (
        item_id bigint NOT NULL, epoch bigint NOT NULL, lease_until timestamptz NOT NULL,
        worker_pid int NOT NULL,
        server_start timestamptz NOT NULL DEFAULT pg_catalog.pg_postmaster_start_time());
    CREATE TABLE public.refusals (
        item_id bigint NOT NULL, epoch bigint NOT NULL, worker_pid int NOT NULL, detail text);
    CREATE TABLE public.stalls (
        item_id bigint NOT NULL, epoch bigint NOT NULL, worker_pid int NOT NULL);
    CREATE TABLE public.soak_producer (open bool NOT NULL);
    INSERT INTO public.soak_producer VALUES (true);
";

/// The worker processes: spawns, kills and respawns them, and reaps them all
/// when dropped.
struct Pool {
    workers: Vec<Child>,
    spawned: u64,
    seed: u64,
    conninfo: String,
    log: PathBuf,
}

impl Pool {
    fn new(conninfo: String, seed: u64, log: PathBuf) -> Pool {
        let mut pool = Pool {
            workers: Vec::new(),
            spawned: 0,
            seed,
            conninfo,
            log,
        };
        for _ in 0..WORKERS {
            let worker = pool.spawn();
            pool.workers.push(worker);
        }
        pool
    }

    /// A new worker with a seed of its own; its stderr goes to the log file.
    fn spawn(&mut self) -> Child {
        let seed = self.seed.wrapping_add(self.spawned).to_string();
        self.spawned += 1;
        let log = ok(
            OpenOptions::new().create(true).append(true).open(&self.log),
            "opening the workers' log",
        );
        ok(
            Command::new(WORKER_EXE)
                .args([&self.conninfo, QUEUE, OWNER, &seed, LEASE, BATCH])
                .arg(STALL_ONE_IN)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn(),
            "starting a worker",
        )
    }

    /// SIGKILLs worker `index` and starts another in its place.
    fn kill_and_replace(&mut self, index: usize) {
        let fresh = self.spawn();
        let mut victim = std::mem::replace(&mut self.workers[index], fresh);
        ok(victim.kill(), "SIGKILL of a worker");
        let status = ok(victim.wait(), "reaping a killed worker");
        assert_eq!(
            status.signal(),
            Some(9),
            "the killed worker ended otherwise: {status}"
        );
    }

    /// Fails the test if a worker exited (they only exit once the queue is
    /// closed and finished).
    fn check_running(&mut self) {
        for worker in &mut self.workers {
            if let Some(status) = ok(worker.try_wait(), "polling a worker") {
                panic!(
                    "worker {} exited while the queue was open: {status}; see {}",
                    worker.id(),
                    self.log.display()
                );
            }
        }
    }

    /// Waits for every worker to exit (or `deadline`); returns each one's
    /// status and stdout, or None at the deadline.
    fn drain(&mut self, deadline: Instant) -> Option<Vec<(ExitStatus, String)>> {
        let mut statuses = vec![None; self.workers.len()];
        while statuses.iter().any(Option::is_none) {
            if Instant::now() > deadline {
                return None;
            }
            for (worker, status) in self.workers.iter_mut().zip(&mut statuses) {
                if status.is_none() {
                    *status = ok(worker.try_wait(), "polling a worker");
                }
            }
            std::thread::sleep(POLL);
        }
        let mut ended = Vec::new();
        for (mut worker, status) in self.workers.drain(..).zip(statuses.into_iter().flatten()) {
            let mut out = String::new();
            if let Some(stdout) = worker.stdout.as_mut() {
                ok(stdout.read_to_string(&mut out), "reading a worker's stdout");
            }
            ended.push((status, out));
        }
        Some(ended)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            if let Err(err) = worker.kill().and_then(|()| worker.wait().map(drop)) {
                eprintln!("could not stop worker {}: {err}", worker.id());
            }
        }
    }
}

/// Chaos performed, counted as it succeeded.
#[derive(Default, Debug)]
struct Chaos {
    sigkills: u32,
    terminations: u32,
    restarts: u32,
    failovers: u32,
}

/// What one crash left behind.
#[derive(Debug)]
struct Crash {
    /// Highest epoch in the committed data (items, effects, claims) just
    /// before the crash.
    committed_before: i64,
    /// `epoch_seq.last_value` just before the crash (may include nextval()s
    /// of claims that had not committed).
    seq_before: i64,
    /// `epoch_seq.last_value` once the server was up again.
    seq_after: i64,
    /// `pg_postmaster_start_time()` of the restarted server.
    server_start: String,
    /// A failover to a lagging standby rather than a restart: the new
    /// server's sequence is older than the old one's committed data until
    /// its first claim moves it to the generation floor.
    failover: bool,
}

/// The highest epoch the committed data shows.
fn committed_max_epoch(client: &mut Client) -> i64 {
    scalar(
        client,
        "SELECT coalesce(greatest( \
           (SELECT max(epoch) FROM workfence.items), \
           (SELECT max(epoch) FROM public.effects), \
           (SELECT max(epoch) FROM public.claims_seen)), 0)",
        &[],
    )
}

fn seq_last_value(client: &mut Client) -> i64 {
    scalar(client, "SELECT last_value FROM workfence.epoch_seq", &[])
}

fn done_items(client: &mut Client) -> i64 {
    scalar(
        client,
        "SELECT count(*) FROM workfence.items WHERE queue = $1 AND state = 'done'",
        &[&QUEUE],
    )
}

/// Enqueues wave `wave`: keys `item-<n>`, default max_attempts.
fn enqueue_wave(client: &mut Client, wave: i64) {
    let first = wave * WAVE_ITEMS;
    let last = first + WAVE_ITEMS - 1;
    let inserted: i64 = scalar(
        client,
        "SELECT count(*) FILTER (WHERE e.inserted) \
           FROM pg_catalog.generate_series($2::bigint, $3::bigint) AS g(n), \
                LATERAL workfence.work_enqueue($1, pg_catalog.jsonb_build_object('n', g.n), \
                                               'item-' || g.n) AS e",
        &[&QUEUE, &first, &last],
    );
    assert_eq!(inserted, WAVE_ITEMS, "enqueue of wave {wave}");
}

/// The figures of the run so far, as one line.
fn figures(client: &mut Client, chaos: &Chaos, started: Instant, seed: u64) -> String {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM workfence.items WHERE queue = $1), \
                    (SELECT count(*) FROM workfence.items WHERE queue = $1 AND state = 'done'), \
                    (SELECT count(*) FROM public.claims_seen), \
                    (SELECT count(*) FROM public.refusals), \
                    (SELECT count(*) FROM public.effects), \
                    (SELECT count(*) FROM (SELECT item_id FROM public.effects \
                                            GROUP BY item_id HAVING count(*) > 1) AS d), \
                    (SELECT coalesce(max(attempts), 0) FROM workfence.items WHERE queue = $1), \
                    (SELECT count(*) FROM public.stalls), \
                    (SELECT count(*) FROM public.stalls AS s \
                      WHERE EXISTS (SELECT 1 FROM public.refusals AS r \
                                     WHERE r.item_id = s.item_id AND r.epoch = s.epoch))",
            &[&QUEUE],
        )
        .unwrap_or_else(|e| panic!("reading the figures: {e}"));
    let (items, done): (i64, i64) = (row.get(0), row.get(1));
    let max_attempts: i32 = row.get(6);
    format!(
        "items={items} workers={WORKERS} sigkills={} terminations={} restarts={} failovers={} \
         claims={} stalls={} stale_refusals={} stalls_refused={} effects={} duplicates={} \
         lost={} max_attempts={max_attempts} seed={seed:#x} wall={:.1}s",
        chaos.sigkills,
        chaos.terminations,
        chaos.restarts,
        chaos.failovers,
        row.get::<_, i64>(2),
        row.get::<_, i64>(7),
        row.get::<_, i64>(3),
        row.get::<_, i64>(8),
        row.get::<_, i64>(4),
        row.get::<_, i64>(5),
        items - done,
        started.elapsed().as_secs_f64(),
    )
}

/// Polls until `done` items are done; fails with the figures at the deadline
/// or if a worker exits early.
fn wait_for_done(
    client: &mut Client,
    pool: &mut Pool,
    done: i64,
    progress: (&Chaos, Instant, u64),
) {
    let (chaos, started, seed) = progress;
    while done_items(client) < done {
        pool.check_running();
        if started.elapsed() > DEADLINE {
            panic!(
                "no progress to {done} done items within {DEADLINE:?}: {}",
                figures(client, chaos, started, seed)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// `pg_terminate_backend` of a random worker's backend (waiting until one is
/// connected).
fn terminate_a_backend(client: &mut Client, rng: &mut fastrand::Rng, started: Instant) {
    loop {
        let pids: Vec<i32> = client
            .query(
                "SELECT pid FROM pg_catalog.pg_stat_activity \
                  WHERE datname = pg_catalog.current_database() \
                    AND application_name LIKE 'workfence-soak-worker %' ORDER BY pid",
                &[],
            )
            .unwrap_or_else(|e| panic!("listing the workers' backends: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect();
        if let Some(&pid) = rng.choice(&pids) {
            if scalar::<bool>(
                client,
                "SELECT pg_catalog.pg_terminate_backend($1)",
                &[&pid],
            ) {
                return;
            }
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no worker backend to terminate within {DEADLINE:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// Crashes the server, starts it again, and returns what the crash left
/// behind with a fresh connection.
fn crash_and_restart(cluster: &mut Cluster, client: &mut Client) -> (Crash, Client) {
    let committed_before = committed_max_epoch(client);
    let seq_before = seq_last_value(client);
    ok(cluster.crash(), "crashing the server (pg_ctl -m immediate)");
    ok(cluster.start_again(), "starting the server again");
    let mut fresh = ok(cluster.connect_to(DATABASE), "reconnecting after restart");
    let seq_after = seq_last_value(&mut fresh);
    let server_start = scalar(
        &mut fresh,
        "SELECT pg_catalog.pg_postmaster_start_time()::text",
        &[],
    );
    let crash = Crash {
        committed_before,
        seq_before,
        seq_after,
        server_start,
        failover: false,
    };
    (crash, fresh)
}

/// Crashes the primary, promotes the (lagging) standby on the primary's
/// address, and returns what the crash left behind, the new primary and a
/// connection to it.
fn fail_over(
    primary: Cluster,
    mut standby: Cluster,
    client: &mut Client,
) -> (Crash, Cluster, Client) {
    let committed_before = committed_max_epoch(client);
    let seq_before = seq_last_value(client);
    let port = primary.port();
    let mut primary = primary;
    ok(
        primary.crash(),
        "crashing the primary (pg_ctl -m immediate)",
    );
    drop(primary);
    // Promoted on its own port, then moved to the primary's address (as a
    // failover manager moves a service address once the new primary is
    // ready): the workers never reach it while it is still a standby.
    ok(standby.start_again(), "starting the standby");
    ok(standby.promote(), "promoting the standby");
    ok(standby.stop(), "stopping the new primary to move it");
    ok(
        standby.start_again_on(port),
        "starting it on the primary's address",
    );
    let mut fresh = ok(
        standby.connect_to(DATABASE),
        "connecting to the new primary",
    );
    let seq_after = seq_last_value(&mut fresh);
    let server_start = scalar(
        &mut fresh,
        "SELECT pg_catalog.pg_postmaster_start_time()::text",
        &[],
    );
    let crash = Crash {
        committed_before,
        seq_before,
        seq_after,
        server_start,
        failover: true,
    };
    (crash, standby, fresh)
}

/// The claims of one server life (claims_seen grouped by server start).
#[derive(Debug)]
struct Life {
    server_start: String,
    min_epoch: i64,
    max_epoch: i64,
    claims: i64,
}

fn lives(client: &mut Client) -> Vec<Life> {
    client
        .query(
            "SELECT server_start::text, min(epoch), max(epoch), count(*) \
               FROM public.claims_seen GROUP BY server_start ORDER BY server_start",
            &[],
        )
        .unwrap_or_else(|e| panic!("reading the claims per server life: {e}"))
        .iter()
        .map(|row| Life {
            server_start: row.get(0),
            min_epoch: row.get(1),
            max_epoch: row.get(2),
            claims: row.get(3),
        })
        .collect()
}

/// Rows of a diagnostic query, each as text (empty when all is well).
fn offenders(client: &mut Client, sql: &str) -> Vec<String> {
    client
        .query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn workers_log(base: &Path) -> PathBuf {
    base.join(format!("soak-workers-{}.log", std::process::id()))
}

#[test]
fn every_item_done_exactly_once_through_kills_terminations_and_crashes() {
    let started = Instant::now();
    let seed = match std::env::var("WORKFENCE_SOAK_SEED") {
        Ok(text) => ok(text.parse::<u64>(), "WORKFENCE_SOAK_SEED"),
        Err(_) => DEFAULT_SEED,
    };
    let base = PathBuf::from(common::scratch_base());
    let mut cluster = ok(Cluster::start(&base), "starting a throwaway cluster");
    ok(cluster.create_database(DATABASE), "creating the database");
    let mut client = ok(cluster.connect_to(DATABASE), "connecting");
    ok(client.batch_execute(SCHEMA), "creating the test's tables");
    let mut standby = Some(ok(cluster.standby(&base), "starting a streaming standby"));

    let log = workers_log(&base);
    ok(File::create(&log), "creating the workers' log");
    let mut pool = Pool::new(cluster.connection_string(DATABASE), seed, log.clone());
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut chaos = Chaos::default();
    let mut crashes = Vec::new();

    for wave in 0..WAVES {
        if wave == FAILOVER_AT_WAVE {
            // The standby falls behind: everything from here on is the
            // suffix the failover loses.
            let lagging = standby.as_mut().expect("the standby");
            common::caught_up(&cluster, lagging);
            ok(lagging.stop(), "stopping the standby");
        }
        enqueue_wave(&mut client, wave);
        // Chaos strikes once a third of this wave is done, so that it hits
        // workers in the middle of work.
        wait_for_done(
            &mut client,
            &mut pool,
            wave * WAVE_ITEMS + WAVE_ITEMS / 3,
            (&chaos, started, seed),
        );
        pool.kill_and_replace(rng.usize(..WORKERS));
        chaos.sigkills += 1;
        terminate_a_backend(&mut client, &mut rng, started);
        chaos.terminations += 1;
        if CRASH_AFTER_WAVES.contains(&wave) {
            let (crash, fresh) = crash_and_restart(&mut cluster, &mut client);
            client = fresh;
            crashes.push(crash);
            chaos.restarts += 1;
        }
        if wave == FAILOVER_AT_WAVE {
            let (crash, promoted, fresh) =
                fail_over(cluster, standby.take().expect("the standby"), &mut client);
            cluster = promoted;
            client = fresh;
            crashes.push(crash);
            chaos.failovers += 1;
            // The producer submits the lost wave again, by its keys.
            enqueue_wave(&mut client, wave);
        }
    }

    // The producer is done: the workers drain the queue and exit.
    ok(
        client.execute("UPDATE public.soak_producer SET open = false", &[]),
        "closing the queue",
    );
    let deadline = started + DEADLINE;
    let Some(ended) = pool.drain(deadline) else {
        panic!(
            "the workers did not drain the queue within {DEADLINE:?}: {}",
            figures(&mut client, &chaos, started, seed)
        );
    };

    let summary = figures(&mut client, &chaos, started, seed);
    // Reconnects only from the exit lines of the workers that were not
    // killed (a killed worker prints nothing); stalls and refusals above are
    // the tables', complete.
    let mut reconnects = 0u64;
    for (_, out) in &ended {
        for pair in out.split_whitespace() {
            if let Some(("reconnects", n)) = pair.split_once('=') {
                reconnects += ok(n.parse::<u64>(), "reconnects");
            }
        }
    }
    println!("soak: {summary} (last {WORKERS} workers: reconnects={reconnects})");
    for c in &crashes {
        println!(
            "soak: {}: committed max epoch {} / epoch_seq {} before, epoch_seq {} after; \
             restarted at {}",
            if c.failover {
                "failover to the lagging standby"
            } else {
                "crash"
            },
            c.committed_before,
            c.seq_before,
            c.seq_after,
            c.server_start
        );
    }

    // Every worker that was not killed exited cleanly: no unexpected error,
    // no work_finish refusing a token work_assert had accepted.
    for (status, out) in &ended {
        assert!(
            status.success(),
            "a worker failed ({status}, stdout {out:?}); see {}",
            log.display()
        );
    }

    // The chaos happened.
    assert_eq!(chaos.sigkills, WAVES as u32);
    assert_eq!(chaos.terminations, WAVES as u32);
    assert_eq!(chaos.restarts, CRASH_AFTER_WAVES.len() as u32);
    assert_eq!(chaos.failovers, 1);

    // None lost: every item done.
    let total = WAVES * WAVE_ITEMS;
    let not_done = offenders(
        &mut client,
        "SELECT format('item %s: %s after %s attempts (%s)', id, state, attempts, last_error) \
           FROM workfence.items WHERE queue = 'soak' AND state <> 'done' ORDER BY id",
    );
    assert_eq!(not_done, Vec::<String>::new(), "lost items");
    assert_eq!(done_items(&mut client), total);

    // Exactly one effect per item, none for anything else.
    let wrong_count = offenders(
        &mut client,
        "SELECT format('item %s: %s effects', i.id, count(e.item_id)) \
           FROM workfence.items AS i LEFT JOIN public.effects AS e ON e.item_id = i.id \
          GROUP BY i.id HAVING count(e.item_id) <> 1 ORDER BY i.id",
    );
    assert_eq!(
        wrong_count,
        Vec::<String>::new(),
        "items without exactly one effect"
    );
    let effects: i64 = scalar(&mut client, "SELECT count(*) FROM public.effects", &[]);
    assert_eq!(effects, total, "effects in all");

    // The effect was written under the epoch the item was finished with, by
    // the process that claimed that epoch.
    let wrong_epoch = offenders(
        &mut client,
        "SELECT format('item %s: effect epoch %s, item epoch %s', i.id, e.epoch, i.epoch) \
           FROM public.effects AS e JOIN workfence.items AS i ON i.id = e.item_id \
          WHERE e.epoch IS DISTINCT FROM i.epoch ORDER BY i.id",
    );
    assert_eq!(
        wrong_epoch,
        Vec::<String>::new(),
        "effects under a stale epoch"
    );
    let foreign = offenders(
        &mut client,
        "SELECT format('item %s epoch %s written by pid %s', e.item_id, e.epoch, e.worker_pid) \
           FROM public.effects AS e \
          WHERE NOT EXISTS (SELECT 1 FROM public.claims_seen AS c \
                             WHERE c.item_id = e.item_id AND c.epoch = e.epoch \
                               AND c.worker_pid = e.worker_pid) ORDER BY e.item_id",
    );
    assert_eq!(
        foreign,
        Vec::<String>::new(),
        "effects written by a process that did not claim that epoch"
    );

    // No epoch handed out twice, over the whole run.
    let reissued = offenders(
        &mut client,
        "SELECT format('epoch %s claimed %s times', epoch, count(*)) \
           FROM public.claims_seen GROUP BY epoch HAVING count(*) > 1 ORDER BY epoch",
    );
    assert_eq!(reissued, Vec::<String>::new(), "epochs handed out twice");

    // Every refusal was of a token that a later committed claim superseded
    // (workers never release, fail or cancel, so nothing else may refuse).
    let unexplained = offenders(
        &mut client,
        "SELECT format('item %s epoch %s refused (%s) with no later claim', \
                       r.item_id, r.epoch, r.detail) \
           FROM public.refusals AS r \
          WHERE NOT EXISTS (SELECT 1 FROM public.claims_seen AS c \
                             WHERE c.item_id = r.item_id AND c.epoch > r.epoch) \
          ORDER BY r.item_id, r.epoch",
    );
    assert_eq!(
        unexplained,
        Vec::<String>::new(),
        "refusals of tokens nobody superseded"
    );

    // Stalls longer than the lease really happened, and were fenced: the
    // workload stalled, work_assert refused stale tokens, and among them
    // tokens of stalled claims.
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM public.stalls), \
                    (SELECT count(*) FROM public.refusals), \
                    (SELECT count(*) FROM public.stalls AS s \
                      WHERE EXISTS (SELECT 1 FROM public.refusals AS r \
                                     WHERE r.item_id = s.item_id AND r.epoch = s.epoch))",
            &[],
        )
        .unwrap_or_else(|e| panic!("counting stalls and refusals: {e}"));
    let (stalls, refusals, stalls_refused): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert!(stalls > 0, "no worker stalled past its lease: {summary}");
    assert!(refusals > 0, "no stale token was refused: {summary}");
    assert!(
        stalls_refused > 0,
        "no stalled worker was refused by work_assert: {summary}"
    );

    // Across each restart: the new life's claims are all above everything
    // the old life committed, and above what the data showed before the crash.
    let lives = lives(&mut client);
    assert_eq!(
        lives.len(),
        crashes.len() + 1,
        "claims in every server life: {lives:?}"
    );
    for (pair, crash) in lives.windows(2).zip(&crashes) {
        let (before, after) = (&pair[0], &pair[1]);
        assert_eq!(after.server_start, crash.server_start, "{lives:?}");
        assert!(after.claims > 0, "{lives:?}");
        assert!(
            after.min_epoch > before.max_epoch,
            "an epoch at or below the old life's highest after a restart: {before:?} then {after:?}"
        );
        assert!(
            after.min_epoch > crash.committed_before,
            "an epoch at or below the committed maximum before the crash: {crash:?}, {after:?}"
        );
        // After a restart the sequence is at least where the committed
        // data was; after the failover it is older (the standby lagged), and
        // the first claim's generation floor is what keeps the epochs above.
        assert!(
            crash.failover || crash.seq_after >= crash.committed_before,
            "epoch_seq went back below committed epochs: {crash:?}"
        );
    }

    drop(pool);
    ok(fs::remove_file(&log), "removing the workers' log");
}
