//! `/api/memberships`: read, manual grant, staff corrections, delete, and the event history
//! ([`crate::access::memberships`] owns the rows).
//!
//! Grant, PATCH and DELETE go through the same lock order as a payment (advisory pair lock →
//! channel row for a seat-limited channel → membership row), so staff work can never interleave
//! badly with a payment or the sweep on the same membership.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Deserialize;

use super::{
    ApiJson, ApiQuery, Errors, Page, Paging, PathId, auth::Staff, exports, idempotency::StaffWrite,
    not_null, nullable, schemas::Problem, state_filter,
};
use crate::{
    access::{
        memberships::{self, Cause, Event, Expiry, Membership, Status},
        subscribers,
    },
    app::state::AppState,
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db,
    orders::seats,
    staff::audit_log::Entry,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListMemberships {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    #[param(value_type = Option<Status>)]
    status: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListEvents {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
}

/// A grant or extension by hand: `expires_at = GREATEST(current, now) + days`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"subscriber_id": 1, "channel_id": 1, "days": 30}))]
pub struct Grant {
    #[schema(required = true, nullable = false)]
    subscriber_id: Option<i32>,
    #[schema(required = true, nullable = false)]
    channel_id: Option<i32>,
    #[schema(required = true, nullable = false, minimum = 1, maximum = 3660)]
    days: Option<i32>,
}

/// A staff correction: `expires_at` and/or `status`, written exactly (`"expires_at":
/// "infinity"` makes it lifetime access).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"expires_at": "2025-02-01T00:00:00Z", "status": "active"}))]
pub struct PatchMembership {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Expiry)]
    expires_at: Option<Option<Expiry>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Status)]
    status: Option<Option<String>>,
}

/// `GET /api/memberships`.
#[utoipa::path(get, path = "/memberships", operation_id = "listMemberships", tag = "memberships",
    params(ListMemberships),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of memberships, by id.", body = Page<Membership>),
        (status = 422, description = "`limit` out of range or an unknown `status`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListMemberships>,
) -> Result<Json<Page<Membership>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = memberships::Filter {
        subscriber_id: q.subscriber_id,
        channel_id: q.channel_id,
        status: state_filter::<Status>("status", q.status.as_deref())?,
        ..memberships::Filter::default()
    };
    let client = state.db.get().await?;
    let items = memberships::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |m| m.id)))
}

/// `GET /api/memberships.csv`: the filters of the list, plus `from`/`to`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportMemberships {
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    /// Created at or after this time (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Created before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
}

/// The columns of `memberships.csv`, as [`Membership`] serializes.
const CSV_COLUMNS: &[&str] = &[
    "id",
    "subscriber_id",
    "channel_id",
    "status",
    "expires_at",
    "created_at",
    "updated_at",
];

/// `GET /api/memberships.csv`: every membership the list's filters (and `from`/`to`) select.
#[utoipa::path(get, path = "/memberships.csv", operation_id = "exportMemberships", tag = "memberships",
    params(ExportMemberships),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "RFC 4180 CSV with a header row, streamed: the columns of \
            a Membership (`expires_at` is `infinity` for lifetime access).", body = String, content_type = "text/csv"),
        (status = 422, description = "An unknown `status`, or `from` after `to`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ExportMemberships>,
) -> Result<Response, ApiError> {
    exports::check_window(q.from, q.to)?;
    let filter = memberships::Filter {
        subscriber_id: q.subscriber_id,
        channel_id: q.channel_id,
        status: state_filter::<Status>("status", q.status.as_deref())?,
        from: q.from,
        to: q.to,
    };
    let pool = state.db.clone();
    exports::csv(
        "memberships.csv",
        CSV_COLUMNS,
        move |after| {
            let (pool, filter) = (pool.clone(), filter.clone());
            async move {
                memberships::list(&pool.get().await?, &filter, after, exports::PAGE).await
            }
        },
        |m: &Membership| m.id,
    )
    .await
}

/// `GET /api/memberships/{id}`.
#[utoipa::path(get, path = "/memberships/{id}", operation_id = "getMembership", tag = "memberships",
    params(("id" = i64, Path, description = "Membership id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The membership.", body = Membership)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Membership>, ApiError> {
    let client = state.db.get().await?;
    let m = memberships::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    Ok(Json(m))
}

/// `GET /api/memberships/{id}/events`.
#[utoipa::path(get, path = "/memberships/{id}/events", operation_id = "listMembershipEvents",
    tag = "memberships",
    params(("id" = i64, Path, description = "Membership id."), ListEvents),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of the membership's events, oldest first.",
            body = Page<Event>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn events(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
    ApiQuery(q): ApiQuery<ListEvents>,
) -> Result<Json<Page<Event>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    memberships::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    let items = memberships::events(&client, id, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |e| e.id)))
}

/// `POST /api/memberships`: grant or extend by hand (cause `staff`):
/// `expires_at = GREATEST(current, now) + days`, `status = active`. 201 when created, 200 when
/// extended. Staff grants are deliberate and do not check seats.
#[utoipa::path(post, path = "/memberships", operation_id = "grantMembership", tag = "memberships",
    request_body = Grant,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Extended.", body = Membership),
        (status = 201, description = "Created.", body = Membership),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, no such subscriber or channel, or an \
            Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn grant(
    State(state): State<AppState>,
    write: StaffWrite<Grant>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let subscriber_id = e.required("subscriber_id", b.subscriber_id);
    let channel_id = e.required("channel_id", b.channel_id);
    if let Some(d) = e.required("days", b.days)
        && !(1..=3660).contains(&d)
    {
        e.add("days", "must be from 1 to 3660");
    }
    e.finish()?;
    let (subscriber_id, channel_id, days) = (
        SubscriberId(subscriber_id.unwrap()),
        ChannelId(channel_id.unwrap()),
        b.days.unwrap(),
    );
    crate::idempotent!(state, write, |tx| {
        db::lock_pair(tx, subscriber_id, channel_id).await?;
        let subscriber = subscribers::exists(tx, subscriber_id.0).await?;
        let channel = seats::lock_channel_terms(tx, channel_id.0).await?.is_some();
        let mut e = Errors::default();
        if !subscriber {
            e.add("subscriber_id", "no such subscriber");
        }
        if !channel {
            e.add("channel_id", "no such channel");
        }
        e.finish()?;
        let before = memberships::lock(tx, subscriber_id, channel_id).await?;
        let (m, created) =
            memberships::extend(tx, subscriber_id, channel_id, days, Cause::Staff).await?;
        let entry = Entry::new("membership.grant", Some(m.id))
            .before(&before)
            .after(serde_json::json!({"days": days, "membership": &m}));
        write.staff.audit(tx, entry).await?;
        tracing::info!(
            membership_id = m.id,
            staff_id = write.staff.id,
            days,
            "membership granted by staff"
        );
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, serde_json::to_value(m).map_err(ApiError::internal)?))
    })
}

/// Takes the lock order down to membership `id`'s channel: its pair (read without a lock
/// first: a pair never changes), the pair's advisory lock, the channel's terms. 404 when there
/// is no such membership.
async fn lock_to_channel(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<(SubscriberId, ChannelId), ApiError> {
    let (subscriber_id, channel_id) = memberships::pair_of(tx, id)
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    db::lock_pair(tx, subscriber_id, channel_id).await?;
    seats::lock_channel_terms(tx, channel_id.0).await?;
    Ok((subscriber_id, channel_id))
}

/// `PATCH /api/memberships/{id}`: staff corrections of `expires_at` and/or `status`, written
/// exactly, recorded as one `staff` event; no seat check, no extension.
#[utoipa::path(patch, path = "/memberships/{id}", operation_id = "patchMembership", tag = "memberships",
    params(("id" = i64, Path, description = "Membership id.")),
    request_body = PatchMembership,
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The membership as corrected.", body = Membership),
        (status = 422, description = "An unknown `status`, or neither field given.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(b): ApiJson<PatchMembership>,
) -> Result<Json<Membership>, ApiError> {
    // An explicit null is refused, as in every PATCH (it would otherwise read as "leave alone").
    let mut e = Errors::default();
    let expires_at = not_null(&mut e, "expires_at", b.expires_at);
    let status_text = not_null(&mut e, "status", b.status);
    e.finish()?;
    let status = state_filter::<Status>("status", status_text.as_deref())?;
    if status.is_none() && expires_at.is_none() {
        return Err(ApiError::Unprocessable(
            "give expires_at and/or status to change".into(),
        ));
    }
    crate::transaction!(state.db, |tx| {
        let (subscriber_id, channel_id) = lock_to_channel(tx, id).await?;
        // The pair cannot change, but the row may have been deleted while we waited.
        let before = memberships::lock(tx, subscriber_id, channel_id)
            .await?
            .filter(|m| m.id == id)
            .ok_or(ApiError::NotFound("membership"))?;
        let after = memberships::write_correction(tx, &before, expires_at, status).await?;
        let entry = Entry::new("membership.update", Some(id))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        tracing::info!(membership_id = id, staff_id = staff.id, status = %after.status, "membership corrected by staff");
        Ok(Json(after))
    })
}

/// `DELETE /api/memberships/{id}`: 204. Its events go with it; payments stay. A member who
/// still held access (active or grace) is taken out of the chat: a revoke is enqueued in the
/// same transaction ([`memberships::delete`]).
#[utoipa::path(delete, path = "/memberships/{id}", operation_id = "deleteMembership", tag = "memberships",
    params(("id" = i64, Path, description = "Membership id.")),
    security(("staff_jwt" = [])),
    responses((status = 204, description = "Deleted; a live member is taken out of the chat.")),
)]
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        lock_to_channel(tx, id).await?;
        let before = memberships::get(tx, id).await?;
        if !memberships::delete(tx, id).await? {
            return Err(ApiError::NotFound("membership"));
        }
        let entry = Entry::new("membership.delete", Some(id)).before(&before);
        staff.audit(tx, entry).await?;
        tracing::info!(
            membership_id = id,
            staff_id = staff.id,
            "membership deleted by staff"
        );
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
