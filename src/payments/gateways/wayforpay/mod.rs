//! WayForPay `serviceUrl` callbacks for Door 2 (`POST /api/webhook/wayforpay`): parsing, signature
//! verification and the acknowledgement WayForPay expects back; the `CHECK_STATUS` request the
//! reconciliation sends (`crate::payments::gateways::wayforpay::reconcile`) and its answer, which carries the same
//! signed fields as a callback and is read by the same code; and [`normalize`], the one way an
//! `Approved` report (callback or answer) becomes a payment.
//!
//! `CHECK_STATUS` is signed HMAC-MD5 over `merchantAccount;orderReference`.
//!
//! WayForPay signs `merchantAccount;orderReference;amount;currency;authCode;cardPan;
//! transactionStatus;reasonCode` with HMAC-MD5 and sends it as lower-case hex in
//! `merchantSignature`. The signed text is each field *as it appears in the JSON*, which matters
//! for numbers: `199.5` and `199.50` are the same float but different signed text. So this
//! module reads `amount` and `reasonCode` as raw JSON (`serde_json::value::RawValue`) and never
//! round-trips them through `f64`.
//!
//! Everything here is pure: the caller supplies the secret, the raw body and the current time,
//! and decides what to log. [`Callback`]'s `Debug` hides the card PAN and the signature so a
//! logged callback cannot leak them.
//!
//! HMAC-MD5 is WayForPay's choice, not ours; it is still a sound MAC even though MD5 is broken
//! as a hash.

pub mod checks;
pub mod purchase;
pub mod reconcile;
pub mod refund;

use std::fmt;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use md5::Md5;
use serde::Deserialize;
use serde_json::value::RawValue;
use subtle::ConstantTimeEq;

use crate::common::error::ApiError;
use crate::{
    common::currency,
    payments::{
        core::{Gateway, NormalizedPayment},
        refunds::at_gateway::Reported,
    },
};

type HmacMd5 = Hmac<Md5>;

/// The fields of a WayForPay callback that the service uses, with the signed ones kept as the
/// exact text WayForPay signed.
#[derive(Clone)]
pub struct Callback {
    /// `merchantAccount`; the caller must check it equals the configured merchant account.
    pub merchant_account: String,
    /// `orderReference`: our order reference, also used as the payment's `external_id`.
    pub order_reference: String,
    /// `amount` exactly as the JSON number literal was written (e.g. `199.5`), in major units.
    pub amount_literal: String,
    /// `currency` as sent (e.g. `UAH`); not validated here.
    pub currency: String,
    /// `authCode`, or empty when absent or `null`.
    pub auth_code: String,
    /// `cardPan` (already masked by WayForPay, e.g. `41****8217`), or empty when absent or `null`.
    pub card_pan: String,
    /// `transactionStatus`; only `Approved` is a payment.
    pub transaction_status: String,
    /// `reasonCode` as the literal number text, or the string value if it was sent as a string.
    pub reason_code_literal: String,
    /// `processingDate` in Unix seconds, when present.
    pub processing_date: Option<i64>,
    /// `merchantSignature` as sent (hex; case is normalised only when comparing).
    pub merchant_signature: String,
}

impl Callback {
    /// True when WayForPay reports the transaction as `Approved`, the only status that is a
    /// payment. Other statuses are still acknowledged so WayForPay stops retrying.
    #[must_use]
    pub fn is_approved(&self) -> bool {
        self.transaction_status == "Approved"
    }

    /// True when WayForPay reports the transaction as refunded or voided
    /// ([`is_refund_status`]): what the payment bought is taken back.
    #[must_use]
    pub fn is_refund(&self) -> bool {
        is_refund_status(&self.transaction_status)
    }
}

/// True for a `transactionStatus` that says the money went back to the buyer: `Refunded` (a
/// refund after settlement) or `Voided` (the authorisation released before it). A callback and
/// a `CHECK_STATUS` answer spell it alike.
#[must_use]
pub fn is_refund_status(status: &str) -> bool {
    matches!(status, "Refunded" | "Voided")
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Even a masked PAN is cardholder data, and the signature is a valid MAC an attacker
        // could replay; neither belongs in logs.
        let card_pan = if self.card_pan.is_empty() {
            ""
        } else {
            "<masked>"
        };
        f.debug_struct("Callback")
            .field("merchant_account", &self.merchant_account)
            .field("order_reference", &self.order_reference)
            .field("amount_literal", &self.amount_literal)
            .field("currency", &self.currency)
            .field("auth_code", &self.auth_code)
            .field("card_pan", &format_args!("{card_pan}"))
            .field("transaction_status", &self.transaction_status)
            .field("reason_code_literal", &self.reason_code_literal)
            .field("processing_date", &self.processing_date)
            .field("merchant_signature", &format_args!("<redacted>"))
            .finish()
    }
}

/// Why a callback body could not be turned into a [`Callback`]. Messages name the offending
/// field so they can go straight into a 400 problem document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not JSON, not an object, or repeats a field.
    #[error("{0}")]
    Malformed(String),
    /// A required field is absent (or `null`).
    #[error("{0} is required")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("{field} must be {expected}")]
    WrongType {
        /// The JSON field name, as WayForPay spells it.
        field: &'static str,
        /// What was expected, e.g. "a JSON number".
        expected: &'static str,
    },
}

impl ParseError {
    /// The JSON field the error is about, if it is about one field.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ParseError::Malformed(_) => None,
            ParseError::Missing(field) | ParseError::WrongType { field, .. } => Some(field),
        }
    }
}

/// Every field is captured raw so that type errors can be reported per field with our own
/// wording, and numbers keep their literal text. Unknown fields are ignored; a repeated known
/// field is rejected by serde, which keeps "which copy was signed?" from ever being a question.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "merchantAccount", borrow)]
    merchant_account: Option<&'a RawValue>,
    #[serde(rename = "orderReference", borrow)]
    order_reference: Option<&'a RawValue>,
    #[serde(borrow)]
    amount: Option<&'a RawValue>,
    #[serde(borrow)]
    currency: Option<&'a RawValue>,
    #[serde(rename = "authCode", borrow)]
    auth_code: Option<&'a RawValue>,
    #[serde(rename = "cardPan", borrow)]
    card_pan: Option<&'a RawValue>,
    #[serde(rename = "transactionStatus", borrow)]
    transaction_status: Option<&'a RawValue>,
    #[serde(rename = "reasonCode", borrow)]
    reason_code: Option<&'a RawValue>,
    #[serde(rename = "processingDate", borrow)]
    processing_date: Option<&'a RawValue>,
    #[serde(rename = "merchantSignature", borrow)]
    merchant_signature: Option<&'a RawValue>,
}

/// `None` for an absent field or an explicit `null`, which WayForPay uses interchangeably for
/// empty optional values.
fn present(raw: Option<&RawValue>) -> Option<&str> {
    raw.map(RawValue::get).filter(|text| *text != "null")
}

/// A valid JSON value (RawValue guarantees that) is a number exactly when it starts with a digit
/// or a minus sign.
fn is_number(text: &str) -> bool {
    text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

fn string_value(text: &str, field: &'static str) -> Result<String, ParseError> {
    serde_json::from_str::<String>(text).map_err(|_| ParseError::WrongType {
        field,
        expected: "a JSON string",
    })
}

fn required_string(raw: Option<&RawValue>, field: &'static str) -> Result<String, ParseError> {
    let text = present(raw).ok_or(ParseError::Missing(field))?;
    string_value(text, field)
}

fn optional_string(raw: Option<&RawValue>, field: &'static str) -> Result<String, ParseError> {
    present(raw).map_or(Ok(String::new()), |text| string_value(text, field))
}

/// Parses a raw `serviceUrl` callback body.
///
/// Required: `merchantAccount`, `orderReference`, `currency`, `transactionStatus`,
/// `merchantSignature` (strings), `amount` (number), `reasonCode` (number or string). Optional:
/// `authCode`, `cardPan` (strings; absent or `null` count as empty text, as in the signature),
/// `processingDate` (integer). Unknown fields are ignored.
///
/// Parsing checks shapes only; the caller must then call [`verify_signature`] before trusting
/// any value.
pub fn parse_callback(body: &[u8]) -> Result<Callback, ParseError> {
    // serde's derived struct visitor would also accept a JSON array of positional values;
    // WayForPay only ever sends an object, so anything else is refused up front.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ParseError::Malformed(
            "body must be a JSON object".to_owned(),
        ));
    }
    let wire: Wire<'_> = serde_json::from_slice(body).map_err(describe_json_error)?;

    let amount_literal = present(wire.amount).ok_or(ParseError::Missing("amount"))?;
    if !is_number(amount_literal) {
        return Err(ParseError::WrongType {
            field: "amount",
            expected: "a JSON number",
        });
    }

    let reason_code_text = present(wire.reason_code).ok_or(ParseError::Missing("reasonCode"))?;
    let reason_code_literal = if is_number(reason_code_text) {
        reason_code_text.to_owned()
    } else {
        serde_json::from_str::<String>(reason_code_text).map_err(|_| ParseError::WrongType {
            field: "reasonCode",
            expected: "a JSON number or string",
        })?
    };

    let processing_date = present(wire.processing_date)
        .map(|text| {
            serde_json::from_str::<i64>(text).map_err(|_| ParseError::WrongType {
                field: "processingDate",
                expected: "an integer number of Unix seconds",
            })
        })
        .transpose()?;

    Ok(Callback {
        merchant_account: required_string(wire.merchant_account, "merchantAccount")?,
        order_reference: required_string(wire.order_reference, "orderReference")?,
        amount_literal: amount_literal.to_owned(),
        currency: required_string(wire.currency, "currency")?,
        auth_code: optional_string(wire.auth_code, "authCode")?,
        card_pan: optional_string(wire.card_pan, "cardPan")?,
        transaction_status: required_string(wire.transaction_status, "transactionStatus")?,
        reason_code_literal,
        processing_date,
        merchant_signature: required_string(wire.merchant_signature, "merchantSignature")?,
    })
}

/// Turns a serde_json error into a message that never quotes body content (which could include
/// the card PAN or the signature).
fn describe_json_error(e: serde_json::Error) -> ParseError {
    use serde_json::error::Category;
    let message = match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => format!(
            "body is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        ),
        Category::Data => {
            let text = e.to_string();
            // serde's duplicate-field message names only the field, so it is safe to pass on.
            if text.starts_with("duplicate field") {
                text
            } else {
                "body must be a JSON object".to_owned()
            }
        }
    };
    ParseError::Malformed(message)
}

fn hmac_md5_hex(secret: &[u8], parts: &[&str]) -> String {
    let mut mac = HmacMd5::new_from_slice(secret).expect("HMAC accepts keys of any length");
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            mac.update(b";");
        }
        mac.update(part.as_bytes());
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The lower-case hex `merchantSignature` WayForPay should have sent for `cb`:
/// HMAC-MD5(secret, `merchantAccount;orderReference;amount;currency;authCode;cardPan;
/// transactionStatus;reasonCode`) over the literal field texts.
pub fn expected_signature(secret: &[u8], cb: &Callback) -> String {
    hmac_md5_hex(
        secret,
        &[
            &cb.merchant_account,
            &cb.order_reference,
            &cb.amount_literal,
            &cb.currency,
            &cb.auth_code,
            &cb.card_pan,
            &cb.transaction_status,
            &cb.reason_code_literal,
        ],
    )
}

/// True when `cb.merchant_signature` matches [`expected_signature`].
///
/// Hex case is ignored (the sender's upper-case hex is accepted) and the comparison is
/// constant-time, so response timing reveals nothing about how close a forgery came.
#[must_use]
pub fn verify_signature(secret: &[u8], cb: &Callback) -> bool {
    let expected = expected_signature(secret, cb);
    let received = cb.merchant_signature.to_ascii_lowercase();
    expected.as_bytes().ct_eq(received.as_bytes()).into()
}

/// The body WayForPay expects in reply to a callback, which stops its retries:
/// `{"orderReference", "status": "accept", "time", "signature"}` where `signature` is hex
/// HMAC-MD5(secret, `orderReference;accept;time`).
///
/// Send it for every correctly signed callback, approved or not.
pub fn acknowledgement(secret: &[u8], order_reference: &str, time_unix: i64) -> serde_json::Value {
    let time = time_unix.to_string();
    let signature = hmac_md5_hex(secret, &[order_reference, "accept", &time]);
    serde_json::json!({
        "orderReference": order_reference,
        "status": "accept",
        "time": time_unix,
        "signature": signature,
    })
}

/// The `transactionType` of a status request.
pub const CHECK_STATUS: &str = "CHECK_STATUS";

/// What a `transactionStatus` means to us. WayForPay's statuses are open-ended text; only
/// these two settle anything, every other one (`Declined`, `Expired`, `InProcessing`,
/// `Pending`, `WaitingAuthComplete`, …) leaves the order to be paid or asked about again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `Approved`: paid.
    Approved,
    /// `Refunded` or `Voided`: the money went back to the buyer.
    Refunded,
    /// Anything else: not paid (yet).
    NotPaid,
}

impl Callback {
    /// The meaning of `transactionStatus`.
    #[must_use]
    pub fn status(&self) -> Status {
        match self.transaction_status.as_str() {
            "Approved" => Status::Approved,
            "Refunded" | "Voided" => Status::Refunded,
            _ => Status::NotPaid,
        }
    }
}

/// The hex `merchantSignature` of a `CHECK_STATUS` request: HMAC-MD5(secret,
/// `merchantAccount;orderReference`).
pub fn check_status_signature(
    secret: &[u8],
    merchant_account: &str,
    order_reference: &str,
) -> String {
    hmac_md5_hex(secret, &[merchant_account, order_reference])
}

/// The JSON body of a `CHECK_STATUS` request for `order_reference`, signed.
pub fn check_status_request(
    secret: &[u8],
    merchant_account: &str,
    order_reference: &str,
) -> serde_json::Value {
    serde_json::json!({
        "transactionType": CHECK_STATUS,
        "merchantAccount": merchant_account,
        "orderReference": order_reference,
        "merchantSignature": check_status_signature(secret, merchant_account, order_reference),
        "apiVersion": 1,
    })
}

/// Parses a `CHECK_STATUS` answer. It carries the callback's fields, signed over the same
/// text, so it is read by [`parse_callback`] and checked by [`verify_signature`] before any
/// value is believed. An answer without them (WayForPay's "order not found" carries only
/// `reason` and `reasonCode`) is a [`ParseError`]; [`answer_reason`] says what it said.
pub fn parse_check_status(body: &[u8]) -> Result<Callback, ParseError> {
    parse_callback(body)
}

/// `reason (reasonCode)` of an answer that is not a status report, for the log and the check's
/// `last_error`: only these two fields are read (never the card PAN), and clipped.
pub fn answer_reason(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let reason = value.get("reason").and_then(serde_json::Value::as_str);
    let code = value.get("reasonCode").map(|c| match c {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let text = match (reason, code) {
        (Some(r), Some(c)) => format!("{r} ({c})"),
        (Some(r), None) => r.to_owned(),
        (None, Some(c)) => format!("reasonCode {c}"),
        (None, None) => return None,
    };
    Some(text.chars().take(200).collect())
}

/// Turns a verified `Approved` report (a callback, or a `CHECK_STATUS` answer) into the
/// payment the core applies: gateway `wayforpay`, external id and order reference =
/// `orderReference` (so the callback and the answer of one payment are one payment),
/// `paid_at` = `processingDate`, or `now` when absent. A 422 naming the field when its money
/// cannot be represented.
pub fn normalize(cb: &Callback, now: DateTime<Utc>) -> Result<NormalizedPayment, ApiError> {
    let exponent = currency::minor_unit_exponent(&cb.currency)
        .ok_or_else(|| ApiError::field("currency", "is not a known ISO 4217 currency"))?;
    let amount_minor = currency::decimal_to_minor(&cb.amount_literal, exponent)
        .map_err(|e| ApiError::field("amount", e.to_string()))?;
    let external = cb.order_reference.chars().count();
    if !(1..=255).contains(&external) {
        return Err(ApiError::field(
            "orderReference",
            "must be 1 to 255 characters",
        ));
    }
    let paid_at = match cb.processing_date {
        None => now,
        Some(secs) => DateTime::from_timestamp(secs, 0)
            .ok_or_else(|| ApiError::field("processingDate", "is not a representable Unix time"))?,
    };
    Ok(NormalizedPayment {
        gateway: Gateway::WayForPay,
        external_id: cb.order_reference.clone(),
        order_reference: cb.order_reference.clone(),
        amount_minor,
        currency: cb.currency.clone(),
        paid_at,
        payer_telegram_id: None,
    })
}

/// What a verified `Refunded`/`Voided` report (a callback, or a `CHECK_STATUS` answer) says of
/// the payment it refunds, read as [`normalize`] reads a payment: what records the refund when
/// the payment has not come yet. `None` when its money cannot be stored, as a payment of it
/// could not be either.
pub fn refund_report(cb: &Callback, now: DateTime<Utc>) -> Option<Reported> {
    normalize(cb, now).ok().map(|p| Reported::of(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WayForPay's public test merchant key (account `test_merch_n1`).
    const SECRET: &[u8] = b"flk3409refn54t54t*FNJRET";

    /// Computed outside Rust:
    /// `printf '%s' 'test_merch_n1;ord_abc;199.5;UAH;541963;41****8217;Approved;1100'
    ///  | openssl dgst -md5 -hmac 'flk3409refn54t54t*FNJRET'`
    const SIG_199_5: &str = "ed9a06fd621d0dcefd1ba3aeb5f2c087";
    /// Same, with amount text `199.50`.
    const SIG_199_50: &str = "aade436a5d2d869e627594092d7bd389";
    /// `printf '%s' 'test_merch_n1;ord_abc;100;UAH;;;Declined;1101' | openssl dgst -md5 -hmac …`
    const SIG_DECLINED_NO_CARD: &str = "0675afb90abfc75331af2d992a3c247a";
    /// `printf '%s' 'ord_abc;accept;1700000200' | openssl dgst -md5 -hmac …`
    const ACK_SIG: &str = "1b0035f9dc1bcd413f9da1d41d3baa0a";

    fn body(amount: &str, signature: &str) -> String {
        format!(
            r#"{{"merchantAccount":"test_merch_n1","orderReference":"ord_abc","merchantSignature":"{signature}","amount":{amount},"currency":"UAH","authCode":"541963","email":"client@mail.ua","phone":"380501234567","createdDate":1700000000,"processingDate":1700000100,"cardPan":"41****8217","cardType":"Visa","issuerBankCountry":"Ukraine","issuerBankName":"Privatbank","recToken":"","transactionStatus":"Approved","reason":"Ok","reasonCode":1100,"fee":0,"paymentSystem":"card"}}"#
        )
    }

    fn parsed(amount: &str, signature: &str) -> Callback {
        parse_callback(body(amount, signature).as_bytes()).unwrap()
    }

    /// Independent implementation of the documented formula, to cross-check the module.
    fn by_formula(cb: &Callback) -> String {
        let text = [
            cb.merchant_account.as_str(),
            &cb.order_reference,
            &cb.amount_literal,
            &cb.currency,
            &cb.auth_code,
            &cb.card_pan,
            &cb.transaction_status,
            &cb.reason_code_literal,
        ]
        .join(";");
        let mut mac = HmacMd5::new_from_slice(SECRET).unwrap();
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn parses_sample_callback() {
        let cb = parsed("199.5", SIG_199_5);
        assert_eq!(cb.merchant_account, "test_merch_n1");
        assert_eq!(cb.order_reference, "ord_abc");
        assert_eq!(cb.amount_literal, "199.5");
        assert_eq!(cb.currency, "UAH");
        assert_eq!(cb.auth_code, "541963");
        assert_eq!(cb.card_pan, "41****8217");
        assert_eq!(cb.transaction_status, "Approved");
        assert_eq!(cb.reason_code_literal, "1100");
        assert_eq!(cb.processing_date, Some(1_700_000_100));
        assert_eq!(cb.merchant_signature, SIG_199_5);
        assert!(cb.is_approved());
    }

    #[test]
    fn signature_matches_openssl_vector() {
        let cb = parsed("199.5", SIG_199_5);
        assert_eq!(expected_signature(SECRET, &cb), SIG_199_5);
        assert_eq!(by_formula(&cb), SIG_199_5);
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn upper_case_hex_signature_is_accepted() {
        let cb = parsed("199.5", &SIG_199_5.to_ascii_uppercase());
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn amount_literal_is_preserved() {
        let a = parsed("199.50", SIG_199_50);
        assert_eq!(a.amount_literal, "199.50");
        assert_eq!(expected_signature(SECRET, &a), SIG_199_50);
        assert_ne!(SIG_199_5, SIG_199_50);
        assert!(verify_signature(SECRET, &a));
        // The 199.5 signature does not cover a 199.50 body.
        let b = parsed("199.50", SIG_199_5);
        assert!(!verify_signature(SECRET, &b));

        for literal in ["100", "100.0", "1.995e2", "199.99", "-0.5"] {
            let cb = parsed(literal, "");
            assert_eq!(cb.amount_literal, literal);
            assert_eq!(expected_signature(SECRET, &cb), by_formula(&cb));
        }
    }

    #[test]
    fn whitespace_around_number_is_not_part_of_the_literal() {
        let b = body("199.5", SIG_199_5).replace("\"amount\":199.5", "\"amount\" :  199.5 ");
        let cb = parse_callback(b.as_bytes()).unwrap();
        assert_eq!(cb.amount_literal, "199.5");
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn only_refunded_and_voided_take_a_payment_back() {
        for status in ["Refunded", "Voided"] {
            assert!(is_refund_status(status), "{status}");
        }
        for status in [
            "Approved",
            "Declined",
            "Expired",
            "Pending",
            "InProcessing",
            "RefundInProcessing",
            "WaitingAuthComplete",
            "refunded",
            "",
        ] {
            assert!(!is_refund_status(status), "{status}");
        }
        let mut cb = parsed("199.5", SIG_199_5);
        assert!(!cb.is_refund());
        cb.transaction_status = "Voided".into();
        assert!(cb.is_refund() && !cb.is_approved());
    }

    #[test]
    fn tampered_fields_fail() {
        let good = parsed("199.5", SIG_199_5);
        let tampers: [fn(&mut Callback); 9] = [
            |c| c.merchant_account.push('x'),
            |c| c.order_reference = "ord_abd".into(),
            |c| c.amount_literal = "1.5".into(),
            |c| c.currency = "USD".into(),
            |c| c.auth_code.clear(),
            |c| c.card_pan = "41****8218".into(),
            |c| c.transaction_status = "Declined".into(),
            |c| c.reason_code_literal = "1101".into(),
            |c| c.merchant_signature = "00".repeat(16),
        ];
        for (i, tamper) in tampers.iter().enumerate() {
            let mut cb = good.clone();
            tamper(&mut cb);
            assert!(!verify_signature(SECRET, &cb), "tamper #{i}");
        }
        // Unsigned fields may change without affecting the signature.
        let mut cb = good.clone();
        cb.processing_date = None;
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn wrong_secret_or_garbage_signature_fails() {
        let cb = parsed("199.5", SIG_199_5);
        assert!(!verify_signature(b"another-secret", &cb));
        for sig in ["", "ed9a06fd", "not-hex", &format!("{SIG_199_5} ")] {
            let cb = parsed("199.5", sig);
            assert!(!verify_signature(SECRET, &cb), "{sig:?}");
        }
    }

    #[test]
    fn missing_optional_fields_are_empty_text() {
        let b = format!(
            r#"{{"merchantAccount":"test_merch_n1","orderReference":"ord_abc","amount":100,"currency":"UAH","authCode":null,"transactionStatus":"Declined","reasonCode":1101,"merchantSignature":"{SIG_DECLINED_NO_CARD}"}}"#
        );
        let cb = parse_callback(b.as_bytes()).unwrap();
        assert_eq!(cb.auth_code, "");
        assert_eq!(cb.card_pan, "");
        assert_eq!(cb.processing_date, None);
        assert!(!cb.is_approved());
        assert_eq!(expected_signature(SECRET, &cb), SIG_DECLINED_NO_CARD);
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn reason_code_as_string() {
        let b = body("199.5", SIG_199_5).replace("\"reasonCode\":1100", "\"reasonCode\":\"1100\"");
        let cb = parse_callback(b.as_bytes()).unwrap();
        assert_eq!(cb.reason_code_literal, "1100");
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn string_escapes_are_decoded() {
        let b = body("199.5", SIG_199_5).replace("\"ord_abc\"", "\"ord\\u005fabc\"");
        let cb = parse_callback(b.as_bytes()).unwrap();
        assert_eq!(cb.order_reference, "ord_abc");
        assert!(verify_signature(SECRET, &cb));
    }

    #[test]
    fn wrong_types_are_rejected_with_field_names() {
        let base = body("199.5", SIG_199_5);
        let cases = [
            (
                "\"amount\":199.5",
                "\"amount\":\"199.5\"",
                "amount must be a JSON number",
            ),
            ("\"amount\":199.5", "\"amount\":null", "amount is required"),
            (
                "\"amount\":199.5",
                "\"amount\":[1]",
                "amount must be a JSON number",
            ),
            (
                "\"reasonCode\":1100",
                "\"reasonCode\":true",
                "reasonCode must be a JSON number or string",
            ),
            (
                "\"currency\":\"UAH\"",
                "\"currency\":980",
                "currency must be a JSON string",
            ),
            (
                "\"merchantAccount\":\"test_merch_n1\"",
                "\"merchantAccount\":{}",
                "merchantAccount must be a JSON string",
            ),
            (
                "\"cardPan\":\"41****8217\"",
                "\"cardPan\":4111",
                "cardPan must be a JSON string",
            ),
            (
                "\"processingDate\":1700000100",
                "\"processingDate\":\"1700000100\"",
                "processingDate must be an integer number of Unix seconds",
            ),
            (
                "\"processingDate\":1700000100",
                "\"processingDate\":1700000100.5",
                "processingDate must be an integer number of Unix seconds",
            ),
        ];
        for (from, to, message) in cases {
            let b = base.replace(from, to);
            assert_ne!(b, base, "{from}");
            let err = parse_callback(b.as_bytes()).unwrap_err();
            assert_eq!(err.to_string(), message);
            assert!(err.field().is_some());
        }
    }

    #[test]
    fn missing_required_fields_are_named() {
        let base = body("199.5", SIG_199_5);
        for (fragment, field) in [
            ("\"merchantAccount\":\"test_merch_n1\",", "merchantAccount"),
            ("\"orderReference\":\"ord_abc\",", "orderReference"),
            ("\"amount\":199.5,", "amount"),
            ("\"currency\":\"UAH\",", "currency"),
            ("\"transactionStatus\":\"Approved\",", "transactionStatus"),
            ("\"reasonCode\":1100,", "reasonCode"),
            (
                &format!("\"merchantSignature\":\"{SIG_199_5}\","),
                "merchantSignature",
            ),
        ] {
            let b = base.replace(fragment, "");
            assert_ne!(b, base, "{field}");
            let err = parse_callback(b.as_bytes()).unwrap_err();
            assert_eq!(err, ParseError::Missing(field));
            assert_eq!(err.to_string(), format!("{field} is required"));
        }
    }

    #[test]
    fn malformed_bodies_are_rejected_without_echoing_content() {
        for b in [
            "",
            "{",
            "not json",
            "[]",
            "\"41****8217\"",
            "{\"amount\":199.5,\"amount\":1}",
        ] {
            let err = parse_callback(b.as_bytes()).unwrap_err();
            assert!(matches!(err, ParseError::Malformed(_)), "{b:?}: {err:?}");
            assert_eq!(err.field(), None);
            assert!(!err.to_string().contains("41****8217"));
        }
        let err = parse_callback(b"{\"amount\":199.5,\"amount\":1}").unwrap_err();
        assert!(
            err.to_string().contains("duplicate field `amount`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let b = body("199.5", SIG_199_5).replace('{', "{\"futureField\":{\"nested\":[1,2]},");
        assert!(parse_callback(b.as_bytes()).is_ok());
    }

    #[test]
    fn debug_hides_card_pan_and_signature() {
        let cb = parsed("199.5", SIG_199_5);
        let debug = format!("{cb:?}");
        assert!(!debug.contains("41****8217"), "{debug}");
        assert!(!debug.contains("8217"), "{debug}");
        assert!(!debug.contains(SIG_199_5), "{debug}");
        assert!(debug.contains("<masked>"));
        assert!(debug.contains("<redacted>"));
        assert!(debug.contains("ord_abc"));
        let pretty = format!("{cb:#?}");
        assert!(!pretty.contains("8217") && !pretty.contains(SIG_199_5));
    }

    #[test]
    fn acknowledgement_matches_openssl_vector() {
        let ack = acknowledgement(SECRET, "ord_abc", 1_700_000_200);
        assert_eq!(
            ack,
            serde_json::json!({
                "orderReference": "ord_abc",
                "status": "accept",
                "time": 1_700_000_200,
                "signature": ACK_SIG,
            })
        );
        assert!(ack["time"].is_i64());
    }

    #[test]
    fn acknowledgement_signature_depends_on_inputs() {
        let a = acknowledgement(SECRET, "ord_abc", 1_700_000_200);
        let b = acknowledgement(SECRET, "ord_abc", 1_700_000_201);
        let c = acknowledgement(SECRET, "ord_abd", 1_700_000_200);
        let d = acknowledgement(b"other", "ord_abc", 1_700_000_200);
        assert_ne!(a["signature"], b["signature"]);
        assert_ne!(a["signature"], c["signature"]);
        assert_ne!(a["signature"], d["signature"]);
    }

    #[test]
    fn parse_error_messages() {
        assert_eq!(
            ParseError::WrongType {
                field: "amount",
                expected: "a JSON number"
            }
            .to_string(),
            "amount must be a JSON number"
        );
        let _: &dyn std::error::Error = &ParseError::Missing("amount");
    }

    /// `printf '%s' 'test_merch_n1;DH783023' | openssl dgst -md5 -hmac 'flk3409refn54t54t*FNJRET'`
    const CHECK_SIG: &str = "b1877c0b08a7d49a579f18ed68855ec6";

    #[test]
    fn a_check_status_request_is_signed_over_account_and_reference() {
        assert_eq!(
            check_status_signature(SECRET, "test_merch_n1", "DH783023"),
            CHECK_SIG
        );
        let body = check_status_request(SECRET, "test_merch_n1", "DH783023");
        assert_eq!(
            body,
            serde_json::json!({"transactionType": "CHECK_STATUS",
                "merchantAccount": "test_merch_n1", "orderReference": "DH783023",
                "merchantSignature": CHECK_SIG, "apiVersion": 1})
        );
    }

    #[test]
    fn a_check_status_answer_is_verified_like_a_callback() {
        let answer =
            body("199.5", SIG_199_5).replace("\"fee\":0,", "\"refundAmount\":0,\"fee\":0,");
        let cb = parse_check_status(answer.as_bytes()).unwrap();
        assert!(verify_signature(SECRET, &cb));
        assert_eq!(cb.status(), Status::Approved);
        let forged = body("1.5", SIG_199_5);
        assert!(!verify_signature(
            SECRET,
            &parse_check_status(forged.as_bytes()).unwrap()
        ));
        let not_found = br#"{"reason":"Order not found","reasonCode":1112}"#;
        assert_eq!(
            parse_check_status(not_found).unwrap_err(),
            ParseError::Missing("amount")
        );
        assert_eq!(
            answer_reason(not_found).as_deref(),
            Some("Order not found (1112)")
        );
        assert_eq!(answer_reason(b"<html>"), None);
    }

    #[test]
    fn statuses_mean_paid_refunded_or_not_yet() {
        let mut cb = parsed("199.5", SIG_199_5);
        for (text, status) in [
            ("Approved", Status::Approved),
            ("Refunded", Status::Refunded),
            ("Voided", Status::Refunded),
            ("Declined", Status::NotPaid),
            ("Expired", Status::NotPaid),
            ("InProcessing", Status::NotPaid),
            ("inProcessing", Status::NotPaid),
            ("Pending", Status::NotPaid),
            ("approved", Status::NotPaid),
        ] {
            cb.transaction_status = text.into();
            assert_eq!(cb.status(), status, "{text}");
        }
    }

    #[test]
    fn normalize_reads_the_money_and_the_time() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut cb = parsed("199.5", SIG_199_5);
        let p = normalize(&cb, now).unwrap();
        assert_eq!(p.gateway, Gateway::WayForPay);
        assert_eq!(
            (p.external_id.as_str(), p.order_reference.as_str()),
            ("ord_abc", "ord_abc")
        );
        assert_eq!((p.amount_minor, p.currency.as_str()), (19950, "UAH"));
        assert_eq!(p.paid_at.timestamp(), 1_700_000_100);
        cb.processing_date = None;
        assert_eq!(normalize(&cb, now).unwrap().paid_at, now);
        cb.currency = "ZZZ".into();
        assert!(normalize(&cb, now).is_err());
    }
}
