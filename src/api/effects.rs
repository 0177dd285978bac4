//! `/api/effects`: the Telegram effects outbox as staff see it — what is queued, what was done,
//! and the dead letters (`status=failed`) with Telegram's reason, which staff can send back to
//! the queue once the cause is fixed (bot made admin, user unblocked the bot, Telegram back after
//! an outage), one by one or all those matching a filter.

use axum::{
    Json,
    extract::State,
    http::{StatusCode, Uri},
    response::Response,
};
use deadpool_postgres::Transaction;
use serde::Deserialize;
use serde_json::json;
use tokio_postgres::{Row, error::SqlState, types::ToSql};

use super::{ApiQuery, Errors, Page, Paging, PathId};
use crate::{
    auth::Staff,
    effects::{COLUMNS, Effect, Kind},
    error::ApiError,
    idempotency::{NoBody, StaffWrite},
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
    check_kind(&mut e, q.kind.as_deref());
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
/// retry budget (no attempts, no first failure), due now; a `pending` one is made due now. A
/// refund's payment goes back from `refund_failed` to `refund_pending` in the same transaction,
/// so the worker refunds it instead of skipping it. 409 for a `done` effect, and for one a
/// worker is performing at this moment (leased). Answers the effect.
pub async fn retry(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        // A worker records under a short row lock: do not wait for it.
        let row = tx
            .query_opt(
                "SELECT status, COALESCE(lease_until > statement_timestamp(), false)
                 FROM effects WHERE id = $1 FOR UPDATE NOWAIT",
                &[&id],
            )
            .await
            .map_err(|e| {
                if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                    in_flight()
                } else {
                    ApiError::Db(e)
                }
            })?
            .ok_or(ApiError::NotFound("effect"))?;
        let (status, leased): (String, bool) = (row.get(0), row.get(1));
        if status == "done" {
            return Err(ApiError::Conflict(
                "the effect is done; there is nothing to retry".into(),
            ));
        }
        if leased {
            return Err(in_flight());
        }
        let row = send_back(
            tx,
            "id = $1",
            &[&id],
            &format!("SELECT {COLUMNS} FROM sent"),
        )
        .await?
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound("effect"))?;
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

/// The filters of `POST /api/effects/retry`: those of the list; `status` may only be `failed`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryFilter {
    status: Option<String>,
    kind: Option<String>,
    membership_id: Option<i64>,
    payment_id: Option<i64>,
}

/// `POST /api/effects/retry?kind=…&membership_id=…&payment_id=…`: every dead letter matching
/// the filters goes back to the queue as with `POST /api/effects/{id}/retry` (due now, fresh
/// budget, a refund's payment back to `refund_pending`), in one transaction. Answers
/// `{"retried": <count>}`.
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
        && s != "failed"
    {
        e.add("status", "only dead letters (failed) are retried");
    }
    check_kind(&mut e, q.kind.as_deref());
    e.finish()?;
    crate::idempotent!(state, write, |tx| {
        let rows = send_back(
            tx,
            "status = 'failed'
               AND ($1::text IS NULL OR kind = $1)
               AND ($2::bigint IS NULL OR membership_id = $2)
               AND ($3::bigint IS NULL OR payment_id = $3)",
            &[&q.kind, &q.membership_id, &q.payment_id],
            "SELECT count(*) FROM sent",
        )
        .await?;
        let retried: i64 = rows.first().map_or(0, |r| r.get(0));
        tracing::info!(
            retried,
            staff_id = write.staff.id,
            kind = ?q.kind,
            membership_id = ?q.membership_id,
            payment_id = ?q.payment_id,
            "dead letters sent back to the queue by staff"
        );
        Ok((StatusCode::OK, json!({"retried": retried})))
    })
}

fn in_flight() -> ApiError {
    ApiError::Conflict("the effect is being performed right now; look again shortly".into())
}

fn check_kind(e: &mut Errors, kind: Option<&str>) {
    if let Some(k) = kind
        && Kind::parse(k).is_none()
    {
        let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        e.add("kind", format!("must be one of {}", all.join(", ")));
    }
}

/// Sends the effects matching `filter` (SQL over `effects`, with `params`) back to the queue:
/// `pending`, due now, and for a dead letter a fresh budget — no attempts, no first failure.
/// The payments of refunds among them go from `refund_failed` back to `refund_pending`, in the
/// same statement. Answers the rows of `select`, a query over `sent` (the effects as they are
/// now, with [`COLUMNS`]).
async fn send_back(
    tx: &Transaction<'_>,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
    select: &str,
) -> Result<Vec<Row>, ApiError> {
    let rows = tx
        .query(
            &format!(
                "WITH sent AS (
                     UPDATE effects SET status = 'pending',
                         attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                         first_failed_at = CASE WHEN status = 'failed' THEN NULL
                                                ELSE first_failed_at END,
                         next_attempt_at = statement_timestamp(),
                         updated_at = statement_timestamp()
                     WHERE {filter}
                     RETURNING {COLUMNS}
                 ), payments_back AS (
                     UPDATE payments p SET outcome = 'refund_pending',
                         updated_at = statement_timestamp()
                     FROM sent
                     WHERE sent.kind = 'refund' AND p.id = sent.payment_id
                       AND p.outcome = 'refund_failed'
                 )
                 {select}"
            ),
            params,
        )
        .await?;
    Ok(rows)
}
