//! Fiscal receipts: the Checkbox receipt a card payment in hryvnias owes (Ukraine's law on
//! settlement operations: every sale to a consumer is registered with the tax service, here
//! through Checkbox, a software cash register), and the return receipt its refund owes. Owns
//! `fiscal_receipts` and `fiscal_register`.
//!
//! **Owed in the payment's transaction.** A payment that becomes `applied` in `UAH` through a
//! card door (door 1's gateways, WayForPay, Stripe, Monobank: every gateway but Telegram Stars
//! and Crypto Pay, [`is_card`]) owes one sale receipt while receipts are on
//! ([`set_enabled`]: `subgate serve` writes whether `CHECKBOX_*` is configured). [`SALE_SQL`]
//! writes its `fiscal_receipts` row and its `fiscal_receipt` effect (keyed
//! `receipt:sale:{payment}`) in the transaction that applies the payment — the core's locked
//! path ([`enqueue_sale`]) and its fast path (the same statement, in its pipeline) alike, so a
//! payment is never applied without the receipt it owes, and a redelivery (answered from the
//! stored row) owes nothing more. A payment that leaves `applied` because its money went back (a
//! refund at the gateway, a dispute) owes one return receipt ([`enqueue_return`], keyed
//! `receipt:return:{payment}`), in that transaction, when its sale receipt did not fail.
//!
//! **Issued by the effects worker** (`app::worker`), after commit, through [`checkbox`]: the
//! row's `receipt_id` is the id Checkbox is given, chosen when the row is written, so a request
//! sent again (a crash after Checkbox accepted it, a lost answer, two workers after a lease ran
//! out) finds the receipt the first made instead of making a second. The worker records the
//! outcome here in the effect's own record transaction: `done` with the fiscal code and the
//! receipt's public page ([`record_done`], which also tells the buyer, once), an attempt that
//! failed ([`record_attempt`]), or `failed` when the effect is dead-lettered ([`record_failed`]).
//! A receipt never holds back access: the grant is its own effect.

pub mod checkbox;

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;

use crate::{
    access::subscribers,
    common::{currency::Money, error::ApiError, vocabulary::Gateway},
    db,
    outbox::effects::{NewEffect, Payload, enqueue, payload::BotMessage},
    present::{
        render,
        texts::{self, Language},
    },
};

crate::text_enum! {
    /// What a fiscal receipt registers.
    pub enum Kind {
        /// The sale a payment made.
        Sale => "sale",
        /// The money of that sale given back (a refund, a dispute).
        Return => "return",
    }
}

crate::text_enum! {
    /// Where a fiscal receipt stands: the `state` column.
    pub enum State {
        /// Owed: not yet confirmed by Checkbox (being issued, or retried).
        Pending => "pending",
        /// Confirmed by Checkbox: it has its fiscal code and public page.
        Done => "done",
        /// Its effect was dead-lettered: refused for good, or failing past the retry horizon.
        Failed => "failed",
    }
}

/// The one currency Checkbox registers receipts in.
pub const CURRENCY: &str = "UAH";

/// Whether payments through `gateway` are card payments that owe a receipt: every door but
/// Telegram Stars (paid inside Telegram, not by card) and Crypto Pay (not a card) — door 1's
/// gateways, WayForPay, Stripe and Monobank. [`SALE_SQL`] spells the same rule.
pub fn is_card(gateway: &Gateway) -> bool {
    !matches!(gateway, Gateway::TelegramStars | Gateway::CryptoPay)
}

/// Whether applied payment `p` may owe a sale receipt (in `UAH`, positive, through a card
/// door): the part of [`SALE_SQL`]'s rule that needs no database, so a payment that cannot
/// owe one (a Stars payment) does not send the statement.
pub fn may_owe(p: &crate::payments::core::Payment) -> bool {
    p.currency == CURRENCY && p.amount_minor > 0 && is_card(&p.gateway)
}

/// The key of the effect that issues receipt `kind` of payment `payment_id`.
pub fn effect_key(kind: Kind, payment_id: i64) -> String {
    format!("receipt:{kind}:{payment_id}")
}

/// The sale receipt payment `$1` owes, written with its effect: only when receipts are on, the
/// payment is `applied`, in `UAH`, of a positive amount and through a card door ([`is_card`]);
/// once (the row is unique per payment and kind, the effect's key too). The core's locked path
/// runs it in the payment's transaction ([`enqueue_sale`]), the fast path in its pipeline,
/// after its write, inside the same transaction.
pub const SALE_SQL: &str = "WITH owed AS (
         SELECT p.id, p.order_id, s.telegram_user_id
         FROM payments p
         JOIN fiscal_register r ON r.enabled
         JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.id = $1 AND p.outcome = 'applied' AND p.currency = 'UAH'
           AND p.amount_minor > 0 AND p.gateway NOT IN ('telegram_stars', 'cryptopay')
     ), receipt AS (
         INSERT INTO fiscal_receipts (payment_id, kind)
         SELECT id, 'sale' FROM owed
         ON CONFLICT (payment_id, kind) DO NOTHING
         RETURNING id, payment_id
     )
     INSERT INTO effects (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'fiscal_receipt', r.payment_id, o.order_id, o.telegram_user_id,
            jsonb_build_object('fiscal_receipt_id', r.id), 'receipt:sale:' || r.payment_id
     FROM receipt r JOIN owed o ON o.id = r.payment_id
     ON CONFLICT (dedupe_key) DO NOTHING";

/// The return receipt payment `$1` owes now that its money went back (`refunded` or
/// `disputed`): only when it has a sale receipt that did not fail; once.
const RETURN_SQL: &str = "WITH owed AS (
         SELECT p.id, p.order_id, s.telegram_user_id
         FROM payments p
         JOIN fiscal_receipts sale ON sale.payment_id = p.id AND sale.kind = 'sale'
                                  AND sale.state <> 'failed'
         JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.id = $1 AND p.outcome IN ('refunded', 'disputed')
     ), receipt AS (
         INSERT INTO fiscal_receipts (payment_id, kind)
         SELECT id, 'return' FROM owed
         ON CONFLICT (payment_id, kind) DO NOTHING
         RETURNING id, payment_id
     )
     INSERT INTO effects (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'fiscal_receipt', r.payment_id, o.order_id, o.telegram_user_id,
            jsonb_build_object('fiscal_receipt_id', r.id), 'receipt:return:' || r.payment_id
     FROM receipt r JOIN owed o ON o.id = r.payment_id
     ON CONFLICT (dedupe_key) DO NOTHING";

/// Writes the sale receipt payment `payment_id` owes, if any ([`SALE_SQL`]), in the payment's
/// transaction. Returns whether one was written now.
pub async fn enqueue_sale(tx: &Transaction<'_>, payment_id: i64) -> Result<bool, ApiError> {
    Ok(db::execute(tx, SALE_SQL, &[&payment_id]).await? > 0)
}

/// Writes the return receipt payment `payment_id` owes, if any ([`RETURN_SQL`]), in the
/// transaction that took its money back. Returns whether one was written now.
pub async fn enqueue_return(tx: &Transaction<'_>, payment_id: i64) -> Result<bool, ApiError> {
    Ok(db::execute(tx, RETURN_SQL, &[&payment_id]).await? > 0)
}

const SET_ENABLED_SQL: &str = "UPDATE fiscal_register
     SET enabled = $1, updated_at = statement_timestamp()
     WHERE enabled IS DISTINCT FROM $1";

/// Records whether receipts are on (Checkbox configured): `subgate serve` calls it at
/// start-up. Every replica runs with the same settings, so the last to start says what all say.
pub async fn set_enabled(client: &impl GenericClient, enabled: bool) -> Result<(), ApiError> {
    db::execute(client, SET_ENABLED_SQL, &[&enabled]).await?;
    Ok(())
}

/// A receipt as staff see it on its payment: its state and, once done, its public page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"state": "done", "url": "https://check.checkbox.ua/7a1c0d1e-5b52-4bd5-9a3e-0c4f36d1f8a2"}))]
pub struct View {
    pub state: State,
    /// The receipt's public page at Checkbox, once it is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

struct ViewRow {
    payment_id: i64,
    state: State,
    url: Option<String>,
}

crate::from_row!(ViewRow {
    payment_id,
    state,
    url
});

const VIEWS_SQL: &str = "SELECT payment_id, state, url FROM fiscal_receipts
     WHERE payment_id = ANY($1) AND kind = $2";

/// The receipts of `kind` of the payments `ids`, by payment (a payment without one is absent).
pub async fn views(
    client: &impl GenericClient,
    ids: &[i64],
    kind: Kind,
) -> Result<HashMap<i64, View>, ApiError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<ViewRow> = db::all(client, VIEWS_SQL, &[&ids, &kind]).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.payment_id,
                View {
                    state: r.state,
                    url: r.url,
                },
            )
        })
        .collect())
}

/// What the worker needs to issue a receipt: the row, its payment's money and what was sold.
#[derive(Debug, Clone)]
pub struct ToIssue {
    pub id: i64,
    pub payment_id: i64,
    pub kind: Kind,
    pub state: State,
    /// The id Checkbox is given for the receipt (a UUID, as text).
    pub receipt_id: String,
    pub amount_minor: i64,
    pub currency: String,
    /// The plan the payment bought (`None`: the order or plan is gone).
    pub plan_id: Option<i64>,
    pub plan_title: Option<String>,
    pub channel_title: Option<String>,
    /// For a return: its sale receipt's state and id at Checkbox.
    pub sale_state: Option<State>,
    pub sale_receipt_id: Option<String>,
}

/// The select list of [`ToIssue`] (a macro, so [`TO_ISSUE_SQL`] can splice it).
macro_rules! to_issue_columns {
    () => {
        "r.id, r.payment_id, r.kind, r.state, r.receipt_id::text AS receipt_id, p.amount_minor, \
         p.currency, pl.id AS plan_id, pl.title AS plan_title, c.title AS channel_title, \
         sale.state AS sale_state, sale.receipt_id::text AS sale_receipt_id"
    };
}

crate::from_row!(ToIssue [to_issue_columns!()] {
    id,
    payment_id,
    kind,
    state,
    receipt_id,
    amount_minor,
    currency,
    plan_id,
    plan_title,
    channel_title,
    sale_state,
    sale_receipt_id,
});

impl ToIssue {
    /// What the receipt's one good is called: the plan's title, else the channel's.
    pub fn good_name(&self) -> String {
        let name = self
            .plan_title
            .as_deref()
            .or(self.channel_title.as_deref())
            .unwrap_or("Subscription")
            .trim();
        render::clip(name, checkbox::GOOD_NAME_MAX)
    }

    /// The good's code: the plan's id (`plan-7`), the same for every sale of the plan.
    pub fn good_code(&self) -> String {
        match self.plan_id {
            Some(id) => format!("plan-{id}"),
            None => format!("payment-{}", self.payment_id),
        }
    }
}

const TO_ISSUE_SQL: &str = concat!(
    "SELECT ",
    to_issue_columns!(),
    "
     FROM fiscal_receipts r
     JOIN payments p ON p.id = r.payment_id
     LEFT JOIN orders o ON o.id = p.order_id
     LEFT JOIN plans pl ON pl.id = o.plan_id
     LEFT JOIN channels c ON c.id = p.channel_id
     LEFT JOIN fiscal_receipts sale
            ON sale.payment_id = r.payment_id AND sale.kind = 'sale' AND r.kind = 'return'
     WHERE r.id = $1"
);

/// Receipt `id` as the worker issues it; `None` when there is no such row.
pub async fn to_issue(client: &impl GenericClient, id: i64) -> Result<Option<ToIssue>, ApiError> {
    db::opt(client, TO_ISSUE_SQL, &[&id]).await
}

const DONE_SQL: &str = "UPDATE fiscal_receipts
     SET state = 'done', fiscal_code = $2, url = $3, attempts = attempts + 1, last_error = NULL,
         done_at = statement_timestamp()
     WHERE id = $1 AND state <> 'done'
     RETURNING payment_id, kind";

/// Records receipt `id` done — Checkbox confirmed it with `fiscal_code`, its public page at
/// `url` — and tells the buyer, once (a `bot_message` effect keyed `receipt_link:{id}`), in the
/// record transaction of its effect. A receipt done already is left alone.
pub async fn record_done(
    tx: &Transaction<'_>,
    id: i64,
    fiscal_code: &str,
    url: &str,
) -> Result<(), ApiError> {
    let Some(row) = db::row_opt(tx, DONE_SQL, &[&id, &fiscal_code, &url]).await? else {
        return Ok(());
    };
    let payment_id: i64 = row.try_get("payment_id")?;
    let kind: Kind = row.try_get("kind")?;
    tell_buyer(tx, id, payment_id, kind, url).await
}

const BUYER_SQL: &str = "SELECT s.telegram_user_id, p.amount_minor, p.currency, p.channel_id,
         pl.title AS plan_title
     FROM payments p
     JOIN subscribers s ON s.id = p.subscriber_id
     LEFT JOIN orders o ON o.id = p.order_id
     LEFT JOIN plans pl ON pl.id = o.plan_id
     WHERE p.id = $1";

/// The buyer's message with the link to receipt `id` of payment `payment_id`, in their
/// language as remembered now.
async fn tell_buyer(
    tx: &Transaction<'_>,
    id: i64,
    payment_id: i64,
    kind: Kind,
    url: &str,
) -> Result<(), ApiError> {
    let Some(row) = db::row_opt(tx, BUYER_SQL, &[&payment_id]).await? else {
        return Ok(());
    };
    let user: i64 = row.try_get("telegram_user_id")?;
    if user <= 0 {
        return Ok(());
    }
    let l = Language::choose(
        subscribers::language_of_telegram_user(tx, user).await?,
        None,
    );
    let money = Money::new(
        row.try_get("amount_minor")?,
        &row.try_get::<_, String>("currency")?,
    );
    let price = render::price(l, &money);
    let channel: Option<i32> = row.try_get("channel_id")?;
    let title = match (row.try_get::<_, Option<String>>("plan_title")?, channel) {
        (Some(t), Some(c)) => render::title(l, &t, c),
        (Some(t), None) => t,
        (None, _) => String::new(),
    };
    let text = match kind {
        Kind::Sale => texts::fiscal_receipt_sale(l, &title, &price, url),
        Kind::Return => texts::fiscal_receipt_return(l, &title, &price, url),
    };
    enqueue(
        &**tx,
        &NewEffect {
            membership_id: None,
            payment_id: Some(payment_id),
            order_id: None,
            chat_id: None,
            user_id: user,
            payload: Payload::BotMessage(BotMessage {
                text: render::clip(&text, render::MESSAGE_MAX),
                reply_markup: None,
            }),
            dedupe_key: Some(format!("receipt_link:{id}")),
        },
    )
    .await?;
    Ok(())
}

const ATTEMPT_SQL: &str = "UPDATE fiscal_receipts
     SET state = 'pending', attempts = attempts + 1, last_error = $2,
         receipt_id = CASE WHEN $3 THEN gen_random_uuid() ELSE receipt_id END
     WHERE id = $1 AND state <> 'done'";

/// Records a failed attempt at receipt `id` (to be retried) with its error: `pending`, also
/// when it had failed before and staff sent its effect back. `new_id`: Checkbox reported the
/// receipt under its id in `ERROR` (that id is used up), so the next attempt issues it under a
/// new one.
pub async fn record_attempt(
    tx: &Transaction<'_>,
    id: i64,
    error: &str,
    new_id: bool,
) -> Result<(), ApiError> {
    db::execute(tx, ATTEMPT_SQL, &[&id, &error, &new_id]).await?;
    Ok(())
}

const FAILED_SQL: &str = "UPDATE fiscal_receipts
     SET state = 'failed', attempts = attempts + 1, last_error = $2
     WHERE id = $1 AND state <> 'done'";

/// Records receipt `id` failed: its effect was dead-lettered (for staff: the effect's error,
/// the payment's `receipt`). Staff may send the effect back; its next attempt makes the
/// receipt pending or done again.
pub async fn record_failed(tx: &Transaction<'_>, id: i64, error: &str) -> Result<(), ApiError> {
    db::execute(tx, FAILED_SQL, &[&id, &error]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_rule_is_the_statement_s() {
        for g in ["acme", "wayforpay", "stripe", "monobank"] {
            assert!(is_card(&g.into()), "{g}");
        }
        for g in ["telegram_stars", "cryptopay"] {
            assert!(!is_card(&g.into()), "{g}");
        }
        assert!(SALE_SQL.contains("p.gateway NOT IN ('telegram_stars', 'cryptopay')"));
        assert!(SALE_SQL.contains(&format!("p.currency = '{CURRENCY}'")));
    }

    #[test]
    fn the_keys_name_the_kind_and_the_payment() {
        assert_eq!(effect_key(Kind::Sale, 7), "receipt:sale:7");
        assert_eq!(effect_key(Kind::Return, 7), "receipt:return:7");
        assert!(SALE_SQL.contains("'receipt:sale:' || r.payment_id"));
        assert!(RETURN_SQL.contains("'receipt:return:' || r.payment_id"));
    }

    #[test]
    fn the_row_type_reads_what_the_statement_selects() {
        assert!(TO_ISSUE_SQL.contains(<ToIssue as db::FromRow>::COLUMNS));
    }
}
