//! `GET /api/join-requests`: the join requests that came to a Mini App door, oldest first —
//! the ones `waiting` there (the paywall is open, or the door answered `queue`), and those
//! approved or declined. HTTP only: [`crate::access::join_requests`] owns the rows.

use axum::{Json, extract::State};
use serde::Deserialize;

use super::{ApiQuery, Page, Paging, auth::Staff, schemas::Problem};
use crate::{
    access::join_requests::{self, JoinRequest, State as RequestState},
    app::state::AppState,
    common::error::ApiError,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListJoinRequests {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    /// One channel's (or group's) requests.
    channel_id: Option<i32>,
    /// `waiting`, `approved` or `declined`.
    state: Option<String>,
}

/// `GET /api/join-requests`.
#[utoipa::path(get, path = "/join-requests", operation_id = "listJoinRequests",
    tag = "channels",
    params(ListJoinRequests),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of join requests at Mini App doors, by id.",
            body = Page<JoinRequest>),
        (status = 422, description = "`limit` out of range, or an unknown `state`.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListJoinRequests>,
) -> Result<Json<Page<JoinRequest>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let wanted = match q.state.as_deref() {
        None => None,
        Some(s) => Some(RequestState::parse(s).ok_or_else(|| {
            ApiError::field("state", format!("must be {}", RequestState::spellings()))
        })?),
    };
    let client = state.db.get().await?;
    let items =
        join_requests::list(&client, q.channel_id, wanted, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |r: &JoinRequest| r.id)))
}
