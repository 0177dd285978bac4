//! Channels through the staff API: the CRUD round trip and its 400/404/409/422 answers.

use axum::http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    catalog::subscribers::{assert_invalid, grant, ids, insert_payment, raw, with},
    staff::auth::assert_problem,
    support::helpers::{TestApp, id},
};

async fn insert_order(app: &TestApp, subscriber_id: i64, channel_id: i64) {
    app.db()
        .await
        .execute(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
             VALUES (gen_random_uuid()::text, $1, $2, 19900, 'UAH')",
            &[&(subscriber_id as i32), &(channel_id as i32)],
        )
        .await
        .unwrap();
}

// ---------------------------------------------------------------- channels

fn channel_body(chat: i64) -> Value {
    json!({
        "telegram_chat_id": chat,
        "title": "Premium",
        "price_minor": 19900,
        "currency": "UAH",
        "billing_period_days": 30,
    })
}

/// A channel as the API answers it: every field present (`seat_limit` may be null, never
/// missing).
#[derive(Debug, Deserialize)]
struct ChannelBody {
    id: i64,
    telegram_chat_id: i64,
    title: String,
    price_minor: i64,
    currency: String,
    billing_period_days: i64,
    grace_period_days: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    seat_limit: Option<i64>,
    active: bool,
}

fn channel_body_of(v: &Value) -> ChannelBody {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("a channel: {e}: {v}"))
}

#[tokio::test]
async fn channel_lifecycle() {
    let app = TestApp::spawn().await;
    let c = app
        .post("/api/channels", channel_body(-1001234567890))
        .await
        .expect(201);
    let typed = channel_body_of(&c);
    assert_eq!(typed.telegram_chat_id, -1001234567890i64);
    assert_eq!(typed.title, "Premium");
    assert_eq!(typed.price_minor, 19900);
    assert_eq!(typed.currency, "UAH");
    assert_eq!(typed.billing_period_days, 30);
    assert_eq!(typed.grace_period_days, 0, "default grace");
    assert_eq!(typed.seat_limit, None, "default unlimited");
    assert!(typed.active, "default active");
    let path = format!("/api/channels/{}", typed.id);
    assert_eq!(app.get(&path).await.expect(200), c);

    let full = app
        .post(
            "/api/channels",
            json!({
                "telegram_chat_id": -55,
                "title": "T".repeat(255),
                "price_minor": 250,
                "currency": "XTR",
                "billing_period_days": 3660,
                "grace_period_days": 365,
                "seat_limit": 1,
                "active": false,
            }),
        )
        .await
        .expect(201);
    let typed = channel_body_of(&full);
    assert_eq!(typed.seat_limit, Some(1));
    assert!(!typed.active);
    assert_eq!(typed.grace_period_days, 365);
    app.post(
        "/api/channels",
        with(
            channel_body(-56),
            json!({"billing_period_days": 1, "grace_period_days": 0, "seat_limit": null}),
        ),
    )
    .await
    .expect(201);

    let list = app.get("/api/channels").await.expect(200);
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert_eq!(
        ids(&app.get("/api/channels?active=false").await.expect(200)),
        vec![id(&full)]
    );
    assert_eq!(
        app.get("/api/channels?active=true").await.expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let p = app
        .patch(
            &path,
            json!({"title": "Renamed", "seat_limit": 10, "active": false}),
        )
        .await
        .expect(200);
    let typed = channel_body_of(&p);
    assert_eq!(typed.title, "Renamed");
    assert_eq!(typed.seat_limit, Some(10));
    assert!(!typed.active);
    assert_eq!(typed.price_minor, 19900, "untouched");
    let p = app
        .patch(
            &path,
            json!({"price_minor": 100, "currency": "USD", "grace_period_days": 3}),
        )
        .await
        .expect(200);
    let typed = channel_body_of(&p);
    assert_eq!(
        (
            typed.price_minor,
            typed.currency.as_str(),
            typed.grace_period_days
        ),
        (100, "USD", 3)
    );
    assert_eq!(typed.seat_limit, Some(10), "absent seat_limit stays");
    let p = app
        .patch(&path, json!({"seat_limit": null}))
        .await
        .expect(200);
    let typed = channel_body_of(&p);
    assert_eq!(typed.seat_limit, None, "null makes it unlimited");
    assert_eq!(typed.title, "Renamed");

    app.delete(&path).await.expect(204);
    assert_problem(&app.get(&path).await, 404);
    assert_problem(&app.delete(&path).await, 404);
    assert_problem(&app.patch(&path, json!({"title": "x"})).await, 404);
}

#[tokio::test]
async fn channel_400s_and_404s() {
    let app = TestApp::spawn().await;
    let c = app.create_channel(-7, json!({})).await;
    let path = format!("/api/channels/{}", id(&c));
    for body in [
        "{".to_string(),
        with(channel_body(-1), json!({"price_minor": "19900"})).to_string(),
        with(channel_body(-1), json!({"price_minor": 199.5})).to_string(),
        with(channel_body(-1), json!({"telegram_chat_id": "-100"})).to_string(),
        with(
            channel_body(-1),
            json!({"billing_period_days": 99999999999i64}),
        )
        .to_string(),
        with(channel_body(-1), json!({"active": "yes"})).to_string(),
        with(channel_body(-1), json!({"seat_limit": "5"})).to_string(),
        with(channel_body(-1), json!({"colour": "blue"})).to_string(),
    ] {
        assert_problem(&raw(&app, Method::POST, "/api/channels", &body).await, 400);
    }
    for body in [r#"{"title": 5}"#, r#"{"unknown": 1}"#, "[", r#"{"id": 3}"#] {
        assert_problem(&raw(&app, Method::PATCH, &path, body).await, 400);
    }
    for q in ["?active=maybe", "?x=1", "?limit=ten"] {
        assert_problem(&app.get(&format!("/api/channels{q}")).await, 400);
    }
    for p in [
        "/api/channels/424242",
        "/api/channels/abc",
        "/api/channels/-1",
    ] {
        assert_problem(&app.get(p).await, 404);
        assert_problem(&app.patch(p, json!({"title": "x"})).await, 404);
        assert_problem(&app.delete(p).await, 404);
    }
    assert_eq!(app.get(&path).await.expect(200), c);
    assert_eq!(app.count("channels").await, 1);
}

#[tokio::test]
async fn channel_422s() {
    let app = TestApp::spawn().await;
    assert_invalid(
        &app.post("/api/channels", json!({})).await,
        &[
            "telegram_chat_id",
            "title",
            "price_minor",
            "currency",
            "billing_period_days",
        ],
    );
    let cases: Vec<(Value, &str)> = vec![
        (json!({"telegram_chat_id": 0}), "telegram_chat_id"),
        (json!({"telegram_chat_id": 7}), "telegram_chat_id"),
        (json!({"price_minor": i64::MAX}), "price_minor"),
        (json!({"title": ""}), "title"),
        (json!({"title": "t".repeat(256)}), "title"),
        (json!({"title": "a\u{0}b"}), "title"),
        (json!({"price_minor": 0}), "price_minor"),
        (json!({"price_minor": -100}), "price_minor"),
        (json!({"currency": "uah"}), "currency"),
        (json!({"currency": "ZZZ"}), "currency"),
        (json!({"currency": "US"}), "currency"),
        (json!({"currency": "USDT"}), "currency"),
        (json!({"currency": ""}), "currency"),
        (json!({"billing_period_days": 0}), "billing_period_days"),
        (json!({"billing_period_days": 3661}), "billing_period_days"),
        (json!({"billing_period_days": -30}), "billing_period_days"),
        (json!({"grace_period_days": -1}), "grace_period_days"),
        (json!({"grace_period_days": 366}), "grace_period_days"),
        (json!({"seat_limit": 0}), "seat_limit"),
        (json!({"seat_limit": -3}), "seat_limit"),
    ];
    for (extra, field) in &cases {
        assert_invalid(
            &app.post("/api/channels", with(channel_body(-1), extra.clone()))
                .await,
            &[field],
        );
    }
    for field in [
        "telegram_chat_id",
        "title",
        "price_minor",
        "currency",
        "billing_period_days",
    ] {
        let mut body = channel_body(-1);
        body.as_object_mut().unwrap().remove(field);
        assert_invalid(&app.post("/api/channels", body).await, &[field]);
    }
    assert_eq!(app.count("channels").await, 0);

    let c = app.create_channel(-1, json!({})).await;
    let path = format!("/api/channels/{}", id(&c));
    for (extra, field) in &cases {
        assert_invalid(&app.patch(&path, extra.clone()).await, &[field]);
    }
    for field in [
        "telegram_chat_id",
        "title",
        "price_minor",
        "currency",
        "billing_period_days",
        "grace_period_days",
        "active",
    ] {
        assert_invalid(&app.patch(&path, json!({ field: null })).await, &[field]);
    }
    assert_eq!(app.get(&path).await.expect(200), c, "unchanged");
}

#[tokio::test]
async fn channel_409s() {
    let app = TestApp::spawn().await;
    let a = app.create_channel(-10, json!({})).await;
    let b = app.create_channel(-20, json!({})).await;
    let body = assert_problem(&app.post("/api/channels", channel_body(-10)).await, 409);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("telegram_chat_id"),
        "{body}"
    );
    assert_problem(
        &app.patch(
            &format!("/api/channels/{}", id(&b)),
            json!({"telegram_chat_id": -10}),
        )
        .await,
        409,
    );

    // In use by a membership.
    let s = app.create_subscriber(1).await;
    let m = grant(&app, id(&s), id(&a), 10).await;
    let a_path = format!("/api/channels/{}", id(&a));
    assert_problem(&app.delete(&a_path).await, 409);
    app.delete(&format!("/api/memberships/{}", id(&m)))
        .await
        .expect(204);
    app.delete(&a_path).await.expect(204);

    // In use by an order.
    let b_path = format!("/api/channels/{}", id(&b));
    insert_order(&app, id(&s), id(&b)).await;
    assert_problem(&app.delete(&b_path).await, 409);
    app.db()
        .await
        .execute("DELETE FROM orders", &[])
        .await
        .unwrap();

    // In use by a payment.
    insert_payment(&app, id(&s), Some(id(&b))).await;
    assert_problem(&app.delete(&b_path).await, 409);
    app.get(&b_path).await.expect(200);
}
