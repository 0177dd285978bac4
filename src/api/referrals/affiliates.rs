//! `/api/affiliates`: partners and buyers who bring buyers, each with a code and its link
//! (`link`, read-only), and what each brought (`GET /api/affiliates/{id}/summary`). No DELETE:
//! an affiliate is deactivated (`active: false`), never deleted.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;

use super::super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId, chars, not_null, nullable};
use super::super::{auth::Staff, idempotency::StaffWrite, schemas::Problem};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    referrals::affiliates::{self, Affiliate, CODE_RULE, NAME_MAX, Summary},
    staff::audit_log::Entry,
};

/// A new affiliate.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "Crypto Daily", "code": "CRYPTODAILY"}))]
pub struct AffiliateInput {
    /// 1..200 characters.
    #[schema(required = true, nullable = false, min_length = 1, max_length = 200)]
    name: Option<String>,
    /// The buyer this affiliate is (each buyer at most one affiliate); absent or null: an
    /// outside partner.
    #[schema(value_type = Option<i32>)]
    subscriber_id: Option<i32>,
    /// 3..32 of `A-Z 0-9 _`; lower case is accepted and stored upper case. Unique. Absent or
    /// null: eight random upper-case letters and digits.
    #[schema(value_type = Option<String>, min_length = 3, max_length = 32,
        pattern = "^[A-Za-z0-9_]{3,32}$")]
    code: Option<String>,
}

/// A change of an affiliate: any field; a field left out keeps its value. The code is fixed
/// (links are out there): make another affiliate for another code.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"active": false}))]
pub struct AffiliatePatch {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, min_length = 1, max_length = 200)]
    name: Option<Option<String>>,
    /// `false`: its code is ignored from now on (no click, no attribution); its lines stay and
    /// are paid as usual.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    active: Option<Option<bool>>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListAffiliates {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    active: Option<bool>,
    /// The affiliate that is this buyer.
    subscriber_id: Option<i32>,
    /// One code, in any case.
    code: Option<String>,
}

/// Checks a present `name`.
fn check_name(e: &mut Errors, name: Option<&str>) {
    if let Some(n) = name {
        if n.contains('\0') {
            e.add("name", "must not contain NUL characters");
        } else if n.trim().is_empty() {
            e.add("name", "must not be blank");
        } else if chars(n) > NAME_MAX {
            e.add("name", format!("must be 1 to {NAME_MAX} characters"));
        }
    }
}

impl AffiliateInput {
    fn fields(&self) -> Result<affiliates::New, ApiError> {
        let mut e = Errors::default();
        e.required("name", self.name.as_ref());
        check_name(&mut e, self.name.as_deref());
        let code = self.code.as_deref().and_then(|c| {
            let normal = affiliates::normalize_code(c);
            if normal.is_none() {
                e.add("code", CODE_RULE);
            }
            normal
        });
        e.finish()?;
        Ok(affiliates::New {
            name: self.name.clone().unwrap_or_default(),
            subscriber_id: self.subscriber_id,
            code,
        })
    }
}

fn with_link(state: &AppState, a: Affiliate) -> Affiliate {
    a.with_link(state.config.telegram_bot_username.as_deref())
}

/// A path id that no affiliate can have (beyond `integer`) is a 404.
fn affiliate_id(id: i64) -> Result<i32, ApiError> {
    i32::try_from(id).map_err(|_| ApiError::NotFound("affiliate"))
}

/// `POST /api/affiliates`.
#[utoipa::path(post, path = "/affiliates", operation_id = "createAffiliate", tag = "referrals",
    request_body = AffiliateInput,
    params(super::super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created, with its code (drawn when none was given) and \
            link.", body = Affiliate),
        (status = 409, description = "An affiliate with this code exists, or this \
            Idempotency-Key is in flight.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields: a name out of range, a code not of \
            `A-Z 0-9 _` (3..32), a subscriber that does not exist or is already an affiliate; \
            or an Idempotency-Key reused for another request.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<AffiliateInput>,
) -> Result<Response, ApiError> {
    let new = write.body.fields()?;
    crate::idempotent!(state, write, |tx| {
        let a = with_link(&state, affiliates::create(tx, &new).await?);
        let entry = Entry::new("affiliate.create", Some(i64::from(a.id))).after(&a);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(a).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/affiliates` (filters `active`, `subscriber_id`, `code`).
#[utoipa::path(get, path = "/affiliates", operation_id = "listAffiliates", tag = "referrals",
    params(ListAffiliates),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of affiliates, by id.", body = Page<Affiliate>),
        (status = 422, description = "`limit` out of range.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListAffiliates>,
) -> Result<Json<Page<Affiliate>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = affiliates::Filter {
        active: q.active,
        subscriber_id: q.subscriber_id,
        // A text that is no code matches none; upper-cased it still matches nothing.
        code: q
            .code
            .map(|c| affiliates::normalize_code(&c).unwrap_or_else(|| c.to_ascii_uppercase())),
    };
    let client = state.db.get().await?;
    let items = affiliates::list(&client, &filter, paging.after, paging.fetch())
        .await?
        .into_iter()
        .map(|a| with_link(&state, a))
        .collect();
    Ok(Json(paging.page(items, |a: &Affiliate| i64::from(a.id))))
}

/// `GET /api/affiliates/{id}`.
#[utoipa::path(get, path = "/affiliates/{id}", operation_id = "getAffiliate", tag = "referrals",
    params(("id" = i64, Path, description = "Affiliate id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The affiliate.", body = Affiliate)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Affiliate>, ApiError> {
    let client = state.db.get().await?;
    let a = affiliates::get(&client, affiliate_id(id)?)
        .await?
        .ok_or(ApiError::NotFound("affiliate"))?;
    Ok(Json(with_link(&state, a)))
}

/// `PATCH /api/affiliates/{id}`: `name` and `active` (deactivate; an affiliate is never
/// deleted).
#[utoipa::path(patch, path = "/affiliates/{id}", operation_id = "patchAffiliate",
    tag = "referrals",
    params(("id" = i64, Path, description = "Affiliate id.")),
    request_body(content = Option<AffiliatePatch>, description = "The fields to change; none \
        (or an empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The affiliate as changed.", body = Affiliate),
        (status = 422, description = "A name out of range, or `null` for a field.",
            body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(patch): ApiJson<AffiliatePatch>,
) -> Result<Json<Affiliate>, ApiError> {
    let id = affiliate_id(id)?;
    let mut e = Errors::default();
    let change = affiliates::Change {
        name: not_null(&mut e, "name", patch.name),
        active: not_null(&mut e, "active", patch.active),
    };
    check_name(&mut e, change.name.as_deref());
    e.finish()?;
    crate::transaction!(state.db, |tx| {
        let before = affiliates::lock(tx, id)
            .await?
            .map(|a| with_link(&state, a));
        let after = with_link(&state, affiliates::change(tx, id, &change).await?);
        let entry = Entry::new("affiliate.update", Some(i64::from(id)))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}

/// `GET /api/affiliates/{id}/summary`.
#[utoipa::path(get, path = "/affiliates/{id}/summary", operation_id = "getAffiliateSummary",
    tag = "referrals",
    params(("id" = i64, Path, description = "Affiliate id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "What the affiliate brought: clicks, attributed \
        and paying buyers, and by currency the revenue, the commission by status, the \
        reversals and the balance a payout would pay now.", body = Summary)),
)]
pub async fn summary(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Summary>, ApiError> {
    let client = state.db.get().await?;
    Ok(Json(affiliates::summary(&client, affiliate_id(id)?).await?))
}
