//! `make bench`: the payment path measured end to end, next to references run in the same run on
//! the same PostgreSQL, and the ratios between them.
//!
//! On a fresh database of its own (pending orders created in bulk by SQL, each for its own
//! subscriber and channel pair), it starts the real server — the `subgate` binary of this build
//! (`cargo bench`: the release profile) with door 1's secret set — and drives it with the load
//! generator in [`http`]: Standard Webhooks deliveries signed before the clock starts, over
//! keep-alive connections:
//!
//! 1. new payments, each paying its own pending order, at `--connections` (16) for
//!    `--duration` (15 s), after a one-second warm-up;
//! 2. the same at one connection for `--latency-duration` (5 s): latency without queueing;
//! 3. re-deliveries of one stored payment at `--redelivery-connections` (10) for `--duration`;
//! 4. the server's resident memory with `--idle-connections` (1,000) idle keep-alive connections
//!    open, and its start-to-ready time (spawn → first 200 from `/readyz`, `--starts` times).
//!
//! Then, with the server stopped, the references on the same database ([`replay`]): the
//! service's own payment transaction as it stood when the goal was set, statement for statement
//! (`payment_tx.sql`; the service now does the same work in fewer statements), and a minimal
//! six-statement payment transaction (`payment_minimal.sql`), both with prepared statements by
//! pgbench (`-M prepared`, one thread) where it is installed, else by the same statements from
//! Rust. The rows written are checked after the HTTP runs: one applied payment, membership and
//! grant effect per successful new payment, nothing for a re-delivery.
//!
//! It prints a table of the figures and the ratios the payment-path goals are stated in, with
//! the sweep's rows from `benches/sweep.rs` when `scripts/bench.sh` ran it first (it leaves its
//! figures in `$SUBGATE_BENCH_RESULTS/sweep.tsv`), and leaves its own in `payments.tsv` there.
//! The figures are only as steady as the machine: server, load generator and PostgreSQL share
//! its cores with whatever else runs.
//!
//! A plain `harness = false` main: `cargo test` neither builds nor runs it. Environment:
//! `SUBGATE_TEST_DATABASE_URL` (admin URL; default `postgres://postgres@127.0.0.1:5432/postgres`),
//! `SUBGATE_BENCH_RUN` (a tag for this run's database name), `SUBGATE_BENCH_PIDFILE` (every
//! process it starts is listed there, so `scripts/bench.sh` can stop them if interrupted),
//! `SUBGATE_BENCH_RESULTS` (where the figures are left). `--help` lists the options.

#[path = "../common/mod.rs"]
mod common;
pub use common::record_pid;
use common::{random_hex, url_for};

mod http;
mod replay;
mod server;

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use deadpool_postgres::Pool;
use subgate::{db, payments::standard_webhooks::WebhookKey};

use crate::{
    http::{Load, Pick},
    replay::{Replay, Runner},
    server::{Server, ServerEnv},
};

/// Channels of the benchmark data; order `n` is for subscriber `(n - 1) / 10 + 1` and channel
/// `(n - 1) % 10 + 1` (the pgbench scripts rely on this layout).
const CHANNELS: i64 = 10;

/// Orders set aside per second of each phase: well above what this machine reaches, so no
/// phase runs out (one that does says so).
const HTTP_ORDERS_PER_SEC: i64 = 6_000;
const LATENCY_ORDERS_PER_SEC: i64 = 2_000;
const REPLAY_ORDERS_PER_SEC: i64 = 8_000;
const MINIMAL_ORDERS_PER_SEC: i64 = 12_000;

/// The door's timestamp tolerance is 300 s and each phase's requests are signed when it starts.
const MAX_DURATION_SECS: u64 = 240;

const USAGE: &str = "\
benches/payments: the payment path against references, in one run (see docs/benchmarks.md)

usage: cargo bench --bench payments -- [options]      (make bench ARGS='[options]')
  --connections N             connections for new payments and the references (default 16)
  --duration SECONDS          each throughput run (default 15, at most 240)
  --latency-duration SECONDS  the one-connection latency runs (default 5)
  --redelivery-connections N  connections re-delivering one stored payment (default 10)
  --idle-connections N        idle connections held open for the memory figure (default 1000)
  --starts N                  server starts timed for start-to-ready (default 3)
  --replay pgbench|rust       who runs the reference scripts (default: pgbench if installed)";

struct Options {
    connections: usize,
    duration: Duration,
    latency_duration: Duration,
    redelivery_connections: usize,
    idle_connections: usize,
    starts: usize,
    replay: Option<String>,
}

/// `None`: nothing to do (`--help`, or a `cargo bench` name filter that is not this bench).
fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        connections: 16,
        duration: Duration::from_secs(15),
        latency_duration: Duration::from_secs(5),
        redelivery_connections: 10,
        idle_connections: 1000,
        starts: 3,
        replay: None,
    };
    let mut args = std::env::args().skip(1);
    let mut filters = Vec::new();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| -> Result<u64, String> {
            v.replace('_', "")
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} must be a positive integer, got {v:?}"))
        };
        match flag.as_str() {
            "--bench" => {}
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--connections" => o.connections = number(value()?)? as usize,
            "--duration" => o.duration = Duration::from_secs(number(value()?)?),
            "--latency-duration" => o.latency_duration = Duration::from_secs(number(value()?)?),
            "--redelivery-connections" => o.redelivery_connections = number(value()?)? as usize,
            "--idle-connections" => o.idle_connections = number(value()?)? as usize,
            "--starts" => o.starts = number(value()?)? as usize,
            "--replay" => match value()?.as_str() {
                v @ ("pgbench" | "rust") => o.replay = Some(v.to_string()),
                v => return Err(format!("--replay is pgbench or rust, got {v:?}")),
            },
            f if f.starts_with('-') => return Err(format!("unknown option {f}\n\n{USAGE}")),
            _ => filters.push(arg),
        }
    }
    // `cargo bench NAME` passes NAME to every bench; honour one that is not us.
    if !filters.is_empty() && !filters.iter().any(|f| "payments".contains(f.as_str())) {
        return Ok(None);
    }
    for d in [o.duration, o.latency_duration] {
        if d.as_secs() > MAX_DURATION_SECS {
            return Err(format!(
                "a run may last at most {MAX_DURATION_SECS} s (requests are signed when it starts)"
            ));
        }
    }
    Ok(Some(o))
}

fn main() {
    common::main_with("benches/payments", parse_args(), run);
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[bench] {message}");
}

async fn run(o: Options) -> Result<(), String> {
    let admin = common::connect_admin().await?;
    let machine = Machine::read(&admin).await?;

    // Databases an interrupted run left behind; one in use (another run's) refuses to go.
    let stale = admin
        .query(
            r"SELECT datname FROM pg_database WHERE datname LIKE 'subgate\_bench\_pay\_%'",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    for row in stale {
        let name: String = row.get(0);
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\""))
            .await;
    }
    let name = format!("subgate_bench_pay_{}", common::run_tag());
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
    let database_url = url_for(&name);
    let pool = db::pool(&database_url, 2).map_err(|e| e.to_string())?;
    let outcome = measure(&o, &pool, &database_url).await;
    pool.close();
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await;
    let figures = outcome?;
    let results = std::env::var_os("SUBGATE_BENCH_RESULTS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let sweep = results
        .as_deref()
        .map(|dir| read_tsv(&dir.join("sweep.tsv")))
        .unwrap_or_default();
    let table = report(&o, &machine, &figures, &sweep);
    println!("\n{table}");
    if let Some(dir) = results {
        let _ = std::fs::create_dir_all(&dir);
        write_tsv(&dir.join("payments.tsv"), &figures.tsv());
        let _ = std::fs::write(dir.join("summary.md"), &table);
    }
    Ok(())
}

/// Which orders each phase pays: consecutive ranges of order ids.
struct Plan {
    warmup: std::ops::Range<i64>,
    http: std::ops::Range<i64>,
    latency: std::ops::Range<i64>,
    redelivery: i64,
    replay: i64,
    replay_latency: i64,
    minimal: i64,
    total: i64,
}

impl Plan {
    fn new(o: &Options) -> Plan {
        let (d, l) = (
            o.duration.as_secs() as i64,
            o.latency_duration.as_secs() as i64,
        );
        let mut next = 1;
        let mut take = |n: i64| {
            let r = next..next + n;
            next += n;
            r
        };
        let warmup = take(HTTP_ORDERS_PER_SEC);
        let http = take(HTTP_ORDERS_PER_SEC * d);
        let latency = take(LATENCY_ORDERS_PER_SEC * l);
        let redelivery = take(1).start;
        let replay = take(REPLAY_ORDERS_PER_SEC * d).start;
        let replay_latency = take(LATENCY_ORDERS_PER_SEC * l).start;
        let minimal = take(MINIMAL_ORDERS_PER_SEC * d).start;
        let total = next - 1;
        Plan {
            warmup,
            http,
            latency,
            redelivery,
            replay,
            replay_latency,
            minimal,
            total,
        }
    }
}

/// Ten unlimited channels (30-day period, 199.00 UAH), `total / 10` subscribers and `total`
/// pending orders laid out as [`CHANNELS`] says, with order `n`'s reference `n`.
async fn populate(pool: &Pool, total: i64) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let subscribers = (total + CHANNELS - 1) / CHANNELS;
    client
        .batch_execute(&format!(
            "INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days)
             SELECT -1000 - g, 'bench ' || g, {amount}, 'UAH', 30 FROM generate_series(1, {CHANNELS}) g;
             INSERT INTO subscribers (telegram_user_id) SELECT g FROM generate_series(1, {subscribers}) g;
             INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
             SELECT g::text, (g - 1) / {CHANNELS} + 1, (g - 1) % {CHANNELS} + 1, {amount}, 'UAH'
             FROM generate_series(1, {total}) g;",
            amount = http::AMOUNT_MINOR
        ))
        .await
        .map_err(|e| format!("populate: {e}"))?;
    client
        .batch_execute("VACUUM ANALYZE channels, subscribers, orders")
        .await
        .map_err(|e| format!("vacuum: {e}"))?;
    // The scripts compute the pair from the order id: check the ids came out as planned.
    let laid_out: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM orders o
                 JOIN subscribers s ON s.id = o.subscriber_id AND s.telegram_user_id = s.id
                 JOIN channels c ON c.id = o.channel_id AND c.telegram_chat_id = -1000 - c.id
                 WHERE o.reference = o.id::text
                   AND o.subscriber_id = (o.id - 1) / {CHANNELS} + 1
                   AND o.channel_id = (o.id - 1) % {CHANNELS} + 1"
            ),
            &[],
        )
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    if laid_out != total {
        return Err(format!(
            "only {laid_out} of {total} orders have the planned ids"
        ));
    }
    Ok(())
}

/// Everything one run measured.
struct Figures {
    orders: i64,
    ready: Vec<Duration>,
    rss_idle: Option<u64>,
    rss_connections: Option<u64>,
    idle_open: usize,
    idle_failed: usize,
    new: Load,
    latency: Load,
    redelivery: Load,
    runner: String,
    replay: Result<Replay, String>,
    replay_latency: Result<Replay, String>,
    minimal: Result<Replay, String>,
}

async fn measure(o: &Options, pool: &Pool, database_url: &str) -> Result<Figures, String> {
    db::migrate(pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let plan = Plan::new(o);
    progress(format!("creating {} pending orders", plan.total));
    populate(pool, plan.total).await?;

    let work_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    std::fs::create_dir_all(&work_dir).map_err(|e| e.to_string())?;
    let log = work_dir.join("server.log");
    let _ = std::fs::remove_file(&log);
    let secret = format!(
        "whsec_{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            rand::random::<[u8; 32]>()
        )
    );
    let key = WebhookKey::parse(&secret).expect("a valid key");
    let jwt_secret = random_hex(32);
    let env = ServerEnv {
        database_url,
        webhook_secret: &secret,
        jwt_secret: &jwt_secret,
        extra: &[],
        bin: None,
    };

    // Start-to-ready, `starts` times; the last server stays up for the load.
    let mut ready = Vec::new();
    let mut server = None;
    for i in 0..o.starts {
        let s = Server::start(&env, &log).await?;
        ready.push(s.ready_after);
        if i + 1 < o.starts {
            s.stop().await;
        } else {
            server = Some(s);
        }
    }
    let server = server.expect("at least one start");
    progress(format!(
        "server pid {} on {} (log: {}); ready after {:.1} ms",
        server.pid(),
        server.addr,
        log.display(),
        ready.last().unwrap().as_secs_f64() * 1e3
    ));
    let rss_idle = server.rss_bytes();
    let addr = server.addr;
    let path = "/api/webhook/payment";
    const NEW: &str = r#"{"duplicate":false,"#;
    const REPEAT: &str = r#"{"duplicate":true,"#;

    let signed = Arc::new(http::sign_new_payments(&key, plan.warmup.clone()));
    let warmup = http::run(
        addr,
        path,
        o.connections,
        Duration::from_secs(1),
        signed,
        Pick::EachOnce,
        NEW,
    )
    .await;
    check_load("warm-up", &warmup)?;

    progress(format!(
        "new payments: {} connections, {} s",
        o.connections,
        o.duration.as_secs()
    ));
    let signed = Arc::new(http::sign_new_payments(&key, plan.http.clone()));
    let new = http::run(
        addr,
        path,
        o.connections,
        o.duration,
        signed,
        Pick::EachOnce,
        NEW,
    )
    .await;
    check_load("new payments", &new)?;

    progress(format!(
        "new payments: 1 connection, {} s",
        o.latency_duration.as_secs()
    ));
    let signed = Arc::new(http::sign_new_payments(&key, plan.latency.clone()));
    let latency = http::run(
        addr,
        path,
        1,
        o.latency_duration,
        signed,
        Pick::EachOnce,
        NEW,
    )
    .await;
    check_load("new payments, one connection", &latency)?;

    progress(format!(
        "re-deliveries of one stored payment: {} connections, {} s",
        o.redelivery_connections,
        o.duration.as_secs()
    ));
    let n = plan.redelivery;
    let once = Arc::new(vec![http::sign_delivery(
        &key,
        format!("msg-{n}"),
        http::payment_body(n),
    )]);
    let first = http::run(
        addr,
        path,
        1,
        Duration::from_secs(10),
        once.clone(),
        Pick::EachOnce,
        NEW,
    )
    .await;
    if first.ok != 1 || first.errors > 0 {
        return Err(format!(
            "the payment to re-deliver was not applied: {}",
            first.first_error.as_deref().unwrap_or("no answer")
        ));
    }
    let redelivery = http::run(
        addr,
        path,
        o.redelivery_connections,
        o.duration,
        once,
        Pick::Cycle,
        REPEAT,
    )
    .await;
    check_load("re-deliveries", &redelivery)?;

    progress(format!("{} idle connections", o.idle_connections));
    let (idle, idle_failed) = http::open_idle(addr, o.idle_connections).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_connections = server.rss_bytes();
    let idle_open = idle.len();
    drop(idle);
    server.stop().await;

    // Every successful new payment applied once, granted once; re-deliveries wrote nothing.
    let paid = warmup.ok + new.ok + latency.ok + first.ok;
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM payments WHERE outcome = 'applied'),
                    (SELECT count(*) FROM payments),
                    (SELECT count(*) FROM memberships WHERE status = 'active'),
                    (SELECT count(*) FROM membership_events),
                    (SELECT count(*) FROM effects WHERE kind = 'grant'),
                    (SELECT count(*) FROM orders WHERE status = 'paid')",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    let counts: Vec<i64> = (0..6).map(|i| row.get(i)).collect();
    if counts.iter().any(|c| *c as u64 != paid) {
        return Err(format!(
            "{paid} payments succeeded over HTTP, but the database holds (applied payments, \
             payments, active memberships, events, grants, paid orders) = {counts:?}"
        ));
    }
    drop(client);

    let runner = match o.replay.as_deref() {
        Some("rust") => Runner::Rust,
        _ => Runner::find(),
    };
    if o.replay.as_deref() == Some("pgbench") && matches!(runner, Runner::Rust) {
        return Err("--replay pgbench: pgbench is not installed".into());
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/payments");
    progress(format!(
        "references ({}): the service's transaction, {} clients, {} s",
        runner.name(),
        o.connections,
        o.duration.as_secs()
    ));
    let tx_script = scripts.join("payment_tx.sql");
    let replay = replay::run(
        &runner,
        database_url,
        &tx_script,
        o.connections,
        o.duration,
        plan.replay,
        &work_dir,
    )
    .await;
    progress(format!(
        "references: the service's transaction, 1 client, {} s",
        o.latency_duration.as_secs()
    ));
    let replay_latency = replay::run(
        &runner,
        database_url,
        &tx_script,
        1,
        o.latency_duration,
        plan.replay_latency,
        &work_dir,
    )
    .await;
    progress(format!(
        "references: the minimal transaction, {} clients, {} s",
        o.connections,
        o.duration.as_secs()
    ));
    let minimal = replay::run(
        &runner,
        database_url,
        &scripts.join("payment_minimal.sql"),
        o.connections,
        o.duration,
        plan.minimal,
        &work_dir,
    )
    .await;
    for (what, r) in [
        ("replay", &replay),
        ("replay, 1 client", &replay_latency),
        ("minimal", &minimal),
    ] {
        if let Err(e) = r {
            progress(format!("reference {what} failed: {e}"));
        }
    }

    Ok(Figures {
        orders: plan.total,
        ready,
        rss_idle,
        rss_connections,
        idle_open,
        idle_failed,
        new,
        latency,
        redelivery,
        runner: match (&runner, o.replay.as_deref()) {
            (Runner::Rust, Some("rust")) => format!("{} (--replay rust)", runner.name()),
            (Runner::Rust, _) => format!("{} (pgbench is not installed)", runner.name()),
            (Runner::Pgbench(path), _) if path == Path::new("pgbench") => "pgbench".to_string(),
            (Runner::Pgbench(path), _) => format!("pgbench ({})", path.display()),
        },
        replay,
        replay_latency,
        minimal,
    })
}

/// A load run must have succeeded entirely: an error is a bug or a broken set-up, and its
/// figures would mislead.
fn check_load(what: &str, load: &Load) -> Result<(), String> {
    if load.errors > 0 || load.ok == 0 {
        return Err(format!(
            "{what}: {} of {} requests failed; first: {}",
            load.errors,
            load.errors + load.ok,
            load.first_error.as_deref().unwrap_or("none")
        ));
    }
    if load.exhausted {
        progress(format!(
            "{what}: ran out of pending orders after {} requests in {:.1} s; the rate is still \
             measured over that time",
            load.ok,
            load.elapsed.as_secs_f64()
        ));
    }
    Ok(())
}

/// The `q` quantile (nearest rank) of sorted microseconds, in milliseconds.
fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    sorted_us[rank - 1] as f64 / 1e3
}

/// The machine, PostgreSQL and its settings, as the report names them.
struct Machine {
    date: String,
    cores: usize,
    cpu: String,
    memory: String,
    load: String,
    postgres: String,
    settings: String,
}

impl Machine {
    async fn read(admin: &tokio_postgres::Client) -> Result<Machine, String> {
        let file = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = file("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let meminfo = file("/proc/meminfo");
        let memory = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
            .unwrap_or_else(|| "unknown".into());
        let load = file("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        let postgres: String = admin
            .query_one("SELECT version()", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        let postgres = postgres
            .split(" on ")
            .next()
            .unwrap_or(&postgres)
            .to_string();
        let rows = admin
            .query(
                "SELECT name, current_setting(name) FROM pg_settings
                 WHERE name IN ('shared_buffers', 'work_mem', 'max_connections', 'fsync',
                                'synchronous_commit', 'full_page_writes', 'max_wal_size')
                 ORDER BY name",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        let settings = rows
            .iter()
            .map(|r| format!("{}={}", r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Machine {
            date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            memory,
            load,
            postgres,
            settings,
        })
    }
}

impl Figures {
    /// The figures as `key<TAB>value` lines.
    fn tsv(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut put = |k: &str, v: f64| out.push((k.to_string(), format!("{v:.3}")));
        for (name, l) in [
            ("new", &self.new),
            ("new_c1", &self.latency),
            ("redelivery", &self.redelivery),
        ] {
            put(&format!("{name}_rps"), l.rate());
            put(&format!("{name}_p50_ms"), quantile_ms(&l.latencies_us, 0.5));
            put(
                &format!("{name}_p99_ms"),
                quantile_ms(&l.latencies_us, 0.99),
            );
        }
        for (name, r) in [
            ("replay", &self.replay),
            ("replay_c1", &self.replay_latency),
            ("minimal", &self.minimal),
        ] {
            if let Ok(r) = r {
                put(&format!("{name}_tps"), r.tps);
                put(&format!("{name}_p50_ms"), quantile_ms(&r.latencies_us, 0.5));
                put(
                    &format!("{name}_p99_ms"),
                    quantile_ms(&r.latencies_us, 0.99),
                );
            }
        }
        if let Some(b) = self.rss_connections {
            put("rss_connections_mib", b as f64 / 1048576.0);
        }
        if let Some(b) = self.rss_idle {
            put("rss_idle_mib", b as f64 / 1048576.0);
        }
        put("ready_median_ms", median(&self.ready).as_secs_f64() * 1e3);
        out
    }
}

fn median(ds: &[Duration]) -> Duration {
    let mut v = ds.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn read_tsv(path: &Path) -> HashMap<String, f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn write_tsv(path: &Path, pairs: &[(String, String)]) {
    let text: String = pairs.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
    if let Err(e) = std::fs::write(path, text) {
        progress(format!("cannot write {}: {e}", path.display()));
    }
}

/// `met` / `not met` for a goal.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

fn load_cell(l: &Load, unit: &str) -> String {
    format!(
        "{:.0} {unit}, p50 {:.1} ms, p99 {:.1} ms",
        l.rate(),
        quantile_ms(&l.latencies_us, 0.5),
        quantile_ms(&l.latencies_us, 0.99)
    )
}

fn replay_cell(r: &Replay) -> String {
    format!(
        "{:.0} TPS, p50 {:.1} ms, p99 {:.1} ms",
        r.tps,
        quantile_ms(&r.latencies_us, 0.5),
        quantile_ms(&r.latencies_us, 0.99)
    )
}

/// The report: the machine, then one Markdown table of figures, references, ratios and goals.
fn report(o: &Options, m: &Machine, f: &Figures, sweep: &HashMap<String, f64>) -> String {
    let mut t = String::new();
    let c = o.connections;
    let secs = o.duration.as_secs();
    let _ = writeln!(
        t,
        "subgate benchmark, {} — {} cores ({}), {} memory, load average before the run {}",
        m.date, m.cores, m.cpu, m.memory, m.load
    );
    let _ = writeln!(t, "{}; {}", m.postgres, m.settings);
    let _ = writeln!(
        t,
        "server, load generator and PostgreSQL share these cores with whatever else runs: \
         figures are noisy; compare ratios within one run"
    );
    let _ = writeln!(
        t,
        "references run by {}; {} pending orders created by SQL before the run\n",
        f.runner, f.orders
    );
    let _ = writeln!(
        t,
        "| path | this service | reference in the same run | ratio | goal |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|");
    let new_rate = f.new.rate();
    let new_p99 = quantile_ms(&f.new.latencies_us, 0.99);
    match &f.replay {
        Ok(r) => {
            let ratio = new_rate / r.tps;
            let p99 = new_p99 / quantile_ms(&r.latencies_us, 0.99);
            let _ = writeln!(
                t,
                "| new payments through door 1, c={c}, {secs} s | {} | the service's payment transaction as the goal was set on (payment_tx.sql: 12 statements), replayed with prepared statements, c={}: {} | {ratio:.2}×, p99 {p99:.2}× | ≥ 1.0×, p99 ≤ 2×: {} |",
                load_cell(&f.new, "req/s"),
                r.clients,
                replay_cell(r),
                verdict(ratio >= 1.0 && p99 <= 2.0)
            );
        }
        Err(e) => {
            let _ = writeln!(
                t,
                "| new payments through door 1, c={c}, {secs} s | {} | replay failed: {e} | — | ≥ 1.0×, p99 ≤ 2× |",
                load_cell(&f.new, "req/s")
            );
        }
    }
    match &f.minimal {
        Ok(r) => {
            let ratio = new_rate / r.tps;
            let _ = writeln!(
                t,
                "| same | | minimal 6-statement payment transaction (payment_minimal.sql), c={}: {} | {ratio:.2}× | stretch ≥ 0.5×: {} |",
                r.clients,
                replay_cell(r),
                verdict(ratio >= 0.5)
            );
        }
        Err(e) => {
            let _ = writeln!(
                t,
                "| same | | minimal transaction failed: {e} | — | stretch ≥ 0.5× |"
            );
        }
    }
    let lat_p50 = quantile_ms(&f.latency.latencies_us, 0.5);
    let lat_p99 = quantile_ms(&f.latency.latencies_us, 0.99);
    match &f.replay_latency {
        Ok(r) => {
            let p50 = lat_p50 / quantile_ms(&r.latencies_us, 0.5);
            let p99 = lat_p99 / quantile_ms(&r.latencies_us, 0.99);
            let _ = writeln!(
                t,
                "| new payments, c=1, {} s | {} | the same replay, c=1: {} | p50 {p50:.2}×, p99 {p99:.2}× | p50 ≤ 2×: {} |",
                o.latency_duration.as_secs(),
                load_cell(&f.latency, "req/s"),
                replay_cell(r),
                verdict(p50 <= 2.0)
            );
        }
        Err(e) => {
            let _ = writeln!(
                t,
                "| new payments, c=1 | {} | replay failed: {e} | — | p50 ≤ 2× |",
                load_cell(&f.latency, "req/s")
            );
        }
    }
    let ratio = f.redelivery.rate() / new_rate;
    let _ = writeln!(
        t,
        "| one payment re-delivered, c={}, {secs} s | {} | new payments, c={c}, above | {ratio:.2}× | ≥ 1.5×: {} |",
        f.redelivery.connections,
        load_cell(&f.redelivery, "req/s"),
        verdict(ratio >= 1.5)
    );
    match (
        sweep.get("rows"),
        sweep.get("sweep_s"),
        sweep.get("same_writes_s"),
        sweep.get("set_based_s"),
    ) {
        (Some(rows), Some(sweep_s), Some(same), Some(set)) => {
            let ratio = sweep_s / same;
            let _ = writeln!(
                t,
                "| sweep of {} overdue memberships | {sweep_s:.1} s | one set-based statement making the same writes: {same:.1} s (status + events only: {set:.1} s) | {ratio:.2}× | ≤ 1.5×: {} |",
                thousands(*rows as u64),
                verdict(ratio <= 1.5)
            );
            match (sweep.get("probe_p99_ms"), sweep.get("probes")) {
                (Some(p99), Some(n)) if *n > 0.0 => {
                    let _ = writeln!(
                        t,
                        "| renewal colliding with a sweep batch | p99 {p99:.1} ms over {n:.0} probes | — | — | < 50 ms: {} |",
                        verdict(*p99 < 50.0)
                    );
                }
                _ => {
                    let _ = writeln!(
                        t,
                        "| renewal colliding with a sweep batch | no collision observed | — | — | < 50 ms |"
                    );
                }
            }
        }
        _ => {
            let _ = writeln!(
                t,
                "| sweep | not run here (`make bench` runs benches/sweep.rs first) | — | — | ≤ 1.5× |"
            );
        }
    }
    let mib = |b: Option<u64>| {
        b.map_or("unknown".to_string(), |b| {
            format!("{:.1} MiB", b as f64 / 1048576.0)
        })
    };
    let idle_note = if f.idle_failed > 0 {
        format!(" ({} connections failed to open)", f.idle_failed)
    } else {
        String::new()
    };
    let _ = writeln!(
        t,
        "| process RSS with {} open idle connections | {}{idle_note} (right after start: {}) | — | — | < 64 MiB: {} |",
        f.idle_open,
        mib(f.rss_connections),
        mib(f.rss_idle),
        verdict(f.rss_connections.is_some_and(|b| b < 64 << 20) && f.idle_failed == 0)
    );
    let ready = median(&f.ready);
    let max = f.ready.iter().max().copied().unwrap_or_default();
    let _ = writeln!(
        t,
        "| start to ready (spawn → first 200 from /readyz) | median {:.0} ms of {} starts (max {:.0} ms) | — | — | < 1 s: {} |",
        ready.as_secs_f64() * 1e3,
        f.ready.len(),
        max.as_secs_f64() * 1e3,
        verdict(max < Duration::from_secs(1))
    );
    t
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
