//! Channels: the private Telegram channels and supergroups (forums or not) we sell access to,
//! handled alike. This module owns the `channels` rows — [`Channel`] as staff see it and the
//! projections other modules read ([`Offer`] for the bot, [`MemberCounts`] for the overview) —
//! and the rules of changing one, so every way of
//! changing a channel (the staff API, or any other way in) goes through them:
//!
//! - a `recurring` channel is a Telegram Stars (`XTR`) channel billed every
//!   [`RECURRING_PERIOD_DAYS`] days (also a CHECK of the schema, reported as [`RECURRING_RULE`]);
//! - a new `telegram_chat_id` is refused while members are in the current chat or effects are
//!   still to be performed there ([`chat_change_blocker`]), and it clears the stored
//!   `invite_link`, which belongs to the old chat;
//! - a new or lower `seat_limit` binds every seat decision not yet committed: the row is locked
//!   `FOR UPDATE` first ([`lock_for_change`], `docs/locking.md`);
//! - a channel that memberships, orders or payments refer to is never deleted (deactivate it),
//!   nor one that a plan other than its default plan includes (a bundle, a trial: the plan
//!   goes first);
//! - its `currency` does not change while a plan other than its default plan includes it
//!   ([`currency_change_blocker`]), so a plan's currency stays the currency of each of its
//!   channels (`crate::catalog::plans`); the channel's default plan follows its price fields (the
//!   schema's triggers, migration 0009).
//!
//! The lock-order statements that read a channel's terms under a seat decision
//! (`orders::seats::lock_channel_terms`) and the statements of other owners that join channels
//! stay with their owners.
//!
//! By concern: the channel and its reads here; its writes and their rules (`changes`); what
//! the bot and the overview read of it (`projections`); its Telegram side, the join link and
//! the bot's rights (`telegram`).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::{
    common::error::ApiError,
    db,
    present::translations::{Translation, Translations},
};

/// The select list of [`Channel`] (a macro, so SQL constants can splice it with `concat!`).
macro_rules! channel_columns {
    () => {
        "id, telegram_chat_id, title, price_minor, currency, billing_period_days, \
         grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, \
         telegram_status, translations, door"
    };
}

mod changes;
mod projections;
mod telegram;

pub use changes::{
    Fields, PlanChannel, change, chat_change_blocker, chat_id_error, create,
    currency_change_blocker, delete, lock_for_change, lock_for_plan,
};
pub use projections::{
    MemberCounts, Offer, Price, active_offers, member_counts, offer, price, title, titles,
};
pub use telegram::{
    DoorOf, WithoutRights, door_of_chat, forget_invite_link, id_by_chat, set_telegram_status,
    store_invite_link, stored_invite_link, without_rights,
};

/// The columns of [`Channel`].
pub const COLUMNS: &str = channel_columns!();

const LIST_SQL: &str = concat!(
    "SELECT ",
    channel_columns!(),
    " FROM channels
                 WHERE id > $1::bigint AND ($2::boolean IS NULL OR active = $2)
                 ORDER BY id LIMIT $3"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    channel_columns!(),
    " FROM channels WHERE id = $1"
);
/// Telegram sells Stars subscriptions with a 30-day period only.
pub const RECURRING_PERIOD_DAYS: i32 = 30;
/// Why a channel cannot be `recurring`, as the per-field 422 says it.
pub const RECURRING_RULE: &str =
    "is allowed only for XTR (Telegram Stars) channels with billing_period_days 30";

/// A private Telegram channel or group (a supergroup, forum or not) for sale.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "telegram_chat_id": -1001000000001_i64, "title": "Premium signals",
    "price_minor": 19900, "currency": "UAH", "billing_period_days": 30, "grace_period_days": 3,
    "seat_limit": null, "active": true, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z", "description": "Daily market signals.",
    "recurring": false, "buy_link": "https://t.me/subgate_bot?start=c1", "telegram_status": "ok",
    "door": "bot", "paywall_url": "https://pay.example.com/app/?c=1",
    "translations": {"uk": {"title": "Преміум-сигнали", "description": "Щоденні ринкові сигнали."}}}))]
pub struct Channel {
    pub id: i32,
    pub telegram_chat_id: i64,
    pub title: String,
    pub price_minor: i64,
    pub currency: String,
    pub billing_period_days: i32,
    pub grace_period_days: i32,
    pub seat_limit: Option<i32>,
    pub active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Shown to buyers in the bot.
    pub description: Option<String>,
    /// Sold as a Telegram Stars subscription renewing every 30 days (`XTR`, 30 days only).
    pub recurring: bool,
    /// `https://t.me/<bot>?start=c<id>`: opens this channel's offer in the bot; null without
    /// `TELEGRAM_BOT_USERNAME`.
    pub buy_link: Option<String>,
    /// Whether the bot can manage the chat's members (read-only; from Telegram).
    #[schema(value_type = String, example = "ok")]
    pub telegram_status: TelegramStatus,
    /// How a join request of the chat is answered: `bot` (a member is approved, anyone else
    /// declined) or `mini_app` (a request carrying a query opens the paywall; docs/bot.md).
    #[schema(value_type = String, example = "bot")]
    pub door: Door,
    /// `PUBLIC_URL/app/?c=<id>`: the paywall of this channel or group; null without
    /// `PUBLIC_URL`.
    pub paywall_url: Option<String>,
    /// The title and description in other languages the bot speaks (`uk`, `ru`, `en`): what a
    /// buyer of that language reads instead of `title` and `description`.
    #[schema(value_type = HashMap<String, Translation>)]
    pub translations: Translations,
}

crate::text_enum! {
    /// How a channel's (or group's) join requests are answered.
    pub enum Door {
        /// By the bot's rule: a member is approved, anyone else declined.
        Bot => "bot",
        /// By the paywall: a request carrying a query opens the Mini App.
        MiniApp => "mini_app",
    }
}

crate::text_enum! {
    /// Whether the bot can act in a channel's chat, as Telegram last told us.
    pub enum TelegramStatus {
        /// The bot is an administrator that may invite and ban users.
        Ok => "ok",
        /// The bot lost those rights, or was removed: the chat's access effects wait.
        NoRights => "no_rights",
    }
}

crate::from_row!(Channel [channel_columns!()] {
    id,
    telegram_chat_id,
    title,
    price_minor,
    currency,
    billing_period_days,
    grace_period_days,
    seat_limit,
    active,
    created_at,
    updated_at,
    description,
    recurring,
    buy_link => None,
    telegram_status,
    translations,
    door,
    paywall_url => None,
});

impl Channel {
    /// Fills the read-only `buy_link` from the bot's username (`TELEGRAM_BOT_USERNAME`) and
    /// `paywall_url` from `PUBLIC_URL`.
    pub fn with_links(mut self, bot_username: Option<&str>, public_url: Option<&str>) -> Channel {
        self.buy_link = buy_link(bot_username, self.id);
        self.paywall_url = paywall_url(public_url, self.id);
        self
    }
}

/// The paywall of channel `id` (the Mini App's page), when the service's public URL is known.
pub fn paywall_url(public_url: Option<&str>, id: i32) -> Option<String> {
    public_url.map(|base| format!("{base}/app/?c={id}"))
}

/// The deep link that opens channel `id`'s offer in the bot, when the bot's username is known.
pub fn buy_link(bot_username: Option<&str>, id: i32) -> Option<String> {
    bot_username.map(|bot| format!("https://t.me/{bot}?start=c{id}"))
}

/// Channels with ids after `after`, by id, at most `limit`; only those whose `active` is
/// `active` when given.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    active: Option<bool>,
    limit: i64,
) -> Result<Vec<Channel>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &active, &limit]).await
}

/// The id of every channel, ascending.
pub async fn ids(client: &impl GenericClient) -> Result<Vec<i32>, ApiError> {
    db::rows(client, "SELECT id FROM channels ORDER BY id", &[])
        .await?
        .iter()
        .map(|r| r.try_get("id").map_err(ApiError::from))
        .collect()
}

/// Channel `id`.
pub async fn get(client: &impl GenericClient, id: i32) -> Result<Option<Channel>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// The chats whose bot lacks its admin rights (`telegram_status = 'no_rights'`), as a subquery
/// (a macro, so SQL constants can splice it with `concat!`): their access effects wait.
macro_rules! no_rights_chats_sql {
    () => {
        "SELECT telegram_chat_id FROM channels WHERE telegram_status = 'no_rights'"
    };
}
pub(crate) use no_rights_chats_sql;
