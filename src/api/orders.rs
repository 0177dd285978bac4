//! `/api/orders`: create, read, cancel and check out orders ([`crate::orders`] owns them and
//! the seat rule that checkout applies).

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;
use serde_json::json;

use super::{
    ApiQuery, Errors, Page, Paging, PathId,
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
    schemas::{ClaimEnvelope, OrderEnvelope, Problem},
    state_filter,
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    orders::{
        self, Order,
        seats::{self, CheckoutRefusal},
        trials,
    },
    staff::audit_log::Entry,
};

/// A new order: a plan (`plan_id`, with an optional `promo_code`), or a channel's default plan
/// (`channel_id`), at its price now. Exactly one of `plan_id` and `channel_id`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"subscriber_id": 1, "plan_id": 1, "promo_code": "SPRING25"}))]
pub struct CreateOrder {
    #[schema(required = true, nullable = false)]
    subscriber_id: Option<i32>,
    /// A channel: its default plan.
    #[schema(nullable = false)]
    channel_id: Option<i32>,
    #[schema(nullable = false)]
    plan_id: Option<i64>,
    /// Matched case-insensitively; only with `plan_id`.
    #[schema(nullable = false)]
    promo_code: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListOrders {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    #[param(value_type = Option<orders::Status>)]
    status: Option<String>,
}

impl From<CheckoutRefusal> for ApiError {
    fn from(r: CheckoutRefusal) -> ApiError {
        match r {
            CheckoutRefusal::NotPending => ApiError::Conflict("the order is not pending".into()),
            CheckoutRefusal::HoldExpired => {
                ApiError::Conflict("the order's seat hold has expired; create a new order".into())
            }
            CheckoutRefusal::ChannelFull => {
                ApiError::Conflict("the channel is full: no seat is free".into())
            }
            CheckoutRefusal::ChannelInactive => {
                ApiError::Unprocessable("the channel is not active".into())
            }
            CheckoutRefusal::PromoExhausted => ApiError::Conflict(
                "this price is no longer available: the order's promo code use lapsed and the \
                 code has no room left; create a new order"
                    .into(),
            ),
            CheckoutRefusal::HoldLimited { limit, until } => ApiError::Conflict(format!(
                "the subscriber may not hold a seat of this channel again until {} ({})",
                until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                match limit {
                    seats::HoldLimit::Cooldown => "an unpaid hold ran out recently",
                    seats::HoldLimit::DailyCap => "the daily number of holds is reached",
                }
            )),
        }
    }
}

fn to_value(order: &Order) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(order).map_err(ApiError::internal)
}

/// `POST /api/orders`: 201 with the order; amount and currency are the channel's price now.
/// 422 when the subscriber or channel does not exist or the channel is inactive; 409 when the
/// subscriber already has live lifetime access to what the order would buy.
#[utoipa::path(post, path = "/orders", operation_id = "createOrder", tag = "orders",
    request_body = CreateOrder,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = Order),
        (status = 409, description = "The subscriber already has lifetime access to the channel \
            (or to every channel of the plan), or this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, no such subscriber or channel, an inactive \
            channel, or an Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<CreateOrder>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let subscriber_id = e.required("subscriber_id", b.subscriber_id);
    match (b.channel_id, b.plan_id) {
        (None, None) => e.add("channel_id", "is required (or plan_id)"),
        (Some(_), Some(_)) => e.add("plan_id", "give plan_id or channel_id, not both"),
        _ => {}
    }
    if b.promo_code.is_some() && b.plan_id.is_none() {
        e.add("promo_code", "applies to an order of a plan (plan_id)");
    }
    e.finish()?;
    let subscriber_id = subscriber_id.unwrap();
    let hold_secs = state.config.hold_secs;
    crate::idempotent!(state, write, |tx| {
        // Exactly one of the two is given (checked above).
        let order = match b.plan_id {
            Some(plan_id) => {
                orders::create_for_plan(
                    tx,
                    subscriber_id,
                    plan_id,
                    b.promo_code.as_deref(),
                    hold_secs,
                )
                .await?
            }
            None => orders::create(tx, subscriber_id, b.channel_id.unwrap_or_default()).await?,
        };
        tracing::info!(
            order_id = order.id,
            subscriber_id,
            channel_id = order.channel_id,
            plan_id = order.plan_id,
            promo_code = ?order.promo_code,
            staff_id = write.staff.id,
            "order created"
        );
        let entry = Entry::new("order.create", Some(order.id)).after(&order);
        write.staff.audit(tx, entry).await?;
        Ok((StatusCode::CREATED, to_value(&order)?))
    })
}

/// `GET /api/orders` (filters `subscriber_id`, `channel_id`, `status`).
#[utoipa::path(get, path = "/orders", operation_id = "listOrders", tag = "orders",
    params(ListOrders),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of orders, by id.", body = Page<Order>),
        (status = 422, description = "`limit` out of range or an unknown `status`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListOrders>,
) -> Result<Json<Page<Order>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let status = state_filter::<orders::Status>("status", q.status.as_deref())?;
    let filter = orders::Filter {
        subscriber_id: q.subscriber_id,
        channel_id: q.channel_id,
        status,
    };
    let client = state.db.get().await?;
    let items = orders::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |o| o.id)))
}

/// `GET /api/orders/{id}`.
#[utoipa::path(get, path = "/orders/{id}", operation_id = "getOrder", tag = "orders",
    params(("id" = i64, Path, description = "Order id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The order.", body = Order)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Order>, ApiError> {
    let client = state.db.get().await?;
    let order = orders::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    Ok(Json(order))
}

/// `POST /api/orders/{id}/cancel`: pending only (else 409); clears the hold, so its seat is free
/// at once. Takes the lock order, like every change of a hold.
#[utoipa::path(post, path = "/orders/{id}/cancel", operation_id = "cancelOrder", tag = "orders",
    params(("id" = i64, Path, description = "Order id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The cancelled order.", body = Order),
        (status = 409, description = "The order is not pending, or this Idempotency-Key is in \
            flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn cancel(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let before = orders::get(tx, id).await?;
        let order = orders::cancel(tx, id).await?;
        let entry = Entry::new("order.cancel", Some(id))
            .before(&before)
            .after(&order);
        write.staff.audit(tx, entry).await?;
        tracing::info!(order_id = id, staff_id = write.staff.id, "order cancelled");
        Ok((StatusCode::OK, to_value(&order)?))
    })
}

/// `POST /api/orders/{id}/checkout` → 200 `{"order": Order}`: the buyer is about to pay. The
/// same decision as an approved Telegram `pre_checkout_query` ([`seats::checkout_locked`]):
/// a free seat is held once for `HOLD_SECS`; refusals are 409 (not pending, hold expired,
/// channel full, the subscriber's hold cooldown or daily cap) or 422 (channel inactive).
#[utoipa::path(post, path = "/orders/{id}/checkout", operation_id = "checkoutOrder", tag = "orders",
    params(("id" = i64, Path, description = "Order id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Approved: the order, holding a seat of a seat-limited \
            channel until `hold_until`.", body = OrderEnvelope),
        (status = 409, description = "The order is not pending, its hold expired, the channel is \
            full, the subscriber may not hold a seat again yet (`HOLD_COOLDOWN_SECS`, \
            `HOLDS_PER_DAY`), or this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The channel is inactive, or an Idempotency-Key reused for \
            another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn checkout(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    let rules = state.config.hold_rules();
    crate::idempotent!(state, write, |tx| {
        let order = seats::checkout_locked(tx, id, rules).await??;
        let entry = Entry::new("order.checkout", Some(id)).after(&order);
        write.staff.audit(tx, entry).await?;
        tracing::info!(
            order_id = id,
            hold_until = ?order.hold_until,
            staff_id = write.staff.id,
            "checkout approved"
        );
        Ok((StatusCode::OK, json!(OrderEnvelope { order })))
    })
}

/// `POST /api/orders/{id}/claim` → 200 `{"order": Order, "memberships": [Membership]}`: grants a
/// free order — a trial plan's, or one a 100 % code made free — through the payment's locked
/// path ([`trials::claim`]): every channel of its plan for the plan's period, once. 409 with the
/// reason when it cannot be claimed (not free, not pending, a trial already used or a former
/// member, a channel full, the plan or a channel inactive, lifetime access already); nothing is
/// written then.
#[utoipa::path(post, path = "/orders/{id}/claim", operation_id = "claimOrder", tag = "orders",
    params(("id" = i64, Path, description = "Order id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Claimed: the order (paid now) and the membership of every \
            channel of its plan, in ascending channel id.", body = ClaimEnvelope),
        (status = 404, description = "No such order.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The order is not free or not pending, the subscriber had a \
            trial of or was a member of a channel of the plan, a channel is full, the plan or a \
            channel is inactive, the subscriber has lifetime access to every channel already, or \
            this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn claim(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let memberships = trials::claim(tx, id)
            .await?
            .map_err(|refusal| ApiError::Conflict(refusal.detail().into()))?;
        let order = orders::get(tx, id)
            .await?
            .ok_or_else(|| ApiError::internal("a claimed order vanished"))?;
        tracing::info!(order_id = id, staff_id = write.staff.id, "order claimed");
        let answer = json!(ClaimEnvelope { order, memberships });
        let entry = Entry::new("order.claim", Some(id)).after(&answer);
        write.staff.audit(tx, entry).await?;
        Ok((StatusCode::OK, answer))
    })
}
