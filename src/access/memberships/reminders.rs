//! The reminders of memberships about to end.

use super::*;

const DUE_REMINDERS_SQL: &str = concat!(
    "INSERT INTO effects
         (kind, membership_id, chat_id, user_id, payload, dedupe_key)
     SELECT 'reminder', d.id, d.telegram_chat_id, d.telegram_user_id, ",
    effects::expiry_payload_sql!("d.expires_at"),
    ", d.key
     FROM (
         SELECT m.id, c.telegram_chat_id, s.telegram_user_id, m.expires_at, ",
    effects::reminder_key_sql!("m.id", "m.expires_at"),
    " AS key
         FROM memberships m
         JOIN subscribers s ON s.id = m.subscriber_id
         JOIN channels c ON c.id = m.channel_id
         WHERE m.status = 'active' AND c.active
           AND m.expires_at > statement_timestamp()
           AND m.expires_at <= statement_timestamp() + make_interval(days => $1)
     ) AS d
     WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $2
     ON CONFLICT (dedupe_key) DO NOTHING"
);

/// Enqueues a reminder for every active membership of an active channel whose `expires_at`
/// is within `reminder_days` from now, once per (membership, expiry) — so once per period: a
/// renewal moves `expires_at` and the next period gets its own reminder (never for lifetime
/// access: `infinity` is within no number of days, so the reminder key's epoch is always
/// finite). Returns how many.
pub async fn enqueue_due_reminders(
    client: &impl GenericClient,
    reminder_days: u32,
) -> Result<u64, ApiError> {
    if reminder_days == 0 {
        return Ok(0);
    }
    let days = reminder_days as i32;
    effects::insert_in_batches(client, DUE_REMINDERS_SQL, &[&days, &effects::SCAN_BATCH]).await
}
