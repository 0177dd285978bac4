//! `make bench`: how long `GET /api/stats/*` take on a database of 1M memberships and 5M
//! payments (the sizes the statistics are promised to stay under 200 ms on).
//!
//! The data is made by set-based SQL (`generate_series`), not through the API, so building it
//! takes about a minute: 500,000 subscribers in 20 channels (15 in UAH, 5 in XTR), two
//! memberships each (35 % live), five payments per membership spread over the last two years
//! (95 % applied, 3 % refunded, 2 % kept for review), a membership event per applied payment
//! (the first creates the membership, the others renew it), an expiry event per expired
//! membership, and 50,000 trials spread over all memberships. The secondary indexes are built
//! after the rows, and the database vacuumed, as autovacuum leaves it. Every ended day is then rolled up once (what the background
//! loop does after an upgrade; timed and printed). Then each endpoint is called through the router (the role
//! layer and JSON included, no socket) `STATS_BENCH_CALLS` times after one warm-up call, and
//! its median and slowest latency printed, for the windows the console asks for.
//!
//! Environment: `SUBGATE_TEST_DATABASE_URL` (admin URL; default
//! `postgres://postgres@127.0.0.1:5432/postgres`), `STATS_BENCH_SCALE` (a fraction of the
//! default sizes, default 1), `STATS_BENCH_CALLS` (default 7), `STATS_BENCH_KEEP=1` (keep the database, to look at plans), `SUBGATE_BENCH_RESULTS` (a
//! directory: the figures are also left there in `stats.tsv`), `SUBGATE_BENCH_RUN` (a tag for
//! the database's name). The database is dropped at the end.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use chrono::{DurationRound, Utc};
use http_body_util::BodyExt;
use tokio_postgres::NoTls;
use tower::ServiceExt;

#[path = "common/mod.rs"]
mod common;
use common::{admin_url, url_for};

const ADMIN_EMAIL: &str = "bench@example.com";
const ADMIN_PASSWORD: &str = "the benchmark passphrase";

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL ({e}); run `make bench`"));
    tokio::spawn(conn);
    client
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The data, by set-based statements. `$scale` sizes everything.
fn load_sql(scale: f64) -> String {
    let subscribers = ((500_000.0 * scale) as i64).max(100);
    let memberships = subscribers * 2;
    let payments = memberships * 5;
    let trials = (subscribers / 10).max(1);
    format!(
        "
INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days)
SELECT -1000000000000 - c, 'Channel ' || c,
       CASE WHEN c <= 15 THEN 10000 + 1000 * c ELSE 250 + 50 * c END,
       CASE WHEN c <= 15 THEN 'UAH' ELSE 'XTR' END,
       CASE WHEN c % 3 = 0 THEN 90 ELSE 30 END
FROM generate_series(1, 20) c;
INSERT INTO plans (title, price_minor, currency, period_days)
SELECT title, price_minor, currency, billing_period_days FROM channels ORDER BY id;

INSERT INTO subscribers (telegram_user_id)
SELECT 100000000 + s FROM generate_series(1, {subscribers}) s;

-- Membership g: subscriber (g + 1) / 2, one of two channels of its group of ten.
INSERT INTO memberships (subscriber_id, channel_id, status, expires_at, created_at, updated_at)
SELECT (g + 1) / 2, 1 + (g - 1) % 2 + 2 * (((g - 1) / 2) % 10),
       CASE WHEN g % 20 < 6 THEN 'active' WHEN g % 20 = 6 THEN 'grace' ELSE 'expired' END,
       CASE WHEN g % 20 < 6 THEN now() + (g % 30) * interval '1 day'
            WHEN g % 20 = 6 THEN now() - interval '1 day'
            ELSE now() - (g % 700) * interval '1 day' END,
       now() - interval '730 days' + (g % 700) * interval '1 day',
       now()
FROM generate_series(1, {memberships}) g;

-- Payment p pays membership 1 + (p - 1) % M.
INSERT INTO payments (gateway, external_id, subscriber_id, channel_id, amount_minor, currency,
                      paid_at, outcome, reason)
SELECT 'bench', 'p' || p, (m.g + 1) / 2, m.channel_id, c.price_minor, c.currency,
       now() - (hashint4(p::int) & 2147483647) % (730 * 86400) * interval '1 second',
       CASE WHEN p % 100 < 95 THEN 'applied' WHEN p % 100 < 98 THEN 'refunded'
            ELSE 'needs_review' END,
       CASE WHEN p % 100 >= 98 THEN 'amount_mismatch'
            WHEN p % 100 >= 95 THEN 'refunded_at_gateway' END
FROM generate_series(1, {payments}) p
CROSS JOIN LATERAL (SELECT 1 + (p - 1) % {memberships} AS g) gm
CROSS JOIN LATERAL (SELECT gm.g, 1 + (gm.g - 1) % 2 + 2 * (((gm.g - 1) / 2) % 10) AS channel_id) m
JOIN channels c ON c.id = m.channel_id;

INSERT INTO membership_events (membership_id, from_status, to_status, expires_at_before,
                               expires_at_after, cause, payment_id, at)
SELECT 1 + (p.id - 1) % {memberships},
       CASE WHEN p.id <= {memberships} THEN NULL ELSE 'active' END, 'active',
       CASE WHEN p.id <= {memberships} THEN NULL ELSE p.paid_at END,
       p.paid_at + interval '30 days', 'payment', p.id, p.paid_at
FROM payments p WHERE p.outcome = 'applied';

INSERT INTO membership_events (membership_id, from_status, to_status, expires_at_before,
                               expires_at_after, cause, at)
SELECT id, 'grace', 'expired', expires_at, expires_at, 'sweep', expires_at
FROM memberships WHERE status = 'expired';

INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency, status,
                    paid_at, plan_id, list_price_minor, created_at)
SELECT 'trial-' || g, m.subscriber_id, m.channel_id, 0, c.currency, 'paid', m.created_at,
       m.channel_id, 0, m.created_at
FROM generate_series(1, {trials}) g
JOIN memberships m ON m.id = 20 * (g - 1) + 1 + (7 * g) % 20
JOIN channels c ON c.id = m.channel_id;
INSERT INTO trial_uses (subscriber_id, channel_id, order_id, created_at)
SELECT subscriber_id, channel_id, id, created_at FROM orders WHERE reference LIKE 'trial-%';
"
    )
}

struct Figure {
    name: String,
    median: Duration,
    max: Duration,
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| "stats".contains(f.as_str())) {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run());
}

async fn run() {
    let scale = env_f64("STATS_BENCH_SCALE", 1.0);
    let calls = env_f64("STATS_BENCH_CALLS", 7.0).max(1.0) as usize;
    let tag = std::env::var("SUBGATE_BENCH_RUN").unwrap_or_else(|_| "manual".into());
    let name = format!("subgate_bench_stats_{tag}");
    let admin = connect(&admin_url()).await;
    for sql in [
        format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
        format!("CREATE DATABASE \"{name}\""),
    ] {
        admin
            .batch_execute(&sql)
            .await
            .expect("create the benchmark database");
    }
    let url = url_for(&name);

    let env: HashMap<String, String> = [
        ("DATABASE_URL", url.as_str()),
        (
            "JWT_SECRET",
            "a benchmark secret that is long enough to sign with",
        ),
        ("ADMIN_EMAIL", ADMIN_EMAIL),
        ("ADMIN_PASSWORD", ADMIN_PASSWORD),
        ("BCRYPT_COST", "4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = subgate::Config::from_lookup(|k| env.get(k).cloned()).expect("config");
    // The default pool size: the statistics' share of it (a quarter, `stats::StatsDb`) lets the
    // summary run its three parts at once, as a server with the default configuration does.
    let pool = subgate::db::pool(config.database_url.expose(), 16).expect("pool");
    subgate::db::migrate(&pool).await.expect("migrate");

    let started = Instant::now();
    let db = connect(&url).await;
    // Bulk loading is faster without the secondary indexes: drop them, load, build them again
    // (their definitions as the migrations made them; constraints' indexes stay).
    let indexes: Vec<(String, String)> = db
        .query(
            "SELECT indexname, indexdef FROM pg_indexes i
             WHERE schemaname = 'public'
               AND tablename IN ('payments', 'memberships', 'membership_events', 'orders')
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
            &[],
        )
        .await
        .expect("list the indexes")
        .iter()
        .map(|r| (r.get("indexname"), r.get("indexdef")))
        .collect();
    for (name, _) in &indexes {
        db.batch_execute(&format!("DROP INDEX \"{name}\""))
            .await
            .expect("drop an index");
    }
    // Foreign keys and triggers are not checked while loading (`replica`): the data is made
    // consistent by construction.
    db.batch_execute("SET session_replication_role = replica")
        .await
        .expect("set session_replication_role");
    db.batch_execute(&load_sql(scale))
        .await
        .expect("load the data");
    db.batch_execute("SET session_replication_role = origin")
        .await
        .expect("set session_replication_role");
    let loaded = started.elapsed();
    db.batch_execute("SET maintenance_work_mem = '256MB'")
        .await
        .expect("set maintenance_work_mem");
    for (_, definition) in &indexes {
        db.batch_execute(definition).await.expect("build an index");
    }
    // As autovacuum leaves a table between bursts of writes (visibility map set, statistics).
    db.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
    println!(
        "stats: rows in {:.1} s, {} indexes in {:.1} s",
        loaded.as_secs_f64(),
        indexes.len(),
        (started.elapsed() - loaded).as_secs_f64()
    );
    let counts = db
        .query_one(
            "SELECT (SELECT count(*) FROM memberships) AS m, (SELECT count(*) FROM payments) AS p,
                    (SELECT count(*) FROM membership_events) AS e",
            &[],
        )
        .await
        .expect("count");
    let (m, p, e): (i64, i64, i64) = (counts.get("m"), counts.get("p"), counts.get("e"));
    println!(
        "stats: loaded {m} memberships, {p} payments, {e} membership events in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // What the background loop does once after an upgrade: roll every ended day up.
    let rolled_at = Instant::now();
    let days = subgate::reports::stats::roll_up(
        &subgate::reports::stats::StatsDb::new(pool.clone()),
        (Utc::now() - chrono::Duration::days(800)).date_naive(),
        None,
    )
    .await
    .expect("roll up");
    let roll_up = rolled_at.elapsed();
    println!(
        "stats: rolled up {days} days in {:.1} s",
        roll_up.as_secs_f64()
    );

    let state = subgate::app::state::AppState::new(config, pool.clone())
        .await
        .expect("state");
    subgate::bootstrap_admin(&state).await.expect("admin");
    let router = subgate::router(state);
    let login = Request::post("/api/auth/login")
        .header("content-type", "application/json")
        .body(Body::from(
            serde_json::json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}).to_string(),
        ))
        .unwrap();
    let answer = router.clone().oneshot(login).await.unwrap();
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    let token = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["access_token"]
        .as_str()
        .expect("a token")
        .to_string();

    let day = chrono::Duration::days(1);
    let today = Utc::now().duration_trunc(day).unwrap() + day;
    let ago = |days: i64| {
        (today - day * days as i32)
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    let to = today.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let cases = [
        ("summary".to_string(), "/api/stats/summary".to_string()),
        (
            "revenue, 30 days by day".into(),
            format!("/api/stats/revenue?from={}&to={to}&interval=day", ago(30)),
        ),
        (
            "revenue, 90 days by day".into(),
            format!("/api/stats/revenue?from={}&to={to}&interval=day", ago(90)),
        ),
        (
            "revenue, 12 months by month".into(),
            format!(
                "/api/stats/revenue?from={}&to={to}&interval=month",
                ago(365)
            ),
        ),
        (
            "members, 30 days by day".into(),
            format!("/api/stats/members?from={}&to={to}&interval=day", ago(30)),
        ),
        (
            "members, 90 days by week".into(),
            format!("/api/stats/members?from={}&to={to}&interval=week", ago(90)),
        ),
        (
            "members, 12 months by month".into(),
            format!(
                "/api/stats/members?from={}&to={to}&interval=month",
                ago(365)
            ),
        ),
    ];
    let mut figures = Vec::new();
    for (name, path) in cases {
        let mut times = Vec::new();
        for i in 0..=calls {
            let req = Request::get(&path)
                .header("authorization", format!("Bearer {token}"))
                .body(Body::empty())
                .unwrap();
            let t = Instant::now();
            let answer = router.clone().oneshot(req).await.unwrap();
            let status = answer.status();
            let body = answer.into_body().collect().await.unwrap().to_bytes();
            let elapsed = t.elapsed();
            assert_eq!(
                status,
                StatusCode::OK,
                "{path}: {}",
                String::from_utf8_lossy(&body)
            );
            if i > 0 {
                times.push(elapsed);
            }
        }
        times.sort();
        figures.push(Figure {
            name,
            median: times[times.len() / 2],
            max: times[times.len() - 1],
        });
    }

    println!("\n| stats endpoint (1M memberships, 5M payments) | median | slowest |");
    println!("|---|---:|---:|");
    let mut tsv = format!(
        "stats roll-up of {days} days (s)\t{:.1}\n",
        roll_up.as_secs_f64()
    );
    for f in &figures {
        println!(
            "| {} | {:.0} ms | {:.0} ms |",
            f.name,
            f.median.as_secs_f64() * 1e3,
            f.max.as_secs_f64() * 1e3
        );
        tsv.push_str(&format!(
            "stats {}\t{:.1}\n",
            f.name,
            f.median.as_secs_f64() * 1e3
        ));
    }
    if let Ok(dir) = std::env::var("SUBGATE_BENCH_RESULTS") {
        let _ = std::fs::write(std::path::Path::new(&dir).join("stats.tsv"), tsv);
    }
    drop(router);
    pool.close();
    drop(db);
    if std::env::var("STATS_BENCH_KEEP").is_ok_and(|v| v == "1") {
        println!("stats: kept database {name}");
        return;
    }
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .expect("drop the benchmark database");
}
