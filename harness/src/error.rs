//! The crate's error type.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// An error raised by the server, as a worker process reports it: the SQLSTATE
/// and the texts PostgreSQL sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerError {
    /// The five-character SQLSTATE, e.g. `55000` for a lease that is not current.
    pub sqlstate: String,
    /// The primary message.
    pub message: String,
    /// The DETAIL line, if the server sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The HINT line, if the server sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SQLSTATE {}: {}", self.sqlstate, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (DETAIL: {detail})")?;
        }
        Ok(())
    }
}

impl ServerError {
    /// The server error inside a `postgres` error, if it is one (and not, say, a
    /// broken connection).
    pub fn from_postgres(err: &postgres::Error) -> Option<ServerError> {
        err.as_db_error().map(|db| ServerError {
            sqlstate: db.code().code().to_owned(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
        })
    }
}

/// Everything that can go wrong while running a cluster or a worker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program could not be started at all (missing binary, no permission).
    #[error("could not run {program}: {source}")]
    Spawn {
        /// The program, as given to the OS.
        program: String,
        /// Why the OS refused.
        #[source]
        source: std::io::Error,
    },
    /// A program ran and exited unsuccessfully.
    #[error("{program} failed ({status}): {output}")]
    Command {
        /// The command line that failed.
        program: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it wrote (stderr, else stdout), trimmed.
        output: String,
    },
    /// A file-system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The setup is unusable; the message says what to change.
    #[error("{0}")]
    Setup(String),
    /// The server did not start; `log` is the end of its log file.
    #[error("PostgreSQL did not start in {}: {reason}\n--- end of server log ---\n{log}", data_dir.display())]
    Start {
        /// The data directory.
        data_dir: PathBuf,
        /// What `pg_ctl` reported.
        reason: String,
        /// The last lines of the server log.
        log: String,
    },
    /// `CREATE EXTENSION pg_workfence` failed, which nearly always means the
    /// extension is not installed into this PostgreSQL.
    #[error(
        "CREATE EXTENSION pg_workfence failed in database {database}: {source}\n\
         Is the extension installed into the PostgreSQL of {pg_config}? Run scripts/test.sh (or \
         `cargo pgrx install --release --pg-config {pg_config}`) first.",
        pg_config = pg_config.display()
    )]
    ExtensionMissing {
        /// The database it was created in.
        database: String,
        /// The `pg_config` of the cluster's PostgreSQL.
        pg_config: PathBuf,
        /// The server's answer.
        #[source]
        source: postgres::Error,
    },
    /// A statement sent directly (not through a worker) failed.
    #[error("{0}")]
    Postgres(#[from] postgres::Error),
    /// A worker process reported a server error for its command.
    #[error("worker {worker}: {error}")]
    Server {
        /// The worker's name.
        worker: String,
        /// The error the server raised.
        error: ServerError,
    },
    /// A worker process broke the protocol, refused a command, or went away.
    #[error("worker {worker}: {message}")]
    Worker {
        /// The worker's name.
        worker: String,
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// The SQLSTATE of a server error, whether it came back through a worker or
    /// from a direct connection; `None` for every other kind of error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Server { error, .. } => Some(&error.sqlstate),
            Error::Postgres(e) | Error::ExtensionMissing { source: e, .. } => {
                e.as_db_error().map(|db| db.code().code())
            }
            _ => None,
        }
    }
}
