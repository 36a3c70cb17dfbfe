//! A throwaway PgBouncer in front of a [`Cluster`].
//!
//! Debian's `pgbouncer` package supplies `/usr/sbin/pgbouncer`
//! (`scripts/setup.sh` installs it and switches off the system service it
//! brings). This module never uses that service: it writes a config of its own
//! into a new directory and runs its own pgbouncer on a free loopback port.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, SimpleQueryMessage};

use crate::os::{effective_uid, free_port, give_to_server_user, server_command, tail_of, HOST};
use crate::{Cluster, Error, Result};

/// Where Debian's `pgbouncer` package puts the program.
pub const DEFAULT_PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// The one database user: the cluster's superuser, admitted by `trust` both by
/// pgbouncer and by the server behind it.
const USER: &str = "postgres";

/// How often `start` picks a new port when another process took the one it
/// found free between the pick and pgbouncer's bind.
const PORT_ATTEMPTS: u32 = 5;

/// How long `start` waits for pgbouncer to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between two readiness probes while pgbouncer starts.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);

/// How long dropping waits for pgbouncer to exit after SIGTERM before it
/// sends SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes the default directory names unique within this process.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// PgBouncer's `pool_mode`: when a server connection goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// When the client disconnects.
    Session,
    /// When the transaction ends: consecutive transactions of one client may
    /// run on different server connections, so nothing may rely on session
    /// state (named prepared statements, `SET`, advisory locks, temp tables).
    Transaction,
    /// After every statement; multi-statement transactions are refused.
    Statement,
}

impl PoolMode {
    /// The value as pgbouncer's config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }
}

/// Options for [`PgBouncer`]; [`PgBouncerBuilder::start`] writes the config and
/// starts it.
#[derive(Debug, Clone)]
pub struct PgBouncerBuilder {
    base_dir: PathBuf,
    program: PathBuf,
    pool_mode: PoolMode,
    default_pool_size: u32,
    query_wait_timeout: u32,
}

impl PgBouncerBuilder {
    /// A pgbouncer whose directory (config, log, pid file) will be created
    /// under `base_dir`; transaction pooling, 2 server connections per
    /// database and user.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        PgBouncerBuilder {
            base_dir: base_dir.into(),
            program: PathBuf::from(DEFAULT_PGBOUNCER),
            pool_mode: PoolMode::Transaction,
            default_pool_size: 2,
            query_wait_timeout: 30,
        }
    }

    /// The pgbouncer program (default [`DEFAULT_PGBOUNCER`]).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = path.into();
        self
    }

    /// `pool_mode` (default [`PoolMode::Transaction`]).
    pub fn pool_mode(mut self, mode: PoolMode) -> Self {
        self.pool_mode = mode;
        self
    }

    /// `default_pool_size`: server connections per (database, user) pair
    /// (default 2, so that a handful of clients already share them).
    pub fn default_pool_size(mut self, size: u32) -> Self {
        self.default_pool_size = size;
        self
    }

    /// `query_wait_timeout` in seconds: how long a client may wait for a free
    /// server connection before pgbouncer disconnects it with an error
    /// (default 30, so that a test that starves its own pool fails instead of
    /// hanging).
    pub fn query_wait_timeout(mut self, seconds: u32) -> Self {
        self.query_wait_timeout = seconds;
        self
    }

    /// Creates the directory, writes `pgbouncer.ini` and `userlist.txt`, and
    /// starts pgbouncer in front of `cluster` on a free loopback port; returns
    /// once its admin console answers.
    pub fn start(self, cluster: &Cluster) -> Result<PgBouncer> {
        if self.default_pool_size == 0 {
            return Err(Error::Setup("default_pool_size must be at least 1".into()));
        }
        if !self.program.is_file() {
            return Err(Error::Setup(format!(
                "{} not found; scripts/setup.sh installs Debian's pgbouncer package",
                self.program.display()
            )));
        }
        let as_root = effective_uid()? == 0;
        fs::create_dir_all(&self.base_dir).map_err(|source| Error::Io {
            action: "create directory",
            path: self.base_dir.clone(),
            source,
        })?;
        let base_dir = fs::canonicalize(&self.base_dir).map_err(|source| Error::Io {
            action: "resolve",
            path: self.base_dir.clone(),
            source,
        })?;
        let dir = base_dir.join(format!(
            "pgbouncer-{}-{}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&dir).map_err(|source| Error::Io {
            action: "create directory",
            path: dir.clone(),
            source,
        })?;
        // From here on, dropping `bouncer` removes the directory (and stops
        // pgbouncer once one runs).
        let mut bouncer = PgBouncer {
            dir,
            port: 0,
            child: None,
        };
        bouncer.prepare_dir(as_root)?;
        let mut last_reason = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            bouncer.write_config(&self, cluster, port)?;
            match bouncer.run(&self.program, as_root, port)? {
                Started::Ready => return Ok(bouncer),
                Started::PortTaken(reason) => last_reason = reason,
            }
        }
        Err(Error::Setup(format!(
            "PgBouncer found no free port after {PORT_ATTEMPTS} attempts; last: {last_reason}"
        )))
    }
}

/// How one start attempt ended.
enum Started {
    /// pgbouncer runs and its admin console answers.
    Ready,
    /// pgbouncer exited because the port was taken; the log line says so.
    PortTaken(String),
}

/// A pgbouncer of its own, on `127.0.0.1` on a free port, in front of one
/// [`Cluster`]; every database name is passed through to that cluster.
///
/// It runs as the `postgres` OS user when this process is root (via `runuser
/// -u postgres --`), as the current user otherwise. Authentication is `trust`
/// with an `auth_file` naming the one user, `postgres`, who is also the admin
/// console's user; there is no Unix socket. Dropping it stops pgbouncer
/// (SIGTERM to the pid in its pid file) and removes its directory.
///
/// Through [`PoolMode::Transaction`] (the default), named prepared statements
/// do not survive from one transaction to the next: with the `postgres` crate
/// use `query_typed` (one unnamed statement, one round trip) or
/// `simple_query` outside an explicit transaction.
///
/// ```no_run
/// use workfence_harness::pgbouncer::PgBouncer;
/// use workfence_harness::Cluster;
/// use postgres::types::Type;
///
/// let cluster = Cluster::start("target/tmp")?;
/// cluster.create_database("pooled")?;
/// let bouncer = PgBouncer::start("target/tmp", &cluster)?;
/// let mut client = bouncer.connect_to("pooled")?;
/// let row = client.query_typed_one("SELECT $1::int + 1", &[(&41_i32, Type::INT4)])?;
/// assert_eq!(row.get::<_, i32>(0), 42);
/// # Ok::<(), workfence_harness::Error>(())
/// ```
#[derive(Debug)]
pub struct PgBouncer {
    dir: PathBuf,
    port: u16,
    /// The process started (`runuser` when root, else pgbouncer itself);
    /// `None` once stopped.
    child: Option<Child>,
}

impl PgBouncer {
    /// Starts a pgbouncer with default options (transaction pooling, 2 server
    /// connections per database) under `base_dir`, in front of `cluster`; see
    /// [`PgBouncerBuilder`] for the options.
    pub fn start(base_dir: impl Into<PathBuf>, cluster: &Cluster) -> Result<PgBouncer> {
        PgBouncerBuilder::new(base_dir).start(cluster)
    }

    /// Options for a pgbouncer under `base_dir`.
    pub fn builder(base_dir: impl Into<PathBuf>) -> PgBouncerBuilder {
        PgBouncerBuilder::new(base_dir)
    }

    /// The host pgbouncer listens on (`127.0.0.1`).
    pub fn host(&self) -> &str {
        HOST
    }

    /// The TCP port pgbouncer listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding `pgbouncer.ini`, `userlist.txt`, the log and the
    /// pid file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// pgbouncer's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("pgbouncer.log")
    }

    /// A libpq-style connection string for `dbname` through pgbouncer.
    pub fn connection_string(&self, dbname: &str) -> String {
        let quoted = dbname.replace('\\', "\\\\").replace('\'', "\\'");
        format!(
            "host={HOST} port={} user={USER} dbname='{quoted}'",
            self.port
        )
    }

    /// Connects to `dbname` through pgbouncer.
    pub fn connect_to(&self, dbname: &str) -> Result<Client> {
        Ok(postgres::Config::new()
            .host(HOST)
            .port(self.port)
            .user(USER)
            .dbname(dbname)
            .application_name("workfence_harness")
            .connect(NoTls)?)
    }

    /// Connects to pgbouncer's admin console (database `pgbouncer`), which
    /// answers `simple_query` only (`SHOW POOLS`, `SHOW SERVERS`, ...).
    pub fn admin(&self) -> Result<Client> {
        self.connect_to("pgbouncer")
    }

    /// Stops pgbouncer (SIGTERM, an immediate shutdown that drops any client
    /// still connected) and waits until it has exited. The directory stays until the value is dropped. Stopping a
    /// stopped pgbouncer does nothing.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // When root, the child is `runuser`; the pid file names pgbouncer
        // itself. Signalled, runuser passes SIGTERM on, then waits two seconds
        // and sends SIGKILL: only the fallback for a pgbouncer that has not
        // written its pid file yet (stopped while starting).
        let pid = match self.pid() {
            Ok(pid) => pid,
            Err(_) => child.id(),
        };
        signal("TERM", pid)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().map_err(|source| Error::Io {
                action: "wait for pgbouncer in",
                path: self.dir.clone(),
                source,
            })? {
                // PgBouncer 1.18 answers SIGTERM with "got SIGTERM, fast
                // exit" and exit status 1 (runuser passes the status on).
                return if status.success() || status.code() == Some(1) {
                    Ok(())
                } else {
                    Err(Error::Setup(format!(
                        "pgbouncer in {} exited with {status} on SIGTERM",
                        self.dir.display()
                    )))
                };
            }
            if Instant::now() >= deadline {
                signal("KILL", pid)?;
                child.kill().map_err(|source| Error::Io {
                    action: "kill pgbouncer in",
                    path: self.dir.clone(),
                    source,
                })?;
                child.wait().map_err(|source| Error::Io {
                    action: "wait for pgbouncer in",
                    path: self.dir.clone(),
                    source,
                })?;
                return Err(Error::Setup(format!(
                    "pgbouncer in {} ignored SIGTERM for {STOP_TIMEOUT:?}; killed",
                    self.dir.display()
                )));
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
    }

    /// pgbouncer's pid, from its pid file.
    fn pid(&self) -> Result<u32> {
        let path = self.dir.join("pgbouncer.pid");
        let text = fs::read_to_string(&path).map_err(|source| Error::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        text.trim()
            .parse()
            .map_err(|_| Error::Setup(format!("{} holds {text:?}", path.display())))
    }

    /// Hands the directory to pgbouncer's OS user (it writes its log and pid
    /// file there) and checks that user can reach it.
    fn prepare_dir(&self, as_root: bool) -> Result<()> {
        give_to_server_user(&self.dir, as_root)
    }

    /// Writes `pgbouncer.ini` for `port` and `userlist.txt` (both readable by
    /// pgbouncer's OS user: the directory is its own).
    fn write_config(&self, opts: &PgBouncerBuilder, cluster: &Cluster, port: u16) -> Result<()> {
        let dir = self
            .dir
            .to_str()
            .ok_or_else(|| Error::Setup(format!("{} is not valid UTF-8", self.dir.display())))?;
        if dir.contains(['\n', ';', '#', '"']) {
            return Err(Error::Setup(format!(
                "{dir} must not contain a newline, ';', '#' or '\"' (pgbouncer.ini cannot hold them)"
            )));
        }
        let userlist = format!("\"{USER}\" \"\"\n");
        // `*`: every database name goes to the database of that name in the
        // cluster. `unix_socket_dir` empty: TCP only.
        let ini = format!(
            "[databases]\n\
             * = host={HOST} port={cluster_port}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = {HOST}\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/userlist.txt\n\
             admin_users = {USER}\n\
             pool_mode = {pool_mode}\n\
             default_pool_size = {pool_size}\n\
             query_wait_timeout = {query_wait_timeout}\n\
             logfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n",
            cluster_port = cluster.port(),
            pool_mode = opts.pool_mode.as_str(),
            pool_size = opts.default_pool_size,
            query_wait_timeout = opts.query_wait_timeout,
        );
        for (name, text) in [("userlist.txt", userlist), ("pgbouncer.ini", ini)] {
            let path = self.dir.join(name);
            fs::write(&path, text).map_err(|source| Error::Io {
                action: "write",
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// Starts pgbouncer on `port` (already in the config) and waits until its
    /// admin console answers, it exits, or [`START_TIMEOUT`] passes.
    fn run(&mut self, program: &Path, as_root: bool, port: u16) -> Result<Started> {
        // Startup errors (an unreadable config, say) come before the log file
        // is opened; pgbouncer also writes them to stderr, kept here.
        let stderr_path = self.dir.join("stderr.log");
        let stderr = File::create(&stderr_path).map_err(|source| Error::Io {
            action: "create",
            path: stderr_path.clone(),
            source,
        })?;
        let mut cmd = server_command(program, as_root);
        cmd.arg(self.dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            program: program.display().to_string(),
            source,
        })?;
        self.port = port;
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .map(Child::try_wait)
                .transpose()
                .map_err(|source| Error::Io {
                    action: "wait for pgbouncer in",
                    path: self.dir.clone(),
                    source,
                })?
                .flatten();
            if let Some(status) = exited {
                self.child = None;
                let output = tail_of(&stderr_path);
                if output.contains("Address already in use") {
                    return Ok(Started::PortTaken(format!("port {port} taken: {output}")));
                }
                return Err(Error::Setup(format!(
                    "pgbouncer in {} exited with {status} while starting\n\
                     --- end of its output ---\n{output}",
                    self.dir.display()
                )));
            }
            // Ready once the admin console answers; a mere TCP connect could
            // reach another process that took the port first.
            let probe = self.admin().and_then(|mut admin| {
                Ok(admin
                    .simple_query("SHOW VERSION")?
                    .iter()
                    .any(|m| matches!(m, SimpleQueryMessage::Row(_))))
            });
            if let Ok(true) = probe {
                return Ok(Started::Ready);
            }
            if Instant::now() >= deadline {
                return Err(Error::Setup(format!(
                    "pgbouncer in {} did not answer on port {port} within {START_TIMEOUT:?} \
                     (last probe: {})\n--- end of its output ---\n{}",
                    self.dir.display(),
                    match probe {
                        Ok(_) => "SHOW VERSION returned no row".to_owned(),
                        Err(e) => e.to_string(),
                    },
                    tail_of(&stderr_path)
                )));
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Err(err) = self.stop() {
            eprintln!(
                "workfence_harness: could not stop pgbouncer in {}: {err}",
                self.dir.display()
            );
            return;
        }
        if let Err(err) = fs::remove_dir_all(&self.dir) {
            eprintln!(
                "workfence_harness: could not remove {}: {err}",
                self.dir.display()
            );
        }
    }
}

/// Sends signal `name` (`TERM`, `KILL`) to `pid` with kill(1).
fn signal(name: &str, pid: u32) -> Result<()> {
    let program = format!("kill -{name} {pid}");
    let output = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .output()
        .map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            program,
            status: output.status,
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
