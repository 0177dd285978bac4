//! `/api/effects`: the Telegram effects outbox as staff see it — what is queued, what was done,
//! and the dead letters (`status=failed`) with Telegram's reason, which staff can send back to
//! the queue once the cause is fixed (bot made admin, user unblocked the bot, Telegram back after
//! an outage), one by one or all those matching a filter. The outbox is [`crate::outbox::effects`].

use axum::{
    Json,
    extract::State,
    http::{StatusCode, Uri},
    response::Response,
};
use serde::Deserialize;
use serde_json::json;

use super::{
    ApiQuery, Errors, Page, Paging, PathId,
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
    schemas::{Problem, Retried},
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    outbox::effects::{self, Effect, Kind, RetryRefusal, Status},
    staff::audit_log::Entry,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListEffects {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    /// `failed`: the dead letters.
    #[param(value_type = Option<crate::outbox::effects::Status>)]
    status: Option<String>,
    #[param(value_type = Option<Kind>)]
    kind: Option<String>,
    membership_id: Option<i64>,
    payment_id: Option<i64>,
}

/// `GET /api/effects` (filters `status`, `kind`, `membership_id`, `payment_id`).
#[utoipa::path(get, path = "/effects", operation_id = "listEffects", tag = "effects",
    params(ListEffects),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of effects, by id.", body = Page<Effect>),
        (status = 422, description = "`limit` out of range, or an unknown `status` or `kind`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListEffects>,
) -> Result<Json<Page<Effect>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let mut e = Errors::default();
    let filter = effects::Filter {
        status: e.state::<Status>("status", q.status.as_deref()),
        kind: kind(&mut e, q.kind.as_deref()),
        membership_id: q.membership_id,
        payment_id: q.payment_id,
    };
    e.finish()?;
    let client = state.db.get().await?;
    let items = effects::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |e| e.id)))
}

/// `GET /api/effects/{id}`.
#[utoipa::path(get, path = "/effects/{id}", operation_id = "getEffect", tag = "effects",
    params(("id" = i64, Path, description = "Effect id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The effect.", body = Effect)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Effect>, ApiError> {
    let client = state.db.get().await?;
    let effect = effects::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("effect"))?;
    Ok(Json(effect))
}

/// `POST /api/effects/{id}/retry`: a dead letter (`failed`) goes back to the queue with a fresh
/// retry budget (no attempts, no first failure), due now; a `pending` one is made due now. A
/// refund's payment goes back from `refund_failed` to `refund_pending` in the same transaction,
/// so the worker refunds it instead of skipping it. 409 for a `done` effect, and for one a
/// worker is performing at this moment (leased). Answers the effect.
#[utoipa::path(post, path = "/effects/{id}/retry", operation_id = "retryEffect", tag = "effects",
    params(("id" = i64, Path, description = "Effect id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The effect, back in the queue and due now.", body = Effect),
        (status = 409, description = "The effect is done, a worker is performing it right now, \
            or this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn retry(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let effect = match effects::retry(tx, id).await? {
            None => return Err(ApiError::NotFound("effect")),
            Some(Err(RetryRefusal::Done)) => {
                return Err(ApiError::Conflict(
                    "the effect is done; there is nothing to retry".into(),
                ));
            }
            Some(Err(RetryRefusal::InFlight)) => {
                return Err(ApiError::Conflict(
                    "the effect is being performed right now; look again shortly".into(),
                ));
            }
            Some(Ok(effect)) => effect,
        };
        tracing::info!(
            effect_id = id,
            staff_id = write.staff.id,
            "effect sent back to the queue by staff"
        );
        let entry = Entry::new("effect.retry", Some(id)).after(&effect);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::OK,
            serde_json::to_value(effect).map_err(ApiError::internal)?,
        ))
    })
}

/// The filters of `POST /api/effects/retry`: those of the list; `status` may only be `failed`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RetryFilter {
    /// Only `failed` (the default: dead letters are what is retried).
    #[param(pattern = "^failed$")]
    status: Option<String>,
    #[param(value_type = Option<Kind>)]
    kind: Option<String>,
    membership_id: Option<i64>,
    payment_id: Option<i64>,
}

/// `POST /api/effects/retry?kind=…&membership_id=…&payment_id=…`: every dead letter matching
/// the filters goes back to the queue as with `POST /api/effects/{id}/retry` (due now, fresh
/// budget, a refund's payment back to `refund_pending`), in one transaction. Answers
/// `{"retried": <count>}`.
#[utoipa::path(post, path = "/effects/retry", operation_id = "retryDeadLetters", tag = "effects",
    params(RetryFilter, super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "How many dead letters went back to the queue.", body = Retried),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A `status` other than `failed`, an unknown `kind`, or an \
            Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn retry_all(
    State(state): State<AppState>,
    uri: Uri,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    // Parsed after authentication (the extractors above), so a stranger learns nothing.
    let q: RetryFilter = serde_urlencoded::from_str(uri.query().unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(format!("invalid query string: {e}")))?;
    let mut e = Errors::default();
    if let Some(s) = &q.status
        && Status::parse(s) != Some(Status::Failed)
    {
        e.add("status", "only dead letters (failed) are retried");
    }
    let filter = effects::Filter {
        status: Some(Status::Failed),
        kind: kind(&mut e, q.kind.as_deref()),
        membership_id: q.membership_id,
        payment_id: q.payment_id,
    };
    e.finish()?;
    crate::idempotent!(state, write, |tx| {
        let retried = effects::retry_all(tx, &filter).await?;
        tracing::info!(
            retried,
            staff_id = write.staff.id,
            kind = ?filter.kind.map(Kind::as_str),
            membership_id = ?filter.membership_id,
            payment_id = ?filter.payment_id,
            "dead letters sent back to the queue by staff"
        );
        let entry = Entry::new("effect.retry_all", None).after(json!({
            "retried": retried,
            "kind": filter.kind.map(Kind::as_str),
            "membership_id": filter.membership_id,
            "payment_id": filter.payment_id,
        }));
        write.staff.audit(tx, entry).await?;
        Ok((StatusCode::OK, json!(Retried { retried })))
    })
}

/// The `kind` filter: one of the effect kinds, or a 422 listing them.
fn kind(e: &mut Errors, kind: Option<&str>) -> Option<Kind> {
    let k = kind?;
    let parsed = Kind::parse(k);
    if parsed.is_none() {
        let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        e.add("kind", format!("must be one of {}", all.join(", ")));
    }
    parsed
}
