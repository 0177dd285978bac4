//! Prometheus metrics: flows through the app move the series that describe them, read back from
//! `GET /metrics` (the metrics listener's router, or the real listener of `subgate serve`) and
//! parsed.
//!
//! The recorder is process-wide and the tests of this binary run in parallel, so a counter or a
//! histogram is checked by how much it grew across a flow (at least what the flow did; another
//! test may add to a series too). The database gauges are set only by
//! `metrics::sample_database`, which only [`database_gauges_are_sampled_from_the_database`]
//! calls, so those are checked exactly.

use std::{
    collections::BTreeMap,
    process::Stdio,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    http::{Method, Request},
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{
    fake_bot::{FakeBot, Reply, TOKEN},
    helpers::{ADMIN_EMAIL, JWT_SECRET, TestApp, url_for},
};

/// One parsed exposition: every sample, by metric name, with its labels.
struct Metrics {
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
    text: String,
}

impl Metrics {
    /// Parses the text exposition format (comments skipped; label values without escapes,
    /// which is all this service emits).
    fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("a number in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels end with }");
                    let labels = body
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                            (k.to_string(), v.trim_end_matches('"').to_string())
                        })
                        .collect();
                    (name.to_string(), labels)
                }
            };
            samples.push((name, labels, value));
        }
        Metrics {
            samples,
            text: text.to_string(),
        }
    }

    /// The sum of every sample of `name` carrying at least `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether a sample of `name` with at least `labels` exists.
    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
        })
    }

    /// Asserts no label value of any sample contains one of `needles`.
    #[track_caller]
    fn assert_no_label_contains(&self, needles: &[&str]) {
        for (name, labels, _) in &self.samples {
            for (k, v) in labels {
                for needle in needles {
                    assert!(
                        !v.contains(needle),
                        "{name}{{{k}=\"{v}\"}} holds {needle:?}"
                    );
                }
            }
        }
    }

    /// The one sample of `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == wanted)
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }
}

/// Installs the recorder (once per process) and reads `/metrics` through the metrics router.
async fn scrape(app: &TestApp) -> Metrics {
    let handle = subgate::metrics::install().expect("the recorder installs");
    let response = subgate::metrics::router(handle, app.state.db.clone())
        .oneshot(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4"
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Metrics::parse(std::str::from_utf8(&bytes).unwrap())
}

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

const HTTP: &str = "subgate_http_request_duration_seconds_count";

#[tokio::test]
async fn payments_duplicates_logins_and_requests_are_counted() {
    subgate::metrics::install().unwrap();
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
    subgate::metrics::install().unwrap();
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
    subgate::metrics::install().unwrap();
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
    subgate::worker::run_once(&app.state).await.unwrap();
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

/// The database gauges, against what the database holds. Only this test samples them.
#[tokio::test]
async fn database_gauges_are_sampled_from_the_database() {
    subgate::metrics::install().unwrap();
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(7401).await["id"].as_i64().unwrap();
    let limited = app
        .create_channel(-1_001_000_007_401, json!({"seat_limit": 5}))
        .await["id"]
        .as_i64()
        .unwrap();
    let open = app.create_channel(-1_001_000_007_402, json!({})).await["id"]
        .as_i64()
        .unwrap();
    // Two held seats (a third order's hold has run out), and grants that queue effects.
    for _ in 0..3 {
        let order = app.create_order(s, limited).await;
        app.checkout(order["id"].as_i64().unwrap())
            .await
            .expect(200);
    }
    let db = app.db().await;
    db.execute(
        "UPDATE orders SET hold_until = now() - interval '1 minute'
         WHERE id = (SELECT min(id) FROM orders)",
        &[],
    )
    .await
    .unwrap();
    for (n, channel) in [(1, limited), (2, open)] {
        let other = app.create_subscriber(7410 + n).await["id"]
            .as_i64()
            .unwrap();
        app.post(
            "/api/memberships",
            json!({"subscriber_id": other, "channel_id": channel, "days": 30}),
        )
        .await
        .expect(201);
    }
    // One grant is dead-lettered; the other has waited an hour.
    db.execute(
        "UPDATE effects SET status = 'failed', last_error = 'test'
         WHERE id = (SELECT min(id) FROM effects)",
        &[],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE effects SET created_at = now() - interval '1 hour'
         WHERE id = (SELECT max(id) FROM effects)",
        &[],
    )
    .await
    .unwrap();
    let expected: Vec<(String, String, i64)> = db
        .query(
            "SELECT kind, status, count(*) FROM effects WHERE status <> 'done' GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        expected,
        vec![
            ("grant".to_string(), "failed".to_string(), 1),
            ("grant".to_string(), "pending".to_string(), 1),
        ],
        "the set-up queued one grant each"
    );

    // The bot lost its rights in the open channel, whose grant is the pending one: paused.
    app.post_telegram_update(crate::outbox::chat_members::bot_demoted(-1_001_000_007_402))
        .await
        .expect(200);
    // Card orders asked about at the gateway: two still chased, one found.
    db.execute(
        "INSERT INTO gateway_checks (order_id, gateway, next_check_at, state)
         SELECT id, 'wayforpay', now(), CASE WHEN id = (SELECT min(id) FROM orders)
                                             THEN 'found' ELSE 'chasing' END
         FROM orders",
        &[],
    )
    .await
    .unwrap();

    subgate::metrics::sample_database(&app.state.db)
        .await
        .unwrap();
    let m = scrape(&app).await;
    assert_eq!(m.get("subgate_reconciliation_pending", &[]), 2.0);
    assert_eq!(m.get("subgate_seats_held", &[]), 2.0);
    assert_eq!(m.get("subgate_channels_no_rights", &[]), 1.0);
    assert_eq!(m.get("subgate_effects_paused_no_rights", &[]), 1.0);
    assert_eq!(m.get("subgate_effects_dead_letters", &[]), 1.0);
    let age = m.get("subgate_effects_oldest_pending_age_seconds", &[]);
    assert!((3600.0..3700.0).contains(&age), "{age}");
    for kind in subgate::effects::Kind::ALL {
        for status in ["pending", "failed"] {
            let want = expected
                .iter()
                .find(|(k, s, _)| k == kind.as_str() && s == status)
                .map_or(0, |e| e.2);
            assert_eq!(
                m.get(
                    "subgate_effects",
                    &[("kind", kind.as_str()), ("status", status)]
                ),
                want as f64,
                "{kind:?} {status}"
            );
        }
    }
    // Done effects are history, not queue.
    assert!(!m.has("subgate_effects", &[("status", "done")]));
}

/// `subgate serve` with `METRICS_ADDR`: `/metrics` is on that listener only, carries the
/// sampled gauges, and the listener stops with the server.
#[tokio::test]
async fn serve_exposes_metrics_on_their_own_listener() {
    let app = TestApp::spawn().await;
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (bind, metrics) = (free(), free());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_subgate"))
        .arg("serve")
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", JWT_SECRET)
        .env("BCRYPT_COST", "4")
        .env("BIND_ADDR", bind.to_string())
        .env("METRICS_ADDR", metrics.to_string())
        .env("LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the subgate binary runs");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        match http.get(format!("http://{metrics}/metrics")).send().await {
            Ok(r) if r.status() == 200 => {
                let text = r.text().await.unwrap();
                // The sampler's first tick runs at start-up.
                if text.contains("subgate_effects_dead_letters") {
                    break text;
                }
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "no /metrics on {metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let m = Metrics::parse(&text);
    assert_eq!(m.get("subgate_effects_dead_letters", &[]), 0.0);
    assert!(m.has("subgate_db_pool_max_connections", &[]));

    // The public listener does not serve metrics; its requests are counted.
    let r = http
        .get(format!("http://{bind}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    http.get(format!("http://{bind}/healthz"))
        .send()
        .await
        .unwrap();
    let text = http
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let m = Metrics::parse(&text);
    assert!(
        m.sum(
            HTTP,
            &[("route", "/healthz"), ("method", "GET"), ("status", "2xx")]
        ) >= 1.0,
        "{text}"
    );
    assert!(m.sum(HTTP, &[("route", "unmatched"), ("status", "4xx")]) >= 1.0);

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("serve stops on SIGTERM, the metrics listener with it")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        http.get(format!("http://{metrics}/metrics"))
            .send()
            .await
            .is_err(),
        "nothing listens on METRICS_ADDR any more"
    );
}

#[tokio::test]
async fn the_time_from_a_payment_to_its_grant_message_is_observed() {
    subgate::metrics::install().unwrap();
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
    let report = subgate::worker::run_once(&app.state).await.unwrap();
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
    subgate::metrics::install().unwrap();
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
