//! Performing the access effects: a grant's join link, a revoke, an unban and the answer to a
//! join request, each on the chat it names.

use super::{
    Worker,
    failure::{Attempt, Failure, Performed, chat_failure},
    perform::{account_changed, no_chat},
};
use crate::{
    access::{join_requests, memberships::EffectView},
    catalog::channels,
    common::error::ApiError,
    outbox::effects::{self, Effect, Kind},
    present::{render, texts},
    telegram::JoinDecision,
    telegram_api::client::BotApi,
};

impl Worker {
    /// The join link in one `sendMessage` (the channel's stored link, else one made and
    /// stored now). Only a user subgate banned in the chat (`banned`: a `chat_bans` row, left
    /// by a revoke whose unban was lost) is unbanned first (only if banned: a member inside
    /// stays inside).
    pub(super) async fn grant(
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
        // A buyer waiting at the chat's Mini App door is let in through their request (its
        // own effect answers it), not sent a link.
        match crate::telegram::door::settle_pair(
            &self.state.db,
            &self.state.config,
            chat,
            e.user_id,
        )
        .await
        {
            Ok(Some(join_requests::State::Approved)) => {
                return Attempt::from(Ok(Some(
                    "approved at the door: the user's waiting join request is let in".into(),
                )));
            }
            Ok(_) => {}
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
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
    pub(super) async fn grant_message(
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
    pub(super) async fn channel_link(
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

    /// Ban, then unban only if banned: out of the channel now, free to rejoin after paying (the
    /// ban's `chat_bans` row, written by [`revoke_skip`](super::perform::revoke_skip), goes once
    /// this is recorded done). Telegram's "an administrator", "never in the chat" and "no such
    /// user" mean there is nobody to remove: done, with a note. Once the user is out (or was never
    /// in), the buyer's `notice` that their access ended, if the revoke has one, is enqueued —
    /// keyed on this revoke, so a repeated attempt enqueues it once — never for a chat
    /// administrator, whose access did not end.
    pub(super) async fn revoke(
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
    pub(super) async fn tell_access_ended(
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
    pub(super) async fn unban(&self, bot: &BotApi, e: &Effect, m: Option<EffectView>) -> Attempt {
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

    /// Answers a request decided at a Mini App door (`r`, row `request_id`): through its query
    /// while that is valid, else by chat and user (also when Telegram no longer knows the
    /// query). Telegram's "no such request" and "already a member" mean the goal holds.
    pub(super) async fn door(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        request_id: i64,
        r: join_requests::ToAnswer,
    ) -> Performed {
        if r.answered {
            return Ok(Some(
                "skipped: Telegram confirmed this answer before".into(),
            ));
        }
        let approve = match r.state {
            join_requests::State::Approved => true,
            join_requests::State::Declined => false,
            join_requests::State::Waiting => {
                return Ok(Some("skipped: the request is waiting again".into()));
            }
        };
        let result = if approve { "approve" } else { "decline" };
        let mut note = None;
        let by_query = if r.query_valid {
            match bot.answer_join_request_query(&r.query_id, result).await {
                Ok(_) => true,
                Err(err)
                    if err.mentions("QUERY_ID_INVALID") || err.mentions("query is too old") =>
                {
                    note = Some(format!(
                        "the query had expired ({err}); answered by chat and user"
                    ));
                    false
                }
                Err(err) => return Err(chat_failure(err)),
            }
        } else {
            false
        };
        if !by_query && let Some(settled) = by_chat_and_user(bot, chat, e.user_id, approve).await? {
            note = Some(settled);
        }
        let client = self
            .state
            .db
            .get()
            .await
            .map_err(|e| Failure::Db(e.into()))?;
        join_requests::answered(&client, request_id)
            .await
            .map_err(Failure::Db)?;
        Ok(note)
    }

    /// Answers a join request by the decision made now, whatever was decided when it arrived:
    /// a member (active or grace, inside term plus grace) is approved, anyone else declined.
    /// Telegram's "no such request" and "already a member" answers mean the goal holds: done.
    pub(super) async fn join(
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
        let settled = by_chat_and_user(bot, chat, e.user_id, approve).await?;
        Ok(settled.or(note))
    }
}

/// Approves or declines the join request of `user` to `chat` by chat and user. Telegram's "no
/// such request" (`HIDE_REQUESTER_MISSING`) and "already a member" (`USER_ALREADY_PARTICIPANT`)
/// mean the goal holds: done, with that as the note.
async fn by_chat_and_user(
    bot: &BotApi,
    chat: i64,
    user: i64,
    approve: bool,
) -> Result<Option<String>, Failure> {
    let result = if approve {
        bot.approve_join_request(chat, user).await
    } else {
        bot.decline_join_request(chat, user).await
    };
    match result {
        Ok(_) => Ok(None),
        Err(err)
            if err.mentions("HIDE_REQUESTER_MISSING")
                || err.mentions("USER_ALREADY_PARTICIPANT") =>
        {
            Ok(Some(format!("already settled: {err}")))
        }
        Err(err) => Err(chat_failure(err)),
    }
}
