//! The member portal: what `/subscriptions` shows in the chat, as the page shows it — the
//! buyer's memberships (with the plan a renew button buys: [`super::super::renew_of`]), their
//! Stars subscriptions (cancelled and resumed with `editUserStarSubscription`), their payments,
//! their own referral link when the program gives buyers one, and the language they chose.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool, Transaction};
use serde::Serialize;

use super::super::{
    render, renew_of,
    texts::{self, Language},
};
use crate::{
    access::{buyer_view, subscribers},
    catalog::{channels, plans},
    common::{currency::Money, error::ApiError, ids::SubscriberId, vocabulary::Gateway},
    config::Config,
    orders,
    payments::{
        core::{self as payments, Outcome},
        star_subscriptions::{self, CancelledBy, StarSubscription, Status},
    },
    referrals::{
        affiliates,
        buyer_links::{self, OwnLink},
    },
    telegram_api::client::{BotApi, DEFAULT_TIMEOUT},
};

/// Memberships, subscriptions and payments listed at most.
const MAX: i64 = 100;

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppMe)]
pub struct Me {
    pub subscriber: Subscriber,
    pub memberships: Vec<Membership>,
    pub subscriptions: Vec<Subscription>,
    pub payments: Vec<Payment>,
    pub referral: Option<Referral>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppSubscriber)]
pub struct Subscriber {
    pub id: i32,
    pub name: Option<String>,
    pub language: Language,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppMembership)]
pub struct Membership {
    pub id: i64,
    pub channel_id: i32,
    pub channel_title: String,
    pub status: crate::access::memberships::Status,
    pub expires_at: Option<DateTime<Utc>>,
    pub lifetime: bool,
    pub renew_plan_id: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppSubscription)]
pub struct Subscription {
    pub id: i64,
    pub channel_id: i32,
    pub channel_title: String,
    pub status: Status,
    pub expires_at: DateTime<Utc>,
    pub price_text: String,
    pub cancelled: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPayment)]
pub struct Payment {
    pub id: i64,
    pub paid_at: DateTime<Utc>,
    pub amount_text: String,
    pub channel_title: Option<String>,
    /// `telegram_stars`, `wayforpay`, `stripe` or a door-1 gateway's name.
    #[schema(value_type = String)]
    pub gateway: Gateway,
    pub refunded: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppReferral)]
pub struct Referral {
    pub link: String,
    pub code: String,
}

/// Channel titles in the buyer's language, read once each.
#[derive(Default)]
struct Titles(HashMap<i32, String>);

impl Titles {
    async fn of(
        &mut self,
        client: &impl GenericClient,
        l: Language,
        id: i32,
    ) -> Result<String, ApiError> {
        if let Some(t) = self.0.get(&id) {
            return Ok(t.clone());
        }
        let title = match channels::offer(client, id).await? {
            Some(c) => render::title(l, c.title_in(l), c.id),
            None => render::title(l, "", id),
        };
        self.0.insert(id, title.clone());
        Ok(title)
    }
}

/// A Stars subscription as the page shows it.
async fn subscription(
    client: &impl GenericClient,
    l: Language,
    titles: &mut Titles,
    s: &StarSubscription,
) -> Result<Subscription, ApiError> {
    let price_text = match orders::get(client, s.order_id).await? {
        Some(o) => render::price(l, &Money::new(o.amount_minor, &o.currency)),
        None => String::new(),
    };
    Ok(Subscription {
        id: s.id,
        channel_id: s.channel_id,
        channel_title: titles.of(client, l, s.channel_id).await?,
        status: s.status,
        expires_at: s.expires_at,
        price_text,
        cancelled: !s.is_active(),
    })
}

/// The portal of subscriber `buyer` (Telegram user `user_id`), in `l`. Reading the referral
/// link makes the buyer's code on their first look, as `/referral` does.
pub async fn me(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    buyer: SubscriberId,
    user_id: i64,
) -> Result<Me, ApiError> {
    let s = subscribers::get(tx, buyer.0)
        .await?
        .ok_or(ApiError::NotFound("subscriber"))?;
    let mut titles = Titles::default();
    let mut memberships = Vec::new();
    for m in buyer_view::of_telegram_user(tx, user_id, MAX).await? {
        let lifetime = m.expires_at.is_never() && m.status.holds_access();
        let renew_plan_id = match (lifetime, renew_of(config, &m.renew)) {
            (false, Some(render::Callback::Plan(id))) => Some(id),
            (false, Some(render::Callback::Buy(channel))) => {
                plans::default_of(tx, channel).await?.map(|p| p.id)
            }
            _ => None,
        };
        let title = render::title(l, m.translations.title(l, &m.title), m.renew.channel_id);
        titles.0.insert(m.renew.channel_id, title.clone());
        memberships.push(Membership {
            id: m.id,
            channel_id: m.renew.channel_id,
            channel_title: title,
            status: m.status,
            expires_at: m.expires_at.at(),
            lifetime,
            renew_plan_id,
        });
    }
    let filter = star_subscriptions::Filter {
        subscriber_id: Some(buyer.0),
        ..Default::default()
    };
    let mut subscriptions = Vec::new();
    for sub in star_subscriptions::list(tx, &filter, 0, MAX).await? {
        if sub.applied {
            subscriptions.push(subscription(tx, l, &mut titles, &sub).await?);
        }
    }
    let filter = payments::Filter {
        subscriber_id: Some(buyer.0),
        ..Default::default()
    };
    let mut payments = Vec::new();
    for p in payments::list(tx, &filter, 0, MAX).await? {
        if !matches!(
            p.outcome,
            Outcome::Applied | Outcome::Refunded | Outcome::RefundPending
        ) {
            continue;
        }
        let channel_title = match p.channel_id {
            Some(c) => Some(titles.of(tx, l, c).await?),
            None => None,
        };
        payments.push(Payment {
            id: p.id,
            paid_at: p.paid_at,
            amount_text: render::price(l, &p.money()),
            channel_title,
            gateway: p.gateway.clone(),
            refunded: matches!(p.outcome, Outcome::Refunded | Outcome::RefundPending),
        });
    }
    payments.reverse();
    let referral = match config.telegram_bot_username.as_deref() {
        Some(bot) => match buyer_links::own_link(tx, buyer.0).await? {
            OwnLink::Code { code, .. } => Some(Referral {
                link: affiliates::link(bot, &code),
                code,
            }),
            OwnLink::Unavailable | OwnLink::Refused => None,
        },
        None => None,
    };
    Ok(Me {
        subscriber: Subscriber {
            id: s.id,
            name: s.display_name,
            language: l,
        },
        memberships,
        subscriptions,
        payments,
        referral,
    })
}

/// Remembers `chosen` as subscriber `buyer`'s language, as `/language` does.
pub async fn choose_language(
    tx: &Transaction<'_>,
    buyer: SubscriberId,
    chosen: Language,
) -> Result<(), ApiError> {
    subscribers::set_language(tx, buyer.0, Some(chosen)).await?;
    tracing::info!(subscriber_id = buyer.0, language = %chosen, "Mini App language chosen");
    Ok(())
}

/// What the page asks of a Stars subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// Stop its renewals.
    Cancel,
    /// Renew again (one the buyer cancelled, not yet past its renewal date).
    Resume,
}

/// Cancels or resumes buyer `buyer`'s (Telegram user `user_id`) Stars subscription `id`:
/// `editUserStarSubscription` first (503 when Telegram does not answer), then the record, as
/// when the buyer does it in Telegram ([`star_subscriptions::cancelled_in_telegram`],
/// [`star_subscriptions::reenabled`]). `None`: no such subscription of this buyer; `Err`: why it
/// cannot be resumed, in `l`.
pub async fn edit_subscription(
    db: &Pool,
    config: &Config,
    l: Language,
    buyer: SubscriberId,
    user_id: i64,
    id: i64,
    edit: Edit,
) -> Result<Option<Result<Subscription, String>>, ApiError> {
    let client = db.get().await?;
    let Some(s) = star_subscriptions::get(&client, id)
        .await?
        .filter(|s| s.subscriber_id == buyer.0 && s.applied)
    else {
        return Ok(None);
    };
    drop(client);
    let wanted = match edit {
        Edit::Cancel => Status::Cancelled,
        Edit::Resume => Status::Active,
    };
    if edit == Edit::Resume
        && s.status == Status::Cancelled
        && (s.cancelled_by != Some(CancelledBy::Buyer) || s.expires_at <= Utc::now())
    {
        return Ok(Some(Err(texts::button_invalid(l))));
    }
    if s.status != wanted {
        let bot = BotApi::from_config(config, DEFAULT_TIMEOUT)
            .ok_or_else(|| ApiError::Unavailable("TELEGRAM_BOT_TOKEN is not set".into()))?;
        bot.edit_user_star_subscription(user_id, &s.charge_id, edit == Edit::Cancel)
            .await
            .map_err(|e| {
                ApiError::Unavailable(format!(
                    "Telegram did not change the subscription: {}",
                    bot.redact(&e.to_string())
                ))
            })?;
        crate::transaction!(db, |tx| {
            if let Some(now) = star_subscriptions::lock(tx, id).await? {
                match (edit, now.status) {
                    (Edit::Cancel, Status::Active) => {
                        star_subscriptions::cancelled_in_telegram(tx, id).await?
                    }
                    (Edit::Resume, Status::Cancelled) => {
                        star_subscriptions::reenabled(tx, id).await?
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
        tracing::info!(
            subscription_id = id,
            ?edit,
            "Stars subscription changed from the Mini App"
        );
    }
    let client = db.get().await?;
    let s = star_subscriptions::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("star subscription"))?;
    Ok(Some(Ok(subscription(
        &client,
        l,
        &mut Titles::default(),
        &s,
    )
    .await?)))
}
