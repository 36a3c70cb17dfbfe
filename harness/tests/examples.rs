//! The example workers of `examples/<lang>/`, each tested the same way.
//!
//! For Python (psycopg 3), Node.js (node-postgres), Rust (tokio-postgres) and
//! bash (psql): two copies of the worker with the SAME owner name process 200
//! items, every tenth of which raises, and one copy is sent SIGTERM half-way
//! while it holds claimed items. Then:
//! - every item ends done or failed (after its 3 attempts) exactly once, the
//!   failed ones being exactly those that raise;
//! - the business table has exactly one row per done item, carrying the
//!   item's final epoch, and none for a failed item;
//! - the SIGTERMed copy exited 0 after releasing what it held, and every item
//!   it released was finished by the survivor.
//!
//! The workers take their settings from the environment (see
//! `examples/README.md`); their install scripts run from `scripts/setup.sh`.
//! Needs the extension installed (`scripts/test.sh`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use common::ok;
use postgres::Client;

/// Items per run; every tenth raises.
const ITEMS: i64 = 200;

/// The owner name both copies share.
const OWNER: &str = "examples/shared-host";

/// The longest a whole run may take before it counts as stuck.
const DEADLINE: Duration = Duration::from_secs(180);

/// The repository's root (this crate lives in `harness/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// Where cargo puts release binaries of the workspace.
fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("release")
}

/// One running copy of a worker and the lines it printed so far.
struct Copy {
    name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Copy {
    fn start(name: &'static str, program: &Path, args: &[&str], dsn: &str) -> Copy {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(root())
            .env("WORKFENCE_DSN", dsn)
            .env("WORKFENCE_QUEUE", "examples")
            .env("WORKFENCE_OWNER", OWNER)
            .env("WORKFENCE_BATCH", "5")
            .env("WORKFENCE_LEASE_SECONDS", "3")
            .env("WORKFENCE_WAIT_SECONDS", "2")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => sink
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line),
                    Err(_) => break,
                }
            }
        });
        Copy { name, child, lines }
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits in i32")
    }

    fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Tokens (id, epoch) of the items this copy logged as claimed and not
    /// yet finished, failed, refused or released.
    fn holding(&self) -> BTreeSet<(i64, i64)> {
        let mut held = BTreeMap::new();
        for line in self.lines() {
            let Some(id) = field(&line, "id") else {
                continue;
            };
            if line.contains("] claim ") {
                if let Some(epoch) = field(&line, "epoch") {
                    held.insert(id, epoch);
                }
            } else if ["] finish ", "] fail ", "] release ", "] refused "]
                .iter()
                .any(|event| line.contains(event))
            {
                held.remove(&id);
            }
        }
        held.into_iter().collect()
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -TERM {}", self.name);
    }

    /// Waits for the copy to exit, killing it after `limit`.
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                self.child.kill().expect("kill");
                panic!(
                    "{} did not exit within {limit:?} of SIGTERM; its last lines:\n{}",
                    self.name,
                    tail(&self.lines())
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // The test failed with this copy still running; don't leave it.
            if let Err(err) = self.child.kill() {
                eprintln!("could not kill {}: {err}", self.name);
            }
        }
    }
}

/// The value of `name=<int>` in a log line.
fn field(line: &str, name: &str) -> Option<i64> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn tail(lines: &[String]) -> String {
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Backends waiting for a lock on the business table (behind the test's gate).
fn gate_waiters(c: &mut Client) -> i64 {
    ok(
        c.query_one(
            "SELECT count(*) FROM pg_catalog.pg_locks
              WHERE relation = 'examples.results'::regclass AND NOT granted",
            &[],
        ),
        "lock waiters",
    )
    .get(0)
}

/// Tokens (id, epoch) of every item the server has as claimed.
fn claimed(c: &mut Client) -> BTreeSet<(i64, i64)> {
    common::pairs(
        c,
        "SELECT id, epoch FROM workfence.items WHERE state = 'claimed'",
    )
    .into_iter()
    .collect()
}

fn finished(c: &mut Client) -> i64 {
    ok(
        c.query_one(
            "SELECT count(*) FROM workfence.items WHERE state IN ('done', 'failed')",
            &[],
        ),
        "progress",
    )
    .get(0)
}

/// Polls until `done(c)` holds, failing with the workers' last lines after
/// the run's deadline.
fn wait_until(
    c: &mut Client,
    copies: &[&Copy],
    started: Instant,
    what: &str,
    done: impl Fn(&mut Client) -> bool,
) {
    while !done(c) {
        if started.elapsed() > DEADLINE {
            let logs: Vec<String> = copies
                .iter()
                .map(|copy| format!("{}:\n{}", copy.name, tail(&copy.lines())))
                .collect();
            panic!(
                "{what}: not reached within {DEADLINE:?}\n{}",
                logs.join("\n")
            );
        }
        ok(
            c.execute("SELECT pg_catalog.pg_sleep(0.05)", &[]),
            "pause between polls",
        );
    }
}

fn run_example(lang: &str, program: &Path, args: &[&str]) {
    assert!(
        program.exists(),
        "{} is missing: run examples/{lang}/install.sh (scripts/setup.sh does)",
        program.display()
    );
    let cluster = common::shared_cluster();
    let db = format!("examples_{lang}");
    ok(cluster.create_database(&db), "creating the database");
    let mut c = ok(cluster.connect_to(&db), "connecting");
    ok(
        c.batch_execute(&format!(
            "CREATE SCHEMA examples;
             CREATE TABLE examples.results (item_id bigint, epoch bigint, worker_pid int,
                                            output bigint, at timestamptz DEFAULT clock_timestamp());
             SELECT workfence.work_enqueue('examples',
                        jsonb_build_object('n', n, 'sleep_ms', 20 + (n * 37) % 61, 'fail', n % 10 = 0),
                        'item-' || n, max_attempts => 3)
               FROM generate_series(1, {ITEMS}) AS n;"
        )),
        "schema, table and items",
    );
    let dsn = cluster.connection_string(&db);
    let started = Instant::now();
    let mut a = Copy::start("copy A", program, args, &dsn);
    let mut b = Copy::start("copy B", program, args, &dsn);

    // Half-way, A is told to stop at a point the test chooses, not by luck:
    // frozen in the business write of a finish (the test holds a SHARE lock
    // on the results table, so every finish waits there), with at least one
    // more claimed item it has not started. It must finish the frozen item
    // once the gate opens, and release the rest. While both copies wait at
    // the gate, A's tokens cannot change; those it logged are checked
    // against the server's claimed items (a log line may still be in the pipe).
    wait_until(&mut c, &[&a, &b], started, "half the items finished", |c| {
        finished(c) >= ITEMS / 2
    });
    let mut gate_connection = ok(cluster.connect_to(&db), "connecting the gate");
    loop {
        let mut gate = ok(gate_connection.transaction(), "BEGIN (gate)");
        ok(
            gate.batch_execute("LOCK TABLE examples.results IN SHARE MODE"),
            "closing the gate",
        );
        wait_until(
            &mut c,
            &[&a, &b],
            started,
            "both copies waiting at the gate",
            |c| gate_waiters(c) == 2,
        );
        let on_server = claimed(&mut c);
        let frozen_holding = a.holding().intersection(&on_server).count();
        if frozen_holding >= 2 {
            a.terminate();
            ok(gate.commit(), "opening the gate");
            break;
        }
        // A is on the last item of its batch: let both move on, try again.
        ok(gate.commit(), "opening the gate");
    }
    let a_status = a.wait(Duration::from_secs(30));
    assert!(
        a_status.success(),
        "copy A exited with {a_status} after SIGTERM"
    );
    // Everything A claimed it settled before exiting: finished, failed,
    // refused or released; nothing is left to wait for its lease.
    assert_eq!(
        a.holding(),
        BTreeSet::new(),
        "{lang}: copy A exited still holding these items:\n{}",
        tail(&a.lines())
    );
    wait_until(&mut c, &[&a, &b], started, "every item finished", |c| {
        finished(c) == ITEMS
    });
    let took = started.elapsed();
    b.terminate();
    let b_status = b.wait(Duration::from_secs(30));
    assert!(
        b_status.success(),
        "copy B exited with {b_status} after SIGTERM"
    );

    // Every item done or failed once; failed exactly the ones that raise,
    // after all their attempts.
    let states: BTreeMap<String, i64> = ok(
        c.query(
            "SELECT state::text || CASE WHEN state = 'failed' AND payload->>'fail' = 'true' AND attempts = 3
                                      THEN ' (raising, 3 attempts)'
                                      WHEN state = 'done' AND payload->>'fail' = 'false' THEN ' (clean)'
                                      ELSE ' (UNEXPECTED)' END,
                    count(*)
               FROM workfence.items GROUP BY 1",
            &[],
        ),
        "states",
    )
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let expected: BTreeMap<String, i64> = [
        ("done (clean)".to_string(), ITEMS - ITEMS / 10),
        ("failed (raising, 3 attempts)".to_string(), ITEMS / 10),
    ]
    .into();
    assert_eq!(states, expected, "{lang}: item states");

    // One business row per done item, with its final epoch; none for failed.
    let bad_rows: Vec<String> = ok(
        c.query(
            "SELECT i.id::text || ' ' || i.state::text || ' rows=' || count(r.item_id)
               FROM workfence.items AS i LEFT JOIN examples.results AS r
                 ON r.item_id = i.id AND r.epoch = i.epoch
              GROUP BY i.id, i.state
             HAVING count(r.item_id) <> CASE WHEN i.state = 'done' THEN 1 ELSE 0 END
             UNION ALL
             SELECT 'orphan row for item ' || r.item_id
               FROM examples.results AS r JOIN workfence.items AS i ON i.id = r.item_id
              WHERE r.epoch <> i.epoch OR i.state <> 'done'",
            &[],
        ),
        "results",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(bad_rows.is_empty(), "{lang}: business rows: {bad_rows:?}");

    // What A released, B finished.
    // (id, epoch) of every item A released.
    let released: BTreeMap<i64, i64> = a
        .lines()
        .iter()
        .filter(|line| line.contains("] release "))
        .filter_map(|line| Some((field(line, "id")?, field(line, "epoch")?)))
        .collect();
    assert!(
        !released.is_empty(),
        "{lang}: copy A held items at SIGTERM but logged no release:\n{}",
        tail(&a.lines())
    );
    let released_ids: Vec<i64> = released.keys().copied().collect();
    let finishers: Vec<(i64, String, i64, Option<i32>)> = ok(
        c.query(
            "SELECT i.id, i.state::text, i.epoch, r.worker_pid
               FROM workfence.items AS i LEFT JOIN examples.results AS r
                 ON r.item_id = i.id AND r.epoch = i.epoch
              WHERE i.id = ANY($1)",
            &[&released_ids],
        ),
        "released items",
    )
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();
    assert_eq!(finishers.len(), released.len());
    for (id, state, epoch, pid) in &finishers {
        // Claimed again after the release (a newer epoch), then done by B,
        // or failed by B's claims if it is one of the items that raise.
        assert!(
            epoch > &released[id],
            "{lang}: item {id} was not claimed after A released it"
        );
        if state == "done" {
            assert_eq!(
                *pid,
                Some(b.pid()),
                "{lang}: item {id} released by A, finished by {pid:?}"
            );
        }
    }
    assert!(
        a.lines().iter().any(|l| l.contains("] exit"))
            && b.lines().iter().any(|l| l.contains("] exit")),
        "{lang}: both copies log their exit"
    );
    let refusals = [&a, &b]
        .iter()
        .flat_map(|copy| copy.lines())
        .filter(|l| l.contains("refused"))
        .count();
    println!(
        "examples: {lang}: {ITEMS} items by two copies sharing owner {OWNER:?} in {took:.1?}; \
         A released {} on SIGTERM (finished by B), {} refusal lines, states {states:?}",
        released.len(),
        refusals
    );
}

#[test]
fn python_worker() {
    let root = root();
    run_example(
        "python",
        &root.join("examples/python/.venv/bin/python"),
        &["examples/python/worker.py"],
    );
}

#[test]
fn node_worker() {
    run_example(
        "node",
        Path::new("/usr/bin/node"),
        &["examples/node/worker.js"],
    );
}

#[test]
fn rust_worker() {
    run_example("rust", &release_dir().join("workfence-example-worker"), &[]);
}

#[test]
fn bash_worker() {
    run_example("bash", Path::new("/bin/bash"), &["examples/bash/worker.sh"]);
}
