//! The dashboard in a real browser: Debian's Chromium, headless, driven
//! through WebDriver (Debian's `chromedriver`, with the `fantoccini` client),
//! against the real `workfence-ui` binary on a throwaway cluster with the
//! extension, preloaded (`shared_preload_libraries`: the counters and the
//! charts of a queue's last hour).
//!
//! What a person does with the pages: load each of them (the queues, a
//! queue's items with a state filter and the next page, an item, the
//! schedules, a queue's charts, an item's workflow graph, following its links), retry a failed item by clicking, pause and resume a queue and
//! a schedule by clicking; each time
//! the database is checked to have changed and the page to show it. And what
//! must not happen: a payload with a `<script>` runs no script (it stays
//! text), and a form posted from another site changes nothing.
//!
//! One cluster and one `chromedriver` are shared by the tests that run at the
//! same time (stopped when the last of them is done); each test has a
//! database of its own, a `workfence-ui` of its own on it, and a browser
//! session of its own with a fresh profile. Every wait is for something to be
//! there (a line a process prints, an element or a location the browser
//! shows), looked for again until a deadline; nothing waits a fixed time.
//!
//! Screenshots (PNG, 1440 pixels wide, as high as the page from 900 to 1200)
//! are saved as test artefacts in
//! `target/dashboard-screenshots/`; with `WORKFENCE_UPDATE_SCREENSHOTS=1` the
//! README's (one per page) are written to `docs/screenshots/` too.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (scripts/setup.sh
//! installs Debian's `chromium` and `chromium-driver`) and the extension
//! installed into PostgreSQL 15 (scripts/install-build.sh 15).

use std::fs::{self, File};
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use workfence_harness::calls::{self, Enqueue, RunAt, Token};
use workfence_harness::testing::ok;
use workfence_harness::Cluster;

const UI_EXE: &str = env!("CARGO_BIN_EXE_workfence-ui");
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// The viewport the pages are shown in: every screenshot is this wide, and
/// this high or as high as the page, up to [`MAX_SHOT_HEIGHT`].
const WINDOW: (u32, u32) = (1440, 900);

/// The tallest screenshot (a page longer than this is cut).
const MAX_SHOT_HEIGHT: u32 = 1200;

/// The longest any wait here lasts: a process to start, a page to show
/// something.
const DEADLINE: Duration = Duration::from_secs(30);

/// How often a wait looks again (it ends at the first look that sees it).
const POLL: Duration = Duration::from_millis(25);

/// Makes names (databases, profiles) unique within this process.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// Where throwaway clusters and browser profiles live: `$WORKFENCE_SCRATCH`
/// (a directory the postgres OS user can reach), else cargo's scratch
/// directory for tests.
fn scratch_base() -> PathBuf {
    std::env::var_os("WORKFENCE_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

/// `target/dashboard-screenshots` (beside cargo's `target/tmp`).
fn artefact_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory")
        .join("dashboard-screenshots")
}

/// A line a child process printed that `pick` accepts, if it printed one
/// within [`DEADLINE`]; every line it printed is kept in `log`. The rest of
/// its output goes on being read (and logged), so that it never blocks on a
/// full pipe.
fn wait_for_line(
    output: impl Read + Send + 'static,
    log: PathBuf,
    pick: fn(&str) -> Option<String>,
) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut log = File::create(&log).ok();
        let mut sent = false;
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if let Some(log) = log.as_mut() {
                let _ = writeln!(log, "{line}");
            }
            if !sent {
                if let Some(found) = pick(&line) {
                    sent = tx.send(found).is_ok();
                }
            }
        }
    });
    rx.recv_timeout(DEADLINE).ok()
}

/// Ends `child` (it did not start as it should) and panics with `what` and
/// the logs it wrote.
fn failed_start(mut child: Child, what: &str, logs: &[&Path]) -> ! {
    let _ = child.kill();
    let _ = child.wait();
    let mut text = String::new();
    for log in logs {
        text.push_str(&format!(
            "\n--- {} ---\n{}",
            log.display(),
            fs::read_to_string(log).unwrap_or_default()
        ));
    }
    panic!("{what}{text}")
}

/// `GET path` over plain HTTP/1.1: the response's body (read to its
/// `Content-Length`: chromedriver keeps the connection open).
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(DEADLINE))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `POST path` with the JSON `body` over plain HTTP/1.1: the response's body (read to its
/// `Content-Length`).
fn http_post(port: u16, path: &str, body: &Value) -> std::io::Result<String> {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(DEADLINE))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A `chromedriver` child process on a port it chose itself.
struct ChromeDriver {
    child: Child,
    port: u16,
}

impl ChromeDriver {
    /// Starts it and returns once its `/status` says it is ready for a new
    /// session.
    fn start(dir: &Path) -> ChromeDriver {
        let mut child = ok(
            Command::new(CHROMEDRIVER)
                .arg("--port=0")
                .arg(format!(
                    "--log-path={}",
                    dir.join("chromedriver.log").display()
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn(),
            "starting /usr/bin/chromedriver (scripts/setup.sh installs chromium-driver)",
        );
        let stdout = child.stdout.take().expect("piped stdout");
        let out = dir.join("chromedriver.out");
        // "ChromeDriver was started successfully on port 44985."
        let port = wait_for_line(stdout, out.clone(), |line| {
            line.strip_prefix("ChromeDriver was started successfully on port ")
                .map(|rest| rest.trim_end_matches('.').to_owned())
        })
        .and_then(|port| port.parse::<u16>().ok());
        let Some(port) = port else {
            failed_start(
                child,
                &format!("chromedriver printed no port within {DEADLINE:?}"),
                &[&out, &dir.join("chromedriver.log")],
            )
        };
        let driver = ChromeDriver { child, port };
        let deadline = Instant::now() + DEADLINE;
        loop {
            let status = http_get(port, "/status").unwrap_or_default();
            if status.contains("\"ready\":true") {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver on port {port} not ready within {DEADLINE:?}: {status}"
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What the tests running at the same time share: a cluster and a
/// chromedriver.
struct Shared {
    cluster: Cluster,
    driver: ChromeDriver,
    /// Where this run's logs and browser profiles go (removed last).
    dir: ScratchDir,
}

/// The [`Shared`] of the tests running now; it stops when the last of them
/// drops its handle.
fn shared() -> Arc<Shared> {
    static SHARED: Mutex<Weak<Shared>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = slot.upgrade() {
        return shared;
    }
    let dir = scratch_base().join(format!(
        "browser-{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    ));
    ok(fs::create_dir_all(&dir), "creating the scratch directory");
    let dir = ScratchDir(dir);
    // The library preloaded, as the demo's cluster and a deployment that wants the counters
    // and the charts have it: the server keeps each queue's last hour for the charts.
    let cluster = ok(
        Cluster::builder(scratch_base())
            .setting("shared_preload_libraries", "pg_workfence")
            .start(),
        "starting a throwaway PostgreSQL cluster with the library preloaded",
    );
    let driver = ChromeDriver::start(&dir.0);
    let shared = Arc::new(Shared {
        cluster,
        driver,
        dir,
    });
    *slot = Arc::downgrade(&shared);
    shared
}

/// A `workfence-ui` child process on a database of its own.
struct Ui {
    child: Child,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    base: String,
    log: PathBuf,
}

impl Ui {
    /// Starts `workfence-ui --dsn ... --listen 127.0.0.1:0` against `database`
    /// and returns once it printed the address it listens on.
    fn start(shared: &Shared, database: &str) -> Ui {
        let log = shared.dir.0.join(format!("{database}.ui.log"));
        let mut child = ok(
            Command::new(UI_EXE)
                .arg("--dsn")
                .arg(shared.cluster.connection_string(database))
                .arg("--listen")
                .arg("127.0.0.1:0")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(ok(File::create(&log), "creating the ui's log"))
                .spawn(),
            "starting workfence-ui",
        );
        let stdout = child.stdout.take().expect("piped stdout");
        let out = shared.dir.0.join(format!("{database}.ui.out"));
        let base = wait_for_line(stdout, out.clone(), |line| {
            line.strip_prefix("workfence-ui listening on ")
                .map(|url| url.trim_end_matches('/').to_owned())
        });
        let Some(base) = base else {
            failed_start(
                child,
                &format!("workfence-ui printed no \"listening on\" line within {DEADLINE:?}"),
                &[&out, &log],
            )
        };
        assert!(base.starts_with("http://127.0.0.1:"), "listening on {base}");
        Ui { child, base, log }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- workfence-ui's stderr ---\n{text}");
        }
    }
}

/// A test's own database (with the extension), connection and dashboard.
struct Fixture {
    db: postgres::Client,
    ui: Ui,
    browser: Browser,
    // Dropped last: the cluster and chromedriver the others use.
    _shared: Arc<Shared>,
}

fn fixture(name: &str) -> Fixture {
    let shared = shared();
    let database = format!("{name}_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    ok(
        shared.cluster.create_database(&database),
        "creating the test database (CREATE EXTENSION pg_workfence)",
    );
    let db = ok(shared.cluster.connect_to(&database), "connecting");
    let ui = Ui::start(&shared, &database);
    let browser = Browser::open(&shared, &database);
    Fixture {
        db,
        ui,
        browser,
        _shared: shared,
    }
}

/// A WebDriver session of headless Chromium, with a fresh profile, and the
/// runtime its client runs on (the tests are plain threads, so that the
/// blocking database calls run outside the runtime).
struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    profile: PathBuf,
    /// The port of the chromedriver the session runs in.
    driver_port: u16,
}

impl Browser {
    fn open(shared: &Shared, name: &str) -> Browser {
        let runtime = ok(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            "building a tokio runtime",
        );
        let profile = shared.dir.0.join(format!("{name}.profile"));
        ok(fs::create_dir_all(&profile), "creating the browser profile");
        // As root, Chromium needs --no-sandbox; the background-networking
        // flags keep it from reaching for hosts this machine cannot reach.
        let capabilities = json!({
            "browserName": "chrome",
            // A script's alert stays open, where the XSS test looks for it.
            "unhandledPromptBehavior": "ignore",
            // The console's messages, a refused Content Security Policy's among them
            // (console_messages).
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--hide-scrollbars",
                    format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let webdriver = format!("http://127.0.0.1:{}", shared.driver.port);
        let client = ok(
            runtime.block_on(
                ClientBuilder::native()
                    .capabilities(capabilities)
                    .connect(&webdriver),
            ),
            "opening a Chromium session through chromedriver",
        );
        let browser = Browser {
            runtime,
            client: Some(client),
            profile,
            driver_port: shared.driver.port,
        };
        browser.run(set_viewport(browser.client(), WINDOW.1));
        browser
    }

    /// Runs the browser steps `steps` to their end.
    fn run<F: Future>(&self, steps: F) -> F::Output {
        self.runtime.block_on(steps)
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("session open")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = fs::remove_dir_all(&self.profile);
    }
}

// --- browser steps -------------------------------------------------------

/// Loads `url` (returns once the page has loaded).
async fn goto(c: &Client, url: &str) {
    ok(c.goto(url).await, &format!("loading {url}"));
}

/// The element `css` selects, once the page has it.
async fn wait_for(c: &Client, css: &str) -> Element {
    ok(
        c.wait()
            .at_most(DEADLINE)
            .every(POLL)
            .for_element(Locator::Css(css))
            .await,
        &format!("waiting for {css} on the page"),
    )
}

/// The result of `script` (a function body returning a value), once it is
/// not `null` or `false`.
async fn wait_for_script(c: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let value = ok(c.execute(script, vec![]).await, what);
        if !value.is_null() && value != Value::Bool(false) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {DEADLINE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The text of the element `css` selects (which must be on the page).
async fn text_of(c: &Client, css: &str) -> String {
    let element = ok(c.find(Locator::Css(css)).await, &format!("finding {css}"));
    ok(element.text().await, &format!("reading the text of {css}"))
}

/// How many elements `css` selects.
async fn count(c: &Client, css: &str) -> usize {
    ok(
        c.find_all(Locator::Css(css)).await,
        &format!("finding {css}"),
    )
    .len()
}

/// The `data-id` of every row of `#items`, in page order.
async fn listed_ids(c: &Client) -> Vec<i64> {
    let rows = ok(
        c.find_all(Locator::Css("#items tr[data-id]")).await,
        "finding the rows of #items",
    );
    let mut ids = Vec::with_capacity(rows.len());
    for row in rows {
        let id = ok(row.attr("data-id").await, "reading data-id").expect("a data-id");
        ids.push(id.parse().expect("data-id is an item id"));
    }
    ids
}

/// The HTTP status of the page shown (the navigation's response).
async fn response_status(c: &Client) -> i64 {
    let status = ok(
        c.execute(
            "return performance.getEntriesByType('navigation')[0].responseStatus;",
            vec![],
        )
        .await,
        "reading the page's response status",
    );
    status.as_i64().expect("a response status")
}

/// The text of an open alert, if a script opened one.
async fn open_alert(c: &Client) -> Option<String> {
    match c.get_alert_text().await {
        Ok(text) => Some(text),
        Err(e) if e.is_no_such_alert() => None,
        Err(e) => panic!("asking for an open alert: {e}"),
    }
}

/// The console's messages since the last call (chromedriver's browser log, which the session
/// asks for with `goog:loggingPrefs`): each one's level and text. A style or script that the
/// Content Security Policy refuses is a `SEVERE` message naming the policy.
async fn console_messages(c: &Client, driver_port: u16) -> Vec<(String, String)> {
    let session = ok(c.session_id().await, "the session's id").expect("a session");
    let reply = ok(
        http_post(
            driver_port,
            &format!("/session/{session}/se/log"),
            &json!({ "type": "browser" }),
        ),
        "reading the browser's log",
    );
    let reply: Value = ok(serde_json::from_str(&reply), "the log is JSON");
    let entries = reply["value"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of log entries: {reply}"));
    entries
        .iter()
        .map(|e| {
            (
                e["level"].as_str().unwrap_or("").to_owned(),
                e["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Resizes the window so that its viewport is [`WINDOW`]`.0` wide and
/// `height` high (`--window-size` sets the outer size, frame included).
async fn set_viewport(c: &Client, height: u32) {
    let frame = ok(
        c.execute(
            "return [window.outerWidth - window.innerWidth, \
                     window.outerHeight - window.innerHeight];",
            vec![],
        )
        .await,
        "measuring the window's frame",
    );
    let frame = |i: usize| frame[i].as_u64().expect("a frame size") as u32;
    ok(
        c.set_window_size(WINDOW.0 + frame(0), height + frame(1))
            .await,
        "resizing the window",
    );
}

/// The width and height of a PNG (its IHDR chunk).
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(
        png.len() > 24 && png.starts_with(b"\x89PNG\r\n\x1a\n") && &png[12..16] == b"IHDR",
        "a PNG"
    );
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20))
}

/// Saves a screenshot of the page, [`WINDOW`]`.0` wide and as high as the
/// page (at least [`WINDOW`]`.1`, at most [`MAX_SHOT_HEIGHT`]), as
/// `target/dashboard-screenshots/<name>.png`, and as
/// `docs/screenshots/<name>.png` too when `readme` and
/// `WORKFENCE_UPDATE_SCREENSHOTS=1`.
async fn screenshot(c: &Client, name: &str, readme: bool) {
    let content = ok(
        c.execute("return document.documentElement.scrollHeight;", vec![])
            .await,
        "measuring the page",
    );
    let height = (content.as_u64().expect("a height") as u32).clamp(WINDOW.1, MAX_SHOT_HEIGHT);
    set_viewport(c, height).await;
    let png = ok(c.screenshot().await, "taking a screenshot");
    set_viewport(c, WINDOW.1).await;
    assert_eq!(png_size(&png), (WINDOW.0, height), "the screenshot's size");
    let dir = artefact_dir();
    ok(
        fs::create_dir_all(&dir),
        "creating target/dashboard-screenshots",
    );
    ok(
        fs::write(dir.join(format!("{name}.png")), &png),
        "saving a screenshot",
    );
    if readme && std::env::var("WORKFENCE_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
        ok(fs::create_dir_all(&docs), "creating docs/screenshots");
        ok(
            fs::write(docs.join(format!("{name}.png")), &png),
            "saving a README screenshot",
        );
    }
}

// --- the database side -----------------------------------------------------

fn enqueue(db: &mut postgres::Client, item: Enqueue) -> i64 {
    ok(calls::enqueue(db, &item), "work_enqueue").id
}

/// Claims the item `key` of `queue` as `owner`: its token.
fn claim(db: &mut postgres::Client, queue: &str, key: &str, owner: &str, lease: &str) -> Token {
    let claim = ok(
        calls::claim_key(db, queue, key, owner, lease),
        "work_claim_key",
    )
    .unwrap_or_else(|| panic!("{queue}/{key} was claimable"));
    claim.token(owner)
}

fn state_of(db: &mut postgres::Client, id: i64) -> String {
    ok(calls::item_by_id(db, id), "work_item")
        .expect("the item exists")
        .state
}

fn is_paused(db: &mut postgres::Client, queue: &str) -> bool {
    ok(calls::queue_stats(db), "work_queue_stats")
        .into_iter()
        .find(|stats| stats.queue == queue)
        .unwrap_or_else(|| panic!("queue {queue} in work_queue_stats"))
        .paused
}

/// The ids of `queue`'s items in `state` (every state: `None`), in the order
/// the items page lists them (docs/contract.md, `work_items`), read from the
/// table itself.
fn ids_in_order(db: &mut postgres::Client, queue: &str, state: Option<&str>) -> Vec<i64> {
    let order = match state {
        None => "key DESC",
        Some("pending") => "priority, run_at, id",
        Some("claimed") => "lease_until, id",
        Some(_) => "finished_at DESC, id DESC",
    };
    let sql = format!(
        "SELECT id FROM workfence.items \
          WHERE queue = $1 AND ($2::text IS NULL OR state::text = $2) ORDER BY {order}"
    );
    ok(db.query(&sql, &[&queue, &state]), "reading workfence.items")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A failed item: enqueued with one attempt, claimed, failed (the dead letter).
fn dead_letter(
    db: &mut postgres::Client,
    queue: &str,
    key: &str,
    payload: Value,
    error: &str,
) -> i64 {
    let id = enqueue(
        db,
        Enqueue::new(queue)
            .key(key)
            .payload(payload)
            .max_attempts(1),
    );
    let token = claim(db, queue, key, "worker-1", "5 minutes");
    assert!(ok(calls::fail(db, &token, error, None), "work_fail"));
    assert_eq!(state_of(db, id), "failed");
    id
}

/// The checkpoint of the item the item page shows: the send's message id,
/// kept so that a run after this one sends under the same id.
fn tour_checkpoint() -> Value {
    json!({ "step": "rendered", "message_id": "<welcome-ada@mail.example.com>" })
}

/// The README's scene: a few queues with items in every state. Returns the
/// id of the item the item page shows (claimed, after a failed attempt).
fn seed_tour(db: &mut postgres::Client) -> i64 {
    // A new database's state counts are not known until a read rebuilds them: read now, so
    // that the history knows each queue's backlog (the queue page's chart) from here on.
    ok(calls::queue_stats(db), "work_queue_stats");
    let people = [
        "ada", "grace", "alan", "edsger", "barbara", "ken", "dennis", "margaret",
    ];
    // emails: done, failed, cancelled, claimed, scheduled and pending items,
    // more than one page of them.
    for n in 0..40 {
        let key = format!("welcome-{n:03}");
        enqueue(
            db,
            Enqueue::new("emails").key(&key).payload(json!({
                "to": format!("{}@example.com", people[n % people.len()]),
                "template": "welcome",
            })),
        );
        let token = claim(db, "emails", &key, "mailer-1", "5 minutes");
        let result = json!({ "message_id": format!("<{n}@mail.example.com>") });
        assert!(ok(calls::finish(db, &token, Some(&result)), "work_finish"));
    }
    for (n, person) in people.iter().enumerate().take(2) {
        dead_letter(
            db,
            "emails",
            &format!("digest-{n:03}"),
            json!({ "to": format!("{person}@example.net"), "template": "digest" }),
            "SMTP 550 5.1.1: mailbox unavailable",
        );
    }
    enqueue(db, Enqueue::new("emails").key("newsletter-001"));
    assert!(ok(
        calls::cancel(db, "emails", "newsletter-001"),
        "work_cancel"
    ));
    // The item page's item: failed once, claimed again by another worker.
    let shown = enqueue(
        db,
        Enqueue::new("emails")
            .key("welcome-ada")
            .payload(json!({ "to": "ada@example.com", "template": "welcome", "locale": "en-GB" }))
            .max_attempts(5),
    );
    let first = claim(db, "emails", "welcome-ada", "mailer-1", "5 minutes");
    assert!(ok(
        calls::fail(
            db,
            &first,
            "connection reset by smtp.example.com:587",
            Some("0 seconds")
        ),
        "work_fail"
    ));
    let second = claim(db, "emails", "welcome-ada", "mailer-2", "10 minutes");
    assert!(ok(
        calls::generated::work_progress(
            db,
            second.id,
            &second.owner,
            second.epoch,
            &tour_checkpoint()
        ),
        "work_progress"
    ));
    for (n, person) in people.iter().enumerate().take(3) {
        enqueue(
            db,
            Enqueue::new("emails")
                .key(format!("reminder-{n:03}"))
                .payload(json!({ "to": format!("{person}@example.com"), "template": "reminder" }))
                .run_at(RunAt::In("1 hour".into())),
        );
    }
    for n in 0..12 {
        enqueue(
            db,
            Enqueue::new("emails")
                .key(format!("welcome-{:03}", 40 + n))
                .payload(json!({
                    "to": format!("{}@example.org", people[n % people.len()]),
                    "template": "welcome",
                })),
        );
    }
    // thumbnails: a busy queue with a concurrency limit.
    for n in 0..9 {
        enqueue(
            db,
            Enqueue::new("thumbnails")
                .key(format!("img-{n:04}"))
                .payload(json!({ "image": format!("uploads/{n:04}.jpg"), "sizes": [64, 256] })),
        );
    }
    claim(db, "thumbnails", "img-0000", "resizer-a", "2 minutes");
    claim(db, "thumbnails", "img-0001", "resizer-b", "2 minutes");
    ok(
        calls::work_limit(db, "thumbnails", Some(4), None, "1 second"),
        "work_limit",
    );
    // webhooks: paused, with work waiting.
    for n in 0..5 {
        enqueue(
            db,
            Enqueue::new("webhooks")
                .key(format!("hook-{n:03}"))
                .payload(json!({ "url": "https://hooks.example.com/orders", "order": 1000 + n })),
        );
    }
    assert!(ok(calls::pause(db, "webhooks"), "work_pause"));
    shown
}

// --- the tests -------------------------------------------------------------

/// Each page loads and shows what the database holds: the queues page its
/// counts, a queue's items page every item over its pages (following the
/// next link) and the failed ones under the state filter, and an item's page
/// its payload, checkpoint, error history and lease. The README's screenshots.
#[test]
fn every_page_shows_what_the_database_holds() {
    let mut f = fixture("tour");
    let shown = seed_tour(&mut f.db);
    let stats = ok(calls::queue_stats(&mut f.db), "work_queue_stats");
    assert_eq!(stats.len(), 3, "three queues seeded");
    let all_ids = ids_in_order(&mut f.db, "emails", None);
    let failed_ids = ids_in_order(&mut f.db, "emails", Some("failed"));
    assert_eq!(failed_ids.len(), 2);
    let item = ok(calls::item_by_id(&mut f.db, shown), "work_item").expect("the item");
    let (b, ui) = (&f.browser, &f.ui);

    b.run(async {
        let c = b.client();
        // The queues page: one row per queue, each count as the view has it.
        goto(c, &ui.url("/")).await;
        wait_for(c, "#queues").await;
        assert_eq!(count(c, "#queues tr[data-queue]").await, 3);
        for s in &stats {
            let row = format!("#queues tr[data-queue=\"{}\"]", s.queue);
            for (column, value) in [
                ("pending", s.pending),
                ("scheduled", s.scheduled),
                ("claimed", s.claimed),
                ("expired", s.expired),
                ("done", s.done),
                ("failed", s.failed),
                ("cancelled", s.cancelled),
            ] {
                let shown = text_of(c, &format!("{row} td.{column}")).await;
                assert_eq!(
                    shown.trim().parse::<i64>().ok(),
                    Some(value),
                    "{} {column}: the page shows {shown:?}",
                    s.queue
                );
            }
            // A paused queue offers resume, the others pause.
            let (offered, not_offered) = if s.paused {
                ("resume", "pause")
            } else {
                ("pause", "resume")
            };
            assert_eq!(
                count(c, &format!("{row} button[data-action=\"{offered}\"]")).await,
                1,
                "{} offers {offered}",
                s.queue
            );
            assert_eq!(
                count(c, &format!("{row} button[data-action=\"{not_offered}\"]")).await,
                0,
                "{} offers no {not_offered}",
                s.queue
            );
        }
        screenshot(c, "queues", true).await;

        // The queue's name leads to its items page; following the next link
        // walks every item, by key descending, each exactly once.
        ok(
            ok(
                c.find(Locator::Css(
                    "#queues tr[data-queue=\"emails\"] a[href=\"/queues/emails\"]",
                ))
                .await,
                "the link to the emails queue",
            )
            .click()
            .await,
            "clicking the emails queue",
        );
        wait_for(c, "#items").await;
        screenshot(c, "items", true).await;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page = listed_ids(c).await;
            assert!(!page.is_empty(), "page {} of emails lists items", pages + 1);
            seen.extend(page);
            pages += 1;
            assert!(pages <= all_ids.len(), "the next links end");
            if count(c, "#next").await == 0 {
                break;
            }
            let last = *seen.last().expect("an item");
            let next = ok(c.find(Locator::Id("next")).await, "#next");
            let href = ok(next.attr("href").await, "#next's href").expect("an href");
            assert!(
                href.contains(&format!("after={last}")),
                "#next continues after the last row shown ({last}): {href}"
            );
            ok(next.click().await, "clicking #next");
            // The next page is there once the browser shows its address, loaded.
            wait_for_script(
                c,
                "the next page",
                &format!(
                    "return location.search.includes('after={last}') \
                            && document.readyState === 'complete';"
                ),
            )
            .await;
        }
        assert!(
            pages >= 2,
            "the emails queue has more items than a page holds"
        );
        assert_eq!(
            seen, all_ids,
            "the pages list every item once, by key descending"
        );

        // The state filter: only the failed items, newest failure first.
        goto(c, &ui.url("/queues/emails")).await;
        let filter = wait_for(c, "a[href*=\"state=failed\"]").await;
        ok(filter.click().await, "clicking the failed filter");
        wait_for_script(
            c,
            "the failed filter applied",
            "return location.search.includes('state=failed') \
                    && document.readyState === 'complete';",
        )
        .await;
        wait_for(c, "#items").await;
        assert_eq!(listed_ids(c).await, failed_ids);
        assert_eq!(count(c, "#next").await, 0, "two failed items fit one page");
        screenshot(c, "items-failed", false).await;

        // An item's page: from its row's link.
        goto(c, &ui.url("/queues/emails?state=claimed")).await;
        let link = wait_for(
            c,
            &format!("#items tr[data-id=\"{shown}\"] a[href=\"/items/{shown}\"]"),
        )
        .await;
        ok(link.click().await, "clicking the item");
        wait_for(c, "#payload").await;
        assert_eq!(text_of(c, "#state").await.trim(), "claimed");
        let payload: Value = ok(
            serde_json::from_str(&text_of(c, "#payload").await),
            "#payload is the payload's JSON",
        );
        assert_eq!(payload, item.payload);
        let checkpoint: Value = ok(
            serde_json::from_str(&text_of(c, "#progress").await),
            "#progress is the checkpoint's JSON",
        );
        assert_eq!(checkpoint, tour_checkpoint());
        let errors = text_of(c, "#errors").await;
        assert!(
            errors.contains("connection reset by smtp.example.com:587")
                && errors.contains("mailer-1"),
            "the error history: {errors}"
        );
        let lease = text_of(c, "#lease").await;
        let epoch = item.epoch.expect("claimed: an epoch");
        assert!(
            lease.contains("mailer-2") && lease.contains(&epoch.to_string()),
            "the lease (owner mailer-2, epoch {epoch}): {lease}"
        );
        assert!(!text_of(c, "#lease-status").await.trim().is_empty());
        screenshot(c, "item", true).await;
    });
}

/// A failed item's retry button puts it back to pending: in the database,
/// and on the page the click leads back to.
#[test]
fn retry_by_click() {
    let mut f = fixture("retry");
    let id = dead_letter(
        &mut f.db,
        "billing",
        "invoice-42",
        json!({ "invoice": 42, "amount": "19.99" }),
        "card declined",
    );
    let (b, ui) = (&f.browser, &f.ui);
    b.run(async {
        let c = b.client();
        goto(c, &ui.url(&format!("/items/{id}"))).await;
        wait_for(c, "#state").await;
        assert_eq!(text_of(c, "#state").await.trim(), "failed");
        assert_eq!(
            text_of(c, "#progress").await.trim(),
            "none",
            "no checkpoint was stored"
        );
        assert_eq!(count(c, "#flash").await, 0);
        screenshot(c, "item-failed", false).await;
        let retry = wait_for(c, "button[data-action=\"retry\"]").await;
        ok(retry.click().await, "clicking retry");
        // The page the action leads back to says what was done.
        wait_for(c, "#flash").await;
        assert_eq!(response_status(c).await, 200);
        assert!(
            c.current_url().await.expect("url").path() == format!("/items/{id}"),
            "back on the item's page"
        );
        assert_eq!(text_of(c, "#state").await.trim(), "pending");
        assert!(
            text_of(c, "#errors").await.contains("card declined"),
            "the error history is kept"
        );
        assert_eq!(
            count(c, "button[data-action=\"retry\"]").await,
            0,
            "a pending item offers no retry"
        );
        screenshot(c, "item-retried", false).await;
    });
    assert_eq!(
        state_of(&mut f.db, id),
        "pending",
        "the retry reached the database"
    );
    let item = ok(calls::item_by_id(&mut f.db, id), "work_item").expect("the item");
    assert!(item.max_attempts > item.attempts, "allowed another attempt");

    // And the failed filter of its queue no longer lists it.
    b.run(async {
        let c = b.client();
        goto(c, &ui.url("/queues/billing?state=failed")).await;
        wait_for(c, "#no-items").await;
        assert_eq!(listed_ids(c).await, Vec::<i64>::new());
        goto(c, &ui.url("/queues/billing?state=pending")).await;
        wait_for(c, "#items").await;
        assert_eq!(listed_ids(c).await, vec![id]);
    });
}

/// The queues page's pause button pauses the queue, and its resume button
/// resumes it: `work_queue_stats.paused` each time, and the page shows it.
#[test]
fn pause_and_resume_by_click() {
    let mut f = fixture("pause");
    for n in 0..3 {
        enqueue(&mut f.db, Enqueue::new("imports").key(format!("file-{n}")));
    }
    enqueue(&mut f.db, Enqueue::new("exports").key("file-0"));
    let (b, ui) = (&f.browser, &f.ui);
    let row = "#queues tr[data-queue=\"imports\"]";
    let running_text = b.run(async {
        let c = b.client();
        goto(c, &ui.url("/")).await;
        let pause = wait_for(c, &format!("{row} button[data-action=\"pause\"]")).await;
        let running_text = text_of(c, &format!("{row} td.paused")).await;
        ok(pause.click().await, "clicking pause");
        wait_for(c, &format!("{row} button[data-action=\"resume\"]")).await;
        wait_for(c, "#flash").await;
        assert_eq!(response_status(c).await, 200);
        assert_eq!(
            count(c, &format!("{row} button[data-action=\"pause\"]")).await,
            0
        );
        let paused_text = text_of(c, &format!("{row} td.paused")).await;
        assert_ne!(paused_text, running_text, "the paused column changes");
        // The other queue is untouched.
        assert_eq!(
            count(
                c,
                "#queues tr[data-queue=\"exports\"] button[data-action=\"pause\"]"
            )
            .await,
            1
        );
        screenshot(c, "queues-paused", false).await;
        running_text
    });
    assert!(
        is_paused(&mut f.db, "imports"),
        "the pause reached the database"
    );
    assert!(!is_paused(&mut f.db, "exports"));

    b.run(async {
        let c = b.client();
        // From a fresh load of the page, as a person coming back would.
        goto(c, &ui.url("/")).await;
        let resume = wait_for(c, &format!("{row} button[data-action=\"resume\"]")).await;
        ok(resume.click().await, "clicking resume");
        wait_for(c, &format!("{row} button[data-action=\"pause\"]")).await;
        wait_for(c, "#flash").await;
        assert_eq!(response_status(c).await, 200);
        assert_eq!(text_of(c, &format!("{row} td.paused")).await, running_text);
    });
    assert!(
        !is_paused(&mut f.db, "imports"),
        "the resume reached the database"
    );
}

/// Whether schedule `name` is paused (`work_schedules.paused`).
fn schedule_paused(db: &mut postgres::Client, name: &str) -> bool {
    ok(
        db.query_one(
            "SELECT s.paused FROM workfence.work_schedules AS s WHERE s.name = $1",
            &[&name],
        ),
        "work_schedules",
    )
    .get(0)
}

/// The schedules page (from 0.12.0) lists the schedules, its pause button
/// pauses one (`work_schedules.paused`) and its resume button resumes it; the
/// page shows each. The README's screenshot of the page.
#[test]
fn pause_and_resume_a_schedule_by_click() {
    let mut f = fixture("schedules");
    for (name, cron, queue, timezone) in [
        ("nightly-report", "0 2 * * *", "reports", "Europe/Berlin"),
        ("hourly-sync", "0 * * * *", "sync", "UTC"),
        ("weekly-digest", "0 8 * * 1", "emails", "America/New_York"),
    ] {
        assert!(ok(
            calls::schedule(&mut f.db, name, cron, queue, timezone, "latest"),
            "work_schedule"
        ));
    }
    // One of them has fired (as the superuser: its next slot the start of
    // this hour, a slot of its expression).
    ok(
        f.db.execute(
            "UPDATE workfence.schedules \
                SET next_slot = pg_catalog.date_trunc('hour', pg_catalog.clock_timestamp()) \
              WHERE name = 'hourly-sync'",
            &[],
        ),
        "moving a next slot",
    );
    assert_eq!(
        ok(calls::fire_schedules(&mut f.db), "work_fire_schedules"),
        1
    );
    let (b, ui) = (&f.browser, &f.ui);
    let row = "#schedules tr[data-schedule=\"nightly-report\"]";
    b.run(async {
        let c = b.client();
        goto(c, &ui.url("/")).await;
        let link = wait_for(c, "nav a[href=\"/schedules\"]").await;
        ok(link.click().await, "clicking schedules in the navigation");
        wait_for(c, "#schedules").await;
        assert_eq!(count(c, "#schedules tr[data-schedule]").await, 3);
        assert_eq!(
            count(
                c,
                "#schedules tr[data-schedule=\"hourly-sync\"] td.last-item a"
            )
            .await,
            1,
            "the fired schedule links its item"
        );
        screenshot(c, "schedules", true).await;
        let pause = wait_for(c, &format!("{row} button[data-action=\"pause-schedule\"]")).await;
        assert_eq!(text_of(c, &format!("{row} td.paused")).await, "no");
        ok(pause.click().await, "clicking pause");
        wait_for(c, &format!("{row} button[data-action=\"resume-schedule\"]")).await;
        wait_for(c, "#flash").await;
        assert_eq!(response_status(c).await, 200);
        assert_eq!(text_of(c, &format!("{row} td.paused")).await, "paused");
        // The others are untouched.
        assert_eq!(
            count(c, "#schedules button[data-action=\"pause-schedule\"]").await,
            2
        );
    });
    assert!(
        schedule_paused(&mut f.db, "nightly-report"),
        "the pause reached the database"
    );
    assert!(!schedule_paused(&mut f.db, "hourly-sync"));
    b.run(async {
        let c = b.client();
        goto(c, &ui.url("/schedules")).await;
        let resume = wait_for(c, &format!("{row} button[data-action=\"resume-schedule\"]")).await;
        ok(resume.click().await, "clicking resume");
        wait_for(c, &format!("{row} button[data-action=\"pause-schedule\"]")).await;
        wait_for(c, "#flash").await;
        assert_eq!(response_status(c).await, 200);
        assert_eq!(text_of(c, &format!("{row} td.paused")).await, "no");
    });
    assert!(
        !schedule_paused(&mut f.db, "nightly-report"),
        "the resume reached the database"
    );
}

/// A queue's page charts its last hour (the server's history, the library preloaded): the
/// three charts are drawn, as images with a name and a description, the throughput's lines
/// rising in the minute of the finishes (their tooltips say how many), the time in queue and
/// the backlog where they are known; the page's console has no refusal of the Content
/// Security Policy. The README's screenshot of the charts.
#[test]
fn the_queue_page_charts_the_last_hour() {
    let mut f = fixture("charts");
    let q = "reports";
    // The new database's state counts, known from here on (as in seed_tour): the backlog's.
    ok(calls::queue_stats(&mut f.db), "work_queue_stats");
    // Items due now, some due for a while (a longer time in queue), one attempt each.
    for n in 0..36 {
        let due = match n % 12 {
            0 => Some(RunAt::In("-3 minutes".into())),
            1 | 2 => Some(RunAt::In("-40 seconds".into())),
            _ => None,
        };
        let mut item = Enqueue::new(q)
            .key(format!("report-{n:03}"))
            .payload(json!({ "report": n }))
            .max_attempts(1);
        if let Some(due) = due {
            item = item.run_at(due);
        }
        enqueue(&mut f.db, item);
    }
    let mut claims = Vec::new();
    for _ in 0..4 {
        claims.extend(ok(
            calls::claim(&mut f.db, q, "reporter-1", "5 minutes", Some(8), None),
            "work_claim",
        ));
    }
    assert_eq!(claims.len(), 32);
    for (n, c) in claims.iter().take(30).enumerate() {
        let token = c.token("reporter-1");
        if n % 10 == 9 {
            assert!(ok(
                calls::fail(&mut f.db, &token, "timeout", None),
                "work_fail"
            ));
        } else {
            assert!(ok(calls::finish(&mut f.db, &token, None), "work_finish"));
        }
    }
    let (b, ui) = (&f.browser, &f.ui);
    let driver_port = b.driver_port;
    b.run(async {
        let c = b.client();
        console_messages(c, driver_port).await;
        goto(c, &ui.url(&format!("/queues/{q}"))).await;
        wait_for(c, "#chart-backlog svg").await;
        assert_eq!(count(c, "#history figure.chart").await, 3);
        // Each chart an image with its name and description, and drawn its size.
        for (id, title) in [
            ("throughput", "Throughput"),
            ("time-in-queue", "Time in queue"),
            ("backlog", "Backlog"),
        ] {
            let drawn = ok(
                c.execute(
                    "const svg = document.querySelector('#chart-' + arguments[0] + ' > svg');
                     const ids = svg.getAttribute('aria-labelledby').split(' ');
                     const box = svg.getBoundingClientRect();
                     return [svg.getAttribute('role'),
                             document.getElementById(ids[0]).textContent,
                             document.getElementById(ids[1]).textContent,
                             box.width, box.height];",
                    vec![json!(id)],
                )
                .await,
                "the chart's name and size",
            );
            assert_eq!(drawn[0], json!("img"), "{id}: {drawn}");
            assert_eq!(drawn[1], json!(title), "{id}: {drawn}");
            assert!(!drawn[2].as_str().unwrap_or("").is_empty(), "{id}: {drawn}");
            assert!(
                drawn[3].as_f64() > Some(400.0) && drawn[4].as_f64() > Some(150.0),
                "{id} is drawn its size: {drawn}"
            );
        }
        // Throughput: the tooltips count every finish and failure, and the lines rise
        // (drawn, unfilled: their presentation attributes apply) where they happened.
        let throughput = ok(
            c.execute(
                "const chart = document.querySelector('#chart-throughput');
                 let done = 0, failed = 0, claimed = 0;
                 for (const t of chart.querySelectorAll('rect[data-minute] > title')) {
                     const m = t.textContent.match(/done (\\d+), failed (\\d+), claimed (\\d+)/);
                     done += +m[1]; failed += +m[2]; claimed += +m[3];
                 }
                 const line = chart.querySelector('polyline[data-series=\"done\"]');
                 const style = getComputedStyle(line);
                 return [done, failed, claimed, line.points.length,
                         line.getBBox().height, style.fill, style.stroke];",
                vec![],
            )
            .await,
            "the throughput chart",
        );
        assert_eq!(
            throughput,
            json!([27, 3, 32, 60, throughput[4], "none", "rgb(26, 127, 55)"]),
            "done, failed, claimed, the done line's points and look"
        );
        assert!(
            throughput[4].as_f64() > Some(50.0),
            "the done line rises: {throughput}"
        );
        // Time in queue and backlog: drawn where known, in the minute(s) of the activity.
        let drawn = ok(
            c.execute(
                "const n = (css) => document.querySelectorAll(css).length;
                 const known = (id, none) => [...document.querySelectorAll(
                     '#chart-' + id + ' rect[data-minute] > title')]
                     .filter(t => !t.textContent.endsWith(none)).length;
                 return [known('time-in-queue', ': no timed claims'), known('backlog', ': not known'),
                         n('#chart-time-in-queue [data-series=\"p99\"]'),
                         n('#chart-backlog [data-series=\"pending\"]')];",
                vec![],
            )
            .await,
            "the time in queue and backlog charts",
        );
        let known = |i: usize| drawn[i].as_i64().unwrap_or(-1);
        assert!((1..=2).contains(&known(0)), "minutes with claims: {drawn}");
        assert!(
            (1..=2).contains(&known(1)),
            "minutes with a known backlog: {drawn}"
        );
        assert!(known(2) >= 1 && known(3) >= 1, "drawn: {drawn}");
        let messages = console_messages(c, driver_port).await;
        let refused: Vec<_> = messages
            .iter()
            .filter(|(_, m)| m.contains("Content Security Policy"))
            .collect();
        assert!(refused.is_empty(), "the CSP refused: {refused:?}");
        screenshot(c, "charts", true).await;
    });
}

/// An item's page draws its workflow: a report that waits for three extracts (one done, one
/// running, one done) and that two steps wait for. Each item is a box with its state in a word
/// and its colour, the parents left of the report, the children right of it, the report
/// framed; a click on a box leads to that item's page, whose graph is drawn around it; nothing
/// is refused by the Content Security Policy.
#[test]
fn the_item_page_draws_its_workflow() {
    let mut f = fixture("workflow");
    let db = &mut f.db;
    let orders = enqueue(db, Enqueue::new("etl.extract").key("orders-2026-12"));
    let refunds = enqueue(db, Enqueue::new("etl.extract").key("refunds-2026-12"));
    let rates = enqueue(db, Enqueue::new("etl.fx").key("rates-2026-12"));
    let report = enqueue(
        db,
        Enqueue::new("etl.report")
            .key("report-2026-12")
            .after(&[orders, refunds, rates]),
    );
    let email = enqueue(
        db,
        Enqueue::new("etl.send")
            .key("email-finance-2026-12")
            .after(&[report]),
    );
    let archive = enqueue(
        db,
        Enqueue::new("etl.archive")
            .key("archive-2026-12")
            .after(&[report]),
    );
    for (queue, key) in [
        ("etl.extract", "orders-2026-12"),
        ("etl.fx", "rates-2026-12"),
    ] {
        let token = claim(db, queue, key, "etl-1", "5 minutes");
        assert!(ok(calls::finish(db, &token, None), "work_finish"));
    }
    claim(db, "etl.extract", "refunds-2026-12", "etl-2", "5 minutes");
    assert_eq!(state_of(db, report), "waiting");
    let (b, ui) = (&f.browser, &f.ui);
    let driver_port = b.driver_port;
    b.run(async {
        let c = b.client();
        console_messages(c, driver_port).await;
        goto(c, &ui.url(&format!("/items/{report}"))).await;
        wait_for(c, "#workflow-graph svg").await;
        // Each box as drawn: its id, state word, framed or not, left edge, fill.
        let drawn = ok(
            c.execute(
                "return [...document.querySelectorAll('#workflow-graph a.node')].map(a => {
                     const box = a.querySelector('rect.box').getBoundingClientRect();
                     return [+a.dataset.id, a.querySelector('text.state').textContent,
                             a.getAttribute('aria-current'), Math.round(box.left),
                             getComputedStyle(a.querySelector('rect.box')).fill,
                             a.getAttribute('href')];
                 }).sort((x, y) => x[0] - y[0]);",
                vec![],
            )
            .await,
            "the workflow's boxes",
        );
        let boxes = drawn.as_array().expect("a list of boxes");
        let expected = [
            (orders, "done", "rgb(218, 251, 225)"),
            (refunds, "claimed", "rgb(255, 248, 197)"),
            (rates, "done", "rgb(218, 251, 225)"),
            (report, "waiting", "rgb(251, 239, 255)"),
            (email, "waiting", "rgb(251, 239, 255)"),
            (archive, "waiting", "rgb(251, 239, 255)"),
        ];
        assert_eq!(boxes.len(), expected.len(), "{drawn}");
        let left = |id: i64| -> i64 {
            boxes
                .iter()
                .find(|b| b[0].as_i64() == Some(id))
                .and_then(|b| b[3].as_i64())
                .unwrap_or_else(|| panic!("box {id} in {drawn}"))
        };
        for (b, (id, state, fill)) in boxes.iter().zip(expected) {
            assert_eq!(b[0].as_i64(), Some(id), "{drawn}");
            assert_eq!(b[1], json!(state), "{id}: {drawn}");
            assert_eq!(b[4], json!(fill), "{id}: {drawn}");
            assert_eq!(b[5], json!(format!("/items/{id}")), "{id}: {drawn}");
            let framed = if id == report {
                json!("page")
            } else {
                Value::Null
            };
            assert_eq!(b[2], framed, "{id}: {drawn}");
        }
        for parent in [orders, refunds, rates] {
            assert!(
                left(parent) < left(report),
                "{parent} left of the report: {drawn}"
            );
        }
        for child in [email, archive] {
            assert!(
                left(report) < left(child),
                "{child} right of the report: {drawn}"
            );
        }
        assert_eq!(count(c, "#workflow-graph path.edge").await, 5);
        let waiting = text_of(c, "#workflow-waiting").await;
        assert!(waiting.contains("2 of its 3 parents are done"), "{waiting}");
        screenshot(c, "workflow", true).await;

        // A box is a link: to that item's page, whose graph is drawn around it.
        let node = wait_for(c, &format!("#workflow-graph a.node[data-id=\"{orders}\"]")).await;
        ok(node.click().await, "clicking the orders box");
        wait_for_script(
            c,
            "the orders item's page",
            &format!(
                "return location.pathname === '/items/{orders}' \
                        && document.readyState === 'complete';"
            ),
        )
        .await;
        wait_for(c, "#workflow-graph svg").await;
        assert_eq!(text_of(c, "#state").await.trim(), "done");
        assert_eq!(count(c, "#workflow-graph a.node").await, 4);
        assert_eq!(
            count(
                c,
                &format!("#workflow-graph a.node[data-id=\"{orders}\"][aria-current=\"page\"]")
            )
            .await,
            1
        );
        // The report's other parents are not the orders' ancestors: counted, not drawn.
        assert_eq!(
            text_of(
                c,
                &format!("#workflow-graph .hidden-parents[data-child=\"{report}\"] text")
            )
            .await,
            "+2"
        );
        screenshot(c, "workflow-parent", false).await;
        let messages = console_messages(c, driver_port).await;
        let refused: Vec<_> = messages
            .iter()
            .filter(|(_, m)| m.contains("Content Security Policy"))
            .collect();
        assert!(refused.is_empty(), "the CSP refused: {refused:?}");
    });
}

/// A payload, a checkpoint, a key and an error message made of HTML stay text: shown
/// literally, no element made of them, no script run.
#[test]
fn html_from_the_database_stays_text() {
    let mut f = fixture("xss");
    let payload = json!({ "x": "<script>alert(1)</script>" });
    let key = "<img src=x onerror=alert(2)>";
    let error = "<script>alert(3)</script><b>bold</b>";
    let id = enqueue(
        &mut f.db,
        Enqueue::new("xss")
            .key(key)
            .payload(payload.clone())
            .max_attempts(3),
    );
    let token = claim(&mut f.db, "xss", key, "<i>owner</i>", "5 minutes");
    let checkpoint = json!({ "step": "<script>alert(4)</script>" });
    assert!(ok(
        calls::generated::work_progress(
            &mut f.db,
            token.id,
            &token.owner,
            token.epoch,
            &checkpoint
        ),
        "work_progress"
    ));
    assert!(ok(
        calls::fail(&mut f.db, &token, error, Some("0 seconds")),
        "work_fail"
    ));
    let (b, ui) = (&f.browser, &f.ui);
    b.run(async {
        let c = b.client();
        for (page, url) in [
            ("item", format!("/items/{id}")),
            ("items", "/queues/xss".to_owned()),
            ("queues", "/".to_owned()),
        ] {
            goto(c, &ui.url(&url)).await;
            // First, before any other command could meet it: no alert.
            assert_eq!(open_alert(c).await, None, "a script ran on the {page} page");
            wait_for(c, "body").await;
            let scripts = ok(
                c.execute("return document.querySelectorAll('script').length;", vec![])
                    .await,
                "counting scripts",
            );
            assert_eq!(scripts, json!(0), "no script element on the {page} page");
            assert_eq!(
                count(c, "img").await,
                0,
                "no img element on the {page} page"
            );
            assert_eq!(
                count(c, "b, i").await,
                0,
                "no b or i element on the {page} page"
            );
        }
        // The item page shows each of them as its text.
        goto(c, &ui.url(&format!("/items/{id}"))).await;
        let shown = text_of(c, "#payload").await;
        assert!(
            shown.contains("<script>alert(1)</script>"),
            "#payload shows the payload's text: {shown}"
        );
        let shown: Value = ok(
            serde_json::from_str(&shown),
            "#payload is the payload's JSON",
        );
        assert_eq!(shown, payload);
        let shown: Value = ok(
            serde_json::from_str(&text_of(c, "#progress").await),
            "#progress is the checkpoint's JSON, kept by the failed attempt",
        );
        assert_eq!(shown, checkpoint);
        let body = text_of(c, "body").await;
        assert!(body.contains(key), "the key as text: {body}");
        assert!(
            text_of(c, "#errors").await.contains(error),
            "the error as text"
        );
        assert!(
            text_of(c, "#lease").await.contains("<i>owner</i>"),
            "the owner as text"
        );
        screenshot(c, "xss", false).await;
        // And the items page lists the key as text.
        goto(c, &ui.url("/queues/xss")).await;
        wait_for(c, "#items").await;
        assert!(text_of(c, "#items").await.contains(key));
    });
}

/// An attacker's page on another site that auto-submits a form to the
/// dashboard: the POST is refused (403) and the queue is not paused. Twice:
/// a form without the CSRF token (all an attacker can make), and a form with
/// the victim's own token, from another origin of the same site (refused for
/// its `Origin`).
#[test]
fn cross_site_post_is_refused() {
    let mut f = fixture("csrf");
    enqueue(&mut f.db, Enqueue::new("crons").key("nightly"));
    let (b, ui) = (&f.browser, &f.ui);
    let action = ui.url("/queues/crons/pause");
    // The token the dashboard put in its own pause form.
    let token = b.run(async {
        let c = b.client();
        goto(c, &ui.url("/")).await;
        let input = wait_for(
            c,
            "#queues tr[data-queue=\"crons\"] form[action=\"/queues/crons/pause\"] input[name=\"csrf\"]",
        )
        .await;
        ok(input.attr("value").await, "the csrf input's value").expect("a csrf value")
    });
    assert!(!token.is_empty());
    let attacker = Attacker::start(vec![
        ("/no-token".to_owned(), attack_page(&action, None)),
        (
            "/stolen-token".to_owned(),
            attack_page(&action, Some(&token)),
        ),
    ]);
    for (what, url, reason) in [
        (
            "another site, no token",
            format!("http://localhost:{}/no-token", attacker.port),
            "Refused",
        ),
        (
            "another origin, the victim's token",
            format!("http://127.0.0.1:{}/stolen-token", attacker.port),
            "another origin",
        ),
    ] {
        b.run(async {
            let c = b.client();
            goto(c, &url).await;
            // The form submits itself; the browser lands on the dashboard's answer.
            wait_for_script(
                c,
                &format!("{what}: the form posted"),
                &format!(
                    "return document.readyState === 'complete' && location.href === {};",
                    json!(action)
                ),
            )
            .await;
            assert_eq!(response_status(c).await, 403, "{what}: refused");
            let error = text_of(c, "#error").await;
            assert!(error.contains(reason), "{what}: the page says why: {error}");
            screenshot(c, "cross-site-refused", false).await;
        });
        assert!(
            !is_paused(&mut f.db, "crons"),
            "{what}: the queue was paused"
        );
    }
    assert_eq!(attacker.served(), 2, "both attack pages were loaded");

    // The same token from the dashboard's own page does pause: what was
    // refused above was the other origin.
    b.run(async {
        let c = b.client();
        goto(c, &ui.url("/")).await;
        let pause = wait_for(
            c,
            "#queues tr[data-queue=\"crons\"] button[data-action=\"pause\"]",
        )
        .await;
        ok(pause.click().await, "clicking pause");
        wait_for(
            c,
            "#queues tr[data-queue=\"crons\"] button[data-action=\"resume\"]",
        )
        .await;
    });
    assert!(is_paused(&mut f.db, "crons"));
}

/// The attacker's page: a form that posts itself to `action` as soon as it loads.
fn attack_page(action: &str, token: Option<&str>) -> String {
    let token = token
        .map(|t| format!("<input type=\"hidden\" name=\"csrf\" value=\"{t}\">"))
        .unwrap_or_default();
    format!(
        "<!doctype html><html><body onload=\"document.forms[0].submit()\">\
         <h1>You won a prize</h1>\
         <form method=\"post\" action=\"{action}\">{token}</form></body></html>"
    )
}

/// A tiny web server on a port of its own (another origin than the
/// dashboard's): serves its pages by path, 404 for anything else, and counts
/// the pages it served. Its thread ends with the test process.
struct Attacker {
    port: u16,
    served: Arc<Mutex<u32>>,
}

impl Attacker {
    fn start(pages: Vec<(String, String)>) -> Attacker {
        let listener = ok(
            TcpListener::bind("127.0.0.1:0"),
            "binding the attacker's port",
        );
        let port = ok(listener.local_addr(), "the attacker's address").port();
        let served = Arc::new(Mutex::new(0));
        let counter = Arc::clone(&served);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(DEADLINE));
                let mut reader = BufReader::new(match stream.try_clone() {
                    Ok(s) => s,
                    Err(_) => continue,
                });
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                // The rest of the request head.
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match pages.iter().find(|(p, _)| p == path) {
                    Some((_, body)) => {
                        *counter.lock().unwrap_or_else(PoisonError::into_inner) += 1;
                        ("200 OK", body.as_str())
                    }
                    None => ("404 Not Found", "not here"),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Attacker { port, served }
    }

    fn served(&self) -> u32 {
        *self.served.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
