//! Telegram's `subscription` updates (Bot API `BotSubscriptionUpdated`: `user`,
//! `invoice_payload`, `state`): a buyer cancelled a Stars subscription in Telegram
//! (`canceled`), re-enabled one they had cancelled (`active`), or its renewal charge failed
//! (`failed`). Each is tied to the subscription the order named by `invoice_payload` started
//! (its applied first charge, [`star_subscriptions::lock_of_reference`]), bought by `user`:
//!
//! - `canceled`: the subscription is recorded cancelled by the buyer — no renewal is expected,
//!   it stops holding a seat past its membership, `/subscriptions` and the reminder say access
//!   ends on its date — and Telegram is not asked to cancel it again (the buyer just did);
//! - `active`: a subscription the buyer cancelled is active again (a later renewal charge is
//!   applied, not reviewed); one staff or subgate cancelled is not re-enabled but kept for
//!   review, since its cancellation was a decision of ours;
//! - `failed`: the buyer is told, once per renewal date, that the renewal failed, until when
//!   their access lasts and how to keep it.
//!
//! Every update is recorded under its `update_id` in `star_subscription_updates` in the
//! transaction that applied it, so a redelivery changes nothing (within a day, as the bot's
//! conversation updates: [`crate::bot`]); concurrent deliveries are serialized by the
//! subscription's row lock and the record's key. An update that cannot be applied — no such
//! subscription, another buyer's, an unknown state, a shape Telegram never sends — is logged and
//! recorded with outcome `review` and a note for staff; the door answers 200 all the same, so
//! Telegram does not send it again.

use deadpool_postgres::{Pool, Transaction};
use tokio_postgres::GenericClient;

use crate::payments::star_subscriptions::{self, CancelledBy, StarSubscription};
use crate::{
    common::error::ApiError,
    outbox::effects::{NewEffect, Payload, enqueue, payload::BotMessage},
    present::{
        render,
        texts::{self, Language},
    },
};

/// A redelivered update within this window changes nothing; an older record is taken over
/// (Telegram may reuse ids after a quiet week).
const DEDUPE_WINDOW: &str = "1 day";

/// What Telegram said, as read from the update (any part may be missing from an odd one).
#[derive(Debug, Clone, Default)]
pub struct Reported<'a> {
    pub update_id: i64,
    pub user_id: Option<i64>,
    pub invoice_payload: Option<&'a str>,
    pub state: Option<&'a str>,
}

crate::text_enum! {
    /// What came of a `subscription` update.
    pub enum Outcome {
        /// The subscription changed, or the buyer was told of a failed renewal.
        Applied => "applied",
        /// It already was as the update says (a second report of the same change).
        Unchanged => "unchanged",
        /// Not applied: kept for staff, with a note saying why.
        Review => "review",
    }
}

/// Result of [`apply`]: the outcome, or `None` for a repeat of an update already recorded.
pub type Handled = Option<Outcome>;

/// The states Telegram reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Canceled,
    Active,
    Failed,
}

impl State {
    fn parse(s: &str) -> Option<State> {
        match s {
            "canceled" => Some(State::Canceled),
            "active" => Some(State::Active),
            "failed" => Some(State::Failed),
            _ => None,
        }
    }
}

/// The state as a metric label (`other` for anything Telegram has not documented).
pub fn state_label(state: Option<&str>) -> &'static str {
    match state.and_then(State::parse) {
        Some(State::Canceled) => "canceled",
        Some(State::Active) => "active",
        Some(State::Failed) => "failed",
        None => "other",
    }
}

const SEEN_SQL: &str = "SELECT EXISTS (SELECT 1 FROM star_subscription_updates
     WHERE update_id = $1
       AND created_at >= statement_timestamp() - interval '1 day') AS seen";

const RECORD_SQL: &str = "INSERT INTO star_subscription_updates AS u
         (update_id, telegram_user_id, invoice_payload, state, subscription_id, outcome, note)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (update_id) DO UPDATE
         SET telegram_user_id = EXCLUDED.telegram_user_id,
             invoice_payload = EXCLUDED.invoice_payload, state = EXCLUDED.state,
             subscription_id = EXCLUDED.subscription_id, outcome = EXCLUDED.outcome,
             note = EXCLUDED.note, created_at = statement_timestamp()
         WHERE u.created_at < statement_timestamp() - interval '1 day'";

/// `text` as a PostgreSQL text value can hold it (a NUL, which Telegram never sends, replaced).
fn storable(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// Applies a `subscription` update in one transaction and records it.
pub async fn apply(pool: &Pool, r: &Reported<'_>) -> Result<Handled, ApiError> {
    debug_assert_eq!(
        DEDUPE_WINDOW, "1 day",
        "SEEN_SQL and RECORD_SQL spell the window"
    );
    let handled = crate::transaction!(pool, |tx| {
        let seen: bool = crate::db::row_one(tx, SEEN_SQL, &[&r.update_id])
            .await?
            .try_get("seen")?;
        if seen {
            return Ok(None);
        }
        let (outcome, subscription_id, note) = decide(tx, r).await?;
        crate::db::execute(
            tx,
            RECORD_SQL,
            &[
                &r.update_id,
                &r.user_id,
                &r.invoice_payload.map(storable),
                &r.state.map(storable),
                &subscription_id,
                &outcome,
                &note,
            ],
        )
        .await?;
        match &note {
            Some(note) => tracing::warn!(
                update_id = r.update_id,
                user_id = r.user_id,
                invoice_payload = r.invoice_payload,
                state = r.state,
                note = note.as_str(),
                "Telegram subscription update kept for review"
            ),
            None => tracing::info!(
                update_id = r.update_id,
                subscription_id,
                state = r.state,
                outcome = outcome.as_str(),
                "Telegram subscription update handled"
            ),
        }
        Ok(Some(outcome))
    })?;
    let outcome = handled.map(|o| o.as_str()).unwrap_or("repeated");
    crate::common::metrics::star_subscription_update(state_label(r.state), outcome);
    if handled.is_none() {
        tracing::info!(
            update_id = r.update_id,
            "Telegram subscription update repeated: nothing changed"
        );
    }
    Ok(handled)
}

/// The outcome of update `r`, the subscription it was tied to and, for a review, why not
/// applied; changes the subscription (locked) and enqueues the buyer's notice as it says.
async fn decide(
    tx: &Transaction<'_>,
    r: &Reported<'_>,
) -> Result<(Outcome, Option<i64>, Option<String>), ApiError> {
    let review = |id: Option<i64>, note: &str| Ok((Outcome::Review, id, Some(note.to_string())));
    let (Some(user_id), Some(payload), Some(state)) = (r.user_id, r.invoice_payload, r.state)
    else {
        return review(None, "the update lacks its user, invoice_payload or state");
    };
    if payload.contains('\0') {
        return review(
            None,
            "no Stars subscription was started by this invoice_payload",
        );
    }
    let Some(sub) = star_subscriptions::lock_of_reference(tx, payload).await? else {
        return review(
            None,
            "no Stars subscription was started by this invoice_payload",
        );
    };
    let buyer = crate::access::subscribers::telegram_user_id(tx, sub.subscriber_id).await?;
    if buyer != user_id {
        return review(Some(sub.id), "the user is not the subscription's buyer");
    }
    let Some(state) = State::parse(state) else {
        return review(Some(sub.id), "unknown state");
    };
    let outcome = match (state, sub.is_active(), sub.cancelled_by) {
        (State::Canceled, true, _) => {
            star_subscriptions::cancelled_in_telegram(tx, sub.id).await?;
            Outcome::Applied
        }
        (State::Canceled, false, _) | (State::Active, true, _) => Outcome::Unchanged,
        (State::Active, false, Some(CancelledBy::Buyer)) => {
            star_subscriptions::reenabled(tx, sub.id).await?;
            Outcome::Applied
        }
        (State::Active, false, _) => {
            return review(
                Some(sub.id),
                "re-enabled in Telegram, but staff or subgate cancelled it",
            );
        }
        (State::Failed, true, _) => tell_renewal_failed(tx, &sub, user_id).await?,
        (State::Failed, false, _) => Outcome::Unchanged,
    };
    Ok((outcome, Some(sub.id), None))
}

/// Tells the buyer of `sub` that its renewal failed: until when their access lasts and how to
/// keep it; once per renewal date (`subscription_failed:{id}:{renewal in µs}`), so a second
/// report of the same failure says nothing new. Written now, in the language remembered now.
async fn tell_renewal_failed(
    tx: &Transaction<'_>,
    sub: &StarSubscription,
    user_id: i64,
) -> Result<Outcome, ApiError> {
    let Some(view) = star_subscriptions::cancelled(tx, sub.id).await? else {
        return Ok(Outcome::Unchanged);
    };
    // The owner's own words on how to renew, when that automation is on and the buyer takes
    // such messages; else the built-in notice below (about their own access, it always goes).
    let language = crate::present::locale::default_language();
    let renewal = sub.expires_at.timestamp_micros();
    if crate::messages::automations::on_renewal_failed(
        tx,
        sub.id,
        renewal,
        sub.subscriber_id,
        language,
    )
    .await?
    {
        return Ok(Outcome::Applied);
    }
    let l = Language::choose(view.language, None);
    let title = render::title(l, view.translations.title(l, &view.title), view.channel_id);
    let until = view.access_until.and_then(|e| e.at());
    let text =
        texts::subscription_renewal_failed(l, &title, until.map(|t| texts::day(l, t)).as_deref());
    let key = format!(
        "subscription_failed:{}:{}",
        sub.id,
        sub.expires_at.timestamp_micros()
    );
    let enqueued = enqueue_notice(&**tx, user_id, text, key).await?;
    Ok(if enqueued {
        Outcome::Applied
    } else {
        Outcome::Unchanged
    })
}

/// Enqueues `text` to `user_id` once per `key`; whether it was new.
async fn enqueue_notice(
    client: &impl GenericClient,
    user_id: i64,
    text: String,
    key: String,
) -> Result<bool, ApiError> {
    let id = enqueue(
        client,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: None,
            chat_id: None,
            user_id,
            payload: Payload::BotMessage(BotMessage {
                text: render::clip(&text, render::MESSAGE_MAX),
                reply_markup: None,
            }),
            dedupe_key: Some(key),
        },
    )
    .await?;
    Ok(id.is_some())
}
