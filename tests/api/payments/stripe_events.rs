//! Door 4's delayed payment methods and disputes: `checkout.session.async_payment_succeeded`
//! and `…async_payment_failed`, `charge.dispute.created` and `charge.dispute.closed`, sent as
//! Stripe sends them ([`crate::support::fake_stripe`]), each also redelivered (the same event id).

use serde_json::{Value, json};

use crate::{
    bot::conversation::{button_update, buttons, channel, person, run, send},
    payments::stripe::{bot_app, membership_status, order, post_event, stripe_app},
    support::{
        fake_bot::FakeBot,
        fake_stripe::{FakeStripe, checkout_session, dispute, event},
        helpers::{TestApp, db_now, id, reference},
        race::race,
    },
};

/// A checkout session event of `kind` for `order`.
fn session(kind: &str, order: &Value, intent: &str, payment_status: &str) -> Value {
    event(
        &format!("checkout.session.{kind}"),
        checkout_session(&reference(order), intent, 19900, "uah", payment_status),
    )
}

/// The stored payment of `intent`: (outcome, reason).
async fn payment_state(app: &TestApp, intent: &str) -> (String, Option<String>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason FROM payments WHERE gateway = 'stripe' AND external_id = $1",
            &[&intent],
        )
        .await
        .unwrap();
    (r.get("outcome"), r.get("reason"))
}

/// Seconds of access the channel's membership holds from now (negative: ended).
async fn days_left(app: &TestApp, channel: i64) -> f64 {
    app.db()
        .await
        .query_one(
            "SELECT extract(epoch FROM expires_at - statement_timestamp())::float8 / 86400 AS d
             FROM memberships WHERE channel_id = $1",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get("d")
}

#[tokio::test]
async fn a_delayed_payment_applies_once_whichever_of_the_two_events_comes() {
    let app = stripe_app("http://127.0.0.1:9").await;

    // The usual order: the session completes unpaid (a bank debit settling), then succeeds.
    let (c1, o1) = order(&app, 8301, -100_830_001).await;
    let completed = session("completed", &o1, "pi_delayed_1", "unpaid");
    assert_eq!(
        post_event(&app, &completed).await.expect(200),
        json!({"ignored": true})
    );
    assert_eq!(app.count("payments").await, 0);
    let succeeded = session("async_payment_succeeded", &o1, "pi_delayed_1", "paid");
    let r = post_event(&app, &succeeded).await.expect(200);
    assert_eq!(r["duplicate"], false, "{r}");
    assert_eq!(r["payment"]["external_id"], "pi_delayed_1");
    assert_eq!(r["payment"]["outcome"], "applied");
    assert_eq!(r["membership"]["status"], "active");
    // Stripe redelivers it: nothing changes.
    let again = post_event(&app, &succeeded).await.expect(200);
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(
        again["membership"]["expires_at"],
        r["membership"]["expires_at"]
    );

    // Both events saying paid, the success first: the second is the same payment.
    let (c2, o2) = order(&app, 8302, -100_830_002).await;
    let first = post_event(
        &app,
        &session("async_payment_succeeded", &o2, "pi_delayed_2", "paid"),
    )
    .await
    .expect(200);
    assert_eq!(first["payment"]["outcome"], "applied", "{first}");
    let second = post_event(&app, &session("completed", &o2, "pi_delayed_2", "paid"))
        .await
        .expect(200);
    assert_eq!(second["duplicate"], true, "{second}");

    assert_eq!(app.count("payments").await, 2);
    for c in [c1, c2] {
        assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
        let days = days_left(&app, c).await;
        assert!((29.9..30.1).contains(&days), "one term of 30 days: {days}");
    }
    assert_eq!(
        app.count("membership_events WHERE cause = 'payment'").await,
        2
    );
}

#[tokio::test]
async fn a_failed_delayed_payment_releases_the_orders_hold() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let c = id(&app
        .create_channel(-100_830_003, json!({"seat_limit": 1}))
        .await);
    let (a, b) = (
        id(&app.create_subscriber(8303).await),
        id(&app.create_subscriber(8304).await),
    );
    let held = app.create_order(a, c).await;
    app.checkout(id(&held)).await.expect(200);
    let waiting = app.create_order(b, c).await;
    app.checkout(id(&waiting)).await.expect(409);

    let failed = session("async_payment_failed", &held, "pi_failed", "unpaid");
    assert_eq!(
        post_event(&app, &failed).await.expect(200),
        json!({"hold": "released"})
    );
    // The seat is free for the next buyer at once.
    app.checkout(id(&waiting)).await.expect(200);
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, hold_until FROM orders WHERE id = $1",
            &[&id(&held)],
        )
        .await
        .unwrap();
    let now = db_now(&app).await;
    assert_eq!(row.get::<_, String>("status"), "pending");
    let hold_until: chrono::DateTime<chrono::Utc> = row.get("hold_until");
    assert!(hold_until <= now, "the hold ended: {hold_until} > {now}");

    // Redelivered: nothing left to release, nothing changes.
    assert_eq!(
        post_event(&app, &failed).await.expect(200),
        json!({"hold": "not_held"})
    );
    let again: chrono::DateTime<chrono::Utc> = app
        .db()
        .await
        .query_one("SELECT hold_until FROM orders WHERE id = $1", &[&id(&held)])
        .await
        .unwrap()
        .get("hold_until");
    assert_eq!(again, hold_until);
    // An order we do not know: answered, nothing stored.
    let mut unknown = failed.clone();
    unknown["id"] = json!("evt_unknown_order");
    unknown["data"]["object"]["client_reference_id"] = json!("ord_nobody");
    unknown["data"]["object"]["metadata"]["order"] = json!("ord_nobody");
    assert_eq!(
        post_event(&app, &unknown).await.expect(200),
        json!({"hold": "unknown_order"})
    );
    assert_eq!(app.count("payments").await, 0);
}

/// The buyer's pending bot orders: (reference, superseded).
async fn bot_orders(app: &TestApp, user: i64) -> Vec<(String, bool)> {
    app.db()
        .await
        .query(
            "SELECT o.reference, o.superseded_at IS NOT NULL AS superseded
             FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 AND o.status = 'pending' ORDER BY o.id",
            &[&user],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("reference"), r.get("superseded")))
        .collect()
}

#[tokio::test]
async fn after_a_failed_delayed_payment_the_bot_sells_a_new_page() {
    let (fake, stripe) = (FakeBot::start().await, FakeStripe::start().await);
    let app = bot_app(&fake, &stripe, false).await;
    let c = channel(
        &app,
        -100_830_009,
        json!({"title": "Debit club", "currency": "EUR", "price_minor": 990}),
    )
    .await;
    let buyer = person(8309);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    let orders = bot_orders(&app, 8309).await;
    let [(first, false)] = orders.as_slice() else {
        panic!("one bot order: {orders:?}")
    };
    let first = first.clone();
    let failed = event(
        "checkout.session.async_payment_failed",
        checkout_session(&first, "pi_debit_failed", 990, "eur", "unpaid"),
    );
    assert_eq!(
        post_event(&app, &failed).await.expect(200),
        json!({"hold": "released"})
    );
    assert_eq!(
        post_event(&app, &failed).await.expect(200),
        json!({"hold": "not_held"}),
        "a redelivery changes nothing"
    );
    // The spent page is not offered again: buy makes a new order and a new session.
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    let orders = bot_orders(&app, 8309).await;
    assert_eq!(orders.len(), 2, "{orders:?}");
    assert_eq!(orders[0], (first.clone(), true));
    assert!(!orders[1].1 && orders[1].0 != first, "{orders:?}");
    assert_eq!(stripe.sessions_made(), 2);
    let messages = fake.calls_of("sendMessage");
    let last = buttons(&messages.last().unwrap().params);
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!(last[0].1, "https://checkout.stripe.com/c/pay/cs_test_2");
}

#[tokio::test]
async fn a_dispute_takes_back_access_once_and_a_won_one_goes_to_review() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (c, o) = order(&app, 8305, -100_830_005).await;
    // A dispute before its payment is recorded: answered, nothing changes.
    let early = event(
        "charge.dispute.created",
        dispute("pi_disputed", "needs_response"),
    );
    assert_eq!(
        post_event(&app, &early).await.expect(200),
        json!({"dispute": "unknown_payment"})
    );
    post_event(&app, &session("completed", &o, "pi_disputed", "paid"))
        .await
        .expect(200);
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));

    let created = event(
        "charge.dispute.created",
        dispute("pi_disputed", "needs_response"),
    );
    assert_eq!(
        post_event(&app, &created).await.expect(200),
        json!({"dispute": "disputed"})
    );
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("expired"));
    assert_eq!(
        payment_state(&app, "pi_disputed").await,
        ("disputed".into(), Some("disputed_at_gateway".into()))
    );
    let listed = app.get("/api/payments?outcome=disputed").await.expect(200);
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["items"][0]["external_id"], "pi_disputed");
    // The member is removed, like after a refund.
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        1
    );
    assert_eq!(app.count("effects WHERE kind = 'revoke'").await, 1);
    // Redelivered: nothing changes.
    assert_eq!(
        post_event(&app, &created).await.expect(200),
        json!({"dispute": "already_disputed"})
    );
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        1
    );
    // A refund reported now takes nothing more back.
    let refund = json!({
        "id": "evt_refund_after_dispute", "object": "event", "type": "charge.refunded",
        "created": chrono::Utc::now().timestamp(),
        "data": {"object": {"id": "ch_test_pi_disputed", "object": "charge",
            "payment_intent": "pi_disputed", "refunded": true}}
    });
    assert_eq!(
        post_event(&app, &refund).await.expect(200),
        json!({"refund": "not_applied"})
    );

    // Won: the money stays with us, the payment goes to staff, access is not given back by itself.
    let won = event("charge.dispute.closed", dispute("pi_disputed", "won"));
    assert_eq!(
        post_event(&app, &won).await.expect(200),
        json!({"dispute": "in_review"})
    );
    assert_eq!(
        payment_state(&app, "pi_disputed").await,
        ("needs_review".into(), Some("dispute_won".into()))
    );
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("expired"));
    let review = app
        .get("/api/payments?outcome=needs_review")
        .await
        .expect(200);
    assert_eq!(review["items"][0]["reason"], "dispute_won", "{review}");
    assert_eq!(
        post_event(&app, &won).await.expect(200),
        json!({"dispute": "already_in_review"})
    );
    // The dispute's creation redelivered after it was won takes nothing back again.
    assert_eq!(
        post_event(&app, &created).await.expect(200),
        json!({"dispute": "not_applied"})
    );
    assert_eq!(
        payment_state(&app, "pi_disputed").await,
        ("needs_review".into(), Some("dispute_won".into()))
    );
    // Staff grant again by hand.
    let s = review["items"][0]["subscriber_id"].as_i64().unwrap();
    app.post(
        "/api/memberships",
        json!({"subscriber_id": s, "channel_id": c, "days": 30}),
    )
    .await
    .expect(200);
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("active"));
}

#[tokio::test]
async fn a_lost_dispute_leaves_the_payment_disputed() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (c, o) = order(&app, 8306, -100_830_006).await;
    post_event(&app, &session("completed", &o, "pi_lost", "paid"))
        .await
        .expect(200);
    post_event(
        &app,
        &event(
            "charge.dispute.created",
            dispute("pi_lost", "needs_response"),
        ),
    )
    .await
    .expect(200);
    assert_eq!(
        post_event(
            &app,
            &event("charge.dispute.closed", dispute("pi_lost", "lost"))
        )
        .await
        .expect(200),
        json!({"ignored": true})
    );
    assert_eq!(
        payment_state(&app, "pi_lost").await,
        ("disputed".into(), Some("disputed_at_gateway".into()))
    );
    assert_eq!(membership_status(&app, c).await.as_deref(), Some("expired"));
    // A won dispute of a payment that was never disputed here changes nothing.
    let (_, o2) = order(&app, 8307, -100_830_007).await;
    post_event(&app, &session("completed", &o2, "pi_kept", "paid"))
        .await
        .expect(200);
    assert_eq!(
        post_event(
            &app,
            &event("charge.dispute.closed", dispute("pi_kept", "won"))
        )
        .await
        .expect(200),
        json!({"dispute": "not_disputed"})
    );
    assert_eq!(
        payment_state(&app, "pi_kept").await,
        ("applied".into(), None)
    );
}

#[tokio::test]
async fn disputes_are_reported_to_outbound_endpoints() {
    let app = stripe_app("http://127.0.0.1:9").await;
    app.post(
        "/api/webhook-endpoints",
        json!({"url": "https://1.1.1.1/hook",
               "event_types": ["payment.disputed", "payment.needs_review"]}),
    )
    .await
    .expect(201);
    let (_, o) = order(&app, 8308, -100_830_008).await;
    post_event(&app, &session("completed", &o, "pi_reported", "paid"))
        .await
        .expect(200);
    let created = event(
        "charge.dispute.created",
        dispute("pi_reported", "needs_response"),
    );
    let won = event("charge.dispute.closed", dispute("pi_reported", "won"));
    for e in [&created, &created, &won, &won] {
        post_event(&app, e).await.expect(200);
    }
    let rows = app
        .db()
        .await
        .query("SELECT type, body FROM webhook_events ORDER BY id", &[])
        .await
        .unwrap();
    let events: Vec<(String, Value)> = rows
        .iter()
        .map(|r| {
            (
                r.get("type"),
                serde_json::from_str(r.get::<_, &str>("body")).unwrap(),
            )
        })
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "payment.disputed");
    assert_eq!(events[0].1["data"]["outcome"], "disputed");
    assert_eq!(events[0].1["data"]["reason"], "disputed_at_gateway");
    assert_eq!(events[1].0, "payment.needs_review");
    assert_eq!(events[1].1["data"]["reason"], "dispute_won");
}

/// Stripe delivering one dispute's events several times at once: access is taken back once,
/// and the won dispute is put in review once.
#[tokio::test]
async fn concurrent_redeliveries_of_a_dispute_act_once() {
    let app = std::sync::Arc::new(stripe_app("http://127.0.0.1:9").await);
    for round in 0..5 {
        let intent = format!("pi_race_dispute_{round}");
        let (c, o) = order(&app, 8400 + round, -100_840_000 - round).await;
        post_event(&app, &session("completed", &o, &intent, "paid"))
            .await
            .expect(200);
        for (e, first) in [
            (
                event("charge.dispute.created", dispute(&intent, "needs_response")),
                "disputed",
            ),
            (
                event("charge.dispute.closed", dispute(&intent, "won")),
                "in_review",
            ),
        ] {
            let answers: Vec<String> = race(6, |_| {
                let (app, e) = (app.clone(), e.clone());
                async move { post_event(&app, &e).await.expect(200) }
            })
            .await
            .iter()
            .map(|a| a["dispute"].as_str().unwrap().to_string())
            .collect();
            assert_eq!(
                answers.iter().filter(|a| a.as_str() == first).count(),
                1,
                "round {round}: {answers:?}"
            );
        }
        assert_eq!(membership_status(&app, c).await.as_deref(), Some("expired"));
        assert_eq!(
            payment_state(&app, &intent).await,
            ("needs_review".into(), Some("dispute_won".into()))
        );
    }
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        5
    );
    assert_eq!(app.count("effects WHERE kind = 'revoke'").await, 5);
}

/// A referred buyer's Stripe payment earns its line; the dispute (delivered again, and a second
/// event of it) reverses that line once, in the dispute's transaction.
#[tokio::test]
async fn a_dispute_reverses_the_referred_payment_s_commission_once() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let (_, o) = order(&app, 8310, -100_831_000).await;
    app.db()
        .await
        .batch_execute(
            "UPDATE referral_program SET enabled = true, first_percent = 25;
             INSERT INTO affiliates (name, code) VALUES ('Partner', 'PARTNER');
             INSERT INTO referral_attributions (subscriber_id, affiliate_id)
             SELECT s.id, a.id FROM subscribers s, affiliates a WHERE s.telegram_user_id = 8310;",
        )
        .await
        .unwrap();
    post_event(&app, &session("completed", &o, "pi_referred", "paid"))
        .await
        .expect(200);
    let created = event(
        "charge.dispute.created",
        dispute("pi_referred", "needs_response"),
    );
    let again = event(
        "charge.dispute.created",
        dispute("pi_referred", "needs_response"),
    );
    for e in [&created, &created, &again] {
        post_event(&app, e).await.expect(200);
    }
    let lines: Vec<(String, i64, String)> = app
        .db()
        .await
        .query(
            "SELECT kind, amount_minor, status FROM commission_lines ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(lines, vec![("first".into(), 19900 / 4, "reversed".into())]);
}
