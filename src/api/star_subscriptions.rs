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
};
use crate::{
    error::ApiError,
    payments::star_subscriptions::{self, CancelRefusal, CancelledBy, StarSubscription},
    state::AppState,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListStarSubscriptions {
    limit: Option<i64>,
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    status: Option<String>,
}

/// `GET /api/star-subscriptions` (filters `subscriber_id`, `channel_id`, `status`).
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
