//! The two phases — a free broadcast through a crash, a paid one within its budget — and the
//! figures and goals they report.

use std::{
    ops::RangeInclusive,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use subgate::{app::worker::Options, telegram_api::client::GLOBAL_RATE};

use crate::{
    FREE_BASE, FREE_CHAT, PAID_BASE, PAID_CHAT, PAYER_BASE, Rig, Sizes,
    api::Broadcast,
    audit::{Audit, Rate, seconds_tsv, sustained, unretried},
    channel_id, common,
    fake_bot::{Accepted, GLOBAL_LIMIT, Refusal},
    pg, progress,
};

/// How long one payment's grant may take before it counts as not granted.
const GRANT_LIMIT: Duration = Duration::from_secs(30);
/// The grants' goal: p99 from the payment's 200 to the grant message.
const GRANT_P99_GOAL_MS: f64 = 1_000.0;
/// The paid broadcast's goal: messages a second while paying.
const PAID_RATE_GOAL: f64 = 900.0;
/// The free broadcast's rate may differ from the pacer's by this share.
const RATE_TOLERANCE: f64 = 0.10;
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

/// Sorted latencies.
#[derive(Debug, Default)]
pub struct Latencies {
    sorted: Vec<Duration>,
}

impl Latencies {
    fn new(mut all: Vec<Duration>) -> Latencies {
        all.sort();
        Latencies { sorted: all }
    }

    fn q(&self, q: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let i = ((self.sorted.len() as f64 * q).ceil() as usize).clamp(1, self.sorted.len()) - 1;
        self.sorted[i].as_secs_f64() * 1e3
    }
}

/// The free phase's figures.
#[derive(Debug, Default)]
pub struct Free {
    pub broadcast: Broadcast,
    pub audit: Audit,
    pub lanes: usize,
    pub kills: usize,
    /// Recipients reached when the server was killed, and the new server's start to ready.
    pub killed_at: usize,
    pub restart_ready: Duration,
    /// The recipients whose message the fake had delivered but not answered at the kill, and
    /// how many of them are counted `skipped`.
    pub held: Vec<i64>,
    pub held_skipped: usize,
    pub seconds: f64,
    pub rate: Rate,
    /// 429s the fake answered in the phase: all, to recipients, to recipients never retried.
    pub refused: u64,
    pub refused_recipients: usize,
    pub unretried: usize,
    pub grants: Latencies,
    pub ungranted: usize,
}

impl Free {
    fn rate_ok(&self) -> bool {
        let pace = f64::from(GLOBAL_RATE);
        self.rate.spans > 0 && (self.rate.per_sec() - pace).abs() <= pace * RATE_TOLERANCE
    }

    fn grants_ok(&self) -> bool {
        self.ungranted == 0
            && !self.grants.sorted.is_empty()
            && self.grants.q(0.99) <= GRANT_P99_GOAL_MS
    }
}

/// The paid phase's figures.
#[derive(Debug, Default)]
pub struct Paid {
    pub broadcast: Broadcast,
    pub audit: Audit,
    pub seconds: f64,
    /// The fastest sustained stretch: messages a second, and its length in seconds.
    pub sustained: f64,
    pub sustained_secs: usize,
    /// From the first message to the last paid one: messages, seconds.
    pub paying: (usize, f64),
    /// After the last billed message: messages, seconds.
    pub after_budget: (usize, f64),
    pub budget: i64,
    pub max_paid_seen: i64,
    /// The broadcast's rows marked as sent paid.
    pub rows_paid: i64,
    /// Messages the fake accepted with `allow_paid_broadcast`, and those it billed.
    pub flagged: usize,
    pub billed: usize,
    pub refused: u64,
    /// Of those, the 429s to messages sent paid.
    pub refused_paid: usize,
    pub unretried: usize,
    /// Where the CPU went while it sent (the machine's, the server's, the idle share).
    pub cpu: common::CpuClock,
}

impl Paid {
    fn budget_ok(&self) -> bool {
        self.max_paid_seen <= self.budget
            && self.broadcast.paid_messages <= self.budget
            && self.rows_paid <= self.budget
            && self.flagged as i64 <= self.budget
            && self.billed as i64 <= self.budget
    }
}

/// Both phases' figures (a phase left out is `None`).
#[derive(Debug, Default)]
pub struct Figures {
    pub free: Option<Free>,
    pub paid: Option<Paid>,
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

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

impl Figures {
    /// The goals missed, each with its figure.
    pub fn missed(&self) -> Vec<String> {
        let mut missed = Vec::new();
        if let Some(f) = &self.free {
            if !f.audit.exactly_once(f.lanes * f.kills) {
                missed.push(format!("free: exactly once: {}", f.audit.summary()));
            }
            if !f.audit.consistent() {
                missed.push(format!("free: counters and rows: {}", f.audit.summary()));
            }
            if !f.rate_ok() {
                missed.push(format!(
                    "free: rate {:.1} messages/s, the pacer's {GLOBAL_RATE} ± 10 %",
                    f.rate.per_sec()
                ));
            }
            if f.unretried > 0 {
                missed.push(format!("free: {} 429s never retried", f.unretried));
            }
            if !f.grants_ok() {
                missed.push(format!(
                    "free: grants p99 {:.0} ms ({} not granted within {GRANT_LIMIT:?})",
                    f.grants.q(0.99),
                    f.ungranted
                ));
            }
        }
        if let Some(p) = &self.paid {
            if p.sustained < PAID_RATE_GOAL {
                missed.push(format!(
                    "paid: {:.0} messages/s sustained (over {} s), goal ≥ {PAID_RATE_GOAL}",
                    p.sustained, p.sustained_secs
                ));
            }
            if !p.budget_ok() {
                missed.push(format!(
                    "paid: budget {} exceeded: paid_messages up to {} (final {}), rows paid {}, at the fake sent paid {} and billed {}",
                    p.budget,
                    p.max_paid_seen,
                    p.broadcast.paid_messages,
                    p.rows_paid,
                    p.flagged,
                    p.billed
                ));
            }
            if !p.audit.exactly_once(0) || !p.audit.consistent() {
                missed.push(format!("paid: exactly once: {}", p.audit.summary()));
            }
            if p.unretried > 0 {
                missed.push(format!("paid: {} 429s never retried", p.unretried));
            }
        }
        missed
    }

    pub fn report(&self, s: &Sizes) -> String {
        let mut t = String::from(
            "| broadcasts (fake Bot API at Telegram's limits) | figure | goal |\n|---|---|---|\n",
        );
        let mut row = |what: String, figure: String, goal: String| {
            t.push_str(&format!("| {what} | {figure} | {goal} |\n"));
        };
        if let Some(f) = &self.free {
            let allowed = f.lanes * f.kills;
            row(
                format!(
                    "free: {} recipients, `kill -9` at {} reached ({} %) with calls held mid-call; restart ready after",
                    s.free, f.killed_at, s.kill_at_percent
                ),
                format!(
                    "{} held ({} of them counted skipped); {:.0} ms; finished after {:.1} s",
                    f.held.len(),
                    f.held_skipped,
                    f.restart_ready.as_secs_f64() * 1e3,
                    f.seconds
                ),
                String::new(),
            );
            row(
                "free: each recipient reached (the fake's count per chat)".into(),
                f.audit.summary(),
                format!(
                    "exactly once, ≤ {allowed} missing and counted skipped: {}",
                    verdict(f.audit.exactly_once(allowed))
                ),
            );
            row(
                "free: counters (`GET /api/broadcasts/{id}`)".into(),
                format!("{}, status {}", f.broadcast.counters(), f.broadcast.status),
                format!("the rows': {}", verdict(f.audit.consistent())),
            );
            row(
                "free: messages per second while sending (all, the broadcast's)".into(),
                format!(
                    "{:.1}, {:.1} (over {:.0} s in {} spans)",
                    f.rate.per_sec(),
                    f.rate.selected_per_sec(),
                    f.rate.seconds,
                    f.rate.spans
                ),
                format!("{GLOBAL_RATE} ± 10 %: {}", verdict(f.rate_ok())),
            );
            row(
                "free: 429s answered by the fake (to recipients; never retried)".into(),
                format!("{} ({}; {})", f.refused, f.refused_recipients, f.unretried),
                format!("every one retried: {}", verdict(f.unretried == 0)),
            );
            row(
                format!(
                    "free: grants of {} payments during the broadcast: p50 / p99 / max",
                    f.grants.sorted.len() + f.ungranted
                ),
                format!(
                    "{:.0} / {:.0} / {:.0} ms{}",
                    f.grants.q(0.5),
                    f.grants.q(0.99),
                    f.grants.q(1.0),
                    if f.ungranted > 0 {
                        format!(" ({} not granted)", f.ungranted)
                    } else {
                        String::new()
                    }
                ),
                format!("p99 ≤ 1 s: {}", verdict(f.grants_ok())),
            );
        }
        if let Some(p) = &self.paid {
            row(
                format!(
                    "paid: {} recipients, max_stars {} ({} paid messages)",
                    s.paid, s.max_stars, p.budget
                ),
                format!("finished after {:.1} s", p.seconds),
                String::new(),
            );
            row(
                "paid: messages per second sustained (longest stretch)".into(),
                format!("{:.0} (over {} s)", p.sustained, p.sustained_secs),
                format!(
                    "≥ {PAID_RATE_GOAL:.0}: {}",
                    verdict(p.sustained >= PAID_RATE_GOAL)
                ),
            );
            let (cpu, n) = (&p.cpu, p.audit.recipients.max(1) as f64);
            let idle = cpu.idle.as_secs_f64() / (cpu.idle + cpu.machine).as_secs_f64().max(1e-9);
            row(
                "paid: CPU µs a message: machine, server, the benchmark (the fake); the cores idle"
                    .into(),
                format!(
                    "{:.0}, {:.0}, {:.0}; {:.0} %",
                    cpu.machine.as_secs_f64() * 1e6 / n,
                    cpu.other.as_secs_f64() * 1e6 / n,
                    cpu.own.as_secs_f64() * 1e6 / n,
                    idle * 100.0
                ),
                String::new(),
            );
            row(
                "paid: until the last billed message; after it".into(),
                format!(
                    "{} messages in {:.1} s; {} in {:.1} s",
                    p.paying.0, p.paying.1, p.after_budget.0, p.after_budget.1
                ),
                String::new(),
            );
            row(
                "paid: `paid_messages` highest seen / final; rows marked paid; the fake: billed / sent paid".into(),
                format!(
                    "{} / {}; {}; {} / {}",
                    p.max_paid_seen, p.broadcast.paid_messages, p.rows_paid, p.billed, p.flagged
                ),
                format!("≤ {}: {}", p.budget, verdict(p.budget_ok())),
            );
            row(
                "paid: each recipient reached; counters".into(),
                format!("{}; {}", p.audit.summary(), p.broadcast.counters()),
                format!(
                    "exactly once: {}",
                    verdict(p.audit.exactly_once(0) && p.audit.consistent())
                ),
            );
            row(
                "paid: 429s answered by the fake (to paid messages; never retried)".into(),
                format!("{} ({}; {})", p.refused, p.refused_paid, p.unretried),
                format!("every one retried: {}", verdict(p.unretried == 0)),
            );
        }
        t
    }

    pub fn tsv(&self) -> String {
        let mut lines: Vec<(&str, f64)> = Vec::new();
        if let Some(f) = &self.free {
            lines.extend([
                ("free_recipients", f.audit.recipients as f64),
                ("free_duplicates", f.audit.duplicates.len() as f64),
                ("free_missing", f.audit.missing.len() as f64),
                ("free_skipped", f.broadcast.skipped as f64),
                ("free_held_at_kill", f.held.len() as f64),
                ("free_messages_per_sec", f.rate.per_sec()),
                ("free_broadcast_per_sec", f.rate.selected_per_sec()),
                ("free_429s", f.refused as f64),
                ("free_429s_unretried", f.unretried as f64),
                ("free_grant_p50_ms", f.grants.q(0.5)),
                ("free_grant_p99_ms", f.grants.q(0.99)),
            ]);
        }
        if let Some(p) = &self.paid {
            lines.extend([
                ("paid_recipients", p.audit.recipients as f64),
                ("paid_sustained_per_sec", p.sustained),
                ("paid_messages", p.broadcast.paid_messages as f64),
                ("paid_budget", p.budget as f64),
                ("paid_billed_by_fake", p.billed as f64),
                ("paid_duplicates", p.audit.duplicates.len() as f64),
                ("paid_missing", p.audit.missing.len() as f64),
                ("paid_429s", p.refused as f64),
            ]);
        }
        lines
            .iter()
            .map(|(k, v)| format!("{k}\t{v:.3}\n"))
            .collect()
    }
}
