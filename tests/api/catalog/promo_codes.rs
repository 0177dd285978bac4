//! Promo codes as a staff resource: create, read, list and change, a repeated create under one
//! idempotency key, every 422 and 409, what may change once a code is used, and the answers
//! against the OpenAPI document. The discount and limits at order time are in `promo_uses`;
//! lapsed holds and races in `promo_lapses`.
//!
//! Plans other than a channel's default one are inserted with SQL.

use axum::http::Method;
use serde_json::{Value, json};

use crate::support::{
    bodies::{PromoCodeBody, body_of},
    helpers::{NewPlan, TestApp, TestResponse, id},
};

// ---- fixtures ----

/// A paid plan of `channel` at `price` in `currency` for 30 days; returns its id.
pub(crate) async fn paid_plan(app: &TestApp, channel: i64, price: i64, currency: &str) -> i64 {
    plan(app, channel, "paid", price, currency).await
}

pub(crate) async fn plan(
    app: &TestApp,
    channel: i64,
    kind: &str,
    price: i64,
    currency: &str,
) -> i64 {
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
pub(crate) async fn default_plan(app: &TestApp, channel: i64) -> i64 {
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
pub(crate) async fn new_code(app: &TestApp, body: Value) -> Value {
    app.post("/api/promo-codes", body).await.expect(201)
}

/// `POST /api/orders` of `plan` for `sub` with `code`.
pub(crate) async fn order(app: &TestApp, sub: i64, plan: i64, code: Option<&str>) -> TestResponse {
    let mut body = json!({"subscriber_id": sub, "plan_id": plan});
    if let Some(code) = code {
        body["promo_code"] = json!(code);
    }
    app.post("/api/orders", body).await
}

/// The 422 message on `promo_code` of a refused order.
#[track_caller]
pub(crate) fn promo_refusal(r: &TestResponse) -> String {
    let body = r.expect(422);
    body["errors"]["promo_code"]
        .as_str()
        .unwrap_or_else(|| panic!("no promo_code error: {body}"))
        .to_string()
}

/// Moves an order's promo hold one second into the past (the same as waiting `HOLD_SECS`).
pub(crate) async fn lapse(app: &TestApp, order_id: i64) {
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

pub(crate) async fn promo_held_until(
    app: &TestApp,
    order_id: i64,
) -> Option<chrono::DateTime<chrono::Utc>> {
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
pub(crate) async fn paid_with(app: &TestApp, code_id: i64) -> i64 {
    app.count(&format!(
        "orders WHERE promo_code_id = {code_id} AND status = 'paid'"
    ))
    .await
}

pub(crate) async fn subscribers(app: &TestApp, first_telegram_id: i64, n: usize) -> Vec<i64> {
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
