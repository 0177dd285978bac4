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
//! pooled connection), which checks again that it may go (undecided, its broadcast sending, its
//! buyer neither stopped nor blocked the bot since the facts were read). An attempt that finds the mark — the previous one died between the mark
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
//!
//! **Batches.** In a run during a paid broadcast, messages are claimed in batches
//! ([`super::MESSAGE_BATCH`]) and performed here by [`Worker::member_messages`]: their facts in
//! one read, then each call in turn, marked as above. A broadcast message Telegram took is
//! recorded — its effect done, its row `sent` — in the statement that marks the next one
//! ([`record::record_and_mark`]), so a crash leaves only the message being called unrecorded, as
//! with one message at a time; whatever else the batch came to is recorded at its end.

use std::collections::HashMap;

use deadpool_postgres::Object;
use serde_json::{Value, json};

use super::{
    ATTEMPT_CAP, Worker,
    claim::Claimed,
    failure::{Attempt, Failure},
    record::{self, Recorded, SentMessage},
};
use crate::{
    common::error::ApiError,
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

    /// Forgets what it holds of broadcasts other than `sending`.
    pub(super) fn retain(&self, sending: &[i64]) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|b, _| sending.contains(b));
    }

    /// Whether this process holds reserved budget not yet spent.
    pub(super) fn holds_any(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|n| *n > 0)
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

/// A message ready to go: its facts read, its text made and its lane chosen.
pub(super) struct Ready {
    facts: SendFacts,
    composed: Composed,
    lane: Lane,
}

/// The attempt of a message that ends before its call: skipped, with `why` as its note.
fn skip(why: String) -> Attempt {
    let note = format!("skipped: {why}");
    Attempt {
        message: Some(MessageAttempt {
            decided: Some((Outcome::Skipped, None, Some(why))),
        }),
        receipt: None,
        ..Attempt::from(Ok(Some(note)))
    }
}

impl Worker {
    /// Performs message effect `e` (see the module doc).
    pub(super) async fn member_message(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Ok(Payload::MemberMessage(p)) = e.typed_payload() else {
            return no_message();
        };
        let facts = match sent::send_facts(&client, &[p.message_id]).await {
            Ok(mut f) => f.pop(),
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
        };
        match self.prepare(&client, facts).await {
            Ok(ready) => {
                drop(client);
                let db = &self.state.db;
                self.send(bot, ready, |id, paid| async move {
                    sent::mark_attempt(&db.get().await?, id, paid).await
                })
                .await
            }
            Err(ended) => ended,
        }
    }

    /// Performs message effects `batch` (a batch claimed together): their facts in one read
    /// and their texts on `client`, which then goes back to the pool; then each call in turn,
    /// each marked just before it, as one message's attempt is. The results that are done ride
    /// with the next message's mark ([`record::record_and_mark`]), so a crash leaves only the
    /// message being called unrecorded; the rest are returned for the batch's record. An error
    /// when their facts could not be read (nothing was attempted).
    pub(super) async fn member_messages(
        &self,
        client: Object,
        bot: &BotApi,
        batch: &[Claimed],
    ) -> Result<Sent, ApiError> {
        let ids: Vec<Option<i64>> = batch
            .iter()
            .map(|c| match c.effect.typed_payload() {
                Ok(Payload::MemberMessage(p)) => Some(p.message_id),
                _ => None,
            })
            .collect();
        let wanted: Vec<i64> = ids.iter().flatten().copied().collect();
        let mut facts: HashMap<i64, SendFacts> = sent::send_facts(&client, &wanted)
            .await?
            .into_iter()
            .map(|f| (f.id, f))
            .collect();
        let mut prepared = Vec::with_capacity(batch.len());
        for id in &ids {
            prepared.push(match id {
                None => Err(no_message()),
                Some(id) => self.prepare(&client, facts.remove(id)).await,
            });
        }
        drop(client);
        let mut out = Sent::default();
        // Broadcast messages Telegram took, waiting to be recorded with the next mark.
        let mut waiting: Vec<(usize, Attempt)> = Vec::new();
        for (i, p) in prepared.into_iter().enumerate() {
            let ready = match p {
                Ok(ready) => ready,
                Err(ended) => {
                    out.to_record.push((i, ended));
                    continue;
                }
            };
            let broadcast = ready.facts.kind == MessageKind::Broadcast;
            let places: Vec<usize> = waiting.iter().map(|(i, _)| *i).collect();
            let mut slot = Some(std::mem::take(&mut waiting));
            let mut written = None;
            let (slot_ref, written_ref, ids) = (&mut slot, &mut written, &ids);
            let mark = |id, paid| async move {
                let sent: Vec<SentMessage> = slot_ref
                    .take()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|(i, a)| {
                        Some(SentMessage {
                            effect: &batch[*i].effect,
                            token: batch[*i].token,
                            message_id: ids[*i]?,
                            text: sent_text(a)?.to_string(),
                        })
                    })
                    .collect();
                let (marked, w) = match record::record_and_mark(&self.state, &sent, id, paid).await
                {
                    Ok((marked, recorded)) => (Ok(marked), Ok(recorded)),
                    Err(e) => {
                        let why = e.to_string();
                        (Err(e), Err(why))
                    }
                };
                *written_ref = Some(w);
                marked
            };
            let attempt = tokio::time::timeout(ATTEMPT_CAP, self.send(bot, ready, mark))
                .await
                .unwrap_or_else(|_| Attempt::abandoned());
            match (written, slot) {
                (Some(Ok(recorded)), _) => out
                    .recorded
                    .extend(places.into_iter().zip(recorded.into_iter().map(Ok))),
                // The mark was never made: they wait for the next one.
                (None, Some(still)) => waiting = still,
                // Taken, and not recorded: given back.
                (written, _) => {
                    let why = match written {
                        Some(Err(why)) => why,
                        _ => "the attempt was abandoned while recording them".into(),
                    };
                    let claims: Vec<(i64, i64)> = places
                        .iter()
                        .map(|&i| (batch[i].effect.id, batch[i].token))
                        .collect();
                    super::claim::release(&self.state, &claims).await;
                    out.recorded.extend(
                        places
                            .into_iter()
                            .map(|i| (i, Err(ApiError::internal(format!("not recorded: {why}"))))),
                    );
                }
            }
            if broadcast && sent_text(&attempt).is_some() {
                waiting.push((i, attempt));
            } else {
                out.to_record.push((i, attempt));
            }
        }
        out.to_record.extend(waiting);
        Ok(out)
    }

    /// Reads what message `facts` needs on `client` and decides whether it goes: `Err` with
    /// its attempt when it ends here (gone, decided, skipped, or a database error).
    async fn prepare(&self, client: &Object, facts: Option<SendFacts>) -> Result<Ready, Attempt> {
        let Some(facts) = facts else {
            return Err(Attempt::from(Ok(Some(
                "skipped: the message was deleted".into(),
            ))));
        };
        if let Some(outcome) = facts.outcome {
            return Err(Attempt::from(Ok(Some(format!(
                "skipped: the message is {outcome} already"
            )))));
        }
        if let Some(why) = reason_to_skip(&facts) {
            return Err(skip(why.into()));
        }
        let composed = match compose::compose(client, &self.state.config, &facts).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(skip("the owner wrote no text for it".into())),
            Err(err) => return Err(Attempt::from(Err(Failure::Db(err)))),
        };
        match self.paid_lane(client, &facts).await {
            Ok(lane) => Ok(Ready {
                facts,
                composed,
                lane,
            }),
            Err(err) => Err(Attempt::from(Err(Failure::Db(err)))),
        }
    }

    /// Sends message `ready`: marks it with `mark` (its id, and whether it goes paid) once the
    /// pacer's slot is taken, then calls Telegram (the module doc says why in that order).
    async fn send<F, Fut>(&self, bot: &BotApi, ready: Ready, mark: F) -> Attempt
    where
        F: FnOnce(i64, bool) -> Fut,
        Fut: Future<Output = Result<bool, ApiError>>,
    {
        let Ready {
            facts,
            composed: Composed { text, reply_markup },
            lane,
        } = ready;
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
        let (id, paid) = (facts.id, lane == Lane::Paid);
        let mut marked = Ok(false);
        let m = &mut marked;
        let called = bot
            .call_when_ready::<Value, _, _>("sendMessage", &params, lane, || async move {
                *m = mark(id, paid).await;
                matches!(m, Ok(true))
            })
            .await;
        let attempt = |decided| MessageAttempt { decided };
        match (called, marked) {
            (Ok(Some(_)), _) => Attempt {
                message: Some(attempt(Some((Outcome::Sent, Some(text), None)))),
                ..Attempt::from(Ok(None))
            },
            (Ok(None), Err(err)) => Attempt::from(Err(Failure::Db(err))),
            (Ok(None), Ok(_)) => skip(
                "not sent: it was decided meanwhile (the broadcast cancelled, the buyer said \
                 /stop or blocked the bot, or another attempt)"
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
                receipt: None,
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
        if !self.paid.take(broadcast) {
            let granted = broadcasts::reserve_paid(client, broadcast, PAID_STEP).await?;
            if granted == 0 {
                return Ok(Lane::Free);
            }
            self.paid.add(broadcast, granted - 1);
        }
        // A message that goes paid: runs want their extra lanes.
        self.paid_message_met();
        Ok(Lane::Paid)
    }
}

/// What sending a batch came to, by place in the batch: results recorded already (with a
/// later message's mark), and attempts still to record.
#[derive(Default)]
pub(super) struct Sent {
    pub(super) recorded: Vec<(usize, Result<Recorded, ApiError>)>,
    pub(super) to_record: Vec<(usize, Attempt)>,
}

/// The text of a message the attempt sent, if it sent one.
fn sent_text(a: &Attempt) -> Option<&str> {
    match a.message.as_ref()?.decided.as_ref()? {
        (Outcome::Sent, Some(text), _) if a.result.is_ok() => Some(text),
        _ => None,
    }
}

/// The attempt of an effect whose payload names no message.
fn no_message() -> Attempt {
    Attempt::from(Err(Failure::Permanent(
        "the effect names no message".into(),
    )))
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
