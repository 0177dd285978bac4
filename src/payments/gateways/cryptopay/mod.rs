//! Crypto Pay (@CryptoBot, door 6, `POST /api/webhook/cryptopay`): the webhook's signature, its
//! `invoice_paid` update read into the payment the core takes, and the two API calls we make —
//! `createInvoice` for a bot order and `getInvoices` for invoices whose webhook has not come
//! ([`reconcile`]).
//!
//! The wire follows Crypto Pay's API documentation (help.crypt.bot/crypto-pay-api):
//!
//! - **Calls.** `{CRYPTOPAY_API_URL}/{method}` with the app token in the header
//!   `Crypto-Pay-API-Token`, parameters as JSON; every answer is
//!   `{"ok": true, "result": …}` or `{"ok": false, "error": {"code", "name"}}`.
//! - **`createInvoice`** takes `asset` (`USDT`, `TON`, …), `amount` (a decimal string in the
//!   asset), `description` (≤ 1024 characters), `payload` (≤ 4 KB, echoed back: our order
//!   reference), `expires_in` (1..2678400 seconds), `paid_btn_name` (`openBot`, …) with
//!   `paid_btn_url`; it answers an Invoice: `invoice_id`, `status` (`active`, `paid`,
//!   `expired`), `asset`, `amount`, `bot_invoice_url` (`pay_url` before API 1.2),
//!   `mini_app_invoice_url`, `expiration_date`, and once paid `paid_asset`, `paid_amount`,
//!   `paid_at`.
//! - **`getInvoices`** takes `invoice_ids` (comma-separated) and answers the invoices
//!   (`{"items": […]}`; a bare array is accepted too).
//! - **Webhook.** A `POST` of an Update `{"update_id", "update_type": "invoice_paid",
//!   "request_date", "payload": Invoice}`, signed in the header `crypto-pay-api-signature`:
//!   hex HMAC-SHA256 of the raw body, keyed with SHA-256 of the app token ("Verifying webhook
//!   updates"). Compared in constant time. The signature covers no time and no delivery id, so
//!   a signed body stays valid forever: a replay is answered by the payment core's dedupe on
//!   `(cryptopay, invoice_id)` (docs/deviations.md says what "stale" means here).
//!
//! **Money.** A paid invoice becomes a payment in the asset paid (`paid_asset`, else `asset`)
//! of the amount paid (`paid_amount`, else `amount`), converted exactly to the asset's minor
//! units ([`currency::crypto_exponent`]); gateway `cryptopay`, external id the `invoice_id`,
//! order the `payload`, paid at `paid_at` (else the update's `request_date`).

pub mod reconcile;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{
    common::{
        currency::{self, AmountError},
        vocabulary::Gateway,
    },
    payments::{core::NormalizedPayment, gateways::http},
};

/// The header that carries the webhook's signature.
pub const SIGNATURE_HEADER: &str = "crypto-pay-api-signature";
/// The header that carries the app token on API calls.
pub const TOKEN_HEADER: &str = "Crypto-Pay-API-Token";
/// The longest invoice Crypto Pay makes (`expires_in`), in seconds.
pub const MAX_EXPIRES_IN: i64 = 2_678_400;
/// The longest `description` of an invoice, in characters.
pub const DESCRIPTION_MAX: usize = 1024;

/// Why a `crypto-pay-api-signature` was refused (never carries secret material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("crypto-pay-api-signature header missing")]
    Missing,
    #[error("crypto-pay-api-signature does not match the body")]
    NoMatch,
}

fn mac(token: &str, body: &[u8]) -> Hmac<Sha256> {
    let key = Sha256::digest(token.as_bytes());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC accepts keys of any length");
    mac.update(body);
    mac
}

/// The `crypto-pay-api-signature` Crypto Pay sends with `body` for an app of `token` (tests,
/// tooling): hex HMAC-SHA256 of the body keyed with SHA-256 of the token.
pub fn sign(token: &str, body: &[u8]) -> String {
    hex::encode(mac(token, body).finalize().into_bytes())
}

/// Checks `header` against the raw `body` for an app of `token`, in constant time.
pub fn verify(token: &str, header: Option<&str>, body: &[u8]) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    let expected = mac(token, body).finalize().into_bytes();
    // Anything that is not hex of the right length cannot match; it is compared anyway, against
    // zeros, so a malformed header costs what a wrong one does.
    let given = hex::decode(header)
        .ok()
        .filter(|d| d.len() == expected.len());
    let well_formed = given.is_some();
    let given = given.unwrap_or_else(|| vec![0; expected.len()]);
    let matches = bool::from(given.ct_eq(expected.as_slice())) && well_formed;
    if matches {
        Ok(())
    } else {
        Err(SignatureError::NoMatch)
    }
}

/// An Invoice as Crypto Pay describes it (the fields we read).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Invoice {
    pub invoice_id: i64,
    pub status: String,
    #[serde(default)]
    pub asset: Option<String>,
    #[serde(default)]
    pub amount: Option<String>,
    #[serde(default)]
    pub paid_asset: Option<String>,
    #[serde(default)]
    pub paid_amount: Option<String>,
    #[serde(default)]
    pub paid_at: Option<String>,
    #[serde(default)]
    pub payload: Option<String>,
    #[serde(default)]
    pub bot_invoice_url: Option<String>,
    #[serde(default)]
    pub pay_url: Option<String>,
    #[serde(default)]
    pub mini_app_invoice_url: Option<String>,
    #[serde(default)]
    pub expiration_date: Option<String>,
}

impl Invoice {
    /// The URL a buyer pays it at: `bot_invoice_url` (`pay_url` before API 1.2).
    pub fn pay_url(&self) -> Option<&str> {
        self.bot_invoice_url
            .as_deref()
            .or(self.pay_url.as_deref())
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
    }
}

/// What a verified update asks of us.
#[derive(Debug, Clone)]
pub enum Update {
    /// An `invoice_paid`: a payment for the core.
    Paid(NormalizedPayment),
    /// Another update type; the text says which.
    Ignored(String),
}

/// Why a verified body could not be read: 400 (not JSON, a field of the wrong type) or 422 (a
/// field missing or invalid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    #[error("{0}")]
    Malformed(String),
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> UpdateError {
    UpdateError::Invalid {
        field,
        message: message.into(),
    }
}

#[derive(Deserialize)]
struct Envelope {
    update_id: Option<i64>,
    update_type: String,
    #[serde(default)]
    request_date: Option<String>,
    #[serde(default)]
    payload: Option<Value>,
}

/// The update's id, when the body is an update at all (for logs).
pub fn update_id(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("update_id")?
        .as_i64()
}

fn time(text: Option<&str>) -> Option<DateTime<Utc>> {
    text.and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// A crypto amount (`"4.99"`) in the minor units of `asset`: the asset must be one of ours and
/// the text a plain decimal with no more places than its minor unit has. Pure.
pub fn amount_minor(asset: &str, amount: &str) -> Result<i64, String> {
    let exponent = currency::crypto_exponent(asset)
        .ok_or_else(|| format!("{asset} is not an asset this service counts"))?;
    match currency::decimal_to_minor(amount, exponent) {
        Ok(minor) if minor > 0 => Ok(minor),
        Ok(_) => Err("must be more than 0".into()),
        Err(AmountError::TooPrecise) => Err(format!(
            "{amount} has more than {exponent} decimal places, the minor unit of {asset}"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The payment of a paid `invoice` (from the webhook or `getInvoices`); `fallback_paid_at`
/// when it says no `paid_at`. Errors name the field as the webhook's body places it
/// (`payload.…`).
pub fn payment_of(
    invoice: &Invoice,
    fallback_paid_at: DateTime<Utc>,
) -> Result<NormalizedPayment, UpdateError> {
    let order_reference = invoice
        .payload
        .clone()
        .filter(|r| (1..=255).contains(&r.len()))
        .ok_or_else(|| invalid("payload.payload", "is required (the order reference)"))?;
    let asset = invoice
        .paid_asset
        .clone()
        .or_else(|| invoice.asset.clone())
        .ok_or_else(|| invalid("payload.paid_asset", "is required"))?;
    let amount = invoice
        .paid_amount
        .as_deref()
        .or(invoice.amount.as_deref())
        .ok_or_else(|| invalid("payload.paid_amount", "is required"))?;
    let amount_minor =
        amount_minor(&asset, amount).map_err(|why| invalid("payload.paid_amount", why))?;
    Ok(NormalizedPayment {
        gateway: Gateway::CryptoPay,
        external_id: invoice.invoice_id.to_string(),
        order_reference,
        amount_minor,
        currency: asset,
        paid_at: time(invoice.paid_at.as_deref()).unwrap_or(fallback_paid_at),
        payer_telegram_id: None,
    })
}

/// Reads a verified update body.
pub fn read_update(body: &[u8]) -> Result<Update, UpdateError> {
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| UpdateError::Malformed(e.to_string()))?;
    if envelope.update_type != "invoice_paid" {
        return Ok(Update::Ignored(format!(
            "update {} of type {}",
            envelope.update_id.unwrap_or_default(),
            envelope.update_type
        )));
    }
    let payload = envelope
        .payload
        .ok_or_else(|| invalid("payload", "is required (the paid Invoice)"))?;
    let invoice: Invoice = serde_json::from_value(payload)
        .map_err(|e| UpdateError::Malformed(format!("payload: {e}")))?;
    if invoice.status != "paid" {
        return Err(invalid(
            "payload.status",
            format!(
                "is {:?}; an invoice_paid update names a paid invoice",
                invoice.status
            ),
        ));
    }
    let received = time(envelope.request_date.as_deref()).unwrap_or_else(Utc::now);
    Ok(Update::Paid(payment_of(&invoice, received)?))
}

/// One `createInvoice` for one order.
#[derive(Debug, Clone, Serialize)]
pub struct NewInvoice<'a> {
    pub asset: &'a str,
    /// A decimal in the asset ([`currency::minor_to_short_decimal`]).
    pub amount: String,
    pub description: &'a str,
    /// Our order reference.
    pub payload: &'a str,
    pub expires_in: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_btn_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_btn_url: Option<String>,
}

impl<'a> NewInvoice<'a> {
    /// The invoice of `amount_minor` of `asset` for order `reference`, open `expires_in`
    /// seconds (clamped to Crypto Pay's 1..2678400), with a button back to the bot after paying
    /// when its username is known.
    pub fn new(
        asset: &'a str,
        amount_minor: i64,
        description: &'a str,
        reference: &'a str,
        expires_in: i64,
        bot_username: Option<&str>,
    ) -> NewInvoice<'a> {
        let exponent = currency::crypto_exponent(asset).unwrap_or(0);
        NewInvoice {
            asset,
            amount: currency::minor_to_short_decimal(amount_minor, exponent),
            description,
            payload: reference,
            expires_in: expires_in.clamp(1, MAX_EXPIRES_IN),
            paid_btn_name: bot_username.map(|_| "openBot"),
            paid_btn_url: bot_username.map(|u| format!("https://t.me/{u}")),
        }
    }
}

/// Why a call did not give an answer to act on.
#[derive(Debug, thiserror::Error)]
pub enum ApiCallError {
    /// Worth trying again: no answer, a 5xx, 429, or an answer we could not read.
    #[error("Crypto Pay: {0}")]
    Transient(String),
    /// Crypto Pay refused the request itself (`ok: false` with a 4xx): it will refuse it again.
    #[error("Crypto Pay refused the call: {0}")]
    Refused(String),
}

#[derive(Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// Calls `method` with `params`; the `result` of an `ok` answer.
async fn call(
    api_url: &str,
    token: &str,
    method: &str,
    params: &impl Serialize,
) -> Result<Value, ApiCallError> {
    let response = http()
        .post(format!("{api_url}/{method}"))
        .header(TOKEN_HEADER, token)
        .json(params)
        .send()
        .await
        .map_err(|e| ApiCallError::Transient(format!("{method}: unreachable: {e}")))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ApiCallError::Transient(format!("{method}: answer not read: {e}")))?;
    let answer: Option<Answer> = serde_json::from_slice(&body).ok();
    match answer {
        Some(Answer {
            ok: true,
            result: Some(result),
            ..
        }) if status.is_success() => Ok(result),
        Some(Answer { error, .. })
            if status.is_client_error() && status.as_u16() != 429 && error.is_some() =>
        {
            let error = error.unwrap_or_default();
            Err(ApiCallError::Refused(format!(
                "{method}: HTTP {}: {} {}",
                status.as_u16(),
                error["code"],
                error["name"].as_str().unwrap_or("")
            )))
        }
        _ => Err(ApiCallError::Transient(format!(
            "{method}: HTTP {}: {}",
            status.as_u16(),
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        ))),
    }
}

/// `createInvoice`: the invoice Crypto Pay made.
pub async fn create_invoice(
    api_url: &str,
    token: &str,
    invoice: &NewInvoice<'_>,
) -> Result<Invoice, ApiCallError> {
    let result = call(api_url, token, "createInvoice", invoice).await?;
    serde_json::from_value(result)
        .map_err(|e| ApiCallError::Transient(format!("createInvoice: unexpected answer: {e}")))
}

/// `getInvoices` of these ids (at most 1000, Crypto Pay's page).
pub async fn get_invoices(
    api_url: &str,
    token: &str,
    invoice_ids: &[i64],
) -> Result<Vec<Invoice>, ApiCallError> {
    let ids = invoice_ids
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let params = serde_json::json!({"invoice_ids": ids, "count": invoice_ids.len().max(1)});
    let result = call(api_url, token, "getInvoices", &params).await?;
    let items = match result {
        Value::Object(mut o) => o.remove("items").unwrap_or(Value::Null),
        other => other,
    };
    serde_json::from_value(items)
        .map_err(|e| ApiCallError::Transient(format!("getInvoices: unexpected answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "1234:AAbbCCddEEffGGhhIIjjKKllMMnnOOpp";
    const BODY: &[u8] = br#"{"update_id":1,"update_type":"invoice_paid"}"#;

    /// Computed outside Rust: `key=$(printf '%s' "$TOKEN" | openssl dgst -sha256 -binary |
    /// xxd -p -c 64)`, then `printf '%s' "$BODY" | openssl dgst -sha256 -mac HMAC -macopt
    /// hexkey:$key`.
    const SIGNATURE: &str = "97c63107a01022b06d1dffd07208b03c23fef83a846166565ca937479d760bf5";

    #[test]
    fn the_signature_is_hmac_of_the_body_keyed_with_the_tokens_hash() {
        let key = Sha256::digest(TOKEN.as_bytes());
        let mut m = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        m.update(BODY);
        assert_eq!(sign(TOKEN, BODY), hex::encode(m.finalize().into_bytes()));
        assert_eq!(sign(TOKEN, BODY).len(), 64);
    }

    #[test]
    fn the_signature_matches_an_independent_computation() {
        assert_eq!(sign(TOKEN, BODY), SIGNATURE);
    }

    #[test]
    fn only_the_right_signature_of_the_same_body_verifies() {
        let good = sign(TOKEN, BODY);
        assert_eq!(verify(TOKEN, Some(&good), BODY), Ok(()));
        assert_eq!(verify(TOKEN, Some(&good.to_uppercase()), BODY), Ok(()));
        assert_eq!(verify(TOKEN, None, BODY), Err(SignatureError::Missing));
        assert_eq!(
            verify(
                TOKEN,
                Some(&good),
                br#"{"update_id":2,"update_type":"invoice_paid"}"#
            ),
            Err(SignatureError::NoMatch)
        );
        let other = sign("9999:ZZbbCCddEEffGGhhIIjjKKllMMnnOOpp", BODY);
        assert_eq!(
            verify(TOKEN, Some(&other), BODY),
            Err(SignatureError::NoMatch)
        );
        for bad in ["", "zz", &good[..62], &format!("{good}00")] {
            assert_eq!(
                verify(TOKEN, Some(bad), BODY),
                Err(SignatureError::NoMatch),
                "{bad:?}"
            );
        }
        // Keyed with the token's hash, not the token itself.
        let mut m = Hmac::<Sha256>::new_from_slice(TOKEN.as_bytes()).unwrap();
        m.update(BODY);
        let raw_key = hex::encode(m.finalize().into_bytes());
        assert_eq!(
            verify(TOKEN, Some(&raw_key), BODY),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn amounts_are_exact_in_the_assets_minor_units() {
        assert_eq!(amount_minor("USDT", "4.99"), Ok(4_990_000));
        assert_eq!(amount_minor("USDT", "4.990000"), Ok(4_990_000));
        assert_eq!(amount_minor("TON", "1.5"), Ok(1_500_000_000));
        assert_eq!(amount_minor("TON", "0.000000001"), Ok(1));
        assert_eq!(amount_minor("BTC", "0.00012"), Ok(12_000));
        assert!(amount_minor("USDT", "4.9900001").is_err());
        assert!(amount_minor("USDT", "0").is_err());
        assert!(amount_minor("USDT", "-1").is_err());
        assert!(amount_minor("USDT", "1e2").is_err());
        assert!(amount_minor("USD", "4.99").is_err());
        assert!(amount_minor("DOGE", "4.99").is_err());
    }

    fn paid(invoice: Value) -> Vec<u8> {
        let mut payload = serde_json::json!({"invoice_id": 528890, "hash": "IVDoTcNBYEfk",
            "currency_type": "crypto", "asset": "USDT", "amount": "4.99", "paid_asset": "USDT",
            "paid_amount": "4.99", "status": "paid", "payload": "ord_1",
            "bot_invoice_url": "https://t.me/CryptoBot?start=IVDoTcNBYEfk",
            "created_at": "2026-12-08T01:00:00.000Z", "paid_at": "2026-12-08T01:02:03.000Z",
            "allow_comments": true, "allow_anonymous": true});
        for (k, v) in invoice.as_object().unwrap() {
            payload[k] = v.clone();
        }
        serde_json::to_vec(
            &serde_json::json!({"update_id": 7, "update_type": "invoice_paid",
            "request_date": "2026-12-08T01:02:04.000Z", "payload": payload}),
        )
        .unwrap()
    }

    #[test]
    fn an_invoice_paid_is_a_payment_in_the_asset_paid() {
        let Update::Paid(p) = read_update(&paid(serde_json::json!({}))).unwrap() else {
            panic!("not a payment")
        };
        assert_eq!(p.gateway, Gateway::CryptoPay);
        assert_eq!(p.external_id, "528890");
        assert_eq!(p.order_reference, "ord_1");
        assert_eq!((p.amount_minor, p.currency.as_str()), (4_990_000, "USDT"));
        assert_eq!(p.paid_at.to_rfc3339(), "2026-12-08T01:02:03+00:00");
        // Paid in another asset than asked: kept as paid.
        let Update::Paid(p) = read_update(&paid(
            serde_json::json!({"paid_asset": "TON", "paid_amount": "1.5"}),
        ))
        .unwrap() else {
            panic!("not a payment")
        };
        assert_eq!(
            (p.amount_minor, p.currency.as_str()),
            (1_500_000_000, "TON")
        );
    }

    #[test]
    fn other_updates_are_ignored_and_bad_ones_refused() {
        assert!(matches!(
            read_update(br#"{"update_id": 1, "update_type": "invoice_expired"}"#),
            Ok(Update::Ignored(_))
        ));
        assert!(matches!(
            read_update(b"nope"),
            Err(UpdateError::Malformed(_))
        ));
        assert!(matches!(read_update(b"{}"), Err(UpdateError::Malformed(_))));
        assert!(matches!(
            read_update(&paid(serde_json::json!({"payload": null}))),
            Err(UpdateError::Invalid {
                field: "payload.payload",
                ..
            })
        ));
        assert!(matches!(
            read_update(&paid(serde_json::json!({"paid_amount": "4.9999999"}))),
            Err(UpdateError::Invalid {
                field: "payload.paid_amount",
                ..
            })
        ));
        assert!(matches!(
            read_update(&paid(serde_json::json!({"status": "active"}))),
            Err(UpdateError::Invalid {
                field: "payload.status",
                ..
            })
        ));
        assert!(matches!(
            read_update(&paid(serde_json::json!({"invoice_id": "x"}))),
            Err(UpdateError::Malformed(_))
        ));
    }

    #[test]
    fn a_new_invoice_asks_the_owners_number() {
        let i = NewInvoice::new("USDT", 4_990_000, "Club", "ord_1", 300, Some("subgate_bot"));
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["asset"], "USDT");
        assert_eq!(json["amount"], "4.99");
        assert_eq!(json["payload"], "ord_1");
        assert_eq!(json["expires_in"], 300);
        assert_eq!(json["paid_btn_name"], "openBot");
        assert_eq!(json["paid_btn_url"], "https://t.me/subgate_bot");
        let i = NewInvoice::new("TON", 1_500_000_000, "Club", "ord_1", 9_999_999, None);
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["amount"], "1.5");
        assert_eq!(json["expires_in"], MAX_EXPIRES_IN);
        assert!(json.get("paid_btn_name").is_none());
    }
}
