//! What Telegram tells us about chat members, and what subgate does about it (API.md "Telegram
//! follows the database"):
//!
//! - [`my_chat_member`]: the bot's own rights in a channel's chat. Without the rights to invite
//!   and ban users the channel is `no_rights` (its access effects wait; the worker does not
//!   claim them); when they come back it is `ok` again, its stored join link is forgotten
//!   (Telegram revokes the links of a demoted administrator; the next grant makes a new one)
//!   and the chat's waiting effects are due at once.
//! - [`chat_member`]: a user who joined a channel's chat without live access (a forwarded
//!   link, an administrator adding them) gets a revoke, found by this update, unless they are
//!   an administrator or exempt ([`crate::access::exemptions`]). The revoke is re-checked by the worker
//!   just before it is performed, like every revoke.
//! - [`probe_once`]: asks Telegram (`getChatMember` of the bot itself) about every `no_rights`
//!   channel, for rights given back without an update we saw; [`probe_loop`] runs it every
//!   [`PROBE_EVERY`].
//!
//! Either update may also report one of our join links revoked: the stored one is forgotten,
//! so the next grant makes a new one.
//!
//! A supergroup (a forum or not) is sold as a channel is, and its updates read alike: a bot
//! added to a group as a plain `member` has no rights yet, and a `restricted` user is in the
//! chat exactly while `is_member` says so ([`ChatMember::in_chat`]).

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::{
    access::exemptions,
    catalog::channels::{self, TelegramStatus},
    common::{error::ApiError, shutdown::ShutdownSignal},
    config::Config,
    outbox::effects::{self, Kind, payload::Found},
    telegram::{self, JoinDecision},
    telegram_api::{
        client::BotApi,
        types::{ChatMember, ChatMemberUpdated},
    },
};

/// How often [`probe_loop`] asks Telegram about the channels without rights.
pub const PROBE_EVERY: Duration = Duration::from_secs(300);

/// How long one probe call may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The channel status the bot's membership in its chat gives (pure).
pub fn rights_status(bot: &ChatMember) -> TelegramStatus {
    if bot.can_manage_members() {
        TelegramStatus::Ok
    } else {
        TelegramStatus::NoRights
    }
}

/// What a `chat_member` update made subgate do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinCheck {
    /// Not a join into a channel's chat (a leave, a promotion, an unknown chat).
    NotAJoin,
    /// The user holds live access there.
    Live,
    /// An owner or administrator of the chat.
    Admin,
    /// On the channel's exemption list.
    Exempt,
    /// No live access: a revoke was enqueued (`None`: the same update's revoke already was).
    Revoke(Option<i64>),
}

/// Records the bot's rights in chat `chat` as `status`, in one transaction with what a change
/// back to `ok` brings (the stored link forgotten, the chat's effects due now). Returns the
/// channel's id when its status changed; nothing happens for a chat no channel sells, or one
/// already in `status`.
pub async fn record_rights(
    pool: &Pool,
    chat: i64,
    status: TelegramStatus,
) -> Result<Option<i32>, ApiError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let changed = channels::set_telegram_status(&tx, chat, status).await?;
    let mut woken = 0;
    if changed.is_some() && status == TelegramStatus::Ok {
        channels::forget_invite_link(&tx, chat, None).await?;
        woken = effects::wake_chat(&tx, chat).await?;
    }
    tx.commit().await?;
    // Paused effects may have been made due: wake the worker.
    crate::db::announce_commit();
    if let Some(channel_id) = changed {
        match status {
            TelegramStatus::NoRights => tracing::warn!(
                channel_id,
                chat_id = chat,
                "the bot lost its rights to manage members: the chat's access effects wait"
            ),
            TelegramStatus::Ok => tracing::info!(
                channel_id,
                chat_id = chat,
                woken,
                "the bot's rights to manage members are back: the chat's effects are due"
            ),
        }
    }
    Ok(changed)
}

/// A `my_chat_member` update: the bot's own status in a chat changed.
pub async fn my_chat_member(pool: &Pool, u: &ChatMemberUpdated) -> Result<Option<i32>, ApiError> {
    forget_revoked_link(pool, u).await?;
    record_rights(pool, u.chat.id, rights_status(&u.new_chat_member)).await
}

/// A `chat_member` update: a member's status in a chat changed. A user who joined a channel's
/// chat without live access is removed (a revoke keyed on this update's date, so a redelivered
/// update adds nothing), unless an administrator or exempt.
pub async fn chat_member(pool: &Pool, u: &ChatMemberUpdated) -> Result<JoinCheck, ApiError> {
    forget_revoked_link(pool, u).await?;
    let (old, new) = (&u.old_chat_member, &u.new_chat_member);
    if old.in_chat() || !new.in_chat() {
        return Ok(JoinCheck::NotAJoin);
    }
    let (chat, user) = (u.chat.id, new.user.id);
    let client = pool.get().await?;
    if channels::id_by_chat(&client, chat).await?.is_none() {
        return Ok(JoinCheck::NotAJoin);
    }
    let check = if new.is_admin() {
        JoinCheck::Admin
    } else if telegram::join_request_decision(&client, chat, user).await? == JoinDecision::Approve {
        JoinCheck::Live
    } else if exemptions::exempt_in_chat(&client, chat, user).await? {
        JoinCheck::Exempt
    } else {
        let id = effects::enqueue_found(
            &**client,
            Kind::Revoke,
            chat,
            user,
            Found::ChatMember,
            u.date,
        )
        .await?;
        JoinCheck::Revoke(id)
    };
    tracing::info!(chat_id = chat, user_id = user, ?check, "chat member joined");
    Ok(check)
}

/// Forgets the channel's stored join link when the update reports it revoked.
async fn forget_revoked_link(pool: &Pool, u: &ChatMemberUpdated) -> Result<(), ApiError> {
    let Some(link) = u.invite_link.as_ref().filter(|l| l.is_revoked) else {
        return Ok(());
    };
    let client = pool.get().await?;
    if let Some(channel_id) =
        channels::forget_invite_link(&client, u.chat.id, Some(&link.invite_link)).await?
    {
        tracing::info!(
            channel_id,
            chat_id = u.chat.id,
            "the channel's join link was revoked: the next grant makes a new one"
        );
    }
    Ok(())
}

/// One pass of the rights probe: `getChatMember(chat, bot)` for every `no_rights` channel, and
/// the status it shows recorded ([`record_rights`]). A failed call leaves that channel as it
/// is (the next pass asks again). Returns the ids of the channels whose rights came back. No
/// connection is held during a call.
pub async fn probe_once(pool: &Pool, bot: &BotApi) -> Result<Vec<i32>, ApiError> {
    let Ok(bot_id) = bot.bot_id().parse::<i64>() else {
        return Ok(Vec::new());
    };
    let waiting = {
        let client = pool.get().await?;
        channels::without_rights(&client).await?
    };
    let mut back = Vec::new();
    for c in waiting {
        match bot.get_chat_member(c.telegram_chat_id, bot_id).await {
            Ok(member) => {
                let status = rights_status(&member);
                if status == TelegramStatus::Ok
                    && record_rights(pool, c.telegram_chat_id, status)
                        .await?
                        .is_some()
                {
                    back.push(c.id);
                }
            }
            Err(e) => tracing::warn!(
                channel_id = c.id,
                chat_id = c.telegram_chat_id,
                error = %e,
                "rights probe: getChatMember failed; asking again at the next pass"
            ),
        }
    }
    Ok(back)
}

/// The rights probe every [`PROBE_EVERY`] (the first at start-up), until shutdown. Only with a
/// real bot: without `TELEGRAM_BOT_TOKEN`, or in dry-run (whose answers are made up), it
/// returns at once.
pub async fn probe_loop(pool: Pool, config: std::sync::Arc<Config>, shutdown: ShutdownSignal) {
    if config.telegram_dry_run || config.telegram_bot_token.is_none() {
        return;
    }
    let Some(bot) = BotApi::from_config(&config, PROBE_TIMEOUT) else {
        return;
    };
    let mut ticks = shutdown.ticks(PROBE_EVERY);
    while ticks.next().await {
        if let Err(e) = probe_once(&pool, &bot).await {
            tracing::error!(error = %e, "rights probe failed; trying again at the next tick");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(json: &str) -> ChatMember {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn rights_need_invite_and_restrict() {
        let user = r#""user": {"id": 1}"#;
        for (status, want) in [
            (
                format!(r#"{{"status": "creator", {user}}}"#),
                TelegramStatus::Ok,
            ),
            (
                format!(
                    r#"{{"status": "administrator", {user}, "can_invite_users": true,
                        "can_restrict_members": true}}"#
                ),
                TelegramStatus::Ok,
            ),
            (
                format!(
                    r#"{{"status": "administrator", {user}, "can_invite_users": true,
                        "can_restrict_members": false}}"#
                ),
                TelegramStatus::NoRights,
            ),
            (
                format!(r#"{{"status": "administrator", {user}, "can_restrict_members": true}}"#),
                TelegramStatus::NoRights,
            ),
            (
                format!(r#"{{"status": "member", {user}}}"#),
                TelegramStatus::NoRights,
            ),
            (
                format!(r#"{{"status": "restricted", {user}, "is_member": true}}"#),
                TelegramStatus::NoRights,
            ),
            (
                format!(r#"{{"status": "left", {user}}}"#),
                TelegramStatus::NoRights,
            ),
            (
                format!(r#"{{"status": "kicked", {user}}}"#),
                TelegramStatus::NoRights,
            ),
        ] {
            assert_eq!(rights_status(&member(&status)), want, "{status}");
        }
    }
}
