//! Door 4 (Stripe) and the bot's Stripe Checkout pages: events signed here as Stripe signs them
//! (HMAC-SHA256 over `t.body`, computed in this file rather than by the service's code), and
//! Checkout Sessions made against [`FakeStripe`].

use chrono::Utc;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::{
    bot::conversation::{
        BOT, PUBLIC_URL, assert_answer, button_update, buttons, channel, person, run, send,
    },
    support::{
        fake_bot::{FakeBot, TOKEN},
        fake_stripe::{FakeStripe, SECRET_KEY, WEBHOOK_SECRET},
        helpers::{TestApp, TestResponse, id, reference},
        race::race,
    },
};

/// A Stripe-configured app (WayForPay stays configured, as in every test).
pub(crate) async fn stripe_app(api_url: &str) -> TestApp {
    let api_url = api_url.to_string();
    TestApp::spawn_with(move |env| {
        env.insert("STRIPE_SECRET_KEY".into(), SECRET_KEY.into());
        env.insert("STRIPE_WEBHOOK_SECRET".into(), WEBHOOK_SECRET.into());
        env.insert("STRIPE_API_URL".into(), api_url);
    })
    .await
}

/// `t=…,v1=…` as Stripe computes it.
fn stripe_signature(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

async fn post_raw(app: &TestApp, body: &str, signature: Option<String>) -> TestResponse {
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(s) = signature {
        headers.push(("stripe-signature", s));
    }
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    app.request(
        axum::http::Method::POST,
        "/api/webhook/stripe",
        &headers,
        body.to_string(),
    )
    .await
}

/// Posts `event`, signed now as Stripe signs it.
pub(crate) async fn post_event(app: &TestApp, event: &Value) -> TestResponse {
    let body = event.to_string();
    let sig = crate::support::fake_stripe::signature(Utc::now().timestamp(), &body);
    post_raw(app, &body, Some(sig)).await
}

pub(crate) fn session_completed(
    reference: &str,
    intent: &str,
    amount: i64,
    currency: &str,
) -> Value {
    json!({
        "id": format!("evt_{intent}"), "object": "event", "type": "checkout.session.completed",
        "created": Utc::now().timestamp(), "livemode": false,
        "data": {"object": {
            "id": format!("cs_{intent}"), "object": "checkout.session", "mode": "payment",
            "payment_status": "paid", "status": "complete", "payment_intent": intent,
            "amount_total": amount, "currency": currency,
            "client_reference_id": reference, "metadata": {"order": reference}
        }}
    })
}

fn charge_refunded(intent: &str, refunded: bool) -> Value {
    json!({
        "id": format!("evt_r_{intent}"), "object": "event", "type": "charge.refunded",
        "created": Utc::now().timestamp(),
        "data": {"object": {"id": format!("ch_{intent}"), "object": "charge",
            "payment_intent": intent, "amount": 19900,
            "amount_refunded": if refunded { 19900 } else { 100 }, "refunded": refunded}}
    })
}

/// A subscriber, a 199.00 UAH channel and an order; returns (channel id, order).
pub(crate) async fn order(app: &TestApp, user: i64, chat: i64) -> (i64, Value) {
    let s = app.create_subscriber(user).await;
    let c = app.create_channel(chat, json!({})).await;
    let o = app.create_order(id(&s), id(&c)).await;
    (id(&c), o)
}

pub(crate) async fn membership_status(app: &TestApp, channel: i64) -> Option<String> {
    app.db()
        .await
        .query_opt(
            "SELECT status FROM memberships WHERE channel_id = $1",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test]
async fn without_stripe_configured_the_door_is_closed() {
    let app = TestApp::spawn().await;
    let r = post_event(&app, &json!({"id": "evt_1", "type": "x"})).await;
    assert_eq!(r.status.as_u16(), 503);
}

#[tokio::test]
async fn a_paid_checkout_session_applies_once() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (c, o) = order(&app, 8101, -100_810_001).await;
    let event = session_completed(&reference(&o), "pi_paid_1", 19900, "uah");
    let first = post_event(&app, &event).await.expect(200);
    assert_eq!(first["duplicate"], false, "{first}");
    assert_eq!(first["payment"]["gateway"], "stripe");
    assert_eq!(first["payment"]["external_id"], "pi_paid_1");
    assert_eq!(first["payment"]["currency"], "UAH");
    assert_eq!(first["payment"]["outcome"], "applied");
    assert_eq!(first["membership"]["status"], "active");
    // Stripe delivers again: the same payment, nothing changes.
    let again = post_event(&app, &event).await.expect(200);
    assert_eq!(again["duplicate"], true);
    assert_eq!(
        again["membership"]["expires_at"],
        first["membership"]["expires_at"]
    );
    assert_eq!(app.count("payments").await, 1);
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
    let o = app
        .get(&format!("/api/orders/{}", id(&o)))
        .await
        .expect(200);
    assert_eq!(o["status"], "paid");
}

#[tokio::test]
async fn a_wrong_amount_is_kept_for_review() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (c, o) = order(&app, 8102, -100_810_002).await;
    let r = post_event(
        &app,
        &session_completed(&reference(&o), "pi_short", 100, "uah"),
    )
    .await
    .expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review");
    assert_eq!(r["payment"]["reason"], "amount_mismatch");
    assert_eq!(membership_status(&app, c).await, None);
}

#[tokio::test]
async fn unsigned_stale_forged_and_malformed_events_store_nothing() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (_, o) = order(&app, 8103, -100_810_003).await;
    let body = session_completed(&reference(&o), "pi_bad", 19900, "uah").to_string();
    let now = Utc::now().timestamp();
    let cases = [
        (None, 401),
        (Some("garbage".to_string()), 401),
        (
            Some(stripe_signature("whsec_someone_else_1234", now, &body)),
            401,
        ),
        (
            Some(stripe_signature(WEBHOOK_SECRET, now - 301, &body)),
            401,
        ),
        (
            Some(stripe_signature(WEBHOOK_SECRET, now + 301, &body)),
            401,
        ),
    ];
    for (sig, status) in cases {
        let r = post_raw(&app, &body, sig.clone()).await;
        assert_eq!(r.status.as_u16(), status, "{sig:?}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    // Signed, but not an event, or a field of the wrong type: 400; a paid session without a
    // payment intent: 422.
    for (body, status) in [
        ("not json".to_string(), 400),
        (json!({"id": "evt_x"}).to_string(), 400),
        (
            session_completed(&reference(&o), "pi_x", 19900, "uah")
                .to_string()
                .replace("19900", "\"19900\""),
            400,
        ),
        (
            session_completed(&reference(&o), "pi_x", 19900, "uah")
                .to_string()
                .replace("\"pi_x\"", "null"),
            422,
        ),
    ] {
        let sig = stripe_signature(WEBHOOK_SECRET, now, &body);
        let r = post_raw(&app, &body, Some(sig)).await;
        assert_eq!(r.status.as_u16(), status, "{body}");
    }
    // A second v1 (Stripe rolling its secret) is accepted when any one matches.
    let good = stripe_signature(WEBHOOK_SECRET, now, &body);
    let two = format!(
        "t={now},v1={},{}",
        "ab".repeat(32),
        good.split(',').nth(1).unwrap()
    );
    post_raw(&app, &body, Some(two)).await.expect(200);
    assert_eq!(app.count("payments").await, 1);
}

#[tokio::test]
async fn other_events_and_unpaid_sessions_are_ignored() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (_, o) = order(&app, 8104, -100_810_004).await;
    let mut unpaid = session_completed(&reference(&o), "pi_unpaid", 19900, "uah");
    unpaid["data"]["object"]["payment_status"] = json!("unpaid");
    for event in [
        unpaid,
        json!({"id": "evt_c", "type": "customer.created", "created": 1, "data": {"object": {}}}),
        charge_refunded("pi_unknown", false),
    ] {
        assert_eq!(
            post_event(&app, &event).await.expect(200),
            json!({"ignored": true})
        );
    }
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn a_full_refund_takes_back_what_the_payment_bought_once() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (c, o) = order(&app, 8105, -100_810_005).await;
    post_event(
        &app,
        &session_completed(&reference(&o), "pi_refund", 19900, "uah"),
    )
    .await
    .expect(200);
    // A partial refund takes nothing back.
    assert_eq!(
        post_event(&app, &charge_refunded("pi_refund", false))
            .await
            .expect(200),
        json!({"ignored": true})
    );
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
    let r = post_event(&app, &charge_refunded("pi_refund", true))
        .await
        .expect(200);
    assert_eq!(r, json!({"refund": "refunded"}));
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("expired"));
    let p = app.get("/api/payments").await.expect(200)["items"][0].clone();
    assert_eq!(
        (p["outcome"].as_str(), p["reason"].as_str()),
        (Some("refunded"), Some("refunded_at_gateway"))
    );
    let again = post_event(&app, &charge_refunded("pi_refund", true))
        .await
        .expect(200);
    assert_eq!(again, json!({"refund": "already_refunded"}));
    let unknown = post_event(&app, &charge_refunded("pi_never", true))
        .await
        .expect(200);
    assert_eq!(unknown, json!({"refund": "unknown_payment"}));
}

// ---- the bot's Stripe Checkout pages ----

pub(crate) async fn bot_app(fake: &FakeBot, stripe: &FakeStripe, with_wayforpay: bool) -> TestApp {
    let (bot_url, stripe_url) = (fake.url.clone(), stripe.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), BOT.into());
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
        env.insert("STRIPE_SECRET_KEY".into(), SECRET_KEY.into());
        env.insert("STRIPE_WEBHOOK_SECRET".into(), WEBHOOK_SECRET.into());
        env.insert("STRIPE_API_URL".into(), stripe_url);
        if !with_wayforpay {
            env.insert("WAYFORPAY_MERCHANT_ACCOUNT".into(), String::new());
            env.insert("WAYFORPAY_SECRET_KEY".into(), String::new());
        }
    })
    .await
}

async fn bot_order_reference(app: &TestApp, user: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_bot_sends_one_checkout_page_per_order_however_often_it_is_retried() {
    let (fake, stripe) = (FakeBot::start().await, FakeStripe::start().await);
    let app = bot_app(&fake, &stripe, false).await;
    let c = channel(
        &app,
        -100_810_006,
        json!({"title": "Stripe club", "currency": "USD", "price_minor": 1999}),
    )
    .await;
    let buyer = person(8106);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        crate::bot::conversation::ON_ITS_WAY,
    );
    let reference = bot_order_reference(&app, 8106).await;

    // The first answer is lost (the session was made): the effect is retried, and the retry's
    // same Idempotency-Key finds the same session.
    stripe.lose_answers(1);
    run(&app).await;
    assert!(fake.calls_of("sendMessage").is_empty());
    crate::support::effects::make_due(&app).await;
    run(&app).await;
    // A second press reuses the order: no new session either.
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;

    assert_eq!(stripe.sessions_made(), 1);
    let received = stripe.received();
    assert_eq!(received.len(), 2, "{received:?}");
    for r in &received {
        assert_eq!(
            r.idempotency_key.as_deref(),
            Some(format!("subgate-checkout-{reference}").as_str())
        );
        assert_eq!(r.form["mode"], "payment");
        assert_eq!(r.form["client_reference_id"], reference);
        assert_eq!(r.form["metadata[order]"], reference);
        assert_eq!(r.form["line_items[0][price_data][currency]"], "usd");
        assert_eq!(r.form["line_items[0][price_data][unit_amount]"], "1999");
        assert_eq!(
            r.form["line_items[0][price_data][product_data][name]"],
            "Stripe club"
        );
        assert_eq!(r.form["success_url"], format!("https://t.me/{BOT}"));
    }
    let messages = fake.calls_of("sendMessage");
    assert_eq!(messages.len(), 1);
    let b = buttons(&messages[0].params);
    assert_eq!(
        b,
        [(
            "Pay 19.99 USD by card".to_string(),
            "https://checkout.stripe.com/c/pay/cs_test_1".to_string()
        )]
    );

    // Stripe reports the payment: the buyer is in.
    let r = post_event(&app, &session_completed(&reference, "pi_bot", 1999, "usd"))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "applied");
    assert_eq!(r["membership"]["status"], "active");
}

#[tokio::test]
async fn with_both_gateways_the_buyer_picks_one_of_two_buttons() {
    let (fake, stripe) = (FakeBot::start().await, FakeStripe::start().await);
    let app = bot_app(&fake, &stripe, true).await;
    let c = channel(&app, -100_810_007, json!({"title": "Either way"})).await;
    send(&app, &button_update(&person(8107), &format!("b:{c}"))).await;
    run(&app).await;
    let messages = fake.calls_of("sendMessage");
    assert_eq!(messages.len(), 1);
    let b = buttons(&messages[0].params);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0].0, "Pay 199.00 UAH by card (WayForPay)");
    assert!(
        b[0].1.starts_with("https://secure.wayforpay.com/pay?"),
        "{b:?}"
    );
    assert_eq!(b[1].0, "Pay 199.00 UAH by card (Stripe)");
    assert_eq!(b[1].1, "https://checkout.stripe.com/c/pay/cs_test_1");
    assert_eq!(stripe.sessions_made(), 1);
}

/// Stripe sending the same event several times at once: one payment, one term.
#[tokio::test]
async fn concurrent_redeliveries_of_one_event_apply_once() {
    let app = std::sync::Arc::new(stripe_app("http://127.0.0.1:9").await);
    for round in 0..5 {
        let (c, o) = order(&app, 8200 + round, -100_820_000 - round).await;
        let event = session_completed(&reference(&o), &format!("pi_race_{round}"), 19900, "uah");
        let mut fresh = 0;
        for answer in race(6, |_| {
            let (app, event) = (app.clone(), event.clone());
            async move { post_event(&app, &event).await.expect(200) }
        })
        .await
        {
            if answer["duplicate"] == false {
                fresh += 1;
            }
        }
        assert_eq!(fresh, 1, "round {round}");
        let days: f64 = app
            .db()
            .await
            .query_one(
                "SELECT extract(epoch FROM expires_at - created_at)::float8 / 86400
                 FROM memberships WHERE channel_id = $1",
                &[&(c as i32)],
            )
            .await
            .unwrap()
            .get(0);
        assert!((29.9..30.1).contains(&days), "one term of 30 days: {days}");
    }
    assert_eq!(app.count("payments").await, 5);
}
