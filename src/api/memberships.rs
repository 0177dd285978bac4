//! `/api/memberships`: read, manual grant, staff corrections, delete, and the event history.
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
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId};
use crate::{
    auth::Staff,
    db,
    error::ApiError,
    idempotency::StaffWrite,
    memberships::{self, COLUMNS, Cause, Membership},
    payments::seats,
    state::AppState,
};

const STATUSES: [&str; 3] = ["active", "grace", "expired"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListMemberships {
    limit: Option<i64>,
    after: Option<i64>,
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListEvents {
    limit: Option<i64>,
    after: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    subscriber_id: Option<i32>,
    channel_id: Option<i32>,
    days: Option<i32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchMembership {
    expires_at: Option<DateTime<Utc>>,
    status: Option<String>,
}

#[derive(Serialize)]
pub struct Event {
    id: i64,
    membership_id: i64,
    from_status: Option<String>,
    to_status: String,
    expires_at_before: Option<DateTime<Utc>>,
    expires_at_after: DateTime<Utc>,
    cause: String,
    payment_id: Option<i64>,
    at: DateTime<Utc>,
}

impl Event {
    fn from_row(r: &Row) -> Event {
        Event {
            id: r.get(0),
            membership_id: r.get(1),
            from_status: r.get(2),
            to_status: r.get(3),
            expires_at_before: r.get(4),
            expires_at_after: r.get(5),
            cause: r.get(6),
            payment_id: r.get(7),
            at: r.get(8),
        }
    }
}

/// `GET /api/memberships`.
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListMemberships>,
) -> Result<Json<Page<Membership>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    if let Some(s) = &q.status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::field(
            "status",
            "must be active, grace or expired",
        ));
    }
    let client = state.db.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM memberships
                 WHERE id > $1
                   AND ($2::integer IS NULL OR subscriber_id = $2)
                   AND ($3::integer IS NULL OR channel_id = $3)
                   AND ($4::text IS NULL OR status = $4)
                 ORDER BY id LIMIT $5"
            ),
            &[
                &paging.after,
                &q.subscriber_id,
                &q.channel_id,
                &q.status,
                &paging.fetch(),
            ],
        )
        .await?;
    let items = rows.iter().map(Membership::from_row).collect();
    Ok(Json(paging.page(items, |m| m.id)))
}

/// `GET /api/memberships/{id}`.
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Membership>, ApiError> {
    let client = state.db.get().await?;
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM memberships WHERE id = $1"),
            &[&id],
        )
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    Ok(Json(Membership::from_row(&row)))
}

/// `GET /api/memberships/{id}/events`.
pub async fn events(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
    ApiQuery(q): ApiQuery<ListEvents>,
) -> Result<Json<Page<Event>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    client
        .query_opt("SELECT 1 FROM memberships WHERE id = $1", &[&id])
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    let rows = client
        .query(
            "SELECT id, membership_id, from_status, to_status, expires_at_before,
                    expires_at_after, cause, payment_id, at
             FROM membership_events WHERE membership_id = $1 AND id > $2
             ORDER BY id LIMIT $3",
            &[&id, &paging.after, &paging.fetch()],
        )
        .await?;
    let items = rows.iter().map(Event::from_row).collect();
    Ok(Json(paging.page(items, |e| e.id)))
}

/// `POST /api/memberships`: grant or extend by hand (cause `staff`):
/// `expires_at = GREATEST(current, now) + days`, `status = active`. 201 when created, 200 when
/// extended. Staff grants are deliberate and do not check seats.
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
    let (subscriber_id, channel_id, days) =
        (subscriber_id.unwrap(), channel_id.unwrap(), b.days.unwrap());
    crate::idempotent!(state, write, |tx| {
        db::lock_pair(tx, subscriber_id, channel_id).await?;
        let subscriber = tx
            .query_opt("SELECT 1 FROM subscribers WHERE id = $1", &[&subscriber_id])
            .await?;
        let channel = seats::lock_channel_terms(tx, channel_id).await?.is_some();
        let mut e = Errors::default();
        if subscriber.is_none() {
            e.add("subscriber_id", "no such subscriber");
        }
        if !channel {
            e.add("channel_id", "no such channel");
        }
        e.finish()?;
        let (m, created) =
            memberships::extend(tx, subscriber_id, channel_id, days, Cause::Staff).await?;
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

/// Reads a membership's pair without locking, so the pair lock can be taken first.
async fn pair_of(tx: &deadpool_postgres::Transaction<'_>, id: i64) -> Result<(i32, i32), ApiError> {
    let row = tx
        .query_opt(
            "SELECT subscriber_id, channel_id FROM memberships WHERE id = $1",
            &[&id],
        )
        .await?
        .ok_or(ApiError::NotFound("membership"))?;
    Ok((row.get(0), row.get(1)))
}

/// `PATCH /api/memberships/{id}`: staff corrections of `expires_at` and/or `status`, written
/// exactly, recorded as one `staff` event; no seat check, no extension.
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(b): ApiJson<PatchMembership>,
) -> Result<Json<Membership>, ApiError> {
    if let Some(s) = &b.status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::field(
            "status",
            "must be active, grace or expired",
        ));
    }
    if b.status.is_none() && b.expires_at.is_none() {
        return Err(ApiError::Unprocessable(
            "give expires_at and/or status to change".into(),
        ));
    }
    crate::transaction!(state.db, |tx| {
        let (subscriber_id, channel_id) = pair_of(tx, id).await?;
        db::lock_pair(tx, subscriber_id, channel_id).await?;
        seats::lock_channel_terms(tx, channel_id).await?;
        // The pair cannot change, but the row may have been deleted while we waited.
        let before = memberships::lock(tx, subscriber_id, channel_id)
            .await?
            .filter(|m| m.id == id)
            .ok_or(ApiError::NotFound("membership"))?;
        let row = tx
            .query_one(
                &format!(
                    "UPDATE memberships SET expires_at = COALESCE($2, expires_at),
                         status = COALESCE($3, status), updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING {COLUMNS}"
                ),
                &[&id, &b.expires_at, &b.status],
            )
            .await?;
        let after = Membership::from_row(&row);
        memberships::record_event(tx, Some(&before), &after, Cause::Staff).await?;
        tracing::info!(membership_id = id, staff_id = staff.id, status = %after.status, "membership corrected by staff");
        Ok(Json(after))
    })
}

/// `DELETE /api/memberships/{id}`: 204. Its events go with it; payments stay. A live (active or
/// grace) membership's member is taken out of the chat: a revoke is enqueued in the same
/// transaction ([`memberships::delete`]).
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        let (subscriber_id, channel_id) = pair_of(tx, id).await?;
        db::lock_pair(tx, subscriber_id, channel_id).await?;
        seats::lock_channel_terms(tx, channel_id).await?;
        if !memberships::delete(tx, id).await? {
            return Err(ApiError::NotFound("membership"));
        }
        tracing::info!(
            membership_id = id,
            staff_id = staff.id,
            "membership deleted by staff"
        );
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
