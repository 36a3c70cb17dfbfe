//! What can go wrong in a request, and the status and page each answers with.
//!
//! Errors a user causes (a bad id, an unknown queue, a refused action) are
//! 4xx pages with a clear message; a database that cannot be reached is a
//! 503 page. The server's errors keep their SQLSTATE and message, which the
//! page shows in `<p id="error">`.

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
/// standby, 55000, serialization failures), 503 for connection trouble,
/// shutdowns, resource exhaustion and the statement timeout, 500 otherwise.
pub fn status_of_sqlstate(code: &str) -> StatusCode {
    match code {
        "42501" => StatusCode::FORBIDDEN,
        "42704" | "42883" | "42P01" | "3F000" => StatusCode::INTERNAL_SERVER_ERROR,
        "25006" | "55000" | "55P03" | "40001" | "40P01" => StatusCode::CONFLICT,
        "57014" => StatusCode::SERVICE_UNAVAILABLE,
        _ if code.starts_with("22") => StatusCode::BAD_REQUEST,
        _ if code.starts_with("08")
            || code.starts_with("53")
            || code.starts_with("57P")
            || code.starts_with("58") =>
        {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<tokio_postgres::Error> for AppError {
    fn from(err: tokio_postgres::Error) -> AppError {
        if let Some(db) = err.as_db_error() {
            let code = db.code().code().to_owned();
            let mut message = db.message().to_owned();
            if *db.code() == SqlState::QUERY_CANCELED {
                message.push_str(" (the dashboard's statement timeout is 5 s)");
            }
            return AppError::Database {
                status: status_of_sqlstate(&code),
                code,
                message,
                detail: db.detail().map(str::to_owned),
                hint: db.hint().map(str::to_owned),
            };
        }
        // No server error: the connection broke or could not be made.
        AppError::unavailable(format!("the database connection failed: {}", chain(&err)))
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
                pages::error_page("The database refused", Some(code), message, &extra)
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
}
