//! The orders API: create, read, cancel and checkout (the seat rule), with their 404/409/422s.

use axum::{body::Body, http::Method};
use serde_json::{Value, json};

use crate::support::{
    bodies::{OrderBody, body_of},
    helpers::{TestApp, id},
    rows::expire_hold,
};

#[tokio::test]
async fn create_copies_the_price_and_makes_an_unguessable_reference() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1).await);
    let chan = id(&app
        .create_channel(-1, json!({"price_minor": 4200, "currency": "EUR"}))
        .await);
    let o = app.create_order(sub, chan).await;
    // The typed read checks every field is there with its type (`created_at` a string).
    let typed: OrderBody = body_of(&o);
    assert_eq!(typed.subscriber_id, sub);
    assert_eq!(typed.channel_id, chan);
    assert_eq!(typed.amount_minor, 4200);
    assert_eq!(typed.currency, "EUR");
    assert_eq!(typed.status, "pending");
    assert_eq!(typed.hold_until, None);
    assert_eq!(typed.invoice_link, None);
    assert_eq!(typed.paid_at, None);
    let reference = typed.reference.as_str();
    assert_eq!(reference.len(), 4 + 32);
    assert!(reference.starts_with("ord_"));
    assert!(reference[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    let o2: OrderBody = body_of(&app.create_order(sub, chan).await);
    assert_ne!(o2.reference, typed.reference);

    // A later price change does not touch existing orders.
    app.patch(
        &format!("/api/channels/{chan}"),
        json!({"price_minor": 5000}),
    )
    .await
    .expect(200);
    let again = app
        .get(&format!("/api/orders/{}", typed.id))
        .await
        .expect(200);
    assert_eq!(again, o);
}

#[tokio::test]
async fn create_refuses_missing_unknown_or_inactive() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(2).await);
    let chan = id(&app.create_channel(-2, json!({})).await);
    let inactive = id(&app.create_channel(-3, json!({"active": false})).await);

    let r = app.post("/api/orders", json!({})).await;
    let v = r.expect(422);
    assert!(v["errors"]["subscriber_id"].is_string());
    assert!(v["errors"]["channel_id"].is_string());
    let v = app
        .post(
            "/api/orders",
            json!({"subscriber_id": 999, "channel_id": 998}),
        )
        .await
        .expect(422);
    assert!(v["errors"]["subscriber_id"].is_string());
    assert!(v["errors"]["channel_id"].is_string());
    let v = app
        .post(
            "/api/orders",
            json!({"subscriber_id": sub, "channel_id": inactive}),
        )
        .await
        .expect(422);
    assert!(
        v["errors"]["channel_id"]
            .as_str()
            .unwrap()
            .contains("not active")
    );
    app.post(
        "/api/orders",
        json!({"subscriber_id": sub, "channel_id": chan, "extra": 1}),
    )
    .await
    .expect(400);
    app.post(
        "/api/orders",
        json!({"subscriber_id": "one", "channel_id": chan}),
    )
    .await
    .expect(400);
    assert_eq!(app.count("orders").await, 0);

    let anonymous = app
        .request(
            Method::POST,
            "/api/orders",
            &[("content-type", "application/json")],
            Body::from(json!({"subscriber_id": sub, "channel_id": chan}).to_string()),
        )
        .await;
    assert_eq!(anonymous.status.as_u16(), 401);
    assert_eq!(app.count("orders").await, 0);
}

#[tokio::test]
async fn create_honours_the_idempotency_key() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(3).await);
    let chan = id(&app.create_channel(-4, json!({})).await);
    let body = json!({"subscriber_id": sub, "channel_id": chan});
    let first = app
        .staff_with(
            Method::POST,
            "/api/orders",
            body.clone(),
            &[("idempotency-key", "k-1")],
        )
        .await;
    let second = app
        .staff_with(
            Method::POST,
            "/api/orders",
            body,
            &[("idempotency-key", "k-1")],
        )
        .await;
    assert_eq!(first.status.as_u16(), 201);
    assert_eq!(second.status.as_u16(), 201);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(first.bytes, second.bytes);
    assert_eq!(app.count("orders").await, 1);
}

#[tokio::test]
async fn get_and_list_with_filters() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_subscriber(10).await);
    let b = id(&app.create_subscriber(11).await);
    let c1 = id(&app.create_channel(-10, json!({})).await);
    let c2 = id(&app.create_channel(-11, json!({})).await);
    let o1 = app.create_order(a, c1).await;
    let o2 = app.create_order(a, c2).await;
    let o3 = app.create_order(b, c1).await;
    app.post(&format!("/api/orders/{}/cancel", id(&o3)), Value::Null)
        .await
        .expect(200);

    let ids = |v: Value| -> Vec<i64> { v["items"].as_array().unwrap().iter().map(id).collect() };
    assert_eq!(
        ids(app.get("/api/orders").await.expect(200)),
        [id(&o1), id(&o2), id(&o3)]
    );
    assert_eq!(
        ids(app
            .get(&format!("/api/orders?subscriber_id={a}"))
            .await
            .expect(200)),
        [id(&o1), id(&o2)]
    );
    assert_eq!(
        ids(app
            .get(&format!("/api/orders?channel_id={c1}"))
            .await
            .expect(200)),
        [id(&o1), id(&o3)]
    );
    assert_eq!(
        ids(app.get("/api/orders?status=cancelled").await.expect(200)),
        [id(&o3)]
    );
    let page = app.get("/api/orders?limit=2").await.expect(200);
    assert_eq!(page["next_after"], id(&o2));
    app.get("/api/orders?status=lost").await.expect(422);
    app.get("/api/orders?colour=red").await.expect(400);

    assert_eq!(
        app.get(&format!("/api/orders/{}", id(&o1)))
            .await
            .expect(200),
        o1
    );
    app.get("/api/orders/999999").await.expect(404);
    app.get("/api/orders/nope").await.expect(404);
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_400_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(22).await);
    let chan = id(&app.create_channel(-22, json!({})).await);
    let order = app.create_order(s, chan).await;
    let cancel = format!("/api/orders/{}/cancel", id(&order));
    // serde's derived structs would take an array (an empty one for a body without fields).
    for body in [json!([]), json!("{}"), json!(1)] {
        app.post(&cancel, body).await.expect(400);
    }
    // Fields by position are no body either.
    app.post("/api/subscribers", json!([23])).await.expect(400);
    let unchanged = app
        .get(&format!("/api/orders/{}", id(&order)))
        .await
        .expect(200);
    assert_eq!(unchanged["status"], "pending");
    let found = app
        .get("/api/subscribers?telegram_user_id=23")
        .await
        .expect(200);
    assert_eq!(found["items"], json!([]), "{found}");
}

#[tokio::test]
async fn cancel_is_for_pending_orders_and_frees_the_hold() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_subscriber(20).await);
    let b = id(&app.create_subscriber(21).await);
    let chan = id(&app.create_channel(-20, json!({"seat_limit": 1})).await);
    let oa = app.create_order(a, chan).await;
    let ob = app.create_order(b, chan).await;
    app.checkout(id(&oa)).await.expect(200);
    // The only seat is held: b cannot check out.
    assert_eq!(app.checkout(id(&ob)).await.status.as_u16(), 409);

    let cancelled = app
        .post(&format!("/api/orders/{}/cancel", id(&oa)), Value::Null)
        .await
        .expect(200);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["hold_until"], Value::Null);
    // The seat is free at once.
    app.checkout(id(&ob)).await.expect(200);

    // Not pending any more → 409, for cancel and checkout alike.
    app.post(&format!("/api/orders/{}/cancel", id(&oa)), Value::Null)
        .await
        .expect(409);
    app.checkout(id(&oa)).await.expect(409);
    app.pay_order(&ob, "pay_b").await.expect(200);
    app.post(&format!("/api/orders/{}/cancel", id(&ob)), Value::Null)
        .await
        .expect(409);
    app.checkout(id(&ob)).await.expect(409);

    app.post("/api/orders/999999/cancel", Value::Null)
        .await
        .expect(404);
    app.post(
        &format!("/api/orders/{}/cancel", id(&oa)),
        json!({"why": 1}),
    )
    .await
    .expect(400);
}

#[tokio::test]
async fn checkout_holds_once_and_never_extends() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_subscriber(30).await);
    let b = id(&app.create_subscriber(31).await);
    let limited = id(&app.create_channel(-30, json!({"seat_limit": 1})).await);
    let unlimited = id(&app.create_channel(-31, json!({})).await);

    // Unlimited channel: approved without a hold.
    let free = app.create_order(a, unlimited).await;
    let r: OrderBody = body_of(&app.checkout(id(&free)).await.expect(200)["order"]);
    assert_eq!(r.hold_until, None);
    assert_eq!(r.id, id(&free));

    // Seat-limited: the first checkout holds for HOLD_SECS (300 s) from database now.
    let o = app.create_order(a, limited).await;
    let first: OrderBody = body_of(&app.checkout(id(&o)).await.expect(200)["order"]);
    let hold: chrono::DateTime<chrono::Utc> = first.hold_until.as_deref().unwrap().parse().unwrap();
    let created: chrono::DateTime<chrono::Utc> =
        body_of::<OrderBody>(&o).created_at.parse().unwrap();
    let secs = (hold - created).num_seconds();
    assert!((299..=305).contains(&secs), "hold of {secs} s");
    // Again: approved, same hold.
    let second: OrderBody = body_of(&app.checkout(id(&o)).await.expect(200)["order"]);
    assert_eq!(second.hold_until, first.hold_until);

    // Expired: refused even though the seat is free now.
    expire_hold(&app, id(&o), 1).await;
    let r = app.checkout(id(&o)).await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("expired"));
    // A new order of the same buyer waits for the cooldown after an unpaid hold, then gets
    // the free seat.
    let o2 = app.create_order(a, limited).await;
    let r = app.checkout(id(&o2)).await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("an unpaid hold ran out recently"),
        "{}",
        r.json()
    );
    expire_hold(&app, id(&o), 301).await;
    app.checkout(id(&o2)).await.expect(200);
    // Now full for somebody else.
    let ob = app.create_order(b, limited).await;
    let r = app.checkout(id(&ob)).await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("full"));
    let ob_now: OrderBody = body_of(
        &app.get(&format!("/api/orders/{}", id(&ob)))
            .await
            .expect(200),
    );
    assert_eq!(ob_now.hold_until, None);

    // Inactive channel → 422; unknown order → 404.
    app.patch(
        &format!("/api/channels/{limited}"),
        json!({"active": false}),
    )
    .await
    .expect(200);
    app.checkout(id(&ob)).await.expect(422);
    app.checkout(999_999).await.expect(404);
}

/// One definition of a live member for seats: active or grace *and* inside the term plus the
/// channel's grace by database time. A membership past that window holds no seat even while
/// the sweep has not yet marked it expired (nor is its owner "already a member").
#[tokio::test]
async fn a_membership_past_term_and_grace_holds_no_seat_before_the_sweep() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_subscriber(40).await);
    let b = id(&app.create_subscriber(41).await);
    let limited = id(&app
        .create_channel(-40, json!({"seat_limit": 1, "grace_period_days": 2}))
        .await);
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": a, "channel_id": limited, "days": 30}),
        )
        .await
        .expect(201);
    let back_date = |days: i64| {
        let at = chrono::Utc::now() - chrono::Duration::days(days);
        json!({ "expires_at": at.to_rfc3339() })
    };

    // Live: the seat is taken.
    let ob = app.create_order(b, limited).await;
    let r = app.checkout(id(&ob)).await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("full"));

    // Past its term but inside the grace period (still `active`: no sweep ran): still live.
    let path = format!("/api/memberships/{}", id(&m));
    let patched = app.patch(&path, back_date(1)).await.expect(200);
    assert_eq!(patched["status"], "active");
    app.checkout(id(&ob)).await.expect(409);

    // Past term plus grace, still `active` because the sweep has not run: not live, so the
    // seat is free for b, and a, no longer a member, needs a seat like any buyer.
    let patched = app.patch(&path, back_date(3)).await.expect(200);
    assert_eq!(patched["status"], "active");
    let r = app.checkout(id(&ob)).await.expect(200);
    assert!(r["order"]["hold_until"].is_string(), "b holds the seat");
    let oa = app.create_order(a, limited).await;
    let r = app.checkout(id(&oa)).await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("full"));
}
