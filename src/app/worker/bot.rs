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
//!   same link) as a URL button; otherwise a card page as a URL button: a signed WayForPay
//!   Purchase link, a Stripe Checkout Session made now (keyed on the order, so a repeat of
//!   the effect finds the same session), or — for hryvnias — a Monobank invoice's page (the
//!   invoice stored with the order, so a repeat gives the page made the first time while it
//!   stays valid), one button per gateway configured.
//!   An order that was paid, cancelled or superseded meanwhile gets nothing. A card link's
//!   `orderTimeout` is what is left of the time the order can be paid as invoiced: its seat
//!   hold, else [`bot::open_secs`] from when it was made — never longer than a hold. WayForPay
//!   does not sign `orderTimeout`, so nothing relies on it: a payment that arrives later anyway
//!   is judged by the payment core's seat rules like any late payment.
//!   When Crypto Pay is configured and the order's plan has crypto prices, the invoice carries
//!   one more button per asset (a message of its own beside a Stars invoice); a press asks for
//!   the order's Crypto Pay invoice in that asset: an `invoice` effect naming the asset, which
//!   makes the invoice (`createInvoice`, once per order and asset: [`crypto_invoice`]) and sends
//!   its pay URL as a URL button.
//! - `subscription_cancel`: `editUserStarSubscription(is_canceled = true)`, then a confirmation
//!   to the buyer (a `bot_message`, enqueued once) — except for a subscription the payment core
//!   stopped because it refused a charge, whose buyer's payment notice already said so.
//! - The notice that a buyer's access ended ([`access_ended_notice`]): decided here for a
//!   revoke the worker is about to perform, enqueued as a `bot_message` (keyed on the revoke)
//!   once the user is out.
//!
//! Every one is harmless when repeated: a message may rarely arrive twice, an invoice of a
//! pending order can be paid once, a cancellation is idempotent on Telegram's side.

use deadpool_postgres::Object;
use serde_json::{Value, json};

use crate::{
    access::memberships::{self, EventCause},
    app::state::AppState,
    bot::{
        self,
        pay_links::{self, LinkFailure},
    },
    common::{currency::Money, error::ApiError},
    orders,
    orders::crypto_invoices,
    outbox::{
        bot_messages::enqueue_message,
        effects::{self, Effect, Kind, Payload, payload::SubscriptionCancel},
    },
    payments::{
        gateways::{cryptopay, wayforpay::checks as gateway_checks},
        star_subscriptions,
    },
    present::{
        render,
        texts::{self, Language},
    },
    telegram_api::client::{BotApi, BotError},
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
    /// Another service (a payment gateway's API) failed in a way worth retrying.
    Retry(String),
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

impl From<LinkFailure> for BotFailure {
    fn from(e: LinkFailure) -> BotFailure {
        match e {
            LinkFailure::Permanent(why) => BotFailure::Permanent(why),
            LinkFailure::Retry(why) => BotFailure::Retry(why),
        }
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
    if let Ok(Payload::Invoice(effects::payload::Invoice { asset: Some(asset) })) =
        e.typed_payload()
    {
        return crypto_invoice(state, client, bot, e, order_id, &asset).await;
    }
    let facts = pay_links::facts(&client, &state.config, order_id).await?;
    // The crypto assets offered beside the invoice, when Crypto Pay is configured.
    let crypto = if state.config.cryptopay.is_some() {
        crypto_invoices::order_prices(&client, order_id).await?
    } else {
        Vec::new()
    };
    drop(client);
    let f = match payable(facts) {
        Ok(f) => f,
        Err(done) => return done,
    };
    let l = Language::choose(f.language, None);
    let price = render::price(l, &Money::new(f.amount_minor, &f.currency));
    let period = render::term(l, f.days);
    let words = pay_links::StarsWords::of(l, &f);
    let stars = words.invoice(&f);
    let name = render::title(l, f.title_in(l), f.channel_id);
    let crypto_buttons = crypto_buttons(l, order_id, &crypto);
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
            let buttons = std::iter::once(button).chain(crypto_buttons).collect();
            bot.send_message_with_markup(e.user_id, &text, &markup(buttons))
                .await?;
        }
        Some(bot::Gateway::Stars) => {
            bot.send_stars_invoice(e.user_id, &stars).await?;
            if !crypto_buttons.is_empty() {
                let text = texts::crypto_choice(l, &name);
                bot.send_message_with_markup(e.user_id, &text, &markup(crypto_buttons))
                    .await?;
            }
        }
        Some(bot::Gateway::Card) => {
            if f.open_secs < bot::MIN_CARD_PAGE_SECS {
                return Ok(Some(
                    "skipped: the order can no longer be paid as invoiced (its hold ran out)"
                        .into(),
                ));
            }
            let pages = bot::card_pages(&state.config);
            let wayforpay = if pages.wayforpay {
                Some(pay_links::card_link(&state.config, &f, &name)?)
            } else {
                None
            };
            let stripe = if pages.stripe {
                pay_links::stripe_session(&state.config, &f, &name).await?
            } else {
                None
            };
            let monobank = if pages.monobank_takes(&f.currency) {
                pay_links::monobank_page(&state.db, &state.config, &f, order_id, &name).await?
            } else {
                None
            };
            let pages: Vec<(&str, &String)> = [
                ("WayForPay", wayforpay.as_ref()),
                ("Stripe", stripe.as_ref()),
                ("Monobank", monobank.as_ref()),
            ]
            .into_iter()
            .filter_map(|(gateway, url)| url.map(|u| (gateway, u)))
            .collect();
            let buttons: Vec<Value> = match pages.as_slice() {
                [] => {
                    return Ok(Some(
                        "skipped: the order can no longer be paid as invoiced (too late for a \
                         Stripe Checkout page)"
                            .into(),
                    ));
                }
                [(_, link)] => vec![render::url_button(&texts::card_button(l, &price), link)],
                several => several
                    .iter()
                    .map(|(gateway, link)| {
                        render::url_button(&texts::card_button_via(l, &price, gateway), link)
                    })
                    .collect(),
            };
            let text = texts::card_offer(l, &name, &price, period.as_deref(), f.open_secs / 60);
            let buttons = buttons.into_iter().chain(crypto_buttons).collect();
            bot.send_message_with_markup(e.user_id, &text, &markup(buttons))
                .await?;
            if wayforpay.is_some() && !bot.is_dry_run() {
                // From now on a lost callback is possible: the reconciliation will ask.
                gateway_checks::link_issued(&state.db, order_id, state.config.reconcile_after)
                    .await?;
            }
        }
        None => {
            return Err(BotFailure::Permanent(format!(
                "no gateway takes {}: configure WayForPay (WAYFORPAY_MERCHANT_ACCOUNT, \
                 WAYFORPAY_SECRET_KEY, PUBLIC_URL), Stripe (STRIPE_SECRET_KEY, \
                 STRIPE_WEBHOOK_SECRET) or, for hryvnias, Monobank (MONOBANK_TOKEN, \
                 PUBLIC_URL) and retry",
                f.currency
            )));
        }
    }
    Ok(None)
}

/// The buttons that ask for an order's Crypto Pay invoice, one per asset its plan is priced
/// in (`prices`: asset and what the order costs in it), labelled with that price.
fn crypto_buttons(l: Language, order_id: i64, prices: &[(String, i64)]) -> Vec<Value> {
    prices
        .iter()
        .filter_map(|(asset, amount)| {
            let callback = render::Callback::crypto(order_id, asset)?;
            let price = render::price(l, &Money::new(*amount, asset));
            Some(render::button(&texts::crypto_button(l, &price), callback))
        })
        .collect()
}

/// An order's Crypto Pay invoice in `asset`, asked for by the buyer's press of that asset's
/// button: the one made for the order before (a repeat of the effect sends the same pay URL),
/// else one made now — `createInvoice` of the order's price in the asset
/// ([`crypto_invoices::order_price`]), with the order's reference as `payload`, open as long as
/// the order can be paid as invoiced (its hold, else the card window; never longer than a
/// hold), and a button back to the bot — and kept ([`crypto_invoices::keep`]: the first kept
/// wins). Sent as a URL button to the invoice's `bot_invoice_url`. An order no longer payable
/// as invoiced, or whose invoice in the asset is paid or expired, gets nothing.
async fn crypto_invoice(
    state: &AppState,
    client: Object,
    bot: &BotApi,
    e: &Effect,
    order_id: i64,
    asset: &str,
) -> BotPerformed {
    let Some(config) = state.config.cryptopay.as_ref() else {
        return Err(BotFailure::Permanent(
            "Crypto Pay is not configured (CRYPTOPAY_TOKEN)".into(),
        ));
    };
    let facts = pay_links::facts(&client, &state.config, order_id).await?;
    let stored = crypto_invoices::stored(&client, order_id, asset).await?;
    let amount = crypto_invoices::order_price(&client, order_id, asset).await?;
    drop(client);
    let f = match payable(facts) {
        Ok(f) => f,
        Err(done) => return done,
    };
    let l = Language::choose(f.language, None);
    let name = render::title(l, f.title_in(l), f.channel_id);
    let now = chrono::Utc::now();
    let invoice = match stored {
        Some(i) if i.status == crypto_invoices::Status::Active && i.expires_at > now => i,
        Some(i) => {
            return Ok(Some(format!(
                "skipped: the order's {asset} invoice {} is {}",
                i.invoice_id, i.status
            )));
        }
        None => {
            if f.open_secs < bot::MIN_CARD_PAGE_SECS {
                return Ok(Some(
                    "skipped: the order can no longer be paid as invoiced (its hold ran out)"
                        .into(),
                ));
            }
            let Some(amount) = amount else {
                return Err(BotFailure::Permanent(format!(
                    "the order's plan has no price in {asset}"
                )));
            };
            let description = render::clip(&name, cryptopay::DESCRIPTION_MAX);
            let new = cryptopay::NewInvoice::new(
                asset,
                amount,
                &description,
                &f.reference,
                f.open_secs,
                state.config.telegram_bot_username.as_deref(),
            );
            let made = cryptopay::create_invoice(&config.api_url, config.token.expose(), &new)
                .await
                .map_err(|e| match e {
                    cryptopay::ApiCallError::Transient(why) => BotFailure::Retry(why),
                    refused @ cryptopay::ApiCallError::Refused(_) => {
                        BotFailure::Permanent(refused.to_string())
                    }
                })?;
            let Some(pay_url) = made.pay_url() else {
                return Err(BotFailure::Retry(format!(
                    "Crypto Pay's invoice {} has no bot_invoice_url",
                    made.invoice_id
                )));
            };
            tracing::info!(order_reference = %f.reference, invoice_id = made.invoice_id, asset,
                "Crypto Pay invoice made");
            let client = state.db.get().await.map_err(ApiError::from)?;
            crypto_invoices::keep(
                &client,
                &crypto_invoices::NewInvoice {
                    invoice_id: made.invoice_id,
                    order_id,
                    asset,
                    amount_minor: amount,
                    pay_url,
                    expires_at: now + chrono::Duration::seconds(new.expires_in),
                },
                state.config.reconcile_after,
            )
            .await?
        }
    };
    let price = render::price(l, &Money::new(invoice.amount_minor, asset));
    let minutes = (invoice.expires_at - now).num_minutes().max(1);
    let text = texts::crypto_offer(l, &name, &price, minutes);
    let button = render::url_button(&texts::crypto_pay_button(l, &price), &invoice.pay_url);
    bot.send_message_with_markup(e.user_id, &text, &markup(vec![button]))
        .await?;
    Ok(None)
}

/// An inline keyboard of `buttons`, one a row.
fn markup(buttons: Vec<Value>) -> Value {
    let rows: Vec<Vec<Value>> = buttons.into_iter().map(|b| vec![b]).collect();
    json!({ "inline_keyboard": rows })
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

/// The notice a revoke `e` about to be performed sends its buyer once the user is out: their
/// access ended (the term ran out, its payment was refunded, or staff ended it), with a renew
/// button when the channel can be bought again ([`bot::renew_callback`]). Read on the claim's
/// connection, after [`super::perform`]'s check that the account holds no access in the chat
/// again (a member again through a renewal or a new membership is neither removed nor told).
/// `None` — nothing to say — for a revoke that no ending of a membership asked for (a user
/// found in the chat without access, the revoke of a deleted membership), for a membership
/// whose subscriber is another Telegram account now or that holds access again, and for a
/// buyer who was never told of it (no grant or receipt of it ever reached that account:
/// someone who never started the bot is not written to first about an ending).
pub async fn access_ended_notice(
    state: &AppState,
    client: &Object,
    e: &Effect,
) -> Result<Option<render::Rendered>, ApiError> {
    let Some(membership_id) = e.membership_id else {
        return Ok(None);
    };
    let from_an_ending = matches!(
        e.typed_payload(),
        Ok(Payload::Revoke(effects::payload::Revoke {
            found: None,
            deleted: false,
            ..
        }))
    );
    let Some(event) = e.dedupe_key.as_deref().and_then(effects::transition_event) else {
        return Ok(None);
    };
    if !from_an_ending {
        return Ok(None);
    }
    let Some(m) = memberships::effect_view(client, membership_id).await? else {
        return Ok(None);
    };
    if m.telegram_user_id != e.user_id || m.status.holds_access() {
        return Ok(None);
    }
    if !effects::told_of(client, membership_id, e.user_id).await? {
        return Ok(None);
    }
    let ending = match memberships::event_cause(client, membership_id, event).await? {
        Some(EventCause::Refund) => texts::Ending::Refunded,
        Some(EventCause::Staff) => texts::Ending::Revoked,
        _ => texts::Ending::Expired,
    };
    let renew = bot::renew_callback(client, &state.config, membership_id).await?;
    let (l, title) = m.speaking();
    Ok(Some(render::access_ended(
        l,
        ending,
        title,
        m.channel_id,
        renew,
    )))
}

/// The order's invoice facts while it can still be invoiced; otherwise `Err` with what the
/// effect comes to (the order deleted: a dead letter; paid, cancelled or superseded: skipped).
fn payable(facts: Option<orders::InvoiceFacts>) -> Result<orders::InvoiceFacts, BotPerformed> {
    let Some(f) = facts else {
        return Err(Err(BotFailure::Permanent("the order was deleted".into())));
    };
    if f.status != orders::Status::Pending {
        return Err(Ok(Some(format!("skipped: the order is {} now", f.status))));
    }
    if f.superseded {
        return Err(Ok(Some(
            "skipped: the order was superseded by a newer one".into(),
        )));
    }
    Ok(f)
}
