//! `scripts/demo.sh`, run as the script runs it: the demo binary on a
//! throwaway cluster directory, then the dashboard (`workfence-ui`) against
//! the cluster the demo left up, its queues page fetched over HTTP.
//!
//! What it proves: the scenario holds (exit 0, the verdict PASS); the demo's
//! cluster preloads the library, so the queue's counters count (the demo
//! checks `work_queue_stats`: A's three calls refused, one lapsed lease
//! claimed anew); and the dashboard's queues page shows those two figures,
//! not the '—' of a server that counts nothing.
//!
//! The demo starts the worker binary that sits next to it, and
//! `scripts/demo.sh` the dashboard from the same directory: build both first,
//! `cargo build --release -p workfence-harness -p workfence-ui --bins`
//! (`scripts/test.sh` runs this test right after building every binary;
//! CONTRIBUTING.md, tier 10). Needs the extension installed into Debian's
//! PostgreSQL 15 (`scripts/demo.sh` unsets `WORKFENCE_PG_CONFIG`, and so does
//! this test); the cluster lives under `$WORKFENCE_SCRATCH`, which the
//! `postgres` OS user must be able to reach when the test runs as root.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use workfence_harness::scenario::QUEUE;

const DEMO: &str = env!("CARGO_BIN_EXE_workfence-demo");

/// The counts the scenario leaves (the demo checks them too).
const REFUSED: &str = "3";
const LAPSED: &str = "1";

fn scratch() -> PathBuf {
    std::env::var_os("WORKFENCE_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

fn repo_root() -> &'static Path {
    // demo/ sits in the repository root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("demo/ has a parent")
}

/// A binary `scripts/demo.sh` builds beside the demo's.
fn sibling(name: &str) -> PathBuf {
    let exe = Path::new(DEMO).with_file_name(name);
    assert!(
        exe.is_file(),
        "{} not found: build it first, as scripts/demo.sh does: \
         cargo build --release -p workfence-harness -p workfence-ui --bins",
        exe.display()
    );
    exe
}

/// The demo's cluster directory; the cluster (which the demo leaves
/// running) is stopped on drop, and the directory removed, as
/// `scripts/demo.sh clean` does, unless the test failed (then it is left
/// for inspection, the server's log in it).
struct DemoDir(PathBuf);

impl Drop for DemoDir {
    fn drop(&mut self) {
        let stopped = Command::new("bash")
            .args(["-c", ". scripts/cluster.sh && cluster_stop \"$1\"", "_"])
            .arg(&self.0)
            .current_dir(repo_root())
            .env_remove("WORKFENCE_PG_CONFIG")
            .status();
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!(
                "could not stop the demo cluster in {} ({stopped:?}); left for inspection",
                self.0.display()
            );
            return;
        }
        if std::thread::panicking() {
            eprintln!(
                "the demo cluster is left in {} for inspection",
                self.0.display()
            );
            return;
        }
        if let Err(err) = std::fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {err}", self.0.display());
        }
    }
}

/// A running dashboard; killed when dropped.
struct Ui(Child);

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from `authority` (host:port) over HTTP/1.1: status line and body.
fn get(authority: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(authority).expect("connect to the dashboard");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or((response.as_str(), ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

/// The text of the cell `<td class="{class}">` in the row of `queue` of the
/// queues page (tags inside it dropped).
fn cell(page: &str, queue: &str, class: &str) -> String {
    let row_start = page
        .find(&format!("<tr data-queue=\"{queue}\">"))
        .unwrap_or_else(|| panic!("the queues page has no row for {queue}:\n{page}"));
    let row = &page[row_start..];
    let row = &row[..row.find("</tr>").expect("the row ends")];
    let open = format!("<td class=\"{class}\">");
    let start = row
        .find(&open)
        .unwrap_or_else(|| panic!("the row of {queue} has no {open}: {row}"))
        + open.len();
    let inner = &row[start..start + row[start..].find("</td>").expect("the cell ends")];
    let mut text = String::new();
    let mut in_tag = false;
    for c in inner.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.trim().to_owned()
}

#[test]
fn the_demo_counts_its_refusals_and_lapse_and_its_dashboard_shows_them() {
    let worker = sibling("workfence-worker");
    let ui_exe = sibling("workfence-ui");
    let dir = DemoDir(scratch().join(format!("demo-test-{}", std::process::id())));

    // The demo, as scripts/demo.sh runs it.
    let out = Command::new(DEMO)
        .arg("--dir")
        .arg(&dir.0)
        .env_remove("WORKFENCE_PG_CONFIG")
        .env("WORKFENCE_WORKER_EXE", &worker)
        .stdin(Stdio::null())
        .output()
        .expect("run workfence-demo");
    let printed = String::from_utf8_lossy(&out.stdout);
    let said = format!("{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "workfence-demo exited with {}:\n{said}",
        out.status
    );
    assert!(
        printed.contains("VERDICT: PASS"),
        "no PASS verdict:\n{said}"
    );
    assert!(
        printed.contains("pg_workfence preloaded"),
        "the demo does not say its cluster preloads the library:\n{said}"
    );
    let counters = format!("refused={REFUSED} lapsed={LAPSED}  [ok:");
    assert!(
        printed.contains(&counters),
        "the demo's counters line lacks {counters:?}:\n{said}"
    );

    // The dashboard, as scripts/demo.sh starts it: the port of the cluster
    // is line 4 of postmaster.pid.
    let pid_file = std::fs::read_to_string(dir.0.join("postmaster.pid"))
        .expect("the demo leaves its cluster running (postmaster.pid)");
    let db_port = pid_file.lines().nth(3).expect("postmaster.pid line 4");
    let mut ui = Ui(Command::new(&ui_exe)
        .args([
            "--dsn",
            &format!("host=127.0.0.1 port={db_port} user=postgres dbname=workfence_demo"),
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("WORKFENCE_UI_BASIC_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start workfence-ui"));
    // Kept open to the end: the dashboard may print more.
    let mut stdout = BufReader::new(ui.0.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("the dashboard's listening line");
    let authority = line
        .trim_end()
        .strip_prefix("workfence-ui listening on http://")
        .unwrap_or_else(|| panic!("workfence-ui did not print its address: {line:?}"))
        .trim_end_matches('/')
        .to_owned();

    let (status, page) = get(&authority, "/");
    assert!(status.contains(" 200 "), "GET /: {status}\n{page}");
    let refused = cell(&page, QUEUE, "num refused");
    let lapsed = cell(&page, QUEUE, "num lapsed");
    assert_eq!(
        (refused.as_str(), lapsed.as_str()),
        (REFUSED, LAPSED),
        "the queues page's refused and lapsed of routines ('—': not counted, the \
         library not preloaded)"
    );
    drop(stdout);
}
