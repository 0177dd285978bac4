//! Telegram: the decisions the bot webhook door (`api::webhooks::telegram`, API.md "Door 3")
//! makes, and the Bot API client.
//!
//! Telegram lets a webhook answer an update by putting one Bot API call in the response body,
//! which is how this door answers without calling out: a `pre_checkout_query` gets
//! `answerPreCheckoutQuery` (it must be answered within 10 s), a `chat_join_request` gets
//! `approveChatJoinRequest` or `declineChatJoinRequest`. A `successful_payment` is normalized
//! and handed to the one payment core ([`crate::payments::core::apply_payment`]); no code here
//! writes memberships.
//!
//! - [`types`]: the subset of the `Update` object we read;
//! - [`bot_api`]: the Bot API client the effects worker and invoice links use;
//! - [`pre_checkout`]: the stored, time-boxed pre-checkout decision and the seat hold;
//! - [`join_request_decision`]: who may join a channel (kept apart so the effects outbox can
//!   reuse it).

pub mod bot_api;
pub mod pre_checkout;
pub mod types;

use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::ApiError;

/// A Bot API call returned as the webhook's response body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "method")]
pub enum WebhookReply {
    #[serde(rename = "answerPreCheckoutQuery")]
    AnswerPreCheckoutQuery {
        pre_checkout_query_id: String,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
    },
    #[serde(rename = "approveChatJoinRequest")]
    ApproveChatJoinRequest { chat_id: i64, user_id: i64 },
    #[serde(rename = "declineChatJoinRequest")]
    DeclineChatJoinRequest { chat_id: i64, user_id: i64 },
}

/// Whether a join request is let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinDecision {
    Approve,
    Decline,
}

impl JoinDecision {
    /// The Bot API call carrying this decision.
    pub fn reply(self, chat_id: i64, user_id: i64) -> WebhookReply {
        match self {
            JoinDecision::Approve => WebhookReply::ApproveChatJoinRequest { chat_id, user_id },
            JoinDecision::Decline => WebhookReply::DeclineChatJoinRequest { chat_id, user_id },
        }
    }
}

/// Decides a join request of Telegram user `user_id` to chat `chat_id`: approve when that user
/// (a subscriber by `telegram_user_id`) has an `active` or `grace` membership of the channel
/// with that `telegram_chat_id`, else decline (strangers, expired members, unknown chats).
///
/// The membership must also still be inside its term plus grace by database time: the sweep
/// may run only now and then, and a membership it has not yet expired must not let a former
/// member back in (the sweep would only kick them out again). Reads without locks: a join
/// request racing a renewal at worst is declined and asked again.
pub async fn join_request_decision(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<JoinDecision, ApiError> {
    let row = client
        .query_one(
            "SELECT EXISTS (
                 SELECT 1 FROM memberships m
                 JOIN subscribers s ON s.id = m.subscriber_id
                 JOIN channels c ON c.id = m.channel_id
                 WHERE s.telegram_user_id = $1 AND c.telegram_chat_id = $2
                   AND m.status IN ('active', 'grace')
                   AND statement_timestamp()
                       < m.expires_at + make_interval(days => c.grace_period_days))",
            &[&user_id, &chat_id],
        )
        .await?;
    Ok(if row.get(0) {
        JoinDecision::Approve
    } else {
        JoinDecision::Decline
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_serialize_as_bot_api_calls() {
        let approve = JoinDecision::Approve.reply(-1001, 7);
        assert_eq!(
            serde_json::to_value(approve).unwrap(),
            json!({"method": "approveChatJoinRequest", "chat_id": -1001, "user_id": 7})
        );
        let decline = JoinDecision::Decline.reply(-1001, 7);
        assert_eq!(
            serde_json::to_value(decline).unwrap()["method"],
            "declineChatJoinRequest"
        );
        let ok = WebhookReply::AnswerPreCheckoutQuery {
            pre_checkout_query_id: "q".into(),
            ok: true,
            error_message: None,
        };
        assert_eq!(
            serde_json::to_value(ok).unwrap(),
            json!({"method": "answerPreCheckoutQuery", "pre_checkout_query_id": "q", "ok": true})
        );
        let refused = WebhookReply::AnswerPreCheckoutQuery {
            pre_checkout_query_id: "q".into(),
            ok: false,
            error_message: Some("no".into()),
        };
        assert_eq!(
            serde_json::to_value(refused).unwrap(),
            json!({"method": "answerPreCheckoutQuery", "pre_checkout_query_id": "q",
                   "ok": false, "error_message": "no"})
        );
    }
}
