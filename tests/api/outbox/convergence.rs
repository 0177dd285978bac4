//! Telegram follows the database after faults, measured from outside: the `subgate` binary
//! serves two channels (one seat-limited) over its own database while a seeded sequence of
//! random operations runs against it over HTTP — door-1 payments, staff grants, expiries,
//! back-dated terms, revivals, deletions, sweeps — and simulated buyers follow the join link
//! the fake Bot API delivered to them and send their join request to the Telegram door.
//! Interleaved with them: whole-API outages (500s, hanging calls), 429 storms, and kill -9 of
//! the server while its Bot API calls are held open, then a restart. Within 60 seconds of the
//! end of the last fault, each chat's member list in the fake must equal the Telegram accounts
//! whose membership of that channel is live in the database, with no access effect (grant,
//! revoke, unban, join decision) pending or failed; otherwise the test fails with the
//! difference.
//!
//! `CONVERGENCE_SEED` picks the sequence (printed first, so a failure can be replayed) and
//! `CONVERGENCE_OPS` its length. The server's log goes to a file named in a failure's message
//! (removed after a pass).
//!
//! The last test checks, through the worker, the two rules of Telegram the fake models that
//! matter most here: `unbanChatMember` without `only_if_banned` removes a member, and approving
//! a request that is not pending is 400 `HIDE_REQUESTER_MISSING`.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{
    effects::{app_with, join_request_update, run},
    fake_bot::{FakeBot, Reply, TOKEN},
    helpers::{
        ADMIN_EMAIL, ADMIN_PASSWORD, TELEGRAM_SECRET, TestApp, WEBHOOK_SECRET, payment_event,
        signed_headers, test_env, url_for,
    },
};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

/// The sequence `make test` runs; `CONVERGENCE_SEED` picks another.
const DEFAULT_SEED: u64 = 20_250_121;
/// Operations per run; `CONVERGENCE_OPS` changes it.
const DEFAULT_OPS: usize = 120;
/// The contract: Telegram matches the database this long after the last fault ends.
const CONVERGENCE: Duration = Duration::from_secs(60);

const BUYERS: usize = 15;
const FIRST_USER: i64 = 880_001;
/// Open channel: no seat limit, two days of grace.
const OPEN_CHAT: i64 = -1_001_088_000_001;
/// Seat-limited channel: five seats, no grace.
const SEATED_CHAT: i64 = -1_001_088_000_002;
const CHATS: [i64; 2] = [OPEN_CHAT, SEATED_CHAT];
const TITLES: [&str; 2] = ["Open room", "Seated room"];

// ---- the plan: operations and faults, drawn from the seed ----

#[derive(Debug, Clone)]
enum Op {
    /// Door 1: a new order, paid in full.
    Pay { buyer: usize, channel: usize },
    /// `POST /api/memberships`.
    Grant {
        buyer: usize,
        channel: usize,
        days: i64,
    },
    /// `PATCH … {"status": "expired"}`.
    Expire { buyer: usize, channel: usize },
    /// `PATCH … {"expires_at": <hours ago>}` (the sweep then moves it to grace or expired).
    BackDate {
        buyer: usize,
        channel: usize,
        hours: i64,
    },
    /// `PATCH … {"status": "active", "expires_at": <days ahead>}`.
    Revive {
        buyer: usize,
        channel: usize,
        days: i64,
    },
    /// `DELETE /api/memberships/{id}`.
    Delete { buyer: usize, channel: usize },
    /// `POST /api/sweep`.
    Sweep,
}

#[derive(Debug, Clone)]
enum Fault {
    /// Every Bot API method answers this (500, or never) while the fault lasts.
    Outage(Reply),
    /// These methods answer 429 with these `retry_after`s while the fault lasts.
    Storm(Vec<(&'static str, u64)>),
    /// kill -9 of the server while its calls are held open this long, then a restart.
    Kill { hold_ms: u64, down_ms: u64 },
}

#[derive(Debug, Clone)]
enum Step {
    Op(Op),
    /// Waits this long before the next step.
    Pause(u64),
    Start(Fault),
    /// Ends the fault started last.
    End,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number: {v:?}"))
        })
        .unwrap_or(default)
}

fn random_op(rng: &mut StdRng) -> Op {
    let buyer = rng.gen_range(0..BUYERS);
    let channel = rng.gen_range(0..CHATS.len());
    match rng.gen_range(0..100) {
        0..35 => Op::Pay { buyer, channel },
        35..47 => Op::Grant {
            buyer,
            channel,
            days: rng.gen_range(1..60),
        },
        47..59 => Op::Expire { buyer, channel },
        59..71 => Op::BackDate {
            buyer,
            channel,
            hours: rng.gen_range(1..96),
        },
        71..81 => Op::Revive {
            buyer,
            channel,
            days: rng.gen_range(1..60),
        },
        81..90 => Op::Delete { buyer, channel },
        _ => Op::Sweep,
    }
}

fn random_storm(rng: &mut StdRng) -> Fault {
    let mut methods = [
        "sendMessage",
        "approveChatJoinRequest",
        "declineChatJoinRequest",
        "banChatMember",
        "unbanChatMember",
    ];
    methods.shuffle(rng);
    let n = rng.gen_range(2..=methods.len());
    Fault::Storm(
        methods[..n]
            .iter()
            .map(|m| (*m, rng.gen_range(1..=3)))
            .collect(),
    )
}

/// `ops` operations with a pause after each, and five faults spread over them: a 500 outage, a
/// hanging outage, a 429 storm, a kill -9, and one more of a random kind, in random order. An
/// outage or storm spans a run of operations; a kill follows a burst of payments (so calls are
/// in flight) and the operations stop while the server is down.
fn plan(rng: &mut StdRng, ops: usize) -> Vec<Step> {
    let mut faults = vec![
        Fault::Outage(Reply::ServerError),
        Fault::Outage(Reply::Hang),
        random_storm(rng),
        Fault::Kill {
            hold_ms: 1500,
            down_ms: 300,
        },
    ];
    faults.push(match rng.gen_range(0..3) {
        0 => Fault::Kill {
            hold_ms: 1500,
            down_ms: 1000,
        },
        1 => random_storm(rng),
        _ => Fault::Outage(Reply::ServerError),
    });
    faults.shuffle(rng);
    let segment = (ops / (faults.len() + 1)).max(2);
    let mut steps = Vec::new();
    let mut faults = faults.into_iter();
    let mut end_at = None;
    for i in 0..ops {
        if end_at == Some(i) {
            steps.push(Step::End);
            end_at = None;
        }
        if i > 0 && i % segment == 0 {
            match faults.next() {
                Some(kill @ Fault::Kill { .. }) => {
                    for _ in 0..4 {
                        steps.push(Step::Op(Op::Pay {
                            buyer: rng.gen_range(0..BUYERS),
                            channel: rng.gen_range(0..CHATS.len()),
                        }));
                    }
                    steps.push(Step::Start(kill));
                    steps.push(Step::End);
                }
                Some(fault) => {
                    steps.push(Step::Start(fault));
                    end_at = Some(i + rng.gen_range(segment / 2..segment));
                }
                None => {}
            }
        }
        steps.push(Step::Op(random_op(rng)));
        steps.push(Step::Pause(rng.gen_range(20..90)));
    }
    if end_at.is_some() {
        steps.push(Step::End);
    }
    steps
}

// ---- the server under test ----

/// `subgate serve` on the test's database, restarted on a new port after each kill.
struct Server {
    env: HashMap<String, String>,
    child: Option<tokio::process::Child>,
    base: Arc<Mutex<String>>,
    log: PathBuf,
    starts: usize,
}

impl Server {
    async fn start(&mut self) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
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
    async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("kill -9 of subgate serve");
        }
    }
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The staff API and the doors of whichever server is running now.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: Arc<Mutex<String>>,
    token: Arc<Mutex<String>>,
}

impl Api {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.lock().unwrap())
    }

    /// Sends a request, again while the server cannot be reached or answers 503; panics on
    /// any other 5xx (a bug, whatever the faults). Returns the status and the JSON body.
    async fn send(
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

    async fn staff(&self, method: Method, path: &str, body: Value) -> (u16, Value) {
        let body = (!body.is_null()).then(|| body.to_string());
        self.send(method, path, &[], body).await
    }

    async fn login(&self) {
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
    async fn pay(&self, order: &Value, payment_id: &str) -> (u16, Value) {
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
    async fn deliver_update(&self, update: &Value) -> bool {
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
struct Buyers {
    /// Delivered messages read so far.
    read: usize,
    /// The newest join link each buyer was sent for each chat, by (chat, user).
    links: HashMap<(i64, i64), String>,
    /// Buyers who were told about a chat (a join link, a receipt, any message naming it) and
    /// mean to join it.
    want: BTreeSet<(i64, i64)>,
    /// Join requests opened in Telegram, not yet delivered to the server.
    outbox: VecDeque<Value>,
    /// The date of each buyer's last join request per chat: a new request is dated later.
    last_date: HashMap<(i64, i64), i64>,
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
    async fn round(&mut self, fake: &FakeBot, api: &Api) {
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
async fn differences(app: &TestApp, fake: &FakeBot) -> Option<String> {
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
struct World {
    subscribers: Vec<i64>,
    channels: Vec<i64>,
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
async fn perform(app: &TestApp, api: &Api, world: &World, op: &Op, n: usize, seed: u64) {
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
async fn start_fault(fault: &Fault, fake: &FakeBot, server: &mut Server) {
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

fn end_fault(fault: &Fault, fake: &FakeBot) {
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

/// Random payments, staff edits, sweeps and join requests through outages, 429 storms and
/// kill -9 of the server mid-flight: within 60 s of the last fault, every chat's members are
/// exactly the live members of its channel and no access effect is pending or failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_matches_the_database_within_a_minute_of_the_last_fault() {
    let seed: u64 = env_or("CONVERGENCE_SEED", DEFAULT_SEED);
    let ops: usize = env_or("CONVERGENCE_OPS", DEFAULT_OPS);
    println!("convergence: CONVERGENCE_SEED={seed} CONVERGENCE_OPS={ops}");
    let mut rng = StdRng::seed_from_u64(seed);
    let steps = plan(&mut rng, ops);

    let fake = FakeBot::start().await;
    let app = TestApp::spawn().await;
    let mut env = test_env(&url_for(&app.db_name));
    env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    env.insert("TELEGRAM_API_URL".into(), fake.url.clone());
    env.insert("LOG_FORMAT".into(), "pretty".into());
    let log = std::env::temp_dir().join(format!("{}-serve.log", app.db_name));
    let base = Arc::new(Mutex::new(String::new()));
    let mut server = Server {
        env,
        child: None,
        base: base.clone(),
        log: log.clone(),
        starts: 0,
    };
    server.start().await;
    let api = Api {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        base,
        token: Arc::new(Mutex::new(String::new())),
    };
    api.login().await;

    let mut channels = Vec::new();
    for (i, (chat, title)) in CHATS.iter().zip(TITLES).enumerate() {
        let extra = if i == 0 {
            json!({"grace_period_days": 2})
        } else {
            json!({"seat_limit": 5})
        };
        let mut body = json!({"telegram_chat_id": chat, "title": title, "price_minor": 19900,
                              "currency": "UAH", "billing_period_days": 30});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, channel) = api.staff(Method::POST, "/api/channels", body).await;
        assert_eq!(status, 201, "{channel}");
        channels.push(channel["id"].as_i64().unwrap());
    }
    let mut subscribers = Vec::new();
    for i in 0..BUYERS {
        let user = FIRST_USER + i as i64;
        let (status, s) = api
            .staff(
                Method::POST,
                "/api/subscribers",
                json!({"telegram_user_id": user, "username": format!("buyer{user}")}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        subscribers.push(s["id"].as_i64().unwrap());
    }
    let world = World {
        subscribers,
        channels,
    };

    // The buyers act all along, during the faults and after them.
    let buyers = {
        let (fake, api) = (fake.clone(), api.clone());
        tokio::spawn(async move {
            let mut buyers = Buyers::default();
            loop {
                buyers.round(&fake, &api).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let started = Instant::now();
    let mut active: Option<Fault> = None;
    let mut last_fault_end = Instant::now();
    let mut faults = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Op(op) => perform(&app, &api, &world, op, n, seed).await,
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Start(fault) => {
                faults.push(format!(
                    "{fault:?} at {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                start_fault(fault, &fake, &mut server).await;
                active = Some(fault.clone());
            }
            Step::End => {
                if let Some(fault) = active.take() {
                    end_fault(&fault, &fake);
                }
                last_fault_end = Instant::now();
            }
        }
    }
    // Terms that ended meanwhile are ended in the database too, so "live" and the status agree.
    let (status, body) = api.staff(Method::POST, "/api/sweep", Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let ops_done = started.elapsed();

    let deadline = last_fault_end + CONVERGENCE;
    let outcome = loop {
        let diff = differences(&app, &fake).await;
        match diff {
            None => break Ok(last_fault_end.elapsed()),
            Some(diff) if Instant::now() >= deadline => break Err(diff),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    buyers.abort();
    server.kill9().await;
    match outcome {
        Ok(took) => {
            println!(
                "convergence: {ops} operations and {} faults in {:.1} s ({} starts); \
                 Telegram matched the database {:.1} s after the last fault; {} Bot API calls",
                faults.len(),
                ops_done.as_secs_f64(),
                server.starts,
                took.as_secs_f64(),
                fake.calls().len()
            );
            let _ = std::fs::remove_file(&log);
        }
        Err(diff) => panic!(
            "Telegram does not match the database {} s after the last fault \
             (CONVERGENCE_SEED={seed} CONVERGENCE_OPS={ops} replays this run):\n{diff}\
             operations took {:.1} s; faults (from the start of the operations): {faults:#?}\n\
             server log: {} — it ends:\n{}",
            CONVERGENCE.as_secs(),
            ops_done.as_secs_f64(),
            log.display(),
            tail(&log, 20)
        ),
    }
}

// ---- the fake's rules of Telegram, through the worker ----

/// The fake answers as Telegram does where a wrong call would quietly break access:
/// `unbanChatMember` without `only_if_banned` takes a member out, approving a request that is
/// not pending is 400 `HIDE_REQUESTER_MISSING`. Through the worker, a grant of a member already
/// in the chat leaves them in, and an approval whose request is gone is done (not a dead
/// letter) without letting anyone in.
#[tokio::test]
async fn the_worker_keeps_members_in_and_settles_approvals_of_requests_that_are_gone() {
    let fake = FakeBot::start().await;
    let (chat, inside, withdrawn) = (-1_001_088_000_101, 881_001, 881_002);

    // The fake's rules, called directly.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = |method: &str, params: Value| {
        let req = http
            .post(format!("{}/bot{TOKEN}/{method}", fake.url))
            .json(&params);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    fake.add_member(chat, 881_999);
    let (status, _) = call(
        "unbanChatMember",
        json!({"chat_id": chat, "user_id": 881_999, "only_if_banned": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        fake.is_member(chat, 881_999),
        "only_if_banned leaves a member in"
    );
    let (status, _) = call(
        "unbanChatMember",
        json!({"chat_id": chat, "user_id": 881_999}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        !fake.is_member(chat, 881_999),
        "a plain unban takes a member out"
    );
    let (status, body) = call(
        "approveChatJoinRequest",
        json!({"chat_id": chat, "user_id": 881_999}),
    )
    .await;
    assert_eq!(
        (status, body["description"].as_str()),
        (400, Some("Bad Request: HIDE_REQUESTER_MISSING"))
    );
    assert!(!fake.is_member(chat, 881_999));
    fake.clear_calls();

    // Through the worker.
    let app = app_with(&fake).await;
    let c = crate::support::effects::channel(&app, chat, json!({})).await;
    let member = crate::support::effects::subscriber(&app, inside).await;
    let requester = crate::support::effects::subscriber(&app, withdrawn).await;
    fake.add_member(chat, inside);
    crate::support::effects::grant(&app, member, c, 30).await;
    crate::support::effects::grant(&app, requester, c, 30).await;
    // The requester's join request reaches the door, but it is no longer pending in Telegram
    // (withdrawn) when the approval is sent.
    app.post_telegram_update(join_request_update(
        chat,
        withdrawn,
        chrono::Utc::now().timestamp(),
    ))
    .await
    .expect(200);
    for _ in 0..3 {
        run(&app).await;
    }

    assert_eq!(fake.members_of(chat), vec![inside], "{:?}", fake.methods());
    for call in fake.calls_of("unbanChatMember") {
        assert_eq!(call.params["only_if_banned"], true, "{call:?}");
    }
    let approvals = fake.calls_of("approveChatJoinRequest");
    assert_eq!(approvals.len(), 1, "{:?}", fake.methods());
    let rows = app
        .db()
        .await
        .query(
            "SELECT kind, user_id, status, payload->>'note' AS note FROM effects ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    for r in &rows {
        assert_eq!(r.get::<_, String>("status"), "done", "{r:?}");
    }
    let approve = rows
        .iter()
        .find(|r| r.get::<_, String>("kind") == "join_approve")
        .expect("the approval was enqueued");
    assert!(
        approve
            .get::<_, Option<String>>("note")
            .is_some_and(|n| n.contains("HIDE_REQUESTER_MISSING")),
        "{approve:?}"
    );
}
