//! `POST /api/channels/{id}/audit`, `GET /api/audits/{id}`, `GET /api/audits`: audits of a
//! channel's member list against the database ([`crate::telegram::audits`]). The request records the
//! running audit and answers 202 at once; the audit runs on in the background and its row shows
//! its progress and, when done, its report.
//!
//! Not idempotency-keyed (like the sweep): repeating the request while the audit runs is a 409,
//! and after it ends a new audit is what a repeat should mean.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};

use super::{ApiJson, ApiQuery, PathId, auth::Staff, schemas::Problem};
use crate::{
    app::state::AppState,
    catalog::channels,
    common::error::ApiError,
    telegram::audits::{self, Audit, Start},
};

/// The body of `POST /api/channels/{id}/audit` (optional: no body is `{"fix": false}`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditRequest {
    /// `true`: enqueue the unban or revoke each wrong row needs (never for administrators or
    /// exempt users). Default `false`: report only.
    #[serde(default)]
    pub fix: bool,
}

/// `{"audit_id": n}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"audit_id": 3}))]
pub struct AuditStarted {
    pub audit_id: i64,
}

/// `POST /api/channels/{id}/audit` → 202 `{"audit_id"}`: asks Telegram about everyone who ever
/// had a membership of the channel; follow it at `GET /api/audits/{audit_id}`.
#[utoipa::path(post, path = "/channels/{id}/audit", operation_id = "auditChannel", tag = "audits",
    params(("id" = i32, Path, description = "Channel id.")),
    request_body(content = Option<AuditRequest>, description = "None, or `{\"fix\": bool}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 202, description = "The audit is running.", body = AuditStarted),
        (status = 409, description = "An audit of this channel is running.", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No `TELEGRAM_BOT_TOKEN` (or `TELEGRAM_DRY_RUN=true`): \
            an audit needs Telegram's answers. Or the database is unavailable.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn start(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i32>,
    ApiJson(body): ApiJson<AuditRequest>,
) -> Result<Response, ApiError> {
    let Some(bot) = audits::bot(&state.config) else {
        let client = state.db.get().await?;
        if channels::get(&client, id).await?.is_none() {
            return Err(ApiError::NotFound("channel"));
        }
        return Err(ApiError::Unavailable(
            "TELEGRAM_BOT_TOKEN is not set (or TELEGRAM_DRY_RUN is on): an audit needs \
             Telegram's answers"
                .into(),
        ));
    };
    match audits::start(&state.db, id, body.fix, Some(&staff.actor())).await? {
        Start::NoChannel => Err(ApiError::NotFound("channel")),
        Start::Running(running) => Err(ApiError::Conflict(format!(
            "audit {running} of this channel is running; wait for it to finish"
        ))),
        Start::Started(audit_id) => {
            tracing::info!(
                audit_id,
                channel_id = id,
                fix = body.fix,
                staff_id = staff.id,
                "audit started"
            );
            staff.recorded();
            audits::spawn(state.db.clone(), bot, audit_id);
            Ok((StatusCode::ACCEPTED, Json(AuditStarted { audit_id })).into_response())
        }
    }
}

/// `GET /api/audits/{id}`: the audit's progress and report.
#[utoipa::path(get, path = "/audits/{id}", operation_id = "getAudit", tag = "audits",
    params(("id" = i64, Path, description = "Audit id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The audit.", body = Audit)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Audit>, ApiError> {
    let client = state.db.get().await?;
    let audit = audits::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("audit"))?;
    Ok(Json(audit))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListAudits {
    /// Only this channel's audits.
    channel_id: Option<i32>,
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 20)]
    limit: Option<i64>,
    /// Return ids smaller than this (the previous page's `next_before`).
    before: Option<i64>,
}

/// A page of audits, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub items: Vec<Audit>,
    /// The `before` of the next (older) page; `null` on the last.
    pub next_before: Option<i64>,
}

/// `GET /api/audits?channel_id=…`: audits newest first (the first is a channel's latest).
#[utoipa::path(get, path = "/audits", operation_id = "listAudits", tag = "audits",
    params(ListAudits),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of audits, newest first.", body = AuditPage),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListAudits>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=200).contains(&limit) {
        let mut e = super::Errors::default();
        e.add("limit", "must be between 1 and 200");
        e.finish()?;
    }
    let client = state.db.get().await?;
    let mut items = audits::list(&client, q.channel_id, q.before, limit + 1).await?;
    let next_before = if items.len() as i64 > limit {
        items.truncate(limit as usize);
        items.last().map(|a| a.id)
    } else {
        None
    };
    Ok(Json(AuditPage { items, next_before }))
}
