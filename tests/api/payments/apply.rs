//! Door 1 (signed webhook) and the payment core: exactly-once under concurrent redelivery, a
//! repeat answered while the pair lock is held, a payment activating its membership, `paid_at`
//! clamped, every failed check kept for review, payer mismatches and Stars refunds, and the
//! payments read API. The door's signature checks are in `signed_webhook`; seats in `seats`.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use subgate::payments::core::{NormalizedPayment, apply_payment};

use crate::support::{
    bodies::{AppliedBody, EventBody, ListBody, OrderBody, PaymentBody, body_of},
    helpers::{TestApp, WEBHOOK_SECRET, db_now, id, payment_event, reference, signed_headers},
    race::race,
    rows::expire_hold,
};

/// Every membership row and the number of membership events, to show nothing changed.
async fn membership_state(app: &TestApp) -> (Vec<(i64, String, DateTime<Utc>)>, i64) {
    let rows = app
        .db()
        .await
        .query(
            "SELECT id, status, expires_at FROM memberships ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let members = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    (members, app.count("membership_events").await)
}

pub(crate) async fn order_row(app: &TestApp, order_id: i64) -> Value {
    app.get(&format!("/api/orders/{order_id}"))
        .await
        .expect(200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_deliveries_of_one_payment_apply_it_once() {
    let app = Arc::new(TestApp::spawn().await);
    let sub = id(&app.create_subscriber(1001).await);
    let chan = id(&app.create_channel(-1001, json!({})).await);
    for round in 0..20 {
        let order = app.create_order(sub, chan).await;
        let payment_id = format!("pay_round_{round}");
        let body = payment_event(&payment_id, &reference(&order), 19900, "UAH").to_string();
        // One delivery retried ten times: same webhook id, same signature, same body.
        let headers = signed_headers(
            WEBHOOK_SECRET,
            &format!("msg_{round}"),
            Utc::now().timestamp(),
            &body,
        );
        let answers = race(10, |_| {
            let (app, body, headers) = (app.clone(), body.clone(), headers.clone());
            async move { app.post_webhook_raw(&body, &headers).await }
        })
        .await;
        let mut fresh = 0;
        let mut payment_ids = Vec::new();
        for r in answers {
            let v = r.expect(200);
            if v["duplicate"] == false {
                fresh += 1;
            } else {
                assert_eq!(v["duplicate"], true);
            }
            assert_eq!(v["payment"]["outcome"], "applied", "round {round}: {v}");
            assert_eq!(v["membership"]["status"], "active");
            payment_ids.push(v["payment"]["id"].as_i64().unwrap());
        }
        assert_eq!(
            fresh, 1,
            "round {round}: exactly one delivery is not a duplicate"
        );
        payment_ids.dedup();
        assert_eq!(payment_ids.len(), 1, "every answer names the same payment");
        let pid = payment_ids[0];
        assert_eq!(
            app.count(&format!("payments WHERE external_id = '{payment_id}'"))
                .await,
            1
        );
        assert_eq!(
            app.count(&format!("membership_events WHERE payment_id = {pid}"))
                .await,
            1,
            "round {round}: one extension"
        );
        assert_eq!(order_row(&app, id(&order)).await["status"], "paid");
    }
    assert_eq!(app.count("payments").await, 20);
    assert_eq!(app.count("membership_events").await, 20);
    // Twenty periods of 30 days: the first from when it was applied, each later one from the
    // previous expiry.
    let row = app
        .db()
        .await
        .query_one(
            "SELECT m.expires_at,
                    (SELECT expires_at_after FROM membership_events ORDER BY id LIMIT 1),
                    (SELECT created_at FROM payments ORDER BY id LIMIT 1)
             FROM memberships m",
            &[],
        )
        .await
        .unwrap();
    let (expires, first_term_end, first_stored): (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>) =
        (row.get(0), row.get(1), row.get(2));
    let first_start = first_term_end - Duration::days(30);
    assert!(
        first_stored <= first_start && first_start - first_stored < Duration::seconds(10),
        "the first term starts when the first payment was applied ({first_stored}), not {first_start}"
    );
    assert_eq!(expires, first_start + Duration::days(600));
}

/// A re-delivery of a stored payment is answered from the stored row without the pair lock:
/// while another transaction holds `pg_advisory_xact_lock(subscriber, channel)` (a renewal, a
/// sweep batch, a staff change of that pair), repeats — faithful or not — still answer at once
/// with `duplicate: true` and the stored payment, and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_delivery_answers_while_the_pair_lock_is_held() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1201).await);
    let chan = id(&app.create_channel(-1201, json!({})).await);
    let order = app.create_order(sub, chan).await;
    let body = payment_event("pay_locked", &reference(&order), 19900, "UAH");
    let first = app.post_signed_webhook(&body).await.expect(200);
    assert_eq!(first["duplicate"], false);
    assert_eq!(first["payment"]["outcome"], "applied");
    let before = membership_state(&app).await;
    let effects = app.count("effects").await;

    let mut holder = app.db().await;
    let lock = holder.transaction().await.unwrap();
    lock.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&(sub as i32), &(chan as i32)],
    )
    .await
    .unwrap();

    let mut changed = body.clone();
    changed["amount_minor"] = json!(1);
    for repeat in [&body, &changed] {
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            app.post_signed_webhook(repeat),
        )
        .await
        .expect("a repeat delivery waited for the pair lock")
        .expect(200);
        assert_eq!(answer["duplicate"], true, "{answer}");
        assert_eq!(answer["payment"], first["payment"]);
        assert_eq!(answer["membership"], first["membership"]);
    }
    lock.rollback().await.unwrap();

    assert_eq!(membership_state(&app).await, before);
    assert_eq!(app.count("payments").await, 1);
    assert_eq!(app.count("effects").await, effects);
}

#[tokio::test]
async fn a_payment_activates_the_membership_and_a_repeat_answers_the_stored_payment() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1005).await);
    let chan = id(&app
        .create_channel(-1005, json!({"billing_period_days": 30}))
        .await);
    let order = app.create_order(sub, chan).await;
    let paid_at = "2020-01-01T00:00:00Z";
    let mut body = payment_event("pay_a", &reference(&order), 19900, "UAH");
    body["paid_at"] = json!(paid_at);
    let before = db_now(&app).await;
    let r = app.post_signed_webhook(&body).await.expect(200);
    let after = db_now(&app).await;
    let applied: AppliedBody = body_of(&r);
    assert!(!applied.duplicate);
    let p = &applied.payment;
    assert_eq!(p.gateway, "acme");
    assert_eq!(p.external_id, "pay_a");
    assert_eq!(p.order_id, Some(id(&order)));
    assert_eq!(p.subscriber_id, Some(sub));
    assert_eq!(p.channel_id, Some(chan));
    assert_eq!(p.amount_minor, 19900);
    assert_eq!(p.currency, "UAH");
    assert_eq!(p.outcome, "applied");
    assert_eq!(p.reason, None);
    let m = applied.membership.as_ref().expect("a membership");
    assert_eq!(m.status, "active");
    assert_eq!(m.subscriber_id, sub);
    // GREATEST(no current expiry, database now) + 30 days: the term starts when the payment
    // is applied, however long ago the gateway says it was paid.
    let expires: DateTime<Utc> = m.expires_at.parse().unwrap();
    assert!(
        before + Duration::days(30) <= expires && expires <= after + Duration::days(30),
        "expires_at {expires} is 30 days after the payment was applied ({before}..{after})"
    );
    assert_eq!(
        p.paid_at.parse::<DateTime<Utc>>().unwrap(),
        paid_at.parse::<DateTime<Utc>>().unwrap(),
        "paid_at is kept as reported"
    );
    let o: OrderBody = body_of(&order_row(&app, id(&order)).await);
    assert_eq!(o.status, "paid");
    assert_eq!(
        o.paid_at
            .expect("paid_at")
            .parse::<DateTime<Utc>>()
            .unwrap(),
        paid_at.parse::<DateTime<Utc>>().unwrap()
    );

    // A repeat with other fields answers the stored payment and changes nothing.
    let before = membership_state(&app).await;
    let mut repeat = body.clone();
    repeat["amount_minor"] = json!(1);
    let r2 = app.post_signed_webhook(&repeat).await.expect(200);
    assert_eq!(r2["duplicate"], true);
    assert_eq!(r2["payment"], r["payment"]);
    assert_eq!(r2["membership"], r["membership"]);
    assert_eq!(membership_state(&app).await, before);
    assert_eq!(app.count("payments").await, 1);

    let events: ListBody<EventBody> = body_of(
        &app.get(&format!("/api/memberships/{}/events", m.id))
            .await
            .expect(200),
    );
    let items = &events.items;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].cause, "payment");
    assert_eq!(items[0].payment_id, Some(p.id));
}

#[tokio::test]
async fn a_future_paid_at_is_clamped_to_database_now() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1006).await);
    let chan = id(&app
        .create_channel(-1006, json!({"billing_period_days": 30}))
        .await);
    let order = app.create_order(sub, chan).await;
    let mut body = payment_event("pay_f", &reference(&order), 19900, "UAH");
    body["paid_at"] = json!((Utc::now() + Duration::days(10)).to_rfc3339());
    let before = db_now(&app).await;
    let r = app.post_signed_webhook(&body).await.expect(200);
    let after = db_now(&app).await;
    let paid: DateTime<Utc> = r["payment"]["paid_at"].as_str().unwrap().parse().unwrap();
    assert!(
        before <= paid && paid <= after,
        "paid_at {paid} clamped into [{before}, {after}]"
    );
    let expires: DateTime<Utc> = r["membership"]["expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        expires <= after + Duration::days(30),
        "term starts now, not in 10 days"
    );
    assert!(expires >= before + Duration::days(30));
    let o = order_row(&app, id(&order)).await;
    assert_eq!(o["paid_at"], r["payment"]["paid_at"]);
}

/// Sends one payment and checks it was kept with `reason`, outcome `needs_review`, and that no
/// membership, event or the order changed.
async fn expect_refused(
    app: &TestApp,
    body: Value,
    order_id: Option<i64>,
    reason: &str,
) -> AppliedBody {
    let before = membership_state(app).await;
    let order_before = match order_id {
        Some(o) => Some(order_row(app, o).await),
        None => None,
    };
    let payments_before = app.count("payments").await;
    let r = app.post_signed_webhook(&body).await.expect(200);
    let applied: AppliedBody = body_of(&r);
    assert!(!applied.duplicate, "{reason}");
    assert_eq!(applied.payment.outcome, "needs_review", "{reason}: {r}");
    assert_eq!(applied.payment.reason.as_deref(), Some(reason), "{r}");
    assert_eq!(
        app.count("payments").await,
        payments_before + 1,
        "{reason}: kept"
    );
    assert_eq!(
        membership_state(app).await,
        before,
        "{reason}: memberships untouched"
    );
    if let (Some(o), Some(before)) = (order_id, order_before) {
        assert_eq!(order_row(app, o).await, before, "{reason}: order untouched");
    }
    applied
}

#[tokio::test]
async fn each_failed_check_keeps_the_payment_for_review_and_grants_nothing() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(1010).await);
    let other = id(&app.create_subscriber(1011).await);
    let chan = id(&app.create_channel(-1010, json!({})).await);
    // The buyer already has a membership, so "untouched" is checked on a real row.
    app.post(
        "/api/memberships",
        json!({"subscriber_id": sub, "channel_id": chan, "days": 5}),
    )
    .await
    .expect(201);

    // unknown_order: no locks, no order fields; the reference is kept for reconciliation.
    let r = expect_refused(
        &app,
        payment_event("pay_unknown", "ord_nope", 19900, "UAH"),
        None,
        "unknown_order",
    )
    .await;
    assert_eq!(r.payment.order_id, None);
    assert_eq!(r.payment.subscriber_id, None);
    assert_eq!(r.payment.order_reference.as_deref(), Some("ord_nope"));
    assert!(r.membership.is_none());

    // order_cancelled
    let order = app.create_order(sub, chan).await;
    app.post(&format!("/api/orders/{}/cancel", id(&order)), Value::Null)
        .await
        .expect(200);
    let r = expect_refused(
        &app,
        payment_event("pay_cancelled", &reference(&order), 19900, "UAH"),
        Some(id(&order)),
        "order_cancelled",
    )
    .await;
    assert_eq!(r.payment.order_id, Some(id(&order)));
    assert_eq!(
        r.membership.as_ref().map(|m| m.subscriber_id),
        Some(sub),
        "the current membership, unchanged"
    );

    // currency_mismatch (checked before the amount)
    let order = app.create_order(sub, chan).await;
    expect_refused(
        &app,
        payment_event("pay_currency", &reference(&order), 100, "EUR"),
        Some(id(&order)),
        "currency_mismatch",
    )
    .await;

    // amount_mismatch
    expect_refused(
        &app,
        payment_event("pay_amount", &reference(&order), 19899, "UAH"),
        Some(id(&order)),
        "amount_mismatch",
    )
    .await;

    // already_paid: another payment paid the order.
    app.pay_order(&order, "pay_first").await.expect(200);
    expect_refused(
        &app,
        payment_event("pay_second", &reference(&order), 19900, "UAH"),
        Some(id(&order)),
        "already_paid",
    )
    .await;

    // channel_inactive
    let order = app.create_order(other, chan).await;
    app.patch(&format!("/api/channels/{chan}"), json!({"active": false}))
        .await
        .expect(200);
    expect_refused(
        &app,
        payment_event("pay_inactive", &reference(&order), 19900, "UAH"),
        Some(id(&order)),
        "channel_inactive",
    )
    .await;

    // hold_expired: checkout held a seat, the hold ran out; seats are free again.
    let limited = id(&app.create_channel(-1011, json!({"seat_limit": 1})).await);
    let order = app.create_order(other, limited).await;
    app.checkout(id(&order)).await.expect(200);
    expire_hold(&app, id(&order), 1).await;
    expect_refused(
        &app,
        payment_event("pay_hold", &reference(&order), 19900, "UAH"),
        Some(id(&order)),
        "hold_expired",
    )
    .await;

    // no_seat: never held, and the only seat is taken by a member.
    app.post(
        "/api/memberships",
        json!({"subscriber_id": sub, "channel_id": limited, "days": 5}),
    )
    .await
    .expect(201);
    let order = app.create_order(other, limited).await;
    expect_refused(
        &app,
        payment_event("pay_seat", &reference(&order), 19900, "UAH"),
        Some(id(&order)),
        "no_seat",
    )
    .await;

    // Staff find them all.
    let review: ListBody<PaymentBody> = body_of(
        &app.get("/api/payments?outcome=needs_review&limit=200")
            .await
            .expect(200),
    );
    assert_eq!(review.items.len(), 8);
}

fn stars(reference: &str, external_id: &str, amount: i64, payer: Option<i64>) -> NormalizedPayment {
    NormalizedPayment {
        gateway: "telegram_stars".into(),
        external_id: external_id.into(),
        order_reference: reference.into(),
        amount_minor: amount,
        currency: "XTR".into(),
        paid_at: Utc::now(),
        payer_telegram_id: payer,
    }
}

#[tokio::test]
async fn payer_mismatch_and_stars_refunds_through_the_core() {
    let app = TestApp::spawn().await;
    let buyer = id(&app.create_subscriber(2001).await);
    let member = id(&app.create_subscriber(2002).await);
    let chan = id(&app
        .create_channel(
            -2001,
            json!({"currency": "XTR", "price_minor": 50, "seat_limit": 1}),
        )
        .await);

    // payer_mismatch: the payer is not the order's subscriber → needs review (not a refund).
    let order = app.create_order(buyer, chan).await;
    let before = membership_state(&app).await;
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&order), "ch_1", 50, Some(9999)),
    )
    .await
    .unwrap();
    assert!(!a.duplicate);
    assert_eq!(a.payment.outcome, "needs_review");
    assert_eq!(a.payment.reason.map(|r| r.as_str()), Some("payer_mismatch"));
    assert!(a.membership.is_none());
    assert_eq!(membership_state(&app).await, before);
    let payer: Option<String> = app
        .db()
        .await
        .query_one("SELECT payer FROM payments WHERE id = $1", &[&a.payment.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(payer.as_deref(), Some("9999"));

    // hold_expired → refund_pending.
    app.checkout(id(&order)).await.expect(200);
    expire_hold(&app, id(&order), 1).await;
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&order), "ch_2", 50, Some(2001)),
    )
    .await
    .unwrap();
    assert_eq!(a.payment.outcome, "refund_pending");
    assert_eq!(a.payment.reason.map(|r| r.as_str()), Some("hold_expired"));
    assert_eq!(membership_state(&app).await, before);

    // The right payer on a fresh order with a free seat → applied.
    let paid = app.create_order(member, chan).await;
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&paid), "ch_3", 50, Some(2002)),
    )
    .await
    .unwrap();
    assert_eq!(a.payment.outcome, "applied");
    assert_eq!(a.membership.as_ref().unwrap().status, "active");
    let before = membership_state(&app).await;

    // already_paid → refund_pending.
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&paid), "ch_4", 50, Some(2002)),
    )
    .await
    .unwrap();
    assert_eq!(a.payment.outcome, "refund_pending");
    assert_eq!(a.payment.reason.map(|r| r.as_str()), Some("already_paid"));

    // no_seat → refund_pending (the member holds the only seat).
    let late = app.create_order(buyer, chan).await;
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&late), "ch_5", 50, Some(2001)),
    )
    .await
    .unwrap();
    assert_eq!(a.payment.outcome, "refund_pending");
    assert_eq!(a.payment.reason.map(|r| r.as_str()), Some("no_seat"));

    // Other failures of a Stars payment need review.
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&late), "ch_6", 49, Some(2001)),
    )
    .await
    .unwrap();
    assert_eq!(a.payment.outcome, "needs_review");
    assert_eq!(
        a.payment.reason.map(|r| r.as_str()),
        Some("amount_mismatch")
    );

    // A duplicate charge id answers the stored payment.
    let a = apply_payment(
        &app.state.db,
        stars(&reference(&paid), "ch_3", 50, Some(2002)),
    )
    .await
    .unwrap();
    assert!(a.duplicate);
    assert_eq!(a.payment.outcome, "applied");
    assert_eq!(a.membership.as_ref().unwrap().subscriber_id as i64, member);
    assert_eq!(membership_state(&app).await, before);
    assert_eq!(
        app.count("payments WHERE outcome = 'refund_pending'").await,
        3
    );
}

#[tokio::test]
async fn payments_read_api_filters_and_pages() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_subscriber(6001).await);
    let b = id(&app.create_subscriber(6002).await);
    let chan = id(&app.create_channel(-6001, json!({})).await);
    let oa = app.create_order(a, chan).await;
    let ob = app.create_order(b, chan).await;
    app.pay_order(&oa, "p1").await.expect(200);
    app.pay_order(&oa, "p2").await.expect(200); // already_paid
    app.pay_order(&ob, "p3").await.expect(200);
    app.post_signed_webhook(&payment_event("p4", "ord_unknown", 1, "UAH"))
        .await
        .expect(200);

    let all = app.get("/api/payments").await.expect(200);
    let items = all["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    let ids: Vec<i64> = items.iter().map(id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ordered by id");

    let page = app.get("/api/payments?limit=3").await.expect(200);
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert_eq!(page["next_after"], ids[2]);
    let rest = app
        .get(&format!("/api/payments?limit=3&after={}", ids[2]))
        .await
        .expect(200);
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after"], Value::Null);

    let ext = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["external_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ext(&app.get("/api/payments?outcome=applied").await.expect(200)),
        ["p1", "p3"]
    );
    assert_eq!(
        ext(&app
            .get("/api/payments?outcome=needs_review")
            .await
            .expect(200)),
        ["p2", "p4"]
    );
    assert_eq!(
        ext(&app
            .get(&format!("/api/payments?order_id={}", id(&oa)))
            .await
            .expect(200)),
        ["p1", "p2"]
    );
    assert_eq!(
        ext(&app
            .get(&format!("/api/payments?subscriber_id={b}"))
            .await
            .expect(200)),
        ["p3"]
    );
    assert_eq!(
        app.get("/api/payments?outcome=lost").await.status.as_u16(),
        422
    );
    assert_eq!(
        app.get("/api/payments?colour=red").await.status.as_u16(),
        400
    );
    assert_eq!(app.get("/api/payments?limit=0").await.status.as_u16(), 422);

    let mut one = app
        .get(&format!("/api/payments/{}", ids[0]))
        .await
        .expect(200);
    // One payment is the list's item and the refund staff asked for of it (none here).
    assert_eq!(
        one.as_object_mut().unwrap().remove("refund"),
        Some(Value::Null)
    );
    assert_eq!(one, items[0]);
    assert_eq!(app.get("/api/payments/999999").await.status.as_u16(), 404);
    assert_eq!(app.get("/api/payments/abc").await.status.as_u16(), 404);
    let anonymous = app
        .request(
            axum::http::Method::GET,
            "/api/payments",
            &[],
            axum::body::Body::empty(),
        )
        .await;
    assert_eq!(anonymous.status.as_u16(), 401);
}
