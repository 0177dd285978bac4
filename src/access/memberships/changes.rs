//! Staff corrections, what a refunded payment bought taken back, the event and effect of every
//! change, and deletions.

use super::*;

const CORRECT_SQL: &str = concat!(
    "UPDATE memberships SET expires_at = COALESCE($2, expires_at),
         status = COALESCE($3, status), updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    membership_columns!()
);

/// A staff correction of the locked membership `before`: writes exactly the given
/// `expires_at` and/or `status` (no seat check, no extension) and records it as one `staff`
/// event. The caller holds the lock order up to the membership row ([`lock`]).
pub async fn write_correction(
    tx: &Transaction<'_>,
    before: &Membership,
    expires_at: Option<Expiry>,
    status: Option<Status>,
) -> Result<Membership, ApiError> {
    let after: Membership = db::one(tx, CORRECT_SQL, &[&before.id, &expires_at, &status]).await?;
    record_event(tx, Some(before), &after, Cause::Staff).await?;
    Ok(after)
}

const TAKE_BACK_DAYS_SQL: &str = concat!(
    "UPDATE memberships
     SET expires_at = expires_at - make_interval(days => $2),
         status = CASE WHEN expires_at - make_interval(days => $2) <= statement_timestamp()
                       THEN $3 ELSE status END,
         updated_at = statement_timestamp()
     WHERE id = $1 AND isfinite(expires_at) RETURNING ",
    membership_columns!()
);

/// Takes `days` back from the locked membership `before` ([`lock`]): the reward days a
/// buyer-referrer was given for a purchase since refunded. Recorded as one `referral_back`
/// event; a membership whose new expiry is past goes to `expired` (its revoke enqueued as for
/// every ending). An `expired` or lifetime membership is left alone. Returns the membership
/// after the change; `None` when nothing changed. The caller holds the lock order up to the
/// membership row.
pub async fn take_back_days(
    tx: &Transaction<'_>,
    before: &Membership,
    days: i32,
) -> Result<Option<Membership>, ApiError> {
    if !before.status.holds_access() {
        return Ok(None);
    }
    let Some(after) = db::opt::<Membership>(
        tx,
        TAKE_BACK_DAYS_SQL,
        &[&before.id, &days, &Status::Expired],
    )
    .await?
    else {
        return Ok(None);
    };
    record_event(tx, Some(before), &after, Cause::ReferralBack).await?;
    Ok(Some(after))
}

const EXTENDED_BY_SQL: &str = "SELECT DISTINCT m.subscriber_id, m.channel_id
     FROM membership_events e JOIN memberships m ON m.id = e.membership_id
     WHERE e.payment_id = $1 AND e.cause = $2
     ORDER BY m.channel_id";

/// The (subscriber, channel) pairs of the memberships payment `payment_id` extended (its
/// `payment` events), in ascending channel id: a bundle's payment extended one per channel of
/// its plan. A membership deleted since is not among them (its events went with it). Read
/// without a lock; the caller locks the pairs in the lock order and then [`take_back`] reads
/// the events again under the membership's lock.
pub async fn extended_by(
    client: &impl GenericClient,
    payment_id: i64,
) -> Result<Vec<(SubscriberId, ChannelId)>, ApiError> {
    db::rows(
        client,
        EXTENDED_BY_SQL,
        &[&payment_id, &EventCause::Payment],
    )
    .await?
    .iter()
    .map(|r| Ok((r.try_get("subscriber_id")?, r.try_get("channel_id")?)))
    .collect()
}

/// What a payment bought in membership `$1` (its `payment` events, `$2` the payment): the time
/// each extension added — `expires_at_after − GREATEST(expires_at_before, at)`, since an
/// extension ends at `GREATEST(current, now) + term` and its event is written by the same
/// statement (`at` is that statement's now); a first grant has no `before` and `GREATEST`
/// skips the NULL — as an interval of plain microseconds (never calendar days, so the time
/// taken back is exactly the time added, whatever the session's time zone), and whether it made
/// the membership lifetime. An extension of a membership that was lifetime already bought
/// nothing. The new expiry is the current one minus that time, so what later payments added
/// stays; a lifetime purchase gives back the later of the expiry it replaced and now (what
/// earlier payments bought survives it), never later than the current expiry.
///
/// The status: `expired` (`$4`) when the new expiry is at or before now (its grace does not
/// apply: the term was never paid for), and also when the payment is what made the membership
/// hold access — its event starts from no membership or an `expired` one (staff may end one
/// whose `expires_at` is still ahead) — and nothing but the sweep or a refund changed it since:
/// a refund never leaves a membership better off than before the refunded payment. A later
/// payment, grant or staff change stands on its own and keeps the status. Nothing is written
/// when nothing changes (no such events, or a current expiry of `infinity` that a later
/// lifetime purchase set).
const TAKE_BACK_SQL: &str = concat!(
    "WITH bought AS (
         SELECT bool_or(e.expires_at_after = 'infinity'
                        AND e.expires_at_before IS DISTINCT FROM 'infinity') AS for_life,
                max(e.expires_at_before)
                    FILTER (WHERE e.expires_at_after = 'infinity'
                                  AND e.expires_at_before IS DISTINCT FROM 'infinity')
                    AS before_life,
                COALESCE(sum(extract(epoch FROM e.expires_at_after)
                             - extract(epoch FROM GREATEST(e.expires_at_before, e.at)))
                         FILTER (WHERE e.expires_at_after <> 'infinity'), 0) AS secs,
                bool_or(e.from_status IS NULL OR e.from_status = $4) AS revived,
                max(e.id) AS last_event
         FROM membership_events e
         WHERE e.membership_id = $1 AND e.payment_id = $2 AND e.cause = $3
     ), target AS (
         SELECT m.id,
                CASE WHEN b.for_life
                     THEN LEAST(m.expires_at, GREATEST(b.before_life, statement_timestamp()))
                     ELSE m.expires_at
                          - interval '1 microsecond' * round(b.secs * 1000000)::float8 END
                    AS expires_at,
                b.revived AND NOT EXISTS (
                    SELECT 1 FROM membership_events l
                    WHERE l.membership_id = m.id AND l.id > b.last_event
                      AND l.cause NOT IN ($5, $6)) AS ends
         FROM memberships m CROSS JOIN bought b
         WHERE m.id = $1 AND (b.for_life OR b.secs > 0)
     )
     UPDATE memberships m
     SET expires_at = t.expires_at,
         status = CASE WHEN t.ends OR t.expires_at <= statement_timestamp() THEN $4
                       ELSE m.status END,
         updated_at = statement_timestamp()
     FROM target t
     WHERE m.id = t.id AND (m.expires_at <> t.expires_at OR (t.ends AND m.status <> $4))
     RETURNING ",
    "m.id, m.subscriber_id, m.channel_id, m.status, m.expires_at, m.created_at, m.updated_at"
);

/// Takes back from the locked membership `before` ([`lock`]) what payment `payment_id` bought
/// in it ([`TAKE_BACK_SQL`]), recorded as one `refund` event naming the payment
/// ([`record_event`]): a membership that ends by it (its term is over, or the payment is what
/// let its member in) goes to `expired`, and its revoke is enqueued keyed on that event like
/// every other ending. An `expired` membership is left
/// alone (its member is out already; nothing it holds is this payment's). Returns the
/// membership after the change; `None` when nothing changed. The caller holds the lock order
/// up to the membership row.
pub async fn take_back(
    tx: &Transaction<'_>,
    before: &Membership,
    payment_id: i64,
) -> Result<Option<Membership>, ApiError> {
    if !before.status.holds_access() {
        return Ok(None);
    }
    let Some(after) = db::opt::<Membership>(
        tx,
        TAKE_BACK_SQL,
        &[
            &before.id,
            &payment_id,
            &EventCause::Payment,
            &Status::Expired,
            &EventCause::Sweep,
            &EventCause::Refund,
        ],
    )
    .await?
    else {
        return Ok(None);
    };
    record_event(tx, Some(before), &after, Cause::Refund(payment_id)).await?;
    Ok(Some(after))
}

const EVENT_SQL: &str = "INSERT INTO membership_events
         (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
          payment_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     RETURNING id";

/// Records one change of a membership (`before` is `None` on creation): its `membership_events`
/// row first, then the Telegram effect the change asks for ([`effect_of_change`]), keyed on
/// that event's id, in the same transaction. Returns the event's id.
pub async fn record_event(
    tx: &Transaction<'_>,
    before: Option<&Membership>,
    after: &Membership,
    cause: Cause,
) -> Result<i64, ApiError> {
    let (cause_name, payment_id) = cause.parts();
    let event_id: i64 = db::row_one(
        tx,
        EVENT_SQL,
        &[
            &after.id,
            &before.map(|b| b.status),
            &after.status,
            &before.map(|b| b.expires_at),
            &after.expires_at,
            &cause_name,
            &payment_id,
        ],
    )
    .await?
    .try_get("id")?;
    if let Some(kind) = effect_of_change(before, after) {
        enqueue_effect(tx, kind, after, payment_id, event_id).await?;
    }
    Ok(event_id)
}

/// What a membership change asks Telegram to do, if anything (pure): a grant when it starts
/// holding access, a receipt when a member's term is extended, a revoke when it stops holding
/// access, a grace notice when it enters grace.
pub fn effect_of_change(before: Option<&Membership>, after: &Membership) -> Option<Kind> {
    use Status::*;
    let was = before.map(|b| b.status);
    match (was, after.status) {
        (None | Some(Expired), Active) => Some(Kind::Grant),
        (Some(Active | Grace), Active)
            if before.is_some_and(|b| after.expires_at > b.expires_at) =>
        {
            Some(Kind::RenewalReceipt)
        }
        (Some(Active | Grace), Expired) => Some(Kind::Revoke),
        (Some(Active), Grace) => Some(Kind::GraceNotice),
        _ => None,
    }
}

const CHANGE_EFFECT_SQL: &str = concat!(
    "INSERT INTO effects
         (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
     SELECT $2, m.id, $3, c.telegram_chat_id, s.telegram_user_id, ",
    effects::expiry_payload_sql!("$4::timestamptz"),
    ", ",
    effects::transition_key_sql!("$5::text", "m.id", "$6::bigint"),
    "
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     WHERE m.id = $1
     FOR KEY SHARE OF c, s"
);

/// Enqueues the effect `kind` of a change of `after`, keyed on the change's event
/// ([`effects::transition_key`]): one effect per transition.
async fn enqueue_effect(
    tx: &Transaction<'_>,
    kind: Kind,
    after: &Membership,
    payment_id: Option<i64>,
    event_id: i64,
) -> Result<(), ApiError> {
    let Some(what) = effects::transition_prefix(kind) else {
        return Ok(());
    };
    // One statement reads the Telegram ids and inserts, so the effect names who they are now.
    // The channel and subscriber rows are key-share locked, as a foreign key would lock them
    // (an update of an existing membership makes no foreign-key check, so nothing else does):
    // a change of the channel's `telegram_chat_id` or the subscriber's `telegram_user_id`
    // (each locks its row `FOR UPDATE`, then refuses while memberships hold access — and, for
    // a chat, while effects for it are pending) waits for this transaction, or this statement
    // waits for it and reads the new id. So a membership made live concurrently with such a
    // change can never be left with an effect aimed at the old chat or the old account. (A
    // staff correction already holds the subscriber's lock, taken by [`lock`] in the lock
    // order; taking it again here waits for nothing.)
    // No `ON CONFLICT`: the key is new by construction (an event id); a clash is a bug to see.
    db::execute(
        tx,
        CHANGE_EFFECT_SQL,
        &[
            &after.id,
            &kind,
            &payment_id,
            &after.expires_at,
            &what,
            &event_id,
        ],
    )
    .await?;
    Ok(())
}

/// The `DELETE` of membership `$1` (`gone`: the rows removed, as they were when removed), then
/// one revoke (`revoke:{membership}:deleted`) for each one whose member still held access
/// (active or grace), in the deletion's transaction. A deleted expired membership needs none:
/// its expiry enqueued one (the sweep's, still queued, is made even after the deletion,
/// [`crate::outbox::effects::materialize_sweep_queue`]). The effect outlives the row: it carries
/// the chat and the user, its `membership_id` is NULL (the row it would name is being deleted by
/// the same statement; `ON DELETE SET NULL` would clear it anyway) and the membership id is kept
/// in the payload. The worker performs a revoke whose membership is gone.
const DELETE_SQL: &str = include_str!("delete.sql");
/// [`DELETE_SQL`] of every membership of subscriber `$1`.
const DELETE_OF_SUBSCRIBER_SQL: &str = include_str!("delete_of_subscriber.sql");

/// Deletes membership `id` (its events go with it) and, if it still held access, enqueues the
/// revoke that takes the member out of the chat ([`DELETE_SQL`]), in one
/// statement. Returns whether it existed. The caller holds the pair's advisory lock (and the
/// channel lock of a seat-limited channel).
///
/// The `DELETE … RETURNING` sees each row as it is when removed (after waiting for a writer
/// that holds it), so the revoke is decided on the final status, not on an earlier read.
pub async fn delete(tx: &Transaction<'_>, id: i64) -> Result<bool, ApiError> {
    let gone: i64 = db::row_one(tx, DELETE_SQL, &[&id])
        .await?
        .try_get("deleted")?;
    Ok(gone > 0)
}

/// Deletes every membership of a subscriber, with a revoke for each one that held access, like
/// [`delete`]; the subscriber's `DELETE` calls it first, since its cascade would remove them
/// without a word to Telegram. The caller holds the subscriber row `FOR UPDATE`, so no
/// membership of it can be created meanwhile. Returns how many were deleted.
pub async fn delete_of_subscriber(
    tx: &Transaction<'_>,
    subscriber_id: i32,
) -> Result<u64, ApiError> {
    let gone: i64 = db::row_one(tx, DELETE_OF_SUBSCRIBER_SQL, &[&subscriber_id])
        .await?
        .try_get("deleted")?;
    Ok(gone as u64)
}
