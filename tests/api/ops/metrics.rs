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

use axum::{body::Body, http::Request};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::support::{
    helpers::{JWT_SECRET, TestApp, url_for},
    rows::expire_hold,
};

/// One parsed exposition: every sample, by metric name, with its labels.
pub(crate) struct Metrics {
    pub(crate) samples: Vec<(String, BTreeMap<String, String>, f64)>,
    pub(crate) text: String,
}

impl Metrics {
    /// Parses the text exposition format (comments skipped; label values without escapes,
    /// which is all this service emits).
    pub(crate) fn parse(text: &str) -> Metrics {
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
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
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
    pub(crate) fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
        })
    }

    /// Asserts no label value of any sample contains one of `needles`.
    #[track_caller]
    pub(crate) fn assert_no_label_contains(&self, needles: &[&str]) {
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
    pub(crate) fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
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
pub(crate) async fn scrape(app: &TestApp) -> Metrics {
    let handle = subgate::common::metrics::install().expect("the recorder installs");
    let response = subgate::app::metrics::router(handle, app.state.db.clone())
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

pub(crate) const HTTP: &str = "subgate_http_request_duration_seconds_count";

/// The database gauges, against what the database holds. Only this test samples them.
#[tokio::test]
async fn database_gauges_are_sampled_from_the_database() {
    subgate::common::metrics::install().unwrap();
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
    let mut orders = Vec::new();
    for _ in 0..3 {
        let order = app.create_order(s, limited).await;
        app.checkout(order["id"].as_i64().unwrap())
            .await
            .expect(200);
        orders.push(order["id"].as_i64().unwrap());
    }
    expire_hold(&app, orders[0], 60).await;
    let db = app.db().await;
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

    subgate::app::metrics::sample_database(&app.state.db)
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
    for kind in subgate::outbox::effects::Kind::ALL {
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
