//! A fake Telegram Bot API for benchmarks that holds the server to Telegram's limits: a real
//! HTTP server on 127.0.0.1:0 serving `POST /bot{token}/{method}`, answering every method with
//! a plausible result, and refusing with `429 Too Many Requests` (and `parameters.retry_after`)
//! what Telegram would refuse:
//!
//! - more than [`GLOBAL_LIMIT`] calls in any sliding second (the Bot API FAQ: "not more than
//!   about 30 messages per second" to different users);
//! - a second message (`sendMessage`, `sendInvoice`) to one chat within [`CHAT_INTERVAL`] of
//!   the previous one accepted ("avoid sending more than one message per second" in one chat);
//! - beyond the free [`GLOBAL_LIMIT`], a message sent with `allow_paid_broadcast: true` is
//!   accepted up to [`PAID_LIMIT`] messages in any sliding second and billed (0.1 Star each, as
//!   Telegram bills paid broadcasts "ignoring broadcasting limits"); within the free limit it
//!   costs nothing, like any other call.
//!
//! It counts calls by method and the 429s it answered, keeps the time of the first message
//! accepted for each chat, which benchmarks await ([`FakeBot::first_message`]), and records
//! every message it accepted ([`FakeBot::messages`]: when, to which chat, paid or billed) and
//! every 429 ([`FakeBot::refusals`]), so a benchmark can count what each chat received. It can
//! hold the answers to some messages it accepted ([`FakeBot::hold_messages`]), leaving their
//! sender mid-call, to crash it there.

#![allow(dead_code)]

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Calls accepted in any sliding second, at most.
pub const GLOBAL_LIMIT: usize = 30;
/// Messages sent with `allow_paid_broadcast` accepted in any sliding second, at most, the free
/// ones among them included (the Bot API's "up to 1000 messages per second").
pub const PAID_LIMIT: usize = 1000;
/// The shortest gap between two messages to one chat the fake accepts: Telegram's one second,
/// less a little for the jitter between the sender's clock and the arrival here.
pub const CHAT_INTERVAL: Duration = Duration::from_millis(950);
/// The `retry_after` of the fake's 429s, in seconds.
pub const RETRY_AFTER: u64 = 1;

#[derive(Default)]
struct Inner {
    /// Accepted calls of the last second within the free limit, oldest first.
    window: VecDeque<Instant>,
    /// Billed (paid broadcast) messages of the last second, oldest first.
    billed_window: VecDeque<Instant>,
    last_message: HashMap<i64, Instant>,
    first_message: HashMap<i64, Instant>,
    calls: BTreeMap<String, u64>,
    refused: u64,
    paid: u64,
    billed: u64,
    messages: Vec<Accepted>,
    refusals: Vec<Refusal>,
    next_message_id: i64,
    /// Messages to these chats are accepted but not answered while `holding`, up to
    /// `hold_left` more of them ([`FakeBot::hold_messages`]).
    hold: Option<std::ops::RangeInclusive<i64>>,
    hold_left: usize,
    held: Vec<i64>,
    holding: bool,
}

/// One message the fake accepted.
#[derive(Debug, Clone, Copy)]
pub struct Accepted {
    pub at: Instant,
    pub chat: i64,
    /// Sent with `allow_paid_broadcast: true`.
    pub paid: bool,
    /// Accepted beyond the free limit only because it was paid: 0.1 Star.
    pub billed: bool,
}

/// One 429 the fake answered.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pub at: Instant,
    pub chat: Option<i64>,
    pub method_is_message: bool,
    /// Sent with `allow_paid_broadcast: true`.
    pub paid: bool,
}

/// What the fake counted.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Accepted calls by method.
    pub calls: BTreeMap<String, u64>,
    /// 429s answered.
    pub refused: u64,
    /// Messages accepted with `allow_paid_broadcast: true`.
    pub paid: u64,
    /// Of those, the ones beyond the free limit (billed 0.1 Star each).
    pub billed: u64,
}

impl Counts {
    /// Accepted calls of every method.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let calls = self
            .calls
            .iter()
            .map(|(m, n)| (m.clone(), n - earlier.calls.get(m).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Counts {
            calls,
            refused: self.refused - earlier.refused,
            paid: self.paid - earlier.paid,
            billed: self.billed - earlier.billed,
        }
    }

    /// `method n, …` for a report.
    pub fn by_method(&self) -> String {
        self.calls
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A running fake; cheap to clone.
#[derive(Clone)]
pub struct FakeBot {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    arrived: Arc<Notify>,
}

impl FakeBot {
    /// Starts the fake on a free loopback port, on the current runtime.
    pub async fn start() -> Result<FakeBot, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let url = format!(
            "http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let fake = FakeBot {
            url,
            inner: Arc::default(),
            arrived: Arc::new(Notify::new()),
        };
        let app = Router::new()
            .route("/{bot}/{method}", post(answer))
            .with_state(fake.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(fake)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn counts(&self) -> Counts {
        let s = self.lock();
        Counts {
            calls: s.calls.clone(),
            refused: s.refused,
            paid: s.paid,
            billed: s.billed,
        }
    }

    /// Every message accepted so far, in the order accepted.
    pub fn messages(&self) -> Vec<Accepted> {
        self.lock().messages.clone()
    }

    /// Every 429 answered so far, in order.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.lock().refusals.clone()
    }

    /// From now on, accepts the next `n` messages to chats of `chats` — records them like any
    /// other — but keeps their answers back until [`release`](Self::release): the sender is left
    /// mid-call, the message delivered and its answer not yet received (as when a crash cuts a
    /// call off).
    pub fn hold_messages(&self, chats: std::ops::RangeInclusive<i64>, n: usize) {
        let mut s = self.lock();
        s.hold = Some(chats);
        s.hold_left = n;
        s.holding = true;
    }

    /// The chats whose messages are held (or were, until released).
    pub fn held(&self) -> Vec<i64> {
        self.lock().held.clone()
    }

    /// Answers the held messages (to whoever still waits) and holds no more.
    pub fn release(&self) {
        let mut s = self.lock();
        s.holding = false;
        s.hold = None;
        s.hold_left = 0;
    }

    /// How many chats among `chats` have been sent a message.
    pub fn chats_messaged_in(&self, chats: std::ops::RangeInclusive<i64>) -> usize {
        self.lock()
            .first_message
            .keys()
            .filter(|c| chats.contains(c))
            .count()
    }

    /// When the first message to `chat` was accepted, if one was.
    pub fn message_at(&self, chat: i64) -> Option<Instant> {
        self.lock().first_message.get(&chat).copied()
    }

    /// How many chats have been sent a message.
    pub fn chats_messaged(&self) -> usize {
        self.lock().first_message.len()
    }

    /// Waits until the first message to `chat` is accepted, at most `limit`; returns when.
    pub async fn first_message(&self, chat: i64, limit: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let arrived = self.arrived.notified();
            if let Some(at) = self.message_at(chat) {
                return Some(at);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.message_at(chat);
            }
        }
    }

    /// Waits until `n` chats have been sent a message, at most `limit`; returns whether.
    pub async fn messaged_chats(&self, n: usize, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let arrived = self.arrived.notified();
            if self.chats_messaged() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.chats_messaged() >= n;
            }
        }
    }

    /// The latest first message among `chats`, when every one of them has had one.
    pub fn last_first_message(&self, chats: impl IntoIterator<Item = i64>) -> Option<Instant> {
        let s = self.lock();
        chats
            .into_iter()
            .map(|c| s.first_message.get(&c).copied())
            .try_fold(None::<Instant>, |latest, at| {
                at.map(|at| Some(latest.map_or(at, |l| l.max(at))))
            })
            .flatten()
    }
}

fn too_many() -> (StatusCode, Json<Value>) {
    (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({
            "ok": false,
            "error_code": 429,
            "description": format!("Too Many Requests: retry after {RETRY_AFTER}"),
            "parameters": {"retry_after": RETRY_AFTER},
        })),
    )
}

/// Drops the entries of `window` older than a second before `now`.
fn slide(window: &mut VecDeque<Instant>, now: Instant) {
    while window
        .front()
        .is_some_and(|t| now - *t >= Duration::from_secs(1))
    {
        window.pop_front();
    }
}

async fn answer(
    State(fake): State<FakeBot>,
    Path((_bot, method)): Path<(String, String)>,
    Json(params): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let now = Instant::now();
    let chat = params.get("chat_id").and_then(Value::as_i64);
    let message = method == "sendMessage" || method == "sendInvoice";
    let paid = message
        && params
            .get("allow_paid_broadcast")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let (message_id, hold) = {
        let mut s = fake.lock();
        let s = &mut *s;
        slide(&mut s.window, now);
        slide(&mut s.billed_window, now);
        let chat_busy = message
            && chat
                .and_then(|c| s.last_message.get(&c))
                .is_some_and(|t| now - *t < CHAT_INTERVAL);
        let free = s.window.len() < GLOBAL_LIMIT;
        let billed = !free && paid && s.window.len() + s.billed_window.len() < PAID_LIMIT;
        if chat_busy || !(free || billed) {
            s.refused += 1;
            s.refusals.push(Refusal {
                at: now,
                chat,
                method_is_message: message,
                paid,
            });
            return too_many();
        }
        if billed {
            s.billed_window.push_back(now);
            s.billed += 1;
        } else {
            s.window.push_back(now);
        }
        s.paid += u64::from(paid);
        *s.calls.entry(method.clone()).or_default() += 1;
        if message && let Some(c) = chat {
            s.last_message.insert(c, now);
            s.first_message.entry(c).or_insert(now);
            s.messages.push(Accepted {
                at: now,
                chat: c,
                paid,
                billed,
            });
        }
        s.next_message_id += 1;
        let hold = message
            && s.hold_left > 0
            && chat.is_some_and(|c| s.hold.as_ref().is_some_and(|h| h.contains(&c)));
        if hold {
            s.hold_left -= 1;
            s.held.push(chat.unwrap_or_default());
        }
        (s.next_message_id, hold)
    };
    if message {
        fake.arrived.notify_waiters();
    }
    // A held answer waits for the release (a minute at most).
    let until = Instant::now() + Duration::from_secs(60);
    while hold && fake.lock().holding && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let result = match method.as_str() {
        "sendMessage" | "sendInvoice" => json!({
            "message_id": message_id,
            "date": 0,
            "chat": {"id": chat.unwrap_or(0), "type": "private"},
        }),
        "createChatInviteLink" => json!({
            "invite_link": format!("https://t.me/+bench{}", chat.unwrap_or(0).unsigned_abs()),
            "creator": {"id": 1, "is_bot": true, "first_name": "bench"},
            "creates_join_request": true,
            "is_primary": false,
            "is_revoked": false,
        }),
        "getMe" => json!({"id": 1, "is_bot": true, "first_name": "bench", "username": "bench_bot"}),
        "getChatAdministrators" => json!([{
            "status": "creator",
            "user": {"id": 1, "is_bot": true, "first_name": "bench"},
        }]),
        "getStarTransactions" => json!({"transactions": []}),
        "createInvoiceLink" => json!("https://t.me/$bench"),
        "getChatMember" => json!({
            "status": "administrator",
            "user": {"id": params.get("user_id").and_then(Value::as_i64).unwrap_or(1), "is_bot": true, "first_name": "bench"},
            "can_invite_users": true,
            "can_restrict_members": true,
        }),
        _ => json!(true),
    };
    (StatusCode::OK, Json(json!({"ok": true, "result": result})))
}
