//! Effects that fail: 429 with `retry_after`, server errors backing off for 72 hours into dead
//! letters, definite refusals, a long Telegram outage and the staff's bulk retry. Set-up helpers
//! are in [`crate::support::effects`].

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::app::worker::RunReport;

use crate::support::{
    effects::*,
    fake_bot::{FakeBot, Reply, TOKEN_SECRET},
    helpers::{TestApp, db_now},
};

// ---- 429, 5xx, dead letters ----

#[tokio::test]
async fn a_429_waits_retry_after() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_106, 5601);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    fake.script("sendMessage", Reply::TooManyRequests(30));
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
    fake.always("sendMessage", Reply::ServerError);
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
    assert_eq!(fake.calls_of("sendMessage").len(), 12);
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
    assert_eq!(fake.calls_of("sendMessage").len(), 12);

    // Staff fix the cause and send it back, with a fresh budget.
    fake.reset("sendMessage");
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
        "sendMessage",
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
        fake.script("sendMessage", reply);
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
    assert_eq!(fake.calls_of("sendMessage").len(), 16);
}

#[tokio::test]
async fn bulk_retry_sends_back_the_dead_letters_matching_the_filters() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // A refused refund, then two grants refused (the buyers blocked the bot).
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
        "sendMessage",
        Reply::Error(403, "Forbidden: bot was blocked by the user".into()),
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
    fake.reset("sendMessage");
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
