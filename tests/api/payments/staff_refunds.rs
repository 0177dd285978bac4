//! Refunds staff start (API.md "The owner's console": `POST /api/payments/{id}/refund`): for
//! each door that can refund — Telegram Stars (`refundStarPayment`, against [`FakeBot`]),
//! Stripe (`POST /v1/refunds`, [`FakeStripe`]), WayForPay (`REFUND`, [`FakeWayForPay`]) — the
//! request is 202 and an outbox effect; the fake gateway makes exactly one refund however often
//! (and however concurrently) staff ask; the payment becomes `refunded` and the refund rule
//! takes back what it bought, removing the member when nothing is left; the gateway's own later
//! report of the refund changes nothing. A payment in review is refunded and takes nothing.
//! Payments that cannot be refunded are 409 naming why; a refusal by the gateway leaves the
//! payment alone, shows `failed` with the gateway's words, and is tried again from the effects
//! screen. The overview says which doors are live.

use axum::http::Method;
use serde_json::{Value, json};
use subgate::telegram::recovery;

use crate::{
    payments::stripe::{post_event, session_completed},
    support::{
        effects::{make_due, payment_update, run, settle, stars_channel, subscriber},
        fake_bot::{FakeBot, TOKEN},
        fake_stripe::{self, FakeStripe},
        fake_wayforpay::{FakeWayForPay, Script},
        helpers::{TestApp, TestResponse, id, reference, wayforpay_callback},
        race::race,
    },
};

/// An app with every refunding door pointed at its fake.
async fn app_with(bot: &FakeBot, stripe: &FakeStripe, wfp: &FakeWayForPay) -> TestApp {
    let (bot_url, stripe_url, wfp_url) = (bot.url.clone(), stripe.url.clone(), wfp.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("STRIPE_SECRET_KEY".into(), fake_stripe::SECRET_KEY.into());
        env.insert(
            "STRIPE_WEBHOOK_SECRET".into(),
            fake_stripe::WEBHOOK_SECRET.into(),
        );
        env.insert("STRIPE_API_URL".into(), stripe_url);
        env.insert("WAYFORPAY_API_URL".into(), wfp_url);
    })
    .await
}

struct Fakes {
    bot: FakeBot,
    stripe: FakeStripe,
    wfp: FakeWayForPay,
    app: TestApp,
}

async fn fakes() -> Fakes {
    let (bot, stripe, wfp) = (
        FakeBot::start().await,
        FakeStripe::start().await,
        FakeWayForPay::start().await,
    );
    let app = app_with(&bot, &stripe, &wfp).await;
    Fakes {
        bot,
        stripe,
        wfp,
        app,
    }
}

/// What a paid test order left behind.
struct Paid {
    payment: i64,
    membership: i64,
    chat: i64,
    user: i64,
    reference: String,
    external_id: String,
}

/// A buyer `user` and a UAH channel in `chat` at `price_minor`; the order of it.
async fn card_order(app: &TestApp, user: i64, chat: i64, price_minor: i64) -> Value {
    let s = subscriber(app, user).await;
    let c = app
        .create_channel(chat, json!({"price_minor": price_minor}))
        .await;
    app.create_order(s, id(&c)).await
}

/// The payment and membership rows of order `reference` after it was paid.
async fn paid(app: &TestApp, reference: &str, chat: i64, user: i64) -> Paid {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT p.id, p.external_id, m.id AS membership
             FROM payments p JOIN memberships m
               ON m.subscriber_id = p.subscriber_id AND m.channel_id = p.channel_id
             WHERE p.order_reference = $1",
            &[&reference],
        )
        .await
        .unwrap();
    settle(app).await; // the grant
    Paid {
        payment: row.get("id"),
        membership: row.get("membership"),
        chat,
        user,
        reference: reference.to_string(),
        external_id: row.get("external_id"),
    }
}

async fn stars_paid(f: &Fakes, user: i64, chat: i64, charge: &str) -> Paid {
    let s = subscriber(&f.app, user).await;
    let c = stars_channel(&f.app, chat).await;
    let order = f.app.create_order(s, c).await;
    f.app
        .post_telegram_update(payment_update(charge, user, &reference(&order), 50))
        .await
        .expect(200);
    f.bot.add_member(chat, user);
    paid(&f.app, &reference(&order), chat, user).await
}

async fn stripe_paid(f: &Fakes, user: i64, chat: i64, intent: &str) -> Paid {
    let order = card_order(&f.app, user, chat, 19900).await;
    let r = reference(&order);
    post_event(&f.app, &session_completed(&r, intent, 19900, "uah"))
        .await
        .expect(200);
    f.bot.add_member(chat, user);
    paid(&f.app, &r, chat, user).await
}

/// A WayForPay payment of `amount` (the callback's literal) for an order priced so.
async fn wayforpay_paid(f: &Fakes, user: i64, chat: i64, amount: &str) -> Paid {
    let price = (amount.parse::<f64>().unwrap() * 100.0).round() as i64;
    let order = card_order(&f.app, user, chat, price).await;
    let r = reference(&order);
    f.app
        .post_wayforpay(&wayforpay_callback(&r, amount, "UAH", "Approved"))
        .await
        .expect(200);
    f.wfp.script(&r, Script::status("Approved", amount));
    f.bot.add_member(chat, user);
    paid(&f.app, &r, chat, user).await
}

async fn ask(app: &TestApp, payment: i64, reason: &str) -> TestResponse {
    app.post(
        &format!("/api/payments/{payment}/refund"),
        json!({"reason": reason}),
    )
    .await
}

async fn payment(app: &TestApp, id: i64) -> Value {
    app.get(&format!("/api/payments/{id}")).await.expect(200)
}

/// (status, expires_at in the past?) of membership `m`.
async fn membership(app: &TestApp, m: i64) -> (String, bool) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, expires_at <= now() AS past FROM memberships WHERE id = $1",
            &[&m],
        )
        .await
        .unwrap();
    (row.get("status"), row.get("past"))
}

async fn expires_text(app: &TestApp, m: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT expires_at::text FROM memberships WHERE id = $1",
            &[&m],
        )
        .await
        .unwrap()
        .get(0)
}

async fn events(app: &TestApp, m: i64) -> i64 {
    app.count(&format!("membership_events WHERE membership_id = {m}"))
        .await
}

/// Checks a refunded payment and its taken-back membership, and that the member is removed
/// once the worker performs the revoke.
async fn assert_taken_back(f: &Fakes, p: &Paid) {
    let body = payment(&f.app, p.payment).await;
    assert_eq!(body["outcome"], "refunded", "{body}");
    assert_eq!(body["reason"], "refunded_by_staff");
    assert_eq!(body["refund"]["state"], "done", "{body}");
    assert!(body["refund"].get("error").is_none(), "{body}");
    assert_eq!(
        membership(&f.app, p.membership).await,
        ("expired".to_string(), true),
        "the term it bought is gone, and nothing was left"
    );
    let cause: String = f
        .app
        .db()
        .await
        .query_one(
            "SELECT cause FROM membership_events WHERE membership_id = $1 ORDER BY id DESC LIMIT 1",
            &[&p.membership],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(cause, "refund");
    run(&f.app).await;
    assert!(
        !f.bot.is_member(p.chat, p.user),
        "the revoke removed the member from the chat"
    );
    assert!(
        f.bot
            .calls_of("banChatMember")
            .iter()
            .any(|c| c.params["chat_id"] == p.chat && c.params["user_id"] == p.user),
        "banned (then unbanned, free to come back)"
    );
}

#[tokio::test]
async fn a_stars_payment_is_refunded_once_and_the_reconcile_changes_nothing_after() {
    let f = fakes().await;
    let p = stars_paid(&f, 7301, -1_007_301_000_001, "stx-staff-1").await;
    let r = ask(&f.app, p.payment, "Bought by mistake")
        .await
        .expect(202);
    assert_eq!(r["state"], "pending");
    assert_eq!(r["payment_id"], p.payment);
    assert_eq!(r["reason"], "Bought by mistake");
    assert_eq!(r["requested_by"], crate::support::helpers::ADMIN_EMAIL);
    let shown = payment(&f.app, p.payment).await;
    assert_eq!(
        shown["outcome"], "applied",
        "unchanged until Telegram confirms"
    );
    assert_eq!(shown["refund"], r);

    run(&f.app).await;
    let calls = f.bot.calls_of("refundStarPayment");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].params,
        json!({"user_id": 7301, "telegram_payment_charge_id": "stx-staff-1"})
    );
    assert_taken_back(&f, &p).await;

    // Telegram lists the refund; the reconcile reads it and changes nothing.
    let before = events(&f.app, p.membership).await;
    recovery::reconcile(&f.app.state.db, &f.app.state.config)
        .await
        .unwrap();
    let after = payment(&f.app, p.payment).await;
    assert_eq!(
        (after["outcome"].as_str(), after["reason"].as_str()),
        (Some("refunded"), Some("refunded_by_staff"))
    );
    assert_eq!(events(&f.app, p.membership).await, before);
    // Asking again answers the refund made.
    let again = ask(&f.app, p.payment, "again").await.expect(202);
    assert_eq!(again["state"], "done");
    assert_eq!(again["reason"], "Bought by mistake");
    assert_eq!(f.bot.calls_of("refundStarPayment").len(), 1);
}

#[tokio::test]
async fn a_stripe_payment_is_refunded_once_and_its_charge_refunded_event_changes_nothing() {
    let f = fakes().await;
    let p = stripe_paid(&f, 7302, -1_007_302_000_001, "pi_staff_1").await;
    ask(&f.app, p.payment, "Asked for a refund by email")
        .await
        .expect(202);
    run(&f.app).await;
    assert_eq!(f.stripe.refunds(), vec!["pi_staff_1".to_string()]);
    let sent = f.stripe.received().last().unwrap().clone();
    assert_eq!(
        sent.idempotency_key.as_deref(),
        Some("subgate-refund-pi_staff_1")
    );
    assert_eq!(sent.form["payment_intent"], "pi_staff_1");
    assert_eq!(sent.form["metadata[reason]"], "Asked for a refund by email");
    assert_taken_back(&f, &p).await;

    let before = events(&f.app, p.membership).await;
    let refunded = fake_stripe::event(
        "charge.refunded",
        fake_stripe::refunded_charge("pi_staff_1", 19900, "uah", &p.reference),
    );
    post_event(&f.app, &refunded).await.expect(200);
    let after = payment(&f.app, p.payment).await;
    assert_eq!(after["reason"], "refunded_by_staff", "{after}");
    assert_eq!(events(&f.app, p.membership).await, before);
    assert_eq!(f.app.count("effects WHERE status = 'pending'").await, 0);
}

#[tokio::test]
async fn a_lost_stripe_answer_is_asked_again_under_the_same_key_and_refunds_once() {
    let f = fakes().await;
    let p = stripe_paid(&f, 7303, -1_007_303_000_001, "pi_staff_lost").await;
    ask(&f.app, p.payment, "lost answer").await.expect(202);
    f.stripe.lose_answers(1);
    let report = run(&f.app).await;
    assert_eq!(report.retried, 1, "{report:?}");
    assert_eq!(payment(&f.app, p.payment).await["outcome"], "applied");
    assert_eq!(
        payment(&f.app, p.payment).await["refund"]["state"],
        "pending"
    );
    make_due(&f.app).await;
    run(&f.app).await;
    assert_eq!(
        f.stripe.refunds().len(),
        1,
        "the repeat got the refund made the first time"
    );
    let keys: Vec<_> = f
        .stripe
        .received()
        .iter()
        .filter(|r| r.form.contains_key("payment_intent"))
        .map(|r| r.idempotency_key.clone())
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
    assert_taken_back(&f, &p).await;
}

#[tokio::test]
async fn a_wayforpay_payment_is_refunded_once_and_its_refunded_callback_changes_nothing() {
    let f = fakes().await;
    let p = wayforpay_paid(&f, 7304, -1_007_304_000_001, "199.5").await;
    ask(&f.app, p.payment, "Wrong channel").await.expect(202);
    run(&f.app).await;
    assert_eq!(f.wfp.refunds(), vec![p.reference.clone()]);
    let sent = f.wfp.received();
    let kinds: Vec<_> = sent
        .iter()
        .map(|r| r.body["transactionType"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["CHECK_STATUS", "REFUND"],
        "asked first, then refunded"
    );
    assert!(sent.iter().all(|r| r.signature_ok), "every request signed");
    assert_eq!(sent[1].body["amount"], json!(199.5));
    assert_eq!(sent[1].body["comment"], "Wrong channel");
    assert_eq!(sent[1].body["orderReference"], p.external_id.as_str());
    assert_taken_back(&f, &p).await;

    let before = events(&f.app, p.membership).await;
    f.app
        .post_wayforpay(&wayforpay_callback(
            &p.reference,
            "199.5",
            "UAH",
            "Refunded",
        ))
        .await
        .expect(200);
    assert_eq!(
        payment(&f.app, p.payment).await["reason"],
        "refunded_by_staff"
    );
    assert_eq!(events(&f.app, p.membership).await, before);

    // Asking again answers the refund made, and refunds nothing.
    let again = ask(&f.app, p.payment, "again").await.expect(202);
    assert_eq!(again["state"], "done");
    assert_eq!(f.wfp.refunds().len(), 1);
}

#[tokio::test]
async fn a_wayforpay_order_refunded_meanwhile_is_not_refunded_again() {
    let f = fakes().await;
    let p = wayforpay_paid(&f, 7305, -1_007_305_000_001, "199").await;
    ask(&f.app, p.payment, "refunded in the portal")
        .await
        .expect(202);
    // Refunded by hand in WayForPay's portal before the worker ran: its status says so.
    f.wfp
        .script(&p.reference, Script::status("Refunded", "199"));
    run(&f.app).await;
    assert!(f.wfp.refunds().is_empty(), "no REFUND was sent");
    assert_taken_back(&f, &p).await;
}

#[tokio::test]
async fn a_payment_in_review_is_refunded_and_takes_nothing() {
    let f = fakes().await;
    // 150 for a 199 order: kept for review, nothing granted. The buyer holds a staff grant.
    let order = card_order(&f.app, 7306, -1_007_306_000_001, 19900).await;
    let s = order["subscriber_id"].as_i64().unwrap();
    let c = order["channel_id"].as_i64().unwrap();
    let m = crate::support::effects::grant(&f.app, s, c, 10).await;
    settle(&f.app).await;
    let r = reference(&order);
    f.app
        .post_wayforpay(&wayforpay_callback(&r, "150", "UAH", "Approved"))
        .await
        .expect(200);
    f.wfp.script(&r, Script::status("Approved", "150"));
    let p: i64 = f
        .app
        .db()
        .await
        .query_one(
            "SELECT id FROM payments WHERE order_reference = $1 AND outcome = 'needs_review'",
            &[&r],
        )
        .await
        .unwrap()
        .get(0);
    let held = expires_text(&f.app, m).await;
    let history = events(&f.app, m).await;
    ask(&f.app, p, "Paid the wrong amount").await.expect(202);
    run(&f.app).await;
    assert_eq!(f.wfp.refunds(), vec![r.clone()]);
    let refund = f.wfp.received().last().unwrap().body.clone();
    assert_eq!(
        refund["amount"],
        json!(150),
        "the money it brought goes back"
    );
    let body = payment(&f.app, p).await;
    assert_eq!(
        (body["outcome"].as_str(), body["reason"].as_str()),
        (Some("refunded"), Some("refunded_by_staff"))
    );
    assert_eq!(body["refund"]["state"], "done");
    assert_eq!(
        expires_text(&f.app, m).await,
        held,
        "it bought nothing: nothing taken"
    );
    assert_eq!(events(&f.app, m).await, history);
    assert_eq!(f.app.count("effects WHERE kind = 'revoke'").await, 0);
}

#[tokio::test]
async fn a_second_request_answers_the_same_refund_and_racing_requests_refund_once() {
    let f = fakes().await;
    let p = stripe_paid(&f, 7307, -1_007_307_000_001, "pi_staff_twice").await;
    let first = ask(&f.app, p.payment, "twice").await.expect(202);
    let second = ask(&f.app, p.payment, "a different reason")
        .await
        .expect(202);
    assert_eq!(first, second, "the refund asked for first");
    assert_eq!(
        f.app.count("effects WHERE kind = 'gateway_refund'").await,
        1
    );
    assert_eq!(
        f.app
            .count("audit_log WHERE action = 'payment.refund'")
            .await,
        1,
        "one write, one record"
    );
    run(&f.app).await;
    assert_eq!(f.stripe.refunds().len(), 1);

    for round in 0..4 {
        let intent = format!("pi_staff_race_{round}");
        let p = stripe_paid(&f, 7310 + round, -1_007_310_000_000 - round, &intent).await;
        let router = f.app.router.clone();
        let token = f.app.token().await;
        let answers = race(8, |i| {
            let (router, token) = (router.clone(), token.clone());
            let path = format!("/api/payments/{}/refund", p.payment);
            async move {
                use tower::ServiceExt;
                let req = axum::http::Request::builder()
                    .method(Method::POST)
                    .uri(path)
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(
                        json!({"reason": format!("racer {i}")}).to_string(),
                    ))
                    .unwrap();
                let response = router.oneshot(req).await.unwrap();
                let status = response.status().as_u16();
                let bytes = http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                (status, serde_json::from_slice::<Value>(&bytes).unwrap())
            }
        })
        .await;
        let effect = answers[0].1["effect_id"].clone();
        for (status, body) in &answers {
            assert_eq!(*status, 202, "{body}");
            assert_eq!(body["effect_id"], effect, "one refund for every racer");
        }
        assert_eq!(
            f.app
                .count(&format!("staff_refunds WHERE payment_id = {}", p.payment))
                .await,
            1
        );
        assert_eq!(
            f.app
                .count(&format!(
                    "effects WHERE kind = 'gateway_refund' AND payment_id = {}",
                    p.payment
                ))
                .await,
            1
        );
        run(&f.app).await;
        assert_eq!(
            f.stripe.refunds().iter().filter(|i| **i == intent).count(),
            1,
            "round {round}: one refund at Stripe"
        );
        assert_eq!(payment(&f.app, p.payment).await["outcome"], "refunded");
    }
}

#[tokio::test]
async fn a_refusal_leaves_the_payment_alone_shows_failed_and_is_tried_again_from_the_effects() {
    let f = fakes().await;
    let p = stripe_paid(&f, 7320, -1_007_320_000_001, "pi_staff_refused").await;
    f.stripe.refuse_refunds(
        "pi_staff_refused",
        "This PaymentIntent cannot be refunded now.",
    );
    ask(&f.app, p.payment, "refused").await.expect(202);
    let report = run(&f.app).await;
    assert_eq!(report.failed, 1, "{report:?}");
    let body = payment(&f.app, p.payment).await;
    assert_eq!(body["outcome"], "applied", "the payment is unchanged");
    assert_eq!(body["refund"]["state"], "failed");
    let error = body["refund"]["error"].as_str().unwrap();
    assert!(
        error.contains("This PaymentIntent cannot be refunded now."),
        "the gateway's words: {error}"
    );
    assert_eq!(
        membership(&f.app, p.membership).await,
        ("active".to_string(), false)
    );
    assert!(f.stripe.refunds().is_empty());
    let failed = f
        .app
        .get("/api/effects?status=failed&kind=gateway_refund")
        .await
        .expect(200);
    let effect = failed["items"][0]["id"].as_i64().unwrap();
    assert_eq!(body["refund"]["effect_id"], effect);

    // The cause is fixed; staff send the refund back from the effects screen.
    f.stripe.accept_refunds("pi_staff_refused");
    f.app
        .post(&format!("/api/effects/{effect}/retry"), Value::Null)
        .await
        .expect(200);
    assert_eq!(
        payment(&f.app, p.payment).await["refund"]["state"],
        "pending"
    );
    run(&f.app).await;
    assert_eq!(f.stripe.refunds(), vec!["pi_staff_refused".to_string()]);
    assert_taken_back(&f, &p).await;
}

#[tokio::test]
async fn payments_that_cannot_be_refunded_are_409_naming_why() {
    let f = fakes().await;
    // Door 1 (gateway `acme`) and Crypto Pay cannot refund from here.
    let order = card_order(&f.app, 7330, -1_007_330_000_001, 19900).await;
    f.app.pay_order(&order, "acme_pay_1").await.expect(200);
    let acme = paid(&f.app, &reference(&order), -1_007_330_000_001, 7330).await;
    let r = ask(&f.app, acme.payment, "no").await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(
        r.json()["detail"].as_str().unwrap().contains("acme"),
        "{}",
        r.json()
    );
    f.app
        .db()
        .await
        .execute(
            "UPDATE payments SET gateway = 'cryptopay' WHERE id = $1",
            &[&acme.payment],
        )
        .await
        .unwrap();
    let r = ask(&f.app, acme.payment, "no").await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("cryptopay"));

    // Refunded at the gateway already.
    let w = wayforpay_paid(&f, 7331, -1_007_331_000_001, "199").await;
    f.app
        .post_wayforpay(&wayforpay_callback(&w.reference, "199", "UAH", "Refunded"))
        .await
        .expect(200);
    let r = ask(&f.app, w.payment, "no").await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("refunded already")
    );

    // Disputed at the bank.
    let d = stripe_paid(&f, 7332, -1_007_332_000_001, "pi_staff_disputed").await;
    let dispute = fake_stripe::event(
        "charge.dispute.created",
        fake_stripe::dispute("pi_staff_disputed", "needs_response"),
    );
    post_event(&f.app, &dispute).await.expect(200);
    let r = ask(&f.app, d.payment, "no").await;
    assert_eq!(r.status.as_u16(), 409);
    assert!(r.json()["detail"].as_str().unwrap().contains("disputed"));

    assert_eq!(f.app.count("staff_refunds").await, 0, "nothing stored");
    assert_eq!(
        f.app.count("effects WHERE kind = 'gateway_refund'").await,
        0
    );
    assert_eq!(payment(&f.app, d.payment).await["refund"], Value::Null);
}

#[tokio::test]
async fn only_admins_refund_and_the_request_is_checked() {
    let f = fakes().await;
    let p = stripe_paid(&f, 7340, -1_007_340_000_001, "pi_staff_checks").await;
    let path = format!("/api/payments/{}/refund", p.payment);
    for role in ["viewer", "support"] {
        let token = f.app.token_of_role(role).await;
        let r = f
            .app
            .request(
                Method::POST,
                &path,
                &[
                    ("authorization", &format!("Bearer {token}")),
                    ("content-type", "application/json"),
                ],
                json!({"reason": "x"}).to_string(),
            )
            .await;
        assert_eq!(r.status.as_u16(), 403, "{role}");
    }
    assert_eq!(ask(&f.app, 999_999, "unknown").await.status.as_u16(), 404);
    for (body, status) in [
        (json!({}), 422),
        (json!({"reason": "   "}), 422),
        (json!({"reason": "x".repeat(501)}), 422),
        (json!({"reason": 5}), 400),
        (json!({"reason": "x", "amount": 1}), 400),
        (json!(["x"]), 400),
    ] {
        let r = f.app.post(&path, body.clone()).await;
        assert_eq!(r.status.as_u16(), status, "{body}");
    }
    let r = f
        .app
        .request(
            Method::POST,
            &path,
            &[
                ("authorization", &format!("Bearer {}", f.app.token().await)),
                ("content-type", "application/json"),
            ],
            "{not json",
        )
        .await;
    assert_eq!(r.status.as_u16(), 400);
    assert_eq!(f.app.count("staff_refunds").await, 0);

    // An admin (not only the owner) may; with an Idempotency-Key the answer is replayed.
    let admin = f.app.token_of_role("admin").await;
    let keyed = |key: &'static str| {
        let (path, admin) = (path.clone(), admin.clone());
        let app = &f.app;
        async move {
            app.request(
                Method::POST,
                &path,
                &[
                    ("authorization", &format!("Bearer {admin}")),
                    ("content-type", "application/json"),
                    ("idempotency-key", key),
                ],
                json!({"reason": "keyed"}).to_string(),
            )
            .await
        }
    };
    let first = keyed("refund-key-1").await;
    assert_eq!(first.status.as_u16(), 202);
    assert_eq!(first.json()["requested_by"], "admin.staff@example.com");
    let replay = keyed("refund-key-1").await;
    assert_eq!(replay.status.as_u16(), 202);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.bytes, first.bytes);
    let log = f
        .app
        .get("/api/audit-log?action=payment.refund")
        .await
        .expect(200);
    assert_eq!(log["items"].as_array().unwrap().len(), 1);
    assert_eq!(log["items"][0]["target_id"], p.payment);
    assert_eq!(log["items"][0]["after"]["reason"], "keyed");
    assert_eq!(log["items"][0]["before"]["outcome"], "applied");
}

#[tokio::test]
async fn the_overview_says_which_doors_are_live() {
    let plain = TestApp::spawn().await;
    let doors = plain.get("/api/overview").await.expect(200)["doors"].clone();
    assert_eq!(
        doors,
        json!({"payment": true, "wayforpay": true, "telegram": true, "stripe": false,
               "monobank": false, "cryptopay": false, "receipts": false})
    );
    let other = TestApp::spawn_with(|env| {
        env.insert("WEBHOOK_SECRET".into(), String::new());
        env.insert("WAYFORPAY_MERCHANT_ACCOUNT".into(), String::new());
        env.insert("WAYFORPAY_SECRET_KEY".into(), String::new());
        env.insert("STRIPE_SECRET_KEY".into(), fake_stripe::SECRET_KEY.into());
        env.insert(
            "STRIPE_WEBHOOK_SECRET".into(),
            fake_stripe::WEBHOOK_SECRET.into(),
        );
    })
    .await;
    let doors = other.get("/api/overview").await.expect(200)["doors"].clone();
    assert_eq!(
        doors,
        json!({"payment": false, "wayforpay": false, "telegram": true, "stripe": true,
               "monobank": false, "cryptopay": false, "receipts": false})
    );
}

#[tokio::test]
async fn a_wayforpay_decline_is_failed_with_its_words_and_changes_nothing() {
    let f = fakes().await;
    let p = wayforpay_paid(&f, 7350, -1_007_350_000_001, "199").await;
    f.wfp
        .refuse_refunds(&p.reference, "Refund not allowed for this card");
    ask(&f.app, p.payment, "declined").await.expect(202);
    run(&f.app).await;
    let body = payment(&f.app, p.payment).await;
    assert_eq!(body["outcome"], "applied");
    assert_eq!(body["refund"]["state"], "failed");
    let error = body["refund"]["error"].as_str().unwrap();
    assert!(
        error.contains("Refund not allowed for this card"),
        "{error}"
    );
    assert!(error.contains("Declined"), "{error}");
    assert!(f.wfp.refunds().is_empty());
    assert_eq!(
        membership(&f.app, p.membership).await,
        ("active".to_string(), false)
    );
    f.wfp.accept_refunds(&p.reference);
}

#[tokio::test]
async fn a_refund_shortens_a_membership_by_what_the_payment_bought_and_keeps_the_rest() {
    let f = fakes().await;
    // Ten days granted by staff, then thirty bought: the refund takes back the thirty only.
    let order = card_order(&f.app, 7360, -1_007_360_000_001, 19900).await;
    let s = order["subscriber_id"].as_i64().unwrap();
    let c = order["channel_id"].as_i64().unwrap();
    let m = crate::support::effects::grant(&f.app, s, c, 10).await;
    let held = expires_text(&f.app, m).await;
    let r = reference(&order);
    f.app
        .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", "Approved"))
        .await
        .expect(200);
    f.wfp.script(&r, Script::status("Approved", "199"));
    let p = paid(&f.app, &r, -1_007_360_000_001, 7360).await;
    assert_ne!(
        expires_text(&f.app, m).await,
        held,
        "the payment added its term"
    );
    f.bot.add_member(p.chat, p.user);
    ask(&f.app, p.payment, "keep the grant").await.expect(202);
    run(&f.app).await;
    assert_eq!(f.wfp.refunds(), vec![r]);
    assert_eq!(payment(&f.app, p.payment).await["outcome"], "refunded");
    assert_eq!(
        expires_text(&f.app, m).await,
        held,
        "back where it was before the payment"
    );
    assert_eq!(membership(&f.app, m).await, ("active".to_string(), false));
    assert_eq!(f.app.count("effects WHERE kind = 'revoke'").await, 0);
    assert!(
        f.bot.is_member(p.chat, p.user),
        "the staff grant's days still run"
    );
}

#[tokio::test]
async fn a_stars_refund_whose_answer_is_lost_is_found_before_calling_again() {
    let f = fakes().await;
    let p = stars_paid(&f, 7370, -1_007_370_000_001, "stx-staff-lost").await;
    ask(&f.app, p.payment, "lost answer").await.expect(202);
    // Telegram refunds, but the answer is lost.
    f.bot.script(
        "refundStarPayment",
        crate::support::fake_bot::Reply::PerformThenHang,
    );
    let report = crate::support::effects::worker(&f.app, 500)
        .run(true, &|| false)
        .await
        .unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert_eq!(
        payment(&f.app, p.payment).await["outcome"],
        "applied",
        "unknown until confirmed"
    );
    make_due(&f.app).await;
    crate::support::effects::worker(&f.app, 500)
        .run(false, &|| false)
        .await
        .unwrap();
    assert_eq!(
        f.bot.calls_of("refundStarPayment").len(),
        1,
        "found in getStarTransactions: no second call"
    );
    assert!(!f.bot.calls_of("getStarTransactions").is_empty());
    assert_taken_back(&f, &p).await;
}
