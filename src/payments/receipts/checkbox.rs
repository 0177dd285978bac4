//! The Checkbox API, the few calls a receipt takes: a small typed client over reqwest, in the
//! style of the Stripe client ([`crate::payments::gateways::stripe`]).
//!
//! What Checkbox documents (its integration guide, `wiki.checkbox.ua/uk/api-specification`,
//! and the OpenAPI reference at `api.checkbox.ua/api/redoc`; the calls and answers below are
//! those its public SDKs make and read, e.g. `checkbox_sdk.methods.cashier`, `…shifts`,
//! `…receipts`):
//!
//! - **Headers.** `X-Client-Name` (the integration's name, required) and `X-Client-Version`;
//!   `X-License-Key` (the cash register's license key) where the call acts on the register —
//!   the cashier's sign-in and opening a shift — and, harmlessly, on every call;
//!   `Authorization: Bearer <access_token>` on every call but the sign-in.
//! - **Sign-in.** `POST /api/v1/cashier/signin` `{"login", "password"}` → `{"access_token",
//!   …}`. A token that stops being accepted answers 401: the cashier signs in again, once per
//!   call ([`Cashier::issue`]).
//! - **Shift.** Receipts are made in the register's open shift. `GET /api/v1/cashier/shift` is
//!   the cashier's current shift (`null` when none); `POST /api/v1/shifts` opens one, which is
//!   `CREATED` (then `OPENING`) until the tax service has registered it: `GET
//!   /api/v1/shifts/{id}` is read until it is `OPENED` (or `CLOSED`: it could not be opened).
//!   A shift another process opened meanwhile makes the open refused; the current shift is
//!   read again then.
//! - **Receipt.** `POST /api/v1/receipts/sell` with our own `id` (a UUID), the goods — each
//!   `{"good": {"code", "name", "price"}, "quantity", "is_return"}`, the price in kopiyky and
//!   the quantity in thousandths (1000 is one) — and the payments (`{"type": "CASHLESS",
//!   "value"}`, kopiyky); a return receipt is the same call with `is_return: true` on its good.
//!   Checkbox keeps one receipt per id: the same id again is refused with 400 and `code:
//!   "receipt.already_exists"` (also while the first is being processed), which means "made":
//!   the receipt is then read by its id. The receipt is `CREATED` until the tax service has
//!   registered it: `GET /api/v1/receipts/{id}` is read until it is `DONE` (with its
//!   `fiscal_code`) or `ERROR` (the id is used up: the sale is issued again under a new id).
//! - **Public page.** A done receipt is shown to anyone at `https://check.checkbox.ua/{id}`
//!   ([`RECEIPT_PAGE`]).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{config::CheckboxConfig, payments::gateways::http};

/// Where a receipt's public page is, followed by its id.
pub const RECEIPT_PAGE: &str = "https://check.checkbox.ua";

/// The longest good name we send (Checkbox's receipts print it; longer names are clipped).
pub const GOOD_NAME_MAX: usize = 128;

/// One item at a time: Checkbox counts quantities in thousandths.
pub const ONE: i64 = 1000;

/// How often a shift or a receipt being registered is read again.
const POLL_EVERY: Duration = Duration::from_millis(250);

/// How long one attempt waits for a shift to open, or a receipt to be done; the next attempt
/// of the effect reads it again.
const WAIT_FOR: Duration = Duration::from_secs(20);

/// What a receipt registers.
#[derive(Debug, Clone)]
pub struct Sell<'a> {
    /// Our id of the receipt (a UUID), kept until Checkbox confirms it.
    pub id: &'a str,
    pub good_code: &'a str,
    pub good_name: &'a str,
    /// In kopiyky.
    pub price: i64,
    /// A return receipt.
    pub is_return: bool,
}

impl Sell<'_> {
    /// The body of `POST /api/v1/receipts/sell`.
    pub fn body(&self) -> Value {
        json!({
            "id": self.id,
            "goods": [{
                "good": {"code": self.good_code, "name": self.good_name, "price": self.price},
                "quantity": ONE,
                "is_return": self.is_return,
            }],
            "payments": [{"type": "CASHLESS", "value": self.price}],
        })
    }
}

/// A receipt Checkbox confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub fiscal_code: String,
    /// The receipt's public page ([`RECEIPT_PAGE`]).
    pub url: String,
}

/// Why a receipt is not confirmed (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failed {
    /// Worth trying again: no answer, a 5xx, a 429, a refusal that may pass (our credentials,
    /// the shift), or the receipt not registered yet.
    #[error("Checkbox: {0}")]
    Transient(String),
    /// Checkbox registered the receipt under this id as `ERROR`: the id is used up; the sale is
    /// issued again under a new one.
    #[error("Checkbox: the receipt ended in ERROR ({0}); it is issued again under a new id")]
    Error(String),
    /// Checkbox refused the receipt itself (422: it will refuse it again).
    #[error("Checkbox refused the receipt: {0}")]
    Refused(String),
}

/// What one call came to.
enum Call {
    Ok(Value),
    /// 401: the token is not (or no longer) accepted.
    Unauthorized,
    /// Another answer: its status and body.
    Other(u16, Value),
}

/// The message of an error answer (`message`, else `detail`, else the body's start).
fn message(status: u16, body: &Value) -> String {
    let text = body["message"]
        .as_str()
        .or_else(|| body["detail"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string().chars().take(200).collect());
    format!("HTTP {status}: {text}")
}

/// The cashier who signs the receipts, and the access token they hold (kept across receipts:
/// one sign-in serves many), one per worker.
pub struct Cashier {
    config: CheckboxConfig,
    /// The access token; held while signing in, so concurrent receipts sign in once.
    token: tokio::sync::Mutex<Option<String>>,
    /// Held while a shift is looked up and opened, so concurrent receipts open one.
    shift: tokio::sync::Mutex<()>,
}

impl Cashier {
    /// The cashier of `config`.
    pub fn new(config: CheckboxConfig) -> Cashier {
        Cashier {
            config,
            token: tokio::sync::Mutex::new(None),
            shift: tokio::sync::Mutex::new(()),
        }
    }

    /// One call: `body` as JSON for a POST, none for a GET; `token` as the bearer.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Call, Failed> {
        let mut request = http()
            .request(method, format!("{}{path}", self.config.api_url))
            .header("X-Client-Name", "subgate")
            .header("X-Client-Version", env!("CARGO_PKG_VERSION"))
            .header("X-License-Key", self.config.license_key.expose());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failed::Transient(format!("unreachable: {e}")))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Failed::Transient(format!("answer not read: {e}")))?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes).chars().take(200).collect())
            })
        };
        Ok(match status {
            200..=299 => Call::Ok(body),
            401 => Call::Unauthorized,
            _ => Call::Other(status, body),
        })
    }

    /// The token held, or a new one from signing in.
    async fn token(&self) -> Result<String, Failed> {
        let mut held = self.token.lock().await;
        if let Some(token) = held.as_ref() {
            return Ok(token.clone());
        }
        let body = json!({"login": self.config.login, "password": self.config.password.expose()});
        let signed = match self
            .call(
                reqwest::Method::POST,
                "/api/v1/cashier/signin",
                None,
                Some(&body),
            )
            .await?
        {
            Call::Ok(body) => body,
            Call::Unauthorized => {
                return Err(Failed::Transient(
                    "the cashier's sign-in was refused (HTTP 401): check CHECKBOX_LOGIN and \
                     CHECKBOX_PASSWORD"
                        .into(),
                ));
            }
            Call::Other(status, body) => {
                return Err(Failed::Transient(format!(
                    "the cashier's sign-in failed: {}",
                    message(status, &body)
                )));
            }
        };
        #[derive(Deserialize)]
        struct SignedIn {
            access_token: String,
        }
        let token = SignedIn::deserialize(&signed)
            .map_err(|e| Failed::Transient(format!("unexpected sign-in answer: {e}")))?
            .access_token;
        *held = Some(token.clone());
        Ok(token)
    }

    /// Forgets `token` (refused with 401), unless another receipt has replaced it already.
    async fn forget(&self, token: &str) {
        let mut held = self.token.lock().await;
        if held.as_deref() == Some(token) {
            *held = None;
        }
    }

    /// Issues `sell` and waits until Checkbox confirms it: signs in when no token is held, and
    /// once more when the token is refused (401); opens a shift when none is open; creates the
    /// receipt under its id (a repeat finds the receipt made before); reads it until it is
    /// done. See the module doc for the calls.
    pub async fn issue(&self, sell: &Sell<'_>) -> Result<Issued, Failed> {
        let token = self.token().await?;
        match self.issue_with(&token, sell).await {
            Ok(issued) => Ok(issued),
            Err(Other(failed)) => Err(failed),
            Err(Unauthorized) => {
                self.forget(&token).await;
                let token = self.token().await?;
                match self.issue_with(&token, sell).await {
                    Ok(issued) => Ok(issued),
                    Err(Other(failed)) => Err(failed),
                    Err(Unauthorized) => Err(Failed::Transient(
                        "the cashier's new token was refused too (HTTP 401)".into(),
                    )),
                }
            }
        }
    }

    async fn issue_with(&self, token: &str, sell: &Sell<'_>) -> Result<Issued, Issue> {
        self.open_shift(token).await?;
        let created = self
            .call(
                reqwest::Method::POST,
                "/api/v1/receipts/sell",
                Some(token),
                Some(&sell.body()),
            )
            .await?;
        match created {
            Call::Ok(_) => {}
            Call::Unauthorized => return Err(Unauthorized),
            Call::Other(400, body) if body["code"] == "receipt.already_exists" => {
                tracing::info!(
                    receipt_id = sell.id,
                    "Checkbox has this receipt already; reading it"
                );
            }
            Call::Other(422, body) => return Err(Other(Failed::Refused(message(422, &body)))),
            Call::Other(status, body) => {
                return Err(Other(Failed::Transient(format!(
                    "the receipt was not created: {}",
                    message(status, &body)
                ))));
            }
        }
        self.wait_done(token, sell.id).await
    }

    /// Reads receipt `id` until it is `DONE` (or `ERROR`), for at most [`WAIT_FOR`].
    async fn wait_done(&self, token: &str, id: &str) -> Result<Issued, Issue> {
        let started = tokio::time::Instant::now();
        loop {
            let path = format!("/api/v1/receipts/{id}");
            let receipt = match self
                .call(reqwest::Method::GET, &path, Some(token), None)
                .await?
            {
                Call::Ok(body) => body,
                Call::Unauthorized => return Err(Unauthorized),
                Call::Other(status, body) => {
                    return Err(Other(Failed::Transient(format!(
                        "the receipt was not read: {}",
                        message(status, &body)
                    ))));
                }
            };
            match receipt["status"].as_str() {
                Some("DONE") => {
                    let Some(code) = receipt["fiscal_code"].as_str().filter(|c| !c.is_empty())
                    else {
                        return Err(Other(Failed::Transient(
                            "the receipt is DONE without a fiscal_code".into(),
                        )));
                    };
                    return Ok(Issued {
                        fiscal_code: code.to_string(),
                        url: format!("{RECEIPT_PAGE}/{id}"),
                    });
                }
                Some("ERROR") => {
                    let why = receipt["transaction"]["response_error_message"]
                        .as_str()
                        .unwrap_or("no reason given");
                    return Err(Other(Failed::Error(why.to_string())));
                }
                status => {
                    if started.elapsed() >= WAIT_FOR {
                        return Err(Other(Failed::Transient(format!(
                            "the receipt is still {} after {} s; read again at the next attempt",
                            status.unwrap_or("without a status"),
                            WAIT_FOR.as_secs()
                        ))));
                    }
                    tokio::time::sleep(POLL_EVERY).await;
                }
            }
        }
    }

    /// Makes sure the cashier has an open shift: the current one, or a new one, read until it
    /// is `OPENED`.
    async fn open_shift(&self, token: &str) -> Result<(), Issue> {
        let _one_at_a_time = self.shift.lock().await;
        let mut shift = self.current_shift(token).await?;
        if shift.is_none() {
            match self
                .call(reqwest::Method::POST, "/api/v1/shifts", Some(token), None)
                .await?
            {
                Call::Ok(body) => {
                    tracing::info!(shift = %body["id"], "Checkbox shift opened");
                    shift = Some(body);
                }
                Call::Unauthorized => return Err(Unauthorized),
                // Opened meanwhile by another process: read it.
                Call::Other(status, body) => {
                    shift = self.current_shift(token).await?;
                    if shift.is_none() {
                        return Err(Other(Failed::Transient(format!(
                            "no shift could be opened: {}",
                            message(status, &body)
                        ))));
                    }
                }
            }
        }
        let mut shift = shift.expect("a shift was found or opened");
        let started = tokio::time::Instant::now();
        loop {
            match shift["status"].as_str() {
                Some("OPENED") => return Ok(()),
                Some("CLOSED") => {
                    return Err(Other(Failed::Transient(format!(
                        "the shift could not be opened: {}",
                        shift["initial_transaction"]["response_error_message"]
                            .as_str()
                            .unwrap_or("it is closed")
                    ))));
                }
                status if started.elapsed() >= WAIT_FOR => {
                    return Err(Other(Failed::Transient(format!(
                        "the shift is still {} after {} s",
                        status.unwrap_or("without a status"),
                        WAIT_FOR.as_secs()
                    ))));
                }
                _ => tokio::time::sleep(POLL_EVERY).await,
            }
            let Some(id) = shift["id"].as_str() else {
                return Err(Other(Failed::Transient("a shift without an id".into())));
            };
            let path = format!("/api/v1/shifts/{id}");
            shift = match self
                .call(reqwest::Method::GET, &path, Some(token), None)
                .await?
            {
                Call::Ok(body) => body,
                Call::Unauthorized => return Err(Unauthorized),
                Call::Other(status, body) => {
                    return Err(Other(Failed::Transient(format!(
                        "the shift was not read: {}",
                        message(status, &body)
                    ))));
                }
            };
        }
    }

    /// The cashier's current shift, unless there is none (or it is closed).
    async fn current_shift(&self, token: &str) -> Result<Option<Value>, Issue> {
        match self
            .call(
                reqwest::Method::GET,
                "/api/v1/cashier/shift",
                Some(token),
                None,
            )
            .await?
        {
            Call::Ok(Value::Null) => Ok(None),
            Call::Ok(shift) if shift["status"] == "CLOSED" => Ok(None),
            Call::Ok(shift) => Ok(Some(shift)),
            Call::Unauthorized => Err(Unauthorized),
            Call::Other(status, body) => Err(Other(Failed::Transient(format!(
                "the current shift was not read: {}",
                message(status, &body)
            )))),
        }
    }
}

/// Why one try of [`Cashier::issue`] ended: the token refused, or anything else.
enum Issue {
    Unauthorized,
    Other(Failed),
}
use Issue::{Other, Unauthorized};

impl From<Failed> for Issue {
    fn from(f: Failed) -> Issue {
        Other(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_is_one_good_paid_by_card() {
        let sell = Sell {
            id: "7a1c0d1e-5b52-4bd5-9a3e-0c4f36d1f8a2",
            good_code: "plan-3",
            good_name: "Monthly",
            price: 19900,
            is_return: false,
        };
        assert_eq!(
            sell.body(),
            json!({
                "id": "7a1c0d1e-5b52-4bd5-9a3e-0c4f36d1f8a2",
                "goods": [{"good": {"code": "plan-3", "name": "Monthly", "price": 19900},
                           "quantity": 1000, "is_return": false}],
                "payments": [{"type": "CASHLESS", "value": 19900}],
            })
        );
        let back = Sell {
            is_return: true,
            ..sell
        };
        assert_eq!(back.body()["goods"][0]["is_return"], true);
        assert_eq!(back.body()["payments"][0]["value"], 19900);
    }
}
