//! `/api/star-subscriptions`: the Telegram Stars subscriptions buyers started through the bot
//! (a `recurring` channel), and staff's way to stop one renewing.
//!
//! Cancelling marks the subscription cancelled at once (a renewal charge arriving later is
//! kept as `needs_review`, never applied) and enqueues `editUserStarSubscription` through the
//! outbox; the member keeps access until the membership expires, and the sweep ends it then.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;

use super::{
    ApiQuery, Errors, Page, Paging, PathId,
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
    openapi::Problem,
};
use crate::{
    error::ApiError,
    payments::star_subscriptions::{self, COLUMNS, CancelRefusal, CancelledBy, StarSubscription},
    state::AppState,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListStarSubscriptions {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    /// `active` or `cancelled`.
    #[param(pattern = "^(active|cancelled)$")]
    status: Option<String>,
}

/// `GET /api/star-subscriptions` (filters `subscriber_id`, `channel_id`, `status`).
#[utoipa::path(get, path = "/api/star-subscriptions", operation_id = "listStarSubscriptions",
    tag = "star subscriptions",
    params(ListStarSubscriptions),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of Stars subscriptions, by id.",
            body = Page<StarSubscription>),
        (status = 422, description = "`limit` out of range or an unknown `status`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListStarSubscriptions>,
) -> Result<Json<Page<StarSubscription>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let mut e = Errors::default();
    if let Some(s) = &q.status
        && !["active", "cancelled"].contains(&s.as_str())
    {
        e.add("status", "must be active or cancelled");
    }
    e.finish()?;
    let client = state.db.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM star_subscriptions
                 WHERE id > $1
                   AND ($2::integer IS NULL OR subscriber_id = $2)
                   AND ($3::integer IS NULL OR channel_id = $3)
                   AND ($4::text IS NULL OR status = $4)
                 ORDER BY id LIMIT $5"
            ),
            &[
                &paging.after,
                &q.subscriber_id,
                &q.channel_id,
                &q.status,
                &paging.fetch(),
            ],
        )
        .await?;
    let items = rows.iter().map(StarSubscription::from_row).collect();
    Ok(Json(paging.page(items, |s| s.id)))
}

/// `GET /api/star-subscriptions/{id}`.
#[utoipa::path(get, path = "/api/star-subscriptions/{id}", operation_id = "getStarSubscription",
    tag = "star subscriptions",
    params(("id" = i64, Path, description = "Stars subscription id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The Stars subscription.", body = StarSubscription)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<StarSubscription>, ApiError> {
    let client = state.db.get().await?;
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM star_subscriptions WHERE id = $1"),
            &[&id],
        )
        .await?
        .ok_or(ApiError::NotFound("star subscription"))?;
    Ok(Json(StarSubscription::from_row(&row)))
}

/// `POST /api/star-subscriptions/{id}/cancel` → 200 with the cancelled subscription; 409 when it
/// is cancelled already.
#[utoipa::path(post, path = "/api/star-subscriptions/{id}/cancel", operation_id = "cancelStarSubscription",
    tag = "star subscriptions",
    params(("id" = i64, Path, description = "Stars subscription id."),
        super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The cancelled subscription (it renews no more; access lasts \
            until the membership expires).", body = StarSubscription),
        (status = 409, description = "Cancelled already, or this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn cancel(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let s = match star_subscriptions::cancel(tx, id, CancelledBy::Staff).await? {
            None => return Err(ApiError::NotFound("star subscription")),
            Some(Err(CancelRefusal::AlreadyCancelled)) => {
                return Err(ApiError::Conflict(
                    "the subscription is cancelled already".into(),
                ));
            }
            Some(Ok(s)) => s,
        };
        tracing::info!(
            subscription_id = id,
            staff_id = write.staff.id,
            "star subscription cancelled by staff"
        );
        Ok((
            StatusCode::OK,
            serde_json::to_value(s).map_err(ApiError::internal)?,
        ))
    })
}
