//! `make bench`: the payment path measured end to end, next to references run in the same run on
//! the same PostgreSQL, and the ratios between them.
//!
//! The database lives in a private PostgreSQL cluster the benchmark starts ([`cluster`]: stock
//! settings plus `ssl = on`), so the payment path and its references can be measured over both
//! connection kinds against one server: without TLS (`sslmode=disable`) and with TLS
//! (`sslmode=require`; the server also gets `DATABASE_CA_CERT`, so it checks the chain). Where
//! the cluster cannot be started (no server binaries), or with `--shared-server`, everything
//! runs on the shared server of `SUBGATE_TEST_DATABASE_URL`, without TLS only.
//!
//! On a fresh database (pending orders created in bulk by SQL, each for its own subscriber and
//! channel pair), for each connection kind in turn, it starts the real server — the `subgate`
//! binary of this build (`cargo bench`: the release profile) with door 1's secret set — and
//! drives it with the load generator in [`http`]: Standard Webhooks deliveries signed before
//! the clock starts, over keep-alive connections:
//!
//! 1. new payments, each paying its own pending order, at `--connections` (16), after a
//!    one-second warm-up, taking turns with the references below: `--rounds` (5) rounds, each
//!    of new payments and then each reference for `--duration` / `--rounds` (2 s of the 10 s),
//!    a `CHECKPOINT` before each, the server idle while a reference runs — so a change in the
//!    machine's speed during the run (its cores are shared with the host) falls on every side
//!    alike; each side's figures are those of its rounds together, and where each side's CPU
//!    went (the machine's busy time, the driver's, the server's, the rest: PostgreSQL) is
//!    read from `/proc`;
//! 2. without TLS only: the same at one connection for `--latency-duration` (5 s), latency
//!    without queueing; re-deliveries of one stored payment at `--redelivery-connections` (10)
//!    for `--duration`; the server's resident memory with `--idle-connections` (1,000) idle
//!    keep-alive connections open, and its start-to-ready time (spawn → first 200 from
//!    `/readyz`, `--starts` times).
//!
//! The references run over the same kind of connection ([`replay`], pgbench with prepared
//! statements and as many threads as cores, at most one per client): the service's own payment
//! transaction as it stood when the goal was set, statement for statement (`payment_tx.sql`),
//! the transaction as the code issues it now, generated from the code's own SQL constants
//! ([`current`]), and a minimal six-statement payment transaction (`payment_minimal.sql`);
//! without TLS also the first at one client, with the server stopped. Where pgbench is not
//! installed the same scripts run from Rust (without TLS only). The rows written are checked:
//! one applied payment, membership, event, grant effect and paid order per successful new
//! payment, nothing for a re-delivery, and the same per transaction of the generated replay.
//!
//! It prints a table of the figures and the ratios the payment-path goals are stated in, with
//! the sweep's rows from `benches/sweep.rs` when `scripts/bench.sh` ran it first (it leaves its
//! figures in `$SUBGATE_BENCH_RESULTS/sweep.tsv`), and leaves its own in `payments.tsv` there.
//! The figures are only as steady as the machine: server, load generator and PostgreSQL share
//! its cores with whatever else runs.
//!
//! A plain `harness = false` main: `cargo test` neither builds nor runs it. Environment:
//! `SUBGATE_TEST_DATABASE_URL` (admin URL of the shared server; default
//! `postgres://postgres@127.0.0.1:5432/postgres`), `SUBGATE_BENCH_RUN` (a tag for this run's
//! database and cluster names), `SUBGATE_BENCH_PIDFILE` (every process it starts is listed
//! there, so `scripts/bench.sh` can stop them if interrupted), `SUBGATE_BENCH_RESULTS` (where
//! the figures, and the private cluster while it runs, are left). `--help` lists the options.

#[path = "../common/mod.rs"]
mod common;
pub use common::record_pid;
use common::{CpuClock, admin_url, random_hex, url_for};

mod cluster;
mod current;
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
use subgate::{db, payments::gateways::standard_webhooks::WebhookKey};
use tokio_postgres::NoTls;

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
  --duration SECONDS          each throughput run (default 10, at most 240)
  --latency-duration SECONDS  the one-connection latency runs (default 5)
  --redelivery-connections N  connections re-delivering one stored payment (default 10)
  --idle-connections N        idle connections held open for the memory figure (default 1000)
  --starts N                  server starts timed for start-to-ready (default 3)
  --replay pgbench|rust       who runs the reference scripts (default: pgbench if installed)
  --shared-server             no private cluster: measure on SUBGATE_TEST_DATABASE_URL's server,
                              without TLS only
  --rounds N                  rounds the throughput runs are split into: new payments and the
                              three references take turns, each round --duration / N (rounded
                              up to whole seconds) per side (default 5)
  --server-env NAME=VALUE     one more variable for the server's environment (repeatable), e.g.
                              RUST_LOG=warn or TOKIO_WORKER_THREADS=1 to compare settings";

struct Options {
    connections: usize,
    duration: Duration,
    latency_duration: Duration,
    redelivery_connections: usize,
    idle_connections: usize,
    starts: usize,
    replay: Option<String>,
    shared_server: bool,
    server_env: Vec<(String, String)>,
    rounds: u32,
}

impl Options {
    /// Each side's share of one round: `--duration` / `--rounds`, rounded up to whole seconds
    /// (pgbench's `-T` counts whole seconds).
    fn round(&self) -> Duration {
        Duration::from_secs(self.duration.as_secs().div_ceil(self.rounds as u64).max(1))
    }
}

/// `None`: nothing to do (`--help`, or a `cargo bench` name filter that is not this bench).
fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        connections: 16,
        duration: Duration::from_secs(10),
        latency_duration: Duration::from_secs(5),
        redelivery_connections: 10,
        idle_connections: 1000,
        starts: 3,
        replay: None,
        shared_server: false,
        server_env: Vec::new(),
        rounds: 5,
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
            "--shared-server" => o.shared_server = true,
            "--rounds" => o.rounds = number(value()?)?.min(60) as u32,
            "--server-env" => {
                let v = value()?;
                let (name, val) = v
                    .split_once('=')
                    .filter(|(n, _)| !n.is_empty())
                    .ok_or_else(|| format!("--server-env is NAME=VALUE, got {v:?}"))?;
                o.server_env.push((name.to_string(), val.to_string()));
            }
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
    let tag = common::run_tag();
    // The private cluster with TLS, in the results directory (`make bench`: target/bench).
    let cluster_dir = std::env::var_os("SUBGATE_BENCH_RESULTS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench"));
    let _ = std::fs::create_dir_all(&cluster_dir);
    progress("starting a private PostgreSQL cluster with ssl = on");
    let cluster = match if o.shared_server {
        Err("--shared-server".to_string())
    } else {
        cluster::Cluster::start(&cluster_dir, &tag)
    } {
        Ok(c) => Some(c),
        Err(e) => {
            progress(format!(
                "no private cluster ({e}); measuring on the shared server, without TLS only"
            ));
            None
        }
    };
    let admin_url = match &cluster {
        Some(c) => c.url("postgres", "disable"),
        None => admin_url(),
    };
    let (admin, connection) = tokio_postgres::connect(&admin_url, NoTls)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL ({e}); run `make bench`"))?;
    tokio::spawn(connection);
    let machine = Machine::read(&admin).await?;

    let name = common::fresh_database(&admin, "pay", &tag).await?;
    let target = match &cluster {
        Some(c) => {
            let port = c.port;
            let db = name.clone();
            Target {
                url: Box::new(move |conn: Conn| {
                    format!(
                        "postgres://postgres@127.0.0.1:{port}/{db}?sslmode={}",
                        conn.sslmode()
                    )
                }),
                ca_cert: Some(c.ca_cert()),
                kinds: vec![Conn::Plain, Conn::Tls],
            }
        }
        None => {
            let url = url_for(&name);
            Target {
                url: Box::new(move |_| url.clone()),
                ca_cert: None,
                kinds: vec![Conn::Plain],
            }
        }
    };
    let pool = db::pool(&(target.url)(Conn::Plain), 2).map_err(|e| e.to_string())?;
    let outcome = measure(&o, &pool, &target).await;
    pool.close();
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await;
    drop(admin);
    drop(cluster);
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

/// Which orders each phase pays: consecutive ranges of order ids, handed out in turn.
struct Plan {
    next: i64,
    total: i64,
}

impl Plan {
    /// Every phase's orders: per connection kind the warm-up, new payments and the three
    /// references at `--connections`; without TLS also the one-connection runs and the
    /// re-delivered payment.
    fn new(o: &Options, kinds: usize) -> Plan {
        let (d, l) = (
            o.duration.as_secs() as i64,
            o.latency_duration.as_secs() as i64,
        );
        // Every round takes whole seconds, so the rounds may add up to more than `d`.
        let d = d.max(o.round().as_secs() as i64 * o.rounds as i64);
        let per_kind = HTTP_ORDERS_PER_SEC * (1 + d)
            + REPLAY_ORDERS_PER_SEC * d * 2
            + MINIMAL_ORDERS_PER_SEC * d;
        let once = LATENCY_ORDERS_PER_SEC * l * 2 + 1;
        Plan {
            next: 1,
            total: per_kind * kinds as i64 + once,
        }
    }

    fn take(&mut self, n: i64) -> std::ops::Range<i64> {
        let r = self.next..self.next + n;
        self.next += n;
        assert!(
            self.next - 1 <= self.total,
            "the plan set aside too few orders"
        );
        r
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

/// A connection kind between the server (or pgbench) and PostgreSQL.
#[derive(Clone, Copy, PartialEq)]
enum Conn {
    Plain,
    Tls,
}

impl Conn {
    fn sslmode(self) -> &'static str {
        match self {
            Conn::Plain => "disable",
            Conn::Tls => "require",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Conn::Plain => "without TLS",
            Conn::Tls => "with TLS",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Conn::Plain => "",
            Conn::Tls => "tls_",
        }
    }
}

/// Where the benchmark's database lives: the private cluster (both kinds), else the shared
/// server (without TLS only).
struct Target {
    /// The database's URL for a connection kind.
    url: Box<dyn Fn(Conn) -> String + Send + Sync>,
    ca_cert: Option<PathBuf>,
    kinds: Vec<Conn>,
}

/// What one connection kind measured: new payments and the three references, each with where
/// its CPU went.
struct KindFigures {
    conn: Conn,
    new: Load,
    new_cpu: CpuUse,
    fixed: Result<(Replay, CpuUse), String>,
    current: Result<(Replay, CpuUse), String>,
    minimal: Result<(Replay, CpuUse), String>,
}

/// Where one run's CPU went, in microseconds per operation (a request answered, a transaction
/// committed): the machine's busy time, the driver's (the load generator, or pgbench), the
/// server's (none for a reference) and the rest — PostgreSQL, and whatever else ran.
#[derive(Clone, Copy)]
struct CpuUse {
    machine_us: f64,
    driver_us: f64,
    server_us: f64,
    /// Of all the cores' time during the run, the part nobody used (idle or waiting for I/O),
    /// in per cent: a side that leaves cores idle gets less done than its CPU a payment says.
    idle_pct: f64,
}

impl CpuUse {
    fn of(used: &CpuClock, ops: u64) -> CpuUse {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / ops.max(1) as f64;
        let all = (used.machine + used.idle).as_secs_f64();
        CpuUse {
            machine_us: per(used.machine),
            driver_us: per(used.own + used.children),
            server_us: per(used.other),
            idle_pct: if all > 0.0 {
                used.idle.as_secs_f64() * 100.0 / all
            } else {
                0.0
            },
        }
    }

    fn rest_us(&self) -> f64 {
        (self.machine_us - self.driver_us - self.server_us).max(0.0)
    }
}

/// Everything one run measured.
struct Figures {
    orders: i64,
    ready: Vec<Duration>,
    rss_idle: Option<u64>,
    rss_connections: Option<u64>,
    idle_open: usize,
    idle_failed: usize,
    latency: Load,
    redelivery: Load,
    runner: String,
    replay_latency: Result<Replay, String>,
    kinds: Vec<KindFigures>,
}

const NEW: &str = r#"{"duplicate":false,"#;
const REPEAT: &str = r#"{"duplicate":true,"#;
const PATH: &str = "/api/webhook/payment";

async fn measure(o: &Options, pool: &Pool, target: &Target) -> Result<Figures, String> {
    db::migrate(pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let mut plan = Plan::new(o, target.kinds.len());
    progress(format!("creating {} pending orders", plan.total));
    populate(pool, plan.total).await?;

    let work_dir = common::work_dir()?;
    let log = common::server_log("server.log")?;
    let secret = common::webhook_secret();
    let key = WebhookKey::parse(&secret).expect("a valid key");
    let jwt_secret = random_hex(32);

    let runner = match o.replay.as_deref() {
        Some("rust") => Runner::Rust,
        _ => Runner::find(),
    };
    if o.replay.as_deref() == Some("pgbench") && matches!(runner, Runner::Rust) {
        return Err("--replay pgbench: pgbench is not installed".into());
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/payments");
    let fixed_script = scripts.join("payment_tx.sql");
    let minimal_script = scripts.join("payment_minimal.sql");
    let current_script = work_dir.join("payment_current.sql");
    std::fs::write(&current_script, current::script()?)
        .map_err(|e| format!("{}: {e}", current_script.display()))?;
    let paid_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let current_defines = current::defines(&paid_at);

    let mut ready = Vec::new();
    let (mut rss_idle, mut rss_connections) = (None, None);
    let (mut idle_open, mut idle_failed) = (0, 0);
    let (mut latency, mut redelivery, mut replay_latency) = (None, None, None);
    let mut kinds = Vec::new();
    let server_env: Vec<(&str, String)> = o
        .server_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    for &conn in &target.kinds {
        let database_url = (target.url)(conn);
        let before = row_counts(pool).await?;
        let mut paid: u64 = 0;
        let env = ServerEnv {
            database_url: &database_url,
            ca_cert: (conn == Conn::Tls)
                .then_some(target.ca_cert.as_deref())
                .flatten(),
            webhook_secret: &secret,
            jwt_secret: &jwt_secret,
            extra: &server_env,
            bin: None,
        };
        // Start-to-ready, `starts` times (once with TLS); the last server stays up.
        let starts = if conn == Conn::Plain { o.starts } else { 1 };
        let mut server = None;
        for i in 0..starts {
            let s = Server::start(&env, &log).await?;
            if conn == Conn::Plain {
                ready.push(s.ready_after);
            }
            if i + 1 < starts {
                s.stop().await;
            } else {
                server = Some(s);
            }
        }
        let server = server.expect("at least one start");
        progress(format!(
            "server {} pid {} on {} (log: {})",
            conn.label(),
            server.pid(),
            server.addr,
            log.display()
        ));
        if conn == Conn::Plain {
            rss_idle = server.rss_bytes();
        }
        let addr = server.addr;
        let server_pid = server.pid();
        let (warmup, _) = new_payments(
            addr,
            server_pid,
            &key,
            plan.take(HTTP_ORDERS_PER_SEC),
            o.connections,
            Duration::from_secs(1),
            "warm-up",
        )
        .await?;
        paid += warmup.ok;
        expect_gain(pool, &before, paid, conn.label()).await?;

        // The references over the same kind of connection, the server idle meanwhile.
        let tls_needs_pgbench = conn == Conn::Tls && matches!(runner, Runner::Rust);
        let replay_with = |script: PathBuf,
                           clients: usize,
                           d: Duration,
                           lo: i64,
                           extra: Vec<(&'static str, String)>| {
            let (runner, database_url, work_dir) = (&runner, &database_url, &work_dir);
            async move {
                if tls_needs_pgbench {
                    return Err("the replay over TLS needs pgbench".to_string());
                }
                checkpoint(pool).await?;
                let before = CpuClock::now(None);
                let r = replay::run(
                    runner,
                    database_url,
                    &script,
                    clients,
                    d,
                    lo,
                    &extra,
                    work_dir,
                )
                .await?;
                Ok((r, CpuClock::now(None).since(&before)))
            }
        };

        // New payments and the three references in turn, `--rounds` times, so that a change
        // in the machine's speed during the run (its cores are shared with the host) falls on
        // every side alike; each side's figures are those of all its rounds together.
        let round = o.round();
        let round_secs = round.as_secs() as i64;
        let (mut new_rounds, mut new_cpu) = (Vec::new(), CpuClock::default());
        let mut refs: [Result<Vec<(Replay, CpuClock)>, String>; 3] =
            [Ok(Vec::new()), Ok(Vec::new()), Ok(Vec::new())];
        for i in 1..=o.rounds {
            progress(format!(
                "round {i} of {} {}: new payments at {} connections, then the fixed, current \
                 and minimal transactions by {} at {} clients ({} threads), {} s each",
                o.rounds,
                conn.label(),
                o.connections,
                runner.name(),
                o.connections,
                replay::threads(o.connections),
                round.as_secs()
            ));
            let counted = row_counts(pool).await?;
            checkpoint(pool).await?;
            let (new, cpu) = new_payments(
                addr,
                server_pid,
                &key,
                plan.take(HTTP_ORDERS_PER_SEC * round_secs),
                o.connections,
                round,
                "new payments",
            )
            .await?;
            expect_gain(pool, &counted, new.ok, conn.label()).await?;
            paid += new.ok;
            new_rounds.push(new);
            new_cpu = new_cpu.plus(&cpu);

            let scripts = [
                (&fixed_script, REPLAY_ORDERS_PER_SEC, Vec::new()),
                (
                    &current_script,
                    REPLAY_ORDERS_PER_SEC,
                    current_defines.clone(),
                ),
                (&minimal_script, MINIMAL_ORDERS_PER_SEC, Vec::new()),
            ];
            for (which, (script, per_sec, defines)) in scripts.into_iter().enumerate() {
                let Ok(done) = &mut refs[which] else {
                    continue;
                };
                // Only the generated replay's writes are checked (below).
                let counted = match which {
                    1 => row_counts(pool).await?,
                    _ => Vec::new(),
                };
                let r = replay_with(
                    script.clone(),
                    o.connections,
                    round,
                    plan.take(per_sec * round_secs).start,
                    defines,
                )
                .await;
                // The generated replay must write what a new payment writes: one applied
                // payment, membership, event, grant and paid order per transaction.
                let r = match r {
                    Ok((r, cpu)) if which == 1 => {
                        let gained = gains(pool, &counted).await?;
                        if gained.iter().any(|g| *g as u64 != r.transactions) {
                            Err(format!(
                                "{} transactions of the current replay, but the database \
                                 gained {gained:?}",
                                r.transactions
                            ))
                        } else {
                            Ok((r, cpu))
                        }
                    }
                    r => r,
                };
                match r {
                    Ok(r) => done.push(r),
                    Err(e) => {
                        progress(format!(
                            "reference {} {} failed: {e}",
                            ["fixed replay", "current replay", "minimal"][which],
                            conn.label()
                        ));
                        refs[which] = Err(e);
                    }
                }
            }
        }
        let [fixed, current, minimal] = refs.map(|r| r.map(|runs| merge_replays(&runs)));
        let new = merge_loads(new_rounds);
        let new_cpu = CpuUse::of(&new_cpu, new.ok);

        if conn == Conn::Plain {
            progress(format!(
                "new payments: 1 connection, {} s",
                o.latency_duration.as_secs()
            ));
            let counted = row_counts(pool).await?;
            let (l, _) = new_payments(
                addr,
                server_pid,
                &key,
                plan.take(LATENCY_ORDERS_PER_SEC * o.latency_duration.as_secs() as i64),
                1,
                o.latency_duration,
                "new payments, one connection",
            )
            .await?;
            paid += l.ok;
            expect_gain(pool, &counted, l.ok, conn.label()).await?;
            latency = Some(l);

            progress(format!(
                "re-deliveries of one stored payment: {} connections, {} s",
                o.redelivery_connections,
                o.duration.as_secs()
            ));
            let counted = row_counts(pool).await?;
            let n = plan.take(1).start;
            let once = Arc::new(vec![http::sign_delivery(
                &key,
                format!("msg-{n}"),
                http::payment_body(n),
            )]);
            let first = http::run(
                addr,
                PATH,
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
            paid += first.ok;
            let r = http::run(
                addr,
                PATH,
                o.redelivery_connections,
                o.duration,
                once,
                Pick::Cycle,
                REPEAT,
            )
            .await;
            check_load("re-deliveries", &r)?;
            // The first delivery applied once; its re-deliveries wrote nothing.
            expect_gain(pool, &counted, 1, conn.label()).await?;
            redelivery = Some(r);

            progress(format!("{} idle connections", o.idle_connections));
            let (idle, failed) = http::open_idle(addr, o.idle_connections).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            rss_connections = server.rss_bytes();
            idle_open = idle.len();
            idle_failed = failed;
            drop(idle);
        }
        server.stop().await;
        progress(format!(
            "{paid} new payments {} in all, each applied and granted once",
            conn.label()
        ));

        if conn == Conn::Plain {
            progress(format!(
                "reference {} ({}): the fixed transaction, 1 client, {} s",
                conn.label(),
                runner.name(),
                o.latency_duration.as_secs()
            ));
            replay_latency = Some(
                replay_with(
                    fixed_script.clone(),
                    1,
                    o.latency_duration,
                    plan.take(LATENCY_ORDERS_PER_SEC * o.latency_duration.as_secs() as i64)
                        .start,
                    Vec::new(),
                )
                .await
                .map(|(r, _)| r),
            );
        }
        kinds.push(KindFigures {
            conn,
            new,
            new_cpu,
            fixed,
            current,
            minimal,
        });
    }

    Ok(Figures {
        orders: plan.total,
        ready,
        rss_idle,
        rss_connections,
        idle_open,
        idle_failed,
        latency: latency.ok_or("no run without TLS")?,
        redelivery: redelivery.ok_or("no run without TLS")?,
        runner: match (&runner, o.replay.as_deref()) {
            (Runner::Rust, Some("rust")) => format!("{} (--replay rust)", runner.name()),
            (Runner::Rust, _) => format!("{} (pgbench is not installed)", runner.name()),
            (Runner::Pgbench(path), _) if path == Path::new("pgbench") => "pgbench".to_string(),
            (Runner::Pgbench(path), _) => format!("pgbench ({})", path.display()),
        },
        replay_latency: replay_latency.ok_or("no run without TLS")?,
        kinds,
    })
}

/// The rounds of one load as one run: requests and time added up, latencies pooled.
fn merge_loads(loads: Vec<Load>) -> Load {
    let mut all = Load::empty(loads.first().map_or(0, |l| l.connections));
    for l in loads {
        all.ok += l.ok;
        all.errors += l.errors;
        all.first_error = all.first_error.or(l.first_error);
        all.elapsed += l.elapsed;
        all.latencies_us.extend(l.latencies_us);
        all.exhausted |= l.exhausted;
    }
    all.latencies_us.sort_unstable();
    all
}

/// The rounds of one reference as one run: transactions added up over the time they took
/// (each round's TPS is pgbench's, without connection time), latencies pooled; and their CPU.
fn merge_replays(runs: &[(Replay, CpuClock)]) -> (Replay, CpuUse) {
    let transactions: u64 = runs.iter().map(|(r, _)| r.transactions).sum();
    let secs: f64 = runs
        .iter()
        .filter(|(r, _)| r.tps > 0.0)
        .map(|(r, _)| r.transactions as f64 / r.tps)
        .sum();
    let mut latencies_us: Vec<u32> = runs
        .iter()
        .flat_map(|(r, _)| r.latencies_us.iter().copied())
        .collect();
    latencies_us.sort_unstable();
    let cpu = runs
        .iter()
        .fold(CpuClock::default(), |sum, (_, c)| sum.plus(c));
    let first = runs.first().map(|(r, _)| r);
    (
        Replay {
            clients: first.map_or(0, |r| r.clients),
            threads: first.map_or(0, |r| r.threads),
            transactions,
            tps: if secs > 0.0 {
                transactions as f64 / secs
            } else {
                0.0
            },
            latencies_us,
        },
        CpuUse::of(&cpu, transactions),
    )
}

/// What the database gained since `before` ([`row_counts`]).
async fn gains(pool: &Pool, before: &[i64]) -> Result<Vec<i64>, String> {
    let after = row_counts(pool).await?;
    Ok(after.iter().zip(before).map(|(a, b)| a - b).collect())
}

/// Every successful new payment since `before` applied once and granted once (`paid` of
/// them), and nothing else written: re-deliveries write nothing.
async fn expect_gain(pool: &Pool, before: &[i64], paid: u64, kind: &str) -> Result<(), String> {
    let gained = gains(pool, before).await?;
    if gained.iter().any(|g| *g as u64 != paid) {
        return Err(format!(
            "{paid} payments succeeded over HTTP {kind}, but the database gained (applied \
             payments, payments, active memberships, events, grants, paid orders) = {gained:?}"
        ));
    }
    Ok(())
}

/// A checkpoint before each throughput run, so that none of them pays for another's dirty
/// pages (the orders made by SQL, the writes of the run before) and each starts from the same
/// state: the first changes of each page after a checkpoint are logged whole
/// (`full_page_writes`), for the service and the references alike.
async fn checkpoint(pool: &Pool) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .batch_execute("CHECKPOINT")
        .await
        .map_err(|e| format!("checkpoint: {e}"))
}

/// (applied payments, payments, active memberships, membership events, grant effects, paid
/// orders): what one new payment adds one of each to.
async fn row_counts(pool: &Pool) -> Result<Vec<i64>, String> {
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
    Ok((0..6).map(|i| row.get(i)).collect())
}

/// A load run must have succeeded entirely: an error is a bug or a broken set-up, and its
/// figures would mislead.
/// The payments of `orders`, signed first, delivered at `connections` for `duration` to the
/// server (process `server`), each to be answered as a new payment; any failure fails the run
/// (`what` names it). Also where the delivery's CPU went.
async fn new_payments(
    addr: std::net::SocketAddr,
    server: u32,
    key: &WebhookKey,
    orders: std::ops::Range<i64>,
    connections: usize,
    duration: Duration,
    what: &str,
) -> Result<(Load, CpuClock), String> {
    let signed = Arc::new(http::sign_new_payments(key, orders));
    let before = CpuClock::now(Some(server));
    let load = http::run(
        addr,
        PATH,
        connections,
        duration,
        signed,
        Pick::EachOnce,
        NEW,
    )
    .await;
    let cpu = CpuClock::now(Some(server)).since(&before);
    check_load(what, &load)?;
    Ok((load, cpu))
}

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
                 WHERE name IN ('shared_buffers', 'work_mem', 'max_connections', 'fsync', 'ssl',
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
    /// The figures as `key<TAB>value` lines (a TLS figure's key starts with `tls_`).
    fn tsv(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut put = |k: &str, v: f64| out.push((k.to_string(), format!("{v:.3}")));
        let mut loads = vec![
            ("new_c1".to_string(), &self.latency),
            ("redelivery".to_string(), &self.redelivery),
        ];
        let mut replays = vec![("replay_c1".to_string(), self.replay_latency.as_ref().ok())];
        let mut cpus = Vec::new();
        for k in &self.kinds {
            let p = k.conn.key();
            loads.push((format!("{p}new"), &k.new));
            cpus.push((format!("{p}new"), k.new_cpu));
            for (name, r) in [
                ("replay", &k.fixed),
                ("current", &k.current),
                ("minimal", &k.minimal),
            ] {
                replays.push((format!("{p}{name}"), r.as_ref().ok().map(|(r, _)| r)));
                if let Ok((_, cpu)) = r {
                    cpus.push((format!("{p}{name}"), *cpu));
                }
            }
        }
        for (name, l) in loads {
            put(&format!("{name}_rps"), l.rate());
            put(&format!("{name}_p50_ms"), quantile_ms(&l.latencies_us, 0.5));
            put(
                &format!("{name}_p99_ms"),
                quantile_ms(&l.latencies_us, 0.99),
            );
        }
        for (name, r) in replays {
            if let Some(r) = r {
                put(&format!("{name}_tps"), r.tps);
                put(&format!("{name}_p50_ms"), quantile_ms(&r.latencies_us, 0.5));
                put(
                    &format!("{name}_p99_ms"),
                    quantile_ms(&r.latencies_us, 0.99),
                );
            }
        }
        for (name, c) in cpus {
            put(&format!("{name}_cpu_machine_us"), c.machine_us);
            put(&format!("{name}_cpu_driver_us"), c.driver_us);
            put(&format!("{name}_cpu_server_us"), c.server_us);
            put(&format!("{name}_cpu_rest_us"), c.rest_us());
            put(&format!("{name}_cpu_idle_pct"), c.idle_pct);
        }
        for k in &self.kinds {
            let p = k.conn.key();
            for (name, r) in [
                ("vs_replay", &k.fixed),
                ("vs_current", &k.current),
                ("vs_minimal", &k.minimal),
            ] {
                if let Ok((r, _)) = r {
                    put(&format!("{p}new_{name}"), k.new.rate() / r.tps);
                }
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
        "references run by {} with prepared statements, {} threads for {c} clients, taking turns \
         with the new payments ({} rounds, a CHECKPOINT before each side's turn); {} pending \
         orders created by SQL before the run\n",
        f.runner,
        replay::threads(c),
        o.rounds,
        f.orders
    );
    let _ = writeln!(
        t,
        "| path | this service | reference in the same run | ratio | goal |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|");
    for k in &f.kinds {
        let new_rate = k.new.rate();
        let new_p99 = quantile_ms(&k.new.latencies_us, 0.99);
        let kind = k.conn.label();
        let refs = [
            (
                &k.fixed,
                "the service's payment transaction as the goal was set (payment_tx.sql: 12 statements)",
                "≥ 1.0×, p99 ≤ 2×",
            ),
            (
                &k.current,
                "the service's payment transaction as it is now, generated from its SQL (a read, then the lock and the write in one pipeline)",
                "— (what the code's own statements cost)",
            ),
            (
                &k.minimal,
                "minimal 6-statement payment transaction (payment_minimal.sql)",
                "stretch ≥ 0.5×",
            ),
        ];
        for (i, (r, what, goal)) in refs.into_iter().enumerate() {
            let r = r.as_ref().map(|(r, _)| r);
            let first = if i == 0 {
                format!(
                    "| new payments through door 1, {kind}, c={c}, {} rounds of {} s | {} ",
                    o.rounds,
                    o.round().as_secs(),
                    load_cell(&k.new, "req/s")
                )
            } else {
                format!("| same, {kind} | ")
            };
            match r {
                Ok(r) => {
                    let ratio = new_rate / r.tps;
                    let p99 = new_p99 / quantile_ms(&r.latencies_us, 0.99);
                    let verdict_text = match i {
                        0 => format!(": {}", verdict(ratio >= 1.0 && p99 <= 2.0)),
                        2 => format!(": {}", verdict(ratio >= 0.5)),
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        t,
                        "{first}| {what}, {kind}, c={}, -j {}: {} | {ratio:.2}×, p99 {p99:.2}× | {goal}{verdict_text} |",
                        r.clients,
                        r.threads,
                        replay_cell(r)
                    );
                }
                Err(e) => {
                    let _ = writeln!(t, "{first}| {what}: failed: {e} | — | {goal} |");
                }
            }
        }
    }
    let plain = f.kinds.iter().find(|k| k.conn == Conn::Plain);
    let lat_p50 = quantile_ms(&f.latency.latencies_us, 0.5);
    let lat_p99 = quantile_ms(&f.latency.latencies_us, 0.99);
    match &f.replay_latency {
        Ok(r) => {
            let p50 = lat_p50 / quantile_ms(&r.latencies_us, 0.5);
            let p99 = lat_p99 / quantile_ms(&r.latencies_us, 0.99);
            let _ = writeln!(
                t,
                "| new payments, without TLS, c=1, {} s | {} | the fixed replay, c=1: {} | p50 {p50:.2}×, p99 {p99:.2}× | p50 ≤ 2×: {} |",
                o.latency_duration.as_secs(),
                load_cell(&f.latency, "req/s"),
                replay_cell(r),
                verdict(p50 <= 2.0)
            );
        }
        Err(e) => {
            let _ = writeln!(
                t,
                "| new payments, without TLS, c=1 | {} | replay failed: {e} | — | p50 ≤ 2× |",
                load_cell(&f.latency, "req/s")
            );
        }
    }
    if let Some(plain) = plain {
        let ratio = f.redelivery.rate() / plain.new.rate();
        let _ = writeln!(
            t,
            "| one payment re-delivered, without TLS, c={}, {secs} s | {} | new payments without TLS, c={c}, above | {ratio:.2}× | ≥ 1.5×: {} |",
            f.redelivery.connections,
            load_cell(&f.redelivery, "req/s"),
            verdict(ratio >= 1.5)
        );
    }
    match (
        sweep.get("rows"),
        sweep.get("sweep_s"),
        sweep.get("same_writes_s"),
        sweep.get("set_based_s"),
    ) {
        (Some(rows), Some(sweep_s), Some(same), Some(set)) => {
            let ratio = sweep_s / same;
            let events = sweep_s / set;
            let _ = writeln!(
                t,
                "| sweep of {} overdue memberships | {sweep_s:.1} s | one set-based statement making the same writes: {same:.1} s | {ratio:.2}× | ≤ 1.5×: {} |",
                thousands(*rows as u64),
                verdict(ratio <= 1.5)
            );
            let _ = writeln!(
                t,
                "| same | | the set-based status + events statement (no effects): {set:.1} s | {events:.2}× | ≤ 2× (at 1M): {} |",
                verdict(events <= 2.0)
            );
            if let Some(made) = sweep.get("materialize_s") {
                let _ = writeln!(
                    t,
                    "| then, off the sweep's path: the worker makes effects of the sweep's queued rows (chunk after chunk, back to back here) | {made:.1} s | — | — | — |"
                );
            }
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
                "| sweep | not run here (`make bench` runs benches/sweep.rs first) | — | — | ≤ 1.5× same writes, ≤ 2× status + events |"
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
        "| start to ready (spawn → first 200 from /readyz), without TLS | median {:.0} ms of {} starts (max {:.0} ms) | — | — | < 1 s: {} |",
        ready.as_secs_f64() * 1e3,
        f.ready.len(),
        max.as_secs_f64() * 1e3,
        verdict(max < Duration::from_secs(1))
    );
    cpu_table(&mut t, f);
    t
}

/// Where each throughput run's CPU went, per payment: the machine's busy time over the run,
/// split into the driver (the load generator, or pgbench), the server and the rest (PostgreSQL).
fn cpu_table(t: &mut String, f: &Figures) {
    let _ = writeln!(
        t,
        "\nCPU per payment (µs; from /proc over each run: the machine's busy time = the driver \
         (load generator or pgbench) + the server + the rest, which is PostgreSQL), and the share \
         of the cores' time nobody used\n"
    );
    let _ = writeln!(
        t,
        "| run | machine | driver | server | rest (PostgreSQL) | cores idle |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|");
    for k in &f.kinds {
        let kind = k.conn.label();
        let mut rows = vec![(format!("new payments, {kind}"), Some(k.new_cpu))];
        for (what, r) in [
            ("fixed replay", &k.fixed),
            ("current replay", &k.current),
            ("minimal", &k.minimal),
        ] {
            rows.push((format!("{what}, {kind}"), r.as_ref().ok().map(|(_, c)| *c)));
        }
        for (what, cpu) in rows {
            if let Some(c) = cpu {
                let _ = writeln!(
                    t,
                    "| {what} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} % |",
                    c.machine_us,
                    c.driver_us,
                    c.server_us,
                    c.rest_us(),
                    c.idle_pct
                );
            }
        }
    }
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
