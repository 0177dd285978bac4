//! `/app/api/`: the Mini App's JSON API, for the page at `/app/` (the paywall at a channel's
//! door and the member portal). Every call is a buyer's, authenticated by Telegram's signed
//! `initData` ([`auth::Buyer`]); the answers are the bot's own decisions
//! ([`crate::bot::mini_app`]) as JSON. A buyer-facing refusal is a 422 whose `detail` is the
//! bot's text in the buyer's language. These routes need no staff token; the OpenAPI document
//! lists them under the tag `mini app`, secured by `telegram_init_data`.

pub mod auth;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};

use super::{ApiJson, ApiQuery, Errors, PathId, check_text, schemas::Problem};
use crate::{
    app::state::AppState,
    bot::{
        mini_app::{
            offer::{self, Offer},
            orders::{self, OrderStatus, Pay, Placed},
            portal::{self, Edit, Me, Subscription},
        },
        texts::Language,
    },
    common::error::ApiError,
};
use auth::Buyer;

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OfferQuery {
    /// The channel whose plans are offered.
    channel_id: i32,
    /// A code typed on the page: checked and priced, not kept.
    promo_code: Option<String>,
}

/// `GET /app/api/offer?channel_id=&promo_code=`: the channel's plans as the bot lists them for
/// this buyer; 404 for an unknown or inactive channel.
#[utoipa::path(get, path = "/app/api/offer", operation_id = "miniAppOffer", tag = "mini app",
    params(OfferQuery),
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The channel's plans as the bot lists them for this buyer.",
            body = Offer),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such active channel.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A code too long.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_offer(
    State(state): State<AppState>,
    buyer: Buyer,
    ApiQuery(q): ApiQuery<OfferQuery>,
) -> Result<Json<Offer>, ApiError> {
    let mut e = Errors::default();
    check_text(&mut e, "promo_code", q.promo_code.as_deref(), 64);
    e.finish()?;
    let config = &state.config;
    let found = if q.promo_code.is_some() {
        // A wrong code is counted against the buyer's limit, in a transaction.
        crate::transaction!(state.db, |tx| {
            offer::offer(
                tx,
                config,
                buyer.language,
                buyer.id,
                buyer.user_id(),
                q.channel_id,
                q.promo_code.as_deref(),
            )
            .await
        })?
    } else {
        let client = state.db.get().await?;
        offer::offer(
            &client,
            config,
            buyer.language,
            buyer.id,
            buyer.user_id(),
            q.channel_id,
            None,
        )
        .await?
    };
    found.map(Json).ok_or(ApiError::NotFound("channel"))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MiniAppNewOrder)]
pub struct NewOrder {
    plan_id: i64,
    /// A code typed on the page, kept for this order as `/code` keeps one.
    promo_code: Option<String>,
    /// The `r` of the page's URL: the join request the page was opened for.
    join_request: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppPlacement)]
pub struct Placement {
    order: orders::OrderView,
    pay: Pay,
}

/// `POST /app/api/orders`: the buy button pressed on the page; 422 with the bot's words when
/// nothing can be bought; 503 when Telegram or a gateway made no payment link.
#[utoipa::path(post, path = "/app/api/orders", operation_id = "miniAppCreateOrder",
    tag = "mini app",
    request_body = NewOrder,
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The order (made, reused or granted) and how the page \
            pays it.", body = Placement),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Nothing can be bought: `detail` says why, in the buyer's \
            language.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create_order(
    State(state): State<AppState>,
    buyer: Buyer,
    ApiJson(body): ApiJson<NewOrder>,
) -> Result<Json<Placement>, ApiError> {
    let mut e = Errors::default();
    check_text(&mut e, "promo_code", body.promo_code.as_deref(), 64);
    check_text(&mut e, "join_request", body.join_request.as_deref(), 128);
    e.finish()?;
    let (l, sender) = (buyer.language, &buyer.sender);
    let config = &state.config;
    let placed = crate::transaction!(state.db, |tx| {
        orders::place(
            tx,
            config,
            l,
            sender,
            body.plan_id,
            body.promo_code.as_deref(),
            body.join_request.as_deref(),
        )
        .await
    })?;
    let (order_id, pay) = match placed {
        Placed::Refused(text) => return Err(ApiError::Unprocessable(text)),
        Placed::Granted { order_id } => (order_id, Pay::Granted { granted: true }),
        Placed::ToPay { order_id, gateway } => (
            order_id,
            orders::pay(&state.db, config, order_id, gateway).await?,
        ),
    };
    let client = state.db.get().await?;
    let order = orders::view(&client, l, order_id).await?;
    Ok(Json(Placement { order, pay }))
}

/// `GET /app/api/orders/{id}`: one of the buyer's orders, whether it gave access, and its join
/// request; 404 for another buyer's.
#[utoipa::path(get, path = "/app/api/orders/{id}", operation_id = "miniAppOrder",
    tag = "mini app",
    params(("id" = i64, Path, description = "Order id.")),
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The buyer's order, whether it gave access, and its join \
            request.", body = OrderStatus),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_order(
    State(state): State<AppState>,
    buyer: Buyer,
    PathId(id): PathId<i64>,
) -> Result<Json<OrderStatus>, ApiError> {
    let client = state.db.get().await?;
    orders::status(&client, buyer.language, buyer.id, buyer.user_id(), id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("order"))
}

async fn me_in(state: &AppState, buyer: &Buyer, l: Language) -> Result<Me, ApiError> {
    let config = &state.config;
    crate::transaction!(state.db, |tx| {
        portal::me(tx, config, l, buyer.id, buyer.user_id()).await
    })
}

/// `GET /app/api/me`: the buyer's portal.
#[utoipa::path(get, path = "/app/api/me", operation_id = "miniAppMe", tag = "mini app",
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The buyer's memberships, Stars subscriptions, payments \
            and referral link.", body = Me),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_me(State(state): State<AppState>, buyer: Buyer) -> Result<Json<Me>, ApiError> {
    Ok(Json(me_in(&state, &buyer, buyer.language).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MiniAppLanguageChoice)]
pub struct LanguageChoice {
    language: Language,
}

/// `PUT /app/api/me/language`: the buyer's language from now on; the portal in it.
#[utoipa::path(put, path = "/app/api/me/language", operation_id = "miniAppLanguage",
    tag = "mini app",
    request_body = LanguageChoice,
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The portal, in the language chosen.", body = Me),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_language(
    State(state): State<AppState>,
    buyer: Buyer,
    ApiJson(body): ApiJson<LanguageChoice>,
) -> Result<Json<Me>, ApiError> {
    let id = buyer.id;
    crate::transaction!(state.db, |tx| {
        portal::choose_language(tx, id, body.language).await
    })?;
    Ok(Json(me_in(&state, &buyer, body.language).await?))
}

/// `{"subscription": ...}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = MiniAppSubscriptionEnvelope)]
pub struct SubscriptionEnvelope {
    subscription: Subscription,
}

async fn edit(
    state: AppState,
    buyer: Buyer,
    id: i64,
    edit: Edit,
) -> Result<Json<SubscriptionEnvelope>, ApiError> {
    match portal::edit_subscription(
        &state.db,
        &state.config,
        buyer.language,
        buyer.id,
        buyer.user_id(),
        id,
        edit,
    )
    .await?
    {
        None => Err(ApiError::NotFound("subscription")),
        Some(Err(text)) => Err(ApiError::Unprocessable(text)),
        Some(Ok(subscription)) => Ok(Json(SubscriptionEnvelope { subscription })),
    }
}

/// `POST /app/api/subscriptions/{id}/cancel`: stops the buyer's Stars subscription renewing.
#[utoipa::path(post, path = "/app/api/subscriptions/{id}/cancel",
    operation_id = "miniAppCancelSubscription", tag = "mini app",
    params(("id" = i64, Path, description = "Stars subscription id.")),
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The subscription, cancelled in Telegram.",
            body = SubscriptionEnvelope),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn cancel_subscription(
    State(state): State<AppState>,
    buyer: Buyer,
    PathId(id): PathId<i64>,
) -> Result<Json<SubscriptionEnvelope>, ApiError> {
    edit(state, buyer, id, Edit::Cancel).await
}

/// `POST /app/api/subscriptions/{id}/resume`: renews a subscription the buyer cancelled again.
#[utoipa::path(post, path = "/app/api/subscriptions/{id}/resume",
    operation_id = "miniAppResumeSubscription", tag = "mini app",
    params(("id" = i64, Path, description = "Stars subscription id.")),
    security(("telegram_init_data" = [])),
    responses(
        (status = 200, description = "The subscription, renewing again.",
            body = SubscriptionEnvelope),
        (status = 401, description = "No valid `initData`.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "It cannot be resumed here (cancelled by staff, or past \
            its renewal date): `detail` says so in the buyer's language.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls by this buyer; see `Retry-After`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn resume_subscription(
    State(state): State<AppState>,
    buyer: Buyer,
    PathId(id): PathId<i64>,
) -> Result<Json<SubscriptionEnvelope>, ApiError> {
    edit(state, buyer, id, Edit::Resume).await
}
