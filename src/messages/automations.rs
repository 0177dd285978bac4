//! The four automations (the `automations` table, one row each, off until the owner switches
//! it on) and what starts their messages:
//!
//! - `unpaid_checkout`: the minute scan ([`enqueue_due`]) finds bot orders still pending,
//!   unsuperseded and unpaid `delay_minutes` after their invoice or card page was sent (within
//!   the day after: a worker stopped longer than that reminds no old checkout), whose buyer has
//!   not paid for that channel since; one message per order (`unpaid_checkout:{order}`).
//! - `win_back`: the same scan finds memberships that expired `delay_minutes` ago (within the
//!   day after) and have not changed since; one message per membership end
//!   (`win_back:{membership}:{event}`: the expiry's `membership_events` row), with a code made for that buyer alone from the
//!   template.
//! - `cancel_offer`: a Stars subscription the buyer cancelled (Telegram's `subscription`
//!   update, or the bot's cancel button) — [`on_cancelled`], in that transaction; one per
//!   subscription (`cancel_offer:{subscription}`), with a code, sent `delay_minutes` later.
//! - `renewal_failed`: Telegram could not charge a renewal — [`on_renewal_failed`]; one per
//!   renewal date. While it is on, its message replaces the built-in notice for buyers who
//!   take such messages (a buyer who said `/stop` still gets the built-in one: it is about
//!   their own access).
//!
//! A buyer who said `/stop` or blocked the bot gets none of them (checked when the message is
//! written and again when it is sent). Every message is written with its effect
//! ([`super::sent::enqueue`]); the scan holds a transaction-level advisory lock, so two
//! workers scanning at once write each message once and make each code once.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use serde_json::Value;

use super::{
    Kind,
    sent::{self, NewMessage},
};
use crate::{
    catalog::promo_codes::{self, BuyerOffer},
    common::error::ApiError,
    db,
    present::{locale::Language, patterns},
};

/// An automation as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"kind": "win_back", "enabled": true, "delay_minutes": 4320,
    "texts": {"en": "We miss you, { $name }! { $code } takes 20 % off «{ $channel }»: { $price }."},
    "promo": {"percent_off": 20, "valid_days": 7, "plan_ids": null}, "sent": 12,
    "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Automation {
    /// `unpaid_checkout`, `win_back`, `cancel_offer` or `renewal_failed`.
    #[schema(value_type = String)]
    pub kind: Kind,
    pub enabled: bool,
    /// How long after what starts it the message is sent.
    pub delay_minutes: i32,
    /// A Project Fluent pattern per language (`en`, `uk`, `ru`).
    #[schema(value_type = Object)]
    pub texts: Value,
    /// The code a win-back or cancel offer makes for its buyer; null: no code.
    pub promo: Option<BuyerOffer>,
    /// Messages sent so far.
    pub sent: i64,
    pub updated_at: DateTime<Utc>,
}

macro_rules! automation_columns {
    () => {
        "a.kind, a.enabled, a.delay_minutes, a.texts, a.promo, a.updated_at,
         (SELECT count(*) FROM messages m
          WHERE m.kind = a.kind AND m.broadcast_id IS NULL AND m.outcome = 'sent') AS sent"
    };
}

impl db::FromRow for Automation {
    const COLUMNS: &'static str = automation_columns!();

    fn from_row(row: &tokio_postgres::Row) -> Result<Automation, tokio_postgres::Error> {
        let promo: Option<Value> = row.try_get("promo")?;
        Ok(Automation {
            kind: row.try_get("kind")?,
            enabled: row.try_get("enabled")?,
            delay_minutes: row.try_get("delay_minutes")?,
            texts: row.try_get("texts")?,
            // The API writes only what it checked; a hand-edited template reads as none.
            promo: promo.and_then(|p| serde_json::from_value(p).ok()),
            sent: row.try_get("sent")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    automation_columns!(),
    " FROM automations a
     ORDER BY array_position(
         ARRAY['unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed'], a.kind)"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    automation_columns!(),
    " FROM automations a WHERE a.kind = $1"
);
const LOCK_SQL: &str = concat!(
    "SELECT ",
    automation_columns!(),
    " FROM automations a WHERE a.kind = $1 FOR UPDATE"
);
const UPDATE_SQL: &str = "UPDATE automations
     SET enabled = $2, delay_minutes = $3, texts = $4, promo = $5,
         updated_at = statement_timestamp()
     WHERE kind = $1";
const PLANS_EXIST_SQL: &str =
    "SELECT count(*) AS found FROM plans WHERE id = ANY ($1) AND kind = 'paid'";

/// The four automations, in their order.
pub async fn list(client: &impl GenericClient) -> Result<Vec<Automation>, ApiError> {
    db::all(client, LIST_SQL, &[]).await
}

/// Automation `kind`.
pub async fn get(client: &impl GenericClient, kind: Kind) -> Result<Option<Automation>, ApiError> {
    db::opt(client, GET_SQL, &[&kind]).await
}

/// A change of an automation: an absent field keeps its value; `promo: Some(None)` removes the
/// code.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub enabled: Option<bool>,
    pub delay_minutes: Option<i32>,
    /// Replaces every text (a language left out has none).
    pub texts: Option<BTreeMap<String, String>>,
    pub promo: Option<Option<BuyerOffer>>,
}

/// The longest delay, in minutes (a year).
pub const DELAY_MAX: i32 = 525_600;

/// Changes automation `kind` by `c` under its row lock. 404 for a broadcast (no automation);
/// 422 naming the field for a delay out of range, a language the bot does not speak, a text
/// that is not a Fluent pattern or uses an unknown placeholder, `{ $code }` without a code, a
/// code for an automation that makes none or with values out of range, or switching on an
/// automation without any text.
pub async fn change(tx: &Transaction<'_>, kind: Kind, c: &Change) -> Result<Automation, ApiError> {
    let Some(before) = db::opt::<Automation>(tx, LOCK_SQL, &[&kind]).await? else {
        return Err(ApiError::NotFound("automation"));
    };
    let mut errors = BTreeMap::new();
    let enabled = c.enabled.unwrap_or(before.enabled);
    let delay = c.delay_minutes.unwrap_or(before.delay_minutes);
    if !(0..=DELAY_MAX).contains(&delay) {
        errors.insert(
            "delay_minutes".into(),
            format!("must be from 0 to {DELAY_MAX}"),
        );
    }
    let promo = match &c.promo {
        Some(p) => p.clone(),
        None => before.promo.clone(),
    };
    let offers = matches!(kind, Kind::WinBack | Kind::CancelOffer);
    if let Some(p) = &promo {
        if !offers {
            errors.insert(
                "promo".into(),
                "only win_back and cancel_offer make a code".into(),
            );
        } else {
            check_offer(tx, p, &mut errors).await?;
        }
    }
    let texts: BTreeMap<String, String> = match &c.texts {
        Some(t) => t.clone(),
        None => serde_json::from_value(before.texts.clone()).unwrap_or_default(),
    };
    check_texts(&texts, offers && promo.is_some(), &mut errors);
    if enabled && texts.is_empty() {
        errors.insert(
            "enabled".into(),
            "write a text in at least one language before switching it on".into(),
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let texts = serde_json::to_value(&texts).expect("texts serialize");
    let promo = promo.map(|p| serde_json::to_value(p).expect("an offer serializes"));
    db::execute(tx, UPDATE_SQL, &[&kind, &enabled, &delay, &texts, &promo]).await?;
    tracing::info!(kind = %kind, enabled, delay_minutes = delay, "automation changed");
    get(tx, kind).await?.ok_or(ApiError::NotFound("automation"))
}

/// The field errors (under `texts.<lang>`) of an owner's texts: languages the bot speaks,
/// patterns [`patterns::check`] accepts, `{ $code }` only with a code (`code`).
pub fn check_texts(
    texts: &BTreeMap<String, String>,
    code: bool,
    errors: &mut BTreeMap<String, String>,
) {
    for (lang, pattern) in texts {
        let field = format!("texts.{lang}");
        if Language::parse(lang).is_none() {
            errors.insert(field, "the bot speaks en, uk and ru only".into());
            continue;
        }
        match patterns::check(pattern) {
            Err(why) => {
                errors.insert(field, why);
            }
            Ok(vars) if !code && vars.iter().any(|v| v == "code") => {
                errors.insert(
                    field,
                    "uses { $code }, but no code is made for this message".into(),
                );
            }
            Ok(_) => {}
        }
    }
}

/// The field errors of a code template.
async fn check_offer(
    client: &impl GenericClient,
    p: &BuyerOffer,
    errors: &mut BTreeMap<String, String>,
) -> Result<(), ApiError> {
    if !(1..=100).contains(&p.percent_off) {
        errors.insert("promo.percent_off".into(), "must be from 1 to 100".into());
    }
    if !(1..=365).contains(&p.valid_days) {
        errors.insert("promo.valid_days".into(), "must be from 1 to 365".into());
    }
    if let Some(ids) = &p.plan_ids {
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        if ids.is_empty() || ids.len() > promo_codes::PLAN_IDS_MAX || unique.len() != ids.len() {
            errors.insert(
                "promo.plan_ids".into(),
                format!(
                    "must be null (every paid plan) or 1 to {} distinct plan ids",
                    promo_codes::PLAN_IDS_MAX
                ),
            );
        } else {
            let found: i64 = db::row_one(client, PLANS_EXIST_SQL, &[&unique])
                .await?
                .try_get("found")?;
            if found != unique.len() as i64 {
                errors.insert(
                    "promo.plan_ids".into(),
                    "every id must be a paid plan".into(),
                );
            }
        }
    }
    Ok(())
}

// ---- what starts the messages ----

const SCAN_LOCK_SQL: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('subgate automations', 0))";

/// Bot orders to remind: `order_id`, `subscriber_id` (see the module doc).
const DUE_UNPAID_SQL: &str = "SELECT o.id AS order_id, o.subscriber_id, a.delay_minutes
     FROM automations a
     JOIN orders o
       ON o.status = 'pending' AND o.via_bot AND o.superseded_at IS NULL AND o.amount_minor > 0
     JOIN subscribers s ON s.id = o.subscriber_id
     WHERE a.kind = 'unpaid_checkout'
       AND a.enabled
       AND NOT s.marketing_opt_out
       AND s.reachable
       AND EXISTS (
               SELECT 1
               FROM effects e
               WHERE e.order_id = o.id
                 AND e.kind = 'invoice'
                 AND e.status = 'done'
                 AND e.done_at <= statement_timestamp() - make_interval(mins => a.delay_minutes)
                 AND e.done_at > statement_timestamp() - make_interval(mins => a.delay_minutes)
                                 - interval '1 day')
       AND NOT EXISTS (
               SELECT 1
               FROM orders p
               WHERE p.subscriber_id = o.subscriber_id
                 AND p.channel_id = o.channel_id
                 AND p.status = 'paid'
                 AND p.paid_at > o.created_at)
       AND NOT EXISTS (SELECT 1 FROM messages x WHERE x.dedupe_key = 'unpaid_checkout:' || o.id)
     ORDER BY o.id
     LIMIT 500";

/// Membership ends to win back: `membership_id`, `event_id`, `subscriber_id`.
const DUE_WIN_BACK_SQL: &str = "SELECT m.id AS membership_id, ev.id AS event_id, m.subscriber_id,
            a.promo
     FROM automations a
     JOIN membership_events ev
       ON ev.to_status = 'expired'
      AND ev.at <= statement_timestamp() - make_interval(mins => a.delay_minutes)
      AND ev.at > statement_timestamp() - make_interval(mins => a.delay_minutes) - interval '1 day'
     JOIN memberships m ON m.id = ev.membership_id AND m.status = 'expired'
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE a.kind = 'win_back'
       AND a.enabled
       AND NOT s.marketing_opt_out
       AND s.reachable
       AND NOT EXISTS (
               SELECT 1 FROM membership_events later
               WHERE later.membership_id = m.id AND later.id > ev.id)
       AND NOT EXISTS (
               SELECT 1 FROM messages x
               WHERE x.dedupe_key = 'win_back:' || m.id || ':' || ev.id)
     ORDER BY ev.id
     LIMIT 500";

/// The minute scan's part: writes the due unpaid-checkout reminders and win-back offers (each
/// with its effect, a win-back with its code) in `tx`; returns how many.
pub async fn enqueue_due(tx: &Transaction<'_>, default: Language) -> Result<u64, ApiError> {
    db::execute(tx, SCAN_LOCK_SQL, &[]).await?;
    let mut written = 0;
    for row in db::rows(tx, DUE_UNPAID_SQL, &[]).await? {
        let order: i64 = row.try_get("order_id")?;
        let m = NewMessage {
            subscriber_id: row.try_get("subscriber_id")?,
            kind: Kind::UnpaidCheckout,
            order_id: Some(order),
            membership_id: None,
            star_subscription_id: None,
            promo_code_id: None,
            dedupe_key: format!("unpaid_checkout:{order}"),
            delay_minutes: 0,
        };
        written += u64::from(sent::enqueue(tx, &m, default).await?.is_some());
    }
    for row in db::rows(tx, DUE_WIN_BACK_SQL, &[]).await? {
        let membership: i64 = row.try_get("membership_id")?;
        let event: i64 = row.try_get("event_id")?;
        let subscriber: i32 = row.try_get("subscriber_id")?;
        let promo: Option<Value> = row.try_get("promo")?;
        let offer = promo.and_then(|p| serde_json::from_value::<BuyerOffer>(p).ok());
        let code = match &offer {
            Some(o) => Some(
                promo_codes::create_for_buyer(tx, "BACK", o, subscriber)
                    .await?
                    .0,
            ),
            None => None,
        };
        let m = NewMessage {
            subscriber_id: subscriber,
            kind: Kind::WinBack,
            order_id: None,
            membership_id: Some(membership),
            star_subscription_id: None,
            promo_code_id: code,
            dedupe_key: format!("win_back:{membership}:{event}"),
            delay_minutes: 0,
        };
        written += u64::from(sent::enqueue(tx, &m, default).await?.is_some());
    }
    if written > 0 {
        tracing::info!(written, "automation messages written");
    }
    Ok(written)
}

/// Whether automation `kind` is on and subscriber `subscriber` takes such messages: its delay
/// and code template when so.
const TAKES_SQL: &str = "SELECT a.delay_minutes, a.promo
     FROM automations a, subscribers s
     WHERE a.kind = $1 AND a.enabled AND s.id = $2 AND NOT s.marketing_opt_out AND s.reachable";

/// A Stars subscription of `subscriber` was cancelled by the buyer: the cancel offer, once per
/// subscription, with a code, when the automation is on. In the caller's transaction.
pub async fn on_cancelled(
    tx: &Transaction<'_>,
    subscription_id: i64,
    subscriber: i32,
    default: Language,
) -> Result<bool, ApiError> {
    let key = format!("cancel_offer:{subscription_id}");
    let Some(row) = db::row_opt(tx, TAKES_SQL, &[&Kind::CancelOffer, &subscriber]).await? else {
        return Ok(false);
    };
    if sent::exists(tx, &key).await? {
        return Ok(false);
    }
    let promo: Option<Value> = row.try_get("promo")?;
    let offer = promo.and_then(|p| serde_json::from_value::<BuyerOffer>(p).ok());
    let code = match &offer {
        Some(o) => Some(
            promo_codes::create_for_buyer(tx, "STAY", o, subscriber)
                .await?
                .0,
        ),
        None => None,
    };
    let m = NewMessage {
        subscriber_id: subscriber,
        kind: Kind::CancelOffer,
        order_id: None,
        membership_id: None,
        star_subscription_id: Some(subscription_id),
        promo_code_id: code,
        dedupe_key: key,
        delay_minutes: row.try_get("delay_minutes")?,
    };
    Ok(sent::enqueue(tx, &m, default).await?.is_some())
}

/// Telegram could not charge the renewal of Stars subscription `subscription_id` (renewal due
/// `renewal_micros`): the owner's message on how to renew, once per renewal date, when the
/// automation is on and the buyer takes such messages. False when it is not (the caller sends
/// the built-in notice instead).
pub async fn on_renewal_failed(
    tx: &Transaction<'_>,
    subscription_id: i64,
    renewal_micros: i64,
    subscriber: i32,
    default: Language,
) -> Result<bool, ApiError> {
    let Some(row) = db::row_opt(tx, TAKES_SQL, &[&Kind::RenewalFailed, &subscriber]).await? else {
        return Ok(false);
    };
    let m = NewMessage {
        subscriber_id: subscriber,
        kind: Kind::RenewalFailed,
        order_id: None,
        membership_id: None,
        star_subscription_id: Some(subscription_id),
        promo_code_id: None,
        dedupe_key: format!("renewal_failed:{subscription_id}:{renewal_micros}"),
        delay_minutes: row.try_get("delay_minutes")?,
    };
    sent::enqueue(tx, &m, default).await?;
    Ok(true)
}
