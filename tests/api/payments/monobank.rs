//! Door 5 (Monobank acquiring) and the bot's Monobank invoices, against [`FakeMonobank`]: a real
//! HTTP server with a real P-256 key pair of its own, whose reports are signed there (ECDSA over
//! the raw body) and whose public key the service fetches, caches, and fetches again once when
//! a signature stops verifying. Each test reads the answers, the rows and the fakes' records.

use std::sync::Arc;

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use subgate::payments::gateways::monobank::{self, reconcile};

use crate::{
    bot::conversation::{
        BOT, PUBLIC_URL, button_update, buttons, channel, membership_of, messages_to, person, run,
        send,
    },
    support::{
        fake_bot::{FakeBot, Reply, TOKEN as BOT_TOKEN},
        fake_monobank::{FakeMonobank, TOKEN, report},
        helpers::{TestApp, TestResponse, id, reference},
        race::race,
    },
};

/// An app whose Monobank API is `mono` (WayForPay stays configured, as in every test).
async fn mono_app(mono: &FakeMonobank) -> TestApp {
    let url = mono.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("MONOBANK_TOKEN".into(), TOKEN.into());
        env.insert("MONOBANK_API_URL".into(), url);
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
    })
    .await
}

async fn post_raw(app: &TestApp, body: &str, sign: Option<String>) -> TestResponse {
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(s) = sign {
        headers.push(("x-sign", s));
    }
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    app.request(
        axum::http::Method::POST,
        "/api/webhook/monobank",
        &headers,
        body.to_string(),
    )
    .await
}

/// Posts `body` signed by the fake's current key, as Monobank delivers it.
async fn deliver(app: &TestApp, mono: &FakeMonobank, body: &str) -> TestResponse {
    post_raw(app, body, Some(mono.sign(body))).await
}

/// A subscriber, a 199.00 UAH channel and an order; returns (channel id, order reference).
async fn order(app: &TestApp, user: i64, chat: i64) -> (i64, String) {
    let s = app.create_subscriber(user).await;
    let c = app.create_channel(chat, json!({})).await;
    let o = app.create_order(id(&s), id(&c)).await;
    (id(&c), reference(&o))
}

async fn payments_of(app: &TestApp, invoice: &str) -> Vec<(String, Option<String>)> {
    app.db()
        .await
        .query(
            "SELECT outcome, reason FROM payments WHERE gateway = 'monobank' AND external_id = $1",
            &[&invoice],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn membership_status(app: &TestApp, channel: i64) -> Option<String> {
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

async fn payment_events(app: &TestApp, channel: i64) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT count(*) FROM membership_events e JOIN memberships m ON m.id = e.membership_id
             WHERE m.channel_id = $1 AND e.cause = 'payment'",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get(0)
}

fn now() -> chrono::DateTime<Utc> {
    Utc::now()
}

#[tokio::test]
async fn without_monobank_configured_the_door_is_closed() {
    let app = TestApp::spawn().await;
    let body = report("p2_x", "success", 19900, 980, "ord", now());
    let r = post_raw(&app, &body, Some(FakeMonobank::sign_by_stranger(&body))).await;
    assert_eq!(r.status.as_u16(), 503);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn a_signed_success_applies_once_and_its_replay_is_a_duplicate() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (c, r) = order(&app, 9101, -100_910_001).await;
    let body = report("p2_paid", "success", 19900, 980, &r, now());
    let first = deliver(&app, &mono, &body).await.expect(200);
    assert_eq!(
        first,
        json!({"invoice_id": "p2_paid", "status": "success", "result": "applied",
               "payment_id": first["payment_id"]})
    );
    assert!(first["payment_id"].is_i64());
    let p = app
        .get(&format!("/api/payments/{}", first["payment_id"]))
        .await
        .expect(200);
    assert_eq!(p["gateway"], "monobank");
    assert_eq!(p["external_id"], "p2_paid");
    assert_eq!(
        (p["amount_minor"].as_i64(), p["currency"].as_str()),
        (Some(19900), Some("UAH"))
    );
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
    // Monobank delivers the same body again (or anyone replays it): a duplicate.
    let again = deliver(&app, &mono, &body).await.expect(200);
    assert_eq!(again["result"], "duplicate");
    assert_eq!(again["payment_id"], first["payment_id"]);
    // A later report of the same invoice, as new or newer, is still the one payment of
    // (monobank, invoiceId).
    let later = report(
        "p2_paid",
        "success",
        19900,
        980,
        &r,
        now() + Duration::seconds(5),
    );
    assert_eq!(
        deliver(&app, &mono, &later).await.expect(200)["result"],
        "duplicate"
    );
    assert_eq!(payments_of(&app, "p2_paid").await.len(), 1);
    assert_eq!(payment_events(&app, c).await, 1);
    // The key was fetched once, on the first delivery.
    assert_eq!(mono.pubkey_fetches(), 1);
}

#[tokio::test]
async fn unsigned_forged_and_malformed_reports_store_nothing() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (_, r) = order(&app, 9102, -100_910_002).await;
    let body = report("p2_forged", "success", 19900, 980, &r, now());
    for sign in [None, Some("garbage!".to_string()), Some(String::new())] {
        let resp = post_raw(&app, &body, sign.clone()).await;
        assert_eq!(resp.status.as_u16(), 401, "{sign:?}");
        assert_eq!(
            resp.header("content-type"),
            Some("application/problem+json")
        );
    }
    // A header that is no signature at all is refused without asking Monobank for a key.
    assert_eq!(mono.pubkey_fetches(), 0);
    // The body is signed byte for byte.
    let sign = mono.sign(&body);
    let altered = body.replace("19900", "1990");
    assert_eq!(
        post_raw(&app, &altered, Some(sign)).await.status.as_u16(),
        401
    );
    // Signed, but not a report, a field of the wrong type (400), or a field missing or
    // invalid (422).
    for (bad, status) in [
        ("not json".to_string(), 400),
        (body.replace("19900,", "\"19900\","), 400),
        (body.replace("\"p2_forged\"", "null"), 422),
        (body.replace("\"success\"", "\"paid\""), 422),
        (body.replace("980", "643"), 422),
    ] {
        let resp = deliver(&app, &mono, &bad).await;
        assert_eq!(resp.status.as_u16(), status, "{bad}");
    }
    assert_eq!(app.count("payments").await, 0);
    assert_eq!(
        app.db()
            .await
            .query_one("SELECT count(*) FROM monobank_invoices", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0
    );
}

#[tokio::test]
async fn a_signature_by_another_key_is_refused_after_exactly_one_refetch() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (_, r) = order(&app, 9103, -100_910_003).await;
    // The key is cached by a first good delivery.
    let created = report("p2_other", "created", 19900, 980, &r, now());
    deliver(&app, &mono, &created).await.expect(200);
    assert_eq!(mono.pubkey_fetches(), 1);
    let body = report(
        "p2_other",
        "success",
        19900,
        980,
        &r,
        now() + Duration::seconds(1),
    );
    for n in 1..=2 {
        let resp = post_raw(&app, &body, Some(FakeMonobank::sign_by_stranger(&body))).await;
        assert_eq!(resp.status.as_u16(), 401);
        assert_eq!(
            mono.pubkey_fetches(),
            1 + n,
            "one fetch per refused delivery"
        );
    }
    assert_eq!(app.count("payments").await, 0);
    // Monobank's own signature still verifies with the key fetched again.
    deliver(&app, &mono, &body).await.expect(200);
    assert_eq!(mono.pubkey_fetches(), 3);
    assert_eq!(app.count("payments").await, 1);
}

#[tokio::test]
async fn a_rotated_key_is_accepted_after_one_refetch() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (c, r) = order(&app, 9104, -100_910_004).await;
    let created = report("p2_rotated", "created", 19900, 980, &r, now());
    deliver(&app, &mono, &created).await.expect(200);
    assert_eq!(mono.pubkey_fetches(), 1);
    mono.rotate();
    let paid = report(
        "p2_rotated",
        "success",
        19900,
        980,
        &r,
        now() + Duration::seconds(1),
    );
    let answer = deliver(&app, &mono, &paid).await.expect(200);
    assert_eq!(answer["result"], "applied");
    assert_eq!(mono.pubkey_fetches(), 2);
    // The new key is cached: no further fetch.
    deliver(&app, &mono, &paid).await.expect(200);
    assert_eq!(mono.pubkey_fetches(), 2);
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
}

#[tokio::test]
async fn concurrent_deliveries_under_a_rotated_key_fetch_it_once() {
    let mono = Arc::new(FakeMonobank::start().await);
    let app = Arc::new(mono_app(&mono).await);
    let (_, r) = order(&app, 9105, -100_910_005).await;
    deliver(
        &app,
        &mono,
        &report("p2_burst", "created", 19900, 980, &r, now()),
    )
    .await
    .expect(200);
    for round in 0..3 {
        mono.rotate();
        let before = mono.pubkey_fetches();
        let body = report("p2_burst", "processing", 19900, 980, &r, now());
        let answers = race(8, |_| {
            let (app, mono, body) = (app.clone(), mono.clone(), body.clone());
            async move { deliver(&app, &mono, &body).await.status.as_u16() }
        })
        .await;
        assert_eq!(answers, [200; 8], "round {round}");
        assert_eq!(
            mono.pubkey_fetches(),
            before + 1,
            "round {round}: one fetch"
        );
    }
}

#[tokio::test]
async fn a_wrong_amount_or_currency_is_kept_for_review() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (c, r) = order(&app, 9106, -100_910_006).await;
    let short = deliver(
        &app,
        &mono,
        &report("p2_short", "success", 100, 980, &r, now()),
    )
    .await
    .expect(200);
    assert_eq!(short["result"], "needs_review");
    let dollars = deliver(
        &app,
        &mono,
        &report("p2_usd", "success", 19900, 840, &r, now()),
    )
    .await
    .expect(200);
    assert_eq!(dollars["result"], "needs_review");
    assert_eq!(
        payments_of(&app, "p2_short").await,
        [("needs_review".into(), Some("amount_mismatch".into()))]
    );
    assert_eq!(
        payments_of(&app, "p2_usd").await,
        [("needs_review".into(), Some("currency_mismatch".into()))]
    );
    assert_eq!(membership_status(&app, c).await, None);
}

#[tokio::test]
async fn a_reversal_before_its_payment_and_a_stale_report_after_it_change_nothing_back() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let (c, r) = order(&app, 9107, -100_910_007).await;
    let t = now();
    // Monobank's webhooks are not ordered: the refund arrives first.
    let reversed = report(
        "p2_rev",
        "reversed",
        19900,
        980,
        &r,
        t + Duration::seconds(60),
    );
    let answer = deliver(&app, &mono, &reversed).await.expect(200);
    assert_eq!(answer["result"], "recorded_before_payment");
    // The payment that follows is older: stale, nothing granted.
    let paid = report("p2_rev", "success", 19900, 980, &r, t);
    assert_eq!(
        deliver(&app, &mono, &paid).await.expect(200)["result"],
        "stale"
    );
    assert_eq!(
        payments_of(&app, "p2_rev").await,
        [("refunded".into(), Some("refunded_before_payment".into()))]
    );
    assert_eq!(membership_status(&app, c).await, None);

    // Another order: paid, then a `processing` report older than the payment arrives late.
    let (c2, r2) = order(&app, 9108, -100_910_008).await;
    let paid = report("p2_late", "success", 19900, 980, &r2, t);
    deliver(&app, &mono, &paid).await.expect(200);
    let processing = report(
        "p2_late",
        "processing",
        19900,
        980,
        &r2,
        t - Duration::seconds(30),
    );
    let answer = deliver(&app, &mono, &processing).await.expect(200);
    assert_eq!(answer["result"], "stale");
    let failure = report(
        "p2_late",
        "failure",
        19900,
        980,
        &r2,
        t - Duration::seconds(10),
    );
    assert_eq!(
        deliver(&app, &mono, &failure).await.expect(200)["result"],
        "stale"
    );
    assert_eq!(membership_status(&app, c2).await.as_deref(), Some("active"));
    let paid: String = app
        .db()
        .await
        .query_one("SELECT status FROM orders WHERE reference = $1", &[&r2])
        .await
        .unwrap()
        .get(0);
    assert_eq!(paid, "paid");
    let stored: String = app
        .db()
        .await
        .query_one(
            "SELECT status FROM monobank_invoices WHERE invoice_id = 'p2_late'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, "success");
    // The refund, newer, takes back what it bought.
    let refunded = report(
        "p2_late",
        "reversed",
        19900,
        980,
        &r2,
        t + Duration::seconds(90),
    );
    assert_eq!(
        deliver(&app, &mono, &refunded).await.expect(200)["result"],
        "refunded"
    );
    assert_eq!(
        membership_status(&app, c2).await.as_deref(),
        Some("expired")
    );
}

#[tokio::test]
async fn a_failed_payment_releases_the_orders_hold() {
    let mono = FakeMonobank::start().await;
    let app = mono_app(&mono).await;
    let s = app.create_subscriber(9109).await;
    let c = app
        .create_channel(-100_910_009, json!({"seat_limit": 1}))
        .await;
    let o = app.create_order(id(&s), id(&c)).await;
    app.checkout(id(&o)).await.expect(200);
    let failed = report("p2_fail", "failure", 19900, 980, &reference(&o), now());
    let answer = deliver(&app, &mono, &failed).await.expect(200);
    assert_eq!(answer["result"], "released");
    let held: bool = app
        .db()
        .await
        .query_one(
            "SELECT hold_until > statement_timestamp() FROM orders WHERE id = $1",
            &[&id(&o)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!held, "the seat is free for others at once");
    assert_eq!(
        deliver(&app, &mono, &failed).await.expect(200)["result"],
        "not_held"
    );
    assert_eq!(app.count("payments").await, 0);
}

/// Monobank delivering one report several times at once: one payment, one term.
#[tokio::test]
async fn concurrent_deliveries_of_one_report_apply_once() {
    let mono = Arc::new(FakeMonobank::start().await);
    let app = Arc::new(mono_app(&mono).await);
    for round in 0..5 {
        let (c, r) = order(&app, 9200 + round, -100_920_000 - round).await;
        let body = report(
            &format!("p2_race_{round}"),
            "success",
            19900,
            980,
            &r,
            now(),
        );
        let answers = race(6, |_| {
            let (app, mono, body) = (app.clone(), mono.clone(), body.clone());
            async move { deliver(&app, &mono, &body).await.expect(200) }
        })
        .await;
        let applied = answers.iter().filter(|a| a["result"] == "applied").count();
        let duplicates = answers
            .iter()
            .filter(|a| a["result"] == "duplicate")
            .count();
        assert_eq!((applied, duplicates), (1, 5), "round {round}: {answers:?}");
        assert_eq!(
            payments_of(&app, &format!("p2_race_{round}")).await.len(),
            1
        );
        assert_eq!(
            payment_events(&app, c).await,
            1,
            "round {round}: one extension"
        );
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
}

/// A payment and its refund delivered at once: whichever runs first, the rows end refunded
/// and the buyer holds nothing.
#[tokio::test]
async fn a_payment_and_its_refund_delivered_together_end_refunded() {
    let mono = Arc::new(FakeMonobank::start().await);
    let app = Arc::new(mono_app(&mono).await);
    for round in 0..5 {
        let (c, r) = order(&app, 9300 + round, -100_930_000 - round).await;
        let invoice = format!("p2_both_{round}");
        let t = now();
        let bodies = [
            report(&invoice, "success", 19900, 980, &r, t),
            report(
                &invoice,
                "reversed",
                19900,
                980,
                &r,
                t + Duration::seconds(30),
            ),
        ];
        race(4, |i| {
            let (app, mono, body) = (app.clone(), mono.clone(), bodies[i % 2].clone());
            async move { deliver(&app, &mono, &body).await.expect(200) }
        })
        .await;
        let rows = payments_of(&app, &invoice).await;
        assert_eq!(rows.len(), 1, "round {round}");
        assert_eq!(rows[0].0, "refunded", "round {round}: {rows:?}");
        assert_ne!(
            membership_status(&app, c).await.as_deref(),
            Some("active"),
            "round {round}"
        );
        let stored: String = app
            .db()
            .await
            .query_one(
                "SELECT status FROM monobank_invoices WHERE invoice_id = $1",
                &[&invoice],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(stored, "reversed", "round {round}: the newest report stays");
    }
}

#[tokio::test]
async fn staff_refunds_go_through_invoice_cancel() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(&app, -100_910_010, json!({"title": "Refundable"})).await;
    send(&app, &button_update(&person(9110), &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = mono.invoices()[0].clone();
    mono.set_status(&invoice.id, "success");
    let config = app.state.config.monobank.clone().unwrap();
    let cancel = monobank::Cancel {
        invoice_id: &invoice.id,
        ext_ref: Some("refund-1"),
        amount: None,
    };
    let answer = monobank::cancel_invoice(&config.api_url, config.token.expose(), &cancel)
        .await
        .unwrap();
    assert_eq!(answer.status, monobank::CancelStatus::Processing);
    assert!(answer.modified_date.is_some());
    assert_eq!(
        mono.cancels(),
        [json!({"invoiceId": invoice.id, "extRef": "refund-1"})]
    );
    // A second refund of the reversed invoice is refused by Monobank, and said so.
    let again = monobank::cancel_invoice(&config.api_url, config.token.expose(), &cancel).await;
    assert!(
        matches!(again, Err(monobank::ApiCallError::Refused(ref why)) if why.contains("400")),
        "{again:?}"
    );
    // A wrong token is refused too.
    let wrong =
        monobank::cancel_invoice(&config.api_url, "not-the-token-0123456789", &cancel).await;
    assert!(matches!(wrong, Err(monobank::ApiCallError::Refused(_))));
}

/// A refund staff start of a Monobank payment (`POST /api/payments/{id}/refund`): the worker
/// asks the invoice's status, cancels it once (`processing`), finds it `reversed` on its next
/// attempt and takes back what the payment bought; Monobank's own `reversed` webhook after that
/// changes nothing, and neither does a second request.
#[tokio::test]
async fn a_refund_staff_start_cancels_the_invoice_once_and_takes_access_back() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(&app, -100_910_012, json!({"title": "Refunded club"})).await;
    let user = 9112;
    send(&app, &button_update(&person(user), &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = mono.invoices()[0].clone();
    mono.set_status(&invoice.id, "success");
    let answer = deliver(&app, &mono, &mono.report_of(&invoice.id))
        .await
        .expect(200);
    assert_eq!(answer["result"], "applied");
    let payment = answer["payment_id"].as_i64().unwrap();
    assert_eq!(membership_of(&app, user, c).await.unwrap().0, "active");

    let path = format!("/api/payments/{payment}/refund");
    let asked = app
        .post(&path, json!({"reason": "bought by mistake"}))
        .await
        .expect(202);
    assert_eq!(asked["state"], "pending");
    // Monobank answers the cancel `processing`: asked about again later.
    run(&app).await;
    assert_eq!(mono.cancels().len(), 1);
    let body = app
        .get(&format!("/api/payments/{payment}"))
        .await
        .expect(200);
    assert_eq!(body["outcome"], "applied");
    assert_eq!(body["refund"]["state"], "pending");
    // The next attempt finds the invoice reversed: the refund is made, access taken back.
    crate::support::effects::make_due(&app).await;
    run(&app).await;
    assert_eq!(
        mono.cancels(),
        [json!({"invoiceId": invoice.id, "extRef": format!("subgate-refund-{payment}")})]
    );
    let body = app
        .get(&format!("/api/payments/{payment}"))
        .await
        .expect(200);
    assert_eq!(body["outcome"], "refunded");
    assert_eq!(body["refund"]["state"], "done");
    assert_eq!(membership_of(&app, user, c).await.unwrap().0, "expired");

    // Monobank's webhook of the reversal, and a second request: nothing more.
    let answer = deliver(&app, &mono, &mono.report_of(&invoice.id))
        .await
        .expect(200);
    assert_eq!(answer["status"], "reversed");
    assert_ne!(answer["result"], "refunded", "{answer}");
    let again = app
        .post(&path, json!({"reason": "again"}))
        .await
        .expect(202);
    assert_eq!(again["state"], "done");
    crate::support::effects::make_due(&app).await;
    run(&app).await;
    assert_eq!(mono.cancels().len(), 1);
    assert_eq!(
        payments_of(&app, &invoice.id).await,
        [(
            "refunded".to_string(),
            Some("refunded_by_staff".to_string())
        )]
    );
}

// ---- the bot's Monobank invoices ----

async fn bot_app(fake: &FakeBot, mono: &FakeMonobank, with_wayforpay: bool) -> TestApp {
    let (bot_url, mono_url) = (fake.url.clone(), mono.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), BOT_TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), BOT.into());
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
        env.insert("MONOBANK_TOKEN".into(), TOKEN.into());
        env.insert("MONOBANK_API_URL".into(), mono_url);
        env.insert("RECONCILE_AFTER_SECS".into(), "600".into());
        if !with_wayforpay {
            env.insert("WAYFORPAY_MERCHANT_ACCOUNT".into(), String::new());
            env.insert("WAYFORPAY_SECRET_KEY".into(), String::new());
        }
    })
    .await
}

async fn bot_order(app: &TestApp, user: i64) -> (i64, String) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT o.id, o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

#[tokio::test]
async fn the_bot_sells_a_uah_plan_through_a_monobank_invoice_end_to_end() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let chat = -100_910_011;
    let c = channel(&app, chat, json!({"title": "Mono club"})).await;
    let (user, buyer) = (9111, person(9111));
    // Telegram fails the first send: the effect runs again after the invoice was made.
    fake.script("sendMessage", Reply::ServerError);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    crate::support::effects::make_due(&app).await;
    run(&app).await;
    let (order_id, order_ref) = bot_order(&app, user).await;

    // The invoice, as Monobank's documentation asks for it.
    let invoices = mono.invoices();
    assert_eq!(invoices.len(), 1);
    let sent = &invoices[0].request;
    assert_eq!(sent["amount"], 19900);
    assert_eq!(sent["ccy"], 980);
    assert_eq!(sent["merchantPaymInfo"]["reference"], order_ref);
    assert_eq!(sent["merchantPaymInfo"]["destination"], "Mono club");
    assert_eq!(
        sent["webHookUrl"],
        format!("{PUBLIC_URL}/api/webhook/monobank")
    );
    assert_eq!(sent["redirectUrl"], format!("https://t.me/{BOT}"));
    assert_eq!(sent["paymentType"], "debit");
    let validity = sent["validity"].as_i64().unwrap();
    assert!(
        (60..=300).contains(&validity),
        "within the hold: {validity}"
    );

    // The retry reused the stored page: one invoice, and the buyer's message has one button,
    // its page.
    let messages = fake.calls_of("sendMessage");
    assert_eq!(messages.len(), 2, "the failed send and its retry");
    assert_eq!(
        buttons(&messages[1].params),
        [(
            "Pay 199.00 UAH by card".to_string(),
            invoices[0].page_url.clone()
        )]
    );
    assert_eq!(buttons(&messages[0].params), buttons(&messages[1].params));
    let row = app
        .db()
        .await
        .query_one(
            "SELECT order_id, handed_out, chase FROM monobank_invoices WHERE invoice_id = $1",
            &[&invoices[0].id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), Some(order_id));
    assert!(row.get::<_, bool>(1));
    assert_eq!(row.get::<_, String>(2), "chasing");

    // The buyer pays; Monobank's signed webhook comes: access.
    mono.set_status(&invoices[0].id, "success");
    let body = mono.report_of(&invoices[0].id);
    let answer = deliver(&app, &mono, &body).await.expect(200);
    assert_eq!(answer["result"], "applied");
    assert_eq!(membership_of(&app, user, c).await.unwrap().0, "active");
    fake.clear_calls();
    run(&app).await;
    let links = fake.links_of(chat);
    assert_eq!(links.len(), 1, "a join link was made: {:?}", fake.methods());
    assert!(
        messages_to(&fake, user)
            .iter()
            .any(|m| m.contains(&links[0])),
        "{:?}",
        messages_to(&fake, user)
    );
    // The chase is over.
    assert_eq!(
        app.db()
            .await
            .query_one(
                "SELECT chase FROM monobank_invoices WHERE invoice_id = $1",
                &[&invoices[0].id],
            )
            .await
            .unwrap()
            .get::<_, String>(0),
        "settled"
    );
}

#[tokio::test]
async fn with_wayforpay_too_the_buyer_picks_one_of_two_buttons_and_other_currencies_get_none() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, true).await;
    let c = channel(&app, -100_910_012, json!({"title": "Either way"})).await;
    send(&app, &button_update(&person(9112), &format!("b:{c}"))).await;
    run(&app).await;
    let messages = fake.calls_of("sendMessage");
    let b = buttons(&messages[0].params);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0].0, "Pay 199.00 UAH by card (WayForPay)");
    assert_eq!(b[1].0, "Pay 199.00 UAH by card (Monobank)");
    assert_eq!(b[1].1, mono.invoices()[0].page_url);

    // A dollar plan: WayForPay only, no Monobank invoice.
    fake.clear_calls();
    let usd = channel(
        &app,
        -100_910_013,
        json!({"title": "Dollars", "currency": "USD", "price_minor": 1999}),
    )
    .await;
    send(&app, &button_update(&person(9113), &format!("b:{usd}"))).await;
    run(&app).await;
    let b = buttons(&fake.calls_of("sendMessage")[0].params);
    assert_eq!(b.len(), 1, "{b:?}");
    assert!(b[0].1.starts_with("https://secure.wayforpay.com/pay?"));
    assert_eq!(mono.invoices().len(), 1);
}

#[tokio::test]
async fn without_monobank_the_bot_offers_no_monobank_button() {
    let fake = FakeBot::start().await;
    let app = crate::bot::conversation::app_with(&fake).await;
    let c = channel(&app, -100_910_014, json!({"title": "WayForPay only"})).await;
    send(&app, &button_update(&person(9114), &format!("b:{c}"))).await;
    run(&app).await;
    let b = buttons(&fake.calls_of("sendMessage")[0].params);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].0, "Pay 199.00 UAH by card");
    assert!(b[0].1.starts_with("https://secure.wayforpay.com/pay?"));
}

// ---- the reconcile ----

async fn due(app: &TestApp, invoice: &str) {
    app.db()
        .await
        .execute(
            "UPDATE monobank_invoices SET next_check_at = statement_timestamp()
             WHERE invoice_id = $1",
            &[&invoice],
        )
        .await
        .unwrap();
}

async fn chase(app: &TestApp, invoice: &str) -> (String, i32, Option<String>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT chase, attempts, last_error FROM monobank_invoices WHERE invoice_id = $1",
            &[&invoice],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn a_lost_webhook_is_found_by_asking_the_invoice_status() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(&app, -100_910_015, json!({"title": "Lost"})).await;
    let user = 9115;
    send(&app, &button_update(&person(user), &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = mono.invoices()[0].id.clone();

    // Not due before RECONCILE_AFTER_SECS.
    let report = reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.checked, 0);

    // Still on its way: asked again later, with back-off.
    due(&app, &invoice).await;
    mono.set_status(&invoice, "processing");
    let report = reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((report.checked, report.retried), (1, 1));
    assert_eq!(chase(&app, &invoice).await, ("chasing".into(), 1, None));

    // Paid, and the webhook never came: found.
    mono.set_status(&invoice, "success");
    due(&app, &invoice).await;
    let report = reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((report.checked, report.found), (1, 1), "{report:?}");
    assert_eq!(chase(&app, &invoice).await.0, "found");
    assert_eq!(membership_of(&app, user, c).await.unwrap().0, "active");
    assert_eq!(
        payments_of(&app, &invoice).await,
        [("applied".into(), None)]
    );
    // Nothing more to ask.
    due(&app, &invoice).await;
    let calls = mono.status_calls();
    assert_eq!(
        reconcile::run_once(&app.state.db, &app.state.config)
            .await
            .unwrap()
            .checked,
        0
    );
    assert_eq!(mono.status_calls(), calls);
    // The late webhook is a duplicate.
    let late = deliver(&app, &mono, &mono.report_of(&invoice))
        .await
        .expect(200);
    assert_eq!(late["result"], "duplicate");
    assert_eq!(payments_of(&app, &invoice).await.len(), 1);
}

#[tokio::test]
async fn an_expired_invoice_found_by_the_reconcile_releases_the_hold_and_a_failed_call_is_retried()
{
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(
        &app,
        -100_910_016,
        json!({"title": "Expiring", "seat_limit": 5}),
    )
    .await;
    let user = 9116;
    send(&app, &button_update(&person(user), &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = mono.invoices()[0].id.clone();
    let (order_id, _) = bot_order(&app, user).await;

    // Monobank unreachable: the call is recorded as failed and asked again later.
    let mut config = (*app.state.config).clone();
    config.monobank.as_mut().unwrap().api_url = "http://127.0.0.1:9".into();
    due(&app, &invoice).await;
    let report = reconcile::run_once(&app.state.db, &config).await.unwrap();
    assert_eq!((report.checked, report.retried), (1, 1));
    let (state, attempts, error) = chase(&app, &invoice).await;
    assert_eq!((state.as_str(), attempts), ("chasing", 1));
    assert!(error.unwrap().contains("unreachable"));

    // Monobank sends no webhook for `expired`: the reconcile finds it and frees the seat.
    mono.set_status(&invoice, "expired");
    due(&app, &invoice).await;
    let report = reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((report.checked, report.failed), (1, 1), "{report:?}");
    assert_eq!(chase(&app, &invoice).await.0, "settled");
    let held: Option<bool> = app
        .db()
        .await
        .query_one(
            "SELECT hold_until > statement_timestamp() FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(held, Some(true));
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn an_invoice_still_open_after_72_hours_is_given_up() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(&app, -100_910_017, json!({"title": "Forever"})).await;
    send(&app, &button_update(&person(9117), &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = mono.invoices()[0].id.clone();
    app.db()
        .await
        .execute(
            "UPDATE monobank_invoices SET created_at = created_at - interval '73 hours',
                 next_check_at = statement_timestamp() WHERE invoice_id = $1",
            &[&invoice],
        )
        .await
        .unwrap();
    let report = reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((report.checked, report.gave_up), (1, 1), "{report:?}");
    assert_eq!(chase(&app, &invoice).await.0, "gave_up");
}

#[tokio::test]
async fn the_mini_app_hands_out_the_same_monobank_page() {
    let (fake, mono) = (FakeBot::start().await, FakeMonobank::start().await);
    let app = bot_app(&fake, &mono, false).await;
    let c = channel(&app, -100_910_018, json!({"title": "Page"})).await;
    let user = 9118;
    send(&app, &button_update(&person(user), &format!("b:{c}"))).await;
    run(&app).await;
    let (order_id, _) = bot_order(&app, user).await;
    let pay = subgate::bot::mini_app::orders::pay(
        &app.state.db,
        &app.state.config,
        order_id,
        subgate::bot::Gateway::Card,
    )
    .await
    .unwrap();
    let value: Value = serde_json::to_value(&pay).unwrap();
    assert_eq!(value["card_urls"]["monobank"], mono.invoices()[0].page_url);
    assert_eq!(value["card_urls"]["wayforpay"], Value::Null);
    assert_eq!(mono.invoices().len(), 1);
}

/// The chat's invoice effect and Mini App presses asking for one order's page at once: however
/// many invoices they make at Monobank, they all give the buyer the same page, and one invoice
/// is given out (and chased).
#[tokio::test]
async fn makers_racing_for_one_order_give_out_one_page() {
    let (fake, mono) = (
        FakeBot::start().await,
        Arc::new(FakeMonobank::start().await),
    );
    let app = Arc::new(bot_app(&fake, &mono, false).await);
    for round in 0..4 {
        let s = app.create_subscriber(9400 + round).await;
        let c = app.create_channel(-100_940_000 - round, json!({})).await;
        let order_id = id(&app.create_order(id(&s), id(&c)).await);
        let pages = race(4, |_| {
            let app = app.clone();
            async move {
                let pay = subgate::bot::mini_app::orders::pay(
                    &app.state.db,
                    &app.state.config,
                    order_id,
                    subgate::bot::Gateway::Card,
                )
                .await
                .unwrap();
                serde_json::to_value(&pay).unwrap()["card_urls"]["monobank"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        })
        .await;
        assert!(
            pages.iter().all(|p| *p == pages[0]),
            "round {round}: {pages:?}"
        );
        let given: Vec<(String, String)> = app
            .db()
            .await
            .query(
                "SELECT page_url, chase FROM monobank_invoices WHERE order_id = $1 AND handed_out",
                &[&order_id],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            given,
            [(pages[0].clone(), "chasing".to_string())],
            "round {round}"
        );
        let chased: i64 = app
            .db()
            .await
            .query_one(
                "SELECT count(*) FROM monobank_invoices WHERE order_id = $1 AND chase = 'chasing'",
                &[&order_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            chased, 1,
            "round {round}: only the page given out is chased"
        );
    }
}
