//! What one message says to its buyer: the owner's pattern in the buyer's language filled in
//! with their values, the line on how to stop such messages, and the buy button — made when the
//! message is sent, from what is true then ([`compose`]).
//!
//! - The text is the pattern of the buyer's language, else of the bot's default language, else
//!   any the owner wrote.
//! - `{ $channel }` and `{ $expires }` are the channel the message is about and the day the
//!   buyer's access there ends or ended: the order's channel (an unpaid checkout), the
//!   membership's (a win-back), the subscription's (a cancel offer, a failed renewal), and for
//!   a broadcast the buyer's latest membership among the segment's channels.
//! - `{ $code }` is the code made for the buyer (a win-back, a cancel offer) or the broadcast
//!   button's; `{ $price }` the price of the plan the button buys, after that code.
//! - The button buys the plan: a broadcast's, the unpaid order's (the bot's buy rule reuses the
//!   order while it can still be paid as invoiced, else makes a fresh one), the plan the
//!   buyer last paid for in the channel (else its default plan) for a win-back, the
//!   subscription's plan for a cancel offer or a failed renewal. With a code and a bot username
//!   it is a link to the bot's `/start p<plan>-<CODE>`, which applies the code first; else it
//!   presses buy directly. No button when that plan cannot be bought now (inactive).

use deadpool_postgres::GenericClient;
use serde_json::{Value, json};

use super::{Kind, sent::SendFacts};
use crate::{
    catalog::{
        plans::{self, Kind as PlanKind},
        promo_codes::{self, Off},
    },
    common::{currency::Money, error::ApiError},
    config::Config,
    present::{
        locale::{Language, default_language},
        patterns::{self, Values},
        render::{self, Callback},
        texts,
    },
};

/// A message ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    pub text: String,
    pub reply_markup: Option<Value>,
}

/// The owner's pattern for `l` among `texts` (`{lang: pattern}`): `l`'s, else the default
/// language's, else the first one written.
pub fn pattern_for(texts: &Value, l: Language) -> Option<&str> {
    let map = texts.as_object()?;
    map.get(l.as_str())
        .or_else(|| map.get(default_language().as_str()))
        .or_else(|| Language::ALL.iter().find_map(|l| map.get(l.as_str())))
        .and_then(Value::as_str)
}

/// What message `f` says now, with its button; `None` when the owner wrote no text at all.
pub async fn compose(
    client: &impl GenericClient,
    config: &Config,
    f: &SendFacts,
) -> Result<Option<Composed>, ApiError> {
    let l = f.language;
    let Some(pattern) = f.texts.as_ref().and_then(|t| pattern_for(t, l)) else {
        return Ok(None);
    };
    let plan = match f.plan_id {
        Some(id) => plans::get(client, id).await?,
        None => None,
    };
    // A broadcast's code is the owner's, checked now for this buyer; an offer's is theirs.
    let button_code = f
        .button
        .as_ref()
        .and_then(|b| b.get("promo_code"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let code = f.promo_code.clone().or(button_code);
    let price = match &plan {
        Some(p) => Some(price_after(client, f, p, code.as_deref()).await?),
        None => None,
    };
    let values = Values {
        name: f.name.clone().unwrap_or_default(),
        channel: match (f.channel_id, &f.channel_title, &f.channel_translations) {
            (Some(id), Some(title), Some(t)) => render::title(l, t.title(l, title), id),
            _ => plan
                .as_ref()
                .map(|p| p.translations.title(l, &p.title).to_string())
                .unwrap_or_default(),
        },
        expires: f
            .expires_at
            .and_then(|e| e.at())
            .map(|t| texts::day(l, t))
            .unwrap_or_default(),
        code: code.clone().unwrap_or_default(),
        price: price
            .as_ref()
            .map(|p| render::price(l, p))
            .unwrap_or_default(),
    };
    let body = patterns::render(l, pattern, &values);
    let text = render::clip(
        &format!("{}\n\n{}", body.trim_end(), texts::stop_hint(l)),
        render::MESSAGE_MAX,
    );
    let button = plan.as_ref().filter(|p| p.active).map(|p| {
        button(
            config,
            l,
            f.kind,
            p,
            code.as_deref(),
            f.applies == Some(true),
        )
    });
    Ok(Some(Composed {
        text,
        reply_markup: button.map(|b| json!({ "inline_keyboard": [[b]] })),
    }))
}

/// The price of `plan` after `code` for the buyer of `f` (the list price when the code gives
/// nothing to them now).
async fn price_after(
    client: &impl GenericClient,
    f: &SendFacts,
    plan: &plans::Plan,
    code: Option<&str>,
) -> Result<Money, ApiError> {
    let list = Money {
        amount_minor: plan.price_minor,
        currency: plan.currency.clone(),
    };
    if plan.kind != PlanKind::Paid {
        return Ok(list);
    }
    let off = match (f.promo_percent_off, code) {
        (Some(percent), _) => promo_codes::discount_minor(plan.price_minor, Off::Percent(percent)),
        (None, Some(code)) => {
            let buyer = Some(crate::common::ids::SubscriberId(f.subscriber_id));
            match promo_codes::preview(client, code, buyer).await? {
                Some(p) => match p.discount_on(client, buyer, plan).await? {
                    Ok(d) => d.discount_minor,
                    Err(_) => 0,
                },
                None => 0,
            }
        }
        (None, None) => 0,
    };
    Ok(Money {
        amount_minor: plan.price_minor - off,
        currency: plan.currency.clone(),
    })
}

/// The message's button (see the module doc).
fn button(
    config: &Config,
    l: Language,
    kind: Kind,
    plan: &plans::Plan,
    code: Option<&str>,
    applies: bool,
) -> Value {
    let label = if kind == Kind::UnpaidCheckout && applies {
        texts::message_pay_button(l)
    } else {
        texts::message_buy_button(l, plan.translations.title(l, &plan.title))
    };
    match (code, &config.telegram_bot_username) {
        (Some(code), Some(bot)) => render::url_button(
            &label,
            &format!("https://t.me/{bot}?start=p{}-{code}", plan.id),
        ),
        _ => render::button(&label, Callback::Plan(plan.id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buyer_s_language_else_the_default_else_any() {
        let texts = json!({"uk": "Привіт", "ru": "Привет"});
        assert_eq!(pattern_for(&texts, Language::Uk), Some("Привіт"));
        assert_eq!(pattern_for(&texts, Language::Ru), Some("Привет"));
        assert_eq!(
            pattern_for(&texts, Language::En),
            Some("Привіт"),
            "the first written"
        );
        let texts = json!({"en": "Hi", "uk": "Привіт"});
        assert_eq!(
            pattern_for(&texts, Language::Ru),
            Some("Hi"),
            "the default, English"
        );
        assert_eq!(pattern_for(&json!({}), Language::En), None);
    }
}
