//! A throwaway PostgreSQL cluster, of the major whose `pg_config` is
//! [`pg_config`] (PostgreSQL 15 unless `WORKFENCE_PG_CONFIG` names another).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};

use postgres::{Client, NoTls};

use crate::os::{
    effective_uid, free_port, give_file_to_server_user, give_to_server_user, server_command,
    stdout_of, tail_of, HOST, SERVER_OS_USER,
};
use crate::{Error, Result};

/// The `pg_config` of Debian's PostgreSQL 15, the default major.
pub const DEFAULT_PG_CONFIG: &str = "/usr/lib/postgresql/15/bin/pg_config";

/// The environment variable that names the `pg_config` of the PostgreSQL
/// every cluster runs (scripts/test.sh sets it to PostgreSQL 18's for the
/// PG 18 tier); unset or empty means [`DEFAULT_PG_CONFIG`].
pub const PG_CONFIG_ENV: &str = "WORKFENCE_PG_CONFIG";

/// The `pg_config` clusters are started from by default: `$WORKFENCE_PG_CONFIG`
/// when set and not empty, else [`DEFAULT_PG_CONFIG`].
pub fn pg_config() -> PathBuf {
    match std::env::var_os(PG_CONFIG_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_PG_CONFIG),
    }
}

/// The superuser `initdb` creates; every connection logs in as it (trust auth).
const SUPERUSER: &str = "postgres";

/// How often `start` picks a new port when another process took the one it
/// found free (the port is free when picked, not necessarily when bound).
const PORT_ATTEMPTS: u32 = 5;

/// Longest Unix socket path the kernel accepts (`sun_path` is 108 bytes with
/// the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Makes the default directory names unique within this process.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// Options for [`Cluster`]; [`ClusterBuilder::start`] creates and starts it.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    base_dir: PathBuf,
    name: Option<String>,
    keep: bool,
    replace_existing: bool,
    pg_config: PathBuf,
    settings: Vec<(String, String)>,
    archive_wal: bool,
}

impl ClusterBuilder {
    /// A cluster whose data directory will be created under `base_dir` (which
    /// is created if missing).
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        ClusterBuilder {
            base_dir: base_dir.into(),
            name: None,
            keep: false,
            replace_existing: false,
            pg_config: pg_config(),
            settings: Vec::new(),
            archive_wal: false,
        }
    }

    /// The data directory's name under the base directory; by default
    /// `pg-<pid>-<n>`, unique within this process.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// When true, dropping the [`Cluster`] neither stops the server nor removes
    /// the data directory (for a cluster left up to be explored).
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// When true, a data directory already at the chosen path is stopped (if a
    /// server runs there) and removed first; when false (the default) it is an
    /// error.
    pub fn replace_existing(mut self, replace: bool) -> Self {
        self.replace_existing = replace;
        self
    }

    /// The `pg_config` whose `--bindir` supplies `initdb` and `pg_ctl`
    /// (default [`pg_config()`]).
    pub fn pg_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.pg_config = path.into();
        self
    }

    /// A server setting, `name = 'value'`, appended to `postgresql.conf` after
    /// `initdb` (so it holds from the first start, e.g.
    /// `shared_preload_libraries`, and across [`Cluster::start_again`]).
    /// `name` is letters, digits, `_` and `.`; `value` any text (quoted for
    /// the file). Later settings of the same name win.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Archive every finished WAL file into a directory of the cluster's own
    /// ([`Cluster::archive_dir`], beside the data directory and removed with
    /// it): `archive_mode = on` and an `archive_command` that copies there,
    /// what a point-in-time recovery ([`Cluster::recover_to`]) replays.
    pub fn archive_wal(mut self) -> Self {
        self.archive_wal = true;
        self
    }

    /// Creates the data directory, runs `initdb` and starts the server on a
    /// free loopback port; returns once it accepts connections.
    pub fn start(self) -> Result<Cluster> {
        let bin_dir = bin_dir(&self.pg_config)?;
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
        let name = self.name.unwrap_or_else(|| {
            format!(
                "pg-{}-{}",
                std::process::id(),
                NEXT_ID.fetch_add(1, Ordering::Relaxed)
            )
        });
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::Setup(format!(
                "cluster name {name:?} must be a plain directory name"
            )));
        }
        let data_dir = base_dir.join(&name);
        if data_dir.to_string_lossy().contains('\'') {
            // pg_ctl hands the server options to /bin/sh; the socket directory
            // is single-quoted there.
            return Err(Error::Setup(format!(
                "the data directory path {} must not contain a single quote",
                data_dir.display()
            )));
        }

        if data_dir.exists() {
            if !self.replace_existing {
                return Err(Error::Setup(format!(
                    "{} already exists; remove it or ask for replace_existing",
                    data_dir.display()
                )));
            }
            stop_stale(&bin_dir, &data_dir, as_root)?;
            fs::remove_dir_all(&data_dir).map_err(|source| Error::Io {
                action: "remove",
                path: data_dir.clone(),
                source,
            })?;
        }

        fs::create_dir(&data_dir).map_err(|source| Error::Io {
            action: "create directory",
            path: data_dir.clone(),
            source,
        })?;
        let archive = self.archive_wal.then(|| data_dir.with_extension("archive"));
        // From here on, dropping `cluster` cleans up whatever was made.
        let mut cluster = Cluster {
            data_dir,
            bin_dir,
            port: 0,
            socket_dir: None,
            as_root,
            keep: self.keep,
            running: false,
            archive: archive.clone(),
        };
        cluster.prepare_dir()?;
        cluster.initdb()?;
        let mut settings = self.settings.clone();
        if let Some(archive) = &archive {
            fs::create_dir_all(archive).map_err(|source| Error::Io {
                action: "create directory",
                path: archive.clone(),
                source,
            })?;
            give_to_server_user(archive, as_root)?;
            settings.push(("archive_mode".into(), "on".into()));
            settings.push((
                "archive_command".into(),
                format!("cp '%p' '{}/%f'", archive.display()),
            ));
        }
        cluster.write_settings(&settings)?;
        cluster.start_server()?;
        Ok(cluster)
    }
}

/// A throwaway PostgreSQL cluster listening on `127.0.0.1` on a port of its own.
///
/// The server runs as the `postgres` OS user when this process is root (via
/// `runuser -u postgres --`), as the current user otherwise. Authentication is
/// `trust`; every connection logs in as the superuser `postgres`. Dropping the
/// cluster stops the server (`pg_ctl -m fast`) and removes its data directory,
/// unless it was built with [`ClusterBuilder::keep`].
///
/// ```no_run
/// use workfence_harness::Cluster;
///
/// let cluster = Cluster::start("target/tmp")?;
/// cluster.create_database("my_test")?; // with CREATE EXTENSION pg_workfence
/// let mut client = cluster.connect_to("my_test")?;
/// let n: i64 = client.query_one("SELECT count(*) FROM workfence.items", &[])?.get(0);
/// assert_eq!(n, 0);
/// # Ok::<(), workfence_harness::Error>(())
/// ```
#[derive(Debug)]
pub struct Cluster {
    data_dir: PathBuf,
    bin_dir: PathBuf,
    port: u16,
    socket_dir: Option<PathBuf>,
    as_root: bool,
    keep: bool,
    running: bool,
    /// Where `archive_command` copies WAL files ([`ClusterBuilder::archive_wal`]).
    archive: Option<PathBuf>,
}

impl Cluster {
    /// Starts a cluster with default options in a new directory under
    /// `base_dir`; see [`ClusterBuilder`] for the options.
    pub fn start(base_dir: impl Into<PathBuf>) -> Result<Cluster> {
        ClusterBuilder::new(base_dir).start()
    }

    /// Options for a cluster under `base_dir`.
    pub fn builder(base_dir: impl Into<PathBuf>) -> ClusterBuilder {
        ClusterBuilder::new(base_dir)
    }

    /// The host the server listens on (`127.0.0.1`).
    pub fn host(&self) -> &str {
        HOST
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (also holds the server log, `server.log`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of the Unix socket, if the path was short enough to have
    /// one (connections from this crate always use TCP).
    pub fn socket_dir(&self) -> Option<&Path> {
        self.socket_dir.as_deref()
    }

    /// The PostgreSQL binaries' directory (`pg_config --bindir`).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The server log file.
    pub fn log_file(&self) -> PathBuf {
        self.data_dir.join("server.log")
    }

    /// Whether the server was started and not yet stopped by this value.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Changes whether dropping the cluster leaves it running and on disk.
    pub fn set_keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// A libpq-style connection string for `dbname`, as the worker process
    /// takes it.
    pub fn connection_string(&self, dbname: &str) -> String {
        let quoted = dbname.replace('\\', "\\\\").replace('\'', "\\'");
        format!(
            "host={HOST} port={} user={SUPERUSER} dbname='{quoted}'",
            self.port
        )
    }

    /// The `psql` command line that connects to `dbname`.
    pub fn psql_command(&self, dbname: &str) -> String {
        format!(
            "{} -h {HOST} -p {} -U {SUPERUSER} -d {dbname}",
            self.bin_dir.join("psql").display(),
            self.port
        )
    }

    /// The shell command that stops this cluster from outside (it stays up
    /// after a kept cluster is dropped).
    pub fn stop_command(&self) -> String {
        let pg_ctl = self.bin_dir.join("pg_ctl");
        let cmd = format!(
            "{} -D {} -m fast stop",
            pg_ctl.display(),
            self.data_dir.display()
        );
        if self.as_root {
            format!("runuser -u {SERVER_OS_USER} -- {cmd}")
        } else {
            cmd
        }
    }

    /// Connects to the `postgres` database.
    pub fn connect(&self) -> Result<Client> {
        self.connect_to("postgres")
    }

    /// Connects to `dbname`.
    pub fn connect_to(&self, dbname: &str) -> Result<Client> {
        Ok(postgres::Config::new()
            .host(HOST)
            .port(self.port)
            .user(SUPERUSER)
            .dbname(dbname)
            .application_name("workfence_harness")
            .connect(NoTls)?)
    }

    /// Creates database `name` (at most 63 bytes, any characters) and runs
    /// `CREATE EXTENSION pg_workfence` in it. A failure of the latter is
    /// [`Error::ExtensionMissing`], whose message says how to install it.
    pub fn create_database(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > 63 {
            return Err(Error::Setup(format!(
                "database name {name:?} must be 1 to 63 bytes long"
            )));
        }
        let mut admin = self.connect()?;
        // CREATE DATABASE takes no parameters; the server quotes the name.
        let create: String = admin
            .query_one(
                "SELECT pg_catalog.format('CREATE DATABASE %I', $1::text)",
                &[&name],
            )?
            .get(0);
        admin.batch_execute(&create)?;
        let mut db = self.connect_to(name)?;
        db.batch_execute("CREATE EXTENSION pg_workfence")
            .map_err(|source| Error::ExtensionMissing {
                database: name.to_owned(),
                pg_config: self.bin_dir().join("pg_config"),
                source,
            })
    }

    /// Stops the server (`pg_ctl -m fast`, waiting until it is down). The data
    /// directory stays until the cluster is dropped. Stopping a stopped cluster
    /// does nothing.
    pub fn stop(&mut self) -> Result<()> {
        self.stop_with("fast")
    }

    /// Crashes the server: `pg_ctl -m immediate stop`, which kills every
    /// server process without a checkpoint, as a power cut would (what was
    /// committed is in the WAL; the next start runs crash recovery). Returns
    /// once the server is down. The port and the data directory stay; see
    /// [`Cluster::start_again`]. Crashing a stopped cluster does nothing.
    pub fn crash(&mut self) -> Result<()> {
        self.stop_with("immediate")
    }

    /// Starts a stopped or crashed server again on the same port and data
    /// directory, so that clients reconnect with the connection string they
    /// had; returns once it accepts connections (after crash recovery). It
    /// fails if another process took the port meanwhile. Starting a running
    /// cluster does nothing.
    pub fn start_again(&mut self) -> Result<()> {
        if self.running {
            return Ok(());
        }
        match self.start_on(self.port)? {
            Started::Yes => Ok(()),
            Started::PortTaken(reason) => Err(Error::Start {
                data_dir: self.data_dir.clone(),
                reason,
                log: tail_of(&self.log_file()),
            }),
        }
    }

    /// Starts a stopped server on `port` instead of its own: a promoted
    /// standby taking over the address of the primary it replaces (which
    /// must be down), so that clients reconnect with the connection string
    /// they had. Starting a running cluster does nothing.
    pub fn start_again_on(&mut self, port: u16) -> Result<()> {
        if self.running {
            return Ok(());
        }
        self.port = port;
        self.start_again()
    }

    /// `pg_ctl -m MODE stop`, waiting until the server is down.
    fn stop_with(&mut self, mode: &str) -> Result<()> {
        if self.running {
            let args = [
                OsStr::new("-D"),
                self.data_dir.as_os_str(),
                OsStr::new("-m"),
                OsStr::new(mode),
                OsStr::new("-w"),
                OsStr::new("stop"),
            ];
            run(&self.bin_dir.join("pg_ctl"), &args, self.as_root)?;
            self.running = false;
        }
        Ok(())
    }

    /// Hands the data directory to the server's OS user and checks it can reach
    /// it (every parent directory must be searchable by that user).
    fn prepare_dir(&self) -> Result<()> {
        give_to_server_user(&self.data_dir, self.as_root)
    }

    /// Appends `settings` to `postgresql.conf` (see [`ClusterBuilder::setting`]).
    fn write_settings(&self, settings: &[(String, String)]) -> Result<()> {
        if settings.is_empty() {
            return Ok(());
        }
        let mut lines = String::from("\n# ClusterBuilder::setting\n");
        for (name, value) in settings {
            let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
            if name.is_empty() || !name.chars().all(plain) {
                return Err(Error::Setup(format!(
                    "setting name {name:?} must be letters, digits, '_' and '.'"
                )));
            }
            if value.contains(['\n', '\r']) {
                return Err(Error::Setup(format!(
                    "setting {name}: the value must be one line"
                )));
            }
            let quoted = value.replace('\\', "\\\\").replace('\'', "''");
            lines.push_str(&format!("{name} = '{quoted}'\n"));
        }
        let path = self.data_dir.join("postgresql.conf");
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, lines.as_bytes()))
            .map_err(|source| Error::Io {
                action: "append settings to",
                path,
                source,
            })
    }

    fn initdb(&self) -> Result<()> {
        let args = [
            OsStr::new("-D"),
            self.data_dir.as_os_str(),
            OsStr::new("-A"),
            OsStr::new("trust"),
            OsStr::new("-U"),
            OsStr::new(SUPERUSER),
            OsStr::new("-E"),
            OsStr::new("UTF8"),
            OsStr::new("--no-locale"),
            // Throwaway: skip the fsync of the new files (the server itself
            // keeps fsync on).
            OsStr::new("--no-sync"),
            OsStr::new("--no-instructions"),
        ];
        run(&self.bin_dir.join("initdb"), &args, self.as_root).map(drop)
    }

    /// Starts the server, picking another free port if the one picked was
    /// taken between the pick and the bind.
    fn start_server(&mut self) -> Result<()> {
        let mut last_reason = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match self.start_on(free_port()?)? {
                Started::Yes => return Ok(()),
                Started::PortTaken(reason) => last_reason = reason,
            }
        }
        Err(Error::Start {
            data_dir: self.data_dir.clone(),
            reason: format!("no free port after {PORT_ATTEMPTS} attempts; last: {last_reason}"),
            log: tail_of(&self.log_file()),
        })
    }

    /// Starts the server on `port` (`pg_ctl -w start`, logging to
    /// [`Cluster::log_file`]) and records the port on success.
    fn start_on(&mut self, port: u16) -> Result<Started> {
        let log = self.log_file();
        let socket_path_len = self.data_dir.as_os_str().len() + format!("/.s.PGSQL.{port}").len();
        // A path too long for a Unix socket: TCP only (pg_ctl -w waits on
        // postmaster.pid, not on the socket).
        let socket_dir = (socket_path_len <= MAX_SOCKET_PATH).then(|| self.data_dir.clone());
        let socket_opt = match &socket_dir {
            Some(dir) => format!("'{}'", dir.display()),
            None => "''".to_owned(),
        };
        let server_opts = format!("-p {port} -k {socket_opt} -c listen_addresses={HOST}");
        let args: [&OsStr; 10] = [
            OsStr::new("-D"),
            self.data_dir.as_os_str(),
            OsStr::new("-l"),
            log.as_os_str(),
            OsStr::new("-w"),
            OsStr::new("-t"),
            OsStr::new("60"),
            OsStr::new("-o"),
            OsStr::new(&server_opts),
            OsStr::new("start"),
        ];
        match run(&self.bin_dir.join("pg_ctl"), &args, self.as_root) {
            Ok(_) => {
                self.port = port;
                self.socket_dir = socket_dir;
                self.running = true;
                Ok(Started::Yes)
            }
            Err(err) => {
                let log_tail = tail_of(&log);
                if log_tail.contains("Address already in use") {
                    return Ok(Started::PortTaken(format!("port {port} taken: {err}")));
                }
                Err(Error::Start {
                    data_dir: self.data_dir.clone(),
                    reason: err.to_string(),
                    log: log_tail,
                })
            }
        }
    }
}

impl Cluster {
    /// A streaming hot standby of this running cluster: a `pg_basebackup -R`
    /// copy (WAL streamed along, a fast checkpoint) in a new data directory
    /// under `base_dir`, started on a free port. It is read-only and replays
    /// this cluster's WAL as it comes, until [`Cluster::promote`]; stopped
    /// and started again ([`Cluster::stop`], [`Cluster::start_again`]) it
    /// stays a standby. Settings made with [`ClusterBuilder::setting`] come
    /// along in `postgresql.conf`.
    pub fn standby(&self, base_dir: impl Into<PathBuf>) -> Result<Cluster> {
        let mut copy = self.copy(base_dir.into(), true)?;
        copy.start_server()?;
        Ok(copy)
    }

    /// A base backup of this running cluster (`pg_basebackup`, WAL streamed
    /// along) in a new data directory under `base_dir`, not started: what a
    /// point-in-time recovery starts from ([`Cluster::recover_to`]).
    pub fn backup(&self, base_dir: impl Into<PathBuf>) -> Result<Cluster> {
        self.copy(base_dir.into(), false)
    }

    /// Starts a [`Cluster::backup`] as a point-in-time recovery: archive
    /// recovery of the WAL files in `archive` (the source's
    /// [`Cluster::archive_dir`]), up to and not including `target_lsn`, then
    /// promotion to a primary on a new timeline; returns once it accepts
    /// writes.
    pub fn recover_to(&mut self, archive: &Path, target_lsn: &str) -> Result<()> {
        self.write_settings(&[
            (
                "restore_command".into(),
                format!("cp '{}/%f' '%p'", archive.display()),
            ),
            ("recovery_target_lsn".into(), target_lsn.to_owned()),
            ("recovery_target_inclusive".into(), "off".into()),
            ("recovery_target_action".into(), "promote".into()),
        ])?;
        let signal = self.data_dir.join("recovery.signal");
        fs::write(&signal, b"").map_err(|source| Error::Io {
            action: "create",
            path: signal.clone(),
            source,
        })?;
        give_file_to_server_user(&signal, self.as_root)?;
        self.start_server()?;
        self.wait_until_primary()
    }

    /// `pg_basebackup` of this running cluster into a new data directory
    /// under `base_dir` (with `-R`, a standby's settings, when `standby`).
    fn copy(&self, base_dir: PathBuf, standby: bool) -> Result<Cluster> {
        fs::create_dir_all(&base_dir).map_err(|source| Error::Io {
            action: "create directory",
            path: base_dir.clone(),
            source,
        })?;
        let data_dir = fs::canonicalize(&base_dir)
            .map_err(|source| Error::Io {
                action: "resolve",
                path: base_dir.clone(),
                source,
            })?
            .join(format!(
                "pg-{}-{}",
                std::process::id(),
                NEXT_ID.fetch_add(1, Ordering::Relaxed)
            ));
        fs::create_dir(&data_dir).map_err(|source| Error::Io {
            action: "create directory",
            path: data_dir.clone(),
            source,
        })?;
        let copy = Cluster {
            data_dir,
            bin_dir: self.bin_dir.clone(),
            port: 0,
            socket_dir: None,
            as_root: self.as_root,
            keep: self.keep,
            running: false,
            archive: None,
        };
        copy.prepare_dir()?;
        let port = self.port.to_string();
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("-D"),
            copy.data_dir.as_os_str(),
            OsStr::new("-h"),
            OsStr::new(HOST),
            OsStr::new("-p"),
            OsStr::new(&port),
            OsStr::new("-U"),
            OsStr::new(SUPERUSER),
            OsStr::new("-X"),
            OsStr::new("stream"),
            OsStr::new("-c"),
            OsStr::new("fast"),
            OsStr::new("--no-sync"),
        ];
        if standby {
            args.push(OsStr::new("-R"));
        }
        run(&self.bin_dir.join("pg_basebackup"), &args, self.as_root)?;
        Ok(copy)
    }

    /// The directory `archive_command` copies finished WAL files into, when
    /// built with [`ClusterBuilder::archive_wal`].
    pub fn archive_dir(&self) -> Option<&Path> {
        self.archive.as_deref()
    }

    /// Promotes a standby to a primary (`pg_ctl promote -w`); returns once
    /// it accepts writes.
    pub fn promote(&self) -> Result<()> {
        let args = [
            OsStr::new("-D"),
            self.data_dir.as_os_str(),
            OsStr::new("-w"),
            OsStr::new("-t"),
            OsStr::new("60"),
            OsStr::new("promote"),
        ];
        run(&self.bin_dir.join("pg_ctl"), &args, self.as_root)?;
        self.wait_until_primary()
    }

    /// Waits (polling `pg_is_in_recovery()`, 10 ms apart, at most a minute)
    /// until the server has ended recovery.
    fn wait_until_primary(&self) -> Result<()> {
        let mut client = self.connect()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let in_recovery: bool = client
                .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
                .map_err(|e| Error::Setup(format!("asking whether recovery ended: {e}")))?
                .get(0);
            if !in_recovery {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "the server in {} did not end recovery within a minute",
                    self.data_dir.display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// What [`Cluster::start_on`] achieved short of an error.
enum Started {
    /// The server runs and accepts connections.
    Yes,
    /// Another process holds the port (the reason says which and how).
    PortTaken(String),
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(err) = self.stop() {
            // A server in crash recovery (after a test crashed it, or a
            // backend died) can ignore a fast shutdown; don't leave it
            // running after the test.
            eprintln!(
                "workfence_harness: fast stop of the cluster in {} failed ({err}); \
                 stopping it with -m immediate",
                self.data_dir.display()
            );
            if let Err(err) = self.crash() {
                eprintln!(
                    "workfence_harness: could not stop the cluster in {}: {err}",
                    self.data_dir.display()
                );
                // Removing the directory under a running server would only
                // add confusion; leave it for inspection.
                return;
            }
        }
        for dir in std::iter::once(&self.data_dir).chain(&self.archive) {
            if let Err(err) = fs::remove_dir_all(dir) {
                eprintln!(
                    "workfence_harness: could not remove {}: {err}",
                    dir.display()
                );
            }
        }
    }
}

/// Runs a PostgreSQL program, through `runuser -u postgres --` when root,
/// from `/` (the current directory may be unreadable for `postgres`). Returns
/// its output, or an error carrying what it printed.
fn run(program: &Path, args: &[&OsStr], as_root: bool) -> Result<Output> {
    let mut cmd = server_command(program, as_root);
    cmd.args(args);
    let shown = {
        let mut s = OsString::from(program.as_os_str());
        for a in args {
            s.push(" ");
            s.push(a);
        }
        s.to_string_lossy().into_owned()
    };
    let output = cmd.output().map_err(|source| Error::Spawn {
        program: shown.clone(),
        source,
    })?;
    if output.status.success() {
        Ok(output)
    } else {
        let text = if output.stderr.is_empty() {
            &output.stdout
        } else {
            &output.stderr
        };
        Err(Error::Command {
            program: shown,
            status: output.status,
            output: String::from_utf8_lossy(text).trim().to_owned(),
        })
    }
}

fn bin_dir(pg_config: &Path) -> Result<PathBuf> {
    let dir = stdout_of(&pg_config.to_string_lossy(), &[OsStr::new("--bindir")])?;
    let dir = PathBuf::from(dir);
    if !dir.join("pg_ctl").is_file() || !dir.join("initdb").is_file() {
        return Err(Error::Setup(format!(
            "{} --bindir names {}, which has no pg_ctl/initdb",
            pg_config.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// Stops a server left running in `data_dir` by an earlier run, if any.
fn stop_stale(bin_dir: &Path, data_dir: &Path, as_root: bool) -> Result<()> {
    if !data_dir.join("postmaster.pid").exists() {
        return Ok(());
    }
    let pg_ctl = bin_dir.join("pg_ctl");
    // `pg_ctl status` exits 0 only when a server runs there.
    let status = [OsStr::new("-D"), data_dir.as_os_str(), OsStr::new("status")];
    if run(&pg_ctl, &status, as_root).is_ok() {
        let stop = [
            OsStr::new("-D"),
            data_dir.as_os_str(),
            OsStr::new("-m"),
            OsStr::new("fast"),
            OsStr::new("-w"),
            OsStr::new("stop"),
        ];
        run(&pg_ctl, &stop, as_root)?;
    }
    Ok(())
}
