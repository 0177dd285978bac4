//! Telegram Stars subscriptions: an order paid through a subscription invoice link
//! (`createInvoiceLink` with `subscription_period`) is charged again by Telegram every 30 days
//! until the subscription is cancelled. Each renewal charge carries the same `invoice_payload`
//! (the order reference) and a new `telegram_payment_charge_id`, so it reaches the payment core
//! as one more payment of an order that is already paid.
//!
//! The first charge starts the subscription ([`start`], in the payment's transaction); every
//! renewal extends the membership of every channel of the order's plan (a recurring bundle
//! renews them all) by the plan's period and moves [`StarSubscription::expires_at`]
//! ([`renewed`]). The row's `channel_id` is the order's own channel. The membership of a subscription charge lasts at least until the subscription's
//! next renewal plus [`SLACK_SECS`] (Telegram charges at `subscription_expiration_date`, and its
//! update arrives a little later), and while the subscription is active that long it holds its
//! seat in every channel of its order's plan (`orders::seats`). Staff (`POST /api/star-subscriptions/{id}/cancel`) or the buyer (the
//! bot's cancel-renewal button) cancel it ([`cancel`]): the row says so at once — a renewal
//! charge arriving after that is `needs_review` — and an outbox effect asks Telegram to stop
//! charging (`editUserStarSubscription`). The member keeps access until the membership expires;
//! the sweep ends it like any other.
//!
//! A subscription charge the payment core refuses stops its subscription in the payment's
//! transaction (cancelled by `subgate`, with the charge's reason, and the same effect): a
//! refused renewal cancels the order's subscription ([`stop`]); a refused first charge gets a
//! row of its own, cancelled from the start and never the order's subscription ([`refused`]).
//! So Telegram never goes on charging for access subgate did not give.
//!
//! The row lock comes after the channels' in the lock order (pairs → order → channels →
//! subscription → memberships): the payment core takes it under the order's locks, and a
//! cancellation takes only this one.

pub mod updates;

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;

use crate::payments::core::Reason;
use crate::{
    access::subscribers,
    common::{error::ApiError, expiry::Expiry},
    db,
    outbox::effects::{self, NewEffect, Payload, payload::SubscriptionCancel},
};

/// The only period Telegram accepts for a Stars subscription, in seconds (30 days).
pub const PERIOD_SECS: i64 = 30 * 86_400;

/// How long past a subscription's next renewal (`expires_at`) its membership lasts and the
/// subscription holds its seat: one day, for Telegram's renewal charge to arrive
/// (`orders::seats::SUBSCRIPTION_SLACK_SECS`, the same figure).
pub const SLACK_SECS: i64 = crate::orders::seats::SUBSCRIPTION_SLACK_SECS;

/// The columns a [`StarSubscription`] is read from, in order (a macro, so SQL constants can
/// splice them with `concat!`).
macro_rules! subscription_columns {
    () => {
        "id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, \
         cancelled_at, applied, refused_reason, created_at, updated_at"
    };
}

/// The columns a [`StarSubscription`] is read from, in order.
pub const COLUMNS: &str = subscription_columns!();

// Without Telegram's date (a charge found by the reconcile), the next renewal is a period after
// the charge was made (a future `paid_at` counts as now, as on the payment).
const START_SQL: &str = concat!(
    "INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id, expires_at)
     SELECT o.id, o.subscriber_id, o.channel_id, $2,
            COALESCE($3, LEAST($5::timestamptz, statement_timestamp())
                         + make_interval(secs => $4))
     FROM orders o WHERE o.id = $1
     RETURNING ",
    subscription_columns!()
);
const REFUSED_SQL: &str = concat!(
    "INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id, expires_at,
                                     status, cancelled_by, cancelled_at, applied, refused_reason)
     SELECT o.id, o.subscriber_id, o.channel_id, $2,
            COALESCE($3, LEAST($5::timestamptz, statement_timestamp())
                         + make_interval(secs => $4)),
            $6, $7, statement_timestamp(), false, $8
     FROM orders o WHERE o.id = $1
     RETURNING ",
    subscription_columns!()
);
const RENEWED_SQL: &str = "UPDATE star_subscriptions
     SET expires_at = COALESCE($2, GREATEST(expires_at, LEAST($4::timestamptz,
                                                                statement_timestamp()))
                                   + make_interval(secs => $3)),
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING expires_at";
const LOCK_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE id = $1 FOR UPDATE"
);
const CANCEL_SQL: &str = concat!(
    "UPDATE star_subscriptions
     SET status = $3, cancelled_by = $2, cancelled_at = statement_timestamp(),
         refused_reason = $4, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    subscription_columns!()
);

/// On every payment of a known order (the payment core's lock order): prepared once. The
/// order's subscription is the one its applied first charge started.
const LOCK_OF_ORDER_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions WHERE order_id = $1 AND applied FOR UPDATE"
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
        /// The payment core, because it refused one of the subscription's charges
        /// (`refused_reason`).
        Subgate => "subgate",
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
    /// False when its first charge was refused: it never granted access, was cancelled at
    /// once, and is not its order's subscription.
    pub applied: bool,
    /// Why subgate cancelled it (`cancelled_by` = `subgate`): the reason of the refused charge.
    pub refused_reason: Option<Reason>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(StarSubscription [subscription_columns!()] {
    id,
    order_id,
    subscriber_id,
    channel_id,
    charge_id,
    expires_at,
    status,
    cancelled_by,
    cancelled_at,
    applied,
    refused_reason,
    created_at,
    updated_at,
});

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

/// A subscription charge as [`start`], [`refused`] and [`renewed`] record it.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// Its `telegram_payment_charge_id`.
    pub charge_id: &'a str,
    /// Telegram's `subscription_expiration_date`, when the door had it.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was made, as reported (the next renewal is a period after it when Telegram's
    /// date is missing).
    pub paid_at: DateTime<Utc>,
}

/// Starts the subscription of an order's first charge, renewing at Telegram's date (or a
/// period after the charge when the door did not say). The caller holds the order's locks and
/// is applying the charge.
pub async fn start(
    tx: &Transaction<'_>,
    order_id: i64,
    charge: Charge<'_>,
) -> Result<StarSubscription, ApiError> {
    let s: StarSubscription = db::one(
        tx,
        START_SQL,
        &[
            &order_id,
            &charge.charge_id,
            &charge.expires_at,
            &(PERIOD_SECS as f64),
            &charge.paid_at,
        ],
    )
    .await?;
    tracing::info!(
        subscription_id = s.id,
        order_id,
        "Stars subscription started"
    );
    Ok(s)
}

/// Records the refused first charge of a subscription the order did not start (the payment
/// core refused it): a row cancelled by `subgate` from the start, never the order's
/// subscription, and the `editUserStarSubscription` effect that stops Telegram charging it,
/// sent to `user` (the payer). The caller holds the order's locks.
pub async fn refused(
    tx: &Transaction<'_>,
    order_id: i64,
    charge: Charge<'_>,
    reason: Reason,
    user: i64,
) -> Result<StarSubscription, ApiError> {
    let s: StarSubscription = db::one(
        tx,
        REFUSED_SQL,
        &[
            &order_id,
            &charge.charge_id,
            &charge.expires_at,
            &(PERIOD_SECS as f64),
            &charge.paid_at,
            &Status::Cancelled,
            &CancelledBy::Subgate,
            &reason,
        ],
    )
    .await?;
    enqueue_cancel(tx, &s, user).await?;
    tracing::warn!(
        subscription_id = s.id,
        order_id,
        reason = reason.as_str(),
        "Stars subscription refused at its first charge: cancelled"
    );
    Ok(s)
}

/// Stops the locked, active subscription `s` because the payment core refused one of its
/// renewal charges: cancelled by `subgate` with `reason`, and the `editUserStarSubscription`
/// effect, in the caller's transaction.
pub async fn stop(
    tx: &Transaction<'_>,
    s: &StarSubscription,
    reason: Reason,
) -> Result<StarSubscription, ApiError> {
    let stopped: StarSubscription = db::one(
        tx,
        CANCEL_SQL,
        &[&s.id, &CancelledBy::Subgate, &Status::Cancelled, &reason],
    )
    .await?;
    let user = subscribers::telegram_user_id(tx, s.subscriber_id).await?;
    enqueue_cancel(tx, &stopped, user).await?;
    tracing::warn!(
        subscription_id = s.id,
        order_id = s.order_id,
        reason = reason.as_str(),
        "Stars subscription stopped: a renewal charge was refused"
    );
    Ok(stopped)
}

/// Records a renewal charge and returns the subscription's next renewal: Telegram's date, or a
/// period after the current one (or after the charge, if later) when the door did not say.
pub async fn renewed(
    tx: &Transaction<'_>,
    id: i64,
    charge: Charge<'_>,
) -> Result<DateTime<Utc>, ApiError> {
    Ok(db::row_one(
        tx,
        RENEWED_SQL,
        &[
            &id,
            &charge.expires_at,
            &(PERIOD_SECS as f64),
            &charge.paid_at,
        ],
    )
    .await?
    .try_get("expires_at")?)
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
    let no_reason: Option<Reason> = None;
    let s: StarSubscription =
        db::one(tx, CANCEL_SQL, &[&id, &by, &Status::Cancelled, &no_reason]).await?;
    let user_id = subscribers::telegram_user_id(tx, s.subscriber_id).await?;
    enqueue_cancel(tx, &s, user_id).await?;
    if by == CancelledBy::Buyer {
        offer_to_stay(tx, &s).await?;
    }
    tracing::info!(
        subscription_id = s.id,
        by = by.as_str(),
        "Stars subscription cancelled"
    );
    Ok(Some(Ok(s)))
}

const LOCK_OF_REFERENCE_SQL: &str = concat!(
    "SELECT ",
    subscription_columns!(),
    " FROM star_subscriptions
     WHERE applied AND order_id = (SELECT id FROM orders WHERE reference = $1)
     FOR UPDATE"
);
const REENABLE_SQL: &str = "UPDATE star_subscriptions
     SET status = 'active', cancelled_by = NULL, cancelled_at = NULL,
         updated_at = statement_timestamp()
     WHERE id = $1";

/// Subscription `id`, locked `FOR UPDATE`; `None` when there is none.
pub async fn lock(tx: &Transaction<'_>, id: i64) -> Result<Option<StarSubscription>, ApiError> {
    db::opt(tx, LOCK_SQL, &[&id]).await
}

/// The subscription started by the applied first charge of the order with this reference (a
/// Stars invoice's `invoice_payload`), locked `FOR UPDATE`; `None` when there is none.
pub async fn lock_of_reference(
    tx: &Transaction<'_>,
    reference: &str,
) -> Result<Option<StarSubscription>, ApiError> {
    db::opt(tx, LOCK_OF_REFERENCE_SQL, &[&reference]).await
}

/// Records locked, active subscription `id` cancelled by its buyer in Telegram: like
/// [`cancel`] by the buyer, without asking Telegram to cancel what it reported cancelled.
pub async fn cancelled_in_telegram(tx: &Transaction<'_>, id: i64) -> Result<(), ApiError> {
    let no_reason: Option<Reason> = None;
    let s: StarSubscription = db::one(
        tx,
        CANCEL_SQL,
        &[&id, &CancelledBy::Buyer, &Status::Cancelled, &no_reason],
    )
    .await?;
    offer_to_stay(tx, &s).await?;
    tracing::info!(
        subscription_id = s.id,
        "Stars subscription cancelled by its buyer in Telegram"
    );
    Ok(())
}

/// The cancel offer of subscription `s`, which its buyer cancelled (in Telegram or with the
/// bot's button), when the owner switched it on: once per subscription, in this transaction.
async fn offer_to_stay(tx: &Transaction<'_>, s: &StarSubscription) -> Result<(), ApiError> {
    let language = crate::present::locale::default_language();
    if crate::messages::automations::on_cancelled(tx, s.id, s.subscriber_id, language).await? {
        tracing::info!(subscription_id = s.id, "cancel offer written");
    }
    Ok(())
}

/// Makes locked subscription `id`, which its buyer cancelled, active again (the buyer
/// re-enabled it in Telegram): its renewal charges are applied again.
pub async fn reenabled(tx: &Transaction<'_>, id: i64) -> Result<(), ApiError> {
    db::execute(tx, REENABLE_SQL, &[&id]).await?;
    tracing::info!(
        subscription_id = id,
        "Stars subscription re-enabled by its buyer in Telegram"
    );
    Ok(())
}

const RENEWS_AT_OF_MEMBERSHIP_SQL: &str = "SELECT max(ss.expires_at) AS renews_at
     FROM memberships m
     JOIN star_subscriptions ss ON ss.subscriber_id = m.subscriber_id
     JOIN orders o ON o.id = ss.order_id
     WHERE m.id = $1 AND ss.applied AND ss.status = 'active'
       AND ss.expires_at > statement_timestamp()
       AND (o.channel_id = m.channel_id
            OR EXISTS (SELECT 1 FROM plan_channels pc
                       WHERE pc.plan_id = o.plan_id AND pc.channel_id = m.channel_id))";

/// When the active Stars subscription that renews membership `membership_id` (its channel's,
/// or a bundle's including it) renews next; `None` when none does (never had one, cancelled,
/// or its renewal date has passed).
pub async fn renews_at_of_membership(
    client: &impl deadpool_postgres::GenericClient,
    membership_id: i64,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    Ok(
        db::row_one(client, RENEWS_AT_OF_MEMBERSHIP_SQL, &[&membership_id])
            .await?
            .try_get("renews_at")?,
    )
}

/// The `editUserStarSubscription(is_canceled = true)` effect of cancelled subscription `s`,
/// for Telegram user `user_id` (whose charge started it), once per subscription.
async fn enqueue_cancel(
    tx: &Transaction<'_>,
    s: &StarSubscription,
    user_id: i64,
) -> Result<(), ApiError> {
    effects::enqueue(
        &**tx,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: Some(s.order_id),
            chat_id: None,
            user_id,
            payload: Payload::SubscriptionCancel(SubscriptionCancel {
                subscription_id: s.id,
            }),
            dedupe_key: Some(format!("subscription_cancel:{}", s.id)),
        },
    )
    .await?;
    Ok(())
}

/// The select list of [`Cancelled`], over `star_subscriptions ss JOIN channels c JOIN
/// subscribers s LEFT JOIN memberships m`.
macro_rules! cancelled_columns {
    () => {
        "ss.charge_id, ss.status, ss.cancelled_by, c.id AS channel_id, c.title, \
         m.expires_at AS access_until, s.language, c.translations"
    };
}

const CANCELLED_SQL: &str = concat!(
    "SELECT ",
    cancelled_columns!(),
    "
     FROM star_subscriptions ss
     JOIN channels c ON c.id = ss.channel_id
     JOIN subscribers s ON s.id = ss.subscriber_id
     LEFT JOIN memberships m
            ON m.subscriber_id = ss.subscriber_id AND m.channel_id = ss.channel_id
           AND ",
    crate::access::memberships::holds_access_sql!("m"),
    "
     WHERE ss.id = $1"
);

/// A subscription as its cancellation effect needs it: its charge, status and who cancelled
/// it, its channel and, while its membership still holds access, the end of that access (for
/// the buyer's confirmation).
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub charge_id: String,
    pub status: Status,
    pub cancelled_by: Option<CancelledBy>,
    pub channel_id: i32,
    pub title: String,
    pub access_until: Option<Expiry>,
    /// The buyer's remembered language.
    pub language: Option<crate::present::locale::Language>,
    /// The channel's title in other languages.
    pub translations: crate::present::translations::Translations,
}

crate::from_row!(Cancelled [cancelled_columns!()] {
    charge_id,
    status,
    cancelled_by,
    channel_id,
    title,
    access_until,
    language,
    translations,
});

/// The subscription `id` as its cancellation effect needs it, if it still exists.
pub async fn cancelled(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<Cancelled>, ApiError> {
    db::opt(client, CANCELLED_SQL, &[&id]).await
}
