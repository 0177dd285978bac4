//! The harness of the convergence test: the `subgate` server it runs and kills, the HTTP client
//! of its API, the simulated buyers who follow their join links, the world the random
//! operations change, the faults, and the difference between the fake's member lists and the
//! database.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    outbox::convergence::{CHATS, Fault, Op, TITLES},
    support::{
        effects::join_request_update,
        fake_bot::{FakeBot, Reply},
        helpers::{
            ADMIN_EMAIL, ADMIN_PASSWORD, TELEGRAM_SECRET, TestApp, WEBHOOK_SECRET, payment_event,
            signed_headers,
        },
    },
};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

// ---- the server under test ----

/// `subgate serve` on the test's database, restarted on a new port after each kill.
pub(crate) struct Server {
    pub(crate) env: HashMap<String, String>,
    pub(crate) child: Option<tokio::process::Child>,
    pub(crate) base: Arc<Mutex<String>>,
    pub(crate) log: PathBuf,
    pub(crate) starts: usize,
}

impl Server {
    pub(crate) async fn start(&mut self) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        self.start_on(port).await;
    }

    /// The port the server listens on now (or last did).
    pub(crate) fn port(&self) -> u16 {
        let base = self.base.lock().unwrap();
        base.rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Starts the server on `port` (the port of the process it replaces, as a restart on the
    /// same host keeps its address) and waits until it is ready.
    pub(crate) async fn start_on(&mut self, port: u16) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.starts += 1;
        let child = tokio::process::Command::new(BIN)
            .arg("serve")
            .env_clear()
            .envs(&self.env)
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("the subgate binary runs");
        self.child = Some(child);
        let base = format!("http://127.0.0.1:{port}");
        *self.base.lock().unwrap() = base.clone();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{base}/readyz")).send().await
                && r.status().is_success()
            {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "subgate serve exited ({status}); its log ends:\n{}",
                    tail(&self.log, 40)
                );
            }
            assert!(
                Instant::now() < deadline,
                "subgate serve did not become ready; its log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown, no lease given back, calls in flight abandoned.
    pub(crate) async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("kill -9 of subgate serve");
        }
    }
}

/// The last `n` lines of a file.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The staff API and the doors of whichever server is running now.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) base: Arc<Mutex<String>>,
    pub(crate) token: Arc<Mutex<String>>,
}

impl Api {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.lock().unwrap())
    }

    /// Sends a request, again while the server cannot be reached or answers 503; panics on
    /// any other 5xx (a bug, whatever the faults). Returns the status and the JSON body.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<String>,
    ) -> (u16, Value) {
        for attempt in 0.. {
            let mut req = self
                .http
                .request(method.clone(), self.url(path))
                .header("content-type", "application/json");
            let token = self.token.lock().unwrap().clone();
            if !token.is_empty() {
                req = req.bearer_auth(token);
            }
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            let failure = match req.send().await {
                Ok(r) if r.status().as_u16() != 503 => {
                    let status = r.status().as_u16();
                    let text = r.text().await.unwrap_or_default();
                    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    assert!(status < 500, "{method} {path}: {status} {v}");
                    return (status, v);
                }
                Ok(r) => format!("status {}", r.status()),
                Err(e) => e.to_string(),
            };
            assert!(attempt < 100, "{method} {path}: {failure}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!()
    }

    pub(crate) async fn staff(&self, method: Method, path: &str, body: Value) -> (u16, Value) {
        let body = (!body.is_null()).then(|| body.to_string());
        self.send(method, path, &[], body).await
    }

    pub(crate) async fn login(&self) {
        let (status, body) = self
            .staff(
                Method::POST,
                "/api/auth/login",
                json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        *self.token.lock().unwrap() = body["access_token"].as_str().unwrap().to_string();
    }

    /// Door 1: pays `order` in full as `payment_id`.
    pub(crate) async fn pay(&self, order: &Value, payment_id: &str) -> (u16, Value) {
        let body = payment_event(
            payment_id,
            order["reference"].as_str().unwrap(),
            order["amount_minor"].as_i64().unwrap(),
            order["currency"].as_str().unwrap(),
        )
        .to_string();
        let id = format!("msg_{payment_id}");
        let headers = signed_headers(WEBHOOK_SECRET, &id, chrono::Utc::now().timestamp(), &body);
        let headers: Vec<(&str, String)> = headers.into_iter().collect();
        self.send(Method::POST, "/api/webhook/payment", &headers, Some(body))
            .await
    }

    /// One delivery of a Telegram update, as Telegram's webhook makes it: true when answered
    /// 200 (else Telegram delivers it again later).
    pub(crate) async fn deliver_update(&self, update: &Value) -> bool {
        let r = self
            .http
            .post(self.url("/api/webhook/telegram"))
            .header("content-type", "application/json")
            .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
            .body(update.to_string())
            .send()
            .await;
        matches!(r, Ok(r) if r.status().as_u16() == 200)
    }
}

// ---- the buyers ----

/// What the simulated buyers know and want.
#[derive(Default)]
pub(crate) struct Buyers {
    /// Delivered messages read so far.
    pub(crate) read: usize,
    /// The newest join link each buyer was sent for each chat, by (chat, user).
    pub(crate) links: HashMap<(i64, i64), String>,
    /// Buyers who were told about a chat (a join link, a receipt, any message naming it) and
    /// mean to join it.
    pub(crate) want: BTreeSet<(i64, i64)>,
    /// Join requests opened in Telegram, not yet delivered to the server.
    pub(crate) outbox: VecDeque<Value>,
    /// The date of each buyer's last join request per chat: a new request is dated later.
    pub(crate) last_date: HashMap<(i64, i64), i64>,
}

/// The join link in a message, if any.
fn link_in(text: &str) -> Option<&str> {
    let start = text.find("https://t.me/+")?;
    let rest = &text[start..];
    Some(rest.split(char::is_whitespace).next().unwrap_or(rest))
}

impl Buyers {
    /// One round: reads the messages Telegram delivered since the last round; each buyer told
    /// about a chat they are not in follows the newest link they were sent for it (a request
    /// already pending stays pending; a ban stops them this round); every join request
    /// opened is delivered to the Telegram door in order, and again next round if the server
    /// did not take it.
    pub(crate) async fn round(&mut self, fake: &FakeBot, api: &Api) {
        let messages = fake.delivered_messages();
        for m in &messages[self.read.min(messages.len())..] {
            let (Some(user), Some(text)) =
                (m.params["chat_id"].as_i64(), m.params["text"].as_str())
            else {
                continue;
            };
            if let Some(link) = link_in(text)
                && let Some(chat) = fake.chat_of_link(link)
            {
                self.links.insert((chat, user), link.to_string());
                self.want.insert((chat, user));
            }
            for (chat, title) in CHATS.iter().zip(TITLES) {
                if text.contains(&format!("«{title}»")) {
                    self.want.insert((*chat, user));
                }
            }
        }
        self.read = messages.len();
        for (chat, user) in self.want.clone() {
            let Some(link) = self.links.get(&(chat, user)) else {
                continue;
            };
            if fake.is_member(chat, user) || fake.has_open_request(chat, user) {
                self.want.remove(&(chat, user));
                continue;
            }
            if fake.follow_link(user, link) {
                self.want.remove(&(chat, user));
                if fake.has_open_request(chat, user) {
                    let last = self.last_date.entry((chat, user)).or_default();
                    let date = chrono::Utc::now().timestamp().max(*last + 1);
                    *last = date;
                    self.outbox.push_back(join_request_update(chat, user, date));
                }
            }
        }
        while let Some(update) = self.outbox.front() {
            if !api.deliver_update(update).await {
                break;
            }
            self.outbox.pop_front();
        }
    }
}

// ---- what must hold at the end ----

/// The difference between Telegram and the database, or `None` when they agree: per chat, who
/// is in it but not live and who is live but not in it (with what the fake knows of them),
/// and every access effect still pending or failed.
pub(crate) async fn differences(app: &TestApp, fake: &FakeBot) -> Option<String> {
    let db = app.db().await;
    let rows = db
        .query(
            "SELECT c.telegram_chat_id AS chat, s.telegram_user_id AS user_id, m.status,
                    m.expires_at::text AS expires_at,
                    m.status <> 'expired' AND statement_timestamp()
                        < m.expires_at + make_interval(days => c.grace_period_days) AS live
             FROM memberships m
             JOIN channels c ON c.id = m.channel_id
             JOIN subscribers s ON s.id = m.subscriber_id",
            &[],
        )
        .await
        .unwrap();
    let mut live: BTreeMap<i64, BTreeSet<i64>> =
        CHATS.iter().map(|c| (*c, BTreeSet::new())).collect();
    let mut rows_of: HashMap<(i64, i64), String> = HashMap::new();
    for r in &rows {
        let (chat, user): (i64, i64) = (r.get("chat"), r.get("user_id"));
        rows_of.insert(
            (chat, user),
            format!(
                "{} until {}",
                r.get::<_, String>("status"),
                r.get::<_, String>("expires_at")
            ),
        );
        if r.get::<_, bool>("live") {
            live.entry(chat).or_default().insert(user);
        }
    }
    let pending = db
        .query(
            "SELECT id, kind, chat_id, user_id, status, attempts, last_error,
                    next_attempt_at::text AS next_attempt_at, lease_until::text AS lease_until
             FROM effects
             WHERE kind IN ('grant', 'revoke', 'unban', 'join_approve', 'join_decline')
               AND status IN ('pending', 'failed')
             ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let mut report = String::new();
    for (chat, live) in &live {
        let members: BTreeSet<i64> = fake.members_of(*chat).into_iter().collect();
        let describe = |user: &i64| {
            format!(
                "{user} ({}; banned {}, request open {})",
                rows_of
                    .get(&(*chat, *user))
                    .map_or("no membership", String::as_str),
                fake.is_banned(*chat, *user),
                fake.has_open_request(*chat, *user)
            )
        };
        let intruders: Vec<String> = members.difference(live).map(describe).collect();
        let outside: Vec<String> = live.difference(&members).map(describe).collect();
        if !intruders.is_empty() {
            let _ = writeln!(
                report,
                "chat {chat}: in the chat but not live: {intruders:?}"
            );
        }
        if !outside.is_empty() {
            let _ = writeln!(report, "chat {chat}: live but not in the chat: {outside:?}");
        }
    }
    if !pending.is_empty() {
        let _ = writeln!(report, "access effects pending or failed:");
        for e in &pending {
            let _ = writeln!(
                report,
                "  #{} {} chat {} user {}: {} after {} attempts, next {}, lease {:?}, last error {:?}",
                e.get::<_, i64>("id"),
                e.get::<_, String>("kind"),
                e.get::<_, Option<i64>>("chat_id").unwrap_or_default(),
                e.get::<_, i64>("user_id"),
                e.get::<_, String>("status"),
                e.get::<_, i32>("attempts"),
                e.get::<_, String>("next_attempt_at"),
                e.get::<_, Option<String>>("lease_until"),
                e.get::<_, Option<String>>("last_error"),
            );
        }
    }
    (!report.is_empty()).then_some(report)
}

// ---- the run ----

/// The ids the operations need, made over HTTP at start.
pub(crate) struct World {
    pub(crate) subscribers: Vec<i64>,
    pub(crate) channels: Vec<i64>,
}

async fn membership_of(app: &TestApp, world: &World, buyer: usize, channel: usize) -> Option<i64> {
    app.db()
        .await
        .query_opt(
            "SELECT id FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
            &[
                &(world.subscribers[buyer] as i32),
                &(world.channels[channel] as i32),
            ],
        )
        .await
        .unwrap()
        .map(|r| r.get("id"))
}

/// Performs one operation; refusals (a full channel, nothing to change) are part of the model.
pub(crate) async fn perform(app: &TestApp, api: &Api, world: &World, op: &Op, n: usize, seed: u64) {
    let when = |hours: i64| (chrono::Utc::now() + chrono::Duration::hours(hours)).to_rfc3339();
    let (buyer, channel) = match *op {
        Op::Sweep => {
            let (status, body) = api.staff(Method::POST, "/api/sweep", Value::Null).await;
            assert_eq!(status, 200, "sweep: {body}");
            return;
        }
        Op::Pay { buyer, channel }
        | Op::Grant { buyer, channel, .. }
        | Op::Expire { buyer, channel }
        | Op::BackDate { buyer, channel, .. }
        | Op::Revive { buyer, channel, .. }
        | Op::Delete { buyer, channel } => (buyer, channel),
    };
    let grant = |days: i64| {
        json!({"subscriber_id": world.subscribers[buyer],
               "channel_id": world.channels[channel], "days": days})
    };
    let membership = membership_of(app, world, buyer, channel).await;
    let (method, path, body) = match (op, membership) {
        (Op::Pay { .. }, _) => {
            let (status, order) = api
                .staff(
                    Method::POST,
                    "/api/orders",
                    json!({"subscriber_id": world.subscribers[buyer],
                           "channel_id": world.channels[channel]}),
                )
                .await;
            if status == 201 {
                api.pay(&order, &format!("conv-{seed}-{n}")).await;
            }
            return;
        }
        (Op::Grant { days, .. }, _) | (Op::Revive { days, .. }, None) => {
            (Method::POST, "/api/memberships".to_string(), grant(*days))
        }
        (_, None) => (Method::POST, "/api/memberships".to_string(), grant(30)),
        (Op::Expire { .. }, Some(id)) => (
            Method::PATCH,
            format!("/api/memberships/{id}"),
            json!({"status": "expired"}),
        ),
        (Op::BackDate { hours, .. }, Some(id)) => (
            Method::PATCH,
            format!("/api/memberships/{id}"),
            json!({"expires_at": when(-hours)}),
        ),
        (Op::Revive { days, .. }, Some(id)) => (
            Method::PATCH,
            format!("/api/memberships/{id}"),
            json!({"status": "active", "expires_at": when(24 * days)}),
        ),
        (Op::Delete { .. }, Some(id)) => (
            Method::DELETE,
            format!("/api/memberships/{id}"),
            Value::Null,
        ),
        (Op::Sweep, _) => unreachable!(),
    };
    api.staff(method, &path, body).await;
}

/// Starts a fault; returns what ends it.
pub(crate) async fn start_fault(fault: &Fault, fake: &FakeBot, server: &mut Server) {
    match fault {
        Fault::Outage(reply) => fake.start_outage(reply.clone()),
        Fault::Storm(methods) => {
            for (method, secs) in methods {
                fake.always(method, Reply::TooManyRequests(*secs));
            }
        }
        Fault::Kill { hold_ms, down_ms } => {
            // Calls are held open, so the kill lands while some are in flight (their outcome
            // lost to the dead process) and others are claimed but not yet sent.
            fake.set_delay(Duration::from_millis(*hold_ms));
            let deadline = Instant::now() + Duration::from_secs(5);
            while fake.in_flight() == 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(hold_ms / 3)).await;
            server.kill9().await;
            fake.set_delay(Duration::ZERO);
            tokio::time::sleep(Duration::from_millis(*down_ms)).await;
            server.start().await;
        }
    }
}

pub(crate) fn end_fault(fault: &Fault, fake: &FakeBot) {
    match fault {
        Fault::Outage(_) => fake.end_outage(),
        Fault::Storm(methods) => {
            for (method, _) in methods {
                fake.reset(method);
            }
        }
        Fault::Kill { .. } => {}
    }
}
