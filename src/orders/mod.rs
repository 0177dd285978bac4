//! Orders: one intent to buy one billing period of one channel, and the thing every payment
//! door points at (its `reference` travels through the gateway and comes back with the
//! payment). This module owns the `orders` rows and their invoices (`invoices`; Crypto Pay's in
//! [`crypto_invoices`]); `lock_order`
//! takes the lock order (`docs/locking.md`) that every change of a hold takes, and [`seats`]
//! owns the seat rule.
//!
//! Creating and reading orders takes no pair lock: they touch no hold and no membership. Cancel
//! and checkout do touch the hold, so they lock in the one lock order through [`seats`].

pub mod bot_orders;
mod checkout;
pub mod crypto_invoices;
mod invoices;
mod lock_order;
pub mod seats;
pub mod trials;

pub use invoices::*;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use rand::RngCore;
use serde::Serialize;

use crate::{
    access::{memberships, subscribers},
    catalog::{channels, plans, promo_codes},
    common::{
        currency::Money,
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db,
    present::{locale::Language, translations::Translations},
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
         invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, \
         discount_minor, promo_code_id, promo_held_until, \
         (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code"
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
    "created_at": "2025-01-01T10:00:00Z", "paid_at": null, "plan_id": 1,
    "list_price_minor": 19900, "discount_minor": 0, "promo_code": null}))]
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
    /// again once it could no longer be reused), or its gateway reported its payment failed
    /// ([`release_holds`]). It stays `pending`: a late payment of it is judged by the seat
    /// rules like any other, but the bot never offers it again.
    pub superseded_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
    /// The plan the order buys (an order made by channel buys the channel's default plan).
    pub plan_id: i64,
    /// The plan's price when the order was made.
    pub list_price_minor: i64,
    /// What its promo code took off; `amount_minor` = `list_price_minor` − `discount_minor`.
    pub discount_minor: i64,
    /// The promo code the order uses, as the code's text.
    pub promo_code: Option<String>,
    #[serde(skip)]
    pub promo_code_id: Option<i64>,
    /// Until when a pending order holds a use of its promo code.
    #[serde(skip)]
    pub promo_held_until: Option<DateTime<Utc>>,
}

impl Order {
    /// The order's buyer, typed for the pair lock and the seat rule.
    pub fn subscriber(&self) -> SubscriberId {
        SubscriberId(self.subscriber_id)
    }

    /// The order's channel, typed for the pair lock and the seat rule.
    pub fn channel(&self) -> ChannelId {
        ChannelId(self.channel_id)
    }

    /// What the order asks: the channel's price when it was made.
    pub fn price(&self) -> Money {
        Money::new(self.amount_minor, &self.currency)
    }

    /// The order's use of its promo code, as [`promo_codes::use_still_held`] decides it.
    pub fn promo_use(&self) -> promo_codes::OrderUse {
        promo_codes::OrderUse {
            order_id: self.id,
            subscriber: self.subscriber(),
            promo_code_id: self.promo_code_id,
            promo_held_until: self.promo_held_until,
            pending: self.status == Status::Pending,
        }
    }
}

crate::from_row!(Order [order_columns!()] {
    id,
    reference,
    subscriber_id,
    channel_id,
    amount_minor,
    currency,
    status,
    hold_until,
    invoice_link,
    superseded_at,
    created_at,
    paid_at,
    plan_id,
    list_price_minor,
    discount_minor,
    promo_code,
    promo_code_id,
    promo_held_until,
});

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
// A cancelled order gives its seat hold and its promo use back at once.
const CANCEL_SQL: &str = concat!(
    "UPDATE orders SET status = $2, hold_until = NULL, promo_held_until = NULL
     WHERE id = $1 RETURNING ",
    order_columns!()
);
const SET_INVOICE_LINK_SQL: &str =
    "UPDATE orders SET invoice_link = $2 WHERE id = $1 AND invoice_link IS NULL";

/// Creates an order of `subscriber_id` for `channel_id` at the channel's price now (amount and
/// currency are copied, so a later price change does not touch it). 422 naming the field when
/// the subscriber or the channel does not exist or the channel is inactive; 409 when the
/// subscriber already has live lifetime access to it.
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
    refuse_lifetime_again(tx, subscriber_id, &[channel_id]).await?;
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

/// SQL: the insert of [`insert_for_plan`], without its `RETURNING`; its parameters `$1`–`$11`
/// are [`PlanOrderParams::params`].
macro_rules! insert_for_plan_sql {
    () => {
        "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency, plan_id,
                             list_price_minor, discount_minor, promo_code_id, promo_held_until,
                             via_bot)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                 CASE WHEN $9::bigint IS NULL THEN NULL
                      ELSE statement_timestamp() + make_interval(secs => $10::float8) END,
                 $11)"
    };
}
pub(crate) use insert_for_plan_sql;

const INSERT_FOR_PLAN_SQL: &str = concat!(insert_for_plan_sql!(), " RETURNING ", order_columns!());

/// The values of a new order of a plan ([`insert_for_plan`]), as parameters of
/// [`insert_for_plan_sql!`].
pub struct PlanOrderParams<'a> {
    reference: String,
    subscriber: SubscriberId,
    plan: &'a plans::Plan,
    amount_minor: i64,
    discount_minor: i64,
    promo_code_id: Option<i64>,
    hold_secs: f64,
    via_bot: bool,
}

impl<'a> PlanOrderParams<'a> {
    /// `plan` for `subscriber` at the plan's price less `discount`, holding the code's use for
    /// `hold_secs`; a fresh reference.
    pub fn new(
        subscriber: SubscriberId,
        plan: &'a plans::Plan,
        discount: Option<promo_codes::Discount>,
        hold_secs: i64,
        via_bot: bool,
    ) -> Self {
        let discount_minor = discount.map_or(0, |d| d.discount_minor);
        PlanOrderParams {
            reference: new_reference(),
            subscriber,
            plan,
            amount_minor: plan.price_minor - discount_minor,
            discount_minor,
            promo_code_id: discount.map(|d| d.promo_code_id),
            hold_secs: hold_secs as f64,
            via_bot,
        }
    }

    /// `$1`–`$11` of [`insert_for_plan_sql!`].
    pub fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        vec![
            &self.reference,
            &self.subscriber,
            &self.plan.channel_ids[0],
            &self.amount_minor,
            &self.plan.currency,
            &self.plan.id,
            &self.plan.price_minor,
            &self.discount_minor,
            &self.promo_code_id,
            &self.hold_secs,
            &self.via_bot,
        ]
    }
}

/// Inserts a new order of `plan` for `subscriber` at the plan's price less `discount` (whose
/// use the caller took under the code's lock: the order holds it for `hold_secs`); its
/// `channel_id` is the plan's first channel. `via_bot`: the bot's own order (one pending per
/// buyer and plan). The checks are the caller's ([`create_for_plan`], the bot's buy press).
pub async fn insert_for_plan(
    tx: &Transaction<'_>,
    subscriber: SubscriberId,
    plan: &plans::Plan,
    discount: Option<promo_codes::Discount>,
    hold_secs: i64,
    via_bot: bool,
) -> Result<Order, ApiError> {
    let values = PlanOrderParams::new(subscriber, plan, discount, hold_secs, via_bot);
    db::one(tx, INSERT_FOR_PLAN_SQL, &values.params()).await
}

/// 409 when the subscriber already holds live lifetime access to every one of `channel_ids`:
/// the order would buy nothing (API.md "Offers": buying lifetime again is refused while it is
/// live). Asked without the pair lock, so a lifetime grant racing the order can still slip by;
/// its payment is then refused as `already_lifetime` by the payment core.
async fn refuse_lifetime_again(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_ids: &[i32],
) -> Result<(), ApiError> {
    if memberships::lifetime_in_every(tx, SubscriberId(subscriber_id), channel_ids).await? {
        let what = if channel_ids.len() > 1 {
            "every channel of this plan"
        } else {
            "this channel"
        };
        return Err(ApiError::Conflict(format!(
            "the subscriber already has lifetime access to {what}: there is nothing to buy"
        )));
    }
    Ok(())
}

/// Creates an order of `subscriber_id` for plan `plan_id` at the plan's price now, less what
/// `promo_code` takes off ([`promo_codes::discount_for_new_order`], which takes one use of the
/// code for this order: it holds it for `hold_secs`). The order's `channel_id` is the plan's
/// first channel. 422 naming the field when the subscriber or the plan does not exist, the plan
/// or one of its channels is inactive, or the code cannot be used; 409 when the subscriber
/// already has live lifetime access to every channel of the plan. An order a code makes free
/// (amount 0 of a paid plan) is claimed at once ([`trials::claim`]) and comes back paid; 409
/// (and no order) when the claim is refused. A trial plan's order stays pending until claimed.
pub async fn create_for_plan(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    plan_id: i64,
    promo_code: Option<&str>,
    hold_secs: i64,
) -> Result<Order, ApiError> {
    let subscriber = subscribers::exists(tx, subscriber_id).await?;
    let plan = plans::get_for_order(tx, plan_id).await?;
    let mut errors = std::collections::BTreeMap::new();
    if !subscriber {
        errors.insert(
            "subscriber_id".to_string(),
            "no such subscriber".to_string(),
        );
    }
    match &plan {
        None => {
            errors.insert("plan_id".to_string(), "no such plan".to_string());
        }
        Some(p) if !p.active => {
            errors.insert("plan_id".to_string(), "the plan is not active".to_string());
        }
        Some(p) => {
            for c in &p.channel_ids {
                if !channels::price(tx, *c).await?.is_some_and(|c| c.active) {
                    errors.insert(
                        "plan_id".to_string(),
                        "a channel of the plan is not active".to_string(),
                    );
                }
            }
        }
    }
    let Some(plan) = plan.filter(|_| errors.is_empty()) else {
        return Err(ApiError::Validation(errors));
    };
    // A code may make the order free, and a free order is claimed at once, in this transaction
    // ([`trials::claim`]): so the pair locks of the plan's channels come first, before the
    // code's row, as in every transaction of the lock order (`docs/locking.md`).
    if promo_code.is_some() {
        for channel in plan.channels_ascending() {
            db::lock_pair(tx, SubscriberId(subscriber_id), channel).await?;
        }
    }
    refuse_lifetime_again(tx, subscriber_id, &plan.channel_ids).await?;
    let discount = match promo_code {
        Some(code) => Some(
            promo_codes::discount_for_new_order(tx, code, SubscriberId(subscriber_id), &plan)
                .await?,
        ),
        None => None,
    };
    let order = insert_for_plan(
        tx,
        SubscriberId(subscriber_id),
        &plan,
        discount,
        hold_secs,
        false,
    )
    .await?;
    // 100 % off: granted at once, like a trial's claim (a refusal undoes the order too).
    if order.amount_minor == 0 && plan.kind == plans::Kind::Paid {
        if let Err(refusal) = trials::claim(tx, order.id).await? {
            return Err(ApiError::Conflict(refusal.detail().into()));
        }
        return get(tx, order.id)
            .await?
            .ok_or_else(|| ApiError::internal("a claimed order vanished"));
    }
    Ok(order)
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

/// Cancels a pending order and clears its holds, so its seat and its promo code's use are free
/// at once; 404 for no such
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

/// What a payment that failed at the gateway did to its order ([`release_holds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldRelease {
    /// The order's seat hold and promo code use end now, and the bot offers it no more.
    Released,
    /// Released before (or never held and retired already): nothing changed.
    NotHeld,
    /// Paid or cancelled: nothing to release.
    NotPending,
    /// No order has this reference.
    UnknownOrder,
}

impl HoldRelease {
    /// The result's name, as door 4 answers it.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldRelease::Released => "released",
            HoldRelease::NotHeld => "not_held",
            HoldRelease::NotPending => "not_pending",
            HoldRelease::UnknownOrder => "unknown_order",
        }
    }
}

// A hold that still runs ends now (an ended one keeps its time: the hold rules count it); a bot
// order is retired from the bot's reuse, as a superseded one is, since its gateway page can no
// longer be paid (only bot orders are ever superseded). `$2` is [`Status::Pending`].
const RELEASE_SQL: &str = "UPDATE orders
     SET hold_until = CASE WHEN hold_until > statement_timestamp() THEN statement_timestamp()
                           ELSE hold_until END,
         promo_held_until = CASE WHEN promo_held_until > statement_timestamp()
                                 THEN statement_timestamp() ELSE promo_held_until END,
         superseded_at = CASE WHEN via_bot
                              THEN COALESCE(superseded_at, statement_timestamp()) END
     WHERE id = $1 AND status = $2
       AND (hold_until > statement_timestamp() OR promo_held_until > statement_timestamp()
            OR (via_bot AND superseded_at IS NULL))";

/// Releases what the pending order `reference` holds because its payment failed at the gateway
/// (a Stripe delayed payment method that did not go through): its seat hold and its promo
/// code's use end now, so both are free for other buyers at once, and the bot stops offering
/// a bot order (its payment page is spent: a press of buy makes a new order). The order stays
/// `pending`, so a late payment of it is still judged by the seat rules. One transaction in the
/// lock order, like every change of a hold; a repeat changes nothing.
pub async fn release_holds(
    pool: &deadpool_postgres::Pool,
    reference: &str,
) -> Result<HoldRelease, ApiError> {
    crate::transaction!(pool, |tx| {
        let Some(locked) = seats::lock_order_by_reference(tx, reference).await? else {
            return Ok(HoldRelease::UnknownOrder);
        };
        if locked.order.status != Status::Pending {
            return Ok(HoldRelease::NotPending);
        }
        let changed = db::execute(tx, RELEASE_SQL, &[&locked.order.id, &Status::Pending]).await?;
        Ok(if changed == 0 {
            HoldRelease::NotHeld
        } else {
            HoldRelease::Released
        })
    })
}
