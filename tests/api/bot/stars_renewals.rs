//! A Stars subscription in the bot: it renews twice and is cancelled, renewals of subscriptions
//! nobody knows go to review and staff can cancel them, charges found only by the reconcile
//! start and renew subscriptions, and a refused payment is explained to the buyer once.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use subgate::telegram::recovery;

use crate::{
    bot::conversation::{
        app_with, assert_answer, button_update, buttons, membership_of, messages_to, one_i64,
        orders_of, payment_update, pending, person, pre_checkout_update, run, send, stars_channel,
        text_update,
    },
    support::{
        fake_bot::FakeBot,
        rows::{PaymentRow, payment},
    },
};

// ---- recurring Stars ----

#[tokio::test]
async fn a_stars_subscription_renews_twice_then_is_cancelled() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_200_005,
        json!({"title": "Daily", "recurring": true, "billing_period_days": 30}),
    )
    .await;
    let buyer = person(7005);

    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("250 ⭐ every 30 days, renews automatically"),
        "{reply}"
    );
    assert_eq!(buttons(&reply)[0].0, "Subscribe: Daily · 250 ⭐");
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (order_id, reference, _) = orders_of(&app, 7005, c).await[0].clone();

    // The invoice is a subscription link, sent as a URL button and kept on the order.
    run(&app).await;
    let links = fake.calls_of("createInvoiceLink");
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].params["subscription_period"], 2_592_000);
    assert_eq!(links[0].params["payload"], reference.as_str());
    assert_eq!(links[0].params["currency"], "XTR");
    let sent = &fake.calls_of("sendMessage")[0].params;
    let (_, url) = buttons(sent)[0].clone();
    assert!(url.starts_with("https://t.me/$fake_subscription_"), "{url}");
    let stored: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT invoice_link FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored.as_deref(), Some(url.as_str()));

    // The first charge.
    assert_eq!(
        send(&app, &pre_checkout_update("q-7005", 7005, &reference, 250)).await["ok"],
        true
    );
    let now = Utc::now();
    send(
        &app,
        &payment_update(
            "sub-1",
            7005,
            &reference,
            250,
            Some((true, now + Duration::days(30))),
        ),
    )
    .await;
    assert_eq!(
        payment(&app, "sub-1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    let (_, first_expiry) = membership_of(&app, 7005, c).await.unwrap();
    let sub = app
        .get(&format!(
            "/api/star-subscriptions?subscriber_id={}",
            one_i64(
                &app,
                "SELECT id::bigint FROM subscribers WHERE telegram_user_id = 7005",
                &[]
            )
            .await
        ))
        .await
        .expect(200)["items"][0]
        .clone();
    assert_eq!(sub["charge_id"], "sub-1");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["order_id"], order_id);

    // Two renewals: same payload, new charge ids, each one more period.
    let mut expiry = first_expiry;
    for (n, charge) in ["sub-2", "sub-3"].iter().enumerate() {
        let renews_at = now + Duration::days(30 * (n as i64 + 2));
        let r = send(
            &app,
            &payment_update(charge, 7005, &reference, 250, Some((false, renews_at))),
        )
        .await;
        assert_eq!(r, json!({}));
        assert_eq!(
            payment(&app, charge).await,
            PaymentRow {
                outcome: "applied".into(),
                reason: None,
                renewal: true
            },
            "{charge}"
        );
        let (status, after) = membership_of(&app, 7005, c).await.unwrap();
        assert_eq!(status, "active");
        assert_eq!(
            after,
            expiry + Duration::days(30),
            "{charge} extends by one period"
        );
        expiry = after;
        let kept: DateTime<Utc> = app
            .db()
            .await
            .query_one(
                "SELECT subscription_expires_at FROM payments WHERE external_id = $1",
                &[charge],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(kept.timestamp(), renews_at.timestamp());
    }
    let sub_row = app
        .get(&format!("/api/star-subscriptions/{}", sub["id"]))
        .await
        .expect(200);
    assert_eq!(
        DateTime::parse_from_rfc3339(sub_row["expires_at"].as_str().unwrap())
            .unwrap()
            .timestamp(),
        (now + Duration::days(90)).timestamp()
    );
    // A redelivered renewal is one payment.
    send(
        &app,
        &payment_update("sub-3", 7005, &reference, 250, Some((false, now))),
    )
    .await;
    assert_eq!(membership_of(&app, 7005, c).await.unwrap().1, expiry);

    // /subscriptions: renews automatically, with a cancel-renewal button and no renew button.
    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("Renews automatically on"), "{text}");
    assert_eq!(
        buttons(&reply),
        [(
            "Cancel renewal: Daily".to_string(),
            format!("x:{}", sub["id"])
        )]
    );
    // Buying again while subscribed is refused kindly.
    let again = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert!(
        again["text"]
            .as_str()
            .unwrap()
            .starts_with("You are subscribed to «Daily»"),
        "{again}"
    );

    // The buyer cancels: Telegram is told through the outbox, access stays until expiry.
    fake.clear_calls();
    let reply = send(&app, &button_update(&buyer, &format!("x:{}", sub["id"]))).await;
    assert_answer(
        &reply,
        "Renewal cancelled. Your access stays until it expires.",
    );
    let again = send(&app, &button_update(&buyer, &format!("x:{}", sub["id"]))).await;
    assert_answer(&again, "This subscription's renewal is already cancelled.");
    run(&app).await;
    let edits = fake.calls_of("editUserStarSubscription");
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0].params,
        json!({"user_id": 7005, "telegram_payment_charge_id": "sub-1", "is_canceled": true})
    );
    assert!(fake.subscription_cancelled(7005, "sub-1"));
    // The confirmation may be paced behind the renewals' receipts to this buyer: send
    // everything out.
    crate::support::effects::run_until_done(&app).await;
    assert!(
        messages_to(&fake, 7005)
            .iter()
            .any(|m| m.contains("will not renew")),
        "{:?}",
        messages_to(&fake, 7005)
    );
    assert_eq!(
        membership_of(&app, 7005, c).await.unwrap(),
        ("active".into(), expiry)
    );
    let sub_row = app
        .get(&format!("/api/star-subscriptions/{}", sub["id"]))
        .await
        .expect(200);
    assert_eq!(
        (sub_row["status"].as_str(), sub_row["cancelled_by"].as_str()),
        (Some("cancelled"), Some("buyer"))
    );

    // Every message so far is out (a message paced behind another to this buyer may still
    // wait a moment).
    crate::support::effects::run_until_done(&app).await;
    // A renewal charge after the cancellation is reviewed, never applied or refunded.
    send(
        &app,
        &payment_update("sub-4", 7005, &reference, 250, Some((false, now))),
    )
    .await;
    assert_eq!(
        payment(&app, "sub-4").await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("subscription_cancelled".into()),
            renewal: true
        }
    );
    assert_eq!(membership_of(&app, 7005, c).await.unwrap().1, expiry);
    // … and the buyer is told, once.
    fake.clear_calls();
    run(&app).await;
    let told = messages_to(&fake, 7005);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("We will review it"), "{told:?}");
}

#[tokio::test]
async fn renewals_of_unknown_subscriptions_are_reviewed_and_staff_can_cancel() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // A one-off Stars order, paid: a "renewal" of it names no subscription.
    let c = stars_channel(&app, -100_200_006, json!({})).await;
    let buyer = person(7006);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (_, reference, _) = orders_of(&app, 7006, c).await[0].clone();
    send(&app, &payment_update("one-1", 7006, &reference, 250, None)).await;
    let before = membership_of(&app, 7006, c).await.unwrap();
    let in_a_month = Utc::now() + Duration::days(30);
    send(
        &app,
        &payment_update("one-2", 7006, &reference, 250, Some((false, in_a_month))),
    )
    .await;
    assert_eq!(
        payment(&app, "one-2").await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("unknown_subscription".into()),
            renewal: true
        }
    );
    // An unknown payload is reviewed too.
    send(
        &app,
        &payment_update("one-3", 7006, "ord_nope", 250, Some((false, in_a_month))),
    )
    .await;
    assert_eq!(payment(&app, "one-3").await.outcome, "needs_review");
    assert_eq!(membership_of(&app, 7006, c).await.unwrap(), before);

    // Staff cancel a subscription: 200, then 409; the effect is enqueued once.
    let r = stars_channel(&app, -100_200_007, json!({"recurring": true})).await;
    send(&app, &button_update(&buyer, &format!("b:{r}"))).await;
    let (_, reference, _) = orders_of(&app, 7006, r).await[0].clone();
    send(
        &app,
        &payment_update("rec-1", 7006, &reference, 250, Some((true, in_a_month))),
    )
    .await;
    let sub = app
        .get(&format!("/api/star-subscriptions?channel_id={r}"))
        .await
        .expect(200)["items"][0]
        .clone();
    let cancelled = app
        .post(
            &format!("/api/star-subscriptions/{}/cancel", sub["id"]),
            Value::Null,
        )
        .await
        .expect(200);
    assert_eq!(
        (
            cancelled["status"].as_str(),
            cancelled["cancelled_by"].as_str()
        ),
        (Some("cancelled"), Some("staff"))
    );
    app.post(
        &format!("/api/star-subscriptions/{}/cancel", sub["id"]),
        Value::Null,
    )
    .await
    .expect(409);
    app.post("/api/star-subscriptions/999999/cancel", Value::Null)
        .await
        .expect(404);
    app.get("/api/star-subscriptions?status=nope")
        .await
        .expect(422);
    assert_eq!(pending(&app, "subscription_cancel").await, 1);
    // The buyer's messages (grants, notices) share one chat's pace of one per second: a run
    // may leave some of them rate-limited for a moment. Runs until the cancellation is made.
    for _ in 0..5 {
        run(&app).await;
        if fake.subscription_cancelled(7006, "rec-1") {
            break;
        }
        crate::support::effects::make_due(&app).await;
    }
    assert!(fake.subscription_cancelled(7006, "rec-1"));
    // The member keeps access until expiry.
    assert_eq!(membership_of(&app, 7006, r).await.unwrap().0, "active");
}

#[tokio::test]
async fn charges_found_only_by_the_reconcile_start_and_renew_subscriptions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_200_019, json!({"recurring": true})).await;

    // Buyer A's first charge came by webhook (a month ago: its subscription renews now); the
    // renewal's update never arrived.
    send(&app, &button_update(&person(7019), &format!("b:{c}"))).await;
    let (_, ref_a, _) = orders_of(&app, 7019, c).await[0].clone();
    send(
        &app,
        &payment_update("rc-a1", 7019, &ref_a, 250, Some((true, Utc::now()))),
    )
    .await;
    let (_, before) = membership_of(&app, 7019, c).await.unwrap();
    fake.add_incoming_payment("rc-a2", 7019, &ref_a, 250);

    // Buyer B's first charge is known only from the transaction list.
    send(&app, &button_update(&person(7020), &format!("b:{c}"))).await;
    let (_, ref_b, _) = orders_of(&app, 7020, c).await[0].clone();
    fake.add_incoming_payment("rc-b1", 7020, &ref_b, 250);

    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 2, "{report:?}");
    // A renewal, never a refund of an "already paid" order.
    assert_eq!(
        payment(&app, "rc-a2").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: true
        }
    );
    assert_eq!(
        membership_of(&app, 7019, c).await.unwrap().1,
        before + Duration::days(30)
    );
    // B's payment started a subscription, so B's renewals will be recognized too.
    assert_eq!(
        payment(&app, "rc-b1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    let subs = app
        .get(&format!("/api/star-subscriptions?channel_id={c}"))
        .await
        .expect(200);
    let charges: Vec<&str> = subs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["charge_id"].as_str().unwrap())
        .collect();
    assert_eq!(charges, ["rc-a1", "rc-b1"]);
}

// ---- what the buyer is told ----

#[tokio::test]
async fn a_refused_payment_is_explained_to_the_buyer_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_200_010, json!({"title": "Twice"})).await;
    let buyer = person(7010);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (_, reference, _) = orders_of(&app, 7010, c).await[0].clone();
    send(&app, &payment_update("tw-1", 7010, &reference, 250, None)).await;
    let second = payment_update("tw-2", 7010, &reference, 250, None);
    send(&app, &second).await;
    send(&app, &second).await;
    assert_eq!(payment(&app, "tw-2").await.outcome, "refund_pending");
    run(&app).await;
    let told: Vec<String> = messages_to(&fake, 7010)
        .into_iter()
        .filter(|m| m.contains("refunded"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("«Twice»") && told[0].contains("250 ⭐"),
        "{told:?}"
    );
    assert!(fake.was_refunded("tw-2"));
}
