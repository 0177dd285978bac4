//! Stars refunds through the outbox (succeeded, already refunded, refused, timed out, sent back
//! by staff, found in long transaction lists) and reconcile of missed or elsewhere-refunded
//! payments. Set-up helpers are in [`crate::support::effects`].

use serde_json::{Value, json};
use subgate::telegram::recovery;

use crate::support::{
    effects::*,
    fake_bot::{FakeBot, Reply},
};

// ---- Stars refunds ----

#[tokio::test]
async fn a_refund_succeeds() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6001, -1_001_000_000_201, "ch-ok-1", "ch-ok-2").await;
    run(&app).await;
    let calls = fake.calls_of("refundStarPayment");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].params,
        json!({"user_id": 6001, "telegram_payment_charge_id": "ch-ok-2"})
    );
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let refunds = effects_of(&app, "refund").await;
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0]["status"], "done");
    // The scan never enqueues a second refund for the payment.
    run(&app).await;
    assert_eq!(effects_of(&app, "refund").await.len(), 1);
    assert_eq!(fake.calls_of("refundStarPayment").len(), 1);
}

#[tokio::test]
async fn an_already_refunded_charge_counts_as_refunded() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6002, -1_001_000_000_202, "ch-ar-1", "ch-ar-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: CHARGE_ALREADY_REFUNDED".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

#[tokio::test]
async fn a_refused_refund_is_refund_failed_for_staff() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6003, -1_001_000_000_203, "ch-no-1", "ch-no-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: CHARGE_NOT_FOUND".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refund_failed");
    let failed = app
        .get("/api/effects?status=failed&kind=refund")
        .await
        .expect(200);
    assert_eq!(failed["items"][0]["payment_id"].as_i64(), Some(p));
}

#[tokio::test]
async fn a_refund_timeout_stays_pending_until_the_refund_is_seen_in_star_transactions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6004, -1_001_000_000_204, "ch-to-1", "ch-to-2").await;
    // Telegram refunds, but the answer is lost.
    fake.script("refundStarPayment", Reply::PerformThenHang);
    let report = worker(&app, 500).run(true, &|| false).await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert!(fake.was_refunded("ch-to-2"));
    assert_eq!(
        payment_outcome(&app, p).await,
        "refund_pending",
        "unknown until confirmed"
    );
    let e = &effects_of(&app, "refund").await[0];
    assert_eq!(e["payload"]["verify"], true);
    assert!(
        e["last_error"].as_str().unwrap().contains("no answer"),
        "{e}"
    );

    // The next attempt looks first and finds the outgoing refund: no second refund call.
    make_due(&app).await;
    worker(&app, 500).run(false, &|| false).await.unwrap();
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    assert_eq!(fake.calls_of("refundStarPayment").len(), 1);
    assert!(!fake.calls_of("getStarTransactions").is_empty());
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

#[tokio::test]
async fn reconcile_confirms_a_refund_only_when_it_went_to_the_payer() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6005, -1_001_000_000_205, "ch-rc-1", "ch-rc-2").await;
    fake.script("refundStarPayment", Reply::Hang);
    worker(&app, 300).run(true, &|| false).await.unwrap();
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    // An outgoing transaction with the charge id but to someone else is not our refund.
    fake.add_refund_transaction("ch-rc-2", 9999, 50);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.refunds_confirmed, 0);
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    fake.add_refund_transaction("ch-rc-2", 6005, 50);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.refunds_confirmed, 1);
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    // The queued retry then sees the outcome and does not refund again.
    make_due(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert!(fake.calls_of("refundStarPayment").is_empty());
    assert_eq!(effects_of(&app, "refund").await[0]["status"], "done");
}

// ---- reconcile missed payments ----

#[tokio::test]
async fn reconcile_applies_a_missed_payment_exactly_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let user = 6101;
    let s = subscriber(&app, user).await;
    let c = stars_channel(&app, -1_001_000_000_301).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();
    // Unrelated traffic around it: another bot payment and a withdrawal.
    fake.add_incoming_payment("ch-other", 777, "not-an-order", 10);
    fake.add_incoming_payment("ch-missed", user, &reference, 50);

    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.payments_recovered, 2, "{r:?}"); // ours, and the unknown one kept for review
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, order_id FROM payments WHERE gateway = 'telegram_stars' AND external_id = 'ch-missed'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "applied");
    assert_eq!(row.get::<_, Option<i64>>(1), order["id"].as_i64());
    assert_eq!(
        app.count("payments WHERE external_id = 'ch-other' AND outcome = 'needs_review'")
            .await,
        1
    );
    assert_eq!(app.count("memberships WHERE status = 'active'").await, 1);
    assert_eq!(
        effects_of(&app, "grant").await.len(),
        1,
        "the recovered payment grants access"
    );

    // Twice, and then the late update itself: still one payment, one extension.
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(r.payments_recovered, 0);
    let late = app
        .post_telegram_update(payment_update("ch-missed", user, &reference, 50))
        .await;
    late.expect(200);
    assert_eq!(
        app.count("payments WHERE external_id = 'ch-missed'").await,
        1
    );
    assert_eq!(app.count("membership_events").await, 1);
}

// ---- refunds sent back by staff, and found in long transaction lists ----

#[tokio::test]
async fn a_refused_refund_sent_back_by_staff_is_refunded() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6006, -1_001_000_000_206, "ch-rt-1", "ch-rt-2").await;
    fake.script(
        "refundStarPayment",
        Reply::Error(400, "Bad Request: BALANCE_TOO_LOW".into()),
    );
    run(&app).await;
    assert_eq!(payment_outcome(&app, p).await, "refund_failed");
    let id = effects_of(&app, "refund").await[0]["id"].as_i64().unwrap();
    assert_eq!(effect(&app, id).await["status"], "failed");

    // Staff top up the balance and send the refund back.
    let retried = app
        .post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(200);
    assert_eq!(retried["status"], "pending");
    assert_eq!(
        app.get(&format!("/api/payments/{p}")).await.expect(200)["outcome"],
        "refund_pending"
    );
    run(&app).await;
    assert_eq!(fake.calls_of("refundStarPayment").len(), 2);
    assert!(fake.was_refunded("ch-rt-2"));
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let e = effect(&app, id).await;
    assert_eq!(e["status"], "done");
    assert_eq!(
        e["payload"]["note"],
        Value::Null,
        "performed, not skipped: {e}"
    );
}

#[tokio::test]
async fn a_lost_refund_answer_is_found_among_more_than_5000_transactions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let p = refund_pending_payment(&app, 6007, -1_001_000_000_207, "ch-big-1", "ch-big-2").await;
    fake.add_filler_transactions(5_200);
    // Telegram refunds, but the answer is lost; the refund is the newest transaction.
    fake.script("refundStarPayment", Reply::PerformThenHang);
    let report = worker(&app, 500).run(true, &|| false).await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert_eq!(payment_outcome(&app, p).await, "refund_pending");

    make_due(&app).await;
    fake.clear_calls();
    worker(&app, 500).run(false, &|| false).await.unwrap();
    assert!(
        fake.calls_of("refundStarPayment").is_empty(),
        "refunded again: the first refund was not found"
    );
    assert_eq!(payment_outcome(&app, p).await, "refunded");
    let pages = fake.calls_of("getStarTransactions").len();
    assert!(pages <= 20, "{pages} pages read to find the newest refund");
    let e = &effects_of(&app, "refund").await[0];
    assert_eq!(e["status"], "done");
    assert!(
        e["payload"]["note"].as_str().unwrap().contains("confirmed"),
        "{e}"
    );
}

// ---- reconcile: charges refunded outside subgate ----

#[tokio::test]
async fn reconcile_keeps_a_charge_refunded_elsewhere_as_refunded_and_grants_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -1_001_000_000_302).await;
    let (user, other) = (6111, 6112);
    let s = subscriber(&app, user).await;
    let order = app.create_order(s, c).await;
    let reference = order["reference"].as_str().unwrap().to_string();
    // Paid, then refunded in another tool; both updates missed.
    fake.add_incoming_payment("ch-gone", user, &reference, 50);
    fake.add_refund_transaction("ch-gone", user, 50);
    // Another buyer's missed payment, with an outgoing transaction of its id to someone else:
    // not its refund, so it is applied.
    let s2 = subscriber(&app, other).await;
    let order2 = app.create_order(s2, c).await;
    fake.add_incoming_payment("ch-kept", other, order2["reference"].as_str().unwrap(), 50);
    fake.add_refund_transaction("ch-kept", 9999, 50);

    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(
        (r.refunded_elsewhere, r.payments_recovered),
        (1, 1),
        "{r:?}"
    );
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason, order_id, amount_minor FROM payments
             WHERE gateway = 'telegram_stars' AND external_id = 'ch-gone'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, Option<String>>(1),
            row.get::<_, Option<i64>>(2),
            row.get::<_, i64>(3)
        ),
        (
            "refunded".to_string(),
            Some("refunded_elsewhere".to_string()),
            order["id"].as_i64(),
            50
        )
    );
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s}"))
            .await,
        0,
        "a refunded charge granted access"
    );
    assert_eq!(
        app.get(&format!("/api/orders/{}", order["id"]))
            .await
            .expect(200)["status"],
        "pending"
    );
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s2}"))
            .await,
        1
    );

    // Nothing to refund, nothing to grant for it; a second reconcile and the late update
    // change nothing.
    run(&app).await;
    assert!(fake.calls_of("refundStarPayment").is_empty());
    assert_eq!(app.count("effects WHERE kind = 'refund'").await, 0);
    let r = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!((r.refunded_elsewhere, r.payments_recovered), (0, 0));
    app.post_telegram_update(payment_update("ch-gone", user, &reference, 50))
        .await
        .expect(200);
    assert_eq!(app.count("payments WHERE external_id = 'ch-gone'").await, 1);
    assert_eq!(
        app.count(&format!("memberships WHERE subscriber_id = {s}"))
            .await,
        0
    );
}
