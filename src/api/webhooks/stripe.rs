//! Door 4, `POST /api/webhook/stripe`: Stripe's events.
//!
//! Order of work, as at door 1: the door must be configured (else 503); `Stripe-Signature`
//! must verify over the raw bytes (else 401, nothing read or stored); then the body is read
//! ([`stripe::read_event`]): not an event or a field of the wrong type → 400, a paid session
//! without what a payment needs → 422, both logged in full for reconciliation and nothing
//! stored. A paid `checkout.session.completed` goes through the payment core (a repeat is a
//! duplicate of `(stripe, payment_intent)` and changes nothing); a full `charge.refunded`
//! through the refund rule ([`gateway_refunds::refund_at_gateway`], once however often it is
//! reported; one that comes before its session's event is recorded as the payment, which then
//! grants nothing); anything else is answered `{"ignored": true}`.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use chrono::Utc;

use crate::{
    api::openapi::{Ignored, Problem, StripeAnswer, StripeEvent, StripeRefundAnswer},
    error::ApiError,
    payments::{
        core::{self, Gateway},
        gateway_refunds,
        stripe::{self, Event, EventError},
    },
    state::AppState,
};

/// `POST /api/webhook/stripe`.
#[utoipa::path(post, path = "/webhook/stripe", operation_id = "receiveStripeEvent",
    tag = "payment doors",
    description = "Stripe's webhook events, authenticated by `Stripe-Signature`. \
        `checkout.session.completed` (paid) is a payment of the session's `payment_intent`; \
        `charge.refunded` (in full) takes back what that payment bought; other types are ignored.",
    request_body = StripeEvent,
    security(("stripe_signature" = [])),
    responses(
        (status = 200, description = "Stored (applied, needs review or a duplicate), a refund \
            taken back (or found taken already), or an event ignored.", body = StripeAnswer),
        (status = 400, description = "Signed, but not an event or a field of the wrong type \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`Stripe-Signature` missing, stale or not matching.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed, but a paid session lacks what a payment needs \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(config) = state.config.stripe.as_ref() else {
        return Err(ApiError::Unavailable(
            "the Stripe door is not configured (STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET)".into(),
        ));
    };
    stripe::verify(
        config.webhook_secret.expose(),
        headers
            .get("stripe-signature")
            .and_then(|v| v.to_str().ok()),
        &body,
        Utc::now().timestamp(),
        stripe::TOLERANCE_SECS,
    )
    .map_err(|e| ApiError::WebhookUnauthorized(e.to_string()))?;

    let event = stripe::read_event(&body).map_err(|e| {
        tracing::warn!(
            event_id = stripe::event_id(&body).as_deref().unwrap_or("-"),
            error = %e,
            body = %String::from_utf8_lossy(&body),
            "signed Stripe event refused; logged for reconciliation"
        );
        match e {
            EventError::Malformed(why) => {
                ApiError::BadRequest(format!("invalid Stripe event: {why}"))
            }
            EventError::Invalid { field, message } => {
                ApiError::Validation([(field.to_string(), message)].into())
            }
        }
    })?;
    let answer = match event {
        Event::Paid(payment) => {
            StripeAnswer::Applied(Box::new(core::apply_payment(&state.db, payment).await?))
        }
        Event::Refunded {
            payment_intent,
            payment,
        } => {
            let result = gateway_refunds::refund_at_gateway(
                &state.db,
                Gateway::Stripe,
                &payment_intent,
                payment.as_ref(),
            )
            .await?;
            StripeAnswer::Refund(StripeRefundAnswer {
                refund: result.as_str().to_string(),
            })
        }
        Event::Ignored(why) => {
            tracing::info!(why, "Stripe event ignored");
            StripeAnswer::Ignored(Ignored { ignored: true })
        }
    };
    Ok(Json(answer).into_response())
}
