//! The set-up shared by the tests of Telegram effects through the outbox (`effects_*` modules:
//! delivery, retries, refunds, concurrency, config), against a fake Bot API ([`FakeBot`]): a
//! real HTTP server inside the test that records calls and can answer 429, 500, errors, hang, or
//! hold a call open until the test releases it.
//!
//! The worker is run directly (`worker::run_once`, or a [`Worker`] with a short call timeout);
//! time is moved by back-dating rows with SQL (`next_attempt_at`, `expires_at`), never by
//! sleeping through backoffs.

use std::{
    sync::atomic::{AtomicI64, Ordering},
    time::Duration,
};

use chrono::Utc;
use serde_json::{Value, json};
use subgate::app::worker::{self, Options, RunReport, Worker};

use crate::support::{
    fake_bot::{FakeBot, TOKEN},
    helpers::TestApp,
};

static UPDATE_ID: AtomicI64 = AtomicI64::new(1_000_000);

pub(crate) fn next_id() -> i64 {
    UPDATE_ID.fetch_add(1, Ordering::Relaxed)
}

// ---- set-up ----

/// An app whose Bot API is `fake`, with the test token.
pub(crate) async fn app_with(fake: &FakeBot) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await
}

pub(crate) async fn run(app: &TestApp) -> RunReport {
    worker::run_once(&app.state).await.unwrap()
}

/// Runs the worker, making what is left pending due again (a message paced behind another one
/// to the same buyer, rate-limited for a moment), until nothing is pending; at most 10 runs.
pub(crate) async fn run_until_done(app: &TestApp) {
    for _ in 0..10 {
        run(app).await;
        if app.count("effects WHERE status = 'pending'").await == 0 {
            return;
        }
        make_due(app).await;
    }
    panic!("effects still pending after 10 runs");
}

/// A worker whose Bot API calls time out after `ms` milliseconds.
pub(crate) fn worker(app: &TestApp, ms: u64) -> Worker {
    Worker::new(
        app.state.clone(),
        Options {
            call_timeout: Duration::from_millis(ms),
            ..Options::default()
        },
    )
}

pub(crate) async fn subscriber(app: &TestApp, telegram_user_id: i64) -> i64 {
    app.create_subscriber(telegram_user_id).await["id"]
        .as_i64()
        .unwrap()
}

pub(crate) async fn channel(app: &TestApp, chat_id: i64, extra: Value) -> i64 {
    app.create_channel(chat_id, extra).await["id"]
        .as_i64()
        .unwrap()
}

/// A Stars channel: 50 stars for 30 days.
pub(crate) async fn stars_channel(app: &TestApp, chat_id: i64) -> i64 {
    channel(app, chat_id, json!({"currency": "XTR", "price_minor": 50})).await
}

/// Staff grant of `days`; returns the membership id.
pub(crate) async fn grant(app: &TestApp, subscriber_id: i64, channel_id: i64, days: i64) -> i64 {
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id, "days": days}),
        )
        .await;
    assert!(
        r.status.is_success(),
        "grant: {}",
        String::from_utf8_lossy(&r.bytes)
    );
    r.json()["id"].as_i64().unwrap()
}

pub(crate) async fn patch_membership(app: &TestApp, id: i64, body: Value) -> Value {
    app.patch(&format!("/api/memberships/{id}"), body)
        .await
        .expect(200)
}

/// `POST /api/sweep`, then the sweep's queued effects made effects, as the worker's next run
/// would begin by doing (`effects::materialize_sweep_queue`), so the caller sees them.
pub(crate) async fn sweep(app: &TestApp) -> Value {
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    materialize(app).await;
    report
}

/// Makes effects of every queued sweep row (chunk after chunk until the queue is empty).
pub(crate) async fn materialize(app: &TestApp) {
    let client = app.app_db().await;
    while subgate::outbox::effects::materialize_sweep_queue(&client)
        .await
        .expect("the sweep queue is made effects")
        > 0
    {}
}

/// The effects of `kind` (all statuses), via the staff API.
pub(crate) async fn effects_of(app: &TestApp, kind: &str) -> Vec<Value> {
    app.get(&format!("/api/effects?kind={kind}&limit=200"))
        .await
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone()
}

pub(crate) async fn effect(app: &TestApp, id: i64) -> Value {
    app.get(&format!("/api/effects/{id}")).await.expect(200)
}

/// Marks every pending effect done (set-up noise such as the grant of a staff membership).
pub(crate) async fn settle(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET status = 'done', done_at = now() WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap();
}

/// Makes every pending effect due now (time passing, without sleeping).
pub(crate) async fn make_due(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET next_attempt_at = now() WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap();
}

pub(crate) async fn membership_status(app: &TestApp, id: i64) -> String {
    app.db()
        .await
        .query_one("SELECT status FROM memberships WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

pub(crate) fn payment_update(charge_id: &str, from: i64, payload: &str, amount: i64) -> Value {
    json!({
        "update_id": next_id(),
        "message": {
            "message_id": next_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Buyer"},
            "from": {"id": from, "is_bot": false, "first_name": "Buyer"},
            "successful_payment": {
                "currency": "XTR", "total_amount": amount, "invoice_payload": payload,
                "telegram_payment_charge_id": charge_id, "provider_payment_charge_id": ""
            }
        }
    })
}

pub(crate) fn join_request_update(chat_id: i64, from: i64, date: i64) -> Value {
    json!({
        "update_id": next_id(),
        "chat_join_request": {
            "chat": {"id": chat_id, "type": "channel", "title": "Private"},
            "from": {"id": from, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": from,
            "date": date
        }
    })
}

/// A `refund_pending` Stars payment: the order is paid by `first`, then paid again by `second`
/// (`already_paid`, which we refund ourselves). Returns the second payment's id.
pub(crate) async fn refund_pending_payment(
    app: &TestApp,
    user: i64,
    chat: i64,
    first: &str,
    second: &str,
) -> i64 {
    let s = subscriber(app, user).await;
    let c = stars_channel(app, chat).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap();
    app.post_telegram_update(payment_update(first, user, reference, 50))
        .await
        .expect(200);
    app.post_telegram_update(payment_update(second, user, reference, 50))
        .await
        .expect(200);
    let row = app
        .db()
        .await
        .query_one(
            "SELECT id, outcome FROM payments WHERE external_id = $1",
            &[&second],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(1), "refund_pending");
    settle(app).await; // the first payment's grant
    row.get(0)
}

pub(crate) async fn payment_outcome(app: &TestApp, id: i64) -> String {
    app.db()
        .await
        .query_one("SELECT outcome FROM payments WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

pub(crate) async fn subscriber_id(app: &TestApp, telegram_user_id: i64) -> i64 {
    subscriber(app, telegram_user_id).await
}
