//! A fake Telegram Bot API: a real axum HTTP server on 127.0.0.1:0 inside the test, serving
//! `POST /bot{token}/{method}`. It records every call (method and JSON parameters), keeps the
//! state that makes repeats observable (who is banned, which join requests are open, which
//! charges were refunded, the Stars transaction list, the `allowed_updates` of `setWebhook`,
//! checked against the update kinds Telegram knows), and can be scripted per method to answer
//! ok, 429 with `parameters.retry_after`, 500, a Telegram error, or to hang. A chat is a channel
//! unless declared a supergroup ([`FakeBot::set_supergroup`], a forum or not), whose restricted
//! users (`FakeBot::restrict`) are answered `restricted` with `is_member`; [`FakeBot::chat`]
//! gives the `Chat` object for the updates a test builds.
//!
//! It also watches for overlapping calls about the same (chat, user): each call is held open
//! for a moment (`set_delay`), and a second call for the same pair arriving meanwhile is
//! counted in [`FakeBot::overlaps`] — two workers performing the same effect at once. Calls
//! about the same user in any chat (their private chat included) are counted in
//! [`FakeBot::member_overlaps`] — two effects of one member performed at once. A call can be
//! held open until the test releases it ([`FakeBot::hold`]).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::Notify;

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

/// The bot token tests configure (`TELEGRAM_BOT_TOKEN`).
pub const TOKEN: &str = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
/// Its secret half, which must never appear in logs or errors either.
pub const TOKEN_SECRET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
/// The bot's own user id (the token's first half).
pub const BOT_ID: i64 = 123456;

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub params: Value,
}

/// How the fake answers a call.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The method's normal success.
    Ok,
    /// 429 with `parameters.retry_after`.
    TooManyRequests(u64),
    /// 500 Internal Server Error (as Telegram's envelope).
    ServerError,
    /// `ok: false` with this code and description (e.g. 400, "Bad Request: …").
    Error(i64, String),
    /// Never answers (the client must time out). The call is still recorded.
    Hang,
    /// Performs the call (state changes as for `Ok`) but never answers: the outcome is lost.
    PerformThenHang,
}

#[derive(Default)]
struct FakeState {
    calls: Vec<Call>,
    /// Replies used once each, in order, per method; then `sticky`, then `Reply::Ok`.
    queued: HashMap<String, VecDeque<Reply>>,
    sticky: HashMap<String, Reply>,
    delay: Duration,
    in_flight: HashMap<(i64, i64), usize>,
    overlaps: usize,
    user_in_flight: HashMap<i64, usize>,
    member_overlaps: usize,
    holds: HashMap<String, VecDeque<Hold>>,
    banned: HashSet<(i64, i64)>,
    open_requests: HashSet<(i64, i64)>,
    members: HashSet<(i64, i64)>,
    refunded: HashSet<String>,
    /// (user, first charge id) of Stars subscriptions cancelled with editUserStarSubscription.
    cancelled_subscriptions: HashSet<(i64, String)>,
    transactions: Vec<Value>,
    counter: u64,
    /// Every method answers this while set (a whole-API outage), before anything else.
    outage: Option<Reply>,
    /// Chat administrators other than the bot (`getChatMember` says `administrator`).
    admins: HashSet<(i64, i64)>,
    /// Chats where the bot is no longer an administrator: member management is refused.
    no_rights: HashSet<i64>,
    /// Users Telegram does not know (`getChatMember` answers "user not found").
    unknown_users: HashSet<i64>,
    /// Invite links made (chat, link), and the revoked ones.
    links: Vec<(i64, String)>,
    revoked_links: HashSet<String>,
    /// The `sendMessage` calls performed (answered ok, or performed then hung), in order.
    delivered: Vec<Call>,
    /// The `allowed_updates` of the last `setWebhook` that named them.
    allowed_updates: Option<Vec<String>>,
    /// Chats declared supergroups, with whether each is a forum; any other chat is a channel.
    supergroups: HashMap<i64, bool>,
    /// Restricted users of a supergroup: `getChatMember` says `restricted`, with `is_member`
    /// telling whether they are in it (in `members`) or not.
    restricted: HashSet<(i64, i64)>,
    /// Join request queries (Bot API 10.1) by id: their chat and user, and every answer given
    /// (`approve`, `decline`, `queue`, or `web_app <url>`), in order.
    queries: HashMap<String, Query>,
}

/// A join request's query, as the fake keeps it.
#[derive(Debug, Clone, Default)]
struct Query {
    chat: i64,
    user: i64,
    answers: Vec<String>,
}

/// The update kinds Telegram sends (Bot API 10.2): what `setWebhook` accepts in
/// `allowed_updates`. `subscription` is `BotSubscriptionUpdated`.
pub const UPDATE_KINDS: &[&str] = &[
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "message_reaction",
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "subscription",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
];

/// A call held open by [`FakeBot::hold`] until the test releases it.
#[derive(Clone, Default)]
pub struct Hold {
    arrived: Arc<Notify>,
    release: Arc<Notify>,
}

impl Hold {
    /// Waits until the held call has arrived (it is recorded and open).
    pub async fn arrived(&self) {
        self.arrived.notified().await
    }

    /// Lets the held call answer (with the reply it was scripted).
    pub fn release(&self) {
        self.release.notify_one()
    }
}

/// The running fake.
#[derive(Clone)]
pub struct FakeBot {
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeBot {
    /// Starts the server on a free port.
    pub async fn start() -> FakeBot {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let app = Router::new()
            .route("/{bot}/{method}", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeBot {
            url: format!("http://{addr}"),
            state,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Answers the next call of `method` with `reply` (queued after earlier scripted ones).
    pub fn script(&self, method: &str, reply: Reply) {
        self.with(|s| {
            s.queued
                .entry(method.to_string())
                .or_default()
                .push_back(reply)
        });
    }

    /// Answers every call of `method` with `reply` from now on (after queued ones).
    pub fn always(&self, method: &str, reply: Reply) {
        self.with(|s| s.sticky.insert(method.to_string(), reply));
    }

    /// Back to normal answers for `method`.
    pub fn reset(&self, method: &str) {
        self.with(|s| {
            s.sticky.remove(method);
            s.queued.remove(method);
        });
    }

    /// Holds the next call of `method` open (after recording it) until the returned [`Hold`]
    /// is released; later calls are not held unless held again.
    pub fn hold(&self, method: &str) -> Hold {
        let hold = Hold::default();
        self.with(|s| {
            s.holds
                .entry(method.to_string())
                .or_default()
                .push_back(hold.clone())
        });
        hold
    }

    /// Holds every call open this long before answering.
    pub fn set_delay(&self, delay: Duration) {
        self.with(|s| s.delay = delay);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.with(|s| s.calls.clone())
    }

    /// The calls of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// The method names in call order.
    pub fn methods(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.method).collect()
    }

    pub fn clear_calls(&self) {
        self.with(|s| s.calls.clear());
    }

    /// The messages Telegram delivered (`sendMessage` calls performed), oldest first; a call
    /// answered with an error or left hanging delivered nothing.
    pub fn delivered_messages(&self) -> Vec<Call> {
        self.with(|s| s.delivered.clone())
    }

    /// Calls being answered right now (held or delayed; a hanging one is not counted).
    pub fn in_flight(&self) -> usize {
        self.with(|s| s.in_flight.values().sum())
    }

    /// Overlapping calls about the same (chat, user) seen so far.
    pub fn overlaps(&self) -> usize {
        self.with(|s| s.overlaps)
    }

    /// Overlapping calls about the same user (in any chat, or a message to them) seen so far.
    pub fn member_overlaps(&self) -> usize {
        self.with(|s| s.member_overlaps)
    }

    /// The user a call is about: its `user_id`, or the recipient of a message.
    pub fn user_of(call: &Call) -> Option<i64> {
        user_of(&call.method, &call.params)
    }

    pub fn is_banned(&self, chat: i64, user: i64) -> bool {
        self.with(|s| s.banned.contains(&(chat, user)))
    }

    pub fn is_member(&self, chat: i64, user: i64) -> bool {
        self.with(|s| s.members.contains(&(chat, user)))
    }

    /// Puts `user` into `chat` (as if they had joined).
    pub fn add_member(&self, chat: i64, user: i64) {
        self.with(|s| s.members.insert((chat, user)));
    }

    /// Bans `user` in `chat` (as an administrator might in the app): out of it, and kicked.
    pub fn ban(&self, chat: i64, user: i64) {
        self.with(|s| {
            s.members.remove(&(chat, user));
            s.restricted.remove(&(chat, user));
            s.banned.insert((chat, user));
        });
    }

    /// Opens a join request of `user` to `chat` (approve/decline then succeed once).
    pub fn open_join_request(&self, chat: i64, user: i64) {
        self.with(|s| s.open_requests.insert((chat, user)));
    }

    /// True when the Stars subscription of `user` started by `charge_id` was cancelled.
    pub fn subscription_cancelled(&self, user: i64, charge_id: &str) -> bool {
        self.with(|s| {
            s.cancelled_subscriptions
                .contains(&(user, charge_id.to_string()))
        })
    }

    pub fn was_refunded(&self, charge_id: &str) -> bool {
        self.with(|s| s.refunded.contains(charge_id))
    }

    /// Appends an incoming Stars payment from `user` to the transaction list.
    pub fn add_incoming_payment(&self, charge_id: &str, user: i64, payload: &str, amount: i64) {
        self.add_incoming_payment_at(charge_id, user, payload, amount, chrono::Utc::now());
    }

    /// [`FakeBot::add_incoming_payment`] made at `date`.
    pub fn add_incoming_payment_at(
        &self,
        charge_id: &str,
        user: i64,
        payload: &str,
        amount: i64,
        date: chrono::DateTime<chrono::Utc>,
    ) {
        self.with(|s| {
            s.transactions.push(json!({
                "id": charge_id, "amount": amount, "date": date.timestamp(),
                "source": {"type": "user", "transaction_type": "invoice_payment",
                           "user": {"id": user, "is_bot": false, "first_name": "Buyer"},
                           "invoice_payload": payload}
            }))
        });
    }

    /// Appends an incoming Stars payment from `user` made now, for which one of Telegram's
    /// affiliate programs paid its affiliate (a channel) `fee` Stars at `per_mille`.
    pub fn add_incoming_payment_with_affiliate(
        &self,
        charge_id: &str,
        user: i64,
        payload: &str,
        amount: i64,
        (fee, per_mille): (i64, i64),
    ) {
        self.with(|s| {
            s.transactions.push(json!({
                "id": charge_id, "amount": amount, "date": chrono::Utc::now().timestamp(),
                "source": {"type": "user", "transaction_type": "invoice_payment",
                           "user": {"id": user, "is_bot": false, "first_name": "Buyer"},
                           "affiliate": {
                               "affiliate_chat": {"id": -1_009_000_000_001_i64, "type": "channel",
                                                  "title": "Affiliate"},
                               "commission_per_mille": per_mille, "amount": fee,
                               "nanostar_amount": 0
                           },
                           "invoice_payload": payload}
            }))
        });
    }

    /// Appends `n` incoming Stars payments of other buyers (history before the one a test
    /// looks for).
    pub fn add_filler_transactions(&self, n: usize) {
        self.with(|s| {
            let date = chrono::Utc::now().timestamp();
            for i in 0..n {
                s.transactions.push(json!({
                    "id": format!("filler-{i}"), "amount": 10, "date": date,
                    "source": {"type": "user", "transaction_type": "invoice_payment",
                               "user": {"id": 900_000 + i, "is_bot": false, "first_name": "Old"},
                               "invoice_payload": "not-an-order"}
                }))
            }
        });
    }

    /// Every method answers `reply` (e.g. `ServerError`, `Hang`) until [`FakeBot::end_outage`].
    pub fn start_outage(&self, reply: Reply) {
        self.with(|s| s.outage = Some(reply));
    }

    pub fn end_outage(&self) {
        self.with(|s| s.outage = None);
    }

    /// Makes `user` an administrator of `chat` (in the chat, never to be removed).
    pub fn add_admin(&self, chat: i64, user: i64) {
        self.with(|s| {
            s.admins.insert((chat, user));
            s.members.insert((chat, user));
        });
    }

    /// Takes the bot's admin rights in `chat` away (`false`) or gives them back (`true`).
    /// Telegram revokes the links a demoted administrator made, so demoting revokes them.
    pub fn set_bot_rights(&self, chat: i64, rights: bool) {
        self.with(|s| {
            if rights {
                s.no_rights.remove(&chat);
            } else {
                s.no_rights.insert(chat);
                let made: Vec<String> = s
                    .links
                    .iter()
                    .filter(|(c, _)| *c == chat)
                    .map(|(_, l)| l.clone())
                    .collect();
                s.revoked_links.extend(made);
            }
        });
    }

    /// Makes `user` unknown to Telegram (a deleted account).
    pub fn add_unknown_user(&self, user: i64) {
        self.with(|s| s.unknown_users.insert(user));
    }

    /// Declares `chat` a supergroup (a forum when `forum`): `getChat` and [`FakeBot::chat`]
    /// say so.
    pub fn set_supergroup(&self, chat: i64, forum: bool) {
        self.with(|s| s.supergroups.insert(chat, forum));
    }

    /// The `Chat` object Telegram puts in updates about `chat`: a `supergroup` (with
    /// `is_forum` when it is one) if declared so, else a `channel`.
    pub fn chat(&self, chat: i64) -> Value {
        self.with(|s| chat_object(s, chat))
    }

    /// Restricts `user` in the supergroup `chat` (as an administrator might): `getChatMember`
    /// says `restricted`, with `is_member` true while they are in it; a restricted user in the
    /// chat is on its member list. A ban lifts the restriction, as in Telegram.
    pub fn restrict(&self, chat: i64, user: i64) {
        self.with(|s| s.restricted.insert((chat, user)));
    }

    /// The users in `chat` now, sorted.
    pub fn members_of(&self, chat: i64) -> Vec<i64> {
        let mut users: Vec<i64> = self.with(|s| {
            s.members
                .iter()
                .filter(|(c, _)| *c == chat)
                .map(|(_, u)| *u)
                .collect()
        });
        users.sort_unstable();
        users
    }

    /// The invite links made for `chat`, oldest first.
    pub fn links_of(&self, chat: i64) -> Vec<String> {
        self.with(|s| {
            s.links
                .iter()
                .filter(|(c, _)| *c == chat)
                .map(|(_, l)| l.clone())
                .collect()
        })
    }

    /// Revokes an invite link (as an administrator might in the app).
    pub fn revoke_link(&self, link: &str) {
        self.with(|s| s.revoked_links.insert(link.to_string()));
    }

    pub fn is_revoked(&self, link: &str) -> bool {
        self.with(|s| s.revoked_links.contains(link))
    }

    /// `user` follows `link` (a join-request link): Telegram opens a join request, unless the
    /// link is revoked or unknown (false), the user is banned (false) or already in (true, no
    /// request).
    pub fn follow_link(&self, user: i64, link: &str) -> bool {
        self.with(|s| {
            let Some(chat) = s.links.iter().find(|(_, l)| l == link).map(|(c, _)| *c) else {
                return false;
            };
            if s.revoked_links.contains(link) || s.banned.contains(&(chat, user)) {
                return false;
            }
            if !s.members.contains(&(chat, user)) {
                s.open_requests.insert((chat, user));
            }
            true
        })
    }

    /// The chat an invite link belongs to.
    pub fn chat_of_link(&self, link: &str) -> Option<i64> {
        self.with(|s| s.links.iter().find(|(_, l)| l == link).map(|(c, _)| *c))
    }

    /// The `allowed_updates` the last `setWebhook` gave, if any did.
    pub fn allowed_updates(&self) -> Option<Vec<String>> {
        self.with(|s| s.allowed_updates.clone())
    }

    /// Opens a join request of `user` to `chat` that this bot processes (Bot API 10.1): the
    /// update carries `query_id`, which takes one answer.
    pub fn open_join_query(&self, chat: i64, user: i64, query_id: &str) {
        self.with(|s| {
            s.open_requests.insert((chat, user));
            s.queries.insert(
                query_id.to_string(),
                Query {
                    chat,
                    user,
                    answers: Vec::new(),
                },
            );
        });
    }

    /// Every answer query `query_id` was given, in order (`approve`, `decline`, `queue`,
    /// `web_app <url>`).
    pub fn query_answers(&self, query_id: &str) -> Vec<String> {
        self.with(|s| {
            s.queries
                .get(query_id)
                .map(|q| q.answers.clone())
                .unwrap_or_default()
        })
    }

    /// Performs the Bot API call a webhook answered with (its JSON body, `method` and its
    /// parameters), as Telegram does with a reply; `{}` is no call. Returns whether Telegram
    /// accepted it.
    pub fn perform_reply(&self, body: &Value) -> bool {
        let Some(method) = body["method"].as_str() else {
            return true;
        };
        self.with(|s| {
            s.calls.push(Call {
                method: method.to_string(),
                params: body.clone(),
            })
        });
        let response = perform(&self.state, method, body);
        response.status().is_success()
    }

    pub fn has_open_request(&self, chat: i64, user: i64) -> bool {
        self.with(|s| s.open_requests.contains(&(chat, user)))
    }

    /// Appends an outgoing transaction to `user` carrying `charge_id` (a refund).
    pub fn add_refund_transaction(&self, charge_id: &str, user: i64, amount: i64) {
        self.with(|s| {
            s.transactions.push(json!({
                "id": charge_id, "amount": amount, "date": chrono::Utc::now().timestamp(),
                "receiver": {"type": "user", "user": {"id": user, "is_bot": false, "first_name": "Buyer"}}
            }))
        });
    }
}

fn chat_object(s: &FakeState, chat: i64) -> Value {
    match s.supergroups.get(&chat) {
        Some(&forum) => {
            let mut c = json!({"id": chat, "type": "supergroup", "title": "Private group"});
            if forum {
                c["is_forum"] = json!(true);
            }
            c
        }
        None => json!({"id": chat, "type": "channel", "title": "Private"}),
    }
}

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

fn error(status: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(r) = retry_after {
        body["parameters"] = json!({"retry_after": r});
    }
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

async fn handle(
    State(state): State<Arc<Mutex<FakeState>>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return error(401, "Unauthorized", None);
    }
    let params: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let pair = (
        params["chat_id"].as_i64().unwrap_or(0),
        params["user_id"].as_i64().unwrap_or(0),
    );
    let user = user_of(&method, &params);
    let (reply, delay, hold) = {
        let mut s = state.lock().unwrap();
        s.calls.push(Call {
            method: method.clone(),
            params: params.clone(),
        });
        let n = s.in_flight.entry(pair).or_default();
        if *n > 0 {
            s.overlaps += 1;
        }
        *s.in_flight.get_mut(&pair).unwrap() += 1;
        if let Some(u) = user {
            let n = s.user_in_flight.entry(u).or_default();
            *n += 1;
            if *n > 1 {
                s.member_overlaps += 1;
            }
        }
        let reply = s.outage.clone().unwrap_or_else(|| {
            s.queued
                .get_mut(&method)
                .and_then(VecDeque::pop_front)
                .or_else(|| s.sticky.get(&method).cloned())
                .unwrap_or(Reply::Ok)
        });
        let hold = s.holds.get_mut(&method).and_then(VecDeque::pop_front);
        (reply, s.delay, hold)
    };
    if let Some(hold) = hold {
        hold.arrived.notify_one();
        hold.release.notified().await;
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = match reply {
        Reply::Ok => Some(perform(&state, &method, &params)),
        Reply::PerformThenHang => {
            perform(&state, &method, &params);
            None
        }
        Reply::Hang => None,
        Reply::TooManyRequests(secs) => Some(error(
            429,
            &format!("Too Many Requests: retry after {secs}"),
            Some(secs),
        )),
        Reply::ServerError => Some(error(500, "Internal Server Error", None)),
        Reply::Error(code, description) => Some(error(code as u16, &description, None)),
    };
    {
        let mut s = state.lock().unwrap();
        *s.in_flight.get_mut(&pair).unwrap() -= 1;
        if let Some(u) = user {
            *s.user_in_flight.get_mut(&u).unwrap() -= 1;
        }
    }
    match response {
        Some(r) => r,
        None => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            error(504, "hung", None)
        }
    }
}

/// The user a call is about: its `user_id`, or for `sendMessage` the private chat it goes to.
fn user_of(method: &str, params: &Value) -> Option<i64> {
    params["user_id"].as_i64().or_else(|| {
        (method == "sendMessage")
            .then(|| params["chat_id"].as_i64())
            .flatten()
    })
}

/// The normal effect and answer of `method`, as Telegram would give them.
fn perform(state: &Arc<Mutex<FakeState>>, method: &str, p: &Value) -> Response {
    let mut s = state.lock().unwrap();
    s.counter += 1;
    let n = s.counter;
    let pair = (
        p["chat_id"].as_i64().unwrap_or(0),
        p["user_id"].as_i64().unwrap_or(0),
    );
    let manages_members = matches!(
        method,
        "banChatMember"
            | "unbanChatMember"
            | "approveChatJoinRequest"
            | "declineChatJoinRequest"
            | "createChatInviteLink"
    );
    if manages_members && s.no_rights.contains(&pair.0) {
        return error(400, "Bad Request: CHAT_ADMIN_REQUIRED", None);
    }
    match method {
        "getMe" => ok(json!({"id": BOT_ID, "is_bot": true, "first_name": "Bot",
                             "username": "subgate_test_bot"})),
        "getChat" => ok(chat_object(&s, pair.0)),
        "getChatMember" => {
            let (chat, user) = pair;
            let who = json!({"id": user, "is_bot": user == BOT_ID, "first_name": "U"});
            if user == BOT_ID {
                return if s.no_rights.contains(&chat) {
                    ok(json!({"status": "member", "user": who}))
                } else {
                    ok(json!({"status": "administrator", "user": who,
                              "can_invite_users": true, "can_restrict_members": true}))
                };
            }
            if s.unknown_users.contains(&user) {
                return error(400, "Bad Request: user not found", None);
            }
            let status = if s.admins.contains(&pair) {
                "administrator"
            } else if s.banned.contains(&pair) {
                "kicked"
            } else if s.restricted.contains(&pair) {
                return ok(json!({"status": "restricted", "user": who,
                                 "is_member": s.members.contains(&pair),
                                 "can_send_messages": false, "until_date": 0}));
            } else if s.members.contains(&pair) {
                "member"
            } else {
                "left"
            };
            ok(json!({"status": status, "user": who}))
        }
        "banChatMember" if s.admins.contains(&pair) => error(
            400,
            "Bad Request: user is an administrator of the chat",
            None,
        ),
        "banChatMember" => {
            s.banned.insert(pair);
            s.members.remove(&pair);
            s.restricted.remove(&pair);
            ok(json!(true))
        }
        "unbanChatMember" => {
            // only_if_banned: a member stays; without it Telegram would kick a member too.
            if p["only_if_banned"] != json!(true) {
                s.members.remove(&pair);
            }
            s.banned.remove(&pair);
            ok(json!(true))
        }
        "approveChatJoinRequest" => {
            if s.members.contains(&pair) {
                return error(400, "Bad Request: USER_ALREADY_PARTICIPANT", None);
            }
            if !s.open_requests.remove(&pair) {
                return error(400, "Bad Request: HIDE_REQUESTER_MISSING", None);
            }
            s.members.insert(pair);
            ok(json!(true))
        }
        "declineChatJoinRequest" => {
            if !s.open_requests.remove(&pair) {
                return error(400, "Bad Request: HIDE_REQUESTER_MISSING", None);
            }
            ok(json!(true))
        }
        "answerChatJoinRequestQuery" | "sendChatJoinRequestWebApp" => {
            let id = p["chat_join_request_query_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let Some(q) = s.queries.get(&id).cloned() else {
                return error(400, "Bad Request: QUERY_ID_INVALID", None);
            };
            // A query takes one final answer; the Mini App may be shown before it.
            if q.answers.iter().any(|a| !a.starts_with("web_app")) {
                return error(400, "Bad Request: QUERY_ID_INVALID", None);
            }
            let pair = (q.chat, q.user);
            let answer = if method == "sendChatJoinRequestWebApp" {
                format!("web_app {}", p["web_app_url"].as_str().unwrap_or_default())
            } else {
                let result = p["result"].as_str().unwrap_or_default().to_string();
                match result.as_str() {
                    "approve" => {
                        if s.open_requests.remove(&pair) {
                            s.members.insert(pair);
                        }
                    }
                    "decline" => {
                        s.open_requests.remove(&pair);
                    }
                    "queue" => {}
                    _ => return error(400, "Bad Request: invalid result", None),
                }
                result
            };
            s.queries.get_mut(&id).unwrap().answers.push(answer);
            ok(json!(true))
        }
        "getChatAdministrators" => {
            let chat = pair.0;
            let mut admins = vec![json!({"status": "administrator",
                "user": {"id": BOT_ID, "is_bot": true, "first_name": "Bot"}})];
            for (c, u) in s.admins.iter() {
                if *c == chat {
                    admins.push(json!({"status": "administrator",
                        "user": {"id": u, "is_bot": false, "first_name": "Admin"}}));
                }
            }
            ok(json!(admins))
        }
        "createChatInviteLink" => {
            let link = format!("https://t.me/+fake{n}");
            s.links.push((pair.0, link.clone()));
            ok(json!({
                "invite_link": link,
                "creator": {"id": 123456, "is_bot": true, "first_name": "Bot"},
                "creates_join_request": p["creates_join_request"],
                "is_primary": false, "is_revoked": false
            }))
        }
        "sendMessage" => {
            s.delivered.push(Call {
                method: method.to_string(),
                params: p.clone(),
            });
            ok(json!({
            "message_id": n, "date": 0,
            "chat": {"id": p["chat_id"], "type": "private"},
            "text": p["text"],
            "reply_markup": p["reply_markup"]
            }))
        }
        "sendInvoice" => ok(json!({
            "message_id": n, "date": 0,
            "chat": {"id": p["chat_id"], "type": "private"},
            "invoice": {"title": p["title"], "description": p["description"],
                        "start_parameter": "", "currency": p["currency"],
                        "total_amount": p["prices"][0]["amount"]}
        })),
        "answerCallbackQuery" => ok(json!(true)),
        "setWebhook" => {
            if let Some(kinds) = p.get("allowed_updates") {
                let Some(kinds) = kinds.as_array().and_then(|k| {
                    k.iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<Vec<String>>>()
                }) else {
                    return error(400, "Bad Request: can't parse allowed updates", None);
                };
                if let Some(unknown) = kinds.iter().find(|k| !UPDATE_KINDS.contains(&k.as_str())) {
                    return error(
                        400,
                        &format!("Bad Request: unknown update type {unknown}"),
                        None,
                    );
                }
                s.allowed_updates = Some(kinds);
            }
            ok(json!(true))
        }
        "editUserStarSubscription" => {
            let user = p["user_id"].as_i64().unwrap_or(0);
            let charge = p["telegram_payment_charge_id"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if p["is_canceled"] == json!(true) {
                s.cancelled_subscriptions.insert((user, charge));
            } else {
                s.cancelled_subscriptions.remove(&(user, charge));
            }
            ok(json!(true))
        }
        "refundStarPayment" => {
            let charge = p["telegram_payment_charge_id"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if !s.refunded.insert(charge.clone()) {
                return error(400, "Bad Request: CHARGE_ALREADY_REFUNDED", None);
            }
            let user = p["user_id"].as_i64().unwrap_or(0);
            s.transactions.push(json!({
                "id": charge, "amount": 1, "date": chrono::Utc::now().timestamp(),
                "receiver": {"type": "user", "user": {"id": user, "is_bot": false, "first_name": "Buyer"}}
            }));
            ok(json!(true))
        }
        "getStarTransactions" => {
            let offset = p["offset"].as_u64().unwrap_or(0) as usize;
            let limit = p["limit"].as_u64().unwrap_or(100) as usize;
            let page: Vec<Value> = s
                .transactions
                .iter()
                .skip(offset)
                .take(limit)
                .cloned()
                .collect();
            ok(json!({"transactions": page}))
        }
        "createInvoiceLink" if p.get("subscription_period").is_some() => {
            ok(json!(format!("https://t.me/$fake_subscription_{n}")))
        }
        "createInvoiceLink" => ok(json!(format!("https://t.me/$fake_invoice_{n}"))),
        "setChatMenuButton" => ok(json!(true)),
        _ => error(404, "Not Found: method not found", None),
    }
}
