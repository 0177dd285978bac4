//! A fake Monobank acquiring API: a real HTTP server on a free local port holding a real P-256
//! key pair of its own (made anew per fake, and again at each [`FakeMonobank::rotate`]), that
//! answers as Monobank's documentation describes — every call needs `X-Token`:
//! - `GET /api/merchant/pubkey` → `{"key": <base64 of the PEM public key>}` (counted, so a test
//!   can tell how often the service fetched it);
//! - `POST /api/merchant/invoice/create` → `{"invoiceId", "pageUrl"}`, the request recorded;
//! - `GET /api/merchant/invoice/status?invoiceId=` → the invoice's report (the webhook's
//!   schema), in the status a test set ([`FakeMonobank::set_status`]);
//! - `POST /api/merchant/invoice/cancel` → `{"status", "createdDate", "modifiedDate"}` for a
//!   paid invoice (the invoice becomes `reversed`), `400` otherwise.
//!
//! Monobank's side of the webhook too: [`FakeMonobank::report`] is an invoice's report as
//! Monobank sends it, and [`FakeMonobank::sign`] its `X-Sign` (ECDSA P-256 / SHA-256, DER,
//! base64), computed here with the fake's private key rather than by the service's code.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::{DateTime, Utc};
use p256::{
    ecdsa::{Signature, SigningKey, signature::Signer},
    pkcs8::{EncodePublicKey, LineEnding},
};
use serde_json::{Value, json};

/// The token the fake accepts (`MONOBANK_TOKEN`).
pub const TOKEN: &str = "mono_test_token_0123456789abcdef";

/// An invoice the fake made.
#[derive(Clone, Debug)]
pub struct Invoice {
    pub id: String,
    /// The request's body, as sent.
    pub request: Value,
    pub page_url: String,
    pub status: String,
    pub modified: DateTime<Utc>,
}

impl Invoice {
    pub fn reference(&self) -> &str {
        self.request["merchantPaymInfo"]["reference"]
            .as_str()
            .unwrap_or_default()
    }

    pub fn amount(&self) -> i64 {
        self.request["amount"].as_i64().unwrap_or_default()
    }
}

struct FakeState {
    key: SigningKey,
    invoices: Vec<Invoice>,
    pubkey_fetches: usize,
    status_calls: usize,
    cancels: Vec<Value>,
}

pub struct FakeMonobank {
    /// The value of `MONOBANK_API_URL`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

fn new_key() -> SigningKey {
    SigningKey::random(&mut rand::rngs::OsRng)
}

impl FakeMonobank {
    pub async fn start() -> FakeMonobank {
        let state = Arc::new(Mutex::new(FakeState {
            key: new_key(),
            invoices: Vec::new(),
            pubkey_fetches: 0,
            status_calls: 0,
            cancels: Vec::new(),
        }));
        let app = Router::new()
            .route("/api/merchant/pubkey", get(pubkey))
            .route("/api/merchant/invoice/create", post(create))
            .route("/api/merchant/invoice/status", get(status))
            .route("/api/merchant/invoice/cancel", post(cancel))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeMonobank {
            url: format!("http://{addr}"),
            state,
        }
    }

    /// Monobank rotates its key: webhooks are signed with a new one, and the pubkey endpoint
    /// serves it.
    pub fn rotate(&self) {
        self.state.lock().unwrap().key = new_key();
    }

    /// How often the public key was fetched.
    pub fn pubkey_fetches(&self) -> usize {
        self.state.lock().unwrap().pubkey_fetches
    }

    /// How often an invoice's status was asked.
    pub fn status_calls(&self) -> usize {
        self.state.lock().unwrap().status_calls
    }

    /// The invoices made, oldest first.
    pub fn invoices(&self) -> Vec<Invoice> {
        self.state.lock().unwrap().invoices.clone()
    }

    /// The refund requests received.
    pub fn cancels(&self) -> Vec<Value> {
        self.state.lock().unwrap().cancels.clone()
    }

    /// Moves an invoice to `status` (as a buyer paying, or Monobank expiring it, would), now.
    pub fn set_status(&self, invoice_id: &str, status: &str) {
        let mut s = self.state.lock().unwrap();
        let invoice = s.invoices.iter_mut().find(|i| i.id == invoice_id).unwrap();
        invoice.status = status.to_string();
        invoice.modified = Utc::now();
    }

    /// The `X-Sign` Monobank sends with `body`: signed by the fake's current key.
    pub fn sign(&self, body: &str) -> String {
        let key = self.state.lock().unwrap().key.clone();
        sign_with(&key, body)
    }

    /// The `X-Sign` of `body` by a key that is not Monobank's.
    pub fn sign_by_stranger(body: &str) -> String {
        sign_with(&new_key(), body)
    }

    /// The report of a made invoice in its status now, as Monobank's webhook body.
    pub fn report_of(&self, invoice_id: &str) -> String {
        let s = self.state.lock().unwrap();
        let invoice = s.invoices.iter().find(|i| i.id == invoice_id).unwrap();
        report_body(invoice).to_string()
    }
}

fn sign_with(key: &SigningKey, body: &str) -> String {
    let signature: Signature = key.sign(body.as_bytes());
    STANDARD.encode(signature.to_der().as_bytes())
}

/// A report as Monobank's webhook sends it (and `invoice/status` answers), in the
/// documented field order.
pub fn report(
    invoice_id: &str,
    status: &str,
    amount: i64,
    ccy: i64,
    reference: &str,
    modified: DateTime<Utc>,
) -> String {
    json!({
        "invoiceId": invoice_id, "status": status, "amount": amount, "ccy": ccy,
        "finalAmount": if status == "success" { amount } else { 0 },
        "createdDate": (modified - chrono::Duration::minutes(1))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "modifiedDate": modified.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "reference": reference, "destination": "Оплата підписки", "cancelList": []
    })
    .to_string()
}

fn report_body(i: &Invoice) -> Value {
    serde_json::from_str(&report(
        &i.id,
        &i.status,
        i.amount(),
        i.request["ccy"].as_i64().unwrap_or(980),
        i.reference(),
        i.modified,
    ))
    .unwrap()
}

fn refuse(status: StatusCode, code: &str, text: &str) -> Response {
    (status, Json(json!({"errCode": code, "errText": text}))).into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("x-token").and_then(|v| v.to_str().ok()) == Some(TOKEN)
}

async fn pubkey(State(state): State<Arc<Mutex<FakeState>>>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", "invalid 'X-Token'");
    }
    let mut s = state.lock().unwrap();
    s.pubkey_fetches += 1;
    let pem = s
        .key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    Json(json!({"key": STANDARD.encode(pem)})).into_response()
}

async fn create(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", "invalid 'X-Token'");
    }
    if body["amount"].as_i64().is_none_or(|a| a <= 0) {
        return refuse(StatusCode::BAD_REQUEST, "BAD_REQUEST", "amount is required");
    }
    let mut s = state.lock().unwrap();
    let id = format!("p2_fake{}", s.invoices.len() + 1);
    let page_url = format!("https://pay.mbnk.biz/{id}");
    s.invoices.push(Invoice {
        id: id.clone(),
        request: body,
        page_url: page_url.clone(),
        status: "created".into(),
        modified: Utc::now(),
    });
    Json(json!({"invoiceId": id, "pageUrl": page_url})).into_response()
}

async fn status(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !authorized(&headers) {
        return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", "invalid 'X-Token'");
    }
    let mut s = state.lock().unwrap();
    s.status_calls += 1;
    let id = q.get("invoiceId").cloned().unwrap_or_default();
    match s.invoices.iter().find(|i| i.id == id) {
        Some(i) => Json(report_body(i)).into_response(),
        None => refuse(StatusCode::NOT_FOUND, "NOT_FOUND", "invoice not found"),
    }
}

async fn cancel(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", "invalid 'X-Token'");
    }
    let mut s = state.lock().unwrap();
    s.cancels.push(body.clone());
    let id = body["invoiceId"].as_str().unwrap_or_default().to_string();
    let Some(i) = s.invoices.iter_mut().find(|i| i.id == id) else {
        return refuse(StatusCode::NOT_FOUND, "NOT_FOUND", "invoice not found");
    };
    if i.status != "success" {
        return refuse(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "the invoice is not paid",
        );
    }
    i.status = "reversed".into();
    i.modified = Utc::now();
    let at = i
        .modified
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Json(json!({"status": "processing", "createdDate": at, "modifiedDate": at})).into_response()
}
