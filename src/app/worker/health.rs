//! Whether Telegram answers at all, decided by one cheap probe (`getMe`) rather than by each
//! effect's own failures.
//!
//! After a transient failure (timeout, transport, 5xx, 401/404) a lane asks [`Health::answers`]:
//! one probe, shared by the lanes of the worker — a lane whose call failed reuses a probe that
//! began after its call did, so lanes failing together probe once. A probe that fails too is an
//! outage: the effect is put back without counting the failure, and [`Health::may_claim`] says
//! no until a probe answers again, at most one probe every [`PROBE_EVERY`] (the run returns at
//! once meanwhile, so the effects loop polls without spinning). The start and the end of an
//! outage are logged once each.

use std::time::Duration;

use tokio::{sync::Mutex, time::Instant};

use crate::telegram_api::client::BotApi;

/// While Telegram is unreachable, the probe is made at most this often.
pub const PROBE_EVERY: Duration = Duration::from_secs(3);

/// The worker's view of Telegram's health; the lock also serialises the probes.
#[derive(Debug, Default)]
pub(super) struct Health {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When the last probe began, and whether Telegram answered it.
    last: Option<(Instant, bool)>,
    /// Since when Telegram has been unreachable, while it is.
    outage_since: Option<Instant>,
}

impl Health {
    /// After a transient failure of a call made at or after `since`: whether Telegram answers
    /// (the failure is then the effect's own). Probes unless a probe began after `since`.
    pub(super) async fn answers(&self, bot: &BotApi, since: Instant) -> bool {
        let mut s = self.state.lock().await;
        if let Some((at, answered)) = s.last
            && at >= since
        {
            return answered;
        }
        s.probe(bot).await
    }

    /// Whether to claim effects now: always, unless an outage is known; then only once a probe
    /// (made at most every [`PROBE_EVERY`]) answers.
    pub(super) async fn may_claim(&self, bot: &BotApi) -> bool {
        let mut s = self.state.lock().await;
        if s.outage_since.is_none() {
            return true;
        }
        if s.last.is_some_and(|(at, _)| at.elapsed() < PROBE_EVERY) {
            return false;
        }
        s.probe(bot).await
    }
}

impl State {
    async fn probe(&mut self, bot: &BotApi) -> bool {
        let started = Instant::now();
        let result = bot.get_me().await;
        // A 429 (or the pacer's wait) is an answer: Telegram is there, only busy.
        let answered = match &result {
            Ok(_) => true,
            Err(e) => e.retry_after().is_some(),
        };
        self.last = Some((started, answered));
        match (answered, self.outage_since) {
            (false, None) => {
                self.outage_since = Some(started);
                let error = result.err().map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(
                    error = %error,
                    probe_every_secs = PROBE_EVERY.as_secs(),
                    "Telegram is unreachable (getMe failed too): effects wait, not counted as \
                     failures, until a probe answers"
                );
            }
            (true, Some(since)) => {
                self.outage_since = None;
                tracing::info!(
                    outage_secs = since.elapsed().as_secs(),
                    "Telegram answers again: the effects worker resumes"
                );
            }
            _ => {}
        }
        answered
    }
}
