//! A fake WayForPay API: a real HTTP server on a free local port that answers `CHECK_STATUS`
//! requests (`POST /api`) the way WayForPay does — per order reference, as the test scripts it
//! — signed with the merchant key over
//! `merchantAccount;orderReference;amount;currency;authCode;cardPan;transactionStatus;reasonCode`.
//! It checks each request's own signature (`merchantAccount;orderReference`) and keeps every
//! request it received, so a test can count the calls and read what was sent.
//!
//! It makes refunds too (`transactionType: "REFUND"`, WayForPay's "Refund/Cancellation of
//! payment"): the request's signature is checked over
//! `merchantAccount;orderReference;amount;currency` with the amount as the literal text of the
//! JSON number sent; the answer is signed over
//! `merchantAccount;orderReference;transactionStatus;reasonCode`. A refund made turns the
//! order's `CHECK_STATUS` answer to `Refunded`; a second refund of an order is declined, as
//! WayForPay declines a refund beyond what was paid. A test can script a refusal instead
//! ([`FakeWayForPay::refuse_refunds`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::post};
use serde_json::{Value, json};

use crate::support::helpers::{WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, wayforpay_hmac};

/// What the fake answers about one order reference.
#[derive(Clone, Debug)]
pub enum Script {
    /// A correctly signed answer with this `transactionStatus` (`Approved`, `Declined`,
    /// `Expired`, `Refunded`, `Voided`, `InProcessing`, …) for `amount` (the JSON literal) UAH.
    Status { status: String, amount: String },
    /// The same, signed with another key.
    BadSignature { status: String, amount: String },
    /// HTTP 500 with an HTML page.
    ServerError,
    /// Never answers (the client's timeout must end the call).
    Hang,
}

impl Script {
    pub fn status(status: &str, amount: &str) -> Script {
        Script::Status {
            status: status.into(),
            amount: amount.into(),
        }
    }
}

/// A received request: its body and whether its signature verified.
#[derive(Clone, Debug)]
pub struct Received {
    pub body: Value,
    pub signature_ok: bool,
}

#[derive(Default)]
struct FakeState {
    scripts: HashMap<String, Script>,
    received: Vec<Received>,
    /// Order references refunded, one entry per refund made.
    refunded: Vec<String>,
    /// Order reference → the `reason` a refund of it is declined with.
    refuse: HashMap<String, String>,
}

pub struct FakeWayForPay {
    /// The value of `WAYFORPAY_API_URL`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeWayForPay {
    /// Starts the server on a free port. An order it was not told about is answered as
    /// WayForPay answers an unknown order: `reason` and `reasonCode` only, unsigned.
    pub async fn start() -> FakeWayForPay {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let app = Router::new()
            .route("/api", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeWayForPay {
            url: format!("http://{addr}/api"),
            state,
        }
    }

    /// From now on, answers `script` about `reference`.
    pub fn script(&self, reference: &str, script: Script) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .insert(reference.to_string(), script);
    }

    /// Every request received, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// The order references refunded, one entry per refund made.
    pub fn refunds(&self) -> Vec<String> {
        self.state.lock().unwrap().refunded.clone()
    }

    /// From now on, refunds of `reference` are declined with `reason`;
    /// [`FakeWayForPay::accept_refunds`] ends it.
    pub fn refuse_refunds(&self, reference: &str, reason: &str) {
        self.state
            .lock()
            .unwrap()
            .refuse
            .insert(reference.to_string(), reason.to_string());
    }

    /// Refunds of `reference` are made again.
    pub fn accept_refunds(&self, reference: &str) {
        self.state.lock().unwrap().refuse.remove(reference);
    }

    /// How many requests asked about `reference`.
    pub fn asked_about(&self, reference: &str) -> usize {
        self.received()
            .iter()
            .filter(|r| r.body["orderReference"] == reference)
            .count()
    }
}

/// A signed status answer as WayForPay sends it (the amount is written as given).
pub fn answer(key: &str, reference: &str, status: &str, amount: &str) -> String {
    let approved = status == "Approved" || status == "Refunded" || status == "Voided";
    let (auth_code, reason, reason_code) = if approved {
        ("541963", "Ok", "1100")
    } else {
        ("", "Declined To Card Issuer", "1101")
    };
    let card_pan = "41****8217";
    let signature = wayforpay_hmac(
        key,
        &[
            WAYFORPAY_ACCOUNT,
            reference,
            amount,
            "UAH",
            auth_code,
            card_pan,
            status,
            reason_code,
        ],
    );
    format!(
        r#"{{"merchantAccount":"{WAYFORPAY_ACCOUNT}","reason":"{reason}","reasonCode":{reason_code},"orderReference":"{reference}","amount":{amount},"currency":"UAH","authCode":"{auth_code}","createdDate":1700000000,"processingDate":{processing},"cardPan":"{card_pan}","cardType":"Visa","issuerBankCountry":"980","issuerBankName":"Bank","transactionStatus":"{status}","refundAmount":0,"settlementDate":"","settlementAmount":0,"fee":0,"merchantSignature":"{signature}"}}"#,
        processing = chrono::Utc::now().timestamp(),
    )
}

/// A signed answer to a `REFUND` request, as WayForPay sends it.
pub fn refund_answer(reference: &str, status: &str, reason: &str, reason_code: &str) -> String {
    let signature = wayforpay_hmac(
        WAYFORPAY_KEY,
        &[WAYFORPAY_ACCOUNT, reference, status, reason_code],
    );
    format!(
        r#"{{"merchantAccount":"{WAYFORPAY_ACCOUNT}","orderReference":"{reference}","transactionStatus":"{status}","reason":"{reason}","reasonCode":{reason_code},"merchantSignature":"{signature}"}}"#
    )
}

/// A `REFUND` request: its signature checked over the amount's literal text, the refund made
/// (or declined) and answered signed.
fn handle_refund(state: &Mutex<FakeState>, body: &str) -> axum::response::Response {
    let json_ok = |text: String| {
        (StatusCode::OK, [("content-type", "application/json")], text).into_response()
    };
    let raw: HashMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_str(body).unwrap_or_default();
    let text = |name: &str| -> String {
        raw.get(name)
            .map(|v| {
                serde_json::from_str::<String>(v.get()).unwrap_or_else(|_| v.get().to_string())
            })
            .unwrap_or_default()
    };
    let (account, reference, amount, currency) = (
        text("merchantAccount"),
        text("orderReference"),
        raw.get("amount")
            .map(|v| v.get().to_string())
            .unwrap_or_default(),
        text("currency"),
    );
    let signature_ok = text("merchantSignature")
        == wayforpay_hmac(WAYFORPAY_KEY, &[&account, &reference, &amount, &currency])
        && !text("comment").is_empty()
        && amount.parse::<f64>().is_ok();
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        body: serde_json::from_str(body).unwrap_or(Value::Null),
        signature_ok,
    });
    if !signature_ok {
        return json_ok(json!({"reason": "Invalid signature", "reasonCode": 1113}).to_string());
    }
    if let Some(reason) = s.refuse.get(&reference) {
        return json_ok(refund_answer(
            &reference,
            "Declined",
            &reason.clone(),
            "1101",
        ));
    }
    if s.refunded.contains(&reference) {
        return json_ok(refund_answer(
            &reference,
            "Declined",
            "Refund amount exceeds the payment",
            "1145",
        ));
    }
    s.refunded.push(reference.clone());
    // The order is refunded now: its status answers say so.
    s.scripts
        .insert(reference.clone(), Script::status("Refunded", &amount));
    json_ok(refund_answer(&reference, "Refunded", "Ok", "1100"))
}

async fn handle(
    State(state): State<Arc<Mutex<FakeState>>>,
    body: String,
) -> axum::response::Response {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if request["transactionType"] == "REFUND" {
        return handle_refund(&state, &body);
    }
    let account = request["merchantAccount"].as_str().unwrap_or_default();
    let reference = request["orderReference"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let signature_ok = request["transactionType"] == "CHECK_STATUS"
        && request["merchantSignature"]
            == wayforpay_hmac(WAYFORPAY_KEY, &[account, &reference]).as_str();
    let script = {
        let mut s = state.lock().unwrap();
        s.received.push(Received {
            body: request.clone(),
            signature_ok,
        });
        s.scripts.get(&reference).cloned()
    };
    let json_ok = |text: String| {
        (StatusCode::OK, [("content-type", "application/json")], text).into_response()
    };
    if !signature_ok {
        return json_ok(json!({"reason": "Invalid signature", "reasonCode": 1113}).to_string());
    }
    match script {
        None => json_ok(json!({"reason": "Order not found", "reasonCode": 1112}).to_string()),
        Some(Script::Status { status, amount }) => {
            json_ok(answer(WAYFORPAY_KEY, &reference, &status, &amount))
        }
        Some(Script::BadSignature { status, amount }) => json_ok(answer(
            "not-the-merchant-key-0123456789",
            &reference,
            &status,
            &amount,
        )),
        Some(Script::ServerError) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "<html><body>500 Internal Server Error</body></html>",
        )
            .into_response(),
        Some(Script::Hang) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json_ok(String::new())
        }
    }
}
