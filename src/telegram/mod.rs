//! Telegram: the decisions the bot webhook door (`api::webhooks::telegram`, API.md "Door 3")
//! makes, the audits of a chat's member list and the Stars reconcile. The Bot API client they
//! call is [`crate::telegram_api`].
//!
//! Telegram lets a webhook answer an update by putting one Bot API call in the response body,
//! which is how this door answers without calling out: a `pre_checkout_query` gets
//! `answerPreCheckoutQuery` (it must be answered within 10 s), a `chat_join_request` gets
//! `approveChatJoinRequest` or `declineChatJoinRequest`. A `successful_payment` is normalized
//! and handed to the one payment core ([`crate::payments::core::apply_payment`]); no code here
//! writes memberships.
//!
//! - [`pre_checkout`]: the stored, time-boxed pre-checkout decision and the seat hold;
//! - [`join_request_decision`]: who may join a channel (the door and the effects worker
//!   decide alike);
//! - [`door`]: join requests that carry a query, at a chat whose door may be the Mini App's
//!   paywall, and the decision on the requests waiting there;
//! - [`members`]: `my_chat_member` / `chat_member` (the bot's rights in a channel, users who
//!   joined without access) and the rights probe;
//! - [`recovery`]: Telegram payment recovery, the Stars reconcile (missed payments, refunds
//!   confirmed or made outside subgate);
//! - [`audits`]: audits of a channel's member list against the database.
//!
//! Below `bot`; imports `payments` and every layer below it.

pub mod audits;
pub mod door;
pub mod members;
pub mod pre_checkout;
pub mod recovery;

use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::{access::memberships, common::error::ApiError, config::Config};

/// Whether Telegram effects can be performed: a bot token is set, or dry-run is on. Without,
/// effects stay queued, and a join request is answered only in the webhook's reply.
pub fn outbox_enabled(config: &Config) -> bool {
    config.telegram_bot_token.is_some() || config.telegram_dry_run
}

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
    /// A join request's query answered: `approve`, `decline` or `queue`.
    #[serde(rename = "answerChatJoinRequestQuery")]
    AnswerChatJoinRequestQuery {
        chat_join_request_query_id: String,
        result: &'static str,
    },
    /// A join request's query answered with the paywall.
    #[serde(rename = "sendChatJoinRequestWebApp")]
    SendChatJoinRequestWebApp {
        chat_join_request_query_id: String,
        web_app_url: String,
    },
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
/// (a subscriber by `telegram_user_id`) is a live member of the channel with that
/// `telegram_chat_id` ([`memberships::is_live_in_chat`]: active or grace, and still inside its
/// term plus grace by database time), else decline (strangers, expired members, unknown chats).
///
/// The sweep may run only now and then, and a membership it has not yet expired must not let a
/// former member back in (the sweep would only kick them out again). Reads without locks: a
/// join request racing a renewal at worst is declined and asked again.
pub async fn join_request_decision(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<JoinDecision, ApiError> {
    Ok(
        if memberships::is_live_in_chat(client, chat_id, user_id).await? {
            JoinDecision::Approve
        } else {
            JoinDecision::Decline
        },
    )
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
