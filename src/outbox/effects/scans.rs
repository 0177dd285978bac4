//! Scans that enqueue effects in batches (the refunds of Stars payments pending a refund).

use super::*;

/// Rows one scan statement enqueues at most; a scan repeats until a statement finds fewer.
pub const SCAN_BATCH: i64 = 1000;

pub(super) const PENDING_REFUNDS_SQL: &str = "INSERT INTO effects
         (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'refund', d.id, d.order_id, d.user_id,
            jsonb_build_object('charge_id', d.external_id), d.key
     FROM (
         SELECT p.id, p.order_id, p.external_id, 'refund:' || p.id AS key,
                COALESCE(CASE WHEN p.payer ~ '^[0-9]{1,18}$' THEN p.payer::bigint END,
                         s.telegram_user_id) AS user_id
         FROM payments p LEFT JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.outcome = 'refund_pending' AND p.gateway = 'telegram_stars'
     ) AS d
     WHERE d.user_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $1
     ON CONFLICT (dedupe_key) DO NOTHING";

/// Enqueues one refund for every `refund_pending` Telegram Stars payment that has none yet
/// (the payment row itself is the durable intent: the payment core marks it in its own
/// transaction). The refund goes to the payer the door recorded. Returns how many.
pub async fn enqueue_pending_refunds(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<u64, ApiError> {
    insert_in_batches(client, PENDING_REFUNDS_SQL, &[&SCAN_BATCH]).await
}

/// Runs an `INSERT … SELECT … LIMIT` scan whose limit parameter is [`SCAN_BATCH`] again until a
/// round inserts fewer than that, so no single statement enqueues an unbounded number of rows.
pub async fn insert_in_batches(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, ApiError> {
    let mut total = 0;
    loop {
        let n = db::execute(client, sql, params).await?;
        total += n;
        if (n as i64) < SCAN_BATCH {
            return Ok(total);
        }
    }
}
