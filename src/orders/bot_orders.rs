//! The bot's orders: one pending order per buyer and plan (a unique index on the bot's pending
//! orders backs it), reused while it can still be paid as invoiced, retired once it cannot,
//! and invoiced once.
//!
//! An order is reusable while it holds a valid seat hold (whatever its age or price: the hold is
//! the buyer's, and a new order would only extend it), or, holding none, while it is at the
//! plan's current list price, young enough to be paid as invoiced, and — if the buyer gave a
//! promo code since it was made — uses that code ([`reusable`]). A superseded order is never
//! reused.
//!
//! A stale order is retired before a new one is made ([`retire_stale`]). One that may still be
//! paid — a card order (its link may be out), or a Stars order whose pre-checkout was approved
//! (the buyer may be paying right now) — is never cancelled: it is *superseded*
//! (`superseded_at`). It stays pending, so a late payment of it is judged by the core's seat
//! rules like any other (applied; or `hold_expired`, refunded for Stars, reviewed for cards),
//! and it makes room for the new order under the one-pending-bot-order index. A superseded
//! order holds no valid hold (an order holding one is reused instead), so superseding can never
//! give a buyer two seats. Any other stale order (a Stars invoice never approved) is cancelled,
//! giving back its code's use: its invoice is then refused at pre-checkout.
//!
//! The invoice is an outbox effect keyed on its order ([`INVOICE_KEY_PREFIX`]), so however often
//! the buy button is pressed, one order gets one invoice; a Crypto Pay invoice is keyed on the
//! order and its asset ([`enqueue_crypto_invoice`]).
//!
//! Every function here runs under the pair locks of the plan's channels, which every writer of
//! these orders' state takes (the lock order: docs/locking.md).

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;

use crate::{
    catalog::{plans::Plan, promo_codes::Discount},
    common::{error::ApiError, ids::SubscriberId},
    db::{self, FromRow},
    outbox::effects::{self, NewEffect, Payload},
    present::translations::Translations,
};

/// A pending order of the bot that can still be paid as invoiced ([`reusable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reusable {
    pub id: i64,
    /// The promo code the order was made with.
    pub promo_code_id: Option<i64>,
}

crate::from_row!(Reusable ["id, promo_code_id"] {
    id,
    promo_code_id,
});

const REUSABLE_SQL: &str = "SELECT id, promo_code_id FROM orders
             WHERE subscriber_id = $1 AND plan_id = $2 AND status = 'pending'
               AND superseded_at IS NULL
               AND (hold_until > statement_timestamp()
                    OR (hold_until IS NULL AND list_price_minor = $3 AND currency = $4
                        AND created_at > statement_timestamp() - make_interval(secs => $5)
                        AND ($6::bigint IS NULL OR promo_code_id = $6)))
             ORDER BY id DESC LIMIT 1";

/// The buyer's newest order of the plan that can still be paid as invoiced: pending, not
/// superseded, and either holding a valid seat hold, or holding none, made at the plan's
/// current price, younger than `open_secs`, and — when the buyer gave a code since
/// (`code_id`) — with that code.
pub async fn reusable(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    plan: &Plan,
    open_secs: i64,
    code_id: Option<i64>,
) -> Result<Option<Reusable>, ApiError> {
    db::opt(
        tx,
        REUSABLE_SQL,
        &[
            &subscriber_id,
            &plan.id,
            &plan.price_minor,
            &plan.currency,
            &(open_secs as f64),
            &code_id,
        ],
    )
    .await
}

const RETIRE_SQL: &str = "WITH stale AS (
         SELECT o.id,
                o.currency <> 'XTR'
                OR EXISTS (SELECT 1 FROM pre_checkout_decisions d
                           WHERE d.order_id = o.id AND d.ok) AS may_be_paid
         FROM orders o
         WHERE o.subscriber_id = $1 AND o.plan_id = $2 AND o.status = 'pending'
           AND o.via_bot AND o.superseded_at IS NULL
     ), superseded AS (
         UPDATE orders o SET superseded_at = statement_timestamp()
         FROM stale s WHERE o.id = s.id AND s.may_be_paid
         RETURNING o.id
     ), cancelled AS (
         UPDATE orders o SET status = 'cancelled', hold_until = NULL, promo_held_until = NULL
         FROM stale s WHERE o.id = s.id AND NOT s.may_be_paid
         RETURNING o.id
     )
     SELECT (SELECT count(*) FROM superseded) AS superseded,
            (SELECT count(*) FROM cancelled) AS cancelled";

/// Retires the buyer's pending bot orders of the plan that [`reusable`] passed over (hold ran
/// out, too old, outdated price), making room for the new one under the unique index on the
/// bot's pending orders: superseded when it may still be paid (a card order, whose link may
/// have been sent or be sent by a worker that read it before this; a Stars order with an
/// approved pre-checkout), else cancelled. A cancelled order's invoice is refused at
/// pre-checkout, which takes the pair lock held here, so none can be approved in between.
/// Staff-made orders are left alone.
pub async fn retire_stale(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    plan_id: i64,
) -> Result<(), ApiError> {
    let row = db::row_one(tx, RETIRE_SQL, &[&subscriber_id, &plan_id]).await?;
    let (superseded, cancelled): (i64, i64) =
        (row.try_get("superseded")?, row.try_get("cancelled")?);
    if superseded + cancelled > 0 {
        tracing::info!(
            subscriber_id,
            plan_id,
            superseded,
            cancelled,
            "stale bot orders retired"
        );
    }
    Ok(())
}

/// Deletes an order the bot made in this transaction and then refused (its hold or its free
/// claim): a refused press leaves no order behind.
pub async fn delete_refused(tx: &Transaction<'_>, order_id: i64) -> Result<(), ApiError> {
    tx.execute("DELETE FROM orders WHERE id = $1", &[&order_id])
        .await?;
    Ok(())
}

/// Makes the bot's order of `plan` for `buyer` at the plan's price less `discount` (which
/// holds its code's use for `hold_secs` from now); the order's channel is the plan's first.
pub async fn create(
    tx: &Transaction<'_>,
    buyer: SubscriberId,
    plan: &Plan,
    discount: Option<Discount>,
    hold_secs: i64,
) -> Result<i64, ApiError> {
    Ok(
        super::insert_for_plan(tx, buyer, plan, discount, hold_secs, true)
            .await?
            .id,
    )
}

/// An invoice's `dedupe_key` is this followed by its order's id: one invoice per order.
const INVOICE_KEY_PREFIX: &str = "invoice:";

/// Enqueues the order's invoice for Telegram user `user_id`, once per order; `false` when it
/// was enqueued before.
pub async fn enqueue_invoice(
    tx: &Transaction<'_>,
    order_id: i64,
    user_id: i64,
) -> Result<bool, ApiError> {
    enqueue_invoice_in(tx, order_id, user_id, None).await
}

/// Enqueues the order's Crypto Pay invoice in `asset` for Telegram user `user_id`, once per
/// order and asset (`invoice:<order>:<asset>`); `false` when it was enqueued before.
pub async fn enqueue_crypto_invoice(
    tx: &Transaction<'_>,
    order_id: i64,
    user_id: i64,
    asset: &str,
) -> Result<bool, ApiError> {
    enqueue_invoice_in(tx, order_id, user_id, Some(asset)).await
}

/// The invoice effect of the order: its own (`asset` `None`) or its Crypto Pay invoice in
/// `asset`, each keyed once.
async fn enqueue_invoice_in(
    tx: &Transaction<'_>,
    order_id: i64,
    user_id: i64,
    asset: Option<&str>,
) -> Result<bool, ApiError> {
    let dedupe_key = match asset {
        None => format!("{INVOICE_KEY_PREFIX}{order_id}"),
        Some(asset) => format!("{INVOICE_KEY_PREFIX}{order_id}:{asset}"),
    };
    let id = effects::enqueue_prepared(
        tx,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: Some(order_id),
            chat_id: None,
            user_id,
            payload: Payload::Invoice(effects::payload::Invoice {
                asset: asset.map(str::to_string),
            }),
            dedupe_key: Some(dedupe_key),
        },
    )
    .await?;
    Ok(id.is_some())
}

/// [`create`] and [`enqueue_invoice`] of the new order, in one statement (the invoice row as
/// `enqueue_invoice` writes it).
const INVOICED_ORDER_SQL: &str = concat!(
    "WITH o AS (",
    super::insert_for_plan_sql!(),
    " RETURNING id),
     invoice AS (
         INSERT INTO effects (kind, order_id, user_id, payload, dedupe_key)
         SELECT $12, o.id, $13, $14, $15::text || o.id FROM o
         ON CONFLICT (dedupe_key) DO NOTHING)
     SELECT id FROM o"
);

/// Makes the bot's order as [`create`] does, with its invoice for Telegram user `user_id` as
/// [`enqueue_invoice`] does; returns the order's id.
pub async fn create_invoiced(
    tx: &Transaction<'_>,
    buyer: SubscriberId,
    plan: &Plan,
    discount: Option<Discount>,
    hold_secs: i64,
    user_id: i64,
) -> Result<i64, ApiError> {
    let order = super::PlanOrderParams::new(buyer, plan, discount, hold_secs, true);
    let invoice = Payload::Invoice(effects::payload::Invoice::default());
    let (kind, payload) = (invoice.kind(), invoice.to_json());
    let mut params = order.params();
    params.extend([
        &kind as &(dyn tokio_postgres::types::ToSql + Sync),
        &user_id,
        &payload,
        &INVOICE_KEY_PREFIX,
    ]);
    Ok(db::row_one(tx, INVOICED_ORDER_SQL, &params)
        .await?
        .try_get("id")?)
}

/// The buyer's pending order that uses a promo code now, as the bot names it ([`using_code`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsingCode {
    pub amount_minor: i64,
    pub list_price_minor: i64,
    pub currency: String,
    pub channel_id: i32,
    /// Its plan's name as the catalogue shows it (a default plan is its channel).
    pub name: String,
    pub translations: Translations,
}

impl FromRow for UsingCode {
    const COLUMNS: &'static str =
        "amount_minor, list_price_minor, currency, channel_id, name, translations";

    fn from_row(r: &Row) -> Result<UsingCode, tokio_postgres::Error> {
        Ok(UsingCode {
            amount_minor: r.try_get("amount_minor")?,
            list_price_minor: r.try_get("list_price_minor")?,
            currency: r.try_get("currency")?,
            channel_id: r.try_get("channel_id")?,
            name: r.try_get("name")?,
            translations: r.try_get("translations")?,
        })
    }
}

/// The buyer's (`$1`) newest order that uses code `$2` now: pending, not superseded (the buy
/// button still reuses it) and holding the code's use; with its plan's name as the catalogue
/// shows it (a default plan is its channel).
const USING_CODE_SQL: &str = "SELECT o.amount_minor, o.list_price_minor, o.currency, o.channel_id,
            coalesce(c.title, p.title) AS name,
            coalesce(c.translations, p.translations) AS translations
     FROM orders o
     JOIN plans p ON p.id = o.plan_id
     LEFT JOIN channels c ON c.id = p.default_of
     WHERE o.subscriber_id = $1 AND o.promo_code_id = $2 AND o.status = 'pending'
       AND o.superseded_at IS NULL AND o.promo_held_until > statement_timestamp()
     ORDER BY o.id DESC LIMIT 1";

/// The buyer's newest order that uses code `promo_code_id` now: pending, not superseded (the
/// buy button still reuses it) and holding the code's use.
pub async fn using_code(
    client: &impl GenericClient,
    buyer: SubscriberId,
    promo_code_id: i64,
) -> Result<Option<UsingCode>, ApiError> {
    db::opt(client, USING_CODE_SQL, &[&buyer, &promo_code_id]).await
}
