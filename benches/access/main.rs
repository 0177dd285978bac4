//! `make bench`, access: how soon a payment turns into its grant message at Telegram, and how
//! fast a burst of payments is granted, against a fake Bot API that enforces Telegram's limits.
//!
//! The release-built `subgate serve` runs as a child process on its own database with
//! `TELEGRAM_BOT_TOKEN` set and `TELEGRAM_API_URL` pointing at the fake ([`fake_bot`]: 429 with
//! `retry_after` above 30 calls in any second or a second message to one chat within a second;
//! it counts calls by method and its 429s). Payments come through door 1 (signed
//! `payment.succeeded` deliveries); each pays one pending order of its own buyer in one of ten
//! channels (the burst's in ten others, whose join links its first grants make), so each is one
//! `grant` effect, one message to one chat. Three phases:
//!
//! 1. **time to access**: `ACCESS_BENCH_SEQUENTIAL` payments (default 100), one at a time, each
//!    timed from its 200 to its grant message at the fake; p50, p99, max.
//! 2. **behind a queue**: `ACCESS_BENCH_QUEUED` invoice effects (default 10,000; Stars invoices
//!    of pending orders, inserted by SQL and committed at once) are queued first; then
//!    `ACCESS_BENCH_BEHIND` payments (default 20), one every 250 ms, timed the same way while
//!    the invoices drain at the pace. The invoices left are then marked done.
//! 3. **burst**: `ACCESS_BENCH_BURST` payments (default 3,000) sent over 16 connections as fast
//!    as the server takes them; grants/s from the first payment sent to the last grant message,
//!    Bot API calls per grant and the 429s of the phase.
//!
//! A plain `harness = false` main. Environment as the payment benchmark's
//! (`SUBGATE_TEST_DATABASE_URL`, `SUBGATE_BENCH_RUN`, `SUBGATE_BENCH_PIDFILE`,
//! `SUBGATE_BENCH_RESULTS`: the figures are left in `access.tsv` there).

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

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

pub use common::record_pid;
use common::{AMOUNT_MINOR, Latencies, Payer, random_hex};
use fake_bot::{Counts, FakeBot};
use server::{Server, ServerEnv};
use subgate::{db, payments::gateways::standard_webhooks::WebhookKey};

/// The bench bot's token (the fake accepts any).
const TOKEN: &str = "424242:benchBENCHbenchBENCHbenchBENCHbench";
const CHANNELS: i64 = 10;
/// Buyers of the queued invoices are numbered from here (payers from 1).
const INVOICE_BUYERS: i64 = 10_000_000;
/// How long one payment's grant may take before the benchmark gives up.
const GRANT_LIMIT: Duration = Duration::from_secs(30);

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A PostgreSQL error with the server's message.
fn pg(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => d.message().to_string(),
        None => e.to_string(),
    }
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[bench] access: {message}");
}

fn main() {
    record_pid(std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("benches/access: {e}");
        std::process::exit(1);
    }
}

struct Sizes {
    sequential: i64,
    queued: i64,
    behind: i64,
    burst: i64,
}

async fn run() -> Result<(), String> {
    let sizes = Sizes {
        sequential: env_or("ACCESS_BENCH_SEQUENTIAL", 100).max(1),
        queued: env_or("ACCESS_BENCH_QUEUED", 10_000).max(0),
        behind: env_or("ACCESS_BENCH_BEHIND", 20).max(1),
        burst: env_or("ACCESS_BENCH_BURST", 3_000).max(1),
    };
    let sizes = &sizes;
    let figures =
        common::on_fresh_database("access", |url| async move { measure(sizes, &url).await })
            .await?;
    common::keep_figures("access", &figures.report(sizes), &figures.tsv());
    Ok(())
}

/// The payers: order `n` (reference `n`) of buyer `n` (Telegram user `n`) in channel
/// `(n - 1) % 10 + 1`, for `payers` orders — from order `burst_from` on in ten other channels,
/// so the burst's first grants make their channels' join links as a fresh sale does; and
/// `queued` Stars orders of other buyers, whose invoice effects [`queue_invoices`] inserts.
async fn populate(
    pool: &deadpool_postgres::Pool,
    payers: i64,
    burst_from: i64,
    queued: i64,
) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .batch_execute(&format!(
            "INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days)
             SELECT -1000 - g, 'bench ' || g, {AMOUNT_MINOR}, 'UAH', 30
             FROM generate_series(1, 2 * {CHANNELS}) g;
             INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days)
             VALUES (-2000, 'bench stars', 50, 'XTR', 30);
             INSERT INTO subscribers (telegram_user_id) SELECT g FROM generate_series(1, {payers}) g;
             INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
             SELECT g::text, g,
                    (g - 1) % {CHANNELS} + 1 + CASE WHEN g >= {burst_from} THEN {CHANNELS} ELSE 0 END,
                    {AMOUNT_MINOR}, 'UAH'
             FROM generate_series(1, {payers}) g;
             INSERT INTO subscribers (telegram_user_id)
             SELECT {INVOICE_BUYERS} + g FROM generate_series(1, {queued}) g;
             INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
             SELECT 'stars-' || g, s.id, c.id, 50, 'XTR'
             FROM generate_series(1, {queued}) g
             JOIN subscribers s ON s.telegram_user_id = {INVOICE_BUYERS} + g
             CROSS JOIN channels c WHERE c.telegram_chat_id = -2000;"
        ))
        .await
        .map_err(|e| format!("populate: {}", pg(e)))?;
    client
        .batch_execute("VACUUM ANALYZE channels, subscribers, orders")
        .await
        .map_err(|e| format!("vacuum: {}", pg(e)))?;
    Ok(())
}

/// Queues one invoice effect per Stars order, in one committed statement (as a storm of buy
/// presses leaves them).
async fn queue_invoices(pool: &deadpool_postgres::Pool) -> Result<u64, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .execute(
            "INSERT INTO effects (kind, order_id, user_id, payload, dedupe_key)
             SELECT 'invoice', o.id, s.telegram_user_id, '{}', 'invoice:' || o.id
             FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE o.currency = 'XTR'",
            &[],
        )
        .await
        .map_err(|e| format!("queue invoices: {}", pg(e)))
}

/// Pays order `n` through door 1; returns when the 200 arrived.
impl Payer {
    /// Pays order `n` and waits for its grant message: the time from the 200 to it.
    async fn time_to_access(&self, fake: &FakeBot, n: i64) -> Result<Duration, String> {
        let paid = self.pay(n).await?;
        let at = fake
            .first_message(n, GRANT_LIMIT)
            .await
            .ok_or_else(|| format!("payment {n}: no grant message within {GRANT_LIMIT:?}"))?;
        Ok(at.saturating_duration_since(paid))
    }
}

struct Figures {
    sequential: Latencies,
    sequential_calls: Counts,
    queued: u64,
    behind: Latencies,
    behind_calls: Counts,
    invoices_sent: u64,
    burst: i64,
    burst_secs: f64,
    burst_calls: Counts,
    paid_secs: f64,
}

impl Figures {
    fn grants_per_sec(&self, s: &Sizes) -> f64 {
        s.burst as f64 / self.burst_secs
    }

    fn calls_per_grant(&self, s: &Sizes) -> f64 {
        self.burst_calls.total() as f64 / s.burst as f64
    }

    fn report(&self, s: &Sizes) -> String {
        let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
        let mut t = String::new();
        t.push_str(
            "| access (fake Bot API at Telegram's limits) | figure | goal |\n|---|---|---|\n",
        );
        t.push_str(&format!(
            "| time to access, one payment at a time ({} payments): p50 / p99 / max | {:.0} / {:.0} / {:.0} ms | p99 ≤ 500 ms: {} |\n",
            s.sequential,
            self.sequential.q(0.5),
            self.sequential.q(0.99),
            self.sequential.q(1.0),
            verdict(self.sequential.q(0.99) <= 500.0)
        ));
        t.push_str(&format!(
            "| time to access behind {} queued invoices ({} payments): p50 / p99 / max | {:.0} / {:.0} / {:.0} ms ({} invoices sent meanwhile) | every grant ≤ 1 s: {} |\n",
            self.queued,
            s.behind,
            self.behind.q(0.5),
            self.behind.q(0.99),
            self.behind.q(1.0),
            self.invoices_sent,
            verdict(self.behind.q(1.0) <= 1000.0)
        ));
        t.push_str(&format!(
            "| burst of {} payments: paid in / all granted after | {:.1} s / {:.1} s | |\n",
            s.burst, self.paid_secs, self.burst_secs
        ));
        t.push_str(&format!(
            "| burst: grants per second | {:.1} | ≥ 25: {} |\n",
            self.grants_per_sec(s),
            verdict(self.grants_per_sec(s) >= 25.0)
        ));
        t.push_str(&format!(
            "| burst: Bot API calls per grant | {:.3} ({}) | 1 |\n",
            self.calls_per_grant(s),
            self.burst_calls.by_method()
        ));
        t.push_str(&format!(
            "| 429s answered by the fake: sequential / queued / burst | {} / {} / {} | 0 |\n",
            self.sequential_calls.refused, self.behind_calls.refused, self.burst_calls.refused
        ));
        t
    }

    fn tsv(&self) -> String {
        [
            ("access_p50_ms", self.sequential.q(0.5)),
            ("access_p99_ms", self.sequential.q(0.99)),
            ("queued_access_max_ms", self.behind.q(1.0)),
            ("burst_grants_per_sec", self.burst as f64 / self.burst_secs),
            (
                "burst_calls_per_grant",
                self.burst_calls.total() as f64 / self.burst as f64,
            ),
            ("burst_429s", self.burst_calls.refused as f64),
        ]
        .iter()
        .map(|(k, v)| format!("{k}\t{v:.3}\n"))
        .collect()
    }
}

async fn measure(s: &Sizes, database_url: &str) -> Result<Figures, String> {
    let pool = db::pool(database_url, 4).map_err(|e| e.to_string())?;
    db::migrate(&pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let payers = s.sequential + s.behind + s.burst;
    progress(format!(
        "{payers} pending orders of their own buyers, {} Stars orders to invoice",
        s.queued
    ));
    populate(&pool, payers, s.sequential + s.behind + 1, s.queued).await?;

    let fake = FakeBot::start().await?;
    let log = common::server_log("access-server.log")?;
    let secret = common::webhook_secret();
    let key = WebhookKey::parse(&secret).map_err(|e| e.to_string())?;
    let extra = [
        ("TELEGRAM_BOT_TOKEN", TOKEN.to_string()),
        ("TELEGRAM_API_URL", fake.url.clone()),
    ];
    let env = ServerEnv {
        database_url,
        ca_cert: None,
        webhook_secret: &secret,
        jwt_secret: &random_hex(32),
        extra: &extra,
        bin: None,
    };
    let server = Server::start(&env, &log).await?;
    progress(format!(
        "server on {} (log: {})",
        server.addr,
        log.display()
    ));
    let payer = Payer {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(32)
            .build()
            .map_err(|e| e.to_string())?,
        url: format!("http://{}/api/webhook/payment", server.addr),
        key: Arc::new(key),
        reference_prefix: "",
    };
    // Let start-up's own calls (the Stars reconcile, rights probes) pass first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let result = phases(s, &pool, &fake, &payer).await;
    server.stop().await;
    pool.close();
    result
}

async fn phases(
    s: &Sizes,
    pool: &deadpool_postgres::Pool,
    fake: &FakeBot,
    payer: &Payer,
) -> Result<Figures, String> {
    // 1. One payment at a time.
    progress(format!(
        "time to access: {} payments one at a time",
        s.sequential
    ));
    let before = fake.counts();
    let mut times = Vec::new();
    for n in 1..=s.sequential {
        times.push(payer.time_to_access(fake, n).await?);
    }
    let sequential = Latencies::new(times);
    let sequential_calls = fake.counts().since(&before);

    // 2. Behind a queue of invoices.
    let queued = if s.queued > 0 {
        queue_invoices(pool).await?
    } else {
        0
    };
    progress(format!(
        "time to access behind {queued} queued invoices: {} payments, one every 250 ms",
        s.behind
    ));
    let before = fake.counts();
    let first = s.sequential + 1;
    let mut times = Vec::new();
    for n in first..first + s.behind {
        let next = tokio::time::Instant::now() + Duration::from_millis(250);
        times.push(payer.time_to_access(fake, n).await?);
        tokio::time::sleep_until(next).await;
    }
    let behind = Latencies::new(times);
    let behind_calls = fake.counts().since(&before);
    let invoices_sent = behind_calls.calls.get("sendInvoice").copied().unwrap_or(0);
    // The rest of the queue is not the burst's business.
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .execute(
            "UPDATE effects SET status = 'done', done_at = now(), lease_until = NULL
             WHERE kind = 'invoice' AND status = 'pending'",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    drop(client);
    // Leased invoices finish at the pace; let the window empty.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 3. A burst.
    let first = s.sequential + s.behind + 1;
    let last = first + s.burst - 1;
    progress(format!("burst: {} payments over 16 connections", s.burst));
    let before = fake.counts();
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicI64::new(first));
    let senders = (0..16).map(|_| {
        let (payer, next) = (payer.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n > last {
                    return Ok::<(), String>(());
                }
                payer.pay(n).await?;
            }
        })
    });
    for r in futures::future::join_all(senders).await {
        r.map_err(|e| e.to_string())??;
    }
    let paid_secs = started.elapsed().as_secs_f64();
    progress(format!(
        "burst: paid in {paid_secs:.1} s; waiting for the grants"
    ));
    let limit = Duration::from_secs((s.burst as u64 / 10).max(60));
    let deadline = Instant::now() + limit;
    let last_grant = loop {
        if let Some(at) = fake.last_first_message(first..=last) {
            break at;
        }
        if Instant::now() > deadline {
            return Err(format!("burst: not every grant arrived within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let burst_secs = last_grant.saturating_duration_since(started).as_secs_f64();
    let burst_calls = fake.counts().since(&before);
    Ok(Figures {
        sequential,
        sequential_calls,
        queued,
        behind,
        behind_calls,
        invoices_sent,
        burst: s.burst,
        burst_secs,
        burst_calls,
        paid_secs,
    })
}
