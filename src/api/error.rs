//! Rendering of [`ApiError`] as RFC 9457 problem documents (`application/problem+json`).
//!
//! Database errors are mapped deliberately here, in one place: a named unique constraint → 409,
//! a foreign key → 409 (in use), a CHECK or a data exception (class 22) → 422, a deadlock or
//! lock timeout → 503 (retryable, never a 500), pool or connection failure, a server shutting
//! down and a read-only session (a failover) → 503 with `Retry-After`.
//! A 5xx body is opaque; its cause is logged once, here, inside the request's span (which
//! carries the request id).

use std::collections::BTreeMap;

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tokio_postgres::error::SqlState;

use crate::common::error::ApiError;

/// A body that could not be read: 413 when it exceeds the size limit, else 400.
impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(e: axum::extract::rejection::BytesRejection) -> ApiError {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::BadRequest(format!("could not read the body: {e}"))
        }
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    title: &'a str,
    status: u16,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a BTreeMap<String, String>>,
}

/// Builds a problem+json response.
pub fn problem(
    status: StatusCode,
    kind: &str,
    detail: impl Into<String>,
    errors: Option<&BTreeMap<String, String>>,
) -> Response {
    let body = Problem {
        kind,
        title: status.canonical_reason().unwrap_or("Error"),
        status: status.as_u16(),
        detail: detail.into(),
        errors,
    };
    let bytes = serde_json::to_vec(&body).expect("problem serializes");
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        )],
        bytes,
    )
        .into_response()
}

/// A human message for a unique constraint, by its name in the schema.
fn unique_message(constraint: &str) -> String {
    match constraint {
        "subscribers_telegram_user_id_key" => {
            "a subscriber with this telegram_user_id already exists".into()
        }
        "channels_telegram_chat_id_key" => {
            "a channel with this telegram_chat_id already exists".into()
        }
        "memberships_subscriber_channel_key" => {
            "this subscriber already has a membership of this channel".into()
        }
        "staff_accounts_email_key" => "a staff account with this email already exists".into(),
        "payments_one_applied_per_order" => "this order is already paid".into(),
        "promo_codes_code_key" => "a promo code with this code already exists".into(),
        "channel_exemptions_pkey" => "this user is already exempt in this channel".into(),
        "audits_one_running" => "an audit of this channel is running".into(),
        other => format!("conflicts with an existing record ({other})"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        use StatusCode as S;
        match self {
            ApiError::BadRequest(d) => problem(S::BAD_REQUEST, "/problems/bad-request", d, None),
            ApiError::Unauthorized => {
                let mut r = problem(
                    S::UNAUTHORIZED,
                    "/problems/unauthorized",
                    "missing or invalid credentials",
                    None,
                );
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                r
            }
            ApiError::WebhookUnauthorized(why) => {
                tracing::warn!(reason = %why, "webhook refused");
                problem(
                    S::UNAUTHORIZED,
                    "/problems/unauthorized",
                    "the request is not authenticated",
                    None,
                )
            }
            ApiError::Forbidden(d) => problem(S::FORBIDDEN, "/problems/forbidden", d, None),
            ApiError::NotFound(what) => problem(
                S::NOT_FOUND,
                "/problems/not-found",
                format!("{what} not found"),
                None,
            ),
            ApiError::Conflict(d) => problem(S::CONFLICT, "/problems/conflict", d, None),
            ApiError::PayloadTooLarge => problem(
                S::PAYLOAD_TOO_LARGE,
                "/problems/payload-too-large",
                "the request body is too large",
                None,
            ),
            ApiError::Validation(errors) => problem(
                S::UNPROCESSABLE_ENTITY,
                "/problems/validation",
                "some fields are invalid",
                Some(&errors),
            ),
            ApiError::Unprocessable(d) => {
                problem(S::UNPROCESSABLE_ENTITY, "/problems/unprocessable", d, None)
            }
            ApiError::TooManyRequests { retry_after_secs } => {
                let mut r = problem(
                    S::TOO_MANY_REQUESTS,
                    "/problems/too-many-requests",
                    format!("too many attempts; retry after {retry_after_secs} s"),
                    None,
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                r
            }
            ApiError::Unavailable(d) => {
                tracing::warn!(detail = %d, "service unavailable");
                unavailable(d)
            }
            ApiError::Pool(e) => {
                tracing::error!(error = %e, "database pool unavailable");
                unavailable("the database is unavailable; retry later")
            }
            ApiError::Db(e) => db_error_response(e),
            ApiError::Internal(cause) => {
                tracing::error!(error = %cause, "internal error");
                internal()
            }
        }
    }
}

fn unavailable(detail: impl Into<String>) -> Response {
    let mut r = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "/problems/unavailable",
        detail,
        None,
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn internal() -> Response {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "/problems/internal",
        "an internal error occurred; it has been logged with this request's id",
        None,
    )
}

fn db_error_response(e: tokio_postgres::Error) -> Response {
    let Some(db) = e.as_db_error() else {
        // No SQLSTATE: either the connection failed (closed, refused, timed out: 503) or the
        // client refused the statement (a parameter of the wrong type: a bug, 500).
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        if e.is_closed() || io {
            tracing::error!(error = %e, "database connection error");
            return unavailable("the database is unavailable; retry later");
        }
        tracing::error!(error = %e, "database client error");
        return internal();
    };
    let code = db.code();
    if *code == SqlState::UNIQUE_VIOLATION {
        let msg = unique_message(db.constraint().unwrap_or(""));
        return ApiError::Conflict(msg).into_response();
    }
    if *code == SqlState::FOREIGN_KEY_VIOLATION {
        return ApiError::Conflict(
            "the record is referenced by other records, or references a missing one".into(),
        )
        .into_response();
    }
    if *code == SqlState::CHECK_VIOLATION || *code == SqlState::NOT_NULL_VIOLATION {
        tracing::warn!(constraint = ?db.constraint(), "constraint refused a write");
        return ApiError::Unprocessable(format!(
            "the values break a rule of the data ({})",
            db.constraint().unwrap_or("constraint")
        ))
        .into_response();
    }
    if *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
    {
        tracing::warn!(sqlstate = code.code(), "database contention");
        return unavailable("the record is busy; retry shortly");
    }
    if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        // The session is on a server that is not (or no longer) the primary: a failover in
        // progress. Nothing was written; the connection is discarded (`db::discard_if_lost`).
        tracing::error!(sqlstate = code.code(), error = %e, "database is read-only");
        return unavailable("the database is unavailable; retry later");
    }
    let class = &code.code()[..2];
    if class == "22" {
        // Data exception (a NUL in text, a value out of range, a date overflow): the input was
        // well-formed JSON the handlers did not anticipate. Still the client's values, not a bug
        // worth a 500; handlers validate the cases they know with per-field messages.
        tracing::warn!(sqlstate = code.code(), "database refused a value");
        return ApiError::Unprocessable("a value is malformed or out of range".into())
            .into_response();
    }
    if matches!(class, "08" | "53" | "57" | "58") {
        tracing::error!(sqlstate = code.code(), error = %e, "database unavailable");
        return unavailable("the database is unavailable; retry later");
    }
    tracing::error!(sqlstate = code.code(), error = %e, "database error");
    internal()
}
