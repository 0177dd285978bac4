//! `/api/channels`: the private Telegram channels we sell access to, with their price, billing
//! period, grace period and optional seat limit, what buyers read about them (`description`),
//! whether the bot sells them as a Telegram Stars subscription (`recurring`), and the deep link
//! that opens their offer in the bot (`buy_link`, read-only).
//!
//! HTTP only: a handler checks the body's fields, calls one function of [`crate::catalog::channels`]
//! (which owns the rows, the SQL and the rules of a change) and renders its answer.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::Value;

use super::{
    ApiJson, ApiQuery, Errors, Page, Paging, PathId, chars, check_text, not_null, nullable,
};
use super::{auth::Staff, idempotency::StaffWrite, schemas::Problem};
use crate::{
    app::state::AppState,
    catalog::channels::{self, Channel, Door, RECURRING_PERIOD_DAYS, RECURRING_RULE},
    common::{currency, error::ApiError},
    present::translations::{self, Translation},
    staff::audit_log::Entry,
};

/// The longest `description`, in characters.
const DESCRIPTION_MAX: usize = 1000;

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
    /// The title and description in other languages: `{"uk": {"title", "description"}}`
    /// (languages `en`, `uk`, `ru`; title 1..255, description at most 1000 characters).
    #[schema(nullable = false, value_type = Option<HashMap<String, Translation>>)]
    translations: Option<Value>,
    /// `bot` (default) or `mini_app` (needs `PUBLIC_URL`): how the chat's join requests are
    /// answered.
    #[schema(nullable = false, value_type = Option<String>, example = "mini_app")]
    door: Option<String>,
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
    /// Replaces every translation (`{}` removes them).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = HashMap<String, Translation>)]
    translations: Option<Option<Value>>,
    /// `bot` or `mini_app` (needs `PUBLIC_URL`).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, example = "mini_app")]
    door: Option<Option<String>>,
}

impl ChannelInput {
    /// The checked fields, as the domain takes them.
    fn fields(&self) -> channels::Fields {
        channels::Fields {
            telegram_chat_id: self.telegram_chat_id,
            title: self.title.clone(),
            price_minor: self.price_minor,
            currency: self.currency.clone(),
            billing_period_days: self.billing_period_days,
            grace_period_days: self.grace_period_days,
            seat_limit: self.seat_limit,
            active: self.active,
            description: self.description.clone(),
            recurring: self.recurring,
            translations: self
                .translations
                .as_ref()
                .and_then(|v| translations::check(v).ok()),
            door: self.door.as_deref().and_then(Door::parse),
        }
    }
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
            translations: not_null(e, "translations", self.translations),
            door: not_null(e, "door", self.door),
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

/// The channel with its read-only links (`buy_link`, `paywall_url`) filled from the
/// configuration.
fn links(state: &AppState, c: Channel) -> Channel {
    c.with_links(
        state.config.telegram_bot_username.as_deref(),
        state.config.public_url.as_deref(),
    )
}

/// `door` is a spelling of [`Door`], and a Mini App door needs the page's public address:
/// without `PUBLIC_URL`, `door: "mini_app"` is refused on the field.
fn door_errors(state: &AppState, door: Option<&str>) -> Errors {
    let mut e = Errors::default();
    match door.map(Door::parse) {
        Some(None) => e.add("door", format!("must be {}", Door::spellings())),
        Some(Some(Door::MiniApp)) if state.config.public_url.is_none() => e.add(
            "door",
            "mini_app needs PUBLIC_URL (the Mini App's page is served there)",
        ),
        _ => {}
    }
    e
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
    if let Some(why) = b.telegram_chat_id.and_then(channels::chat_id_error) {
        e.add("telegram_chat_id", why);
    }
    super::check_translations(&mut e, b.translations.as_ref());
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
    if let (Some(p), Some(c)) = (b.price_minor, b.currency.as_deref())
        && let Some(why) = crate::common::currency::price_over_max(p, c)
    {
        e.add("price_minor", why);
    }
    if let Some(c) = &b.currency
        && !currency::is_price_currency(c)
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
    validate(b, true, door_errors(&state, b.door.as_deref()))?;
    let fields = b.fields();
    crate::idempotent!(state, write, |tx| {
        let c = links(&state, channels::create(tx, &fields).await?);
        let entry = Entry::new("channel.create", Some(c.id.into())).after(&c);
        write.staff.audit(tx, entry).await?;
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
    let items = channels::list(&client, paging.after, q.active, paging.fetch())
        .await?
        .into_iter()
        .map(|c| links(&state, c))
        .collect();
    Ok(Json(paging.page(items, |c: &Channel| c.id as i64)))
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
    let c = channels::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("channel"))?;
    Ok(Json(links(&state, c)))
}

/// `PATCH /api/channels/{id}`: any field; `seat_limit: null` makes the channel unlimited and
/// `description: null` removes the description, any other `null` is a 422.
/// Orders keep the price and currency they were created with.
///
/// A new `telegram_chat_id` is refused with 409 while the channel has live (active or grace)
/// memberships — their members are in the current chat — or pending effects aimed at the current
/// chat ([`channels::chat_change_blocker`]); otherwise it also clears the stored `invite_link`, which
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
    staff: Staff,
    PathId(id): PathId<i32>,
    ApiJson(patch): ApiJson<ChannelPatch>,
) -> Result<Json<Channel>, ApiError> {
    let mut e = door_errors(&state, patch.door.clone().flatten().as_deref());
    let b = patch.into_input(&mut e);
    validate(&b, false, e)?;
    let fields = b.fields();
    crate::transaction!(state.db, |tx| {
        let before = channels::get(tx, id).await?.map(|c| links(&state, c));
        let c = links(&state, channels::change(tx, id, &fields).await?);
        let entry = Entry::new("channel.update", Some(id.into()))
            .before(&before)
            .after(&c);
        staff.audit(tx, entry).await?;
        Ok(Json(c))
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
    staff: Staff,
    PathId(id): PathId<i32>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        let before = channels::get(tx, id).await?;
        channels::delete(tx, id).await?;
        let entry = Entry::new("channel.delete", Some(id.into())).before(&before);
        staff.audit(tx, entry).await
    })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
