//! `/api/subscribers`: the buyers, identified by their Telegram user id.

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use super::{ApiJson, ApiQuery, Errors, Page, Paging, PathId, check_text, not_null, nullable};
use super::{auth::Staff, idempotency::StaffWrite, openapi::Problem};
use crate::{
    db::{self, FromRow},
    error::ApiError,
    memberships,
    state::AppState,
};

/// The select list of the rows here (a macro, so SQL constants can splice it with `concat!`).
macro_rules! subscriber_columns {
    () => {
        "id, telegram_user_id, username, display_name, created_at, updated_at"
    };
}

const INSERT_SQL: &str = concat!(
    "INSERT INTO subscribers (telegram_user_id, username, display_name)
                         VALUES ($1, $2, $3) RETURNING ",
    subscriber_columns!()
);
const LIST_SQL: &str = concat!(
    "SELECT ",
    subscriber_columns!(),
    " FROM subscribers
                 WHERE id > $1::bigint AND ($2::bigint IS NULL OR telegram_user_id = $2)
                   AND ($4::text IS NULL OR lower(username) = lower($4))
                 ORDER BY id LIMIT $3"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    subscriber_columns!(),
    " FROM subscribers WHERE id = $1"
);
const PATCH_SQL: &str = concat!(
    "UPDATE subscribers SET
                         telegram_user_id = COALESCE($2, telegram_user_id),
                         username = CASE WHEN $3 THEN $4 ELSE username END,
                         display_name = CASE WHEN $5 THEN $6 ELSE display_name END,
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING ",
    subscriber_columns!()
);

/// A buyer, identified by their Telegram user id.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "telegram_user_id": 100000001, "username": "ann",
    "display_name": "Ann", "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Subscriber {
    pub id: i32,
    pub telegram_user_id: i64,
    pub username: Option<String>,
    pub display_name: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FromRow for Subscriber {
    const COLUMNS: &'static str = subscriber_columns!();

    fn from_row(r: &Row) -> Result<Subscriber, tokio_postgres::Error> {
        Ok(Subscriber {
            id: r.try_get("id")?,
            telegram_user_id: r.try_get("telegram_user_id")?,
            username: r.try_get("username")?,
            display_name: r.try_get("display_name")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"telegram_user_id": 100000001, "username": "ann", "display_name": "Ann"}))]
pub struct CreateSubscriber {
    #[schema(required = true, nullable = false, minimum = 1)]
    telegram_user_id: Option<i64>,
    #[schema(max_length = 64)]
    username: Option<String>,
    #[schema(max_length = 128)]
    display_name: Option<String>,
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
    if let Some(id) = e.required("telegram_user_id", b.telegram_user_id) {
        check_telegram_user_id(&mut e, id);
    }
    check_text(&mut e, "username", b.username.as_deref(), 64);
    check_text(&mut e, "display_name", b.display_name.as_deref(), 128);
    e.finish()?;
    crate::idempotent!(state, write, |tx| {
        let row = tx
            .query_one(
                INSERT_SQL,
                &[&b.telegram_user_id, &b.username, &b.display_name],
            )
            .await?;
        let s = Subscriber::from_row(&row)?;
        tracing::info!(subscriber_id = s.id, "subscriber created");
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
    let username = q
        .username
        .as_deref()
        .map(|u| u.strip_prefix('@').unwrap_or(u));
    if let Some(u) = username {
        let mut e = Errors::default();
        if u.is_empty() {
            e.add("username", "must not be empty");
        }
        check_text(&mut e, "username", Some(u), 64);
        e.finish()?;
    }
    let client = state.db.get().await?;
    let items: Vec<Subscriber> = db::all(
        &client,
        LIST_SQL,
        &[
            &paging.after,
            &q.telegram_user_id,
            &paging.fetch(),
            &username,
        ],
    )
    .await?;
    Ok(Json(paging.page(items, |s| s.id as i64)))
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
    let s = db::opt(&client, GET_SQL, &[&id])
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
    _: Staff,
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
    e.finish()?;
    crate::transaction!(state.db, |tx| {
        let current = tx
            .query_opt(
                "SELECT telegram_user_id FROM subscribers WHERE id = $1 FOR UPDATE",
                &[&id],
            )
            .await?
            .ok_or(ApiError::NotFound("subscriber"))?;
        if let Some(new_id) = telegram_user_id
            && new_id != current.get::<_, i64>(0)
        {
            // Memberships are only created under the subscriber row's key-share lock (their
            // foreign key), and revived under it too (`memberships::extend`, `memberships::lock`
            // take it), so this check cannot race a membership becoming live. Effects still
            // pending or failed for the old account do not block the change: each keeps the
            // account it was enqueued for (a revoke still removes the old one), docs/effects.md.
            if memberships::subscriber_holds_access(tx, id).await? {
                return Err(ApiError::Conflict(
                    "telegram_user_id cannot change while the subscriber has an active or grace membership".into(),
                ));
            }
        }
        let row = tx
            .query_one(
                PATCH_SQL,
                &[
                    &id,
                    &telegram_user_id,
                    &b.username.is_some(),
                    &b.username.clone().flatten(),
                    &b.display_name.is_some(),
                    &b.display_name.clone().flatten(),
                ],
            )
            .await?;
        Ok(Json(Subscriber::from_row(&row)?))
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
    _: Staff,
    PathId(id): PathId<i32>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        // Locked first: a new membership, order or payment of this subscriber (each takes a
        // key-share lock through its foreign key) waits until this commits, so the memberships
        // deleted below are all there are, and a payment in flight is seen by the check.
        tx.query_opt("SELECT 1 FROM subscribers WHERE id = $1 FOR UPDATE", &[&id])
            .await?
            .ok_or(ApiError::NotFound("subscriber"))?;
        let has_payments = tx
            .query_opt(
                "SELECT 1 FROM payments WHERE subscriber_id = $1 LIMIT 1",
                &[&id],
            )
            .await?
            .is_some();
        if has_payments {
            return Err(ApiError::Conflict(
                "the subscriber has payments; money records are never deleted".into(),
            ));
        }
        // Before the subscriber: its cascade would remove them without a revoke.
        let removed = memberships::delete_of_subscriber(tx, id).await?;
        tx.execute("DELETE FROM subscribers WHERE id = $1", &[&id])
            .await
            .map_err(|e| match e.code() {
                Some(c) if *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION => {
                    ApiError::Conflict(
                        "the subscriber has payments; money records are never deleted".into(),
                    )
                }
                _ => ApiError::Db(e),
            })?;
        tracing::info!(
            subscriber_id = id,
            memberships = removed,
            "subscriber deleted"
        );
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}
