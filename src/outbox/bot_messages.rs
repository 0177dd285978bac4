//! The bot's messages to buyers go through the effects outbox ([`crate::outbox::effects`]), in the
//! transaction that decided to send them; the effects worker sends them.

use tokio_postgres::GenericClient;

use crate::present::render;
use crate::{
    common::error::ApiError,
    outbox::effects::{NewEffect, Payload, enqueue, payload::BotMessage},
};

/// Enqueues `message` for Telegram user `user_id` (a private chat's id is the user's), once
/// per `dedupe_key` when one is given. Call it in the transaction that decided to send it.
pub async fn enqueue_message(
    client: &impl GenericClient,
    user_id: i64,
    message: &render::Rendered,
    dedupe_key: Option<String>,
) -> Result<Option<i64>, ApiError> {
    let payload = Payload::BotMessage(BotMessage {
        text: render::clip(&message.text, render::MESSAGE_MAX),
        reply_markup: message.reply_markup(),
    });
    enqueue(
        client,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: None,
            chat_id: None,
            user_id,
            payload,
            dedupe_key,
        },
    )
    .await
}
