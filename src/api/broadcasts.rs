//! `/api/broadcasts`: a text per language to a segment of buyers, now or at a time, with an
//! optional buy button and a budget for paid sending; a preview of how many it reaches; its
//! progress; and cancel.
//!
//! HTTP only: [`crate::messages::broadcasts`] owns the rows and the sending rules,
//! [`crate::messages::segment`] the segment.

use std::collections::BTreeMap;

use axum::{Json, extract::State, http::StatusCode, response::Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId, object};
use super::{
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
    schemas::Problem,
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    messages::{
        broadcasts::{self, Broadcast, Button, NewBroadcast, Paid},
        segment::{self, Preview, Segment},
    },
    present::locale::default_language,
    staff::audit_log::Entry,
};

/// A new broadcast.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"texts": {"en": "New season starts Monday, { $name }!",
    "uk": "Новий сезон стартує в понеділок, { $name }!"},
    "segment": {"statuses": ["active", "grace"], "languages": ["en", "uk"]},
    "button": {"plan_id": 2}, "send_at": "2025-06-01T09:00:00Z"}))]
pub struct BroadcastInput {
    /// A Project Fluent pattern per language (`en`, `uk`, `ru`), at least one; a buyer reads
    /// theirs, else the default language's, else any.
    #[schema(value_type = HashMap<String, String>)]
    texts: Option<BTreeMap<String, String>>,
    /// Who it reaches (every field optional, ANDed); `{}`: every buyer who takes messages.
    #[serde(default, deserialize_with = "object")]
    segment: Option<Segment>,
    /// A buy button: a paid plan, with a promo code applied when given.
    #[serde(default, deserialize_with = "object")]
    button: Option<Button>,
    /// RFC 3339; absent, null or past: now.
    #[schema(value_type = Option<DateTime<Utc>>)]
    send_at: Option<String>,
    /// Sent with `allow_paid_broadcast` (up to 1,000 messages a second) while `max_stars`
    /// lasts (0.1 Star a message).
    #[serde(default, deserialize_with = "object")]
    paid: Option<Paid>,
}

/// The segment to count.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"segment": {"channel_ids": [1], "statuses": ["expired"], "expired_within_days": 30}}))]
pub struct PreviewInput {
    /// Absent (or no body at all): every buyer who takes messages.
    #[serde(default, deserialize_with = "object")]
    segment: Option<Segment>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListBroadcasts {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
}

/// `POST /api/broadcasts`.
#[utoipa::path(post, path = "/broadcasts", operation_id = "createBroadcast", tag = "messages",
    request_body = BroadcastInput,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created: `sending` (its recipients fixed now) or \
            `scheduled`.", body = Broadcast),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No text, a text the bot cannot use (a language it does \
            not speak, not a Fluent pattern, an unknown placeholder, `{ $code }` without the \
            button's code), a segment's bad value, a button's plan that is not an active paid \
            plan or an unknown code, a budget out of range, a `send_at` that is not RFC 3339; \
            or an Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<BroadcastInput>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let texts = e.required("texts", b.texts.clone());
    let send_at = b
        .send_at
        .as_deref()
        .and_then(|t| match DateTime::parse_from_rfc3339(t) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(_) => {
                e.add(
                    "send_at",
                    "must be an RFC 3339 time (e.g. 2025-06-01T09:00:00Z)",
                );
                None
            }
        });
    e.finish()?;
    let new = NewBroadcast {
        texts: texts.unwrap_or_default(),
        segment: b.segment.clone().unwrap_or_default(),
        button: b.button.clone(),
        send_at,
        paid: b.paid,
    };
    crate::idempotent!(state, write, |tx| {
        let created = broadcasts::create(tx, &new, default_language()).await?;
        let entry = Entry::new("broadcast.create", Some(created.id)).after(&created);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(created).map_err(ApiError::internal)?,
        ))
    })
}

/// `POST /api/broadcasts/preview`.
#[utoipa::path(post, path = "/broadcasts/preview", operation_id = "previewBroadcast", tag = "messages",
    request_body(content = Option<PreviewInput>, description = "The segment; none (or an \
        empty body) counts every buyer who takes messages."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "How many buyers the segment reaches now, and in which \
            language (nothing is stored).", body = Preview),
        (status = 422, description = "A segment's bad value.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn preview(
    State(state): State<AppState>,
    staff: Staff,
    ApiJson(input): ApiJson<PreviewInput>,
) -> Result<Json<Preview>, ApiError> {
    // A POST only because a segment is a body: it reads, and writes nothing to record.
    staff.no_write();
    let segment = input.segment.unwrap_or_default();
    let mut errors = BTreeMap::new();
    segment.check(&mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let client = state.db.get().await?;
    Ok(Json(
        segment::preview(&client, &segment, default_language()).await?,
    ))
}

/// `GET /api/broadcasts`.
#[utoipa::path(get, path = "/broadcasts", operation_id = "listBroadcasts", tag = "messages",
    params(ListBroadcasts),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of broadcasts, by id, with their counters.", body = Page<Broadcast>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListBroadcasts>,
) -> Result<Json<Page<Broadcast>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    let items = broadcasts::list(&client, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |b| b.id)))
}

/// `GET /api/broadcasts/{id}`.
#[utoipa::path(get, path = "/broadcasts/{id}", operation_id = "getBroadcast", tag = "messages",
    params(("id" = i64, Path, description = "Broadcast id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The broadcast and its counters.", body = Broadcast)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Broadcast>, ApiError> {
    let client = state.db.get().await?;
    let b = broadcasts::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("broadcast"))?;
    Ok(Json(b))
}

/// `POST /api/broadcasts/{id}/cancel`: no new sends after it.
#[utoipa::path(post, path = "/broadcasts/{id}/cancel", operation_id = "cancelBroadcast", tag = "messages",
    params(("id" = i64, Path, description = "Broadcast id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The broadcast, `cancelled`: the recipients not yet sent \
            to are `skipped`.", body = Broadcast),
        (status = 409, description = "The broadcast has finished, or this Idempotency-Key is \
            in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn cancel(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let before = broadcasts::get(tx, id).await?;
        let after = broadcasts::cancel(tx, id).await?;
        let entry = Entry::new("broadcast.cancel", Some(id))
            .before(&before)
            .after(&after);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::OK,
            serde_json::to_value(after).map_err(ApiError::internal)?,
        ))
    })
}
