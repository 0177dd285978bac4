//! A fake Crypto Pay API (@CryptoBot): a real HTTP server on a free local port answering
//! `createInvoice` and `getInvoices` the way Crypto Pay documents them
//! (help.crypt.bot/crypto-pay-api): the app token in the header `Crypto-Pay-API-Token` (a wrong
//! or missing one is `401 {"ok": false, "error": {"code": 401, "name": "UNAUTHORIZED"}}`),
//! JSON parameters, answers `{"ok": true, "result": …}`, a bad parameter
//! `400 {"ok": false, "error": {"code": 400, "name": "<PARAM>_INVALID"}}`. It keeps every
//! request, so a test can read what was asked, and a test can mark an invoice paid (in the
//! asset and amount asked, or others) or expired.
//!
//! Crypto Pay's side of the webhook too: the `invoice_paid` update it sends for a paid invoice
//! ([`FakeCryptoPay::paid_update`]) and its `crypto-pay-api-signature` ([`signature`]: hex
//! HMAC-SHA256 of the body keyed with SHA-256 of the app token, computed here rather than by
//! the service's code).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use chrono::{Duration, SecondsFormat, Utc};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The app token the fake accepts (`<app id>:<secret>`, as @CryptoBot issues them).
pub const TOKEN: &str = "24680:AAsubgateFakeCryptoPayToken0123";
/// Another app's token: its signatures must not be accepted.
pub const OTHER_TOKEN: &str = "13579:AAanotherAppsCryptoPayToken98765";

/// The assets the fake takes (Crypto Pay's list).
const ASSETS: [&str; 9] = [
    "USDT", "TON", "BTC", "ETH", "LTC", "BNB", "TRX", "USDC", "JET",
];

/// A request received: the method and its JSON parameters.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub params: Value,
}

#[derive(Default)]
struct FakeState {
    next_id: i64,
    next_update: i64,
    /// Invoice id → the Invoice object.
    invoices: BTreeMap<i64, Value>,
    received: Vec<Received>,
}

pub struct FakeCryptoPay {
    /// The value of `CRYPTOPAY_API_URL`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

fn error(status: StatusCode, name: &str) -> axum::response::Response {
    (
        status,
        Json(json!({"ok": false, "error": {"code": status.as_u16(), "name": name}})),
    )
        .into_response()
}

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl FakeCryptoPay {
    pub async fn start() -> FakeCryptoPay {
        let state = Arc::new(Mutex::new(FakeState {
            next_id: 5000,
            next_update: 90_000,
            ..FakeState::default()
        }));
        let app = Router::new()
            .route("/api/{method}", post(call))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeCryptoPay {
            url: format!("http://{addr}/api"),
            state,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// The `createInvoice` calls received.
    pub fn created(&self) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|r| r.method == "createInvoice")
            .map(|r| r.params)
            .collect()
    }

    /// The invoice of this id, as `getInvoices` would show it.
    pub fn invoice(&self, id: i64) -> Value {
        self.state.lock().unwrap().invoices[&id].clone()
    }

    /// Makes an invoice as `createInvoice` would (for a test that needs one without the bot).
    pub fn make(&self, asset: &str, amount: &str, payload: &str, expires_in: i64) -> Value {
        make(
            &mut self.state.lock().unwrap(),
            &json!({"asset": asset, "amount": amount, "payload": payload,
                    "expires_in": expires_in}),
        )
    }

    /// The buyer paid invoice `id` in the asset and amount it asked.
    pub fn pay(&self, id: i64) -> Value {
        let i = self.invoice(id);
        self.pay_with(
            id,
            i["asset"].as_str().unwrap(),
            i["amount"].as_str().unwrap(),
        )
    }

    /// The buyer paid invoice `id` in `asset`, `amount` (Crypto Pay lets a buyer pay another
    /// accepted asset; a test uses it for a mismatch).
    pub fn pay_with(&self, id: i64, asset: &str, amount: &str) -> Value {
        let mut s = self.state.lock().unwrap();
        let i = s.invoices.get_mut(&id).unwrap();
        i["status"] = "paid".into();
        i["paid_asset"] = asset.into();
        i["paid_amount"] = amount.into();
        i["paid_at"] = now_text().into();
        i["paid_anonymously"] = false.into();
        i["fee_asset"] = asset.into();
        i["fee_amount"] = "0.01".into();
        i["paid_usd_rate"] = "1.00".into();
        i.clone()
    }

    /// Invoice `id` ran out unpaid.
    pub fn expire(&self, id: i64) {
        let mut s = self.state.lock().unwrap();
        s.invoices.get_mut(&id).unwrap()["status"] = "expired".into();
    }

    /// The `invoice_paid` update Crypto Pay sends for paid invoice `id` (a fresh `update_id`
    /// and `request_date`), as the raw body.
    pub fn paid_update(&self, id: i64) -> String {
        let mut s = self.state.lock().unwrap();
        s.next_update += 1;
        json!({
            "update_id": s.next_update,
            "update_type": "invoice_paid",
            "request_date": now_text(),
            "payload": s.invoices[&id],
        })
        .to_string()
    }
}

fn make(s: &mut FakeState, params: &Value) -> Value {
    s.next_id += 1;
    let id = s.next_id;
    let hash = format!("IVfake{id}");
    let expires_in = params["expires_in"].as_i64();
    let invoice = json!({
        "invoice_id": id,
        "hash": hash,
        "currency_type": "crypto",
        "asset": params["asset"],
        "amount": params["amount"],
        "pay_url": format!("https://t.me/CryptoBot?start={hash}"),
        "bot_invoice_url": format!("https://t.me/CryptoBot?start={hash}"),
        "mini_app_invoice_url": format!("https://t.me/CryptoBot/app?startapp=invoice-{hash}"),
        "web_app_invoice_url": format!("https://app.send.tg/invoices/{hash}"),
        "description": params.get("description").cloned().unwrap_or(Value::Null),
        "status": "active",
        "created_at": now_text(),
        "allow_comments": true,
        "allow_anonymous": true,
        "expiration_date": expires_in.map(|s| (Utc::now() + Duration::seconds(s))
            .to_rfc3339_opts(SecondsFormat::Millis, true)),
        "payload": params.get("payload").cloned().unwrap_or(Value::Null),
        "paid_btn_name": params.get("paid_btn_name").cloned().unwrap_or(Value::Null),
        "paid_btn_url": params.get("paid_btn_url").cloned().unwrap_or(Value::Null),
    });
    s.invoices.insert(id, invoice.clone());
    invoice
}

/// Whether `amount` is a decimal string Crypto Pay takes: a positive number.
fn valid_amount(amount: &Value) -> bool {
    amount.as_str().is_some_and(|a| {
        !a.is_empty()
            && a.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && a.parse::<f64>().is_ok_and(|v| v > 0.0)
    })
}

async fn call(
    State(state): State<Arc<Mutex<FakeState>>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    if headers
        .get("crypto-pay-api-token")
        .and_then(|v| v.to_str().ok())
        != Some(TOKEN)
    {
        return error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
    }
    let params: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(_) => return error(StatusCode::BAD_REQUEST, "PARAMS_INVALID"),
        }
    };
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        method: method.clone(),
        params: params.clone(),
    });
    match method.as_str() {
        "createInvoice" => {
            if !params["asset"]
                .as_str()
                .is_some_and(|a| ASSETS.contains(&a))
            {
                return error(StatusCode::BAD_REQUEST, "ASSET_INVALID");
            }
            if !valid_amount(&params["amount"]) {
                return error(StatusCode::BAD_REQUEST, "AMOUNT_INVALID");
            }
            if let Some(e) = params.get("expires_in")
                && !e.as_i64().is_some_and(|e| (1..=2_678_400).contains(&e))
            {
                return error(StatusCode::BAD_REQUEST, "EXPIRES_IN_INVALID");
            }
            if params["payload"].as_str().is_some_and(|p| p.len() > 4096) {
                return error(StatusCode::BAD_REQUEST, "PAYLOAD_TOO_LONG");
            }
            let invoice = make(&mut s, &params);
            Json(json!({"ok": true, "result": invoice})).into_response()
        }
        "getInvoices" => {
            let ids: Vec<i64> = params["invoice_ids"]
                .as_str()
                .unwrap_or("")
                .split(',')
                .filter_map(|i| i.trim().parse().ok())
                .collect();
            let items: Vec<Value> = s
                .invoices
                .iter()
                .filter(|(id, _)| ids.is_empty() || ids.contains(id))
                .map(|(_, i)| i.clone())
                .collect();
            Json(json!({"ok": true, "result": {"items": items}})).into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "METHOD_NOT_FOUND"),
    }
}

/// `crypto-pay-api-signature` as Crypto Pay computes it for `body` with the app's `token`.
pub fn signature(token: &str, body: &str) -> String {
    let key = Sha256::digest(token.as_bytes());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}
