//! Door 1's authentication and parsing: tampered, stale or unsigned webhooks are 401 and store
//! nothing, any rotated secret is accepted, a door without a secret is 503, malformed or
//! invalid signed bodies are 400 or 422, and other event types are ignored.

use chrono::Utc;
use serde_json::{Value, json};

use crate::{
    payments::apply::order_row,
    support::helpers::{TestApp, WEBHOOK_SECRET, id, payment_event, reference, signed_headers},
};

/// Header name/value pairs as the helpers build them.
type Headers = Vec<(&'static str, String)>;

#[tokio::test]
async fn tampered_stale_or_unsigned_webhooks_are_401_and_store_nothing() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1002).await);
    let chan = id(&app.create_channel(-1002, json!({})).await);
    let order = app.create_order(sub, chan).await;
    let body = payment_event("pay_t", &reference(&order), 19900, "UAH").to_string();
    let now = Utc::now().timestamp();
    let good = signed_headers(WEBHOOK_SECRET, "msg_t", now, &body);

    let mut cases: Vec<(&str, String, Headers)> = vec![
        ("changed amount", body.replace("19900", "100"), good.clone()),
        (
            "changed order reference",
            body.replace(&reference(&order), "ord_00000000000000000000000000000000"),
            good.clone(),
        ),
        (
            "wrong secret",
            body.clone(),
            signed_headers(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "msg_t",
                now,
                &body,
            ),
        ),
        (
            "stale timestamp",
            body.clone(),
            signed_headers(WEBHOOK_SECRET, "msg_t", now - 301, &body),
        ),
        (
            "future timestamp",
            body.clone(),
            signed_headers(WEBHOOK_SECRET, "msg_t", now + 301, &body),
        ),
        (
            "changed webhook id",
            body.clone(),
            vec![
                ("webhook-id", "msg_other".into()),
                good[1].clone(),
                good[2].clone(),
            ],
        ),
        (
            "empty v1 signature",
            body.clone(),
            vec![
                good[0].clone(),
                good[1].clone(),
                ("webhook-signature", "v1,".into()),
            ],
        ),
        (
            "signature of another version",
            body.clone(),
            vec![
                good[0].clone(),
                good[1].clone(),
                ("webhook-signature", good[2].1.replace("v1,", "v2,")),
            ],
        ),
    ];
    for missing in 0..3 {
        let name = [
            "missing webhook-id",
            "missing webhook-timestamp",
            "missing webhook-signature",
        ][missing];
        let headers = good
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != missing)
            .map(|(_, h)| h.clone())
            .collect();
        cases.push((name, body.clone(), headers));
    }
    for (name, body, headers) in &cases {
        let r = app.post_webhook_raw(body, headers).await;
        assert_eq!(
            r.status.as_u16(),
            401,
            "{name}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{name}"
        );
    }
    assert_eq!(app.count("payments").await, 0, "no 401 stores anything");
    assert_eq!(app.count("memberships").await, 0);

    // The same request, untampered, is accepted (so the cases above fail for their tampering).
    let r = app.post_webhook_raw(&body, &good).await.expect(200);
    assert_eq!(r["duplicate"], false);
    assert_eq!(r["payment"]["outcome"], "applied");
    // Several signatures, one of them valid, also pass.
    let body2 = payment_event("pay_t2", &reference(&order), 19900, "UAH").to_string();
    let mut h = signed_headers(WEBHOOK_SECRET, "msg_t2", now, &body2);
    h[2].1 = format!("v1,AAAA v1a,xyz {}", h[2].1);
    app.post_webhook_raw(&body2, &h).await.expect(200);
}

#[tokio::test]
async fn any_rotated_secret_is_accepted() {
    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let app = TestApp::spawn_with(|env| {
        env.insert("WEBHOOK_SECRET".into(), String::new());
        env.insert("WEBHOOK_SECRETS".into(), format!("{WEBHOOK_SECRET}, {OLD}"));
    })
    .await;
    let sub = id(&app.create_subscriber(1003).await);
    let chan = id(&app.create_channel(-1003, json!({})).await);
    let now = Utc::now().timestamp();
    for (n, secret) in [WEBHOOK_SECRET, OLD].iter().enumerate() {
        let order = app.create_order(sub, chan).await;
        let body =
            payment_event(&format!("pay_rot_{n}"), &reference(&order), 19900, "UAH").to_string();
        let r = app
            .post_webhook_raw(&body, &signed_headers(secret, "msg_r", now, &body))
            .await
            .expect(200);
        assert_eq!(r["payment"]["outcome"], "applied");
    }
    let body = payment_event("pay_rot_x", "ord_x", 19900, "UAH").to_string();
    let other = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY";
    let r = app
        .post_webhook_raw(&body, &signed_headers(other, "msg_r", now, &body))
        .await;
    assert_eq!(r.status.as_u16(), 401);
}

#[tokio::test]
async fn door_without_a_secret_answers_503() {
    let app = TestApp::spawn_with(|env| {
        env.insert("WEBHOOK_SECRET".into(), String::new());
    })
    .await;
    let body = payment_event("pay_1", "ord_x", 19900, "UAH").to_string();
    let headers = signed_headers(WEBHOOK_SECRET, "msg_1", Utc::now().timestamp(), &body);
    let r = app.post_webhook_raw(&body, &headers).await;
    assert_eq!(r.status.as_u16(), 503);
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn malformed_or_invalid_signed_bodies_are_400_or_422_and_store_nothing() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1004).await);
    let chan = id(&app.create_channel(-1004, json!({})).await);
    let order = app.create_order(sub, chan).await;
    let good = payment_event("pay_m", &reference(&order), 19900, "UAH");
    let with = |field: &str, value: Value| {
        let mut b = good.clone();
        b[field] = value;
        b.to_string()
    };
    let without = |field: &str| {
        let mut b = good.clone();
        b.as_object_mut().unwrap().remove(field);
        b.to_string()
    };
    let cases: Vec<(u16, String)> = vec![
        (400, "{not json".into()),
        (400, "[1, 2, 3]".into()),
        (400, "\"payment\"".into()),
        (400, with("amount_minor", json!("19900"))),
        (400, with("amount_minor", json!(199.5))),
        (400, with("amount_minor", json!(1e30))),
        (400, with("payment_id", json!(17))),
        (400, with("type", json!(1))),
        (422, with("amount_minor", json!(0))),
        (422, with("amount_minor", json!(-19900))),
        (422, with("currency", json!("uah"))),
        (422, with("currency", json!("HRYVNIA"))),
        (422, with("gateway", json!("wayforpay"))),
        (422, with("gateway", json!("telegram_stars"))),
        (422, with("gateway", json!("Acme Pay"))),
        (422, with("gateway", json!("a".repeat(33)))),
        (422, with("payment_id", json!(""))),
        (422, with("payment_id", json!("p".repeat(256)))),
        (422, with("order_reference", json!(""))),
        (422, with("paid_at", json!("2025-13-01"))),
        (422, with("paid_at", json!("yesterday"))),
        (422, without("type")),
        (422, without("gateway")),
        (422, without("payment_id")),
        (422, without("order_reference")),
        (422, without("amount_minor")),
        (422, without("currency")),
        (422, without("paid_at")),
    ];
    for (status, body) in &cases {
        let headers = signed_headers(WEBHOOK_SECRET, "msg_m", Utc::now().timestamp(), body);
        let r = app.post_webhook_raw(body, &headers).await;
        assert_eq!(
            r.status.as_u16(),
            *status,
            "{body}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        if *status == 422 {
            assert!(
                r.json()["errors"].is_object(),
                "422 names the field: {body}"
            );
        }
    }
    assert_eq!(app.count("payments").await, 0);
    assert_eq!(order_row(&app, id(&order)).await["status"], "pending");
}

#[tokio::test]
async fn other_event_types_are_ignored() {
    let app = TestApp::spawn().await;
    let r = app
        .post_signed_webhook(&json!({"type": "payment.refunded", "payment_id": "pay_1"}))
        .await
        .expect(200);
    assert_eq!(r, json!({"ignored": true}));
    assert_eq!(app.count("payments").await, 0);
}
