//! Buying from the page: the offer as the bot lists it (in the buyer's language, with a trial
//! they may use and a code's price), a Stars order paid by an invoice link made once (a second
//! press, or two at once, reuse one order and one link; no invoice in the chat), a card order's
//! WayForPay page, trials and 100 % codes granted at once, a full channel refused with the
//! bot's words, and an order read back only by its own buyer.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use subgate::{
    common::currency::Money,
    present::{render, texts::Language},
};

use super::{assert_keys, call, call_as, default_plan, init_data, order};
use crate::{
    bot::{
        conversation::{ROUNDS, app_with, channel, orders_of, pending, stars_channel},
        plans::{plan, promo},
    },
    support::{fake_bot::FakeBot, race::race},
};

#[tokio::test]
async fn mini_app_offer_speaks_ukrainian_with_a_trial_and_a_code() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_810_001, json!({"title": "Club"})).await;
    let paid = default_plan(&app, c).await;
    let trial = plan(&app, &[c], "Taster", "trial", 0, "UAH", Some(7), 1).await;
    promo(&app, "SPRING", 20, Some(vec![paid]), "").await;

    let path = format!("/app/api/offer?channel_id={c}&promo_code=spring");
    let body = call_as(&app, &init_data(8201, "uk"), Method::GET, &path, None)
        .await
        .expect(200);
    assert_eq!(body["language"], "uk", "{body}");
    assert_keys(
        &body,
        &["language", "channel", "plans", "promo_code", "member"],
    );
    assert_keys(&body["channel"], &["id", "title", "description"]);
    assert_keys(
        &body["plans"][0],
        &[
            "id",
            "name",
            "trial",
            "price",
            "discounted",
            "period_days",
            "recurring",
            "bundle_with",
            "availability",
            "pay_with",
        ],
    );
    assert_keys(
        &body["plans"][0]["price"],
        &["amount_minor", "currency", "text"],
    );
    assert_eq!(body["channel"]["id"], c);
    assert_eq!(body["channel"]["title"], "Club");
    assert_eq!(
        body["promo_code"],
        json!({"code": "SPRING", "accepted": true, "reason": null})
    );
    assert_eq!(body["member"], Value::Null);
    let plans = body["plans"].as_array().unwrap();
    let by_id = |id: i64| plans.iter().find(|p| p["id"] == id).unwrap().clone();
    let p = by_id(paid);
    assert_eq!(p["trial"], false);
    assert_eq!(p["price"]["amount_minor"], 19900);
    assert_eq!(p["price"]["currency"], "UAH");
    assert_eq!(
        p["price"]["text"],
        render::price(Language::Uk, &Money::new(19900, "UAH"))
    );
    assert_eq!(p["discounted"]["amount_minor"], 15920, "{p}");
    assert_eq!(
        p["discounted"]["text"],
        render::price(Language::Uk, &Money::new(15920, "UAH"))
    );
    assert_eq!(p["availability"], "buyable");
    assert_eq!(p["pay_with"], "card");
    assert_eq!(p["period_days"], 30);
    let t = by_id(trial);
    assert_eq!(t["trial"], true);
    assert_eq!(t["pay_with"], Value::Null);
    assert_eq!(t["period_days"], 7);

    // An unknown code is refused in the buyer's language; the list price stands.
    let path = format!("/app/api/offer?channel_id={c}&promo_code=NOPE");
    let body = call_as(&app, &init_data(8201, "uk"), Method::GET, &path, None)
        .await
        .expect(200);
    assert_eq!(body["promo_code"]["accepted"], false);
    assert!(body["promo_code"]["reason"].is_string());
    // Wrong codes count against the bot's limit on guesses: past it, none is looked up.
    let wrong = format!("/app/api/offer?channel_id={c}&promo_code=WRONG");
    for _ in 1..subgate::bot::guesses::PER_USER {
        call(&app, 8201, Method::GET, &wrong, None)
            .await
            .expect(200);
    }
    let path = format!("/app/api/offer?channel_id={c}&promo_code=SPRING");
    let limited = call(&app, 8201, Method::GET, &path, None).await.expect(200);
    assert_eq!(limited["promo_code"]["accepted"], false, "{limited}");
    let limited_paid = limited["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == paid)
        .unwrap();
    assert_eq!(limited_paid["discounted"], Value::Null, "{limited}");
    // An unknown channel.
    call(
        &app,
        8201,
        Method::GET,
        "/app/api/offer?channel_id=999999",
        None,
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn mini_app_stars_order_gets_one_invoice_link_and_a_second_press_reuses_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_810_002, json!({"title": "Stars"})).await;
    let p = default_plan(&app, c).await;
    let first = order(&app, 8202, json!({"plan_id": p})).await.expect(200);
    let link = first["pay"]["stars_invoice_url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(link.starts_with("https://t.me/$fake_invoice_"), "{first}");
    assert_keys(&first, &["order", "pay"]);
    assert_keys(
        &first["order"],
        &[
            "id",
            "reference",
            "status",
            "amount_minor",
            "currency",
            "amount_text",
        ],
    );
    assert_eq!(first["order"]["status"], "pending");
    assert_eq!(first["order"]["amount_minor"], 250);
    assert_eq!(first["order"]["currency"], "XTR");
    assert!(first["order"]["amount_text"].is_string());
    let again = order(&app, 8202, json!({"plan_id": p})).await.expect(200);
    assert_eq!(again["order"]["id"], first["order"]["id"]);
    assert_eq!(again["pay"]["stars_invoice_url"], link.as_str());
    let calls = fake.calls_of("createInvoiceLink");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].params["payload"], first["order"]["reference"]);
    assert_eq!(orders_of(&app, 8202, c).await.len(), 1);
    // The page pays it: nothing is sent to the chat.
    assert_eq!(pending(&app, "invoice").await, 0);

    // Two presses at once (a double tap): one order, one link.
    let app = Arc::new(app);
    for round in 0..ROUNDS {
        let user = 8300 + round;
        let answers = race(2, |_| {
            let app = app.clone();
            async move { order(&app, user, json!({"plan_id": p})).await.expect(200) }
        })
        .await;
        assert_eq!(answers[0]["order"]["id"], answers[1]["order"]["id"]);
        assert_eq!(
            answers[0]["pay"]["stars_invoice_url"],
            answers[1]["pay"]["stars_invoice_url"]
        );
        assert_eq!(orders_of(&app, user, c).await.len(), 1, "round {round}");
    }
}

#[tokio::test]
async fn mini_app_card_order_gets_a_wayforpay_page() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_810_003, json!({"title": "Card"})).await;
    let p = default_plan(&app, c).await;
    let body = order(&app, 8203, json!({"plan_id": p})).await.expect(200);
    let url = body["pay"]["card_urls"]["wayforpay"].as_str().unwrap();
    assert!(
        url.starts_with("https://secure.wayforpay.com/pay?"),
        "{body}"
    );
    assert!(url.contains(body["order"]["reference"].as_str().unwrap()));
    assert_eq!(body["pay"]["card_urls"]["stripe"], Value::Null);
    assert_eq!(body["order"]["amount_minor"], 19900);
    assert_eq!(pending(&app, "invoice").await, 0);
}

#[tokio::test]
async fn mini_app_trial_and_a_hundred_percent_code_are_granted_at_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_810_004, json!({"title": "Free"})).await;
    let trial = plan(&app, &[c], "Taster", "trial", 0, "UAH", Some(7), 1).await;
    let body = order(&app, 8204, json!({"plan_id": trial}))
        .await
        .expect(200);
    assert_eq!(body["pay"], json!({"granted": true}), "{body}");
    assert_eq!(body["order"]["status"], "paid");
    let id = body["order"]["id"].as_i64().unwrap();
    let status = call(
        &app,
        8204,
        Method::GET,
        &format!("/app/api/orders/{id}"),
        None,
    )
    .await
    .expect(200);
    assert_eq!(status["access"], true, "{status}");
    assert_keys(&status, &["order", "access", "join_request"]);
    assert_eq!(status["join_request"], Value::Null);
    assert_eq!(status["order"]["id"], id);
    // A second trial is refused with the bot's words.
    let again = order(&app, 8204, json!({"plan_id": trial}))
        .await
        .expect(422);
    assert!(
        again["detail"].as_str().unwrap().contains("trial"),
        "{again}"
    );

    let paid = default_plan(&app, c).await;
    promo(&app, "FREE", 100, Some(vec![paid]), "").await;
    let body = order(&app, 8205, json!({"plan_id": paid, "promo_code": "free"}))
        .await
        .expect(200);
    assert_eq!(body["pay"], json!({"granted": true}), "{body}");
    assert_eq!(body["order"]["amount_minor"], 0);
    assert_eq!(body["order"]["status"], "paid");
    // A wrong code is refused and nothing is made.
    let wrong = order(&app, 8206, json!({"plan_id": paid, "promo_code": "NOPE"}))
        .await
        .expect(422);
    assert!(
        wrong["detail"].as_str().unwrap().contains("NOPE"),
        "{wrong}"
    );
    assert!(orders_of(&app, 8206, c).await.is_empty());
}

#[tokio::test]
async fn mini_app_full_channel_is_refused_and_orders_are_their_buyers_own() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(
        &app,
        -100_810_005,
        json!({"title": "One seat", "seat_limit": 1}),
    )
    .await;
    let p = default_plan(&app, c).await;
    let held = order(&app, 8207, json!({"plan_id": p})).await.expect(200);
    let id = held["order"]["id"].as_i64().unwrap();
    let full = order(&app, 8208, json!({"plan_id": p})).await.expect(422);
    assert_eq!(full["status"], 422);
    assert!(
        full["detail"].as_str().unwrap().contains("One seat"),
        "{full}"
    );
    assert!(orders_of(&app, 8208, c).await.is_empty());
    // The offer says so too.
    let offer = call(
        &app,
        8208,
        Method::GET,
        &format!("/app/api/offer?channel_id={c}"),
        None,
    )
    .await
    .expect(200);
    assert_eq!(offer["plans"][0]["availability"], "full");

    let path = format!("/app/api/orders/{id}");
    let own = call(&app, 8207, Method::GET, &path, None).await.expect(200);
    assert_eq!(own["access"], false);
    assert_eq!(own["order"]["status"], "pending");
    call(&app, 8208, Method::GET, &path, None).await.expect(404);
    call(&app, 8207, Method::GET, "/app/api/orders/abc", None)
        .await
        .expect(404);
    // Malformed bodies are 400, never 500.
    for bad in [
        json!({}),
        json!({"plan_id": "x"}),
        json!({"plan_id": 1, "extra": 1}),
    ] {
        order(&app, 8207, bad).await.expect(400);
    }
    call(&app, 8207, Method::POST, "/app/api/orders", None)
        .await
        .expect(400);
}

/// A waiting join request of the buyer's, named by the page's `r`, is tied to the order; one
/// of another user, or of a channel outside the plan, is not.
#[tokio::test]
async fn mini_app_order_ties_the_buyers_waiting_join_request() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_810_006, json!({"title": "Door"})).await;
    let other = stars_channel(&app, -100_810_007, json!({"title": "Elsewhere"})).await;
    let p = default_plan(&app, c).await;
    let db = app.db().await;
    for (channel, chat, user, reference) in [
        (c, -100_810_006_i64, 8209_i64, "jr_mine"),
        (c, -100_810_006, 8210, "jr_someone_else"),
        (other, -100_810_007, 8209, "jr_other_channel"),
    ] {
        db.execute(
            "INSERT INTO join_requests (channel_id, chat_id, user_id, query_id, reference, answer,
                                        requested_at)
             VALUES ($1, $2, $3, $4, $4, 'web_app', now())",
            &[&(channel as i32), &chat, &user, &reference],
        )
        .await
        .unwrap();
    }
    let order_of = |reference: &'static str| {
        let app = &app;
        async move {
            app.db()
                .await
                .query_one(
                    "SELECT order_id FROM join_requests WHERE reference = $1",
                    &[&reference],
                )
                .await
                .unwrap()
                .get::<_, Option<i64>>("order_id")
        }
    };
    for reference in ["jr_someone_else", "jr_other_channel", "jr_mine"] {
        let body = order(&app, 8209, json!({"plan_id": p, "join_request": reference}))
            .await
            .expect(200);
        let id = body["order"]["id"].as_i64().unwrap();
        let linked = order_of(reference).await;
        assert_eq!(
            linked,
            (reference == "jr_mine").then_some(id),
            "{reference}"
        );
    }
    let id = order_of("jr_mine").await.unwrap();
    let status = call(
        &app,
        8209,
        Method::GET,
        &format!("/app/api/orders/{id}"),
        None,
    )
    .await
    .expect(200);
    assert_eq!(status["join_request"], "waiting", "{status}");
}
