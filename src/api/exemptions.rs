//! `/api/channels/{id}/exemptions`: the users a channel's chat may hold without a membership
//! (the owner's staff, guests), by `telegram_user_id`. A user who joins the chat without live
//! access is removed unless exempt (or an administrator); a revoke and an audit leave them
//! alone too.
//!
//! HTTP only: the handlers check the body's fields and call [`crate::access::exemptions`], which owns
//! the rows.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};

use super::{Errors, check_text};
use super::{auth::Staff, idempotency::StaffWrite, schemas::Problem};
use crate::{
    access::exemptions::{self, Exemption},
    app::state::AppState,
    catalog::channels,
    common::error::ApiError,
    staff::audit_log::Entry,
};

/// The longest `note`, in characters (also a CHECK of the schema).
const NOTE_MAX: usize = 255;

/// A new exemption.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"telegram_user_id": 123456789, "note": "the channel's editor"}))]
pub struct ExemptionInput {
    /// The Telegram user id (> 0).
    #[schema(required = true, nullable = false, value_type = i64, minimum = 1)]
    telegram_user_id: Option<i64>,
    /// Why (at most 255 characters).
    #[schema(value_type = Option<String>, max_length = 255)]
    note: Option<String>,
}

/// The body of `GET /api/channels/{id}/exemptions`: every exemption of the channel, by user id
/// (not paged: a channel has a handful).
#[derive(Serialize, utoipa::ToSchema)]
pub struct Exemptions {
    pub items: Vec<Exemption>,
}

/// A path's channel id; anything that is not one is a 404 (no such channel can exist).
fn channel_id(raw: &str) -> Result<i32, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound("channel"))
}

async fn known_channel(
    client: &impl deadpool_postgres::GenericClient,
    id: i32,
) -> Result<(), ApiError> {
    match channels::title(client, id).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound("channel")),
    }
}

/// `GET /api/channels/{id}/exemptions`.
#[utoipa::path(get, path = "/channels/{id}/exemptions", operation_id = "listExemptions",
    tag = "channels",
    params(("id" = i32, Path, description = "Channel id.")),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The channel's exempt users, by `telegram_user_id`.",
            body = Exemptions),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    Path(id): Path<String>,
) -> Result<Json<Exemptions>, ApiError> {
    let id = channel_id(&id)?;
    let client = state.db.get().await?;
    known_channel(&client, id).await?;
    Ok(Json(Exemptions {
        items: exemptions::list(&client, id).await?,
    }))
}

/// `POST /api/channels/{id}/exemptions`.
#[utoipa::path(post, path = "/channels/{id}/exemptions", operation_id = "createExemption",
    tag = "channels",
    params(("id" = i32, Path, description = "Channel id."), super::idempotency::IdempotencyKey),
    request_body = ExemptionInput,
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Exempt from now on.", body = Exemption),
        (status = 409, description = "The user is already exempt in this channel, or this \
            Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields: `telegram_user_id` missing or not \
            positive, `note` too long; or an Idempotency-Key reused for another request.",
            body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    Path(id): Path<String>,
    write: StaffWrite<ExemptionInput>,
) -> Result<Response, ApiError> {
    let id = channel_id(&id)?;
    let mut e = Errors::default();
    let user = e.required("telegram_user_id", write.body.telegram_user_id);
    if let Some(u) = user
        && u <= 0
    {
        e.add("telegram_user_id", "must be a positive integer");
    }
    check_text(&mut e, "note", write.body.note.as_deref(), NOTE_MAX);
    e.finish()?;
    let (user, note) = (user.unwrap_or_default(), write.body.note.clone());
    crate::idempotent!(state, write, |tx| {
        known_channel(tx, id).await?;
        let x = exemptions::add(tx, id, user, note.as_deref()).await?;
        let entry = Entry::new("channel.add_exemption", Some(id.into())).after(&x);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(x).map_err(ApiError::internal)?,
        ))
    })
}

/// `DELETE /api/channels/{id}/exemptions/{telegram_user_id}`.
#[utoipa::path(delete, path = "/channels/{id}/exemptions/{telegram_user_id}",
    operation_id = "deleteExemption", tag = "channels",
    params(
        ("id" = i32, Path, description = "Channel id."),
        ("telegram_user_id" = i64, Path, description = "The exempt user."),
    ),
    security(("staff_jwt" = [])),
    responses(
        (status = 204, description = "No longer exempt."),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    Path((id, user)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let id = channel_id(&id)?;
    let user: i64 = user.parse().map_err(|_| ApiError::NotFound("exemption"))?;
    crate::transaction!(state.db, |tx| {
        if !exemptions::remove(tx, id, user).await? {
            return Err(ApiError::NotFound("exemption"));
        }
        let entry = Entry::new("channel.remove_exemption", Some(id.into()))
            .before(serde_json::json!({"channel_id": id, "telegram_user_id": user}));
        staff.audit(tx, entry).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
