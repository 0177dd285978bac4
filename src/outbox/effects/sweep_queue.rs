//! The sweep's effects: queued by its batch write, made effects a chunk at a time.

use super::*;

/// The sweep's effects, as the last data-modifying CTE of its batch write (`access/sweep_apply_batch.sql`, which spells it whole; this copy serves the benchmarks)
/// ([`crate::access::sweep::apply_batch`]): for every membership it moved to `expired` a revoke, and for
/// every one it moved to `grace` a grace notice, recorded in the `sweep_queue` (migration 0017)
/// in the batch's statement and so in its transaction; the worker turns queued rows into
/// `effects` rows a chunk at a time ([`materialize_sweep_queue`]). It reads the CTEs
/// `updated(id, subscriber_id, channel_id, from_status, status, expires_at)` — the rows the
/// `UPDATE` actually changed — and `events(id, membership_id)` — the `membership_events` rows
/// written for them ([`crate::access::sweep::SWEEP_EVENTS_CTE`]) — so it needs no second look at
/// `memberships`. Each row is keyed on its transition's event, and the effect made of it is
/// keyed as [`transition_key`] spells it (`revoke:{membership}:ev{event}`), so a membership
/// expired again after a staff re-activation gets a second revoke instead of being
/// deduplicated into the first. The Telegram ids are read in the same statement, so the effect
/// names who they were at the transition. (No channel lock here, unlike a change recorded by
/// [`crate::access::memberships::record_event`]: the sweep only moves live memberships, which block a
/// chat change until it commits, and its queued rows block it after, [`pending_in_chat`].)
/// Rows are inserted in membership id order; the `ORDER BY` also makes PostgreSQL join the
/// two CTEs by merging them (both come in membership id order) instead of comparing every
/// pair of a batch's rows in a nested loop, which cost more than the rest of the statement.
pub const SWEEP_EFFECTS_CTE: &str = "sweep_effects AS (
    INSERT INTO sweep_queue (event_id, membership_id, kind, chat_id, user_id, expires_at)
    SELECT ev.id, u.id,
           CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace_notice' END,
           c.telegram_chat_id, s.telegram_user_id, u.expires_at
    FROM updated u
    JOIN events ev ON ev.membership_id = u.id
    JOIN subscribers s ON s.id = u.subscriber_id
    JOIN channels c ON c.id = u.channel_id
    WHERE (u.from_status IN ('active', 'grace') AND u.status = 'expired')
       OR (u.from_status = 'active' AND u.status = 'grace')
    ORDER BY u.id
)";

/// Queued sweep rows made into effects per call of [`materialize_sweep_queue`]. The worker
/// calls it at the start of every run and whenever its lanes find nothing due, so the outbox
/// holds a few chunks of a sweep's effects at a time (a million revokes take Telegram's pace,
/// hours, to perform), and an effect committed meanwhile (a grant) waits behind at most one
/// chunk per lane (100 effects with the default four lanes: about 3.5 s at Telegram's pace)
/// instead of behind every revoke of the sweep.
pub const SWEEP_QUEUE_CHUNK: i64 = 25;

/// The oldest `$1` rows of the `sweep_queue` that no one else is taking, deleted and made
/// effects in one statement: each becomes exactly one effect, keyed as [`transition_key`]
/// spells it, with its expiry as payload (a revoke whose membership has been deleted since
/// names none and carries the deleted revoke's payload, as `access/memberships/delete.sql` writes it;
/// its membership, when it still exists, is key-share locked so it cannot vanish before the
/// effect commits). `ON CONFLICT` keeps a row that somehow already has its effect from
/// making a second one.
pub(super) const MATERIALIZE_SWEEP_QUEUE_SQL: &str = concat!(
    "WITH taken AS (
         DELETE FROM sweep_queue q
         WHERE q.event_id IN (
             SELECT event_id FROM sweep_queue ORDER BY event_id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING q.event_id, q.membership_id, q.kind, q.chat_id, q.user_id, q.expires_at
     ), made AS (
         INSERT INTO effects (kind, membership_id, chat_id, user_id, payload, dedupe_key)
         SELECT t.kind, m.id, t.chat_id, t.user_id,
                CASE WHEN m.id IS NULL AND t.kind = 'revoke' THEN ",
    deleted_revoke_payload_sql!("t.membership_id", "t.expires_at"),
    " ELSE ",
    expiry_payload_sql!("t.expires_at"),
    " END, ",
    transition_key_sql!(
        "CASE WHEN t.kind = 'revoke' THEN 'revoke' ELSE 'grace' END",
        "t.membership_id",
        "t.event_id"
    ),
    "
         FROM taken t
         LEFT JOIN LATERAL (
             SELECT id FROM memberships WHERE id = t.membership_id FOR KEY SHARE
         ) m ON true
         ORDER BY t.event_id
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING 1
     )
     SELECT (SELECT count(*) FROM taken) AS taken, (SELECT count(*) FROM made) AS made"
);

/// Makes effects of up to [`SWEEP_QUEUE_CHUNK`] queued sweep rows (revokes and grace notices,
/// oldest transition first), in one statement; returns how many rows it took. Concurrent
/// callers take different rows (`SKIP LOCKED`); a failed call leaves its rows queued.
pub async fn materialize_sweep_queue(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<u64, ApiError> {
    let row = db::row_one(client, MATERIALIZE_SWEEP_QUEUE_SQL, &[&SWEEP_QUEUE_CHUNK]).await?;
    let (taken, made): (i64, i64) = (row.try_get("taken")?, row.try_get("made")?);
    if taken > 0 {
        tracing::info!(taken, made, "sweep effects made from the queue");
    }
    Ok(taken as u64)
}
