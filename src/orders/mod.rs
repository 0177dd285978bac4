//! Orders: one intent to buy one billing period of one channel, and the thing every payment
//! door points at (its `reference` travels through the gateway and comes back with the
//! payment). This module owns the `orders` rows; [`seats`] owns the lock order that every
//! change of a hold takes, and the seat rule.
//!
//! Creating and reading orders takes no pair lock: they touch no hold and no membership. Cancel
//! and checkout do touch the hold, so they lock in the one lock order through [`seats`].

pub mod seats;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use rand::RngCore;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    channels,
    db::{self, FromRow},
    error::ApiError,
    subscribers,
};

crate::text_enum! {
    /// An order's status: `pending` until a payment pays it or staff cancel it.
    pub enum Status {
        Pending => "pending",
        Paid => "paid",
        Cancelled => "cancelled",
    }
}

/// The select list of [`Order`] (a macro, so SQL constants can splice it with `concat!`).
macro_rules! order_columns {
    () => {
        "id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, \
         invoice_link, superseded_at, created_at, paid_at"
    };
}
pub(crate) use order_columns;

/// The columns of [`Order`], for queries elsewhere that read orders.
pub const COLUMNS: &str = order_columns!();

/// An order as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21",
    "subscriber_id": 1, "channel_id": 1, "amount_minor": 19900, "currency": "UAH",
    "status": "pending", "hold_until": null, "invoice_link": null, "superseded_at": null,
    "created_at": "2025-01-01T10:00:00Z", "paid_at": null}))]
pub struct Order {
    pub id: i64,
    /// Opaque, unguessable (128 bits from the OS CSPRNG): a payment naming it is tied to it.
    pub reference: String,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub amount_minor: i64,
    pub currency: String,
    pub status: Status,
    /// Until when this order holds a seat of a seat-limited channel (set once by checkout).
    pub hold_until: Option<DateTime<Utc>>,
    /// Telegram Stars invoice link, when one was made.
    pub invoice_link: Option<String>,
    /// When the bot made the buyer a newer order in place of this one (the buyer pressed buy
    /// again once it could no longer be reused). It stays `pending`: a late payment of it is
    /// judged by the seat rules like any other, but the bot never offers it again.
    pub superseded_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
}

impl FromRow for Order {
    const COLUMNS: &'static str = order_columns!();

    fn from_row(r: &Row) -> Result<Order, tokio_postgres::Error> {
        Ok(Order {
            id: r.try_get("id")?,
            reference: r.try_get("reference")?,
            subscriber_id: r.try_get("subscriber_id")?,
            channel_id: r.try_get("channel_id")?,
            amount_minor: r.try_get("amount_minor")?,
            currency: r.try_get("currency")?,
            status: r.try_get("status")?,
            hold_until: r.try_get("hold_until")?,
            invoice_link: r.try_get("invoice_link")?,
            superseded_at: r.try_get("superseded_at")?,
            created_at: r.try_get("created_at")?,
            paid_at: r.try_get("paid_at")?,
        })
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

const INSERT_SQL: &str = concat!(
    "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
     VALUES ($1, $2, $3, $4, $5) RETURNING ",
    order_columns!()
);
const LIST_SQL: &str = concat!(
    "SELECT ",
    order_columns!(),
    " FROM orders
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
     ORDER BY id LIMIT $5"
);
const GET_SQL: &str = concat!("SELECT ", order_columns!(), " FROM orders WHERE id = $1");
const CANCEL_SQL: &str = concat!(
    "UPDATE orders SET status = $2, hold_until = NULL WHERE id = $1 RETURNING ",
    order_columns!()
);
const SET_INVOICE_LINK_SQL: &str =
    "UPDATE orders SET invoice_link = $2 WHERE id = $1 AND invoice_link IS NULL";

/// Creates an order of `subscriber_id` for `channel_id` at the channel's price now (amount and
/// currency are copied, so a later price change does not touch it). 422 naming the field when
/// the subscriber or the channel does not exist or the channel is inactive.
pub async fn create(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<Order, ApiError> {
    let subscriber = subscribers::exists(tx, subscriber_id).await?;
    let channel = channels::price(tx, channel_id).await?;
    let mut errors = std::collections::BTreeMap::new();
    if !subscriber {
        errors.insert(
            "subscriber_id".to_string(),
            "no such subscriber".to_string(),
        );
    }
    match &channel {
        None => {
            errors.insert("channel_id".to_string(), "no such channel".to_string());
        }
        Some(c) if !c.active => {
            errors.insert(
                "channel_id".to_string(),
                "the channel is not active".to_string(),
            );
        }
        Some(_) => {}
    }
    let Some(channel) = channel.filter(|_| errors.is_empty()) else {
        return Err(ApiError::Validation(errors));
    };
    db::one(
        tx,
        INSERT_SQL,
        &[
            &new_reference(),
            &subscriber_id,
            &channel_id,
            &channel.price_minor,
            &channel.currency,
        ],
    )
    .await
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub subscriber_id: Option<i32>,
    pub channel_id: Option<i32>,
    pub status: Option<Status>,
}

/// Up to `limit` orders with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Order>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.subscriber_id,
            &filter.channel_id,
            &filter.status,
            &limit,
        ],
    )
    .await
}

/// The order with this id, if any.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Order>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// Cancels a pending order and clears its hold, so its seat is free at once; 404 for no such
/// order, 409 when it is not pending. Takes the lock order, like every change of a hold.
pub async fn cancel(tx: &Transaction<'_>, id: i64) -> Result<Order, ApiError> {
    let locked = seats::lock_order(tx, id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    if locked.order.status != Status::Pending {
        return Err(ApiError::Conflict(format!(
            "only a pending order can be cancelled; this one is {}",
            locked.order.status
        )));
    }
    db::one(tx, CANCEL_SQL, &[&id, &Status::Cancelled]).await
}

/// Stores a Stars invoice link on the order unless one is stored already (the first stored
/// link wins); returns the order as it is now.
pub async fn set_invoice_link(
    client: &impl GenericClient,
    id: i64,
    link: &str,
) -> Result<Option<Order>, ApiError> {
    db::execute(client, SET_INVOICE_LINK_SQL, &[&id, &link]).await?;
    get(client, id).await
}

/// Marks an order paid by a payment (its hold stops counting), as a data-modifying CTE after
/// the CTE `to_mark(order_id, paid_at)`, the payment just stored when it pays its order: the
/// payment core writes the payment and its order in one statement (one round trip). The
/// caller holds the order in the lock order ([`seats::lock_order_by_reference`]). `'paid'` is
/// [`Status::Paid`].
macro_rules! mark_paid_cte {
    () => {
        "paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at
    FROM to_mark m WHERE o.id = m.order_id
)"
    };
}
pub(crate) use mark_paid_cte;
