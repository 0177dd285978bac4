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

use super::{buy, texts::Language, update::Sender};
use crate::{access::subscribers, common::error::ApiError, common::ids::SubscriberId};

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
