//! `/api/subscribers`: the buyers, identified by their Telegram user id.
//!
//! HTTP only: a handler checks the body's fields, calls one function of [`crate::access::subscribers`]
//! (which owns the rows, the SQL and the rules of a change) and renders its answer.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId, check_text, not_null, nullable};
use super::{auth::Staff, exports, idempotency::StaffWrite, schemas::Problem};
use crate::{
    access::subscribers::{self, Subscriber},
    app::state::AppState,
    common::error::ApiError,
    messages::sent::{self, Message},
    present::locale::Language,
    staff::audit_log::Entry,
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"telegram_user_id": 100000001, "username": "ann", "display_name": "Ann",
    "language": "uk"}))]
pub struct CreateSubscriber {
    #[schema(required = true, nullable = false, minimum = 1)]
    telegram_user_id: Option<i64>,
    #[schema(max_length = 64)]
    username: Option<String>,
    #[schema(max_length = 128)]
    display_name: Option<String>,
    /// The language the bot speaks to them (`null` or absent: the default).
    #[schema(value_type = Option<Language>)]
    language: Option<String>,
}

/// The fields to change; `null` clears `username` or `display_name`. Changing
/// `telegram_user_id` is refused (409) while the subscriber has an active or grace membership.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"username": null, "display_name": "Ann K."}))]
pub struct PatchSubscriber {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = i64, minimum = 1)]
    telegram_user_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 64)]
    username: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 128)]
    display_name: Option<Option<String>>,
    /// The language the bot speaks to them; `null`: back to the default.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Language>)]
    language: Option<Option<String>>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListSubscribers {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    telegram_user_id: Option<i64>,
    /// Telegram username, case-insensitive, with or without the leading `@`.
    username: Option<String>,
}

/// A language code the bot speaks, or an error on `language`.
fn check_language(e: &mut Errors, v: Option<&str>) -> Option<Language> {
    let v = v?;
    let l = Language::parse(v);
    if l.is_none() {
        e.add("language", format!("must be {}", Language::spellings()));
    }
    l
}

fn check_telegram_user_id(e: &mut Errors, v: i64) {
    if v <= 0 {
        e.add("telegram_user_id", "must be a positive integer");
    }
}

/// `POST /api/subscribers`.
#[utoipa::path(post, path = "/subscribers", operation_id = "createSubscriber", tag = "subscribers",
    request_body = CreateSubscriber,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = Subscriber),
        (status = 409, description = "A subscriber with this `telegram_user_id` exists, or this \
            Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, or an Idempotency-Key reused for another \
            request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<CreateSubscriber>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let telegram_user_id = e.required("telegram_user_id", b.telegram_user_id);
    if let Some(id) = telegram_user_id {
        check_telegram_user_id(&mut e, id);
    }
    check_text(&mut e, "username", b.username.as_deref(), 64);
    check_text(&mut e, "display_name", b.display_name.as_deref(), 128);
    let language = check_language(&mut e, b.language.as_deref());
    e.finish()?;
    let Some(telegram_user_id) = telegram_user_id else {
        return Err(ApiError::internal("a checked telegram_user_id is missing"));
    };
    let (username, display_name) = (b.username.as_deref(), b.display_name.as_deref());
    crate::idempotent!(state, write, |tx| {
        let s = subscribers::create(tx, telegram_user_id, username, display_name, language).await?;
        let entry = Entry::new("subscriber.create", Some(s.id.into())).after(&s);
        write.staff.audit(tx, entry).await?;
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(s).map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/subscribers` (filters `telegram_user_id` and `username`).
#[utoipa::path(get, path = "/subscribers", operation_id = "listSubscribers", tag = "subscribers",
    params(ListSubscribers),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of subscribers, by id.", body = Page<Subscriber>),
        (status = 422, description = "`limit` out of range, or an empty or overlong `username`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListSubscribers>,
) -> Result<Json<Page<Subscriber>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = subscribers::Filter {
        telegram_user_id: q.telegram_user_id,
        username: username_filter(q.username.as_deref())?,
        ..subscribers::Filter::default()
    };
    let client = state.db.get().await?;
    let items = subscribers::list(&client, paging.after, &filter, paging.fetch()).await?;
    Ok(Json(paging.page(items, |s| s.id as i64)))
}

/// The `username` filter: without a leading `@`, not empty, at most 64 characters.
fn username_filter(username: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(u) = username.map(|u| u.strip_prefix('@').unwrap_or(u)) else {
        return Ok(None);
    };
    let mut e = Errors::default();
    if u.is_empty() {
        e.add("username", "must not be empty");
    }
    check_text(&mut e, "username", Some(u), 64);
    e.finish()?;
    Ok(Some(u.to_string()))
}

/// `GET /api/subscribers.csv`: the filters of the list, plus `from`/`to`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportSubscribers {
    telegram_user_id: Option<i64>,
    /// Telegram username, case-insensitive, with or without the leading `@`.
    username: Option<String>,
    /// Created at or after this time (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Created before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
}

/// The columns of `subscribers.csv`, as [`Subscriber`] serializes.
const CSV_COLUMNS: &[&str] = &[
    "id",
    "telegram_user_id",
    "username",
    "display_name",
    "language",
    "marketing_opt_out",
    "reachable",
    "created_at",
    "updated_at",
];

/// `GET /api/subscribers.csv`: every subscriber the list's filters (and `from`/`to`) select.
#[utoipa::path(get, path = "/subscribers.csv", operation_id = "exportSubscribers", tag = "subscribers",
    params(ExportSubscribers),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "RFC 4180 CSV with a header row, streamed: the columns of \
            a Subscriber.", body = String, content_type = "text/csv"),
        (status = 422, description = "An empty or too long `username`, or `from` after `to`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ExportSubscribers>,
) -> Result<Response, ApiError> {
    exports::check_window(q.from, q.to)?;
    let filter = subscribers::Filter {
        telegram_user_id: q.telegram_user_id,
        username: username_filter(q.username.as_deref())?,
        from: q.from,
        to: q.to,
    };
    let pool = state.db.clone();
    exports::csv(
        "subscribers.csv",
        CSV_COLUMNS,
        move |after| {
            let (pool, filter) = (pool.clone(), filter.clone());
            async move {
                subscribers::list(&pool.get().await?, after, &filter, exports::PAGE).await
            }
        },
        |s: &Subscriber| i64::from(s.id),
    )
    .await
}

/// `GET /api/subscribers/{id}`.
#[utoipa::path(get, path = "/subscribers/{id}", operation_id = "getSubscriber", tag = "subscribers",
    params(("id" = i32, Path, description = "Subscriber id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The subscriber.", body = Subscriber)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i32>,
) -> Result<Json<Subscriber>, ApiError> {
    let client = state.db.get().await?;
    let s = subscribers::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("subscriber"))?;
    Ok(Json(s))
}

/// `PATCH /api/subscribers/{id}`. Changing `telegram_user_id` is refused while the subscriber
/// has an active or grace membership (access is tied to that Telegram account).
#[utoipa::path(patch, path = "/subscribers/{id}", operation_id = "patchSubscriber", tag = "subscribers",
    params(("id" = i32, Path, description = "Subscriber id.")),
    request_body(content = Option<PatchSubscriber>, description = "The fields to change; none (or an \
        empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The subscriber as changed.", body = Subscriber),
        (status = 409, description = "`telegram_user_id` is taken, or cannot change while the \
            subscriber has an active or grace membership.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields (`null` for `telegram_user_id` included).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i32>,
    ApiJson(b): ApiJson<PatchSubscriber>,
) -> Result<Json<Subscriber>, ApiError> {
    let mut e = Errors::default();
    let telegram_user_id = not_null(&mut e, "telegram_user_id", b.telegram_user_id);
    if let Some(v) = telegram_user_id {
        check_telegram_user_id(&mut e, v);
    }
    check_text(
        &mut e,
        "username",
        b.username.as_ref().and_then(|v| v.as_deref()),
        64,
    );
    check_text(
        &mut e,
        "display_name",
        b.display_name.as_ref().and_then(|v| v.as_deref()),
        128,
    );
    let language = b
        .language
        .as_ref()
        .map(|v| check_language(&mut e, v.as_deref()));
    e.finish()?;
    let change = subscribers::Change {
        telegram_user_id,
        username: b.username,
        display_name: b.display_name,
        language,
    };
    crate::transaction!(state.db, |tx| {
        let before = subscribers::get(tx, id).await?;
        let after = subscribers::change(tx, id, &change).await?;
        let entry = Entry::new("subscriber.update", Some(id.into()))
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}

/// `DELETE /api/subscribers/{id}`: 204, or 409 when the subscriber has payments (money records
/// are never deleted). Orders, memberships and their events go with the subscriber; each live
/// membership's member is taken out of its chat (a revoke per membership, in this transaction).
#[utoipa::path(delete, path = "/subscribers/{id}", operation_id = "deleteSubscriber", tag = "subscribers",
    params(("id" = i32, Path, description = "Subscriber id.")),
    security(("staff_jwt" = [])),
    responses(
        (status = 204, description = "Deleted, with its orders and memberships."),
        (status = 409, description = "The subscriber has payments (money records are never deleted).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i32>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        let before = subscribers::get(tx, id).await?;
        subscribers::delete(tx, id).await?;
        let entry = Entry::new("subscriber.delete", Some(id.into())).before(&before);
        staff.audit(tx, entry).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListMessages {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
}

/// `GET /api/subscribers/{id}/messages`: the broadcasts and automations' messages written to
/// the buyer, with what came of each.
#[utoipa::path(get, path = "/subscribers/{id}/messages", operation_id = "listSubscriberMessages",
    tag = "messages",
    params(("id" = i32, Path, description = "Subscriber id."), ListMessages),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of the buyer's messages, by id.", body = Page<Message>),
        (status = 404, description = "No such subscriber.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn messages(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i32>,
    ApiQuery(q): ApiQuery<ListMessages>,
) -> Result<Json<Page<Message>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    if !subscribers::exists(&client, id).await? {
        return Err(ApiError::NotFound("subscriber"));
    }
    let items = sent::of_subscriber(&client, id, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |m| m.id)))
}
