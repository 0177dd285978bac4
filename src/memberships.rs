//! Memberships: the row that says who may be in which channel until when. This module grants
//! and extends it (payments and staff grants, [`extend`]) and records a change's event
//! ([`record_event`], which staff corrections use too). The other writers of membership rows
//! are staff corrections and deletes (`api::memberships`, under the same locks), the sweep (one
//! batched statement that writes its own events) and the cascade of a subscriber's deletion.
//!
//! Every change happens inside a transaction that already holds
//! `pg_advisory_xact_lock(subscriber_id, channel_id)` ([`crate::db::lock_pair`]) — and, on the
//! payment path, the order and channel locks after it — so this module takes only the last lock
//! of the order: the membership row itself. Each change writes one `membership_events` row in
//! the same transaction ([`record_event`]), the audit trail staff read and the one place later
//! side effects hang off: the Telegram effect of a change is keyed on its event. A deletion
//! leaves no event (events go with the row), so [`delete`] enqueues the revoke of a live
//! membership itself.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;
use tokio_postgres::Row;

use crate::error::ApiError;

/// The columns of [`Membership::from_row`], in order.
pub const COLUMNS: &str =
    "id, subscriber_id, channel_id, status, expires_at, created_at, updated_at";

/// A membership as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Membership {
    pub id: i64,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub status: String,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Membership {
    pub fn from_row(row: &Row) -> Membership {
        Membership {
            id: row.get(0),
            subscriber_id: row.get(1),
            channel_id: row.get(2),
            status: row.get(3),
            expires_at: row.get(4),
            created_at: row.get(5),
            updated_at: row.get(6),
        }
    }
}

/// Why a membership changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Payment(i64),
    Staff,
}

impl Cause {
    fn parts(self) -> (&'static str, Option<i64>) {
        match self {
            Cause::Payment(id) => ("payment", Some(id)),
            Cause::Staff => ("staff", None),
        }
    }
}

/// Locks and reads the membership of (subscriber, channel), if there is one.
/// The caller must already hold the pair's advisory lock.
pub async fn lock(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<Option<Membership>, ApiError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {COLUMNS} FROM memberships
                 WHERE subscriber_id = $1 AND channel_id = $2 FOR UPDATE"
            ),
            &[&subscriber_id, &channel_id],
        )
        .await?;
    Ok(row.as_ref().map(Membership::from_row))
}

/// Grants or extends: `expires_at = GREATEST(current, database now) + days`, `status = active`.
/// The term starts when the change is applied, never at a time the caller was told about (a
/// gateway's `paid_at`): a delayed delivery must not eat days of the term, and a live membership
/// still extends from its own expiry. Writes the event. Returns the membership and whether it
/// was created. The caller holds the pair's advisory lock.
pub async fn extend(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
    days: i32,
    cause: Cause,
) -> Result<(Membership, bool), ApiError> {
    let before = lock(tx, subscriber_id, channel_id).await?;
    // One statement after the locks reads database time and writes the new term.
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
                 VALUES ($1, $2, 'active', statement_timestamp() + make_interval(days => $3))
                 ON CONFLICT (subscriber_id, channel_id) DO UPDATE
                 SET status = 'active',
                     expires_at = GREATEST(memberships.expires_at, statement_timestamp())
                                  + make_interval(days => $3),
                     updated_at = statement_timestamp()
                 RETURNING {COLUMNS}"
            ),
            &[&subscriber_id, &channel_id, &days],
        )
        .await?;
    let after = Membership::from_row(&row);
    record_event(tx, before.as_ref(), &after, cause).await?;
    Ok((after, before.is_none()))
}

/// Records one change of a membership (`before` is `None` on creation): its `membership_events`
/// row first, then the Telegram effect the change asks for, keyed on that event's id, in the
/// same transaction ([`crate::effects::on_membership_change`]). Returns the event's id.
pub async fn record_event(
    tx: &Transaction<'_>,
    before: Option<&Membership>,
    after: &Membership,
    cause: Cause,
) -> Result<i64, ApiError> {
    let (cause_name, payment_id) = cause.parts();
    let event_id: i64 = tx
        .query_one(
            "INSERT INTO membership_events
                 (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause, payment_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             RETURNING id",
            &[
                &after.id,
                &before.map(|b| b.status.as_str()),
                &after.status,
                &before.map(|b| b.expires_at),
                &after.expires_at,
                &cause_name,
                &payment_id,
            ],
        )
        .await?
        .get(0);
    crate::effects::on_membership_change(&**tx, before, after, cause, event_id).await?;
    Ok(event_id)
}

/// Deletes membership `id` (its events go with it) and, if it was live, enqueues the revoke that
/// takes the member out of the chat ([`crate::effects::DELETED_REVOKES_CTE`]), in one statement.
/// Returns whether it existed. The caller holds the pair's advisory lock (and the channel lock
/// of a seat-limited channel).
pub async fn delete(tx: &Transaction<'_>, id: i64) -> Result<bool, ApiError> {
    Ok(delete_where(tx, "id = $1", &id).await? > 0)
}

/// Deletes every membership of a subscriber, with a revoke for each live one, like [`delete`];
/// the subscriber's `DELETE` calls it first, since its cascade would remove them without a word
/// to Telegram. The caller holds the subscriber row `FOR UPDATE`, so no membership of it can be
/// created meanwhile. Returns how many were deleted.
pub async fn delete_of_subscriber(
    tx: &Transaction<'_>,
    subscriber_id: i32,
) -> Result<u64, ApiError> {
    delete_where(tx, "subscriber_id = $1", &subscriber_id).await
}

/// The `DELETE … RETURNING` sees each row as it is when removed (after waiting for a writer that
/// holds it), so the revoke is decided on the final status, not on an earlier read.
async fn delete_where(
    tx: &Transaction<'_>,
    condition: &'static str,
    key: &(dyn tokio_postgres::types::ToSql + Sync),
) -> Result<u64, ApiError> {
    let row = tx
        .query_one(
            &format!(
                "WITH gone AS (
                     DELETE FROM memberships WHERE {condition}
                     RETURNING id, subscriber_id, channel_id, status, expires_at
                 ), {}
                 SELECT count(*) FROM gone",
                crate::effects::DELETED_REVOKES_CTE
            ),
            &[key],
        )
        .await?;
    Ok(row.get::<_, i64>(0) as u64)
}
