//! The extension's one error type, and its mapping onto SQLSTATEs.
//!
//! Errors a user can cause carry a specific SQLSTATE, a message naming the
//! argument, a detail with the offending value and a hint. They are raised
//! with `ereport` at the `#[pg_extern]` boundary ([`WorkfenceError::report`]),
//! never by panicking (a panic surfaces as XX000, internal_error).

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::spi::SpiError;

/// Why a token is not honoured; the `detail` of a [`WorkfenceError::LeaseLost`].
///
/// The names are the values `work_lease_status` reports, except
/// [`LeaseStatus::Released`], which it reports as `superseded` (the contract
/// fixes six names); `work_assert`'s message and DETAIL keep the finer reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// No item has this id.
    Missing,
    /// The item was claimed again: its epoch is newer than the token's.
    Superseded,
    /// The token is the newest, but its owner string differs.
    WrongOwner,
    /// The item is done or failed.
    Finished,
    /// The item was cancelled.
    Cancelled,
    /// The token's lease was handed back (released, or failed for a retry).
    Released,
}

impl LeaseStatus {
    /// The lower-case name used in messages and by `work_lease_status`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Missing => "missing",
            LeaseStatus::Superseded => "superseded",
            LeaseStatus::WrongOwner => "wrong_owner",
            LeaseStatus::Finished => "finished",
            LeaseStatus::Cancelled => "cancelled",
            LeaseStatus::Released => "released",
        }
    }
}

/// Every error the extension raises on purpose.
#[derive(Debug, thiserror::Error)]
pub enum WorkfenceError {
    /// A required argument was NULL. SQLSTATE 22004 (null_value_not_allowed).
    #[error("argument \"{arg}\" must not be NULL")]
    NullArgument {
        /// The SQL name of the argument.
        arg: &'static str,
    },

    /// An argument had a value outside its documented domain. SQLSTATE 22023
    /// (invalid_parameter_value).
    #[error("argument \"{arg}\" {problem}")]
    InvalidArgument {
        /// The SQL name of the argument.
        arg: &'static str,
        /// What is wrong, completing "argument "x" ...".
        problem: String,
        /// The offending value (or its size), for the DETAIL line.
        detail: String,
        /// What to do instead, for the HINT line.
        hint: &'static str,
    },

    /// `work_assert` found that the caller does not hold the item's current
    /// lease. SQLSTATE 55000 (object_not_in_prerequisite_state): the work
    /// this transaction did under the token must not commit.
    /// `at_commit`: found by the re-check at commit that follows a rolled-back
    /// savepoint (see `crate::xact`), which aborts the commit.
    #[error(
        "lease lost{}: item {id} is not claimed under owner {owner:?} and epoch {epoch} ({})",
        if *at_commit { " before commit" } else { "" },
        status.as_str()
    )]
    LeaseLost {
        /// The item id the caller named.
        id: i64,
        /// The owner the caller named.
        owner: String,
        /// The epoch the caller named.
        epoch: i64,
        /// Why the token is not honoured.
        status: LeaseStatus,
        /// Raised by the re-check at commit rather than by `work_assert`.
        at_commit: bool,
    },

    /// `work_claim` was asked to wait in a transaction whose snapshot is
    /// fixed (REPEATABLE READ or SERIALIZABLE): no attempt could ever see an
    /// item enqueued after the transaction's first statement. SQLSTATE 25000
    /// (invalid_transaction_state).
    #[error("work_claim cannot wait (\"wait\" > 0) under REPEATABLE READ or SERIALIZABLE")]
    WaitNeedsFreshSnapshots,

    /// A (queue, key) kept conflicting on insert and vanishing before it
    /// could be read (deleted concurrently, three times running). SQLSTATE
    /// 40001 (serialization_failure): retrying the transaction is safe.
    #[error("item ({queue:?}, {key:?}) changed concurrently while being enqueued")]
    KeyChurn {
        /// The queue.
        queue: String,
        /// The key.
        key: String,
    },

    /// A required array argument held a NULL element. SQLSTATE 22004.
    #[error("argument \"{arg}\" must not contain NULL elements")]
    NullElement {
        /// The SQL name of the argument.
        arg: &'static str,
    },

    /// A column that is NOT NULL by the table's constraints read as NULL: a
    /// bug in the extension, reported as XX000.
    #[error("pg_workfence internal error: column {column} of a claimed item is NULL")]
    UnexpectedNull {
        /// The column.
        column: &'static str,
    },

    /// SPI failed: a bug in the extension, reported as XX000.
    #[error("pg_workfence internal SPI error: {0}")]
    Spi(#[from] SpiError),
}

impl WorkfenceError {
    /// Shorthand for [`WorkfenceError::InvalidArgument`].
    pub fn invalid(
        arg: &'static str,
        problem: impl Into<String>,
        detail: impl Into<String>,
        hint: &'static str,
    ) -> Self {
        WorkfenceError::InvalidArgument {
            arg,
            problem: problem.into(),
            detail: detail.into(),
            hint,
        }
    }

    /// The SQLSTATE this error is raised with.
    pub fn sqlstate(&self) -> PgSqlErrorCode {
        match self {
            WorkfenceError::NullArgument { .. } | WorkfenceError::NullElement { .. } => {
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED
            }
            WorkfenceError::KeyChurn { .. } => PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            WorkfenceError::InvalidArgument { .. } => {
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
            }
            WorkfenceError::LeaseLost { .. } => {
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            WorkfenceError::WaitNeedsFreshSnapshots => {
                PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE
            }
            WorkfenceError::Spi(_) | WorkfenceError::UnexpectedNull { .. } => {
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR
            }
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            WorkfenceError::NullArgument { .. } | WorkfenceError::NullElement { .. } => None,
            WorkfenceError::KeyChurn { .. } => {
                Some("The existing item was deleted while this enqueue ran.".to_string())
            }
            WorkfenceError::InvalidArgument { detail, .. } => Some(detail.clone()),
            WorkfenceError::WaitNeedsFreshSnapshots => Some(
                "The transaction's snapshot was taken at its first statement, so a waiting claim \
                 would never see an item enqueued after it."
                    .to_string(),
            ),
            WorkfenceError::LeaseLost {
                status,
                at_commit: true,
                ..
            } => Some(format!(
                "A savepoint or exception block that held work_assert's row lock rolled back, and \
                 the token is no longer current ({}); the transaction is rolled back.",
                status.as_str()
            )),
            WorkfenceError::LeaseLost { status, .. } => Some(match status {
                LeaseStatus::Missing => "No item has this id.".to_string(),
                LeaseStatus::Superseded => {
                    "The item was claimed again since: a newer epoch holds it.".to_string()
                }
                LeaseStatus::WrongOwner => {
                    "The epoch is current but was claimed under another owner.".to_string()
                }
                LeaseStatus::Finished => "The item is already done or failed.".to_string(),
                LeaseStatus::Cancelled => "The item was cancelled.".to_string(),
                LeaseStatus::Released => {
                    "The lease was handed back (work_release or work_fail).".to_string()
                }
            }),
            WorkfenceError::Spi(_) | WorkfenceError::UnexpectedNull { .. } => None,
        }
    }

    fn hint(&self) -> Option<&'static str> {
        match self {
            WorkfenceError::NullArgument { .. } => {
                Some("Pass a value, or leave an argument that has a default out of the call.")
            }
            WorkfenceError::NullElement { .. } => Some("Remove the NULL elements from the array."),
            WorkfenceError::KeyChurn { .. } => Some("Retry the transaction."),
            WorkfenceError::InvalidArgument { hint, .. } => Some(hint),
            WorkfenceError::WaitNeedsFreshSnapshots => Some(
                "Long-poll in READ COMMITTED (the default isolation level), or pass wait => '0'.",
            ),
            WorkfenceError::LeaseLost { .. } => Some(
                "Roll back: another worker may hold the item now. Stop the job; do not retry it under this token.",
            ),
            WorkfenceError::Spi(_) | WorkfenceError::UnexpectedNull { .. } => {
                Some("This is a bug in pg_workfence; please report it.")
            }
        }
    }

    /// Raise this error with `ereport(ERROR, ...)`. Does not return.
    pub fn report(self) -> ! {
        let mut report = ErrorReport::new(self.sqlstate(), self.to_string(), "pg_workfence");
        if let Some(detail) = self.detail() {
            report = report.set_detail(detail);
        }
        if let Some(hint) = self.hint() {
            report = report.set_hint(hint);
        }
        report.report(PgLogLevel::ERROR);
        unreachable!("ereport(ERROR) returned")
    }
}

/// Result alias for the extension's fallible internals.
pub type Result<T> = std::result::Result<T, WorkfenceError>;

/// Unwrap at the `#[pg_extern]` boundary: raise the error as its SQLSTATE.
pub trait OrReport<T> {
    /// The value, or `ereport(ERROR)` with the error's SQLSTATE.
    fn or_report(self) -> T;
}

impl<T> OrReport<T> for Result<T> {
    fn or_report(self) -> T {
        self.unwrap_or_else(|e| e.report())
    }
}
