//! Recording an attempt (the module doc of [`super`] says the rules): done, put back during an
//! outage or a pause for missing rights, rescheduled at Telegram's `retry_after`, retried with
//! capped exponential backoff ([`backoff`]) or dead-lettered, always under the claim's token;
//! and the payment side of a recorded refund.

use std::time::Duration;

use deadpool_postgres::Transaction;

use super::{
    Options, bans,
    failure::{Attempt, Failure},
};
use crate::{
    app::state::AppState,
    catalog::channels::{self, TelegramStatus},
    common::error::ApiError,
    db,
    messages::sent,
    outbox::effects::{Effect, Kind, Payload, Status},
    payments::{core::Outcome, receipts, refunds},
};

/// First retry delay; each further attempt doubles it, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_CAP: Duration = Duration::from_secs(3600);

/// The delay before attempt `attempts + 1`, with "equal jitter": half fixed, half random, so
/// retries of effects that failed together spread out.
pub fn backoff(attempts: i32) -> Duration {
    let exp = attempts.clamp(1, 20) as u32 - 1;
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << exp.min(16))
        .min(BACKOFF_CAP);
    let half = full / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// How an attempt was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    Done,
    Retry,
    RateLimited,
    Failed,
    /// The lease had been claimed again: nothing recorded.
    Superseded,
    /// Put back, uncounted, while Telegram was unreachable.
    Outage,
    /// Paused: the bot lacks its rights in the chat.
    Paused,
}

/// What recording an effect done sets.
macro_rules! done_set_sql {
    () => {
        "status = 'done', attempts = attempts + 1,
         done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL"
    };
}

const DONE_SQL: &str = concat!(
    "UPDATE effects SET ",
    done_set_sql!(),
    ",
         payload = CASE WHEN $2::text IS NULL THEN payload
                        ELSE payload || jsonb_build_object('note', $2::text) END
     WHERE id = $1 AND lease_token = $3 AND status = 'pending'
     RETURNING status,
         extract(epoch FROM statement_timestamp() - created_at)::float8 AS age_secs"
);

/// Put back due now, neither `attempts` nor `first_failed_at` touched (an outage; a pause for
/// missing rights, only while the chat is marked `no_rights`: `$5`).
const PUT_BACK_SQL: &str = concat!(
    "UPDATE effects SET next_attempt_at = statement_timestamp(), last_error = $2,
         payload = CASE WHEN $3 THEN payload || '{\"verify\": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
       AND (NOT $5 OR chat_id IN (",
    channels::no_rights_chats_sql!(),
    "))
     RETURNING status"
);

const RATE_LIMITED_SQL: &str = "UPDATE effects SET
         next_attempt_at = statement_timestamp() + make_interval(secs => $2),
         last_error = $3, lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
     RETURNING status";

const FAILURE_SQL: &str = "UPDATE effects SET attempts = attempts + 1, last_error = $2,
         first_failed_at = COALESCE(first_failed_at, statement_timestamp()),
         status = CASE WHEN $3 OR COALESCE(first_failed_at, statement_timestamp())
                                  <= statement_timestamp() - make_interval(secs => $4)
                       THEN 'failed' ELSE 'pending' END,
         next_attempt_at = statement_timestamp() + make_interval(secs => $5),
         payload = CASE WHEN $6 THEN payload || '{\"verify\": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $7 AND status = 'pending'
     RETURNING status";

/// Records an attempt in a new short transaction, only while the effect still carries `token`
/// and is pending; otherwise nothing is written (`Superseded`). The payment writes of a refund
/// are made in the same transaction ([`settle_refund`]). A database failure during the attempt
/// records nothing and is returned.
pub(super) async fn record(
    state: &AppState,
    e: &Effect,
    token: i64,
    attempt: Attempt,
    options: &Options,
) -> Result<Recorded, ApiError> {
    if let Err(Failure::Db(err)) = attempt.result {
        return Err(err);
    }
    let mut client = state.db.get().await?;
    let tx = client.transaction().await?;
    let (recorded, error) = record_in(&tx, e, token, attempt, options).await?;
    if recorded == Recorded::Superseded {
        // Nothing of the effect's was written, but a pause may have marked its channel.
        tx.rollback().await?;
    } else {
        tx.commit().await?;
    }
    log_recorded(e, recorded, &error.unwrap_or_default());
    Ok(recorded)
}

/// Records the attempts of a batch of message effects (each with its claim's token) in one
/// short transaction, their statements sent together: each as [`record`] records one, the
/// ones whose claim was taken over writing nothing (`Superseded`). An attempt that failed on
/// the database is not recorded: its claim is given back and its result is the error. A
/// database failure while recording is returned, and nothing is recorded.
pub(super) async fn record_all(
    state: &AppState,
    batch: Vec<(&Effect, i64, Attempt)>,
    options: &Options,
) -> Result<Vec<Result<Recorded, ApiError>>, ApiError> {
    let mut results: Vec<Option<Result<Recorded, ApiError>>> = Vec::new();
    let mut given_back = Vec::new();
    let mut kept = Vec::new();
    for (e, token, attempt) in batch {
        match attempt.result {
            Err(Failure::Db(err)) => {
                given_back.push((e.id, token));
                results.push(Some(Err(err)));
            }
            result => {
                kept.push((results.len(), e, token, Attempt { result, ..attempt }));
                results.push(None);
            }
        }
    }
    if !given_back.is_empty() {
        super::claim::release(state, &given_back).await;
    }
    if !kept.is_empty() {
        let mut client = state.db.get().await?;
        let tx = client.transaction().await?;
        let t = &tx;
        let written =
            futures::future::join_all(kept.into_iter().map(|(i, e, token, attempt)| async move {
                (i, e, record_in(t, e, token, attempt, options).await)
            }))
            .await
            .into_iter()
            .map(|(i, e, w)| w.map(|(recorded, error)| (i, e, recorded, error)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        tx.commit().await?;
        for (i, e, recorded, error) in written {
            log_recorded(e, recorded, &error.unwrap_or_default());
            results[i] = Some(Ok(recorded));
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("each attempt of the batch has its result"))
        .collect())
}

/// Records broadcast messages `sent` — each sent to Telegram: its effect, claim token, message
/// id and text — done and `sent`, and marks message `$5` about to be sent (paid: `$6`;
/// [`sent::mark_attempt`]'s statement), in one statement. Returns the effects recorded (a
/// claim taken over meanwhile records nothing), how many messages were decided, and whether
/// `$5` was marked.
const SENT_AND_MARK_SQL: &str = concat!(
    "WITH done AS (
         UPDATE effects e SET ",
    done_set_sql!(),
    "
         FROM unnest($1::bigint[], $2::bigint[]) AS d(id, token)
         WHERE e.id = d.id AND e.lease_token = d.token AND e.status = 'pending'
         RETURNING e.id),
     decided AS (
         UPDATE messages m SET outcome = 'sent', text = s.text, note = NULL,
             sent_at = statement_timestamp()
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS s(effect_id, message_id, text)
         WHERE m.id = s.message_id AND m.outcome IS NULL
           AND s.effect_id IN (SELECT id FROM done)
         RETURNING m.id),
     marked AS (",
    sent::mark_sql!("$5", "$6"),
    ")
     SELECT array(SELECT id FROM done) AS done,
            (SELECT count(*) FROM decided) AS decided,
            EXISTS (SELECT 1 FROM marked) AS marked"
);

/// A broadcast's message sent to Telegram, to be recorded with the next mark.
pub(super) struct SentMessage<'a> {
    pub(super) effect: &'a Effect,
    pub(super) token: i64,
    pub(super) message_id: i64,
    pub(super) text: String,
}

/// Records `sent` (a batch's broadcast messages Telegram took) done and `sent`, and marks
/// message `id` about to be sent (`paid`), in one statement: a message's result is committed
/// with the next one's mark, so a crash leaves unrecorded only the message being called.
/// Whether `id` was marked, and how each of `sent` was recorded (done, or superseded when its
/// claim was taken over). A database failure is returned: nothing is recorded, nothing marked.
pub(super) async fn record_and_mark(
    state: &AppState,
    sent: &[SentMessage<'_>],
    id: i64,
    paid: bool,
) -> Result<(bool, Vec<Recorded>), ApiError> {
    let client = state.db.get().await?;
    if sent.is_empty() {
        return Ok((sent::mark_attempt(&client, id, paid).await?, Vec::new()));
    }
    let effects: Vec<i64> = sent.iter().map(|s| s.effect.id).collect();
    let tokens: Vec<i64> = sent.iter().map(|s| s.token).collect();
    let messages: Vec<i64> = sent.iter().map(|s| s.message_id).collect();
    let texts: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
    let row = db::row_one(
        &client,
        SENT_AND_MARK_SQL,
        &[&effects, &tokens, &messages, &texts, &id, &paid],
    )
    .await?;
    let done: Vec<i64> = row.try_get("done")?;
    for _ in 0..row.try_get::<_, i64>("decided")? {
        crate::common::metrics::member_message(
            crate::messages::Kind::Broadcast.as_str(),
            crate::messages::Outcome::Sent.as_str(),
        );
    }
    let recorded = effects
        .iter()
        .map(|e| {
            if done.contains(e) {
                Recorded::Done
            } else {
                Recorded::Superseded
            }
        })
        .collect();
    Ok((row.try_get("marked")?, recorded))
}

/// Records an attempt in transaction `tx` (see [`record`]): the recorded result and the error
/// it carried. Nothing of the effect's is written when its claim was taken over.
async fn record_in(
    tx: &Transaction<'_>,
    e: &Effect,
    token: i64,
    attempt: Attempt,
    options: &Options,
) -> Result<(Recorded, Option<String>), ApiError> {
    let Attempt {
        result,
        refunded,
        verify,
        cleared_ban,
        message,
        receipt,
    } = attempt;
    let (written, recorded, error) = match result {
        Err(Failure::Db(err)) => return Err(err),
        Ok(note) => {
            let written = db::row_opt(tx, DONE_SQL, &[&e.id, &note, &token]).await?;
            if let Some(row) = &written {
                if cleared_ban && let Some(chat) = e.chat_id {
                    bans::clear(tx, chat, e.user_id).await?;
                }
                if e.kind == Kind::Grant && e.payment_id.is_some() {
                    crate::common::metrics::payment_granted(row.try_get("age_secs")?);
                }
            }
            (written, Recorded::Done, None)
        }
        Err(Failure::Outage(error)) => {
            let error = format!(
                "Telegram is unreachable (getMe failed too); not counted as a failure: {error}"
            );
            let written =
                db::row_opt(tx, PUT_BACK_SQL, &[&e.id, &error, &verify, &token, &false]).await?;
            (written, Recorded::Outage, Some(error))
        }
        Err(Failure::NoRights(error)) => {
            let error = format!(
                "paused: the bot lacks its admin rights in the chat; resumes when they are \
                 back: {error}"
            );
            if let Some(chat) = e.chat_id
                && let Some(channel) =
                    channels::set_telegram_status(tx, chat, TelegramStatus::NoRights).await?
            {
                tracing::warn!(
                    channel_id = channel,
                    chat_id = chat,
                    "the bot lacks its admin rights in the chat: its access effects pause"
                );
            }
            match db::row_opt(tx, PUT_BACK_SQL, &[&e.id, &error, &verify, &token, &true]).await? {
                Some(written) => (Some(written), Recorded::Paused, Some(error)),
                // No channel in that chat (or the claim is gone): an ordinary refusal.
                None => {
                    let written =
                        record_failure(tx, e, token, true, &error, verify, options).await?;
                    (written, Recorded::Retry, Some(error))
                }
            }
        }
        Err(Failure::RateLimited { secs, error }) => {
            // Telegram's pace, not the effect's fault: not a failure. A little jitter on top,
            // so effects told to wait together do not all come back in the same instant.
            let delay = secs as f64 + rand::random::<f64>();
            let written =
                db::row_opt(tx, RATE_LIMITED_SQL, &[&e.id, &delay, &error, &token]).await?;
            (written, Recorded::RateLimited, Some(error))
        }
        Err(Failure::Retry(error)) => {
            let written = record_failure(tx, e, token, false, &error, verify, options).await?;
            (written, Recorded::Retry, Some(error))
        }
        Err(Failure::Permanent(error)) => {
            let written = record_failure(tx, e, token, true, &error, verify, options).await?;
            (written, Recorded::Retry, Some(error))
        }
    };
    let Some(written) = written else {
        tracing::warn!(
            effect_id = e.id,
            kind = %e.kind,
            "effect attempted after its lease was claimed again; its result is not recorded"
        );
        return Ok((Recorded::Superseded, error));
    };
    let recorded = if written.try_get::<_, Status>("status")? == Status::Failed {
        Recorded::Failed
    } else {
        recorded
    };
    settle_refund(tx, e, refunded, recorded).await?;
    settle_message(tx, e, message.as_ref(), recorded, error.as_deref()).await?;
    settle_receipt(tx, receipt.as_ref(), recorded, error.as_deref()).await?;
    Ok((recorded, error))
}

/// A failed attempt: dead-lettered when refused for good (`permanent`), or when the first
/// failure is older than the retry horizon; else rescheduled with backoff. `verify`: the next
/// attempt of a refund first looks for it. Returns the written row (its status), if the claim
/// still held.
async fn record_failure(
    tx: &Transaction<'_>,
    e: &Effect,
    token: i64,
    permanent: bool,
    error: &str,
    verify: bool,
    options: &Options,
) -> Result<Option<tokio_postgres::Row>, ApiError> {
    let delay = backoff(e.attempts + 1).as_secs_f64();
    let horizon = options.retry_horizon.as_secs_f64();
    db::row_opt(
        tx,
        FAILURE_SQL,
        &[&e.id, &error, &permanent, &horizon, &delay, &verify, &token],
    )
    .await
}

/// The payment side of a recorded refund, in the recording transaction: `refunded` when the
/// refund was made or confirmed, `refund_failed` when its effect was dead-lettered (both only
/// from `refund_pending`).
async fn settle_refund(
    tx: &Transaction<'_>,
    e: &Effect,
    refunded: Option<i64>,
    recorded: Recorded,
) -> Result<(), ApiError> {
    if let Some(payment_id) = refunded
        && recorded == Recorded::Done
    {
        refunds::settle(tx, payment_id, Outcome::Refunded).await?;
    }
    if recorded == Recorded::Failed
        && e.kind == Kind::Refund
        && let Some(payment_id) = e.payment_id
    {
        refunds::settle(tx, payment_id, Outcome::RefundFailed).await?;
    }
    Ok(())
}

/// The `messages` row of a recorded message effect, in the recording transaction
/// ([`super::messages::settled`] says how).
async fn settle_message(
    tx: &Transaction<'_>,
    e: &Effect,
    message: Option<&super::messages::MessageAttempt>,
    recorded: Recorded,
    error: Option<&str>,
) -> Result<(), ApiError> {
    let Ok(Payload::MemberMessage(p)) = e.typed_payload() else {
        return Ok(());
    };
    let failed = (recorded == Recorded::Failed).then(|| error.unwrap_or("failed"));
    if let Some(settled) = super::messages::settled(message, recorded == Recorded::Done, failed) {
        crate::messages::sent::settle(tx, p.message_id, &settled, e.user_id).await?;
    }
    Ok(())
}

/// The `fiscal_receipts` row of a recorded receipt effect, in the recording transaction: `done`
/// with what Checkbox confirmed (and the buyer's message with its link), `failed` with the
/// dead letter, else one more failed attempt.
async fn settle_receipt(
    tx: &Transaction<'_>,
    receipt: Option<&super::receipts::ReceiptAttempt>,
    recorded: Recorded,
    error: Option<&str>,
) -> Result<(), ApiError> {
    let Some(r) = receipt else {
        return Ok(());
    };
    let error = error.unwrap_or("failed");
    match (recorded, &r.issued) {
        (Recorded::Done, Some(issued)) => {
            receipts::record_done(tx, r.id, &issued.fiscal_code, &issued.url).await
        }
        (Recorded::Failed, _) => receipts::record_failed(tx, r.id, error).await,
        (Recorded::Retry | Recorded::RateLimited, _) => {
            receipts::record_attempt(tx, r.id, error, r.new_id).await
        }
        _ => Ok(()),
    }
}

fn log_recorded(e: &Effect, recorded: Recorded, error: &str) {
    match recorded {
        Recorded::RateLimited => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "effect rate-limited; rescheduled");
        }
        Recorded::Retry => {
            tracing::warn!(effect_id = e.id, kind = %e.kind, attempts = e.attempts + 1, error = %error, "effect failed; retrying later");
        }
        Recorded::Failed => {
            tracing::warn!(effect_id = e.id, kind = %e.kind, error = %error, "effect dead-lettered");
        }
        Recorded::Outage => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "Telegram unreachable; effect put back, not counted");
        }
        Recorded::Paused => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "effect paused until the bot's rights are back");
        }
        Recorded::Done | Recorded::Superseded => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        for attempts in 1..=30 {
            let full = BACKOFF_BASE
                .saturating_mul(1u32 << (attempts.min(17) as u32 - 1).min(16))
                .min(BACKOFF_CAP);
            for _ in 0..50 {
                let d = backoff(attempts);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempts}: {d:?} vs {full:?}"
                );
            }
        }
        assert!(backoff(1) <= Duration::from_secs(10));
        assert!(backoff(30) <= BACKOFF_CAP);
        assert!(backoff(30) >= BACKOFF_CAP / 2);
    }
}
