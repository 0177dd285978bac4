//! WayForPay's side of a refund staff ask for (door 2): the `REFUND` request and its answer,
//! preceded by a `CHECK_STATUS` of the order so a repeat never asks for a second refund.
//!
//! **The request**, as WayForPay documents "Refund/Cancellation of payment (Refund)"
//! (<https://wiki.wayforpay.com/en/view/852115>): `POST` JSON to `WAYFORPAY_API_URL` with
//! `transactionType: "REFUND"`, `merchantAccount`, `orderReference` (the payment's external
//! id: our order reference), `amount` (the refund in major units: the whole payment),
//! `currency`, `comment` (required: why; staff's reason), `apiVersion: 1` and
//! `merchantSignature` = hex HMAC-MD5(`WAYFORPAY_SECRET_KEY`,
//! `merchantAccount;orderReference;amount;currency`). The amount is written as the shortest
//! decimal of the money (`199`, `199.5`, `199.99`) — the text WayForPay's own callbacks and SDK
//! use for a number — and signed as exactly that text ([`amount_text`]).
//!
//! **The answer** carries `merchantAccount`, `orderReference`, `transactionStatus` (`Refunded`
//! or `Voided`: done; `Declined`: refused; `RefundInProcessing`: accepted, not finished),
//! `reason`, `reasonCode` and `merchantSignature` = hex HMAC-MD5(key,
//! `merchantAccount;orderReference;transactionStatus;reasonCode`) over the literal texts, which
//! is verified (in constant time) before anything in it is believed, with the account and the
//! order. An answer without a signature is WayForPay refusing the request itself (a bad
//! signature of ours, an unknown order): its `reason (reasonCode)` is the refusal.
//!
//! **Once.** WayForPay has no idempotency key, so every attempt first asks `CHECK_STATUS`
//! about the order ([`super::check_status_request`], its answer verified as the reconcile
//! verifies it): an order already `Refunded` or `Voided` is a refund made (by an earlier
//! attempt whose answer was lost, or by hand in WayForPay's portal) and no `REFUND` is sent;
//! one whose refund is `RefundInProcessing` is asked about again later.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use subtle::ConstantTimeEq;

use super::hmac_md5_hex;
use crate::{
    common::currency::minor_unit_exponent, config::WayForPayConfig, payments::gateways::http,
};

/// The `transactionType` of a refund.
pub const REFUND: &str = "REFUND";

/// The `amount` of a refund of `amount_minor` in `currency`: the shortest decimal of the major
/// units (`19900` UAH → `199`, `19950` → `199.5`); `None` for a currency without a known minor
/// unit.
pub fn amount_text(amount_minor: i64, currency: &str) -> Option<String> {
    let exponent = minor_unit_exponent(currency)?;
    let scale = 10_i64.checked_pow(exponent)?;
    let (whole, fraction) = (amount_minor / scale, amount_minor % scale);
    if fraction == 0 {
        return Some(whole.to_string());
    }
    let digits = format!("{fraction:0width$}", width = exponent as usize);
    Some(format!("{whole}.{}", digits.trim_end_matches('0')))
}

/// The hex `merchantSignature` of a `REFUND` request.
pub fn request_signature(
    secret: &[u8],
    merchant_account: &str,
    order_reference: &str,
    amount: &str,
    currency: &str,
) -> String {
    hmac_md5_hex(
        secret,
        &[merchant_account, order_reference, amount, currency],
    )
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    transaction_type: &'a str,
    merchant_account: &'a str,
    order_reference: &'a str,
    amount: &'a RawValue,
    currency: &'a str,
    comment: &'a str,
    merchant_signature: String,
    api_version: u8,
}

/// The JSON body of the `REFUND` of the whole payment `order_reference` (`amount_minor` in
/// `currency`) with `comment`, signed; `None` for a currency without a known minor unit.
pub fn request_body(
    wfp: &WayForPayConfig,
    order_reference: &str,
    amount_minor: i64,
    currency: &str,
    comment: &str,
) -> Option<String> {
    let amount = amount_text(amount_minor, currency)?;
    let raw = RawValue::from_string(amount.clone()).ok()?;
    let body = Request {
        transaction_type: REFUND,
        merchant_account: &wfp.merchant_account,
        order_reference,
        amount: &raw,
        currency,
        comment,
        merchant_signature: request_signature(
            wfp.secret_key.expose().as_bytes(),
            &wfp.merchant_account,
            order_reference,
            &amount,
            currency,
        ),
        api_version: 1,
    };
    serde_json::to_string(&body).ok()
}

/// An answer to `REFUND`, with the signed fields as the texts WayForPay signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub merchant_account: String,
    pub order_reference: String,
    pub transaction_status: String,
    pub reason: String,
    /// `reasonCode` as its literal JSON number text (or the string's value).
    pub reason_code: String,
    pub merchant_signature: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAnswer<'a> {
    #[serde(default)]
    merchant_account: Option<String>,
    #[serde(default)]
    order_reference: Option<String>,
    #[serde(default)]
    transaction_status: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(borrow, default)]
    reason_code: Option<&'a RawValue>,
    #[serde(default)]
    merchant_signature: Option<String>,
}

/// Reads an answer to `REFUND`: `Ok` for a signed status answer (not yet verified), `Err` with
/// WayForPay's `reason (reasonCode)` for any other answer.
pub fn parse_answer(body: &[u8]) -> Result<Answer, String> {
    let raw: RawAnswer<'_> =
        serde_json::from_slice(body).map_err(|e| format!("not a WayForPay answer: {e}"))?;
    let code = raw
        .reason_code
        .map(|c| {
            let text = c.get();
            serde_json::from_str::<String>(text).unwrap_or_else(|_| text.to_string())
        })
        .unwrap_or_default();
    match (
        raw.merchant_account,
        raw.order_reference,
        raw.transaction_status,
        raw.merchant_signature,
    ) {
        (Some(account), Some(reference), Some(status), Some(signature)) => Ok(Answer {
            merchant_account: account,
            order_reference: reference,
            transaction_status: status,
            reason: raw.reason.unwrap_or_default(),
            reason_code: code,
            merchant_signature: signature,
        }),
        _ => Err(super::answer_reason(body).unwrap_or_else(|| "an answer without a status".into())),
    }
}

/// The hex `merchantSignature` WayForPay should have sent for `a`.
pub fn answer_signature(secret: &[u8], a: &Answer) -> String {
    hmac_md5_hex(
        secret,
        &[
            &a.merchant_account,
            &a.order_reference,
            &a.transaction_status,
            &a.reason_code,
        ],
    )
}

/// Whether `a`'s signature verifies (hex case ignored, constant time).
pub fn verify_answer(secret: &[u8], a: &Answer) -> bool {
    let expected = answer_signature(secret, a);
    let received = a.merchant_signature.to_ascii_lowercase();
    expected.as_bytes().ct_eq(received.as_bytes()).into()
}

/// A refund WayForPay made (or had made already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refunded {
    /// The `REFUND` answer said `Refunded` or `Voided`.
    Made { status: String },
    /// `CHECK_STATUS` said the order is refunded already: no `REFUND` was sent.
    AlreadyRefunded { status: String },
}

/// Why WayForPay did not refund.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundError {
    /// Worth asking again: no answer, a 5xx, an answer not believed, a refund in processing.
    #[error("WayForPay: {0}")]
    Transient(String),
    /// WayForPay declined or refused the refund.
    #[error("WayForPay refused the refund: {0}")]
    Refused(String),
}

/// What a verified `REFUND` answer means.
pub fn judge_answer(a: &Answer) -> Result<Refunded, RefundError> {
    match a.transaction_status.as_str() {
        "Refunded" | "Voided" => Ok(Refunded::Made {
            status: a.transaction_status.clone(),
        }),
        "RefundInProcessing" => Err(RefundError::Transient(
            "the refund is in processing; asked about again later".into(),
        )),
        other => Err(RefundError::Refused(format!(
            "{other}: {} ({})",
            a.reason, a.reason_code
        ))),
    }
}

/// `POST`s `body` to `api_url`: the answer's bytes, or why there is none to read.
async fn post(api_url: &str, body: String) -> Result<Vec<u8>, RefundError> {
    let response = http()
        .post(api_url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| RefundError::Transient(format!("no answer: {}", e.without_url())))?;
    let status = response.status();
    if !status.is_success() {
        return Err(RefundError::Transient(format!(
            "answered HTTP {}",
            status.as_u16()
        )));
    }
    Ok(response
        .bytes()
        .await
        .map_err(|e| RefundError::Transient(format!("answer unread: {}", e.without_url())))?
        .to_vec())
}

/// Where the order stands at WayForPay, as a verified `CHECK_STATUS` answer says; `None` when
/// the answer says nothing believable (no status, a bad signature, another order).
async fn current_status(
    api_url: &str,
    wfp: &WayForPayConfig,
    order_reference: &str,
) -> Result<Option<String>, RefundError> {
    let key = wfp.secret_key.expose().as_bytes();
    let request = super::check_status_request(key, &wfp.merchant_account, order_reference);
    let bytes = post(api_url, request.to_string()).await?;
    let Ok(cb) = super::parse_check_status(&bytes) else {
        return Ok(None);
    };
    let believed = super::verify_signature(key, &cb)
        && cb.merchant_account == wfp.merchant_account
        && cb.order_reference == order_reference;
    Ok(believed.then_some(cb.transaction_status))
}

/// Refunds the whole payment of `order_reference` (`amount_minor` in `currency`) with
/// `comment` (see the module doc).
pub async fn refund(
    api_url: &str,
    wfp: &WayForPayConfig,
    order_reference: &str,
    amount_minor: i64,
    currency: &str,
    comment: &str,
) -> Result<Refunded, RefundError> {
    match current_status(api_url, wfp, order_reference)
        .await?
        .as_deref()
    {
        Some(status @ ("Refunded" | "Voided")) => {
            return Ok(Refunded::AlreadyRefunded {
                status: status.to_string(),
            });
        }
        Some("RefundInProcessing") => {
            return Err(RefundError::Transient(
                "the refund is in processing; asked about again later".into(),
            ));
        }
        _ => {}
    }
    let body = request_body(wfp, order_reference, amount_minor, currency, comment)
        .ok_or_else(|| RefundError::Refused(format!("{currency} has no known minor unit")))?;
    let bytes = post(api_url, body).await?;
    let answer = parse_answer(&bytes).map_err(RefundError::Refused)?;
    let key = wfp.secret_key.expose().as_bytes();
    if !verify_answer(key, &answer) {
        tracing::warn!(
            order_reference,
            "WayForPay REFUND answer's merchantSignature does not verify; not believed"
        );
        return Err(RefundError::Transient(
            "the answer's merchantSignature does not verify; not believed".into(),
        ));
    }
    if answer.merchant_account != wfp.merchant_account || answer.order_reference != order_reference
    {
        return Err(RefundError::Transient(
            "the answer is about another merchant or order; not believed".into(),
        ));
    }
    judge_answer(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    /// WayForPay's public test merchant (API.md's test vectors).
    fn merchant() -> WayForPayConfig {
        WayForPayConfig {
            merchant_account: "test_merch_n1".into(),
            secret_key: Secret::new("flk3409refn54t54t*FNJRET"),
        }
    }

    #[test]
    fn the_amount_is_the_shortest_decimal() {
        assert_eq!(amount_text(19900, "UAH").as_deref(), Some("199"));
        assert_eq!(amount_text(19950, "UAH").as_deref(), Some("199.5"));
        assert_eq!(amount_text(19999, "UAH").as_deref(), Some("199.99"));
        assert_eq!(amount_text(5, "UAH").as_deref(), Some("0.05"));
        assert_eq!(amount_text(500, "JPY").as_deref(), Some("500"));
        assert_eq!(amount_text(100, "ZZZ"), None);
    }

    #[test]
    fn the_request_is_signed_over_the_text_it_sends() {
        let body = request_body(&merchant(), "ord_1", 19950, "UAH", "twice").unwrap();
        assert!(body.contains(r#""amount":199.5,"#), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["transactionType"], "REFUND");
        assert_eq!(v["comment"], "twice");
        assert_eq!(v["apiVersion"], 1);
        let expected = hmac_md5_hex(
            b"flk3409refn54t54t*FNJRET",
            &["test_merch_n1", "ord_1", "199.5", "UAH"],
        );
        assert_eq!(v["merchantSignature"], expected.as_str());
    }

    fn signed(status: &str, code: &str) -> String {
        let a = Answer {
            merchant_account: "test_merch_n1".into(),
            order_reference: "ord_1".into(),
            transaction_status: status.into(),
            reason: "Ok".into(),
            reason_code: code.into(),
            merchant_signature: String::new(),
        };
        let sig = answer_signature(b"flk3409refn54t54t*FNJRET", &a);
        format!(
            r#"{{"merchantAccount":"test_merch_n1","orderReference":"ord_1","transactionStatus":"{status}","reason":"Ok","reasonCode":{code},"merchantSignature":"{sig}"}}"#
        )
    }

    #[test]
    fn a_signed_answer_verifies_and_says_what_happened() {
        let key = b"flk3409refn54t54t*FNJRET";
        let a = parse_answer(signed("Refunded", "1100").as_bytes()).unwrap();
        assert!(verify_answer(key, &a));
        assert_eq!(
            judge_answer(&a),
            Ok(Refunded::Made {
                status: "Refunded".into()
            })
        );
        assert!(!verify_answer(b"another key", &a));
        let declined = parse_answer(signed("Declined", "1101").as_bytes()).unwrap();
        assert!(verify_answer(key, &declined));
        assert!(
            matches!(judge_answer(&declined), Err(RefundError::Refused(t)) if t.contains("1101"))
        );
        let processing = parse_answer(signed("RefundInProcessing", "1100").as_bytes()).unwrap();
        assert!(matches!(
            judge_answer(&processing),
            Err(RefundError::Transient(_))
        ));
        // A tampered status fails the signature.
        let tampered = signed("Declined", "1100").replace("Declined", "Refunded");
        assert!(!verify_answer(
            key,
            &parse_answer(tampered.as_bytes()).unwrap()
        ));
    }

    #[test]
    fn an_unsigned_answer_is_a_refusal_with_its_reason() {
        assert_eq!(
            parse_answer(br#"{"reason":"Invalid signature","reasonCode":1113}"#),
            Err("Invalid signature (1113)".to_string())
        );
    }
}
