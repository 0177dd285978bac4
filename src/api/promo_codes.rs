//! `/api/promo-codes`: percent or amount off a plan's price, with a plan list, an expiry, a
//! total and a per-buyer limit, and first-purchase-only codes. No DELETE: deactivate a code
//! with `active: false` (orders keep pointing at it).
//!
//! HTTP only: a handler checks each field's shape, calls one function of
//! [`crate::catalog::promo_codes`] (which owns the rows, the rules between fields, the plan list check
//! and what may change once a code is used) and renders its answer.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId, not_null, nullable};
use super::{auth::Staff, idempotency::StaffWrite, schemas::Problem};
use crate::{
    app::state::AppState,
    catalog::promo_codes::{self, CODE_RULE, PLAN_IDS_MAX, PromoCode},
    common::{currency, error::ApiError},
    staff::audit_log::Entry,
};

/// A new promo code: `percent_off`, or `amount_off_minor` with `currency`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"code": "SPRING25", "percent_off": 25, "max_redemptions": 100,
    "expires_at": "2025-06-01T00:00:00Z"}))]
pub struct PromoCodeInput {
    /// 3..32 of `A-Z 0-9 _ -`; lower case is accepted and stored upper case. Unique in any
    /// case.
    #[schema(
        required = true,
        nullable = false,
        min_length = 3,
        max_length = 32,
        pattern = "^[A-Za-z0-9_-]{3,32}$"
    )]
    code: Option<String>,
    /// 1..100 (100: a free order). Exactly one of `percent_off` and `amount_off_minor`.
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 100)]
    percent_off: Option<i32>,
    /// Minor units off (> 0), with `currency`; never takes a price below one minor unit.
    #[schema(value_type = Option<i64>, minimum = 1)]
    amount_off_minor: Option<i64>,
    /// The currency of `amount_off_minor` (and of every plan it applies to).
    #[schema(value_type = Option<String>, pattern = "^[A-Z]{3}$", example = "UAH")]
    currency: Option<String>,
    /// 1..100 distinct paid plans; null or absent: every paid plan.
    #[schema(value_type = Option<Vec<i64>>, min_items = 1, max_items = 100)]
    plan_ids: Option<Vec<i64>>,
    /// Null or absent: unlimited.
    #[schema(value_type = Option<i32>, minimum = 1)]
    max_redemptions: Option<i32>,
    /// Default 1.
    #[schema(nullable = false, minimum = 1)]
    per_buyer_limit: Option<i32>,
    /// RFC 3339; null or absent: never expires.
    #[schema(value_type = Option<DateTime<Utc>>)]
    expires_at: Option<String>,
    /// Default false.
    #[schema(nullable = false)]
    first_purchase_only: Option<bool>,
    /// Default true.
    #[schema(nullable = false)]
    active: Option<bool>,
}

/// A PATCH body: like [`PromoCodeInput`], every field optional. `null` clears `plan_ids`,
/// `max_redemptions` and `expires_at`; setting `percent_off` clears `amount_off_minor` and
/// `currency` (and the other way round), so a code can switch kinds. `code`, `percent_off`,
/// `amount_off_minor` and `currency` are fixed once an order uses the code (409).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"active": false}))]
pub struct PromoCodePatch {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, min_length = 3, max_length = 32,
        pattern = "^[A-Za-z0-9_-]{3,32}$")]
    code: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 100)]
    percent_off: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>, minimum = 1)]
    amount_off_minor: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, pattern = "^[A-Z]{3}$")]
    currency: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<i64>>, min_items = 1, max_items = 100)]
    plan_ids: Option<Option<Vec<i64>>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1)]
    max_redemptions: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 1)]
    per_buyer_limit: Option<Option<i32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    expires_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    first_purchase_only: Option<Option<bool>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    active: Option<Option<bool>>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListPromoCodes {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    active: Option<bool>,
    /// Codes a new order of this plan could use (by their plans and currency, not their
    /// limits).
    plan_id: Option<i64>,
    /// One code, in any case.
    code: Option<String>,
}

/// Checks the shape of every present field and collects them for the domain. `Some(None)` is a
/// `null` (PATCH only); on create a `null` is the same as absent.
#[allow(clippy::too_many_arguments)]
fn fields(
    e: &mut Errors,
    code: Option<String>,
    percent_off: Option<Option<i32>>,
    amount_off_minor: Option<Option<i64>>,
    currency: Option<Option<String>>,
    plan_ids: Option<Option<Vec<i64>>>,
    max_redemptions: Option<Option<i32>>,
    per_buyer_limit: Option<i32>,
    expires_at: Option<Option<String>>,
    first_purchase_only: Option<bool>,
    active: Option<bool>,
) -> promo_codes::Fields {
    let code = code.and_then(|c| {
        let normal = promo_codes::normalize(&c);
        if normal.is_none() {
            e.add("code", CODE_RULE);
        }
        normal
    });
    if let Some(Some(p)) = percent_off
        && !(1..=100).contains(&p)
    {
        e.add("percent_off", "must be from 1 to 100");
    }
    if let Some(Some(a)) = amount_off_minor
        && a <= 0
    {
        e.add(
            "amount_off_minor",
            "must be a positive integer of minor units",
        );
    }
    if let Some(Some(c)) = &currency
        && !currency::is_price_currency(c)
    {
        e.add("currency", "must be an ISO 4217 code (e.g. UAH) or XTR");
    }
    if let Some(Some(ids)) = &plan_ids {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if !(1..=PLAN_IDS_MAX).contains(&ids.len()) {
            e.add(
                "plan_ids",
                format!("must be null (every paid plan) or 1 to {PLAN_IDS_MAX} plan ids"),
            );
        } else if sorted.len() != ids.len() {
            e.add("plan_ids", "must not repeat a plan");
        }
    }
    if let Some(Some(m)) = max_redemptions
        && m < 1
    {
        e.add("max_redemptions", "must be null (unlimited) or at least 1");
    }
    if let Some(l) = per_buyer_limit
        && l < 1
    {
        e.add("per_buyer_limit", "must be at least 1");
    }
    let expires_at = expires_at.map(|t| {
        t.and_then(|t| match DateTime::parse_from_rfc3339(&t) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(_) => {
                e.add(
                    "expires_at",
                    "must be an RFC 3339 time (e.g. 2025-06-01T00:00:00Z) or null",
                );
                None
            }
        })
    });
    promo_codes::Fields {
        code,
        percent_off,
        amount_off_minor,
        currency,
        plan_ids,
        max_redemptions,
        per_buyer_limit,
        expires_at,
        first_purchase_only,
        active,
    }
}

impl PromoCodeInput {
    fn fields(&self, mut e: Errors) -> Result<promo_codes::Fields, ApiError> {
        e.required("code", self.code.as_ref());
        let f = fields(
            &mut e,
            self.code.clone(),
            self.percent_off.map(Some),
            self.amount_off_minor.map(Some),
            self.currency.clone().map(Some),
            self.plan_ids.clone().map(Some),
            self.max_redemptions.map(Some),
            self.per_buyer_limit,
            self.expires_at.clone().map(Some),
            self.first_purchase_only,
            self.active,
        );
        e.finish()?;
        Ok(f)
    }
}

impl PromoCodePatch {
    fn fields(self) -> Result<promo_codes::Fields, ApiError> {
        let mut e = Errors::default();
        let code = not_null(&mut e, "code", self.code);
        let per_buyer_limit = not_null(&mut e, "per_buyer_limit", self.per_buyer_limit);
        let first_purchase_only = not_null(&mut e, "first_purchase_only", self.first_purchase_only);
        let active = not_null(&mut e, "active", self.active);
        let f = fields(
            &mut e,
            code,
            self.percent_off,
            self.amount_off_minor,
            self.currency,
            self.plan_ids,
            self.max_redemptions,
            per_buyer_limit,
            self.expires_at,
            first_purchase_only,
            active,
        );
        e.finish()?;
        Ok(f)
    }
}

/// `POST /api/promo-codes`.
#[utoipa::path(post, path = "/promo-codes", operation_id = "createPromoCode", tag = "promo codes",
    request_body = PromoCodeInput,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = PromoCode),
        (status = 409, description = "A code with this text exists (in any case), or this \
            Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields: the code's form, both or neither of \
            `percent_off` and `amount_off_minor`, an amount without its currency, a plan that \
            does not exist, is a trial or is sold in another currency; or an Idempotency-Key \
            reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<PromoCodeInput>,
) -> Result<Response, ApiError> {
    let fields = write.body.fields(Errors::default())?;
    crate::idempotent!(state, write, |tx| {
        let c = promo_codes::create(tx, &fields).await?;
        let entry = Entry::new("promo_code.create", Some(c.id)).after(&c);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(c).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/promo-codes` (filters `active`, `plan_id`, `code`).
#[utoipa::path(get, path = "/promo-codes", operation_id = "listPromoCodes", tag = "promo codes",
    params(ListPromoCodes),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of promo codes, by id.", body = Page<PromoCode>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListPromoCodes>,
) -> Result<Json<Page<PromoCode>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = promo_codes::Filter {
        active: q.active,
        plan_id: q.plan_id,
        // A text that is no code matches none; `code` upper-cased still matches nothing.
        code: q
            .code
            .map(|c| promo_codes::normalize(&c).unwrap_or_else(|| c.to_ascii_uppercase())),
    };
    let client = state.db.get().await?;
    let items = promo_codes::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |c| c.id)))
}

/// `GET /api/promo-codes/{id}`.
#[utoipa::path(get, path = "/promo-codes/{id}", operation_id = "getPromoCode", tag = "promo codes",
    params(("id" = i64, Path, description = "Promo code id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The promo code, with its `redemptions` (paid \
        orders) and `held` (pending orders holding a use now).", body = PromoCode)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<PromoCode>, ApiError> {
    let client = state.db.get().await?;
    let c = promo_codes::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("promo code"))?;
    Ok(Json(c))
}

/// `PATCH /api/promo-codes/{id}`: any field; `active: false` deactivates the code (no new
/// order may use it; orders made keep their price). A limit, plan list or expiry binds new uses
/// only. `code`, `percent_off`, `amount_off_minor` and `currency` cannot change once an order
/// uses the code (409).
#[utoipa::path(patch, path = "/promo-codes/{id}", operation_id = "patchPromoCode", tag = "promo codes",
    params(("id" = i64, Path, description = "Promo code id.")),
    request_body(content = Option<PromoCodePatch>, description = "The fields to change; none (or \
        an empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The promo code as changed.", body = PromoCode),
        (status = 409, description = "The new `code` is taken, or the code's text or discount \
            cannot change because an order uses it.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, as on create (`null` for `code`, \
            `per_buyer_limit`, `first_purchase_only` or `active` included).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(patch): ApiJson<PromoCodePatch>,
) -> Result<Json<PromoCode>, ApiError> {
    let fields = patch.fields()?;
    crate::transaction!(state.db, |tx| {
        let before = promo_codes::get(tx, id).await?;
        let after = promo_codes::change(tx, id, &fields).await?;
        let entry = Entry::new("promo_code.update", Some(id))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}
