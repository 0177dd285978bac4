//! `/api/plans`: the ways a channel is sold — one channel or several (a bundle), paid or a free
//! trial, for `period_days` or for life — with their price, display order and the deep link that
//! opens one in the bot (`buy_link`, read-only). Every channel has one default plan
//! (`is_default`), which is the channel's own price fields.
//!
//! HTTP only: a handler checks the body's fields one by one, calls one function of
//! [`crate::catalog::plans`] (which owns the rows, the SQL and the rules that combine fields, channels
//! and orders) and renders its answer.

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
    catalog::plans::{self, Kind, Plan},
    common::error::ApiError,
    present::translations::{self, Translation},
    staff::audit_log::Entry,
};

/// The longest `description`, in characters.
const DESCRIPTION_MAX: usize = 1000;

/// A new plan.
#[derive(Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"title": "Signals + Chat, 90 days", "channel_ids": [1, 2],
    "price_minor": 49900, "period_days": 90, "position": 1}))]
pub struct PlanInput {
    #[schema(required = true, nullable = false, min_length = 1, max_length = 255)]
    title: Option<String>,
    /// Shown to buyers in the bot.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 1000)]
    description: Option<Option<String>>,
    /// 1..10 distinct channels, all of one currency; more than one: a bundle. The first is the
    /// `channel_id` of the plan's orders.
    #[schema(required = true, nullable = false, min_items = 1, max_items = 10)]
    channel_ids: Option<Vec<i32>>,
    /// `paid` (default) or `trial` (free, once per buyer and channel).
    #[schema(required = false, nullable = false, value_type = Kind)]
    kind: Option<String>,
    /// Minor units: > 0 for a paid plan (required), 0 or absent for a trial.
    #[schema(nullable = false, minimum = 0)]
    price_minor: Option<i64>,
    /// The currency of every channel of the plan (default: theirs).
    #[schema(nullable = false, pattern = "^[A-Z]{3}$", example = "UAH")]
    currency: Option<String>,
    /// Days of access one purchase gives (1..3660; a trial 1..90); `null`: lifetime.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(required = true, value_type = Option<i32>, minimum = 1, maximum = 3660)]
    period_days: Option<Option<i32>>,
    /// Sold as a Telegram Stars subscription (paid, `XTR`, 30 days only). Default false.
    #[schema(nullable = false)]
    recurring: Option<bool>,
    /// Default true.
    #[schema(nullable = false)]
    active: Option<bool>,
    /// Display order among a channel's plans, after price. Default 0.
    #[schema(nullable = false)]
    position: Option<i32>,
    /// The title and description in other languages: `{"uk": {"title", "description"}}`
    /// (languages `en`, `uk`, `ru`; title 1..255, description at most 1000 characters).
    #[schema(nullable = false, value_type = Option<HashMap<String, Translation>>)]
    translations: Option<Value>,
    /// Prices in crypto assets, sold through Crypto Pay: asset (`USDT`, `TON`, `BTC`, `ETH`,
    /// `LTC`, `BNB`, `TRX`, `USDC`) → a positive decimal string with no more places than the
    /// asset's minor unit (USDT 6, TON 9, …), e.g. `{"USDT": "4.99", "TON": "1.5"}`, charged
    /// exactly; `null` or `{}`: none. Not for a trial.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<HashMap<String, String>>)]
    crypto_prices: Option<Option<Value>>,
}

/// A PATCH body: like [`PlanInput`], but every field optional; an explicit `null` is refused
/// for every field except `description` (removes it) and `period_days` (lifetime).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"price_minor": 44900, "active": false}))]
pub struct PlanPatch {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, min_length = 1, max_length = 255)]
    title: Option<Option<String>>,
    /// `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 1000)]
    description: Option<Option<String>>,
    /// Refused (409) once the plan has orders; a default plan keeps its channel.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Vec<i32>, min_items = 1, max_items = 10)]
    channel_ids: Option<Option<Vec<i32>>>,
    /// Refused (409) once the plan has orders; a default plan stays paid.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Kind)]
    kind: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i64, minimum = 0)]
    price_minor: Option<Option<i64>>,
    /// Refused (409) once a plan other than a default plan has orders.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, pattern = "^[A-Z]{3}$")]
    currency: Option<Option<String>>,
    /// `null`: lifetime (not for a trial or a default plan).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 3660)]
    period_days: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    recurring: Option<Option<bool>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    active: Option<Option<bool>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32)]
    position: Option<Option<i32>>,
    /// Replaces every translation (`{}` removes them).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = HashMap<String, Translation>)]
    translations: Option<Option<Value>>,
    /// Replaces the crypto prices; `null` or `{}` removes them.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<HashMap<String, String>>)]
    crypto_prices: Option<Option<Value>>,
}

impl PlanPatch {
    fn into_input(self, e: &mut Errors) -> PlanInput {
        PlanInput {
            title: not_null(e, "title", self.title),
            description: self.description,
            channel_ids: not_null(e, "channel_ids", self.channel_ids),
            kind: not_null(e, "kind", self.kind),
            price_minor: not_null(e, "price_minor", self.price_minor),
            currency: not_null(e, "currency", self.currency),
            period_days: self.period_days,
            recurring: not_null(e, "recurring", self.recurring),
            active: not_null(e, "active", self.active),
            position: not_null(e, "position", self.position),
            translations: not_null(e, "translations", self.translations),
            crypto_prices: self.crypto_prices,
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListPlans {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    /// Only plans that include this channel (bundles too).
    channel_id: Option<i32>,
    active: Option<bool>,
}

/// Checks every present field on its own (the rules that combine fields, channels and orders
/// are [`plans`]'); with `create`, the required ones must be present. Returns the fields as the
/// domain takes them.
fn validate(b: PlanInput, create: bool, mut e: Errors) -> Result<plans::Fields, ApiError> {
    let kind = e.state::<Kind>("kind", b.kind.as_deref());
    if create {
        e.required("title", b.title.as_ref());
        e.required("channel_ids", b.channel_ids.as_ref());
        if b.kind.is_none() || kind == Some(Kind::Paid) {
            e.required("price_minor", b.price_minor);
        }
        if b.period_days.is_none() {
            e.add(
                "period_days",
                "is required (a number of days, or null for lifetime access)",
            );
        }
    }
    if let Some(t) = &b.title {
        if t.contains('\0') {
            e.add("title", "must not contain NUL characters");
        } else if !(1..=255).contains(&chars(t)) {
            e.add("title", "must be 1 to 255 characters");
        }
    }
    if let Some(why) = b.channel_ids.as_deref().and_then(plans::channel_ids_error) {
        e.add("channel_ids", why);
    }
    check_text(
        &mut e,
        "description",
        b.description.as_ref().and_then(|d| d.as_deref()),
        DESCRIPTION_MAX,
    );
    if let Some(p) = b.price_minor
        && p < 0
    {
        e.add("price_minor", "must not be negative");
    }
    super::check_translations(&mut e, b.translations.as_ref());
    let crypto_prices = match &b.crypto_prices {
        None => None,
        Some(None) => Some(None),
        Some(Some(v)) => match plans::crypto_prices::check(v) {
            Ok(prices) => Some(prices),
            Err(errors) => {
                for (field, message) in errors {
                    e.add(&field, message);
                }
                None
            }
        },
    };
    e.finish()?;
    Ok(plans::Fields {
        title: b.title,
        description: b.description,
        channel_ids: b.channel_ids,
        kind,
        price_minor: b.price_minor,
        currency: b.currency,
        period_days: b.period_days,
        recurring: b.recurring,
        active: b.active,
        position: b.position,
        translations: b
            .translations
            .as_ref()
            .and_then(|v| translations::check(v).ok()),
        crypto_prices,
    })
}

fn with_link(state: &AppState, p: Plan) -> Plan {
    p.with_buy_link(state.config.telegram_bot_username.as_deref())
}

/// `POST /api/plans`: a plan of 1..10 channels of one currency. Nothing is written unless every
/// field is valid.
#[utoipa::path(post, path = "/plans", operation_id = "createPlan", tag = "plans",
    request_body = PlanInput,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = Plan),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields: a title out of range, unknown, repeated or \
            mixed-currency channels, a currency other than the channels', a trial with a price or \
            without 1..90 days, `recurring` other than paid XTR for 30 days; or an \
            Idempotency-Key reused for another request.", body = Problem,
            content_type = "application/problem+json",
            example = json!({"type": "/problems/validation", "title": "Unprocessable Entity",
                "status": 422, "detail": "some fields are invalid",
                "errors": {"channel_ids": "the channels of a plan must share one currency (channel 1 is UAH, channel 2 is XTR)"}})),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<PlanInput>,
) -> Result<Response, ApiError> {
    let fields = validate(write.body.clone(), true, Errors::default())?;
    crate::idempotent!(state, write, |tx| {
        let p = with_link(&state, plans::create(tx, &fields).await?);
        let entry = Entry::new("plan.create", Some(p.id)).after(&p);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(p).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/plans`.
#[utoipa::path(get, path = "/plans", operation_id = "listPlans", tag = "plans",
    params(ListPlans),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of plans, by id.", body = Page<Plan>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListPlans>,
) -> Result<Json<Page<Plan>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    let items = plans::list(
        &client,
        paging.after,
        q.channel_id,
        q.active,
        paging.fetch(),
    )
    .await?
    .into_iter()
    .map(|p| with_link(&state, p))
    .collect();
    Ok(Json(paging.page(items, |p: &Plan| p.id)))
}

/// `GET /api/plans/{id}`.
#[utoipa::path(get, path = "/plans/{id}", operation_id = "getPlan", tag = "plans",
    params(("id" = i64, Path, description = "Plan id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The plan.", body = Plan)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Plan>, ApiError> {
    let client = state.db.get().await?;
    let p = plans::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("plan"))?;
    Ok(Json(with_link(&state, p)))
}

/// `PATCH /api/plans/{id}`: any field; `description: null` removes the description and
/// `period_days: null` makes the plan lifetime, any other `null` is a 422. Orders keep the price
/// they were made with; a new period applies to payments applied from now on.
///
/// Once the plan has orders its `kind`, `currency` and `channel_ids` cannot change (409). A
/// channel's default plan stays paid, timed and that channel's (422); a change of its
/// `price_minor`, `currency`, `period_days` or `recurring` is a change of the channel's
/// `price_minor`, `currency`, `billing_period_days` or `recurring`, with the channel's rules.
#[utoipa::path(patch, path = "/plans/{id}", operation_id = "patchPlan", tag = "plans",
    params(("id" = i64, Path, description = "Plan id.")),
    request_body(content = Option<PlanPatch>, description = "The fields to change; none (or an \
        empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The plan as changed.", body = Plan),
        (status = 409, description = "The plan has orders, so its kind, currency or channels \
            cannot change; or (a default plan) its channel's currency cannot change while other \
            plans include the channel.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields (`null` for anything but `description` and \
            `period_days` included), or a default plan made a trial, lifetime or a bundle.",
            body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(patch): ApiJson<PlanPatch>,
) -> Result<Json<Plan>, ApiError> {
    let mut e = Errors::default();
    let b = patch.into_input(&mut e);
    let fields = validate(b, false, e)?;
    crate::transaction!(state.db, |tx| {
        let before = plans::get(tx, id).await?.map(|p| with_link(&state, p));
        let p = with_link(&state, plans::change(tx, id, &fields).await?);
        let entry = Entry::new("plan.update", Some(id))
            .before(&before)
            .after(&p);
        staff.audit(tx, entry).await?;
        Ok(Json(p))
    })
}

/// `DELETE /api/plans/{id}`: 204, or 409 for a plan with orders (deactivate it instead) and
/// for a channel's default plan (it goes with its channel).
#[utoipa::path(delete, path = "/plans/{id}", operation_id = "deletePlan", tag = "plans",
    params(("id" = i64, Path, description = "Plan id.")),
    security(("staff_jwt" = [])),
    responses(
        (status = 204, description = "Deleted."),
        (status = 409, description = "The plan has orders (deactivate it instead), or it is a \
            channel's default plan (delete or deactivate the channel).", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        let before = plans::get(tx, id).await?.map(|p| with_link(&state, p));
        plans::delete(tx, id).await?;
        let entry = Entry::new("plan.delete", Some(id)).before(&before);
        staff.audit(tx, entry).await
    })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
