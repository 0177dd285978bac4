//! Payments and seats: a payment after an expired hold is refused and the newer buyer's seat
//! stays intact, a member renews on a full channel, and two orders racing checkout for the last
//! seat get one hold.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::{
    payments::apply::order_row,
    support::{
        bodies::{AppliedBody, OrderBody, body_of},
        helpers::{TestApp, id},
        race::race,
        rows::expire_hold,
    },
};

#[tokio::test]
async fn payment_after_an_expired_hold_is_refused_and_the_newer_buyers_seat_is_intact() {
    let app = TestApp::spawn().await;
    let late = id(&app.create_subscriber(3001).await);
    let newer = id(&app.create_subscriber(3002).await);
    let chan = id(&app.create_channel(-3001, json!({"seat_limit": 1})).await);

    let old = app.create_order(late, chan).await;
    app.checkout(id(&old)).await.expect(200);
    // The hold runs out (back-dated, no sleeping); the seat is free again.
    expire_hold(&app, id(&old), 1).await;
    let fresh = app.create_order(newer, chan).await;
    let held = app.checkout(id(&fresh)).await.expect(200);
    let held: OrderBody = body_of(&held["order"]);
    let hold_until = held.hold_until.expect("the newer buyer holds the seat");

    // The late payment of the old invoice cannot take it.
    let r: AppliedBody = body_of(&app.pay_order(&old, "pay_late").await.expect(200));
    assert_eq!(r.payment.outcome, "needs_review");
    assert_eq!(r.payment.reason.as_deref(), Some("hold_expired"));
    assert_eq!(app.count("memberships").await, 0);
    let fresh_now: OrderBody = body_of(&order_row(&app, id(&fresh)).await);
    assert_eq!(fresh_now.hold_until, Some(hold_until));
    // Checkout of the old order is refused too: it needs a new order.
    let r = app.checkout(id(&old)).await;
    assert_eq!(r.status.as_u16(), 409);

    let r: AppliedBody = body_of(&app.pay_order(&fresh, "pay_newer").await.expect(200));
    assert_eq!(r.payment.outcome, "applied");
    assert_eq!(r.membership.map(|m| m.subscriber_id), Some(newer));

    // Even with the seat free (no other buyer at all), an expired hold stays expired.
    let chan2 = id(&app.create_channel(-3002, json!({"seat_limit": 5})).await);
    let o = app.create_order(late, chan2).await;
    app.checkout(id(&o)).await.expect(200);
    expire_hold(&app, id(&o), 1).await;
    let r: AppliedBody = body_of(&app.pay_order(&o, "pay_late2").await.expect(200));
    assert_eq!(r.payment.reason.as_deref(), Some("hold_expired"));
}

#[tokio::test]
async fn a_member_renews_on_a_full_seat_limited_channel() {
    let app = TestApp::spawn().await;
    let member = id(&app.create_subscriber(4001).await);
    let outsider = id(&app.create_subscriber(4002).await);
    let chan = id(&app.create_channel(-4001, json!({"seat_limit": 1})).await);

    // Never held, seat free: the payment itself takes the seat.
    let first = app.create_order(member, chan).await;
    let r = app.pay_order(&first, "pay_1").await.expect(200);
    assert_eq!(r["payment"]["outcome"], "applied");
    let expires1: DateTime<Utc> = r["membership"]["expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The channel is full: an outsider's checkout is refused...
    let theirs = app.create_order(outsider, chan).await;
    let refused = app.checkout(id(&theirs)).await;
    assert_eq!(refused.status.as_u16(), 409);
    assert!(refused.json()["detail"].as_str().unwrap().contains("full"));
    // ...but the member's renewal needs no seat: approved without a hold, and applied.
    let renewal = app.create_order(member, chan).await;
    let c = app.checkout(id(&renewal)).await.expect(200);
    assert_eq!(c["order"]["hold_until"], Value::Null);
    let r = app.pay_order(&renewal, "pay_2").await.expect(200);
    assert_eq!(r["payment"]["outcome"], "applied");
    let expires2: DateTime<Utc> = r["membership"]["expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(expires2, expires1 + Duration::days(30));
    assert_eq!(app.count("memberships").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_orders_racing_checkout_for_the_last_seat_get_one_hold() {
    let app = Arc::new(TestApp::spawn().await);
    for round in 0..20i64 {
        let chan = id(&app
            .create_channel(-5000 - round, json!({"seat_limit": 2}))
            .await);
        // One seat is taken by a member; one is left.
        let member = id(&app.create_subscriber(50_000 + round * 10).await);
        app.post(
            "/api/memberships",
            json!({"subscriber_id": member, "channel_id": chan, "days": 30}),
        )
        .await
        .expect(201);
        let mut orders = Vec::new();
        for k in 1..=2 {
            let s = id(&app.create_subscriber(50_000 + round * 10 + k).await);
            orders.push(id(&app.create_order(s, chan).await));
        }
        let answers = race(2, |i| {
            let (app, o) = (app.clone(), orders[i]);
            async move { app.checkout(o).await }
        })
        .await;
        let mut statuses = Vec::new();
        for r in answers {
            if r.status.as_u16() == 409 {
                assert!(r.json()["detail"].as_str().unwrap().contains("full"));
            }
            statuses.push(r.status.as_u16());
        }
        statuses.sort();
        assert_eq!(statuses, vec![200, 409], "round {round}");
        assert_eq!(
            app.count(&format!(
                "orders WHERE channel_id = {chan} AND hold_until IS NOT NULL"
            ))
            .await,
            1,
            "round {round}: exactly one hold"
        );
    }
}
