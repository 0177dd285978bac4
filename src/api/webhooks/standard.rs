//! Door 1, `POST /api/webhook/payment`: a card gateway's payment notification signed with
//! Standard Webhooks v1.
//!
//! The door authenticates over the raw body bytes before parsing anything (re-serialized JSON
//! would not match the signature, and unauthenticated input should not reach the parser's
//! error paths), then turns the body into a [`NormalizedPayment`] and hands it to the core.
//! Nothing is stored for any 4xx. A body that is correctly signed but malformed (400) or
//! invalid (422) is logged in full — it carries no secret — so it can be reconciled by hand:
//! the gateway believes it told us about money.
//!
//! Validation choices where API.md is silent: unknown body fields are ignored (gateways add
//! fields); a missing field is 422 ("is required"), a field of the wrong JSON type is 400;
//! `amount_minor` must be > 0 (a zero payment buys nothing and is never a real charge);
//! `order_reference` is 1..255 characters; `currency` is three upper-case letters.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    api::{
        Errors, chars,
        schemas::{Ignored, Problem, SignedWebhookAnswer},
    },
    app::state::AppState,
    common::{currency, error::ApiError},
    payments::{
        core::{self, Gateway, NormalizedPayment},
        gateways::standard_webhooks,
    },
};

/// How far `webhook-timestamp` may be from server time, either direction.
pub const TOLERANCE_SECS: i64 = 300;

/// The only event type that is a payment; others are acknowledged and ignored.
const PAYMENT_SUCCEEDED: &str = "payment.succeeded";

/// The body's fields with their JSON types; absence is checked separately (422).
///
/// A signed event. Only `type: payment.succeeded` is a payment, and then every field is
/// required; any other type is acknowledged and ignored. Unknown fields are ignored.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = SignedPaymentEvent, example = json!({"type": "payment.succeeded", "gateway": "acme",
    "payment_id": "pay_1", "order_reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21",
    "amount_minor": 19900, "currency": "UAH", "paid_at": "2025-01-01T10:05:00Z"}))]
struct Body {
    /// `payment.succeeded`, or any other event type (ignored).
    #[serde(rename = "type")]
    #[schema(required = true, nullable = false)]
    kind: Option<String>,
    /// The gateway's name, `[a-z0-9_-]{1,32}`; not `wayforpay`, `stripe`, `monobank` or
    /// `telegram_stars`.
    #[schema(nullable = false, pattern = "^[a-z0-9_-]{1,32}$")]
    gateway: Option<String>,
    /// The gateway's id of the payment (unique per gateway).
    #[schema(nullable = false, min_length = 1, max_length = 255)]
    payment_id: Option<String>,
    /// The order's `reference`.
    #[schema(nullable = false, min_length = 1, max_length = 255)]
    order_reference: Option<String>,
    #[schema(nullable = false, minimum = 1)]
    amount_minor: Option<i64>,
    #[schema(nullable = false, pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
    #[schema(nullable = false, format = DateTime)]
    paid_at: Option<String>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `POST /api/webhook/payment`.
#[utoipa::path(post, path = "/webhook/payment", operation_id = "receiveSignedPayment",
    tag = "payment doors",
    request_body = Body,
    security(("webhook_id" = [], "webhook_timestamp" = [], "webhook_signature" = [])),
    responses(
        (status = 200, description = "Stored (applied, needs review, refund pending or a \
            duplicate), or an event of another type ignored.", body = SignedWebhookAnswer),
        (status = 400, description = "Signed, but not JSON or a field of the wrong type (logged \
            for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "The signature, timestamp or id does not verify.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed, but a field is missing or invalid (logged for \
            reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let keys = &state.config.webhook_keys;
    if keys.is_empty() {
        return Err(ApiError::Unavailable(
            "the signed payment webhook is not configured (WEBHOOK_SECRET)".into(),
        ));
    }
    standard_webhooks::verify(
        keys,
        header(&headers, "webhook-id"),
        header(&headers, "webhook-timestamp"),
        header(&headers, "webhook-signature"),
        &body,
        Utc::now().timestamp(),
        TOLERANCE_SECS,
    )
    .map_err(|e| ApiError::WebhookUnauthorized(e.to_string()))?;

    let webhook_id = header(&headers, "webhook-id").unwrap_or_default();
    let payment = match parse(&body) {
        Ok(Some(p)) => p,
        Ok(None) => {
            tracing::info!(webhook_id, "signed webhook of another type ignored");
            return Ok(Json(Ignored { ignored: true }).into_response());
        }
        Err(e) => {
            tracing::warn!(
                webhook_id,
                error = %e,
                body = %String::from_utf8_lossy(&body),
                "signed webhook body refused; logged for reconciliation"
            );
            return Err(e);
        }
    };
    let applied = core::apply_payment(&state.db, payment).await?;
    Ok(Json(applied).into_response())
}

/// Parses a verified body: `Ok(None)` for an event type other than `payment.succeeded`.
fn parse(bytes: &[u8]) -> Result<Option<NormalizedPayment>, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::BadRequest("body must be a JSON object".into()));
    }
    let b: Body = serde_json::from_value(value)
        .map_err(|e| ApiError::BadRequest(format!("invalid body: {e}")))?;

    let mut e = Errors::default();
    match e.required("type", b.kind.as_deref()) {
        Some(PAYMENT_SUCCEEDED) => {}
        Some(_) => return Ok(None),
        None => return Err(e.finish().unwrap_err()),
    }
    if let Some(g) = e.required("gateway", b.gateway.as_deref()) {
        let shape = (1..=32).contains(&g.len())
            && g.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
        if !shape {
            e.add("gateway", "must match [a-z0-9_-]{1,32}");
        } else if Gateway::named(g).has_own_door() {
            e.add("gateway", "this gateway has its own door");
        }
    }
    if let Some(id) = e.required("payment_id", b.payment_id.as_deref())
        && !(1..=255).contains(&chars(id))
    {
        e.add("payment_id", "must be 1 to 255 characters");
    }
    if let Some(r) = e.required("order_reference", b.order_reference.as_deref())
        && !(1..=255).contains(&chars(r))
    {
        e.add("order_reference", "must be 1 to 255 characters");
    }
    if let Some(a) = e.required("amount_minor", b.amount_minor)
        && a <= 0
    {
        e.add("amount_minor", "must be a positive integer of minor units");
    }
    if let Some(c) = e.required("currency", b.currency.as_deref())
        && !currency::is_valid_code(c)
    {
        e.add("currency", "must be three upper-case letters (ISO 4217)");
    }
    let paid_at = e.required("paid_at", b.paid_at.as_deref()).and_then(|t| {
        let parsed = DateTime::parse_from_rfc3339(t).ok();
        if parsed.is_none() {
            e.add("paid_at", "must be an RFC 3339 time");
        }
        parsed
    });
    e.finish()?;
    Ok(Some(NormalizedPayment {
        gateway: b.gateway.unwrap().into(),
        external_id: b.payment_id.unwrap(),
        order_reference: b.order_reference.unwrap(),
        amount_minor: b.amount_minor.unwrap(),
        currency: b.currency.unwrap(),
        paid_at: paid_at.expect("checked above").with_timezone(&Utc),
        payer_telegram_id: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(body: &str) -> u16 {
        match parse(body.as_bytes()) {
            Ok(_) => 200,
            Err(ApiError::BadRequest(_)) => 400,
            Err(ApiError::Validation(_)) => 422,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    const GOOD: &str = r#"{"type":"payment.succeeded","gateway":"acme","payment_id":"pay_1","order_reference":"ord_1","amount_minor":19900,"currency":"UAH","paid_at":"2025-01-01T00:00:00Z"}"#;

    #[test]
    fn good_body_parses() {
        let p = parse(GOOD.as_bytes()).unwrap().unwrap();
        assert_eq!(p.gateway, "acme");
        assert_eq!(p.external_id, "pay_1");
        assert_eq!(p.amount_minor, 19900);
        assert_eq!(p.payer_telegram_id, None);
    }

    #[test]
    fn other_types_are_ignored() {
        assert!(
            parse(br#"{"type":"refund.created","anything":1}"#)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn malformed_is_400_and_invalid_is_422() {
        assert_eq!(status("not json"), 400);
        assert_eq!(status("[1,2]"), 400);
        assert_eq!(status(&GOOD.replace("19900", "\"19900\"")), 400);
        assert_eq!(status(&GOOD.replace("19900", "199.5")), 400);
        assert_eq!(status(&GOOD.replace("19900", "0")), 422);
        assert_eq!(status(&GOOD.replace("19900", "-1")), 422);
        assert_eq!(status(&GOOD.replace("\"UAH\"", "\"uah\"")), 422);
        assert_eq!(status(&GOOD.replace("\"acme\"", "\"wayforpay\"")), 422);
        assert_eq!(status(&GOOD.replace("\"acme\"", "\"telegram_stars\"")), 422);
        assert_eq!(status(&GOOD.replace("\"acme\"", "\"stripe\"")), 422);
        assert_eq!(status(&GOOD.replace("\"acme\"", "\"Acme\"")), 422);
        assert_eq!(
            status(&GOOD.replace("2025-01-01T00:00:00Z", "yesterday")),
            422
        );
        assert_eq!(status(&GOOD.replace("\"pay_1\"", "\"\"")), 422);
        assert_eq!(status(&GOOD.replace(",\"currency\":\"UAH\"", "")), 422);
        assert_eq!(status(r#"{"gateway":"acme"}"#), 422);
    }
}
