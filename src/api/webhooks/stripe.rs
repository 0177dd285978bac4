//! Door 4, `POST /api/webhook/stripe`: Stripe's events.
//!
//! Order of work, as at door 1: the door must be configured (else 503); `Stripe-Signature`
//! must verify over the raw bytes (else 401, nothing read or stored); then the body is read
//! ([`stripe::read_event`]): not an event or a field of the wrong type → 400, a paid session
//! without what a payment needs → 422, both logged in full for reconciliation and nothing
//! stored. A paid `checkout.session.completed` or `checkout.session.async_payment_succeeded`
//! goes through the payment core (a repeat, or the other of the two, is a duplicate of
//! `(stripe, payment_intent)` and changes nothing); `checkout.session.async_payment_failed`
//! releases its order's holds ([`orders::release_holds`]); a full `charge.refunded` goes
//! through the refund rule ([`gateway_refunds::refund_at_gateway`], once however often it is
//! reported; one that comes before its session's event is recorded as the payment, which then
//! grants nothing), `charge.dispute.created` through the same rule as a dispute
//! ([`disputes::dispute_at_gateway`]) and a won `charge.dispute.closed` to review
//! ([`disputes::dispute_won`]); anything else is answered `{"ignored": true}`.
//!
//! A redelivered event (the same event id) changes nothing, without a table of event ids: each
//! event is a change of a row's state that holds once — the payment of `(stripe,
//! payment_intent)` is stored once, a hold ends once, a payment is taken back only while
//! `applied` and put in review only while `disputed` — so a repeat finds the change made and
//! says so.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use chrono::Utc;

use crate::{
    api::schemas::{
        Ignored, Problem, StripeAnswer, StripeDisputeAnswer, StripeEvent, StripeHoldAnswer,
        StripeRefundAnswer,
    },
    app::state::AppState,
    common::error::ApiError,
    orders,
    payments::{
        core::{self, Gateway},
        gateways::stripe::{self, Event, EventError},
        refunds::{at_gateway as gateway_refunds, disputes},
    },
};

/// `POST /api/webhook/stripe`.
#[utoipa::path(post, path = "/webhook/stripe", operation_id = "receiveStripeEvent",
    tag = "payment doors",
    description = "Stripe's webhook events, authenticated by `Stripe-Signature`. \
        `checkout.session.completed` (paid) and `checkout.session.async_payment_succeeded` are \
        one payment of the session's `payment_intent`; `checkout.session.async_payment_failed` \
        releases its order's holds; `charge.refunded` (in full) and `charge.dispute.created` \
        take back what that payment bought (`refunded`, `disputed`); `charge.dispute.closed` \
        (`won`) puts a disputed payment in review (`dispute_won`); other types are ignored. \
        A repeat of an event changes nothing.",
    request_body = StripeEvent,
    security(("stripe_signature" = [])),
    responses(
        (status = 200, description = "Stored (applied, needs review or a duplicate), a refund \
            or dispute taken back (or found taken already), a won dispute put in review, an \
            order's holds released, or an event ignored.", body = StripeAnswer),
        (status = 400, description = "Signed, but not an event or a field of the wrong type \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`Stripe-Signature` missing, stale or not matching.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed, but a paid session lacks what a payment needs, \
            or a failed one names no order (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
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
        Event::PaymentFailed { order_reference } => {
            let result = orders::release_holds(&state.db, &order_reference).await?;
            tracing::info!(
                event_id = stripe::event_id(&body).as_deref().unwrap_or("-"),
                order_reference,
                result = result.as_str(),
                "Stripe delayed payment failed: the order's holds released"
            );
            StripeAnswer::Hold(StripeHoldAnswer {
                hold: result.as_str().to_string(),
            })
        }
        Event::Disputed {
            payment_intent,
            dispute,
        } => {
            tracing::warn!(
                event_id = stripe::event_id(&body).as_deref().unwrap_or("-"),
                payment_intent,
                dispute,
                "Stripe dispute opened"
            );
            let result =
                disputes::dispute_at_gateway(&state.db, Gateway::Stripe, &payment_intent).await?;
            StripeAnswer::Dispute(StripeDisputeAnswer {
                dispute: result.as_str().to_string(),
            })
        }
        Event::DisputeWon { payment_intent } => {
            let client = state.db.get().await?;
            let result = disputes::dispute_won(&client, Gateway::Stripe, &payment_intent).await?;
            StripeAnswer::Dispute(StripeDisputeAnswer {
                dispute: result.as_str().to_string(),
            })
        }
        Event::Ignored(why) => {
            tracing::info!(why, "Stripe event ignored");
            StripeAnswer::Ignored(Ignored { ignored: true })
        }
    };
    Ok(Json(answer).into_response())
}
