//! `make bench`: how fast the sweep moves overdue memberships, against references measured in the
//! same run on the same data — the naive way (one transaction per membership: lock, re-read,
//! update, event, commit) and two lock-free single statements: one that writes only the status
//! and the events, and the fair floor, which makes exactly the sweep's writes (status, one
//! `membership_events` row and one queued effect, a `sweep_queue` row, per transition, with the
//! sweep's own SQL) for everything at once. After the sweep it also times what the effects
//! worker then does off the sweep's path: the queued rows made `effects` rows, chunk by chunk.
//! While the sweep runs, a probe plays a renewal that collides with it: it picks a pair whose lock
//! a sweep batch holds right now and times how long `pg_advisory_xact_lock` waits for it.
//!
//! A plain `harness = false` main (no criterion): each measurement is one long run over a
//! freshly built table, not a micro-benchmark to repeat. `cargo test` does not build or run it.
//!
//! Environment: `SUBGATE_TEST_DATABASE_URL` (admin URL; `make bench` sets it; default
//! `postgres://postgres@127.0.0.1:5432/postgres`), `SWEEP_BENCH_ROWS` (overdue memberships,
//! default 100000), `SWEEP_BENCH_NAIVE_ROWS` (the naive baseline's sample, default 5000),
//! `SWEEP_BENCH_BATCH` (rows per batch, default the sweep's), `SWEEP_BENCH_PROBE=0` (no renewal
//! probe), `SUBGATE_BENCH_RESULTS` (a directory: the figures are also left there in `sweep.tsv`,
//! for the summary `make bench` prints after the payment benchmark), `SUBGATE_BENCH_RUN` (a tag
//! for the database's name). The benchmark creates its own database and drops it at the end (and
//! drops databases an interrupted run left behind and no one is connected to).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use subgate::{
    access::sweep::{self, Status, next_sweep_status},
    db,
};
use tokio_postgres::NoTls;

#[path = "common/mod.rs"]
mod common;
use common::{admin_url, url_for};

const CHANNELS: i64 = 10;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a positive integer")),
        _ => default,
    }
}

async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&admin_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL ({e}); run `make bench`"));
    tokio::spawn(conn);
    client
}

fn main() {
    // `cargo bench [FILTER]` passes the filter (and `--bench`) on; honour a filter that is not us.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| "sweep".contains(f.as_str())) {
        return;
    }
    // `scripts/bench.sh` stops what its run started if it is interrupted.
    if let Some(path) = std::env::var_os("SUBGATE_BENCH_PIDFILE").filter(|p| !p.is_empty())
        && let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
    {
        use std::io::Write;
        let _ = writeln!(f, "{}", std::process::id());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let rows = env_usize("SWEEP_BENCH_ROWS", 100_000) as i64;
    let naive_rows = env_usize("SWEEP_BENCH_NAIVE_ROWS", 5_000).min(rows as usize) as i64;
    let batch = env_usize("SWEEP_BENCH_BATCH", sweep::DEFAULT_BATCH_SIZE);
    // `scripts/bench.sh` tags its run's databases, so it can drop them if interrupted.
    let tag = std::env::var("SUBGATE_BENCH_RUN")
        .ok()
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|t| t.to_lowercase())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let name = format!("subgate_bench_sweep_{tag}");
    let admin = admin().await;
    // Databases left by an interrupted run; one in use (another run's) refuses to go.
    let stale = admin
        .query(
            r"SELECT datname FROM pg_database WHERE datname LIKE 'subgate\_bench\_%'",
            &[],
        )
        .await
        .unwrap();
    for row in stale {
        let db: String = row.get(0);
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{db}\""))
            .await;
    }
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap();
    let pool = db::pool(&url_for(&name), 4).unwrap();
    db::migrate(&pool).await.unwrap();

    let result = bench(&pool, rows, naive_rows, batch).await;

    pool.close();
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .unwrap();
    result.print(rows, naive_rows, batch);
    if let Some(dir) = std::env::var_os("SUBGATE_BENCH_RESULTS").filter(|d| !d.is_empty()) {
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        std::fs::write(dir.join("sweep.tsv"), result.tsv(rows))
            .unwrap_or_else(|e| eprintln!("[bench] cannot write sweep.tsv: {e}"));
    }
}

struct Results {
    populate: Duration,
    report: sweep::SweepReport,
    sweep: Duration,
    set_based: Duration,
    set_same_writes: Duration,
    /// The worker's part after the sweep: its queued effects made `effects` rows, chunk by chunk.
    materialize: Duration,
    naive: Duration,
    probe_waits: Vec<Duration>,
}

impl Results {
    /// The figures the `make bench` summary needs, as `key<TAB>value` lines.
    fn tsv(&self, rows: i64) -> String {
        let mut waits = self.probe_waits.clone();
        waits.sort();
        let p99 = waits
            .get(((waits.len().max(1) - 1) as f64 * 0.99).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        [
            ("rows", rows as f64),
            ("sweep_s", self.sweep.as_secs_f64()),
            ("set_based_s", self.set_based.as_secs_f64()),
            ("same_writes_s", self.set_same_writes.as_secs_f64()),
            ("materialize_s", self.materialize.as_secs_f64()),
            (
                "sweep_vs_status_events",
                self.sweep.as_secs_f64() / self.set_based.as_secs_f64(),
            ),
            ("probes", waits.len() as f64),
            ("probe_p99_ms", p99),
        ]
        .iter()
        .map(|(k, v)| format!("{k}\t{v:.3}\n"))
        .collect()
    }

    fn print(&self, rows: i64, naive_rows: i64, batch: usize) {
        let rate = |n: i64, d: Duration| n as f64 / d.as_secs_f64();
        let sweep_rate = rate(rows, self.sweep);
        let naive_rate = rate(naive_rows, self.naive);
        let set_rate = rate(rows, self.set_based);
        let same_rate = rate(rows, self.set_same_writes);
        println!();
        println!("sweep benchmark: {rows} overdue memberships in {CHANNELS} channels");
        println!(
            "  populate (generate_series, untimed below): {:.1} s",
            self.populate.as_secs_f64()
        );
        println!(
            "  report: examined {}, to_grace {}, to_expired {}, skipped {}",
            self.report.examined, self.report.to_grace, self.report.to_expired, self.report.skipped
        );
        println!(
            "  {:<56} {:>9} {:>10} {:>12}",
            "method", "rows", "seconds", "rows/s"
        );
        for (label, n, d, r) in [
            (
                format!("sweep (batches of {batch}, try-locks)"),
                rows,
                self.sweep,
                sweep_rate,
            ),
            (
                "naive: one transaction per row".to_string(),
                naive_rows,
                self.naive,
                naive_rate,
            ),
            (
                "set-based UPDATE + events, no locks, no effects".to_string(),
                rows,
                self.set_based,
                set_rate,
            ),
            (
                "set-based, same writes as the sweep, no locks (floor)".to_string(),
                rows,
                self.set_same_writes,
                same_rate,
            ),
        ] {
            println!("  {label:<56} {n:>9} {:>10.2} {r:>12.0}", d.as_secs_f64());
        }
        println!(
            "  then, off the sweep's path, the worker makes effects of its {rows} queued rows \
             (chunks of {}): {:.2} s",
            subgate::outbox::effects::SWEEP_QUEUE_CHUNK,
            self.materialize.as_secs_f64()
        );
        println!(
            "  sweep vs naive: {:.1}x faster; naive would take {:.0} s for these {rows} rows",
            sweep_rate / naive_rate,
            rows as f64 / naive_rate
        );
        println!(
            "  sweep vs set-based status + events (no effects; goal at 1M: at most 2x): {:.2}x the time",
            self.sweep.as_secs_f64() / self.set_based.as_secs_f64()
        );
        println!(
            "  sweep vs set-based with the same writes: {:.2}x the time",
            self.sweep.as_secs_f64() / self.set_same_writes.as_secs_f64()
        );
        let mut waits = self.probe_waits.clone();
        waits.sort();
        if waits.is_empty() {
            println!("  renewal probe: no collision observed");
        } else {
            let pick = |q: f64| waits[((waits.len() - 1) as f64 * q).round() as usize];
            println!(
                "  renewal colliding with a sweep batch ({} probes): waited median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                waits.len(),
                pick(0.5).as_secs_f64() * 1e3,
                pick(0.99).as_secs_f64() * 1e3,
                waits.last().unwrap().as_secs_f64() * 1e3
            );
        }
    }
}

async fn bench(pool: &Pool, rows: i64, naive_rows: i64, batch: usize) -> Results {
    let started = Instant::now();
    populate(pool, rows).await;
    let populate_time = started.elapsed();
    eprintln!(
        "[bench] {rows} memberships inserted in {:.1} s",
        populate_time.as_secs_f64()
    );

    // 1. The sweep, with a renewal probe colliding with it.
    let stop = Arc::new(AtomicBool::new(false));
    let probing = env_usize("SWEEP_BENCH_PROBE", 1) != 0;
    let probe = tokio::spawn(probe(pool.clone(), stop.clone(), probing));
    let started = Instant::now();
    let report = sweep::sweep(pool, batch).await.expect("the sweep runs");
    let sweep_time = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let probe_waits = probe.await.unwrap();
    assert_eq!(report.examined as i64, rows);
    assert_eq!((report.to_grace + report.to_expired) as i64, rows);
    assert_eq!(report.skipped, 0);
    check_swept(pool, rows, rows).await;
    eprintln!("[bench] sweep: {:.2} s", sweep_time.as_secs_f64());

    // 1b. What the effects worker does with the sweep's queue, off the sweep's path: a chunk
    // whenever its lanes run dry (timed here back to back, without performing anything).
    let started = Instant::now();
    {
        let client = pool.get().await.unwrap();
        while subgate::outbox::effects::materialize_sweep_queue(&client)
            .await
            .unwrap()
            > 0
        {}
    }
    let materialize = started.elapsed();
    check_swept(pool, rows, rows).await;
    eprintln!(
        "[bench] the queue made effects: {:.2} s",
        materialize.as_secs_f64()
    );

    // 2. One UPDATE for everything, no locks, events in the same statement, no effects.
    reset(pool, None).await;
    let started = Instant::now();
    let n = pool
        .get()
        .await
        .unwrap()
        .execute(
            "WITH updated AS (
                 UPDATE memberships m
                 SET status = CASE
                         WHEN m.expires_at + make_interval(days => ch.grace_period_days)
                              <= statement_timestamp() THEN 'expired' ELSE 'grace' END,
                     updated_at = statement_timestamp()
                 FROM channels ch
                 WHERE ch.id = m.channel_id AND m.status <> 'expired'
                   AND m.expires_at <= statement_timestamp()
                 RETURNING m.id, m.status, m.expires_at
             )
             INSERT INTO membership_events
                 (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause)
             SELECT id, 'active', status, expires_at, expires_at, 'sweep' FROM updated",
            &[],
        )
        .await
        .unwrap();
    let set_based = started.elapsed();
    assert_eq!(n as i64, rows);
    check_swept(pool, rows, 0).await;
    eprintln!("[bench] set-based: {:.2} s", set_based.as_secs_f64());

    // 3. The floor: one statement, no locks, the sweep's writes — status, events and queued
    // effects (the sweep's own events and effects CTEs, so the same rows).
    // Every row starts `active` (reset), which stands in for the status the sweep reads before
    // deciding.
    reset(pool, None).await;
    let started = Instant::now();
    let n: i64 = pool
        .get()
        .await
        .unwrap()
        .query_one(
            &format!(
                "WITH updated AS (
                     UPDATE memberships m
                     SET status = CASE
                             WHEN m.expires_at + make_interval(days => ch.grace_period_days)
                                  <= statement_timestamp() THEN 'expired' ELSE 'grace' END,
                         updated_at = statement_timestamp()
                     FROM channels ch
                     WHERE ch.id = m.channel_id AND m.status <> 'expired'
                       AND m.expires_at <= statement_timestamp()
                     RETURNING m.id, m.subscriber_id, m.channel_id, 'active'::text AS from_status,
                               m.status, m.expires_at
                 ), {}, {}
                 SELECT count(*) FROM updated",
                sweep::SWEEP_EVENTS_CTE,
                subgate::outbox::effects::SWEEP_EFFECTS_CTE
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let set_same_writes = started.elapsed();
    assert_eq!(n, rows);
    check_swept(pool, rows, rows).await;
    eprintln!(
        "[bench] set-based, same writes: {:.2} s",
        set_same_writes.as_secs_f64()
    );

    // 4. The naive baseline on a sample: one transaction per membership.
    let ids = reset(pool, Some(naive_rows)).await;
    let started = Instant::now();
    naive(pool, &ids).await;
    let naive_time = started.elapsed();
    eprintln!("[bench] naive: {:.2} s", naive_time.as_secs_f64());

    Results {
        populate: populate_time,
        report,
        sweep: sweep_time,
        set_based,
        set_same_writes,
        materialize,
        naive: naive_time,
        probe_waits,
    }
}

/// `rows` active memberships, all overdue by one minute to ten days, in ten channels (half with
/// three days of grace, half without): every row is a candidate, about 15% go to grace.
async fn populate(pool: &Pool, rows: i64) {
    let client = pool.get().await.unwrap();
    let subscribers = (rows + CHANNELS - 1) / CHANNELS;
    client
        .batch_execute(&format!(
            "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                                   billing_period_days, grace_period_days)
             SELECT -1000 - g, 'bench ' || g, 19900, 'UAH', 30, CASE WHEN g % 2 = 0 THEN 3 ELSE 0 END
             FROM generate_series(1, {CHANNELS}) g;
             INSERT INTO subscribers (telegram_user_id)
             SELECT g FROM generate_series(1, {subscribers}) g;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT s.id, c.id, 'active',
                    statement_timestamp() - interval '1 minute' - random() * interval '10 days'
             FROM subscribers s CROSS JOIN channels c
             ORDER BY s.id, c.id
             LIMIT {rows};"
        ))
        .await
        .unwrap();
    // VACUUM cannot share a (multi-statement, implicitly transactional) batch.
    client
        .batch_execute("VACUUM ANALYZE subscribers, channels, memberships")
        .await
        .unwrap();
    // Every timed method starts with no dirty buffers left by the set-up to write out.
    client.batch_execute("CHECKPOINT").await.unwrap();
}

/// Every row is grace or expired as `next_sweep_status` says, with one sweep event each, and
/// there are `effects` effects (one revoke or grace notice per transition, or none), queued
/// or made.
async fn check_swept(pool: &Pool, rows: i64, effects: i64) {
    let client = pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE m.status = 'active'),
                    count(*) FILTER (WHERE m.status <> CASE
                        WHEN m.expires_at + make_interval(days => ch.grace_period_days)
                             <= statement_timestamp() THEN 'expired' ELSE 'grace' END),
                    (SELECT count(*) FROM membership_events WHERE cause = 'sweep'),
                    (SELECT count(*) FROM effects WHERE kind IN ('revoke', 'grace_notice'))
                    + (SELECT count(*) FROM sweep_queue)
             FROM memberships m JOIN channels ch ON ch.id = m.channel_id",
            &[],
        )
        .await
        .unwrap();
    let (active, wrong, events, enqueued): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(active, 0);
    // A row at most a few seconds from its grace end may have crossed it since the sweep.
    assert!(wrong * 1000 <= rows, "{wrong} rows have the wrong status");
    assert_eq!(events, rows);
    assert_eq!(enqueued, effects);
}

/// Makes memberships active again and forgets the events and effects (all of them, or a sample
/// of `limit`);
/// returns the ids made active.
async fn reset(pool: &Pool, limit: Option<i64>) -> Vec<i64> {
    let client = pool.get().await.unwrap();
    let ids: Vec<i64> = client
        .query(
            "WITH r AS (
                 UPDATE memberships SET status = 'active'
                 WHERE id IN (SELECT id FROM memberships ORDER BY id LIMIT $1)
                 RETURNING id
             ) SELECT id FROM r ORDER BY id",
            &[&limit],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    client
        .batch_execute("TRUNCATE membership_events, effects, sweep_queue")
        .await
        .unwrap();
    client
        .batch_execute("VACUUM ANALYZE memberships, membership_events, effects, sweep_queue")
        .await
        .unwrap();
    client.batch_execute("CHECKPOINT").await.unwrap();
    ids
}

/// The naive sweep: per membership one transaction that takes the pair lock, re-reads the row
/// with its grace and database time, decides with `next_sweep_status`, updates and writes the
/// event.
async fn naive(pool: &Pool, ids: &[i64]) {
    let mut client = pool.get().await.unwrap();
    let pair = client
        .prepare("SELECT subscriber_id, channel_id FROM memberships WHERE id = $1")
        .await
        .unwrap();
    let lock = client
        .prepare("SELECT pg_advisory_xact_lock($1, $2)")
        .await
        .unwrap();
    let read = client
        .prepare(
            "SELECT m.status, m.expires_at, ch.grace_period_days, statement_timestamp()
             FROM memberships m JOIN channels ch ON ch.id = m.channel_id
             WHERE m.id = $1 FOR UPDATE OF m",
        )
        .await
        .unwrap();
    let update = client
        .prepare(
            "UPDATE memberships SET status = $2, updated_at = statement_timestamp() WHERE id = $1",
        )
        .await
        .unwrap();
    let event = client
        .prepare(
            "INSERT INTO membership_events
                 (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause)
             VALUES ($1, $2, $3, $4, $4, 'sweep')",
        )
        .await
        .unwrap();
    for id in ids {
        let p = client.query_one(&pair, &[id]).await.unwrap();
        let (s, c): (i32, i32) = (p.get(0), p.get(1));
        let tx = client.transaction().await.unwrap();
        tx.execute(&lock, &[&s, &c]).await.unwrap();
        let r = tx.query_one(&read, &[id]).await.unwrap();
        let from = Status::parse(r.get(0)).unwrap();
        let expires_at: DateTime<Utc> = r.get(1);
        let to = next_sweep_status(from, expires_at, r.get(3), r.get(2));
        if to != from {
            tx.execute(&update, &[id, &to.as_str()]).await.unwrap();
            tx.execute(&event, &[id, &from.as_str(), &to.as_str(), &expires_at])
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
    }
}

/// A renewal that collides with the sweep: find a pair whose advisory lock is held right now (by a
/// sweep batch), then take that lock as a payment would and time the wait. Returns the waits.
async fn probe(pool: Pool, stop: Arc<AtomicBool>, enabled: bool) -> Vec<Duration> {
    let mut client = pool.get().await.unwrap();
    let mut waits = Vec::new();
    if !enabled {
        return waits;
    }
    // Prepared once: the probe is instrumentation, and its own parsing and planning would take
    // the cores from the sweep it measures.
    let find = client
        .prepare(
            "SELECT classid::bigint, objid::bigint FROM pg_locks
             WHERE locktype = 'advisory' AND objsubid = 2 AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
             LIMIT 1",
        )
        .await
        .unwrap();
    let lock = client
        .prepare("SELECT pg_advisory_xact_lock($1, $2)")
        .await
        .unwrap();
    while !stop.load(Ordering::Relaxed) {
        let held = client.query_opt(&find, &[]).await.unwrap();
        if let Some(row) = held {
            let (s, c) = (row.get::<_, i64>(0) as i32, row.get::<_, i64>(1) as i32);
            let tx = client.transaction().await.unwrap();
            let started = Instant::now();
            tx.execute(&lock, &[&s, &c]).await.unwrap();
            waits.push(started.elapsed());
            tx.commit().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    waits
}
