//! Standard Webhooks v1 signature verification for Door 1 (`POST /api/webhook/payment`).
//!
//! This module owns the whole cryptographic contract of the signed-webhook door: parsing the
//! configured `whsec_<base64>` secrets (`WEBHOOK_SECRET`, or the rotation list in
//! `WEBHOOK_SECRETS`), producing signatures (for tests and tooling) and checking the three
//! `webhook-*` headers against the raw request body.
//!
//! It is deliberately pure: no clock, no I/O, no logging. The caller passes "now" in, so the
//! timestamp-tolerance rule is testable at its exact boundaries, and the caller decides what to
//! log (a [`VerifyError`] never carries secret material, so it is always safe to log).
//!
//! The signed content is `"{webhook-id}.{webhook-timestamp}.{raw body}"` over the body bytes
//! exactly as received: re-serializing parsed JSON would change whitespace or key order and
//! break legitimate signatures, so the body must reach [`verify`] untouched.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::Mac;
use subtle::ConstantTimeEq;

pub use crate::config::webhook_keys::{KeyError, WebhookKey, parse_keys};

/// The only signature scheme this module understands; entries of other versions are skipped so
/// that a sender can add a new scheme next to `v1` without breaking us.
const SIGNATURE_VERSION: &str = "v1";

/// Longest timestamp header text accepted; anything longer cannot be a sane Unix time and is
/// refused before any arithmetic.
const MAX_TIMESTAMP_LEN: usize = 20;

/// The raw HMAC-SHA256 tag over `"{msg_id}.{timestamp}.{body}"`, with the timestamp as text so
/// verification can sign exactly the header the sender sent.
fn tag(key: &WebhookKey, msg_id: &str, timestamp: &str, body: &[u8]) -> [u8; 32] {
    let mut mac = key.mac();
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Signs a message the way a Standard Webhooks sender does; returns `v1,<base64>`.
///
/// The result is one entry of the `webhook-signature` header.
pub fn sign(key: &WebhookKey, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = tag(key, msg_id, &timestamp.to_string(), body);
    format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag))
}

/// Why a webhook failed verification. All variants mean "401"; they differ only for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A required header was absent or empty; carries the header name.
    #[error("missing or empty {0} header")]
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not a plain non-negative integer of Unix seconds.
    #[error("webhook-timestamp is not an integer number of Unix seconds")]
    BadTimestamp,
    /// `webhook-timestamp` is further from server time than the tolerance (either direction).
    #[error("webhook-timestamp is outside the accepted tolerance")]
    TimestampOutOfTolerance,
    /// No `v1` signature in `webhook-signature` matches any configured key.
    #[error("no valid webhook signature")]
    NoValidSignature,
}

fn required<'a>(value: Option<&'a str>, name: &'static str) -> Result<&'a str, VerifyError> {
    match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(VerifyError::MissingHeader(name)),
    }
}

/// Digits only: signs, spaces and exponents are refused rather than normalised, because the
/// signature covers the header text and a lenient parse would only hide a broken sender.
fn parse_timestamp(text: &str) -> Result<i64, VerifyError> {
    if text.len() > MAX_TIMESTAMP_LEN || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    text.parse::<i64>().map_err(|_| VerifyError::BadTimestamp)
}

/// Verifies a Standard Webhooks v1 request.
///
/// Checks, in order: the three headers are present and non-empty; the timestamp is plain digits
/// and within `tolerance_secs` of `now_unix` (both directions, which bounds replay of captured
/// requests); some `v1` entry of the space-separated signature header equals
/// HMAC-SHA256(key, `"{id}.{timestamp}.{body}"`) for some key in `keys`. Entries of other
/// versions, empty entries and undecodable base64 are treated as non-matching, not as errors,
/// so one bad entry cannot mask a good one. Comparison is constant-time on the raw MAC bytes.
///
/// `body` must be the raw request body bytes.
pub fn verify(
    keys: &[WebhookKey],
    msg_id: Option<&str>,
    timestamp: Option<&str>,
    signature_header: Option<&str>,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    let msg_id = required(msg_id, "webhook-id")?;
    let timestamp_text = required(timestamp, "webhook-timestamp")?;
    let signature_header = required(signature_header, "webhook-signature")?;

    let timestamp = parse_timestamp(timestamp_text)?;
    // abs_diff cannot overflow even for extreme values, unlike `(now - ts).abs()`.
    if now_unix.abs_diff(timestamp) > tolerance_secs.max(0).unsigned_abs() {
        return Err(VerifyError::TimestampOutOfTolerance);
    }

    let candidates: Vec<Vec<u8>> = signature_header
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == SIGNATURE_VERSION)
        .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
        .filter(|decoded| !decoded.is_empty())
        .collect();

    for key in keys {
        let expected = tag(key, msg_id, timestamp_text, body);
        // ct_eq on slices of different lengths returns false without inspecting contents; the
        // length of a forged signature is not secret.
        if candidates
            .iter()
            .any(|candidate| bool::from(expected.as_slice().ct_eq(candidate)))
        {
            return Ok(());
        }
    }
    Err(VerifyError::NoValidSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const MSG_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: i64 = 1649367553;
    const TS_TEXT: &str = "1649367553";
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const EXPECTED: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";
    const TOLERANCE: i64 = 300;

    fn key() -> WebhookKey {
        WebhookKey::parse(KEY).unwrap()
    }

    fn other_key() -> WebhookKey {
        WebhookKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
    }

    fn check(keys: &[WebhookKey], sig: &str) -> Result<(), VerifyError> {
        verify(
            keys,
            Some(MSG_ID),
            Some(TS_TEXT),
            Some(sig),
            BODY,
            TS,
            TOLERANCE,
        )
    }

    #[test]
    fn spec_test_vector_signs() {
        assert_eq!(sign(&key(), MSG_ID, TS, BODY), EXPECTED);
    }

    #[test]
    fn spec_test_vector_verifies() {
        assert_eq!(check(&[key()], EXPECTED), Ok(()));
    }

    #[test]
    fn sign_verify_round_trip() {
        let k = other_key();
        let body = b"{\"type\":\"payment.succeeded\"}";
        let sig = sign(&k, "msg_1", 1_700_000_000, body);
        assert!(sig.starts_with("v1,"));
        let r = verify(
            &[k],
            Some("msg_1"),
            Some("1700000000"),
            Some(&sig),
            body,
            1_700_000_000,
            TOLERANCE,
        );
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn one_valid_signature_among_invalid_ones() {
        let header = format!(
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= v1,!!notbase64!! v2,xyz {EXPECTED} v1,"
        );
        assert_eq!(check(&[key()], &header), Ok(()));
    }

    #[test]
    fn extra_spaces_between_entries_are_tolerated() {
        let header = format!("v1,Zm9v  {EXPECTED}");
        assert_eq!(check(&[key()], &header), Ok(()));
    }

    #[test]
    fn rotation_accepts_second_key() {
        assert_eq!(check(&[other_key(), key()], EXPECTED), Ok(()));
        assert_eq!(check(&[key(), other_key()], EXPECTED), Ok(()));
    }

    #[test]
    fn rotation_accepts_signature_from_either_key() {
        let sig_new = sign(&other_key(), MSG_ID, TS, BODY);
        let header = format!("{sig_new} {EXPECTED}");
        assert_eq!(check(&[other_key()], &header), Ok(()));
        assert_eq!(check(&[key()], &header), Ok(()));
    }

    #[test]
    fn wrong_key_fails() {
        assert_eq!(
            check(&[other_key()], EXPECTED),
            Err(VerifyError::NoValidSignature)
        );
    }

    #[test]
    fn no_keys_fails() {
        assert_eq!(check(&[], EXPECTED), Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn tampered_body_fails() {
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some(TS_TEXT),
            Some(EXPECTED),
            br#"{"email":"test@example.com","username":"test_user "}"#,
            TS,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn reserialized_body_fails() {
        // Same JSON value, different bytes: proves the raw body is what is signed.
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some(TS_TEXT),
            Some(EXPECTED),
            br#"{"email": "test@example.com", "username": "test_user"}"#,
            TS,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn tampered_id_fails() {
        let r = verify(
            &[key()],
            Some("msg_27UH4WbU6Z5A5EzD8u03UvzRbpl"),
            Some(TS_TEXT),
            Some(EXPECTED),
            BODY,
            TS,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn tampered_timestamp_fails() {
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some("1649367554"),
            Some(EXPECTED),
            BODY,
            TS,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn timestamp_with_leading_zero_is_signed_as_sent() {
        // The header text, not the parsed integer, is what the sender signed.
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some("01649367553"),
            Some(EXPECTED),
            BODY,
            TS,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn tampered_signature_fails() {
        let mut bad = EXPECTED.to_string();
        bad.replace_range(3..4, "u");
        assert_eq!(check(&[key()], &bad), Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn truncated_signature_fails() {
        let sig = format!(
            "v1,{}",
            STANDARD.encode(&tag(&key(), MSG_ID, TS_TEXT, BODY)[..16])
        );
        assert_eq!(check(&[key()], &sig), Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn empty_v1_entry_does_not_match() {
        assert_eq!(check(&[key()], "v1,"), Err(VerifyError::NoValidSignature));
        assert_eq!(check(&[key()], "v1"), Err(VerifyError::NoValidSignature));
        assert_eq!(check(&[key()], " "), Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn only_v1_entries_are_considered() {
        let v2 = EXPECTED.replacen("v1,", "v2,", 1);
        assert_eq!(check(&[key()], &v2), Err(VerifyError::NoValidSignature));
        let upper = EXPECTED.replacen("v1,", "V1,", 1);
        assert_eq!(check(&[key()], &upper), Err(VerifyError::NoValidSignature));
    }

    #[test]
    fn missing_or_empty_headers() {
        let k = [key()];
        let cases = [
            (None, Some(TS_TEXT), Some(EXPECTED), "webhook-id"),
            (Some(""), Some(TS_TEXT), Some(EXPECTED), "webhook-id"),
            (Some(MSG_ID), None, Some(EXPECTED), "webhook-timestamp"),
            (Some(MSG_ID), Some(""), Some(EXPECTED), "webhook-timestamp"),
            (Some(MSG_ID), Some(TS_TEXT), None, "webhook-signature"),
            (Some(MSG_ID), Some(TS_TEXT), Some(""), "webhook-signature"),
        ];
        for (id, ts, sig, name) in cases {
            assert_eq!(
                verify(&k, id, ts, sig, BODY, TS, TOLERANCE),
                Err(VerifyError::MissingHeader(name)),
                "{name}"
            );
        }
    }

    #[test]
    fn missing_header_reported_before_bad_timestamp() {
        let r = verify(&[key()], None, Some("abc"), None, BODY, TS, TOLERANCE);
        assert_eq!(r, Err(VerifyError::MissingHeader("webhook-id")));
    }

    #[test]
    fn timestamp_tolerance_boundaries() {
        let k = [key()];
        let at = |now| {
            verify(
                &k,
                Some(MSG_ID),
                Some(TS_TEXT),
                Some(EXPECTED),
                BODY,
                now,
                TOLERANCE,
            )
        };
        // Server clock ahead of the sender: the request is stale.
        assert_eq!(at(TS + TOLERANCE), Ok(()));
        assert_eq!(
            at(TS + TOLERANCE + 1),
            Err(VerifyError::TimestampOutOfTolerance)
        );
        // Server clock behind the sender: the request is from the future.
        assert_eq!(at(TS - TOLERANCE), Ok(()));
        assert_eq!(
            at(TS - TOLERANCE - 1),
            Err(VerifyError::TimestampOutOfTolerance)
        );
    }

    #[test]
    fn timestamp_checked_before_signature() {
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some(TS_TEXT),
            Some("v1,garbage"),
            BODY,
            TS + 10_000,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::TimestampOutOfTolerance));
    }

    #[test]
    fn extreme_clock_values_do_not_overflow() {
        let r = verify(
            &[key()],
            Some(MSG_ID),
            Some("9223372036854775807"),
            Some(EXPECTED),
            BODY,
            i64::MIN,
            TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::TimestampOutOfTolerance));
    }

    #[test]
    fn bad_timestamp_text() {
        for ts in [
            "abc",
            "-1649367553",
            "+1649367553",
            " 1649367553",
            "1649367553 ",
            "1649367553.0",
            "1.6e9",
            "0x62500000",
            "99999999999999999999",  // 20 digits, overflows i64
            "000000000001649367553", // 21 characters
            "１６４９３６７５５３",  // non-ASCII digits
        ] {
            let r = verify(
                &[key()],
                Some(MSG_ID),
                Some(ts),
                Some(EXPECTED),
                BODY,
                TS,
                TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::BadTimestamp), "{ts:?}");
        }
    }

    #[test]
    fn key_parse_accepts_whsec_base64() {
        let k = WebhookKey::parse(KEY).unwrap();
        assert_eq!(k.0.len(), 24);
        assert!(WebhookKey::parse(&format!("  {KEY}\n")).is_ok());
    }

    #[test]
    fn key_parse_rejects_bad_formats() {
        assert_eq!(
            WebhookKey::parse("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap_err(),
            KeyError::MissingPrefix
        );
        assert_eq!(
            WebhookKey::parse("hunter2").unwrap_err(),
            KeyError::MissingPrefix
        );
        assert_eq!(
            WebhookKey::parse("WHSEC_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap_err(),
            KeyError::MissingPrefix
        );
        assert_eq!(
            WebhookKey::parse("whsec_not base64!").unwrap_err(),
            KeyError::InvalidBase64
        );
        // Unpadded input is not standard base64 with padding.
        assert_eq!(
            WebhookKey::parse("whsec_Zm9vYg").unwrap_err(),
            KeyError::InvalidBase64
        );
        assert_eq!(WebhookKey::parse("whsec_").unwrap_err(), KeyError::EmptyKey);
    }

    #[test]
    fn key_errors_do_not_echo_the_secret() {
        let secret = "whsec_sup3r-s3cret!!";
        let err = WebhookKey::parse(secret).unwrap_err();
        assert!(!err.to_string().contains("sup3r"));
        assert!(!format!("{err:?}").contains("sup3r"));
        let err = parse_keys(&format!("{KEY} {secret}")).unwrap_err();
        assert!(!err.to_string().contains("sup3r"));
        let err = WebhookKey::parse("plain-password").unwrap_err();
        assert!(!err.to_string().contains("plain-password"));
    }

    #[test]
    fn key_debug_is_redacted() {
        assert_eq!(format!("{:?}", key()), "WebhookKey(<redacted>)");
    }

    #[test]
    fn parse_keys_splits_on_whitespace_and_commas() {
        let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        for var in [
            format!("{KEY} {other}"),
            format!("{KEY},{other}"),
            format!(" {KEY} ,\n\t{other},"),
        ] {
            let keys = parse_keys(&var).unwrap();
            assert_eq!(keys.len(), 2, "{var:?}");
            assert_eq!(check(&keys, EXPECTED), Ok(()));
        }
        assert_eq!(parse_keys(KEY).unwrap().len(), 1);
    }

    #[test]
    fn parse_keys_rejects_empty_and_bad_entries() {
        assert_eq!(parse_keys("").unwrap_err(), KeyError::NoKeys);
        assert_eq!(parse_keys(" , \n").unwrap_err(), KeyError::NoKeys);
        let err = parse_keys(&format!("{KEY}, hunter2")).unwrap_err();
        assert_eq!(
            err,
            KeyError::InList {
                position: 2,
                reason: Box::new(KeyError::MissingPrefix)
            }
        );
        assert!(err.to_string().contains("#2"));
    }

    #[test]
    fn verify_error_messages() {
        assert_eq!(
            VerifyError::MissingHeader("webhook-id").to_string(),
            "missing or empty webhook-id header"
        );
        let _: &dyn std::error::Error = &VerifyError::NoValidSignature;
    }
}
