//! Door 2: WayForPay `serviceUrl` callbacks — signature and merchant checks, the signed
//! `accept` acknowledgement, only `Approved` is a payment, and exactly-once under concurrent
//! duplicate callbacks.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::support::{
    bodies::{ListBody, MembershipBody, OrderBody, PaymentBody, body_of},
    helpers::{
        TestApp, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, assert_wayforpay_accept, id, reference,
        wayforpay_callback, wayforpay_callback_signed,
    },
    race::race,
};

/// A subscriber, a 199.50 UAH channel and a pending order.
async fn order(app: &TestApp, n: i64) -> Value {
    let sub = id(&app.create_subscriber(n).await);
    let chan = id(&app.create_channel(-n, json!({"price_minor": 19950})).await);
    app.create_order(sub, chan).await
}

#[tokio::test]
async fn an_approved_callback_pays_the_order_and_is_acknowledged() {
    let app = TestApp::spawn().await;
    let o = order(&app, 1).await;
    let body = wayforpay_callback(&reference(&o), "199.5", "UAH", "Approved");
    let ack = app.post_wayforpay(&body).await.expect(200);
    assert_wayforpay_accept(&ack, &reference(&o));
    let now = Utc::now().timestamp();
    assert!((ack["time"].as_i64().unwrap() - now).abs() < 60);

    let payments: ListBody<PaymentBody> = body_of(&app.get("/api/payments").await.expect(200));
    let p = &payments.items[0];
    assert_eq!(p.gateway, "wayforpay");
    assert_eq!(p.external_id, reference(&o));
    assert_eq!(p.order_id, Some(id(&o)));
    assert_eq!(p.amount_minor, 19950, "199.5 UAH in kopiykas");
    assert_eq!(p.outcome, "applied");
    let paid_at: DateTime<Utc> = p.paid_at.parse().unwrap();
    let processing: i64 = serde_json::from_str::<Value>(&body).unwrap()["processingDate"]
        .as_i64()
        .unwrap();
    assert_eq!(paid_at.timestamp(), processing, "paid_at is processingDate");
    let paid_order: OrderBody = body_of(
        &app.get(&format!("/api/orders/{}", id(&o)))
            .await
            .expect(200),
    );
    assert_eq!(paid_order.status, "paid");
    let m: ListBody<MembershipBody> = body_of(&app.get("/api/memberships").await.expect(200));
    assert_eq!(m.items[0].status, "active");

    // The same literal amount written differently is the same money.
    let o2 = order(&app, 2).await;
    let ack = app
        .post_wayforpay(&wayforpay_callback(
            &reference(&o2),
            "199.50",
            "UAH",
            "Approved",
        ))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &reference(&o2));
    assert_eq!(app.count("payments WHERE outcome = 'applied'").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicate_callbacks_store_one_payment_and_all_get_a_valid_accept() {
    let app = Arc::new(TestApp::spawn().await);
    let sub = id(&app.create_subscriber(10).await);
    let chan = id(&app.create_channel(-10, json!({"price_minor": 19950})).await);
    for round in 0..20 {
        let o = app.create_order(sub, chan).await;
        let body = wayforpay_callback(&reference(&o), "199.5", "UAH", "Approved");
        for answer in race(8, |_| {
            let (app, body) = (app.clone(), body.clone());
            async move { app.post_wayforpay(&body).await }
        })
        .await
        {
            let ack = answer.expect(200);
            assert_wayforpay_accept(&ack, &reference(&o));
        }
        assert_eq!(
            app.count(&format!(
                "payments WHERE gateway = 'wayforpay' AND external_id = '{}'",
                reference(&o)
            ))
            .await,
            1,
            "round {round}"
        );
        assert_eq!(
            app.count(&format!(
                "membership_events e JOIN payments p ON p.id = e.payment_id WHERE p.order_id = {}",
                id(&o)
            ))
            .await,
            1,
            "round {round}: one extension"
        );
    }
    assert_eq!(app.count("payments").await, 20);
    assert_eq!(app.count("membership_events").await, 20);
}

#[tokio::test]
async fn forged_or_foreign_callbacks_are_401_and_store_nothing() {
    let app = TestApp::spawn().await;
    let o = order(&app, 20).await;
    let r = reference(&o);
    let good = wayforpay_callback(&r, "199.5", "UAH", "Approved");
    let cases = [
        (
            "changed amount",
            good.replace("\"amount\":199.5", "\"amount\":1.5"),
        ),
        (
            "amount re-formatted (signed text differs)",
            good.replace("\"amount\":199.5", "\"amount\":199.50"),
        ),
        (
            "changed reference",
            good.replace(&r, "ord_ffffffffffffffffffffffffffffffff"),
        ),
        (
            "changed status",
            good.replace("\"Approved\"", "\"Declined\""),
        ),
        (
            "wrong key",
            wayforpay_callback_signed(
                "another-secret-key-123",
                WAYFORPAY_ACCOUNT,
                &r,
                "199.5",
                "UAH",
                "Approved",
            ),
        ),
        (
            "another merchant, signed with our key",
            wayforpay_callback_signed(
                WAYFORPAY_KEY,
                "someone_else",
                &r,
                "199.5",
                "UAH",
                "Approved",
            ),
        ),
    ];
    for (name, body) in &cases {
        let resp = app.post_wayforpay(body).await;
        assert_eq!(
            resp.status.as_u16(),
            401,
            "{name}: {}",
            String::from_utf8_lossy(&resp.bytes)
        );
        assert!(
            resp.json().get("signature").is_none(),
            "{name}: no acknowledgement"
        );
    }
    assert_eq!(app.count("payments").await, 0);
    // The untampered callback is accepted.
    assert_wayforpay_accept(&app.post_wayforpay(&good).await.expect(200), &r);
}

#[tokio::test]
async fn malformed_callbacks_are_400() {
    let app = TestApp::spawn().await;
    let o = order(&app, 30).await;
    let good = wayforpay_callback(&reference(&o), "199.5", "UAH", "Approved");
    for body in [
        "not json".to_string(),
        "[]".to_string(),
        good.replace("\"amount\":199.5", "\"amount\":\"199.5\""),
        good.replace("\"merchantAccount\":\"test_merch_n1\",", ""),
    ] {
        let r = app.post_wayforpay(&body).await;
        assert_eq!(r.status.as_u16(), 400, "{body}");
    }
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn correctly_signed_but_unrepresentable_money_is_422_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let o = order(&app, 40).await;
    let r = reference(&o);
    for (amount, currency, field) in [
        ("199.5", "ZZZ", "currency"),
        ("199.555", "UAH", "amount"),
        ("1e2", "UAH", "amount"),
        ("-199.5", "UAH", "amount"),
    ] {
        let body = wayforpay_callback(&r, amount, currency, "Approved");
        let resp = app.post_wayforpay(&body).await;
        let v = resp.expect(422);
        assert!(v["errors"][field].is_string(), "{amount} {currency}: {v}");
    }
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn only_approved_is_a_payment_but_every_signed_callback_is_acknowledged() {
    let app = TestApp::spawn().await;
    let o = order(&app, 50).await;
    for status in ["Declined", "Pending", "InProcessing", "Expired"] {
        let ack = app
            .post_wayforpay(&wayforpay_callback(&reference(&o), "199.5", "UAH", status))
            .await
            .expect(200);
        assert_wayforpay_accept(&ack, &reference(&o));
    }
    assert_eq!(app.count("payments").await, 0);
    assert_eq!(
        app.get(&format!("/api/orders/{}", id(&o)))
            .await
            .expect(200)["status"],
        "pending"
    );
    // A refund before any payment is recorded as that payment, so the payment grants nothing
    // (tests/api/payments/refunds_before_payments.rs).
    let ack = app
        .post_wayforpay(&wayforpay_callback(
            &reference(&o),
            "199.5",
            "UAH",
            "Refunded",
        ))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &reference(&o));
    assert_eq!(
        app.count("payments WHERE outcome = 'refunded' AND reason = 'refunded_before_payment'")
            .await,
        1
    );
}

#[tokio::test]
async fn an_approved_payment_failing_a_check_is_kept_for_review_and_acknowledged() {
    let app = TestApp::spawn().await;
    let o = order(&app, 60).await;
    let ack = app
        .post_wayforpay(&wayforpay_callback(
            &reference(&o),
            "100",
            "UAH",
            "Approved",
        ))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &reference(&o));
    let p = app.get("/api/payments").await.expect(200)["items"][0].clone();
    assert_eq!(p["outcome"], "needs_review");
    assert_eq!(p["reason"], "amount_mismatch");
    assert_eq!(p["amount_minor"], 10000);
    assert_eq!(app.count("memberships").await, 0);

    let ack = app
        .post_wayforpay(&wayforpay_callback("ord_not_ours", "5", "USD", "Approved"))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, "ord_not_ours");
    assert_eq!(
        app.count("payments WHERE reason = 'unknown_order'").await,
        1
    );
}

#[tokio::test]
async fn door_without_credentials_answers_503() {
    let app = TestApp::spawn_with(|env| {
        env.insert("WAYFORPAY_MERCHANT_ACCOUNT".into(), String::new());
        env.insert("WAYFORPAY_SECRET_KEY".into(), String::new());
    })
    .await;
    let body = wayforpay_callback("ord_x", "199.5", "UAH", "Approved");
    assert_eq!(app.post_wayforpay(&body).await.status.as_u16(), 503);
    assert_eq!(app.count("payments").await, 0);
}
