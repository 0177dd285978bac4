use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::TimeZone;
use p256::{
    ecdsa::{SigningKey, signature::Signer},
    pkcs8::{EncodePublicKey, LineEnding},
};

use super::*;

/// The example of Monobank's documentation ("Приклади верифікації підпису webhook"): its
/// public key, its `X-Sign`, and the body it signs.
const DOC_KEY: &str = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFQUc1LzZ3NnZubGJZb0ZmRHlYWE4vS29CbVVjTgo3NWJSUWg4MFBhaEdldnJoanFCQnI3OXNSS0JSbnpHODFUZVQ5OEFOakU1c0R3RmZ5Znhub0ZJcmZBPT0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0tCg==";
const DOC_SIGN: &str = "MEUCIQC/mVKhi8FKoayul2Mim3E2oaIOCNJk5dEXxTqbkeJSOQIgOM0hsW0qcP2H8iXy1aQYpmY0SJWEaWur7nQXlKDCFxA=";

/// The body of that example, byte for byte (two-space indents, no final newline).
const DOC_BODY: &str = r#"{
  "invoiceId": "p2_9ZgpZVsl3",
  "status": "created",
  "failureReason": "string",
  "amount": 4200,
  "ccy": 980,
  "finalAmount": 4200,
  "createdDate": "2019-08-24T14:15:22Z",
  "modifiedDate": "2019-08-24T14:15:22Z",
  "reference": "84d0070ee4e44667b31371d8f8813947",
  "cancelList": [
    {
      "status": "processing",
      "amount": 4200,
      "ccy": 980,
      "createdDate": "2019-08-24T14:15:22Z",
      "modifiedDate": "2019-08-24T14:15:22Z",
      "approvalCode": "662476",
      "rrn": "060189181768",
      "extRef": "635ace02599849e981b2cd7a65f417fe"
    }
  ]
}"#;

#[test]
fn the_documented_example_verifies() {
    let key = parse_public_key(DOC_KEY).unwrap();
    assert_eq!(verify(&key, Some(DOC_SIGN), DOC_BODY.as_bytes()), Ok(()));
    // The same report re-indented is another body.
    let compact: serde_json::Value = serde_json::from_str(DOC_BODY).unwrap();
    assert_eq!(
        verify(&key, Some(DOC_SIGN), compact.to_string().as_bytes()),
        Err(SignatureError::NoMatch)
    );
    let r = read_report(DOC_BODY.as_bytes()).unwrap();
    assert_eq!(
        (r.invoice_id.as_str(), r.status),
        ("p2_9ZgpZVsl3", Status::Created)
    );
}

fn key_pair() -> (SigningKey, VerifyingKey) {
    let signing = SigningKey::random(&mut rand::rngs::OsRng);
    let verifying = *signing.verifying_key();
    (signing, verifying)
}

fn sign(key: &SigningKey, body: &[u8]) -> String {
    let signature: Signature = key.sign(body);
    STANDARD.encode(signature.to_der().as_bytes())
}

#[test]
fn the_documented_key_parses() {
    assert!(parse_public_key(DOC_KEY).is_ok());
    assert!(parse_signature(Some(DOC_SIGN)).is_ok());
    assert!(parse_public_key("bm90IGEga2V5").is_err());
    assert!(parse_public_key("%%%").is_err());
}

#[test]
fn a_signature_verifies_over_the_raw_body_only() {
    let (signing, verifying) = key_pair();
    let body = br#"{"invoiceId":"p2_1","status":"success"}"#;
    let header = sign(&signing, body);
    assert_eq!(verify(&verifying, Some(&header), body), Ok(()));
    // One byte of whitespace more is another body.
    assert_eq!(
        verify(
            &verifying,
            Some(&header),
            br#"{"invoiceId":"p2_1", "status":"success"}"#
        ),
        Err(SignatureError::NoMatch)
    );
    // Another key's signature.
    let (other, _) = key_pair();
    assert_eq!(
        verify(&verifying, Some(&sign(&other, body)), body),
        Err(SignatureError::NoMatch)
    );
}

#[test]
fn the_key_comes_as_base64_of_a_pem() {
    let (signing, verifying) = key_pair();
    let pem = verifying.to_public_key_pem(LineEnding::LF).unwrap();
    let parsed = parse_public_key(&STANDARD.encode(pem)).unwrap();
    let body = b"{}";
    assert_eq!(verify(&parsed, Some(&sign(&signing, body)), body), Ok(()));
}

#[test]
fn a_high_s_signature_verifies_too() {
    // ECDSA signatures come with either s; a signer that does not normalize (Java's) sends
    // the high one half the time.
    let (signing, verifying) = key_pair();
    let body = b"{\"status\":\"success\"}";
    let low: Signature = signing.sign(body);
    let (r, s) = low.split_scalars();
    let high = Signature::from_scalars(r, -*s).unwrap();
    let header = STANDARD.encode(high.to_der().as_bytes());
    assert_eq!(verify(&verifying, Some(&header), body), Ok(()));
}

#[test]
fn missing_and_malformed_headers_are_refused() {
    let (_, verifying) = key_pair();
    assert_eq!(
        verify(&verifying, None, b"{}"),
        Err(SignatureError::Missing)
    );
    assert_eq!(
        verify(&verifying, Some("  "), b"{}"),
        Err(SignatureError::Missing)
    );
    for h in ["not base64!", "AAAA", "MEUCIQ=="] {
        assert_eq!(
            verify(&verifying, Some(h), b"{}"),
            Err(SignatureError::Malformed),
            "{h}"
        );
    }
}

fn body(status: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "invoiceId": "p2_9ZgpZVsl3", "status": status, "failureReason": "string",
        "amount": 4200, "ccy": 980, "finalAmount": 4200,
        "createdDate": "2019-08-24T14:15:22Z", "modifiedDate": "2019-08-24T14:15:22Z",
        "reference": "84d0070ee4e44667b31371d8f8813947", "cancelList": []
    }))
    .unwrap()
}

#[test]
fn a_report_reads_as_the_documented_body() {
    let r = read_report(&body("success")).unwrap();
    assert_eq!(r.invoice_id, "p2_9ZgpZVsl3");
    assert_eq!(r.status, Status::Success);
    assert_eq!((r.amount_minor, r.currency.as_str()), (4200, "UAH"));
    assert_eq!(
        r.reference.as_deref(),
        Some("84d0070ee4e44667b31371d8f8813947")
    );
    assert_eq!(
        r.modified_date,
        Utc.with_ymd_and_hms(2019, 8, 24, 14, 15, 22).unwrap()
    );
}

#[test]
fn each_status_maps_to_its_action() {
    let Action::Pay(p) = read_report(&body("success")).unwrap().action() else {
        panic!("success is a payment")
    };
    assert_eq!(p.gateway, Gateway::Monobank);
    assert_eq!(p.external_id, "p2_9ZgpZVsl3");
    assert_eq!(p.order_reference, "84d0070ee4e44667b31371d8f8813947");
    assert_eq!((p.amount_minor, p.currency.as_str()), (4200, "UAH"));
    assert_eq!(p.paid_at.timestamp(), 1_566_656_122);
    let Action::Refund(r) = read_report(&body("reversed")).unwrap().action() else {
        panic!("reversed is a refund")
    };
    assert_eq!(
        r,
        Reported {
            order_reference: Some("84d0070ee4e44667b31371d8f8813947".into()),
            amount_minor: 4200,
            currency: "UAH".into(),
            paid_at: p.paid_at,
        }
    );
    for status in ["failure", "expired"] {
        assert!(matches!(
            read_report(&body(status)).unwrap().action(),
            Action::Release(r) if r == "84d0070ee4e44667b31371d8f8813947"
        ));
    }
    for status in ["created", "processing", "hold"] {
        assert!(matches!(
            read_report(&body(status)).unwrap().action(),
            Action::Nothing(_)
        ));
    }
    assert!(Status::Success.is_final() && Status::Expired.is_final());
    assert!(!Status::Processing.is_final() && !Status::Hold.is_final());
    assert_eq!(
        Status::ALL.map(Status::as_str),
        [
            "created",
            "processing",
            "hold",
            "success",
            "failure",
            "reversed",
            "expired"
        ]
    );
}

#[test]
fn currencies_come_from_their_numeric_codes() {
    assert_eq!(currency_of(980), Some("UAH"));
    assert_eq!(currency_of(840), Some("USD"));
    assert_eq!(currency_of(978), Some("EUR"));
    assert_eq!(currency_of(643), None);
    let mut v: serde_json::Value = serde_json::from_slice(&body("success")).unwrap();
    v["ccy"] = 840.into();
    let r = read_report(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(r.currency, "USD");
}

#[test]
fn bad_bodies_are_malformed_or_invalid() {
    assert!(matches!(
        read_report(b"not json"),
        Err(ReportError::Malformed(_))
    ));
    let change = |k: &str, v: serde_json::Value| {
        let mut b: serde_json::Value = serde_json::from_slice(&body("success")).unwrap();
        b[k] = v;
        read_report(&serde_json::to_vec(&b).unwrap())
    };
    assert!(matches!(
        change("amount", "4200".into()),
        Err(ReportError::Malformed(_))
    ));
    for (k, v, field) in [
        ("invoiceId", serde_json::Value::Null, "invoiceId"),
        ("status", "paid".into(), "status"),
        ("amount", 0.into(), "amount"),
        ("ccy", 643.into(), "ccy"),
        ("modifiedDate", "yesterday".into(), "modifiedDate"),
    ] {
        assert!(
            matches!(change(k, v.clone()), Err(ReportError::Invalid { field: f, .. }) if f == field),
            "{k}: {v}"
        );
    }
}

#[test]
fn the_invoice_request_is_as_documented() {
    let invoice = NewInvoice {
        amount: 19900,
        ccy: UAH,
        merchant_paym_info: PaymInfo {
            reference: "ord_1",
            destination: "Club",
        },
        redirect_url: Some("https://t.me/bot"),
        web_hook_url: "https://pay.example.com/api/webhook/monobank",
        validity: 300,
        payment_type: "debit",
    };
    assert_eq!(
        serde_json::to_value(&invoice).unwrap(),
        serde_json::json!({"amount": 19900, "ccy": 980,
            "merchantPaymInfo": {"reference": "ord_1", "destination": "Club"},
            "redirectUrl": "https://t.me/bot",
            "webHookUrl": "https://pay.example.com/api/webhook/monobank",
            "validity": 300, "paymentType": "debit"})
    );
    let cancel = Cancel {
        invoice_id: "p2_1",
        ext_ref: None,
        amount: None,
    };
    assert_eq!(
        serde_json::to_value(&cancel).unwrap(),
        serde_json::json!({"invoiceId": "p2_1"})
    );
    let answer: Cancelled = serde_json::from_str(
        r#"{"status":"processing","createdDate":"2019-08-24T14:15:22Z","modifiedDate":"2019-08-24T14:15:22Z"}"#,
    )
    .unwrap();
    assert_eq!(answer.status, CancelStatus::Processing);
}
