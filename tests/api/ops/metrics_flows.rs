//! Counters and histograms moved by flows through the app: payments, duplicates, logins and
//! requests; sweep runs, moves and skips; Bot API calls, 429s and pre-checkout decisions; the
//! time from a payment to its grant message; promo code guesses and subscription updates. Each
//! is checked by how much it grew across its flow (see `metrics`).

use axum::{body::Body, http::Method};
use serde_json::{Value, json};

use crate::{
    ops::metrics::{HTTP, Metrics, scrape},
    support::{
        fake_bot::{FakeBot, Reply, TOKEN},
        helpers::{ADMIN_EMAIL, TestApp, url_for},
    },
};

/// Asserts `name{labels}` grew by at least `by` from `before` to `after`.
#[track_caller]
fn assert_grew(before: &Metrics, after: &Metrics, name: &str, labels: &[(&str, &str)], by: f64) {
    let (b, a) = (before.sum(name, labels), after.sum(name, labels));
    assert!(
        a - b >= by,
        "{name}{labels:?} went from {b} to {a}, expected +{by} at least\n{}",
        after.text
    );
}

#[tokio::test]
async fn payments_duplicates_logins_and_requests_are_counted() {
    subgate::common::metrics::install().unwrap();
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "1".into());
    })
    .await;
    let s = app.create_subscriber(7101).await["id"].as_i64().unwrap();
    let c = app.create_channel(-1_001_000_007_101, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let before = scrape(&app).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();

    // Door 1: a payment, then the same payment again.
    let first = app.pay_order(&order, "pay_metrics_7101").await.expect(200);
    assert_eq!(first["duplicate"], false);
    assert_eq!(first["payment"]["outcome"], "applied");
    let again = app.pay_order(&order, "pay_metrics_7101").await.expect(200);
    assert_eq!(again["duplicate"], true);
    // A payment for an order that does not exist is stored for review.
    let mut stray = order.clone();
    stray["reference"] = json!("no-such-order-7101");
    let stray = app
        .pay_order(&stray, "pay_metrics_7101_b")
        .await
        .expect(200);
    assert_eq!(stray["payment"]["reason"], "unknown_order");
    // A wrong password, then the throttle's 429 (LOGIN_MAX_FAILURES=1).
    app.login(ADMIN_EMAIL, "wrong password 7101")
        .await
        .expect(401);
    app.login(ADMIN_EMAIL, "wrong password 7101")
        .await
        .expect(429);
    // A route that does not exist, and a method nobody defined.
    app.request(Method::GET, "/api/no-such-route/7101", &[], Body::empty())
        .await
        .expect(404);
    app.request(
        Method::from_bytes(b"BREW").unwrap(),
        "/api/subscribers",
        &[],
        Body::empty(),
    )
    .await;

    let after = scrape(&app).await;
    let door1 = [("door", "webhook"), ("gateway", "other")];
    assert_grew(
        &before,
        &after,
        "subgate_payments_total",
        &[
            door1[0],
            door1[1],
            ("outcome", "applied"),
            ("reason", "none"),
        ],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_payments_total",
        &[
            door1[0],
            door1[1],
            ("outcome", "needs_review"),
            ("reason", "unknown_order"),
        ],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_payment_duplicates_total",
        &door1,
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_login_throttled_total",
        &[("status", "429")],
        1.0,
    );
    let route = |r| [("route", r), ("method", "POST"), ("status", "2xx")];
    assert_grew(&before, &after, HTTP, &route("/api/webhook/payment"), 3.0);
    assert_grew(&before, &after, HTTP, &route("/api/orders"), 1.0);
    assert_grew(
        &before,
        &after,
        HTTP,
        &[("route", "/api/auth/login"), ("status", "4xx")],
        2.0,
    );
    assert_grew(
        &before,
        &after,
        HTTP,
        &[("route", "unmatched"), ("method", "GET"), ("status", "4xx")],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        HTTP,
        &[("route", "/api/subscribers"), ("method", "other")],
        1.0,
    );
    // Histograms have buckets up to the request timeout, and the sum of latencies.
    assert!(after.has(
        "subgate_http_request_duration_seconds_bucket",
        &[("route", "/api/webhook/payment"), ("le", "30")]
    ));
    assert!(after.has(
        "subgate_http_request_duration_seconds_sum",
        &[("route", "/api/webhook/payment")]
    ));

    // Bounded cardinality: no id, reference, raw path, gateway name or method of a request
    // becomes a label value.
    after.assert_no_label_contains(&[
        reference.as_str(),
        "pay_metrics_7101",
        "no-such-order-7101",
        "/api/no-such-route",
        "acme",
        "BREW",
        "7101",
    ]);
    // The pool, as of the scrape (the pool gauges are process-wide and other tests scrape their
    // own pools meanwhile, so only what every test app shares is checked exactly).
    let max = after.get("subgate_db_pool_max_connections", &[]);
    assert_eq!(max, 20.0, "DB_POOL_SIZE of the test apps");
    for gauge in [
        "subgate_db_pool_connections",
        "subgate_db_pool_in_use",
        "subgate_db_pool_waiting",
    ] {
        let value = after.get(gauge, &[]);
        assert!((0.0..=max).contains(&value), "{gauge} {value}");
    }
    // Every series has its HELP text.
    assert!(
        after
            .text
            .contains("# HELP subgate_payments_total Payments stored"),
        "{}",
        after.text
    );
}

#[tokio::test]
async fn sweep_runs_moves_and_skips_are_counted() {
    subgate::common::metrics::install().unwrap();
    let app = TestApp::spawn().await;
    // Three memberships past their term: one enters grace, one expires (no grace), and one is
    // being renewed (its pair lock is held) so the sweep skips it.
    let mut pairs = Vec::new();
    for (n, grace) in [(1, 3), (2, 0), (3, 0)] {
        let s = app.create_subscriber(7200 + n).await["id"]
            .as_i64()
            .unwrap();
        let c = app
            .create_channel(-1_001_000_007_200 - n, json!({"grace_period_days": grace}))
            .await["id"]
            .as_i64()
            .unwrap();
        app.post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 30}),
        )
        .await
        .expect(201);
        pairs.push((s as i32, c as i32));
    }
    app.db()
        .await
        .execute(
            "UPDATE memberships SET expires_at = now() - interval '1 day'",
            &[],
        )
        .await
        .unwrap();
    let (locked_s, locked_c) = pairs[2];
    let (holder, conn) = tokio_postgres::connect(&url_for(&app.db_name), tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    holder
        .execute("SELECT pg_advisory_lock($1, $2)", &[&locked_s, &locked_c])
        .await
        .unwrap();

    let before = scrape(&app).await;
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(report["to_grace"], 1, "{report}");
    assert_eq!(report["to_expired"], 1, "{report}");
    assert_eq!(report["skipped"], 1, "{report}");
    let after = scrape(&app).await;
    drop(holder);
    let _ = conn.await;

    assert_grew(
        &before,
        &after,
        "subgate_sweep_runs_total",
        &[("result", "ok")],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_sweep_transitions_total",
        &[("to", "grace")],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_sweep_transitions_total",
        &[("to", "expired")],
        1.0,
    );
    assert_grew(&before, &after, "subgate_sweep_skipped_total", &[], 1.0);
    assert_grew(
        &before,
        &after,
        "subgate_sweep_duration_seconds_count",
        &[],
        1.0,
    );
    assert!(after.has("subgate_sweep_duration_seconds_bucket", &[("le", "600")]));
    assert_grew(
        &before,
        &after,
        HTTP,
        &[
            ("route", "/api/sweep"),
            ("method", "POST"),
            ("status", "2xx"),
        ],
        1.0,
    );
}

#[tokio::test]
async fn bot_api_calls_429s_and_pre_checkout_decisions_are_counted() {
    subgate::common::metrics::install().unwrap();
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await;
    let s = app.create_subscriber(7301).await["id"].as_i64().unwrap();
    let c = app
        .create_channel(
            -1_001_000_007_301,
            json!({"currency": "XTR", "price_minor": 50}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();
    let before = scrape(&app).await;

    // A grant performed against the fake Bot API; its message is first answered 429.
    app.post(
        "/api/memberships",
        json!({"subscriber_id": s, "channel_id": c, "days": 30}),
    )
    .await
    .expect(201);
    fake.script("sendMessage", Reply::TooManyRequests(1));
    subgate::app::worker::run_once(&app.state).await.unwrap();
    assert!(
        fake.calls().iter().any(|c| c.method == "sendMessage"),
        "the grant reached the fake Bot API"
    );

    // Pre-checkout: one approved, one refused (unknown order).
    let query = |id: &str, payload: &str| {
        json!({
            "update_id": 7301,
            "pre_checkout_query": {
                "id": id,
                "from": {"id": 7301, "is_bot": false, "first_name": "Buyer"},
                "currency": "XTR",
                "total_amount": 50,
                "invoice_payload": payload
            }
        })
    };
    let ok = app
        .post_telegram_update(query("q-7301-a", &reference))
        .await
        .expect(200);
    assert_eq!(ok["ok"], true, "{ok}");
    let refused = app
        .post_telegram_update(query("q-7301-b", "no-such-order"))
        .await
        .expect(200);
    assert_eq!(refused["ok"], false, "{refused}");

    let after = scrape(&app).await;
    assert_grew(
        &before,
        &after,
        "subgate_bot_api_calls_total",
        &[("method", "createChatInviteLink"), ("result", "ok")],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_bot_api_calls_total",
        &[("method", "sendMessage"), ("result", "rate_limited")],
        1.0,
    );
    assert_grew(
        &before,
        &after,
        "subgate_bot_api_rate_limited_total",
        &[("method", "sendMessage")],
        1.0,
    );
    for decision in ["approved", "refused"] {
        assert_grew(
            &before,
            &after,
            "subgate_pre_checkout_decisions_total",
            &[("decision", decision)],
            1.0,
        );
        assert_grew(
            &before,
            &after,
            "subgate_pre_checkout_duration_seconds_count",
            &[("decision", decision)],
            1.0,
        );
    }
    // Buckets reach Telegram's 10 s.
    assert!(after.has(
        "subgate_pre_checkout_duration_seconds_bucket",
        &[("decision", "approved"), ("le", "10")]
    ));
    assert!(after.has(
        "subgate_pre_checkout_duration_seconds_bucket",
        &[("decision", "approved"), ("le", "5")]
    ));
    after.assert_no_label_contains(&[reference.as_str(), "q-7301", "no-such-order"]);
}

#[tokio::test]
async fn the_time_from_a_payment_to_its_grant_message_is_observed() {
    subgate::common::metrics::install().unwrap();
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await;
    let s = app.create_subscriber(7401).await["id"].as_i64().unwrap();
    let c = app.create_channel(-1_001_000_007_401, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let order = app.create_order(s, c).await;
    let before = scrape(&app).await;
    app.pay_order(&order, "pay-metric-7401").await.expect(200);
    let report = subgate::app::worker::run_once(&app.state).await.unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    let after = scrape(&app).await;
    assert_grew(
        &before,
        &after,
        "subgate_payment_grant_seconds_count",
        &[],
        1.0,
    );
    assert!(after.has("subgate_payment_grant_seconds_bucket", &[("le", "3600")]));
}

#[tokio::test]
async fn promo_code_guesses_and_subscription_updates_are_counted() {
    subgate::common::metrics::install().unwrap();
    let fake = FakeBot::start().await;
    let app = crate::bot::conversation::app_with(&fake).await;
    let before = scrape(&app).await;
    let buyer = crate::bot::conversation::person(7_190);
    // Five wrong codes (the buyer's limit), then one refused unread.
    for n in 0..6 {
        crate::bot::conversation::send(
            &app,
            &crate::bot::conversation::text_update(&buyer, &format!("/code NOPE7190X{n}")),
        )
        .await;
    }
    // A `subscription` update naming no subscription: kept for review.
    crate::bot::conversation::send(
        &app,
        &json!({"update_id": crate::bot::conversation::next_id(), "subscription": {
            "user": {"id": 7_190, "is_bot": false, "first_name": "Ann"},
            "invoice_payload": "ord_none_7190", "state": "failed"}}),
    )
    .await;
    let after = scrape(&app).await;
    let guesses = "subgate_bot_code_guesses_total";
    assert_grew(&before, &after, guesses, &[("result", "wrong")], 5.0);
    assert_grew(&before, &after, guesses, &[("result", "limited")], 1.0);
    assert_grew(
        &before,
        &after,
        "subgate_star_subscription_updates_total",
        &[("state", "failed"), ("outcome", "review")],
        1.0,
    );
}
