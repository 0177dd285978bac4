//! Subscribers through the staff API: their CRUD, filter, and 400/404/409/422 answers, and a
//! Telegram user id frozen while a membership is live; and the helpers the channel, membership
//! and paging tests share.

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    staff::auth::assert_problem,
    support::{
        bodies::{ListBody, SubscriberBody, body_of},
        helpers::{TestApp, id},
    },
};

pub(crate) fn ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(id)
        .collect()
}

/// A staff request with a raw (possibly malformed) body.
pub(crate) async fn raw(
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

/// Asserts a 422 whose `errors` names exactly `fields`.
#[track_caller]
pub(crate) fn assert_invalid(r: &crate::support::helpers::TestResponse, fields: &[&str]) {
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

pub(crate) async fn grant(app: &TestApp, subscriber_id: i64, channel_id: i64, days: i64) -> Value {
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

pub(crate) async fn insert_payment(app: &TestApp, subscriber_id: i64, channel_id: Option<i64>) {
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
    assert_eq!(app.count("subscribers").await, 0);
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
    assert_eq!(app.count("subscribers").await, 1);
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
    assert_eq!(app.count("subscribers").await, 0);

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
    assert_eq!(app.count("membership_events").await, 0);
}

pub(crate) fn with(mut body: Value, extra: Value) -> Value {
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}
