//! `Idempotency-Key` on staff POSTs (create, grant, cancel, checkout).

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};

use crate::support::{
    helpers::{TestApp, TestResponse},
    race::race,
};

async fn post_keyed(app: &TestApp, path: &str, body: Value, key: &str) -> TestResponse {
    app.staff_with(Method::POST, path, body, &[("idempotency-key", key)])
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_posts_take_effect_once() {
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    for round in 0..20 {
        let key = format!("create-subscriber-{round}");
        let body = json!({"telegram_user_id": 1000 + round, "display_name": "Ann"});
        let answers = race(10, |_| {
            let (app, key, body) = (app.clone(), key.clone(), body.clone());
            async move { post_keyed(&app, "/api/subscribers", body, &key).await }
        })
        .await;
        let mut created = Vec::new();
        let mut fresh = 0;
        for r in answers {
            match r.status.as_u16() {
                201 => {
                    if r.header("idempotent-replayed").is_none() {
                        fresh += 1;
                    }
                    created.push(r.bytes)
                }
                409 => {}
                other => panic!(
                    "round {round}: unexpected {other}: {}",
                    String::from_utf8_lossy(&r.bytes)
                ),
            }
        }
        assert_eq!(
            fresh, 1,
            "round {round}: exactly one response ran the effect"
        );
        assert!(
            created.windows(2).all(|w| w[0] == w[1]),
            "round {round}: successful responses differ"
        );
        let rows = app
            .count(&format!(
                "subscribers WHERE telegram_user_id = {}",
                1000 + round
            ))
            .await;
        assert_eq!(rows, 1, "round {round}: exactly one subscriber");
    }
}

#[tokio::test]
async fn replay_is_byte_identical_and_marked() {
    let app = TestApp::spawn().await;
    let body = json!({"telegram_user_id": 7, "username": "seven"});
    let first = post_keyed(&app, "/api/subscribers", body.clone(), "k-1").await;
    first.expect(201);
    assert_eq!(first.header("idempotent-replayed"), None);
    let second = post_keyed(&app, "/api/subscribers", body, "k-1").await;
    second.expect(201);
    assert_eq!(second.bytes, first.bytes);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(second.header("content-type"), Some("application/json"));
    assert_eq!(app.count("subscribers").await, 1);
}

#[tokio::test]
async fn same_key_different_request_is_422() {
    let app = TestApp::spawn().await;
    post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 8}),
        "k-2",
    )
    .await
    .expect(201);
    let other_body = post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 9}),
        "k-2",
    )
    .await;
    other_body.expect(422);
    let ch = json!({"telegram_chat_id": -5, "title": "t", "price_minor": 1, "currency": "UAH", "billing_period_days": 30});
    let other_path = post_keyed(&app, "/api/channels", ch, "k-2").await;
    other_path.expect(422);
    assert_eq!(app.count("subscribers").await, 1);
    assert_eq!(app.count("channels").await, 0);
}

#[tokio::test]
async fn failed_request_leaves_no_key_and_corrected_retry_runs() {
    let app = TestApp::spawn().await;
    app.create_subscriber(10).await;
    // A conflict (duplicate telegram_user_id) fails inside the transaction...
    post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 10}),
        "k-3",
    )
    .await
    .expect(409);
    // ...and a validation failure before it.
    post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": -1}),
        "k-3",
    )
    .await
    .expect(422);
    assert_eq!(app.count("idempotency_keys").await, 0);
    let fixed = post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 11}),
        "k-3",
    )
    .await;
    fixed.expect(201);
    assert_eq!(app.count("subscribers").await, 2);
}

#[tokio::test]
async fn expired_key_runs_anew() {
    let app = TestApp::spawn().await;
    let body = json!({"telegram_user_id": 12});
    post_keyed(&app, "/api/subscribers", body.clone(), "k-4")
        .await
        .expect(201);
    app.db()
        .await
        .execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '24 hours 1 second'",
            &[],
        )
        .await
        .unwrap();
    // Runs again: the subscriber exists, so this time the effect itself answers 409.
    let again = post_keyed(&app, "/api/subscribers", body, "k-4").await;
    again.expect(409);
    assert_eq!(again.header("idempotent-replayed"), None);
    // A different request may now use the key too.
    post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 13}),
        "k-4",
    )
    .await
    .expect(201);
    // The purge removes expired keys in bulk.
    app.db()
        .await
        .execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '25 hours'",
            &[],
        )
        .await
        .unwrap();
    let purged = subgate::staff::idempotency::purge_expired(&**app.app_db().await)
        .await
        .unwrap();
    assert_eq!(purged, 1);
}

#[tokio::test]
async fn keys_are_scoped_per_staff_account() {
    let app = TestApp::spawn().await;
    subgate::staff::accounts::create_staff(
        &app.state.db,
        "second@example.com",
        "another password",
        subgate::staff::Role::Owner,
        4,
    )
    .await
    .unwrap();
    let second = app
        .login("second@example.com", "another password")
        .await
        .expect(200);
    let second_auth = format!("Bearer {}", second["access_token"].as_str().unwrap());
    let body = json!({"telegram_chat_id": -77, "title": "A", "price_minor": 100, "currency": "UAH", "billing_period_days": 30});
    post_keyed(&app, "/api/channels", body.clone(), "shared")
        .await
        .expect(201);
    // The second account's request with the same key is its own request: it runs (and meets
    // the unique telegram_chat_id), it is not a replay of the first account's response.
    let r = app
        .request(
            Method::POST,
            "/api/channels",
            &[
                ("authorization", &second_auth),
                ("idempotency-key", "shared"),
                ("content-type", "application/json"),
            ],
            json!({"telegram_chat_id": -78, "title": "B", "price_minor": 100, "currency": "UAH", "billing_period_days": 30}).to_string(),
        )
        .await;
    r.expect(201);
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_eq!(app.count("channels").await, 2);
    assert_eq!(app.count("idempotency_keys").await, 2);
}

#[tokio::test]
async fn replayed_manual_grant_extends_once() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(20).await;
    let c = app.create_channel(-2020, json!({})).await;
    let body = json!({"subscriber_id": s["id"], "channel_id": c["id"], "days": 10});
    let first = post_keyed(&app, "/api/memberships", body.clone(), "grant-1").await;
    let m = first.expect(201);
    let again = post_keyed(&app, "/api/memberships", body.clone(), "grant-1").await;
    assert_eq!(again.expect(201), m);
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(app.count("membership_events").await, 1);
    // A new key is a new grant: extends from the current expiry.
    let extended = post_keyed(&app, "/api/memberships", body, "grant-2")
        .await
        .expect(200);
    assert_ne!(extended["expires_at"], m["expires_at"]);
    assert_eq!(app.count("membership_events").await, 2);
}

#[tokio::test]
async fn quoted_structured_field_key_works() {
    let app = TestApp::spawn().await;
    let body = json!({"telegram_user_id": 30});
    post_keyed(&app, "/api/subscribers", body.clone(), "\"quoted key\"")
        .await
        .expect(201);
    let replay = post_keyed(&app, "/api/subscribers", body, "\"quoted key\"").await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let stored: String = app
        .db()
        .await
        .query_one("SELECT key FROM idempotency_keys", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, "quoted key");
}

#[tokio::test]
async fn invalid_keys_are_400_and_change_nothing() {
    let app = TestApp::spawn().await;
    let long = "k".repeat(256);
    for key in ["", "has space", "\"unterminated\\\"", long.as_str()] {
        let r = post_keyed(
            &app,
            "/api/subscribers",
            json!({"telegram_user_id": 40}),
            key,
        )
        .await;
        r.expect(400);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    assert_eq!(app.count("subscribers").await, 0);
    // Exactly 255 characters is fine.
    let max = "k".repeat(255);
    post_keyed(
        &app,
        "/api/subscribers",
        json!({"telegram_user_id": 40}),
        &max,
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn key_is_ignored_where_it_does_not_apply() {
    let app = TestApp::spawn().await;
    // Login ignores the header: two logins with one key give two different tokens' worth of
    // work (both succeed, neither is marked as a replay).
    for _ in 0..2 {
        let r = app
            .request(
                Method::POST,
                "/api/auth/login",
                &[("idempotency-key", "login-key"), ("content-type", "application/json")],
                json!({"email": crate::support::helpers::ADMIN_EMAIL, "password": crate::support::helpers::ADMIN_PASSWORD}).to_string(),
            )
            .await;
        r.expect(200);
        assert_eq!(r.header("idempotent-replayed"), None);
    }
    assert_eq!(app.count("idempotency_keys").await, 0);
}

#[tokio::test]
async fn replayed_checkout_does_not_extend_the_hold_and_replayed_cancel_cancels_once() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(50).await;
    let c = app.create_channel(-5050, json!({"seat_limit": 1})).await;
    let order = app
        .create_order(s["id"].as_i64().unwrap(), c["id"].as_i64().unwrap())
        .await;
    let path = format!("/api/orders/{}/checkout", order["id"]);
    let first = post_keyed(&app, &path, Value::Null, "checkout-1").await;
    let held = first.expect(200);
    let hold_until = held["order"]["hold_until"].clone();
    assert!(hold_until.is_string(), "checkout holds the last seat");
    let hold_of = |app: &TestApp| {
        let id = order["id"].as_i64().unwrap();
        let app_db = app.state.db.clone();
        async move {
            app_db
                .get()
                .await
                .unwrap()
                .query_one("SELECT hold_until FROM orders WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, chrono::DateTime<chrono::Utc>>(0)
        }
    };
    let stored = hold_of(&app).await;
    let replay = post_keyed(&app, &path, Value::Null, "checkout-1").await;
    replay.expect(200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.bytes, first.bytes);
    assert_eq!(
        hold_of(&app).await,
        stored,
        "a replay never touches the hold"
    );

    let cancel = format!("/api/orders/{}/cancel", order["id"]);
    let cancelled = post_keyed(&app, &cancel, Value::Null, "cancel-1").await;
    assert_eq!(cancelled.expect(200)["status"], "cancelled");
    // Without the key a second cancel is a conflict; with it, the saved answer comes back.
    let again = post_keyed(&app, &cancel, Value::Null, "cancel-1").await;
    again.expect(200);
    assert_eq!(again.bytes, cancelled.bytes);
    app.post(&cancel, Value::Null).await.expect(409);
}
