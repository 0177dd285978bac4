//! CRUD of subscribers and channels, read/patch/delete of memberships, and keyset
//! pagination — each route's happy path and its 400/404/409/422 answers.

use axum::http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::bodies::{EventBody, ListBody, MembershipBody, SubscriberBody, body_of};
use crate::support::helpers::id;
use crate::{staff::auth::assert_problem, support::helpers::TestApp};

fn ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(id)
        .collect()
}

/// A staff request with a raw (possibly malformed) body.
async fn raw(
    app: &TestApp,
    method: Method,
    path: &str,
    body: &str,
) -> crate::support::helpers::TestResponse {
    let auth = format!("Bearer {}", app.token().await);
    app.request(
        method,
        path,
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string(),
    )
    .await
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.db().await.query_one(sql, &[]).await.unwrap().get(0)
}

/// Asserts a 422 whose `errors` names exactly `fields`.
#[track_caller]
fn assert_invalid(r: &crate::support::helpers::TestResponse, fields: &[&str]) {
    let body = assert_problem(r, 422);
    let errors = body["errors"]
        .as_object()
        .unwrap_or_else(|| panic!("{body}"));
    let mut got: Vec<&str> = errors.keys().map(String::as_str).collect();
    got.sort();
    let mut want = fields.to_vec();
    want.sort();
    assert_eq!(got, want, "{body}");
    assert!(errors.values().all(Value::is_string), "{body}");
}

async fn grant(app: &TestApp, subscriber_id: i64, channel_id: i64, days: i64) -> Value {
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id, "days": days}),
        )
        .await;
    assert!(
        r.status == 201 || r.status == 200,
        "grant: {} {}",
        r.status,
        String::from_utf8_lossy(&r.bytes)
    );
    r.json()
}

async fn insert_payment(app: &TestApp, subscriber_id: i64, channel_id: Option<i64>) {
    let channel_id = channel_id.map(|c| c as i32);
    app.db()
        .await
        .execute(
            "INSERT INTO payments (gateway, external_id, subscriber_id, channel_id, amount_minor,
                 currency, paid_at, outcome, reason)
             VALUES ('acme', gen_random_uuid()::text, $1, $2, 100, 'UAH', now(),
                 'needs_review', 'unknown_order')",
            &[&(subscriber_id as i32), &channel_id],
        )
        .await
        .unwrap();
}

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

// ---------------------------------------------------------------- subscribers

#[tokio::test]
async fn subscriber_lifecycle() {
    let app = TestApp::spawn().await;
    let r = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 9_007_199_254_740_993i64, "username": "ann", "display_name": "Ann A."}),
        )
        .await;
    let created = r.expect(201);
    // The typed read checks every field is there with its type (timestamps are strings).
    let typed: SubscriberBody = body_of(&created);
    assert_eq!(typed.telegram_user_id, 9_007_199_254_740_993i64);
    assert_eq!(typed.username.as_deref(), Some("ann"));
    assert_eq!(typed.display_name.as_deref(), Some("Ann A."));
    let sid = typed.id;

    let path = format!("/api/subscribers/{sid}");
    assert_eq!(app.get(&path).await.expect(200), created);

    let list = app.get("/api/subscribers").await.expect(200);
    assert_eq!(list["items"], json!([created]));
    assert_eq!(body_of::<ListBody<SubscriberBody>>(&list).next_after, None);

    // Only the given fields change.
    let patched: SubscriberBody = body_of(
        &app.patch(&path, json!({"display_name": "Ann B."}))
            .await
            .expect(200),
    );
    assert_eq!(patched.display_name.as_deref(), Some("Ann B."));
    assert_eq!(patched.username.as_deref(), Some("ann"));
    assert_eq!(patched.telegram_user_id, typed.telegram_user_id);
    assert_eq!(patched.created_at, typed.created_at);
    assert!(patched.updated_at >= typed.updated_at);

    // An explicit null clears a nullable field; absent leaves it alone.
    let patched: SubscriberBody = body_of(
        &app.patch(&path, json!({"username": null}))
            .await
            .expect(200),
    );
    assert_eq!(patched.username, None);
    assert_eq!(patched.display_name.as_deref(), Some("Ann B."));
    let row = app
        .db()
        .await
        .query_one(
            "SELECT username, display_name FROM subscribers WHERE id = $1",
            &[&(sid as i32)],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), None);
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("Ann B."));

    let patched: SubscriberBody = body_of(
        &app.patch(&path, json!({"telegram_user_id": 77, "username": "ann2"}))
            .await
            .expect(200),
    );
    assert_eq!(patched.telegram_user_id, 77);
    assert_eq!(patched.username.as_deref(), Some("ann2"));
    // An empty PATCH is allowed and changes nothing but updated_at.
    let same: SubscriberBody = body_of(&app.patch(&path, json!({})).await.expect(200));
    assert_eq!(same.telegram_user_id, 77);

    app.delete(&path).await.expect(204);
    assert_problem(&app.get(&path).await, 404);
    assert_problem(&app.delete(&path).await, 404);
    assert_eq!(count(&app, "SELECT count(*) FROM subscribers").await, 0);
}

#[tokio::test]
async fn subscriber_list_filter_by_telegram_user_id() {
    let app = TestApp::spawn().await;
    app.create_subscriber(10).await;
    let b = app.create_subscriber(20).await;
    app.create_subscriber(30).await;
    let page = app
        .get("/api/subscribers?telegram_user_id=20")
        .await
        .expect(200);
    assert_eq!(page["items"], json!([b]));
    let page = app
        .get("/api/subscribers?telegram_user_id=21")
        .await
        .expect(200);
    assert_eq!(page, json!({"items": [], "next_after": null}));
}

#[tokio::test]
async fn subscriber_400s() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(1).await;
    let path = format!("/api/subscribers/{}", id(&s));
    for body in [
        "{",
        "not json",
        "[]",
        "null",
        r#"{"telegram_user_id": "123"}"#,
        r#"{"telegram_user_id": 1.5}"#,
        r#"{"telegram_user_id": 99999999999999999999}"#,
        r#"{"telegram_user_id": 5, "username": 7}"#,
        r#"{"telegram_user_id": 5, "nickname": "x"}"#,
        r#"{"telegram_user_id": 5, "username": "a"} trailing"#,
    ] {
        assert_problem(
            &raw(&app, Method::POST, "/api/subscribers", body).await,
            400,
        );
    }
    for body in [
        "{",
        r#"{"telegram_user_id": "123"}"#,
        r#"{"display_name": false}"#,
        r#"{"id": 5}"#,
        r#"{"created_at": "2024-01-01T00:00:00Z"}"#,
    ] {
        assert_problem(&raw(&app, Method::PATCH, &path, body).await, 400);
    }
    for query in [
        "?foo=1",
        "?limit=abc",
        "?after=x",
        "?telegram_user_id=abc",
        "?limit=1&limit=2",
    ] {
        let r = app.get(&format!("/api/subscribers{query}")).await;
        assert_problem(&r, 400);
    }
    assert_eq!(count(&app, "SELECT count(*) FROM subscribers").await, 1);
    assert_eq!(
        app.get(&path).await.expect(200),
        s,
        "unchanged by refused requests"
    );
}

#[tokio::test]
async fn subscriber_404s() {
    let app = TestApp::spawn().await;
    for p in [
        "/api/subscribers/999999",
        "/api/subscribers/0",
        "/api/subscribers/-1",
        "/api/subscribers/abc",
        "/api/subscribers/1.5",
        "/api/subscribers/99999999999",
    ] {
        assert_problem(&app.get(p).await, 404);
        assert_problem(&app.patch(p, json!({"username": "x"})).await, 404);
        assert_problem(&app.delete(p).await, 404);
    }
}

#[tokio::test]
async fn subscriber_422s() {
    let app = TestApp::spawn().await;
    assert_invalid(
        &app.post("/api/subscribers", json!({})).await,
        &["telegram_user_id"],
    );
    assert_invalid(
        &app.post("/api/subscribers", json!({"telegram_user_id": null}))
            .await,
        &["telegram_user_id"],
    );
    for bad in [0, -1, i64::MIN] {
        assert_invalid(
            &app.post("/api/subscribers", json!({"telegram_user_id": bad}))
                .await,
            &["telegram_user_id"],
        );
    }
    assert_invalid(
        &app.post(
            "/api/subscribers",
            json!({"telegram_user_id": 1, "username": "u".repeat(65)}),
        )
        .await,
        &["username"],
    );
    assert_invalid(
        &app.post(
            "/api/subscribers",
            json!({"telegram_user_id": 1, "display_name": "d".repeat(129)}),
        )
        .await,
        &["display_name"],
    );
    assert_invalid(
        &app.post(
            "/api/subscribers",
            json!({"telegram_user_id": 0, "username": "u".repeat(65), "display_name": "d".repeat(129)}),
        )
        .await,
        &["telegram_user_id", "username", "display_name"],
    );
    assert_invalid(
        &app.post(
            "/api/subscribers",
            json!({"telegram_user_id": 1, "username": "a\u{0}b"}),
        )
        .await,
        &["username"],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM subscribers").await, 0);

    // The limits count characters, not bytes.
    let s = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 1, "username": "ж".repeat(64), "display_name": "я".repeat(128)}),
        )
        .await
        .expect(201);
    let path = format!("/api/subscribers/{}", id(&s));
    assert_invalid(
        &app.patch(&path, json!({"telegram_user_id": 0})).await,
        &["telegram_user_id"],
    );
    assert_invalid(
        &app.patch(&path, json!({"username": "u".repeat(65)})).await,
        &["username"],
    );
    assert_invalid(
        &app.patch(&path, json!({"display_name": "x\u{0}"})).await,
        &["display_name"],
    );
    // null is not "leave alone" for a field that cannot be null.
    assert_invalid(
        &app.patch(&path, json!({"telegram_user_id": null})).await,
        &["telegram_user_id"],
    );
    assert_eq!(app.get(&path).await.expect(200), s);
}

#[tokio::test]
async fn subscriber_409s() {
    let app = TestApp::spawn().await;
    let a = app.create_subscriber(100).await;
    let b = app.create_subscriber(200).await;
    let body = assert_problem(
        &app.post("/api/subscribers", json!({"telegram_user_id": 100}))
            .await,
        409,
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("telegram_user_id"),
        "{body}"
    );
    let b_path = format!("/api/subscribers/{}", id(&b));
    assert_problem(
        &app.patch(&b_path, json!({"telegram_user_id": 100})).await,
        409,
    );
    assert_eq!(app.get(&b_path).await.expect(200), b);

    // Deleting a subscriber with payments: refused, the row stays.
    let a_path = format!("/api/subscribers/{}", id(&a));
    insert_payment(&app, id(&a), None).await;
    let body = assert_problem(&app.delete(&a_path).await, 409);
    assert!(
        body["detail"].as_str().unwrap().contains("payments"),
        "{body}"
    );
    app.get(&a_path).await.expect(200);
}

#[tokio::test]
async fn telegram_user_id_is_frozen_while_a_membership_is_live() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(300).await;
    let c = app.create_channel(-100, json!({})).await;
    let m = grant(&app, id(&s), id(&c), 30).await;
    let path = format!("/api/subscribers/{}", id(&s));
    let m_path = format!("/api/memberships/{}", id(&m));

    assert_problem(
        &app.patch(&path, json!({"telegram_user_id": 301})).await,
        409,
    );
    // Setting the same value, or other fields, is fine.
    app.patch(&path, json!({"telegram_user_id": 300, "username": "x"}))
        .await
        .expect(200);

    app.patch(&m_path, json!({"status": "grace"}))
        .await
        .expect(200);
    assert_problem(
        &app.patch(&path, json!({"telegram_user_id": 301})).await,
        409,
    );

    app.patch(&m_path, json!({"status": "expired"}))
        .await
        .expect(200);
    let patched = app
        .patch(&path, json!({"telegram_user_id": 301}))
        .await
        .expect(200);
    assert_eq!(patched["telegram_user_id"], 301);

    // A subscriber with memberships (but no payments) can be deleted; they go with it.
    app.delete(&path).await.expect(204);
    assert_problem(&app.get(&m_path).await, 404);
    assert_eq!(
        count(&app, "SELECT count(*) FROM membership_events").await,
        0
    );
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

fn with(mut body: Value, extra: Value) -> Value {
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
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
    assert_eq!(count(&app, "SELECT count(*) FROM channels").await, 1);
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
    assert_eq!(count(&app, "SELECT count(*) FROM channels").await, 0);

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

// ---------------------------------------------------------------- memberships

#[tokio::test]
async fn membership_read_filters_and_404s() {
    let app = TestApp::spawn().await;
    let s1 = id(&app.create_subscriber(1).await);
    let s2 = id(&app.create_subscriber(2).await);
    let c1 = id(&app.create_channel(-1, json!({})).await);
    let c2 = id(&app.create_channel(-2, json!({})).await);
    let m11 = grant(&app, s1, c1, 5).await;
    let m12 = grant(&app, s1, c2, 5).await;
    let m21 = grant(&app, s2, c1, 5).await;
    let m22 = grant(&app, s2, c2, 5).await;
    app.patch(
        &format!("/api/memberships/{}", id(&m22)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);

    assert_eq!(
        ids(&app.get("/api/memberships").await.expect(200)),
        vec![id(&m11), id(&m12), id(&m21), id(&m22)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?subscriber_id={s1}"))
            .await
            .expect(200)),
        vec![id(&m11), id(&m12)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?channel_id={c1}"))
            .await
            .expect(200)),
        vec![id(&m11), id(&m21)]
    );
    assert_eq!(
        ids(&app.get("/api/memberships?status=expired").await.expect(200)),
        vec![id(&m22)]
    );
    assert_eq!(
        ids(&app.get("/api/memberships?status=active").await.expect(200)),
        vec![id(&m11), id(&m12), id(&m21)]
    );
    assert_eq!(
        ids(&app
            .get(&format!(
                "/api/memberships?subscriber_id={s2}&channel_id={c2}&status=expired"
            ))
            .await
            .expect(200)),
        vec![id(&m22)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?subscriber_id={s2}&status=grace"))
            .await
            .expect(200)),
        Vec::<i64>::new()
    );

    let got = app
        .get(&format!("/api/memberships/{}", id(&m11)))
        .await
        .expect(200);
    assert_eq!(got, m11);
    assert_eq!(got["status"], "active");
    assert_eq!(got["subscriber_id"], s1);
    assert_eq!(got["channel_id"], c1);

    assert_invalid(
        &app.get("/api/memberships?status=paused").await,
        &["status"],
    );
    for q in ["?subscriber_id=x", "?bogus=1", "?channel_id=1.5"] {
        assert_problem(&app.get(&format!("/api/memberships{q}")).await, 400);
    }
    for p in [
        "/api/memberships/999999",
        "/api/memberships/abc",
        "/api/memberships/999999/events",
        "/api/memberships/x/events",
    ] {
        assert_problem(&app.get(p).await, 404);
    }
    assert_problem(
        &app.patch("/api/memberships/999999", json!({"status": "active"}))
            .await,
        404,
    );
    assert_problem(&app.delete("/api/memberships/999999").await, 404);
}

#[tokio::test]
async fn membership_patch_writes_exactly_the_given_fields_and_one_staff_event() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(1).await);
    let c = id(&app
        .create_channel(-1, json!({"grace_period_days": 3}))
        .await);
    let m: MembershipBody = body_of(&grant(&app, s, c, 30).await);
    let path = format!("/api/memberships/{}", m.id);
    let events_path = format!("{path}/events");

    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    assert_eq!(events.items.len(), 1, "creation event");
    assert_eq!(events.items[0].cause, "staff");
    assert_eq!(events.items[0].from_status, None);
    assert_eq!(events.next_after, None);

    // Status only: expires_at untouched.
    let p: MembershipBody = body_of(
        &app.patch(&path, json!({"status": "grace"}))
            .await
            .expect(200),
    );
    assert_eq!(p.status, "grace");
    assert_eq!(p.expires_at, m.expires_at);
    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    let items = &events.items;
    assert_eq!(items.len(), 2);
    let e = &items[1];
    assert_eq!(e.cause, "staff");
    assert_eq!(e.from_status.as_deref(), Some("active"));
    assert_eq!(e.to_status, "grace");
    assert_eq!(e.membership_id, m.id);
    assert_eq!(e.payment_id, None);
    assert_eq!(e.expires_at_before.as_ref(), Some(&m.expires_at));
    assert_eq!(e.expires_at_after, m.expires_at);

    // expires_at only, back-dated: written exactly, status untouched, no extension.
    let back = "2020-01-02T03:04:05Z";
    let p: MembershipBody = body_of(
        &app.patch(&path, json!({"expires_at": back}))
            .await
            .expect(200),
    );
    assert_eq!(p.expires_at, back);
    assert_eq!(p.status, "grace");
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, expires_at = '2020-01-02T03:04:05Z'::timestamptz FROM memberships WHERE id = $1",
            &[&m.id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "grace");
    assert!(row.get::<_, bool>(1));

    // Both at once: one more event, not two.
    let future = "2099-12-31T23:59:59Z";
    let p = app
        .patch(&path, json!({"expires_at": future, "status": "active"}))
        .await
        .expect(200);
    let typed: MembershipBody = body_of(&p);
    assert_eq!(
        (typed.status.as_str(), typed.expires_at.as_str()),
        ("active", future)
    );
    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    let items = &events.items;
    assert_eq!(items.len(), 4);
    assert_eq!(items[3].from_status.as_deref(), Some("grace"));
    assert_eq!(items[3].to_status, "active");
    assert_eq!(items[3].expires_at_before.as_deref(), Some(back));
    assert_eq!(items[3].expires_at_after, future);
    assert!(items.iter().all(|e| e.cause == "staff"));
    // Event paging works like every list.
    let first = app.get(&format!("{events_path}?limit=3")).await.expect(200);
    assert_eq!(first["items"].as_array().unwrap().len(), 3);
    let rest = app
        .get(&format!(
            "{events_path}?limit=3&after={}",
            first["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after"], Value::Null);

    // Refusals change nothing and record nothing.
    assert_invalid(
        &app.patch(&path, json!({"status": "paused"})).await,
        &["status"],
    );
    assert_problem(&app.patch(&path, json!({})).await, 422);
    for body in [
        r#"{"expires_at": "tomorrow"}"#,
        r#"{"expires_at": 5}"#,
        r#"{"days": 3}"#,
        r#"{"status": 1}"#,
        "{",
    ] {
        assert_problem(&raw(&app, Method::PATCH, &path, body).await, 400);
    }
    assert_eq!(
        app.get(&events_path).await.expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(app.get(&path).await.expect(200), p);
}

#[tokio::test]
async fn membership_delete_is_204_then_404() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(1).await);
    let c = id(&app.create_channel(-1, json!({})).await);
    let m = grant(&app, s, c, 30).await;
    let path = format!("/api/memberships/{}", id(&m));
    app.delete(&path).await.expect(204);
    assert_problem(&app.get(&path).await, 404);
    assert_problem(&app.get(&format!("{path}/events")).await, 404);
    assert_problem(&app.delete(&path).await, 404);
    assert_problem(&app.patch(&path, json!({"status": "active"})).await, 404);
    assert_eq!(
        count(&app, "SELECT count(*) FROM membership_events").await,
        0
    );
    // The subscriber and channel remain; a new grant creates a new membership (201).
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 1}),
        )
        .await;
    assert_ne!(id(&r.expect(201)), id(&m));
}

// ---------------------------------------------------------------- pagination

#[tokio::test]
async fn pagination_across_pages() {
    let app = TestApp::spawn().await;
    let mut all = Vec::new();
    for i in 1..=7 {
        all.push(id(&app.create_subscriber(1000 + i).await));
    }
    let page = async |query: &str| -> ListBody<SubscriberBody> {
        body_of(
            &app.get(&format!("/api/subscribers?{query}"))
                .await
                .expect(200),
        )
    };
    let page_ids =
        |p: &ListBody<SubscriberBody>| -> Vec<i64> { p.items.iter().map(|s| s.id).collect() };
    let p1 = page("limit=3").await;
    assert_eq!(page_ids(&p1), all[0..3]);
    assert_eq!(p1.next_after, Some(all[2]));
    let p2 = page(&format!("limit=3&after={}", p1.next_after.unwrap())).await;
    assert_eq!(page_ids(&p2), all[3..6]);
    assert_eq!(p2.next_after, Some(all[5]));
    let p3 = page(&format!("after={}&limit=3", p2.next_after.unwrap())).await;
    assert_eq!(page_ids(&p3), all[6..7]);
    assert_eq!(p3.next_after, None);

    // A page that ends exactly at the last row says so (no empty extra page).
    let p = page(&format!("limit=4&after={}", all[2])).await;
    assert_eq!(page_ids(&p), all[3..7]);
    assert_eq!(p.next_after, None);
    // After the end: empty.
    let p = app
        .get(&format!("/api/subscribers?after={}", all[6]))
        .await
        .expect(200);
    assert_eq!(p, json!({"items": [], "next_after": null}));
    // Default limit covers all 7; the maximum is accepted.
    assert_eq!(ids(&app.get("/api/subscribers").await.expect(200)), all);
    assert_eq!(
        ids(&app.get("/api/subscribers?limit=200").await.expect(200)),
        all
    );
    assert_eq!(
        ids(&app
            .get("/api/subscribers?limit=1&after=-5")
            .await
            .expect(200)),
        all[0..1]
    );
    // Deleting the row a cursor points at does not break the next page.
    app.delete(&format!("/api/subscribers/{}", all[2]))
        .await
        .expect(204);
    let p = app
        .get(&format!("/api/subscribers?limit=3&after={}", all[2]))
        .await
        .expect(200);
    assert_eq!(ids(&p), all[3..6]);

    for limit in ["0", "201", "-1"] {
        for path in ["/api/subscribers", "/api/channels", "/api/memberships"] {
            assert_invalid(&app.get(&format!("{path}?limit={limit}")).await, &["limit"]);
        }
    }
}

#[tokio::test]
async fn filters_combine_with_paging() {
    let app = TestApp::spawn().await;
    let mut active = Vec::new();
    for i in 1..=7 {
        let c = app.create_channel(-i, json!({"active": i % 2 == 1})).await;
        if i % 2 == 1 {
            active.push(id(&c));
        }
    }
    assert_eq!(active.len(), 4);
    let p1 = app
        .get("/api/channels?active=true&limit=3")
        .await
        .expect(200);
    assert_eq!(ids(&p1), active[0..3]);
    assert_eq!(p1["next_after"], active[2]);
    let p2 = app
        .get(&format!(
            "/api/channels?active=true&limit=3&after={}",
            p1["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p2), active[3..4]);
    assert_eq!(p2["next_after"], Value::Null);

    // Memberships of one channel, paged.
    let channel = active[0];
    let mut ms = Vec::new();
    for i in 1..=5 {
        let s = id(&app.create_subscriber(i).await);
        ms.push(id(&grant(&app, s, channel, 1).await));
        grant(&app, s, active[1], 1).await; // noise in another channel
    }
    let p1 = app
        .get(&format!("/api/memberships?channel_id={channel}&limit=2"))
        .await
        .expect(200);
    assert_eq!(ids(&p1), ms[0..2]);
    let p2 = app
        .get(&format!(
            "/api/memberships?channel_id={channel}&limit=2&after={}",
            p1["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p2), ms[2..4]);
    let p3 = app
        .get(&format!(
            "/api/memberships?channel_id={channel}&limit=2&after={}",
            p2["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p3), ms[4..5]);
    assert_eq!(p3["next_after"], Value::Null);
}

#[tokio::test]
async fn a_membership_patch_refuses_null_like_every_patch() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(900).await;
    let c = app.create_channel(-900, json!({})).await;
    let m = grant(&app, id(&s), id(&c), 30).await;
    let path = format!("/api/memberships/{}", id(&m));

    // An explicit null is not "leave alone": it is refused, naming the field, and nothing changes.
    for field in ["status", "expires_at"] {
        let mut body = json!({"status": "grace", "expires_at": "2030-01-01T00:00:00Z"});
        body[field] = Value::Null;
        let r = app.patch(&path, body).await;
        assert_problem(&r, 422);
        assert_eq!(r.json()["errors"][field], "must not be null", "{field}");
    }
    let now = app.get(&path).await.expect(200);
    assert_eq!(now["status"], "active");
    assert_eq!(now["expires_at"], m["expires_at"]);
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM membership_events WHERE cause = 'staff'"
        )
        .await,
        1,
        "only the grant's event"
    );
}
