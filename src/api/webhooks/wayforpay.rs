//! Door 2, `POST /api/webhook/wayforpay`: WayForPay's `serviceUrl` callback.
//!
//! Order of work: the door must be configured (else 503); the body must parse (else 400 —
//! without the signed fields the signature cannot even be checked, so nothing is trusted and
//! nothing stored); the `merchantSignature` must verify and `merchantAccount` must be ours (else
//! 401, nothing stored). From there on the caller is WayForPay, and every answer that reports
//! success carries the signed `accept` acknowledgement so WayForPay stops retrying:
//! - a status other than `Approved` is not a payment: acknowledged, nothing stored;
//! - `Approved` becomes a payment by [`wayforpay::normalize`] (gateway `wayforpay`, external id
//!   and order reference = `orderReference`, `paid_at` = `processingDate`, or now when absent),
//!   shared with the reconciliation's `CHECK_STATUS`, and goes through the core; whatever its checks say
//!   (applied, needs_review, duplicate) it is stored and acknowledged;
//! - `Refunded` or `Voided` takes back what the payment `(wayforpay, orderReference)` bought
//!   ([`gateway_refunds::refund_at_gateway`]: the payment becomes `refunded`, its memberships
//!   are shortened, once however often it is reported) and is acknowledged whatever it found —
//!   also when no such payment is applied (kept for review): the result is logged. A refund
//!   that comes before its `Approved` is recorded as that payment (`refunded`,
//!   `refunded_before_payment`, from the callback's order reference, amount and currency), so
//!   the `Approved` that follows is a duplicate and grants nothing.
//!
//! A correctly signed `Approved` callback whose amount or currency cannot be turned into minor
//! units (an unknown currency, a malformed or over-precise amount) cannot be stored: the schema
//! keeps only well-formed money. It is answered 422 without the acknowledgement, so WayForPay
//! keeps retrying while the full callback (card PAN and signature redacted) is in the log for
//! staff to reconcile.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
};
use chrono::Utc;

use crate::{
    api::schemas::{Problem, WayForPayAck, WayForPayCallback},
    app::state::AppState,
    common::error::ApiError,
    payments::{
        core::{self, Gateway},
        gateways::wayforpay,
        refunds::at_gateway as gateway_refunds,
    },
};

/// `POST /api/webhook/wayforpay`.
#[utoipa::path(post, path = "/webhook/wayforpay", operation_id = "receiveWayForPayCallback",
    tag = "payment doors",
    description = "WayForPay's `serviceUrl` callback. Authenticated by its `merchantSignature` \
        (and `merchantAccount`), inside the body.",
    request_body = WayForPayCallback,
    security(()),
    responses(
        (status = 200, description = "Acknowledged (and stored when `Approved`; what the payment \
            bought taken back when `Refunded` or `Voided`).", body = WayForPayAck),
        (status = 400, description = "Not a WayForPay callback: nothing is trusted or stored.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "The signature does not verify, or the merchant account is \
            not ours.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed and approved, but its money cannot be stored \
            (logged; WayForPay retries).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let Some(config) = state.config.wayforpay.as_ref() else {
        return Err(ApiError::Unavailable(
            "the WayForPay door is not configured (WAYFORPAY_MERCHANT_ACCOUNT, WAYFORPAY_SECRET_KEY)"
                .into(),
        ));
    };
    let key = config.secret_key.expose().as_bytes();
    let cb = wayforpay::parse_callback(&body).map_err(|e| {
        // The error text never quotes body content (which may hold the card PAN).
        tracing::warn!(error = %e, "WayForPay callback could not be parsed");
        ApiError::BadRequest(format!("invalid WayForPay callback: {e}"))
    })?;
    if !wayforpay::verify_signature(key, &cb) {
        return Err(ApiError::WebhookUnauthorized(
            "WayForPay merchantSignature does not verify".into(),
        ));
    }
    // Compared after the signature so an unsigned probe learns nothing about our account name.
    if cb.merchant_account != config.merchant_account {
        return Err(ApiError::WebhookUnauthorized(
            "WayForPay merchantAccount is not ours".into(),
        ));
    }

    if cb.is_approved() {
        let payment = wayforpay::normalize(&cb, Utc::now()).inspect_err(|e| {
            tracing::warn!(
                error = %e,
                callback = ?cb,
                "signed WayForPay payment refused; logged for reconciliation"
            );
        })?;
        core::apply_payment(&state.db, payment).await?;
    } else if cb.is_refund() {
        // Whatever it finds (refunded now, reported before, never applied, unknown), the
        // callback is acknowledged: it is logged, and nothing more can be done with it.
        // What it says of the payment records the refund when the payment has not come yet.
        let reported = wayforpay::refund_report(&cb, Utc::now());
        gateway_refunds::refund_at_gateway(
            &state.db,
            Gateway::WayForPay,
            &cb.order_reference,
            reported.as_ref(),
        )
        .await?;
    } else {
        tracing::info!(
            order_reference = %cb.order_reference,
            status = %cb.transaction_status,
            reason_code = %cb.reason_code_literal,
            "WayForPay callback without payment acknowledged"
        );
    }
    let ack = wayforpay::acknowledgement(key, &cb.order_reference, Utc::now().timestamp());
    Ok(Json(ack).into_response())
}
