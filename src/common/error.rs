//! The one error type of the service, shared by the domain and the HTTP layer.
//!
//! Domain functions return `Result<_, ApiError>`: its variants name what went wrong in the
//! terms a client is told (not found, conflict, invalid field, unavailable) and carry database
//! and pool errors as they are. The HTTP layer renders it as an RFC 9457 problem document and
//! maps database errors by SQLSTATE, in one place (`api::error`); this module knows nothing of
//! HTTP.

use std::collections::BTreeMap;

use tokio_postgres::error::SqlState;

/// Every way a request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: malformed JSON, wrong types, unknown fields or query parameters.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 401 with `WWW-Authenticate: Bearer`.
    #[error("unauthorized")]
    Unauthorized,
    /// 401 for a webhook door (no `WWW-Authenticate: Bearer`, which would mislead).
    #[error("webhook not authenticated: {0}")]
    WebhookUnauthorized(String),
    /// 403: the account's role may not call this route.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409: conflict with existing state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 413: the body is larger than the router's limit.
    #[error("request body too large")]
    PayloadTooLarge,
    /// 422 with per-field messages.
    #[error("validation failed")]
    Validation(BTreeMap<String, String>),
    /// 422 without fields.
    #[error("unprocessable: {0}")]
    Unprocessable(String),
    /// 429 with `Retry-After`.
    #[error("too many requests")]
    TooManyRequests { retry_after_secs: u64 },
    /// 503: a dependency (the database, a door's secret) is unavailable.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A database error; mapped by SQLSTATE when rendered (`api::error`).
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool. The text carries the causes (a refused
    /// certificate, a failed login), which tokio-postgres keeps out of its own message.
    #[error("database pool: {}", with_causes(.0))]
    Pool(#[from] deadpool_postgres::PoolError),
    /// 500: a bug or an unexpected failure. The message goes to the log only.
    #[error("internal error: {0}")]
    Internal(String),
}

/// An error's message followed by those of its sources, each once.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

impl ApiError {
    /// A 422 naming one field.
    pub fn field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::Validation(BTreeMap::from([(field.to_string(), message.into())]))
    }

    pub fn internal(e: impl std::fmt::Display) -> ApiError {
        ApiError::Internal(e.to_string())
    }

    /// The SQLSTATE of a database error, if this is one.
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            ApiError::Db(e) => e.code(),
            _ => None,
        }
    }

    /// The database connection this error came from is gone or cannot take writes: closed or
    /// broken (the server was killed, the network failed), the server shutting down or crashed
    /// (`57P01`..`57P03`), a connection exception (class `08`), or a read-only session (`25006`:
    /// a server that is not the primary). The request is answered 503 with
    /// `Retry-After` (its transaction did not commit, or its commit's outcome is unknown, which
    /// a redelivery settles), and the connection is not handed out again.
    pub fn is_connection_lost(&self) -> bool {
        let ApiError::Db(e) = self else {
            return false;
        };
        match e.code() {
            Some(code) => {
                *code == SqlState::READ_ONLY_SQL_TRANSACTION
                    || *code == SqlState::ADMIN_SHUTDOWN
                    || *code == SqlState::CRASH_SHUTDOWN
                    || *code == SqlState::CANNOT_CONNECT_NOW
                    || code.code().starts_with("08")
            }
            None => {
                e.is_closed()
                    || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
            }
        }
    }

    /// Deadlocks and serialization failures: the transaction may simply be run again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.sql_state(),
            Some(s) if *s == SqlState::T_R_DEADLOCK_DETECTED || *s == SqlState::T_R_SERIALIZATION_FAILURE
        )
    }
}
