//! The Mini App's side of the buyer conversation: the page at `/app/` (the paywall at a
//! channel's door and the member portal) asks through `/app/api/` what the bot would answer in
//! the chat, and its answers are decided by the same code: the catalogue ([`super::catalogue`]),
//! the buy button ([`super::buy::decide`]), promo codes ([`super::codes`]), `/subscriptions`
//! ([`crate::access::buyer_view`]) and the language choice.
//!
//! - [`init_data`]: who is asking, from Telegram's signed `initData` (pure);
//! - [`rate_limit`]: the limit per buyer (a token bucket per Telegram user);
//! - [`offer`]: a channel's plans as this buyer may buy them;
//! - [`orders`]: an order made (or reused, or granted) and how the page pays it;
//! - [`portal`]: the buyer's memberships, Stars subscriptions, payments and language.
//!
//! Everything here returns plain values; `crate::api::mini_app` turns them into JSON.

pub mod init_data;
pub mod offer;
pub mod orders;
pub mod portal;
pub mod rate_limit;

pub use init_data::sign_init_data;

use deadpool_postgres::Transaction;

use super::{
    buy,
    texts::{self, Language},
    update::Sender,
};
use crate::{
    access::subscribers,
    common::{error::ApiError, ids::SubscriberId},
    config::Config,
    telegram_api::client::{BotApi, BotError, DEFAULT_TIMEOUT},
};

/// Points the bot's menu button at the member portal (`PUBLIC_URL/app/`), labelled in the
/// default language: `setChatMenuButton` with a `web_app` button. `Ok(false)`: nothing to do
/// (no bot token or no `PUBLIC_URL`). Called once when the service starts.
pub async fn set_menu_button(config: &Config) -> Result<bool, BotError> {
    let (Some(bot), Some(public_url)) = (
        BotApi::from_config(config, DEFAULT_TIMEOUT),
        config.public_url.as_deref(),
    ) else {
        return Ok(false);
    };
    let text = texts::portal_button(crate::present::locale::default_language());
    bot.set_menu_web_app(&text, &format!("{public_url}/app/"))
        .await
}

/// The buyer behind a checked `initData`: upserted as the bot upserts a sender
/// ([`buy::upsert_subscriber`]), and the language to speak to them (the one remembered for them,
/// else their Telegram app's, else the default: [`Language::choose`]).
pub async fn buyer(
    tx: &Transaction<'_>,
    from: &Sender,
) -> Result<(SubscriberId, Language), ApiError> {
    let id = buy::upsert_subscriber(tx, from).await?;
    let remembered = subscribers::language_of_telegram_user(tx, from.id).await?;
    Ok((
        SubscriberId(id),
        Language::choose(remembered, from.language_code.as_deref()),
    ))
}
