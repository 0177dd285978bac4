//! What door 3 refuses: mismatches refused at pre-checkout and kept for review when paid
//! anyway, an inactive channel and an order already paid.

use serde_json::json;

use crate::{
    payments::telegram_door::{
        PRICE, answer_of, decision, order, pay, payment, payment_update, pre_checkout,
        pre_checkout_update, stars_channel, subscriber,
    },
    support::{
        helpers::TestApp,
        rows::{membership_row, order_row},
    },
};

// ---- refusals at pre-checkout, and the payment that arrives anyway ----

/// Sends a pre-checkout with these values, expects a refusal with `message` stored as `reason`;
/// then a payment with the same values, expected stored as `needs_review` with the core's
/// `payment_reason`, granting nothing.
#[allow(clippy::too_many_arguments)]
async fn refused_then_reviewed(
    app: &TestApp,
    tag: &str,
    from: i64,
    payload: &str,
    currency: &str,
    amount: i64,
    reason: &str,
    message: &str,
    payment_reason: &str,
) {
    let query_id = format!("refuse-{tag}");
    let r = app
        .post_telegram_update(pre_checkout_update(
            &query_id, from, payload, currency, amount,
        ))
        .await;
    let body = answer_of(&r, &query_id);
    assert_eq!(body["ok"], false, "{tag}");
    assert_eq!(body["error_message"], message, "{tag}");
    assert_eq!(
        decision(app, &query_id).await,
        (false, Some(reason.into()), None)
    );

    let charge = format!("charge-{tag}");
    let r = app
        .post_telegram_update(payment_update(&charge, from, payload, currency, amount))
        .await;
    assert_eq!(r.expect(200), json!({}));
    assert_eq!(
        payment(app, &charge).await,
        ("needs_review".into(), Some(payment_reason.into())),
        "{tag}"
    );
}

#[tokio::test]
async fn mismatches_are_refused_at_pre_checkout_and_need_review_if_paid_anyway() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -9001, Some(5)).await;
    let s = subscriber(&app, 1501).await;
    subscriber(&app, 1502).await;
    let (order_id, reference) = order(&app, s, channel).await;

    refused_then_reviewed(
        &app,
        "payer",
        1502,
        &reference,
        "XTR",
        PRICE,
        "payer_mismatch",
        "This invoice was issued to another Telegram account.",
        "payer_mismatch",
    )
    .await;
    refused_then_reviewed(
        &app,
        "amount",
        1501,
        &reference,
        "XTR",
        PRICE - 1,
        "amount_mismatch",
        "The invoice amount does not match the order. Please start a new order.",
        "amount_mismatch",
    )
    .await;
    refused_then_reviewed(
        &app,
        "currency",
        1501,
        &reference,
        "USD",
        PRICE,
        "currency_mismatch",
        "This order cannot be paid with Telegram Stars.",
        "currency_mismatch",
    )
    .await;
    refused_then_reviewed(
        &app,
        "unknown",
        1501,
        "ord_does_not_exist",
        "XTR",
        PRICE,
        "unknown_order",
        "We could not find this order. Please start a new order.",
        "unknown_order",
    )
    .await;
    // None of these held a seat or granted anything.
    assert_eq!(order_row(&app, order_id).await.hold_until, None);
    assert!(membership_row(&app, s, channel).await.is_none());
    assert_eq!(order_row(&app, order_id).await.status, "pending");

    // An order priced in another currency cannot be paid in Stars either.
    let uah = app.create_channel(-9002, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let (_, uah_ref) = order(&app, s, uah).await;
    let r = pre_checkout(&app, "refuse-uah", 1501, &uah_ref).await;
    assert_eq!(
        r["error_message"],
        "This order cannot be paid with Telegram Stars."
    );

    // A cancelled order.
    let (cancelled, cancelled_ref) = order(&app, s, channel).await;
    app.post(&format!("/api/orders/{cancelled}/cancel"), json!({}))
        .await
        .expect(200);
    refused_then_reviewed(
        &app,
        "cancelled",
        1501,
        &cancelled_ref,
        "XTR",
        PRICE,
        "order_cancelled",
        "This order was cancelled. Please start a new order.",
        "order_cancelled",
    )
    .await;
    assert!(membership_row(&app, s, channel).await.is_none());
    let events = app.count("membership_events").await;
    assert_eq!(events, 0);
}

#[tokio::test]
async fn an_inactive_channel_and_a_paid_order_are_refused() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -9101, None).await;
    let s = subscriber(&app, 1601).await;
    let (_, paid_ref) = order(&app, s, channel).await;
    assert_eq!(
        pre_checkout(&app, "paid-1", 1601, &paid_ref).await["ok"],
        true
    );
    pay(&app, "charge-paid-1", 1601, &paid_ref).await;
    let again = pre_checkout(&app, "paid-2", 1601, &paid_ref).await;
    assert_eq!(again["error_message"], "This order has already been paid.");
    assert_eq!(
        decision(&app, "paid-2").await.1.as_deref(),
        Some("already_paid")
    );
    // A second Stars payment of a paid order is refunded by us.
    pay(&app, "charge-paid-2", 1601, &paid_ref).await;
    assert_eq!(
        payment(&app, "charge-paid-2").await,
        ("refund_pending".into(), Some("already_paid".into()))
    );

    let (_, ref2) = order(&app, s, channel).await;
    app.patch(
        &format!("/api/channels/{channel}"),
        json!({"active": false}),
    )
    .await
    .expect(200);
    let r = pre_checkout(&app, "inactive", 1601, &ref2).await;
    assert_eq!(r["ok"], false);
    assert_eq!(
        decision(&app, "inactive").await.1.as_deref(),
        Some("channel_inactive")
    );
}
