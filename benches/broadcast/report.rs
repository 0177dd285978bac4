//! The figures of the two phases, the goals they are held to, and the table, the `key<TAB>value`
//! lines and the list of goals missed made of them.

use std::time::Duration;

use subgate::telegram_api::client::GLOBAL_RATE;

use crate::{
    Sizes,
    api::Broadcast,
    audit::{Audit, Rate},
    common::{self, Latencies},
    phases::GRANT_LIMIT,
};

/// The grants' goal: p99 from the payment's 200 to the grant message.
const GRANT_P99_GOAL_MS: f64 = 1_000.0;
/// The paid broadcast's goal: messages a second while paying.
const PAID_RATE_GOAL: f64 = 900.0;
/// The free broadcast's rate may differ from the pacer's by this share.
const RATE_TOLERANCE: f64 = 0.10;

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
        self.ungranted == 0 && !self.grants.is_empty() && self.grants.q(0.99) <= GRANT_P99_GOAL_MS
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
                    f.grants.len() + f.ungranted
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
