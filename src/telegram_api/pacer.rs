//! The pace of one bot's Bot API calls: at most [`GLOBAL_RATE`] calls per second, urgent calls
//! ([`Urgency`]) before waiting normal ones, at most one message per [`MESSAGE_INTERVAL`] to one
//! chat, and a chat (or, for calls that name none, the whole bot) that Telegram answered 429
//! left alone for `retry_after`. A wait longer than [`MAX_WAIT`] is not slept: the caller is
//! told how long it would be instead ([`Pacer::acquire`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use tokio::time::Instant;

/// Bot API calls per second, per bot, at most. Telegram allows "about 30 messages per second"
/// to different users (the Bot API FAQ, "Broadcasting to users"); 28 leaves a margin for the
/// few calls other processes of the same bot make.
pub const GLOBAL_RATE: u32 = 28;
/// Messages per chat: at most one per this interval (Telegram's limit for private chats).
pub const MESSAGE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest pacing wait a call sleeps through; a longer one fails with
/// [`BotError::Paused`](super::client::BotError::Paused).
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// Paid messages per second, per bot, at most: Telegram's limit for messages sent with
/// `allow_paid_broadcast` (0.1 Star each beyond the free rate).
pub const PAID_RATE: u32 = 1000;

/// Which of a bot's paces a call takes: the free one ([`GLOBAL_RATE`], shared by every call)
/// or the paid one of a paid broadcast's messages ([`PAID_RATE`], sent with
/// `allow_paid_broadcast`, apart from the free pace). Both keep one message per second to one
/// chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lane {
    #[default]
    Free,
    Paid,
}

/// How urgent a call is to the [`Pacer`]: an urgent call (an access change: a grant's message,
/// a revoke, a join answer, an unban) takes the next free slot before every waiting normal call
/// (invoices, receipts, reminders, bot messages), so a queue of those never holds it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Urgency {
    #[default]
    Normal,
    Urgent,
}

/// The pace of one bot: the next free slot for any call (one every `1 / GLOBAL_RATE` s) and, per
/// chat, the next moment a message to that chat may be sent. Shared by every
/// [`BotApi`](super::client::BotApi) of the bot in this process. A slot is taken by a caller
/// that is ready for it; callers waiting for one sleep until it and try again, and a normal
/// caller gives way while an urgent one waits for the next slot (not while it waits for its
/// chat's).
#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<PacerState>,
}

#[derive(Debug, Default)]
struct PacerState {
    next_call: Option<Instant>,
    /// The next slot of the paid pace.
    next_paid: Option<Instant>,
    next_for_chat: HashMap<i64, Instant>,
    /// Callers sleeping until a slot, by urgency.
    waiting: usize,
    urgent_waiting: usize,
}

/// Counts a caller among the waiting while it waits (also when its future is dropped), and
/// among the urgent ones while it is urgent and waits for the global slot only.
struct Waiting<'a> {
    pacer: &'a Pacer,
    urgent: bool,
}

impl<'a> Waiting<'a> {
    fn new(pacer: &'a Pacer, s: &mut PacerState) -> Waiting<'a> {
        s.waiting += 1;
        Waiting {
            pacer,
            urgent: false,
        }
    }

    fn set_urgent(&mut self, s: &mut PacerState, urgent: bool) {
        match (self.urgent, urgent) {
            (false, true) => s.urgent_waiting += 1,
            (true, false) => s.urgent_waiting -= 1,
            _ => {}
        }
        self.urgent = urgent;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut s = self.pacer.lock();
        s.waiting -= 1;
        if self.urgent {
            s.urgent_waiting -= 1;
        }
    }
}

impl Pacer {
    /// The pacer of the bot `key` (base URL and bot id), created on first use.
    pub fn for_bot(key: &str) -> Arc<Pacer> {
        static PACERS: OnceLock<Mutex<HashMap<String, Arc<Pacer>>>> = OnceLock::new();
        let mut all = PACERS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.entry(key.to_string()).or_default().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PacerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot for one call (for `chat`, when it concerns one, keeping `spacing`
    /// between calls for that chat) and takes it. When the wait is expected to be longer than
    /// [`MAX_WAIT`] (the chat's next slot, or the callers already waiting), or a normal call
    /// has given way to urgent ones for that long, nothing is taken and the wait is returned
    /// instead.
    pub async fn acquire(
        &self,
        chat: Option<i64>,
        spacing: Duration,
        urgency: Urgency,
    ) -> Result<(), Duration> {
        let interval = Duration::from_secs(1) / GLOBAL_RATE;
        let urgent = urgency == Urgency::Urgent;
        let started = Instant::now();
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let sleep_until = {
                let mut s = self.lock();
                let now = Instant::now();
                let slot = s.next_call.map_or(now, |t| t.max(now));
                let chat_slot = chat
                    .and_then(|c| s.next_for_chat.get(&c).copied())
                    .map_or(now, |t| t.max(now));
                let at = slot.max(chat_slot);
                let ahead = if urgent {
                    s.urgent_waiting - usize::from(waiting.as_ref().is_some_and(|w| w.urgent))
                } else {
                    s.waiting - usize::from(waiting.is_some())
                };
                let expected = at.max(now + interval * ahead as u32);
                if expected - now > MAX_WAIT || (!urgent && now - started > MAX_WAIT) {
                    return Err((expected - now).max(interval));
                }
                // A normal call gives way while an urgent one waits for a slot.
                let yields = !urgent && s.urgent_waiting > 0;
                if at <= now && !yields {
                    // A caller woken a little late keeps the pace of the slot it waited for.
                    let base = s
                        .next_call
                        .filter(|t| now.saturating_duration_since(*t) < interval / 4)
                        .unwrap_or(now);
                    s.next_call = Some(base + interval);
                    if let Some(c) = chat {
                        s.next_for_chat.insert(c, now + spacing);
                    }
                    if s.next_for_chat.len() > 10_000 {
                        s.next_for_chat.retain(|_, t| *t > now);
                    }
                    return Ok(());
                }
                // An urgent call waiting for its chat's slot holds nobody back meanwhile.
                let w = waiting.get_or_insert_with(|| Waiting::new(self, &mut s));
                w.set_urgent(&mut s, urgent && chat_slot <= now);
                if yields && at <= now {
                    now + interval
                } else {
                    at
                }
            };
            tokio::time::sleep_until(sleep_until).await;
        }
    }

    /// Waits for a slot of the paid pace ([`PAID_RATE`]) and `chat`'s next slot, and takes
    /// them; the free pace is neither used nor held back. As [`acquire`](Self::acquire), a wait
    /// longer than [`MAX_WAIT`] is returned instead.
    pub async fn acquire_paid(&self, chat: Option<i64>, spacing: Duration) -> Result<(), Duration> {
        let interval = Duration::from_secs(1) / PAID_RATE;
        loop {
            let sleep_until = {
                let mut s = self.lock();
                let now = Instant::now();
                let slot = s.next_paid.map_or(now, |t| t.max(now));
                let chat_slot = chat
                    .and_then(|c| s.next_for_chat.get(&c).copied())
                    .map_or(now, |t| t.max(now));
                let at = slot.max(chat_slot);
                if at - now > MAX_WAIT {
                    return Err(at - now);
                }
                if at <= now {
                    let base = s
                        .next_paid
                        .filter(|t| now.saturating_duration_since(*t) < interval * 4)
                        .unwrap_or(now);
                    s.next_paid = Some(base + interval);
                    if let Some(c) = chat {
                        s.next_for_chat.insert(c, now + spacing);
                    }
                    if s.next_for_chat.len() > 10_000 {
                        s.next_for_chat.retain(|_, t| *t > now);
                    }
                    return Ok(());
                }
                at
            };
            tokio::time::sleep_until(sleep_until).await;
        }
    }

    /// Telegram answered 429: leave `chat` (or, for `None`, every call) alone for `wait`.
    pub fn pause(&self, chat: Option<i64>, wait: Duration) {
        let mut s = self.lock();
        let until = Instant::now() + wait;
        let slot = match chat {
            Some(c) => s.next_for_chat.entry(c).or_insert(until),
            None => s.next_call.get_or_insert(until),
        };
        *slot = (*slot).max(until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_urgent_call_takes_the_next_slot_before_waiting_normal_calls() {
        let pacer = Arc::new(Pacer::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let call = |name: &'static str, urgency: Urgency| {
            let (pacer, order) = (pacer.clone(), order.clone());
            tokio::spawn(async move {
                pacer
                    .acquire(None, Duration::ZERO, urgency)
                    .await
                    .expect("within MAX_WAIT");
                order.lock().unwrap().push(name);
            })
        };
        // The first normal call takes the free slot; four more wait for theirs.
        let mut calls = vec![call("normal", Urgency::Normal)];
        for _ in 0..4 {
            calls.push(call("normal", Urgency::Normal));
        }
        // Let them all start waiting, then an urgent call arrives.
        while pacer.lock().waiting < 4 {
            tokio::task::yield_now().await;
        }
        calls.push(call("urgent", Urgency::Urgent));
        for c in calls {
            c.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 6);
        assert_eq!(order[1], "urgent", "{order:?}");
    }

    #[tokio::test]
    async fn an_urgent_call_waiting_for_its_chat_holds_no_normal_call_back() {
        let pacer = Arc::new(Pacer::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let call = |name: &'static str, chat: Option<i64>, urgency: Urgency| {
            let (pacer, order) = (pacer.clone(), order.clone());
            tokio::spawn(async move {
                pacer
                    .acquire(chat, Duration::from_millis(300), urgency)
                    .await
                    .expect("within MAX_WAIT");
                order.lock().unwrap().push(name);
            })
        };
        call("first to the chat", Some(7), Urgency::Urgent)
            .await
            .unwrap();
        // The chat's next message is 300 ms away: this urgent call waits for its chat.
        let second = call("second to the chat", Some(7), Urgency::Urgent);
        while pacer.lock().waiting < 1 {
            tokio::task::yield_now().await;
        }
        let other = call("normal", None, Urgency::Normal);
        other.await.unwrap();
        second.await.unwrap();
        assert_eq!(
            order.lock().unwrap().clone(),
            ["first to the chat", "normal", "second to the chat"]
        );
    }
}
