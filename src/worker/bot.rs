//! Performing the bot's effects: messages to buyers, invoices, and cancellations of Stars
//! subscriptions, performed by the worker like every other effect (leases, retries, rate limits, dry run,
//! dead letters) through one match arm each.
//!
//! - `bot_message`: `sendMessage` of `payload.text` with the optional `payload.reply_markup`
//!   (a second catalogue page, what happened to a payment, a cancellation confirmed).
//! - `invoice`: the invoice of a pending order, decided when performed from the order and its
//!   channel: `sendInvoice` in Stars; for a `recurring` channel a subscription link
//!   (`createInvoiceLink` with `subscription_period`, stored on the order so a repeat sends the
//!   same link) as a URL button; otherwise a signed WayForPay Purchase link as a URL button.
//!   An order that was paid, cancelled or superseded meanwhile gets nothing. A card link's
//!   `orderTimeout` is what is left of the time the order can be paid as invoiced: its seat
//!   hold, else [`bot::open_secs`] from when it was made — never longer than a hold. WayForPay
//!   does not sign `orderTimeout`, so nothing relies on it: a payment that arrives later anyway
//!   is judged by the payment core's seat rules like any late payment.
//! - `subscription_cancel`: `editUserStarSubscription(is_canceled = true)`, then a confirmation
//!   to the buyer (a `bot_message`, enqueued once) — except for a subscription the payment core
//!   stopped because it refused a charge, whose buyer's payment notice already said so.
//!
//! Every one is harmless when repeated: a message may rarely arrive twice, an invoice of a
//! pending order can be paid once, a cancellation is idempotent on Telegram's side.

use deadpool_postgres::Object;
use serde_json::{Value, json};

use crate::{
    bot::{self, outbox::enqueue_message},
    config::Config,
    currency::Money,
    effects::{Effect, Kind},
    error::ApiError,
    orders,
    payments::{star_subscriptions, wayforpay_purchase},
    present::{render, texts},
    state::AppState,
    telegram::bot_api::{BotApi, BotError, StarsInvoice},
};

/// Why a bot effect was not done; the worker maps it onto its own retry rules.
#[derive(Debug)]
pub enum BotFailure {
    /// A database error: nothing is recorded, the effect runs again.
    Db(ApiError),
    /// Telegram (or the way to it) failed; classified like any Bot API failure.
    Bot(BotError),
    /// Cannot succeed as it stands (missing data or configuration): dead letter.
    Permanent(String),
}

impl From<ApiError> for BotFailure {
    fn from(e: ApiError) -> BotFailure {
        BotFailure::Db(e)
    }
}

impl From<tokio_postgres::Error> for BotFailure {
    fn from(e: tokio_postgres::Error) -> BotFailure {
        BotFailure::Db(e.into())
    }
}

impl From<BotError> for BotFailure {
    fn from(e: BotError) -> BotFailure {
        BotFailure::Bot(e)
    }
}

/// Done, with an optional note (why it was skipped).
pub type BotPerformed = Result<Option<String>, BotFailure>;

/// Performs a bot effect of `kind`: reads what it needs on `client`, gives the connection back,
/// then calls Telegram.
pub async fn perform(
    state: &AppState,
    client: Object,
    bot: &BotApi,
    e: &Effect,
    kind: Kind,
) -> BotPerformed {
    match kind {
        Kind::BotMessage => {
            drop(client);
            message(bot, e).await
        }
        Kind::Invoice => invoice(state, client, bot, e).await,
        Kind::SubscriptionCancel => subscription_cancel(state, client, bot, e).await,
        other => Err(BotFailure::Permanent(format!(
            "{} is not a bot effect",
            other.as_str()
        ))),
    }
}

async fn message(bot: &BotApi, e: &Effect) -> BotPerformed {
    let text = e
        .payload
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| BotFailure::Permanent("the message has no text".into()))?;
    match e.payload.get("reply_markup").filter(|m| !m.is_null()) {
        Some(markup) => {
            bot.send_message_with_markup(e.user_id, text, markup)
                .await?
        }
        None => bot.send_message(e.user_id, text).await?,
    };
    Ok(None)
}

/// An order's invoice, as its channel is sold now.
struct InvoiceFacts {
    status: orders::Status,
    superseded: bool,
    reference: String,
    amount_minor: i64,
    currency: String,
    invoice_link: Option<String>,
    order_date: i64,
    channel_id: i32,
    title: String,
    description: Option<String>,
    days: i32,
    recurring: bool,
    /// Seconds the order can still be paid as invoiced: its seat hold, else
    /// [`bot::open_secs`] from when it was made.
    open_secs: i64,
}

async fn invoice(state: &AppState, client: Object, bot: &BotApi, e: &Effect) -> BotPerformed {
    let Some(order_id) = e.order_id else {
        return Err(BotFailure::Permanent("the order was deleted".into()));
    };
    let card_open = bot::open_secs(bot::Gateway::Card, state.config.hold_secs);
    let row = client
        .query_opt(
            "SELECT o.status, o.reference, o.amount_minor, o.currency, o.invoice_link,
                    extract(epoch FROM o.created_at)::bigint,
                    c.id, c.title, c.description, c.billing_period_days, c.recurring,
                    floor(extract(epoch FROM CASE
                        WHEN o.hold_until IS NOT NULL THEN o.hold_until - statement_timestamp()
                        ELSE o.created_at + make_interval(secs => $2) - statement_timestamp()
                    END))::bigint,
                    o.superseded_at IS NOT NULL
             FROM orders o JOIN channels c ON c.id = o.channel_id
             WHERE o.id = $1",
            &[&order_id, &(card_open as f64)],
        )
        .await?;
    drop(client);
    let Some(r) = row else {
        return Err(BotFailure::Permanent("the order was deleted".into()));
    };
    let f = InvoiceFacts {
        status: r.get(0),
        reference: r.get(1),
        amount_minor: r.get(2),
        currency: r.get(3),
        invoice_link: r.get(4),
        order_date: r.get(5),
        channel_id: r.get(6),
        title: r.get(7),
        description: r.get(8),
        days: r.get(9),
        recurring: r.get(10),
        // Never longer than a hold, even for a hold granted before `HOLD_SECS` was lowered.
        open_secs: r.get::<_, i64>(11).min(state.config.hold_secs),
        superseded: r.get(12),
    };
    if f.status != orders::Status::Pending {
        return Ok(Some(format!("skipped: the order is {} now", f.status)));
    }
    if f.superseded {
        return Ok(Some(
            "skipped: the order was superseded by a newer one".into(),
        ));
    }
    let title = render::invoice_title(&f.title, f.channel_id);
    let description =
        render::invoice_description(f.description.as_deref(), &f.title, f.channel_id, f.days);
    let price = render::price(&Money::new(f.amount_minor, &f.currency));
    let period = render::period(f.days);
    let label = render::clip(&texts::invoice_label(&period), render::INVOICE_TITLE_MAX);
    let stars = StarsInvoice {
        title: &title,
        description: &description,
        payload: &f.reference,
        label: &label,
        amount: f.amount_minor,
    };
    let name = render::title(&f.title, f.channel_id);
    match bot::gateway(&state.config, &f.currency) {
        Some(bot::Gateway::Stars) if f.recurring => {
            let link = match f.invoice_link {
                Some(link) => link,
                None => {
                    let link = bot
                        .create_stars_subscription_link(&stars, star_subscriptions::PERIOD_SECS)
                        .await?;
                    store_invoice_link(state, bot, order_id, link).await?
                }
            };
            let text = texts::subscription_offer(&name, &price, &period);
            let button = render::url_button(&texts::subscription_button(&price), &link);
            bot.send_message_with_markup(e.user_id, &text, &markup(button))
                .await?;
        }
        Some(bot::Gateway::Stars) => {
            bot.send_stars_invoice(e.user_id, &stars).await?;
        }
        Some(bot::Gateway::Card) => {
            if f.open_secs < 60 {
                return Ok(Some(
                    "skipped: the order can no longer be paid as invoiced (its hold ran out)"
                        .into(),
                ));
            }
            let link = card_link(&state.config, &f, &name)?;
            let text = texts::card_offer(&name, &price, &period, f.open_secs / 60);
            let button = render::url_button(&texts::card_button(&price), &link);
            bot.send_message_with_markup(e.user_id, &text, &markup(button))
                .await?;
        }
        None => {
            return Err(BotFailure::Permanent(format!(
                "no gateway takes {}: configure WayForPay (WAYFORPAY_MERCHANT_ACCOUNT, \
                 WAYFORPAY_SECRET_KEY, PUBLIC_URL) and retry",
                f.currency
            )));
        }
    }
    Ok(None)
}

fn markup(button: Value) -> Value {
    json!({"inline_keyboard": [[button]]})
}

/// The signed WayForPay Purchase link of an order.
fn card_link(config: &Config, f: &InvoiceFacts, name: &str) -> Result<String, BotFailure> {
    let missing = || BotFailure::Permanent("WayForPay purchase links are not configured".into());
    let wfp = config.wayforpay.as_ref().ok_or_else(missing)?;
    let domain = config.wayforpay_domain.as_deref().ok_or_else(missing)?;
    let public_url = config.public_url.as_deref().ok_or_else(missing)?;
    let service_url = format!("{public_url}/api/webhook/wayforpay");
    let return_url = config
        .telegram_bot_username
        .as_ref()
        .map(|u| format!("https://t.me/{u}"));
    let product = render::clip(name, 120);
    let purchase = wayforpay_purchase::Purchase {
        merchant_account: &wfp.merchant_account,
        merchant_domain: domain,
        order_reference: &f.reference,
        order_date: f.order_date,
        price: &Money::new(f.amount_minor, &f.currency),
        product_name: &product,
        service_url: &service_url,
        return_url: return_url.as_deref(),
        order_timeout_secs: Some(f.open_secs),
    };
    wayforpay_purchase::url(wfp.secret_key.expose().as_bytes(), &purchase)
        .ok_or_else(|| BotFailure::Permanent(format!("{} has no known minor unit", f.currency)))
}

/// Stores a new subscription link on the order (the first stored wins, so a repeat of the
/// effect sends the same link), in one short statement on a connection taken after the call.
/// A dry run's stand-in link is not stored.
async fn store_invoice_link(
    state: &AppState,
    bot: &BotApi,
    order_id: i64,
    link: String,
) -> Result<String, BotFailure> {
    if bot.is_dry_run() {
        return Ok(link);
    }
    let client = state.db.get().await.map_err(ApiError::from)?;
    let row = client
        .query_one(
            "WITH stored AS (
                 UPDATE orders SET invoice_link = $2
                 WHERE id = $1 AND invoice_link IS NULL
                 RETURNING invoice_link
             )
             SELECT invoice_link FROM stored
             UNION ALL
             SELECT invoice_link FROM orders WHERE id = $1
             LIMIT 1",
            &[&order_id, &link],
        )
        .await?;
    Ok(row.get::<_, Option<String>>(0).unwrap_or(link))
}

/// A cancelled subscription, with its channel and, while its membership still holds access,
/// the end of that access (for the buyer's confirmation).
const CANCELLED_SUBSCRIPTION_SQL: &str = concat!(
    "SELECT ss.charge_id, ss.status, c.id, c.title, m.expires_at, ss.cancelled_by
     FROM star_subscriptions ss
     JOIN channels c ON c.id = ss.channel_id
     LEFT JOIN memberships m
            ON m.subscriber_id = ss.subscriber_id AND m.channel_id = ss.channel_id
           AND ",
    crate::memberships::holds_access_sql!("m"),
    "
     WHERE ss.id = $1"
);

async fn subscription_cancel(
    state: &AppState,
    client: Object,
    bot: &BotApi,
    e: &Effect,
) -> BotPerformed {
    let Some(id) = e.payload.get("subscription_id").and_then(Value::as_i64) else {
        return Err(BotFailure::Permanent(
            "the effect names no subscription".into(),
        ));
    };
    let row = crate::db::row_opt(&client, CANCELLED_SUBSCRIPTION_SQL, &[&id]).await?;
    drop(client);
    let Some(r) = row else {
        return Err(BotFailure::Permanent("the subscription was deleted".into()));
    };
    let (charge_id, status): (String, star_subscriptions::Status) = (r.try_get(0)?, r.try_get(1)?);
    if status != star_subscriptions::Status::Cancelled {
        return Ok(Some(format!("skipped: the subscription is {status}")));
    }
    bot.edit_user_star_subscription(e.user_id, &charge_id, true)
        .await?;
    // Stopped by the payment core for a refused charge: the buyer's payment notice (enqueued
    // with this effect) already says so and why.
    let by: Option<star_subscriptions::CancelledBy> = r.try_get(5)?;
    if by == Some(star_subscriptions::CancelledBy::Subgate) {
        return Ok(None);
    }
    let name = render::title(&r.get::<_, String>(3), r.get(2));
    let until: Option<chrono::DateTime<chrono::Utc>> = r.get(4);
    let text = texts::subscription_cancelled(&name, until.map(texts::day).as_deref());
    let client = state.db.get().await.map_err(ApiError::from)?;
    enqueue_message(
        &**client,
        e.user_id,
        &render::Rendered {
            text,
            rows: Vec::new(),
        },
        Some(format!("subscription_cancelled:{id}")),
    )
    .await?;
    Ok(None)
}
