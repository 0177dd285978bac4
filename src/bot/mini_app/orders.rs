//! `POST /app/api/orders` and `GET /app/api/orders/{id}`: an order made from the page, decided
//! by the bot's buy button ([`super::super::buy::decide`], so a press on the page and one in the
//! chat follow one set of rules and reuse each other's pending order), and how the page pays
//! it. The order is not invoiced in the chat: after the commit the page is given a Stars invoice
//! link (`createInvoiceLink`, a subscription link for a recurring plan), stored on the order so
//! a second press gets the same link, or its card pages (WayForPay, Stripe, Monobank), made as the bot
//! makes them ([`super::super::pay_links`]). A trial or a 100 % code is granted at once.

use deadpool_postgres::{GenericClient, Pool, Transaction};
use serde::Serialize;

use super::super::{
    Gateway,
    buy::{self, Decision, Invoicing, Target},
    card_pages,
    conversation::keep_code,
    pay_links::{self, LinkFailure},
    render,
    texts::Language,
    update::Sender,
};
use crate::{
    access::join_requests::{self, State},
    catalog::plans,
    common::{
        currency::Money,
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    config::Config,
    orders::{self, Order, seats},
    payments::{gateways::wayforpay::checks as gateway_checks, star_subscriptions},
    telegram_api::client::{BotApi, DEFAULT_TIMEOUT},
};

/// An order as the page shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppOrderView)]
pub struct OrderView {
    pub id: i64,
    pub reference: String,
    pub status: orders::Status,
    pub amount_minor: i64,
    pub currency: String,
    pub amount_text: String,
}

impl OrderView {
    pub fn of(l: Language, o: &Order) -> OrderView {
        OrderView {
            id: o.id,
            reference: o.reference.clone(),
            status: o.status,
            amount_minor: o.amount_minor,
            currency: o.currency.clone(),
            amount_text: render::price(l, &Money::new(o.amount_minor, &o.currency)),
        }
    }
}

/// The card pages of an order; a gateway not configured (or too late for Stripe, or Monobank
/// for another currency than the hryvnia) is `None`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppCardUrls)]
pub struct CardUrls {
    pub wayforpay: Option<String>,
    pub stripe: Option<String>,
    /// The page of the order's Monobank invoice (the same the bot gives).
    pub monobank: Option<String>,
}

/// How the page pays an order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPay)]
#[serde(untagged)]
pub enum Pay {
    Stars { stars_invoice_url: String },
    Card { card_urls: CardUrls },
    Granted { granted: bool },
}

/// What a press on the page came to, decided in its transaction.
#[derive(Debug)]
pub enum Placed {
    /// An order to pay (made or reused) through `gateway`.
    ToPay { order_id: i64, gateway: Gateway },
    /// A free order, claimed: access granted.
    Granted { order_id: i64 },
    /// Nothing made; why, in the buyer's language.
    Refused(String),
}

/// The page's press on plan `plan_id` by `from`, speaking `l`: a code typed on the page is kept
/// first as `/code` keeps it (the limit on wrong codes included), then the buy button decides.
/// A join request `join_request` (the page's `r`) of the buyer for a channel of the plan is tied
/// to the order.
pub async fn place(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    from: &Sender,
    plan_id: i64,
    promo_code: Option<&str>,
    join_request: Option<&str>,
) -> Result<Placed, ApiError> {
    if let Some(text) = promo_code.filter(|c| !c.trim().is_empty())
        && let Err(why) = keep_code(tx, l, from, text, Some(plan_id)).await?
    {
        return Ok(Placed::Refused(why));
    }
    let decision = buy::decide(tx, config, l, from, Target::Plan(plan_id), Invoicing::Page).await?;
    let (placed, order_id) = match decision {
        Decision::Made { order_id, gateway }
        | Decision::Reused {
            order_id, gateway, ..
        } => (Placed::ToPay { order_id, gateway }, order_id),
        Decision::Granted { order_id, .. } => (Placed::Granted { order_id }, order_id),
        Decision::Refused(text) => return Ok(Placed::Refused(text)),
    };
    if let Some(reference) = join_request
        && join_requests::link_order(tx, reference, from.id, order_id).await?
    {
        tracing::info!(
            order_id,
            user_id = from.id,
            "join request tied to a Mini App order"
        );
    }
    Ok(placed)
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable(format!("{what}: {e}"))
}

/// How the page pays pending order `order_id` through `gateway`, after the press committed:
/// the Stars link stored on the order (made now when there is none), or its card pages. 503
/// when Telegram or a gateway does not answer.
pub async fn pay(
    db: &Pool,
    config: &Config,
    order_id: i64,
    gateway: Gateway,
) -> Result<Pay, ApiError> {
    let client = db.get().await?;
    let f = pay_links::facts(&client, config, order_id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    drop(client);
    let l = Language::choose(f.language, None);
    match gateway {
        Gateway::Stars => {
            if let Some(link) = f.invoice_link {
                return Ok(Pay::Stars {
                    stars_invoice_url: link,
                });
            }
            let bot = BotApi::from_config(config, DEFAULT_TIMEOUT).ok_or_else(|| {
                ApiError::Unavailable("TELEGRAM_BOT_TOKEN is not set: no invoice link".into())
            })?;
            let words = pay_links::StarsWords::of(l, &f);
            let link = if f.recurring {
                bot.create_stars_subscription_link(
                    &words.invoice(&f),
                    star_subscriptions::PERIOD_SECS,
                )
                .await
            } else {
                bot.create_stars_invoice_link(
                    &words.title,
                    &words.description,
                    &f.reference,
                    &words.label,
                    f.amount_minor,
                )
                .await
            }
            .map_err(|e| {
                unavailable("Telegram made no invoice link", bot.redact(&e.to_string()))
            })?;
            if bot.is_dry_run() {
                return Ok(Pay::Stars {
                    stars_invoice_url: link,
                });
            }
            // The first link stored wins: two presses at once answer the same one.
            let client = db.get().await?;
            let kept = orders::keep_invoice_link(&client, order_id, &link).await?;
            Ok(Pay::Stars {
                stars_invoice_url: kept.unwrap_or(link),
            })
        }
        Gateway::Card => {
            let name = render::title(l, f.title_in(l), f.channel_id);
            let pages = card_pages(config);
            let link_failed = |e: LinkFailure| match e {
                LinkFailure::Permanent(why) | LinkFailure::Retry(why) => {
                    unavailable("no card page was made", why)
                }
            };
            let wayforpay = if pages.wayforpay && f.open_secs >= super::super::MIN_CARD_PAGE_SECS {
                Some(pay_links::card_link(config, &f, &name).map_err(link_failed)?)
            } else {
                None
            };
            let stripe = if pages.stripe {
                pay_links::stripe_session(config, &f, &name)
                    .await
                    .map_err(link_failed)?
            } else {
                None
            };
            let monobank = if pages.monobank_takes(&f.currency) {
                pay_links::monobank_page(db, config, &f, order_id, &name)
                    .await
                    .map_err(link_failed)?
            } else {
                None
            };
            if wayforpay.is_some() {
                // From now on a lost callback is possible: the reconciliation will ask.
                gateway_checks::link_issued(db, order_id, config.reconcile_after).await?;
            }
            Ok(Pay::Card {
                card_urls: CardUrls {
                    wayforpay,
                    stripe,
                    monobank,
                },
            })
        }
    }
}

/// What `GET /app/api/orders/{id}` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppOrderStatus)]
pub struct OrderStatus {
    pub order: OrderView,
    /// The buyer holds access to every channel of the order's plan now.
    pub access: bool,
    pub join_request: Option<State>,
}

/// Order `order_id` of `buyer` (Telegram user `user_id`), in `l`; `None` when there is no
/// such order or it is another buyer's.
pub async fn status(
    client: &impl GenericClient,
    l: Language,
    buyer: SubscriberId,
    user_id: i64,
    order_id: i64,
) -> Result<Option<OrderStatus>, ApiError> {
    let Some(order) = orders::get(client, order_id)
        .await?
        .filter(|o| o.subscriber_id == buyer.0)
    else {
        return Ok(None);
    };
    let channels = match plans::get(client, order.plan_id).await? {
        Some(p) => p.channel_ids,
        None => vec![order.channel_id],
    };
    let mut access = true;
    for c in channels {
        if !seats::is_live_member(client, buyer, ChannelId(c)).await? {
            access = false;
            break;
        }
    }
    let join_request = join_requests::state_of_order(client, order_id, user_id).await?;
    Ok(Some(OrderStatus {
        order: OrderView::of(l, &order),
        access,
        join_request,
    }))
}

/// Order `order_id` as the page shows it, after a press made or found it.
pub async fn view(
    client: &impl GenericClient,
    l: Language,
    order_id: i64,
) -> Result<OrderView, ApiError> {
    let order = orders::get(client, order_id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    Ok(OrderView::of(l, &order))
}
