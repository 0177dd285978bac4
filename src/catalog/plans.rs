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
//!   are read `FOR SHARE` ([`channels::lock_for_plan`]) so that currency cannot change, nor a
//!   channel go, before the plan commits (a channel's currency change waits for that lock and
//!   is then refused while a plan other than its default plan includes it);
//! - once a plan has orders its `kind`, `currency` and `channel_ids` stay, and it is never
//!   deleted (deactivate it): the plan's row is locked `FOR UPDATE` first, which waits for every
//!   order being inserted for it (their foreign key's `FOR KEY SHARE`), so the check sees them;
//! - a channel's default plan (`is_default`) is that channel's own price fields: paid, with a
//!   period, that channel only, never deleted on its own (the channel's delete takes it). Its
//!   `price_minor`, `currency`, `period_days` and `recurring` are written to the channel
//!   ([`channels::change`], with the channel's rules: its currency change may be refused) and
//!   reach the plan through the schema's trigger, in the same transaction — the channel's row
//!   first, then the plan's, the order a channel's own change takes them in.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use tokio_postgres::{Row, error::SqlState};

use crate::{
    catalog::channels,
    common::{
        currency::{self, Money},
        error::ApiError,
        ids::ChannelId,
    },
    db::{self, FromRow},
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
         p.created_at, p.updated_at, p.translations, \
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
    "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z",
    "translations": {"uk": {"title": "Преміум-сигнали", "description": null}}}))]
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
            translations: r.try_get("translations")?,
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

/// The most channels a plan may include.
pub const MAX_CHANNELS: usize = 10;
/// The longest period, in days (ten years), as for a channel's billing period.
pub const MAX_PERIOD_DAYS: i32 = 3660;
/// The longest trial, in days.
pub const MAX_TRIAL_DAYS: i32 = 90;
/// Telegram sells Stars subscriptions with a 30-day period only.
pub const RECURRING_PERIOD_DAYS: i32 = channels::RECURRING_PERIOD_DAYS;
/// Why a plan cannot be `recurring`, as the per-field 422 says it.
pub const RECURRING_RULE: &str =
    "is allowed only for paid XTR (Telegram Stars) plans with period_days 30";

/// The fields of a new plan, or of a change. In a new plan an absent field takes its default
/// (`kind` paid, `price_minor` 0 for a trial, `currency` that of the channels, `recurring`
/// false, `active` true, `position` 0, no description); the caller has checked the required
/// ones are present (`title`, `channel_ids`, `period_days`, a paid plan's `price_minor`). In a
/// change an absent field keeps its value; `description: Some(None)` removes the description,
/// `period_days: Some(None)` makes the plan lifetime.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub title: Option<String>,
    pub description: Option<Option<String>>,
    pub channel_ids: Option<Vec<i32>>,
    pub kind: Option<Kind>,
    pub price_minor: Option<i64>,
    pub currency: Option<String>,
    pub period_days: Option<Option<i32>>,
    pub recurring: Option<bool>,
    pub active: Option<bool>,
    pub position: Option<i32>,
    /// Replaces all translations when given.
    pub translations: Option<Translations>,
}

/// What a plan sells and for how much: the fields whose combination has rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub kind: Kind,
    pub price_minor: i64,
    pub currency: String,
    pub period_days: Option<i32>,
    pub recurring: bool,
}

impl Terms {
    /// The terms of `plan` changed by `f`. A change to a trial that names no price makes it
    /// free (a trial costs nothing), rather than refusing the plan's old price.
    fn changed(plan: &Plan, f: &Fields) -> Terms {
        let kind = f.kind.unwrap_or(plan.kind);
        let price_minor = match f.price_minor {
            Some(p) => p,
            None if kind == Kind::Trial && plan.kind != Kind::Trial => 0,
            None => plan.price_minor,
        };
        Terms {
            kind,
            price_minor,
            currency: f.currency.clone().unwrap_or_else(|| plan.currency.clone()),
            period_days: f.period_days.unwrap_or(plan.period_days),
            recurring: f.recurring.unwrap_or(plan.recurring),
        }
    }
}

/// Adds to `e` what is wrong with `t`, by field: a paid plan's price is positive, a trial's is
/// 0; a period is 1..3660 days or none, a trial's 1..90; `recurring` only for paid `XTR` plans of
/// 30 days; the currency is an ISO 4217 code or `XTR`. Pure: the rules of the schema's CHECKs,
/// with the messages a client reads.
pub fn term_errors(t: &Terms, e: &mut BTreeMap<String, String>) {
    let mut add = |field: &str, message: String| {
        e.entry(field.to_string()).or_insert(message);
    };
    match t.kind {
        Kind::Paid if t.price_minor <= 0 => add(
            "price_minor",
            "must be a positive integer of minor units for a paid plan".into(),
        ),
        Kind::Trial if t.price_minor != 0 => add(
            "price_minor",
            "must be 0 (or absent) for a trial: a trial is free".into(),
        ),
        _ => {}
    }
    if let Some(why) = currency::price_over_max(t.price_minor, &t.currency) {
        add("price_minor", why);
    }
    match (t.kind, t.period_days) {
        (_, Some(d)) if !(1..=MAX_PERIOD_DAYS).contains(&d) => add(
            "period_days",
            format!("must be from 1 to {MAX_PERIOD_DAYS}, or null (lifetime)"),
        ),
        (Kind::Trial, Some(d)) if d > MAX_TRIAL_DAYS => add(
            "period_days",
            format!("must be from 1 to {MAX_TRIAL_DAYS} for a trial"),
        ),
        (Kind::Trial, None) => add(
            "period_days",
            format!("a trial lasts 1 to {MAX_TRIAL_DAYS} days; it cannot be lifetime (null)"),
        ),
        _ => {}
    }
    if !(currency::is_valid_code(&t.currency)
        && currency::minor_unit_exponent(&t.currency).is_some())
    {
        add(
            "currency",
            "must be an ISO 4217 code (e.g. UAH) or XTR".into(),
        );
    }
    if t.recurring
        && !(t.kind == Kind::Paid
            && t.currency == "XTR"
            && t.period_days == Some(RECURRING_PERIOD_DAYS))
    {
        add("recurring", RECURRING_RULE.into());
    }
}

/// What is wrong with a list of channel ids, if anything: 1..10 of them, each once.
pub fn channel_ids_error(ids: &[i32]) -> Option<String> {
    if ids.is_empty() || ids.len() > MAX_CHANNELS {
        return Some(format!("must list 1 to {MAX_CHANNELS} channels"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<String> = ids
        .iter()
        .filter(|id| !seen.insert(**id))
        .map(i32::to_string)
        .collect();
    (!repeated.is_empty()).then(|| format!("lists channel {} twice", repeated.join(", ")))
}

/// Adds to `e` what a change `f` of the default plan of channel `channel_id` may not do: it is
/// that channel's own price, so it stays paid, with a period, for that channel only.
pub fn default_plan_errors(channel_id: i32, f: &Fields, e: &mut BTreeMap<String, String>) {
    if f.kind == Some(Kind::Trial) {
        e.insert(
            "kind".into(),
            "the default plan of a channel is paid (it is the channel's price); create another \
             plan for a trial"
                .into(),
        );
    }
    if f.period_days == Some(None) {
        e.insert(
            "period_days".into(),
            "the default plan of a channel has a period (the channel's billing_period_days); \
             create another plan for lifetime access"
                .into(),
        );
    }
    if f.channel_ids
        .as_ref()
        .is_some_and(|ids| ids[..] != [channel_id])
    {
        e.insert(
            "channel_ids".into(),
            format!(
                "the default plan of channel {channel_id} sells that channel only; create \
                 another plan for a bundle or another channel"
            ),
        );
    }
}

/// Reads (and locks `FOR SHARE`, [`channels::lock_for_plan`]) the channels `ids` and returns
/// their one currency, recording in `e` unknown channels and mixed currencies (on
/// `channel_ids`) and a `given` currency other than theirs (on `currency`). `None` when there
/// is no one currency.
async fn channels_currency(
    tx: &Transaction<'_>,
    ids: &[i32],
    given: Option<&str>,
    e: &mut BTreeMap<String, String>,
) -> Result<Option<String>, ApiError> {
    let found = channels::lock_for_plan(tx, ids).await?;
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| !found.iter().any(|c| c.id == **id))
        .map(i32::to_string)
        .collect();
    if !missing.is_empty() {
        e.insert(
            "channel_ids".into(),
            format!("no such channel: {}", missing.join(", ")),
        );
        return Ok(None);
    }
    let first = &found
        .iter()
        .find(|c| c.id == ids[0])
        .expect("every channel was found")
        .currency;
    if found.iter().any(|c| &c.currency != first) {
        let each: Vec<String> = ids
            .iter()
            .filter_map(|id| found.iter().find(|c| c.id == *id))
            .map(|c| format!("channel {} is {}", c.id, c.currency))
            .collect();
        e.insert(
            "channel_ids".into(),
            format!(
                "the channels of a plan must share one currency ({})",
                each.join(", ")
            ),
        );
        return Ok(None);
    }
    if let Some(given) = given
        && given != first
    {
        e.insert(
            "currency".into(),
            format!("must be the currency of the plan's channels ({first})"),
        );
    }
    Ok(Some(first.clone()))
}

/// The schema's refusals of a plan's write, as the per-field 422s (or the 409) the checks
/// above give; anything else stays a database error.
fn refused(e: tokio_postgres::Error) -> ApiError {
    let Some(d) = e.as_db_error() else {
        return ApiError::Db(e);
    };
    let field = match d.constraint() {
        Some("plans_title_check") => "title",
        Some("plans_description_check") => "description",
        Some("plans_kind_check") => "kind",
        Some("plans_price_minor_check") => "price_minor",
        Some("plans_currency_check") => "currency",
        Some("plans_period_days_check" | "plans_trial_period_check") => "period_days",
        Some("plans_recurring_check") => "recurring",
        Some("plans_default_check") => "kind",
        Some("plan_channels_channel_id_fkey") => {
            return ApiError::field("channel_ids", "no such channel");
        }
        Some("orders_plan_id_fkey") => return has_orders_conflict(),
        _ => return ApiError::Db(e),
    };
    if *d.code() == SqlState::CHECK_VIOLATION {
        ApiError::field(field, "breaks a rule of plans (see the API documentation)")
    } else {
        ApiError::Db(e)
    }
}

fn has_orders_conflict() -> ApiError {
    ApiError::Conflict(
        "the plan has orders: it cannot be deleted, and its kind, currency and channel_ids \
         cannot change; deactivate it instead (active: false) and create another plan"
            .into(),
    )
}

const LOCK_SQL: &str = concat!(
    "SELECT ",
    plan_columns!(),
    " FROM plans p WHERE p.id = $1 FOR UPDATE OF p"
);
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
const INSERT_SQL: &str = "INSERT INTO plans (title, description, kind, price_minor, currency,
                                             period_days, recurring, active, position,
                                             translations)
     VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, true), COALESCE($9, 0),
             COALESCE($10::jsonb, '{}'::jsonb))
     RETURNING id";
const INSERT_CHANNELS_SQL: &str = "INSERT INTO plan_channels (plan_id, channel_id, position)
     SELECT $1, c.id, (c.n - 1)::smallint FROM unnest($2::integer[]) WITH ORDINALITY AS c (id, n)";
const DELETE_CHANNELS_SQL: &str = "DELETE FROM plan_channels WHERE plan_id = $1";
// Terms NULL keep theirs: the default plan's came from its channel, through the trigger.
const UPDATE_SQL: &str = "UPDATE plans SET
         title = COALESCE($2, title),
         description = CASE WHEN $3 THEN $4 ELSE description END,
         kind = COALESCE($5, kind),
         price_minor = COALESCE($6, price_minor),
         currency = COALESCE($7, currency),
         period_days = CASE WHEN $8 THEN $9 ELSE period_days END,
         recurring = COALESCE($10, recurring),
         active = COALESCE($11, active),
         position = COALESCE($12, position),
         translations = COALESCE($13, translations),
         updated_at = statement_timestamp()
     WHERE id = $1";
const HAS_ORDERS_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM orders WHERE plan_id = $1) AS has_orders";
const DELETE_SQL: &str = "DELETE FROM plans WHERE id = $1";

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

/// Plan `id`, its row locked `FOR UPDATE` (`None`: no such plan).
async fn lock(tx: &Transaction<'_>, id: i64) -> Result<Option<Plan>, ApiError> {
    db::opt(tx, LOCK_SQL, &[&id]).await
}

/// Whether any order (of any status) buys plan `id`.
async fn has_orders(tx: &Transaction<'_>, id: i64) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, HAS_ORDERS_SQL, &[&id])
        .await?
        .try_get("has_orders")?)
}

async fn set_channels(tx: &Transaction<'_>, id: i64, ids: &[i32]) -> Result<(), ApiError> {
    tx.execute(INSERT_CHANNELS_SQL, &[&id, &ids])
        .await
        .map_err(refused)?;
    Ok(())
}

/// Creates a plan from `f` under the rules of the module documentation: 422 naming each field
/// that breaks one, and nothing written.
pub async fn create(tx: &Transaction<'_>, f: &Fields) -> Result<Plan, ApiError> {
    let mut e = BTreeMap::new();
    let ids = f.channel_ids.clone().unwrap_or_default();
    let currency = match channel_ids_error(&ids) {
        Some(why) => {
            e.insert("channel_ids".to_string(), why);
            None
        }
        None => channels_currency(tx, &ids, f.currency.as_deref(), &mut e).await?,
    };
    let kind = f.kind.unwrap_or(Kind::Paid);
    if let Some(currency) = currency.or_else(|| f.currency.clone()) {
        let terms = Terms {
            kind,
            price_minor: f.price_minor.unwrap_or(0),
            currency,
            period_days: f.period_days.flatten(),
            recurring: f.recurring.unwrap_or(false),
        };
        term_errors(&terms, &mut e);
        if e.is_empty() {
            let row = tx
                .query_one(
                    INSERT_SQL,
                    &[
                        &f.title,
                        &f.description.clone().flatten(),
                        &terms.kind,
                        &terms.price_minor,
                        &terms.currency,
                        &terms.period_days,
                        &terms.recurring,
                        &f.active,
                        &f.position,
                        &f.translations,
                    ],
                )
                .await
                .map_err(refused)?;
            let id: i64 = row.try_get("id")?;
            set_channels(tx, id, &ids).await?;
            tracing::info!(plan_id = id, "plan created");
            return get(tx, id)
                .await?
                .ok_or_else(|| ApiError::internal("a plan just made is gone"));
        }
    }
    Err(ApiError::Validation(e))
}

/// Changes plan `id` by `f` under the rules of the module documentation: 404 when there is no
/// such plan, 422 naming each field that breaks a rule, 409 when its orders or its channel's
/// plans forbid the change; nothing written unless all of it is.
pub async fn change(tx: &Transaction<'_>, id: i64, f: &Fields) -> Result<Plan, ApiError> {
    // Whether it is a default plan never changes; the rows are then locked in the order below.
    let seen = get(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
    let mut e = BTreeMap::new();
    let terms = if seen.is_default {
        let channel_id = seen.channel_ids[0];
        default_plan_errors(channel_id, f, &mut e);
        term_errors(&Terms::changed(&seen, f), &mut e);
        if !e.is_empty() {
            return Err(ApiError::Validation(e));
        }
        // The channel's row first (its change writes this plan's terms through the trigger),
        // then this plan's: the order a change of the channel takes them in.
        let channel = channels::Fields {
            price_minor: f.price_minor,
            currency: f.currency.clone(),
            billing_period_days: f.period_days.flatten(),
            recurring: f.recurring,
            ..channels::Fields::default()
        };
        if channel.price_minor.is_some()
            || channel.currency.is_some()
            || channel.billing_period_days.is_some()
            || channel.recurring.is_some()
        {
            channels::change(tx, channel_id, &channel).await?;
        }
        lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
        None
    } else {
        let plan = lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
        let mut terms = Terms::changed(&plan, f);
        let new_channels = f
            .channel_ids
            .as_ref()
            .filter(|ids| **ids != plan.channel_ids);
        let mut currency_known = true;
        match new_channels {
            Some(ids) => match channel_ids_error(ids) {
                Some(why) => {
                    e.insert("channel_ids".to_string(), why);
                    currency_known = false;
                }
                None => match channels_currency(tx, ids, f.currency.as_deref(), &mut e).await? {
                    // Other channels: the plan takes their currency unless the change names one.
                    Some(c) => terms.currency = f.currency.clone().unwrap_or(c),
                    None => currency_known = false,
                },
            },
            // Its channels' currency is the plan's, and cannot change while it includes them.
            None => {
                if let Some(c) = &f.currency
                    && *c != plan.currency
                {
                    e.insert(
                        "currency".into(),
                        format!(
                            "must be the currency of the plan's channels ({})",
                            plan.currency
                        ),
                    );
                }
            }
        }
        if currency_known {
            term_errors(&terms, &mut e);
        }
        if !e.is_empty() {
            return Err(ApiError::Validation(e));
        }
        let fixed_changes =
            terms.kind != plan.kind || terms.currency != plan.currency || new_channels.is_some();
        if fixed_changes && has_orders(tx, id).await? {
            return Err(has_orders_conflict());
        }
        if let Some(ids) = new_channels {
            tx.execute(DELETE_CHANNELS_SQL, &[&id]).await?;
            set_channels(tx, id, ids).await?;
        }
        Some(terms)
    };
    let t = terms.as_ref();
    tx.execute(
        UPDATE_SQL,
        &[
            &id,
            &f.title,
            &f.description.is_some(),
            &f.description.clone().flatten(),
            &t.map(|t| t.kind),
            &t.map(|t| t.price_minor),
            &t.map(|t| t.currency.as_str()),
            &t.is_some(),
            &t.and_then(|t| t.period_days),
            &t.map(|t| t.recurring),
            &f.active,
            &f.position,
            &f.translations,
        ],
    )
    .await
    .map_err(refused)?;
    get(tx, id).await?.ok_or(ApiError::NotFound("plan"))
}

/// Deletes plan `id`: 404 when there is none; 409 for a channel's default plan (it goes with
/// its channel) and for a plan with orders (deactivate it instead).
pub async fn delete(tx: &Transaction<'_>, id: i64) -> Result<(), ApiError> {
    let plan = lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
    if plan.is_default {
        return Err(ApiError::Conflict(format!(
            "this is the default plan of channel {}: it is the channel's own price and goes \
             with the channel; delete or deactivate the channel, or deactivate this plan \
             (active: false)",
            plan.channel_ids[0]
        )));
    }
    if has_orders(tx, id).await? {
        return Err(has_orders_conflict());
    }
    tx.execute(DELETE_SQL, &[&id]).await.map_err(refused)?;
    tracing::info!(plan_id = id, "plan deleted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(
        kind: Kind,
        price: i64,
        currency: &str,
        period: Option<i32>,
        recurring: bool,
    ) -> Terms {
        Terms {
            kind,
            price_minor: price,
            currency: currency.into(),
            period_days: period,
            recurring,
        }
    }

    fn fields_of(t: &Terms) -> Vec<String> {
        let mut e = BTreeMap::new();
        term_errors(t, &mut e);
        e.into_keys().collect()
    }

    #[test]
    fn valid_terms_pass() {
        for t in [
            terms(Kind::Paid, 19900, "UAH", Some(30), false),
            terms(Kind::Paid, 1, "UAH", None, false),
            terms(Kind::Paid, 1, "UAH", Some(3660), false),
            terms(Kind::Paid, 250, "XTR", Some(30), true),
            terms(Kind::Trial, 0, "UAH", Some(1), false),
            terms(Kind::Trial, 0, "XTR", Some(90), false),
        ] {
            assert!(fields_of(&t).is_empty(), "{t:?}: {:?}", fields_of(&t));
        }
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        let cases = [
            (terms(Kind::Paid, 0, "UAH", Some(30), false), "price_minor"),
            (terms(Kind::Paid, -5, "UAH", Some(30), false), "price_minor"),
            (
                terms(Kind::Trial, 100, "UAH", Some(7), false),
                "price_minor",
            ),
            (terms(Kind::Paid, 1, "UAH", Some(0), false), "period_days"),
            (
                terms(Kind::Paid, 1, "UAH", Some(3661), false),
                "period_days",
            ),
            (terms(Kind::Trial, 0, "UAH", Some(91), false), "period_days"),
            (terms(Kind::Trial, 0, "UAH", None, false), "period_days"),
            (terms(Kind::Paid, 1, "uah", Some(30), false), "currency"),
            (terms(Kind::Paid, 1, "ZZZ", Some(30), false), "currency"),
            (terms(Kind::Paid, 1, "UAH", Some(30), true), "recurring"),
            (terms(Kind::Paid, 1, "XTR", Some(31), true), "recurring"),
            (terms(Kind::Paid, 1, "XTR", None, true), "recurring"),
            (terms(Kind::Trial, 0, "XTR", Some(30), true), "recurring"),
        ];
        for (t, field) in cases {
            assert_eq!(fields_of(&t), vec![field.to_string()], "{t:?}");
        }
    }

    #[test]
    fn channel_lists_are_one_to_ten_distinct_ids() {
        assert!(channel_ids_error(&[1]).is_none());
        assert!(channel_ids_error(&(1..=10).collect::<Vec<_>>()).is_none());
        assert!(channel_ids_error(&[]).is_some());
        assert!(channel_ids_error(&(1..=11).collect::<Vec<_>>()).is_some());
        assert!(channel_ids_error(&[1, 2, 1]).unwrap().contains('1'));
    }

    #[test]
    fn a_default_plan_stays_paid_timed_and_its_channels_own() {
        let mut e = BTreeMap::new();
        default_plan_errors(
            3,
            &Fields {
                kind: Some(Kind::Paid),
                period_days: Some(Some(60)),
                channel_ids: Some(vec![3]),
                ..Fields::default()
            },
            &mut e,
        );
        assert!(e.is_empty(), "{e:?}");
        default_plan_errors(
            3,
            &Fields {
                kind: Some(Kind::Trial),
                period_days: Some(None),
                channel_ids: Some(vec![3, 4]),
                ..Fields::default()
            },
            &mut e,
        );
        let fields: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(fields, ["channel_ids", "kind", "period_days"]);
    }

    #[test]
    fn a_change_to_a_trial_without_a_price_makes_it_free() {
        let plan = Plan {
            id: 1,
            title: "t".into(),
            description: None,
            channel_ids: vec![1],
            kind: Kind::Paid,
            price_minor: 500,
            currency: "UAH".into(),
            period_days: Some(7),
            recurring: false,
            active: true,
            position: 0,
            is_default: false,
            buy_link: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            translations: Default::default(),
        };
        let to_trial = Fields {
            kind: Some(Kind::Trial),
            ..Fields::default()
        };
        assert_eq!(Terms::changed(&plan, &to_trial).price_minor, 0);
        let price_only = Fields {
            price_minor: Some(700),
            ..Fields::default()
        };
        assert_eq!(Terms::changed(&plan, &price_only).price_minor, 700);
    }
}
