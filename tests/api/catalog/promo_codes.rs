//! Promo codes: the staff API (create, read, list, change; every 422 and 409), the discount an
//! order gets, and the exact uses — racing buyers never get more paid orders than
//! `max_redemptions`, a buyer never more than `per_buyer_limit`, a lapsed hold is taken again
//! only while the code has room, a cancelled order gives its use back.
//!
//! Plans other than a channel's default one are inserted with SQL. Holds are lapsed by
//! back-dating `orders.promo_held_until`, never by sleeping; the concurrent tests release their
//! tasks together with a barrier, repeat for [`ROUNDS`] rounds, then count the rows.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use subgate::payments::core::{Gateway, NormalizedPayment, apply_payment};
use tokio::sync::Barrier;

use crate::payments::telegram_door::{payment_update, pre_checkout_update};
use crate::support::bodies::{PromoCodeBody, body_of};
use crate::support::helpers::{NewPlan, TestApp, TestResponse, db_now, id, reference};

const ROUNDS: usize = 6;
const BUYERS: usize = 20;

// ---- fixtures ----

/// A paid plan of `channel` at `price` in `currency` for 30 days; returns its id.
async fn paid_plan(app: &TestApp, channel: i64, price: i64, currency: &str) -> i64 {
    plan(app, channel, "paid", price, currency).await
}

async fn plan(app: &TestApp, channel: i64, kind: &str, price: i64, currency: &str) -> i64 {
    let period = if kind == "trial" { 7 } else { 30 };
    let plan = NewPlan {
        title: "Extra plan",
        kind,
        price_minor: price,
        currency,
        period_days: Some(period),
        position: 0,
    };
    app.insert_plan(plan, &[channel]).await
}

/// Channel `channel`'s default plan.
async fn default_plan(app: &TestApp, channel: i64) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT id FROM plans WHERE default_of = $1",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get(0)
}

/// Creates a code; returns its JSON.
async fn new_code(app: &TestApp, body: Value) -> Value {
    app.post("/api/promo-codes", body).await.expect(201)
}

/// `POST /api/orders` of `plan` for `sub` with `code`.
async fn order(app: &TestApp, sub: i64, plan: i64, code: Option<&str>) -> TestResponse {
    let mut body = json!({"subscriber_id": sub, "plan_id": plan});
    if let Some(code) = code {
        body["promo_code"] = json!(code);
    }
    app.post("/api/orders", body).await
}

/// The 422 message on `promo_code` of a refused order.
#[track_caller]
fn promo_refusal(r: &TestResponse) -> String {
    let body = r.expect(422);
    body["errors"]["promo_code"]
        .as_str()
        .unwrap_or_else(|| panic!("no promo_code error: {body}"))
        .to_string()
}

/// Moves an order's promo hold one second into the past (the same as waiting `HOLD_SECS`).
async fn lapse(app: &TestApp, order_id: i64) {
    let n = app
        .db()
        .await
        .execute(
            "UPDATE orders SET promo_held_until = statement_timestamp() - interval '1 second'
             WHERE id = $1 AND promo_held_until IS NOT NULL",
            &[&order_id],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "order {order_id} held no use to lapse");
}

async fn promo_held_until(app: &TestApp, order_id: i64) -> Option<chrono::DateTime<chrono::Utc>> {
    app.db()
        .await
        .query_one(
            "SELECT promo_held_until FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0)
}

/// Paid orders using code `code_id`, counted in the database.
async fn paid_with(app: &TestApp, code_id: i64) -> i64 {
    app.count(&format!(
        "orders WHERE promo_code_id = {code_id} AND status = 'paid'"
    ))
    .await
}

async fn subscribers(app: &TestApp, first_telegram_id: i64, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(id(&app
            .create_subscriber(first_telegram_id + i as i64)
            .await));
    }
    ids
}

// ---- the staff API ----

#[tokio::test]
async fn promo_codes_are_created_read_listed_and_changed() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let other = paid_plan(&app, chan, 9900, "UAH").await;

    let created = new_code(
        &app,
        json!({"code": "spring-25", "percent_off": 25, "max_redemptions": 10,
               "expires_at": "2030-06-01T00:00:00+02:00", "plan_ids": [plan]}),
    )
    .await;
    let c: PromoCodeBody = body_of(&created);
    assert_eq!(c.code, "SPRING-25", "stored upper case");
    assert_eq!(c.percent_off, Some(25));
    assert_eq!(c.amount_off_minor, None);
    assert_eq!(c.currency, None);
    assert_eq!(c.plan_ids, Some(vec![plan]));
    assert_eq!(c.max_redemptions, Some(10));
    assert_eq!(c.per_buyer_limit, 1, "the default");
    assert_eq!(c.expires_at.as_deref(), Some("2030-05-31T22:00:00Z"));
    assert!(!c.first_purchase_only);
    assert!(c.active);
    assert_eq!((c.redemptions, c.held), (0, 0));

    let got = app
        .get(&format!("/api/promo-codes/{}", c.id))
        .await
        .expect(200);
    assert_eq!(got, created);
    app.get("/api/promo-codes/999999").await.expect(404);

    let amount = new_code(
        &app,
        json!({"code": "FIFTY", "amount_off_minor": 5000, "currency": "UAH",
               "first_purchase_only": true, "per_buyer_limit": 2, "active": false}),
    )
    .await;
    let xtr = new_code(
        &app,
        json!({"code": "STARS", "amount_off_minor": 10, "currency": "XTR"}),
    )
    .await;

    // Lists by id, with paging and filters.
    let all = app.get("/api/promo-codes").await.expect(200);
    let ids: Vec<i64> = all["items"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(ids, vec![c.id, id(&amount), id(&xtr)]);
    let page = app.get("/api/promo-codes?limit=2").await.expect(200);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_after"], id(&amount));
    let rest = app
        .get(&format!("/api/promo-codes?after={}", id(&amount)))
        .await
        .expect(200);
    assert_eq!(rest["items"][0]["id"], id(&xtr));
    assert_eq!(rest["next_after"], Value::Null);
    let inactive = app.get("/api/promo-codes?active=false").await.expect(200);
    assert_eq!(inactive["items"].as_array().unwrap().len(), 1);
    assert_eq!(inactive["items"][0]["code"], "FIFTY");
    // For a plan: its own codes and the ones for every plan of its currency.
    let for_plan = app
        .get(&format!("/api/promo-codes?plan_id={plan}"))
        .await
        .expect(200);
    let codes: Vec<&str> = for_plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, vec!["SPRING-25", "FIFTY"]);
    let for_other = app
        .get(&format!("/api/promo-codes?plan_id={other}"))
        .await
        .expect(200);
    assert_eq!(for_other["items"].as_array().unwrap().len(), 1);
    let by_code = app.get("/api/promo-codes?code=stars").await.expect(200);
    assert_eq!(by_code["items"][0]["id"], id(&xtr));
    let none = app.get("/api/promo-codes?code=x").await.expect(200);
    assert_eq!(none["items"], json!([]));
    app.get("/api/promo-codes?limit=0").await.expect(422);
    app.get("/api/promo-codes?colour=red").await.expect(400);

    // Changes: deactivate, clear nullable fields, switch kinds, rename (no order uses it).
    let off = app
        .patch(
            &format!("/api/promo-codes/{}", c.id),
            json!({"active": false}),
        )
        .await
        .expect(200);
    assert_eq!(off["active"], false);
    let changed = app
        .patch(
            &format!("/api/promo-codes/{}", c.id),
            json!({"amount_off_minor": 1000, "currency": "UAH", "plan_ids": null,
                   "max_redemptions": null, "expires_at": null, "code": "Summer",
                   "per_buyer_limit": 3, "first_purchase_only": true, "active": true}),
        )
        .await
        .expect(200);
    let c2: PromoCodeBody = body_of(&changed);
    assert_eq!(c2.code, "SUMMER");
    assert_eq!(
        (c2.percent_off, c2.amount_off_minor, c2.currency.as_deref()),
        (None, Some(1000), Some("UAH")),
        "setting an amount clears the percent"
    );
    assert_eq!(
        (c2.plan_ids, c2.max_redemptions, c2.expires_at),
        (None, None, None)
    );
    assert_eq!((c2.per_buyer_limit, c2.first_purchase_only), (3, true));
    assert!(c2.updated_at >= c.updated_at);
    let back = app
        .patch(
            &format!("/api/promo-codes/{}", c.id),
            json!({"percent_off": 10}),
        )
        .await
        .expect(200);
    assert_eq!(
        (
            &back["percent_off"],
            &back["amount_off_minor"],
            &back["currency"]
        ),
        (&json!(10), &Value::Null, &Value::Null),
        "setting a percent clears the amount and its currency"
    );
    // An empty PATCH changes nothing.
    let same = app
        .patch(&format!("/api/promo-codes/{}", c.id), json!({}))
        .await
        .expect(200);
    assert_eq!(same, back);
    app.patch("/api/promo-codes/999999", json!({"active": false}))
        .await
        .expect(404);
    // No DELETE: deactivate instead.
    let r = app.delete(&format!("/api/promo-codes/{}", c.id)).await;
    assert_eq!(r.status.as_u16(), 405);
}

#[tokio::test]
async fn a_repeated_create_with_one_idempotency_key_makes_one_code() {
    let app = TestApp::spawn().await;
    let body = json!({"code": "ONCE", "percent_off": 5});
    let first = app
        .staff_with(
            Method::POST,
            "/api/promo-codes",
            body.clone(),
            &[("idempotency-key", "k1")],
        )
        .await;
    let again = app
        .staff_with(
            Method::POST,
            "/api/promo-codes",
            body,
            &[("idempotency-key", "k1")],
        )
        .await;
    assert_eq!(first.expect(201), again.expect(201));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.count("promo_codes").await, 1);
}

#[tokio::test]
async fn bad_promo_codes_are_422_naming_the_field_and_a_taken_code_is_409() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let uah = default_plan(&app, chan).await;
    let trial = plan(&app, chan, "trial", 0, "UAH").await;
    let usd_chan = id(&app
        .create_channel(-1002, json!({"currency": "USD", "price_minor": 500}))
        .await);
    let usd = default_plan(&app, usd_chan).await;
    new_code(&app, json!({"code": "TAKEN", "percent_off": 10})).await;

    let p = |extra: Value| {
        let mut b = json!({"code": "GOOD", "percent_off": 10});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!({"percent_off": 10}), "code"),
        (p(json!({"code": "A"})), "code"),
        (p(json!({"code": "AB"})), "code"),
        (p(json!({"code": "X".repeat(33)})), "code"),
        (p(json!({"code": "NO SPACE"})), "code"),
        (p(json!({"code": "ÜBER"})), "code"),
        (p(json!({"code": "dot.s"})), "code"),
        (json!({"code": "GOOD"}), "percent_off"),
        (p(json!({"percent_off": 0})), "percent_off"),
        (p(json!({"percent_off": 101})), "percent_off"),
        (
            p(json!({"amount_off_minor": 100, "currency": "UAH"})),
            "percent_off",
        ),
        (
            json!({"code": "GOOD", "amount_off_minor": 0, "currency": "UAH"}),
            "amount_off_minor",
        ),
        (
            json!({"code": "GOOD", "amount_off_minor": -5, "currency": "UAH"}),
            "amount_off_minor",
        ),
        (json!({"code": "GOOD", "amount_off_minor": 100}), "currency"),
        (
            json!({"code": "GOOD", "amount_off_minor": 100, "currency": "uah"}),
            "currency",
        ),
        (
            json!({"code": "GOOD", "amount_off_minor": 100, "currency": "ZZZ"}),
            "currency",
        ),
        (p(json!({"currency": "UAH"})), "currency"),
        (p(json!({"plan_ids": []})), "plan_ids"),
        (
            p(json!({"plan_ids": (1..=101).collect::<Vec<i64>>()})),
            "plan_ids",
        ),
        (p(json!({"plan_ids": [uah, uah]})), "plan_ids"),
        (p(json!({"plan_ids": [999999]})), "plan_ids"),
        (p(json!({"plan_ids": [trial]})), "plan_ids"),
        (
            json!({"code": "GOOD", "amount_off_minor": 100, "currency": "UAH",
                   "plan_ids": [uah, usd]}),
            "plan_ids",
        ),
        (p(json!({"max_redemptions": 0})), "max_redemptions"),
        (p(json!({"per_buyer_limit": 0})), "per_buyer_limit"),
        (p(json!({"expires_at": "tomorrow"})), "expires_at"),
        (p(json!({"expires_at": "2030-01-01"})), "expires_at"),
    ];
    for (body, field) in cases {
        let r = app.post("/api/promo-codes", body.clone()).await;
        let problem = r.expect(422);
        assert!(
            problem["errors"][field].is_string(),
            "{body} → expected an error on {field}: {problem}"
        );
    }
    // A wrong JSON type is a 400; an unknown field too.
    app.post("/api/promo-codes", json!({"code": 5, "percent_off": 5}))
        .await
        .expect(400);
    app.post(
        "/api/promo-codes",
        json!({"code": "GOOD", "percent_off": 5, "colour": "red"}),
    )
    .await
    .expect(400);
    // Taken, in any case.
    for code in ["TAKEN", "taken", "TaKeN"] {
        let r = app
            .post("/api/promo-codes", json!({"code": code, "percent_off": 5}))
            .await;
        let problem = r.expect(409);
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("already exists"),
            "{problem}"
        );
    }
    assert_eq!(app.count("promo_codes").await, 1, "nothing else was stored");

    // PATCH: the same checks, against the merged code.
    let good = id(&new_code(&app, json!({"code": "GOOD", "percent_off": 10})).await);
    let path = format!("/api/promo-codes/{good}");
    for (body, field) in [
        (json!({"code": null}), "code"),
        (json!({"code": "x"}), "code"),
        (json!({"active": null}), "active"),
        (json!({"first_purchase_only": null}), "first_purchase_only"),
        (json!({"per_buyer_limit": null}), "per_buyer_limit"),
        (json!({"percent_off": null}), "percent_off"),
        (json!({"currency": "UAH"}), "currency"),
        (json!({"amount_off_minor": 10}), "currency"),
        (
            json!({"percent_off": 5, "amount_off_minor": 10, "currency": "UAH"}),
            "percent_off",
        ),
        (json!({"plan_ids": [trial]}), "plan_ids"),
        (json!({"expires_at": "soon"}), "expires_at"),
    ] {
        let problem = app.patch(&path, body.clone()).await.expect(422);
        assert!(
            problem["errors"][field].is_string(),
            "PATCH {body} → expected an error on {field}: {problem}"
        );
    }
    app.patch(&path, json!({"code": "taken"})).await.expect(409);
    let unchanged = app.get(&path).await.expect(200);
    assert_eq!(
        (&unchanged["code"], &unchanged["percent_off"]),
        (&json!("GOOD"), &json!(10))
    );
}

#[tokio::test]
async fn a_used_codes_text_and_discount_are_fixed_but_its_limits_and_plans_may_change() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let sub = id(&app.create_subscriber(1).await);
    let code = id(&new_code(&app, json!({"code": "USED", "percent_off": 10})).await);
    let path = format!("/api/promo-codes/{code}");
    let o = order(&app, sub, plan, Some("used")).await.expect(201);
    // Even a cancelled order keeps pointing at the code and showing its text.
    app.post(&format!("/api/orders/{}/cancel", id(&o)), Value::Null)
        .await
        .expect(200);
    for body in [
        json!({"code": "OTHER"}),
        json!({"percent_off": 20}),
        json!({"amount_off_minor": 100, "currency": "UAH"}),
    ] {
        let problem = app.patch(&path, body.clone()).await.expect(409);
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("cannot change"),
            "{body}: {problem}"
        );
    }
    // The same values are no change.
    app.patch(&path, json!({"code": "used", "percent_off": 10}))
        .await
        .expect(200);
    let changed = app
        .patch(
            &path,
            json!({"max_redemptions": 5, "per_buyer_limit": 2, "plan_ids": [plan],
                   "expires_at": "2031-01-01T00:00:00Z", "active": false,
                   "first_purchase_only": true}),
        )
        .await
        .expect(200);
    assert_eq!(changed["max_redemptions"], 5);
    assert_eq!(changed["active"], false);
    let o = app
        .get(&format!("/api/orders/{}", id(&o)))
        .await
        .expect(200);
    assert_eq!(o["promo_code"], "USED");
}

/// Values nobody meant are refused with a 422 naming the field: an amount off that leaves a
/// plan of the code below the currency's smallest charge (one minor unit), a code already
/// expired when created, and a `max_redemptions` below the uses the code has.
#[tokio::test]
async fn a_code_that_could_never_work_as_meant_is_a_422_naming_the_field() {
    let app = TestApp::spawn().await;
    let chan = id(&app
        .create_channel(-1001, json!({"price_minor": 1000}))
        .await);
    let plan = default_plan(&app, chan).await;
    let stars = id(&app
        .create_channel(-1002, json!({"currency": "XTR", "price_minor": 50}))
        .await);
    let star_plan = default_plan(&app, stars).await;
    for (body, field) in [
        (
            json!({"code": "ALL", "amount_off_minor": 1000, "currency": "UAH", "plan_ids": [plan]}),
            "amount_off_minor",
        ),
        (
            json!({"code": "ALLXTR", "amount_off_minor": 50, "currency": "XTR",
                   "plan_ids": [star_plan]}),
            "amount_off_minor",
        ),
        (
            json!({"code": "GONE", "percent_off": 10, "expires_at": "2020-01-01T00:00:00Z"}),
            "expires_at",
        ),
    ] {
        let r = app.post("/api/promo-codes", body.clone()).await;
        let problem = r.expect(422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }
    assert_eq!(app.count("promo_codes").await, 0);
    // One minor unit left is a charge.
    new_code(
        &app,
        json!({"code": "ALMOST", "amount_off_minor": 999, "currency": "UAH", "plan_ids": [plan]}),
    )
    .await;
    new_code(
        &app,
        json!({"code": "STAR49", "amount_off_minor": 49, "currency": "XTR",
               "plan_ids": [star_plan]}),
    )
    .await;
    // A change that would leave less is refused too.
    let almost = app.get("/api/promo-codes?code=ALMOST").await.expect(200)["items"][0].clone();
    let cheap = paid_plan(&app, chan, 500, "UAH").await;
    let r = app
        .patch(
            &format!("/api/promo-codes/{}", id(&almost)),
            json!({"plan_ids": [plan, cheap]}),
        )
        .await;
    assert!(r.expect(422)["errors"]["amount_off_minor"].is_string());

    // Three uses: two paid orders and a pending one holding its use.
    let code = id(&new_code(
        &app,
        json!({"code": "LIMITED", "percent_off": 10, "per_buyer_limit": 1}),
    )
    .await);
    let subs = subscribers(&app, 500, 3).await;
    for (i, sub) in subs.iter().enumerate() {
        let o = order(&app, *sub, plan, Some("LIMITED")).await.expect(201);
        if i < 2 {
            app.pay_order(&o, &format!("limited-{i}")).await.expect(200);
        }
    }
    assert_eq!(paid_with(&app, code).await, 2);
    let path = format!("/api/promo-codes/{code}");
    for max in [1, 2] {
        let r = app.patch(&path, json!({"max_redemptions": max})).await;
        let problem = r.expect(422);
        assert!(
            problem["errors"]["max_redemptions"]
                .as_str()
                .is_some_and(|m| m.contains('3')),
            "{max}: {problem}"
        );
    }
    let stored = app.get(&path).await.expect(200);
    assert_eq!(stored["max_redemptions"], Value::Null);
    assert_eq!(
        app.patch(&path, json!({"max_redemptions": 3}))
            .await
            .expect(200)["max_redemptions"],
        3
    );
    // Raising it, or lifting it, stays possible.
    app.patch(&path, json!({"max_redemptions": null}))
        .await
        .expect(200);
}

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
        let barrier = Arc::new(Barrier::new(BUYERS));
        let tasks: Vec<_> = subs
            .iter()
            .map(|&sub| {
                let (app, barrier, code) = (app.clone(), barrier.clone(), code.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
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
                })
            })
            .collect();
        let mut made = 0;
        for t in tasks {
            match t.await.unwrap() {
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
        let barrier = Arc::new(Barrier::new(BUYERS * 2));
        let mut tasks = Vec::new();
        for o in &orders {
            let (a, b, order) = (app.clone(), barrier.clone(), o.clone());
            tasks.push(tokio::spawn(async move {
                let (app, barrier, o) = (a, b, order);
                barrier.wait().await;
                let r = app.pay_order(&o, &format!("pay_{round}_{}", id(&o))).await;
                let v = r.expect(200);
                Some((
                    v["payment"]["outcome"].as_str().unwrap().to_string(),
                    v["payment"]["reason"].as_str().map(str::to_string),
                ))
            }));
            let (a, b, order) = (app.clone(), barrier.clone(), o.clone());
            tasks.push(tokio::spawn(async move {
                let (app, barrier, o) = (a, b, order);
                barrier.wait().await;
                if round % 2 == 1 {
                    let status = app.checkout(id(&o)).await.status.as_u16();
                    assert!([200, 409].contains(&status), "checkout: {status}");
                }
                None
            }));
        }
        let mut applied = 0;
        for t in tasks {
            match t.await.unwrap() {
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

// ---- the document ----

#[tokio::test]
async fn promo_code_answers_match_the_document() {
    use crate::ops::openapi::{assert_valid, document, resolve, response_schema};
    let app = TestApp::spawn().await;
    let doc = document();
    let check = |method: &str, path: &str, r: &TestResponse| {
        let status = r.status.as_u16();
        let pointer = response_schema(&doc, method, path, status);
        let documented = resolve(
            &doc,
            &doc["paths"][path][method]["responses"][status.to_string()],
        );
        let ctype = r.header("content-type").unwrap_or_default();
        assert!(
            documented["content"].get(ctype).is_some(),
            "{method} {path} {status}: content type {ctype} not documented"
        );
        assert_valid(&doc, &pointer, &r.json());
    };
    let chan = id(&app.create_channel(-1001, json!({})).await);
    let plan = default_plan(&app, chan).await;
    let sub = id(&app.create_subscriber(1).await);
    let created = app
        .post(
            "/api/promo-codes",
            json!({"code": "DOC", "amount_off_minor": 100, "currency": "UAH",
                   "plan_ids": [plan], "expires_at": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(created.status, 201);
    check("post", "/api/promo-codes", &created);
    let code = id(&created.json());
    let taken = app
        .post("/api/promo-codes", json!({"code": "doc", "percent_off": 5}))
        .await;
    assert_eq!(taken.status, 409);
    check("post", "/api/promo-codes", &taken);
    let invalid = app
        .post("/api/promo-codes", json!({"code": "D", "percent_off": 500}))
        .await;
    assert_eq!(invalid.status, 422);
    check("post", "/api/promo-codes", &invalid);
    let o = order(&app, sub, plan, Some("doc")).await;
    assert_eq!(o.status, 201);
    check("post", "/api/orders", &o);
    let refused = order(&app, sub, plan, Some("doc")).await;
    assert_eq!(refused.status, 422);
    check("post", "/api/orders", &refused);
    app.pay_order(&o.json(), "pay_doc").await.expect(200);
    let list = app.get("/api/promo-codes?active=true").await;
    assert_eq!(list.status, 200);
    check("get", "/api/promo-codes", &list);
    let got = app.get(&format!("/api/promo-codes/{code}")).await;
    assert_eq!(got.json()["redemptions"], 1);
    check("get", "/api/promo-codes/{id}", &got);
    let fixed = app
        .patch(
            &format!("/api/promo-codes/{code}"),
            json!({"code": "OTHER"}),
        )
        .await;
    assert_eq!(fixed.status, 409);
    check("patch", "/api/promo-codes/{id}", &fixed);
    let patched = app
        .patch(
            &format!("/api/promo-codes/{code}"),
            json!({"active": false}),
        )
        .await;
    assert_eq!(patched.status, 200);
    check("patch", "/api/promo-codes/{id}", &patched);
    let bad = app
        .patch(&format!("/api/promo-codes/{code}"), json!({"active": null}))
        .await;
    assert_eq!(bad.status, 422);
    check("patch", "/api/promo-codes/{id}", &bad);
}
