//! Performing one claimed effect: what it needs is read on the claim's connection, which is
//! returned to the pool before the first Bot API call; then the calls, each kind by its own
//! rule ([`super::access`], [`super::notices`], [`super::refund`], [`super::gateway_refund`],
//! [`super::bot`]; a fiscal receipt calls Checkbox instead, [`super::receipts`]). Every
//! effect is harmless when repeated and re-checks the state it acts on: a grant, receipt or
//! notice whose membership changed since is skipped, a revoke whose member holds access again
//! (or is exempt in the channel, or a chat administrator) is skipped, a join request is decided
//! again by the door's rule ([`join_request_decision`]), a refund is made only while its
//! payment is `refund_pending`.
//!
//! A call that manages the chat (ban, unban, join answers, the join link) refused because the
//! bot lacks its rights there is [`Failure::NoRights`] ([`super::failure`]): the effect pauses,
//! it does not fail.

use deadpool_postgres::Object;

use super::{
    Worker, bans,
    failure::{Attempt, Failure},
};
use crate::{
    access::{
        exemptions,
        memberships::{self, EffectView, EventCause, Status},
    },
    common::error::ApiError,
    outbox::effects::{self, Effect, Kind},
    payments::star_subscriptions,
    present::texts,
    telegram::join_request_decision,
    telegram_api::client::{BotApi, Urgency},
};

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
            Kind::GatewayRefund => self.gateway_refund(client, bot, e).await,
            Kind::MemberMessage => self.member_message(client, bot, e).await,
            Kind::FiscalReceipt => self.fiscal_receipt(client, e).await,
            Kind::ReferralReward => {
                drop(client);
                let settled = crate::referrals::rewards::settle_of_effect(&self.state.db, e).await;
                Attempt::from(settled.map_err(Failure::Db))
            }
            Kind::BotMessage | Kind::Invoice | Kind::SubscriptionCancel => {
                let performed = super::bot::perform(&self.state, client, bot, e, kind).await;
                Attempt::from(performed.map_err(Failure::from))
            }
            Kind::JoinApprove | Kind::JoinDecline => {
                let Some(chat) = e.chat_id else {
                    return Attempt::from(Err(no_chat()));
                };
                // A request at a Mini App door was decided under its pair lock: the effect
                // carries that decision, through the request's query while it is valid.
                if let Some(request_id) = e.payload["join_request_id"].as_i64() {
                    let read = crate::access::join_requests::to_answer(
                        &client,
                        request_id,
                        self.state.config.door_query_secs,
                    )
                    .await;
                    drop(client);
                    return match read {
                        Ok(Some(r)) => self.door(bot, e, chat, request_id, r).await.into(),
                        Ok(None) => Attempt::from(Ok(Some(
                            "skipped: the join request was deleted with its channel".into(),
                        ))),
                        Err(err) => Attempt::from(Err(Failure::Db(err))),
                    };
                }
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
pub(super) async fn revoke_skip(
    client: &Object,
    e: &Effect,
    chat: i64,
) -> Result<Option<String>, ApiError> {
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
        Some(EventCause::Referral) => texts::Source::Referral,
        Some(
            EventCause::Staff | EventCause::Sweep | EventCause::Refund | EventCause::ReferralBack,
        ) => texts::Source::Staff,
        None if e.payment_id.is_some() => texts::Source::Payment,
        None => texts::Source::Staff,
    })
}

/// The skip note of a grant, receipt or notice enqueued for a Telegram account that is no
/// longer the membership's: the subscriber's `telegram_user_id` changed since, so the message
/// (a join link, a receipt, a reminder) would go to the old account. The new account's own
/// effects come from the changes made after the switch.
pub(super) fn account_changed(e: &Effect, m: &EffectView) -> Option<String> {
    (m.telegram_user_id != e.user_id).then(|| {
        "skipped: the subscriber's Telegram account changed since (telegram_user_id)".to_string()
    })
}

pub(super) fn no_chat() -> Failure {
    Failure::Permanent("the effect names no chat".into())
}
