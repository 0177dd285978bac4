//! `/api/orders`: create, read, cancel and check out orders ([`crate::orders`] owns them and
//! the seat rule that checkout applies).

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;
use serde_json::json;

use super::{
    ApiQuery, Errors, Page, Paging, PathId,
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
    state_filter,
};
use crate::{
    error::ApiError,
    orders::{
        self, Order,
        seats::{self, CheckoutRefusal},
    },
    state::AppState,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateOrder {
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListOrders {
    limit: Option<i64>,
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    status: Option<String>,
}

impl From<CheckoutRefusal> for ApiError {
    fn from(r: CheckoutRefusal) -> ApiError {
        match r {
            CheckoutRefusal::NotPending => ApiError::Conflict("the order is not pending".into()),
            CheckoutRefusal::HoldExpired => {
                ApiError::Conflict("the order's seat hold has expired; create a new order".into())
            }
            CheckoutRefusal::ChannelFull => {
                ApiError::Conflict("the channel is full: no seat is free".into())
            }
            CheckoutRefusal::ChannelInactive => {
                ApiError::Unprocessable("the channel is not active".into())
            }
        }
    }
}

fn to_value(order: &Order) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(order).map_err(ApiError::internal)
}

/// `POST /api/orders`: 201 with the order; amount and currency are the channel's price now.
/// 422 when the subscriber or channel does not exist or the channel is inactive.
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<CreateOrder>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let subscriber_id = e.required("subscriber_id", b.subscriber_id);
    let channel_id = e.required("channel_id", b.channel_id);
    e.finish()?;
    let (subscriber_id, channel_id) = (subscriber_id.unwrap(), channel_id.unwrap());
    crate::idempotent!(state, write, |tx| {
        let order = orders::create(tx, subscriber_id, channel_id).await?;
        tracing::info!(
            order_id = order.id,
            subscriber_id,
            channel_id,
            staff_id = write.staff.id,
            "order created"
        );
        Ok((StatusCode::CREATED, to_value(&order)?))
    })
}

/// `GET /api/orders` (filters `subscriber_id`, `channel_id`, `status`).
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListOrders>,
) -> Result<Json<Page<Order>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let status = state_filter::<orders::Status>("status", q.status.as_deref())?;
    let filter = orders::Filter {
        subscriber_id: q.subscriber_id,
        channel_id: q.channel_id,
        status,
    };
    let client = state.db.get().await?;
    let items = orders::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |o| o.id)))
}

/// `GET /api/orders/{id}`.
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Order>, ApiError> {
    let client = state.db.get().await?;
    let order = orders::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    Ok(Json(order))
}

/// `POST /api/orders/{id}/cancel`: pending only (else 409); clears the hold, so its seat is free
/// at once. Takes the lock order, like every change of a hold.
pub async fn cancel(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let order = orders::cancel(tx, id).await?;
        tracing::info!(order_id = id, staff_id = write.staff.id, "order cancelled");
        Ok((StatusCode::OK, to_value(&order)?))
    })
}

/// `POST /api/orders/{id}/checkout` → 200 `{"order": Order}`: the buyer is about to pay. The
/// same decision as an approved Telegram `pre_checkout_query` ([`seats::checkout_locked`]):
/// a free seat is held once for `HOLD_SECS`; refusals are 409 (not pending, hold expired,
/// channel full) or 422 (channel inactive).
pub async fn checkout(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    let hold_secs = state.config.hold_secs;
    crate::idempotent!(state, write, |tx| {
        let order = seats::checkout_locked(tx, id, hold_secs).await??;
        tracing::info!(
            order_id = id,
            hold_until = ?order.hold_until,
            staff_id = write.staff.id,
            "checkout approved"
        );
        Ok((StatusCode::OK, json!({ "order": order })))
    })
}
