//! `/api/payments`: read-only view of every payment any door stored, so staff can find the ones
//! that need a human (`outcome=needs_review`) or a refund. Payments are written only by
//! [`crate::payments::core::apply_payment`] and never deleted.

use axum::{Json, extract::State};
use serde::Deserialize;

use super::{ApiQuery, Page, Paging, PathId, auth::Staff, state_filter};
use crate::{
    error::ApiError,
    payments::core::{self, Outcome, Payment},
    state::AppState,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListPayments {
    limit: Option<i64>,
    after: Option<i64>,
    outcome: Option<String>,
    order_id: Option<i64>,
    subscriber_id: Option<i32>,
}

/// `GET /api/payments` (filters `outcome`, `order_id`, `subscriber_id`), by id ascending.
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListPayments>,
) -> Result<Json<Page<Payment>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let outcome = state_filter::<Outcome>("outcome", q.outcome.as_deref())?;
    let filter = core::Filter {
        outcome,
        order_id: q.order_id,
        subscriber_id: q.subscriber_id,
    };
    let client = state.db.get().await?;
    let items = core::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |p| p.id)))
}

/// `GET /api/payments/{id}`.
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Payment>, ApiError> {
    let client = state.db.get().await?;
    let payment = core::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("payment"))?;
    Ok(Json(payment))
}
