//! What a broadcast left behind, checked recipient by recipient: the messages the fake Bot API
//! accepted for each recipient's chat against the outcome of the recipient's `messages` row and
//! the broadcast's counters; and the rates the fake's records show.

use std::{
    collections::{BTreeMap, HashMap},
    ops::RangeInclusive,
    time::{Duration, Instant},
};

use crate::{
    api::Broadcast,
    fake_bot::{Accepted, Refusal},
};

/// One broadcast's recipients, chat by chat.
#[derive(Debug, Default)]
pub struct Audit {
    pub recipients: usize,
    /// Recipients the fake accepted exactly one message for.
    pub reached_once: usize,
    /// Recipients the fake accepted more than one message for, with how many.
    pub duplicates: Vec<(i64, usize)>,
    /// Recipients the fake accepted nothing for, with their row's outcome.
    pub missing: Vec<(i64, String)>,
    /// Rows by outcome (`pending` for none yet).
    pub outcomes: BTreeMap<String, usize>,
    /// Rows counted `sent` whose chat the fake never accepted a message for.
    pub sent_not_reached: usize,
    /// Rows counted `skipped` whose chat did get the message (the call went out before a crash).
    pub skipped_reached: usize,
    /// Recipients without a row, and rows of chats that are not recipients.
    pub without_row: usize,
    pub foreign_rows: usize,
    /// Rows beyond the first of one recipient.
    pub duplicate_rows: usize,
    /// Messages the fake accepted for chats of the range that are not recipients.
    pub strays: usize,
    /// The broadcast's counters against the rows, where they differ.
    pub mismatches: Vec<String>,
}

impl Audit {
    /// `chats`: the recipients' chats (their Telegram ids); `messages`: every message the fake
    /// accepted for the chats of the broadcast's id space; `rows`: each row's chat and outcome.
    pub fn of(
        chats: RangeInclusive<i64>,
        messages: &[Accepted],
        rows: &[(i64, Option<String>)],
        broadcast: &Broadcast,
    ) -> Audit {
        let row_count = rows.len();
        let rows: HashMap<i64, Option<String>> = rows.iter().cloned().collect();
        let mut received: HashMap<i64, usize> = HashMap::new();
        let mut strays = 0;
        for m in messages {
            if chats.contains(&m.chat) {
                *received.entry(m.chat).or_default() += 1;
            } else {
                strays += 1;
            }
        }
        let mut a = Audit {
            recipients: chats.clone().count(),
            strays,
            ..Audit::default()
        };
        for chat in chats.clone() {
            let outcome = rows.get(&chat).map(|o| o.as_deref().unwrap_or("pending"));
            let n = received.get(&chat).copied().unwrap_or(0);
            match n {
                0 => a
                    .missing
                    .push((chat, outcome.unwrap_or("no row").to_string())),
                1 => a.reached_once += 1,
                _ => a.duplicates.push((chat, n)),
            }
            match outcome {
                None => a.without_row += 1,
                Some(o) => {
                    *a.outcomes.entry(o.to_string()).or_default() += 1;
                    a.sent_not_reached += usize::from(o == "sent" && n == 0);
                    a.skipped_reached += usize::from(o == "skipped" && n > 0);
                }
            }
        }
        a.foreign_rows = rows.keys().filter(|c| !chats.contains(c)).count();
        a.duplicate_rows = row_count - rows.len();
        let rows_with = |o: &str| a.outcomes.get(o).copied().unwrap_or(0) as i64;
        let b = broadcast;
        for (name, counter, rows) in [
            ("recipients", b.recipients, row_count as i64),
            ("sent", b.sent, rows_with("sent")),
            ("blocked", b.blocked, rows_with("blocked")),
            ("failed", b.failed, rows_with("failed")),
            ("skipped", b.skipped, rows_with("skipped")),
            ("pending", b.pending, rows_with("pending")),
        ] {
            if counter != rows {
                a.mismatches
                    .push(format!("{name} {counter} but {rows} such rows"));
            }
        }
        let sum = b.sent + b.blocked + b.failed + b.skipped + b.pending;
        if sum != b.recipients {
            a.mismatches.push(format!(
                "sent + blocked + failed + skipped + pending = {sum}, recipients {}",
                b.recipients
            ));
        }
        if b.status != "finished" {
            a.mismatches.push(format!("status {}", b.status));
        }
        a
    }

    /// Missing recipients whose row does not say `skipped`: lost.
    pub fn lost(&self) -> usize {
        self.missing.iter().filter(|(_, o)| o != "skipped").count()
    }

    /// Whether every recipient got the message exactly once, but for at most `allowed` missing
    /// ones counted `skipped` (the message a crash interrupted), and nobody else got it.
    pub fn exactly_once(&self, allowed: usize) -> bool {
        self.duplicates.is_empty()
            && self.lost() == 0
            && self.missing.len() <= allowed
            && self.sent_not_reached == 0
            && self.strays == 0
    }

    /// Whether the rows and the counters agree: one row per recipient, each `sent` or
    /// `skipped` (the fake refuses nobody for good), and the counters count them.
    pub fn consistent(&self) -> bool {
        self.without_row == 0
            && self.foreign_rows == 0
            && self.duplicate_rows == 0
            && self.mismatches.is_empty()
            && self.outcomes.keys().all(|o| o == "sent" || o == "skipped")
    }

    /// One line on what was found.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} of {} exactly once; {} duplicated; {} missing",
            self.reached_once,
            self.recipients,
            self.duplicates.len(),
            self.missing.len()
        );
        if !self.missing.is_empty() {
            let skipped = self.missing.len() - self.lost();
            s += &format!(" ({skipped} counted skipped, {} not)", self.lost());
        }
        s += &format!(
            "; rows {}",
            self.outcomes
                .iter()
                .map(|(o, n)| format!("{o} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if self.skipped_reached > 0 {
            s += &format!(
                "; {} counted skipped were delivered before the crash",
                self.skipped_reached
            );
        }
        for (what, n) in [
            ("counted sent but never delivered", self.sent_not_reached),
            ("recipients without a row", self.without_row),
            ("rows of non-recipients", self.foreign_rows),
            ("second rows of one recipient", self.duplicate_rows),
            ("messages to non-recipients", self.strays),
        ] {
            if n > 0 {
                s += &format!("; {n} {what}");
            }
        }
        if !self.mismatches.is_empty() {
            s += &format!("; counters: {}", self.mismatches.join(", "));
        }
        if let Some((chat, n)) = self.duplicates.first() {
            s += &format!(" (e.g. chat {chat} got {n})");
        }
        s
    }
}

/// 429s the fake answered for chats of `chats`, and how many of them were never followed by an
/// accepted message to the same chat (a 429 nobody retried).
pub fn unretried(
    chats: &RangeInclusive<i64>,
    refusals: &[Refusal],
    messages: &[Accepted],
) -> (usize, usize) {
    let mut last: HashMap<i64, Instant> = HashMap::new();
    for m in messages {
        let at = last.entry(m.chat).or_insert(m.at);
        *at = (*at).max(m.at);
    }
    let ours: Vec<&Refusal> = refusals
        .iter()
        .filter(|r| r.chat.is_some_and(|c| chats.contains(&c)))
        .collect();
    let dropped = ours
        .iter()
        .filter(|r| {
            let chat = r.chat.unwrap_or_default();
            last.get(&chat).is_none_or(|at| *at <= r.at)
        })
        .count();
    (ours.len(), dropped)
}

/// A sending rate measured on the fake's records: messages per second over the spans in which
/// messages kept coming (no gap longer than `gap`, no crash of the server between two of them:
/// `crashes`), counting only spans of at least `min_span`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rate {
    /// Messages of the counted spans (all kinds).
    pub messages: usize,
    /// Of those, the ones `counted` selects (the broadcast's own).
    pub selected: usize,
    pub seconds: f64,
    pub spans: usize,
}

impl Rate {
    pub fn measure(
        messages: &[Accepted],
        selected: impl Fn(&Accepted) -> bool,
        crashes: &[Instant],
        gap: Duration,
        min_span: Duration,
    ) -> Rate {
        let mut times: Vec<&Accepted> = messages.iter().collect();
        times.sort_by_key(|m| m.at);
        let mut rate = Rate::default();
        let mut flush = |span: &[&Accepted]| {
            let (Some(first), Some(last)) = (span.first(), span.last()) else {
                return;
            };
            let secs = last.at.duration_since(first.at);
            if secs >= min_span {
                // n messages span n - 1 intervals: the first one's is outside the span.
                rate.messages += span.len() - 1;
                rate.selected += span[1..].iter().filter(|m| selected(m)).count();
                rate.seconds += secs.as_secs_f64();
                rate.spans += 1;
            }
        };
        let mut start = 0;
        for i in 1..times.len() {
            let (before, after) = (times[i - 1].at, times[i].at);
            if after.duration_since(before) > gap
                || crashes.iter().any(|c| before <= *c && *c < after)
            {
                flush(&times[start..i]);
                start = i;
            }
        }
        flush(&times[start..]);
        rate
    }

    /// All messages per second.
    pub fn per_sec(&self) -> f64 {
        self.messages as f64 / self.seconds
    }

    /// The selected messages per second.
    pub fn selected_per_sec(&self) -> f64 {
        self.selected as f64 / self.seconds
    }
}

/// The fastest sustained stretch: the longest run of whole seconds (counted from `start`) in
/// each of which more than `floor` messages were accepted, without its first and last second
/// (partly outside the stretch); its messages per second and length in seconds.
pub fn sustained(messages: &[Accepted], start: Instant, floor: usize) -> (f64, usize) {
    let mut buckets: Vec<usize> = Vec::new();
    for m in messages {
        let i = m.at.saturating_duration_since(start).as_secs() as usize;
        if buckets.len() <= i {
            buckets.resize(i + 1, 0);
        }
        buckets[i] += 1;
    }
    let (mut best, mut run_start) = ((0, 0), None);
    for i in 0..=buckets.len() {
        let busy = buckets.get(i).is_some_and(|n| *n > floor);
        match (busy, run_start) {
            (true, None) => run_start = Some(i),
            (false, Some(s)) => {
                if i - s > best.1 - best.0 {
                    best = (s, i);
                }
                run_start = None;
            }
            _ => {}
        }
    }
    let inner = (best.0 + 1)..best.1.saturating_sub(1);
    if inner.is_empty() {
        return (0.0, 0);
    }
    let n: usize = buckets[inner.clone()].iter().sum();
    (n as f64 / inner.len() as f64, inner.len())
}

/// Second by second from `start`: every message accepted, the broadcast's (`ours`), those sent
/// paid, those billed, and the 429s (those to paid messages) — `key<TAB>value` columns with a
/// header, for a look at how a phase went.
pub fn seconds_tsv(
    messages: &[Accepted],
    refusals: &[Refusal],
    start: Instant,
    ours: impl Fn(i64) -> bool,
) -> String {
    fn row(rows: &mut Vec<[usize; 6]>, start: Instant, when: Instant) -> &mut [usize; 6] {
        let i = when.saturating_duration_since(start).as_secs() as usize;
        if rows.len() <= i {
            rows.resize(i + 1, [0; 6]);
        }
        &mut rows[i]
    }
    let mut rows: Vec<[usize; 6]> = Vec::new();
    for m in messages {
        let r = row(&mut rows, start, m.at);
        r[0] += 1;
        r[1] += usize::from(ours(m.chat));
        r[2] += usize::from(m.paid);
        r[3] += usize::from(m.billed);
    }
    for f in refusals {
        let r = row(&mut rows, start, f.at);
        r[4] += 1;
        r[5] += usize::from(f.paid);
    }
    let mut out = String::from("second\taccepted\tbroadcast\tpaid\tbilled\t429s\t429s_paid\n");
    for (i, r) in rows.iter().enumerate() {
        out += &format!(
            "{i}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            r[0], r[1], r[2], r[3], r[4], r[5]
        );
    }
    out
}
