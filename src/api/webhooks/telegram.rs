//! Door 3, `POST /api/webhook/telegram`: the Telegram bot webhook.
//!
//! Telegram authenticates itself only by the `secret_token` we gave `setWebhook`, echoed in
//! `X-Telegram-Bot-Api-Secret-Token`; it is compared in constant time before the body is even
//! parsed. With `TELEGRAM_WEBHOOK_SECRET` unset the door is closed (503), never open.
//!
//! Status codes matter to Telegram: anything but 2xx makes it deliver the update again later.
//! So a successful payment answers 200 whatever its checks said (the payment is stored with
//! its outcome) and 503 only when the database could not take it — then the redelivery is
//! what we want, and deduplication by charge id makes it harmless. A body that is not an
//! `Update` is 400 and logged in full for reconciliation (updates carry no secrets; the token
//! is in the header). Update kinds we do not handle get 200 `{}` so they are not re-sent.
//! A `chat_join_request` carrying a query (the chat made this bot the processor of its join
//! requests) is answered in the reply within `DOOR_ANSWER_MS` ([`crate::telegram::door`]).
//! `my_chat_member` and `chat_member` (the bot's rights, users joining) are decided by
//! [`crate::telegram::members`] and answered `{}`; `subscription` (a Stars subscription
//! cancelled, re-enabled or failed in Telegram) by [`crate::payments::star_subscriptions::updates`],
//! answered `{}` whatever it said (an update that cannot be applied is kept for review).

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use chrono::DateTime;

use crate::{
    api::schemas::{Empty, Problem, TelegramAnswer},
    app::state::AppState,
    common::error::ApiError,
    outbox::effects,
    payments::{
        core::{self, NormalizedPayment},
        star_subscriptions::updates as subscription_updates,
    },
    telegram::{self, JoinDecision, WebhookReply, join_request_decision, members, pre_checkout},
    telegram_api::types::{ChatJoinRequest, Message, PreCheckoutQuery, SuccessfulPayment, Update},
};

/// The header Telegram puts the webhook's `secret_token` in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Longest body text written to the log for a malformed update.
const LOG_BODY_LIMIT: usize = 16 * 1024;

/// `POST /api/webhook/telegram`.
#[utoipa::path(post, path = "/webhook/telegram", operation_id = "receiveTelegramUpdate",
    tag = "payment doors",
    request_body = Update,
    security(("telegram_secret" = [])),
    responses(
        (status = 200, description = "Handled: a Bot API call to make (pre-checkout answer, join \
            decision), or `{}`.", body = TelegramAnswer),
        (status = 400, description = "Not a Telegram `Update` (logged).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "The secret header is missing or wrong.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A `pre_checkout_query` or `successful_payment` with values Telegram never \
            sends.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    authenticate(&state, &headers)?;
    let update: Update = serde_json::from_slice(&body).map_err(|e| {
        let text = String::from_utf8_lossy(&body[..body.len().min(LOG_BODY_LIMIT)]);
        tracing::warn!(error = %e, body = %text, "malformed Telegram update refused");
        ApiError::BadRequest(format!("not a Telegram Update: {e}"))
    })?;

    if let Some(q) = &update.pre_checkout_query {
        check_pre_checkout(q)?;
        let answer = crate::common::metrics::pre_checkout(
            pre_checkout::answer(&state.db, state.config.hold_rules(), q),
            pre_checkout::Answer::metric_label,
        )
        .await;
        return Ok(reply(WebhookReply::AnswerPreCheckoutQuery {
            pre_checkout_query_id: q.id.clone(),
            ok: answer.ok,
            error_message: answer.error_message,
        }));
    }
    if let Some(message) = &update.message
        && let Some(paid) = &message.successful_payment
    {
        let payment = normalize(message, paid)?;
        core::apply_payment_as(&state.db, payment, recurrence(paid)).await?;
        return Ok(empty());
    }
    if let Some(request) = &update.chat_join_request {
        return join_request(&state, request).await;
    }
    if let Some(changed) = &update.my_chat_member {
        members::my_chat_member(&state.db, changed).await?;
        return Ok(empty());
    }
    if let Some(changed) = &update.chat_member {
        members::chat_member(&state.db, changed).await?;
        return Ok(empty());
    }
    if let Some(changed) = &update.subscription {
        let reported = subscription_updates::Reported {
            update_id: update.update_id,
            user_id: changed.user.as_ref().map(|u| u.id),
            invoice_payload: changed.invoice_payload.as_deref(),
            state: changed.state.as_deref(),
        };
        subscription_updates::apply(&state.db, &reported).await?;
        return Ok(empty());
    }
    // Buyers talking to the bot (commands, buttons); everything else is ignored there.
    match crate::bot::handle(&state.db, &state.config, &body).await? {
        Some(call) => Ok(Json(call).into_response()),
        None => Ok(empty()),
    }
}

/// Where a Stars charge stands in a subscription, as `successful_payment` says.
fn recurrence(paid: &SuccessfulPayment) -> core::Recurrence {
    let expires_at = paid
        .subscription_expiration_date
        .and_then(|t| DateTime::from_timestamp(t, 0));
    match (paid.is_recurring, paid.is_first_recurring) {
        (false, _) => core::Recurrence::OneOff,
        (true, true) => core::Recurrence::First(expires_at),
        (true, false) => core::Recurrence::Renewal(expires_at),
    }
}

/// Checks the secret token in constant time. Unset secret → 503; missing or wrong → 401.
fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(secret) = &state.config.telegram_webhook_secret else {
        return Err(ApiError::Unavailable(
            "the Telegram webhook is not configured (TELEGRAM_WEBHOOK_SECRET is unset)".into(),
        ));
    };
    let Some(given) = headers.get(SECRET_HEADER) else {
        return Err(ApiError::WebhookUnauthorized(
            "X-Telegram-Bot-Api-Secret-Token missing".into(),
        ));
    };
    if secret.matches(given.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::WebhookUnauthorized(
            "X-Telegram-Bot-Api-Secret-Token does not match".into(),
        ))
    }
}

/// Refuses (422) a `pre_checkout_query` with values Telegram never sends, before the decision:
/// an id the decisions table cannot key (1..255 characters) and a NUL, which PostgreSQL text
/// cannot hold. Deciding one would only fail in the database and answer "try again".
fn check_pre_checkout(q: &PreCheckoutQuery) -> Result<(), ApiError> {
    let id_chars = q.id.chars().count();
    if !(1..=255).contains(&id_chars) || q.id.contains('\0') {
        return Err(ApiError::field(
            "pre_checkout_query.id",
            "must be 1 to 255 characters without NUL",
        ));
    }
    if q.invoice_payload.contains('\0') {
        return Err(ApiError::field(
            "pre_checkout_query.invoice_payload",
            "must not contain NUL characters",
        ));
    }
    Ok(())
}

/// Turns a `successful_payment` into the core's payment. Values Telegram never sends (the
/// payments table's rules) are refused with 422 before anything is stored.
fn normalize(message: &Message, paid: &SuccessfulPayment) -> Result<NormalizedPayment, ApiError> {
    let charge_id = &paid.telegram_payment_charge_id;
    if charge_id.is_empty() || charge_id.chars().count() > 255 {
        return Err(ApiError::field(
            "message.successful_payment.telegram_payment_charge_id",
            "must be 1 to 255 characters",
        ));
    }
    if !(paid.currency.len() == 3 && paid.currency.bytes().all(|b| b.is_ascii_uppercase())) {
        return Err(ApiError::field(
            "message.successful_payment.currency",
            "must be three upper-case letters",
        ));
    }
    if paid.total_amount < 0 {
        return Err(ApiError::field(
            "message.successful_payment.total_amount",
            "must not be negative",
        ));
    }
    let paid_at = DateTime::from_timestamp(message.date, 0)
        .ok_or_else(|| ApiError::field("message.date", "is not a valid Unix time"))?;
    // The sender of the service message is the buyer; in a private chat the chat id is the
    // user id too, which covers a message without `from`.
    let payer =
        message.from.as_ref().map(|u| u.id).or_else(|| {
            (message.chat.kind.as_deref() == Some("private")).then_some(message.chat.id)
        });
    Ok(NormalizedPayment {
        gateway: core::Gateway::TelegramStars,
        external_id: charge_id.clone(),
        order_reference: paid.invoice_payload.clone(),
        amount_minor: paid.total_amount,
        currency: paid.currency.clone(),
        paid_at,
        payer_telegram_id: payer,
    })
}

async fn join_request(state: &AppState, request: &ChatJoinRequest) -> Result<Response, ApiError> {
    // A request that carries a query is answered in the reply, always, within the door's
    // budget (docs/bot.md#the-door).
    if let Some(query_id) = request.query_id.as_deref() {
        if query_id.is_empty() || query_id.len() > 256 {
            return Err(ApiError::Unprocessable(
                "chat_join_request.query_id must be 1 to 256 characters".into(),
            ));
        }
        return Ok(reply(
            telegram::door::answer(&state.db, &state.config, request, query_id).await,
        ));
    }
    let (chat_id, user_id) = (request.chat.id, request.from.id);
    let client = state.db.get().await?;
    let decision = join_request_decision(&client, chat_id, user_id).await?;
    tracing::info!(chat_id, user_id, ?decision, "chat join request decided");
    // With a bot configured, the decision is sent through the effects outbox (retried until
    // Telegram confirms, which a reply cannot report) and the webhook answers `{}`. Without
    // one, the reply is the only way to answer (API.md door 3).
    if !telegram::outbox_enabled(&state.config) {
        return Ok(reply(decision.reply(chat_id, user_id)));
    }
    let approve = decision == JoinDecision::Approve;
    effects::enqueue_join_decision(&**client, chat_id, user_id, approve, request.date).await?;
    Ok(empty())
}

fn reply(call: WebhookReply) -> Response {
    Json(call).into_response()
}

fn empty() -> Response {
    Json(Empty {}).into_response()
}
