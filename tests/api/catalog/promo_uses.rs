//! What a promo code does to an order: discounts round down and never leave less than one unit,
//! each reason a code cannot be used is a 422 on `promo_code`, the per-buyer limit, a cancelled
//! order giving its use back, expiry by database time, and first-purchase codes.

use serde_json::{Value, json};

use crate::{
    catalog::promo_codes::{
        default_plan, lapse, new_code, order, paid_plan, plan, promo_held_until, promo_refusal,
        subscribers,
    },
    support::helpers::{TestApp, id, reference},
};

// ---- discounts ----

#[tokio::test]
async fn discounts_round_down_never_leave_less_than_one_unit_and_a_payment_pays_the_order_price() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let p19900 = default_plan(&app, chan).await;
    let p999 = paid_plan(&app, chan, 999, "UAH").await;
    let p1 = paid_plan(&app, chan, 1, "UAH").await;
    let stars = id(&app
        .create_channel(-1002, json!({"currency": "XTR", "price_minor": 1}))
        .await);
    let s1 = default_plan(&app, stars).await;
    let subs = subscribers(&app, 100, 12).await;
    for (code, body) in [
        ("P25", json!({"percent_off": 25})),
        ("P33", json!({"percent_off": 33})),
        ("P99", json!({"percent_off": 99})),
        ("P100", json!({"percent_off": 100})),
        (
            "A5000",
            json!({"amount_off_minor": 5000, "currency": "UAH"}),
        ),
        (
            "AALL",
            json!({"amount_off_minor": 1_000_000, "currency": "UAH"}),
        ),
        ("XTR5", json!({"amount_off_minor": 5, "currency": "XTR"})),
    ] {
        let mut b = body;
        b["code"] = json!(code);
        b["per_buyer_limit"] = json!(5);
        new_code(&app, b).await;
    }
    // (plan, code, list, discount, amount)
    let cases = [
        (p19900, "p25", 19900, 4975, 14925),
        (p999, "P33", 999, 329, 670),
        (p19900, "P99", 19900, 19701, 199),
        (p1, "P99", 1, 0, 1),
        (p19900, "P100", 19900, 19900, 0),
        (p1, "P100", 1, 1, 0),
        (p19900, "A5000", 19900, 5000, 14900),
        (p999, "AALL", 999, 998, 1),
        (p1, "AALL", 1, 0, 1),
        (s1, "XTR5", 1, 0, 1),
    ];
    for (i, (plan, code, list, discount, amount)) in cases.into_iter().enumerate() {
        let o = order(&app, subs[i], plan, Some(code)).await.expect(201);
        assert_eq!(
            (
                o["list_price_minor"].as_i64(),
                o["discount_minor"].as_i64(),
                o["amount_minor"].as_i64()
            ),
            (Some(list), Some(discount), Some(amount)),
            "{code} on {list}: {o}"
        );
        assert_eq!(o["plan_id"], plan);
        assert_eq!(o["promo_code"], code.to_uppercase());
    }
    // Without a code: the list price, no discount.
    let plain = order(&app, subs[10], p19900, None).await.expect(201);
    assert_eq!(
        (&plain["discount_minor"], &plain["promo_code"]),
        (&json!(0), &Value::Null)
    );
    // A code needs a plan.
    let r = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subs[10], "channel_id": chan, "promo_code": "P25"}),
        )
        .await;
    assert!(r.expect(422)["errors"]["promo_code"].is_string());

    // The payment pays the order's (discounted) price: the list price is an amount mismatch.
    let o = order(&app, subs[11], p19900, Some("P25")).await.expect(201);
    let wrong = app
        .post_signed_webhook(&crate::support::helpers::payment_event(
            "pay_list",
            &reference(&o),
            19900,
            "UAH",
        ))
        .await
        .expect(200);
    assert_eq!(wrong["payment"]["reason"], "amount_mismatch");
    let right = app.pay_order(&o, "pay_discounted").await.expect(200);
    assert_eq!(right["payment"]["outcome"], "applied", "{right}");
    assert_eq!(right["payment"]["amount_minor"], 14925);
    assert_eq!(promo_held_until(&app, id(&o)).await, None, "paid: no hold");
}

// ---- every refusal of a code ----

#[tokio::test]
async fn each_code_that_cannot_be_used_is_a_422_on_promo_code_with_its_reason() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let other = paid_plan(&app, chan, 5000, "UAH").await;
    let trial = plan_of_kind_trial(&app, chan).await;
    let usd_chan = id(&app
        .create_channel(-1002, json!({"currency": "USD", "price_minor": 500}))
        .await);
    let usd = default_plan(&app, usd_chan).await;
    let subs = subscribers(&app, 100, 4).await;
    new_code(
        &app,
        json!({"code": "OFF", "percent_off": 10, "active": false}),
    )
    .await;
    // A new code cannot be expired already; a change may end one.
    let old = new_code(&app, json!({"code": "OLD", "percent_off": 10})).await;
    app.patch(
        &format!("/api/promo-codes/{}", id(&old)),
        json!({"expires_at": "2020-01-01T00:00:00Z"}),
    )
    .await
    .expect(200);
    new_code(
        &app,
        json!({"code": "ONLYOTHER", "percent_off": 10, "plan_ids": [other]}),
    )
    .await;
    new_code(
        &app,
        json!({"code": "HRYVNIA", "amount_off_minor": 100, "currency": "UAH"}),
    )
    .await;
    new_code(
        &app,
        json!({"code": "ONE", "percent_off": 10, "max_redemptions": 1}),
    )
    .await;
    new_code(&app, json!({"code": "ANY", "percent_off": 10})).await;

    let cases = [
        (plan, "NOPE", "no such promo code"),
        (plan, "x", "no such promo code"),
        (plan, "OFF", "not active"),
        (plan, "old", "expired"),
        (plan, "ONLYOTHER", "does not apply to this plan"),
        (usd, "HRYVNIA", "this plan is sold in USD"),
        (trial, "ANY", "paid plans only"),
    ];
    for (plan, code, why) in cases {
        let msg = promo_refusal(&order(&app, subs[0], plan, Some(code)).await);
        assert!(msg.contains(why), "{code}: {msg:?} should say {why:?}");
    }
    order(&app, subs[0], other, Some("onlyother"))
        .await
        .expect(201);
    order(&app, subs[1], plan, Some("ONE")).await.expect(201);
    let msg = promo_refusal(&order(&app, subs[2], plan, Some("ONE")).await);
    assert!(msg.contains("used up"), "{msg}");
    order(&app, subs[1], plan, Some("ANY")).await.expect(201);
    let msg = promo_refusal(&order(&app, subs[1], plan, Some("ANY")).await);
    assert!(msg.contains("already used"), "{msg}");
    // Nothing was made by a refusal.
    assert_eq!(app.count("orders").await, 3);
}

async fn plan_of_kind_trial(app: &TestApp, channel: i64) -> i64 {
    plan(app, channel, "trial", 0, "UAH").await
}

#[tokio::test]
async fn a_buyer_uses_a_code_at_most_per_buyer_limit_times_and_a_cancel_gives_a_use_back() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let subs = subscribers(&app, 100, 2).await;
    let code = id(&new_code(
        &app,
        json!({"code": "TWICE", "percent_off": 10, "per_buyer_limit": 2}),
    )
    .await);
    let first = order(&app, subs[0], plan, Some("TWICE")).await.expect(201);
    app.pay_order(&first, "pay_1").await.expect(200);
    let second = order(&app, subs[0], plan, Some("TWICE")).await.expect(201);
    // Paid + holding = the limit.
    let msg = promo_refusal(&order(&app, subs[0], plan, Some("TWICE")).await);
    assert!(msg.contains("2 times"), "{msg}");
    // Another buyer has their own share.
    order(&app, subs[1], plan, Some("TWICE")).await.expect(201);
    // A cancelled order gives its use back at once.
    let cancelled = app
        .post(&format!("/api/orders/{}/cancel", id(&second)), Value::Null)
        .await
        .expect(200);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(promo_held_until(&app, id(&second)).await, None);
    let third = order(&app, subs[0], plan, Some("TWICE")).await.expect(201);
    // A pending order whose hold lapsed counts no more.
    lapse(&app, id(&third)).await;
    order(&app, subs[0], plan, Some("TWICE")).await.expect(201);
    let c = app
        .get(&format!("/api/promo-codes/{code}"))
        .await
        .expect(200);
    assert_eq!(
        (&c["redemptions"], &c["held"]),
        (&json!(1), &json!(2)),
        "{c}"
    );
}

#[tokio::test]
async fn a_cancelled_order_gives_the_last_use_back() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let subs = subscribers(&app, 100, 2).await;
    new_code(
        &app,
        json!({"code": "LAST", "percent_off": 10, "max_redemptions": 1}),
    )
    .await;
    let a = order(&app, subs[0], plan, Some("LAST")).await.expect(201);
    assert!(promo_refusal(&order(&app, subs[1], plan, Some("LAST")).await).contains("used up"));
    app.post(&format!("/api/orders/{}/cancel", id(&a)), Value::Null)
        .await
        .expect(200);
    let b = order(&app, subs[1], plan, Some("LAST")).await.expect(201);
    assert_eq!(b["promo_code"], "LAST");
    // The cancelled order's payment, arriving anyway, is kept for review as before.
    let late = app.pay_order(&a, "pay_late").await.expect(200);
    assert_eq!(late["payment"]["reason"], "order_cancelled");
}

#[tokio::test]
async fn an_expired_code_refuses_new_orders_by_database_time_but_an_order_made_keeps_its_price() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let subs = subscribers(&app, 100, 2).await;
    let code = id(&new_code(
        &app,
        json!({"code": "SOON", "percent_off": 50, "expires_at": "2999-01-01T00:00:00Z"}),
    )
    .await);
    let made = order(&app, subs[0], plan, Some("SOON")).await.expect(201);
    app.db()
        .await
        .execute(
            "UPDATE promo_codes SET expires_at = statement_timestamp() - interval '1 second'
             WHERE id = $1",
            &[&code],
        )
        .await
        .unwrap();
    assert!(promo_refusal(&order(&app, subs[1], plan, Some("SOON")).await).contains("expired"));
    let paid = app.pay_order(&made, "pay_made").await.expect(200);
    assert_eq!(paid["payment"]["outcome"], "applied", "{paid}");
    assert_eq!(paid["payment"]["amount_minor"], 9950);
}

#[tokio::test]
async fn a_first_purchase_code_is_only_for_buyers_who_never_paid_for_the_plans_channels() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let elsewhere = id(&app.create_channel(-1002, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let cheap = paid_plan(&app, chan, 9900, "UAH").await;
    let subs = subscribers(&app, 100, 3).await;
    new_code(
        &app,
        json!({"code": "WELCOME", "percent_off": 20, "first_purchase_only": true}),
    )
    .await;
    // A buyer who paid for this channel (by any of its plans) before is refused.
    let bought = app.create_order(subs[0], chan).await;
    app.pay_order(&bought, "pay_before").await.expect(200);
    let msg = promo_refusal(&order(&app, subs[0], cheap, Some("WELCOME")).await);
    assert!(msg.contains("first purchase"), "{msg}");
    // An unpaid order is no purchase, nor is a paid order of another channel.
    app.create_order(subs[1], chan).await;
    let other = app.create_order(subs[1], elsewhere).await;
    app.pay_order(&other, "pay_other").await.expect(200);
    order(&app, subs[1], plan, Some("WELCOME"))
        .await
        .expect(201);
    order(&app, subs[2], cheap, Some("WELCOME"))
        .await
        .expect(201);
}
