//! The dashboard over HTTP: a real cluster (workfence-harness), the real
//! `workfence-ui` binary, a real HTTP client (ureq; redirects are not
//! followed, statuses are not errors).
//!
//! Each test makes a database of its own on one shared cluster and starts a
//! dashboard process on a free loopback port, waiting for the line it prints
//! once it listens. Clusters live under `$WORKFENCE_SCRATCH` (a directory the
//! postgres OS user can reach when the tests run as root).
//!
//! The items page calls `workfence.work_items` (0.11.0): the tests need that
//! version installed, and fail (the dashboard's 503 page says to update the
//! extension) when an older one is; the limits tests set `per_group`
//! (0.12.0), and install 0.11.0 beside it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde_json::json;
use workfence_harness::calls::{self, Enqueue, RunAt, Token};
use workfence_harness::testing::{doc_sql_block, ok};
use workfence_harness::Cluster;

const EXE: &str = env!("CARGO_BIN_EXE_workfence-ui");
const XSS: &str = "<script>alert(1)</script>";
const XSS_ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";

fn scratch() -> String {
    std::env::var("WORKFENCE_SCRATCH").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string())
}

/// The SQL block of docs/operations.md between `<!-- marker:begin/end -->`.
fn operations_sql(marker: &str) -> &'static str {
    doc_sql_block(
        include_str!("../../docs/operations.md"),
        "docs/operations.md",
        marker,
    )
}

/// The cluster the tests of this file share; the least-privilege group roles
/// (docs/operations.md) and two login roles exist on it.
fn cluster() -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = slot.upgrade() {
        return c;
    }
    let c = Arc::new(ok(
        Cluster::builder(scratch()).start(),
        "starting a throwaway cluster",
    ));
    let mut admin = ok(c.connect(), "connect");
    ok(
        admin.batch_execute(operations_sql("least-privilege-roles")),
        "the group roles",
    );
    ok(
        admin.batch_execute(
            "CREATE ROLE ui_watcher LOGIN IN ROLE workfence_monitor;
             CREATE ROLE ui_operator LOGIN IN ROLE workfence_monitor, workfence_operator;
             CREATE ROLE ui_worker LOGIN IN ROLE workfence_monitor, workfence_worker;",
        ),
        "login roles",
    );
    *slot = Arc::downgrade(&c);
    c
}

/// The cluster of the counters' tests: the library preloaded, so that the server keeps the
/// counters of `work_queue_counters` (shared memory); the same roles as [`cluster`]'s.
fn preloaded_cluster() -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = slot.upgrade() {
        return c;
    }
    let c = Arc::new(ok(
        Cluster::builder(scratch())
            .setting("shared_preload_libraries", "pg_workfence")
            .start(),
        "starting a throwaway cluster with the library preloaded",
    ));
    let mut admin = ok(c.connect(), "connect");
    ok(
        admin.batch_execute(operations_sql("least-privilege-roles")),
        "the group roles",
    );
    ok(
        admin.batch_execute("CREATE ROLE ui_watcher LOGIN IN ROLE workfence_monitor;"),
        "login roles",
    );
    *slot = Arc::downgrade(&c);
    c
}

/// A new database with the extension and the least-privilege grants.
fn database(cluster: &Cluster, name: &str) -> postgres::Client {
    ok(cluster.create_database(name), "create database");
    let mut db = ok(cluster.connect_to(name), "connect");
    ok(
        db.batch_execute(operations_sql("least-privilege-grants")),
        "the grants of docs/operations.md",
    );
    db
}

/// A connection string to `db` of `cluster` as `user`.
fn dsn_as(cluster: &Cluster, db: &str, user: &str) -> String {
    format!(
        "host={} port={} user={user} dbname={db}",
        cluster.host(),
        cluster.port()
    )
}

/// A running dashboard; killed when dropped.
struct Ui {
    child: Child,
    base: String,
    _stdout: BufReader<ChildStdout>,
}

impl Ui {
    /// Starts `workfence-ui` with `args` and waits for its "listening" line.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Ui {
        let mut command = Command::new(EXE);
        command
            .args(args)
            .env_remove("WORKFENCE_UI_BASIC_AUTH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = ok(command.spawn(), "spawning workfence-ui");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        ok(stdout.read_line(&mut line), "reading the listening line");
        let prefix = "workfence-ui listening on http://";
        let Some(address) = line.trim_end().strip_prefix(prefix) else {
            let _ = child.kill();
            let status = child.wait();
            panic!("workfence-ui did not print its address: {line:?} ({status:?})");
        };
        Ui {
            base: format!("http://{}", address.trim_end_matches('/')),
            child,
            _stdout: stdout,
        }
    }

    /// A dashboard on a free loopback port for `dsn`.
    fn on(dsn: &str) -> Ui {
        Ui::start(&["--dsn", dsn, "--listen", "127.0.0.1:0"], &[])
    }

    fn get(&self, path: &str) -> Reply {
        self.get_with(path, &[])
    }

    fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        get_from(&self.base, path, headers)
    }

    /// POSTs `form` to `path` with `headers`.
    fn post(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Reply {
        let mut request = agent().post(format!("{}{path}", self.base));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        Reply::of(ok(
            request.send_form(form.iter().copied()),
            &format!("POST {path}"),
        ))
    }

    /// POSTs `form` plus the page's token, from this dashboard's own origin.
    fn submit(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        let token = self.token();
        let mut fields = vec![("csrf", token.as_str())];
        fields.extend_from_slice(form);
        let origin = self.base.clone();
        self.post(path, &fields, &[("Origin", &origin)])
    }

    /// The form token, read from the queues page.
    fn token(&self) -> String {
        self.token_of("/")
    }

    /// The form token, read from the page at `path` (every page of the frame has it).
    fn token_of(&self, path: &str) -> String {
        let page = self.get(path);
        assert_eq!(page.status, 200, "{}", page.body);
        let marker = "name=\"csrf-token\" content=\"";
        let start = page.body.find(marker).expect("a csrf-token meta") + marker.len();
        let end = page.body[start..].find('"').expect("end of token");
        page.body[start..start + end].to_owned()
    }

    /// POSTs `form` plus the token of the page at `page`, from this dashboard's own origin.
    fn submit_from(&self, page: &str, path: &str, form: &[(&str, &str)]) -> Reply {
        let token = self.token_of(page);
        let mut fields = vec![("csrf", token.as_str())];
        fields.extend_from_slice(form);
        let origin = self.base.clone();
        self.post(path, &fields, &[("Origin", &origin)])
    }

    /// The host:port the dashboard listens on.
    fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }
}

/// The HTTP client: statuses are answers, redirects are not followed.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// GET `base` + `path` with `headers`.
fn get_from(base: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = agent().get(format!("{base}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    Reply::of(ok(request.call(), &format!("GET {path}")))
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Form fields or headers: (name, value) pairs.
type Fields<'a> = Vec<(&'a str, &'a str)>;

/// What the dashboard answered.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: String,
    location: Option<String>,
    content_type: String,
    www_authenticate: Option<String>,
}

impl Reply {
    fn of(mut response: ureq::http::Response<ureq::Body>) -> Reply {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let location = header("location");
        let content_type = header("content-type").unwrap_or_default();
        let www_authenticate = header("www-authenticate");
        let status = response.status().as_u16();
        let body = ok(response.body_mut().read_to_string(), "reading a body");
        Reply {
            status,
            body,
            location,
            content_type,
            www_authenticate,
        }
    }

    /// The text of `<p id="error">`, tags removed.
    fn error(&self) -> String {
        let start = self
            .body
            .find("<p id=\"error\">")
            .unwrap_or_else(|| panic!("no error paragraph in {}", self.body));
        let end = self.body[start..].find("</p>").expect("</p>") + start;
        strip_tags(&self.body[start..end])
    }
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

fn enqueue(db: &mut postgres::Client, item: Enqueue) -> i64 {
    ok(calls::enqueue(db, &item), "work_enqueue").id
}

/// Enqueues `key` with one attempt, claims it and fails it with `error`: a
/// failed item.
fn failed_item(db: &mut postgres::Client, queue: &str, key: &str, error: &str) -> i64 {
    let id = enqueue(db, Enqueue::new(queue).key(key).max_attempts(1));
    let claim = ok(
        calls::claim_key(db, queue, key, "worker-1", "1 hour"),
        "work_claim_key",
    )
    .expect("claimable");
    assert!(ok(
        calls::fail(db, &claim.token("worker-1"), error, None),
        "work_fail"
    ));
    id
}

fn state_of(db: &mut postgres::Client, id: i64) -> String {
    ok(calls::item_by_id(db, id), "work_item")
        .expect("item")
        .state
}

#[test]
fn help_and_refused_command_lines() {
    let out = ok(Command::new(EXE).arg("--help").output(), "--help");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: workfence-ui"));

    for (args, needle) in [
        (&["--listen", "127.0.0.1:0"][..], "--dsn"),
        (
            &["--dsn", "host=x", "--listen", "0.0.0.0:0"][..],
            "--basic-auth",
        ),
        (
            &["--dsn", "host=x", "--listen", "[::]:0"][..],
            "--basic-auth",
        ),
        (&["--dsn", "host=x", "--frobnicate"][..], "unknown argument"),
        (
            &["--dsn", "host=x", "--basic-auth", "nocolon"][..],
            "USER:PASSWORD",
        ),
        (&["--dsn", "host=x", "--listen", "nowhere"][..], "--listen"),
    ] {
        let out = ok(
            Command::new(EXE)
                .args(args)
                .env_remove("WORKFENCE_UI_BASIC_AUTH")
                .output(),
            "a refused command line",
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} must not listen");
    }
}

#[test]
fn basic_auth_is_asked_for_when_configured() {
    let cluster = cluster();
    database(&cluster, "ui_auth");
    let dsn = cluster.connection_string("ui_auth");
    let basic = |cred: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(cred)
        )
    };
    let ui = Ui::start(
        &[
            "--dsn",
            &dsn,
            "--listen",
            "127.0.0.1:0",
            "--basic-auth",
            "admin:s3cr:et",
        ],
        &[],
    );
    for path in ["/", "/metrics", "/items/1", "/nowhere"] {
        let reply = ui.get(path);
        assert_eq!(reply.status, 401, "{path}");
        assert!(
            reply
                .www_authenticate
                .as_deref()
                .is_some_and(|w| w.starts_with("Basic ")),
            "{reply:?}"
        );
        assert_eq!(
            ui.get_with(path, &[("Authorization", &basic("admin:wrong"))])
                .status,
            401
        );
    }
    assert_eq!(
        ui.get_with("/", &[("Authorization", &basic("admin:s3cr:et"))])
            .status,
        200
    );
    // A POST without credentials never reaches the form checks.
    assert_eq!(ui.post("/queues/q/pause", &[], &[]).status, 401);
    drop(ui);

    // From the environment, and on a non-loopback address (allowed with auth).
    let ui = Ui::start(
        &["--dsn", &dsn, "--listen", "0.0.0.0:0"],
        &[("WORKFENCE_UI_BASIC_AUTH", "env:pw")],
    );
    let port = ui.authority().rsplit_once(':').unwrap().1.to_owned();
    let local = format!("http://127.0.0.1:{port}");
    assert_eq!(get_from(&local, "/", &[]).status, 401);
    let authorized = get_from(&local, "/", &[("Authorization", &basic("env:pw"))]);
    assert_eq!(authorized.status, 200, "{}", authorized.body);
    // Not on loopback: any Host name is answered (behind the credentials).
    let other_host = [
        ("Authorization", basic("env:pw")),
        ("Host", "dashboard.example".into()),
    ];
    let other_host: Vec<(&str, &str)> = other_host.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(get_from(&local, "/", &other_host).status, 200);
}

#[test]
fn a_loopback_dashboard_answers_only_loopback_host_names() {
    let cluster = cluster();
    database(&cluster, "ui_host");
    let ui = Ui::on(&cluster.connection_string("ui_host"));
    // DNS rebinding: a page of another name that resolves to 127.0.0.1.
    let mut stream = ok(TcpStream::connect(ui.authority()), "connect");
    ok(
        stream.write_all(b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"),
        "write",
    );
    let mut answer = String::new();
    ok(stream.read_to_string(&mut answer), "read");
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert_eq!(ui.get_with("/", &[("Host", "localhost")]).status, 200);
}

#[test]
fn metrics_agree_with_work_queue_stats() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_metrics");
    for i in 0..3 {
        enqueue(&mut db, Enqueue::new("m.alpha").key(format!("p{i}")));
    }
    enqueue(
        &mut db,
        Enqueue::new("m.alpha")
            .key("later")
            .run_at(RunAt::In("1 hour".into())),
    );
    enqueue(&mut db, Enqueue::new("m.alpha").key("gone"));
    assert!(ok(calls::cancel(&mut db, "m.alpha", "gone"), "work_cancel"));
    for i in 0..2 {
        enqueue(&mut db, Enqueue::new("m.beta").key(format!("c{i}")));
    }
    let claims = ok(
        calls::claim(&mut db, "m.beta", "w", "1 hour", Some(2), None),
        "claim",
    );
    assert_eq!(claims.len(), 2);
    assert!(ok(
        calls::finish(&mut db, &claims[0].token("w"), None),
        "finish"
    ));
    failed_item(&mut db, "m.beta", "f", "boom");
    ok(calls::pause(&mut db, "m.gamma"), "pause");
    let weird = "m.\"q\\uote\"";
    enqueue(&mut db, Enqueue::new(weird).key("x"));

    let ui = Ui::on(&cluster.connection_string("ui_metrics"));
    let ages_before = due_ages(&mut db);
    let reply = ui.get("/metrics");
    let after = ok(calls::queue_stats(&mut db), "stats after");
    let ages_after = due_ages(&mut db);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        reply.content_type
    );
    // The label value with a quote and a backslash, escaped per the format.
    assert!(
        reply
            .body
            .contains("workfence_items{queue=\"m.\\\"q\\\\uote\\\"\",state=\"pending\"} 1\n"),
        "{}",
        reply.body
    );
    // prometheus-parse does not unescape label values: parse the other queues.
    let lines: Vec<std::io::Result<String>> = reply
        .body
        .lines()
        .filter(|l| !l.contains("uote"))
        .map(|l| Ok(l.to_owned()))
        .collect();
    let scrape = ok(
        prometheus_parse::Scrape::parse(lines.into_iter()),
        "parsing /metrics",
    );
    let value = |name: &str, queue: &str, state: Option<&str>| -> Option<f64> {
        scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name
                    && s.labels.get("queue") == Some(queue)
                    && s.labels.get("state") == state
            })
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("{name}: {other:?}"),
            })
    };
    // Each family once: one HELP and one TYPE line, whatever the queues.
    let families = [
        ("workfence_items", "gauge"),
        ("workfence_oldest_due_age_seconds", "gauge"),
        ("workfence_paused", "gauge"),
    ];
    for (family, kind) in families {
        let help = format!("# HELP {family} ");
        let type_line = format!("# TYPE {family} {kind}");
        assert_eq!(
            reply.body.lines().filter(|l| l.starts_with(&help)).count(),
            1,
            "{help}: {}",
            reply.body
        );
        assert_eq!(
            reply.body.lines().filter(|l| *l == type_line).count(),
            1,
            "{type_line}: {}",
            reply.body
        );
        assert!(scrape.docs.contains_key(family), "{family}");
    }
    // Every HELP and TYPE line is of a family named once (the counters of
    // the preloaded library included, when they are there).
    for marker in ["# HELP ", "# TYPE "] {
        let mut names: Vec<&str> = reply
            .body
            .lines()
            .filter_map(|l| l.strip_prefix(marker))
            .map(|rest| rest.split(' ').next().unwrap_or(""))
            .collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "{marker}: {}", reply.body);
    }
    // Done and failed are states of the gauge: no counter that a purge lowers.
    assert!(
        !reply.body.contains("_done_total") && !reply.body.contains("_failed_total"),
        "{}",
        reply.body
    );
    let queues: Vec<_> = after.iter().filter(|s| s.queue != weird).collect();
    assert_eq!(queues.len(), 3, "{after:?}");
    for s in queues {
        let q = s.queue.as_str();
        for (state, n) in [
            ("pending", s.pending),
            ("scheduled", s.scheduled),
            ("claimed", s.claimed),
            ("expired", s.expired),
            ("done", s.done),
            ("failed", s.failed),
            ("cancelled", s.cancelled),
        ] {
            assert_eq!(
                value("workfence_items", q, Some(state)),
                Some(n as f64),
                "{q} {state}"
            );
        }
        assert_eq!(
            value("workfence_paused", q, None),
            Some(if s.paused { 1.0 } else { 0.0 }),
            "{q}"
        );
        let age = value("workfence_oldest_due_age_seconds", q, None).expect("age");
        let (low, high) = (ages_before[q], ages_after[q]);
        assert!(low <= age && age <= high, "{q}: {low} <= {age} <= {high}");
        match s.refused {
            Some(n) => assert_eq!(value("workfence_refused_total", q, None), Some(n as f64)),
            None => assert_eq!(value("workfence_refused_total", q, None), None),
        }
    }
    assert_eq!(
        value("workfence_items", "m.alpha", Some("pending")),
        Some(3.0)
    );
    assert_eq!(
        value("workfence_items", "m.alpha", Some("scheduled")),
        Some(1.0)
    );
    assert_eq!(
        value("workfence_items", "m.alpha", Some("cancelled")),
        Some(1.0)
    );
    assert_eq!(
        value("workfence_items", "m.beta", Some("claimed")),
        Some(1.0)
    );
    assert_eq!(value("workfence_items", "m.beta", Some("done")), Some(1.0));
    assert_eq!(
        value("workfence_items", "m.beta", Some("failed")),
        Some(1.0)
    );
    assert_eq!(value("workfence_paused", "m.gamma", None), Some(1.0));
}

/// Checks every line of a text exposition (format 0.0.4): `# HELP name text`, `# TYPE name
/// kind` once per family and before its samples, and samples `name{label="value",...} number`
/// with label values escaped (`\\`, `\"`, `\n` only) of a family of that type (a histogram's
/// `_bucket`, `_sum`, `_count`). Returns the families and their types.
fn exposition_families(body: &str) -> Result<std::collections::HashMap<String, String>, String> {
    use std::collections::HashMap;
    let is_name = |n: &str| {
        let mut chars = n.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: Vec<String> = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !is_name(name) || helps.iter().any(|h| h == name) {
                return Err(at("a HELP of a bad or repeated name"));
            }
            helps.push(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let kinds = ["counter", "gauge", "histogram", "summary", "untyped"];
            if !is_name(name) || !kinds.contains(&kind) || parts.next().is_some() {
                return Err(at("a bad TYPE line"));
            }
            if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                return Err(at("a second TYPE line"));
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(at("a comment or an empty line"));
        }
        let brace = line.find('{').ok_or_else(|| at("no labels"))?;
        let name = &line[..brace];
        let mut chars = line[brace + 1..].char_indices().peekable();
        // label="value" pairs, comma-separated, up to the closing brace.
        let end = loop {
            let start = match chars.peek() {
                Some(&(i, _)) => i,
                None => return Err(at("unterminated labels")),
            };
            let mut label_end = start;
            while let Some(&(i, c)) = chars.peek() {
                if c == '=' {
                    break;
                }
                label_end = i + c.len_utf8();
                chars.next();
            }
            let label = &line[brace + 1 + start..brace + 1 + label_end];
            if !is_name(label)
                || chars.next().map(|(_, c)| c) != Some('=')
                || chars.next().map(|(_, c)| c) != Some('"')
            {
                return Err(at("a bad label"));
            }
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\' | '"' | 'n')) => {}
                        _ => return Err(at("a bad escape")),
                    },
                    Some((_, '"')) => break,
                    Some((_, '\n')) | None => return Err(at("an unterminated value")),
                    Some(_) => {}
                }
            }
            match chars.next() {
                Some((_, ',')) => continue,
                Some((i, '}')) => break brace + 1 + i + 1,
                _ => return Err(at("no comma or brace after a value")),
            }
        };
        let value = line[end..]
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value"))?;
        if !matches!(value, "+Inf" | "-Inf" | "NaN") && value.parse::<f64>().is_err() {
            return Err(at("a value that is not a number"));
        }
        let family = match types.get(name) {
            Some(_) => name,
            None => ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|f| types.get(*f).map(String::as_str) == Some("histogram"))
                })
                .ok_or_else(|| at("a sample of no family typed before it"))?,
        };
        if !helps.iter().any(|h| h == family) {
            return Err(at("a sample of a family without HELP"));
        }
    }
    Ok(types)
}

/// The value of the sample `line_start` (its name and labels, as written) in `body`.
fn sample(body: &str, line_start: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .map(|v| match v {
            "+Inf" => f64::INFINITY,
            v => v.parse().expect("a number"),
        })
}

/// `work_queue_counters`' row of `queue`: the nine counts, then each histogram's buckets
/// and sum.
fn counters_of(
    db: &mut postgres::Client,
    queue: &str,
) -> (Vec<i64>, Vec<f64>, Vec<i64>, f64, Vec<i64>, f64) {
    let r = ok(
        db.query_one(
            "SELECT ARRAY[c.enqueued, c.claimed, c.done, c.failed, c.retried, c.released, \
                    c.cancelled, c.refused, c.lapsed]::int8[], c.bucket_le::float8[], \
                    c.time_in_queue_buckets::int8[], c.time_in_queue_sum::float8, \
                    c.run_time_buckets::int8[], c.run_time_sum::float8 \
               FROM workfence.work_queue_counters AS c WHERE c.queue = $1",
            &[&queue],
        ),
        "work_queue_counters",
    );
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))
}

#[test]
fn metrics_count_what_a_queues_items_went_through() {
    let cluster = preloaded_cluster();
    let name = "ui_counters";
    let mut db = database(&cluster, name);
    // A queue of this test's own (the server counts per database and queue, since it started).
    let q = "ctr.life";
    for key in ["a", "b", "c", "d"] {
        enqueue(&mut db, Enqueue::new(q).key(key).max_attempts(3));
    }
    let claims = ok(
        calls::claim(&mut db, q, "w", "1 hour", Some(2), None),
        "claim",
    );
    assert_eq!(claims.len(), 2);
    assert!(ok(
        calls::finish(&mut db, &claims[0].token("w"), None),
        "finish"
    ));
    assert!(ok(
        calls::fail(&mut db, &claims[1].token("w"), "boom", Some("1 hour")),
        "work_fail, retried"
    ));
    assert!(ok(calls::cancel(&mut db, q, "d"), "work_cancel"));
    let c = ok(calls::claim_key(&mut db, q, "c", "w", "1 hour"), "claim c").expect("c");
    assert!(ok(
        calls::release(&mut db, &c.token("w"), None),
        "work_release"
    ));
    failed_item(&mut db, q, "e", "final");
    let weird = "ctr.\"x\\y";
    enqueue(&mut db, Enqueue::new(weird).key("k"));
    // enqueued 5, claimed 4, done 1, failed 1, retried 1, released 1, cancelled 1, no
    // refusal, no lapse; four claims of pending items, four runs ended.
    let want: [(&str, f64); 9] = [
        ("enqueued", 5.0),
        ("claimed", 4.0),
        ("done", 1.0),
        ("failed", 1.0),
        ("retried", 1.0),
        ("released", 1.0),
        ("cancelled", 1.0),
        ("refused", 0.0),
        ("lapsed", 0.0),
    ];
    let (counts, le, in_queue, in_queue_sum, run_time, run_time_sum) = counters_of(&mut db, q);
    assert_eq!(
        counts,
        want.iter().map(|(_, n)| *n as i64).collect::<Vec<_>>(),
        "the view counted the sequence"
    );

    for user in [None, Some("ui_watcher")] {
        let ui = match user {
            None => Ui::on(&cluster.connection_string(name)),
            Some(user) => Ui::on(&dsn_as(&cluster, name, user)),
        };
        let reply = ui.get("/metrics");
        assert_eq!(reply.status, 200, "{user:?}: {}", reply.body);
        let body = &reply.body;
        let types = exposition_families(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        for (what, n) in want {
            let family = format!("workfence_{what}_total");
            assert_eq!(
                types.get(&family).map(String::as_str),
                Some("counter"),
                "{family}"
            );
            let line = format!("{family}{{queue=\"{q}\"}}");
            assert_eq!(sample(body, &line), Some(n), "{user:?} {line}:\n{body}");
        }
        assert_eq!(
            sample(body, "workfence_enqueued_total{queue=\"ctr.\\\"x\\\\y\"}"),
            Some(1.0),
            "{body}"
        );
        for (family, buckets, sum) in [
            ("workfence_time_in_queue_seconds", &in_queue, in_queue_sum),
            ("workfence_run_time_seconds", &run_time, run_time_sum),
        ] {
            assert_eq!(
                types.get(family).map(String::as_str),
                Some("histogram"),
                "{family}"
            );
            let label = |b: f64| {
                if b.is_infinite() {
                    "+Inf".to_owned()
                } else {
                    format!("{b}")
                }
            };
            let shown: Vec<f64> = le
                .iter()
                .map(|b| {
                    let line = format!("{family}_bucket{{queue=\"{q}\",le=\"{}\"}}", label(*b));
                    sample(body, &line).unwrap_or_else(|| panic!("{line}:\n{body}"))
                })
                .collect();
            assert_eq!(le.len(), 17, "{le:?}");
            assert_eq!(le.last(), Some(&f64::INFINITY));
            assert!(
                shown.windows(2).all(|w| w[0] <= w[1]),
                "{family} cumulative: {shown:?}"
            );
            let count = sample(body, &format!("{family}_count{{queue=\"{q}\"}}"));
            assert_eq!(
                count,
                Some(4.0),
                "{family}: one per claim, one per run ended"
            );
            assert_eq!(shown.last().copied(), count, "{family}: +Inf is the count");
            assert_eq!(
                shown,
                buckets.iter().map(|n| *n as f64).collect::<Vec<_>>(),
                "{family}: the view's buckets"
            );
            let shown_sum = sample(body, &format!("{family}_sum{{queue=\"{q}\"}}")).expect("sum");
            assert!(
                (shown_sum - sum).abs() <= 1e-9 * sum.abs().max(1.0),
                "{shown_sum} {sum}"
            );
            assert!(shown_sum >= 0.0);
        }
        // prometheus-parse reads it too (but for the label it does not unescape).
        let lines = body
            .lines()
            .filter(|l| !l.contains("x\\\\y"))
            .map(|l| Ok(l.to_owned()));
        let scrape = ok(prometheus_parse::Scrape::parse(lines), "parsing /metrics");
        assert!(scrape
            .samples
            .iter()
            .any(|s| s.metric == "workfence_run_time_seconds"
                && s.labels.get("queue") == Some(q)
                && matches!(&s.value, prometheus_parse::Value::Histogram(h) if h.len() == 17)));

        // The queue's page shows the same counts, and the quantiles' estimates.
        let page = ui.get(&pages_href(q));
        assert_eq!(page.status, 200, "{}", page.body);
        for (what, n) in want {
            let cell = format!("data-counter=\"{what}\">{n}</td>");
            assert!(page.body.contains(&cell), "{cell}: {}", page.body);
        }
        for id in ["time-in-queue", "run-time"] {
            let row = section(&page.body, &format!("data-histogram=\"{id}\""), "</tr>");
            assert!(row.contains("<td class=\"num count\">4</td>"), "{row}");
            assert!(!row.contains("—"), "{row}");
        }
    }

    // A role that may not read the view (no SELECT on it, or no EXECUTE on the function it
    // calls): the metrics and the page as before, without the counters.
    for revoke in [
        "REVOKE SELECT ON workfence.work_queue_counters FROM workfence_monitor",
        "REVOKE EXECUTE ON FUNCTION workfence.queue_counter_rows() FROM workfence_monitor",
    ] {
        ok(
            db.batch_execute(&format!(
                "GRANT SELECT ON workfence.work_queue_counters TO workfence_monitor; \
                 GRANT EXECUTE ON FUNCTION workfence.queue_counter_rows() TO workfence_monitor; \
                 {revoke}"
            )),
            revoke,
        );
        let ui = Ui::on(&dsn_as(&cluster, name, "ui_watcher"));
        let reply = ui.get("/metrics");
        assert_eq!(reply.status, 200, "{revoke}: {}", reply.body);
        exposition_families(&reply.body).unwrap_or_else(|e| panic!("{e}"));
        assert!(reply
            .body
            .contains(&format!("workfence_items{{queue=\"{q}\"")));
        assert!(
            !reply.body.contains("workfence_enqueued_total"),
            "{}",
            reply.body
        );
        assert!(!reply.body.contains("_seconds_bucket"), "{}", reply.body);
        // refused and lapsed as work_queue_stats has them, as before 0.12.0.
        assert_eq!(
            sample(
                &reply.body,
                &format!("workfence_refused_total{{queue=\"{q}\"}}")
            ),
            Some(0.0)
        );
        let page = ui.get(&pages_href(q));
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(!page.body.contains("id=\"counters\""), "{}", page.body);
    }

    // A database still on 0.11.0 (no such view): its metrics and pages as before.
    let old_name = "ui_counters_0110";
    ok(cluster.create_database(old_name), "create database");
    let mut old = ok(cluster.connect_to(old_name), "connect");
    ok(
        old.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';",
        ),
        "pg_workfence 0.11.0",
    );
    enqueue(&mut old, Enqueue::new("q").key("k"));
    let ui = Ui::on(&cluster.connection_string(old_name));
    let reply = ui.get("/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    exposition_families(&reply.body).unwrap_or_else(|e| panic!("{e}"));
    assert!(reply.body.contains("workfence_items{queue=\"q\""));
    assert_eq!(
        sample(&reply.body, "workfence_refused_total{queue=\"q\"}"),
        Some(0.0)
    );
    assert!(
        !reply.body.contains("workfence_enqueued_total"),
        "{}",
        reply.body
    );
    let page = ui.get("/queues/q");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("id=\"counters\""));
}

/// `/queues/NAME` for a queue name of plain letters, digits and dots.
fn pages_href(queue: &str) -> String {
    assert!(queue.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'));
    format!("/queues/{queue}")
}

/// Each queue's `oldest_due_age` in seconds (0 when nothing is due).
fn due_ages(db: &mut postgres::Client) -> std::collections::HashMap<String, f64> {
    db.query(
        "SELECT s.queue, COALESCE(pg_catalog.date_part('epoch', s.oldest_due_age), 0)::float8 \
           FROM workfence.work_queue_stats AS s",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn bad_input_gets_a_4xx_page_and_changes_nothing() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_bad_input");
    let id = enqueue(
        &mut db,
        Enqueue::new("q").key("k1").payload(json!({"n": 1})),
    );
    let snapshot = |db: &mut postgres::Client| -> String {
        db.query_one(
            "SELECT pg_catalog.string_agg(i::text, ',' ORDER BY i.id) FROM workfence.items AS i",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let before = snapshot(&mut db);
    let ui = Ui::on(&cluster.connection_string("ui_bad_input"));
    let long = "x".repeat(2000);
    let too_long_for_the_server = "x".repeat(300);
    let pid = format!("/items/{id}");
    let gets: Vec<(String, u16)> = vec![
        ("/queues/nope".into(), 404),
        ("/queues/%FF".into(), 400),
        (format!("/queues/{long}"), 400),
        (format!("/queues/{too_long_for_the_server}"), 400),
        ("/queues/q?state=bogus".into(), 400),
        ("/queues/q?after=abc".into(), 400),
        ("/queues/q?after=99999999999999999999".into(), 400),
        ("/queues/q?after=-5".into(), 400),
        ("/queues/q?after=0".into(), 400),
        ("/queues/q?after=%".into(), 400),
        ("/queues/q?key=nope".into(), 404),
        ("/queues/nope?key=k1".into(), 404),
        ("/queues/q?key=%01".into(), 400),
        (format!("/queues/q?key={long}"), 400),
        ("/items/abc".into(), 400),
        ("/items/-1".into(), 400),
        ("/items/0".into(), 400),
        ("/items/1.5".into(), 400),
        ("/items/%FF".into(), 400),
        ("/items/99999999999999999999".into(), 400),
        ("/items/9223372036854775807".into(), 404),
        ("/nowhere".into(), 404),
        ("/items".into(), 404),
        ("/queues".into(), 404),
        (format!("{pid}/retry"), 405),
        (format!("{pid}/bogus"), 405),
        ("/?done=%3Cscript%3E".into(), 200),
    ];
    for (path, want) in &gets {
        let reply = ui.get(path);
        assert_eq!(reply.status, *want, "GET {path}: {}", reply.body);
        assert!(reply.content_type.starts_with("text/html"), "GET {path}");
        if *want >= 400 {
            assert!(!reply.error().is_empty(), "GET {path}");
        }
    }
    let posts: Vec<(String, Fields, u16)> = vec![
        ("/items/abc/retry".into(), vec![], 400),
        ("/items/-1/cancel".into(), vec![], 400),
        ("/items/9223372036854775807/retry".into(), vec![], 404),
        (format!("{pid}/explode"), vec![], 404),
        ("/queues/nope/pause".into(), vec![], 404),
        ("/queues/%FF/pause".into(), vec![], 400),
        (format!("{pid}/reschedule"), vec![("delay", "abc")], 400),
        (format!("{pid}/reschedule"), vec![("delay", "-1")], 400),
        (
            format!("{pid}/reschedule"),
            vec![("delay", "99999999999999999999")],
            400,
        ),
        (
            format!("{pid}/reschedule"),
            vec![("run_at", "not a time")],
            400,
        ),
        (format!("{pid}/reschedule"), vec![("run_at", &long)], 400),
        (format!("{pid}/reschedule"), vec![], 400),
        (format!("{pid}/retry"), vec![], 409),
        ("/queues/q/resume".into(), vec![], 409),
        ("/".into(), vec![], 405),
        (pid.clone(), vec![], 405),
    ];
    for (path, form, want) in &posts {
        let reply = ui.submit(path, form);
        assert_eq!(reply.status, *want, "POST {path} {form:?}: {}", reply.body);
        assert!(!reply.error().is_empty(), "POST {path}");
    }
    let reply = ui.submit(&format!("{pid}/reschedule"), &[("run_at", "not a time")]);
    assert!(reply.error().contains("22007"), "{}", reply.error());
    assert_eq!(snapshot(&mut db), before, "bad input changed nothing");
}

/// `workfence.items`' sequential and index scans in `db`, as the statistics have them.
fn items_scans(c: &mut postgres::Client) -> (i64, i64) {
    let r = ok(
        c.query_one(
            "SELECT COALESCE(t.seq_scan, 0)::int8, COALESCE(t.idx_scan, 0)::int8 \
               FROM pg_catalog.pg_stat_user_tables AS t \
              WHERE t.relid OPERATOR(pg_catalog.=) 'workfence.items'::regclass",
            &[],
        ),
        "pg_stat_user_tables",
    );
    (r.get(0), r.get(1))
}

/// Waits until no client backend but `c`'s own is connected to `c`'s database: a backend
/// that has ended has written its statistics (they are sent at transaction end at most once
/// a second, and at the latest when the backend exits).
fn until_alone(c: &mut postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let others: i64 = ok(
            c.query_one(
                "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity AS a \
                  WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() \
                    AND a.backend_type OPERATOR(pg_catalog.=) 'client backend' \
                    AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()",
                &[],
            ),
            "pg_stat_activity",
        )
        .get(0);
        if others == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{others} backends still connected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_unknown_queue_is_answered_without_scanning_the_items() {
    let cluster = cluster();
    let name = "ui_no_scan";
    let mut db = database(&cluster, name);
    // A big queue of every state, small ones beside it, and a queue that has only settings:
    // enough rows that an index probe is the plan, and a scan of them all shows.
    ok(
        db.batch_execute(
            r#"
SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 20000) AS n,
       LATERAL workfence.work_enqueue('big', pg_catalog.jsonb_build_object('n', n), 'item-' || n) AS e;
SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 50) AS q,
       pg_catalog.generate_series(1, 20) AS n,
       LATERAL workfence.work_enqueue('small-' || q, '{}', 'k' || n) AS e;
UPDATE workfence.items
   SET state = (CASE WHEN id % 20 < 12 THEN 'done'
                     WHEN id % 20 < 16 THEN 'pending'
                     WHEN id % 20 < 18 THEN 'failed'
                     ELSE 'cancelled' END)::workfence.item_state,
       finished_at = CASE WHEN id % 20 < 12 OR id % 20 >= 16
                          THEN pg_catalog.now() - (id % 86400) * interval '1 second' END
 WHERE queue = 'big';
SELECT workfence.work_pause('only.settings');
ANALYZE workfence.items;
"#,
        ),
        "loading the items",
    );
    drop(db);
    let mut admin = ok(cluster.connect_to(name), "connect");
    until_alone(&mut admin);
    let before = items_scans(&mut admin);

    let unknown = [
        "/queues/nope",
        "/queues/nope?state=done",
        "/queues/nope?state=failed",
        "/queues/nope?state=cancelled",
        "/queues/nope?state=pending",
        "/queues/nope?key=item-1",
        "/queues/nope?state=done&after=5",
    ];
    // As the superuser, who may read the settings table: a queue that has only settings is found.
    let ui = Ui::on(&cluster.connection_string(name));
    for path in unknown {
        let reply = ui.get(path);
        assert_eq!(reply.status, 404, "GET {path}: {}", reply.body);
        assert!(
            reply.error().contains("no items and no settings"),
            "{}",
            reply.error()
        );
    }
    for path in [
        "/queues/only.settings",
        "/queues/big?state=failed",
        "/queues/small-7",
    ] {
        let reply = ui.get(path);
        assert_eq!(reply.status, 200, "GET {path}: {}", reply.body);
    }
    for action in ["pause", "resume", "limits"] {
        let path = format!("/queues/nope/{action}");
        let reply = ui.submit_from("/queues/big", &path, &[("concurrency", "2")]);
        assert_eq!(reply.status, 404, "POST {path}: {}", reply.body);
    }
    drop(ui);

    // As a monitor and operator (no SELECT on workfence.queues): the same 404s, which say that
    // a queue with only settings is not found; a resume of one is done all the same.
    let ui = Ui::on(&dsn_as(&cluster, name, "ui_operator"));
    for path in unknown.iter().chain(&["/queues/only.settings"]) {
        let reply = ui.get(path);
        assert_eq!(reply.status, 404, "GET {path}: {}", reply.body);
        assert!(
            reply.error().contains("SELECT on workfence.queues"),
            "{}",
            reply.error()
        );
    }
    for action in ["pause", "resume", "limits"] {
        let path = format!("/queues/nope/{action}");
        let reply = ui.submit_from("/queues/big", &path, &[("concurrency", "2")]);
        assert_eq!(reply.status, 404, "POST {path}: {}", reply.body);
    }
    let reply = ui.submit_from("/queues/big", "/queues/only.settings/resume", &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    let reply = ui.submit_from("/queues/big", "/queues/only.settings/resume", &[]);
    assert_eq!(reply.status, 404, "{}", reply.body);
    drop(ui);

    until_alone(&mut admin);
    let after = items_scans(&mut admin);
    assert_eq!(
        after.0 - before.0,
        0,
        "sequential scans of workfence.items (before {before:?}, after {after:?})"
    );
    assert!(
        after.1 > before.1,
        "the probes use an index: {before:?} {after:?}"
    );
}

#[test]
fn database_values_are_escaped() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_xss");
    let queue = format!("x{XSS}");
    let id = enqueue(
        &mut db,
        Enqueue::new(&queue)
            .key(XSS)
            .payload(json!({ "html": XSS }))
            .max_attempts(1),
    );
    let claim = ok(
        calls::claim_key(&mut db, &queue, XSS, XSS, "1 hour"),
        "claim",
    )
    .expect("claimable");
    assert!(ok(
        calls::fail(&mut db, &claim.token(XSS), XSS, None),
        "fail"
    ));
    // Paused, so that the flash of a pause (which names the queue) shows.
    assert!(ok(calls::pause(&mut db, &queue), "pause"));
    let ui = Ui::on(&cluster.connection_string("ui_xss"));
    let encoded: String = queue
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let item = format!("/items/{id}");
    let flash = format!("/?done=paused&queue={encoded}");
    let search = format!("/queues/{encoded}?key=x{encoded}");
    let items = format!("/queues/{encoded}");
    let failed = format!("/queues/{encoded}?state=failed");
    let pages = [
        ("/", 200),
        (item.as_str(), 200),
        (flash.as_str(), 200),
        (search.as_str(), 404),
        ("/queues/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404),
        (items.as_str(), 200),
        (failed.as_str(), 200),
    ];
    for (path, want) in pages {
        let reply = ui.get(path);
        assert_eq!(reply.status, want, "{path}: {}", reply.body);
        assert!(
            !reply.body.contains(XSS),
            "{path} has a raw script: {}",
            reply.body
        );
        assert!(
            reply.body.contains(XSS_ESCAPED),
            "{path} shows the value as text: {}",
            reply.body
        );
    }
    let page = ui.get(&flash).body;
    assert!(
        section(&page, "<p id=\"flash\">", "</p>").contains(XSS_ESCAPED),
        "{page}"
    );
    let page = ui.get(&item).body;
    let payload_start = page.find("<pre id=\"payload\">").expect("payload");
    assert!(page[payload_start..].contains(XSS_ESCAPED));
    assert!(page.contains("<table id=\"errors\">"));
}

#[test]
fn another_sites_page_cannot_make_the_dashboard_load_its_pages() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_cross_get");
    let id = enqueue(&mut db, Enqueue::new("g").key("k"));
    let ui = Ui::on(&cluster.connection_string("ui_cross_get"));
    let item = format!("/items/{id}");
    let paths = ["/", "/metrics", "/queues/g", item.as_str()];
    // `<img src>`, `fetch()`, `<iframe src>` of another site's page: refused
    // before any query runs.
    for (mode, dest) in [
        ("no-cors", "image"),
        ("cors", "empty"),
        ("navigate", "iframe"),
    ] {
        for path in paths {
            let reply = ui.get_with(
                path,
                &[
                    ("Sec-Fetch-Site", "cross-site"),
                    ("Sec-Fetch-Mode", mode),
                    ("Sec-Fetch-Dest", dest),
                ],
            );
            assert_eq!(reply.status, 403, "{mode} {dest} {path}: {}", reply.body);
            let error = reply.error();
            assert!(error.starts_with("Refused: another site's page"), "{error}");
            assert!(
                error.contains(&format!("Sec-Fetch-Mode: {mode}")),
                "{error}"
            );
        }
    }
    for path in paths {
        // A person following a link from another site.
        let reply = ui.get_with(
            path,
            &[
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "navigate"),
                ("Sec-Fetch-Dest", "document"),
                ("Sec-Fetch-User", "?1"),
            ],
        );
        assert_eq!(reply.status, 200, "navigate {path}: {}", reply.body);
        // The dashboard's own page loading its stylesheet, or a link on it.
        let reply = ui.get_with(
            path,
            &[
                ("Sec-Fetch-Site", "same-origin"),
                ("Sec-Fetch-Mode", "no-cors"),
                ("Sec-Fetch-Dest", "image"),
            ],
        );
        assert_eq!(reply.status, 200, "same-origin {path}: {}", reply.body);
        // No Sec-Fetch-* at all: a client that is not a browser (Prometheus).
        let reply = ui.get(path);
        assert_eq!(reply.status, 200, "no header {path}: {}", reply.body);
    }
}

#[test]
fn cross_site_posts_are_refused_and_change_nothing() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_csrf");
    let id = failed_item(&mut db, "c", "k", "boom");
    let ui = Ui::on(&cluster.connection_string("ui_csrf"));
    let token = ui.token();
    let own = ui.base.clone();
    let retry = format!("/items/{id}/retry");
    let refused: Vec<(Fields, Fields)> = vec![
        // A form of another site, even with the right token.
        (
            vec![("csrf", &token)],
            vec![("Origin", "http://evil.example")],
        ),
        (vec![("csrf", &token)], vec![("Origin", "null")]),
        (
            vec![("csrf", &token)],
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
        // No token, or a wrong one, from our own origin.
        (vec![], vec![("Origin", &own)]),
        (vec![("csrf", "guessed")], vec![("Origin", &own)]),
        (vec![("csrf", "")], vec![]),
    ];
    for (form, headers) in &refused {
        let reply = ui.post(&retry, form, headers);
        assert_eq!(reply.status, 403, "{form:?} {headers:?}: {}", reply.body);
        assert!(reply.error().contains("Refused"), "{}", reply.error());
        assert_eq!(state_of(&mut db, id), "failed");
    }
    for path in ["/queues/c/pause", "/items/1/cancel"] {
        assert_eq!(
            ui.post(path, &[], &[("Origin", "http://evil.example")])
                .status,
            403
        );
    }
    assert!(!ok(calls::queue_stats(&mut db), "stats")[0].paused);

    // The same form from the dashboard's own page goes through.
    let reply = ui.post(
        &retry,
        &[("csrf", &token)],
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(
        reply.location.as_deref(),
        Some(format!("/items/{id}?done=retried").as_str())
    );
    assert_eq!(state_of(&mut db, id), "pending");
    // Without Origin (an older browser) the token alone is enough.
    let reply = ui.post("/queues/c/pause", &[("csrf", &token)], &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert!(ok(calls::queue_stats(&mut db), "stats")[0].paused);
    let page = ui.get(reply.location.as_deref().unwrap());
    assert!(
        page.body.contains("<p id=\"flash\">Paused queue c"),
        "{}",
        page.body
    );
}

#[test]
fn actions_go_through_the_extensions_functions() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_actions");
    let later = enqueue(
        &mut db,
        Enqueue::new("a")
            .key("later")
            .run_at(RunAt::In("1 day".into())),
    );
    let other = enqueue(
        &mut db,
        Enqueue::new("a")
            .key("other")
            .run_at(RunAt::In("1 day".into())),
    );
    let doomed = enqueue(&mut db, Enqueue::new("a").key("doomed"));
    let failed = failed_item(&mut db, "a", "failed", "it broke");
    let ui = Ui::on(&cluster.connection_string("ui_actions"));
    let due = |db: &mut postgres::Client, id: i64| -> bool {
        db.query_one(
            "SELECT i.run_at <= pg_catalog.now() FROM workfence.work_item($1::int8) AS i",
            &[&id],
        )
        .unwrap()
        .get(0)
    };

    // The page offers what the item's state allows.
    let page = ui.get(&format!("/items/{later}")).body;
    for action in ["run-now", "reschedule", "cancel"] {
        assert!(
            page.contains(&format!("data-action=\"{action}\"")),
            "{action}: {page}"
        );
    }
    assert!(!page.contains("data-action=\"retry\""));
    assert!(ui
        .get(&format!("/items/{failed}"))
        .body
        .contains("data-action=\"retry\""));

    assert!(!due(&mut db, later));
    let reply = ui.submit(&format!("/items/{later}/run-now"), &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert!(due(&mut db, later));

    let reply = ui.submit(&format!("/items/{later}/reschedule"), &[("delay", "3600")]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert!(!due(&mut db, later));
    let reply = ui.submit(
        &format!("/items/{other}/reschedule"),
        &[("run_at", "2001-02-03T04:05"), ("delay", "")],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    let run_at: String = db
        .query_one(
            "SELECT pg_catalog.to_char(pg_catalog.timezone('UTC', i.run_at), 'YYYY-MM-DD HH24:MI') \
             FROM workfence.work_item($1::int8) AS i",
            &[&other],
        )
        .unwrap()
        .get(0);
    assert_eq!(run_at, "2001-02-03 04:05");

    assert_eq!(
        ui.submit(&format!("/items/{doomed}/cancel"), &[]).status,
        303
    );
    assert_eq!(state_of(&mut db, doomed), "cancelled");
    let reply = ui.submit(&format!("/items/{doomed}/cancel"), &[]);
    assert_eq!(reply.status, 409);
    assert!(reply.error().contains("cancelled"), "{}", reply.error());

    let reply = ui.submit(&format!("/items/{failed}/retry"), &[]);
    assert_eq!(reply.status, 303);
    assert_eq!(state_of(&mut db, failed), "pending");
    let page = ui.get(reply.location.as_deref().unwrap()).body;
    assert!(page.contains("<p id=\"flash\">Retried"), "{page}");
    assert!(page.contains("it broke"), "the error history stays: {page}");

    assert_eq!(ui.submit("/queues/a/pause", &[]).status, 303);
    let page = ui.get("/").body;
    assert!(page.contains("data-action=\"resume\""), "{page}");
    assert_eq!(ui.submit("/queues/a/pause", &[]).status, 409);
    assert_eq!(ui.submit("/queues/a/resume", &[]).status, 303);
    assert!(!ok(calls::queue_stats(&mut db), "stats")[0].paused);
}

#[test]
fn the_item_page_explains_the_lease() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_lease");
    let id = enqueue(
        &mut db,
        Enqueue::new("l").key("held").payload(json!({"a": [1, 2]})),
    );
    let claim = ok(
        calls::claim_key(&mut db, "l", "held", "worker-7", "1 hour"),
        "claim",
    )
    .expect("claimable");
    // A checkpoint stored under the claim's token (docs/contract.md, promise 11).
    // (Its keys in the same order in jsonb, by length, as in serde_json's map, by name.)
    let checkpoint = json!({"at": "<b>row 3</b>", "of": 10, "sent": 3});
    assert!(ok(
        calls::generated::work_progress(&mut db, id, "worker-7", claim.epoch, &checkpoint),
        "work_progress"
    ));
    let fresh = enqueue(&mut db, Enqueue::new("l").key("fresh"));
    let ui = Ui::on(&cluster.connection_string("ui_lease"));
    let page = ui.get(&format!("/items/{id}")).body;
    assert!(page.contains("<span id=\"state\">claimed</span>"), "{page}");
    // The checkpoint, indented and escaped.
    assert_eq!(
        section(&page, "<pre id=\"progress\">", "</pre>"),
        "{\n  &quot;at&quot;: &quot;&lt;b&gt;row 3&lt;/b&gt;&quot;,\n  &quot;of&quot;: 10,\n  \
         &quot;sent&quot;: 3\n}",
        "{page}"
    );
    let lease = section(&page, "<p id=\"lease-status\">", "</p>");
    assert!(lease.starts_with("current: the holder's token"), "{lease}");
    assert!(lease.contains(&format!("epoch {}", claim.epoch)), "{lease}");
    assert!(section(&page, "<dl id=\"lease\">", "</dl>").contains("worker-7"));
    assert!(section(&page, "<pre id=\"payload\">", "</pre>").contains("&quot;a&quot;: ["));
    let page = ui.get(&format!("/items/{fresh}")).body;
    assert!(section(&page, "<p id=\"lease-status\">", "</p>").starts_with("no lease"));
    // Nothing stored is said so, with no empty box or table.
    assert!(
        section(&page, "id=\"result\"", "</p>").contains("no result"),
        "{page}"
    );
    assert!(
        page.contains("<p class=\"muted\" id=\"progress\">none</p>"),
        "{page}"
    );
    assert!(!page.contains("<pre id=\"progress\">"), "{page}");
    assert!(!page.contains("<table id=\"errors\">"), "{page}");
    assert!(
        page.contains("No failed attempt or lapsed lease."),
        "{page}"
    );

    // Leases that ran out: one with attempts left is taken over by the next
    // claim, one on the last attempt is dead-lettered by it.
    let again = enqueue(&mut db, Enqueue::new("l").key("again").max_attempts(3));
    let last = enqueue(&mut db, Enqueue::new("l").key("last").max_attempts(1));
    for key in ["again", "last"] {
        ok(
            calls::claim_key(&mut db, "l", key, "worker-8", "1 millisecond"),
            "a claim with a lease of a millisecond",
        )
        .expect("claimable");
    }
    // Until the server's clock is past both leases (a few round trips).
    while !db
        .query_one(
            "SELECT pg_catalog.bool_and(lease_until < pg_catalog.clock_timestamp()) \
               FROM workfence.items WHERE id = ANY($1)",
            &[&vec![again, last]],
        )
        .unwrap()
        .get::<_, bool>(0)
    {}
    let page = ui.get(&format!("/items/{again}")).body;
    let lease = section(&page, "<p id=\"lease-status\">", "</p>");
    assert!(lease.starts_with("lapsed: the lease"), "{lease}");
    assert!(
        lease.contains("the next claim takes the item over"),
        "{lease}"
    );
    let page = ui.get(&format!("/items/{last}")).body;
    let lease = section(&page, "<p id=\"lease-status\">", "</p>");
    assert!(lease.starts_with("lapsed on the last attempt"), "{lease}");
    assert!(lease.contains("attempt 1 of 1"), "{lease}");
    assert!(lease.contains("dead-letters the item"), "{lease}");
    assert!(!lease.contains("takes the item over"), "{lease}");

    let token = Token::new(id, "worker-7", claim.epoch);
    assert!(ok(
        calls::finish(&mut db, &token, Some(&json!({"ok": true}))),
        "finish"
    ));
    let page = ui.get(&format!("/items/{id}")).body;
    assert!(
        section(&page, "<p id=\"lease-status\">", "</p>").starts_with("finished: the item is done")
    );
    assert!(section(&page, "<pre id=\"result\">", "</pre>").contains("&quot;ok&quot;: true"));
}

/// The text between `start` and the next `end` after it.
fn section<'a>(page: &'a str, start: &str, end: &str) -> &'a str {
    let from = page
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {page}"))
        + start.len();
    let to = page[from..].find(end).expect("end") + from;
    &page[from..to]
}

#[test]
fn a_monitoring_role_sees_no_actions_and_is_refused_by_the_server() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_monitor");
    let id = failed_item(&mut db, "mon", "k", "boom");
    let ui = Ui::on(&dsn_as(&cluster, "ui_monitor", "ui_watcher"));
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"read-only\""), "{}", page.body);
    assert!(page.body.contains("data-queue=\"mon\""));
    assert!(page.body.contains("as role <code>ui_watcher</code>"));
    for path in ["/".to_owned(), format!("/items/{id}")] {
        let page = ui.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(
            !page.body.contains("method=\"post\""),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("data-action"), "{path}");
        assert!(page.body.contains("id=\"read-only\""), "{path}");
    }
    // The lease sentence is read from the item: no EXECUTE on work_lease_status.
    let page = ui.get(&format!("/items/{id}")).body;
    assert!(section(&page, "<p id=\"lease-status\">", "</p>")
        .contains("may not call work_lease_status"));

    for path in [format!("/items/{id}/retry"), "/queues/mon/pause".to_owned()] {
        let reply = ui.submit(&path, &[]);
        assert_eq!(reply.status, 403, "{path}: {}", reply.body);
        let error = reply.error();
        assert!(error.contains("42501"), "{error}");
        assert!(error.contains("permission denied"), "{error}");
    }
    assert_eq!(state_of(&mut db, id), "failed");

    // An operator (monitor + operator groups) may retry, and has no cancel.
    let ui = Ui::on(&dsn_as(&cluster, "ui_monitor", "ui_operator"));
    let page = ui.get(&format!("/items/{id}")).body;
    assert!(page.contains("data-action=\"retry\""), "{page}");
    assert!(!page.contains("id=\"read-only\""), "{page}");
    assert_eq!(ui.submit(&format!("/items/{id}/retry"), &[]).status, 303);
    assert_eq!(state_of(&mut db, id), "pending");
    let page = ui.get(&format!("/items/{id}")).body;
    assert!(!page.contains("data-action=\"cancel\""), "{page}");
    let reply = ui.submit(&format!("/items/{id}/cancel"), &[]);
    assert_eq!(reply.status, 403);
    assert!(reply.error().contains("42501"));
}

#[test]
fn queue_grants_make_a_queue_read_only() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_queue_grants");
    failed_item(&mut db, "team.a", "k", "boom");
    let team_b = failed_item(&mut db, "team.b", "k", "boom");
    ok(
        db.batch_execute(
            "SELECT workfence.work_grant('read', 'team.*', 'ui_operator');
             SELECT workfence.work_grant('operate', 'team.a', 'ui_operator');
             SELECT workfence.work_grant('read', 'team.*', 'ui_worker');
             SELECT workfence.work_enforce_grants(true);",
        ),
        "queue grants",
    );
    let ui = Ui::on(&dsn_as(&cluster, "ui_queue_grants", "ui_operator"));
    let page = ui.get("/").body;
    let row = |q: &str| section(&page, &format!("data-queue=\"{q}\""), "</tr>").to_owned();
    assert!(row("team.a").contains("data-action=\"pause\""), "{page}");
    assert!(!row("team.b").contains("data-action"), "{page}");
    let reply = ui.submit("/queues/team.b/pause", &[]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.error().contains("42501"));

    // A role that may call work_lease_status, and may read team.b but not
    // claim from it: the function answers missing about the item shown, and
    // the page reads the lease from the item instead.
    let ui = Ui::on(&dsn_as(&cluster, "ui_queue_grants", "ui_worker"));
    let page = ui.get(&format!("/items/{team_b}"));
    assert_eq!(page.status, 200, "{}", page.body);
    let lease = section(&page.body, "<p id=\"lease-status\">", "</p>");
    assert!(lease.starts_with("finished: the item is failed"), "{lease}");
    assert!(
        lease.contains("(Read from the item: work_lease_status answered missing"),
        "{lease}"
    );
}

#[test]
fn the_items_page_pages_by_keyset_and_finds_keys() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_items");
    ok(
        db.batch_execute(
            "SELECT workfence.work_enqueue('big', key => 'k' || g) FROM pg_catalog.generate_series(1, 120) AS g",
        ),
        "120 items",
    );
    failed_item(&mut db, "big", "broken", "went wrong");
    ok(
        db.batch_execute(
            "SELECT workfence.work_enqueue('full', key => 'f' || g) FROM pg_catalog.generate_series(1, 100) AS g",
        ),
        "100 items: two full pages",
    );
    let ui = Ui::on(&cluster.connection_string("ui_items"));

    // Every state: by key, descending (docs/contract.md), read from the table.
    let pages = walk(&ui, "/queues/big");
    assert_eq!(pages.len(), 3);
    let seen: Vec<i64> = pages.concat();
    assert_eq!(
        seen,
        ids_by_key_desc(&mut db, "big"),
        "every item once, by key descending"
    );
    // Exactly full pages: 100 items are two pages of 50, and the second has
    // no next link (the dashboard reads one row more than it shows).
    let pages = walk(&ui, "/queues/full");
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![50, 50],
        "{pages:?}"
    );
    assert_eq!(pages.concat(), ids_by_key_desc(&mut db, "full"));

    let failed = ui.get("/queues/big?state=failed").body;
    let failed_ids = row_ids(&failed);
    assert_eq!(failed_ids.len(), 1);
    assert!(failed.contains("went wrong"));
    assert!(next_link(&failed).is_none());
    let pending = ui.get("/queues/big?state=pending").body;
    let first_page = row_ids(&pending);
    assert_eq!(first_page.len(), 50);
    let next = next_link(&pending)
        .expect("a next page")
        .replace("&amp;", "&");
    assert!(next.contains("state=pending"), "{next}");
    assert!(
        next.ends_with(&format!("after={}", first_page[49])),
        "{next}"
    );

    // An empty page after an item that is still listed: nothing follows it.
    let page = ui.get(&format!("/queues/big?state=failed&after={}", failed_ids[0]));
    assert_eq!(page.status, 200, "{}", page.body);
    let empty = section(&page.body, "<p id=\"no-items\">", "</p>");
    assert!(empty.starts_with("No more items after item"), "{empty}");
    assert!(
        empty.contains("href=\"/queues/big?state=failed\""),
        "{empty}"
    );
    // Retried, it has left the failed listing: the same page says so.
    assert!(ok(
        calls::retry(&mut db, "big", "broken", None),
        "work_retry"
    ));
    let page = ui.get(&format!("/queues/big?state=failed&after={}", failed_ids[0]));
    assert_eq!(page.status, 200, "{}", page.body);
    let empty = strip_tags(section(&page.body, "<p id=\"no-items\">", "</p>"));
    assert!(
        empty.starts_with(&format!(
            "The item this page started after ({}) has left this listing (it is pending now)",
            failed_ids[0]
        )),
        "{empty}"
    );
    // The item a next link starts after leaves the listing (finished and
    // purged): its next page is empty, though 50 items follow its old place,
    // and says why, with the way back to the first page.
    let full = ui.get("/queues/full").body;
    let last_shown = *row_ids(&full).last().expect("rows");
    let next = next_link(&full).expect("a next page").replace("&amp;", "&");
    assert!(next.ends_with(&format!("after={last_shown}")), "{next}");
    let key: String = db
        .query_one(
            "SELECT key FROM workfence.items WHERE id = $1",
            &[&last_shown],
        )
        .unwrap()
        .get(0);
    let claim = ok(
        calls::claim_key(&mut db, "full", &key, "w", "1 hour"),
        "claiming the last item of the first page",
    )
    .expect("claimable");
    assert!(ok(
        calls::finish(&mut db, &claim.token("w"), None),
        "finish"
    ));
    assert_eq!(
        ok(
            calls::purge(&mut db, Some("0 seconds"), Some("full")),
            "purge"
        ),
        1
    );
    let page = ui.get(&next);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(row_ids(&page.body).is_empty(), "{}", page.body);
    let empty = section(&page.body, "<p id=\"no-items\">", "</p>");
    assert!(
        strip_tags(empty).starts_with(&format!(
            "The item this page started after ({last_shown}) has left this listing \
             (purged: no item has that id) — start again from the first page."
        )),
        "{empty}"
    );
    assert!(
        empty.contains("href=\"/queues/full\">the first page</a>"),
        "{empty}"
    );
    assert!(next_link(&page.body).is_none());
    // An id no item has: left too (purged, say).
    let page = ui.get("/queues/big?after=9223372036854775807");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("has left this listing"), "{}", page.body);

    let reply = ui.get("/queues/big?key=k7");
    assert_eq!(reply.status, 303);
    let id: i64 = db
        .query_one(
            "SELECT i.id FROM workfence.work_item('big', 'k7') AS i",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        reply.location.as_deref(),
        Some(format!("/items/{id}").as_str())
    );
    let reply = ui.get("/queues/big?key=k999");
    assert_eq!(reply.status, 404);
    assert!(
        reply.error().contains("no item with key"),
        "{}",
        reply.error()
    );
}

/// The ids of every page of the listing from `first` on, following the next
/// links, page by page.
fn walk(ui: &Ui, first: &str) -> Vec<Vec<i64>> {
    let mut pages = Vec::new();
    let mut path = first.to_owned();
    loop {
        let reply = ui.get(&path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let ids = row_ids(&reply.body);
        assert!(!ids.is_empty() && ids.len() <= 50, "{path}: {ids:?}");
        pages.push(ids);
        assert!(pages.len() <= 100, "the next links end");
        match next_link(&reply.body) {
            Some(next) => path = next.replace("&amp;", "&"),
            None => return pages,
        }
    }
}

/// The ids of `queue`'s items by key, descending, read from the table (as
/// the superuser): the order of the every-state listing.
fn ids_by_key_desc(db: &mut postgres::Client, queue: &str) -> Vec<i64> {
    ok(
        db.query(
            "SELECT id FROM workfence.items WHERE queue = $1 ORDER BY key DESC",
            &[&queue],
        ),
        "reading workfence.items",
    )
    .iter()
    .map(|row| row.get(0))
    .collect()
}

/// The ids of the rows of `<table id="items">`.
fn row_ids(page: &str) -> Vec<i64> {
    page.match_indices("<tr data-id=\"")
        .map(|(at, m)| {
            let rest = &page[at + m.len()..];
            rest[..rest.find('"').unwrap()].parse().unwrap()
        })
        .collect()
}

fn next_link(page: &str) -> Option<String> {
    let marker = "<a id=\"next\" href=\"";
    let start = page.find(marker)? + marker.len();
    Some(page[start..start + page[start..].find('"')?].to_owned())
}

#[test]
fn a_hot_standby_is_shown_read_only() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_standby");
    let id = failed_item(&mut db, "s", "k", "boom");
    schedule(&mut db, "s-nightly", "s");
    let standby = ok(cluster.standby(scratch()), "starting a hot standby");
    let ui = Ui::on(&standby.connection_string("ui_standby"));
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"read-only\""), "{}", page.body);
    assert!(page.body.contains("hot standby"), "{}", page.body);
    assert!(page.body.contains("data-queue=\"s\""));
    let paths = [
        format!("/items/{id}"),
        "/metrics".to_owned(),
        "/queues/s".to_owned(),
        "/schedules".to_owned(),
    ];
    for path in &paths {
        let page = ui.get(path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(!page.body.contains("method=\"post\""), "{path}");
    }
    let page = ui.get("/schedules").body;
    assert!(page.contains("data-schedule=\"s-nightly\""), "{page}");
    assert!(page.contains("hot standby"), "{page}");
    for path in [
        format!("/items/{id}/retry"),
        "/schedules/s-nightly/pause".into(),
    ] {
        let reply = ui.submit(&path, &[]);
        assert_eq!(reply.status, 409, "{path}: {}", reply.body);
        assert!(reply.error().contains("25006"), "{}", reply.error());
    }
    assert_eq!(state_of(&mut db, id), "failed");
    assert!(!schedule_paused(&mut db, "s-nightly"));
}

#[test]
fn a_database_that_is_down_is_a_503_page() {
    // A port nobody listens on.
    let port = {
        let listener = ok(std::net::TcpListener::bind("127.0.0.1:0"), "a free port");
        ok(listener.local_addr(), "its address").port()
    };
    let ui = Ui::on(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=2"
    ));
    for path in ["/", "/metrics", "/items/1", "/queues/q"] {
        let reply = ui.get(path);
        assert_eq!(reply.status, 503, "{path}: {}", reply.body);
        assert!(reply.error().contains("connection"), "{}", reply.error());
    }
    // Input is still checked first where it can be.
    assert_eq!(ui.get("/items/abc").status, 400);
}

#[test]
fn a_refused_login_or_a_missing_database_is_a_503_saying_as_whom() {
    let cluster = cluster();
    database(&cluster, "ui_login");
    for (dsn, code, whom) in [
        (
            dsn_as(&cluster, "ui_login", "ui_nobody"),
            "28000",
            "cannot connect as role \"ui_nobody\" to database \"ui_login\"",
        ),
        (
            dsn_as(&cluster, "ui_no_such_database", "ui_watcher"),
            "3D000",
            "cannot connect as role \"ui_watcher\" to database \"ui_no_such_database\"",
        ),
    ] {
        let ui = Ui::on(&dsn);
        for path in ["/", "/metrics", "/queues/q", "/items/1"] {
            let reply = ui.get(path);
            assert_eq!(reply.status, 503, "{dsn} {path}: {}", reply.body);
            let error = reply.error().replace("&quot;", "\"");
            assert!(error.starts_with(&format!("SQLSTATE {code}: ")), "{error}");
            assert!(error.contains(whom), "{error}");
        }
    }
}

#[test]
fn an_extension_without_work_items_is_a_503_saying_to_update_it() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_stale");
    enqueue(&mut db, Enqueue::new("q").key("k"));
    // What a database still on 0.10.0 lacks.
    ok(
        db.batch_execute(
            "ALTER EXTENSION pg_workfence DROP FUNCTION workfence.work_items(text, text, bigint, integer);
             DROP FUNCTION workfence.work_items(text, text, bigint, integer);",
        ),
        "dropping work_items",
    );
    let ui = Ui::on(&cluster.connection_string("ui_stale"));
    let reply = ui.get("/queues/q");
    assert_eq!(reply.status, 503, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42883: "), "{error}");
    assert!(error.contains("0.11.0"), "{error}");
    assert!(
        error.contains("ALTER EXTENSION pg_workfence UPDATE"),
        "{error}"
    );
    assert!(
        !reply.body.contains("explicit type casts"),
        "{}",
        reply.body
    );
    // The pages that do not need it still work.
    assert_eq!(ui.get("/").status, 200);
}

#[test]
fn throughput_is_counted_since_the_dashboard_started_watching() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_throughput");
    for i in 0..3 {
        enqueue(&mut db, Enqueue::new("t").key(format!("k{i}")));
    }
    // Not due: keeps the queue listed once the finished items are purged.
    enqueue(
        &mut db,
        Enqueue::new("t")
            .key("later")
            .run_at(RunAt::In("1 hour".into())),
    );
    let ui = Ui::on(&cluster.connection_string("ui_throughput"));
    let cell = |ui: &Ui| {
        let page = ui.get("/").body;
        let row = section(&page, "data-queue=\"t\"", "</tr>").to_owned();
        strip_tags(&format!(
            "<{}",
            section(&row, "<td class=\"throughput\"", "</td>")
        ))
    };
    // The dashboard reads the count between a request and its answer: the
    // first reading (0 finished) at t0 in [before_first, after_first].
    let before_first = Instant::now();
    assert_eq!(cell(&ui), "—", "one reading is no rate");
    let after_first = Instant::now();
    for claim in ok(
        calls::claim(&mut db, "t", "w", "1 hour", Some(3), None),
        "claim",
    ) {
        assert!(ok(
            calls::finish(&mut db, &claim.token("w"), None),
            "finish"
        ));
    }
    // A rate needs two readings at least a second apart (the dashboard's
    // rule): wait out that second of the test's own clock. This waits for
    // time itself to pass, not for another process to be done.
    let second = Duration::from_secs(1) + Duration::from_millis(20);
    std::thread::sleep(second.saturating_sub(after_first.elapsed()));
    // The second reading (3 finished) at t1 in [before_last, after_last].
    let before_last = Instant::now();
    let text = cell(&ui);
    let after_last = Instant::now();
    let rate: f64 = text
        .strip_suffix("/min")
        .unwrap_or_else(|| panic!("a rate: {text:?}"))
        .parse()
        .expect("a number");
    // 3 items over t1 - t0, per minute, shown to one decimal.
    let per_minute = |span: Duration| 3.0 * 60.0 / span.as_secs_f64();
    let lowest = per_minute(after_last - before_first);
    let highest = per_minute(before_last - after_first);
    assert!(
        lowest - 0.05 <= rate && rate <= highest + 0.05,
        "{lowest} <= {rate} <= {highest}"
    );

    // A purge lowers the count: the readings start over, no rate.
    assert_eq!(
        ok(
            calls::purge(&mut db, Some("0 seconds"), Some("t")),
            "work_purge"
        ),
        3
    );
    assert_eq!(cell(&ui), "—", "a fall starts the readings over");
}

/// The limits cell of queue `queue`'s row on the queues page, tags removed.
fn limits_cell(ui: &Ui, queue: &str) -> String {
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    let row = section(&page.body, &format!("data-queue=\"{queue}\""), "</tr>").to_owned();
    let cell = section(&row, "<td class=\"limits\"", "</td>");
    strip_tags(section(cell, "<span class=\"limits-now\">", "</span>"))
}

/// The queues page shows each queue's limits as `work_queue_stats` has them,
/// `per_group` (0.12.0) included; on a database still on 0.11.0, whose view
/// has no `per_group`, it shows the other limits.
#[test]
fn the_queues_page_shows_every_limit_per_group_included() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_limits");
    ok(
        calls::work_limit_per_group(&mut db, "grouped", Some(4), Some(100), "1 minute", Some(3)),
        "work_limit with per_group",
    );
    ok(
        calls::work_limit(&mut db, "plain", Some(2), None, "1 second"),
        "work_limit",
    );
    enqueue(&mut db, Enqueue::new("free").key("k"));
    let ui = Ui::on(&cluster.connection_string("ui_limits"));
    assert_eq!(
        limits_cell(&ui, "grouped"),
        "concurrency 4; 100 per 00:01:00; 3 per group"
    );
    assert_eq!(limits_cell(&ui, "plain"), "concurrency 2");
    assert_eq!(limits_cell(&ui, "free"), "none");
    // A call without per_group sets every limit: the groups are serial again.
    ok(
        calls::work_limit(&mut db, "grouped", Some(4), None, "1 second"),
        "work_limit without per_group",
    );
    assert_eq!(limits_cell(&ui, "grouped"), "concurrency 4");
    drop(ui);

    ok(cluster.create_database("ui_limits_0110"), "create database");
    let mut old = ok(cluster.connect_to("ui_limits_0110"), "connect");
    ok(
        old.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';",
        ),
        "pg_workfence 0.11.0",
    );
    ok(
        calls::work_limit(&mut old, "limited", Some(2), Some(5), "1 minute"),
        "work_limit on 0.11.0",
    );
    let ui = Ui::on(&cluster.connection_string("ui_limits_0110"));
    assert_eq!(limits_cell(&ui, "limited"), "concurrency 2; 5 per 00:01:00");
}

/// The row of queue `queue` on the queues page (which must show it).
fn queue_row(ui: &Ui, queue: &str) -> String {
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    section(&page.body, &format!("data-queue=\"{queue}\""), "</tr>").to_owned()
}

/// The value of the input named `name` of `html`: `None` when the input has
/// no value attribute (an empty field); panics when there is no such input.
fn input_value(html: &str, name: &str) -> Option<String> {
    let tag = section(html, &format!("name=\"{name}\""), ">");
    let marker = "value=\"";
    let start = tag.find(marker)? + marker.len();
    Some(tag[start..start + tag[start..].find('"')?].to_owned())
}

/// The limits form's action in `row`, `&amp;` and all as the page has it.
fn limits_action(row: &str) -> String {
    let form = section(row, "<details class=\"set-limits\">", "</details>");
    section(form, "action=\"", "\"").to_owned()
}

/// The limits of `queue` as `work_queue_stats` has them.
fn limits_of(db: &mut postgres::Client, queue: &str) -> calls::QueueLimits {
    ok(calls::queue_limits(db), "work_queue_stats")
        .into_iter()
        .find(|l| l.queue == queue)
        .unwrap_or_else(|| panic!("no row of {queue} in work_queue_stats"))
}

fn queue_limits(
    queue: &str,
    concurrency: Option<i32>,
    rate: Option<i32>,
    per: Option<&str>,
    per_group: Option<i32>,
) -> calls::QueueLimits {
    calls::QueueLimits {
        queue: queue.into(),
        concurrency,
        rate,
        per: per.map(str::to_owned),
        per_group,
    }
}

/// The queues page's limits form (issue 33), prefilled with the queue's
/// limits, sets all four through `work_limit`: an empty field lifts that
/// limit (per_group: serial groups), an empty per is `work_limit`'s default.
#[test]
fn limits_are_set_through_the_queues_page_form() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_set_limits");
    let queue = "team/a b";
    enqueue(&mut db, Enqueue::new(queue).key("k"));
    ok(
        calls::work_limit_per_group(&mut db, queue, Some(2), Some(50), "1 minute", Some(2)),
        "work_limit",
    );
    let ui = Ui::on(&cluster.connection_string("ui_set_limits"));

    // Prefilled with the limits now.
    let row = queue_row(&ui, queue);
    assert!(row.contains("data-action=\"limits\""), "{row}");
    let action = limits_action(&row);
    assert_eq!(action, "/queues/team%2Fa%20b/limits");
    for (name, value) in [
        ("concurrency", "2"),
        ("rate", "50"),
        ("per", "00:01:00"),
        ("per_group", "2"),
    ] {
        assert_eq!(input_value(&row, name).as_deref(), Some(value), "{name}");
    }

    let reply = ui.submit(
        &action,
        &[
            ("concurrency", "5"),
            ("rate", "100"),
            ("per", "10 seconds"),
            ("per_group", "3"),
        ],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    let back = reply.location.expect("a redirect");
    assert_eq!(back, "/?done=limits&queue=team%2Fa+b");
    assert_eq!(
        limits_of(&mut db, queue),
        queue_limits(queue, Some(5), Some(100), Some("00:00:10"), Some(3))
    );
    let page = ui.get(&back).body;
    assert!(
        page.contains(
            "<p id=\"flash\">Set the limits of queue team/a b. \
             Now: concurrency 5; 100 per 00:00:10; 3 per group.</p>"
        ),
        "{page}"
    );
    assert_eq!(
        limits_cell(&ui, queue),
        "concurrency 5; 100 per 00:00:10; 3 per group"
    );
    let row = queue_row(&ui, queue);
    assert_eq!(input_value(&row, "per_group").as_deref(), Some("3"));
    assert_eq!(input_value(&row, "per").as_deref(), Some("00:00:10"));

    // Empty fields lift their limits; an empty per is 1 second.
    let reply = ui.submit(
        &action,
        &[
            ("concurrency", ""),
            ("rate", "7"),
            ("per", ""),
            ("per_group", ""),
        ],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(
        limits_of(&mut db, queue),
        queue_limits(queue, None, Some(7), Some("00:00:01"), None)
    );
    let reply = ui.submit(&action, &[("concurrency", " "), ("rate", "")]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(
        limits_of(&mut db, queue),
        queue_limits(queue, None, None, None, None)
    );
    assert_eq!(limits_cell(&ui, queue), "none");
    let row = queue_row(&ui, queue);
    for name in ["concurrency", "rate", "per_group"] {
        assert_eq!(input_value(&row, name), None, "{name} is empty: {row}");
    }
    assert_eq!(input_value(&row, "per").as_deref(), Some("1 second"));
    // A crafted flash names no limits a queue does not show.
    let page = ui.get("/?done=limits&queue=nope").body;
    assert!(!page.contains("id=\"flash\""), "{page}");
}

/// A value `work_limit` refuses is its 22023 page (message, detail, hint),
/// a value that is no number the dashboard's 400, and neither changes a
/// limit.
#[test]
fn a_bad_limit_shows_the_servers_22023_and_changes_nothing() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_bad_limits");
    ok(
        calls::work_limit_per_group(&mut db, "b", Some(2), Some(50), "1 minute", Some(2)),
        "work_limit",
    );
    let before = limits_of(&mut db, "b");
    let ui = Ui::on(&cluster.connection_string("ui_bad_limits"));
    let action = limits_action(&queue_row(&ui, "b"));
    let full = |field: &'static str, value: &'static str| -> Vec<(&'static str, &'static str)> {
        let mut form = vec![
            ("concurrency", "2"),
            ("rate", "50"),
            ("per", "1 minute"),
            ("per_group", "2"),
        ];
        for f in &mut form {
            if f.0 == field {
                f.1 = value;
            }
        }
        form
    };
    for (field, value, sqlstate, says) in [
        ("concurrency", "0", "22023", "concurrency is 0."),
        ("concurrency", "10001", "22023", "concurrency is 10001."),
        ("rate", "-1", "22023", "rate is -1."),
        ("per_group", "0", "22023", "per_group is 0."),
        ("per_group", "10001", "22023", "per_group is 10001."),
        ("per", "0 seconds", "22023", "per"),
        ("per", "2 days", "22023", "per"),
        ("per", "a while", "22007", "a while"),
    ] {
        let reply = ui.submit(&action, &full(field, value));
        assert_eq!(reply.status, 400, "{field}={value}: {}", reply.body);
        let error = reply.error();
        assert!(
            error.starts_with(&format!("SQLSTATE {sqlstate}: ")),
            "{field}={value}: {error}"
        );
        assert!(
            reply.body.replace("&quot;", "\"").contains(says),
            "{field}={value}: {}",
            reply.body
        );
        if sqlstate == "22023" {
            assert!(error.contains(field), "{error}");
            assert!(reply.body.contains("DETAIL: "), "{}", reply.body);
            assert!(reply.body.contains("HINT: "), "{}", reply.body);
        }
        assert_eq!(limits_of(&mut db, "b"), before, "{field}={value}");
    }
    let error = ui.submit(&action, &full("concurrency", "10001")).error();
    assert!(error.contains("between 1 and 10000"), "{error}");
    // Not a whole number: the dashboard's own 400, before any query.
    for (field, value) in [
        ("concurrency", "four"),
        ("rate", "1.5"),
        ("per_group", "99999999999"),
    ] {
        let reply = ui.submit(&action, &full(field, value));
        assert_eq!(reply.status, 400, "{field}={value}: {}", reply.body);
        let error = reply.error();
        assert!(error.contains("is not a limit"), "{error}");
        assert!(!error.contains("SQLSTATE"), "{error}");
    }
    let reply = ui.submit("/queues/nope/limits", &full("concurrency", "3"));
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(limits_of(&mut db, "b"), before);
    assert_eq!(ok(calls::queue_limits(&mut db), "stats").len(), 1);
}

/// The limits form is refused from another site as every action is, and
/// goes through from the dashboard's own page.
#[test]
fn a_cross_site_limits_form_is_refused_and_changes_nothing() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_csrf_limits");
    enqueue(&mut db, Enqueue::new("c").key("k"));
    let before = limits_of(&mut db, "c");
    let ui = Ui::on(&cluster.connection_string("ui_csrf_limits"));
    let token = ui.token();
    let own = ui.base.clone();
    let action = limits_action(&queue_row(&ui, "c"));
    let refused: Vec<(Fields, Fields)> = vec![
        (
            vec![("csrf", &token), ("concurrency", "1")],
            vec![("Origin", "http://evil.example")],
        ),
        (
            vec![("csrf", &token), ("concurrency", "1")],
            vec![("Origin", "null")],
        ),
        (
            vec![("csrf", &token), ("concurrency", "1")],
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
        (vec![("concurrency", "1")], vec![("Origin", &own)]),
        (
            vec![("csrf", "guessed"), ("concurrency", "1")],
            vec![("Origin", &own)],
        ),
    ];
    for (form, headers) in &refused {
        let reply = ui.post(&action, form, headers);
        assert_eq!(reply.status, 403, "{form:?} {headers:?}: {}", reply.body);
        assert!(reply.error().contains("Refused"), "{}", reply.error());
        assert_eq!(limits_of(&mut db, "c"), before, "{form:?} {headers:?}");
    }
    let reply = ui.post(
        &action,
        &[("csrf", &token), ("concurrency", "1")],
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(limits_of(&mut db, "c").concurrency, Some(1));
}

/// Under queue grants a role without the operate grant of a queue has no
/// limits form there, and a form sent by hand is the server's 42501; a role
/// without EXECUTE on work_limit likewise.
#[test]
fn a_role_without_the_operate_grant_gets_42501_from_the_limits_form() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_limit_grants");
    enqueue(&mut db, Enqueue::new("team.a").key("k"));
    enqueue(&mut db, Enqueue::new("team.b").key("k"));
    ok(
        db.batch_execute(
            "SELECT workfence.work_grant('read', 'team.*', 'ui_operator');
             SELECT workfence.work_grant('operate', 'team.a', 'ui_operator');
             SELECT workfence.work_grant('read', 'team.*', 'ui_watcher');
             SELECT workfence.work_enforce_grants(true);",
        ),
        "queue grants",
    );
    let before = limits_of(&mut db, "team.b");
    let ui = Ui::on(&dsn_as(&cluster, "ui_limit_grants", "ui_operator"));
    assert!(queue_row(&ui, "team.a").contains("data-action=\"limits\""));
    let row = queue_row(&ui, "team.b");
    assert!(!row.contains("set-limits"), "{row}");
    let reply = ui.submit("/queues/team.b/limits", &[("concurrency", "3")]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42501: "), "{error}");
    assert!(error.contains("team.b"), "{error}");
    assert_eq!(limits_of(&mut db, "team.b"), before);
    // The queue it may operate.
    let reply = ui.submit("/queues/team.a/limits", &[("concurrency", "3")]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(limits_of(&mut db, "team.a").concurrency, Some(3));

    // No EXECUTE on work_limit (workfence_monitor only; it may read the
    // queues): no form anywhere, and the server refuses the function.
    let ui = Ui::on(&dsn_as(&cluster, "ui_limit_grants", "ui_watcher"));
    let page = ui.get("/").body;
    assert!(!page.contains("set-limits"), "{page}");
    let reply = ui.submit("/queues/team.a/limits", &[("concurrency", "9")]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42501: "), "{error}");
    assert!(error.contains("work_limit"), "{error}");
    assert_eq!(limits_of(&mut db, "team.a").concurrency, Some(3));
}

/// On a database still on 0.11.0, whose work_limit has no per_group, the
/// form has no per_group field and sets the other three; a per_group sent
/// by hand is a 42883 that says per_group needs 0.12.0.
#[test]
fn the_limits_form_on_a_0110_database_sets_the_other_three() {
    let cluster = cluster();
    ok(
        cluster.create_database("ui_limits_form_0110"),
        "create database",
    );
    let mut old = ok(cluster.connect_to("ui_limits_form_0110"), "connect");
    ok(
        old.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';",
        ),
        "pg_workfence 0.11.0",
    );
    ok(
        calls::work_limit(&mut old, "old", Some(2), None, "1 second"),
        "work_limit on 0.11.0",
    );
    let limits = |db: &mut postgres::Client| -> (Option<i32>, Option<i32>, Option<String>) {
        let row = db
            .query_one(
                "SELECT s.concurrency, s.rate, s.per::text FROM workfence.work_queue_stats AS s \
                 WHERE s.queue = 'old'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let ui = Ui::on(&cluster.connection_string("ui_limits_form_0110"));
    let row = queue_row(&ui, "old");
    assert!(row.contains("data-action=\"limits\""), "{row}");
    assert!(!row.contains("per_group"), "{row}");
    assert_eq!(input_value(&row, "concurrency").as_deref(), Some("2"));
    let action = limits_action(&row);
    let reply = ui.submit(
        &action,
        &[("concurrency", "4"), ("rate", "5"), ("per", "1 minute")],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(
        limits(&mut old),
        (Some(4), Some(5), Some("00:01:00".into()))
    );
    // An empty per_group is left out of the call.
    let reply = ui.submit(&action, &[("concurrency", "3"), ("per_group", "")]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(limits(&mut old), (Some(3), None, None));
    let reply = ui.submit(&action, &[("concurrency", "6"), ("per_group", "2")]);
    assert_eq!(reply.status, 503, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42883: "), "{error}");
    assert!(
        error.contains("per_group needs pg_workfence 0.12.0"),
        "{error}"
    );
    assert!(!error.contains("0.11.0"), "{error}");
    assert_eq!(limits(&mut old), (Some(3), None, None));
}

// --- schedules (0.12.0) ------------------------------------------------------

/// Creates schedule `name`, `0 2 * * *` in UTC, enqueueing in `queue`.
fn schedule(db: &mut postgres::Client, name: &str, queue: &str) {
    assert!(ok(
        calls::schedule(db, name, "0 2 * * *", queue, "UTC", "latest"),
        "work_schedule"
    ));
}

/// Makes schedule `name` fire now (as the superuser: its next slot a second
/// ago, no slot fired yet) and returns the item its fire enqueued.
fn fire_now(db: &mut postgres::Client, name: &str) -> i64 {
    let moved = ok(
        db.execute(
            "UPDATE workfence.schedules \
                SET next_slot = pg_catalog.date_trunc('second', pg_catalog.clock_timestamp()) \
                                - interval '1 second', \
                    last_slot = NULL \
              WHERE name = $1",
            &[&name],
        ),
        "moving the next slot",
    );
    assert_eq!(moved, 1, "schedule {name}");
    assert!(ok(calls::fire_schedules(db), "work_fire_schedules") >= 1);
    let row = ok(
        db.query_one(
            "SELECT s.last_item_id FROM workfence.work_schedules AS s WHERE s.name = $1",
            &[&name],
        ),
        "work_schedules",
    );
    row.get::<_, Option<i64>>(0).expect("the fire's item")
}

/// `work_schedules.paused` of `name`.
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

/// The text of the cell `<td class="CLASS">` of `row`, tags removed.
fn cell(row: &str, class: &str) -> String {
    strip_tags(section(row, &format!("<td class=\"{class}\">"), "</td>"))
}

/// The schedules page lists `work_schedules`, each column as the view has
/// it (times as the dashboard writes them: UTC, milliseconds), the queue and
/// the last item linked; its pause and resume buttons call
/// `work_pause_schedule` and `work_resume_schedule` (a second pause is a
/// 409, an unknown name the server's 42704); a queue's page shows the
/// queue's schedules, also when the queue has no item yet.
#[test]
fn the_schedules_page_lists_work_schedules_and_pauses_and_resumes_them() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_schedules");
    assert!(ok(
        calls::schedule(
            &mut db,
            "nightly",
            "0 2 * * *",
            "reports",
            "Europe/Berlin",
            "latest"
        ),
        "work_schedule"
    ));
    let item = fire_now(&mut db, "nightly");
    let odd = "team/a <b>";
    assert!(ok(
        calls::schedule(&mut db, odd, "*/15 * * * *", "ingest", "UTC", "all"),
        "work_schedule"
    ));
    let ui = Ui::on(&cluster.connection_string("ui_schedules"));

    // Linked from the navigation, as the queues page is.
    let page = ui.get("/").body;
    assert!(
        page.contains("<a href=\"/schedules\">schedules</a>"),
        "{page}"
    );
    let page = ui.get("/schedules");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("id=\"read-only\""), "{}", page.body);
    let utc = |col: &str| {
        format!(
            "CASE WHEN pg_catalog.isfinite({col}) THEN pg_catalog.to_char({col} AT TIME ZONE 'UTC', \
             'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC' ELSE {col}::text END"
        )
    };
    let expected = ok(
        db.query_one(
            &format!(
                "SELECT s.cron, s.timezone, s.queue, s.catch_up, {}, {}, s.last_item_id, {} \
                   FROM workfence.work_schedules AS s WHERE s.name = 'nightly'",
                utc("s.next_slot"),
                utc("s.last_slot"),
                utc("s.last_fired_at"),
            ),
            &[],
        ),
        "work_schedules",
    );
    let row = section(&page.body, "data-schedule=\"nightly\"", "</tr>");
    assert_eq!(cell(row, "name"), "nightly");
    assert_eq!(cell(row, "cron"), expected.get::<_, String>(0));
    assert_eq!(cell(row, "timezone"), "Europe/Berlin");
    assert_eq!(expected.get::<_, String>(1), "Europe/Berlin");
    assert_eq!(cell(row, "queue"), "reports");
    assert!(
        row.contains("<a href=\"/queues/reports\">reports</a>"),
        "{row}"
    );
    assert_eq!(cell(row, "catch-up"), expected.get::<_, String>(3));
    assert_eq!(cell(row, "paused"), "no");
    assert_eq!(cell(row, "next-slot"), expected.get::<_, String>(4));
    assert_eq!(cell(row, "last-slot"), expected.get::<_, String>(5));
    assert_eq!(expected.get::<_, Option<i64>>(6), Some(item));
    assert_eq!(cell(row, "num last-item"), item.to_string());
    assert!(
        row.contains(&format!("<a href=\"/items/{item}\">{item}</a>")),
        "{row}"
    );
    assert_eq!(cell(row, "last-fired"), expected.get::<_, String>(7));
    assert!(row.contains("data-action=\"pause-schedule\""), "{row}");
    // The item the fire enqueued, behind its link.
    let item_page = ui.get(&format!("/items/{item}")).body;
    assert!(
        section(&item_page, "<dd id=\"key\">", "</dd>").starts_with("nightly@"),
        "{item_page}"
    );
    // Never fired: no last slot, item or fire; its name escaped.
    let row = section(&page.body, "data-schedule=\"team/a &lt;b&gt;\"", "</tr>");
    assert_eq!(cell(row, "name"), "team/a &lt;b&gt;");
    assert!(!page.body.contains("<b>"), "{}", page.body);
    assert_eq!(cell(row, "catch-up"), "all");
    assert_eq!(cell(row, "last-slot"), "—");
    assert_eq!(cell(row, "num last-item"), "—");
    assert_eq!(cell(row, "last-fired"), "—");

    // Pause, then resume, by the page's forms.
    let reply = ui.submit("/schedules/nightly/pause", &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    let back = reply.location.expect("a redirect");
    assert_eq!(back, "/schedules?done=schedule-paused&schedule=nightly");
    assert!(schedule_paused(&mut db, "nightly"));
    let page = ui.get(&back).body;
    assert!(
        page.contains(
            "<p id=\"flash\">Paused schedule nightly: it fires nothing until it is resumed.</p>"
        ),
        "{page}"
    );
    let row = section(&page, "data-schedule=\"nightly\"", "</tr>");
    assert_eq!(cell(row, "paused"), "paused");
    assert!(row.contains("data-action=\"resume-schedule\""), "{row}");
    assert!(!row.contains("data-action=\"pause-schedule\""), "{row}");
    let reply = ui.submit("/schedules/nightly/pause", &[]);
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(
        reply.error().contains("paused already"),
        "{}",
        reply.error()
    );
    assert!(schedule_paused(&mut db, "nightly"));
    let reply = ui.submit("/schedules/nightly/resume", &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    let back = reply.location.expect("a redirect");
    assert_eq!(back, "/schedules?done=schedule-resumed&schedule=nightly");
    assert!(!schedule_paused(&mut db, "nightly"));
    let page = ui.get(&back).body;
    assert!(
        page.contains("<p id=\"flash\">Resumed schedule nightly.</p>"),
        "{page}"
    );
    // A crafted flash claims no pause that is not so.
    let page = ui
        .get("/schedules?done=schedule-paused&schedule=nightly")
        .body;
    assert!(!page.contains("id=\"flash\""), "{page}");
    // A name with a slash and markup: the form's action, percent-encoded.
    let page = ui.get("/schedules").body;
    let row = section(&page, "data-schedule=\"team/a &lt;b&gt;\"", "</tr>");
    let action = section(row, "action=\"", "\"").to_owned();
    assert_eq!(action, "/schedules/team%2Fa%20%3Cb%3E/pause");
    let reply = ui.submit(&action, &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert!(schedule_paused(&mut db, odd));
    assert!(!schedule_paused(&mut db, "nightly"));

    // No such schedule: the server's 42704, and nothing changes.
    for path in ["/schedules/nope/pause", "/schedules/nope/resume"] {
        let reply = ui.submit(path, &[]);
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        let error = reply.error();
        assert!(error.starts_with("SQLSTATE 42704: "), "{path}: {error}");
        assert!(error.contains("nope"), "{path}: {error}");
    }
    // A name the server refuses (longer than 128 bytes): its 22023.
    let long = format!("/schedules/{}/pause", "n".repeat(200));
    let reply = ui.submit(&long, &[]);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply.error().starts_with("SQLSTATE 22023: "),
        "{}",
        reply.error()
    );
    let count: i64 = ok(
        db.query_one("SELECT count(*) FROM workfence.work_schedules", &[]),
        "count",
    )
    .get(0);
    assert_eq!(count, 2);

    // A queue's page shows its schedules; a queue only a schedule names is one.
    let page = ui.get("/queues/reports");
    assert_eq!(page.status, 200, "{}", page.body);
    let table = section(&page.body, "<table id=\"queue-schedules\">", "</table>");
    assert!(table.contains("data-schedule=\"nightly\""), "{table}");
    assert!(!table.contains("team/a"), "{table}");
    let page = ui.get("/queues/ingest");
    assert_eq!(page.status, 200, "{}", page.body);
    let table = section(&page.body, "<table id=\"queue-schedules\">", "</table>");
    let row = section(table, "data-schedule=\"team/a &lt;b&gt;\"", "</tr>");
    assert_eq!(cell(row, "paused"), "paused");
    assert!(page.body.contains("<p id=\"no-items\">No items.</p>"));
    assert_eq!(ui.get("/queues/nothing").status, 404);
    // A queue without schedules has no such table.
    enqueue(&mut db, Enqueue::new("plain").key("k"));
    let page = ui.get("/queues/plain").body;
    assert!(!page.contains("queue-schedules"), "{page}");
}

/// A role that may only read (workfence_monitor) sees the schedules and no
/// buttons, and the server refuses its pause with 42501; under queue grants
/// an operator has buttons only for the schedules of queues it may operate,
/// and the server refuses the others.
#[test]
fn schedule_buttons_follow_the_roles_grants() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_schedule_grants");
    schedule(&mut db, "sa", "team.a");
    schedule(&mut db, "sb", "team.b");

    let ui = Ui::on(&dsn_as(&cluster, "ui_schedule_grants", "ui_watcher"));
    let page = ui.get("/schedules");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("data-schedule=\"sa\""), "{}", page.body);
    assert!(page.body.contains("id=\"read-only\""), "{}", page.body);
    assert!(!page.body.contains("method=\"post\""), "{}", page.body);
    let reply = ui.submit("/schedules/sa/pause", &[]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42501: "), "{error}");
    assert!(error.contains("work_pause_schedule"), "{error}");
    assert!(!schedule_paused(&mut db, "sa"));
    drop(ui);

    ok(
        db.batch_execute(
            "SELECT workfence.work_grant('read', 'team.*', 'ui_operator');
             SELECT workfence.work_grant('operate', 'team.a', 'ui_operator');
             SELECT workfence.work_enforce_grants(true);",
        ),
        "queue grants",
    );
    let ui = Ui::on(&dsn_as(&cluster, "ui_schedule_grants", "ui_operator"));
    let page = ui.get("/schedules").body;
    assert!(!page.contains("id=\"read-only\""), "{page}");
    let row = section(&page, "data-schedule=\"sa\"", "</tr>");
    assert!(row.contains("data-action=\"pause-schedule\""), "{row}");
    let row = section(&page, "data-schedule=\"sb\"", "</tr>");
    assert!(!row.contains("data-action"), "{row}");
    assert_eq!(cell(row, "actions"), "read-only");
    let reply = ui.submit("/schedules/sb/pause", &[]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42501: "), "{error}");
    assert!(error.contains("team.b"), "{error}");
    assert!(!schedule_paused(&mut db, "sb"));
    let reply = ui.submit("/schedules/sa/pause", &[]);
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert!(schedule_paused(&mut db, "sa"));
}

/// `/metrics` has, per schedule, the unix seconds of its last fire (none
/// before the first) and of its next slot (none when that is infinity),
/// labelled by schedule and queue, each family with one HELP and one TYPE.
#[test]
fn schedule_metrics_are_the_unix_seconds_of_work_schedules() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let cluster = cluster();
    let mut db = database(&cluster, "ui_schedule_metrics");
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    };
    schedule(&mut db, "nightly", "reports");
    schedule(&mut db, "fresh", "reports");
    schedule(&mut db, "ended", "archive");
    let before = now();
    fire_now(&mut db, "nightly");
    fire_now(&mut db, "ended");
    let after = now();
    // An expression that names no more slots ends at infinity.
    ok(
        db.execute(
            "UPDATE workfence.schedules SET next_slot = 'infinity' WHERE name = 'ended'",
            &[],
        ),
        "next_slot infinity",
    );
    let ui = Ui::on(&cluster.connection_string("ui_schedule_metrics"));
    let reply = ui.get("/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let lines: Vec<std::io::Result<String>> =
        reply.body.lines().map(|l| Ok(l.to_owned())).collect();
    let scrape = ok(
        prometheus_parse::Scrape::parse(lines.into_iter()),
        "parsing /metrics",
    );
    let value = |name: &str, schedule: &str| -> Option<f64> {
        let samples: Vec<_> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && s.labels.get("schedule") == Some(schedule))
            .collect();
        assert!(samples.len() <= 1, "{name} {schedule}: {samples:?}");
        samples.first().map(|s| {
            let queue = if schedule == "ended" {
                "archive"
            } else {
                "reports"
            };
            assert_eq!(s.labels.get("queue"), Some(queue), "{name} {schedule}");
            match s.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name} is a gauge: {other:?}"),
            }
        })
    };
    for family in [
        "workfence_schedule_last_fire_seconds",
        "workfence_schedule_next_slot_seconds",
    ] {
        let help = format!("# HELP {family} ");
        let type_line = format!("# TYPE {family} gauge");
        assert_eq!(
            reply.body.lines().filter(|l| l.starts_with(&help)).count(),
            1,
            "{help}: {}",
            reply.body
        );
        assert_eq!(
            reply.body.lines().filter(|l| *l == type_line).count(),
            1,
            "{type_line}: {}",
            reply.body
        );
    }
    let rows = ok(
        db.query(
            "SELECT s.name, pg_catalog.date_part('epoch', s.last_fired_at)::float8, \
                    CASE WHEN pg_catalog.isfinite(s.next_slot) \
                         THEN pg_catalog.date_part('epoch', s.next_slot)::float8 END \
               FROM workfence.work_schedules AS s",
            &[],
        ),
        "work_schedules",
    );
    assert_eq!(rows.len(), 3);
    for row in rows {
        let name: String = row.get(0);
        let (fired, next): (Option<f64>, Option<f64>) = (row.get(1), row.get(2));
        assert_eq!(
            value("workfence_schedule_last_fire_seconds", &name),
            fired,
            "{name}"
        );
        assert_eq!(
            value("workfence_schedule_next_slot_seconds", &name),
            next,
            "{name}"
        );
    }
    // Fired between the test's two readings of the clock (the same host's).
    for name in ["nightly", "ended"] {
        let fired = value("workfence_schedule_last_fire_seconds", name).expect("fired");
        assert!(
            before - 1.0 <= fired && fired <= after + 1.0,
            "{name}: {before} <= {fired} <= {after}"
        );
    }
    assert_eq!(value("workfence_schedule_last_fire_seconds", "fresh"), None);
    assert_eq!(value("workfence_schedule_next_slot_seconds", "ended"), None);
    // 0 2 * * * in UTC: the next slots are at 02:00:00 of a day after now.
    for name in ["nightly", "fresh"] {
        let next = value("workfence_schedule_next_slot_seconds", name).expect("a next slot");
        assert_eq!(next.rem_euclid(86_400.0), 7_200.0, "{name}: {next}");
        assert!(next > before && next <= after + 86_400.0, "{name}: {next}");
    }
}

/// A database still on 0.11.0 has no schedules: the schedules page says so,
/// `/metrics`, a queue's page and an item's page are as before (its
/// `work_item` has no checkpoint: none), and a pause sent by hand is a 42883
/// that says schedules need 0.12.0.
#[test]
fn a_database_before_0120_has_no_schedules_and_its_pages_still_work() {
    // (Nor workflows: its item pages draw none, its queues count no waiting item.)
    let cluster = cluster();
    ok(
        cluster.create_database("ui_schedules_0110"),
        "create database",
    );
    let mut old = ok(cluster.connect_to("ui_schedules_0110"), "connect");
    ok(
        old.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';",
        ),
        "pg_workfence 0.11.0",
    );
    let id = enqueue(&mut old, Enqueue::new("q").key("k"));
    ok(
        calls::claim_key(&mut old, "q", "k", "worker-1", "1 hour"),
        "work_claim_key on 0.11.0",
    )
    .expect("claimable");
    let ui = Ui::on(&cluster.connection_string("ui_schedules_0110"));
    let page = ui.get("/schedules");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        section(&page.body, "<p id=\"no-schedules-view\">", "</p>").contains("0.12.0"),
        "{}",
        page.body
    );
    let metrics = ui.get("/metrics");
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(metrics.body.contains("workfence_items{queue=\"q\""));
    assert!(!metrics.body.contains("workfence_schedule_"));
    let page = ui.get("/queues/q");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("queue-schedules"));
    let page = ui.get(&format!("/items/{id}"));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<span id=\"state\">claimed</span>"));
    assert!(
        page.body
            .contains("<p class=\"muted\" id=\"progress\">none</p>"),
        "{}",
        page.body
    );
    // No work_workflow before 0.12.0: no workflow section, and no waiting state to count or
    // list.
    assert!(
        !ui.get("/queues/q").body.contains("state=waiting"),
        "no waiting filter on 0.11.0"
    );
    assert!(!page.body.contains("id=\"workflow"), "{}", page.body);
    assert_eq!(cell(&queue_row(&ui, "q"), "num waiting"), "0");
    assert!(metrics
        .body
        .contains("workfence_items{queue=\"q\",state=\"waiting\"} 0\n"));
    let reply = ui.submit("/schedules/nightly/pause", &[]);
    assert_eq!(reply.status, 503, "{}", reply.body);
    let error = reply.error();
    assert!(error.starts_with("SQLSTATE 42883: "), "{error}");
    assert!(
        error.contains("schedules need pg_workfence 0.12.0"),
        "{error}"
    );
}

/// One chart of a queue's page, as drawn: its minutes (`HH:MM`, the left and right edge of
/// the minute's column, its tooltip), the points of each series (`data-series`), and the
/// height of the plot's bottom (the x axis: a count of 0).
struct DrawnChart {
    minutes: Vec<(String, f64, f64, String)>,
    points: std::collections::HashMap<String, Vec<(f64, f64)>>,
    baseline: f64,
}

impl DrawnChart {
    /// The chart `id` (`throughput`, `time-in-queue`, `backlog`) of `page`.
    fn of(page: &str, id: &str) -> DrawnChart {
        let figure = section(
            page,
            &format!("<figure class=\"chart\" id=\"chart-{id}\""),
            "</figure>",
        );
        let number = |tag: &str, name: &str| -> f64 {
            attr(tag, name)
                .unwrap_or_else(|| panic!("{name} in {tag}"))
                .parse()
                .unwrap_or_else(|e| panic!("{name} in {tag}: {e}"))
        };
        let mut minutes = Vec::new();
        for (tag, rest) in start_tags(figure, "rect") {
            let Some(minute) = attr(tag, "data-minute") else {
                continue;
            };
            let title = section(rest, "<title>", "</title>").to_owned();
            let (x, width) = (number(tag, "x"), number(tag, "width"));
            minutes.push((minute.to_owned(), x, x + width, title));
        }
        let mut points: std::collections::HashMap<String, Vec<(f64, f64)>> = Default::default();
        for (tag, _) in start_tags(figure, "polyline") {
            let series = attr(tag, "data-series").expect("a series").to_owned();
            for point in attr(tag, "points").expect("points").split(' ') {
                let (x, y) = point.split_once(',').expect("x,y");
                points
                    .entry(series.clone())
                    .or_default()
                    .push((x.parse().expect("x"), y.parse().expect("y")));
            }
        }
        for (tag, _) in start_tags(figure, "circle") {
            let series = attr(tag, "data-series").expect("a series").to_owned();
            points
                .entry(series)
                .or_default()
                .push((number(tag, "cx"), number(tag, "cy")));
        }
        let axis = start_tags(figure, "line")
            .into_iter()
            .map(|(tag, _)| tag)
            .find(|tag| tag.contains("class=\"axis\"") && attr(tag, "y1") == attr(tag, "y2"))
            .expect("the x axis");
        DrawnChart {
            minutes,
            points,
            baseline: number(axis, "y1"),
        }
    }

    /// The points of `series` drawn in the column of minute `i`.
    fn at(&self, series: &str, i: usize) -> Vec<(f64, f64)> {
        let (_, left, right, _) = &self.minutes[i];
        self.points
            .get(series)
            .map(|p| {
                p.iter()
                    .filter(|(x, _)| x >= left && x <= right)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The start tags `<tag ...>` in `html`, each with the text after it.
fn start_tags<'a>(html: &'a str, tag: &str) -> Vec<(&'a str, &'a str)> {
    let open = format!("<{tag} ");
    html.match_indices(&open)
        .map(|(at, _)| {
            let end = at + html[at..].find('>').expect("a start tag's end") + 1;
            (&html[at..end], &html[end..])
        })
        .collect()
}

/// The value of the attribute `name` of a start tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let marker = format!(" {name}=\"");
    let start = tag.find(&marker)? + marker.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// The number after `word ` in `text` (`done 3, failed 1` → `done`: 3).
fn count_after(text: &str, word: &str) -> i64 {
    let start = text
        .find(&format!("{word} "))
        .unwrap_or_else(|| panic!("{word} in {text:?}"))
        + word.len()
        + 1;
    text[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count after {word} in {text:?}"))
}

/// `queue_history_rows(queue)` by minute (`HH:MM` UTC): done, failed, claimed, whether the
/// minute has a time in queue, the backlog.
fn history_of(
    db: &mut postgres::Client,
    queue: &str,
) -> std::collections::HashMap<String, (i64, i64, i64, bool, Option<i64>)> {
    ok(
        db.query(
            "SELECT pg_catalog.to_char(pg_catalog.timezone('UTC', h.minute), 'HH24:MI'), \
                    h.done, h.failed, h.claimed, h.time_in_queue_p50 IS NOT NULL, h.backlog \
               FROM workfence.queue_history_rows($1) AS h",
            &[&queue],
        ),
        "queue_history_rows",
    )
    .iter()
    .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))))
    .collect()
}

/// A queue's page charts the queue's last hour from the server's history: after claims,
/// finishes and a failure, the throughput's lines rise in the minutes that had them (their
/// tooltips say how many), the time in queue is drawn only where a minute had claims and the
/// backlog only where it is known (gaps, not zeros), all as `queue_history_rows` has them, and
/// without a scan of the items. Without the library preloaded, for a role that may not read
/// the history, and on a database before 0.12.0, one sentence says why instead.
#[test]
fn the_queue_page_charts_the_last_hour() {
    let preloaded = preloaded_cluster();
    let name = "ui_history";
    let mut db = database(&preloaded, name);
    // Items enough beside the charted queue that a scan of them would be the plan only if
    // something asked for one.
    ok(
        db.batch_execute(
            "SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 5000) AS n, \
                    LATERAL workfence.work_enqueue('hist.bulk', '{}', 'k' || n) AS e; \
             ANALYZE workfence.items;",
        ),
        "loading the items",
    );
    // A new database's state counts are not known until a read rebuilds them (one scan, in a
    // transaction that wrote nothing): until then the history knows no backlog.
    ok(
        db.batch_execute("SELECT pg_catalog.count(*) FROM workfence.work_queue_stats"),
        "work_queue_stats",
    );
    let q = "hist.work";
    for key in ["a", "b", "c", "d", "e"] {
        enqueue(&mut db, Enqueue::new(q).key(key).max_attempts(1));
    }
    let claims = ok(
        calls::claim(&mut db, q, "w", "1 hour", Some(4), None),
        "claim",
    );
    assert_eq!(claims.len(), 4);
    for c in &claims[..3] {
        assert!(ok(calls::finish(&mut db, &c.token("w"), None), "finish"));
    }
    assert!(ok(
        calls::fail(&mut db, &claims[3].token("w"), "boom", None),
        "work_fail: failed, its last attempt"
    ));
    drop(db);
    let mut admin = ok(preloaded.connect_to(name), "connect");
    until_alone(&mut admin);
    let scans_before = items_scans(&mut admin);

    for user in [None, Some("ui_watcher")] {
        let ui = match user {
            None => Ui::on(&preloaded.connection_string(name)),
            Some(user) => Ui::on(&dsn_as(&preloaded, name, user)),
        };
        let page = ui.get(&pages_href(q));
        assert_eq!(page.status, 200, "{user:?}: {}", page.body);
        let body = &page.body;
        assert!(!body.contains("id=\"no-history\""), "{user:?}: {body}");
        let truth = history_of(&mut admin, q);
        assert_eq!(truth.len(), 60, "{truth:?}");

        // Throughput: a tooltip per minute, as the server counted it, and the lines above
        // the axis exactly in the minutes with finishes, higher for more.
        let throughput = DrawnChart::of(body, "throughput");
        assert_eq!(throughput.minutes.len(), 60);
        assert!(body.contains(
            "role=\"img\" aria-labelledby=\"chart-throughput-title chart-throughput-desc\""
        ));
        assert!(body.contains("<title id=\"chart-throughput-title\">Throughput</title>"));
        assert!(
            body.contains(">items per minute</text>"),
            "the y axis' name and unit"
        );
        assert!(
            body.contains("3 done, 1 failed and 4 claimed in all"),
            "{body}"
        );
        let (mut done, mut failed, mut claimed) = (0, 0, 0);
        for (i, (minute, _, _, tip)) in throughput.minutes.iter().enumerate() {
            let (d, f, c) = (
                count_after(tip, "done"),
                count_after(tip, "failed"),
                count_after(tip, "claimed"),
            );
            (done, failed, claimed) = (done + d, failed + f, claimed + c);
            if let Some(&(td, tf, tc, _, _)) = truth.get(minute) {
                assert_eq!((d, f, c), (td, tf, tc), "{minute}: {tip}");
            }
            for (series, n) in [("done", d), ("failed", f), ("claimed", c)] {
                let at = throughput.at(series, i);
                assert_eq!(at.len(), 1, "{series} at {minute}: {at:?}");
                let above = at[0].1 < throughput.baseline - 0.01;
                assert_eq!(above, n > 0, "{series} at {minute} ({tip}): {at:?}");
            }
            if d > 0 && f > 0 && d > f {
                assert!(throughput.at("done", i)[0].1 < throughput.at("failed", i)[0].1);
            }
        }
        assert_eq!((done, failed, claimed), (3, 1, 4), "the page's minutes");

        // Time in queue: a point only in a minute with claims; none where there were none.
        let latency = DrawnChart::of(body, "time-in-queue");
        assert!(body.contains(">seconds (log scale)</text>"));
        let mut with_claims = 0;
        for (i, (minute, _, _, tip)) in latency.minutes.iter().enumerate() {
            let has = !tip.ends_with(": no timed claims");
            if has {
                with_claims += 1;
                assert!(tip.contains("p50 ") && tip.contains(", p99 "), "{tip}");
            }
            if let Some(&(_, _, _, known, _)) = truth.get(minute) {
                assert_eq!(has, known, "{minute}: {tip}");
            }
            for series in ["p50", "p99"] {
                assert_eq!(
                    latency.at(series, i).len(),
                    usize::from(has),
                    "{series} at {minute} ({tip})"
                );
            }
        }
        assert!((1..=2).contains(&with_claims), "the claims' minute(s)");

        // Backlog: the pending item now; minutes before the queue's first commit not known,
        // and not drawn.
        let backlog = DrawnChart::of(body, "backlog");
        assert!(body.contains(">pending items</text>"));
        let last = backlog.minutes.last().expect("a minute");
        assert!(last.3.ends_with("(so far): 1 pending"), "{last:?}");
        let mut unknown = 0;
        for (i, (minute, _, _, tip)) in backlog.minutes.iter().enumerate() {
            let known = !tip.ends_with(": not known");
            if !known {
                unknown += 1;
            }
            if let Some(&(_, _, _, _, b)) = truth.get(minute) {
                match b {
                    Some(n) => assert!(tip.ends_with(&format!(": {n} pending")), "{tip}"),
                    None => assert!(!known, "{tip}"),
                }
            }
            assert_eq!(
                backlog.at("pending", i).len(),
                usize::from(known),
                "{minute} ({tip})"
            );
        }
        assert!(
            unknown >= 57,
            "before this test's first commit: {unknown} minutes unknown"
        );
        assert!(
            !body.contains(" style="),
            "no inline style: the CSP refuses it"
        );
    }
    until_alone(&mut admin);
    let scans_after = items_scans(&mut admin);
    assert_eq!(
        scans_after.0, scans_before.0,
        "the queue pages scanned workfence.items ({scans_before:?}, {scans_after:?})"
    );

    // A role that may not read the history (no SELECT on the view, or no EXECUTE on the
    // function): the sentence, no chart.
    for revoke in [
        "REVOKE SELECT ON workfence.work_queue_history FROM workfence_monitor",
        "REVOKE EXECUTE ON FUNCTION workfence.queue_history_rows(text) FROM workfence_monitor",
    ] {
        ok(admin.batch_execute(revoke), revoke);
        let ui = Ui::on(&dsn_as(&preloaded, name, "ui_watcher"));
        let page = ui.get(&pages_href(q));
        assert_eq!(page.status, 200, "{revoke}: {}", page.body);
        let why = section(&page.body, "<p class=\"muted\" id=\"no-history\">", "</p>");
        assert!(
            why.contains("this role may not read the queue's last hour"),
            "{why}"
        );
        assert!(!page.body.contains("<svg"), "{revoke}: no chart");
        ok(
            admin.batch_execute(
                "GRANT SELECT ON workfence.work_queue_history TO workfence_monitor; \
                 GRANT EXECUTE ON FUNCTION workfence.queue_history_rows(text) TO workfence_monitor;",
            ),
            "the grants again",
        );
    }

    // A database still on 0.11.0: no such view.
    let old_name = "ui_history_0110";
    ok(preloaded.create_database(old_name), "create database");
    let mut old = ok(preloaded.connect_to(old_name), "connect");
    ok(
        old.batch_execute(
            "DROP EXTENSION pg_workfence;
             CREATE EXTENSION pg_workfence VERSION '0.11.0';",
        ),
        "pg_workfence 0.11.0",
    );
    enqueue(&mut old, Enqueue::new("q").key("k"));
    let ui = Ui::on(&preloaded.connection_string(old_name));
    let page = ui.get("/queues/q");
    assert_eq!(page.status, 200, "{}", page.body);
    let why = section(&page.body, "<p class=\"muted\" id=\"no-history\">", "</p>");
    assert!(why.contains("pg_workfence 0.12.0"), "{why}");
    assert!(!page.body.contains("<svg"));

    // Without the library preloaded the server keeps no history: the sentence says so.
    let plain = cluster();
    let plain_name = "ui_history_plain";
    let mut db = database(&plain, plain_name);
    enqueue(&mut db, Enqueue::new(q).key("a"));
    let c = ok(calls::claim_key(&mut db, q, "a", "w", "1 hour"), "claim").expect("a");
    assert!(ok(calls::finish(&mut db, &c.token("w"), None), "finish"));
    let ui = Ui::on(&dsn_as(&plain, plain_name, "ui_watcher"));
    let page = ui.get(&pages_href(q));
    assert_eq!(page.status, 200, "{}", page.body);
    let why = section(&page.body, "<p class=\"muted\" id=\"no-history\">", "</p>");
    assert!(
        why.contains("only with pg_workfence in shared_preload_libraries"),
        "{why}"
    );
    assert!(!page.body.contains("<svg"));
}

/// The boxes of an item page's workflow graph: (id, state, link, framed as the page's item).
fn workflow_nodes(page: &str) -> Vec<(i64, String, String, bool)> {
    let mut nodes: Vec<_> = start_tags(page, "a")
        .into_iter()
        .map(|(tag, _)| tag)
        .filter(|tag| attr(tag, "class") == Some("node"))
        .map(|tag| {
            (
                attr(tag, "data-id")
                    .and_then(|id| id.parse().ok())
                    .expect("a data-id"),
                attr(tag, "data-state").expect("a data-state").to_owned(),
                attr(tag, "href").expect("an href").to_owned(),
                attr(tag, "data-current") == Some("true")
                    && attr(tag, "aria-current") == Some("page"),
            )
        })
        .collect();
    nodes.sort();
    nodes
}

/// The arrows of an item page's workflow graph: (parent, child).
fn workflow_edges(page: &str) -> Vec<(i64, i64)> {
    let mut edges: Vec<(i64, i64)> = start_tags(page, "path")
        .into_iter()
        .map(|(tag, _)| tag)
        .filter(|tag| attr(tag, "class") == Some("edge"))
        .map(|tag| {
            let id = |name: &str| -> i64 {
                attr(tag, name)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name} in {tag}"))
            };
            (id("data-parent"), id("data-child"))
        })
        .collect();
    edges.sort();
    edges
}

/// `work_queue_stats.waiting` of `queue` (0.12.0).
fn waiting_of(db: &mut postgres::Client, queue: &str) -> i64 {
    ok(
        db.query_one(
            "SELECT s.waiting FROM workfence.work_queue_stats AS s WHERE s.queue = $1",
            &[&queue],
        ),
        "work_queue_stats.waiting",
    )
    .get(0)
}

/// A fan-in (two parents, one child waiting for both) on the item pages, as the monitoring
/// role sees them: the child's page draws the three items, each with its state and a link to
/// its page, the child framed, and an arrow from each parent, as `work_workflow` has them; a
/// parent's page draws itself and the child, and marks the child's other parent (not its
/// ancestor) as not drawn; an item without parents or children has no graph. The queues page
/// and `/metrics` count the waiting child, and the state filter waiting lists it; a waiting
/// item is cancelled from its page; a role that may not call `work_workflow` gets the page
/// with a sentence instead.
#[test]
fn the_item_page_draws_a_fan_in() {
    let cluster = cluster();
    let mut db = database(&cluster, "ui_workflow");
    let extract = enqueue(&mut db, Enqueue::new("wf.extract").key("orders-2026-12"));
    let fetch = enqueue(&mut db, Enqueue::new("wf.fetch").key("<b>rates</b>"));
    let join = enqueue(
        &mut db,
        Enqueue::new("wf.join")
            .key("report-2026-12")
            .after(&[extract, fetch]),
    );
    let alone = enqueue(&mut db, Enqueue::new("wf.extract").key("alone"));
    let claim = ok(
        calls::claim_key(&mut db, "wf.extract", "orders-2026-12", "w", "1 hour"),
        "work_claim_key",
    )
    .expect("claimable");
    assert!(ok(
        calls::finish(&mut db, &claim.token("w"), None),
        "finish"
    ));
    assert_eq!(state_of(&mut db, extract), "done");
    assert_eq!(state_of(&mut db, fetch), "pending");
    assert_eq!(state_of(&mut db, join), "waiting");

    let ui = Ui::on(&dsn_as(&cluster, "ui_workflow", "ui_watcher"));
    let reply = ui.get(&format!("/items/{join}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let page = reply.body;
    assert!(page.contains("<span id=\"state\">waiting</span>"), "{page}");
    let graph = section(&page, "<section id=\"workflow\">", "</section>");
    assert_eq!(
        workflow_nodes(graph),
        vec![
            (extract, "done".into(), format!("/items/{extract}"), false),
            (fetch, "pending".into(), format!("/items/{fetch}"), false),
            (join, "waiting".into(), format!("/items/{join}"), true),
        ],
        "{graph}"
    );
    assert_eq!(
        workflow_edges(graph),
        vec![(extract, join), (fetch, join)],
        "{graph}"
    );
    // As work_workflow has them.
    let rows = ok(
        calls::generated::work_workflow(&mut db, join),
        "work_workflow",
    );
    let mut listed: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.id.expect("id"), r.state.clone().expect("state")))
        .collect();
    listed.sort();
    let drawn: Vec<(i64, String)> = workflow_nodes(graph)
        .into_iter()
        .map(|(id, state, _, _)| (id, state))
        .collect();
    assert_eq!(drawn, listed);
    // Each state in a word, every text escaped.
    assert!(graph.contains("&lt;b&gt;rates&lt;/b&gt;"), "{graph}");
    assert!(!graph.contains("<b>"), "{graph}");
    assert!(
        section(graph, "<p id=\"workflow-waiting\">", "</p>")
            .contains("1 of its 2 parents are done"),
        "{graph}"
    );
    assert!(!graph.contains("hidden-parents"), "{graph}");
    assert!(!graph.contains("workflow-left-out"), "{graph}");

    // A parent's page: itself and the child, whose other parent is not its ancestor.
    let page = ui.get(&format!("/items/{extract}")).body;
    let graph = section(&page, "<section id=\"workflow\">", "</section>");
    assert_eq!(
        workflow_nodes(graph),
        vec![
            (extract, "done".into(), format!("/items/{extract}"), true),
            (join, "waiting".into(), format!("/items/{join}"), false),
        ],
        "{graph}"
    );
    assert_eq!(workflow_edges(graph), vec![(extract, join)], "{graph}");
    assert!(
        graph.contains(&format!(
            "<a class=\"hidden-parents\" href=\"/items/{fetch}\" data-child=\"{join}\" data-count=\"1\">"
        )),
        "{graph}"
    );
    assert!(!page.contains("workflow-waiting"), "{page}");

    // An item on its own: no section, no graph.
    let reply = ui.get(&format!("/items/{alone}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!reply.body.contains("id=\"workflow"), "{}", reply.body);
    assert!(!reply.body.contains("<svg"), "{}", reply.body);

    // Waiting in the stats: the queues page and /metrics, as work_queue_stats has it.
    assert_eq!(waiting_of(&mut db, "wf.join"), 1);
    let row = queue_row(&ui, "wf.join");
    assert_eq!(cell(&row, "num waiting"), "1", "{row}");
    assert_eq!(cell(&queue_row(&ui, "wf.extract"), "num waiting"), "0");
    let metrics = ui.get("/metrics").body;
    assert!(
        metrics.contains("workfence_items{queue=\"wf.join\",state=\"waiting\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("workfence_items{queue=\"wf.fetch\",state=\"waiting\"} 0\n"),
        "{metrics}"
    );
    // Listed under every state, with its state, and by the filter waiting (work_items).
    let listing = ui.get("/queues/wf.join");
    assert_eq!(listing.status, 200, "{}", listing.body);
    assert!(
        section(&listing.body, &format!("<tr data-id=\"{join}\">"), "</tr>")
            .contains("<td class=\"state\">waiting</td>"),
        "{}",
        listing.body
    );
    assert!(
        listing.body.contains(
            "<a href=\"/queues/wf.join?state=waiting\" data-state=\"waiting\">waiting</a>"
        ),
        "{}",
        listing.body
    );
    let filtered = ui.get("/queues/wf.join?state=waiting");
    assert_eq!(filtered.status, 200, "{}", filtered.body);
    assert_eq!(row_ids(&filtered.body), vec![join], "{}", filtered.body);
    assert!(
        filtered.body.contains("Oldest first (by id)"),
        "{}",
        filtered.body
    );
    assert_eq!(
        row_ids(&ui.get("/queues/wf.fetch?state=waiting").body),
        Vec::<i64>::new()
    );

    // A waiting item may be cancelled (work_cancel, 0.12.0), by a role that may call it.
    let operator = Ui::on(&cluster.connection_string("ui_workflow"));
    let page = operator.get(&format!("/items/{join}")).body;
    assert!(page.contains("data-action=\"cancel\""), "{page}");
    assert!(!page.contains("data-action=\"retry\""), "{page}");
    assert!(!page.contains("data-action=\"run-now\""), "{page}");
    let reply = operator.submit_from(
        &format!("/items/{join}"),
        &format!("/items/{join}/cancel"),
        &[],
    );
    assert_eq!(reply.status, 303, "{}", reply.body);
    assert_eq!(state_of(&mut db, join), "cancelled");
    assert_eq!(waiting_of(&mut db, "wf.join"), 0);
    let page = ui.get(&format!("/items/{join}")).body;
    let graph = section(&page, "<section id=\"workflow\">", "</section>");
    assert!(
        workflow_nodes(graph).contains(&(join, "cancelled".into(), format!("/items/{join}"), true)),
        "{graph}"
    );

    // A role that may not call work_workflow: the page, and a sentence instead of the graph.
    ok(
        db.batch_execute(
            "REVOKE EXECUTE ON FUNCTION workfence.work_workflow(bigint) FROM workfence_monitor",
        ),
        "revoke work_workflow",
    );
    let reply = ui.get(&format!("/items/{join}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        section(
            &reply.body,
            "<p class=\"muted\" id=\"no-workflow\">",
            "</p>"
        )
        .contains("may not call workfence.work_workflow"),
        "{}",
        reply.body
    );
    assert!(!reply.body.contains("<svg"), "{}", reply.body);
}
