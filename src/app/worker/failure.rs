//! What an attempt came to ([`Attempt`]) and why one was not done ([`Failure`]): the Bot API's
//! refusals sorted by what they mean for a retry, missing admin rights apart.

use crate::{common::error::ApiError, telegram_api::client::BotError};

/// Why an effect was not done.
pub(super) enum Failure {
    /// A database error: nothing is recorded, the effect runs again.
    Db(ApiError),
    /// Worth trying again later.
    Retry(String),
    /// Telegram asked to wait.
    RateLimited { secs: u64, error: String },
    /// Telegram refused for good: dead letter.
    Permanent(String),
    /// The bot lacks its admin rights in the effect's chat: paused until they are back.
    NoRights(String),
    /// A transient failure while Telegram answers nothing (the probe failed too): not the
    /// effect's fault, not counted.
    Outage(String),
}

/// What Telegram says when the bot may not manage a chat (not an administrator, too few
/// rights, removed from it).
const NO_RIGHTS: [&str; 5] = [
    "CHAT_ADMIN_REQUIRED",
    "not enough rights",
    "need administrator rights",
    "bot was kicked",
    "bot is not a member",
];

/// Whether a refusal of a chat-management call means the bot lacks its rights in the chat.
fn lacks_rights(e: &BotError) -> bool {
    matches!(
        e,
        BotError::Api {
            code: 400 | 403,
            ..
        }
    ) && NO_RIGHTS.iter().any(|n| e.mentions(n))
}

/// The failure of a call that manages the effect's chat: missing rights pause the effect.
pub(super) fn chat_failure(e: BotError) -> Failure {
    if lacks_rights(&e) {
        Failure::NoRights(e.to_string())
    } else {
        Failure::from(e)
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Failure {
        Failure::Db(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        Failure::Db(e.into())
    }
}

impl From<BotError> for Failure {
    fn from(e: BotError) -> Failure {
        if let Some(secs) = e.retry_after() {
            return Failure::RateLimited {
                secs: secs.max(1),
                error: e.to_string(),
            };
        }
        match &e {
            // 401: the token is wrong; 404: the API URL is. Configuration, not this effect.
            BotError::Api { code, .. } if *code >= 500 || *code == 401 || *code == 404 => {
                Failure::Retry(e.to_string())
            }
            BotError::Api { .. } => Failure::Permanent(e.to_string()),
            _ => Failure::Retry(e.to_string()),
        }
    }
}

impl From<super::bot::BotFailure> for Failure {
    fn from(e: super::bot::BotFailure) -> Failure {
        match e {
            super::bot::BotFailure::Db(e) => Failure::Db(e),
            super::bot::BotFailure::Bot(e) => Failure::from(e),
            super::bot::BotFailure::Permanent(why) => Failure::Permanent(why),
            super::bot::BotFailure::Retry(why) => Failure::Retry(why),
        }
    }
}

/// Done, with an optional note (why it was skipped, which harmless error counted as done).
pub(super) type Performed = Result<Option<String>, Failure>;

/// One attempt's result and the writes it asks the record step to make, under the claim.
pub(super) struct Attempt {
    pub(super) result: Performed,
    /// The refund of this payment is made (or confirmed): `refund_pending` → `refunded`.
    pub(super) refunded: Option<i64>,
    /// The refund call's outcome is unknown: look for it before calling again.
    pub(super) verify: bool,
    /// Done, and the user is not banned by us in the chat: forget its `chat_bans` row.
    pub(super) cleared_ban: bool,
    /// A message to a member: what to write on its `messages` row.
    pub(super) message: Option<super::messages::MessageAttempt>,
    /// A fiscal receipt: what to write on its `fiscal_receipts` row.
    pub(super) receipt: Option<super::receipts::ReceiptAttempt>,
}

impl From<Performed> for Attempt {
    fn from(result: Performed) -> Attempt {
        Attempt {
            result,
            refunded: None,
            verify: false,
            cleared_ban: false,
            message: None,
            receipt: None,
        }
    }
}

impl Attempt {
    /// The attempt that took longer than [`ATTEMPT_CAP`](super::ATTEMPT_CAP): a transient
    /// failure.
    pub(super) fn abandoned() -> Attempt {
        Attempt::from(Err(Failure::Retry(format!(
            "the attempt took longer than {} s; abandoned",
            super::ATTEMPT_CAP.as_secs()
        ))))
    }

    /// `result`, which once done leaves the user unbanned by us in the effect's chat.
    pub(super) fn clearing_ban(result: Performed) -> Attempt {
        Attempt {
            cleared_ban: result.is_ok(),
            ..Attempt::from(result)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bot_errors_are_classified() {
        let api = |code, description: &str, retry_after| BotError::Api {
            method: "m".into(),
            code,
            description: description.into(),
            retry_after,
        };
        assert!(matches!(
            Failure::from(api(429, "Too Many Requests", Some(7))),
            Failure::RateLimited { secs: 7, .. }
        ));
        assert!(matches!(
            Failure::from(api(500, "Internal", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(502, "Bad Gateway", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(401, "Unauthorized", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(400, "Bad Request: chat not found", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(api(403, "Forbidden: bot was blocked by the user", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Timeout {
                method: "m".into(),
                secs: 10
            }),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Paused {
                method: "m".into(),
                retry_after: 3
            }),
            Failure::RateLimited { secs: 3, .. }
        ));
    }
}
