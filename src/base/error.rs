//! The extension's one error type, and its mapping onto SQLSTATEs.
//!
//! Errors a user can cause carry a specific SQLSTATE, a message naming the
//! argument, a detail with the offending value and a hint. They are raised
//! with `ereport` at the `#[pg_extern]` boundary ([`WorkfenceError::report`]),
//! never by panicking (a panic surfaces as XX000, internal_error).

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::spi::SpiError;

use crate::base::types::{Capability, IntervalParts};

/// Why a token is not honoured; the `detail` of a [`WorkfenceError::LeaseLost`].
///
/// The names are the values `work_lease_status` reports, except
/// [`LeaseStatus::Released`] and [`LeaseStatus::RolledBack`], which it
/// reports as `superseded` (the item does not carry the epoch and never
/// will); `work_assert`'s message, DETAIL and HINT keep the finer reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// No item has this id, or (queue grants enforced) none in a queue the
    /// role may claim: the two are told apart to nobody.
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
    /// The epoch is newer than the item's committed one, and a transaction
    /// that is still running is changing the item: a claim that handed out
    /// the epoch and has not committed yet (see `work_lease_status`).
    Uncommitted,
    /// The epoch is newer than the item's committed one and nobody is
    /// changing the item: the claim that handed it out rolled back (or the
    /// epoch is another item's). Reported as `superseded`.
    RolledBack,
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
            LeaseStatus::Uncommitted => "uncommitted",
            LeaseStatus::RolledBack => "rolled_back",
        }
    }

    /// The DETAIL of `work_assert`'s 55000: what happened to the token.
    pub fn detail(self) -> &'static str {
        match self {
            LeaseStatus::Missing => {
                "No item has this id (where queue grants are enforced: none in a queue this role \
                 may claim)."
            }
            LeaseStatus::Superseded => "The item was claimed again since: a newer epoch holds it.",
            LeaseStatus::WrongOwner => "The epoch is current but was claimed under another owner.",
            LeaseStatus::Finished => "The item is already done or failed.",
            LeaseStatus::Cancelled => "The item was cancelled.",
            LeaseStatus::Released => {
                "The lease was handed back (work_release or work_fail), or the item was retried \
                 (work_retry)."
            }
            LeaseStatus::Uncommitted => {
                "The epoch was handed out by a claim whose transaction has not committed yet; \
                 other transactions do not see the claim until it does."
            }
            LeaseStatus::RolledBack => {
                "The epoch is newer than the item's, and no transaction is changing the item: the \
                 claim that handed it out rolled back (or the epoch is another item's)."
            }
        }
    }

    /// The HINT of `work_assert`'s 55000: what the worker should do now.
    pub fn hint(self) -> &'static str {
        match self {
            LeaseStatus::Missing => {
                "Check the id: no item has it (never enqueued in this database, or purged), or \
                 the role's claim grant does not cover its queue (revoked while the job ran). \
                 Roll back the job's writes."
            }
            LeaseStatus::Superseded => {
                "Roll back: a newer epoch holds the item now, and only it may act on the item. Stop \
                 the job; do not retry it under this token."
            }
            LeaseStatus::WrongOwner => {
                "Pass the owner the claim was made with, byte for byte (spaces and case count); \
                 roll back if this worker did not make that claim."
            }
            LeaseStatus::Finished => {
                "Roll back: the item is finished; there is nothing left to do under this token."
            }
            LeaseStatus::Cancelled => {
                "Roll back and stop the job: the item was withdrawn with work_cancel; an operator's \
                 work_retry would put it back under a new epoch, never this one."
            }
            LeaseStatus::Released => {
                "Roll back: this token handed the item back, and the next claim takes it under a \
                 new epoch. Stop the job under this token."
            }
            LeaseStatus::Uncommitted => {
                "Commit the transaction that called work_claim before using the token from \
                 another connection (a heartbeat, a second worker connection)."
            }
            LeaseStatus::RolledBack => {
                "Roll back: the claim never took effect. Claim the item again to work on it."
            }
        }
    }
}

/// A DETAIL line that may show intervals. Intervals are printed when the
/// error is raised, by the server's own `interval_out` (as a query result
/// shows them, in the session's `IntervalStyle`: `8 days`, `00:00:00`), not
/// as a count of microseconds; building one needs no server, so the checks
/// in `crate::access::validate` stay testable without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail(Vec<Piece>);

/// One piece of a [`Detail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text, as is.
    Text(String),
    /// An interval, printed by `interval_out` and quoted as a literal
    /// (`'8 days'`).
    Interval(IntervalParts),
}

impl Detail {
    /// A detail made of `pieces`, in order.
    pub fn of(pieces: impl IntoIterator<Item = Piece>) -> Detail {
        Detail(pieces.into_iter().collect())
    }

    /// The text, intervals printed by the server (call inside a backend).
    pub fn render(&self) -> String {
        self.0
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Interval(parts) => format!("'{}'", interval_text(*parts)),
            })
            .collect()
    }
}

impl From<String> for Detail {
    fn from(text: String) -> Detail {
        Detail(vec![Piece::Text(text)])
    }
}

impl From<&str> for Detail {
    fn from(text: &str) -> Detail {
        Detail(vec![Piece::Text(text.to_string())])
    }
}

impl From<&str> for Piece {
    fn from(text: &str) -> Piece {
        Piece::Text(text.to_string())
    }
}

impl From<IntervalParts> for Piece {
    fn from(parts: IntervalParts) -> Piece {
        Piece::Interval(parts)
    }
}

/// `parts` as PostgreSQL prints an interval (`interval_out`, the session's
/// `IntervalStyle`). Built by hand rather than with
/// [`pgrx::datum::Interval::new`], which refuses fields of mixed signs
/// (`'1 mon -29 days'`, which a DETAIL must be able to show).
fn interval_text(parts: IntervalParts) -> String {
    let value = pg_sys::Interval {
        time: parts.micros,
        day: parts.days,
        month: parts.months,
    };
    // SAFETY: interval_out reads the Interval through the pointer, which
    // outlives the call, and returns a palloc'd C string (freed with the
    // memory context), copied out here.
    unsafe {
        let text: Option<&std::ffi::CStr> = pgrx::direct_function_call(
            pg_sys::interval_out,
            &[Some(pg_sys::Datum::from(std::ptr::addr_of!(value)))],
        );
        text.map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// The five-character SQLSTATE of `code` (`"55P03"`): PostgreSQL's
/// MAKE_SQLSTATE packing, six bits per character, first character lowest.
/// For messages that name a caught error's SQLSTATE (the maintenance
/// worker's WARNINGs, a schedule passed over).
pub fn sqlstate_text(code: PgSqlErrorCode) -> String {
    let packed = code as i32;
    (0..5)
        .map(|i| char::from(((packed >> (6 * i)) & 0x3F) as u8 + b'0'))
        .collect()
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
        detail: Detail,
        /// What to do instead, for the HINT line.
        hint: &'static str,
    },

    /// `work_assert` found that the caller does not hold the item's current
    /// lease. SQLSTATE 55000 (object_not_in_prerequisite_state): the work
    /// this transaction did under the token must not commit.
    /// `at_commit`: found by the re-check at commit that follows a rolled-back
    /// savepoint (see `crate::backend::xact`), which aborts the commit.
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

    /// `work_assert` was called outside a transaction block (an autocommit
    /// statement): its row lock would end with the statement, fencing
    /// nothing. SQLSTATE 25P01 (no_active_sql_transaction), as `LOCK TABLE`
    /// raises it. Raised only for a token that is current; a token that is
    /// not gets [`WorkfenceError::LeaseLost`] wherever it is called.
    #[error("work_assert can only be used in transaction blocks")]
    AssertOutsideTransaction,

    /// `work_claim` was asked to wait in a transaction whose snapshot is
    /// fixed (REPEATABLE READ or SERIALIZABLE): no attempt could ever see an
    /// item enqueued after the transaction's first statement. SQLSTATE 25000
    /// (invalid_transaction_state).
    #[error("work_claim cannot wait (\"wait\" > 0) under REPEATABLE READ or SERIALIZABLE")]
    WaitNeedsFreshSnapshots,

    /// `work_await` was asked to wait in a transaction whose snapshot is
    /// fixed (REPEATABLE READ or SERIALIZABLE): no look could see the
    /// settle it waits for. SQLSTATE 25000 (invalid_transaction_state).
    #[error("work_await cannot wait (\"wait\" > 0) under REPEATABLE READ or SERIALIZABLE")]
    AwaitNeedsFreshSnapshots,

    /// A claim of a queue with serial groups or a limit (from 0.10.0) in a
    /// transaction whose snapshot is fixed (REPEATABLE READ or
    /// SERIALIZABLE): it could not see the claims other transactions
    /// committed since, so it could not keep a group serial or a limit.
    /// SQLSTATE 25000 (invalid_transaction_state).
    #[error("queue {queue:?} has serial groups or limits: claim it under READ COMMITTED")]
    FlowNeedsReadCommitted {
        /// The queue.
        queue: String,
    },

    /// `work_cancel` or `work_reschedule` (from 0.12.0) of an item in a
    /// group, in a transaction whose snapshot is fixed (REPEATABLE READ or
    /// SERIALIZABLE): the group's next head is chosen in a snapshot taken
    /// after the group's lock was granted ([`crate::verbs::flow`], group heads),
    /// which such a transaction cannot take. SQLSTATE 25000
    /// (invalid_transaction_state).
    #[error("{verb} of an item of a group of queue {queue:?} needs READ COMMITTED")]
    GroupChangeNeedsReadCommitted {
        /// The call.
        verb: &'static str,
        /// The queue.
        queue: String,
    },

    /// `PREPARE TRANSACTION` of a transaction that changed a queue's
    /// settings (from 0.12.0: `work_pause`, `work_resume`, `work_limit`, or
    /// the queue's first grouped item, which marks it grouped): they commit
    /// under the queue's pause lock, which a prepared transaction would hold
    /// until `COMMIT PREPARED`, stopping every claim of the queue meanwhile.
    /// SQLSTATE 0A000 (feature_not_supported).
    #[error(
        "the settings of queue {queue:?} change in this transaction (a pause, resume, limit or its \
         first grouped item), which cannot be prepared"
    )]
    SettingsPrepared {
        /// The queue.
        queue: String,
    },

    /// `PREPARE TRANSACTION` of a transaction that made, replaced,
    /// removed, paused or resumed a schedule (from 0.12.0): the maintenance
    /// worker learns of the change at its commit, which `COMMIT PREPARED`
    /// would not tell it. SQLSTATE 0A000 (feature_not_supported).
    #[error("a transaction that changed a schedule cannot be prepared")]
    SchedulePrepared,

    /// `PREPARE TRANSACTION` of a transaction that claimed from a queue
    /// with a limit while the database's schema is older than the library's
    /// (before `ALTER EXTENSION pg_workfence UPDATE` to 0.12.0): such a
    /// claim holds the queue's limit lock to the end of its transaction,
    /// which a prepared transaction would keep until `COMMIT PREPARED`, and
    /// every other claim of the queue would get nothing meanwhile. From
    /// 0.12.0's schema a claim holds only its own slot rows and may be
    /// prepared ([`crate::verbs::flow`]). SQLSTATE 0A000 (feature_not_supported).
    #[error(
        "this transaction claimed from queue {queue:?}, which has a limit: it cannot be prepared"
    )]
    LimitedClaimPrepared {
        /// The queue.
        queue: String,
    },

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

    /// Queue grants are enforced (`work_enforce_grants`) and the role the
    /// session runs as has no grant of `capability` covering `queue`.
    /// SQLSTATE 42501 (insufficient_privilege); nothing was changed. `queue`
    /// `None`: the call named every queue (`work_purge` without a queue).
    #[error("permission denied for queue {}", match queue { Some(q) => format!("{q:?}"), None => "\"*\" (every queue)".to_string() })]
    QueueForbidden {
        /// The capability the call needs.
        capability: Capability,
        /// The queue the call named; `None` for every queue.
        queue: Option<String>,
        /// The role checked (the session's current role).
        role: String,
    },

    /// `work_grant`, `work_revoke` or `work_enforce_grants` called by a role
    /// that is neither a superuser nor has the privileges of the owner of
    /// the extension's tables. SQLSTATE 42501 (insufficient_privilege).
    #[error("permission denied to manage queue grants")]
    NotGrantManager {
        /// The role checked (the session's current role).
        role: String,
    },

    /// A claim on a server in recovery (a hot standby), which cannot write.
    /// SQLSTATE 25006 (read_only_sql_transaction), as PostgreSQL raises for
    /// a write there, but at once and naming what to do.
    #[error("{function} cannot claim on a hot standby")]
    HotStandby {
        /// The function called.
        function: &'static str,
    },

    /// `work_grant` or `work_revoke` named a role that does not exist.
    /// SQLSTATE 42704 (undefined_object), as PostgreSQL's GRANT raises it.
    #[error("argument \"role\": role {role:?} does not exist")]
    UnknownRole {
        /// The role name as given.
        role: String,
    },

    /// `work_pause_schedule` or `work_resume_schedule` named no schedule
    /// (from 0.12.0). SQLSTATE 42704 (undefined_object).
    #[error("schedule {name:?} does not exist")]
    UnknownSchedule {
        /// The schedule name as given.
        name: String,
    },

    /// `work_enqueue`'s `after` named an item that does not exist, or one
    /// in a queue the role may not read (the error does not tell the two
    /// apart), from 0.12.0. SQLSTATE 23503 (foreign_key_violation), as a
    /// reference to a missing row is.
    #[error("parent item {id} does not exist")]
    UnknownParent {
        /// The parent id as given.
        id: i64,
    },

    /// A required array argument held a NULL element. SQLSTATE 22004; the
    /// DETAIL says which element (up to 10,000 of `work_enqueue_many`'s).
    #[error("argument \"{arg}\" must not contain NULL elements")]
    NullElement {
        /// The SQL name of the argument.
        arg: &'static str,
        /// The first NULL element's place, counted from 1 in array order.
        element: usize,
    },

    /// A column that is NOT NULL by the table's constraints read as NULL: a
    /// bug in the extension, reported as XX000.
    #[error("pg_workfence internal error: column {column} of a claimed item is NULL")]
    UnexpectedNull {
        /// The column.
        column: &'static str,
    },

    /// The plan cache found another statement's plan under a statement's
    /// key: a bug in the extension (see `crate::pg::plans`), reported as XX000.
    #[error(
        "pg_workfence internal error: the plan cache holds another statement's plan for {sql:?}"
    )]
    PlanKeyClash {
        /// The statement's SQL.
        sql: &'static str,
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
        detail: impl Into<Detail>,
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
            WorkfenceError::QueueForbidden { .. } | WorkfenceError::NotGrantManager { .. } => {
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE
            }
            WorkfenceError::UnknownRole { .. } | WorkfenceError::UnknownSchedule { .. } => {
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT
            }
            WorkfenceError::HotStandby { .. } => PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            WorkfenceError::UnknownParent { .. } => PgSqlErrorCode::ERRCODE_FOREIGN_KEY_VIOLATION,
            WorkfenceError::InvalidArgument { .. } => {
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
            }
            WorkfenceError::LeaseLost { .. } => {
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            WorkfenceError::WaitNeedsFreshSnapshots
            | WorkfenceError::AwaitNeedsFreshSnapshots
            | WorkfenceError::FlowNeedsReadCommitted { .. }
            | WorkfenceError::GroupChangeNeedsReadCommitted { .. } => {
                PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE
            }
            WorkfenceError::SettingsPrepared { .. }
            | WorkfenceError::LimitedClaimPrepared { .. }
            | WorkfenceError::SchedulePrepared => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            WorkfenceError::AssertOutsideTransaction => {
                PgSqlErrorCode::ERRCODE_NO_ACTIVE_SQL_TRANSACTION
            }
            WorkfenceError::Spi(_)
            | WorkfenceError::UnexpectedNull { .. }
            | WorkfenceError::PlanKeyClash { .. } => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            WorkfenceError::NullArgument { .. } => None,
            WorkfenceError::NullElement { arg, element } => {
                Some(format!("Element {element} of {arg} is NULL."))
            }
            WorkfenceError::KeyChurn { .. } => {
                Some("The existing item was deleted while this enqueue ran.".to_string())
            }
            WorkfenceError::InvalidArgument { detail, .. } => Some(detail.render()),
            WorkfenceError::QueueForbidden {
                capability,
                queue: Some(queue),
                role,
            } => Some(format!(
                "Queue grants are enforced in this database, and role {role:?} has no {:?} grant \
                 covering queue {queue:?} (nor has any role it is a member of).",
                capability.as_str()
            )),
            WorkfenceError::QueueForbidden {
                capability,
                queue: None,
                role,
            } => Some(format!(
                "Queue grants are enforced in this database: a call on every queue needs a {:?} \
                 grant of '*', which role {role:?} does not have.",
                capability.as_str()
            )),
            WorkfenceError::UnknownRole { .. } => None,
            WorkfenceError::UnknownParent { id } => Some(format!(
                "\"after\" names item {id}: no item has that id, or it is in a queue the role may \
                 not read. Nothing was enqueued."
            )),
            WorkfenceError::UnknownSchedule { .. } => Some(
                "Where queue grants are enforced, workfence.work_schedules lists only the schedules \
                 of queues the role may read."
                    .to_string(),
            ),
            WorkfenceError::HotStandby { .. } => Some(
                "The server is in recovery (a standby): a claim writes the item and draws an epoch."
                    .to_string(),
            ),
            WorkfenceError::NotGrantManager { role } => Some(format!(
                "Role {role:?} is neither a superuser nor a member of the role that owns the \
                 extension's tables; EXECUTE on the function is not enough."
            )),
            WorkfenceError::AssertOutsideTransaction => Some(
                "Outside BEGIN ... COMMIT the statement commits at once, which releases the item's \
                 row lock: writes made afterwards would not be fenced by the lease."
                    .to_string(),
            ),
            WorkfenceError::GroupChangeNeedsReadCommitted { .. } => Some(
                "The item has a group_key: the call then chooses the group's next item in a snapshot \
                 taken after it holds the group's lock, which a snapshot taken at the transaction's \
                 first statement is not. Nothing was changed."
                    .to_string(),
            ),
            WorkfenceError::FlowNeedsReadCommitted { .. } => Some(
                "The queue has items with a group_key, or a limit (work_limit); a claim checks them \
                 against the claims other transactions committed, which a snapshot taken at the \
                 transaction's first statement does not show."
                    .to_string(),
            ),
            WorkfenceError::LimitedClaimPrepared { .. } => Some(
                "Until ALTER EXTENSION pg_workfence UPDATE brings this database's schema to 0.12.0, \
                 claims of a queue with a limit (work_limit) take turns on the queue's limit lock, \
                 held to the end of the claiming transaction; a prepared transaction would hold it \
                 until COMMIT PREPARED, and every other claim of the queue would get nothing."
                    .to_string(),
            ),
            WorkfenceError::SchedulePrepared => Some(
                "The maintenance worker is told of a schedule's change when its transaction \
                 commits; COMMIT PREPARED runs no extension code to tell it."
                    .to_string(),
            ),
            WorkfenceError::SettingsPrepared { .. } => Some(
                "A queue's settings change at commit under the queue's pause lock; a prepared \
                 transaction would hold that lock, and so keep every claim of the queue from handing \
                 out anything, until COMMIT PREPARED."
                    .to_string(),
            ),
            WorkfenceError::AwaitNeedsFreshSnapshots => Some(
                "The transaction's snapshot was taken at its first statement, so a waiting \
                 work_await would never see the item's settle commit."
                    .to_string(),
            ),
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
            WorkfenceError::LeaseLost { status, .. } => Some(status.detail().to_string()),
            WorkfenceError::Spi(_)
            | WorkfenceError::UnexpectedNull { .. }
            | WorkfenceError::PlanKeyClash { .. } => None,
        }
    }

    fn hint(&self) -> Option<&'static str> {
        match self {
            WorkfenceError::NullArgument { .. } => {
                Some("Pass a value, or leave an argument that has a default out of the call.")
            }
            // Not "remove it": arrays passed side by side (ids and epochs,
            // payloads and keys) are matched element by element.
            WorkfenceError::NullElement { .. } => Some(
                "Give every element a value; arrays passed side by side are matched element by \
                 element.",
            ),
            WorkfenceError::KeyChurn { .. } => Some("Retry the transaction."),
            WorkfenceError::InvalidArgument { hint, .. } => Some(hint),
            WorkfenceError::QueueForbidden { queue: Some(_), .. } => Some(
                "The extension's owner grants a queue or a prefix of queues with \
                 workfence.work_grant(capability, queues, role); workfence.work_queue_grants \
                 lists the grants.",
            ),
            WorkfenceError::QueueForbidden { queue: None, .. } => {
                Some("Name the queue, or have the extension's owner grant the capability on '*'.")
            }
            WorkfenceError::UnknownRole { .. } => Some(
                "Create the role first, or check the spelling (role names are case-sensitive).",
            ),
            WorkfenceError::UnknownParent { .. } => Some(
                "Enqueue the parents first (in this transaction or an earlier one) and pass the ids \
                 work_enqueue returned; a purged item cannot be waited for.",
            ),
            WorkfenceError::UnknownSchedule { .. } => Some(
                "workfence.work_schedules lists the schedules; work_schedule makes one.",
            ),
            WorkfenceError::HotStandby { .. } => Some(
                "Claim on the primary: with libpq, list every server in the connection string and \
                 add target_session_attrs=read-write.",
            ),
            WorkfenceError::NotGrantManager { .. } => {
                Some("Run it as the extension's owner (the superuser who ran CREATE EXTENSION).")
            }
            WorkfenceError::FlowNeedsReadCommitted { .. } => Some(
                "Claim in READ COMMITTED (the default isolation level), in a transaction of its own.",
            ),
            WorkfenceError::GroupChangeNeedsReadCommitted { .. } => Some(
                "Run it in READ COMMITTED (the default isolation level).",
            ),
            WorkfenceError::LimitedClaimPrepared { .. } => Some(
                "Run ALTER EXTENSION pg_workfence UPDATE (from 0.12.0 such a claim holds only its own \
                 slot and can be prepared), or claim in a transaction of its own, committed at once, \
                 and prepare only the transaction that writes the job's effects.",
            ),
            WorkfenceError::SchedulePrepared => {
                Some("Change schedules in an ordinary transaction.")
            }
            WorkfenceError::SettingsPrepared { .. } => Some(
                "Pause, resume or limit the queue, or enqueue its first grouped item, in an ordinary \
                 transaction; later grouped enqueues of the queue can be prepared.",
            ),
            WorkfenceError::AwaitNeedsFreshSnapshots => Some(
                "Await in READ COMMITTED (the default isolation level), or pass wait => '0'.",
            ),
            WorkfenceError::WaitNeedsFreshSnapshots => Some(
                "Long-poll in READ COMMITTED (the default isolation level), or pass wait => '0'.",
            ),
            WorkfenceError::LeaseLost { status, .. } => Some(status.hint()),
            WorkfenceError::AssertOutsideTransaction => Some(
                "Call work_assert after BEGIN, in the transaction that writes the job's effects, \
                 and COMMIT after them.",
            ),
            WorkfenceError::Spi(_)
            | WorkfenceError::UnexpectedNull { .. }
            | WorkfenceError::PlanKeyClash { .. } => {
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
