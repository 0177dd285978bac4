//! `make bench`, broadcasts: a broadcast to members at Telegram's free rate through a crash of
//! the server, and a paid broadcast at up to 1,000 messages a second within its Stars budget,
//! against a fake Bot API that enforces Telegram's limits and records every message it accepts.
//!
//! The release-built `subgate serve` runs as a child process on its own database with
//! `TELEGRAM_BOT_TOKEN` set and `TELEGRAM_API_URL` pointing at the fake ([`fake_bot`]: 429 with
//! `retry_after` above 30 calls in any second or a second message to one chat within a second;
//! messages sent with `allow_paid_broadcast` accepted up to 1,000 a second, those beyond the free
//! 30 billed). The recipients are subscribers with active memberships, inserted by SQL, one
//! channel per broadcast; a broadcast's segment is its channel. Two phases, each failing the
//! benchmark when a goal is missed:
//!
//! 1. **free**: a broadcast to `BROADCAST_BENCH_FREE_RECIPIENTS` members (default 3,000), with
//!    the server killed (`kill -9`) once `BROADCAST_BENCH_KILL_AT` % of them (default 40) got the
//!    message — mid-call: the fake delivers the next message of each worker lane and keeps its
//!    answer back until the server is gone — and started again at once. Meanwhile a buyer pays
//!    through door 1 every `BROADCAST_BENCH_PAY_EVERY_MS` (default 1,000), each timed from the
//!    payment's 200 to its grant message at the fake. Goals: every recipient reached exactly
//!    once by the fake, but for at most one recipient per worker lane per kill missing and
//!    counted `skipped`; counters and rows agree; the pacer's rate (28 calls/s) kept within
//!    10 % while sending; every 429 retried; grants during the broadcast p99 ≤ 1 s.
//! 2. **paid**: a broadcast to `BROADCAST_BENCH_RECIPIENTS` members (default 100,000) with
//!    `"paid": {"max_stars": BROADCAST_BENCH_MAX_STARS}` (default: 2 % short of paying for
//!    every recipient, so the budget runs out before the end). Goals: ≥ 900 messages/s
//!    sustained while paying; `paid_messages` never above `max_stars × 10`, nor the rows marked
//!    paid, nor the fake's count of messages sent with `allow_paid_broadcast` (and of those it
//!    billed); every recipient reached exactly once.
//!
//! A size of 0 leaves its phase out. A plain `harness = false` main. Environment as the payment
//! benchmark's (`SUBGATE_TEST_DATABASE_URL`, `SUBGATE_BENCH_RUN`, `SUBGATE_BENCH_PIDFILE`,
//! `SUBGATE_BENCH_RESULTS`: the figures are left in `broadcast.md` and `broadcast.tsv` there).

#[path = "../common/mod.rs"]
mod common;
#[path = "../fake_bot/mod.rs"]
mod fake_bot;
// The payment benchmark's server runner (and the HTTP client it checks readiness with).
#[allow(dead_code)]
#[path = "../payments/http.rs"]
mod http;
#[allow(dead_code)]
#[path = "../payments/server.rs"]
mod server;

mod api;
mod audit;
mod phases;
mod report;

use std::{path::PathBuf, sync::Arc};

use api::{ADMIN_EMAIL, ADMIN_PASSWORD, Api};
pub use common::record_pid;
use common::{AMOUNT_MINOR, Payer, random_hex};
use fake_bot::FakeBot;
use server::{Server, ServerEnv};
use subgate::{db, payments::gateways::standard_webhooks::WebhookKey};

/// The bench bot's token (the fake accepts any).
const TOKEN: &str = "424242:benchBENCHbenchBENCHbenchBENCHbench";
/// Telegram ids (and so chats) of the free broadcast's recipients start after this, those of
/// the paid broadcast's after [`PAID_BASE`], the payers' after [`PAYER_BASE`].
pub const FREE_BASE: i64 = 10_000_000;
pub const PAID_BASE: i64 = 20_000_000;
pub const PAYER_BASE: i64 = 30_000_000;
/// The channels (Telegram chat ids) of the two broadcasts' members and of the payers.
const FREE_CHAT: i64 = -1_000_001;
const PAID_CHAT: i64 = -1_000_002;
const PAYER_CHAT: i64 = -1_000_003;

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A PostgreSQL error with the server's message.
pub fn pg(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => d.message().to_string(),
        None => e.to_string(),
    }
}

pub fn progress(message: impl std::fmt::Display) {
    eprintln!("[bench] broadcast: {message}");
}

fn main() {
    record_pid(std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("benches/broadcast: {e}");
        std::process::exit(1);
    }
}

/// The sizes of one run.
pub struct Sizes {
    pub free: i64,
    pub kill_at_percent: i64,
    pub pay_every_ms: i64,
    pub paid: i64,
    pub max_stars: i64,
}

impl Sizes {
    fn from_env() -> Sizes {
        let paid = env_or("BROADCAST_BENCH_RECIPIENTS", 100_000).max(0);
        Sizes {
            free: env_or("BROADCAST_BENCH_FREE_RECIPIENTS", 3_000).max(0),
            kill_at_percent: env_or("BROADCAST_BENCH_KILL_AT", 40).clamp(1, 99),
            pay_every_ms: env_or("BROADCAST_BENCH_PAY_EVERY_MS", 1_000).max(100),
            paid,
            // 0.1 Star a message: 2 % fewer Stars than paying for every recipient.
            max_stars: env_or("BROADCAST_BENCH_MAX_STARS", paid / 10 - paid / 500).max(1),
        }
    }

    /// Orders for the payers of the free phase: one a tick for twice the time the broadcast
    /// should take, and some.
    fn payers(&self) -> i64 {
        if self.free == 0 {
            return 0;
        }
        let ticks_per_sec = 1_000.0 / self.pay_every_ms as f64;
        (self.free as f64 / 28.0 * 2.0 * ticks_per_sec) as i64 + 200
    }
}

async fn run() -> Result<(), String> {
    let sizes = Sizes::from_env();
    let sizes = &sizes;
    let figures =
        common::on_fresh_database("broadcast", |url| async move { measure(sizes, &url).await })
            .await?;
    common::keep_figures("broadcast", &figures.report(sizes), &figures.tsv());
    let missed = figures.missed();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(format!("goals missed: {}", missed.join("; ")))
    }
}

/// The members of both broadcasts and the payers' pending orders, by SQL; the channels carry
/// a join link already, so a grant is one message.
async fn populate(pool: &deadpool_postgres::Pool, s: &Sizes) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let (free, paid, payers) = (s.free, s.paid, s.payers());
    client
        .batch_execute(&format!(
            "INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days, invite_link)
             VALUES ({FREE_CHAT}, 'bench free broadcast', {AMOUNT_MINOR}, 'UAH', 30, 'https://t.me/+benchfree'),
                    ({PAID_CHAT}, 'bench paid broadcast', {AMOUNT_MINOR}, 'UAH', 30, 'https://t.me/+benchpaid'),
                    ({PAYER_CHAT}, 'bench payments', {AMOUNT_MINOR}, 'UAH', 30, 'https://t.me/+benchpay');
             INSERT INTO subscribers (telegram_user_id)
             SELECT {FREE_BASE} + g FROM generate_series(1, {free}) g
             UNION ALL SELECT {PAID_BASE} + g FROM generate_series(1, {paid}) g
             UNION ALL SELECT {PAYER_BASE} + g FROM generate_series(1, {payers}) g;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT s.id, c.id, 'active', now() + interval '20 days'
             FROM subscribers s
             JOIN channels c ON c.telegram_chat_id =
                  CASE WHEN s.telegram_user_id > {PAID_BASE} THEN {PAID_CHAT} ELSE {FREE_CHAT} END
             WHERE s.telegram_user_id < {PAYER_BASE};
             INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
             SELECT 'bench-pay-' || (s.telegram_user_id - {PAYER_BASE}), s.id, c.id, {AMOUNT_MINOR}, 'UAH'
             FROM subscribers s CROSS JOIN channels c
             WHERE s.telegram_user_id > {PAYER_BASE} AND c.telegram_chat_id = {PAYER_CHAT};"
        ))
        .await
        .map_err(|e| format!("populate: {}", pg(e)))?;
    client
        .batch_execute("VACUUM ANALYZE channels, subscribers, memberships, orders")
        .await
        .map_err(|e| format!("vacuum: {}", pg(e)))?;
    Ok(())
}

/// The channel id (subgate's) of the chat `chat`.
pub async fn channel_id(pool: &deadpool_postgres::Pool, chat: i64) -> Result<i64, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT id::bigint AS id FROM channels WHERE telegram_chat_id = $1",
            &[&chat],
        )
        .await
        .map_err(pg)?;
    Ok(row.get("id"))
}

/// What a phase needs to crash and restart the server.
pub struct Rig<'a> {
    pub env: ServerEnv<'a>,
    pub log: PathBuf,
    pub pool: deadpool_postgres::Pool,
    pub fake: FakeBot,
    pub http: reqwest::Client,
    pub server: Server,
    pub api: Api,
    pub payer: Payer,
}

impl Rig<'_> {
    /// `kill -9` of the server, then a new one on the same database; returns when it is ready.
    pub async fn crash_and_restart(&mut self) -> Result<std::time::Duration, String> {
        self.server.kill();
        self.server = Server::start(&self.env, &self.log).await?;
        self.api = Api::login(&self.http, self.server.addr).await?;
        self.payer.at(self.server.addr);
        Ok(self.server.ready_after)
    }
}

async fn measure(s: &Sizes, database_url: &str) -> Result<report::Figures, String> {
    let pool = db::pool(database_url, 4).map_err(|e| e.to_string())?;
    db::migrate(&pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    progress(format!(
        "{} + {} members, {} payers' orders",
        s.free,
        s.paid,
        s.payers()
    ));
    populate(&pool, s).await?;

    let fake = FakeBot::start().await?;
    let log = common::server_log("broadcast-server.log")?;
    let secret = common::webhook_secret();
    let key = WebhookKey::parse(&secret).map_err(|e| e.to_string())?;
    let jwt = random_hex(32);
    let extra = [
        ("TELEGRAM_BOT_TOKEN", TOKEN.to_string()),
        ("TELEGRAM_API_URL", fake.url.clone()),
        ("ADMIN_EMAIL", ADMIN_EMAIL.to_string()),
        ("ADMIN_PASSWORD", ADMIN_PASSWORD.to_string()),
        ("BCRYPT_COST", "4".to_string()),
    ];
    let env = ServerEnv {
        database_url,
        ca_cert: None,
        webhook_secret: &secret,
        jwt_secret: &jwt,
        extra: &extra,
        bin: None,
    };
    let server = Server::start(&env, &log).await?;
    progress(format!(
        "server on {} (log: {})",
        server.addr,
        log.display()
    ));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(8)
        .build()
        .map_err(|e| e.to_string())?;
    let api = Api::login(&http, server.addr).await?;
    let mut payer = Payer {
        http: http.clone(),
        url: String::new(),
        key: Arc::new(key),
        reference_prefix: "bench-pay-",
    };
    payer.at(server.addr);
    let mut rig = Rig {
        env,
        log,
        pool: pool.clone(),
        fake,
        http,
        server,
        api,
        payer,
    };
    // Let start-up's own calls (the Stars reconcile, rights probes) pass first.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let result = phases::run(s, &mut rig).await;
    rig.server.stop().await;
    pool.close();
    result
}
