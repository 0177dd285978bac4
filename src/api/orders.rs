//! `/api/orders`: an order is one intent to buy one billing period of one channel, and the
//! thing every payment door points at (its `reference` travels through the gateway and comes
//! back with the payment).
//!
//! Creating and reading orders takes no pair lock: they touch no hold and no membership. Cancel
//! and checkout do touch the hold, so they lock in the one lock order through
//! [`crate::payments::seats`], which also owns the seat rule that checkout applies.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_postgres::Row;

use super::{ApiQuery, Errors, Page, Paging, PathId};
use crate::{
    auth::Staff,
    error::ApiError,
    idempotency::{NoBody, StaffWrite},
    payments::seats::{self, CheckoutRefusal},
    state::AppState,
};

/// The columns of [`Order::from_row`], in order.
pub const COLUMNS: &str = "id, reference, subscriber_id, channel_id, amount_minor, currency, \
     status, hold_until, invoice_link, created_at, paid_at";

const STATUSES: [&str; 3] = ["pending", "paid", "cancelled"];

/// An order as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    pub id: i64,
    /// Opaque, unguessable (128 bits from the OS CSPRNG): a payment naming it is tied to it.
    pub reference: String,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub amount_minor: i64,
    pub currency: String,
    /// `pending`, `paid` or `cancelled`.
    pub status: String,
    /// Until when this order holds a seat of a seat-limited channel (set once by checkout).
    pub hold_until: Option<DateTime<Utc>>,
    /// Telegram Stars invoice link, when one was made.
    pub invoice_link: Option<String>,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
}

impl Order {
    /// Reads a row selected with [`COLUMNS`].
    pub fn from_row(r: &Row) -> Order {
        Order {
            id: r.get(0),
            reference: r.get(1),
            subscriber_id: r.get(2),
            channel_id: r.get(3),
            amount_minor: r.get(4),
            currency: r.get(5),
            status: r.get(6),
            hold_until: r.get(7),
            invoice_link: r.get(8),
            created_at: r.get(9),
            paid_at: r.get(10),
        }
    }
}

/// A new order reference: `ord_` and 32 hex digits of 16 bytes from the operating system's
/// CSPRNG. Guessing one is as hard as guessing a 128-bit key, so a reference in a payment is
/// evidence the payer saw our invoice, and references of other buyers cannot be enumerated.
pub fn new_reference() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("ord_{}", hex::encode(bytes))
}

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
        let subscriber = tx
            .query_opt("SELECT 1 FROM subscribers WHERE id = $1", &[&subscriber_id])
            .await?;
        let channel = tx
            .query_opt(
                "SELECT price_minor, currency, active FROM channels WHERE id = $1",
                &[&channel_id],
            )
            .await?;
        let mut e = Errors::default();
        if subscriber.is_none() {
            e.add("subscriber_id", "no such subscriber");
        }
        match &channel {
            None => e.add("channel_id", "no such channel"),
            Some(c) if !c.get::<_, bool>(2) => e.add("channel_id", "the channel is not active"),
            Some(_) => {}
        }
        e.finish()?;
        let channel = channel.expect("checked above");
        let (price, currency): (i64, String) = (channel.get(0), channel.get(1));
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
                     VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
                ),
                &[
                    &new_reference(),
                    &subscriber_id,
                    &channel_id,
                    &price,
                    &currency,
                ],
            )
            .await?;
        let order = Order::from_row(&row);
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
    if let Some(s) = &q.status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::field(
            "status",
            "must be pending, paid or cancelled",
        ));
    }
    let client = state.db.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM orders
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
    let items = rows.iter().map(Order::from_row).collect();
    Ok(Json(paging.page(items, |o| o.id)))
}

/// `GET /api/orders/{id}`.
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Order>, ApiError> {
    let client = state.db.get().await?;
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM orders WHERE id = $1"),
            &[&id],
        )
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    Ok(Json(Order::from_row(&row)))
}

/// `POST /api/orders/{id}/cancel`: pending only (else 409); clears the hold, so its seat is free
/// at once. Takes the lock order, like every change of a hold.
pub async fn cancel(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let locked = seats::lock_order(tx, id)
            .await?
            .ok_or(ApiError::NotFound("order"))?;
        if locked.order.status != "pending" {
            return Err(ApiError::Conflict(format!(
                "only a pending order can be cancelled; this one is {}",
                locked.order.status
            )));
        }
        let row = tx
            .query_one(
                &format!(
                    "UPDATE orders SET status = 'cancelled', hold_until = NULL
                     WHERE id = $1 RETURNING {COLUMNS}"
                ),
                &[&id],
            )
            .await?;
        let order = Order::from_row(&row);
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
