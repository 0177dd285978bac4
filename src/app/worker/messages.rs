//! Performing a message to a member (`member_message`: a broadcast's or an automation's;
//! `crate::messages` says what they are). Read on the claim's connection: the message, its
//! buyer and what it is about ([`sent::send_facts`]), then the text and button made from them
//! ([`compose`]). Skipped, and recorded `skipped` with a note, when it must not go: the buyer
//! said `/stop` or is unreachable, the broadcast was cancelled, the automation was switched off
//! or no longer applies (the order was paid, the membership renewed), or the owner wrote no
//! text; and when an earlier attempt was cut off mid-call (see below).
//!
//! **At most once.** Once the pacer's slot is taken and just before the request is sent, the
//! message is marked attempted in its own committed statement ([`sent::mark_attempt`], on a
//! pooled connection). An attempt that finds the mark — the previous one died between the mark
//! and its record — records the message `skipped` without calling: it may have reached the
//! buyer, and a message is never sent twice. A call Telegram refused or whose connection was
//! never made clears the mark when recorded (retried like any effect); a call whose answer was
//! lost (a timeout) is recorded `skipped` too. A 403 is `blocked`: the buyer is marked
//! unreachable, and the effect is done, not retried.
//!
//! **Paid broadcasts.** A message of a broadcast with a budget goes on the paid pace with
//! `allow_paid_broadcast` while this process holds reserved budget for it; reservations are
//! taken from the broadcast in steps of [`PAID_STEP`] ([`broadcasts::reserve_paid`]), and once
//! the budget is spent the rest go on the free pace.

use std::collections::HashMap;

use deadpool_postgres::Object;
use serde_json::{Value, json};

use super::{
    Worker,
    failure::{Attempt, Failure},
};
use crate::{
    messages::{
        Kind as MessageKind, Outcome, broadcasts,
        compose::{self, Composed},
        sent::{self, SendFacts, Settled},
    },
    outbox::effects::{Effect, Payload},
    telegram_api::client::{BotApi, BotError, Lane},
};

/// Paid messages a process reserves from a broadcast's budget at a time.
pub const PAID_STEP: i32 = 50;

/// What an attempt at a message decided, for the record step.
#[derive(Debug, Clone)]
pub(super) struct MessageAttempt {
    /// The outcome when the attempt ends the message (the effect is done); `None` when the call
    /// was not made or Telegram refused it for now (the effect is retried, or dead-lettered).
    pub(super) decided: Option<(Outcome, Option<String>, Option<String>)>,
}

/// How the record step settles message effect `e`'s row, given the attempt's account of it and
/// how the effect was recorded (`failed`: dead-lettered, with the error): done with the
/// attempt's outcome; failed when dead-lettered; retried — its mark cleared — only when the
/// attempt says the call was not made. Nothing otherwise (an attempt abandoned mid-call keeps
/// its mark, so it is not sent again).
pub(super) fn settled(
    message: Option<&MessageAttempt>,
    done: bool,
    failed: Option<&str>,
) -> Option<Settled> {
    match (message.and_then(|m| m.decided.as_ref()), done, failed) {
        (Some((outcome, text, note)), true, _) => Some(Settled::Decided {
            outcome: *outcome,
            text: text.clone(),
            note: note.clone(),
        }),
        (_, _, Some(error)) => Some(Settled::Decided {
            outcome: Outcome::Failed,
            text: None,
            note: Some(error.to_string()),
        }),
        (None, false, None) if message.is_some() => Some(Settled::Retry),
        _ => None,
    }
}

/// Budget reserved by this process, per paid broadcast, not yet spent.
#[derive(Debug, Default)]
pub(super) struct PaidAllowance(std::sync::Mutex<HashMap<i64, i32>>);

impl PaidAllowance {
    /// Spends one reserved message of `broadcast`, if this process holds one.
    fn take(&self, broadcast: i64) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match m.get_mut(&broadcast) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    fn add(&self, broadcast: i64, n: i32) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(broadcast)
            .or_default() += n;
    }
}

impl Worker {
    /// Performs message effect `e` (see the module doc).
    pub(super) async fn member_message(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Ok(Payload::MemberMessage(p)) = e.typed_payload() else {
            return Attempt::from(Err(Failure::Permanent(
                "the effect names no message".into(),
            )));
        };
        let facts = match sent::send_facts(&client, p.message_id).await {
            Ok(Some(f)) => f,
            Ok(None) => return Attempt::from(Ok(Some("skipped: the message was deleted".into()))),
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
        };
        let attempt = |decided| MessageAttempt { decided };
        let skip = |why: String| {
            let note = format!("skipped: {why}");
            Attempt {
                message: Some(attempt(Some((Outcome::Skipped, None, Some(why))))),
                ..Attempt::from(Ok(Some(note)))
            }
        };
        if let Some(outcome) = facts.outcome {
            return Attempt::from(Ok(Some(format!(
                "skipped: the message is {outcome} already"
            ))));
        }
        if let Some(why) = reason_to_skip(&facts) {
            return skip(why.into());
        }
        let composed = match compose::compose(&client, &self.state.config, &facts).await {
            Ok(Some(c)) => c,
            Ok(None) => return skip("the owner wrote no text for it".into()),
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
        };
        let lane = match self.paid_lane(&client, &facts).await {
            Ok(lane) => lane,
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
        };
        drop(client);
        let Composed { text, reply_markup } = composed;
        let mut params = json!({
            "chat_id": facts.telegram_user_id,
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(markup) = reply_markup {
            params["reply_markup"] = markup;
        }
        if lane == Lane::Paid {
            params["allow_paid_broadcast"] = json!(true);
        }
        let (db, id, paid) = (&self.state.db, facts.id, lane == Lane::Paid);
        let mut marked = Ok(false);
        let mark = &mut marked;
        let called = bot
            .call_when_ready::<Value, _, _>("sendMessage", &params, lane, || async move {
                *mark = async { sent::mark_attempt(&db.get().await?, id, paid).await }.await;
                matches!(mark, Ok(true))
            })
            .await;
        match (called, marked) {
            (Ok(Some(_)), _) => Attempt {
                message: Some(attempt(Some((Outcome::Sent, Some(text), None)))),
                ..Attempt::from(Ok(None))
            },
            (Ok(None), Err(err)) => Attempt::from(Err(Failure::Db(err))),
            (Ok(None), Ok(_)) => skip(
                "not sent: it was decided meanwhile (the broadcast cancelled, or another \
                 attempt)"
                    .into(),
            ),
            (Err(err), _) if is_blocked(&err) => {
                let why = format!("blocked: {err}");
                Attempt {
                    message: Some(attempt(Some((Outcome::Blocked, None, Some(why.clone()))))),
                    ..Attempt::from(Ok(Some(why)))
                }
            }
            (Err(err), _) if err.may_have_taken_effect() => skip(format!(
                "the call's answer was lost ({err}); not sent again, so it is never sent twice"
            )),
            (Err(err), _) => Attempt {
                message: Some(attempt(None)),
                ..Attempt::from(Err(Failure::from(err)))
            },
        }
    }

    /// The lane of message `f`: paid while its broadcast has a budget this process holds (or
    /// can still reserve) a message of, else free.
    async fn paid_lane(
        &self,
        client: &Object,
        f: &SendFacts,
    ) -> Result<Lane, crate::common::error::ApiError> {
        let (Some(broadcast), Some(_)) = (f.broadcast_id, f.paid_max_stars) else {
            return Ok(Lane::Free);
        };
        if self.paid.take(broadcast) {
            return Ok(Lane::Paid);
        }
        let granted = broadcasts::reserve_paid(client, broadcast, PAID_STEP).await?;
        if granted == 0 {
            return Ok(Lane::Free);
        }
        self.paid.add(broadcast, granted - 1);
        Ok(Lane::Paid)
    }
}

/// Why message `f` must not be sent now, if so.
fn reason_to_skip(f: &SendFacts) -> Option<&'static str> {
    if f.attempted {
        return Some(
            "an earlier attempt was cut off after it began calling Telegram; it may have \
             reached the buyer, and a message is never sent twice",
        );
    }
    if f.marketing_opt_out {
        return Some("the buyer said /stop");
    }
    if !f.reachable {
        return Some("the buyer blocked the bot");
    }
    if f.kind == MessageKind::Broadcast && f.broadcast_status.as_deref() != Some("sending") {
        return Some("the broadcast was cancelled");
    }
    if !f.enabled {
        return Some("the automation was switched off");
    }
    if f.applies == Some(false) {
        return Some(match f.kind {
            MessageKind::UnpaidCheckout => {
                "the order was paid, cancelled or superseded, or the buyer paid for the channel"
            }
            MessageKind::WinBack => "the membership is live again",
            MessageKind::CancelOffer => "the subscription is active again",
            _ => "it no longer applies",
        });
    }
    None
}

/// Telegram's 403 to a message: the buyer blocked the bot (or deleted their account).
fn is_blocked(e: &BotError) -> bool {
    matches!(e, BotError::Api { code: 403, .. })
}
