//! `GET /app/api/offer`: a channel's plans as the bot would list them for this buyer (its
//! catalogue's own view: language, trial eligibility, the price after a remembered or given
//! code, lifetime held, full channels), with the buyer's membership of the channel. A code typed on
//! the page is checked here (a wrong one counts against the buyer's limit on wrong codes, as in
//! the bot: [`super::super::guesses`]) but kept only when an order is made with it.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::super::{
    Gateway, catalogue, codes, gateway, guesses,
    render::{self, Availability, PlanView},
    texts::{self, CodeRefusal, Language},
};
use crate::{
    access::memberships,
    common::{
        currency::Money,
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    config::Config,
};

/// The offer the page shows.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppOffer)]
pub struct Offer {
    pub language: Language,
    pub channel: Channel,
    pub plans: Vec<PlanOffer>,
    pub promo_code: Option<PromoCode>,
    pub member: Option<Member>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppChannel)]
pub struct Channel {
    pub id: i32,
    pub title: String,
    pub description: Option<String>,
}

/// A price with its text in the buyer's language.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPrice)]
pub struct Price {
    pub amount_minor: i64,
    pub currency: String,
    pub text: String,
}

/// The price with a code.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppDiscounted)]
pub struct Discounted {
    pub amount_minor: i64,
    pub text: String,
}

/// One plan as the bot lists it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPlanOffer)]
pub struct PlanOffer {
    pub id: i64,
    pub name: String,
    pub trial: bool,
    pub price: Price,
    pub discounted: Option<Discounted>,
    pub period_days: Option<i32>,
    pub recurring: bool,
    pub bundle_with: Vec<String>,
    pub availability: &'static str,
    /// `stars`, `card`, or none (a trial, or no gateway for its currency).
    pub pay_with: Option<&'static str>,
}

/// A code typed on the page: whether it applies, and why not in the buyer's words.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPromoCode)]
pub struct PromoCode {
    pub code: String,
    pub accepted: bool,
    pub reason: Option<String>,
}

/// The buyer's membership of the channel.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppMember)]
pub struct Member {
    pub status: memberships::Status,
    pub expires_at: Option<DateTime<Utc>>,
}

/// How a price is paid, as the page names it.
pub fn pay_with(g: Option<Gateway>) -> Option<&'static str> {
    match g? {
        Gateway::Stars => Some("stars"),
        Gateway::Card => Some("card"),
    }
}

fn availability(a: Availability) -> &'static str {
    match a {
        Availability::Buyable => "buyable",
        Availability::Full => "full",
        Availability::Lifetime => "lifetime",
        Availability::NotOnSale => "not_on_sale",
    }
}

fn plan_offer(config: &Config, l: Language, p: PlanView) -> PlanOffer {
    let currency = p.price.currency.clone();
    PlanOffer {
        id: p.id,
        name: p.name,
        trial: p.trial,
        price: Price {
            text: render::price(l, &p.price),
            amount_minor: p.price.amount_minor,
            currency: currency.clone(),
        },
        discounted: p.discounted_minor.map(|amount_minor| Discounted {
            amount_minor,
            text: render::price(l, &Money::new(amount_minor, &currency)),
        }),
        period_days: p.period_days,
        recurring: p.recurring,
        bundle_with: p.bundle_with,
        availability: availability(p.availability),
        pay_with: if p.trial {
            None
        } else {
            pay_with(gateway(config, &currency))
        },
    }
}

/// Checks `text`, a code typed on the page, for `buyer` (Telegram user `user_id`): the code
/// when it may be used, and what the page says of it. An inactive code reads as an unknown one,
/// and past the limit on wrong codes none is looked up, as in the bot.
async fn typed_code(
    client: &impl GenericClient,
    l: Language,
    buyer: SubscriberId,
    user_id: i64,
    text: &str,
) -> Result<(Option<codes::Code>, PromoCode), ApiError> {
    let shown = render::clip(&render::one_line(text.trim()), 32).to_uppercase();
    if let guesses::Gate::Limited { retry_after_secs } = guesses::open(client, user_id).await? {
        return Ok((
            None,
            PromoCode {
                code: shown,
                accepted: false,
                reason: Some(texts::code_too_many(l, retry_after_secs)),
            },
        ));
    }
    let code = codes::by_text(client, text.trim(), Some(buyer))
        .await?
        .filter(|c| c.refusal() != Some(CodeRefusal::Inactive));
    if code.is_none() {
        guesses::wrong(client, user_id).await?;
    }
    Ok(match code {
        None => (
            None,
            PromoCode {
                code: shown,
                accepted: false,
                reason: Some(CodeRefusal::Unknown.text(l)),
            },
        ),
        Some(c) => match c.refusal() {
            Some(why) => (
                None,
                PromoCode {
                    code: c.text().to_string(),
                    accepted: false,
                    reason: Some(why.text(l)),
                },
            ),
            None => {
                let shown = PromoCode {
                    code: c.text().to_string(),
                    accepted: true,
                    reason: None,
                };
                (Some(c), shown)
            }
        },
    })
}

/// Channel `channel_id`'s offer for `buyer` (Telegram user `user_id`), in `l`, priced with
/// `promo_code` when given and usable; `None` when the channel is unknown or not active. With a
/// code, `client` is a transaction (a wrong code is counted).
pub async fn offer(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    buyer: SubscriberId,
    user_id: i64,
    channel_id: i32,
    promo_code: Option<&str>,
) -> Result<Option<Offer>, ApiError> {
    let (code, promo_code) = match promo_code.filter(|c| !c.trim().is_empty()) {
        Some(text) => {
            let (code, shown) = typed_code(client, l, buyer, user_id, text).await?;
            (code, Some(shown))
        }
        None => (None, None),
    };
    let Some(view) =
        catalogue::channel_offer_with(client, config, l, user_id, channel_id, code).await?
    else {
        return Ok(None);
    };
    let member = memberships::of_pair(client, buyer, ChannelId(channel_id))
        .await?
        .map(|m| Member {
            status: m.status,
            expires_at: m.expires_at.at(),
        });
    Ok(Some(Offer {
        language: l,
        channel: Channel {
            id: view.id,
            title: view.title,
            description: view.description,
        },
        plans: view
            .plans
            .into_iter()
            .map(|p| plan_offer(config, l, p))
            .collect(),
        promo_code,
        member,
    }))
}
