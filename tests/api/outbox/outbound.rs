//! Outbound webhooks: endpoints through the staff API, events written by the changes' own
//! transactions, deliveries to a real HTTP receiver on a local port (allowed by
//! `OUTBOUND_ALLOW_PRIVATE`), and every signature checked with the official Standard Webhooks
//! verifier (the `standardwebhooks` crate's `Webhook::verify`).

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use serde_json::{Value, json};
use subgate::outbox::outbound;

use crate::support::{
    helpers::{TestApp, id},
    race::race,
};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

#[derive(Default)]
struct ReceiverState {
    got: Vec<Got>,
    /// Statuses to answer, in order (then 200), with an optional `Retry-After`.
    script: Vec<(u16, Option<&'static str>)>,
}

pub(crate) struct Receiver {
    pub(crate) url: String,
    state: Arc<Mutex<ReceiverState>>,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let state = Arc::new(Mutex::new(ReceiverState::default()));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}/hook"),
            state,
        }
    }

    fn answer(&self, script: &[(u16, Option<&'static str>)]) {
        self.state.lock().unwrap().script = script.to_vec();
    }

    pub(crate) fn got(&self) -> Vec<Got> {
        self.state.lock().unwrap().got.clone()
    }
}

async fn receive(
    State(state): State<Arc<Mutex<ReceiverState>>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let mut s = state.lock().unwrap();
    s.got.push(Got { headers, body });
    let (code, retry_after) = if s.script.is_empty() {
        (200, None)
    } else {
        s.script.remove(0)
    };
    let status = StatusCode::from_u16(code).unwrap();
    match retry_after {
        Some(r) => (status, [("retry-after", r)]).into_response(),
        None => status.into_response(),
    }
}

pub(crate) async fn app() -> TestApp {
    TestApp::spawn_with(|env| {
        env.insert("OUTBOUND_ALLOW_PRIVATE".into(), "true".into());
    })
    .await
}

/// Creates an endpoint for `types`; returns its id and secret.
pub(crate) async fn endpoint(app: &TestApp, url: &str, types: &[&str]) -> (i64, String) {
    let r = app
        .post(
            "/api/webhook-endpoints",
            json!({"url": url, "event_types": types, "description": "CRM"}),
        )
        .await
        .expect(201);
    (id(&r), r["secret"].as_str().unwrap().to_string())
}

/// Runs the deliverer once.
pub(crate) async fn deliver(app: &TestApp) -> usize {
    outbound::deliver_due(&app.state.db, app.state.config.outbound_allow_private)
        .await
        .unwrap()
}

/// Makes every pending delivery due now.
async fn make_due(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE webhook_deliveries SET next_attempt_at = statement_timestamp()
             WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap();
}

/// Verifies `got` with the official verifier and `secret`; returns the body as JSON.
fn verified(got: &Got, secret: &str) -> Value {
    standardwebhooks::Webhook::new(secret)
        .unwrap()
        .verify(&got.body, &got.headers)
        .expect("the official verifier accepts what we sent");
    serde_json::from_slice(&got.body).unwrap()
}

/// A paid order: its payment is applied and its membership activated.
pub(crate) async fn paid_order(app: &TestApp, user: i64, chat: i64) -> Value {
    let s = app.create_subscriber(user).await;
    let c = app.create_channel(chat, json!({})).await;
    let o = app.create_order(id(&s), id(&c)).await;
    app.pay_order(&o, &format!("pay_out_{user}"))
        .await
        .expect(200)
}

#[tokio::test]
async fn an_applied_payment_is_sent_signed_and_the_official_verifier_accepts_it() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (endpoint_id, secret) = endpoint(
        &app,
        &receiver.url,
        &["payment.applied", "membership.activated"],
    )
    .await;
    assert!(secret.starts_with("whsec_"));
    let shown = app
        .get(&format!("/api/webhook-endpoints/{endpoint_id}"))
        .await
        .expect(200);
    assert!(
        shown.get("secret").is_none(),
        "the secret is shown once: {shown}"
    );
    assert_eq!(shown["enabled"], true);

    let applied = paid_order(&app, 9201, -100_920_001).await;
    assert_eq!(deliver(&app).await, 2);
    let got = receiver.got();
    assert_eq!(got.len(), 2);
    let bodies: Vec<Value> = got.iter().map(|g| verified(g, &secret)).collect();
    let payment = bodies
        .iter()
        .find(|b| b["type"] == "payment.applied")
        .unwrap();
    let membership = bodies
        .iter()
        .find(|b| b["type"] == "membership.activated")
        .unwrap();
    // The resources as the staff API shows them.
    let api_payment = app
        .get(&format!("/api/payments/{}", applied["payment"]["id"]))
        .await
        .expect(200);
    for field in [
        "id",
        "gateway",
        "external_id",
        "order_id",
        "amount_minor",
        "currency",
        "affiliate_fee_minor",
        "outcome",
    ] {
        assert_eq!(payment["data"][field], api_payment[field], "{field}");
    }
    assert_eq!(membership["data"]["id"], applied["membership"]["id"]);
    assert_eq!(membership["data"]["status"], "active");
    assert!(payment["timestamp"].as_str().unwrap().ends_with('Z'));

    let deliveries = app
        .get(&format!("/api/webhook-endpoints/{endpoint_id}/deliveries"))
        .await
        .expect(200);
    let items = deliveries["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for d in items {
        assert_eq!(d["status"], "delivered");
        assert_eq!(d["attempts"][0]["status_code"], 200);
        assert!(d["attempts"][0]["latency_ms"].as_i64().is_some());
    }
    // Nothing more to send.
    assert_eq!(deliver(&app).await, 0);
}

#[tokio::test]
async fn an_endpoint_gets_only_the_types_it_asked_for_and_a_rolled_back_change_sends_nothing() {
    let app = app().await;
    let receiver = Receiver::start().await;
    endpoint(&app, &receiver.url, &["membership.expired"]).await;
    paid_order(&app, 9202, -100_920_002).await;
    assert_eq!(app.count("webhook_events").await, 0);

    let (_, _) = endpoint(&app, &receiver.url, &["payment.needs_review"]).await;
    let mut db = app.db().await;
    let tx = db.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO payments (gateway, external_id, amount_minor, currency, paid_at, outcome,
             reason)
         VALUES ('acme', 'rolled_back', 100, 'UAH', now(), 'needs_review', 'unknown_order')",
        &[],
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(app.count("webhook_events").await, 0);
    // The same change committed is one event, one delivery.
    let body = json!({"reference": "ord_nobody", "amount_minor": 100, "currency": "UAH"});
    app.pay_order(&body, "kept").await.expect(200);
    assert_eq!(app.count("webhook_events").await, 1);
    assert_eq!(app.count("webhook_deliveries").await, 1);
}

/// The delivery's status, attempts and seconds until its next attempt.
async fn next(app: &TestApp) -> (String, i32, f64) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, attempts,
                    extract(epoch FROM next_attempt_at - statement_timestamp())::float8
             FROM webhook_deliveries",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn failures_are_retried_with_the_same_id_and_retry_after_is_honoured() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (endpoint_id, secret) = endpoint(&app, &receiver.url, &["payment.applied"]).await;
    receiver.answer(&[(500, None), (503, Some("3600"))]);
    paid_order(&app, 9203, -100_920_003).await;

    deliver(&app).await;
    let (status, attempts, wait) = next(&app).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    assert!((3.0..=6.0).contains(&wait), "the schedule's 5 s: {wait}");
    make_due(&app).await;
    deliver(&app).await;
    let (_, attempts, wait) = next(&app).await;
    assert_eq!(attempts, 2);
    assert!(
        (3500.0..=3601.0).contains(&wait),
        "Retry-After over 5 min: {wait}"
    );
    make_due(&app).await;
    deliver(&app).await;
    assert_eq!(next(&app).await.0, "delivered");

    let got = receiver.got();
    assert_eq!(got.len(), 3);
    let ids: Vec<&str> = got
        .iter()
        .map(|g| g.headers["webhook-id"].to_str().unwrap())
        .collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    for g in &got {
        verified(g, &secret);
    }
    let d = app
        .get(&format!("/api/webhook-endpoints/{endpoint_id}/deliveries"))
        .await
        .expect(200);
    let codes: Vec<i64> = d["items"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [500, 503, 200]);
    // A success forgets the failures.
    let e = app
        .get(&format!("/api/webhook-endpoints/{endpoint_id}"))
        .await
        .expect(200);
    assert_eq!(e["failing_since"], Value::Null);
}

#[tokio::test]
async fn gone_disables_and_so_do_five_days_of_failures_until_staff_enable_it() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (gone, _) = endpoint(&app, &receiver.url, &["payment.applied"]).await;
    receiver.answer(&[(410, None)]);
    paid_order(&app, 9204, -100_920_004).await;
    deliver(&app).await;
    let e = app
        .get(&format!("/api/webhook-endpoints/{gone}"))
        .await
        .expect(200);
    assert_eq!(
        (e["enabled"].clone(), e["disabled_reason"].clone()),
        (json!(false), json!("gone"))
    );
    // A disabled endpoint gets no new events.
    paid_order(&app, 9205, -100_920_005).await;
    assert_eq!(app.count("webhook_deliveries").await, 1);

    // Re-enabled by staff; then failing for more than five days.
    app.patch(
        &format!("/api/webhook-endpoints/{gone}"),
        json!({"enabled": true}),
    )
    .await
    .expect(200);
    receiver.answer(&[(500, None), (500, None)]);
    paid_order(&app, 9206, -100_920_006).await;
    deliver(&app).await;
    let e = app
        .get(&format!("/api/webhook-endpoints/{gone}"))
        .await
        .expect(200);
    assert_eq!(e["enabled"], true, "one failure does not disable");
    app.db()
        .await
        .execute(
            "UPDATE webhook_endpoints SET failing_since = statement_timestamp() - interval '5 days 1 minute'",
            &[],
        )
        .await
        .unwrap();
    make_due(&app).await;
    deliver(&app).await;
    let e = app
        .get(&format!("/api/webhook-endpoints/{gone}"))
        .await
        .expect(200);
    assert_eq!(e["disabled_reason"], "failing");
}

#[tokio::test]
async fn a_rotated_secret_and_the_previous_one_both_sign_and_a_replay_resends_the_same_event() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (endpoint_id, old) = endpoint(&app, &receiver.url, &["payment.applied"]).await;
    paid_order(&app, 9207, -100_920_007).await;
    deliver(&app).await;
    let rotated = app
        .post(
            &format!("/api/webhook-endpoints/{endpoint_id}/rotate"),
            Value::Null,
        )
        .await
        .expect(200);
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert!(rotated["previous_secret_until"].as_str().is_some());

    let d = app
        .get(&format!("/api/webhook-endpoints/{endpoint_id}/deliveries"))
        .await
        .expect(200)["items"][0]
        .clone();
    let replayed = app
        .post(
            &format!("/api/webhook-deliveries/{}/replay", d["id"]),
            Value::Null,
        )
        .await
        .expect(200);
    assert_eq!(replayed["status"], "pending");
    // Due now already: a second replay is refused.
    let again = app
        .post(
            &format!("/api/webhook-deliveries/{}/replay", d["id"]),
            Value::Null,
        )
        .await;
    assert_eq!(again.status.as_u16(), 409);
    deliver(&app).await;
    let got = receiver.got();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].headers["webhook-id"], got[1].headers["webhook-id"]);
    assert_eq!(got[0].body, got[1].body);
    let signatures = got[1].headers["webhook-signature"].to_str().unwrap();
    assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
    verified(&got[1], &old);
    verified(&got[1], &new);
    assert_eq!(
        app.post("/api/webhook-deliveries/999999/replay", Value::Null)
            .await
            .status
            .as_u16(),
        404
    );
}

/// A delivery being sent (claimed, its lease running) is not replayed: it would be sent twice at
/// once. One waiting for its next retry is.
#[tokio::test]
async fn a_delivery_being_sent_is_not_replayed() {
    let app = app().await;
    let receiver = Receiver::start().await;
    endpoint(&app, &receiver.url, &["payment.applied"]).await;
    paid_order(&app, 9212, -100_920_012).await;
    let db = app.db().await;
    let id: i64 = db
        .query_one("SELECT id FROM webhook_deliveries", &[])
        .await
        .unwrap()
        .get(0);
    // As a claim leaves it.
    db.execute(
        "UPDATE webhook_deliveries
         SET next_attempt_at = statement_timestamp() + interval '60 seconds',
             leased_until = statement_timestamp() + interval '60 seconds'",
        &[],
    )
    .await
    .unwrap();
    let path = format!("/api/webhook-deliveries/{id}/replay");
    let replay = || app.post(&path, Value::Null);
    assert_eq!(replay().await.status.as_u16(), 409);
    // As a failed attempt leaves it: waiting for its retry.
    db.execute(
        "UPDATE webhook_deliveries SET leased_until = NULL, attempts = 1,
             next_attempt_at = statement_timestamp() + interval '5 minutes'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(replay().await.expect(200)["status"], "pending");
    assert_eq!(deliver(&app).await, 1);
    assert_eq!(receiver.got().len(), 1);
}

#[tokio::test]
async fn the_sweep_and_staff_writes_report_membership_changes() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (_, secret) = endpoint(
        &app,
        &receiver.url,
        &[
            "membership.activated",
            "membership.renewed",
            "membership.expired",
            "membership.deleted",
        ],
    )
    .await;
    let s = app.create_subscriber(9208).await;
    let c = app.create_channel(-100_920_008, json!({})).await;
    let grant = json!({"subscriber_id": id(&s), "channel_id": id(&c), "days": 3});
    let m = app
        .post("/api/memberships", grant.clone())
        .await
        .expect(201);
    app.post("/api/memberships", grant).await.expect(200);
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"expires_at": "2020-01-01T00:00:00Z"}),
    )
    .await
    .expect(200);
    app.post("/api/sweep", Value::Null).await.expect(200);
    app.delete(&format!("/api/memberships/{}", id(&m)))
        .await
        .expect(204);
    deliver(&app).await;
    let types: Vec<String> = receiver
        .got()
        .iter()
        .map(|g| verified(g, &secret)["type"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = types.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "membership.activated",
            "membership.deleted",
            "membership.expired",
            "membership.renewed"
        ],
        "{types:?}"
    );
}

#[tokio::test]
async fn endpoint_urls_must_be_https_and_public() {
    let app = TestApp::spawn().await;
    for (url, message) in [
        ("http://1.1.1.1/hook", "must use https"),
        ("https://127.0.0.1/hook", "resolves to a private"),
        ("https://10.0.0.7/hook", "resolves to a private"),
        ("https://[::1]/hook", "resolves to a private"),
        ("https://localhost/hook", "resolves to a private"),
        // Addresses that embed a private IPv4 one, and special-purpose space.
        ("https://[64:ff9b::a00:7]/hook", "resolves to a private"),
        ("https://[2002:a00:7::1]/hook", "resolves to a private"),
        ("https://[::a00:7]/hook", "resolves to a private"),
        ("https://[fec0::7]/hook", "resolves to a private"),
        ("https://198.18.0.7/hook", "resolves to a private"),
        ("https://100.64.0.7/hook", "resolves to a private"),
        ("https://168.63.129.16/hook", "resolves to a private"),
        ("ftp://1.1.1.1/", "must use https"),
        ("nonsense", "must be an absolute URL"),
    ] {
        let r = app
            .post(
                "/api/webhook-endpoints",
                json!({"url": url, "event_types": ["payment.applied"]}),
            )
            .await;
        let body = r.expect(422);
        assert!(
            body["errors"]["url"].as_str().unwrap().contains(message),
            "{url}: {body}"
        );
    }
    let bad_type = app
        .post(
            "/api/webhook-endpoints",
            json!({"url": "https://1.1.1.1/hook", "event_types": ["payment.lost"]}),
        )
        .await
        .expect(422);
    assert!(bad_type["errors"]["event_types"].is_string());
    let none = app
        .post(
            "/api/webhook-endpoints",
            json!({"url": "https://1.1.1.1/hook", "event_types": []}),
        )
        .await
        .expect(422);
    assert!(none["errors"]["event_types"].is_string());
    app.post("/api/webhook-endpoints", json!({}))
        .await
        .expect(422);
    assert_eq!(app.count("webhook_endpoints").await, 0);

    // A retried create (same Idempotency-Key) answers the first answer: one endpoint, one secret.
    let body = json!({"url": "https://1.1.1.1/hook", "event_types": ["payment.applied"]});
    let create = || {
        app.staff_with(
            axum::http::Method::POST,
            "/api/webhook-endpoints",
            body.clone(),
            &[("idempotency-key", "create-endpoint-1")],
        )
    };
    let first = create().await.expect(201);
    let again = create().await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.expect(201)["secret"], first["secret"]);
    assert_eq!(app.count("webhook_endpoints").await, 1);
    app.delete(&format!("/api/webhook-endpoints/{}", id(&first)))
        .await
        .expect(204);

    // The address is checked again when sending: an endpoint that resolves to a private address
    // now is not called, and the attempt says why.
    app.db()
        .await
        .execute(
            "INSERT INTO webhook_endpoints (url, event_types, secret)
             VALUES ('https://127.0.0.1:9/hook', '{payment.applied}', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')",
            &[],
        )
        .await
        .unwrap();
    paid_order(&app, 9209, -100_920_009).await;
    deliver(&app).await;
    let error: String = app
        .db()
        .await
        .query_one("SELECT error FROM webhook_attempts", &[])
        .await
        .unwrap()
        .get(0);
    assert!(error.contains("private"), "{error}");
}

#[tokio::test]
async fn a_refund_at_the_gateway_and_a_trial_are_reported() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let (_, secret) = endpoint(
        &app,
        &receiver.url,
        &["payment.refunded", "trial.started", "membership.expired"],
    )
    .await;
    let s = id(&app.create_subscriber(9210).await);
    let c = id(&app.create_channel(-100_920_010, json!({})).await);
    let o = app.create_order(s, c).await;
    let r = crate::support::helpers::reference(&o);
    app.post_wayforpay(&crate::support::helpers::wayforpay_callback(
        &r, "199", "UAH", "Approved",
    ))
    .await
    .expect(200);
    app.post_wayforpay(&crate::support::helpers::wayforpay_callback(
        &r, "199", "UAH", "Refunded",
    ))
    .await
    .expect(200);
    let trial_channel = id(&app.create_channel(-100_920_011, json!({})).await);
    let plan =
        crate::catalog::bundles::insert_plan(&app, "trial", 0, "UAH", Some(7), &[trial_channel])
            .await;
    let trial_order = crate::catalog::bundles::order_plan(&app, s, plan).await;
    app.post(
        &format!("/api/orders/{}/claim", id(&trial_order)),
        Value::Null,
    )
    .await
    .expect(200);
    deliver(&app).await;
    let bodies: Vec<Value> = receiver
        .got()
        .iter()
        .map(|g| verified(g, &secret))
        .collect();
    let of = |t: &str| bodies.iter().find(|b| b["type"] == t).unwrap();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert_eq!(of("payment.refunded")["data"]["outcome"], "refunded");
    assert_eq!(
        of("payment.refunded")["data"]["reason"],
        "refunded_at_gateway"
    );
    assert_eq!(of("membership.expired")["data"]["channel_id"], c);
    assert_eq!(of("trial.started")["data"]["channel_id"], trial_channel);
}

/// Two deliverers (two processes) running at once never send one delivery twice.
#[tokio::test]
async fn concurrent_deliverers_send_each_delivery_once() {
    let app = std::sync::Arc::new(app().await);
    let receiver = Receiver::start().await;
    endpoint(
        &app,
        &receiver.url,
        &["payment.applied", "membership.activated"],
    )
    .await;
    for round in 0..5 {
        paid_order(&app, 9400 + round, -100_940_000 - round).await;
        let mut sent = 0;
        for n in race(3, |_| {
            let app = app.clone();
            async move { deliver(&app).await }
        })
        .await
        {
            sent += n;
        }
        assert_eq!(sent, 2, "round {round}: two deliveries, each claimed once");
    }
    let got = receiver.got();
    let mut ids: Vec<String> = got
        .iter()
        .map(|g| g.headers["webhook-id"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 10);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 10, "no event sent twice");
    assert_eq!(
        app.count("webhook_deliveries WHERE status = 'delivered'")
            .await,
        10
    );
}
