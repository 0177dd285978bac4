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
    db::{self, FromRow},
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

const START_SQL: &str = concat!(
    "INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id, expires_at)
     SELECT o.id, o.subscriber_id, o.channel_id, $2,
            COALESCE($3, statement_timestamp() + make_interval(secs => $4))
     FROM orders o WHERE o.id = $1
     RETURNING ",
    subscription_columns!()
);
const RENEWED_SQL: &str = "UPDATE star_subscriptions
     SET expires_at = COALESCE($2, GREATEST(expires_at, statement_timestamp())
                                   + make_interval(secs => $3)),
         updated_at = statement_timestamp()
     WHERE id = $1";
const LOCK_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE id = $1 FOR UPDATE"
);
const CANCEL_SQL: &str = concat!(
    "UPDATE star_subscriptions
     SET status = $3, cancelled_by = $2, cancelled_at = statement_timestamp(),
         updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    subscription_columns!()
);

/// On every payment of a known order (the payment core's lock order): prepared once.
const LOCK_OF_ORDER_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE order_id = $1 FOR UPDATE"
);

crate::text_enum! {
    /// Whether a subscription still renews.
    pub enum Status {
        Active => "active",
        Cancelled => "cancelled",
    }
}

crate::text_enum! {
    /// Who cancelled a subscription.
    pub enum CancelledBy {
        Staff => "staff",
        Buyer => "buyer",
    }
}

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
    pub status: Status,
    /// Who cancelled it, when cancelled.
    pub cancelled_by: Option<CancelledBy>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FromRow for StarSubscription {
    const COLUMNS: &'static str = subscription_columns!();

    fn from_row(r: &Row) -> Result<StarSubscription, tokio_postgres::Error> {
        Ok(StarSubscription {
            id: r.try_get("id")?,
            order_id: r.try_get("order_id")?,
            subscriber_id: r.try_get("subscriber_id")?,
            channel_id: r.try_get("channel_id")?,
            charge_id: r.try_get("charge_id")?,
            expires_at: r.try_get("expires_at")?,
            status: r.try_get("status")?,
            cancelled_by: r.try_get("cancelled_by")?,
            cancelled_at: r.try_get("cancelled_at")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

impl StarSubscription {
    /// True unless cancelled.
    pub fn is_active(&self) -> bool {
        self.status == Status::Active
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
    db::opt(tx, LOCK_OF_ORDER_SQL, &[&order_id]).await
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub subscriber_id: Option<i32>,
    pub channel_id: Option<i32>,
    pub status: Option<Status>,
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
     ORDER BY id LIMIT $5"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE id = $1"
);

/// Up to `limit` subscriptions with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl deadpool_postgres::GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<StarSubscription>, ApiError> {
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

/// The subscription with this id, if any.
pub async fn get(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<StarSubscription>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
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
    let s: StarSubscription = db::one(
        tx,
        START_SQL,
        &[&order_id, &charge_id, &expires_at, &(PERIOD_SECS as f64)],
    )
    .await?;
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
    db::execute(tx, RENEWED_SQL, &[&id, &expires_at, &(PERIOD_SECS as f64)]).await?;
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
    let Some(current) = db::opt::<StarSubscription>(tx, LOCK_SQL, &[&id]).await? else {
        return Ok(None);
    };
    if !current.is_active() {
        return Ok(Some(Err(CancelRefusal::AlreadyCancelled)));
    }
    let s: StarSubscription = db::one(tx, CANCEL_SQL, &[&id, &by, &Status::Cancelled]).await?;
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
