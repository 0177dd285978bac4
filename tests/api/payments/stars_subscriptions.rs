//! Telegram Stars subscriptions and money: a refused first charge stops its subscription, a
//! second subscription of a paid order is refunded and cancelled, a refused renewal cancels the
//! subscription in its transaction, and a renewal is aligned with Telegram's renewal date
//! (holding its seat until then). A renewal that arrives before its first charge is in
//! `stars_reconcile`. Updates go through `POST /api/webhook/telegram`, the outbox is performed
//! against the fake Bot API, and the rows are read back.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use subgate::app::worker;

use crate::{
    bot::conversation::{next_id, payment_update, pre_checkout_update, send},
    support::{
        fake_bot::{FakeBot, TOKEN},
        helpers::TestApp,
        rows::{PaymentRow, count, payment},
    },
};

/// A Stars `successful_payment` of a subscription: `first` (`is_first_recurring`), renewing at
/// `renews_at` (`subscription_expiration_date`).
pub(crate) fn charge_update(
    charge_id: &str,
    from: i64,
    payload: &str,
    first: bool,
    renews_at: DateTime<Utc>,
) -> Value {
    payment_update(charge_id, from, payload, 250, Some((first, renews_at)))
}

fn text_update(from: i64, text: &str) -> Value {
    json!({
        "update_id": next_id(),
        "message": {
            "message_id": next_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Ann"},
            "from": {"id": from, "is_bot": false, "first_name": "Ann", "language_code": "en"},
            "text": text
        }
    })
}

pub(crate) async fn app_with(fake: &FakeBot) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await
}

/// A recurring Stars channel (250 stars, 30 days, no grace); `extra` overrides fields.
pub(crate) async fn recurring_channel(app: &TestApp, chat_id: i64, extra: Value) -> i64 {
    let mut body = json!({"currency": "XTR", "price_minor": 250, "recurring": true});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    app.create_channel(chat_id, body).await["id"]
        .as_i64()
        .unwrap()
}

/// A new subscriber with Telegram id `user` and an order of `channel`: (subscriber id, order
/// id, reference).
pub(crate) async fn buyer_with_order(app: &TestApp, user: i64, channel: i64) -> (i64, i64, String) {
    let s = app.create_subscriber(user).await["id"].as_i64().unwrap();
    let o = app
        .post(
            "/api/orders",
            json!({"subscriber_id": s, "channel_id": channel}),
        )
        .await
        .expect(201);
    (
        s,
        o["id"].as_i64().unwrap(),
        o["reference"].as_str().unwrap().to_string(),
    )
}

pub(crate) async fn membership(
    app: &TestApp,
    subscriber: i64,
    channel: i64,
) -> (String, DateTime<Utc>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT status, expires_at FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(subscriber as i32), &(channel as i32)],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// The subscription row started by charge `charge_id`:
/// `(status, cancelled_by, refused_reason, applied, order_id)`.
pub(crate) async fn subscription(
    app: &TestApp,
    charge_id: &str,
) -> Option<(String, Option<String>, Option<String>, bool, i64)> {
    app.db()
        .await
        .query_opt(
            "SELECT status, cancelled_by, refused_reason, applied, order_id
             FROM star_subscriptions WHERE charge_id = $1",
            &[&charge_id],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// The transaction id (`xmin`) of the payment row of `charge_id`, of its subscription row, of
/// the pending `subscription_cancel` effect of that subscription and of the payment's notice:
/// rows written by one transaction share it.
async fn writers(app: &TestApp, payment_charge: &str, subscription_charge: &str) -> Vec<String> {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT (SELECT xmin::text FROM payments WHERE external_id = $1),
                    (SELECT xmin::text FROM star_subscriptions WHERE charge_id = $2),
                    (SELECT e.xmin::text FROM effects e JOIN star_subscriptions ss
                        ON e.payload->>'subscription_id' = ss.id::text
                     WHERE e.kind = 'subscription_cancel' AND ss.charge_id = $2),
                    (SELECT e.xmin::text FROM effects e JOIN payments p ON p.id = e.payment_id
                     WHERE e.kind = 'bot_message' AND p.external_id = $1)",
            &[&payment_charge, &subscription_charge],
        )
        .await
        .unwrap();
    (0..4)
        .map(|i| {
            r.get::<_, Option<String>>(i)
                .unwrap_or_else(|| format!("missing #{i}"))
        })
        .collect()
}

/// The `user_id` of the `subscription_cancel` effect of the subscription started by `charge`.
async fn cancel_effect_user(app: &TestApp, charge: &str) -> Option<i64> {
    app.db()
        .await
        .query_opt(
            "SELECT e.user_id FROM effects e JOIN star_subscriptions ss
                ON e.payload->>'subscription_id' = ss.id::text
             WHERE e.kind = 'subscription_cancel' AND ss.charge_id = $1",
            &[&charge],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

fn messages_to(fake: &FakeBot, user: i64) -> Vec<String> {
    fake.calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == user)
        .map(|c| c.params["text"].as_str().unwrap().to_string())
        .collect()
}

/// The kinds of the effects of (subscriber, channel)'s membership, oldest first.
async fn membership_effects(app: &TestApp, subscriber: i64, channel: i64) -> Vec<String> {
    app.db()
        .await
        .query(
            "SELECT e.kind FROM effects e JOIN memberships m ON m.id = e.membership_id
             WHERE m.subscriber_id = $1 AND m.channel_id = $2 ORDER BY e.id",
            &[&(subscriber as i32), &(channel as i32)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn run(app: &TestApp) {
    worker::run_once(&app.state).await.unwrap();
}

pub(crate) fn secs(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap()
}

// ---- a refused charge stops the subscription ----

#[tokio::test]
async fn a_refused_first_charge_records_a_cancelled_subscription_and_stops_telegram() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(
        &app,
        -100_300_001,
        json!({"seat_limit": 1, "title": "Full"}),
    )
    .await;
    // Someone else holds the only seat.
    let other = app.create_subscriber(8_100).await["id"].as_i64().unwrap();
    app.post(
        "/api/memberships",
        json!({"subscriber_id": other, "channel_id": c, "days": 30}),
    )
    .await
    .expect(201);
    // The buyer's invoice was never held (no pre-checkout reached us): no seat is free.
    let (s, order, reference) = buyer_with_order(&app, 8_101, c).await;
    let renews_at = Utc::now() + Duration::days(30);
    send(
        &app,
        &charge_update("ns-1", 8_101, &reference, true, renews_at),
    )
    .await;

    assert_eq!(
        payment(&app, "ns-1").await,
        PaymentRow {
            outcome: "refund_pending".into(),
            reason: Some("no_seat".into()),
            renewal: false
        }
    );
    // The subscription is recorded, cancelled by subgate, and is not the order's.
    assert_eq!(
        subscription(&app, "ns-1").await,
        Some((
            "cancelled".into(),
            Some("subgate".into()),
            Some("no_seat".into()),
            false,
            order
        ))
    );
    assert_eq!(cancel_effect_user(&app, "ns-1").await, Some(8_101));
    // Payment, subscription, cancel effect and the buyer's notice: one transaction.
    let xids = writers(&app, "ns-1", "ns-1").await;
    assert!(xids.iter().all(|x| *x == xids[0]), "{xids:?}");
    // Nothing was granted.
    let members: i64 = count(&app, "memberships WHERE subscriber_id = $1", &[&(s as i32)]).await;
    assert_eq!(members, 0);

    // The worker stops Telegram charging, refunds, and the buyer reads why, once.
    run(&app).await;
    assert!(fake.subscription_cancelled(8_101, "ns-1"));
    assert!(fake.was_refunded("ns-1"));
    let told = messages_to(&fake, 8_101);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("refunded")
            && told[0].contains("The channel or group is full")
            && told[0].contains("you will not be charged for it again"),
        "{told:?}"
    );
    // A repeat delivery changes nothing.
    send(
        &app,
        &charge_update("ns-1", 8_101, &reference, true, renews_at),
    )
    .await;
    let subs: i64 = count(&app, "star_subscriptions WHERE order_id = $1", &[&order]).await;
    assert_eq!(subs, 1);
}

#[tokio::test]
async fn a_second_subscription_of_a_paid_order_is_refunded_and_cancelled_the_first_kept() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_002, json!({})).await;
    let (_, order, reference) = buyer_with_order(&app, 8_102, c).await;
    let renews_at = Utc::now() + Duration::days(30);
    // The buyer opened the subscription link twice and paid both.
    send(
        &app,
        &charge_update("tw-1", 8_102, &reference, true, renews_at),
    )
    .await;
    send(
        &app,
        &charge_update("tw-2", 8_102, &reference, true, renews_at),
    )
    .await;
    assert_eq!(payment(&app, "tw-1").await.outcome, "applied");
    assert_eq!(
        payment(&app, "tw-2").await,
        PaymentRow {
            outcome: "refund_pending".into(),
            reason: Some("already_paid".into()),
            renewal: false
        }
    );
    assert_eq!(
        subscription(&app, "tw-1").await,
        Some(("active".into(), None, None, true, order))
    );
    assert_eq!(
        subscription(&app, "tw-2").await,
        Some((
            "cancelled".into(),
            Some("subgate".into()),
            Some("already_paid".into()),
            false,
            order
        ))
    );
    let xids = writers(&app, "tw-2", "tw-2").await;
    assert!(xids.iter().all(|x| *x == xids[0]), "{xids:?}");
    run(&app).await;
    assert!(fake.subscription_cancelled(8_102, "tw-2"));
    assert!(!fake.subscription_cancelled(8_102, "tw-1"));
    // The buyer's /subscriptions shows the subscription that renews, not the refused one.
    let reply = send(&app, &text_update(8_102, "/subscriptions")).await;
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("Renews automatically on"), "{text}");
}

#[tokio::test]
async fn a_refused_renewal_cancels_the_subscription_in_its_transaction() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_003, json!({"title": "Closed"})).await;
    let (s, order, reference) = buyer_with_order(&app, 8_103, c).await;
    let now = Utc::now();
    send(
        &app,
        &charge_update("ci-1", 8_103, &reference, true, now + Duration::days(30)),
    )
    .await;
    assert_eq!(payment(&app, "ci-1").await.outcome, "applied");
    let before = membership(&app, s, c).await;
    run(&app).await;
    fake.clear_calls();

    // The channel closes; Telegram charges the renewal anyway.
    app.patch(&format!("/api/channels/{c}"), json!({"active": false}))
        .await
        .expect(200);
    send(
        &app,
        &charge_update("ci-2", 8_103, &reference, false, now + Duration::days(60)),
    )
    .await;
    assert_eq!(
        payment(&app, "ci-2").await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("channel_inactive".into()),
            renewal: true
        }
    );
    assert_eq!(
        subscription(&app, "ci-1").await,
        Some((
            "cancelled".into(),
            Some("subgate".into()),
            Some("channel_inactive".into()),
            true,
            order
        ))
    );
    assert_eq!(cancel_effect_user(&app, "ci-1").await, Some(8_103));
    let xids = writers(&app, "ci-2", "ci-1").await;
    assert!(xids.iter().all(|x| *x == xids[0]), "{xids:?}");
    assert_eq!(membership(&app, s, c).await, before, "nothing granted");

    run(&app).await;
    assert!(fake.subscription_cancelled(8_103, "ci-1"));
    let told = messages_to(&fake, 8_103);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("We will review it")
            && told[0].contains("not accepting subscriptions")
            && told[0].contains("you will not be charged for it again"),
        "{told:?}"
    );
    // Another renewal charged before Telegram heard: reviewed, no second cancellation.
    send(
        &app,
        &charge_update("ci-3", 8_103, &reference, false, now + Duration::days(90)),
    )
    .await;
    assert_eq!(
        payment(&app, "ci-3").await.reason.as_deref(),
        Some("subscription_cancelled")
    );
    let cancels: i64 = app
        .count("effects WHERE kind = 'subscription_cancel'")
        .await;
    assert_eq!(cancels, 1);
}

// ---- renewals follow Telegram's renewal date ----

#[tokio::test]
async fn a_renewal_applied_after_the_old_expiry_on_a_full_channel_keeps_its_seat() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_004, json!({"seat_limit": 1})).await;
    let (s, _, reference) = buyer_with_order(&app, 8_104, c).await;
    let pre = send(&app, &pre_checkout_update("q-8104", 8_104, &reference, 250)).await;
    assert_eq!(pre["ok"], true, "{pre}");
    let renews_at = secs(Utc::now() + Duration::days(30));
    send(
        &app,
        &charge_update("al-1", 8_104, &reference, true, renews_at),
    )
    .await;
    // The membership outlasts Telegram's renewal date by a day.
    assert_eq!(
        membership(&app, s, c).await,
        ("active".into(), renews_at + Duration::days(1))
    );

    // Time passes (as an older membership would stand): the term ran out a minute ago, the
    // renewal was due ten seconds ago, and the sweep has not run (zero grace).
    app.db()
        .await
        .execute(
            "UPDATE memberships SET expires_at = statement_timestamp() - interval '1 minute'
             WHERE subscriber_id = $1",
            &[&(s as i32)],
        )
        .await
        .unwrap();
    app.db()
        .await
        .execute(
            "UPDATE star_subscriptions
             SET expires_at = statement_timestamp() - interval '10 seconds'
             WHERE charge_id = 'al-1'",
            &[],
        )
        .await
        .unwrap();
    // The live subscription still holds its seat: another buyer is refused it.
    let (_, _, other_ref) = buyer_with_order(&app, 8_105, c).await;
    let other = send(&app, &pre_checkout_update("q-8105", 8_105, &other_ref, 250)).await;
    assert_eq!(other["ok"], false, "{other}");

    // The renewal arrives late: applied, not no_seat; a receipt, no revoke or second grant.
    let next = secs(Utc::now() + Duration::days(30));
    send(&app, &charge_update("al-2", 8_104, &reference, false, next)).await;
    assert_eq!(
        payment(&app, "al-2").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: true
        }
    );
    assert_eq!(
        membership(&app, s, c).await,
        ("active".into(), next + Duration::days(1))
    );
    assert_eq!(
        membership_effects(&app, s, c).await,
        ["grant", "renewal_receipt"]
    );
}
