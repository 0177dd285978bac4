//! The audit log of staff writes: who changed what, when, from what to what, under which
//! request. Owner of `audit_log`.
//!
//! Who is a staff account ([`Actor`], through the API) or the command line (`subgate staff
//! create` and `set-password`, [`record_command_line`]), which has no account: its rows name
//! neither an account id nor an email ([`ActorKind`]).
//!
//! A write records its row with [`record`] in its own transaction, so a write that rolls back
//! leaves no row and a committed write always has one. Rows are append-only: the schema refuses
//! every UPDATE, DELETE and TRUNCATE (trigger `audit_log_append_only`), and the API only reads
//! them. `before` and `after` are the target as the staff API shows it (null on a create and a
//! delete respectively); a write without one target (a bulk retry) has a null `target_id` and
//! says what it did in `after`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use crate::{
    common::error::ApiError,
    db::{self},
};

crate::text_enum! {
    /// Who made a write: the `actor` of its row.
    pub enum ActorKind {
        /// A staff account, through the API (the row names it).
        Staff => "staff",
        /// The command line (`subgate staff …`): no account, no request.
        CommandLine => "cli",
    }
}

/// The staff account that made a write, as its audit row names it.
#[derive(Debug, Clone)]
pub struct Actor {
    pub staff_id: i64,
    pub email: String,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
}

/// One staff write, as [`record`] stores it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `<target_type>.<verb>`: `channel.update`, `membership.grant`, `staff.delete`, …
    pub action: &'static str,
    pub target_type: &'static str,
    pub target_id: Option<i64>,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl Entry {
    /// An entry about `target_type` #`target_id` whose action is `<target_type>.<verb>`.
    pub fn new(action: &'static str, target_id: Option<i64>) -> Entry {
        let target_type = action.split_once('.').map_or(action, |(t, _)| t);
        Entry {
            action,
            target_type,
            target_id,
            before: None,
            after: None,
        }
    }

    /// With the target as it was before the write.
    pub fn before(mut self, before: impl Serialize) -> Entry {
        self.before = serde_json::to_value(before).ok().filter(|v| !v.is_null());
        self
    }

    /// With the target as it is after the write.
    pub fn after(mut self, after: impl Serialize) -> Entry {
        self.after = serde_json::to_value(after).ok().filter(|v| !v.is_null());
        self
    }
}

const RECORD_SQL: &str = "INSERT INTO audit_log
     (actor, staff_id, staff_email, action, target_type, target_id, before, after, request_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Records one staff write; call it in the write's transaction.
pub async fn record(
    client: &impl GenericClient,
    actor: &Actor,
    entry: Entry,
) -> Result<(), ApiError> {
    insert(client, Some(actor), entry).await
}

/// Records one write made from the command line; call it in the write's transaction.
pub async fn record_command_line(
    client: &impl GenericClient,
    entry: Entry,
) -> Result<(), ApiError> {
    insert(client, None, entry).await
}

/// The row of `entry`, by the staff account `actor` or (`None`) the command line.
async fn insert(
    client: &impl GenericClient,
    actor: Option<&Actor>,
    entry: Entry,
) -> Result<(), ApiError> {
    let kind = match actor {
        Some(_) => ActorKind::Staff,
        None => ActorKind::CommandLine,
    };
    db::execute(
        client,
        RECORD_SQL,
        &[
            &kind,
            &actor.map(|a| a.staff_id),
            &actor.map(|a| a.email.as_str()),
            &entry.action,
            &entry.target_type,
            &entry.target_id,
            &entry.before,
            &entry.after,
            &actor.and_then(|a| a.request_id.as_deref()),
        ],
    )
    .await?;
    Ok(())
}

/// One row of the audit log.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 7, "actor": "staff", "staff_id": 1,
    "staff_email": "admin@example.com", "action": "channel.update", "target_type": "channel", "target_id": 3,
    "before": {"id": 3, "price_minor": 19900}, "after": {"id": 3, "price_minor": 24900},
    "request_id": "5f1c0d2e-8a4b-4c3d-9e2f-1a2b3c4d5e6f", "at": "2026-01-01T12:00:00Z"}))]
pub struct Record {
    pub id: i64,
    /// Who made the write: `staff` (the account below) or `cli` (the command line, `subgate
    /// staff …`).
    #[schema(value_type = String, pattern = "^(staff|cli)$")]
    pub actor: ActorKind,
    /// The account that made the write (it may have been deleted since); null for the command
    /// line.
    pub staff_id: Option<i64>,
    /// Its email when it made the write; null for the command line.
    pub staff_email: Option<String>,
    pub action: String,
    pub target_type: String,
    pub target_id: Option<i64>,
    /// The target before the write (null on a create).
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// The target after the write (null on a delete).
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
    pub request_id: Option<String>,
    pub at: DateTime<Utc>,
}

crate::from_row!(Record ["id, actor, staff_id, staff_email, action, target_type, \
                                   target_id, before, after, request_id, at"] {
    id,
    actor,
    staff_id,
    staff_email,
    action,
    target_type,
    target_id,
    before,
    after,
    request_id,
    at,
});

/// The filters of a list; `None` does not filter.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub staff_id: Option<i64>,
    pub action: Option<String>,
    pub target_type: Option<String>,
    pub target_id: Option<i64>,
    /// `at >= from`.
    pub from: Option<DateTime<Utc>>,
    /// `at < to`.
    pub to: Option<DateTime<Utc>>,
}

const LIST_SQL: &str = "SELECT id, actor, staff_id, staff_email, action, target_type, target_id,
            before, after, request_id, at
     FROM audit_log
     WHERE id > $1
       AND ($2::bigint IS NULL OR staff_id = $2)
       AND ($3::text IS NULL OR action = $3)
       AND ($4::text IS NULL OR target_type = $4)
       AND ($5::bigint IS NULL OR target_id = $5)
       AND ($6::timestamptz IS NULL OR at >= $6)
       AND ($7::timestamptz IS NULL OR at < $7)
     ORDER BY id LIMIT $8";

/// A page of rows by id, filtered.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Record>, ApiError> {
    let params: [&(dyn ToSql + Sync); 8] = [
        &after,
        &filter.staff_id,
        &filter.action,
        &filter.target_type,
        &filter.target_id,
        &filter.from,
        &filter.to,
        &limit,
    ];
    db::all(client, LIST_SQL, &params).await
}
