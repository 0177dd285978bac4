//! The member portal: the buyer's memberships and payments after a Stars purchase, the
//! language they choose (remembered as `/language` remembers it), and their Stars subscription
//! cancelled and resumed with `editUserStarSubscription` — only their own.

use axum::http::Method;
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use super::{assert_keys, call, default_plan, order};
use crate::{
    bot::conversation::{
        app_with, payment_update, person, send, stars_channel, text_update, web_app_buttons,
    },
    support::{
        fake_bot::{FakeBot, Reply},
        helpers::TestApp,
    },
};

/// Buys channel `c`'s default plan from the page as `user` and pays it with Stars charge
/// `charge` (the first of a subscription when `recurring`).
async fn bought(app: &TestApp, user: i64, c: i64, charge: &str, recurring: bool) {
    let p = default_plan(app, c).await;
    let placed = order(app, user, json!({"plan_id": p})).await.expect(200);
    let reference = placed["order"]["reference"].as_str().unwrap();
    let subscription = recurring.then(|| (true, Utc::now() + Duration::days(30)));
    send(
        app,
        &payment_update(charge, user, reference, 250, subscription),
    )
    .await;
}

#[tokio::test]
async fn mini_app_me_lists_memberships_and_payments_and_keeps_a_language() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_820_001, json!({"title": "Daily"})).await;
    bought(&app, 8401, c, "charge_8401", false).await;
    let me = call(&app, 8401, Method::GET, "/app/api/me", None)
        .await
        .expect(200);
    assert_eq!(me["subscriber"]["name"], "Ann Buyer", "{me}");
    assert_keys(
        &me,
        &[
            "subscriber",
            "memberships",
            "subscriptions",
            "payments",
            "referral",
        ],
    );
    assert_keys(&me["subscriber"], &["id", "name", "language"]);
    assert_keys(
        &me["memberships"][0],
        &[
            "id",
            "channel_id",
            "channel_title",
            "status",
            "expires_at",
            "lifetime",
            "renew_plan_id",
        ],
    );
    assert_keys(
        &me["payments"][0],
        &[
            "id",
            "paid_at",
            "amount_text",
            "channel_title",
            "gateway",
            "refunded",
        ],
    );
    assert_eq!(me["subscriber"]["language"], "en");
    let m = &me["memberships"][0];
    assert_eq!(m["channel_id"], c, "{me}");
    assert_eq!(m["channel_title"], "Daily");
    assert_eq!(m["status"], "active");
    assert_eq!(m["lifetime"], false);
    assert!(m["expires_at"].is_string());
    assert_eq!(m["renew_plan_id"], default_plan(&app, c).await);
    let pay = &me["payments"][0];
    assert_eq!(me["payments"].as_array().unwrap().len(), 1);
    assert_eq!(pay["channel_title"], "Daily");
    assert_eq!(pay["refunded"], false);
    assert_eq!(pay["gateway"], "telegram_stars");
    assert!(
        pay["amount_text"].as_str().unwrap().contains("250"),
        "{pay}"
    );
    assert_eq!(me["subscriptions"], json!([]));
    assert_eq!(me["referral"], Value::Null);

    // `/subscriptions` in the chat opens the portal too.
    let reply = send(&app, &text_update(&person(8401), "/subscriptions")).await;
    assert_eq!(
        web_app_buttons(&reply),
        vec![(
            "Open my subscriptions".to_string(),
            "https://pay.example.com/app/".to_string()
        )],
        "{reply}"
    );

    let uk = call(
        &app,
        8401,
        Method::PUT,
        "/app/api/me/language",
        Some(json!({"language": "uk"})),
    )
    .await
    .expect(200);
    assert_eq!(uk["subscriber"]["language"], "uk");
    let stored: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT language FROM subscribers WHERE telegram_user_id = 8401",
            &[],
        )
        .await
        .unwrap()
        .get("language");
    assert_eq!(stored.as_deref(), Some("uk"));
    call(
        &app,
        8401,
        Method::PUT,
        "/app/api/me/language",
        Some(json!({"language": "de"})),
    )
    .await
    .expect(400);
}

#[tokio::test]
async fn mini_app_is_the_bots_menu_button() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    assert!(
        subgate::bot::mini_app::set_menu_button(&app.state.config)
            .await
            .unwrap()
    );
    let calls = fake.calls_of("setChatMenuButton");
    assert_eq!(
        calls[0].params["menu_button"],
        json!({"type": "web_app", "text": "Open my subscriptions",
               "web_app": {"url": "https://pay.example.com/app/"}})
    );
    // Without a bot token there is nothing to set.
    let app = TestApp::spawn().await;
    assert!(
        !subgate::bot::mini_app::set_menu_button(&app.state.config)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn mini_app_cancels_and_resumes_a_stars_subscription_through_telegram() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_820_002,
        json!({"title": "Monthly", "recurring": true, "billing_period_days": 30}),
    )
    .await;
    bought(&app, 8402, c, "charge_8402", true).await;
    let link = fake.calls_of("createInvoiceLink");
    assert!(link[0].params.get("subscription_period").is_some());
    let me = call(&app, 8402, Method::GET, "/app/api/me", None)
        .await
        .expect(200);
    let s = &me["subscriptions"][0];
    assert_eq!(s["channel_id"], c, "{me}");
    assert_eq!(s["cancelled"], false);
    assert_keys(
        s,
        &[
            "id",
            "channel_id",
            "channel_title",
            "status",
            "expires_at",
            "price_text",
            "cancelled",
        ],
    );
    let id = s["id"].as_i64().unwrap();

    // Someone else's subscription is not theirs to touch.
    call(
        &app,
        8403,
        Method::POST,
        &format!("/app/api/subscriptions/{id}/cancel"),
        None,
    )
    .await
    .expect(404);
    assert!(fake.calls_of("editUserStarSubscription").is_empty());

    let cancelled = call(
        &app,
        8402,
        Method::POST,
        &format!("/app/api/subscriptions/{id}/cancel"),
        None,
    )
    .await
    .expect(200);
    assert_eq!(cancelled["subscription"]["cancelled"], true, "{cancelled}");
    assert_eq!(cancelled["subscription"]["status"], "cancelled");
    assert!(fake.subscription_cancelled(8402, "charge_8402"));
    let status: String = app
        .db()
        .await
        .query_one(
            "SELECT status FROM star_subscriptions WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get("status");
    assert_eq!(status, "cancelled");

    let resumed = call(
        &app,
        8402,
        Method::POST,
        &format!("/app/api/subscriptions/{id}/resume"),
        None,
    )
    .await
    .expect(200);
    assert_eq!(resumed["subscription"]["cancelled"], false, "{resumed}");
    assert!(!fake.subscription_cancelled(8402, "charge_8402"));
    let calls = fake.calls_of("editUserStarSubscription");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].params["is_canceled"], true);
    assert_eq!(calls[1].params["is_canceled"], false);

    // Telegram not answering: 503, and nothing recorded.
    fake.always(
        "editUserStarSubscription",
        Reply::Error(400, "Bad Request: SUBSCRIPTION_NOT_FOUND".into()),
    );
    call(
        &app,
        8402,
        Method::POST,
        &format!("/app/api/subscriptions/{id}/cancel"),
        None,
    )
    .await
    .expect(503);
    let status: String = app
        .db()
        .await
        .query_one(
            "SELECT status FROM star_subscriptions WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get("status");
    assert_eq!(status, "active");
}
