//! A fake Telegram Bot API for benchmarks that holds the server to Telegram's limits: a real
//! HTTP server on 127.0.0.1:0 serving `POST /bot{token}/{method}`, answering every method with
//! a plausible result, and refusing with `429 Too Many Requests` (and `parameters.retry_after`)
//! what Telegram would refuse:
//!
//! - more than [`GLOBAL_LIMIT`] calls in any sliding second (the Bot API FAQ: "not more than
//!   about 30 messages per second" to different users);
//! - a second message (`sendMessage`, `sendInvoice`) to one chat within [`CHAT_INTERVAL`] of
//!   the previous one accepted ("avoid sending more than one message per second" in one chat).
//!
//! It counts calls by method and the 429s it answered, and keeps the time of the first message
//! accepted for each chat, which benchmarks await ([`FakeBot::first_message`]).

#![allow(dead_code)]

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::post,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Calls accepted in any sliding second, at most.
pub const GLOBAL_LIMIT: usize = 30;
/// The shortest gap between two messages to one chat the fake accepts: Telegram's one second,
/// less a little for the jitter between the sender's clock and the arrival here.
pub const CHAT_INTERVAL: Duration = Duration::from_millis(950);
/// The `retry_after` of the fake's 429s, in seconds.
pub const RETRY_AFTER: u64 = 1;

#[derive(Default)]
struct Inner {
    /// Accepted calls of the last second, oldest first.
    window: VecDeque<Instant>,
    last_message: HashMap<i64, Instant>,
    first_message: HashMap<i64, Instant>,
    calls: BTreeMap<String, u64>,
    refused: u64,
    next_message_id: i64,
}

/// What the fake counted.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Accepted calls by method.
    pub calls: BTreeMap<String, u64>,
    /// 429s answered.
    pub refused: u64,
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
        }
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

fn too_many() -> Json<Value> {
    Json(json!({
        "ok": false,
        "error_code": 429,
        "description": format!("Too Many Requests: retry after {RETRY_AFTER}"),
        "parameters": {"retry_after": RETRY_AFTER},
    }))
}

async fn answer(
    State(fake): State<FakeBot>,
    Path((_bot, method)): Path<(String, String)>,
    Json(params): Json<Value>,
) -> Json<Value> {
    let now = Instant::now();
    let chat = params.get("chat_id").and_then(Value::as_i64);
    let message = method == "sendMessage" || method == "sendInvoice";
    let message_id = {
        let mut s = fake.lock();
        while s
            .window
            .front()
            .is_some_and(|t| now - *t >= Duration::from_secs(1))
        {
            s.window.pop_front();
        }
        let chat_busy = message
            && chat
                .and_then(|c| s.last_message.get(&c))
                .is_some_and(|t| now - *t < CHAT_INTERVAL);
        if s.window.len() >= GLOBAL_LIMIT || chat_busy {
            s.refused += 1;
            return too_many();
        }
        s.window.push_back(now);
        *s.calls.entry(method.clone()).or_default() += 1;
        if message && let Some(c) = chat {
            s.last_message.insert(c, now);
            s.first_message.entry(c).or_insert(now);
        }
        s.next_message_id += 1;
        s.next_message_id
    };
    if message {
        fake.arrived.notify_waiters();
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
    Json(json!({"ok": true, "result": result}))
}
