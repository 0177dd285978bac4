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
    schemas::Problem,
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    payments::star_subscriptions::{self, CancelRefusal, CancelledBy, StarSubscription},
    staff::audit_log::Entry,
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
    #[param(value_type = Option<star_subscriptions::Status>)]
    status: Option<String>,
}

/// `GET /api/star-subscriptions` (filters `subscriber_id`, `channel_id`, `status`).
#[utoipa::path(get, path = "/star-subscriptions", operation_id = "listStarSubscriptions",
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
    let status = e.state::<star_subscriptions::Status>("status", q.status.as_deref());
    e.finish()?;
    let filter = star_subscriptions::Filter {
        subscriber_id: q.subscriber_id,
        channel_id: q.channel_id,
        status,
    };
    let client = state.db.get().await?;
    let items = star_subscriptions::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |s| s.id)))
}

/// `GET /api/star-subscriptions/{id}`.
#[utoipa::path(get, path = "/star-subscriptions/{id}", operation_id = "getStarSubscription",
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
    let subscription = star_subscriptions::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("star subscription"))?;
    Ok(Json(subscription))
}

/// `POST /api/star-subscriptions/{id}/cancel` → 200 with the cancelled subscription; 409 when it
/// is cancelled already.
#[utoipa::path(post, path = "/star-subscriptions/{id}/cancel", operation_id = "cancelStarSubscription",
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
        let entry = Entry::new("star_subscription.cancel", Some(id)).after(&s);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::OK,
            serde_json::to_value(s).map_err(ApiError::internal)?,
        ))
    })
}
