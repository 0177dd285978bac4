//! The door: a join request that carries a query (Bot API 10.1: the chat made this bot the
//! processor of its join requests) is answered in the webhook's reply, within 10 s of its
//! arrival, whatever the database or Telegram is doing.
//!
//! - A chat whose door is `mini_app` ([`Door::MiniApp`], with `PUBLIC_URL` set): a live member,
//!   a user exempt in the channel or an administrator of the chat is approved
//!   (`answerChatJoinRequestQuery(approve)`); anyone else gets the paywall
//!   (`sendChatJoinRequestWebApp` with `PUBLIC_URL/app/?c=<channel>&r=<reference>`), and the
//!   request waits in `join_requests` ([`crate::access::join_requests`]).
//! - Any other chat: the bot's rule through the query (a member approved, anyone else declined).
//! - The decision gets `DOOR_ANSWER_MS` (default 2 s, well inside Telegram's 10); when it is
//!   not made by then (the database is slow or away) the query is answered `queue` — the
//!   request stays pending as an ordinary one — and the request is written down as soon as the
//!   database takes it, then decided by [`settle`] like any waiting one.
//!
//! A waiting request is decided once ([`settle`], every [`SETTLE_EVERY`] and right after a
//! grant, under the pair lock): approved when its user holds live access (a payment or a trial
//! was applied), declined when its order ran out unpaid or it outlived its query
//! (`DOOR_QUERY_SECS`). The decision's effect answers it through the query while the query is
//! valid, else with `approveChatJoinRequest` / `declineChatJoinRequest`.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use rand::RngCore;

use super::WebhookReply;
use crate::{
    access::{
        exemptions,
        join_requests::{self, Answer, Arrival, Due, State},
        memberships,
    },
    catalog::channels::{self, Door},
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    config::Config,
    db,
    telegram_api::{client::BotApi, types::ChatJoinRequest},
};

/// How often waiting requests are looked at for a decision.
pub const SETTLE_EVERY: Duration = Duration::from_secs(5);
/// Requests decided in one pass at most (the next pass takes the rest).
const SETTLE_BATCH: i64 = 500;
/// How long a chat's administrators, once read, are trusted.
const ADMINS_FRESH: Duration = Duration::from_secs(60);
/// The longest the door waits for `getChatAdministrators` before taking the user for not one.
const ADMINS_TIMEOUT: Duration = Duration::from_millis(800);
/// How soon a chat's administrators are asked again after a read that failed.
const ADMINS_RETRY: Duration = Duration::from_secs(10);
/// How long a request answered `queue` is retried into the database.
const REMEMBER_FOR: Duration = Duration::from_secs(3600);

/// How the door answers the query of `request`, within `DOOR_ANSWER_MS`: the decision, or
/// `queue` when it could not be made in time (the request is then written down later).
pub async fn answer(
    db: &Pool,
    config: &Config,
    request: &ChatJoinRequest,
    query_id: &str,
) -> WebhookReply {
    let started = Instant::now();
    let decided =
        tokio::time::timeout(config.door_answer, decide(db, config, request, query_id)).await;
    let reply = match decided {
        Ok(Ok(reply)) => reply,
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("not decided within {} ms", config.door_answer.as_millis()),
            };
            tracing::warn!(
                chat_id = request.chat.id,
                user_id = request.from.id,
                why,
                "join request query answered queue, to be decided later"
            );
            remember_later(db.clone(), request.clone(), query_id.to_string());
            queue(query_id)
        }
    };
    crate::common::metrics::door_answer(reply_label(&reply), started.elapsed());
    reply
}

fn queue(query_id: &str) -> WebhookReply {
    WebhookReply::AnswerChatJoinRequestQuery {
        chat_join_request_query_id: query_id.to_string(),
        result: "queue",
    }
}

fn reply_label(reply: &WebhookReply) -> &'static str {
    match reply {
        WebhookReply::AnswerChatJoinRequestQuery { result, .. } => result,
        WebhookReply::SendChatJoinRequestWebApp { .. } => "web_app",
        _ => "other",
    }
}

/// The decision on a query, with the database.
async fn decide(
    db: &Pool,
    config: &Config,
    request: &ChatJoinRequest,
    query_id: &str,
) -> Result<WebhookReply, ApiError> {
    let (chat_id, user_id) = (request.chat.id, request.from.id);
    let client = db.get().await?;
    let (channel, live, exempt) = tokio::try_join!(
        channels::door_of_chat(&client, chat_id),
        memberships::is_live_in_chat(&client, chat_id, user_id),
        exemptions::exempt_in_chat(&client, chat_id, user_id),
    )?;
    let answer = |result: &'static str| WebhookReply::AnswerChatJoinRequestQuery {
        chat_join_request_query_id: query_id.to_string(),
        result,
    };
    let paywall = match (&channel, config.public_url.as_deref()) {
        (Some(c), Some(base)) if c.door == Door::MiniApp => Some((c, base)),
        _ => None,
    };
    let Some((channel, base)) = paywall else {
        // The bot's rule, through the query.
        let result = if live { "approve" } else { "decline" };
        tracing::info!(
            chat_id,
            user_id,
            result,
            "join request query answered by the bot's rule"
        );
        return Ok(answer(result));
    };
    // The administrators may have to be asked of Telegram: no connection is held meanwhile.
    let (let_in, client) = if live || exempt {
        (true, client)
    } else if let Some(ids) = cached_admins(chat_id) {
        (ids.contains(&user_id), client)
    } else {
        drop(client);
        let admin = is_administrator(config, chat_id, user_id).await;
        (admin, db.get().await?)
    };
    let reference = new_reference();
    let answer_now = if let_in {
        Answer::Approve
    } else {
        Answer::WebApp
    };
    let arrived = arrival(channel.id, request, query_id, answer_now, &reference);
    let recorded = join_requests::record(&client, &arrived).await?;
    tracing::info!(chat_id, user_id, join_request_id = recorded.id, answer = %recorded.answer,
        "join request at the door");
    Ok(match recorded.answer {
        Answer::Approve => answer("approve"),
        Answer::Queue => answer("queue"),
        Answer::WebApp => WebhookReply::SendChatJoinRequestWebApp {
            chat_join_request_query_id: query_id.to_string(),
            web_app_url: format!("{base}/app/?c={}&r={}", channel.id, recorded.reference),
        },
    })
}

/// A fresh one-time reference for the paywall URL: 16 bytes of the operating system's CSPRNG.
fn new_reference() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("jr_{}", hex::encode(bytes))
}

/// `request` to channel `channel_id` as the door answers it, to be recorded.
fn arrival<'a>(
    channel_id: i32,
    request: &ChatJoinRequest,
    query_id: &'a str,
    answer: Answer,
    reference: &'a str,
) -> Arrival<'a> {
    Arrival {
        channel_id,
        chat_id: request.chat.id,
        user_id: request.from.id,
        query_id,
        answer,
        requested_at: request
            .date
            .and_then(|d| DateTime::from_timestamp(d, 0))
            .unwrap_or_else(Utc::now),
        reference,
    }
}

type AdminCache = Mutex<HashMap<i64, (Instant, Arc<Vec<i64>>)>>;

static ADMINS: LazyLock<AdminCache> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// One read of `getChatAdministrators` at a time: a burst of requests to a chat whose list is
/// stale waits for the one read instead of each making its own.
static ADMINS_READ: LazyLock<tokio::sync::Mutex<()>> =
    LazyLock::new(|| tokio::sync::Mutex::new(()));

fn cached_admins(chat_id: i64) -> Option<Arc<Vec<i64>>> {
    ADMINS
        .lock()
        .ok()
        .and_then(|m| m.get(&chat_id).cloned())
        .filter(|(at, _)| at.elapsed() < ADMINS_FRESH)
        .map(|(_, ids)| ids)
}

/// Whether `user_id` administers chat `chat_id`, from `getChatAdministrators` read at most once
/// a minute per chat (one read at a time); a call that fails or is slow counts as "not one"
/// (the user then sees the paywall, and a staff member can exempt them), and is not tried
/// again for [`ADMINS_RETRY`].
async fn is_administrator(config: &Config, chat_id: i64, user_id: i64) -> bool {
    if let Some(ids) = cached_admins(chat_id) {
        return ids.contains(&user_id);
    }
    let Some(bot) = BotApi::from_config(config, ADMINS_TIMEOUT) else {
        return false;
    };
    let Ok(_reading) = tokio::time::timeout(ADMINS_TIMEOUT, ADMINS_READ.lock()).await else {
        return false;
    };
    // Read by the request this one waited for.
    if let Some(ids) = cached_admins(chat_id) {
        return ids.contains(&user_id);
    }
    let (ids, fresh_for) =
        match tokio::time::timeout(ADMINS_TIMEOUT, bot.chat_administrator_ids(chat_id)).await {
            Ok(Ok(ids)) => (ids, ADMINS_FRESH),
            Ok(Err(e)) => {
                tracing::warn!(chat_id, error = %e, "getChatAdministrators failed at the door");
                (Vec::new(), ADMINS_RETRY)
            }
            Err(_) => {
                tracing::warn!(chat_id, "getChatAdministrators too slow at the door");
                (Vec::new(), ADMINS_RETRY)
            }
        };
    let found = ids.contains(&user_id);
    if let Ok(mut m) = ADMINS.lock() {
        // A failed read is kept as an empty list that turns stale after `ADMINS_RETRY`.
        let at = Instant::now()
            .checked_sub(ADMINS_FRESH - fresh_for)
            .unwrap_or_else(Instant::now);
        m.insert(chat_id, (at, Arc::new(ids)));
    }
    found
}

/// Writes down a request the door answered `queue`, as soon as the database takes it (retried
/// for an hour): [`settle`] then decides it like any waiting request.
fn remember_later(db: Pool, request: ChatJoinRequest, query_id: String) {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut wait = Duration::from_millis(500);
        while started.elapsed() < REMEMBER_FOR {
            match remember(&db, &request, &query_id).await {
                Ok(()) => return,
                Err(e) => tracing::debug!(error = %e, "queued join request not written yet"),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
        }
        tracing::error!(
            chat_id = request.chat.id,
            user_id = request.from.id,
            "a join request answered queue could not be written down for an hour; it stays \
             pending in Telegram for the chat's administrators"
        );
    });
}

async fn remember(db: &Pool, request: &ChatJoinRequest, query_id: &str) -> Result<(), ApiError> {
    let client = db.get().await?;
    let Some(channel) = channels::door_of_chat(&client, request.chat.id).await? else {
        return Ok(());
    };
    let reference = new_reference();
    let queued = arrival(channel.id, request, query_id, Answer::Queue, &reference);
    join_requests::record(&client, &queued).await?;
    Ok(())
}

/// Decides every waiting request that is due ([`join_requests::due`]); returns how many were
/// decided. Each is decided in its own transaction under its pair lock.
pub async fn settle(db: &Pool, config: &Config) -> Result<usize, ApiError> {
    let due = {
        let client = db.get().await?;
        join_requests::due(
            &client,
            config.door_query_secs,
            config.hold_secs,
            SETTLE_BATCH,
        )
        .await?
    };
    let mut decided = 0;
    for d in &due {
        if settle_one(db, config, d).await?.is_some() {
            decided += 1;
        }
    }
    Ok(decided)
}

/// Decides the waiting request of Telegram user `user_id` at chat `chat_id` now, if it is due
/// (the worker calls this right after a grant, so a paying buyer is let in without waiting for
/// the next pass). Returns its new state.
pub async fn settle_pair(
    db: &Pool,
    config: &Config,
    chat_id: i64,
    user_id: i64,
) -> Result<Option<State>, ApiError> {
    let waiting = {
        let client = db.get().await?;
        join_requests::waiting_of(&client, chat_id, user_id).await?
    };
    match waiting {
        Some(d) => settle_one(db, config, &d).await,
        None => Ok(None),
    }
}

async fn settle_one(db: &Pool, config: &Config, d: &Due) -> Result<Option<State>, ApiError> {
    let (query_secs, hold_secs) = (config.door_query_secs, config.hold_secs);
    let state = crate::transaction!(db, |tx| {
        if let Some(s) = d.subscriber_id {
            db::lock_pair(tx, SubscriberId(s), ChannelId(d.channel_id)).await?;
        }
        join_requests::decide(tx, d, query_secs, hold_secs).await
    })?;
    if let Some(state) = state {
        tracing::info!(join_request_id = d.id, chat_id = d.chat_id, user_id = d.user_id,
            %state, "join request at the door decided");
    }
    Ok(state)
}
