//! `make bench`: bot storms — buyers writing to the bot at Telegram's maximum of 100 webhook
//! connections, through the real server.
//!
//! On a fresh database of its own (`--channels` Stars channels made by SQL, each with its
//! default plan, as staff would make them, and a history of `--history` past buyers with a paid
//! order, a live membership and three old updates each, analyzed), it starts the `subgate` binary of this build
//! (`cargo bench`: the release profile) with a bot token, the webhook secret and
//! `TELEGRAM_DRY_RUN=true` (the effects worker runs as in production and logs its Bot API calls
//! instead of making them), and drives `POST /api/webhook/telegram` with the load generator of
//! the payment benchmark (`payments/http.rs`: HTTP/1.1 keep-alive connections, one update in
//! flight each, updates made before the clock starts), each update with its own `update_id`:
//!
//! 1. a warm-up of one second (`/start` from buyers of its own);
//! 2. the `/start` storm: `/start` from a new buyer each, at `--connections` (100) for
//!    `--duration` (10 s); each is answered with the catalogue (`sendMessage` in the reply);
//! 3. the buy storm: the same buyers press a channel's buy button (`b:<channel>`, the channels
//!    in turn), `--presses` times each (default 1: distinct buyers; more puts a buyer's presses
//!    side by side, in flight together), for `--duration`; each is answered with
//!    `answerCallbackQuery`, and makes (or reuses) the buyer's order and its invoice effect;
//! 4. re-deliveries: the first `--redeliveries` (1,000) buy presses delivered again, as
//!    Telegram does after a lost answer.
//!
//! Then the rows: every buyer whose press was answered has exactly one order, pending, with
//! one invoice effect; the re-deliveries changed nothing; one `bot_updates` record per buy press
//! (a `/start` writes nothing and need not be recorded); no error in the server's log. It prints updates/s, p50 and p99 of each storm against the
//! goals (`/start` p99 ≤ 50 ms; buy presses ≥ 500/s with p99 ≤ 100 ms), and leaves them in
//! `$SUBGATE_BENCH_RESULTS/bot_storm.tsv`. Exits non-zero when a request failed or a row check
//! did not hold (a missed goal is reported, not a failure: the machine may be busy).
//!
//! Environment: `SUBGATE_TEST_DATABASE_URL` (admin URL), `SUBGATE_BENCH_RUN` (a tag for the
//! database's name), `SUBGATE_BENCH_PIDFILE`, `SUBGATE_BENCH_RESULTS`, as the payment benchmark;
//! `BOT_BENCH_DB_POOL_SIZE` (the server's `DB_POOL_SIZE`; unset: its default),
//! `BOT_BENCH_SERVER` (another `subgate` binary to run, e.g. an older build to compare with;
//! unset: this build's). `--help` lists the options.

#[path = "common/mod.rs"]
mod common;
// The payment benchmark's load generator and server runner; this one uses part of each.
#[allow(dead_code)]
#[path = "payments/http.rs"]
mod http;
#[allow(dead_code)]
#[path = "payments/server.rs"]
mod server;

pub use common::record_pid;
use common::{cpu_time, random_hex, url_for};

use std::{fmt::Write as _, path::PathBuf, sync::Arc, time::Duration};

use deadpool_postgres::Pool;

use crate::{
    http::{Load, Pick, Signed},
    server::{Server, ServerEnv},
};

const PATH: &str = "/api/webhook/telegram";
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
/// Updates made per second of a storm: above what this machine reaches, so none runs out (one
/// that does says so).
const STARTS_PER_SEC: i64 = 5_000;
const PRESSES_PER_SEC: i64 = 3_000;
/// Buyers of the warm-up: Telegram user ids from here (the storms' buyers are 1, 2, …).
const WARMUP_BUYERS: i64 = 1_000_000_000;
/// Buyers of the history made before the storms: Telegram user ids from here.
const PAST_BUYERS: i64 = 2_000_000_000;
/// Updates of that history: update ids from here.
const PAST_UPDATES: i64 = 1_000_000_000_000;

const USAGE: &str = "\
benches/bot_storm: /start and buy-button storms through the Telegram webhook (docs/benchmarks.md)

Options:
  --connections N    webhook connections (default 100, Telegram's maximum)
  --duration S       seconds of each storm (default 10)
  --channels N       Stars channels in the catalogue (default 5)
  --presses N        buy presses per buyer (default 1: distinct buyers)
  --redeliveries N   buy presses delivered again after the storm (default 1000)
  --history N        past buyers in the database before the storms, each with a paid order
                     and a live membership, and 3 bot updates each (default 50000)
";

struct Options {
    connections: usize,
    duration: Duration,
    channels: i64,
    presses: i64,
    redeliveries: usize,
    history: i64,
}

fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        connections: 100,
        duration: Duration::from_secs(10),
        channels: 5,
        presses: 1,
        redeliveries: 1_000,
        history: 50_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            print!("{USAGE}");
            return Ok(None);
        }
        if arg == "--bench" {
            continue; // cargo bench passes it to every harness-less bench
        }
        if !arg.starts_with("--") {
            // `cargo bench NAME` passes NAME to every bench; honour one that is not us.
            if "bot_storm".contains(arg.as_str()) {
                continue;
            }
            return Ok(None);
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{arg}: {value} is not a whole number"))?;
        if n == 0 {
            return Err(format!("{arg} must be at least 1"));
        }
        match arg.as_str() {
            "--connections" => o.connections = n as usize,
            "--duration" if n <= 300 => o.duration = Duration::from_secs(n),
            "--channels" if n <= 100 => o.channels = n as i64,
            "--presses" if n <= 10 => o.presses = n as i64,
            "--redeliveries" => o.redeliveries = n as usize,
            "--history" if n <= 10_000_000 => o.history = n as i64,
            _ => {
                return Err(format!(
                    "unknown option or value out of range: {arg} {value}\n\n{USAGE}"
                ));
            }
        }
    }
    Ok(Some(o))
}

fn main() {
    common::main_with("benches/bot_storm", parse_args(), run);
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[bot-bench] {message}");
}

async fn run(o: Options) -> Result<(), String> {
    let admin = common::connect_admin().await?;
    let name = format!("subgate_bench_bot_{}", common::run_tag());
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .map_err(|e| e.to_string())?;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
    let database_url = url_for(&name);
    let pool = subgate::db::pool(&database_url, 2).map_err(|e| e.to_string())?;
    let outcome = measure(&o, &pool, &database_url).await;
    pool.close();
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await;
    let figures = outcome?;
    let table = report(&o, &figures);
    println!("\n{table}");
    if let Some(dir) = std::env::var_os("SUBGATE_BENCH_RESULTS").filter(|p| !p.is_empty()) {
        let dir = PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        let tsv: String = figures
            .tsv()
            .iter()
            .map(|(k, v)| format!("{k}\t{v}\n"))
            .collect();
        let _ = std::fs::write(dir.join("bot_storm.tsv"), tsv);
    }
    Ok(())
}

/// A Telegram user, as updates carry them.
fn person(id: i64) -> String {
    format!(
        r#"{{"id":{id},"is_bot":false,"first_name":"Buyer","last_name":"{id}","username":"buyer{id}","language_code":"en"}}"#
    )
}

/// `/start` from user `user` as update `update_id`.
fn start_update(update_id: i64, user: i64) -> String {
    format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":{update_id},"date":{date},"chat":{{"id":{user},"type":"private","first_name":"Buyer"}},"from":{from},"text":"/start"}}}}"#,
        date = chrono::Utc::now().timestamp(),
        from = person(user)
    )
}

/// User `user` pressing the buy button of channel `channel` as update `update_id`.
fn press_update(update_id: i64, user: i64, channel: i64) -> String {
    format!(
        r#"{{"update_id":{update_id},"callback_query":{{"id":"cq{update_id}","from":{from},"chat_instance":"ci{user}","message":{{"message_id":1,"date":0,"chat":{{"id":{user},"type":"private"}}}},"data":"b:{channel}"}}}}"#,
        from = person(user)
    )
}

fn update(secret: &str, body: String) -> Signed {
    Signed::new(vec![(SECRET_HEADER, secret.to_string())], body)
}

/// What the run measured.
struct Figures {
    starts: Load,
    presses: Load,
    redeliveries: Load,
    buyers: i64,
    orders: i64,
    errors_logged: i64,
    /// The server's CPU time during the `/start` storm and the buy storm.
    server_cpu: [Duration; 2],
    /// The CPU time of PostgreSQL's backends serving the benchmark's database, the same.
    db_cpu: [Duration; 2],
}

impl Figures {
    fn tsv(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (what, l) in [("start", &self.starts), ("buy", &self.presses)] {
            out.push((format!("bot_{what}_rate"), format!("{:.1}", l.rate())));
            out.push((format!("bot_{what}_p50_ms"), format!("{:.2}", p(l, 0.50))));
            out.push((format!("bot_{what}_p99_ms"), format!("{:.2}", p(l, 0.99))));
        }
        for (i, (what, l)) in [("start", &self.starts), ("buy", &self.presses)]
            .into_iter()
            .enumerate()
        {
            for (whose, cpu) in [("server", self.server_cpu[i]), ("db", self.db_cpu[i])] {
                out.push((
                    format!("bot_{what}_{whose}_cpu_us"),
                    format!("{:.0}", cpu.as_secs_f64() * 1e6 / l.ok.max(1) as f64),
                ));
            }
        }
        out.push(("bot_orders".into(), self.orders.to_string()));
        out
    }
}

/// The `q` quantile (nearest rank) of a run's latencies, in milliseconds.
fn p(load: &Load, q: f64) -> f64 {
    let n = load.latencies_us.len();
    if n == 0 {
        return f64::NAN;
    }
    load.latencies_us[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3
}

async fn measure(o: &Options, pool: &Pool, database_url: &str) -> Result<Figures, String> {
    subgate::db::migrate(pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .batch_execute(&format!(
            "INSERT INTO channels (telegram_chat_id, title, description, price_minor, currency,
                                   billing_period_days)
             SELECT -1000 - g, 'Storm channel ' || g, 'Signals every day, number ' || g, 250,
                    'XTR', 30
             FROM generate_series(1, {channels}) g;
             INSERT INTO subscribers (telegram_user_id, username, display_name, language)
             SELECT {PAST_BUYERS} + g, 'past' || g, 'Past buyer ' || g, 'en'
             FROM generate_series(1, {history}) g;
             INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor,
                                 list_price_minor, currency, status, paid_at, via_bot, created_at)
             SELECT 'past-' || s.id, s.id, s.id % {channels} + 1, 250, 250, 'XTR', 'paid',
                    now() - interval '10 days', true, now() - interval '10 days'
             FROM subscribers s;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT s.id, s.id % {channels} + 1, 'active', now() + interval '20 days'
             FROM subscribers s;
             INSERT INTO bot_updates (update_id, reply, created_at)
             SELECT {PAST_UPDATES} + g, '{{}}', now() - interval '1 hour'
             FROM generate_series(1, 3 * {history}) g",
            channels = o.channels,
            history = o.history,
        ))
        .await
        .map_err(|e| format!("channels and history: {e}"))?;
    client
        .batch_execute("VACUUM ANALYZE")
        .await
        .map_err(|e| format!("vacuum: {e}"))?;

    let log = common::server_log("bot-server.log")?;
    let secret = random_hex(24);
    let mut extra = vec![
        ("TELEGRAM_WEBHOOK_SECRET", secret.clone()),
        (
            "TELEGRAM_BOT_TOKEN",
            "123456:bench-token-not-used-in-dry-run".to_string(),
        ),
        ("TELEGRAM_BOT_USERNAME", "storm_bench_bot".to_string()),
        ("TELEGRAM_DRY_RUN", "true".to_string()),
    ];
    if let Ok(size) = std::env::var("BOT_BENCH_DB_POOL_SIZE") {
        extra.push(("DB_POOL_SIZE", size));
    }
    let server_bin = std::env::var("BOT_BENCH_SERVER")
        .ok()
        .filter(|b| !b.is_empty());
    if let Some(bin) = &server_bin {
        progress(format!("server binary: {bin} (BOT_BENCH_SERVER)"));
    }
    let env = ServerEnv {
        database_url,
        ca_cert: None,
        webhook_secret: &format!(
            "whsec_{}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32])
        ),
        jwt_secret: &random_hex(32),
        extra: &extra,
        bin: server_bin.as_deref(),
    };
    let server = Server::start(&env, &log).await?;
    progress(format!(
        "server pid {} on {} (log: {})",
        server.pid(),
        server.addr,
        log.display()
    ));
    let addr = server.addr;
    let d = o.duration.as_secs() as i64;
    let mut update_id = 0i64;
    let mut next_update = || {
        update_id += 1;
        update_id
    };

    let warmup: Vec<_> = (0..STARTS_PER_SEC)
        .map(|i| update(&secret, start_update(next_update(), WARMUP_BUYERS + i)))
        .collect();
    let warm = http::run(
        addr,
        PATH,
        o.connections,
        Duration::from_secs(1),
        Arc::new(warmup),
        Pick::EachOnce,
        "sendMessage",
    )
    .await;
    check("warm-up", &warm, true)?;

    let buyers = STARTS_PER_SEC * d;
    let starts: Vec<_> = (1..=buyers)
        .map(|user| update(&secret, start_update(next_update(), user)))
        .collect();
    progress(format!(
        "/start storm: {} connections, {} s",
        o.connections, d
    ));
    let db_name = client
        .query_one("SELECT current_database()", &[])
        .await
        .map_err(|e| e.to_string())?
        .get::<_, String>(0);
    let cpu_before = cpu_time(server.pid());
    let db_before = backends_cpu(&client, &db_name).await;
    let start_load = http::run(
        addr,
        PATH,
        o.connections,
        o.duration,
        Arc::new(starts),
        Pick::EachOnce,
        "sendMessage",
    )
    .await;
    check("/start storm", &start_load, false)?;
    let cpu_after_starts = cpu_time(server.pid());
    let db_after_starts = backends_cpu(&client, &db_name).await;

    let last_start = next_update();
    // Buyer n presses its channel's button `presses` times in a row (so side by side, in flight
    // together, when there are several).
    let press_buyers = PRESSES_PER_SEC * d / o.presses;
    let presses: Vec<_> = (1..=press_buyers)
        .flat_map(|user| (0..o.presses).map(move |_| user))
        .map(|user| {
            let channel = (user - 1) % o.channels + 1;
            (next_update(), user, channel)
        })
        .collect();
    let press_bodies: Vec<_> = presses
        .iter()
        .map(|&(id, user, channel)| update(&secret, press_update(id, user, channel)))
        .collect();
    progress(format!("buy storm: {} connections, {} s", o.connections, d));
    let press_load = http::run(
        addr,
        PATH,
        o.connections,
        o.duration,
        Arc::new(press_bodies),
        Pick::EachOnce,
        "answerCallbackQuery",
    )
    .await;
    check("buy storm", &press_load, false)?;
    let server_cpu = [
        cpu_after_starts.saturating_sub(cpu_before),
        cpu_time(server.pid()).saturating_sub(cpu_after_starts),
    ];
    let db_cpu = [
        db_after_starts.saturating_sub(db_before),
        backends_cpu(&client, &db_name)
            .await
            .saturating_sub(db_after_starts),
    ];
    // Each buyer whose press was sent has its order (presses go out in order, a buyer's
    // together; the last buyer may have been cut off mid-way, which still pressed once).
    let sent = press_load.ok as i64;
    let buyers_pressed = (sent + o.presses - 1) / o.presses;

    let (orders, effects_before) = counts(&client).await?;
    progress(format!(
        "re-delivering {} buy presses",
        o.redeliveries.min(sent as usize)
    ));
    let again: Vec<_> = presses
        .iter()
        .take(o.redeliveries.min(sent as usize))
        .map(|&(id, user, channel)| update(&secret, press_update(id, user, channel)))
        .collect();
    let redeliveries = http::run(
        addr,
        PATH,
        o.connections,
        Duration::from_secs(60),
        Arc::new(again),
        Pick::EachOnce,
        "answerCallbackQuery",
    )
    .await;
    check("re-deliveries", &redeliveries, true)?;
    server.stop().await;

    // The rows.
    let (orders_after, effects_after) = counts(&client).await?;
    let row = client
        .query_one(
            "SELECT
                 (SELECT count(*) FROM subscribers WHERE telegram_user_id < $2) AS buyers,
                 (SELECT count(*) FROM (SELECT subscriber_id FROM orders
                                        WHERE reference NOT LIKE 'past-%'
                                        GROUP BY subscriber_id HAVING count(*) <> 1) x) AS not_one,
                 (SELECT count(*) FROM orders
                  WHERE reference NOT LIKE 'past-%' AND (status <> 'pending' OR NOT via_bot))
                     AS odd,
                 (SELECT count(*) FROM orders o WHERE o.reference NOT LIKE 'past-%'
                     AND (SELECT count(*) FROM effects e
                     WHERE e.order_id = o.id AND e.kind = 'invoice') <> 1) AS not_invoiced,
                 (SELECT count(*) FROM bot_updates
                  WHERE update_id > $1 AND update_id < $3) AS updates",
            &[&last_start, &PAST_BUYERS, &PAST_UPDATES],
        )
        .await
        .map_err(|e| e.to_string())?;
    let (subscribers, not_one, odd, not_invoiced, recorded): (i64, i64, i64, i64, i64) = (
        row.get("buyers"),
        row.get("not_one"),
        row.get("odd"),
        row.get("not_invoiced"),
        row.get("updates"),
    );
    let answered = press_load.ok as i64;
    let errors_logged = std::fs::read_to_string(&log)
        .map(|s| {
            s.lines()
                .filter(|l| l.contains(r#""level":"ERROR""#))
                .count() as i64
        })
        .unwrap_or(-1);
    let mut problems = Vec::new();
    if orders != buyers_pressed || subscribers != buyers_pressed {
        problems.push(format!(
            "{buyers_pressed} buyers pressed; {subscribers} subscribers, {orders} orders"
        ));
    }
    if not_one + odd + not_invoiced > 0 {
        problems.push(format!(
            "{not_one} buyers without exactly one order, {odd} orders not pending from the bot, \
             {not_invoiced} orders without exactly one invoice effect"
        ));
    }
    if (orders_after, effects_after) != (orders, effects_before) {
        problems.push(format!(
            "re-deliveries changed rows: orders {orders} → {orders_after}, effects \
             {effects_before} → {effects_after}"
        ));
    }
    if recorded != answered {
        problems.push(format!(
            "{answered} buy presses answered, {recorded} recorded"
        ));
    }
    if errors_logged != 0 {
        problems.push(format!("{errors_logged} errors in {}", log.display()));
    }
    if !problems.is_empty() {
        return Err(format!("row checks failed: {}", problems.join("; ")));
    }
    progress(format!(
        "rows: {buyers_pressed} buyers, exactly one order and one invoice each; re-deliveries \
         changed nothing; no errors logged"
    ));
    Ok(Figures {
        starts: start_load,
        presses: press_load,
        redeliveries,
        buyers: buyers_pressed,
        orders,
        errors_logged,
        server_cpu,
        db_cpu,
    })
}

/// CPU time the PostgreSQL backends serving database `name` used so far.
async fn backends_cpu(client: &tokio_postgres::Client, name: &str) -> Duration {
    let pids = client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .map(|rows| rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>())
        .unwrap_or_default();
    pids.iter().map(|pid| cpu_time(*pid as u32)).sum()
}

async fn counts(client: &tokio_postgres::Client) -> Result<(i64, i64), String> {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM orders WHERE reference NOT LIKE 'past-%') AS orders,
                    (SELECT count(*) FROM effects) AS effects",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((row.get("orders"), row.get("effects")))
}

/// A storm must have been answered entirely: an error is a bug or a broken set-up. A storm that
/// ran out of updates says so (`runs_out`: it is meant to).
fn check(what: &str, load: &Load, runs_out: bool) -> Result<(), String> {
    if load.errors > 0 || load.ok == 0 {
        return Err(format!(
            "{what}: {} of {} updates failed; first: {}",
            load.errors,
            load.errors + load.ok,
            load.first_error.as_deref().unwrap_or("none")
        ));
    }
    if load.exhausted && !runs_out {
        progress(format!(
            "{what}: ran out of updates after {} in {:.1} s",
            load.ok,
            load.elapsed.as_secs_f64()
        ));
    }
    Ok(())
}

fn report(o: &Options, f: &Figures) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "## Bot storms: {} webhook connections, {} s each, {} channels, {} press(es) per buyer",
        o.connections,
        o.duration.as_secs(),
        o.channels,
        o.presses
    );
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "| storm | updates | updates/s | p50 ms | p99 ms | CPU µs/update: server, PostgreSQL | goal | met |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---|---|");
    let row = |t: &mut String,
               what: &str,
               l: &Load,
               cpu: Option<(Duration, Duration)>,
               goal: &str,
               met: Option<bool>| {
        let _ = writeln!(
            t,
            "| {what} | {} | {:.0} | {:.1} | {:.1} | {} | {goal} | {} |",
            l.ok,
            l.rate(),
            p(l, 0.50),
            p(l, 0.99),
            cpu.map_or(String::new(), |(server, db)| format!(
                "{:.0}, {:.0}",
                server.as_secs_f64() * 1e6 / l.ok.max(1) as f64,
                db.as_secs_f64() * 1e6 / l.ok.max(1) as f64
            )),
            match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            }
        );
    };
    row(
        &mut t,
        "`/start`",
        &f.starts,
        Some((f.server_cpu[0], f.db_cpu[0])),
        "p99 ≤ 50 ms",
        Some(p(&f.starts, 0.99) <= 50.0),
    );
    row(
        &mut t,
        "buy press",
        &f.presses,
        Some((f.server_cpu[1], f.db_cpu[1])),
        "≥ 500/s, p99 ≤ 100 ms",
        Some(f.presses.rate() >= 500.0 && p(&f.presses, 0.99) <= 100.0),
    );
    row(
        &mut t,
        "re-delivered press",
        &f.redeliveries,
        None,
        "",
        None,
    );
    let _ = writeln!(
        t,
        "\n{} buyers pressed: {} orders, exactly one (with one invoice) each; re-deliveries \
         changed nothing; {} errors logged.",
        f.buyers, f.orders, f.errors_logged
    );
    t
}
