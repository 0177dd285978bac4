//! Stripe (door 4, `POST /api/webhook/stripe`): the `Stripe-Signature` check, the two event
//! types that matter read into what the core and the refund rule take, and the API call the bot
//! needs — creating a Checkout Session for a bot order. The other call, a refund staff ask for,
//! is [`super::stripe_refund`]'s, over this module's HTTP client.
//!
//! A small typed client over reqwest rather than a Stripe SDK: we make one call with eight form
//! fields and read two fields of two events, while the Rust SDKs generate the whole API (tens of
//! thousands of lines and minutes of build); reqwest and the HMAC crates are here already.
//!
//! **Signature.** `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]` (other schemes, `v0`, are
//! skipped); `v1` = hex HMAC-SHA256 keyed with the whole endpoint secret (`whsec_…` as text,
//! which is how Stripe keys it) over `"{t}.{raw body}"`. Any `v1` may match (Stripe sends two
//! while a secret is rolled); compared in constant time; `t` within 300 s of now either way.
//! Pure like the other signature modules: the caller passes the clock in.
//!
//! **Events.** `checkout.session.completed` with `payment_status: "paid"` is a payment:
//! gateway `stripe`, external id the session's `payment_intent` (one per paid session, and what
//! a charge's refund or dispute names), the order `client_reference_id` (`metadata.order` when
//! absent), `amount_total` in Stripe's minor units, currency upper-cased, paid at the event's
//! `created`. A delayed payment method (a bank debit) completes the session `unpaid` and
//! reports the money later: `checkout.session.async_payment_succeeded` is then the same
//! payment, read alike, so whichever of the two says `paid` first applies it and the other is
//! its duplicate; `checkout.session.async_payment_failed` names the order whose holds to
//! release. `charge.refunded` with `refunded: true` (the whole charge) names the payment to take
//! back by its `payment_intent`, and says what it was (`amount`, `currency`, `created`, the
//! order in `metadata.order`) for a refund that comes before the payment; a partial refund
//! takes nothing back (what it should shorten is not defined) and is logged.
//! `charge.dispute.created` names the disputed payment by the Dispute's `payment_intent`, and
//! `charge.dispute.closed` the one whose dispute was won (`won`, or `warning_closed`: an
//! inquiry that ended without a chargeback); a lost dispute changes nothing. Everything else
//! is ignored.
//!
//! **Checkout Session.** `POST {STRIPE_API_URL}/v1/checkout/sessions`, form-encoded, with
//! `Idempotency-Key: subgate-checkout-<order reference>`: the effect that makes it may run
//! again (a lost answer, a failed Telegram call after it), and Stripe answers a repeat of the
//! same key and parameters with the session it made the first time. Every parameter is
//! therefore a function of the order alone — `expires_at` included ([`checkout_expires_at`]).

use chrono::{DateTime, TimeZone, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::common::vocabulary::Gateway;
use crate::payments::{core::NormalizedPayment, gateways::http, refunds::at_gateway::Reported};

/// How far `t` may be from server time, either direction.
pub const TOLERANCE_SECS: i64 = 300;

/// Stripe refuses a Checkout Session that expires sooner than this after it is made.
pub const MIN_SESSION_SECS: i64 = 1800;
/// …or later than this.
pub const MAX_SESSION_SECS: i64 = 86_400;
/// The shortest a bot's checkout page is offered for, from when the order was made.
pub const MIN_OPEN_SECS: i64 = 3600;

/// Why a `Stripe-Signature` was refused (never carries secret material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("Stripe-Signature header missing")]
    Missing,
    #[error("Stripe-Signature header malformed")]
    Malformed,
    #[error("Stripe-Signature timestamp outside the 300 s tolerance")]
    Stale,
    #[error("no v1 signature of Stripe-Signature matches")]
    NoMatch,
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `Stripe-Signature` header Stripe would send for `body` at `timestamp` (tests, tooling).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let v1 = hex::encode(mac(secret, &t, body).finalize().into_bytes());
    format!("t={t},v1={v1}")
}

/// Checks `header` against the raw `body` with the endpoint `secret` at time `now`.
pub fn verify(
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    now: i64,
    tolerance: i64,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key {
            "t" if timestamp.is_none() => timestamp = Some(value),
            "t" => return Err(SignatureError::Malformed),
            "v1" => signatures.push(value),
            _ => {}
        }
    }
    let t_text = timestamp.ok_or(SignatureError::Malformed)?;
    if t_text.is_empty() || t_text.len() > 20 || !t_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::Malformed);
    }
    let t: i64 = t_text.parse().map_err(|_| SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::NoMatch);
    }
    if (now - t).abs() > tolerance {
        return Err(SignatureError::Stale);
    }
    let expected = mac(secret, t_text, body).finalize().into_bytes();
    let mut matched = subtle::Choice::from(0u8);
    for candidate in signatures {
        // A candidate that is not hex of the right length cannot match; compare anyway against
        // zeros so every candidate costs the same.
        let decoded = hex::decode(candidate)
            .ok()
            .filter(|d| d.len() == expected.len());
        let ok = decoded
            .as_deref()
            .map_or(subtle::Choice::from(0u8), |d| d.ct_eq(expected.as_slice()));
        matched |= ok;
    }
    if bool::from(matched) {
        Ok(())
    } else {
        Err(SignatureError::NoMatch)
    }
}

/// What a verified event asks of us.
#[derive(Debug, Clone)]
pub enum Event {
    /// A paid Checkout Session: a payment for the core.
    Paid(NormalizedPayment),
    /// A charge refunded in full: take back what the payment of this `payment_intent` bought
    /// — or, when it has not come yet, record the refund as it (`payment`: what the charge
    /// says of it; `None` when its money cannot be read).
    Refunded {
        payment_intent: String,
        payment: Option<Reported>,
    },
    /// A delayed payment method failed: release the holds of the order of this reference.
    PaymentFailed { order_reference: String },
    /// The charge of this `payment_intent` is disputed: take back what its payment bought.
    /// `dispute` describes the Dispute for logs (id, reason, status, amount).
    Disputed {
        payment_intent: String,
        dispute: String,
    },
    /// The dispute of the charge of this `payment_intent` was decided for us.
    DisputeWon { payment_intent: String },
    /// Nothing to do (another type, an unpaid session, a partial refund); the text says why.
    Ignored(String),
}

/// Why a verified event body could not be read: 400 (not JSON, a field of the wrong type) or
/// 422 (a required field missing or invalid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("{0}")]
    Malformed(String),
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

#[derive(Deserialize)]
struct Envelope {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    created: i64,
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    object: Value,
}

#[derive(Deserialize)]
struct Session {
    id: String,
    payment_status: Option<String>,
    payment_intent: Option<String>,
    amount_total: Option<i64>,
    currency: Option<String>,
    client_reference_id: Option<String>,
    #[serde(default)]
    metadata: Option<std::collections::HashMap<String, String>>,
}

/// A Dispute: `charge` is an id, or the Charge when expanded (read only for logs).
#[derive(Deserialize)]
struct Dispute {
    id: String,
    charge: Option<Value>,
    payment_intent: Option<String>,
    status: String,
    amount: Option<i64>,
    reason: Option<String>,
}

#[derive(Deserialize)]
struct Charge {
    id: String,
    payment_intent: Option<String>,
    refunded: bool,
    amount: Option<i64>,
    currency: Option<String>,
    created: Option<i64>,
    #[serde(default)]
    metadata: Option<std::collections::HashMap<String, String>>,
}

impl Charge {
    /// What the charge says of its payment, for a refund that comes before it: the amount
    /// charged, its currency, when it was made, and the order the Checkout Session's
    /// `payment_intent_data[metadata][order]` put on the payment intent (Stripe copies it to
    /// the charge). `None` when the money cannot be read.
    fn reported(&self) -> Option<Reported> {
        let amount_minor = self.amount.filter(|a| *a > 0)?;
        let currency = currency_code(self.currency.as_deref())?;
        let paid_at = self
            .created
            .and_then(|t| Utc.timestamp_opt(t, 0).single())
            .unwrap_or_else(Utc::now);
        let order_reference = self
            .metadata
            .as_ref()
            .and_then(|m| m.get("order"))
            .filter(|r| (1..=255).contains(&r.len()))
            .cloned();
        Some(Reported {
            order_reference,
            amount_minor,
            currency,
            paid_at,
        })
    }
}

fn invalid(field: &'static str, message: impl Into<String>) -> EventError {
    EventError::Invalid {
        field,
        message: message.into(),
    }
}

/// The event's id, when the body is an event at all (for logs).
pub fn event_id(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// An event's `data.object` read as `T`.
fn object<T: serde::de::DeserializeOwned>(object: Value) -> Result<T, EventError> {
    serde_json::from_value(object).map_err(|e| EventError::Malformed(format!("data.object: {e}")))
}

/// A currency as Stripe writes it (three letters, lower-case), upper-cased; `None` otherwise.
fn currency_code(currency: Option<&str>) -> Option<String> {
    currency
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        .map(str::to_ascii_uppercase)
}

/// The order a session names: `client_reference_id`, else `metadata.order`.
fn order_of(
    client_reference_id: Option<String>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<String, EventError> {
    client_reference_id
        .or_else(|| metadata.and_then(|mut m| m.remove("order")))
        .filter(|r| (1..=255).contains(&r.len()))
        .ok_or_else(|| invalid("data.object.client_reference_id", "is required"))
}

/// A completed or succeeded session: a payment when it says `paid`.
fn paid_session(data: Value, created: i64) -> Result<Event, EventError> {
    let s: Session = object(data)?;
    if s.payment_status.as_deref() != Some("paid") {
        return Ok(Event::Ignored(format!(
            "checkout session {} is not paid ({})",
            s.id,
            s.payment_status.as_deref().unwrap_or("no payment_status")
        )));
    }
    let payment_intent = s
        .payment_intent
        .filter(|p| (1..=255).contains(&p.len()))
        .ok_or_else(|| invalid("data.object.payment_intent", "is required"))?;
    let order_reference = order_of(s.client_reference_id, s.metadata)?;
    let amount_minor = s
        .amount_total
        .filter(|a| *a > 0)
        .ok_or_else(|| invalid("data.object.amount_total", "must be a positive integer"))?;
    let currency = currency_code(s.currency.as_deref())
        .ok_or_else(|| invalid("data.object.currency", "must be three letters"))?;
    let paid_at: DateTime<Utc> = Utc
        .timestamp_opt(created, 0)
        .single()
        .ok_or_else(|| invalid("created", "is not a Unix time"))?;
    Ok(Event::Paid(NormalizedPayment {
        gateway: Gateway::Stripe,
        external_id: payment_intent,
        order_reference,
        amount_minor,
        currency,
        paid_at,
        payer_telegram_id: None,
    }))
}

/// A Dispute of a charge made without a PaymentIntent: not a Checkout payment of ours.
fn no_payment_intent(d: &Dispute) -> Event {
    Event::Ignored(format!(
        "dispute {} of charge {} names no payment_intent: no payment of ours to match",
        d.id,
        d.charge.as_ref().unwrap_or(&Value::Null)
    ))
}

/// Reads a verified event body.
pub fn read_event(body: &[u8]) -> Result<Event, EventError> {
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| EventError::Malformed(e.to_string()))?;
    match envelope.kind.as_str() {
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            paid_session(envelope.data.object, envelope.created)
        }
        "checkout.session.async_payment_failed" => {
            let s: Session = object(envelope.data.object)?;
            Ok(Event::PaymentFailed {
                order_reference: order_of(s.client_reference_id, s.metadata)?,
            })
        }
        "charge.dispute.created" => {
            let d: Dispute = object(envelope.data.object)?;
            Ok(match d.payment_intent.clone().filter(|p| !p.is_empty()) {
                Some(payment_intent) => Event::Disputed {
                    payment_intent,
                    dispute: format!(
                        "{} ({}, {}, amount {})",
                        d.id,
                        d.reason.as_deref().unwrap_or("no reason"),
                        d.status,
                        d.amount.map_or("unknown".into(), |a| a.to_string())
                    ),
                },
                None => no_payment_intent(&d),
            })
        }
        "charge.dispute.closed" => {
            let d: Dispute = object(envelope.data.object)?;
            if !matches!(d.status.as_str(), "won" | "warning_closed") {
                return Ok(Event::Ignored(format!(
                    "dispute {} closed {}: the payment stays as it is",
                    d.id, d.status
                )));
            }
            Ok(match d.payment_intent.clone().filter(|p| !p.is_empty()) {
                Some(payment_intent) => Event::DisputeWon { payment_intent },
                None => no_payment_intent(&d),
            })
        }
        "charge.refunded" => {
            let c: Charge = object(envelope.data.object)?;
            if !c.refunded {
                return Ok(Event::Ignored(format!(
                    "charge {} refunded in part: nothing taken back",
                    c.id
                )));
            }
            let payment = c.reported();
            let payment_intent = c
                .payment_intent
                .filter(|p| !p.is_empty())
                .ok_or_else(|| invalid("data.object.payment_intent", "is required"))?;
            Ok(Event::Refunded {
                payment_intent,
                payment,
            })
        }
        other => Ok(Event::Ignored(format!(
            "event {} of type {other}",
            envelope.id
        ))),
    }
}

/// One Checkout Session for one order (`mode=payment`, one line item).
#[derive(Debug, Clone)]
pub struct Checkout<'a> {
    pub order_reference: &'a str,
    pub amount_minor: i64,
    /// Upper-case, as stored; sent lower-case as Stripe writes it.
    pub currency: &'a str,
    pub product_name: &'a str,
    /// Where the buyer's browser goes after paying (and when they give up).
    pub return_url: &'a str,
    /// Unix seconds ([`checkout_expires_at`]).
    pub expires_at: i64,
}

/// When the bot's Checkout Session of an order expires: when the order stops being payable as
/// invoiced (`closes_at`, its hold or its open window), but never sooner than
/// [`MIN_OPEN_SECS`] nor later than a day after the order was made (`order_date`), so the
/// session can be made for a while after the order and every retry asks for the same thing.
pub fn checkout_expires_at(order_date: i64, closes_at: i64) -> i64 {
    closes_at
        .max(order_date + MIN_OPEN_SECS)
        .min(order_date + MAX_SESSION_SECS - 60)
}

/// The `Idempotency-Key` of an order's Checkout Session.
pub fn idempotency_key(order_reference: &str) -> String {
    format!("subgate-checkout-{order_reference}")
}

/// The form Stripe's `POST /v1/checkout/sessions` takes for `c`.
pub fn checkout_form(c: &Checkout<'_>) -> Vec<(&'static str, String)> {
    vec![
        ("mode", "payment".into()),
        ("line_items[0][quantity]", "1".into()),
        (
            "line_items[0][price_data][currency]",
            c.currency.to_ascii_lowercase(),
        ),
        (
            "line_items[0][price_data][unit_amount]",
            c.amount_minor.to_string(),
        ),
        (
            "line_items[0][price_data][product_data][name]",
            c.product_name.to_string(),
        ),
        ("client_reference_id", c.order_reference.to_string()),
        ("metadata[order]", c.order_reference.to_string()),
        (
            "payment_intent_data[metadata][order]",
            c.order_reference.to_string(),
        ),
        ("success_url", c.return_url.to_string()),
        ("cancel_url", c.return_url.to_string()),
        ("expires_at", c.expires_at.to_string()),
    ]
}

/// A Checkout Session Stripe made.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckoutSession {
    pub id: String,
    pub url: String,
}

/// Why Stripe did not make the session.
#[derive(Debug, thiserror::Error)]
pub enum ApiCallError {
    /// Worth trying again: no answer, a 5xx, 429, or 409 (the same key still in flight).
    #[error("Stripe: {0}")]
    Transient(String),
    /// Stripe refused the request itself (a 4xx): it will refuse it again.
    #[error("Stripe refused the Checkout Session: {0}")]
    Refused(String),
}

/// Creates (or, for a repeat of the same order, finds again) the order's Checkout Session.
pub async fn create_checkout_session(
    api_url: &str,
    secret_key: &str,
    c: &Checkout<'_>,
) -> Result<CheckoutSession, ApiCallError> {
    let response = http()
        .post(format!("{api_url}/v1/checkout/sessions"))
        .basic_auth(secret_key, Some(""))
        .header("Idempotency-Key", idempotency_key(c.order_reference))
        .form(&checkout_form(c))
        .send()
        .await
        .map_err(|e| ApiCallError::Transient(format!("unreachable: {e}")))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ApiCallError::Transient(format!("answer not read: {e}")))?;
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|e| {
            ApiCallError::Transient(format!("unexpected answer (HTTP {status}): {e}"))
        });
    }
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
    let text = format!("HTTP {}: {message}", status.as_u16());
    if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 409 {
        Err(ApiCallError::Transient(text))
    } else {
        Err(ApiCallError::Refused(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret_for_unit_tests";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"x"}"#;

    /// Computed outside Rust: `printf '%s' '1700000000.{"id":"evt_1","type":"x"}' |
    /// openssl dgst -sha256 -hmac 'whsec_test_secret_for_unit_tests'`.
    const V1: &str = "bfe5c2c46733c71fc549c62093f99afe0f25f593a43a9b00ef790cc26d0e651e";

    #[test]
    fn a_signature_verifies_within_the_tolerance_only() {
        let h = sign(SECRET, 1_700_000_000, BODY);
        assert_eq!(verify(SECRET, Some(&h), BODY, 1_700_000_000, 300), Ok(()));
        assert_eq!(verify(SECRET, Some(&h), BODY, 1_700_000_300, 300), Ok(()));
        assert_eq!(verify(SECRET, Some(&h), BODY, 1_699_999_700, 300), Ok(()));
        assert_eq!(
            verify(SECRET, Some(&h), BODY, 1_700_000_301, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(SECRET, Some(&h), BODY, 1_699_999_699, 300),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn the_signature_matches_an_independent_computation() {
        assert_eq!(
            sign(SECRET, 1_700_000_000, BODY),
            format!("t=1700000000,v1={V1}")
        );
    }

    #[test]
    fn any_v1_may_match_and_other_schemes_are_skipped() {
        let good = sign(SECRET, 1_700_000_000, BODY);
        let v1 = good.split("v1=").nth(1).unwrap();
        let h = format!("t=1700000000,v0=abc,v1={},v1={v1}", "0".repeat(64));
        assert_eq!(verify(SECRET, Some(&h), BODY, 1_700_000_000, 300), Ok(()));
        let other = sign("whsec_other", 1_700_000_000, BODY);
        assert_eq!(
            verify(SECRET, Some(&other), BODY, 1_700_000_000, 300),
            Err(SignatureError::NoMatch)
        );
        // The body is signed byte for byte.
        assert_eq!(
            verify(
                SECRET,
                Some(&good),
                br#"{"id":"evt_1", "type":"x"}"#,
                1_700_000_000,
                300
            ),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        for h in [
            "",
            "t=1700000000",
            "v1=abcd",
            "t=abc,v1=abcd",
            "t=-5,v1=abcd",
            "garbage",
            "t=1700000000,t=1700000000,v1=ab",
        ] {
            let got = verify(SECRET, Some(h), BODY, 1_700_000_000, 300);
            assert!(
                matches!(
                    got,
                    Err(SignatureError::Malformed | SignatureError::NoMatch)
                ),
                "{h:?}: {got:?}"
            );
        }
        assert_eq!(
            verify(SECRET, None, BODY, 0, 300),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(SECRET, Some("t=1700000000,v1=zz"), BODY, 1_700_000_000, 300),
            Err(SignatureError::NoMatch)
        );
    }

    fn session_event(extra: Value) -> Vec<u8> {
        let mut object = serde_json::json!({
            "id": "cs_1", "object": "checkout.session", "payment_status": "paid",
            "payment_intent": "pi_1", "amount_total": 1999, "currency": "usd",
            "client_reference_id": "ord_1", "metadata": {"order": "ord_1"}
        });
        for (k, v) in extra.as_object().unwrap() {
            object[k] = v.clone();
        }
        serde_json::to_vec(&serde_json::json!({
            "id": "evt_1", "object": "event", "type": "checkout.session.completed",
            "created": 1_700_000_000, "data": {"object": object}
        }))
        .unwrap()
    }

    #[test]
    fn a_paid_session_is_a_payment_of_its_payment_intent() {
        let Event::Paid(p) = read_event(&session_event(serde_json::json!({}))).unwrap() else {
            panic!("not a payment")
        };
        assert_eq!(p.gateway, Gateway::Stripe);
        assert_eq!(p.external_id, "pi_1");
        assert_eq!(p.order_reference, "ord_1");
        assert_eq!((p.amount_minor, p.currency.as_str()), (1999, "USD"));
        assert_eq!(p.paid_at.timestamp(), 1_700_000_000);
        // The metadata names the order when client_reference_id is absent.
        let Event::Paid(p) = read_event(&session_event(
            serde_json::json!({"client_reference_id": null}),
        ))
        .unwrap() else {
            panic!("not a payment")
        };
        assert_eq!(p.order_reference, "ord_1");
    }

    #[test]
    fn unpaid_sessions_partial_refunds_and_other_types_are_ignored() {
        let unpaid = session_event(serde_json::json!({"payment_status": "unpaid"}));
        assert!(matches!(read_event(&unpaid), Ok(Event::Ignored(_))));
        let partial = br#"{"id":"evt_2","type":"charge.refunded","created":1,
            "data":{"object":{"id":"ch_1","payment_intent":"pi_1","refunded":false}}}"#;
        assert!(matches!(read_event(partial), Ok(Event::Ignored(_))));
        let full = br#"{"id":"evt_2","type":"charge.refunded","created":1,
            "data":{"object":{"id":"ch_1","payment_intent":"pi_1","refunded":true}}}"#;
        assert!(
            matches!(read_event(full), Ok(Event::Refunded { payment_intent, payment: None }) if payment_intent == "pi_1")
        );
        let described = br#"{"id":"evt_2","type":"charge.refunded","created":1,
            "data":{"object":{"id":"ch_1","payment_intent":"pi_1","refunded":true,
            "amount":1999,"currency":"usd","created":1700000000,"metadata":{"order":"ord_1"}}}}"#;
        let Ok(Event::Refunded {
            payment: Some(p), ..
        }) = read_event(described)
        else {
            panic!("a described refund")
        };
        assert_eq!(
            p,
            Reported {
                order_reference: Some("ord_1".into()),
                amount_minor: 1999,
                currency: "USD".into(),
                paid_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
            }
        );
        let other = br#"{"id":"evt_3","type":"customer.created","created":1,"data":{"object":{}}}"#;
        assert!(matches!(read_event(other), Ok(Event::Ignored(_))));
    }

    fn event_of(kind: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "id": "evt_9", "object": "event", "type": kind, "created": 1_700_000_000,
            "data": {"object": object}
        }))
        .unwrap()
    }

    #[test]
    fn a_delayed_payment_that_succeeds_is_the_same_payment() {
        let completed = session_event(serde_json::json!({}));
        let object = serde_json::from_slice::<Value>(&completed).unwrap()["data"]["object"].clone();
        let Event::Paid(p) = read_event(&event_of(
            "checkout.session.async_payment_succeeded",
            object.clone(),
        ))
        .unwrap() else {
            panic!("not a payment")
        };
        let Event::Paid(q) = read_event(&completed).unwrap() else {
            panic!("not a payment")
        };
        assert_eq!(
            (p.external_id, p.order_reference, p.amount_minor, p.currency),
            (q.external_id, q.order_reference, q.amount_minor, q.currency)
        );
        // A delayed method's session completes unpaid: nothing yet.
        let mut unpaid = object.clone();
        unpaid["payment_status"] = "unpaid".into();
        assert!(matches!(
            read_event(&event_of("checkout.session.completed", unpaid.clone())),
            Ok(Event::Ignored(_))
        ));
        // …and when it fails, its order is named (by the metadata when need be).
        unpaid["client_reference_id"] = Value::Null;
        assert!(matches!(
            read_event(&event_of("checkout.session.async_payment_failed", unpaid.clone())),
            Ok(Event::PaymentFailed { order_reference }) if order_reference == "ord_1"
        ));
        unpaid["metadata"] = serde_json::json!({});
        assert!(matches!(
            read_event(&event_of("checkout.session.async_payment_failed", unpaid)),
            Err(EventError::Invalid {
                field: "data.object.client_reference_id",
                ..
            })
        ));
    }

    #[test]
    fn disputes_name_their_payment_intent_and_only_a_won_close_acts() {
        let dispute = |status: &str, intent: Value| {
            serde_json::json!({"id": "du_1", "object": "dispute", "amount": 1999,
                "charge": "ch_1", "currency": "usd", "payment_intent": intent,
                "reason": "fraudulent", "status": status})
        };
        let opened = read_event(&event_of(
            "charge.dispute.created",
            dispute("needs_response", "pi_1".into()),
        ));
        assert!(
            matches!(opened, Ok(Event::Disputed { ref payment_intent, ref dispute })
                if payment_intent == "pi_1" && dispute.contains("du_1") && dispute.contains("fraudulent")),
            "{opened:?}"
        );
        for status in ["won", "warning_closed"] {
            assert!(matches!(
                read_event(&event_of("charge.dispute.closed", dispute(status, "pi_1".into()))),
                Ok(Event::DisputeWon { payment_intent }) if payment_intent == "pi_1"
            ));
        }
        assert!(matches!(
            read_event(&event_of(
                "charge.dispute.closed",
                dispute("lost", "pi_1".into())
            )),
            Ok(Event::Ignored(_))
        ));
        // A charge made without a PaymentIntent is none of our Checkout payments.
        assert!(matches!(
            read_event(&event_of(
                "charge.dispute.created",
                dispute("needs_response", Value::Null)
            )),
            Ok(Event::Ignored(_))
        ));
        // A status that is not text is a malformed Dispute.
        assert!(matches!(
            read_event(&event_of(
                "charge.dispute.created",
                serde_json::json!({"id": "du_1", "status": 5})
            )),
            Err(EventError::Malformed(_))
        ));
    }

    #[test]
    fn bad_bodies_are_malformed_or_invalid() {
        assert!(matches!(
            read_event(b"not json"),
            Err(EventError::Malformed(_))
        ));
        assert!(matches!(read_event(b"{}"), Err(EventError::Malformed(_))));
        let no_intent = session_event(serde_json::json!({"payment_intent": null}));
        assert!(matches!(
            read_event(&no_intent),
            Err(EventError::Invalid {
                field: "data.object.payment_intent",
                ..
            })
        ));
        let zero = session_event(serde_json::json!({"amount_total": 0}));
        assert!(matches!(read_event(&zero), Err(EventError::Invalid { .. })));
        let bad_currency = session_event(serde_json::json!({"currency": "us"}));
        assert!(matches!(
            read_event(&bad_currency),
            Err(EventError::Invalid { .. })
        ));
        let wrong_type = session_event(serde_json::json!({"amount_total": "1999"}));
        assert!(matches!(
            read_event(&wrong_type),
            Err(EventError::Malformed(_))
        ));
    }

    #[test]
    fn the_session_expiry_depends_on_the_order_only() {
        // An unheld order open an hour: exactly that hour.
        assert_eq!(checkout_expires_at(1000, 1000 + 3600), 1000 + 3600);
        // A short hold: still an hour (Stripe's floor is 30 minutes from the session).
        assert_eq!(checkout_expires_at(1000, 1300), 1000 + 3600);
        // A long hold: never beyond Stripe's day.
        assert_eq!(checkout_expires_at(1000, 1000 + 90_000), 1000 + 86_400 - 60);
    }

    #[test]
    fn the_form_names_the_order_three_ways() {
        let c = Checkout {
            order_reference: "ord_1",
            amount_minor: 1999,
            currency: "USD",
            product_name: "Club",
            return_url: "https://t.me/bot",
            expires_at: 1_700_003_600,
        };
        let form: std::collections::HashMap<_, _> = checkout_form(&c).into_iter().collect();
        assert_eq!(form["mode"], "payment");
        assert_eq!(form["line_items[0][price_data][currency]"], "usd");
        assert_eq!(form["line_items[0][price_data][unit_amount]"], "1999");
        assert_eq!(form["client_reference_id"], "ord_1");
        assert_eq!(form["metadata[order]"], "ord_1");
        assert_eq!(form["expires_at"], "1700003600");
        assert_eq!(idempotency_key("ord_1"), "subgate-checkout-ord_1");
    }
}
