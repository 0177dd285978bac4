//! Monobank acquiring (door 5, `POST /api/webhook/monobank`): the `X-Sign` check, an invoice's
//! status report read into what the core, the refund rule and the holds take, and the four API
//! calls we make — the public key, an invoice made for a bot order, an invoice's status (the
//! reconcile), and a refund of a paid invoice (staff refunds).
//!
//! Monobank's documentation (monobank.ua/api-docs/acquiring: "Створення рахунку",
//! "Статус рахунку", "Скасування оплати", "Відкритий ключ для верифікації підписів", and the
//! webhook page "Приклади верифікації підпису webhook") is the source of every field below.
//!
//! **Signature.** `X-Sign` is the base64 of an ECDSA signature (P-256, SHA-256, ASN.1 DER) of
//! the raw body bytes, verified with the merchant's public key from `GET /api/merchant/pubkey`
//! (`{"key": <base64 of a PEM "PUBLIC KEY">}`). The key is cached and fetched again only when a
//! signature stops verifying ([`keys`]). The curve arithmetic is RustCrypto's `p256` crate (its
//! `ecdsa` and `pem` features): the ecosystem's maintained, audited pure-Rust P-256, already
//! built on the `der`/`spki` crates the dependency tree has, rather than a hand-rolled curve or
//! a C library. Pure like the other signature modules.
//!
//! There is no timestamp in the signature, so a signed body can be replayed at any time: a
//! replay is harmless because every report is a state of the invoice, ordered by its
//! `modifiedDate`, and an older state than one already seen changes nothing
//! ([`invoices::observe`]); a replay of the newest state finds its change made.
//!
//! **Reports.** The webhook's body and the status answer are one schema: `invoiceId`,
//! `status` (`created`, `processing`, `hold`, `success`, `failure`, `reversed`, `expired`),
//! `amount` (minor units), `ccy` (ISO 4217 numeric), `reference` (ours, from
//! `merchantPaymInfo.reference`), `createdDate`, `modifiedDate` (RFC 3339), and fields we do not
//! read (`finalAmount`, `failureReason`, `cancelList`, `paymentInfo`, …). Monobank sends no
//! webhook for `expired` and does not order its webhooks; the reconcile finds what they miss.
//!
//! **Invoices.** `POST /api/merchant/invoice/create` with `amount`, `ccy`,
//! `merchantPaymInfo.{reference, destination}`, `redirectUrl`, `webHookUrl`, `validity`
//! (seconds) and `paymentType: "debit"` answers `{"invoiceId", "pageUrl"}`. There is no
//! idempotency key: the invoice made for an order is stored and its page reused while it stays
//! valid ([`invoices`]).

pub mod invoices;
pub mod keys;
pub mod reconcile;
pub mod updates;

use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::{DateTime, Utc};
use p256::{
    PublicKey,
    ecdsa::{Signature, VerifyingKey, signature::Verifier},
    pkcs8::DecodePublicKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::vocabulary::Gateway;
use crate::payments::{core::NormalizedPayment, gateways::http, refunds::at_gateway::Reported};

/// The ISO 4217 numeric code of the hryvnia, the currency the bot sells through Monobank.
pub const UAH: i32 = 980;

crate::text_enum! {
    /// An invoice's status as Monobank reports it (the `status` column of `monobank_invoices`).
    pub enum Status {
        /// Made; not paid yet.
        Created => "created",
        /// The buyer is paying.
        Processing => "processing",
        /// Money held on the card (`paymentType: "hold"`, which we never ask for).
        Hold => "hold",
        /// Paid.
        Success => "success",
        /// The payment failed; the invoice cannot be paid any more.
        Failure => "failure",
        /// Paid, then refunded (a cancel of the payment).
        Reversed => "reversed",
        /// Its validity ran out unpaid.
        Expired => "expired",
    }
}

impl Status {
    /// Whether the invoice has reached a state the reconcile no longer asks about.
    pub fn is_final(self) -> bool {
        !matches!(self, Status::Created | Status::Processing | Status::Hold)
    }
}

// ---- the signature ----

/// Why an `X-Sign` was refused (never carries key material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("X-Sign header missing")]
    Missing,
    #[error("X-Sign is not base64 of a DER ECDSA signature")]
    Malformed,
    #[error("X-Sign does not verify with Monobank's public key")]
    NoMatch,
}

/// `X-Sign` read into a signature: base64 (standard alphabet) of an ASN.1 DER `ECDSA-Sig-Value`.
pub fn parse_signature(header: Option<&str>) -> Result<Signature, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    if header.is_empty() {
        return Err(SignatureError::Missing);
    }
    let der = STANDARD
        .decode(header)
        .map_err(|_| SignatureError::Malformed)?;
    Signature::from_der(&der).map_err(|_| SignatureError::Malformed)
}

/// Whether `signature` is `key`'s over the raw `body` (SHA-256).
pub fn verifies(key: &VerifyingKey, signature: &Signature, body: &[u8]) -> bool {
    key.verify(body, signature).is_ok()
}

/// Checks an `X-Sign` header against the raw `body` with `key`.
pub fn verify(key: &VerifyingKey, header: Option<&str>, body: &[u8]) -> Result<(), SignatureError> {
    let signature = parse_signature(header)?;
    if verifies(key, &signature, body) {
        Ok(())
    } else {
        Err(SignatureError::NoMatch)
    }
}

/// The public key in `GET /api/merchant/pubkey`'s `key`: base64 of a PEM `PUBLIC KEY`
/// (SubjectPublicKeyInfo of a P-256 key).
pub fn parse_public_key(key: &str) -> Result<VerifyingKey, String> {
    let pem = STANDARD
        .decode(key.trim())
        .map_err(|e| format!("the key is not base64: {e}"))?;
    let pem = String::from_utf8(pem).map_err(|_| "the key is not a PEM text".to_string())?;
    let public =
        PublicKey::from_public_key_pem(&pem).map_err(|e| format!("not a P-256 public key: {e}"))?;
    Ok(VerifyingKey::from(&public))
}

// ---- reports ----

/// An invoice's status report (a webhook's body, or the status answer), as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub invoice_id: String,
    pub status: Status,
    /// Minor units of `currency`.
    pub amount_minor: i64,
    /// Three letters, from the numeric `ccy`.
    pub currency: String,
    /// Our order reference (`merchantPaymInfo.reference`); `None` when Monobank says none.
    pub reference: Option<String>,
    /// When Monobank last changed the invoice: what orders two reports of one invoice.
    pub modified_date: DateTime<Utc>,
}

/// What a report asks of us.
#[derive(Debug, Clone)]
pub enum Action {
    /// Paid: a payment for the core.
    Pay(NormalizedPayment),
    /// Refunded: take back what the payment of the invoice bought, or record the refund as it
    /// when it has not come.
    Refund(Reported),
    /// The payment failed or the invoice expired: release the holds of the order of this
    /// reference.
    Release(String),
    /// A state on the way (`created`, `processing`, `hold`), or a report that names no order
    /// where one is needed; the text says which.
    Nothing(String),
}

impl Report {
    /// What this report asks of us ([`Action`]).
    pub fn action(&self) -> Action {
        let reference = self.reference.clone();
        match (self.status, reference) {
            (Status::Success, Some(order_reference)) => Action::Pay(NormalizedPayment {
                gateway: Gateway::Monobank,
                external_id: self.invoice_id.clone(),
                order_reference,
                amount_minor: self.amount_minor,
                currency: self.currency.clone(),
                paid_at: self.modified_date,
                payer_telegram_id: None,
            }),
            // A payment that names no order of ours is still a payment: kept for review.
            (Status::Success, None) => Action::Pay(NormalizedPayment {
                gateway: Gateway::Monobank,
                external_id: self.invoice_id.clone(),
                order_reference: String::new(),
                amount_minor: self.amount_minor,
                currency: self.currency.clone(),
                paid_at: self.modified_date,
                payer_telegram_id: None,
            }),
            (Status::Reversed, reference) => Action::Refund(Reported {
                order_reference: reference,
                amount_minor: self.amount_minor,
                currency: self.currency.clone(),
                paid_at: self.modified_date,
            }),
            (Status::Failure | Status::Expired, Some(reference)) => Action::Release(reference),
            (Status::Failure | Status::Expired, None) => Action::Nothing(format!(
                "invoice {} is {} and names no order",
                self.invoice_id, self.status
            )),
            (Status::Created | Status::Processing | Status::Hold, _) => Action::Nothing(format!(
                "invoice {} is {}: nothing to do yet",
                self.invoice_id, self.status
            )),
        }
    }
}

/// Why a signed body could not be read: 400 (not JSON, a field of the wrong type) or 422 (a
/// required field missing or invalid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("{0}")]
    Malformed(String),
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> ReportError {
    ReportError::Invalid {
        field,
        message: message.into(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    invoice_id: Option<String>,
    status: Option<String>,
    amount: Option<i64>,
    ccy: Option<i32>,
    reference: Option<String>,
    modified_date: Option<String>,
}

/// The letters of an ISO 4217 numeric code Monobank acquiring takes (hryvnia, dollar, euro).
pub fn currency_of(ccy: i32) -> Option<&'static str> {
    match ccy {
        980 => Some("UAH"),
        840 => Some("USD"),
        978 => Some("EUR"),
        _ => None,
    }
}

/// The invoice id of a body, when it has one (for logs).
pub fn invoice_id_of(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("invoiceId")?
        .as_str()
        .map(str::to_string)
}

/// Reads a status report: the webhook's verified body, or the status answer.
pub fn read_report(body: &[u8]) -> Result<Report, ReportError> {
    let w: Wire =
        serde_json::from_slice(body).map_err(|e| ReportError::Malformed(e.to_string()))?;
    let invoice_id = w
        .invoice_id
        .filter(|i| (1..=255).contains(&i.len()))
        .ok_or_else(|| invalid("invoiceId", "is required"))?;
    let status_text = w.status.ok_or_else(|| invalid("status", "is required"))?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| invalid("status", format!("must be {}", Status::spellings())))?;
    let amount_minor = w
        .amount
        .filter(|a| *a > 0)
        .ok_or_else(|| invalid("amount", "must be a positive integer"))?;
    let ccy = w.ccy.unwrap_or(UAH);
    let currency = currency_of(ccy)
        .ok_or_else(|| invalid("ccy", format!("{ccy} is not a currency Monobank takes")))?
        .to_string();
    let modified_date = w
        .modified_date
        .as_deref()
        .and_then(|d| DateTime::parse_from_rfc3339(d).ok())
        .map(|d| d.with_timezone(&Utc))
        .ok_or_else(|| invalid("modifiedDate", "must be an RFC 3339 time"))?;
    let reference = w
        .reference
        .filter(|r| !r.is_empty())
        .map(|r| r.chars().take(255).collect());
    Ok(Report {
        invoice_id,
        status,
        amount_minor,
        currency,
        reference,
        modified_date,
    })
}

// ---- the API ----

/// The body of `POST /api/merchant/invoice/create`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewInvoice<'a> {
    /// Kopiyky.
    pub amount: i64,
    pub ccy: i32,
    pub merchant_paym_info: PaymInfo<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_url: Option<&'a str>,
    pub web_hook_url: &'a str,
    /// Seconds the invoice can be paid.
    pub validity: i64,
    pub payment_type: &'static str,
}

/// `merchantPaymInfo`: our reference and what the buyer's statement says.
#[derive(Debug, Clone, Serialize)]
pub struct PaymInfo<'a> {
    pub reference: &'a str,
    pub destination: &'a str,
}

/// What `invoice/create` answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedInvoice {
    pub invoice_id: String,
    pub page_url: String,
}

/// The body of `POST /api/merchant/invoice/cancel`: the whole payment back without `amount`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancel<'a> {
    pub invoice_id: &'a str,
    /// Our id of the refund (Monobank lists it in the invoice's `cancelList`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext_ref: Option<&'a str>,
    /// Minor units to refund; `None`: all of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
}

crate::text_enum! {
    /// Where a refund (`invoice/cancel`) stands.
    pub enum CancelStatus {
        Processing => "processing",
        Success => "success",
        Failure => "failure",
    }
}

/// What `invoice/cancel` answers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancelled {
    pub status: CancelStatus,
    pub created_date: Option<String>,
    pub modified_date: Option<String>,
}

/// Why a call told us nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiCallError {
    /// Worth trying again: no answer, a 5xx, 429, or an answer we could not read.
    #[error("Monobank: {0}")]
    Transient(String),
    /// Monobank refused the request itself (a 4xx, with its `errCode`/`errText`): it will
    /// refuse it again.
    #[error("Monobank refused the request: {0}")]
    Refused(String),
}

/// Sends `request` with the token and reads a JSON answer of type `T` (see [`ApiCallError`]).
async fn call<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
    token: &str,
) -> Result<(T, Vec<u8>), ApiCallError> {
    let response = request
        .header("X-Token", token)
        .send()
        .await
        .map_err(|e| ApiCallError::Transient(format!("unreachable: {}", e.without_url())))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ApiCallError::Transient(format!("answer not read: {}", e.without_url())))?;
    if status.is_success() {
        let value = serde_json::from_slice(&body).map_err(|e| {
            ApiCallError::Transient(format!("unexpected answer (HTTP {status}): {e}"))
        })?;
        return Ok((value, body.to_vec()));
    }
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .map(|v| {
            format!(
                "{}: {}",
                v["errCode"].as_str().unwrap_or("-"),
                v["errText"].as_str().unwrap_or("-")
            )
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
    let text = format!("HTTP {}: {message}", status.as_u16());
    if status.is_server_error() || status.as_u16() == 429 {
        Err(ApiCallError::Transient(text))
    } else {
        Err(ApiCallError::Refused(text))
    }
}

#[derive(Deserialize)]
struct PubKey {
    key: String,
}

/// `GET /api/merchant/pubkey`: the key webhooks are signed with.
pub async fn fetch_public_key(api_url: &str, token: &str) -> Result<VerifyingKey, ApiCallError> {
    let (answer, _): (PubKey, _) =
        call(http().get(format!("{api_url}/api/merchant/pubkey")), token).await?;
    parse_public_key(&answer.key).map_err(ApiCallError::Transient)
}

/// `POST /api/merchant/invoice/create`.
pub async fn create_invoice(
    api_url: &str,
    token: &str,
    invoice: &NewInvoice<'_>,
) -> Result<CreatedInvoice, ApiCallError> {
    let (created, _) = call(
        http()
            .post(format!("{api_url}/api/merchant/invoice/create"))
            .json(invoice),
        token,
    )
    .await?;
    Ok(created)
}

/// `GET /api/merchant/invoice/status?invoiceId=…`: the invoice's state now, as a webhook
/// would report it. An answer that is not a report is a transient failure (with why).
pub async fn invoice_status(
    api_url: &str,
    token: &str,
    invoice_id: &str,
) -> Result<Report, ApiCallError> {
    let (_, body): (Value, _) = call(
        http()
            .get(format!("{api_url}/api/merchant/invoice/status"))
            .query(&[("invoiceId", invoice_id)]),
        token,
    )
    .await?;
    let report = read_report(&body)
        .map_err(|e| ApiCallError::Transient(format!("not a status answer: {e}")))?;
    if report.invoice_id != invoice_id {
        return Err(ApiCallError::Transient(
            "the answer is about another invoice".into(),
        ));
    }
    Ok(report)
}

/// `POST /api/merchant/invoice/cancel`: refunds a paid invoice (all of it without `amount`).
/// Monobank answers where the refund stands; the invoice's `reversed` report follows.
pub async fn cancel_invoice(
    api_url: &str,
    token: &str,
    cancel: &Cancel<'_>,
) -> Result<Cancelled, ApiCallError> {
    let (cancelled, _) = call(
        http()
            .post(format!("{api_url}/api/merchant/invoice/cancel"))
            .json(cancel),
        token,
    )
    .await?;
    Ok(cancelled)
}

#[cfg(test)]
mod tests;
