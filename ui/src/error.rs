//! What can go wrong in a request, and the status and page each answers with.
//!
//! Errors a user causes (a bad id, an unknown queue, a refused action) are
//! 4xx pages with a clear message; what only the dashboard's operator can
//! fix (a database that cannot be reached, a refused login, a database that
//! does not exist, an extension older than 0.11.0) is a 503 page saying
//! what to do. The server's errors keep their SQLSTATE and message, which
//! the page shows in `<p id="error">`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio_postgres::error::SqlState;

use crate::pages;

/// An error the dashboard answers a request with.
#[derive(Debug)]
pub enum AppError {
    /// A status with a message of ours (bad input, unknown queue, ...).
    Status {
        /// The HTTP status (4xx, or 503).
        status: StatusCode,
        /// The page's heading.
        title: &'static str,
        /// What went wrong and what to do.
        message: String,
    },
    /// Basic auth is configured and the request did not carry the credentials.
    Unauthorized,
    /// An error the database server raised.
    Database {
        /// The HTTP status chosen from the SQLSTATE ([`status_of_sqlstate`]).
        status: StatusCode,
        /// The SQLSTATE, e.g. `42501`.
        code: String,
        /// The server's message.
        message: String,
        /// The server's DETAIL, if any.
        detail: Option<String>,
        /// The server's HINT, if any.
        hint: Option<String>,
    },
}

impl AppError {
    /// 400: the request's input is malformed.
    pub fn bad_request(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::BAD_REQUEST,
            title: "Bad request",
            message: message.into(),
        }
    }

    /// 404: what the request names does not exist.
    pub fn not_found(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::NOT_FOUND,
            title: "Not found",
            message: message.into(),
        }
    }

    /// 403: the request is refused (cross-site, no valid form token, ...).
    pub fn forbidden(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::FORBIDDEN,
            title: "Forbidden",
            message: message.into(),
        }
    }

    /// 409: the action was allowed and changed nothing (the function returned false).
    pub fn conflict(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::CONFLICT,
            title: "Nothing changed",
            message: message.into(),
        }
    }

    /// 503: the database cannot be reached or did not answer in time.
    pub fn unavailable(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::SERVICE_UNAVAILABLE,
            title: "Database unavailable",
            message: message.into(),
        }
    }

    /// 500: the database answered what the dashboard cannot show (a row that breaks the
    /// promise of the view it came from); a bug, of the extension or of the dashboard.
    pub fn internal(message: impl Into<String>) -> AppError {
        AppError::Status {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: "Internal error",
            message: message.into(),
        }
    }

    /// The SQLSTATE, when the database server raised this error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            AppError::Database { code, .. } => Some(code),
            _ => None,
        }
    }

    /// This error with `advice` in place of the advice its SQLSTATE's
    /// ([`advice_of_sqlstate`], added to the message), for a call that knows
    /// better what the SQLSTATE means there (a `per_group` that a 0.11.0
    /// database's `work_limit` does not take is a 42883 too). Any other error
    /// is returned as it is.
    pub fn with_advice(self, advice: &str) -> AppError {
        match self {
            AppError::Database {
                status,
                code,
                message,
                detail,
                hint,
            } => {
                let general = advice_of_sqlstate(&code).map(|a| format!(" ({a})"));
                let bare = match general {
                    Some(general) => message
                        .strip_suffix(general.as_str())
                        .unwrap_or(&message)
                        .to_owned(),
                    None => message,
                };
                AppError::Database {
                    status,
                    message: format!("{bare} ({advice})"),
                    code,
                    detail,
                    hint,
                }
            }
            other => other,
        }
    }

    /// This error with the HTTP status `status`, when the database server raised it, for a
    /// call that knows what its SQLSTATE means there (no schedule of the name a schedule call
    /// was given is a 42704: a 404, where an undefined object is otherwise a 500). Any other
    /// error is returned as it is.
    pub fn with_status(self, status: StatusCode) -> AppError {
        match self {
            AppError::Database {
                code,
                message,
                detail,
                hint,
                ..
            } => AppError::Database {
                status,
                code,
                message,
                detail,
                hint,
            },
            other => other,
        }
    }

    /// This error as met while connecting as `who` (a role and database in
    /// words): a refused login or a missing database says who could not
    /// connect (503); any other error is returned as it is.
    pub fn connecting(self, who: &str) -> AppError {
        match self {
            AppError::Database {
                code,
                message,
                detail,
                hint,
                ..
            } if is_login_refusal(&code) => AppError::Database {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: format!("cannot connect as {who}: {message}"),
                code,
                detail,
                hint,
            },
            other => other,
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::Status { status, .. } | AppError::Database { status, .. } => *status,
            AppError::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }
}

/// The HTTP status for a server error of SQLSTATE `code`: 403 for 42501
/// (insufficient privilege), 400 for data exceptions (class 22) and other
/// bad arguments, 409 for states that forbid the action (a read-only
/// standby, 55000, serialization failures), 503 for what the dashboard's
/// operator must fix rather than its user (a refused login, class 28; a
/// database that does not exist, 3D000; an extension older than the
/// dashboard needs, 42883, or not installed, 3F000), for connection
/// trouble, shutdowns, resource exhaustion and the statement timeout; 500
/// otherwise.
pub fn status_of_sqlstate(code: &str) -> StatusCode {
    match code {
        "42501" => StatusCode::FORBIDDEN,
        "42883" | "3F000" | "3D000" => StatusCode::SERVICE_UNAVAILABLE,
        "42704" | "42P01" => StatusCode::INTERNAL_SERVER_ERROR,
        "25006" | "55000" | "55P03" | "40001" | "40P01" => StatusCode::CONFLICT,
        "57014" => StatusCode::SERVICE_UNAVAILABLE,
        _ if code.starts_with("22") => StatusCode::BAD_REQUEST,
        _ if code.starts_with("08")
            || code.starts_with("28")
            || code.starts_with("53")
            || code.starts_with("57P")
            || code.starts_with("58") =>
        {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What the dashboard's operator should do about a server error of
/// SQLSTATE `code`, when the server's own message does not say: an
/// extension too old (42883: a function the dashboard calls does not exist)
/// or not installed (3F000: no schema `workfence`), a statement that ran
/// out of time (57014).
pub fn advice_of_sqlstate(code: &str) -> Option<&'static str> {
    match code {
        "42883" => Some(
            "this dashboard needs pg_workfence 0.11.0 or later in this database: update the \
             extension (ALTER EXTENSION pg_workfence UPDATE) and load the page again",
        ),
        "3F000" => Some(
            "pg_workfence is not installed in this database (CREATE EXTENSION pg_workfence), \
             or the dashboard connects to the wrong database",
        ),
        "57014" => Some("the dashboard's statement timeout is 5 s"),
        _ => None,
    }
}

/// Whether SQLSTATE `code` is a connection refused at login: the password
/// or the authorization (class 28), or a database that does not exist (3D000).
pub fn is_login_refusal(code: &str) -> bool {
    code.starts_with("28") || code == "3D000"
}

impl From<tokio_postgres::Error> for AppError {
    fn from(err: tokio_postgres::Error) -> AppError {
        AppError::from_postgres(&err)
    }
}

impl AppError {
    /// [`AppError::Database`] for an error the server raised, else 503.
    fn from_postgres(err: &tokio_postgres::Error) -> AppError {
        if let Some(db) = err.as_db_error() {
            return AppError::from_server(db.code().code(), db.message(), db.detail(), db.hint());
        }
        // No server error: the connection broke or could not be made.
        AppError::unavailable(format!("the database connection failed: {}", chain(err)))
    }

    /// [`AppError::Database`] for an error the server raised with SQLSTATE `code`: the status
    /// from the SQLSTATE, its advice added to the message.
    fn from_server(
        code: &str,
        message: &str,
        detail: Option<&str>,
        hint: Option<&str>,
    ) -> AppError {
        let message = match advice_of_sqlstate(code) {
            Some(advice) => format!("{message} ({advice})"),
            None => message.to_owned(),
        };
        AppError::Database {
            status: status_of_sqlstate(code),
            code: code.to_owned(),
            message,
            detail: detail.map(str::to_owned),
            // 42883's hint (explicit casts) misleads here: the advice says what to do.
            hint: hint
                .filter(|_| code != SqlState::UNDEFINED_FUNCTION.code())
                .map(str::to_owned),
        }
    }
}

impl From<workfence::Error> for AppError {
    /// An error of the `workfence` client library's calls: the server's error as the dashboard
    /// shows any other (status, advice), a broken connection as 503.
    fn from(err: workfence::Error) -> AppError {
        use std::error::Error as _;
        if let Some(pg) = err
            .source()
            .and_then(|source| source.downcast_ref::<tokio_postgres::Error>())
        {
            return AppError::from_postgres(pg);
        }
        match err.server() {
            Some(server) => AppError::from_server(
                &server.code,
                &server.message,
                server.detail.as_deref(),
                server.hint.as_deref(),
            ),
            None => AppError::unavailable(format!("the database call failed: {}", chain(&err))),
        }
    }
}

impl From<deadpool_postgres::PoolError> for AppError {
    fn from(err: deadpool_postgres::PoolError) -> AppError {
        match err {
            deadpool_postgres::PoolError::Backend(e) => AppError::from(e),
            other => AppError::unavailable(format!(
                "no database connection could be had: {}",
                chain(&other)
            )),
        }
    }
}

/// An error's message followed by its sources' (a tokio-postgres error's own
/// text is often just "db error" or "error connecting to server").
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let page = match &self {
            AppError::Status { title, message, .. } => pages::error_page(title, None, message, &[]),
            AppError::Unauthorized => pages::error_page(
                "Authentication required",
                None,
                "This dashboard asks for a user name and password (HTTP basic auth).",
                &[],
            ),
            AppError::Database {
                code,
                message,
                detail,
                hint,
                ..
            } => {
                let mut extra = Vec::new();
                if let Some(d) = detail {
                    extra.push(("DETAIL", d.as_str()));
                }
                if let Some(h) = hint {
                    extra.push(("HINT", h.as_str()));
                }
                let title = match code.as_str() {
                    "42883" => "The extension needs updating",
                    "3F000" => "The extension is not installed",
                    _ if status == StatusCode::SERVICE_UNAVAILABLE => "Database unavailable",
                    _ => "The database refused",
                };
                pages::error_page(title, Some(code), message, &extra)
            }
        };
        let mut response = (status, page).into_response();
        if matches!(self, AppError::Unauthorized) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"workfence-ui\", charset=\"UTF-8\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_statuses() {
        assert_eq!(status_of_sqlstate("42501"), StatusCode::FORBIDDEN);
        assert_eq!(status_of_sqlstate("22023"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of_sqlstate("22004"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of_sqlstate("25006"), StatusCode::CONFLICT);
        assert_eq!(status_of_sqlstate("08006"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status_of_sqlstate("57P01"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status_of_sqlstate("57014"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            status_of_sqlstate("XX000"),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn what_the_operator_must_fix_is_a_503_never_a_500() {
        // A refused login, a missing database, an extension too old or absent.
        for code in ["28P01", "28000", "3D000", "42883", "3F000"] {
            assert_eq!(
                status_of_sqlstate(code),
                StatusCode::SERVICE_UNAVAILABLE,
                "{code}"
            );
        }
        assert!(is_login_refusal("28P01") && is_login_refusal("28000"));
        assert!(is_login_refusal("3D000"));
        assert!(!is_login_refusal("42883") && !is_login_refusal("08006"));
        let update = advice_of_sqlstate("42883").unwrap();
        assert!(update.contains("0.11.0"), "{update}");
        assert!(update.contains("ALTER EXTENSION pg_workfence UPDATE"));
        assert!(advice_of_sqlstate("3F000")
            .unwrap()
            .contains("CREATE EXTENSION"));
        assert_eq!(advice_of_sqlstate("42501"), None);
    }

    fn database(code: &str, message: &str) -> AppError {
        AppError::Database {
            status: status_of_sqlstate(code),
            code: code.into(),
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    #[test]
    fn a_calls_own_advice_replaces_the_sqlstates() {
        let general = advice_of_sqlstate("42883").unwrap();
        let err = database(
            "42883",
            &format!("function workfence.work_limit(...) does not exist ({general})"),
        )
        .with_advice("per_group needs 0.12.0");
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        let AppError::Database { message, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            message,
            "function workfence.work_limit(...) does not exist (per_group needs 0.12.0)"
        );
        let err = database("22023", "bad").with_advice("x");
        let AppError::Database { message, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(message, "bad (x)");
        assert_eq!(
            AppError::bad_request("b").with_advice("x").status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn a_calls_own_status_replaces_the_sqlstates() {
        let err = database("42704", "no schedule named \"x\"").with_status(StatusCode::NOT_FOUND);
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
        assert_eq!(err.sqlstate(), Some("42704"));
        assert_eq!(
            AppError::bad_request("b")
                .with_status(StatusCode::NOT_FOUND)
                .status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn a_refused_login_says_who_could_not_connect() {
        let who = "role \"alice\" to database \"app\"";
        let err =
            database("28P01", "password authentication failed for user \"alice\"").connecting(who);
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(err.sqlstate(), Some("28P01"));
        let AppError::Database { message, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(
            message.starts_with("cannot connect as role \"alice\" to database \"app\": password"),
            "{message}"
        );
        let err = database("3D000", "database \"app\" does not exist").connecting(who);
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Errors of a statement are left as they are.
        let err = database("42501", "permission denied").connecting(who);
        assert_eq!(err.status(), StatusCode::FORBIDDEN);
        let AppError::Database { message, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(message, "permission denied");
    }
}
