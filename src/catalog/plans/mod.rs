//! Plans: the ways a channel is sold (API.md "Offers"). A plan covers one channel or several (a
//! bundle), is paid or a free trial, and lasts `period_days` or for life (`None`). Every channel
//! has one default plan (`is_default`), kept by the schema equal to the channel's own price
//! fields (migration 0009's triggers), which is what an order made by channel buys.
//!
//! This module owns the `plans` and `plan_channels` rows: the reads every other module uses
//! ([`get`], [`active_of_channel`]) and the rules of writing them ([`create`], [`change`],
//! [`delete`]), so every way of writing a plan goes through them:
//!
//! - a paid plan costs more than 0, a trial nothing and lasts 1..90 days; a period is 1..3660
//!   days or none (lifetime); `recurring` only for a paid `XTR` plan of 30 days ([`term_errors`],
//!   pure; the schema's CHECKs are the backstop and answer the same fields);
//! - 1..10 distinct existing channels, all of one currency, which is the plan's: the channels
//!   are read `FOR SHARE` ([`channels::lock_for_plan`](crate::catalog::channels::lock_for_plan)) so that currency cannot change, nor a
//!   channel go, before the plan commits (a channel's currency change waits for that lock and
//!   is then refused while a plan other than its default plan includes it);
//! - once a plan has orders its `kind`, `currency` and `channel_ids` stay, and it is never
//!   deleted (deactivate it): the plan's row is locked `FOR UPDATE` first, which waits for every
//!   order being inserted for it (their foreign key's `FOR KEY SHARE`), so the check sees them;
//! - a channel's default plan (`is_default`) is that channel's own price fields: paid, with a
//!   period, that channel only, never deleted on its own (the channel's delete takes it). Its
//!   `price_minor`, `currency`, `period_days` and `recurring` are written to the channel
//!   ([`channels::change`](crate::catalog::channels::change), with the channel's rules: its currency change may be refused) and
//!   reach the plan through the schema's trigger, in the same transaction — the channel's row
//!   first, then the plan's, the order a channel's own change takes them in.
//!
//! - a plan may carry prices in crypto assets (`crypto_prices`, [`crypto_prices`]): the owner's
//!   exact numbers per asset, sold through Crypto Pay; a trial has none (it is free).
//!
//! By concern: the plan and its reads here; the rules of its fields, pure (`rules`); the
//! writes that apply them (`changes`); the crypto prices' type and input rule
//! (`crypto_prices`).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;

use crate::{
    common::{currency::Money, error::ApiError, ids::ChannelId},
    db,
    present::{
        locale::Language,
        translations::{Translation, Translations},
    },
};

crate::text_enum! {
    /// What a plan sells: paid access, or a free trial (once per buyer and channel, ever).
    pub enum Kind {
        Paid => "paid",
        Trial => "trial",
    }
}

/// The select list of [`Plan`] over `plans p`, with its channels in the plan's order (a macro,
/// so SQL constants can splice it with `concat!`).
macro_rules! plan_columns {
    () => {
        "p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, \
         p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, \
         p.created_at, p.updated_at, p.translations, p.crypto_prices, \
         ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id \
               ORDER BY pc.position) AS channel_ids"
    };
}

mod changes;
pub mod crypto_prices;
mod rules;

pub use changes::{change, create, delete};
pub use crypto_prices::CryptoPrices;
pub use rules::{
    Fields, MAX_CHANNELS, MAX_PERIOD_DAYS, MAX_TRIAL_DAYS, RECURRING_PERIOD_DAYS, RECURRING_RULE,
    Terms, channel_ids_error, crypto_prices_errors, default_plan_errors, term_errors,
};

/// A plan as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "title": "Premium signals", "description": null,
    "channel_ids": [1], "kind": "paid", "price_minor": 19900, "currency": "UAH",
    "period_days": 30, "recurring": false, "active": true, "position": 0, "is_default": true,
    "buy_link": "https://t.me/subgate_bot?start=p1",
    "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z",
    "translations": {"uk": {"title": "Преміум-сигнали", "description": null}},
    "crypto_prices": {"USDT": "4.99", "TON": "1.5"}}))]
pub struct Plan {
    pub id: i64,
    pub title: String,
    pub description: Option<String>,
    /// The channels the plan grants, in the plan's order; more than one: a bundle. The first
    /// is the `channel_id` of the plan's orders.
    pub channel_ids: Vec<i32>,
    #[schema(value_type = Kind)]
    pub kind: Kind,
    pub price_minor: i64,
    pub currency: String,
    /// Days of access one purchase gives; null: lifetime.
    pub period_days: Option<i32>,
    /// Sold as a Telegram Stars subscription renewing every 30 days (`XTR`, 30 days only).
    pub recurring: bool,
    pub active: bool,
    /// Display order among a channel's plans (after price).
    pub position: i32,
    /// The channel's default plan: its terms are the channel's price fields.
    pub is_default: bool,
    /// `https://t.me/<bot>?start=p<id>`; null without `TELEGRAM_BOT_USERNAME`.
    pub buy_link: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The title and description in other languages the bot speaks: what a buyer of that
    /// language reads instead of `title` and `description` (a default plan reads as its
    /// channel).
    #[schema(value_type = HashMap<String, Translation>)]
    pub translations: Translations,
    /// The owner's prices in crypto assets, sold through Crypto Pay (door 6): asset → a
    /// decimal in the asset (`{"USDT": "4.99", "TON": "1.5"}`), exactly as fixed (no rate);
    /// null: not sold in crypto.
    #[schema(value_type = Option<HashMap<String, String>>, example = json!({"USDT": "4.99"}))]
    pub crypto_prices: Option<CryptoPrices>,
}

impl Plan {
    /// The title as a buyer of `l` reads it.
    pub fn title_in(&self, l: Language) -> &str {
        self.translations.title(l, &self.title)
    }

    /// The description as a buyer of `l` reads it.
    pub fn description_in(&self, l: Language) -> Option<&str> {
        self.translations
            .description(l, self.description.as_deref())
    }

    /// The plan's list price.
    pub fn price(&self) -> Money {
        Money::new(self.price_minor, &self.currency)
    }

    /// More than one channel.
    pub fn is_bundle(&self) -> bool {
        self.channel_ids.len() > 1
    }

    /// Lifetime access (no period).
    pub fn is_lifetime(&self) -> bool {
        self.period_days.is_none()
    }

    /// The plan's channels, typed for the pair locks, in ascending id order (the order the
    /// pair locks are taken in).
    pub fn channels_ascending(&self) -> Vec<ChannelId> {
        let mut ids: Vec<ChannelId> = self.channel_ids.iter().map(|c| ChannelId(*c)).collect();
        ids.sort();
        ids
    }

    /// Fills the read-only `buy_link` from the bot's username (`TELEGRAM_BOT_USERNAME`).
    pub fn with_buy_link(mut self, bot_username: Option<&str>) -> Plan {
        self.buy_link = buy_link(bot_username, self.id);
        self
    }
}

/// The deep link that opens plan `id` in the bot, when the bot's username is known.
pub fn buy_link(bot_username: Option<&str>, id: i64) -> Option<String> {
    bot_username.map(|bot| format!("https://t.me/{bot}?start=p{id}"))
}

crate::from_row!(Plan [plan_columns!()] {
    id,
    title,
    description,
    channel_ids,
    kind,
    price_minor,
    currency,
    period_days,
    recurring,
    active,
    position,
    is_default,
    buy_link => None,
    created_at,
    updated_at,
    translations,
    crypto_prices,
});

const GET_SQL: &str = concat!("SELECT ", plan_columns!(), " FROM plans p WHERE p.id = $1");
const DEFAULT_OF_SQL: &str = concat!(
    "SELECT ",
    plan_columns!(),
    " FROM plans p WHERE p.default_of = $1"
);
// Cheapest first, then `position`, then id: the bot's catalogue order.
const ACTIVE_OF_CHANNEL_SQL: &str = concat!(
    "SELECT ",
    plan_columns!(),
    " FROM plans p
     WHERE p.active AND EXISTS (SELECT 1 FROM plan_channels pc
                                WHERE pc.plan_id = p.id AND pc.channel_id = $1)
     ORDER BY p.price_minor, p.position, p.id"
);

/// Plan `id`, if any.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Plan>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

const KEY_SHARE_SQL: &str = "SELECT id FROM plans WHERE id = $1 FOR KEY SHARE";

/// Plan `id` for an order being made of it, its row locked `FOR KEY SHARE` first (the lock the
/// order's foreign key takes anyway, taken before the plan is read): a change of the plan's
/// kind, currency or channels (row `FOR UPDATE`, [`change`]) either committed before, and the
/// read that follows the lock sees its terms, or waits for the order and then sees it and is
/// refused. Read in a statement of its own after the lock, so it sees what the lock waited for.
pub async fn get_for_order(tx: &Transaction<'_>, id: i64) -> Result<Option<Plan>, ApiError> {
    if db::row_opt(tx, KEY_SHARE_SQL, &[&id]).await?.is_none() {
        return Ok(None);
    }
    get(tx, id).await
}

/// Channel `channel_id`'s default plan (`None`: no such channel).
pub async fn default_of(
    client: &impl GenericClient,
    channel_id: i32,
) -> Result<Option<Plan>, ApiError> {
    db::opt(client, DEFAULT_OF_SQL, &[&channel_id]).await
}

/// The active plans that include channel `channel_id` (bundles too), cheapest first, then by
/// `position`: what the bot lists under the channel.
pub async fn active_of_channel(
    client: &impl GenericClient,
    channel_id: i32,
) -> Result<Vec<Plan>, ApiError> {
    db::all(client, ACTIVE_OF_CHANNEL_SQL, &[&channel_id]).await
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    plan_columns!(),
    " FROM plans p
     WHERE p.id > $1
       AND ($2::integer IS NULL OR EXISTS (SELECT 1 FROM plan_channels pc
                                           WHERE pc.plan_id = p.id AND pc.channel_id = $2))
       AND ($3::boolean IS NULL OR p.active = $3)
     ORDER BY p.id LIMIT $4"
);
/// Plans with ids after `after`, by id, at most `limit`; only those that include channel
/// `channel_id` (bundles too) and whose `active` is `active`, when given.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    channel_id: Option<i32>,
    active: Option<bool>,
    limit: i64,
) -> Result<Vec<Plan>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &channel_id, &active, &limit]).await
}
