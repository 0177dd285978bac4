//! `/api/channels`: the private Telegram channels we sell access to, with their price, billing
//! period, grace period and optional seat limit, what buyers read about them (`description`),
//! whether the bot sells them as a Telegram Stars subscription (`recurring`), and the deep link
//! that opens their offer in the bot (`buy_link`, read-only).

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use super::{
    ApiJson, ApiQuery, Errors, Page, Paging, PathId, chars, check_text, not_null, nullable,
};
use super::{auth::Staff, idempotency::StaffWrite, openapi::Problem};
use crate::{
    config::Config, currency, db::FromRow, effects, error::ApiError, memberships, orders::seats,
    state::AppState,
};

/// The select list of the rows here (a macro, so SQL constants can splice it with `concat!`).
macro_rules! channel_columns {
    () => {
        "id, telegram_chat_id, title, price_minor, currency, billing_period_days, \
         grace_period_days, seat_limit, active, created_at, updated_at, description, recurring"
    };
}

/// The columns read by name into the row type.
pub const COLUMNS: &str = channel_columns!();

const INSERT_SQL: &str = concat!(
    "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                             billing_period_days, grace_period_days, seat_limit, active,
                             description, recurring)
                         VALUES ($1, $2, $3, $4, $5, COALESCE($6, 0), $7, COALESCE($8, true),
                                 $9, COALESCE($10, false))
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
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING ",
    channel_columns!()
);

/// The longest `description`, in characters.
const DESCRIPTION_MAX: usize = 1000;

/// A private Telegram channel for sale.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "telegram_chat_id": -1001000000001_i64, "title": "Premium signals",
    "price_minor": 19900, "currency": "UAH", "billing_period_days": 30, "grace_period_days": 3,
    "seat_limit": null, "active": true, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z", "description": "Daily market signals.",
    "recurring": false, "buy_link": "https://t.me/subgate_bot?start=c1"}))]
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
        })
    }
}

impl Channel {
    /// Fills the read-only `buy_link` from the configured bot username.
    pub fn with_buy_link(mut self, config: &Config) -> Channel {
        self.buy_link = buy_link(config, self.id);
        self
    }
}

/// The deep link that opens channel `id`'s offer in the bot, when the bot's username is known.
pub fn buy_link(config: &Config, id: i32) -> Option<String> {
    config
        .telegram_bot_username
        .as_ref()
        .map(|bot| format!("https://t.me/{bot}?start=c{id}"))
}

/// Reads a row selected with [`COLUMNS`], with its `buy_link`.
fn channel(r: &Row, config: &Config) -> Result<Channel, tokio_postgres::Error> {
    Ok(Channel::from_row(r)?.with_buy_link(config))
}

/// A new channel.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"telegram_chat_id": -1001000000001_i64, "title": "Premium signals",
    "price_minor": 19900, "currency": "UAH", "billing_period_days": 30, "grace_period_days": 3}))]
pub struct ChannelInput {
    /// Not 0.
    #[schema(required = true, nullable = false, value_type = i64)]
    telegram_chat_id: Option<i64>,
    #[schema(required = true, nullable = false, min_length = 1, max_length = 255)]
    title: Option<String>,
    /// Minor units (> 0).
    #[schema(required = true, nullable = false, minimum = 1)]
    price_minor: Option<i64>,
    /// An ISO 4217 code, or `XTR` (Telegram Stars).
    #[schema(
        required = true,
        nullable = false,
        pattern = "^[A-Z]{3}$",
        example = "UAH"
    )]
    currency: Option<String>,
    #[schema(required = true, nullable = false, minimum = 1, maximum = 3660)]
    billing_period_days: Option<i32>,
    /// Default 0.
    #[schema(nullable = false, minimum = 0, maximum = 365)]
    grace_period_days: Option<i32>,
    /// Null or absent: unlimited.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1)]
    seat_limit: Option<Option<i32>>,
    /// Default true.
    #[schema(nullable = false)]
    active: Option<bool>,
    /// Shown to buyers in the bot.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 1000)]
    description: Option<Option<String>>,
    /// A Telegram Stars subscription that renews itself (`XTR` and 30 days only). Default false.
    #[schema(nullable = false)]
    recurring: Option<bool>,
}

/// A PATCH body: like [`ChannelInput`], but an explicit `null` is seen (and refused for every
/// field except `seat_limit`, where it means unlimited).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"price_minor": 24900, "seat_limit": 100}))]
pub struct ChannelPatch {
    /// Not 0. Refused (409) while the channel has live memberships or pending effects.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i64)]
    telegram_chat_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, min_length = 1, max_length = 255)]
    title: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i64, minimum = 1)]
    price_minor: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, pattern = "^[A-Z]{3}$")]
    currency: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 1, maximum = 3660)]
    billing_period_days: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 0, maximum = 365)]
    grace_period_days: Option<Option<i32>>,
    /// `null`: unlimited.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1)]
    seat_limit: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    active: Option<Option<bool>>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 1000)]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    recurring: Option<Option<bool>>,
}

impl ChannelPatch {
    fn into_input(self, e: &mut Errors) -> ChannelInput {
        ChannelInput {
            telegram_chat_id: not_null(e, "telegram_chat_id", self.telegram_chat_id),
            title: not_null(e, "title", self.title),
            price_minor: not_null(e, "price_minor", self.price_minor),
            currency: not_null(e, "currency", self.currency),
            billing_period_days: not_null(e, "billing_period_days", self.billing_period_days),
            grace_period_days: not_null(e, "grace_period_days", self.grace_period_days),
            seat_limit: self.seat_limit,
            active: not_null(e, "active", self.active),
            description: self.description,
            recurring: not_null(e, "recurring", self.recurring),
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListChannels {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    active: Option<bool>,
}

/// Checks every present field; with `create`, the required ones must be present.
fn validate(b: &ChannelInput, create: bool, mut e: Errors) -> Result<(), ApiError> {
    if create {
        e.required("telegram_chat_id", b.telegram_chat_id);
        e.required("title", b.title.as_ref());
        e.required("price_minor", b.price_minor);
        e.required("currency", b.currency.as_ref());
        e.required("billing_period_days", b.billing_period_days);
    }
    if b.telegram_chat_id == Some(0) {
        e.add("telegram_chat_id", "must not be 0");
    }
    if let Some(t) = &b.title {
        if t.contains('\0') {
            e.add("title", "must not contain NUL characters");
        } else if !(1..=255).contains(&chars(t)) {
            e.add("title", "must be 1 to 255 characters");
        }
    }
    if let Some(p) = b.price_minor
        && p <= 0
    {
        e.add("price_minor", "must be a positive integer of minor units");
    }
    if let Some(c) = &b.currency
        && !(currency::is_valid_code(c) && currency::minor_unit_exponent(c).is_some())
    {
        e.add("currency", "must be an ISO 4217 code (e.g. UAH) or XTR");
    }
    if let Some(d) = b.billing_period_days
        && !(1..=3660).contains(&d)
    {
        e.add("billing_period_days", "must be from 1 to 3660");
    }
    if let Some(d) = b.grace_period_days
        && !(0..=365).contains(&d)
    {
        e.add("grace_period_days", "must be from 0 to 365");
    }
    if let Some(Some(s)) = b.seat_limit
        && s < 1
    {
        e.add("seat_limit", "must be null (unlimited) or at least 1");
    }
    check_text(
        &mut e,
        "description",
        b.description.as_ref().and_then(|d| d.as_deref()),
        DESCRIPTION_MAX,
    );
    // Checked here when the body says enough; a PATCH that changes only one side is checked by
    // the schema against the stored other side (`channels_recurring_check`, see `patch`).
    if b.recurring == Some(true) {
        let currency_ok = b.currency.as_deref().is_none_or(|c| c == "XTR");
        let period_ok = b
            .billing_period_days
            .is_none_or(|d| d == RECURRING_PERIOD_DAYS);
        let complete = !create || (b.currency.is_some() && b.billing_period_days.is_some());
        if complete && !(currency_ok && period_ok) {
            e.add("recurring", RECURRING_RULE);
        }
    }
    e.finish()
}

/// Telegram sells Stars subscriptions with a 30-day period only.
const RECURRING_PERIOD_DAYS: i32 = 30;
const RECURRING_RULE: &str =
    "is allowed only for XTR (Telegram Stars) channels with billing_period_days 30";

/// The schema's refusal of a recurring channel that is not `XTR` for 30 days, as the same
/// per-field 422 `validate` gives.
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

/// `POST /api/channels`.
#[utoipa::path(post, path = "/channels", operation_id = "createChannel", tag = "channels",
    request_body = ChannelInput,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = Channel),
        (status = 409, description = "A channel with this `telegram_chat_id` exists, or this \
            Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, or an Idempotency-Key reused for another \
            request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<ChannelInput>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    validate(b, true, Errors::default())?;
    crate::idempotent!(state, write, |tx| {
        let row = tx
            .query_one(
                INSERT_SQL,
                &[
                    &b.telegram_chat_id,
                    &b.title,
                    &b.price_minor,
                    &b.currency,
                    &b.billing_period_days,
                    &b.grace_period_days,
                    &b.seat_limit.flatten(),
                    &b.active,
                    &b.description.clone().flatten(),
                    &b.recurring,
                ],
            )
            .await
            .map_err(recurring_refused)?;
        let c = channel(&row, &state.config)?;
        tracing::info!(channel_id = c.id, "channel created");
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(c).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/channels`.
#[utoipa::path(get, path = "/channels", operation_id = "listChannels", tag = "channels",
    params(ListChannels),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of channels, by id.", body = Page<Channel>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListChannels>,
) -> Result<Json<Page<Channel>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    let rows = client
        .query(LIST_SQL, &[&paging.after, &q.active, &paging.fetch()])
        .await?;
    let items = rows
        .iter()
        .map(|r| channel(r, &state.config))
        .collect::<Result<_, _>>()?;
    Ok(Json(paging.page(items, |c| c.id as i64)))
}

/// `GET /api/channels/{id}`.
#[utoipa::path(get, path = "/channels/{id}", operation_id = "getChannel", tag = "channels",
    params(("id" = i32, Path, description = "Channel id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The channel.", body = Channel)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i32>,
) -> Result<Json<Channel>, ApiError> {
    let client = state.db.get().await?;
    let row = client
        .query_opt(GET_SQL, &[&id])
        .await?
        .ok_or(ApiError::NotFound("channel"))?;
    Ok(Json(channel(&row, &state.config)?))
}

/// `PATCH /api/channels/{id}`: any field; `seat_limit: null` makes the channel unlimited and
/// `description: null` removes the description, any other `null` is a 422.
/// Orders keep the price and currency they were created with.
///
/// A new `telegram_chat_id` is refused with 409 while the channel has live (active or grace)
/// memberships — their members are in the current chat — or pending effects aimed at the current
/// chat ([`chat_change_blocker`]); otherwise it also clears the stored `invite_link`, which
/// belongs to the old chat (the next grant makes one for the new chat).
#[utoipa::path(patch, path = "/channels/{id}", operation_id = "patchChannel", tag = "channels",
    params(("id" = i32, Path, description = "Channel id.")),
    request_body(content = Option<ChannelPatch>, description = "The fields to change; none (or an \
        empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The channel as changed.", body = Channel),
        (status = 409, description = "`telegram_chat_id` is taken, or cannot change while the \
            channel has live memberships or pending effects.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields (`null` for anything but `seat_limit` included).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i32>,
    ApiJson(patch): ApiJson<ChannelPatch>,
) -> Result<Json<Channel>, ApiError> {
    let mut e = Errors::default();
    let b = patch.into_input(&mut e);
    validate(&b, false, e)?;
    crate::transaction!(state.db, |tx| {
        // A new or lower limit must bind every seat decision not yet committed: wait for those
        // made from the old terms, hold off new ones until this commits (docs/locking.md).
        if matches!(b.seat_limit, Some(Some(_)))
            && !seats::lock_for_seat_limit_change(tx, id).await?
        {
            return Err(ApiError::NotFound("channel"));
        }
        if let Some(new_chat) = b.telegram_chat_id {
            // `FOR UPDATE` (the lock a change of a unique column takes anyway), before the
            // check: it waits for every transaction that enqueued an effect under a key-share
            // lock of this row and holds off new ones until this commits, so the check below
            // sees all of them.
            let current: i64 = tx
                .query_opt(
                    "SELECT telegram_chat_id FROM channels WHERE id = $1 FOR UPDATE",
                    &[&id],
                )
                .await?
                .ok_or(ApiError::NotFound("channel"))?
                .get(0);
            if new_chat != current
                && let Some(why) = chat_change_blocker(tx, id, current).await?
            {
                return Err(ApiError::Conflict(why));
            }
        }
        let row = tx
            .query_opt(
                PATCH_SQL,
                &[
                    &id,
                    &b.telegram_chat_id,
                    &b.title,
                    &b.price_minor,
                    &b.currency,
                    &b.billing_period_days,
                    &b.grace_period_days,
                    &b.seat_limit.is_some(),
                    &b.seat_limit.flatten(),
                    &b.active,
                    &b.description.is_some(),
                    &b.description.clone().flatten(),
                    &b.recurring,
                ],
            )
            .await
            .map_err(recurring_refused)?
            .ok_or(ApiError::NotFound("channel"))?;
        Ok(Json(channel(&row, &state.config)?))
    })
}

/// Why the channel's chat cannot change now, if it cannot: members in the current chat (a live
/// membership) or effects still to be performed there (a pending effect whose `chat_id` is the
/// current chat: a revoke still to kick someone, a grant still to send its link). Either would
/// act on, or send people to, the wrong chat after the change. The caller holds the channel
/// row `FOR UPDATE`.
async fn chat_change_blocker(
    tx: &deadpool_postgres::Transaction<'_>,
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

/// `DELETE /api/channels/{id}`: 204, or 409 while memberships, orders or payments refer to it.
#[utoipa::path(delete, path = "/channels/{id}", operation_id = "deleteChannel", tag = "channels",
    params(("id" = i32, Path, description = "Channel id.")),
    security(("staff_jwt" = [])),
    responses(
        (status = 204, description = "Deleted."),
        (status = 409, description = "Memberships, orders or payments refer to the channel; \
            deactivate it instead.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i32>,
) -> Result<Response, ApiError> {
    let client = state.db.get().await?;
    let deleted = client
        .execute("DELETE FROM channels WHERE id = $1", &[&id])
        .await
        .map_err(|e| match e.code() {
            Some(c) if *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION => {
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
    Ok(StatusCode::NO_CONTENT.into_response())
}
