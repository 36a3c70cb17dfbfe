//! [`Error`]: every failure of the library, one variant per SQLSTATE that pg_workfence's functions
//! raise (clients/README.md, *Errors*; docs/writing-workers.md, *Errors: each SQLSTATE*).

use std::fmt;

use tokio_postgres::error::{DbError, SqlState};

/// What the server said about an error: its SQLSTATE, message, DETAIL and HINT, as
/// `ErrorResponse` carried them. Kept whole in every database variant of [`Error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The five-character SQLSTATE, e.g. `"22023"`.
    pub code: String,
    /// The primary message, e.g. `lease lost`.
    pub message: String,
    /// The DETAIL line, when the server sent one (pg_workfence says which argument, or why).
    pub detail: Option<String>,
    /// The HINT line, when the server sent one (what to do about it).
    pub hint: Option<String>,
}

impl ServerError {
    /// Copies the parts of a server error a caller acts on.
    fn from_db(db: &DbError) -> Self {
        ServerError {
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
        }
    }

    /// An error made up by the library for a refusal the server reports as `false` rather than
    /// raising (a `work_finish` that returned false in the fenced transaction): SQLSTATE 55000.
    pub(crate) fn lease_lost(detail: impl Into<String>) -> Self {
        ServerError {
            code: SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE.code().to_owned(),
            message: "lease lost".to_owned(),
            detail: Some(detail.into()),
            hint: None,
        }
    }
}

impl fmt::Display for ServerError {
    /// `message (SQLSTATE 22023); detail: ...; hint: ...`, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)?;
        if let Some(detail) = &self.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every failure of the library. The database variants are named after the SQLSTATE table of
/// clients/README.md and carry the server's [`ServerError`]; the `source` of each is the
/// `tokio_postgres::Error` it came from, when there is one.
///
/// A refusal is not an error: `work_renew`, `work_finish`, `work_fail` and `work_release` answer
/// `false` for a token that is not current, and the runner logs it (`refused id=.. (lease
/// lost)`). Only in a fenced transaction ([`crate::FencedTransaction`]) does a refusal become
/// [`Error::LeaseLost`], because the caller's own writes must then be rolled back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 22004 null_value_not_allowed: a NULL where a value is required (the message names it).
    /// A bug in the caller: do not retry the same call.
    #[error("null argument: {0}")]
    NullArgument(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 22023 invalid_parameter_value: a bad queue, key, owner, lease, interval or `max_items`,
    /// or (from 0.12.0) a schedule's bad cron expression or time zone (DETAIL and HINT say
    /// which). A configuration error: never retry.
    #[error("invalid argument: {0}")]
    InvalidArgument(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 25006 read_only_sql_transaction: a write on a hot standby (a claim after a failover to a
    /// standby not promoted yet). Reconnect to the primary.
    #[error("read only: {0}")]
    ReadOnly(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 25P01 no_active_sql_transaction: `work_assert` outside a transaction block.
    #[error("no transaction: {0}")]
    NoTransaction(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 40001 serialization_failure: an enqueue that raced a purge three times; retry it.
    #[error("serialization failure: {0}")]
    SerializationFailure(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 42501 insufficient_privilege: a queue grant or an `EXECUTE` privilege missing
    /// (docs/operations.md). A deployment error: retrying does not help.
    #[error("not permitted: {0}")]
    NotPermitted(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 42704 undefined_object: a grant naming an unknown role or capability, or (from 0.12.0)
    /// [`crate::pause_schedule`] / [`crate::resume_schedule`] of a schedule that does not exist.
    #[error("undefined object: {0}")]
    UndefinedObject(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 23503 foreign_key_violation (from 0.12.0): [`crate::EnqueueOptions::after`] names an item
    /// that does not exist (never enqueued, or purged), or one in a queue the role may not read
    /// (the two are not told apart). Nothing was enqueued.
    #[error("unknown parent: {0}")]
    UnknownParent(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 55000 object_not_in_prerequisite_state: `work_assert` (or the `COMMIT` after it) for a
    /// token that is not current; also a `work_finish` that returned false in the fenced
    /// transaction. The transaction was rolled back: nothing of it is committed. Drop the job.
    #[error("lease lost: {0}")]
    LeaseLost(ServerError, #[source] Option<tokio_postgres::Error>),
    /// 57014 query_canceled: a statement cancelled (the long poll on shutdown, or
    /// `statement_timeout`). It changed nothing.
    #[error("cancelled: {0}")]
    Cancelled(ServerError, #[source] Option<tokio_postgres::Error>),
    /// Any other SQLSTATE the server raised (42883 for a wrong argument type, 53xxx, XX000, a
    /// failing statement of the caller's own in a fenced transaction, ...).
    #[error("database error: {0}")]
    Database(ServerError, #[source] Option<tokio_postgres::Error>),
    /// The connection failed or closed (no SQLSTATE: a network error, a server that went away,
    /// a connection string that does not parse). The outcome of a statement in flight is unknown
    /// (docs/writing-workers.md, *A lost connection*).
    #[error("connection: {0}")]
    Connection(#[source] tokio_postgres::Error),
    /// No connection could be taken from the runner's pool.
    #[error("connection pool: {0}")]
    Pool(String),
    /// A worker setting that cannot work (checked by [`crate::WorkerBuilder::build`] before any
    /// connection is made, as docs/writing-workers.md asks), or an unusable value passed in.
    #[error("invalid setting {name}: {reason}")]
    Config {
        /// The setting, as the builder names it (`owner`, `lease`, ...).
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// The SQLSTATE of a database variant (`"55000"`), or `None` for the others.
    pub fn code(&self) -> Option<&str> {
        self.server().map(|e| e.code.as_str())
    }

    /// The server's message, DETAIL and HINT of a database variant, or `None` for the others.
    pub fn server(&self) -> Option<&ServerError> {
        match self {
            Error::NullArgument(e, _)
            | Error::InvalidArgument(e, _)
            | Error::ReadOnly(e, _)
            | Error::NoTransaction(e, _)
            | Error::SerializationFailure(e, _)
            | Error::NotPermitted(e, _)
            | Error::UndefinedObject(e, _)
            | Error::UnknownParent(e, _)
            | Error::LeaseLost(e, _)
            | Error::Cancelled(e, _)
            | Error::Database(e, _) => Some(e),
            Error::Connection(_) | Error::Pool(_) | Error::Config { .. } => None,
        }
    }

    /// Whether retrying (after a pause, on a new connection where the old one broke) can fix
    /// this error: a connection error without a SQLSTATE ([`Error::Connection`], [`Error::Pool`]),
    /// the connection class `08`, `57P01`/`57P02`/`57P03` (admin shutdown, crash shutdown, not
    /// yet accepting connections), `57014` (a statement cancelled), `40001` and `40P01`
    /// (serialization failure, deadlock), `25006` (a read-only standby not yet promoted, during
    /// a failover) and the resources class `53`. The runner reconnects and goes on after these;
    /// any other error ends [`crate::Worker::run`]. The same list as the Python library's.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connection(_) | Error::Pool(_) => true,
            Error::Config { .. } => false,
            _ => self.code().is_some_and(|code| {
                code.starts_with("08")
                    || code.starts_with("53")
                    || matches!(
                        code,
                        "57P01" | "57P02" | "57P03" | "57014" | "40001" | "40P01" | "25006"
                    )
            }),
        }
    }

    /// Whether the connection that raised this error is no use any more (closed, the server
    /// going away, or a standby that a new connection may not reach): no SQLSTATE, class `08`,
    /// `57P0x`, `25006`.
    pub(crate) fn needs_new_connection(&self) -> bool {
        match self {
            Error::Connection(_) | Error::Pool(_) => true,
            _ => self.code().is_some_and(|code| {
                code.starts_with("08") || code.starts_with("57P0") || code == "25006"
            }),
        }
    }

    /// Whether this is [`Error::LeaseLost`]: the token is no longer current.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost(..))
    }

    /// The variant for a server error with this SQLSTATE (the table of clients/README.md).
    pub(crate) fn from_server(server: ServerError, source: Option<tokio_postgres::Error>) -> Self {
        let make = match server.code.as_str() {
            "22004" => Error::NullArgument,
            "22023" => Error::InvalidArgument,
            "25006" => Error::ReadOnly,
            "25P01" => Error::NoTransaction,
            "40001" => Error::SerializationFailure,
            "42501" => Error::NotPermitted,
            "42704" => Error::UndefinedObject,
            "23503" => Error::UnknownParent,
            "55000" => Error::LeaseLost,
            "57014" => Error::Cancelled,
            _ => Error::Database,
        };
        make(server, source)
    }

    /// A setting error.
    pub(crate) fn config(name: &'static str, reason: impl Into<String>) -> Self {
        Error::Config {
            name,
            reason: reason.into(),
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    /// A server error becomes its SQLSTATE's variant; anything else is [`Error::Connection`].
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error().map(ServerError::from_db) {
            Some(server) => Error::from_server(server, Some(e)),
            None => Error::Connection(e),
        }
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    /// A failed connect while taking from the pool is [`Error::Connection`] (or the server's
    /// error, e.g. 28P01); any other pool failure is [`Error::Pool`].
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Error::from(e),
            other => Error::Pool(other.to_string()),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> ServerError {
        ServerError {
            code: code.to_owned(),
            message: "m".to_owned(),
            detail: Some("d".to_owned()),
            hint: None,
        }
    }

    #[test]
    fn every_sqlstate_of_the_spec_has_its_variant() {
        type IsVariant = fn(&Error) -> bool;
        let cases: [(&str, IsVariant); 11] = [
            ("22004", |e| matches!(e, Error::NullArgument(..))),
            ("22023", |e| matches!(e, Error::InvalidArgument(..))),
            ("25006", |e| matches!(e, Error::ReadOnly(..))),
            ("25P01", |e| matches!(e, Error::NoTransaction(..))),
            ("40001", |e| matches!(e, Error::SerializationFailure(..))),
            ("42501", |e| matches!(e, Error::NotPermitted(..))),
            ("42704", |e| matches!(e, Error::UndefinedObject(..))),
            ("23503", |e| matches!(e, Error::UnknownParent(..))),
            ("55000", |e| matches!(e, Error::LeaseLost(..))),
            ("57014", |e| matches!(e, Error::Cancelled(..))),
            ("42883", |e| matches!(e, Error::Database(..))),
        ];
        for (code, is_variant) in cases {
            let e = Error::from_server(server(code), None);
            assert!(is_variant(&e), "{code} became {e:?}");
            assert_eq!(e.code(), Some(code));
            assert_eq!(e.server().and_then(|s| s.detail.as_deref()), Some("d"));
        }
    }

    #[test]
    fn display_keeps_message_detail_and_hint() {
        let e = Error::from_server(
            ServerError {
                code: "22023".to_owned(),
                message: "invalid owner".to_owned(),
                detail: Some("owner is empty".to_owned()),
                hint: Some("pass a name".to_owned()),
            },
            None,
        );
        assert_eq!(
            e.to_string(),
            "invalid argument: invalid owner (SQLSTATE 22023); detail: owner is empty; hint: pass a name"
        );
    }

    #[test]
    fn transient_errors_are_the_ones_retrying_can_fix() {
        for code in [
            "08006", "08001", "57P01", "57P02", "57P03", "57014", "40001", "40P01", "25006",
            "53300", "53100",
        ] {
            assert!(
                Error::from_server(server(code), None).is_transient(),
                "{code}"
            );
        }
        for code in [
            "3F000", "42883", "42501", "22023", "22004", "55000", "XX000", "28000",
        ] {
            assert!(
                !Error::from_server(server(code), None).is_transient(),
                "{code}"
            );
        }
        assert!(Error::Pool("timed out".to_owned()).is_transient());
        assert!(!Error::config("lease", "zero").is_transient());
        assert!(Error::from_server(server("57P01"), None).needs_new_connection());
        assert!(Error::from_server(server("25006"), None).needs_new_connection());
        assert!(!Error::from_server(server("40P01"), None).needs_new_connection());
    }

    #[test]
    fn a_made_up_lease_lost_is_55000() {
        let e = Error::LeaseLost(ServerError::lease_lost("work_finish returned false"), None);
        assert!(e.is_lease_lost());
        assert_eq!(e.code(), Some("55000"));
        assert_eq!(Error::config("lease", "zero").code(), None);
    }
}
