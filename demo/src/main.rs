//! `workfence-demo [--dir DIR]`: the scenario from the bug report, live.
//!
//! Starts a throwaway PostgreSQL 15 cluster in DIR (default `<repo>/.demo/cluster`,
//! or `$WORKFENCE_DEMO_DIR`; a previous demo cluster there is stopped and
//! replaced), creates the extension, enqueues one routine firing and runs two
//! separate worker processes, A and B, both named `routines/laptop`:
//! A claims with a 2-second lease, the lease lapses (by the server's clock),
//! B claims, then A's renew and finish must be refused and B's finish must
//! take effect: the firing is dispatched exactly once. The cluster preloads
//! the library (`shared_preload_libraries`), so that the queue's refusal and
//! lapse counters count (`work_queue_stats.refused` and `.lapsed`, which the
//! dashboard shows): the scenario ends with A's three calls refused and one
//! lapsed lease claimed anew. Prints every step, a verdict, and how to look
//! around with psql and stop the cluster, which is left running. Exits 0 when
//! the scenario holds, 1 when it does not, 2 when the demo could not run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use workfence_harness::calls;
use workfence_harness::scenario::{self, KEY, LONG_LEASE, OWNER, QUEUE, SHORT_LEASE};
use workfence_harness::{Claim, Cluster, Error, Worker};

const DATABASE: &str = "workfence_demo";

/// What the scenario leaves in the queue's counters: A's renew, finish and
/// assert refused; A's lapsed lease claimed anew by B.
const REFUSED: i64 = 3;
const LAPSED: i64 = 1;

const USAGE: &str = "usage: workfence-demo [--dir DIR]
  DIR  where the demo cluster lives (default: $WORKFENCE_DEMO_DIR, else <repo>/.demo/cluster);
       a previous demo cluster there is stopped and replaced.
The worker binary is looked up next to this one (override: $WORKFENCE_WORKER_EXE).";

/// Tally of the scenario's checks.
#[derive(Default)]
struct Checks {
    failed: Vec<String>,
}

impl Checks {
    /// Records a check and returns the tag printed after the step.
    fn check(&mut self, ok: bool, what: &str) -> String {
        if ok {
            format!("[ok: {what}]")
        } else {
            self.failed.push(what.to_owned());
            format!("[FAILED: expected {what}]")
        }
    }
}

fn main() -> ExitCode {
    let dir = match parse_args() {
        Ok(Some(dir)) => dir,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&dir) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("\nworkfence-demo could not run the scenario: {err}");
            eprintln!("If its cluster started, it may still be running: scripts/demo.sh stop");
            ExitCode::from(2)
        }
    }
}

/// The cluster directory, or `None` after printing help.
fn parse_args() -> Result<Option<PathBuf>, String> {
    if workfence_harness::cli::help_requested(USAGE) {
        return Ok(None);
    }
    let mut dir = std::env::var_os("WORKFENCE_DEMO_DIR").map(PathBuf::from);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = Some(args.next().ok_or("--dir needs a value")?.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(dir.unwrap_or_else(|| {
        // demo/ sits in the repository root.
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")))
            .join(".demo")
            .join("cluster")
    })))
}

fn worker_exe() -> Result<PathBuf, Error> {
    if let Some(exe) = std::env::var_os("WORKFENCE_WORKER_EXE") {
        return Ok(exe.into());
    }
    let me = std::env::current_exe().map_err(|source| Error::Io {
        action: "locate",
        path: PathBuf::from("the running executable"),
        source,
    })?;
    let exe = me.with_file_name("workfence-worker");
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(Error::Setup(format!(
            "{} not found; build it with `cargo build --release -p workfence-harness --bins` \
             (scripts/demo.sh does)",
            exe.display()
        )))
    }
}

fn show_claim(c: &Claim) -> String {
    format!(
        "id={} epoch={} attempt={} lease_until={}",
        c.id, c.epoch, c.attempt, c.lease_until
    )
}

/// Prints one step: who, what with which arguments, the result, the check.
fn step(who: &str, verb: &str, args: &str, result: &str, tag: &str) {
    let line = format!("{who:<2} {verb:<9} {args:<17} -> {result}  {tag}");
    println!("{}", line.trim_end());
}

/// Checks that a token call answered `want`, and prints the step.
fn token_step(
    checks: &mut Checks,
    who: &str,
    verb: &str,
    epoch: i64,
    r: &Result<bool, Error>,
    want: bool,
    why: &str,
) {
    let tag = checks.check(matches!(r, Ok(v) if *v == want), &format!("{want}: {why}"));
    step(who, verb, &format!("epoch={epoch}"), &show_bool(r), &tag);
}

fn show_bool(r: &Result<bool, Error>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

fn run(dir: &Path) -> Result<bool, Error> {
    let base = dir
        .parent()
        .ok_or_else(|| Error::Setup(format!("{} has no parent", dir.display())))?;
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::Setup(format!("{} has no usable last component", dir.display())))?;
    let worker_exe = worker_exe()?;

    println!("pg_workfence demo: two workers with the same owner name, one lapsed lease");
    println!();
    let replaced = dir.exists();
    // Preloaded, the library sets its counters aside in shared memory: the
    // refusals and the lapse below are counted (work_queue_stats, the
    // dashboard's refused and lapsed columns); without it they read NULL.
    let cluster = Cluster::builder(base)
        .name(name)
        .keep(true)
        .replace_existing(true)
        .setting("shared_preload_libraries", "pg_workfence")
        .start()?;
    println!(
        "cluster      PostgreSQL 15 on {}:{}, pg_workfence preloaded, data dir {}{}",
        cluster.host(),
        cluster.port(),
        cluster.data_dir().display(),
        if replaced {
            " (replaced the previous demo cluster)"
        } else {
            ""
        }
    );
    cluster.create_database(DATABASE)?;
    let mut scheduler = cluster.connect_to(DATABASE)?;
    let version: String = scheduler
        .query_one(
            "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = $1",
            &[&"pg_workfence"],
        )?
        .get(0);
    println!("database     {DATABASE}, CREATE EXTENSION pg_workfence (version {version})");

    let payload = json!({"routine": "daily-report", "scheduled_for": "2026-11-30T09:00Z"});
    let item = scenario::enqueue(&mut scheduler, QUEUE, KEY, &payload)?;
    println!(
        "enqueue      queue={QUEUE} key={} payload={payload} -> id={} inserted={}",
        item.key, item.id, item.inserted
    );

    let conninfo = cluster.connection_string(DATABASE);
    let mut a = Worker::spawn(&worker_exe, "A", &conninfo, OWNER)?;
    let mut b = Worker::spawn(&worker_exe, "B", &conninfo, OWNER)?;
    for w in [&a, &b] {
        println!(
            "worker {}     OS pid {}, server backend pid {}, owner {}",
            w.name(),
            w.pid(),
            w.backend_pid(),
            w.owner()
        );
    }
    println!();

    let mut checks = Checks::default();

    // 1. A claims with a short lease.
    let a_claim = a.claim_key(QUEUE, KEY, SHORT_LEASE)?;
    let Some(a_claim) = a_claim else {
        let tag = checks.check(false, "A's claim of the new item");
        step(
            "A",
            "claim_key",
            &format!("lease={SHORT_LEASE}"),
            "no row",
            &tag,
        );
        return Ok(verdict(&cluster, &checks, false));
    };
    step(
        "A",
        "claim_key",
        &format!("lease={SHORT_LEASE}"),
        &show_claim(&a_claim),
        "",
    );

    // 2. The lease lapses: wait on the server's clock.
    let lapse = scenario::wait_for_lease_lapse(&mut scheduler, a_claim.id)?;
    step(
        "",
        "(server)",
        "pg_sleep_until",
        &format!(
            "lapsed: lease_until {} < clock_timestamp() {}",
            lapse.lease_until, lapse.server_now
        ),
        "",
    );

    // 3. B, same owner name, claims the lapsed item.
    let Some(b_claim) = b.claim_key(QUEUE, KEY, LONG_LEASE)? else {
        let tag = checks.check(false, "B's claim of the lapsed item");
        step(
            "B",
            "claim_key",
            &format!("lease={LONG_LEASE}"),
            "no row",
            &tag,
        );
        return Ok(verdict(&cluster, &checks, false));
    };
    let tag = checks.check(
        b_claim.id == a_claim.id && b_claim.epoch > a_claim.epoch,
        &format!(
            "same item, a newer epoch {} > {}",
            b_claim.epoch, a_claim.epoch
        ),
    );
    step(
        "B",
        "claim_key",
        &format!("lease={LONG_LEASE}"),
        &show_claim(&b_claim),
        &tag,
    );

    // 4. A wakes up and carries on with its stale token.
    let r = a.renew(a_claim.id, a_claim.epoch, LONG_LEASE);
    token_step(
        &mut checks,
        "A",
        "renew",
        a_claim.epoch,
        &r,
        false,
        "superseded token",
    );
    let r = a.finish(a_claim.id, a_claim.epoch, Some(json!({"sent_by": "A"})));
    let a_finished = matches!(r, Ok(true));
    token_step(
        &mut checks,
        "A",
        "finish",
        a_claim.epoch,
        &r,
        false,
        "A must not dispatch",
    );

    // 5. B finishes under its current lease.
    let r = b.finish(b_claim.id, b_claim.epoch, Some(json!({"sent_by": "B"})));
    let b_finished = matches!(r, Ok(true));
    token_step(
        &mut checks,
        "B",
        "finish",
        b_claim.epoch,
        &r,
        true,
        "B holds the current lease",
    );

    // 6. A's token, asserted inside a transaction of A's, is refused.
    let r = a.assert(a_claim.id, a_claim.epoch);
    let shown = match &r {
        Ok(()) => "ok (not refused)".to_owned(),
        Err(Error::Server { error, .. }) => format!("refused, {error}"),
        Err(e) => format!("error: {e}"),
    };
    let tag = checks.check(
        r.as_ref().err().and_then(Error::sqlstate) == Some("55000"),
        "SQLSTATE 55000",
    );
    step(
        "A",
        "assert",
        &format!("epoch={}", a_claim.epoch),
        &shown,
        &tag,
    );

    // 7. Count the dispatches.
    println!();
    let dispatches = usize::from(a_finished) + usize::from(b_finished);
    let done = scenario::done_count(&mut scheduler, QUEUE, KEY)?;
    let row = scenario::item(&mut scheduler, item.id)?;
    let tag = checks.check(
        dispatches == 1 && done == 1,
        "exactly one dispatch and one done item",
    );
    println!(
        "count        finishes that took effect: {dispatches} ({}), items done for the key: {done}  {tag}",
        if b_finished && !a_finished { "B's" } else { "see above" }
    );
    let tag = checks.check(
        row.state == "done"
            && row.epoch == Some(b_claim.epoch)
            && row.result == Some(json!({"sent_by": "B"})),
        &format!("done under B's epoch {}", b_claim.epoch),
    );
    println!(
        "item {}       state={} owner={} epoch={} result={} finished_at={}  {tag}",
        item.id,
        row.state,
        row.owner.as_deref().unwrap_or("NULL"),
        row.epoch.map_or("NULL".into(), |e| e.to_string()),
        row.result.as_ref().map_or("NULL".into(), |v| v.to_string()),
        row.finished_at.as_deref().unwrap_or("NULL"),
    );

    // 8. Fencing at work, as the queue's counters (and the dashboard) show it.
    let stats = calls::queue_stats(&mut scheduler)?;
    let counted = stats.iter().find(|s| s.queue == QUEUE);
    let refused = counted.and_then(|s| s.refused);
    let lapsed = counted.and_then(|s| s.lapsed);
    let tag = checks.check(
        refused == Some(REFUSED) && lapsed == Some(LAPSED),
        &format!(
            "refused={REFUSED} (A's renew, finish, assert), lapsed={LAPSED} (A's lease, claimed anew by B)"
        ),
    );
    let show = |n: Option<i64>| {
        n.map_or(
            "NULL (not counted: is the library preloaded?)".into(),
            |n| n.to_string(),
        )
    };
    println!(
        "counters     work_queue_stats of {QUEUE}: refused={} lapsed={}  {tag}",
        show(refused),
        show(lapsed),
    );

    for w in [a, b] {
        let name = w.name().to_owned();
        let status = w.quit()?;
        if !status.success() {
            eprintln!("worker {name} exited with {status}");
        }
    }
    Ok(verdict(&cluster, &checks, true))
}

/// Prints the verdict and how to use the cluster; true when the scenario held.
fn verdict(cluster: &Cluster, checks: &Checks, completed: bool) -> bool {
    println!();
    let held = completed && checks.failed.is_empty();
    if held {
        println!(
            "VERDICT: PASS - the stale worker A was fenced off; the firing was dispatched exactly once, by B."
        );
    } else {
        println!(
            "VERDICT: FAIL - the scenario does not hold: {}",
            if checks.failed.is_empty() {
                "it could not be completed".to_owned()
            } else {
                checks.failed.join("; ")
            }
        );
    }
    println!();
    println!("The cluster keeps running. Look around with:");
    println!(
        "  psql -h {} -p {} -U postgres -d {DATABASE}",
        cluster.host(),
        cluster.port()
    );
    println!("  e.g. SELECT id, queue, key, state, owner, epoch, result FROM workfence.items;");
    println!("       SELECT queue, done, refused, lapsed FROM workfence.work_queue_stats;");
    println!("Stop it with:");
    println!("  scripts/demo.sh stop");
    println!("  (or: {})", cluster.stop_command());
    held
}
