//! `GET|PATCH /api/referral-program` (the one program: on or off, attribution, window, hold,
//! rates, buyer links and reward days) and `GET|PUT|DELETE /api/plans/{id}/referral` (a plan's
//! own rates in place of the program's).

use axum::{Json, extract::State, http::StatusCode};
use serde::Deserialize;

use super::super::{ApiJson, Errors, PathId, not_null, nullable};
use super::super::{auth::Staff, schemas::Problem};
use crate::{
    app::state::AppState,
    catalog::plans,
    common::error::ApiError,
    referrals::program::{self, Attribution, PlanRates, Program, Rates},
    staff::audit_log::Entry,
};

/// A change of the program: any field; a field left out keeps its value. `null` clears
/// `buyer_reward_days` and `max_reward_days_per_month` and is refused for the others.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"enabled": true, "attribution": "last_click", "window_days": 30,
    "hold_days": 14, "first_percent": 30, "renewal_percent": 10, "renewal_months": 12}))]
#[schema(as = ReferralProgramPatch)]
pub struct ProgramPatch {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    enabled: Option<Option<bool>>,
    /// `first_click` (the first click within the window holds) or `last_click`.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, pattern = "^(first_click|last_click)$")]
    attribution: Option<Option<String>>,
    /// 1..365: how long an attribution lasts for a first purchase.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 1, maximum = 365)]
    window_days: Option<Option<i32>>,
    /// 0..180: how long a line stays `pending` before it is `payable`.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 0, maximum = 180)]
    hold_days: Option<Option<i32>>,
    /// 0..90: percent of a first purchase's net amount.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 0, maximum = 90)]
    first_percent: Option<Option<i32>>,
    /// 0..90: percent of a renewal's net amount.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 0, maximum = 90)]
    renewal_percent: Option<Option<i32>>,
    /// 0..120: how many months after the attribution renewals earn.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i32, minimum = 0, maximum = 120)]
    renewal_months: Option<Option<i32>>,
    /// Whether a buyer may ask the bot `/referral` for their own link.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    buyer_links: Option<Option<bool>>,
    /// 1..365 days a buyer-referrer earns per referred first purchase; null: none.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 365)]
    buyer_reward_days: Option<Option<i32>>,
    /// 1..3660: the most reward days one referrer earns in a calendar month; null: no cap.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i32>, minimum = 1, maximum = 3660)]
    max_reward_days_per_month: Option<Option<i32>>,
}

/// Records "must be from `lo` to `hi`" for a present value out of range.
fn range(e: &mut Errors, field: &str, v: Option<i32>, lo: i32, hi: i32) {
    if let Some(v) = v
        && !(lo..=hi).contains(&v)
    {
        e.add(field, format!("must be from {lo} to {hi}"));
    }
}

impl ProgramPatch {
    fn change(self) -> Result<program::Change, ApiError> {
        let mut e = Errors::default();
        let attribution = not_null(&mut e, "attribution", self.attribution);
        let attribution = e.state::<Attribution>("attribution", attribution.as_deref());
        let c = program::Change {
            enabled: not_null(&mut e, "enabled", self.enabled),
            attribution,
            window_days: not_null(&mut e, "window_days", self.window_days),
            hold_days: not_null(&mut e, "hold_days", self.hold_days),
            first_percent: not_null(&mut e, "first_percent", self.first_percent),
            renewal_percent: not_null(&mut e, "renewal_percent", self.renewal_percent),
            renewal_months: not_null(&mut e, "renewal_months", self.renewal_months),
            buyer_links: not_null(&mut e, "buyer_links", self.buyer_links),
            buyer_reward_days: self.buyer_reward_days,
            max_reward_days_per_month: self.max_reward_days_per_month,
        };
        range(&mut e, "window_days", c.window_days, 1, 365);
        range(&mut e, "hold_days", c.hold_days, 0, 180);
        range(&mut e, "first_percent", c.first_percent, 0, 90);
        range(&mut e, "renewal_percent", c.renewal_percent, 0, 90);
        range(&mut e, "renewal_months", c.renewal_months, 0, 120);
        let days = c.buyer_reward_days.flatten();
        range(&mut e, "buyer_reward_days", days, 1, 365);
        let cap = c.max_reward_days_per_month.flatten();
        range(&mut e, "max_reward_days_per_month", cap, 1, 3660);
        e.finish()?;
        Ok(c)
    }
}

/// `GET /api/referral-program`.
#[utoipa::path(get, path = "/referral-program", operation_id = "getReferralProgram",
    tag = "referrals",
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The program (off until switched on).",
        body = Program)),
)]
pub async fn get(State(state): State<AppState>, _: Staff) -> Result<Json<Program>, ApiError> {
    let client = state.db.get().await?;
    Ok(Json(program::get(&client).await?))
}

/// `PATCH /api/referral-program`: the rules apply to what happens from now on; lines already
/// written keep their percent and `payable_at`.
#[utoipa::path(patch, path = "/referral-program", operation_id = "patchReferralProgram",
    tag = "referrals",
    request_body(content = Option<ProgramPatch>, description = "The fields to change; none (or \
        an empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The program as changed.", body = Program),
        (status = 422, description = "A value out of range, an unknown `attribution`, or \
            `null` for a field other than `buyer_reward_days` and \
            `max_reward_days_per_month`.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    ApiJson(patch): ApiJson<ProgramPatch>,
) -> Result<Json<Program>, ApiError> {
    let change = patch.change()?;
    crate::transaction!(state.db, |tx| {
        let before = program::lock(tx).await?;
        let after = program::change(tx, &change).await?;
        let entry = Entry::new("referral_program.update", None)
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}

/// A plan's own rates.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"first_percent": 30, "renewal_percent": 10}))]
#[schema(as = ReferralRatesInput)]
pub struct RatesInput {
    /// 0..90: percent of a first purchase's net amount.
    #[schema(required = true, nullable = false, minimum = 0, maximum = 90)]
    first_percent: Option<i32>,
    /// 0..90: percent of a renewal's net amount.
    #[schema(required = true, nullable = false, minimum = 0, maximum = 90)]
    renewal_percent: Option<i32>,
}

impl RatesInput {
    fn rates(&self) -> Result<Rates, ApiError> {
        let mut e = Errors::default();
        let first = e.required("first_percent", self.first_percent);
        let renewal = e.required("renewal_percent", self.renewal_percent);
        range(&mut e, "first_percent", first, 0, 90);
        range(&mut e, "renewal_percent", renewal, 0, 90);
        e.finish()?;
        Ok(Rates {
            first_percent: first.unwrap_or_default(),
            renewal_percent: renewal.unwrap_or_default(),
        })
    }
}

/// Plan `id`, or a 404.
async fn plan_exists(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<(), ApiError> {
    plans::get(client, id)
        .await?
        .map(|_| ())
        .ok_or(ApiError::NotFound("plan"))
}

/// `GET /api/plans/{id}/referral`.
#[utoipa::path(get, path = "/plans/{id}/referral", operation_id = "getPlanReferralRates",
    tag = "referrals",
    params(("id" = i64, Path, description = "Plan id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The rates the plan earns at now: its own \
        (`source: plan`) or the program's (`source: program`).", body = PlanRates)),
)]
pub async fn get_plan(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<PlanRates>, ApiError> {
    let client = state.db.get().await?;
    plan_exists(&client, id).await?;
    Ok(Json(program::rates_of_plan(&client, id).await?))
}

/// `PUT /api/plans/{id}/referral`: the plan's own rates, in place of the program's, for the
/// lines written from now on.
#[utoipa::path(put, path = "/plans/{id}/referral", operation_id = "putPlanReferralRates",
    tag = "referrals",
    params(("id" = i64, Path, description = "Plan id.")),
    request_body = RatesInput,
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The plan's rates now (`source: plan`).", body = PlanRates),
        (status = 422, description = "A percent missing or out of 0..90.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn put_plan(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(input): ApiJson<RatesInput>,
) -> Result<Json<PlanRates>, ApiError> {
    let rates = input.rates()?;
    crate::transaction!(state.db, |tx| {
        plan_exists(tx, id).await?;
        let before = program::rates_of_plan(tx, id).await?;
        let after = program::set_plan_rates(tx, id, rates).await?;
        let entry = Entry::new("plan_referral.update", Some(id))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}

/// `DELETE /api/plans/{id}/referral`: the plan earns at the program's rates again (204,
/// whether or not it had its own).
#[utoipa::path(delete, path = "/plans/{id}/referral", operation_id = "deletePlanReferralRates",
    tag = "referrals",
    params(("id" = i64, Path, description = "Plan id.")),
    security(("staff_jwt" = [])),
    responses((status = 204, description = "The plan's own rates are gone (or it had none).")),
)]
pub async fn delete_plan(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
) -> Result<StatusCode, ApiError> {
    crate::transaction!(state.db, |tx| {
        plan_exists(tx, id).await?;
        let before = program::rates_of_plan(tx, id).await?;
        let after = program::remove_plan_rates(tx, id).await?;
        let entry = Entry::new("plan_referral.delete", Some(id))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await
    })?;
    Ok(StatusCode::NO_CONTENT)
}
