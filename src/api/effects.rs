//! `/api/effects`: the Telegram effects outbox as staff see it — what is queued, what was done,
//! and the dead letters (`status=failed`) with Telegram's reason, which staff can send back to
//! the queue once the cause is fixed (bot made admin, user unblocked the bot, …).

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::Deserialize;
use tokio_postgres::error::SqlState;

use super::{ApiQuery, Errors, Page, Paging, PathId};
use super::{
    auth::Staff,
    idempotency::{NoBody, StaffWrite},
};
use crate::{
    effects::{COLUMNS, Effect, Kind},
    error::ApiError,
    state::AppState,
};

const STATUSES: [&str; 3] = ["pending", "done", "failed"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListEffects {
    limit: Option<i64>,
    after: Option<i64>,
    status: Option<String>,
    kind: Option<String>,
    membership_id: Option<i64>,
    payment_id: Option<i64>,
}

/// `GET /api/effects` (filters `status`, `kind`, `membership_id`, `payment_id`).
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListEffects>,
) -> Result<Json<Page<Effect>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let mut e = Errors::default();
    if let Some(s) = &q.status
        && !STATUSES.contains(&s.as_str())
    {
        e.add("status", "must be pending, done or failed");
    }
    if let Some(k) = &q.kind
        && Kind::parse(k).is_none()
    {
        let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        e.add("kind", format!("must be one of {}", all.join(", ")));
    }
    e.finish()?;
    let client = state.db.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM effects
                 WHERE id > $1
                   AND ($2::text IS NULL OR status = $2)
                   AND ($3::text IS NULL OR kind = $3)
                   AND ($4::bigint IS NULL OR membership_id = $4)
                   AND ($5::bigint IS NULL OR payment_id = $5)
                 ORDER BY id LIMIT $6"
            ),
            &[
                &paging.after,
                &q.status,
                &q.kind,
                &q.membership_id,
                &q.payment_id,
                &paging.fetch(),
            ],
        )
        .await?;
    let items = rows.iter().map(Effect::from_row).collect();
    Ok(Json(paging.page(items, |e| e.id)))
}

/// `GET /api/effects/{id}`.
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Effect>, ApiError> {
    let client = state.db.get().await?;
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM effects WHERE id = $1"),
            &[&id],
        )
        .await?
        .ok_or(ApiError::NotFound("effect"))?;
    Ok(Json(Effect::from_row(&row)))
}

/// `POST /api/effects/{id}/retry`: a dead letter (`failed`) goes back to the queue with a fresh
/// attempt budget, due now; a `pending` one is made due now. 409 for a `done` effect, and for
/// one a worker is performing at this moment. Answers the effect.
pub async fn retry(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        // A worker holds the row lock while it performs the effect: do not wait for it.
        let row = tx
            .query_opt(
                "SELECT status FROM effects WHERE id = $1 FOR UPDATE NOWAIT",
                &[&id],
            )
            .await
            .map_err(|e| {
                if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                    ApiError::Conflict(
                        "the effect is being performed right now; look again shortly".into(),
                    )
                } else {
                    ApiError::Db(e)
                }
            })?
            .ok_or(ApiError::NotFound("effect"))?;
        let status: String = row.get(0);
        if status == "done" {
            return Err(ApiError::Conflict(
                "the effect is done; there is nothing to retry".into(),
            ));
        }
        let row = tx
            .query_one(
                &format!(
                    "UPDATE effects SET status = 'pending',
                         attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                         next_attempt_at = statement_timestamp(),
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING {COLUMNS}"
                ),
                &[&id],
            )
            .await?;
        let effect = Effect::from_row(&row);
        tracing::info!(
            effect_id = id,
            staff_id = write.staff.id,
            from = %status,
            "effect sent back to the queue by staff"
        );
        Ok((
            StatusCode::OK,
            serde_json::to_value(effect).map_err(ApiError::internal)?,
        ))
    })
}
