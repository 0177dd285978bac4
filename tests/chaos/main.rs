//! `make chaos`: a database failover in the middle of a payment flood, against the real
//! `subgate serve`.
//!
//! scripts/chaos.sh starts a private primary with synchronous replication to a streaming
//! standby, and runs this program with their URLs; this program (a `harness = false` test
//! target that `cargo test` does not run on its own):
//!
//! 1. migrates the primary and creates pending orders: `--pairs` (subscriber, channel) pairs with
//!    `--payments-per-pair` orders each, interleaved, so every membership is extended several
//!    times and some of its payments land before the failover, some during, some after;
//! 2. starts `subgate serve` with `DATABASE_URL=postgres://…@primary,standby/…?
//!    target_session_attrs=read-write`;
//! 3. floods door 1 with signed `payment.succeeded` deliveries from `--connections`
//!    connections, each connection one gateway delivery worker: a delivery not answered 200 (a
//!    503, a broken connection, a timeout) is sent again, byte for byte, after a pause, until it
//!    is;
//! 4. after `--before` seconds, has the script stop the primary hard (`pg_ctl stop -m
//!    immediate`; its data directory is then fenced) and, `--outage` seconds later (a failover
//!    manager's detection time), promote the standby (`pg_ctl promote`);
//! 5. keeps flooding until `--after` seconds after the first 200 that follows the kill, then
//!    lets every delivery in flight finish (be acknowledged);
//! 6. checks on the new primary that every acknowledged payment is there exactly once, that no
//!    delivery was ever answered 500 (or anything but 200 and 503), that every payment sent was
//!    eventually acknowledged, and that each membership was extended exactly once per payment
//!    (one event and one grant or renewal receipt per payment, one grant per membership, the expiry `--payments-per-pair`
//!    terms long, each event's extension exactly one term);
//! 7. prints the time from the promotion to the first 200 again and to `/readyz` answering 200
//!    (the server's part of the recovery), and from the kill.
//!
//! Correctness is asserted; the recovery time is reported, not asserted, except that the
//! server must serve again within `--bound` seconds (a hang fails). Exit status 0: all checks
//! passed; 1: a check failed (each failure is printed); 2: a usage or set-up error.
//!
//! The flood's deliveries, workers and tally are in `flood.rs`; the server it floods and the
//! script's failover steps in `server.rs`; the run and its checks here.

use std::{
    collections::{BTreeMap, HashMap},
    io::Write as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use subgate::payments::gateways::standard_webhooks::{WebhookKey, sign};
use tokio_postgres::NoTls;

mod flood;
mod server;

use flood::*;
use server::*;

const CHANNELS: i64 = 4;
const PERIOD_DAYS: i32 = 30;
const AMOUNT_MINOR: i64 = 19_900;
const GATEWAY: &str = "chaos";

const USAGE: &str = "\
tests/chaos: payments through a database failover (run by scripts/chaos.sh: make chaos)

usage: make chaos ARGS='[options]'
  --connections N        delivery workers, one HTTP connection each (default 8)
  --pairs N              (subscriber, channel) pairs (default 1000)
  --payments-per-pair N  orders per pair, paid in turn (default 20); the flood must not run
                         out of orders before it ends: raise these on a fast machine
  --before SECONDS       flood before the primary is killed (default 4)
  --outage SECONDS       from the kill to the promotion: no writable server (default 2; 0: at once)
  --after SECONDS        flood after the first 200 that follows the kill (default 4)
  --bound SECONDS        the longest the server may take to serve again (default 60)";

struct Options {
    connections: usize,
    pairs: i64,
    per_pair: i64,
    before: Duration,
    outage: Duration,
    after: Duration,
    bound: Duration,
}

fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        connections: 8,
        pairs: 1000,
        per_pair: 20,
        before: Duration::from_secs(4),
        outage: Duration::from_secs(2),
        after: Duration::from_secs(4),
        bound: Duration::from_secs(60),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        // `--outage` may be 0 (promote at once); every other value must be positive.
        let least = u64::from(flag != "--outage");
        let mut number = || -> Result<u64, String> {
            let v = inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse::<u64>()
                .ok()
                .filter(|n| *n >= least)
                .ok_or_else(|| format!("{flag} must be an integer of at least {least}, got {v:?}"))
        };
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--connections" => o.connections = number()? as usize,
            "--pairs" => o.pairs = number()? as i64,
            "--payments-per-pair" => o.per_pair = number()? as i64,
            "--before" => o.before = Duration::from_secs(number()?),
            "--outage" => o.outage = Duration::from_secs(number()?),
            "--after" => o.after = Duration::from_secs(number()?),
            "--bound" => o.bound = Duration::from_secs(number()?),
            // What cargo passes to every test binary.
            "--nocapture" | "--quiet" | "-q" => {}
            f => return Err(format!("unknown option {f}\n\n{USAGE}")),
        }
    }
    Ok(Some(o))
}

/// What scripts/chaos.sh hands over.
struct Env {
    /// Both hosts, `target_session_attrs=read-write`: the server's `DATABASE_URL`.
    database_url: String,
    primary_url: String,
    standby_url: String,
    /// scripts/chaos.sh, whose `kill DIR` and `promote DIR` are the failover.
    script: String,
    dir: PathBuf,
}

impl Env {
    fn read() -> Result<Env, String> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("{name} is not set: run this through `make chaos`"))
        };
        Ok(Env {
            database_url: var("SUBGATE_CHAOS_DATABASE_URL")?,
            primary_url: var("SUBGATE_CHAOS_PRIMARY_URL")?,
            standby_url: var("SUBGATE_CHAOS_STANDBY_URL")?,
            script: var("SUBGATE_CHAOS_SCRIPT")?,
            dir: PathBuf::from(var("SUBGATE_CHAOS_DIR")?),
        })
    }
}

fn progress(message: impl std::fmt::Display) {
    eprintln!("[chaos] {message}");
}

/// Appends a process id to `$SUBGATE_CHAOS_PIDFILE`, so the script stops it however this ends.
fn record_pid(pid: u32) {
    if let Some(path) = std::env::var_os("SUBGATE_CHAOS_PIDFILE").filter(|p| !p.is_empty())
        && let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{pid}");
    }
}

fn main() {
    let options = match parse_args() {
        Ok(Some(o)) => o,
        Ok(None) => return,
        Err(e) => {
            eprintln!("tests/chaos: {e}");
            std::process::exit(2);
        }
    };
    let env = match Env::read() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tests/chaos: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(run(options, env)) {
        Ok(failures) if failures.is_empty() => {
            println!("chaos: all checks passed");
        }
        Ok(failures) => {
            for f in &failures {
                println!("FAILED: {f}");
            }
            println!("chaos: {} check(s) failed", failures.len());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("tests/chaos: {e}");
            std::process::exit(2);
        }
    }
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// `total` pending orders over `pairs` pairs: order `n` (reference `n`) is for pair
/// `(n - 1) % pairs`, i.e. subscriber `pair / CHANNELS + 1` and channel `pair % CHANNELS + 1`.
async fn populate(db: &tokio_postgres::Client, pairs: i64, total: i64) -> Result<(), String> {
    let subscribers = (pairs + CHANNELS - 1) / CHANNELS;
    db.batch_execute(&format!(
        "INSERT INTO channels (telegram_chat_id, title, price_minor, currency, billing_period_days)
         SELECT -1000 - g, 'chaos ' || g, {AMOUNT_MINOR}, 'UAH', {PERIOD_DAYS}
           FROM generate_series(1, {CHANNELS}) g;
         INSERT INTO subscribers (telegram_user_id) SELECT g FROM generate_series(1, {subscribers}) g;
         INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
         SELECT g::text, (g - 1) % {pairs} / {CHANNELS} + 1, (g - 1) % {pairs} % {CHANNELS} + 1,
                {AMOUNT_MINOR}, 'UAH'
           FROM generate_series(1, {total}) g;"
    ))
    .await
    .map_err(|e| format!("populate: {e}"))
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

async fn run(o: Options, env: Env) -> Result<Vec<String>, String> {
    let total = o.pairs * o.per_pair;
    let primary = connect(&env.primary_url).await?;
    {
        let pool = subgate::db::pool(&env.primary_url, 1).map_err(|e| e.to_string())?;
        subgate::db::migrate(&pool)
            .await
            .map_err(|e| format!("migrate: {e}"))?;
        pool.close();
    }
    progress(format!(
        "{total} pending orders: {} pairs x {} payments",
        o.pairs, o.per_pair
    ));
    populate(&primary, o.pairs, total).await?;
    let sync: Vec<String> = primary
        .query(
            "SELECT application_name || ' ' || state || ' ' || sync_state FROM pg_stat_replication",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.get(0))
        .collect();
    progress(format!("replication: {sync:?}"));
    if !sync.iter().any(|s| s.ends_with(" streaming sync")) {
        return Err(format!(
            "the standby is not a synchronous streaming standby: {sync:?}"
        ));
    }
    drop(primary);

    let secret = format!(
        "whsec_{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            rand::random::<[u8; 32]>()
        )
    );
    let key = WebhookKey::parse(&secret).expect("a valid key");
    let server = start_server(&env, &secret).await?;
    progress(format!(
        "subgate on {} (log: {})",
        server.addr,
        env.dir.join("subgate.log").display()
    ));

    let flood = Arc::new(Flood {
        addr: server.addr.clone(),
        key,
        next: AtomicI64::new(1),
        total,
        stop: AtomicBool::new(false),
        killed_at: Mutex::new(None),
        first_ok_after_kill: Mutex::new(None),
        tally: Mutex::new(Tally::default()),
        bound: o.bound,
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..o.connections)
        .map(|_| tokio::spawn(worker(flood.clone())))
        .collect();

    tokio::time::sleep(o.before).await;
    let before_kill = flood.tally.lock().unwrap().acked.len();
    if flood.next.load(Ordering::SeqCst) > total {
        flood.stop.store(true, Ordering::SeqCst);
        return Err(format!(
            "all {total} orders were paid before the kill; raise --pairs or --payments-per-pair"
        ));
    }
    progress(format!(
        "{before_kill} payments acknowledged; killing the primary (pg_ctl stop -m immediate)"
    ));
    let mut failures = Vec::new();
    let mut step = failover_step(&env, "kill").await;
    // From here no request can be committed until the promotion.
    let killed_at = Instant::now();
    *flood.killed_at.lock().unwrap() = Some(killed_at);
    if step.is_ok() {
        tokio::time::sleep(o.outage).await;
        progress("promoting the standby (pg_ctl promote)");
        step = failover_step(&env, "promote").await;
    }
    let promoted_at = Instant::now();
    if let Err(e) = step {
        flood.stop.store(true, Ordering::SeqCst);
        for w in workers {
            let _ = w.await;
        }
        return Err(e);
    }
    let during_outage = flood.tally.lock().unwrap().statuses.clone();
    let sweeps_at_promotion = sweeps_logged(&env);
    progress(format!(
        "standby promoted {} after the kill; answers so far: {during_outage:?}",
        secs(promoted_at - killed_at)
    ));

    // Serving again: the first 200 to a delivery sent after the kill; /readyz too.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client");
    let ready_url = format!("http://{}/readyz", server.addr);
    let mut ready_at = None;
    let first_ok = loop {
        if ready_at.is_none() && get_status(&http, &ready_url).await == Some(200) {
            ready_at = Some(Instant::now());
        }
        if let Some(at) = *flood.first_ok_after_kill.lock().unwrap() {
            break Some(at);
        }
        if killed_at.elapsed() > o.bound {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ran_out = flood.next.load(Ordering::SeqCst) > total;
    let Some(first_ok) = first_ok else {
        flood.stop.store(true, Ordering::SeqCst);
        for w in workers {
            let _ = w.await;
        }
        if ran_out {
            return Err(format!(
                "all {total} orders were sent before the server recovered; raise --pairs or \
                 --payments-per-pair"
            ));
        }
        failures.push(format!(
            "no delivery was acknowledged within {} of the kill: the server did not recover",
            secs(o.bound)
        ));
        return Ok(failures);
    };
    progress(format!(
        "serving again: first 200 {} after the promotion ({} after the kill)",
        secs(first_ok.saturating_duration_since(promoted_at)),
        secs(first_ok - killed_at)
    ));
    while ready_at.is_none() && killed_at.elapsed() < o.bound {
        if get_status(&http, &ready_url).await == Some(200) {
            ready_at = Some(Instant::now());
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if ready_at.is_none() {
        failures.push(format!(
            "/readyz did not answer 200 within {} of the kill",
            secs(o.bound)
        ));
    }

    tokio::time::sleep(o.after).await;
    flood.stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = w.await;
    }
    let flood_time = started.elapsed();
    // The server rode through the failover: still running, never restarted, and its
    // background loops too (the in-process sweep, every 2 s, failed during the outage and went
    // on after it).
    let mut server = server;
    if let Ok(Some(status)) = server.child.try_wait() {
        failures.push(format!("subgate exited during the run ({status})"));
    }
    let sweeps_after = sweeps_logged(&env) - sweeps_at_promotion;
    if sweeps_after == 0 {
        failures.push("the in-process sweep did not run again after the failover".into());
    }
    drop(server);

    let tally = std::mem::take(&mut *flood.tally.lock().unwrap());
    let acked = tally.acked.len() as i64;
    let redelivered = tally.acked.values().filter(|(a, _)| *a > 1).count();
    let duplicates = tally.acked.values().filter(|(_, d)| *d).count();
    progress(format!(
        "{acked} payments acknowledged in {}; {redelivered} needed redelivery, {duplicates} \
         acknowledged as duplicates (committed, acknowledgement lost); answers by status: {:?}",
        secs(flood_time),
        tally.statuses
    ));
    if tally.wrong_count > 0 {
        failures.push(format!(
            "{} answers were neither 200 nor 503 with Retry-After, e.g. {:?}",
            tally.wrong_count, tally.wrong
        ));
    }
    if !tally.unacked.is_empty() {
        failures.push(format!(
            "{} payments were never acknowledged within {} of redelivery, e.g. {:?}",
            tally.unacked.len(),
            secs(o.bound),
            &tally.unacked[..tally.unacked.len().min(10)]
        ));
    }
    if before_kill == 0 || acked as usize <= before_kill {
        failures.push(format!(
            "the flood did not span the failover ({before_kill} acknowledged before the kill, \
             {acked} in all)"
        ));
    }

    failures.extend(check(&env.standby_url, &tally.acked, o.pairs, o.per_pair).await?);

    println!();
    println!("| failover under load | figure |");
    println!("|---|---|");
    println!("| payments acknowledged | {acked} ({before_kill} before the kill) |");
    println!("| deliveries needing redelivery | {redelivered} |");
    println!("| acknowledged as duplicates | {duplicates} |");
    println!(
        "| kill → standby promoted (--outage, then pg_ctl promote) | {} |",
        secs(promoted_at - killed_at)
    );
    println!(
        "| promoted → first 200 | {} |",
        secs(first_ok.saturating_duration_since(promoted_at))
    );
    if let Some(r) = ready_at {
        println!(
            "| promoted → /readyz 200 | {} |",
            secs(r.saturating_duration_since(promoted_at))
        );
    }
    println!("| kill → first 200 | {} |", secs(first_ok - killed_at));
    println!();
    Ok(failures)
}

/// The checks on the new primary.
async fn check(
    url: &str,
    acked: &BTreeMap<i64, (u32, bool)>,
    pairs: i64,
    per_pair: i64,
) -> Result<Vec<String>, String> {
    let db = connect(url).await?;
    let mut failures = Vec::new();
    let read_only: String = db
        .query_one("SHOW transaction_read_only", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    if read_only != "off" {
        failures.push("the promoted standby is still read-only".into());
    }
    // Every payment stored: its order, outcome, events and grant-or-receipt effects.
    let rows = db
        .query(
            "SELECT p.external_id, p.outcome, o.reference, o.status,
                    (SELECT count(*) FROM membership_events e WHERE e.payment_id = p.id),
                    (SELECT count(*) FROM effects f
                      WHERE f.payment_id = p.id AND f.kind IN ('grant', 'renewal_receipt'))
               FROM payments p LEFT JOIN orders o ON o.id = p.order_id
              WHERE p.gateway = $1",
            &[&GATEWAY],
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut stored: HashMap<i64, u32> = HashMap::new();
    let mut bad_rows = Vec::new();
    for r in &rows {
        let external: String = r.get(0);
        let n: i64 = external
            .strip_prefix("pay-")
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        *stored.entry(n).or_default() += 1;
        let outcome: String = r.get(1);
        let reference: Option<String> = r.get(2);
        let order_status: Option<String> = r.get(3);
        let (events, effects): (i64, i64) = (r.get(4), r.get(5));
        if outcome != "applied"
            || reference != Some(n.to_string())
            || order_status.as_deref() != Some("paid")
            || events != 1
            || effects != 1
        {
            bad_rows.push(format!(
                "{external}: outcome {outcome}, order {reference:?} {order_status:?}, \
                 {events} events, {effects} grants or receipts"
            ));
        }
    }
    if !bad_rows.is_empty() {
        failures.push(format!(
            "{} payments not applied exactly once (one event, one grant or receipt, order paid), e.g. {:?}",
            bad_rows.len(),
            &bad_rows[..bad_rows.len().min(5)]
        ));
    }
    let lost: Vec<i64> = acked
        .keys()
        .filter(|n| !stored.contains_key(n))
        .copied()
        .collect();
    if !lost.is_empty() {
        failures.push(format!(
            "{} acknowledged payments are missing on the new primary, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        ));
    }
    let doubled: Vec<i64> = stored
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(n, _)| *n)
        .collect();
    if !doubled.is_empty() {
        failures.push(format!("payments stored twice: {doubled:?}"));
    }
    let unasked: Vec<i64> = stored
        .keys()
        .filter(|n| !acked.contains_key(n))
        .copied()
        .collect();
    if !unasked.is_empty() {
        failures.push(format!(
            "payments stored but never acknowledged: {unasked:?}"
        ));
    }

    // Each membership: one extension per payment of its pair, each exactly one term, chained,
    // and the membership's expiry where the last one left it.
    let mut expected: HashMap<(i64, i64), i64> = HashMap::new();
    for n in acked.keys() {
        let pair = (n - 1) % pairs;
        *expected
            .entry((pair / CHANNELS + 1, pair % CHANNELS + 1))
            .or_default() += 1;
    }
    let rows = db
        .query(
            "SELECT m.subscriber_id::bigint, m.channel_id::bigint,
                    count(e.id),
                    count(*) FILTER (WHERE e.expires_at_before IS NOT NULL
                                       AND e.expires_at_after - e.expires_at_before
                                           <> make_interval(days => $1)),
                    bool_and(m.expires_at = (SELECT max(x.expires_at_after)
                                               FROM membership_events x
                                              WHERE x.membership_id = m.id)),
                    extract(epoch FROM m.expires_at - min(e.expires_at_after))::bigint,
                    (SELECT count(*) FROM effects f
                      WHERE f.membership_id = m.id AND f.kind = 'grant')
               FROM memberships m JOIN membership_events e ON e.membership_id = m.id
              GROUP BY m.id",
            &[&PERIOD_DAYS],
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut bad = Vec::new();
    let mut seen = 0;
    for r in &rows {
        let pair = (r.get::<_, i64>(0), r.get::<_, i64>(1));
        let (events, off_term, at_last, span, grants): (i64, i64, bool, i64, i64) =
            (r.get(2), r.get(3), r.get(4), r.get(5), r.get(6));
        let want = expected.get(&pair).copied().unwrap_or(0);
        seen += 1;
        if events != want
            || off_term != 0
            || !at_last
            || span != (want - 1) * i64::from(PERIOD_DAYS) * 86_400
            || grants != 1
        {
            bad.push(format!(
                "{pair:?}: {events} events for {want} payments, {off_term} not one term, \
                 expiry at the last event: {at_last}, span {span} s, {grants} grants"
            ));
        }
    }
    if seen != expected.len() {
        bad.push(format!(
            "{seen} memberships for {} paid pairs",
            expected.len()
        ));
    }
    if !bad.is_empty() {
        failures.push(format!(
            "{} memberships not extended once per payment, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        ));
    }
    let most = expected.values().max().copied().unwrap_or(0);
    progress(format!(
        "new primary: {} payments, {seen} memberships (up to {most} of {per_pair} payments each)",
        stored.len()
    ));
    Ok(failures)
}
