//! The staff's view of the outbox: lists, queue depths, retries and the wake of a chat's paused
//! effects.

use super::*;

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub status: Option<Status>,
    pub kind: Option<Kind>,
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
}

pub(super) const LIST_SQL: &str = concat!(
    "SELECT ",
    effect_columns!(),
    " FROM effects
     WHERE id > $1
       AND ($2::text IS NULL OR status = $2::text)
       AND ($3::text IS NULL OR kind = $3::text)
       AND ($4::bigint IS NULL OR membership_id = $4)
       AND ($5::bigint IS NULL OR payment_id = $5)
     ORDER BY id LIMIT $6"
);

/// Up to `limit` effects with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl deadpool_postgres::GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Effect>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.status,
            &filter.kind,
            &filter.membership_id,
            &filter.payment_id,
            &limit,
        ],
    )
    .await
}

pub(super) const GET_SQL: &str =
    concat!("SELECT ", effect_columns!(), " FROM effects WHERE id = $1");

/// The effect with this id, if any.
pub async fn get(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<Effect>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// Where the effect of one dedupe key stands (the state of the work it stands for, such as a
/// refund staff asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedState {
    pub id: i64,
    pub status: Status,
    pub last_error: Option<String>,
}

crate::from_row!(KeyedState ["id, status, last_error"] {
    id,
    status,
    last_error,
});

pub(super) const BY_KEY_SQL: &str =
    "SELECT id, status, last_error FROM effects WHERE dedupe_key = $1";

/// The effect enqueued under `dedupe_key`, if any: its id, status and last error.
pub async fn by_key(
    client: &impl deadpool_postgres::GenericClient,
    dedupe_key: &str,
) -> Result<Option<KeyedState>, ApiError> {
    db::opt(client, BY_KEY_SQL, &[&dedupe_key]).await
}

pub(super) const PENDING_IN_CHAT_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM effects WHERE status = 'pending' AND chat_id = $1)
         OR EXISTS (SELECT 1 FROM sweep_queue WHERE chat_id = $1) AS pending";

/// Whether effects are still to be performed in chat `chat_id` (a revoke still to kick
/// someone, a grant still to send its link), counting the sweep's queued ones.
pub async fn pending_in_chat(
    client: &impl deadpool_postgres::GenericClient,
    chat_id: i64,
) -> Result<bool, ApiError> {
    Ok(db::row_one(client, PENDING_IN_CHAT_SQL, &[&chat_id])
        .await?
        .try_get("pending")?)
}

/// The select list of [`QueueDepth`], over `effects` grouped by kind and status.
macro_rules! queue_depth_columns {
    () => {
        "kind, status, count(*) AS count,
         EXTRACT(EPOCH FROM statement_timestamp() - min(created_at))::float8 AS oldest_secs"
    };
}

pub(super) const QUEUE_SQL: &str = concat!(
    "SELECT kind, status, sum(count)::bigint AS count, max(oldest_secs) AS oldest_secs
     FROM (
         SELECT ",
    queue_depth_columns!(),
    " FROM effects WHERE status IN ('pending', 'failed')
         GROUP BY kind, status
         UNION ALL
         SELECT ",
    queue_depth_columns!(),
    " FROM (SELECT kind, 'pending' AS status, created_at FROM sweep_queue) q
         GROUP BY kind, status
     ) d
     GROUP BY kind, status"
);

/// How many effects of one kind wait in one status that makes a queue (`pending` or
/// `failed`), and the age of the oldest of them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDepth {
    pub kind: Kind,
    pub status: Status,
    pub count: i64,
    /// Seconds since the oldest of them was created.
    pub oldest_secs: f64,
}

crate::from_row!(QueueDepth [queue_depth_columns!()] {
    kind,
    status,
    count,
    oldest_secs,
});

/// The effects not done, by kind and status (only the pairs that have any), over the status
/// index, the sweep's queued rows counted as pending effects of their kind: what the metrics
/// sampler reports.
pub async fn queue_depths(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Vec<QueueDepth>, ApiError> {
    db::all(client, QUEUE_SQL, &[]).await
}

/// Sends the effects matching `filter` (SQL over `effects`) back to the queue: `pending`, due
/// now, and for a dead letter a fresh budget — no attempts, no first failure. The payments of
/// refunds among them go from `refund_failed` back to `refund_pending`, in the same statement,
/// so the worker refunds them instead of skipping them. The rows `sent` are what `select`
/// (a query over them) answers.
macro_rules! send_back_sql {
    ($filter:expr; $($select:expr),+) => {
        concat!(
            "WITH sent AS (
                 UPDATE effects SET status = 'pending',
                     attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                     first_failed_at = CASE WHEN status = 'failed' THEN NULL
                                            ELSE first_failed_at END,
                     next_attempt_at = statement_timestamp(),
                     updated_at = statement_timestamp()
                 WHERE ",
            $filter,
            "
                 RETURNING ",
            effect_columns!(),
            "
             ), payments_back AS (
                 UPDATE payments p SET outcome = 'refund_pending',
                     updated_at = statement_timestamp()
                 FROM sent
                 WHERE sent.kind = 'refund' AND p.id = sent.payment_id
                   AND p.outcome = 'refund_failed'
             ) ",
            $($select),+
        )
    };
}

pub(super) const RETRY_LOCK_SQL: &str =
    "SELECT status, COALESCE(lease_until > statement_timestamp(), false) AS leased
     FROM effects WHERE id = $1 FOR UPDATE NOWAIT";
pub(super) const RETRY_ONE_SQL: &str =
    send_back_sql!("id = $1"; "SELECT ", effect_columns!(), " FROM sent");
pub(super) const RETRY_ALL_SQL: &str = send_back_sql!(
    "status = 'failed'
       AND ($1::text IS NULL OR kind = $1::text)
       AND ($2::bigint IS NULL OR membership_id = $2)
       AND ($3::bigint IS NULL OR payment_id = $3)";
    "SELECT count(*) AS retried FROM sent"
);

/// Why staff cannot send an effect back to the queue now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryRefusal {
    /// It is done: there is nothing to retry.
    Done,
    /// A worker is performing it at this moment (leased, or recording under its row lock).
    InFlight,
}

/// Sends effect `id` back to the queue (a dead letter with a fresh budget; a pending one due
/// now); `Ok(None)` when there is no such effect. Never waits for a worker recording it.
pub async fn retry(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<Option<Result<Effect, RetryRefusal>>, ApiError> {
    let stmt = tx.prepare_cached(RETRY_LOCK_SQL).await?;
    let row = match tx.query_opt(&stmt, &[&id]).await {
        Ok(row) => row,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            return Ok(Some(Err(RetryRefusal::InFlight)));
        }
        Err(e) => return Err(e.into()),
    };
    let Some(row) = row else {
        return Ok(None);
    };
    let (status, leased): (Status, bool) = (row.try_get("status")?, row.try_get("leased")?);
    if status == Status::Done {
        return Ok(Some(Err(RetryRefusal::Done)));
    }
    if leased {
        return Ok(Some(Err(RetryRefusal::InFlight)));
    }
    Ok(db::opt(tx, RETRY_ONE_SQL, &[&id]).await?.map(Ok))
}

/// Sends every dead letter matching `filter` (its `status` is ignored: only `failed` ones are
/// retried) back to the queue, as [`retry`] does; returns how many.
pub async fn retry_all(tx: &Transaction<'_>, filter: &Filter) -> Result<i64, ApiError> {
    let row = db::row_one(
        tx,
        RETRY_ALL_SQL,
        &[&filter.kind, &filter.membership_id, &filter.payment_id],
    )
    .await?;
    Ok(row.try_get("retried")?)
}

pub(super) const WAKE_CHAT_SQL: &str = "UPDATE effects
     SET next_attempt_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE chat_id = $1 AND status = 'pending' AND next_attempt_at > statement_timestamp()";

/// Makes every pending effect of chat `chat` due now: the bot's rights there came back, and the
/// effects that waited for them (backing off while refused) should not wait out their back-off.
/// Returns how many were woken.
pub async fn wake_chat(
    client: &impl deadpool_postgres::GenericClient,
    chat: i64,
) -> Result<u64, ApiError> {
    db::execute(client, WAKE_CHAT_SQL, &[&chat]).await
}

pub(super) const PAUSED_BY_RIGHTS_SQL: &str = "SELECT count(*) AS paused FROM effects e
     JOIN channels c ON c.telegram_chat_id = e.chat_id
     WHERE e.status = 'pending' AND c.telegram_status = 'no_rights'
       AND e.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')";

/// Pending access effects (grant, revoke, join decisions, unban) waiting in chats where the
/// bot has no rights.
pub async fn paused_by_rights(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<i64, ApiError> {
    Ok(db::row_one(client, PAUSED_BY_RIGHTS_SQL, &[])
        .await?
        .try_get("paused")?)
}
