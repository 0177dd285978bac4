//! Why a Bot API call failed ([`BotError`]), told apart by what it means for a retry.

/// Why a Bot API call failed. Its `Display` never contains the bot token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BotError {
    /// Telegram answered `ok: false`.
    #[error("{method}: Telegram answered {code}: {description}")]
    Api {
        method: String,
        code: i64,
        description: String,
        /// `parameters.retry_after` of a 429: seconds to wait before calling again.
        retry_after: Option<u64>,
    },
    /// No answer in time: the call may or may not have taken effect.
    #[error("{method}: no answer within {secs} s (the call may or may not have taken effect)")]
    Timeout { method: String, secs: u64 },
    /// The request could not be sent (`sent: false`: no connection was made, so Telegram
    /// never saw it) or its answer not read (`sent: true`: it may have taken effect).
    #[error("{method}: Bot API unreachable: {detail}")]
    Transport {
        method: String,
        detail: String,
        sent: bool,
    },
    /// An answer that is not the Bot API's JSON envelope (a proxy's error page, …).
    #[error("{method}: unexpected answer (HTTP {status}): {detail}")]
    BadResponse {
        method: String,
        status: u16,
        detail: String,
    },
    /// Not called: the pace (or an earlier 429) asks to wait `retry_after` seconds first.
    #[error("{method}: not called, rate limit: retry after {retry_after} s")]
    Paused { method: String, retry_after: u64 },
}

impl BotError {
    /// Whether the call may have taken effect although it failed: no answer in time, an
    /// answer that could not be read, or one that is not the Bot API's. A refusal from
    /// Telegram, a call the pacer held back and one whose connection was never made did not.
    pub fn may_have_taken_effect(&self) -> bool {
        match self {
            BotError::Timeout { .. } | BotError::BadResponse { .. } => true,
            BotError::Transport { sent, .. } => *sent,
            BotError::Api { .. } | BotError::Paused { .. } => false,
        }
    }

    /// Telegram's `description`, when Telegram answered.
    pub fn description(&self) -> Option<&str> {
        match self {
            BotError::Api { description, .. } => Some(description),
            _ => None,
        }
    }

    /// True when Telegram's description mentions `needle` (e.g. `CHARGE_ALREADY_REFUNDED`).
    pub fn mentions(&self, needle: &str) -> bool {
        self.description().is_some_and(|d| {
            d.to_ascii_uppercase()
                .contains(&needle.to_ascii_uppercase())
        })
    }

    /// The label of this failure in the Bot API call metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BotError::Api { code: 429, .. } => "rate_limited",
            BotError::Api { .. } => "refused",
            BotError::Timeout { .. } => "timeout",
            BotError::Transport { .. } => "transport",
            BotError::BadResponse { .. } => "bad_response",
            BotError::Paused { .. } => "paused",
        }
    }

    /// Seconds to wait before calling again, for a 429 or a pacing refusal.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            BotError::Api {
                code: 429,
                retry_after,
                ..
            } => Some(retry_after.unwrap_or(1)),
            BotError::Paused { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}
