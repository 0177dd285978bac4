//! Plans: the ways a channel is sold (API.md "Offers"). A plan covers one channel or several (a
//! bundle), is paid or a free trial, and lasts `period_days` or for life (`None`). Every channel
//! has one default plan (`is_default`), kept by the schema equal to the channel's own price
//! fields (migration 0009's triggers), which is what an order made by channel buys.
//!
//! This module owns the `plans` and `plan_channels` rows: the reads every other module uses
//! ([`get`], [`active_of_channel`]) and the rules of writing them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    currency::Money,
    db::{self, FromRow},
    error::ApiError,
    ids::ChannelId,
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
         p.created_at, p.updated_at, \
         ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id \
               ORDER BY pc.position) AS channel_ids"
    };
}

/// A plan as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "title": "Premium signals", "description": null,
    "channel_ids": [1], "kind": "paid", "price_minor": 19900, "currency": "UAH",
    "period_days": 30, "recurring": false, "active": true, "position": 0, "is_default": true,
    "buy_link": "https://t.me/subgate_bot?start=p1",
    "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Plan {
    pub id: i64,
    pub title: String,
    pub description: Option<String>,
    /// The channels the plan grants, in the plan's order; more than one: a bundle. The first
    /// is the `channel_id` of the plan's orders.
    pub channel_ids: Vec<i32>,
    #[schema(value_type = String)]
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
}

impl Plan {
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

impl FromRow for Plan {
    const COLUMNS: &'static str = plan_columns!();

    fn from_row(r: &Row) -> Result<Plan, tokio_postgres::Error> {
        Ok(Plan {
            id: r.try_get("id")?,
            title: r.try_get("title")?,
            description: r.try_get("description")?,
            channel_ids: r.try_get("channel_ids")?,
            kind: r.try_get("kind")?,
            price_minor: r.try_get("price_minor")?,
            currency: r.try_get("currency")?,
            period_days: r.try_get("period_days")?,
            recurring: r.try_get("recurring")?,
            active: r.try_get("active")?,
            position: r.try_get("position")?,
            is_default: r.try_get("is_default")?,
            buy_link: None,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

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
