//! A fake Stripe API: a real HTTP server on a free local port that makes Checkout Sessions
//! (`POST /v1/checkout/sessions`) and refunds (`POST /v1/refunds`) the way Stripe does — basic
//! auth with the secret key, a form body, and `Idempotency-Key`: a repeat of a key with the same
//! parameters gets the object the first request made (a repeat with other parameters is
//! refused, as Stripe refuses it). A refund of a payment intent refunded already under another
//! key is refused with `charge_already_refunded`, and a test can make the fake refuse the
//! refunds of an intent (`refuse_refunds`) as Stripe refuses one it cannot make. It keeps every
//! request, so a test can count sessions and refunds and read what was sent, and can be told to
//! lose its next answers (the object is made, the caller gets a 500) to drive retries.
//!
//! Stripe's side of the webhook too: the events it sends ([`event`], with the objects
//! [`checkout_session`] and [`dispute`] in the shapes of Stripe's API reference) and their
//! `Stripe-Signature` ([`signature`]: HMAC-SHA256 over `"{t}.{body}"` keyed with the whole
//! `whsec_…` text, computed here rather than by the service's code).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The secret key the fake accepts.
pub const SECRET_KEY: &str = "sk_test_subgate_fake_0123456789";
/// The webhook signing secret of the tests' Stripe endpoint.
pub const WEBHOOK_SECRET: &str = "whsec_subgate_test_stripe_signing";

/// A request received.
#[derive(Clone, Debug)]
pub struct Received {
    pub idempotency_key: Option<String>,
    pub form: HashMap<String, String>,
}

#[derive(Default)]
struct FakeState {
    /// Idempotency key → (the form, the session made).
    sessions: HashMap<String, (HashMap<String, String>, Value)>,
    made: usize,
    received: Vec<Received>,
    /// Answers to lose (500 after the session or refund is made).
    lose: usize,
    /// Idempotency key → (the form, the refund made).
    refunds: HashMap<String, (HashMap<String, String>, Value)>,
    /// Payment intents refunded, in order (one entry per refund made).
    refunded: Vec<String>,
    /// Payment intent → the message Stripe refuses its refund with.
    refuse: HashMap<String, String>,
}

pub struct FakeStripe {
    /// The value of `STRIPE_API_URL`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeStripe {
    pub async fn start() -> FakeStripe {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let app = Router::new()
            .route("/v1/checkout/sessions", post(create))
            .route("/v1/refunds", post(refund))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeStripe {
            url: format!("http://{addr}"),
            state,
        }
    }

    /// Sessions made (a repeat of a key makes none).
    pub fn sessions_made(&self) -> usize {
        self.state.lock().unwrap().made
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// The next `n` answers are lost: the session is made, the caller gets a 500.
    pub fn lose_answers(&self, n: usize) {
        self.state.lock().unwrap().lose = n;
    }

    /// The payment intents refunded, one entry per refund made (a repeat of a key makes none).
    pub fn refunds(&self) -> Vec<String> {
        self.state.lock().unwrap().refunded.clone()
    }

    /// From now on, refunds of `intent` are refused with `message` (HTTP 400, as Stripe
    /// refuses a refund it cannot make); [`FakeStripe::accept_refunds`] ends it.
    pub fn refuse_refunds(&self, intent: &str, message: &str) {
        self.state
            .lock()
            .unwrap()
            .refuse
            .insert(intent.to_string(), message.to_string());
    }

    /// Refunds of `intent` are made again.
    pub fn accept_refunds(&self, intent: &str) {
        self.state.lock().unwrap().refuse.remove(intent);
    }
}

/// Basic auth with the secret key and a password left empty, as Stripe's clients send it.
fn authorized(headers: &HeaderMap) -> bool {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{SECRET_KEY}:"))
    );
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(expected.as_str())
}

/// `POST /v1/refunds`: a Refund object (`succeeded`) of the whole `payment_intent`.
async fn refund(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "Invalid API Key provided");
    }
    let form: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap();
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        idempotency_key: key.clone(),
        form: form.clone(),
    });
    let Some(intent) = form.get("payment_intent").cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "Missing required param: payment_intent.",
        );
    };
    let key = key.unwrap_or_else(|| format!("none-{}", s.received.len()));
    let made = match s.refunds.get(&key) {
        Some((sent, _)) if *sent != form => {
            return error(
                StatusCode::BAD_REQUEST,
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            );
        }
        Some((_, made)) => made.clone(),
        None => {
            if let Some(message) = s.refuse.get(&intent) {
                return error(StatusCode::BAD_REQUEST, &message.clone());
            }
            if s.refunded.contains(&intent) {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": {"type": "invalid_request_error",
                        "code": "charge_already_refunded",
                        "message": format!("Charge ch_{intent} has already been refunded.")}})),
                )
                    .into_response();
            }
            s.refunded.push(intent.clone());
            let made = json!({
                "id": format!("re_test_{}", s.refunded.len()), "object": "refund",
                "amount": 19900, "charge": format!("ch_{intent}"), "currency": "uah",
                "payment_intent": intent, "metadata": {}, "reason": null,
                "status": "succeeded", "created": chrono::Utc::now().timestamp(),
            });
            s.refunds.insert(key, (form, made.clone()));
            made
        }
    };
    if s.lose > 0 {
        s.lose -= 1;
        return error(StatusCode::INTERNAL_SERVER_ERROR, "answer lost");
    }
    Json(made).into_response()
}

fn error(status: StatusCode, message: &str) -> axum::response::Response {
    (
        status,
        Json(json!({"error": {"type": "invalid_request_error", "message": message}})),
    )
        .into_response()
}

async fn create(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "Invalid API Key provided");
    }
    let form: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap();
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        idempotency_key: key.clone(),
        form: form.clone(),
    });
    let key = key.unwrap_or_else(|| format!("none-{}", s.received.len()));
    let session = match s.sessions.get(&key) {
        Some((sent, _)) if *sent != form => {
            return error(
                StatusCode::BAD_REQUEST,
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            );
        }
        Some((_, session)) => session.clone(),
        None => {
            s.made += 1;
            let id = format!("cs_test_{}", s.made);
            let session = json!({
                "id": id, "object": "checkout.session",
                "url": format!("https://checkout.stripe.com/c/pay/{id}"),
                "client_reference_id": form.get("client_reference_id"),
                "payment_status": "unpaid",
            });
            s.sessions.insert(key, (form, session.clone()));
            session
        }
    };
    if s.lose > 0 {
        s.lose -= 1;
        return error(StatusCode::INTERNAL_SERVER_ERROR, "answer lost");
    }
    Json(session).into_response()
}

// ---- the events Stripe sends ----

/// `t=…,v1=…` as Stripe computes it for `body` at Unix time `t`.
pub fn signature(t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// An event of `kind` about `object`, as Stripe delivers it: a fresh `evt_` id (a test resends
/// the same value to redeliver it), created now.
pub fn event(kind: &str, object: Value) -> Value {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({
        "id": format!("evt_fake_{n}"), "object": "event", "api_version": "2025-03-31.basil",
        "created": chrono::Utc::now().timestamp(), "livemode": false, "pending_webhooks": 1,
        "request": {"id": null, "idempotency_key": null}, "type": kind,
        "data": {"object": object}
    })
}

/// A Checkout Session of our order `reference` in `mode=payment`, paid through `intent`:
/// `payment_status` is `paid`, or `unpaid` while a delayed method (a bank debit) settles and
/// after it failed.
pub fn checkout_session(
    reference: &str,
    intent: &str,
    amount: i64,
    currency: &str,
    payment_status: &str,
) -> Value {
    json!({
        "id": format!("cs_test_{intent}"), "object": "checkout.session", "mode": "payment",
        "status": "complete", "payment_status": payment_status, "payment_intent": intent,
        "amount_total": amount, "amount_subtotal": amount, "currency": currency,
        "client_reference_id": reference, "metadata": {"order": reference},
        "payment_method_types": ["card", "sepa_debit"], "livemode": false
    })
}

/// A Dispute of the charge of `intent` (the charge Checkout made for it), in `status`
/// (`needs_response` when opened, `won` or `lost` when closed).
pub fn dispute(intent: &str, status: &str) -> Value {
    json!({
        "id": format!("du_test_{intent}"), "object": "dispute", "amount": 19900,
        "balance_transactions": [], "charge": format!("ch_test_{intent}"),
        "created": chrono::Utc::now().timestamp(), "currency": "uah",
        "evidence_details": {"due_by": chrono::Utc::now().timestamp() + 7 * 86_400,
            "has_evidence": false, "past_due": false, "submission_count": 0},
        "is_charge_refundable": false, "livemode": false, "metadata": {},
        "payment_intent": intent, "reason": "fraudulent", "status": status
    })
}

/// A Charge of `intent` refunded in whole (`amount_refunded` = `amount`), as `charge.refunded`
/// carries it, naming our order in `metadata.order`.
pub fn refunded_charge(intent: &str, amount: i64, currency: &str, reference: &str) -> Value {
    json!({
        "id": format!("ch_{intent}"), "object": "charge", "amount": amount,
        "amount_refunded": amount, "currency": currency, "payment_intent": intent,
        "refunded": true, "created": chrono::Utc::now().timestamp(),
        "metadata": {"order": reference}, "livemode": false
    })
}
