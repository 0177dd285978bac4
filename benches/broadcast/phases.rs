//! The two phases — a free broadcast through a crash, a paid one within its budget — each
//! measured into its figures ([`crate::report`]).

use std::{
    ops::RangeInclusive,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use subgate::{app::worker::Options, telegram_api::client::GLOBAL_RATE};

use crate::{
    FREE_BASE, FREE_CHAT, PAID_BASE, PAID_CHAT, PAYER_BASE, Rig, Sizes,
    audit::{Audit, Rate, seconds_tsv, sustained, unretried},
    channel_id,
    common::{self, Latencies},
    fake_bot::{Accepted, GLOBAL_LIMIT, Refusal},
    pg, progress,
    report::{Figures, Free, Paid},
};

/// How long one payment's grant may take before it counts as not granted.
pub const GRANT_LIMIT: Duration = Duration::from_secs(30);
/// Telegram ids of one broadcast's recipients lie in `base + 1 ..= base + ID_SPACE`.
const ID_SPACE: i64 = 9_999_999;

fn texts(what: &str) -> Value {
    json!({
        "en": format!("Benchmark: a {what} broadcast to members."),
        "uk": format!("Бенчмарк: {what} розсилка учасникам."),
        "ru": format!("Бенчмарк: {what} рассылка участникам."),
    })
}

/// Each row's chat (the recipient's Telegram id) and outcome (`None`: pending).
async fn rows(
    pool: &deadpool_postgres::Pool,
    broadcast: i64,
) -> Result<Vec<(i64, Option<String>)>, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let rows = client
        .query(
            "SELECT s.telegram_user_id::bigint AS chat, m.outcome::text AS outcome
             FROM messages m JOIN subscribers s ON s.id = m.subscriber_id
             WHERE m.broadcast_id = $1::bigint",
            &[&broadcast],
        )
        .await
        .map_err(|e| format!("the broadcast's rows: {}", pg(e)))?;
    Ok(rows
        .iter()
        .map(|r| (r.get("chat"), r.get("outcome")))
        .collect())
}

/// The broadcast's rows marked as sent paid.
async fn paid_rows(pool: &deadpool_postgres::Pool, broadcast: i64) -> Result<i64, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT count(*) AS n FROM messages WHERE broadcast_id = $1::bigint AND paid",
            &[&broadcast],
        )
        .await
        .map_err(|e| format!("the broadcast's paid rows: {}", pg(e)))?;
    Ok(row.get("n"))
}

pub async fn run(s: &Sizes, rig: &mut Rig<'_>) -> Result<Figures, String> {
    let mut figures = Figures::default();
    if s.free > 0 {
        figures.free = Some(free(s, rig).await?);
        // Let the fake's window empty before the next phase.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if s.paid > 0 {
        figures.paid = Some(paid(s, rig).await?);
    }
    Ok(figures)
}

/// Leaves the phase's second-by-second figures in `target/tmp/bench/broadcast-<phase>.tsv`.
fn keep_seconds(
    phase: &str,
    all: &[Accepted],
    refusals: &[Refusal],
    start: Instant,
    recipients: &RangeInclusive<i64>,
) {
    if let Ok(dir) = common::work_dir() {
        let path = dir.join(format!("broadcast-{phase}.tsv"));
        let tsv = seconds_tsv(all, refusals, start, |c| recipients.contains(&c));
        if std::fs::write(&path, tsv).is_ok() {
            progress(format!("{phase}: second by second in {}", path.display()));
        }
    }
}

/// The phase's messages to the chats of `base`'s id space.
fn of_space(messages: &[Accepted], base: i64) -> Vec<Accepted> {
    let space = base + 1..=base + ID_SPACE;
    messages
        .iter()
        .filter(|m| space.contains(&m.chat))
        .copied()
        .collect()
}

async fn free(s: &Sizes, rig: &mut Rig<'_>) -> Result<Free, String> {
    let recipients: RangeInclusive<i64> = FREE_BASE + 1..=FREE_BASE + s.free;
    let channel = channel_id(&rig.pool, FREE_CHAT).await?;
    let (seen, refused_before) = (rig.fake.messages().len(), rig.fake.counts().refused);
    let seen_refusals = rig.fake.refusals().len();
    let created = rig
        .api
        .create_broadcast(&json!({
            "texts": texts("free"),
            "segment": {"channel_ids": [channel]},
        }))
        .await?;
    let started = Instant::now();
    if created.recipients != s.free {
        return Err(format!(
            "free broadcast: {} recipients, {} members in its segment",
            created.recipients, s.free
        ));
    }
    let kill_at = (s.free * s.kill_at_percent / 100) as usize;
    progress(format!(
        "free: broadcast {} to {} members; kill -9 of the server at {kill_at} reached, a payment every {} ms",
        created.id, s.free, s.pay_every_ms
    ));
    let mut f = Free {
        lanes: Options::default().concurrency,
        ..Free::default()
    };
    let pay_every = Duration::from_millis(s.pay_every_ms as u64);
    let limit = Duration::from_secs_f64(s.free as f64 / f64::from(GLOBAL_RATE) * 2.0 + 180.0);
    let (mut grants, mut payer, mut said) = (Vec::new(), 0, Instant::now());
    let mut crashes = Vec::new();
    let last = loop {
        let tick = tokio::time::Instant::now() + pay_every;
        let reached = rig.fake.chats_messaged_in(recipients.clone());
        if f.kills == 0 && reached >= kill_at {
            // Crash mid-call: the fake delivers the next message of each lane but keeps its
            // answer back, and the server is killed while they wait for it.
            rig.fake.hold_messages(recipients.clone(), f.lanes);
            let give_up = Instant::now() + Duration::from_secs(3);
            while rig.fake.held().len() < f.lanes && Instant::now() < give_up {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            f.killed_at = rig.fake.chats_messaged_in(recipients.clone());
            crashes.push(Instant::now());
            f.restart_ready = rig.crash_and_restart().await?;
            rig.fake.release();
            f.held = rig.fake.held();
            f.kills += 1;
            progress(format!(
                "free: killed the server at {} reached, {} calls held mid-call; the new one ready after {:.0} ms",
                f.killed_at,
                f.held.len(),
                f.restart_ready.as_secs_f64() * 1e3
            ));
            continue;
        }
        if payer < s.payers() {
            payer += 1;
            let chat = PAYER_BASE + payer;
            let paid = rig.payer.pay(payer).await?;
            match rig.fake.first_message(chat, GRANT_LIMIT).await {
                Some(at) => grants.push(at.saturating_duration_since(paid)),
                None => f.ungranted += 1,
            }
        }
        let b = rig.api.broadcast(created.id).await?;
        if b.status == "finished" {
            break b;
        }
        if b.status == "cancelled" || started.elapsed() > limit {
            return Err(format!(
                "free broadcast: {} after {:.0} s ({}; {reached} reached at the fake)",
                b.status,
                started.elapsed().as_secs_f64(),
                b.counters()
            ));
        }
        if said.elapsed() > Duration::from_secs(10) {
            said = Instant::now();
            progress(format!(
                "free: {reached} reached at the fake; {}",
                b.counters()
            ));
        }
        tokio::time::sleep_until(tick).await;
    };
    f.seconds = started.elapsed().as_secs_f64();
    progress(format!(
        "free: finished after {:.1} s: {}",
        f.seconds,
        last.counters()
    ));
    let all: Vec<Accepted> = rig.fake.messages()[seen..].to_vec();
    let ours = of_space(&all, FREE_BASE);
    let rows = rows(&rig.pool, created.id).await?;
    f.held_skipped = rows
        .iter()
        .filter(|(chat, outcome)| f.held.contains(chat) && outcome.as_deref() == Some("skipped"))
        .count();
    f.audit = Audit::of(recipients.clone(), &ours, &rows, &last);
    // The pace while the broadcast was sending: every message the fake accepted (the grants'
    // too: one pacer), from the broadcast's first message to its last, in the spans without a
    // gap over a second, apart on either side of the crash.
    let (first, end) = (
        ours.iter().map(|m| m.at).min(),
        ours.iter().map(|m| m.at).max(),
    );
    if let (Some(first), Some(end)) = (first, end) {
        let during: Vec<Accepted> = all
            .iter()
            .filter(|m| m.at >= first && m.at <= end)
            .copied()
            .collect();
        f.rate = Rate::measure(
            &during,
            |m| recipients.contains(&m.chat),
            &crashes,
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
    }
    let refusals = rig.fake.refusals()[seen_refusals..].to_vec();
    keep_seconds("free", &all, &refusals, started, &recipients);
    f.refused = rig.fake.counts().refused - refused_before;
    (f.refused_recipients, f.unretried) = unretried(&recipients, &refusals, &ours);
    f.grants = Latencies::new(grants);
    f.broadcast = last;
    Ok(f)
}

async fn paid(s: &Sizes, rig: &mut Rig<'_>) -> Result<Paid, String> {
    let recipients: RangeInclusive<i64> = PAID_BASE + 1..=PAID_BASE + s.paid;
    let channel = channel_id(&rig.pool, PAID_CHAT).await?;
    let seen = rig.fake.messages().len();
    let (seen_refusals, refused_before) = (rig.fake.refusals().len(), rig.fake.counts().refused);
    let budget = s.max_stars * 10;
    let created = rig
        .api
        .create_broadcast(&json!({
            "texts": texts("paid"),
            "segment": {"channel_ids": [channel]},
            "paid": {"max_stars": s.max_stars},
        }))
        .await?;
    let started = Instant::now();
    let cpu_before = common::CpuClock::now(Some(rig.server.pid()));
    if created.recipients != s.paid {
        return Err(format!(
            "paid broadcast: {} recipients, {} members in its segment",
            created.recipients, s.paid
        ));
    }
    progress(format!(
        "paid: broadcast {} to {} members, max_stars {} ({budget} paid messages)",
        created.id, s.paid, s.max_stars
    ));
    let mut p = Paid {
        budget,
        max_paid_seen: created.paid_messages,
        ..Paid::default()
    };
    let free_tail = (s.paid - budget).max(0) as f64 / f64::from(GLOBAL_RATE);
    let limit = Duration::from_secs_f64(s.paid as f64 / 300.0 + free_tail * 2.0 + 180.0);
    let mut said = Instant::now();
    let last = loop {
        let tick = tokio::time::Instant::now() + Duration::from_millis(500);
        let b = rig.api.broadcast(created.id).await?;
        p.max_paid_seen = p.max_paid_seen.max(b.paid_messages);
        if b.status == "finished" {
            break b;
        }
        if b.status == "cancelled" || started.elapsed() > limit {
            return Err(format!(
                "paid broadcast: {} after {:.0} s ({}, paid_messages {})",
                b.status,
                started.elapsed().as_secs_f64(),
                b.counters(),
                b.paid_messages
            ));
        }
        if said.elapsed() > Duration::from_secs(10) {
            said = Instant::now();
            progress(format!(
                "paid: {}; paid_messages {}",
                b.counters(),
                b.paid_messages
            ));
        }
        tokio::time::sleep_until(tick).await;
    };
    p.seconds = started.elapsed().as_secs_f64();
    p.cpu = common::CpuClock::now(Some(rig.server.pid())).since(&cpu_before);
    progress(format!(
        "paid: finished after {:.1} s: {}; paid_messages {}",
        p.seconds,
        last.counters(),
        last.paid_messages
    ));
    let all: Vec<Accepted> = rig.fake.messages()[seen..].to_vec();
    let ours = of_space(&all, PAID_BASE);
    p.audit = Audit::of(
        recipients.clone(),
        &ours,
        &rows(&rig.pool, created.id).await?,
        &last,
    );
    (p.sustained, p.sustained_secs) = sustained(&ours, started, 2 * GLOBAL_LIMIT);
    p.rows_paid = paid_rows(&rig.pool, created.id).await?;
    p.flagged = ours.iter().filter(|m| m.paid).count();
    p.billed = ours.iter().filter(|m| m.billed).count();
    let first = ours.iter().map(|m| m.at).min();
    let last_paid = ours.iter().filter(|m| m.billed).map(|m| m.at).max();
    let end = ours.iter().map(|m| m.at).max();
    if let (Some(first), Some(last_paid), Some(end)) = (first, last_paid, end) {
        let paying = ours.iter().filter(|m| m.at <= last_paid).count();
        p.paying = (paying, (last_paid - first).as_secs_f64());
        p.after_budget = (ours.len() - paying, (end - last_paid).as_secs_f64());
    }
    let refusals = rig.fake.refusals()[seen_refusals..].to_vec();
    keep_seconds("paid", &all, &refusals, started, &recipients);
    p.refused = rig.fake.counts().refused - refused_before;
    p.refused_paid = refusals.iter().filter(|r| r.paid).count();
    p.unretried = unretried(&recipients, &refusals, &ours).1;
    p.broadcast = last;
    Ok(p)
}
