//! A promo code's exact uses under lapses and races: a lapsed hold is taken again at checkout
//! only while the code has room, a lapsed use of a full code is kept for review (by a payment
//! and by a Stars pre-checkout alike), and racing buyers never get more paid orders than
//! `max_redemptions`.
//!
//! Holds are lapsed by back-dating `orders.promo_held_until`, never by sleeping; the concurrent
//! tests release their tasks together with a barrier, repeat for [`ROUNDS`] rounds, then count
//! the rows.

use std::sync::Arc;

use serde_json::{Value, json};
use subgate::payments::core::{Gateway, NormalizedPayment, apply_payment};

use crate::{
    catalog::promo_codes::{
        default_plan, lapse, new_code, order, paid_with, promo_held_until, promo_refusal,
        subscribers,
    },
    payments::telegram_door::{payment_update, pre_checkout_update},
    support::{
        helpers::{TestApp, db_now, id, reference},
        race::race,
    },
};

const ROUNDS: usize = 6;

const BUYERS: usize = 20;

// ---- lapsed holds ----

#[tokio::test]
async fn a_lapsed_use_is_taken_again_at_checkout_while_the_code_has_room() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let subs = subscribers(&app, 100, 2).await;
    let code = id(&new_code(
        &app,
        json!({"code": "ROOM", "percent_off": 10, "max_redemptions": 1}),
    )
    .await);
    let a = order(&app, subs[0], plan, Some("ROOM")).await.expect(201);
    let held = promo_held_until(&app, id(&a))
        .await
        .expect("a new order holds its use");
    let now = db_now(&app).await;
    assert!(
        held > now + chrono::Duration::seconds(290) && held <= now + chrono::Duration::seconds(300),
        "held for HOLD_SECS: {held} vs {now}"
    );
    lapse(&app, id(&a)).await;
    let c = app
        .get(&format!("/api/promo-codes/{code}"))
        .await
        .expect(200);
    assert_eq!(c["held"], 0, "a lapsed use counts no more");
    // Checkout takes it again for HOLD_SECS; a second checkout does not extend it.
    app.checkout(id(&a)).await.expect(200);
    let again = promo_held_until(&app, id(&a)).await.unwrap();
    assert!(again > db_now(&app).await + chrono::Duration::seconds(290));
    app.checkout(id(&a)).await.expect(200);
    assert_eq!(promo_held_until(&app, id(&a)).await, Some(again));
    // So the code is full again.
    assert!(promo_refusal(&order(&app, subs[1], plan, Some("ROOM")).await).contains("used up"));
    // A lapsed order paid while the code has room is applied (no checkout needed).
    lapse(&app, id(&a)).await;
    let paid = app.pay_order(&a, "pay_a").await.expect(200);
    assert_eq!(paid["payment"]["outcome"], "applied", "{paid}");
    assert_eq!(promo_held_until(&app, id(&a)).await, None);
    let c = app
        .get(&format!("/api/promo-codes/{code}"))
        .await
        .expect(200);
    assert_eq!((&c["redemptions"], &c["held"]), (&json!(1), &json!(0)));
}

#[tokio::test]
async fn a_lapsed_use_is_refused_when_the_code_filled_up_and_its_payment_is_kept_for_review() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let subs = subscribers(&app, 100, 2).await;
    let code = id(&new_code(
        &app,
        json!({"code": "FULL", "percent_off": 10, "max_redemptions": 1}),
    )
    .await);
    let a = order(&app, subs[0], plan, Some("FULL")).await.expect(201);
    lapse(&app, id(&a)).await;
    let b = order(&app, subs[1], plan, Some("FULL")).await.expect(201);
    // Checkout of the lapsed order: 409, nothing written.
    let problem = app.checkout(id(&a)).await.expect(409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no longer available"),
        "{problem}"
    );
    assert!(promo_held_until(&app, id(&a)).await.unwrap() < db_now(&app).await);
    // Its payment arrives anyway: kept for review, nothing granted, the order stays pending.
    let late = app.pay_order(&a, "pay_a").await.expect(200);
    assert_eq!(late["payment"]["outcome"], "needs_review", "{late}");
    assert_eq!(late["payment"]["reason"], "promo_exhausted");
    assert_eq!(late["membership"], Value::Null);
    assert_eq!(
        app.get(&format!("/api/orders/{}", id(&a)))
            .await
            .expect(200)["status"],
        "pending"
    );
    assert_eq!(app.count("memberships").await, 0);
    // The holder pays at its price.
    let paid = app.pay_order(&b, "pay_b").await.expect(200);
    assert_eq!(paid["payment"]["outcome"], "applied");
    assert_eq!(paid_with(&app, code).await, 1);
    let c = app
        .get(&format!("/api/promo-codes/{code}"))
        .await
        .expect(200);
    assert_eq!(c["redemptions"], 1);
}

#[tokio::test]
async fn a_stars_pre_checkout_and_payment_of_a_lapsed_use_of_a_full_code_are_refused_for_review() {
    let app = TestApp::spawn().await;
    let chan = id(&app
        .create_channel(-1001, json!({"currency": "XTR", "price_minor": 250}))
        .await);
    let plan = default_plan(&app, chan).await;
    let (buyer_a, buyer_b) = (7001, 7002);
    let a_sub = id(&app.create_subscriber(buyer_a).await);
    let b_sub = id(&app.create_subscriber(buyer_b).await);
    new_code(
        &app,
        json!({"code": "STAR", "amount_off_minor": 50, "currency": "XTR", "max_redemptions": 1}),
    )
    .await;
    let a = order(&app, a_sub, plan, Some("STAR")).await.expect(201);
    assert_eq!(a["amount_minor"], 200);
    lapse(&app, id(&a)).await;
    order(&app, b_sub, plan, Some("STAR")).await.expect(201);

    let r = app
        .post_telegram_update(pre_checkout_update(
            "q_promo",
            buyer_a,
            &reference(&a),
            "XTR",
            200,
        ))
        .await;
    let answer = r.expect(200);
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(
        answer["error_message"],
        "This price is no longer available. Please start a new order."
    );
    let reason: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT reason FROM pre_checkout_decisions WHERE query_id = 'q_promo'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason.as_deref(), Some("promo_exhausted"));

    // Telegram charges anyway: needs_review (not refunded automatically), nothing granted.
    app.post_telegram_update(payment_update(
        "charge_a",
        buyer_a,
        &reference(&a),
        "XTR",
        200,
    ))
    .await
    .expect(200);
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason FROM payments WHERE external_id = 'charge_a'",
            &[],
        )
        .await
        .unwrap();
    let (outcome, reason): (String, Option<String>) = (row.get(0), row.get(1));
    assert_eq!(
        (outcome.as_str(), reason.as_deref()),
        ("needs_review", Some("promo_exhausted"))
    );
    // The core decides the same for a Stars payment handed to it directly.
    let applied = apply_payment(
        &app.state.db,
        NormalizedPayment {
            gateway: Gateway::TelegramStars,
            external_id: "charge_a2".into(),
            order_reference: reference(&a),
            amount_minor: 200,
            currency: "XTR".into(),
            paid_at: chrono::Utc::now(),
            payer_telegram_id: Some(buyer_a),
        },
    )
    .await
    .unwrap();
    assert_eq!(applied.payment.outcome.as_str(), "needs_review");
    assert_eq!(app.count("memberships").await, 0);
}

// ---- racing buyers ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_code_with_three_uses_raced_by_twenty_buyers_ends_with_exactly_three_paid_orders() {
    let app = Arc::new(TestApp::spawn().await);
    let subs = subscribers(&app, 1000, BUYERS).await;
    for round in 0..ROUNDS {
        let chan = id(&app.create_channel(-2000 - round as i64, json!({})).await);
        let plan = default_plan(&app, chan).await;
        let code = format!("RACE{round}");
        let code_id = id(&new_code(
            &app,
            json!({"code": code, "percent_off": 30, "max_redemptions": 3}),
        )
        .await);
        let results = race(BUYERS, |i| {
            let (app, code, sub) = (app.clone(), code.clone(), subs[i]);
            async move {
                let r = order(&app, sub, plan, Some(&code)).await;
                if r.status.as_u16() != 201 {
                    return (r.status.as_u16(), None);
                }
                let o = r.json();
                let paid = app
                    .pay_order(&o, &format!("pay_{round}_{sub}"))
                    .await
                    .expect(200);
                (
                    201,
                    Some(paid["payment"]["outcome"].as_str().unwrap().to_string()),
                )
            }
        })
        .await;
        let mut made = 0;
        for result in results {
            match result {
                (201, outcome) => {
                    made += 1;
                    assert_eq!(outcome.as_deref(), Some("applied"), "round {round}");
                }
                (status, _) => assert_eq!(status, 422, "round {round}"),
            }
        }
        assert_eq!(made, 3, "round {round}: three orders got the code");
        assert_eq!(paid_with(&app, code_id).await, 3, "round {round}");
        assert_eq!(
            app.count(&format!("memberships WHERE channel_id = {chan}"))
                .await,
            3,
            "round {round}: three buyers got access"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_lapsed_orders_paid_at_once_never_take_a_code_past_its_limit() {
    let app = Arc::new(TestApp::spawn().await);
    let subs = subscribers(&app, 1000, BUYERS).await;
    for round in 0..ROUNDS {
        let chan = id(&app.create_channel(-2000 - round as i64, json!({})).await);
        let plan = default_plan(&app, chan).await;
        let code = format!("LAPSE{round}");
        let code_id = id(&new_code(&app, json!({"code": code, "percent_off": 30})).await);
        let mut orders = Vec::new();
        for &sub in &subs {
            let o = order(&app, sub, plan, Some(&code)).await.expect(201);
            lapse(&app, id(&o)).await;
            orders.push(o);
        }
        app.patch(
            &format!("/api/promo-codes/{code_id}"),
            json!({"max_redemptions": 3}),
        )
        .await
        .expect(200);
        // Twenty payments of lapsed orders, and (odd rounds) checkouts of the same orders
        // racing them, all released together.
        let results = race(BUYERS * 2, |i| {
            // Even tasks pay order i / 2; odd ones check it out (in odd rounds).
            let (app, o) = (app.clone(), orders[i / 2].clone());
            async move {
                if i % 2 == 0 {
                    let r = app.pay_order(&o, &format!("pay_{round}_{}", id(&o))).await;
                    let v = r.expect(200);
                    Some((
                        v["payment"]["outcome"].as_str().unwrap().to_string(),
                        v["payment"]["reason"].as_str().map(str::to_string),
                    ))
                } else {
                    if round % 2 == 1 {
                        let status = app.checkout(id(&o)).await.status.as_u16();
                        assert!([200, 409].contains(&status), "checkout: {status}");
                    }
                    None
                }
            }
        })
        .await;
        let mut applied = 0;
        for result in results {
            match result {
                Some((outcome, _)) if outcome == "applied" => applied += 1,
                Some((outcome, reason)) => {
                    assert_eq!(
                        (outcome.as_str(), reason.as_deref()),
                        ("needs_review", Some("promo_exhausted")),
                        "round {round}"
                    );
                }
                None => {}
            }
        }
        assert!(applied <= 3, "round {round}: {applied} applied");
        assert_eq!(
            paid_with(&app, code_id).await,
            applied as i64,
            "round {round}"
        );
        // Checkouts may hold some uses for orders whose payment lost the race; never more than
        // the limit in all.
        let uses = app
            .count(&format!(
                "orders WHERE promo_code_id = {code_id} AND (status = 'paid'
                   OR (status = 'pending' AND promo_held_until > statement_timestamp()))"
            ))
            .await;
        assert!(uses <= 3, "round {round}: {uses} uses");
        if round % 2 == 0 {
            assert_eq!(applied, 3, "round {round}: payments alone fill the code");
        }
        assert_eq!(
            app.count(&format!("memberships WHERE channel_id = {chan}"))
                .await,
            applied as i64
        );
    }
}
