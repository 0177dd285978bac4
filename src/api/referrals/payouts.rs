//! `/api/payouts`: paying an affiliate the payable lines of one currency, netted, and the
//! payouts made.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;

use super::super::{ApiQuery, Errors, Page, Paging, PathId};
use super::super::{auth::Staff, idempotency::StaffWrite, schemas::Problem};
use crate::{
    app::state::AppState,
    common::{currency, error::ApiError},
    referrals::payouts::{self, Payout},
    staff::audit_log::Entry,
};

/// A payout to make.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"affiliate_id": 3, "currency": "UAH"}))]
pub struct PayoutInput {
    #[schema(required = true, nullable = false)]
    affiliate_id: Option<i32>,
    /// The currency of the lines to pay.
    #[schema(
        required = true,
        nullable = false,
        pattern = "^[A-Z]{3}$",
        example = "UAH"
    )]
    currency: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListPayouts {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    affiliate_id: Option<i32>,
    #[param(pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
}

const CURRENCY_RULE: &str =
    "must be an ISO 4217 code (e.g. UAH), XTR, or a crypto asset of Crypto Pay (e.g. USDT)";

/// `POST /api/payouts`: marks every payable line of the affiliate in that currency paid (the
/// `pending` lines past their hold, negative `reversal` lines netted) and records the payout.
#[utoipa::path(post, path = "/payouts", operation_id = "createPayout", tag = "referrals",
    request_body = PayoutInput,
    params(super::super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Recorded: the net paid and how many lines it paid.",
            body = Payout),
        (status = 404, description = "No such affiliate.", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Nothing to pay: no payable line in this currency, or \
            their net is zero or less (the detail names it; it carries into the next payout); \
            or this Idempotency-Key is in flight.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field missing, a malformed currency, or an \
            Idempotency-Key reused for another request.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<PayoutInput>,
) -> Result<Response, ApiError> {
    let mut e = Errors::default();
    let affiliate_id = e.required("affiliate_id", write.body.affiliate_id);
    let currency = e.required("currency", write.body.currency.clone());
    if let Some(c) = &currency
        && !(currency::is_valid_code(c) || currency::is_crypto_asset(c))
    {
        e.add("currency", CURRENCY_RULE);
    }
    e.finish()?;
    let (affiliate_id, currency) = (
        affiliate_id.unwrap_or_default(),
        currency.unwrap_or_default(),
    );
    let staff_id = i32::try_from(write.staff.id).ok();
    crate::idempotent!(state, write, |tx| {
        let p = payouts::record(tx, affiliate_id, &currency, staff_id).await?;
        let entry = Entry::new("payout.create", Some(p.id)).after(&p);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(p).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/payouts` (filters `affiliate_id`, `currency`).
#[utoipa::path(get, path = "/payouts", operation_id = "listPayouts", tag = "referrals",
    params(ListPayouts),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of payouts, by id.", body = Page<Payout>),
        (status = 422, description = "`limit` out of range or a malformed `currency`.",
            body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListPayouts>,
) -> Result<Json<Page<Payout>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    if let Some(c) = &q.currency
        && !(currency::is_valid_code(c) || currency::is_crypto_asset(c))
    {
        return Err(ApiError::field("currency", CURRENCY_RULE));
    }
    let filter = payouts::Filter {
        affiliate_id: q.affiliate_id,
        currency: q.currency,
    };
    let client = state.db.get().await?;
    let items = payouts::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |p| p.id)))
}

/// `GET /api/payouts/{id}`.
#[utoipa::path(get, path = "/payouts/{id}", operation_id = "getPayout", tag = "referrals",
    params(("id" = i64, Path, description = "Payout id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The payout; its lines are \
        `GET /api/commissions?payout_id=`.", body = Payout)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Payout>, ApiError> {
    let client = state.db.get().await?;
    let p = payouts::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("payout"))?;
    Ok(Json(p))
}
