//! Commands and buttons: what the bot answers, and what it leaves to the outbox.
//!
//! Every step runs inside the update's transaction ([`super::handle`]) and returns the one Bot
//! API call for the webhook reply: a `sendMessage` answering a command, an
//! `answerCallbackQuery` answering a button. Reads here take no locks (a catalogue may be a
//! moment stale; the buy button and the payment core decide under locks).

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde_json::Value;

use super::{
    buy, gateway,
    render::{self, Availability, Callback, Command, MembershipView, OfferView, SubscriptionView},
    texts,
    update::{Action, Sender},
};
use crate::{
    channels::{self, Offer},
    config::Config,
    error::ApiError,
    expiry::Expiry,
    orders::seats,
    payments::star_subscriptions::{self, CancelRefusal, CancelledBy},
    subscribers,
};

/// Channels one catalogue message lists at most (fewer when long descriptions fill it).
const PAGE: i64 = 10;

/// The conversation step for `action`; returns the webhook reply.
pub(super) async fn act(
    tx: &Transaction<'_>,
    config: &Config,
    action: &Action,
) -> Result<Option<Value>, ApiError> {
    match action {
        Action::Text {
            chat_id,
            from,
            text,
        } => command(tx, config, *chat_id, from, text).await.map(Some),
        Action::Button {
            query_id,
            from,
            data,
        } => button(tx, config, query_id, from, data.as_deref())
            .await
            .map(Some),
    }
}

async fn command(
    tx: &Transaction<'_>,
    config: &Config,
    chat_id: i64,
    from: &Sender,
    text: &str,
) -> Result<Value, ApiError> {
    let command = render::parse_command(text);
    tracing::info!(user_id = from.id, ?command, "bot command");
    let rendered = match command {
        Command::Start(None) | Command::Help => catalogue(tx, config, from.id, None, 0).await?.0,
        Command::Start(Some(payload)) => match render::deep_link_channel(&payload) {
            Some(id) => match offer(tx, config, from.id, id).await? {
                Some(o) => render::offer(&o),
                None => {
                    catalogue(tx, config, from.id, Some(texts::UNKNOWN_CHANNEL), 0)
                        .await?
                        .0
                }
            },
            None => catalogue(tx, config, from.id, None, 0).await?.0,
        },
        Command::Subscriptions => subscriptions(tx, config, from.id).await?,
        Command::Other => render::Rendered {
            text: texts::HELP.to_string(),
            rows: Vec::new(),
        },
    };
    Ok(render::send_message(chat_id, &rendered))
}

async fn button(
    tx: &Transaction<'_>,
    config: &Config,
    query_id: &str,
    from: &Sender,
    data: Option<&str>,
) -> Result<Value, ApiError> {
    let callback = data.and_then(Callback::parse);
    tracing::info!(user_id = from.id, ?callback, "bot button pressed");
    let Some(callback) = callback else {
        return Ok(render::answer_callback(
            query_id,
            texts::BUTTON_INVALID,
            true,
        ));
    };
    match callback {
        Callback::Buy(channel_id) => {
            let answer = buy::buy(tx, config, from, channel_id).await?;
            Ok(render::answer_callback(
                query_id,
                &answer.text,
                answer.alert,
            ))
        }
        Callback::More(after) => {
            // The page is a second message: the reply answers the button, the outbox sends it.
            let (page, _) = catalogue(tx, config, from.id, None, after).await?;
            super::outbox::enqueue_message(&**tx, from.id, &page, None).await?;
            Ok(render::answer_callback(query_id, "", false))
        }
        Callback::CancelRenewal(id) => {
            let text = cancel_renewal(tx, from, id).await?;
            Ok(render::answer_callback(query_id, text, true))
        }
    }
}

/// Whether `viewer` can buy `c` now: a gateway takes its currency, and a seat is free or the
/// viewer is a member already (a renewal needs no seat). Read without locks: the buy button
/// decides again under them.
async fn availability(
    tx: &Transaction<'_>,
    config: &Config,
    c: &Offer,
    viewer: Option<i32>,
) -> Result<Availability, ApiError> {
    if gateway(config, &c.currency).is_none() {
        return Ok(Availability::NotOnSale);
    }
    let Some(limit) = c.seat_limit else {
        return Ok(Availability::Buyable);
    };
    if let Some(s) = viewer
        && seats::is_live_member(tx, crate::ids::SubscriberId(s), crate::ids::ChannelId(c.id))
            .await?
    {
        return Ok(Availability::Buyable);
    }
    Ok(if seats::seats_taken(tx, c.id).await? < i64::from(limit) {
        Availability::Buyable
    } else {
        Availability::Full
    })
}

/// The catalogue's view of channel `c` (`present` knows no channel rows: the bot turns the
/// channel's projection into the view, with what `viewer` may do with it).
async fn view(
    tx: &Transaction<'_>,
    config: &Config,
    c: Offer,
    viewer: Option<i32>,
) -> Result<OfferView, ApiError> {
    let availability = availability(tx, config, &c, viewer).await?;
    Ok(OfferView {
        id: c.id,
        title: c.title,
        description: c.description,
        price_minor: c.price_minor,
        currency: c.currency,
        billing_period_days: c.billing_period_days,
        recurring: c.recurring,
        availability,
    })
}

/// A page of the catalogue for Telegram user `user_id`: active channels after channel `after`.
async fn catalogue(
    tx: &Transaction<'_>,
    config: &Config,
    user_id: i64,
    intro: Option<&str>,
    after: i32,
) -> Result<(render::Rendered, usize), ApiError> {
    let channels = channels::active_offers(tx, after, PAGE + 1).await?;
    let more = channels.len() as i64 > PAGE;
    let viewer = subscribers::of_telegram_user(tx, user_id).await?;
    let mut offers = Vec::new();
    for c in channels.into_iter().take(PAGE as usize) {
        offers.push(view(tx, config, c, viewer).await?);
    }
    Ok(render::catalogue(intro, &offers, more))
}

/// One active channel's offer; `None` when there is no such channel or it is not active.
async fn offer(
    tx: &Transaction<'_>,
    config: &Config,
    user_id: i64,
    channel_id: i32,
) -> Result<Option<OfferView>, ApiError> {
    let Some(c) = channels::offer(tx, channel_id).await?.filter(|c| c.active) else {
        return Ok(None);
    };
    let viewer = subscribers::of_telegram_user(tx, user_id).await?;
    Ok(Some(view(tx, config, c, viewer).await?))
}

/// Memberships listed at most (the renderer sums up the rest it cannot fit).
const SUBSCRIPTIONS_MAX: i64 = 100;

async fn subscriptions(
    tx: &Transaction<'_>,
    config: &Config,
    user_id: i64,
) -> Result<render::Rendered, ApiError> {
    let rows = tx
        .query(
            "SELECT m.channel_id, c.title, m.status, m.expires_at, c.active, c.currency,
                    ss.id AS subscription_id, ss.status AS subscription_status,
                    ss.expires_at AS subscription_expires_at,
                    ss.expires_at > statement_timestamp() AS subscription_ahead
             FROM memberships m
             JOIN subscribers s ON s.id = m.subscriber_id
             JOIN channels c ON c.id = m.channel_id
             LEFT JOIN LATERAL (
                 SELECT x.id, x.status, x.expires_at FROM star_subscriptions x
                 WHERE x.subscriber_id = m.subscriber_id AND x.channel_id = m.channel_id
                   AND x.applied
                 ORDER BY x.id DESC LIMIT 1
             ) ss ON true
             WHERE s.telegram_user_id = $1
             ORDER BY m.status = 'expired', m.expires_at DESC, m.id
             LIMIT $2",
            &[&user_id, &SUBSCRIPTIONS_MAX],
        )
        .await?;
    let memberships: Vec<MembershipView> = rows
        .iter()
        .map(|r| {
            let (active, currency): (bool, String) = (r.try_get("active")?, r.try_get("currency")?);
            let sub_id: Option<i64> = r.try_get("subscription_id")?;
            let sub_status: Option<String> = r.try_get("subscription_status")?;
            let sub_expires: Option<DateTime<Utc>> = r.try_get("subscription_expires_at")?;
            let sub_future: Option<bool> = r.try_get("subscription_ahead")?;
            let subscription = match (sub_id, sub_status.as_deref(), sub_expires) {
                (Some(id), Some("active"), Some(at)) if sub_future == Some(true) => {
                    Some(SubscriptionView {
                        id,
                        renews_at: Some(texts::day(at)),
                    })
                }
                (Some(id), Some("cancelled"), _) => Some(SubscriptionView {
                    id,
                    renews_at: None,
                }),
                // A subscription Telegram stopped charging: nothing to show.
                _ => None,
            };
            let status: String = r.try_get("status")?;
            let expires_at: Expiry = r.try_get("expires_at")?;
            // Live lifetime access is not bought again.
            let lifetime = expires_at.is_never() && status != "expired";
            Ok(MembershipView {
                channel_id: r.try_get("channel_id")?,
                title: r.try_get("title")?,
                status,
                expires_at,
                can_renew: active && !lifetime && gateway(config, &currency).is_some(),
                subscription,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()?;
    Ok(render::subscriptions(&memberships))
}

/// The cancel-renewal button of subscription `id`: only its own buyer may press it.
async fn cancel_renewal(
    tx: &Transaction<'_>,
    from: &Sender,
    id: i64,
) -> Result<&'static str, ApiError> {
    let owner: Option<i64> = tx
        .query_opt(
            "SELECT s.telegram_user_id FROM star_subscriptions ss
             JOIN subscribers s ON s.id = ss.subscriber_id
             WHERE ss.id = $1",
            &[&id],
        )
        .await?
        .map(|r| r.try_get("telegram_user_id"))
        .transpose()?;
    if owner != Some(from.id) {
        return Ok(texts::BUTTON_INVALID);
    }
    Ok(
        match star_subscriptions::cancel(tx, id, CancelledBy::Buyer).await? {
            Some(Ok(_)) => texts::RENEWAL_CANCELLED,
            Some(Err(CancelRefusal::AlreadyCancelled)) => texts::RENEWAL_ALREADY_CANCELLED,
            None => texts::BUTTON_INVALID,
        },
    )
}
