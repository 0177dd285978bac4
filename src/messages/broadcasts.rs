//! Broadcasts: a text per language to a [`Segment`], now or at a time, optionally paid.
//!
//! - **Start.** A broadcast due now starts in the transaction that creates it; a scheduled one
//!   when the worker finds it due ([`start_due`], every run). Starting fixes the recipient list:
//!   one statement writes a `messages` row and its `member_message` effect per buyer of the
//!   segment as it is at that moment (`broadcast:{id}:{subscriber}`, unique, so a buyer is a
//!   recipient once), and the broadcast becomes `sending` with its `recipients`.
//! - **Cancel.** `cancelled`: every recipient whose message was not begun is `skipped` and its
//!   effect closed, in one transaction; a message the worker had already marked as being sent
//!   (its call under way) is recorded as it ends.
//! - **Finish.** A sending broadcast whose every message is decided is `finished`
//!   ([`finish_done`], every run of the worker), and `broadcast.finished` goes to the owner's
//!   endpoints in that transaction.
//! - **Paid.** With `paid.max_stars` the messages go with `allow_paid_broadcast` on the paid
//!   pace while the budget lasts: each process reserves messages from it in steps
//!   ([`reserve_paid`], under the broadcast's row lock, never past `max_stars` × 10 at 0.1 Star
//!   a message), and the rest go at the free pace. A reservation a crash left unused is never
//!   spent, so what is paid stays under the budget.
//! - **Counters** are read from the messages: `sent`, `blocked`, `failed`, `skipped`, `pending`
//!   and `paid_messages` (sent with `allow_paid_broadcast`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{automations::check_texts, segment::Segment};
use crate::{
    catalog::promo_codes, common::error::ApiError, db, outbox::outbound, present::locale::Language,
};

crate::text_enum! {
    /// Where a broadcast stands.
    pub enum Status {
        /// Waiting for its `send_at`.
        Scheduled => "scheduled",
        /// Its recipients are fixed and being sent to.
        Sending => "sending",
        /// Every message decided.
        Finished => "finished",
        /// Cancelled by staff: no new sends after it.
        Cancelled => "cancelled",
    }
}

/// A broadcast's buy button: a plan, with a promo code applied when given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Button {
    pub plan_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promo_code: Option<String>,
}

/// A paid broadcast's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Paid {
    /// Stars it may spend at most (0.1 Star a paid message).
    pub max_stars: i32,
}

/// The most Stars one broadcast may be given.
pub const MAX_STARS: i32 = 1_000_000;

/// A broadcast as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 3, "status": "sending", "texts": {"en": "New season, { $name }!"},
    "segment": {"statuses": ["active"]}, "button": null, "send_at": "2025-01-01T10:00:00Z",
    "paid": null, "recipients": 1250, "sent": 700, "blocked": 3, "failed": 0, "skipped": 1,
    "pending": 546, "paid_messages": 0, "created_at": "2025-01-01T10:00:00Z",
    "started_at": "2025-01-01T10:00:00Z", "finished_at": null, "cancelled_at": null}))]
pub struct Broadcast {
    pub id: i64,
    pub status: Status,
    /// A Project Fluent pattern per language.
    #[schema(value_type = Object)]
    pub texts: Value,
    pub segment: Segment,
    pub button: Option<Button>,
    pub send_at: DateTime<Utc>,
    pub paid: Option<Paid>,
    /// Fixed when sending starts; until then, the segment's size when it was made.
    pub recipients: i32,
    pub sent: i64,
    pub blocked: i64,
    pub failed: i64,
    pub skipped: i64,
    pub pending: i64,
    /// Messages sent with `allow_paid_broadcast` (0.1 Star each).
    pub paid_messages: i64,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
}

macro_rules! broadcast_columns {
    () => {
        "b.id, b.status, b.texts, b.segment, b.button, b.send_at, b.paid_max_stars,
         b.recipients, b.created_at, b.started_at, b.finished_at, b.cancelled_at,
         c.sent, c.blocked, c.failed, c.skipped, c.pending, c.paid_messages"
    };
}

/// The counters of broadcast `b`, read from its messages.
macro_rules! broadcast_counters {
    () => {
        " LEFT JOIN LATERAL (
             SELECT count(*) FILTER (WHERE m.outcome = 'sent') AS sent,
                    count(*) FILTER (WHERE m.outcome = 'blocked') AS blocked,
                    count(*) FILTER (WHERE m.outcome = 'failed') AS failed,
                    count(*) FILTER (WHERE m.outcome = 'skipped') AS skipped,
                    count(*) FILTER (WHERE m.outcome IS NULL) AS pending,
                    count(*) FILTER (WHERE m.outcome = 'sent' AND m.paid) AS paid_messages
             FROM messages m
             WHERE m.broadcast_id = b.id
         ) c ON true"
    };
}

impl db::FromRow for Broadcast {
    const COLUMNS: &'static str = broadcast_columns!();

    fn from_row(row: &tokio_postgres::Row) -> Result<Broadcast, tokio_postgres::Error> {
        let segment: Value = row.try_get("segment")?;
        let button: Option<Value> = row.try_get("button")?;
        let max_stars: Option<i32> = row.try_get("paid_max_stars")?;
        Ok(Broadcast {
            id: row.try_get("id")?,
            status: row.try_get("status")?,
            texts: row.try_get("texts")?,
            // Written only by `create`, from checked values.
            segment: serde_json::from_value(segment).unwrap_or_default(),
            button: button.and_then(|b| serde_json::from_value(b).ok()),
            send_at: row.try_get("send_at")?,
            paid: max_stars.map(|max_stars| Paid { max_stars }),
            recipients: row.try_get("recipients")?,
            sent: row.try_get("sent")?,
            blocked: row.try_get("blocked")?,
            failed: row.try_get("failed")?,
            skipped: row.try_get("skipped")?,
            pending: row.try_get("pending")?,
            paid_messages: row.try_get("paid_messages")?,
            created_at: row.try_get("created_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            cancelled_at: row.try_get("cancelled_at")?,
        })
    }
}

const GET_SQL: &str = concat!(
    "SELECT ",
    broadcast_columns!(),
    " FROM broadcasts b",
    broadcast_counters!(),
    " WHERE b.id = $1"
);
const LIST_SQL: &str = concat!(
    "SELECT ",
    broadcast_columns!(),
    " FROM broadcasts b",
    broadcast_counters!(),
    " WHERE b.id > $1 ORDER BY b.id LIMIT $2"
);

/// Broadcast `id`.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Broadcast>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// Broadcasts with ids above `after`, at most `limit`, by id.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<Broadcast>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &limit]).await
}

/// A broadcast to make.
#[derive(Debug, Clone)]
pub struct NewBroadcast {
    pub texts: BTreeMap<String, String>,
    pub segment: Segment,
    pub button: Option<Button>,
    /// `None`: now.
    pub send_at: Option<DateTime<Utc>>,
    pub paid: Option<Paid>,
}

const INSERT_SQL: &str = "INSERT INTO broadcasts (status, texts, segment, button, send_at,
                                                  paid_max_stars, recipients)
     VALUES ('scheduled', $1, $2, $3, coalesce($4, statement_timestamp()), $5, $6)
     RETURNING id, send_at <= statement_timestamp() AS due";
const PLAN_SQL: &str = "SELECT kind = 'paid' AND active AS buyable FROM plans WHERE id = $1";

/// Makes broadcast `b`, starting it now when it is due (`send_at` absent or past). 422 naming
/// the field for texts the bot cannot use (as an automation's, `{ $code }` only with a
/// button's code), a segment's bad values, a button's plan that is not a paid active plan or
/// an unknown code, a budget out of range.
pub async fn create(
    tx: &Transaction<'_>,
    b: &NewBroadcast,
    default: Language,
) -> Result<Broadcast, ApiError> {
    let mut errors = BTreeMap::new();
    if b.texts.is_empty() {
        errors.insert(
            "texts".into(),
            "write a text in at least one language".into(),
        );
    }
    let code = b.button.as_ref().and_then(|x| x.promo_code.as_deref());
    check_texts(&b.texts, code.is_some(), &mut errors);
    b.segment.check(&mut errors);
    if let Some(button) = &b.button {
        let buyable = db::row_opt(tx, PLAN_SQL, &[&button.plan_id])
            .await?
            .map(|r| r.try_get::<_, bool>("buyable"))
            .transpose()?;
        if buyable != Some(true) {
            errors.insert(
                "button.plan_id".into(),
                "must be an active paid plan".into(),
            );
        }
        if let Some(code) = code
            && promo_codes::preview(tx, code, None).await?.is_none()
        {
            errors.insert("button.promo_code".into(), "no such promo code".into());
        }
    }
    if let Some(p) = b.paid
        && !(1..=MAX_STARS).contains(&p.max_stars)
    {
        errors.insert(
            "paid.max_stars".into(),
            format!("must be from 1 to {MAX_STARS}"),
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let preview = super::segment::preview(tx, &b.segment, default).await?;
    let texts = serde_json::to_value(&b.texts).expect("texts serialize");
    let segment = serde_json::to_value(&b.segment).expect("a segment serializes");
    let button = b
        .button
        .as_ref()
        .map(|x| serde_json::to_value(x).expect("a button serializes"));
    let max_stars = b.paid.map(|p| p.max_stars);
    let recipients = i32::try_from(preview.recipients).unwrap_or(i32::MAX);
    let row = db::row_one(
        tx,
        INSERT_SQL,
        &[
            &texts,
            &segment,
            &button,
            &b.send_at,
            &max_stars,
            &recipients,
        ],
    )
    .await?;
    let id: i64 = row.try_get("id")?;
    tracing::info!(broadcast_id = id, recipients, "broadcast created");
    if row.try_get("due")? {
        start(tx, id, default).await?;
    }
    get(tx, id).await?.ok_or(ApiError::NotFound("broadcast"))
}

const LOCK_SCHEDULED_SQL: &str =
    "SELECT segment FROM broadcasts WHERE id = $1 AND status = 'scheduled' FOR UPDATE";
const START_SQL: &str = concat!(
    "WITH r AS (\n",
    include_str!("segment.sql"),
    "),
     m AS (
         INSERT INTO messages (subscriber_id, kind, broadcast_id, dedupe_key, language)
         SELECT r.subscriber_id, 'broadcast', $7::bigint,
                'broadcast:' || $7::bigint || ':' || r.subscriber_id,
                r.language
         FROM r
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id, subscriber_id
     ),
     e AS (
         INSERT INTO effects (kind, user_id, payload, dedupe_key)
         SELECT 'member_message', r.telegram_user_id, jsonb_build_object('message_id', m.id),
                'message:' || m.id
         FROM m
         JOIN r ON r.subscriber_id = m.subscriber_id
         RETURNING 1
     )
     SELECT count(*)::integer AS recipients FROM e"
);
const STARTED_SQL: &str = "UPDATE broadcasts
     SET status = 'sending', started_at = statement_timestamp(), recipients = $2
     WHERE id = $1";

/// Starts scheduled broadcast `id` in `tx`: fixes its recipients (see the module doc). Nothing
/// when it is not scheduled any more (started by another worker, cancelled).
pub async fn start(tx: &Transaction<'_>, id: i64, default: Language) -> Result<(), ApiError> {
    let Some(row) = db::row_opt(tx, LOCK_SCHEDULED_SQL, &[&id]).await? else {
        return Ok(());
    };
    let segment: Segment = serde_json::from_value(row.try_get("segment")?).unwrap_or_default();
    let params = segment.params(default);
    let mut values = params.values().to_vec();
    values.push(&id);
    let recipients: i32 = db::row_one(tx, START_SQL, &values)
        .await?
        .try_get("recipients")?;
    db::execute(tx, STARTED_SQL, &[&id, &recipients]).await?;
    tracing::info!(
        broadcast_id = id,
        recipients,
        "broadcast started: recipients fixed"
    );
    Ok(())
}

const DUE_SQL: &str = "SELECT id FROM broadcasts
     WHERE status = 'scheduled' AND send_at <= statement_timestamp()
     ORDER BY send_at, id LIMIT 10";

/// Starts the scheduled broadcasts that are due, each in its own transaction; how many.
pub async fn start_due(
    client: &mut deadpool_postgres::Object,
    default: Language,
) -> Result<u64, ApiError> {
    let due: Vec<i64> = db::rows(&*client, DUE_SQL, &[])
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    for id in &due {
        let tx = client.transaction().await?;
        start(&tx, *id, default).await?;
        tx.commit().await?;
        crate::db::announce_commit();
    }
    Ok(due.len() as u64)
}

const FINISH_SQL: &str = "UPDATE broadcasts b
     SET status = 'finished', finished_at = statement_timestamp()
     WHERE b.status = 'sending'
       AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.broadcast_id = b.id AND m.outcome IS NULL)
     RETURNING b.id";

/// Finishes every sending broadcast whose messages are all decided, and tells the owner's
/// endpoints (`broadcast.finished`) in the same transaction; how many.
pub async fn finish_done(client: &mut deadpool_postgres::Object) -> Result<u64, ApiError> {
    let tx = client.transaction().await?;
    let finished: Vec<i64> = db::rows(&tx, FINISH_SQL, &[])
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    for id in &finished {
        if let Some(b) = get(&tx, *id).await? {
            tracing::info!(
                broadcast_id = id,
                sent = b.sent,
                blocked = b.blocked,
                failed = b.failed,
                skipped = b.skipped,
                paid_messages = b.paid_messages,
                "broadcast finished"
            );
            let data = serde_json::to_value(&b).expect("a broadcast serializes");
            outbound::emit(&tx, "broadcast.finished", &data).await?;
        }
    }
    tx.commit().await?;
    Ok(finished.len() as u64)
}

const LOCK_SQL: &str = "SELECT status FROM broadcasts WHERE id = $1 FOR UPDATE";
const CANCEL_SQL: &str = "UPDATE broadcasts
     SET status = 'cancelled', cancelled_at = statement_timestamp()
     WHERE id = $1";
const SKIP_REST_SQL: &str = "WITH m AS (
         UPDATE messages
         SET outcome = 'skipped', note = 'the broadcast was cancelled',
             sent_at = statement_timestamp()
         WHERE broadcast_id = $1 AND outcome IS NULL AND attempted_at IS NULL
         RETURNING id
     )
     UPDATE effects e
     SET status = 'done', done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL,
         payload = e.payload || '{\"note\": \"skipped: the broadcast was cancelled\"}'
     FROM m
     WHERE e.dedupe_key = 'message:' || m.id AND e.status = 'pending'";

/// Cancels broadcast `id`: no new sends after it (see the module doc). 404 unknown; 409 when
/// it has finished; a cancelled one is answered as it is.
pub async fn cancel(tx: &Transaction<'_>, id: i64) -> Result<Broadcast, ApiError> {
    let Some(row) = db::row_opt(tx, LOCK_SQL, &[&id]).await? else {
        return Err(ApiError::NotFound("broadcast"));
    };
    match row.try_get::<_, Status>("status")? {
        Status::Finished => {
            return Err(ApiError::Conflict(
                "the broadcast has finished: every message was sent".into(),
            ));
        }
        Status::Cancelled => {}
        Status::Scheduled | Status::Sending => {
            db::execute(tx, CANCEL_SQL, &[&id]).await?;
            let skipped = db::execute(tx, SKIP_REST_SQL, &[&id]).await?;
            tracing::info!(broadcast_id = id, skipped, "broadcast cancelled");
        }
    }
    get(tx, id).await?.ok_or(ApiError::NotFound("broadcast"))
}

const PAID_SENDING_SQL: &str = "SELECT
         coalesce(bool_or(paid_reserved < paid_max_stars * 10), false) AS unreserved,
         coalesce(array_agg(id), '{}') AS sending
     FROM broadcasts
     WHERE status = 'sending' AND paid_max_stars IS NOT NULL";

/// The paid broadcasts that are sending, and whether one of them has budget nobody reserved yet
/// (the worker runs more lanes while such budget is left, or it holds some reserved).
pub async fn paid_sending(client: &impl GenericClient) -> Result<(bool, Vec<i64>), ApiError> {
    let row = db::row_one(client, PAID_SENDING_SQL, &[]).await?;
    Ok((row.try_get("unreserved")?, row.try_get("sending")?))
}

/// Refreshes the statistics of the tables a broadcast's sending reads and writes. A broadcast's
/// start writes a message and an effect per recipient at once; until autovacuum's next visit
/// (up to a minute) the planner would plan the worker's statements for the tables as they were
/// before, and a paid broadcast sends thousands a minute. Without the tables' ownership
/// PostgreSQL skips it with a warning.
pub async fn refresh_statistics(client: &impl GenericClient) -> Result<(), ApiError> {
    client.batch_execute("ANALYZE effects, messages").await?;
    Ok(())
}

const RESERVE_SQL: &str = "WITH b AS (
         SELECT id, paid_reserved, paid_max_stars * 10 AS cap
         FROM broadcasts
         WHERE id = $1 AND status = 'sending' AND paid_max_stars IS NOT NULL
         FOR UPDATE
     )
     UPDATE broadcasts x
     SET paid_reserved = LEAST(b.paid_reserved + $2, b.cap)
     FROM b
     WHERE x.id = b.id AND b.paid_reserved < b.cap
     RETURNING x.paid_reserved - b.paid_reserved AS granted";

/// Reserves up to `want` paid messages of broadcast `id`'s budget; how many it got (0: the
/// budget is spent, or the broadcast is not a sending paid one).
pub async fn reserve_paid(
    client: &impl GenericClient,
    id: i64,
    want: i32,
) -> Result<i32, ApiError> {
    Ok(
        match db::row_opt(client, RESERVE_SQL, &[&id, &want]).await? {
            Some(r) => r.try_get("granted")?,
            None => 0,
        },
    )
}
