//! Performing the bot's effects: messages to buyers, invoices, and cancellations of Stars
//! subscriptions, performed by the worker like every other effect (leases, retries, rate limits, dry run,
//! dead letters) through one match arm each.
//!
//! - `bot_message`: `sendMessage` of `payload.text` with the optional `payload.reply_markup`
//!   (a second catalogue page, what happened to a payment, a cancellation confirmed).
//! - `invoice`: the invoice of a pending order, decided when performed from the order (its
//!   amount, after any discount) and its plan (title, description, period or lifetime; a
//!   default plan reads as its channel): `sendInvoice` in Stars; for a `recurring` plan a
//!   subscription link
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
    effects::{Effect, Kind, Payload, payload::SubscriptionCancel},
    error::ApiError,
    gateway_checks, orders,
    payments::{star_subscriptions, wayforpay_purchase},
    present::{
        render,
        texts::{self, Language},
    },
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
    let Ok(Payload::BotMessage(message)) = e.typed_payload() else {
        return Err(BotFailure::Permanent("the message has no text".into()));
    };
    match &message.reply_markup {
        Some(markup) => {
            bot.send_message_with_markup(e.user_id, &message.text, markup)
                .await?
        }
        None => bot.send_message(e.user_id, &message.text).await?,
    };
    Ok(None)
}

async fn invoice(state: &AppState, client: Object, bot: &BotApi, e: &Effect) -> BotPerformed {
    let Some(order_id) = e.order_id else {
        return Err(BotFailure::Permanent("the order was deleted".into()));
    };
    let card_open = bot::open_secs(bot::Gateway::Card, state.config.hold_secs);
    let facts = orders::invoice_facts(&client, order_id, card_open).await?;
    drop(client);
    let Some(mut f) = facts else {
        return Err(BotFailure::Permanent("the order was deleted".into()));
    };
    // Never longer than a hold, even for a hold granted before `HOLD_SECS` was lowered.
    f.open_secs = f.open_secs.min(state.config.hold_secs);
    if f.status != orders::Status::Pending {
        return Ok(Some(format!("skipped: the order is {} now", f.status)));
    }
    if f.superseded {
        return Ok(Some(
            "skipped: the order was superseded by a newer one".into(),
        ));
    }
    let l = Language::choose(f.language, None);
    let title = render::invoice_title(l, f.title_in(l), f.channel_id);
    let description =
        render::invoice_description(l, f.description_in(l), f.title_in(l), f.channel_id, f.days);
    let price = render::price(l, &Money::new(f.amount_minor, &f.currency));
    let period = render::term(l, f.days);
    let label = render::clip(
        &texts::invoice_label(l, period.as_deref()),
        render::INVOICE_TITLE_MAX,
    );
    let stars = StarsInvoice {
        title: &title,
        description: &description,
        payload: &f.reference,
        label: &label,
        amount: f.amount_minor,
    };
    let name = render::title(l, f.title_in(l), f.channel_id);
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
            // A recurring plan has a period (the schema: 30 days).
            let every = period.clone().unwrap_or_else(|| render::period(l, 30));
            let text = texts::subscription_offer(l, &name, &price, &every);
            let button = render::url_button(&texts::subscription_button(l, &price), &link);
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
            let text = texts::card_offer(l, &name, &price, period.as_deref(), f.open_secs / 60);
            let button = render::url_button(&texts::card_button(l, &price), &link);
            bot.send_message_with_markup(e.user_id, &text, &markup(button))
                .await?;
            if !bot.is_dry_run() {
                // From now on a lost callback is possible: the reconciliation will ask.
                gateway_checks::link_issued(&state.db, order_id, state.config.reconcile_after)
                    .await?;
            }
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
fn card_link(config: &Config, f: &orders::InvoiceFacts, name: &str) -> Result<String, BotFailure> {
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
    let kept = orders::keep_invoice_link(&client, order_id, &link).await?;
    Ok(kept.unwrap_or(link))
}

async fn subscription_cancel(
    state: &AppState,
    client: Object,
    bot: &BotApi,
    e: &Effect,
) -> BotPerformed {
    let Ok(Payload::SubscriptionCancel(SubscriptionCancel {
        subscription_id: id,
    })) = e.typed_payload()
    else {
        return Err(BotFailure::Permanent(
            "the effect names no subscription".into(),
        ));
    };
    let sub = star_subscriptions::cancelled(&client, id).await?;
    drop(client);
    let Some(sub) = sub else {
        return Err(BotFailure::Permanent("the subscription was deleted".into()));
    };
    if sub.status != star_subscriptions::Status::Cancelled {
        return Ok(Some(format!("skipped: the subscription is {}", sub.status)));
    }
    bot.edit_user_star_subscription(e.user_id, &sub.charge_id, true)
        .await?;
    // Stopped by the payment core for a refused charge: the buyer's payment notice (enqueued
    // with this effect) already says so and why.
    if sub.cancelled_by == Some(star_subscriptions::CancelledBy::Subgate) {
        return Ok(None);
    }
    let l = Language::choose(sub.language, None);
    let name = render::title(l, sub.translations.title(l, &sub.title), sub.channel_id);
    // Lifetime access outlasts any subscription: nothing to say about when it ends.
    let until = sub.access_until.and_then(|e| e.at());
    let text = texts::subscription_cancelled(l, &name, until.map(|t| texts::day(l, t)).as_deref());
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
