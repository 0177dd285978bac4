//! Stripe's side of a refund staff ask for (door 4): `POST {STRIPE_API_URL}/v1/refunds`, the
//! one call, beside the door's events and Checkout Sessions ([`super::stripe`], whose HTTP
//! client it shares).
//!
//! The request, as Stripe's API reference documents "Create a refund"
//! (<https://docs.stripe.com/api/refunds/create>): form-encoded, basic auth with the secret key,
//! `payment_intent` = the payment's external id (the PaymentIntent its Checkout Session
//! made) and no `amount`, so the whole charge is refunded; `metadata[subgate_payment]` and
//! `metadata[reason]` say which payment and why, for whoever reads the Dashboard.
//!
//! **Once.** The call carries `Idempotency-Key: subgate-refund-<payment intent>`
//! (<https://docs.stripe.com/api/idempotent_requests>): the effect making it may run again (a
//! lost answer, a crash before its record), and Stripe answers a repeat of the key and the
//! same parameters with the Refund it made the first time instead of making a second. Every
//! parameter is a function of the payment and its stored request, so every repeat is the
//! same. After Stripe forgets a key (24 hours) a repeat is refused with the error code
//! `charge_already_refunded` (<https://docs.stripe.com/error-codes>), which counts as done too.
//!
//! **The answer** is a Refund object (<https://docs.stripe.com/api/refunds/object>) whose
//! `status` is `pending`, `requires_action`, `succeeded`, `failed` or `canceled`. `succeeded` and
//! `pending` (Stripe accepted it; some methods take days to return the money) are a refund
//! made; `failed` and `canceled` are a refusal with the `failure_reason`, and
//! `requires_action` (the buyer's bank details are needed) a refusal that names where to
//! finish it. A 5xx, 429, 409 (the same key still in flight) or no answer is worth trying
//! again; any other 4xx is Stripe refusing the request itself.

use serde::Deserialize;
use serde_json::Value;

use super::http;

/// The `Idempotency-Key` of the refund of the payment whose PaymentIntent is `payment_intent`.
pub fn idempotency_key(payment_intent: &str) -> String {
    format!("subgate-refund-{payment_intent}")
}

/// The form of `POST /v1/refunds` for the payment `payment_id` paid through `payment_intent`.
pub fn refund_form(
    payment_intent: &str,
    payment_id: i64,
    reason: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("payment_intent", payment_intent.to_string()),
        ("metadata[subgate_payment]", payment_id.to_string()),
        ("metadata[reason]", reason.chars().take(500).collect()),
    ]
}

/// A refund Stripe made (or found again for a repeat of the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refunded {
    /// A Refund object, `succeeded` or `pending`.
    Made { id: String, status: String },
    /// Stripe says the charge is refunded already (`charge_already_refunded`).
    AlreadyRefunded,
}

/// Why Stripe did not refund.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundError {
    /// Worth trying again: no answer, a 5xx, 429, or 409.
    #[error("Stripe: {0}")]
    Transient(String),
    /// Stripe refused (or failed) the refund: it will not go through by being asked again.
    #[error("Stripe refused the refund: {0}")]
    Refused(String),
}

/// The fields of a Refund object read here.
#[derive(Debug, Deserialize)]
struct RefundObject {
    id: String,
    status: Option<String>,
    failure_reason: Option<String>,
}

/// Reads Stripe's answer (`status`, body) to `POST /v1/refunds`.
pub fn read_answer(status: u16, body: &[u8]) -> Result<Refunded, RefundError> {
    if (200..300).contains(&status) {
        let refund: RefundObject = serde_json::from_slice(body).map_err(|e| {
            RefundError::Transient(format!("unexpected answer (HTTP {status}): {e}"))
        })?;
        let state = refund.status.unwrap_or_default();
        return match state.as_str() {
            "succeeded" | "pending" => Ok(Refunded::Made {
                id: refund.id,
                status: state,
            }),
            "requires_action" => Err(RefundError::Refused(format!(
                "refund {} requires action (the buyer's details): finish or cancel it in the \
                 Stripe Dashboard",
                refund.id
            ))),
            other => Err(RefundError::Refused(format!(
                "refund {} is {other}: {}",
                refund.id,
                refund
                    .failure_reason
                    .as_deref()
                    .unwrap_or("no reason given")
            ))),
        };
    }
    let error = serde_json::from_slice::<Value>(body)
        .ok()
        .map(|v| v["error"].clone())
        .unwrap_or(Value::Null);
    if error["code"] == "charge_already_refunded" {
        return Ok(Refunded::AlreadyRefunded);
    }
    let message = error["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    let text = format!("HTTP {status}: {message}");
    if status >= 500 || status == 429 || status == 409 {
        Err(RefundError::Transient(text))
    } else {
        Err(RefundError::Refused(text))
    }
}

/// Refunds the whole payment `payment_id` paid through `payment_intent` (see the module doc).
pub async fn refund(
    api_url: &str,
    secret_key: &str,
    payment_intent: &str,
    payment_id: i64,
    reason: &str,
) -> Result<Refunded, RefundError> {
    let response = http()
        .post(format!("{api_url}/v1/refunds"))
        .basic_auth(secret_key, Some(""))
        .header("Idempotency-Key", idempotency_key(payment_intent))
        .form(&refund_form(payment_intent, payment_id, reason))
        .send()
        .await
        .map_err(|e| RefundError::Transient(format!("unreachable: {}", e.without_url())))?;
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|e| RefundError::Transient(format!("answer not read: {}", e.without_url())))?;
    read_answer(status, &body)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer(status: u16, body: Value) -> Result<Refunded, RefundError> {
        read_answer(status, body.to_string().as_bytes())
    }

    #[test]
    fn a_succeeded_or_pending_refund_is_made() {
        for state in ["succeeded", "pending"] {
            assert_eq!(
                answer(
                    200,
                    json!({"id": "re_1", "object": "refund", "status": state})
                ),
                Ok(Refunded::Made {
                    id: "re_1".into(),
                    status: state.into()
                })
            );
        }
    }

    #[test]
    fn failed_canceled_and_action_needed_are_refusals() {
        for (state, words) in [
            ("failed", "expired_or_canceled_card"),
            ("canceled", "no reason given"),
            ("requires_action", "Stripe Dashboard"),
        ] {
            let body = if state == "failed" {
                json!({"id": "re_2", "status": state, "failure_reason": words})
            } else {
                json!({"id": "re_2", "status": state})
            };
            match answer(200, body) {
                Err(RefundError::Refused(text)) => assert!(text.contains(words), "{text}"),
                other => panic!("{state}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_already_refunded_charge_is_done_and_errors_are_sorted() {
        assert_eq!(
            answer(
                400,
                json!({"error": {"type": "invalid_request_error", "code": "charge_already_refunded",
                    "message": "Charge ch_1 has already been refunded."}})
            ),
            Ok(Refunded::AlreadyRefunded)
        );
        assert_eq!(
            answer(
                400,
                json!({"error": {"message": "No such payment_intent: 'pi_x'"}})
            ),
            Err(RefundError::Refused(
                "HTTP 400: No such payment_intent: 'pi_x'".into()
            ))
        );
        for status in [500, 502, 429, 409] {
            assert!(matches!(
                answer(status, json!({"error": {"message": "later"}})),
                Err(RefundError::Transient(_))
            ));
        }
        assert!(matches!(
            read_answer(200, b"<html>"),
            Err(RefundError::Transient(_))
        ));
    }

    #[test]
    fn every_repeat_asks_the_same() {
        assert_eq!(idempotency_key("pi_1"), "subgate-refund-pi_1");
        assert_eq!(
            refund_form("pi_1", 7, "twice"),
            refund_form("pi_1", 7, "twice")
        );
        assert_eq!(
            refund_form("pi_1", 7, "twice")[0],
            ("payment_intent", "pi_1".into())
        );
    }
}
