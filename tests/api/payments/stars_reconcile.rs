//! A Stars renewal that arrives before its first charge is judged again when the first charge
//! starts the subscription — by door 3 and by the Stars reconcile alike, and when the first
//! charge races its repeats and the reconcile.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use subgate::telegram::recovery;

use crate::{
    bot::conversation::send,
    payments::stars_subscriptions::{
        app_with, buyer_with_order, charge_update, membership, recurring_channel, secs,
        subscription,
    },
    support::{
        fake_bot::FakeBot,
        race::race,
        rows::{PaymentRow, count, payment},
    },
};

// ---- a renewal before its first charge ----

#[tokio::test]
async fn a_renewal_before_its_first_charge_is_applied_once_when_the_subscription_starts() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_006, json!({})).await;
    let (s, _, reference) = buyer_with_order(&app, 8_106, c).await;
    let now = Utc::now();
    let (first_at, renewal_at) = (
        secs(now + Duration::days(30)),
        secs(now + Duration::days(60)),
    );
    // The renewal's update comes first (the first charge's update was delayed).
    let renewal = charge_update("bf-2", 8_106, &reference, false, renewal_at);
    send(&app, &renewal).await;
    assert_eq!(
        payment(&app, "bf-2").await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("unknown_subscription".into()),
            renewal: true
        }
    );
    // Then the first charge: it starts the subscription, and the renewal is applied too.
    let first = charge_update("bf-1", 8_106, &reference, true, first_at);
    send(&app, &first).await;
    assert_eq!(
        payment(&app, "bf-1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(
        payment(&app, "bf-2").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: true
        }
    );
    let expiry = renewal_at + Duration::days(1);
    assert_eq!(membership(&app, s, c).await, ("active".into(), expiry));
    let sub_expiry: DateTime<Utc> = app
        .db()
        .await
        .query_one(
            "SELECT expires_at FROM star_subscriptions WHERE charge_id = 'bf-1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(sub_expiry, renewal_at);

    // Repeats of either update, and the reconcile listing both charges, change nothing.
    send(&app, &renewal).await;
    send(&app, &first).await;
    fake.add_incoming_payment("bf-1", 8_106, &reference, 250);
    fake.add_incoming_payment("bf-2", 8_106, &reference, 250);
    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 0, "{report:?}");
    assert_eq!(membership(&app, s, c).await, ("active".into(), expiry));
    // One extension per payment: the first charge and the renewal, each once.
    let events: Vec<(String, i64)> = app
        .db()
        .await
        .query(
            "SELECT p.external_id, count(*) FROM membership_events ev
             JOIN payments p ON p.id = ev.payment_id
             WHERE p.subscriber_id = $1 GROUP BY p.external_id ORDER BY p.external_id",
            &[&(s as i32)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(events, [("bf-1".into(), 1), ("bf-2".into(), 1)]);
}

#[tokio::test]
async fn a_first_charge_found_by_the_reconcile_rejudges_its_earlier_renewal() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_007, json!({})).await;
    let (s, _, reference) = buyer_with_order(&app, 8_107, c).await;
    let renewal_at = secs(Utc::now() + Duration::days(30));
    // The first charge's update never arrived; the renewal's did.
    send(
        &app,
        &charge_update("rr-2", 8_107, &reference, false, renewal_at),
    )
    .await;
    assert_eq!(
        payment(&app, "rr-2").await.reason.as_deref(),
        Some("unknown_subscription")
    );
    // The reconcile finds the first charge, made a month ago.
    fake.add_incoming_payment_at(
        "rr-1",
        8_107,
        &reference,
        250,
        Utc::now() - Duration::days(30),
    );
    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 1, "{report:?}");
    assert_eq!(
        payment(&app, "rr-1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(
        payment(&app, "rr-2").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: true
        }
    );
    assert_eq!(
        subscription(&app, "rr-1").await.map(|s| (s.0, s.3)),
        Some(("active".into(), true))
    );
    let (status, expiry) = membership(&app, s, c).await;
    assert_eq!(status, "active");
    assert!(expiry >= renewal_at + Duration::days(1), "{expiry}");
    // Again: nothing new.
    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 0);
    assert_eq!(membership(&app, s, c).await.1, expiry);
}

#[tokio::test]
async fn the_reconcile_classifies_a_first_charge_and_its_renewal_as_door_3_would() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = recurring_channel(&app, -100_300_008, json!({})).await;
    let (_, order, reference) = buyer_with_order(&app, 8_108, c).await;
    // Neither update arrived; the list is newest first: the renewal, then the first charge a
    // month earlier.
    fake.add_incoming_payment("cl-2", 8_108, &reference, 250);
    fake.add_incoming_payment_at(
        "cl-1",
        8_108,
        &reference,
        250,
        Utc::now() - Duration::days(30),
    );
    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 2, "{report:?}");
    // The first charge starts the subscription (its id is what Telegram knows it by), the
    // other one renews it.
    assert_eq!(
        payment(&app, "cl-1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(
        payment(&app, "cl-2").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: true
        }
    );
    assert_eq!(
        subscription(&app, "cl-1").await,
        Some(("active".into(), None, None, true, order))
    );
    assert_eq!(subscription(&app, "cl-2").await, None);

    // A second subscription's first charge on the same paid order, minutes after the first
    // (two links paid): door 3 refunds it as already paid, and so does the reconcile.
    let (_, order2, reference2) = buyer_with_order(&app, 8_109, c).await;
    send(
        &app,
        &charge_update(
            "cl-3",
            8_109,
            &reference2,
            true,
            Utc::now() + Duration::days(30),
        ),
    )
    .await;
    fake.add_incoming_payment("cl-4", 8_109, &reference2, 250);
    recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(
        payment(&app, "cl-4").await,
        PaymentRow {
            outcome: "refund_pending".into(),
            reason: Some("already_paid".into()),
            renewal: false
        }
    );
    assert_eq!(
        subscription(&app, "cl-4").await,
        Some((
            "cancelled".into(),
            Some("subgate".into()),
            Some("already_paid".into()),
            false,
            order2
        ))
    );
}

#[tokio::test]
async fn a_late_first_charge_racing_its_repeats_and_the_reconcile_applies_the_early_renewal_once() {
    const ROUNDS: i64 = 10;
    let fake = FakeBot::start().await;
    let app = std::sync::Arc::new(app_with(&fake).await);
    let c = recurring_channel(&app, -100_300_010, json!({})).await;
    for round in 0..ROUNDS {
        let user = 8_200 + round;
        let (s, order, reference) = buyer_with_order(&app, user, c).await;
        let (f, r) = (format!("race-{round}-1"), format!("race-{round}-2"));
        let now = Utc::now();
        let renewal_at = secs(now + Duration::days(60));
        let renewal = charge_update(&r, user, &reference, false, renewal_at);
        send(&app, &renewal).await;
        let first = charge_update(&f, user, &reference, true, secs(now + Duration::days(30)));
        fake.add_incoming_payment(&f, user, &reference, 250);
        fake.add_incoming_payment(&r, user, &reference, 250);

        // The first charge twice, the renewal again and the reconcile, released together.
        let updates = [first.clone(), first, renewal];
        race(4, |i| {
            let (app, update) = (app.clone(), updates.get(i).cloned());
            async move {
                match update {
                    Some(update) => {
                        app.post_telegram_update(update).await.expect(200);
                    }
                    None => {
                        recovery::reconcile(&app.state.db, &app.state.config)
                            .await
                            .unwrap();
                    }
                }
            }
        })
        .await;

        assert_eq!(
            payment(&app, &f).await,
            PaymentRow {
                outcome: "applied".into(),
                reason: None,
                renewal: false
            }
        );
        assert_eq!(
            payment(&app, &r).await,
            PaymentRow {
                outcome: "applied".into(),
                reason: None,
                renewal: true
            }
        );
        let rows = app
            .db()
            .await
            .query(
                "SELECT p.external_id, count(ev.id) FROM payments p
                 LEFT JOIN membership_events ev ON ev.payment_id = p.id
                 WHERE p.order_id = $1 GROUP BY p.external_id ORDER BY p.external_id",
                &[&order],
            )
            .await
            .unwrap();
        let events: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(events, [(f.clone(), 1), (r.clone(), 1)], "round {round}");
        assert_eq!(
            membership(&app, s, c).await,
            ("active".into(), renewal_at + Duration::days(1)),
            "round {round}"
        );
        let subs: i64 = count(&app, "star_subscriptions WHERE order_id = $1", &[&order]).await;
        assert_eq!(subs, 1, "round {round}");
    }
}

#[tokio::test]
async fn a_refused_first_charge_delivered_three_times_at_once_and_reconciled_stops_once() {
    const ROUNDS: i64 = 10;
    let fake = FakeBot::start().await;
    let app = std::sync::Arc::new(app_with(&fake).await);
    let c = recurring_channel(&app, -100_300_011, json!({})).await;
    for round in 0..ROUNDS {
        let user = 8_300 + round;
        // The order is made while the channel sells; it closes before the charge arrives.
        app.patch(&format!("/api/channels/{c}"), json!({"active": true}))
            .await
            .expect(200);
        let (_, order, reference) = buyer_with_order(&app, user, c).await;
        app.patch(&format!("/api/channels/{c}"), json!({"active": false}))
            .await
            .expect(200);
        let charge = format!("ref-{round}");
        let update = charge_update(
            &charge,
            user,
            &reference,
            true,
            Utc::now() + Duration::days(30),
        );
        fake.add_incoming_payment(&charge, user, &reference, 250);
        // The update three times (tasks 0 to 2) and the reconcile (task 3).
        race(4, |i| {
            let (app, update) = (app.clone(), update.clone());
            async move {
                if i < 3 {
                    app.post_telegram_update(update).await.expect(200);
                } else {
                    recovery::reconcile(&app.state.db, &app.state.config)
                        .await
                        .unwrap();
                }
            }
        })
        .await;
        assert_eq!(
            payment(&app, &charge).await,
            PaymentRow {
                outcome: "needs_review".into(),
                reason: Some("channel_inactive".into()),
                renewal: false
            },
            "round {round}"
        );
        let counts: (i64, i64, i64) = {
            let r = app
                .db()
                .await
                .query_one(
                    "SELECT (SELECT count(*) FROM star_subscriptions WHERE order_id = $1
                               AND status = 'cancelled' AND cancelled_by = 'subgate'),
                            (SELECT count(*) FROM effects
                              WHERE kind = 'subscription_cancel' AND order_id = $1),
                            (SELECT count(*) FROM effects
                              WHERE kind = 'bot_message' AND order_id = $1)",
                    &[&order],
                )
                .await
                .unwrap();
            (r.get(0), r.get(1), r.get(2))
        };
        assert_eq!(counts, (1, 1, 1), "round {round}: rows, cancels, notices");
    }
}
