//! Telegram effects through the outbox, against a fake Bot API ([`FakeBot`]): a real HTTP server
//! inside the test that records calls and can answer 429, 500, errors, hang, or hold a call
//! open until the test releases it.
//!
//! The worker is run directly (`worker::run_once`, or a [`Worker`] with a short call timeout);
//! time is moved by back-dating rows with SQL (`next_attempt_at`, `expires_at`), never by
//! sleeping through backoffs.

use std::{
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::{
    memberships,
    telegram::recovery,
    worker::{self, Options, RunReport, Worker},
};
use tokio::sync::Barrier;

use crate::{
    fake_bot::{FakeBot, Reply, TOKEN, TOKEN_SECRET},
    helpers::TestApp,
};

static UPDATE_ID: AtomicI64 = AtomicI64::new(1_000_000);

fn next_id() -> i64 {
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

/// A worker whose Bot API calls time out after `ms` milliseconds.
fn worker(app: &TestApp, ms: u64) -> Worker {
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
async fn stars_channel(app: &TestApp, chat_id: i64) -> i64 {
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

pub(crate) async fn sweep(app: &TestApp) -> Value {
    app.post("/api/sweep", Value::Null).await.expect(200)
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

async fn effect(app: &TestApp, id: i64) -> Value {
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
async fn make_due(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET next_attempt_at = now() WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap();
}

async fn db_now(app: &TestApp) -> DateTime<Utc> {
    app.db()
        .await
        .query_one("SELECT statement_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

pub(crate) async fn membership_status(app: &TestApp, id: i64) -> String {
    app.db()
        .await
        .query_one("SELECT status FROM memberships WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

fn payment_update(charge_id: &str, from: i64, payload: &str, amount: i64) -> Value {
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

fn join_request_update(chat_id: i64, from: i64, date: i64) -> Value {
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
async fn refund_pending_payment(
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

async fn payment_outcome(app: &TestApp, id: i64) -> String {
    app.db()
        .await
        .query_one("SELECT outcome FROM payments WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

// ---- grant and receipt ----

#[tokio::test]
async fn a_payment_grants_exactly_once_and_a_duplicate_webhook_grants_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_101, 5101);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay-grant-1").await.expect(200);
    let dup = app.pay_order(&order, "pay-grant-1").await.expect(200);
    assert_eq!(dup["duplicate"], true);

    let grants = effects_of(&app, "grant").await;
    assert_eq!(grants.len(), 1, "one grant for one payment: {grants:?}");
    assert_eq!(grants[0]["status"], "pending");
    assert_eq!(
        (grants[0]["chat_id"].as_i64(), grants[0]["user_id"].as_i64()),
        (Some(chat), Some(user))
    );

    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(
        fake.methods(),
        ["unbanChatMember", "createChatInviteLink", "sendMessage"]
    );
    let unban = &fake.calls_of("unbanChatMember")[0].params;
    assert_eq!(
        unban["only_if_banned"], true,
        "a member inside must never be kicked"
    );
    assert_eq!(
        (unban["chat_id"].as_i64(), unban["user_id"].as_i64()),
        (Some(chat), Some(user))
    );
    let link = &fake.calls_of("createChatInviteLink")[0].params;
    assert_eq!(link["creates_join_request"], true);
    let message = &fake.calls_of("sendMessage")[0].params;
    assert_eq!(message["chat_id"].as_i64(), Some(user));
    let stored: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT invite_link FROM channels WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap()
        .get(0);
    let stored = stored.expect("the channel's join link is stored");
    assert!(
        message["text"].as_str().unwrap().contains(&stored),
        "{message}"
    );
    assert_eq!(
        effect(&app, grants[0]["id"].as_i64().unwrap()).await["status"],
        "done"
    );

    // Nothing more to do; a late duplicate delivery changes nothing either.
    fake.clear_calls();
    assert_eq!(run(&app).await.done, 0);
    app.pay_order(&order, "pay-grant-1").await.expect(200);
    assert_eq!(run(&app).await.done, 0);
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(effects_of(&app, "grant").await.len(), 1);

    // A second buyer of the channel gets the stored link: no second createChatInviteLink.
    let s2 = subscriber(&app, 5102).await;
    let order2 = app.create_order(s2, c).await;
    app.pay_order(&order2, "pay-grant-2").await.expect(200);
    run(&app).await;
    assert_eq!(fake.methods(), ["unbanChatMember", "sendMessage"]);
    assert!(
        fake.calls_of("sendMessage")[0].params["text"]
            .as_str()
            .unwrap()
            .contains(&stored)
    );
}

#[tokio::test]
async fn a_renewal_of_an_active_member_sends_a_receipt_not_a_grant() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_102, 5201);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let first = app.create_order(s, c).await;
    app.pay_order(&first, "pay-r-1").await.expect(200);
    run(&app).await;
    fake.clear_calls();

    let second = app.create_order(s, c).await;
    app.pay_order(&second, "pay-r-2").await.expect(200);
    assert_eq!(effects_of(&app, "grant").await.len(), 1);
    let receipts = effects_of(&app, "renewal_receipt").await;
    assert_eq!(receipts.len(), 1);
    assert!(receipts[0]["payment_id"].is_i64());
    run(&app).await;
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert_eq!(fake.calls()[0].params["chat_id"].as_i64(), Some(user));
}

// ---- revoke ----

#[tokio::test]
async fn the_sweep_to_expired_kicks_exactly_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_103, 5301);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    fake.clear_calls();

    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert!(
        effects_of(&app, "revoke").await.is_empty(),
        "back-dating alone kicks nobody"
    );
    assert_eq!(sweep(&app).await["to_expired"], 1);
    assert_eq!(sweep(&app).await["to_expired"], 0);
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1);
    assert_eq!(revokes[0]["membership_id"].as_i64(), Some(m));

    run(&app).await;
    assert_eq!(fake.methods(), ["banChatMember", "unbanChatMember"]);
    assert_eq!(
        fake.calls_of("unbanChatMember")[0].params["only_if_banned"],
        true
    );
    assert!(!fake.is_member(chat, user), "removed from the channel");
    assert!(!fake.is_banned(chat, user), "free to rejoin after paying");
    fake.clear_calls();
    sweep(&app).await;
    run(&app).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_racing_the_sweep_never_kicks() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let chat = -1_001_000_000_104;
    let c = channel(&app, chat, json!({})).await;

    // Deterministic worst case first: the sweep expires the membership, then the renewal
    // revives it before the worker runs. The revoke exists but must not be performed.
    let s = subscriber(&app, 5400).await;
    let first = app.create_order(s, c).await;
    app.pay_order(&first, "race-0-a").await.expect(200);
    let m: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM memberships WHERE subscriber_id = $1",
            &[&(s as i32)],
        )
        .await
        .unwrap()
        .get(0);
    let past = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert_eq!(sweep(&app).await["to_expired"], 1);
    let renewal = app.create_order(s, c).await;
    app.pay_order(&renewal, "race-0-b").await.expect(200);
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
    run(&app).await;
    assert!(
        fake.calls_of("banChatMember").is_empty(),
        "a renewed member was kicked"
    );
    let revoke = &effects_of(&app, "revoke").await[0];
    assert_eq!(revoke["status"], "done");
    assert!(
        revoke["payload"]["note"]
            .as_str()
            .unwrap()
            .contains("renewed"),
        "{revoke}"
    );

    // Then real races, released together.
    for round in 1..=10i64 {
        let user = 5400 + round;
        let s = subscriber(&app, user).await;
        let first = app.create_order(s, c).await;
        app.pay_order(&first, &format!("race-{round}-a"))
            .await
            .expect(200);
        let m: i64 = app
            .db()
            .await
            .query_one(
                "SELECT id FROM memberships WHERE subscriber_id = $1",
                &[&(s as i32)],
            )
            .await
            .unwrap()
            .get(0);
        patch_membership(&app, m, json!({"expires_at": past})).await;
        let renewal = app.create_order(s, c).await;
        let barrier = Arc::new(Barrier::new(2));
        let (a, b) = (app.clone(), app.clone());
        let (ba, bb) = (barrier.clone(), barrier.clone());
        let pay = tokio::spawn(async move {
            ba.wait().await;
            a.pay_order(&renewal, &format!("race-{round}-b"))
                .await
                .expect(200);
        });
        let swept = tokio::spawn(async move {
            bb.wait().await;
            b.post("/api/sweep", Value::Null).await.expect(200);
        });
        pay.await.unwrap();
        swept.await.unwrap();
        assert_eq!(membership_status(&app, m).await, "active", "round {round}");
        run(&app).await;
    }
    assert!(
        fake.calls_of("banChatMember").is_empty(),
        "renewed members were kicked: {:?}",
        fake.calls_of("banChatMember")
    );
}

// ---- at least once, harmless when repeated ----

/// Makes every attempt to record an effect as done fail, as if the worker died between the
/// Telegram call and its commit.
async fn break_recording(app: &TestApp) {
    app.db()
        .await
        .batch_execute(
            "CREATE FUNCTION test_fail_done() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.status = 'done' THEN RAISE EXCEPTION 'simulated crash before commit'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER test_fail_done BEFORE UPDATE ON effects
                 FOR EACH ROW EXECUTE FUNCTION test_fail_done();",
        )
        .await
        .unwrap();
}

async fn repair_recording(app: &TestApp) {
    app.db()
        .await
        .batch_execute("DROP TRIGGER test_fail_done ON effects; DROP FUNCTION test_fail_done();")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_worker_dying_after_the_call_but_before_recording_repeats_harmlessly() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_105, 5501);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;

    // A grant: the member is already inside (say the first attempt got them in).
    let m = grant(&app, s, c, 30).await;
    fake.add_member(chat, user);
    break_recording(&app).await;
    let report = run(&app).await;
    assert_eq!(report.unrecorded, 1, "{report:?}");
    assert_eq!(
        fake.methods(),
        ["unbanChatMember", "createChatInviteLink", "sendMessage"]
    );
    let g = &effects_of(&app, "grant").await[0];
    assert_eq!(
        (g["status"].as_str(), g["attempts"].as_i64()),
        (Some("pending"), Some(0))
    );
    repair_recording(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(
        effect(&app, g["id"].as_i64().unwrap()).await["status"],
        "done"
    );
    assert_eq!(fake.methods()[0], "unbanChatMember");
    assert!(
        fake.is_member(chat, user),
        "repeating the grant never kicked the member"
    );
    assert!(!fake.is_banned(chat, user));

    // A revoke, same story: ban + unban twice ends exactly like once.
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    sweep(&app).await;
    fake.clear_calls();
    break_recording(&app).await;
    assert_eq!(run(&app).await.unrecorded, 1);
    repair_recording(&app).await;
    run(&app).await;
    assert_eq!(
        fake.methods(),
        [
            "banChatMember",
            "unbanChatMember",
            "banChatMember",
            "unbanChatMember"
        ]
    );
    assert!(!fake.is_member(chat, user) && !fake.is_banned(chat, user));
    assert_eq!(effects_of(&app, "revoke").await[0]["status"], "done");
}

// ---- 429, 5xx, dead letters ----

#[tokio::test]
async fn a_429_waits_retry_after() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_106, 5601);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    fake.script("unbanChatMember", Reply::TooManyRequests(30));
    let before = db_now(&app).await;
    let report = run(&app).await;
    assert_eq!(report.rate_limited, 1, "{report:?}");
    let g = &effects_of(&app, "grant").await[0];
    assert_eq!(g["status"], "pending");
    assert_eq!(
        g["attempts"], 0,
        "Telegram's pace is not the effect's failure"
    );
    let next: DateTime<Utc> = serde_json::from_value(g["next_attempt_at"].clone()).unwrap();
    assert!(
        next >= before + chrono::Duration::seconds(30),
        "next attempt {next} is sooner than retry_after after {before}"
    );
    assert!(next <= db_now(&app).await + chrono::Duration::seconds(32));
    assert!(g["last_error"].as_str().unwrap().contains("429"), "{g}");
    // Not due yet: nothing is called.
    fake.clear_calls();
    assert_eq!(run(&app).await, RunReport::default());
    assert!(fake.calls().is_empty());
}

/// Moves an effect's first failure `hours` into the past (time passing, without sleeping).
async fn first_failed_hours_ago(app: &TestApp, id: i64, hours: f64) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET first_failed_at = now() - make_interval(secs => $2)
             WHERE id = $1",
            &[&id, &(hours * 3600.0)],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn server_errors_back_off_for_72_hours_then_dead_letter_visible_to_staff_and_retryable() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_107, 5701);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    fake.always("unbanChatMember", Reply::ServerError);
    let mut last_delay = 0.0;
    let mut first_failed = None;
    for attempt in 1..=10 {
        let report = run(&app).await;
        let e = effect(&app, id).await;
        assert_eq!(e["attempts"], attempt, "{e}");
        assert_eq!(report.retried, 1, "{report:?}");
        assert_eq!(e["status"], "pending");
        // The horizon counts from the first failure, which later ones leave alone.
        assert!(e["first_failed_at"].is_string(), "{e}");
        assert_eq!(
            *first_failed.get_or_insert(e["first_failed_at"].clone()),
            e["first_failed_at"]
        );
        let next: DateTime<Utc> = serde_json::from_value(e["next_attempt_at"].clone()).unwrap();
        let at: DateTime<Utc> = serde_json::from_value(e["updated_at"].clone()).unwrap();
        let delay = (next - at).num_milliseconds() as f64 / 1000.0;
        let full = (10.0 * 2f64.powi(attempt - 1)).min(3600.0);
        assert!(
            delay >= full / 2.0 - 0.01 && delay <= full + 0.01,
            "attempt {attempt}: delay {delay} s, expected {}..{full}",
            full / 2.0
        );
        assert!(attempt == 1 || delay >= last_delay / 2.0, "backoff grows");
        last_delay = delay;
        // Backing off: not due, not called.
        let calls = fake.calls().len();
        run(&app).await;
        assert_eq!(fake.calls().len(), calls, "called during backoff");
        make_due(&app).await;
    }
    // 71 hours after the first failure: still retried.
    first_failed_hours_ago(&app, id, 71.0).await;
    assert_eq!(run(&app).await.retried, 1);
    assert_eq!(effect(&app, id).await["status"], "pending");
    // 72 hours: the next failure is the last.
    first_failed_hours_ago(&app, id, 72.01).await;
    make_due(&app).await;
    let report = run(&app).await;
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(effect(&app, id).await["attempts"], 12);
    assert_eq!(fake.calls_of("unbanChatMember").len(), 12);
    let failed = app.get("/api/effects?status=failed").await.expect(200);
    let items = failed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"].as_i64(), Some(id));
    let error = items[0]["last_error"].as_str().unwrap();
    assert!(error.contains("500"), "{error}");
    assert!(!error.contains(TOKEN_SECRET));
    // A dead letter stays put.
    make_due(&app).await;
    run(&app).await;
    assert_eq!(fake.calls_of("unbanChatMember").len(), 12);

    // Staff fix the cause and send it back, with a fresh budget.
    fake.reset("unbanChatMember");
    let retried = app
        .post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(200);
    assert_eq!(
        (retried["status"].as_str(), retried["attempts"].as_i64()),
        (Some("pending"), Some(0))
    );
    assert_eq!(retried["first_failed_at"], Value::Null);
    run(&app).await;
    assert_eq!(effect(&app, id).await["status"], "done");
    assert_eq!(
        app.get("/api/effects?status=failed").await.expect(200)["items"],
        json!([])
    );
    app.post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(409);
    app.post("/api/effects/999999/retry", Value::Null)
        .await
        .expect(404);
    app.get("/api/effects?status=nope").await.expect(422);
    app.get("/api/effects?colour=red").await.expect(400);
}

#[tokio::test]
async fn a_definite_refusal_is_a_dead_letter_at_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let s = subscriber(&app, 5801).await;
    let c = channel(&app, -1_001_000_000_108, json!({})).await;
    grant(&app, s, c, 30).await;
    fake.script(
        "unbanChatMember",
        Reply::Error(400, "Bad Request: chat not found".into()),
    );
    assert_eq!(run(&app).await.failed, 1);
    let g = &effects_of(&app, "grant").await[0];
    assert_eq!(
        (g["status"].as_str(), g["attempts"].as_i64()),
        (Some("failed"), Some(1))
    );
    assert!(g["last_error"].as_str().unwrap().contains("chat not found"));
}

// ---- Stars refunds ----

#[tokio::test]
async fn a_refund_succeeds() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6001, -1_001_000_000_201, "ch-ok-1", "ch-ok-2").await;
    run(&app).await;
    let calls = fake.calls_of("refundStarPayment");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].params,
        json!({"user_id": 6001, "telegram_payment_charge_id": "ch-ok-2"})
    );
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let refunds = effects_of(&app, "refund").await;
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0]["status"], "done");
    // The scan never enqueues a second refund for the payment.
    run(&app).await;
    assert_eq!(effects_of(&app, "refund").await.len(), 1);
    assert_eq!(fake.calls_of("refundStarPayment").len(), 1);
}

#[tokio::test]
async fn an_already_refunded_charge_counts_as_refunded() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6002, -1_001_000_000_202, "ch-ar-1", "ch-ar-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: CHARGE_ALREADY_REFUNDED".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

#[tokio::test]
async fn a_refused_refund_is_refund_failed_for_staff() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6003, -1_001_000_000_203, "ch-no-1", "ch-no-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: CHARGE_NOT_FOUND".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refund_failed");
    let failed = app
        .get("/api/effects?status=failed&kind=refund")
        .await
        .expect(200);
    assert_eq!(failed["items"][0]["payment_id"].as_i64(), Some(p));
}

#[tokio::test]
async fn a_refund_timeout_stays_pending_until_the_refund_is_seen_in_star_transactions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6004, -1_001_000_000_204, "ch-to-1", "ch-to-2").await;
    // Telegram refunds, but the answer is lost.
    fake.script("refundStarPayment", Reply::PerformThenHang);
    let report = worker(&app, 500).run(true, &|| false).await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert!(fake.was_refunded("ch-to-2"));
    assert_eq!(
        payment_outcome(&app, p).await,
        "refund_pending",
        "unknown until confirmed"
    );
    let e = &effects_of(&app, "refund").await[0];
    assert_eq!(e["payload"]["verify"], true);
    assert!(
        e["last_error"].as_str().unwrap().contains("no answer"),
        "{e}"
    );

    // The next attempt looks first and finds the outgoing refund: no second refund call.
    make_due(&app).await;
    worker(&app, 500).run(false, &|| false).await.unwrap();
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    assert_eq!(fake.calls_of("refundStarPayment").len(), 1);
    assert!(!fake.calls_of("getStarTransactions").is_empty());
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

#[tokio::test]
async fn reconcile_confirms_a_refund_only_when_it_went_to_the_payer() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6005, -1_001_000_000_205, "ch-rc-1", "ch-rc-2").await;
    fake.script("refundStarPayment", Reply::Hang);
    worker(&app, 300).run(true, &|| false).await.unwrap();
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    // An outgoing transaction with the charge id but to someone else is not our refund.
    fake.add_refund_transaction("ch-rc-2", 9999, 50);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.refunds_confirmed, 0);
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    fake.add_refund_transaction("ch-rc-2", 6005, 50);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.refunds_confirmed, 1);
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    // The queued retry then sees the outcome and does not refund again.
    make_due(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert!(fake.calls_of("refundStarPayment").is_empty());
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

// ---- reconcile missed payments ----

#[tokio::test]
async fn reconcile_applies_a_missed_payment_exactly_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let user = 6101;
    let s = subscriber(&app, user).await;
    let c = stars_channel(&app, -1_001_000_000_301).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();
    // Unrelated traffic around it: another bot payment and a withdrawal.
    fake.add_incoming_payment("ch-other", 777, "not-an-order", 10);
    fake.add_incoming_payment("ch-missed", user, &reference, 50);

    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.payments_recovered, 2, "{r:?}"); // ours, and the unknown one kept for review
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, order_id FROM payments WHERE gateway = 'telegram_stars' AND external_id = 'ch-missed'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "applied");
    assert_eq!(row.get::<_, Option<i64>>(1), order["id"].as_i64());
    assert_eq!(
        app.count("payments WHERE external_id = 'ch-other' AND outcome = 'needs_review'")
            .await,
        1
    );
    assert_eq!(app.count("memberships WHERE status = 'active'").await, 1);
    assert_eq!(
        effects_of(&app, "grant").await.len(),
        1,
        "the recovered payment grants access"
    );

    // Twice, and then the late update itself: still one payment, one extension.
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.payments_recovered, 0);
    let late = app
        .post_telegram_update(payment_update("ch-missed", user, &reference, 50))
        .await;
    late.expect(200);
    assert_eq!(
        app.count("payments WHERE external_id = 'ch-missed'").await,
        1
    );
    assert_eq!(app.count("membership_events").await, 1);
}

// ---- concurrency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_perform_the_same_effect_at_the_same_time() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_401;
    let c = channel(&app, chat, json!({})).await;
    let mut members = Vec::new();
    for i in 0..12 {
        let s = subscriber(&app, 6200 + i).await;
        members.push((grant(&app, s, c, 30).await, 6200 + i));
    }
    fake.set_delay(Duration::from_millis(25));
    for round in 1..=3i64 {
        settle(&app).await;
        fake.clear_calls();
        // A new expiry each round, so each round has its own revokes.
        let when = (Utc::now() - chrono::Duration::minutes(round)).to_rfc3339();
        for (m, _) in &members {
            patch_membership(&app, *m, json!({"status": "expired", "expires_at": when})).await;
        }
        assert_eq!(
            app.count("effects WHERE kind = 'revoke' AND status = 'pending'")
                .await,
            12
        );
        let barrier = Arc::new(Barrier::new(2));
        let lanes = (0..2).map(|_| {
            let (state, barrier) = (app.state.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                Worker::new(state, Options::default())
                    .run(false, &|| false)
                    .await
                    .unwrap()
            })
        });
        let reports: Vec<RunReport> = futures::future::join_all(lanes)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            reports.iter().map(|r| r.done).sum::<u64>(),
            12,
            "{reports:?}"
        );
        assert_eq!(
            fake.overlaps(),
            0,
            "round {round}: an effect was performed twice at once"
        );
        for (_, user) in &members {
            let bans = fake
                .calls_of("banChatMember")
                .iter()
                .filter(|c| c.params["user_id"].as_i64() == Some(*user))
                .count();
            assert_eq!(bans, 1, "round {round}: user {user} banned {bans} times");
        }
        assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
        for (m, _) in &members {
            patch_membership(&app, *m, json!({"status": "active"})).await;
        }
    }
}

// ---- reminders and grace notices ----

#[tokio::test]
async fn reminders_once_per_period_and_a_notice_on_entering_grace() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_501, 6301);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({"grace_period_days": 3})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    assert!(
        effects_of(&app, "reminder").await.is_empty(),
        "30 days left: no reminder"
    );

    let soon = (Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": soon})).await;
    fake.clear_calls();
    run(&app).await;
    run(&app).await;
    let reminders = effects_of(&app, "reminder").await;
    assert_eq!(reminders.len(), 1, "one reminder per period");
    assert_eq!(reminders[0]["status"], "done");
    assert_eq!(fake.methods(), ["sendMessage"]);

    // A reminder overtaken by a renewal is not sent.
    let sooner = (Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": sooner})).await;
    let enqueued = memberships::enqueue_due_reminders(&app.db().await, 3)
        .await
        .unwrap();
    assert_eq!(enqueued, 1, "a new expiry is a new period");
    grant(&app, s, c, 30).await; // renewal before the worker runs
    fake.clear_calls();
    run(&app).await;
    let texts: Vec<String> = fake
        .calls_of("sendMessage")
        .iter()
        .map(|c| c.params["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), 1, "only the receipt: {texts:?}");
    assert!(texts[0].contains("now lasts until"), "{texts:?}");
    let skipped = effects_of(&app, "reminder").await;
    assert_eq!(skipped.len(), 2);
    assert!(
        skipped[1]["payload"]["note"]
            .as_str()
            .unwrap()
            .contains("skipped")
    );

    // Entering grace: one notice.
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert_eq!(sweep(&app).await["to_grace"], 1);
    sweep(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(effects_of(&app, "grace_notice").await.len(), 1);
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert!(
        fake.calls()[0].params["text"]
            .as_str()
            .unwrap()
            .contains("grace")
    );
}

// ---- join requests through the outbox ----

#[tokio::test]
async fn join_requests_are_answered_through_the_outbox() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_601;
    let c = channel(&app, chat, json!({})).await;
    let member = subscriber(&app, 6401).await;
    let m = grant(&app, member, c, 30).await;
    settle(&app).await;

    let date = Utc::now().timestamp();
    for user in [6401, 6402] {
        fake.open_join_request(chat, user);
        let r = app
            .post_telegram_update(join_request_update(chat, user, date))
            .await;
        assert_eq!(
            r.expect(200),
            json!({}),
            "answered through the outbox, not the reply"
        );
    }
    // Telegram redelivers the member's update: nothing new.
    app.post_telegram_update(join_request_update(chat, 6401, date))
        .await
        .expect(200);
    let approvals = effects_of(&app, "join_approve").await;
    let declines = effects_of(&app, "join_decline").await;
    assert_eq!((approvals.len(), declines.len()), (1, 1));
    assert_eq!(approvals[0]["user_id"], 6401);
    assert_eq!(declines[0]["user_id"], 6402);
    run(&app).await;
    assert!(fake.is_member(chat, 6401));
    assert!(!fake.is_member(chat, 6402));
    assert_eq!(fake.calls_of("approveChatJoinRequest").len(), 1);
    assert_eq!(fake.calls_of("declineChatJoinRequest").len(), 1);

    // A repeat of a settled request (Telegram says the requester is gone / already inside)
    // counts as done, not as a failure.
    let later = date + 60;
    app.post_telegram_update(join_request_update(chat, 6401, later))
        .await
        .expect(200);
    app.post_telegram_update(join_request_update(chat, 6402, later))
        .await
        .expect(200);
    let report = run(&app).await;
    assert_eq!((report.done, report.failed), (2, 0), "{report:?}");

    // The membership ends between the decision and the call: declined instead.
    fake.open_join_request(chat, 6401);
    app.post_telegram_update(join_request_update(chat, 6401, later + 60))
        .await
        .expect(200);
    patch_membership(&app, m, json!({"status": "expired"})).await;
    settle_kind(&app, "revoke").await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(fake.methods(), ["declineChatJoinRequest"]);
}

async fn settle_kind(app: &TestApp, kind: &str) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET status = 'done', done_at = now() WHERE status = 'pending' AND kind = $1",
            &[&kind],
        )
        .await
        .unwrap();
}

// ---- configuration: no token, dry run ----

#[tokio::test]
async fn without_a_token_effects_stay_queued() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
    })
    .await;
    let s = subscriber(&app, 6501).await;
    let c = channel(&app, -1_001_000_000_701, json!({})).await;
    grant(&app, s, c, 30).await;
    assert_eq!(run(&app).await, RunReport::default());
    assert_eq!(effects_of(&app, "grant").await[0]["status"], "pending");
    assert!(fake.calls().is_empty());
    // Join requests keep being answered in the webhook reply (the only way left).
    let r = app
        .post_telegram_update(join_request_update(-1_001_000_000_701, 6501, 1))
        .await;
    assert_eq!(r.expect(200)["method"], "approveChatJoinRequest");
}

#[tokio::test]
async fn dry_run_logs_instead_of_calling_and_marks_done() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_DRY_RUN".into(), "true".into());
    })
    .await;
    let s = subscriber(&app, 6601).await;
    let c = channel(&app, -1_001_000_000_702, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    let link: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT invite_link FROM channels WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(link, None, "a dry-run link is never stored");
    patch_membership(&app, m, json!({"status": "expired"})).await;
    assert_eq!(run(&app).await.done, 1);
    assert!(
        fake.calls().is_empty(),
        "dry run called Telegram: {:?}",
        fake.methods()
    );
    assert_eq!(app.count("effects WHERE status = 'done'").await, 2);
}

// ---- invoice links ----

#[tokio::test]
async fn invoice_links_are_made_once_for_stars_orders() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let s = subscriber(&app, 6701).await;
    let c = stars_channel(&app, -1_001_000_000_801).await;
    let order = app.create_order(s, c).await;
    let id = order["id"].as_i64().unwrap();
    let path = format!("/api/orders/{id}/invoice-link");
    let r = app.post(&path, Value::Null).await.expect(200);
    let link = r["order"]["invoice_link"].as_str().unwrap().to_string();
    assert!(link.starts_with("https://t.me/$"), "{r}");
    let calls = fake.calls_of("createInvoiceLink");
    assert_eq!(calls.len(), 1);
    let p = &calls[0].params;
    assert_eq!(p["payload"], order["reference"]);
    assert_eq!(p["currency"], "XTR");
    assert_eq!(p["prices"].as_array().unwrap().len(), 1);
    assert_eq!(p["prices"][0]["amount"], 50);
    assert!(p.get("provider_token").is_none() || p["provider_token"] == "");
    // Again: the stored link, no second invoice.
    let again = app.post(&path, Value::Null).await.expect(200);
    assert_eq!(again["order"]["invoice_link"], link.as_str());
    assert_eq!(fake.calls_of("createInvoiceLink").len(), 1);
    assert_eq!(
        app.get(&format!("/api/orders/{id}")).await.expect(200)["invoice_link"],
        link.as_str()
    );

    // A card order: 422. Unknown: 404. A cancelled order without a link: 409.
    let card = channel(&app, -1_001_000_000_802, json!({})).await;
    let card_order = app.create_order(s, card).await;
    app.post(
        &format!("/api/orders/{}/invoice-link", card_order["id"]),
        Value::Null,
    )
    .await
    .expect(422);
    app.post("/api/orders/999999/invoice-link", Value::Null)
        .await
        .expect(404);
    let other = app.create_order(s, c).await;
    app.post(&format!("/api/orders/{}/cancel", other["id"]), Value::Null)
        .await
        .expect(200);
    app.post(
        &format!("/api/orders/{}/invoice-link", other["id"]),
        Value::Null,
    )
    .await
    .expect(409);
}

#[tokio::test]
async fn invoice_links_need_a_bot() {
    let app = TestApp::spawn().await;
    let s = subscriber(&app, 6801).await;
    let c = stars_channel(&app, -1_001_000_000_803).await;
    let order = app.create_order(s, c).await;
    app.post(
        &format!("/api/orders/{}/invoice-link", order["id"]),
        Value::Null,
    )
    .await
    .expect(503);
}

// ---- the bot token never leaks ----

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Every log line (all levels, all crates) written on this thread while the test runs — the
/// runtime is current-thread, so that is everything the app and its HTTP client log.
#[tokio::test(flavor = "current_thread")]
async fn the_bot_token_never_reaches_logs_errors_or_the_api() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Another test's thread may have been registering a callsite at the moment the subscriber
    // above was registered, caching "nobody listens" for it; recompute every cached interest.
    let relisten = tracing::callsite::rebuild_interest_cache;
    relisten();

    // 1. Nothing listens at the API URL: transport errors.
    let dead = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_API_URL".into(), "http://127.0.0.1:1".into());
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await;
    let s = subscriber_id(&dead, 6901).await;
    let c = channel(&dead, -1_001_000_000_901, json!({})).await;
    grant(&dead, s, c, 30).await;
    relisten();
    assert_eq!(run(&dead).await.retried, 1);
    // 2. A fake that answers 500, then hangs (timeouts), then refuses.
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let s = subscriber_id(&app, 6902).await;
    let c = channel(&app, -1_001_000_000_902, json!({})).await;
    grant(&app, s, c, 30).await;
    fake.script("unbanChatMember", Reply::ServerError);
    fake.script("unbanChatMember", Reply::Hang);
    fake.script(
        "unbanChatMember",
        Reply::Error(403, "Forbidden: bot is not a member".into()),
    );
    let mut errors = Vec::new();
    for _ in 0..3 {
        relisten();
        worker(&app, 300).run(false, &|| false).await.unwrap();
        let g = &effects_of(&app, "grant").await[0];
        errors.push(g["last_error"].as_str().unwrap_or_default().to_string());
        make_due(&app).await;
    }
    // 3. An invoice link whose call fails.
    let stars = stars_channel(&app, -1_001_000_000_903).await;
    let order = app.create_order(s, stars).await;
    fake.script("createInvoiceLink", Reply::ServerError);
    let r = app
        .post(
            &format!("/api/orders/{}/invoice-link", order["id"]),
            Value::Null,
        )
        .await;
    assert_eq!(r.status.as_u16(), 503);
    let body = String::from_utf8_lossy(&r.bytes).to_string();
    assert!(!body.contains(TOKEN_SECRET), "{body}");

    for a in [&dead, &app] {
        for e in a.get("/api/effects").await.expect(200)["items"]
            .as_array()
            .unwrap()
        {
            if let Some(err) = e["last_error"].as_str() {
                errors.push(err.to_string());
            }
        }
    }
    assert!(errors.len() >= 4, "errors were recorded: {errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("unreachable")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("no answer")), "{errors:?}");
    for e in &errors {
        assert!(
            !e.contains(TOKEN_SECRET) && !e.contains(TOKEN),
            "token in last_error: {e}"
        );
    }
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    assert!(
        text.contains("effect attempted"),
        "the capture works: {} bytes",
        text.len()
    );
    assert!(text.contains("unreachable"), "transport errors were logged");
    assert!(!text.contains(TOKEN_SECRET), "the token reached a log line");
}

async fn subscriber_id(app: &TestApp, telegram_user_id: i64) -> i64 {
    subscriber(app, telegram_user_id).await
}

// ---- join requests are decided when they are answered ----

#[tokio::test]
async fn a_decline_is_decided_again_and_a_buyer_who_paid_meanwhile_is_approved() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_602, 6411);
    let c = channel(&app, chat, json!({})).await;
    let s = subscriber(&app, user).await;
    fake.open_join_request(chat, user);
    app.post_telegram_update(join_request_update(chat, user, Utc::now().timestamp()))
        .await
        .expect(200);
    let declines = effects_of(&app, "join_decline").await;
    assert_eq!(declines.len(), 1, "not a member yet: a decline is queued");
    // The buyer pays before the worker sends the decline.
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay-join-1").await.expect(200);
    run(&app).await;
    assert!(
        fake.calls_of("declineChatJoinRequest").is_empty(),
        "a paying member was declined"
    );
    assert_eq!(fake.calls_of("approveChatJoinRequest").len(), 1);
    assert!(fake.is_member(chat, user));
    let d = effect(&app, declines[0]["id"].as_i64().unwrap()).await;
    assert_eq!(d["status"], "done");
    assert!(
        d["payload"]["note"].as_str().unwrap().contains("approved"),
        "{d}"
    );
}

// ---- one member's effects: one at a time, in creation order ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_effects_of_one_member_run_one_at_a_time_in_creation_order() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_110;
    let c = channel(&app, chat, json!({})).await;
    app.db()
        .await
        .execute(
            "UPDATE channels SET invite_link = 'https://t.me/+stored' WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap();
    // Long enough to overlap the pacer's spacing of calls (25 per second).
    fake.set_delay(Duration::from_millis(60));
    for round in 0..12i64 {
        // Three members with three effects each, all due at once: a grant, then a decline of a
        // join request (decided again: a member, so approved), then its approval (already in).
        let mut users = Vec::new();
        for k in 0..3 {
            let user = 7000 + round * 10 + k;
            let s = subscriber(&app, user).await;
            users.push((user, grant(&app, s, c, 30).await));
        }
        settle(&app).await;
        fake.clear_calls();
        for (user, m) in &users {
            fake.open_join_request(chat, *user);
            app.db()
                .await
                .execute(
                    "INSERT INTO effects (kind, membership_id, chat_id, user_id) VALUES
                         ('grant', $1, $2, $3), ('join_decline', NULL, $2, $3),
                         ('join_approve', NULL, $2, $3)",
                    &[m, &chat, user],
                )
                .await
                .unwrap();
        }
        let barrier = Arc::new(Barrier::new(2));
        let workers = (0..2).map(|_| {
            let (state, barrier) = (app.state.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                Worker::new(state, Options::default())
                    .run(false, &|| false)
                    .await
                    .unwrap()
            })
        });
        let done: u64 = futures::future::join_all(workers)
            .await
            .into_iter()
            .map(|r| r.unwrap().done)
            .sum();
        assert_eq!(done, 9, "round {round}");
        assert_eq!(
            fake.member_overlaps(),
            0,
            "round {round}: two effects of one member were performed at once"
        );
        let calls = fake.calls();
        for (user, _) in &users {
            let methods: Vec<&str> = calls
                .iter()
                .filter(|c| FakeBot::user_of(c) == Some(*user))
                .map(|c| c.method.as_str())
                .collect();
            assert_eq!(
                methods,
                [
                    "unbanChatMember",
                    "sendMessage",
                    "approveChatJoinRequest",
                    "approveChatJoinRequest"
                ],
                "round {round}: user {user}'s effects out of order"
            );
        }
        assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
    }
}

#[tokio::test]
async fn a_leased_effect_holds_back_every_other_effect_of_its_member() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_111;
    channel(&app, chat, json!({})).await;
    let (user, other) = (7501, 7502);
    fake.open_join_request(chat, user);
    fake.open_join_request(chat, other);
    // A revoke sent back to the queue by staff (earlier) while a later decline of the same
    // member is being performed by another worker (leased); another member's decline.
    let ids: Vec<i64> = app
        .db()
        .await
        .query(
            "INSERT INTO effects (kind, chat_id, user_id, lease_until, lease_token) VALUES
                 ('revoke', $1, $2, NULL, 0),
                 ('join_decline', $1, $2, now() + interval '1 minute', 1),
                 ('join_decline', $1, $3, NULL, 0)
             RETURNING id",
            &[&chat, &user, &other],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let report = run(&app).await;
    assert_eq!(report.done, 1, "only the other member's effect: {report:?}");
    assert_eq!(fake.methods(), ["declineChatJoinRequest"]);
    assert_eq!(fake.calls()[0].params["user_id"], other);
    assert_eq!(effect(&app, ids[0]).await["status"], "pending");

    // The lease runs out (its worker died): the member's effects run, in id order.
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() - interval '1 second' WHERE id = $1",
            &[&ids[1]],
        )
        .await
        .unwrap();
    fake.clear_calls();
    assert_eq!(run(&app).await.done, 2);
    assert_eq!(
        fake.methods(),
        ["banChatMember", "unbanChatMember", "declineChatJoinRequest"]
    );
}

// ---- a Telegram outage: retried for 72 hours, not 8 attempts ----

#[tokio::test]
async fn fifteen_failures_in_a_row_leave_the_effect_pending_until_telegram_answers() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_112, 5711);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    for i in 0..15 {
        let reply = if i % 3 == 2 {
            Reply::Hang
        } else {
            Reply::ServerError
        };
        fake.script("unbanChatMember", reply);
    }
    for attempt in 1..=15 {
        let report = worker(&app, 300).run(false, &|| false).await.unwrap();
        assert_eq!(report.retried, 1, "attempt {attempt}: {report:?}");
        let e = effect(&app, id).await;
        assert_eq!(
            (e["status"].as_str(), e["attempts"].as_i64()),
            (Some("pending"), Some(attempt)),
            "{e}"
        );
        make_due(&app).await;
    }
    assert_eq!(app.count("effects WHERE status = 'failed'").await, 0);
    // Telegram is back.
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    let e = effect(&app, id).await;
    assert_eq!(
        (e["status"].as_str(), e["attempts"].as_i64()),
        (Some("done"), Some(16))
    );
    assert_eq!(fake.calls_of("sendMessage").len(), 1);
}

#[tokio::test]
async fn bulk_retry_sends_back_the_dead_letters_matching_the_filters() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // A refused refund, then two grants refused (the bot was not an admin).
    let p = refund_pending_payment(&app, 6011, -1_001_000_000_211, "ch-bulk-1", "ch-bulk-2").await;
    let c = channel(&app, -1_001_000_000_113, json!({})).await;
    let mut memberships = Vec::new();
    for user in [5721, 5722] {
        let s = subscriber(&app, user).await;
        memberships.push(grant(&app, s, c, 30).await);
    }
    fake.always(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: BALANCE_TOO_LOW".into()),
    );
    fake.always(
        "unbanChatMember",
        Reply::Error(403, "Forbidden: not enough rights".into()),
    );
    assert_eq!(run(&app).await.failed, 3);
    assert_eq!(payment_outcome(&app, p).await, "refund_failed");

    // Malformed requests change nothing.
    let anonymous = app
        .request(Method::POST, "/api/effects/retry", &[], "")
        .await;
    assert_eq!(anonymous.status.as_u16(), 401);
    app.post("/api/effects/retry?colour=red", Value::Null)
        .await
        .expect(400);
    app.post("/api/effects/retry?limit=5", Value::Null)
        .await
        .expect(400);
    app.post("/api/effects/retry?status=pending", Value::Null)
        .await
        .expect(422);
    app.post("/api/effects/retry?kind=nope", Value::Null)
        .await
        .expect(422);
    app.post("/api/effects/retry?membership_id=x", Value::Null)
        .await
        .expect(400);
    assert_eq!(app.count("effects WHERE status = 'failed'").await, 3);

    // Staff fix the causes, then send the dead letters back: by kind (the list's own filters,
    // `status=failed` included, are accepted), by membership, then the rest.
    fake.reset("refundStarPayment");
    fake.reset("unbanChatMember");
    let r = app
        .post("/api/effects/retry?status=failed&kind=refund", Value::Null)
        .await
        .expect(200);
    assert_eq!(r, json!({"retried": 1}));
    assert_eq!(
        app.get(&format!("/api/payments/{p}")).await.expect(200)["outcome"],
        "refund_pending",
        "the refund's payment goes back with it"
    );
    let r = app
        .post(
            &format!("/api/effects/retry?membership_id={}", memberships[0]),
            Value::Null,
        )
        .await
        .expect(200);
    assert_eq!(r, json!({"retried": 1}));
    assert_eq!(
        app.post("/api/effects/retry", Value::Null)
            .await
            .expect(200),
        json!({"retried": 1})
    );
    assert_eq!(
        app.post("/api/effects/retry", Value::Null)
            .await
            .expect(200),
        json!({"retried": 0})
    );
    assert_eq!(
        app.count(
            "effects WHERE status = 'pending' AND attempts = 0 AND first_failed_at IS NULL
             AND next_attempt_at <= now()"
        )
        .await,
        3
    );

    let report = run(&app).await;
    assert_eq!(report.done, 3, "{report:?}");
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    assert!(fake.was_refunded("ch-bulk-2"));
}

// ---- leases: no transaction, row lock or connection held across Bot API calls ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn telegram_is_called_with_no_transaction_or_connection_held() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_114, 5731);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({"seat_limit": 5})).await;
    let m = grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    let hold = fake.hold("unbanChatMember");
    let state = app.state.clone();
    let running = tokio::spawn(async move {
        let options = Options {
            call_timeout: Duration::from_secs(120),
            ..Options::default()
        };
        Worker::new(state, options)
            .run(false, &|| false)
            .await
            .unwrap()
    });
    hold.arrived().await;

    // Telegram is holding the call. The claim is committed: a lease, and nothing else is open
    // — no transaction, no pool connection. (Looked at a few times: the worker's other lanes
    // may be finishing their empty claims at first; a worker holding its own stays put.)
    let mut held = (i64::MAX, usize::MAX);
    for _ in 0..40 {
        let open: i64 = app
            .db()
            .await
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let pool = app.state.db.status();
        held = (open, pool.size - pool.available);
        if held == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        held,
        (0, 0),
        "(transactions, pool connections) held during a Bot API call"
    );
    let leased: bool = app
        .db()
        .await
        .query_one(
            "SELECT lease_until > now() AND lease_token = 1 FROM effects WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(leased);
    // Staff cannot send it back while it is being performed.
    app.post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(409);
    // Staff are not kept waiting by Telegram, on a seat-limited channel either.
    let patched = tokio::time::timeout(
        Duration::from_secs(5),
        app.patch(&format!("/api/channels/{c}"), json!({"title": "Renamed"})),
    )
    .await
    .expect("the channel PATCH waited for Telegram");
    patched.expect(200);
    let deleted = tokio::time::timeout(
        Duration::from_secs(5),
        app.delete(&format!("/api/memberships/{m}")),
    )
    .await
    .expect("the membership DELETE waited for Telegram");
    deleted.expect(204);

    hold.release();
    let report = running.await.unwrap();
    assert!(report.done >= 1, "{report:?}");
    let e = effect(&app, id).await;
    assert_eq!(
        (e["status"].as_str(), &e["lease_until"]),
        (Some("done"), &Value::Null)
    );
}

async fn lease_token(app: &TestApp, id: i64) -> i64 {
    app.db()
        .await
        .query_one("SELECT lease_token FROM effects WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_lease_is_claimed_again_and_the_late_worker_records_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_115, 5741);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    // The first worker's call is held, and answers 500 when it is let go.
    fake.script("unbanChatMember", Reply::ServerError);
    let hold = fake.hold("unbanChatMember");
    let state = app.state.clone();
    // One lane, so that only the other worker can claim the effect again; a patient client,
    // so that its call is still held when the other worker has finished.
    let late = tokio::spawn(async move {
        let options = Options {
            concurrency: 1,
            call_timeout: Duration::from_secs(120),
            ..Options::default()
        };
        Worker::new(state, options)
            .run(false, &|| false)
            .await
            .unwrap()
    });
    hold.arrived().await;
    assert_eq!(lease_token(&app, id).await, 1);
    // Its lease runs out (as if it had died): another worker claims the effect and does it.
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() - interval '1 second' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(lease_token(&app, id).await, 2);

    // The first worker's call comes back failed: it must not record over the newer claim.
    hold.release();
    let report = late.await.unwrap();
    assert_eq!(
        (report.superseded, report.retried, report.done),
        (1, 0, 0),
        "{report:?}"
    );
    let e = effect(&app, id).await;
    assert_eq!(
        (
            e["status"].as_str(),
            e["attempts"].as_i64(),
            &e["last_error"]
        ),
        (Some("done"), Some(1), &Value::Null),
        "{e}"
    );
}

// ---- refunds sent back by staff, and found in long transaction lists ----

#[tokio::test]
async fn a_refused_refund_sent_back_by_staff_is_refunded() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6006, -1_001_000_000_206, "ch-rt-1", "ch-rt-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: BALANCE_TOO_LOW".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refund_failed");
    let id = effects_of(&app, "refund").await[0]["id"].as_i64().unwrap();
    assert_eq!(effect(&app, id).await["status"], "failed");

    // Staff top up the balance and send the refund back.
    let retried = app
        .post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(200);
    assert_eq!(retried["status"], "pending");
    assert_eq!(
        app.get(&format!("/api/payments/{p}")).await.expect(200)["outcome"],
        "refund_pending"
    );
    run(&app).await;
    assert_eq!(fake.calls_of("refundStarPayment").len(), 2);
    assert!(fake.was_refunded("ch-rt-2"));
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let e = effect(&app, id).await;
    assert_eq!(e["status"], "done");
    assert_eq!(
        e["payload"]["note"],
        Value::Null,
        "performed, not skipped: {e}"
    );
}

#[tokio::test]
async fn a_lost_refund_answer_is_found_among_more_than_5000_transactions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6007, -1_001_000_000_207, "ch-big-1", "ch-big-2").await;
    fake.add_filler_transactions(5_200);
    // Telegram refunds, but the answer is lost; the refund is the newest transaction.
    fake.script("refundStarPayment", Reply::PerformThenHang);
    let report = worker(&app, 500).run(true, &|| false).await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    make_due(&app).await;
    fake.clear_calls();
    worker(&app, 500).run(false, &|| false).await.unwrap();
    assert!(
        fake.calls_of("refundStarPayment").is_empty(),
        "refunded again: the first refund was not found"
    );
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let pages = fake.calls_of("getStarTransactions").len();
    assert!(pages <= 20, "{pages} pages read to find the newest refund");
    let e = &effects_of(&app, "refund").await[0];
    assert_eq!(e["status"], "done");
    assert!(
        e["payload"]["note"].as_str().unwrap().contains("confirmed"),
        "{e}"
    );
}

// ---- reconcile: charges refunded outside subgate ----

#[tokio::test]
async fn reconcile_keeps_a_charge_refunded_elsewhere_as_refunded_and_grants_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -1_001_000_000_302).await;
    let (user, other) = (6111, 6112);
    let s = subscriber(&app, user).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();
    // Paid, then refunded in another tool; both updates missed.
    fake.add_incoming_payment("ch-gone", user, &reference, 50);
    fake.add_refund_transaction("ch-gone", user, 50);
    // Another buyer's missed payment, with an outgoing transaction of its id to someone else:
    // not its refund, so it is applied.
    let s2 = subscriber(&app, other).await;
    let order2 = app.create_order(s2, c).await;
    fake.add_incoming_payment("ch-kept", other, order2["reference"].as_str().unwrap(), 50);
    fake.add_refund_transaction("ch-kept", 9999, 50);

    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(
        (r.refunded_elsewhere, r.payments_recovered),
        (1, 1),
        "{r:?}"
    );
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason, order_id, amount_minor FROM payments
             WHERE gateway = 'telegram_stars' AND external_id = 'ch-gone'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, Option<String>>(1),
            row.get::<_, Option<i64>>(2),
            row.get::<_, i64>(3)
        ),
        (
            "refunded".to_string(),
            Some("refunded_elsewhere".to_string()),
            order["id"].as_i64(),
            50
        )
    );
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s}"))
            .await,
        0,
        "a refunded charge granted access"
    );
    assert_eq!(
        app.get(&format!("/api/orders/{}", order["id"]))
            .await
            .expect(200)["status"],
        "pending"
    );
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s2}"))
            .await,
        1
    );

    // Nothing to refund, nothing to grant for it; a second reconcile and the late update
    // change nothing.
    run(&app).await;
    assert!(fake.calls_of("refundStarPayment").is_empty());
    assert_eq!(app.count("effects WHERE kind = 'refund'").await, 0);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((r.refunded_elsewhere, r.payments_recovered), (0, 0));
    app.post_telegram_update(payment_update("ch-gone", user, &reference, 50))
        .await
        .expect(200);
    assert_eq!(app.count("payments WHERE external_id = 'ch-gone'").await, 1);
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s}"))
            .await,
        0
    );
}
