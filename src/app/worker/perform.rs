//! Performing one claimed effect: what it needs is read on the claim's connection, which is
//! returned to the pool before the first Bot API call; then the calls, each kind by its own
//! rule. Every effect is harmless when repeated and re-checks the state it acts on: a grant,
//! receipt or notice whose membership changed since is skipped, a revoke whose member holds
//! access again (or is exempt in the channel, or a chat administrator) is skipped, a join
//! request is decided again by the door's rule ([`join_request_decision`]), a refund is made
//! only while its payment is `refund_pending`.
//!
//! A call that manages the chat (ban, unban, join answers, the join link) refused because the
//! bot lacks its rights there is [`Failure::NoRights`]: the effect pauses, it does not fail.

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;

use super::{Worker, bans};
use crate::{
    access::{
        exemptions,
        memberships::{self, EffectView, EventCause, Expiry, Status},
    },
    catalog::channels,
    common::error::ApiError,
    outbox::effects::{self, Effect, Kind, Payload, payload},
    payments::{
        core::Outcome,
        refunds::{self, RefundFacts},
        star_subscriptions,
    },
    present::{render, texts},
    telegram::{
        JoinDecision, join_request_decision,
        recovery::{self, RefundSearch, find_refund},
    },
    telegram_api::client::{BotApi, BotError, Urgency},
};

/// How much earlier than its effect's creation a refund may be dated (clocks differ).
const CLOCK_SKEW_SECS: i64 = 3600;

/// Why an effect was not done.
pub(super) enum Failure {
    /// A database error: nothing is recorded, the effect runs again.
    Db(ApiError),
    /// Worth trying again later.
    Retry(String),
    /// Telegram asked to wait.
    RateLimited { secs: u64, error: String },
    /// Telegram refused for good: dead letter.
    Permanent(String),
    /// The bot lacks its admin rights in the effect's chat: paused until they are back.
    NoRights(String),
    /// A transient failure while Telegram answers nothing (the probe failed too): not the
    /// effect's fault, not counted.
    Outage(String),
}

/// What Telegram says when the bot may not manage a chat (not an administrator, too few
/// rights, removed from it).
const NO_RIGHTS: [&str; 5] = [
    "CHAT_ADMIN_REQUIRED",
    "not enough rights",
    "need administrator rights",
    "bot was kicked",
    "bot is not a member",
];

/// Whether a refusal of a chat-management call means the bot lacks its rights in the chat.
pub(super) fn lacks_rights(e: &BotError) -> bool {
    matches!(
        e,
        BotError::Api {
            code: 400 | 403,
            ..
        }
    ) && NO_RIGHTS.iter().any(|n| e.mentions(n))
}

/// The failure of a call that manages the effect's chat: missing rights pause the effect.
fn chat_failure(e: BotError) -> Failure {
    if lacks_rights(&e) {
        Failure::NoRights(e.to_string())
    } else {
        Failure::from(e)
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Failure {
        Failure::Db(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        Failure::Db(e.into())
    }
}

impl From<BotError> for Failure {
    fn from(e: BotError) -> Failure {
        if let Some(secs) = e.retry_after() {
            return Failure::RateLimited {
                secs: secs.max(1),
                error: e.to_string(),
            };
        }
        match &e {
            // 401: the token is wrong; 404: the API URL is. Configuration, not this effect.
            BotError::Api { code, .. } if *code >= 500 || *code == 401 || *code == 404 => {
                Failure::Retry(e.to_string())
            }
            BotError::Api { .. } => Failure::Permanent(e.to_string()),
            _ => Failure::Retry(e.to_string()),
        }
    }
}

impl From<super::bot::BotFailure> for Failure {
    fn from(e: super::bot::BotFailure) -> Failure {
        match e {
            super::bot::BotFailure::Db(e) => Failure::Db(e),
            super::bot::BotFailure::Bot(e) => Failure::from(e),
            super::bot::BotFailure::Permanent(why) => Failure::Permanent(why),
            super::bot::BotFailure::Retry(why) => Failure::Retry(why),
        }
    }
}

/// Done, with an optional note (why it was skipped, which harmless error counted as done).
pub(super) type Performed = Result<Option<String>, Failure>;

/// One attempt's result and the writes it asks the record step to make, under the claim.
pub(super) struct Attempt {
    pub(super) result: Performed,
    /// The refund of this payment is made (or confirmed): `refund_pending` → `refunded`.
    pub(super) refunded: Option<i64>,
    /// The refund call's outcome is unknown: look for it before calling again.
    pub(super) verify: bool,
    /// Done, the user is not banned by us in the chat (any more): forget its `chat_bans` row.
    pub(super) cleared_ban: bool,
}

impl From<Performed> for Attempt {
    fn from(result: Performed) -> Attempt {
        Attempt {
            result,
            refunded: None,
            verify: false,
            cleared_ban: false,
        }
    }
}

impl Attempt {
    /// `result`, which once done leaves the user unbanned by us in the effect's chat.
    fn clearing_ban(result: Performed) -> Attempt {
        Attempt {
            cleared_ban: result.is_ok(),
            ..Attempt::from(result)
        }
    }
}

impl Worker {
    /// Reads what the effect needs on `client`, returns the connection to the pool, then makes
    /// the Bot API calls.
    pub(super) async fn perform(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let kind = e.kind;
        // Access changes take the pacer's next slot before waiting messages.
        let urgent;
        let bot = if super::is_access(kind) {
            urgent = bot.with_urgency(Urgency::Urgent);
            &urgent
        } else {
            bot
        };
        match kind {
            Kind::Refund => self.refund(client, bot, e).await,
            Kind::BotMessage | Kind::Invoice | Kind::SubscriptionCancel => {
                let performed = super::bot::perform(&self.state, client, bot, e, kind).await;
                Attempt::from(performed.map_err(Failure::from))
            }
            Kind::JoinApprove | Kind::JoinDecline => {
                let Some(chat) = e.chat_id else {
                    return Attempt::from(Err(no_chat()));
                };
                // Decided now, by the door's rule: the user may have paid, or their
                // membership ended, since the request was answered.
                let decision = join_request_decision(&client, chat, e.user_id).await;
                drop(client);
                match decision {
                    Ok(d) => self.join(bot, e, chat, kind, d).await.into(),
                    Err(err) => Attempt::from(Err(Failure::Db(err))),
                }
            }
            Kind::Grant => {
                let Some(chat) = e.chat_id else {
                    return Attempt::from(Err(no_chat()));
                };
                let facts = async {
                    let m = match e.membership_id {
                        Some(id) => memberships::effect_view(&client, id).await?,
                        None => None,
                    };
                    let banned = bans::banned_by_us(&client, chat, e.user_id).await?;
                    Ok::<_, ApiError>((m, banned, source_of(&client, e).await?))
                }
                .await;
                drop(client);
                match facts {
                    Ok((m, banned, source)) => self.grant(bot, e, chat, m, banned, source).await,
                    Err(err) => Attempt::from(Err(Failure::Db(err))),
                }
            }
            Kind::Revoke => {
                let Some(chat) = e.chat_id else {
                    return Attempt::from(Err(no_chat()));
                };
                let facts = async {
                    let skip = revoke_skip(&client, e, chat).await?;
                    let notice = match skip {
                        Some(_) => None,
                        None => super::bot::access_ended_notice(&self.state, &client, e).await?,
                    };
                    Ok::<_, ApiError>((skip, notice))
                }
                .await;
                drop(client);
                match facts {
                    Ok((Some(skip), _)) => Attempt::from(Ok(Some(skip))),
                    Ok((None, notice)) => self.revoke(bot, e, chat, notice).await,
                    Err(err) => Attempt::from(Err(Failure::Db(err))),
                }
            }
            _ => {
                // An unban is decided on its own chat and user, like a revoke (see
                // [`revoke_skip`]).
                let m = match (kind, e.membership_id, e.chat_id) {
                    (Kind::Unban, _, Some(chat)) => {
                        memberships::effect_view_in_chat(&client, chat, e.user_id).await
                    }
                    (_, Some(id), _) => memberships::effect_view(&client, id).await,
                    (_, None, _) => Ok(None),
                };
                // A reminder of a membership whose Stars subscription renews says so instead.
                let renews = match (kind, e.membership_id) {
                    (Kind::Reminder, Some(id)) => {
                        star_subscriptions::renews_at_of_membership(&client, id).await
                    }
                    _ => Ok(None),
                };
                // A receipt's words depend on what made the term longer.
                let source = match (kind, &m) {
                    (Kind::RenewalReceipt, Ok(_)) => source_of(&client, e).await.map(Some),
                    _ => Ok(None),
                };
                drop(client);
                let (m, renews, source) = match (m, renews, source) {
                    (Ok(m), Ok(renews), Ok(source)) => (m, renews, source),
                    (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
                        return Attempt::from(Err(Failure::Db(err)));
                    }
                };
                match kind {
                    Kind::RenewalReceipt => {
                        let source = source.unwrap_or(texts::Source::Payment);
                        self.receipt(bot, e, m, source).await.into()
                    }
                    Kind::Unban => self.unban(bot, e, m).await,
                    Kind::Reminder => self.notice(bot, e, m, Status::Active, renews).await.into(),
                    _ => self.notice(bot, e, m, Status::Grace, None).await.into(),
                }
            }
        }
    }

    /// The join link in one `sendMessage` (the channel's stored link, else one made and
    /// stored now). Only a user subgate banned in the chat (`banned`: a `chat_bans` row, left
    /// by a revoke whose unban was lost) is unbanned first (only if banned: a member inside
    /// stays inside).
    async fn grant(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        m: Option<EffectView>,
        banned: bool,
        source: texts::Source,
    ) -> Attempt {
        let Some(m) = m else {
            return Attempt::from(Ok(Some("skipped: the membership was deleted".into())));
        };
        if let Some(skip) = account_changed(e, &m) {
            return Attempt::from(Ok(Some(skip)));
        }
        if !m.status.holds_access() {
            return Attempt::from(Ok(Some(format!(
                "skipped: the membership is {} now",
                m.status
            ))));
        }
        if banned {
            if let Err(err) = bot.unban_chat_member(chat, e.user_id).await {
                return Attempt::from(Err(chat_failure(err)));
            }
            return Attempt::clearing_ban(self.grant_message(bot, e, chat, m, source).await);
        }
        Attempt::from(self.grant_message(bot, e, chat, m, source).await)
    }

    /// The join link, in the words of what gave the access (`source`: only a payment is
    /// thanked for).
    async fn grant_message(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        m: EffectView,
        source: texts::Source,
    ) -> Performed {
        let link = match m.invite_link.clone() {
            Some(link) => link,
            None => self.channel_link(bot, m.channel_id, chat).await?,
        };
        let (l, title) = m.speaking();
        let text = texts::access_granted(l, source, title, m.expires_at, &link);
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// The channel's join-request link: the stored one, or a new one stored for every later
    /// grant, in one short statement on a connection taken after the call (none is held
    /// during it). The lanes of this worker make one link per channel: the first to need it
    /// makes it while the others wait, then read the stored one. Two processes racing here
    /// both create a link; the first stored wins and is used by both.
    async fn channel_link(
        &self,
        bot: &BotApi,
        channel_id: i32,
        chat: i64,
    ) -> Result<String, Failure> {
        let lock = self.link_lock(channel_id);
        let _making = lock.lock().await;
        if !bot.is_dry_run() {
            let client = self.state.db.get().await.map_err(ApiError::from)?;
            if let Some(link) = channels::stored_invite_link(&client, channel_id, chat).await? {
                return Ok(link);
            }
        }
        let link = bot
            .create_join_request_link(chat, "subgate members")
            .await
            .map_err(chat_failure)?;
        if bot.is_dry_run() {
            return Ok(link.invite_link);
        }
        let client = self.state.db.get().await.map_err(ApiError::from)?;
        // Stored only while the channel is still in that chat: a link must never outlive a
        // change of the channel's chat.
        Ok(
            channels::store_invite_link(&client, channel_id, &link.invite_link, chat)
                .await?
                .unwrap_or(link.invite_link),
        )
    }

    /// A member's longer term, in the words of what made it longer (`source`).
    async fn receipt(
        &self,
        bot: &BotApi,
        e: &Effect,
        m: Option<EffectView>,
        source: texts::Source,
    ) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if let Some(skip) = account_changed(e, &m) {
            return Ok(Some(skip));
        }
        if !m.status.holds_access() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let (l, title) = m.speaking();
        let text = texts::access_extended(l, source, title, m.expires_at);
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// Ban, then unban only if banned: out of the channel now, free to rejoin after paying
    /// (the ban's `chat_bans` row, written by [`revoke_skip`], goes once this is recorded
    /// done). Telegram's "an administrator", "never in the chat" and "no such user" mean there
    /// is nobody to remove: done, with a note. Once the user is out (or was never in), the
    /// buyer's `notice` that their access ended, if the revoke has one, is enqueued — keyed on
    /// this revoke, so a repeated attempt enqueues it once — never for a chat administrator,
    /// whose access did not end.
    async fn revoke(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        notice: Option<render::Rendered>,
    ) -> Attempt {
        let result = match bot.ban_chat_member(chat, e.user_id).await {
            Ok(_) => bot
                .unban_chat_member(chat, e.user_id)
                .await
                .map(|_| None)
                .map_err(chat_failure),
            Err(err) if err.mentions("user is an administrator of the chat") => {
                return Attempt::clearing_ban(Ok(Some(format!(
                    "skipped: the user is an administrator of the chat ({err})"
                ))));
            }
            // Never in the chat (or gone from Telegram): nothing to remove.
            Err(err)
                if err.mentions("PARTICIPANT_ID_INVALID") || err.mentions("user not found") =>
            {
                Ok(Some(format!("nothing to remove: {err}")))
            }
            Err(err) => return Attempt::from(Err(chat_failure(err))),
        };
        if result.is_err() {
            return Attempt::clearing_ban(result);
        }
        if let Some(notice) = notice
            && let Err(err) = self.tell_access_ended(e, &notice).await
        {
            return Attempt::from(Err(Failure::Db(err)));
        }
        Attempt::clearing_ban(result)
    }

    /// Enqueues `notice` (access ended) for the revoke `e`'s user, once per revoke, on a
    /// connection taken after the Bot API calls.
    async fn tell_access_ended(
        &self,
        e: &Effect,
        notice: &render::Rendered,
    ) -> Result<(), ApiError> {
        let client = self.state.db.get().await?;
        let key = effects::access_ended_key(e.id);
        if crate::outbox::bot_messages::enqueue_message(&**client, e.user_id, notice, Some(key))
            .await?
            .is_some()
        {
            tracing::info!(
                effect_id = e.id,
                user_id = e.user_id,
                "access-ended notice enqueued"
            );
        }
        Ok(())
    }

    /// Lifts a ban of a live member (an audit found them banned), while their account still
    /// holds access in the chat; `m` is that account's membership there.
    async fn unban(&self, bot: &BotApi, e: &Effect, m: Option<EffectView>) -> Attempt {
        if !m.is_some_and(|m| m.status.holds_access()) {
            return Attempt::from(Ok(Some(
                "skipped: the user holds no access in the chat now".into(),
            )));
        }
        let Some(chat) = e.chat_id else {
            return Attempt::from(Err(no_chat()));
        };
        Attempt::clearing_ban(
            bot.unban_chat_member(chat, e.user_id)
                .await
                .map(|_| None)
                .map_err(chat_failure),
        )
    }

    /// A reminder (`status` active) or grace notice (`status` grace): sent only while the
    /// membership is still in the state and term it was enqueued for. A reminder of a
    /// membership whose Stars subscription is active and `renews` on a date says when it renews;
    /// any other (a cancelled subscription's too) says when access ends.
    async fn notice(
        &self,
        bot: &BotApi,
        e: &Effect,
        m: Option<EffectView>,
        status: Status,
        renews: Option<DateTime<Utc>>,
    ) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if let Some(skip) = account_changed(e, &m) {
            return Ok(Some(skip));
        }
        // The term the notice was enqueued for (an unreadable payload names none).
        let enqueued_for = e.typed_payload().ok().and_then(|p| p.expires_at());
        if m.status != status || enqueued_for != Some(m.expires_at) {
            return Ok(Some(
                "skipped: the membership changed since (renewed or ended)".into(),
            ));
        }
        // Never enqueued for lifetime access (its term has no end to tell of).
        let Expiry::At(at) = m.expires_at else {
            return Ok(Some("skipped: lifetime access never ends".into()));
        };
        let (l, title) = m.speaking();
        let text = if let (Status::Active, Some(renews)) = (status, renews) {
            texts::reminder_renews(l, title, &texts::day(l, renews))
        } else if status == Status::Active {
            texts::reminder(l, title, &texts::day(l, at))
        } else {
            texts::grace_notice(l, title, &texts::day(l, at))
        };
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// `refundStarPayment`, while the payment is `refund_pending`. Success or
    /// `CHARGE_ALREADY_REFUNDED`: `refunded`. A timeout leaves the payment `refund_pending` and
    /// marks the effect to verify first next time: look for the refund in
    /// `getStarTransactions` ([`find_refund`]) before calling again. A definite refusal: a dead
    /// letter, and the record step makes the payment `refund_failed`, for staff.
    async fn refund(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Some(payment_id) = e.payment_id else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        let verify = matches!(
            e.typed_payload(),
            Ok(Payload::Refund(payload::Refund { verify: true, .. }))
        );
        let facts = async {
            let payment = refunds::facts(&client, payment_id).await?;
            let cursor = if verify {
                recovery::cursor(&client).await?
            } else {
                0
            };
            Ok::<_, ApiError>((payment, cursor))
        }
        .await;
        drop(client);
        let (payment, cursor) = match facts {
            Ok(f) => f,
            Err(err) => return Attempt::from(Err(Failure::from(err))),
        };
        let Some(RefundFacts { outcome, charge_id }) = payment else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        if outcome != Outcome::RefundPending {
            return Attempt::from(Ok(Some(format!(
                "skipped: the payment is {outcome} already"
            ))));
        }
        if bot.is_dry_run() {
            return Attempt::from(Ok(Some(
                "dry run: no refund made; the payment stays refund_pending".into(),
            )));
        }
        let refunded = |note: Option<String>| Attempt {
            result: Ok(note),
            refunded: Some(payment_id),
            verify: false,
            cleared_ban: false,
        };
        if verify {
            let search = RefundSearch {
                charge_id: &charge_id,
                user_id: e.user_id,
                cursor,
                since: e.created_at.timestamp() - CLOCK_SKEW_SECS,
            };
            match find_refund(bot, &search).await {
                Ok(true) => {
                    return refunded(Some("refund confirmed in getStarTransactions".into()));
                }
                Ok(false) => {}
                Err(err) => {
                    return Attempt {
                        result: Err(err.into()),
                        refunded: None,
                        verify: true,
                        cleared_ban: false,
                    };
                }
            }
        }
        match bot.refund_star_payment(e.user_id, &charge_id).await {
            Ok(_) => refunded(None),
            Err(err) if err.mentions("CHARGE_ALREADY_REFUNDED") => {
                refunded(Some("Telegram: charge already refunded".into()))
            }
            Err(err @ BotError::Timeout { .. }) => Attempt {
                result: Err(Failure::Retry(format!(
                    "{err}; the next attempt first looks for the refund in getStarTransactions"
                ))),
                refunded: None,
                verify: true,
                cleared_ban: false,
            },
            Err(err) => Attempt {
                result: Err(err.into()),
                refunded: None,
                verify,
                cleared_ban: false,
            },
        }
    }

    /// Answers a join request by the decision made now, whatever was decided when it arrived:
    /// a member (active or grace, inside term plus grace) is approved, anyone else declined.
    /// Telegram's "no such request" and "already a member" answers mean the goal holds: done.
    async fn join(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        kind: Kind,
        decision: JoinDecision,
    ) -> Performed {
        let approve = decision == JoinDecision::Approve;
        let note = match (kind, approve) {
            (Kind::JoinApprove, false) => {
                Some("declined: the membership ended before the approval was sent".to_string())
            }
            (Kind::JoinDecline, true) => {
                Some("approved: the user became a member before the decline was sent".to_string())
            }
            _ => None,
        };
        let result = if approve {
            bot.approve_join_request(chat, e.user_id).await
        } else {
            bot.decline_join_request(chat, e.user_id).await
        };
        match result {
            Ok(_) => Ok(note),
            Err(err)
                if err.mentions("HIDE_REQUESTER_MISSING")
                    || err.mentions("USER_ALREADY_PARTICIPANT") =>
            {
                Ok(Some(format!("already settled: {err}")))
            }
            Err(err) => Err(chat_failure(err)),
        }
    }
}

/// Whether a revoke of `chat` is skipped, read on the claim's connection before any call; when
/// it is not, the ban about to be made is written down first ([`bans::record`]).
///
/// A revoke is decided on its own chat and user: whether that Telegram account holds access in
/// that chat now (its membership renewed, or a new grant after a delete), which must not be
/// undone — not on the membership it names: after a change of the subscriber's
/// `telegram_user_id` that membership is another account's, and its renewal must not spare the
/// old account. (A revoke of a deleted membership names none.) A user exempt in the channel is
/// never removed.
async fn revoke_skip(client: &Object, e: &Effect, chat: i64) -> Result<Option<String>, ApiError> {
    if let Some(m) = memberships::effect_view_in_chat(client, chat, e.user_id).await?
        && m.status.holds_access()
    {
        return Ok(Some(format!(
            "skipped: the membership is {} again (renewed)",
            m.status
        )));
    }
    if exemptions::exempt_in_chat(client, chat, e.user_id).await? {
        return Ok(Some("skipped: the user is exempt in this channel".into()));
    }
    bans::record(client, chat, e.user_id).await?;
    Ok(None)
}

/// What gave the access a grant or receipt `e` tells of: the cause of the membership change its
/// key names ([`effects::transition_event`]); for an effect without such a key, a payment when
/// it names one, else staff.
async fn source_of(client: &Object, e: &Effect) -> Result<texts::Source, ApiError> {
    let event = e.dedupe_key.as_deref().and_then(effects::transition_event);
    let cause = match (e.membership_id, event) {
        (Some(m), Some(event)) => memberships::event_cause(client, m, event).await?,
        _ => None,
    };
    Ok(match cause {
        Some(EventCause::Payment) => texts::Source::Payment,
        Some(EventCause::Trial) => texts::Source::Trial,
        Some(EventCause::Promo) => texts::Source::Free,
        Some(EventCause::Staff | EventCause::Sweep | EventCause::Refund) => texts::Source::Staff,
        None if e.payment_id.is_some() => texts::Source::Payment,
        None => texts::Source::Staff,
    })
}

/// The skip note of a grant, receipt or notice enqueued for a Telegram account that is no
/// longer the membership's: the subscriber's `telegram_user_id` changed since, so the message
/// (a join link, a receipt, a reminder) would go to the old account. The new account's own
/// effects come from the changes made after the switch.
fn account_changed(e: &Effect, m: &EffectView) -> Option<String> {
    (m.telegram_user_id != e.user_id).then(|| {
        "skipped: the subscriber's Telegram account changed since (telegram_user_id)".to_string()
    })
}

fn no_chat() -> Failure {
    Failure::Permanent("the effect names no chat".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bot_errors_are_classified() {
        let api = |code, description: &str, retry_after| BotError::Api {
            method: "m".into(),
            code,
            description: description.into(),
            retry_after,
        };
        assert!(matches!(
            Failure::from(api(429, "Too Many Requests", Some(7))),
            Failure::RateLimited { secs: 7, .. }
        ));
        assert!(matches!(
            Failure::from(api(500, "Internal", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(502, "Bad Gateway", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(401, "Unauthorized", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(400, "Bad Request: chat not found", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(api(403, "Forbidden: bot was blocked by the user", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Timeout {
                method: "m".into(),
                secs: 10
            }),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Paused {
                method: "m".into(),
                retry_after: 3
            }),
            Failure::RateLimited { secs: 3, .. }
        ));
    }
}
