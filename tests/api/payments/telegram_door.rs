//! Door 3, the Telegram bot webhook: the update builders and look-ups of its tests, join
//! requests, and the door itself — its secret token, malformed bodies, values Telegram never
//! sends, and the database stalling or away. Stars pre-checkouts and their seat holds are in
//! `telegram_holds`; refusals in `telegram_refusals`.
//!
//! Each row of the door's decision table is one test; the concurrent rows release their tasks
//! together with a barrier and repeat for `ROUNDS` rounds, then read the rows back. Holds are
//! expired by back-dating `orders.hold_until` with SQL, never by sleeping.

use std::sync::atomic::{AtomicI64, Ordering};

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::support::{
    helpers::{TELEGRAM_SECRET, TestApp, TestResponse},
    rows::order_row,
};

/// The price of every Stars channel here, in stars.
pub(crate) const PRICE: i64 = 250;

const BUSY: &str = "Please try again in a moment.";

static UPDATE_ID: AtomicI64 = AtomicI64::new(1);

fn next_update_id() -> i64 {
    UPDATE_ID.fetch_add(1, Ordering::Relaxed)
}

// ---- updates as Telegram sends them ----

pub(crate) fn pre_checkout_update(
    query_id: &str,
    from: i64,
    payload: &str,
    currency: &str,
    amount: i64,
) -> Value {
    json!({
        "update_id": next_update_id(),
        "pre_checkout_query": {
            "id": query_id,
            "from": {"id": from, "is_bot": false, "first_name": "Buyer", "language_code": "en"},
            "currency": currency,
            "total_amount": amount,
            "invoice_payload": payload
        }
    })
}

pub(crate) fn payment_update(
    charge_id: &str,
    from: i64,
    payload: &str,
    currency: &str,
    amount: i64,
) -> Value {
    json!({
        "update_id": next_update_id(),
        "message": {
            "message_id": next_update_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Buyer"},
            "from": {"id": from, "is_bot": false, "first_name": "Buyer"},
            "successful_payment": {
                "currency": currency,
                "total_amount": amount,
                "invoice_payload": payload,
                "telegram_payment_charge_id": charge_id,
                "provider_payment_charge_id": ""
            }
        }
    })
}

fn join_request_update(chat_id: i64, from: i64) -> Value {
    json!({
        "update_id": next_update_id(),
        "chat_join_request": {
            "chat": {"id": chat_id, "type": "channel", "title": "Private"},
            "from": {"id": from, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": from,
            "date": Utc::now().timestamp()
        }
    })
}

// ---- set-up and row checks ----

/// An active Stars channel (`XTR`, [`PRICE`] stars for 30 days), optionally seat-limited.
pub(crate) async fn stars_channel(app: &TestApp, chat_id: i64, seat_limit: Option<i64>) -> i64 {
    let mut extra = json!({"currency": "XTR", "price_minor": PRICE});
    if let Some(limit) = seat_limit {
        extra["seat_limit"] = json!(limit);
    }
    let c = app.create_channel(chat_id, extra).await;
    c["id"].as_i64().unwrap()
}

pub(crate) async fn subscriber(app: &TestApp, telegram_user_id: i64) -> i64 {
    app.create_subscriber(telegram_user_id).await["id"]
        .as_i64()
        .unwrap()
}

/// Creates an order; returns `(id, reference)`.
pub(crate) async fn order(app: &TestApp, subscriber_id: i64, channel_id: i64) -> (i64, String) {
    let o = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id}),
        )
        .await
        .expect(201);
    (
        o["id"].as_i64().unwrap(),
        o["reference"].as_str().unwrap().to_string(),
    )
}

/// Sends a pre-checkout for `payload` in Stars at [`PRICE`]; returns the answer body after
/// checking it is a well-formed `answerPreCheckoutQuery` for this query.
pub(crate) async fn pre_checkout(app: &TestApp, query_id: &str, from: i64, payload: &str) -> Value {
    let r = app
        .post_telegram_update(pre_checkout_update(query_id, from, payload, "XTR", PRICE))
        .await;
    answer_of(&r, query_id)
}

#[track_caller]
pub(crate) fn answer_of(r: &TestResponse, query_id: &str) -> Value {
    let body = r.expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(body["method"], "answerPreCheckoutQuery");
    assert_eq!(body["pre_checkout_query_id"], query_id);
    if body["ok"] == true {
        assert!(body.get("error_message").is_none(), "{body}");
    } else {
        assert_eq!(body["ok"], false, "{body}");
        assert!(
            body["error_message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    body
}

pub(crate) async fn pay(app: &TestApp, charge_id: &str, from: i64, payload: &str) {
    let r = app
        .post_telegram_update(payment_update(charge_id, from, payload, "XTR", PRICE))
        .await;
    assert_eq!(r.expect(200), json!({}));
}

/// `(ok, reason, hold_until)` of the stored decision of a query.
pub(crate) async fn decision(
    app: &TestApp,
    query_id: &str,
) -> (bool, Option<String>, Option<DateTime<Utc>>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT ok, reason, hold_until FROM pre_checkout_decisions WHERE query_id = $1",
            &[&query_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// `(outcome, reason)` of the Stars payment with this charge id.
pub(crate) async fn payment(app: &TestApp, charge_id: &str) -> (String, Option<String>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason FROM payments
             WHERE gateway = 'telegram_stars' AND external_id = $1",
            &[&charge_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

// ---- join requests ----

#[tokio::test]
async fn join_requests_are_approved_for_members_only() {
    let app = TestApp::spawn().await;
    let chat = -10_001;
    let channel = app
        .create_channel(
            chat,
            json!({"currency": "XTR", "price_minor": PRICE, "grace_period_days": 3}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let member = subscriber(&app, 1701).await;
    let lapsed = subscriber(&app, 1702).await;
    let in_grace = subscriber(&app, 1703).await;
    let unswept = subscriber(&app, 1704).await;

    let (_, reference) = order(&app, member, channel).await;
    assert_eq!(
        pre_checkout(&app, "join-pay", 1701, &reference).await["ok"],
        true
    );
    pay(&app, "charge-join", 1701, &reference).await;

    let ask = |user: i64| {
        let app = &app;
        async move {
            let r = app
                .post_telegram_update(join_request_update(chat, user))
                .await;
            let body = r.expect(200);
            assert_eq!(body["chat_id"], chat);
            assert_eq!(body["user_id"], user);
            body["method"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(ask(1701).await, "approveChatJoinRequest", "paid member");
    assert_eq!(ask(4242).await, "declineChatJoinRequest", "stranger");
    // A member of another chat asks to join a chat we do not know.
    let r = app
        .post_telegram_update(join_request_update(-99, 1701))
        .await;
    assert_eq!(r.expect(200)["method"], "declineChatJoinRequest");

    let grant = |subscriber_id: i64| {
        let app = &app;
        async move {
            app.post(
                "/api/memberships",
                json!({"subscriber_id": subscriber_id, "channel_id": channel, "days": 30}),
            )
            .await
            .expect(201)["id"]
                .as_i64()
                .unwrap()
        }
    };
    let m = grant(lapsed).await;
    let past = (Utc::now() - chrono::Duration::days(10)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired", "expires_at": past}),
    )
    .await
    .expect(200);
    assert_eq!(ask(1702).await, "declineChatJoinRequest", "expired member");

    let m = grant(in_grace).await;
    let yesterday = (Utc::now() - chrono::Duration::days(1)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "grace", "expires_at": yesterday}),
    )
    .await
    .expect(200);
    assert_eq!(ask(1703).await, "approveChatJoinRequest", "member in grace");

    // Still `active` because the sweep has not run, but past term and grace: not let in.
    let m = grant(unswept).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"expires_at": past}),
    )
    .await
    .expect(200);
    assert_eq!(
        ask(1704).await,
        "declineChatJoinRequest",
        "lapsed, not yet swept"
    );
}

// ---- the door itself ----

#[tokio::test]
async fn the_secret_token_is_required() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -11_001, None).await;
    let s = subscriber(&app, 1801).await;
    let (_, reference) = order(&app, s, channel).await;
    let update = payment_update("charge-auth", 1801, &reference, "XTR", PRICE).to_string();
    let send = |secret: Option<&'static str>| {
        let (app, update) = (&app, update.clone());
        async move {
            let mut headers = vec![("content-type", "application/json")];
            if let Some(s) = secret {
                headers.push(("x-telegram-bot-api-secret-token", s));
            }
            app.request(Method::POST, "/api/webhook/telegram", &headers, update)
                .await
        }
    };
    for secret in [None, Some("wrong-secret-token-0123456789"), Some("")] {
        let r = send(secret).await;
        assert_eq!(r.status, 401, "{secret:?}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.header("www-authenticate").is_none());
    }
    // A prefix of the right secret is not the secret.
    let prefix: &'static str = &TELEGRAM_SECRET[..TELEGRAM_SECRET.len() - 1];
    assert_eq!(send(Some(prefix)).await.status, 401);
    let payments = app.count("payments").await;
    assert_eq!(payments, 0, "nothing stored for a 401");

    assert_eq!(send(Some(TELEGRAM_SECRET)).await.expect(200), json!({}));
    assert_eq!(payment(&app, "charge-auth").await, ("applied".into(), None));
}

#[tokio::test]
async fn an_unset_secret_closes_the_door() {
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_WEBHOOK_SECRET".into(), String::new());
    })
    .await;
    let r = app
        .post_telegram_update(pre_checkout_update("closed", 1, "ord_x", "XTR", PRICE))
        .await;
    r.expect(503);
    let decisions = app.count("pre_checkout_decisions").await;
    assert_eq!(decisions, 0);
}

#[tokio::test]
async fn malformed_bodies_are_400_and_unknown_updates_are_ignored() {
    let app = TestApp::spawn().await;
    let raw = |body: &'static str| {
        let app = &app;
        async move {
            app.request(
                Method::POST,
                "/api/webhook/telegram",
                &[
                    ("content-type", "application/json"),
                    ("x-telegram-bot-api-secret-token", TELEGRAM_SECRET),
                ],
                body,
            )
            .await
        }
    };
    for body in [
        "",
        "{",
        "not json",
        "[]",
        r#"{"message": {}}"#,
        r#"{"update_id": "x"}"#,
        r#"{"update_id": 1, "pre_checkout_query": {"id": "q"}}"#,
        r#"{"update_id": 1, "message": {"message_id": 1, "date": 1, "chat": {"id": 1},
            "successful_payment": {"currency": "XTR"}}}"#,
    ] {
        let r = raw(body).await;
        assert_eq!(
            r.status,
            400,
            "{body}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    // Well-formed but impossible values: 422, nothing stored.
    let mut bad = payment_update("", 1, "ord_x", "XTR", PRICE);
    let r = app.post_telegram_update(bad.clone()).await;
    r.expect(422);
    bad["message"]["successful_payment"]["telegram_payment_charge_id"] = json!("c-1");
    bad["message"]["successful_payment"]["currency"] = json!("xtr");
    app.post_telegram_update(bad).await.expect(422);
    assert_eq!(app.count("payments").await, 0);

    // Updates the bot does not handle. (Commands and button presses are the buyer
    // conversation's: tests/api/bot/.)
    let ignored = [
        json!({"update_id": 1}),
        json!({"update_id": 2, "edited_message": {"message_id": 1, "date": 1700000000,
            "chat": {"id": 5, "type": "private"}, "from": {"id": 5, "is_bot": false,
            "first_name": "A"}, "text": "/start"}}),
        json!({"update_id": 3, "channel_post": {"message_id": 1, "date": 1700000000,
            "chat": {"id": -100, "type": "channel"}, "text": "/start"}}),
        json!({"update_id": 4, "my_chat_member": {"chat": {"id": -1}, "date": 1}}),
    ];
    for update in ignored {
        let r = app.post_telegram_update(update.clone()).await;
        assert_eq!(r.expect(200), json!({}), "{update}");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn a_database_stall_at_pre_checkout_is_an_unstored_try_again() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -12_001, Some(1)).await;
    let s = subscriber(&app, 1901).await;
    let (order_id, reference) = order(&app, s, channel).await;

    // Another transaction holds the order row (as a long payment would).
    let mut blocker = app.db().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM orders WHERE id = $1 FOR UPDATE",
        &[&order_id],
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let busy = pre_checkout(&app, "stall-1", 1901, &reference).await;
    let took = started.elapsed();
    assert_eq!(busy["ok"], false);
    assert_eq!(busy["error_message"], BUSY);
    assert!(
        took < std::time::Duration::from_secs(6),
        "answered in {took:?}"
    );
    tx.rollback().await.unwrap();

    let stored = app.count("pre_checkout_decisions").await;
    assert_eq!(stored, 0, "a refusal forced by the timeout is not stored");
    assert_eq!(order_row(&app, order_id).await.hold_until, None);
    // Telegram asks again with the same query: decided for real this time.
    assert_eq!(
        pre_checkout(&app, "stall-1", 1901, &reference).await["ok"],
        true
    );
    assert!(order_row(&app, order_id).await.hold_until.is_some());
}

#[tokio::test]
async fn a_database_outage_refuses_pre_checkout_and_makes_telegram_retry_payments() {
    // A state over a database that refuses connections; no TestApp (it needs a database).
    let mut env = crate::support::helpers::test_env("postgres://postgres@127.0.0.1:1/none");
    env.remove("ADMIN_EMAIL");
    env.remove("ADMIN_PASSWORD");
    let config = subgate::Config::from_lookup(|k| env.get(k).cloned()).unwrap();
    let pool = subgate::db::pool(config.database_url.expose(), 2).unwrap();
    let state = subgate::AppState::new(config, pool).await.unwrap();
    let router = subgate::router(state);
    let send = |update: Value| {
        let router = router.clone();
        async move {
            use http_body_util::BodyExt;
            use tower::ServiceExt;
            let req = axum::http::Request::post("/api/webhook/telegram")
                .header("content-type", "application/json")
                .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
                .body(axum::body::Body::from(update.to_string()))
                .unwrap();
            let r = router.oneshot(req).await.unwrap();
            let status = r.status().as_u16();
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (status, body) = send(pre_checkout_update("down", 1, "ord_x", "XTR", PRICE)).await;
    assert_eq!(status, 200);
    assert_eq!(body["ok"], false);
    assert_eq!(body["error_message"], BUSY);
    let (status, _) = send(payment_update("c-down", 1, "ord_x", "XTR", PRICE)).await;
    assert_eq!(status, 503, "Telegram must deliver the payment again");
    let (status, _) = send(join_request_update(-1, 1)).await;
    assert_eq!(status, 503);
}

/// A `pre_checkout_query` whose id or payload Telegram never sends (an id the decisions table
/// cannot key, a NUL PostgreSQL text cannot hold) is refused with 422 before any decision,
/// like a `successful_payment` with impossible values; nothing is stored.
#[tokio::test]
async fn a_pre_checkout_query_with_values_telegram_never_sends_is_422() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -5200, None).await;
    let buyer = subscriber(&app, 5200).await;
    let (_, reference) = order(&app, buyer, channel).await;
    let long_id = "q".repeat(256);
    for (query_id, payload, field) in [
        ("", reference.as_str(), "pre_checkout_query.id"),
        (
            long_id.as_str(),
            reference.as_str(),
            "pre_checkout_query.id",
        ),
        ("q\0nul", reference.as_str(), "pre_checkout_query.id"),
        (
            "q-nul-payload",
            "ord_\0",
            "pre_checkout_query.invoice_payload",
        ),
    ] {
        let r = app
            .post_telegram_update(pre_checkout_update(query_id, 5200, payload, "XTR", PRICE))
            .await;
        let body = r.expect(422);
        assert!(body["errors"].get(field).is_some(), "{query_id:?}: {body}");
    }
    let decisions = app.count("pre_checkout_decisions").await;
    assert_eq!(decisions, 0);
}
