//! Channels: the private Telegram channels we sell access to. This module owns the `channels`
//! rows — [`Channel`] as staff see it and the projections other modules read ([`Offer`] for
//! the bot, [`MemberCounts`] for the overview) — and the rules of changing one, so every way of
//! changing a channel (the staff API today, a bot or an import tomorrow) goes through them:
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

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    access::memberships,
    common::{currency, error::ApiError},
    db::{self, FromRow},
    outbox::effects,
    present::{
        locale::Language,
        translations::{Translation, Translations},
    },
};

/// The select list of [`Channel`] (a macro, so SQL constants can splice it with `concat!`).
macro_rules! channel_columns {
    () => {
        "id, telegram_chat_id, title, price_minor, currency, billing_period_days, \
         grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, \
         telegram_status, translations"
    };
}

/// The columns of [`Channel`].
pub const COLUMNS: &str = channel_columns!();

const INSERT_SQL: &str = concat!(
    "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                             billing_period_days, grace_period_days, seat_limit, active,
                             description, recurring, translations)
                         VALUES ($1, $2, $3, $4, $5, COALESCE($6, 0), $7, COALESCE($8, true),
                                 $9, COALESCE($10, false), COALESCE($11::jsonb, '{}'::jsonb))
                         RETURNING ",
    channel_columns!()
);
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
const PATCH_SQL: &str = concat!(
    "UPDATE channels SET
                         telegram_chat_id = COALESCE($2, telegram_chat_id),
                         title = COALESCE($3, title),
                         price_minor = COALESCE($4, price_minor),
                         currency = COALESCE($5, currency),
                         billing_period_days = COALESCE($6, billing_period_days),
                         grace_period_days = COALESCE($7, grace_period_days),
                         seat_limit = CASE WHEN $8 THEN $9 ELSE seat_limit END,
                         active = COALESCE($10, active),
                         invite_link = CASE WHEN $2 <> telegram_chat_id THEN NULL
                                            ELSE invite_link END,
                         description = CASE WHEN $11 THEN $12 ELSE description END,
                         recurring = COALESCE($13, recurring),
                         translations = COALESCE($14, translations),
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING ",
    channel_columns!()
);
const LOCK_SQL: &str = "SELECT telegram_chat_id FROM channels WHERE id = $1 FOR UPDATE";
// A plan other than the channel's default plan that includes it with another currency: the
// channel's currency cannot become `$2`. (The one read of `plans` here: the rule guards the
// channel's column; `crate::catalog::plans` calls this module, so it cannot be asked.)
const CURRENCY_BLOCKER_SQL: &str =
    "SELECT p.id FROM plan_channels pc JOIN plans p ON p.id = pc.plan_id
     WHERE pc.channel_id = $1 AND p.default_of IS DISTINCT FROM $1 AND p.currency <> $2
     ORDER BY p.id LIMIT 5";
const LOCK_FOR_PLAN_SQL: &str =
    "SELECT id, currency FROM channels WHERE id = ANY($1) ORDER BY id FOR SHARE";
const DELETE_SQL: &str = "DELETE FROM channels WHERE id = $1";

/// Telegram sells Stars subscriptions with a 30-day period only.
pub const RECURRING_PERIOD_DAYS: i32 = 30;
/// Why a channel cannot be `recurring`, as the per-field 422 says it.
pub const RECURRING_RULE: &str =
    "is allowed only for XTR (Telegram Stars) channels with billing_period_days 30";

/// A private Telegram channel for sale.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "telegram_chat_id": -1001000000001_i64, "title": "Premium signals",
    "price_minor": 19900, "currency": "UAH", "billing_period_days": 30, "grace_period_days": 3,
    "seat_limit": null, "active": true, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z", "description": "Daily market signals.",
    "recurring": false, "buy_link": "https://t.me/subgate_bot?start=c1", "telegram_status": "ok",
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
    /// The title and description in other languages the bot speaks (`uk`, `ru`, `en`): what a
    /// buyer of that language reads instead of `title` and `description`.
    #[schema(value_type = HashMap<String, Translation>)]
    pub translations: Translations,
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

impl FromRow for Channel {
    const COLUMNS: &'static str = channel_columns!();

    fn from_row(r: &Row) -> Result<Channel, tokio_postgres::Error> {
        Ok(Channel {
            id: r.try_get("id")?,
            telegram_chat_id: r.try_get("telegram_chat_id")?,
            title: r.try_get("title")?,
            price_minor: r.try_get("price_minor")?,
            currency: r.try_get("currency")?,
            billing_period_days: r.try_get("billing_period_days")?,
            grace_period_days: r.try_get("grace_period_days")?,
            seat_limit: r.try_get("seat_limit")?,
            active: r.try_get("active")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
            description: r.try_get("description")?,
            recurring: r.try_get("recurring")?,
            buy_link: None,
            telegram_status: r.try_get("telegram_status")?,
            translations: r.try_get("translations")?,
        })
    }
}

impl Channel {
    /// Fills the read-only `buy_link` from the bot's username (`TELEGRAM_BOT_USERNAME`).
    pub fn with_buy_link(mut self, bot_username: Option<&str>) -> Channel {
        self.buy_link = buy_link(bot_username, self.id);
        self
    }
}

/// The deep link that opens channel `id`'s offer in the bot, when the bot's username is known.
pub fn buy_link(bot_username: Option<&str>, id: i32) -> Option<String> {
    bot_username.map(|bot| format!("https://t.me/{bot}?start=c{id}"))
}

/// The fields of a new channel, or of a change. In a new channel an absent field takes its
/// default (`grace_period_days` 0, `active` true, `recurring` false, no limit, no
/// description); the caller has checked the required ones are present. In a change an absent
/// field keeps its value; `seat_limit: Some(None)` makes the channel unlimited and
/// `description: Some(None)` removes the description.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub telegram_chat_id: Option<i64>,
    pub title: Option<String>,
    pub price_minor: Option<i64>,
    pub currency: Option<String>,
    pub billing_period_days: Option<i32>,
    pub grace_period_days: Option<i32>,
    pub seat_limit: Option<Option<i32>>,
    pub active: Option<bool>,
    pub description: Option<Option<String>>,
    pub recurring: Option<bool>,
    /// Replaces all translations when given.
    pub translations: Option<Translations>,
}

/// The schema's refusal of a recurring channel that is not `XTR` for 30 days, as the same
/// per-field 422 the API's checks give.
fn recurring_refused(e: tokio_postgres::Error) -> ApiError {
    let is_rule = e
        .as_db_error()
        .and_then(|d| d.constraint())
        .is_some_and(|c| c == "channels_recurring_check");
    if is_rule {
        ApiError::field("recurring", RECURRING_RULE)
    } else {
        ApiError::Db(e)
    }
}

/// What is wrong with a `telegram_chat_id`: a channel or supergroup (or group) has a negative id
/// (`-100…` for channels and supergroups); a positive id is a user, whose chat the bot cannot
/// sell access to. Pure.
pub fn chat_id_error(telegram_chat_id: i64) -> Option<&'static str> {
    match telegram_chat_id {
        0 => Some("must not be 0"),
        id if id > 0 => Some(
            "must be a channel's or supergroup's id, which is negative (-100…); a positive id \
             is a user",
        ),
        _ => None,
    }
}

/// Creates a channel. A taken `telegram_chat_id` is the schema's unique violation (409 when
/// rendered); a recurring channel that is not `XTR` for 30 days is a 422 on `recurring`, and a
/// price above its currency's highest ([`currency::price_over_max`]) one on `price_minor`.
pub async fn create(tx: &Transaction<'_>, f: &Fields) -> Result<Channel, ApiError> {
    if let (Some(price), Some(currency)) = (f.price_minor, f.currency.as_deref())
        && let Some(why) = currency::price_over_max(price, currency)
    {
        return Err(ApiError::field("price_minor", why));
    }
    let row = tx
        .query_one(
            INSERT_SQL,
            &[
                &f.telegram_chat_id,
                &f.title,
                &f.price_minor,
                &f.currency,
                &f.billing_period_days,
                &f.grace_period_days,
                &f.seat_limit.flatten(),
                &f.active,
                &f.description.clone().flatten(),
                &f.recurring,
                &f.translations,
            ],
        )
        .await
        .map_err(recurring_refused)?;
    let c = Channel::from_row(&row)?;
    tracing::info!(channel_id = c.id, "channel created");
    Ok(c)
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

/// Changes channel `id` by `f`, under the rules of the module documentation: a number for
/// `seat_limit` or a `telegram_chat_id` first locks the row ([`lock_for_change`]); a different
/// chat is refused with 409 while [`chat_change_blocker`] names a reason. 404 when there is no
/// such channel.
pub async fn change(tx: &Transaction<'_>, id: i32, f: &Fields) -> Result<Channel, ApiError> {
    // The price is checked in the currency it will be in (a new currency with the stored price
    // too); a concurrent change of the currency takes the row lock, and the plan it writes
    // through the trigger is checked by its own rules.
    if (f.price_minor.is_some() || f.currency.is_some())
        && let Some(stored) = price(tx, id).await?
    {
        let currency = f.currency.as_deref().unwrap_or(&stored.currency);
        if let Some(why) =
            currency::price_over_max(f.price_minor.unwrap_or(stored.price_minor), currency)
        {
            return Err(ApiError::field("price_minor", why));
        }
    }
    // A new or lower limit must bind every seat decision not yet committed: wait for those
    // made from the old terms, hold off new ones until this commits (docs/locking.md). A new
    // chat takes the same lock (the one a change of a unique column takes anyway) before its
    // check: it waits for every transaction that enqueued an effect under a key-share lock of
    // this row and holds off new ones until this commits, so the check sees all of them.
    // A new currency takes it too, so every plan made with the old currency is committed (a
    // plan's write reads its channels `FOR SHARE`, [`lock_for_plan`]) before the check looks.
    if matches!(f.seat_limit, Some(Some(_))) || f.telegram_chat_id.is_some() || f.currency.is_some()
    {
        let current = lock_for_change(tx, id)
            .await?
            .ok_or(ApiError::NotFound("channel"))?;
        if let Some(new_chat) = f.telegram_chat_id
            && new_chat != current
            && let Some(why) = chat_change_blocker(tx, id, current).await?
        {
            return Err(ApiError::Conflict(why));
        }
        if let Some(currency) = &f.currency
            && let Some(why) = currency_change_blocker(tx, id, currency).await?
        {
            return Err(ApiError::Conflict(why));
        }
    }
    let row = tx
        .query_opt(
            PATCH_SQL,
            &[
                &id,
                &f.telegram_chat_id,
                &f.title,
                &f.price_minor,
                &f.currency,
                &f.billing_period_days,
                &f.grace_period_days,
                &f.seat_limit.is_some(),
                &f.seat_limit.flatten(),
                &f.active,
                &f.description.is_some(),
                &f.description.clone().flatten(),
                &f.recurring,
                &f.translations,
            ],
        )
        .await
        .map_err(recurring_refused)?
        .ok_or(ApiError::NotFound("channel"))?;
    Ok(Channel::from_row(&row)?)
}

/// Locks channel `id`'s row `FOR UPDATE` before its `seat_limit` is set or changed, or its
/// chat changed; returns its current `telegram_chat_id` (`None`: no such channel). That mode
/// conflicts with the `FOR KEY SHARE` every seat decision reads the channel with
/// (`orders::seats::lock_channel_terms`), so it waits until no transaction that read the old
/// limit (or "no limit") is still running, and holds off new ones until the change commits: no
/// payment, checkout or pre-checkout can decide from a limit older than the one committed. It
/// also conflicts with the key share an effect's enqueueing takes on the channel, so the chat
/// check sees every effect enqueued before it. The caller takes no other lock of the lock
/// order, before or after.
pub async fn lock_for_change(tx: &Transaction<'_>, id: i32) -> Result<Option<i64>, ApiError> {
    Ok(match db::row_opt(tx, LOCK_SQL, &[&id]).await? {
        Some(r) => Some(r.try_get("telegram_chat_id")?),
        None => None,
    })
}

/// Why the channel's chat cannot change now, if it cannot: members in the current chat (a live
/// membership) or effects still to be performed there (a pending effect whose `chat_id` is the
/// current chat: a revoke still to kick someone, a grant still to send its link). Either would
/// act on, or send people to, the wrong chat after the change. The caller holds the channel
/// row `FOR UPDATE` ([`lock_for_change`]).
pub async fn chat_change_blocker(
    tx: &Transaction<'_>,
    channel_id: i32,
    chat_id: i64,
) -> Result<Option<String>, ApiError> {
    let live = memberships::channel_holds_access(tx, channel_id).await?;
    let pending = effects::pending_in_chat(tx, chat_id).await?;
    Ok(if live {
        Some(
            "telegram_chat_id cannot change while the channel has active or grace memberships \
             (their members are in the current chat); expire or delete them first"
                .into(),
        )
    } else if pending {
        Some(
            "telegram_chat_id cannot change while Telegram effects for the current chat are \
             pending (GET /api/effects?status=pending); retry once the worker has performed them"
                .into(),
        )
    } else {
        None
    })
}

/// Why the channel's currency cannot become `currency`, if it cannot: plans other than its
/// default plan include it with their own (its current) currency, which must stay the currency
/// of each of their channels. The caller holds the channel row `FOR UPDATE`
/// ([`lock_for_change`]), so no plan including it is being written meanwhile.
pub async fn currency_change_blocker(
    tx: &Transaction<'_>,
    channel_id: i32,
    currency: &str,
) -> Result<Option<String>, ApiError> {
    let plans: Vec<i64> = db::rows(tx, CURRENCY_BLOCKER_SQL, &[&channel_id, &currency])
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    Ok((!plans.is_empty()).then(|| {
        let ids: Vec<String> = plans.iter().map(i64::to_string).collect();
        format!(
            "currency cannot change while plans other than the channel's default plan include \
             it (plan {}): a plan's currency is the currency of each of its channels; delete \
             those plans or take the channel out of them first",
            ids.join(", ")
        )
    }))
}

/// A channel as a plan's write sees it: its currency, which must be the plan's.
#[derive(Debug, Clone)]
pub struct PlanChannel {
    pub id: i32,
    pub currency: String,
}

impl FromRow for PlanChannel {
    const COLUMNS: &'static str = "id, currency";

    fn from_row(r: &Row) -> Result<PlanChannel, tokio_postgres::Error> {
        Ok(PlanChannel {
            id: r.try_get("id")?,
            currency: r.try_get("currency")?,
        })
    }
}

/// Channels `ids` that exist, by ascending id, locked `FOR SHARE` until the transaction ends:
/// a plan being made of them or changed to them sees currencies that cannot change before it
/// commits (a currency change locks the row `FOR UPDATE`, [`change`]), and the channels cannot
/// be deleted meanwhile. Locked in ascending id order, like a bundle's pair locks.
pub async fn lock_for_plan(
    tx: &Transaction<'_>,
    ids: &[i32],
) -> Result<Vec<PlanChannel>, ApiError> {
    db::all(tx, LOCK_FOR_PLAN_SQL, &[&ids]).await
}

/// Deletes channel `id`: 404 when there is none, 409 while memberships, orders or payments
/// refer to it (their foreign keys), or a plan other than its default plan includes it. Its
/// default plan goes with it (the schema's trigger), unless orders refer to that plan.
pub async fn delete(client: &impl GenericClient, id: i32) -> Result<(), ApiError> {
    let deleted = client
        .execute(DELETE_SQL, &[&id])
        .await
        .map_err(|e| match e.as_db_error() {
            Some(d) if d.constraint() == Some("plan_channels_channel_id_fkey") => {
                ApiError::Conflict(
                    "plans other than the channel's default plan include it (a bundle or a \
                     trial); delete those plans or take the channel out of them first"
                        .into(),
                )
            }
            Some(d) if *d.code() == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION => {
                ApiError::Conflict(
                    "the channel has memberships, orders or payments; deactivate it instead".into(),
                )
            }
            _ => ApiError::Db(e),
        })?;
    if deleted == 0 {
        return Err(ApiError::NotFound("channel"));
    }
    tracing::info!(channel_id = id, "channel deleted");
    Ok(())
}

/// A channel as the bot offers it: what a buyer reads and what decides whether they can buy.
#[derive(Debug, Clone)]
pub struct Offer {
    pub id: i32,
    pub title: String,
    pub description: Option<String>,
    pub price_minor: i64,
    pub currency: String,
    pub billing_period_days: i32,
    pub recurring: bool,
    pub seat_limit: Option<i32>,
    pub active: bool,
    pub translations: Translations,
}

impl Offer {
    /// The title as a buyer of `l` reads it.
    pub fn title_in(&self, l: Language) -> &str {
        self.translations.title(l, &self.title)
    }

    /// The description as a buyer of `l` reads it.
    pub fn description_in(&self, l: Language) -> Option<&str> {
        self.translations
            .description(l, self.description.as_deref())
    }
}

macro_rules! offer_columns {
    () => {
        "id, title, description, price_minor, currency, billing_period_days, recurring, \
         seat_limit, active, translations"
    };
}

impl FromRow for Offer {
    const COLUMNS: &'static str = offer_columns!();

    fn from_row(r: &Row) -> Result<Offer, tokio_postgres::Error> {
        Ok(Offer {
            id: r.try_get("id")?,
            title: r.try_get("title")?,
            description: r.try_get("description")?,
            price_minor: r.try_get("price_minor")?,
            currency: r.try_get("currency")?,
            billing_period_days: r.try_get("billing_period_days")?,
            recurring: r.try_get("recurring")?,
            seat_limit: r.try_get("seat_limit")?,
            active: r.try_get("active")?,
            translations: r.try_get("translations")?,
        })
    }
}

const OFFER_SQL: &str = concat!("SELECT ", offer_columns!(), " FROM channels WHERE id = $1");
const OFFERS_SQL: &str = concat!(
    "SELECT ",
    offer_columns!(),
    " FROM channels WHERE active AND id > $1 ORDER BY id LIMIT $2"
);

/// Channel `id` as the bot offers it, active or not.
pub async fn offer(client: &impl GenericClient, id: i32) -> Result<Option<Offer>, ApiError> {
    db::opt(client, OFFER_SQL, &[&id]).await
}

/// Active channels after channel `after`, by id, at most `limit`.
pub async fn active_offers(
    client: &impl GenericClient,
    after: i32,
    limit: i64,
) -> Result<Vec<Offer>, ApiError> {
    db::all(client, OFFERS_SQL, &[&after, &limit]).await
}

/// A channel with its memberships counted by status, for the overview.
#[derive(Debug, Clone)]
pub struct MemberCounts {
    pub id: i32,
    pub title: String,
    pub active: bool,
    pub seat_limit: Option<i32>,
    pub members_active: i64,
    pub members_grace: i64,
    pub members_expired: i64,
}

impl FromRow for MemberCounts {
    const COLUMNS: &'static str =
        "id, title, active, seat_limit, members_active, members_grace, members_expired";

    fn from_row(r: &Row) -> Result<MemberCounts, tokio_postgres::Error> {
        Ok(MemberCounts {
            id: r.try_get("id")?,
            title: r.try_get("title")?,
            active: r.try_get("active")?,
            seat_limit: r.try_get("seat_limit")?,
            members_active: r.try_get("members_active")?,
            members_grace: r.try_get("members_grace")?,
            members_expired: r.try_get("members_expired")?,
        })
    }
}

const MEMBER_COUNTS_SQL: &str = "SELECT c.id, c.title, c.active, c.seat_limit,
            count(m.id) FILTER (WHERE m.status = 'active') AS members_active,
            count(m.id) FILTER (WHERE m.status = 'grace') AS members_grace,
            count(m.id) FILTER (WHERE m.status = 'expired') AS members_expired
     FROM channels c LEFT JOIN memberships m ON m.channel_id = c.id
     GROUP BY c.id ORDER BY c.id";

/// Every channel, by id, with its memberships counted by status.
pub async fn member_counts(client: &impl GenericClient) -> Result<Vec<MemberCounts>, ApiError> {
    db::all(client, MEMBER_COUNTS_SQL, &[]).await
}

const TITLE_SQL: &str = "SELECT title, translations FROM channels WHERE id = $1";

/// Channel `id`'s title; `None`: no such channel.
pub async fn title(client: &impl GenericClient, id: i32) -> Result<Option<String>, ApiError> {
    Ok(titles(client, id).await?.map(|(title, _)| title))
}

/// Channel `id`'s title and its translations; `None`: no such channel.
pub async fn titles(
    client: &impl GenericClient,
    id: i32,
) -> Result<Option<(String, Translations)>, ApiError> {
    Ok(match db::row_opt(client, TITLE_SQL, &[&id]).await? {
        Some(r) => Some((r.try_get("title")?, r.try_get("translations")?)),
        None => None,
    })
}

/// A channel's price now, and whether it is on sale: what a new order copies.
#[derive(Debug, Clone)]
pub struct Price {
    pub price_minor: i64,
    pub currency: String,
    pub active: bool,
}

impl FromRow for Price {
    const COLUMNS: &'static str = "price_minor, currency, active";

    fn from_row(r: &Row) -> Result<Price, tokio_postgres::Error> {
        Ok(Price {
            price_minor: r.try_get("price_minor")?,
            currency: r.try_get("currency")?,
            active: r.try_get("active")?,
        })
    }
}

const PRICE_SQL: &str = "SELECT price_minor, currency, active FROM channels WHERE id = $1";

/// Channel `id`'s price and whether it is active; `None`: no such channel.
pub async fn price(client: &impl GenericClient, id: i32) -> Result<Option<Price>, ApiError> {
    db::opt(client, PRICE_SQL, &[&id]).await
}

const STORE_INVITE_LINK_SQL: &str = "WITH stored AS (
         UPDATE channels SET invite_link = $2
         WHERE id = $1 AND invite_link IS NULL AND telegram_chat_id = $3
         RETURNING invite_link
     )
     SELECT invite_link FROM stored
     UNION ALL
     SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $3
     LIMIT 1";

/// Keeps `link` as channel `id`'s join link when it has none, and returns the link it keeps
/// (an earlier one wins). Stored only while the channel is still in chat `chat`: a link must
/// never outlive a change of the channel's chat; `None` when the channel left that chat (or is
/// gone).
pub async fn store_invite_link(
    client: &impl GenericClient,
    id: i32,
    link: &str,
    chat: i64,
) -> Result<Option<String>, ApiError> {
    Ok(
        match db::row_opt(client, STORE_INVITE_LINK_SQL, &[&id, &link, &chat]).await? {
            Some(r) => r.try_get("invite_link")?,
            None => None,
        },
    )
}

const STORED_INVITE_LINK_SQL: &str =
    "SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $2";

/// Channel `id`'s stored join link, while the channel is still in chat `chat`.
pub async fn stored_invite_link(
    client: &impl GenericClient,
    id: i32,
    chat: i64,
) -> Result<Option<String>, ApiError> {
    Ok(
        match db::row_opt(client, STORED_INVITE_LINK_SQL, &[&id, &chat]).await? {
            Some(r) => r.try_get("invite_link")?,
            None => None,
        },
    )
}

const SET_TELEGRAM_STATUS_SQL: &str = "UPDATE channels
     SET telegram_status = $2, telegram_status_at = statement_timestamp()
     WHERE telegram_chat_id = $1 AND telegram_status <> $2
     RETURNING id";

/// Records what Telegram told us about the bot's rights in chat `chat`. Returns the channel's
/// id when its status changed (nothing is written when it already was `status`).
pub async fn set_telegram_status(
    client: &impl GenericClient,
    chat: i64,
    status: TelegramStatus,
) -> Result<Option<i32>, ApiError> {
    Ok(
        match db::row_opt(client, SET_TELEGRAM_STATUS_SQL, &[&chat, &status]).await? {
            Some(r) => Some(r.try_get("id")?),
            None => None,
        },
    )
}

const ID_BY_CHAT_SQL: &str = "SELECT id FROM channels WHERE telegram_chat_id = $1";

/// The id of the channel whose chat is `chat`; `None`: no channel sells that chat.
pub async fn id_by_chat(client: &impl GenericClient, chat: i64) -> Result<Option<i32>, ApiError> {
    Ok(match db::row_opt(client, ID_BY_CHAT_SQL, &[&chat]).await? {
        Some(r) => Some(r.try_get("id")?),
        None => None,
    })
}

const FORGET_INVITE_LINK_SQL: &str = "UPDATE channels SET invite_link = NULL
     WHERE telegram_chat_id = $1 AND invite_link IS NOT NULL
       AND ($2::text IS NULL OR invite_link = $2)
     RETURNING id";

/// Forgets the join link stored for chat `chat` — only when it is `link`, with `Some` (Telegram
/// reported that link revoked), or whatever it is, with `None` (the bot's rights came back:
/// Telegram revokes the links of a demoted administrator). The next grant makes and stores a
/// new one. Returns the channel's id when a link was forgotten.
pub async fn forget_invite_link(
    client: &impl GenericClient,
    chat: i64,
    link: Option<&str>,
) -> Result<Option<i32>, ApiError> {
    Ok(
        match db::row_opt(client, FORGET_INVITE_LINK_SQL, &[&chat, &link]).await? {
            Some(r) => Some(r.try_get("id")?),
            None => None,
        },
    )
}

/// A channel whose bot lacks the rights to manage its members.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = ChannelWithoutRights)]
pub struct WithoutRights {
    pub id: i32,
    pub title: String,
    pub telegram_chat_id: i64,
    /// When Telegram told us (null when never recorded).
    pub since: Option<DateTime<Utc>>,
}

impl FromRow for WithoutRights {
    const COLUMNS: &'static str = "id, title, telegram_chat_id, since";

    fn from_row(r: &Row) -> Result<WithoutRights, tokio_postgres::Error> {
        Ok(WithoutRights {
            id: r.try_get("id")?,
            title: r.try_get("title")?,
            telegram_chat_id: r.try_get("telegram_chat_id")?,
            since: r.try_get("since")?,
        })
    }
}

const WITHOUT_RIGHTS_SQL: &str =
    "SELECT id, title, telegram_chat_id, telegram_status_at AS since FROM channels
     WHERE telegram_status = 'no_rights' ORDER BY id";

/// Every channel marked `no_rights`, by id.
pub async fn without_rights(client: &impl GenericClient) -> Result<Vec<WithoutRights>, ApiError> {
    db::all(client, WITHOUT_RIGHTS_SQL, &[]).await
}
/// The chats whose bot lacks its admin rights (`telegram_status = 'no_rights'`), as a subquery
/// (a macro, so SQL constants can splice it with `concat!`): their access effects wait.
macro_rules! no_rights_chats_sql {
    () => {
        "SELECT telegram_chat_id FROM channels WHERE telegram_status = 'no_rights'"
    };
}
pub(crate) use no_rights_chats_sql;
