//! Telegram Stars subscriptions: an order paid through a subscription invoice link
//! (`createInvoiceLink` with `subscription_period`) is charged again by Telegram every 30 days
//! until the subscription is cancelled. Each renewal charge carries the same `invoice_payload`
//! (the order reference) and a new `telegram_payment_charge_id`, so it reaches the payment core
//! as one more payment of an order that is already paid.
//!
//! The first charge starts the subscription ([`start`], in the payment's transaction); every
//! renewal extends the membership by one period and moves [`StarSubscription::expires_at`]
//! ([`renewed`]). Staff (`POST /api/star-subscriptions/{id}/cancel`) or the buyer (the bot's
//! cancel-renewal button) cancel it ([`cancel`]): the row says so at once — a renewal charge
//! arriving after that is `needs_review` — and an outbox effect asks Telegram to stop charging
//! (`editUserStarSubscription`). The member keeps access until the membership expires; the sweep
//! ends it like any other.
//!
//! The row lock comes after the channel's in the lock order (pair → order → channel →
//! subscription → membership): the payment core takes it under the order's locks, and a
//! cancellation takes only this one.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;
use serde_json::json;
use tokio_postgres::{GenericClient, Row};

use crate::{
    effects::{self, Kind, NewEffect},
    error::ApiError,
};

/// The only period Telegram accepts for a Stars subscription, in seconds (30 days).
pub const PERIOD_SECS: i64 = 30 * 86_400;

/// The columns of [`StarSubscription::from_row`], in order (a macro, so SQL constants can
/// splice them with `concat!`).
macro_rules! subscription_columns {
    () => {
        "id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, \
         cancelled_at, created_at, updated_at"
    };
}

/// The columns of [`StarSubscription::from_row`], in order.
pub const COLUMNS: &str = subscription_columns!();

/// On every payment of a known order (the payment core's lock order): prepared once.
const LOCK_OF_ORDER_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE order_id = $1 FOR UPDATE"
);

/// A Stars subscription as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StarSubscription {
    pub id: i64,
    /// The order its invoice was made for; every charge names its reference.
    pub order_id: i64,
    pub subscriber_id: i32,
    pub channel_id: i32,
    /// The first charge's `telegram_payment_charge_id`, which names the subscription to Telegram.
    pub charge_id: String,
    /// Telegram's `subscription_expiration_date` of the latest charge: when it renews next.
    pub expires_at: DateTime<Utc>,
    /// `active` or `cancelled`.
    #[schema(pattern = "^(active|cancelled)$")]
    pub status: String,
    /// `staff` or `buyer`, when cancelled.
    #[schema(pattern = "^(staff|buyer)$")]
    pub cancelled_by: Option<String>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl StarSubscription {
    /// Reads a row selected with [`COLUMNS`].
    pub fn from_row(r: &Row) -> StarSubscription {
        StarSubscription {
            id: r.get(0),
            order_id: r.get(1),
            subscriber_id: r.get(2),
            channel_id: r.get(3),
            charge_id: r.get(4),
            expires_at: r.get(5),
            status: r.get(6),
            cancelled_by: r.get(7),
            cancelled_at: r.get(8),
            created_at: r.get(9),
            updated_at: r.get(10),
        }
    }

    /// True unless cancelled.
    pub fn is_active(&self) -> bool {
        self.status == "active"
    }
}

/// Who cancelled a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelledBy {
    Staff,
    Buyer,
}

impl CancelledBy {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelledBy::Staff => "staff",
            CancelledBy::Buyer => "buyer",
        }
    }
}

/// Why a cancellation changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    /// Already cancelled (by staff or the buyer).
    AlreadyCancelled,
}

/// The subscription started by this order's first charge, locked `FOR UPDATE`; `None` when the
/// order started none. The caller holds the order's locks.
pub async fn lock_of_order(
    tx: &Transaction<'_>,
    order_id: i64,
) -> Result<Option<StarSubscription>, ApiError> {
    let row = crate::db::row_opt(tx, LOCK_OF_ORDER_SQL, &[&order_id]).await?;
    Ok(row.as_ref().map(StarSubscription::from_row))
}

/// Starts the subscription of an order's first charge `charge_id`, renewing at Telegram's
/// `expires_at` (or a period from now when the door did not say). The caller holds the order's
/// locks and has just applied the charge.
pub async fn start(
    tx: &Transaction<'_>,
    order_id: i64,
    charge_id: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<StarSubscription, ApiError> {
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id,
                     expires_at)
                 SELECT o.id, o.subscriber_id, o.channel_id, $2,
                        COALESCE($3, statement_timestamp() + make_interval(secs => $4))
                 FROM orders o WHERE o.id = $1
                 RETURNING {COLUMNS}"
            ),
            &[&order_id, &charge_id, &expires_at, &(PERIOD_SECS as f64)],
        )
        .await?;
    let s = StarSubscription::from_row(&row);
    tracing::info!(
        subscription_id = s.id,
        order_id,
        "Stars subscription started"
    );
    Ok(s)
}

/// Records a renewal charge: the next renewal is Telegram's `expires_at`, or a period after the
/// current one when the door did not say.
pub async fn renewed(
    tx: &Transaction<'_>,
    id: i64,
    expires_at: Option<DateTime<Utc>>,
) -> Result<(), ApiError> {
    tx.execute(
        "UPDATE star_subscriptions
         SET expires_at = COALESCE($2, GREATEST(expires_at, statement_timestamp())
                                       + make_interval(secs => $3)),
             updated_at = statement_timestamp()
         WHERE id = $1",
        &[&id, &expires_at, &(PERIOD_SECS as f64)],
    )
    .await?;
    Ok(())
}

/// Cancels subscription `id`: marks it cancelled (so a later renewal charge is reviewed, not
/// applied) and enqueues the `editUserStarSubscription` call, in the caller's transaction.
/// `None`: no such subscription.
pub async fn cancel(
    tx: &Transaction<'_>,
    id: i64,
    by: CancelledBy,
) -> Result<Option<Result<StarSubscription, CancelRefusal>>, ApiError> {
    let Some(row) = tx
        .query_opt(
            &format!("SELECT {COLUMNS} FROM star_subscriptions WHERE id = $1 FOR UPDATE"),
            &[&id],
        )
        .await?
    else {
        return Ok(None);
    };
    if !StarSubscription::from_row(&row).is_active() {
        return Ok(Some(Err(CancelRefusal::AlreadyCancelled)));
    }
    let row = tx
        .query_one(
            &format!(
                "UPDATE star_subscriptions
                 SET status = 'cancelled', cancelled_by = $2, cancelled_at = statement_timestamp(),
                     updated_at = statement_timestamp()
                 WHERE id = $1 RETURNING {COLUMNS}"
            ),
            &[&id, &by.as_str()],
        )
        .await?;
    let s = StarSubscription::from_row(&row);
    let user_id = telegram_user_of(&**tx, s.subscriber_id).await?;
    effects::enqueue(
        &**tx,
        &NewEffect {
            kind: Kind::SubscriptionCancel,
            membership_id: None,
            payment_id: None,
            order_id: Some(s.order_id),
            chat_id: None,
            user_id,
            payload: json!({"subscription_id": s.id}),
            dedupe_key: Some(format!("subscription_cancel:{}", s.id)),
        },
    )
    .await?;
    tracing::info!(
        subscription_id = s.id,
        by = by.as_str(),
        "Stars subscription cancelled"
    );
    Ok(Some(Ok(s)))
}

async fn telegram_user_of(
    client: &impl GenericClient,
    subscriber_id: i32,
) -> Result<i64, ApiError> {
    Ok(client
        .query_one(
            "SELECT telegram_user_id FROM subscribers WHERE id = $1",
            &[&subscriber_id],
        )
        .await?
        .get(0))
}
