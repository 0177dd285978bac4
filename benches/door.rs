//! `make bench`: the door — join request queries answered in the webhook's reply, a thousand
//! arriving at once, through the real server.
//!
//! On a fresh database of its own (a Stars channel whose door is the Mini App, made by SQL as
//! staff would make it, and live members among the users who will ask), it starts the `subgate`
//! binary of this build (`cargo bench`: the release profile) with `PUBLIC_URL`, the webhook
//! secret, a bot token and `TELEGRAM_API_URL` pointing at the fake Bot API of the benchmarks
//! ([`fake_bot`], Telegram's limits enforced, `getChatAdministrators` answered), and sends
//! `--requests` (1,000) `chat_join_request` updates, each with its own user and `query_id`, all
//! released together, each on its own connection (made when it is released, as Telegram's
//! would be). Twice: right after the start (no chat administrators read yet), then a second
//! thousand of new users a moment later. Each request's time runs from the release to its
//! answer; it prints p50, p99 and the slowest of each round against the goal (p99 < 1 s), how
//! many were answered `queue` (not decided within `DOOR_ANSWER_MS`), the Bot API calls the door
//! made, and the server's CPU time, and leaves them in `$SUBGATE_BENCH_RESULTS/door.tsv`.
//!
//! Then the rows and the answers: one `join_requests` row per query; a member's query approved
//! (`approve`, `approved`), anyone else's answered with the Mini App and the reference of their
//! waiting row; no error in the server's log. Exits non-zero when a request failed or a check
//! did not hold (a missed goal is reported, not a failure: the machine may be busy).
//!
//! Environment: `SUBGATE_TEST_DATABASE_URL` (admin URL), `SUBGATE_BENCH_RUN`,
//! `SUBGATE_BENCH_PIDFILE`, `SUBGATE_BENCH_RESULTS`, as the other benchmarks; `DOOR_BENCH_SERVER`
//! (another `subgate` binary to run, e.g. an older build to compare with; unset: this build's),
//! `DOOR_BENCH_DB_POOL_SIZE` (the server's `DB_POOL_SIZE`; unset: its default).

#[path = "common/mod.rs"]
mod common;
#[path = "fake_bot/mod.rs"]
mod fake_bot;
// The payment benchmark's server runner, and the HTTP probe it waits with.
#[allow(dead_code)]
#[path = "payments/http.rs"]
mod http;
#[allow(dead_code)]
#[path = "payments/server.rs"]
mod server;

pub use common::record_pid;
use common::{Latencies, cpu_time, random_hex};

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::server::{Server, ServerEnv};

const PATH: &str = "/api/webhook/telegram";
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
const PUBLIC_URL: &str = "https://door.bench.example";
const CHAT: i64 = -100_900_000_001;
/// Every `MEMBER_EVERY`th user who asks holds a live membership.
const MEMBER_EVERY: i64 = 10;
/// The Telegram user ids of the users who ask are `FIRST_USER + 1, …` (the fake Bot API's
/// bot, the chat's only administrator, is user 1).
const FIRST_USER: i64 = 7_000_000_000;
/// The goal: a query answered within this, at the 99th percentile.
const GOAL_P99_MS: f64 = 1_000.0;
const TOKEN: &str = "123456:doorBENCHdoorBENCHdoorBENCHdoor";

const USAGE: &str = "\
benches/door: join request queries answered at the door, released together (docs/benchmarks.md)

Options:
  --requests N   join requests released together, per round (default 1000)
";

fn parse_args() -> Result<Option<usize>, String> {
    let mut requests = 1_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(None);
            }
            "--bench" => {}
            "--requests" => {
                let value = args.next().ok_or("--requests needs a value")?;
                requests = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or(format!("--requests: {value} is not 1 to 10000"))?;
            }
            // `cargo bench NAME` passes NAME to every bench; honour one that is not us.
            other if !other.starts_with("--") && "door".contains(other) => {}
            other if !other.starts_with("--") => return Ok(None),
            other => return Err(format!("unknown option {other}\n\n{USAGE}")),
        }
    }
    Ok(Some(requests))
}

fn main() {
    common::main_with("benches/door", parse_args(), run);
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[door-bench] {message}");
}

/// One round's figures.
struct Round {
    name: &'static str,
    latencies: Latencies,
    queued: usize,
    /// CPU time during the round: the server's, PostgreSQL's backends serving the benchmark's
    /// database, the load generator's (this process), and the whole machine's (both cores).
    server_cpu: Duration,
    db_cpu: Duration,
    own_cpu: Duration,
    machine_cpu: Duration,
    /// From the release to the last answer.
    wall: Duration,
    /// Bot API calls the server made during the round, by method, and the fake's 429s.
    calls: String,
    refused: u64,
}

async fn run(requests: usize) -> Result<(), String> {
    let rounds = common::on_fresh_database("door", |url| measure(url, requests)).await?;
    let table = report(requests, &rounds);
    let mut tsv = String::new();
    for r in &rounds {
        for (what, q) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
            let _ = writeln!(tsv, "door_{}_{what}_ms\t{:.1}", r.name, r.latencies.q(q));
        }
        let _ = writeln!(tsv, "door_{}_queued\t{}", r.name, r.queued);
    }
    common::keep_figures("door", &table, &tsv);
    Ok(())
}

/// The update of user `user` asking to join, with query `query`.
fn join_request(update_id: i64, user: i64, query: &str) -> String {
    json!({
        "update_id": update_id,
        "chat_join_request": {
            "chat": {"id": CHAT, "type": "channel", "title": "Door bench"},
            "from": {"id": user, "is_bot": false, "first_name": "Asker", "language_code": "en"},
            "user_chat_id": user,
            "date": chrono::Utc::now().timestamp(),
            "query_id": query
        }
    })
    .to_string()
}

async fn measure(database_url: String, requests: usize) -> Result<Vec<Round>, String> {
    let pool = subgate::db::pool(&database_url, 2).map_err(|e| e.to_string())?;
    subgate::db::migrate(&pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let users = 2 * requests as i64;
    let channel: i32 = client
        .query_one(
            "INSERT INTO channels (telegram_chat_id, title, description, price_minor, currency,
                                   billing_period_days, door)
             VALUES ($1, 'Door bench', 'Behind the door', 250, 'XTR', 30, 'mini_app')
             RETURNING id",
            &[&CHAT],
        )
        .await
        .map_err(|e| format!("channel: {e}"))?
        .get(0);
    client
        .batch_execute(&format!(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT {FIRST_USER} + g FROM generate_series(1, {users}) g
             WHERE g % {MEMBER_EVERY} = 0;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT id, {channel}, 'active', now() + interval '30 days' FROM subscribers"
        ))
        .await
        .map_err(|e| format!("members: {e:?}"))?;
    client
        .batch_execute("VACUUM ANALYZE")
        .await
        .map_err(|e| format!("vacuum: {e}"))?;

    let fake = fake_bot::FakeBot::start().await?;
    let secret = random_hex(24);
    let mut extra = vec![
        ("TELEGRAM_WEBHOOK_SECRET", secret.clone()),
        ("TELEGRAM_BOT_TOKEN", TOKEN.to_string()),
        ("TELEGRAM_API_URL", fake.url.clone()),
        ("PUBLIC_URL", PUBLIC_URL.to_string()),
    ];
    if let Ok(size) = std::env::var("DOOR_BENCH_DB_POOL_SIZE") {
        progress(format!("DB_POOL_SIZE={size} (DOOR_BENCH_DB_POOL_SIZE)"));
        extra.push(("DB_POOL_SIZE", size));
    }
    let bin = std::env::var("DOOR_BENCH_SERVER")
        .ok()
        .filter(|b| !b.is_empty());
    let log = common::server_log("door-server.log")?;
    let env = ServerEnv {
        database_url: &database_url,
        ca_cert: None,
        webhook_secret: &common::webhook_secret(),
        jwt_secret: &random_hex(32),
        extra: &extra,
        bin: bin.as_deref(),
    };
    let server = Server::start(&env, &log).await?;
    progress(format!(
        "server pid {} on {} (log: {})",
        server.pid(),
        server.addr,
        log.display()
    ));
    let url = format!("http://{}{PATH}", server.addr);

    let mut rounds = Vec::new();
    let mut replies = HashMap::new();
    for (name, first_user) in [
        ("cold", FIRST_USER + 1),
        ("warm", FIRST_USER + requests as i64 + 1),
    ] {
        let calls_before = fake.counts();
        let cpu_before = cpu_time(server.pid());
        let db_before = backends_cpu(&client).await;
        let clock_before = common::CpuClock::now(None);
        progress(format!(
            "{name}: {requests} join requests released together"
        ));
        let answers = round(&url, &secret, first_user, requests).await?;
        let clock = common::CpuClock::now(None).since(&clock_before);
        let db_cpu = backends_cpu(&client).await.saturating_sub(db_before);
        let calls = fake.counts().since(&calls_before);
        let mut latencies = Vec::new();
        let mut queued = 0;
        let wall = answers
            .values()
            .map(|(took, _)| *took)
            .max()
            .unwrap_or_default();
        for (user, (took, body)) in answers {
            latencies.push(took);
            queued += usize::from(body["result"] == "queue");
            replies.insert(user, body);
        }
        rounds.push(Round {
            name,
            latencies: Latencies::new(latencies),
            queued,
            server_cpu: cpu_time(server.pid()).saturating_sub(cpu_before),
            db_cpu,
            own_cpu: clock.own,
            machine_cpu: clock.machine,
            wall,
            calls: calls.by_method(),
            refused: calls.refused,
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    server.stop().await;
    let errors = std::fs::read_to_string(&log)
        .map_err(|e| e.to_string())?
        .lines()
        .filter(|l| l.contains(r#""level":"ERROR""#))
        .count();
    if errors > 0 {
        return Err(format!("{errors} errors in {}", log.display()));
    }
    check(&client, channel, &replies, users).await?;
    Ok(rounds)
}

/// CPU time the PostgreSQL backends serving this database used so far (the benchmark's own
/// connection aside).
async fn backends_cpu(client: &tokio_postgres::Client) -> Duration {
    let pids = client
        .query(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .map(|rows| rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>())
        .unwrap_or_default();
    pids.iter().map(|pid| cpu_time(*pid as u32)).sum()
}

/// Users `first_user..first_user + n` ask together; returns each one's time from the release to
/// the answer, and the answer.
async fn round(
    url: &str,
    secret: &str,
    first_user: i64,
    n: usize,
) -> Result<HashMap<i64, (Duration, Value)>, String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let gate = Arc::new(Barrier::new(n + 1));
    let released = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut tasks = Vec::with_capacity(n);
    for user in first_user..first_user + n as i64 {
        let body = join_request(user - FIRST_USER, user, &format!("door-bench-{user}"));
        let (http, gate, released) = (http.clone(), gate.clone(), released.clone());
        let (url, secret) = (url.to_string(), secret.to_string());
        tasks.push(tokio::spawn(async move {
            gate.wait().await;
            let response = http
                .post(&url)
                .header("content-type", "application/json")
                .header(SECRET_HEADER, secret)
                .body(body)
                .send()
                .await
                .map_err(|e| format!("user {user}: {e}"))?;
            let status = response.status().as_u16();
            let text = response
                .text()
                .await
                .map_err(|e| format!("user {user}: {e}"))?;
            let took = released.get().map(Instant::elapsed).unwrap_or_default();
            if status != 200 {
                return Err(format!("user {user}: HTTP {status} {text}"));
            }
            let body: Value =
                serde_json::from_str(&text).map_err(|e| format!("user {user}: {e}: {text}"))?;
            Ok::<_, String>((user, (took, body)))
        }));
    }
    // Every task waits at the gate; the clock starts as they are let through (on this one
    // thread, none of them runs before this task's next await).
    gate.wait().await;
    let _ = released.set(Instant::now());
    let mut answers = HashMap::with_capacity(n);
    for task in tasks {
        let (user, answer) = task.await.map_err(|e| e.to_string())??;
        answers.insert(user, answer);
    }
    Ok(answers)
}

/// Each answer against its row: one row per query, members approved, anyone else shown the Mini
/// App with their row's reference (or `queue`d, counted in the report, their row `queue`).
async fn check(
    client: &tokio_postgres::Client,
    channel: i32,
    replies: &HashMap<i64, Value>,
    users: i64,
) -> Result<(), String> {
    let rows = client
        .query(
            "SELECT user_id, query_id, reference, answer, state FROM join_requests",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    if rows.len() as i64 != users || replies.len() as i64 != users {
        return Err(format!(
            "{users} queries: {} answered, {} rows",
            replies.len(),
            rows.len()
        ));
    }
    let mut problems = Vec::new();
    for r in &rows {
        let (user, query): (i64, String) = (r.get("user_id"), r.get("query_id"));
        let (reference, answer, state): (String, String, String) =
            (r.get("reference"), r.get("answer"), r.get("state"));
        let Some(reply) = replies.get(&user) else {
            problems.push(format!("a row for user {user}, who did not ask"));
            continue;
        };
        let expected = if reply["result"] == "queue" {
            json!({"method": "answerChatJoinRequestQuery",
                   "chat_join_request_query_id": query, "result": "queue"})
        } else if (user - FIRST_USER) % MEMBER_EVERY == 0 {
            json!({"method": "answerChatJoinRequestQuery",
                   "chat_join_request_query_id": query, "result": "approve"})
        } else {
            json!({"method": "sendChatJoinRequestWebApp", "chat_join_request_query_id": query,
                   "web_app_url": format!("{PUBLIC_URL}/app/?c={channel}&r={reference}")})
        };
        let row_ok = match (
            reply["result"].as_str(),
            (user - FIRST_USER) % MEMBER_EVERY == 0,
        ) {
            (Some("queue"), _) => answer == "queue" && state == "waiting",
            (_, true) => answer == "approve" && state == "approved",
            (_, false) => answer == "web_app" && state == "waiting",
        };
        if *reply != expected || !row_ok {
            problems.push(format!(
                "user {user}: answered {reply}, row {answer} {state}"
            ));
        }
    }
    if !problems.is_empty() {
        let n = problems.len();
        problems.truncate(5);
        return Err(format!("{n} wrong answers: {}", problems.join("; ")));
    }
    progress(format!(
        "rows: one per query ({users}), members approved, everyone else at the Mini App with \
         their row's reference"
    ));
    Ok(())
}

fn report(requests: usize, rounds: &[Round]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "## The door: {requests} join request queries released together, a Mini App chat, \
         one in {MEMBER_EVERY} a member"
    );
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "| round | answered | p50 ms | p99 ms | max ms | queue | CPU ms: server, PostgreSQL, load generator, machine (of 2 × wall) | Bot API calls (429s) | p99 < 1 s |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---|---|---|");
    for r in rounds {
        let p99 = r.latencies.q(0.99);
        let _ = writeln!(
            t,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {:.0}, {:.0}, {:.0}, {:.0} (of {:.0}) | {} ({}) | {} |",
            r.name,
            r.latencies.len(),
            r.latencies.q(0.5),
            p99,
            r.latencies.q(1.0),
            r.queued,
            r.server_cpu.as_secs_f64() * 1e3,
            r.db_cpu.as_secs_f64() * 1e3,
            r.own_cpu.as_secs_f64() * 1e3,
            r.machine_cpu.as_secs_f64() * 1e3,
            2.0 * r.wall.as_secs_f64() * 1e3,
            if r.calls.is_empty() { "none" } else { &r.calls },
            r.refused,
            if p99 < GOAL_P99_MS { "yes" } else { "**no**" }
        );
    }
    t
}
