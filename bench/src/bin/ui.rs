//! `workfence-ui-bench`: how long the dashboard (`workfence-ui`, issue 18)
//! takes to render each of its pages on a queue of a million items.
//!
//! One throwaway cluster (autovacuum off; the table vacuumed and analyzed
//! after the load, as a table that autovacuum keeps would be), one database
//! with the extension, and:
//!
//! - queue `big` with `--items` items (default 1,000,000), enqueued with
//!   `work_enqueue` in batches, then set by the superuser to the mix of a
//!   queue that has run for a while: 60% done, 20% pending, 10% failed
//!   (with an error history), 5% cancelled, 5% claimed (leases in the
//!   future), interleaved by id;
//! - nine small queues of 100 items each, half of them done two days ago
//!   (before every finish of the big queue), so that the queues page has
//!   rows and the one slow listing is measured: a small queue's done or
//!   failed items, which `items_finished_idx` (all queues' finishes by
//!   time) reaches only past the big queue's later finishes.
//!
//! Then the real `workfence-ui` binary (beside this one in `target/release/`)
//! serves the database as its superuser, and every page is fetched over
//! HTTP/1.1 from loopback: two warm-up requests, then `--requests` timed ones
//! (default 15), one after the other. **Figures** per page: the median and
//! the slowest time from sending the request to reading the last byte of a
//! `200` response, and the response's size. A non-200 answer fails the run.
//!
//! The queues page and `/metrics` read `work_queue_stats`, which counts
//! every item (a scan of `workfence.items`): their time grows with the
//! table. The item pages and the listings (`work_items`, keyset-paged along
//! the claims' own indexes) do not: the "deep" rows start 90% of the way
//! into a listing.
//!
//! Writes a markdown table to `--out FILE.md`. One run on a shared machine:
//! compare the rows within it.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use postgres::Client;
use workfence_harness::Cluster;

/// Any failure of a run.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What `workfence-ui-bench --help` prints.
const USAGE: &str = "usage: workfence-ui-bench [--quick] [--items N] [--requests N] [--out FILE.md]
  Times every page of the dashboard (workfence-ui, beside this binary) on a throwaway cluster
  whose queue `big` holds N items in every state (60% done, 20% pending, 10% failed, 5%
  cancelled, 5% claimed): the median and slowest of R requests per page, after two warm-ups.
  --quick        the smoke run: 20,000 items, 3 requests a page
  --items N      items of the big queue (default 1000000)
  --requests N   timed requests per page (default 15)
  --out FILE.md  write the table there too";

const DB: &str = "jobs";

struct Plan {
    items: i64,
    requests: usize,
    out: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Plan> {
    let mut plan = Plan {
        items: 1_000_000,
        requests: 15,
        out: None,
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--quick" => {
                plan.items = 20_000;
                plan.requests = 3;
            }
            "--items" => plan.items = value("--items")?.parse()?,
            "--requests" => plan.requests = value("--requests")?.parse()?,
            "--out" => plan.out = Some(value("--out")?.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    if plan.items < 1_000 || plan.requests == 0 {
        return Err("--items must be at least 1000 and --requests at least 1".into());
    }
    Ok(plan)
}

/// The big queue and the small ones, as the module's documentation says.
fn load(c: &mut Client, items: i64) -> Result<()> {
    let batch = 100_000;
    let mut from = 1;
    while from <= items {
        let to = (from + batch - 1).min(items);
        c.execute(
            "SELECT count(*) FROM generate_series($1::bigint, $2::bigint) AS n,
                    LATERAL workfence.work_enqueue('big', jsonb_build_object('n', n), 'item-' || n) AS e",
            &[&from, &to],
        )?;
        from = to + 1;
    }
    c.batch_execute(
        r#"
UPDATE workfence.items
   SET state = (CASE WHEN id % 20 < 12 THEN 'done'
                     WHEN id % 20 < 16 THEN 'pending'
                     WHEN id % 20 < 18 THEN 'failed'
                     WHEN id % 20 = 18 THEN 'cancelled'
                     ELSE 'claimed' END)::workfence.item_state,
       attempts = CASE WHEN id % 20 < 12 OR id % 20 >= 16 THEN 1 ELSE 0 END,
       finished_at = CASE WHEN id % 20 < 12 OR id % 20 IN (16, 17, 18)
                          THEN now() - (id % 86400) * interval '1 second' END,
       owner = CASE WHEN id % 20 < 12 OR id % 20 >= 16 THEN 'worker-' || (id % 32) END,
       epoch = CASE WHEN id % 20 < 12 OR id % 20 >= 16 THEN id END,
       claimed_at = CASE WHEN id % 20 < 12 OR id % 20 >= 16 THEN now() - interval '1 minute' END,
       lease_until = CASE WHEN id % 20 = 19 THEN now() + (id % 600) * interval '1 second' END,
       errors = CASE WHEN id % 20 IN (16, 17)
                     THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'epoch', id,
                          'owner', 'worker-' || (id % 32), 'at', now(), 'error', 'timeout'))
                END
 WHERE queue = 'big';
SELECT count(*) FROM generate_series(1, 9) AS q, generate_series(1, 100) AS n,
       LATERAL workfence.work_enqueue('small-' || q, '{}', 'k' || n) AS e;
-- Half of each small queue done two days ago: before every finish of the
-- big queue, so that a listing of the small queue's done items walks past
-- all of those (the one case work_items has no index of its own for).
UPDATE workfence.items
   SET state = 'done', attempts = 1, owner = 'worker-0', epoch = id,
       claimed_at = now() - interval '2 days', finished_at = now() - interval '2 days'
 WHERE queue LIKE 'small-%' AND id % 2 = 0;
"#,
    )?;
    // VACUUM cannot run in the implicit transaction of a multi-statement query.
    c.batch_execute("VACUUM ANALYZE workfence.items")?;
    Ok(())
}

/// `workfence-ui` serving the database, and the address it listens on.
fn start_ui(dsn: &str) -> Result<(Child, String)> {
    let exe = std::env::current_exe()?
        .parent()
        .ok_or("no directory of the binary")?
        .join("workfence-ui");
    let mut child = Command::new(&exe)
        .args(["--dsn", dsn, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "starting {} (cargo build --release -p workfence-ui): {e}",
                exe.display()
            )
        })?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("workfence-ui listening on http://") {
            let addr = rest.trim_end_matches('/').to_owned();
            // Keep reading its stdout so that it never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok((child, addr));
        }
    }
    Err("workfence-ui exited before it listened".into())
}

/// GET `path` over a fresh connection: the time to the last byte, the status
/// and the body's length.
fn get(addr: &str, path: &str) -> Result<(Duration, u16, usize)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no HTTP status line")?;
    let body = text
        .find("\r\n\r\n")
        .map_or(0, |at| response.len() - at - 4);
    Ok((elapsed, status, body))
}

/// The median of `times` ([`workfence_bench::median`], of their seconds).
fn median(times: &[Duration]) -> Duration {
    Duration::from_secs_f64(workfence_bench::median(
        times.iter().map(Duration::as_secs_f64).collect(),
    ))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn run(plan: &Plan) -> Result<String> {
    let scratch = std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| "target".into());
    let cluster = Cluster::builder(scratch)
        .name("ui-bench")
        .replace_existing(true)
        .setting("shared_buffers", "1GB")
        // As the library is deployed: the state counts work_queue_stats
        // reads, and the counters of /metrics, live in shared memory.
        .setting("shared_preload_libraries", "pg_workfence")
        .setting("max_wal_size", "16GB")
        .setting("checkpoint_timeout", "1h")
        .setting("autovacuum", "off")
        .start()?;
    cluster.create_database(DB)?;
    let mut c = cluster.connect_to(DB)?;
    let loading = Instant::now();
    load(&mut c, plan.items)?;
    let load_s = loading.elapsed().as_secs_f64();
    let ids = |c: &mut Client, state: &str| -> Result<(i64, i64)> {
        // The first item of a state's listing, and one 90% of the way in.
        let row = c.query_one(
            "SELECT min(id), percentile_disc(0.9) WITHIN GROUP (ORDER BY id)
               FROM workfence.items WHERE queue = 'big' AND state::text = $1",
            &[&state],
        )?;
        Ok((row.get(0), row.get(1)))
    };
    let (failed_id, _) = ids(&mut c, "failed")?;
    let (claimed_id, _) = ids(&mut c, "claimed")?;
    // A cursor deep in the pending listing (claim order) and in the done
    // listing (newest finish first): the item 90% of the way along each.
    let deep_pending: i64 = c
        .query_one(
            "SELECT id FROM workfence.items WHERE queue = 'big' AND state = 'pending'
              ORDER BY priority, run_at, id OFFSET (SELECT count(*) * 9 / 10 FROM workfence.items
                                                    WHERE queue = 'big' AND state = 'pending') LIMIT 1",
            &[],
        )?
        .get(0);
    let deep_done: i64 = c
        .query_one(
            "SELECT id FROM workfence.items WHERE queue = 'big' AND state = 'done'
              ORDER BY finished_at DESC, id DESC OFFSET (SELECT count(*) * 9 / 10 FROM workfence.items
                                                         WHERE queue = 'big' AND state = 'done') LIMIT 1",
            &[],
        )?
        .get(0);
    let deep_all: i64 = c
        .query_one(
            "SELECT id FROM workfence.items WHERE queue = 'big'
              ORDER BY key DESC OFFSET (SELECT count(*) * 9 / 10 FROM workfence.items
                                         WHERE queue = 'big') LIMIT 1",
            &[],
        )?
        .get(0);
    let dsn = format!(
        "host={} port={} dbname={DB} user=postgres",
        cluster.host(),
        cluster.port()
    );
    let (mut ui, addr) = start_ui(&dsn)?;
    let pages: Vec<(&str, String, u16)> = vec![
        ("queues", "/".into(), 200),
        ("metrics", "/metrics".into(), 200),
        ("items, every state", "/queues/big".into(), 200),
        (
            "items, every state, deep",
            format!("/queues/big?after={deep_all}"),
            200,
        ),
        ("items, pending", "/queues/big?state=pending".into(), 200),
        (
            "items, pending, deep",
            format!("/queues/big?state=pending&after={deep_pending}"),
            200,
        ),
        ("items, claimed", "/queues/big?state=claimed".into(), 200),
        ("items, done", "/queues/big?state=done".into(), 200),
        (
            "items, done, deep",
            format!("/queues/big?state=done&after={deep_done}"),
            200,
        ),
        ("items, failed", "/queues/big?state=failed".into(), 200),
        (
            "items, cancelled",
            "/queues/big?state=cancelled".into(),
            200,
        ),
        ("items, by key", "/queues/big?key=item-500".into(), 303),
        (
            "item (failed, with history)",
            format!("/items/{failed_id}"),
            200,
        ),
        (
            "item (claimed, lease explained)",
            format!("/items/{claimed_id}"),
            200,
        ),
        ("small queue, every state", "/queues/small-1".into(), 200),
        (
            "small queue, done (walks the big queue's finishes)",
            "/queues/small-1?state=done".into(),
            200,
        ),
        (
            "small queue, failed (none: walks every finish)",
            "/queues/small-1?state=failed".into(),
            200,
        ),
        ("unknown queue (404)", "/queues/no-such-queue".into(), 404),
    ];
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| page | path | median ms | slowest ms | bytes |\n|---|---|---|---|---|"
    );
    let result = (|| -> Result<()> {
        for (name, path, expected) in &pages {
            let mut times = Vec::with_capacity(plan.requests);
            let mut bytes = 0;
            for n in 0..plan.requests + 2 {
                let (elapsed, status, body) = get(&addr, path)?;
                // The key search answers with a redirect to the item, an
                // unknown queue with a 404 page.
                if status != *expected {
                    return Err(format!("GET {path}: HTTP {status}, not {expected}").into());
                }
                if n >= 2 {
                    times.push(elapsed);
                    bytes = body;
                }
            }
            times.sort();
            let _ = writeln!(
                table,
                "| {name} | `{path}` | {} | {} | {bytes} |",
                ms(median(&times)),
                ms(*times.last().unwrap_or(&Duration::ZERO)),
            );
        }
        Ok(())
    })();
    let _ = ui.kill();
    let _ = ui.wait();
    result?;
    let version: String = c
        .query_one("SELECT pg_catalog.current_setting('server_version')", &[])?
        .get(0);
    Ok(format!(
        "# Dashboard render times\n\n`workfence-ui-bench --items {} --requests {}`: PostgreSQL {version}, \
         queue `big` of {} items (60% done, 20% pending, 10% failed, 5% cancelled, 5% claimed) \
         beside 9 queues of 100, loaded in {load_s:.0} s. Each page fetched {} times after two \
         warm-ups, one request at a time over loopback, as the database's superuser, the \
         library preloaded (from 0.12.0 the queues page and `/metrics` read the state counts the \
         server keeps).\n\n{table}",
        plan.items, plan.requests, plan.items, plan.requests
    ))
}

fn main() {
    if workfence_harness::cli::help_requested(USAGE) {
        return;
    }
    let outcome = parse_args(std::env::args().skip(1)).and_then(|plan| {
        let report = run(&plan)?;
        print!("{report}");
        if let Some(out) = &plan.out {
            std::fs::write(out, &report)?;
        }
        Ok(())
    });
    if let Err(e) = outcome {
        eprintln!(
            "workfence-ui-bench: {}",
            workfence_harness::cli::error_chain(e.as_ref())
        );
        std::process::exit(1);
    }
}
